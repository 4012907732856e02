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
    statement path leaves those to reduce.py, under its errstate, but where
    ``values_by_row``: a float reduction by rows of one block each and no other axis, whose
    partials are its values (numpy's reduce of one element a row keeps it, for any
    reducer)."""
    cdef readonly Plan plan
    cdef readonly bint by_rows, merged, float_sum, numpy_steps, values_by_row
    cdef readonly object shape, src_shape     # Shapes
    cdef readonly tuple partial, rest, out_shape
    cdef readonly Py_ssize_t first, rows_per_group, rows_a_call
    cdef readonly object init, ufunc, wide, cdt, dtype
    cdef Py_ssize_t P, K, Q
    # the geometry of its run: rows x cols of shape; a leading axis's A x B x M (B reduced,
    # R rows a group, nch groups); its partial results (npart) and their group sums (ngroup)
    cdef Py_ssize_t rows, cols, A, B, M, R, nch, npart, ngroup
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
        self.rows, self.cols = _rows_of(self.shape), shape[nd - 1]
        self.A = self.B = self.M = self.R = self.nch = 1
        if by_rows:                  # one partial a block of a row
            self.npart, self.ngroup = self.rows * ((self.cols + RBLOCK - 1) // RBLOCK), 0
        else:
            self.A, self.B = _prod(shape[:first]), shape[first]
            self.M = _prod(shape[first + 1:nd - 1])
            self.R = max(1, min(rows_per_group, self.B))
            self.nch = (self.B + self.R - 1) // self.R
            self.npart = self.A * self.M * self.nch * self.cols
            self.ngroup = self.A * self.M * self.cols
        self.numpy_steps = (not self.float_sum or (by_rows and shape[nd - 1] > RBLOCK)
                            or (self.cdt, self.dtype) not in _FINISH_C)
        self.values_by_row = (by_rows and shape[nd - 1] <= RBLOCK and not rest
                              and (self.cdt, self.dtype) in _FINISH_C)
        self.gen = _plan_gen


ctypedef fused _sum_real:
    float
    double


cdef void _keep_sum(const _sum_real *a, double *out, Py_ssize_t P, Py_ssize_t K,
                    Py_ssize_t Q) noexcept nogil:
    """out[k] = the sum of a[p, k, q] over p, then q, in order, in float64 (from the first).
    Eight k's sums go side by side, each in its own order: one sum alone waited on each add
    (784 adds of a (16, 49) result took 0.8 us)."""
    cdef Py_ssize_t p, k, k0, q
    cdef const _sum_real *b
    cdef double s0, s1, s2, s3, s4, s5, s6, s7
    for k in range(K):
        out[k] = <double> a[k * Q]
    for p in range(P):
        k0 = 0
        while k0 + 8 <= K:           # (in registers: out may alias a, as far as C knows)
            b = a + (p * K + k0) * Q
            s0, s1, s2, s3 = out[k0], out[k0 + 1], out[k0 + 2], out[k0 + 3]
            s4, s5, s6, s7 = out[k0 + 4], out[k0 + 5], out[k0 + 6], out[k0 + 7]
            for q in range(1 if p == 0 else 0, Q):
                s0 = s0 + <double> b[q]
                s1 = s1 + <double> b[Q + q]
                s2 = s2 + <double> b[2 * Q + q]
                s3 = s3 + <double> b[3 * Q + q]
                s4 = s4 + <double> b[4 * Q + q]
                s5 = s5 + <double> b[5 * Q + q]
                s6 = s6 + <double> b[6 * Q + q]
                s7 = s7 + <double> b[7 * Q + q]
            out[k0], out[k0 + 1], out[k0 + 2], out[k0 + 3] = s0, s1, s2, s3
            out[k0 + 4], out[k0 + 5], out[k0 + 6], out[k0 + 7] = s4, s5, s6, s7
            k0 += 8
        for k in range(k0, K):
            b = a + (p * K + k) * Q
            s0 = out[k]
            for q in range(1 if p == 0 else 0, Q):
                s0 = s0 + <double> b[q]
            out[k] = s0


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
    cdef Py_ssize_t rows, n, ra = 0, sa = 0
    if isinstance(src, Tensor):
        t = <Tensor> src
        if t.device is not cpu or _NP_BY_CODE[_CODE_BY_FLAG[t.type_flag]] != dtype:
            raise ValueError(f"reduce_rows: a cpu tensor of {dtype} expected")
        rows, n = t.rows, t.cols
    elif type(src) is np.ndarray and src.ndim == 2 and src.dtype == dtype:
        a = <cnp.ndarray> src
        rows, n = a.shape[0], a.shape[1]
        ra, sa = a.strides[0], a.strides[1]
    else:
        raise ValueError(f"reduce_rows: src must be a 2-D {dtype} array or a cpu tensor")
    if out.shape[0] != rows:
        raise ValueError(f"reduce_rows: {rows} rows into {out.shape[0]} values")
    if rows == 0:
        return out
    if t is not None:
        _fold_rows(<size_t> fn, t, <char *> cnp.PyArray_DATA(out))
    else:
        _fold_rows_at(<size_t> fn, <const char *> cnp.PyArray_DATA(a), rows, n, ra, sa,
                      <char *> cnp.PyArray_DATA(out), dtype.itemsize)
    return out


cdef int _fold_rows_at(size_t fn, const char *base, Py_ssize_t rows, Py_ssize_t n,
                       Py_ssize_t ra, Py_ssize_t sa, char *out, Py_ssize_t itemsize) except -1:
    """``rows`` rows of ``n`` elements from ``base`` (``ra`` bytes a row, ``sa`` an element)
    each folded by the block kernel ``fn`` into ``out``, one element of ``itemsize`` a row;
    enough rows are shared among threads (without the GIL: the caller pins the memory)."""
    cdef Py_ssize_t total = rows * n
    cdef int nt = max(1, min(_num_threads, total // _share_of(total, itemsize, MIN_PER_THREAD)))
    cdef ms_loop_fn f = <ms_loop_fn> fn
    if total < MIN_PER_THREAD:
        ms_reduce_rows(f, base, rows, n, ra, sa, out, itemsize, 1)
    else:
        with nogil:
            ms_reduce_rows(f, base, rows, n, ra, sa, out, itemsize, nt)
    return 0


cdef int _fold_rows(size_t fn, Tensor t, char *out) except -1:
    """_fold_rows_at of a cpu tensor's rows (its leading axes), pinned for the run."""
    cdef _Pins pins
    pins.n = 0
    pins.extra = NULL
    cdef const char *base = t.data()
    _pin_now(t.mem, &pins)     # (at once: no Python runs before the pin)
    try:
        _fold_rows_at(fn, base, t.rows, t.cols, t.stride * t.itemsize, t.itemsize, out,
                      t.itemsize)
    finally:
        _unpin(&pins)
    return 0


