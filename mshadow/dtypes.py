"""The supported element types: numpy dtypes paired with mshadow's TypeFlag (base.h).

One table (``DTYPES``); everything else (type switches, names, C types, the short codes
the IR and the kernels use) is derived from it. The compiled code reads it too: setup.py
emits it into mshadow/include/mshadow/dtypes_gen.h (codegen_types.py: the MS_TYPEFLAG_*
constants and the MS_FOR_EACH_DTYPE X-macro), and the core checks at import that the
header it was built with agrees with this table. Adding a dtype is a row here and its
TypeFlag constant below, plus the few per-dtype C cases docs/architecture.md lists.
This module is also loaded by path at build time (setup.py), before the package exists.
"""
from collections import namedtuple

import numpy as np

if __package__:
    from .errors import DTypeError
else:   # loaded by path by the build's code generators
    from errors import DTypeError

# TypeFlag values of dmlc/mshadow (the ``flag`` column of DTYPES below; a test checks that
# every row has its ``k<Name>`` constant here).
kFloat32, kFloat64, kFloat16, kUint8, kInt32, kInt8, kInt64 = 0, 1, 2, 3, 4, 5, 6

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float16 = np.dtype(np.float16)
uint8 = np.dtype(np.uint8)
int8 = np.dtype(np.int8)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
default_real_t = float32
default_type_flag = kFloat32

# One row per storage type, in TypeFlag order. ``code`` names the type in the IR, in plan
# programs and in generated kernel names; ``compute`` is the type its arithmetic runs in
# (float16 is stored, never computed: mshadow's half_t computes in float32) and ``widen``
# the C function that turns a stored value into it (none: a C conversion does).
DType = namedtuple("DType", "code flag np ctype size compute is_float widen", defaults=("",))
DTYPES = (
    DType("f32", kFloat32, float32, "float", 4, "f32", True),
    DType("f64", kFloat64, float64, "double", 8, "f64", True),
    DType("f16", kFloat16, float16, "uint16_t", 2, "f32", True, "ms_half_to_float"),
    DType("u8", kUint8, uint8, "uint8_t", 1, "u8", False),
    DType("i32", kInt32, int32, "int32_t", 4, "i32", False),
    DType("i8", kInt8, int8, "int8_t", 1, "i8", False),
    DType("i64", kInt64, int64, "int64_t", 8, "i64", False),
)
BY_CODE = {d.code: d for d in DTYPES}
CODE_BY_FLAG = tuple(d.code for d in DTYPES)          # TypeFlag -> code
NP_BY_CODE = {d.code: d.np.type for d in DTYPES}      # code -> numpy scalar type
CODE_BY_DTYPE = {d.np: d.code for d in DTYPES}        # numpy dtype -> code
FLOAT_CODES = frozenset(d.code for d in DTYPES if d.is_float)
INT_CODES = tuple(d.code for d in DTYPES if not d.is_float)
_FLAG_TO_DTYPE = {d.flag: d.np for d in DTYPES}          # TypeFlag -> numpy dtype
_DTYPE_TO_FLAG = {d.np: d.flag for d in DTYPES}
ALL_DTYPES = tuple(d.np for d in DTYPES)                 # in TypeFlag order
FLOAT_DTYPES = tuple(d.np for d in DTYPES if d.is_float)
INT_DTYPES = tuple(d.np for d in DTYPES if not d.is_float)


def compute_code(code):
    """The type ``code``'s arithmetic runs in (float16 -> float32)."""
    return BY_CODE[code].compute


def as_dtype(dtype):
    """Normalise anything numpy understands to one of the supported dtypes, or raise DTypeError."""
    if dtype is None:   # numpy would read None as float64; mshadow's default is float32
        return default_real_t
    if isinstance(dtype, np.dtype):   # the hot case: a supported dtype in native order
        flag = _DTYPE_TO_FLAG.get(dtype)
        if flag is not None:
            return _FLAG_TO_DTYPE[flag]
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if int(dtype) in _FLAG_TO_DTYPE:
            return _FLAG_TO_DTYPE[int(dtype)]
        raise DTypeError(f"Unknown type enum {int(dtype)} (expected a TypeFlag "
                         f"{min(_FLAG_TO_DTYPE)}..{max(_FLAG_TO_DTYPE)})")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{dtype!r} is not a dtype (expected one of {dtype_names()})") from None
    if dt.byteorder == ">" or (dt.byteorder == "=" and not dt.isnative):
        raise DTypeError(f"dtype {dt!r} is not in native byte order")
    dt = dt.newbyteorder("=")
    if dt not in _DTYPE_TO_FLAG:
        raise DTypeError(f"dtype {dt} is not supported (expected one of {dtype_names()})")
    return dt


def type_flag(dtype):
    """mshadow's TypeFlag of a dtype (``DataType<T>::kFlag``)."""
    return _DTYPE_TO_FLAG[as_dtype(dtype)]


def dtype_from_flag(flag):
    """The numpy dtype of mshadow's TypeFlag ``flag`` (kFloat32 -> float32, ...)."""
    return as_dtype(int(flag))


def dtype_names():
    """The supported dtypes' names, comma-separated (for messages)."""
    return ", ".join(dt.name for dt in ALL_DTYPES)
