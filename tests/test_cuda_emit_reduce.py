"""The CUDA reductions (mshadow/cuda/lower.py emit_reduce): sum_rows, sumall_except_dim,
reduce_except_dim, reduce_with_axis and reduce_keepdim (and their arg forms: ties, NaNs)
over tensors and fused expressions,
every reducer of readers.REDUCER_TABLE, savers and scale, run on the host SIMT harness
(tests/cuda_host.py: a block's threads an OpenMP team, __syncthreads a barrier) against the
CPU backend; NVRTC compiles every kernel. Maximum and minimum give the CPU's bits; sums and
products fold in another order (threads, then warps by shuffles), so they are compared
within a few ulps of the sum of magnitudes."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import ir
from mshadow.cuda.launch import reduce_geometry
from mshadow.cuda.lower import REDUCE_BLOCK, emit_reduce

import cuda_host
from test_cuda_emit import compile_all, needs_gxx, needs_nvrtc

RED = {"sum": ms.red.sum, "maximum": ms.red.maximum, "minimum": ms.red.minimum,
       "product": ms.red.product}


def _parts(r):
    """(IR key, leaves, scalars, source shape) of a lazy reduction ``r``."""
    src = r.src
    if isinstance(src, ms.Tensor):
        return r.key, (src,), (), tuple(src.shape)
    return r.key, src.leaves, src.scalars, tuple(src.shape)


def _values(rng, shape, dtype, reducer):
    if reducer == "product":     # factors near 1: products stay finite and exact-ish
        return (1 + (rng.random(shape) - 0.5) / 8).astype(dtype)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-50, 50, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _cases(seed=0):
    """(label, lazy reduction, destination, saver, scale)."""
    rng = np.random.default_rng(seed)
    out = []
    for dtype in (np.float32, np.float64, np.int32):
        for shape in ((5, 7), (2, 3, 2, 9)):
            x = ms.from_numpy(_values(rng, shape, dtype, "sum"))
            y = ms.from_numpy(_values(rng, shape, dtype, "sum"))
            srcs = {"tensor": x, "x*2+y": x * 2 + y}
            if np.dtype(dtype).kind == "f":
                srcs["F(exp, x/8)"] = ms.F(ms.op.exp, x / 8)
            for label, s in srcs.items():
                nd = len(shape)
                for axis in range(nd):
                    out.append((f"{label} except_dim<{axis}> {dtype.__name__}",
                                ms.sumall_except_dim(s, axis), "saveto"))
                    for name in ("maximum", "minimum"):
                        out.append((f"{label} with_axis {name} {axis}",
                                    ms.reduce_with_axis(s, axis, RED[name]), "saveto"))
                    if nd > 1:
                        out.append((f"{label} keepdim sum {axis}",
                                    ms.reduce_keepdim(s, axis, ms.red.sum), "plusto"))
                if nd == 2:
                    out.append((f"{label} sum_rows", ms.sum_rows(s), "minusto"))
    for dtype in (np.float32, np.float64, np.int32, np.float16):   # arg forms: ties, NaNs
        t = rng.integers(-3, 4, (3, 40, 2)).astype(dtype)            # many ties
        if np.dtype(dtype).kind == "f":
            t[0, 7, 1] = t[0, 30, 1] = t[2, 2, 0] = np.nan
        x = ms.from_numpy(t)
        for name in ("maximum", "minimum"):
            for axis in range(3):
                out.append((f"arg {name} {axis} {dtype.__name__}",
                            ms.reduce_with_axis(x, axis, RED[name], mask=True), "saveto"))
            out.append((f"arg keepdim {name} of x*2", ms.reduce_keepdim(x * 2, 1, RED[name],
                                                                        mask=True), "plusto"))
    h = ms.from_numpy(_values(rng, (6, 9), np.float16, "sum"))    # float16: in float
    out += [("f16 sum_rows", ms.sum_rows(h * 2), "plusto"),
            ("f16 maximum", ms.reduce_with_axis(h, 0, ms.red.maximum), "saveto")]
    x = ms.from_numpy(_values(rng, (4, 6, 5), np.float32, "product"))
    out.append(("product except_dim<1>", ms.reduce_except_dim(x, 1, ms.red.product), "saveto"))
    return out


def _run(lib, k, r, saver, scale, grid=(3, 1), block=32):
    key, leaves, scalars, shape = _parts(r)
    nout, nred, A, B, M, exc = reduce_geometry(shape, key.form, key.axis)
    dst = ms.new_tensor(tuple(r.shape), dtype=r.dtype)
    rng = np.random.default_rng(1)
    dst.numpy()[...] = rng.integers(-3, 4, dst.numpy().shape)
    host = np.array(dst.numpy())
    cuda_host.run(lib, k, host, leaves, scalars, grid=grid, block=block,
                  extra={"nout": nout, "nred": nred, "A": A, "B": B, "M": M,
                         "except_dim": exc, "src_cols": shape[-1],
                         "dst_cols": host.shape[-1] if host.ndim else 1, "scale": scale})
    if saver == "saveto":
        dst[:] = r * scale if scale != 1 else r
    elif saver == "plusto":
        dst += r * scale if scale != 1 else r
    else:
        dst -= r * scale if scale != 1 else r
    return host, dst.numpy()


def _close(host, cpu, key, what):
    if key.reducer in ("maximum", "minimum") or host.dtype.kind == "i" or key.mask:
        assert host.tobytes() == cpu.tobytes(), what
    else:
        rtol = {np.float16: 2e-3, np.float32: 1e-5}.get(host.dtype.type, 1e-12)
        np.testing.assert_allclose(host.astype(np.float64), cpu.astype(np.float64), rtol=rtol,
                                   atol=10 * rtol, err_msg=what)


@needs_gxx
def test_host_harness_matches_the_cpu():
    cases = _cases()
    kernels = [emit_reduce(r.key, r.key.code, saver) for _, r, saver in cases]
    lib = cuda_host.build(kernels)
    for i, ((what, r, saver), k) in enumerate(zip(cases, kernels)):
        # every case on one warp a block; every 40th also on 2 and 3 warps (the host runs
        # a block's threads as an OpenMP team, each shuffle two barriers: slow on 2 cores)
        for scale, grid, block in ((1, (2, 1), 32), (2, (1, 1), 64), (1, (4, 1), 96)):
            if (saver != "saveto" and scale != 1) or (block > 32 and i % 40):
                continue
            host, cpu = _run(lib, k, r, saver, scale, grid, block)
            _close(host, cpu, r.key, f"{what} ({saver}, scale {scale}, grid {grid}, "
                                     f"block {block})")


@needs_gxx
def test_nan_propagates_through_maximum_and_minimum():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    a[2, 3] = np.nan
    x = ms.from_numpy(a)
    for name in ("maximum", "minimum"):
        for axis in (0, 1):
            r = ms.reduce_with_axis(x, axis, RED[name])
            k = emit_reduce(r.key, "f32", "saveto")
            host, cpu = _run(cuda_host.build([k]), k, r, "saveto", 1)
            assert np.array_equal(np.isnan(host), np.isnan(cpu)) and np.isnan(host).any()
            assert host.tobytes() == cpu.tobytes()


@needs_nvrtc
def test_nvrtc_compiles_every_reduction():
    kernels = [emit_reduce(r.key, r.key.code, s) for _, r, s in _cases()]
    x16 = ms.new_tensor((3, 40), 1.0, dtype=np.float16)
    kernels.append(emit_reduce(ms.sum_rows(x16 * 2).key, "f16", "plusto"))
    from mshadow.cuda.lower import (emit_scatter_rows, emit_softmax, emit_softmax_axis1,
                                    emit_softmax_grad)
    from mshadow.dtypes import BY_CODE
    kernels += [emit_scatter_rows(c, "set") for c in BY_CODE]
    from mshadow.cuda import lower
    kernels += [lower.emit_sort_keys(c, d) for c in BY_CODE for d in (False, True)]
    kernels += [lower.emit_sort_count(), lower.emit_sort_scan(), lower.emit_sort_scatter()]
    kernels += [lower.emit_gather_1d(c) for c in BY_CODE]
    from mshadow import ir                      # a view target's store (dst_view)
    from mshadow.dtypes import compute_code
    kernels += [lower.emit(ir.LEAF[compute_code(c)], c, s, dst_view=True)
                for c in BY_CODE for s in ("saveto", "divto")]
    for c in ("f32", "f64"):
        kernels += [emit_softmax(c), emit_softmax_axis1(c), emit_scatter_rows(c, "add")]
        kernels += [emit_softmax_grad(c, nd, sm) for nd in (2, 3) for sm in (False, True)]
    assert compile_all(kernels, archs=("sm_90",)) >= 40   # distinct structures


def test_what_it_refuses():
    from mshadow.cuda.lower import emit_softmax_axis1, emit_softmax_grad
    with pytest.raises(ValueError, match="2-D or 3-D"):
        emit_softmax_grad("f32", 1, False)
    with pytest.raises(ValueError, match="float32 or float64"):
        emit_softmax_axis1("f16")
    from mshadow.cuda.lower import emit_scatter_rows
    with pytest.raises(ValueError, match="mode 'add' of float32 / float64"):
        emit_scatter_rows("f16", "add")
    x = ms.new_tensor((3, 4), 1.0)
    with pytest.raises(TypeError, match="ir.Reduce"):
        emit_reduce((x * 2).key, "f32", "saveto")
    with pytest.raises(ValueError, match="saver"):
        emit_reduce(ms.sum_rows(x).key, "f32", "nosuch")
    with pytest.raises(ValueError, match="stored into f32"):
        emit_reduce(ms.sum_rows(x).key, "f64", "saveto")
    assert REDUCE_BLOCK % 32 == 0 and REDUCE_BLOCK // 32 <= 32   # one warp folds the warps
    k = emit_reduce(ms.sum_rows(x * 2).key, "f32", "saveto")
    assert [n for n, _ in k.binding.params[:11]] == [
        "nout", "nred", "A", "B", "M", "except_dim", "src_cols", "dst", "dst_pitch",
        "dst_cols", "scale"]
    assert ir.describe(ms.sum_rows(x * 2).key) in k.source


@needs_gxx
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_rows_give_the_cpu_bits(dtype):
    """emit_softmax: the CPU kernel's order (16 lanes, pairwise) and vmath's exp, so the
    harness stores the CPU's nn.softmax bits: every width from 1 to 40 and 1000, pitched
    rows, in place, NaN and infinities."""
    from mshadow.codegen_cpu import REDUCE_LANES
    from mshadow.cuda.lower import SOFTMAX_LANES, emit_softmax
    assert SOFTMAX_LANES == REDUCE_LANES
    code = "f32" if dtype == np.float32 else "f64"
    k = emit_softmax(code)
    lib = cuda_host.build([k])
    rng = np.random.default_rng(3)
    for cols in list(range(1, 41)) + [1000]:
        e = (rng.standard_normal((5, cols)) * 6).astype(dtype)
        if cols > 3:
            e[1, 2], e[3, 0], e[4, 1] = np.nan, np.inf, -np.inf
        cpu = ms.new_tensor(e.shape, dtype=dtype, pad=True)
        with np.errstate(invalid="ignore"):
            ms.nn.softmax(cpu, ms.from_numpy(e))
        wide = np.zeros((5, cols + 7), dtype)      # pitched rows on the device side too
        src = wide[:, :cols]
        src[...] = e
        host = np.zeros((5, cols), dtype)
        for inplace in (False, True):
            out = src if inplace else host
            cuda_host.run(lib, k, out, (), (), grid=(2, 1), block=32,
                          extra={"src": src.ctypes.data, "src_pitch": cols + 7})
            assert out.tobytes() == cpu.numpy().tobytes(), (cols, inplace)
            src[...] = e
    with pytest.raises(ValueError, match="float32 or float64"):
        emit_softmax("f16")