# ---- the node: a reduction's fields and its construction ---------------------------------
# `y[:] = sum_rows(x)` builds its node every statement: in Python that was a third of a small
# statement (1.1 us of 3.5). So the node's fields are compiled here (extension/reduce.py's
# ReduceExp subclasses ReduceNode, with the chainer form and the checks that raise), and a
# node over a tensor or an interned expression is interned as make_map's are (_exp.pxi): its
# _ReduceSite, found by the identities of its parts, keeps the IR node, the result's Shape
# and the recipe reduce_fast last decided for it.
from .ir import Reduce as _IRReduce

cdef object _REDUCE_TAG = _IRReduce.TAG
cdef object _reduce_class = None      # extension/reduce.py's ReduceExp
cdef tuple _REDUCERS = ()             # ms.red's reducers: the ones reduce_node takes
cdef tuple _SCALE_FLOAT = (1.0,)      # a new node's scalars: its scale, 1
cdef tuple _SCALE_INT = (1,)


cdef class ReduceNode(ScaledExp):
    """A lazy reduction (kComplex) of ``src`` by ``reducer``: ``form`` "except_dim" (keep
    ``axis``, reduce the rest), "with_axis" (remove ``axis``) or "keepdim" (``axis`` kept
    with size 1); ``mask``: the index of the first maximum or minimum; ``where``: its name
    in messages."""
    cdef public object src, form, reducer, axis, mask, where

    _extra = ("src", "form", "reducer", "axis", "mask", "scale", "where")
    _what = "reduction"


