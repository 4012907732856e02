"""The buffer protocol (PEP 3118): memoryview(t) is a zero-copy, strided view that pins the
memory like a numpy export. The oracle is numpy's own export of the same tensor."""
import hashlib

import numpy as np
import pytest

import mshadow as ms

DTYPES = [np.float32, np.float64, np.float16, np.uint8, np.int8, np.int32, np.int64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 5), (0, 4)])
@pytest.mark.parametrize("pad", [False, True])
def test_memoryview_matches_numpy_export(dtype, shape, pad):
    t = ms.new_tensor(shape, init=0, pad=pad, dtype=dtype)
    ref = t.numpy()
    ref[...] = np.arange(ref.size).reshape(shape) % 100
    m = memoryview(t)
    assert m.format == np.dtype(dtype).char
    assert m.itemsize == np.dtype(dtype).itemsize
    assert m.shape == shape and m.strides == ref.strides
    assert m.readonly is False
    assert m.c_contiguous == ref.flags.c_contiguous
    assert m.nbytes == ref.size * ref.itemsize
    a = np.asarray(m)
    assert a.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(a, ref)
    if ref.size:
        assert a.ctypes.data == t.dptr           # zero copy
        a.flat[-1] = 42
        assert ref.flat[-1] == 42


def test_padded_rows_are_strided_not_contiguous():
    t = ms.new_tensor((3, 5), pad=True)
    assert t.stride == 16
    m = memoryview(t)
    assert m.strides == (64, 4) and not m.c_contiguous
    assert memoryview(ms.new_tensor((3, 5), pad=False)).c_contiguous


def test_views_export_their_own_window():
    t = ms.new_tensor((4, 3, 5), pad=True)
    t.numpy()[...] = np.arange(60, dtype=np.float32).reshape(4, 3, 5)
    for v in (t[2], t.slice(1, 3), t[1][2], t.flat_to_2d()):
        np.testing.assert_array_equal(np.asarray(memoryview(v)), v.numpy())


def test_simple_request_needs_contiguous_rows():
    # hashlib asks for a PyBUF_SIMPLE buffer: the bytes in order, no strides
    c = ms.new_tensor((3, 5), init=0)
    c.numpy()[...] = np.arange(15).reshape(3, 5)
    assert hashlib.sha1(c).digest() == hashlib.sha1(c.numpy().tobytes()).digest()
    p = ms.new_tensor((3, 5), pad=True)
    with pytest.raises(BufferError, match="not C-contiguous"):
        hashlib.sha1(p)
    assert bytes(p) == p.numpy().tobytes()   # bytes() takes a strided buffer and copies


def test_free_space_refused_while_memoryview_alive():
    t = ms.new_tensor((3, 5), init=1.0, pad=True)
    m = memoryview(t)
    with pytest.raises(BufferError):
        ms.free_space(t)
    assert t.is_allocated and np.asarray(m).sum() == 15
    m.release()
    ms.free_space(t)
    assert not t.is_allocated


def test_each_export_is_counted():
    t = ms.new_tensor((4,), init=1.0)
    m1, m2 = memoryview(t), memoryview(t[:2])
    m1.release()
    with pytest.raises(BufferError):
        ms.free_space(t)
    m2.release()
    ms.free_space(t)


def test_export_outlives_a_rebinding_of_the_tensor():
    # alloc_space gives t new memory; the old export still counts against the old memory
    t = ms.new_tensor((2, 3), init=7.0)
    m = memoryview(t)
    ms.alloc_space(t)
    assert np.asarray(m).tolist() == [[7.0] * 3] * 2
    m.release()
    ms.free_space(t)


def test_container_cannot_reallocate_while_exported():
    c = ms.TensorContainer((2, 3), init=1.0)
    m = memoryview(c)
    with pytest.raises(BufferError):
        c.resize((5, 3))
    with pytest.raises(BufferError):
        c.release()
    assert np.asarray(m).sum() == 6
    m.release()
    c.resize((5, 3))
    assert c.shape == ms.Shape(5, 3)


def test_freed_and_unallocated_tensors_raise_freed_tensor_error():
    t = ms.new_tensor((2, 2))
    ms.free_space(t)
    with pytest.raises(ms.FreedTensorError, match="released"):
        memoryview(t)
    with pytest.raises(ms.FreedTensorError, match="no memory"):
        memoryview(ms.Tensor((2, 2)))


def test_gpu_tensor_refused():
    with pytest.raises(ms.DeviceError, match="no host buffer"):
        memoryview(ms.Tensor((2, 2), device=ms.gpu))


def test_read_only_tensor_exports_read_only():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    a.flags.writeable = False
    t = ms.from_numpy(a)
    m = memoryview(t)
    assert m.readonly
    with pytest.raises(TypeError):
        m[0, 0] = 1.0
    np.testing.assert_array_equal(np.asarray(m), a)


# ---- DLPack of padded tensors: strides go out as they are -----------------------------

def _padded(dtype=np.float32):
    t = ms.TensorContainer((3, 5), init=0, dtype=dtype)   # pad=True by default
    t.numpy()[...] = np.arange(15).reshape(3, 5)
    return t


def test_dlpack_padded_to_numpy_is_strided_and_shared():
    t = _padded()
    x = np.from_dlpack(t)
    assert x.strides == (t.stride * 4, 4) == (64, 4)
    np.testing.assert_array_equal(x, np.arange(15).reshape(3, 5))
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":   # numpy imports DLPack read-only
        assert x.ctypes.data == t.dptr
        return
    x[2, 4] = -1
    assert t.numpy()[2, 4] == -1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.uint8, np.int8,
                                   np.int32, np.int64])
