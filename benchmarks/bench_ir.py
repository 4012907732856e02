"""Expressions across the engine's boundaries: element-wise, fused reductions, pool and im2col.

    python benchmarks/bench_ir.py                 # full run (about 1 min on 2 cores)
    python benchmarks/bench_ir.py --quick         # fewer rounds, shorter samples (about 30 s)
    python benchmarks/bench_ir.py --skip pool,im2col --rounds 25
    cd /tmp && PYTHONPATH=/path/to/other/checkout python /path/to/bench_ir.py   # another build

One script for comparing two builds of mshadow (run it once with each on PYTHONPATH):
    elem    E1 w[:] = -eta * (g + lam * w), E2 a += b * c + d and TR y[:] = F(exp, x) * 0.5 +
            F(tanh, x) exactly as bench_elementwise.py defines them (its Case class), float32,
            n = 1e3 (per-assignment overhead) and 1e6, against the C loop (cloop.c), numpy,
            numpy's in-place ufuncs and numexpr
    sum     r = ms.sum(x * x), n = 1e7 float32, ONE thread, against C loops with 16 and 8 lane
            accumulators (cloop_reduce.c), np.sum(x * x), np.dot(x, x), torch
    axis    sum_rows(a * b), sumall_except_dim(a * b, 0), reduce_with_axis(a * b, -1) on
            (4096, 1024) float32, against materialising a * b first, a C loop, numpy, einsum, torch
    pool    y[:] = pool(F(relu, x * 2), 2, 2, 2, 2) on (32, 64, 56, 56) float32 against
            materialising F(relu, x * 2) first and torch max_pool2d(relu(x * 2))
    im2col  unpack_patch2col(F(relu, x), 3, 3, 1) on (8, 64, 56, 56) against materialising
            F(relu, x) first and torch F.unfold(relu(x), 3)

Every alternative is checked against a reference before anything is timed. Timings are
interleaved: each round takes one sample of every alternative of a row, in an order rotated
every round (a sample: the best of up to 5 bursts of --min-time / 5 seconds of calls, at most
--min-time seconds or one call); the tables show the medians over the rounds (at least
--rounds, up to 4x as many while the row has taken less than --row-time seconds). An
alternative the build (or the machine) lacks prints "n/a" with the reason below its table.
See benchmarks/README.md.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (aligned_empty, busy_elsewhere, fmt_ratio, fmt_time, git_rev,  # noqa: E402
                     measure, print_machine, print_table, add_timing_args)

try:
    import mshadow as ms
except ImportError:          # not installed: use the checkout this script lives in
    sys.path.insert(1, os.path.dirname(HERE))
    import mshadow as ms

# E1, E2 and TR exactly as the element-wise benchmark defines them (buffers, implementations,
# references, tolerances), and its C loop build
import bench_elementwise as be  # noqa: E402

ne = be.ne                   # numexpr or None

try:
    import torch
    import torch.nn.functional as TF
except ImportError:          # pip install torch (CPU wheel): optional columns
    torch = TF = None

F32 = np.float32
SECTIONS = ("elem", "sum", "axis", "pool", "im2col", "nest")


class NA:
    """An alternative that cannot run here, with the reason."""

    def __init__(self, reason):
        self.reason = reason


class Wrong(NA):
    """An alternative that ran but did not match the reference."""


def reason_of(exc):
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(msg) > 90:
        msg = msg[:87] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def ms_attr(*names):
    """The mshadow functions a statement needs, or an NA naming the first one missing."""
    missing = [n for n in names if not hasattr(ms, n)]
    return NA(f"this build has no ms.{missing[0]}") if missing else None


# ---------------------------------------------------------------------------- C loops
def build_cloop_reduce(tmpdir):
    """cloop_reduce.c, compiled as bench_elementwise.py compiles cloop.c; ctypes handle."""
    so = os.path.join(tmpdir, "cloop_reduce.so")
    cmd = ["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
           os.path.join(HERE, "cloop_reduce.c"), "-o", so, "-lm"]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(so)
    P, L, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for fn in (lib.sumsq_f32, lib.sumsq8_f32):
        fn.argtypes, fn.restype = [P, L], ctypes.c_float
    for fn in (lib.rowsum_prod_f32, lib.colsum_prod_f32):
        fn.argtypes, fn.restype = [P, P, P, L, L, I], None
    return lib


# ---------------------------------------------------------------------------- checking
def as_array(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.numpy()
    if isinstance(x, ms.Tensor):
        return x.numpy()
    return np.asarray(x)


def check(alts, ref, rtol, atol=0.0, rtol_of=None):
    """Run each alternative once; {name: fn} of those that match ``ref``, {name: NA} others.

    An alternative is ``fn`` (returns its result), ``(fn, post)`` (post(result) is compared)
    or an NA. Raising counts as n/a (the build lacks the feature), a mismatch as WRONG.
    ``rtol_of`` gives some alternatives their own rtol.
    """
    ok, bad = {}, {}
    for name, alt in alts.items():
        if isinstance(alt, NA):
            bad[name] = alt
            continue
        fn, post = alt if isinstance(alt, tuple) else (alt, None)
        try:
            got = fn()
            got = as_array(post(got) if post else got)
        except Exception as e:  # noqa: BLE001 - any failure is "this build cannot"
            bad[name] = NA(reason_of(e))
            continue
        tol = (rtol_of or {}).get(name, rtol)
        if got.shape != np.shape(ref) or not np.allclose(got, ref, rtol=tol, atol=atol):
            if got.shape != np.shape(ref):
                why = f"shape {got.shape}, expected {np.shape(ref)}"
            else:
                err = np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30)
                why = f"max error {err:.3g} of max |ref|"
            bad[name] = Wrong(why)
            continue
        ok[name] = fn
    return ok, bad


# ---------------------------------------------------------------------------- tables
class Table:
    """Rows of medians; columns: one time per alternative, then ratios against ``base``:
    ``ms/<C>`` for C loops (< 1: mshadow faster), ``<alt>/ms`` for the others (> 1)."""

    def __init__(self, title, base, names, c_names=(), label="case"):
        self.title, self.base, self.names, self.c_names = title, base, list(names), set(c_names)
        self.label, self.rows, self.notes = label, [], []

    def add(self, label, res, bad):
        """res: measure()'s (medians, spreads), or {} when nothing ran."""
        med, spread, rounds = res if isinstance(res, tuple) else (res, {}, 0)
        cells = [label]
        for k in self.names:
            cells.append(fmt_time(med[k]) if k in med else
                         ("WRONG" if isinstance(bad.get(k), Wrong) else "n/a"))
        b = med.get(self.base)
        for k in self.names:
            if k == self.base:
                continue
            if b is None or k not in med:
                cells.append("n/a")
            elif k in self.c_names:
                cells.append(fmt_ratio(b / med[k]))
            else:
                cells.append(fmt_ratio(med[k] / b))
        sb = spread.get(self.base)
        cells += ["-" if sb is None else f"{sb * 100:.0f}%", str(rounds) if rounds else "-"]
        self.rows.append(cells)
        for k, v in bad.items():
            tag = "WRONG" if isinstance(v, Wrong) else "n/a"
            self.notes.append(f"{label}: {k} {tag}: {v.reason}")

    def header(self, short):
        h = [self.label] + [short.get(k, k) for k in self.names]
        for k in self.names:
            if k == self.base:
                continue
            s = short.get(k, k)
            h.append(f"ms/{s}" if k in self.c_names else f"{s}/ms")
        return h + ["ms IQR", "rounds"]

    def show(self, short, notes=()):
        print_table(self.title, self.header(short), self.rows, list(notes) + self.notes)


