"""One-thread transcendentals: mshadow's own vectorised exp/log/log1p/tanh vs numpy, numexpr, torch.

    python benchmarks/bench_transcendental.py            # n = 1e5, 1e6, 1e7 (1-2 min on 2 cores)
    python benchmarks/bench_transcendental.py --quick    # n = 1e5, 1e6, fewer rounds (< 20 s)
    python benchmarks/bench_transcendental.py --funcs exp tanh --dtypes float32

Every engine runs single-threaded (ms.set_num_threads(1), numexpr.set_num_threads(1),
torch.set_num_threads(1)) over the same 64-byte aligned input, each into its own preallocated
output:

    mshadow   Y[:] = ms.F(ms.op.exp, X)                 (X, Y: ms.from_numpy views)
    numpy     np.exp(x, out=y)
    numexpr   ne.evaluate('exp(x)', out=y)
    torch     torch.exp(xt, out=yt)                     (xt, yt: torch.from_numpy views)

Functions: exp, log, log1p, tanh, power (x ** 1.7, a non-half-integer exponent so that no
engine takes a square/sqrt shortcut), the composites sigmoid = 1 / (1 + exp(-x)) and
softplus = log1p(exp(x)), and the fused exp_affine: Y[:] = F(exp, X) * a + b. numpy and torch
run composites as a sequence of in-place calls (the best they can do without a temporary);
the table's notes list them. Before anything is timed every result is compared with a float64
numpy reference and its largest relative error printed in units of the dtype's epsilon; a
mshadow result worse than 16 eps prints WRONG and the script exits with status 1.

Timing: for each (function, dtype, n) the engines are timed in interleaved rounds (the order
rotates every round, so none always runs first after the others have evicted the caches); a
round's sample runs the call enough times to last about --min-time seconds (one call when a
call is longer) and records the time per call; the table shows the median over the rounds.
Ratios are engine_time / mshadow_time: above 1 mshadow is faster.
"""
import argparse
import os
import sys
import gc
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (aligned_empty, busy_elsewhere, fmt_ratio, fmt_time,  # noqa: E402
                     print_machine, print_table)

try:
    import mshadow as ms
except ImportError:          # not installed: use the checkout this script lives in
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import mshadow as ms

try:
    import numexpr as ne
except ImportError:          # pip install numexpr
    ne = None

try:
    import torch
except Exception:            # pip install torch (a CPU build); any import failure: no column
    torch = None

P = 1.7                      # exponent of power
A_, B_ = 0.5, 0.25           # exp_affine: exp(x) * a + b
ERR_LIMIT = 16               # mshadow's largest accepted relative error, in eps of the dtype
SHORT = {np.float32: "f32", np.float64: "f64"}


def _uniform(lo, hi):
    return lambda rng, n: rng.uniform(lo, hi, n)


def _logu(lo, hi):           # log-uniform: every binade of a wide positive range
    return lambda rng, n: 10.0 ** rng.uniform(np.log10(lo), np.log10(hi), n)


# name: (input generator, float64 reference, numexpr expression, numpy note, torch note)
FUNCS = {
    "exp": (_uniform(-10, 10), np.exp, "exp(x)", "np.exp(x, out=y)", "torch.exp"),
    "log": (_logu(1e-3, 1e3), np.log, "log(x)", "np.log(x, out=y)", "torch.log"),
    "log1p": (_uniform(-0.9, 10), np.log1p, "log1p(x)", "np.log1p(x, out=y)", "torch.log1p"),
    "tanh": (_uniform(-5, 5), np.tanh, "tanh(x)", "np.tanh(x, out=y)", "torch.tanh"),
    "power": (_uniform(0.1, 10), lambda x: np.power(x, P), "x ** p",
              "np.power(x, p, out=y)", "torch.pow(xt, p)"),
    "sigmoid": (_uniform(-10, 10), lambda x: 1 / (1 + np.exp(-x)), "1 / (1 + exp(-x))",
                "negative; exp; add 1; reciprocal (4 in-place ufuncs)", "torch.sigmoid"),
    "softplus": (_uniform(-10, 10), lambda x: np.log1p(np.exp(x)), "log1p(exp(x))",
                 "exp; log1p (2 in-place ufuncs)", "torch.exp; torch.log1p (2 out= calls)"),
    "exp_affine": (_uniform(-10, 10), lambda x: np.exp(x) * A_ + B_, "exp(x) * a + b",
                   "exp; multiply a; add b (3 in-place ufuncs)",
                   "torch.exp(out=); mul_(a); add_(b)"),
}


