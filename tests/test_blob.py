"""TShape (construction, parse, printing, save/load) and TBlob (views and mshadow's checks)."""
import io
import pickle

import numpy as np
import pytest

import mshadow as ms
from mshadow.blob import TShape, TBlob


# ---- TShape -----------------------------------------------------------------------------

def test_construction_forms():
    assert TShape((2, 3)) == (2, 3)
    assert TShape([4]) == [4]
    assert TShape(3) == (1, 1, 1)            # TShape(ndim): all ones
    assert TShape() == () and TShape().ndim() == 0
    assert TShape(ms.Shape(5, 6)) == ms.Shape(5, 6)
    assert TShape(d for d in (7, 8)) == (7, 8)


@pytest.mark.parametrize("bad, exc", [((2, -1), ValueError), ((2, 1.5), TypeError),
                                      (("2",), TypeError), (-1, ValueError)])
def test_construction_refuses_bad_dims(bad, exc):
    with pytest.raises(exc):
        TShape(bad)


def test_sequence_protocol_and_mutation():
    s = TShape((2, 3, 4))
    assert len(s) == 3 and s.ndim() == 3 and list(s) == [2, 3, 4]
    assert s[0] == 2 and s[-1] == 4 and s[1:] == (3, 4) and isinstance(s[1:], TShape)
    s[1] = 9
    assert s == (2, 9, 4)
    with pytest.raises(ValueError):
        s[0] = -2
    with pytest.raises(IndexError):
        s[3] = 1
    with pytest.raises(TypeError):
        hash(s)                               # mutable, like a list


def test_equality_with_every_shape_kind():
    s = TShape((2, 3))
    for same in (TShape((2, 3)), ms.Shape(2, 3), (2, 3), [2, 3]):
        assert s == same and same == s and not (s != same) and not (same != s)
    for other in (TShape((3, 2)), ms.Shape(2, 3, 1), (2,), (), "(2,3)", 6):
        assert s != other and not (s == other)


@pytest.mark.parametrize("dims, text", [((2, 3), "(2,3)"), ((5,), "(5,)"), ((), "()"),
                                        ((1, 0, 7), "(1,0,7)")])
def test_str_repr_and_parse_round_trip(dims, text):
    s = TShape(dims)
    assert str(s) == text
    assert repr(s) == f"TShape({text})"
    assert TShape.parse(text) == s
    assert eval(repr(s), {"TShape": TShape}) == s


@pytest.mark.parametrize("text, dims", [
    ("3", (3,)), (" 3 ", (3,)), ("+3", (3,)), ("(3,5)", (3, 5)), ("(3 , 5)", (3, 5)),
    ("(3, 4L, 5)", (3, 4, 5)), ("(3,)", (3,)), ("(3, 4,)", (3, 4)), ("(3, 4, )", (3, 4)),
    ("( 3 ,4 ) ", (3, 4)), ("(3 L,4)", (3, 4)), ("(3L)", (3,)), ("(0,2)", (0, 2)),
    ("()", ()), ("( )", ()), ("(10000000000)", (10000000000,)),
])
def test_parse_accepts_mshadow_forms(text, dims):
    assert TShape.parse(text) == dims


@pytest.mark.parametrize("text", [
    "(3,4,a)",      # mshadow silently keeps (3,4)
    "", "  ", "a", "(", "(3", "(3,4", "3,4", "(,)", "(3,,4)", "(,3)", "((3))", "[3,4]",
    "(3L ,4)",      # mshadow wants ',' or ')' right after the L
    "(3LL)", "5L", "(-3)", "-3", "(3.0)", "(3)x", "(3) (4)", "(3 4)", "(0x10)",
])
def test_parse_refuses_everything_else_quoting_the_text(text):
    with pytest.raises(ValueError) as info:
        TShape.parse(text)
    assert isinstance(info.value, ms.ShapeError)
    assert repr(text) in str(info.value)


def test_parse_needs_a_string():
    with pytest.raises(TypeError):
        TShape.parse((3, 4))


def test_size_prod_flat_get():
    s = TShape((2, 3, 4, 5))
    assert s.size() == s.Size() == 120
    assert s.prod_shape(1, 3) == 12 and s.prod_shape(2, 2) == 1
    assert s.flat_to_2d() == (24, 5) and isinstance(s.flat_to_2d(), ms.Shape)
    assert TShape().flat_to_2d() == (0, 0) and TShape().size() == 1
    assert s.flat_to_3d(1) == (2, 3, 20)
    assert s.flat_to_3d(1, 2) == (2, 12, 5)
    assert s.flat_to_3d(0, 3) == (1, 120, 1)
    assert TShape().flat_to_3d(0) == (0, 0, 0)
    assert s.get(4) == ms.Shape(2, 3, 4, 5) and isinstance(s.get(4), ms.Shape)