cdef class _ReduceSite(_Site):
    """An interned reduction node (``node``) of a source of one node and Shape object, its
    result's Shape, and the recipe reduce_fast decided for them (``rc``, when ``gen`` is the
    plan cache's generation; None: reduce.py's route)."""
    cdef object src_key, src_shape, form, reducer, out_shape
    cdef Py_ssize_t axis
    cdef ReduceRecipe rc
    cdef bint row_decided     # row_fn is decided: a tensor source's block kernel (0: none)
    cdef size_t row_fn


cdef inline bint _is_reducer(object reducer) noexcept:
    """``reducer`` is one of ms.red's (by identity)."""
    cdef Py_ssize_t i
    for i in range(len(_REDUCERS)):
        if PyTuple_GET_ITEM(_REDUCERS, i) == <PyObject *> reducer:
            return True
    return False


cdef object _reduce_out_shape(object shape, str form, Py_ssize_t a):
    """The result's Shape: (shape[a],) for except_dim, shape less axis a for with_axis, axis a
    as 1 for keepdim."""
    if form == "except_dim":
        return _tuple_of(Shape, (shape[a],))
    cdef list out = list(shape)
    if form == "keepdim":
        out[a] = 1
    else:
        del out[a]
    return _tuple_of(Shape, tuple(out))


cdef _ReduceSite _reduce_site(object src_key, object src_shape, str code, str form,
                              object reducer, Py_ssize_t axis, bint mask, Py_ssize_t *slot):
    """The site of these parts (None where it holds another node; ``slot``: its slot, -1 for
    a node not to intern: an arg-mask, or a source neither a tensor nor interned)."""
    slot[0] = -1
    if mask or src_key is None:
        return None
    cdef size_t h = _mix(_mix(_mix(_mix(0, <PyObject *> src_key), <PyObject *> src_shape),
                              <PyObject *> form), <PyObject *> reducer)
    h = _mix_value(_mix(h, <PyObject *> code), <size_t> axis)
    slot[0] = <Py_ssize_t> (h & (REDUCE_SITE_SLOTS - 1))
    cdef _ReduceSite site = <_ReduceSite> _reduce_sites[slot[0]]
    if (site is not None and site.src_key is src_key and site.src_shape is src_shape
            and site.form is form and site.reducer is reducer and site.axis == axis
            and site.code is code):
        return site
    return None