def make_impls(name, dt, x, outs):
    """{engine: zero-argument callable} writing f(x) into that engine's own output buffer."""
    X = ms.from_numpy(x)
    F, op = ms.F, ms.op
    p, a, b, one = dt(P), dt(A_), dt(B_), dt(1)
    impl = {}

    Y = ms.from_numpy(outs["mshadow"])
    ms_body = {
        "exp": lambda: F(op.exp, X), "log": lambda: F(op.log, X),
        "log1p": lambda: F(op.log1p, X), "tanh": lambda: F(op.tanh, X),
        "power": lambda: F(op.power, X, P), "sigmoid": lambda: F(op.sigmoid, X),
        "softplus": lambda: F(op.softplus, X), "exp_affine": lambda: F(op.exp, X) * A_ + B_,
    }[name]

    def f_ms():
        Y[:] = ms_body()
    impl["mshadow"] = f_ms

    y = outs["numpy"]
    simple = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "tanh": np.tanh}
    if name in simple:
        uf = simple[name]

        def f_np():
            uf(x, out=y)
    elif name == "power":
        def f_np():
            np.power(x, p, out=y)
    elif name == "sigmoid":
        def f_np():
            np.negative(x, out=y)
            np.exp(y, out=y)
            np.add(y, one, out=y)
            np.reciprocal(y, out=y)
    elif name == "softplus":
        def f_np():
            np.exp(x, out=y)
            np.log1p(y, out=y)
    else:
        def f_np():
            np.exp(x, out=y)
            np.multiply(y, a, out=y)
            np.add(y, b, out=y)
    impl["numpy"] = f_np

    if ne is not None:
        yn, expr = outs["numexpr"], FUNCS[name][2]
        ld = dict(x=x, p=p, a=a, b=b)    # scalars as the array dtype: float32 stays float32

        def f_ne():
            ne.evaluate(expr, local_dict=ld, out=yn)
        impl["numexpr"] = f_ne

    if torch is not None:
        xt, yt = torch.from_numpy(x), torch.from_numpy(outs["torch"])
        tsimple = {"exp": torch.exp, "log": torch.log, "log1p": torch.log1p,
                   "tanh": torch.tanh, "sigmoid": torch.sigmoid}
        if name in tsimple:
            tf = tsimple[name]

            def f_t():
                tf(xt, out=yt)
        elif name == "power":
            def f_t():
                torch.pow(xt, P, out=yt)
        elif name == "softplus":
            def f_t():
                torch.exp(xt, out=yt)
                torch.log1p(yt, out=yt)
        else:
            def f_t():
                torch.exp(xt, out=yt)
                yt.mul_(A_).add_(B_)
        impl["torch"] = f_t
    return impl


def max_err_eps(got, ref, dt):
    """Largest |got - ref| / max(|ref|, tiny) in eps of ``dt`` (a non-finite mismatch: inf)."""
    fi = np.finfo(dt)
    g = got.astype(np.float64)
    bad = ~np.isfinite(g) & np.isfinite(ref)
    if bad.any():
        return float("inf")
    rel = np.abs(g - ref) / np.maximum(np.abs(ref), float(fi.tiny))
    return float(np.max(rel)) / float(fi.eps)


