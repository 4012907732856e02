"""ExpEngine: routes ``dst <saver> exp`` to the plan that evaluates it.

Element-wise expressions (kRValue, kMapper, kChainer) go to a cached MapPlan; kComplex
ones (dot) go to their own engine. Every check runs before the first store.
"""
from collections import OrderedDict, namedtuple

import numpy as np

from . import _core
from .errors import DeviceError, DTypeError, ShapeError
from .expr import Exp, ScalarExp, _is_scalar, _scalar_value, _CODE_BY_FLAG, _LEAF_KEY, kComplex, describe
from . import fallback
from .plan import compile_plan, UntracedOp

Tensor = _core.Tensor
_run_plan = _core.run_plan
_Plan = _core.Plan

# (key, dst code, saver) -> Plan, least recently used first. Bounded: a long-running process
# that builds ever new structures keeps at most PLAN_CACHE_SIZE plans (a few KiB each).
PLAN_CACHE_SIZE = 2048
_plans = OrderedDict()
_stats = {"hits": 0, "misses": 0}
_complex_engines = {}

CacheInfo = namedtuple("CacheInfo", "hits misses maxsize currsize")


def plan_cache_info():
    """Hits and misses of the slow path's plan lookups, the bound and the plans held.

    (The compiled fast path of ``t[:] = exp`` does not count its hits.)"""
    return CacheInfo(_stats["hits"], _stats["misses"], PLAN_CACHE_SIZE, len(_plans))


def clear_plan_cache():
    """Drop every compiled plan (they are compiled again on next use)."""
    _plans.clear()
    _core.clear_aux_plans()
    _stats["hits"] = _stats["misses"] = 0


def set_plan_cache_size(n):
    """Keep at most ``n`` >= 1 compiled plans (default 2048)."""
    global PLAN_CACHE_SIZE
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_plan_cache_size: expected an int >= 1, got {n!r}")
    PLAN_CACHE_SIZE = n
    while len(_plans) > n:
        _plans.popitem(last=False)


def register_complex(tag, fn):
    """Let a kComplex expression kind (dot, reductions) evaluate itself: fn(dst, exp, saver)."""
    _complex_engines[tag] = fn


_FALLBACK = object()   # marks keys that hold an untraceable operator


def get_plan(key, dst_code, saver):
    """The cached compiled plan for an expression structure, dtype and saver (compiled on first use)."""
    ck = (key, dst_code, saver)
    plan = _plans.get(ck)
    if plan is None:
        _stats["misses"] += 1
        try:
            plan = _Plan(compile_plan(key, dst_code, saver))
        except UntracedOp:
            plan = _FALLBACK
        _plans[ck] = plan
        if len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    else:
        _stats["hits"] += 1
        _plans.move_to_end(ck)
    return plan


def assign(dst, value, saver):
    """Evaluate ``dst <saver> value``; ``value`` is an expression, a tensor, an array or a scalar."""
    code = _CODE_BY_FLAG[dst.type_flag]
    if isinstance(value, Exp):
        if value.exp_type == kComplex:
            return _complex_engines[value.key[0]](dst, value, saver)
        key, leaves, scalars = value.key, value.leaves, value.scalars
        ecode, eshape = value.code, value.shape
    elif isinstance(value, Tensor):
        if value.device is not dst.device:
            raise DeviceError(f"Assignment: a {value.device.name} tensor to a {dst.device.name} "
                              f"tensor; use ms.copy between devices")
        key, leaves, scalars = _LEAF_KEY[value.type_flag], (value,), ()
        ecode, eshape = _CODE_BY_FLAG[value.type_flag], value.shape
    elif _is_scalar(value):
        if isinstance(value, ScalarExp):
            if value.dtype is not None and value.dtype != dst.dtype:
                raise DTypeError(f"Assignment: scalar of dtype {value.dtype} to a tensor of dtype "
                                 f"{dst.dtype}; use ms.tcast")
            value = value.value
        key, leaves, scalars = ("S",), (), (_scalar_value(value, code, "Assignment"),)
        ecode, eshape = code, dst.shape
    elif isinstance(value, np.ndarray):
        return assign(dst, _core.from_numpy(value), saver)
    else:
        raise TypeError(f"cannot assign {type(value).__name__} to a tensor (expected an "
                        f"expression, a Tensor, a numpy array or a real scalar)")
    if eshape != dst.shape:
        raise ShapeError(f"Assignment: Shape of Tensors are not consistent with target, "
                         f"eshape: {eshape} dshape:{dst.shape} (expression {describe(key)})")
    if ecode != code:
        raise DTypeError(f"Assignment: expression of dtype {value.dtype} to a tensor of dtype "
                         f"{dst.dtype}; use ms.tcast")
    plan = get_plan(key, code, saver)
    if plan is _FALLBACK:
        if dst.readonly:
            raise ValueError("assignment destination is read-only")
        return fallback.evaluate(key, leaves, scalars, dst, saver)
    _run_plan(plan, dst, leaves, scalars)


def plan_for(dst, exp, saver="saveto"):
    """The compiled plan ``dst <saver> exp`` would run (for ``disassemble``)."""
    if isinstance(exp, Tensor):
        key = _LEAF_KEY[exp.type_flag]
    elif isinstance(exp, Exp):
        key = exp.key
    else:
        key = ("S",)
    plan = get_plan(key, _CODE_BY_FLAG[dst.type_flag], saver)
    if plan is _FALLBACK:
        raise TypeError(f"{describe(key)} holds an operator that could not be traced: it has no "
                        f"compiled plan (it runs through mshadow/fallback.py)")
    return plan