cpdef object make_reduce(object src, str code, object shape, str form, object reducer,
                         Py_ssize_t axis, bint mask, object where):
    """The ReduceExp of checked parts: ``src`` a Tensor or an expression of dtype ``code``,
    its result ``shape`` (None: the form's, _reduce_out_shape), ``axis`` in range,
    ``reducer`` one of ms.red (scale 1)."""
    if _reduce_class is None:
        raise ImportError("mshadow.extension.reduce is not imported (import mshadow)")
    cdef object src_key, interned_key = None
    if isinstance(src, Tensor):
        src_key = interned_key = _LEAF_KEY[(<Tensor> src).type_flag]
        src_shape = (<Tensor> src).shape
    else:
        src_key = (<Exp?> src).key
        src_shape = (<Exp> src).shape
        if _interned_exp(src):
            interned_key = src_key
    cdef Py_ssize_t slot
    cdef _ReduceSite site = _reduce_site(interned_key, src_shape, code, form, reducer, axis,
                                         mask, &slot)
    if site is None:
        key = _tuple_of(_IRReduce, (_REDUCE_TAG, code, form, reducer.name, axis, mask, src_key))
        out_shape = (_reduce_out_shape(src_shape, form, axis) if shape is None
                     else shape if type(shape) is Shape else _tuple_of(Shape, tuple(shape)))
        if slot >= 0:
            site = _ReduceSite.__new__(_ReduceSite)
            site.node, site.code, site.out_shape = key, code, out_shape
            site.src_key, site.src_shape, site.form = interned_key, src_shape, form
            site.reducer, site.axis = reducer, axis
            _reduce_sites[slot] = site
    else:
        key, out_shape = site.node, site.out_shape
    cdef bint is_float = _is_float_code(code)
    cdef ReduceNode node = <ReduceNode> _new_exp(_reduce_class)
    node.key = key
    node.site = site
    node.shape = out_shape
    node.code = code
    node.leaves = (src,) if isinstance(src, Tensor) else (<Exp> src).leaves
    node.scale = 1.0 if is_float else 1
    node.scalars = _SCALE_FLOAT if is_float else _SCALE_INT
    node.exp_type = kComplex
    node.src, node.form, node.reducer, node.axis = src, form, reducer, axis
    node.mask, node.where = mask, where
    return node


def reduce_node(src, str form, reducer, axis, where, Py_ssize_t ndim=0):
    """extension/reduce.py's node in its common case, checked and built here: ``src`` a
    Tensor or an expression (of ``ndim`` axes, when given), ``reducer`` one of ms.red, ``axis``
    an int in [0, ndim), no arg-mask; a reduction keeping the last axis has rows. Returns
    None when any of that does not hold: reduce.py then checks again and raises the error
    that says which."""
    cdef object shape
    cdef str code
    if isinstance(src, Tensor):
        shape, code = (<Tensor> src).shape, _CODE_BY_FLAG[(<Tensor> src).type_flag]
    elif isinstance(src, Exp):
        shape, code = (<Exp> src).shape, (<Exp> src).code
    else:
        return None
    cdef Py_ssize_t nd = len(shape), a
    if type(axis) is not int or not _is_reducer(reducer) or (ndim and nd != ndim):
        return None
    a = axis
    if not 0 <= a < nd:
        return None
    if form == "except_dim":
        if a == nd - 1 and _rows_of(shape) == 0:     # (MapReduceKeepLowest needs a row)
            return None
    elif form == "with_axis":
        if nd == 1:
            return None
    elif form != "keepdim":
        return None
    return make_reduce(src, code, None, form, reducer, a, False, where)


# ---- the statement path: dst <saver> a reduction, from _assign ----------------------------------
cdef object _reduce_recipe_of = None     # reduce.py fast_recipe(exp): a ReduceRecipe or None
cdef object _row_kernel_of = None        # reduce.py row_kernel(shape, code, form, reducer, axis)
cdef dict _reduce_recipes = {}           # (reduction node, source shape) -> ReduceRecipe or None
DEF REDUCE_RECIPES_MAX = 1024            # then emptied: a recipe is cheap to decide again
cdef frozenset _SAVER_NAMES = frozenset()
cdef dict _LEAF_NODES = {}               # ir.LEAF: a tensor's node by dtype code


