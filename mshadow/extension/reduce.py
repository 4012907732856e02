"""Reductions of reduceto1d.h and reduce_with_axis.h as kComplex expressions and their engine.

A source that is ``t.T`` or a strided view is reduced by numpy over a zero-copy view, and so
is a tensor's maximum or minimum over leading axes; a tensor's last axis alone is folded a row
at a time by the reducer's block kernel, and a tensor's sum over other axes is fused as
``x * 1`` is. A sum over any other expression is fused: the expression is evaluated block by block
and summed where it is computed, with no temporary of its size (docs/reduce_nn.md gives the
summation order); so are maximum and minimum. The arg-mask (argmax/argmin) over such an
expression evaluates it a chunk of slabs at a time into cache-sized scratch and takes each
chunk's indices with numpy. The small result is stored through the engine (saveto of a plain
cpu destination: copied straight into it, _core.store_array).
"""
# Design: this route never writes the destination itself; every store goes through
# mshadow.engine.assign with the assignment's saver, or, for saveto, _core.store_array, which
# copies only what saveto would store and leaves everything else (read-only, freed, another
# dtype or shape, overlapping bytes) to the engine, so dtype, read-only and freed-tensor rules
# live in one place. (The compiled statement path, _core.reduce_fast, stores a saveto into a
# live, writable cpu destination of the right dtype and shape itself, after the whole result
# is computed, and leaves everything else to this route.) mshadow's reduce_with_axis/reduce_keepdim are chainers that nest in
# element-wise expressions; here they are evaluated by this engine and must be assigned to a
# tensor first.
import functools
import math
import numbers

import numpy as np

from .. import _core, ir
from ..device import check_devices, cpu
from ..engine import assign, get_plan, register_complex
from ..lower.cpu import REGISTER_ROW_MIN, group_rows_follow, reduce_schedule
from ..dtypes import compute_code
from ..errors import DTypeError, ShapeError
from ..expr import (Exp, TransposeExp, tcast, scale_value as _scale_value, _CODE_BY_FLAG, _NP_BY_CODE,
                    _is_scalar, describe, kComplex)
from ..op import _Reducer, red, reducer_names
from ..readers import REDUCER_BY_NAME, REDUCER_IDS, REDUCER_TABLE
from ..shape import Shape
from .build import gather
from .views import ViewExp, reshape

Tensor = _core.Tensor

__all__ = ["ReduceExp", "sumall_except_dim", "reduce_except_dim", "sum_rows",
           "reduce_with_axis", "reduce_keepdim", "reduce_into"]

# by reducer name (readers.REDUCER_TABLE): numpy's combining ufunc, its index-of function
_UFUNC = {r.name: getattr(np, r.ufunc) for r in REDUCER_TABLE}
_ARG = {r.name: getattr(np, r.arg) for r in REDUCER_TABLE if r.arg}
SAVERS = tuple(ir.SAVERS)


def check_reducer(reducer, where):
    """``reducer`` must be one of ms.red.* (readers.REDUCER_TABLE)."""
    if not isinstance(reducer, _Reducer) or reducer.name not in _UFUNC:
        raise TypeError(f"{where}: reducer must be {reducer_names()}, got {reducer!r}")
    return reducer


def check_saver(saver, where):
    if saver not in SAVERS:
        raise ValueError(f"{where}: saver must be one of {', '.join(SAVERS)} (ms.sv.*), "
                         f"got {saver!r}")
    return saver


def source(exp, where):
    """(operand, shape, code) of something a reduction can read: a Tensor, an array, an Exp."""
    if isinstance(exp, np.ndarray):
        exp = _core.from_numpy(exp)
    if isinstance(exp, Tensor):
        return exp, exp.shape, _CODE_BY_FLAG[exp.type_flag]
    if isinstance(exp, Exp):
        return exp, exp.shape, exp.code
    raise TypeError(f"{where}: cannot reduce {type(exp).__name__} {exp!r} (expected a Tensor, "
                    f"an expression or a numpy array)")


def scale_value(v, code, where):
    return _scale_value(v, code, where, "reduction")


class ReduceExp(_core.ReduceNode):
    """A lazy reduction (kComplex): ``form`` is "except_dim" (keep ``axis``, reduce the rest),
    "with_axis" (remove ``axis``) or "keepdim" (``axis`` kept with size 1). Its fields and
    construction are compiled (_core.ReduceNode, make_reduce, reduce_node)."""

    __slots__ = ()

    def as_chainer(self):
        """The reduction as mshadow's chainer, for use inside another expression (an
        element-wise operand, an extension's source, a view's): a gather that reduces per
        output element (readers.py reduce_axis / reduce_last), times the scale. None for
        the except_dim forms, which are kComplex in mshadow too."""
        if self.form == "except_dim":
            return None
        src = _core.chained(self.src)      # a reduction of a reduction: chainers both
        shape, a, nd = tuple(src.shape), self.axis, len(src.shape)
        red_id, mask = REDUCER_IDS[self.reducer.name], int(self.mask)
        if a == nd - 1:
            e = gather("reduce_last", [src], self.shape, self.code, red=red_id, mask=mask,
                       C=shape[-1], W=self.shape[-1])
        else:
            e = gather("reduce_axis", [src], self.shape, self.code, red=red_id, mask=mask,
                       B=shape[a], M=Shape(shape).prod_shape(a + 1, nd - 1))
        return e if self.scale == 1 else e * self.scale

    def __repr__(self):
        scale = "" if self.scale == 1 else f" * {self.scale!r}"
        return (f"ReduceExp({self.where}({describe(_key_of(self.src))}){scale}, "
                f"shape={self.shape}, dtype={self.code})")


