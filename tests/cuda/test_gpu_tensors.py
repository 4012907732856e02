"""ms.gpu tensors on the emulated device (MSHADOW_CUDA=emulate; on a real GPU where there is
one): allocation with mshadow's pitch rule, copies between every pair of devices honouring
both pitches, element-wise assignments (one kernel of mshadow/cuda/lower.py per structure)
storing the CPU backend's bits, and the device errors. numpy and the CPU backend are the
oracles."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import cuda, engine
from mshadow.dtypes import DTYPES
from mshadow.ir import SAVER_TABLE

from gpu_testing import gpu_device, gpu_from  # noqa: F401  (gpu_device: autouse)


@pytest.mark.parametrize("shape, pad", [((3, 70), True), ((3, 70), False), ((2, 3, 100), True),
                                        ((7,), True), ((5, 63), True), ((1, 1), True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.float16])
def test_allocation_pitch_and_round_trip(shape, pad, dtype):
    """Rows of 64 elements or more are pitched when pad (AllocSpace<gpu>'s rule); a copy up
    and back returns the bits, whatever the two pitches."""
    a = (np.arange(int(np.prod(shape))) * 7 % 251).astype(dtype).reshape(shape)
    t = gpu_from(a, pad)
    assert t.device is ms.gpu and t.shape == shape
    if pad and len(shape) > 1 and shape[-1] >= 64:
        assert t.stride * a.itemsize % 512 == 0 and t.stride >= shape[-1]
    else:
        assert t.stride == shape[-1]
    np.testing.assert_array_equal(t.to_numpy(), a)
    host = ms.new_tensor(shape, 0, dtype=dtype, pad=True)     # a pitched cpu destination
    ms.copy(host, t)
    np.testing.assert_array_equal(host.numpy(), a)


def test_new_tensor_init_and_gpu_to_gpu_copies_of_views():
    t = ms.new_tensor((4, 80), 2.5, device=ms.gpu, pad=True)
    np.testing.assert_array_equal(t.to_numpy(), np.full((4, 80), 2.5, np.float32))
    a = np.arange(4 * 80, dtype=np.float32).reshape(4, 80)
    src = gpu_from(a)
    dst = ms.new_tensor((2, 80), 0, device=ms.gpu, pad=False)
    ms.copy(dst, src.slice(1, 3))
    np.testing.assert_array_equal(dst.to_numpy(), a[1:3])
    ms.copy(src.slice(0, 3), src.slice(1, 4))         # overlapping rows of one buffer
    want = a.copy()
    want[0:3] = a[1:4]
    np.testing.assert_array_equal(src.to_numpy(), want)


def _tree(rng, mk, shape, depth):
    """A random element-wise expression over tensors made by ``mk`` (same draws, same tree)."""
    if depth == 0 or rng.rand() < 0.25:
        if rng.rand() < 0.2:
            return float(rng.uniform(-2, 2))
        return mk(rng.uniform(-3, 3, size=shape).astype(np.float32))
    kind = rng.randint(5)
    a = _tree(rng, mk, shape, depth - 1)
    if kind == 0:
        return ms.F(ms.op.exp, a if not isinstance(a, float) else mk(np.full(shape, a, np.float32)))
    b = _tree(rng, mk, shape, depth - 1)
    if isinstance(a, float) and isinstance(b, float):
        b = mk(np.full(shape, b, np.float32))
    return [lambda: a + b, lambda: a - b, lambda: a * b, lambda: ms.F(ms.op.maximum, a, b)
            if not (isinstance(a, float) or isinstance(b, float)) else a * b][kind - 1]()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("saver", [s.name for s in SAVER_TABLE])
def test_random_element_wise_assignments_store_the_cpu_bits(seed, saver):
    shape = [(3, 70), (5, 7), (2, 3, 65)][seed % 3]
    cpu = _tree(np.random.RandomState(seed), lambda a: ms.from_numpy(a), shape, 3)
    gpu = _tree(np.random.RandomState(seed), gpu_from, shape, 3)
    if isinstance(cpu, float):
        pytest.skip("a scalar tree")
    start = np.random.RandomState(99).uniform(1, 2, size=shape).astype(np.float32)
    d_cpu, d_gpu = ms.from_numpy(start.copy()), gpu_from(start)
    with np.errstate(all="ignore"):
        engine.assign(d_cpu, cpu, saver)      # (what dst[:] = e, dst += e, ... call)
        engine.assign(d_gpu, gpu, saver)
    np.testing.assert_array_equal(d_gpu.to_numpy().view(np.uint32), d_cpu.numpy().view(np.uint32))


@pytest.mark.parametrize("dtype", [d.np for d in DTYPES])
def test_every_dtype_with_a_scalar_and_a_transposed_leaf(dtype):
    rng = np.random.RandomState(3)
    a = (rng.uniform(0, 50, size=(6, 6))).astype(dtype)
    b = (rng.uniform(0, 50, size=(6, 6))).astype(dtype)
    want = ms.new_tensor((6, 6), 0, dtype=dtype)
    want[:] = ms.from_numpy(a) * 2 + ms.from_numpy(b).T
    got = ms.new_tensor((6, 6), 0, dtype=dtype, device=ms.gpu)
    got[:] = gpu_from(a) * 2 + gpu_from(b).T
    np.testing.assert_array_equal(got.to_numpy(), want.numpy())


def test_mixing_devices_and_host_views_are_device_errors():
    c = ms.new_tensor((3, 4), 1)
    g = ms.new_tensor((3, 4), 1, device=ms.gpu)
    with pytest.raises(ms.DeviceError, match="different devices .*gpu.*cpu|cpu.*gpu"):
        g[:] = c * 2
    with pytest.raises(ms.DeviceError, match="gpu"):
        c[:] = g * 2
    with pytest.raises(ms.DeviceError, match="has no host view"):
        g.numpy()
    with pytest.raises(ms.DeviceError, match="has no host view"):
        np.asarray(g)
    with pytest.raises(ms.DeviceError, match="samples uniform and gaussian"):
        ms.Random(ms.gpu, 0).sample_gamma(g)     # (not on the GPU: docs/gpu.md)
    np.testing.assert_array_equal(c.numpy(), np.ones((3, 4), np.float32))


def test_freed_gpu_tensor_raises_and_the_memory_goes_back():
    g = ms.new_tensor((3, 70), 1, device=ms.gpu, pad=True)
    v = g.slice(0, 1)
    ms.free_space(g)
    with pytest.raises(ms.FreedTensorError):
        g[:] = 2
    with pytest.raises(ms.FreedTensorError):
        ms.copy(ms.new_tensor((1, 70)), v)
    with pytest.raises(ms.FreedTensorError):
        ms.free_space(g)


def test_str_copies_to_the_host():
    g = ms.new_tensor((2, 3), 4, device=ms.gpu)
    assert str(g) == str(np.full((2, 3), 4, np.float32))
    assert "gpu" in repr(g)


def _both(make, shape_out, dtype=np.float32, *arrays):
    """``make(*tensors)`` evaluated into a cpu and a gpu destination from the same arrays."""
    cpu = ms.new_tensor(shape_out, 0, dtype=dtype)
    cpu[:] = make(*[ms.from_numpy(a) for a in arrays])
    gpu = ms.new_tensor(shape_out, 0, dtype=dtype, device=ms.gpu, pad=True)
    gpu[:] = make(*[gpu_from(a) for a in arrays])
    return cpu.numpy(), gpu.to_numpy()


_RNG = np.random.RandomState(7)
_A = _RNG.uniform(-2, 2, size=(2, 3, 9, 70)).astype(np.float32)
_I = np.array([3, 0, 69, 5, 5, 1], np.int32)
GATHERS_AND_VIEWS = {
    "flip": (lambda a: ms.flip(a, 2) * 2, (2, 3, 9, 70), (_A,)),
    "broadcast_with_axis": (lambda a: ms.broadcast_with_axis(a[0][0], -1, 4) + 1, (4, 9, 70),
                            (_A,)),
    "pad": (lambda a: ms.pad(ms.F(ms.op.relu, a), 2), (2, 3, 13, 74), (_A,)),
    "pool": (lambda a: ms.pool(a * 2 - 1, 3, 3, 2, 2, ms.red.sum), (2, 3, 4, 34), (_A,)),
    "im2col": (lambda a: ms.unpack_patch2col(a, 3, 3, 1), (27, 2 * 7 * 68), (_A,)),
    "take": (lambda a, i: ms.take(i, a * 2), (6, 9), (_A[0, 0].T.copy(), _I)),
    "concat": (lambda a: ms.concat(a, a * 3, 3), (2, 3, 9, 140), (_A,)),
}


@pytest.mark.parametrize("name", sorted(GATHERS_AND_VIEWS))
def test_views_and_gathers_store_the_cpu_bits(name):
    make, shape, arrays = GATHERS_AND_VIEWS[name]
    want, got = _both(make, shape, np.float32, *arrays)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_an_index_out_of_range_stores_nothing():
    src = gpu_from(np.arange(40, dtype=np.float32).reshape(10, 4))
    idx = gpu_from(np.array([1, 10, 2], np.int32))
    dst = ms.new_tensor((3, 4), 7, device=ms.gpu)
    with pytest.raises(IndexError, match=r"take: index values must lie in \[0, 10\), got \[1, 10\]"):
        dst[:] = ms.take(idx, src)
    np.testing.assert_array_equal(dst.to_numpy(), np.full((3, 4), 7, np.float32))


ALIASED = {
    "transpose": (lambda x: x.T * 1.0, "saveto"),
    "transpose_plus": (lambda x: x.T + x, "plusto"),
    "flip": (lambda x: ms.flip(x, 0) - x, "saveto"),
    "concat_swap": (lambda x: ms.concat(x.slice(35, 70), x.slice(0, 35), 0), "multo"),
    "same_elements": (lambda x: x * 2 + 1, "minusto"),
}


@pytest.mark.parametrize("name", sorted(ALIASED))
def test_a_destination_read_at_other_positions_goes_through_a_temporary(name):
    """x[:] = x.T and the like: the destination is read where other elements are written;
    the GPU result is the CPU's (which evaluates through a temporary), bit for bit."""
    make, saver = ALIASED[name]
    a = np.random.RandomState(5).uniform(-2, 2, size=(70, 70)).astype(np.float32)
    c, g = ms.from_numpy(a.copy()), gpu_from(a)
    engine.assign(c, make(c), saver)
    engine.assign(g, make(g), saver)
    np.testing.assert_array_equal(g.to_numpy().view(np.uint32), c.numpy().view(np.uint32))


def test_free_space_racing_assignments_defers_never_a_bad_launch():
    """Another thread frees an operand while assignments run: each either completes or
    raises FreedTensorError before anything is launched; the free waits for the launch
    (the operands are pinned from their addresses to the launch), so no launch meets freed
    memory (the emulated device refuses one with CudaError)."""
    import sys
    import threading
    import time
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors, done = [], 0
    try:
        for trial in range(30):
            h = ms.new_tensor((8, 64), 1, device=ms.gpu)
            g = ms.new_tensor((8, 64), 0, device=ms.gpu)
            g[:] = h * 2                       # compiled before the race
            stop = threading.Event()

            def worker():
                nonlocal done
                try:
                    while not stop.is_set():
                        g[:] = h * 2 + g
                        done += 1
                except ms.FreedTensorError:
                    pass
                except Exception as e:          # noqa: BLE001 - what the test looks for
                    errors.append(repr(e))
            t = threading.Thread(target=worker)
            t.start()
            time.sleep(0.001 * (trial % 5))
            ms.free_space(h)
            stop.set()
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == [] and done > 0


_X = np.random.RandomState(11).uniform(-3, 3, size=(3, 5, 70)).astype(np.float32)
REDUCTIONS = {
    "sum_rows": (lambda x: ms.sum_rows(ms.reshape(x, (15, 70))),
                 (70,)),
    "sumall_except_dim_1": (lambda x: ms.sumall_except_dim(x * 2 + 1, 1), (5,)),
    "with_axis_max": (lambda x: ms.reduce_with_axis(x, 2, ms.red.maximum), (3, 5)),
    "with_axis_min_expr": (lambda x: ms.reduce_with_axis(ms.F(ms.op.exp, x), 0, ms.red.minimum),
                           (5, 70)),
    "keepdim_sum": (lambda x: ms.reduce_keepdim(x, 1, ms.red.sum), (3, 1, 70)),
    "argmax": (lambda x: ms.reduce_with_axis(x, 2, ms.red.maximum, mask=True), (3, 5)),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("saver", ["saveto", "plusto"])
def test_reductions_match_the_cpu(name, saver):
    """A block an output element, folded by warps: maximum, minimum and arg forms bit for
    bit with the CPU, sums within their summation order (docs/reduce_nn.md)."""
    make, shape = REDUCTIONS[name]
    start = np.random.RandomState(2).uniform(1, 2, size=shape).astype(np.float32)
    c, g = ms.from_numpy(start.copy()), gpu_from(start)
    engine.assign(c, make(ms.from_numpy(_X)), saver)
    engine.assign(g, make(gpu_from(_X)), saver)
    if "sum" in name:
        np.testing.assert_allclose(g.to_numpy(), c.numpy(), rtol=2e-6, atol=2e-5)
    else:
        np.testing.assert_array_equal(g.to_numpy(), c.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lt, rt", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("saver", ["saveto", "plusto", "minusto"])
def test_dot_and_batch_dot_through_cublas(dtype, lt, rt, saver):
    """dot and batch_dot of gpu tensors (pitched, transposed operands, a scale) against the
    CPU's BLAS, every saver with a BLAS form."""
    rng = np.random.RandomState(4)
    m, k, n = 5, 70, 66
    a = rng.standard_normal((k, m) if lt else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if rt else (k, n)).astype(dtype)
    start = rng.standard_normal((m, n)).astype(dtype)

    def product(x, y):
        return ms.dot(x.T if lt else x, y.T if rt else y) * 0.5
    c, g = ms.from_numpy(start.copy()), gpu_from(start)
    engine.assign(c, product(ms.from_numpy(a), ms.from_numpy(b)), saver)
    engine.assign(g, product(gpu_from(a), gpu_from(b)), saver)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g.to_numpy(), c.numpy(), **tol)
    A = rng.standard_normal((3,) + ((k, m) if lt else (m, k))).astype(dtype)
    B = rng.standard_normal((3,) + ((n, k) if rt else (k, n))).astype(dtype)
    c3 = ms.new_tensor((3, m, n), 0, dtype=dtype)
    g3 = ms.new_tensor((3, m, n), 0, dtype=dtype, device=ms.gpu, pad=True)
    engine.assign(c3, ms.batch_dot(ms.from_numpy(A), ms.from_numpy(B), lt, rt), saver)
    engine.assign(g3, ms.batch_dot(gpu_from(A), gpu_from(B), lt, rt), saver)
    np.testing.assert_allclose(g3.to_numpy(), c3.numpy(), **tol)


@pytest.mark.parametrize("saver", ["saveto", "plusto"])
def test_dot_of_an_expression_operand_on_the_gpu(saver):
    """dot(w, unpack_patch2col(pad(x, 1), 3, 3, 1)) and dot(a * 2, b) of gpu operands: the
    expression is evaluated into a gpu temporary, then cuBLAS; the CPU's panels agree."""
    rng = np.random.RandomState(6)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 27)).astype(np.float32)
    start = rng.standard_normal((4, 2 * 9 * 8)).astype(np.float32)
    c, g = ms.from_numpy(start.copy()), gpu_from(start)
    engine.assign(c, ms.dot(ms.from_numpy(w), ms.unpack_patch2col(ms.pad(ms.from_numpy(x), 1),
                                                                  3, 3, 1)), saver)
    engine.assign(g, ms.dot(gpu_from(w), ms.unpack_patch2col(ms.pad(gpu_from(x), 1), 3, 3, 1)),
                  saver)
    np.testing.assert_allclose(g.to_numpy(), c.numpy(), rtol=1e-5, atol=1e-4)
    a, b = w, rng.standard_normal((27, 5)).astype(np.float32)
    g2 = ms.new_tensor((4, 5), 0, device=ms.gpu, pad=True)
    g2[:] = ms.dot(gpu_from(a) * 2, gpu_from(b))
    np.testing.assert_allclose(g2.to_numpy(), (a.astype(np.float64) * 2) @ b, rtol=1e-5,
                               atol=1e-4)
    with pytest.raises(ms.DeviceError):
        ms.dot(gpu_from(a), ms.from_numpy(b) * 2)


