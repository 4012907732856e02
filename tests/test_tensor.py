"""The tensor memory model: allocation, pitches, views, freeing, numpy/DLPack interop,
copy, TensorContainer, streams, device tags, dtype flags and the C++ alias table.

numpy is the oracle throughout. Expression arithmetic is tested elsewhere.
"""
import copy as pycopy
import gc
import pickle
import weakref

import numpy as np
import pytest

import mshadow as ms
from mshadow.aliases import METHOD_ALIASES
from mshadow.dtypes import ALL_DTYPES

ALIGN = 64
SHAPES = [(5,), (3, 7), (2, 3, 5), (2, 1, 3, 17)]


def filled(shape, dtype, sample, pad=False):
    """A new tensor holding sample(shape, dtype), and that oracle array."""
    a = sample(shape, dtype)
    t = ms.new_tensor(shape, init=None, pad=pad, dtype=dtype)
    t.numpy()[...] = a
    return t, a


def row_pointers(t):
    """Address of every row of the 2-D flattened view."""
    base = t.dptr
    return [base + r * t.stride * t.itemsize for r in range(t.flat_to_2d().shape[0])]


# ---- allocation and pitches -------------------------------------------------------------

def test_align_bytes_is_64():
    assert ms.ALIGN_BYTES == ALIGN


@pytest.mark.parametrize("shape", SHAPES)
def test_new_tensor_without_pad_is_contiguous(dtype, shape):
    t = ms.new_tensor(shape, init=3, dtype=dtype)
    assert t.shape == shape and t.dtype == dtype and t.ndim == len(shape)
    assert t.stride == shape[-1] and t.check_contiguous()
    assert t.msize() == int(np.prod(shape)) and t.size() == int(np.prod(shape))
    assert all(t.size(i) == shape[i] for i in range(len(shape)))
    np.testing.assert_array_equal(t.numpy(), np.full(shape, 3, dtype))
    assert t.dptr % ALIGN == 0


@pytest.mark.parametrize("shape", SHAPES[1:] + [(4, 16), (3, 1), (2, 2, 65)])
def test_new_tensor_with_pad_rounds_rows_to_align_bytes(dtype, shape):
    t = ms.new_tensor(shape, init=1, pad=True, dtype=dtype)
    item = dtype.itemsize
    pitch = t.stride * item
    assert pitch % ALIGN == 0
    assert shape[-1] * item <= pitch < shape[-1] * item + ALIGN   # the smallest such pitch
    assert all(p % ALIGN == 0 for p in row_pointers(t))
    assert t.check_contiguous() == (shape[-1] * item % ALIGN == 0)
    assert t.msize() == t.stride * int(np.prod(shape[:-1]))
    for k in range(len(shape)):
        assert t.mem_size(k) == t.stride * int(np.prod(shape[k:-1]))
    assert t.MemSize(len(shape) - 1) == t.stride
    np.testing.assert_array_equal(t.numpy(), np.ones(shape, dtype))


@pytest.mark.parametrize("width, stride", [(3, 16), (5, 16), (16, 16), (17, 32), (1000, 1008),
                                           (1001, 1008)])
def test_pad_stride_float32(width, stride):
    assert ms.new_tensor((2, width), pad=True).stride == stride


def test_every_sub_tensor_row_is_aligned():
    t = ms.new_tensor((3, 4, 5), pad=True, dtype=ms.float64)
    for i in range(3):
        for j in range(4):
            assert t[i][j].dptr % ALIGN == 0
            assert t[i][j].dptr == t.dptr + (i * t.mem_size(1) + j * t.stride) * 8


def test_pad_on_1d_changes_nothing():
    t = ms.new_tensor((5,), pad=True)
    assert t.stride == 5 and t.check_contiguous() and t.msize() == 5


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 4)])
def test_zero_size_tensors(shape):
    for pad in (False, True):
        t = ms.new_tensor(shape, pad=pad)
        assert t.numpy().shape == shape and t.size() == 0


def test_new_tensor_defaults():
    t = ms.new_tensor((2, 3))
    assert t.dtype == ms.float32 == ms.default_real_t and t.device is ms.cpu
    assert t.stream is None and t.stride == 3 and not t.readonly
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3), np.float32))
    assert ms.Tensor((2,), dtype=None).dtype == ms.float32


