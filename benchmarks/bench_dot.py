"""Matrix products: ms.dot / ms.batch_dot (scipy's BLAS, no temporaries) vs numpy.matmul.

    python benchmarks/bench_dot.py             # 256..2048, float32 and float64 (< 60 s on 2 cores)
    python benchmarks/bench_dot.py --quick     # 256 and 512 only (< 20 s)
    python benchmarks/bench_dot.py --sizes 512 1024 --dtypes float32
    python benchmarks/bench_dot.py --threads 1  # both BLAS libraries single-threaded

Rows: C = op(A) op(B) for the four transpose combinations (a transposed operand is stored
transposed and read through the BLAS flag by both libraries, no copy), then C += A B, where
numpy needs the temporary `c += a @ b` and mshadow calls gemm with beta = 1 into C. Then
batch_dot 64 x (128 x 128) against numpy.matmul on 3-D arrays. "speed" is
t_numpy / t_mshadow: above 1 mshadow is faster. Every result is checked against numpy first.

numpy and scipy each bundle an OpenBLAS (numpy's ILP64 build, scipy's LP64 build, used by
mshadow); the table prints both versions. The two thread pools run one after the other, never
at once; each timing is the best of several samples, taken in alternating rounds.
"""
import argparse
import os
import sys
import time


def _args(argv=None):
    p = argparse.ArgumentParser(description="ms.dot / ms.batch_dot vs numpy.matmul")
    p.add_argument("--quick", action="store_true", help="sizes 256 and 512 only")
    p.add_argument("--sizes", type=int, nargs="+", help="square sizes (default 256 512 1024 2048)")
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    p.add_argument("--threads", type=int, help="BLAS threads for both libraries (default: all)")
    return p.parse_args(argv)


if __name__ == "__main__":
    ARGS = _args()
    if ARGS.threads:
        # read by each bundled OpenBLAS when it loads, so before numpy and scipy are imported
        os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (best_of, cpu_model, fmt_ratio, fmt_time, loadavg, nproc,  # noqa: E402
                     print_table)

try:
    import mshadow as ms
except ImportError:          # not installed: use the checkout this script lives in
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import mshadow as ms

TRANS = (("NN", False, False), ("TN", True, False), ("NT", False, True), ("TT", True, True))


def _blas_versions():
    out = {}
    for mod in ("numpy", "scipy"):
        try:
            cfg = __import__(mod).show_config(mode="dicts")
            blas = cfg["Build Dependencies"]["blas"]
            out[mod] = f"{blas.get('name', '?')} {blas.get('version', '?')}"
        except Exception:    # older numpy/scipy have no dict mode
            out[mod] = "?"
    return out


def _paired(fn_np, fn_ms, rounds, **kw):
    """Best time of each over ``rounds`` alternating rounds (neither always goes first)."""
    t_np = t_ms = float("inf")
    for r in range(rounds):
        order = ((fn_np, 0), (fn_ms, 1)) if r % 2 == 0 else ((fn_ms, 1), (fn_np, 0))
        for fn, which in order:
            t = best_of(fn, **kw)
            if which == 0:
                t_np = min(t_np, t)
            else:
                t_ms = min(t_ms, t)
    return t_np, t_ms


def _settings(n):
    """Samples per size: big products take ~0.1 s each, so they get fewer."""
    if n >= 2048:
        return dict(repeat=2, number=1, warmup=1), 2
    if n >= 1024:
        return dict(repeat=3, number=1, warmup=1), 2
    return dict(repeat=3, min_time=0.03, warmup=2), 2