def test_a_product_into_one_of_its_operands_goes_through_a_temporary():
    a = np.random.RandomState(1).standard_normal((6, 6)).astype(np.float32)
    c, g = ms.from_numpy(a.copy()), gpu_from(a)
    c -= ms.dot(c, c.T)
    g -= ms.dot(g, g.T)
    np.testing.assert_allclose(g.to_numpy(), c.numpy(), rtol=1e-5, atol=1e-5)
    c[:] = ms.dot(c, c.T)               # saveto: the temporary is stored as it is
    g[:] = ms.dot(g, g.T)
    np.testing.assert_allclose(g.to_numpy(), c.numpy(), rtol=1e-4, atol=1e-4)


def test_batch_gemm_alpha_beta_on_the_gpu():
    rng = np.random.RandomState(8)
    A, B = (rng.standard_normal((2, 4, 7)).astype(np.float64) for _ in range(2))
    C = rng.standard_normal((2, 4, 4)).astype(np.float64)
    c, g = ms.from_numpy(C.copy()), gpu_from(C)
    ms.batch_gemm(c, ms.from_numpy(A), ms.from_numpy(B), 1.5, -0.5, False, True)
    ms.batch_gemm(g, gpu_from(A), gpu_from(B), 1.5, -0.5, False, True)
    np.testing.assert_allclose(g.to_numpy(), c.numpy(), rtol=1e-12, atol=1e-12)
    d = ms.new_tensor((A.shape[1],), 0, dtype=np.float64, device=ms.gpu)    # gemv too
    d[:] = ms.dot(gpu_from(A[0]), gpu_from(B[0, 0]))
    np.testing.assert_allclose(d.to_numpy(), A[0] @ B[0, 0], rtol=1e-12)


