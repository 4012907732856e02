# Gather leaves (included by _core.pyx): the sources and integer parameters of a gather
# kernel (mshadow/include/mshadow/gather.h), checked before anything is stored.

cdef class Band:
    """A gather source that is an expression the reader takes band by band (readers.py
    src_rows): the source rows a band of output rows reads are evaluated into ``scratch``
    (rows [r0, ...)), or, outside a band loop, every row. The gather's source at ``pos``
    is then a handle with no memory."""
    cdef readonly Py_ssize_t pos
    cdef readonly object expr
    cdef readonly Plan plan
    cdef readonly object rows_fn      # rows_fn(y0, y1) -> (r0, r1)
    cdef readonly bint over_cols      # rows_fn takes output columns [x0, x1), not rows
    cdef readonly Tensor scratch
    cdef Tensor store                 # the scratch's memory (1-D), reused across bands
    cdef readonly Py_ssize_t r0, c0   # the scratch's first row and column in the source

    cdef fill_whole(self):
        """Every row of the source, evaluated into a scratch of its size."""
        e = self.expr
        if self.scratch is None or self.scratch.shape != e.shape:
            self.scratch = new_tensor(e.shape, init=None, dtype=e.dtype)
        _assign(self.scratch, e, "saveto")
        self.r0 = self.c0 = 0

    cdef tuple box(self, Py_ssize_t y0, Py_ssize_t y1):
        """(r0, r1, c0, c1): the source rows and columns output rows (columns, over_cols)
        [y0, y1) read, clipped to the source. rows_fn gives (r0, r1), every column, or a
        box (r0, r1, c0, c1)."""
        e = self.expr
        cdef Py_ssize_t srows = _prod(e.shape[:-1]), scols = e.shape[-1]
        got = self.rows_fn(y0, y1)
        r0, r1 = got[0], got[1]
        c0, c1 = (got[2], got[3]) if len(got) == 4 else (0, scols)
        r0 = max(0, min(r0, srows))
        r1 = max(r0, min(r1, srows))
        c0 = max(0, min(c0, scols))
        c1 = max(c0, min(c1, scols))
        return r0, r1, c0, c1

    cdef Py_ssize_t box_elems(self, Py_ssize_t y0, Py_ssize_t y1):
        r0, r1, c0, c1 = self.box(y0, y1)
        return (r1 - r0) * (c1 - c0)

    cdef reserve(self, Py_ssize_t y0, Py_ssize_t y1):
        """The box output rows (columns, over_cols) [y0, y1) read, with a scratch that holds
        it (grown as needed)."""
        r0, r1, c0, c1 = self.box(y0, y1)
        cdef Py_ssize_t rows = max(r1 - r0, 1), cols = max(c1 - c0, 1)
        # one allocation, grown as needed, viewed at each band's geometry: boxes change
        # width from band to band, and fresh memory costs a page fault per 4 KiB
        if self.store is None or self.store.shape[0] < rows * cols:
            self.store = new_tensor((max(rows * cols, 2 * self.store.shape[0]
                                         if self.store is not None else 0),),
                                    init=None, dtype=self.expr.dtype)
        self.scratch = self.store._view(Shape(rows, cols), 0, cols)
        self.r0, self.c0 = r0, c0
        return r0, r1, c0, c1

    def __repr__(self):
        return f"Band(pos={self.pos}, expr={self.expr!r})"


def band(Py_ssize_t pos, expr, Plan plan, rows_fn, bint over_cols=False):
    """A Band: source ``pos`` of a gather is ``expr`` (compiled as ``plan``), whose rows
    [r0, r1) = rows_fn(y0, y1) output rows [y0, y1) read (output columns, ``over_cols``)."""
    cdef Band b = Band.__new__(Band)
    b.pos, b.expr, b.plan, b.rows_fn, b.over_cols = pos, expr, plan, rows_fn, over_cols
    return b