def test_dlpack_padded_to_torch(dtype):
    torch = pytest.importorskip("torch")
    t = _padded(dtype)
    y = torch.from_dlpack(t)
    assert y.stride() == (t.stride, 1) and not y.is_contiguous()
    assert str(y.dtype) == "torch." + {"float16": "float16", "float32": "float32",
                                       "float64": "float64"}.get(np.dtype(dtype).name,
                                                                 np.dtype(dtype).name)
    np.testing.assert_array_equal(y.numpy(), t.numpy())
    y[1, 1] = 7
    assert t.numpy()[1, 1] == 7
    with pytest.raises(BufferError):
        ms.free_space(t)
    del y
    t.release()


def test_dlpack_compact_tensor_to_jax():
    jnp = pytest.importorskip("jax.numpy")
    t = ms.TensorContainer((3, 5), init=0, pad=False)
    t.numpy()[...] = np.arange(15).reshape(3, 5)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t)), t.numpy())
    p = _padded()   # the documented way for padded rows: a compact copy
    np.testing.assert_array_equal(np.asarray(jnp.asarray(p.numpy())), p.numpy())


def test_dlpack_read_only_needs_versioned_export():
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    t = ms.from_numpy(a)
    with pytest.raises(BufferError, match=r"DLPack >= 1.0"):
        t.__dlpack__()
    with pytest.raises(BufferError, match=r"DLPack >= 1.0"):
        t.__dlpack__(max_version=(0, 8))
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":   # no versioned capsules underneath
        with pytest.raises(BufferError, match=r"DLPack >= 1.0"):
            np.from_dlpack(t)
        return
    x = np.from_dlpack(t)   # numpy asks for 1.0 and keeps the flag
    assert not x.flags.writeable
    np.testing.assert_array_equal(x, a)


# ---- the request flags, driven through the C API (what Cython and other consumers ask) ----
import ctypes  # noqa: E402


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)), ("internal", ctypes.c_void_p)]


_get = ctypes.pythonapi.PyObject_GetBuffer
_get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release = ctypes.pythonapi.PyBuffer_Release
_release.argtypes = [ctypes.POINTER(_PyBuffer)]
WRITABLE, FORMAT, ND, STRIDES = 0x1, 0x4, 0x8, 0x18
C_CONTIG, F_CONTIG, ANY_CONTIG = 0x38, 0x58, 0x98


def _request(t, flags):
    b = _PyBuffer()
    _get(t, ctypes.byref(b), flags)
    try:
        nd = b.ndim
        return {"len": b.len, "itemsize": b.itemsize, "ndim": nd, "readonly": b.readonly,
                "format": b.format, "buf": b.buf,
                "shape": None if not b.shape else tuple(b.shape[:nd]),
                "strides": None if not b.strides else tuple(b.strides[:nd])}
    finally:
        _release(ctypes.byref(b))


def test_simple_and_nd_requests_describe_contiguous_bytes():
    t = ms.new_tensor((3, 5), dtype=np.int32)
    simple = _request(t, 0)
    assert simple == {"len": 60, "itemsize": 4, "ndim": 1, "readonly": 0, "format": None,
                      "buf": t.dptr, "shape": None, "strides": None}
    nd = _request(t, ND | FORMAT)
    assert nd["shape"] == (3, 5) and nd["strides"] is None and nd["format"] == b"i"
    ms.free_space(t)   # every request above was released


@pytest.mark.parametrize("shape,pad,flags,ok", [
    ((3, 5), False, C_CONTIG, True), ((3, 5), False, F_CONTIG, False),
    ((3, 5), False, ANY_CONTIG, True), ((3, 5), True, ANY_CONTIG, False),
    ((3, 5), True, STRIDES, True), ((3, 5), True, ND, False),
    ((5,), True, F_CONTIG, True), ((1, 5), True, C_CONTIG, True),
    ((5, 1), False, F_CONTIG, True), ((2, 3, 4), True, C_CONTIG, False),
])
def test_contiguity_requests(shape, pad, flags, ok):
    t = ms.new_tensor(shape, pad=pad)
    if ok:
        r = _request(t, flags | FORMAT)
        assert r["shape"] == shape and r["format"] == b"f"
        if r["strides"] is not None:
            assert r["strides"] == t.numpy().strides
    else:
        with pytest.raises(BufferError, match="not (C-|Fortran-|C- or Fortran-)contiguous") as e:
            _request(t, flags)
        assert ("padded rows" in str(e.value)) == (t.stride != shape[-1])
    ms.free_space(t)   # a refused request left no export behind


def test_writable_request_on_read_only_tensor():
    a = np.zeros((2, 3), np.float32)
    a.flags.writeable = False
    t = ms.from_numpy(a)
    assert _request(t, STRIDES)["readonly"] == 1
    with pytest.raises(BufferError, match="read-only"):
        _request(t, STRIDES | WRITABLE)


def test_dlpack_versioned_request_works_on_every_numpy():
    # consumers such as torch pass max_version; numpy < 2.1 underneath takes no keywords
    t = ms.new_tensor((2, 3), 1.5)
    cap = t.__dlpack__(max_version=(1, 0))
    assert type(cap).__name__ == "PyCapsule"
    c = t.__dlpack__(max_version=(1, 0), copy=True)
    assert type(c).__name__ == "PyCapsule"