def install_reduce_path(recipe_of, row_kernel_of, savers, leaf_nodes, node_class, reducers):
    """reduce.py's entry: ``recipe_of(exp)`` decides a statement's recipe (or None: the
    statement goes through reduce.py), ``row_kernel_of(shape, code, form, reducer name,
    axis)`` the block kernel that folds a tensor's rows alone (or None); ``savers`` are the
    saver names, ``leaf_nodes`` ir.LEAF, ``node_class`` the class of its nodes (a
    ReduceNode), ``reducers`` ms.red's."""
    global _reduce_recipe_of, _row_kernel_of, _SAVER_NAMES, _LEAF_NODES, _reduce_class, _REDUCERS
    if not issubclass(node_class, ReduceNode):
        raise TypeError(f"install_reduce_path: {node_class!r} is not a ReduceNode")
    _reduce_recipe_of, _SAVER_NAMES, _LEAF_NODES = recipe_of, frozenset(savers), dict(leaf_nodes)
    _row_kernel_of = row_kernel_of
    _reduce_class, _REDUCERS = node_class, tuple(reducers)
    _reduce_recipes.clear()
    _clear_sites()
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
    cdef Py_ssize_t k, n = len(leaves)
    cdef tuple out = PyTuple_New(n)
    cdef Tensor t
    for k in range(n):
        x = leaves[k]
        if not isinstance(x, Tensor):
            return None
        t = <Tensor> x
        if t.device is not cpu or not _same_shape(t.shape, rc.src_shape) or not _dense(t):
            return None
        _tuple_put(out, k, t._view(rc.shape, t.offset, rc.cols))
    return out


cdef inline _ReduceSite _site_of_statement(Exp e, object sshape):
    """``e``'s site where it still holds e's node over a source of Shape ``sshape``, else None."""
    if type(e.site) is not _ReduceSite:
        return None
    cdef _ReduceSite site = <_ReduceSite> e.site
    if site.node is not e.key or site.src_shape is not sshape:
        return None
    return site


cdef ReduceRecipe _statement_recipe(Exp e, object sshape):
    """The recipe of ``e``'s statement over a source of Shape ``sshape``: the one its site
    remembers (decided in this generation of the plan cache), else _recipe_for's, which the
    site then remembers."""
    cdef _ReduceSite site = _site_of_statement(e, sshape)
    if site is None:
        return _recipe_for(e, sshape)
    if site.gen != _plan_gen:
        gen = _plan_gen
        site.rc = _recipe_for(e, sshape)
        site.gen = gen
    return site.rc


DEF SMALL_REDUCE_BYTES = 16384   # a statement's partial results held on the stack,
DEF SMALL_REDUCE_SLOTS = 2056    # in this many doubles (8 more: room to align to 64 bytes)


cdef size_t _statement_row_kernel(ReduceNode e, object sshape) except? 0:
    """The block kernel that folds each row of ``e``'s tensor source (of Shape ``sshape``)
    alone, as reduce.py's reduce_into does first (row_kernel), remembered by e's site; 0
    for none, or for a node without its site (reduce.py then runs it)."""
    cdef _ReduceSite site = _site_of_statement(e, sshape)
    if site is None:
        return 0
    if not site.row_decided:
        name = _row_kernel_of(tuple(sshape), e.code, e.form, e.reducer.name, e.axis)
        site.row_fn = 0 if name is None else <size_t> _KERNELS[name]
        site.row_decided = True
    return site.row_fn


cdef bint _rows_small(size_t fn, Tensor src, Tensor dst, object scale) except -1:
    """``dst = scale * reduction`` of the tensor ``src``'s rows, each folded alone by the
    block kernel ``fn`` (reduce.py's first route: the same bits) into a buffer on the stack,
    then stored into dst's rows (times ``scale`` in the dtype: float32 or float64; an
    integer's scale must be 1). Returns False, having stored nothing, for more rows than
    SMALL_REDUCE_BYTES holds, another scale, or a dst resized meanwhile."""
    cdef Py_ssize_t rows = src.rows, isz = src.itemsize, r
    cdef bint scaled = scale != 1
    cdef bint is_float = _is_float_code(_CODE_BY_FLAG[src.type_flag])
    if (rows == 0 or src.cols == 0 or rows * isz > SMALL_REDUCE_BYTES
            or dst.rows * dst.cols != rows or (scaled and not is_float)):
        return False
    cdef double buf[SMALL_REDUCE_SLOTS]
    cdef char *vals = <char *> ((<size_t> buf + 63) & ~(<size_t> 63))
    _fold_rows(fn, src, vals)
    # dst's geometry now, checked again: another thread may have resized it while the rows
    # were folded without the GIL (it is held from here to the last store)
    cdef char *d = dst.data()
    cdef Py_ssize_t drows = dst.rows, cols = dst.cols, pitch = dst.stride * dst.itemsize, k
    if drows * cols != rows:
        return False
    cdef float s32 = <float> (<double> scale) if is_float else 1
    cdef double s64 = <double> scale if is_float else 1
    for r in range(drows):
        if not scaled:
            memcpy(d + r * pitch, vals + r * cols * isz, cols * isz)
        elif isz == 4:
            for k in range(cols):
                (<float *> (d + r * pitch))[k] = (<float *> vals)[r * cols + k] * s32
        else:
            for k in range(cols):
                (<double *> (d + r * pitch))[k] = (<double *> vals)[r * cols + k] * s64
    return True


