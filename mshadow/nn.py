"""mshadow's neural-network free functions: Softmax, SoftmaxGrad, AddTakeGrad, SortByKey, ...

On cpu tensors each works in place on the destination's zero-copy numpy view; gpu tensors go,
after the same checks, to mshadow/cuda (executor, conv, sort). Checks run before the first
store.
"""
# Design: these are tensor_cpu-inl.h's free functions (not expressions). They compute with
# numpy ufuncs writing through ``out=`` into dst's view, so the only temporaries are the
# per-row (or per-index) ones: softmax keeps the row maxima and sums, the scatter functions
# gather the rows they add. Every argument is validated (shapes, dtypes, devices, label and
# index ranges, a writable destination) before anything is written. The C++ spellings are
# the table at the bottom.
import numbers

import numpy as np

from . import _core
from .device import check_devices, cpu
from .dot import _BLAS_CONSTANTS, _blas, open_panels
from .dtypes import FLOAT_DTYPES
from .errors import DTypeError, ShapeError
from .extension.reduce import (check_dst, check_keep_lowest, check_reducer, check_saver,
                               reduce_except_dim, reduce_into, scale_value, source,
                               source_devices)
from .engine import assign
from .extension import crop, pack_col2patch, pad as _pad, unpack_patch2col
from .extension.views import _source as _operand
from .op import red

Tensor = _core.Tensor

__all__ = ["softmax", "softmax_grad", "smooth_softmax_grad", "add_take_grad",
           "add_take_grad_large_batch", "index_fill", "sort_by_key", "vectorized_sort",
           "map_reduce_keep_lowest", "map_reduce_keep_high_dim", "conv2d", "conv2d_grad_weight",
           "conv2d_grad_data"]


# ---- argument checks --------------------------------------------------------------------
def _tensor(x, where, what, ndims=None, gpu_ok=False):
    if isinstance(x, np.ndarray):
        x = _core.from_numpy(x)
    if not isinstance(x, Tensor):
        raise TypeError(f"{where}: {what} must be a Tensor (or a numpy array), got "
                        f"{type(x).__name__}")
    check_devices(f"{where}: {what}", x.device, gpu_ok=gpu_ok)
    if ndims is not None and x.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise ShapeError(f"{where}: {what} must be {want}, got shape {tuple(x.shape)}")
    return x


def _one_device(where, what, t, others):
    """The call's tensors ``t`` and ``others`` on one device (DeviceError naming them), and
    on the GPU, that a device is there (mshadow.cuda.require_device)."""
    check_devices(where, t.device, tuple(o.device for o in others), gpu_ok=True)
    if t.device is not cpu:
        from .cuda import require_device
        require_device(f"{where}: {what}")


def _writable(t, where, what):
    t.dptr   # FreedTensorError for a freed tensor, before anything is written
    if t.readonly:
        raise ValueError(f"{where}: {what} is read-only")


def _same_dtype(a, b, where, what_a, what_b):
    if a.dtype != b.dtype:
        raise DTypeError(f"{where}: {what_a} has dtype {a.dtype} but {what_b} has dtype "
                         f"{b.dtype}; use ms.tcast")


def _floating(t, where, what):
    if t.dtype.kind != "f":
        raise DTypeError(f"{where}: {what} must have a floating-point dtype "
                         f"({', '.join(sorted(d.name for d in FLOAT_DTYPES))}), got {t.dtype}")


def _real(v, where, what):
    if (isinstance(v, (bool, np.bool_, complex, np.complexfloating))
            or not isinstance(v, (numbers.Real, np.number))):
        raise TypeError(f"{where}: {what} must be a real number, got {v!r}")
    return v


def _shape_eq(a, b, where, what_a, what_b, msg):
    if a.shape != b.shape:
        raise ShapeError(f"{where}: {msg}: {what_a} {tuple(a.shape)}, {what_b} "
                         f"{tuple(b.shape)}")


def _int_values(t, where, what):
    """An index/label tensor's values as float64 (truncated, C's int cast) or int64 (a gpu
    tensor's copied to the host: a check reads them all)."""
    v = t.numpy() if t.device is cpu else t.to_numpy()
    if v.dtype.kind == "f":
        finite = np.isfinite(v)
        if not finite.all():
            pos = tuple(int(i) for i in np.argwhere(~finite)[0])
            raise ValueError(f"{where}: {what} {float(v[pos])!r} at {pos} is not finite (expected an "
                             f"integer index)")
        return np.trunc(v.astype(np.float64))
    return v.astype(np.int64)


