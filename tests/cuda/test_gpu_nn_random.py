"""nn.softmax and Random on gpu tensors: the CUDA lowering's softmax and Philox kernels
(mshadow/cuda/lower.py emit_softmax, emit_random) bound to gpu tensors. Softmax gives the
CPU kernel's bits; the samplers are the numpy Philox of test_cuda_emit_random, bit for bit
for uniform draws, in the tensor's logical order whatever its pitch."""
import numpy as np
import pytest

import mshadow as ms

from gpu_testing import gpu_device, gpu_from, store  # noqa: F401  (gpu_device: autouse)
from test_cuda_emit_random import expected, words

FLOATS = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(7,), (5, 70), (33, 1), (3, 1000)])
def test_softmax_gives_the_cpu_bits(dtype, shape):
    e = (np.random.default_rng(1).standard_normal(shape) * 4).astype(dtype)
    e.flat[0] = 30                      # a large value: the max is subtracted
    want = ms.new_tensor(shape, dtype=dtype)
    ms.softmax(want, ms.from_numpy(e))
    for pad in (True, False):
        src, dst = gpu_from(e, pad), ms.new_tensor(shape, np.nan, dtype=dtype, device=ms.gpu,
                                                    pad=pad)
        ms.softmax(dst, src)
        assert dst.to_numpy().tobytes() == want.numpy().tobytes(), pad
        ms.softmax(src, src)            # in place
        assert src.to_numpy().tobytes() == want.numpy().tobytes(), pad
    ref = np.exp(e.astype(np.float64) - e.max(-1, keepdims=True))
    np.testing.assert_allclose(want.numpy(), ref / ref.sum(-1, keepdims=True),
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-30)


def test_softmax_into_an_overlapping_view_goes_through_a_temporary():
    e = np.random.default_rng(2).standard_normal((6, 40)).astype(np.float32)
    t = gpu_from(e)
    want = ms.new_tensor((5, 40))
    ms.softmax(want, ms.from_numpy(e[:5]))
    ms.softmax(t[1:], t[:5])            # row i written while row i + 1 is read
    np.testing.assert_array_equal(t.to_numpy()[1:], want.numpy())
    np.testing.assert_array_equal(t.to_numpy()[0], e[0])


