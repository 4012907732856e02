# ms.copy: the one data-moving primitive between tensors (included by _core.pyx).

from libc.string cimport memcpy


def copy(Tensor dst, Tensor src, stream=None):
    """Copy ``src`` into ``dst`` (``Copy``): shapes must match, pitches may differ."""
    if dst.shape != src.shape:
        raise ShapeError(f"Copy:shape mismatch:{dst.shape} vs {src.shape}")
    if dst.dtype != src.dtype:
        raise DTypeError(f"Copy: dtype mismatch: {dst.dtype} vs {src.dtype} (use tcast to convert)")
    if dst.device is not src.device:
        raise DeviceError(f"Copy: device mismatch: {dst.device} vs {src.device}")
    if dst.readonly:
        raise ValueError("Copy: destination tensor is read-only")
    cdef char *d = dst.data()
    cdef char *s = src.data()
    cdef Py_ssize_t row_bytes = dst.cols * dst.itemsize
    cdef Py_ssize_t dpitch = dst.stride * dst.itemsize
    cdef Py_ssize_t spitch = src.stride * src.itemsize
    cdef Py_ssize_t r, rows = dst.rows
    if d == s and dpitch == spitch:
        return
    with nogil:
        if dpitch == row_bytes and spitch == row_bytes:
            memcpy(d, s, row_bytes * rows)
        else:
            for r in range(rows):
                memcpy(d + r * dpitch, s + r * spitch, row_bytes)
