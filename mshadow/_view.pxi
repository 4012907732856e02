# Strided views: the leaf behind broadcast, mirror, flip, swapaxis, transpose, crop, ...
# (included by _core.pyx). A view is what numpy's as_strided describes: a logical shape and
# one byte stride per axis (0 repeats, negative reverses) from an offset into a tensor. The
# plan reads it in place with a row map, so these extensions fuse like any tensor.

cdef class ViewLeaf:
    """A strided view of ``src``, checked against ``src``'s bytes when it is built."""
    cdef readonly Tensor src
    cdef readonly Py_ssize_t offset      # bytes from src's first element
    cdef readonly object shape           # the logical shape (a Shape)
    cdef readonly tuple strides          # bytes per logical axis
    cdef object src_shape                # src's geometry when the view was built
    cdef Py_ssize_t src_stride

    cdef char *data(self) except NULL:
        """The first element's address; raises if src was freed, resized or reshaped since."""
        cdef char *p = self.src.data()
        if self.src.shape != self.src_shape or self.src.stride != self.src_stride:
            raise ShapeError(f"the tensor under a view expression changed from shape "
                             f"{self.src_shape} (stride {self.src_stride}) to {self.src.shape} "
                             f"(stride {self.src.stride}) since the expression was built")
        return p + self.offset

    def check(self):
        """Raise as reading the view would: src freed (FreedTensorError) or changed since."""
        self.data()

    @property
    def itemsize(self):
        return self.src.itemsize

    def numpy(self):
        """The view as a numpy array (zero-copy; pins src's memory while it lives)."""
        cdef char *p = self.data()
        base = self.src._export()   # counts as an export of src's memory
        holder = _ViewExport()
        holder.__array_interface__ = {
            "version": 3, "shape": tuple(self.shape), "typestr": self.src.dtype.str,
            "data": (<size_t> p, True), "strides": self.strides}
        holder.base = base
        return np.asarray(holder)

    def __repr__(self):
        return f"ViewLeaf(shape={self.shape}, strides={self.strides}, offset={self.offset}, src={self.src!r})"


class _ViewExport:
    """Keeps the source's numpy export alive under a strided numpy view."""
    __slots__ = ("__array_interface__", "base")


def tensor_strides(Tensor t):
    """Byte strides of each axis of ``t`` (the row pitch on the leading axes)."""
    shape = t.shape
    cdef Py_ssize_t nd = len(shape), k, st = t.itemsize
    cdef list out = [st] * nd
    if nd >= 2:
        st = t.stride * t.itemsize
        out[nd - 2] = st
        for k in range(nd - 3, -1, -1):
            st = st * <Py_ssize_t> shape[k + 1]
            out[k] = st
    return tuple(out)


def strided_view(Tensor src, shape, Py_ssize_t offset, strides, bint handle=False):
    """A ViewLeaf of ``src``; every element it can address must lie inside src's bytes.
    With ``handle``, ``src`` has no memory: the view addresses the values of a stage
    (the executor binds it to the stage's scratch)."""
    if not handle:
        src.data()
    shape = as_shape(shape)
    cdef tuple st = tuple([int(s) for s in strides])
    cdef Py_ssize_t nd = len(shape), k, n, s, lo = offset, hi = offset, span
    if len(st) != nd or not 1 <= nd <= MS_VIEW_MAXDIM + 1:
        raise ShapeError(f"strided_view: {len(st)} strides for shape {shape} "
                         f"(1 to {MS_VIEW_MAXDIM + 1} axes)")
    # below 2**31 elements and 2**27 bytes a step (and a modest offset) the span cannot
    # overflow index_t: it is summed in C; else in Python integers (an OverflowError)
    cdef bint empty = False, small = -(1 << 62) < offset < (1 << 62)
    for k in range(nd):
        n = shape[k]
        s = st[k]
        empty = empty or n == 0
        small = small and n < 0x7fffffff and -0x7ffffff < s < 0x7ffffff
    if small:
        for k in range(nd):
            n = shape[k]
            s = st[k]
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    elif not empty:
        lo = offset + sum([(d - 1) * t for d, t in zip(shape, st) if t < 0])
        hi = offset + sum([(d - 1) * t for d, t in zip(shape, st) if t >= 0])
    if not empty:
        span = ((src.rows - 1) * src.stride + src.cols) * src.itemsize if src.rows else 0
        if lo < 0 or hi + src.itemsize > span:
            raise IndexError(f"strided_view: bytes [{lo}, {hi + src.itemsize}) fall outside the "
                             f"source's {span} bytes (shape {src.shape}, stride {src.stride})")
    strides = st
    cdef ViewLeaf v = ViewLeaf.__new__(ViewLeaf)
    v.src = src
    v.offset = offset
    v.shape = shape
    v.strides = strides
    v.src_shape = src.shape
    v.src_stride = src.stride
    return v


def data_address(obj):
    """The address of the first element of a Tensor or a ViewLeaf (on its device), raising
    if its memory was freed (or, for a view, its tensor changed)."""
    if isinstance(obj, ViewLeaf):
        return <size_t> (<ViewLeaf> obj).data()
    return <size_t> (<Tensor?> obj).data()


def pin_allocations(objs):
    """Pin the memory of every Tensor and ViewLeaf in ``objs`` (a GPU launch's operands, with
    the GIL held from here to the launch's end): a free_space or resize meanwhile is
    deferred to unpin_allocations, as for a CPU run. Returns what to pass to it."""
    cdef list pinned = []
    cdef Allocation m
    for o in objs:
        o = _read_tensor(o)
        if o is not None and (<Tensor> o).mem is not None:
            (<Tensor> o).data()            # alive now (raises FreedTensorError if not)
            m = (<Tensor> o).mem
            m.pin()
            pinned.append(m)
    return pinned


def unpin_allocations(list pinned):
    """Undo pin_allocations: a free_space that came meanwhile frees now."""
    cdef Allocation m
    for m in pinned:
        m.unpin()


cdef inline object _read_tensor(object o):
    """The Tensor whose memory a leaf reads: itself, a ViewLeaf's tensor; None for what
    reads none (a gather's arguments)."""
    if isinstance(o, ViewLeaf):
        o = (<ViewLeaf> o).src
    return o if isinstance(o, Tensor) else None


def leaf_tensors(leaves):
    """The tensors an expression's leaves read (_read_tensor of each that reads one)."""
    return tuple(t for t in map(_read_tensor, leaves) if t is not None)


def leaf_devices(leaves):
    """Their devices: what every device check of operands compares."""
    return tuple((<Tensor> t).device for t in leaf_tensors(leaves))