def _in_range(v, n, where, what, err=IndexError, keep=None):
    """``v`` (from _int_values) as intp after checking every used entry is in [0, n)."""
    bad = (v < 0) | (v >= n)
    if keep is not None:
        bad &= keep
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise err(f"{where}: {what} {v[pos]:g} at {pos} out of range [0, {n})")
    out = v if keep is None else np.where(keep, v, 0)
    return out.astype(np.intp)


def _acc(dtype):
    """float16 is computed in float32 (mshadow's half_t arithmetic); others as they are."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


# ---- softmax ----------------------------------------------------------------------------
def softmax(dst, energy):
    """``Softmax(dst, energy)``: max-subtracted softmax over the last axis (1-D, 2-D rows) or
    over axis 1 of a 3-D tensor (``dst[y][:][n]``). ``dst`` may be ``energy`` (in place)."""
    where = "Softmax"
    d_t = _tensor(dst, where, "dst", (1, 2, 3), gpu_ok=True)
    e_t = _tensor(energy, where, "energy", (1, 2, 3), gpu_ok=True)
    _one_device(where, "dst", d_t, (e_t,))
    _shape_eq(d_t, e_t, where, "dst", "energy", "shape mismatch")
    _same_dtype(d_t, e_t, where, "dst", "energy")
    _floating(d_t, where, "dst")
    _writable(d_t, where, "dst")
    if d_t.device is not cpu:
        from .cuda import executor
        return executor.softmax(d_t, e_t)
    if d_t.ndim < 3 and 0 not in d_t.shape and _core.softmax_rows(d_t, e_t):
        return                          # float32 / float64 rows: the compiled kernel
    e = e_t.numpy()
    d = d_t.numpy()
    if d.size == 0:
        return
    axis = 0 if d.ndim == 1 else 1
    m = np.max(e, axis=axis, keepdims=True)   # one value a row: the only temporaries
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(e, m, out=d)
        np.exp(d, out=d)
        s = np.add.reduce(d, axis=axis, dtype=_acc(d.dtype), keepdims=True)
        np.divide(d, s, out=d, casting="same_kind")


# ---- softmax gradients ------------------------------------------------------------------
def _grad_args(where, dst, src, label, ignore_label):
    d_t = _tensor(dst, where, "dst", (2, 3), gpu_ok=True)
    s_t = _tensor(src, where, "src", (2, 3), gpu_ok=True)
    _shape_eq(d_t, s_t, where, "dst", "src", "shape mismatch")
    _same_dtype(d_t, s_t, where, "dst", "src")
    _floating(d_t, where, "dst")
    want = (d_t.shape[0],) if d_t.ndim == 2 else (d_t.shape[0], d_t.shape[2])
    l_t = _tensor(label, where, "label", (d_t.ndim - 1,), gpu_ok=True)
    _one_device(where, "dst", d_t, (s_t, l_t))
    if tuple(l_t.shape) != want:
        raise ShapeError(f"{where}: label shape {tuple(l_t.shape)} does not match dst "
                         f"{tuple(d_t.shape)} (expected {want})")
    _writable(d_t, where, "dst")
    lab = _int_values(l_t, where, "label")
    ncls = d_t.shape[1]
    keep = None
    if ignore_label is not None:
        _real(ignore_label, where, "ignore_label")
        if not np.isfinite(ignore_label):
            raise ValueError(f"{where}: ignore_label {ignore_label!r} is not finite")
        # mshadow compares static_cast<int>(ignore_label) with the int-cast label
        keep = lab != np.trunc(ignore_label)
    # mshadow skips an out-of-range label silently (the row is copied unchanged): an error here
    k = _in_range(lab, ncls, where, "label", ValueError, keep)
    if keep is None:
        keep = np.ones(lab.shape, dtype=bool)
    return d_t, s_t, k, keep


def _positions(d, k, keep):
    """Index arrays of dst's target-class elements, and of the ignored rows (all classes)."""
    if d.ndim == 2:
        rows = np.nonzero(keep)[0]
        return (rows, k[rows]), (np.nonzero(~keep)[0], slice(None))
    y, n = np.nonzero(keep)
    iy, inn = np.nonzero(~keep)
    return (y, k[y, n], n), (iy, slice(None), inn)