def test_softmax_on_the_gpu_refuses_what_it_does_not_run_and_stores_nothing():
    h = gpu_from(np.ones((2, 70), np.float16))
    with pytest.raises(ms.DeviceError, match="float32 or float64"):
        ms.softmax(h, h)
    np.testing.assert_array_equal(h.to_numpy(), 1)
    g, c = gpu_from(np.ones((2, 70), np.float32)), ms.new_tensor((2, 70), 1.0)
    with pytest.raises(ms.DeviceError, match=r"(?s)cpu.*gpu|gpu.*cpu"):
        ms.softmax(g, c)
    np.testing.assert_array_equal(g.to_numpy(), 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_is_the_philox_stream_of_the_seed_and_continues(dtype):
    code = "f32" if dtype == np.float32 else "f64"
    r = ms.Random(ms.gpu, 1234, dtype)
    t = ms.new_tensor((5, 70), device=ms.gpu, dtype=dtype, pad=True)
    assert t.stride > 70
    r.sample_uniform(t, -2, 3)
    first = expected("uniform", code, 350, 1234, 0, -2, 3).reshape(5, 70)
    assert t.to_numpy().tobytes() == first.astype(dtype).tobytes()
    per = 4 if code == "f32" else 2
    u = ms.new_tensor((3, 9), device=ms.gpu, dtype=dtype, pad=False)
    r.sample_uniform(u, 0, 1)           # from the counters the first fill left
    later = expected("uniform", code, 27, 1234, -(-350 // per), 0, 1).reshape(3, 9)
    assert u.to_numpy().tobytes() == later.astype(dtype).tobytes()
    r.seed(1234)                        # seed restarts the stream
    again = ms.new_tensor((5, 70), device=ms.gpu, dtype=dtype, pad=False)
    r.sample_uniform(again, -2, 3)
    assert again.to_numpy().tobytes() == t.to_numpy().tobytes()
    assert r.get_seed() == 1234


def test_get_rand_int_fills_raw_words_of_the_stream():
    """GetRandInt(Tensor<gpu>): each element a word of the Philox stream (int64 its value,
    int32 its bits), continued by the samplers after it; a float32 uniform draw is its
    word >> 8."""
    r = ms.Random(ms.gpu, 99)
    a = ms.new_tensor((3, 70), device=ms.gpu, dtype=np.int64, pad=True)
    assert r.get_rand_int(a) is a
    w = words(210, 4, 99, 0)[:, 0].reshape(3, 70)
    np.testing.assert_array_equal(a.to_numpy(), w.astype(np.int64))
    b = ms.new_tensor((5,), device=ms.gpu, dtype=np.int32)
    r.get_rand_int(b)                                   # from counter 210 / 4 on
    np.testing.assert_array_equal(b.to_numpy(), words(5, 4, 99, 53)[:, 0].astype(
        np.uint32).view(np.int32))
    u = ms.new_tensor((4,), device=ms.gpu)
    r.sample_uniform(u)                                 # counter 55: after the 5 draws
    want = (words(4, 4, 99, 55)[:, 0] >> np.uint64(8)).astype(np.float32) * np.float32(2 ** -24)
    assert u.to_numpy().tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", FLOATS)
def test_gaussian_has_its_mean_and_deviation(dtype):
    r = ms.Random(ms.gpu, 5, dtype)
    t = ms.new_tensor((301, 257), device=ms.gpu, dtype=dtype)
    r.sample_gaussian(t, 1.5, 2.0)
    a = t.to_numpy()
    assert np.isfinite(a).all() and abs(a.mean() - 1.5) < 0.02 and abs(a.std() - 2.0) < 0.02
    r.sample_gaussian(t, 0.25, -1)      # sigma <= 0 fills mu, as mshadow
    np.testing.assert_array_equal(t.to_numpy(), 0.25)
    g = r.gaussian((4, 6), 0, 1)        # the buffer form: a gpu tensor
    assert g.device is ms.gpu and g.shape == (4, 6)
    assert r.uniform((4, 6)) is g       # the same buffer, overwritten (as mshadow)


def test_a_gpu_random_refuses_what_it_does_not_draw():
    r = ms.Random(ms.gpu, 0)
    t = ms.new_tensor((2, 3), 7.0, device=ms.gpu)
    for call, match in ((lambda: r.sample_gamma(t), "uniform and gaussian"),
                        (lambda: r.get_rand_int(), "uniform and gaussian"),
                        (lambda: r.get_rnd_engine(), "uniform and gaussian"),
                        (lambda: r.sample_uniform(ms.new_tensor((2, 3))), "cpu"),
                        (lambda: ms.Random(ms.gpu, 0, np.float16).sample_uniform(
                            ms.new_tensor((2, 3), device=ms.gpu, dtype=np.float16)),
                         "float32 and float64"),
                        (lambda: ms.Random(ms.cpu, 0).sample_uniform(t), "gpu"),
                        (lambda: r.set_stream(ms.new_stream(ms.cpu)), r"Stream\(gpu\)")):
        with pytest.raises(ms.DeviceError, match=match):
            call()
    with pytest.raises(ms.DTypeError):
        r.sample_uniform(ms.new_tensor((2, 3), device=ms.gpu, dtype=np.float64))
    with pytest.raises(ms.DTypeError, match="int32 or int64, got float32"):
        r.get_rand_int(t)
    with pytest.raises(ValueError, match="a <= b"):
        r.sample_uniform(t, 2, 1)
    np.testing.assert_array_equal(t.to_numpy(), 7.0)     # nothing stored
    assert r._counter == 0


def test_a_gpu_random_samples_on_its_stream(monkeypatch):
    from mshadow import cuda
    drv = cuda.driver()
    seen = []
    launch = drv.Function.launch

    def watch(self, grid, block, args, shared_mem=0, stream=None):
        seen.append(stream)
        return launch(self, grid, block, args, shared_mem, stream)
    monkeypatch.setattr(drv.Function, "launch", watch)
    s, ts = ms.new_stream(ms.gpu), ms.new_stream(ms.gpu)
    r = ms.Random(ms.gpu, 3)
    t = ms.new_tensor((2, 3), device=ms.gpu, stream=ts)
    seen.clear()
    r.sample_uniform(t)                 # no stream of its own: the tensor's
    r.set_stream(s)
    r.sample_uniform(t)
    assert seen == [ts.queue.stream, s.queue.stream]


def _vector_forms(rng, dtype):
    """(name, lhs, rhs, numpy result) of dot's forms with a 1-D operand."""
    M = rng.standard_normal((5, 70)).astype(dtype)      # 70 wide: pitched on the gpu
    u5, u70 = rng.standard_normal(5).astype(dtype), rng.standard_normal(70).astype(dtype)
    return [("row x matrix.T", (u70, False), (M, True), u70 @ M.T),
            ("row x matrix", (u5, False), (M, False), u5 @ M),
            ("matrix x column", (M, False), (u70, False), M @ u70),
            ("matrix.T x column", (M, True), (u5, False), M.T @ u5),
            ("inner", (u70, False), (u70 * 2, False), np.array([u70 @ (u70 * 2)])),
            ("outer", (u5, True), (u70, False), np.outer(u5, u70))]


@pytest.mark.parametrize("dtype", FLOATS)
def test_products_with_vectors_on_the_gpu(dtype):
    """dot's forms with a 1-D operand (gemv, the inner and the outer product) through cuBLAS:
    numpy the oracle, every saver and a scale, pitched matrices; VectorDot too."""
    rng = np.random.default_rng(6)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for name, (a, ta), (b, tb), want in _vector_forms(rng, dtype):
        A, B = gpu_from(a), gpu_from(b)
        A, B = (A.T if ta else A), (B.T if tb else B)
        for saver, init, expect in (("=", 9.0, want * 2), ("+=", 1.0, 1 + want * 2),
                                    ("-=", 1.0, 1 - want * 2)):
            d = store(ms.new_tensor(want.shape, init, dtype=dtype, device=ms.gpu),
                      ms.dot(A, B) * 2, saver)
            np.testing.assert_allclose(d.to_numpy(), expect, **tol, err_msg=f"{name} {saver}")
    u, v = rng.standard_normal(33).astype(dtype), rng.standard_normal(33).astype(dtype)
    d = ms.new_tensor((1,), 5.0, dtype=dtype, device=ms.gpu)
    ms.vector_dot(d, gpu_from(u), gpu_from(v))
    np.testing.assert_allclose(d.to_numpy(), [u @ v], **tol)


GRAD_CASES = [((6, 5), None), ((6, 5), 2.0), ((1, 1), None), ((4, 3, 7), None),
              ((4, 3, 7), 1.0), ((2, 70, 3), None)]


def _labels(rng, shape, ignore):
    want = (shape[0],) if len(shape) == 2 else (shape[0], shape[2])
    lab = rng.integers(0, shape[1], want).astype(np.float32) + 0.75   # truncated to the class
    if ignore is not None:
        lab.flat[::3] = ignore
    return lab


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,ignore", GRAD_CASES)
@pytest.mark.parametrize("smooth", [False, True])
def test_softmax_grads_give_the_cpu_bits(dtype, shape, ignore, smooth):
    rng = np.random.default_rng(2)
    s = rng.random(shape).astype(dtype)
    lab = _labels(rng, shape, ignore)

    def run(dst, src, label):
        if smooth:
            ms.nn.smooth_softmax_grad(dst, src, label, 0.1, ignore)
        else:
            ms.nn.softmax_grad(dst, src, label, ignore)

    want = ms.new_tensor(shape, np.nan, dtype=dtype)
    run(want, ms.from_numpy(s), ms.from_numpy(lab))
    for pad in (True, False):
        src, dst = gpu_from(s, pad), ms.new_tensor(shape, np.nan, dtype=dtype, device=ms.gpu,
                                                   pad=pad)
        run(dst, src, gpu_from(lab))
        assert dst.to_numpy().tobytes() == want.numpy().tobytes(), pad
        run(src, src, gpu_from(lab))       # in place
        assert src.to_numpy().tobytes() == want.numpy().tobytes(), pad
    # the oracle, by hand: src, the target class less 1 (smooth: plus alpha, others less
    # alpha / (C - 1)), ignored samples 0
    ref = s.astype(np.float64) - (0.1 / max(shape[1] - 1, 1) if smooth else 0)
    moved = np.moveaxis(ref, 1, -1)                      # (..., C)
    k = np.trunc(lab).astype(np.int64)
    hit = np.take_along_axis(np.moveaxis(s.astype(np.float64), 1, -1), k[..., None], -1)
    np.put_along_axis(moved, k[..., None], hit - 1 + (0.1 if smooth else 0), -1)
    if ignore is not None:
        moved[np.trunc(lab) == ignore] = 0     # mshadow compares the int-cast label
    np.testing.assert_allclose(want.numpy(), ref, rtol=1e-6, atol=1e-6)


def test_softmax_grad_into_an_overlapping_dst_and_errors():
    s = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    lab = np.array([0, 3, 1], np.float32)
    want = ms.new_tensor((2, 4), 0)
    ms.nn.softmax_grad(want, ms.from_numpy(s[1:]), ms.from_numpy(lab[1:]))
    g = gpu_from(s, pad=False)
    ms.nn.softmax_grad(g.slice(0, 2), g.slice(1, 3), gpu_from(lab[1:]))  # rows shifted by one
    assert g.to_numpy()[:2].tobytes() == want.numpy().tobytes()
    d = gpu_from(s)
    with pytest.raises(ValueError, match="label 4 at \\(1,\\) out of range"):
        ms.nn.softmax_grad(d, gpu_from(s), gpu_from(np.array([0, 4, 1], np.float32)))
    with pytest.raises(ValueError, match="not finite"):
        ms.nn.smooth_softmax_grad(d, gpu_from(s), gpu_from(np.array([0, np.nan, 1],
                                                                     np.float32)), 0.1)
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.softmax_grad(d, gpu_from(s), ms.from_numpy(lab))
    with pytest.raises(ms.DeviceError, match="float32 or float64"):
        ms.nn.softmax_grad(gpu_from(s.astype(np.float16)), gpu_from(s.astype(np.float16)),
                           gpu_from(lab))
    np.testing.assert_array_equal(d.to_numpy(), s)      # nothing stored


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 5, 7), (3, 1, 4), (1, 40, 130)])
def test_softmax_of_3d_over_axis_1(dtype, shape):
    e = (np.random.default_rng(3).standard_normal(shape) * 4).astype(dtype)
    e[0, 0, 0] = 30
    ref = np.exp(e.astype(np.float64) - e.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    want = ms.new_tensor(shape, dtype=dtype)
    ms.softmax(want, ms.from_numpy(e))
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-15)
    for pad in (True, False):
        src, dst = gpu_from(e, pad), ms.new_tensor(shape, np.nan, dtype=dtype, device=ms.gpu,
                                                    pad=pad)
        ms.softmax(dst, src)
        np.testing.assert_allclose(dst.to_numpy(), ref, **tol)
        np.testing.assert_allclose(dst.to_numpy(), want.numpy(), **tol)   # the CPU's, to rounding
        ms.softmax(src, src)
        assert src.to_numpy().tobytes() == dst.to_numpy().tobytes()


