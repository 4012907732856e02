# cython: language_level=3, boundscheck=False, wraparound=False
"""A user's Cython kernels over mshadow tensors.

``saxpy`` reaches the tensors through ``cimport mshadow``: raw pointers, the row pitch
honoured, no buffer acquisition per call. ``row_sums`` and ``scale_rows`` take typed
memoryviews through the buffer protocol: a strided view (``float[:, :]``) accepts padded
tensors; a C-contiguous one (``float[:, ::1]``) refuses them with BufferError.
"""
cimport mshadow as cms
from mshadow cimport Tensor

import numpy as np


def saxpy(float a, Tensor x not None, Tensor y not None):
    """``y += a * x`` over float32 tensors of one shape (any rank, padded rows or not)."""
    if cms.tensor_type_flag(x) != cms.kFloat32 or cms.tensor_type_flag(y) != cms.kFloat32:
        raise TypeError("saxpy takes float32 tensors")
    if x.shape != y.shape:
        raise ValueError(f"saxpy: shapes differ, {x.shape} and {y.shape}")
    if cms.tensor_readonly(y):
        raise ValueError("saxpy: y is read-only")
    cdef char *px = cms.tensor_data(x)   # FreedTensorError if x was freed
    cdef char *py = cms.tensor_data(y)
    cdef Py_ssize_t r, c
    cdef Py_ssize_t rows = cms.tensor_rows(y), cols = cms.tensor_cols(y)
    cdef Py_ssize_t xs = cms.tensor_stride(x), ys = cms.tensor_stride(y)
    cdef float *xr
    cdef float *yr
    # The GIL stays held: no other thread can free x or y while the loop reads them.
    for r in range(rows):
        xr = <float *> px + r * xs
        yr = <float *> py + r * ys
        for c in range(cols):
            yr[c] += a * xr[c]


def row_sums(const float[:, :] x):
    """Sum of each row, in float64, through a strided memoryview."""
    out = np.zeros(x.shape[0], np.float64)
    cdef double[::1] o = out
    cdef Py_ssize_t i, j
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            o[i] += x[i, j]
    return out


def scale_rows(float[:, ::1] x, float a):
    """``x *= a`` in place; needs C-contiguous rows (a tensor allocated with pad=False)."""
    cdef Py_ssize_t i, j
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] *= a
