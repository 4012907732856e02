"""DLPack of gpu tensors both ways, zero-copy on device pointers: our capsules read back
field by field through ctypes (the dlpack.h v1.0 layout, written out here independently of
mshadow/_dlpack.pxi), producers' capsules crafted the same way, round trips, the export
count that keeps free_space from freeing memory a consumer holds, streams, and PyTorch and
CuPy on a real GPU (skipped without one)."""
import ctypes
import gc

import numpy as np
import pytest

import mshadow as ms
from mshadow import cuda

from gpu_testing import gpu_device, gpu_from  # noqa: F401  (gpu_device: autouse)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _read(cap):
    """The DLTensor of a capsule (and the versioned header's flags and version, or None)."""
    if _api.PyCapsule_IsValid(cap, b"dltensor_versioned"):
        m = DLManagedTensorVersioned.from_address(
            _api.PyCapsule_GetPointer(cap, b"dltensor_versioned"))
        return m.dl_tensor, (m.major, m.minor, m.flags)
    m = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(cap, b"dltensor"))
    return m.dl_tensor, None


DTYPES = [np.float32, np.float64, np.float16, np.uint8, np.int8, np.int32, np.int64]
CODES = {"f": 2, "i": 0, "u": 1}


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_capsule_describes_the_pitched_tensor(dtype):
    t = gpu_from(np.arange(3 * 4 * 70).reshape(3, 4, 70).astype(dtype))
    assert t.stride > 70                                 # pitched rows
    for max_version in (None, (1, 0)):
        cap = t.__dlpack__(max_version=max_version)
        d, head = _read(cap)
        assert (head is None) == (max_version is None)
        if head is not None:
            assert head == (1, 0, 0)
        assert d.data == t.dptr and d.byte_offset == 0
        assert (d.device.device_type, d.device.device_id) == (2, 0) == t.__dlpack_device__()
        dt = np.dtype(dtype)
        assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (CODES[dt.kind], dt.itemsize * 8, 1)
        assert d.ndim == 3 and [d.shape[k] for k in range(3)] == [3, 4, 70]
        assert [d.strides[k] for k in range(3)] == [4 * t.stride, t.stride, 1]
        del cap, d


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_round_trip_shares_the_memory(dtype):
    a = np.arange(5 * 90).reshape(5, 90).astype(dtype)
    t = gpu_from(a)
    u = ms.from_dlpack(t)
    assert (u.device, u.shape, u.stride, u.dtype, u.dptr) == (
        ms.gpu, t.shape, t.stride, t.dtype, t.dptr)
    u[:] = u + 1
    np.testing.assert_array_equal(t.to_numpy(), a + 1)
    v = ms.from_dlpack(t[1:4])                    # a view: its first element, its pitch
    np.testing.assert_array_equal(v.to_numpy(), a[1:4] + 1)
    c = gpu_from(a, pad=False)                    # compact rows
    np.testing.assert_array_equal(ms.from_dlpack(c).to_numpy(), a)


def test_an_exported_tensor_is_not_freed_under_its_consumer():
    t = gpu_from(np.ones((4, 80), np.float32))
    u = ms.from_dlpack(t)
    with pytest.raises(BufferError, match="1 numpy/DLPack view"):
        ms.free_space(t)
    with pytest.raises(ms.MShadowError, match="does not own"):
        ms.free_space(u)                          # the consumer's memory is the producer's
    np.testing.assert_array_equal(u.to_numpy(), 1)
    del u
    gc.collect()
    ms.free_space(t)
    # a capsule nobody consumed gives the memory back when it goes
    t2 = gpu_from(np.ones((2, 3), np.float32))
    cap = t2.__dlpack__()
    with pytest.raises(BufferError):
        ms.free_space(t2)
    del cap
    gc.collect()
    ms.free_space(t2)


def test_read_only_tensors_need_a_versioned_capsule_and_stay_read_only():
    t = ms.from_dlpack(gpu_from(np.ones((2, 3), np.float32)))
    t2 = gpu_from(np.ones((2, 3), np.float32))
    ro = ms.from_dlpack(_Producer(_crafted(t2, flags=1)))
    assert ro.readonly
    with pytest.raises(ValueError, match="read-only"):
        ro[:] = 2
    with pytest.raises(BufferError, match="max_version=\\(1, 0\\)"):
        ro.__dlpack__()
    d, head = _read(ro.__dlpack__(max_version=(1, 0)))
    assert head[2] & 1
    assert not t.readonly


