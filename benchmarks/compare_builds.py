"""The same statements on several builds of mshadow, side by side: medians of interleaved rounds.

    python benchmarks/compare_builds.py --build old=/work/wt/02e49f4 --build new=/work/main
                                            # full: about 3 min for 2 builds, 5 for 3
    python benchmarks/compare_builds.py --quick --build A=/path/a --build B=/path/b   # < 1 min
    python benchmarks/compare_builds.py --cases small,e1 --rounds 11 --build ...      # a subset
    python benchmarks/compare_builds.py --list                                        # the cases

A build is a directory holding an importable ``mshadow`` (a checkout or worktree built in
place: ``python setup.py build_ext --inplace``). Each child Python runs with PYTHONPATH set to
that directory (ahead of any installed or editable mshadow; the child checks where mshadow was
imported from and refuses to time anything else), ONE thread (ms.set_num_threads(1)).

Cases (a table row per build; "A" is the timed mshadow statement, "B" its reference):
    small   E1 w[:] = -eta * (g + lam * w), n = 16 float32: per-statement overhead. B: numpy's
            best formulation, three in-place ufuncs with a preallocated scratch
            (multiply(w, lam, t); add(t, g, t); multiply(t, -eta, w)), same child
    e1      E1 float64 at each --sizes n; B: the C loop (cloop.c, gcc -O3 -march=native, ctypes)
    e2, tr  E2 a += b * c + d and TR y[:] = F(exp, x) * 0.5 + F(tanh, x), float32 as
            bench_ir.py defines them (bench_elementwise.Case), at each --sizes n; B: the C loop
    nested  y[:] = pool(F(relu, x * 2), 2, 2, 2, 2), x (1, 2, 8, 8) float32; B: the
            element-wise z[:] = F(relu, x * 2) of x's size (goal: A/B <= 2)
    nest    an extension over an expression, fused (A) against materialise-first (B: the
            expression assigned to a preallocated temporary, then the extension of it), with
            bench_ir.py's shapes: pool of F(relu, x*2) (32x64x56x56, its pool section),
            im2col of pad(F(relu, x), 1) (8x64x56x56), take(i, F(relu, a*2 - b)) and
            concat(F(relu, a*2), b - 1, 0) (a, b 100000x64, 50000 indices), col2im
            pack_col2patch(F(relu, col*2)) of the 8x64x56x56 3x3 column matrix, and
            sumall_except_dim(x * 1.0, 1) against sumall_except_dim(x, 1) (8x64x56x56)
The statements are inlined here (the same code for every build: a build's own benchmarks
directory may not have them), so a build only needs the public API they use; what a build
cannot run prints n/a with the reason below its table.

Timing. For each case: --rounds rounds; a round runs one child per build, in an order rotated
every round. A child sets the case up, checks A against B's result (or a numpy reference), then
times A and B alternately with timeit: --repeat bursts each of calls lasting about --min-time
seconds (one call when a call lasts longer), keeping each one's best burst (min of repeats: the
burst least disturbed by other processes). The tables show the median over rounds of those
per-round minima, the ratio A/B within each build (the median of the per-round ratios: A and B
of one child meet the same load), A and B against the first build's ("vs <first>"), and the
interquartile range of A's rounds / their median. Ratios > 1 mean slower than the reference
or than the first build.
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

import numpy as np

from _common import aligned_empty, git_rev  # the script's own directory, in the child too

HERE = os.path.dirname(os.path.abspath(__file__))

ETA, LAM = 0.1, 0.5          # bench_elementwise.py's E1 constants
F32, F64 = np.float32, np.float64


# ============================================================================ child side
# Everything below up to the parent section runs inside a child Python, importing the
# mshadow of the build under test (PYTHONPATH). It must only use the public API.

def _load_cloop(path):
    lib = ctypes.CDLL(path)
    P, L, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for s, S in (("f32", ctypes.c_float), ("f64", ctypes.c_double)):
        getattr(lib, f"e1_{s}").argtypes = [P, P, S, S, L, I, L]
        getattr(lib, f"e2_{s}").argtypes = [P, P, P, P, L, I, L]
        getattr(lib, f"tr_{s}").argtypes = [P, P, L, I, L]
    return lib


class Skip(Exception):
    """The build (or the machine) cannot run this alternative; the message says why."""


def _close(a, b, rtol, atol):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return f"shape {a.shape}, expected {b.shape}"
    if not np.allclose(a, b, rtol=rtol, atol=atol):
        err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)
        return f"max error {err:.3g} of max |ref|"
    return None


def case_small(ms, args):
    """E1 at n = 16 float32 against numpy's three in-place ufuncs."""
    n, dt = 16, F32
    rng = np.random.default_rng(0)
    w, g, t = aligned_empty(n, dt), aligned_empty(n, dt), aligned_empty(n, dt)
    w0 = rng.uniform(0.5, 1.5, n).astype(dt)
    g[:] = rng.uniform(0.5, 1.5, n)
    W, G = ms.from_numpy(w), ms.from_numpy(g)
    eta, lam = ETA, LAM
    lam_t, neta_t = dt(LAM), dt(-ETA)

    def A():
        W[:] = -eta * (G + lam * W)

    def B():
        np.multiply(w, lam_t, out=t)
        np.add(t, g, out=t)
        np.multiply(t, neta_t, out=w)

    ref = -ETA * (g.astype(F64) + LAM * w0.astype(F64))
    checks = {}
    for k, fn in (("A", A), ("B", B)):
        w[:] = w0
        fn()
        checks[k] = _close(w, ref, 2e-6, 1e-6)
    return {"A": A, "B": B}, checks


