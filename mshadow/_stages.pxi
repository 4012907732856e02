# The executor of a Program of stages (included by _core.pyx; the lowering is
# mshadow/lower/cpu.py, the rule that chooses a schedule is in docs/architecture.md).
#
# Design: one run binds the plan to its data once (_bind: every leaf checked and its
# address taken, the gathers' arguments and the scalars stored, each stage's producer bound
# below its consumer), then evaluates. Everything a run needs lives in objects of that run:
# the stages' scratch comes from a per-thread arena and goes back to it when the run ends,
# so two threads never share state, and no lock is taken. Whole stages are evaluated before
# anything is stored (an index read by a gather is checked then); banded stages are
# evaluated band by band, each band's source box first, from the reader's bounds form
# (readers.Reader.src_rows). Every allocation a run reads or writes is pinned from the
# moment its address is taken to the run's end, so a free or resize meanwhile never cuts
# it short.

from libc.string cimport memcpy, memset
from .readers import READERS_BY_NAME

DEF BAND_ELEMS = 262144  # elements of a band, and of each stage's box (1 MiB of float):
                         # fewer, larger bands: each run is a parallel region of its own
DEF SMALL_STAGE = 4096   # a banded stage of at most this many elements is evaluated whole
                         # in a run of one band: cheaper than calling its bounds form
DEF SCHED_WHOLE = 0
DEF SCHED_ROWS = 1
DEF SCHED_COLS = 2
DEF SCHED_SCATTER = 3    # take_grad's source: bands added at their rows' indices
_SCHEDULES = {"whole": SCHED_WHOLE, "rows": SCHED_ROWS, "columns": SCHED_COLS,
              "scatter": SCHED_SCATTER,
              "chunk": SCHED_WHOLE}   # a reduction's source: run_chunks, never bound here
DEF ARENA_BYTES = 64 << 20   # scratch a thread keeps for its next runs
DEF FEEDS_GATHER = 0         # what a stage fills: a gather's source,
DEF FEEDS_VIEW = 1           # a view read through its row map,
DEF FEEDS_GEMM = 2           # an implicit_dot operand (a 2-D view read with its two steps)
DEF FEEDS_SCATTER = 3        # take_grad's accumulator (read as a dense leaf)


ctypedef struct _Out:
    ms_leaf leaf            # leaf 0 of the program: where results go
    Py_ssize_t rows, cols   # the geometry evaluated (output rows x columns)
    bint contiguous         # every leaf and the output dense: rows run as one long row
    Py_ssize_t gB, gM, gR, gN   # a grouped run (leaf.per_block == 2): see ms_program


# ---- scratch: a per-thread arena ----------------------------------------------------------
cdef class _Arena:
    """The scratch one thread keeps between its runs."""
    cdef list free               # Allocations, free for the next run
    cdef Py_ssize_t bytes        # their total size


_arena = threading.local()


cdef _Arena _thread_arena():
    cdef _Arena a = getattr(_arena, "a", None)
    if a is None:
        a = _Arena.__new__(_Arena)
        a.free = []
        a.bytes = 0
        _arena.a = a
    return a


cdef Allocation _take_scratch(Py_ssize_t nbytes):
    """Memory for a stage's box: a free allocation of this thread's arena that holds
    ``nbytes``, else a new one (fresh memory costs a page fault per 4 KiB)."""
    cdef _Arena a = _thread_arena()
    cdef Allocation m
    cdef Py_ssize_t i
    for i in range(len(a.free)):
        m = <Allocation> a.free[i]
        if m.nbytes >= nbytes:
            del a.free[i]
            a.bytes -= m.nbytes
            return m
    return _allocate(max(nbytes, 64))


cdef Allocation _scratch_for(Allocation m, Py_ssize_t nbytes):
    """``m`` if it holds ``nbytes``, else (``m`` back to the arena) one that does."""
    if m is not None and m.nbytes >= nbytes:
        return m
    _give_scratch(m)
    return _take_scratch(nbytes)


cdef void _give_scratch(Allocation m) except *:
    """Return a run's scratch to this thread's arena (dropped past ARENA_BYTES)."""
    if m is None:
        return
    cdef _Arena a = _thread_arena()
    if a.bytes + m.nbytes <= ARENA_BYTES:
        a.free.append(m)
        a.bytes += m.nbytes


