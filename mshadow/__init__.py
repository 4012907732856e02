"""mshadow for Python: lazy expression-template tensors over aligned pitched memory.

A port of mshadow (cxxnet, MXNet) and dmlc-core's Parameter system; see README.md.
"""
__version__ = "0.1.0"

import os as _os

# libgomp's idle threads spin for about 300,000 iterations by default (OMP_WAIT_POLICY unset).
# On a machine where other processes compete for the cores, that spinning made 2 threads up
# to 40x slower than 1, and a shorter spin (GOMP_SPINCOUNT=10000) still 10x at 1e5 elements;
# sleeping at once (PASSIVE) kept 2 threads within 1.23x of 1 under a competing process and
# still gained on an idle machine (benchmarks/results/threads-2core-epyc.txt, docs/threads.md).
# The user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT win; libgomp reads these once, when it is
# loaded by the import of mshadow._core below (or earlier by another library, which decides).
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
del _os

from .errors import (MShadowError, ShapeError, DTypeError, DeviceError, FreedTensorError,
                     FormatError, CudaError, ParamError, BuildMismatchError, PSError,
                     LazyExpressionError, MissingMethodError, OperatorError,
                     IntegerArgumentError)
from .dtypes import (float32, float64, float16, uint8, int8, int32, int64, default_real_t,
                     kFloat32, kFloat64, kFloat16, kUint8, kInt32, kInt8, kInt64,
                     default_type_flag, type_flag, dtype_from_flag)
from .device import (cpu, gpu, Stream, new_stream, delete_stream, init_tensor_engine,
                     shutdown_tensor_engine, set_device)
from .shape import (Shape, Shape1, Shape2, Shape3, Shape4, Shape5, convert_layout,
                    kNCHW, kNHWC, kCHWN, kNCW, kNWC, kCWN, kNCDHW, kNDHWC, kCDHWN)
from ._core import (Tensor, TensorContainer, new_tensor, alloc_space, free_space, copy,
                    from_numpy, from_dlpack, ALIGN_BYTES)
from ._core import set_num_threads, get_num_threads, set_simd_level, simd_info
from .expr import Exp, ScalarExp, scalar, F, tcast, transpose, where
from . import op
from .op import sv, red, types as type  # noqa: A001  ms.type is mshadow's namespace name
from .engine import plan_for, plan_cache_info, clear_plan_cache, set_plan_cache_size
from .extension import (implicit_dot, broadcast, broadcast_keepdim, broadcast_scalar,
                        broadcast_to, broadcast_with_axis, crop, flip, mirror, repmat, reshape,
                        slice_axis, slice_ex, swapaxis, transpose_axes, concat, mask,
                        mat_choose_row_element, mat_fill_row_element, one_hot_encode, pad,
                        take, upsampling_nearest, broadcast_multi_axes, transpose_indices,
                        take_grad, complex_mul_cc, complex_mul_cr, complex_mul_rc,
                        complex_div_cc, complex_div_cr, complex_div_rc, conj, complex_exchange,
                        complex_pad_imag, complex_toreal, complex_abs_square,
                        complex_sum_real_imag)
from .extension import range  # noqa: A004  mshadow's range<DType>; Python's is builtins.range
from .aliases import *  # noqa: F401,F403  the C++ spellings (NewTensor, FreeSpace, ...)
from . import aliases as _aliases
from .blob import TShape, TBlob
from .io import save_binary, load_binary, save, load
from .random import Random
from .config import show_config
from . import param
from .dot import dot, batch_dot, vector_dot, batch_gemm, DotExp, BatchDotExp
from .extension.reduce import sum  # noqa: A004  ms.sum; Python's is builtins.sum
from .extension import (sumall_except_dim, reduce_except_dim, sum_rows, reduce_with_axis,
                        reduce_keepdim, pool, unpool, chpool, ch_unpool, unpack_patch2col,
                        pack_col2patch)
from . import nn
from .nn import softmax, softmax_grad
from . import ps  # parameter server; only its "mpi" backend imports mpi4py


def get_include():
    """The directory of mshadow's C headers, for extensions that ``cimport mshadow``.

    ``Extension(..., include_dirs=[mshadow.get_include()])``; see examples/cython/.
    """
    import os
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


