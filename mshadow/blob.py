"""TShape (a shape of any rank, known only at run time) and TBlob (a tensor of any rank, dtype and device).

The type-erased layer of mshadow's tensor_blob.h (now mxnet/tensor_blob.h); TShape is pure Python.
"""
import operator
import re

from .errors import DeviceError, DTypeError, ShapeError
from .shape import Shape, _check_dim


class TShape:
    """A mutable shape of any rank: ``TShape((2, 3))``, ``TShape(ndim)`` (all ones), ``TShape()``.

    Compares equal to TShape, Shape, tuples and lists with the same dims; prints ``(2,3)``,
    ``(5,)``, ``()`` and ``TShape.parse`` reads that form back. Mutable, hence unhashable;
    ``tuple(s)`` or ``s.get(s.ndim())`` give hashable copies.
    """

    __slots__ = ("_dims",)

    def __init__(self, dims=()):
        if isinstance(dims, int) and not isinstance(dims, bool):
            # TShape(ndim): mshadow's TShape(index_t ndim) fills with ones
            self._dims = [1] * _check_dim(dims, "TShape")
        else:
            self._dims = [_check_dim(d, "TShape") for d in dims]

    # ---- sequence protocol --------------------------------------------------------
    def ndim(self):
        return len(self._dims)

    def __len__(self):
        return len(self._dims)

    def __iter__(self):
        return iter(self._dims)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TShape(self._dims[i])
        return self._dims[i]

    def __setitem__(self, i, value):
        self._dims[operator.index(i)] = _check_dim(value, "TShape")

    def __eq__(self, other):
        if isinstance(other, (TShape, tuple, list)):
            return len(other) == len(self._dims) and all(a == b for a, b in zip(self._dims, other))
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None   # mutable, like a list

    def __str__(self):
        if len(self._dims) == 1:
            return f"({self._dims[0]},)"
        return "(" + ",".join(str(d) for d in self._dims) + ")"

    def __repr__(self):
        return f"TShape({self})"

    def __reduce__(self):
        return (TShape, (tuple(self._dims),))

    # ---- mshadow's TShape API -----------------------------------------------------
    def size(self):
        """The number of elements (``Size``); 1 for ndim 0, as in mshadow."""
        return self.prod_shape(0, len(self._dims))

    def prod_shape(self, begin, end):
        """Product of dims ``[begin, end)`` (``ProdShape``)."""
        n = 1
        for d in self._dims[begin:end]:
            n *= d
        return n

    def flat_to_2d(self):
        """Collapse all leading dims into rows: a Shape (rows, last); ndim 0 gives (0, 0)."""
        if not self._dims:
            return Shape(0, 0)
        return Shape(self.prod_shape(0, len(self._dims) - 1), self._dims[-1])

    def flat_to_3d(self, axis_begin, axis_end=None):
        """Collapse dims ``[0, begin)``, ``[begin, end]`` and ``(end, ndim)`` into a 3-D Shape.

        ``flat_to_3d(axis)`` is ``flat_to_3d(axis, axis)``; ndim 0 gives (0, 0, 0).
        """
        if axis_end is None:
            axis_end = axis_begin
        if not self._dims:
            return Shape(0, 0, 0)
        n = len(self._dims)
        # mshadow only CHECKs end >= begin and reads past the end otherwise; we refuse
        if not 0 <= axis_begin <= axis_end < n:
            raise ShapeError(f"TShape.flat_to_3d({axis_begin}, {axis_end}): expected "
                             f"0 <= axis_begin <= axis_end < ndim={n} for shape {self}")
        return Shape(self.prod_shape(0, axis_begin), self.prod_shape(axis_begin, axis_end + 1),
                     self.prod_shape(axis_end + 1, n))

    def get(self, dim):
        """This shape as a fixed-rank Shape, checking the rank (``get<dim>()``)."""
        if dim != len(self._dims):
            raise ShapeError(f"dimension do not match target dimension {dim} vs {len(self._dims)}")
        return Shape(self._dims)

    def save(self, stream, index_dtype=None):
        """Write ndim then the dims, each an ``index_t`` (int32 by default), as C++ mshadow does."""
        from .io import write_index
        write_index(stream, [len(self._dims)] + self._dims, index_dtype)

    @classmethod
    def load(cls, stream, index_dtype=None):
        """Read a shape written by ``save`` (or by C++ ``TShape::Save``); FormatError if corrupt."""
        from .io import read_index
        ndim, = read_index(stream, 1, index_dtype, "TShape.load: ndim")
        return cls(read_index(stream, ndim, index_dtype, "TShape.load: dims"))

    # mshadow operator>> grammar: a bare integer, or '(' ints separated by ',' with optional
    # spaces, an optional 'L' after a number (directly before ',' or ')'), an optional
    # trailing comma, then ')'. Anything after the shape but whitespace is refused too.
    _INT = r"\s*\+?[0-9]+\s*L?"
    _GRAMMAR = re.compile(rf"\s*(?:\+?[0-9]+|\((?:{_INT}(?:,{_INT})*(?:,\s*)?|\s*)\))\s*")

    @classmethod
    def parse(cls, text):
        """Read ``'3'``, ``'(3,5)'``, ``'(3 , 5)'``, ``'(3, 4L, 5)'``, ``'(3,)'`` or ``'()'``.

        Accepts what mshadow's ``operator>>`` accepts (and ``()``, which ``str`` prints) and
        refuses anything else with a ValueError quoting the text, where mshadow would
        silently keep the dims read so far (``(3,4,a)`` -> ``(3,4)``).
        """
        if not isinstance(text, str):
            raise TypeError(f"TShape.parse expects a str, got {type(text).__name__}")
        if cls._GRAMMAR.fullmatch(text) is None:
            raise ShapeError(f"TShape.parse: invalid shape {text!r}: expected an integer or a tuple of "
                             f"non-negative integers such as '(3,5)'")
        return cls(int(d) for d in re.findall(r"[0-9]+", text))

    # C++ spellings
    Size = size
    ProdShape = prod_shape
    FlatTo2D = flat_to_2d
    FlatTo3D = flat_to_3d
    Save = save
    Load = load
