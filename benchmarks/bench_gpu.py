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
    return 0


if __name__ == "__main__":
    sys.exit(main())
