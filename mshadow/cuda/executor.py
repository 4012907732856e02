"""The GPU executor: ``dst <saver> value`` into an ``ms.gpu`` tensor, as one kernel that the
CUDA lowering (mshadow/cuda/lower.py) emits from the value's IR node.

Design:
    engine.assign hands a gpu destination here with the value's IR node, leaves and scalars,
    checked as for the CPU (shape, dtype). Owns: the GPU plan of a structure (GpuPlan: the
    emitted kernel's Function and Binding), made once per (node, dst dtype, saver) and kept
    in the engine's one plan cache under the device ``gpu``; compiling goes through the
    process KernelCache (memory and disk, cache.py) and the driver in use (``driver()``: the
    real device or the emulated one). A run checks every leaf is a live gpu tensor (or a view
    of one), range-checks index sources on the host (a copy of the index: nothing is stored
    when one is out of range, as on the CPU), binds each leaf's device address and row pitch
    and each scalar (rounded to its storage type, passed as its compute type), and launches
    over launch.elementwise's grid on the destination's stream (streams.py; none: the
    default stream), asynchronously. A value that reads
    the destination's bytes at other positions than it writes (``x[:] = x.T``, a gather or
    a view over dst: by address range, whoever wraps the memory) is evaluated into a gpu
    temporary first, then stored with the saver, as the CPU engine does.
    Never: reads device memory from the host but for an index check; imports the CPU lowering.
"""
import struct
from collections import namedtuple

import numpy as np

from .. import _core, ir
from ..device import check_devices, gpu
from ..dtypes import BY_CODE, CODE_BY_FLAG, compute_code
from ..errors import DeviceError, DTypeError, UnsupportedNodeError
from ..readers import READERS_BY_NAME
from . import cache, launch, lower, require_device, streams

# ``convs``: per kernel parameter (its Binding name, the numpy scalar type the launch takes);
# ``flag``: the device int a gather's index check sets (lower.Binding.checks), else None;
# ``sources``: per gather leaf position, its sources' (first leaf position, is a plain leaf)
GpuPlan = namedtuple("GpuPlan", "function binding name convs flag sources")


def _driver():
    from . import driver
    return driver()


_DEVICE_FACTS = {}     # driver module name -> (launch.Limits, arch) of its device 0


def _facts(drv):
    got = _DEVICE_FACTS.get(drv.__name__)
    if got is None:
        a = drv.device_attributes(0)
        major, minor = a["compute_capability"]
        got = _DEVICE_FACTS[drv.__name__] = (
            launch.Limits(a["max_grid_dim"][0], a["max_grid_dim"][1],
                          a["max_threads_per_block"], a["multiprocessor_count"]),
            f"sm_{major}{minor}")
    return got


def plan(node, dst_code, saver, dst_view=False):
    """The GpuPlan of a structure, from the engine's plan cache or made now (lower.emit, or
    lower.emit_reduce for an ir.Reduce root); ``dst_view``: stored through a view."""
    ck = (node, dst_code, saver, gpu, "view") if dst_view else (node, dst_code, saver, gpu)
    got = _core.cached_plan(ck)
    if got is None:
        require_device("Assignment")
        drv = _driver()
        try:
            if type(node) is ir.Reduce:
                k = lower.emit_reduce(node, dst_code, saver)
            else:
                k = lower.emit(node, dst_code, saver, dst_view)
        except UnsupportedNodeError as e:   # a form the GPU does not run yet: the device's
            raise DeviceError(f"Assignment: {e}; docs/gpu.md lists what runs on the GPU "
                              f"(ms.copy the operands to the cpu for this)") from e
        fn, convs = _compile(drv, k)
        flag = drv.Memory(4) if k.binding.checks else None
        got = GpuPlan(fn, k.binding, k.name, convs, flag, _gather_sources(node))
        _core.cache_plan(ck, got)
    return got


def _compile(drv, k):
    """(Function, parameter converters) of an Emitted kernel, through the KernelCache."""
    image = cache.kernel_cache().cubin(k.source, _facts(drv)[1])
    return (drv.Module(image).get_function(k.name),
            tuple((n, _conv(t)) for n, t in k.binding.params))


