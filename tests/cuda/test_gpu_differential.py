"""Differential tests of ms.gpu tensors against the CPU backend (the oracle), on the emulated
device (MSHADOW_CUDA=emulate) or a real GPU where there is one.

Each case is an abstract tree drawn once from a seeded numpy Generator, then built twice:
over cpu tensors and over gpu tensors holding the same values (pitched or not). Both run the
same statement (``t[:] =``, ``t +=``, ``t -=``); docs/gpu.md promises the CPU's bits for
element-wise, view and gather expressions and for maximum, minimum and arg reductions, and
sums within their summation order. The forms docs/gpu.md lists as "not yet" must raise
ms.DeviceError. Each distinct structure compiles once (g++ on the emulator), so the trees are
few and small.
"""
import numpy as np
import pytest

import mshadow as ms

from gpu_testing import MAKERS, cpu_from, gpu_device, gpu_from, host, store  # noqa: F401


def assert_same_bits(got, want, msg=""):
    """Equal values and, for floats, equal bit patterns (signed zeros, NaN payloads)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                  want.shape, want.dtype)
    np.testing.assert_array_equal(got, want, err_msg=msg)
    if got.dtype.kind == "f":
        u = f"u{got.dtype.itemsize}"
        bad = np.flatnonzero(got.view(u) != want.view(u))
        assert bad.size == 0, (f"{msg}: equal values, different bits at flat "
                               f"{bad[:5].tolist()}: {got.ravel()[bad[:5]]} vs "
                               f"{want.ravel()[bad[:5]]}")


def assert_sums_close(got, want, dtype, msg=""):
    tol = (dict(rtol=1e-12, atol=1e-11) if np.dtype(dtype) == np.float64
           else dict(rtol=1e-5, atol=1e-4))
    np.testing.assert_allclose(got, want, err_msg=msg, **tol)


@ms.op.define
def _maxoftwo(a, b):
    """mshadow's guide/defop.cpp operator (a defined operator, traced and inlined)."""
    return ms.op.where(a > b, a, b)


# ---- the abstract trees ---------------------------------------------------------------------
# ("leaf", array, pad, transposed)  a tensor of the array (``.T`` of it when transposed: the
#                                   array is then stored with the axes swapped)
# ("scalar", value)
# ("un", name, a) / ("bin", name, a, b) / ("T", a) / ("cast", dtype, a)
# ("ext", kind, params, *children)  an extension (nested trees below)

FLOAT_UNARY = ["relu", "abs", "neg", "square", "sign", "exp", "tanh", "sigmoid", "softplus",
               "sqrt", "log1p"]
INT_UNARY = ["relu", "abs", "neg", "square", "sign"]
BINARY = ["plus", "minus", "mul", "div", "maximum", "minimum", "maxoftwo", "where", "clip",
          "rsub"]
CAST_FROM = {np.dtype(np.float32): np.float64, np.dtype(np.float64): np.int32,
             np.dtype(np.int32): np.float32}


def _clip(x, lo, hi):
    return ms.F(ms.op.clip, x, lo, hi)


def build(node, dev):
    """The expression of ``node`` over ``dev`` ("cpu" or "gpu") tensors."""
    kind = node[0]
    if kind == "leaf":
        _, arr, pad, trans = node
        t = MAKERS[dev](arr, pad)
        return t.T if trans else t
    if kind == "scalar":
        return node[1]
    if kind == "T":
        return build(node[1], dev).T
    if kind == "cast":
        return ms.tcast(node[1], build(node[2], dev))
    if kind == "un":
        name, a = node[1], build(node[2], dev)
        if name == "neg":
            return -a
        if name in ("exp", "softplus"):
            return ms.F(getattr(ms.op, name), _clip(a, -3.0, 3.0))
        if name in ("sqrt", "log1p"):
            return ms.F(getattr(ms.op, name), ms.F(ms.op.abs, a))
        if name == "square" and node[3]:           # integers: kept small (no overflow)
            return _clip(ms.F(ms.op.square, a), -100, 100)
        return ms.F(getattr(ms.op, name), a)
    if kind == "bin":
        name, a, b, small = node[1], build(node[2], dev), build(node[3], dev), node[4]
        if name == "plus":
            return a + b
        if name == "minus":
            return a - b
        if name == "rsub":
            return b - a
        if name == "mul":
            return _clip(a * b, -100, 100) if small else a * b
        if name == "div":
            return a / (abs(b) + 1 if node[3][0] == "scalar" else ms.F(ms.op.abs, b) + 1)
        if name == "where":
            return ms.F(ms.op.where, a > b, a, b)
        if name == "clip":
            return _clip(a, -1, 2)
        return ms.F({"maximum": ms.op.maximum, "minimum": ms.op.minimum,
                     "maxoftwo": _maxoftwo}[name], a, b)
    assert kind == "ext"
    return build_ext(node, dev)


