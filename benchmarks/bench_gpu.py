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
    ops    the issue's other goals, each checked against numpy first: ms.sum(x*x) at 2**27
       (cupy.sum, torch.sum), softmax (4096, 1000) (torch.softmax), sgemm / dgemm 4096
       (cupy.matmul, torch.matmul), conv2d 64->64 3x3 pad 1 on (32, 64, 56, 56) and its two
       gradients (torch's cuDNN), sort_by_key of 2**24 float32 keys (torch.sort stable,
       cupy.argsort)

    python benchmarks/bench_gpu.py --smoke   # the ops at toy sizes, one round: a check that
                                             # every case runs (the emulated device too)
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


def _others():
    """(cupy or None, torch or None, a sync for both)."""
    try:
        import cupy as cp
    except ImportError:
        cp = None
    try:
        import torch
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None

    def sync():
        if cp is not None:
            cp.cuda.Device().synchronize()
        if torch is not None:
            torch.cuda.synchronize()
    return cp, torch, sync


def _gpu(a):
    t = ms.new_tensor(a.shape, None, dtype=a.dtype, device=ms.gpu)
    ms.copy(t, ms.from_numpy(np.ascontiguousarray(a)))
    return t


def sum_case(n):
    x0 = np.random.default_rng(1).uniform(-1, 1, n).astype(np.float32)
    x = _gpu(x0)
    cp, torch, sync = _others()
    alts = {"mshadow": lambda: ms.sum(x * x)}
    np.testing.assert_allclose(alts["mshadow"](), np.dot(x0.astype(np.float64), x0),
                               rtol=1e-4)
    if cp is not None:
        c = cp.asarray(x0)
        alts["cupy"] = lambda: cp.sum(c * c)
    if torch is not None:
        t = torch.from_numpy(x0).cuda()
        alts["torch"] = lambda: torch.sum(t * t)
    return alts, sync


def softmax_case(rows, cols):
    e0 = np.random.default_rng(2).standard_normal((rows, cols)).astype(np.float32)
    e, d = _gpu(e0), ms.new_tensor((rows, cols), None, device=ms.gpu)
    cp, torch, sync = _others()
    alts = {"mshadow": lambda: ms.softmax(d, e)}
    alts["mshadow"]()
    want = np.exp(e0 - e0.max(1, keepdims=True))
    np.testing.assert_allclose(d.to_numpy(), want / want.sum(1, keepdims=True), rtol=1e-5,
                               atol=1e-7)
    if torch is not None:
        t = torch.from_numpy(e0).cuda()
        alts["torch"] = lambda: torch.softmax(t, 1)
    return alts, sync


def gemm_case(n, dtype):
    rng = np.random.default_rng(3)
    a0, b0 = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    a, b, c = _gpu(a0), _gpu(b0), ms.new_tensor((n, n), None, dtype=dtype, device=ms.gpu)
    cp, torch, sync = _others()

    def run():
        c[:] = ms.dot(a, b)
    alts = {"mshadow": run}
    run()
    np.testing.assert_allclose(c.to_numpy(), a0.astype(np.float64) @ b0,
                               rtol=1e-3, atol=1e-3 * n ** 0.5)
    if cp is not None:
        ca, cb = cp.asarray(a0), cp.asarray(b0)
        alts["cupy"] = lambda: cp.matmul(ca, cb)
    if torch is not None:
        ta, tb = torch.from_numpy(a0).cuda(), torch.from_numpy(b0).cuda()
        alts["torch"] = lambda: torch.matmul(ta, tb)
    return alts, sync