def test_new_tensor_init_none_still_usable():
    t = ms.new_tensor((4, 4), init=None, pad=True, dtype=ms.int32)
    t[:] = 7
    assert (t.numpy() == 7).all()


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(shape=(2, -3)), ValueError, r"dimension -3 is negative"),
    (dict(shape=(2, 1.5)), TypeError, r"dimension 1.5 is not an integer"),
    (dict(shape=()), ms.ShapeError, r"at least one dimension, got shape \(\)"),
    (dict(shape=(2,), dtype=np.complex64), ms.DTypeError, r"complex64 is not supported"),
    (dict(shape=(2,), dtype=np.bool_), ms.DTypeError, r"bool is not supported"),
    (dict(shape=(2,), dtype=">f4"), ms.DTypeError, r"not in native byte order"),
    (dict(shape=(2,), dtype="nonsense"), ms.DTypeError, r"'nonsense' is not a dtype"),
    (dict(shape=(2,), device=ms.gpu), ms.DeviceError, r"CUDA backend"),
    (dict(shape=(2,), device="tpu"), ms.DeviceError, r"unknown device 'tpu'"),
    (dict(shape=(2,), stream="s"), TypeError, r"stream must be a mshadow Stream or None, got 's'"),
])
def test_new_tensor_bad_arguments(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        ms.new_tensor(**kwargs)


@pytest.mark.parametrize("shape", [(2**40, 2**40), (2**62, 3), (0, 2**62), (2**70, 0)])
def test_shapes_beyond_the_address_space_are_refused(shape):
    # The byte count would wrap around to a tiny malloc behind a huge shape.
    msg = r"needs more than \d+ bytes, the most this platform can address"
    with pytest.raises(ms.ShapeError, match=msg):
        ms.new_tensor(shape, init=None)
    with pytest.raises(ms.ShapeError, match=msg):
        ms.Tensor(shape)
    c = ms.TensorContainer((2, 3), init=1)
    with pytest.raises(ms.ShapeError, match=msg):
        c.resize(shape)
    assert c.shape == (2, 3) and (c.numpy() == 1).all()


def test_dtype_error_is_a_type_error():
    assert issubclass(ms.DTypeError, TypeError) and issubclass(ms.DTypeError, ms.MShadowError)


def test_size_and_mem_size_bad_arguments():
    t = ms.new_tensor((2, 3))
    with pytest.raises(IndexError, match=r"size\(2\) out of range for a 2-D tensor"):
        t.size(2)
    assert t.size(-1) == 3
    with pytest.raises(TypeError, match=r"got 'a'"):
        t.size("a")
    with pytest.raises(IndexError, match=r"mem_size\(2\) out of range for a 2-D tensor"):
        t.mem_size(2)


# ---- unallocated tensors and alloc_space ------------------------------------------------

def test_unallocated_tensor_raises_on_use():
    t = ms.Tensor((2, 3), dtype=ms.int8)
    assert not t.is_allocated and "unallocated" in repr(t)
    assert t.shape == (2, 3) and t.stride == 3        # the handle itself is usable
    for use in (lambda: t.numpy(), lambda: t[0], lambda: t.dptr, lambda: np.asarray(t),
                lambda: t.flat_to_2d(), lambda: t.slice(0, 1), lambda: ms.free_space(t)):
        with pytest.raises(ms.FreedTensorError, match=r"never allocated|no memory"):
            use()


def test_alloc_space_pads_by_default(dtype):
    t = ms.Tensor((3, 5), dtype=dtype)
    ms.alloc_space(t)
    assert t.is_allocated and t.stride * dtype.itemsize % ALIGN == 0
    ms.alloc_space(t, pad=False)
    assert t.stride == 5


# ---- indexing and views -----------------------------------------------------------------

@pytest.mark.parametrize("pad", [False, True])
def test_index_views_match_numpy(dtype, sample, pad):
    t, a = filled((3, 4, 5), dtype, sample, pad)
    for i in range(-3, 3):
        np.testing.assert_array_equal(t[i].numpy(), a[i])
        assert t[i].shape == (4, 5) and t[i].stride == t.stride
        for j in range(-4, 4):
            np.testing.assert_array_equal(np.asarray(t[i][j]), a[i][j])
            np.testing.assert_array_equal(np.asarray(t[i, j]), a[i, j])
            assert t[i, j, 2] == a[i, j, 2] and t[i][j][-1] == a[i, j, -1]
    assert t[1].dptr == t.dptr + t.mem_size(1) * dtype.itemsize
    assert t[-1].dptr == t[2].dptr


def test_1d_element_read_write(dtype, sample):
    t, a = filled((6,), dtype, sample)
    for i in range(-6, 6):
        assert t[i] == a[i]
    t[2] = 42
    t[-1] = 7
    a[2], a[-1] = 42, 7
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.tolist() == a.tolist() and list(t) == list(a)


def test_views_share_memory(dtype, sample):
    t, a = filled((3, 4), dtype, sample, pad=True)
    row = t[1]
    row[:] = 9
    row[0] = 5
    a[1] = 9
    a[1, 0] = 5
    np.testing.assert_array_equal(t.numpy(), a)
    assert np.shares_memory(t.numpy(), row.numpy())
    t.slice(2, 3)[:] = 1
    a[2] = 1
    np.testing.assert_array_equal(t.numpy(), a)
    t.flat_to_2d()[0] = 3
    a[0] = 3
    np.testing.assert_array_equal(t.numpy(), a)


def test_assign_from_numpy_and_tensor_honours_pitch(dtype, sample):
    t = ms.new_tensor((3, 5), pad=True, dtype=dtype)
    a = sample((3, 5), dtype)
    t[:] = a
    np.testing.assert_array_equal(t.numpy(), a)
    u = ms.new_tensor((3, 5), dtype=dtype)
    u[:] = t
    np.testing.assert_array_equal(u.numpy(), a)
    t[1] = 4
    a[1] = 4
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("pad", [False, True])
def test_slice(dtype, sample, pad):
    t, a = filled((5, 3), dtype, sample, pad)
    s = t.slice(1, 4)
    assert s.shape == (3, 3) and s.stride == t.stride
    np.testing.assert_array_equal(s.numpy(), a[1:4])
    np.testing.assert_array_equal(t[1:4].numpy(), a[1:4])
    np.testing.assert_array_equal(t[1:4, :].numpy(), a[1:4])
    np.testing.assert_array_equal(t[-2:].numpy(), a[-2:])
    np.testing.assert_array_equal(t[3:1].numpy(), a[3:1])     # empty, like numpy
    assert t.Slice(2, 2).shape == (0, 3)
    assert t[...] is t and t[:] is t and t[()] is t


def test_slice_1d_is_contiguous(sample):
    t, a = filled((8,), ms.int32, sample)
    s = t.slice(2, 6)
    assert s.stride == 4 and s.msize() == 4 and s.check_contiguous()
    np.testing.assert_array_equal(s.numpy(), a[2:6])


@pytest.mark.parametrize("key, exc, msg", [
    (3, IndexError, r"index 3 out of range for dimension 0 of size 3"),
    (-4, IndexError, r"index -4 out of range"),
    ((0, 0, 0, 0), IndexError, r"too many indices"),
    ((0, 0, 0, ...), IndexError, r"too many indices"),
    ((slice(None), 0), IndexError, r"only leading integers and one leading slice"),
    ((Ellipsis, 0), IndexError, r"got 0 after Ellipsis"),
    ((slice(0, 2), slice(0, 1)), IndexError, r"only leading integers"),
    (slice(0, 3, 2), IndexError, r"step 1"),
    (1.5, TypeError, r"tensor index must be an int, a slice or \.\.\., got 1\.5"),
    ("a", TypeError, r"got 'a'"),
    (None, TypeError, r"got None"),
])
def test_bad_indices(key, exc, msg):
    t = ms.new_tensor((3, 4, 5))
    with pytest.raises(exc, match=msg):
        t[key]
    with pytest.raises(exc, match=msg):
        t[key] = 1
    assert (t.numpy() == 0).all()


@pytest.mark.parametrize("b, e, exc, msg", [
    (2, 1, IndexError, r"slice\(2, 1\) out of range for first dimension 3"),
    (0, 4, IndexError, r"slice\(0, 4\) out of range"),
    (-1, 2, IndexError, r"slice\(-1, 2\)"),
    (0.5, 2, TypeError, r"slice begin must be an int, got 0\.5"),
    (0, "2", TypeError, r"slice end must be an int, got '2'"),
])
def test_bad_slices(b, e, exc, msg):
    with pytest.raises(exc, match=msg):
        ms.new_tensor((3, 2)).slice(b, e)


def test_1d_element_of_2d_needs_two_indices():
    t = ms.new_tensor((2, 3))
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 1, 2]
    with pytest.raises(IndexError):
        t[0][3]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pad", [False, True])
