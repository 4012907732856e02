"""Adversarial tests of the GPU expression path (mshadow/cuda/executor.py, lower.py) against
the CPU backend on the same inputs: hostile values (NaN, inf, -0.0, out-of-range floats,
integer extremes), every dtype, tcast between every pair, every operator and saver, extreme
scalars, odd and empty shapes, row views as sources and destinations, destinations read by
their own value, reductions of every reducer, products, copies, freed tensors, streams,
mixed devices, DLPack / __cuda_array_interface__ views and Random(ms.gpu).

docs/gpu.md promises the CPU's bits for element-wise, view and gather expressions (float16
included) and for maximum / minimum / arg reductions; sums within their summation order.
A destination read at other positions than it is written (by address range, whoever wraps
the memory) is evaluated through a temporary, as on the CPU.
"""
import numpy as np
import pytest

import mshadow as ms

from gpu_testing import MAKERS, cpu_from, gpu_device, gpu_from, host  # noqa: F401

# integer division by zero is defined (0) and warned about on the CPU: not what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:integer division by zero:RuntimeWarning")

ALL = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8]
_NAMES = lambda d: np.dtype(d).name   # noqa: E731


def assert_same_bytes(got, want, msg=""):
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (msg, got.shape, got.dtype,
                                                                  want.shape, want.dtype)
    if got.tobytes() != want.tobytes():
        g = got.reshape(-1)
        w = want.reshape(-1)
        bad = [i for i in range(g.size) if g[i:i + 1].tobytes() != w[i:i + 1].tobytes()]
        raise AssertionError(f"{msg}: {len(bad)} elements differ, first at flat {bad[:4]}: "
                             f"gpu {g[bad[:4]]} vs cpu {w[bad[:4]]}")


def outcome(stmt, arrays, dev, pads=None):
    """("ok", host copies of every tensor after ``stmt``, or its returned scalar) or
    ("raised", the exception's type name)."""
    ts = [MAKERS[dev](a, pad=True if pads is None else pads[i]) for i, a in enumerate(arrays)]
    try:
        with np.errstate(all="ignore"):
            r = stmt(*ts)
    except Exception as e:          # noqa: BLE001  (the same typed error is what is asked)
        return "raised", f"{type(e).__name__}: {str(e)[:160]}"
    if r is None or isinstance(r, ms.Tensor):
        return "ok", [host(t) for t in ts]
    return "ok", [np.asarray(r)]


def check_same(name, stmt, arrays, exact=True, pads=None):
    """``stmt`` on cpu and gpu tensors of ``arrays``: the same bytes (close, for float sums),
    or the same error type."""
    c = outcome(stmt, arrays, "cpu", pads)
    g = outcome(stmt, arrays, "gpu", pads)
    assert c[0] == g[0], (f"{name}: cpu {c[0]} {c[1] if c[0] == 'raised' else ''}, "
                          f"gpu {g[0]} {g[1] if g[0] == 'raised' else ''}")
    if c[0] == "raised":
        assert c[1].split(":")[0] == g[1].split(":")[0], f"{name}: cpu raised {c[1]}, gpu {g[1]}"
        return
    for x, y in zip(g[1], c[1]):
        if exact:
            assert_same_bytes(x, y, name)
        else:
            tol = dict(rtol=1e-12, atol=1e-11) if x.dtype == np.float64 else \
                dict(rtol=2e-3, atol=1e-2) if x.dtype == np.float16 else dict(rtol=1e-5,
                                                                               atol=1e-4)
            np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64),
                                       err_msg=name, equal_nan=True, **tol)


_FLOATS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e10, -1e10, 300.7, -129.5, 255.5,
                    2.0 ** 31, -2.0 ** 31 - 1, 2.0 ** 63, 65519.0, 65520.0, 1e-8, -1e-45, 6e-8,
                    3.5, -3.5])


def hostile(dt, n=20):
    """n values of dtype ``dt`` at the edges of what it and the conversions hold."""
    dt = np.dtype(dt)
    if dt.kind == "f":
        with np.errstate(all="ignore"):
            base = _FLOATS.astype(dt)
    else:
        info = np.iinfo(dt)
        base = np.array([info.min, info.max, 0, -1 if dt.kind == "i" else 1, 1, 2,
                         info.min + 1, info.max - 1, 7, 100, 127, 3, 5, 9, 11, 13, 17, 19, 23,
                         29], np.int64).astype(dt)
    return np.resize(base, n)


