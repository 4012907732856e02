# The run-time arguments of one gather (included by _core.pyx): what its IR node does not
# hold because it changes from assignment to assignment of the same structure (parameters,
# shapes, the index bound). Its sources are IR children of the Gather node; their tensors
# are leaves of their own, bound after this one (ir.leaves). Nothing here owns memory,
# evaluates anything or knows about schedules: the executor (_engine.pxi) binds the sources
# each run, in place or from a stage's scratch.
from libc.string cimport memcmp

cdef inline void _gather_rows_at(ms_gather *g, Py_ssize_t pos, const char *p,
                                  Py_ssize_t width, Py_ssize_t itemsize, int code,
                                  bint vector) noexcept:
    """Source ``pos`` of a gather at ``p``: rows of ``width`` elements, dense columns; a 1-D
    source (``vector``: an index or a value vector) is read one element per "row"."""
    g.src[pos] = p
    g.rowstep[pos] = (1 if vector else width) * itemsize
    g.colstep[pos] = itemsize
    g.code[pos] = code


# Not tracked by the cycle collector: it holds only ints, shapes, tuples of them and its bounds
# forms (partials of readers.py functions), so it is in no cycle; tracking it made the small
# nested statement pool(F(relu, x*2)) 2.2x the element-wise one instead of 2.0x.
@cython.no_gc
cdef class GatherArgs:
    """Parameters, output and source shapes of one gather (mshadow/include/mshadow/gather.h)."""
    cdef readonly str kernel          # the kernel's name in ms_reader_table ("g_take_f32", ...)
    cdef readonly tuple params
    cdef npy_intp p[16]               # the parameters, as ms_gather's p holds them
    cdef int nparams
    cdef readonly object shape        # the output's shape
    cdef readonly tuple src_shapes    # each source's shape (a Shape)
    cdef readonly tuple index         # (source position, exclusive bound) of an index source
    cdef tuple snapshot               # per source: (shape, stride) of a tensor read in place
    cdef dict _bounds                 # source position -> its bounds form, bound to params

    cdef object bounds(self, int pos):
        """bounds(a0, a1) of source ``pos``: the reader row's bounds form with this gather's
        parameters (readers.Reader.src_rows), made on first use."""
        if self._bounds is None:
            self._bounds = {}
        fn = self._bounds.get(pos)
        if fn is None:
            reader = READERS_BY_NAME[self.name]
            fn = functools.partial(reader.rows_of(pos), dict(zip(reader.params, self.params)))
            self._bounds[pos] = fn
        return fn

    @property
    def name(self):
        """The reader's name ("take" for the kernel "g_take_f32")."""
        return self.kernel[2:].rsplit("_", 1)[0]

    cpdef check_sources(self, tuple srcs):
        """The sources read in place (Tensor or ViewLeaf; None for a staged source) alive
        and unchanged since the expression was built."""
        for k, src in enumerate(srcs):
            if src is not None:
                self._check_source(k, src)

    cdef char *_check_source(self, Py_ssize_t k, object src) except NULL:
        """Source ``k`` (a Tensor or ViewLeaf read in place) alive and unchanged since the
        expression was built; its address now."""
        cdef Tensor t
        if isinstance(src, ViewLeaf):   # raises if its tensor was freed or changed
            return (<ViewLeaf> src).data()
        t = <Tensor> src
        cdef char *p = t.data()
        snap = self.snapshot[k]
        if snap is not None and (t.shape != (<tuple> snap)[0] or t.stride != (<tuple> snap)[1]):
            raise ShapeError(f"a source of {self.name} changed from shape {snap[0]} "
                             f"(stride {snap[1]}) to {t.shape} (stride {t.stride}) since the "
                             f"expression was built")
        return p

    def check_index(self, values):
        """Every index value (a numpy array) in [0, bound): the kernels never read out of
        range, and an assignment stores nothing when one is not."""
        pos, bound = self.index
        if values.size:
            lo, hi = values.min(), values.max()
            if values.dtype.kind == "f" and not (np.isfinite(lo) and np.isfinite(hi)):
                raise IndexError(f"{self.name}: index values must be finite numbers "
                                 f"in [0, {bound}), got [{lo}, {hi}]")
            if int(lo) < 0 or int(hi) >= bound:
                raise IndexError(f"{self.name}: index values must lie in [0, {bound}), "
                                 f"got [{lo}, {hi}]")

    cdef int bind(self, ms_gather *g, tuple srcs, _Pins *pins, Tensor dst,
                  bint *alias) except -1:
        """Parameters and the sources read in place, in one pass: each checked (alive,
        unchanged), its address taken and its allocation pinned at once (``pins``), and
        ``alias`` set when it overlaps ``dst``. A staged source (None) is placed by the
        executor, band by band (its pointer is left NULL here)."""
        cdef Tensor t
        cdef Py_ssize_t i
        cdef ViewLeaf vl
        cdef char *p
        for i in range(3):
            g.src[i] = NULL
            g.rowstep[i] = g.colstep[i] = 0
            g.code[i] = 0
        for i in range(len(srcs)):
            src = srcs[i]
            if src is None:
                continue
            p = self._check_source(i, src)
            if isinstance(src, ViewLeaf):          # read in place through its strides
                vl = <ViewLeaf> src
                t = vl.src
                g.src[i] = p
                g.rowstep[i], g.colstep[i] = vl.strides
                g.code[i] = t.type_flag
            else:
                t = <Tensor> src
                _gather_rows_at(g, i, p, t.stride, t.itemsize, t.type_flag, len(t.shape) <= 1)
            _pin_now(t.mem, pins)
            if dst is not None and _overlaps(t, dst):
                alias[0] = True
        memcpy(g.p, self.p, self.nparams * sizeof(npy_intp))
        return 0

    def __repr__(self):
        return f"GatherArgs({self.kernel}, params={self.params}, shape={self.shape})"