def desc(node):
    kind = node[0]
    if kind == "leaf":
        _, arr, pad, trans = node
        s = f"{'P' if pad else 't'}{list(arr.shape)}{arr.dtype.char}"
        return s + ".T" if trans else s
    if kind == "scalar":
        return repr(node[1])
    if kind == "T":
        return f"({desc(node[1])}).T"
    if kind == "cast":
        return f"tcast({np.dtype(node[1]).name}, {desc(node[2])})"
    if kind == "un":
        return f"{node[1]}({desc(node[2])})"
    if kind == "bin":
        return f"{node[1]}({desc(node[2])}, {desc(node[3])})"
    return f"{node[1]}{node[2]}({', '.join(desc(c) for c in node[3:])})"


def values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-2, 2, size=shape).astype(dtype)
    return rng.integers(-4, 5, size=shape).astype(dtype)


def leaf(rng, shape, dtype, may_transpose=True):
    trans = may_transpose and len(shape) == 2 and rng.random() < 0.25
    arr = values(rng, shape[::-1] if trans else shape, dtype)
    return ("leaf", arr, bool(rng.random() < 0.5), trans)


def scalar(rng, dtype):
    if np.dtype(dtype).kind == "f":
        return ("scalar", float(rng.choice([0.5, -1.5, 2.0, rng.uniform(-2, 2)])))
    return ("scalar", int(rng.choice([2, -1, 3])))


def ew_tree(rng, shape, dtype, depth, budget):
    """A random element-wise tree of ``shape``; ``budget``: a one-item list of leaves left."""
    dtype = np.dtype(dtype)
    if depth == 0 or budget[0] <= 1 or rng.random() < 0.1:
        budget[0] -= 1
        return leaf(rng, shape, dtype)
    r = rng.random()
    if r < 0.1 and len(shape) == 2:
        return ("T", ew_tree(rng, shape[::-1], dtype, depth - 1, budget))
    if r < 0.2:
        src = CAST_FROM[dtype]
        return ("cast", dtype.type, ew_tree(rng, shape, src, min(depth - 1, 1), budget))
    if r < 0.45:
        names = FLOAT_UNARY if dtype.kind == "f" else INT_UNARY
        return ("un", str(rng.choice(names)), ew_tree(rng, shape, dtype, depth - 1, budget),
                dtype.kind != "f")
    name = str(rng.choice(BINARY))
    a = ew_tree(rng, shape, dtype, depth - 1, budget)
    b = (scalar(rng, dtype) if name != "where" and rng.random() < 0.3
         else ew_tree(rng, shape, dtype, depth - 1, budget))
    return ("bin", name, a, b, dtype.kind != "f")


def root_tree(rng, shape, dtype):
    t = ew_tree(rng, shape, dtype, 3, [7])
    while t[0] == "leaf":                          # an expression, not a bare tensor
        t = ("bin", "plus", t, scalar(rng, dtype), False)
    return t


def tree_ops(node, acc):
    if node[0] in ("un", "bin"):
        acc.add(node[1])
    for c in node[1:]:
        if isinstance(c, tuple):
            tree_ops(c, acc)
    return acc


# ---- 1. random element-wise trees, every saver, pitched and unpitched ----------------------

EW_DTYPES = [np.float32, np.float64, np.int32]
EW_SHAPES = [(3, 70), (5, 7), (2, 3, 65), (4, 66)]
EW_SEEDS = range(4)


def _ew_case(dtype, seed):
    rng = np.random.default_rng([seed, EW_DTYPES.index(dtype), 1])
    shape = EW_SHAPES[seed % len(EW_SHAPES)]
    return rng, shape, root_tree(rng, shape, dtype)


def test_the_element_wise_trees_cover_the_operators():
    """The trees below (drawn, not run) use most operators, .T and tcast."""
    fl, it, kinds = set(), set(), set()
    for dtype in EW_DTYPES:
        for seed in EW_SEEDS:
            tree = _ew_case(dtype, seed)[2]
            (fl if np.dtype(dtype).kind == "f" else it).update(tree_ops(tree, set()))
            kinds.update(k for k in ("'T'", "'cast'", "'scalar'") if k in repr(tree))
    assert len(fl & set(FLOAT_UNARY)) >= 6 and len(fl & set(BINARY)) >= 6, fl
    assert len(it) >= 4, it
    assert {"'T'", "'cast'", "'scalar'"} <= kinds, kinds


