"""THE operator table: every element-wise operator of mshadow, once.

Each row gives the operator's name and arity, its C scalar form (the plain path and the
GPU code generator both read it), its SIMD packet form (float/double, mshadow/include; transcendentals
are bodies of mshadow/vmath.py), a composite
definition for operators built from others, and the numpy reference the tests use.
The generated C kernels (kernels_gen.h), ``ms.op``, the plan compiler and the tests are all
derived from this table: adding an operator is one row.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

if __package__:
    from .dtypes import DTYPES as _DTYPES
else:  # loaded by path at build time (codegen_cpu.py), before the package exists
    from dtypes import DTYPES as _DTYPES


@dataclass(frozen=True)
class OpDef:
    name: str
    arity: int
    c: Optional[str] = None          # C expression in a, b, c of the compute type T
    c_int: Optional[str] = None      # integer override of ``c``
    packet: Optional[str] = None     # packet expression in a, b, c using P(fn)(...)
    composite: Optional[str] = None  # definition in terms of other ops (expanded by the plan)
    float_only: bool = False         # integers are computed through float64
    cuda: Optional[str] = None       # CUDA C form when it differs from ``c``
    ref: Optional[Callable] = None   # numpy reference (tests), on arrays of the compute type


def _trunc_div(a, b):
    """C integer division (truncation toward zero); x / 0 -> 0 and MIN / -1 -> MIN (wraps),
    as the kernels define them."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype.kind not in "iu":
        return a / b
    with np.errstate(all="ignore"):
        safe = np.where((b == 0) | (b == -1 if a.dtype.kind == "i" else False), 1, b).astype(a.dtype)
        q = a // safe
        r = a - q * safe
        q = np.where((r != 0) & ((a < 0) != (safe < 0)), q + 1, q).astype(a.dtype)
        if a.dtype.kind == "i":
            neg = (0 - a.astype(np.uint64)).astype(a.dtype) if a.dtype.itemsize == 8 else (-a.astype(np.int64)).astype(a.dtype)
            q = np.where(b == -1, neg, q).astype(a.dtype)
        return np.where(b == 0, 0, q).astype(a.dtype)


def _ipow(a, b):
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        out = np.ones_like(a)
        base = a.copy()
        e = np.asarray(b).astype(np.int64).copy()
        e = np.broadcast_to(e, a.shape).copy()
        neg = e < 0
        e[neg] = 0
        with np.errstate(over="ignore"):
            while np.any(e > 0):
                odd = (e & 1) == 1
                out = np.where(odd, out * base, out).astype(a.dtype)
                base = (base * base).astype(a.dtype)
                e >>= 1
        # negative exponents: 1/a**|e| truncated: 1 for a == 1, +-1 for a == -1, else 0
        m1 = np.where(np.abs(np.asarray(b)) % 2 == 1, -1, 1).astype(a.dtype) if a.dtype.kind == "i" else 1
        special = np.where(a == 1, 1, np.where(a == -1, m1, 0)).astype(a.dtype)
        return np.where(neg, special, out).astype(a.dtype)
    return np.power(a, b)


def _cmp(f):
    return lambda a, b: f(a, b).astype(np.asarray(a).dtype)


