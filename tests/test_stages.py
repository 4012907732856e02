"""Stages of the CPU lowering (mshadow/lower/cpu.py) and the per-run executor
(mshadow/_stages.pxi), checked from the public API against numpy.

1. Random nested trees (hypothesis): element-wise operators, scalars and tcast around
   extensions whose expression sources become stages (pad, pool, upsampling_nearest,
   concat, chpool, take with an index tensor or an index expression,
   mat_choose_row_element, unpack_patch2col, pack_col2patch, reshape of a pitched tensor,
   complex_mul_cc, implicit_dot and reduce_with_axis / reduce_keepdim of expressions, and
   broadcast / flip / slice_axis views OF a gather), 2-3 extension levels deep, in
   float32, float64 and int32, stored with a random saver into a destination that leaves
   of the tree may read; their ms.sum and sumall_except_dim too. Small trees, trees larger
   than a band (262,144 elements), and fixed large trees whose schedules are asserted, so
   that real bands run; stages of empty sources; a reduction of a reduction nested in an
   expression (the minimal form of a failure the random trees found).
2. The destination read under every stage kind ('rows', 'columns', 'whole'), with every
   saver, above and below the band threshold, on 1 and 2 threads, as itself, as a foreign
   wrapper of its memory and as an overlapping neighbour: the result is numpy's from the
   values BEFORE the store. View targets reading their tensor under a stage; an index
   expression out of range raises before anything is stored.
3. Threads: two different banded assignments overlap in time; free_space / resize /
   release racing assignments and reductions (in a child process); one expression shared
   by three threads; three threads running every schedule at once.
4. Memory: building an expression over a 200 MB source allocates nothing and compiles
   nothing; repeated banded assignments keep their scratch bounded.
5. Structure: the disassembly names the stage, its schedule and its chain; structures that
   differ get different keys and plans.

The numpy oracles below are written from docs/spatial.md and docs/extensions.md; nothing
here calls mshadow to compute an expected value. Values are small integers where the math
allows, so most checks are exact; otherwise each node of a random tree carries a bound on
its absolute error (like tests/test_nested_random.py) and the check is within twice that.
No test asserts anything about speed.
"""
import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import numpy as np

from references import (EPS, F32, F64, I32, MANT, _max, _out_extent, np_col2im, np_im2col,
                        np_pad, np_upsample, Node)
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from hypothesis import HealthCheck, Phase, given, note, settings, strategies as st

import mshadow as ms
from mshadow.expr import kComplex

BAND = 262144                                 # _stages.pxi BAND_ELEMS
# children start beside the mshadow under test (an install, or the built checkout): from an
# unpacked sdist, the unbuilt sources in the current directory would shadow the install
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ms.__file__)))

# Shrinking a failing tree costs minutes on 2 cores (every candidate compiles a new plan):
# it runs only with MSHADOW_TEST_SHRINK=1. Unshrunk, a failure still prints its tree.
_PHASES = tuple(Phase) if os.environ.get("MSHADOW_TEST_SHRINK") else \
    (Phase.explicit, Phase.reuse, Phase.generate)
HYPO = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                phases=_PHASES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


# ---- numpy oracles ------------------------------------------------------------------------

def np_pool(a, ky, kx, sy, sx, red):
    """pool with the natural output size (every window inside the image)."""
    w = sliding_window_view(a, (ky, kx), axis=(-2, -1))[..., ::sy, ::sx, :, :]
    return w.sum(axis=(-2, -1)) if red == "sum" else w.max(axis=(-2, -1))


def np_chpool(a, nsize, red):
    """chpool(src, nsize, red) with stride 1 and pad nsize // 2 (odd nsize): oC == C and
    output channel c reduces channels [c - pad, c - pad + nsize) clipped to [0, C)."""
    C, pad = a.shape[-3], nsize // 2
    out = np.empty_like(a)
    for c in range(C):
        lo, hi = max(c - pad, 0), min(c - pad + nsize, C)
        win = a[..., lo:hi, :, :]
        out[..., c, :, :] = win.sum(axis=-3) if red == "sum" else win.max(axis=-3)
    return out


def np_cmul(a, b):
    """complex_mul_cc on interleaved (re, im) last axes."""
    ar, ai, br, bi = a[..., 0::2], a[..., 1::2], b[..., 0::2], b[..., 1::2]
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.result_type(a, b))
    out[..., 0::2] = ar * br - ai * bi
    out[..., 1::2] = ar * bi + br * ai
    return out


def _stages(program, depth=0):
    """Every stage of a program and of the programs below it: (depth, schedule)."""
    out = []
    for s in program.stages:
        out.append((depth, s.schedule))
        out += _stages(s.program, depth + 1)
    return out


def _schedules(dst, e, saver="saveto"):
    return {s for _, s in _stages(ms.plan_for(dst, e, saver).program)}


