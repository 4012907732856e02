# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""BLAS calls behind dot/batch_dot (scipy's cython_blas, nogil) and the non-BLAS loops.

Design: every operand is a row-major 2-D view (pointer, rows, cols, row stride) plus a
transpose flag. float32/float64 go to ?gemm/?gemv/?dot with the operand swap that turns
row-major into column-major (C^T = op(B)^T op(A)^T); float16 is widened to float32, run
through sgemm (fp32 accumulation, like cublasSgemmEx) and rounded once; integer dtypes use
an exact row-parallel loop whose sums wrap modulo 2^bits like C++ mshadow's integer math.
Assumes: the Python layer (mshadow/dot.py) has checked dtypes and devices; shapes are
re-checked here so that no call can hand BLAS a bad dimension. Never stores before every
check has passed; never touches a freed tensor (Tensor.data() raises first).
"""
from libc.stdint cimport int8_t, uint8_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy, memset
from libc.limits cimport INT_MAX
from libc.math cimport isfinite
from cython.parallel cimport prange, parallel, threadid
from scipy.linalg.cython_blas cimport sgemm, dgemm, sgemv, dgemv, sdot, ddot

from mshadow._core cimport ColumnPanels, ProductExp, Tensor
from mshadow._tables cimport (MS_TYPEFLAG_FLOAT32, MS_TYPEFLAG_FLOAT64, MS_TYPEFLAG_FLOAT16,
                              MS_TYPEFLAG_UINT8, MS_TYPEFLAG_INT32, MS_TYPEFLAG_INT8,
                              MS_TYPEFLAG_INT64)
from .dtypes import DTYPES
from .errors import ShapeError, DTypeError
from .shape import Shape
from .device import cpu as _CPU
from .ir import SAVER_BLAS

cdef extern from "mshadow/panel_gemm.h":
    int MS_PG_LEVELS
    int ms_pg_mr(int level) nogil
    void ms_pg_pack_f32(const float *w, Py_ssize_t rs, Py_ssize_t cs, float *wp, Py_ssize_t K,
                        Py_ssize_t CK, int mr) nogil
    void ms_pg_pack_f64(const double *w, Py_ssize_t rs, Py_ssize_t cs, double *wp,
                        Py_ssize_t K, Py_ssize_t CK, int mr) nogil
    void ms_pg_gemm_f32(int level, const float *wp, const float *p, const Py_ssize_t *off,
                        Py_ssize_t w, float *c, Py_ssize_t ldc, Py_ssize_t K, Py_ssize_t CK,
                        float alpha, float beta, int nt) nogil
    void ms_pg_gemm_f64(int level, const double *wp, const double *p, const Py_ssize_t *off,
                        Py_ssize_t w, double *c, Py_ssize_t ldc, Py_ssize_t K, Py_ssize_t CK,
                        double alpha, double beta, int nt) nogil
    ctypedef struct ms_pg_conv_plan:
        int by_channels, pack_rows
        Py_ssize_t group, nbuf, npix, scratch
    void ms_pg_conv_plan_for(int level, size_t item, Py_ssize_t K, Py_ssize_t CK, Py_ssize_t N,
                             Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t wrow, Py_ssize_t stride,
                             Py_ssize_t plane, int nt, ms_pg_conv_plan *pl) nogil
    void ms_pg_conv_f32(int level, const float *wp, Py_ssize_t K, const float *x, Py_ssize_t N,
                        Py_ssize_t C, Py_ssize_t H, Py_ssize_t W, Py_ssize_t ldx, Py_ssize_t py,
                        Py_ssize_t px, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t stride, float *y,
                        Py_ssize_t ldy, float alpha, float beta, const ms_pg_conv_plan *pl,
                        float *xpad, Py_ssize_t *off, Py_ssize_t *pix, float *scr, int nt) nogil
    void ms_pg_conv_f64(int level, const double *wp, Py_ssize_t K, const double *x,
                        Py_ssize_t N, Py_ssize_t C, Py_ssize_t H, Py_ssize_t W, Py_ssize_t ldx,
                        Py_ssize_t py, Py_ssize_t px, Py_ssize_t kh, Py_ssize_t kw,
                        Py_ssize_t stride, double *y, Py_ssize_t ldy, double alpha, double beta,
                        const ms_pg_conv_plan *pl, double *xpad, Py_ssize_t *off,
                        Py_ssize_t *pix, double *scr, int nt) nogil
    Py_ssize_t ms_pg_kpad(int level, size_t item, Py_ssize_t K) nogil
    Py_ssize_t ms_pg_wgroup(Py_ssize_t N, Py_ssize_t Hp, Py_ssize_t wrow) nogil
    void ms_pg_convw_f32(int level, const float *x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t H,
                         Py_ssize_t W, Py_ssize_t ldx, Py_ssize_t py, Py_ssize_t px,
                         Py_ssize_t kh, Py_ssize_t kw, const float *g, Py_ssize_t K, float *s,
                         float *xpad, float *gt, Py_ssize_t *off, Py_ssize_t *qs, int nt) nogil
    void ms_pg_convw_f64(int level, const double *x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t H,
                         Py_ssize_t W, Py_ssize_t ldx, Py_ssize_t py, Py_ssize_t px,
                         Py_ssize_t kh, Py_ssize_t kw, const double *g, Py_ssize_t K,
                         double *s, double *xpad, double *gt, Py_ssize_t *off, Py_ssize_t *qs,
                         int nt) nogil

# the SIMD levels by name, as _core.simd_info() gives them
_LEVELS = ("plain", "sse2", "avx2", "avx512")

cdef extern from "mshadow/alloc.h":
    void *ms_aligned_malloc(size_t nbytes) nogil
    void ms_aligned_free(void *p) nogil

cdef extern from "mshadow/half.h":
    float ms_half_to_float(uint16_t h) nogil
    uint16_t ms_float_to_half(float f) nogil

ctypedef fused floating:
    float
    double

ctypedef fused itype:
    uint8_t
    int8_t
    int32_t
    int64_t

# Sums of <= 32-bit integers only need to be right modulo 2^32 (the store truncates), so
# they accumulate in uint32; int64 needs uint64. Unsigned arithmetic wraps without UB.
ctypedef fused acctype:
    uint32_t
    uint64_t

# the storage dtype of each TypeFlag, for messages, and whether it is a float type
_NAMES = tuple(d.np.name for d in DTYPES)
_IS_FLOAT = tuple(d.is_float for d in DTYPES)

# below this many multiply-adds the integer loop stays on one thread
DEF MIN_PARALLEL_MACS = 1 << 16
# below this many, a product keeps the GIL (releasing and taking it back costs about as
# much as a 16 x 16 x 16 product)
DEF MIN_NOGIL_MACS = 1 << 15

cdef struct Mat:
    char *p
    Py_ssize_t rows, cols, ld      # the stored row-major view
    bint trans


cdef inline Py_ssize_t _imax(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return a if a > b else b


# ---- float32 / float64: BLAS ------------------------------------------------------------

cdef void _fgemm(floating *C, Py_ssize_t ldc, floating *A, Py_ssize_t lda, bint ta,
                 floating *B, Py_ssize_t ldb, bint tb, Py_ssize_t m, Py_ssize_t n,
                 Py_ssize_t k, floating alpha, floating beta) noexcept nogil:
    """C(m,n) = alpha op(A)(m,k) op(B)(k,n) + beta C, all row-major; beta == 0 never reads C."""
    cdef Py_ssize_t i, j
    cdef int im, in_, ik, ilda, ildb, ildc, inca, incb, incc
    cdef char cta, ctb
    cdef floating r
    if m == 0 or n == 0:
        return
    if k == 0:
        # BLAS would scale C by beta too, but rejects ld = 0 for the empty operands
        for i in range(m):
            for j in range(n):
                C[i * ldc + j] = 0 if beta == 0 else beta * C[i * ldc + j]
        return
    im, in_, ik = <int> m, <int> n, <int> k
    # BLAS wants ld >= 1 even for one-column operands
    ilda, ildb, ildc = <int> _imax(lda, 1), <int> _imax(ldb, 1), <int> _imax(ldc, 1)
    if m == 1 and n == 1:
        # inner product: op(A) is a row, op(B) a column
        inca = ilda if ta else 1
        incb = 1 if tb else ildb
        if floating is float:
            r = sdot(&ik, A, &inca, B, &incb)
        else:
            r = ddot(&ik, A, &inca, B, &incb)
        C[0] = alpha * r if beta == 0 else alpha * r + beta * C[0]
    elif m == 1:
        # row vector times matrix: y^T = op(B)^T x^T, op(B) read through B's column-major view
        ctb = b'T' if tb else b'N'
        inca = ilda if ta else 1
        im = <int> (k if tb else n)      # rows of B's column-major view = stored cols
        ik = <int> (n if tb else k)
        incc = 1
        if floating is float:
            sgemv(&ctb, &im, &ik, &alpha, B, &ildb, A, &inca, &beta, C, &incc)
        else:
            dgemv(&ctb, &im, &ik, &alpha, B, &ildb, A, &inca, &beta, C, &incc)
    elif n == 1:
        # matrix times column vector: y = op(A) x
        cta = b'N' if ta else b'T'
        incb = 1 if tb else ildb
        in_ = <int> (m if ta else k)     # rows of A's column-major view = stored cols
        ik = <int> (k if ta else m)
        if floating is float:
            sgemv(&cta, &in_, &ik, &alpha, A, &ilda, B, &incb, &beta, C, &ildc)
        else:
            dgemv(&cta, &in_, &ik, &alpha, A, &ilda, B, &incb, &beta, C, &ildc)
    else:
        # row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands
        cta = b'T' if ta else b'N'
        ctb = b'T' if tb else b'N'
        if floating is float:
            sgemm(&ctb, &cta, &in_, &im, &ik, &alpha, B, &ildb, A, &ilda, &beta, C, &ildc)
        else:
            dgemm(&ctb, &cta, &in_, &im, &ik, &alpha, B, &ildb, A, &ilda, &beta, C, &ildc)


# ---- float16: widen, sgemm, round once ----------------------------------------------------

cdef void _widen(float *dst, const uint16_t *src, Py_ssize_t rows, Py_ssize_t cols,
                 Py_ssize_t ld) noexcept nogil:
    cdef Py_ssize_t i, j
    for i in range(rows):
        for j in range(cols):
            dst[i * cols + j] = ms_half_to_float(src[i * ld + j])


cdef int _hgemm(uint16_t *C, Py_ssize_t ldc, uint16_t *A, Py_ssize_t lda, bint ta,
                uint16_t *B, Py_ssize_t ldb, bint tb, Py_ssize_t m, Py_ssize_t n,
                Py_ssize_t k, float alpha, float beta) noexcept nogil:
    """float16 product accumulated in float32; -1 when scratch cannot be allocated."""
    cdef Py_ssize_t i, j
    cdef Py_ssize_t ar = k if ta else m, ac = m if ta else k
    cdef Py_ssize_t br = n if tb else k, bc = k if tb else n
    cdef float *a32
    cdef float *b32
    cdef float *c32
    if m == 0 or n == 0:
        return 0
    a32 = <float *> malloc(_imax(ar * ac, 1) * sizeof(float))
    b32 = <float *> malloc(_imax(br * bc, 1) * sizeof(float))
    c32 = <float *> malloc(m * n * sizeof(float))
    if a32 == NULL or b32 == NULL or c32 == NULL:
        free(a32); free(b32); free(c32)
        return -1
    _widen(a32, A, ar, ac, lda)
    _widen(b32, B, br, bc, ldb)
    if beta != 0:
        _widen(c32, C, m, n, ldc)
    _fgemm[float](c32, n, a32, ac, ta, b32, bc, tb, m, n, k, alpha, beta)
    for i in range(m):
        for j in range(n):
            C[i * ldc + j] = ms_float_to_half(c32[i * n + j])
    free(a32); free(b32); free(c32)
    return 0


# ---- integers: exact, wrapping -----------------------------------------------------------

cdef void _irow(itype *C, Py_ssize_t ldc, const itype *A, Py_ssize_t lda, bint ta,
                const itype *B, Py_ssize_t ldb, bint tb, Py_ssize_t i, Py_ssize_t n,
                Py_ssize_t k, acctype alpha, acctype beta, acctype *acc) noexcept nogil:
    """Row i of C: n sums of k products, in the unsigned accumulator type."""
    cdef Py_ssize_t j, p
    cdef acctype a, s
    if not tb:
        # axpy order: a row of B is contiguous, so the inner loop over j vectorises
        for j in range(n):
            acc[j] = 0
        for p in range(k):
            a = <acctype> (A[p * lda + i] if ta else A[i * lda + p])
            if a == 0:
                continue
            for j in range(n):
                acc[j] += a * <acctype> B[p * ldb + j]
    else:
        # dot order: a row of the stored B is op(B)'s column, contiguous over p
        for j in range(n):
            s = 0
            if ta:
                for p in range(k):
                    s += <acctype> A[p * lda + i] * <acctype> B[j * ldb + p]
            else:
                for p in range(k):
                    s += <acctype> A[i * lda + p] * <acctype> B[j * ldb + p]
            acc[j] = s
    if beta == 0:
        for j in range(n):
            C[i * ldc + j] = <itype> (alpha * acc[j])
    else:
        for j in range(n):
            C[i * ldc + j] = <itype> (alpha * acc[j] + beta * <acctype> C[i * ldc + j])


cdef int _igemm(itype *C, Py_ssize_t ldc, itype *A, Py_ssize_t lda, bint ta,
                itype *B, Py_ssize_t ldb, bint tb, Py_ssize_t m, Py_ssize_t n,
                Py_ssize_t k, acctype alpha, acctype beta, int nthreads) noexcept nogil:
    cdef Py_ssize_t i
    cdef acctype *acc
    if m == 0 or n == 0:
        return 0
    if m * n * k < MIN_PARALLEL_MACS or m < 2:
        nthreads = 1
    # one accumulator row per thread, allocated up front (no allocation inside the region)
    acc = <acctype *> malloc(nthreads * n * sizeof(acctype))
    if acc == NULL:
        return -1
    if nthreads == 1:
        for i in range(m):
            _irow(C, ldc, A, lda, ta, B, ldb, tb, i, n, k, alpha, beta, acc)
    else:
        with parallel(num_threads=nthreads):
            for i in prange(m, schedule='static'):
                _irow(C, ldc, A, lda, ta, B, ldb, tb, i, n, k, alpha, beta,
                      acc + threadid() * n)
    free(acc)
    return 0


# ---- dispatch by dtype -------------------------------------------------------------------

cdef int _product(int flag, Mat c, Mat a, Mat b, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                  double falpha, double fbeta, uint64_t ialpha, uint64_t ibeta,
                  int nthreads) noexcept nogil:
    """c = alpha op(a) op(b) + beta c for the dtype ``flag``; -1 on allocation failure, -2
    for a dtype with no product here."""
    if flag == MS_TYPEFLAG_FLOAT32:
        _fgemm[float](<float *> c.p, c.ld, <float *> a.p, a.ld, a.trans, <float *> b.p, b.ld,
                      b.trans, m, n, k, <float> falpha, <float> fbeta)
        return 0
    if flag == MS_TYPEFLAG_FLOAT64:
        _fgemm[double](<double *> c.p, c.ld, <double *> a.p, a.ld, a.trans, <double *> b.p,
                       b.ld, b.trans, m, n, k, falpha, fbeta)
        return 0
    if flag == MS_TYPEFLAG_FLOAT16:
        return _hgemm(<uint16_t *> c.p, c.ld, <uint16_t *> a.p, a.ld, a.trans,
                      <uint16_t *> b.p, b.ld, b.trans, m, n, k, <float> falpha, <float> fbeta)
    if flag == MS_TYPEFLAG_UINT8:
        return _igemm[uint8_t, uint32_t](<uint8_t *> c.p, c.ld, <uint8_t *> a.p, a.ld, a.trans,
                                         <uint8_t *> b.p, b.ld, b.trans, m, n, k,
                                         <uint32_t> ialpha, <uint32_t> ibeta, nthreads)
    if flag == MS_TYPEFLAG_INT32:
        return _igemm[int32_t, uint32_t](<int32_t *> c.p, c.ld, <int32_t *> a.p, a.ld, a.trans,
                                         <int32_t *> b.p, b.ld, b.trans, m, n, k,
                                         <uint32_t> ialpha, <uint32_t> ibeta, nthreads)
    if flag == MS_TYPEFLAG_INT8:
        return _igemm[int8_t, uint32_t](<int8_t *> c.p, c.ld, <int8_t *> a.p, a.ld, a.trans,
                                        <int8_t *> b.p, b.ld, b.trans, m, n, k,
                                        <uint32_t> ialpha, <uint32_t> ibeta, nthreads)
    if flag == MS_TYPEFLAG_INT64:
        return _igemm[int64_t, uint64_t](<int64_t *> c.p, c.ld, <int64_t *> a.p, a.ld, a.trans,
                                         <int64_t *> b.p, b.ld, b.trans, m, n, k,
                                         ialpha, ibeta, nthreads)
    return -2


# ---- Python entry points -----------------------------------------------------------------

cdef inline bint _overlap(char *p, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t ld,
                          char *q, Py_ssize_t qrows, Py_ssize_t qcols, Py_ssize_t qld,
                          Py_ssize_t item) noexcept nogil:
    """Whether two pitched views share a byte (conservatively: their spans intersect)."""
    if rows == 0 or cols == 0 or qrows == 0 or qcols == 0:
        return False
    return p < q + ((qrows - 1) * qld + qcols) * item and q < p + ((rows - 1) * ld + cols) * item


cdef int _snapshot(Mat *x, Py_ssize_t nmat, Py_ssize_t mat_stride, Py_ssize_t item,
                   char **buf) noexcept nogil:
    """Copy ``nmat`` stacked views of x into one packed buffer and point x at it."""
    cdef Py_ssize_t q, r, row_bytes = x.cols * item
    buf[0] = <char *> malloc(_imax(nmat * x.rows * row_bytes, 1))
    if buf[0] == NULL:
        return -1
    for q in range(nmat):
        for r in range(x.rows):
            memcpy(buf[0] + (q * x.rows + r) * row_bytes,
                   x.p + (q * mat_stride + r * x.ld) * item, row_bytes)
    x.p = buf[0]
    x.ld = x.cols
    return 0


cdef int _scalars(int flag, alpha, beta, double *fa, double *fb, uint64_t *ia,
                  uint64_t *ib) except -1:
    """alpha and beta as a product of dtype ``flag`` takes them: floats, or integers taken
    modulo 2^64 (they wrap); the others 0."""
    if _IS_FLOAT[flag]:
        fa[0], fb[0], ia[0], ib[0] = float(alpha), float(beta), 0, 0
    else:
        fa[0], fb[0] = 0.0, 0.0
        ia[0], ib[0] = int(alpha) & 0xFFFFFFFFFFFFFFFF, int(beta) & 0xFFFFFFFFFFFFFFFF
    return 0


cdef int _check_rc(int rc, str where, int flag) except -1:
    """The error of a product's return code (_product): -2 no product for the dtype, any
    other non-zero a failed scratch allocation."""
    if rc == -2:
        raise DTypeError(f"{where}: no product for dtype {_NAMES[flag]}")
    if rc != 0:
        raise MemoryError(f"{where}: could not allocate scratch memory")
    return 0


cdef _check_int(Py_ssize_t v, str what):
    # scipy's cython_blas takes 32-bit Fortran integers
    if v > INT_MAX:
        raise ValueError(f"dot: {what} = {v} exceeds the BLAS integer range ({INT_MAX})")


def gemm(Tensor c, Tensor a, bint ta, Tensor b, bint tb, alpha, beta, int nthreads=1):
    """``c = alpha * op(a) @ op(b) + beta * c`` on the tensors' row-major 2-D views.

    A 1-D tensor is a (1, n) row; with its flag set it is the column op(x) = x^T. A 1-D ``c``
    holds an (m, 1) or (1, n) result. Operands that overlap ``c`` are read from a snapshot.
    """
    _gemm(c, a, ta, b, tb, alpha, beta, nthreads)


cdef int _gemm(Tensor c, Tensor a, bint ta, Tensor b, bint tb, alpha, beta,
               int nthreads) except -1:
    cdef Mat mc, ma, mb
    cdef Py_ssize_t m, n, k, k2
    cdef char *abuf = NULL
    cdef char *bbuf = NULL
    cdef int flag = c.type_flag, rc = 0
    cdef double fa, fb
    cdef uint64_t ia, ib
    if a.type_flag != flag or b.type_flag != flag:
        raise DTypeError(f"dot: operands of dtypes {_NAMES[a.type_flag]} and "
                         f"{_NAMES[b.type_flag]} into {_NAMES[flag]}")
    if len(<tuple> a.shape) > 2 or len(<tuple> b.shape) > 2 or len(<tuple> c.shape) > 2:
        raise ShapeError(f"dot-gemm: operands must be 1-D or 2-D, got {a.shape}, {b.shape} "
                         f"-> {c.shape}")
    if c.readonly:
        raise ValueError("assignment destination is read-only")
    ma.p, ma.rows, ma.cols, ma.ld, ma.trans = a.data(), a.rows, a.cols, a.stride, ta
    mb.p, mb.rows, mb.cols, mb.ld, mb.trans = b.data(), b.rows, b.cols, b.stride, tb
    mc.p = c.data()
    m, k = (a.cols, a.rows) if ta else (a.rows, a.cols)
    k2, n = (b.cols, b.rows) if tb else (b.rows, b.cols)
    if len(<tuple> c.shape) == 1 and m == 1:
        mc.rows, mc.cols, mc.ld = 1, c.cols, c.cols
    elif len(<tuple> c.shape) == 1:
        # an (m, 1) column of a contiguous vector: one element per row
        mc.rows, mc.cols, mc.ld = c.cols, 1, 1
    else:
        mc.rows, mc.cols, mc.ld = c.rows, c.cols, c.stride
    if k != k2 or mc.rows != m or mc.cols != n:
        raise ShapeError(f"dot-gemm: matrix shape mismatch: ({m}, {k}) x ({k2}, {n}) "
                         f"into {c.shape}")
    if max(m, n, k, ma.ld, mb.ld, mc.ld) > INT_MAX:
        for v, what in ((m, "rows"), (n, "cols"), (k, "inner size"),
                        (ma.ld, "lda"), (mb.ld, "ldb"), (mc.ld, "ldc")):
            _check_int(v, what)
    _scalars(flag, alpha, beta, &fa, &fb, &ia, &ib)
    _pin3(a, b, c)   # the memory outlives a free_space or resize from another thread
    try:
        if m * n * k < MIN_NOGIL_MACS:     # a few hundred ns: dropping the GIL costs more
            rc = _gemm_run(flag, &mc, &ma, &mb, m, n, k, fa, fb, ia, ib, nthreads, c.itemsize)
        else:
            with nogil:
                rc = _gemm_run(flag, &mc, &ma, &mb, m, n, k, fa, fb, ia, ib, nthreads,
                               c.itemsize)
    finally:
        _unpin3(a, b, c)
    return _check_rc(rc, "dot", flag)


cdef int _gemm_run(int flag, Mat *mc, Mat *ma, Mat *mb, Py_ssize_t m, Py_ssize_t n,
                   Py_ssize_t k, double fa, double fb, uint64_t ia, uint64_t ib, int nthreads,
                   Py_ssize_t item) noexcept nogil:
    """_product, with an operand that overlaps c read from a snapshot of it."""
    cdef char *abuf = NULL
    cdef char *bbuf = NULL
    cdef int rc = 0
    if _overlap(mc.p, mc.rows, mc.cols, mc.ld, ma.p, ma.rows, ma.cols, ma.ld, item):
        rc = _snapshot(ma, 1, 0, item, &abuf)
    if rc == 0 and _overlap(mc.p, mc.rows, mc.cols, mc.ld, mb.p, mb.rows, mb.cols, mb.ld, item):
        rc = _snapshot(mb, 1, 0, item, &bbuf)
    if rc == 0:
        rc = _product(flag, mc[0], ma[0], mb[0], m, n, k, fa, fb, ia, ib, nthreads)
    free(abuf)
    free(bbuf)
    return rc


def gemm_panels(Tensor c, Tensor a, bint ta, ColumnPanels b, alpha, beta, int nthreads=1):
    """``c = alpha * op(a) @ B + beta * c`` for a 2-D ``c`` and ``a``, where B is the
    expression ``b`` evaluates a panel of columns at a time (_core.ColumnPanels): each
    panel is one product into the same columns of ``c``, read from cache, and B as a whole
    never exists. The caller checked that B reads no byte of ``c``; ``a`` overlapping
    ``c`` is read from a snapshot, as gemm does."""
    cdef Mat mc, ma, mb
    cdef Py_ssize_t m, n, k, x0, x1, item = c.itemsize
    cdef char *abuf = NULL
    cdef char *cp
    cdef int flag = c.type_flag, rc = 0
    cdef double fa, fb
    cdef uint64_t ia, ib
    if a.type_flag != flag:
        raise DTypeError(f"dot: operands of dtypes {_NAMES[a.type_flag]} and the expression's "
                         f"into {_NAMES[flag]}")
    if len(a.shape) != 2 or len(c.shape) != 2:
        raise ShapeError(f"dot-gemm: a panel product takes 2-D tensors, got {a.shape} -> "
                         f"{c.shape}")
    if c.readonly:
        raise ValueError("assignment destination is read-only")
    m, k = (a.cols, a.rows) if ta else (a.rows, a.cols)
    n = b.cols
    if b.rows != k or c.rows != m or c.cols != n:
        raise ShapeError(f"dot-gemm: matrix shape mismatch: ({m}, {k}) x ({b.rows}, {n}) "
                         f"into {c.shape}")
    for v, what in ((m, "rows"), (n, "cols"), (k, "inner size"), (a.stride, "lda"),
                    (c.stride, "ldc")):
        _check_int(v, what)
    ma.p, ma.rows, ma.cols, ma.ld, ma.trans = a.data(), a.rows, a.cols, a.stride, ta
    mb.rows, mb.trans = k, False
    mc.rows, mc.ld = m, c.stride
    _scalars(flag, alpha, beta, &fa, &fb, &ia, &ib)
    cp = c.data()
    a.mem.pin()
    c.mem.pin()
    try:
        if _overlap(cp, c.rows, c.cols, c.stride, ma.p, ma.rows, ma.cols, ma.ld, item):
            rc = _snapshot(&ma, 1, 0, item, &abuf)
        x0 = 0
        while rc == 0 and x0 < n:
            x1 = min(n, x0 + b.width)
            mb.p = b.fill(x0, x1)          # columns [x0, x1) of B: dense rows of x1 - x0
            mb.cols = mb.ld = x1 - x0
            mc.p = cp + x0 * item
            mc.cols = x1 - x0
            with nogil:
                rc = _product(flag, mc, ma, mb, m, x1 - x0, k, fa, fb, ia, ib, nthreads)
            x0 = x1
    finally:
        free(abuf)
        a.mem.unpin()
        c.mem.unpin()
    _check_rc(rc, "dot", flag)


cdef int _pg_level(str level, int flag):
    """The SIMD level panel_gemm.h's kernel runs at for this dtype (2: AVX2 with FMA, 3:
    AVX-512), or 0: BLAS's product."""
    cdef int lvl = _LEVELS.index(level) if level in _LEVELS else 0
    if (not MS_PG_LEVELS or lvl < 2 or
            not (flag == MS_TYPEFLAG_FLOAT32 or flag == MS_TYPEFLAG_FLOAT64)):
        return 0
    return lvl


