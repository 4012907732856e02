"""mshadow.cuda's first layer: the package builds and imports with no CUDA at all, opens
nothing until asked, and turns every failure into a CudaError with the library's own words.
NVRTC (the nvidia-cuda-nvrtc wheel of the test extra) compiles CUDA C to CUBIN on any
machine; the tests that allocate, copy, launch and call cuBLAS need a GPU and skip without."""
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

import mshadow as ms
# the real loader, whatever MSHADOW_CUDA says (the emulated device: tests/cuda/)
from mshadow.cuda import _cuda as cuda
from mshadow.errors import CudaError, MShadowError, ShapeError

GPU = cuda.available()
# (the reason's first line; None where there is a device, whose suite must still collect)
_WHY = (cuda.unavailable_reason() or "").partition("\n")[0]
needs_gpu = pytest.mark.skipif(not GPU, reason=f"no CUDA device: {_WHY}")
NO_DRIVER = not GPU and "could not be loaded" in (cuda.unavailable_reason() or "")


def _missing(version):
    try:
        version()
        return None
    except CudaError as e:
        return str(e).splitlines()[0]


NVRTC_MISSING = _missing(cuda.nvrtc_version)
needs_nvrtc = pytest.mark.skipif(
    NVRTC_MISSING is not None,
    reason=f'{NVRTC_MISSING} (pip install "mshadow[cuda]", or the test extra, brings it)')

# a pitched 2-D add: one thread per element, rows `pitch` bytes apart
ADD_2D = r"""
extern "C" __global__ void add2d(const float *a, const float *b, float *c,
                                 unsigned long long pitch, int rows, int cols) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < cols && y < rows) {
        size_t at = y * pitch / sizeof(float) + x;
        c[at] = a[at] + b[at];
    }
}
"""
# a block sum through shared memory: one partial sum per block of 256 threads
BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float *x, float *out, int n) {
    __shared__ float part[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""
ELF = b"\x7fELF"


# ---- everywhere -----------------------------------------------------------------------------
def test_cuda_error_is_an_mshadow_error_and_a_runtime_error():
    assert cuda.CudaError is ms.CudaError is CudaError
    assert issubclass(CudaError, MShadowError) and issubclass(CudaError, RuntimeError)
    assert CudaError("x", 2).status == 2 and CudaError("x").status is None


def test_importing_opens_no_cuda_library():
    # import mshadow and mshadow.cuda: no libcuda, libnvrtc or libcublas in the process, and
    # cuda-pathfinder not imported; the first NVRTC call then opens NVRTC only
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps (Linux)")
    code = ("import sys, mshadow, mshadow.cuda as cuda\n"
            "def libs():\n"
            "    maps = open('/proc/self/maps').read()\n"
            "    return sorted(n for n in ('libcuda', 'libnvrtc', 'libcublas') if n in maps)\n"
            "print(libs(), 'cuda.pathfinder' in sys.modules)\n"
            "try:\n"
            "    cuda.nvrtc_version()\n"
            "except cuda.CudaError:\n"
            "    pass\n"
            "print(libs())\n")
    env = dict(os.environ, MSHADOW_CUDA="", PYTHONPATH=os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(ms.__file__)),
                    os.environ.get("PYTHONPATH")) if p))
    # (cwd: not a source checkout, whose unbuilt mshadow/ would shadow the install)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.splitlines()
    assert before == "[] False"
    assert after == ("['libnvrtc']" if NVRTC_MISSING is None else "[]")


def test_available_is_a_bool_with_its_reason():
    assert isinstance(cuda.available(), bool) and cuda.is_available() == cuda.available()
    reason = cuda.unavailable_reason()
    assert (reason is None) == cuda.available()
    if reason is not None:
        assert reason.strip()


@pytest.mark.skipif(not NO_DRIVER, reason="this machine has a CUDA driver")
@pytest.mark.parametrize("call", [
    cuda.driver_version, cuda.device_count, lambda: cuda.device_attributes(0),
    lambda: cuda.Memory(16), lambda: cuda.Memory.pitched(64, 4), cuda.Stream, cuda.Event,
    lambda: cuda.Module(ELF), cuda.BlasHandle],
    ids=["driver_version", "device_count", "device_attributes", "Memory", "Memory.pitched",
         "Stream", "Event", "Module", "BlasHandle"])
