# ms.copy: the one data-moving primitive between tensors (included by _core.pyx).

from libc.string cimport memcpy, memmove
from libc.stdlib cimport malloc, free


def copy(Tensor dst, Tensor src, stream=None):
    """Copy ``src`` into ``dst`` (``Copy``): shapes must match, pitches may differ.

    Overlapping source and destination (two views of one buffer) give the result of
    copying from a snapshot of ``src``, as numpy's assignment does. A copy with a gpu side
    is queued on ``stream`` (a Stream(ms.gpu); None: the default stream, as mshadow's) after
    the work queued there before, and is done when this returns.
    """
    if dst.shape != src.shape:
        raise ShapeError(f"Copy:shape mismatch:{dst.shape} vs {src.shape}")
    if dst.dtype != src.dtype:
        raise DTypeError(f"Copy: dtype mismatch: {dst.dtype} vs {src.dtype} (use tcast to convert)")
    if dst.readonly:
        raise ValueError("Copy: destination tensor is read-only")
    on_gpu = dst.device is not cpu or src.device is not cpu
    _check_copy_stream(stream, gpu if on_gpu else cpu)
    if on_gpu:      # any two devices
        _copy_device(dst, src, stream)
        return
    cdef char *d = dst.data()
    cdef char *s = src.data()
    cdef Py_ssize_t row_bytes = dst.cols * dst.itemsize
    cdef Py_ssize_t dpitch = dst.stride * dst.itemsize
    cdef Py_ssize_t spitch = src.stride * src.itemsize
    cdef Py_ssize_t r, rows = dst.rows
    cdef char *tmp = NULL
    cdef bint failed = False
    if rows == 0 or row_bytes == 0 or (d == s and dpitch == spitch):
        return
    cdef bint overlap = _rows_overlap(d, dpitch, s, spitch, rows, row_bytes)
    dst.mem.pin()          # a free_space from another thread meanwhile waits for the copy
    src.mem.pin()
    try:
        with nogil:
            if dpitch == row_bytes and spitch == row_bytes:
                memmove(d, s, row_bytes * rows)
            elif not overlap:
                for r in range(rows):
                    memcpy(d + r * dpitch, s + r * spitch, row_bytes)
            else:
                tmp = <char *> malloc(row_bytes * rows)
                if tmp != NULL:
                    for r in range(rows):
                        memcpy(tmp + r * row_bytes, s + r * spitch, row_bytes)
                    for r in range(rows):
                        memcpy(d + r * dpitch, tmp + r * row_bytes, row_bytes)
                    free(tmp)
                else:
                    failed = True
    finally:
        src.mem.unpin()
        dst.mem.unpin()
    if failed:
        raise MemoryError(f"Copy: could not allocate {row_bytes * rows} bytes of scratch "
                          f"for overlapping tensors")


def store_array(Tensor dst, object a):
    """``dst = a`` for ``a`` a C-contiguous numpy array of dst's shape and dtype, ``dst`` a
    live, writable cpu tensor whose bytes ``a`` does not overlap: the bytes a saveto plan
    would store, copied a row at a time into dst's pitch (a reduction's small result, with
    none of the engine's per-statement cost). Returns False, having stored nothing, for
    anything else: the engine's assignment then stores it, with its checks and errors."""
    return _store_array(dst, a)


cdef bint _store_array(Tensor dst, object a) except -1:
    if (type(a) is not np.ndarray or dst.device is not cpu or dst.readonly
            or dst.mem is None or not dst.mem.alive):
        return False
    cdef cnp.ndarray arr = <cnp.ndarray> a
    cdef int k, nd = cnp.PyArray_NDIM(arr)
    cdef object shape = dst.shape
    # (by type number and dims: numpy's dtype and shape comparisons cost a third of it)
    if (not cnp.PyArray_IS_C_CONTIGUOUS(arr) or not cnp.PyArray_ISNOTSWAPPED(arr)
            or cnp.PyArray_TYPE(arr) != _NP_NUM[_CODE_BY_FLAG[dst.type_flag]]
            or nd != len(shape)):
        return False
    for k in range(nd):
        if cnp.PyArray_DIMS(arr)[k] != <Py_ssize_t> shape[k]:
            return False
    cdef Py_ssize_t row_bytes = dst.cols * dst.itemsize, rows = dst.rows, r
    cdef Py_ssize_t dpitch = dst.stride * dst.itemsize
    if rows == 0 or row_bytes == 0:
        return True
    cdef char *d = dst.data()
    cdef char *s = <char *> cnp.PyArray_DATA(arr)
    if _rows_overlap(d, dpitch, s, row_bytes, rows, row_bytes):
        return False
    dst.mem.pin()          # a free_space from another thread meanwhile waits for the copy
    try:
        with nogil:
            if dpitch == row_bytes or rows == 1:
                memcpy(d, s, row_bytes * rows)
            else:
                for r in range(rows):
                    memcpy(d + r * dpitch, s + r * row_bytes, row_bytes)
    finally:
        dst.mem.unpin()
    return True


cdef inline bint _rows_overlap(char *d, Py_ssize_t dpitch, char *s, Py_ssize_t spitch,
                               Py_ssize_t rows, Py_ssize_t row_bytes) noexcept:
    """Whether the byte ranges two copies' rows touch ([first row start, last row end))
    overlap."""
    return (d < s + (rows - 1) * spitch + row_bytes and
            s < d + (rows - 1) * dpitch + row_bytes)


cdef int _check_copy_stream(object stream, object device) except -1:
    if stream is not None and (not isinstance(stream, Stream) or stream.device is not device):
        raise DeviceError(f"Copy: a copy {'with a gpu side' if device is gpu else 'on the cpu'}"
                          f" takes a Stream({device.name}) or None, got {stream!r}")
    return 0


cdef int _copy_device(Tensor dst, Tensor src, object stream) except -1:
    """``Copy`` with a gpu side (mshadow's cudaMemcpy2DAsync honouring both pitches): one 2-D
    copy by the CUDA driver in use, finished when this returns (mshadow's Copy with no
    stream). Two overlapping views of one gpu buffer go through a device temporary."""
    from .cuda import driver
    from .cuda.streams import driver_stream
    drv = driver()
    cu_stream = driver_stream(stream, "Copy")
    cdef char *d = dst.data()
    cdef char *s = src.data()
    cdef Py_ssize_t row_bytes = dst.cols * dst.itemsize, rows = dst.rows
    cdef Py_ssize_t dpitch = dst.stride * dst.itemsize, spitch = src.stride * src.itemsize
    if rows == 0 or row_bytes == 0 or (d == s and dpitch == spitch):
        return 0
    cdef bint d_dev = dst.device is not cpu, s_dev = src.device is not cpu
    dst.mem.pin()          # a free_space from another thread meanwhile waits for the copy
    src.mem.pin()
    try:
        if d_dev and s_dev and _rows_overlap(d, dpitch, s, spitch, rows, row_bytes):
            tmp = drv.Memory(row_bytes * rows)
            drv.copy_2d(tmp.address, row_bytes, True, <size_t> s, spitch, True, row_bytes,
                        rows, cu_stream)
            drv.copy_2d(<size_t> d, dpitch, True, tmp.address, row_bytes, True, row_bytes,
                        rows, cu_stream)
            tmp.free()
        else:
            drv.copy_2d(<size_t> d, dpitch, d_dev, <size_t> s, spitch, s_dev, row_bytes, rows,
                        cu_stream)
    finally:
        src.mem.unpin()
        dst.mem.unpin()
    return 0