cdef object _fast_shape(object shape):
    """``shape`` as a Shape: at C speed for a Shape or a tuple of non-negative ints."""
    if type(shape) is Shape:
        return shape
    if type(shape) is tuple:
        for d in <tuple> shape:
            if type(d) is not int or <object> d < 0:
                return as_shape(shape)
        return _tuple_of(Shape, shape)
    return as_shape(shape)


cdef class _Row:
    """What building a node reads of a row of mshadow/readers.py, looked up once."""
    cdef str name
    cdef object reader            # the readers.Reader
    cdef tuple sources, params
    cdef bint views
    cdef dict kernels             # storage code -> the kernel's name


cdef dict _ROWS = {}


cdef _Row _row(str name):
    cdef _Row row = _ROWS.get(name)
    if row is None:
        reader = READERS_BY_NAME[name]
        row = _Row.__new__(_Row)
        row.name, row.reader = name, reader
        row.sources, row.params, row.views = reader.sources, reader.params, reader.views
        row.kernels = {code: reader.kernel(code) for code in _CODE_BY_FLAG
                       if reader.kernel(code) in _GATHER_KERNELS}
        _ROWS[name] = row
    return row


cdef tuple _pack(_Row row, dict params):
    """The row's parameters in its kernel's order (readers.Reader.pack, which also says
    what is missing or unknown)."""
    cdef Py_ssize_t n = len(row.params), k
    cdef tuple out
    if len(params) == n:
        out = PyTuple_New(n)
        for k in range(n):
            v = params.get(row.params[k])
            if type(v) is not int:
                if v is None:
                    return row.reader.pack(**params)
                v = int(v)
            _tuple_put(out, k, v)
        return out
    return row.reader.pack(**params)