# ---- binding ---------------------------------------------------------------------------
@cython.freelist(16)
cdef class _StageRun:
    """One stage of one run: its producer bound, its scratch, the box it holds."""
    cdef _Bound child
    cdef int schedule
    cdef int consumer            # the consumer's leaf in the parent (1-based, as in lv)
    cdef int pos                 # the gather source position it fills
    cdef int feeds               # FEEDS_GATHER, FEEDS_VIEW (a row map) or FEEDS_GEMM
    cdef object bounds           # bounds(a0, a1) -> (r0, r1) or (r0, r1, c0, c1), or None
    cdef GatherArgs args         # the consumer gather's arguments, or None
    cdef ViewLeaf view           # the consumer view, or None
    cdef Py_ssize_t rows, cols, nd, itemsize
    cdef int type_flag
    cdef Allocation scratch
    cdef Allocation band         # a scatter stage's source rows, a band at a time

    cdef int box(self, Py_ssize_t a0, Py_ssize_t a1, Py_ssize_t *bx) except -1:
        """bx = (r0, r1, c0, c1): the producer's rows and columns that consumer rows
        (columns, for a column band) [a0, a1) read, clipped to the producer."""
        cdef Py_ssize_t r0, r1, c0 = 0, c1 = self.cols
        if self.schedule == SCHED_WHOLE or self.rows == 0 or self.cols == 0:
            bx[0], bx[1], bx[2], bx[3] = 0, self.rows, 0, self.cols
            return 0      # (a bounds form may divide by a size)
        if self.bounds is None:
            self.bounds = self.args.bounds(self.pos)
        got = self.bounds(a0, a1)
        r0, r1 = got[0], got[1]
        if len(got) == 4:
            c0, c1 = got[2], got[3]
        r0 = max(0, min(r0, self.rows))
        r1 = max(r0, min(r1, self.rows))
        c0 = max(0, min(c0, self.cols))
        c1 = max(c0, min(c1, self.cols))
        bx[0], bx[1], bx[2], bx[3] = r0, r1, c0, c1
        return 0

    cdef tuple box_tuple(self, Py_ssize_t a0, Py_ssize_t a1):
        cdef Py_ssize_t bx[4]
        self.box(a0, a1, bx)
        return bx[0], bx[1], bx[2], bx[3]

    cdef Py_ssize_t box_elems(self, Py_ssize_t a0, Py_ssize_t a1) except -1:
        cdef Py_ssize_t bx[4]
        self.box(a0, a1, bx)
        return (bx[1] - bx[0]) * (bx[3] - bx[2])

    cdef int fill(self, _Bound parent, Py_ssize_t a0, Py_ssize_t a1) except -1:
        """Evaluate the box consumer rows (columns) [a0, a1) read into the scratch, and point
        the consumer at it."""
        cdef Py_ssize_t bx[4]
        self.box(a0, a1, bx)
        return self.fill_box(parent, bx[0], bx[1], bx[2], bx[3])

    cdef int scatter(self, _Bound parent) except -1:
        """take_grad's value into the scratch (K rows of the source's columns, zeroed): the
        source evaluated a band of rows at a time, each row added at its index, in
        increasing row (the order of the gather kernel's sums), then the consumer leaf
        pointed at it. The index (in place or a whole stage) was bound and checked."""
        cdef Py_ssize_t K = self.args.shape[0], n = self.rows, cols = self.cols
        cdef Py_ssize_t isz = self.itemsize, i0, i1, band
        cdef Py_ssize_t nbytes = max(K * cols * isz, 1)
        cdef ms_gather *g = &parent.gv[self.consumer]
        cdef _Out o
        cdef int rc = 0
        self.scratch = _scratch_for(self.scratch, nbytes)
        memset(self.scratch.ptr, 0, nbytes)
        band = max(1, min(n, BAND_ELEMS // max(cols, 1)))
        if n and cols:
            self.band = _scratch_for(self.band, band * cols * isz)
            i0 = 0
            while i0 < n:
                i1 = min(n, i0 + band)
                _out_at(&o, self.band.ptr - i0 * cols * isz, cols * isz, isz, n, cols)
                o.contiguous = self.child.dense
                _run_staged(self.child, &o, i0, i1, 0, cols)
                with nogil:
                    rc = ms_scatter_add(self.type_flag, self.scratch.ptr, self.band.ptr,
                                        i1 - i0, cols, g.src[1], g.rowstep[1], g.code[1], i0, K)
                if rc:
                    raise IndexError("take_grad: an index read during evaluation was out of "
                                     "range")
                i0 = i1
        _leaf_at(&parent.lv[self.consumer], self.scratch.ptr, cols * isz, isz, cols)
        return 0

    cdef int fill_box(self, _Bound parent, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t c0,
                      Py_ssize_t c1) except -1:
        """Evaluate the producer's rows [r0, r1) and columns [c0, c1) into the scratch, and
        point the consumer at them."""
        cdef Py_ssize_t width, isz = self.itemsize
        width = max(c1 - c0, 1)
        cdef Py_ssize_t nbytes = max(r1 - r0, 1) * width * isz
        self.scratch = _scratch_for(self.scratch, nbytes)
        cdef char *origin = self.scratch.ptr - r0 * width * isz - c0 * isz
        cdef _Out o
        if r1 > r0 and c1 > c0:
            _out_at(&o, origin, width * isz, isz, self.rows, self.cols)
            o.contiguous = self.child.dense and c0 == 0 and c1 == self.cols
            _run_staged(self.child, &o, r0, r1, c0, c1)
        if self.feeds == FEEDS_GATHER:
            _gather_rows_at(&parent.gv[self.consumer], self.pos, origin, width, isz,
                            self.type_flag, self.nd <= 1)
        elif self.feeds == FEEDS_VIEW:   # its offset and strides address the dense values
            _bind_view_at(&parent.lv[self.consumer], self.view, self.scratch.ptr + self.view.offset)
        else:
            _bind_gemm_view(&parent.lv[self.consumer], self.view,
                            self.scratch.ptr + self.view.offset)
        return 0


@cython.freelist(16)
cdef class _RunFlags:
    cdef int value


@cython.freelist(16)
cdef class _Bound:
    """A plan bound to one run's data: every leaf checked and its address taken once, the
    gathers' arguments and the scalars stored, each stage's producer bound below it. It
    belongs to one run: nothing in it is shared."""
    cdef Plan plan
    cdef ms_leaf *lv
    cdef ms_gather *gv
    cdef char *sv
    cdef bint dense            # every leaf a dense tensor read in place, untransposed
    cdef bint alias            # reads the destination at other positions than it writes
    cdef _RunFlags flags       # the MS_RUN_* flags the run's kernels reported (shared by
                               # every binding of the run: no reference back up, no cycle)
    cdef list stages           # _StageRun per stage (None: the plan has none)
    cdef list bands            # the stages evaluated band by band (None: no stage)
    cdef char *heap            # lv and sv when they do not fit inline
    cdef char *gheap           # gv, for a plan with gathers (inline it would be zeroed on
                               # every run of the far more common plans without)
    cdef ms_leaf lv_inline[INLINE_LEAVES]
    cdef char sv_inline[16 * INLINE_LEAVES]

    def __dealloc__(self):
        free(self.heap)
        free(self.gheap)

    cdef void release(self) except *:
        """Give every stage's scratch back to the arena (the run has ended)."""
        cdef _StageRun st
        if self.stages is None:
            return
        for st in self.stages:
            st.child.release()
            _give_scratch(st.scratch)
            _give_scratch(st.band)
            st.scratch = st.band = None


cdef _Bound _bind(Plan plan, tuple leaves, tuple scalars, object shape, Tensor dst,
                  _Pins *pins, bint top=True, _RunFlags flags=None):
    """Bind ``plan`` to the leaves and scalars of an expression of ``shape`` (_bind_leaves),
    and every stage's producer below it, into a _Bound that the run keeps."""
    cdef _Bound b = _Bound.__new__(_Bound)
    b.plan = plan
    if flags is None:
        flags = _RunFlags.__new__(_RunFlags)
        flags.value = 0
    b.flags = flags
    cdef Py_ssize_t nl = plan.nleaf
    cdef size_t lbytes = (nl + 1) * sizeof(ms_leaf)
    cdef char *mem
    if nl + 1 <= INLINE_LEAVES and plan.nscalar <= INLINE_LEAVES:
        b.lv, b.sv = b.lv_inline, b.sv_inline
    else:
        mem = <char *> malloc(lbytes + 16 * max(plan.nscalar, 1))
        if mem == NULL:
            raise MemoryError()
        b.heap = mem
        b.lv = <ms_leaf *> mem
        b.sv = mem + lbytes
    if plan.gather_binds:
        b.gheap = <char *> malloc((nl + 1) * sizeof(ms_gather))
        if b.gheap == NULL:
            raise MemoryError()
        b.gv = <ms_gather *> b.gheap
    if type(shape) is not Shape:
        shape = as_shape(shape)
    _bind_leaves(plan, leaves, scalars, shape, _rows_of(shape), _axis(shape, -1), dst, pins, top,
                 b.lv, b.gv, b.sv, &b.dense, &b.alias)
    if plan.stage_info:
        _bind_stages(b, leaves, scalars, dst, pins)
    return b


cdef int _bind_leaves(Plan plan, tuple leaves, tuple scalars, object shape, Py_ssize_t rows,
                      Py_ssize_t cols, Tensor dst, _Pins *pins, bint top, ms_leaf *lv,
                      ms_gather *gv, char *sv, bint *dense, bint *alias,
                      Py_ssize_t l0=0, Py_ssize_t s0=0) except -1:
    """Bind ``plan``'s leaves and scalars (an expression of ``shape``: ``rows`` x ``cols``
    flattened) into ``lv``, ``gv`` (its gathers' arguments; NULL when it has none) and
    ``sv``: check every leaf (alive, of the right geometry, unchanged since built), take
    every address, store the scalars.
    Every allocation read is pinned the moment its address is taken (no Python code runs in
    between, so no other thread can free it first) and kept in ``pins``, for the caller to
    unpin when the run ends. ``dense``: every leaf a dense tensor read in place. With
    ``dst``, ``alias``: whether a leaf reads dst's bytes at other positions than it writes
    (at ``top`` a map leaf may read the very elements written; a leaf under a stage is read
    at remapped positions, so any overlap counts). A stage's producer binds its slice of
    the expression's leaves and scalars, from ``l0`` and ``s0`` (_small_run: no slices)."""
    if (len(leaves) != plan.nbind + l0 if top else len(leaves) < plan.nbind + l0) or (
            len(scalars) != plan.nscalar_bind + s0 if top
            else len(scalars) < plan.nscalar_bind + s0):
        raise ValueError(f"plan binds {plan.nbind} leaves and {plan.nscalar_bind} scalars, "
                         f"got {len(leaves) - l0} and {len(scalars) - s0}")
    cdef Py_ssize_t nl = plan.nleaf, k
    dense[0] = True
    alias[0] = False
    cdef Tensor lf
    cdef ViewLeaf vl
    cdef GatherArgs ga
    cdef Py_ssize_t rr, rc, inner = -1
    cdef int role
    cdef frozenset staged_views = plan.staged_leaves
    for k in range(1, nl + 1):
        L = &lv[k]
        L.nmap = 0
        L.per_block = 0
        L.tsize = 0
        L.gather = NULL
        L.ptr = NULL
        L.rowstep = L.colstep = L.inner = 0
        role = plan.leaf_role[k]
        obj = leaves[l0 + plan.leaf_bind[k]]
        if role == ROLE_GSRC or role == ROLE_GVIEW:
            continue                        # read by their gather (below)
        if role == ROLE_GATHER or role == ROLE_SCATTER:
            ga = obj                        # a typed assignment: anything else raises
            if ga.shape != shape:
                raise ShapeError(f"Assignment: {ga.name} of shape {ga.shape} does not "
                                 f"match target {shape}")
            srcs = _gather_sources(leaves, l0, <tuple> plan.gather_binds[k])
            ga.bind(&gv[k], srcs, pins, dst, alias)
            if role == ROLE_GATHER:         # (a scatter's leaf is its stage's values)
                L.gather = &gv[k]
            if ga.index is not None and srcs[ga.index[0]] is not None:
                ga.check_index((<Tensor> srcs[ga.index[0]]).numpy())
            dense[0] = False
            continue
        if role == ROLE_VIEW:
            vl = obj
            if vl.shape != shape:
                raise ShapeError(f"Assignment: view of shape {vl.shape} does not match target "
                                 f"{shape}")
            if view_step_kind(vl.strides[-1], vl.src.itemsize) != plan.leaf_param[k]:
                raise ShapeError("a view's last-axis step does not match its compiled plan")
            dense[0] = False
            if k in staged_views:           # its values come from a stage (bound there)
                continue
            _bind_view(L, vl)
            _pin_now(vl.src.mem, pins)
            if dst is not None and _overlaps(vl.src, dst):
                alias[0] = True
            continue
        if role == ROLE_GEMM_LHS or role == ROLE_GEMM_RHS:
            # an implicit_dot operand: a tensor (or its .T), or a 2-D view (of a tensor, or
            # of a stage's values, bound there); lhs (dst rows, K), rhs (K, dst cols)
            if isinstance(obj, ViewLeaf):
                vl = obj
                rr, rc = vl.shape
                if k in staged_views:
                    L.inner = rc
                else:
                    _bind_gemm_view(L, vl, vl.data())
                    _pin_now(vl.src.mem, pins)
                    alias[0] = alias[0] or (dst is not None and _overlaps(vl.src, dst))
            else:
                lf = <Tensor> obj
                _bind_tensor(L, lf, plan.leaf_t[k], pins)
                rr, rc = (lf.cols, lf.rows) if plan.leaf_t[k] else (lf.rows, lf.cols)
                alias[0] = alias[0] or (dst is not None and _overlaps(lf, dst))
            if role == ROLE_GEMM_LHS:
                if rr != rows:
                    raise ShapeError(f"implicit_dot: lhs of shape {obj.shape} gives {rr} rows, "
                                     f"target {shape} has {rows}")
                inner = rc
            elif rc != cols or rr != inner:
                raise ShapeError(f"implicit_dot The matrix shape do  not match: rhs "
                                 f"{obj.shape} for K={inner} and target {shape}")
            dense[0] = False
            continue
        lf = <Tensor> obj
        _bind_tensor(L, lf, plan.leaf_t[k], pins)
        if plan.leaf_t[k]:              # a tiled run copies it a tile at a time
            L.tsize = lf.itemsize
        rr, rc = (lf.cols, lf.rows) if plan.leaf_t[k] else (lf.rows, lf.cols)
        if rr != rows or rc != cols:
            raise ShapeError(f"Assignment: Shape of Tensors are not consistent with target, "
                             f"eshape: {lf.shape} dshape:{shape}")
        elif plan.leaf_t[k] or not (lf.rows <= 1 or lf.stride == lf.cols):
            dense[0] = False
        if dst is not None and _overlaps(lf, dst) and (
                not top or plan.leaf_t[k] or not _same_elements(lf, dst)):
            alias[0] = True
    cdef int a
    for k in range(plan.nscalar):
        a = plan.scalar_arg[k]
        if a < 0:
            _store_scalar(sv + 16 * k, plan.scalar_code[k], plan.scalar_ccode[k],
                          plan.const_value[k])
        else:
            _store_scalar(sv + 16 * k, plan.scalar_code[k], plan.scalar_ccode[k],
                          scalars[s0 + a])
    return 0


cdef tuple _gather_sources(tuple leaves, Py_ssize_t l0, tuple binds):
    """A gather's sources: the leaf bound at each position (from ``l0`` on in ``leaves``),
    None for a staged one."""
    cdef Py_ssize_t n = len(binds), k, i
    cdef tuple out = PyTuple_New(n)
    for k in range(n):
        i = <Py_ssize_t> binds[k]
        src = leaves[l0 + i] if i >= 0 else None
        _tuple_put(out, k, src)
    return out


cdef int _bind_stages(_Bound b, tuple leaves, tuple scalars, Tensor dst, _Pins *pins) except -1:
    """Bind every stage's producer of ``b`` below it (its leaves and scalars are slices of
    the consumer's)."""
    cdef Plan plan = b.plan
    cdef _StageRun st
    cdef int role
    b.stages = []
    b.bands = []
    cdef Py_ssize_t l0, l1, s0, s1
    for j, info in enumerate(plan.stage_info):
        st = _StageRun.__new__(_StageRun)
        st.schedule, st.consumer, st.pos, l0, l1, s0, s1, st.itemsize, st.type_flag = info
        role = plan.leaf_role[st.consumer]
        if st.schedule == SCHED_SCATTER:
            st.feeds = FEEDS_SCATTER
        elif role == ROLE_GATHER or role == ROLE_SCATTER:   # (a scatter's index)
            st.feeds = FEEDS_GATHER
        else:
            st.feeds = FEEDS_VIEW if role == ROLE_VIEW else FEEDS_GEMM
        if st.feeds == FEEDS_GATHER or st.feeds == FEEDS_SCATTER:
            st.args = leaves[plan.leaf_bind[st.consumer]]
            pshape = st.args.src_shapes[st.pos]
        else:
            st.view = leaves[plan.leaf_bind[st.consumer]]
            pshape = st.view.src.shape      # the dense tensor the view's strides address
        st.nd = len(pshape)
        st.rows, st.cols = _rows_of(pshape), _axis(pshape, -1)
        sub = plan.stage_plans[j]
        st.child = _bind(sub, leaves[l0:l1], scalars[s0:s1], pshape, dst, pins, False,
                         b.flags)
        b.alias = b.alias or st.child.alias
        b.dense = False
        b.stages.append(st)
        if st.schedule == SCHED_ROWS or st.schedule == SCHED_COLS:
            b.bands.append(st)
    return 0


cdef int _fill_whole(_Bound b, bint every) except -1:
    """Evaluate the whole stages of ``b`` and of every producer below it (with ``every``,
    banded stages too: a run that does not band), and check the indices they hold. Runs
    before anything is stored."""
    cdef _StageRun st
    if b.stages is None:
        return 0
    for st in b.stages:
        _fill_whole(st.child, every)
        if every and (st.schedule == SCHED_ROWS or st.schedule == SCHED_COLS):
            st.schedule = SCHED_WHOLE
        if st.schedule == SCHED_WHOLE:
            st.fill(b, 0, 0)
            if st.feeds == FEEDS_GATHER and st.args.index is not None and \
                    st.args.index[0] == st.pos:
                st.args.check_index(_scratch_array(st))
    for st in b.stages:   # after the whole stages: the index a scatter reads is one
        if st.schedule == SCHED_SCATTER:
            st.scatter(b)
    if every:
        b.bands = None
    return 0


cdef object _scratch_array(_StageRun st):
    """A whole stage's values as a numpy array (a copy: the scratch goes back to the arena)."""
    cdef Py_ssize_t n = st.rows * st.cols
    arr = np.empty(n, dtype=dtype_from_flag(st.type_flag))
    if n:
        memcpy(<char *> cnp.PyArray_DATA(arr), st.scratch.ptr, n * st.itemsize)
    return arr


cdef inline void _leaf_at(ms_leaf *L, char *ptr, Py_ssize_t rowstep, Py_ssize_t colstep,
                          Py_ssize_t inner) noexcept:
    """A leaf read (or written) at ptr + y * rowstep + x * colstep, ``inner`` columns a row."""
    L.ptr = ptr
    L.rowstep = rowstep
    L.colstep = colstep
    L.inner = inner
    L.nmap = 0
    L.per_block = 0
    L.tsize = 0
    L.gather = NULL


cdef void _out_at(_Out *o, char *origin, Py_ssize_t rowstep, Py_ssize_t colstep,
                  Py_ssize_t rows, Py_ssize_t cols) noexcept:
    """Results stored element by element: element (y, x) at origin + y*rowstep + x*colstep."""
    _leaf_at(&o.leaf, origin, rowstep, colstep, cols)
    o.rows, o.cols = rows, cols
    o.contiguous = False
    o.gB, o.gM, o.gR, o.gN = 0, 1, 1, 1


cdef void _out_tensor(_Out *o, Tensor t, bint dense_leaves) noexcept:
    _out_at(o, t.mem.ptr + t.offset, t.stride * t.itemsize, t.itemsize, t.rows, t.cols)
    o.contiguous = dense_leaves and _dense(t)


cdef inline bint _dense(Tensor t):
    return t.rows <= 1 or t.stride == t.cols


cdef int _bind_view_at(ms_leaf *L, ViewLeaf v, char *ptr) except -1:
    """Row y of the view starts at ptr plus the sum over leading axes of (index of y) *
    stride."""
    cdef Py_ssize_t nd = len(v.shape), a, div = 1
    L.ptr = ptr
    L.colstep = v.strides[nd - 1]
    L.rowstep = 0
    L.inner = v.shape[nd - 1]
    L.per_block = 0
    L.tsize = 0
    L.gather = NULL
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


cdef int _bind_view(ms_leaf *L, ViewLeaf v) except -1:
    return _bind_view_at(L, v, v.data())


cdef int _bind_tensor(ms_leaf *L, Tensor t, bint transposed, _Pins *pins) except -1:
    """A tensor read in place at (y, x), or at (x, y) when transposed; pinned at once."""
    L.ptr = t.data()
    _pin_now(t.mem, pins)
    if transposed:
        L.rowstep, L.colstep, L.inner = t.itemsize, t.stride * t.itemsize, t.rows
    else:
        L.rowstep, L.colstep, L.inner = t.stride * t.itemsize, t.itemsize, t.cols
    return 0


cdef int _bind_gemm_view(ms_leaf *L, ViewLeaf v, char *ptr) except -1:
    """A 2-D view as an implicit_dot operand: row y at ptr + y * rowstep, columns by colstep."""
    _leaf_at(L, ptr, v.strides[0], v.strides[1], v.shape[1])
    return 0


cdef inline int _pin_now(Allocation m, _Pins *pins) except -1:
    """Pin ``m`` right after its address was taken, before any Python code can run and
    another thread free or resize it (and keep it, to unpin when the run ends)."""
    if m is None:
        return 0
    if m.device_mem is not None:     # the CPU evaluates: GPU bytes are not host memory
        raise DeviceError("a gpu tensor in an evaluation on the cpu: every operand and the "
                          "destination must be on one device (ms.copy between devices)")
    m.pin()
    if pins.n < PINS_INLINE:
        Py_INCREF(m)
        pins.items[pins.n] = <PyObject *> m
        pins.n += 1
        return 0
    if pins.extra == NULL:
        more = []
        Py_INCREF(more)
        pins.extra = <PyObject *> more
    (<list> pins.extra).append(m)
    return 0


cdef void _unpin(_Pins *pins) noexcept:
    """Unpin everything ``pins`` holds and drop its references (it is empty after)."""
    cdef Allocation m
    cdef int i
    for i in range(pins.n):
        m = <Allocation> pins.items[i]
        m.unpin()
        Py_DECREF(m)
    pins.n = 0
    if pins.extra != NULL:
        more = <list> pins.extra
        for x in more:
            (<Allocation> x).unpin()
        Py_DECREF(more)
        pins.extra = NULL


# ---- evaluation ----------------------------------------------------------------------------
cdef bint _is_small(Plan plan, int depth) except -1:
    """Whether every stage of ``plan``, and of the plans below it, fills a gather's source or
    a view (the stages a small run can hold: not a scatter, a chunk or an implicit_dot
    operand), at most SMALL_STAGES a level and SMALL_DEPTH levels deep, each level's leaves
    and scalars fitting the stack. Whether the stages are small enough is known only when
    a run binds them. Cached in ``plan.small``."""
    cdef bint ok = (depth < SMALL_DEPTH and len(plan.stage_info) <= SMALL_STAGES
                    and plan.nleaf + 1 <= INLINE_LEAVES and plan.nscalar <= INLINE_LEAVES)
    cdef int consumer
    if ok:
        for j, info in enumerate(plan.stage_info):
            consumer = info[1]
            if (info[0] == SCHED_SCATTER or consumer < 1
                    or plan.leaf_role[consumer] not in (ROLE_GATHER, ROLE_VIEW)
                    or not _is_small(<Plan> plan.stage_plans[j], depth + 1)):
                ok = False
                break
    if depth == 0:
        plan.small = ok
    return ok


cdef int _small_run(Plan plan, tuple leaves, tuple scalars, object shape, Py_ssize_t rows,
                    Py_ssize_t cols, Tensor dst, _Pins *pins, bint top, int *flags, _Out *o,
                    int depth, Py_ssize_t lbase=0, Py_ssize_t sbase=0) except -1:
    """Evaluate ``plan`` (_is_small) into ``o`` with everything bound on the C stack: each
    stage's producer (of at most SMALL_STAGE elements) evaluated whole into scratch of its
    own, below its consumer, before anything is stored; then ``plan`` itself. What a _Bound,
    its _StageRuns and the arena cost is a small statement's largest part. Returns
    SMALL_DONE; SMALL_NOT when a stage is larger or reads an index (the caller runs the plan
    through _bind: nothing was stored); SMALL_ALIAS when a leaf reads the destination at
    other positions than written (nothing stored). Allocations read are pinned in ``pins``.
    A stage's producer reads its slice of ``leaves`` and ``scalars`` from ``lbase`` and
    ``sbase`` on (no slice is made)."""
    cdef ms_leaf lv[INLINE_LEAVES]
    cdef ms_gather gv[INLINE_LEAVES]
    cdef char sv[16 * INLINE_LEAVES]
    cdef char *scratch[SMALL_STAGES]
    cdef bint owned[SMALL_STAGES]         # scratch[j] malloc'd, not in the arena
    cdef char arena[SMALL_ARENA + 64]     # small stages' scratch: a malloc cost 10% of a run
    cdef char *bump = <char *> ((<size_t> arena + 63) & ~(<size_t> 63))
    cdef char *arena_end = bump + SMALL_ARENA
    cdef size_t nbytes
    cdef bint dense, alias
    cdef Py_ssize_t j, nd, n, srows, scols, isz, l0, l1, s0, s1
    cdef Py_ssize_t nst = len(plan.stage_info)
    cdef int schedule, consumer, pos, type_flag, done = SMALL_DONE
    cdef GatherArgs args = None
    cdef ViewLeaf view = None
    cdef _Out so
    _bind_leaves(plan, leaves, scalars, shape, rows, cols, dst, pins, top, lv, gv, sv, &dense,
                 &alias, lbase, sbase)
    if alias:
        return SMALL_ALIAS
    for j in range(nst):
        scratch[j] = NULL
        owned[j] = False
    try:
        for j in range(nst):
            schedule, consumer, pos, l0, l1, s0, s1, isz, type_flag = plan.stage_info[j]
            if plan.leaf_role[consumer] == ROLE_GATHER:
                args = <GatherArgs> leaves[lbase + plan.leaf_bind[consumer]]
                if args.index is not None and args.index[0] == pos:
                    return SMALL_NOT      # an index a stage holds: checked by _fill_whole
                pshape = args.src_shapes[pos]
            else:
                view = <ViewLeaf> leaves[lbase + plan.leaf_bind[consumer]]
                pshape = view.src.shape   # the dense tensor the view's strides address
            nd = len(pshape)
            srows, scols = _rows_of(pshape), _axis(pshape, nd - 1)
            n = srows * scols
            if n > SMALL_STAGE:
                return SMALL_NOT
            nbytes = (<size_t> (n * isz) + 63) & ~(<size_t> 63)   # keeps the next aligned
            if <size_t> (arena_end - bump) >= nbytes:
                scratch[j] = bump
                bump += nbytes
            else:
                scratch[j] = <char *> ms_aligned_malloc(max(nbytes, 64))
                if scratch[j] == NULL:
                    raise MemoryError()
                owned[j] = True
            _out_at(&so, scratch[j], scols * isz, isz, srows, scols)
            so.contiguous = True          # (the producer's leaves say whether they are)
            done = _small_run(<Plan> plan.stage_plans[j], leaves, scalars, pshape, srows,
                              scols, dst, pins, False, flags, &so, depth + 1, lbase + l0,
                              sbase + s0)
            if done != SMALL_DONE:
                return done
            if plan.leaf_role[consumer] == ROLE_GATHER:
                _gather_rows_at(&gv[consumer], pos, scratch[j], scols, isz, type_flag, nd <= 1)
            else:
                _bind_view_at(&lv[consumer], view, scratch[j] + view.offset)
        o.contiguous = o.contiguous and dense
        _exec_bound(plan, lv, sv, flags, o, 0, rows, 0, cols)
    finally:
        for j in range(nst):
            if owned[j]:
                ms_aligned_free(scratch[j])
    return SMALL_DONE


cdef int _run_staged(_Bound b, _Out *o, Py_ssize_t y_start, Py_ssize_t y_end,
                     Py_ssize_t x_start, Py_ssize_t x_end) except -1:
    """Rows [y_start, y_end) and columns [x_start, x_end) of ``b`` into ``o``: directly when
    no stage of ``b`` bands, else a band at a time, each band's boxes evaluated first. A
    stage banded by output columns (im2col) makes the bands column ranges of these rows;
    the row-banded stages then take these rows whole."""
    if y_end <= y_start or x_end <= x_start:
        return 0
    if not b.bands:
        return _exec(b, o, y_start, y_end, x_start, x_end)
    cdef _StageRun st
    cdef Py_ssize_t band, y0, y1, elems, x0, x1, width
    if (y_end - y_start) * (x_end - x_start) <= BAND_ELEMS:
        # a small output: one band, unless a box it reads would exceed a band's size
        for st in b.bands:
            if st.rows * st.cols > SMALL_STAGE and (
                    st.box_elems(y_start, y_end) if st.schedule == SCHED_ROWS
                    else st.box_elems(x_start, x_end)) > BAND_ELEMS:
                break
        else:
            for st in b.bands:
                if st.rows * st.cols <= SMALL_STAGE:   # whole: cheaper than its bounds
                    st.fill_box(b, 0, st.rows, 0, st.cols)
                elif st.schedule == SCHED_ROWS:
                    st.fill(b, y_start, y_end)
                else:
                    st.fill(b, x_start, x_end)
            return _exec(b, o, y_start, y_end, x_start, x_end)
    cdef list by_cols = [st for st in b.bands if st.schedule == SCHED_COLS]
    if by_cols:
        for st in b.bands:
            if st.schedule == SCHED_ROWS:
                st.fill(b, y_start, y_end)
        width = max(1, BAND_ELEMS // max(y_end - y_start, 1))
        x0 = x_start
        while x0 < x_end:
            x1 = _widen(by_cols, x0, _capped(by_cols, x0, min(x_end, x0 + width)), x_end)
            for st in by_cols:
                st.fill(b, x0, x1)
            _exec(b, o, y_start, y_end, x0, x1)
            x0 = x1
        return 0
    band = max(1, BAND_ELEMS // max(x_end - x_start, 1))
    for st in b.bands:   # fewer rows a band when a reader reads more source than it writes
        y1 = min(y_end, y_start + band)
        elems = st.box_elems(y_start, y1)
        if elems > BAND_ELEMS and y1 > y_start:
            band = max(1, min(band, BAND_ELEMS * (y1 - y_start) // elems))
    y0 = y_start
    while y0 < y_end:
        y1 = _widen(b.bands, y0, _capped(b.bands, y0, min(y_end, y0 + band)),
                    min(y_end, y0 + 2 * band))
        for st in b.bands:
            st.fill(b, y0, y1)
        _exec(b, o, y0, y1, x_start, x_end)
        y0 = y1
    return 0


cdef Py_ssize_t _capped(list bands, Py_ssize_t y0, Py_ssize_t y1) except -1:
    """The last row, at most ``y1``, of a band from ``y0`` whose boxes hold at most
    BAND_ELEMS elements each (or what one row reads): a band that would cross into a
    source range that reads much more (col2im's next image: every channel) stops before."""
    cdef _StageRun st
    limits = [max(BAND_ELEMS, st.box_elems(y0, y0 + 1)) for st in bands]
    return _last_row(bands, y0, y0 + 1, y1, limits, True)


cdef Py_ssize_t _widen(list bands, Py_ssize_t y0, Py_ssize_t y1, Py_ssize_t most) except -1:
    """The last row, up to ``most``, of a band from ``y0`` that reads no source row or
    column more than [y0, y1) does: a band then ends where the source's rows do (a whole
    channel of col2im) and the next band recomputes none of them."""
    cdef _StageRun st
    return _last_row(bands, y0, y1, most, [st.box_tuple(y0, y1) for st in bands], False)


cdef bint _reads_within(list bands, Py_ssize_t y0, Py_ssize_t y, list refs,
                        bint by_size) except -1:
    """Whether a band [y0, y) reads, for every stage k, a box of at most refs[k] elements
    (``by_size``) or the very box refs[k]."""
    cdef Py_ssize_t k
    for k in range(len(bands)):
        if by_size:
            if (<_StageRun> bands[k]).box_elems(y0, y) > refs[k]:
                return False
        elif (<_StageRun> bands[k]).box_tuple(y0, y) != refs[k]:
            return False
    return True


cdef Py_ssize_t _last_row(list bands, Py_ssize_t y0, Py_ssize_t lo, Py_ssize_t hi,
                          list refs, bint by_size) except -1:
    """The largest y in [lo, hi] with _reads_within(y), which holds at lo and, once false,
    stays false. The common cases cost one or two boxes a stage: all of [lo, hi] holds,
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


cdef inline int _exec(_Bound b, _Out *o, Py_ssize_t y0, Py_ssize_t y1, Py_ssize_t x0,
                      Py_ssize_t x1) except -1:
    return _exec_bound(b.plan, b.lv, b.sv, &b.flags.value, o, y0, y1, x0, x1)


cdef int _exec_bound(Plan plan, ms_leaf *lv, char *sv, int *flags, _Out *o, Py_ssize_t y0,
                     Py_ssize_t y1, Py_ssize_t x0, Py_ssize_t x1) except -1:
    """Run ``b``'s instructions over rows [y0, y1) and columns [x0, x1) of ``o``'s geometry
    (rows and columns keep their numbers). Releases the GIL when the run is large enough to
    take threads: every allocation it reads was pinned when its address was taken
    (_bind). An integer division by zero is recorded in the run's flags (_RunFlags), and
    reported once the run has stored everything (_warn_flags)."""
    cdef ms_program prog
    cdef Py_ssize_t rows = y1 - y0, cols = x1 - x0, n = rows * cols
    cdef int rc
    cdef bint per_block = o.leaf.per_block != 0
    if n <= 0 and o.gB == 0:
        return 0
    lv[0] = o.leaf
    prog.ninst = plan.ninst
    prog.inst = plan.inst
    prog.leaf = lv
    prog.scalars = sv
    prog.nreg = plan.nreg
    prog.reg_bytes = (RBLOCK if per_block and o.gB == 0 else BLOCK) * 8
    prog.gB, prog.gM, prog.gR, prog.gN = o.gB, o.gM, o.gR, o.gN
    if o.contiguous and x0 == 0 and x1 == o.cols:
        # dense rows: one long row, its columns numbered from the band's first element
        prog.y0, prog.rows = 0, 1
        prog.x0, prog.cols = y0 * o.cols, y1 * o.cols
    else:
        prog.y0, prog.rows = y0, rows
        prog.x0, prog.cols = x0, x1
    # a band is a share of a larger assignment: threads pay off on smaller runs
    banded = rows != o.rows or cols != o.cols
    prog.nthreads = max(1, min(_num_threads, n // _share_of(
        n, (plan.nleaf + 1) * plan.dst_size,   # (leaves counted at the destination's size)
        4096 if banded else MIN_PER_THREAD)))
    # Registers must fit in L1, so programs that use them go block by block; a fully
    # fused program has none and takes whole rows, one share of them per thread.
    if o.gB > 0:
        # a row's value in registers a call up to GROUP_BLOCK (a 1024-wide row in blocks of
        # BLOCK took 4 kernel calls, 1.5x the time), and the gN rows a fold takes a call
        prog.block = max(min(GROUP_BLOCK, max(BLOCK, prog.cols)) if plan.nreg
                         else max(GATHER_BLOCK, prog.cols), o.gN * prog.cols)
        prog.reg_bytes = prog.block * 8
    elif per_block:   # a reduction's blocks never depend on the thread count
        prog.block = RBLOCK
    elif plan.nreg:
        prog.block = BLOCK
    elif prog.nthreads == 1:   # (narrow rows: up to GATHER_BLOCK elements of whole rows
        prog.block = max(GATHER_BLOCK, cols)    # a kernel call; a wide row in one call)
    else:   # and at least 4 calls a thread: 32K elements on 16 threads were 2 calls
        prog.block = max(BLOCK, min(GATHER_BLOCK, (n + 4 * prog.nthreads - 1)
                                                  // (4 * prog.nthreads)))
    prog.tile = 0
    prog.nleaf = plan.nleaf
    if plan.reads_t and o.gB == 0 and not per_block and prog.rows > 1 and n >= TILE_MIN:
        prog.block = min(prog.block, TILE_COLS)
        prog.tile = max(2, TILE_BYTES // plan.dst_size)
        if prog.cols - prog.x0 < TILE_COLS:   # narrow rows: as many elements a tile, taller
            prog.tile = prog.tile * TILE_COLS // max(1, prog.cols - prog.x0) // 4 * 4
    if prog.nthreads == 1 and n < MIN_PER_THREAD:   # too short to release the GIL
        rc = ms_run_program(&prog)
    else:
        with nogil:
            rc = ms_run_program(&prog)
    if rc & MS_RUN_NOMEM:
        raise MemoryError("could not allocate the per-thread registers of a plan")
    if rc & MS_RUN_GATHER_OOB:   # kernels never read out of range; indices were checked first
        raise IndexError("an index read from a tensor was out of range during evaluation")
    flags[0] |= rc
    return 0


cdef int _warn_flags(int flags) except -1:
    """What a finished run reports without failing: an integer division by zero."""
    if flags & MS_RUN_IDIV0:
        warnings.warn("integer division by zero (the result is 0 there)", RuntimeWarning,
                      stacklevel=3)
    return 0


cdef class _Run:
    """One run of a plan: ``bound`` is the plan bound to the run's data, with every
    allocation it reads (and the destination's) pinned from the moment its address was
    taken. ``_open_run`` makes it; ``_close_run`` unpins, returns the stages' scratch to the
    arena and, after a run that ended normally, warns what it reported (an integer division
    by zero) once. Callers: ``r = _open_run(...)``, then the body in ``try`` with
    ``_close_run(r, False)`` on an exception and ``_close_run(r, True)`` after it."""
    cdef readonly _Bound bound
    cdef _Pins pins

    def __dealloc__(self):
        _unpin(&self.pins)     # (a run always closes first; this is a safety net)


cdef _Run _open_run(Plan plan, tuple leaves, tuple scalars, shape, Tensor dst=None,
                    bint alias_check=False):
    cdef _Run r = _Run.__new__(_Run)
    r.pins.n = 0
    r.pins.extra = NULL
    try:
        if dst is not None:
            dst.data()
            _pin_now(dst.mem, &r.pins)
        r.bound = _bind(plan, leaves, scalars, shape, dst if alias_check else None, &r.pins)
    except BaseException:
        _unpin(&r.pins)
        raise
    return r


cdef int _close_run(_Run r, bint ended) except -1:
    _unpin(&r.pins)
    r.bound.release()
    if ended:
        _warn_flags(r.bound.flags.value)
    return 0


def scratch_held():
    """The sizes in bytes of the scratch this thread's arena keeps for its next runs (each
    one a stage's largest box of a run that ended): for tests and diagnostics."""
    return sorted((<Allocation> m).nbytes for m in _thread_arena().free)


def release_scratch():
    """Free the scratch this thread's arena keeps."""
    cdef _Arena a = _thread_arena()
    a.free = []
    a.bytes = 0


# ---- a product's operand, a panel of columns at a time ---------------------------------------
cdef class ColumnPanels:
    """The columns of a 2-D expression evaluated a panel at a time into one scratch block
    (``dot(w, unpack_patch2col(x))``: the product reads each panel from cache and the whole
    column matrix never exists). ``open_panels`` binds the plan once and pins what it reads;
    ``fill(x0, x1)`` evaluates columns [x0, x1) into the block, dense rows of x1 - x0;
    ``close`` (or leaving ``with panels:``) unpins and gives the block back to the thread's
    arena."""

    cdef char *fill(self, Py_ssize_t x0, Py_ssize_t x1) except NULL:
        cdef _Out o
        cdef Py_ssize_t isz = self.itemsize
        if not (0 <= x0 < x1 <= self.cols and x1 - x0 <= self.width) or self.run is None:
            raise ValueError(f"ColumnPanels.fill({x0}, {x1}): columns of at most {self.width} "
                             f"within [0, {self.cols}) of an open run")
        # element (y, x) at scratch + y * (x1 - x0) + (x - x0): the columns keep their numbers
        _out_at(&o, self.scratch.ptr - x0 * isz, (x1 - x0) * isz, isz, self.rows, self.cols)
        o.contiguous = False
        _run_staged((<_Run> self.run).bound, &o, 0, self.rows, x0, x1)
        return self.scratch.ptr

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close(kind is None)
        return False

    def close(self, bint ended=True):
        if self.run is not None:
            r, self.run = self.run, None
            _close_run(<_Run> r, ended)
        if self.scratch is not None:
            _give_scratch(self.scratch)
            self.scratch = None


def open_panels(Plan plan, tuple leaves, tuple scalars, shape, Py_ssize_t width):
    """A ColumnPanels of the 2-D expression (``plan``, compiled for a destination of its
    dtype, over ``leaves`` and ``scalars``) of ``shape``, panels of at most ``width``
    columns. Its whole stages (an index a gather reads) are evaluated, and checked, now.
    None when a stage of ``plan`` goes by rows: every panel would evaluate it again (the
    caller evaluates the expression into a temporary instead)."""
    if len(shape) != 2 or width < 1:
        raise ValueError(f"open_panels: a 2-D expression and a positive width, got {shape} "
                         f"and {width}")
    for info in plan.stage_info:
        if info[0] == SCHED_ROWS:   # its rows would be evaluated again for every panel
            return None
    cdef ColumnPanels p = ColumnPanels.__new__(ColumnPanels)
    p.rows, p.cols = _axis(shape, 0), _axis(shape, 1)
    p.width = max(1, min(width, p.cols))
    p.itemsize = _CODE_SIZE[plan.program.dst_code]
    p.run = _open_run(plan, leaves, scalars, shape)
    try:
        _fill_whole((<_Run> p.run).bound, False)
        p.scratch = _take_scratch(max(p.rows * p.width * p.itemsize, 64))
    except BaseException:
        p.close(False)
        raise
    return p