def softmax_grad(dst, src, label, ignore_label=None):
    """``SoftmaxGrad(dst, src, label[, ignore_label])``: ``dst = src`` and 1 subtracted at
    each row's label (2-D with a 1-D label; 3-D, classes on axis 1, with a 2-D label).

    Labels are cast to int (truncated); rows whose label equals ``ignore_label`` become 0.
    A label outside [0, classes) is a ValueError (mshadow leaves that row as ``src``).
    """
    where = "SoftmaxGrad"
    d_t, s_t, k, keep = _grad_args(where, dst, src, label, ignore_label)
    if d_t.device is not cpu:
        from .cuda import executor
        return executor.softmax_grad(d_t, s_t, np.where(keep, k, -1))
    d, s = d_t.numpy(), s_t.numpy()
    target, ignored = _positions(d, k, keep)
    np.copyto(d, s)
    d[target] -= 1
    d[ignored] = 0


def smooth_softmax_grad(dst, src, label, alpha, ignore_label=None):
    """``SmoothSoftmaxGrad(dst, src, label, alpha[, ignore_label])``: label smoothing.

    The labelled class gets ``src - 1 + alpha``, every other ``src - alpha / (C - 1)``
    (alpha and the share in float, as mshadow); ignored rows become 0.
    """
    where = "SmoothSoftmaxGrad"
    _real(alpha, where, "alpha")
    d_t, s_t, k, keep = _grad_args(where, dst, src, label, ignore_label)
    cdt = _acc(d_t.dtype)
    ncls = d_t.shape[1]
    a32 = np.float32(alpha)
    # mshadow: const float smooth_grad = alpha / (C - 1); with one class it is never used
    share = a32 / np.float32(ncls - 1) if ncls > 1 else np.float32(0)
    if d_t.device is not cpu:
        from .cuda import executor
        return executor.softmax_grad(d_t, s_t, np.where(keep, k, -1), a32.astype(cdt),
                                     share.astype(cdt))
    d, s = d_t.numpy(), s_t.numpy()
    target, ignored = _positions(d, k, keep)
    picked = s[target].astype(cdt)     # read before dst (which may be src) is written
    np.subtract(s, share.astype(cdt), out=d, casting="same_kind")
    d[target] = (picked - cdt.type(1)) + a32.astype(cdt)
    d[ignored] = 0


# ---- take gradients, index fill ---------------------------------------------------------
def _scatter_args(where, dst, index, src):
    d_t = _tensor(dst, where, "dst", (2,), gpu_ok=True)
    i_t = _tensor(index, where, "index", (1,), gpu_ok=True)
    s_t = _tensor(src, where, "src", (2,), gpu_ok=True)
    _one_device(where, "dst", d_t, (i_t, s_t))
    _same_dtype(d_t, s_t, where, "dst", "src")
    if d_t.shape[1] != s_t.shape[1]:
        raise ShapeError(f"{where}: dst {tuple(d_t.shape)} and src {tuple(s_t.shape)} must have "
                         f"the same number of columns")
    return d_t, i_t, s_t


def _source_copy(d, s):
    # numpy's add.at does not look for overlap: read an aliased source from a copy
    return s.copy() if np.may_share_memory(d, s) else s


def add_take_grad(dst, index, src):
    """``AddTakeGrad(dst, index, src)``: ``dst[clip(index[i], 0, K-1)] += src[i]``.

    Indices are clamped to the rows of dst, as mshadow does; repeated indices accumulate.
    """
    where = "AddTakeGrad"
    d_t, i_t, s_t = _scatter_args(where, dst, index, src)
    if i_t.shape[0] != s_t.shape[0]:
        raise ShapeError(f"{where}: index length {i_t.shape[0]} does not match src rows "
                         f"{tuple(s_t.shape)}")
    if d_t.shape[0] == 0 and i_t.shape[0] > 0:
        raise ShapeError(f"{where}: dst {tuple(d_t.shape)} has no rows to add into")
    _writable(d_t, where, "dst")
    idx = np.clip(_int_values(i_t, where, "index"), 0, max(d_t.shape[0] - 1, 0)).astype(np.intp)
    if d_t.device is not cpu:
        return _gpu_scatter(where, d_t, s_t, idx, np.arange(len(idx)), "add")
    d = d_t.numpy()
    np.add.at(d, idx, _source_copy(d, s_t.numpy()))