def gather(str reader, srcs, shape, str code, tuple params=None, index=None, cls=None,
           **named):
    """The expression (of class ``cls``; by default the gather class the extension layer
    installed, extension/build.py's GatherExp) of the reader named ``reader`` (a row of
    mshadow/readers.py) over ``srcs``, with its parameters as ``params`` (ints in the row's
    order) or by name; ``index`` = (position in srcs, exclusive bound) of an index source,
    range-checked before anything is stored.

    A source is a tensor or a 2-D ViewLeaf, read in place, or an expression: the IR node
    (ir.Gather over the sources' nodes) holds it, and the lowering gives it a stage
    (mshadow/lower/cpu.py). Nothing is allocated or evaluated here. The node's first leaf
    is its GatherArgs."""
    if type(srcs) is not tuple:
        srcs = tuple(srcs)
    cdef _Row row = _row(reader)
    if len(srcs) != len(row.sources):
        raise TypeError(f"reader {reader} takes sources {row.sources}, got {len(srcs)}")
    if params is None:
        params = _pack(row, named)
    elif named or len(params) != len(row.params):
        raise TypeError(f"reader {reader} takes the parameters {row.params} in order or by "
                        f"name, got {params} and {sorted(named)}")
    return _gather_node(row, srcs, shape, code, params, index,
                        _gather_class if cls is None else cls)


# ---- interned gather nodes --------------------------------------------------------------
# make_map's interning (_exp.pxi), one level up: a gather whose sources are all interned
# expressions (pool(F(relu, x * 2)), ...) is built again with the same parameters by every
# statement of a small nested loop, and its GatherArgs and IR node are the same each time
# (an expression source is staged: nothing of it is snapshotted). Its _GatherSite keeps
# them, found by the identities of the row, the dtype code, the class, each source's node
# and shape, and the parameters' values (its GatherArgs' C array, compared as C integers:
# pool_node never makes the parameters' tuple for a statement its site already has); the
# site also remembers the plan (_Site's fields, read by _tensor.pxi _assign). A slot taken
# by another structure is overwritten; the table is emptied with make_map's (_clear_sites).
cdef class _GatherSite(_Site):
    cdef _Row row
    cdef object cls
    cdef str kernel_code              # the dtype code its kernel is for
    cdef tuple src_keys, src_shapes
    cdef GatherArgs args              # (its p and nparams: the parameters)


cdef inline size_t _mix_value(size_t h, size_t v) noexcept:
    """_mix for a value, not an address (whose low bits _mix drops)."""
    h = (h ^ v) * <size_t> 0x9E3779B97F4A7C15ULL
    return h ^ (h >> 29)


cdef Py_ssize_t _gather_slot(_Row row, tuple srcs, str code, const npy_intp *p, int np,
                             object cls):
    """The slot of the gather site of these parts, or -1 where its sources are not all
    interned expressions (or it has none, or more than 3)."""
    cdef Py_ssize_t n = len(srcs), k
    if n == 0 or n > 3:
        return -1
    cdef size_t h = _mix(_mix(_mix(0, <PyObject *> row), <PyObject *> code), <PyObject *> cls)
    for k in range(n):
        s = srcs[k]
        if not _interned_exp(s):
            return -1
        h = _mix(_mix(h, <PyObject *> (<Exp> s).key), <PyObject *> (<Exp> s).shape)
    for k in range(np):
        h = _mix_value(h, <size_t> p[k])
    return <Py_ssize_t> (h & (GATHER_SITE_SLOTS - 1))


cdef _GatherSite _gather_site_at(Py_ssize_t slot, _Row row, tuple srcs, str code,
                                 const npy_intp *p, int np, object cls):
    """The site in ``slot`` when it is these parts', else None."""
    cdef _GatherSite site = <_GatherSite> _gather_sites[slot]
    cdef Py_ssize_t k, n = len(srcs)
    if (site is None or site.row is not row or site.cls is not cls or site.kernel_code is not code
            or len(site.src_keys) != n or site.args.nparams != np
            or memcmp(site.args.p, p, <size_t> np * sizeof(npy_intp)) != 0):
        return None
    for k in range(n):
        if (PyTuple_GET_ITEM(site.src_keys, k) != <PyObject *> (<Exp> srcs[k]).key
                or PyTuple_GET_ITEM(site.src_shapes, k) != <PyObject *> (<Exp> srcs[k]).shape):
            return None
    return site


