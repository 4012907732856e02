# A reduction in registers (included by _core.pyx): its recipe, the run of one, and the
# compiled statement path ``y[:] = sum_rows(x)``. reduce.py decides how a reduction of an
# expression runs (its "registers" schedule: the plan, the axis, the rows a call) once per
# reduction node and source shape, and writes the decision down as a ReduceRecipe;
# run_recipe executes one for reduce.py's fused path and reduce_fast for a statement, so
# both routes give the same bits by construction.

cdef extern from "mshadow/half.h":
    uint16_t ms_float_to_half(float f) nogil


cdef class ReduceRecipe:
    """How a reduction over an expression of ``shape`` runs in registers.

    ``by_rows``: the last axis is reduced (run_reduce: per-block partials of each row,
    added in float64, by numpy's pairwise sum where a row has more than one block); else
    the leading axis ``first`` (run_accumulate: ``rows_a_call`` rows a call into one
    accumulator row per ``rows_per_group``, then the groups added in order). The partial
    results, of shape ``partial`` (given, or the shape less the reduced axis), are then
    reduced over the axes ``rest``: a float sum
    (``float_sum``: numpy's add in float64) in C, the kept axes as K between P leading
    and Q trailing elements, summed over p then q in order; any other reduction by
    ``ufunc`` in ``wide``. ``merged``: the source's leaves, contiguous tensors of
    ``src_shape``, are read as ``shape`` (reduce.py _rows_merged). The values are finished
    in the compute type ``cdt`` (cast, scaled) and stored as ``dtype``. ``numpy_steps``: a step
    calls numpy (not a float sum, a row of several blocks, an integer finish); the
    statement path leaves those to reduce.py, under its errstate."""
    cdef readonly Plan plan
    cdef readonly bint by_rows, merged, float_sum, numpy_steps
    cdef readonly object shape, src_shape     # Shapes
    cdef readonly tuple partial, rest, out_shape
    cdef readonly Py_ssize_t first, rows_per_group, rows_a_call
    cdef readonly object init, ufunc, wide, cdt, dtype
    cdef Py_ssize_t P, K, Q
    cdef unsigned long long gen

    def __init__(self, Plan plan not None, bint by_rows, tuple shape, tuple src_shape,
                 bint merged, Py_ssize_t first, Py_ssize_t rows_per_group,
                 Py_ssize_t rows_a_call, init, ufunc, wide, cdt, dtype, tuple rest,
                 tuple out_shape, tuple partial=None):
        cdef Py_ssize_t nd = len(shape), k
        if by_rows:
            first = nd - 1
        if nd < 2 and not by_rows or not 0 <= first < nd:
            raise ValueError(f"ReduceRecipe: axis {first} of {shape}")
        # (Shapes: binding a plain tuple makes one, in Python, every run)
        self.plan, self.by_rows = plan, by_rows
        self.shape, self.src_shape = _tuple_of(Shape, shape), _tuple_of(Shape, src_shape)
        self.merged, self.first, self.rows_per_group = merged, first, rows_per_group
        self.rows_a_call, self.init, self.ufunc = rows_a_call, init, ufunc
        self.wide, self.cdt, self.dtype = np.dtype(wide), np.dtype(cdt), np.dtype(dtype)
        self.partial = tuple(shape[:first]) + tuple(shape[first + 1:])
        if partial is not None:     # the same partial results, read with more axes
            if _prod(partial) != _prod(self.partial):
                raise ValueError(f"ReduceRecipe: partial results {self.partial} cannot be "
                                 f"read as {partial}")
            self.partial = partial
        self.rest, self.out_shape = rest, out_shape
        self.float_sum = ufunc is np.add and self.wide == np.float64
        kept = [k for k in range(len(self.partial)) if k not in rest] or [0]
        if any(k in rest for k in range(kept[0], kept[-1] + 1)):
            raise ValueError(f"ReduceRecipe: the kept axes of {self.partial} (all but {rest}) "
                             f"must follow one another")
        self.P = _prod(self.partial[:kept[0]])
        self.K = _prod(self.partial[kept[0]:kept[-1] + 1])
        self.Q = _prod(self.partial[kept[-1] + 1:])
        self.numpy_steps = (not self.float_sum or (by_rows and shape[nd - 1] > RBLOCK)
                            or (self.cdt, self.dtype) not in _FINISH_C)
        self.gen = _plan_gen


ctypedef fused _sum_real:
    float
    double