def test_gpu_memory_is_freed_after_the_device_has_finished(monkeypatch):
    """A collected gpu tensor (a temporary, a dropped operand) may still be read by a kernel
    queued before: its memory goes back only after the device has finished, as free_space's
    does (cuMemFree only "may" wait)."""
    import gc
    gc.collect()     # earlier tests' garbage (a traceback's frames holding gpu tensors) first
    calls = []
    monkeypatch.setattr(cuda.driver(), "synchronize", lambda device=0: calls.append(device))
    t = ms.new_tensor((4, 70), 1, device=ms.gpu)
    v = t.slice(0, 1)
    del t
    gc.collect()
    assert calls == []            # the view keeps the memory
    del v
    gc.collect()
    assert calls == [0]
    u = ms.new_tensor((2, 3), 1, device=ms.gpu)
    ms.free_space(u)
    assert calls == [0, 0]
    del u
    gc.collect()
    assert calls == [0, 0]        # freed once


@pytest.mark.parametrize("shape, pad", [((3, 70), True), ((3, 70), False), ((2, 3, 100), True),
                                        ((7,), True)])
def test_cuda_array_interface_describes_the_pitched_memory(shape, pad):
    """Version 3 of the CUDA Array Interface: the device address, the dtype, byte strides
    (None when rows are not pitched) and the legacy default stream; reading the memory it
    names back (the driver's copy from that address) gives the values. Once handed out, the
    memory is never released by free_space (the consumer cannot say when it is done)."""
    a = (np.arange(int(np.prod(shape))) * 3 % 97).astype(np.float32).reshape(shape)
    t = gpu_from(a, pad)
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == shape and cai["typestr"] == "<f4"
    assert cai["data"] == (t.dptr, False) and cai["stream"] == 1
    if t.stride == shape[-1]:
        assert cai["strides"] is None
    else:
        pitch = t.stride * 4
        assert cai["strides"] == ((3 * pitch, pitch, 4) if len(shape) == 3 else (pitch, 4))
    rows = int(np.prod(shape[:-1]))
    pitch = (cai["strides"] or (shape[-1] * 4,) * 2)[-2] if len(shape) > 1 else shape[-1] * 4
    back = np.zeros(shape, np.float32)                    # what a consumer reads there
    cuda.driver().copy_2d(back.ctypes.data, shape[-1] * 4, False, cai["data"][0], pitch, True,
                          shape[-1] * 4, rows)
    np.testing.assert_array_equal(back, a)
    view = t[1:] if len(shape) > 1 else t
    assert view.__cuda_array_interface__["data"][0] == view.dptr
    with pytest.raises(BufferError, match="__cuda_array_interface__"):
        ms.free_space(t)
    np.testing.assert_array_equal(t.to_numpy(), a)          # still there, still usable
    t[:] = t * 2
    np.testing.assert_array_equal(t.to_numpy(), a * 2)