def _kernel(key, emit):
    """(Function, converters) of a kernel that is no IR node's (softmax, random), made once
    by ``emit()`` and kept in the engine's plan cache under ``key``."""
    ck = (key, gpu)
    got = _core.cached_plan(ck)
    if got is None:
        require_device(key[0])
        got = _compile(_driver(), emit())
        _core.cache_plan(ck, got)
    return got


def _run(kernel, geo, named, tensors, stream):
    """Launch ``kernel`` (from _kernel) over ``geo`` on ``stream`` (a Stream or None) with
    the parameters ``named`` and the addresses of ``tensors`` ({parameter: tensor}), taken
    once their memory is pinned (a free_space from another thread meanwhile frees after
    the launch, as _launch's)."""
    fn, convs = kernel
    cu_stream = streams.driver_stream(stream, "Launch")
    pinned = _core.pin_allocations(tuple(tensors.values()))
    try:
        named = dict(named, **{n: _core.data_address(t) for n, t in tensors.items()})
        fn.launch(geo.grid, geo.block, [conv(named[n]) for n, conv in convs], stream=cu_stream)
    finally:
        _core.unpin_allocations(pinned)


def temporary(shape, dtype, stream, pad=True):
    """A new gpu tensor for a run's intermediate values, on the run's ``stream``."""
    return _core.new_tensor(shape, None, dtype=dtype, device=gpu, pad=pad, stream=stream)


def upload(a, stream):
    """The host array ``a`` (indices) as a new 1-D int64 gpu tensor, copied on ``stream``."""
    t = temporary((a.size,), np.int64, stream, pad=False)
    _core.copy(t, _core.from_numpy(np.ascontiguousarray(a.reshape(-1), np.int64)), stream)
    return t


def readable(src, dst):
    """``src`` (a gpu tensor or expression) as a gpu tensor that shares no byte with
    ``dst``: a tensor as it is, else (an expression, or a tensor overlapping dst) evaluated
    into a new gpu tensor first, on dst's stream."""
    if isinstance(src, _core.Tensor) and not _overlaps(dst, (src,)):
        return src
    tmp = temporary(tuple(src.shape), src.dtype, dst.stream)
    if isinstance(src, _core.Tensor):
        _core.copy(tmp, src, dst.stream)
    else:
        tmp[:] = src
    return tmp


def _float_rows(where, dst, ndims):
    """DeviceError unless dst is a float32 / float64 tensor of ``ndims`` dimensions (the
    kernels' forms)."""
    code = CODE_BY_FLAG[dst.type_flag]
    if len(dst.shape) not in ndims or code not in lower.FLOAT_COMPUTE:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise DeviceError(f"{where}: on the GPU, float32 or float64 tensors ({want}), got "
                          f"a {len(dst.shape)}-D {dst.dtype} tensor; docs/gpu.md lists what "
                          f"runs on the GPU (ms.copy to the cpu for this)")
    return code


def _elementwise_alias(dst, src):
    """Whether dst overlaps src other than element for element (then a temporary first)."""
    return _overlaps(dst, (src,)) and not (_span(dst) == _span(src) and
                                           dst.itemsize == src.itemsize and
                                           dst.stride == src.stride)


def _via_temporary(fn, dst, src, *args):
    tmp = temporary(dst.shape, dst.dtype, dst.stream)
    fn(tmp, src, *args)
    _core.copy(dst, tmp, dst.stream)