class _threads:
    """``with _threads(n):`` ms.set_num_threads(n), restored afterwards."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = ms.get_num_threads()
        ms.set_num_threads(self.n)

    def __exit__(self, *exc):
        ms.set_num_threads(self.old)
        return False


def _ints(shape, seed, dtype=np.float32, lo=-3, hi=4):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


SAVERS = ["=", "+=", "-=", "*="]


def _store(t, saver, e):
    if saver == "=":
        t[:] = e
    elif saver == "+=":
        t += e
    elif saver == "-=":
        t -= e
    else:
        t *= e


def _combine(old, saver, val):
    return {"=": val, "+=": old + val, "-=": old - val, "*=": old * val}[saver]


# ---- 1. random nested trees ----------------------------------------------------------------

def _exact_like(v, dt, scale=1.0):
    """Values that ``dt`` holds exactly and every partial result of a sum of terms up to
    ``scale`` times them does too: multiples of 1/16 below 2**(MANT - 4)."""
    if dt.kind != "f":
        return True
    return bool(np.all(v * 16 == np.round(v * 16))) and _max(v) * scale * 16 <= 2.0 ** MANT[dt]


def rnd(v, dt, exact):
    """Rounding error of storing ``v`` (computed from exact operands when ``exact``)."""
    if dt.kind != "f":
        return 0.0
    if exact and _exact_like(v, dt):
        return 0.0
    return EPS[dt] * _max(v)


def N(e, v, err, dt, desc):
    """An operand (references.Node): mshadow ``e``, oracle ``v``, error bound ``err``."""
    return Node(e, v, err, desc, dt)


def _oracle(vals, dt):
    return vals.astype(np.float64 if dt.kind == "f" else np.int64)


def _divisors(n, cap):
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


MAX_ELEMS = 1200


class Gen:
    """Builds a random tree top-down from hypothesis draws: each node is asked for an
    output shape and picks an extension whose sources produce it."""

    def __init__(self, data, dt, max_elems=MAX_ELEMS):
        self.data = data
        self.max_elems = max_elems
        self.dt = dt
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
        self.keep = []
        self.kinds = set()
        self.dst = None          # (destination, its old values): a leaf may read it

    def i(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))

    def pick(self, seq):
        return seq[self.i(0, len(seq) - 1)]

    def coin(self):
        return self.data.draw(st.booleans())

    def sized(self, shape):
        return all(s >= 1 for s in shape) and int(np.prod(shape)) <= self.max_elems

    # -- leaves
    def leaf(self, shape, dt):
        shape = tuple(int(s) for s in shape)
        if self.dst is not None and shape == self.dst[0].shape and dt == self.dst[0].dtype \
                and self.i(0, 2) == 0:
            # the destination itself, or a second wrapper of its memory
            dst, old = self.dst
            if self.coin():
                return N(dst, _oracle(old, dt), 0.0, dt, "DST")
            return N(ms.from_numpy(dst.numpy()), _oracle(old, dt), 0.0, dt, "DST2")
        vals = self.rng.integers(-3, 4, size=shape).astype(dt)
        layout = self.pick(["c", "p", "w", "T"] if len(shape) == 2 else ["c", "p", "w"])
        if layout == "p":                               # pitched rows
            t = ms.new_tensor(shape, dtype=dt, pad=True)
            t.numpy()[...] = vals
        elif layout == "w":                             # a window of a wider buffer
            big = np.zeros(shape[:-1] + (shape[-1] + 3,), dt)
            big[..., 2:2 + shape[-1]] = vals
            self.keep.append(big)
            t = ms.from_numpy(big[..., 2:2 + shape[-1]])
        elif layout == "T":                             # a transposed tensor
            base = np.ascontiguousarray(vals.T)
            self.keep.append(base)
            t = ms.from_numpy(base).T
        else:
            base = np.ascontiguousarray(vals)
            self.keep.append(base)
            t = ms.from_numpy(base)
        return N(t, _oracle(vals, dt), 0.0, dt, f"{layout}{list(shape)}")

    def scalar(self, dt):
        s = self.pick([2, -1, 3] if dt.kind != "f" else [2.0, -1.0, 0.5, 3.0])
        return N(s, np.asarray(s, np.float64 if dt.kind == "f" else np.int64), 0.0, dt,
                 repr(s))

    def mix(self, shape, dt):
        """A depth-0 source: a leaf or a small element-wise expression of leaves."""
        a = self.leaf(shape, dt)
        k = self.i(0, 3)
        if k == 0:
            return a
        if k == 1:
            return self.unary(a)
        if k == 2:
            return self.binary(a, self.scalar(dt))
        return self.binary(a, self.leaf(shape, dt))

    # -- element-wise
    def unary(self, a):
        dt = a.dt
        name = self.pick(["relu", "neg", "tanh"] if dt.kind == "f" else ["relu", "neg"])
        self.kinds.add(name)
        if name == "relu":
            return N(ms.F(ms.op.relu, a.e), np.maximum(a.v, 0), a.err, dt, f"relu({a.desc})")
        if name == "neg":
            return N(-a.e, -a.v, a.err, dt, f"-{a.desc}")
        v = np.tanh(a.v)
        return N(ms.F(ms.op.tanh, a.e), v, a.err + 4 * EPS[dt], dt, f"tanh({a.desc})")

    def binary(self, a, b):
        dt = a.dt
        name = self.pick(["plus", "minus", "mul"])
        if name == "mul" and dt.kind != "f" and a.m * b.m > 2.0 ** 28:
            name = "plus"                                 # no int32 overflow
        self.kinds.add(name)
        exact = a.err == 0 and b.err == 0
        swap = not isinstance(b.e, (int, float)) and self.coin()
        if swap:
            a, b = b, a
        if name == "plus":
            e, v, err = a.e + b.e, a.v + b.v, a.err + b.err
        elif name == "minus":
            e, v, err = a.e - b.e, a.v - b.v, a.err + b.err
        else:
            e, v = a.e * b.e, a.v * b.v
            err = a.err * (b.m + b.err) + b.err * a.m
        v = np.asarray(v)
        sym = {"plus": "+", "minus": "-", "mul": "*"}[name]
        return N(e, v, err + rnd(v, dt, exact), dt, f"({a.desc} {sym} {b.desc})")

    def wrap(self, n):
        k = self.i(0, 4)
        if k == 0:
            return n
        if k == 1:
            return self.unary(n)
        if k == 2:
            return self.binary(n, self.scalar(n.dt))
        return self.binary(n, self.mix(n.shape, n.dt))

    # -- the tree
    def gen(self, shape, dt, depth, gather_only=False):
        shape = tuple(int(s) for s in shape)
        if depth == 0:
            return None if gather_only else self.mix(shape, dt)
        names = [k for k in KINDS if (k not in VIEW_KINDS or not gather_only)]
        order = self.data.draw(st.permutations(names))
        for kind in order:
            n = KINDS[kind](self, shape, dt, depth)
            if n is not None:
                assert n.shape == shape, (kind, n.shape, shape)
                self.kinds.add(kind)
                return n if gather_only and self.coin() else self.wrap(n)
        return None if gather_only else self.mix(shape, dt)


def _sum_node(s, k, v, e, desc):
    """A node whose values sum at most ``k`` terms of ``s``."""
    dt = s.dt
    if dt.kind != "f" or (s.err == 0 and _exact_like(s.v, dt, k)):
        err = 0.0
    else:
        err = k * s.err + k * EPS[dt] * k * s.m
    return N(e, v, err, dt, desc)


def k_pad(g, o, dt, depth):
    if len(o) < 2:
        return None
    py, px = g.i(0, min(2, (o[-2] - 1) // 2)), g.i(0, min(2, (o[-1] - 1) // 2))
    s = g.gen(o[:-2] + (o[-2] - 2 * py, o[-1] - 2 * px), dt, depth - 1)
    e = ms.pad(s.e, py) if py == px and g.coin() else ms.pad(s.e, py, px)
    return N(e, np_pad(s.v, py, px), s.err, dt, f"pad({s.desc}, {py}, {px})")


def k_pool(g, o, dt, depth):
    if len(o) < 2:
        return None
    ky, kx, sy, sx = g.i(1, 3), g.i(1, 3), g.i(1, 2), g.i(1, 2)
    src = o[:-2] + ((o[-2] - 1) * sy + ky, (o[-1] - 1) * sx + kx)
    if not g.sized(src):
        return None
    red = g.pick(["sum", "max"])
    s = g.gen(src, dt, depth - 1)
    e = ms.pool(s.e, ky, kx, sy, sx, ms.red.sum if red == "sum" else ms.red.maximum)
    desc = f"pool({s.desc}, {ky}, {kx}, {sy}, {sx}, {red})"
    v = np_pool(s.v, ky, kx, sy, sx, red)
    if red == "max":
        return N(e, v, s.err, dt, desc)
    return _sum_node(s, ky * kx, v, e, desc)


def k_upsample(g, o, dt, depth):
    if len(o) < 2:
        return None
    scales = [k for k in (2, 3) if o[-2] % k == 0 and o[-1] % k == 0]
    if not scales:
        return None
    sc = g.pick(scales)
    s = g.gen(o[:-2] + (o[-2] // sc, o[-1] // sc), dt, depth - 1)
    return N(ms.upsampling_nearest(s.e, sc), np_upsample(s.v, sc), s.err, dt,
             f"upsampling_nearest({s.desc}, {sc})")


def k_concat(g, o, dt, depth):
    dims = [k for k in range(len(o)) if o[k] >= 2]
    if not dims:
        return None
    d = g.pick(dims)
    na = g.i(1, o[d] - 1)
    sa, sb = list(o), list(o)
    sa[d], sb[d] = na, o[d] - na
    a = g.gen(sa, dt, depth - 1)
    b = g.gen(sb, dt, depth - 1) if g.coin() else g.mix(tuple(sb), dt)
    return N(ms.concat(a.e, b.e, d), np.concatenate([a.v, b.v], d), max(a.err, b.err), dt,
             f"concat({a.desc}, {b.desc}, {d})")


def k_chpool(g, o, dt, depth):
    if len(o) < 3:
        return None
    nsize = g.pick([n for n in (1, 3) if n <= o[-3]])
    red = g.pick(["sum", "max"])
    s = g.gen(o, dt, depth - 1)
    e = ms.chpool(s.e, nsize, ms.red.sum if red == "sum" else ms.red.maximum)
    desc = f"chpool({s.desc}, {nsize}, {red})"
    v = np_chpool(s.v, nsize, red)
    return N(e, v, s.err, dt, desc) if red == "max" else _sum_node(s, nsize, v, e, desc)


def _index(g, n, bound):
    """A 1-D index of n entries in [0, bound): (mshadow operand, ints, desc). Tensors of
    several dtypes, and expressions (which the lowering evaluates as a 'whole' stage)."""
    ints = g.rng.integers(0, bound, size=n)
    kind = g.i(0, 6)
    if kind == 0:
        return ms.from_numpy(ints.astype(np.int32)), ints, "idx_i32"
    if kind == 1:
        return ms.from_numpy(ints.astype(np.float32)), ints, "idx_f32"
    if kind == 2:        # 2.5 truncates to 2, as C's cast
        return ms.from_numpy(ints.astype(np.float32)) * 1.0 + 0.5, ints, "(idx_f32*1+0.5)"
    if kind == 3:
        return ms.tcast(np.float32, ms.from_numpy(ints.astype(np.int32))), ints, "tcast(idx)"
    if kind == 4:
        base = np.ascontiguousarray(ints[::-1].astype(np.float64))
        g.keep.append(base)
        return ms.flip(ms.from_numpy(base), 0), ints, "flip(idx_f64)"
    if kind == 5:
        return ms.F(ms.op.relu, -ms.from_numpy(-ints.astype(np.float32))), ints, "relu(-(-idx))"
    # an index that is itself a gather: column 1 of a matrix, chosen row by row
    m = g.rng.integers(-5, 5, size=(n, 3)).astype(np.float32)
    m[:, 1] = ints
    pick = ms.from_numpy(np.ones(n, np.int32))
    return (ms.mat_choose_row_element(ms.from_numpy(m), pick) + 0.25, ints,
            "(choose(m, 1) + 0.25)")


def k_take(g, o, dt, depth):
    if len(o) != 2:
        return None
    R = g.i(1, 5)
    s = g.gen((R, o[1]), dt, depth - 1)
    idx, ints, d = _index(g, o[0], R)
    return N(ms.take(idx, s.e), s.v[ints], s.err, dt, f"take({d}, {s.desc})")


def k_choose(g, o, dt, depth):
    if len(o) != 1:
        return None
    c = g.i(1, 5)
    s = g.gen((o[0], c), dt, depth - 1)
    idx, ints, d = _index(g, o[0], c)
    return N(ms.mat_choose_row_element(s.e, idx), s.v[np.arange(o[0]), ints], s.err, dt,
             f"mat_choose_row_element({s.desc}, {d})")


def k_im2col(g, o, dt, depth):
    if len(o) != 2:
        return None
    R, Q = o
    ky = g.pick(_divisors(R, 3))
    kx = g.pick(_divisors(R // ky, 3))
    C = R // (ky * kx)
    Nn = g.pick(_divisors(Q, 3))
    oh = g.pick(_divisors(Q // Nn, 4))
    ow = Q // Nn // oh
    sy, sx, dy, dx = g.i(1, 2), g.i(1, 2), g.i(1, 2), g.i(1, 2)
    H = (oh - 1) * sy + dy * (ky - 1) + 1 + g.i(0, sy - 1)
    W = (ow - 1) * sx + dx * (kx - 1) + 1 + g.i(0, sx - 1)
    src = ((Nn,) if Nn > 1 or g.coin() else ()) + (C, H, W)
    if not g.sized(src):
        return None
    # an element-wise source moves out of im2col (it reads inside the image only): a
    # gather source is what gets a 'columns' stage
    s = g.gen(src, dt, depth - 1, gather_only=depth >= 2 and g.coin())
    if s is None:
        s = g.gen(src, dt, depth - 1)
    e = ms.unpack_patch2col(s.e, ky, kx, sy, sx, dy, dx)
    return N(e, np_im2col(s.v, ky, kx, sy, sx, dy, dx), s.err, dt,
             f"unpack_patch2col({s.desc}, {ky}, {kx}, {sy}, {sx}, {dy}, {dx})")


def k_col2im(g, o, dt, depth):
    if len(o) < 3:
        return None
    C, H, W = o[-3:]
    n = int(np.prod(o[:-3], dtype=np.int64))
    ky, kx = g.i(1, min(H, 3)), g.i(1, min(W, 3))
    dy = g.i(1, 2) if 2 * (ky - 1) + 1 <= H else 1
    dx = g.i(1, 2) if 2 * (kx - 1) + 1 <= W else 1
    sy, sx = g.i(1, 2), g.i(1, 2)
    oh, ow = _out_extent(H, ky, sy, dy), _out_extent(W, kx, sx, dx)
    src = (C * ky * kx, n * oh * ow)
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    e = ms.pack_col2patch(s.e, o, ky, kx, sy, sx, dy, dx)
    return _sum_node(s, ky * kx, np_col2im(s.v, o, ky, kx, sy, sx, dy, dx), e,
                     f"pack_col2patch({s.desc}, {o}, {ky}, {kx}, {sy}, {sx}, {dy}, {dx})")


def k_complex(g, o, dt, depth):
    if dt.kind != "f" or o[-1] % 2:
        return None
    a = g.gen(o, dt, depth - 1)
    b = g.gen(o, dt, depth - 1) if g.coin() else g.mix(o, dt)
    v = np_cmul(a.v, b.v)
    if a.err == 0 and b.err == 0 and _exact_like(a.v, dt) and _exact_like(b.v, dt) \
            and 2 * a.m * b.m * 256 <= 2.0 ** MANT[dt]:
        err = 0.0
    else:
        err = 2 * (a.err * (b.m + b.err) + b.err * a.m) + 4 * EPS[dt] * 2 * a.m * b.m
    return N(ms.complex_mul_cc(a.e, b.e), v, err, dt, f"complex_mul_cc({a.desc}, {b.desc})")


def k_reshape_pitched(g, o, dt, depth):
    """reshape of a pitched tensor (or an expression of two) that re-cuts its rows."""
    n = int(np.prod(o))
    lasts = [L for L in _divisors(n, n) if L != o[-1] and L > 1]
    if not lasts:
        return None
    L = g.pick(lasts)
    src = (n // L, L)
    if n // L > 1 and g.coin():
        a = g.pick(_divisors(n // L, n))
        src = (a, n // L // a, L)
    vals = g.rng.integers(-3, 4, size=src).astype(dt)
    P = ms.new_tensor(src, dtype=dt, pad=True)
    P.numpy()[...] = vals
    v = _oracle(vals, dt)
    if g.coin():
        e, desc = ms.reshape(P, o), f"reshape(P{list(src)}, {o})"
    else:
        vals2 = g.rng.integers(-3, 4, size=src).astype(dt)
        Q = ms.new_tensor(src, dtype=dt, pad=True)
        Q.numpy()[...] = vals2
        e, desc = ms.reshape(P * 2 + Q, o), f"reshape(P{list(src)}*2 + Q, {o})"
        v = v * 2 + _oracle(vals2, dt)
    return N(e, v.reshape(o), 0.0, dt, desc)


def k_implicit_dot(g, o, dt, depth):
    """implicit_dot of two subtrees: an operand that is an expression is a view of its
    values, evaluated by a 'whole' stage."""
    if len(o) != 2:
        return None
    K = g.i(1, 6)
    a = g.gen((o[0], K), dt, depth - 1)
    b = g.gen((K, o[1]), dt, depth - 1) if g.coin() else g.mix((K, o[1]), dt)
    if dt.kind != "f" and K * a.m * b.m > 2.0 ** 30:
        return None
    v = a.v @ b.v
    if a.err == 0 and b.err == 0 and _exact_like(a.v, dt) and _exact_like(b.v, dt) \
            and K * a.m * b.m * 256 <= 2.0 ** MANT.get(dt, 64):
        err = 0.0
    else:
        err = K * (a.err * (b.m + b.err) + b.err * a.m) + K * EPS[dt] * K * a.m * b.m
    return N(ms.implicit_dot(a.e, b.e), v, err, dt, f"implicit_dot({a.desc}, {b.desc})")


def k_reduce_axis(g, o, dt, depth):
    """reduce_with_axis / reduce_keepdim (sum, maximum, or the first maximum's index)
    inside an expression: a gather over its source, which is staged."""
    keep = g.coin()
    if keep:
        ones = [k for k in range(len(o)) if o[k] == 1]
        if not ones:
            return None
        a = g.pick(ones)
        src = o[:a] + (g.i(1, 4),) + o[a + 1:]
    else:
        a = g.i(0, len(o))
        src = o[:a] + (g.i(1, 4),) + o[a:]
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    red = g.pick(["sum", "maximum", "argmax"])
    if red == "argmax" and s.err != 0:
        red = "maximum"                  # an index is only meaningful for exact values
    make = ms.reduce_keepdim if keep else ms.reduce_with_axis
    rk = ms.red.sum if red == "sum" else ms.red.maximum
    e = make(s.e, a, rk, red == "argmax")
    desc = f"{make.__name__}({s.desc}, {a}, {red})"
    if red == "argmax":
        v = np.argmax(s.v, axis=a).astype(s.v.dtype)
    else:
        v = s.v.sum(axis=a) if red == "sum" else s.v.max(axis=a)
    if keep:
        v = np.expand_dims(v, a)
    if red == "sum":
        return _sum_node(s, src[a], v, e, desc)
    return N(e, v, 0.0 if red == "argmax" else s.err, dt, desc)


def k_flip_of_gather(g, o, dt, depth):
    if depth < 2:
        return None
    d = g.i(0, len(o) - 1)
    s = g.gen(o, dt, depth - 1, gather_only=True)
    if s is None:
        return None
    return N(ms.flip(s.e, d), np.flip(s.v, d), s.err, dt, f"flip({s.desc}, {d})")


def k_slice_of_gather(g, o, dt, depth):
    if depth < 2:
        return None
    a = g.i(0, len(o) - 1)
    b0 = g.i(0, 2)
    src = list(o)
    src[a] = o[a] + b0 + g.i(0, 2)
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1, gather_only=True)
    if s is None:
        return None
    sl = [slice(None)] * len(o)
    sl[a] = slice(b0, b0 + o[a])
    return N(ms.slice_axis(s.e, a, b0, b0 + o[a]), s.v[tuple(sl)], s.err, dt,
             f"slice_axis({s.desc}, {a}, {b0}, {b0 + o[a]})")


def k_broadcast_of_gather(g, o, dt, depth):
    if depth < 2 or len(o) < 2:
        return None
    d = g.i(0, len(o) - 1)
    s = g.gen((o[d],), dt, depth - 1, gather_only=True)
    if s is None:
        return None
    shp = [1] * len(o)
    shp[d] = o[d]
    v = np.broadcast_to(s.v.reshape(shp), o).copy()
    return N(ms.broadcast(s.e, o, d), v, s.err, dt, f"broadcast({s.desc}, {o}, {d})")


def k_tcast(g, o, dt, depth):
    if dt.kind == "f":
        src_dt = g.pick([F64 if dt == F32 else F32, I32])
    else:
        src_dt = F64
    s = g.gen(o, src_dt, depth - 1)
    if dt.kind != "f":
        if s.err != 0 or s.m > 2.0 ** 30:
            return None
        v = np.trunc(s.v).astype(np.int64)
        err = 0.0
    elif src_dt.kind != "f":
        v = s.v.astype(np.float64)
        err = rnd(v, dt, True)
    else:
        v = s.v
        err = s.err + (rnd(v, dt, s.err == 0) if dt == F32 else 0.0)
    return N(ms.tcast(dt.type, s.e), v, err, dt, f"tcast<{dt.name}>({s.desc})")


KINDS = {
    "pad": k_pad, "pool": k_pool, "upsample": k_upsample, "concat": k_concat,
    "chpool": k_chpool, "take": k_take, "choose": k_choose, "im2col": k_im2col,
    "col2im": k_col2im, "complex": k_complex, "reshape_pitched": k_reshape_pitched,
    "implicit_dot": k_implicit_dot, "reduce_axis": k_reduce_axis,
    "flip_of_gather": k_flip_of_gather, "slice_of_gather": k_slice_of_gather,
    "broadcast_of_gather": k_broadcast_of_gather, "tcast": k_tcast,
}
VIEW_KINDS = {"flip_of_gather", "slice_of_gather", "broadcast_of_gather", "tcast"}


def _check(got, n, what=""):
    got = np.asarray(got)
    if n.err == 0:
        want = n.v.astype(n.dt)     # int64 -> int32 wraps as C does
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), n.v, rtol=0,
                                   atol=2 * n.err + 1e-300, err_msg=what)


SAVER_NAMES = {"=": "saveto", "+=": "plusto", "-=": "minusto", "*=": "multo"}


def _random_tree(data, dt, big=False):
    """A random tree stored with a random saver into a destination that some of its leaves
    may read (the destination or a foreign wrapper of its memory); its sum and
    sumall_except_dim are checked first. ``big``: a leading axis that makes the output
    larger than a band (the sources are larger still)."""
    g = Gen(data, dt, 4_000_000 if big else MAX_ELEMS)
    if big:     # many short rows, fewer long ones, or a matrix
        rest = g.pick([lambda: tuple(g.i(1, 5) for _ in range(g.i(2, 3))),
                       lambda: (g.i(1, 3), g.i(48, 160), g.i(48, 160)),
                       lambda: (g.i(1, 600),)])()
        shape = (-(-BAND // int(np.prod(rest))) + g.i(0, 2),) + rest
    else:
        nd = g.i(1, 4)
        hi = {1: 12, 2: 8, 3: 6, 4: 4}[nd]
        shape = tuple(g.i(1, hi) for _ in range(nd))
    depth = g.i(2, 3)
    saver = g.pick(SAVERS)
    old = g.rng.integers(-3, 4, size=shape).astype(dt)
    dst = ms.new_tensor(shape, dtype=dt, pad=g.coin(), init=None)
    dst.numpy()[...] = old
    g.dst = (dst, old)
    root = g.gen(shape, dt, depth)
    g.root = root
    note(f"tree ({dt.name}, depth {depth}, dst {saver}): {root.desc}")
    # a reduction at the root runs in the fused reduction engine: it has no plan of its own
    root_reduces = getattr(root.e, "exp_type", None) == kComplex
    g.stages = [] if root_reduces else \
        _stages(ms.plan_for(dst, root.e, SAVER_NAMES[saver]).program)
    note(f"stages: {g.stages}")
    if not isinstance(root.e, (int, float)) and not root_reduces:
        _check_reductions(root, shape)
    _store(dst, saver, root.e)
    o = _oracle(old, dt)
    v = _combine(o, saver, root.v)
    if saver == "=":
        err = root.err
    elif saver == "*=":
        err = root.err * _max(o) + rnd(v, dt, root.err == 0)
    else:
        err = root.err + rnd(v, dt, root.err == 0)
    _check(dst.numpy(), N(root.e, v, err, dt, ""), f"dst {saver} {root.desc}")
    return g


def _sum_bound(n, err, absum, dt, exact):
    """|computed - exact| for a sum of n terms each within err (any order)."""
    if dt.kind != "f" or (exact and absum * 16 <= 2.0 ** MANT[dt]):
        return 0.0
    return n * err + n * EPS[dt] * absum + 1e-300


def _check_reductions(root, shape):
    dt = root.dt
    exact = root.err == 0 and _exact_like(root.v, dt)
    got = ms.sum(root.e)
    want = root.v.sum()
    bound = _sum_bound(root.v.size, root.err, float(np.abs(root.v).sum()), dt, exact)
    if bound == 0:
        assert got == np.asarray(want).astype(dt), ("ms.sum", got, want)
    else:
        assert abs(float(got) - float(want)) <= 2 * bound, ("ms.sum", got, want, bound)
    if len(shape) >= 2:
        axis = len(shape) - 2
        o = ms.new_tensor((shape[axis],), dtype=dt, init=7)
        o[:] = ms.sumall_except_dim(root.e, axis)
        others = tuple(k for k in range(len(shape)) if k != axis)
        want = root.v.sum(others)
        absum = float(np.abs(root.v).sum(others).max())
        n = root.v.size // shape[axis]
        bound = _sum_bound(n, root.err, absum, dt, exact)
        _check(o.numpy(), N(None, want, bound / 2, dt, ""), "sumall_except_dim")


@settings(HYPO, max_examples=400)
@given(st.data())
def test_random_nested_trees_float32(data):
    _random_tree(data, F32)


@settings(HYPO, max_examples=250)
@given(st.data())
def test_random_nested_trees_float64(data):
    _random_tree(data, F64)


@settings(HYPO, max_examples=250)
@given(st.data())
def test_random_nested_trees_int32(data):
    _random_tree(data, I32)


@settings(HYPO, max_examples=25)
@given(st.data())
def test_random_nested_trees_above_the_band_threshold_float32(data):
    _random_tree(data, F32, big=True)


@settings(HYPO, max_examples=15)
@given(st.data())
def test_random_nested_trees_above_the_band_threshold_float64(data):
    _random_tree(data, F64, big=True)


def _z(shape, seed=0):
    v = _ints(shape, seed)
    return ms.from_numpy(v), v


def _zero_cases():
    """name -> () -> (expression, numpy want): stages whose source or output is empty."""
    def pool():
        X, x = _z((0, 3, 4, 4))
        return ms.pool(ms.F(ms.op.relu, X * 2), 2, 2, 2, 2), np.zeros((0, 3, 2, 2))

    def pad_w0():
        X, x = _z((2, 3, 3, 0))
        return ms.pad(X * 2, 1), np.zeros((2, 3, 5, 2))

    def concat_part0():
        (A, _), (B, b) = _z((2, 3, 0), 1), _z((2, 3, 4), 2)
        return ms.concat(A * 2, B + 1, 2), b + 1

    def take_idx0():
        (I, _), (S, _) = _z((0,), 3), _z((3, 4), 4)
        return ms.take(I * 1.0, S * 2), np.zeros((0, 4))

    def take_cols0():
        S, s = _z((3, 0), 5)
        return ms.take(ms.from_numpy(np.zeros(5, np.float32)) * 1.0, S * 2), np.zeros((5, 0))

    def im2col_n0():
        X, x = _z((0, 2, 5, 5), 6)
        return ms.unpack_patch2col(ms.pad(X * 2, 1), 3, 3, 1), np.zeros((18, 0))

    def col2im_n0():
        M, m = _z((18, 0), 7)
        return ms.pack_col2patch(M * 2, (0, 2, 5, 5), 3, 3, 1), np.zeros((0, 2, 5, 5))

    def flip_of_pool0():
        X, x = _z((0, 3, 4, 4), 8)
        return ms.flip(ms.pool(X * 2, 2, 2, 2, 2), 0), np.zeros((0, 3, 2, 2))

    def broadcast_of_choose0():
        (S, s), (I, i) = _z((0, 3), 9), _z((0,), 10)
        return ms.broadcast(ms.mat_choose_row_element(S * 2, I * 1.0), (4, 0), 1), \
            np.zeros((4, 0))
    return {k: v for k, v in locals().items() if callable(v)}


ZERO = _zero_cases()


@pytest.mark.parametrize("name", sorted(ZERO))
def test_stages_of_empty_sources_or_outputs(name):
    e, want = ZERO[name]()
    y = ms.new_tensor(e.shape, init=7)
    y[:] = e
    assert y.shape == want.shape
    np.testing.assert_array_equal(y.numpy(), want.astype(np.float32))
    assert float(ms.sum(e)) == want.sum()


def _nested_reductions():
    """name -> (x) -> (expression, numpy want from x): a reduction whose source is a
    reduction, inside another expression (found by the random trees)."""
    S, M = ms.red.sum, ms.red.maximum
    return {
        "plus": lambda X, x: (ms.reduce_with_axis(ms.reduce_with_axis(X, 0, S), 0, S) + 1,
                              x.sum((0, 1)) + 1),
        "maximum": lambda X, x: (ms.reduce_with_axis(ms.reduce_with_axis(X, 0, M), 0, M) * 2
                                 - 1, x.max((0, 1)) * 2 - 1),
        "keepdim": lambda X, x: (ms.broadcast_to(ms.reduce_keepdim(ms.reduce_keepdim(X, 0, S),
                                                                   1, S), (2, 3, 4)) - X,
                                 x.sum(0, keepdims=True).sum(1, keepdims=True) - x),
        "pad": lambda X, x: (ms.pad(ms.reduce_with_axis(ms.reduce_keepdim(X, 0, S), 0, S), 1),
                             np_pad(x.sum(0), 1, 1)),
        "flip": lambda X, x: (ms.flip(ms.reduce_with_axis(ms.reduce_with_axis(X, 2, S), 0, S),
                                      0), x.sum(2).sum(0)[::-1]),
    }


@pytest.mark.parametrize("name", sorted(_nested_reductions()))
def test_a_reduction_of_a_reduction_inside_an_expression(name):
    """Minimal form of a failure the random trees find: reduce_with_axis (or
    reduce_keepdim) whose source is directly another one, used inside an expression."""
    x = _ints((2, 3, 4), 80)
    X = ms.from_numpy(x)
    e, want = _nested_reductions()[name](X, x)
    y = ms.new_tensor(e.shape, init=7)
    y[:] = e
    np.testing.assert_array_equal(y.numpy(), want)


# ---- 1b. fixed trees above the band threshold ----------------------------------------------

def _big_cases():
    """name -> builder(dtype) -> (expression, numpy want, schedules that must occur, exact)."""
    cases = {}

    def pool_relu(dt):
        x = _ints((4, 8, 128, 128), 1, dt)
        X = ms.from_numpy(x)
        return (ms.pool(ms.F(ms.op.relu, X * 2), 2, 2, 2, 2),
                np_pool(np.maximum(x * 2, 0), 2, 2, 2, 2, "max"), {"rows"}, True)
    cases["pool_relu"] = pool_relu

    def pool_pad_tanh(dt):
        x = _ints((4, 4, 160, 128), 2, dt)
        X = ms.from_numpy(x)
        e = ms.pool(ms.pad(ms.F(ms.op.tanh, X) + 1, 1), 3, 3, 1, 1, ms.red.sum)
        want = np_pool(np_pad(np.tanh(x.astype(np.float64)) + 1, 1, 1), 3, 3, 1, 1, "sum")
        return e, want, {"rows"}, False
    cases["pool_pad_tanh"] = pool_pad_tanh

    for axis in range(4):
        def concat(dt, axis=axis):
            a = _ints((8, 3, 120, 100), 3, dt)
            sb = [8, 3, 120, 100]
            sb[axis] = 5
            b = _ints(tuple(sb), 4, dt)
            A, B = ms.from_numpy(a), ms.from_numpy(b)
            return (ms.concat(ms.F(ms.op.relu, A * 2), B - 1, axis),
                    np.concatenate([np.maximum(a * 2, 0), b - 1], axis), {"rows"}, True)
        cases[f"concat_axis{axis}"] = concat

    def im2col_pad(dt):
        x = _ints((2, 4, 64, 64), 5, dt)
        X = ms.from_numpy(x)
        e = ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, X - 1), 1), 3, 3, 1)
        # (the padding folds into im2col: one columns stage, of the relu)
        return e, np_im2col(np_pad(np.maximum(x - 1, 0), 1, 1), 3, 3, 1, 1, 1, 1), \
            {"columns"}, True
    cases["im2col_pad"] = im2col_pad

    def im2col_upsample(dt):
        x = _ints((2, 4, 32, 32), 5, dt)
        X = ms.from_numpy(x)
        e = ms.unpack_patch2col(ms.upsampling_nearest(ms.F(ms.op.relu, X - 1), 2), 3, 3, 1)
        return e, np_im2col(np_upsample(np.maximum(x - 1, 0), 2), 3, 3, 1, 1, 1, 1), \
            {"columns", "rows"}, True
    cases["im2col_upsample"] = im2col_upsample

    def col2im(dt):
        m = _ints((36, 2 * 62 * 62), 6, dt)
        m2 = _ints(m.shape, 7, dt)
        M, M2 = ms.from_numpy(m), ms.from_numpy(m2)
        e = ms.pack_col2patch(ms.F(ms.op.relu, M) * 2 - M2, (2, 4, 64, 64), 3, 3, 1)
        return e, np_col2im(np.maximum(m, 0) * 2 - m2, (2, 4, 64, 64), 3, 3, 1, 1, 1, 1), \
            {"rows"}, True
    cases["col2im"] = col2im

    def take_index_expr(dt):
        s = _ints((3000, 100), 8, dt)
        ints = np.random.default_rng(9).integers(0, 3000, 3000)
        S = ms.from_numpy(s)
        idx = ms.from_numpy(ints.astype(np.float32)) * 1.0 + 0.5
        return (ms.take(idx, ms.F(ms.op.relu, S) * 2), np.maximum(s, 0)[ints] * 2, {"whole"},
                True)
    cases["take_index_expr"] = take_index_expr

    def flip_of_pool(dt):
        x = _ints((4, 4, 160, 128), 10, dt)
        X = ms.from_numpy(x)
        e = ms.flip(ms.pool(ms.pad(X * 2, 1), 3, 3, 1, 1), 2)
        return e, np.flip(np_pool(np_pad(x * 2, 1, 1), 3, 3, 1, 1, "max"), 2), {"whole"}, True
    cases["flip_of_pool"] = flip_of_pool

    def up_chpool(dt):
        x = _ints((2, 4, 100, 100), 11, dt)
        X = ms.from_numpy(x)
        e = ms.upsampling_nearest(ms.chpool(ms.F(ms.op.relu, X) + 1, 3, ms.red.sum), 2)
        return e, np_upsample(np_chpool(np.maximum(x, 0) + 1, 3, "sum"), 2), {"rows"}, True
    cases["upsample_chpool"] = up_chpool

    def cmul(dt):
        a, b = _ints((600, 512), 12, dt), _ints((600, 512), 13, dt)
        A, B = ms.from_numpy(a), ms.from_numpy(b)
        return ms.complex_mul_cc(A + 1, B * 2), np_cmul(a + 1, b * 2), {"rows"}, True
    cases["complex_mul_cc"] = cmul

    def choose(dt):
        s = _ints((300000, 3), 14, dt)
        ints = np.random.default_rng(15).integers(0, 3, 300000)
        S = ms.from_numpy(s)
        idx = ms.tcast(np.float32, ms.from_numpy(ints.astype(np.int32)))
        return (ms.mat_choose_row_element(ms.F(ms.op.relu, S * 2), idx),
                np.maximum(s * 2, 0)[np.arange(300000), ints], {"whole"}, True)
    cases["choose_row"] = choose

    def reshape_pitched(dt):
        p = _ints((4096, 130), 16, dt)
        P = ms.new_tensor((4096, 130), dtype=dt, pad=True)
        P.numpy()[...] = p
        assert P.stride != 130
        e = ms.pool(ms.F(ms.op.relu, ms.reshape(P, (4, 8, 130, 128)) * 2), 2, 2, 2, 2,
                    ms.red.sum)
        return e, np_pool(np.maximum(p.reshape(4, 8, 130, 128) * 2, 0), 2, 2, 2, 2, "sum"), \
            {"rows"}, True
    cases["reshape_pitched"] = reshape_pitched
    return cases


BIG = _big_cases()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(BIG))
def test_big_trees_run_in_bands(name, dtype):
    e, want, schedules, exact = BIG[name](dtype)
    y = ms.new_tensor(e.shape, dtype=dtype, init=7)
    assert schedules <= _schedules(y, e), (name, _stages(ms.plan_for(y, e).program))
    for n in (1, 2):
        with _threads(n):
            y[:] = 7
            y[:] = e
        if exact:
            np.testing.assert_array_equal(y.numpy(), want.astype(dtype))
        else:
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(y.numpy(), want, rtol=tol, atol=tol * 10)


def test_big_int32_tree_runs_in_bands():
    x = _ints((4, 8, 128, 128), 17, np.int32)
    X = ms.from_numpy(x)
    e = ms.pool(ms.pad(ms.F(ms.op.relu, X * 2) + 1, 1), 3, 3, 2, 2, ms.red.sum)
    y = ms.new_tensor(e.shape, dtype=np.int32, init=7)
    assert "rows" in _schedules(y, e)
    y[:] = e
    want = np_pool(np_pad(np.maximum(x.astype(np.int64) * 2, 0) + 1, 1, 1), 3, 3, 2, 2, "sum")
    np.testing.assert_array_equal(y.numpy(), want.astype(np.int32))


# ---- 2. the destination read under every stage kind -----------------------------------------

def _aliased_rows(big):
    """t[...] = pool(pad(F(relu, t), 1), 3, 3, 1, 1): a 'rows' stage reading t."""
    shape = (4, 4, 160, 128) if big else (2, 3, 20, 24)

    def build(t):
        return ms.pool(ms.pad(ms.F(ms.op.relu, t), 1), 3, 3, 1, 1, ms.red.sum)

    def ref(old):
        return np_pool(np_pad(np.maximum(old, 0), 1, 1), 3, 3, 1, 1, "sum")
    return shape, build, ref, "rows"


def _aliased_columns(big):
    """t (9C, N*H*W)[...] = im2col(pad(relu(reshape(t[:C], (N, C, H, W))), 1), 3, 3, 1):
    a 'columns' stage (and a 'rows' one under it) reading t's first C rows."""
    Nn, C, H, W = (2, 4, 64, 64) if big else (1, 2, 6, 6)
    shape = (9 * C, Nn * H * W)

    def build(t):
        img = ms.reshape(ms.slice_axis(t, 0, 0, C), (Nn, C, H, W))
        return ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, img), 1), 3, 3, 1)

    def ref(old):
        img = old[:C].reshape(Nn, C, H, W)
        return np_im2col(np_pad(np.maximum(img, 0), 1, 1), 3, 3, 1, 1, 1, 1)
    return shape, build, ref, "columns"


