# Tensor, Allocation, allocation functions and numpy / DLPack interop (included by _core.pyx).

import operator
import numpy as np
cimport cython
cimport numpy as cnp
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.buffer cimport (PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES,
                             PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS)
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.ref cimport Py_INCREF, Py_DECREF, PyObject
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_SIZE, PyTuple_GET_ITEM

from .shape import Shape, as_shape, int_text as _shape_int_text, INDEX_MAX as _INDEX_MAX
from .dtypes import as_dtype, type_flag as _type_flag, dtype_from_flag
from .device import cpu, gpu, as_device, check_devices, Stream
from .errors import ShapeError, DTypeError, DeviceError, FreedTensorError, MShadowError

cnp.import_array()

cdef extern from "Python.h":
    ctypedef struct PySliceObject:     # (public: Include/sliceobject.h)
        PyObject *start
        PyObject *stop
        PyObject *step


cdef inline bint _is_whole_slice(object key) noexcept:
    """``key`` is ``[:]``: read from the slice's fields, not as three attribute lookups
    (a tenth of a small statement's run)."""
    cdef PySliceObject *s
    if type(key) is not slice:
        return False
    s = <PySliceObject *> <PyObject *> key
    return (s.start == <PyObject *> None and s.stop == <PyObject *> None
            and s.step == <PyObject *> None)

ALIGN_BYTES = MS_ALIGN_BYTES

# PEP 3118 format of each type_flag: numpy's own character, so memoryview(t) and numpy agree.
_BUF_FORMATS = tuple(np.dtype(dtype_from_flag(f)).char.encode("ascii")
                     for f in range(MS_NUM_TYPEFLAGS))
cdef char *_buf_format[MS_NUM_TYPEFLAGS]   # pointers into _BUF_FORMATS, which lives as long as the module
for _f in range(MS_NUM_TYPEFLAGS):
    _buf_format[_f] = <char *> _BUF_FORMATS[_f]


cdef bint _buf_contiguous(int nd, Py_ssize_t *shape, Py_ssize_t *strides, Py_ssize_t item,
                          bint fortran) noexcept:
    """CPython's rule (PyBuffer_IsContiguous): axes of extent 1 may have any stride."""
    cdef Py_ssize_t sd = item
    cdef int i, k
    for i in range(nd):
        if shape[i] == 0:
            return True
    for i in range(nd):
        k = i if fortran else nd - 1 - i
        if shape[k] > 1 and strides[k] != sd:
            return False
        sd *= shape[k]
    return True



# Raw pointers must never be pickled (Cython's auto-pickle would turn ``ptr`` into bytes
# and free() a pointer it never allocated on unpickling); a Tensor pickles its data instead.
# no_gc_clear: a cycle's collector must not clear device_mem (or base) before __dealloc__
# reads it: a gpu Allocation then took its device address for host memory and freed it
@cython.auto_pickle(False)
@cython.no_gc_clear
cdef class Allocation:
    """Owns (or borrows) the bytes of one or more tensors and knows whether they are valid."""

    def __dealloc__(self):
        # an evaluation in flight holds references to its tensors, so n_running is 0 here;
        # GPU memory may still be read by a kernel queued before (cuMemFree "may" wait for
        # it, the driver API says): free it after the device has finished, as free_space
        if self.owned and self.ptr != NULL:
            try:
                self._free()
            except BaseException:
                pass        # (at exit the CUDA driver may be gone: the Memory frees itself)

    cdef void _free(self) except *:
        """Give the bytes back: host memory at once, GPU memory once the device is done."""
        if self.device_mem is not None:
            _device_free(self.device_mem)
        else:
            ms_aligned_free(self.ptr)
        self.ptr = NULL

    cdef void release(self) except *:
        if not self.alive:
            raise FreedTensorError("free_space: the tensor's memory was already released (double free)")
        if self.n_exports:
            raise BufferError(f"cannot release memory while {self.n_exports} numpy/DLPack "
                              f"view(s) of it are alive; delete them first")
        if self.foreign_held:
            raise BufferError("cannot release memory whose __cuda_array_interface__ was read "
                              "(hasattr included): the library holding it cannot say when it "
                              "is done, so it goes back when every reference to it is gone")
        if not self.owned:
            raise MShadowError("free_space: this tensor views memory it does not own "
                               "(from_numpy / from_dlpack); release the source object instead")
        self.alive = False          # every later use raises FreedTensorError from now on
        if self.n_running:          # an evaluation without the GIL still reads or writes
            self.free_pending = True   # the bytes: the last one to finish frees them
            return
        self._free()

    cdef void pin(self) noexcept:
        """An evaluation is about to use the bytes without the GIL (call with the GIL)."""
        self.n_running += 1

    cdef void unpin(self) noexcept:
        """That evaluation has ended (with the GIL); a free_space meanwhile happens now."""
        self.n_running -= 1
        if self.n_running == 0 and self.free_pending:
            self.free_pending = False
            self._free()


cdef int _device_free(object m) except -1:
    """Free GPU memory once the kernels queued before (asynchronous on the default stream,
    cuda/executor.py) have finished with it."""
    from .cuda import driver
    driver().synchronize()
    m.free()
    return 0


cdef Allocation _allocate_device(Tensor t, bint pad):
    """GPU memory for ``t`` from the CUDA driver in use (mshadow.cuda.driver()), with
    mshadow's AllocSpace<gpu> pitch rule (_device_block)."""
    mem, pitch = _device_block(t.rows, t.cols, t.itemsize, pad and len(t.shape) > 1)
    t.mem = mem
    t.offset = 0
    t.stride = pitch // t.itemsize
    t.readonly = False
    return mem