def _scatter_case(rng, dtype, K=5, n=9, cols=70):
    d = rng.standard_normal((K, cols)).astype(dtype)
    s = rng.standard_normal((n, cols)).astype(dtype)
    return d, s


SCATTERS = {   # name: (cpu/gpu call, index arrays from rng)
    "add_take_grad": lambda d, s, i, o: ms.nn.add_take_grad(d, i, s),
    "add_take_grad_large_batch": lambda d, s, i, o: ms.nn.add_take_grad_large_batch(d, o, i, s),
    "index_fill": lambda d, s, i, o: ms.nn.index_fill(d, i, s),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_row_scatters_give_the_cpu_bits(dtype, name):
    rng = np.random.default_rng(4)
    d, s = _scatter_case(rng, dtype)
    # repeated rows (the order of their folds is the CPU's), an index past the end (clamped
    # by add_take_grad), as float labels (truncated)
    idx = np.array([3, 1, 3, 0, 3, 1, 4, 2, 3], np.float32) + 0.5
    if name == "add_take_grad":
        idx[2] = 40
    srt = np.array([2, 2, 0, 4, 4, 4, 1, 2, 0], np.float32)
    want = ms.from_numpy(d.copy())
    SCATTERS[name](want, ms.from_numpy(s), ms.from_numpy(idx), ms.from_numpy(srt))
    for pad in (True, False):
        g = gpu_from(d, pad)
        SCATTERS[name](g, gpu_from(s, pad), gpu_from(idx), gpu_from(srt))
        assert g.to_numpy().tobytes() == want.numpy().tobytes(), pad
    # the oracle, by hand
    ref = d.astype(np.float64)
    k = np.trunc(idx).astype(int)
    for i in range(9):
        if name == "add_take_grad":
            ref[min(k[i], 4)] += s[i]
        elif name == "add_take_grad_large_batch":
            ref[int(srt[i])] += s[k[i]]
        else:
            ref[k[i]] = s[i]
    np.testing.assert_allclose(want.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_row_scatters_of_a_source_over_the_destination_and_errors():
    a = np.arange(40, dtype=np.float32).reshape(8, 5)
    want = ms.from_numpy(a.copy())
    ms.nn.add_take_grad(want.slice(0, 4), ms.from_numpy(np.array([1, 0, 1, 3], np.float32)),
                        want.slice(2, 6))               # src rows over dst rows
    g = gpu_from(a)
    ms.nn.add_take_grad(g.slice(0, 4), gpu_from(np.array([1, 0, 1, 3], np.float32)),
                        g.slice(2, 6))
    assert g.to_numpy().tobytes() == want.numpy().tobytes()
    i16 = gpu_from(a.astype(np.float16))                 # index_fill copies any dtype
    ms.nn.index_fill(i16, gpu_from(np.array([2, 2], np.float32)), gpu_from(a[:2].astype(
        np.float16)))
    np.testing.assert_array_equal(i16.to_numpy()[2], a[1])
    with pytest.raises(ms.DeviceError, match="float32 or float64"):
        ms.nn.add_take_grad(i16, gpu_from(np.array([2], np.float32)),
                            gpu_from(a[:1].astype(np.float16)))
    with pytest.raises(IndexError, match="index 8 at \\(1,\\) out of range"):
        ms.nn.index_fill(g, gpu_from(np.array([0, 8], np.float32)), gpu_from(a[:2]))
    with pytest.raises(IndexError, match="sorted"):
        ms.nn.add_take_grad_large_batch(g, gpu_from(np.array([0, -1], np.float32)),
                                        gpu_from(np.array([0, 1], np.float32)), gpu_from(a[:2]))
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.add_take_grad(g, ms.from_numpy(np.array([0.0], np.float32)), gpu_from(a[:1]))
    assert g.to_numpy().tobytes() == want.numpy().tobytes()   # nothing stored


@pytest.mark.parametrize("reducer", ["sum", "maximum", "minimum"])
@pytest.mark.parametrize("saver", ["saveto", "plusto", "minusto"])
def test_map_reduce_keep_lowest_and_high_dim(reducer, saver):
    x = np.random.default_rng(6).standard_normal((6, 40, 3)).astype(np.float64)
    red = getattr(ms.red, reducer)
    fold = {"sum": np.sum, "maximum": np.max, "minimum": np.min}[reducer]
    src = ms.new_tensor(x.shape, 0, dtype=np.float64, device=ms.gpu)
    ms.copy(src, ms.from_numpy(x))
    for keep, call in ((2, lambda d, e: ms.nn.map_reduce_keep_lowest(d, e, saver, red, 0.5)),
                       (1, lambda d, e: ms.nn.map_reduce_keep_high_dim(d, e, 1, saver, red,
                                                                       0.5))):
        axes = tuple(a for a in range(3) if a != keep)
        d0 = np.arange(x.shape[keep], dtype=np.float64)
        d = gpu_from(d0)
        call(d, src * 2 - 1)
        got = 0.5 * fold(x * 2 - 1, axis=axes)
        want = {"saveto": got, "plusto": d0 + got, "minusto": d0 - got}[saver]
        np.testing.assert_allclose(d.to_numpy(), want, rtol=1e-12, atol=1e-12)
        with pytest.raises(ms.DeviceError, match="different devices"):
            call(d, ms.from_numpy(x) * 2)
        np.testing.assert_allclose(d.to_numpy(), want, rtol=1e-12, atol=1e-12)
