"""The node builder of the gathering extensions: ``gather()`` (the core's) makes the
expression of a row of the readers table (mshadow/readers.py) over its sources. Shared by
every family (extension/gather.py, spatial.py, complex.py, views.py's reshape, reduce.py's
chainer form); it imports nothing of them.
"""
from .. import _core
from ..expr import _CODE_BY_FLAG
from .targets import Target


class GatherExp(Target, _core.Exp):
    """An extension expression evaluated by a gather kernel (not an assignment target,
    but concat of two tensors: ConcatExp). ``args`` are its run-time arguments."""

    __slots__ = ()

    @property
    def args(self):
        """Its _core.GatherArgs: the first of its leaves (_core.gather puts it there)."""
        return self.leaves[0]


# gather(reader, srcs, shape, code, params=None, index=None, cls=GatherExp, **named):
# compiled, as every constructor's last step is this one (see its docstring)
gather = _core.gather
_core.install_layer(gather_class=GatherExp)


def _code(t):
    """The storage code of a tensor, a ViewLeaf (its tensor's) or an expression."""
    if isinstance(t, _core.Exp):
        return t.code
    return _CODE_BY_FLAG[(t.src if isinstance(t, _core.ViewLeaf) else t).type_flag]