def softmax(dst, src):
    """nn.softmax of gpu tensors, float32 or float64: rows (1-D, 2-D) by lower.emit_softmax's
    kernel (the CPU kernel's bits), axis 1 of a 3-D tensor by emit_softmax_axis1's, on dst's
    stream; dst may be src, and a dst overlapping src elsewhere goes through a gpu
    temporary."""
    where = "Softmax"
    check_devices(where, dst.device, (src.device,), gpu_ok=True)
    code = _float_rows(where, dst, (1, 2, 3))
    if _elementwise_alias(dst, src):
        return _via_temporary(softmax, dst, src)
    if 0 in dst.shape:
        return
    limits = _facts(_driver())[0]
    pitches = {"dst_pitch": dst.stride, "src_pitch": src.stride}
    if len(dst.shape) == 3:
        Y, C, N = dst.shape
        k = _kernel(("softmax_axis1", code), lambda: lower.emit_softmax_axis1(code))
        _run(k, launch.flat(Y * N, limits), dict(pitches, outer=Y, classes=C, cols=N),
             {"dst": dst, "src": src}, dst.stream)
        return
    rows, cols = _rows_cols(dst.shape)
    k = _kernel(("softmax", code), lambda: lower.emit_softmax(code))
    _run(k, launch.softmax(rows, limits), dict(pitches, rows=rows, cols=cols),
         {"dst": dst, "src": src}, dst.stream)


def softmax_grad(dst, src, target, alpha=None, share=None):
    """nn.softmax_grad (``alpha`` None) and smooth_softmax_grad of gpu tensors by
    lower.emit_softmax_grad's kernel on dst's stream: ``target`` the host's int64 class of
    each sample (-1: ignored), checked by nn.py and uploaded here; ``alpha`` and ``share`` as
    nn.py rounds them. dst may be src; a dst overlapping src elsewhere goes through a gpu
    temporary."""
    where = "SmoothSoftmaxGrad" if alpha is not None else "SoftmaxGrad"
    check_devices(where, dst.device, (src.device,), gpu_ok=True)
    code = _float_rows(where, dst, (2, 3))
    if _elementwise_alias(dst, src):
        return _via_temporary(softmax_grad, dst, src, target, alpha, share)
    rows, cols = _rows_cols(dst.shape)
    if rows * cols == 0:
        return
    tgt = upload(target, dst.stream)
    nd, smooth = len(dst.shape), alpha is not None
    k = _kernel(("softmax_grad", code, nd, smooth),
                lambda: lower.emit_softmax_grad(code, nd, smooth))
    T = BY_CODE[code].np.type
    named = {"rows": rows, "cols": cols, "classes": dst.shape[1], "dst_pitch": dst.stride,
             "src_pitch": src.stride, "alpha": T(alpha or 0), "share": T(share or 0)}
    _run(k, launch.flat(rows * cols, _facts(_driver())[0]), named,
         {"dst": dst, "src": src, "tgt": tgt}, dst.stream)


def scatter_rows(where, dst, src, dst_rows, src_rows, mode):
    """nn's row scatters of gpu tensors by lower.emit_scatter_rows's kernel on dst's stream:
    row dst_rows[i] of dst takes row src_rows[i] of src, in i's order ("add": added one after
    another; "set": the last one stored). The index arrays are the host's, checked by nn.py;
    they are grouped here by dst row (a stable sort) and uploaded. A src overlapping dst is
    read from a gpu copy made first."""
    check_devices(where, dst.device, (src.device,), gpu_ok=True)
    code = CODE_BY_FLAG[dst.type_flag]
    if mode == "add" and code not in lower.FLOAT_COMPUTE:
        raise DeviceError(f"{where}: on the GPU, float32 or float64 tensors, got "
                          f"{dst.dtype}; docs/gpu.md lists what runs on the GPU (ms.copy to "
                          f"the cpu for this)")
    if len(dst_rows) == 0 or dst.shape[1] == 0:
        return
    src = readable(src, dst)
    order = np.argsort(dst_rows, kind="stable")
    rows, starts = np.unique(dst_rows[order], return_index=True)
    meta = np.concatenate([rows, starts, [len(order)], np.asarray(src_rows)[order]])
    g = len(rows)
    buf = upload(meta, dst.stream)
    k = _kernel(("scatter_rows", code, mode), lambda: lower.emit_scatter_rows(code, mode))
    named = {"groups": g, "cols": dst.shape[1], "dst_pitch": dst.stride,
             "src_pitch": src.stride}
    tensors = {"dst": dst, "src": src, "dst_rows": buf.slice(0, g),
               "offsets": buf.slice(g, 2 * g + 1), "src_rows": buf.slice(2 * g + 1, len(meta))}
    _run(k, launch.flat(g * dst.shape[1], _facts(_driver())[0]), named, tensors, dst.stream)