def test_flat_to_2d(dtype, sample, shape, pad):
    t, a = filled(shape, dtype, sample, pad)
    f = t.flat_to_2d()
    rows = int(np.prod(shape[:-1]))
    assert f.shape == ms.Shape(shape).flat_to_2d() == (rows, shape[-1])
    assert f.stride == (t.stride if len(shape) > 1 else shape[0])
    np.testing.assert_array_equal(f.numpy(), a.reshape(rows, shape[-1]))
    assert f.dptr == t.dptr


def test_flat_to_1d(sample):
    t, a = filled((2, 3, 4), ms.float32, sample)
    np.testing.assert_array_equal(t.flat_to_1d().numpy(), a.ravel())
    assert t.FlatTo1D().shape == (24,)
    p = ms.new_tensor((2, 3), pad=True)
    with pytest.raises(ms.ShapeError, match=r"contiguous tensor; this one has shape \(2,3\) "
                                            r"and row stride 16"):
        p.flat_to_1d()


def test_iteration_over_rows(sample):
    t, a = filled((3, 2), ms.int64, sample)
    rows = list(t)
    assert len(rows) == len(t) == 3
    for r, ar in zip(rows, a):
        np.testing.assert_array_equal(r.numpy(), ar)


def test_repr_and_str(sample):
    t, a = filled((2, 3), ms.int32, sample, pad=True)
    assert repr(t) == "Tensor(cpu, int32, shape=(2,3), stride=16)"
    assert str(t) == str(a)