cdef void _keep_sum(const _sum_real *a, double *out, Py_ssize_t P, Py_ssize_t K,
                    Py_ssize_t Q) noexcept nogil:
    """out[k] = the sum of a[p, k, q] over p, then q, in order, in float64 (from the first)."""
    cdef Py_ssize_t p, k, q
    cdef const _sum_real *row
    for k in range(K):
        out[k] = <double> a[k * Q]
    for p in range(P):
        for k in range(K):
            row = a + (p * K + k) * Q
            for q in range(1 if p == 0 else 0, Q):
                out[k] = out[k] + <double> row[q]


cdef object _summed(object partial, ReduceRecipe rc):
    """A float sum's partial results (of a float compute type, C-contiguous, P x K x Q) summed
    over P and Q: a float64 array of K values (``partial`` itself when float64 and P and Q
    are 1)."""
    cdef cnp.npy_intp k = rc.K
    if rc.P == 1 and rc.Q == 1 and (<cnp.ndarray> partial).dtype.num == cnp.NPY_DOUBLE:
        return partial
    out = cnp.PyArray_EMPTY(1, &k, cnp.NPY_DOUBLE, 0)
    cdef double *o = <double *> cnp.PyArray_DATA(out)
    cdef char *a = <char *> cnp.PyArray_DATA(partial)
    cdef bint single = (<cnp.ndarray> partial).dtype.itemsize == sizeof(float)
    with nogil:
        if single:
            _keep_sum(<const float *> a, o, rc.P, rc.K, rc.Q)
        else:
            _keep_sum(<const double *> a, o, rc.P, rc.K, rc.Q)
    return out


cdef object _run_recipe(ReduceRecipe rc, tuple leaves, tuple scalars):
    if rc.by_rows:
        parts = _reduce_parts(rc.plan, rc.shape, leaves, scalars, True)
        if rc.float_sum and not rc.numpy_steps:     # one block a row: its partial is the row's
            return _summed(parts, rc)
        rows_v = rc.ufunc.reduce(parts.reshape(rc.partial + (-1,)), axis=-1, dtype=rc.wide)
    else:
        acc = _accumulate(rc.plan, rc.shape, leaves, scalars, rc.first, rc.rows_per_group,
                          rc.init, rc.rows_a_call)
        if rc.float_sum:
            return _summed(_grouped(acc), rc)
        rows_v = rc.ufunc.reduce(acc, axis=2, dtype=rc.wide).reshape(rc.partial)
    if rc.float_sum:
        return _summed(np.ascontiguousarray(rows_v), rc)
    return rc.ufunc.reduce(rows_v, axis=rc.rest, dtype=rc.wide) if rc.rest else rows_v


def run_recipe(ReduceRecipe rc, tuple leaves, tuple scalars):
    """The reduction ``rc`` of an expression bound to ``leaves`` and ``scalars`` (read as
    ``rc.shape``): its values in ``rc.wide``, shaped ``rc.out_shape``. (A statement's
    caller enters numpy's errstate for the numpy steps.)"""
    return _run_recipe(rc, leaves, scalars).reshape(rc.out_shape)


cdef void _scaled_f32(const double *v, float *o, Py_ssize_t n, float s, bint scale) noexcept nogil:
    cdef Py_ssize_t i
    cdef float x
    for i in range(n):
        x = <float> v[i]
        o[i] = x * s if scale else x


cdef void _scaled_f16(const double *v, uint16_t *o, Py_ssize_t n, float s, bint scale) noexcept nogil:
    cdef Py_ssize_t i
    cdef float x
    for i in range(n):
        x = <float> v[i]
        o[i] = ms_float_to_half(x * s if scale else x)


cdef void _scaled_f64(const double *v, double *o, Py_ssize_t n, double s, bint scale) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        o[i] = v[i] * s if scale else v[i]


# (compute, storage) dtypes _finish_c takes: every float dtype's (the dtype table's: float16
# computes and scales in its compute type), from values in float64
_FINISH_C = {(np.dtype(_NP_BY_CODE[d.compute]), np.dtype(_NP_BY_CODE[d.code]))
             for d in _DTYPES if d.is_float}


def finish_values(values, cdt, scale, dtype):
    """A reduction's ``values`` cast to its compute type ``cdt``, times ``scale`` in it, as
    ``dtype``: a fresh C-contiguous array (numpy's astype(cdt), multiply in cdt,
    astype(dtype); in C for float64 values of a float dtype (_FINISH_C), the same
    roundings). float16: a value past 65504 is inf (reduce.py runs this under errstate)."""
    cdt, dtype = np.dtype(cdt), np.dtype(dtype)
    if (type(values) is np.ndarray and values.dtype == np.float64
            and (cdt, dtype) in _FINISH_C):
        return _finish_c(values, scale, dtype, values.shape)
    res = np.ascontiguousarray(values.astype(cdt))
    if scale != 1:
        np.multiply(res, np.asarray(scale).astype(cdt), out=res)
    return res.astype(dtype, copy=False)