def _aliased_take(big):
    """t[...] = take(|choose(t, 0)|, relu(t) * 2 - 1): an index expression of t and a source
    expression of t, both 'whole' stages; t's column 0 holds a permutation of its rows."""
    shape = (2048, 160) if big else (40, 12)
    zeros = ms.from_numpy(np.zeros(shape[0], np.int32))

    def build(t):
        idx = ms.F(ms.op.abs, ms.mat_choose_row_element(t, zeros))
        return ms.take(idx, ms.F(ms.op.relu, t) * 2 - 1)

    def ref(old):
        return np.maximum(old[np.abs(old[:, 0]).astype(np.int64)], 0) * 2 - 1
    return shape, build, ref, "whole"


def _aliased_take_view(big):
    """t[...] = take(|choose(t, 0)|, flip(t, 0)) * 2: a 'whole' index stage reading t, and a
    2-D view of t that the gather reads in place."""
    shape = (2048, 160) if big else (40, 12)
    zeros = ms.from_numpy(np.zeros(shape[0], np.int32))

    def build(t):
        return ms.take(ms.F(ms.op.abs, ms.mat_choose_row_element(t, zeros)), ms.flip(t, 0)) * 2

    def ref(old):
        return old[::-1][np.abs(old[:, 0]).astype(np.int64)] * 2
    return shape, build, ref, "whole"


