"""Assignment into lvalue extensions (slice_axis, slice_ex, flip, mirror, crop, concat):
every saver, values of every kind, aliasing, layouts and errors; numpy slicing assignment is
the oracle."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import engine, ir
from mshadow.lower.cpu import compile_plan, disassemble, strided_dst

DTYPES = [np.float32, np.float64, np.int32]
SAVERS = ["saveto", "plusto", "minusto", "multo", "divto"]
SHAPE = (3, 4, 6)

# name -> (target of a tensor, the same view of a numpy array)
TARGETS = {
    "slice_axis0": (lambda t: ms.slice_axis(t, 0, 1, 3), lambda a: a[1:3]),
    "slice_axis1": (lambda t: ms.slice_axis(t, 1, 1, 4), lambda a: a[:, 1:4]),
    "slice_axis-1": (lambda t: ms.slice_axis(t, -1, 2, 5), lambda a: a[..., 2:5]),
    "slice_ex": (lambda t: ms.slice_ex(t, (1, 0, 2), (3, 2, 5)), lambda a: a[1:3, 0:2, 2:5]),
    "flip0": (lambda t: ms.flip(t, 0), lambda a: a[::-1]),
    "flip1": (lambda t: ms.flip(t, 1), lambda a: a[:, ::-1]),
    "mirror": (lambda t: ms.mirror(t), lambda a: a[..., ::-1]),
    "crop": (lambda t: ms.crop(t, (2, 3)), lambda a: a[..., 1:3, 1:4]),
    "crop_at": (lambda t: ms.crop(t, (3, 2), 1, 4), lambda a: a[..., 1:4, 4:6]),
    "slice_of_mirror": (lambda t: ms.slice_axis(ms.mirror(t), 1, 0, 2),
                        lambda a: a[:, 0:2, ::-1]),
    "mirror_of_slice_ex": (lambda t: ms.mirror(ms.slice_ex(t, (0, 1, 1), (2, 3, 5))),
                           lambda a: a[0:2, 1:3, 1:5][..., ::-1]),
    "flip_of_flip": (lambda t: ms.flip(ms.flip(t, 2), 0), lambda a: a[::-1, :, ::-1]),
}


def _np_save(view, value, saver):
    """numpy's assignment with a saver; integer division as mshadow's (values are positive)."""
    value = np.array(value, copy=True)      # numpy reads an overlapping value before writing
    if saver == "saveto":
        view[...] = value
    elif saver == "plusto":
        view += value
    elif saver == "minusto":
        view -= value
    elif saver == "multo":
        view *= value
    elif view.dtype.kind == "f":
        view /= value
    else:
        view //= value


def _ms_save(target, value, saver):
    """The statement form of each saver: target[:] = v, target[:] += v, ..."""
    if saver == "saveto":
        target[:] = value
    elif saver == "plusto":
        target[:] += value
    elif saver == "minusto":
        target[:] -= value
    elif saver == "multo":
        target[:] *= value
    else:
        target[:] /= value


def _base(dtype, layout, shape=SHAPE):
    """(tensor, numpy copy) with distinct positive values in a contiguous, pitched or
    sub-tensor (pitched, at an offset) base."""
    x = (np.arange(int(np.prod(shape))) % 13 + 1).astype(dtype).reshape(shape)
    if layout == "contiguous":
        t = ms.new_tensor(shape, dtype=dtype)
    elif layout == "pitched":
        t = ms.new_tensor(shape, dtype=dtype, pad=True)
        assert not t.check_contiguous()
    else:   # element 1 of a padded 4-D tensor: an offset, a pitch
        t = ms.new_tensor((2,) + shape, dtype=dtype, pad=True)[1]
    t[:] = x
    return t, x.copy()


KINDS = ("scalar", "tensor", "numpy", "expression", "itself", "itself flipped")


def _value(kind, name, t, x, dtype):
    """(value for mshadow, value for numpy) of each kind, positive; the last two read the
    target's own elements: in place, and at other positions."""
    target, npview = TARGETS[name]
    vshape = npview(x).shape
    v = (np.arange(int(np.prod(vshape))) % 5 + 1).astype(dtype).reshape(vshape)
    if kind == "scalar":
        return 3, np.asarray(3, dtype)
    if kind == "tensor":
        return ms.from_numpy(v.copy()), v
    if kind == "numpy":
        return v.copy(), v
    if kind == "expression":
        return ms.from_numpy(v.copy()) * 2 + 1, v * 2 + 1
    if kind == "itself":
        return target(t) * 2 + 1, npview(x) * 2 + 1
    return ms.flip(target(t), 0) + 1, npview(x)[::-1] + 1


