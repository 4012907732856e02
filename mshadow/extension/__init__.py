"""mshadow's extension expressions, one module a family (extension/*.h in the C++).

Each is a leaf the plan reads in a new way (a row map, a negative step, whole rows for
implicit_dot), so it fuses with everything else: see docs/architecture.md.
"""
from .broadcast import broadcast, broadcast_scalar, repmat, BroadcastExp
from .implicit_gemm import implicit_dot, ImplicitGEMMExp
from .mirror import mirror, MirrorExp

__all__ = ["broadcast", "broadcast_scalar", "repmat", "implicit_dot", "mirror",
           "BroadcastExp", "ImplicitGEMMExp", "MirrorExp"]