cdef bint _reduce_small(ReduceRecipe rc, tuple leaves, tuple scalars, Tensor dst,
                        object scale) except -1:
    """``dst = scale * reduction`` of a float sum's recipe (no numpy step), or of one whose
    partials are its values (values_by_row: maximum, minimum, product too), whose plan binds on
    the stack (one pass, a few leaves: run_plan's fast path) and whose partial results fit
    in SMALL_REDUCE_BYTES: _run_recipe's run and additions with their buffers on the stack,
    then finished (_finish_c's roundings) straight into dst's rows, so the same bits as
    _run_recipe, _finish_c and _store_array, with no array. Returns False, having done
    nothing, for any other recipe or destination."""
    cdef Plan plan = rc.plan
    if (plan.stage_plans or plan.nleaf + 1 > INLINE_LEAVES or plan.nscalar > INLINE_LEAVES
            or not (rc.values_by_row or rc.float_sum and not rc.numpy_steps and rc.init == 0)):
        return False
    cdef Py_ssize_t csize = plan.dst_size, npart = rc.npart, ngroup = rc.ngroup
    cdef Py_ssize_t A = rc.A, B = rc.B, M = rc.M, R = rc.R, nch = rc.nch
    cdef Py_ssize_t rows = rc.rows, cols = rc.cols
    cdef Py_ssize_t part_bytes = (npart * csize + 63) // 64 * 64
    if (npart == 0 or part_bytes + (ngroup + rc.K) * 8 > SMALL_REDUCE_BYTES
            or dst.rows * dst.cols != rc.K or (csize != 4 and csize != 8)):
        return False
    cdef double buf[SMALL_REDUCE_SLOTS]
    cdef char *part = <char *> ((<size_t> buf + 63) & ~(<size_t> 63))   # (as numpy's arrays)
    cdef double *grouped = <double *> (part + part_bytes)
    cdef double *values = grouped + ngroup
    memset(part, 0, npart * csize)
    cdef ms_leaf lv[INLINE_LEAVES]
    cdef ms_gather gv[INLINE_LEAVES]
    cdef char sv[16 * INLINE_LEAVES]
    cdef _Pins pins
    cdef bint dense, alias
    cdef int flags = 0
    cdef _Out o
    pins.n = 0
    pins.extra = NULL
    try:
        _bind_leaves(plan, leaves, scalars, rc.shape, rows, cols, None, &pins, True, lv, gv,
                     sv, &dense, &alias)
        if rc.by_rows:               # (as _reduce_parts by rows)
            _parts_out(&o, part, csize, rows, cols, False)
            _exec_bound(plan, lv, sv, &flags, &o, 0, rows, 0, cols)
        else:                        # (as _accumulate)
            _groups_out(&o, part, csize, A, B, M, R, cols, rc.rows_a_call)
            _exec_bound(plan, lv, sv, &flags, &o, 0, A * B * M, 0, cols)
    finally:
        _unpin(&pins)
    _warn_flags(flags)
    with nogil:
        if rc.by_rows:               # (_summed of the partials; values_by_row: a copy)
            if csize == 4:
                _keep_sum(<const float *> part, values, rc.P, rc.K, rc.Q)
            else:
                _keep_sum(<const double *> part, values, rc.P, rc.K, rc.Q)
        else:                        # (_grouped, then _summed)
            if csize == 4:
                _add_groups(<const float *> part, grouped, A * M, nch, cols)
            else:
                _add_groups(<const double *> part, grouped, A * M, nch, cols)
            _keep_sum(<const double *> grouped, values, rc.P, rc.K, rc.Q)
    return _finish_rows(values, rc.K, scale, dst)


