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
    const char *ms_isa_names[]
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
        npy_intp p[16]
    int MS_GATHER_PARAMS
    int ms_scatter_add(int code, char *acc, const char *band, npy_intp n, npy_intp cols,
                       const char *index, npy_intp index_step, int index_code, npy_intp i0,
                       npy_intp K) nogil


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
        int rows
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
        npy_intp tsize
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
        npy_intp gB, gM, gR, gN
        npy_intp tile
        int nleaf
        npy_intp y0
        npy_intp x0
    int MS_VIEW_MAXDIM
    int ms_run_program(const ms_program *p) nogil
    void ms_reduce_rows(ms_loop_fn fn, const char *a, npy_intp rows, npy_intp n, npy_intp ra,
                        npy_intp sa, char *out, npy_intp so, int nt) nogil
    int ms_max_threads() nogil
    int ms_have_openmp() nogil
    long long ms_team_wake_ns(int nt) nogil
    long long ms_cache_bytes() nogil
    long long ms_stream_bytes_a_ns() nogil


DEF BLOCK = 512            # elements per block: 8 registers of doubles stay in a 32 KiB L1
DEF RBLOCK = 4096          # a reduction's block: one partial sum each (fewer dispatches)
DEF GATHER_BLOCK = 16384   # a program with no registers (a gather, a copy): calls cost more
                           # than the L1 saves; concat on (32, 64, 28, 28) ran 1.2x faster
DEF GROUP_BLOCK = 2048     # a grouped run's block (a column reduction): 16 KiB a register
DEF TILE_COLS = 256        # a run reading a transposed leaf goes in tiles (plan_exec.h
DEF TILE_BYTES = 128       # ms_run_tile) of 256 columns by 128 bytes of destination elements
DEF TILE_MIN = 4096        # (rows), from 4096 elements (fewer: in cache anyway). 1000^2 to
                           # 2048^2 a.T + b: 64 to 512 columns by 64 to 256 bytes, this the best
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

def _isa_names():
    """This architecture's SIMD levels by name, lowest first (packet.h's ms_isa_names):
    plain, sse2, avx2, avx512 on x86; plain, neon on arm64."""
    names, k = [], 0
    while ms_isa_names[k] != NULL:
        names.append(ms_isa_names[k].decode())
        k += 1
    return tuple(names)


_ISA_NAMES = _isa_names()
# the CPU features that name each level in MSHADOW_DISABLE_CPU_FEATURES (the AVX2 level is
# AVX2 + FMA, so either name turns it off)
_ISA_FEATURE = {"sse2": ("SSE2",), "avx2": ("AVX2", "FMA"), "avx512": ("AVX512F",),
                "neon": ("NEON",)}

from .codegen_cpu import fingerprint as _fingerprint, GENERATOR_SOURCES as _GEN_SOURCES
if _fingerprint() != MS_KERNELS_FINGERPRINT.decode():
    raise BuildMismatchError(
        f"mshadow's compiled kernels were generated from other versions of "
        f"{', '.join(_GEN_SOURCES)} than the ones in {os.path.dirname(__file__)} "
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
    """The detected level, lowered by MSHADOW_DISABLE_CPU_FEATURES=AVX512F,AVX2,FMA,SSE2 (NEON
    on arm64): below the lowest level named."""
    level = _detected_isa
    off = {f.strip().upper() for f in os.environ.get("MSHADOW_DISABLE_CPU_FEATURES", "").split(",")}
    for lvl in range(len(_ISA_NAMES) - 1, 0, -1):
        if off.intersection(_ISA_FEATURE[_ISA_NAMES[lvl]]) and level >= lvl:
            level = lvl - 1
    return level


ms_isa_level = _initial_isa()


def simd_info():
    """(compiled levels, detected level, level in use) by name."""
    return {"compiled": _ISA_NAMES, "detected": _ISA_NAMES[_detected_isa],
            "active": _ISA_NAMES[ms_isa_level]}


def set_simd_level(level):
    """Use packets up to ``level`` ('plain', 'sse2', 'avx2', 'avx512'; 'plain', 'neon' on
    arm64); never above the CPU's."""
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
    global _num_threads, _shares_measured
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__} {n!r}") from None
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"set_num_threads: expected 1 <= n <= {MAX_THREADS}, got {n}")
    _num_threads = n
    _shares_measured = False     # measured again for this team (_thread_shares)
    cap_blas_threads()