def _aliased_col2im(big):
    """t[...] = pack_col2patch(relu(unpack_patch2col(t, 3, 3, 1)) - 1, t.shape, 3, 3, 1): a
    'rows' stage of col2im (boxes of rows and columns) whose producer reads t in place."""
    shape = (2, 8, 160, 128) if big else (1, 2, 10, 12)

    def build(t):
        return ms.pack_col2patch(ms.F(ms.op.relu, ms.unpack_patch2col(t, 3, 3, 1)) - 1, shape,
                                 3, 3, 1)

    def ref(old):
        cols = np.maximum(np_im2col(old, 3, 3, 1, 1, 1, 1), 0) - 1
        return np_col2im(cols, shape, 3, 3, 1, 1, 1, 1)
    return shape, build, ref, "rows"


def _aliased_view_of_gather(big):
    """t[...] = flip(pool(pad(t * 2, 1), 3, 3, 1, 1), 2): a view of a gather of t ('whole')."""
    shape = (4, 4, 160, 128) if big else (2, 3, 20, 24)

    def build(t):
        return ms.flip(ms.pool(ms.pad(t * 2, 1), 3, 3, 1, 1), 2) + 1

    def ref(old):
        return np.flip(np_pool(np_pad(old * 2, 1, 1), 3, 3, 1, 1, "max"), 2) + 1
    return shape, build, ref, "whole"


