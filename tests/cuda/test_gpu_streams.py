"""gpu streams (``ms.Stream(ms.gpu)``, mshadow's ``Stream<gpu>``): where a tensor's kernels,
products and copies are queued, on the emulated device in CI (its streams run work at once,
in order) and on a real GPU where there is one. The driver's calls are watched to check the
stream each piece of work went to; numpy is the oracle of the values."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import cuda

from gpu_testing import gpu_device, gpu_from  # noqa: F401  (gpu_device: autouse)


@pytest.fixture
def watched(monkeypatch):
    """{"launch": [...], "copy": [...], "blas": [...]}: the stream of every kernel launch,
    2-D copy and cuBLAS call made while the test runs (None: the default stream)."""
    drv = cuda.driver()
    seen = {"launch": [], "copy": [], "blas": []}
    launch, copy_2d = drv.Function.launch, drv.copy_2d

    def watch_launch(self, grid, block, args, shared_mem=0, stream=None):
        seen["launch"].append(stream)
        return launch(self, grid, block, args, shared_mem, stream)

    def watch_copy(*args, **kw):
        seen["copy"].append(kw.get("stream", args[8] if len(args) > 8 else None))
        return copy_2d(*args, **kw)

    monkeypatch.setattr(drv.Function, "launch", watch_launch)
    monkeypatch.setattr(drv, "copy_2d", watch_copy)
    for name in ("gemm", "gemm_strided_batched"):
        real = getattr(drv.BlasHandle, name)

        def watch_blas(self, *args, _real=real):
            seen["blas"].append(self)
            return _real(self, *args)
        monkeypatch.setattr(drv.BlasHandle, name, watch_blas)
    return seen


def test_a_gpu_stream_waits_and_is_deleted_once():
    s = ms.new_stream(ms.gpu)
    assert s.device is ms.gpu and isinstance(s, ms.Stream) and not s.deleted
    assert s.wait() is None and s.check_idle() is True and s.Wait() is None and s.CheckIdle()
    assert repr(s) == "Stream(mshadow.gpu)"
    ms.delete_stream(s)
    assert s.deleted and repr(s) == "Stream(mshadow.gpu, deleted)"
    ms.delete_stream(s)                        # a second delete does nothing
    for call in (s.wait, s.check_idle):
        with pytest.raises(ms.DeviceError, match=r"Stream\.\w+: the stream was deleted"):
            call()
    with pytest.raises(ms.DeviceError, match="dev_id 1"):
        ms.new_stream(ms.gpu, dev_id=1)


def test_expressions_run_on_the_destinations_stream(watched):
    rng = np.random.default_rng(1)
    a, b = rng.random((5, 70)).astype(np.float32), rng.random((5, 70)).astype(np.float32)
    s = ms.new_stream(ms.gpu)
    A, B = gpu_from(a), gpu_from(b)
    out = ms.new_tensor((5, 70), dtype=np.float32, device=ms.gpu, stream=s)
    assert out[1:3].stream is s                     # views keep their tensor's stream
    watched["launch"].clear()
    out[:] = A * 2 - B
    out += A
    assert watched["launch"] == [s.queue.stream] * 2
    # a value that reads dst elsewhere goes through a temporary: both kernels on dst's stream
    sq = ms.new_tensor((70, 70), dtype=np.float32, device=ms.gpu, stream=s)
    m = rng.random((70, 70)).astype(np.float32)
    ms.copy(sq, ms.from_numpy(m))
    watched["launch"].clear()
    sq[:] = sq.T + 1
    assert watched["launch"] == [s.queue.stream] * 2
    s.wait()
    np.testing.assert_array_equal(out.to_numpy(), (a * 2 - b) + a)
    np.testing.assert_array_equal(sq.to_numpy(), m.T + 1)
    # a tensor without a stream uses the default one
    watched["launch"].clear()
    A[:] = B + 1
    assert watched["launch"] == [None]


def test_products_use_the_cublas_handle_bound_to_the_stream(watched):
    rng = np.random.default_rng(2)
    a, b = rng.random((6, 4)), rng.random((5, 4))
    s, other = ms.new_stream(ms.gpu), ms.new_stream(ms.gpu)
    A, B = gpu_from(a), gpu_from(b)
    res = ms.new_tensor((6, 5), dtype=np.float64, device=ms.gpu, stream=s)
    res[:] = ms.dot(A, B.T)
    res2 = ms.new_tensor((6, 5), dtype=np.float64, device=ms.gpu, stream=other)
    res2[:] = ms.dot(A, B.T)
    plain = ms.new_tensor((6, 5), dtype=np.float64, device=ms.gpu)
    plain[:] = ms.dot(A, B.T)
    h1, h2, h0 = watched["blas"]
    assert h1 is s.queue.blas() and h2 is other.queue.blas() and len({h0, h1, h2}) == 3
    if cuda.driver().__name__.endswith("emulate"):   # the handle queues on its stream
        assert h1._stream is s.queue.stream and h2._stream is other.queue.stream
    s.wait()
    other.wait()
    for r in (res, res2, plain):
        np.testing.assert_allclose(r.to_numpy(), a @ b.T, rtol=1e-12)
    ms.delete_stream(s)                            # closes the handle with the stream
    with pytest.raises(ms.DeviceError, match="the tensor's stream was deleted"):
        res[:] = ms.dot(A, B.T)


def test_copies_go_on_the_given_stream(watched):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    s = ms.new_stream(ms.gpu)
    t = ms.new_tensor((3, 4), dtype=np.float32, device=ms.gpu)
    back = ms.new_tensor((3, 4), dtype=np.float32)
    watched["copy"].clear()
    ms.copy(t, ms.from_numpy(a), s)
    ms.copy(back, t)
    assert watched["copy"] == [s.queue.stream, None]
    np.testing.assert_array_equal(back.to_numpy(), a)
    with pytest.raises(ms.DeviceError, match=r"with a gpu side takes a Stream\(gpu\)"):
        ms.copy(back, t, ms.new_stream(ms.cpu))
    with pytest.raises(ms.DeviceError, match=r"on the cpu takes a Stream\(cpu\)"):
        ms.copy(back, ms.from_numpy(a), s)
    with pytest.raises(ms.DeviceError, match=r"takes a Stream\(gpu\) or None, got 3"):
        ms.copy(t, back, 3)


def test_a_stream_of_another_device_is_refused():
    gs, cs = ms.new_stream(ms.gpu), ms.new_stream(ms.cpu)
    with pytest.raises(ms.DeviceError, match=r"a gpu tensor takes a Stream\(gpu\)"):
        ms.new_tensor((2, 3), device=ms.gpu, stream=cs)
    t = ms.new_tensor((2, 3))
    with pytest.raises(ms.DeviceError, match=r"a cpu tensor takes a Stream\(cpu\)"):
        t.set_stream(gs)
    assert t.stream is None
    with pytest.raises(ms.DeviceError, match="a gpu tensor takes"):
        ms.TensorContainer((2, 3), device=ms.gpu, stream=cs)


def test_a_deleted_stream_stores_nothing():
    a = np.ones((4, 5), np.float32)
    s = ms.new_stream(ms.gpu)
    t = gpu_from(a)
    t.set_stream(s)
    ms.delete_stream(s)
    with pytest.raises(ms.DeviceError, match="the tensor's stream was deleted"):
        t[:] = t * 3
    np.testing.assert_array_equal(t.to_numpy(), a)
    t.set_stream(None)
    t[:] = t * 3
    np.testing.assert_array_equal(t.to_numpy(), 3 * a)


def test_the_cuda_array_interface_names_the_tensors_stream():
    s = ms.new_stream(ms.gpu)
    t = ms.new_tensor((2, 3), device=ms.gpu)
    assert t.__cuda_array_interface__["stream"] == 1
    u = ms.new_tensor((2, 3), device=ms.gpu, stream=s)
    got = u.__cuda_array_interface__["stream"]
    assert got == s.queue.stream.address and got not in (0, 1, 2)


def test_the_tensor_engine_functions_check_the_device():
    ms.init_tensor_engine(ms.gpu)
    ms.InitTensorEngine(ms.gpu, 0)
    ms.set_device(0)
    for call in (lambda: ms.init_tensor_engine(ms.gpu, 1), lambda: ms.SetDevice(3)):
        with pytest.raises(ms.DeviceError, match="drives one device"):
            call()
    a = ms.new_tensor((3, 3), 1.0, dtype=np.float64, device=ms.gpu)
    b = ms.new_tensor((3, 3), dtype=np.float64, device=ms.gpu)
    b[:] = ms.dot(a, a)
    ms.shutdown_tensor_engine(ms.gpu)    # the default handle closed; a product makes another
    b += ms.dot(a, a)
    np.testing.assert_array_equal(b.to_numpy(), np.full((3, 3), 6.0))
    # the CPU's are no-ops
    ms.init_tensor_engine()
    ms.shutdown_tensor_engine(ms.cpu)


def test_basic_stream_prints_what_the_cpu_version_prints(run_child):
    """mshadow's guide/basic_stream.cu, ported: on the gpu (the emulated device here) and on
    the cpu the same lines."""
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples", "guide", "basic_stream.py")
    code = f"import runpy, sys; sys.argv = [{path!r}] + sys.argv[1:]; runpy.run_path({path!r}, run_name='__main__')"
    # (the gpu_device fixture chose the driver in this process's environment, which the
    # child inherits)
    gpu = run_child(code + "; import mshadow; print(mshadow.cuda.driver().__name__)")
    assert gpu.returncode == 0, gpu.stderr
    cpu = run_child(f"import runpy, sys; sys.argv = [{path!r}, '--cpu']; "
                    f"runpy.run_path({path!r}, run_name='__main__')")
    assert cpu.returncode == 0, cpu.stderr
    lines = gpu.stdout.splitlines()
    assert lines[:2] == ["10.00 10.00 ", "10.00 10.00 "] and cpu.stdout.splitlines() == lines[:2]
    assert lines[2] == cuda.driver().__name__