# ---- 1. element-wise: casts, operators, savers, scalars ------------------------------------

@pytest.mark.parametrize("src", ALL, ids=_NAMES)
def test_tcast_between_every_dtype_of_hostile_values(src):
    v = hostile(src).reshape(4, 5)
    for dst in ALL:
        check_same(f"tcast {_NAMES(src)} -> {_NAMES(dst)}",
                   lambda d, x: d.__setitem__(slice(None), ms.tcast(dst, x)),
                   [np.zeros((4, 5), dst), v], pads=[True, False])
        check_same(f"tcast {_NAMES(src)} -> {_NAMES(dst)} of .T",
                   lambda d, x: d.__setitem__(slice(None), ms.tcast(dst, x.T)),
                   [np.zeros((5, 4), dst), v])


UNARY = ["identity", "relu", "abs", "neg", "square", "sign", "exp", "log", "tanh", "sigmoid",
         "softplus", "sqrt", "log1p"]
BINARY = ["plus", "minus", "mul", "div", "maximum", "minimum", "power", "gt", "lt", "ge", "le",
          "eq", "ne", "right"]


@ms.op.define
def _hostile_op(a, b):
    """A defined operator mixing a comparison, a select and arithmetic."""
    return ms.op.where(a > b, a - b, b * 2)


@pytest.mark.parametrize("dtype", ALL, ids=_NAMES)
def test_every_operator_on_hostile_values(dtype):
    v = hostile(dtype).reshape(4, 5)
    w = np.roll(hostile(dtype), 3).reshape(4, 5)
    z = np.zeros((4, 5), dtype)
    for op in UNARY:
        check_same(f"{op}", lambda d, x: d.__setitem__(slice(None), ms.F(getattr(ms.op, op), x)),
                   [z, v])
    for op in BINARY:
        check_same(f"{op}", lambda d, x, y: d.__setitem__(
            slice(None), ms.F(getattr(ms.op, op), x, y)), [z, v, w])
    check_same("clip", lambda d, x, y: d.__setitem__(slice(None), ms.F(ms.op.clip, x, y, x)),
               [z, v, w])
    check_same("where", lambda d, x, y: d.__setitem__(slice(None), ms.F(ms.op.where, x, y, x)),
               [z, v, w])
    check_same("defined", lambda d, x, y: d.__setitem__(slice(None), ms.F(_hostile_op, x, y)
                                                        - x.T.T), [z, v, w])


def _save(d, e, saver):
    if saver == "=":
        d[:] = e
    elif saver == "+=":
        d += e
    elif saver == "-=":
        d -= e
    elif saver == "*=":
        d *= e
    else:
        d /= e


_SCALARS = [np.nan, np.inf, -np.inf, -0.0, 1e300, -1e300, 1e-300, 2 ** 40, -2 ** 40, 2 ** 63,
            -1, 255, 256, 2.5, -2.5, 65520.0, 3]


@pytest.mark.parametrize("dtype", ALL, ids=_NAMES)
def test_every_saver_and_extreme_scalars(dtype):
    v = hostile(dtype).reshape(4, 5)
    w = np.roll(hostile(dtype), 7).reshape(4, 5)
    for saver in ("=", "+=", "-=", "*=", "/="):
        check_same(f"saver {saver}", lambda d, x: _save(d, x, saver), [v, w])
        check_same(f"saver {saver} of an expression", lambda d, x: _save(d, x * 2 - d, saver),
                   [v, w])
    forms = {"x+s": lambda x, s: x + s, "s*x": lambda x, s: s * x, "x/s": lambda x, s: x / s,
             "s-x": lambda x, s: s - x, "max": lambda x, s: ms.F(ms.op.maximum, x, s),
             "pow": lambda x, s: ms.F(ms.op.power, x, s)}
    for s in _SCALARS:
        for name, f in forms.items():
            check_same(f"{name} {s!r}", lambda d, x: d.__setitem__(slice(None), f(x, s)),
                       [np.zeros((4, 5), dtype), v])
        check_same(f"= {s!r}", lambda d: d.__setitem__(slice(None), s), [v])


# ---- odd sizes, row views, shifted destinations, empty shapes -------------------------------