ALIASED = {"rows": _aliased_rows, "columns": _aliased_columns, "col2im": _aliased_col2im,
           "take": _aliased_take,
           "take_view": _aliased_take_view, "view_of_gather": _aliased_view_of_gather}


def _old_values(kind, shape, dtype, seed, rows=None):
    """Small integers; for the take kinds column 0 holds row indices in [0, rows) (a
    permutation when there are that many rows), negated at random."""
    old = _ints(shape, seed, dtype)
    if kind.startswith("take"):
        rows = shape[0] if rows is None else rows
        r = np.random.default_rng(seed)
        idx = r.permutation(rows) if rows == shape[0] else r.integers(0, rows, shape[0])
        old[:, 0] = idx * np.where(r.random(shape[0]) < 0.5, -1, 1)
    return old


@pytest.mark.parametrize("wrapper", ["self", "foreign", "shifted"])
@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("kind", sorted(ALIASED))
def test_destination_read_under_a_stage(kind, saver, big, wrapper):
    """``wrapper``: the expression reads the destination itself, a second wrapper of its
    memory (ms.from_numpy(t.numpy())), or a wrapper of the same buffer one row earlier
    (overlapping it at other positions)."""
    shape, build, ref, schedule = ALIASED[kind](big)
    assert (int(np.prod(shape)) > BAND) == big
    for dtype in (np.float32, np.float64):
        for n in (1, 2):
            what = f"{kind} {saver} {shape} {np.dtype(dtype).name} threads={n} {wrapper}"
            if wrapper == "shifted":
                base = _old_values(kind, (shape[0] + 1,) + shape[1:], dtype, 20 + n, shape[0])
                snapshot = base.copy()
                t = ms.from_numpy(base[1:])
                src = ms.from_numpy(base[:-1])
                old_dst, old_src = snapshot[1:], snapshot[:-1]
            else:
                old_dst = old_src = _old_values(kind, shape, dtype, 20 + n)
                t = ms.new_tensor(shape, dtype=dtype, pad=(n == 2))
                t.numpy()[...] = old_dst
                src = t if wrapper == "self" else ms.from_numpy(t.numpy())
            e = build(src)
            assert schedule in _schedules(t, e, "saveto"), what
            with _threads(n):
                _store(t, saver, e)
            want = _combine(old_dst.astype(np.float64), saver, ref(old_src.astype(np.float64)))
            np.testing.assert_array_equal(t.numpy(), want.astype(dtype), err_msg=what)
            if wrapper == "shifted":
                np.testing.assert_array_equal(base[0], snapshot[0], err_msg=what)