def _key_of(x):
    return ir.LEAF[_CODE_BY_FLAG[x.type_flag]] if isinstance(x, Tensor) else x.key


def _node(src, code, shape, form, reducer, axis, mask, where):
    return _core.make_reduce(src, code, shape, form, reducer, axis, mask, where)


def _axis(axis, nd, where, what):
    if type(axis) is int and 0 <= axis < nd:   # the common case, without the ABC check
        return axis
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (numbers.Integral,)):
        raise TypeError(f"{where}: {what} must be an integer, got {axis!r}")
    if not -nd <= axis < nd:
        raise ShapeError(f"{where}: {what} {axis} out of range for a {nd}-D expression")
    return int(axis) % nd


def check_keep_lowest(shape, where):
    """mshadow's MapReduceKeepLowest has no init value: it needs at least one row."""
    rows = 1
    for n in shape[:-1]:
        rows *= n
    if rows == 0:
        raise ShapeError(f"{where}: can not reduce over empty tensor (shape {tuple(shape)} "
                         f"has no rows to keep the last axis of)")


def _except_dim(exp, dimkeep, reducer, where):
    node = _core.reduce_node(exp, "except_dim", reducer, dimkeep, where)
    if node is not None:
        return node
    check_reducer(reducer, where)
    src, shape, code = source(exp, where)
    d = _axis(dimkeep, len(shape), where, "dimkeep")
    if d == len(shape) - 1:
        check_keep_lowest(shape, where)
    return _node(src, code, (shape[d],), "except_dim", reducer, d, False, where)


def reduce_except_dim(exp, dimkeep, reducer):
    """``reduce_except_dim<dimkeep, Reducer>(exp)``: a 1-D result of length shape[dimkeep].

    Keeping the last axis follows MapReduceKeepLowest (starts from row 0, so an empty
    source is a ShapeError); any other axis MapReduceKeepHighDim (starts from the
    reducer's init value: 0, -inf, +inf, 1; integer types their min/max).
    """
    check_reducer(reducer, "reduce_except_dim")
    return _except_dim(exp, dimkeep, reducer, f"reduce_except_dim<{dimkeep}, red::{reducer.name}>")


def sumall_except_dim(exp, dimkeep):
    """``sumall_except_dim<dimkeep>(exp)``: the sum over every axis but ``dimkeep`` (1-D)."""
    return _except_dim(exp, dimkeep, red.sum, f"sumall_except_dim<{dimkeep}>")


def sum_rows(exp):
    """``sum_rows(exp)`` of a 2-D expression: the column sums, ``sumall_except_dim<1>``."""
    node = _core.reduce_node(exp, "except_dim", red.sum, 1, "sum_rows", 2)
    if node is not None:
        return node
    src, shape, code = source(exp, "sum_rows")
    if len(shape) != 2:
        raise ShapeError(f"sum_rows: expects a 2-D expression, got shape {tuple(shape)}")
    check_keep_lowest(shape, "sum_rows")             # (_except_dim's, for the last axis)
    return _node(src, code, (shape[1],), "except_dim", red.sum, 1, False, "sum_rows")


def _with_axis(src, axis, reducer, mask, keepdim, name):
    if not mask and type(reducer) is _Reducer:
        node = _core.reduce_node(src, "keepdim" if keepdim else "with_axis", reducer, axis,
                                 _where_of(name, reducer))
        if node is not None:
            return node
    check_reducer(reducer, name)
    src, shape, code = source(src, name)
    where = f"{name}<red::{reducer.name}, {'true' if mask else 'false'}>"
    if isinstance(axis, (numbers.Integral,)) and not isinstance(axis, bool) \
            and axis >= len(shape):
        raise ShapeError(f"{where}: reduce axis out of bound: axis {axis} for a "
                         f"{len(shape)}-D expression of shape {tuple(shape)}")
    a = _axis(axis, len(shape), where, "axis")
    if mask and reducer.name not in _ARG:
        raise ValueError(f"{where}: mask=True returns the index of the maximum or minimum; "
                         f"it needs {reducer_names(_ARG)}, got ms.red.{reducer.name}")
    if mask:
        _check_index_fits(shape[a], code, a, reducer, name, where)
    if not keepdim and len(shape) == 1:
        raise ShapeError(f"{where}: a 1-D source would reduce to a 0-D result; use "
                         f"reduce_keepdim (shape (1,)) or reduce_except_dim")
    out = list(shape)
    if keepdim:
        out[a] = 1
    else:
        del out[a]
    return _node(src, code, out, "keepdim" if keepdim else "with_axis", reducer, a,
                 bool(mask), where)


@functools.lru_cache(maxsize=64)
def _where_of(name, reducer):
    """reduce_with_axis / reduce_keepdim's name in messages, without the arg-mask."""
    return f"{name}<red::{reducer.name}, false>"


def _check_index_fits(n, code, axis, reducer, name, where):
    """The arg-mask's result is the index, stored as the source's dtype: every index of the
    axis must be a value of that dtype (uint8 would turn index 299 into 43)."""
    dt = np.dtype(_NP_BY_CODE[code])
    top = np.iinfo(dt).max if dt.kind in "iu" else 2 ** (np.finfo(dt).nmant + 1)
    if n - 1 > top:
        wide = "int32" if n - 1 < 2**31 else "int64"
        raise DTypeError(f"{where}: the index along axis {axis} goes up to {n - 1}, but the "
                         f"index is stored as the source's dtype, {dt.name}, which holds "
                         f"every whole number only up to {top}; reduce a wider copy of the "
                         f"source: "
                         f"ms.{name}(ms.tcast(ms.{wide}, x), {axis}, ms.red.{reducer.name}, "
                         f"mask=True), assigned to an {wide} tensor")