cdef object _finish_c(object values, object scale, cnp.dtype dtype, tuple shape):
    """finish_values of float64 values into a float dtype (by its size; a 2-byte one through
    its 4-byte compute type), shaped ``shape`` (as many elements)."""
    cdef cnp.ndarray v = <cnp.ndarray> values
    if not cnp.PyArray_IS_C_CONTIGUOUS(v):
        v = np.ascontiguousarray(v)
    cdef int nd = len(shape), k
    cdef cnp.npy_intp dims[64]      # (numpy's most dimensions)
    for k in range(nd):
        dims[k] = shape[k]
    out = cnp.PyArray_EMPTY(nd, dims, dtype.num, 0)
    cdef const double *src = <const double *> cnp.PyArray_DATA(v)
    cdef char *o = <char *> cnp.PyArray_DATA(out)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(v)
    if cnp.PyArray_SIZE(out) != n:
        raise ValueError(f"finish: {n} values into the shape {shape}")
    cdef double s = scale
    cdef bint scaled = scale != 1
    cdef int size = (<cnp.dtype> dtype).itemsize
    with nogil:
        if size == 4:
            _scaled_f32(src, <float *> o, n, <float> s, scaled)
        elif size == 2:
            _scaled_f16(src, <uint16_t *> o, n, <float> s, scaled)
        else:
            _scaled_f64(src, <double *> o, n, s, scaled)
    return out


# ---- the last axis of narrow rows: a reducer's block kernel, rows a call ----------------------
def has_kernel(str name):
    """Whether the compiled kernels include ``name`` (reduce_sum_f32, ...)."""
    return name in _KERNELS


def reduce_rows(str kernel, src, out):
    """Each row of ``src`` reduced alone along its last axis by the reducer's block kernel
    ``kernel`` (``reduce_<block>_<code>``: the registers schedule's fold of a block, so a row
    gets those bits), into ``out``, a C-contiguous 1-D array of the kernel's type, one
    element a row. ``src``: a 2-D numpy array or a cpu Tensor (its leading axes are the
    rows), of the kernel's type. A kernel call takes 256 rows (plan_exec.h ms_reduce_rows);
    enough rows are shared among threads."""
    fn = _KERNELS.get(kernel)
    code = kernel.rsplit("_", 1)[-1]
    if fn is None or not kernel.startswith("reduce_") or code not in _NP_BY_CODE:
        raise ValueError(f"reduce_rows: {kernel!r} is not a reducer's block kernel "
                         f"(reduce_<block>_<code>)")
    dtype = np.dtype(_NP_BY_CODE[code])
    if (type(out) is not np.ndarray or out.ndim != 1 or out.dtype != dtype
            or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"reduce_rows: out must be a writeable C-contiguous 1-D {dtype} array")
    cdef Tensor t = None
    cdef cnp.ndarray a = None
    cdef Py_ssize_t rows, n, ra, sa, total
    if isinstance(src, Tensor):
        t = <Tensor> src
        if t.device is not cpu or _NP_BY_CODE[_CODE_BY_FLAG[t.type_flag]] != dtype:
            raise ValueError(f"reduce_rows: a cpu tensor of {dtype} expected")
        rows, n = t.rows, t.cols
        ra, sa = t.stride * t.itemsize, t.itemsize
    elif type(src) is np.ndarray and src.ndim == 2 and src.dtype == dtype:
        a = <cnp.ndarray> src
        rows, n = a.shape[0], a.shape[1]
        ra, sa = a.strides[0], a.strides[1]
    else:
        raise ValueError(f"reduce_rows: src must be a 2-D {dtype} array or a cpu tensor")
    if out.shape[0] != rows:
        raise ValueError(f"reduce_rows: {rows} rows into {out.shape[0]} values")
    total = rows * n
    if rows == 0:
        return out
    cdef int nt = max(1, min(_num_threads, total // _share_of(total, dtype.itemsize,
                                                              MIN_PER_THREAD)))
    cdef char *o = <char *> cnp.PyArray_DATA(out)
    cdef Py_ssize_t so = dtype.itemsize
    cdef ms_loop_fn f = <ms_loop_fn> <size_t> fn
    cdef const char *base
    cdef _Pins pins
    pins.n = 0
    pins.extra = NULL
    if t is not None:
        base = t.data()
        _pin_now(t.mem, &pins)     # (at once: no Python runs before the pin)
    else:
        base = <const char *> cnp.PyArray_DATA(a)
    try:
        if total < MIN_PER_THREAD:
            ms_reduce_rows(f, base, rows, n, ra, sa, o, so, 1)
        else:
            with nogil:
                ms_reduce_rows(f, base, rows, n, ra, sa, o, so, nt)
    finally:
        _unpin(&pins)
    return out


