"""Fused reductions: ``ms.sum(x * x)`` (one pass, no temporary) against a hand-written C loop
with lane accumulators, ``np.sum(x * x)``, ``np.dot(x, x)`` (BLAS) and PyTorch, one thread;
and small reduction statements (``y[:] = ms.sum_rows(x)``: the per-statement cost) against
numpy's ``add.reduce(out=)`` and ``torch.sum(out=)``; and the last axis of narrow rows
(``reduce_with_axis(x, -1, red.sum)`` of a tensor and of ``x * 2``) against numpy, torch and
an in-order C loop.

    python benchmarks/bench_reduce.py [--rounds 9] [--sizes 1e5,1e6,1e7] [--skip small,rows]

Interleaved rounds: every alternative runs once per round, in turn; medians are reported.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import aligned_empty, cpu_model, fmt_ratio, fmt_time, loadavg, print_table  # noqa: E402

import mshadow as ms  # noqa: E402

C_SRC = r"""
#include <stddef.h>
/* sum of squares with 16 lane accumulators: what a careful C programmer writes */
float sumsq_f32(const float *x, ptrdiff_t n) {
  float acc[16] = {0};
  ptrdiff_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l] * x[i + l];
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}
/* each row's sum, in order: the loop a C programmer writes for the last axis */
void rowsum_f32(const float *x, ptrdiff_t rows, ptrdiff_t n, float *out) {
  for (ptrdiff_t r = 0; r < rows; ++r) {
    float s = 0;
    for (ptrdiff_t i = 0; i < n; ++i) s += x[r * n + i];
    out[r] = s;
  }
}
void rowsum_f64(const double *x, ptrdiff_t rows, ptrdiff_t n, double *out) {
  for (ptrdiff_t r = 0; r < rows; ++r) {
    double s = 0;
    for (ptrdiff_t i = 0; i < n; ++i) s += x[r * n + i];
    out[r] = s;
  }
}
double sumsq_f64(const double *x, ptrdiff_t n) {
  double acc[16] = {0};
  ptrdiff_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l] * x[i + l];
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  double s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}
"""


def build_c(tmp):
    src, so = os.path.join(tmp, "r.c"), os.path.join(tmp, "r.so")
    with open(src, "w") as f:
        f.write(C_SRC)
    subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", src, "-o", so], check=True)
    lib = ctypes.CDLL(so)
    lib.sumsq_f32.restype = ctypes.c_float
    lib.sumsq_f64.restype = ctypes.c_double
    for fn in (lib.sumsq_f32, lib.sumsq_f64):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    for fn in (lib.rowsum_f32, lib.rowsum_f64):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_void_p]
    return lib


def interleaved_medians(alts, rounds, sample=None):
    """{name: the median over ``rounds`` interleaved rounds of ``sample(fn)``} for each of
    ``alts`` (a round times every alternative once, in order; default sample: timeit)."""
    sample = sample or timeit
    samples = {name: [] for name in alts}
    for _ in range(rounds):
        for name, fn in alts.items():
            samples[name].append(sample(fn))
    return {name: statistics.median(v) for name, v in samples.items()}


def timeit(fn, min_time=0.01):
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / n


# (label, source shape, the mshadow statement's reduction, the reduced axes, the scale the
# statement's source has: numpy and torch multiply into a scratch array first when it is not 1)
SMALL = (("sum_rows(x), 4x16", (4, 16), lambda x: ms.sum_rows(x), (0,), 1),
         ("sum_rows(x), 64x64", (64, 64), lambda x: ms.sum_rows(x), (0,), 1),
         ("sum_rows(x * 2), 64x64", (64, 64), lambda x: ms.sum_rows(x * 2), (0,), 2),
         ("sumall_except_dim(x, 1), 2x8x4x4", (2, 8, 4, 4),
          lambda x: ms.sumall_except_dim(x, 1), (0, 2, 3), 1),
         ("sumall_except_dim(x, 1), 8x16x7x7", (8, 16, 7, 7),
          lambda x: ms.sumall_except_dim(x, 1), (0, 2, 3), 1))


def small_section(args, torch):
    """Small reduction statements: microseconds a statement, interleaved rounds."""
    rows = []
    for label, shape, build, axes, k in SMALL:
        a = np.random.default_rng(1).uniform(0, 1, shape).astype(np.float32)
        x = ms.from_numpy(a)
        keep = [d for d in range(len(shape)) if d not in axes]
        y = ms.new_tensor(tuple(shape[d] for d in keep))
        yn, tmp = np.empty(y.shape, np.float32), np.empty_like(a)

        def stmt():
            y[:] = build(x)

        def np_reduce(fn):
            if k == 1:
                return lambda: fn(a, axis=axes, out=yn)
            return lambda: fn(np.multiply(a, np.float32(k), out=tmp), axis=axes, out=yn)
        alts = {"mshadow": stmt, "np.add.reduce(out=)": np_reduce(np.add.reduce),
                "np.sum(out=)": np_reduce(np.sum)}
        if torch is not None:
            at, yt, tt = torch.from_numpy(a), torch.from_numpy(yn), torch.from_numpy(tmp)
            alts["torch.sum(out=)"] = (
                (lambda: torch.sum(at, dim=axes, out=yt)) if k == 1 else
                (lambda: torch.sum(torch.mul(at, k, out=tt), dim=axes, out=yt)))
        want = (a.astype(np.float64) * k).sum(axis=axes)
        for name, fn in alts.items():
            fn()
            got = y.numpy() if name == "mshadow" else yn
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=name)
        med = interleaved_medians(alts, args.rounds,
                                  lambda fn: min(timeit(fn, 0.002) for _ in range(3)))
        m = med["mshadow"]
        others = [name for name in alts if name != "mshadow"]
        rows.append([label, f"{m * 1e6:.2f}"] + [f"{med[o] * 1e6:.2f}" for o in others]
                    + [fmt_ratio(m / med[o]) for o in others])
    print_table(f"small reduction statements, float32, us a statement, medians of "
                f"{args.rounds} interleaved rounds (a round: the best of 3 bursts of 2 ms)",
                ["statement", "mshadow us"] + [f"{o} us" for o in others]
                + [f"ms / {o}" for o in others], rows,
                ["ms / X > 1: mshadow slower; mshadow builds the expression each statement, "
                 "numpy and torch reduce a given array into out= (x * 2: multiplied into a "
                 "scratch array first)"])


# the last axis of narrow rows (a global pool's (N * C, H * W), a softmax's classes)
ROWS = ((16384, 49), (100000, 7), (4096, 16), (2048, 100), (16384, 200))


def rows_section(args, torch, lib):
    """``y[:] = reduce_with_axis(x, -1, red.sum)`` of narrow rows, of a tensor and of
    x * 2, against numpy's add.reduce(out=), torch.sum(out=) and an in-order C loop."""
    for dtype in (np.float32, np.float64):
        rows = []
        cfn = lib.rowsum_f32 if dtype == np.float32 else lib.rowsum_f64
        for shape in ROWS:
            a = np.random.default_rng(2).uniform(-1, 1, shape).astype(dtype)
            x, y = ms.from_numpy(a), ms.new_tensor(shape[:1], dtype=dtype)
            yn, yc, tmp = np.empty(shape[0], dtype), np.empty(shape[0], dtype), np.empty_like(a)
            alts = {"ms x": lambda: y.__setitem__(slice(None), ms.reduce_with_axis(x, 1, ms.red.sum)),
                    "ms x*2": lambda: y.__setitem__(slice(None),
                                                    ms.reduce_with_axis(x * 2, 1, ms.red.sum)),
                    "numpy x": lambda: np.add.reduce(a, axis=1, out=yn),
                    "numpy x*2": lambda: np.add.reduce(np.multiply(a, dtype(2), out=tmp),
                                                       axis=1, out=yn),
                    "C loop x": lambda: cfn(a.ctypes.data, shape[0], shape[1], yc.ctypes.data)}
            if torch is not None:
                at, yt, tt = torch.from_numpy(a), torch.from_numpy(yn), torch.from_numpy(tmp)
                alts["torch x"] = lambda: torch.sum(at, dim=1, out=yt)
                alts["torch x*2"] = lambda: torch.sum(torch.mul(at, 2, out=tt), dim=1, out=yt)
            want = a.astype(np.float64).sum(axis=1)
            for name, fn in alts.items():
                fn()
                got = y.numpy() if name.startswith("ms") else yc if name.startswith("C") else yn
                np.testing.assert_allclose(got, want * (2 if name.endswith("*2") else 1),
                                           rtol=1e-4, atol=1e-4, err_msg=name)
            med = interleaved_medians(alts, args.rounds)
            r = [f"{shape[0]}x{shape[1]}", fmt_time(med["ms x"]), fmt_time(med["ms x*2"]),
                 fmt_ratio(med["ms x"] / med["numpy x"]), fmt_ratio(med["ms x*2"] / med["numpy x*2"]),
                 fmt_ratio(med["ms x"] / med["C loop x"])]
            if torch is not None:
                r += [fmt_ratio(med["ms x"] / med["torch x"]),
                      fmt_ratio(med["ms x*2"] / med["torch x*2"])]
            rows.append(r)
        print_table(f"sum of the last axis, {np.dtype(dtype).name}, medians of {args.rounds} "
                    f"interleaved rounds",
                    ["rows x cols", "ms x", "ms x*2", "ms/np x", "ms/np x*2", "ms/C x"]
                    + (["ms/torch x", "ms/torch x*2"] if torch is not None else []), rows,
                    ["ratios > 1: mshadow slower; x*2: numpy and torch multiply into a scratch "
                     "array first; the C loop adds each row in order"])