@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("target", ["flip_last_axis", "slice_axis"])
def test_view_target_reads_its_tensor_under_a_stage(target, saver, big):
    """A view target (a reversed last axis: the strided form of the plan; a slice) stored
    from stages that read the tensor it views."""
    shape = (4, 4, 160, 128) if big else (2, 3, 20, 24)
    W = shape[3]
    for dtype in (np.float32, np.float64):
        for n in (1, 2):
            old = _ints(shape, 30 + n, dtype)
            t = ms.new_tensor(shape, dtype=dtype)
            t.numpy()[...] = old
            full = ms.pool(ms.pad(ms.F(ms.op.relu, t), 1), 3, 3, 1, 1, ms.red.sum)
            o = old.astype(np.float64)
            r = np_pool(np_pad(np.maximum(o, 0), 1, 1), 3, 3, 1, 1, "sum")
            want = o.copy()
            if target == "flip_last_axis":
                view, e = ms.flip(t, 3), full
                want = np.flip(_combine(np.flip(o, 3), saver, r), 3)
            else:
                view, e = ms.slice_axis(t, 3, 0, W // 2), ms.slice_axis(full, 3, W // 2, W)
                want[..., :W // 2] = _combine(o[..., :W // 2], saver, r[..., W // 2:])
            with _threads(n):
                _store(view, saver, e)
            np.testing.assert_array_equal(
                t.numpy(), want.astype(dtype),
                err_msg=f"{target} {saver} {shape} {np.dtype(dtype).name} threads={n}")


def _more_transposed(n):
    old = _ints((600, 600), 70 + n)
    t = ms.from_numpy(old.copy())
    t[:] = ms.pool(ms.pad(ms.F(ms.op.relu, t.T), 1), 3, 3, 1, 1, ms.red.sum)
    return t.numpy(), np_pool(np_pad(np.maximum(old.T, 0), 1, 1), 3, 3, 1, 1, "sum")


def _more_window(n):
    buf = _ints((4, 4, 160, 132), 71 + n)
    snap = buf.copy()
    t = ms.from_numpy(buf[..., 2:130])            # rows longer than the tensor's
    t += ms.pool(ms.pad(ms.F(ms.op.relu, t), 1), 3, 3, 1, 1, ms.red.sum)
    o = snap[..., 2:130]
    snap[..., 2:130] = o + np_pool(np_pad(np.maximum(o, 0), 1, 1), 3, 3, 1, 1, "sum")
    return buf, snap


def _more_top_and_stage(n):
    old = _ints((4, 4, 160, 128), 72 + n)
    t = ms.from_numpy(old.copy())
    t[:] = t * 2 + ms.pool(ms.pad(t, 1), 3, 3, 1, 1) - \
        ms.upsampling_nearest(ms.pool(ms.F(ms.op.relu, t), 2, 2, 2, 2), 2)
    want = old * 2 + np_pool(np_pad(old, 1, 1), 3, 3, 1, 1, "max") - \
        np_upsample(np_pool(np.maximum(old, 0), 2, 2, 2, 2, "max"), 2)
    return t.numpy(), want


def _more_whole_and_rows(n):
    old = _ints((2048, 160), 73 + n)
    old[:, 0] = np.random.default_rng(n).permutation(2048)
    t = ms.from_numpy(old.copy())
    zeros = ms.from_numpy(np.zeros(2048, np.int32))
    t[:] = ms.take(ms.mat_choose_row_element(t, zeros) * 1.0, ms.F(ms.op.relu, t)) + \
        ms.pad(ms.F(ms.op.relu, t) * 2, 0)
    return t.numpy(), np.maximum(old, 0)[old[:, 0].astype(np.int64)] + np.maximum(old, 0) * 2


def _more_concat_target(n):
    a0, b0 = _ints((4, 4, 160, 64), 74 + n), _ints((4, 4, 160, 64), 75 + n)
    A, B = ms.from_numpy(a0.copy()), ms.from_numpy(b0.copy())
    ms.concat(A, B, 3)[:] = ms.concat(ms.pool(ms.pad(ms.F(ms.op.relu, B), 1), 3, 3, 1, 1),
                                      ms.pool(ms.pad(A * 2, 1), 3, 3, 1, 1, ms.red.sum), 3)
    want = np.concatenate([np_pool(np_pad(np.maximum(b0, 0), 1, 1), 3, 3, 1, 1, "max"),
                           np_pool(np_pad(a0 * 2, 1, 1), 3, 3, 1, 1, "sum")], 3)
    return np.concatenate([A.numpy(), B.numpy()], 3), want


def _more_flip_target_columns(n):
    Nn, C, H, W = 2, 4, 64, 64
    old = _ints((9 * C, Nn * H * W), 76 + n)
    t = ms.from_numpy(old.copy())
    img = ms.reshape(ms.slice_axis(t, 0, 0, C), (Nn, C, H, W))
    ms.flip(t, 1)[:] = ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, img), 1), 3, 3, 1)
    img0 = old[:C].reshape(Nn, C, H, W)
    return t.numpy(), np_im2col(np_pad(np.maximum(img0, 0), 1, 1), 3, 3, 1, 1, 1, 1)[:, ::-1]


MORE = {"transposed_dst_under_a_stage": _more_transposed, "window_dst": _more_window,
        "dst_at_the_top_and_under_stages": _more_top_and_stage,
        "whole_and_rows_stages_reading_dst": _more_whole_and_rows,
        "concat_target": _more_concat_target,
        "flip_target_under_a_columns_stage": _more_flip_target_columns}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_destinations_read_under_stages(name):
    for n in (1, 2):
        with _threads(n):
            got, want = MORE[name](n)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} threads={n}")


def _schedule_cases():
    """(name, build(tensor) -> expression, source shape): one per stage kind."""
    return [
        ("rows", lambda x: ms.pool(ms.pad(ms.F(ms.op.relu, x), 1), 3, 3, 1, 1),
         (4, 4, 160, 128)),
        ("columns", lambda x: ms.unpack_patch2col(ms.pad(x * 2, 1), 3, 3, 1), (2, 4, 64, 64)),
        ("whole", lambda x: ms.take(ms.from_numpy(np.arange(2048, dtype=np.float32)) * 1.0,
                                    ms.F(ms.op.relu, x)), (2048, 160)),
        ("view", lambda x: ms.flip(ms.pool(ms.pad(x * 2, 1), 3, 3, 1, 1), 0),
         (4, 4, 160, 128)),
    ]


@pytest.mark.parametrize("how", ["free_space", "release", "resize"])
@pytest.mark.parametrize("case", range(4), ids=["rows", "columns", "whole", "view"])
def test_a_source_freed_or_resized_after_building_raises_before_any_store(case, how):
    name, build, shape = _schedule_cases()[case]
    x = ms.TensorContainer(shape, init=1)
    e = build(x)
    y = ms.new_tensor(e.shape, init=-7)
    assert {"view": "whole"}.get(name, name) in _schedules(y, e)
    if how == "free_space":
        ms.free_space(x)
    elif how == "release":
        x.release()
    else:
        x.resize(shape[:-1] + (shape[-1] + 1,))
    with pytest.raises(ms.MShadowError):
        y[:] = e
    assert (y.numpy() == -7).all()


