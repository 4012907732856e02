# DLPack of gpu tensors, both ways, zero-copy on device pointers (included by _core.pyx).
#
# Export: Tensor.__dlpack__ of a gpu tensor builds the capsule here (numpy builds a cpu
# tensor's). The capsule's manager context is an _Export of the tensor's Allocation, so
# free_space refuses while a consumer holds it; the deleter drops it. Import: from_dlpack of
# a CUDA producer (torch, CuPy, or a gpu tensor) reads the capsule here into a gpu Tensor
# over the producer's memory; the producer's deleter runs once the Tensor and its views are
# gone and the device has finished with the memory.
# The structs are dlpack.h's (v1.0), declared here: they are the protocol, ABI-stable.

from cpython.pycapsule cimport (PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer,
                                PyCapsule_SetName)
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from *:
    """
    typedef struct { int32_t device_type; int32_t device_id; } ms_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } ms_DLDataType;
    typedef struct {
      void *data; ms_DLDevice device; int32_t ndim; ms_DLDataType dtype;
      int64_t *shape; int64_t *strides; uint64_t byte_offset;
    } ms_DLTensor;
    typedef struct ms_DLManagedTensor {
      ms_DLTensor dl_tensor; void *manager_ctx;
      void (*deleter)(struct ms_DLManagedTensor *);
    } ms_DLManagedTensor;
    typedef struct { uint32_t major; uint32_t minor; } ms_DLPackVersion;
    typedef struct ms_DLManagedTensorVersioned {
      ms_DLPackVersion version; void *manager_ctx;
      void (*deleter)(struct ms_DLManagedTensorVersioned *);
      uint64_t flags; ms_DLTensor dl_tensor;
    } ms_DLManagedTensorVersioned;
    """
    ctypedef struct ms_DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct ms_DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct ms_DLTensor:
        void *data
        ms_DLDevice device
        int32_t ndim
        ms_DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct ms_DLManagedTensor:
        ms_DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(ms_DLManagedTensor *) noexcept
    ctypedef struct ms_DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct ms_DLManagedTensorVersioned:
        ms_DLPackVersion version
        void *manager_ctx
        void (*deleter)(ms_DLManagedTensorVersioned *) noexcept
        uint64_t flags
        ms_DLTensor dl_tensor

cdef enum:
    _kDLCUDA = 2
    _kDLCUDAManaged = 13     # cuMemAllocManaged: a device pointer too
    _DLPACK_FLAG_READ_ONLY = 1
    _DLPACK_FLAG_IS_COPIED = 2

# the DLPack devices whose memory a gpu tensor views: device memory and managed memory, a
# device pointer either way
_CUDA_MEMORY = (_kDLCUDA, _kDLCUDAManaged)

# numpy kind -> DLPack type code (kDLInt, kDLUInt, kDLFloat)
_DL_CODES = {"i": 0, "u": 1, "f": 2}
_DL_KINDS = {code: kind for kind, code in _DL_CODES.items()}


# ---- export ------------------------------------------------------------------------------

cdef void _fill_dl_tensor(ms_DLTensor *d, Tensor t, int64_t *dims) except *:
    """``d`` describes ``t``: its first element, kDLCUDA device 0, shape and strides in
    elements (a pitched row's stride is its pitch), in ``dims`` (2 * ndim slots)."""
    cdef int k, nd = len(t.shape)
    cdef int64_t step = 1
    d.data = <void *> t.data()
    d.device.device_type = _kDLCUDA
    d.device.device_id = 0
    d.ndim = nd
    d.dtype.code = _DL_CODES[t.dtype.kind]
    d.dtype.bits = t.itemsize * 8
    d.dtype.lanes = 1
    d.shape, d.strides = dims, dims + nd
    d.byte_offset = 0
    for k in range(nd - 1, -1, -1):
        dims[k] = t.shape[k]
        dims[nd + k] = step
        step = t.stride if k == nd - 1 else step * t.shape[k]


cdef void _delete_unversioned(ms_DLManagedTensor *m) noexcept with gil:
    Py_DECREF(<object> m.manager_ctx)     # the _Export: its Allocation's export count drops
    free(m)


cdef void _delete_versioned(ms_DLManagedTensorVersioned *m) noexcept with gil:
    Py_DECREF(<object> m.manager_ctx)
    free(m)


cdef void _capsule_unversioned(object cap) noexcept:
    # a capsule no consumer took (still "dltensor") deletes its tensor itself
    if PyCapsule_IsValid(cap, b"dltensor"):
        m = <ms_DLManagedTensor *> PyCapsule_GetPointer(cap, b"dltensor")
        m.deleter(m)


cdef void _capsule_versioned(object cap) noexcept:
    if PyCapsule_IsValid(cap, b"dltensor_versioned"):
        m = <ms_DLManagedTensorVersioned *> PyCapsule_GetPointer(cap, b"dltensor_versioned")
        m.deleter(m)