cdef object _interned_gather(_Row row, tuple srcs, str code, const npy_intp *p, int np,
                             object cls, Py_ssize_t *slot):
    """The node of this gather from its site, or None; ``slot``: the site's slot (-1: the
    gather is not one to intern)."""
    slot[0] = _gather_slot(row, srcs, code, p, np, cls)
    if slot[0] < 0:
        return None
    cdef _GatherSite site = _gather_site_at(slot[0], row, srcs, code, p, np, cls)
    return None if site is None else _gather_exp(site.args, site.node, srcs, code, cls, site)


cdef bint _c_params(tuple params, npy_intp *out) noexcept:
    """``params`` (a gather's) into ``out`` as C integers: True, or False where one is not an int
    that fits (such a gather is not interned: _gather_args says what is wrong)."""
    cdef Py_ssize_t k, n = len(params)
    if n > MS_GATHER_PARAMS:
        return 0
    for k in range(n):
        if not _c_int(params[k], &out[k]):
            return 0
    return 1


cdef object _gather_node(_Row row, tuple srcs, object shape, str code, tuple params,
                         object index, object cls):
    """gather()'s node, its sources and parameters counted (the compiled constructors'
    common end). Its leaves: the GatherArgs, then each source's, in one tuple. A gather of
    interned expressions takes its GatherArgs and IR node from its site (above)."""
    cdef Py_ssize_t slot = -1
    cdef _GatherSite site = None
    cdef npy_intp cp[16]        # (GatherArgs.p's size, MS_GATHER_PARAMS)
    if index is None and _c_params(params, cp):
        node = _interned_gather(row, srcs, code, cp, len(params), cls, &slot)
        if node is not None:
            return node
    cdef Py_ssize_t n = len(srcs), k
    cdef tuple keys = PyTuple_New(n)
    cdef ViewLeaf vl
    for k in range(n):
        s = srcs[k]
        if isinstance(s, Tensor):
            key = _LEAF_KEY[(<Tensor> s).type_flag]
        elif isinstance(s, ViewLeaf):
            if not row.views:
                raise TypeError(f"reader {row.name} reads tensors only (its row has "
                                f"views=False)")
            vl = <ViewLeaf> s
            key = _new_ir_node(_IRView, "V", _CODE_BY_FLAG[vl.src.type_flag],
                               view_step_kind(vl.strides[-1], vl.itemsize), ())
        else:
            key = (<Exp?> s).key
        _tuple_put(keys, k, key)
    kernel = row.kernels.get(code)
    if kernel is None:
        raise ValueError(f"reader {row.name} has no kernel for storage code {code!r}")
    args = _gather_args(kernel, srcs, params, shape, index)
    key = _new_ir_node(_IRGather, "X", row.name, code, keys)
    if slot >= 0:
        site = _GatherSite.__new__(_GatherSite)
        site.node, site.row, site.cls, site.args, site.kernel_code = key, row, cls, args, code
        site.src_keys = tuple([(<Exp> s).key for s in srcs])
        site.src_shapes = tuple([(<Exp> s).shape for s in srcs])
        _gather_sites[slot] = site
    return _gather_exp(args, key, srcs, code, cls, site)