def add_take_grad_large_batch(dst, sorted, index, src):   # noqa: A002  mshadow's name
    """``AddTakeGradLargeBatch(dst, sorted, index, src)``: ``dst[sorted[i]] += src[index[i]]``.

    No clamping (out-of-range indices are an IndexError); ``sorted`` need not be ascending.
    """
    where = "AddTakeGradLargeBatch"
    d_t, i_t, s_t = _scatter_args(where, dst, index, src)
    o_t = _tensor(sorted, where, "sorted", (1,), gpu_ok=True)
    _one_device(where, "dst", d_t, (o_t,))
    if o_t.shape[0] != i_t.shape[0]:
        raise ShapeError(f"{where}: sorted length {o_t.shape[0]} and index length "
                         f"{i_t.shape[0]} differ")
    _writable(d_t, where, "dst")
    rows = _in_range(_int_values(o_t, where, "sorted"), d_t.shape[0], where, "sorted")
    take = _in_range(_int_values(i_t, where, "index"), s_t.shape[0], where, "index")
    if d_t.device is not cpu:
        return _gpu_scatter(where, d_t, s_t, rows, take, "add")
    d = d_t.numpy()
    np.add.at(d, rows, s_t.numpy()[take])   # the gather copies, so aliasing is safe


def index_fill(dst, index, src):
    """``IndexFill(dst, index, src)``: ``dst[index[i]] = src[i]`` (rows; the last write of a
    repeated index wins, as mshadow's loop). No clamping: out of range is an IndexError."""
    where = "IndexFill"
    d_t, i_t, s_t = _scatter_args(where, dst, index, src)
    if i_t.shape[0] != s_t.shape[0]:
        raise ShapeError(f"{where}: index length {i_t.shape[0]} does not match src rows "
                         f"{tuple(s_t.shape)}")
    _writable(d_t, where, "dst")
    idx = _in_range(_int_values(i_t, where, "index"), d_t.shape[0], where, "index")
    if d_t.device is not cpu:
        return _gpu_scatter(where, d_t, s_t, idx, np.arange(len(idx)), "set")
    # numpy leaves the order of repeated fancy-index stores unspecified: keep each last one
    uniq, first_rev = np.unique(idx[::-1], return_index=True)
    d = d_t.numpy()
    d[uniq] = s_t.numpy()[len(idx) - 1 - first_rev]


def _gpu_scatter(where, d_t, s_t, dst_rows, src_rows, mode):
    from .cuda import executor
    executor.scatter_rows(where, d_t, s_t, dst_rows, src_rows, mode)


# ---- sorting ----------------------------------------------------------------------------
def _sort_args(where, keys, values, what=("keys", "values")):
    k_t = _tensor(keys, where, what[0], (1,), gpu_ok=True)
    v_t = _tensor(values, where, what[1], (1,), gpu_ok=True)
    _one_device(where, what[0], k_t, (v_t,))
    if k_t.shape[0] != v_t.shape[0]:
        raise ShapeError(f"The sizes of key/value are not equal! keys_size: {k_t.shape[0]} "
                         f"values_size: {v_t.shape[0]}")
    _writable(k_t, where, what[0])
    _writable(v_t, where, what[1])
    if k_t.device is not cpu:
        return k_t, v_t
    return k_t.numpy(), v_t.numpy()


def sort_by_key(keys, values, is_ascend=True):
    """``SortByKey(keys, values, is_ascend)``: stable sort of 1-D ``keys`` in place, ``values``
    permuted along. Equal keys keep their order in both directions; NaN keys go last
    ascending and first descending."""
    k, v = _sort_args("SortByKey", keys, values)
    if isinstance(k, Tensor):           # gpu tensors: the device's radix sort
        from .cuda import sort
        return sort.sort_by_key(k, v, bool(is_ascend))
    if is_ascend:
        idx = np.argsort(k, kind="stable")
    else:
        # a stable descending order: stable-sort the reversed keys, reverse the result
        idx = (len(k) - 1) - np.argsort(k[::-1], kind="stable")[::-1]
    sk, sv = k[idx], v[idx]   # gathered before either is written: keys may alias values
    k[...] = sk
    v[...] = sv