# ---------------------------------------------------------------------------- sections
def elem_section(args, lib, nt, thr, rng, failures):
    """E1, E2, TR of bench_elementwise.py, float32, at every --sizes n."""
    names = ["ms", "c", "np", "npin", "ne"]
    short = {"ms": "mshadow", "c": "C", "np": "numpy", "npin": "np-inpl", "ne": "numexpr"}
    titles = {"E1": "E1  w[:] = -eta * (g + lam * w)", "E2": "E2  a += b * c + d",
              "TR": "TR  y[:] = F(exp, x) * 0.5 + F(tanh, x)"}
    for expr in ("E1", "E2", "TR"):
        tab = Table(f"{titles[expr]}   float32, {nt} thread(s)",
                    "ms", names, c_names=("c",), label="n")
        for n in args.sizes:
            label = f"{n:.0e}"
            bad = {}
            try:
                case = be.Case(expr, F32, n, lib, nt, thr, rng)
            except Exception as e:  # noqa: BLE001 - the build cannot even wrap the buffers
                tab.add(label, {}, {"ms": NA(reason_of(e))})
                continue
            for k, fn in list(case.impl.items()):     # one that raises is n/a, not fatal
                try:
                    if k in names:
                        case.reset()
                        fn()
                        continue
                except Exception as e:  # noqa: BLE001
                    bad[k] = NA(reason_of(e))
                del case.impl[k]
            wrong = case.validate()
            for k, msg in wrong.items():
                bad[k] = Wrong(msg.split(": ", 1)[1])
                failures.append(f"{expr} n={label}: {msg}")
            if ne is None:
                bad["ne"] = NA("numexpr not installed")
            alts = {k: fn for k, fn in case.impl.items() if k in names and k not in bad}
            tab.add(label, measure(alts, args.rounds, args.min_time, args.row_time), bad)
            del case
        tab.show(short, ["np-inpl: numpy's in-place ufuncs with a preallocated scratch "
                         "(bench_elementwise.py's np-inplace)"] if expr == "E1" else ())