cdef object _numpy_dlpack(object a, dict kwargs):
    """``a.__dlpack__(**kwargs)`` of a numpy array, on every numpy the package supports."""
    try:
        return a.__dlpack__(**kwargs)
    except TypeError:
        if not kwargs:
            raise
        # numpy < 2.1 exports only unversioned capsules and takes no keywords; a consumer
        # that asks for a version accepts those (the DLPack protocol)
        return a.__dlpack__()


cdef object _gpu_dlpack(Tensor t, object stream, object max_version, object dl_device,
                        object want_copy):
    """``t.__dlpack__`` of a gpu tensor (the array API's arguments)."""
    if dl_device is not None and tuple(dl_device) != (_kDLCUDA, 0):
        if tuple(dl_device) == (1, 0) and want_copy is not False:    # to the host: a copy
            return _numpy_dlpack(t.to_numpy(),
                                 {} if max_version is None else {"max_version": max_version})
        raise BufferError(f"a gpu tensor exports to kDLCUDA device 0 (2, 0), or to the cpu "
                          f"(1, 0) as a copy; dl_device {tuple(dl_device)} is neither")
    if want_copy:
        c = new_tensor(t.shape, None, dtype=t.dtype, device=t.device, pad=True)
        copy(c, t)
        return _gpu_dlpack(c, stream, max_version, None, False)
    _dlpack_sync(t, stream)
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    if t.readonly and not versioned:
        raise BufferError("a read-only tensor can be exported only with DLPack >= 1.0 "
                          "(max_version=(1, 0)), which can mark it read-only")
    cdef int nd = len(t.shape)
    cdef _Export ex = _Export.__new__(_Export)
    cdef ms_DLManagedTensor *m
    cdef ms_DLManagedTensorVersioned *v
    cdef size_t head = sizeof(ms_DLManagedTensorVersioned) if versioned \
        else sizeof(ms_DLManagedTensor)
    cdef char *block = <char *> malloc(head + 2 * nd * sizeof(int64_t))
    if block == NULL:
        raise MemoryError("__dlpack__: could not allocate the DLPack tensor")
    try:
        if versioned:
            v = <ms_DLManagedTensorVersioned *> block
            _fill_dl_tensor(&v.dl_tensor, t, <int64_t *> (block + head))
            v.version.major, v.version.minor = 1, 0
            v.flags = _DLPACK_FLAG_READ_ONLY if t.readonly else 0
            v.deleter = _delete_versioned
            v.manager_ctx = <void *> ex
            cap = PyCapsule_New(block, b"dltensor_versioned", _capsule_versioned)
        else:
            m = <ms_DLManagedTensor *> block
            _fill_dl_tensor(&m.dl_tensor, t, <int64_t *> (block + head))
            m.deleter = _delete_unversioned
            m.manager_ctx = <void *> ex
            cap = PyCapsule_New(block, b"dltensor", _capsule_unversioned)
    except BaseException:
        free(block)
        raise
    ex.mem = t.mem               # counted as an export until the consumer's deleter runs
    t.mem.n_exports += 1
    Py_INCREF(ex)                # the capsule's reference, dropped by the deleter
    return cap


cdef int _dlpack_sync(Tensor t, object stream) except -1:
    """Make the work queued on ``t`` visible to a consumer on ``stream`` (the array API's:
    None or 1 the legacy default stream, -1 none to make, else a CUstream): the tensor's
    stream is waited for; a tensor with no stream (the default stream) needs nothing for a
    consumer on the default stream, and the whole device is waited for otherwise."""
    if stream is not None and type(stream) is not int:
        raise TypeError(f"__dlpack__: stream must be an int or None, got {stream!r}")
    if stream == -1:
        return 0
    if stream == 0:
        raise BufferError("__dlpack__: stream 0 is ambiguous for CUDA (the array API "
                          "forbids it): pass 1 for the legacy default stream")
    from .cuda import driver
    if t.stream is not None:
        t.stream.wait()
    elif stream not in (None, 1):
        driver().synchronize()
    return 0


# ---- import ------------------------------------------------------------------------------

@cython.auto_pickle(False)
cdef class _DLPackKeeper:
    """Keeps a consumed DLPack tensor alive; its producer's deleter runs at dealloc, after
    the device has finished with the memory (kernels may still read it)."""
    cdef void *managed
    cdef bint versioned

    def __dealloc__(self):
        if self.managed == NULL:
            return
        try:
            from .cuda import driver
            driver().synchronize()
        except BaseException:
            pass            # (at exit the driver may be gone: the producer frees anyway)
        if self.versioned:
            vm = <ms_DLManagedTensorVersioned *> self.managed
            if vm.deleter != NULL:
                vm.deleter(vm)
        else:
            um = <ms_DLManagedTensor *> self.managed
            if um.deleter != NULL:
                um.deleter(um)