def vectorized_sort(values, segments):
    """``VectorizedSort(values, segments)``: sort ``values`` ascending within each segment.

    As mshadow's two stable SortByKey calls, ``segments`` ends up sorted too (unchanged when
    it already was ascending, the documented use)."""
    v, s = _sort_args("VectorizedSort", values, segments, ("values", "segments"))
    if isinstance(v, Tensor):
        from .cuda import sort
        return sort.vectorized_sort(v, s)
    idx = np.lexsort((v, s))   # by segment, then value; stable like the two sorts
    sv, ss = v[idx], s[idx]
    v[...] = sv
    s[...] = ss


# ---- MapReduceKeepLowest / MapReduceKeepHighDim -----------------------------------------
def _map_reduce_args(where, dst, exp, saver, reducer, scale):
    check_saver(saver, where)
    check_reducer(reducer, where)
    src, shape, code = source(exp, where)
    if not isinstance(dst, Tensor):
        raise TypeError(f"{where}: dst must be a Tensor, got {type(dst).__name__}")
    if dst.ndim != 1:
        raise ShapeError(f"{where}: dst must be 1-D, got shape {tuple(dst.shape)}")
    return src, shape, code, scale_value(scale, code, where)


def map_reduce_keep_lowest(dst, exp, saver="saveto", reducer=red.sum, scale=1):
    """``MapReduceKeepLowest<saver, reducer>(dst, exp, scale)``: ``exp`` seen as 2-D (R, C),
    ``dst[c] <saver> scale * reduce_r exp[r][c]``, starting from row 0 (R must be > 0)."""
    where = "MapReduceKeepLowest"
    src, shape, code, scale = _map_reduce_args(where, dst, exp, saver, reducer, scale)
    if shape[-1] != dst.shape[0]:
        raise ShapeError(f"MapReduceKeepLowest::reduction dimension do not match: dst length "
                         f"{dst.shape[0]}, expression shape {tuple(shape)} keeps "
                         f"{shape[-1]}")
    check_keep_lowest(shape, where)
    _map_reduce(where, dst, exp, src, code, len(shape) - 1, saver, reducer, scale)


def map_reduce_keep_high_dim(dst, exp, dimkeep, saver="saveto", reducer=red.sum, scale=1):
    """``MapReduceKeepHighDim<saver, reducer, dimkeep>(dst, exp, scale)``: keep axis
    ``dimkeep`` (not the last), reduce every other one from the reducer's init value."""
    where = "MapReduceKeepHighDim"
    src, shape, code, scale = _map_reduce_args(where, dst, exp, saver, reducer, scale)
    if isinstance(dimkeep, (bool, np.bool_)) or not isinstance(dimkeep, numbers.Integral):
        raise TypeError(f"{where}: dimkeep must be an integer, got {dimkeep!r}")
    if not 0 <= dimkeep < len(shape) - 1:
        raise ShapeError(f"{where}: dimkeep {dimkeep} must be an axis before the last of the "
                         f"{len(shape)}-D expression {tuple(shape)} (use "
                         f"map_reduce_keep_lowest to keep the last)")
    if shape[dimkeep] != dst.shape[0]:
        raise ShapeError(f"MapReduceKeepHighDim::reduction dimension do not match: dst length "
                         f"{dst.shape[0]}, expression shape {tuple(shape)} axis {dimkeep} has "
                         f"{shape[dimkeep]}")
    _map_reduce(where, dst, exp, src, code, int(dimkeep), saver, reducer, scale)


def _map_reduce(where, dst, exp, src, code, axis, saver, reducer, scale):
    """``dst <saver> scale * reduce_except_dim(exp, axis, reducer)``: on the CPU by
    reduce_into, on the GPU as that ReduceExp statement (one kernel of the CUDA lowering)."""
    check_dst(dst, code, source_devices(src), where, gpu_ok=True)
    if dst.device is not cpu:
        assign(dst, reduce_except_dim(exp, axis, reducer) * scale, saver)
        return
    reduce_into(dst, src, "except_dim", reducer.name, axis, False, scale, saver)