def sum_section(args, rlib, failures):
    """ms.sum(x * x) on one thread."""
    n = args.sum_n
    x = aligned_empty(n, F32)
    x[:] = np.random.default_rng(1).uniform(-1, 1, n)
    x64 = x.astype(np.float64)
    ref = np.asarray(np.dot(x64, x64))
    alts = {}
    X = ms.from_numpy(x)
    alts["ms"] = ms_attr("sum") or (lambda: ms.sum(X * X))
    p = x.ctypes.data
    alts["c16"] = lambda: rlib.sumsq_f32(p, n)
    alts["c8"] = lambda: rlib.sumsq8_f32(p, n)
    alts["np.sum"] = lambda: np.sum(x * x)
    alts["np.dot"] = lambda: np.dot(x, x)
    if torch is not None:
        xt = torch.from_numpy(x)
        alts["t.sum"] = lambda: torch.sum(xt * xt)
        alts["t.dot"] = lambda: torch.dot(xt, xt)
    else:
        alts["t.sum"] = alts["t.dot"] = NA("torch not installed")
    # float32 lane accumulators drift with n (C8: ~5e-4 at 1e7); ms.sum is held to 1e-5
    ok, bad = check(alts, ref, rtol=1e-2, rtol_of={"ms": 1e-5})
    failures += [f"sum: {k}: {v.reason}" for k, v in bad.items() if isinstance(v, Wrong)]
    errs = []
    for k, fn in ok.items():
        errs.append(f"{k} {abs(float(as_array(fn())) - float(ref)) / float(ref):.1e}")
    short = {"ms": "mshadow", "c16": "C16", "c8": "C8", "t.sum": "torch.sum", "t.dot": "torch.dot"}
    tab = Table("sum of squares r = ms.sum(x * x), float32, ONE thread", "ms", list(alts),
                c_names=("c16", "c8"), label="n")
    tab.add(f"{n:.0e}", measure(ok, args.rounds, args.min_time, args.row_time), bad)
    tab.show(short, ["mshadow: ms.sum(X * X); np.sum: np.sum(x * x); np.dot: np.dot(x, x) "
                     "(BLAS); torch.sum: torch.sum(x * x); torch.dot: torch.dot(x, x)",
                     "C16 / C8: cloop_reduce.c sumsq with 16 / 8 lane accumulators "
                     "(gcc -O3 -march=native, no -ffast-math)",
                     "relative error vs float64: " + ", ".join(errs)])