cdef object _gather_exp(GatherArgs args, object key, tuple srcs, str code, object cls,
                        _Site site):
    """The node of gather ``key`` over ``srcs`` with ``args``: its leaves the GatherArgs,
    then each source's, in one tuple; its scalars its sources'."""
    cdef Py_ssize_t n = len(srcs), k, j, nl = 1, il = 1, ns = 0, js = 0
    for k in range(n):
        s = srcs[k]
        if isinstance(s, Exp):
            nl += len((<Exp> s).leaves)
            ns += len((<Exp> s).scalars)
        else:
            nl += 1
    cdef Exp e
    cdef tuple leaves = PyTuple_New(nl)
    cdef tuple scalars
    if n == 1 and isinstance(srcs[0], Exp):     # one source's scalars: its own tuple
        scalars = (<Exp> srcs[0]).scalars
    else:
        scalars = PyTuple_New(ns) if ns else ()
    _tuple_put(leaves, 0, args)
    for k in range(n):
        s = srcs[k]
        if isinstance(s, Exp):
            e = <Exp> s
            for j in range(len(e.leaves)):
                _tuple_put(leaves, il, e.leaves[j])
                il += 1
            if scalars is not e.scalars:
                for j in range(len(e.scalars)):
                    _tuple_put(scalars, js, e.scalars[j])
                    js += 1
        else:
            _tuple_put(leaves, il, s)
            il += 1
    cdef Exp node = <Exp?> _new_exp(cls)
    node.key = key
    node.site = site
    node.shape = args.shape
    node.code = code
    node.leaves = leaves       # (GatherExp.args is leaves[0])
    node.scalars = scalars
    node.exp_type = kChainer
    return node


cdef _Row _POOL = None      # pool's row, for pool_node