cdef class GatherLeaf:
    """Sources (up to 3 tensors), parameters and output shape of one gather."""
    cdef readonly str kernel          # the kernel's name in ms_reader_table ("g_take_f32", ...)
    cdef readonly tuple srcs          # tensors, or 2-D ViewLeafs read in place (any strides)
    cdef readonly tuple tensors       # the tensor under each source (a view's own tensor)
    cdef readonly tuple params
    cdef readonly object shape
    cdef readonly tuple index         # (source position, exclusive bound) of an index tensor
    cdef tuple snapshot
    cdef readonly tuple deferred      # (source position, expression): evaluated into that
                                      # source, a temporary, each time the gather runs
    cdef readonly tuple bands         # the Band of each source read band by band
    cdef readonly tuple banded        # per source: whether it is one of bands

    cdef _fill_whole(self):
        """Every banded source evaluated whole. Under _BAND_LOCK (the scratch is shared
        with banded runs of other threads), and with every run nested in it evaluating its
        banded sources whole too: a Band this expression reads at two levels must not be
        re-cut into bands by the other level's evaluation."""
        global _whole_depth
        with _BAND_LOCK:
            _whole_depth += 1
            try:
                for b in self.bands:
                    (<Band> b).fill_whole()
            finally:
                _whole_depth -= 1

    @property
    def name(self):
        """The reader's name ("take" for the kernel "g_take_f32")."""
        return self.kernel[2:].rsplit("_", 1)[0]

    def check(self, bint evaluate=True, bint banding=False):
        """Sources evaluated (expression sources), alive, unchanged since the expression
        was built, indices in range. At build time (``evaluate`` false) an expression
        source is neither evaluated nor read. A banded source is evaluated whole here
        unless ``banding`` (the caller then evaluates it band by band)."""
        cdef Tensor t
        if evaluate:
            for pos, e in self.deferred:
                _assign(<Tensor> self.srcs[pos], e, "saveto")
            if not banding and self.bands:
                self._fill_whole()
        elif self.index is not None and any(pos == self.index[0] for pos, _ in self.deferred):
            return
        for k, (src, snap) in enumerate(zip(self.srcs, self.snapshot)):
            if self.banded[k]:
                continue          # a handle: its rows live in its band's scratch
            if snap is None:      # a view: raises if its tensor was freed or changed
                (<ViewLeaf> src).data()
                continue
            t = <Tensor> src
            t.data()
            if (t.shape, t.stride) != snap:
                raise ShapeError(f"a source of {self.name} changed from shape {snap[0]} "
                                 f"(stride {snap[1]}) to {t.shape} (stride {t.stride}) since the "
                                 f"expression was built")
        if self.index is not None:
            pos, bound = self.index
            idx = (<Tensor> self.srcs[pos]).numpy()
            if idx.size:
                lo, hi = idx.min(), idx.max()
                if idx.dtype.kind == "f" and not (np.isfinite(lo) and np.isfinite(hi)):
                    raise IndexError(f"{self.name}: index values must be finite numbers "
                                     f"in [0, {bound}), got [{lo}, {hi}]")
                if int(lo) < 0 or int(hi) >= bound:
                    raise IndexError(f"{self.name}: index values must lie in [0, {bound}), "
                                     f"got [{lo}, {hi}]")

    cdef int bind(self, ms_gather *g) except -1:
        cdef Tensor t
        cdef int i
        cdef ViewLeaf vl
        for i in range(3):
            g.src[i] = NULL
            g.rowstep[i] = g.colstep[i] = 0
            g.code[i] = 0
        for i, src in enumerate(self.srcs):
            if isinstance(src, ViewLeaf):          # read in place through its strides
                vl = <ViewLeaf> src
                g.src[i] = vl.data()
                g.rowstep[i], g.colstep[i] = vl.strides
                g.code[i] = vl.src.type_flag
                continue
            t = <Tensor> src
            g.colstep[i] = t.itemsize
            g.code[i] = t.type_flag
            if self.banded[i]:
                continue
            g.src[i] = t.data()
            # a 1-D source (an index or a value vector) is read one element per "row"
            g.rowstep[i] = (t.stride if len(t.shape) > 1 else 1) * t.itemsize
        for b in self.bands:          # rows [r0, ...) of a banded source in its scratch
            t = (<Band> b).scratch
            i = (<Band> b).pos
            g.rowstep[i] = t.stride * t.itemsize
            g.src[i] = t.data() - (<Band> b).r0 * g.rowstep[i] - (<Band> b).c0 * t.itemsize
        for i, v in enumerate(self.params):
            g.p[i] = v
        return 0


def gather_leaf(str kernel, tuple srcs, tuple params, shape, index=None, tuple deferred=(),
                tuple bands=()):
    """A GatherLeaf for ``kernel``; ``index`` = (position in srcs, bound) of an index tensor;
    a source is a tensor or a 2-D ViewLeaf (read in place, any strides); ``deferred`` =
    (position, expression) pairs whose source is a temporary the expression
    is evaluated into whenever the gather runs; ``bands``: the Bands of the sources
    evaluated band by band (each such source a handle of its shape with no memory)."""
    if kernel not in _GATHER_KERNELS:
        raise ValueError(f"unknown gather kernel {kernel!r}")
    if len(srcs) > 3 or len(params) > MS_GATHER_PARAMS:
        raise ValueError(f"a gather takes at most 3 sources and {MS_GATHER_PARAMS} parameters")
    cdef GatherLeaf g = GatherLeaf.__new__(GatherLeaf)
    g.kernel = kernel
    g.srcs = srcs
    g.params = tuple(int(p) for p in params)
    g.shape = as_shape(shape)
    g.index = index
    for k, src in enumerate(srcs):
        if isinstance(src, ViewLeaf) and (len((<ViewLeaf> src).shape) != 2
                                          or (index is not None and k == index[0])):
            raise ValueError(f"{kernel}: a view source must be 2-D and not the index, got "
                             f"{src!r}")
    g.tensors = tuple((<ViewLeaf> t).src if isinstance(t, ViewLeaf) else t for t in srcs)
    g.snapshot = tuple(None if isinstance(t, ViewLeaf)
                       else ((<Tensor> t).shape, (<Tensor> t).stride) for t in srcs)
    g.deferred = deferred
    g.bands = bands
    g.banded = tuple(any((<Band> b).pos == k for b in bands) for k in range(len(srcs)))
    g.check(False)
    return g