# ---- freeing ----------------------------------------------------------------------------

def _uses(t, v):
    other = ms.new_tensor(t.shape, dtype=t.dtype)
    return [lambda: t.numpy(), lambda: np.asarray(t), lambda: t[0], lambda: t.dptr,
            lambda: t.flat_to_2d(), lambda: t.slice(0, 1), lambda: v.numpy(), lambda: v[0],
            lambda: np.asarray(v), lambda: ms.copy(other, t), lambda: ms.copy(t, other),
            lambda: t.__setitem__(slice(None), 1), lambda: v.__setitem__(0, 1),
            lambda: np.from_dlpack(t), lambda: t.tolist(), lambda: pickle.dumps(t)]


def test_free_space_invalidates_tensor_and_views(dtype):
    t = ms.new_tensor((3, 4), pad=True, dtype=dtype)
    v = t[1]
    ms.free_space(t)
    assert not t.is_allocated and not v.is_allocated and "freed" in repr(t)
    for use in _uses(t, v):
        with pytest.raises(ms.FreedTensorError, match=r"released by free_space"):
            use()
    assert t.shape == (3, 4) and t.stride == ALIGN // dtype.itemsize   # the handle remains


def test_freed_error_is_runtime_error():
    assert issubclass(ms.FreedTensorError, RuntimeError)


def test_double_free_raises():
    t = ms.new_tensor((2, 2))
    ms.free_space(t)
    with pytest.raises(ms.FreedTensorError, match=r"double free"):
        ms.free_space(t)


def test_free_through_a_view_releases_the_whole_allocation():
    t = ms.new_tensor((2, 2))
    ms.free_space(t[0])
    with pytest.raises(ms.FreedTensorError):
        t.numpy()


def test_free_while_numpy_view_alive_is_refused(sample):
    t, a = filled((3, 4), ms.float32, sample, pad=True)
    view = t.numpy()
    sub = view[1:]          # a numpy view of the view pins the memory too
    del view
    with pytest.raises(BufferError, match=r"1 numpy/DLPack view\(s\)"):
        ms.free_space(t)
    np.testing.assert_array_equal(t.numpy(), a)      # memory intact, tensor usable
    np.testing.assert_array_equal(sub, a[1:])
    del sub
    ms.free_space(t)
    assert not t.is_allocated


def test_free_while_dlpack_consumer_alive_is_refused():
    t = ms.new_tensor((2, 3), init=5)
    x = np.from_dlpack(t)
    with pytest.raises(BufferError):
        ms.free_space(t)
    del x
    gc.collect()
    ms.free_space(t)


def test_free_of_borrowed_memory_is_refused():
    a = np.arange(6.0).reshape(2, 3)
    t = ms.from_numpy(a)
    with pytest.raises(ms.MShadowError, match=r"does not own"):
        ms.free_space(t)
    np.testing.assert_array_equal(t.numpy(), a)


# ---- lifetime: views keep the allocation alive -----------------------------------------

def test_view_keeps_allocation_alive_after_owner_deleted(sample):
    t, a = filled((4, 3), ms.float64, sample, pad=True)
    ref = weakref.ref(t)
    v = t[2]
    s = t.slice(1, 3)
    del t
    gc.collect()
    assert ref() is None                 # the owner object is gone ...
    np.testing.assert_array_equal(v.numpy(), a[2])    # ... its memory is not
    np.testing.assert_array_equal(s.numpy(), a[1:3])


def test_numpy_view_keeps_allocation_alive(sample):
    t, a = filled((2, 5), ms.int32, sample, pad=True)
    arr = t.numpy()
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None
    np.testing.assert_array_equal(arr, a)


def test_tensor_drops_numpy_source_only_when_released():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    ref = weakref.ref(a)
    t = ms.from_numpy(a)
    del a
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(t.numpy(), np.arange(12).reshape(3, 4))
    del t
    gc.collect()
    assert ref() is None


# ---- numpy interop ----------------------------------------------------------------------

def test_from_numpy_contiguous_is_zero_copy(dtype, sample):
    a = sample((3, 4), dtype)
    t = ms.from_numpy(a)
    assert t.dtype == dtype and t.shape == (3, 4) and t.stride == 4 and not t.readonly
    assert t.dptr == a.ctypes.data and np.shares_memory(t.numpy(), a)
    t[1, 2] = 77
    assert a[1, 2] == 77


def test_from_numpy_sliced_rows_is_pitched(dtype, sample):
    base = sample((4, 8), dtype)
    a = base[:, 1:6]
    t = ms.from_numpy(a)
    assert t.stride == 8 and not t.check_contiguous() and t.dptr == a.ctypes.data
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.numpy().strides == a.strides
    b = base[::2, :3]
    tb = ms.from_numpy(b)
    assert tb.stride == 16
    np.testing.assert_array_equal(tb.numpy(), b)