@pytest.mark.parametrize("bad", [-1, "rows"])
@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("kind", ["take", "choose"])
def test_an_out_of_range_index_expression_raises_before_any_store(kind, big, bad):
    """An index expression is a 'whole' stage: it is checked before anything is stored."""
    R = (3000 if kind == "take" else 300000) if big else 30
    cols = 100 if kind == "take" else 3
    bound = R if kind == "take" else cols
    s = _ints((R, cols), 60)
    ints = np.random.default_rng(61).integers(0, bound, R)
    ints[R * 2 // 3] = -1 if bad == -1 else bound
    S = ms.from_numpy(s)
    idx = ms.from_numpy(ints.astype(np.float32)) * 2.0 - ms.from_numpy(ints.astype(np.float32))
    src = ms.F(ms.op.relu, S) * 2
    e = ms.take(idx, src) if kind == "take" else ms.mat_choose_row_element(src, idx)
    y = ms.new_tensor(e.shape, init=-7)
    assert "whole" in _schedules(y, e)
    for n in (1, 2):
        with _threads(n), pytest.raises(IndexError):
            y[:] = e
        assert (y.numpy() == -7).all()


# ---- 3. threads ------------------------------------------------------------------------------

def test_two_different_banded_assignments_overlap_in_time():
    """Each thread records the (start, end) of many banded assignments; some interval of
    one intersects some interval of the other. The switch interval is raised so that a
    thread holding the GIL keeps it until it blocks: intervals can only interleave when an
    assignment releases the GIL (the executor does, around each band's kernels)."""
    xa = _ints((4, 8, 128, 128), 30)
    xb = _ints((4, 4, 160, 128), 31, np.float64)
    XA, XB = ms.from_numpy(xa), ms.from_numpy(xb)
    ea = ms.pool(ms.F(ms.op.relu, XA * 2), 2, 2, 2, 2)
    eb = ms.upsampling_nearest(ms.pool(ms.pad(XB - 1, 1), 3, 3, 2, 2, ms.red.sum), 2)
    wa = np_pool(np.maximum(xa * 2, 0), 2, 2, 2, 2, "max")
    wb = np_upsample(np_pool(np_pad(xb - 1, 1, 1), 3, 3, 2, 2, "sum"), 2)
    ya = ms.new_tensor(ea.shape)
    yb = ms.new_tensor(eb.shape, dtype=np.float64)
    assert "rows" in _schedules(ya, ea) and "rows" in _schedules(yb, eb)
    ya[:] = ea          # compile both plans first
    yb[:] = eb
    reps = 40
    spans = {"a": [], "b": []}
    errors = []
    barrier = threading.Barrier(2)

    def work(name, y, e):
        try:
            out = spans[name]
            barrier.wait()
            for _ in range(reps):
                t0 = time.perf_counter()
                y[:] = e
                out.append((t0, time.perf_counter()))
        except Exception as ex:       # reported below
            errors.append(repr(ex))

    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(2.0)
    try:
        with _threads(1):
            ths = [threading.Thread(target=work, args=("a", ya, ea)),
                   threading.Thread(target=work, args=("b", yb, eb))]
            for th in ths:
                th.start()
            for th in ths:
                th.join(120)
    finally:
        sys.setswitchinterval(old_switch)
    assert errors == []
    assert len(spans["a"]) == reps and len(spans["b"]) == reps
    overlaps = sum(1 for a0, a1 in spans["a"] for b0, b1 in spans["b"]
                   if a0 < b1 and b0 < a1)
    assert overlaps > 0, "no assignment of one thread overlapped one of the other"
    np.testing.assert_array_equal(ya.numpy(), wa)
    np.testing.assert_array_equal(yb.numpy(), wb)


RACE_CODE = r"""
import random, sys, threading, time
import numpy as np
import mshadow as ms
from numpy.lib.stride_tricks import sliding_window_view

ITER = int(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
SHAPE = (4, 8, 128, 128)
SENT = -7.0
xv = np.random.default_rng(1).integers(-3, 4, size=SHAPE).astype(np.float32)
wv = np.random.default_rng(2).integers(-3, 4, size=SHAPE).astype(np.float32)

def pool3(a):
    p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sliding_window_view(p, (3, 3), axis=(-2, -1)).max(axis=(-2, -1))

WANT = {"plain": pool3(np.maximum(xv * 2, 0) + wv),
        "alias": pool3(np.maximum(xv * 2, 0) + np.full(SHAPE, SENT * 0.5, np.float32))}

def container(vals, pad):
    c = ms.TensorContainer(SHAPE, init=None, pad=pad)
    a = c.numpy(); a[...] = vals; del a
    return c

stats = {}
def count(k):
    stats[k] = stats.get(k, 0) + 1

for it in range(ITER):
    ms.set_num_threads(rng.choice([1, 2]))
    X = container(xv, rng.random() < 0.5)
    W = container(wv, rng.random() < 0.5)
    Y = ms.TensorContainer(SHAPE, init=SENT, pad=rng.random() < 0.5)
    mode = rng.choice(["plain", "alias"])
    if mode == "plain":
        e = ms.pool(ms.pad(ms.F(ms.op.relu, X * 2) + W, 1), 3, 3, 1, 1)
    else:
        e = ms.pool(ms.pad(ms.F(ms.op.relu, X * 2) + Y * 0.5, 1), 3, 3, 1, 1)
    hold = rng.random() < 0.3          # a numpy view of Y pins it: a racer gets BufferError
    yview = Y.numpy() if hold else None
    target = rng.choice(["X", "W", "Y"])
    op = rng.choice(["free_space", "release", "resize_big", "resize_small"])
    delay = rng.uniform(0.0, 0.02)       # an assignment takes about 5-20 ms
    lead = rng.uniform(0.0, 0.003) if rng.random() < 0.3 else 0.0   # the racer may win
    racer = {}

    def race():
        time.sleep(delay)
        t = {"X": X, "W": W, "Y": Y}[target]
        try:
            if op == "free_space":
                ms.free_space(t)
            elif op == "release":
                t.release()
            elif op == "resize_big":
                t.resize((4, 8, 130, 140))
            else:
                t.resize((4, 8, 64, 128))
            racer["done"] = True
        except BufferError:
            racer["err"] = "BufferError"
        except ms.MShadowError as ex:
            racer["err"] = type(ex).__name__

    action = rng.choice(["assign", "assign", "assign", "sum", "sumall_except_dim"])
    th = threading.Thread(target=race)
    th.start()
    if lead:
        time.sleep(lead)
    try:
        if action == "sum":
            got = float(ms.sum(e))
            outcome = "done" if abs(got - WANT[mode].sum(dtype=np.float64)) <= 1e-3 else "WRONG"
        elif action == "sumall_except_dim":
            o = ms.new_tensor((8,))
            o[:] = ms.sumall_except_dim(e, 1)
            good = np.allclose(o.numpy(), WANT[mode].astype(np.float64).sum((0, 2, 3)), rtol=1e-6)
            outcome = "done" if good else "WRONG"
        else:
            Y[:] = e
            outcome = "done"
    except ms.MShadowError as ex:
        outcome = type(ex).__name__
    th.join()
    count(f"{action}:{outcome}/{op}/{target}/{racer.get('err', 'ok')}")
    if outcome == "WRONG":
        print("FAIL: wrong reduction", it, mode, action, target, op)
        sys.exit(5)
    if action != "assign":
        continue
    if target == "Y" and racer.get("done"):
        continue                      # Y's memory is gone or new: nothing left to read
    vals = yview if hold else Y.numpy()
    sent = bool((vals == SENT).all())
    right = bool((vals == WANT[mode]).all())
    if outcome == "done" and not right:
        print("FAIL: assignment completed with wrong values", it, mode, target, op,
              int((vals != WANT[mode]).sum()), "wrong of", vals.size)
        sys.exit(3)
    if not (sent or right):
        print("FAIL: destination half-written", it, mode, target, op, outcome,
              int((vals == SENT).sum()), "sentinel of", vals.size)
        sys.exit(4)
    del vals, yview
print(sorted(stats.items()))
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_free_resize_release_racing_a_banded_assignment(seed):
    r = subprocess.run([sys.executable, "-c", RACE_CODE, "60", str(seed)], cwd=PKG_ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def test_one_expression_shared_by_three_threads():
    x = _ints((4, 8, 128, 128), 40)
    X = ms.from_numpy(x)
    e = ms.pool(ms.F(ms.op.relu, X * 2), 2, 2, 2, 2)
    want = np_pool(np.maximum(x * 2, 0), 2, 2, 2, 2, "max").astype(np.float64)
    errors = []
    barrier = threading.Barrier(3)
    reps = 6

    def assign():
        y = ms.new_tensor(e.shape, init=7)
        barrier.wait()
        for _ in range(reps):
            y[:] = e
            if not np.array_equal(y.numpy(), want):
                errors.append("y[:] = e: wrong values")
            y[:] = 7

    def total():
        barrier.wait()
        for _ in range(reps):
            s = float(ms.sum(e))
            if not np.isclose(s, want.sum(), rtol=1e-5):
                errors.append(f"ms.sum(e) = {s}, want {want.sum()}")

    def per_channel():
        o = ms.new_tensor((8,), init=7)
        barrier.wait()
        for _ in range(reps):
            o[:] = ms.sumall_except_dim(e, 1)
            if not np.allclose(o.numpy(), want.sum((0, 2, 3)), rtol=1e-5):
                errors.append(f"sumall_except_dim: {o.numpy()}")

    ths = [threading.Thread(target=f) for f in (assign, total, per_channel)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    assert errors == []


def _schedule_assignments():
    """(expression, numpy want, schedule) for a 'rows', a 'columns' and a 'whole' banded
    assignment, and a 'scatter' one."""
    x = _ints((4, 8, 128, 128), 41)
    X = ms.from_numpy(x)
    m = _ints((3000, 100), 42)
    M = ms.from_numpy(m)
    ints = np.random.default_rng(43).integers(0, 3000, 3000)
    idx = ms.from_numpy(ints.astype(np.float32)) * 1.0
    xs = x[:2, :4, :64, :64]
    XS = ms.from_numpy(np.ascontiguousarray(xs))
    return [
        (ms.pool(ms.pad(ms.F(ms.op.relu, X * 2), 1), 3, 3, 2, 2, ms.red.sum),
         np_pool(np_pad(np.maximum(x * 2, 0), 1, 1), 3, 3, 2, 2, "sum"), "rows"),
        (ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, XS - 1), 1), 3, 3, 1),
         np_im2col(np_pad(np.maximum(xs - 1, 0), 1, 1), 3, 3, 1, 1, 1, 1), "columns"),
        (ms.take(idx, ms.F(ms.op.relu, M) * 2), np.maximum(m, 0)[ints] * 2, "whole"),
        (ms.take_grad(idx * 0.1, ms.F(ms.op.relu, M) * 2, 300),   # integer sums: exact
         _np_take_grad((ints.astype(np.float32) * np.float32(0.1)).astype(np.int64),
                       np.maximum(m, 0) * 2, 300).astype(np.float32), "scatter"),
    ]


def test_threads_running_every_schedule_at_once_get_their_values():
    """Three threads, each cycling through a 'rows', a 'columns', a 'whole' and a
    'scatter' assignment (a different one from the others at any moment): every thread's
    scratch is its own."""
    cases = _schedule_assignments()
    for e, _, schedule in cases:
        assert schedule in _schedules(ms.new_tensor(e.shape), e)
    errors = []
    barrier = threading.Barrier(3)

    def work(k):
        ys = [ms.new_tensor(e.shape) for e, _, _ in cases]
        barrier.wait()
        for r in range(8):
            j = (k + r) % len(cases)
            e, want, schedule = cases[j]
            ys[j][:] = -7
            ys[j][:] = e
            if not np.array_equal(ys[j].numpy(), want):
                errors.append(f"thread {k}: {schedule} wrong")

    with _threads(2):
        ths = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(120)
    assert errors == []


# ---- 4. memory -------------------------------------------------------------------------------

def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_building_expressions_over_a_big_source_allocates_nothing():
    x = ms.new_tensor((50, 1000, 1000), init=None)        # 200 MB, pages never touched
    try:
        x2 = ms.reshape(x, (50000, 1000))
        idx = ms.from_numpy(np.arange(100, dtype=np.float32))

        def builders():
            r = ms.F(ms.op.relu, x * 2)
            return [
                lambda: ms.pool(ms.F(ms.op.relu, x * 2), 2, 2, 2, 2),
                lambda: ms.pad(ms.F(ms.op.relu, x * 2), 1),
                lambda: ms.concat(ms.F(ms.op.relu, x * 2), x + 1, 0),
                lambda: ms.take(idx * 1.0, ms.F(ms.op.relu, x2 * 2)),
                lambda: ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, x * 2), 1), 3, 3, 1),
                lambda: ms.upsampling_nearest(ms.F(ms.op.relu, x * 2), 2),
                lambda: ms.chpool(r, 3, ms.red.sum),
                lambda: ms.flip(ms.pool(r, 3, 3, 1, 1), 0),
            ]
        for b in builders():                    # warm up: first use of each constructor
            b()
        gc.collect()
        before_cache = ms.plan_cache_info().currsize
        before = _rss()
        kept = []
        fs = builders()
        for k in range(20):
            kept.append(fs[k % len(fs)]())
        after = _rss()
        assert after - before < 1 << 20, f"building grew RSS by {(after - before) >> 10} KiB"
        assert ms.plan_cache_info().currsize == before_cache
        assert all(k.shape for k in kept)
        del kept
    finally:
        ms.free_space(x)


def test_repeated_banded_assignments_keep_their_scratch_bounded():
    """The stages' scratch goes back to the thread's arena: running the same banded
    assignments again and again does not grow RSS."""
    cases = _schedule_assignments()
    ys = [ms.new_tensor(e.shape) for e, _, _ in cases]
    for _ in range(3):                     # warm up: plans, arena, allocator
        for y, (e, _, _) in zip(ys, cases):
            y[:] = e
    gc.collect()
    before = _rss()
    for _ in range(15):
        for y, (e, _, _) in zip(ys, cases):
            y[:] = e
    gc.collect()
    grown = _rss() - before
    assert grown < 16 << 20, f"45 banded assignments grew RSS by {grown >> 20} MiB"
    for y, (_, want, _) in zip(ys, cases):
        np.testing.assert_array_equal(y.numpy(), want)


# ---- 5. structure ----------------------------------------------------------------------------

def test_disassembly_names_the_stage_its_schedule_and_chain():
    x = ms.from_numpy(_ints((4, 8, 32, 32), 50))
    y = ms.new_tensor((4, 8, 16, 16))
    text = ms.plan_for(y, ms.pool(ms.F(ms.op.relu, x * 2), 2, 2, 2, 2)).disassemble()
    lines = text.splitlines()
    assert any(l.startswith("stage 0: rows") for l in lines), text
    chain = [l for l in lines if "chain_f32" in l]
    assert chain and "mul(_, s0)" in chain[0] and "relu(_)" in chain[0], text
    assert any("g_pool_f32" in l for l in lines), text


def test_structures_that_differ_get_their_own_keys_and_plans():
    x = _ints((4, 8, 32, 32), 51)
    X = ms.from_numpy(x)
    a = ms.pool(ms.F(ms.op.relu, X * 2), 2, 2, 2, 2)
    b = ms.pool(ms.F(ms.op.exp, X), 2, 2, 2, 2)
    c = ms.pool(X, 2, 2, 2, 2)
    assert len({a.key, b.key, c.key}) == 3
    ms.clear_plan_cache()
    y = ms.new_tensor(a.shape)
    sizes = [ms.plan_cache_info().currsize]
    for e in (a, b, c):
        y[:] = e
        sizes.append(ms.plan_cache_info().currsize)
    assert sizes == [0, 1, 2, 3]
    # the same structure over other tensors (and other scalars) reuses its plan
    X2 = ms.from_numpy(_ints((4, 8, 32, 32), 52))
    y[:] = ms.pool(ms.F(ms.op.relu, X2 * 3), 2, 2, 2, 2)
    assert ms.plan_cache_info().currsize == 3
    np.testing.assert_array_equal(y.numpy(), np_pool(np.maximum(
        _ints((4, 8, 32, 32), 52) * 3, 0), 2, 2, 2, 2, "max"))
    y[:] = c
    np.testing.assert_array_equal(y.numpy(), np_pool(x, 2, 2, 2, 2, "max"))


# ---- pins: a run gives back every pin it took --------------------------------------------

@pytest.mark.parametrize("nsrc", [2, 12, 30])   # run_plan's stack path; more pins than
def test_every_pin_a_run_takes_is_given_back(nsrc):   # fit inline; a staged run
    """A pin holds its allocation (and what that borrows: here a numpy array) until the
    run gives it back; one kept would keep the array alive after every other reference
    is gone."""
    n = 1000
    arrays = [np.full(n, float(k), np.float32) for k in range(nsrc)]
    alive = [weakref.ref(a) for a in arrays]
    srcs = [ms.from_numpy(a) for a in arrays]
    y = ms.new_tensor((n,))
    e = srcs[0] * 1.0
    for t in srcs[1:]:
        e = e + t
    if nsrc == 30:                                  # under a stage: a gather's source
        e = ms.reshape(ms.pad(ms.reshape(e, (1, n)), 0, 0), (n,))
        assert "stage 0" in ms.plan_for(y, e).disassemble()
    y[:] = e
    assert y.numpy()[[0, -1]].tolist() == [sum(range(nsrc))] * 2
    del arrays, srcs, e, t
    gc.collect()
    assert [r() for r in alive] == [None] * nsrc


# ---- take_grad of an expression: an accumulating scatter stage -----------------------------

def _np_take_grad(index, src, K, acc=np.float64):
    """mshadow's TakeGradExp: row k sums, in increasing i, src[i] with index[i] == k."""
    out = np.zeros((K,) + src.shape[1:], acc)
    for i, k in enumerate(index.astype(np.int64)):
        out[k] += src[i]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.uint8,
                                   np.int8, np.int64])
