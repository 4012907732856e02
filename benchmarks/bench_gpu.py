"""ms.gpu against CuPy and PyTorch on one GPU: medians of interleaved rounds, ratios.

    python benchmarks/bench_gpu.py            # needs a CUDA device; CuPy / torch where installed
    python benchmarks/bench_gpu.py --quick

Cases (each statement finished before the clock stops: mshadow's assignment into a tensor
with no stream waits for its kernel, as mshadow's Copy with a NULL stream does, so the
others synchronize after each call too):
    E1 w[:] = -eta * (g + lam * w) at n = 2**27, float32 and float64: mshadow (one kernel
       emitted from the IR), CuPy's ElementwiseKernel of the same expression, torch's three
       in-place ops; GB/s counts 3 n elements moved (g, w read; w written); and a
       device-to-device copy of n elements for the bandwidth ceiling (2 n moved)
    small  the same statement at n = 16: per-statement host overhead, microseconds
    first  the first call of a new structure (NVRTC compile) and the same structure with the
       disk cache warm (a fresh kernel cache in memory)
    kernel E1's kernel alone at 2**27 float32, launched directly (no Python per call but the
       launch): the emitted kernel over (1, n) and over (n / 1024, 1024), and hand-written
       grid-stride kernels with 64-bit and 32-bit indices, to tell the kernel's cost from
       the statement's
"""
import argparse
import statistics
import sys
import time

import numpy as np

import mshadow as ms
from mshadow import cuda


def _timeit(fn, sync, number):
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - t0) / number


def _rounds(alts, sync, number, rounds):
    got = {k: [] for k in alts}
    for _ in range(rounds):
        for k, fn in alts.items():
            got[k].append(_timeit(fn, sync, number))
    return {k: statistics.median(v) for k, v in got.items()}


def e1_case(n, dtype, number, rounds):
    eta, lam = 0.1, 0.01
    rng = np.random.default_rng(0)
    g0 = rng.uniform(-1, 1, n).astype(dtype)
    w0 = rng.uniform(-1, 1, n).astype(dtype)
    W = ms.new_tensor((n,), None, dtype=dtype, device=ms.gpu)
    G = ms.new_tensor((n,), None, dtype=dtype, device=ms.gpu)
    ms.copy(W, ms.from_numpy(w0))
    ms.copy(G, ms.from_numpy(g0))
    alts, sync = {}, (lambda: None)

    def ms_e1():
        W[:] = -eta * (G + lam * W)
    alts["mshadow"] = ms_e1
    try:
        import cupy as cp
        k = cp.ElementwiseKernel("T g, T eta, T lam", "T w", "w = -eta * (g + lam * w)", "e1")
        cw, cg = cp.asarray(w0), cp.asarray(g0)
        ceta, clam = dtype(eta), dtype(lam)
        alts["cupy"] = lambda: k(cg, ceta, clam, cw)
        cdst = cp.empty_like(cw)
        alts["copy"] = lambda: cdst.__setitem__(slice(None), cw)
        sync = cp.cuda.Device().synchronize
    except ImportError:
        pass
    try:
        import torch
        tw, tg = torch.from_numpy(w0).cuda(), torch.from_numpy(g0).cuda()

        def torch_e1():
            tw.mul_(lam).add_(tg).mul_(-eta)
        alts["torch"] = torch_e1
        if "copy" not in alts:
            td = torch.empty_like(tw)
            alts["copy"] = lambda: td.copy_(tw)
        prev = sync
        sync = (lambda: (prev(), torch.cuda.synchronize()))
    except ImportError:
        pass
    # check: mshadow against numpy on a fresh start
    ms.copy(W, ms.from_numpy(w0))
    ms_e1()
    want = (-dtype(eta) * (g0 + dtype(lam) * w0)).astype(dtype)
    np.testing.assert_allclose(W.to_numpy(), want, rtol=1e-6 if dtype == np.float32 else 1e-13)
    return _rounds(alts, sync, number, rounds)


def first_call():
    """The first call of a new structure (a fresh expression shape each run: a random
    exponent) with a cold memory cache, then the same with the disk cache warm."""
    x = ms.new_tensor((1024,), 1, device=ms.gpu)
    y = ms.new_tensor((1024,), 0, device=ms.gpu)
    k = float(np.random.default_rng().integers(1, 1 << 30))
    e = ms.F(ms.op.exp, x * 0.5) + x * (k % 7) - ms.F(ms.op.tanh, x) * (1.0 + k % 5)
    e = e * 1.0 + x if int(k) % 2 else e + x * 2.0
    t0 = time.perf_counter()
    y[:] = e
    cold = time.perf_counter() - t0
    return cold