@pytest.mark.parametrize("seed", EW_SEEDS)
@pytest.mark.parametrize("dtype", EW_DTYPES, ids=lambda d: np.dtype(d).name)
def test_random_element_wise_trees_store_the_cpu_bits(dtype, seed):
    rng, shape, tree = _ew_case(dtype, seed)
    start = values(rng, shape, dtype)
    pad = bool(rng.random() < 0.5)
    c, g = cpu_from(start, pad), gpu_from(start, pad)
    for saver in ("=", "+=", "-="):
        with np.errstate(all="ignore"):
            store(c, build(tree, "cpu"), saver)
            store(g, build(tree, "gpu"), saver)
        assert_same_bits(host(g), host(c), f"dst{'(pitched)' if pad else ''} {saver} "
                                           f"{desc(tree)}")


# ---- 2. nested extensions over expressions --------------------------------------------------

VIEWS = ("broadcast", "broadcast_with_axis", "crop", "slice_axis", "flip", "T")
GATHERS = ("pad", "pool", "take", "concat", "unpack_patch2col", "upsampling_nearest")
MAX_ELEMS = 2500
REDS = {"maximum": ms.red.maximum, "minimum": ms.red.minimum, "sum": ms.red.sum}


def build_ext(node, dev):
    _, kind, p = node[:3]
    kids = [build(c, dev) for c in node[3:]]
    if kind == "pad":
        return ms.pad(kids[0], *p)
    if kind == "pool":
        ky, kx, sy, sx, red = p
        return ms.pool(kids[0], ky, kx, sy, sx, REDS[red])
    if kind == "take":
        return ms.take(kids[0], kids[1])
    if kind == "concat":
        return ms.concat(kids[0], kids[1], p)
    if kind == "unpack_patch2col":
        return ms.unpack_patch2col(kids[0], *p)
    if kind == "upsampling_nearest":
        return ms.upsampling_nearest(kids[0], p)
    if kind == "broadcast":
        return ms.broadcast(kids[0], *p)
    if kind == "broadcast_with_axis":
        return ms.broadcast_with_axis(kids[0], *p)
    if kind == "crop":
        return ms.crop(kids[0], *p)
    if kind == "slice_axis":
        return ms.slice_axis(kids[0], *p)
    if kind == "flip":
        return ms.flip(kids[0], p)
    assert kind == "T"
    return kids[0].T


def _sized(shape):
    return all(s >= 1 for s in shape) and int(np.prod(shape)) <= MAX_ELEMS


def mix(rng, shape, dtype):
    """A depth-0 source: a leaf or a small element-wise expression of leaves."""
    k = rng.integers(5)
    a = leaf(rng, shape, dtype)
    if k <= 1:
        return a
    if k == 2:
        return ("un", "relu" if np.dtype(dtype).kind != "f" else str(rng.choice(
            ["relu", "tanh", "exp", "abs"])), a, False)
    return ("bin", str(rng.choice(["plus", "mul", "maximum"])), a,
            scalar(rng, dtype) if k == 3 else leaf(rng, shape, dtype), False)