AXES = (((64, 64), 0), ((4096, 1000), 0), ((100000, 7), 0), ((64, 512, 49), 1),
        ((32, 64, 3136), 1))


def axes_section(args, torch):
    """``y[:] = reduce_with_axis(x, k, red.sum)`` of a tensor over a leading or middle axis
    (the fused pass, as x * 1 runs) against numpy's add.reduce(out=) and torch.sum(out=)."""
    rows = []
    for shape, k in AXES:
        a = np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)
        out = shape[:k] + shape[k + 1:]
        x, y, yn = ms.from_numpy(a), ms.new_tensor(out), np.empty(out, np.float32)
        alts = {"ms": lambda: y.__setitem__(slice(None), ms.reduce_with_axis(x, k, ms.red.sum)),
                "numpy": lambda: np.add.reduce(a, axis=k, out=yn)}
        if torch is not None:
            at, yt = torch.from_numpy(a), torch.from_numpy(yn)
            alts["torch"] = lambda: torch.sum(at, dim=k, out=yt)
        want = a.astype(np.float64).sum(axis=k)
        for name, fn in alts.items():
            fn()
            np.testing.assert_allclose(y.numpy() if name == "ms" else yn, want, rtol=1e-4,
                                       atol=1e-3, err_msg=name)
        med = interleaved_medians(alts, args.rounds)
        r = [f"{'x'.join(map(str, shape))} axis {k}", fmt_time(med["ms"]), fmt_time(med["numpy"]),
             fmt_ratio(med["ms"] / med["numpy"])]
        if torch is not None:
            r += [fmt_time(med["torch"]), fmt_ratio(med["ms"] / med["torch"])]
        rows.append(r)
    print_table(f"sum over a leading or middle axis of a tensor, float32, medians of "
                f"{args.rounds} interleaved rounds",
                ["shape", "mshadow", "numpy", "ms/np"]
                + (["torch", "ms/torch"] if torch is not None else []), rows,
                ["ratios > 1: mshadow slower; mshadow: a statement, y[:] = "
                 "reduce_with_axis(x, k, red.sum); numpy: np.add.reduce(x, axis=k, out=y); "
                 "torch: torch.sum(x, dim=k, out=y)"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--skip", default="",
                    help="comma-separated sections to skip: sum,small,rows,axes")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    ms.set_num_threads(1)          # also caps the BLAS pool (threadpoolctl)
    try:
        import torch
        torch.set_num_threads(1)
    except Exception:              # noqa: BLE001 - torch is optional
        torch = None
    print(f"# {cpu_model()}, {os.cpu_count()} cores, load {loadavg()}; SIMD "
          f"{ms.simd_info()['active']}; numpy {np.__version__}; one thread everywhere")
    if "small" not in skip:
        small_section(args, torch)
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_c(tmp)
        if "rows" not in skip:
            rows_section(args, torch, lib)
        if "axes" not in skip:
            axes_section(args, torch)
        if "sum" in skip:
            return
        for dtype in (np.float32, np.float64):
            rows = []
            for n in sizes:
                x = aligned_empty(n, dtype)
                x[:] = np.random.default_rng(0).uniform(-1, 1, n)
                t = ms.from_numpy(x)
                cfn = lib.sumsq_f32 if dtype == np.float32 else lib.sumsq_f64
                alts = {"ms.sum(x*x)": lambda: ms.sum(t * t),
                        "C loop": lambda: cfn(x.ctypes.data, n),
                        "np.sum(x*x)": lambda: np.sum(x * x),
                        "np.dot(x,x)": lambda: np.dot(x, x)}
                if torch is not None:
                    xt = torch.from_numpy(x)
                    alts["torch.sum(x*x)"] = lambda: torch.sum(xt * xt)
                ref = float(np.dot(x.astype(np.float64), x.astype(np.float64)))
                got = float(ms.sum(t * t))
                assert abs(got - ref) <= 1e-4 * ref, (got, ref)
                med = interleaved_medians(alts, args.rounds)
                m = med["ms.sum(x*x)"]
                rows.append([f"{n:.0e}"] + [fmt_time(m), fmt_ratio(m / med["C loop"])]
                            + [fmt_ratio(med[k] / m) for k in alts if k not in ("ms.sum(x*x)", "C loop")])
            header = (["n", "ms.sum(x*x)", "ms / C loop"]
                      + [f"{k} / ms" for k in alts if k not in ("ms.sum(x*x)", "C loop")])
            print_table(f"sum of squares, {np.dtype(dtype).name}, medians of {args.rounds} "
                        f"interleaved rounds", header, rows,
                        ["ms / C loop below 1.2x is the target; other columns > 1: mshadow faster"])


if __name__ == "__main__":
    main()
