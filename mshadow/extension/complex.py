"""Complex numbers stored interleaved as (re, im) pairs along the last axis (complex.h).

A complex tensor of float32 (float64) is numpy's complex64 (complex128) viewed as reals: its
last axis has even length, 2c holding the real and 2c + 1 the imaginary part of element c.
A *real* operand has one value per complex element (half the last axis). Each function is a
gather over a reader of mshadow/readers.py (complex_toreal is a
strided view), so it fuses with element-wise arithmetic; sources may be expressions
(evaluated into a temporary when the assignment runs, the rule of docs/architecture.md).
float32 and float64 only. Shapes are checked with mshadow's messages.
"""
from ..dtypes import float32, float64
from ..errors import DTypeError, ShapeError
from .build import _code, gather
from .views import _compose, _source, _tensor

_DTYPES = (float32, float64)


def _check_dtype(src, where):
    if src.dtype not in _DTYPES:
        raise DTypeError(f"{where}: complex operations need float32 or float64 operands "
                         f"(interleaved re, im), got {src.dtype}")


def _operand(src, where):
    src = _tensor(src, where)
    _check_dtype(src, where)
    return src


def _fmt(shape):
    return "(" + ",".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _binary(op, kind, lhs, rhs):
    where = f"complex_{op}_{kind}"
    a, b = _operand(lhs, where), _operand(rhs, where)
    if a.dtype != b.dtype:
        raise DTypeError(f"{where}: the operands have dtypes {a.dtype} and {b.dtype}; make "
                         f"them agree with tcast")
    sa, sb = tuple(a.shape), tuple(b.shape)
    tag = f"ComplexBinaryMapExp ({kind.upper()})"
    got = f" lhs shape {_fmt(sa)}, rhs shape {_fmt(sb)}"
    if kind == "cc":
        if sa != sb:
            raise ShapeError(f"{tag}: Shapes of operands are not the same.{got}")
        if sa[-1] % 2:
            raise ShapeError(f"{tag}: Shape of the last dimension is not even. We must have "
                             f"real part + imaginary part.{got}")
        shape = sa
    else:
        cplx, real = (sa, sb) if kind == "cr" else (sb, sa)
        if len(sa) != len(sb) or sa[:-1] != sb[:-1]:
            raise ShapeError(f"{tag}: Shapes of operands are not the same.{got}")
        if cplx[-1] != 2 * real[-1]:
            raise ShapeError(f"{tag}: Shapes of operands do not match.{got} (the "
                             f"{'rhs' if kind == 'cr' else 'lhs'} is real: half the last axis "
                             f"of the complex operand)")
        shape = cplx
    return gather(f"cx_{op}_{kind}", [a, b], shape, _code(a))


def _unary(name, where, src, kind):
    """``kind``: "c2c" (same shape), "c2r" (last axis halves), "r2c" (last axis doubles)."""
    a = _operand(src, where)
    shape = list(a.shape)
    if kind != "r2c" and shape[-1] % 2:
        raise ShapeError(f"ComplexUnitaryExp: Shape of the last dimension is not even. We must "
                         f"have real + imaginary. {where}: got shape {_fmt(shape)}")
    if kind == "c2r":
        shape[-1] //= 2
    elif kind == "r2c":
        shape[-1] *= 2
    return gather(f"cx_{name}", [a], tuple(shape), _code(a))


# ---- complex (op) complex, complex (op) real, real (op) complex ----------------------------
def complex_mul_cc(lhs, rhs):
    """``lhs * rhs``, both complex (same shape)."""
    return _binary("mul", "cc", lhs, rhs)


def complex_mul_cr(lhs, rhs):
    """``lhs * rhs``: a complex ``lhs`` times a real ``rhs`` (half ``lhs``'s last axis)."""
    return _binary("mul", "cr", lhs, rhs)


def complex_mul_rc(lhs, rhs):
    """``lhs * rhs``: a real ``lhs`` (half ``rhs``'s last axis) times a complex ``rhs``."""
    return _binary("mul", "rc", lhs, rhs)


def complex_div_cc(lhs, rhs):
    """``lhs / rhs``, both complex, by mshadow's formula
    ``((ar*br + ai*bi) / (br*br + bi*bi), (br*ai - ar*bi) / (br*br + bi*bi))``
    (unscaled: numpy's division differs in the last bits and overflows later)."""
    return _binary("div", "cc", lhs, rhs)


def complex_div_cr(lhs, rhs):
    """``lhs / rhs``: a complex ``lhs`` over a real ``rhs`` (mshadow's formula, bi = 0)."""
    return _binary("div", "cr", lhs, rhs)


def complex_div_rc(lhs, rhs):
    """``lhs / rhs``: a real ``lhs`` over a complex ``rhs`` (mshadow's formula, ai = 0)."""
    return _binary("div", "rc", lhs, rhs)


# ---- one operand ------------------------------------------------------------------------
def conj(src):
    """The complex conjugate: imaginary parts negated."""
    return _unary("conj", "conj", src, "c2c")


def complex_exchange(src):
    """Real and imaginary parts exchanged: (re, im) -> (im, re)."""
    return _unary("exchange", "complex_exchange", src, "c2c")


def complex_pad_imag(src):
    """A real ``src`` as complex numbers with zero imaginary parts (the last axis doubles).
    Any last-axis length is accepted (mshadow also demands an even one here, quirk 12)."""
    return _unary("pad_imag", "complex_pad_imag", src, "r2c")


def complex_abs_square(src):
    """``re*re + im*im`` of each element (the last axis halves)."""
    return _unary("abs_square", "complex_abs_square", src, "c2r")


def complex_sum_real_imag(src):
    """``re + im`` of each element (the last axis halves)."""
    return _unary("sum_real_imag", "complex_sum_real_imag", src, "c2r")


def complex_toreal(src):
    """The real parts (the last axis halves). A strided view (every other column), so it
    reads its source in place and an expression source costs no temporary."""
    where = "complex_toreal"
    src = _source(src, where)
    _check_dtype(src, where)
    if src.shape[-1] % 2:
        raise ShapeError(f"ComplexUnitaryExp: Shape of the last dimension is not even. We must "
                         f"have real + imaginary. {where}: got shape {_fmt(tuple(src.shape))}")

    def index_map(shape, st):
        shape, st = list(shape), list(st)
        shape[-1] //= 2
        st[-1] *= 2
        return shape, 0, st
    return _compose(src, where, index_map)