def _elem(ms, args, expr, dt, n):
    """E1 / E2 / TR of bench_elementwise.Case (same buffers, constants and reference) against
    the C loop of cloop.c, on one thread."""
    rng = np.random.default_rng(0)
    s = "f32" if dt is F32 else "f64"
    if args.cloop:
        lib = _load_cloop(args.cloop)
    # bench_ir.py's threshold for one thread (MIN_PER_THREAD * nt - 1): its C loop enters a
    # one-thread OpenMP region above it (a fully serial call, if() false, ran 1.5x slower here)
    thr = 32767
    if expr == "E1":
        w, g = aligned_empty(n, dt), aligned_empty(n, dt)
        w0 = rng.uniform(0.5, 1.5, n).astype(dt)
        g[:] = rng.uniform(0.5, 1.5, n)
        W, G = ms.from_numpy(w), ms.from_numpy(g)
        eta, lam = ETA, LAM

        def A():
            W[:] = -eta * (G + lam * W)

        if args.cloop:
            cfn, pw, pg = getattr(lib, f"e1_{s}"), w.ctypes.data, g.ctypes.data

            def B():
                cfn(pw, pg, eta, lam, n, 1, thr)

        def reset():
            w[:] = w0
        out = w
        ref = -ETA * (g.astype(F64) + LAM * w0.astype(F64))
    elif expr == "E2":
        a, b, c, d = (aligned_empty(n, dt) for _ in range(4))
        a0 = rng.uniform(0.5, 1.5, n).astype(dt)
        for v in (b, c, d):
            v[:] = rng.uniform(0.5, 1.5, n)
        Ta, Tb, Tc, Td = (ms.from_numpy(v) for v in (a, b, c, d))

        def A():
            nonlocal Ta
            Ta += Tb * Tc + Td

        if args.cloop:
            cfn = getattr(lib, f"e2_{s}")
            pa, pb, pc, pd = (v.ctypes.data for v in (a, b, c, d))

            def B():
                cfn(pa, pb, pc, pd, n, 1, thr)

        def reset():
            a[:] = a0
        out = a
        ref = a0.astype(F64) + (b.astype(F64) * c.astype(F64) + d.astype(F64))
    else:
        x, y = aligned_empty(n, dt), aligned_empty(n, dt)
        x[:] = rng.uniform(-1, 1, n)
        X, Y = ms.from_numpy(x), ms.from_numpy(y)
        F, op = ms.F, ms.op

        def A():
            Y[:] = F(op.exp, X) * 0.5 + F(op.tanh, X)

        if args.cloop:
            cfn, px, py = getattr(lib, f"tr_{s}"), x.ctypes.data, y.ctypes.data

            def B():
                cfn(py, px, n, 1, thr)

        def reset():
            y[:] = 0
        out = y
        x64 = x.astype(F64)
        ref = np.exp(x64) * 0.5 + np.tanh(x64)
    tol = {F32: (4e-6, 1e-6), F64: (1e-13, 1e-14)}[dt]
    alts = {"A": A}
    if args.cloop:
        alts["B"] = B
    checks = {}
    for k, fn in alts.items():
        reset()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - this build cannot
            checks[k] = Skip(_reason(e))
            continue
        checks[k] = _close(out, ref, *tol)
    reset()
    if not args.cloop:
        checks["B"] = Skip("no C loop (gcc -fopenmp could not build cloop.c)")
    return alts, checks