# ---- convolution (cxxnet's layer, as one call) ---------------------------------------------
def _pads(pad):
    """(py, px) of a conv2d ``pad``: an int, or a pair."""
    return (pad, pad) if isinstance(pad, numbers.Integral) else tuple(pad)


def _blas_saver(where, saver):
    """The saver's (sign of alpha, beta): dot's table (ir.SAVER_TABLE's blas column)."""
    if saver not in _BLAS_CONSTANTS:
        raise TypeError(f"{where}: saver must be one of {sorted(_BLAS_CONSTANTS)}, got "
                        f"{saver!r}")
    return _BLAS_CONSTANTS[saver]


def _dense(where, what, t):
    if not t.check_contiguous():
        raise ShapeError(f"{where}: {what} must be dense (pad=False), got stride {t.stride} "
                         f"for shape {tuple(t.shape)}")


def _conv_args(where, out, data, weight_like, pad, stride, saver):
    """(columns expression, images, positions per image, sign of alpha, beta) of a conv2d
    call, every argument checked: ``out`` and ``weight_like`` dense tensors, ``data`` a
    (N, C, H, W) tensor or expression; the column matrix reads nothing of ``out``."""
    sign_beta = _blas_saver(where, saver)
    data = _operand(data, where, 4)
    if len(data.shape) != 4:
        raise ShapeError(f"{where}: data must be (N, C, H, W), got shape {tuple(data.shape)}")
    if np.dtype(data.dtype) != weight_like.dtype:   # the panels would be read as another type
        raise DTypeError(f"{where}: data has dtype {np.dtype(data.dtype)} but "
                         f"{'weight' if where == 'conv2d' else 'dweight'} has dtype "
                         f"{weight_like.dtype}; use ms.tcast")
    py, px = _pads(pad)
    cols = unpack_patch2col(_pad(data, py, px) if py or px else data, weight_like.shape[2],
                            weight_like.shape[3], stride)
    check_devices(f"{where}: data", out.device, _core.leaf_devices(cols.leaves), gpu_ok=True)
    _dense(where, "the destination", out)
    _dense(where, "the weight", weight_like)
    return cols, data.shape[0], cols.shape[1] // max(data.shape[0], 1), sign_beta


def _conv_run(c, a, cols, nimg, per_image, grad_weight, sign_beta):
    panels = open_panels(cols, c)
    if panels is None:     # the columns evaluated first (dot.open_panels says why)
        tmp = _core.new_tensor(cols.shape, 0, dtype=c.dtype)
        tmp[:] = cols
        panels = open_panels(tmp * 1, c)
    with panels:
        _blas().conv_panels(c, a, panels, (c if grad_weight else a).shape[0], nimg,
                            per_image, grad_weight, sign_beta[0], sign_beta[1],
                            _core.get_num_threads(), _core.simd_info()["active"])


def conv2d(out, data, weight, pad=0, stride=1, saver="saveto"):
    """``out <saver> conv(data, weight)``: out (N, K, oh, ow), data (N, C, H, W) (a tensor or
    any expression), weight (K, C, kh, kw), zero padding ``pad`` (an int or (py, px)).

    cxxnet's convolution layer in one call: ``dot(weight, unpack_patch2col(pad(data),
    kh, kw, stride))`` with the column matrix a panel of one image's columns at a time,
    each panel's product written straight into that image of ``out`` (no column matrix, no
    (K, N*oh*ow) product to swap into place). A convolution of a tensor at the AVX2 /
    AVX-512 levels reads each padded image straight (no panel: panel_gemm.h ms_pg_conv;
    at a stride above 1 where its channel tiles cost less than the panels), threads taking
    whole images. Summation order: float32 and float64 at those levels, each output's
    products in (c, ky, kx) order, fused (the same bits at both levels, every thread count,
    and from a tensor or an expression); otherwise BLAS's."""
    where = "conv2d"
    out = _tensor(out, where, "out", (4,), gpu_ok=True)
    weight = _tensor(weight, where, "weight", (4,), gpu_ok=True)
    _one_device(where, "out", out, (weight,))
    _writable(out, where, "out")
    _same_dtype(out, weight, where, "out", "weight")
    cols, nimg, per_image, sign_beta = _conv_args(where, out, data, weight, pad, stride, saver)
    K, ohw = weight.shape[0], _out_hw(data, weight, pad, stride)
    if cols.shape[0] != weight.shape[1] * weight.shape[2] * weight.shape[3] or \
            tuple(out.shape) != (nimg, K) + ohw:
        raise ShapeError(f"{where}: data {tuple(data.shape)} and weight {tuple(weight.shape)} "
                         f"(pad {pad}, stride {stride}) give ({nimg}, {K}) + {ohw}, out is "
                         f"{tuple(out.shape)}")
    if out.device is not cpu:
        return _gpu_conv().conv2d(out, _operand(data, where, 4), weight, *_pads(pad), stride, ohw,
                                  sign_beta)
    if _direct("conv_direct", out, data, weight, *_pads(pad), False, *sign_beta,
               stride=stride):
        return
    _conv_run(out, weight, cols, nimg, per_image, False, sign_beta)