@pytest.mark.parametrize("n", [1, 15, 17, 31, 33, 257, 1023, 1025])
def test_odd_sizes_row_views_and_shifted_destinations(n):
    rng = np.random.default_rng(n)
    a = rng.uniform(-2, 2, (3, n)).astype(np.float32)
    b = rng.uniform(-2, 2, (3, n)).astype(np.float32)
    check_same("ew", lambda d, x: d.__setitem__(slice(None), x * 2 + ms.F(ms.op.tanh, d)),
               [a, b], pads=[True, False])
    check_same("T", lambda d, x: d.__setitem__(slice(None), x.T * 2), [a, a.T.copy()])
    check_same("row slices", lambda d, x: d.slice(1, 3).__setitem__(
        slice(None), x.slice(0, 2) * 3 - d.slice(0, 2)), [a, b])
    check_same("a row", lambda d, x: d[1].__setitem__(slice(None), x[2] - d[0]), [a, b])
    check_same("shifted forward", lambda d: d.slice(1, 3).__setitem__(
        slice(None), d.slice(0, 2) * 3), [a])
    check_same("shifted back", lambda d: d.slice(0, 2).__setitem__(
        slice(None), d.slice(1, 3) * 3 + d.slice(0, 2)), [a])
    check_same("f16 of a row view", lambda d, x: d.slice(1, 2).__setitem__(
        slice(None), ms.tcast(np.float16, x.slice(2, 3)) * 3),
        [a.astype(np.float16), b])
    if n <= 33:
        sq = rng.uniform(-2, 2, (n, n)).astype(np.float32)
        check_same("T of self", lambda d: d.__setitem__(slice(None), d.T + d), [sq])
        check_same("T of self -=", lambda d: d.__isub__(d.T * 0.5), [sq])


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 0, 3), (0, 0)])
def test_empty_shapes(shape):
    a = np.zeros(shape, np.float32)
    check_same("ew", lambda d, x: d.__setitem__(slice(None), x * 2 + 1), [a, a])
    check_same("sum", lambda x: ms.sum(x * 2), [a])
    if len(shape) == 2:
        check_same("sum_rows", lambda d, x: d.__setitem__(slice(None), ms.sum_rows(x)),
                   [np.ones(shape[1:], np.float32), a])
        for red in (ms.red.maximum, ms.red.minimum, ms.red.sum):
            for mask in (False, True):
                for ax in (0, 1):
                    check_same(f"with_axis {ax} {red} {mask}", lambda d, x: d.__setitem__(
                        slice(None), ms.reduce_with_axis(x, ax, red, mask=mask)),
                        [np.ones(shape[1 - ax:2 - ax], np.float32), a])


# ---- 2. destinations read by their own value ------------------------------------------------

def test_a_gather_of_an_expression_of_the_destination():
    """``t[:] = pool(pad(t * 1, 1, 0), 3, 1, 1, 1, sum)``: each row the sum of itself and its
    neighbours above and below. The CPU evaluates it through a temporary; the GPU runs it in
    place (executor._reads_dst_elsewhere treats a leaf under a gather's *expression* source
    as read at its own position), so a row reads the row above after it was overwritten.
    (With the plain source ``pad(t, 1, 0)`` both agree.)"""
    a = np.arange(24, dtype=np.float32).reshape(1, 8, 3)
    want = np.pad(a, ((0, 0), (1, 1), (0, 0)))
    want = want[:, :-2] + want[:, 1:-1] + want[:, 2:]
    for make in (lambda t: t, lambda t: t * 1):
        c = cpu_from(a)
        c[:] = ms.pool(ms.pad(make(c), 1, 0), 3, 1, 1, 1, ms.red.sum)
        np.testing.assert_array_equal(host(c), want)
    g = gpu_from(a)
    g[:] = ms.pool(ms.pad(g, 1, 0), 3, 1, 1, 1, ms.red.sum)
    np.testing.assert_array_equal(host(g), want)         # the plain source: through a temporary
    g = gpu_from(a)
    g[:] = ms.pool(ms.pad(g * 1, 1, 0), 3, 1, 1, 1, ms.red.sum)
    np.testing.assert_array_equal(host(g), want)         # fails: read in place