def axis_section(args, rlib, nt, failures):
    """Reductions that keep an axis, of a * b."""
    rows, cols = args.axis_shape
    rng = np.random.default_rng(2)
    a, b = (aligned_empty(rows * cols, F32).reshape(rows, cols) for _ in range(2))
    a[:] = rng.uniform(0.5, 1.5, (rows, cols))
    b[:] = rng.uniform(0.5, 1.5, (rows, cols))
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    t = aligned_empty(rows * cols, F32).reshape(rows, cols)
    T = ms.from_numpy(t)
    r0, r1 = aligned_empty(rows, F32), aligned_empty(cols, F32)      # keep axis 0 / axis 1
    R0, R1 = ms.from_numpy(r0), ms.from_numpy(r1)
    c0, c1 = aligned_empty(rows, F32), aligned_empty(cols, F32)
    ab = a.astype(np.float64) * b.astype(np.float64)
    ref0, ref1 = ab.sum(1), ab.sum(0)
    at = bt = None
    if torch is not None:
        at, bt = torch.from_numpy(a), torch.from_numpy(b)
    pa, pb = a.ctypes.data, b.ctypes.data
    names = ["ms", "ms2", "c", "np", "einsum", "torch"]
    short = {"ms": "mshadow", "ms2": "ms 2-step", "c": "C", "np": "numpy", "einsum": "einsum",
             "torch": "torch"}
    tab = Table(f"reductions keeping an axis, a * b of {rows}x{cols} float32, {nt} thread(s)",
                "ms", names, c_names=("c",))
    red = getattr(ms, "red", None)

    def case(label, keep, stmt, stmt2, need):
        """keep: the axis kept (0: one value per row, result (rows,); 1: per column)."""
        R, r, c, ref = (R0, r0, c0, ref0) if keep == 0 else (R1, r1, c1, ref1)
        missing = ms_attr(*need)

        def ms_():
            stmt(R)
            return r

        def ms2_():
            T[:] = A * B
            stmt2(R)
            return r

        cfn = rlib.rowsum_prod_f32 if keep == 0 else rlib.colsum_prod_f32
        pc = c.ctypes.data

        def c_():
            cfn(pa, pb, pc, rows, cols, nt)
            return c

        ax, sub = (1, "ij,ij->i") if keep == 0 else (0, "ij,ij->j")
        alts = {"ms": missing or ms_, "ms2": missing or ms2_, "c": c_,
                "np": lambda: (a * b).sum(ax),
                "einsum": lambda: np.einsum(sub, a, b),
                "torch": (lambda: (at * bt).sum(ax)) if torch is not None
                else NA("torch not installed")}
        ok, bad = check(alts, ref, rtol=2e-4)
        failures.extend(f"axis {label}: {k}: {v.reason}" for k, v in bad.items()
                        if isinstance(v, Wrong))
        tab.add(label, measure(ok, args.rounds, args.min_time, args.row_time), bad)

    def s_rows(R):
        R[:] = ms.sum_rows(A * B)

    def s_rows2(R):
        R[:] = ms.sum_rows(T)

    def s_exc(R):
        R[:] = ms.sumall_except_dim(A * B, 0)

    def s_exc2(R):
        R[:] = ms.sumall_except_dim(T, 0)

    def s_rwa(R):
        R[:] = ms.reduce_with_axis(A * B, -1, red.sum)

    def s_rwa2(R):
        R[:] = ms.reduce_with_axis(T, -1, red.sum)

    case("sum_rows(a*b)", 1, s_rows, s_rows2, ("sum_rows",))
    case("sumall_except_dim(a*b, 0)", 0, s_exc, s_exc2, ("sumall_except_dim",))
    case("reduce_with_axis(a*b, -1)", 0, s_rwa, s_rwa2, ("reduce_with_axis", "red"))
    tab.show(short, ["sum_rows keeps axis 1: numpy (a*b).sum(0), einsum('ij,ij->j'), torch "
                     "(a*b).sum(0); the other two keep axis 0: .sum(1), einsum('ij,ij->i')",
                     "ms 2-step: T[:] = A * B, then the same reduction of T (T preallocated)",
                     "C: cloop_reduce.c rowsum_prod / colsum_prod (one pass; 16 lanes per "
                     f"row / a private row of column sums per thread), {nt} OpenMP thread(s)"])


