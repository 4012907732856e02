# Cython declarations for code outside mshadow: ``cimport mshadow`` reaches a Tensor's data
# pointer, shape and row stride at C level, as ``cimport numpy`` does for ndarrays.
#
#     cimport mshadow as cms
#     from mshadow cimport Tensor
#
#     def scale(Tensor t not None, float a):
#         if cms.tensor_type_flag(t) != cms.kFloat32: raise TypeError("float32 only")
#         cdef char *p = cms.tensor_data(t)          # raises FreedTensorError if freed
#         for r in range(cms.tensor_rows(t)):        # the tensor as rows x cols ...
#             row = <float *> p + r * cms.tensor_stride(t)   # ... rows pitched by stride
#             for c in range(cms.tensor_cols(t)):
#                 row[c] *= a
#
# Build such an extension with include_dirs=[mshadow.get_include()] (the .pxd declares the
# allocator from mshadow/alloc.h and the type flags from mshadow/dtypes_gen.h). The layout below must match the mshadow it is imported
# with: rebuild downstream extensions after upgrading mshadow.
# Accessors take a Tensor that is not None: declare ``Tensor t not None`` in the def signature.

from mshadow._core cimport Allocation, Tensor, TensorContainer

# mshadow's type flags (Tensor.type_flag); the same numbers as ms.kFloat32 ... ms.kInt64,
# read from the generated dtype table (mshadow/dtypes_gen.h, from mshadow/dtypes.py).
cdef extern from "mshadow/dtypes_gen.h":
    enum:
        kFloat32 "MS_TYPEFLAG_FLOAT32"
        kFloat64 "MS_TYPEFLAG_FLOAT64"
        kFloat16 "MS_TYPEFLAG_FLOAT16"
        kUint8 "MS_TYPEFLAG_UINT8"
        kInt32 "MS_TYPEFLAG_INT32"
        kInt8 "MS_TYPEFLAG_INT8"
        kInt64 "MS_TYPEFLAG_INT64"


cdef inline char *tensor_data(Tensor t) except NULL:
    """Address of the first element; FreedTensorError if the memory was released."""
    return t.data()


cdef inline int tensor_ndim(Tensor t) except -1:
    return len(t.shape)


cdef inline Py_ssize_t tensor_shape(Tensor t, int i) except -1:
    """``t.shape[i]`` (negative ``i`` counts from the end); IndexError out of range."""
    return t.shape[i]


cdef inline Py_ssize_t tensor_stride(Tensor t) noexcept:
    """Elements from one row to the next (mshadow's ``stride_``; >= the last dimension)."""
    return t.stride


cdef inline Py_ssize_t tensor_rows(Tensor t) noexcept:
    """Rows of the 2-D view: the product of every dimension but the last (1 for 1-D)."""
    return t.rows


cdef inline Py_ssize_t tensor_cols(Tensor t) noexcept:
    """Columns of the 2-D view: the last dimension."""
    return t.cols


cdef inline int tensor_type_flag(Tensor t) noexcept:
    return t.type_flag


cdef inline int tensor_itemsize(Tensor t) noexcept:
    return t.itemsize


cdef inline bint tensor_readonly(Tensor t) noexcept:
    return t.readonly