def test_without_a_driver_every_call_that_needs_it_raises_cuda_error(call):
    assert cuda.available() is False
    for _ in range(2):                      # the failure is remembered, and said again
        with pytest.raises(CudaError) as info:
            call()
        msg = str(info.value)
        assert "The CUDA driver (libcuda) could not be loaded" in msg
        assert ("libcuda.so.1" in msg or "nvcuda.dll" in msg) and "NVIDIA" in msg
        assert info.value.status is None


def test_a_missing_library_says_where_it_looked_and_how_to_get_it(tmp_path):
    # in a fresh interpreter with cuda-pathfinder hidden and CUDA_HOME pointing at an empty
    # directory, NVRTC can only come from the system loader's search
    code = ("import sys; sys.modules['cuda.pathfinder'] = None\n"
            "import mshadow.cuda as cuda\n"
            "try:\n"
            "    cuda.nvrtc_version()\n"
            "except cuda.CudaError as e:\n"
            "    print(e)\n"
            "else:\n"
            "    print('LOADED')\n")
    env = dict(os.environ, MSHADOW_CUDA="", CUDA_HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(ms.__file__)),
                    os.environ.get("PYTHONPATH")) if p))
    env.pop("CUDA_PATH", None)
    # (cwd: not a source checkout, whose unbuilt mshadow/ would shadow the install)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    if r.stdout.strip() == "LOADED":
        pytest.skip("the system loader finds NVRTC on this machine")
    msg = r.stdout
    assert msg.startswith("NVRTC (the CUDA runtime compiler, libnvrtc) could not be loaded")
    assert "cuda.pathfinder: not installed" in msg
    assert str(tmp_path) in msg and "($CUDA_HOME): no such file" in msg
    assert 'pip install "mshadow[cuda]"' in msg and "nvidia-cuda-nvrtc" in msg


# ---- NVRTC: runs wherever the nvidia-cuda-nvrtc wheel installs ----------------------------------
@needs_nvrtc
def test_nvrtc_version_and_architectures():
    major, minor = cuda.nvrtc_version()
    assert major >= 11 and minor >= 0
    archs = cuda.nvrtc_supported_archs()
    assert {80, 90} <= set(archs) and list(archs) == sorted(archs)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", [ADD_2D, BLOCK_SUM], ids=["pitched_add", "shared_sum"])
def test_compile_cubin_gives_an_elf_image(source, arch):
    cubin = cuda.compile_cubin(source, arch=arch)
    assert isinstance(cubin, bytes) and cubin[:4] == ELF and len(cubin) > 500
    # the kernel's name is in the image's symbol table
    assert (b"add2d" if source is ADD_2D else b"block_sum") in cubin


@needs_nvrtc
def test_compile_options_are_passed_to_nvrtc():
    fma = "extern \"C\" __global__ void f(float *x) { x[0] = x[1] * x[2] + x[3]; }"
    assert cuda.compile_cubin(fma, options=("--fmad=false",))[:4] == ELF
    with pytest.raises(CudaError, match="NVRTC_ERROR_INVALID_OPTION") as info:
        cuda.compile_cubin(fma, options=["--no-such-option"])
    assert info.value.status == 5                      # nvrtc.h: NVRTC_ERROR_INVALID_OPTION
    with pytest.raises(TypeError, match="sequence of strings"):
        cuda.compile_cubin(fma, options="--fmad=false")


@needs_nvrtc
def test_a_compile_error_carries_nvrtcs_log():
    bad = "extern \"C\" __global__ void f(float *x) { x[0] = 1.0f }\n"
    with pytest.raises(CudaError) as info:
        cuda.compile_cubin(bad, arch="sm_80", name="broken.cu")
    msg = str(info.value)
    assert msg.startswith("NVRTC could not compile broken.cu for sm_80")
    assert "NVRTC_ERROR_COMPILATION" in msg and info.value.status == 6
    assert 'broken.cu(1): error: expected a ";"' in msg