cdef char *_pg_pack(int lvl, int flag, char *w, Py_ssize_t rs, Py_ssize_t cs, Py_ssize_t K,
                    Py_ssize_t CK, int mr=0) except? NULL:
    """The (K x CK) matrix at ``w`` (element (m, k) at m * rs + k * cs) packed for
    panel_gemm.h at level ``lvl`` in blocks of ``mr`` rows (0: ms_pg_tile's), malloc'd
    (the caller frees it); NULL at level 0."""
    if lvl == 0:
        return NULL
    if mr <= 0:
        mr = ms_pg_mr(lvl)
    cdef Py_ssize_t item = 4 if flag == MS_TYPEFLAG_FLOAT32 else 8
    # (on a cache line: ms_pg_ktile loads its rows whole)
    cdef char *wp = <char *> ms_aligned_malloc(max(1, ((K + mr - 1) // mr) * mr * CK * item))
    if wp == NULL:
        raise MemoryError()
    if flag == MS_TYPEFLAG_FLOAT32:
        ms_pg_pack_f32(<float *> w, rs, cs, <float *> wp, K, CK, mr)
    else:
        ms_pg_pack_f64(<double *> w, rs, cs, <double *> wp, K, CK, mr)
    return wp


cdef Py_ssize_t *_pg_rows(Py_ssize_t *off, Py_ssize_t CK, Py_ssize_t ld) except NULL:
    """``off`` (malloc'd for CK rows when NULL: the caller frees it) set to the row offsets
    of a dense (CK x ld) panel, k * ld: panel_gemm.h's rows of B."""
    cdef Py_ssize_t k
    if off == NULL:
        off = <Py_ssize_t *> malloc(max(1, CK) * sizeof(Py_ssize_t))
        if off == NULL:
            raise MemoryError()
    for k in range(CK):
        off[k] = k * ld
    return off


cdef void _pg_gemm(int lvl, int flag, char *wp, char *p, const Py_ssize_t *off, Py_ssize_t w,
                   char *c, Py_ssize_t ldc, Py_ssize_t K, Py_ssize_t CK, double alpha,
                   double beta, int nt) noexcept nogil:
    """c (K x w) = alpha * (the packed wp) @ P (CK x w, row k at p + off[k]) + beta * c,
    panel_gemm.h."""
    if flag == MS_TYPEFLAG_FLOAT32:
        ms_pg_gemm_f32(lvl, <float *> wp, <float *> p, off, w, <float *> c, ldc, K, CK,
                       <float> alpha, <float> beta, nt)
    else:
        ms_pg_gemm_f64(lvl, <double *> wp, <double *> p, off, w, <double *> c, ldc, K, CK,
                       alpha, beta, nt)


def conv_panels(Tensor c, Tensor a, ColumnPanels b, Py_ssize_t K, Py_ssize_t nimg,
                Py_ssize_t per_image, bint grad_weight, alpha, beta, int nthreads=1,
                str level="plain"):
    """The products of a convolution whose column matrix ``b`` gives a panel at a time (its
    rows C*kh*kw, its columns (n, oy, ox): ``per_image`` an image); panels never straddle
    two images. ``c`` and ``a`` are dense; K is the rows of the weight.

    forward:     c (N, K, oh, ow): image n = alpha * a (K, CK) @ b[:, image n] + beta * c
    grad_weight: c (K, CK) = alpha * sum_n a[n] (K, per_image) @ b[:, image n]^T + beta * c
    Each output is written where it belongs: no column matrix, no (K, N*oh*ow) product
    to transpose afterwards. Any of the sizes may be 0.

    The forward of float32 and float64 at the SIMD ``level`` avx2 (with FMA) or avx512
    takes panel_gemm.h's kernel instead of BLAS: the weight packed once, each panel read
    where it was written (BLAS packed it again)."""
    cdef Mat mc, ma, mb
    cdef Py_ssize_t CK = b.rows, n, p0, p1, w, item = c.itemsize
    cdef char *cp
    cdef char *ap
    cdef int flag = c.type_flag, rc = 0
    cdef bint first = True
    cdef double fa, fb, f0, f1
    cdef uint64_t ia, ib, i0, i1
    if a.type_flag != flag:
        raise DTypeError(f"conv2d: tensors of dtypes {_NAMES[a.type_flag]} and {_NAMES[flag]}")
    if c.readonly:
        raise ValueError("assignment destination is read-only")
    if (b.cols != nimg * per_image or K * CK != (c if grad_weight else a).rows *
            (c if grad_weight else a).cols or (a if grad_weight else c).rows *
            (a if grad_weight else c).cols != nimg * K * per_image
            or not (a.stride == a.cols and c.stride == c.cols)):
        raise ShapeError(f"conv2d: dense operands of (N, K, {per_image}) and (K, {CK}) "
                         f"elements over {nimg} images, got {a.shape} and {c.shape}")
    for v, what in ((K, "rows"), (CK, "inner size"), (per_image, "cols")):
        _check_int(v, what)
    _scalars(flag, alpha, beta, &fa, &fb, &ia, &ib)
    _scalars(flag, alpha, 1, &f0, &f1, &i0, &i1)
    cp, ap = c.data(), a.data()
    cdef int lvl = _pg_level(level, flag)
    cdef char *wp = NULL if grad_weight or not (K and CK) else _pg_pack(lvl, flag, ap, CK, 1, K, CK)
    cdef Py_ssize_t *off = NULL
    cdef Py_ssize_t off_w = -1     # the panel width off was set for
    a.mem.pin()
    c.mem.pin()
    try:
        for n in range(nimg):
            p0 = 0
            while rc == 0 and p0 < per_image:
                p1 = min(per_image, p0 + b.width)
                w = p1 - p0
                mb.p = b.fill(n * per_image + p0, n * per_image + p1)
                mb.rows, mb.cols, mb.ld = CK, w, w
                if wp != NULL:          # c[n][:, p0:p1] = a @ panel, panel_gemm.h
                    if off_w != w:
                        off, off_w = _pg_rows(off, CK, w), w
                    mc.p = cp + (n * K * per_image + p0) * item
                    with nogil:
                        _pg_gemm(lvl, flag, wp, mb.p, off, w, mc.p, per_image, K, CK, fa, fb,
                                 nthreads)
                elif not grad_weight:   # c[n][:, p0:p1] = a @ panel
                    mb.trans = False
                    ma.p, ma.rows, ma.cols, ma.ld, ma.trans = ap, K, CK, CK, False
                    mc.p, mc.rows, mc.cols, mc.ld = cp + (n * K * per_image + p0) * item, K, w, \
                        per_image
                    with nogil:
                        rc = _product(flag, mc, ma, mb, K, w, CK, fa, fb, ia, ib, nthreads)
                else:                   # c += a[n][:, p0:p1] @ panel^T
                    mb.trans = True
                    ma.p, ma.rows, ma.cols, ma.ld, ma.trans = ap + (n * K * per_image + p0) * item, \
                        K, w, per_image, False
                    mc.p, mc.rows, mc.cols, mc.ld = cp, K, CK, CK
                    with nogil:
                        rc = _product(flag, mc, ma, mb, K, CK, w, fa, fb if first else f1,
                                      ia, ib if first else i1, nthreads)
                    first = False
                p0 = p1
        if grad_weight and first and rc == 0:   # no image: c = beta * c (a sum of nothing)
            mc.p, mc.rows, mc.cols, mc.ld = cp, K, CK, CK
            with nogil:
                rc = _product(flag, mc, ma, mb, K, CK, 0, fa, fb, ia, ib, nthreads)
    finally:
        ms_aligned_free(wp)
        free(off)
        a.mem.unpin()
        c.mem.unpin()
    _check_rc(rc, "conv2d", flag)


def gemm_tn_image(Tensor c, Tensor a, Tensor g, Py_ssize_t n, int nthreads=1,
                  str level="plain"):
    """``c (CK, P) = a (K, CK)^T @ g[n] (K, P)``: image ``n`` of a dense (N, K, ...) ``g``,
    a dense ``a`` of K rows and a dense 2-D ``c`` (conv2d's data gradient, one image's
    column matrix). K may be 0 (c = 0). panel_gemm.h's kernel at the SIMD ``level`` avx2
    or avx512 for float32 and float64 (``a``^T packed, ``g[n]`` read in place), else gemm's
    product on 2-D views of ``a`` and of ``g[n]`` (views of their memory: pinned as
    theirs)."""
    cdef Py_ssize_t K = a.shape[0], CK = c.rows, P = c.cols
    if a.type_flag != c.type_flag or g.type_flag != c.type_flag:
        raise DTypeError(f"conv2d_grad_data: tensors of dtypes {_NAMES[a.type_flag]}, "
                         f"{_NAMES[g.type_flag]} and {_NAMES[c.type_flag]}")
    if (a.rows * a.cols != K * CK or g.rows * g.cols < (n + 1) * K * P or n < 0
            or a.stride != a.cols
            or c.stride != P or g.stride != g.cols):
        raise ShapeError(f"conv2d_grad_data: dense ({K}, {CK}), (N, {K}, {P}) and ({CK}, {P}) "
                         f"tensors, got {a.shape}, {g.shape} and {c.shape}")
    cdef int lvl = _pg_level(level, c.type_flag) if K and CK and P else 0
    cdef char *wp
    cdef char *gp
    cdef char *cp
    cdef Py_ssize_t *off
    if lvl:
        gp, cp = g.data() + n * K * P * c.itemsize, c.data()
        off = _pg_rows(NULL, K, P)
        wp = NULL
        try:
            wp = _pg_pack(lvl, c.type_flag, a.data(), 1, CK, CK, K)   # a^T: (CK x K)
            g.mem.pin()
            c.mem.pin()
            try:
                with nogil:
                    _pg_gemm(lvl, c.type_flag, wp, gp, off, P, cp, P, CK, K, 1, 0, nthreads)
            finally:
                g.mem.unpin()
                c.mem.unpin()
        finally:
            ms_aligned_free(wp)
            free(off)
        return
    gemm(c, a._view(Shape(K, CK), a.offset, CK), True,
         g._view(Shape(K, P), g.offset + n * K * P * c.itemsize, P), False, 1, 0, nthreads)


def conv_direct(Tensor y, Tensor x, Tensor w, Py_ssize_t py, Py_ssize_t px, bint grad_data,
                alpha, beta, int nthreads=1, str level="plain", Py_ssize_t stride=1):
    """A convolution read straight from each padded image (panel_gemm.h ms_pg_conv: no
    column matrix, not even a panel of it), for float32 and float64 at the SIMD ``level``
    avx2 (with FMA) or avx512. False, having done nothing, at other levels and dtypes, and
    at a stride above 1 where the plan keeps im2col's panels (ms_pg_conv_plan_for) or for
    the data gradient. The caller checked the shapes and that ``y`` shares no memory with
    ``x`` or ``w``; ``y``'s rows may be pitched, ``x``'s too.

    forward:   y (N, K, oh, ow) = alpha * conv(pad(x (N, C, H, W), py, px), w (K, C, kh, kw),
               stride) + beta * y: each output adds its products in (c, ky, kx) order, as
               the panels of im2col do (conv_panels): the same bits.
    grad_data: y (N, C, H, W) = alpha * (the data gradient of that forward, x its gradient
               (N, K, oh, ow)) + beta * y, itself a forward convolution of x padded by
               (kh - 1 - py, kw - 1 - px) with w's channels swapped and taps flipped;
               each output adds its products in (k, ky, kx) order."""
    cdef int flag = y.type_flag
    cdef int lvl = _pg_level(level, flag)
    if lvl == 0 or x.type_flag != flag or w.type_flag != flag:
        return False
    cdef Py_ssize_t K = w.shape[0], C = w.shape[1], kh = w.shape[2], kw = w.shape[3]
    cdef Py_ssize_t N = x.shape[0], H = x.shape[2], W = x.shape[3], item = y.itemsize
    cdef Py_ssize_t KO = C if grad_data else K      # output channels
    cdef Py_ssize_t CI = K if grad_data else C      # input channels
    cdef Py_ssize_t CK = CI * kh * kw, Hp = H + 2 * py, Wp = W + 2 * px
    nthreads = max(1, nthreads)
    cdef ms_pg_conv_plan pl
    cdef bint finite
    cdef Py_ssize_t st = max(1, stride), oh = (Hp - kh) // st + 1, ow = (Wp - kw) // st + 1
    if (w.stride != w.cols or x.shape[1] != CI or py < 0 or px < 0 or stride < 1
            or (grad_data and stride != 1) or tuple(y.shape) != (N, KO, oh, ow)):
        raise ShapeError(f"conv_direct: data {x.shape}, weight {w.shape} (pad {py}, {px}, "
                         f"stride {stride}) into {y.shape}")
    ms_pg_conv_plan_for(lvl, item, KO, CK, N, oh, ow, Wp, stride, CI * Hp * Wp, nthreads, &pl)
    if stride != 1 and not pl.by_channels:
        return False
    cdef double fa, fb
    cdef uint64_t ia, ib
    _scalars(flag, alpha, beta, &fa, &fb, &ia, &ib)
    cdef char *wsrc = w.data()
    cdef char *xs
    cdef char *ys
    cdef char *wt = NULL
    cdef char *wp = NULL
    cdef char *xpad = NULL
    cdef char *scr = NULL
    cdef Py_ssize_t *off = NULL
    cdef Py_ssize_t *pix = NULL
    try:
        if grad_data:   # w' (C x (K, ky, kx)): w[k, c, kh-1-ky, kw-1-kx]
            wt = <char *> malloc(max(1, KO * CK * item))
            if wt == NULL:
                raise MemoryError()
            # this form also multiplies w by grad's zero border, where col2im never does:
            # inf * 0 would be a NaN there
            if flag == MS_TYPEFLAG_FLOAT32:
                finite = _flip_taps(<float *> wt, <float *> wsrc, KO, CI, kh * kw)
            else:
                finite = _flip_taps(<double *> wt, <double *> wsrc, KO, CI, kh * kw)
            if not finite:
                return False
            wsrc = wt
        wp = _pg_pack(lvl, flag, wsrc, CK, 1, KO, CK, pl.pack_rows) if KO and CK else NULL
        off = <Py_ssize_t *> malloc(max(1, CK) * sizeof(Py_ssize_t))
        # (the borders stay 0)
        xpad = <char *> calloc(max(1, pl.nbuf * pl.group * CI * Hp * Wp), item)
        pix = <Py_ssize_t *> malloc(max(1, pl.npix) * sizeof(Py_ssize_t))
        scr = <char *> ms_aligned_malloc(max(1, pl.scratch) * item)
        if off == NULL or xpad == NULL or pix == NULL or scr == NULL:
            raise MemoryError()
        if KO and CK:
            xs, ys = x.data(), y.data()
            _pin3(x, w, y)   # the memory outlives a free_space or resize from another thread
            try:
                with nogil:
                    if flag == MS_TYPEFLAG_FLOAT32:
                        ms_pg_conv_f32(lvl, <float *> wp, KO, <float *> xs, N, CI, H, W,
                                       x.stride, py, px, kh, kw, stride, <float *> ys, y.stride,
                                       <float> fa, <float> fb, &pl, <float *> xpad, off, pix,
                                       <float *> scr, nthreads)
                    else:
                        ms_pg_conv_f64(lvl, <double *> wp, KO, <double *> xs, N, CI, H, W,
                                       x.stride, py, px, kh, kw, stride, <double *> ys,
                                       y.stride, fa, fb, &pl, <double *> xpad, off, pix,
                                       <double *> scr, nthreads)
            finally:
                _unpin3(x, w, y)
            return True
    finally:
        free(wt)
        ms_aligned_free(wp)
        free(xpad)
        free(off)
        free(pix)
        ms_aligned_free(scr)
    return False    # nothing to add up (no channel or tap): BLAS's product scales y


def conv_direct_wgroup(Py_ssize_t N, Py_ssize_t Hp, Py_ssize_t wrow):
    """Images conv_direct_grad_weight stacks in one buffer a pass (panel_gemm.h
    ms_pg_wgroup), for tests: N images padded to Hp rows of wrow."""
    return ms_pg_wgroup(N, Hp, wrow)


def conv_direct_plan(str level, Py_ssize_t item, Py_ssize_t K, Py_ssize_t CK, Py_ssize_t N,
                     Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t wrow, int nthreads=1,
                     Py_ssize_t stride=1, Py_ssize_t plane=0):
    """How conv_direct tiles a convolution (K output channels of oh x ow, CK taps each, from
    padded rows of wrow, at ``stride``, a padded image ``plane`` elements) at ``level``
    (panel_gemm.h ms_pg_conv_plan_for), for tests and docs: {"by_channels": ms_pg_ktile's
    tiles (pixels x channel vectors) rather than ms_pg_tile's, "group": images a padded
    buffer holds, "nbuf": buffers (one a thread where threads take whole buffers)}."""
    cdef ms_pg_conv_plan pl
    cdef int lvl = _pg_level(level, MS_TYPEFLAG_FLOAT32 if item == 4 else MS_TYPEFLAG_FLOAT64)
    if item != 4 and item != 8:
        raise ValueError(f"conv_direct_plan: item {item}: the direct kernels take float32 (4) "
                         f"or float64 (8)")
    if lvl == 0:
        raise ValueError(f"conv_direct_plan: level {level!r} has no direct kernels (avx2, avx512)")
    ms_pg_conv_plan_for(lvl, item, K, CK, N, oh, ow, wrow, stride, plane, max(1, nthreads), &pl)
    return {"by_channels": bool(pl.by_channels), "group": pl.group, "nbuf": pl.nbuf}


def conv_direct_grad_weight(Tensor dw, Tensor x, Tensor g, Py_ssize_t py, Py_ssize_t px,
                            alpha, beta, int nthreads=1, str level="plain"):
    """conv2d's weight gradient at stride 1, read straight from each padded image
    (panel_gemm.h ms_pg_convw: no column matrix, no panel), for float32 and float64 at the
    SIMD ``level`` avx2 (with FMA) or avx512; False, having done nothing, at other levels
    and dtypes. dw (K, C, kh, kw) dense = alpha * sum over images n and positions of
    g[n, k] (dense (N, K, oh, ow)) times pad(x (N, C, H, W), py, px) shifted by each tap,
    + beta * dw. Each element adds its products in (n, oy, ox) order, fused, from 0: the
    same bits at both levels and every thread count. The caller checked the shapes and
    that ``dw`` shares no memory with ``x`` or ``g``."""
    cdef int flag = dw.type_flag
    cdef int lvl = _pg_level(level, flag)
    if lvl == 0 or x.type_flag != flag or g.type_flag != flag:
        return False
    cdef Py_ssize_t K = dw.shape[0], C = dw.shape[1], kh = dw.shape[2], kw = dw.shape[3]
    cdef Py_ssize_t N = x.shape[0], H = x.shape[2], W = x.shape[3], item = dw.itemsize
    cdef Py_ssize_t Hp = H + 2 * py, Wp = W + 2 * px, oh = Hp - kh + 1, ow = Wp - kw + 1
    cdef Py_ssize_t CK = C * kh * kw, KP
    if (dw.stride != dw.cols or g.stride != g.cols or x.shape[1] != C or py < 0 or px < 0
            or tuple(g.shape) != (N, K, oh, ow)):
        raise ShapeError(f"conv_direct_grad_weight: data {x.shape} and gradient {g.shape} "
                         f"(pad {py}, {px}) into {dw.shape}")
    if N == 0 or K == 0 or CK == 0 or oh <= 0 or ow <= 0:
        return False    # a sum of nothing: BLAS's product scales dw
    nthreads = max(1, nthreads)
    KP = ms_pg_kpad(lvl, item, K)
    cdef Py_ssize_t G = ms_pg_wgroup(N, Hp, Wp)     # images a pass stacks
    cdef double fa, fb
    cdef uint64_t ia, ib
    _scalars(flag, alpha, beta, &fa, &fb, &ia, &ib)
    cdef char *xs = x.data()
    cdef char *gs = g.data()
    cdef char *ds = dw.data()
    cdef char *s = <char *> calloc(CK * KP, item)
    cdef char *xpad = <char *> calloc(G * C * Hp * Wp, item)    # borders stay 0
    cdef char *gt = <char *> calloc(G * Hp * Wp * KP, item)     # wrap-around columns stay 0
    cdef Py_ssize_t *off = <Py_ssize_t *> malloc(CK * sizeof(Py_ssize_t))
    cdef Py_ssize_t *qs = <Py_ssize_t *> malloc(G * oh * ow * sizeof(Py_ssize_t))
    try:
        if s == NULL or xpad == NULL or gt == NULL or off == NULL or qs == NULL:
            raise MemoryError()
        _pin3(x, g, dw)   # the memory outlives a free_space or resize from another thread
        try:
            with nogil:
                if flag == MS_TYPEFLAG_FLOAT32:
                    ms_pg_convw_f32(lvl, <float *> xs, N, C, H, W, x.stride, py, px, kh, kw,
                                    <float *> gs, K, <float *> s, <float *> xpad,
                                    <float *> gt, off, qs, nthreads)
                    _store_sums(<float *> ds, <float *> s, K, CK, KP, <float> fa, <float> fb)
                else:
                    ms_pg_convw_f64(lvl, <double *> xs, N, C, H, W, x.stride, py, px, kh, kw,
                                    <double *> gs, K, <double *> s, <double *> xpad,
                                    <double *> gt, off, qs, nthreads)
                    _store_sums(<double *> ds, <double *> s, K, CK, KP, fa, fb)
        finally:
            _unpin3(x, g, dw)
    finally:
        free(s)
        free(xpad)
        free(gt)
        free(off)
        free(qs)
    return True


cdef bint _flip_taps(floating *dst, const floating *src, Py_ssize_t KO, Py_ssize_t CI,
                     Py_ssize_t taps) noexcept nogil:
    """dst (KO x (CI, taps)) = src (CI, KO, taps) with each filter's taps reversed (the
    data gradient's weight); whether every value is finite."""
    cdef Py_ssize_t m, j, i
    cdef const floating *f
    cdef floating v
    cdef bint finite = True
    for m in range(KO):
        for j in range(CI):
            f = src + (j * KO + m) * taps + taps - 1
            for i in range(taps):
                v = f[-i]
                if not isfinite(v):
                    finite = False
                dst[(m * CI + j) * taps + i] = v
    return finite


cdef void _store_sums(floating *dw, floating *s, Py_ssize_t K, Py_ssize_t CK, Py_ssize_t KP,
                      floating alpha, floating beta) noexcept nogil:
    """dw (K x CK) = alpha * s^T + beta * dw, s's rows (taps) KP apart, each element as the
    kernels store it (beta 0: dw not read). In bands of 16 filters: a line of s a tap, the
    band's rows of dw written side by side (one filter at a time read s a line an element:
    8 of 125 ms for 512 x 512 x 3 x 3 filters)."""
    cdef Py_ssize_t k, j, k0, k1
    cdef floating v
    for k0 in range(0, K, 16):
        k1 = min(K, k0 + 16)
        for j in range(CK):
            for k in range(k0, k1):
                v = s[j * KP + k]
                if alpha != 1:
                    v = alpha * v
                if beta != 0:
                    v = v + beta * dw[k * CK + j]
                dw[k * CK + j] = v


def product(dst, exp, tuple sign_beta, int nthreads):
    """``dst <saver> exp`` for a DotExp or BatchDotExp of two tensors (mshadow/dot.py),
    ``sign_beta`` the saver's (sign of alpha, beta): True when done; False, having done
    nothing, when ``dst`` is not a CPU tensor of the product's dtype and shape (dot.py then
    raises the error that says which)."""
    return _product_of(dst, <ProductExp?> exp, sign_beta, nthreads) == 1


cdef int _product_of(object dst, ProductExp e, tuple sign_beta, int nthreads) except -1:
    """product's work: 1 when stored, 0 when refused."""
    if not isinstance(dst, Tensor):
        return 0
    cdef Tensor d = <Tensor> dst, a = e.lhs, b = e.rhs
    if (d.type_flag != a.type_flag or d.device is not _CPU or a.device is not _CPU
            or d.shape != e.shape):
        return 0
    key = e.key
    if not isinstance(key, tuple) or not len(<tuple> key):
        return 0
    alpha = sign_beta[0] * e.scale
    if (<tuple> key)[0] == "dot":        # Product's kind, as engine.assign dispatches on it
        _gemm(d, a, e.ltrans, b, e.rtrans, alpha, sign_beta[1], nthreads)
    else:
        batch_gemm(d, a, e.ltrans, b, e.rtrans, alpha, sign_beta[1], nthreads)
    return 1


# saver -> its (sign of alpha, beta) (mshadow's Saver::AlphaBLAS / BetaBLAS)
cdef dict _SIGN_BETA = SAVER_BLAS


def assign_product(dst, exp, str saver, int nthreads):
    """The compiled per-statement path of ``dst <saver> dot(a, b)`` (the core's entry for
    the kComplex kinds "dot" and "batch_dot", installed by dot.py): True when stored; False,
    having done nothing, for what dot._eval takes (a saver with no BLAS form, an expression
    operand, a destination that is not a CPU tensor of the product's dtype and shape)."""
    sign_beta = _SIGN_BETA.get(saver)
    cdef ProductExp e = <ProductExp?> exp
    if sign_beta is None or not (isinstance(e.lhs, Tensor) and isinstance(e.rhs, Tensor)):
        return False
    return _product_of(dst, e, sign_beta, nthreads) == 1


def batch_gemm(Tensor c, Tensor a, bint ta, Tensor b, bint tb, alpha, beta, int nthreads=1):
    """``c[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i]`` for every i of 3-D tensors."""
    cdef Mat mc, ma, mb
    cdef Py_ssize_t m, n, k, k2, nb, sa, sb, sc
    cdef int flag = c.type_flag, rc = 0
    cdef Py_ssize_t item = c.itemsize
    cdef double fa, fb
    cdef uint64_t ia, ib
    if a.type_flag != flag or b.type_flag != flag:
        raise DTypeError(f"batch_dot: operands of dtypes {_NAMES[a.type_flag]} and "
                         f"{_NAMES[b.type_flag]} into {_NAMES[flag]}")
    if len(a.shape) != 3 or len(b.shape) != 3 or len(c.shape) != 3:
        raise ShapeError(f"BatchGEMM: expects 3-D tensors, got {a.shape}, {b.shape} -> {c.shape}")
    if c.readonly:
        raise ValueError("assignment destination is read-only")
    nb = c.shape[0]
    if a.shape[0] != nb or b.shape[0] != nb:
        raise ShapeError(f"BatchGEMM: batchsize must be equal. ({a.shape[0]}, {b.shape[0]}, "
                         f"{nb})")
    ma.rows, ma.cols, ma.ld, ma.trans = a.shape[1], a.shape[2], a.stride, ta
    mb.rows, mb.cols, mb.ld, mb.trans = b.shape[1], b.shape[2], b.stride, tb
    mc.rows, mc.cols, mc.ld = c.shape[1], c.shape[2], c.stride
    m, k = (ma.cols, ma.rows) if ta else (ma.rows, ma.cols)
    k2, n = (mb.cols, mb.rows) if tb else (mb.rows, mb.cols)
    if k != k2 or mc.rows != m or mc.cols != n:
        raise ShapeError(f"BatchGEMM: matrix shape mismatch: ({m}, {k}) x ({k2}, {n}) into "
                         f"{tuple(c.shape)[1:]}")
    for v, what in ((m, "rows"), (n, "cols"), (k, "inner size"),
                    (ma.ld, "lda"), (mb.ld, "ldb"), (mc.ld, "ldc")):
        _check_int(v, what)
    ma.p, mb.p, mc.p = a.data(), b.data(), c.data()
    # elements from one matrix of the batch to the next
    sa, sb, sc = ma.rows * ma.ld, mb.rows * mb.ld, mc.rows * mc.ld
    _scalars(flag, alpha, beta, &fa, &fb, &ia, &ib)
    _pin3(a, b, c)
    try:
        _batch_run(&mc, &ma, &mb, nb, sa, sb, sc, item, m, n, k, fa, fb, ia, ib, nthreads, flag,
                   &rc)
    finally:
        _unpin3(a, b, c)
    _check_rc(rc, "batch_dot", flag)


cdef void _pin3(Tensor a, Tensor b, Tensor c):
    a.mem.pin()
    b.mem.pin()
    c.mem.pin()


cdef void _unpin3(Tensor a, Tensor b, Tensor c):
    a.mem.unpin()
    b.mem.unpin()
    c.mem.unpin()


cdef void _batch_run(Mat *pc, Mat *pa, Mat *pb, Py_ssize_t nb, Py_ssize_t sa, Py_ssize_t sb,
                     Py_ssize_t sc, Py_ssize_t item, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                     double fa, double fb, uint64_t ia, uint64_t ib, int nthreads, int flag,
                     int *prc) noexcept:
    cdef Mat mc = pc[0], ma = pa[0], mb = pb[0]
    cdef char *abuf = NULL
    cdef char *bbuf = NULL
    cdef char *a0
    cdef char *b0
    cdef char *c0
    cdef Py_ssize_t i
    cdef int rc = 0
    with nogil:
        if _overlap(mc.p, nb * mc.rows, mc.cols, mc.ld, ma.p, nb * ma.rows, ma.cols, ma.ld, item):
            rc = _snapshot(&ma, nb, sa, item, &abuf)
            sa = ma.rows * ma.ld
        if rc == 0 and _overlap(mc.p, nb * mc.rows, mc.cols, mc.ld,
                                mb.p, nb * mb.rows, mb.cols, mb.ld, item):
            rc = _snapshot(&mb, nb, sb, item, &bbuf)
            sb = mb.rows * mb.ld
        a0, b0, c0 = ma.p, mb.p, mc.p
        i = 0
        while rc == 0 and i < nb:
            ma.p, mb.p, mc.p = a0 + i * sa * item, b0 + i * sb * item, c0 + i * sc * item
            rc = _product(flag, mc, ma, mb, m, n, k, fa, fb, ia, ib, nthreads)
            i += 1
        free(abuf)
        free(bbuf)
    prc[0] = rc