def reduce_with_axis(src, axis, reducer, mask=False):
    """``reduce_with_axis<Reducer, mask>(src, axis)``: reduce ``axis`` away.

    ``mask=True`` gives the index (as the dtype) of the first maximum/minimum. Assigned
    whole (``y[:] = reduce_with_axis(...)``) it runs in the fused reduction engine; inside
    another expression it is mshadow's chainer (``as_chainer``): each element reduces its
    source elements in order.
    """
    return _with_axis(src, axis, reducer, mask, False, "reduce_with_axis")


def reduce_keepdim(src, axis, reducer, mask=False):
    """``reduce_keepdim<Reducer, mask>(src, axis)``: as reduce_with_axis, ``axis`` kept as 1."""
    return _with_axis(src, axis, reducer, mask, True, "reduce_keepdim")


# ---- the engine -------------------------------------------------------------------------
def source_devices(src):
    """The devices of every tensor a source reads (a view leaf reports its tensor's)."""
    if isinstance(src, Tensor):
        return (src.device,)
    return _core.leaf_devices(src.leaves)


def _array(src):
    """src's values as a numpy array: a zero-copy view where one exists."""
    if isinstance(src, Tensor):
        return src.numpy()
    if isinstance(src, ViewExp) and src.producer is None:
        return src.view.numpy()
    if isinstance(src, TransposeExp) and type(src.key) is ir.Leaf:
        a = src.leaves[0].numpy()
        return a.T if a.ndim == 2 else a.reshape(tuple(src.shape))   # 1-D t.T: a column
    # no view describes it: evaluate once into a temporary (allocates the source's size)
    tmp = _core.TensorContainer(tuple(src.shape), init=None, pad=False,
                                dtype=_NP_BY_CODE[src.code])
    assign(tmp, src, "saveto")
    return tmp.numpy()


def init_value(name, dtype):
    """The reducer's SetInitValue for a numpy dtype, from its row's init (MXNet's: -inf/+inf
    for floats, the type's limits for ints); codegen_cpu.reducer_init spells it in C."""
    init = REDUCER_BY_NAME[name].init
    if init not in ("-inf", "+inf"):
        return init
    if dtype.kind == "f":
        return float(init)
    info = np.iinfo(dtype)
    return info.min if init == "-inf" else info.max


@functools.lru_cache(maxsize=None)   # a few (form, axis, rank) triples: one tuple each
def _reduced_axes(form, axis, nd):
    return tuple(k for k in range(nd) if k != axis) if form == "except_dim" else (axis,)


def _result_shape(shape, form, axis):
    if form == "except_dim":
        return (shape[axis],)
    out = list(shape)
    if form == "keepdim":
        out[axis] = 1
    else:
        del out[axis]
    return tuple(out)


def _fusable(src):
    """An expression that no zero-copy view describes (else numpy reads it in place)."""
    return (isinstance(src, Exp)
            and src.exp_type != kComplex and not isinstance(src, ViewExp)
            and not (isinstance(src, TransposeExp) and type(src.key) is ir.Leaf))


ROWS_PER_GROUP = 64   # rows a column reduction adds in order before the next accumulator
# the ordinary saver that folds as a reducer does, by its combine operator (sum: plusto)
_FOLD_SAVER = {s.op: s.name for s in ir.SAVER_TABLE if s.op is not None}


GROUP_BYTES = 4096   # narrow rows a fold takes a call, at most (plan_exec.h ms_group_rows)
GROUP_ROWS_MIN = 3   # fewer a call: one, the fold in the value's chain (at 2, sum_rows(x * 2)
                     # of 4096 x 512 float32 took 1.02-1.14x the chain's time; at 3, 0.86x)
WIDE_ROWS_A_CALL = 4    # wider rows of a tensor a fold takes a call (it reads them in place)