@pytest.mark.parametrize("args", [(2, 1), (0, 4), (-1, 0), (4,)])
def test_flat_to_3d_refuses_bad_axes(args):
    with pytest.raises(ms.ShapeError, match="flat_to_3d"):
        TShape((2, 3, 4, 5)).flat_to_3d(*args)


def test_get_checks_dimension():
    with pytest.raises(ms.ShapeError, match="dimension do not match target dimension 3 vs 2"):
        TShape((2, 3)).get(3)


@pytest.mark.parametrize("index_dtype, width", [(None, 4), (np.int32, 4), (np.int64, 8)])
def test_save_load_bytes(index_dtype, width):
    buf = io.BytesIO()
    TShape((2, 3)).save(buf, index_dtype)
    fmt = np.dtype(np.int32 if width == 4 else np.int64)
    assert buf.getvalue() == np.array([2, 2, 3], fmt).tobytes()
    buf.seek(0)
    assert TShape.load(buf, index_dtype) == (2, 3)
    assert buf.read() == b""


def test_save_load_empty_and_pickle():
    buf = io.BytesIO()
    TShape().Save(buf)
    assert buf.getvalue() == bytes(4)
    buf.seek(0)
    assert TShape.Load(buf) == ()
    assert pickle.loads(pickle.dumps(TShape((4, 5)))) == (4, 5)


def test_save_refuses_dims_too_big_for_int32():
    with pytest.raises(ms.ShapeError, match="index_dtype=int64"):
        TShape((2 ** 31,)).save(io.BytesIO())


def test_load_truncated_or_corrupt():
    good = io.BytesIO()
    TShape((2, 3)).save(good)
    data = good.getvalue()
    for cut in range(len(data)):
        with pytest.raises(ms.FormatError):
            TShape.load(io.BytesIO(data[:cut]))
    with pytest.raises(ms.FormatError, match="negative"):
        TShape.load(io.BytesIO(np.array([1, -5], np.int32).tobytes()))
    with pytest.raises(ms.FormatError, match="negative"):
        TShape.load(io.BytesIO(np.array([-1], np.int32).tobytes()))
    with pytest.raises(ms.FormatError, match="holds only"):   # refused before reading
        TShape.load(io.BytesIO(np.array([2 ** 31 - 1], np.int32).tobytes()))


# ---- TBlob ------------------------------------------------------------------------------

def _padded(shape, dtype=ms.float32):
    t = ms.new_tensor(shape, init=0, pad=True, dtype=dtype)
    t.numpy()[...] = np.arange(t.size()).reshape(shape)
    return t


def test_from_tensor_fields():
    t = _padded((2, 3, 4))
    b = TBlob(t)
    assert b.shape == (2, 3, 4) and isinstance(b.shape, TShape)
    assert b.stride == t.stride and b.stride > 4 and not b.check_contiguous()
    assert b.dptr == t.dptr and b.dev_mask == ms.cpu.kDevMask == 1
    assert b.type_flag == ms.kFloat32 and b.dtype == ms.float32
    assert b.ndim() == 3 and b.size() == b.Size() == 24 and b.size(1) == 3
    assert "TBlob(shape=(2,3,4)" in repr(b)


def test_get_views_share_memory():
    t = _padded((2, 3, 4))
    b = TBlob(t)
    g = b.get(3, dtype=ms.float32, device=ms.cpu)
    assert g.shape == (2, 3, 4) and g.stride == t.stride and g.dptr == t.dptr
    g.numpy()[0] = 100                               # writes through to t
    assert (t.numpy()[0] == 100).all()
    assert b.get().shape == (2, 3, 4)


def test_flat_to_2d_keeps_pitch():
    t = _padded((2, 3, 4))
    v = TBlob(t).flat_to_2d()
    assert v.shape == (6, 4) and v.stride == t.stride
    np.testing.assert_array_equal(v.numpy(), np.arange(24).reshape(6, 4))
    one = TBlob(np.arange(5, dtype=np.float32)).FlatTo2D()
    assert one.shape == (1, 5)


