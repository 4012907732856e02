"""Shape: the fixed-rank, immutable, tuple-like shape of a Tensor, and layout conversion.

Mirrors mshadow's ``Shape<dim>`` (tensor.h): printed as a Python tuple without spaces,
``flat_to_2d`` collapses every leading dimension into rows.
"""
import math
import operator

from .errors import IntegerArgumentError, ShapeError

INDEX_MAX = 2**63 - 1   # the largest index_t (int64): sizes, strides and bounds fit in it


def int_text(v):
    """What to write instead of ``v`` where an integer is needed."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "an int"
    if not math.isfinite(f):
        return "a finite int"
    if f == int(f):
        return repr(int(f))
    return f"an int such as {int(f)}" + ("" if int(f) == round(f) else f" or {round(f)}")


def int_arg(value, where, what, lo=None, hi=INDEX_MAX):
    """``value`` as a Python int in ``[lo, hi]``: argument ``what`` of ``where`` (a size,
    stride, bound or axis). A float or other non-integer is an IntegerArgumentError, a value
    out of range (a stride of 2**63 does not fit index_t) a ShapeError; both say what to write."""
    if type(value) is int and (lo is None or lo <= value) and value <= hi:
        return value
    try:
        v = operator.index(value)
    except TypeError:
        raise IntegerArgumentError(f"{where}: {what} must be an integer, got {value!r} "
                                   f"({type(value).__name__}); write {int_text(value)}") from None
    if not (-INDEX_MAX - 1 if lo is None else lo) <= v <= hi:
        span = (f"from {'-2**63' if lo is None else lo} to "
                f"{'2**63 - 1 (the largest index_t)' if hi == INDEX_MAX else hi}")
        raise ShapeError(f"{where}: {what} = {v} is out of range: write an integer {span}")
    return v


def _check_dim(d, where="Shape"):
    try:
        v = operator.index(d)
    except TypeError:
        raise IntegerArgumentError(f"{where}: dimension {d!r} is not an integer "
                                   f"(expected a non-negative int); write {int_text(d)}") from None
    if v < 0:
        raise ValueError(f"{where}: dimension {v} is negative (expected a non-negative int)")
    return v


class Shape(tuple):
    """``Shape(2, 3)`` or ``Shape((2, 3))``: an immutable, hashable tuple of non-negative ints."""

    __slots__ = ()

    def __new__(cls, *dims):
        if len(dims) == 1 and not isinstance(dims[0], int) and hasattr(dims[0], "__iter__"):
            dims = tuple(dims[0])
        for d in dims:   # plain non-negative ints (nearly every shape) are taken as they are
            if type(d) is not int or d < 0:
                return tuple.__new__(cls, [_check_dim(d) for d in dims])
        return tuple.__new__(cls, dims)

    @property
    def ndim(self):
        """Number of dimensions."""
        return len(self)

    @property
    def kDimension(self):
        """mshadow's ``Shape<dim>::kDimension``: the number of dimensions."""
        return len(self)

    @property
    def kSubdim(self):
        """mshadow's ``kSubdim``: ``kDimension - 1``."""
        return len(self) - 1

    def size(self):
        """Number of elements: the product of all dims (``Size``)."""
        n = 1
        for d in self:
            n *= d
        return n

    def prod_shape(self, begin, end):
        """Product of dims in ``[begin, end)``."""
        n = 1
        for d in tuple.__getitem__(self, slice(begin, end)):
            n *= d
        return n

    def flat_to_1d(self):
        """``Shape(size())`` (``FlatTo1D``)."""
        return Shape(self.size())

    def flat_to_2d(self):
        """All leading dims folded into rows: ``(prod(shape[:-1]), shape[-1])`` (``FlatTo2D``)."""
        if len(self) == 0:
            return Shape(0, 0)
        return Shape(self.prod_shape(0, len(self) - 1), self[-1])

    def sub_shape(self):
        """Drop dimension 0 (``SubShape``)."""
        return Shape(tuple.__getitem__(self, slice(1, None)))

    def slice(self, begin, end):
        """Dims ``[begin, end)`` as a Shape (``Slice<begin, end>``)."""
        if not 0 <= begin <= end <= len(self):
            raise IndexError(f"Shape.slice({begin}, {end}) out of range for a {len(self)}-D shape")
        return Shape(tuple.__getitem__(self, slice(begin, end)))

    def __str__(self):
        if len(self) == 1:
            return f"({self[0]},)"
        return "(" + ",".join(str(d) for d in self) + ")"

    def __repr__(self):
        return "Shape" + str(self)

    # C++ spellings
    Size = size
    ProdShape = prod_shape
    FlatTo1D = flat_to_1d
    FlatTo2D = flat_to_2d
    SubShape = sub_shape
    Slice = slice


def Shape1(s0):
    """A 1-D Shape (mshadow's ``Shape1``)."""
    return Shape(s0)


def Shape2(s0, s1):
    """A 2-D Shape (mshadow's ``Shape2``)."""
    return Shape(s0, s1)


def Shape3(s0, s1, s2):
    """A 3-D Shape (mshadow's ``Shape3``)."""
    return Shape(s0, s1, s2)


def Shape4(s0, s1, s2, s3):
    """A 4-D Shape (mshadow's ``Shape4``)."""
    return Shape(s0, s1, s2, s3)


def Shape5(s0, s1, s2, s3, s4):
    """A 5-D Shape (mshadow's ``Shape5``)."""
    return Shape(s0, s1, s2, s3, s4)


def as_shape(shape):
    """Accept a Shape, a tuple/list of ints or a single int."""
    if isinstance(shape, Shape):
        return shape
    if isinstance(shape, int):
        return Shape(shape)
    if hasattr(shape, "__iter__"):
        return Shape(tuple(shape))
    raise TypeError(f"expected a shape (tuple of non-negative ints), got {shape!r}")


# LayoutFlag (base.h)
kNCHW, kNHWC, kCHWN = 0, 1, 2
kNCW, kNWC, kCWN = 8, 9, 10
kNCDHW, kNDHWC, kCDHWN = 32, 33, 34

# For every layout: the position of each canonical axis (N, C, spatial...) in that layout.
_LAYOUT_AXES = {
    3: {kNCW: "NCW", kNWC: "NWC", kCWN: "CWN"},
    4: {kNCHW: "NCHW", kNHWC: "NHWC", kCHWN: "CHWN"},
    5: {kNCDHW: "NCDHW", kNDHWC: "NDHWC", kCDHWN: "CDHWN"},
}


def convert_layout(shape, src_layout, dst_layout):
    """Permute a 3/4/5-D shape from ``src_layout`` to ``dst_layout`` (``ConvertLayout``)."""
    shape = as_shape(shape)
    table = _LAYOUT_AXES.get(len(shape))
    if table is None:
        raise ValueError(f"convert_layout: expected a 3-, 4- or 5-D shape, got {shape}")
    for lay in (src_layout, dst_layout):
        if lay not in table:
            raise ValueError(f"Invalid layout for {len(shape)}d shape {lay}")
    src, dst = table[src_layout], table[dst_layout]
    return Shape(shape[src.index(axis)] for axis in dst)


ConvertLayout = convert_layout
