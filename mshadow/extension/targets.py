"""Assignment into extensions that are lvalues in mshadow (TRValue): slice_axis, slice_ex,
flip, mirror and crop of a tensor, and concat; chained to any depth, as in mshadow: a view
of an lvalue (``slice_axis(concat(o1, o2), ...)``), a concat of lvalues (``concat(slice_axis(
o1, ...), o2)``, ``concat(concat(o1, o2), o3)``).

A target is a tree whose leaves are tensors. Writing through it is a box per leaf: a box
is, per axis, (start, step, length) in the target's coordinates with step +1 or -1 (the
lvalue views are boxes, flips reverse them); a concat splits a box between its parts along
its axis, and a box of a tensor (or of a view of one) is a strided view of the tensor,
written as below.

``v[:] = value`` and the savers (``v[:] += value``, ``-=``, ``*=``, ``/=``, and ``v += value``
as for a tensor) write through to the tensor under the view, with the checks and errors of a
tensor destination (engine.checked, as engine.assign), every one before the first store. The
value runs in the plan a tensor destination would run, from the engine's one plan cache (its
strided form where the view's last axis is not contiguous: engine.get_plan(..., strided=True)),
its destination bound through the view's row map (_engine.pxi ``run_plan_view``). kComplex
values (dot, reductions) and operators that could not be traced are evaluated into a
temporary first; so is a value that reads the view's bytes at other positions
(``flip(t, 0)[:] = t``), which the core finds by address and refuses (it returns False).
"""
import numpy as np

from .. import _core, engine, ir
from ..dtypes import CODE_BY_FLAG as _CODE_BY_FLAG, NP_BY_CODE as _NP_BY_CODE, compute_code
from ..expr import Exp, describe, kComplex

Tensor = _core.Tensor

TARGETS = ("slice_axis, slice_ex, flip, mirror and crop of a tensor, and concat, chained "
           "to any depth (a view of a concat, a concat of views or concats)")


class Target:
    """The assignment protocol of an lvalue extension; a subclass says whether this node
    is one (``_assignable``) and writes a checked value with a saver (``_save``)."""

    __slots__ = ()
    __iter__ = None   # __getitem__ alone would make every view iterable (sequence protocol)

    def _assignable(self):
        return False

    def _save(self, value, saver):
        raise NotImplementedError

    def _whole(self, key):
        if not self._assignable():
            raise TypeError(f"this {describe(self.key)} expression is not assignable: "
                            f"assignment targets are {TARGETS}")
        if not (key is Ellipsis or (type(key) is slice and key == slice(None))):
            raise IndexError(f"an assignment target takes only [:] (the whole view), got "
                             f"[{key!r}]; slice with slice_axis or slice_ex instead")

    def __getitem__(self, key):
        self._whole(key)
        return self

    def __setitem__(self, key, value):
        self._whole(key)
        if value is not self:   # v[:] += e: __iadd__ has written, Python stores v back
            self._save(value, "saveto")

    def _inplace(self, value, saver):
        if not self._assignable():
            return NotImplemented   # v += e builds v + e, as for any expression
        self._save(value, saver)
        return self

    def __iadd__(self, value):
        return self._inplace(value, "plusto")

    def __isub__(self, value):
        return self._inplace(value, "minusto")

    def __imul__(self, value):
        return self._inplace(value, "multo")

    def __itruediv__(self, value):
        return self._inplace(value, "divto")


def checked_value(value, dst, shape):
    """(value, node, leaves, scalars): ``value`` as a destination of ``shape`` with ``dst``'s
    dtype and device takes it, with engine.assign's checks and messages (engine.checked).
    A numpy array comes back wrapped and a scalar converted to the destination's type; a
    kComplex expression comes back with node None (its own engine checks it when it is
    evaluated)."""
    if isinstance(value, Exp) and value.exp_type == kComplex:
        return value, None, None, None
    if isinstance(value, np.ndarray):
        value = _core.from_numpy(value)
    node, leaves, scalars = engine.checked(dst, value, shape)
    if node is ir.SCALAR:
        value = scalars[0]
    return value, node, leaves, scalars