def case_nested(ms, args):
    """pool over an expression on a tiny tensor against the element-wise statement."""
    shape = (1, 2, 8, 8)
    x = np.random.default_rng(3).uniform(-1, 1, shape).astype(F32)
    X = ms.from_numpy(x)
    Y = ms.from_numpy(np.zeros((1, 2, 4, 4), F32))
    Z = ms.from_numpy(np.zeros(shape, F32))
    relu = ms.op.relu

    def A():
        Y[:] = ms.pool(ms.F(relu, X * 2), 2, 2, 2, 2)

    def B():
        Z[:] = ms.F(relu, X * 2)

    r = np.maximum(x * 2, 0)
    refs = {"A": (A, Y, r.reshape(1, 2, 4, 2, 4, 2).max(axis=(3, 5))), "B": (B, Z, r)}
    checks = {}
    for k, (fn, dst, ref) in refs.items():
        try:
            fn()
            checks[k] = _close(dst.numpy(), ref, 0, 0)
        except Exception as e:  # noqa: BLE001 - this build cannot
            checks[k] = Skip(_reason(e))
    return {"A": A, "B": B}, checks


def _nest(ms, args, which):
    """Fused (A) against materialise-first (B) over preallocated tensors; B's result is the
    reference for A (both from the same build)."""
    rng = np.random.default_rng(5)
    relu, F = ms.op.relu, ms.F
    if which == "pool":
        N, C, H, W = 32, 64, 56, 56
        X = ms.from_numpy(rng.uniform(-1, 1, (N, C, H, W)).astype(F32))
        T = ms.new_tensor((N, C, H, W))
        out = ms.new_tensor((N, C, H // 2, W // 2))

        def A():
            out[:] = ms.pool(F(relu, X * 2), 2, 2, 2, 2)

        def B():
            T[:] = F(relu, X * 2)
            out[:] = ms.pool(T, 2, 2, 2, 2)
    elif which == "im2col":
        N, C, H, W = 8, 64, 56, 56
        X = ms.from_numpy(rng.uniform(-1, 1, (N, C, H, W)).astype(F32))
        T = ms.new_tensor((N, C, H + 2, W + 2))
        out = ms.new_tensor((C * 9, N * H * W))

        def A():
            out[:] = ms.unpack_patch2col(ms.pad(F(relu, X), 1), 3, 3, 1)

        def B():
            T[:] = ms.pad(F(relu, X), 1)
            out[:] = ms.unpack_patch2col(T, 3, 3, 1)
    elif which in ("take", "concat"):
        a = rng.uniform(-1, 1, (100000, 64)).astype(F32)
        b = rng.uniform(-1, 1, (100000, 64)).astype(F32)
        A_, B_ = ms.from_numpy(a), ms.from_numpy(b)
        TA = ms.new_tensor(a.shape)
        if which == "take":
            I = ms.from_numpy(rng.integers(0, 100000, 50000).astype(np.int32))
            out = ms.new_tensor((50000, 64))

            def A():
                out[:] = ms.take(I, F(relu, A_ * 2 - B_))

            def B():
                TA[:] = F(relu, A_ * 2 - B_)
                out[:] = ms.take(I, TA)
        else:
            TB = ms.new_tensor(b.shape)
            out = ms.new_tensor((200000, 64))

            def A():
                out[:] = ms.concat(F(relu, A_ * 2), B_ - 1, 0)

            def B():
                TA[:] = F(relu, A_ * 2)
                TB[:] = B_ - 1
                out[:] = ms.concat(TA, TB, 0)
    elif which == "col2im":
        N, C, H, W = 8, 64, 56, 56
        oh, ow = H - 2, W - 2
        COL = ms.from_numpy(rng.uniform(-1, 1, (C * 9, N * oh * ow)).astype(F32))
        T = ms.new_tensor((C * 9, N * oh * ow))
        out = ms.new_tensor((N, C, H, W))

        def A():
            out[:] = ms.pack_col2patch(F(relu, COL * 2), (N, C, H, W), 3, 3, 1)

        def B():
            T[:] = F(relu, COL * 2)
            out[:] = ms.pack_col2patch(T, (N, C, H, W), 3, 3, 1)
    elif which == "sumall":
        X = ms.from_numpy(rng.uniform(-1, 1, (8, 64, 56, 56)).astype(F32))
        out = ms.new_tensor((64,))

        def A():
            out[:] = ms.sumall_except_dim(X * 1.0, 1)

        def B():
            out[:] = ms.sumall_except_dim(X, 1)
    else:
        raise ValueError(which)
    checks = {}
    try:
        B()
        ref = out.numpy().copy()
        checks["B"] = None
    except Exception as e:  # noqa: BLE001 - the build cannot
        checks["B"] = Skip(_reason(e))
        ref = None
    try:
        A()
        got = out.numpy()
        checks["A"] = (None if ref is None else
                       _close(got, ref, 0, 1e-5 * float(np.max(np.abs(ref))))
                       if which == "sumall" else _close(got, ref, 0, 0))
    except Exception as e:  # noqa: BLE001
        checks["A"] = Skip(_reason(e))
    return {"A": A, "B": B}, checks


def _reason(e):
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = msg[:90] + "..." if len(msg) > 93 else msg
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _time_alts(alts, min_time, repeat):
    """{name: best seconds per call}: ``repeat`` bursts each, alternating between the
    alternatives; a burst lasts about ``min_time`` (one call when a call is longer)."""
    timers, number = {}, {}
    for k, fn in alts.items():
        fn()
        fn()
        tm = timeit.Timer(fn)
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-9)
        timers[k] = tm
        number[k] = max(1, min(200000, int(min_time / one)))
    best = {k: float("inf") for k in alts}
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for k in alts:
                best[k] = min(best[k], timers[k].timeit(number[k]) / number[k])
    finally:
        if was:
            gc.enable()
    return best


def child_main(args):
    out = {"case": args.child}
    try:
        import mshadow as ms
        out["file"] = os.path.realpath(ms.__file__)
        build = os.path.realpath(args.expect)
        if not out["file"].startswith(build + os.sep):
            raise RuntimeError(f"imported mshadow from {out['file']}, not from {build}")
        out["simd"] = (ms.simd_info().get("active", "?")
                       if hasattr(ms, "simd_info") else "?")
        out["version"] = getattr(ms, "__version__", "?")
        ms.set_num_threads(1)
        if args.child == "probe":
            print(json.dumps(out))
            return 0
        kind, _, rest = args.child.partition(":")
        if kind == "small":
            alts, checks = case_small(ms, args)
        elif kind in ("e1", "e2", "tr"):
            dt = F64 if kind == "e1" else F32
            alts, checks = _elem(ms, args, kind.upper(), dt, int(float(rest)))
        elif kind == "nested":
            alts, checks = case_nested(ms, args)
        elif kind == "nest":
            alts, checks = _nest(ms, args, rest)
        else:
            raise ValueError(f"unknown case {args.child}")
        bad = {}
        for k, c in checks.items():
            if c is None:
                continue
            bad[k] = ("n/a: " + str(c)) if isinstance(c, Skip) else ("WRONG: " + c)
            alts.pop(k, None)
        out["bad"] = bad
        out["times"] = _time_alts(alts, args.min_time, args.repeat) if alts else {}
    except Exception as e:  # noqa: BLE001 - reported by the parent as n/a
        out["error"] = _reason(e)
    print(json.dumps(out))
    return 0


# ============================================================================ parent side
# name, title, what A and B are, the ratio's name
def case_list(sizes):
    cases = [("small", "E1 w[:] = -eta * (g + lam * w), n = 16 float32, per statement",
              "mshadow", "np 3-inpl", "ms/np")]
    for n in sizes:
        cases.append((f"e1:{n:.0e}", f"E1 w[:] = -eta * (g + lam * w), float64, n = {n:.0e}",
                      "mshadow", "C loop", "ms/C"))
    for n in sizes:
        cases.append((f"e2:{n:.0e}", f"E2 a += b * c + d, float32, n = {n:.0e}",
                      "mshadow", "C loop", "ms/C"))
    for n in sizes:
        cases.append((f"tr:{n:.0e}", f"TR y[:] = F(exp, x) * 0.5 + F(tanh, x), float32, "
                      f"n = {n:.0e}", "mshadow", "C loop", "ms/C"))
    cases.append(("nested", "y[:] = pool(F(relu, x*2), 2,2,2,2) against z[:] = F(relu, x*2), "
                  "x 1x2x8x8 float32 (goal <= 2x)", "pool(F)", "F", "pool/F"))
    for which, title in (
            ("pool", "pool(F(relu, x*2), 2,2,2,2), x 32x64x56x56"),
            ("im2col", "unpack_patch2col(pad(F(relu, x), 1), 3,3,1), x 8x64x56x56"),
            ("take", "take(i, F(relu, a*2 - b)), a, b 100000x64, 50000 indices"),
            ("concat", "concat(F(relu, a*2), b - 1, 0), a, b 100000x64"),
            ("col2im", "pack_col2patch(F(relu, col*2), 8x64x56x56, 3,3,1), col 576x23328"),
            ("sumall", "sumall_except_dim(x * 1.0, 1) vs sumall_except_dim(x, 1), "
                       "x 8x64x56x56")):
        cases.append((f"nest:{which}", title, "fused", "2-step" if which != "sumall" else
                      "tensor", "fused/2-step" if which != "sumall" else "expr/tensor"))
    return cases


GROUPS = {"small": "small", "e1": "e1:", "e2": "e2:", "tr": "tr:", "nested": "nested",
          "nest": "nest:"}


def select(cases, spec):
    if not spec:
        return cases
    want = [s.strip() for s in spec.split(",") if s.strip()]
    out = []
    for c in cases:
        for w in want:
            p = GROUPS.get(w)
            if c[0] == w or (p is not None and (c[0] == p or c[0].startswith(p))):
                out.append(c)
                break
    return out


def build_cloop(tmpdir):
    """cloop.c as bench_elementwise.py compiles it; the .so path, or None."""
    so = os.path.join(tmpdir, "cloop.so")
    cmd = ["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
           os.path.join(HERE, "cloop.c"), "-o", so, "-lm"]
    try:
        subprocess.run(cmd, check=True, capture_output=True)
        return so
    except (OSError, subprocess.CalledProcessError):
        return None


def run_child(build, case, args, cloop, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = build + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case, "--expect", build,
           "--min-time", str(args.min_time), "--repeat", str(args.repeat)]
    if cloop:
        cmd += ["--cloop", cloop]
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=args.child_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"child ran past {args.child_timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child exited {p.returncode}: {tail[:120]}"}
    return json.loads(lines[-1])


