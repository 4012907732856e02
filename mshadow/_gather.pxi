# Gather leaves (included by _core.pyx): the sources and integer parameters of a gather
# kernel (mshadow/include/mshadow/gather.h), checked before anything is stored.

cdef class GatherLeaf:
    """Sources (up to 3 tensors), parameters and output shape of one gather."""
    cdef readonly str kernel          # the kernel's name in ms_gather_table ("g_take", ...)
    cdef readonly tuple srcs
    cdef readonly tuple params
    cdef readonly object shape
    cdef readonly tuple index         # (source position, exclusive bound) of an index tensor
    cdef tuple snapshot
    cdef readonly tuple deferred      # (source position, expression): evaluated into that
                                      # source, a temporary, each time the gather runs

    def check(self, bint evaluate=True):
        """Sources evaluated (expression sources), alive, unchanged since the expression
        was built, indices in range. At build time (``evaluate`` false) an expression
        source is neither evaluated nor read."""
        cdef Tensor t
        if evaluate:
            for pos, e in self.deferred:
                _assign(<Tensor> self.srcs[pos], e, "saveto")
        elif self.index is not None and any(pos == self.index[0] for pos, _ in self.deferred):
            return
        for t, snap in zip(self.srcs, self.snapshot):
            t.data()
            if (t.shape, t.stride) != snap:
                raise ShapeError(f"a source of {self.kernel[2:]} changed from shape {snap[0]} "
                                 f"(stride {snap[1]}) to {t.shape} (stride {t.stride}) since the "
                                 f"expression was built")
        if self.index is not None:
            pos, bound = self.index
            idx = (<Tensor> self.srcs[pos]).numpy()
            if idx.size:
                lo, hi = idx.min(), idx.max()
                if idx.dtype.kind == "f" and not (np.isfinite(lo) and np.isfinite(hi)):
                    raise IndexError(f"{self._name()}: index values must be finite numbers "
                                     f"in [0, {bound}), got [{lo}, {hi}]")
                if int(lo) < 0 or int(hi) >= bound:
                    raise IndexError(f"{self._name()}: index values must lie in [0, {bound}), "
                                     f"got [{lo}, {hi}]")

    cdef str _name(self):
        """The extension's name for messages: the kernel's without "g_" and a dtype suffix."""
        name, _, code = self.kernel[2:].rpartition("_")
        return name if code in _NP_BY_CODE else self.kernel[2:]

    cdef int bind(self, ms_gather *g) except -1:
        cdef Tensor t
        cdef int i
        for i in range(3):
            g.src[i] = NULL
            g.rowstep[i] = 0
            g.code[i] = 0
        for i, t in enumerate(self.srcs):
            g.src[i] = t.data()
            # a 1-D source (an index or a value vector) is read one element per "row"
            g.rowstep[i] = (t.stride if len(t.shape) > 1 else 1) * t.itemsize
            g.code[i] = t.type_flag
        for i, v in enumerate(self.params):
            g.p[i] = v
        return 0


def gather_leaf(str kernel, tuple srcs, tuple params, shape, index=None, tuple deferred=()):
    """A GatherLeaf for ``kernel``; ``index`` = (position in srcs, bound) of an index tensor;
    ``deferred`` = (position, expression) pairs whose source is a temporary the expression
    is evaluated into whenever the gather runs."""
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
    g.snapshot = tuple(((<Tensor> t).shape, (<Tensor> t).stride) for t in srcs)
    g.deferred = deferred
    g.check(False)
    return g