_HAND = r"""
extern "C" __global__ void e1_i64(long long n, float *w, const float *g, float eta, float lam) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) w[i] = -eta * (g[i] + lam * w[i]);
}
extern "C" __global__ void e1_i32(int n, float *w, const float *g, float eta, float lam) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    w[i] = -eta * (g[i] + lam * w[i]);
}
"""


def kernel_variants(n, number, rounds):
    """E1's kernels launched directly, timed by events over ``number`` launches."""
    from mshadow import engine
    from mshadow.cuda import cache, executor, launch, lower
    drv = cuda.driver()
    limits, arch = executor._facts(drv)
    W = ms.new_tensor((n,), 0.5, device=ms.gpu)
    G = ms.new_tensor((n,), 0.25, device=ms.gpu)
    w, g = ms._core.data_address(W), ms._core.data_address(G)
    f32, i64 = np.float32, np.int64
    out = {}
    e = -0.1 * (G + 0.01 * W)
    k = lower.emit(e.key, "f32", "saveto")
    fn = drv.Module(cache.kernel_cache().cubin(k.source, arch)).get_function(k.name)
    for rows in (1, n // 1024):
        cols = n // rows
        geo = launch.elementwise(rows, cols, limits)
        args = [i64(rows), i64(cols), np.uint64(w), i64(cols), f32(-0.1), np.uint64(g),
                i64(cols), f32(0.01), np.uint64(w), i64(cols)]
        out[f"emitted ({rows}, {cols}) grid {geo.grid}"] = (fn, geo.grid, geo.block, args)
    hand = drv.Module(drv.compile_cubin(_HAND, arch=arch, options=("--fmad=false",)))
    blocks = min(-(-n // 256), limits.sm_count * 32)
    for name, nt in (("e1_i64", i64), ("e1_i32", np.int32)):
        out[f"hand {name} grid ({blocks},)"] = (hand.get_function(name), (blocks, 1, 1),
                                                (256, 1, 1),
                                                [nt(n), np.uint64(w), np.uint64(g), f32(0.1),
                                                 f32(0.01)])
        out[f"hand {name} grid ({-(-n // 256)},)"] = (hand.get_function(name),
                                                      (-(-n // 256), 1, 1), (256, 1, 1),
                                                      [nt(n), np.uint64(w), np.uint64(g),
                                                       f32(0.1), f32(0.01)])
    res = {}
    for _ in range(rounds):
        for name, (f, grid, block, args) in out.items():
            a, b = drv.Event(), drv.Event()
            f.launch(grid, block, args)
            a.record()
            for _ in range(number):
                f.launch(grid, block, args)
            b.record()
            b.synchronize()
            res.setdefault(name, []).append(drv.elapsed_time(a, b) / number)
    return {k: statistics.median(v) for k, v in res.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if not cuda.available():
        print(f"no CUDA device: {cuda.unavailable_reason()}")
        return 0
    a = cuda.device_attributes(0)
    print(f"device : {a['name']} (sm_{a['compute_capability'][0]}{a['compute_capability'][1]}),"
          f" driver {cuda.driver_version()}, NVRTC {cuda.nvrtc_version()}")
    rounds = 3 if args.quick else 7
    n = 1 << 27
    for dtype in (np.float32, np.float64):
        t = e1_case(n, dtype, 5 if args.quick else 20, rounds)
        isz = np.dtype(dtype).itemsize
        print(f"\nE1 w[:] = -eta*(g + lam*w), n = 2**27 {np.dtype(dtype).name}")
        for k, v in t.items():
            moved = (2 if k == "copy" else 3) * n * isz
            print(f"  {k:8s} {v * 1e3:8.3f} ms  {moved / v / 1e9:7.0f} GB/s  "
                  f"mshadow/{k} {t['mshadow'] / v:5.2f}x")
    t = e1_case(16, np.float32, 2000, rounds)
    print("\nE1 n = 16 float32, per statement (host overhead, synchronized)")
    for k, v in t.items():
        print(f"  {k:8s} {v * 1e6:8.2f} us  mshadow/{k} {t['mshadow'] / v:5.2f}x")
    print(f"\nfirst call of a new structure (NVRTC compile, cold caches): "
          f"{first_call() * 1e3:.1f} ms")
    print("\nE1 kernels alone, n = 2**27 float32 (events over back-to-back launches)")
    for k, v in kernel_variants(n, 20, rounds).items():
        print(f"  {k:44s} {v:7.3f} ms  {3 * n * 4 / v / 1e6:6.0f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
