"""Neural-network kernels: mshadow against numpy's best formulation, PyTorch (CPU, oneDNN) and
a hand-written C loop, side by side in one process.

    python benchmarks/bench_nn.py                  # full run: about 2 min on 2 cores
    python benchmarks/bench_nn.py --quick          # fewer rounds, conv at N = 8: about 40 s
    python benchmarks/bench_nn.py --threads 1 --dtype float32 --skip conv,softmax
    cd /tmp && PYTHONPATH=/path/to/other/checkout python /path/to/bench_nn.py   # another build

The kernels of the project's issue "kernels", each at one thread and at all threads
(--threads) and in float32 and float64 (--dtype; conv float32 only):
    pool     Y[:] = ms.pool(X, 3, 3, 2, 2) (max), ms.pool(X, 2, 2, 2, 2) and the average
             ms.pool(X, 3, 3, 2, 2, ms.red.sum) * (1 / 9), X (32, 64, 56, 56)
    im2col   COL[:] = ms.unpack_patch2col(X, 3, 3, 1), X (8, 64, 56, 56), COL (576, N*54*54)
    softmax  ms.softmax(D, E) over the rows of (256, 1000) and (4096, 1000)
    concat   Y[:] = ms.concat(A, B, 1), A and B (32, 64, 28, 28)
    reduce   O[:] = ms.sumall_except_dim(X, 1), X (32, 64, 56, 56); R[:] = ms.sum_rows(A),
             A (4096, 1024)
    conv     64 -> 64 channels, 3x3, pad 1, on (32, 64, 56, 56) (--quick: N = 8), the cxxnet
             way: forward dot(w, unpack_patch2col(pad(x, 1))), grad-input
             crop(pack_col2patch(dot(w.T, g))), grad-weight dot(g, unpack_patch2col(...).T)
against numpy's best formulation (the fastest of the formulations a row lists, all with
preallocated outputs), PyTorch (torch.nn.functional / torch.nn.grad, out= where the op has
it) and, where one is simple, a C loop (cloop_nn.c, gcc -O3 -march=native -fopenmp).

bench_ir.py's machinery does the work: every alternative is checked against a float64
numpy reference before anything is timed (a mismatch prints WRONG and the script exits 1),
and timings are medians over interleaved rounds (_common.measure). Ratios are ms/X: above 1,
mshadow is slower. The goal column holds the issue's targets: mshadow at most 1.0x numpy's
best and at most 1.0x PyTorch's time, on every row. See benchmarks/README.md.
"""
import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile

# Two OpenBLAS pools live in this process: numpy's and the one mshadow's dot calls (scipy's).
# With OpenBLAS's default spin (2^28 cycles, about 0.1 s) the idle threads of one pool
# busy-wait through the other's calls while the alternatives alternate: on 2 cores, ms.dot
# and np.matmul of the grad-weight GEMM called in turn at 2 threads took twice as long as
# each alone. 2^16 cycles (tens of microseconds) unless the caller chose; read when OpenBLAS
# loads, so before numpy.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (aligned_empty, busy_elsewhere, fmt_time, git_rev,  # noqa: E402
                     measure, print_machine, add_timing_args)

# the interleaved timing, the checks and the table of the IR benchmark (which imports mshadow
# from this checkout when it is not installed, and torch when there is one)
import bench_ir as bi  # noqa: E402
from bench_ir import NA, Table, Wrong, as_array, check, shape_arg  # noqa: E402

ms, torch, TF = bi.ms, bi.torch, bi.TF