def test_cpu_tensors_have_no_cuda_array_interface():
    # (gpu tensors' DLPack: test_gpu_dlpack.py)
    c = ms.new_tensor((2, 3), 0)
    assert not hasattr(c, "__cuda_array_interface__")
    assert c.__dlpack_device__() == (1, 0)
    g = gpu_from(np.ones((2, 3), np.float32))
    assert g.__dlpack_device__() == (2, 0)


@pytest.mark.parametrize("pad", [True, False])
def test_tensor_container_on_the_gpu_holds_device_memory(pad):
    """A gpu TensorContainer allocates device memory with AllocSpace<gpu>'s pitch rule (it
    took host memory labelled gpu: its first kernel read an illegal address), fills its
    init by a kernel, keeps its block when a resize fits and takes a new one when not."""
    c = ms.TensorContainer((3, 100), init=1.5, pad=pad, device=ms.gpu)
    assert c.device is ms.gpu
    assert c.stride * 4 % 512 == 0 if pad else c.stride == 100
    np.testing.assert_array_equal(c.to_numpy(), np.full((3, 100), 1.5, np.float32))
    c[:] = c * 2 + 1                                  # a kernel reads and writes it
    np.testing.assert_array_equal(c.to_numpy(), np.full((3, 100), 4, np.float32))
    first = c.dptr
    c.resize((2, 90), init=7)                         # fits: the same block
    assert c.dptr == first and c.shape == (2, 90)
    np.testing.assert_array_equal(c.to_numpy(), np.full((2, 90), 7, np.float32))
    c.resize((4, 300))                                # does not: a new block
    c[:] = 3
    np.testing.assert_array_equal(c.to_numpy(), np.full((4, 300), 3, np.float32))
    d = c.copy()
    assert d.device is ms.gpu and d.dptr != c.dptr
    np.testing.assert_array_equal(d.to_numpy(), c.to_numpy())
    c.release()
    assert c.shape == (0, 300)
    assert ms.TensorContainer((2, 3), device=ms.gpu).to_numpy().tolist() == [[0] * 3] * 2