def conv_case(N, C, H, K, which):
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((N, C, H, H)).astype(np.float32)
    w0 = (rng.standard_normal((K, C, 3, 3)) * 0.1).astype(np.float32)
    g0 = rng.standard_normal((N, K, H, H)).astype(np.float32)
    x, w, g = _gpu(x0), _gpu(w0), _gpu(g0)
    y, dx, dw = (ms.new_tensor(s, None, device=ms.gpu, pad=False)
                 for s in (g0.shape, x0.shape, w0.shape))
    run = {"forward": lambda: ms.nn.conv2d(y, x, w, 1),
           "grad-data": lambda: ms.nn.conv2d_grad_data(dx, g, w, 1),
           "grad-weight": lambda: ms.nn.conv2d_grad_weight(dw, x, g, 1)}[which]
    alts = {"mshadow": run}
    cp, torch, sync = _others()
    if torch is not None:
        F = torch.nn.functional
        tx, tw, tg = (torch.from_numpy(a).cuda() for a in (x0, w0, g0))
        ref = {"forward": lambda: F.conv2d(tx, tw, padding=1),
               "grad-data": lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tg, padding=1),
               "grad-weight": lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tg,
                                                                  padding=1)}[which]
        run()
        got = {"forward": y, "grad-data": dx, "grad-weight": dw}[which].to_numpy()
        np.testing.assert_allclose(got, ref().cpu().numpy(), rtol=2e-3, atol=2e-3)
        alts["torch"] = ref
    else:        # the CPU's conv2d (tests/test_conv2d.py checks it against numpy)
        run()
        (got, a, b), cpu_fn = {"forward": ((y, x0, w0), ms.nn.conv2d),
                               "grad-data": ((dx, g0, w0), ms.nn.conv2d_grad_data),
                               "grad-weight": ((dw, x0, g0), ms.nn.conv2d_grad_weight)}[which]
        want = ms.new_tensor(got.shape, 0)
        cpu_fn(want, ms.from_numpy(a), ms.from_numpy(b), 1)
        np.testing.assert_allclose(got.to_numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    return alts, sync


def sort_case(n):
    k0 = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    v0 = np.arange(n, dtype=np.int32)
    k, v = _gpu(k0), _gpu(v0)

    def run():     # a fresh copy of the keys each time: a sorted input would flatter none
        ms.copy(k, kin)
        ms.nn.sort_by_key(k, v)
    kin = _gpu(k0)
    alts = {"mshadow": run}
    run()
    np.testing.assert_array_equal(k.to_numpy(), np.sort(k0, kind="stable"))
    cp, torch, sync = _others()
    if torch is not None:
        t = torch.from_numpy(k0).cuda()
        alts["torch"] = lambda: torch.sort(t, stable=True)
    if cp is not None:
        c = cp.asarray(k0)
        alts["cupy"] = lambda: cp.argsort(c)
    return alts, sync


SIZES = {False: dict(sum=1 << 27, softmax=(4096, 1000), gemm=4096, conv=(32, 64, 56, 64),
                    sort=1 << 24),
         True: dict(sum=1 << 12, softmax=(64, 100), gemm=32, conv=(2, 4, 9, 5),
                    sort=1 << 12)}     # --smoke


def ops(smoke, number, rounds):
    """The ops table: (case name, its alternatives' median seconds)."""
    z = SIZES[smoke]
    N, C, H, K = z["conv"]
    cases = [(f"sum(x*x) n = {z['sum']} float32", lambda: sum_case(z["sum"])),
             (f"softmax {z['softmax']} float32", lambda: softmax_case(*z["softmax"]))]
    for dt in (np.float32, np.float64):
        cases.append((f"gemm {z['gemm']} {np.dtype(dt).name}",
                      lambda dt=dt: gemm_case(z["gemm"], dt)))
    for which in ("forward", "grad-data", "grad-weight"):
        cases.append((f"conv2d {which} {C}->{K} 3x3 pad 1 on ({N}, {C}, {H}, {H})",
                      lambda which=which: conv_case(N, C, H, K, which)))
    cases.append((f"sort_by_key n = {z['sort']} float32", lambda: sort_case(z["sort"])))
    out = []
    for name, make in cases:
        alts, sync = make()
        out.append((name, _rounds(alts, sync, number, rounds)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="only the ops at toy sizes, one round (every case runs)")
    args = ap.parse_args(argv)
    if not cuda.available():
        print(f"no CUDA device: {cuda.unavailable_reason()}")
        return 0
    if args.smoke:
        for name, t in ops(True, 1, 1):
            print(f"  {name:48s} " + "  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in t.items()))
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
    print("\nthe other goals (median ms; mshadow / other)")
    for name, t in ops(False, 3 if args.quick else 10, rounds):
        line = "  ".join(f"{k} {v * 1e3:.3f} ms" + ("" if k == "mshadow" else
                                                    f" ({t['mshadow'] / v:.2f}x)")
                         for k, v in t.items())
        print(f"  {name:48s} {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