SECTIONS = ("pool", "im2col", "softmax", "concat", "reduce", "conv")
DTYPES = {"float32": np.float32, "float64": np.float64}
SUFFIX = {np.float32: "f32", np.float64: "f64"}
CC = ["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]
SHORT = {"ms": "mshadow", "np": "numpy", "torch": "torch", "c": "C"}


# ---------------------------------------------------------------------------- C loops
def build_cloop_nn(tmpdir):
    """cloop_nn.c, compiled as bench_elementwise.py compiles cloop.c; ctypes handle."""
    so = os.path.join(tmpdir, "cloop_nn.so")
    subprocess.run(CC + [os.path.join(HERE, "cloop_nn.c"), "-o", so, "-lm"], check=True)
    lib = ctypes.CDLL(so)
    P, L, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for s in SUFFIX.values():
        for fn in ("maxpool", "avgpool"):
            getattr(lib, f"{fn}_{s}").argtypes = [P, P, L, L, L, L, L, L, L, I]
        getattr(lib, f"im2col_{s}").argtypes = [P, P, L, L, L, L, L, I]
        getattr(lib, f"concat_{s}").argtypes = [P, P, P, L, L, L, I]
        getattr(lib, f"sum_except1_{s}").argtypes = [P, P, L, L, L, I]
        getattr(lib, f"colsum_{s}").argtypes = [P, P, L, L, I]
        for fn in ("maxpool", "avgpool", "im2col", "concat", "sum_except1", "colsum"):
            getattr(lib, f"{fn}_{s}").restype = None
    return lib


def cfn(lib, name, dt):
    return getattr(lib, f"{name}_{SUFFIX[dt]}") if lib is not None else None


# ---------------------------------------------------------------------------- tables
class NNTable(Table):
    """bench_ir's Table with every ratio as ms/X (> 1: mshadow slower) and a goal column."""

    def __init__(self, title, names):
        super().__init__(title, "ms", names, c_names=[k for k in names if k != "ms"])

    def add(self, label, res, bad, goal="-"):
        super().add(label, res, bad)
        self.rows[-1][-2:-2] = [goal]

    def header(self, short):
        h = super().header(short)
        return h[:-2] + ["goal"] + h[-2:]


def goal_of(med):
    """The issue's goals of a row: mshadow <= 1.0x numpy's best and <= 1.0x torch."""
    if "ms" not in med:
        return "n/a"
    miss = []
    for k in ("torch", "np"):
        if k not in med:
            miss.append(f"no {SHORT[k]}")
            continue
        r = med["ms"] / med[k]
        if r > 1.0:
            miss.append(f"ms/{SHORT[k]} {r:.2f}>1")
    return "met" if not miss else "; ".join(miss)


class Row:
    """One row of a section: its alternatives (name -> fn, (fn, post) or NA, see bench_ir's
    check(); "np:<formulation>" for each numpy formulation), the float64 reference and
    tolerances. ``rounds`` / ``row_time`` override the command line's (the long conv calls);
    ``flops`` adds a GFLOP/s note; ``errors`` a note of each alternative's error."""

    def __init__(self, label, alts, ref, rtol=0.0, atol=0.0, rounds=None, row_time=None,
                 flops=None, errors=False):
        self.label, self.alts, self.ref, self.rtol, self.atol = label, alts, ref, rtol, atol
        self.rounds, self.row_time, self.flops, self.errors = rounds, row_time, flops, errors


class Runner:
    """Runs a section's rows at each thread count into one table per thread count."""

    def __init__(self, args, threads):
        self.args, self.threads = args, threads
        self.failures, self.goals = [], []

    @staticmethod
    def nt_now():
        """The threads mshadow has now: the C loops' OpenMP num_threads."""
        return ms.get_num_threads()

    @staticmethod
    def set_threads(nt):
        ms.set_num_threads(nt)               # also caps the BLAS pools (threadpoolctl)
        if torch is not None:
            torch.set_num_threads(nt)

    def section(self, name, title, names, rows, notes=()):
        for nt in self.threads:
            self.set_threads(nt)
            tab = NNTable(f"{title}, {nt} thread(s)", names)
            for row in rows:
                self.run(tab, name, nt, row)
            tab.show(SHORT, notes)

    def run(self, tab, section, nt, row):
        args = self.args
        ok, bad = check(row.alts, row.ref, row.rtol, row.atol)
        self.failures.extend(f"{section} {row.label}, {nt} thread(s): {k}: {v.reason}"
                             for k, v in bad.items() if isinstance(v, Wrong))
        if ok:
            rounds = row.rounds or args.rounds
            row_time = args.row_time if row.row_time is None else row.row_time
            med, spread, n = measure(ok, rounds, args.min_time, row_time)
        else:
            med, spread, n = {}, {}, 0
        # numpy's column: the fastest of its formulations
        forms = [k for k in row.alts if k.startswith("np:")]
        timed = [k for k in forms if k in med]
        if timed:
            best = min(timed, key=med.get)
            med["np"], spread["np"] = med[best], spread[best]
            if len(forms) > 1:
                figs = [f"{k[3:]} {fmt_time(med[k])}" for k in timed]
                figs += [f"{k[3:]} {'WRONG' if isinstance(bad[k], Wrong) else 'n/a'}"
                         for k in forms if k in bad]
                tab.notes.append(f"{row.label}: numpy = {best[3:]}, the fastest of "
                                 + ", ".join(figs))
        elif forms:
            bad["np"] = bad.pop(forms[0])
        for k in forms:
            med.pop(k, None)
        if row.flops and med:
            tab.notes.append(f"{row.label}: {row.flops / 1e9:.2f} GFLOP; GFLOP/s "
                             + ", ".join(f"{SHORT[k]} {row.flops / med[k] / 1e9:.1f}"
                                         for k in tab.names if k in med))
        if row.errors and ok:
            amax = float(np.max(np.abs(row.ref)))
            errs = []
            for k, fn in ok.items():
                alt = row.alts[k]
                post = alt[1] if isinstance(alt, tuple) else None
                got = as_array(post(fn()) if post else fn()).astype(np.float64)
                errs.append(f"{SHORT.get(k, k)} {np.max(np.abs(got - row.ref)) / amax:.1e}")
            tab.notes.append(f"{row.label}: max error / max |ref|: " + ", ".join(errs))
        goal = goal_of(med)
        self.goals.append((section, row.label, nt, goal))
        tab.add(row.label, (med, spread, n), bad, goal)


def tensor_of(a):
    return torch.from_numpy(a) if torch is not None else None


def no_torch():
    return NA("torch not installed")


def filled(shape, dt, rng, lo=-1.0, hi=1.0):
    """A 64-byte aligned C-contiguous array of uniform values."""
    a = aligned_empty(int(np.prod(shape)), dt).reshape(shape)
    a[:] = rng.uniform(lo, hi, shape)
    return a


def empty(shape, dt):
    a = aligned_empty(int(np.prod(shape)), dt).reshape(shape)
    a.fill(np.nan)                      # touched, and an unwritten element fails the check
    return a


# ---------------------------------------------------------------------------- sections
def pool_section(R, dtypes, lib, rng):
    N, C, H, W = R.args.pool_shape
    rows = []
    for dt in dtypes:
        x = filled((N, C, H, W), dt, rng)
        X, xt = ms.from_numpy(x), tensor_of(x)
        x64 = x.astype(np.float64)
        for kind, k, s in (("max", 3, 2), ("max", 2, 2), ("avg", 3, 2)):
            oh, ow = (H - k) // s + 1, (W - k) // s + 1
            ey, ex = s * (oh - 1) + 1, s * (ow - 1) + 1       # extent of a tap's strided view
            win = np.lib.stride_tricks.sliding_window_view(x64, (k, k), axis=(2, 3))
            win = win[:, :, ::s, ::s][:, :, :oh, :ow]
            ref = win.max(axis=(4, 5)) if kind == "max" else win.sum(axis=(4, 5)) / (k * k)
            del win
            outs = {a: empty((N, C, oh, ow), dt) for a in ("ms", "np", "t", "c")}
            Y = ms.from_numpy(outs["ms"])
            y, yc = outs["np"], outs["c"]
            t = empty((N, C, H, ow), dt)                       # the separable form's rows
            op = np.maximum if kind == "max" else np.add
            inv = 1.0 / (k * k)

            if kind == "max":
                def ms_(Y=Y, X=X, k=k, s=s):
                    Y[:] = ms.pool(X, k, k, s, s)
                    return Y
            else:
                def ms_(Y=Y, X=X, k=k, s=s, inv=inv):
                    Y[:] = ms.pool(X, k, k, s, s, ms.red.sum) * inv
                    return Y

            def finish(y, kind=kind, inv=inv):
                if kind == "avg":
                    np.multiply(y, inv, out=y)
                return y

            taps = [x[:, :, i:i + ey:s, j:j + ex:s] for i in range(k) for j in range(k)]

            def np_shifted(y=y, taps=taps, op=op, finish=finish):
                op(taps[0], taps[1], out=y)
                for v in taps[2:]:
                    op(y, v, out=y)
                return finish(y)

            cols = [x[:, :, :, j:j + ex:s] for j in range(k)]
            rws = [t[:, :, i:i + ey:s, :] for i in range(k)]

            def np_separable(y=y, t=t, cols=cols, rws=rws, op=op, finish=finish):
                op(cols[0], cols[1], out=t)                    # over the window's columns
                for v in cols[2:]:
                    op(t, v, out=t)
                op(rws[0], rws[1], out=y)                      # then over its rows
                for v in rws[2:]:
                    op(y, v, out=y)
                return finish(y)

            alts = {"ms": ms_, "np:shifted views": np_shifted, "np:separable": np_separable}
            if k == s and H % k == 0 and W % k == 0:
                xr = x.reshape(N, C, oh, k, ow, k)
                red = np.max if kind == "max" else np.sum

                def np_reshape(y=y, xr=xr, red=red, finish=finish):
                    red(xr, axis=(3, 5), out=y)
                    return finish(y)
                alts["np:reshape"] = np_reshape
            if torch is None:
                alts["torch"] = no_torch()
            elif kind == "max":
                alts["torch"] = lambda k=k, s=s, xt=xt: TF.max_pool2d(xt, k, s)
            else:
                yt = tensor_of(outs["t"])
                alts["torch"] = lambda k=k, s=s, xt=xt, yt=yt: torch._C._nn.avg_pool2d(
                    xt, k, s, out=yt)
            f = cfn(lib, f"{kind}pool", dt)
            px, pc = x.ctypes.data, yc.ctypes.data

            def c_(f=f, px=px, k=k, s=s, oh=oh, ow=ow, yc=yc, pc=pc):
                f(px, pc, N * C, H, W, k, s, oh, ow, R.nt_now())
                return yc
            alts["c"] = c_
            # the average: a few roundings of a sum that may cancel, against max |ref|
            tol = (1e-6 if dt == np.float32 else 1e-14) * float(np.max(np.abs(ref)))
            rows.append(Row(f"{kind} {k}x{k} s{s} {SUFFIX[dt]}", alts, ref,
                            atol=0.0 if kind == "max" else tol))
    notes = ["mshadow: Y[:] = ms.pool(X, k, k, s, s) (max, the default reducer); average: "
             "Y[:] = ms.pool(X, k, k, s, s, ms.red.sum) * (1 / (k*k)); output (H-k)//s+1, no "
             "padding",
             "numpy: 'shifted views' folds the k*k strided views x[..., i::s, j::s] into y with "
             "np.maximum / np.add (out=y); 'separable' folds the k column taps into a (N, C, H, "
             "ow) scratch, then its k row taps into y; 'reshape' (k == s only) reduces "
             "x.reshape(N, C, oh, k, ow, k) over axes 3 and 5; average then multiplies by 1/(k*k)",
             "torch: F.max_pool2d(x, k, s) (allocates its result: the op has no out=); "
             "torch._C._nn.avg_pool2d(x, k, s, out=y)",
             "C: cloop_nn.c maxpool / avgpool, one output row per iteration, the k*k taps as "
             "strided passes over the row"]
    R.section("pool", f"pooling of x {N}x{C}x{H}x{W}", ["ms", "np", "torch", "c"], rows, notes)


def im2col_section(R, dtypes, lib, rng):
    N, C, H, W = R.args.im2col_shape
    k = 3
    oh, ow = H - k + 1, W - k + 1
    rows = []
    for dt in dtypes:
        x = filled((N, C, H, W), dt, rng)
        X, xt = ms.from_numpy(x), tensor_of(x)
        win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
        ref = win.transpose(1, 4, 5, 0, 2, 3).reshape(C * k * k, N * oh * ow)
        ref = ref.astype(np.float64)
        col_ms, col_np, col_c = (empty((C * k * k, N * oh * ow), dt) for _ in range(3))
        COL = ms.from_numpy(col_ms)
        dst6, src6 = col_np.reshape(C, k, k, N, oh, ow), win.transpose(1, 4, 5, 0, 2, 3)

        def ms_(COL=COL, X=X):
            COL[:] = ms.unpack_patch2col(X, k, k, 1)
            return COL

        def np_(col=col_np, dst6=dst6, src6=src6):
            np.copyto(dst6, src6)
            return col

        f, px, pc = cfn(lib, "im2col", dt), x.ctypes.data, col_c.ctypes.data

        def c_(f=f, px=px, pc=pc, col=col_c):
            f(px, pc, N, C, H, W, k, R.nt_now())
            return col

        def post(u):          # torch's (N, C*k*k, L) in mshadow's (C*k*k, N*L) layout
            return u.permute(1, 0, 2).reshape(C * k * k, N * oh * ow)

        alts = {"ms": ms_, "np:copyto(sliding_window_view)": np_,
                "torch": (lambda xt=xt: TF.unfold(xt, k), post) if torch is not None
                else no_torch(), "c": c_}
        rows.append(Row(f"im2col 3x3 {SUFFIX[dt]}", alts, ref))
    notes = ["mshadow: COL[:] = ms.unpack_patch2col(X, 3, 3, 1) into a preallocated "
             f"({C * k * k}, {N * oh * ow}): row (c*3 + i)*3 + j, column (n*oh + oy)*ow + ox",
             "numpy: np.copyto(col.reshape(C, 3, 3, N, oh, ow), sliding_window_view(x, (3, 3), "
             "axis=(2, 3)).transpose(1, 4, 5, 0, 2, 3)), the same layout",
             "torch: F.unfold(x, 3), its own (N, C*9, L) layout (allocates; checked after a "
             "permute that is not timed)",
             "C: cloop_nn.c im2col, one memcpy of ow elements per (row, n, oy)"]
    R.section("im2col", f"im2col of x {N}x{C}x{H}x{W}, 3x3, stride 1",
              ["ms", "np", "torch", "c"], rows, notes)


def softmax_section(R, dtypes, lib, rng):
    rows = []
    for shape in R.args.softmax_shapes:
        n, m = shape
        for dt in dtypes:
            e = filled(shape, dt, rng, -5.0, 5.0)
            e64 = e.astype(np.float64)
            ref = np.exp(e64 - e64.max(1, keepdims=True))
            ref /= ref.sum(1, keepdims=True)
            d_ms, d_np, d_t = (empty(shape, dt) for _ in range(3))
            E, D = ms.from_numpy(e), ms.from_numpy(d_ms)
            mx, sm = empty((n, 1), dt), empty((n, 1), dt)

            def ms_(D=D, E=E):
                ms.softmax(D, E)
                return D

            def np_exp_sum(d=d_np, e=e, mx=mx, sm=sm):
                """d = exp(e - row max), sm = the row sums: both numpy forms' first passes."""
                np.max(e, axis=1, keepdims=True, out=mx)
                np.subtract(e, mx, out=d)
                np.exp(d, out=d)
                np.sum(d, axis=1, keepdims=True, out=sm)

            def np_div(d=d_np, sm=sm, first=np_exp_sum):   # (this row's buffers)
                first()
                np.divide(d, sm, out=d)
                return d

            def np_recip(d=d_np, sm=sm, first=np_exp_sum):
                first()
                np.reciprocal(sm, out=sm)
                np.multiply(d, sm, out=d)
                return d

            alts = {"ms": ms_, "np:divide": np_div, "np:reciprocal-multiply": np_recip}
            if torch is not None:
                et, dtt = tensor_of(e), tensor_of(d_t)
                alts["torch"] = lambda et=et, dtt=dtt: torch.softmax(et, 1, out=dtt)
            else:
                alts["torch"] = no_torch()
            tol = dict(rtol=1e-5, atol=1e-9) if dt == np.float32 else dict(rtol=1e-12, atol=0)
            rows.append(Row(f"{n}x{m} {SUFFIX[dt]}", alts, ref, **tol))
    notes = ["mshadow: ms.softmax(D, E) (mshadow/nn.py), max-subtracted, over each row",
             "numpy: np.max(e, 1, keepdims=True, out=m); np.subtract(e, m, out=d); "
             "np.exp(d, out=d); np.sum(d, 1, keepdims=True, out=s); then np.divide(d, s, "
             "out=d) or np.reciprocal(s, out=s); np.multiply(d, s, out=d)",
             "torch: torch.softmax(e, 1, out=d)",
             "no C loop: without -ffast-math gcc calls the scalar libm exp"]
    R.section("softmax", "softmax over rows", ["ms", "np", "torch"], rows, notes)


def concat_section(R, dtypes, lib, rng):
    N, C, H, W = R.args.concat_shape
    rows = []
    for dt in dtypes:
        a, b = filled((N, C, H, W), dt, rng), filled((N, C, H, W), dt, rng)
        ref = np.concatenate((a, b), 1).astype(np.float64)
        y_ms, y_np, y_t, y_c = (empty((N, 2 * C, H, W), dt) for _ in range(4))
        A, B, Y = ms.from_numpy(a), ms.from_numpy(b), ms.from_numpy(y_ms)

        def ms_(Y=Y, A=A, B=B):
            Y[:] = ms.concat(A, B, 1)
            return Y

        def np_cat(y=y_np, a=a, b=b):
            np.concatenate((a, b), 1, out=y)
            return y

        def np_copyto(y=y_np, a=a, b=b):
            np.copyto(y[:, :C], a)
            np.copyto(y[:, C:], b)
            return y

        f = cfn(lib, "concat", dt)
        pa, pb, pc = a.ctypes.data, b.ctypes.data, y_c.ctypes.data

        def c_(f=f, pa=pa, pb=pb, pc=pc, y=y_c):
            f(pa, pb, pc, N, C * H * W, C * H * W, R.nt_now())
            return y

        alts = {"ms": ms_, "np:concatenate": np_cat, "np:copyto halves": np_copyto, "c": c_}
        if torch is not None:
            at, bt, yt = tensor_of(a), tensor_of(b), tensor_of(y_t)
            alts["torch"] = lambda at=at, bt=bt, yt=yt: torch.cat((at, bt), 1, out=yt)
        else:
            alts["torch"] = no_torch()
        rows.append(Row(f"concat axis 1 {SUFFIX[dt]}", alts, ref))
    notes = ["mshadow: Y[:] = ms.concat(A, B, 1)",
             "numpy: np.concatenate((a, b), 1, out=y), or np.copyto into y[:, :C] and y[:, C:]",
             "torch: torch.cat((a, b), 1, out=y)",
             "C: cloop_nn.c concat, two memcpy per image"]
    R.section("concat", f"concat of two {N}x{C}x{H}x{W} along axis 1",
              ["ms", "np", "torch", "c"], rows, notes)


def reduce_section(R, dtypes, lib, rng):
    N, C, H, W = R.args.reduce_shape
    rws, cls = R.args.rows_shape
    rows = []
    for dt in dtypes:
        # positive values: the float32 check is not about cancellation
        x = filled((N, C, H, W), dt, rng, 0.0, 1.0)
        ref = x.astype(np.float64).sum((0, 2, 3))
        X = ms.from_numpy(x)
        o_ms, o_np, o_t, o_c = (empty((C,), dt) for _ in range(4))
        O = ms.from_numpy(o_ms)
        t = empty((N, C), dt)
        ones = np.ones(H * W, dt)
        x3 = x.reshape(N, C, H * W)

        def ms_(O=O, X=X):
            O[:] = ms.sumall_except_dim(X, 1)
            return O

        def np_sum(o=o_np, x=x):
            np.sum(x, axis=(0, 2, 3), out=o)
            return o

        def np_einsum(o=o_np, x=x):
            np.einsum("nchw->c", x, out=o)
            return o

        def np_matmul(o=o_np, x3=x3, t=t, ones=ones):
            np.matmul(x3, ones, out=t)        # BLAS gemv per image, then the N rows
            np.sum(t, axis=0, out=o)
            return o

        f, px, pc = cfn(lib, "sum_except1", dt), x.ctypes.data, o_c.ctypes.data

        def c_(f=f, px=px, pc=pc, o=o_c):
            f(px, pc, N, C, H * W, R.nt_now())
            return o

        alts = {"ms": ms_, "np:sum": np_sum, "np:einsum": np_einsum, "np:matmul": np_matmul,
                "c": c_}
        if torch is not None:
            xt, ot = tensor_of(x), tensor_of(o_t)
            alts["torch"] = lambda xt=xt, ot=ot: torch.sum(xt, (0, 2, 3), out=ot)
        else:
            alts["torch"] = no_torch()
        tol = 1e-5 if dt == np.float32 else 1e-12
        rows.append(Row(f"sumall_except_dim(x, 1) {SUFFIX[dt]}", alts, ref, rtol=tol,
                        errors=True))

        a = filled((rws, cls), dt, rng, 0.0, 1.0)
        ref = a.astype(np.float64).sum(0)
        A = ms.from_numpy(a)
        r_ms, r_np, r_t, r_c = (empty((cls,), dt) for _ in range(4))
        Rr = ms.from_numpy(r_ms)
        onesr = np.ones(rws, dt)

        def ms_rows(Rr=Rr, A=A):
            Rr[:] = ms.sum_rows(A)
            return Rr

        def np_rsum(r=r_np, a=a):
            np.sum(a, axis=0, out=r)
            return r

        def np_reinsum(r=r_np, a=a):
            np.einsum("ij->j", a, out=r)
            return r

        def np_rmatmul(r=r_np, a=a, ones=onesr):
            np.matmul(ones, a, out=r)         # BLAS gemv
            return r

        f, pa, pc = cfn(lib, "colsum", dt), a.ctypes.data, r_c.ctypes.data

        def c_rows(f=f, pa=pa, pc=pc, r=r_c):
            f(pa, pc, rws, cls, R.nt_now())
            return r

        alts = {"ms": ms_rows, "np:sum": np_rsum, "np:einsum": np_reinsum,
                "np:matmul": np_rmatmul, "c": c_rows}
        if torch is not None:
            at, rt = tensor_of(a), tensor_of(r_t)
            alts["torch"] = lambda at=at, rt=rt: torch.sum(at, 0, out=rt)
        else:
            alts["torch"] = no_torch()
        rows.append(Row(f"sum_rows(a) {SUFFIX[dt]}", alts, ref, rtol=tol, errors=True))
    notes = [f"sumall_except_dim: O[:] = ms.sumall_except_dim(X, 1), X {N}x{C}x{H}x{W} -> "
             f"({C},); numpy x.sum((0, 2, 3), out=o), np.einsum('nchw->c', x, out=o), or "
             "np.matmul(x.reshape(N, C, H*W), ones, out=t) then t.sum(0, out=o); torch "
             "torch.sum(x, (0, 2, 3), out=o)",
             f"sum_rows: R[:] = ms.sum_rows(A), A {rws}x{cls} -> ({cls},); numpy a.sum(0, out=r), "
             "np.einsum('ij->j', a, out=r), or np.matmul(ones, a, out=r); torch "
             "torch.sum(a, 0, out=r)",
             "values uniform in [0, 1); C: cloop_nn.c sum_except1 (16 lane accumulators per "
             "channel) and colsum (blocks of 256 columns in a local array)"]
    R.section("reduce", "reductions keeping an axis", ["ms", "np", "torch", "c"], rows, notes)


def conv_form(N, C, H, W, K):
    """How the direct forward tiles this 3x3 pad-1 layer at the active level (a note)."""
    level = ms.simd_info()["active"]
    if level not in ("avx2", "avx512"):
        return f"{level}: no direct kernel"
    from mshadow.dot import _blas
    plan = _blas().conv_direct_plan(level, 4, K, C * 9, N, H, W, W + 2, ms.get_num_threads(),
                                    1, C * (H + 2) * (W + 2))
    if not plan["by_channels"]:
        return "pixel vectors"
    return f"channel vectors, {plan['group']} image(s) a buffer"


def conv_section(R, rng):
    """A 3x3 pad-1 convolution the cxxnet way, against torch (oneDNN) and numpy + BLAS."""
    N, C, H, W = R.args.conv_shape
    K, k, dt = R.args.conv_out or C, 3, np.float32
    L, CK = N * H * W, C * k * k
    x = filled((N, C, H, W), dt, rng)
    w = filled((K, C, k, k), dt, rng, -1 / np.sqrt(CK), 1 / np.sqrt(CK))
    g = filled((N, K, H, W), dt, rng)
    w2 = w.reshape(K, CK)

    # float64 references, one image at a time
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w2, g))
    ref_y = np.empty((N, K, H, W))
    ref_gx = np.empty((N, C, H, W))
    ref_gw = np.zeros((K, CK))
    gxp = np.empty((C, H + 2, W + 2))
    for n in range(N):
        xp = np.pad(x64[n], ((0, 0), (1, 1), (1, 1)))
        col = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))
        col = col.transpose(0, 3, 4, 1, 2).reshape(CK, H * W)
        gn = g64[n].reshape(K, H * W)
        ref_y[n] = (w64 @ col).reshape(K, H, W)
        ref_gw += gn @ col.T
        gc = (w64.T @ gn).reshape(C, k, k, H, W)
        gxp.fill(0)
        for i in range(k):
            for j in range(k):
                gxp[:, i:i + H, j:j + W] += gc[:, i, j]
        ref_gx[n] = gxp[:, 1:-1, 1:-1]
    del x64, w64, g64, gxp

    # mshadow: cxxnet's convolution layer (examples/neuralnet/convnet.py, with the padding)
    X, G = ms.from_numpy(x), ms.from_numpy(g)
    Y, GX, GW = ms.new_tensor((N, K, H, W)), ms.new_tensor((N, C, H, W)), ms.new_tensor((K, CK))

    W4 = ms.from_numpy(w2.reshape(K, C, k, k))
    GW4 = ms.from_numpy(GW.numpy().reshape(K, C, k, k))     # GW's memory, as 4-D

    def ms_fwd():
        # cxxnet's layer in one call: the column matrix a panel at a time, each panel's
        # product written into its image of Y (docs/reduce_nn.md)
        ms.nn.conv2d(Y, X, W4, 1)
        return Y

    def ms_gin():
        ms.nn.conv2d_grad_data(GX, G, W4, 1)
        return GX

    def ms_gw():
        ms.nn.conv2d_grad_weight(GW4, X, G, 1)
        return GW

    # numpy: the same im2col layout through sliding_window_view, GEMMs through np.matmul
    xp = np.zeros((N, C, H + 2, W + 2), dt)
    col, gcol = np.empty((CK, L), dt), np.empty((CK, L), dt)
    o2, g2 = np.empty((K, L), dt), np.empty((K, L), dt)
    y, gx, gw = np.empty((N, K, H, W), dt), np.empty((N, C, H, W), dt), np.empty((K, CK), dt)
    gxpn = np.empty((N, C, H + 2, W + 2), dt)
    win6 = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3)).transpose(
        1, 4, 5, 0, 2, 3)
    col6, gcol6 = col.reshape(C, k, k, N, H, W), gcol.reshape(C, k, k, N, H, W)
    inner = xp[:, :, 1:-1, 1:-1]

    def np_im2col():
        np.copyto(inner, x)
        np.copyto(col6, win6)

    def np_fwd():
        np_im2col()
        np.matmul(w2, col, out=o2)
        np.copyto(y, o2.reshape(K, N, H, W).transpose(1, 0, 2, 3))
        return y

    def np_grad2d():
        np.copyto(g2.reshape(K, N, H, W), g.transpose(1, 0, 2, 3))

    def np_gin():
        np_grad2d()
        np.matmul(w2.T, g2, out=gcol)
        gxpn.fill(0)
        for i in range(k):
            for j in range(k):
                v = gxpn[:, :, i:i + H, j:j + W]
                np.add(v, gcol6[:, i, j].transpose(1, 0, 2, 3), out=v)
        np.copyto(gx, gxpn[:, :, 1:-1, 1:-1])
        return gx

    def np_gw():
        np_grad2d()
        np_im2col()
        np.matmul(g2, col.T, out=gw)
        return gw

    if torch is not None:
        xt, wt, gt = tensor_of(x), tensor_of(w), tensor_of(g)
        t_fwd = lambda: TF.conv2d(xt, wt, padding=1)                       # noqa: E731
        t_gin = lambda: torch.nn.grad.conv2d_input(x.shape, wt, gt, padding=1)  # noqa: E731
        t_gw = (lambda: torch.nn.grad.conv2d_weight(xt, w.shape, gt, padding=1),
                lambda u: u.reshape(K, CK))
    else:
        t_fwd = t_gin = t_gw = no_torch()

    flops = 2.0 * N * K * CK * H * W
    rounds = R.args.conv_rounds
    rows = []
    for label, fm, fn, ft, ref in (("forward", ms_fwd, np_fwd, t_fwd, ref_y),
                                   ("grad-input", ms_gin, np_gin, t_gin, ref_gx),
                                   ("grad-weight", ms_gw, np_gw, t_gw, ref_gw)):
        atol = 1e-4 * float(np.max(np.abs(ref)))
        rows.append(Row(f"{label} f32", {"ms": fm, "np:im2col + matmul": fn, "torch": ft}, ref,
                        rtol=1e-4, atol=atol, rounds=rounds, row_time=0.0, flops=flops))
    notes = ["mshadow: forward ms.nn.conv2d(Y, X, W, 1) (cxxnet's layer, dot(W, "
             "unpack_patch2col(pad(X, 1), 3, 3, 1)), in one call; at the AVX2 / AVX-512 levels "
             "each padded image read straight, in tiles of pixel vectors or, on small images, "
             f"of channel vectors (this shape: {conv_form(N, C, H, W, K)}; docs/reduce_nn.md), "
             "else the column matrix a panel at a time)",
             "  grad-input ms.nn.conv2d_grad_data(GX, G, W, 1) (the forward of G with the "
             "weight flipped, read straight at those levels; else image by image, col2im)",
             "  grad-weight ms.nn.conv2d_grad_weight(GW, X, G, 1) (an outer product a column "
             "of the padded images at those levels; else the sum over images of "
             "G[n] @ COL[:, image n].T over the same panels)",
             "numpy: the same steps: copy into a zero-bordered buffer, np.copyto of a "
             "sliding_window_view in the same layout, np.matmul(out=) (BLAS), 9 strided np.add "
             "for col2im",
             "torch: F.conv2d(x, w, padding=1) (aten::mkldnn_convolution: oneDNN), "
             "torch.nn.grad.conv2d_input / conv2d_weight (aten::convolution_backward); they "
             "allocate their results",
             f"float32 checked against float64 with rtol 1e-4 and atol 1e-4 * max |ref|; "
             f"{rounds} rounds, one call per sample"]
    R.section("conv", f"conv2d {C}->{K} 3x3 pad 1 on x {N}x{C}x{H}x{W} float32",
              ["ms", "np", "torch"], rows, notes)