def parse_build(s):
    name, sep, path = s.partition("=")
    if not sep:
        name, path = os.path.basename(os.path.normpath(s)), s
    path = os.path.realpath(os.path.expanduser(path))
    if not os.path.isdir(os.path.join(path, "mshadow")):
        raise argparse.ArgumentTypeError(f"{path} has no mshadow/ package directory")
    return name, path


def show_case(case, names, samples, errors):
    from _common import fmt_ratio, fmt_time, print_table
    key, title, a_name, b_name, r_name = case
    first = names[0]
    base = samples[first]["A"]
    base_med = statistics.median(base) if base else None
    base_b = statistics.median(samples[first]["B"]) if samples[first]["B"] else None
    header = ["build", a_name, b_name, r_name, f"{a_name} vs {first}", f"{b_name} vs {first}",
              f"{a_name} IQR", "rounds"]
    rows, notes = [], []
    for b in names:
        a, bb, r = samples[b]["A"], samples[b]["B"], samples[b]["R"]
        ma = statistics.median(a) if a else None
        mb = statistics.median(bb) if bb else None
        mr = statistics.median(r) if r else None     # median of the per-round ratios
        if len(a) >= 2:
            q = statistics.quantiles(a, n=4)
            iqr = f"{(q[2] - q[0]) / ma * 100:.0f}%"
        else:
            iqr = "-"
        rows.append([b, fmt_time(ma) if ma else "n/a", fmt_time(mb) if mb else "n/a",
                     fmt_ratio(mr) if mr else "n/a",
                     fmt_ratio(ma / base_med) if (ma and base_med) else "n/a",
                     fmt_ratio(mb / base_b) if (mb and base_b) else "n/a", iqr,
                     str(len(a))])
        for msg in sorted(errors[b]):
            notes.append(f"{b}: {msg}")
    print_table(title, header, rows, notes)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", type=parse_build, default=[],
                    metavar="NAME=DIR", help="a build to compare (repeat; the first is the "
                    "baseline of the 'vs' column)")
    ap.add_argument("--quick", action="store_true",
                    help="3 rounds, 3 bursts of 10 ms, sizes 1e3,1e5,1e6 (under a minute for 2 "
                         "builds on 2 cores)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per case (default 7; "
                    "--quick 3)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="bursts per alternative per child, best kept (default 5; --quick 3)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds per burst (default 0.02; --quick 0.01)")
    ap.add_argument("--sizes", default=None,
                    help="n of E1 (float64), E2, TR (default 1e3,1e5,1e6,1e7; --quick 1e3,1e5,1e6)")
    ap.add_argument("--cases", default="",
                    help="comma-separated cases or groups (small, e1, e2, tr, nested, nest, "
                         "or a case name such as e1:1e+05 or nest:take); default all")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--child-timeout", type=float, default=300.0, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="also write every round's figures here")
    # child mode (internal)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--expect", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cloop", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.repeat = args.repeat or (3 if args.quick else 5)
    args.min_time = args.min_time or (0.01 if args.quick else 0.02)
    if args.child:
        return child_main(args)

    sys.path.insert(0, HERE)
    from _common import busy_elsewhere, loadavg, print_machine
    sizes = [int(float(s)) for s in (args.sizes or ("1e3,1e5,1e6" if args.quick else
                                                     "1e3,1e5,1e6,1e7")).split(",") if s.strip()]
    cases = select(case_list(sizes), args.cases)
    if args.list:
        for c in case_list(sizes):
            print(f"{c[0]:14s} {c[1]}   (A: {c[2]}, B: {c[3]})")
        return 0
    if not args.build:
        ap.error("give at least one --build NAME=DIR")
    if not cases:
        ap.error(f"no case matches --cases {args.cases!r} (see --list)")
    names = [n for n, _ in args.build]
    if len(set(names)) != len(names):
        ap.error("build names must differ")
    builds = dict(args.build)

    print("mshadow across builds: the same statements, interleaved rounds, one thread"
          + (" (--quick)" if args.quick else ""))
    print_machine("expect noisier rounds (the ratios within a child are the steadier "
                  "figures)")
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="ms_cmp_") as tmp:
        cloop = build_cloop(tmp)
        for n in names:
            info = run_child(builds[n], "probe", args, cloop, tmp)
            if "error" in info:
                print(f"build   : {n} = {builds[n]}: CANNOT IMPORT: {info['error']}")
            else:
                print(f"build   : {n} = {builds[n]} (git {git_rev(builds[n])}), mshadow "
                      f"{info.get('version')}, simd {info.get('simd')}")
        print("C loop  : " + ("gcc -O3 -march=native -fopenmp -shared -fPIC cloop.c (ctypes), "
                              "one thread" if cloop else "n/a (gcc with OpenMP not found)"))
        print(f"times   : per case, {args.rounds} rounds; a round runs one child per build "
              f"(rotating order); a child's figure is timeit's best of {args.repeat} bursts of "
              f"~{args.min_time * 1e3:g} ms (GC off, A and B alternating); tables show medians "
              f"over rounds; the A/B column is the median of the per-round ratios (A and B of "
              f"one child); '{names[0]}' is the baseline of the 'vs' column")
        record = {}
        for case in cases:
            key = case[0]
            samples = {n: {"A": [], "B": [], "R": []} for n in names}
            errors = {n: set() for n in names}
            for r in range(args.rounds):
                s = r % len(names)
                for n in names[s:] + names[:s]:
                    res = run_child(builds[n], key, args, cloop, tmp)
                    record.setdefault(key, {}).setdefault(n, []).append(res)
                    if "error" in res:
                        errors[n].add(res["error"])
                        continue
                    for k, msg in res.get("bad", {}).items():
                        errors[n].add(f"{case[2] if k == 'A' else case[3]} {msg}")
                    t = res.get("times", {})
                    if "A" in t:
                        samples[n]["A"].append(t["A"])
                    if "B" in t:
                        samples[n]["B"].append(t["B"])
                    if "A" in t and "B" in t:
                        samples[n]["R"].append(t["A"] / t["B"])
            show_case(case, names, samples, errors)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"builds": builds, "args": vars(args) | {"build": None},
                           "rounds": record}, f, indent=1)
    busy = busy_elsewhere()
    print(f"\n{time.time() - t_start:.0f} s; load avg {loadavg()}, {busy * 100:.0f}% of the CPUs "
          f"busy with other work at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
