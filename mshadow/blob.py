"""TShape (a shape whose rank is known only at run time) and TBlob (a tensor of any rank and dtype).

The type-erased layer of mshadow's tensor_blob.h (now mxnet/tensor_blob.h); TShape is pure Python.
"""
import math
import operator
import re

import numpy as np

from .device import as_device
from .dtypes import dtype_from_flag, type_flag as _flag
from .errors import DeviceError, DTypeError, ShapeError
from .shape import INDEX_MAX, Shape, _check_dim, int_arg


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
        """Number of dimensions (``ndim()``)."""
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


def _pitched_strides(shape, stride, itemsize):
    """numpy byte strides of a row-major tensor whose rows are ``stride`` elements apart."""
    nd = len(shape)
    strides = [itemsize] * nd
    if nd >= 2:
        strides[-2] = stride * itemsize
        for k in range(nd - 3, -1, -1):
            strides[k] = strides[k + 1] * shape[k + 1]
    return tuple(strides)


class _RawMemory:
    """What numpy reads a raw address from; the caller keeps that memory alive, as in C++."""

    def __init__(self, interface):
        self.__array_interface__ = interface


class TBlob:
    """A tensor of any rank, dtype and device: ``dptr``, ``shape`` (TShape), ``stride``,
    ``dev_mask``, ``type_flag``.

    Build it from a Tensor, a numpy array (zero copy), or ``(dptr, shape, dev_mask, type_flag)``
    for memory owned elsewhere (kept alive by the caller). ``get``, ``flat_to_2d``,
    ``flat_to_3d`` and ``get_with_shape`` give typed Tensor views after mshadow's checks; their
    ``dtype``/``device`` default to the blob's own, so pass them to assert what you expect.
    """

    def __init__(self, data=None, shape=None, dev_mask=1, type_flag=0, stride=None):
        from ._core import Tensor, from_numpy
        self._tensor = None
        if data is None:              # mshadow's default TBlob: no data, ndim 0
            self._dptr, self.shape, self.stride = 0, TShape(), 0
            self.dev_mask, self.type_flag = as_device(dev_mask).kDevMask, _flag(type_flag)
            return
        if isinstance(data, int) and not isinstance(data, bool):
            self._from_pointer(data, shape, as_device(dev_mask), dtype_from_flag(type_flag), stride)
            return
        t = data if isinstance(data, Tensor) else from_numpy(data)
        if shape is not None:
            raise TypeError("TBlob(tensor) takes no shape; use get_with_shape to view another shape")
        self._tensor = t.slice(0, t.shape[0])   # a view: a later resize of a container cannot move it
        self._dptr = None
        self.shape = TShape(t.shape)
        self.stride = t.stride
        self.dev_mask = t.device.kDevMask
        self.type_flag = t.type_flag

    def _from_pointer(self, dptr, shape, device, dtype, stride):
        from ._core import from_numpy
        shape = TShape(shape if shape is not None else ())
        if shape.ndim() == 0:
            raise ShapeError("TBlob(dptr, shape, ...): expected a shape with at least one dimension")
        # the rows must span fewer bytes than an index_t holds
        stride = shape[-1] if stride is None else int_arg(
            stride, "TBlob", "stride", lo=0,
            hi=INDEX_MAX // (dtype.itemsize * max(1, math.prod(tuple(shape)[:-1]))))
        if shape.ndim() > 1 and stride < shape[-1]:
            raise ShapeError(f"TBlob: stride {stride} is smaller than the last dimension of {shape}")
        if shape.ndim() == 1:
            stride = shape[0]
        self._dptr, self.shape, self.stride = dptr, shape, stride
        self.dev_mask = device.kDevMask
        self.type_flag = int(_flag(dtype))
        if not device.kDevCPU:
            return                    # device memory: metadata only until a CUDA backend views it
        if shape.size() == 0:
            a = np.empty(tuple(shape), dtype)
        else:
            if dptr == 0:
                raise ValueError(f"TBlob: null data pointer for a non-empty shape {shape}")
            a = np.asarray(_RawMemory({
                "version": 3, "shape": tuple(shape), "typestr": dtype.str, "data": (dptr, False),
                "strides": _pitched_strides(shape, stride, dtype.itemsize)}))
        self._tensor = from_numpy(a)

    # ---- properties ---------------------------------------------------------------
    @property
    def dptr(self):
        """The first element's address (int); raises if a viewed tensor was freed."""
        return self._tensor.dptr if self._dptr is None else self._dptr

    @property
    def dtype(self):
        """The numpy dtype of ``type_flag``."""
        return dtype_from_flag(self.type_flag)

    def ndim(self):
        """Number of dimensions (``ndim()``)."""
        return self.shape.ndim()

    def size(self, i=None):
        """``size(i)`` is ``shape[i]``; ``size()`` the number of elements (``Size``)."""
        return self.shape.size() if i is None else self.shape[i]

    def check_contiguous(self):
        """True when rows are not padded (``stride == shape[-1]``; always for 1-D)."""
        return self.shape.ndim() <= 1 or self.shape[-1] == self.stride

    def __repr__(self):
        dev = "cpu" if self.dev_mask == 1 else "gpu"
        return (f"TBlob(shape={self.shape}, stride={self.stride}, "
                f"dtype={dtype_from_flag(self.type_flag)}, device={dev})")

    # ---- typed views --------------------------------------------------------------
    def _check(self, dtype, device):
        """mshadow's device, then dtype, checks; None means "whatever the blob holds"."""
        if device is not None and as_device(device).kDevMask != self.dev_mask:
            raise DeviceError("TBlob.get: device type do not match specified type")
        if dtype is not None:
            given = _flag(dtype)
            if given != self.type_flag:
                raise DTypeError(f"TBlob.get: data type do not match specified type. "
                                 f"Expected: {self.type_flag} v.s. given {given}")
        if self.shape.ndim() == 0:
            raise ShapeError("TBlob: this blob is empty (ndim 0) and has no tensor view")

    def _view(self, shape, stride):
        """A Tensor of ``shape`` whose rows are ``stride`` elements apart, sharing the memory."""
        t = self._tensor
        if t is None:
            raise DeviceError("TBlob: this blob has no host view (no data, or device memory "
                              "without a CUDA backend)")
        if tuple(shape) == tuple(t.shape):
            return t.slice(0, t.shape[0])
        if len(shape) == 2 and stride == t.stride and shape == t.shape.flat_to_2d():
            return t.flat_to_2d()
        # any other regrouping of rows: a numpy view over the tensor's own (pinned) memory
        from ._core import from_numpy
        a = t.numpy()
        return from_numpy(np.lib.stride_tricks.as_strided(
            a, tuple(shape), _pitched_strides(shape, stride, a.itemsize),
            writeable=a.flags.writeable))

    def flat_to_2d(self, dtype=None, device=None):
        """The blob as (rows, last dim), keeping the row stride (``FlatTo2D``)."""
        self._check(dtype, device)
        return self._view(self.shape.flat_to_2d(), self.stride)

    def flat_to_3d(self, axis_begin, axis_end=None, dtype=None, device=None):
        """Collapse ``[0,begin)``, ``[begin,end]``, ``(end,ndim)`` into a 3-D view (``FlatTo3D``)."""
        self._check(dtype, device)
        s = self.shape.flat_to_3d(axis_begin, axis_end)
        # the row stride survives only if the last group is the last dim (up to ones)
        if s[2] != self.shape[-1] and not self.check_contiguous():
            raise ShapeError(f"TBlob.flat_to_3d: must be contiguous to group the last dims; "
                             f"shape {self.shape} has row stride {self.stride}")
        return self._view(s, self.stride if s[2] == self.shape[-1] else s[2])

    def get(self, dim=None, dtype=None, device=None):
        """The blob as a ``dim``-D Tensor (``get<Device, dim, DType>``); dim defaults to ndim."""
        self._check(dtype, device)
        shape = self.shape.get(self.shape.ndim() if dim is None else dim)
        return self._view(shape, self.stride)

    def get_with_shape(self, shape, dtype=None, device=None):
        """The blob's elements viewed as ``shape`` (same total size; needs a contiguous blob)."""
        self._check(dtype, device)
        shape = Shape(shape)
        if len(shape) == 0:
            raise ShapeError("TBlob.get_with_shape: expected a shape with at least one dimension")
        if not self.check_contiguous():
            raise ShapeError(f"TBlob.get_reshape: must be contiguous; shape {self.shape} "
                             f"has row stride {self.stride}")
        if shape.size() != self.shape.size():
            raise ShapeError(f"TBlob.get_with_shape: new and old shape do not match total "
                             f"elements: {shape} vs {self.shape}")
        return self._view(shape, shape[-1])

    # C++ spellings
    CheckContiguous = check_contiguous
    Size = size
    FlatTo2D = flat_to_2d
    FlatTo3D = flat_to_3d