def check_writable(t):
    """A tensor destination's checks: memory alive (FreedTensorError), not read-only."""
    t.dptr
    if t.readonly:
        raise ValueError("assignment destination is read-only")


def evaluate(value, shape, dtype, device=_core.cpu):
    """``value`` evaluated into a new contiguous tensor on ``device`` (with a tensor
    destination's checks)."""
    tmp = _core.TensorContainer(shape, init=None, pad=False, dtype=dtype, device=device)
    engine.assign(tmp, value, "saveto")
    return tmp


def assign_view(dst, value, saver):
    """``dst <saver> value`` for ``dst`` a ViewLeaf of a tensor."""
    base = dst.src
    value, node, leaves, scalars = checked_value(value, base, dst.shape)
    check_writable(base)
    dst.check()     # the tensor was not resized or reshaped since the view was built
    if base.device is not _core.cpu:   # the CUDA lowering's: the value, then a store kernel
        from ..cuda import executor
        return executor.assign_view(dst, value, node, leaves, scalars, saver)
    code, device = _CODE_BY_FLAG[base.type_flag], base.device
    strided = _core.view_needs_strided_plan(dst)
    plan = None if node is None else engine.get_plan(node, code, saver, device, strided)
    if not isinstance(plan, _core.Plan):   # kComplex, or an operator that was not traced
        tmp = evaluate(value, dst.shape, base.dtype)
        node, leaves, scalars = ir.LEAF[code], (tmp,), ()
        plan = engine.get_plan(node, code, saver, device, strided)
    if not _core.run_plan_view(plan, dst, leaves, scalars):
        # the value reads the view's bytes at other positions: into a temporary of the
        # compute type first (a float16 view is then rounded once, by the saver's store),
        # as engine.assign does for a tensor destination
        tcode = compute_code(code)
        tmp = _core.TensorContainer(dst.shape, init=None, pad=False, dtype=_NP_BY_CODE[tcode])
        _core.run_plan(engine.get_plan(node, tcode, "saveto", device), tmp, leaves, scalars)
        _core.run_plan_view(engine.get_plan(ir.LEAF[tcode], code, saver, device, strided),
                            dst, (tmp,), ())


# ---- boxes -------------------------------------------------------------------------------
def whole_box(shape):
    """The box of every element of a target of ``shape``."""
    return tuple((0, 1, n) for n in shape)


def box_of_view(shape, offset, strides, itemsize, vshape):
    """The box a view (byte ``offset`` and ``strides``) of a dense row-major tensor of
    ``shape`` reads, or None when it is no box (a transpose, a broadcast, another rank)."""
    nd = len(shape)
    if len(vshape) != nd:
        return None
    if any(n == 0 for n in shape) or any(n == 0 for n in vshape):
        return tuple((0, 1, n) for n in vshape)
    dense = [itemsize] * nd
    for k in range(nd - 2, -1, -1):
        dense[k] = dense[k + 1] * shape[k + 1]
    box, rem = [], offset
    for k in range(nd):
        start, rem = divmod(rem, dense[k])
        step = 1 if vshape[k] == 1 else strides[k] // dense[k]
        if vshape[k] > 1 and abs(strides[k]) != dense[k]:
            return None
        box.append((start, step, vshape[k]))
    if rem:
        return None
    for (start, step, n), size in zip(box, shape):
        if not (0 <= start < size and 0 <= start + (n - 1) * step < size):
            return None
    return tuple(box)


def compose_boxes(outer, inner):
    """The box, in the coordinates of ``outer``'s target, of box ``inner`` taken of the
    values that ``outer`` selects."""
    return tuple((s0 + st0 * s1, st0 * st1, n1) for (s0, st0, _), (s1, st1, n1)
                 in zip(outer, inner))


def write_box(base, offset, strides, value, saver, box):
    """``value`` into the box ``box`` of the strided view (``offset``, ``strides``) of the
    tensor ``base`` (the whole tensor: offset 0, its strides)."""
    off = offset + sum(start * st for (start, _, _), st in zip(box, strides))
    leaf = _core.strided_view(base, [n for _, _, n in box], off,
                              [step * st for (_, step, _), st in zip(box, strides)])
    assign_view(leaf, value, saver)
