"""The node builder of the gathering extensions: ``gather()`` makes the expression of a
row of the readers table (mshadow/readers.py) over its sources. Shared by every family
(extension/gather.py, spatial.py, complex.py, views.py's reshape, reduce.py's chainer
form); it imports nothing of them.
"""
from .. import _core, ir
from ..expr import _CODE_BY_FLAG, kChainer, new_node
from ..readers import READERS_BY_NAME
from .targets import Target

Tensor = _core.Tensor


class GatherExp(Target, _core.Exp):
    """An extension expression evaluated by a gather kernel (not an assignment target,
    but concat of two tensors: ConcatExp). ``args`` are its run-time arguments."""

    __slots__ = ("args",)


def gather(reader, srcs, shape, code, index=None, cls=GatherExp, **params):
    """The expression (of class ``cls``) of reader ``reader`` (a row of mshadow/readers.py)
    over ``srcs``, with its parameters by name; ``index`` = (position in srcs, exclusive
    bound) of an index source, range-checked before anything is stored.

    A source is a tensor or a 2-D ViewLeaf, read in place, or an expression: the IR node
    holds it, and the lowering gives it a stage (mshadow/lower/cpu.py). Nothing is
    allocated or evaluated here."""
    r = READERS_BY_NAME[reader]
    if len(srcs) != len(r.sources):
        raise TypeError(f"reader {reader} takes sources {r.sources}, got {len(srcs)}")
    if not r.views and any(isinstance(s, _core.ViewLeaf) for s in srcs):
        raise TypeError(f"reader {reader} reads tensors only (its row has views=False)")
    keys, leaves, scalars = [], [], ()
    for s in srcs:
        if isinstance(s, Tensor):
            keys.append(ir.LEAF[_CODE_BY_FLAG[s.type_flag]])
            leaves.append(s)
        elif isinstance(s, _core.ViewLeaf):
            keys.append(ir.View(_code(s), _core.view_step_kind(s.strides[-1], s.itemsize)))
            leaves.append(s)
        else:
            keys.append(s.key)
            leaves.extend(s.leaves)
            scalars += s.scalars
    args = _core.gather_args(r.kernel(code), tuple(srcs), r.pack(**params), shape, index)
    node = new_node(cls, ir.Gather(reader, code, *keys), args.shape, code,
                    (args,) + tuple(leaves), scalars, kChainer)
    node.args = args
    return node


def _code(t):
    """The storage code of a tensor, a ViewLeaf (its tensor's) or an expression."""
    if isinstance(t, _core.Exp):
        return t.code
    return _CODE_BY_FLAG[(t.src if isinstance(t, _core.ViewLeaf) else t).type_flag]