# ---------------------------------------------------------------------------- main
def onednn_version():
    if torch is None:
        return "-"
    try:
        m = re.search(r"(?:MKL-DNN|oneDNN)\s+v?([\d.]+)", torch.__config__.show())
    except Exception:  # noqa: BLE001
        m = None
    avail = torch.backends.mkldnn.is_available()
    return (f"v{m.group(1)}" if m else "version ?") + ("" if avail else " (not available)")


def blas_pools():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    return ", ".join(f"{os.path.basename(p['filepath']).split('-')[0]} {p['version']}: "
                     f"{p['num_threads']}" for p in threadpool_info() if p["user_api"] == "blas")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(ap, "3 rounds of 5 ms samples, conv at N = 8 (default: 9 rounds of 20 ms)",
                    9, (1.5, 0.3))
    ap.add_argument("--conv-rounds", type=int, default=None,
                    help="rounds of the conv rows, one call per sample (default 5; --quick 3)")
    ap.add_argument("--threads", choices=("1", "all", "both"), default="both",
                    help="one thread, all (ms.get_num_threads() at start), or both tables "
                         "(default)")
    ap.add_argument("--dtype", choices=("float32", "float64", "both"), default="both",
                    help="dtypes of every section but conv (float32 only); default both")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: "
                    + ",".join(SECTIONS))
    ap.add_argument("--pool-shape", type=shape_arg, default=(32, 64, 56, 56))
    ap.add_argument("--im2col-shape", type=shape_arg, default=(8, 64, 56, 56))
    ap.add_argument("--softmax-shapes", default="256x1000,4096x1000",
                    help="comma-separated rows x cols (default 256x1000,4096x1000)")
    ap.add_argument("--concat-shape", type=shape_arg, default=(32, 64, 28, 28),
                    help="N,C,H,W of each of the two parts")
    ap.add_argument("--reduce-shape", type=shape_arg, default=(32, 64, 56, 56),
                    help="N,C,H,W of sumall_except_dim's x")
    ap.add_argument("--rows-shape", type=shape_arg, default=(4096, 1024),
                    help="rows,cols of sum_rows's a")
    ap.add_argument("--conv-shape", type=shape_arg, default=None,
                    help="N,C,H,W of the conv input (default 32,64,56,56; --quick 8,64,56,56)")
    ap.add_argument("--conv-out", type=int, default=None,
                    help="output channels of the conv (default: C)")
    args = ap.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 9)
    args.min_time = args.min_time or (0.005 if args.quick else 0.02)
    if args.row_time is None:
        args.row_time = 0.3 if args.quick else 1.5
    args.conv_rounds = args.conv_rounds or (3 if args.quick else 5)
    args.conv_shape = args.conv_shape or ((8, 64, 56, 56) if args.quick else (32, 64, 56, 56))
    args.softmax_shapes = [shape_arg(s) for s in args.softmax_shapes.split(",") if s.strip()]
    skip = {s.strip().lower() for s in args.skip.split(",") if s.strip()}
    if skip - set(SECTIONS):
        ap.error(f"unknown section(s) {', '.join(sorted(skip - set(SECTIONS)))}; "
                 f"sections: {', '.join(SECTIONS)}")
    dtypes = [DTYPES[d] for d in DTYPES if args.dtype in (d, "both")]

    # load every BLAS before the thread counts are set (ms.set_num_threads caps the loaded ones)
    one = ms.new_tensor((2, 2), init=1.0)
    one[:] = ms.dot(one, one)
    np.ones((2, 2)) @ np.ones((2, 2))
    nt_all = ms.get_num_threads()
    threads = {"1": [1], "all": [nt_all], "both": sorted({1, nt_all})}[args.threads]
    R = Runner(args, threads)

    print("mshadow NN-kernel benchmark: mshadow vs numpy's best, PyTorch and C loops"
          + (" (--quick)" if args.quick else ""))
    print_machine("threaded timings will be inflated (an OpenMP team waits for a "
                  "descheduled thread). Rerun when idle.")
    msdir = os.path.dirname(ms.__file__)
    simd = ms.simd_info() if hasattr(ms, "simd_info") else {}
    try:
        from mshadow.config import get_config
        ms_blas = get_config().get("BLAS", "?")
    except Exception:  # noqa: BLE001
        ms_blas = "?"
    print(f"mshadow : {getattr(ms, '__version__', '?')} from {msdir} (git {git_rev(msdir)}); "
          f"SIMD {simd.get('active', '?')} (compiled {', '.join(simd.get('compiled', ()))}); "
          f"BLAS {ms_blas}")
    print(f"numpy   : {np.__version__}")
    if torch is not None:
        cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "?")()
        print(f"torch   : {torch.__version__}, oneDNN {onednn_version()}, CPU capability {cap}")
    else:
        print("torch   : not installed (its columns print n/a)")
    print(f"C loops : {' '.join(CC)} cloop_nn.c")
    print(f"threads : {' and '.join(map(str, threads))} (ms.set_num_threads, which caps the "
          f"BLAS pools through threadpoolctl; torch.set_num_threads; the C loops' OpenMP "
          f"num_threads); numpy runs on one thread but for its BLAS calls (matmul)")
    print(f"OpenBLAS: OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')} "
          f"(idle BLAS threads spin 2^N cycles; this script sets 16 unless given: two OpenBLAS "
          f"pools, numpy's and mshadow's, alternate here)")
    print(f"dtypes  : {', '.join(np.dtype(d).name for d in dtypes)} (conv: float32 only)")
    print(f"times: medians of at least {args.rounds} interleaved rounds (up to {4 * args.rounds} "
          f"while a row has taken < {args.row_time:g} s; conv {args.conv_rounds} rounds of one "
          f"call): column 'rounds'; a round's sample is the best of up to 5 bursts of "
          f"{args.min_time / 5 * 1e3:g} ms of calls, at most {args.min_time * 1e3:g} ms or one "
          f"call (_common.measure); 'ms IQR': interquartile range of mshadow's samples / "
          f"their median")
    print("ratios: ms/X = mshadow's time / X's (> 1: mshadow slower); numpy = the fastest of "
          "its formulations (named under each table); goal: ms/numpy <= 1 and ms/torch <= 1")

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="ms_nn_") as tmpdir:
        try:
            lib = build_cloop_nn(tmpdir)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"C loops : not built ({bi.reason_of(e)}); their column prints n/a")
            lib = None
        for nt in threads:
            R.set_threads(nt)
            print(f"BLAS pools at {nt} thread(s): {blas_pools()}")
        sections = {"pool": pool_section, "im2col": im2col_section,
                    "softmax": softmax_section, "concat": concat_section,
                    "reduce": reduce_section}
        for name, fn in sections.items():
            if name not in skip:
                fn(R, dtypes, lib, rng)
        if "conv" not in skip:
            if np.float32 in dtypes:
                conv_section(R, rng)
            else:
                print("\nconv: float32 only (--dtype float64 given): skipped")
    R.set_threads(nt_all)

    busy = busy_elsewhere()
    print(f"\n{busy * 100:.0f}% of the CPUs busy with other work at the end"
          + (" (timings above may be inflated; rerun)" if busy > 0.1 else ""))
    print("\ngoals (mshadow <= 1.0x numpy's best and <= 1.0x torch):")
    for nt in threads:
        mine = [g for g in R.goals if g[2] == nt]
        met = sum(g[3] == "met" for g in mine)
        print(f"  {nt} thread(s): {met} of {len(mine)} rows met")
        for section, label, _, goal in mine:
            if goal != "met":
                print(f"    {section:8s} {label:32s} {goal}")
    return bi.exit_status(R.failures)


if __name__ == "__main__":
    sys.exit(main())