def cap_blas_threads():
    """Cap the thread pools of the BLAS libraries loaded now at set_num_threads' count
    (threadpoolctl reaches loaded libraries only: dot.py calls this again once the BLAS it
    multiplies with, scipy's, is loaded)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=_num_threads, user_api="blas")


# ---- when a run takes threads --------------------------------------------------------------
# A thread's share of a run must be worth waking it. libgomp's sleeping team (mshadow's
# OMP_WAIT_POLICY=PASSIVE, docs/threads.md) is woken through the kernel at every parallel
# region: 1-10 us on most machines, 83 us on a 2-vCPU Firecracker VM, where E1 at 1e5
# float32 elements took 112 us on 2 threads against 12.8 us on one. So what waking the team
# costs, W ns, is measured once a team size, the first time a run could take threads
# (ms_team_wake_ns), and a thread's share must move R * W bytes at least, counting every
# leaf and the destination once an element (_share_of), R being what one thread moves a ns
# through the cheapest work a share holds (E1), so a share that size just pays for its
# wake: SHARE_BYTES_A_NS (E1 in cache moved 94 bytes a ns on one thread, 12 bytes an element
# of float32) for a run whose bytes fit in the core's cache (ms_cache_bytes), and for a
# larger one what E1 moves from past that cache (ms_stream_bytes_a_ns, measured with W) if
# that is less (an Intel Xeon's L3: 39 bytes a ns, where E1 at 1e6 float32 took 1.4x the
# time of an OpenMP C loop on 2 threads, run on one). Never fewer than MIN_PER_THREAD
# elements, or 4096 for a band of a staged run (each band wakes the team again). Work that
# computes more than it moves asks for its own rate (_share_at: softmax's rows run at about
# one element a ns).
DEF SHARE_BYTES_A_NS = 96
cdef bint _shares_measured = False
cdef long long _wake_ns = 0
cdef long long _cache_bytes = 1 << 20
cdef long long _past_cache_bytes_a_ns = SHARE_BYTES_A_NS
cdef bint _stream_measured = False   # one thread's rate: once a process, not once a team


cdef int _thread_shares() except -1:
    """Measure what waking the team costs, and E1's rate past the cache (above)."""
    global _shares_measured, _wake_ns, _cache_bytes, _past_cache_bytes_a_ns, _stream_measured
    cdef int nt = _num_threads if ms_have_openmp() else 1
    cdef long long rate
    # with the GIL held (a few milliseconds, the first time): callers may hold addresses not
    # yet pinned (softmax_rows), which another thread's free_space must not unmap meanwhile
    _wake_ns = ms_team_wake_ns(nt)
    _cache_bytes = ms_cache_bytes()
    if nt > 1 and not _stream_measured:
        rate = ms_stream_bytes_a_ns()
        _past_cache_bytes_a_ns = min(SHARE_BYTES_A_NS, rate) if rate > 0 else SHARE_BYTES_A_NS
        _stream_measured = True
    _shares_measured = True
    return 0


cdef inline int _measure_wake_for(Py_ssize_t n, Py_ssize_t floor) except -1:
    """Measure the wake first if a run of ``n`` elements could take threads (two shares of
    at least ``floor``) and it is not measured yet for this team."""
    if not _shares_measured and _num_threads > 1 and n >= 2 * floor:
        _thread_shares()
    return 0


