"""Random trees of NESTED extensions checked against independent numpy oracles.

Every extension node here takes an expression as its source, two and three extension levels
deep: views (broadcast*, repmat, flip, mirror, swapaxis, transpose_axes, crop, slice_axis,
reshape), gathers (pad, take, mat_choose_row_element, upsampling_nearest, concat), windows
(pool with red.maximum / red.sum, unpack_patch2col, pack_col2patch, chpool), implicit_dot,
``.T`` of expressions, tcast and element-wise operators between them; reductions
(ms.sum, sumall_except_dim, sum_rows, reduce_with_axis, reduce_keepdim) take such trees as
sources. Every saver runs, and the destination is often a leaf of its own tree (the tensor,
a second wrapper of its memory, its ``.T``, an overlapping neighbour slice): the result must
be what numpy computes from the OLD values, and nothing outside the destination may change.

The oracle is this file's own numpy (pool, im2col, col2im, chpool, pad, take, ... written
from docs/spatial.md, docs/extensions.md and the C++ reference; nothing calls mshadow to
compute an expected value), evaluated in float64 for float trees and in int32 (wrapping as C
does) for int32 trees. Tolerances are propagated, not guessed: every node carries a bound on
its absolute error (sup norm). A tree whose values stay integer-valued and small (views,
copies, exact-mode trees, int32) gets the bound 0 and is compared bit for bit; the others
within the bound they earn (float32 ~ 1e-6 relative for simple trees).

Each tree is one seed: a failure message starts with the call that rebuilds that tree
alone (``_run_tree(seed, dtype, saver, force_alias, focus)`` or
``_run_reduction(seed, dtype, kind, saver)``), then prints the tree.
"""
import sys

import numpy as np

from references import (EPS, F32, F64, I32, MANT, _max, _out_extent, np_col2im,  # noqa: F401
                        np_im2col, np_pad, np_upsample, Node)
import pytest

import mshadow as ms

TRANS_ULP = 4    # exp/tanh: at most 2 ulp measured (docs/accuracy.md); sigmoid gets twice
SAVERS = ["saveto", "plusto", "minusto", "multo", "divto"]
MAX_ELEMS = 1500                           # a source larger than this is not generated

STATS = {"trees": 0, "aliased": 0, "exact": 0, "kinds": set(), "reductions": 0,
         "bounds": {F32: [], F64: []}}    # 2 * err / max(1, |want|) of the inexact checks


# ---- numpy oracles (no mshadow) -------------------------------------------------------------

def np_pool(a, ky, kx, sy, sx, red, oh, ow):
    """pool<Reducer>: windows [o*s, min(o*s + k, H)) of the last two axes (clipped)."""
    H, W = a.shape[-2:]
    out = np.empty(a.shape[:-2] + (oh, ow), a.dtype)
    for i in range(oh):
        for j in range(ow):
            win = a[..., i * sy:min(i * sy + ky, H), j * sx:min(j * sx + kx, W)]
            assert win.size, "the generator never makes a window wholly past the border"
            if red == "sum":
                out[..., i, j] = win.sum(axis=(-2, -1), dtype=a.dtype)
            else:
                out[..., i, j] = getattr(win, "max" if red == "maximum" else "min")(
                    axis=(-2, -1))
    return out


def np_chpool(a, nsize, red, stride, pad):
    """chpool: output channel c reduces channels [c*stride - pad, +nsize) clipped to
    [0, min(oC, C)) (quirk 11: the output channel count clips too)."""
    C = a.shape[-3]
    oC = (C - nsize + 2 * pad + 1) // stride
    out = np.empty(a.shape[:-3] + (oC,) + a.shape[-2:], a.dtype)
    for c in range(oC):
        lo, hi = max(c * stride - pad, 0), min(c * stride - pad + nsize, oC, C)
        assert hi > lo, "the generator never makes an empty channel window"
        win = a[..., lo:hi, :, :]
        if red == "sum":
            out[..., c, :, :] = win.sum(axis=-3, dtype=a.dtype)
        else:
            out[..., c, :, :] = win.max(axis=-3)
    return out


