"""Element-wise assignment: mshadow vs a hand-written C loop, numpy and numexpr.

    python benchmarks/bench_elementwise.py            # full run (< 3 min on 2 cores)
    python benchmarks/bench_elementwise.py --quick    # fewer rounds, no n = 1e7 (< 1 min)
    python benchmarks/bench_elementwise.py --threads 1

Expressions (float32 and float64):
    E1  w[:] = -eta * (g + lam * w)
    E2  a += b * c + d
    TR  y[:] = ms.F(ms.op.exp, x) * 0.5 + ms.F(ms.op.tanh, x)          (n = 1e6)
Every implementation runs over the same 64-byte aligned numpy buffers (mshadow through
ms.from_numpy, the C loop through ctypes). Every result is checked against a float64
numpy reference before anything is timed. See benchmarks/README.md for the columns.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (add_timing_args, aligned_empty, best_of, busy_elsewhere,  # noqa: E402
                     fmt_ratio, fmt_time, measure, print_machine, print_table)

try:
    import mshadow as ms
except ImportError:          # not installed: use the checkout this script lives in
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import mshadow as ms

try:
    import numexpr as ne
except ImportError:          # pip install numexpr
    ne = None

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_PER_THREAD = 32768   # mshadow's MapPlan uses min(threads, n // 32768) threads; mirrored here
ETA, LAM = 0.1, 0.5
DTYPES = (np.float32, np.float64)
TOL = {np.float32: dict(rtol=2e-6, atol=1e-6), np.float64: dict(rtol=1e-13, atol=1e-14)}
TOL_TR = {np.float32: dict(rtol=4e-6, atol=1e-6), np.float64: dict(rtol=1e-13, atol=1e-14)}
CTYPE = {np.float32: ctypes.c_float, np.float64: ctypes.c_double}
SHORT = {np.float32: "f32", np.float64: "f64"}


# ---------------------------------------------------------------------------- C loop
def build_cloop(tmpdir):
    """gcc -O3 -march=native -fopenmp -shared -fPIC cloop.c into ``tmpdir``; ctypes handle."""
    so = os.path.join(tmpdir, "cloop.so")
    cmd = ["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
           os.path.join(HERE, "cloop.c"), "-o", so, "-lm"]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(so)
    P, L, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for dt in DTYPES:
        s, S = SHORT[dt], CTYPE[dt]
        getattr(lib, f"e1_{s}").argtypes = [P, P, S, S, L, I, L]
        getattr(lib, f"e2_{s}").argtypes = [P, P, P, P, L, I, L]
        getattr(lib, f"tr_{s}").argtypes = [P, P, L, I, L]
        getattr(lib, f"e1_{s}_rep").argtypes = [P, P, S, S, L, I, L, L]
        getattr(lib, f"e2_{s}_rep").argtypes = [P, P, P, P, L, I, L, L]
    return lib, " ".join(cmd[:6] + ["cloop.c", "-lm"])


# ---------------------------------------------------------------------------- cases
class Case:
    """One expression at one (dtype, n): buffers, the implementations and the reference."""

    def __init__(self, expr, dtype, n, lib, nt, thr, rng):
        self.expr, self.dtype, self.n = expr, dtype, n
        names = {"E1": ("w", "g"), "E2": ("a", "b", "c", "d"), "TR": ("y", "x")}[expr]
        self.arr = {k: aligned_empty(n, dtype) for k in names}
        self.tmp = aligned_empty(n, dtype)
        self.tmp2 = aligned_empty(n, dtype)
        for k in names:
            if expr == "TR" and k == "x":
                self.arr[k][:] = rng.uniform(-1, 1, n)
            else:
                self.arr[k][:] = rng.uniform(0.5, 1.5, n)
        self.init = {k: v.copy() for k, v in self.arr.items()}
        self.T = {k: ms.from_numpy(v) for k, v in self.arr.items()}
        self.impl = self._impls(lib, nt, thr)

    def reset(self):
        for k, v in self.arr.items():
            v[:] = self.init[k]

    def reference(self):
        i = {k: v.astype(np.float64) for k, v in self.init.items()}
        if self.expr == "E1":
            return "w", -ETA * (i["g"] + LAM * i["w"])
        if self.expr == "E2":
            return "a", i["a"] + (i["b"] * i["c"] + i["d"])
        return "y", np.exp(i["x"]) * 0.5 + np.tanh(i["x"])

    def _impls(self, lib, nt, thr):
        dt, n, s = self.dtype, self.n, SHORT[self.dtype]
        A, T, t = self.arr, self.T, self.tmp
        out = {}
        if self.expr == "E1":
            w, g, W, G = A["w"], A["g"], T["w"], T["g"]
            eta, lam = ETA, LAM
            eta_t, lam_t, neta_t = dt(ETA), dt(LAM), dt(-ETA)
            fn_c, pw, pg = lib[f"e1_{s}"], w.ctypes.data, g.ctypes.data

            def ms_():
                W[:] = -eta * (G + lam * W)

            def c_():
                fn_c(pw, pg, eta, lam, n, nt, thr)

            def np_():
                w[:] = -eta * (g + lam * w)

            def npin_():                 # numpy's best: 3 in-place ufuncs, -eta folded
                np.multiply(w, lam_t, out=t)
                np.add(t, g, out=t)
                np.multiply(t, neta_t, out=w)

            def np4_():                  # one in-place ufunc per operator of E1
                np.multiply(w, lam_t, out=t)
                np.add(g, t, out=t)
                np.multiply(t, eta_t, out=t)
                np.negative(t, out=w)

            ld = dict(w=w, g=g, eta=eta_t, lam=lam_t)

            def ne_():
                ne.evaluate("-eta * (g + lam * w)", local_dict=ld, out=w)

            out["np4"] = np4_
        elif self.expr == "E2":
            a, b, c, d = A["a"], A["b"], A["c"], A["d"]
            Ta, Tb, Tc, Td = T["a"], T["b"], T["c"], T["d"]
            fn_c = lib[f"e2_{s}"]
            pa, pb, pc, pd = (A[k].ctypes.data for k in "abcd")

            def ms_():
                nonlocal Ta
                Ta += Tb * Tc + Td

            def c_():
                fn_c(pa, pb, pc, pd, n, nt, thr)

            def np_():
                nonlocal a
                a += b * c + d

            def npin_():
                np.multiply(b, c, out=t)
                np.add(t, d, out=t)
                np.add(a, t, out=a)

            ld = dict(a=a, b=b, c=c, d=d)

            def ne_():
                ne.evaluate("a + (b * c + d)", local_dict=ld, out=a)
        else:
            x, y, X, Y = A["x"], A["y"], T["x"], T["y"]
            fn_c, px, py = lib[f"tr_{s}"], x.ctypes.data, y.ctypes.data
            half = dt(0.5)
            F, op = ms.F, ms.op

            def ms_():
                Y[:] = F(op.exp, X) * 0.5 + F(op.tanh, X)

            def c_():
                fn_c(py, px, n, nt, thr)

            def np_():                   # plain numpy returns a new array (no copy into y)
                return np.exp(x) * 0.5 + np.tanh(x)

            def npin_():
                np.exp(x, out=t)
                np.multiply(t, half, out=t)
                np.tanh(x, out=y)
                np.add(t, y, out=y)

            ld = dict(x=x, half=half)

            def ne_():
                ne.evaluate("exp(x) * half + tanh(x)", local_dict=ld, out=y)

        out.update(ms=ms_, c=c_, np=np_, npin=npin_)
        if ne is not None:
            out["ne"] = ne_
        return out

    def validate(self):
        """{impl: max relative error or None if ok}; mshadow must pass."""
        key, ref = self.reference()
        tol = (TOL_TR if self.expr == "TR" else TOL)[self.dtype]
        bad = {}
        for name, fn in self.impl.items():
            self.reset()
            r = fn()
            got = r if (self.expr == "TR" and name == "np") else self.arr[key]
            if got.dtype != self.dtype or not np.allclose(got, ref, **tol):
                err = np.max(np.abs(got.astype(np.float64) - ref) / (np.abs(ref) + tol["atol"]))
                bad[name] = f"{name}: dtype {got.dtype}, max rel err {err:.3g}"
        self.reset()
        return bad


def run_table(expr, sizes, lib, nt, thr, args, rng):
    """Validate, then time every implementation of each (n, dtype) in interleaved rounds
    (_common.measure): every figure is a median over rounds that each sampled all the
    implementations, so load or memory bandwidth that comes and goes on a shared machine
    spreads over all columns instead of spoiling one."""
    failures, wrong, best, iqr = [], set(), {}, {}
    for n in sizes:
        for dt in DTYPES:
            case = Case(expr, dt, n, lib, nt, thr, rng)
            bad = case.validate()
            failures += [f"{expr} {SHORT[dt]} n={n:g}: {m}" for m in bad.values()]
            if "ms" in bad:
                wrong.add((n, dt))
                continue
            med, spread, _ = measure(case.impl, args.rounds, args.min_time, args.row_time)
            for k, t in med.items():
                best[n, dt, k] = t
            iqr[n, dt] = spread["ms"]
            del case
    rows = []
    for n in sizes:
        for dt in DTYPES:
            label = [SHORT[dt], f"{n:.0e}" if n >= 1000 else str(n)]
            if (n, dt) in wrong:
                rows.append(label + ["WRONG"] + [""] * 10)
                continue
            tm = {k: best[n, dt, k] for (m, d, k) in best if (m, d) == (n, dt)}
            tms = tm["ms"]
            r_c = tms / tm["c"]
            r_np, r_in = tm["np"] / tms, tm["npin"] / tms
            r_ne = tm["ne"] / tms if "ne" in tm else float("nan")
            goal = goal_mark(expr, n, r_c, r_np, r_ne, tm)
            rows.append(label + [fmt_time(tms), fmt_time(tm["c"]), fmt_time(tm["np"]),
                                 fmt_time(tm["npin"]), fmt_time(tm.get("ne", float("nan"))),
                                 fmt_ratio(r_c), fmt_ratio(r_np), fmt_ratio(r_in),
                                 fmt_ratio(r_ne), f"{iqr[n, dt] * 100:.0f}%", goal])
    return rows, failures


def goal_mark(expr, n, r_c, r_np, r_ne, tm):
    """The performance targets of this row: "met", "-" (none), or each one missed with its figure."""
    miss = []
    if expr == "TR":
        if r_np < 1.0:
            miss.append(f"numpy/ms {r_np:.2f}<1")
    elif n >= 1e6:
        if r_c > 1.10:
            miss.append(f"ms/C {r_c:.2f}>1.10")
        if r_np < 2.0:
            miss.append(f"numpy/ms {r_np:.2f}<2")
        if r_ne == r_ne and r_ne < 1.0:
            miss.append(f"numexpr/ms {r_ne:.2f}<1")
    elif n >= 1e5:
        if r_c > 1.5:
            miss.append(f"ms/C {r_c:.2f}>1.5")
    elif expr == "E1":
        if tm["ms"] > tm["np4"]:
            miss.append(f"slower than numpy 4-ufunc ({fmt_time(tm['np4'])})")
    else:
        return "-"
    return "met" if not miss else "; ".join(miss)


HEADER = ["dtype", "n", "mshadow", "C loop", "numpy", "np-inplace", "numexpr",
          "ms/C", "numpy/ms", "np-inpl/ms", "numexpr/ms", "ms IQR", "targets"]


# ---------------------------------------------------------------------------- n = 16 overhead
def overhead_section(lib, nt, thr, args, rng):
    """Where the time of one small assignment goes (microseconds per call)."""
    from mshadow import engine
    rows = []
    for dt in DTYPES:
        s = SHORT[dt]
        n = 16
        case = Case("E1", dt, n, lib, nt, thr, rng)
        W, G = case.T["w"], case.T["g"]
        w, g, t = case.arr["w"], case.arr["g"], case.tmp
        eta, lam = ETA, LAM
        lam_t = dt(LAM)
        e = -eta * (G + lam * W)

        def build():
            return -eta * (G + lam * W)

        def assign_prebuilt():
            W[:] = e

        def engine_assign():
            engine.assign(W, e, "saveto")

        plan = engine.get_plan(e.key, engine._CODE_BY_FLAG[W.type_flag], "saveto")
        leaves, scalars = e.leaves, e.scalars
        run_plan = ms._core.run_plan

        def run_plan_only():
            run_plan(plan, W, leaves, scalars)

        rep_fn = lib[f"e1_{s}_rep"]
        pw, pg = w.ctypes.data, g.ctypes.data
        reps = 200000

        def c_rep():
            rep_fn(pw, pg, eta, lam, n, nt, thr, reps)

        def np1():
            np.multiply(w, lam_t, out=t)

        parts = [("total  W[:] = -eta*(G + lam*W)", case.impl["ms"]),
                 ("  build  e = -eta*(G + lam*W)", build),
                 ("  assign W[:] = e  (prebuilt e)", assign_prebuilt),
                 ("    engine.assign(W, e, saveto)", engine_assign),
                 ("      run_plan(plan, W, leaves, scalars)", run_plan_only),
                 ("numpy 4 ufuncs (one per operator)", case.impl["np4"]),
                 ("numpy 3 ufuncs (-eta folded)", case.impl["npin"]),
                 ("numpy one ufunc np.multiply(w, lam, out=t)", np1),
                 ("numpy plain  w[:] = -eta*(g + lam*w)", case.impl["np"]),
                 ("numexpr evaluate(..., out=w)", case.impl.get("ne")),
                 ("C loop via ctypes", case.impl["c"])]
        for label, fn in parts:
            if fn is None:
                continue
            tsec = best_of(fn, repeat=15, min_time=args.min_time)
            rows.append([s, label, f"{tsec * 1e6:.3f}"])
        tsec = best_of(c_rep, repeat=3, number=1) / reps
        rows.append([s, "C loop inside C (no call overhead)", f"{tsec * 1e6:.4f}"])
        # the goal's ratio, interleaved: a round of each, alternating which goes first
        ratios = []
        for r in range(9):
            pair = (case.impl["ms"], case.impl["npin"])[::1 if r % 2 == 0 else -1]
            t = [best_of(fn, repeat=3, min_time=args.min_time) for fn in pair]
            ratios.append(t[0] / t[1] if r % 2 == 0 else t[1] / t[0])
        rows.append([s, "ratio total / numpy 3 ufuncs (median of 9 interleaved rounds)",
                     f"{float(np.median(ratios)):.3f}"])
    return rows


# ---------------------------------------------------------------------------- memory
MEM_CHILD = r"""
import json, os, resource, sys
import numpy as np
sys.path.insert(0, {here!r})
sys.path.insert(1, {pkg_root!r})   # the mshadow the parent imported (installed or the checkout)
import mshadow as ms
from _common import aligned_empty
which, dt, n, nt = {which!r}, np.dtype({dt!r}).type, {n}, {nt}
ms.set_num_threads(nt)
eta, lam = 0.1, 0.5

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])        # KiB

