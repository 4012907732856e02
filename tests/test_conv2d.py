"""nn.conv2d, conv2d_grad_weight and conv2d_grad_data: cxxnet's convolution layer in one
call, the column matrix a panel of one image's columns at a time, or at stride 1 the padded
image read directly (panel_gemm.h), each product written where it belongs. Oracle: numpy in
float64 (im2col of numpy's pad, then matmul), and the panels' bits for the direct forward."""
import os

import numpy as np
import pytest

import mshadow as ms
from mshadow.errors import DTypeError, ShapeError
from references import np_im2col, np_pad


def _ref_cols(x, kh, kw, pad, stride):
    py, px = (pad, pad) if isinstance(pad, int) else pad
    return np_im2col(np_pad(x.astype(np.float64), py, px), kh, kw, stride, stride, 1, 1)


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


# (N, C, H, W), (K, kh, kw), pad, stride: C = 64 makes 576 rows, so an image's columns
# take more than one panel on one thread
CASES = [((2, 64, 24, 24), (8, 3, 3), 1, 1), ((3, 5, 9, 11), (4, 3, 2), (1, 2), 2),
         ((1, 3, 7, 7), (2, 1, 1), 0, 1), ((2, 4, 10, 8), (3, 5, 5), 2, 3),
         # stride 1 with a pad of the kernel's size (the data gradient's panels) and an
         # image one column wide (each output row wraps around the padded edge)
         ((2, 3, 6, 5), (4, 2, 2), 2, 1), ((3, 2, 4, 1), (5, 3, 3), 1, 1)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_conv2d_and_its_weight_gradient(case, dtype, threads):
    (N, C, H, W), (K, kh, kw), pad, stride = case
    rng = np.random.default_rng(N * C + H)
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((K, C, kh, kw)).astype(dtype)
    cols = _ref_cols(x, kh, kw, pad, stride)            # (C*kh*kw, N*oh*ow)
    per = cols.shape[1] // N
    oh = (H + 2 * (pad if isinstance(pad, int) else pad[0]) - kh) // stride + 1
    ow = per // oh
    want = (w.reshape(K, -1).astype(np.float64) @ cols).reshape(K, N, oh, ow).transpose(1, 0, 2, 3)
    g = rng.standard_normal((N, K, oh, ow)).astype(dtype)
    want_dw = (g.astype(np.float64).transpose(1, 0, 2, 3).reshape(K, -1) @ cols.T).reshape(w.shape)
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        X, Wt, G = ms.from_numpy(x), ms.from_numpy(w), ms.from_numpy(g)
        out = ms.new_tensor((N, K, oh, ow), dtype=dtype, init=5)
        ms.nn.conv2d(out, X, Wt, pad, stride)
        np.testing.assert_allclose(out.numpy(), want, **_tol(dtype))
        ms.nn.conv2d(out, X, Wt, pad, stride, saver="plusto")
        np.testing.assert_allclose(out.numpy(), 2 * want, **_tol(dtype))
        dw = ms.new_tensor(w.shape, dtype=dtype, init=5)
        ms.nn.conv2d_grad_weight(dw, X, G, pad, stride)
        np.testing.assert_allclose(dw.numpy(), want_dw, **_tol(dtype))
        ms.nn.conv2d_grad_weight(dw, X, G, pad, stride, saver="minusto")
        np.testing.assert_allclose(dw.numpy(), 0 * want_dw, **_tol(dtype))
    finally:
        ms.set_num_threads(old)


def test_conv2d_of_an_expression_and_into_its_own_input():
    """data may be any expression (relu of x here); data that reads ``out`` is evaluated
    first (its columns would read images already stored)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 6))
    w = rng.standard_normal((3, 3, 3, 3))
    X, Wt = ms.from_numpy(x), ms.from_numpy(w)
    out = ms.new_tensor((2, 3, 6, 6), dtype=np.float64)
    ms.nn.conv2d(out, ms.F(ms.op.relu, X), Wt, 1)
    want = (w.reshape(3, -1) @ _ref_cols(np.maximum(x, 0), 3, 3, 1, 1)).reshape(
        3, 2, 6, 6).transpose(1, 0, 2, 3)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    y = ms.from_numpy(x.copy())
    ms.nn.conv2d(y, y * 1, Wt, 1)
    want2 = (w.reshape(3, -1) @ _ref_cols(x, 3, 3, 1, 1)).reshape(3, 2, 6, 6).transpose(1, 0, 2, 3)
    np.testing.assert_allclose(y.numpy(), want2, rtol=1e-12, atol=1e-12)


def test_conv2d_errors_store_nothing():
    x = ms.new_tensor((2, 3, 6, 6), init=1)
    w = ms.new_tensor((4, 3, 3, 3), init=1)
    out = ms.new_tensor((2, 4, 4, 4), init=7)
    with pytest.raises(ShapeError, match=r"give \(2, 4\) \+ \(4, 4\), out is \(2, 4, 6, 6\)"):
        ms.nn.conv2d(ms.new_tensor((2, 4, 6, 6)), x, w)
    with pytest.raises(ShapeError, match="dense"):
        ms.nn.conv2d(ms.new_tensor((2, 4, 4, 4), pad=True), x, w)
    with pytest.raises(DTypeError):
        ms.nn.conv2d(out, x, ms.new_tensor((4, 3, 3, 3), dtype=np.float64))
    with pytest.raises(ShapeError):
        ms.nn.conv2d(out, ms.new_tensor((2, 5, 6, 6)), w)
    with pytest.raises(TypeError, match="saver"):
        ms.nn.conv2d(out, x, w, saver="multo")
    with pytest.raises(ShapeError, match="grad is"):
        ms.nn.conv2d_grad_weight(ms.new_tensor((4, 3, 3, 3)), x, ms.new_tensor((2, 4, 5, 5)))
    np.testing.assert_array_equal(out.numpy(), 7)


def _ref_grad_data(g, w, shape, pad, stride):
    """col2im of w^T @ g, cropped: the adjoint of the forward (numpy, float64)."""
    N, C, H, W = shape
    K, _, kh, kw = w.shape
    py, px = (pad, pad) if isinstance(pad, int) else pad
    Hp, Wp = H + 2 * py, W + 2 * px
    oh, ow = (Hp - kh) // stride + 1, (Wp - kw) // stride + 1
    cols = w.reshape(K, -1).astype(np.float64).T @ g.astype(np.float64).transpose(
        1, 0, 2, 3).reshape(K, -1)                           # (C*kh*kw, N*oh*ow)
    cols = cols.reshape(C, kh, kw, N, oh, ow)
    out = np.zeros((N, C, Hp, Wp))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] += \
                cols[:, i, j].transpose(1, 0, 2, 3)
    return out[:, :, py:py + H, px:px + W]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_conv2d_grad_data(case, dtype, threads):
    """Against the adjoint in numpy, into a pitched dx, with plusto; and the forward's
    adjoint identity <conv(x), g> = <x, grad_data(g)>."""
    (N, C, H, W), (K, kh, kw), pad, stride = case
    rng = np.random.default_rng(N + C * H)
    py, px = (pad, pad) if isinstance(pad, int) else pad
    oh, ow = (H + 2 * py - kh) // stride + 1, (W + 2 * px - kw) // stride + 1
    w = rng.standard_normal((K, C, kh, kw)).astype(dtype)
    g = rng.standard_normal((N, K, oh, ow)).astype(dtype)
    want = _ref_grad_data(g, w, (N, C, H, W), pad, stride)
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        dx = ms.new_tensor((N, C, H, W), dtype=dtype, pad=True, init=2)
        ms.nn.conv2d_grad_data(dx, ms.from_numpy(g), ms.from_numpy(w), pad, stride)
        np.testing.assert_allclose(dx.numpy(), want, **_tol(dtype))
        ms.nn.conv2d_grad_data(dx, ms.from_numpy(g), ms.from_numpy(w), pad, stride, "plusto")
        np.testing.assert_allclose(dx.numpy(), 2 * want, **_tol(dtype))
    finally:
        ms.set_num_threads(old)
    if dtype == np.float64:
        x = rng.standard_normal((N, C, H, W))
        y = ms.new_tensor((N, K, oh, ow), dtype=np.float64)
        ms.nn.conv2d(y, ms.from_numpy(x), ms.from_numpy(w), pad, stride)
        np.testing.assert_allclose(np.sum(y.numpy() * g), np.sum(x * want), rtol=1e-10)


def test_conv2d_grad_data_errors():
    w = ms.new_tensor((4, 3, 3, 3), init=1)
    g = ms.new_tensor((2, 4, 4, 4), init=1)
    dx = ms.new_tensor((2, 3, 6, 6), init=7)
    with pytest.raises(ShapeError, match="grad is"):
        ms.nn.conv2d_grad_data(dx, ms.new_tensor((2, 4, 5, 5)), w)
    with pytest.raises(ShapeError, match="dense"):
        ms.nn.conv2d_grad_data(dx, ms.new_tensor((2, 4, 4, 4), pad=True), w)
    with pytest.raises(DTypeError):
        ms.nn.conv2d_grad_data(dx, g, ms.new_tensor((4, 3, 3, 3), dtype=np.float64))
    buf = np.ones(216, np.float32)                           # dx and grad on one buffer
    with pytest.raises(ValueError, match="shares memory"):
        ms.nn.conv2d_grad_data(ms.from_numpy(buf.reshape(2, 3, 6, 6)),
                               ms.from_numpy(buf[:128].reshape(2, 4, 4, 4)), w)
    assert (buf == 1).all()
    np.testing.assert_array_equal(dx.numpy(), 7)


@pytest.mark.parametrize("N, C, K", [(2, 0, 3), (0, 2, 3), (2, 2, 0)])
def test_empty_sizes(N, C, K):
    """No channels, no images or no filters: sums of nothing are 0 (saveto) and the
    accumulating savers leave the destination (C = 0 divided by zero in C: SIGFPE)."""
    x = ms.new_tensor((N, C, 5, 5), init=1)
    w = ms.new_tensor((K, C, 3, 3), init=5)
    y = ms.new_tensor((N, K, 3, 3), init=7)
    ms.nn.conv2d(y, x, w)
    assert (y.numpy() == 0).all()
    ms.nn.conv2d(y, x, w, saver="plusto")
    assert (y.numpy() == 0).all()
    ms.nn.conv2d_grad_weight(w, x, y)
    assert (w.numpy() == 0).all()
    dx = ms.new_tensor((N, C, 5, 5), init=4)
    ms.nn.conv2d_grad_data(dx, y, w)
    assert (dx.numpy() == 0).all()
    o = ms.new_tensor((3, 5), init=7)
    o[:] = ms.dot(ms.new_tensor((3, 0)), ms.new_tensor((0, 5)) * 2)
    assert (o.numpy() == 0).all()


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_panel_kernel_same_bits_at_both_levels_and_thread_counts(dtype):
    """The forward and the data gradient's products at the AVX2 and AVX-512 levels are
    panel_gemm.h's kernel (the adjoint identity <conv(x), y> = <x, conv^T(y)> checks the
    gradient): each output adds
    its products in k order with one fused multiply-add each, so both levels and 1 or 3
    threads give the same bits. K of 13 (blocks of 8 and 6 rows and their remainders),
    rows of 1 to 3 vectors and their masked tails (ow 13, 29), the savers' alpha and beta;
    numpy in float64 the oracle."""
    from mshadow.testing import simd_levels
    levels = [lv for lv in simd_levels() if lv in ("avx2", "avx512")]
    if not levels:
        pytest.skip("the direct kernels are x86 AVX2 / AVX-512 ones, which this CPU lacks: "
                    "the forward is BLAS's")
    rng = np.random.default_rng(4)
    for (N, C, H, W), K in (((2, 7, 15, 15), 13), ((1, 3, 9, 31), 6), ((3, 2, 5, 5), 1)):
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        w = rng.standard_normal((K, C, 3, 3)).astype(dtype)
        cols = _ref_cols(x, 3, 3, 1, 1)
        want = (w.reshape(K, -1).astype(np.float64) @ cols).reshape(K, N, H, W).transpose(1, 0, 2, 3)
        X, Wt = ms.from_numpy(x), ms.from_numpy(w)
        first = first_dx = None
        for level in levels:
            ms.set_simd_level(level)
            for threads in (1, 3):
                ms.set_num_threads(threads)
                out = ms.new_tensor((N, K, H, W), dtype=dtype, init=2)
                ms.nn.conv2d(out, X, Wt, 1, 1, saver="minusto")
                got = out.numpy().copy()
                np.testing.assert_allclose(got, 2 - want, **_tol(dtype))
                if first is None:
                    first = got
                assert got.tobytes() == first.tobytes(), (level, threads)
                out = ms.new_tensor((N, K, H, W), dtype=dtype, init=np.nan)
                ms.nn.conv2d(out, X, Wt, 1, 1)        # saveto never reads the destination
                np.testing.assert_allclose(out.numpy(), want, **_tol(dtype))
                dx = ms.new_tensor((N, C, H, W), dtype=dtype, init=np.nan)
                ms.nn.conv2d_grad_data(dx, out, Wt, 1, 1)   # (W^T @ grad) of each image
                if first_dx is None:
                    first_dx = dx.numpy().copy()
                    np.testing.assert_allclose(np.sum(first_dx * x), np.sum(want * want),
                                               rtol=1e-3 if dtype == np.float32 else 1e-10)
                assert dx.numpy().tobytes() == first_dx.tobytes(), (level, threads)


def _random_shapes(rng, n, filters):
    """``n`` random stride-1 cases ((N, C, H, W), (K, kh, kw), (py, px)): kernels of 1 to 5,
    pads of 0 to 3, images at least one output wide and up to 11 rows and 39 columns past
    that, up to ``filters`` - 1 filters."""
    out = []
    for _ in range(n):
        kh, kw = rng.integers(1, 6, 2)
        py, px = rng.integers(0, 4, 2)
        out.append(((int(rng.integers(1, 5)), int(rng.integers(1, 9)),
                     int(max(kh - 2 * py, 1) + rng.integers(0, 12)),
                     int(max(kw - 2 * px, 1) + rng.integers(0, 40))),
                    (int(rng.integers(1, filters)), int(kh), int(kw)), (int(py), int(px))))
    return out


def _direct_levels():
    from mshadow.testing import simd_levels
    levels = [lv for lv in simd_levels() if lv in ("avx2", "avx512")]
    if not levels:
        pytest.skip("the direct kernels are x86 AVX2 / AVX-512 ones, which this CPU lacks: "
                    "both are BLAS's")
    return levels


def _compiled_direct_levels():
    """The levels with direct kernels this build has (their plans exist on any x86 CPU)."""
    levels = [lv for lv in ms.simd_info()["compiled"] if lv in ("avx2", "avx512")]
    if not levels:
        pytest.skip("the direct kernels are x86 AVX2 / AVX-512 ones, which this build "
                    "lacks: no plan to check")
    return levels


def _check_direct_against_panels(cases, dtype, rng, savers=(("saveto", np.nan), ("minusto", 2))):
    """Each stride-1 case read straight from the padded image (``x``) and from im2col's
    panels (``x * 1``): numpy in float64 the oracle of both, the same bits at both levels,
    on 1 and 3 threads (threads take whole images from 3 images on, else share each
    image), from pitched rows."""
    levels = _direct_levels()
    for (N, C, H, W), (K, kh, kw), pad in cases:
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        w = rng.standard_normal((K, C, kh, kw)).astype(dtype)
        cols = _ref_cols(x, kh, kw, pad, 1)
        py, px = (pad, pad) if isinstance(pad, int) else pad
        oh, ow = H + 2 * py - kh + 1, W + 2 * px - kw + 1
        want = (w.reshape(K, -1).astype(np.float64) @ cols).reshape(K, N, oh, ow).transpose(
            1, 0, 2, 3)
        X = ms.new_tensor((N, C, H, W), dtype=dtype, pad=True)    # pitched rows
        X.numpy()[...] = x
        Wt = ms.from_numpy(w)
        for level in levels:
            ms.set_simd_level(level)
            for threads in (1, 3):
                ms.set_num_threads(threads)
                for saver, init in savers:
                    expect = {"saveto": want, "plusto": init + want, "minusto": init - want}[saver]
                    direct = ms.new_tensor((N, K, oh, ow), dtype=dtype, init=init)
                    panels = ms.new_tensor((N, K, oh, ow), dtype=dtype, init=init)
                    ms.nn.conv2d(direct, X, Wt, pad, 1, saver)
                    ms.nn.conv2d(panels, X * 1, Wt, pad, 1, saver)
                    np.testing.assert_allclose(direct.numpy(), expect, **_tol(dtype))
                    assert direct.numpy().tobytes() == panels.numpy().tobytes(), \
                        ((N, C, H, W), (K, kh, kw), pad, level, threads, saver)


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_direct_gives_the_panels_bits(dtype):
    """A stride-1 convolution of a tensor is read straight from each padded image
    (panel_gemm.h ms_pg_conv); of an expression, from im2col's panels. Each output adds
    the same products in the same order, so ``x`` and ``x * 1`` give the same bits, for
    any pad and kernel, with every saver."""
    rng = np.random.default_rng(11)
    shapes = [((3, 5, 9, 20), (7, 3, 3), 1), ((1, 4, 6, 3), (9, 5, 2), (2, 0)),
              ((4, 2, 5, 5), (3, 1, 1), 0), ((2, 3, 3, 1), (2, 3, 3), (1, 2))]
    _check_direct_against_panels(shapes + _random_shapes(rng, 4, 20), dtype, rng)


# widths around the vector widths (8 and 16 floats at AVX-512, 4 and 8 at AVX2; tiles of 48
# and 16 floats): the row ends fall at every phase of the tiles
_ROW_PHASE_WIDTHS = (6, 7, 8, 14, 15, 16, 17, 23, 30, 46, 47, 48, 56, 57, 64, 100)


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_direct_at_every_row_phase(dtype):
    """Where an output row is at least a vector wide, the direct convolution skips the
    kw - 1 columns of each padded row that wrap around its edge: a tile of 2-3 vectors
    across a row's end loads and stores its vectors in two pieces, one of them possibly
    empty (a row ending at a vector's start), a tile may span three rows, and the image's
    last tile is partial; plusto reads both pieces."""
    rng = np.random.default_rng(12)
    shapes = [((1, 2, 5, W), (9, 3, 3), 1) for W in _ROW_PHASE_WIDTHS]
    shapes += [((2, 3, 4, 31), (17, 3, 5), (1, 2)), ((1, 1, 3, 16), (8, 1, 1), 0)]
    _check_direct_against_panels(shapes, dtype, rng, savers=(("saveto", np.nan), ("plusto", 3)))


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_grad_data_direct_into_pitched_rows_at_every_row_phase(dtype):
    """The data gradient's direct form writes a pitched dx: a vector across a row's end
    stores its second piece a pitch further on, and one spanning three rows (a row
    narrower than a vector) goes lane by lane. numpy's adjoint the oracle; a dense dx the
    same bits; both levels, 1 and 3 threads, saveto and plusto."""
    shapes = [((2, 3, 4, W), (5, 3, 3), 1) for W in _ROW_PHASE_WIDTHS]
    shapes += [((1, 2, 3, 20), (3, 1, 1), 0), ((1, 2, 3, 9), (4, 3, 2), (0, 1))]
    _check_grad_data_pitched(shapes, dtype, np.random.default_rng(13))


def _check_grad_data_pitched(shapes, dtype, rng, by_channels=False):
    """The data gradient of each case into a pitched dx and a dense one: numpy's adjoint
    the oracle, the same bits, both levels, 1 and 3 threads, saveto and plusto; where
    ``by_channels``, each case's plan asserted to take the channel tiles."""
    levels = _direct_levels()
    for (N, C, H, W), (K, kh, kw), pad in shapes:
        py, px = (pad, pad) if isinstance(pad, int) else pad
        oh, ow = H + 2 * py - kh + 1, W + 2 * px - kw + 1
        w = rng.standard_normal((K, C, kh, kw)).astype(dtype)
        g = rng.standard_normal((N, K, oh, ow)).astype(dtype)
        want = _ref_grad_data(g, w, (N, C, H, W), pad, 1)
        G, Wt = ms.from_numpy(g), ms.from_numpy(w)
        for level in levels:
            ms.set_simd_level(level)
            # (the gradient's padded rows: W + kw - 1 - px on each side)
            assert not by_channels or _plan(level, dtype, C, K * kh * kw, N, H, W,
                                            W + 2 * (kw - 1 - px), 1)["by_channels"]
            for threads in (1, 3):
                ms.set_num_threads(threads)
                for saver, init, expect in (("saveto", np.nan, want), ("plusto", 3, 3 + want)):
                    pitched = ms.new_tensor((N, C, H, W), dtype=dtype, init=init, pad=True)
                    dense = ms.new_tensor((N, C, H, W), dtype=dtype, init=init)
                    ms.nn.conv2d_grad_data(pitched, G, Wt, pad, 1, saver)
                    ms.nn.conv2d_grad_data(dense, G, Wt, pad, 1, saver)
                    np.testing.assert_allclose(pitched.numpy(), expect, **_tol(dtype))
                    assert pitched.numpy().tobytes() == dense.numpy().tobytes(), \
                        ((N, C, H, W), (K, kh, kw), pad, level, threads, saver)


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_grad_weight_direct_same_bits_at_both_levels_and_thread_counts(dtype):
    """The weight gradient of a stride-1 convolution of a tensor is read straight from
    each padded image (panel_gemm.h ms_pg_convw): each element adds its products in (n, oy,
    ox) order with one fused multiply-add each, its vectors running along the filters, so
    both levels and 1, 2 or 3 threads (which split the taps) give the same bits. Filters
    of 1 to 40 (masked vectors and blocks of taps cut short), any pad and kernel, pitched
    data rows, every saver; numpy in float64 the oracle."""
    from mshadow.testing import simd_levels
    levels = [lv for lv in simd_levels() if lv in ("avx2", "avx512")]
    if not levels:
        pytest.skip("the direct kernels are x86 AVX2 / AVX-512 ones, which this CPU lacks: "
                    "the weight gradient is BLAS's")
    rng = np.random.default_rng(12)
    shapes = [((3, 5, 9, 20), (7, 3, 3), 1), ((1, 4, 6, 3), (40, 5, 2), (2, 0)),
              ((4, 2, 5, 5), (1, 1, 1), 0), ((2, 3, 3, 1), (17, 3, 3), (1, 2))]
    for (N, C, H, W), (K, kh, kw), pad in shapes + _random_shapes(rng, 4, 40):
        py, px = (pad, pad) if isinstance(pad, int) else pad
        oh, ow = H + 2 * py - kh + 1, W + 2 * px - kw + 1
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        g = rng.standard_normal((N, K, oh, ow)).astype(dtype)
        cols = _ref_cols(x, kh, kw, pad, 1)
        want = (g.astype(np.float64).transpose(1, 0, 2, 3).reshape(K, -1) @ cols.T).reshape(
            K, C, kh, kw)
        X = ms.new_tensor((N, C, H, W), dtype=dtype, pad=True)    # pitched rows
        X.numpy()[...] = x
        G = ms.from_numpy(g)
        first = None
        for level in levels:
            ms.set_simd_level(level)
            for threads in (1, 2, 3):
                ms.set_num_threads(threads)
                dw = ms.new_tensor((K, C, kh, kw), dtype=dtype, init=np.nan)
                ms.nn.conv2d_grad_weight(dw, X, G, pad, 1)   # saveto never reads dw
                np.testing.assert_allclose(dw.numpy(), want, **_tol(dtype))
                if first is None:
                    first = dw.numpy().copy()
                assert dw.numpy().tobytes() == first.tobytes(), \
                    ((N, C, H, W), (K, kh, kw), pad, level, threads)
                ms.nn.conv2d_grad_weight(dw, X, G, pad, 1, "plusto")
                np.testing.assert_allclose(dw.numpy(), 2 * want, **_tol(dtype))


@pytest.mark.usefixtures("restore_engine_state")
def test_direct_kernels_keep_non_finite_values_where_mshadow_has_them():
    """Regressions (an outside review of the direct kernels): an inf in the data made the
    weight gradient NaN in taps that never read it (the wrap-around columns multiplied it
    by 0); an inf in the weight made the data gradient NaN wherever grad's zero border met
    it (col2im never multiplies there). Both now give the column-matrix path's values at
    every level: inf where the inf is summed, finite elsewhere."""
    from mshadow.testing import simd_levels
    x = np.ones((1, 1, 4, 4), np.float32)
    x[0, 0, 0, 3] = np.inf
    g = np.ones((1, 1, 2, 2), np.float32)
    want_dw = np.array([[x[0, 0, ky:ky + 2, kx:kx + 2].astype(np.float64).sum()
                         for kx in range(3)] for ky in range(3)])
    w = np.ones((1, 1, 3, 3), np.float32)
    w[0, 0, 0, 0] = np.inf
    dx_ref = None
    for level in simd_levels():
        ms.set_simd_level(level)
        dw = ms.new_tensor((1, 1, 3, 3))
        ms.nn.conv2d_grad_weight(dw, ms.from_numpy(x), ms.from_numpy(g), 0, 1)
        np.testing.assert_array_equal(dw.numpy()[0, 0], want_dw)
        dx = ms.new_tensor((1, 1, 4, 4))
        ms.nn.conv2d_grad_data(dx, ms.from_numpy(g), ms.from_numpy(w), 0, 1)
        assert np.isinf(dx.numpy()[0, 0, :2, :2]).all() and np.isfinite(dx.numpy()[0, 0, 2:]).all()
        if dx_ref is None:
            dx_ref = dx.numpy().copy()
        np.testing.assert_array_equal(dx.numpy(), dx_ref)


@pytest.mark.usefixtures("restore_engine_state")
def test_conv2d_grad_data_shapes_refused_at_every_level():
    """Regressions: a negative pad and a kernel larger than the padded image were refused
    by the column-matrix path but computed by the direct one (the AVX2/AVX-512 levels)."""
    from mshadow.testing import simd_levels
    for level in simd_levels():
        ms.set_simd_level(level)
        dx = ms.new_tensor((1, 1, 4, 4), init=7)
        with pytest.raises(ShapeError, match="non-negative"):
            ms.nn.conv2d_grad_data(dx, ms.new_tensor((1, 1, 4, 4)), ms.new_tensor((1, 1, 3, 3)),
                                   -1)
        dx1 = ms.new_tensor((1, 1, 1, 4), init=7)
        with pytest.raises(ShapeError):
            ms.nn.conv2d_grad_data(dx1, ms.new_tensor((1, 1, 0, 3)), ms.new_tensor((1, 1, 2, 2)))
        assert (dx.numpy() == 7).all() and (dx1.numpy() == 7).all()


def test_conv2d_refuses_data_of_another_dtype_and_a_gradient_into_itself():
    """Regressions: float64 data with a float32 weight was read as float32 (wrong numbers,
    no error); a dweight sharing memory with grad added into what it was reading."""
    x64 = ms.new_tensor((1, 2, 5, 5), dtype=np.float64, init=1)
    w = ms.new_tensor((3, 2, 3, 3), init=1)
    out = ms.new_tensor((1, 3, 3, 3), init=7)
    with pytest.raises(DTypeError, match="float64"):
        ms.nn.conv2d(out, x64, w)
    with pytest.raises(DTypeError, match="float64"):
        ms.nn.conv2d(out, x64 * 1, w)
    dw = ms.new_tensor((3, 2, 3, 3), init=7)
    with pytest.raises(DTypeError, match="float64"):
        ms.nn.conv2d_grad_weight(dw, x64, out)
    assert (out.numpy() == 7).all() and (dw.numpy() == 7).all()
    buf = np.ones(64, np.float32)                 # dweight (1, 1, 2, 2) inside grad
    grad = ms.from_numpy(buf[:16].reshape(1, 1, 4, 4))
    with pytest.raises(ValueError, match="shares memory"):
        ms.nn.conv2d_grad_weight(ms.from_numpy(buf[4:8].reshape(1, 1, 2, 2)),
                                 ms.new_tensor((1, 1, 5, 5), init=1), grad)
    assert (buf == 1).all()


def test_direct_entry_points_take_any_thread_count():
    """Regression: _blas.conv_direct with nthreads 0 gave one thread's buffer to a loop
    over none and wrote past it (a segfault); a count below 1 means one thread."""
    from mshadow.dot import _blas
    x = ms.new_tensor((2, 3, 6, 6), init=1)
    w = ms.new_tensor((4, 3, 3, 3), init=1)
    for nt in (0, -3):
        y = ms.new_tensor((2, 4, 6, 6))
        if _blas().conv_direct(y, x, w, 1, 1, False, 1, 0, nt, ms.simd_info()["active"]):
            assert y.numpy()[0, 0, 2, 2] == 27
        dw = ms.new_tensor((4, 3, 3, 3))
        if _blas().conv_direct_grad_weight(dw, x, y, 1, 1, 1, 0, nt, ms.simd_info()["active"]):
            assert np.isfinite(dw.numpy()).all()


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_gemm_tn_image_of_a_freed_gradient_leaks_nothing():
    """Regression: gemm_tn_image packed the weight before reading the gradient's address,
    and a FreedTensorError then left the packed copy (and the row offsets) allocated."""
    from mshadow.dot import _blas
    from mshadow.errors import FreedTensorError

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    a = ms.new_tensor((512, 4096), init=1)          # a packed copy of 8 MiB a call
    c = ms.new_tensor((4096, 16))
    level = ms.simd_info()["active"]
    g = ms.new_tensor((1, 512, 16))
    ms.free_space(g)
    before = rss()
    for _ in range(20):
        with pytest.raises(FreedTensorError):
            _blas().gemm_tn_image(c, a, g, 0, 1, level)
    assert rss() - before < 32 << 20


# Small images with many channels: tiles of pixels x channel vectors (panel_gemm.h
# ms_pg_ktile). (N, C, H, W), (K, kh, kw), pad, stride: K around the channel blocks (64 and
# 16 float32 channels at AVX-512 and AVX2, 32 and 8 float64), C * kh * kw below, at and
# past a chunk of 64 taps (64, 65, 128, 144), images whose pixels share tiles (several to a
# buffer, 13 images on 5 threads: a last buffer partial), a buffer past one range of 48
# tiles (30 x 10), strides 2 and 3 (the pixels' offsets spaced)
_BY_CHANNELS = [((5, 9, 7, 7), (64, 3, 3), 1, 1), ((2, 48, 6, 4), (60, 3, 2), (1, 2), 1),
                ((7, 16, 1, 1), (70, 1, 1), 0, 1), ((2, 32, 30, 10), (64, 3, 3), 1, 1),
                ((1, 4, 3, 5), (33, 2, 3), (0, 1), 1), ((13, 64, 3, 3), (64, 1, 1), 0, 1),
                ((5, 65, 3, 3), (64, 1, 1), 0, 1), ((3, 128, 2, 2), (64, 1, 1), 0, 1),
                ((4, 16, 6, 6), (60, 3, 3), 1, 1), ((3, 16, 9, 11), (64, 3, 3), 1, 2),
                ((2, 24, 10, 9), (40, 3, 2), (1, 0), 3)]


def _plan(level, dtype, K, CK, N, oh, ow, wrow, threads, stride=1, plane=0):
    """_blas.conv_direct_plan; ``dtype`` a dtype or its item size."""
    from mshadow.dot import _blas
    item = dtype if isinstance(dtype, int) else np.dtype(dtype).itemsize
    return _blas().conv_direct_plan(level, item, K, CK, N, oh, ow, wrow, threads, stride,
                                    plane)


def _check_by_channels(cases, dtype, rng, threads_list=(1, 3, 4, 5), poison=None):
    """Each case read straight from the padded image (``x``, its plan asserted to take the
    channel tiles) and from im2col's panels (``x * 1``): numpy in float64 the oracle, the
    same bits, every saver, at both levels and each thread count, from pitched rows.
    ``poison(x)`` may plant non-finite values (then the bits alone are compared). Returns
    the plans' (threads take whole buffers, a buffer holds several images) seen."""
    levels = _direct_levels()
    seen = set()
    for (N, C, H, W), (K, kh, kw), pad, st in cases:
        py, px = (pad, pad) if isinstance(pad, int) else pad
        oh, ow = (H + 2 * py - kh) // st + 1, (W + 2 * px - kw) // st + 1
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        if poison is not None:
            poison(x)
        w = rng.standard_normal((K, C, kh, kw)).astype(dtype)
        want = (w.reshape(K, -1).astype(np.float64) @ _ref_cols(x, kh, kw, pad, st)).reshape(
            K, N, oh, ow).transpose(1, 0, 2, 3)
        X = ms.new_tensor((N, C, H, W), dtype=dtype, pad=True)
        X.numpy()[...] = x
        Wt = ms.from_numpy(w)
        for level in levels:
            ms.set_simd_level(level)
            for threads in threads_list:
                plan = _plan(level, dtype, K, C * kh * kw, N, oh, ow, W + 2 * px, threads, st,
                             C * (H + 2 * py) * (W + 2 * px))
                assert plan["by_channels"], ((N, C, H, W), K, st, level)
                seen.add((plan["nbuf"] > 1 or threads == 1, plan["group"] > 1))
                ms.set_num_threads(threads)
                for saver, init in (("saveto", np.nan), ("plusto", 3), ("minusto", 2)):
                    expect = {"saveto": want, "plusto": init + want, "minusto": init - want}[saver]
                    direct = ms.new_tensor((N, K, oh, ow), dtype=dtype, init=init)
                    panels = ms.new_tensor((N, K, oh, ow), dtype=dtype, init=init)
                    ms.nn.conv2d(direct, X, Wt, pad, st, saver)
                    ms.nn.conv2d(panels, X * 1, Wt, pad, st, saver)
                    if poison is None:
                        np.testing.assert_allclose(direct.numpy(), expect, **_tol(dtype))
                    assert direct.numpy().tobytes() == panels.numpy().tobytes(), \
                        ((N, C, H, W), (K, kh, kw), pad, st, level, threads, saver)
    return seen


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_direct_by_channels_gives_the_panels_bits(dtype):
    """Where its tiles cost less, the direct convolution vectorises over output channels,
    a tile of a few pixels (of one image or of several in one buffer) times a block of
    channels, k chunk by chunk, at any stride. Each output still adds its products in
    (c, ky, kx) order, fused, from 0, so im2col's panels give the same bits. The plan of
    each run is checked, so the cases cover both ways of sharing the work and buffers of
    several images."""
    seen = _check_by_channels(_BY_CHANNELS, dtype, np.random.default_rng(14))
    # whole buffers and shared ones, one image a buffer and several
    assert seen == {(True, True), (True, False), (False, True), (False, False)}, seen


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_direct_by_channels_keeps_non_finite_values_as_the_panels(dtype):
    """An inf in an image's last pixel and a NaN in another's first, in buffers of several
    images and with channels past K in the last block: the pixels past a buffer's last
    (computed again from its tile's first) and the zero-padded channels are never stored, so
    the panels' bits come back, infs and NaNs where they are summed."""
    def poison(x):
        x[1, 0, -1, -1] = np.inf
        x[2, 1, 0, 0] = np.nan
    _check_by_channels([((4, 16, 6, 6), (60, 3, 3), 1, 1), ((3, 16, 9, 11), (64, 3, 3), 1, 2)],
                       dtype, np.random.default_rng(17), (1, 3), poison)


def test_conv_direct_plan_refuses_what_has_no_direct_kernel():
    """Regression (review): an item size of 0 divided by zero in the plan and killed the
    interpreter; the plan of a level without direct kernels was one no run would use."""
    from mshadow.dot import _blas
    for item in (0, 2, 512, -4):
        with pytest.raises(ValueError, match="float32"):
            _blas().conv_direct_plan("avx512", item, 64, 27, 8, 7, 7, 9, 1)
    with pytest.raises(ValueError, match="no direct kernels"):
        _blas().conv_direct_plan("plain", 4, 64, 27, 8, 7, 7, 9, 1)


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_grad_data_direct_by_channels_into_pitched_rows(dtype):
    """The data gradient of a layer with many input channels on small maps takes the
    channel tiles too (its output channels are the forward's input ones): numpy's adjoint
    the oracle (72 taps: two chunks), a pitched dx the same bits as a dense one, both
    levels, 1 and 3 threads."""
    _check_grad_data_pitched([((3, 64, 7, 7), (8, 3, 3), 1), ((2, 40, 4, 6), (3, 3, 2), (1, 0))],
                             dtype, np.random.default_rng(15), by_channels=True)


def test_conv2d_direct_plan_weighs_the_lane_stores():
    """Regression: the first cut chose ms_pg_ktile's tiles wherever they computed fewer
    lanes, and a first layer (3 channels, 27 taps) on 56 x 56 ran 2.5x slower: each lane
    stored alone cost more than its 27 products. The plan counts the stores: such a layer
    keeps ms_pg_tile's vector stores; 512 channels on 7 x 7 take the channel tiles, four
    images to a buffer on one thread (a thread a buffer on two)."""
    for level in _compiled_direct_levels():
        for item in (4, 8):
            assert not _plan(level, item, 64, 27, 8, 56, 56, 58, 1)["by_channels"]
            assert not _plan(level, item, 3, 576, 8, 28, 28, 30, 1)["by_channels"]
            one = _plan(level, item, 512, 4608, 64, 7, 7, 9, 1)
            assert one == {"by_channels": True, "group": 4, "nbuf": 1}, (level, item, one)
            two = _plan(level, item, 512, 4608, 64, 7, 7, 9, 2)
            assert two == {"by_channels": True, "group": 4, "nbuf": 2}, (level, item, two)


def test_conv2d_direct_plan_keeps_strided_tiles_to_images_an_l2_holds():
    """Regression: a 1x1 stride-2 layer on 56 x 56 x 256 (3.2 MB an image) took the channel
    tiles, whose strided pixels scatter over the image, and ran 1.55x slower than im2col's
    panels (27 -> 42 ms). A strided layer takes them only where a padded image fits 2 MiB;
    at stride 1 a buffer holds only as many images as fit."""
    for level in _compiled_direct_levels():
        assert not _plan(level, 4, 512, 256, 16, 28, 28, 56, 1, 2, 256 * 56 * 56)["by_channels"]
        assert _plan(level, 4, 1024, 512, 16, 14, 14, 28, 1, 2, 512 * 28 * 28)["by_channels"]
        assert _plan(level, 4, 256, 1152, 16, 14, 14, 30, 1, 2, 128 * 30 * 30)["by_channels"]
        # float64: 7 x 7 x 512 is 332 kB an image (4 to a buffer); 5 x 5 x 2048, 802 kB (2)
        assert _plan(level, 8, 512, 4608, 64, 7, 7, 9, 1, 1, 512 * 81)["group"] == 4
        assert _plan(level, 8, 512, 4608, 64, 5, 5, 7, 1, 1, 2048 * 49)["group"] == 2


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grad_weight_of_stacked_images_skips_the_rows_between_them(dtype):
    """The weight gradient stacks small images in one buffer (panel_gemm.h ms_pg_wgroup),
    the columns of a pass running image by image. The rows between two images' outputs
    are skipped, never multiplied by gt's zeros: an inf in an image's last row (pad 0)
    reaches only the taps that read it, as in the column-matrix path; numpy the oracle,
    and image by image (a buffer of one, the sums carried in dw) the same values. 9 x 9
    images with pad 1 stack 4 to a pass: 6 images make a partial last pass, and the
    chunks of 128 columns cross from one image into the next; 1, 2 and 7 threads (which
    split the taps) give the same bits."""
    from mshadow.dot import _blas
    from mshadow.testing import simd_levels
    _direct_levels()
    rng = np.random.default_rng(16)
    for (N, C, H, W, K), pad in (((5, 2, 5, 4, 3), 0), ((6, 3, 9, 9, 20), 1)):
        G = _blas().conv_direct_wgroup(N, H + 2 * pad, W + 2 * pad)
        assert 1 < G and (N % G == 0) == (pad == 0), (G, N)
        x = rng.random((N, C, H, W)).astype(dtype)
        x[1, 0, H - 1, 1] = np.inf
        oh, ow = H + 2 * pad - 2, W + 2 * pad - 2
        g = rng.random((N, K, oh, ow)).astype(dtype)
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        want = np.einsum("nkyx,ncyxij->kcij", g.astype(np.float64), win)
        assert not np.isfinite(want).all() and np.isfinite(want).any()
        for level in simd_levels():
            ms.set_simd_level(level)
            first = None
            for threads in (1, 2, 7):
                ms.set_num_threads(threads)
                got = ms.new_tensor((K, C, 3, 3), dtype=dtype)
                ms.nn.conv2d_grad_weight(got, ms.from_numpy(x), ms.from_numpy(g), pad, 1)
                assert (np.isfinite(got.numpy()) == np.isfinite(want)).all(), (level, threads)
                np.testing.assert_allclose(got.numpy(), want, rtol=2e-5)
                if first is None:
                    first = got.numpy().tobytes()
                elif level in ("avx2", "avx512"):
                    assert got.numpy().tobytes() == first, (level, threads)
            ms.set_num_threads(1)
            one = ms.new_tensor((K, C, 3, 3), dtype=dtype, init=0)
            for n in range(N):
                ms.nn.conv2d_grad_weight(one, ms.from_numpy(x[n:n + 1]),
                                         ms.from_numpy(g[n:n + 1]), pad, 1, "plusto")
            finite = np.isfinite(want)
            np.testing.assert_allclose(one.numpy()[finite], got.numpy()[finite], rtol=2e-5)
