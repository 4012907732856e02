# Declarations of the compiled core: the memory owner and the Tensor handle.
# Other Cython modules cimport these to reach a tensor's pointer without Python calls.

cdef extern from "mshadow/alloc.h":
    int MS_ALIGN_BYTES
    void *ms_aligned_malloc(size_t nbytes) nogil
    void ms_aligned_free(void *p) nogil
    size_t ms_upper_align(size_t row_bytes) nogil


cdef class Allocation:
    cdef char *ptr
    cdef Py_ssize_t nbytes
    cdef bint alive
    cdef bint owned          # malloc'ed by us (new_tensor / alloc_space / TensorContainer)
    cdef object base         # what keeps foreign memory alive (a numpy array)
    cdef Py_ssize_t n_exports
    cdef bint foreign_held    # handed out through __cuda_array_interface__: never released
    cdef Py_ssize_t n_running   # evaluations using the bytes with the GIL released
    cdef bint free_pending      # released while running: freed when the last one ends
    cdef object device_mem      # GPU memory: the driver's Memory (ptr is its address), or
                                # the keeper of a DLPack producer's (not owned); None: host
    cdef void release(self) except *
    cdef void _free(self) except *
    cdef void pin(self) noexcept
    cdef void unpin(self) noexcept


cdef class Tensor:
    cdef Allocation mem
    cdef Py_ssize_t offset         # bytes from mem.ptr
    cdef readonly object shape     # a Shape
    cdef readonly Py_ssize_t stride
    cdef readonly object dtype
    cdef readonly object device
    cdef public object stream
    cdef readonly int type_flag
    cdef readonly int itemsize
    cdef readonly bint readonly
    cdef Py_ssize_t rows, cols     # the 2-D flattened view
    cdef object __weakref__
    cdef char *data(self) except NULL
    cdef Tensor _view(self, object shape, Py_ssize_t offset, Py_ssize_t stride)
    cdef Py_ssize_t _index(self, object i) except -1


cdef class TensorContainer(Tensor):
    cdef readonly bint pad
    cdef Py_ssize_t cap_rows, cap_pitch   # the allocation, in rows x bytes
    cdef _reserve(self, object shape)


cdef class Exp:
    # (_exp.pxi) base of every lazy expression
    cdef public object key       # its IR node (mshadow/ir.py)
    cdef public object shape
    cdef public str code
    cdef public tuple leaves
    cdef public tuple scalars
    cdef public int exp_type
    cdef object site             # make_map's _Site of its key (None: not interned)
    # MapExp's operator and operands (its op / args): held here so that a map node has
    # Exp's size, which Exp's free list (_exp.pxi) serves; None in the other kinds
    cdef object map_op
    cdef tuple map_args
    cdef object __weakref__


cdef class ScaledExp(Exp):
    # (_exp.pxi) a kComplex expression whose scale `* s` folds into
    cdef public object scale


cdef class ProductExp(ScaledExp):
    # (_product.pxi) dot / batch_dot of lhs and rhs, with BLAS's transpose flags
    cdef public object lhs, rhs
    cdef public bint ltrans, rtrans


cdef class ColumnPanels:
    # (_stages.pxi) a product's expression operand, a panel of columns at a time
    cdef object run                  # the open _Run (None once closed)
    cdef Allocation scratch          # the panel's block, from the thread's arena
    cdef readonly Py_ssize_t rows, cols, width, itemsize
    cdef char *fill(self, Py_ssize_t x0, Py_ssize_t x1) except NULL