# ---- the public namespace ------------------------------------------------------------
# ``range`` and ``type`` are mshadow's names (range<DType>, the type:: namespace) and stay
# reachable as ms.range / ms.type, but ``from mshadow import *`` must not shadow builtins.
__all__ = [
    "get_include",
    "MShadowError", "ShapeError", "DTypeError", "DeviceError", "FreedTensorError",
    "FormatError", "CudaError", "ParamError", "BuildMismatchError", "PSError",
    "LazyExpressionError", "MissingMethodError", "OperatorError", "IntegerArgumentError",
    "float32", "float64", "float16", "uint8", "int8", "int32", "int64", "default_real_t",
    "kFloat32", "kFloat64", "kFloat16", "kUint8", "kInt32", "kInt8", "kInt64",
    "default_type_flag", "type_flag", "dtype_from_flag",
    "cpu", "gpu", "Stream", "new_stream", "delete_stream", "init_tensor_engine",
    "shutdown_tensor_engine", "set_device",
    "Shape", "Shape1", "Shape2", "Shape3", "Shape4", "Shape5", "convert_layout",
    "kNCHW", "kNHWC", "kCHWN", "kNCW", "kNWC", "kCWN", "kNCDHW", "kNDHWC", "kCDHWN",
    "Tensor", "TensorContainer", "new_tensor", "alloc_space", "free_space", "copy",
    "from_numpy", "from_dlpack", "ALIGN_BYTES",
    "set_num_threads", "get_num_threads", "set_simd_level", "simd_info",
    "Exp", "ScalarExp", "scalar", "F", "tcast", "transpose", "where",
    "op", "sv", "red", "plan_for", "plan_cache_info", "clear_plan_cache", "set_plan_cache_size",
    "ps",
    "implicit_dot", "broadcast", "broadcast_keepdim", "broadcast_scalar", "broadcast_to",
    "broadcast_with_axis", "crop", "flip", "mirror", "repmat", "reshape", "slice_axis",
    "slice_ex", "swapaxis", "transpose_axes", "concat", "mask", "mat_choose_row_element",
    "mat_fill_row_element", "one_hot_encode", "pad", "take", "upsampling_nearest",
    "broadcast_multi_axes", "transpose_indices", "take_grad", "complex_mul_cc",
    "complex_mul_cr", "complex_mul_rc", "complex_div_cc", "complex_div_cr", "complex_div_rc",
    "conj", "complex_exchange", "complex_pad_imag", "complex_toreal", "complex_abs_square",
    "complex_sum_real_imag",
    *_aliases.__all__,
    "TShape", "TBlob", "save_binary", "load_binary", "save", "load", "Random", "show_config",
    "param", "dot", "batch_dot", "vector_dot", "batch_gemm", "DotExp", "BatchDotExp",
    "sumall_except_dim", "reduce_except_dim", "sum_rows", "reduce_with_axis",
    "reduce_keepdim", "pool", "unpool", "chpool", "ch_unpool", "unpack_patch2col",
    "pack_col2patch", "nn", "softmax", "softmax_grad",
]
_PUBLIC_NOT_STARRED = ("range", "type", "sum")

# Implementation modules leave the namespace (dir(ms), tab completion); ms.engine and
# friends still resolve through __getattr__, so existing code and `import mshadow.x` work.
_PUBLIC_MODULES = {"op", "param", "nn", "type", "ps"}
import types as _types  # noqa: E402  (``type`` is ms.type here)

for _name, _value in list(globals().items()):
    if (isinstance(_value, _types.ModuleType) and _name not in _PUBLIC_MODULES
            and _value.__name__.startswith(__name__ + ".")):
        del globals()[_name]
del _name, _value, _types


def __getattr__(name):
    # Only called for names not found: an implementation submodule (ms.engine, ms._core).
    if not name.startswith("__"):
        import importlib.util
        spec = importlib.util.find_spec(f"{__name__}.{name}")
        if spec is not None and spec.origin not in (None, "namespace"):   # not include/
            return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    dunders = {n for n in globals() if n.startswith("__")} - {"__getattr__", "__dir__"}
    return sorted(set(__all__) | set(_PUBLIC_NOT_STARRED) | dunders)
