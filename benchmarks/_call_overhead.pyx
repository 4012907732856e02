# cython: language_level=3, boundscheck=False, wraparound=False
"""Entry costs of a Cython kernel called from Python, before any work (bench_cython_call.py)."""
cimport mshadow as cms
from mshadow cimport Tensor


def f_object(object x):
    """Baseline: a def call that does nothing."""
    return 0


def f_pointer(Tensor x not None):
    """Bind the raw pointer, rows, cols and pitch through cimport mshadow."""
    cdef char *p = cms.tensor_data(x)
    return cms.tensor_rows(x) + cms.tensor_cols(x) + cms.tensor_stride(x) + (p == NULL)


def f_memoryview(float[:, :] x):
    """Acquire a strided typed memoryview (the buffer protocol, then Cython's checks)."""
    return x.shape[0]


def f_memoryview_c(float[:, ::1] x):
    """The same, C-contiguous rows."""
    return x.shape[0]