@pytest.mark.parametrize("index", [np.s_[:, :, :3], np.s_[:, :1, :], np.s_[1:, 1:2, 2:],
                                   np.s_[:1, ::2, :], np.s_[0:1, 0:1, :]])
def test_from_numpy_3d_views(sample, index):
    a = sample((3, 4, 8), ms.float32)[index]
    t = ms.from_numpy(a)
    np.testing.assert_array_equal(t.numpy(), a)
    assert np.shares_memory(t.numpy(), a)


def test_from_numpy_read_only(dtype, sample):
    a = sample((2, 3), dtype)
    a.flags.writeable = False
    t = ms.from_numpy(a)
    assert t.readonly and t.dptr == a.ctypes.data
    assert not t.numpy().flags.writeable and t[0].readonly
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(ValueError, match="read-only"):
        t[0, 1] = 5
    with pytest.raises(ValueError, match="read-only"):
        t[:] = 5
    with pytest.raises(ValueError, match="read-only"):
        ms.copy(t, ms.new_tensor((2, 3), dtype=dtype))
    assert (a == sample((2, 3), dtype)).all()


@pytest.mark.parametrize("make, msg", [
    (lambda: np.zeros((3, 4), np.float32).T, r"last axis must be contiguous"),
    (lambda: np.zeros((3, 8), np.float32)[:, ::2], r"last axis must be contiguous"),
    (lambda: np.zeros((3, 4, 5), np.float32)[:, :2, :], r"do not collapse into rows"),
    (lambda: np.zeros((3, 4, 5), np.float32).transpose(1, 0, 2), r"do not collapse into rows"),
    (lambda: np.broadcast_to(np.zeros(4, np.float32), (3, 4)), r"row stride 0 bytes"),
    (lambda: np.zeros((3, 4), np.float32)[::-1], r"row stride -16 bytes"),
])
def test_from_numpy_refuses_layouts_it_cannot_view(make, msg):
    a = make()
    with pytest.raises(ValueError, match=msg) as info:
        ms.from_numpy(a)
    assert str(a.strides) in str(info.value)


def test_from_numpy_misaligned_pointer():
    raw = np.zeros(17, np.uint8)
    a = np.frombuffer(raw.data, np.float32, 3, 1)     # starts at byte 1
    with pytest.raises(ValueError, match="not aligned"):
        ms.from_numpy(a)


@pytest.mark.parametrize("dt", [np.complex64, np.complex128, np.bool_, ">f4", ">i8", object, "U3",
                                np.uint16, np.float128 if hasattr(np, "float128") else np.uint32])
def test_from_numpy_unsupported_dtypes(dt):
    a = np.zeros(3, dtype=dt)
    with pytest.raises(ms.DTypeError) as info:
        ms.from_numpy(a)
    assert isinstance(info.value, TypeError)
    assert str(np.dtype(dt)) in str(info.value) or repr(np.dtype(dt)) in str(info.value)


def test_from_numpy_other_inputs():
    with pytest.raises(ms.ShapeError, match="0-d array"):
        ms.from_numpy(np.float32(3))
    t = ms.from_numpy([[1, 2], [3, 4]])
    assert t.dtype == np.dtype(int) and t.numpy().tolist() == [[1, 2], [3, 4]]
    assert ms.from_numpy(t) is t
    assert ms.from_numpy(np.zeros((0, 3), np.int8)).shape == (0, 3)


@pytest.mark.parametrize("shape", SHAPES)
def test_asarray_honours_pitch(dtype, sample, shape):
    t, a = filled(shape, dtype, sample, pad=True)
    arr = np.asarray(t)
    assert arr.dtype == dtype and arr.shape == shape
    expected = [dtype.itemsize] * len(shape)
    if len(shape) > 1:
        expected[-2] = t.stride * dtype.itemsize
        for k in range(len(shape) - 3, -1, -1):
            expected[k] = expected[k + 1] * shape[k + 1]
    assert arr.strides == tuple(expected)
    assert arr.ctypes.data == t.dptr
    np.testing.assert_array_equal(arr, a)


def test_array_protocol_copy_and_dtype(sample):
    t, a = filled((2, 3), ms.int32, sample, pad=True)
    c = np.array(t)
    assert not np.shares_memory(c, t.numpy())
    f = np.asarray(t, dtype=np.float64)
    assert f.dtype == np.float64 and (f == a).all()
    assert not np.asarray(t).flags.owndata


# ---- DLPack -----------------------------------------------------------------------------

@pytest.mark.parametrize("pad", [False, True])
def test_dlpack_to_numpy(dtype, sample, pad):
    t, a = filled((3, 5), dtype, sample, pad)
    assert t.__dlpack_device__() == (1, 0)
    x = np.from_dlpack(t)
    np.testing.assert_array_equal(x, a)
    assert x.ctypes.data == t.dptr and x.strides == t.numpy().strides
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        assert not x.flags.writeable      # numpy before 2.1 imports every DLPack view read-only
        return
    x[0, 0] = 11
    assert t[0, 0] == 11