@pytest.mark.parametrize("shape", [(7,), (3, 50, 70), (0, 5), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8])
def test_sum_of_a_gpu_expression_is_a_host_scalar(shape, dtype):
    """ms.sum of a gpu expression reduces on the GPU (every axis but the first, then that
    one, in the compute type) and returns a numpy scalar of the dtype; float16 accumulates
    in float32 and is rounded once; integers wrap as on the CPU."""
    rng = np.random.default_rng(4)
    a = (rng.uniform(-2, 2, shape) if np.dtype(dtype).kind == "f"
         else rng.integers(-100, 100, shape)).astype(dtype)
    x = gpu_from(a)
    got = ms.sum(x * 2)
    assert type(got) is np.dtype(dtype).type
    cpu = ms.sum(ms.from_numpy(a) * 2)
    if np.dtype(dtype).kind == "i":
        assert got == cpu == (a.astype(np.int64) * 2).sum().astype(dtype)
    else:
        exact = (a * np.asarray(2, dtype)).astype(np.float64).sum()
        tol = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
        assert abs(float(got) - exact) <= tol * max(1.0, np.abs(a).sum() * 2)
        assert abs(float(got) - float(cpu)) <= tol * max(1.0, np.abs(a).sum() * 2)


def test_sum_of_mixed_devices_names_both():
    g = gpu_from(np.ones((2, 3), np.float32))
    with pytest.raises(ms.DeviceError, match="gpu.*cpu|cpu.*gpu"):
        ms.sum(g + ms.from_numpy(np.ones((2, 3), np.float32)))