OPS = (
    OpDef("identity", 1, c="a", packet="a", ref=lambda a: a),
    OpDef("right", 2, c="b", packet="b", ref=lambda a, b: np.broadcast_to(b, np.shape(a)).copy()),
    OpDef("plus", 2, c="a + b", packet="P(add)(a, b)", ref=lambda a, b: a + b),
    OpDef("minus", 2, c="a - b", packet="P(sub)(a, b)", ref=lambda a, b: a - b),
    OpDef("mul", 2, c="a * b", packet="P(mul)(a, b)", ref=lambda a, b: a * b),
    OpDef("div", 2, c="a / b", c_int="ms_idiv_T(a, b)", packet="P(div)(a, b)", ref=_trunc_div),
    OpDef("neg", 1, c="-a", c_int="(T)(0 - a)", packet="P(neg)(a)", ref=lambda a: -a),
    OpDef("square", 1, c="a * a", packet="P(mul)(a, a)", ref=lambda a: a * a),
    OpDef("abs", 1, c="fabs(a)", c_int="(T)(a < 0 ? 0 - a : a)", packet="P(abs)(a)",
          ref=np.abs),
    OpDef("sign", 1, c="(T)(a > 0 ? 1 : (a < 0 ? -1 : 0))", ref=lambda a: np.sign(a)),
    OpDef("relu", 1, c="(a > 0 ? a : (T)0)", packet="P(max)(a, P(zero)())",
          ref=lambda a: np.where(a > 0, a, 0).astype(np.asarray(a).dtype)),
    OpDef("maximum", 2, c="(a > b ? a : b)", packet="P(max)(a, b)",
          ref=lambda a, b: np.where(a > b, a, b)),
    OpDef("minimum", 2, c="(a < b ? a : b)", packet="P(min)(a, b)",
          ref=lambda a, b: np.where(a < b, a, b)),
    OpDef("sqrt", 1, c="sqrt(a)", packet="P(sqrt)(a)", float_only=True, ref=np.sqrt),
    # transcendentals: mshadow/vmath.py bodies, one per ISA, the same bits at every level
    OpDef("exp", 1, c="ms_s_exp_T(a)", packet="P(exp)(a)", float_only=True, cuda="exp(a)",
          ref=np.exp),
    OpDef("log", 1, c="ms_s_log_T(a)", packet="P(log)(a)", float_only=True, cuda="log(a)",
          ref=np.log),
    OpDef("log1p", 1, c="ms_s_log1p_T(a)", packet="P(log1p)(a)", float_only=True,
          cuda="log1p(a)", ref=np.log1p),
    OpDef("tanh", 1, c="ms_s_tanh_T(a)", packet="P(tanh)(a)", float_only=True, cuda="tanh(a)",
          ref=np.tanh),
    OpDef("power", 2, c="pow(a, b)", c_int="ms_ipow_T(a, b)", ref=_ipow),
    OpDef("sigmoid", 1, composite="div(1, plus(1, exp(neg(a))))", float_only=True,
          ref=lambda a: 1 / (1 + np.exp(-a))),
    OpDef("softplus", 1, composite="log1p(exp(a))", float_only=True,
          ref=lambda a: np.log1p(np.exp(a))),
    OpDef("clip", 3, c="(a < b ? b : (a > c ? c : a))",
          ref=lambda a, b, c: np.where(a < b, b, np.where(a > c, c, a))),
    OpDef("gt", 2, c="(T)(a > b)", ref=_cmp(np.greater)),
    OpDef("lt", 2, c="(T)(a < b)", ref=_cmp(np.less)),
    OpDef("ge", 2, c="(T)(a >= b)", ref=_cmp(np.greater_equal)),
    OpDef("le", 2, c="(T)(a <= b)", ref=_cmp(np.less_equal)),
    OpDef("eq", 2, c="(T)(a == b)", ref=_cmp(np.equal)),
    OpDef("ne", 2, c="(T)(a != b)", ref=_cmp(np.not_equal)),
    OpDef("where", 3, c="(a != 0 ? b : c)", ref=lambda a, b, c: np.where(a != 0, b, c)),
)

OPS_BY_NAME = {op.name: op for op in OPS}

# Compute types of the CPU kernels: (name, C type, numpy dtype), the rows of dtypes.DTYPES
# that compute in their own type. float16 is stored only and computed in float32, as
# mshadow's half_t does.
COMPUTE_TYPES = tuple((d.code, d.ctype, d.np) for d in _DTYPES if d.compute == d.code)
# Storage types (casts exist between every pair): the compute types plus the stored-only ones.
STORAGE_TYPES = COMPUTE_TYPES + tuple((d.code, d.ctype, d.np) for d in _DTYPES
                                      if d.compute != d.code)
TYPE_CODE = {dt: code for code, _, dt in STORAGE_TYPES}
FLOAT_CODES = tuple(code for code, _, dt in COMPUTE_TYPES if dt.kind == "f")


def kernel_kind(op, code):
    """How the CPU plan evaluates ``op`` on compute type ``code``.

    'composite' (expanded), 'via_f64' (integers through float64), or 'c' (a generated
    kernel, with a packet path where the op has one).
    """
    if code not in FLOAT_CODES and op.float_only:
        return "via_f64"
    if op.composite:
        return "composite"
    return "c"