@needs_nvrtc
def test_a_virtual_architecture_gives_no_cubin():
    with pytest.raises(CudaError, match="virtual architecture"):
        cuda.compile_cubin(ADD_2D, arch="compute_90")


@needs_nvrtc
def test_four_threads_compile_at_once():
    results, errors = [None] * 4, []

    def work(i):
        try:
            src = BLOCK_SUM.replace("block_sum", f"block_sum_{i}")
            results[i] = cuda.compile_cubin(src, arch=("sm_80", "sm_90")[i % 2])
        except BaseException as e:          # reported below, not lost in the thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, cubin in enumerate(results):
        assert cubin[:4] == ELF and f"block_sum_{i}".encode() in cubin


def _cudart_headers():
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        return find_nvidia_header_directory("cudart")
    except Exception:                       # an older cuda-pathfinder, or none
        return None


@needs_nvrtc
def test_float16_through_cuda_fp16_h():
    # the nvidia-cuda-nvrtc wheel ships no cuda_fp16.h: it comes with the CUDA runtime's
    # headers (a toolkit, or the nvidia-cuda-runtime wheel), found by cuda-pathfinder
    include = _cudart_headers()
    if include is None:
        pytest.skip("no cuda_fp16.h: the CUDA runtime headers are not installed")
    src = ('#include <cuda_fp16.h>\n'
           'extern "C" __global__ void hadd(__half *x) { x[0] = __hadd(x[1], x[2]); }\n')
    assert cuda.compile_cubin(src, arch="sm_80", options=(f"-I{include}",))[:4] == ELF


# ---- a real GPU -----------------------------------------------------------------------------
def _arch():
    major, minor = cuda.device_attributes(0)["compute_capability"]
    return f"sm_{major}{minor}"


@needs_gpu
def test_device_facts():
    assert cuda.device_count() >= 1 and cuda.driver_version() >= (11, 0)
    a = cuda.device_attributes(0)
    assert a["name"] and a["total_memory"] > 2**28 and a["multiprocessor_count"] > 0
    assert a["compute_capability"] >= (5, 0) and a["warp_size"] == 32
    assert a["max_threads_per_block"] >= 512 and a["max_block_dim"][0] >= 512
    assert a["max_grid_dim"][0] >= 2**31 - 1 and len(a["max_grid_dim"]) == 3
    assert a["texture_pitch_alignment"] > 0 and a["max_pitch"] > 0
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_DEVICE"):
        cuda.device_attributes(cuda.device_count())