cdef tuple _device_block(Py_ssize_t rows, Py_ssize_t cols, int itemsize, bint pad):
    """(GPU memory, its row pitch in bytes) for ``rows`` x ``cols``: pitched rows
    (cuMemAllocPitch) when ``pad`` and the rows are at least 64 elements wide, else one
    contiguous block (cuMemAlloc). A tensor's (_allocate_device) or a TensorContainer's
    new block, taken before the container changes."""
    from .cuda import driver, unavailable_reason
    reason = unavailable_reason()
    if reason is not None:
        raise DeviceError(f"alloc_space: gpu tensors need the CUDA backend, which has no "
                          f"device here: {reason.splitlines()[0]}")
    drv = driver()
    cdef size_t row_bytes = <size_t> cols * itemsize
    if pad and cols >= 64:
        m = drv.Memory.pitched(row_bytes, max(rows, 1), min(max(itemsize, 4), 16))
        pitch = m.pitch
    else:
        m = drv.Memory(max(row_bytes * <size_t> rows, 1))
        pitch = row_bytes
    cdef Allocation mem = Allocation.__new__(Allocation)
    mem.device_mem = m
    mem.ptr = <char *> <size_t> m.address
    mem.nbytes = m.nbytes
    mem.alive = True
    mem.owned = True
    return mem, pitch


cdef Allocation _allocate(Py_ssize_t nbytes):
    cdef Allocation mem = Allocation.__new__(Allocation)
    mem.ptr = <char *> ms_aligned_malloc(<size_t> nbytes)
    if mem.ptr == NULL:
        raise MemoryError(f"could not allocate {nbytes} bytes")
    mem.nbytes = nbytes
    mem.alive = True
    mem.owned = True
    return mem


@cython.auto_pickle(False)
@cython.no_gc_clear           # __dealloc__ reads mem (the export count must drop)
cdef class _Export:
    """The object numpy views keep alive: it pins the Allocation and counts as an export."""
    cdef Allocation mem
    cdef readonly dict __array_interface__

    def __dealloc__(self):
        if self.mem is not None:
            self.mem.n_exports -= 1


cdef object _as_index(object v, str what):
    try:
        return operator.index(v)
    except TypeError:
        raise IntegerArgumentError(f"{what} must be an int, got {v!r} "
                                   f"({type(v).__name__}); write {_int_text(v)}") from None


cdef str _int_text(object v):
    """What to write instead of ``v`` where an integer is needed (shape.int_text)."""
    return "" if v is None else _shape_int_text(v)


cdef object _cai_stream(object stream):
    """The CUDA Array Interface's "stream" of a tensor's ``stream`` (1: the legacy default)."""
    if stream is None:
        return 1
    from .cuda.streams import driver_stream
    return driver_stream(stream, "__cuda_array_interface__").address


cdef object _check_stream(object stream, object device):
    """``stream`` for a tensor on ``device``: None, or a Stream of that device."""
    if stream is None:
        return None
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a mshadow Stream or None, got {stream!r}")
    if stream.device is not device:
        raise DeviceError(f"a {device.name} tensor takes a Stream({device.name}) or None, got "
                          f"{stream!r}")
    return stream


cdef _check_extent(object shape, Py_ssize_t itemsize):
    """Refuse shapes whose padded bytes overflow Py_ssize_t (they would wrap to a tiny malloc)."""
    rows = 1
    for d in shape[:-1]:
        rows *= d
    cols = shape[-1] if len(shape) else 0
    padded = (cols * itemsize + MS_ALIGN_BYTES - 1) // MS_ALIGN_BYTES * MS_ALIGN_BYTES
    if rows > PY_SSIZE_T_MAX or max(rows, 1) * padded > PY_SSIZE_T_MAX:
        raise ShapeError(f"shape {shape} with {itemsize}-byte items needs more than "
                         f"{PY_SSIZE_T_MAX} bytes, the most this platform can address")


cdef Py_ssize_t _prod(object dims):
    cdef Py_ssize_t n = 1
    for d in dims:
        n *= <Py_ssize_t> d
    return n


cdef Py_ssize_t _rows_of(object shape) except -1:
    """The rows of ``shape``'s 2-D flattening: the product of every axis but the last.
    A Shape is read as the tuple it is (indexing a tuple subclass from Cython goes through
    the generic protocol: 60 ns an axis, which made a 4-D statement half again as slow)."""
    cdef Py_ssize_t n = 1, k
    if not PyTuple_Check(shape):
        shape = tuple(shape)
    for k in range(PyTuple_GET_SIZE(shape) - 1):
        n *= <Py_ssize_t> <object> PyTuple_GET_ITEM(shape, k)
    return n


cdef inline object _axis(object shape, Py_ssize_t k):
    """Axis ``k`` of ``shape`` (from the end when negative), read as _rows_of reads it."""
    if not PyTuple_Check(shape):
        return shape[k]
    if k < 0:
        k += PyTuple_GET_SIZE(shape)
    if not 0 <= k < PyTuple_GET_SIZE(shape):
        raise IndexError(f"axis {k} of a shape of {PyTuple_GET_SIZE(shape)} axes")
    return <object> PyTuple_GET_ITEM(shape, k)