def spatial_section(args, nt, failures, which):
    """pool / im2col over an element-wise expression."""
    names = ["ms", "ms2", "torch"]
    short = {"ms": "mshadow", "ms2": "ms 2-step", "torch": "torch"}
    if which == "pool":
        shape = args.pool_shape
    else:
        shape = args.im2col_shape
    N, C, H, W = shape
    x = aligned_empty(N * C * H * W, F32).reshape(shape)
    x[:] = np.random.default_rng(3).uniform(-1, 1, shape)
    X = ms.from_numpy(x)
    t = aligned_empty(x.size, F32).reshape(shape)
    T = ms.from_numpy(t)
    xt = torch.from_numpy(x) if torch is not None else None
    relu = getattr(getattr(ms, "op", None), "relu", None)
    need = ms_attr("F", "op", "pool" if which == "pool" else "unpack_patch2col") \
        or (NA("this build has no ms.op.relu") if relu is None else None)
    if which == "pool":
        oh, ow = (H - 2) // 2 + 1, (W - 2) // 2 + 1
        y = aligned_empty(N * C * oh * ow, F32).reshape(N, C, oh, ow)
        Y = ms.from_numpy(y)
        r = np.maximum(x * 2, 0)[:, :, :oh * 2, :ow * 2]
        ref = r.reshape(N, C, oh, 2, ow, 2).max(axis=(3, 5))

        def ms_():
            Y[:] = ms.pool(ms.F(relu, X * 2), 2, 2, 2, 2)
            return y

        def ms2_():
            T[:] = ms.F(relu, X * 2)
            Y[:] = ms.pool(T, 2, 2, 2, 2)
            return y

        tor = (lambda: TF.max_pool2d(torch.relu(xt * 2), 2, 2)) if torch is not None else None
        post = None
        title = (f"pool over an expression: y[:] = pool(F(relu, x * 2), 2, 2, 2, 2), "
                 f"x {N}x{C}x{H}x{W} float32")
        label = "pool(F(relu, x*2))"
        notes = ["ms 2-step: T[:] = F(relu, x * 2); y[:] = pool(T, 2, 2, 2, 2) (T preallocated)",
                 "torch: F.max_pool2d(torch.relu(x * 2), 2, 2) (allocates its temporaries and "
                 "result)"]
    else:
        k = 3
        oh, ow = H - k + 1, W - k + 1
        col = aligned_empty(C * k * k * N * oh * ow, F32).reshape(C * k * k, N * oh * ow)
        COL = ms.from_numpy(col)
        win = np.lib.stride_tricks.sliding_window_view(np.maximum(x, 0), (k, k), axis=(2, 3))
        ref = win.transpose(1, 4, 5, 0, 2, 3).reshape(C * k * k, N * oh * ow)

        def ms_():
            COL[:] = ms.unpack_patch2col(ms.F(relu, X), k, k, 1)
            return col

        def ms2_():
            T[:] = ms.F(relu, X)
            COL[:] = ms.unpack_patch2col(T, k, k, 1)
            return col

        tor = (lambda: TF.unfold(torch.relu(xt), k)) if torch is not None else None

        def post(u):          # torch's (N, C*k*k, L) in mshadow's (C*k*k, N*L) layout
            return u.permute(1, 0, 2).reshape(C * k * k, N * oh * ow)

        title = (f"im2col over an expression: col[:] = unpack_patch2col(F(relu, x), 3, 3, 1), "
                 f"x {N}x{C}x{H}x{W} float32")
        label = "im2col(F(relu, x))"
        notes = ["ms 2-step: T[:] = F(relu, x); col[:] = unpack_patch2col(T, 3, 3, 1) "
                 "(T preallocated)",
                 "torch: F.unfold(torch.relu(x), 3), its own (N, C*9, L) layout (checked "
                 "after a permute that is not timed)"]
    alts = {"ms": need or ms_, "ms2": need or ms2_,
            "torch": (tor, post) if torch is not None else NA("torch not installed")}
    ok, bad = check(alts, ref, rtol=0, atol=0)
    failures.extend(f"{which}: {k}: {v.reason}" for k, v in bad.items() if isinstance(v, Wrong))
    del ref
    tab = Table(f"{title}, {nt} thread(s)", "ms", names,
                label="case")
    tab.add(label, measure(ok, args.rounds, args.min_time, args.row_time), bad)
    tab.show(short, notes)