def test_implicit_dot_reading_its_destination_as_a_plain_operand():
    """``d[:] = implicit_dot(a, d)`` reads d at (k, x) for every k (and ``implicit_dot(d, b)``
    at (y, k)): other positions than it writes, so through a temporary as on the CPU. The
    GPU runs it in place: an implicit_dot operand is bound as a plain, untransposed tensor
    leaf, which _reads_dst_elsewhere lets through when it has dst's address and pitch."""
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (5, 5)).astype(np.float32)
    d0 = rng.integers(-3, 4, (5, 40)).astype(np.float32)
    b = rng.integers(-3, 4, (40, 40)).astype(np.float32)
    for name, stmt, want in [("rhs", lambda d, x, y: ms.implicit_dot(x, d), a @ d0),
                             ("lhs", lambda d, x, y: ms.implicit_dot(d, y), d0 @ b)]:
        c = cpu_from(d0)
        c[:] = stmt(c, cpu_from(a), cpu_from(b))
        np.testing.assert_array_equal(host(c), want, err_msg=f"cpu {name}")
        g = gpu_from(d0)
        g[:] = stmt(g, gpu_from(a), gpu_from(b))
        np.testing.assert_array_equal(host(g), want, err_msg=f"gpu {name}")


def test_a_source_over_the_destinations_bytes_as_another_dtype():
    """A float64 view of a float32 destination's memory, same first byte and the same row
    pitch *in elements* (64), is not dst's elements read in place: it reads bytes 8x of each
    512-byte row while dst writes bytes 4x of each 256-byte row. The CPU (numpy views of one
    buffer) evaluates through a temporary; the GPU compares pitches in elements
    (executor._reads_dst_elsewhere: ``t.stride == dst.stride``) and runs it in place."""
    from test_gpu_dlpack import _crafted, _Producer
    buf = np.arange(256, dtype=np.float32) * 0.5
    want = buf.view(np.float64).reshape(2, 64)[:, :32].astype(np.float32)
    base = buf.copy()
    c_dst = ms.from_numpy(base.reshape(4, 64)[:2, :32])
    c_src = ms.from_numpy(base.view(np.float64).reshape(2, 64)[:, :32])
    assert c_dst.stride == c_src.stride == 64
    c_dst[:] = ms.tcast(np.float32, c_src)
    np.testing.assert_array_equal(c_dst.numpy(), want)
    g = gpu_from(buf, pad=False)
    g_dst = ms.from_dlpack(_Producer(_crafted(g, (2, 32), (64, 1), dtype=(2, 32, 1))))
    g_src = ms.from_dlpack(_Producer(_crafted(g, (2, 32), (64, 1), dtype=(2, 64, 1))))
    assert g_dst.stride == g_src.stride == 64
    assert_same_bytes(g_src.to_numpy(), buf.view(np.float64).reshape(2, 64)[:, :32],
                      "the float64 view reads the buffer's bytes")
    g_dst[:] = ms.tcast(np.float32, g_src)
    np.testing.assert_array_equal(g_dst.to_numpy(), want)