def bench_gemm(sizes, dtypes):
    rows = []
    rng = np.random.default_rng(0)
    for dt in dtypes:
        for n in sizes:
            kw, rounds = _settings(n)
            a = rng.standard_normal((n, n)).astype(dt)
            b = rng.standard_normal((n, n)).astype(dt)
            c_np = np.zeros((n, n), dt)
            c_ms_arr = np.zeros((n, n), dt)
            A, B, C = ms.from_numpy(a), ms.from_numpy(b), ms.from_numpy(c_ms_arr)
            tol = 1e-3 * n ** 0.5 if dt == np.float32 else 1e-10 * n ** 0.5
            for label, ta, tb in TRANS:
                an, bn = (a.T if ta else a), (b.T if tb else b)     # views: BLAS flags
                Am, Bm = (A.T if ta else A), (B.T if tb else B)

                def f_np():
                    np.matmul(an, bn, out=c_np)

                def f_ms():
                    C[:] = ms.dot(Am, Bm)
                f_np()
                f_ms()
                np.testing.assert_allclose(c_ms_arr, c_np, rtol=tol, atol=tol)
                t_np, t_ms = _paired(f_np, f_ms, rounds, **kw)
                rows.append([np.dtype(dt).name, str(n), f"C = {label}", fmt_time(t_np),
                             fmt_time(t_ms), fmt_ratio(t_np / t_ms),
                             f"{2 * n ** 3 / t_ms / 1e9:.0f}"])
            # += : numpy makes a temporary product, mshadow runs gemm with beta = 1 into C
            def f_np_acc():
                c_np.__iadd__(a @ b)

            def f_ms_acc():
                C.__iadd__(ms.dot(A, B))
            c_np[...] = 0
            c_ms_arr[...] = 0
            f_np_acc()
            f_ms_acc()
            np.testing.assert_allclose(c_ms_arr, c_np, rtol=tol, atol=tol)
            t_np, t_ms = _paired(f_np_acc, f_ms_acc, rounds, **kw)
            rows.append([np.dtype(dt).name, str(n), "C += NN", fmt_time(t_np), fmt_time(t_ms),
                         fmt_ratio(t_np / t_ms), f"{2 * n ** 3 / t_ms / 1e9:.0f}"])
    return rows


def bench_batch(dtypes, nbatch=64, n=128):
    rows = []
    rng = np.random.default_rng(1)
    kw = dict(repeat=3, min_time=0.03, warmup=2)
    for dt in dtypes:
        a = rng.standard_normal((nbatch, n, n)).astype(dt)
        b = rng.standard_normal((nbatch, n, n)).astype(dt)
        c_np = np.zeros((nbatch, n, n), dt)
        c_ms_arr = np.zeros((nbatch, n, n), dt)
        A, B, C = ms.from_numpy(a), ms.from_numpy(b), ms.from_numpy(c_ms_arr)
        for label, tl, tr in (("NN", False, False), ("TT", True, True)):
            an = a.transpose(0, 2, 1) if tl else a
            bn = b.transpose(0, 2, 1) if tr else b

            def f_np():
                np.matmul(an, bn, out=c_np)

            def f_ms():
                C[:] = ms.batch_dot(A, B, tl, tr)
            f_np()
            f_ms()
            np.testing.assert_allclose(c_ms_arr, c_np, rtol=1e-3, atol=1e-3)
            t_np, t_ms = _paired(f_np, f_ms, 2, **kw)
            rows.append([np.dtype(dt).name, f"{nbatch}x{n}", f"batch {label}", fmt_time(t_np),
                         fmt_time(t_ms), fmt_ratio(t_np / t_ms),
                         f"{2 * nbatch * n ** 3 / t_ms / 1e9:.0f}"])
    return rows


def bench_small(dtypes, n=16):
    """Per-call cost at a size where BLAS does almost nothing: the Python path of `=`."""
    rows = []
    for dt in dtypes:
        a = np.ones((n, n), dt)
        c_np = np.zeros((n, n), dt)
        A, C = ms.from_numpy(a), ms.new_tensor((n, n), dtype=dt)

        def f_np():
            np.matmul(a, a, out=c_np)

        def f_ms():
            C[:] = ms.dot(A, A)
        t_np, t_ms = _paired(f_np, f_ms, 2, repeat=5, min_time=0.02)
        rows.append([np.dtype(dt).name, str(n), "C = NN", fmt_time(t_np), fmt_time(t_ms),
                     fmt_ratio(t_np / t_ms), "-"])
    return rows


def main(args):
    sizes = args.sizes or ([256, 512] if args.quick else [256, 512, 1024, 2048])
    dtypes = [np.dtype(d).type for d in args.dtypes]
    t0 = time.perf_counter()
    blas = _blas_versions()
    print(f"machine: {nproc()} CPUs, {cpu_model()}; load {loadavg()}; BLAS threads "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
    print(f"numpy {np.__version__} BLAS: {blas['numpy']}; scipy BLAS (mshadow): {blas['scipy']}")
    rows = bench_gemm(sizes, dtypes)
    rows += bench_batch(dtypes)
    rows += bench_small(dtypes)
    print_table("dot vs numpy.matmul (speed = t_numpy / t_mshadow)",
                ["dtype", "size", "op", "numpy", "mshadow", "speed", "GFLOP/s"], rows,
                notes=["C = XY: X, Y in {N, T}: operand stored transposed, read via the BLAS flag",
                       "C += NN: numpy runs `c += a @ b` (a temporary); mshadow gemm beta=1 into C",
                       "batch: 64 x (128 x 128), numpy.matmul on 3-D arrays",
                       "size 16: per-call overhead (expression node + engine dispatch)"])
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main(ARGS)