def nest_section(args, nt, failures):
    """Gathers, remaps and arg-reductions over expressions: fused (one assignment) against
    the same work in two steps through a preallocated temporary."""
    names = ["ms", "ms2", "torch"]
    short = {"ms": "mshadow", "ms2": "ms 2-step", "torch": "torch"}
    rng = np.random.default_rng(5)
    relu = ms.op.relu
    tab = Table(f"expressions under gathers, remaps and arg-reductions, float32, {nt} thread(s)",
                "ms", names, label="case")
    notes = ["ms 2-step: the source expression assigned to a preallocated temporary, then the "
             "extension of that tensor", "torch: the same composition of torch ops (allocates)"]

    def row(label, fused, two, tor, ref, post=None, rtol=0.0):
        alts = {"ms": fused, "ms2": two,
                "torch": (tor, post) if torch is not None else NA("torch not installed")}
        ok, bad = check(alts, ref, rtol=rtol)
        failures.extend(f"nest {label}: {k}: {v.reason}" for k, v in bad.items()
                        if isinstance(v, Wrong))
        tab.add(label, measure(ok, args.rounds, args.min_time, args.row_time), bad)

    # conv's im2col of a padded activation: column bands, one image's padded rows at a time
    N, C, H, W = args.im2col_shape
    x = rng.uniform(-1, 1, (N, C, H, W)).astype(F32)
    X = ms.from_numpy(x)
    T = ms.new_tensor((N, C, H + 2, W + 2))
    col = ms.new_tensor((C * 9, N * H * W))
    win = np.lib.stride_tricks.sliding_window_view(np.pad(np.maximum(x, 0), ((0, 0), (0, 0),
                                                   (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    ref = win.transpose(1, 4, 5, 0, 2, 3).reshape(C * 9, N * H * W)
    del win

    def f_im2col():
        col[:] = ms.unpack_patch2col(ms.pad(ms.F(relu, X), 1), 3, 3, 1)
        return col.numpy()

    def t_im2col():
        T[:] = ms.pad(ms.F(relu, X), 1)
        col[:] = ms.unpack_patch2col(T, 3, 3, 1)
        return col.numpy()
    xt = torch.from_numpy(x) if torch is not None else None
    row("im2col(pad(F(relu, x), 1))", f_im2col, t_im2col,
        (lambda: TF.unfold(torch.relu(xt), 3, padding=1)) if torch is not None else None, ref,
        lambda u: u.permute(1, 0, 2).reshape(C * 9, N * H * W))
    del ref, T, col

    # take of an element-wise expression: per element through its leaves
    a = rng.uniform(-1, 1, (100000, 64)).astype(F32)
    b = rng.uniform(-1, 1, (100000, 64)).astype(F32)
    idx = rng.integers(0, 100000, 50000).astype(np.int32)
    A, B, I = ms.from_numpy(a), ms.from_numpy(b), ms.from_numpy(idx)
    TA = ms.new_tensor(a.shape)
    out = ms.new_tensor((50000, 64))

    def f_take():
        out[:] = ms.take(I, ms.F(relu, A * 2 - B))
        return out.numpy()

    def t_take():
        TA[:] = ms.F(relu, A * 2 - B)
        out[:] = ms.take(I, TA)
        return out.numpy()
    at, bt, it = ((torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(idx).long())
                  if torch is not None else (None,) * 3)
    row("take(i, F(relu, a*2 - b))", f_take, t_take,
        (lambda: torch.relu(at * 2 - bt)[it]) if torch is not None else None,
        np.maximum(a * 2 - b, 0)[idx])

    # concat of two expressions: both parts in bands
    cat = ms.new_tensor((200000, 64))

    def f_cat():
        cat[:] = ms.concat(ms.F(relu, A * 2), B - 1, 0)
        return cat.numpy()

    TB = ms.new_tensor(b.shape)

    def t_cat():
        TA[:] = ms.F(relu, A * 2)
        TB[:] = B - 1
        cat[:] = ms.concat(TA, TB, 0)
        return cat.numpy()
    row("concat(F(relu, a*2), b - 1, 0)", f_cat, t_cat,
        (lambda: torch.cat([torch.relu(at * 2), bt - 1], 0)) if torch is not None else None,
        np.concatenate([np.maximum(a * 2, 0), b - 1], 0))

    # argmax of an expression: chunks of cache-sized scratch
    am = ms.new_tensor((100000,))

    def f_arg():
        am[:] = ms.reduce_with_axis(A * 2 - B, 1, ms.red.maximum, True)
        return am.numpy()

    def t_arg():
        TA[:] = A * 2 - B
        am[:] = ms.reduce_with_axis(TA, 1, ms.red.maximum, True)
        return am.numpy()
    row("reduce_with_axis(a*2 - b, 1, max, mask)", f_arg, t_arg,
        (lambda: torch.argmax(at * 2 - bt, 1)) if torch is not None else None,
        np.argmax(a * 2 - b, 1).astype(F32), lambda u: u.float())
    tab.show(short, notes)


# ---------------------------------------------------------------------------- main
def shape_arg(s):
    return tuple(int(v) for v in s.lower().replace("x", ",").split(","))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(ap, "3 rounds of 5 ms samples (default: 15 rounds of 20 ms)", 15, (3, 0.5))
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for mshadow, the C loops, numexpr and torch outside the "
                         "one-thread sum section (default: ms.get_num_threads())")
    ap.add_argument("--sizes", default="1e3,1e6", help="n for E1/E2/TR (default 1e3,1e6)")
    ap.add_argument("--sum-n", type=float, default=1e7, help="n of ms.sum(x*x) (default 1e7)")
    ap.add_argument("--axis-shape", type=shape_arg, default=(4096, 1024))
    ap.add_argument("--pool-shape", type=shape_arg, default=(32, 64, 56, 56),
                    help="N,C,H,W of x for pool (default 32,64,56,56: a round < 0.5 s)")
    ap.add_argument("--im2col-shape", type=shape_arg, default=(8, 64, 56, 56),
                    help="N,C,H,W of x for im2col (the result is 9x its size)")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: "
                    + ",".join(SECTIONS))
    args = ap.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 15)
    args.min_time = args.min_time or (0.005 if args.quick else 0.02)
    if args.row_time is None:
        args.row_time = 0.5 if args.quick else 3.0
    args.sizes = [int(float(s)) for s in args.sizes.split(",") if s.strip()]
    args.sum_n = int(args.sum_n)
    skip = {s.strip().lower() for s in args.skip.split(",") if s.strip()}
    if skip - set(SECTIONS):
        ap.error(f"unknown section(s) {', '.join(sorted(skip - set(SECTIONS)))}; "
                 f"sections: {', '.join(SECTIONS)}")
    if args.threads is not None:
        ms.set_num_threads(args.threads)
    nt = ms.get_num_threads()
    thr = be.MIN_PER_THREAD * nt - 1
    if ne is not None:
        ne.set_num_threads(nt)
    if torch is not None:
        torch.set_num_threads(nt)
    rng = np.random.default_rng(0)
    failures = []

    print("mshadow IR benchmark: expressions across the engine's boundaries"
          + (" (--quick)" if args.quick else ""))
    print_machine("threaded timings will be inflated (an OpenMP team waits for a "
                  "descheduled thread). Rerun when idle.")
    msdir = os.path.dirname(ms.__file__)
    simd = ms.simd_info() if hasattr(ms, "simd_info") else "?"
    print(f"mshadow : {getattr(ms, '__version__', '?')} from {msdir} (git {git_rev(msdir)})  "
          f"simd_info={simd}")
    print(f"threads : mshadow {nt}, C loops {nt}, numexpr {ne.get_num_threads() if ne else '-'}, "
          f"torch {torch.get_num_threads() if torch else '-'}; the sum section runs everything "
          f"on ONE thread")
    print(f"numpy {np.__version__}, numexpr {ne.__version__ if ne else 'not installed'}, "
          f"torch {torch.__version__ if torch else 'not installed'}; C loops: gcc -O3 "
          f"-march=native -fopenmp -shared -fPIC (cloop.c, cloop_reduce.c)")
    print(f"times: medians of at least {args.rounds} interleaved rounds (up to {4 * args.rounds} "
          f"while a row has taken < {args.row_time:g} s: column 'rounds'); a round's sample is "
          f"the best of up to 5 bursts of {args.min_time / 5 * 1e3:g} ms of calls, at most "
          f"{args.min_time * 1e3:g} ms or one call (time.perf_counter, GC off); 'ms IQR': "
          f"interquartile range of mshadow's samples / their median")
    print("ratios: ms/C < 1 means mshadow beats the C loop, X/ms > 1 means mshadow beats X")

    with tempfile.TemporaryDirectory(prefix="ms_ir_") as tmpdir:
        lib, _ = be.build_cloop(tmpdir)
        lib = {f"{e}_f32": getattr(lib, f"{e}_f32") for e in ("e1", "e2", "tr")}
        rlib = build_cloop_reduce(tmpdir)
        if "elem" not in skip:
            elem_section(args, lib, nt, thr, rng, failures)
        if "sum" not in skip:
            ms.set_num_threads(1)          # also caps the BLAS pool (threadpoolctl)
            if torch is not None:
                torch.set_num_threads(1)
            try:
                sum_section(args, rlib, failures)
            finally:
                ms.set_num_threads(nt)
                if torch is not None:
                    torch.set_num_threads(nt)
        if "axis" not in skip:
            axis_section(args, rlib, nt, failures)
        for which in ("pool", "im2col"):
            if which not in skip:
                spatial_section(args, nt, failures, which)
        if "nest" not in skip:
            nest_section(args, nt, failures)

    busy = busy_elsewhere()
    print(f"\n{busy * 100:.0f}% of the CPUs busy with other work at the end"
          + (" (timings above may be inflated; rerun)" if busy > 0.1 else ""))
    return exit_status(failures)


def exit_status(failures):
    """Print the correctness failures (each alternative is checked before timing) or that
    there were none; the script's exit status (1: a wrong result)."""
    if failures:
        print("\nCORRECTNESS FAILURES (checked before timing):")
        for m in failures:
            print("  " + m)
        return 1
    print("\nevery alternative that ran matched its reference before timing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