def test_dlpack_from_numpy(dtype, sample):
    a = sample((4, 3), dtype)
    t = ms.from_dlpack(a)
    assert t.dptr == a.ctypes.data and t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), a)
    p = ms.from_dlpack(sample((4, 8), dtype)[:, :3])
    assert p.stride == 8


def test_dlpack_round_trip_through_mshadow(sample):
    t, a = filled((2, 3), ms.float64, sample, pad=True)
    u = ms.from_dlpack(t)
    assert u.dptr == t.dptr and u.stride == t.stride
    np.testing.assert_array_equal(u.numpy(), a)


def test_dlpack_stream_argument_refused():
    with pytest.raises(BufferError, match="stream"):
        ms.new_tensor((2,)).__dlpack__(stream=3)


# ---- copy -------------------------------------------------------------------------------

@pytest.mark.parametrize("dpad, spad", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 17)])
def test_copy_with_differing_pitches(dtype, sample, dpad, spad, shape):
    src, a = filled(shape, dtype, sample, spad)
    dst = ms.new_tensor(shape, init=0, pad=dpad, dtype=dtype)
    ms.copy(dst, src)
    np.testing.assert_array_equal(dst.numpy(), a)
    assert dst.dptr != src.dptr


def test_copy_into_numpy_view_with_pitch(sample):
    base = np.zeros((3, 9), np.float32)
    dst = ms.from_numpy(base[:, 2:7])
    src, a = filled((3, 5), ms.float32, sample, pad=True)
    ms.Copy(dst, src)
    expected = np.zeros((3, 9), np.float32)
    expected[:, 2:7] = a
    np.testing.assert_array_equal(base, expected)      # the gaps between rows untouched


def test_copy_shape_mismatch_message():
    with pytest.raises(ms.ShapeError, match=r"^Copy:shape mismatch:\(2,3\) vs \(3,2\)$"):
        ms.copy(ms.new_tensor((2, 3)), ms.new_tensor((3, 2)))
    with pytest.raises(ValueError, match=r"Copy:shape mismatch:\(6,\) vs \(2,3\)"):
        ms.copy(ms.new_tensor((6,)), ms.new_tensor((2, 3)))


def test_copy_dtype_mismatch():
    with pytest.raises(ms.DTypeError, match=r"Copy: dtype mismatch: float32 vs int32"):
        ms.copy(ms.new_tensor((2,)), ms.new_tensor((2,), dtype=ms.int32))


@pytest.mark.parametrize("d, s", [(np.s_[1:4], np.s_[0:3]), (np.s_[0:3], np.s_[1:4]),
                                  (np.s_[0:4], np.s_[0:4])])
@pytest.mark.parametrize("pad", [False, True])
def test_copy_between_overlapping_views(sample, d, s, pad):
    t, a = filled((4, 5), ms.int32, sample, pad)
    ms.copy(t[d], t[s])
    a[d] = a[s].copy()
    np.testing.assert_array_equal(t.numpy(), a)


def test_copy_overlapping_with_different_pitches():
    base = np.arange(40, dtype=np.int64)
    a = base.copy()
    dst = ms.from_numpy(base[:24].reshape(4, 6)[:, :3])        # pitch 6
    src = ms.from_numpy(base[2:34].reshape(4, 8)[:, :3])       # pitch 8, overlaps dst
    ms.copy(dst, src)
    a[:24].reshape(4, 6)[:, :3] = a[2:34].reshape(4, 8)[:, :3].copy()
    np.testing.assert_array_equal(base, a)


# ---- TensorContainer --------------------------------------------------------------------

def test_container_init(dtype):
    c = ms.TensorContainer((3, 5), init=2, dtype=dtype)
    assert c.pad and c.shape == (3, 5) and c.dtype == dtype
    assert c.stride * dtype.itemsize % ALIGN == 0 and c.dptr % ALIGN == 0
    np.testing.assert_array_equal(c.numpy(), np.full((3, 5), 2, dtype))
    assert isinstance(c, ms.Tensor)
    n = ms.TensorContainer((3, 5), pad=False, dtype=dtype)
    assert n.stride == 5 and n.check_contiguous()
    e = ms.TensorContainer()
    assert e.shape == (0,) and e.size() == 0


def test_container_resize_reuses_memory_when_it_fits():
    c = ms.TensorContainer((4, 10), init=1)          # pad: stride 16 floats
    ptr, stride = c.dptr, c.stride
    v = c[0]
    c.resize((2, 16))                                # 2 rows of 16 fit in 4 rows of 16
    assert c.shape == (2, 16) and c.dptr == ptr and c.stride == stride
    assert v.is_allocated                            # same memory, old views still valid
    c.Resize((4, 3))
    assert c.dptr == ptr and c.stride == stride and not c.check_contiguous()
    c.resize((3, 5), init=6)
    assert (c.numpy() == 6).all() and c.dptr == ptr


