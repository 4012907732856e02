"""The emulated device's kernels (mshadow/cuda/emulate.py): compile_cubin's images, Module and
Function.launch on emulated memory, the launch limits and argument checks the driver would
apply, and the library cache (memory, disk, damaged files, threads). Skipped without g++."""
import hashlib
import os
import threading

import numpy as np
import pytest

from mshadow.cuda import emulate
from mshadow.cuda.emulate import Event, LibraryCache, Memory, Module, Stream, compile_cubin
from mshadow.errors import CudaError

pytestmark = pytest.mark.skipif(emulate.compiler() is None,
                                reason="no g++: the emulated device compiles kernels with it")

# a pitched 2-D add (rows `pitch` bytes apart) and a block sum through shared memory: the
# kernels the real loader's tests run on a GPU, run here as they are
from test_cuda_loader import ADD_2D, BLOCK_SUM     # noqa: E402  (tests/ is on sys.path)
# a struct by value, every scalar kind, and a thread count written per block
KINDS = r"""
typedef struct { long long a; double b; int c; } pack_t;
extern "C" __global__ void kinds(double *out, pack_t p, float f, unsigned char u,
                                 long long q, int *threads) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = (double)p.a; out[1] = p.b; out[2] = p.c; out[3] = f; out[4] = u; out[5] = q;
    }
    atomicAdd(threads, 1);
}
"""
PACK = np.dtype([("a", "<i8"), ("b", "<f8"), ("c", "<i4"), ("pad", "V4")])


@pytest.fixture(scope="module")
def add2d():
    return Module(compile_cubin(ADD_2D)).get_function("add2d")


@pytest.fixture(scope="module")
def kinds():
    return Module(compile_cubin(KINDS)).get_function("kinds")


def _status(info, name):
    assert name in str(info.value) and info.value.status == emulate._STATUS[name][0]


# ---- images -------------------------------------------------------------------------------
def test_an_image_is_the_source_behind_a_header():
    image = compile_cubin(ADD_2D, arch="sm_90", options=("--fmad=false",))
    assert image.startswith(emulate.IMAGE_MAGIC) and ADD_2D.encode() in image
    assert emulate.image_ok(image) and b"\0" not in image      # (a C string for cuModuleLoadData)
    assert compile_cubin(ADD_2D.encode()) == compile_cubin(ADD_2D)


@pytest.mark.parametrize("image", [b"\x7fELF" + bytes(200), b".version 8.0\n.target sm_90\n",
                                   b"not a cubin at all" * 4], ids=["cubin", "ptx", "junk"])
def test_what_is_not_an_emulated_image_is_an_invalid_image(image):
    # (and the other way round: an H100 answered CUDA_ERROR_INVALID_IMAGE to an emulated image)
    with pytest.raises(CudaError, match="cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE") as i:
        Module(image)
    _status(i, "CUDA_ERROR_INVALID_IMAGE")


def test_an_altered_or_truncated_image_is_invalid():
    image = compile_cubin(ADD_2D)
    for bad in (image[:-10], image.replace(b"a[at] + b[at]", b"a[at] - b[at]"),
                image.replace(b"arch sm_90", b"arch sm90")):
        assert not emulate.image_ok(bad)
        with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_IMAGE"):
            Module(bad)


def test_an_image_for_another_architecture_has_no_binary_for_the_device():
    with pytest.raises(CudaError, match="the image is for sm_80, the device is sm_90") as info:
        Module(compile_cubin(ADD_2D, arch="sm_80"))
    _status(info, "CUDA_ERROR_NO_BINARY_FOR_GPU")
    Module(compile_cubin(ADD_2D, arch="sm_90a"))


def test_compile_errors_carry_the_compilers_log():
    bad = 'extern "C" __global__ void f(float *x) {\n  x[0] = 1.0f\n}\n'
    with pytest.raises(CudaError) as info:
        compile_cubin(bad, name="broken.cu")
    msg = str(info.value)
    assert msg.startswith("g++ could not compile broken.cu for the emulated device: "
                          "NVRTC_ERROR_COMPILATION [6]")
    assert info.value.status == 6 and "broken.cu:2" in msg and "expected ';'" in msg