def _direct(kernel, y, x, w, *args, **kw):
    """Whether one of panel_gemm.h's direct kernels (``kernel``: _blas.conv_direct or
    conv_direct_grad_weight, called with ``args`` and ``kw``) did ``y``'s work: a tensor
    ``x`` at the AVX2 or AVX-512 level, float32 or float64, ``y`` sharing no memory with
    ``x`` or ``w``, and a form the kernel takes; else nothing was done."""
    if not isinstance(x, _core.Tensor) or _core.reads_tensor((x, w), y):
        return False
    return getattr(_blas(), kernel)(y, x, w, *args, _core.get_num_threads(),
                                    _core.simd_info()["active"], **kw)


def conv2d_grad_weight(dweight, data, grad, pad=0, stride=1, saver="saveto"):
    """``dweight <saver> the weight gradient of conv2d``: dweight (K, C, kh, kw) = sum over
    images n of grad[n] (K, oh*ow) @ im2col(pad(data))[:, image n].T, the column matrix a
    panel at a time (never whole). ``grad`` (N, K, oh, ow) dense, sharing no memory with
    ``dweight`` (ValueError).

    At stride 1, from a tensor, float32 and float64 at the AVX2 / AVX-512 levels, it reads
    each padded image straight (panel_gemm.h ms_pg_convw): each element adds its products
    in (n, oy, ox) order, fused (the same bits at both levels and every thread count)."""
    where = "conv2d_grad_weight"
    dweight = _tensor(dweight, where, "dweight", (4,), gpu_ok=True)
    grad = _tensor(grad, where, "grad", (4,), gpu_ok=True)
    _one_device(where, "dweight", dweight, (grad,))
    _writable(dweight, where, "dweight")
    _same_dtype(dweight, grad, where, "dweight", "grad")
    cols, nimg, per_image, sign_beta = _conv_args(where, dweight, data, dweight, pad, stride,
                                                  saver)
    K, ohw = dweight.shape[0], _out_hw(data, dweight, pad, stride)
    _dense(where, "grad", grad)
    if _core.reads_tensor((grad,), dweight):   # the products add into dweight image by image
        raise ValueError(f"{where}: dweight shares memory with grad")
    if cols.shape[0] != dweight.shape[1] * dweight.shape[2] * dweight.shape[3] or \
            tuple(grad.shape) != (nimg, K) + ohw:
        raise ShapeError(f"{where}: data {tuple(data.shape)} and dweight "
                         f"{tuple(dweight.shape)} (pad {pad}, stride {stride}) give a gradient "
                         f"of ({nimg}, {K}) + {ohw}, grad is {tuple(grad.shape)}")
    if dweight.device is not cpu:
        return _gpu_conv().conv2d_grad_weight(dweight, _operand(data, where, 4), grad, *_pads(pad),
                                              stride, ohw, sign_beta)
    if stride == 1 and _direct("conv_direct_grad_weight", dweight, data, grad, *_pads(pad),
                               *sign_beta):
        return
    _conv_run(dweight, grad, cols, nimg, per_image, True, sign_beta)