def test_container_resize_without_pad_stays_contiguous():
    c = ms.TensorContainer((4, 8), pad=False)
    ptr = c.dptr
    c.resize((2, 5))
    assert c.dptr == ptr and c.stride == 5 and c.check_contiguous()
    c.resize((4, 8), init=3)
    assert c.dptr == ptr and (c.numpy() == 3).all()


@pytest.mark.parametrize("new", [(5, 10), (4, 17), (2, 2, 17), (3, 2, 10)])
def test_container_resize_reallocates_when_too_small(new):
    c = ms.TensorContainer((4, 10) if len(new) == 2 else (2, 2, 10))
    old_view = c[0]
    c.resize(new, init=1)
    assert c.shape == new and (c.numpy() == 1).all()
    assert c.stride * 4 % ALIGN == 0 and c.stride >= new[-1]
    with pytest.raises(ms.FreedTensorError):        # the old memory was released
        old_view.numpy()


def test_container_resize_refused_while_numpy_view_alive():
    c = ms.TensorContainer((2, 3), init=4)
    arr = c.numpy()
    c.resize((1, 3))                                 # fits: allowed
    assert c.shape == (1, 3)
    with pytest.raises(BufferError, match=r"cannot reallocate for shape \(5,3\)"):
        c.resize((5, 3))
    assert c.shape == (1, 3) and (c.numpy() == 4).all()      # unchanged
    assert (arr == 4).all()
    del arr
    c.resize((5, 3), init=0)
    assert c.shape == (5, 3)


def test_container_resize_bad_shapes():
    c = ms.TensorContainer((2, 3))
    with pytest.raises(ms.ShapeError, match=r"expected a 2-D shape, got \(6,\)"):
        c.resize((6,))
    with pytest.raises(ValueError, match=r"dimension -1 is negative"):
        c.resize((2, -1))
    assert c.shape == (2, 3)


def test_container_release_then_reuse():
    c = ms.TensorContainer((3, 4), init=1)
    v = c[1]
    c.release()
    assert c.shape == (0, 4) and c.size() == 0 and c.numpy().shape == (0, 4)
    with pytest.raises(ms.FreedTensorError):
        v.numpy()
    c.resize((2, 4), init=5)
    assert (c.numpy() == 5).all()
    c.Release()
    c.Release()                                      # releasing twice is harmless


def test_container_release_refused_while_numpy_view_alive():
    c = ms.TensorContainer((3, 4), init=1)
    arr = c.numpy()
    with pytest.raises(BufferError):
        c.release()
    assert c.shape == (3, 4) and (arr == 1).all()


def test_container_copy_is_deep(dtype, sample):
    c = ms.TensorContainer((3, 5), init=None, pad=False, dtype=dtype)
    c[:] = sample((3, 5), dtype)
    for d in (c.copy(), pycopy.copy(c), pycopy.deepcopy(c), pickle.loads(pickle.dumps(c))):
        assert type(d) is ms.TensorContainer and d.pad == c.pad and d.dtype == dtype
        np.testing.assert_array_equal(d.numpy(), c.numpy())
        assert d.dptr != c.dptr
        d[0, 0] = 99
        assert c[0, 0] != 99


def test_container_assign_resizes_to_a_container_only(sample):
    # mshadow's operator=(const TensorContainer&) resizes and copies; any other value of
    # another shape is a ShapeError, as the C++ shape check aborts
    c = ms.TensorContainer((2, 2))
    a = sample((3, 7), ms.float32)
    src = ms.TensorContainer((3, 7))
    src[:] = a
    c[:] = src
    assert c.shape == (3, 7)
    np.testing.assert_array_equal(c.numpy(), a)
    for other in (a[:1], ms.from_numpy(a[:1]), np.zeros(4, np.float32)):
        with pytest.raises(ms.ShapeError):
            c[...] = other
    assert c.shape == (3, 7)
    np.testing.assert_array_equal(c.numpy(), a)
    c[:] = 2.5
    assert c.shape == (3, 7) and (c.numpy() == 2.5).all()
    with pytest.raises(ms.ShapeError, match=r"2 dims cannot take .* shape \(4,\)"):
        c[:] = ms.TensorContainer((4,))


def test_container_set_pad():
    c = ms.TensorContainer((2, 3), pad=False)
    c.set_pad(True)
    c.resize((2, 30))
    assert c.stride == 32


# ---- copying and pickling plain tensors -------------------------------------------------