@pytest.mark.parametrize("layout", ["contiguous", "pitched", "subtensor"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_saver_and_value(name, saver, dtype, layout):
    target, npview = TARGETS[name]
    for kind in KINDS:
        t, x = _base(dtype, layout)
        value, want = _value(kind, name, t, x, dtype)
        _ms_save(target(t), value, saver)
        _np_save(npview(x), want, saver)
        np.testing.assert_array_equal(t.numpy(), x, err_msg=f"{name} {saver} {kind}")


@pytest.mark.parametrize("saver", SAVERS)
def test_flip_of_itself_is_numpys_copying_assignment(saver):
    x = np.arange(1, 21, dtype=np.float32).reshape(4, 5)
    t = ms.new_tensor((4, 5), pad=True)
    t[:] = x
    _ms_save(ms.flip(t, 0), t, saver)
    _np_save(x[::-1], x, saver)
    np.testing.assert_array_equal(t.numpy(), x)
    t[:] = x
    ms.flip(t, 0)[:] = t
    np.testing.assert_array_equal(t.numpy(), x[::-1])


def test_overlapping_slices_and_a_gather_reading_the_target():
    x = np.arange(1, 31, dtype=np.float64).reshape(5, 6)
    t = ms.new_tensor((5, 6), dtype=np.float64, pad=True)
    t[:] = x
    ms.slice_axis(t, 0, 1, 5)[:] = ms.slice_axis(t, 0, 0, 4) * 10     # shifted rows
    want = x.copy()
    want[1:5] = x[0:4] * 10
    np.testing.assert_array_equal(t.numpy(), want)
    t[:] = x
    ms.slice_axis(t, 1, 0, 3)[:] = ms.slice_axis(t, 1, 3, 6)          # disjoint columns
    want = x.copy()
    want[:, 0:3] = x[:, 3:6]
    np.testing.assert_array_equal(t.numpy(), want)
    t[:] = x
    idx = ms.from_numpy(np.array([4, 3, 2, 1, 0], np.int32))
    ms.mirror(t)[:] += ms.take(idx, t)                                   # a gather of t
    want = x.copy()
    want[:, ::-1] += x[::-1]
    np.testing.assert_array_equal(t.numpy(), want)
    t[:] = x
    ms.flip(t, 1)[:] = ms.pad(ms.crop(t, (3, 4), 1, 1), 1)             # gather of a view of t
    want = x.copy()
    want[:, ::-1] = np.pad(x[1:4, 1:5], 1)
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_targets_with_threads(threads):
    ms.set_num_threads(threads)
    try:
        rng = np.random.default_rng(3)
        x = rng.random((300, 257)).astype(np.float32)
        y = rng.random((300, 257)).astype(np.float32)
        t = ms.new_tensor(x.shape, pad=True)
        t[:] = x
        ms.mirror(t)[:] += ms.F(ms.op.exp, ms.from_numpy(y)) * 0.5
        want = x.copy()
        want[:, ::-1] += np.exp(y) * np.float32(0.5)
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
        t[:] = x
        ms.slice_ex(t, (10, 1), (290, 256))[:] = ms.flip(ms.slice_ex(t, (10, 1), (290, 256)), 0)
        want = x.copy()
        want[10:290, 1:256] = x[10:290, 1:256][::-1]
        np.testing.assert_array_equal(t.numpy(), want)
    finally:
        ms.set_num_threads(2)


@pytest.mark.parametrize("dtype", [np.float16, np.uint8, np.int8, np.int64])
@pytest.mark.parametrize("saver", SAVERS)
def test_other_dtypes_through_a_reversed_last_axis(dtype, saver):
    t, x = _base(dtype, "pitched", (3, 5))
    v = (np.arange(15) % 3 + 1).astype(dtype).reshape(3, 5)
    _ms_save(ms.mirror(t), ms.from_numpy(v) + ms.from_numpy(v), saver)
    _np_save(x[:, ::-1], (v + v).astype(dtype), saver)
    np.testing.assert_array_equal(t.numpy(), x)
    t2, x2 = _base(dtype, "contiguous", (3, 5))
    _ms_save(ms.flip(t2, 0), ms.concat(ms.from_numpy(v[:, :2]), ms.from_numpy(v[:, 2:]), 1), saver)
    _np_save(x2[::-1], v, saver)
    np.testing.assert_array_equal(t2.numpy(), x2)
    t3, x3 = _base(dtype, "pitched", (3, 5))
    _ms_save(ms.mirror(t3), t3, saver)                  # through a temporary
    _np_save(x3[:, ::-1], x3, saver)
    np.testing.assert_array_equal(t3.numpy(), x3)


def test_bare_inplace_operators_write_like_a_tensor():
    t, x = _base(np.float32, "pitched", (4, 5))
    v = ms.slice_axis(t, 0, 1, 3)
    v += 1
    v *= 2
    x[1:3] = (x[1:3] + 1) * 2
    np.testing.assert_array_equal(t.numpy(), x)
    b = ms.broadcast(ms.new_tensor((5,), init=1.0), (4, 5), 1)
    e = b
    e += 1                      # not a target: builds an expression, writes nothing
    assert e is not b and isinstance(e, ms.Exp)
    np.testing.assert_array_equal(t.numpy(), x)


def test_zero_size_targets():
    t, x = _base(np.float32, "pitched", (3, 4))
    ms.slice_axis(t, 0, 2, 2)[:] = 5
    ms.slice_ex(t, (1, 1), (3, 1))[:] += ms.from_numpy(np.empty((2, 0), np.float32))
    np.testing.assert_array_equal(t.numpy(), x)


# ---- kComplex and untraced values go through a temporary --------------------------------

def test_dot_and_reductions_into_views():
    rng = np.random.default_rng(5)
    a = rng.random((3, 4))
    b = rng.random((4, 5))
    t, x = _base(np.float64, "pitched", (5, 5))
    ms.slice_axis(t, 0, 1, 4)[:] = ms.dot(ms.from_numpy(a), ms.from_numpy(b))
    x[1:4] = a @ b
    np.testing.assert_allclose(t.numpy(), x, rtol=1e-12)
    ms.mirror(ms.slice_axis(t, 0, 1, 4))[:] += ms.dot(ms.from_numpy(a), ms.from_numpy(b))
    x[1:4, ::-1] += a @ b
    np.testing.assert_allclose(t.numpy(), x, rtol=1e-12)
    v, xv = _base(np.float64, "contiguous", (6,))
    ms.flip(ms.slice_axis(v, 0, 1, 6), 0)[:] -= ms.sum_rows(ms.from_numpy(b))
    xv[1:6][::-1] -= b.sum(axis=0)
    np.testing.assert_allclose(v.numpy(), xv, rtol=1e-12)
    a1, xa = _base(np.float64, "contiguous", (2, 5))
    b1, xb = _base(np.float64, "pitched", (1, 5))
    ms.concat(a1, b1, 0)[:] = ms.dot(ms.from_numpy(a), ms.from_numpy(b))
    np.testing.assert_allclose(np.concatenate([a1.numpy(), b1.numpy()]), a @ b, rtol=1e-12)


def test_untraceable_operator_into_a_view(recwarn):
    @ms.op.define
    def neg_small(v):
        if v > 5:
            return v
        return -v

    t, x = _base(np.float64, "pitched", (4, 6))
    ms.mirror(t)[:] += ms.F(neg_small, t)
    x[:, ::-1] += np.where(x > 5, x, -x)
    np.testing.assert_array_equal(t.numpy(), x)
    assert any("could not be traced" in str(w.message) for w in recwarn)


# ---- concat: the value split between its two tensors -------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_concat_target(dim, saver, dtype):
    sa, sb = [2, 3, 4], [2, 3, 4]
    sb[dim] = 3 if dim else 1
    a, xa = _base(dtype, "pitched", tuple(sa))
    b, xb = _base(dtype, "contiguous", tuple(sb))
    full = np.concatenate([xa, xb], dim)
    v = (np.arange(full.size) % 4 + 1).astype(dtype).reshape(full.shape)
    cases = [("scalar", 2, np.asarray(2, dtype)),
             ("tensor", ms.from_numpy(v.copy()), v),
             ("expression", ms.from_numpy(v.copy()) * 3 - 1, v * 3 - 1),
             ("reads a and b", lambda: ms.concat(a, b, dim) + 1, None),
             ("flipped", lambda: ms.flip(ms.concat(a, b, dim), dim), None),
             ("a gather", ms.pad(ms.from_numpy(v.copy()), 0), v)]
    for kind, value, want in cases:
        a[:] = xa
        b[:] = xb
        ref = np.concatenate([xa, xb], dim)
        if callable(value):
            value = value()
            want = ref + 1 if kind == "reads a and b" else np.flip(ref, dim)
        _ms_save(ms.concat(a, b, dim), value, saver)
        _np_save(ref, want, saver)
        got = np.concatenate([a.numpy(), b.numpy()], dim)
        np.testing.assert_array_equal(got, ref, err_msg=f"{dim} {saver} {kind}")


def test_concat_of_numpy_arrays_writes_them():
    a = np.zeros((2, 2), np.float32)
    b = np.zeros((2, 3), np.float32)
    ms.concat(a, b, 1)[:] = ms.from_numpy(np.arange(10, dtype=np.float32).reshape(2, 5))
    np.testing.assert_array_equal(np.concatenate([a, b], 1), np.arange(10).reshape(2, 5))


# ---- slice_ex as a source ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_slice_ex_reads_like_numpy(dtype):
    t, x = _base(dtype, "pitched", (4, 5, 6))
    out = ms.new_tensor((2, 3, 4), dtype=dtype)
    out[:] = ms.slice_ex(t, (1, 2, 1), (3, 5, 5))
    np.testing.assert_array_equal(out.numpy(), x[1:3, 2:5, 1:5])
    out[:] = ms.slice_ex(t * 2 + 1, ms.Shape(2, 0, 2), ms.Shape(4, 3, 6)) + ms.slice_ex(
        ms.flip(t, 2), [0, 0, 0], [2, 3, 4])
    want = (x * 2 + 1)[2:4, 0:3, 2:6] + x[0:2, 0:3, ::-1][..., 0:4]
    np.testing.assert_array_equal(out.numpy(), want)
    e = ms.slice_ex(t + 1, (0, 0, 0), (1, 1, 1))
    assert e.shape == (1, 1, 1) and not isinstance(e, ms.extension.ViewExp)


def test_slice_ex_errors():
    t = ms.new_tensor((3, 4))
    with pytest.raises(ms.ShapeError, match="one entry per axis"):
        ms.slice_ex(t, (0,), (1,))
    with pytest.raises(ms.ShapeError, match=r"The slice went out of range: \[2, 5\) of axis 1"):
        ms.slice_ex(t, (0, 2), (3, 5))
    with pytest.raises(ms.ShapeError, match="out of range"):
        ms.slice_ex(t, (2, 0), (1, 4))
    with pytest.raises(TypeError):
        ms.slice_ex(t, (0.5, 0), (1, 4))


# ---- errors: a tensor destination's, before anything is written -------------------------

def _error(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001  the error is the result under test
        return type(e), str(e)
    return None


@pytest.mark.parametrize("value", [
    pytest.param(lambda: ms.new_tensor((2, 3)), id="shape"),
    pytest.param(lambda: ms.new_tensor((2, 4), dtype=np.float64), id="dtype"),
    pytest.param(lambda: ms.new_tensor((2, 4), dtype=np.float64) + 1, id="expression dtype"),
    pytest.param(lambda: ms.scalar(1.0, np.float64), id="scalar dtype"),
    pytest.param(lambda: [1, 2], id="list"),
    pytest.param(lambda: "x", id="string"),
    pytest.param(lambda: ms.dot(ms.new_tensor((2, 3)), ms.new_tensor((2, 4))), id="dot shape"),
])
@pytest.mark.parametrize("saver", ["saveto", "plusto"])
def test_errors_match_a_tensor_destination(value, saver):
    t, x = _base(np.float32, "pitched", (4, 4))
    want = _error(lambda: _ms_save(ms.new_tensor((2, 4)), value(), saver))
    assert want is not None
    for target in (ms.slice_axis(t, 0, 1, 3), ms.flip(ms.slice_ex(t, (0, 0), (2, 4)), 1)):
        assert _error(lambda: _ms_save(target, value(), saver)) == want
        np.testing.assert_array_equal(t.numpy(), x)


@pytest.mark.parametrize("value", [1.5, 2 ** 40, -1])
def test_integer_scalar_errors_match_a_tensor_destination(value):
    t, x = _base(np.uint8, "contiguous", (3, 4))
    want = _error(lambda: ms.new_tensor((3, 2), dtype=np.uint8).__setitem__(slice(None), value))
    got = _error(lambda: ms.crop(t, (3, 2)).__setitem__(slice(None), value))
    assert got == want and got[0] in (ms.DTypeError, OverflowError)
    np.testing.assert_array_equal(t.numpy(), x)


def test_read_only_freed_and_resized_destinations():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ro = x.copy()
    ro.flags.writeable = False
    for target in (ms.flip(ro, 0), ms.concat(np.zeros((3, 1), np.float32), ro, 1)):
        with pytest.raises(ValueError, match="read-only"):
            target[:] = 1
        with pytest.raises(ValueError, match="read-only"):
            target[:] += 1
    np.testing.assert_array_equal(ro, x)
    a = np.zeros((3, 1), np.float32)
    with pytest.raises(ValueError, match="read-only"):
        ms.concat(a, ro, 1)[:] = 5
    assert not a.any()          # nothing written to the writable part either

    t = ms.new_tensor((3, 4))
    v = ms.slice_axis(t, 1, 0, 2)
    ms.free_space(t)
    with pytest.raises(ms.FreedTensorError):
        v[:] = 1
    with pytest.raises(ms.FreedTensorError):
        ms.concat(ms.new_tensor((3, 4)), t, 1)   # built over freed memory
    a, b = ms.new_tensor((2, 2), init=0.0), ms.new_tensor((2, 2))
    c = ms.concat(a, b, 0)
    ms.free_space(b)
    with pytest.raises(ms.FreedTensorError):
        c[:] = 1
    assert a.numpy().sum() == 0

    box = ms.TensorContainer((3, 4), init=0.0)
    v = ms.mirror(box)
    box.resize((2, 2))
    with pytest.raises(ms.ShapeError, match="changed"):
        v[:] = 1


def test_index_errors_in_the_value_write_nothing():
    t, x = _base(np.float32, "pitched", (3, 4))
    bad = ms.from_numpy(np.array([0, 7, 1], np.int32))
    with pytest.raises(IndexError):
        ms.flip(t, 0)[:] = ms.take(bad, t)
    a, b = ms.new_tensor((3, 2), init=0.0), ms.new_tensor((3, 2), init=0.0)
    with pytest.raises(IndexError):
        ms.concat(a, b, 1)[:] = ms.take(bad, t)
    np.testing.assert_array_equal(t.numpy(), x)
    assert not a.numpy().any() and not b.numpy().any()


@pytest.mark.parametrize("make", [
    pytest.param(lambda t: ms.broadcast(ms.new_tensor((4,)), (3, 4), 1), id="broadcast"),
    pytest.param(lambda t: ms.swapaxis(t, 0, 1), id="swapaxis"),
    pytest.param(lambda t: ms.transpose_axes(t, (1, 0)), id="transpose"),
    pytest.param(lambda t: ms.reshape(t, (4, 3)), id="reshape"),
    pytest.param(lambda t: ms.flip(t.T, 0), id="flip of t.T"),
    pytest.param(lambda t: ms.slice_axis(ms.swapaxis(t, 0, 1), 0, 0, 2), id="slice of a swap"),
    pytest.param(lambda t: ms.flip(ms.pad(t, 1), 0), id="flip of a gather"),
    pytest.param(lambda t: ms.pad(t, 1), id="a gather"),
    pytest.param(lambda t: ms.concat(t * 2, t, 0), id="concat of an expression"),
    pytest.param(lambda t: ms.flip(t + 1, 0), id="flip of an expression"),
    pytest.param(lambda t: t + 1, id="an expression"),
])
def test_only_views_of_tensors_are_assignable(make):
    t, x = _base(np.float32, "contiguous", (3, 4))
    e = make(t)
    with pytest.raises(TypeError, match="not assignable|does not support item assignment"):
        e[:] = 1
    with pytest.raises(TypeError, match="not assignable|not subscriptable"):
        e[:] += 1
    np.testing.assert_array_equal(t.numpy(), x)


def test_only_the_whole_view_can_be_indexed():
    t = ms.new_tensor((3, 4))
    v = ms.flip(t, 0)
    assert v[:] is v and v[...] is v
    t[:] = 1
    v[:] = v                    # itself, element for element: nothing to do
    assert (t.numpy() == 1).all()
    for key in (0, slice(1, 2), (slice(None), 0)):
        with pytest.raises(IndexError, match=r"only \[:\]"):
            v[key] = 1
    with pytest.raises(TypeError, match="not iterable"):
        iter(v)


# ---- the plan of a strided destination ---------------------------------------------------

def test_strided_destination_program_listing():
    node = ir.Map("plus", "f32", ir.Map("mul", "f32", ir.LEAF["f32"], ir.SCALAR), ir.LEAF["f32"])
    p = compile_plan(node, "f32", "minusto")
    assert disassemble(p).splitlines()[1] == \
        "dst = chain_f32[L0 -> mul(_, s0) -> plus(_, L1) -> minus(dst, _)]"
    assert disassemble(strided_dst(p)) == "\n".join([
        "# dst f32 minusto; leaves L0:f32, L1:f32; scalars s0:f32; 1 registers",
        "r0 = chain_f32[L0 -> mul(_, s0) -> plus(_, L1)]",
        "dst = minus_f32(dst, r0)"])
    q = strided_dst(compile_plan(ir.Map("mul", "f64", ir.LEAF["f64"], ir.SCALAR), "f64", "divto"))
    assert disassemble(q).splitlines()[1:] == ["r0 = mul_f64(L0, s0)", "dst = div_f64(dst, r0)"]
    g = strided_dst(compile_plan(ir.Gather("pad", "i32", ir.LEAF["i32"]), "i32", "saveto"))
    assert disassemble(g).splitlines()[1:] == ["r0 = g_pad_i32(L0)", "dst = identity_i32(r0)"]
    plain = compile_plan(ir.LEAF["f64"], "f64", "plusto")
    assert disassemble(strided_dst(plain)) == disassemble(plain)
    assert disassemble(p).splitlines()[1].startswith("dst = chain_f32")   # the input is kept
    assert strided_dst(p).dst_strided and not p.dst_strided
    with pytest.raises(ValueError, match="reducing saver"):
        strided_dst(compile_plan(ir.LEAF["f32"], "f32", "sum"))


def test_run_plan_view_refuses_a_destination_that_repeats_elements():
    t = ms.new_tensor((4,), init=0.0)
    plan = engine.get_plan(ir.SCALAR, "f32", "plusto")
    with pytest.raises(ValueError, match="repeats elements"):
        ms._core.run_plan_view(plan, ms.broadcast(t, (3, 4), 1).view, (), (1.0,))
    assert not t.numpy().any()


# ---- the core and the engine: one plan cache, a one-directional core ---------------------

def test_strided_plans_live_in_the_engines_one_cache():
    engine.clear_plan_cache()
    t, x = _base(np.float32, "contiguous", (3, 4))
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    ms.mirror(t)[:] += ms.from_numpy(v) * 2
    node = (ms.from_numpy(v) * 2).key
    keys = [k for k in engine._plans if k[0] == node]
    assert (node, "f32", "plusto", t.device, "strided") in keys
    strided = engine._plans[node, "f32", "plusto", t.device, "strided"]
    assert strided.program.dst_strided
    assert engine.get_plan(node, "f32", "plusto", t.device, strided=True) is strided
    ms.slice_axis(t, 0, 0, 2)[:] += ms.from_numpy(v[:2]) * 2   # contiguous rows: the plain plan
    assert not engine._plans[node, "f32", "plusto", t.device].program.dst_strided
    x[:, ::-1] += v * 2
    x[:2] += v[:2] * 2
    np.testing.assert_array_equal(t.numpy(), x)


def test_run_plan_view_refuses_aliasing_and_stores_nothing():
    t, x = _base(np.float32, "pitched", (4, 5))
    v = ms.flip(t, 0)
    plan = engine.get_plan(ir.LEAF["f32"], "f32", "saveto")
    assert ms._core.run_plan_view(plan, v.view, (t,), ()) is False   # t read at other rows
    np.testing.assert_array_equal(t.numpy(), x)
    assert ms._core.run_plan_view(plan, v.view, (ms.from_numpy(x[::-1].copy()),), ()) is True
    np.testing.assert_array_equal(t.numpy(), x)   # flip(t)[:] = flip(x): t == x again
    in_place = engine.get_plan(ir.Map("plus", "f32", ir.View("f32", 0), ir.SCALAR), "f32", "saveto")
    assert ms._core.run_plan_view(in_place, v.view, (v.view,), (1.0,)) is True   # v[:] = v + 1
    np.testing.assert_array_equal(t.numpy(), x + 1)


def test_run_plan_view_needs_the_strided_form_for_a_reversed_last_axis():
    t, x = _base(np.float32, "contiguous", (3, 4))
    node = (ms.from_numpy(x) * 2).key
    with pytest.raises(ValueError, match="strided form"):
        ms._core.run_plan_view(engine.get_plan(node, "f32", "saveto"), ms.mirror(t).view,
                               (ms.from_numpy(x),), (2.0,))
    with pytest.raises(ValueError, match="f64"):
        ms._core.run_plan_view(engine.get_plan(ir.LEAF["f64"], "f64", "saveto"),
                               ms.flip(t, 0).view, (ms.new_tensor((3, 4), dtype=np.float64),), ())
    np.testing.assert_array_equal(t.numpy(), x)


@pytest.mark.parametrize("seed", range(12))
def test_chained_targets_write_through_against_numpy(seed):
    # a target tree (concats of tensors and of lvalue views, views of concats) written with
    # every saver: each tensor receives exactly its share of the value, as numpy's views do
    rng = np.random.default_rng(seed)
    d = int(rng.integers(0, 2))
    sizes = [int(n) for n in rng.integers(1, 4, 3)]
    arrays = []
    for n in sizes:
        shape = [3, 4]
        shape[d] = n + 2
        arrays.append(rng.integers(-9, 9, shape).astype(np.float64))
    ts = [ms.from_numpy(a.copy()) for a in arrays]
    nps = [a.copy() for a in arrays]

    def sl(x, lo, hi):
        return x[(slice(None),) * d + (slice(lo, hi),)]

    # parts: a slice of the first, the second whole, a flip of the third
    m_parts = [ms.slice_axis(ts[0], d, 1, 1 + sizes[0]), ts[1], ms.flip(ts[2], d)]
    n_parts = [sl(nps[0], 1, 1 + sizes[0]), nps[1], np.flip(nps[2], d)]
    inner = ms.concat(m_parts[0], m_parts[1], d)
    n_inner = np.concatenate(n_parts[:2], d)
    tree = ms.concat(inner, m_parts[2], d)
    n_tree = (n_inner, n_parts[2])
    total = n_inner.shape[d] + n_parts[2].shape[d]
    lo = int(rng.integers(0, total - 1))
    hi = int(rng.integers(lo + 1, total + 1))
    target = ms.flip(ms.slice_axis(tree, d, lo, hi), d) if seed % 2 else \
        ms.slice_axis(tree, d, lo, hi)
    shape = list(n_inner.shape)
    shape[d] = hi - lo
    value = rng.integers(1, 5, shape).astype(np.float64)
    saver = ("saveto", "plusto", "minusto", "multo")[seed % 4]
    {"saveto": target.__setitem__, "plusto": lambda k, v: target.__iadd__(v),
     "minusto": lambda k, v: target.__isub__(v),
     "multo": lambda k, v: target.__imul__(v)}[saver](slice(None), ms.from_numpy(value) * 1)
    # numpy: the same writes through views of the arrays
    whole = [sl(n_parts[0], 0, None), n_parts[1], n_parts[2]]
    offsets = np.cumsum([0] + [w.shape[d] for w in whole])
    v = np.flip(value, d) if seed % 2 else value
    for w, a, b in zip(whole, offsets[:-1], offsets[1:]):
        s0, s1 = max(lo, a), min(hi, b)
        if s0 >= s1:
            continue
        dst = sl(w, s0 - a, s1 - a)
        src = sl(v, s0 - lo, s1 - lo)
        if saver == "saveto":
            dst[...] = src
        elif saver == "plusto":
            dst += src
        elif saver == "minusto":
            dst -= src
        else:
            dst *= src
    for t, want in zip(ts, nps):
        np.testing.assert_array_equal(t.numpy(), want)