def time_rounds(impl, rounds, min_time):
    """{engine: median seconds per call} over ``rounds`` interleaved rounds."""
    names = list(impl)
    number = {}
    for k in names:                        # warm up (plan compile, page faults), calibrate
        fn = impl[k]
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        if one < 0.02:                     # short calls: one more warm-up, then calibrate
            fn()
            t0 = time.perf_counter()
            fn()
            one = time.perf_counter() - t0
        number[k] = max(1, min(100000, int(min_time / one))) if one > 0 else 1000
    samples = {k: [] for k in names}
    was = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                fn, m = impl[k], number[k]
                t0 = time.perf_counter()
                for _ in range(m):
                    fn()
                samples[k].append((time.perf_counter() - t0) / m)
    finally:
        if was:
            gc.enable()
    return {k: float(np.median(v)) for k, v in samples.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 1e5 and 1e6 only, 3 rounds")
    ap.add_argument("--funcs", nargs="+", default=list(FUNCS), choices=list(FUNCS))
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"],
                    choices=["float32", "float64"])
    ap.add_argument("--sizes", type=float, nargs="+", default=None,
                    help="element counts (default 1e5 1e6 1e7; --quick: 1e5 1e6)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7, "
                    "3 at n >= 1e7; --quick: 3)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds per sample (default 0.01; --quick: 0.003)")
    args = ap.parse_args()
    sizes = [int(s) for s in (args.sizes or ([1e5, 1e6] if args.quick else [1e5, 1e6, 1e7]))]
    rounds = args.rounds or (3 if args.quick else 7)
    min_time = args.min_time or (0.003 if args.quick else 0.01)
    dtypes = [np.dtype(d).type for d in args.dtypes]

    ms.set_num_threads(1)
    if ne is not None:
        ne.set_num_threads(1)
    if torch is not None:
        try:
            torch.set_num_threads(1)
        except Exception:
            pass
    engines = ["mshadow", "numpy"] + (["numexpr"] if ne else []) + (["torch"] if torch else [])

    print("mshadow transcendental benchmark, one thread" + (" (--quick)" if args.quick else ""))
    print_machine()
    print(f"mshadow : {getattr(ms, '__version__', '?')} from {os.path.dirname(ms.__file__)}, "
          f"threads {ms.get_num_threads()}, simd_info={ms.simd_info()}")
    tv = "not installed"
    if torch is not None:
        try:
            cap = torch.backends.cpu.get_cpu_capability()
        except Exception:
            cap = "?"
        tv = f"{torch.__version__} (capability {cap}, threads {torch.get_num_threads()})"
    print(f"numpy {np.__version__}; numexpr "
          f"{f'{ne.__version__} (threads 1, VML {ne.use_vml})' if ne else 'not installed'}; "
          f"torch {tv}")
    r7 = "" if args.rounds else f" ({min(rounds, 3)} at n >= 1e7)"
    print(f"times: median over {rounds}{r7} interleaved rounds (order rotates), each sample "
          f">= {min_time * 1e3:g} ms or one call; ratios = engine / mshadow (> 1: mshadow faster);"
          f" err = max relative error vs float64 numpy, in eps of the dtype")

    rng = np.random.default_rng(0)
    failures = []
    header = (["func", "dtype", "n"] + engines
              + [f"{e[:5]}/ms" for e in engines[1:]] + ["ms err", "np err"])
    rows = []
    t_start = time.perf_counter()
    for name in args.funcs:
        gen, ref_fn = FUNCS[name][0], FUNCS[name][1]
        for dt in dtypes:
            for n in sizes:
                x = aligned_empty(n, dt)
                x[:] = gen(rng, n)
                outs = {e: aligned_empty(n, dt) for e in engines}
                impl = make_impls(name, dt, x, outs)
                with np.errstate(all="ignore"):
                    ref = ref_fn(x.astype(np.float64))
                err = {}
                for e, fn in impl.items():
                    outs[e].fill(np.nan)
                    fn()
                    err[e] = max_err_eps(outs[e], ref, dt)
                del ref
                label = [name, SHORT[dt], f"{n:.0e}"]
                if not err["mshadow"] <= ERR_LIMIT:
                    failures.append(f"{name} {SHORT[dt]} n={n:.0e}: mshadow max error "
                                    f"{err['mshadow']:.3g} eps > {ERR_LIMIT}")
                    rows.append(label + ["WRONG"] + [""] * (len(header) - 4))
                    continue
                r = rounds if n < 10**7 or args.rounds else min(rounds, 3)
                t = time_rounds(impl, r, min_time)
                tm = t["mshadow"]
                rows.append(label + [fmt_time(t[e]) for e in engines]
                            + [fmt_ratio(t[e] / tm) for e in engines[1:]]
                            + [f"{err['mshadow']:.1f}", f"{err['numpy']:.1f}"])
                del impl, outs, x
    elapsed = time.perf_counter() - t_start
    notes = ["err: max |y - ref| / |ref| in eps of the dtype (f32 2^-23, f64 2^-52); the "
             "reference is numpy in float64, so numpy's own f64 error reads 0",
             f"power: x ** {P} (scalar exponent); numexpr gets p as a variable of the array "
             f"dtype; exp_affine: exp(x) * {A_} + {B_}"]
    for name in args.funcs:
        if name in ("sigmoid", "softplus", "exp_affine", "power"):
            notes.append(f"{name}: mshadow one fused pass; numpy {FUNCS[name][3]}; "
                         f"numexpr '{FUNCS[name][2]}'; torch {FUNCS[name][4]}")
    print_table("one thread, float32 and float64; times per call", header, rows, notes)
    busy = busy_elsewhere()
    print(f"\n{busy * 100:.0f}% of the CPUs busy with other work at the end; timed part took "
          f"{elapsed:.0f} s")
    if failures:
        print("\nCORRECTNESS FAILURES (checked before timing):")
        for m in failures:
            print("  " + m)
        return 1
    print(f"all mshadow results within {ERR_LIMIT} eps of the float64 numpy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