cdef Py_ssize_t _share_of(Py_ssize_t n, Py_ssize_t bytes_an_element,
                          Py_ssize_t floor) except -1:
    """The fewest elements a thread takes of a run of ``n`` elements that moves
    ``bytes_an_element`` each (at least ``floor``)."""
    cdef Py_ssize_t each = max(bytes_an_element, 1)
    cdef long long rate
    _measure_wake_for(n, floor)
    rate = SHARE_BYTES_A_NS if n * each <= _cache_bytes else _past_cache_bytes_a_ns
    return max(floor, rate * _wake_ns // each)


cdef Py_ssize_t _share_at(Py_ssize_t per_ns, Py_ssize_t n) except -1:
    """The fewest elements a thread takes of a run of ``n`` elements of work that runs at
    ``per_ns`` elements a ns on one thread."""
    _measure_wake_for(n, MIN_PER_THREAD)
    return max(MIN_PER_THREAD, per_ns * _wake_ns)


def thread_share(Py_ssize_t n, Py_ssize_t bytes_an_element):
    """The fewest elements a thread takes of an element-wise run of ``n`` elements that
    moves ``bytes_an_element`` each (leaves and destination): the rule of thread_shares."""
    if n < 0 or bytes_an_element < 1:
        raise ValueError(f"thread_share: n must be >= 0 and bytes_an_element >= 1, "
                         f"got {n} and {bytes_an_element}")
    return _share_of(n, bytes_an_element, MIN_PER_THREAD)


def thread_shares():
    """``{"wake_us", "bytes", "cache_bytes", "past_cache_bytes_a_ns", "past_cache_bytes"}``:
    what waking the team of set_num_threads' size took (measured once, as the first run
    that could take threads does), and the bytes a thread's share of a run must move at
    least (its leaves' and destination's elements; never fewer than 32768 elements, 4096
    for a band of a staged run): "bytes" for a run whose bytes fit in "cache_bytes", else
    "past_cache_bytes" (E1's measured rate from past the cache, where that is the lower)."""
    if not _shares_measured:
        _thread_shares()
    return {"wake_us": _wake_ns / 1000.0, "bytes": SHARE_BYTES_A_NS * _wake_ns,
            "cache_bytes": _cache_bytes, "past_cache_bytes_a_ns": _past_cache_bytes_a_ns,
            "past_cache_bytes": _past_cache_bytes_a_ns * _wake_ns}


def get_num_threads():
    """Threads one assignment may use (1 in a build without OpenMP)."""
    return _num_threads if ms_have_openmp() else 1


def have_openmp():
    return bool(ms_have_openmp())


# ---- the plan cache: the only one, owned here ------------------------------------------
# (IR node, dst code, saver, device[, "strided"]) -> Plan, or the engine's marker of a node
# that holds an untraceable operator; bounded: a long-running process that builds ever new
# structures keeps at most _plan_cache_size plans (a few KiB each). The fast path of
# t[:] = exp (_assign) reads it; the engine fills it (get_plan). A hit costs one dict
# lookup: it stamps the Plan with a use count (an ordered dict's move_to_end hashed the
# nested key a second time on every statement); an insertion past the bound drops the
# least recently used eighth.
PLANS = {}
_plan_store = PLANS
cdef Py_ssize_t _plan_cache_size = 2048
cdef Py_ssize_t _plan_hits = 0, _plan_misses = 0
cdef unsigned long long _plan_tick = 0
# the cache's generation: bumped whenever an entry is added, replaced or dropped, so a
# plan remembered outside it (make_map's _Site) is used only while it is still the entry
cdef unsigned long long _plan_gen = 1


cdef inline void _stamp(object plan) noexcept:
    global _plan_tick
    if type(plan) is Plan:
        _plan_tick += 1
        (<Plan> plan).last_use = _plan_tick


cdef unsigned long long _last_use(object plan) noexcept:
    return (<Plan> plan).last_use if type(plan) is Plan else 0


def _evict(Py_ssize_t keep):
    """Drop the least recently used entries until at most ``keep`` remain."""
    if len(PLANS) <= keep:
        return
    global _plan_gen
    order = sorted(list(PLANS.items()), key=lambda kv: _last_use(kv[1]))
    for key, _ in order[:len(order) - keep]:
        PLANS.pop(key, None)     # another thread may have dropped it meanwhile
    _plan_gen += 1
    _clear_sites()


def cached_plan(key):
    """The plan cached under ``key``, now the most recently used, or None (counted as a hit
    or a miss; the fast path of ``t[:] = exp`` does not count its hits)."""
    global _plan_hits, _plan_misses
    plan = PLANS.get(key)
    if plan is None:
        _plan_misses += 1
        return None
    _plan_hits += 1
    _stamp(plan)
    return plan


def cache_plan(key, plan):
    """Keep ``plan`` under ``key``; past the bound, drop the least recently used eighth."""
    global _plan_gen
    _stamp(plan)
    PLANS[key] = plan
    _plan_gen += 1
    if len(PLANS) > _plan_cache_size:
        _evict(_plan_cache_size - _plan_cache_size // 8)


def plan_cache_counts():
    """(hits, misses, maxsize, currsize)."""
    return _plan_hits, _plan_misses, _plan_cache_size, len(PLANS)


def clear_plan_cache():
    """Drop every compiled plan (they are compiled again on next use)."""
    global _plan_hits, _plan_misses, _plan_gen
    PLANS.clear()
    _plan_gen += 1
    _clear_sites()
    _plan_hits = _plan_misses = 0


def set_plan_cache_size(n):
    """Keep at most ``n`` >= 1 compiled plans (default 2048)."""
    global _plan_cache_size
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_plan_cache_size: expected an int >= 1, got {n!r}")
    _plan_cache_size = n
    _evict(n)


from .dtypes import DTYPES as _DTYPES
cdef dict _CODE_SIZE = {d.code: d.size for d in _DTYPES}
cdef dict _NP_NUM = {d.code: np.dtype(_NP_BY_CODE[d.code]).num for d in _DTYPES}   # type numbers
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
    cdef bint reads_t           # some leaf is (its runs go in tiles: _stages.pxi _exec_bound)
    cdef int *leaf_role         # index into _ROLES
    cdef int *leaf_param        # a 'view' leaf's last-axis kind: 0 unit, 1 zero, 2 other step
    cdef int dst_code
    cdef int dst_size            # bytes of an element of the destination (thread shares)
    cdef ms_chain *chains       # one per fused-chain instruction (their kernels' data)
    cdef int *leaf_bind         # leaf (1-based) -> index into the expression's leaves
    cdef Py_ssize_t nbind, nscalar_bind   # the expression's leaves and scalars it binds
    cdef readonly tuple stage_plans       # the Plan of each stage's producer (program.stages)
    cdef unsigned long long last_use      # the plan cache's use stamp
    # per stage: (schedule, consumer leaf (1-based), source position, leaf slice, scalar
    # slice, result itemsize, result TypeFlag); read by every run (_stages.pxi _bind)
    cdef tuple stage_info
    cdef frozenset staged_leaves          # consumer leaves (1-based) a stage fills, not a gather
    cdef dict gather_binds                # gather leaf (1-based) -> per source: binding or -1
    cdef int small                        # 1: every stage may run on the stack (_small_run),
                                          # 0: not, -1: not yet known (_is_small)

    def __cinit__(self, program):
        self.program = program
        self.small = -1
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
        self.leaf_bind = <int *> malloc((self.nleaf + 1) * sizeof(int))
        if not (self.leaf_bind and self.inst and self.scalar_arg and self.scalar_code and self.scalar_ccode
                and self.const_value and self.leaf_t and self.leaf_role and self.leaf_param):
            raise MemoryError()
        self.dst_code = _CODE_NUM[program.dst_code]
        self.dst_size = _CODE_SIZE[program.dst_code]
        self.leaf_t[0] = False
        self.leaf_role[0] = 0
        self.leaf_param[0] = 0
        self.leaf_bind[0] = -1
        self.nbind, self.nscalar_bind = program.nbind, program.nscalar_bind
        self.stage_plans = tuple(Plan(st.program) for st in program.stages)
        self.stage_info = tuple(
            (_SCHEDULES[st.schedule], st.consumer + 1, st.pos,
             st.leaf_base, st.leaf_base + st.nleaves, st.scalar_base,
             st.scalar_base + st.nscalars, _CODE_SIZE[st.program.dst_code],
             _CODE_NUM[st.program.dst_code]) for st in program.stages)
        self.staged_leaves = frozenset(st.consumer + 1 for st in program.stages
                                       if st.consumer >= 0   # -1: a reduction's chunk
                                       and program.leaf_roles[st.consumer] not in
                                       ("gather", "scatter"))
        self.gather_binds = {k + 1: tuple(program.leaf_bind[i] if kind == "leaf" else -1
                                          for kind, i in srcs)
                             for k, srcs in program.gather_srcs.items()}
        for k, t in enumerate(program.leaf_transposed):
            self.leaf_bind[k + 1] = program.leaf_bind[k]
            self.leaf_t[k + 1] = t
            self.reads_t = self.reads_t or (t and program.leaf_roles[k] == "map")
            self.leaf_role[k + 1] = _ROLES.index(program.leaf_roles[k])
            self.leaf_param[k + 1] = program.leaf_params[k]
        consts = program.const_values
        for s, (code, ccode) in enumerate(program.scalar_codes):
            self.scalar_code[s] = _CODE_NUM[code]
            self.scalar_ccode[s] = _CODE_NUM[ccode]
            self.scalar_arg[s] = program.scalar_bind[s]
            self.const_value[s] = consts.get(s, 0.0)
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
            ins.rows = instr.kernel[0] == "fold"   # several rows a call (acc_<block>_<code>)
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
        free(self.leaf_bind)
        free(self.chains)

    def disassemble(self):
        return self.program.disassemble()


_ROLES = ("map", "gemm_lhs", "gemm_rhs", "view", "gather", "gsrc", "gview", "scatter")
DEF ROLE_MAP = 0
DEF ROLE_GEMM_LHS = 1
DEF ROLE_GEMM_RHS = 2
DEF ROLE_VIEW = 3
DEF ROLE_GATHER = 4
DEF ROLE_GSRC = 5        # a tensor a gather reads in place (bound through its ms_gather)
DEF ROLE_GVIEW = 6       # a 2-D view a gather reads in place
DEF ROLE_SCATTER = 7     # take_grad's values: its scatter stage's accumulator (its
                         # arguments are bound as a gather's, for the index it reads)


cpdef int view_step_kind(Py_ssize_t step, Py_ssize_t itemsize):
    """How a view's last axis is read: 0 contiguous, 1 one value (step 0), 2 other steps."""
    return 0 if step == itemsize else (1 if step == 0 else 2)


def _one_value_a_block(program, opd):
    """A scalar, or a view whose last axis has step 0: a block (one row) sees one value."""
    return opd[0] == "scalar" or (opd[0] == "leaf" and program.leaf_roles[opd[1]] == "view"
                                  and program.leaf_params[opd[1]] == 1)


cdef int _store_scalar(char *slot, int code, int ccode, object value) except -1:
    """Write ``value`` as the compute type, after rounding it to the storage type."""
    if code == MS_TYPEFLAG_FLOAT16:      # what a half can hold, computed as float
        (<float *> slot)[0] = <float> np.float16(value)
    elif ccode == MS_TYPEFLAG_FLOAT32:
        (<float *> slot)[0] = <float> value
    elif ccode == MS_TYPEFLAG_FLOAT64:
        (<double *> slot)[0] = <double> value
    elif ccode == MS_TYPEFLAG_UINT8:
        (<uint8_t *> slot)[0] = <uint8_t> (<int64_t> value)
    elif ccode == MS_TYPEFLAG_INT8:
        (<int8_t *> slot)[0] = <int8_t> (<int64_t> value)
    elif ccode == MS_TYPEFLAG_INT32:
        (<int32_t *> slot)[0] = <int32_t> (<int64_t> value)
    elif ccode == MS_TYPEFLAG_INT64:
        (<int64_t *> slot)[0] = <int64_t> value
    else:
        raise DTypeError(f"no scalar slot for TypeFlag {ccode}")
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
    if (a.mem is not None and a.mem.device_mem is not None) or (
            b.mem is not None and b.mem.device_mem is not None):
        return True     # device memory has no host view to ask: by range, as cuda/executor's
    return bool(np.shares_memory(a._export(), b._export()))


cdef bint _same_elements(Tensor a, Tensor b) except -1:
    """``a`` is read at exactly the positions ``b`` is written: an in-place element-wise op."""
    return (a.data() == b.data() and a.itemsize == b.itemsize
            and (a.stride == b.stride or a.rows <= 1))


# What a run binds (mshadow/_stages.pxi binds it; run_plan's fast path on its stack)
DEF INLINE_LEAVES = 8      # a plan of up to 7 leaves and 8 scalars binds with no malloc
DEF PINS_INLINE = 8        # allocations a run pins before it needs a list
DEF SMALL_STAGES = 4       # stages of one level a small run holds (_small_run)
DEF SMALL_DEPTH = 6        # and levels of stages below the destination
DEF SMALL_ARENA = 4096     # bytes of a level's stage scratch on the stack (more: malloc)
DEF SMALL_NOT = 0          # _small_run's outcomes: not small (nothing stored),
DEF SMALL_DONE = 1         # evaluated and stored,
DEF SMALL_ALIAS = 2        # reads the destination at other positions (nothing stored)


ctypedef struct _Pins:     # the allocations a run has pinned, each with a reference it owns
    int n
    PyObject *items[PINS_INLINE]
    PyObject *extra        # a list of the rest (an owned reference), or NULL


cpdef bint run_plan(Plan plan, Tensor dst, tuple leaves, tuple scalars) except -1:
    """Evaluate ``plan`` into ``dst``: the program binds ``leaves`` and ``scalars``.

    Returns False, having stored nothing, when the expression reads ``dst`` at other
    positions than it writes (``x[:] = x.T``, or a stage reads dst at all): the engine then
    evaluates it through a temporary (run_through_temporary), with plans it owns."""
    if dst.readonly:
        raise ValueError("assignment destination is read-only")
    dst.data()
    # dst's address and geometry now, and its memory pinned before any Python code runs:
    # another thread may free or resize it while the leaves are bound
    cdef _Out o
    _out_tensor(&o, dst, True)
    cdef bint dense_dst = o.contiguous
    cdef Py_ssize_t rows = o.rows, cols = o.cols
    shape = dst.shape
    cdef _Bound b
    # one pass, nothing staged, a few leaves: the per-statement fast path, bound on the stack
    cdef ms_leaf lv[INLINE_LEAVES]
    cdef ms_gather gv[INLINE_LEAVES]
    cdef char sv[16 * INLINE_LEAVES]
    cdef _Pins pins
    cdef bint dense, alias
    cdef int flags = 0, done = SMALL_NOT
    cdef _Run r
    # o's memory stays pinned until the run has ended, whichever path runs it: a small run
    # that gives way to the general one has run Python code (an index check) meanwhile
    pins.n = 0
    pins.extra = NULL
    _pin_now(dst.mem, &pins)
    try:
        if (not plan.stage_plans and plan.nleaf + 1 <= INLINE_LEAVES
                and plan.nscalar <= INLINE_LEAVES):
            _bind_leaves(plan, leaves, scalars, shape, rows, cols, dst, &pins, True, lv, gv,
                         sv, &dense, &alias)
            if alias:
                return False
            o.contiguous = dense and dense_dst
            _exec_bound(plan, lv, sv, &flags, &o, 0, rows, 0, cols)
            done = SMALL_DONE
        elif plan.small == 1 or (plan.small == -1 and _is_small(plan, 0)):
            # small stages, each evaluated whole into scratch of its own, bound on the stack
            done = _small_run(plan, leaves, scalars, shape, rows, cols, dst, &pins, True,
                              &flags, &o, 0)
            if done == SMALL_ALIAS:
                return False
        if done == SMALL_NOT:
            r = _open_run(plan, leaves, scalars, shape, dst, True)
            b = r.bound
            try:
                if not b.alias:
                    _fill_whole(b, False)
                    o.contiguous = b.dense and dense_dst
                    _run_staged(b, &o, 0, rows, 0, cols)
            except BaseException:
                _close_run(r, False)
                raise
            _close_run(r, True)
            return not b.alias
    finally:
        _unpin(&pins)
    _warn_flags(flags)
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
    run_plan(to_tmp, tmp, leaves, scalars)       # tmp is fresh: nothing reads it
    run_plan(from_tmp, dst, (tmp,), ())


def run_reduce(Plan plan, shape, tuple leaves, tuple scalars, bint by_rows=False):
    """Evaluate a reduction plan over an expression of ``shape``: returns the per-block
    partial results, in block order (row by row, blocks of RBLOCK elements along a row; one
    long row when every leaf is contiguous, unless ``by_rows``), as a 1-D array of the
    plan's compute type. With ``by_rows`` it has shape[:-1] x blocks-per-row entries.
    Stages are evaluated whole first (the partials are numbered by block)."""
    return _reduce_parts(plan, as_shape(shape), leaves, scalars, by_rows)


cdef void _parts_out(_Out *o, char *parts, Py_ssize_t itemsize, Py_ssize_t rows,
                     Py_ssize_t cols, bint contiguous) noexcept:
    """``o``: a reduction's per-block partials of rows x cols, in block order into ``parts``
    (one long row when ``contiguous``, else ceil(cols / RBLOCK) a row)."""
    _out_at(o, parts, ((rows * cols if contiguous else cols) + RBLOCK - 1) // RBLOCK * itemsize,
            itemsize, rows, cols)
    o.leaf.per_block = 1
    o.contiguous = contiguous


cdef void _groups_out(_Out *o, char *acc, Py_ssize_t itemsize, Py_ssize_t A, Py_ssize_t B,
                      Py_ssize_t M, Py_ssize_t R, Py_ssize_t cols,
                      Py_ssize_t rows_a_call) noexcept:
    """``o``: a grouped run's accumulator rows (run_accumulate's (A, M, groups, cols) layout)
    at ``acc``, R rows of B a group, ``rows_a_call`` of them a fold's call."""
    _out_at(o, acc, cols * itemsize, itemsize, A * B * M, cols)
    o.leaf.per_block = 2
    o.gB, o.gM, o.gR, o.gN = B, M, R, max(1, min(rows_a_call, R))


cdef object _reduce_parts(Plan plan, shape, tuple leaves, tuple scalars, bint by_rows):
    """run_reduce, ``shape`` checked (as_shape)."""
    cdef Py_ssize_t rows = _rows_of(shape), cols = shape[-1]
    cdef _Out o
    cdef _Run r = _open_run(plan, leaves, scalars, shape)
    try:
        _fill_whole(r.bound, True)
        contiguous = r.bound.dense and not by_rows
        nparts = (rows if not contiguous else 1) * (
            ((cols if not contiguous else rows * cols) + RBLOCK - 1) // RBLOCK)
        parts = np.zeros(max(nparts, 1), dtype=_NP_BY_CODE[plan.program.dst_code])
        _parts_out(&o, <char *> cnp.PyArray_DATA(parts), parts.itemsize, rows, cols, contiguous)
        _exec(r.bound, &o, 0, rows, 0, cols)
    except BaseException:
        _close_run(r, False)
        raise
    _close_run(r, True)
    return parts[:nparts]


def evaluate_rows(expr, Plan plan, Py_ssize_t r0, Py_ssize_t r1, Tensor scratch):
    """Rows [r0, r1) of the 2-D flattening of ``expr`` (compiled as ``plan`` for saveto)
    into the first r1 - r0 rows of ``scratch`` (2-D, the expression's columns, fresh
    memory): a chunk of a source that is reduced a chunk at a time (an arg-reduction).
    Banded stages evaluate only what these rows read; every chunk is checked."""
    shape = as_shape(expr.shape)
    cdef Py_ssize_t rows = _rows_of(shape), cols = shape[-1]
    if not (0 <= r0 <= r1 <= rows) or scratch.cols != cols or scratch.rows < r1 - r0:
        raise ValueError(f"evaluate_rows: rows [{r0}, {r1}) of {shape} into {scratch.shape}")
    cdef _Out o
    cdef _Run r = _open_run(plan, expr.leaves, expr.scalars, shape, scratch)
    try:
        if r1 > r0:
            _fill_whole(r.bound, False)
            _out_at(&o, scratch.data() - r0 * scratch.stride * scratch.itemsize,
                    scratch.stride * scratch.itemsize, scratch.itemsize, rows, cols)
            o.contiguous = r.bound.dense and _dense(scratch)
            _run_staged(r.bound, &o, r0, r1, 0, cols)
    except BaseException:
        _close_run(r, False)
        raise
    _close_run(r, True)


def run_chunks(Plan plan, shape, tuple leaves, tuple scalars, Py_ssize_t k,
               Py_ssize_t per, consume):
    """Run a reduction's chunk program (lower.cpu.compile_reduce): its source, of ``shape``,
    is evaluated a chunk at a time into scratch from this thread's arena, and
    ``consume(p, i0, i1, chunk)`` is called with each chunk's values: indices [i0, i1) of
    axis ``k`` (at most ``per`` of them) at the p-th index of the axes before it (row-major),
    every axis after it whole, as a dense numpy array of shape (i1 - i0,) + shape[k + 1:]
    that is valid during the call only. The plan is bound once (its leaves checked and
    pinned, its whole stages evaluated); banded stages of the source band within each
    chunk. Chunks run in order, with boundaries that depend on the shape alone."""
    if len(plan.stage_plans) != 1 or plan.program.reduce is None:
        raise ValueError("run_chunks: expects a reduction's chunk program")
    cdef Plan src = plan.stage_plans[0]
    shape = as_shape(shape)
    cdef Py_ssize_t nd = len(shape)
    if not 0 <= k < nd or per < 1:
        raise ValueError(f"run_chunks: axis {k}, {per} a chunk, of {shape}")
    cdef Py_ssize_t rows = _rows_of(shape), cols = shape[nd - 1]
    cdef Py_ssize_t outer = _prod(shape[:k]), n = shape[k], inner = _prod(shape[k + 1:])
    cdef Py_ssize_t isz = _CODE_SIZE[src.program.dst_code], p, i0, i1, r0, r1
    if rows * cols == 0:
        return
    per = min(per, n)
    cdef _Out o
    cdef _Bound b
    cdef Allocation m = None
    cdef _Export ex
    cdef _Run r = _open_run(src, leaves, scalars, shape)
    try:
        b = r.bound
        _fill_whole(b, False)
        m = _take_scratch(per * inner * isz)
        try:
            ex = _Export.__new__(_Export)
            ex.__array_interface__ = {"version": 3, "shape": (per * inner,),
                                      "typestr": np.dtype(_NP_BY_CODE[src.program.dst_code]).str,
                                      "data": (<size_t> m.ptr, False)}
            ex.mem = m
            m.n_exports += 1
            flat = np.asarray(ex)
            for p in range(outer):
                for i0 in range(0, n, per):
                    i1 = min(n, i0 + per)
                    if k < nd - 1:       # whole rows of the 2-D flattening
                        r0 = (p * n + i0) * (inner // cols)
                        r1 = (p * n + i1) * (inner // cols)
                        _out_at(&o, m.ptr - r0 * cols * isz, cols * isz, isz, rows, cols)
                        o.contiguous = b.dense
                        _run_staged(b, &o, r0, r1, 0, cols)
                    else:                # columns [i0, i1) of row p
                        _out_at(&o, m.ptr - (p * cols + i0) * isz, cols * isz, isz, rows, cols)
                        _run_staged(b, &o, p, p + 1, i0, i1)
                    consume(p, i0, i1, flat[:(i1 - i0) * inner].reshape(
                        (i1 - i0,) + tuple(shape[k + 1:])))
        finally:
            flat = ex = None
            _give_scratch(m)
    except BaseException:
        _close_run(r, False)
        raise
    _close_run(r, True)


def run_accumulate(Plan plan, shape, tuple leaves, tuple scalars, Py_ssize_t axis,
                   Py_ssize_t rows_per_group, init=0, Py_ssize_t rows_a_call=1):
    """Reduce an expression of ``shape`` over ``axis`` (not the last), in one pass, with
    ``plan`` compiled for an accumulating saver (ir.ACCUMULATORS: sumto, maxto, ...) into its
    compute type.

    Rows of ``shape`` flattened to (A, B, M) x cols, B the reduced axis: each group of
    ``rows_per_group`` consecutive b of one (a, m) is added row by row, in order, into an
    accumulator row of its own (one thread a group); a plan whose fold takes several rows
    a call (ms_inst.rows) takes ``rows_a_call`` of them a call when M == 1. Returns the
    accumulators, ``init`` to start, as an (A, M, ceil(B / rows_per_group), cols) array of
    the compute type."""
    shape = as_shape(shape)
    if not 0 <= axis < len(shape) - 1:
        raise ValueError(f"run_accumulate: axis {axis} must be a leading axis of {shape}")
    return _accumulate(plan, shape, leaves, scalars, axis, rows_per_group, init, rows_a_call)


cdef object _accumulate(Plan plan, shape, tuple leaves, tuple scalars, Py_ssize_t axis,
                        Py_ssize_t rows_per_group, init, Py_ssize_t rows_a_call):
    """run_accumulate, ``shape`` checked (as_shape) and ``axis`` a leading axis of it."""
    cdef Py_ssize_t nd = len(shape)
    cdef Py_ssize_t A = _prod(shape[:axis]), B = shape[axis], M = _prod(shape[axis + 1:nd - 1])
    cdef Py_ssize_t cols = shape[nd - 1], R = max(1, min(rows_per_group, B))
    cdef Py_ssize_t nch = (B + R - 1) // R if B else 0
    cdef cnp.npy_intp dims[4]
    dims[0], dims[1], dims[2], dims[3] = A, M, nch, cols
    if init == 0:
        acc = cnp.PyArray_ZEROS(4, dims, _NP_NUM[plan.program.dst_code], 0)
    else:
        acc = cnp.PyArray_EMPTY(4, dims, _NP_NUM[plan.program.dst_code], 0)
        acc.fill(init)
    cdef _Out o
    cdef _Run r = _open_run(plan, leaves, scalars, shape)
    try:
        if acc.size:
            _fill_whole(r.bound, True)
            _groups_out(&o, <char *> cnp.PyArray_DATA(acc), acc.itemsize, A, B, M, R, cols,
                        rows_a_call)
            _exec(r.bound, &o, 0, A * B * M, 0, cols)
    except BaseException:
        _close_run(r, False)
        raise
    _close_run(r, True)
    return acc


ctypedef fused _group_real:
    float
    double


cdef void _add_groups(const _group_real *a, double *out, Py_ssize_t AM, Py_ssize_t G,
                      Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t i, g, c
    cdef const _group_real *row
    cdef double *o
    for i in range(AM):
        o = out + i * cols
        row = a + i * G * cols
        for c in range(cols):
            o[c] = <double> row[c]
        for g in range(1, G):
            row = a + (i * G + g) * cols
            for c in range(cols):
                o[c] = o[c] + <double> row[c]


# what run_accumulate's float sums come in: the float compute types (the dtype table's)
_GROUP_DTYPES = frozenset(np.dtype(_NP_BY_CODE[d.compute]) for d in _DTYPES if d.is_float)


def add_groups(acc):
    """run_accumulate's float sums, (A, M, G, cols) float32 or float64, added over the groups
    (axis 2) in order in float64: ``np.add.reduce(acc, axis=2, dtype=np.float64)``, the same
    additions in the same order, without numpy's buffered casts (64 groups of 1024 float32
    columns: 42 us, here a few). Returns an (A, M, cols) float64 array."""
    if (not isinstance(acc, np.ndarray) or acc.ndim != 4 or acc.dtype not in _GROUP_DTYPES
            or not acc.flags.c_contiguous or acc.shape[2] < 1):
        raise ValueError(f"add_groups: expects a C-contiguous (A, M, G, cols) array of a float "
                         f"compute type ({', '.join(sorted(str(d) for d in _GROUP_DTYPES))}) "
                         f"with G >= 1, got {getattr(acc, 'shape', None)} "
                         f"{getattr(acc, 'dtype', type(acc).__name__)}")
    return _grouped(acc)


cdef object _grouped(cnp.ndarray acc):
    """add_groups of run_accumulate's own result (checked by its construction)."""
    cdef Py_ssize_t A = acc.shape[0], M = acc.shape[1], G = acc.shape[2], cols = acc.shape[3]
    cdef cnp.npy_intp dims[3]
    dims[0], dims[1], dims[2] = A, M, cols
    out = cnp.PyArray_EMPTY(3, dims, cnp.NPY_DOUBLE, 0)
    cdef char *src = <char *> cnp.PyArray_DATA(acc)
    cdef double *dst = <double *> cnp.PyArray_DATA(out)
    cdef bint single = acc.itemsize == sizeof(float)
    with nogil:
        if single:
            _add_groups(<const float *> src, dst, A * M, G, cols)
        else:
            _add_groups(<const double *> src, dst, A * M, G, cols)
    return out


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


cdef list _reads_of(Plan plan, tuple leaves):
    """(tensor or view, positioned) for every memory an expression reads: positioned when
    it is a leaf of the plan's own pass read at the element being written (an untransposed
    map leaf, a view); a leaf a gather or a stage reads is read elsewhere. A view of a
    stage's values reads scratch (its tensor is a handle with no memory): not listed."""
    cdef set top = set()
    for k in range(1, plan.nleaf + 1):
        role = plan.leaf_role[k]
        if (role == ROLE_MAP and not plan.leaf_t[k]) or role == ROLE_VIEW:
            top.add(plan.leaf_bind[k])
    out = []
    for i, lf in enumerate(leaves):
        if isinstance(lf, ViewLeaf):
            if (<ViewLeaf> lf).src.mem is not None:
                out.append((lf, i in top))
        elif isinstance(lf, Tensor):
            out.append((lf, i in top))
    return out


cdef bint _reads_view_elsewhere(Plan plan, ViewLeaf dst, tuple leaves) except -1:
    """Whether a leaf reads the view's bytes at positions other than the one being written
    (``flip(t, 0)[:] = t``). Reading the very element written, as ``v[:] = v * 2`` does, is
    safe block by block, as it is for a tensor (_same_elements)."""
    lo, hi = _span(<size_t> dst.data(), dst.shape, dst.strides, dst.src.itemsize)
    if lo == hi:
        return False
    dnp = None
    cdef ViewLeaf vl
    for src, positioned in _reads_of(plan, leaves):
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
        if positioned and _same_positions(arr, dnp):
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
    cdef Py_ssize_t rows = _rows_of(shape), cols = _axis(shape, -1)
    cdef _Out o
    cdef _Out view_out         # the view's address now, pinned with its tensor at once
    _out_at(&view_out, NULL, 0, 0, rows, cols)
    _bind_view(&view_out.leaf, dst)
    cdef _Run r = _open_run(plan, leaves, scalars, shape, base)
    cdef bint elsewhere
    try:
        elsewhere = _reads_view_elsewhere(plan, dst, leaves)
        if not elsewhere:
            _fill_whole(r.bound, True)
            _exec(r.bound, &view_out, 0, rows, 0, cols)
    except BaseException:
        _close_run(r, False)
        raise
    _close_run(r, True)
    return not elsewhere


def reads_tensor(tuple leaves, Tensor t):
    """Whether a leaf of an expression (a tensor, a view's tensor; at any depth: a gather's
    sources and staged expressions bind leaves of their own) shares a byte with ``t``."""
    for lf in leaves:
        if isinstance(lf, ViewLeaf):
            src = (<ViewLeaf> lf).src
            if (<Tensor> src).mem is None:     # a view of a stage's values
                continue
        elif isinstance(lf, Tensor):
            src = lf
        else:
            continue
        if _overlaps(<Tensor> src, t):
            return True
    return False
