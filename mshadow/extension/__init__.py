"""mshadow's extension expressions, one module a family (extension/*.h in the C++)."""
from .implicit_gemm import implicit_dot, ImplicitGEMMExp

__all__ = ["implicit_dot", "ImplicitGEMMExp"]