def test_compile_options_and_architectures_as_nvrtc_takes_them():
    with pytest.raises(TypeError, match="sequence of strings"):
        compile_cubin(ADD_2D, options="--fmad=false")
    with pytest.raises(CudaError, match="virtual architecture"):
        compile_cubin(ADD_2D, arch="compute_90")
    with pytest.raises(CudaError, match="NVRTC_ERROR_INVALID_OPTION") as info:
        compile_cubin(ADD_2D, arch="sm_13")
    assert info.value.status == 5 and 90 in emulate.nvrtc_supported_archs()
    # -D means on the host what it means to NVRTC
    src = 'extern "C" __global__ void v(int *o) { o[0] = VALUE; }\n'
    m = Memory(4)
    Module(compile_cubin(src, options=("-DVALUE=7",))).get_function("v").launch(1, 1, (m,))
    got = np.zeros(1, np.int32)
    m.copy_to_host(got)
    assert got[0] == 7


def test_functions_by_name_and_unload():
    mod = Module(compile_cubin(ADD_2D + BLOCK_SUM))
    assert mod.get_function("block_sum").name == "block_sum" and mod.device == 0
    with pytest.raises(CudaError, match="'nope' in the image .it has add2d, block_sum") as info:
        mod.get_function("nope")
    _status(info, "CUDA_ERROR_NOT_FOUND")
    f = mod.get_function("add2d")
    assert f.module is mod
    mod.unload()
    with pytest.raises(CudaError, match="the module was unloaded"):
        mod.get_function("add2d")
    with pytest.raises(CudaError, match="its module was unloaded"):
        f.launch(1, 1, ())