def np_trunc_div(a, d):
    """C's integer division (rounds toward zero) by a nonzero divisor."""
    return (np.sign(a) * np.sign(d) * (np.abs(a) // np.abs(d))).astype(a.dtype)


def c_index(v):
    """An index as the gather kernels read it: floats truncated toward zero (C's cast)."""
    return np.trunc(v).astype(np.int64) if v.dtype.kind == "f" else v.astype(np.int64)


# ---- error bounds ---------------------------------------------------------------------------

def _intlike(v, dt):
    return bool(np.all(v == np.round(v))) and _max(v) <= 2.0 ** MANT[dt]


def rnd(v, dt, exact_inputs):
    """The rounding error of storing the exact result ``v`` as ``dt``: none for integer
    dtypes, none for small integer values computed from exact operands."""
    if dt.kind != "f":
        return 0.0
    if exact_inputs and _intlike(v, dt):
        return 0.0
    return EPS[dt] * _max(v)


def div_err(a, d, v):
    """The error of a / d for a divisor d >= 1 (computed and exact): element by element,
    |a/d - a'/d'| <= Ea/|d'| + |a| Ed / (|d| |d'|) with |d'| >= max(1, |d| - Ed)."""
    dd = np.maximum(1.0, np.abs(d.v) - d.err)
    bound = a.err / dd + np.abs(a.v) * d.err / (np.abs(d.v) * dd)
    return _max(bound) + rnd(v, d.dt, False)


def sum_err(terms_err, nterms, abs_sum, dt, exact_inputs, v):
    """A sum of ``nterms`` terms each within ``terms_err``: any summation order is within
    nterms * eps * sum|terms| of the exact sum (exact for small integers)."""
    if dt.kind != "f":
        return 0.0
    if exact_inputs and _intlike(v, dt) and abs_sum <= 2.0 ** MANT[dt]:
        return 0.0
    return nterms * terms_err + nterms * EPS[dt] * abs_sum


def _oracle(values, dt):
    return values.astype(np.float64) if dt.kind == "f" else values.astype(dt)


@ms.op.define
def _maxoftwo(a, b):
    """mshadow's guide/defop.cpp operator, traced and compiled inline like a built-in."""
    return ms.op.where(a > b, a, b)


# ---- the generator ----------------------------------------------------------------------------

class Gen:
    """Builds random nested trees top-down: each node is asked for an output shape and
    picks an extension whose source shape produces it, then asks for its sources."""

    def __init__(self, seed, dt, exact, alias_p):
        self.rng = np.random.RandomState(seed)
        self.dt = dt
        self.exact = exact or dt.kind != "f"   # integer-valued leaves, no div/transcendentals
        self.alias_p = alias_p
        self.dst = None                        # (tensor, old values, extra alias leaves)
        self.keep = []                         # numpy buffers the tensors view
        self.kinds = set()
        self.dtypes = {dt}                     # every dtype a node of the tree computes in
        self.focus = None                      # the kind of the outermost extension, if set

    # -- helpers
    def choice(self, seq):
        return seq[self.rng.randint(len(seq))]

    def values(self, shape, dt, exact=None):
        exact = self.exact if exact is None else exact
        if exact or dt.kind != "f":
            return self.rng.randint(-4, 5, size=shape).astype(dt)
        return self.rng.uniform(-2, 2, size=shape).astype(dt)

    def scalar(self, dt):
        if dt.kind != "f":
            return self.choice([2, -1, 3, 1])
        if self.exact:
            return self.choice([2.0, -1.0, 3.0, 1.0])
        return self.choice([0.5, 2.0, -1.5, 0.25, 3.0])   # dyadic: exact in every dtype

    # -- leaves
    def leaf(self, shape, dt):
        shape = tuple(shape)
        if self.dst is not None and self.rng.rand() < self.alias_p:
            node = self.alias_leaf(shape, dt)
            if node is not None:
                return node
        vals = self.values(shape, dt)
        layout = self.rng.randint(4)
        if layout == 1:                          # pitched rows
            t = ms.new_tensor(shape, dtype=dt, pad=True)
            t.numpy()[...] = vals
            desc = "P"
        elif layout == 2:                        # a window of a wider buffer: row stride > cols
            big = np.zeros(shape[:-1] + (shape[-1] + 3,), dt)
            big[..., 1:1 + shape[-1]] = vals
            self.keep.append(big)
            t = ms.from_numpy(big[..., 1:1 + shape[-1]])
            desc = "W"
        elif layout == 3 and len(shape) == 2:    # a transposed tensor
            base = np.ascontiguousarray(vals.T)
            self.keep.append(base)
            t = ms.from_numpy(base).T
            desc = "Tt"
        else:
            base = np.ascontiguousarray(vals)
            self.keep.append(base)
            t = ms.from_numpy(base)
            desc = "t"
        return Node(t, _oracle(vals, dt), 0.0, f"{desc}{list(shape)}", dt)

    def alias_leaf(self, shape, dt):
        """The destination (or memory of it) as a leaf of ``shape``, if one fits."""
        dst, old, extra = self.dst
        if dt != dst.dtype:
            return None
        opts = []
        if shape == tuple(dst.shape):
            opts += [("dst", dst, old), ("dst2", ms.from_numpy(dst.numpy()), old)]
            opts += [(name, t, vals) for name, t, vals in extra]
        if len(shape) == 2 and shape == tuple(dst.shape)[::-1]:
            opts.append(("dst.T", dst.T, old.T))
        if not opts:
            return None
        name, t, vals = self.choice(opts)
        return Node(t, _oracle(vals, dt), 0.0, name, dt)

    def mix(self, shape, dt):
        """A depth-0 source: a leaf, or a small element-wise expression of leaves."""
        k = self.rng.randint(6)
        a = self.leaf(shape, dt)
        if k <= 1:
            return a
        if k == 2:
            return self.unary(a)
        if k == 3:
            return self.binary(a, self.scalar_node(dt))
        return self.binary(a, self.leaf(shape, dt))

    def scalar_node(self, dt):
        s = self.scalar(dt)
        v = np.asarray(s, dtype=np.float64 if dt.kind == "f" else dt)
        return Node(s, v, 0.0, repr(s), dt)

    # -- element-wise
    def binary(self, a, b, name=None):
        dt = a.dt
        name = name or self.choice(["plus", "minus", "mul", "maximum", "minimum", "maxoftwo"] +
                                   ([] if self.exact and dt.kind == "f" else ["div"]))
        self.kinds.add(name)
        exact = a.err == 0 and b.err == 0
        if name == "div":
            d = self.absplus1(b)
            if dt.kind == "f":
                v = a.v / d.v
                err = div_err(a, d, v)
            else:
                v = np_trunc_div(a.v, d.v)
                err = 0.0
            return Node(a.e / d.e, v, err, f"({a.desc} / {d.desc})", dt)
        with np.errstate(over="ignore"):
            if name == "plus":
                e, v = a.e + b.e, a.v + b.v
                err = a.err + b.err + rnd(v, dt, exact)
            elif name == "minus":
                e, v = a.e - b.e, a.v - b.v
                err = a.err + b.err + rnd(v, dt, exact)
            elif name == "mul":
                e, v = a.e * b.e, a.v * b.v
                err = a.err * (b.m + b.err) + b.err * a.m + rnd(v, dt, exact)
            else:
                op = {"maximum": ms.op.maximum, "minimum": ms.op.minimum,
                      "maxoftwo": _maxoftwo}[name]
                e = ms.F(op, a.e, b.e)
                v = (np.minimum if name == "minimum" else np.maximum)(a.v, b.v)
                err = max(a.err, b.err)
        sym = {"plus": "+", "minus": "-", "mul": "*"}.get(name)
        desc = f"({a.desc} {sym} {b.desc})" if sym else f"{name}({a.desc}, {b.desc})"
        v = np.asarray(v, dtype=np.float64 if dt.kind == "f" else dt)
        return Node(e, v, err, desc, dt)

    def absplus1(self, b):
        """|b| + 1 (>= 1): the divisor of every division, so no quotient blows up."""
        v = np.abs(b.v) + (1 if b.dt.kind != "f" else 1.0)
        if b.dt.kind != "f":
            v = v.astype(b.dt)
        return Node(ms.F(ms.op.abs, b.e) + 1, v, b.err + rnd(v, b.dt, b.err == 0),
                    f"(|{b.desc}|+1)", b.dt)

    def unary(self, a):
        dt = a.dt
        names = ["relu", "abs", "neg"]
        if dt.kind == "f" and not self.exact:
            names += ["sigmoid", "exp", "tanh"]
        name = self.choice(names)
        self.kinds.add(name)
        eps = EPS.get(dt, 0.0)
        if name == "relu":
            return Node(ms.F(ms.op.relu, a.e), np.maximum(a.v, 0).astype(a.v.dtype), a.err,
                        f"relu({a.desc})", dt)
        if name == "abs":
            return Node(ms.F(ms.op.abs, a.e), np.abs(a.v), a.err, f"abs({a.desc})", dt)
        if name == "neg":
            return Node(-a.e, -a.v, a.err, f"-{a.desc}", dt)
        if name == "sigmoid":
            v = 1.0 / (1.0 + np.exp(-a.v))
            return Node(ms.F(ms.op.sigmoid, a.e), v, a.err / 4 + 2 * TRANS_ULP * eps * _max(v),
                        f"sigmoid({a.desc})", dt)
        if name == "tanh":
            v = np.tanh(a.v)
            return Node(ms.F(ms.op.tanh, a.e), v, a.err + TRANS_ULP * eps * _max(v),
                        f"tanh({a.desc})", dt)
        # exp of the argument clipped to [-3, 3], so nothing overflows at any depth
        c = np.clip(a.v, -3.0, 3.0)
        v = np.exp(c)
        return Node(ms.F(ms.op.exp, ms.F(ms.op.clip, a.e, -3.0, 3.0)), v,
                    _max(v) * np.expm1(a.err) * 1.01 + TRANS_ULP * eps * _max(v),
                    f"exp(clip({a.desc}))", dt)

    def wrap(self, n):
        """Element-wise operators around an extension node (sometimes none)."""
        k = self.rng.randint(5)
        if k == 0:
            return n
        if k == 1:
            return self.unary(n)
        if k == 2:
            return self.binary(n, self.scalar_node(n.dt))
        other = self.mix(n.shape, n.dt)
        return self.binary(n, other) if self.rng.rand() < 0.5 else self.binary(other, n)

    # -- the tree
    def gen(self, shape, dt, depth):
        """An expression of ``shape`` and ``dt`` with ``depth`` levels of extensions."""
        shape = tuple(int(s) for s in shape)
        self.dtypes.add(dt)
        if depth == 0:
            return self.mix(shape, dt)
        kinds = list(KINDS)
        self.rng.shuffle(kinds)
        focus, self.focus = self.focus, None
        for kind in [focus] if focus else kinds:
            n = KINDS[kind](self, shape, dt, depth)
            if n is not None:
                assert n.shape == shape, (kind, n.shape, shape)
                self.kinds.add(kind)
                return self.wrap(n)
        if focus:
            return None                        # the caller tries another shape
        raise AssertionError(f"no extension produces {shape}")

    def sized(self, shape):
        return int(np.prod(shape, dtype=np.int64)) <= MAX_ELEMS and all(s >= 1 for s in shape)


# ---- the extension kinds: out shape -> source shapes -> node, or None if none fits -----------

def k_broadcast(g, out, dt, depth):
    d = g.rng.randint(len(out))
    s = g.gen((out[d],), dt, depth - 1)
    return Node(ms.broadcast(s.e, out, d), np.broadcast_to(
        s.v.reshape([out[d] if k == d else 1 for k in range(len(out))]), out).copy(),
        s.err, f"broadcast({s.desc}, {out}, {d})", dt)


def k_broadcast_scalar(g, out, dt, depth):
    s = g.gen((1,), dt, depth - 1)
    return Node(ms.broadcast_scalar(s.e, out), np.broadcast_to(s.v.reshape(()), out).copy(),
                s.err, f"broadcast_scalar({s.desc}, {out})", dt)


def k_repmat(g, out, dt, depth):
    if len(out) != 2:
        return None
    s = g.gen((out[1],), dt, depth - 1)
    return Node(ms.repmat(s.e, out[0]), np.tile(s.v, (out[0], 1)), s.err,
                f"repmat({s.desc}, {out[0]})", dt)


def k_broadcast_with_axis(g, out, dt, depth):
    if len(out) < 2:
        return None
    p = g.rng.randint(len(out))                 # the inserted axis
    src = out[:p] + out[p + 1:]
    s = g.gen(src, dt, depth - 1)
    return Node(ms.broadcast_with_axis(s.e, p - 1, out[p]),
                np.broadcast_to(np.expand_dims(s.v, p), out).copy(), s.err,
                f"broadcast_with_axis({s.desc}, {p - 1}, {out[p]})", dt)


def k_broadcast_keepdim(g, out, dt, depth):
    a = g.rng.randint(len(out))
    src = out[:a] + (1,) + out[a + 1:]
    s = g.gen(src, dt, depth - 1)
    return Node(ms.broadcast_keepdim(s.e, a, out[a]), np.broadcast_to(s.v, out).copy(), s.err,
                f"broadcast_keepdim({s.desc}, {a}, {out[a]})", dt)


def k_broadcast_to(g, out, dt, depth):
    src = tuple(1 if g.rng.rand() < 0.4 else n for n in out)
    s = g.gen(src, dt, depth - 1)
    return Node(ms.broadcast_to(s.e, out), np.broadcast_to(s.v, out).copy(), s.err,
                f"broadcast_to({s.desc}, {out})", dt)


def k_flip(g, out, dt, depth):
    s = g.gen(out, dt, depth - 1)
    if g.rng.rand() < 0.3:
        return Node(ms.mirror(s.e), s.v[..., ::-1].copy(), s.err, f"mirror({s.desc})", dt)
    d = g.rng.randint(len(out))
    return Node(ms.flip(s.e, d), np.flip(s.v, d).copy(), s.err, f"flip({s.desc}, {d})", dt)


def k_swapaxis(g, out, dt, depth):
    if len(out) < 2:
        return None
    a1, a2 = g.rng.choice(len(out), 2, replace=False)
    src = list(out)
    src[a1], src[a2] = src[a2], src[a1]
    s = g.gen(src, dt, depth - 1)
    return Node(ms.swapaxis(s.e, int(a1), int(a2)), np.swapaxes(s.v, a1, a2).copy(), s.err,
                f"swapaxis({s.desc}, {a1}, {a2})", dt)


def k_transpose_axes(g, out, dt, depth):
    if len(out) < 2:
        return None
    axes = tuple(int(a) for a in g.rng.permutation(len(out)))
    src = [0] * len(out)
    for i, a in enumerate(axes):
        src[a] = out[i]
    s = g.gen(src, dt, depth - 1)
    return Node(ms.transpose_axes(s.e, axes), np.transpose(s.v, axes).copy(), s.err,
                f"transpose_axes({s.desc}, {axes})", dt)


def k_T(g, out, dt, depth):
    """``.T`` of an expression (not a tensor)."""
    if len(out) != 2:
        return None
    s = g.gen(out[::-1], dt, depth - 1)
    if isinstance(s.e, ms.Tensor):
        return None
    return Node(s.e.T, s.v.T.copy(), s.err, f"({s.desc}).T", dt)


def k_crop(g, out, dt, depth):
    if len(out) < 2:
        return None
    src = out[:-2] + (out[-2] + g.rng.randint(3), out[-1] + g.rng.randint(3))
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    H, W = src[-2:]
    if g.rng.rand() < 0.5:
        sh, sw = (H - out[-2]) // 2, (W - out[-1]) // 2
        e = ms.crop(s.e, out[-2:])
        desc = f"crop({s.desc}, {out[-2:]})"
    else:
        sh, sw = g.rng.randint(H - out[-2] + 1), g.rng.randint(W - out[-1] + 1)
        e = ms.crop(s.e, out[-2:], sh, sw)
        desc = f"crop({s.desc}, {out[-2:]}, {sh}, {sw})"
    return Node(e, s.v[..., sh:sh + out[-2], sw:sw + out[-1]].copy(), s.err, desc, dt)


def k_slice_axis(g, out, dt, depth):
    a = g.rng.randint(len(out))
    b = g.rng.randint(3)
    src = list(out)
    src[a] = out[a] + b + g.rng.randint(3)
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    sl = [slice(None)] * len(out)
    sl[a] = slice(b, b + out[a])
    return Node(ms.slice_axis(s.e, a, b, b + out[a]), s.v[tuple(sl)].copy(), s.err,
                f"slice_axis({s.desc}, {a}, {b}, {b + out[a]})", dt)


def _factor(g, n, nd):
    """A random shape of ``nd`` axes holding ``n`` elements."""
    dims = []
    for _ in range(nd - 1):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d = g.choice(divs)
        dims.append(d)
        n //= d
    dims.append(n)
    return tuple(dims)


def k_reshape(g, out, dt, depth):
    n = int(np.prod(out))
    src = _factor(g, n, g.rng.randint(2, 4))
    if src == out:
        return None
    s = g.gen(src, dt, depth - 1)
    # a source no strides re-cut is read through the readers table's reshape
    e, desc = ms.reshape(s.e, out), f"reshape({s.desc}, {out})"
    return Node(e, s.v.reshape(out), s.err, desc, dt)


def k_pad(g, out, dt, depth):
    if len(out) < 2:
        return None
    py, px = g.rng.randint(3), g.rng.randint(3)
    if out[-2] - 2 * py < 1 or out[-1] - 2 * px < 1:
        return None
    src = out[:-2] + (out[-2] - 2 * py, out[-1] - 2 * px)
    s = g.gen(src, dt, depth - 1)
    if py == px and g.rng.rand() < 0.5:
        e, desc = ms.pad(s.e, py), f"pad({s.desc}, {py})"
    else:
        e, desc = ms.pad(s.e, py, px), f"pad({s.desc}, {py}, {px})"
    return Node(e, np_pad(s.v, py, px), s.err, desc, dt)


def _index(g, n, bound):
    """A 1-D index of length ``n`` into [0, bound): a tensor of any dtype or an expression
    (floats are truncated by the kernels, as C's cast)."""
    ints = g.rng.randint(0, bound, size=n)
    kind = g.rng.randint(5)
    if kind == 0:
        t = ms.from_numpy(ints.astype(np.int32))
        return t, ints, "idx"
    if kind == 1:
        base = ints.astype(np.float32)
        return ms.from_numpy(base) * 1.0 + 0.5, c_index(base + 0.5), "(idx+0.5)"  # 2.5 -> 2
    if kind == 2:
        base = ints[::-1].astype(np.float64).copy()
        return ms.flip(ms.from_numpy(base), 0), ints, "flip(idx)"
    if kind == 3:
        base = ints.astype(np.int32)
        return ms.tcast(np.float32, ms.from_numpy(base)), ints, "tcast(idx)"
    return ms.from_numpy(ints.astype(np.float32)), ints, "idxf"


def k_fill(g, out, dt, depth):
    """mat_fill_row_element(src, val, index): a copy of src with src[i][index[i]] = val[i]."""
    if len(out) != 2:
        return None
    s = g.gen(out, dt, depth - 1)
    val = g.mix((out[0],), dt)
    idx, ints, d = _index(g, out[0], out[1])
    v = s.v.copy()
    v[np.arange(out[0]), ints] = val.v
    return Node(ms.mat_fill_row_element(s.e, val.e, idx), v, max(s.err, val.err),
                f"mat_fill_row_element({s.desc}, {val.desc}, {d})", dt)


def k_mask(g, out, dt, depth):
    """mask(index, src) = src * index[y] (a view of the index times the source)."""
    if len(out) != 2:
        return None
    s = g.gen(out, dt, depth - 1)
    m = g.mix((out[0],), dt)
    with np.errstate(over="ignore"):
        v = np.asarray(s.v * m.v[:, None], dtype=s.v.dtype)
    err = s.err * (m.m + m.err) + m.err * s.m + rnd(v, dt, s.err == 0 and m.err == 0)
    return Node(ms.mask(m.e, s.e), v, err, f"mask({m.desc}, {s.desc})", dt)


def k_take(g, out, dt, depth):
    if len(out) != 2:
        return None
    R = g.rng.randint(1, 6)
    s = g.gen((R, out[1]), dt, depth - 1)
    idx, ints, d = _index(g, out[0], R)
    return Node(ms.take(idx, s.e), s.v[ints].copy(), s.err, f"take({d}, {s.desc})", dt)


def k_take_perm(g, out, dt, depth):
    """take with a permutation: the source has the output's shape (often the destination)."""
    if len(out) != 2:
        return None
    s = g.gen(out, dt, depth - 1)
    perm = g.rng.permutation(out[0])
    idx = ms.from_numpy(perm.astype(np.float32))
    return Node(ms.take(idx, s.e), s.v[perm].copy(), s.err, f"take(perm, {s.desc})", dt)


def k_choose(g, out, dt, depth):
    if len(out) != 1:
        return None
    c = g.rng.randint(1, 6)
    s = g.gen((out[0], c), dt, depth - 1)
    idx, ints, d = _index(g, out[0], c)
    return Node(ms.mat_choose_row_element(s.e, idx), s.v[np.arange(out[0]), ints].copy(),
                s.err, f"mat_choose_row_element({s.desc}, {d})", dt)


def k_upsample(g, out, dt, depth):
    if len(out) < 2:
        return None
    scales = [k for k in (2, 3) if out[-2] % k == 0 and out[-1] % k == 0]
    if not scales and g.rng.rand() < 0.8:
        return None                # scale 1 (a copy) only now and then: let another kind fit
    sc = g.choice(scales or [1])
    s = g.gen(out[:-2] + (out[-2] // sc, out[-1] // sc), dt, depth - 1)
    return Node(ms.upsampling_nearest(s.e, sc), np_upsample(s.v, sc), s.err,
                f"upsampling_nearest({s.desc}, {sc})", dt)


def k_concat(g, out, dt, depth):
    dims = [k for k in range(len(out)) if out[k] >= 2]
    if not dims:
        return None
    d = g.choice(dims)
    na = g.rng.randint(1, out[d])
    sa, sb = list(out), list(out)
    sa[d], sb[d] = na, out[d] - na
    a = g.gen(sa, dt, depth - 1)
    b = g.gen(sb, dt, depth - 1) if g.rng.rand() < 0.6 else g.mix(sb, dt)
    return Node(ms.concat(a.e, b.e, d), np.concatenate([a.v, b.v], d), max(a.err, b.err),
                f"concat({a.desc}, {b.desc}, {d})", dt)


def _pool_node(g, s, ky, kx, sy, sx, red, oh, ow, pshape, desc_extra=""):
    dt = s.dt
    rk = {"maximum": ms.red.maximum, "sum": ms.red.sum, "minimum": ms.red.minimum}[red]
    e = ms.pool(s.e, ky, kx, sy, sx, rk, pshape=pshape) if pshape else \
        ms.pool(s.e, ky, kx, sy, sx, rk)
    v = np_pool(s.v, ky, kx, sy, sx, red, oh, ow)
    if red == "sum":
        absum = _max(np_pool(np.abs(s.v), ky, kx, sy, sx, red, oh, ow))
        err = sum_err(s.err, ky * kx, absum, dt, s.err == 0, v)
    else:
        err = s.err
    return Node(e, v, err, f"pool{desc_extra}({s.desc}, {ky}, {kx}, {sy}, {sx}, {red}"
                           f"{', ' + str(pshape) if pshape else ''})", dt)


def k_pool(g, out, dt, depth):
    if len(out) < 2:
        return None
    oh, ow = out[-2:]
    ky, kx = g.rng.randint(1, 4), g.rng.randint(1, 4)
    sy, sx = g.rng.randint(1, 3), g.rng.randint(1, 3)
    red = g.choice(["maximum", "sum", "maximum", "sum", "minimum"])
    pshape = None
    if g.rng.rand() < 0.25:
        # a pshape beyond the natural output: border windows are clipped, none is empty
        H = max(ky, (oh - 1) * sy + 1 + g.rng.randint(max(ky - 1, 0) + 1))
        W = max(kx, (ow - 1) * sx + 1 + g.rng.randint(max(kx - 1, 0) + 1))
        H, W = min(H, (oh - 1) * sy + ky + sy - 1), min(W, (ow - 1) * sx + kx + sx - 1)
        pshape = (oh, ow)
    else:
        H = (oh - 1) * sy + ky + g.rng.randint(sy)
        W = (ow - 1) * sx + kx + g.rng.randint(sx)
    src = out[:-2] + (H, W)
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    return _pool_node(g, s, ky, kx, sy, sx, red, oh, ow, pshape)


def k_pool_same(g, out, dt, depth):
    """pool(pad(src, p), 2p+1, 2p+1, 1, 1): a window of the same shape (often over dst)."""
    if len(out) < 2:
        return None
    p = 1
    s = g.gen(out, dt, depth - 1)
    padded = Node(ms.pad(s.e, p), np_pad(s.v, p, p), s.err, f"pad({s.desc}, {p})", dt)
    return _pool_node(g, padded, 2 * p + 1, 2 * p + 1, 1, 1,
                      g.choice(["maximum", "sum"]), out[-2], out[-1], None)


def _divisors(n, cap):
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def k_im2col(g, out, dt, depth):
    if len(out) != 2:
        return None
    R, Cc = out
    ky = g.choice(_divisors(R, 3))
    kx = g.choice(_divisors(R // ky, 3))
    C = R // (ky * kx)
    N = g.choice(_divisors(Cc, 3))
    oh = g.choice(_divisors(Cc // N, 4))
    ow = Cc // N // oh
    sy, sx = g.rng.randint(1, 3), g.rng.randint(1, 3)
    dy, dx = g.rng.randint(1, 3), g.rng.randint(1, 3)
    H = (oh - 1) * sy + dy * (ky - 1) + 1 + g.rng.randint(sy)
    W = (ow - 1) * sx + dx * (kx - 1) + 1 + g.rng.randint(sx)
    src = ((N,) if N > 1 or g.rng.rand() < 0.5 else ()) + (C, H, W)
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    if sx == sy and dx == dy and g.rng.rand() < 0.5:
        e = ms.unpack_patch2col(s.e, ky, kx, sy, dy=dy) if dy > 1 else \
            ms.unpack_patch2col(s.e, ky, kx, sy)
    else:
        e = ms.unpack_patch2col(s.e, ky, kx, sy, sx, dy, dx)
    return Node(e, np_im2col(s.v, ky, kx, sy, sx, dy, dx), s.err,
                f"unpack_patch2col({s.desc}, {ky}, {kx}, {sy}, {sx}, {dy}, {dx})", dt)


def k_col2im(g, out, dt, depth):
    if len(out) < 3:
        return None
    C, H, W = out[-3:]
    N = int(np.prod(out[:-3], dtype=np.int64))
    ky, kx = g.rng.randint(1, min(H, 3) + 1), g.rng.randint(1, min(W, 3) + 1)
    dy = g.rng.randint(1, 3) if 2 * (ky - 1) + 1 <= H else 1
    dx = g.rng.randint(1, 3) if 2 * (kx - 1) + 1 <= W else 1
    sy, sx = g.rng.randint(1, 3), g.rng.randint(1, 3)
    oh, ow = _out_extent(H, ky, sy, dy), _out_extent(W, kx, sx, dx)
    src = (C * ky * kx, N * oh * ow)
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    v = np_col2im(s.v, out, ky, kx, sy, sx, dy, dx)
    absum = _max(np_col2im(np.abs(s.v), out, ky, kx, sy, sx, dy, dx))
    return Node(ms.pack_col2patch(s.e, out, ky, kx, sy, sx, dy, dx), v,
                sum_err(s.err, ky * kx, absum, dt, s.err == 0, v),
                f"pack_col2patch({s.desc}, {out}, {ky}, {kx}, {sy}, {sx}, {dy}, {dx})", dt)


def k_col2im_of_im2col(g, out, dt, depth):
    """pack_col2patch(unpack_patch2col(src)): the image's own shape again (often dst)."""
    if len(out) < 3:
        return None
    C, H, W = out[-3:]
    ky, kx = g.rng.randint(1, min(H, 2) + 1), g.rng.randint(1, min(W, 2) + 1)
    s = g.gen(out, dt, depth - 1)
    cols = np_im2col(s.v, ky, kx, 1, 1, 1, 1)
    v = np_col2im(cols, out, ky, kx, 1, 1, 1, 1)
    absum = _max(np_col2im(np.abs(cols), out, ky, kx, 1, 1, 1, 1))
    e = ms.pack_col2patch(ms.unpack_patch2col(s.e, ky, kx, 1), out, ky, kx, 1)
    return Node(e, v, sum_err(s.err, ky * kx, absum, dt, s.err == 0, v),
                f"pack_col2patch(unpack_patch2col({s.desc}, {ky}, {kx}, 1), {ky}, {kx}, 1)", dt)


def k_chpool(g, out, dt, depth):
    if len(out) < 3:
        return None
    oC = out[-3]
    red = g.choice(["sum", "maximum"])
    if g.rng.rand() < 0.5:
        nsize = g.choice([1, 3, 5])
        stride, pad, C = 1, nsize // 2, oC
        if C < nsize:
            return None
        explicit = False
    else:
        cands = []
        for nsize in (1, 2, 3, 4):
            for stride in (1, 2, 3):
                for pad in (0, 1, 2):
                    for C in range(nsize, 9):
                        if (C - nsize + 2 * pad + 1) // stride == oC and all(
                                min(c * stride - pad + nsize, oC, C) > max(c * stride - pad, 0)
                                for c in range(oC)):
                            cands.append((nsize, stride, pad, C))
        if not cands:
            return None
        nsize, stride, pad, C = g.choice(cands)
        explicit = True
    src = out[:-3] + (C,) + out[-2:]
    if not g.sized(src):
        return None
    s = g.gen(src, dt, depth - 1)
    rk = ms.red.sum if red == "sum" else ms.red.maximum
    e = ms.chpool(s.e, nsize, rk, stride, pad) if explicit else ms.chpool(s.e, nsize, rk)
    v = np_chpool(s.v, nsize, red, stride, pad)
    err = s.err if red != "sum" else sum_err(
        s.err, nsize, _max(np_chpool(np.abs(s.v), nsize, "sum", stride, pad)), dt,
        s.err == 0, v)
    return Node(e, v, err, f"chpool({s.desc}, {nsize}, {red}, {stride}, {pad})", dt)


def _gemm_operand(g, shape, dt):
    """An implicit_dot operand: a tensor or a tensor's .T (its documented operands), the
    destination when its shape fits."""
    if g.dst is not None and g.rng.rand() < g.alias_p:
        n = g.alias_leaf(shape, dt)
        if n is not None:
            return n
    vals = g.values(shape, dt)
    if g.rng.rand() < 0.5:
        base = np.ascontiguousarray(vals.T)
        g.keep.append(base)
        return Node(ms.from_numpy(base).T, _oracle(vals, dt), 0.0, f"Tt{list(shape)}", dt)
    if g.rng.rand() < 0.5:
        t = ms.new_tensor(shape, dtype=dt, pad=True)
        t.numpy()[...] = vals
        return Node(t, _oracle(vals, dt), 0.0, f"P{list(shape)}", dt)
    base = np.ascontiguousarray(vals)
    g.keep.append(base)
    return Node(ms.from_numpy(base), _oracle(vals, dt), 0.0, f"t{list(shape)}", dt)


def k_implicit_dot(g, out, dt, depth):
    if len(out) != 2:
        return None
    m, n = out
    ks = [g.rng.randint(1, 6)]
    if g.dst is not None and len(g.dst[0].shape) == 2:
        ks += list(g.dst[0].shape)             # lets dst (or dst.T) be an operand
    K = g.choice(ks)
    a, b = _gemm_operand(g, (m, K), dt), _gemm_operand(g, (K, n), dt)
    with np.errstate(over="ignore"):
        v = a.v @ b.v if dt.kind == "f" else (a.v.astype(np.int64) @ b.v).astype(dt)
    absum = _max(np.abs(a.v).astype(np.float64) @ np.abs(b.v).astype(np.float64))
    err = sum_err(0.0, K, absum, dt, True, v)
    node = Node(ms.implicit_dot(a.e, b.e), v, err, f"implicit_dot({a.desc}, {b.desc})", dt)
    if depth > 1 and g.rng.rand() < 0.5:     # and nest it under one more extension
        node = Node(ms.flip(node.e, 0), node.v[::-1].copy(), node.err,
                    f"flip({node.desc}, 0)", dt)
    return node


def k_tcast(g, out, dt, depth):
    """tcast of a subtree of another dtype (conversions that are exact where the oracle
    says so: int32 <-> integer-valued floats; float64 -> float32 rounds once)."""
    if dt.kind == "f":
        src_dt = g.choice([F64 if dt == F32 else F32, I32])
    else:
        src_dt = g.choice([F32, F64])
    saved = g.exact
    g.exact = saved or dt.kind != "f" or src_dt.kind != "f"
    try:
        s = g.gen(out, src_dt, depth - 1)
    finally:
        g.exact = saved
    if dt.kind != "f":
        if s.err != 0:
            return None
        v = np.trunc(s.v).astype(dt)
        err = 0.0
    elif src_dt.kind != "f":
        v = s.v.astype(np.float64)
        err = rnd(v, dt, True)
    else:
        v = s.v
        err = s.err + (rnd(v, dt, s.err == 0) if dt == F32 else 0.0)
    return Node(ms.tcast(dt.type, s.e), v, err, f"tcast<{dt.name}>({s.desc})", dt)


KINDS = {
    "broadcast": k_broadcast, "repmat": k_repmat, "broadcast_with_axis": k_broadcast_with_axis,
    "broadcast_keepdim": k_broadcast_keepdim, "broadcast_to": k_broadcast_to, "flip": k_flip,
    "swapaxis": k_swapaxis, "transpose_axes": k_transpose_axes, "T": k_T, "crop": k_crop,
    "slice_axis": k_slice_axis, "reshape": k_reshape,
    "broadcast_scalar": k_broadcast_scalar, "mask": k_mask, "fill": k_fill,
    "pad": k_pad, "take": k_take, "take_perm": k_take_perm, "choose": k_choose,
    "upsampling_nearest": k_upsample, "concat": k_concat,
    "pool": k_pool, "pool_same": k_pool_same, "im2col": k_im2col, "col2im": k_col2im,
    "col2im_of_im2col": k_col2im_of_im2col, "chpool": k_chpool,
    "implicit_dot": k_implicit_dot, "tcast": k_tcast,
}


# ---- destinations, savers, checks -------------------------------------------------------------

def _make_dst(g, shape, dt):
    """A destination in one of three layouts, its old values, the alias leaves it offers
    (besides itself) and a check that nothing outside it was written."""
    old = g.values(shape, dt)
    layout = g.rng.randint(3)
    extra, guard = [], (lambda: None)
    if layout == 0:
        base = np.ascontiguousarray(old.copy())
        g.keep.append(base)
        dst = ms.from_numpy(base)
    elif layout == 1:
        dst = ms.new_tensor(shape, dtype=dt, pad=True)
        dst.numpy()[...] = old
    else:
        # rows 1..n of a buffer of n + 2 rows: its neighbours overlap it by n - 1 rows
        n0 = shape[0]
        big = g.values((n0 + 2,) + tuple(shape[1:]), dt)
        big[1:1 + n0] = old
        snapshot = big.copy()
        g.keep.append(big)
        dst = ms.from_numpy(big[1:1 + n0])
        extra = [("dst_up", ms.from_numpy(big[0:n0]), snapshot[0:n0]),
                 ("dst_down", ms.from_numpy(big[2:2 + n0]), snapshot[2:2 + n0])]

        def guard():
            np.testing.assert_array_equal(big[0], snapshot[0], err_msg="row before dst written")
            np.testing.assert_array_equal(big[-1], snapshot[-1], err_msg="row after dst written")
    return dst, old, extra, guard


def _apply(dst, saver, e):
    if saver == "saveto":
        dst[:] = e
    elif saver == "plusto":
        dst += e
    elif saver == "minusto":
        dst -= e
    elif saver == "multo":
        dst *= e
    else:
        dst /= e


def _expected(g, saver, old, n):
    """(the expression to store with ``saver``, expected values, error bound)."""
    dt = n.dt
    o = _oracle(old, dt)
    if saver == "divto":
        d = g.absplus1(n)
        if dt.kind == "f":
            v = o / d.v
            return d.e, v, div_err(Node(None, o, 0.0, "", dt), d, v)
        return d.e, np_trunc_div(o, d.v), 0.0
    exact = n.err == 0
    with np.errstate(over="ignore"):
        if saver == "saveto":
            return n.e, n.v, n.err
        if saver == "plusto":
            v = o + n.v
            return n.e, v, n.err + rnd(v, dt, exact)
        if saver == "minusto":
            v = o - n.v
            return n.e, v, n.err + rnd(v, dt, exact)
        v = o * n.v
        return n.e, v, n.err * _max(o) + rnd(v, dt, exact)


def _check(got, want, err, dt, what, coarsest=None):
    """``got`` equal to ``want`` (err == 0) or within 2 * err of it (the oracle's own float64
    rounding is within the same bound); ``coarsest``: the least precise float dtype the
    tree computed in, which decides how tight a bound must be to mean something."""
    got = np.asarray(got)
    if err == 0:
        np.testing.assert_array_equal(got, np.asarray(want).astype(dt), err_msg=what)
        return
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=2 * err,
                               err_msg=what)
    # how tight the bound was (cancellation can make it large next to the result; the
    # coverage test checks that the bounds are small as a rule)
    STATS["bounds"][coarsest or dt].append(2 * err / max(1.0, _max(want)))


def _dst_shape(g):
    nd = g.choice([1, 2, 2, 3, 3, 4])
    return tuple(int(g.rng.randint(1, 6 if nd < 4 else 4)) for _ in range(nd))


def _run_tree(seed, dt, saver, force_alias=False, focus=None):
    """One random nested tree assigned with ``saver``; True if it read the destination.
    ``focus``: the kind (a key of KINDS) of the outermost extension."""
    dt = np.dtype(dt)
    for attempt in range(60):
        g = Gen(seed * 1000 + attempt, dt, exact=(seed % 3 == 0),
                alias_p=0.6 if force_alias else 0.3)
        g.focus = focus
        shape = _dst_shape(g)
        dst, old, extra, guard = _make_dst(g, shape, dt)
        g.dst = (dst, old, extra)
        depth = 2 + g.rng.randint(2)
        n = g.gen(shape, dt, depth)
        if n is not None and (not force_alias or "dst" in n.desc):
            break
    else:
        raise AssertionError(f"seed {seed}: no tree of {focus or 'any kind'} "
                             f"{'read the destination' if force_alias else 'fits'}")
    e, want, err = _expected(g, saver, old, n)
    what = (f"_run_tree({seed}, {dt.name!r}, {saver!r}, {force_alias}, {focus!r}): "
            f"dst{list(shape)} <{saver}> {n.desc}")
    _apply(dst, saver, e)
    _check(dst.numpy(), want, err, dt, what, F32 if F32 in g.dtypes else dt)
    guard()
    STATS["trees"] += 1
    STATS["aliased"] += "dst" in n.desc
    STATS["exact"] += err == 0
    STATS["kinds"] |= g.kinds
    return "dst" in n.desc


# ---- reductions of nested trees ---------------------------------------------------------------

RED_KINDS = ["sumall_except_dim", "sum_rows", "reduce_with_axis", "reduce_keepdim", "argmax",
             "sum"]


def _reduce_oracle(s, axes, red):
    """(values, error bound) of reducing node ``s`` over ``axes``."""
    dt = s.dt
    if red == "sum":
        v = s.v.sum(axis=axes, dtype=np.float64 if dt.kind == "f" else dt)
        nterms = int(np.prod([s.shape[a] for a in axes], dtype=np.int64))
        absum = _max(np.abs(s.v).astype(np.float64).sum(axis=axes))
        return v, sum_err(s.err, nterms, absum, dt, s.err == 0, v)
    fn = np.max if red == "maximum" else np.min
    return fn(s.v, axis=axes), s.err


def _run_reduction(seed, dt, kind, saver):
    """A reduction whose source is a random nested tree, stored with ``saver`` into a
    destination that the tree often reads (broadcast back to the source's shape)."""
    dt = np.dtype(dt)
    g = Gen(seed, dt, exact=(kind == "argmax" or seed % 3 == 0), alias_p=0.5)
    if kind == "sum_rows":
        S = (g.rng.randint(1, 6), g.rng.randint(1, 6))
    else:
        S = tuple(int(g.rng.randint(1, 6)) for _ in range(g.rng.randint(2, 5)))
    nd = len(S)
    axis = g.rng.randint(nd)
    red = g.choice(["sum", "maximum", "minimum"])
    if kind in ("sumall_except_dim", "sum_rows", "sum"):
        red = "sum"
    if kind == "argmax":
        red = g.choice(["maximum", "minimum"])
    if kind == "sumall_except_dim":
        dshape = (S[axis],)
    elif kind == "sum_rows":
        axis, dshape = 1, (S[1],)
    elif kind == "reduce_keepdim":
        dshape = S[:axis] + (1,) + S[axis + 1:]
    elif kind == "sum":
        dshape = None
    else:
        dshape = S[:axis] + S[axis + 1:]
    if dshape is not None:
        dst, old, extra, guard = _make_dst(g, dshape, dt)
        g.dst = (dst, old, extra)
    depth = 2 + g.rng.randint(2)
    s = g.gen(S, dt, depth)
    if dshape is not None and "dst" not in s.desc and g.rng.rand() < 0.7:
        # read the destination through a view that broadcasts it back over the source
        if kind == "sumall_except_dim":
            e = ms.broadcast(dst, S, axis)
            v = np.broadcast_to(old.reshape([S[axis] if k == axis else 1 for k in range(nd)]),
                                S)
        elif kind == "sum_rows":
            e, v = ms.repmat(dst, S[0]), np.broadcast_to(old, S)
        elif kind == "reduce_keepdim":
            e, v = ms.broadcast_keepdim(dst, axis, S[axis]), np.broadcast_to(old, S)
        else:
            e = ms.broadcast_with_axis(dst, axis - 1, S[axis])
            v = np.broadcast_to(np.expand_dims(old, axis), S)
        s = g.binary(s, Node(e, _oracle(v, dt), 0.0, "bcast(dst)", dt))
    if saver == "divto":
        s = g.absplus1(s)      # a sum or an extreme of values >= 1: never a zero divisor
    axes = tuple(k for k in range(nd) if k != axis) if kind in (
        "sumall_except_dim", "sum_rows", "sum") else (axis,)
    if kind == "sum":
        axes = tuple(range(nd))
    what = f"_run_reduction({seed}, {dt.name!r}, {kind!r}, {saver!r}) <{red}>: {s.desc}"
    coarsest = F32 if F32 in g.dtypes else dt
    STATS["reductions"] += 1
    STATS["kinds"] |= g.kinds
    if kind == "sum":
        v, err = _reduce_oracle(s, axes, "sum")
        got = ms.sum(s.e)
        assert got.dtype == dt, what
        _check(got, v, err + rnd(v, dt, err == 0), dt, what, coarsest)
        return
    if kind == "argmax":
        assert s.err == 0, what               # exact tree: ties resolved as numpy does
        fn = np.argmax if red == "maximum" else np.argmin
        v, err = fn(s.v, axis=axis).astype(np.float64 if dt.kind == "f" else dt), 0.0
        e = ms.reduce_with_axis(s.e, axis, getattr(ms.red, red), mask=True)
    else:
        v, err = _reduce_oracle(s, axes, red)
        if kind == "reduce_keepdim":
            v = np.expand_dims(v, axis)
        rk = getattr(ms.red, red)
        e = {"sumall_except_dim": lambda: ms.sumall_except_dim(s.e, axis - nd * g.rng.randint(2)),
             "sum_rows": lambda: ms.sum_rows(s.e),
             "reduce_with_axis": lambda: ms.reduce_with_axis(s.e, axis, rk),
             "reduce_keepdim": lambda: ms.reduce_keepdim(s.e, axis, rk)}[kind]()
        if g.rng.rand() < 0.3:                # scaled like dot: exact power-of-two scales
            sc = g.choice([2, -1] if dt.kind != "f" else [0.5, -2.0])
            e = e * sc if g.rng.rand() < 0.5 else sc * e
            v = v * (np.float64(sc) if dt.kind == "f" else dt.type(sc))
            err = err * abs(sc)
            what += f" * {sc}"
    v = np.asarray(v, dtype=np.float64 if dt.kind == "f" else dt)
    n = Node(e, v, err, what, dt)
    e, want, err = _expected(g, saver if saver != "divto" else "saveto", old, n) \
        if saver != "divto" else _div_expected(old, n)
    _apply(dst, saver, e)
    _check(dst.numpy(), want, err, dt, what, coarsest)
    guard()


def _div_expected(old, n):
    """dst /= n for a reduction ``n`` already >= 1."""
    o = _oracle(old, n.dt)
    if n.dt.kind == "f":
        v = o / n.v
        return n.e, v, div_err(Node(None, o, 0.0, "", n.dt), n, v)
    return n.e, np_trunc_div(o, n.v), 0.0


# ---- the random suites ------------------------------------------------------------------------

DTYPES = [np.float32, np.float64, np.int32]
TREES = {np.float32: 14, np.float64: 10, np.int32: 8}     # per (dtype, saver)
ALIAS_TREES = 6                                          # per (dtype, saver), dst always read
FOCUS_TREES = 6                                          # per kind of outermost extension
EXPECTED_TREES = (2 * sum(TREES.values()) * len(SAVERS) + len(DTYPES) * len(SAVERS) * ALIAS_TREES
                  + FOCUS_TREES * len(KINDS))


def _seed(suite, dt, saver, i):
    return ((suite * 8 + DTYPES.index(dt)) * 8 + SAVERS.index(saver)) * 1000 + i


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_random_nested_trees(dt, saver):
    """Random trees, two and three extension levels deep over expression sources; half of
    them must read the destination. Each tree runs twice: the second run finds its plan
    cached (the compiled fast path) and must still fill every temporary afresh."""
    for i in range(TREES[dt]):
        seed = _seed(1, dt, saver, i)
        _run_tree(seed, dt, saver, force_alias=i % 2 == 0)
        _run_tree(seed, dt, saver, force_alias=i % 2 == 0)


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_random_nested_trees_reading_the_destination(dt, saver):
    """Every tree reads the destination (itself, a second wrapper, its .T, an overlapping
    neighbour slice) somewhere below an extension: the result is numpy's from the old
    values, and the rows around a sliced destination are untouched."""
    for i in range(ALIAS_TREES):
        assert _run_tree(_seed(2, dt, saver, i), dt, saver, force_alias=True)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_random_nested_trees_per_outer_kind(kind):
    """Each kind of node as the outermost extension of random nested trees (the uniform
    choice rarely puts the 3-D-only windows, chpool and col2im, on top), every dtype and
    saver in turn, half of them reading the destination."""
    for i in range(FOCUS_TREES):
        dt = DTYPES[i % len(DTYPES)]
        saver = SAVERS[(i + sorted(KINDS).index(kind)) % len(SAVERS)]
        _run_tree(_seed(4, dt, saver, i) + 50 * sorted(KINDS).index(kind), dt, saver,
                  force_alias=i % 2 == 1, focus=kind)


@pytest.mark.parametrize("shape", [(3, 700), (2, 3, 40, 300), (70001,), (1100, 2, 3)])
def test_random_nested_trees_large_two_threads(shape, monkeypatch):
    """Rows longer than a 512-element block, and more than 2 x 32768 elements so OpenMP
    splits the rows (gather blocks, view rows) between two threads."""
    monkeypatch.setattr(sys.modules[__name__], "MAX_ELEMS", 200_000)
    monkeypatch.setattr(sys.modules[__name__], "_dst_shape", lambda g: shape)
    threads = ms.get_num_threads()
    ms.set_num_threads(2)
    try:
        for i, (dt, saver) in enumerate([(np.float32, "plusto"), (np.float64, "saveto"),
                                         (np.int32, "minusto")]):
            _run_tree(_seed(3, dt, saver, i) + len(shape), dt, saver, force_alias=i != 1)
    finally:
        ms.set_num_threads(threads)


RED_CASES = [(k, s) for k in RED_KINDS for s in SAVERS
             if not (k == "sum" and s != "saveto") and not (k == "argmax" and s == "divto")]


@pytest.mark.parametrize("kind,saver", RED_CASES, ids=[f"{k}-{s}" for k, s in RED_CASES])
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_random_reductions_of_nested_trees(dt, kind, saver):
    """sumall_except_dim / sum_rows / reduce_with_axis / reduce_keepdim (also arg-max, and
    scaled) and ms.sum over random nested trees, which often read the destination."""
    for i in range(3):
        _run_reduction(((DTYPES.index(dt) * 8 + RED_KINDS.index(kind)) * 8
                        + SAVERS.index(saver)) * 100 + i, dt, kind, saver)


def test_zz_coverage_of_the_random_suites():
    """What the random suites generated (pytest -s prints it); when the whole file ran,
    every kind of node appeared and many trees read their destination."""
    print(f"\nnested random trees: {STATS['trees']} assignments, {STATS['aliased']} reading "
          f"the destination, {STATS['exact']} compared bit for bit; {STATS['reductions']} "
          f"reductions; kinds {len(STATS['kinds'])}: {sorted(STATS['kinds'])}")
    for dt, b in STATS["bounds"].items():
        if b:
            print(f"{dt.name} error bounds / max(1, |result|): {len(b)} checks, median "
                  f"{np.median(b):.2g}, 99th percentile {np.quantile(b, 0.99):.2g}")
    if STATS["trees"] < EXPECTED_TREES:
        pytest.skip("only part of the random suites ran")
    missing = (set(KINDS) | {"plus", "minus", "mul", "div", "maximum", "minimum", "maxoftwo",
                             "relu", "abs", "neg", "sigmoid", "exp", "tanh"}) - STATS["kinds"]
    assert not missing, missing
    assert STATS["aliased"] >= STATS["trees"] // 2
    assert STATS["exact"] >= STATS["trees"] // 4
    # the propagated bounds mean something: a few float32 ulps for a typical tree
    for dt, median, p99 in ((F32, 1e-5, 1e-3), (F64, 1e-13, 1e-11)):
        b = np.array(STATS["bounds"][dt])
        assert len(b) >= 50 and np.median(b) < median and np.quantile(b, 0.99) < p99, \
            (dt, len(b), np.median(b), np.quantile(b, 0.99))


# ---- the oracles against the C++ reference's verified examples (no mshadow) -----------------

def test_oracles_reproduce_the_verified_cpp_examples():
    # pack_col2patch(unpack_patch2col(img)) of a 3x3 image, 2x2 kernel, stride 1
    img = np.arange(9, dtype=np.float64).reshape(1, 3, 3)
    cols = np_im2col(img, 2, 2, 1, 1, 1, 1)
    assert cols.shape == (4, 4)
    assert np_col2im(cols, (1, 3, 3), 2, 2, 1, 1, 1, 1).ravel().tolist() == \
        [0, 2, 2, 6, 16, 10, 6, 14, 8]
    # chpool<sum> with nsize 3 over channels 1..4 (quirk 11 does not bite here)
    ch = np.arange(1, 5, dtype=np.float64).reshape(4, 1, 1)
    assert np_chpool(ch, 3, "sum", 1, 1).ravel().tolist() == [3, 6, 9, 7]
    # pool<sum> 2x2 of a 4x4 of ones: every window sums 4
    assert np_pool(np.ones((4, 4)), 2, 2, 2, 2, "sum", 2, 2).tolist() == [[4, 4], [4, 4]]
    # C's integer division and cast toward zero
    assert np_trunc_div(np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2])).tolist() \
        == [3, -3, -3, 3]
    assert c_index(np.array([2.5, 1.7, 0.2])).tolist() == [2, 1, 0]
    # im2col's row/column layout with strides and dilation: row (c*ky + i)*kx + j,
    # column (n*oh + oy)*ow + ox reads img[n, c, oy*sy + i*dy, ox*sx + j*dx]
    im = np.arange(2 * 2 * 5 * 6, dtype=np.float64).reshape(2, 2, 5, 6)
    cols = np_im2col(im, 2, 3, 2, 1, 2, 1)
    oh, ow = _out_extent(5, 2, 2, 2), _out_extent(6, 3, 1, 1)
    assert cols.shape == (2 * 2 * 3, 2 * oh * ow) and (oh, ow) == (2, 4)
    for n, c, i, j, oy, ox in np.ndindex(2, 2, 2, 3, oh, ow):
        assert cols[(c * 2 + i) * 3 + j, (n * oh + oy) * ow + ox] == \
            im[n, c, oy * 2 + i * 2, ox + j]


# ---- hand-written nested cases over the destination -----------------------------------------

def _t(a):
    """A tensor over a fresh copy of ``a`` (the oracle keeps the old values)."""
    return ms.from_numpy(np.array(a, copy=True, order="C"))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_flip_of_an_expression_of_the_destination(dt):
    x0 = np.arange(20).reshape(4, 5).astype(dt) - 7
    x = _t(x0)
    x[:] = ms.flip(x * 2, 0) + x
    np.testing.assert_array_equal(x.numpy(), (x0 * 2)[::-1] + x0)


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_pooled_and_padded_reads_of_the_destination(dt, saver):
    x0 = ((np.arange(2 * 5 * 6) * 7) % 11).reshape(2, 5, 6).astype(dt) - 5
    x = ms.new_tensor(x0.shape, dtype=dt, pad=True)
    x.numpy()[...] = x0
    pooled = np_pool(np_pad(x0 * 2 - 1, 1, 1), 3, 3, 1, 1, "maximum", 5, 6)
    summed = np_pool(np_pad(x0, 1, 1), 3, 3, 1, 1, "sum", 5, 6)
    e = ms.pool(ms.pad(x * 2 - 1, 1), 3, 3, 1, 1, ms.red.maximum) + \
        ms.pool(ms.pad(x, 1), 3, 3, 1, 1, ms.red.sum)
    want = pooled + summed
    if saver == "divto":
        e, want = ms.F(ms.op.abs, e) + 1, np.abs(want) + 1
    _apply(x, saver, e)
    expect = {"saveto": lambda: want, "plusto": lambda: x0 + want,
              "minusto": lambda: x0 - want, "multo": lambda: x0 * want,
              "divto": lambda: np_trunc_div(x0, want) if dt == np.int32 else x0 / want}[saver]()
    np.testing.assert_array_equal(x.numpy(), expect.astype(dt))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_windows_and_gathers_over_the_destination(dt):
    x0 = ((np.arange(2 * 3 * 4 * 4) * 5) % 9).reshape(2, 3, 4, 4).astype(dt) - 4
    x = _t(x0)
    x[:] = ms.pack_col2patch(ms.unpack_patch2col(x + 1, 2, 2, 1), x.shape, 2, 2, 1) - \
        ms.chpool(ms.flip(x, 1), 3, ms.red.maximum)
    cols = np_im2col(x0 + 1, 2, 2, 1, 1, 1, 1)
    want = np_col2im(cols, x0.shape, 2, 2, 1, 1, 1, 1) - np_chpool(x0[:, ::-1], 3, "maximum",
                                                                   1, 1)
    np.testing.assert_array_equal(x.numpy(), want.astype(dt))
    m0 = ((np.arange(4 * 6) * 7) % 10).reshape(4, 6).astype(dt) - 3
    m = _t(m0)
    idx = _t(np.array([3, 0, 0, 2], np.float32))
    m += ms.take(idx, ms.mirror(m) * 2) + ms.concat(ms.slice_axis(m, 1, 2, 6),
                                                     ms.upsampling_nearest(ms.crop(m, (2, 1)), 2),
                                                     1)
    want = m0 + (m0[:, ::-1] * 2)[[3, 0, 0, 2]] + np.concatenate(
        [m0[:, 2:6], np_upsample(m0[1:3, 2:3], 2)], 1)
    np.testing.assert_array_equal(m.numpy(), want.astype(dt))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_implicit_dot_of_the_destination_nested(dt):
    x0 = ((np.arange(16) * 3) % 7).reshape(4, 4).astype(dt) - 3
    w0 = ((np.arange(16) * 5) % 6).reshape(4, 4).astype(dt) - 2
    x, w = _t(x0), _t(w0)
    x[:] = ms.flip(ms.implicit_dot(x, w.T), 0) + ms.implicit_dot(x.T, x) + x
    want = (x0 @ w0.T)[::-1] + x0.T @ x0 + x0
    np.testing.assert_array_equal(x.numpy(), want.astype(dt))
    y = _t(x0)
    y -= ms.transpose_axes(ms.implicit_dot(y, y), (1, 0)) * 2
    np.testing.assert_array_equal(y.numpy(), (x0 - (x0 @ x0).T * 2).astype(dt))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_reductions_of_nested_trees_reading_the_destination(dt):
    v0 = np.array([3, -1, 2], dt)
    m0 = np.arange(12).reshape(4, 3).astype(dt) - 5
    v = _t(v0)
    v[:] = ms.sum_rows(ms.repmat(v, 4) * 2 + ms.flip(_t(m0), 0))
    np.testing.assert_array_equal(v.numpy(), (v0 * 2 * 4 + m0.sum(0)).astype(dt))
    u = _t(v0)
    u += ms.reduce_with_axis(ms.broadcast_with_axis(u, -1, 4) - ms.flip(_t(m0) * 2, 0), 0,
                             ms.red.maximum)
    np.testing.assert_array_equal(u.numpy(), (v0 + (v0 - m0 * 2).max(0)).astype(dt))
    k0 = np.array([[[4, -2, 1]], [[0, 3, -3]]], dt)
    m2 = ((np.arange(24) * 7) % 10).reshape(2, 4, 3).astype(dt)
    k = _t(k0)
    k -= ms.reduce_keepdim(ms.broadcast_keepdim(k, 1, 4) + ms.flip(_t(m2), 1), 1,
                           ms.red.minimum)
    np.testing.assert_array_equal(k.numpy(), (k0 - (k0 + m2.min(1, keepdims=True))).astype(dt))
    assert ms.sum(ms.pool(ms.pad(_t(m0), 1), 3, 3, 1, 1, ms.red.sum)) == \
        np_pool(np_pad(m0, 1, 1), 3, 3, 1, 1, "sum", 4, 3).sum(dtype=dt)


# ---- bugs found by the random trees -----------------------------------------------------------

def test_reduction_of_a_view_of_a_gather():
    """Found by the random trees: a reduction of a view of a gather read the gather's
    temporary before anything filled it (uninitialised memory), because the reduction
    engine reads a view in place and skipped the evaluation the plan does for view leaves."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = ms.new_tensor((3,))
    v[:] = ms.sum_rows(ms.flip(ms.pad(_t(x), 0), 0))
    np.testing.assert_array_equal(v.numpy(), x.sum(0))
    w = ms.new_tensor((2,))
    idx = _t(np.array([1.0, 0.0], np.float32))
    w[:] = ms.reduce_with_axis(ms.mirror(ms.take(idx, _t(x))), 1, ms.red.maximum)
    np.testing.assert_array_equal(w.numpy(), [5, 2])


@pytest.mark.parametrize("saver", ["saveto", "plusto"])
def test_implicit_dot_of_expressions_and_views(saver):
    # as in mshadow, any 2-D operands: a view is read in place with its two steps, an
    # expression's values are a whole stage (docs/extensions.md); summed in k order
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    b = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
    e = ms.implicit_dot(_t(a) * 2, ms.flip(_t(b), 0)) + ms.implicit_dot(
        ms.F(ms.op.relu, _t(a)), ms.slice_axis(ms.broadcast(_t(b[0]), (5, 4), 1), 0, 1, 4))
    want = (a * 2) @ b[::-1] + np.maximum(a, 0) @ np.tile(b[0], (3, 1))
    y = ms.new_tensor((2, 4), init=1.0)
    plan = ms.plan_for(y, e, saver)
    assert [st.schedule for st in plan.program.stages] == ["whole", "whole"]
    if saver == "saveto":
        y[:] = e
    else:
        y += e
    np.testing.assert_array_equal(y.numpy(), want + (saver == "plusto"))


@ms.op.define
def _branchy(v):
    return v if v > 0 else -v          # Python control flow: cannot be traced (fallback.py)


@pytest.mark.filterwarnings("ignore:.*could not be traced")
def test_untraceable_operator_over_a_view_of_a_gather():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    out = ms.new_tensor((2, 3))
    out[:] = ms.F(_branchy, ms.flip(ms.pad(_t(x), 0), 0))
    np.testing.assert_array_equal(out.numpy(), np.abs(x[::-1]))


@pytest.mark.filterwarnings("ignore:.*could not be traced")
def test_untraceable_operator_over_a_gather_of_another_dtype():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    out = ms.new_tensor((2, 3), dtype=np.float64)
    out[:] = ms.F(_branchy, ms.tcast(np.float64, ms.pad(_t(x), 0)))
    np.testing.assert_array_equal(out.numpy(), np.abs(x).astype(np.float64))