def test_tensor_copy_module_and_pickle(sample):
    t, a = filled((2, 3), ms.int8, sample, pad=True)
    h = pycopy.copy(t)                 # a handle: shares memory, like mshadow's Tensor copy
    assert h is not t and h.dptr == t.dptr
    for d in (pycopy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        assert d.dptr != t.dptr and d.stride == t.stride and d.dtype == ms.int8
        np.testing.assert_array_equal(d.numpy(), a)


# ---- streams, devices, dtype flags, aliases ---------------------------------------------

def test_stream_cpu():
    s = ms.Stream(ms.cpu)
    assert s.wait() is None and s.check_idle() is True and s.Wait() is None and s.CheckIdle()
    s2 = ms.new_stream(ms.cpu)
    assert isinstance(s2, ms.Stream) and ms.NewStream(ms.cpu).device is ms.cpu
    ms.delete_stream(s2)
    ms.DeleteStream(s)
    with pytest.raises(TypeError, match=r"delete_stream expects a Stream, got None"):
        ms.delete_stream(None)
    with pytest.raises(ms.DeviceError, match="CUDA"):
        ms.new_stream(ms.gpu)
    with pytest.raises(ms.DeviceError, match="CUDA"):
        ms.Stream(ms.gpu)


def test_tensor_streams():
    s = ms.new_stream(ms.cpu)
    t = ms.new_tensor((2, 3), stream=s)
    assert t.stream is s and t[0].stream is s
    u = ms.new_tensor((2, 3))
    u.set_stream(s)
    assert u.stream is s and u.flat_to_2d().stream is s
    u.set_stream(None)
    assert u.stream is None
    with pytest.raises(TypeError, match=r"got 42"):
        u.set_stream(42)


def test_device_tags():
    assert ms.cpu.kDevCPU is True and ms.cpu.kDevMask == 1
    assert ms.gpu.kDevCPU is False and ms.gpu.kDevMask == 2
    assert repr(ms.cpu) == "mshadow.cpu"
    assert pickle.loads(pickle.dumps(ms.gpu)) is ms.gpu
    assert ms.new_tensor((1,), device="cpu").device is ms.cpu
    t = ms.Tensor((2,), device=ms.gpu)               # an unallocated GPU handle is fine
    assert t.device is ms.gpu
    with pytest.raises(ms.DeviceError):
        ms.alloc_space(t)


def test_dtype_flags():
    flags = [ms.kFloat32, ms.kFloat64, ms.kFloat16, ms.kUint8, ms.kInt32, ms.kInt8, ms.kInt64]
    dts = [ms.float32, ms.float64, ms.float16, ms.uint8, ms.int32, ms.int8, ms.int64]
    assert flags == list(range(7)) and ms.default_type_flag == ms.kFloat32
    for f, dt in zip(flags, dts):
        assert ms.type_flag(dt) == f and ms.dtype_from_flag(f) == dt
        assert ms.new_tensor((1,), dtype=dt).type_flag == f
        assert ms.new_tensor((1,), dtype=f).dtype == dt          # a flag is accepted as dtype
    assert set(ALL_DTYPES) == set(dts)
    with pytest.raises(ms.DTypeError, match=r"Unknown type enum 7"):
        ms.dtype_from_flag(7)


def test_free_function_aliases():
    assert ms.NewTensor is ms.new_tensor and ms.FreeSpace is ms.free_space
    assert ms.AllocSpace is ms.alloc_space and ms.Copy is ms.copy
    assert ms.NewStream is ms.new_stream and ms.DeleteStream is ms.delete_stream
    assert ms.ConvertLayout is ms.convert_layout


@pytest.mark.parametrize("cls, cname, pyname", METHOD_ALIASES,
                         ids=[f"{c.__name__}.{n}" for c, n, _ in METHOD_ALIASES])
def test_method_aliases(cls, cname, pyname):
    assert getattr(cls, cname) == getattr(cls, pyname)


def test_method_aliases_behave_like_the_originals():
    t = ms.NewTensor(ms.Shape2(3, 5), 0, pad=True)
    assert t.MSize() == t.msize() == 3 * 16 and t.MemSize(1) == 16
    assert not t.CheckContiguous() and t.Size(1) == 5
    assert t.FlatTo2D().shape == (3, 5) and t.Slice(1, 2).shape == (1, 5)
    ms.FreeSpace(t)
    assert not t.is_allocated


def test_slice_augmented_assignment_is_one_pass():
    # `t[:] += e` runs __iadd__ on t[:] and then Python stores t[:] back into t; that store
    # must not run a second (copy) assignment. Each assignment looks its plan up once.
    t = ms.new_tensor((64, 64), 1.0)
    t[:] += 1                        # warm: both plans compiled
    before = ms.plan_cache_info()
    t[:] += 1
    after = ms.plan_cache_info()
    assert (after.hits + after.misses) - (before.hits + before.misses) == 1
    np.testing.assert_array_equal(t.numpy(), 3.0)
    t[:] = t                         # assigning a tensor to itself changes nothing
    np.testing.assert_array_equal(t.numpy(), 3.0)
    a = np.ones((2, 2), np.float32)
    a.flags.writeable = False
    ro = ms.from_numpy(a)
    with pytest.raises(ValueError, match="read-only"):
        ro[:] = ro