# ---- the statement path: dst <saver> a reduction, from _assign ----------------------------------
cdef object _reduce_recipe_of = None     # reduce.py fast_recipe(exp): a ReduceRecipe or None
cdef dict _reduce_recipes = {}           # (reduction node, source shape) -> ReduceRecipe or None
DEF REDUCE_RECIPES_MAX = 1024            # then emptied: a recipe is cheap to decide again
cdef frozenset _SAVER_NAMES = frozenset()
cdef dict _LEAF_NODES = {}               # ir.LEAF: a tensor's node by dtype code


def install_reduce_path(recipe_of, savers, leaf_nodes):
    """reduce.py's entry: ``recipe_of(exp)`` decides a statement's recipe (or None: the
    statement goes through reduce.py); ``savers`` are the saver names, ``leaf_nodes``
    ir.LEAF."""
    global _reduce_recipe_of, _SAVER_NAMES, _LEAF_NODES
    _reduce_recipe_of, _SAVER_NAMES, _LEAF_NODES = recipe_of, frozenset(savers), dict(leaf_nodes)
    _reduce_recipes.clear()
    install_complex_fast("reduce", reduce_fast)


cdef ReduceRecipe _recipe_for(object exp, object sshape):
    key = ((<Exp> exp).key, sshape)
    rc = _reduce_recipes.get(key, False)
    if rc is False or (rc is not None and (<ReduceRecipe> rc).gen != _plan_gen):
        gen = _plan_gen                  # (a recipe decided now sees this generation's plans)
        rc = _reduce_recipe_of(exp)
        if rc is not None:
            (<ReduceRecipe> rc).gen = gen
        if len(_reduce_recipes) >= REDUCE_RECIPES_MAX:
            _reduce_recipes.clear()
        _reduce_recipes[key] = rc
    return <ReduceRecipe> rc


cdef tuple _merged_leaves(tuple leaves, ReduceRecipe rc):
    """The leaves viewed as ``rc.shape`` (reshaped_view); None unless every one is a
    contiguous cpu tensor of the source's shape."""
    cdef list out = []
    cdef Tensor t
    for x in leaves:
        if not isinstance(x, Tensor):
            return None
        t = <Tensor> x
        if t.device is not cpu or not _same_shape(t.shape, rc.src_shape) or not t.check_contiguous():
            return None
        out.append(t._view(rc.shape, t.offset, rc.shape[len(rc.shape) - 1]))
    return tuple(out)


def reduce_fast(Tensor dst, exp, str saver, int nthreads):
    """``dst <saver> exp`` for a ReduceExp whose recipe has no numpy step, on the CPU: the
    recipe's run, its values finished (finish_values) and stored, saveto straight into
    dst (store_array), any other saver by the leaf's cached plan. Returns False, having
    done nothing, for anything it does not take (a check that fails, a first statement
    of its kind, another schedule): reduce.py then runs it, with its errors."""
    if (dst.device is not cpu or dst.readonly or dst.mem is None or not dst.mem.alive
            or saver not in _SAVER_NAMES or _reduce_recipe_of is None):
        return False
    cdef Exp e = <Exp> exp
    code = _CODE_BY_FLAG[dst.type_flag]
    if e.code != code or not _same_shape(e.shape, dst.shape):
        return False
    src = exp.src
    if isinstance(src, Tensor):
        leaves, scalars, sshape = (src,), (), (<Tensor> src).shape
    elif isinstance(src, Exp):
        leaves, scalars, sshape = (<Exp> src).leaves, (<Exp> src).scalars, (<Exp> src).shape
    else:
        return False
    cdef ReduceRecipe rc = _recipe_for(exp, sshape)
    if rc is None or rc.numpy_steps:
        return False
    for x in leaves:
        x = _read_tensor(x)
        if x is not None and (<Tensor> x).device is not cpu:
            return False
    if rc.merged:
        leaves = _merged_leaves(leaves, rc)
        if leaves is None:
            return False
    _stamp(rc.plan)
    res = _finish_c(_run_recipe(rc, leaves, scalars), exp.scale, rc.dtype, rc.out_shape)
    if saver == "saveto" and _store_array(dst, res):
        return True
    t = from_numpy(res)
    plan = _plan_store.get((_LEAF_NODES[code], code, saver, cpu))
    if type(plan) is Plan:
        _stamp(plan)
        if run_plan(<Plan> plan, dst, (t,), ()):
            return True
    _up_assign(dst, t, saver)
    return True