def rows_a_call(shape, first, cdt, in_place=False):
    """The rows of a group one call folds when the source of ``shape`` is reduced over the
    leading axis ``first`` in the compute dtype ``cdt``, where a group's rows follow one
    another (no axis of size > 1 between ``first`` and the last); else 1:
    - narrow rows: up to GROUP_BYTES of them, at least GROUP_ROWS_MIN;
    - wider rows of a tensor (``in_place``: the fold reads them where they are):
      WIDE_ROWS_A_CALL (sum_rows of 256 x 1024 float32, in cache: 0.66-0.70x the time of a
      row a call at 8 to 64 rows on Zen 5. On Zen 3 (AVX2), 4 rows: in cache 41-45 us
      against 51-60 at 16; 4096 x 1024 from L3 665-932 us against 1098-1316 at 16: a call's
      rows are that many interleaved streams, and each row's prefetch of the next call's row
      helped at 4 rows a call and cost 1.3x at 16, in a C replica of acc_<block>_<code>);
    - wider rows of an expression: 1, the fold as the chain's last step (their values would
      be evaluated into registers first: 1.1-1.5x the time at 4 to 16 rows)."""
    if not group_rows_follow(shape, first):
        return 1
    nr = min(ROWS_PER_GROUP, GROUP_BYTES // (shape[-1] * cdt.itemsize))
    if nr < GROUP_ROWS_MIN and in_place:
        return WIDE_ROWS_A_CALL
    return nr if nr >= GROUP_ROWS_MIN else 1


# a tensor's own values, as reduce_into makes them for a tensor's sum: the identity of a leaf
_TENSOR_VALUES = {code: ir.Map("identity", code, leaf) for code, leaf in ir.LEAF.items()}


def _in_place(key, code):
    """The value of IR ``key`` reduced is a tensor's own (the fold reads its rows where
    they are)."""
    return key == _TENSOR_VALUES.get(code)


def _acc_saver(nr, row):
    """The saver that accumulates rows, ``nr`` a call, in row ``row``'s fold: its
    accumulating saver (ir.ACCUMULATORS), whose fold takes several rows a call; for one
    row a call, the ordinary saver of the same fold (sum: plusto) when there is one, which
    the value's chain takes as its last step (a 1024-wide sum_rows(x * 2) ran 1.2-1.3x
    slower as a chain, then a fold). The same operations in the same order either way."""
    return row.acc if nr > 1 else _FOLD_SAVER.get(row.combine, row.acc)


@functools.lru_cache(maxsize=None)   # a few (code, reducer) pairs
def _fused_types(code, reducer_name):
    """(compute code, its numpy dtype, the wide dtype partials are combined in, the
    reducer's row, its ufunc) of a fused reduction: looked up once per dtype and reducer."""
    cc = compute_code(code)
    row = REDUCER_BY_NAME[reducer_name]
    cdt = np.dtype(_NP_BY_CODE[cc])
    wide = cdt
    if row.lanes and wide.kind == "f":   # an arithmetic fold: float partials in float64
        wide = np.dtype(np.float64)
    return cc, cdt, wide, row, _UFUNC[reducer_name]


def _recipe(key, code, shape, form, reducer_name, axis, src_shape, merged, fold=None):
    """The ReduceRecipe (_reduce.pxi) of the registers schedule for an expression of IR
    ``key`` and dtype ``code`` read as ``shape`` (``merged``: its leaves, contiguous tensors
    of ``src_shape``, viewed as ``shape``): the last axis reduced by per-block partials of
    each row, else the first reduced axis accumulated a group of rows at a time, in the
    compute type, float partials then added in float64; None when nothing is reduced (an
    except_dim of a 1-D source) or the expression holds an untraceable operator. With
    ``fold`` (_fold_shape: ``shape`` is its (A, B * C) and ``fold`` its (B, C)), the rows of
    (A, B * C) are accumulated, then each kept index's C values are added."""
    cc, cdt, wide, row, ufunc = _fused_types(code, reducer_name)
    nd = len(shape)
    if fold is not None:     # the rows of (A, B * C) accumulated, then each B's C values
        axes, out_shape = (0,), (fold[0],)
    else:
        out_shape = _result_shape(shape, form, axis)
        axes = _reduced_axes(form, axis, nd)
        if not axes:     # nothing to reduce (except_dim of a 1-D source): the values themselves
            return None
    if nd == 2 and axes == (0,) and not merged and ir.reads_transposed(key):
        # the columns of an expression of transposed tensors (sum_rows(a.T * w.T)) are the
        # rows of the expression of the tensors: reduced along them, each row read in
        # order (accumulating a.T's rows read a column of a an element at a time: 1024^2
        # float32 took 40x the time)
        key, shape, axes = ir.transposed(key), (shape[1], shape[0]), (1,)
    if axes[-1] == nd - 1:   # the last axis is reduced: per-block partial results of each row
        by_rows, first, nr = True, nd - 1, 1
        plan = get_plan(key, code, row.block)
        rest = axes[:-1]     # (ascending: the last is nd - 1)
    else:                # a leading axis: accumulate rows of groups in order, then the groups
        by_rows, first = False, axes[0]
        nr = rows_a_call(shape, first, cdt, _in_place(key, code))
        plan = get_plan(key, cc, _acc_saver(nr, row))
        # except_dim: the other leading axes; a fold: the C values of each kept index
        rest = (1,) if fold is not None else tuple(k - 1 for k in axes[1:])
    if not isinstance(plan, _core.Plan):
        return None
    return _core.ReduceRecipe(plan, by_rows, shape, src_shape, merged, first, ROWS_PER_GROUP, nr,
                              init_value(reducer_name, cdt), ufunc, wide, cdt,
                              np.dtype(_NP_BY_CODE[code]), rest, out_shape, fold)


def fused_reduce(src, form, reducer_name, axis):
    """The reduction of the expression ``src`` over the reduced axes, evaluated and reduced
    in one pass (its _recipe), in the wide type (float64 for float sums of partial results,
    else the compute type; _finish casts it to the compute type); None if the expression
    holds an untraceable operator."""
    shape = tuple(src.shape)
    rc = _recipe(src.key, src.code, shape, form, reducer_name, axis, shape, False)
    if rc is None:
        return None
    return _Fused(_core.run_recipe(rc, src.leaves, src.scalars), rc.cdt)


def fast_recipe(exp):
    """The recipe the statement path (_core.reduce_fast) runs for the ReduceExp ``exp``,
    decided from its structure and its source's shape alone: reduce_into's registers
    schedule for a source whose leaves are contiguous tensors (merged rows included); None
    where reduce_into takes another route (an arg-reduction, numpy over a tensor or a view,
    the chunk schedule, nothing to reduce)."""
    src, form, axis, name = exp.src, exp.form, exp.axis, exp.reducer.name
    if exp.mask:
        return None
    if isinstance(src, Tensor):     # reduce_into's tensor sum: the identity of its leaf
        if not REDUCER_BY_NAME[name].lanes:
            return None
        key, code = _TENSOR_VALUES[exp.code], exp.code
    elif _fusable(src):
        key, code = src.key, src.code
    else:
        return None
    shape = tuple(src.shape)
    if not math.prod(shape):
        return None
    fold = _fold_shape(shape, form, axis, name)
    if fold is not None and _map_tree(src):
        return _recipe(key, code, fold[0], form, name, axis, shape, True, fold[1])
    merged = _merge_shape(shape, form, axis)
    if merged is not None and not _map_tree(src):
        return None     # reduce_into reads it through a view (views.reshape)
    run = shape if merged is None else merged
    if reduce_schedule(run, form, axis, False) == "chunk":
        return None
    return _recipe(key, code, run, form, name, axis, shape, merged is not None)


ROW_KERNEL_MAX = 4096   # elements of the registers schedule's block (_engine.pxi RBLOCK)


def row_kernel(shape, code, form, reducer_name, axis):
    """The reducer's block kernel, ``reduce_<block>_<code>``, that folds each row of a
    source of ``shape`` and dtype ``code`` alone, 256 rows a call (_core.reduce_rows), when
    the last axis alone is reduced and a row is at most one block of the registers schedule
    (so the same bits as that schedule: x and x * 1 agree); else None. A float16 source
    (its chunks hold float16, its folds float32) takes numpy's route."""
    nd = len(shape)
    if (not nd or _reduced_axes(form, axis, nd) != (nd - 1,)
            or not 0 < shape[-1] <= ROW_KERNEL_MAX or compute_code(code) != code):
        return None
    name = f"reduce_{REDUCER_BY_NAME[reducer_name].block}_{code}"
    return name if _core.has_kernel(name) else None


def _rows_reduced(kernel, rows, out_shape, cdt):
    """The values of ``rows`` (a 2-D array or a cpu tensor) folded a row each by
    ``kernel``, shaped ``out_shape``, in the compute type ``cdt``."""
    n = math.prod(out_shape)
    return _core.reduce_rows(kernel, rows, np.empty(n, cdt)).reshape(out_shape)


CHUNK_ELEMS = 1 << 17   # elements of a chunk of a reduction's source (512 KiB of float32)


def _chunk_split(shape, axis, mask):
    """(k, per): a chunk is ``per`` indices of axis k, every axis after it whole, at one
    index of the axes before it; k is the first axis whose slabs hold at most CHUNK_ELEMS
    elements. An arg-reduction's chunks hold its axis whole (k before it)."""
    nd = len(shape)
    suffix = [1] * (nd + 1)
    for j in range(nd - 1, -1, -1):
        suffix[j] = suffix[j + 1] * shape[j]
    k = next(j for j in range(nd) if suffix[j + 1] <= CHUNK_ELEMS)
    if mask and k >= axis:
        if axis == 0:
            return 0, shape[0]        # the whole source is one chunk
        k = axis - 1
    return k, max(1, CHUNK_ELEMS // max(suffix[k + 1], 1))


def chunked_reduce(src, form, reducer_name, axis, mask):
    """The reduction of the expression ``src`` by its chunk program (lower.cpu.compile_reduce):
    the source is evaluated a chunk at a time into cache-sized scratch (never whole), each
    chunk is reduced by numpy as a tensor is (argmax/argmin for an arg-reduction) and the
    chunks' results are combined in chunk order, in the compute type (as numpy adds the
    leading rows of a tensor; integers wrap). Returns the values in the compute type; None
    if the expression holds an untraceable operator."""
    shape, code = tuple(src.shape), src.code
    nd = len(shape)
    axes = _reduced_axes(form, axis, nd)
    if not axes and not mask:
        return None
    node = ir.Reduce(code, form, reducer_name, axis, mask, src.key)
    plan = get_plan(node, code, "saveto")
    if not isinstance(plan, _core.Plan):
        return None
    cc = compute_code(code)
    k, per = _chunk_split(shape, axis, mask)
    lead = shape[:k]
    if mask:
        arg, parts = _ARG[reducer_name], []

        def consume(p, i0, i1, chunk):   # first occurrence; a NaN counts as the extreme
            parts.append(arg(chunk, axis=axis - k))

        _core.run_chunks(plan, shape, src.leaves, src.scalars, k, per, consume)
        res = parts[0] if len(parts) == 1 else np.concatenate(parts)
        res = res.reshape(_result_shape(shape, "keepdim" if form == "keepdim" else "with_axis",
                                        axis))
        return res.astype(_NP_BY_CODE[cc])
    ufunc = _UFUNC[reducer_name]
    cdt = np.dtype(_NP_BY_CODE[cc])
    kernel = row_kernel(shape, code, form, reducer_name, axis)
    if kernel is not None:   # whole rows in every chunk (k < nd - 1): each row folded alone
        out, cols = np.empty(math.prod(shape[:-1]), cdt), shape[-1]
        per_index = math.prod(shape[k + 1:nd - 1])    # rows an index of axis k holds

        def consume(p, i0, i1, chunk):   # rows from index i0 of axis k at leading index p
            at = (p * shape[k] + i0) * per_index
            rows = chunk.reshape(-1, cols)
            _core.reduce_rows(kernel, rows, out[at:at + rows.shape[0]])

        _core.run_chunks(plan, shape, src.leaves, src.scalars, k, per, consume)
        return out.reshape(_result_shape(shape, form, axis))
    acc = np.full(tuple(1 if j in axes else shape[j] for j in range(nd)),
                  init_value(reducer_name, cdt), dtype=cdt)
    local = tuple(j - k for j in axes if j >= k)          # the chunk's reduced axes
    whole_k = k in axes

    def consume(p, i0, i1, chunk):
        part = ufunc.reduce(chunk, axis=local, dtype=cdt, keepdims=True) if local else chunk
        idx = []
        for j in range(k - 1, -1, -1):                    # p's index of each leading axis
            p, q = divmod(p, lead[j])
            idx.append(0 if j in axes else q)
        at = acc[tuple(idx[::-1]) + (slice(0, 1) if whole_k else slice(i0, i1),)]
        ufunc(at, part, out=at, casting="unsafe")

    _core.run_chunks(plan, shape, src.leaves, src.scalars, k, per, consume)
    return acc.reshape(_result_shape(shape, form, axis)).astype(_NP_BY_CODE[cc])


def plan_of(exp):
    """The plan a reduction of an expression source runs (``ms.plan_for``): its chunk
    program, or the program that reduces the source in registers; None when numpy reduces
    the source in place (a tensor or a view: no plan)."""
    src = exp.src
    if not _fusable(src) or not math.prod(src.shape):
        return None
    got = None if exp.mask else _fold_recipe(src, exp.form, exp.reducer.name, exp.axis)
    if got is not None:
        return got[0].plan
    src = _rows_merged(src, exp.form, exp.axis)
    shape = tuple(src.shape)
    if reduce_schedule(shape, exp.form, exp.axis, exp.mask) == "chunk":
        return get_plan(exp.key, src.code, "saveto")
    cc, cdt, _, row, _ = _fused_types(src.code, exp.reducer.name)
    axes = _reduced_axes(exp.form, exp.axis, len(shape))
    if len(shape) - 1 in axes:
        return get_plan(src.key, src.code, row.block)
    return get_plan(src.key, cc,
                    _acc_saver(rows_a_call(shape, axes[0], cdt, _in_place(src.key, src.code)), row))


def compute(a, code, form, reducer_name, axis, mask, scale):
    """The reduced values (a fresh contiguous array of the storage dtype, scale applied).

    float16 accumulates and scales in float32 and is rounded once; integer sums wrap as C
    does; maximum/minimum propagate NaN (MXNet's red::maximum, numpy's np.maximum). ``a``
    is the source as an array, or the result of fused_reduce already.
    """
    dtype = np.dtype(_NP_BY_CODE[code])
    acc = np.dtype(np.float32) if code == "f16" else dtype
    if isinstance(a, _Fused):
        return _finish(a.values, scale, dtype, a.cdt)
    axes = _reduced_axes(form, axis, a.ndim)
    keep = form == "keepdim"
    if mask:
        if a.shape[axis] == 0:
            shape = list(a.shape)
            if keep:
                shape[axis] = 1
            else:
                del shape[axis]
            res = np.zeros(shape, dtype=acc)   # mshadow's idx starts at 0
        else:
            # argmax/argmin: first occurrence wins; a NaN counts as the extreme (first NaN)
            res = _ARG[reducer_name](a, axis=axis, keepdims=keep).astype(acc)
    else:
        ufunc = _UFUNC[reducer_name]
        init = init_value(reducer_name, dtype)
        # numpy starts from the first value where its identity is the init value (the
        # order of its pairwise sums, and a sum of -0.0 alone stays -0.0); an arithmetic
        # fold runs in acc (float16 in float32, integers wrap in their own type)
        kw = {} if ufunc.identity is not None and ufunc.identity == init else {"initial": init}
        res = ufunc.reduce(a, axis=axes, keepdims=keep,
                           dtype=acc if REDUCER_BY_NAME[reducer_name].lanes else None, **kw)
        res = np.asarray(res, dtype=acc)
    return _finish(res, scale, dtype)


class _Fused:
    """A reduction's values, computed in the pass over its source (fused_reduce,
    chunked_reduce), and the compute type ``cdt`` they are cast to first (None: they are
    in it already)."""
    __slots__ = ("values", "cdt")

    def __init__(self, values, cdt=None):
        self.values, self.cdt = values, cdt


def _finish(res, scale, dtype, cdt=None):
    """``res`` (cast to the compute type ``cdt`` first, if given; else in it already) times
    ``scale`` in it, as ``dtype``: a fresh contiguous array. (Under reduce_into's errstate:
    float16, a cast past 65504 is inf.)"""
    return _core.finish_values(res, res.dtype if cdt is None else cdt, scale, dtype)


def check_dst(dst, exp_code, devices, where, gpu_ok=False):
    """The checks that precede any store: a live, writable tensor of the right dtype, on the
    CPU (or on the GPU too, ``gpu_ok``: a reduction's own route there)."""
    if not isinstance(dst, Tensor):
        raise TypeError(f"{where}: destination must be a Tensor, got {type(dst).__name__}")
    check_devices(where, dst.device, devices, gpu_ok=gpu_ok)
    dst.dptr    # raises FreedTensorError before anything is computed
    if dst.readonly:
        raise ValueError(f"{where}: assignment destination is read-only")
    if _CODE_BY_FLAG[dst.type_flag] != exp_code:
        raise DTypeError(f"{where}: reduction of dtype {np.dtype(_NP_BY_CODE[exp_code])} into a "
                         f"tensor of dtype {dst.dtype}; use ms.tcast")


def _rows_merged(src, form, axis):
    """``src`` with the axes after ``axis`` of an except_dim reduction (any reducer) merged
    into one row (a view of each leaf, no copy) when the last axis alone is too short to
    reduce in registers and every leaf is a contiguous tensor: sumall_except_dim(x * 2, 1) of
    (8, 64, 56, 56) reduces rows of 3136 in registers, where rows of 56 went by chunks
    (1.7x the time numpy takes for the tensor). Else ``src`` itself."""
    merged = _merge_shape(tuple(src.shape), form, axis)
    if merged is None or not all(isinstance(t, Tensor) and t.check_contiguous()
                                 for t in src.leaves):
        return src
    fast = _merged_map(src, tuple(src.shape), merged)
    return reshape(src, merged) if fast is None else fast


def _fold_shape(shape, form, axis, reducer_name):
    """((A, B * C), (B, C)) for an arithmetic fold over every axis of ``shape`` but ``axis``
    (of length B) with leading axes (A elements a kept index) and narrow trailing ones (C
    elements, fewer than REGISTER_ROW_MIN): the source read as A rows of B * C is
    accumulated row by row (the column fold), then each kept index's C values are added in
    float64. Else None. Rows of C went by chunks (sumall_except_dim of (32, 512, 7, 7): 6x
    the time of numpy's einsum)."""
    if (form != "except_dim" or not 1 <= axis <= len(shape) - 2
            or not REDUCER_BY_NAME[reducer_name].lanes):
        return None
    C = math.prod(shape[axis + 1:])
    if C >= REGISTER_ROW_MIN:
        return None
    return (math.prod(shape[:axis]), shape[axis] * C), (shape[axis], C)


def _fold_recipe(src, form, reducer_name, axis):
    """(the _fold_shape recipe, ``src`` with its tensors viewed as the recipe's rows) for a
    map tree of contiguous tensors (fast_recipe's recipe, so the statement's bits); else
    None."""
    if not _fusable(src) or not math.prod(src.shape):
        return None
    shape = tuple(src.shape)
    fold = _fold_shape(shape, form, axis, reducer_name)
    if fold is None or not all(isinstance(t, Tensor) and t.check_contiguous()
                               for t in src.leaves):
        return None
    flat = _merged_map(src, shape, fold[0])
    if flat is None:        # (the same values, read through views: the same sums)
        flat = reshape(src, fold[0])
    rc = _recipe(flat.key, flat.code, fold[0], form, reducer_name, axis, fold[0], False, fold[1])
    return None if rc is None else (rc, flat)


def _folded(src, form, reducer_name, axis, mask):
    """reduce_into's _Fused values of ``src`` by its _fold_recipe; else None."""
    got = None if mask else _fold_recipe(src, form, reducer_name, axis)
    if got is None:
        return None
    rc, flat = got
    return _Fused(_core.run_recipe(rc, flat.leaves, flat.scalars), rc.cdt)


def _merge_shape(shape, form, axis):
    """The shape _rows_merged reads a source of ``shape`` as (the axes after ``axis`` one
    row), or None when it keeps the source's own."""
    if form != "except_dim" or axis >= len(shape) - 2 or shape[-1] >= REGISTER_ROW_MIN:
        return None
    return tuple(shape[:axis + 1]) + (math.prod(shape[axis + 1:]),)


def _map_tree(src):
    """``src`` is a tensor, or a map or cast of map trees and scalars: what _merged_map
    views leaf by leaf."""
    if isinstance(src, Tensor):
        return True
    if isinstance(src, _core.MapExp):
        return all(_is_scalar(a) or _map_tree(a) for a in src.args)
    return isinstance(src, _core.TypecastExp) and _map_tree(src.src)


def _merged_map(src, shape, merged):
    """``src`` (of ``shape``) with each tensor viewed as ``merged`` (reshaped_view) when it
    is an element-wise map or cast of contiguous tensors of its shape and scalars: what
    views.reshape builds, with plain tensor leaves in place of its views of them (the same
    values in the same order, so the same sums; views.reshape costs a third of a small
    statement). Else None."""
    if isinstance(src, Tensor):
        return _core.reshaped_view(src, merged) if tuple(src.shape) == shape else None
    if isinstance(src, _core.MapExp):
        args = []
        for a in src.args:
            if not _is_scalar(a):
                a = _merged_map(a, shape, merged)
                if a is None:
                    return None
            args.append(a)
        return _core.make_map(src.op, tuple(args))
    if isinstance(src, _core.TypecastExp):
        inner = _merged_map(src.src, shape, merged)
        return None if inner is None else tcast(_NP_BY_CODE[src.code], inner)
    return None


def reduce_into(dst, src, form, reducer_name, axis, mask, scale, saver):
    """``dst <saver> scale * reduce(src)`` once every check has passed."""
    a = None
    kernel = (row_kernel(tuple(src.shape), _code_of_src(src), form, reducer_name, axis)
              if isinstance(src, Tensor) and src.device is cpu and not mask else None)
    if kernel is not None:
        # a tensor's rows folded where they are, as the registers schedule folds an
        # expression's (rows of 49 float32: numpy's add.reduce took 4x torch's time)
        a = _Fused(_rows_reduced(kernel, src, _result_shape(tuple(src.shape), form, axis),
                                 np.dtype(_NP_BY_CODE[_code_of_src(src)])))
    elif (isinstance(src, Tensor) and REDUCER_BY_NAME[reducer_name].lanes and not mask
            and src.device is cpu):   # (a TensorContainer too: numpy's order was its own)
        # a tensor's sum goes through the fused pass as any expression's: sumall_except_dim(x)
        # and sumall_except_dim(x * 1.0), reduce_with_axis(x, 0) and reduce_with_axis(x * 1.0,
        # 0) give the same bits, as in mshadow, in one pass (numpy's reduction over three
        # axes of a (32, 64, 56, 56) tensor took 2.1x torch's time)
        src = _core.make_map("identity", (src,))
    # one errstate for the whole computation (entering one costs a microsecond, a tenth of a
    # small reduction's statement): silent, as the C folds are (a NaN, an overflow)
    with np.errstate(over="ignore", invalid="ignore"):
        if a is None:
            a = _folded(src, form, reducer_name, axis, mask)
        if a is None and _fusable(src) and math.prod(src.shape):
            src = _rows_merged(src, form, axis)
            if reduce_schedule(src.shape, form, axis, mask) == "chunk":
                values = chunked_reduce(src, form, reducer_name, axis, mask)
                a = None if values is None else _Fused(values)
            else:
                a = fused_reduce(src, form, reducer_name, axis)
        if a is None:
            a = _array(src)
        res = compute(a, _code_of_src(src), form, reducer_name, axis, mask, scale)
    # saveto of a fresh array of dst's dtype and shape is a copy of its bytes: stored
    # straight into a live, writable cpu dst (store_array), else through the engine
    if saver != "saveto" or not _core.store_array(dst, res):
        assign(dst, _core.from_numpy(res), saver)


def _code_of_src(src):
    return _CODE_BY_FLAG[src.type_flag] if isinstance(src, Tensor) else src.code


def _eval(dst, exp, saver):
    """The complex engine: ``dst <saver> exp`` for a ReduceExp."""
    where = exp.where
    check_dst(dst, exp.code, source_devices(exp.src), where, gpu_ok=True)
    if exp.form == "except_dim":
        if len(dst.shape) != 1 or dst.shape[0] != exp.shape[0]:
            raise ShapeError(f"{where}: the result is 1-D of length {exp.shape[0]} "
                             f"(axis {exp.axis} of {tuple(exp.src.shape)}); it can only be "
                             f"assigned to a 1-D tensor of that length, got shape "
                             f"{tuple(dst.shape)}")
    elif dst.shape != exp.shape:
        raise ShapeError(f"{where}: result shape {tuple(exp.shape)} does not match the "
                         f"destination shape {tuple(dst.shape)}")
    saver = check_saver(saver, where)
    if dst.device is not cpu:          # one kernel of the CUDA lowering (cuda/executor.py)
        from ..cuda import executor
        return executor.assign_reduce(dst, exp, saver)
    reduce_into(dst, exp.src, exp.form, exp.reducer.name, exp.axis, exp.mask, exp.scale, saver)


register_complex("reduce", _eval, plan_of)
_core.install_reduce_path(fast_recipe, row_kernel, SAVERS, ir.LEAF, ReduceExp,
                          [getattr(red, r.name) for r in REDUCER_TABLE])


# ---- the fused full reduction ---------------------------------------------------------
def _device_sum(exp, shape, code, dtype, device):
    """ms.sum of a gpu expression: the GPU's reductions (a block, then its warps) over every
    axis but the first, then over that one, in the compute type (float16 in float32, rounded
    once, as on the CPU), into one element that is copied back. The order is the GPU
    reduction's, not the CPU's lanes (docs/gpu.md)."""
    cc = compute_code(code)
    wide = np.dtype(_NP_BY_CODE[cc])
    src = exp if cc == code else tcast(wide, exp)
    if len(shape) > 1:
        rows = _core.TensorContainer((shape[0],), init=None, dtype=wide, device=device)
        rows[:] = sumall_except_dim(src, 0)
        src = rows
    one = _core.TensorContainer((1,), init=None, dtype=wide, device=device)
    one[:] = reduce_keepdim(src, 0, red.sum)
    with np.errstate(over="ignore"):
        return dtype.type(one.to_numpy()[0])


def sum(exp):  # noqa: A001  ms.sum, as numpy's; `from mshadow import *` leaves builtins.sum
    """The sum of every element of a tensor or an element-wise expression, in ONE fused pass.

    The expression is evaluated block by block in registers and each block is summed where
    it is computed: no temporary of the expression's size. Returns a numpy scalar of the
    expression's dtype. Summation order (the same at every SIMD level and thread count):
    within a block of 4096 elements (of a row, or of the whole array when every operand is
    contiguous), element i goes to lane i % 16 and the 16 lanes are added pairwise, in the
    compute type; the blocks' partial sums are added in order by numpy in float64 (in the
    integer type, wrapping, for integers), then rounded once to the dtype.
    """
    if isinstance(exp, np.ndarray):
        exp = _core.from_numpy(exp)
    if not isinstance(exp, (Tensor, Exp)):
        raise TypeError(f"sum: expected a tensor or an expression, got {type(exp).__name__}")
    if isinstance(exp, Tensor):
        key, shape, code = ir.LEAF[_CODE_BY_FLAG[exp.type_flag]], exp.shape, \
            _CODE_BY_FLAG[exp.type_flag]
        leaves, scalars = (exp,), ()
        check_devices("sum", exp.device, gpu_ok=True)
    else:
        if exp.exp_type == kComplex:
            raise TypeError(f"sum: a {describe(exp.key)} expression (kComplex) cannot be "
                            f"reduced in the same pass; assign it to a tensor first")
        key, shape, code, leaves, scalars = exp.key, exp.shape, exp.code, exp.leaves, exp.scalars
    dtype = np.dtype(_NP_BY_CODE[code])
    on = [d for d in _core.leaf_devices(leaves) if d is not cpu]
    if on:
        return _device_sum(exp, shape, code, dtype, on[0])
    plan = get_plan(key, code, REDUCER_BY_NAME["sum"].block)
    if not isinstance(plan, _core.Plan):   # an untraceable operator: evaluate it first
        tmp = _core.TensorContainer(shape, init=None, pad=False, dtype=dtype)
        assign(tmp, exp, "saveto")
        return sum(tmp)
    parts = _core.run_reduce(plan, shape, leaves, scalars)
    if parts.size == 1:   # one block: its partial is the sum (numpy's sum would add nothing)
        return dtype.type(parts[0])
    if dtype.kind in "iu":
        return np.sum(parts, dtype=dtype)
    return dtype.type(np.sum(parts, dtype=np.float64))