def fill_random(dst, dist, a, b, seed, offset, stream):
    """dst filled by lower.emit_random's Philox stream (key ``seed``, from counter
    ``offset``) on ``stream``; returns the counters it used."""
    code = CODE_BY_FLAG[dst.type_flag]
    rows, cols = _rows_cols(dst.shape)
    n = rows * cols
    per = lower.RANDOM_PER_COUNTER[dist, code]
    if n:
        k = _kernel(("random", dist, code), lambda: lower.emit_random(dist, code))
        T = BY_CODE[code].np.type
        named = {"rows": rows, "cols": cols, "dst_pitch": dst.stride,
                 "seed_lo": seed & 0xFFFFFFFF, "seed_hi": seed >> 32, "offset": offset,
                 "a": T(a), "b": T(b)}
        _run(k, launch.flat(n, _facts(_driver())[0]), named, {"dst": dst}, stream)
    return -(-n // per)


def assign(dst, node, leaves, scalars, saver):
    """Evaluate ``dst <saver> value`` on the GPU (``node``, ``leaves``, ``scalars``: the
    value's, from engine.checked)."""
    check_devices("Assignment", dst.device, _core.leaf_devices(leaves), gpu_ok=True)
    if dst.readonly:
        raise ValueError("assignment destination is read-only")
    code = CODE_BY_FLAG[dst.type_flag]
    if _needs_stages(node):
        node, leaves, scalars = _stage_views(node, tuple(leaves), tuple(scalars), dst)
    p = plan(node, code, saver)
    if _reads_dst_elsewhere(p, dst, leaves):
        return _through_temporary(dst, node, leaves, scalars, saver)
    _launch(p, dst, leaves, scalars)


def assign_view(view, value, node, leaves, scalars, saver):
    """``view <saver> value`` for an assignment target's view of a gpu tensor
    (extension/targets.assign_view checked both), on the tensor's stream, by lower.emit's
    dst_view kernels (stores through the view's row map): one kernel where the value reads
    no byte of the tensor under the view (nor stages), else the value into a gpu temporary
    of the compute type first (a kComplex one, ``node`` None, of the tensor's dtype), so it
    reads nothing a store changes, then a store kernel."""
    base = view.src
    check_devices("Assignment", base.device, _core.leaf_devices(leaves or ()), gpu_ok=True)
    rows, cols = _rows_cols(view.shape)
    if rows * cols == 0:
        return
    code = CODE_BY_FLAG[base.type_flag]
    if node is not None and not _needs_stages(node) and not _core.reads_tensor(
            tuple(leaves), base):
        return _launch(plan(node, code, saver, dst_view=True), view, leaves, scalars)
    if node is None:
        tcode = code
        tmp = temporary(view.shape, base.dtype, base.stream)
        tmp[:] = value
    else:
        tcode = compute_code(code)
        tmp = temporary(view.shape, BY_CODE[tcode].np, base.stream)
        assign(tmp, node, leaves, scalars, "saveto")
    _launch(plan(ir.LEAF[tcode], code, saver, dst_view=True), view, (tmp,), ())


def _index_position(node):
    """The source position of a Gather's index (its reader's "index" source), else None."""
    srcs = READERS_BY_NAME[node.reader].sources
    return srcs.index("index") if "index" in srcs else None


def _needs_stages(node):
    """Whether ``node`` holds a View of an expression (which the emitter reads in place only
    over a tensor) or a Gather whose index is an expression (which the host range-checks
    only as a tensor): _stage_views gives each a tensor."""
    t = type(node)
    if t is ir.View and node.src is not None:
        return True
    if t is ir.Gather:
        at = _index_position(node)
        if at is not None and type(node.srcs[at]) is not ir.Leaf:
            return True
    return any(_needs_stages(c) for c in node.children)


def _stage_views(node, leaves, scalars, dst):
    """The stages of ``node``'s views of expressions and gather indices that are
    expressions, on dst's stream, before the kernel that reads them: a View's source is
    evaluated into a gpu temporary laid out as the view's handle (densely), and the View
    becomes one read in place over it; an index into a gpu tensor of its shape and dtype,
    which becomes a tensor Leaf (range-checked on the host as any index tensor). Returns
    the (node, leaves, scalars) of what is left; the stages' own stages run first, by
    assign."""
    st = _Stager(leaves, scalars, dst)
    staged = st.walk(node)
    return staged, tuple(st.out_leaves), tuple(st.out_scalars)


class _Stager:
    """_stage_views' walk: the leaves and scalars consumed in binding order (ir.leaves,
    ir.scalar_count), those of what is left collected. (A class, not a closure: a closure
    that calls itself is a reference cycle, which would keep the temporaries until the
    collector ran.)"""

    def __init__(self, leaves, scalars, dst):
        self.leaves, self.scalars, self.dst = leaves, scalars, dst
        self.li = self.si = 0
        self.out_leaves, self.out_scalars = [], []

    def walk(self, n):
        t = type(n)
        if t is ir.Leaf:
            self.out_leaves.append(self.leaves[self.li])
            self.li += 1
            return n
        if t is ir.Scalar:
            self.out_scalars.append(self.scalars[self.si])
            self.si += 1
            return n
        if t is ir.View and n.src is not None:
            return self.stage(n)
        index = None
        if t is ir.View or t is ir.Gather:        # their own leaf, then their sources'
            args = self.leaves[self.li]
            self.out_leaves.append(args)
            self.li += 1
            if t is ir.Gather:
                index = _index_position(n)
        kids = n.children
        if not kids:
            return n
        kids = [self.stage_index(c, args.src_shapes[j])
                if j == index and type(c) is not ir.Leaf else self.walk(c)
                for j, c in enumerate(kids)]
        return type(n)(*n[1:len(n) - len(kids)], *kids)

    def stage_index(self, n, shape):
        """A gather's index expression into a gpu tensor of ``shape``: a Leaf over it."""
        li, si = self.li, self.si
        nl, ns = len(ir.leaves(n)), ir.scalar_count(n)
        self.li, self.si = li + nl, si + ns
        tmp = temporary(shape, BY_CODE[n.code].np, self.dst.stream, pad=False)
        assign(tmp, n, self.leaves[li:li + nl], self.scalars[si:si + ns], "saveto")
        self.out_leaves.append(tmp)
        return ir.LEAF[n.code]

    def stage(self, n):
        """A View of an expression: its source into a temporary, a View over that."""
        li, si, src = self.li, self.si, n.src
        view = self.leaves[li]
        nl, ns = len(ir.leaves(src)), ir.scalar_count(src)
        self.li, self.si = li + 1 + nl, si + ns
        handle = view.src
        tmp = temporary(handle.shape, handle.dtype, self.dst.stream, pad=False)
        assert tmp.stride == handle.stride, (tmp.stride, handle.stride)   # both dense
        assign(tmp, src, self.leaves[li + 1:li + 1 + nl], self.scalars[si:si + ns], "saveto")
        self.out_leaves.append(_core.strided_view(tmp, view.shape, view.offset, view.strides))
        return ir.View(n.code, n.step)


def _through_temporary(dst, node, leaves, scalars, saver, extra=None):
    """``node`` into a new gpu tensor, then that into ``dst`` with the saver: for a value
    that reads dst's bytes elsewhere than it writes them."""
    code = CODE_BY_FLAG[dst.type_flag]
    tmp = temporary(dst.shape, dst.dtype, dst.stream)
    _launch(plan(node, code, "saveto"), tmp, leaves, scalars, extra)
    _launch(plan(ir.LEAF[code], code, saver), dst, (tmp,), ())


def _overlaps(dst, tensors):
    """Whether any of ``tensors`` shares a byte with ``dst`` (by address range)."""
    d0, d1 = _span(dst)
    return any(a0 < d1 and d0 < a1 for a0, a1 in map(_span, tensors))


def assign_reduce(dst, exp, saver):
    """``dst <saver> scale * reduce(src)`` on the GPU for a ReduceExp (extension/reduce.py
    checked dst's dtype and shape): one kernel of lower.emit_reduce, a block an output
    element, the source evaluated where it is read. A source that overlaps dst goes through
    a gpu temporary first."""
    src = exp.src
    is_tensor = isinstance(src, _core.Tensor)
    leaves = (src,) if is_tensor else tuple(src.leaves)
    scalars = () if is_tensor else tuple(src.scalars)
    check_devices(exp.where, dst.device, _core.leaf_devices(leaves), gpu_ok=True)
    code = CODE_BY_FLAG[dst.type_flag]
    shape = tuple(src.shape)
    nout, nred, A, B, M, exc = launch.reduce_geometry(shape, exp.form, exp.axis)
    extra = {"nout": nout, "nred": nred, "A": A, "B": B, "M": M, "except_dim": exc,
             "src_cols": shape[-1], "dst_cols": dst.shape[-1], "scale": exp.scale}
    p = plan(exp.key, code, saver)   # first: a form not lowered yet is a DeviceError
    if _overlaps(dst, _core.leaf_tensors(leaves)):
        return _through_temporary(dst, exp.key, leaves, scalars, saver, extra)
    _launch(p, dst, leaves, scalars, extra)


def assign_product(dst, exp, sign_beta):
    """``dst <saver> exp`` for a DotExp (every form: 2-D, gemv, inner and outer products) or
    a BatchDotExp of 3-D gpu tensors through cuBLAS on the destination's stream: the saver's (sign of alpha, beta) as on the CPU; dot.py
    checked the dtype and shape. Row-major C = op(A) op(B) is column-major C^T = op(B)^T
    op(A)^T: one gemm (gemmStridedBatched) with the operands swapped and each row pitch as
    its leading dimension. An operand overlapping dst goes through a gpu temporary."""
    where = exp.key.kind
    a, b = exp.lhs, exp.rhs
    check_devices(where, dst.device, (a.device, b.device), gpu_ok=True)
    require_device(where)
    nd = 3 if where == "batch_dot" else 2
    check_blas_dtype(where, dst)
    if dst.readonly:
        raise ValueError("assignment destination is read-only")
    rows, cols = _rows_cols(dst.shape)
    inner = a.shape[-2] if exp.ltrans and len(a.shape) > 1 else a.shape[-1]
    if rows * cols == 0:
        return
    if inner == 0:      # an empty sum: dst = beta dst (cuBLAS refuses a leading dimension 0)
        if sign_beta[1] != 1:
            dst[:] = dst * sign_beta[1] if sign_beta[1] else 0
        return
    if _overlaps(dst, (a, b)):
        tmp = temporary(dst.shape, dst.dtype, dst.stream)
        assign_product(tmp, exp, (sign_beta[0], 0))   # tmp = alpha * op(a) op(b)
        value = dst * sign_beta[1] + tmp if sign_beta[1] else tmp
        node = value.key if isinstance(value, _core.Exp) else \
            ir.LEAF[CODE_BY_FLAG[tmp.type_flag]]
        leaves = value.leaves if isinstance(value, _core.Exp) else (tmp,)
        scalars = value.scalars if isinstance(value, _core.Exp) else ()
        assign(dst, node, leaves, scalars, "saveto")      # dst = beta dst + tmp
        return
    h = streams.blas(dst.stream, where)
    alpha, beta = sign_beta[0] * exp.scale, sign_beta[1]
    # every operand a row-major matrix: a 1-D one is a (1, len) row, which its transpose
    # flag reads as a column (dot's forms: gemv, the inner and the outer product are gemms)
    (ar, ac, lda), (br, bc, ldb) = _matrix(a), _matrix(b)
    m, k = (ac, ar) if exp.ltrans else (ar, ac)
    n = br if exp.rtrans else bc
    ldc = dst.stride if len(dst.shape) > 1 else max(n, 1)
    pinned = _core.pin_allocations((dst, a, b))
    try:
        pa, pb, pc = (_core.data_address(t) for t in (a, b, dst))
        if nd == 2:
            h.gemm(dst.dtype, exp.rtrans, exp.ltrans, n, m, k, alpha, pb, ldb, pa, lda, beta,
                   pc, ldc)
        else:
            h.gemm_strided_batched(dst.dtype, exp.rtrans, exp.ltrans, n, m, k, alpha,
                                   pb, b.stride, b.shape[1] * b.stride,
                                   pa, a.stride, a.shape[1] * a.stride, beta,
                                   pc, dst.stride, dst.shape[1] * dst.stride, dst.shape[0])
    finally:
        _core.unpin_allocations(pinned)


def check_blas_dtype(where, t):
    """DTypeError unless ``t``'s dtype is one cuBLAS's S and D routines multiply."""
    if CODE_BY_FLAG[t.type_flag] not in lower.FLOAT_COMPUTE:
        kinds = " and ".join(sorted(BY_CODE[c].np.name for c in lower.FLOAT_COMPUTE))
        raise DTypeError(f"{where}: cuBLAS multiplies {kinds}, got {t.dtype}")


def _matrix(t):
    """(rows, cols, row stride) of a product operand as a row-major matrix (the last two
    axes; a 1-D tensor is one row)."""
    if len(t.shape) == 1:
        return 1, t.shape[0], max(t.shape[0], 1)
    return t.shape[-2], t.shape[-1], t.stride


def _launch(p, dst, leaves, scalars, extra=None):
    """Bind and launch ``p`` into ``dst`` (a tensor, or for a dst_view plan a ViewLeaf: on
    its tensor's stream); ``extra``: a reduction's extents (its launch is
    launch.reduction's, an element-wise one launch.elementwise's)."""
    drv = _driver()
    tensor = dst.src if isinstance(dst, _core.ViewLeaf) else dst
    cu_stream = streams.driver_stream(tensor.stream, "Assignment")
    # the operands' memory stays pinned from taking its addresses to the launch: a
    # free_space from another thread meanwhile frees after it (and waits for the kernel)
    pinned = _core.pin_allocations((dst,) + tuple(leaves))
    try:
        args = _bind(drv, p, dst, leaves, scalars, extra)
        geo = (launch.elementwise(*_rows_cols(dst.shape), _facts(drv)[0]) if extra is None
               else launch.reduction(extra["nout"], extra["nred"], _facts(drv)[0]))
        # on dst's stream (none: the default one), asynchronous as mshadow's MapExp; a
        # copy to the host waits for it, and freeing GPU memory waits for the device first
        p.function.launch(geo.grid, geo.block, args, stream=cu_stream)
    finally:
        _core.unpin_allocations(pinned)


def _span(t):
    """[first byte, past the last) of a tensor's rows on its device."""
    rows, cols = _rows_cols(t.shape)
    a = _core.data_address(t)
    return a, a + ((rows - 1) * t.stride + cols) * t.itemsize if rows and cols else a


def _reads_dst_elsewhere(p, dst, leaves):
    """Whether a leaf reads ``dst``'s bytes at positions other than those it writes: any
    leaf overlapping dst unless it is a tensor read at the very element written
    (Binding.in_place: not transposed, not under a gather, not a product operand) at dst's
    address, element size and row pitch in bytes; any overlapping view."""
    d0, d1 = _span(dst)
    for i, (obj, b) in enumerate(zip(leaves, p.binding.leaves)):
        if b.kind == "gather":
            continue
        t = obj.src if b.kind == "view" else obj
        a0, a1 = _span(t)
        if a0 < d1 and d0 < a1 and not (
                i in p.binding.in_place and _core.data_address(t) == _core.data_address(dst)
                and t.itemsize == dst.itemsize and t.stride == dst.stride):
            return True
    return False


def _conv(ctype):
    """What makes a launch argument of C type ``ctype`` from a bound value (as_arg's numpy
    types: both drivers take them); a struct passes its bytes as they come."""
    from .emulate import as_arg
    if ctype.strip() == "ms_cu_view":
        return lambda v: v
    return type(as_arg(ctype, 0))


def _rows_cols(shape):
    """The 2-D flattening: every leading axis a row."""
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows, shape[-1]


def _bind(drv, p, dst, leaves, scalars, extra=None):
    """The launch's arguments, by the Binding's parameter names (lower.py's Binding says
    what each takes): dst a tensor (its row pitch) or a ViewLeaf (a dst_view kernel's: its
    row map); a tensor its address and row pitch, a view its first element and row
    map, a gather its parameters and each source's 1-D flag; index sources are range-checked
    on the host first, so an out-of-range index stores nothing."""
    rows, cols = _rows_cols(dst.shape)
    named = {"rows": rows, "cols": cols, "dst": _core.data_address(dst)}
    if isinstance(dst, _core.ViewLeaf):     # a dst_view kernel's target
        named["dst_map"] = _view_struct(lower.view_map(
            dst.shape, [st // dst.itemsize for st in dst.strides]))
    else:
        named["dst_pitch"] = dst.stride
    for i, (obj, b) in enumerate(zip(leaves, p.binding.leaves)):
        if b.kind == "tensor":
            named[f"L{i}"] = _core.data_address(obj)
            named[f"L{i}_pitch"] = obj.stride
            named[f"L{i}_cols"] = obj.shape[0] if b.detail else obj.shape[-1]   # as read
        elif b.kind == "view":
            named[f"L{i}"] = _core.data_address(obj)
            named[f"L{i}_cols"] = obj.shape[-1]
            isz = obj.itemsize
            named[f"L{i}_map"] = _view_struct(lower.view_map(obj.shape,
                                                             [s // isz for s in obj.strides]))
        else:                                    # a GatherArgs
            reader = READERS_BY_NAME[b.detail]
            for name, v in zip(reader.params, obj.params):
                named[f"L{i}_{name}"] = v
            for j, shape in enumerate(obj.src_shapes):
                named[f"L{i}_vec{j}"] = int(len(shape) == 1)
            if obj.index is not None:
                start, plain = p.sources[i][obj.index[0]]
                assert plain, "an index expression or view is staged first (_stage_views)"
                _check_index(obj, leaves[start])
    for i, (v, (store, comp)) in enumerate(zip(scalars, p.binding.scalars)):
        named[f"s{i}"] = np.asarray(v).astype(BY_CODE[store].np).astype(BY_CODE[comp].np)
    if p.binding.checks:
        named["ms_err"] = p.flag.address
    if extra:
        named.update(extra)
    return [conv(named[n]) for n, conv in p.convs]


def _gather_sources(node):
    """Per Gather of ``node`` (by its leaf position, ir.leaves order), each source's first
    leaf position and whether the source is a plain Leaf (a tensor read in place)."""
    out = {}

    def walk(n, pos):
        t = type(n)
        if t is ir.Leaf:
            return pos + 1
        if t is ir.ImplicitDot:
            return walk(n.rhs, walk(n.lhs, pos))
        if t is ir.View or t is ir.Gather:
            me, pos, starts = pos, pos + 1, []
            for c in n.children:
                starts.append((pos, type(c) is ir.Leaf))
                pos = walk(c, pos)
            if t is ir.Gather:
                out[me] = starts
            return pos
        for c in n.children:
            pos = walk(c, pos)
        return pos
    walk(node, 0)
    return out


def _check_index(args, index):
    """The index source of a gather (a gpu tensor), copied to the host and range-checked
    (GatherArgs.check_index, the CPU's check)."""
    args.check_index(index.to_numpy())


def _view_struct(fields):
    """An ms_cu_view (lower.view_map's fields) as the bytes a launch passes by value."""
    nmap, colstep, mdiv, mmod, mstride = fields
    return np.void(struct.pack(f"<{2 + 3 * lower.VIEW_MAXDIM}q", nmap, colstep, *mdiv, *mmod,
                               *mstride))
