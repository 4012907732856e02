# The CPU MapPlan: binds a compiled Program to pointers and scalars and runs it with no GIL
# (included by _core.pyx). Knows nothing about expression classes: it gets a Program, the
# destination, the leaf tensors and the scalar values, in the order the program expects.

import os
import warnings
from libc.stdlib cimport malloc, free
from libc.stdint cimport int8_t, uint8_t, int32_t, int64_t, uint16_t
from cpython.ref cimport PyObject


cdef extern from "numpy/ndarraytypes.h":
    ctypedef Py_ssize_t npy_intp

cdef extern from "mshadow/kernels_gen.h":
    ctypedef void (*ms_loop_fn)(char **, const npy_intp *, const npy_intp *, void *) noexcept nogil
    ctypedef struct ms_kernel_entry:
        const char *name
        ms_loop_fn fn
    const ms_kernel_entry ms_kernel_table[]
    int ms_isa_level
    enum:
        MS_CHAIN_MAX
    ctypedef struct ms_chain:
        int nin
        int nstep
        int start_scalar
        int code[8]
        int opd[8]
        int scalar[8]
        int fetch_start
        int fetch[8]
    int ms_detect_isa() nogil
    int MS_X86
    const char *MS_KERNELS_FINGERPRINT
    ctypedef struct ms_chain_step:
        const char *op
        int swap
        int scalar
    const ms_chain_step ms_chain_step_table[]
    const ms_kernel_entry ms_reader_table[]

cdef extern from "mshadow/gather.h":
    ctypedef struct ms_gather:
        const char *src[3]
        npy_intp rowstep[3]
        npy_intp colstep[3]
        int code[3]
        npy_intp p[12]
    int MS_GATHER_PARAMS


cdef extern from "mshadow/plan_exec.h":
    enum:
        MS_OPD_REG, MS_OPD_LEAF, MS_OPD_SCALAR
    enum:
        MS_RUN_NOMEM, MS_RUN_IDIV0, MS_RUN_GATHER_OOB
    ctypedef struct ms_inst:
        ms_loop_fn fn
        void *data
        int nin
        int gemm
        int gather
        int kind[10]
        int idx[10]
        npy_intp step[10]
    ctypedef struct ms_leaf:
        char *ptr
        npy_intp rowstep, colstep
        npy_intp inner
        int nmap
        npy_intp mdiv[7]
        npy_intp mmod[7]
        npy_intp mstride[7]
        const ms_gather *gather
        int per_block
    ctypedef struct ms_program:
        int ninst
        const ms_inst *inst
        const ms_leaf *leaf
        char *scalars
        int nreg
        npy_intp reg_bytes
        npy_intp rows, cols, block
        int nthreads
        npy_intp gB, gM, gR
        npy_intp y0
        npy_intp x0
    int MS_VIEW_MAXDIM
    int ms_run_program(const ms_program *p) nogil
    int ms_max_threads() nogil
    int ms_have_openmp() nogil


DEF BLOCK = 512            # elements per block: 8 registers of doubles stay in a 32 KiB L1
DEF RBLOCK = 4096          # a reduction's block: one partial sum each (fewer dispatches)
DEF MIN_PER_THREAD = 32768 # below this many elements a thread costs more than it saves

cdef dict _KERNELS = {}
cdef int _k = 0
while ms_kernel_table[_k].name != NULL:
    _KERNELS[ms_kernel_table[_k].name.decode()] = <size_t> ms_kernel_table[_k].fn
    _k += 1
# gather kernels take an ms_gather, not data pointers: they are known by their tables
cdef set _GATHER_KERNELS = set()


cdef _load_gathers(const ms_kernel_entry *table):
    cdef int k = 0
    while table[k].name != NULL:
        _KERNELS[table[k].name.decode()] = <size_t> table[k].fn
        _GATHER_KERNELS.add(table[k].name.decode())
        k += 1


_load_gathers(ms_reader_table)

_ISA_NAMES = ("plain", "sse2", "avx2", "avx512")

from .codegen_cpu import fingerprint as _fingerprint
if _fingerprint() != MS_KERNELS_FINGERPRINT.decode():
    raise BuildMismatchError(
        f"mshadow's compiled kernels were generated from other versions of ops_table.py, "
        f"vmath.py or codegen_cpu.py than the ones in {os.path.dirname(__file__)} "
        f"(fingerprint {MS_KERNELS_FINGERPRINT.decode()} built, {_fingerprint()} now): "
        f"rebuild the extension (pip install -e . or python setup.py build_ext --inplace)")

# fused-chain step codes, as the generated header numbers them
cdef dict _CHAIN_CODE = {}
_k = 0
while ms_chain_step_table[_k].op != NULL:
    _CHAIN_CODE[ms_chain_step_table[_k].op.decode(), bool(ms_chain_step_table[_k].swap),
                bool(ms_chain_step_table[_k].scalar)] = _k
    _k += 1
cdef int _detected_isa = ms_detect_isa()


def _initial_isa():
    """The detected level, lowered by MSHADOW_DISABLE_CPU_FEATURES=AVX512F,AVX2,SSE2."""
    level = _detected_isa
    off = {f.strip().upper() for f in os.environ.get("MSHADOW_DISABLE_CPU_FEATURES", "").split(",")}
    for name, lvl in (("AVX512F", 3), ("AVX2", 2), ("SSE2", 1)):
        if name in off and level >= lvl:
            level = lvl - 1
    return level


ms_isa_level = _initial_isa()


def simd_info():
    """(compiled levels, detected level, level in use) by name."""
    compiled = _ISA_NAMES if MS_X86 else _ISA_NAMES[:1]
    return {"compiled": compiled, "detected": _ISA_NAMES[_detected_isa],
            "active": _ISA_NAMES[ms_isa_level]}


def set_simd_level(level):
    """Use packets up to ``level`` ('plain', 'sse2', 'avx2', 'avx512'); never above the CPU's."""
    global ms_isa_level
    if level not in _ISA_NAMES:
        raise ValueError(f"unknown SIMD level {level!r} (expected one of {', '.join(_ISA_NAMES)})")
    lvl = _ISA_NAMES.index(level)
    if lvl > _detected_isa:
        raise ValueError(f"this CPU supports SIMD up to {_ISA_NAMES[_detected_isa]}, not {level}")
    ms_isa_level = lvl


cdef int _num_threads = ms_max_threads()


MAX_THREADS = 1024