def test_a_column_slice_target_on_the_gpu():
    """``slice_axis(t, 1, 1, 3)[:] = e`` (docs/extensions.md: a target, every saver) on the
    GPU as on the CPU (it raised DeviceError: targets took the CPU's path only)."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = np.full((3, 2), 7, np.float32)
    c = cpu_from(a)
    ms.slice_axis(c, 1, 1, 3)[:] = cpu_from(x) + 1
    g = gpu_from(a)
    ms.slice_axis(g, 1, 1, 3)[:] = gpu_from(x) + 1
    assert_same_bytes(host(g), host(c), "column slice target")


# ---- 3. reductions, extensions, products ----------------------------------------------------

def _hostile_block(rng, shape, dt):
    dt = np.dtype(dt)
    if dt.kind != "f":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=np.int64,
                            endpoint=True).astype(dt)
    a = rng.uniform(-3, 3, shape)
    a.ravel()[::7] = np.nan
    a.ravel()[3::11] = np.inf
    a.ravel()[5::13] = -np.inf
    a.ravel()[1::5] = -0.0
    return a.astype(dt)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8, np.int64],
                         ids=_NAMES)
def test_reductions_of_hostile_values(dtype):
    rng = np.random.default_rng(11)
    dt = np.dtype(dtype)
    for shape in [(3, 5, 7), (1, 1, 1), (2, 3, 33)]:
        x = _hostile_block(rng, shape, dt)
        for axis in range(3):
            out = shape[:axis] + shape[axis + 1:]
            for red in ("maximum", "minimum", "sum"):
                r = getattr(ms.red, red)
                exact = red != "sum" or dt.kind != "f"
                for mask in ((False, True) if red != "sum" else (False,)):
                    check_same(f"with_axis {shape} {axis} {red} {mask}", lambda d, s: d.__setitem__(
                        slice(None), ms.reduce_with_axis(s, axis, r, mask=mask)),
                        [np.zeros(out, dt), x], exact)
                    check_same(f"keepdim {shape} {axis} {red} {mask} +=", lambda d, s: d.__iadd__(
                        ms.reduce_keepdim(s * 1, axis, r, mask=mask)),
                        [np.ones(shape[:axis] + (1,) + shape[axis + 1:], dt), x], exact)
            check_same(f"sumall_except_dim {shape} {axis}", lambda d, s: d.__isub__(
                ms.sumall_except_dim(s, axis) * 2), [np.zeros((shape[axis],), dt), x],
                dt.kind != "f")
        check_same(f"sum_rows {shape}", lambda d, s: d.__setitem__(
            slice(None), ms.sum_rows(ms.reshape(s, (-1, shape[-1])))),
            [np.zeros(shape[-1:], dt), x], dt.kind != "f")
        check_same(f"ms.sum {shape}", lambda s: ms.sum(s), [x], dt.kind != "f")


def test_reductions_of_views_scales_and_savers():
    rng = np.random.default_rng(12)
    x = rng.uniform(-2, 2, (4, 6)).astype(np.float32)
    f16 = x.astype(np.float16)
    check_same("f16 keepdim max * 3.3 +=", lambda d, s: d.__iadd__(
        ms.reduce_keepdim(s, 1, ms.red.maximum) * 3.3), [np.ones((4, 1), np.float16), f16])
    check_same("f16 argmax * 0.3 -=", lambda d, s: d.__isub__(
        ms.reduce_with_axis(s, 1, ms.red.maximum, mask=True) * 0.3),
        [np.ones((4,), np.float16), f16])
    check_same("int8 argmax past 127", lambda d, s: d.__setitem__(
        slice(None), ms.reduce_with_axis(s, 1, ms.red.maximum, mask=True)),
        [np.ones((2,), np.int8), np.arange(400).reshape(2, 200).astype(np.int8)])
    check_same("int8 sum wraps", lambda d, s: d.__setitem__(slice(None), ms.sum_rows(s)),
               [np.ones((3,), np.int8), np.full((70, 3), 100, np.int8)])
    check_same("argmin of .T", lambda d, s: d.__setitem__(
        slice(None), ms.reduce_with_axis(s.T, 0, ms.red.minimum, mask=True)),
        [np.ones((4,), np.float32), x])
    check_same("max into a row view", lambda d, s: d.slice(1, 2).__setitem__(
        slice(None), ms.reduce_keepdim(s, 0, ms.red.maximum)), [np.ones((3, 6), np.float32), x])
    check_same("divto max", lambda d, s: d.__itruediv__(
        ms.reduce_with_axis(s, 0, ms.red.maximum)), [np.full(6, 2, np.float32), x])
    check_same("sum_rows of a row view", lambda d, s: d.__setitem__(
        slice(None), ms.sum_rows(s.slice(1, 3) * 2)), [np.ones((6,), np.float32), x], False)
    check_same("max into its own row", lambda d: d[0].__setitem__(
        slice(None), ms.reduce_with_axis(d * 2, 0, ms.red.maximum)), [x])


def test_extensions_nested_in_expressions():
    rng = np.random.default_rng(13)
    x = rng.uniform(-2, 2, (2, 6, 9)).astype(np.float32)
    m = rng.uniform(-2, 2, (5, 17)).astype(np.float32)
    idx = np.array([4, 0, 4, 1], np.int32)
    check_same("pool of pad of exp", lambda d, s: d.__iadd__(ms.pool(ms.pad(
        ms.F(ms.op.exp, ms.F(ms.op.clip, s, -3.0, 3.0)), 1), 3, 3, 1, 1) * 2),
        [np.zeros((2, 6, 9), np.float32), x])
    check_same("im2col", lambda d, s: d.__setitem__(slice(None), ms.unpack_patch2col(
        s * 2, 3, 3, 1) - 1), [np.zeros((2 * 9, 4 * 7), np.float32), x])
    check_same("concat take broadcast", lambda d, s, i: d.__setitem__(slice(None), ms.concat(
        ms.take(i, s), ms.broadcast(s[2] * 0.5, (1, 17), 1), 0) + ms.crop(
        ms.pad(ms.concat(s, s[0:1], 0), 1), (5, 17), 1, 1)),
        [np.zeros((5, 17), np.float32), m, idx])
    check_same("slice_axis of flip of pad", lambda d, s: d.__isub__(
        ms.slice_axis(ms.flip(ms.pad(s, 1), 1), 1, 1, 18)), [np.zeros((7, 17), np.float32), m])


def test_dot_and_batch_dot_forms():
    rng = np.random.default_rng(14)
    for dt in (np.float32, np.float64):
        M, K, N = 5, 7, 66
        a = rng.integers(-3, 4, (M, K)).astype(dt)
        b = rng.integers(-3, 4, (K, N)).astype(dt)
        d = rng.integers(-3, 4, (M, N)).astype(dt)
        sq = rng.integers(-3, 4, (33, 33)).astype(dt)
        x = rng.integers(-3, 4, (3, 4, 5)).astype(dt)
        y = rng.integers(-3, 4, (3, 5, 6)).astype(dt)
        for sv in ("=", "+=", "-="):
            for form in (lambda A, B: ms.dot(A, B), lambda A, B: 2.5 * ms.dot(A, B),
                         lambda A, B: ms.dot(A.T.T, B) * -1):
                check_same("dot", lambda D, A, B: _save(D, form(A, B), sv), [d, a, b])
            check_same("dot T T", lambda D, A, B: _save(D, ms.dot(A.T, B.T), sv),
                       [d, a.T.copy(), b.T.copy()])
            check_same("dot of row views", lambda D, A, B: _save(
                D.slice(1, M + 1), ms.dot(A, B.slice(1, K + 1)), sv),
                [np.ones((M + 3, N), dt), a, rng.integers(-3, 4, (K + 2, N)).astype(dt)])
            check_same("dot of itself", lambda D: _save(D, ms.dot(D, D.T), sv), [sq])
            check_same("dot into a slice of an operand", lambda D: _save(
                D.slice(0, 16), ms.dot(D.slice(16, 32), D.slice(0, 33)), sv), [sq])
            for lt in (False, True):
                for rt in (False, True):
                    xx = np.swapaxes(x, 1, 2).copy() if lt else x
                    yy = np.swapaxes(y, 1, 2).copy() if rt else y
                    check_same(f"batch_dot {lt} {rt}", lambda D, X, Y: _save(
                        D, ms.batch_dot(X, Y, lt, rt), sv), [np.ones((3, 4, 6), dt), xx, yy])
        v = rng.integers(-3, 4, (K,)).astype(dt)
        check_same("gemv", lambda D, V, B: D.__setitem__(slice(None), ms.dot(V, B)),
                   [np.zeros(N, dt), v, b])
        check_same("empty M", lambda D, A, B: D.__setitem__(slice(None), ms.dot(A, B)),
                   [np.ones((0, N), dt), np.zeros((0, K), dt), b])


@pytest.mark.parametrize("saver", ["=", "+="])
def test_dot_with_an_empty_inner_dimension(saver):
    """``d[:] = dot(a, b)`` with a (5, 0) and b (0, 66): the CPU stores the empty sum (0;
    ``+=`` leaves d). The GPU raises CudaError "cublasSgemm failed: CUBLAS_STATUS_INVALID_VALUE
    ... ldb = 0": executor.assign_product passes a's row stride 0 as a leading dimension
    (_matrix: no max(.., 1)) and calls gemm with k = 0 (real cuBLAS refuses that ld too)."""
    a, b = np.zeros((5, 0), np.float32), np.zeros((0, 66), np.float32)
    d = np.full((5, 66), 3, np.float32)
    check_same("dot with k = 0", lambda D, A, B: _save(D, ms.dot(A, B), saver), [d, a, b])


# ---- 4. copies, freed tensors, streams, mixed devices, DLPack, Random ------------------------

def test_copies_between_pitches_and_overlapping_views():
    a = np.random.default_rng(15).uniform(-1, 1, (5, 70)).astype(np.float32)
    g1 = gpu_from(a, pad=True)
    g2 = ms.new_tensor((5, 70), device=ms.gpu, pad=False)
    assert g1.stride != g2.stride
    ms.copy(g2, g1)
    assert_same_bytes(g2.to_numpy(), a, "pitched -> dense")
    g3 = ms.new_tensor((3, 70), device=ms.gpu, pad=True)
    ms.copy(g3, g2.slice(1, 4))
    assert_same_bytes(g3.to_numpy(), a[1:4], "dense view -> pitched")
    ms.copy(g1.slice(0, 4), g1.slice(1, 5))
    assert_same_bytes(g1.to_numpy()[:4], a[1:], "overlap back")
    g1 = gpu_from(a)
    ms.copy(g1.slice(1, 5), g1.slice(0, 4))
    assert_same_bytes(g1.to_numpy()[1:], a[:4], "overlap forward")
    c = ms.new_tensor((5, 70), pad=False)
    ms.copy(c, gpu_from(a, pad=True))
    assert_same_bytes(c.numpy(), a, "gpu -> cpu")
    with pytest.raises(ms.ShapeError):
        ms.copy(ms.new_tensor((5, 69), device=ms.gpu), g1)
    with pytest.raises(ms.DTypeError):
        ms.copy(ms.new_tensor((5, 70), device=ms.gpu, dtype=np.float64), g1)


_CHILD = r"""
import numpy as np, mshadow as ms
def gpu_from(a, pad=True):
    t = ms.new_tensor(a.shape, None, dtype=a.dtype, device=ms.gpu, pad=pad)
    ms.copy(t, ms.from_numpy(np.ascontiguousarray(a)))
    return t