def test_copies_and_the_host():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = gpu_from(a)
    d, _ = _read(t.__dlpack__(copy=True))
    assert d.data != t.dptr
    host = t.__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    np.testing.assert_array_equal(np.from_dlpack(_Producer(host, (1, 0))), a)
    with pytest.raises(BufferError, match=r"dl_device \(2, 1\)"):
        t.__dlpack__(dl_device=(2, 1))
    with pytest.raises(BufferError, match="as a copy"):
        t.__dlpack__(dl_device=(1, 0), copy=False)


def test_streams_of_an_export(monkeypatch):
    s = ms.new_stream(ms.gpu)
    t = ms.new_tensor((2, 3), 1.0, device=ms.gpu, stream=s)
    waited = []
    monkeypatch.setattr(type(s), "wait", lambda self: waited.append(self))
    t.__dlpack__(stream=1)
    t.__dlpack__()
    t.__dlpack__(stream=-1)                        # the consumer orders nothing
    assert waited == [s, s]
    with pytest.raises(BufferError, match="stream 0 is ambiguous"):
        t.__dlpack__(stream=0)
    with pytest.raises(TypeError, match="stream must be an int"):
        t.__dlpack__(stream="s")


class _Producer:
    """A DLPack producer handing out one capsule."""

    def __init__(self, cap, device=(2, 0)):
        self.cap, self.device = cap, device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.cap

    def __dlpack_device__(self):
        return self.device


_KEEP = []      # the crafted structs and deleters, alive as long as a capsule may use them


def _crafted(t, shape=None, strides=None, device=(2, 0), dtype=(2, 32, 1), flags=0,
             major=1, deleted=None):
    """A versioned capsule over ``t``'s memory as a producer would make it: ``deleted``
    (a list) records the producer's deleter calls."""
    shape = tuple(t.shape) if shape is None else shape
    m = DLManagedTensorVersioned()
    m.major, m.minor, m.flags = major, 0, flags
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    m.dl_tensor.data = t.dptr
    m.dl_tensor.device = DLDevice(*device)
    m.dl_tensor.ndim = len(shape)
    m.dl_tensor.dtype = DLDataType(*dtype)
    m.dl_tensor.shape = dims
    st = None
    if strides is not None:
        st = (ctypes.c_int64 * len(strides))(*strides)
        m.dl_tensor.strides = st
    deleter = DELETER(lambda p: deleted.append(1) if deleted is not None else None)
    m.deleter = deleter
    _KEEP.append((m, dims, st, deleter))
    return _api.PyCapsule_New(ctypes.addressof(m), b"dltensor_versioned", None)


def test_a_producers_capsule_is_viewed_and_its_deleter_runs_once():
    t = gpu_from(np.arange(12, dtype=np.float32).reshape(3, 4), pad=False)
    deleted = []
    u = ms.from_dlpack(_Producer(_crafted(t, deleted=deleted)))
    np.testing.assert_array_equal(u.to_numpy(), np.arange(12).reshape(3, 4))
    w = u[1:]
    del u
    gc.collect()
    assert deleted == []                           # a view keeps it
    del w
    gc.collect()
    assert deleted == [1]
    # strides given, pitched: rows 6 elements apart
    deleted2 = []
    p = ms.from_dlpack(_Producer(_crafted(t, (2, 4), (6, 1), deleted=deleted2)))
    assert p.stride == 6
    np.testing.assert_array_equal(p.to_numpy(), [[0, 1, 2, 3], [6, 7, 8, 9]])


def test_managed_memory_is_viewed_as_a_gpu_tensor():
    """kDLCUDAManaged (13): a device pointer as kDLCUDA's (CuPy's managed-memory arrays)."""
    t = gpu_from(np.arange(6, dtype=np.float32).reshape(2, 3), pad=False)
    deleted = []
    u = ms.from_dlpack(_Producer(_crafted(t, device=(13, 0), deleted=deleted), (13, 0)))
    assert u.device is ms.gpu and u.dptr == t.dptr
    np.testing.assert_array_equal(u.to_numpy(), np.arange(6).reshape(2, 3))
    del u
    gc.collect()
    assert deleted == [1]
    with pytest.raises(BufferError, match=r"device \(13, 1\)"):
        ms.from_dlpack(_Producer(_crafted(t, device=(13, 1)), (13, 1)))