def set_num_threads(n):
    """Threads used by one assignment (default: the cores OpenMP sees).

    Also caps the BLAS library's thread pool (through threadpoolctl, when installed), so
    the two pools never oversubscribe the cores together."""
    global _num_threads
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__} {n!r}") from None
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"set_num_threads: expected 1 <= n <= {MAX_THREADS}, got {n}")
    _num_threads = n
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=n, user_api="blas")


def get_num_threads():
    """Threads one assignment may use (1 in a build without OpenMP)."""
    return _num_threads if ms_have_openmp() else 1


def have_openmp():
    return bool(ms_have_openmp())


from .dtypes import DTYPES as _DTYPES
cdef dict _CODE_SIZE = {d.code: d.size for d in _DTYPES}
cdef dict _CODE_NUM = {d.code: d.flag for d in _DTYPES}


cdef class Plan:
    """A Program bound to kernel pointers: everything of an assignment but the data."""
    cdef ms_inst *inst
    cdef int ninst, nreg, nleaf, nscalar
    cdef readonly object program
    cdef int *scalar_arg        # slot -> index into the expression's scalars, or -1 (constant)
    cdef int *scalar_code       # slot -> storage type number
    cdef int *scalar_ccode      # slot -> compute type number
    cdef double *const_value
    cdef bint *leaf_t           # leaf (1-based; 0 is dst) read transposed
    cdef int *leaf_role         # index into _ROLES
    cdef int *leaf_param        # a 'view' leaf's last-axis kind: 0 unit, 1 zero, 2 other step
    cdef int dst_code
    cdef ms_chain *chains       # one per fused-chain instruction (their kernels' data)

    def __cinit__(self, program):
        self.program = program
        self.ninst = len(program.instrs)
        self.nreg = program.nreg
        self.nleaf = len(program.leaf_codes)
        self.nscalar = len(program.scalar_codes)
        self.inst = <ms_inst *> malloc(max(1, self.ninst) * sizeof(ms_inst))
        self.scalar_arg = <int *> malloc(max(1, self.nscalar) * sizeof(int))
        self.scalar_code = <int *> malloc(max(1, self.nscalar) * sizeof(int))
        self.scalar_ccode = <int *> malloc(max(1, self.nscalar) * sizeof(int))
        self.const_value = <double *> malloc(max(1, self.nscalar) * sizeof(double))
        self.leaf_t = <bint *> malloc((self.nleaf + 1) * sizeof(bint))
        self.leaf_role = <int *> malloc((self.nleaf + 1) * sizeof(int))
        self.leaf_param = <int *> malloc((self.nleaf + 1) * sizeof(int))
        if not (self.inst and self.scalar_arg and self.scalar_code and self.scalar_ccode
                and self.const_value and self.leaf_t and self.leaf_role and self.leaf_param):
            raise MemoryError()
        self.dst_code = _CODE_NUM[program.dst_code]
        self.leaf_t[0] = False
        self.leaf_role[0] = 0
        self.leaf_param[0] = 0
        for k, t in enumerate(program.leaf_transposed):
            self.leaf_t[k + 1] = t
            self.leaf_role[k + 1] = _ROLES.index(program.leaf_roles[k])
            self.leaf_param[k + 1] = program.leaf_params[k]
        consts = program.const_values
        arg = 0
        for s, (code, ccode) in enumerate(program.scalar_codes):
            self.scalar_code[s] = _CODE_NUM[code]
            self.scalar_ccode[s] = _CODE_NUM[ccode]
            if s in consts:
                self.scalar_arg[s] = -1
                self.const_value[s] = consts[s]
            else:
                self.scalar_arg[s] = arg
                arg += 1
        cdef ms_inst *ins
        cdef ms_chain *ch
        self.chains = <ms_chain *> malloc(max(1, self.ninst) * sizeof(ms_chain))
        if self.chains == NULL:
            raise MemoryError()
        for k, instr in enumerate(program.instrs):
            ins = &self.inst[k]
            if instr.kernel[0] in ("chain", "chain_sum"):
                ch = &self.chains[k]
                ch.nin = len(instr.ins)
                ch.nstep = len(instr.kernel[2])
                ch.start_scalar = _one_value_a_block(program, instr.ins[0])
                ch.fetch_start = instr.ins[0][0] == "leaf"
                for j, (op, swap, opd) in enumerate(instr.kernel[2]):
                    scalar = opd is not None and _one_value_a_block(program, instr.ins[opd])
                    ch.code[j] = _CHAIN_CODE[op, swap, scalar]
                    ch.opd[j] = 0 if opd is None else opd
                    ch.scalar[j] = scalar
                    ch.fetch[j] = opd is not None and instr.ins[opd][0] == "leaf"
                ins.fn = <ms_loop_fn> <size_t> _KERNELS[f"{instr.kernel[0]}_{instr.kernel[1]}"]
                ins.data = ch
            else:
                ins.fn = <ms_loop_fn> <size_t> _KERNELS[instr.kernel[1]]
                ins.data = NULL
            ins.nin = len(instr.ins)
            ins.gemm = instr.kernel[1].startswith("implicit_gemm")
            ins.gather = instr.kernel[1] in _GATHER_KERNELS
            for j, opd in enumerate(list(instr.ins) + [instr.out]):
                if opd[0] == "reg":
                    ins.kind[j] = MS_OPD_REG
                    ins.idx[j] = opd[1]
                    ins.step[j] = _CODE_SIZE[opd[2]]
                elif opd[0] == "leaf":
                    ins.kind[j] = MS_OPD_LEAF
                    ins.idx[j] = opd[1] + 1
                    ins.step[j] = 0
                elif opd[0] == "dst":
                    ins.kind[j] = MS_OPD_LEAF
                    ins.idx[j] = 0
                    ins.step[j] = 0
                else:
                    ins.kind[j] = MS_OPD_SCALAR
                    ins.idx[j] = opd[1]
                    ins.step[j] = 0

    def __dealloc__(self):
        free(self.inst)
        free(self.scalar_arg)
        free(self.scalar_code)
        free(self.scalar_ccode)
        free(self.const_value)
        free(self.leaf_t)
        free(self.leaf_role)
        free(self.leaf_param)
        free(self.chains)

    def disassemble(self):
        return self.program.disassemble()


_ROLES = ("map", "gemm_lhs", "gemm_rhs", "view", "gather")
DEF ROLE_MAP = 0
DEF ROLE_GEMM_LHS = 1
DEF ROLE_GEMM_RHS = 2
DEF ROLE_VIEW = 3
DEF ROLE_GATHER = 4