cdef bint _finish_rows(const double *values, Py_ssize_t n, object scale, Tensor dst) except -1:
    """_finish_c of ``n`` ``values`` (dst's elements, in row-major order) into dst's rows, at
    its pitch: False, having stored nothing, when dst no longer holds ``n`` elements (another
    thread resized it while the values were computed without the GIL). dst: a cpu tensor of
    a float dtype; its address and geometry are taken here, with the GIL held until the
    last store."""
    cdef char *d = dst.data()
    cdef Py_ssize_t r, rows = dst.rows, cols = dst.cols, pitch = dst.stride * dst.itemsize
    if rows * cols != n:
        return False
    cdef double s = scale
    cdef bint scaled = scale != 1
    cdef int size = dst.itemsize
    for r in range(rows):
        if size == 4:
            _scaled_f32(values + r * cols, <float *> (d + r * pitch), cols, <float> s, scaled)
        elif size == 2:
            _scaled_f16(values + r * cols, <uint16_t *> (d + r * pitch), cols, <float> s, scaled)
        else:
            _scaled_f64(values + r * cols, <double *> (d + r * pitch), cols, s, scaled)
    return True


def reduce_fast(Tensor dst, exp, str saver, int nthreads):
    """``dst <saver> exp`` for a ReduceExp on the CPU: a tensor's rows folded alone by the
    block kernel (_rows_small, saveto), or a recipe with no numpy step: its run, its
    values finished (finish_values) and stored, saveto straight into dst (on the stack,
    _reduce_small, or store_array), any other saver by the leaf's cached plan. Returns False, having
    done nothing, for anything it does not take (a check that fails, a first statement
    of its kind, another schedule): reduce.py then runs it, with its errors."""
    if (dst.device is not cpu or dst.readonly or dst.mem is None or not dst.mem.alive
            or saver not in _SAVER_NAMES or _reduce_recipe_of is None):
        return False
    if not isinstance(exp, ReduceNode):
        return False
    cdef ReduceNode e = <ReduceNode> exp
    code = _CODE_BY_FLAG[dst.type_flag]
    if e.code != code or not _same_shape(e.shape, dst.shape):
        return False
    src = e.src
    if isinstance(src, Tensor):
        leaves, scalars, sshape = e.leaves, (), (<Tensor> src).shape     # (leaves: (src,))
    elif isinstance(src, Exp):
        leaves, scalars, sshape = (<Exp> src).leaves, (<Exp> src).scalars, (<Exp> src).shape
    else:
        return False
    cdef size_t row_fn
    if isinstance(src, Tensor) and saver == "saveto" and (<Tensor> src).device is cpu:
        row_fn = _statement_row_kernel(e, sshape)
        if row_fn and _rows_small(row_fn, <Tensor> src, dst, e.scale):
            return True
    cdef ReduceRecipe rc = _statement_recipe(e, sshape)
    if rc is None or rc.numpy_steps and not rc.values_by_row:
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
    if saver == "saveto" and _reduce_small(rc, leaves, scalars, dst, e.scale):
        return True
    if rc.numpy_steps:       # (values_by_row: only the small path runs it here)
        return False
    res = _finish_c(_run_recipe(rc, leaves, scalars), e.scale, rc.dtype, rc.out_shape)
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