def test_flat_to_3d():
    c = TBlob(np.arange(120, dtype=np.float64).reshape(2, 3, 4, 5))
    v = c.flat_to_3d(1, 2, dtype=ms.float64)
    assert v.shape == (2, 12, 5)
    np.testing.assert_array_equal(v.numpy(), np.arange(120).reshape(2, 12, 5))
    assert c.flat_to_3d(1).shape == (2, 3, 20)
    p = TBlob(_padded((2, 3, 4)))                    # padded: only groupings keeping rows
    np.testing.assert_array_equal(p.flat_to_3d(0, 1).numpy(), np.arange(24).reshape(1, 6, 4))
    with pytest.raises(ms.ShapeError, match="must be contiguous"):
        p.flat_to_3d(0)


def test_get_with_shape():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = TBlob(a)
    v = b.get_with_shape((2, 6), dtype=ms.int32)
    np.testing.assert_array_equal(v.numpy(), np.arange(12).reshape(2, 6))
    v.numpy()[0, 0] = 99
    assert a[0, 0] == 99
    with pytest.raises(ms.ShapeError, match="new and old shape do not match total elements"):
        b.get_with_shape((5, 2))
    with pytest.raises(ms.ShapeError, match="must be contiguous"):
        TBlob(_padded((2, 3))).get_with_shape((3, 2))
    with pytest.raises(ms.ShapeError):
        b.get_with_shape(())


def test_device_and_dtype_mismatch_messages():
    b = TBlob(_padded((2, 3)))
    with pytest.raises(ms.DeviceError, match="^TBlob.get: device type do not match specified type$"):
        b.get(2, dtype=ms.float32, device=ms.gpu)
    for call in (lambda: b.get(2, dtype=ms.float64), lambda: b.flat_to_2d(dtype=ms.int32),
                 lambda: b.get_with_shape((6,), dtype=ms.float16),
                 lambda: b.flat_to_3d(0, dtype=ms.int8)):
        with pytest.raises(ms.DTypeError, match=r"TBlob.get: data type do not match specified "
                                                r"type. Expected: 0 v.s. given \d"):
            call()
    # device is checked before dtype, dtype before rank, as in mshadow
    with pytest.raises(ms.DeviceError):
        b.get(5, dtype=ms.int8, device=ms.gpu)
    with pytest.raises(ms.DTypeError):
        b.get(5, dtype=ms.int8)
    with pytest.raises(ms.ShapeError, match="dimension do not match target dimension 5 vs 2"):
        b.get(5)


def test_from_raw_pointer():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    b = TBlob(a.ctypes.data, (3, 4), ms.cpu.kDevMask, ms.kInt64)
    assert b.dptr == a.ctypes.data and b.stride == 4 and b.dtype == ms.int64
    np.testing.assert_array_equal(b.get(2).numpy(), a)
    t = _padded((3, 5), ms.float64)                  # a pitched raw pointer
    r = TBlob(t.dptr, (3, 5), 1, ms.kFloat64, stride=t.stride)
    np.testing.assert_array_equal(r.flat_to_2d().numpy(), np.arange(15).reshape(3, 5))
    assert TBlob(0, (0, 4), 1, 0).get().shape == (0, 4)
    with pytest.raises(ValueError, match="null data pointer"):
        TBlob(0, (2, 2), 1, 0)
    with pytest.raises(ms.ShapeError, match="stride"):
        TBlob(a.ctypes.data, (3, 4), 1, ms.kInt64, stride=2)
    g = TBlob(1 << 20, (2, 2), ms.gpu.kDevMask, ms.kFloat32)   # device memory: metadata only
    assert g.dev_mask == 2 and g.dptr == 1 << 20
    with pytest.raises(ms.DeviceError):
        g.get(2, device=ms.gpu)


def test_empty_blob_and_bad_inputs():
    b = TBlob()
    assert b.ndim() == 0 and b.dptr == 0 and b.type_flag == ms.kFloat32 and b.dev_mask == 1
    with pytest.raises(ms.ShapeError, match="empty"):
        b.flat_to_2d()
    with pytest.raises(ms.ShapeError):
        TBlob(np.float32(3.0))                       # 0-d array
    with pytest.raises(TypeError):
        TBlob(np.zeros(3, np.float32), shape=(3,))


def test_blob_does_not_follow_container_resize():
    c = ms.TensorContainer((2, 3), init=1)
    b = TBlob(c)
    c.resize((4, 5))
    assert b.shape == (2, 3)                         # the blob keeps what it was given
