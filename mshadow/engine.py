"""ExpEngine: routes ``dst <saver> exp`` to the plan that evaluates it, and owns the caches.

Element-wise expressions (kRValue, kMapper, kChainer) go to a compiled plan, lowered from
their IR node by the device's backend (mshadow/cpu) and cached here, by (device, node, dst
dtype, saver); kComplex ones (dot, reductions) go to their own engine. Every check runs
before the first store. The compiled core's fast path (``_assign`` in _tensor.pxi) reads
this cache and runs a hit; everything else comes here.

    Tensor.__setitem__ -> _core._assign -> [hit] _core.run_plan -> C executor
                                        -> [miss] engine.assign -> cpu.lower -> _core.Plan
"""
from collections import namedtuple

import numpy as np

from . import _core, fallback, ir
from .lower.cpu import compile_plan, read_in_place, strided_dst, UntracedOp
from .readers import READERS_BY_NAME
from .dtypes import CODE_BY_FLAG as _CODE_BY_FLAG, NP_BY_CODE as _NP_BY_CODE, compute_code
from .device import check_devices
from .errors import DTypeError, ShapeError
from .expr import Exp, ScalarExp, _is_scalar, _scalar_value, kComplex

Tensor = _core.Tensor
_run_plan = _core.run_plan
_Plan = _core.Plan
describe = ir.describe

# The one plan cache is the core's (_core.PLANS, bounded, LRU): keys (node, dst code, saver,
# device), with "strided" appended for a strided destination's form. Aliased assignments,
# reductions and view targets use it too. ``_plans`` names it for diagnostics and tests.
_plans = _core.PLANS
_complex_engines = {}
_complex_plans = {}

CacheInfo = namedtuple("CacheInfo", "hits misses maxsize currsize")


def plan_cache_info():
    """Hits and misses of the slow path's plan lookups, the bound and the plans held.

    (The compiled fast path of ``t[:] = exp`` does not count its hits.)"""
    return CacheInfo(*_core.plan_cache_counts())


clear_plan_cache = _core.clear_plan_cache
set_plan_cache_size = _core.set_plan_cache_size


def register_complex(tag, fn, plan=None):
    """Let a kComplex expression kind (dot, reductions) evaluate itself: fn(dst, exp, saver);
    ``plan(exp)``, if given, is the plan it runs (for ``plan_for``), or None."""
    _complex_engines[tag] = fn
    if plan is not None:
        _complex_plans[tag] = plan


_FALLBACK = object()   # marks nodes that hold an untraceable operator


def get_plan(node, dst_code, saver, device=_core.cpu, strided=False):
    """The cached compiled plan for an IR node, dst dtype and saver (compiled on first use).

    With ``strided``, its form for a destination whose column step is not the element size
    (lower.cpu.strided_dst; a view target whose last axis is reversed: _core.run_plan_view)."""
    ck = (node, dst_code, saver, device, "strided") if strided else (node, dst_code, saver, device)
    plan = _core.cached_plan(ck)
    if plan is None:
        check_devices("Assignment", device)
        try:
            prog = compile_plan(node, dst_code, saver)
            plan = _Plan(strided_dst(prog) if strided else prog)
        except UntracedOp:
            plan = _FALLBACK
        _core.cache_plan(ck, plan)
    return plan


def _parts(dst, value):
    """(node, leaves, scalars, code, shape) of an assigned value; refuses bad values."""
    code = _CODE_BY_FLAG[dst.type_flag]
    if isinstance(value, Exp):
        return value.key, value.leaves, value.scalars, value.code, value.shape
    if isinstance(value, Tensor):
        check_devices("Assignment", dst.device, (value.device,), gpu_ok=True)
        return (ir.LEAF[_CODE_BY_FLAG[value.type_flag]], (value,), (),
                _CODE_BY_FLAG[value.type_flag], value.shape)
    if _is_scalar(value):
        if isinstance(value, ScalarExp):
            if value.dtype is not None and value.dtype != dst.dtype:
                raise DTypeError(f"Assignment: scalar of dtype {value.dtype} to a tensor of dtype "
                                 f"{dst.dtype}; use ms.tcast")
            value = value.value
        return ir.SCALAR, (), (_scalar_value(value, code, "Assignment"),), code, dst.shape
    raise TypeError(f"cannot assign {type(value).__name__} to a tensor (expected an "
                    f"expression, a Tensor, a numpy array or a real scalar)")