cpdef int view_step_kind(Py_ssize_t step, Py_ssize_t itemsize):
    """How a view's last axis is read: 0 contiguous, 1 one value (step 0), 2 other steps."""
    return 0 if step == itemsize else (1 if step == 0 else 2)


def _one_value_a_block(program, opd):
    """A scalar, or a view whose last axis has step 0: a block (one row) sees one value."""
    return opd[0] == "scalar" or (opd[0] == "leaf" and program.leaf_roles[opd[1]] == "view"
                                  and program.leaf_params[opd[1]] == 1)


cdef int _store_scalar(char *slot, int code, int ccode, object value) except -1:
    """Write ``value`` as the compute type, after rounding it to the storage type."""
    if code == 2:      # float16: what a half can hold, computed as float
        (<float *> slot)[0] = <float> np.float16(value)
    elif ccode == 0:
        (<float *> slot)[0] = <float> value
    elif ccode == 1:
        (<double *> slot)[0] = <double> value
    elif ccode == 3:
        (<uint8_t *> slot)[0] = <uint8_t> (<int64_t> value)
    elif ccode == 5:
        (<int8_t *> slot)[0] = <int8_t> (<int64_t> value)
    elif ccode == 4:
        (<int32_t *> slot)[0] = <int32_t> (<int64_t> value)
    else:
        (<int64_t *> slot)[0] = <int64_t> value
    return 0


cdef bint _overlaps(Tensor a, Tensor b) except -1:
    """Whether two tensors share any byte, whoever owns the memory: compare address ranges
    (numpy's may_share_memory), then, for pitched layouts, the elements (shares_memory)."""
    if a.rows == 0 or a.cols == 0 or b.rows == 0 or b.cols == 0:
        return False
    cdef size_t a0 = <size_t> a.data(), b0 = <size_t> b.data()
    cdef size_t a1 = a0 + <size_t> (((a.rows - 1) * a.stride + a.cols) * a.itemsize)
    cdef size_t b1 = b0 + <size_t> (((b.rows - 1) * b.stride + b.cols) * b.itemsize)
    if not (a0 < b1 and b0 < a1):
        return False
    if _dense(a) and _dense(b):
        return True
    return bool(np.shares_memory(a._export(), b._export()))


cdef bint _same_elements(Tensor a, Tensor b) except -1:
    """``a`` is read at exactly the positions ``b`` is written: an in-place element-wise op."""
    return (a.data() == b.data() and a.itemsize == b.itemsize
            and (a.stride == b.stride or a.rows <= 1))


cdef tuple _check_leaves(Plan plan, object shape, Py_ssize_t rows, Py_ssize_t cols,
                         tuple leaves, Tensor dst, bint banding=False):
    """Every leaf alive and of the evaluation's geometry (``shape``, flattened to rows x
    cols); returns (every leaf contiguous, some leaf reads ``dst`` at other positions)."""
    cdef Py_ssize_t nl = plan.nleaf
    if len(leaves) != nl:
        raise ValueError(f"plan expects {nl} leaves, got {len(leaves)}")
    cdef Tensor lf
    cdef Py_ssize_t k
    cdef bint contiguous = True     # every leaf read in place and contiguous
    cdef bint alias = False
    cdef Py_ssize_t rr, rc, inner = -1
    cdef ViewLeaf vl
    cdef GatherLeaf gl
    for k in range(nl):
        role = plan.leaf_role[k + 1]
        if role == ROLE_GATHER:
            gl = leaves[k]          # a typed assignment: anything else raises TypeError
            gl.check(True, banding)
            if gl.shape != shape:
                raise ShapeError(f"Assignment: {gl.name} of shape {gl.shape} does not "
                                 f"match target {shape}")
            contiguous = False
            for j, src in enumerate(gl.tensors):
                if not gl.banded[j] and dst is not None and _overlaps(<Tensor> src, dst):
                    alias = True
            if banding:   # an expression read band by band: what it reads
                for b in gl.bands:
                    e = (<Band> b).expr
                    _, sub_alias = _check_leaves((<Band> b).plan, e.shape, _prod(e.shape[:-1]),
                                                 e.shape[-1], e.leaves, dst, True)
                    alias = alias or sub_alias
            continue
        if role == ROLE_VIEW:
            vl = leaves[k]          # a typed assignment: anything else raises TypeError
            if vl.deferred is not None:
                _assign(vl.src, vl.deferred, "saveto")
            vl.data()
            if vl.shape != shape:
                raise ShapeError(f"Assignment: view of shape {vl.shape} does not match target "
                                 f"{shape}")
            if view_step_kind(vl.strides[-1], vl.src.itemsize) != plan.leaf_param[k + 1]:
                raise ShapeError("a view's last-axis step does not match its compiled plan")
            contiguous = False
            if dst is not None and _overlaps(vl.src, dst):
                alias = True
            continue
        lf = <Tensor> leaves[k]
        lf.data()
        rr, rc = (lf.cols, lf.rows) if plan.leaf_t[k + 1] else (lf.rows, lf.cols)
        if role == ROLE_GEMM_LHS:     # implicit_dot lhs: (dst rows, K)
            if rr != rows:
                raise ShapeError(f"implicit_dot: lhs of shape {lf.shape} gives {rr} rows, "
                                 f"target {shape} has {rows}")
            inner = rc
            contiguous = False
        elif role == ROLE_GEMM_RHS:   # implicit_dot rhs: (K, dst cols)
            if rc != cols or rr != inner:
                raise ShapeError(f"implicit_dot The matrix shape do  not match: rhs {lf.shape} "
                                 f"for K={inner} and target {shape}")
            contiguous = False
        elif rr != rows or rc != cols:
            raise ShapeError(f"Assignment: Shape of Tensors are not consistent with target, "
                             f"eshape: {lf.shape} dshape:{shape}")
        elif plan.leaf_t[k + 1] or not (lf.rows <= 1 or lf.stride == lf.cols):
            contiguous = False
        if dst is not None and _overlaps(lf, dst) and (role != ROLE_MAP or plan.leaf_t[k + 1]
                                                        or not _same_elements(lf, dst)):
            alias = True
    return contiguous, alias