def step(w, g, W, G):
    if which == "mshadow":
        W[:] = -eta * (G + lam * W)
    elif which == "numpy":
        w[:] = -eta * (g + lam * w)
    else:
        import numexpr as ne
        ne.set_num_threads(nt)
        ne.evaluate("-eta * (g + lam * w)", local_dict=dict(w=w, g=g, eta=dt(eta), lam=dt(lam)), out=w)

# warm up on a small case: imports, plan compilation, numexpr's compiled program
ws, gs = aligned_empty(4096, dt), aligned_empty(4096, dt)
ws[:] = 1; gs[:] = 1
step(ws, gs, ms.from_numpy(ws), ms.from_numpy(gs))
w, g = aligned_empty(n, dt), aligned_empty(n, dt)
w.fill(1.0); g.fill(0.5)                       # touch every page now, no temporaries
W, G = ms.from_numpy(w), ms.from_numpy(g)
reset = False
try:                                           # reset the peak (VmHWM) to the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    pass
h0, r0 = hwm(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
step(w, g, W, G)
h1, r1 = hwm(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(hwm=h1 - h0, maxrss=r1 - r0, reset=reset, base=h0)))
"""


def memory_section(n, nt):
    rows = []
    for dt in DTYPES:
        for which in ("mshadow", "numpy", "numexpr"):
            if which == "numexpr" and ne is None:
                continue
            code = MEM_CHILD.format(here=HERE, which=which, dt=np.dtype(dt).name, n=n, nt=nt,
                                    pkg_root=os.path.dirname(os.path.dirname(ms.__file__)))
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if out.returncode:
                rows.append([SHORT[dt], which, "error", out.stderr.strip().splitlines()[-1], "", ""])
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            nbytes = n * np.dtype(dt).itemsize
            rows.append([SHORT[dt], which, f"{nbytes / 2**20:.1f}", f"{r['hwm'] / 1024:.2f}",
                         f"{r['maxrss'] / 1024:.2f}", f"{r['hwm'] * 1024 / nbytes:.2f}"])
    return rows


# ---------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for mshadow, the C loop and numexpr (default: ms.get_num_threads())")
    ap.add_argument("--omp-threshold", type=int, default=None,
                    help="C loop runs threaded only if n > this (default: 32768 * threads - 1, "
                         "the point where mshadow starts its second thread)")
    add_timing_args(ap, "fewer rounds, shorter samples and no n = 1e7", 15, (3.0, 0.5))
    ap.add_argument("--skip", default="",
                    help="comma-separated sections to skip: e1,e2,tr,overhead,mem")
    args = ap.parse_args()
    if args.threads is not None:
        ms.set_num_threads(args.threads)
    nt = ms.get_num_threads()
    thr = args.omp_threshold if args.omp_threshold is not None else MIN_PER_THREAD * nt - 1
    if ne is not None:
        ne.set_num_threads(nt)
    quick = args.quick
    sizes = [16, 10**5, 10**6] if quick else [16, 10**5, 10**6, 10**7]
    args.rounds = args.rounds or (3 if quick else 15)
    args.row_time = args.row_time if args.row_time is not None else (0.5 if quick else 3.0)
    args.min_time = args.min_time or (0.005 if quick else 0.02)
    skip = {s.strip().lower() for s in args.skip.split(",") if s.strip()}
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory(prefix="ms_cloop_") as tmpdir:
        lib, ccmd = build_cloop(tmpdir)
        lib = {name: getattr(lib, name) for name in
               [f"{e}_{SHORT[d]}{r}" for e in ("e1", "e2", "tr") for d in DTYPES
                for r in ("", "_rep") if not (e == "tr" and r)]}
        print("mshadow element-wise benchmark" + (" (--quick)" if args.quick else ""))
        print_machine("threaded timings will be inflated (an OpenMP team waits for a "
                      "descheduled thread). Rerun when idle.")
        print(f"mshadow : {getattr(ms, '__version__', '?')} from {os.path.dirname(ms.__file__)}  "
              f"simd_info={ms.simd_info()}")
        print(f"threads : mshadow {nt} (ms.get_num_threads()), C loop {nt}, numexpr "
              f"{ne.get_num_threads() if ne else '-'}; C loop threaded only if n > {thr}")
        print(f"numpy {np.__version__}, numexpr {ne.__version__ if ne else 'not installed'}; "
              f"C loop: {ccmd}")
        print(f"times: medians over at least {args.rounds} interleaved rounds (each round one "
              f"sample of every implementation, in a rotated order; a sample the best of up to "
              f"5 bursts, {args.min_time * 1e3:g} ms or one call); ratios > 1 in "
              "numpy/ms, np-inpl/ms, numexpr/ms mean mshadow is faster; ms/C < 1 means mshadow "
              "beats the C loop")
        # memory first: the children inherit this process's peak RSS as their ru_maxrss
        # floor, so they must start before the big timing buffers exist
        mem_n = 10**7 if not args.quick else 10**6
        mem_rows = memory_section(mem_n, nt) if "mem" not in skip else None
        failures = []
        notes = ["np-inplace: E1 = 3 in-place ufuncs with a preallocated scratch "
                 "(multiply(w,lam,t); add(t,g,t); multiply(t,-eta,w)); "
                 "E2 = multiply(b,c,t); add(t,d,t); add(a,t,a)",
                 "targets: met, or each target missed with its figure (1e6/1e7: ms/C <= 1.10, numpy/ms >= 2, numexpr/ms >= 1; "
                 "1e5: ms/C <= 1.5; n=16: E1 at most 0.5x numpy's 3 in-place ufuncs, the overhead table's ratio row)"]
        for expr, title in (("E1", "E1  w[:] = -eta * (g + lam * w)"),
                            ("E2", "E2  a += b * c + d")):
            if expr.lower() in skip:
                continue
            rows, f = run_table(expr, sizes, lib, nt, thr, args, rng)
            failures += f
            print_table(title, HEADER, rows, notes)
        if "tr" not in skip:
            rows, f = run_table("TR", [10**6], lib, nt, thr, args, rng)
            failures += f
            print_table("TR  y[:] = F(exp, x) * 0.5 + F(tanh, x)   (C loop: libm expf/tanhf, "
                        "no -ffast-math)", HEADER, rows,
                        ["numpy: np.exp(x) * 0.5 + np.tanh(x) (new array); np-inplace: "
                         "exp(x,t); multiply(t,.5,t); tanh(x,y); add(t,y,y)",
                         "targets: met, or the figure that missed numpy/ms >= 1"])
        if "overhead" not in skip:
            rows = overhead_section(lib, nt, thr, args, rng)
            print_table("n = 16 overhead: microseconds per call (E1)", ["dtype", "what", "us"], rows,
                        ["each line is timed on its own; the indented lines are the parts "
                         "of the mshadow call above them"])
        if mem_rows is not None:
            print_table(f"memory: E1 at n = {mem_n:.0e}, peak RSS growth during one assignment "
                        f"(fresh subprocess each)",
                        ["dtype", "engine", "array MiB", "VmHWM delta MiB", "ru_maxrss delta MiB",
                         "delta / array"], mem_rows,
                        ["VmHWM is reset to the current RSS (/proc/self/clear_refs = 5) just "
                         "before the assignment; ru_maxrss (getrusage) cannot be reset, so its delta "
                         "counts growth above the child's earlier peak (the children run before "
                         "the timing buffers exist, so that floor is small)"])
        busy = busy_elsewhere()
        print(f"\n{busy * 100:.0f}% of the CPUs busy with other work at the end"
              + (" (timings above may be inflated; rerun)" if busy > 0.1 else ""))
        if failures:
            print("\nCORRECTNESS FAILURES (checked before timing):")
            for m in failures:
                print("  " + m)
            return 1
        print("\nall results matched the float64 numpy reference before timing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
