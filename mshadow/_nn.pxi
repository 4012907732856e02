# Compiled kernels of mshadow/nn.py (included by _core.pyx): nn.py checks the arguments,
# these run the kernels of kernels_gen.h on tensors with no GIL, their memory pinned.

cdef extern from "mshadow/kernels_gen.h":
    void ms_softmax_rows_f32(const char *e, npy_intp es, char *d, npy_intp ds,
                             npy_intp rows, npy_intp cols, int nt) nogil
    void ms_softmax_rows_f64(const char *e, npy_intp es, char *d, npy_intp ds,
                             npy_intp rows, npy_intp cols, int nt) nogil


def softmax_rows(Tensor dst, Tensor energy):
    """mshadow's Softmax of each row of ``energy`` (1-D: one row) into ``dst``, of the same
    shape and dtype (nn.softmax checks them), float32 or float64: each row's maximum, exp
    and sum and the division in one visit (codegen_cpu._softmax). ``dst`` may be
    ``energy`` element for element. Returns False, with nothing done, for another dtype or
    when they share memory otherwise (rows shifted against each other: the kernel would read
    rows it has already written; nn.softmax's numpy passes take that case)."""
    if dst.shape != energy.shape or dst.type_flag != energy.type_flag:
        raise ShapeError(f"softmax_rows: dst {dst.shape} {dst.dtype} and energy "
                         f"{energy.shape} {energy.dtype} differ")
    if dst.dtype != np.float32 and dst.dtype != np.float64:
        return False
    if _overlaps(dst, energy) and not _same_elements(dst, energy):
        return False
    cdef npy_intp rows = dst.rows, cols = dst.cols
    cdef bint f32 = dst.dtype == np.float32
    # (a row's max, exp-sum and scale run at about one element a ns: _share_at, which may
    # measure the team's wake without the GIL, so before any address is taken)
    cdef int nt = max(1, min(_num_threads, rows * cols // _share_at(1, rows * cols)))
    cdef char *d = dst.data()           # (from here to the pins no other thread runs)
    cdef const char *e = energy.data()
    cdef npy_intp ds = dst.stride * dst.itemsize, es = energy.stride * energy.itemsize
    dst.mem.pin()                       # a free_space meanwhile waits for the run (unpin)
    energy.mem.pin()
    try:
        with nogil:
            if f32:
                ms_softmax_rows_f32(e, es, d, ds, rows, cols, nt)
            else:
                ms_softmax_rows_f64(e, es, d, ds, rows, cols, nt)
    finally:
        energy.mem.unpin()
        dst.mem.unpin()
    return True