a = np.random.default_rng(0).uniform(-1, 1, (5, 70)).astype(np.float32)
f = gpu_from(a); v = f.slice(1, 3); ms.free_space(f)
d = gpu_from(a)
cases = [lambda: f.to_numpy(), lambda: v.to_numpy(), lambda: d.__setitem__(slice(None), f * 2),
         lambda: d.slice(0, 2).__setitem__(slice(None), v * 2),
         lambda: f.__setitem__(slice(None), d * 2), lambda: ms.sum(f),
         lambda: d[0].__setitem__(slice(None), ms.sum_rows(f)),
         lambda: d.__setitem__(slice(None), ms.dot(gpu_from(np.ones((5, 5), np.float32)), f)),
         lambda: ms.copy(d, f), lambda: ms.copy(f, d), lambda: d.__setitem__(slice(None), ms.pad(f, 0)),
         lambda: f.__dlpack__(), lambda: f.__cuda_array_interface__,
         lambda: ms.Random(ms.gpu, 1).sample_uniform(f),
         lambda: d.__setitem__(slice(None), ms.take(f[0], d))]
for i, c in enumerate(cases):
    try:
        c()
    except ms.FreedTensorError:
        continue
    raise SystemExit(f"case {i} raised no FreedTensorError")
s1, s2 = ms.new_stream(ms.gpu), ms.new_stream(ms.gpu)
x = ms.new_tensor((5, 70), init=1.0, device=ms.gpu, stream=s1)
y = ms.new_tensor((5, 70), init=2.0, device=ms.gpu, stream=s2)
x[:] = x * 3 + 1
s1.wait()
y[:] = y + x
s2.wait()
assert (y.to_numpy() == 6).all() and s1.check_idle() and s2.check_idle()
for _ in range(3):                      # freed while its stream has work queued
    z = ms.new_tensor((64, 70), init=1.0, device=ms.gpu, stream=s1, pad=True)
    z[:] = z * 2 + ms.F(ms.op.tanh, z)
    z += z
    ms.free_space(z)