def run_reduce(Plan plan, shape, tuple leaves, tuple scalars, bint by_rows=False):
    """Evaluate a reduction plan over an expression of ``shape``: returns the per-block
    partial results, in block order (row by row, blocks of RBLOCK elements along a row; one
    long row when every leaf is contiguous, unless ``by_rows``), as a 1-D array of the
    plan's compute type. With ``by_rows`` it has shape[:-1] x blocks-per-row entries."""
    shape = as_shape(shape)
    cdef Py_ssize_t rows = _prod(shape[:-1]), cols = shape[-1]
    contiguous, _ = _check_leaves(plan, shape, rows, cols, leaves, None)
    if by_rows:
        contiguous = False
    cdef Py_ssize_t nparts = (rows if not contiguous else 1) * (
        ((cols if not contiguous else rows * cols) + RBLOCK - 1) // RBLOCK)
    parts = np.zeros(max(nparts, 1), dtype=_NP_BY_CODE[plan.program.dst_code])
    _run(plan, None, leaves, scalars, contiguous, rows, cols, 0, 1, 1, None,
         <char *> cnp.PyArray_DATA(parts), parts.itemsize)
    return parts[:nparts]


def evaluate_rows(expr, Plan plan, Py_ssize_t r0, Py_ssize_t r1, Tensor scratch,
                  bint check=True):
    """Rows [r0, r1) of the 2-D flattening of ``expr`` (compiled as ``plan`` for saveto)
    into the first r1 - r0 rows of ``scratch`` (2-D, the expression's columns, fresh
    memory): a chunk of a source that is reduced a chunk at a time (an arg-reduction).
    Banded gathers inside it evaluate only what these rows read. ``check`` runs the
    leaves' checks, which also evaluate any temporary the expression reads: once, for the
    first chunk (the caller runs the chunks back to back)."""
    shape = as_shape(expr.shape)
    cdef Py_ssize_t rows = _prod(shape[:-1]), cols = shape[-1]
    if not (0 <= r0 <= r1 <= rows) or scratch.cols != cols or scratch.rows < r1 - r0:
        raise ValueError(f"evaluate_rows: rows [{r0}, {r1}) of {shape} into {scratch.shape}")
    with _BandScope(plan, expr.leaves) as scope:
        if check:
            _check_leaves(plan, shape, rows, cols, expr.leaves, None, scope.banding)
        if r1 == r0:
            return
        held = _pin_all(plan, scratch, expr.leaves)
        try:
            _eval_box(plan, expr, scratch, r0, r1, 0, cols, scope.banding)
        finally:
            for m in held:
                (<Allocation> m).unpin()


def run_accumulate(Plan plan, shape, tuple leaves, tuple scalars, Py_ssize_t axis,
                   Py_ssize_t rows_per_group, init=0):
    """Reduce an expression of ``shape`` over ``axis`` (not the last), in one pass, with
    ``plan`` compiled for an accumulating saver (plusto, maxto, minto) into its compute type.

    Rows of ``shape`` flattened to (A, B, M) x cols, B the reduced axis: each group of
    ``rows_per_group`` consecutive b of one (a, m) is added row by row, in order, into an
    accumulator row of its own (one thread a group). Returns the accumulators, ``init`` to
    start, as an (A, M, ceil(B / rows_per_group), cols) array of the compute type."""
    shape = as_shape(shape)
    nd = len(shape)
    if not 0 <= axis < nd - 1:
        raise ValueError(f"run_accumulate: axis {axis} must be a leading axis of {shape}")
    cdef Py_ssize_t A = _prod(shape[:axis]), B = shape[axis], M = _prod(shape[axis + 1:nd - 1])
    cdef Py_ssize_t cols = shape[nd - 1], R = max(1, min(rows_per_group, B))
    cdef Py_ssize_t nch = (B + R - 1) // R if B else 0
    acc = np.full((A, M, nch, cols), init, dtype=_NP_BY_CODE[plan.program.dst_code])
    _check_leaves(plan, shape, A * B * M, cols, leaves, None)
    if acc.size:
        _run(plan, None, leaves, scalars, False, A * B * M, cols, B, M, R, None,
             <char *> cnp.PyArray_DATA(acc), acc.itemsize)
    return acc


def run_plan(Plan plan, Tensor dst, tuple leaves, tuple scalars):
    """Evaluate ``plan`` into ``dst``: leaf k of the program is ``leaves[k]``.

    Returns False, having stored nothing, when the expression reads ``dst`` at other
    positions than it writes (``x[:] = x.T``): the engine then evaluates it through a
    temporary (run_through_temporary), with plans it owns."""
    if dst.readonly:
        raise ValueError("assignment destination is read-only")
    dst.data()
    if not _banded(plan, leaves):
        contiguous, alias = _check_leaves(plan, dst.shape, dst.rows, dst.cols, leaves, dst)
        if alias:
            return False
        _run(plan, dst, leaves, scalars, contiguous and _dense(dst))
        return True
    with _BandScope(plan, leaves) as scope:   # from the checks (which fill scratch) on
        contiguous, alias = _check_leaves(plan, dst.shape, dst.rows, dst.cols, leaves, dst,
                                          scope.banding)
        if alias:
            return False
        _run_any(plan, dst, leaves, scalars, contiguous and _dense(dst), scope.banding)
    return True


def run_through_temporary(Plan to_tmp, Plan from_tmp, Tensor dst, tuple leaves,
                          tuple scalars):
    """``to_tmp`` (the expression, saveto) into a new temporary shaped like ``dst``, then
    ``from_tmp`` (the temporary as a leaf, with the assignment's saver) into ``dst``."""
    if dst.readonly:
        raise ValueError("assignment destination is read-only")
    dst.data()
    tmp = TensorContainer(dst.shape, init=None, pad=False,
                          dtype=_NP_BY_CODE[to_tmp.program.dst_code])
    with _BandScope(to_tmp, leaves) as scope:
        contiguous, _ = _check_leaves(to_tmp, dst.shape, dst.rows, dst.cols, leaves, None,
                                      scope.banding)
        _run_any(to_tmp, tmp, leaves, scalars, contiguous, scope.banding)
    _run(from_tmp, dst, (tmp,), (), _dense(dst))


DEF BAND_ELEMS = 262144  # elements of a band, and of each gather's scratch (1 MiB float:
                         # fewer, larger bands: each run is a parallel region of its own)


cdef list _banded(Plan plan, tuple leaves):
    """The Bands of every gather leaf of ``plan``."""
    cdef list out = []
    for k in range(plan.nleaf):
        if plan.leaf_role[k + 1] == ROLE_GATHER:
            out.extend((<GatherLeaf> leaves[k]).bands)
    return out


cdef bint _dense_maps(Plan plan, tuple leaves):
    """Every leaf a dense tensor read in place, untransposed: a band of rows is then one
    contiguous run of elements."""
    for k in range(plan.nleaf):
        if plan.leaf_role[k + 1] != ROLE_MAP or plan.leaf_t[k + 1]:
            return False
        if not _dense(<Tensor> leaves[k]):
            return False
    return True


# A Band's scratch holds one band's rows at a time: two threads running the same expression
# band by band would fill it for different bands. A run with bands takes this lock from its
# checks to its last band (re-entrant: a band's own expression may run banded inside).
_BAND_LOCK = threading.RLock()


cdef _collect_bands(Plan plan, tuple leaves, list out):
    cdef Band b
    for b in _banded(plan, leaves):
        out.append(id(b))
        _collect_bands(b.plan, b.expr.leaves, out)


cdef int _whole_depth = 0   # > 0: a run (this thread's: _BAND_LOCK is held) evaluates every
                            # banded source whole, nested assignments included


cdef bint _bands_on(Plan plan, tuple leaves):
    """With _BAND_LOCK held: whether this run bands. Not when a Band occurs twice in the
    plan's tree of banded sources (``a + pool(a)``, ``a`` banded: one scratch cannot hold
    two levels' bands, and the whole ``a`` filled for one level must stay whole while the
    other level's source is evaluated), nor inside such a run: its banded sources are
    then evaluated whole (until its _BandScope ends)."""
    global _whole_depth
    cdef list ids = []
    if _whole_depth == 0:
        _collect_bands(plan, leaves, ids)
        if len(ids) == len(set(ids)):
            return True
    _whole_depth += 1
    return False


cdef class _BandScope:
    """``with _BandScope(plan, leaves) as scope``: _BAND_LOCK held, and ``scope.banding``
    (_bands_on) in force, until the block ends."""
    cdef Plan plan
    cdef tuple leaves
    cdef readonly bint banding

    def __cinit__(self, Plan plan, tuple leaves):
        self.plan, self.leaves = plan, leaves

    def __enter__(self):
        _BAND_LOCK.acquire()
        self.banding = _bands_on(self.plan, self.leaves)
        return self

    def __exit__(self, *exc):
        global _whole_depth
        if not self.banding:
            _whole_depth -= 1
        _BAND_LOCK.release()
        return False


cdef _run_any(Plan plan, Tensor dst, tuple leaves, tuple scalars, bint contiguous,
              bint banding):
    """``_run``, or band by band when a gather reads an expression source that way (the
    leaves were checked with ``banding``)."""
    if not banding or not _banded(plan, leaves):
        _run(plan, dst, leaves, scalars, contiguous)
        return
    held = _pin_all(plan, dst, leaves)   # alive across every band, whoever frees meanwhile
    try:
        _run_banded(plan, dst, leaves, scalars, 0, dst.rows, 0)
    finally:
        for m in held:
            (<Allocation> m).unpin()


cdef _run_banded(Plan plan, Tensor dst, tuple leaves, tuple scalars, Py_ssize_t y_start,
                 Py_ssize_t y_end, Py_ssize_t dst_row0, Py_ssize_t x_start=0,
                 Py_ssize_t x_end=-1, Py_ssize_t dst_col0=0):
    """Rows [y_start, y_end) (and columns [x_start, x_end), x_end >= 0) of ``plan`` a band
    at a time: for each band, the source rows (or box) each banded gather reads are
    evaluated into its cache-sized scratch, then the band runs. A source's own banded
    gathers recurse. A gather banded by output columns (im2col) makes the bands column
    ranges of these rows instead. dst's first row and column are dst_row0, dst_col0;
    without ``x_end`` the columns are all of dst's (x_start is then 0)."""
    cdef list bands = _banded(plan, leaves)
    cdef list by_cols = [b for b in bands if (<Band> b).over_cols]
    cdef Band b
    cdef Py_ssize_t cols, band, y0, y1, elems
    if x_end < 0:
        x_start, x_end = 0, dst.cols + dst_col0
    cols = x_end - x_start
    if by_cols:
        _run_column_bands(plan, dst, leaves, scalars, y_start, y_end, dst_row0, x_start, x_end,
                          dst_col0, bands, by_cols)
        return
    band = max(1, BAND_ELEMS // max(cols, 1))
    for b in bands:   # fewer rows a band when a reader reads more source than it writes
        y1 = min(y_end, y_start + band)
        elems = b.box_elems(y_start, y1)
        if elems > BAND_ELEMS and y1 > y_start:
            band = max(1, min(band, BAND_ELEMS * (y1 - y_start) // elems))
    y0 = y_start
    while y0 < y_end:
        y1 = _widen(bands, y0, _capped(bands, y0, min(y_end, y0 + band)),
                    min(y_end, y0 + 2 * band))
        for b in bands:
            _fill_band(b, y0, y1)
        _run(plan, dst, leaves, scalars, False, -1, -1, 0, 1, 1, None, NULL, 0, y0, y1,
             dst_row0, x_start, x_end, dst_col0)
        y0 = y1


cdef Py_ssize_t _capped(list bands, Py_ssize_t y0, Py_ssize_t y1):
    """The last row, at most ``y1``, of a band from ``y0`` whose sources' boxes hold at most
    BAND_ELEMS elements each (or what one row reads): a band that would cross into a
    source range that reads much more (col2im's next image: every channel) stops before."""
    cdef Band b
    limits = [max(BAND_ELEMS, (<Band> b).box_elems(y0, y0 + 1)) for b in bands]
    return _last_row(bands, y0, y0 + 1, y1, limits, True)


cdef Py_ssize_t _widen(list bands, Py_ssize_t y0, Py_ssize_t y1, Py_ssize_t most):
    """The last row, up to ``most``, of a band from ``y0`` that reads no source row or
    column more than [y0, y1) does: a band then ends where the source's rows do (a whole
    channel of col2im) and the next band recomputes none of them."""
    cdef Band b
    return _last_row(bands, y0, y1, most, [(<Band> b).box(y0, y1) for b in bands], False)


cdef bint _reads_within(list bands, Py_ssize_t y0, Py_ssize_t y, list refs, bint by_size):
    """Whether a band [y0, y) reads, for every source k, a box of at most refs[k] elements
    (``by_size``) or the very box refs[k]."""
    cdef Py_ssize_t k
    for k in range(len(bands)):
        if by_size:
            if (<Band> bands[k]).box_elems(y0, y) > refs[k]:
                return False
        elif (<Band> bands[k]).box(y0, y) != refs[k]:
            return False
    return True


cdef Py_ssize_t _last_row(list bands, Py_ssize_t y0, Py_ssize_t lo, Py_ssize_t hi,
                          list refs, bint by_size):
    """The largest y in [lo, hi] with _reads_within(y), which holds at lo and, once false,
    stays false. The common cases cost one or two boxes a source: all of [lo, hi] holds,
    or lo + 1 already does not."""
    cdef Py_ssize_t mid
    if _reads_within(bands, y0, hi, refs, by_size):
        return hi
    if lo + 1 >= hi or not _reads_within(bands, y0, lo + 1, refs, by_size):
        return lo
    lo += 1
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _reads_within(bands, y0, mid, refs, by_size):
            lo = mid
        else:
            hi = mid - 1
    return lo


cdef _run_column_bands(Plan plan, Tensor dst, tuple leaves, tuple scalars, Py_ssize_t y_start,
                       Py_ssize_t y_end, Py_ssize_t dst_row0, Py_ssize_t x_start,
                       Py_ssize_t x_end, Py_ssize_t dst_col0, list bands, list by_cols):
    """Rows [y_start, y_end) of ``plan`` a range of columns at a time. Each band is widened
    to every column that reads no more source rows (whole images of im2col: each image's
    source is evaluated once); the sources banded by rows take these rows whole."""
    cdef Band b
    cdef Py_ssize_t x0, x1
    cdef Py_ssize_t width = max(1, BAND_ELEMS // max(y_end - y_start, 1))
    for b in bands:
        if not b.over_cols:
            _fill_band(b, y_start, y_end)
    x0 = x_start
    while x0 < x_end:
        x1 = _widen(by_cols, x0, _capped(by_cols, x0, min(x_end, x0 + width)), x_end)
        for b in by_cols:
            _fill_band(b, x0, x1)
        _run(plan, dst, leaves, scalars, False, -1, -1, 0, 1, 1, None, NULL, 0, y_start, y_end,
             dst_row0, x0, x1, dst_col0)
        x0 = x1


cdef _fill_band(Band b, Py_ssize_t a0, Py_ssize_t a1):
    """The source rows (or box) that output rows (or columns) [a0, a1) read, evaluated
    into the band's scratch."""
    r0, r1, c0, c1 = b.reserve(a0, a1)
    _eval_box(b.plan, b.expr, b.scratch, r0, r1, c0, c1, True)


cdef _eval_box(Plan plan, expr, Tensor scratch, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t c0,
               Py_ssize_t c1, bint banding):
    """Rows [r0, r1) and columns [c0, c1) of the 2-D flattening of ``expr`` (compiled as
    ``plan``) into ``scratch``, whose first row and column are r0 and c0; its own banded
    gathers band too when ``banding``."""
    if r1 <= r0 or c1 <= c0:
        return
    if banding and _banded(plan, expr.leaves):
        _run_banded(plan, scratch, expr.leaves, expr.scalars, r0, r1, r0, c0, c1, c0)
    else:
        _run(plan, scratch, expr.leaves, expr.scalars,
             c0 == 0 and c1 == expr.shape[-1] and _dense_maps(plan, expr.leaves),
             -1, -1, 0, 1, 1, None, NULL, 0, r0, r1, r0, c0, c1, c0)


cdef inline bint _dense(Tensor t):
    return t.rows <= 1 or t.stride == t.cols


cdef int _bind_view(ms_leaf *L, ViewLeaf v) except -1:
    """Row y of the view starts at the sum over leading axes of (index of y) * stride."""
    cdef Py_ssize_t nd = len(v.shape), a, div = 1
    L.ptr = v.data()
    L.colstep = v.strides[nd - 1]
    L.rowstep = 0
    L.inner = v.shape[nd - 1]
    if nd == 1:
        L.nmap = 1
        L.mdiv[0] = 1
        L.mmod[0] = 1
        L.mstride[0] = 0
        return 0
    L.nmap = nd - 1
    for a in range(nd - 2, -1, -1):
        L.mdiv[a] = div
        L.mmod[a] = v.shape[a]
        L.mstride[a] = v.strides[a]
        div *= v.shape[a]
    return 0


cdef list _memory_of(Plan plan, Tensor dst, tuple leaves):
    """The allocation of every tensor a run of ``plan`` reads or writes (dst may be None),
    with what a banded gather's expression reads."""
    cdef list held = [dst.mem] if dst is not None else []
    cdef GatherLeaf gl
    for k in range(plan.nleaf):
        role = plan.leaf_role[k + 1]
        if role == ROLE_VIEW:
            held.append((<ViewLeaf> leaves[k]).src.mem)
        elif role == ROLE_GATHER:
            gl = leaves[k]
            held.extend((<Tensor> t).mem for t in gl.tensors if (<Tensor> t).mem is not None)
            for b in gl.bands:
                if (<Band> b).scratch is not None:
                    held.append((<Band> b).scratch.mem)
                held.extend(_memory_of((<Band> b).plan, None, (<Band> b).expr.leaves))
        else:
            held.append((<Tensor> leaves[k]).mem)
    return held


cdef list _pin_all(Plan plan, Tensor dst, tuple leaves):
    """Pin the allocation of every tensor a run reads or writes; returns them to unpin."""
    cdef list held = _memory_of(plan, dst, leaves)
    for m in held:
        (<Allocation> m).pin()
    return held


cdef _run(Plan plan, Tensor dst, tuple leaves, tuple scalars, bint contiguous,
          Py_ssize_t rows=-1, Py_ssize_t cols=-1, Py_ssize_t gB=0, Py_ssize_t gM=1,
          Py_ssize_t gR=1, ViewLeaf view=None, char *out=NULL, Py_ssize_t out_itemsize=0,
          Py_ssize_t y0=0, Py_ssize_t y1=-1, Py_ssize_t dst_row0=0, Py_ssize_t x0=0,
          Py_ssize_t x1=-1, Py_ssize_t dst_col0=0):
    """Run ``plan`` over ``dst``'s 2-D geometry; or, given ``rows`` x ``cols``, over that
    geometry with ``dst`` holding one value per block (a reduction's partial results); or,
    given also ``gB`` > 0, with ``dst`` holding one row per group of rows (gB, gM, gR: see
    ms_program in plan_exec.h; a column reduction's accumulators); or, given ``view`` (a
    view of ``dst``), over the view's geometry, row y of dst through the view's row map.
    A reduction may give its partial results as raw memory instead (``out``, with ``dst``
    None): memory the caller owns and keeps alive, such as a fresh numpy array. Given
    ``y1`` >= 0, only rows [y0, y1) of dst's geometry run (a band; rows keep their numbers);
    ``dst``'s first row is row ``dst_row0`` (a band's scratch holds only its rows). Given
    ``x1`` >= 0, only columns [x0, x1) run (a column band; not with ``contiguous``), and
    ``dst``'s first column is column ``dst_col0`` (a box band's scratch)."""
    cdef Py_ssize_t nl = plan.nleaf, k
    cdef ms_leaf stack_leaf[16]
    cdef ms_gather stack_gather[16]
    cdef ms_gather *gv = &stack_gather[0]
    cdef ms_leaf *lv = &stack_leaf[0]
    cdef char stack_scalars[16 * 16]
    cdef char *sv = &stack_scalars[0]
    if nl + 1 > 16:
        lv = <ms_leaf *> malloc((nl + 1) * sizeof(ms_leaf))
        gv = <ms_gather *> malloc((nl + 1) * sizeof(ms_gather))
    if plan.nscalar > 16:
        sv = <char *> malloc(16 * plan.nscalar)
    cdef Tensor lf
    cdef ms_program prog
    cdef int rc
    cdef Py_ssize_t n
    if lv == NULL or sv == NULL or gv == NULL:
        raise MemoryError()
    cdef Py_ssize_t isz = out_itemsize if out != NULL else dst.itemsize
    try:
        lv[0].ptr = out if out != NULL else dst.data()
        if dst_row0:   # a band's scratch: row y lives at its row (y - dst_row0)
            lv[0].ptr = lv[0].ptr - dst_row0 * dst.stride * dst.itemsize
        if dst_col0:   # a box band's scratch: column x lives at its column (x - dst_col0)
            lv[0].ptr = lv[0].ptr - dst_col0 * dst.itemsize
        lv[0].nmap = 0
        per_block = rows >= 0
        if not per_block:
            rows, cols = dst.rows, dst.cols
            lv[0].rowstep = dst.stride * isz
            lv[0].colstep = isz
        elif gB > 0:   # block (y, x0) of group g accumulates into row g from column x0
            lv[0].rowstep = cols * isz
            lv[0].colstep = isz
        else:   # block (y, x0) writes partial y * blocks_per_row + x0 / RBLOCK
            lv[0].rowstep = ((rows * cols if contiguous else cols) + RBLOCK - 1) // RBLOCK \
                * isz
            lv[0].colstep = isz
        lv[0].inner = cols
        lv[0].per_block = 2 if gB > 0 else per_block
        if view is not None:   # a view target: row y of leaf 0 through the view's row map
            _bind_view(&lv[0], view)
            rows, cols = _prod(view.shape[:-1]), view.shape[-1]
        for k in range(nl):
            lv[k + 1].nmap = 0
            lv[k + 1].per_block = 0
            role = plan.leaf_role[k + 1]
            if role == ROLE_VIEW:
                _bind_view(&lv[k + 1], <ViewLeaf> leaves[k])
                continue
            if role == ROLE_GATHER:
                (<GatherLeaf> leaves[k]).bind(&gv[k + 1])
                lv[k + 1].gather = &gv[k + 1]
                lv[k + 1].ptr = NULL
                lv[k + 1].rowstep = lv[k + 1].colstep = 0
                continue
            lf = <Tensor> leaves[k]
            lv[k + 1].ptr = lf.data()
            if plan.leaf_t[k + 1]:
                lv[k + 1].rowstep = lf.itemsize
                lv[k + 1].colstep = lf.stride * lf.itemsize
                lv[k + 1].inner = lf.rows
            else:
                lv[k + 1].rowstep = lf.stride * lf.itemsize
                lv[k + 1].colstep = lf.itemsize
                lv[k + 1].inner = lf.cols
        for k in range(plan.nscalar):
            a = plan.scalar_arg[k]
            _store_scalar(sv + 16 * k, plan.scalar_code[k], plan.scalar_ccode[k],
                          plan.const_value[k] if a < 0 else scalars[a])
        prog.ninst = plan.ninst
        prog.inst = plan.inst
        prog.leaf = lv
        prog.scalars = sv
        prog.nreg = plan.nreg
        prog.reg_bytes = (RBLOCK if per_block and gB == 0 else BLOCK) * 8
        prog.gB, prog.gM, prog.gR = gB, gM, gR
        prog.y0 = 0
        if y1 >= 0 and contiguous:
            # a band of dense plain leaves: one long row from row y0 (every pointer moved)
            for k in range(nl + 1):
                lv[k].ptr = lv[k].ptr + y0 * lv[k].rowstep
            rows = y1 - y0
        elif y1 >= 0:        # a band of rows [y0, y1), numbered as in the whole geometry
            prog.y0 = y0
            rows = y1 - y0
        prog.x0 = 0
        if contiguous:
            prog.rows = 1
            prog.cols = rows * cols
        else:
            prog.rows = rows
            prog.cols = cols
        if x1 >= 0 and not contiguous:   # a column band: blocks from column x0 to x1
            prog.x0, prog.cols = x0, x1
            cols = x1 - x0
        n = rows * cols
        # a band is a share of a larger assignment: threads pay off on smaller runs
        prog.nthreads = max(1, min(_num_threads, n // (MIN_PER_THREAD if y1 < 0 else 4096)))
        # Registers must fit in L1, so programs that use them go block by block; a fully
        # fused program has none and takes whole rows, one share of them per thread.
        if gB > 0:      # whole rows for a fully fused program; group by group
            prog.block = BLOCK if plan.nreg else max(BLOCK, prog.cols)
        elif per_block:   # a reduction's blocks never depend on the thread count
            prog.block = RBLOCK
        elif plan.nreg:
            prog.block = BLOCK
        else:
            prog.block = max(BLOCK, (cols + prog.nthreads - 1) // prog.nthreads)
        if prog.nthreads == 1 and n < MIN_PER_THREAD:   # too short to release the GIL
            rc = ms_run_program(&prog)
        else:
            # Without the GIL another thread may free_space or resize these tensors: pinned,
            # their memory outlives this run (a free meanwhile happens when it ends).
            held = _pin_all(plan, dst, leaves)
            try:
                with nogil:
                    rc = ms_run_program(&prog)
            finally:
                for m in held:
                    (<Allocation> m).unpin()
        if rc & MS_RUN_NOMEM:
            raise MemoryError("could not allocate the per-thread registers of a plan")
        if rc & MS_RUN_GATHER_OOB:   # kernels never read out of range; indices were checked first
            raise IndexError("an index read from a tensor was out of range during evaluation")
        if rc & MS_RUN_IDIV0:
            warnings.warn("integer division by zero (the result is 0 there)", RuntimeWarning,
                          stacklevel=3)
    finally:
        if lv != &stack_leaf[0]:
            free(lv)
            free(gv)
        if sv != &stack_scalars[0]:
            free(sv)


# ---- view targets: slice_axis, slice_ex, flip, crop of a tensor (extension/targets.py) ----

cdef tuple _span(size_t p, object shape, tuple strides, Py_ssize_t itemsize):
    """The bytes [lo, hi) a strided reading from address ``p`` can touch (empty: lo == hi)."""
    cdef Py_ssize_t lo = 0, hi = 0, n, s, k
    for k in range(len(strides)):
        n = shape[k]
        s = strides[k]
        if n == 0:
            return p, p
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return p + lo, p + hi + itemsize


cdef tuple _tensor_span(Tensor t):
    cdef size_t p = <size_t> t.data()
    if t.rows == 0 or t.cols == 0:
        return p, p
    return p, p + <size_t> (((t.rows - 1) * t.stride + t.cols) * t.itemsize)


cdef bint _same_positions(a, b):
    """Two numpy arrays address the same element at every index."""
    if a.shape != b.shape or a.ctypes.data != b.ctypes.data:
        return False
    return all(n <= 1 or s == t for n, s, t in zip(a.shape, a.strides, b.strides))


cdef bint _reads_view_elsewhere(Plan plan, ViewLeaf dst, tuple leaves) except -1:
    """Whether a leaf reads the view's bytes at positions other than the one being written
    (``flip(t, 0)[:] = t``). Reading the very element written, as ``v[:] = v * 2`` does, is
    safe block by block, as it is for a tensor (_same_elements)."""
    lo, hi = _span(<size_t> dst.data(), dst.shape, dst.strides, dst.src.itemsize)
    if lo == hi:
        return False
    dnp = None
    cdef Py_ssize_t k
    cdef Tensor lf
    cdef ViewLeaf vl
    cdef GatherLeaf gl
    for k in range(plan.nleaf):
        role = plan.leaf_role[k + 1]
        if role == ROLE_GATHER:       # reads its sources anywhere (a banded source was
            gl = <GatherLeaf> leaves[k]   # evaluated whole into its scratch, fresh memory)
            reads = [(t, None) for j, t in enumerate(gl.tensors) if not gl.banded[j]]
        elif role == ROLE_VIEW:
            vl = <ViewLeaf> leaves[k]
            reads = [(vl, vl)]
        else:
            lf = <Tensor> leaves[k]
            same = role == ROLE_MAP and not plan.leaf_t[k + 1]
            reads = [(lf, lf if same else None)]
        for src, positioned in reads:
            if isinstance(src, ViewLeaf):
                vl = <ViewLeaf> src
                slo, shi = _span(<size_t> vl.data(), vl.shape, vl.strides, vl.src.itemsize)
                arr = vl.numpy
            else:
                slo, shi = _tensor_span(<Tensor> src)
                arr = (<Tensor> src)._export
            if not (lo < shi and slo < hi):
                continue
            if dnp is None:
                dnp = dst.numpy()
            arr = arr()
            if positioned is not None and _same_positions(arr, dnp):
                continue
            if np.shares_memory(arr, dnp):
                return True
    return False


cpdef bint view_needs_strided_plan(ViewLeaf dst):
    """Whether ``dst``'s rows are not contiguous, so that run_plan_view needs the plan's
    strided form (lower.cpu.strided_dst; engine.get_plan(..., strided=True))."""
    cdef Py_ssize_t nd = len(dst.shape)
    return dst.shape[nd - 1] > 1 and dst.strides[nd - 1] != dst.src.itemsize


def run_plan_view(Plan plan, ViewLeaf dst, tuple leaves, tuple scalars):
    """Evaluate ``plan`` (compiled for a tensor destination of dst's dtype) into ``dst``, a
    strided view of a tensor: leaf 0 is bound through the view's row map and the blocks run
    as for a tensor. A fused chain or a gather writes its block contiguously, so where the
    view's last axis is not contiguous (a flip of it) the plan must be its strided form
    (view_needs_strided_plan). Returns False, having stored nothing, when a leaf reads the
    view's bytes at other positions (``flip(t, 0)[:] = t``): the caller
    (extension/targets.py) then evaluates the value into a temporary first, with plans of
    the engine's cache, as the engine does for run_plan."""
    cdef Tensor base = dst.src
    if base.readonly:
        raise ValueError("assignment destination is read-only")
    dst.data()
    shape = dst.shape
    for n, s in zip(shape, dst.strides):
        if s == 0 and n > 1:    # a broadcast: blocks would store to one element together
            raise ValueError(f"run_plan_view: the destination view repeats elements (shape "
                             f"{shape}, byte strides {dst.strides})")
    if plan.dst_code != base.type_flag:
        raise ValueError(f"run_plan_view: a plan for {plan.program.dst_code} into a view of a "
                         f"{base.dtype} tensor")
    if view_needs_strided_plan(dst) and not getattr(plan.program, "dst_strided", False):
        raise ValueError("run_plan_view: the view's last axis is not contiguous: it needs the "
                         "plan's strided form (engine.get_plan(..., strided=True))")
    cdef Py_ssize_t rows = _prod(shape[:-1]), cols = shape[-1]
    contiguous, _ = _check_leaves(plan, shape, rows, cols, leaves, None)
    if _reads_view_elsewhere(plan, dst, leaves):
        return False
    _run(plan, base, leaves, scalars, False, -1, -1, 0, 1, 1, dst)
    return True


def reads_tensor(tuple leaves, Tensor t):
    """Whether a leaf of an expression (a tensor, a view's tensor, a gather's sources)
    shares a byte with ``t``."""
    for lf in leaves:
        if isinstance(lf, ViewLeaf):
            srcs = ((<ViewLeaf> lf).src,)
        elif isinstance(lf, GatherLeaf):
            gl = <GatherLeaf> lf
            srcs = [s for s, banded in zip(gl.tensors, gl.banded) if not banded]
            for b in gl.bands:   # a banded source: what its expression reads
                if reads_tensor((<Band> b).expr.leaves, t):
                    return True
        else:
            srcs = (lf,)
        for s in srcs:
            if _overlaps(<Tensor> s, t):
                return True
    return False
