# Type stubs of mshadow/op.py (ms.op). The operators are made at import from ops_table.OPS;
# tests/test_typing.py runs stubtest, which fails when this list and the table disagree.
from typing import Any, Callable, overload

from ._core import Exp, _Operand

class TraceError(TypeError): ...

class Sym:
    """A symbolic scalar: what a defined operator's body receives while it is traced."""
    tree: Any
    def __init__(self, tree: Any) -> None: ...
    def __add__(self, o: Sym | float) -> Sym: ...
    def __radd__(self, o: Sym | float) -> Sym: ...
    def __sub__(self, o: Sym | float) -> Sym: ...
    def __rsub__(self, o: Sym | float) -> Sym: ...
    def __mul__(self, o: Sym | float) -> Sym: ...
    def __rmul__(self, o: Sym | float) -> Sym: ...
    def __truediv__(self, o: Sym | float) -> Sym: ...
    def __rtruediv__(self, o: Sym | float) -> Sym: ...
    def __pow__(self, o: Sym | float) -> Sym: ...
    def __rpow__(self, o: Sym | float) -> Sym: ...
    def __gt__(self, o: Sym | float) -> Sym: ...
    def __lt__(self, o: Sym | float) -> Sym: ...
    def __ge__(self, o: Sym | float) -> Sym: ...
    def __le__(self, o: Sym | float) -> Sym: ...
    def __eq__(self, o: Sym | float) -> Sym: ...  # type: ignore[override]
    def __ne__(self, o: Sym | float) -> Sym: ...  # type: ignore[override]
    def __neg__(self) -> Sym: ...
    def __pos__(self) -> Sym: ...
    def __abs__(self) -> Sym: ...
    __hash__: None  # type: ignore[assignment]
    def __bool__(self) -> bool: ...
    def __float__(self) -> float: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...

class Op:
    """An operator usable in ``F``; called directly it applies F (or traces, on symbols)."""
    name: str
    arity: int
    def __init__(self, name: str, arity: int, doc: str = "") -> None: ...
    @overload
    def __call__(self, a: Sym, /, *args: Sym | float) -> Sym: ...
    @overload
    def __call__(self, *args: _Operand) -> Exp: ...

class UserOp(Op):
    """A defined operator (``@ms.op.define``)."""
    user: bool
    fn: Callable[..., Any]
    tree: Any
    reason: str
    warned: bool
    elementwise: bool | None
    def __init__(self, name: str, arity: int, fn: Callable[..., Any], tree: Any,
                 reason: str = "") -> None: ...
    def warn_once(self) -> None: ...

@overload
def define(fn: Callable[..., Any], *, name: str | None = None) -> UserOp: ...
@overload
def define(fn: None = None, *, name: str | None = None) -> Callable[[Callable[..., Any]], UserOp]: ...

def reducer_names(names: list[str] | None = None) -> str: ...

class _Savers:
    """``ms.sv``: the savers an assignment can use; each attribute's value is its name."""
    saveto: str
    plusto: str
    minusto: str
    multo: str
    divto: str

class _Reducer:
    name: str
    combine: str
    init: float | str
    def __init__(self, name: str, combine: str, init: float | str) -> None: ...

class _Reducers:
    """``ms.red``: reducers for reductions and pooling."""
    sum: _Reducer
    maximum: _Reducer
    minimum: _Reducer
    product: _Reducer

class _Types:
    """``ms.type``: the expression type lattice."""
    kRValue: int
    kMapper: int
    kChainer: int
    kComplex: int

sv: _Savers
red: _Reducers
types: _Types

# the operators of ops_table.OPS
identity: Op
right: Op
plus: Op
minus: Op
mul: Op
div: Op
neg: Op
square: Op
abs: Op
sign: Op
relu: Op
maximum: Op
minimum: Op
sqrt: Op
exp: Op
log: Op
log1p: Op
tanh: Op
power: Op
sigmoid: Op
softplus: Op
clip: Op
gt: Op
lt: Op
ge: Op
le: Op
eq: Op
ne: Op
where: Op