# ---- launches -----------------------------------------------------------------------------
def test_pitched_add_matches_numpy(add2d):
    rows, cols = 37, 53
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    bufs = [Memory.pitched(cols * 4, rows, 4) for _ in range(3)]
    bufs[0].copy_from_host(a)
    bufs[1].copy_from_host(b)
    add2d.launch(((cols + 15) // 16, (rows + 15) // 16), (16, 16),
                 (*bufs, np.uint64(bufs[0].pitch), np.int32(rows), np.int32(cols)))
    c = np.empty_like(a)
    bufs[2].copy_to_host(c)
    np.testing.assert_array_equal(c, a + b)


def test_shared_memory_kernel_on_a_stream_with_events():
    n = 1000
    x = np.arange(n, dtype=np.float32)
    blocks = (n + 255) // 256
    src, out = Memory(n * 4), Memory(blocks * 4)
    src.copy_from_host(x)
    f = Module(compile_cubin(BLOCK_SUM)).get_function("block_sum")
    stream, start, end = Stream(), Event(), Event()
    start.record(stream)
    f.launch(blocks, 256, (src, out, np.int32(n)), stream=stream)
    end.record(stream)
    end.synchronize()
    assert stream.query() and end.query() and emulate.elapsed_time(start, end) >= 0
    sums = np.empty(blocks, np.float32)
    out.copy_to_host(sums, stream)
    np.testing.assert_array_equal(sums, np.add.reduceat(x, np.arange(0, n, 256)))


def test_every_argument_kind_arrives(kinds):
    out, threads = Memory(6 * 8), Memory(4)
    threads.copy_from_host(np.zeros(1, np.int32))
    pack = np.zeros((), PACK)
    pack["a"], pack["b"], pack["c"] = -5, 2.5, 9
    kinds.launch((2, 3), (4, 5, 2), (out, pack[()], np.float32(1.5), np.uint8(200),
                                       np.int64(-(2 ** 40)), threads))
    got, count = np.zeros(6), np.zeros(1, np.int32)
    out.copy_to_host(got)
    threads.copy_to_host(count)
    assert got.tolist() == [-5, 2.5, 9, 1.5, 200, -(2 ** 40)]
    assert count[0] == 2 * 3 * 4 * 5 * 2                     # every thread of every block ran
    # an address inside an allocation, as np.uint64, is a pointer too
    kinds.launch(1, 1, (np.uint64(out.address + 8), pack[()], np.float32(0), np.uint8(0),
                        np.int64(0), np.uint64(threads.address)))
    out.copy_to_host(got)
    assert got.tolist() == [-5, -5, 2.5, 9, 0, 0]


@pytest.mark.parametrize("grid, block, shared, why", [
    ((2 ** 31, 1, 1), 1, 0, "exceeds max_grid_dim"),
    ((1, 65536), 1, 0, "exceeds max_grid_dim"),
    (1, 1025, 0, "exceeds max_block_dim"),
    (1, (1, 1, 65), 0, "exceeds max_block_dim"),
    (1, (32, 32, 2), 0, "2048 threads, more than max_threads_per_block 1024"),
    (1, 1, 49153, "49153 bytes of dynamic shared memory")])
def test_launches_past_the_devices_limits_fail_as_the_driver_does(kinds, grid, block, shared,
                                                                  why):
    # the statuses an H100 gave for these launches; the kernel does not run
    out, threads = Memory(48), Memory(4)
    threads.copy_from_host(np.zeros(1, np.int32))
    args = (out, np.zeros((), PACK)[()], np.float32(0), np.uint8(0), np.int64(0), threads)
    with pytest.raises(CudaError, match=f"cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE "
                                        fr"\(invalid argument\) \[1\]: .*{why}"):
        kinds.launch(grid, block, args, shared_mem=shared)
    got = np.zeros(1, np.int32)
    threads.copy_to_host(got)
    assert got[0] == 0
    kinds.launch(1, (1024, 1, 1), args, shared_mem=49152)    # the limits themselves run
    threads.copy_to_host(got)
    assert got[0] == 1024
    with pytest.raises(ValueError, match="1 to 3 positive ints"):
        kinds.launch(0, 1, args)


def test_arguments_are_checked_before_anything_runs(kinds):
    out, threads = Memory(48), Memory(4)
    pack = np.zeros((), PACK)[()]
    good = [out, pack, np.float32(0), np.uint8(0), np.int64(0), threads]

    def launch(i, value):
        args = list(good)
        args[i] = value
        kinds.launch(1, 1, args)
    with pytest.raises(TypeError, match="numpy scalar"):
        launch(4, 3)                                          # a Python int
    cases = [(2, np.float64(0), "takes np.float32, got float64"),
             (4, np.int32(0), "takes a 8-byte integer, got int32"),
             (1, np.zeros((), "V8")[()], "takes 24 bytes, got 8"),
             (2, out, "is not a pointer, got a Memory"),
             (0, np.float64(1), "takes a Memory or an address")]
    for i, value, why in cases:
        with pytest.raises(CudaError, match=why) as info:
            launch(i, value)
        _status(info, "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(CudaError, match="takes 6 arguments .out, p, f, u, q, threads., got 5"):
        kinds.launch(1, 1, good[:5])


def test_freed_memory_and_stray_addresses_are_never_handed_to_a_kernel(kinds):
    out, threads = Memory(48), Memory(4)
    pack = np.zeros((), PACK)[()]
    stale = out.address
    out.free()
    with pytest.raises(CudaError, match=r"argument 0 \(out, double \*\) is a freed Memory"):
        kinds.launch(1, 1, (out, pack, np.float32(0), np.uint8(0), np.int64(0), threads))
    for address in (stale, np.zeros(4).ctypes.data, threads.address + 4):
        with pytest.raises(CudaError, match="is in no live Memory") as info:
            kinds.launch(1, 1, (np.uint64(address), pack, np.float32(0), np.uint8(0),
                                np.int64(0), threads))
        _status(info, "CUDA_ERROR_ILLEGAL_ADDRESS")
    closed = Stream()
    closed.close()
    with pytest.raises(CudaError, match="the stream was closed"):
        kinds.launch(1, 1, (threads, pack, np.float32(0), np.uint8(0), np.int64(0), threads),
                     stream=closed)


def test_a_team_smaller_than_the_block_stops_the_launch(run_child):
    # OpenMP may give fewer threads than a block has (OMP_THREAD_LIMIT): nothing of that
    # block runs, and the launch says so
    r = run_child("import numpy as np\n"
                  "from mshadow.cuda import emulate as E\n"
                  "f = E.Module(E.compile_cubin('extern \"C\" __global__ void k(int *o) "
                  "{ atomicAdd(o, 1); }')).get_function('k')\n"
                  "m = E.Memory(4); m.copy_from_host(np.zeros(1, np.int32))\n"
                  "f.launch(1, 4, (m,))\n"
                  "try:\n"
                  "    f.launch(1, 64, (m,))\n"
                  "except E.CudaError as e:\n"
                  "    print(e)\n"
                  "got = np.zeros(1, np.int32); m.copy_to_host(got); print(got[0])\n",
                  OMP_THREAD_LIMIT="8")
    assert r.returncode == 0, r.stderr
    msg, count = r.stdout.strip().splitlines()
    assert msg.startswith("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    assert "OpenMP gave 8 threads for a block of 64" in msg and count == "4"


# ---- the library cache --------------------------------------------------------------------
def _src(tag):
    return f'extern "C" __global__ void k_{tag}(int *o) {{ o[0] = {len(tag)}; }}\n'


def test_compiled_once_then_memory_then_disk(tmp_path):
    cache = LibraryCache(str(tmp_path))
    lib = cache.load(_src("a"))
    assert cache.load(_src("a")) is lib
    assert cache.stats()["compiles"] == 1 and cache.stats()["memory_hits"] == 1
    again = LibraryCache(str(tmp_path))            # another process: from disk
    assert set(again.load(_src("a")).kernels) == {"k_a"}
    assert again.stats()["disk_hits"] == 1 and again.stats()["compiles"] == 0
    files = [f for _, _, fs in os.walk(tmp_path) for f in fs]
    assert len(files) == 1 and files[0].endswith(".so")       # no temporary left behind
    assert cache.load(_src("a"), options=("-DX=1",)) is not lib   # flags are in the key


@pytest.mark.parametrize("damage", ["truncated", "altered", "empty"])
def test_a_damaged_file_is_compiled_again(tmp_path, damage):
    LibraryCache(str(tmp_path)).load(_src(f"d{damage}"))
    [path] = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    data = open(path, "rb").read()
    bad = {"truncated": data[:len(data) // 2], "empty": b"",
           "altered": data[:100] + bytes([data[100] ^ 1]) + data[101:]}[damage]
    # (a new file renamed over it: the process has the old one mapped)
    with open(path + ".new", "wb") as f:
        f.write(bad)
    os.replace(path + ".new", path)
    fresh = LibraryCache(str(tmp_path))
    lib = fresh.load(_src(f"d{damage}"))
    assert set(lib.kernels) == {f"k_d{damage}"}
    assert fresh.stats()["rebuilt"] == 1 and fresh.stats()["compiles"] == 1
    assert hashlib.sha256(open(path, "rb").read()[:-40]).digest() == \
        open(path, "rb").read()[-40:-8]


def in_threads(work, n):
    """Run ``work()`` in ``n`` threads at once; their results (an exception raised again)."""
    results, barrier = [None] * n, threading.Barrier(n)

    def run(i):
        barrier.wait()
        try:
            results[i] = work()
        except BaseException as e:          # raised again below, not lost in the thread
            results[i] = e
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def test_two_threads_asking_for_one_library_compile_it_once(tmp_path):
    cache = LibraryCache(str(tmp_path))
    got = in_threads(lambda: cache.load(_src("threads")), 2)
    assert got[0] is got[1] and cache.stats()["compiles"] == 1


def test_an_unusable_directory_falls_back_to_a_private_one(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    cache = LibraryCache(str(blocker / "emulate"))
    assert set(cache.load(_src("fallback")).kernels) == {"k_fallback"}
    assert cache.stats()["disk_errors"] == 1


def test_two_launches_of_one_library_at_once_are_serialised():
    # gridDim, blockDim and __shared__ are the library's statics: threads launching the same
    # kernel concurrently must each get their own whole launch
    f = Module(compile_cubin(BLOCK_SUM)).get_function("block_sum")
    n = 256 * 6
    x = np.arange(n, dtype=np.float32)
    want = np.add.reduceat(x, np.arange(0, n, 256))

    def work():
        src, out = Memory(n * 4), Memory(6 * 4)
        src.copy_from_host(x)
        for _ in range(5):
            f.launch(6, 256, (src, out, np.int32(n)))
            sums = np.empty(6, np.float32)
            out.copy_to_host(sums)
            np.testing.assert_array_equal(sums, want)
    in_threads(work, 3)