def test_reading_the_interface_keeps_the_memory_and_a_container_unchanged():
    """Reading __cuda_array_interface__ (hasattr too) keeps the memory: free_space and a
    container's growing resize refuse before anything changes; a resize that fits still
    works."""
    t = ms.new_tensor((3, 3), 1, device=ms.gpu)
    assert hasattr(t, "__cuda_array_interface__")
    with pytest.raises(BufferError, match="hasattr included"):
        ms.free_space(t)
    c = ms.TensorContainer((2, 70), init=4, device=ms.gpu)
    c.__cuda_array_interface__
    with pytest.raises(BufferError, match="__cuda_array_interface__"):
        c.resize((40, 300))
    assert c.shape == (2, 70)
    np.testing.assert_array_equal(c.to_numpy(), np.full((2, 70), 4, np.float32))
    c.resize((1, 70), init=5)
    np.testing.assert_array_equal(c.to_numpy(), np.full((1, 70), 5, np.float32))


def test_a_gpu_container_fills_its_init_as_new_tensor_does():
    """A fractional init of an integer container: truncated as new_tensor and the cpu
    container do (it raised DTypeError, and a resize raised after reallocating)."""
    want = ms.TensorContainer((2,), init=2.5, dtype=np.int32).numpy()
    c = ms.TensorContainer((2,), init=2.5, dtype=np.int32, device=ms.gpu)
    np.testing.assert_array_equal(c.to_numpy(), want)
    c.resize((5,), init=-3.5)
    np.testing.assert_array_equal(c.to_numpy(), np.full(5, -3, np.int32))