def conv2d_grad_data(dx, grad, weight, pad=0, stride=1, saver="saveto"):
    """``dx <saver> the data gradient of conv2d``: dx (N, C, H, W) = col2im(weight^T @
    grad[n]) cropped by the padding, image by image: one image's column matrix
    (C*kh*kw, oh*ow) is the only temporary (not the whole batch's, and no swapaxis of
    ``grad``). ``grad`` (N, K, oh, ow) and ``weight`` (K, C, kh, kw) dense.

    At stride 1 with a pad under the kernel's size, float32 and float64 at the AVX2 /
    AVX-512 levels, it is instead the forward convolution of ``grad`` padded by
    (kh - 1 - py, kw - 1 - px) with the weight's channels swapped and its taps flipped:
    no column matrix, and each element adds its K*kh*kw products in (k, ky, kx) order,
    fused (the same bits at both levels and every thread count). A weight holding an inf
    or a NaN takes the column-matrix path: this form would multiply it by grad's zero
    border, where col2im never does."""
    where = "conv2d_grad_data"
    dx = _tensor(dx, where, "dx", (4,), gpu_ok=True)
    grad = _tensor(grad, where, "grad", (4,), gpu_ok=True)
    weight = _tensor(weight, where, "weight", (4,), gpu_ok=True)
    _one_device(where, "dx", dx, (grad, weight))
    _writable(dx, where, "dx")
    _same_dtype(dx, grad, where, "dx", "grad")
    _same_dtype(dx, weight, where, "dx", "weight")
    _blas_saver(where, saver)
    _dense(where, "grad", grad)
    _dense(where, "weight", weight)
    N, C, H, W = dx.shape
    K, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    py, px = _pads(pad)
    if py < 0 or px < 0:
        raise ShapeError(f"{where}: pad must be non-negative, got {pad}")
    ohw = _out_hw(dx, weight, pad, stride)
    if weight.shape[1] != C or tuple(grad.shape) != (N, K) + ohw:
        raise ShapeError(f"{where}: dx {tuple(dx.shape)} and weight {tuple(weight.shape)} (pad "
                         f"{pad}, stride {stride}) take a gradient of ({N}, {K}) + {ohw}, grad "
                         f"is {tuple(grad.shape)}")
    if _core.reads_tensor((grad, weight), dx):
        raise ValueError(f"{where}: dx shares memory with grad or weight")
    if dx.device is not cpu:
        return _gpu_conv().conv2d_grad_data(dx, grad, weight, py, px, stride, ohw, saver)
    if stride == 1 and py < kh and px < kw and min(ohw) > 0 and _direct(
            "conv_direct", dx, grad, weight, kh - 1 - py, kw - 1 - px, True,
            *_blas_saver(where, saver)):
        return
    cols = _core.new_tensor((C * kh * kw, ohw[0] * ohw[1]), 0, dtype=dx.dtype)
    image = pack_col2patch(cols, (C, H + 2 * py, W + 2 * px), kh, kw, stride)
    if py or px:
        image = crop(image, (H, W), py, px)
    level = _core.simd_info()["active"]
    for n in range(N):
        _blas().gemm_tn_image(cols, weight, grad, n, _core.get_num_threads(), level)
        assign(dx[n], image, saver)


def _gpu_conv():
    """mshadow/cuda/conv.py (imported on a gpu call only: _one_device found the device)."""
    from .cuda import conv
    return conv


def _out_hw(data, weight, pad, stride):
    py, px = _pads(pad)
    H, W = data.shape[2] + 2 * py, data.shape[3] + 2 * px
    return ((H - weight.shape[2]) // stride + 1, (W - weight.shape[3]) // stride + 1)


# ---- the C++ spellings ------------------------------------------------------------------
_CPP_NAMES = {
    "Softmax": softmax,
    "SoftmaxGrad": softmax_grad,
    "SmoothSoftmaxGrad": smooth_softmax_grad,
    "AddTakeGrad": add_take_grad,
    "AddTakeGradLargeBatch": add_take_grad_large_batch,
    "IndexFill": index_fill,
    "SortByKey": sort_by_key,
    "VectorizedSort": vectorized_sort,
    "MapReduceKeepLowest": map_reduce_keep_lowest,
    "MapReduceKeepHighDim": map_reduce_keep_high_dim,
}
globals().update(_CPP_NAMES)
__all__ += list(_CPP_NAMES)