# the docstring's first line is the text signature: Cython must not prepend its own
@cython.embedsignature(False)
cdef class Tensor:
    """Tensor(shape, dtype='float32', device='cpu', stream=None)
--

    A handle with no memory yet (the first line is the text signature that
    ``inspect.signature`` reads; 'float32' and 'cpu' mean ms.float32 and ms.cpu).

    Give it memory with ``alloc_space``; ``new_tensor``, ``from_numpy`` and views
    (``t[i]``, ``slice``, ``flat_to_2d``) return tensors that already have it.

    Read-only attributes: ``shape`` (a Shape), ``stride`` (elements from one row to the
    next), ``dtype``, ``type_flag`` (mshadow's kFloat32, ...), ``itemsize``, ``device`` and
    ``readonly``; ``stream`` may be set.
    """

    def __init__(self, shape, dtype=np.float32, device=cpu, stream=None):
        shape = as_shape(shape)
        if len(shape) == 0:
            raise ShapeError("a Tensor needs at least one dimension, got shape ()")
        dt = as_dtype(dtype)
        _check_extent(shape, dt.itemsize)
        self.shape = shape
        self.dtype = dt
        self.type_flag = _type_flag(dt)
        self.itemsize = dt.itemsize
        self.device = as_device(device)
        self.stream = _check_stream(stream, self.device)
        self.stride = self.cols = _axis(shape, -1)
        self.rows = _rows_of(shape)
        self.mem = None

    cdef char *data(self) except NULL:
        """The first element's address; raises if the memory is gone."""
        if self.mem is None:
            raise FreedTensorError("tensor has no memory: allocate it with alloc_space() "
                                   "or create it with new_tensor()")
        if not self.mem.alive:
            raise FreedTensorError("tensor memory was released by free_space(); this tensor "
                                   "and every view of it are no longer valid")
        return self.mem.ptr + self.offset

    cdef Tensor _view(self, object shape, Py_ssize_t offset, Py_ssize_t stride):
        cdef Tensor v = Tensor.__new__(Tensor)
        v.mem = self.mem
        v.offset = offset
        v.shape = shape
        v.stride = stride
        v.dtype = self.dtype
        v.type_flag = self.type_flag
        v.itemsize = self.itemsize
        v.device = self.device
        v.stream = self.stream
        v.readonly = self.readonly
        v.cols = _axis(shape, -1)
        v.rows = _rows_of(shape)
        return v

    # ---- properties -------------------------------------------------------------
    @property
    def ndim(self):
        """Number of dimensions (``len(shape)``)."""
        return len(self.shape)

    @property
    def dptr(self):
        """The address of the first element, as an int."""
        return <size_t> self.data()

    @property
    def is_allocated(self):
        """True while the tensor has memory that has not been freed."""
        return self.mem is not None and self.mem.alive

    @property
    def exp_type(self):
        """``type.kRValue`` (0): a tensor is a value, not a lazy expression."""
        return 0   # type.kRValue

    def size(self, i=None):
        """``size(i)`` is ``shape[i]``; ``size()`` the number of elements."""
        if i is None:
            return self.shape.size()
        k = _as_index(i, "size(i): i")
        if not -len(self.shape) <= k < len(self.shape):
            raise IndexError(f"size({k}) out of range for a {len(self.shape)}-D tensor")
        return self.shape[k]

    def mem_size(self, int startdim=0):
        """Elements spanned by dims ``[startdim, ndim-1)`` with the row stride (``MemSize``)."""
        cdef int nd = len(self.shape)
        if not 0 <= startdim < nd:
            raise IndexError(f"mem_size({startdim}) out of range for a {nd}-D tensor")
        if nd == 1:
            return self.shape[0]
        return self.stride * _prod(self.shape[startdim:nd - 1])

    def msize(self):
        """Elements of the memory the tensor spans, padding included (``MSize``)."""
        return self.mem_size(0)

    def check_contiguous(self):
        """True when rows are not padded (``stride == shape[-1]``; always for 1-D)."""
        return len(self.shape) == 1 or self.stride == self.shape[-1]

    def set_stream(self, stream):
        """Attach ``stream`` (a ``Stream`` of the tensor's device, or None)."""
        self.stream = _check_stream(stream, self.device)

    # ---- views ------------------------------------------------------------------
    def flat_to_2d(self):
        """A 2-D view: all leading dimensions become rows (``FlatTo2D``)."""
        self.data()
        return self._view(Shape(self.rows, self.cols), self.offset,
                          self.cols if len(self.shape) == 1 else self.stride)

    def flat_to_1d(self):
        """A 1-D view of every element; the tensor must be contiguous (``FlatTo1D``)."""
        self.data()
        if not self.check_contiguous():
            raise ShapeError(f"flat_to_1d needs a contiguous tensor; this one has shape "
                             f"{self.shape} and row stride {self.stride}")
        n = self.shape.size()
        return self._view(Shape(n), self.offset, n)

    def slice(self, begin, end):
        """``Slice(begin, end)``: rows ``[begin, end)`` of the first dimension, sharing memory."""
        self.data()
        cdef Py_ssize_t n = self.shape[0]
        b = _as_index(begin, "slice begin")
        e = _as_index(end, "slice end")
        if not 0 <= b <= e <= n:
            raise IndexError(f"slice({b}, {e}) out of range for first dimension {n} "
                             f"(expected 0 <= begin <= end <= {n})")
        shape = Shape((e - b,) + tuple(self.shape[1:]))
        if len(self.shape) == 1:
            return self._view(shape, self.offset + b * self.itemsize, e - b)
        return self._view(shape, self.offset + b * self.mem_size(1) * self.itemsize, self.stride)

    cdef Py_ssize_t _index(self, object i) except -1:
        cdef Py_ssize_t n = self.shape[0]
        try:
            k = operator.index(i)
        except TypeError:
            raise IntegerArgumentError(f"tensor index must be an int, a slice or ..., got "
                                       f"{i!r} ({type(i).__name__}); write t[{_int_text(i)}]") from None
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"index {i} out of range for dimension 0 of size {n}")
        return k

    def _sub(self, Py_ssize_t k):
        """The (n-1)-D sub-tensor ``k`` of an n-D tensor (n >= 2)."""
        if len(self.shape) < 2 or not 0 <= k < self.shape[0]:
            raise IndexError(f"sub-tensor {k} out of range for shape {self.shape}")
        shape = self.shape.sub_shape()
        stride = self.stride if len(shape) > 1 else shape[0]
        return self._view(shape, self.offset + k * self.mem_size(1) * self.itemsize, stride)

    def _target(self, key):
        """Resolve an index key to (tensor view, element index or -1)."""
        if isinstance(key, tuple):
            if len(key) == 0:
                return self, -1
            # Integers walk down the leading dims; a slice cuts the current first dim. After
            # a slice or an Ellipsis, another index would select along a later axis, which a
            # row-pitched view cannot express (t[:, 0] is a column): only ':' may follow.
            if sum(1 for r in key if r is not Ellipsis) > len(self.shape):
                raise IndexError(f"too many indices {key!r} for a {len(self.shape)}-D tensor")
            t = self
            for j, sub in enumerate(key):
                if sub is Ellipsis or isinstance(sub, slice):
                    rest = key[j + 1:]
                    for r in rest:
                        if not (r is Ellipsis or (isinstance(r, slice) and r == slice(None))):
                            raise IndexError(
                                f"index {key!r}: only leading integers and one leading slice "
                                f"can be views of a pitched tensor (got {r!r} after {sub!r}); "
                                f"use t.numpy()[...] for general indexing")
                    if sub is Ellipsis:
                        return t, -1
                    return (<Tensor> t)._target(sub)
                t, el = (<Tensor> t)._target(sub)
                if el >= 0:
                    if j != len(key) - 1:
                        raise IndexError(f"too many indices {key!r} for a "
                                         f"{len(self.shape)}-D tensor")
                    return t, el
            return t, -1
        if key is Ellipsis:
            return self, -1
        if isinstance(key, slice):
            try:
                start, stop, step = key.indices(self.shape[0])
            except TypeError:
                bad = [v for v in (key.start, key.stop, key.step)
                       if v is not None and not hasattr(v, "__index__")]
                raise IntegerArgumentError(
                    f"tensor slice t[{_key_text(key)}]: slice bounds must be integers, got "
                    f"{bad[0]!r} ({type(bad[0]).__name__}); write "
                    f"t[{_int_text(key.start)}:{_int_text(key.stop)}]") from None
            if step != 1:
                raise IndexError("tensor slices must have step 1 (mshadow views keep a row stride)")
            if key == slice(None):
                return self, -1
            return self.slice(start, max(start, stop)), -1
        k = self._index(key)
        if len(self.shape) == 1:
            return self, k
        return self._sub(k), -1

    def __getitem__(self, key):
        self.data()
        t, el = self._target(key)
        if el >= 0:
            return (<Tensor> t)._export()[el]
        return t

    def __setitem__(self, key, value):
        if _is_whole_slice(key):
            if type(value) is Tensor and _is_itself(self, <Tensor> value):
                # `t[:] += e` ends with Python storing t[:] back into t: the values are
                # already there, so no second pass over the tensor
                self.data()      # a freed tensor still raises
                if self.readonly:
                    raise ValueError("assignment destination is read-only")
                return
            _assign(self, value, "saveto")   # t[:] = exp, the hot path
            return
        self.data()
        t, el = self._target(key)
        if el >= 0:
            if self.readonly:
                raise ValueError("tensor is read-only")
            (<Tensor> t)._export()[el] = value
            return
        _assign(t, value, "saveto")

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        for k in range(self.shape[0]):
            yield self[k]

    # ---- numpy / DLPack ---------------------------------------------------------
    def _export(self):
        """A numpy view honouring the pitch; it pins the memory until it is deleted."""
        if self.device is not cpu:
            raise DeviceError(f"a {self.device.name} tensor has no host view: copy it to a "
                              f"cpu tensor first (ms.copy, or t.to_numpy())")
        cdef char *p = self.data()
        cdef _Export ex = _Export.__new__(_Export)
        ex.__array_interface__ = {
            "version": 3, "shape": tuple(self.shape), "typestr": self.dtype.str,
            "data": (<size_t> p, bool(self.readonly)), "strides": _byte_strides(self),
        }
        ex.mem = self.mem
        self.mem.n_exports += 1
        return np.asarray(ex)

    def numpy(self):
        """Zero-copy numpy view (row pitch honoured); the memory cannot be freed while it lives."""
        return self._export()

    def __getattr__(self, name):
        # only when the normal lookup failed: numpy's t.sum(), t.reshape() name ms.sum, ...
        raise _attribute_error(self, name)

    def __array__(self, dtype=None, copy=None):
        a = self._export()
        if copy:
            a = a.copy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError("a dtype conversion needs a copy")
            a = a.astype(dtype)
        return a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.device is not cpu:     # the capsule of device memory (_dlpack.pxi)
            return _gpu_dlpack(self, stream, max_version, dl_device, copy)
        if stream is not None and stream != -1:
            raise BufferError("CPU tensors take no DLPack stream")
        kwargs = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        if copy is not None:
            kwargs["copy"] = copy
        # Padded rows go out as DLPack strides, zero-copy: numpy and torch take them; a
        # consumer that needs compact strides (jax) refuses; see docs/memory.md.
        a = self._export()
        if copy:
            a = a.copy()
        try:
            return _numpy_dlpack(a, kwargs)
        except BufferError as e:
            if self.readonly and not copy:
                raise BufferError("a read-only tensor can be exported only with DLPack >= 1.0 "
                                  "(max_version=(1, 0), and numpy >= 2.1 underneath), which "
                                  "can mark it read-only; or export a copy (np.array(t))") from e
            raise

    def __dlpack_device__(self):
        return (1, 0) if self.device is cpu else (2, 0)   # kDLCPU / kDLCUDA, device 0

    @property
    def __cuda_array_interface__(self):
        """The CUDA Array Interface (version 3) of a gpu tensor: CuPy, Numba and PyTorch
        read its pitched memory in place, zero-copy. Such a library cannot say when it is
        done with the memory, so once this is read (hasattr included: that is how libraries
        ask) free_space() and a container's reallocation refuse it (BufferError), and it
        goes back when every reference to it is gone. "stream" names where the work
        queued on it runs, for the consumer to wait for: the tensor's Stream, else the
        legacy default stream (1)."""
        if self.device is cpu:   # an AttributeError: hasattr() answers False, as for numpy
            raise AttributeError("a cpu tensor has no __cuda_array_interface__: numpy(), "
                                 "np.asarray(t) or DLPack read it zero-copy")
        cdef char *p = self.data()
        stream = _cai_stream(self.stream)
        self.mem.foreign_held = True
        return {"version": 3, "shape": tuple(self.shape), "typestr": self.dtype.str,
                "data": (<size_t> p, bool(self.readonly)),
                "strides": None if self.stride == self.cols else _byte_strides(self),
                "stream": stream}

    # ---- buffer protocol (PEP 3118): memoryview(t), Cython typed memoryviews ---------
    def __getbuffer__(self, Py_buffer *buf, int flags):
        # Zero-copy and strided like _export; the export pins the Allocation (counted in
        # n_exports, so free_space refuses) until __releasebuffer__.
        if self.device is not cpu:
            raise DeviceError(f"a {self.device.name} tensor has no host buffer; copy it to a "
                              f"cpu tensor first")
        cdef char *p = self.data()
        if (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE and self.readonly:
            raise BufferError("tensor is read-only: it cannot export a writable buffer "
                              "(use a const memoryview)")
        cdef tuple shp = <tuple> self.shape   # a Shape: a tuple subclass
        cdef int nd = len(shp)
        cdef int k
        cdef Py_ssize_t item = self.itemsize
        cdef Py_ssize_t n = 1
        # One block: the Allocation reference, then shape[nd], then strides[nd].
        cdef void **info = <void **> PyMem_Malloc(sizeof(void *) + 2 * nd * sizeof(Py_ssize_t))
        if info == NULL:
            raise MemoryError()
        cdef Py_ssize_t *shape = <Py_ssize_t *> (info + 1)
        cdef Py_ssize_t *strides = shape + nd
        for k in range(nd):
            shape[k] = shp[k]
            n *= shape[k]
        strides[nd - 1] = item
        if nd >= 2:
            strides[nd - 2] = self.stride * item
            for k in range(nd - 3, -1, -1):
                strides[k] = strides[k + 1] * shape[k + 1]
        cdef bint ok = True
        order = "C-"
        if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS:
            ok = _buf_contiguous(nd, shape, strides, item, True)
            order = "Fortran-"
        elif (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS:
            ok = (_buf_contiguous(nd, shape, strides, item, False)
                  or _buf_contiguous(nd, shape, strides, item, True))
            order = "C- or Fortran-"
        elif ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS
              or (flags & PyBUF_STRIDES) != PyBUF_STRIDES):   # no strides: C order assumed
            ok = _buf_contiguous(nd, shape, strides, item, False)
        if not ok:
            PyMem_Free(info)
            padded = nd >= 2 and self.stride != self.cols
            raise BufferError(
                f"tensor of shape {self.shape}"
                + (f" has padded rows (row stride {self.stride} elements) and" if padded else "")
                + f" is not {order}contiguous, as this buffer request requires"
                + ("; take a strided view (float[:, :] in Cython), allocate with pad=False, "
                   "or copy it" if padded else ""))
        info[0] = <void *> self.mem
        Py_INCREF(self.mem)
        self.mem.n_exports += 1
        buf.buf = p
        buf.obj = self
        buf.len = n * item
        buf.itemsize = item
        buf.readonly = self.readonly
        buf.ndim = nd if (flags & PyBUF_ND) == PyBUF_ND else 1   # as PyBuffer_FillInfo
        buf.format = _buf_format[self.type_flag] if (flags & PyBUF_FORMAT) else NULL
        buf.shape = shape if (flags & PyBUF_ND) == PyBUF_ND else NULL
        buf.strides = strides if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        buf.suboffsets = NULL
        buf.internal = <void *> info

    def __releasebuffer__(self, Py_buffer *buf):
        cdef void **info = <void **> buf.internal
        if info == NULL:
            return
        cdef Allocation mem = <Allocation> info[0]
        mem.n_exports -= 1
        Py_DECREF(mem)   # the reference taken in __getbuffer__; ``mem`` holds its own
        PyMem_Free(info)
        buf.internal = NULL

    def tolist(self):
        """The elements as nested Python lists, as ``numpy.ndarray.tolist``."""
        return self._export().tolist()

    # ---- copying and pickling ---------------------------------------------------
    def __copy__(self):
        """A new handle on the same memory (mshadow's Tensor copy: the data is shared)."""
        self.data()
        return self._view(self.shape, self.offset, self.stride)

    def __deepcopy__(self, memo):
        return _tensor_from_array(self._export(), self.stride != self.cols and len(self.shape) > 1)

    def __reduce__(self):
        # By value, like numpy: a pointer means nothing in another process.
        return (_tensor_from_array,
                (np.array(self._export()), self.stride != self.cols and len(self.shape) > 1))

    def __repr__(self):
        state = "" if self.is_allocated else (", unallocated" if self.mem is None else ", freed")
        return (f"Tensor({self.device.name}, {self.dtype.name}, shape={self.shape}, "
                f"stride={self.stride}{state})")

    def __str__(self):
        if not self.is_allocated:
            return repr(self)
        return str(_host_array(self))

    def to_numpy(self):
        """A numpy copy of the elements, from any device (``numpy()`` is a zero-copy view
        of a cpu tensor)."""
        if self.device is cpu:
            return np.array(self._export())
        host = new_tensor(self.shape, None, dtype=self.dtype)
        copy(host, self)
        return np.array(host._export())

    # ---- expressions ------------------------------------------------------------
    __array_ufunc__ = None   # numpy scalars and arrays defer to our operators: stay lazy

    def __array_function__(self, func, types, args, kwargs):
        """numpy functions (np.sum, np.mean, np.max, ...) read tensors in place, as arrays."""
        return func(*_as_arrays(args), **_as_arrays(kwargs))

    # Arithmetic builds lazy expressions (mshadow/expr.py); assignment evaluates them.
    def __add__(self, other):
        return make_map("plus", (self, other))

    def __radd__(self, other):
        return make_map("plus", (other, self))

    def __sub__(self, other):
        return make_map("minus", (self, other))

    def __rsub__(self, other):
        return make_map("minus", (other, self))

    def __mul__(self, other):
        return make_map("mul", (self, other))

    def __rmul__(self, other):
        return make_map("mul", (other, self))

    def __truediv__(self, other):
        return make_map("div", (self, other))

    def __rtruediv__(self, other):
        return make_map("div", (other, self))

    def __neg__(self):
        return make_map("neg", (self,))

    def __richcmp__(self, o, int opc):
        return make_map(_CMP_NAMES[opc], (self, o))

    def __hash__(self):   # by identity, though == builds an expression (like numpy arrays)
        return id(self) >> 4

    def __pow__(self, o, mod):
        return make_map("power", (self, o))

    def __rpow__(self, o, mod):
        return make_map("power", (o, self))

    def __abs__(self):
        return make_map("abs", (self,))

    def __matmul__(self, o):
        return dot(self, o)

    def __rmatmul__(self, o):
        return dot(o, self)

    def __pos__(self):
        return self

    def __iadd__(self, other):
        _assign(self, other, "plusto")
        return self

    def __isub__(self, other):
        _assign(self, other, "minusto")
        return self

    def __imul__(self, other):
        _assign(self, other, "multo")
        return self

    def __itruediv__(self, other):
        _assign(self, other, "divto")
        return self

    @property
    def T(self):
        """The transpose of a 2-D tensor, as a lazy expression (``T()``)."""
        return _up_transpose(self)

    # C++ spellings
    Size = size
    MSize = msize
    MemSize = mem_size
    CheckContiguous = check_contiguous
    FlatTo1D = flat_to_1d
    FlatTo2D = flat_to_2d
    Slice = slice


# ---- the layers above the core ------------------------------------------------------------
# The core imports nothing above it. The few operations of a tensor that the layers above
# implement (an assignment the fast path does not run, .T, binary I/O) are entry points
# those layers install when they are imported (mshadow/__init__.py imports them all).
cdef object _up_assign = None      # engine.assign(dst, value, saver)
cdef object _up_transpose = None   # expr.transpose(exp)
cdef object _up_io = None          # the io module: save_binary, load_into_container
cdef object _gather_class = None   # extension/build.py's GatherExp: what gather() makes
# (and _product.pxi's _dot_class, _batch_dot_class: dot.py's DotExp, BatchDotExp)
cdef dict _plan_store = None       # PLANS (_engine.pxi), read at C speed by the fast path


def install_layer(*, assign=None, transpose=None, io=None, gather_class=None,
                  product_classes=None):
    """Install the entry points of a layer above the core (called by that layer at import)."""
    global _up_assign, _up_transpose, _up_io, _gather_class, _dot_class, _batch_dot_class
    if assign is not None:
        _up_assign = assign
    if transpose is not None:
        _up_transpose = transpose
    if io is not None:
        _up_io = io
    if gather_class is not None:
        _gather_class = gather_class
    if product_classes is not None:
        _dot_class, _batch_dot_class = product_classes


cdef bint _is_itself(Tensor t, Tensor v) except -1:
    """``v`` holds exactly ``t``'s elements (the same memory, shape, dtype and layout)."""
    return (v.mem is not None and v.mem is t.mem and v.offset == t.offset
            and v.device is t.device and v.type_flag == t.type_flag and v.shape == t.shape
            and (v.stride == t.stride or t.rows <= 1))


cdef _assign(Tensor dst, object value, str saver):
    """Route ``dst <saver> value`` to the expression engine.

    This is the engine's fast path, compiled: a cached plan (the core's PLANS) for an
    element-wise expression of the right dtype and shape runs from here, and a kComplex
    one goes to its kind's compiled entry (_product.pxi's _complex_fast) where it has one.
    Everything else (first use of a structure, scalars, aliasing, errors) goes to the
    assignment the engine installed (mshadow.engine.assign), which checks, lowers and
    caches.
    """
    cdef Exp e
    if type(value) is not Tensor and isinstance(value, Exp):
        e = <Exp> value
        if e.exp_type == 7:
            key = e.key                 # (an IR node is a tuple whose first item is its kind)
            fast = (_complex_fast.get((<tuple> key)[0])
                    if isinstance(key, tuple) and len(<tuple> key) else None)
            if fast is not None and fast(dst, value, saver,
                                         _num_threads if ms_have_openmp() else 1):
                return
        elif _same_shape(e.shape, dst.shape):
            code = _CODE_BY_FLAG[dst.type_flag]
            site = <_Site> e.site
            if (site is not None and site.gen == _plan_gen and site.node is e.key
                    and site.saver is saver and site.code is code and site.device is dst.device):
                plan = site.plan        # the entry the last statement of e's structure found
            else:
                gen = _plan_gen         # (the generation the lookup sees)
                plan = _plan_store.get((e.key, code, saver, dst.device))
                if site is not None and site.node is e.key and type(plan) is Plan:
                    site.plan, site.code, site.saver, site.device = plan, code, saver, dst.device
                    site.gen = gen
            if type(plan) is Plan and e.code == code:
                _stamp(plan)
                if run_plan(<Plan> plan, dst, e.leaves, e.scalars):
                    return
    _up_assign(dst, value, saver)


# ---- allocation ---------------------------------------------------------------------

def alloc_space(Tensor t, bint pad=True):
    """Give ``t`` fresh memory; with ``pad`` every row starts on an ALIGN_BYTES boundary."""
    check_devices("alloc_space", t.device, gpu_ok=True)
    if t.device is not cpu:
        _allocate_device(t, pad)
        return
    cdef size_t row_bytes = <size_t> t.cols * t.itemsize
    cdef size_t pitch = ms_upper_align(row_bytes) if (pad and len(t.shape) > 1) else row_bytes
    t.mem = _allocate(<Py_ssize_t> (pitch * <size_t> t.rows))
    t.offset = 0
    t.stride = pitch // t.itemsize
    t.readonly = False


def free_space(Tensor t):
    """Release the memory of ``t``; ``t`` and all its views raise on any later use."""
    if t.mem is None:
        raise FreedTensorError("free_space: tensor has no memory (it was never allocated)")
    t.mem.release()


cdef _check_init(object init, object dtype, str where):
    """``init`` must be a real number that a tensor of ``dtype`` can hold (or None)."""
    if init is None:
        return
    if not _is_scalar(init) or isinstance(init, (np.complexfloating, np.datetime64, np.timedelta64)):
        raise TypeError(f"{where}: init must be a real number or None, got "
                        f"{type(init).__name__} {init!r:.40}")
    if np.dtype(dtype).kind in "iu" and not np.isfinite(float(init)):
        raise ValueError(f"{where}: init={init} cannot be stored in a {np.dtype(dtype).name} "
                         f"tensor (expected a finite number)")


def new_tensor(shape, init=0, bint pad=False, dtype=np.float32, device=cpu, stream=None):
    """Allocate a tensor of ``shape`` filled with ``init`` (``NewTensor``)."""
    _check_init(init, as_dtype(dtype), "new_tensor")
    cdef Tensor t = Tensor(shape, dtype=dtype, device=device, stream=stream)
    alloc_space(t, pad)
    if init is not None:
        _fill(t, init)
    return t


cdef _fill(Tensor t, init):
    """Every element of ``t`` = ``init`` (checked by _check_init): through a host view, or
    filled on the host then copied over to a gpu tensor."""
    if t.device is not cpu:
        copy(t, new_tensor(t.shape, init, dtype=t.dtype))
        return
    a = t._export()
    a[...] = init
    del a


cdef tuple _byte_strides(Tensor t):
    """``t``'s strides in bytes: the row pitch on the second-last axis, whole rows above."""
    nd = len(t.shape)
    strides = [t.itemsize] * nd
    if nd >= 2:
        strides[nd - 2] = t.stride * t.itemsize
        for k in range(nd - 3, -1, -1):
            strides[k] = strides[k + 1] * t.shape[k + 1]
    return tuple(strides)


cdef object _host_array(Tensor t):
    """``t``'s elements on the host: a view of a cpu tensor, a copy of a gpu one."""
    return t._export() if t.device is cpu else t.to_numpy()


def reshaped_view(Tensor t, tuple shape):
    """``t``, an unpadded tensor, viewed as ``shape`` (a tuple of non-negative ints with
    the same product): the same memory, offset, dtype, device and read-only flag, so a
    freed ``t`` raises when the view is read (a reduction reads a tensor's merged rows
    through it, with no Shape checks or view expression per statement)."""
    if not t.check_contiguous():
        raise ShapeError(f"reshaped_view needs an unpadded tensor; this one has shape "
                         f"{t.shape} and row stride {t.stride}")
    for d in shape:
        if type(d) is not int or d < 0:
            raise ShapeError(f"reshaped_view: dimension {d!r} of {shape} is not a "
                             f"non-negative int")
    if len(shape) == 0 or _prod(shape) != _prod(t.shape):
        raise ShapeError(f"reshaped_view: {t.shape} cannot be viewed as {shape}")
    return t._view(_tuple_of(Shape, shape), t.offset, shape[len(shape) - 1])


def from_numpy(a):
    """A Tensor viewing a numpy array's memory (no copy); the array stays alive with it.

    The array's last axis must be contiguous and its leading axes must collapse into rows
    with one row stride, the layouts a pitched tensor can describe.
    """
    if isinstance(a, Tensor):
        return a
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    if a.ndim == 0:
        raise ShapeError("from_numpy: a 0-d array has no tensor view (expected ndim >= 1)")
    dt = as_dtype(a.dtype)
    cdef Py_ssize_t item = dt.itemsize
    shape = a.shape
    strides = a.strides
    nd = a.ndim
    size = a.size
    if size > 0:
        if shape[-1] > 1 and strides[-1] != item:
            raise ValueError(f"from_numpy: the last axis must be contiguous (stride {item} bytes), "
                             f"got strides {strides}; pass np.ascontiguousarray(a)")
        # Collapse the leading axes into rows with one pitch. Size-1 axes carry no layout
        # (numpy may give them any stride); every other leading axis must step by exactly
        # the rows inside it times the pitch.
        row = None
        span = 1
        for k in range(nd - 2, -1, -1):
            if shape[k] == 1:
                continue
            if row is None:
                row = strides[k]
            elif strides[k] != row * span:
                raise ValueError(f"from_numpy: axes 0..{nd - 2} do not collapse into rows with "
                                 f"one stride (shape {shape}, strides {strides}); "
                                 f"pass np.ascontiguousarray(a)")
            span *= shape[k]
        if row is None:
            row = shape[-1] * item
        if row % item or row < shape[-1] * item:
            raise ValueError(f"from_numpy: row stride {row} bytes cannot hold a row of "
                             f"{shape[-1]} x {item} bytes (strides {strides})")
        if (<size_t> cnp.PyArray_DATA(<cnp.ndarray> a)) % item:
            raise ValueError("from_numpy: the data pointer is not aligned to the item size")
        stride = row // item
    else:
        stride = shape[-1]
    cdef Allocation mem = Allocation.__new__(Allocation)
    mem.ptr = <char *> cnp.PyArray_DATA(<cnp.ndarray> a)   # not a.ctypes: 10 us a call
    mem.nbytes = a.nbytes
    mem.alive = True
    mem.owned = False
    mem.base = a
    cdef Tensor t = Tensor(Shape(shape), dtype=dt)
    t.mem = mem
    t.offset = 0
    t.stride = stride if nd > 1 else shape[0]
    t.readonly = not a.flags.writeable
    return t


def _tensor_from_array(a, pad=False):
    """A new tensor owning a copy of ``a`` (used by pickling and deepcopy)."""
    t = new_tensor(a.shape, init=None, pad=pad, dtype=a.dtype)
    t._export()[...] = a
    return t


def from_dlpack(x):
    """A Tensor over any DLPack producer, zero-copy: host memory (numpy, torch, jax; CUDA's
    page-locked host memory too) as a cpu tensor, CUDA device 0's or CUDA managed memory
    (torch, CuPy, a gpu tensor) as a gpu one."""
    device = getattr(x, "__dlpack_device__", None)
    if device is not None and device()[0] in _CUDA_MEMORY:    # _dlpack.pxi
        return _from_cuda_dlpack(x)
    return from_numpy(np.from_dlpack(x))


@cython.embedsignature(False)
cdef class TensorContainer(Tensor):
    """TensorContainer(shape=None, init=0, pad=True, dtype='float32', device='cpu', stream=None)
--

    A Tensor that owns its memory: ``resize`` reuses it when it is large enough.

    Assigning another container to the whole of it (``c[:] = other``) resizes it to
    ``other``'s shape and copies the data, as mshadow's
    ``operator=(const TensorContainer&)`` does. An expression, tensor or array of another
    shape is a ShapeError, as in mshadow ("Assignment: Shape of Tensors are not consistent
    with target"): resize the container first.
    """
    def __init__(self, shape=None, init=0, pad=True, dtype=np.float32, device=cpu, stream=None):
        Tensor.__init__(self, (0,) if shape is None else shape, dtype=dtype, device=device,
                        stream=stream)
        _check_init(init, self.dtype, "TensorContainer")
        self.pad = pad
        self.cap_rows = 0
        self.cap_pitch = 0
        self.mem = None
        self._reserve(self.shape)
        if init is not None and self.shape.size():
            _fill(self, init)

    cdef _reserve(self, object shape):
        """Take ``shape``, reallocating only when its 2-D view does not fit (mshadow's Resize).

        All checks and the new allocation happen before the container changes, so a failure
        (numpy views pinning the old memory, MemoryError) leaves it exactly as it was.
        """
        _check_extent(shape, self.itemsize)
        cdef Py_ssize_t cols = shape[-1]
        cdef Py_ssize_t rows = _rows_of(shape)
        cdef Py_ssize_t row_bytes = cols * self.itemsize
        cdef Py_ssize_t pitch = ms_upper_align(row_bytes) if (self.pad and len(shape) > 1) \
            else row_bytes
        cdef Allocation fresh
        if self.mem is None or not self.mem.alive or self.cap_rows < rows \
                or self.cap_pitch < row_bytes:
            if self.mem is not None and self.mem.alive and self.mem.n_exports:
                raise BufferError(f"TensorContainer: cannot reallocate for shape {shape} while "
                                  f"{self.mem.n_exports} numpy/DLPack view(s) of its memory "
                                  f"are alive; delete them first")
            if self.mem is not None and self.mem.alive and self.mem.foreign_held:
                raise BufferError(f"TensorContainer: cannot reallocate for shape {shape}: its "
                                  f"memory was handed out through __cuda_array_interface__ "
                                  f"and is never released (copy into a new container instead)")
            if self.device is cpu:
                fresh = _allocate(pitch * rows)
            else:                    # AllocSpace<gpu>'s pitch rule (_allocate_device)
                fresh, pitch = _device_block(rows, cols, self.itemsize,
                                             self.pad and len(shape) > 1)
            if self.mem is not None and self.mem.alive:
                self.mem.release()   # views of the old memory now raise FreedTensorError
            self.mem = fresh
            self.cap_rows = rows
            self.cap_pitch = pitch
        self.shape = shape
        self.rows = rows
        self.cols = cols
        self.offset = 0
        # pad: the rows keep the allocation's pitch; no pad: the tensor stays contiguous
        self.stride = self.cap_pitch // self.itemsize if (self.pad and len(shape) > 1) else cols

    def resize(self, shape, init=None):
        """Reshape to ``shape``; memory is reused if large enough. Contents are not kept."""
        shape = as_shape(shape)
        _check_init(init, self.dtype, "TensorContainer.resize")
        if len(shape) != len(self.shape) and self.shape.size() != 0:
            # an empty container (TensorContainer()) takes its rank from its first shape
            raise ShapeError(f"TensorContainer.resize: expected a {len(self.shape)}-D shape, "
                             f"got {shape}")
        self._reserve(shape)
        if init is not None and self.shape.size():
            _fill(self, init)

    def release(self):
        """Free the memory; the container stays usable (shape[0] becomes 0)."""
        if self.mem is not None and self.mem.alive:
            self.mem.release()
        self.mem = None
        self.cap_rows = self.cap_pitch = 0
        self._reserve(Shape((0,) + tuple(self.shape[1:])))

    def set_pad(self, bint pad):
        """Whether later reallocations pad rows to ALIGN_BYTES."""
        self.pad = pad

    def copy(self):
        """A deep copy (mshadow's TensorContainer copy constructor)."""
        c = TensorContainer(self.shape, init=None, pad=self.pad, dtype=self.dtype,
                            device=self.device, stream=self.stream)
        copy(c, self)
        return c

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):
        return (_container_from_array, (np.array(self._export()), self.pad))

    def __setitem__(self, key, value):
        whole = key is Ellipsis or _is_whole_slice(key)
        if whole and isinstance(value, TensorContainer) and value.shape != self.shape:
            if len(value.shape) != len(self.shape) and self.shape.size() != 0:
                raise ShapeError(f"TensorContainer of {len(self.shape)} dims cannot take a "
                                 f"container of shape {value.shape}")
            self.resize(value.shape)
        Tensor.__setitem__(self, key, value)

    def save_binary(self, fo):
        """Write in C++ mshadow's binary layout (``SaveBinary``); see mshadow.io."""
        _up_io.save_binary(fo, self)

    def load_binary(self, fi):
        """Read a tensor of this container's rank and dtype, resizing to its shape (``LoadBinary``)."""
        _up_io.load_into_container(fi, self)

    Resize = resize
    Release = release
    SaveBinary = save_binary
    LoadBinary = load_binary


def _container_from_array(a, pad=True):
    """A new container owning a copy of ``a`` (used by pickling)."""
    c = TensorContainer(a.shape, init=None, pad=pad, dtype=a.dtype)
    c._export()[...] = a
    return c


cdef object _as_arrays(object x):
    """Tensors inside numpy-function arguments, replaced by their zero-copy numpy views."""
    if isinstance(x, Tensor):
        return (<Tensor> x)._export()
    if isinstance(x, (tuple, list)):
        return type(x)(_as_arrays(v) for v in x)
    if isinstance(x, dict):
        return {k: _as_arrays(v) for k, v in x.items()}
    return x


cdef bint _is_scalar(object v):
    return isinstance(v, (int, float, np.number, bool))