def checked(dst, value, shape=None):
    """(node, leaves, scalars) of ``value`` (not kComplex) stored into ``dst``, or into a
    view of ``dst`` of ``shape`` (extension/targets.py), after an assignment's checks: a
    numpy array is wrapped, a scalar converted to dst's type; shape and dtype must match."""
    if isinstance(value, np.ndarray):
        value = _core.from_numpy(value)
    node, leaves, scalars, ecode, eshape = _parts(dst, value)
    if shape is None:
        shape = dst.shape
    elif node is ir.SCALAR:
        eshape = shape
    if eshape != shape:
        raise ShapeError(f"Assignment: Shape of Tensors are not consistent with target, "
                         f"eshape: {eshape} dshape:{shape} (expression {describe(node)})")
    if ecode != _CODE_BY_FLAG[dst.type_flag]:
        raise DTypeError(f"Assignment: expression of dtype {value.dtype} to a tensor of dtype "
                         f"{dst.dtype}; use ms.tcast")
    return node, leaves, scalars


def assign(dst, value, saver):
    """Evaluate ``dst <saver> value``; ``value`` is an expression, a tensor, an array or a scalar."""
    if isinstance(value, Exp) and value.exp_type == kComplex:
        return _complex_engines[value.key[0]](dst, value, saver)
    node, leaves, scalars = checked(dst, value)
    if dst.device is not _core.cpu:        # one kernel from the CUDA lowering
        from .cuda import executor
        return executor.assign(dst, node, leaves, scalars, saver)
    code = _CODE_BY_FLAG[dst.type_flag]
    plan = get_plan(node, code, saver, dst.device)
    if plan is _FALLBACK:
        if dst.readonly:
            raise ValueError("assignment destination is read-only")
        return fallback.evaluate(node, leaves, scalars, dst, saver, _materialized)
    if not _run_plan(plan, dst, leaves, scalars):
        # the expression reads the destination at other positions: evaluate it into a
        # temporary of the compute type first (a float16 destination is then rounded once,
        # by the saver's store), so no block sees half-written results
        tcode = compute_code(code)
        _core.run_through_temporary(get_plan(node, tcode, "saveto"),
                                    get_plan(ir.LEAF[tcode], code, saver), dst, leaves, scalars)


def _materialized(node, leaves, scalars, shape):
    """The values of ``node`` (binding ``leaves`` and ``scalars``) in a new dense tensor of
    ``shape``, for the numpy fallback: by its plan, or, when something under it holds an
    untraceable operator, with the sources a gather or a view stages materialized first."""
    tmp = _core.TensorContainer(shape, init=None, pad=False, dtype=_NP_BY_CODE[node.code])
    plan = get_plan(node, node.code, "saveto")
    t = type(node)
    if plan is not _FALLBACK:
        _run_plan(plan, tmp, leaves, scalars)          # tmp is fresh: nothing aliases it
    elif t is ir.Gather:
        reader, args = READERS_BY_NAME[node.reader], leaves[0]
        keys, bound, li, si = [], [args], 1, 0
        for pos, src in enumerate(node.srcs):
            nl, ns = len(ir.leaves(src)), ir.scalar_count(src)
            if read_in_place(reader, src) is not None:
                keys.append(src)
                bound.append(leaves[li])
            else:
                keys.append(ir.LEAF[src.code])
                bound.append(_materialized(src, leaves[li:li + nl], scalars[si:si + ns],
                                           args.src_shapes[pos]))
            li, si = li + nl, si + ns
        _run_plan(get_plan(ir.Gather(node.reader, node.code, *keys), node.code, "saveto"),
                  tmp, tuple(bound), ())
    elif t is ir.View and node.src is not None:
        vl = leaves[0]
        vals = _materialized(node.src, leaves[1:], scalars, vl.src.shape).numpy().reshape(-1)
        isz = vals.itemsize
        tmp.numpy()[...] = np.lib.stride_tricks.as_strided(vals[vl.offset // isz:],
                                                           tuple(vl.shape), vl.strides)
    else:
        fallback.evaluate(node, leaves, scalars, tmp, "saveto", _materialized)
    return tmp


def plan_for(dst, exp, saver="saveto"):
    """The compiled plan ``dst <saver> exp`` would run (for ``disassemble``)."""
    if isinstance(exp, Tensor):
        node = ir.LEAF[_CODE_BY_FLAG[exp.type_flag]]
    elif isinstance(exp, Exp):
        if exp.exp_type == kComplex:
            plan = _complex_plans.get(exp.key[0], lambda e: None)(exp)
            if isinstance(plan, _Plan):
                return plan
            raise TypeError(f"{describe(exp.key)} is kComplex: its own engine evaluates it "
                            f"(BLAS for dot, the fused reduction for reductions), not a plan")
        node = exp.key
    else:
        node = ir.SCALAR
    plan = get_plan(node, _CODE_BY_FLAG[dst.type_flag], saver, dst.device)
    if plan is _FALLBACK:
        raise TypeError(f"{describe(node)} holds an operator that could not be traced: it has no "
                        f"compiled plan (it runs through mshadow/fallback.py)")
    return plan


_core.install_layer(assign=assign)