@needs_gpu
@needs_nvrtc
def test_pitched_add_kernel_matches_numpy():
    rows, cols = 37, 53
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    bufs = [cuda.Memory.pitched(cols * 4, rows, 4) for _ in range(3)]
    assert all(m.pitch >= cols * 4 and m.pitch == bufs[0].pitch for m in bufs)
    bufs[0].copy_from_host(a)
    bufs[1].copy_from_host(b)
    f = cuda.Module(cuda.compile_cubin(ADD_2D, arch=_arch())).get_function("add2d")
    f.launch(((cols + 15) // 16, (rows + 15) // 16), (16, 16),
             (*bufs, np.uint64(bufs[0].pitch), np.int32(rows), np.int32(cols)))
    c = np.empty_like(a)
    bufs[2].copy_to_host(c)
    np.testing.assert_array_equal(c, a + b)
    # a sliced host array (rows apart by more than their width) copies row by row
    wide = np.zeros((rows, cols + 7), np.float32)
    bufs[2].copy_to_host(wide[:, :cols])
    np.testing.assert_array_equal(wide[:, :cols], a + b)
    with pytest.raises(ShapeError, match="do not fit"):
        bufs[0].copy_from_host(np.zeros((rows + 1, cols), np.float32))
    for m in bufs:
        m.free()
        m.free()
        assert m.address == 0


@needs_gpu
@needs_nvrtc
def test_shared_memory_kernel_on_a_stream_with_events():
    n = 1000
    x = np.arange(n, dtype=np.float32)
    blocks = (n + 255) // 256
    src, out = cuda.Memory(n * 4), cuda.Memory(blocks * 4)
    src.copy_from_host(x)
    f = cuda.Module(cuda.compile_cubin(BLOCK_SUM, arch=_arch())).get_function("block_sum")
    stream, start, end = cuda.Stream(), cuda.Event(), cuda.Event()
    start.record(stream)
    f.launch(blocks, 256, (src, out, np.int32(n)), stream=stream)
    end.record(stream)
    end.synchronize()
    assert stream.query() and end.query() and cuda.elapsed_time(start, end) >= 0
    sums = np.empty(blocks, np.float32)
    out.copy_to_host(sums, stream)
    np.testing.assert_array_equal(sums, np.add.reduceat(x, np.arange(0, n, 256)))
    with pytest.raises(TypeError, match="numpy scalar"):
        f.launch(blocks, 256, (src, out, n))
    stream.close()
    stream.close()


@needs_gpu
def test_driver_errors_carry_the_drivers_name():
    with pytest.raises(CudaError, match="cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE"):
        cuda.Module(b"not a cubin at all" * 4)
    with pytest.raises(CudaError, match="cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"):
        cuda.Memory(1 << 60)


def _cublas_missing():
    return _missing(cuda.cublas_version) if GPU else "no GPU"


@pytest.fixture
def blas():
    missing = _cublas_missing()
    if missing is not None:
        pytest.skip(missing)
    h = cuda.BlasHandle()
    yield h
    h.close()


def _dev(array):
    m = cuda.Memory(array.nbytes)
    m.copy_from_host(np.ascontiguousarray(array).reshape(-1))    # (copies take 1-D or 2-D)
    return m


def _host(m, shape, dtype):
    out = np.empty(shape, dtype)
    m.copy_to_host(out.reshape(-1))
    return out


@needs_gpu
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_cublas_gemm_gemv_dot_batched_match_numpy(blas, dt):
    rng = np.random.default_rng(1)
    m, k, n, batch = 5, 7, 3, 4
    a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    tol = dict(rtol=1e-5 if dt == np.float32 else 1e-12)
    # row-major C = A B is column-major C^T = B^T A^T: swap the operands. The device copies
    # stay referenced until the results are read (cuBLAS runs asynchronously).
    da, db, c = _dev(a), _dev(b), cuda.Memory(m * n * np.dtype(dt).itemsize)
    blas.gemm(dt, False, False, n, m, k, 1.0, db, n, da, k, 0.0, c, n)
    np.testing.assert_allclose(_host(c, (m, n), dt), a @ b, **tol)
    x, v = rng.standard_normal(k).astype(dt), rng.standard_normal(k).astype(dt)
    dx, dv, y = _dev(x), _dev(v), cuda.Memory(m * np.dtype(dt).itemsize)
    blas.gemv(dt, True, k, m, 2.0, da, k, dx, 1, 0.0, y, 1)
    np.testing.assert_allclose(_host(y, (m,), dt), 2 * a @ x, **tol)
    np.testing.assert_allclose(blas.dot(dt, k, dx, 1, dv, 1), x @ v, **tol)
    A = rng.standard_normal((batch, m, k)).astype(dt)
    B = rng.standard_normal((batch, k, n)).astype(dt)
    dA, dB, C = _dev(A), _dev(B), cuda.Memory(batch * m * n * np.dtype(dt).itemsize)
    stream = cuda.Stream()
    blas.set_stream(stream)
    blas.gemm_strided_batched(dt, False, False, n, m, k, 1.0, dB, n, k * n, dA, k, m * k, 0.0,
                              C, n, m * n, batch)
    stream.synchronize()
    np.testing.assert_allclose(_host(C, (batch, m, n), dt), A @ B, **tol)
    blas.set_stream(None)
    with pytest.raises(ms.DTypeError, match="float32 or float64"):
        blas.dot(np.int32, 1, x, 1, x, 1)