def test_take_grad_of_an_expression_scatters_bands_with_the_gather_kernels_bits(dtype):
    rng = np.random.default_rng(5)
    N, D, K = 70000, 5, 9          # several bands of source rows (2**18 elements a band)
    g = ms.from_numpy((rng.standard_normal((N, D)) * 3).astype(dtype))
    idx = ms.from_numpy(rng.integers(0, K, N).astype(np.int32))
    e = ms.take_grad(idx, g * 2, K)
    out = ms.new_tensor((K, D), dtype=dtype)
    out[:] = e
    assert "scatter, into L0" in ms.plan_for(out, e).disassemble()
    tmp = ms.new_tensor((N, D), dtype=dtype)      # the gather kernel on the materialised source
    tmp[:] = g * 2
    ref = ms.new_tensor((K, D), dtype=dtype)
    ref[:] = ms.take_grad(idx, tmp, K)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    if dtype in (np.float64, np.int64):
        np.testing.assert_array_equal(out.numpy(), _np_take_grad(idx.numpy(), tmp.numpy(), K,
                                                                  dtype))


def test_take_grad_scatter_nested_with_savers_and_an_index_expression():
    rng = np.random.default_rng(6)
    N, D, K = 300, 4, 7
    g = ms.from_numpy(rng.standard_normal((N, D)).astype(np.float64))
    i = ms.from_numpy(rng.integers(0, K, N).astype(np.float64))
    want = _np_take_grad(i.numpy(), np.maximum(g.numpy(), 0), K)
    out = ms.from_numpy(np.ones((K, D)))
    out += ms.take_grad(i * 1.0, ms.F(ms.op.relu, g), K) * 3 - 1   # index a whole stage
    np.testing.assert_allclose(out.numpy(), 1 + want * 3 - 1, rtol=1e-12)
    out[:] = ms.take_grad(i, g + 0, K).T.T + ms.take_grad(i, g - 0, K)
    np.testing.assert_allclose(out.numpy(), 2 * _np_take_grad(i.numpy(), g.numpy(), K),
                               rtol=1e-12)


def test_take_grad_scatter_reading_its_destination_goes_through_a_temporary():
    rng = np.random.default_rng(7)
    w = ms.from_numpy(rng.standard_normal((8, 3)).astype(np.float64))
    i = ms.from_numpy(np.array([7, 0, 7, 3, 3, 3, 1, 0], np.int64))
    want = _np_take_grad(i.numpy(), w.numpy() * 2, 8)
    w[:] = ms.take_grad(i, w * 2, 8)          # the source reads every row of w
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-12)


def test_take_grad_scatter_out_of_range_stores_nothing_and_empty_shapes():
    g = ms.from_numpy(np.ones((5, 3), np.float32))
    out = ms.from_numpy(np.full((4, 3), 9, np.float32))
    with pytest.raises(IndexError, match=r"\[0, 4\)"):
        out[:] = ms.take_grad(ms.from_numpy(np.array([0, 1, 4, 2, 3], np.int32)), g * 1, 4)
    assert (out.numpy() == 9).all()
    with pytest.raises(IndexError):                    # the index is an expression
        out[:] = ms.take_grad(ms.from_numpy(np.array([0, 1, 2, 3, 5], np.float32)) * 1, g * 1,
                              4)
    assert (out.numpy() == 9).all()
    out[:] = ms.take_grad(ms.from_numpy(np.zeros(0, np.int32)),
                          ms.from_numpy(np.zeros((0, 3), np.float32)) * 2, 4)
    assert (out.numpy() == 0).all()
    empty = ms.new_tensor((0, 3))
    with pytest.raises(IndexError):                    # no row to add to: every index is out
        empty[:] = ms.take_grad(ms.from_numpy(np.zeros(5, np.int32)), g * 1, 0)


def test_take_grad_of_a_tensor_or_view_is_scattered_too():
    """A source read in place is copied a band at a time and scattered: the gather kernel
    scanned the whole index for every output row (quadratic)."""
    rng = np.random.default_rng(8)
    g = ms.from_numpy(rng.standard_normal((40, 6)).astype(np.float32))
    i = ms.from_numpy(rng.integers(0, 5, 40).astype(np.int64))
    out = ms.new_tensor((5, 6))
    for src, ref in ((g, g.numpy()), (ms.flip(g, 0), g.numpy()[::-1])):
        e = ms.take_grad(i, src, 5)
        assert "stage 0: scatter" in ms.plan_for(out, e).disassemble()
        out[:] = e
        np.testing.assert_allclose(out.numpy(), _np_take_grad(i.numpy(), ref, 5), rtol=1e-5)


# ---- small runs: every stage whole, bound on the stack --------------------------------------

def _small_cases(x, a, b, idx):
    """(expression, numpy value) pairs whose stages each hold at most SMALL_STAGE (4096)
    elements: one stage, two at one level, three levels, a view of a stage, an index read
    in place under a stage's consumer."""
    X, A, B, I = (t.numpy().astype(np.float64) for t in (x, a, b, idx))
    relu = lambda v: np.maximum(v, 0)
    return [
        (ms.pool(ms.F(ms.op.relu, x * 2), 2, 2, 2, 2), np_pool(relu(X * 2), 2, 2, 2, 2, "max")),
        (ms.pool(ms.pad(ms.pool(x + 1, 2, 2, 2, 2), 1), 3, 3, 1, 1) * 0.5,
         np_pool(np_pad(np_pool(X + 1, 2, 2, 2, 2, "max"), 1, 1), 3, 3, 1, 1, "max") * 0.5),
        (ms.concat(a + 1, b * b, 0), np.concatenate([A + 1, B * B], 0)),
        (ms.take(idx, ms.pad(a - b, 1, 0)), np_pad(A - B, 1, 0)[I.astype(int)]),
        (ms.slice_axis(ms.pad(a * 3, 1), 0, 1, 4) + 1, np_pad(A * 3, 1, 1)[1:4] + 1),
    ]


def test_small_stages_run_on_the_stack_with_numpys_values():
    """Stages this small are evaluated whole into scratch of the run's own (_small_run):
    the thread's arena is never used. The values are numpy's."""
    x = ms.from_numpy(_ints((2, 3, 8, 8), 60))
    a = ms.from_numpy(_ints((6, 10), 61))
    b = ms.from_numpy(_ints((6, 10), 62))
    idx = ms.from_numpy(np.array([5, 0, 2, 2, 1], np.float32))
    ms._core.release_scratch()
    for e, want in _small_cases(x, a, b, idx):
        assert "stage 0" in ms.plan_for(ms.new_tensor(e.shape), e).disassemble()
        for _ in range(2):                          # first run compiles, second is cached
            y = ms.new_tensor(e.shape)
            y[:] = e
            np.testing.assert_array_equal(y.numpy(), want.astype(np.float32))
    assert ms._core.scratch_held() == []


def test_a_stage_above_the_small_size_runs_through_the_arena():
    """The boundary: a stage of 4,097 elements takes the banded path and leaves its scratch
    in the arena (the values are the same)."""
    x = ms.from_numpy(_ints((1, 1, 17, 241), 63))     # 4,097 elements
    ms._core.release_scratch()
    y = ms.new_tensor((1, 1, 8, 120))
    y[:] = ms.pool(x * 2, 2, 2, 2, 2)
    np.testing.assert_array_equal(y.numpy(), np_pool(x.numpy() * 2, 2, 2, 2, 2, "max"))
    assert ms._core.scratch_held() != []
    ms._core.release_scratch()


def test_small_run_reading_its_destination_goes_through_a_temporary():
    """The destination read under a small stage: nothing is stored before every stage has
    read it (the run is redone through a temporary), for a tensor and a second wrapper."""
    for foreign in (False, True):
        old = _ints((6, 6), 64)
        t = ms.from_numpy(old.copy())
        src = ms.from_numpy(t.numpy()) if foreign else t
        t[:] = ms.pad(ms.slice_axis(src * 2, 0, 1, 5), 1, 0) + ms.flip(src, 0) * 0
        want = np_pad(old[1:5] * 2, 1, 0)
        np.testing.assert_array_equal(t.numpy(), want)


def test_small_run_deeper_than_the_stack_limit_falls_back():
    """Eight levels of stages (the stack holds six): the general executor, same values."""
    x = ms.from_numpy(_ints((1, 1, 9, 9), 65))
    e, want = x * 1, x.numpy().astype(np.float64)
    for _ in range(8):
        e = ms.pad(e, 0, 0) + 1                    # a gather over an expression each level
        want = want + 1
    y = ms.new_tensor((1, 1, 9, 9))
    y[:] = e
    np.testing.assert_array_equal(y.numpy(), want)
