# The run-time arguments of one gather (included by _core.pyx): what its IR node does not
# hold because it changes from assignment to assignment of the same structure (parameters,
# shapes, the index bound). Its sources are IR children of the Gather node; their tensors
# are leaves of their own, bound after this one (ir.leaves). Nothing here owns memory,
# evaluates anything or knows about schedules: the executor (_engine.pxi) binds the sources
# each run, in place or from a stage's scratch.

cdef class GatherArgs:
    """Parameters, output and source shapes of one gather (mshadow/include/mshadow/gather.h)."""
    cdef readonly str kernel          # the kernel's name in ms_reader_table ("g_take_f32", ...)
    cdef readonly tuple params
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
        cdef Tensor t
        for k, src in enumerate(srcs):
            if src is None:
                continue
            if isinstance(src, ViewLeaf):   # raises if its tensor was freed or changed
                (<ViewLeaf> src).data()
                continue
            t = <Tensor> src
            t.data()
            snap = self.snapshot[k]
            if snap is not None and (t.shape, t.stride) != snap:
                raise ShapeError(f"a source of {self.name} changed from shape {snap[0]} "
                                 f"(stride {snap[1]}) to {t.shape} (stride {t.stride}) since the "
                                 f"expression was built")

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

    cdef int bind(self, ms_gather *g, tuple srcs) except -1:
        """Parameters and the sources read in place; a staged source (None) is placed by
        the executor, band by band (its pointer is left NULL here)."""
        cdef Tensor t
        cdef int i
        cdef ViewLeaf vl
        for i in range(3):
            g.src[i] = NULL
            g.rowstep[i] = g.colstep[i] = 0
            g.code[i] = 0
        for i, src in enumerate(srcs):
            if src is None:
                continue
            if isinstance(src, ViewLeaf):          # read in place through its strides
                vl = <ViewLeaf> src
                g.src[i] = vl.data()
                g.rowstep[i], g.colstep[i] = vl.strides
                g.code[i] = vl.src.type_flag
                continue
            t = <Tensor> src
            g.colstep[i] = t.itemsize
            g.code[i] = t.type_flag
            g.src[i] = t.data()
            # a 1-D source (an index or a value vector) is read one element per "row"
            g.rowstep[i] = (t.stride if len(t.shape) > 1 else 1) * t.itemsize
        for i, v in enumerate(self.params):
            g.p[i] = v
        return 0

    def __repr__(self):
        return f"GatherArgs({self.kernel}, params={self.params}, shape={self.shape})"


def gather_args(str kernel, tuple srcs, tuple params, shape, index=None):
    """The GatherArgs of ``kernel`` over ``srcs``: per position a tensor or a 2-D ViewLeaf
    (read in place) or an expression (anything with a shape: a staged source); ``index`` =
    (position, exclusive bound) of an index source. Sources read in place are checked now
    (alive; an index tensor in range), and again whenever the gather runs."""
    if kernel not in _GATHER_KERNELS:
        raise ValueError(f"unknown gather kernel {kernel!r}")
    if len(srcs) > 3 or len(params) > MS_GATHER_PARAMS:
        raise ValueError(f"a gather takes at most 3 sources and {MS_GATHER_PARAMS} parameters")
    cdef GatherArgs g = GatherArgs.__new__(GatherArgs)
    g.kernel = kernel
    g.params = tuple(int(p) for p in params)
    g.shape = as_shape(shape)
    g.index = index
    for k, src in enumerate(srcs):
        if isinstance(src, ViewLeaf) and (len((<ViewLeaf> src).shape) != 2
                                          or (index is not None and k == index[0])):
            raise ValueError(f"{kernel}: a view source must be 2-D and not the index, got "
                             f"{src!r}")
    g.src_shapes = tuple(as_shape(s.shape) for s in srcs)
    g.snapshot = tuple(((<Tensor> t).shape, (<Tensor> t).stride) if isinstance(t, Tensor)
                       else None for t in srcs)
    g.check_sources(tuple(s if isinstance(s, (Tensor, ViewLeaf)) else None for s in srcs))
    if index is not None and isinstance(srcs[index[0]], Tensor):
        g.check_index((<Tensor> srcs[index[0]]).numpy())
    return g