def ext_node(rng, kind, out, dtype, depth, gathers):
    """An extension of ``kind`` whose output has shape ``out``, or None when none fits. A
    view's source holds no gather (a view of a gather is not evaluated on the GPU yet)."""
    sub = lambda shape, g=gathers: nested(rng, shape, dtype, depth - 1, g)   # noqa: E731
    nd = len(out)
    if kind == "pad" and nd >= 2:
        py, px = int(rng.integers(3)), int(rng.integers(3))
        src = out[:-2] + (out[-2] - 2 * py, out[-1] - 2 * px)
        if _sized(src):
            return ("ext", "pad", (py, px), sub(src))
    elif kind == "pool" and nd >= 2:
        ky, kx, sy, sx = (int(v) for v in rng.integers(1, [4, 4, 3, 3]))
        H = (out[-2] - 1) * sy + ky + int(rng.integers(sy))
        W = (out[-1] - 1) * sx + kx + int(rng.integers(sx))
        src = out[:-2] + (H, W)
        if _sized(src):
            red = str(rng.choice(["maximum", "sum", "minimum"]))
            return ("ext", "pool", (ky, kx, sy, sx, red), sub(src))
    elif kind == "take" and nd == 2:
        R = int(rng.integers(1, 6))
        idx = rng.integers(0, R, size=out[0])
        idx = idx.astype(np.int32 if rng.random() < 0.5 else np.float32)
        return ("ext", "take", (), ("leaf", idx, False, False), sub((R, out[1])))
    elif kind == "concat":
        dims = [d for d in range(nd) if out[d] >= 2]
        if dims:
            d = int(rng.choice(dims))
            na = int(rng.integers(1, out[d]))
            sa, sb = list(out), list(out)
            sa[d], sb[d] = na, out[d] - na
            return ("ext", "concat", d, sub(tuple(sa)), mix(rng, tuple(sb), dtype))
    elif kind == "unpack_patch2col" and nd == 2:
        R, Cc = out
        ky = int(rng.choice([d for d in (1, 2, 3) if R % d == 0]))
        kx = int(rng.choice([d for d in (1, 2, 3) if (R // ky) % d == 0]))
        C = R // (ky * kx)
        N = int(rng.choice([d for d in (1, 2, 3) if Cc % d == 0]))
        oh = int(rng.choice([d for d in (1, 2, 3, 4) if (Cc // N) % d == 0]))
        ow = Cc // N // oh
        s, dl = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        H, W = (oh - 1) * s + dl * (ky - 1) + 1, (ow - 1) * s + dl * (kx - 1) + 1
        src = ((N,) if N > 1 else ()) + (C, H, W)
        if _sized(src):
            return ("ext", "unpack_patch2col", (ky, kx, s, s, dl, dl), sub(src))
    elif kind == "upsampling_nearest" and nd >= 2:
        sc = [k for k in (2, 3) if out[-2] % k == 0 and out[-1] % k == 0]
        if sc:
            k = int(rng.choice(sc))
            return ("ext", "upsampling_nearest", k, sub(out[:-2] + (out[-2] // k,
                                                                    out[-1] // k)))
    elif kind == "broadcast":
        d = int(rng.integers(nd))
        return ("ext", "broadcast", (out, d), sub((out[d],), False))
    elif kind == "broadcast_with_axis" and nd >= 2:
        p = int(rng.integers(nd))
        return ("ext", "broadcast_with_axis", (p - 1, out[p]),
                sub(out[:p] + out[p + 1:], False))
    elif kind == "crop" and nd >= 2:
        H, W = out[-2] + int(rng.integers(3)), out[-1] + int(rng.integers(3))
        sh, sw = int(rng.integers(H - out[-2] + 1)), int(rng.integers(W - out[-1] + 1))
        if _sized(out[:-2] + (H, W)):
            return ("ext", "crop", (out[-2:], sh, sw), sub(out[:-2] + (H, W), False))
    elif kind == "slice_axis":
        a, b = int(rng.integers(nd)), int(rng.integers(3))
        src = list(out)
        src[a] += b + int(rng.integers(3))
        if _sized(src):
            return ("ext", "slice_axis", (a, b, b + out[a]), sub(tuple(src), False))
    elif kind == "flip":
        return ("ext", "flip", int(rng.integers(nd)), sub(out, False))
    elif kind == "T" and nd == 2:
        return ("ext", "T", (), sub(out[::-1], False))
    return None


def nested(rng, out, dtype, depth, gathers=True):
    out = tuple(int(s) for s in out)
    if depth == 0:
        return mix(rng, out, dtype)
    views, gathers_ = list(VIEWS), list(GATHERS if gathers else ())
    rng.shuffle(views)
    rng.shuffle(gathers_)
    # the outer level a gather where one fits (a view over expressions is pushed to its
    # leaves; a gather over them is what fuses a source into a kernel)
    kinds = gathers_ + views if depth >= 2 else list(rng.permutation(views + gathers_))
    for kind in kinds:
        n = ext_node(rng, kind, out, dtype, depth, gathers)
        if n is None:
            continue
        k = rng.integers(4)                         # element-wise operators around it
        if k == 1:
            return ("un", "relu" if np.dtype(dtype).kind != "f" else "tanh", n, False)
        if k == 2:
            return ("bin", "mul", n, scalar(rng, dtype), False)
        if k == 3:
            return ("bin", "minus", mix(rng, out, dtype), n, False)
        return n
    raise AssertionError(f"no extension makes {out}")


NESTED_SHAPES = [(6, 70), (2, 3, 6, 9), (12, 9), (4, 6, 8), (9, 12)]
NESTED_SEEDS = range(9)


@pytest.mark.parametrize("seed", NESTED_SEEDS)
def test_random_nested_extensions_store_the_cpu_bits(seed):
    dtype = np.int32 if seed % 4 == 3 else np.float32
    rng = np.random.default_rng([seed, 2])
    shape = NESTED_SHAPES[seed % len(NESTED_SHAPES)]
    tree = nested(rng, shape, dtype, 2)
    saver = ("=", "+=", "-=")[seed % 3]
    start = values(rng, shape, dtype)
    pad = seed % 2 == 0
    c, g = cpu_from(start, pad), gpu_from(start, pad)
    store(c, build(tree, "cpu"), saver)
    store(g, build(tree, "gpu"), saver)
    assert_same_bits(host(g), host(c), f"dst {saver} {desc(tree)}")


_A4 = np.random.default_rng(21).uniform(-2, 2, (2, 3, 8, 70)).astype(np.float32)
_M = np.random.default_rng(22).uniform(-2, 2, (6, 70)).astype(np.float32)
_IDX = np.array([5, 0, 3, 3, 1], np.int32)
NESTED_NAMED = {   # name: (make(x, m, idx), output shape)
    "pool_of_relu": (lambda x, m, i: ms.pool(ms.F(ms.op.relu, x * 2), 2, 2, 2, 2),
                     (2, 3, 4, 35)),
    "pool_sum_of_pad": (lambda x, m, i: ms.pool(ms.pad(x - 1, 1), 3, 3, 1, 1, ms.red.sum),
                        (2, 3, 8, 70)),
    "pad_of_tanh_times": (lambda x, m, i: ms.pad(ms.F(ms.op.tanh, x) * x, 2, 1) + 1,
                          (2, 3, 12, 72)),
    "take_of_expression": (lambda x, m, i: ms.take(i, m * 3 - ms.F(ms.op.exp, m)),
                           (5, 70)),
    "take_of_pool": (lambda x, m, i: ms.take(i, ms.pool(m, 1, 2, 1, 1)), (5, 69)),
    "concat_of_gathers": (lambda x, m, i: ms.concat(ms.pad(m, 1), ms.pad(m * 2, 1), 0),
                          (16, 72)),
    "im2col_of_pad_of_exp": (lambda x, m, i: ms.unpack_patch2col(
        ms.pad(ms.F(ms.op.exp, x[0]) - 1, 1), 3, 3, 1), (27, 8 * 70)),
    "broadcast_of_row_expression": (lambda x, m, i: ms.broadcast(m[2] * 2 - m[0], (4, 70), 1)
                                    + ms.broadcast_with_axis(m[1] * 0.5, -1, 4), (4, 70)),
    "crop_slice_of_expressions": (lambda x, m, i: ms.crop(x * 2, (4, 60), 1, 3)
                                  + ms.slice_axis(ms.slice_axis(x - 1, 3, 5, 65), 2, 2, 6),
                                  (2, 3, 4, 60)),
}


@pytest.mark.parametrize("name", sorted(NESTED_NAMED))
def test_named_nested_extensions_store_the_cpu_bits(name):
    make, shape = NESTED_NAMED[name]
    start = np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)
    c, g = cpu_from(start), gpu_from(start, pad=False)
    store(c, make(cpu_from(_A4), cpu_from(_M), cpu_from(_IDX)), "-=")
    store(g, make(gpu_from(_A4), gpu_from(_M), gpu_from(_IDX)), "-=")
    assert_same_bits(host(g), host(c), name)


# ---- 3. reductions over expressions ----------------------------------------------------------

_X = np.random.default_rng(31).uniform(-3, 3, (3, 5, 70)).astype(np.float32)
_Y = np.random.default_rng(32).uniform(-3, 3, (3, 5, 70)).astype(np.float32)
_XI = np.random.default_rng(33).integers(-50, 50, (3, 5, 70)).astype(np.int32)
# name: (make(x, y), arrays (x, y), output shape, exact?)
REDUCTIONS = {
    "sumall_except_dim_1": (lambda x, y: ms.sumall_except_dim(x * 2 + y, 1), (_X, _Y),
                            (5,), False),
    "sumall_except_dim_2_f64": (lambda x, y: ms.sumall_except_dim(
        ms.F(ms.op.relu, x) - y * 0.5, 2), (_X.astype(np.float64), _Y.astype(np.float64)),
        (70,), False),
    "sum_rows_of_transposed": (lambda x, y: ms.sum_rows(ms.F(ms.op.tanh, x[1].T) * 2 + y[2].T),
                               (_X, _Y), (5,), False),
    "sum_rows_int": (lambda x, y: ms.sum_rows(ms.reshape(x * 3 - y, (15, 70))), (_XI, _XI[::-1]),
                     (70,), True),
    "with_axis_max_of_exp": (lambda x, y: ms.reduce_with_axis(
        ms.F(ms.op.exp, ms.F(ms.op.clip, x, -3.0, 3.0)) * y, 0, ms.red.maximum), (_X, _Y),
        (5, 70), True),
    "with_axis_min_of_flip": (lambda x, y: ms.reduce_with_axis(ms.flip(x, 1) - y, 2,
                                                               ms.red.minimum),
                              (_X, _Y), (3, 5), True),
    "with_axis_argmax": (lambda x, y: ms.reduce_with_axis(x * y, 1, ms.red.maximum, mask=True),
                         (_X, _Y), (3, 70), True),
    "with_axis_sum_int": (lambda x, y: ms.reduce_with_axis(x * y, 2, ms.red.sum), (_XI, _XI),
                          (3, 5), True),
    "keepdim_max": (lambda x, y: ms.reduce_keepdim(x - y, 1, ms.red.maximum), (_X, _Y),
                    (3, 1, 70), True),
    "keepdim_sum": (lambda x, y: ms.reduce_keepdim(ms.F(ms.op.abs, x) + y, 2, ms.red.sum),
                    (_X, _Y), (3, 5, 1), False),
    "keepdim_argmin": (lambda x, y: ms.reduce_keepdim(x + y, 0, ms.red.minimum, mask=True),
                       (_X, _Y), (1, 5, 70), True),
    "reduce_except_dim_max": (lambda x, y: ms.reduce_except_dim(
        ms.reshape(x * 2, (15, 70)), 1, ms.red.maximum), (_X, _Y), (70,), True),
    "sum_rows_of_pad": (lambda x, y: ms.sum_rows(ms.pad(x[0] * 2, 1)), (_X, _Y), (72,),
                        False),
    "with_axis_max_of_concat": (lambda x, y: ms.reduce_with_axis(
        ms.concat(x, y * 2, 0), 0, ms.red.maximum), (_X, _Y), (5, 70), True),
    "sumall_except_dim_of_pool": (lambda x, y: ms.sumall_except_dim(
        ms.pool(x + y, 2, 2, 1, 2), 0), (_X, _Y), (3,), False),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_of_expressions_match_the_cpu(name):
    """Maximum, minimum, arg forms and integer sums bit for bit; float sums close. (A
    source holding a gather raised a false DeviceError: its arguments leaf read as cpu.)"""
    make, arrays, shape, exact = REDUCTIONS[name]
    out_dtype = arrays[0].dtype          # (the arg forms store the index in it too)
    start = values(np.random.default_rng(5), shape, out_dtype)
    c, g = cpu_from(start), gpu_from(start, pad=len(shape) > 1)
    for saver in ("=", "+="):
        store(c, make(*[cpu_from(a) for a in arrays]), saver)
        store(g, make(*[gpu_from(a, pad=i == 0) for i, a in enumerate(arrays)]), saver)
        if exact:
            assert_same_bits(host(g), host(c), f"{name} {saver}")
        else:
            assert_sums_close(host(g), host(c), out_dtype, f"{name} {saver}")


SUMS = {   # name: (make(x), array, exact?)
    "float32": (lambda x: x * 2 - ms.F(ms.op.relu, x), _X, False),
    "float64_transposed": (lambda x: ms.F(ms.op.tanh, x.T) + 1,
                           _X[0].astype(np.float64), False),
    "int32": (lambda x: x * 3 + 1, _XI, True),
    "of_a_view": (lambda x: ms.flip(x, 2) * x, _X, False),
    "of_a_gather": (lambda x: ms.pad(x * 2, 1), _X, False),
}


@pytest.mark.parametrize("name", sorted(SUMS))
def test_sum_of_a_gpu_expression_is_the_cpu_scalar(name):
    make, a, exact = SUMS[name]
    want = ms.sum(make(cpu_from(a)))
    got = ms.sum(make(gpu_from(a)))
    assert type(got) is type(want) is a.dtype.type
    if exact:
        assert got == want
    else:
        assert_sums_close(np.asarray(got), np.asarray(want), a.dtype, name)


# ---- 4. a destination read by its own expression ---------------------------------------------

_PERM = np.random.default_rng(41).permutation(70).astype(np.int32)
# name: (statement(t, make), shape, dtype): ``make`` builds index tensors on t's device
ALIASED = {
    "T_plus_self": (lambda t, mk: store(t, t.T + t, "="), (66, 66), np.float32),
    "plus_T_scaled": (lambda t, mk: store(t, t.T * 0.5 - t, "+="), (66, 66), np.float64),
    "concat_of_own_slices": (lambda t, mk: store(
        t, ms.concat(t.slice(35, 70), t.slice(0, 35), 0), "="), (70, 66), np.float32),
    "concat_of_own_columns": (lambda t, mk: store(
        t, ms.concat(ms.slice_axis(t, 1, 40, 66), ms.slice_axis(t, 1, 0, 40) * 2, 1), "-="),
        (3, 66), np.int32),
    "minus_flip": (lambda t, mk: store(t, ms.flip(t, 0) * 2, "-="), (70, 66), np.float32),
    "pool_of_own_pad": (lambda t, mk: store(t, ms.pool(ms.pad(t, 1), 3, 3, 1, 1), "="),
                        (2, 9, 66), np.float32),
    "take_permutation_of_self": (lambda t, mk: store(t, ms.take(mk(_PERM), t * 2), "="),
                                 (70, 66), np.float32),
    "neighbour_slices": (lambda t, mk: store(t.slice(0, 69), t.slice(1, 70) * 2
                                             + t.slice(0, 69), "="), (70, 66), np.float32),
    "broadcast_own_row": (lambda t, mk: store(t, ms.broadcast(t[0], t.shape, 1), "+="),
                          (5, 66), np.float32),
    "sum_rows_into_own_row": (lambda t, mk: store(t[0], ms.sum_rows(t), "="), (6, 70),
                              np.int32),
    "keepdim_max_into_own_row": (lambda t, mk: store(
        t.slice(0, 1), ms.reduce_keepdim(t * 2, 0, ms.red.maximum), "="), (6, 70),
        np.float32),
}


@pytest.mark.parametrize("name", sorted(ALIASED))
def test_aliased_statements_match_the_same_statement_on_the_cpu(name):
    """The destination (or memory of it) is read at other positions than it is written:
    the GPU's result is the CPU's (both evaluate through a temporary), bit for bit."""
    stmt, shape, dtype = ALIASED[name]
    start = values(np.random.default_rng(6), shape, dtype)
    c, g = cpu_from(start), gpu_from(start, pad=True)
    stmt(c, cpu_from)
    stmt(g, gpu_from)
    assert_same_bits(host(g), host(c), name)


# ---- 5. devices: mixed operands, and the forms that do not run on the GPU yet ----------------

MIXED = {
    "plus": lambda d, g, c: store(d, g + c, "="),
    "cpu_leaf_under_a_gather": lambda d, g, c: store(d, ms.pad(c, 0) * 2 + g, "+="),
    "concat": lambda d, g, c: store(d, ms.concat(g.slice(0, 1), c.slice(1, 3), 0), "="),
    "cpu_tensor_into_gpu": lambda d, g, c: store(d, c, "="),
    "reduction_of_a_cpu_source": lambda d, g, c: store(d[0], ms.sum_rows(c), "="),
    "gpu_expression_into_cpu": lambda d, g, c: store(c, g * 2, "-="),
    "sum": lambda d, g, c: ms.sum(c * g),
}


@pytest.mark.parametrize("name", sorted(MIXED))
def test_mixed_device_expressions_raise_device_error_naming_both(name):
    a = values(np.random.default_rng(7), (3, 70), np.float32)
    g, c = gpu_from(a), cpu_from(a)
    d = gpu_from(a * 0 + 1)
    with pytest.raises(ms.DeviceError, match=r"(?s)gpu.*cpu|cpu.*gpu"):
        MIXED[name](d, g, c)
    np.testing.assert_array_equal(host(d), np.ones((3, 70), np.float32))   # nothing stored
    np.testing.assert_array_equal(host(c), a)


NOT_YET = {   # docs/gpu.md's "not yet" column: name: statement(dst 3x70, x 3x70, v 3)
    "softmax_of_float16": lambda d, x, v: ms.softmax(
        ms.new_tensor((3, 70), 0, dtype=np.float16, device=d.device),
        ms.new_tensor((3, 70), 1, dtype=np.float16, device=x.device)),
    "random_gamma_on_gpu": lambda d, x, v: ms.Random(ms.gpu, 0).sample_gamma(d),
    "random_into_a_gpu_tensor": lambda d, x, v: ms.Random(ms.cpu, 0).sample_uniform(d),
}


@pytest.mark.parametrize("name", sorted(NOT_YET))
def test_forms_not_on_the_gpu_yet_raise_device_error(name):
    a = values(np.random.default_rng(8), (3, 70), np.float32)
    x, v = gpu_from(a), gpu_from(np.array([0, 1, 2], np.float32))
    d = gpu_from(a * 0 + 1)
    with pytest.raises(ms.DeviceError):
        NOT_YET[name](d, x, v)
    np.testing.assert_array_equal(host(d), np.ones((3, 70), np.float32))   # nothing stored
    # the same statement over cpu tensors runs (it is the GPU path that refuses it)
    if name != "random_gamma_on_gpu":
        dc = cpu_from(a * 0 + 1)
        NOT_YET[name](dc, cpu_from(a), cpu_from(np.array([0, 1, 2], np.float32)))


# name: statement(dst 3x70, x 3x70): views of expressions, each source staged into a gpu
# temporary (executor._stage_views), nested, with scalars inside and outside the views
VIEWS_OF_EXPRESSIONS = {
    "flip_of_a_gather": lambda d, x: store(d, ms.flip(ms.pad(x, 0), 0), "="),
    "T_of_a_gather": lambda d, x: store(d, ms.pad(x.slice(0, 3).T, 0).T * 1.5, "+="),
    "crop_of_an_expression": lambda d, x: store(
        d, ms.crop(ms.pad(x, 1) * 2 - 0.25, (3, 70), 1, 1) + 3, "-="),
    "broadcast_to_of_a_gather": lambda d, x: store(
        d, ms.broadcast_to(ms.pool(x.slice(0, 1), 1, 1, 1, 1), (3, 70)), "+="),
    "nested": lambda d, x: store(
        d, ms.flip(ms.crop(ms.pad(ms.flip(ms.pad(x, 1) * 0.5, 1) - 2, 0) * 2, (3, 70), 1, 1),
                   0) * 1.25 + ms.slice_axis(x, 1, 0, 70) - 1, "="),
    "reads_its_own_destination": lambda d, x: store(d, ms.flip(ms.pad(d, 0) * 2, 1), "="),
    "implicit_dot": lambda d, x: store(
        d, ms.implicit_dot(ms.slice_axis(x, 1, 0, 3), x) * 0.5 + x, "+="),
    "implicit_dot_of_T_and_views": lambda d, x: store(
        d, ms.implicit_dot(ms.slice_axis(x, 1, 2, 5).T.T, ms.broadcast_to(x[0:1], (3, 70))),
        "-="),
    "implicit_dot_of_expressions": lambda d, x: store(
        d, ms.implicit_dot(ms.slice_axis(x, 1, 0, 3) * 2, ms.pad(x, 0) + 1), "="),
    "implicit_dot_reading_its_destination": lambda d, x: store(
        d, ms.implicit_dot(ms.slice_axis(d, 1, 0, 3), d), "="),
}


@pytest.mark.parametrize("name", sorted(VIEWS_OF_EXPRESSIONS))
def test_views_of_expressions_give_the_cpu_bits(name):
    """A view of an expression runs as two kernels, the source into a temporary, then the
    view read in place over it: the CPU's bits, every saver, pitched operands."""
    a = values(np.random.default_rng(9), (3, 70), np.float32)
    start = values(np.random.default_rng(10), (3, 70), np.float32)
    dc, dg = cpu_from(start), gpu_from(start)
    VIEWS_OF_EXPRESSIONS[name](dc, cpu_from(a))
    VIEWS_OF_EXPRESSIONS[name](dg, gpu_from(a))
    assert_same_bits(host(dg), host(dc), name)


# name: (dst shape, statement(dst, x 3x70, v 3 holding 2, 0, 1)): gathers whose index is an
# expression or a view, staged into a gpu index tensor first (executor._stage_views), then
# range-checked on the host as any index
INDEX_EXPRESSIONS = {
    "take": ((3, 70), lambda d, x, v: store(d, ms.take(ms.tcast(np.float32, v * 1 + 0), x),
                                            "+=")),
    "take_of_a_view_index": ((3, 70), lambda d, x, v: store(
        d, ms.take(ms.flip(v, 0), x) * 2, "=")),
    "one_hot_encode": ((3, 70), lambda d, x, v: store(
        d, ms.one_hot_encode(v * 2 + 5, 70) * 3, "-=")),
    "choose_row": ((3,), lambda d, x, v: store(
        d, ms.mat_choose_row_element(x, v * 3 + 1) + 1, "=")),
    "nested": ((3, 70), lambda d, x, v: store(
        d, ms.take(ms.mat_choose_row_element(x * 0 + 1, v), x) - x, "=")),
}


@pytest.mark.parametrize("name", sorted(INDEX_EXPRESSIONS))
def test_gathers_of_index_expressions_give_the_cpu_bits(name):
    shape, run = INDEX_EXPRESSIONS[name]
    a = values(np.random.default_rng(11), (3, 70), np.float32)
    v = np.array([2, 0, 1], np.float32)
    start = values(np.random.default_rng(12), shape, np.float32)
    dc, dg = cpu_from(start), gpu_from(start)
    run(dc, cpu_from(a), cpu_from(v))
    run(dg, gpu_from(a), gpu_from(v))
    assert_same_bits(host(dg), host(dc), name)


def test_an_index_expression_out_of_range_stores_nothing():
    x, v = gpu_from(np.ones((3, 70), np.float32)), gpu_from(np.array([2, 0, 1], np.float32))
    d = gpu_from(np.full((3, 70), 5, np.float32))
    with pytest.raises(IndexError):
        d[:] = ms.take(v * 2, x)        # 4 is past the 3 rows
    np.testing.assert_array_equal(host(d), 5)