cdef Tensor _from_cuda_dlpack(object x):
    """A gpu Tensor over a CUDA DLPack producer's memory, zero-copy (the consumer's stream:
    the legacy default one, which the producer orders its work before)."""
    try:
        cap = x.__dlpack__(stream=1, max_version=(1, 0))
    except TypeError:                  # a producer older than DLPack 1.0's keywords
        cap = x.__dlpack__(stream=1)
    cdef bint versioned = PyCapsule_IsValid(cap, b"dltensor_versioned")
    if not versioned and not PyCapsule_IsValid(cap, b"dltensor"):
        raise BufferError("from_dlpack: the producer's __dlpack__ gave no unused DLPack "
                          "capsule")
    cdef ms_DLTensor *d
    cdef ms_DLManagedTensorVersioned *vm = NULL
    cdef ms_DLManagedTensor *um = NULL
    cdef bint readonly = False
    if versioned:
        vm = <ms_DLManagedTensorVersioned *> PyCapsule_GetPointer(cap, b"dltensor_versioned")
        if vm.version.major != 1:
            raise BufferError(f"from_dlpack: DLPack {vm.version.major}.{vm.version.minor} "
                              f"tensors are not understood (1.x is)")
        d = &vm.dl_tensor
        readonly = (vm.flags & _DLPACK_FLAG_READ_ONLY) != 0
    else:
        um = <ms_DLManagedTensor *> PyCapsule_GetPointer(cap, b"dltensor")
        d = &um.dl_tensor
    shape, pitch, dtype = _dl_layout(d)
    # the capsule is ours now: renamed, so its destructor leaves the tensor to the keeper
    PyCapsule_SetName(cap, b"used_dltensor_versioned" if versioned else b"used_dltensor")
    cdef _DLPackKeeper keep = _DLPackKeeper.__new__(_DLPackKeeper)
    keep.managed = <void *> vm if versioned else <void *> um
    keep.versioned = versioned
    cdef Tensor t = Tensor(shape, dtype=dtype, device=gpu)
    cdef Allocation mem = Allocation.__new__(Allocation)
    mem.ptr = <char *> d.data + d.byte_offset
    mem.nbytes = ((t.rows - 1) * pitch + t.cols) * t.itemsize if t.rows and t.cols else 0
    mem.alive = True
    mem.owned = False
    mem.base = keep
    mem.device_mem = keep      # device memory: the CPU's evaluations refuse it (_pin_now)
    t.mem = mem
    t.offset = 0
    t.stride = pitch
    t.readonly = readonly
    return t


cdef tuple _dl_layout(ms_DLTensor *d):
    """(shape, row pitch in elements, dtype) of a CUDA DLPack tensor an mshadow Tensor can
    view: device 0 (device or managed memory, _CUDA_MEMORY), one lane of a dtype mshadow
    has, unit steps along the last axis and rows ``pitch`` apart, the leading axes compact
    over the rows."""
    if d.device.device_type not in _CUDA_MEMORY or d.device.device_id != 0:
        raise BufferError(f"from_dlpack: a tensor on DLPack device ({d.device.device_type}, "
                          f"{d.device.device_id}); gpu tensors view kDLCUDA (2, 0) or "
                          f"kDLCUDAManaged (13, 0) memory of device 0")
    kind = _DL_KINDS.get(d.dtype.code)
    try:
        dtype = np.dtype(f"{kind}{d.dtype.bits // 8}") if kind and d.dtype.lanes == 1 \
            and d.dtype.bits % 8 == 0 else None
        dtype = as_dtype(dtype) if dtype is not None else None
    except (TypeError, DTypeError):
        dtype = None
    if dtype is None:
        from .dtypes import DTYPES
        raise DTypeError(f"from_dlpack: DLPack type (code {d.dtype.code}, {d.dtype.bits} bits, "
                         f"{d.dtype.lanes} lanes) is not an mshadow dtype "
                         f"({', '.join(t.np.name for t in DTYPES)})")
    cdef int k, nd = d.ndim
    if nd < 1:
        raise ShapeError("from_dlpack: a Tensor needs at least one dimension, got a 0-d one")
    shape = tuple(d.shape[k] for k in range(nd))
    if d.strides == NULL:
        return shape, shape[-1], dtype
    strides = tuple(d.strides[k] for k in range(nd))
    pitch = strides[-2] if nd > 1 else shape[-1]
    ok = (strides[-1] == 1 or shape[-1] <= 1)
    if nd > 1:
        ok = ok and (pitch >= shape[-1] or shape[-2] <= 1)
        step = pitch
        for k in range(nd - 3, -1, -1):
            step *= shape[k + 1]
            ok = ok and (strides[k] == step or shape[k] <= 1)
    if not ok:
        raise ValueError(f"from_dlpack: strides {strides} (elements) of shape {shape}: an "
                         f"mshadow tensor has unit steps along its last axis and compact "
                         f"leading axes over pitched rows; copy it to that layout first")
    if nd > 1 and shape[-2] <= 1:
        pitch = shape[-1]
    return shape, pitch, dtype