def test_reductions_over_a_gpu_view_of_an_expression_are_device_errors():
    """Not lowered on the GPU yet: a DeviceError saying so, before the overlap check read
    the view's memoryless handle (it raised FreedTensorError)."""
    x = ms.new_tensor((4, 6), 1, device=ms.gpu)
    r = ms.new_tensor((8,), 7, device=ms.gpu)
    with pytest.raises(ms.DeviceError, match="view of an expression"):
        ms.sum(ms.flip(ms.pad(x, 1), 0))
    with pytest.raises(ms.DeviceError, match="view of an expression"):
        r[:] = ms.sum_rows(ms.flip(ms.pad(x, 1), 0))
    np.testing.assert_array_equal(r.to_numpy(), np.full(8, 7, np.float32))


def test_gpu_memory_collected_in_a_cycle_is_freed_as_device_memory(run_child):
    """Regression: the collector of a reference cycle cleared an Allocation's device memory
    before its __dealloc__ read it, which then freed the device address as host memory and
    crashed the interpreter (a view of an expression staged on the GPU made such cycles).
    The allocation is made before the view that holds it, so the collector reaches it
    first; its memory goes back to the device."""
    code = """
import gc, numpy as np, mshadow as ms
from mshadow import cuda
drv = cuda.driver()
live = lambda: len(drv._LIVE) if hasattr(drv, "_LIVE") else 0
before = live()
for i in range(50):
    a = ms.new_tensor((4, 70), 1.0, device=ms.gpu)
    v = a[1:3]
    del a
    cycle = [v]
    cycle.append(cycle)
    del v, cycle
    gc.collect()
print("live", live() - before)
"""
    r = run_child(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "live 0" in r.stdout, r.stdout