def test_pinned_host_memory_is_viewed_as_a_cpu_tensor():
    """kDLCUDAHost (3): page-locked host memory (torch's pin_memory(), CuPy's pinned
    arrays) is host memory: a cpu tensor over the producer's bytes, zero-copy, whose
    producer is released when the last view goes."""
    import sys
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = sys.getrefcount(a)
    cap = a.__dlpack__()                          # numpy's own capsule (it holds a)
    dl, _ = _read(cap)
    dl.device = DLDevice(3, 0)                    # as a pinned-memory producer says it
    u = ms.from_dlpack(_Producer(cap, (3, 0)))
    assert u.device is ms.cpu and u.dptr == a.ctypes.data
    a[1, 2] = 7                                   # the same bytes
    np.testing.assert_array_equal(u.numpy(), [[0, 1, 2], [3, 4, 7]])
    out = ms.new_tensor((2, 3))
    out[:] = u * 2                                # an operand like any cpu tensor
    np.testing.assert_array_equal(out.numpy(), [[0, 2, 4], [6, 8, 14]])
    del u, cap, dl
    gc.collect()
    assert sys.getrefcount(a) == before           # the producer's deleter ran


@pytest.mark.parametrize("kw, error, match", [
    ({"shape": (4, 3), "strides": (1, 4)}, ValueError, "unit steps along its last axis"),
    ({"shape": (2, 2, 3), "strides": (3, 6, 1)}, ValueError, "compact"),
    ({"device": (2, 1)}, BufferError, r"device \(2, 1\)"),
    ({"device": (1, 0)}, BufferError, r"device \(1, 0\)"),
    ({"dtype": (4, 16, 1)}, ms.DTypeError, "not an mshadow dtype"),      # bfloat16
    ({"dtype": (2, 32, 4)}, ms.DTypeError, "4 lanes"),
    ({"dtype": (6, 8, 1)}, ms.DTypeError, "code 6"),                     # bool
    ({"shape": ()}, ms.ShapeError, "0-d"),
    ({"major": 2}, BufferError, "DLPack 2.0"),
])
def test_a_capsule_a_tensor_cannot_view_is_refused_and_left_to_its_producer(kw, error, match):
    t = gpu_from(np.zeros((3, 4), np.float32), pad=False)
    cap = _crafted(t, **kw)
    with pytest.raises(error, match=match):
        ms.from_dlpack(_Producer(cap))
    assert _api.PyCapsule_IsValid(cap, b"dltensor_versioned")   # not consumed


def test_an_imported_tensor_stays_out_of_cpu_evaluations():
    u = ms.from_dlpack(gpu_from(np.ones((2, 3), np.float32)))
    c = ms.new_tensor((2, 3))
    with pytest.raises(ms.DeviceError):
        c[:] = u * 2


def _real_gpu():
    if cuda.driver().__name__.endswith("emulate"):
        pytest.skip("needs a real GPU (the emulated device's memory is the host's)")


def test_torch_both_ways():
    _real_gpu()
    torch = pytest.importorskip("torch")
    t = gpu_from(np.arange(2 * 70, dtype=np.float32).reshape(2, 70))
    x = torch.from_dlpack(t)
    assert x.device.type == "cuda" and x.data_ptr() == t.dptr and x.stride(0) == t.stride
    y = torch.arange(12, dtype=torch.float64, device="cuda").reshape(3, 4)
    u = ms.from_dlpack(y)
    assert u.dptr == y.data_ptr()
    u[:] = u * 2
    torch.cuda.synchronize()
    assert y.cpu().numpy().tolist() == (np.arange(12).reshape(3, 4) * 2).tolist()


def test_cupy_both_ways():
    _real_gpu()
    cupy = pytest.importorskip("cupy")
    t = gpu_from(np.arange(6, dtype=np.float32).reshape(2, 3))
    x = cupy.from_dlpack(t)
    assert x.data.ptr == t.dptr
    y = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)
    u = ms.from_dlpack(y)
    assert u.dptr == y.data.ptr
    np.testing.assert_array_equal(u.to_numpy(), cupy.asnumpy(y))