def pool_node(src, ky, kx, sy, sx, int red):
    """extension/spatial.py pool's node in its common case, compiled (its checks in Python
    were most of a small nested statement's build): ``src`` a Tensor or an expression that
    is not kComplex, of at least two axes; the window ``ky`` x ``kx`` ints in [1, the image]
    and the strides ints in [1, INDEX_MAX]; ``red`` a reducer id pool takes. Returns None
    when any of that does not hold: spatial.pool then checks again and raises the error
    that says which."""
    global _POOL
    cdef object shape
    cdef str code
    if type(src) is Tensor:
        shape, code = (<Tensor> src).shape, _CODE_BY_FLAG[(<Tensor> src).type_flag]
    elif isinstance(src, Exp) and (<Exp> src).exp_type != kComplex:
        shape, code = (<Exp> src).shape, (<Exp> src).code
    else:
        return None
    cdef Py_ssize_t nd = len(shape), H, W
    cdef npy_intp p[8]          # (red, H, W, ky, kx, sy, sx, oh): readers' pool parameters
    if (nd < 2 or not _window_int(ky, &p[3]) or not _window_int(kx, &p[4])
            or not _window_int(sy, &p[5]) or not _window_int(sx, &p[6])):
        return None
    H, W = _axis(shape, nd - 2), _axis(shape, nd - 1)
    if not (p[3] <= H and p[4] <= W):
        return None
    p[0], p[1], p[2], p[7] = red, H, W, (H - p[3]) // p[5] + 1
    if _POOL is None:
        _POOL = _row("pool")
    cdef tuple srcs = (src,)
    cdef Py_ssize_t slot
    node = _interned_gather(_POOL, srcs, code, p, 8, _gather_class, &slot)
    if node is not None:        # (before the parameters' tuple and the output's Shape)
        return node
    return _gather_node(_POOL, srcs, _last_two(shape, nd, p[7], (W - p[4]) // p[6] + 1), code,
                        (red, H, W, ky, kx, sy, sx, p[7]), None, _gather_class)


cdef npy_intp _INDEX_MAX_C = _INDEX_MAX


cdef inline bint _c_int(object v, npy_intp *out) noexcept:
    """``v`` an int that fits in C, into ``out`` (one past the C range: False, its
    OverflowError cleared)."""
    if type(v) is not int:
        return False
    out[0] = _long_as_ssize(<PyObject *> v)
    if out[0] == -1 and _err_occurred() != NULL:
        _err_clear()
        return False
    return True


cdef inline bint _window_int(object v, npy_intp *out) noexcept:
    """``v`` an int in [1, INDEX_MAX] (a window's size or stride), into ``out``."""
    return _c_int(v, out) and 0 < out[0] <= _INDEX_MAX_C


cdef object _last_two(object shape, Py_ssize_t nd, Py_ssize_t a, Py_ssize_t b):
    """``shape`` (nd >= 2 axes) with its last two axes ``a`` and ``b``, as a Shape allocated
    at once (_tuple_of's way, without the tuple it copies)."""
    cdef Py_ssize_t k
    if PY_VERSION_HEX >= 0x030E0000:
        return _tuple_new(Shape, tuple(shape[:nd - 2]) + (a, b))
    t = (<_TypeAlloc *> <PyTypeObject *> Shape).tp_alloc(<PyTypeObject *> Shape, nd)
    for k in range(nd - 2):
        _tuple_put(<tuple> t, k, _axis(shape, k))
    _tuple_put(<tuple> t, nd - 2, a)
    _tuple_put(<tuple> t, nd - 1, b)
    return t


def gather_args(str kernel, tuple srcs, tuple params, shape, index=None):
    if kernel not in _GATHER_KERNELS:
        raise ValueError(f"unknown gather kernel {kernel!r}")
    return _gather_args(kernel, srcs, tuple([int(p) for p in params]), shape, index)


cdef tuple _STAGED_ONLY = (None,)   # the snapshot of one source that is an expression


cdef GatherArgs _gather_args(str kernel, tuple srcs, tuple params, shape, index):
    """The GatherArgs of ``kernel`` over ``srcs``: per position a tensor or a 2-D ViewLeaf
    (read in place) or an expression (anything with a shape: a staged source); ``index`` =
    (position, exclusive bound) of an index source. Sources read in place are checked now
    (alive; an index tensor in range), and again whenever the gather runs."""
    if len(srcs) > 3 or len(params) > MS_GATHER_PARAMS:
        raise ValueError(f"a gather takes at most 3 sources and {MS_GATHER_PARAMS} parameters")
    cdef GatherArgs g = GatherArgs.__new__(GatherArgs)
    cdef Py_ssize_t n = len(srcs), k
    g.kernel = kernel
    g.params = params
    g.nparams = len(params)
    for k in range(g.nparams):
        g.p[k] = params[k]
    g.shape = _fast_shape(shape)
    g.index = index
    cdef tuple shapes = PyTuple_New(n), snapshot
    # one expression source (pool(F(relu, x)), ...): a shared snapshot, one tuple less
    snapshot = (_STAGED_ONLY if n == 1 and isinstance(srcs[0], Exp)
                and not isinstance(srcs[0], (Tensor, ViewLeaf)) else PyTuple_New(n))
    for k in range(n):
        src = srcs[k]
        if snapshot is _STAGED_ONLY:
            pass
        elif isinstance(src, Tensor):
            _tuple_put(snapshot, k, ((<Tensor> src).shape, (<Tensor> src).stride))
        else:
            if isinstance(src, ViewLeaf) and (len((<ViewLeaf> src).shape) != 2
                                              or (index is not None and k == index[0])):
                raise ValueError(f"{kernel}: a view source must be 2-D and not the index, "
                                 f"got {src!r}")
            _tuple_put(snapshot, k, None)
        shape_k = _fast_shape((<Exp> src).shape if isinstance(src, Exp) else src.shape)
        _tuple_put(shapes, k, shape_k)
    g.src_shapes = shapes
    g.snapshot = snapshot
    for k in range(n):                # read in place: alive now
        src = srcs[k]
        if isinstance(src, (Tensor, ViewLeaf)):
            g._check_source(k, src)
    if index is not None and isinstance(srcs[index[0]], Tensor):
        g.check_index(_host_array(<Tensor> srcs[index[0]]))
    return g