w = ms.new_tensor((5, 5), device=ms.gpu, stream=s2)
w[:] = ms.dot(x.slice(0, 5), x.slice(0, 5).T)
ms.delete_stream(s1)
for c in (lambda: x.__setitem__(slice(None), x + 1), lambda: ms.copy(y, x, s1)):
    try:
        c()
    except ms.DeviceError:
        continue
    raise SystemExit("work on a deleted stream was queued")
ms.delete_stream(s2)
print("OK")
"""


def test_freed_tensors_and_streams_raise_typed_errors_in_a_child(run_child):
    p = run_child(_CHILD, MSHADOW_CUDA="emulate")
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), (p.returncode, p.stdout,
                                                                   p.stderr[-3000:])


def test_mixed_devices_name_both():
    g = ms.new_tensor((5, 70), 1.0, device=ms.gpu)
    c = ms.new_tensor((5, 70), 1.0)
    stmts = [lambda: g.__setitem__(slice(None), g + c),
             lambda: g.__setitem__(slice(None), ms.dot(ms.new_tensor((5, 5)), g)),
             lambda: ms.new_tensor((1, 5, 70), device=ms.gpu).__setitem__(slice(None), ms.batch_dot(
                 ms.new_tensor((1, 5, 5)), ms.new_tensor((1, 5, 70), device=ms.gpu))),
             lambda: g[0].__setitem__(slice(None), ms.reduce_with_axis(c, 0, ms.red.maximum)),
             lambda: g.__setitem__(slice(None), ms.implicit_dot(ms.new_tensor((5, 5)), g)),
             lambda: g.__setitem__(slice(None), ms.take(ms.new_tensor((5,), 0, dtype=np.int32),
                                                        g)),
             lambda: c.__setitem__(slice(None), ms.pad(g, 0) * 2)]
    for s in stmts:
        with pytest.raises(ms.DeviceError, match=r"(?s)gpu.*cpu|cpu.*gpu"):
            s()
    assert (g.to_numpy() == 1).all() and (c.numpy() == 1).all()


def test_dlpack_and_the_interface_of_views():
    a = np.random.default_rng(16).uniform(-1, 1, (5, 70)).astype(np.float32)
    p = gpu_from(a, pad=True)
    w = p.slice(2, 4)
    cai, pcai = w.__cuda_array_interface__, p.__cuda_array_interface__
    assert cai["shape"] == (2, 70) and cai["strides"] == (p.stride * 4, 4)
    assert cai["data"][0] - pcai["data"][0] == 2 * p.stride * 4
    u = ms.from_dlpack(w)
    assert u.shape == (2, 70) and u.stride == p.stride
    assert_same_bytes(u.to_numpy(), a[2:4], "dlpack of a row view")
    r = ms.from_dlpack(p[3])
    assert_same_bytes(r.to_numpy(), a[3], "dlpack of a row")
    u[:] = u * 0 + 7
    got = p.to_numpy()
    assert (got[2:4] == 7).all()
    assert_same_bytes(got[[0, 1, 4]], a[[0, 1, 4]], "only the view's rows written")
    e = ms.new_tensor((0, 70), device=ms.gpu)
    assert ms.from_dlpack(e).shape == (0, 70)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=_NAMES)
def test_random_on_odd_sizes_and_pitches_is_one_stream(dtype):
    """The values depend on the seed and the order of fills, never on the pitch: a pitched
    (3, 33) fill is a dense one, and a fill of 15 then 17 continues after the 15's counters."""
    per = 4 if dtype == np.float32 else 2
    r1, r2 = ms.Random(ms.gpu, 99, dtype), ms.Random(ms.gpu, 99, dtype)
    p = ms.new_tensor((3, 33), device=ms.gpu, dtype=dtype, pad=True)
    q = ms.new_tensor((99,), device=ms.gpu, dtype=dtype, pad=False)
    r1.sample_uniform(p, -1, 2)
    r2.sample_uniform(q, -1, 2)
    assert_same_bytes(p.to_numpy().reshape(-1), q.to_numpy(), "pitched vs dense")
    r1.seed(5)
    r2.seed(5)
    a, b = ms.new_tensor((15,), device=ms.gpu, dtype=dtype), ms.new_tensor(
        (1, 17), device=ms.gpu, dtype=dtype, pad=True)
    r1.sample_gaussian(a, 0.5, 2)
    r1.sample_gaussian(b, 0.5, 2)
    gper = per // 2
    whole = ms.new_tensor((-(-15 // gper) * gper + 17,), device=ms.gpu, dtype=dtype)
    r2.sample_gaussian(whole, 0.5, 2)
    w = whole.to_numpy()
    assert_same_bytes(a.to_numpy(), w[:15], "first fill")
    assert_same_bytes(b.to_numpy().reshape(-1), w[-17:], "the continued fill")
