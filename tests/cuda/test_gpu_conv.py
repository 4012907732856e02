"""nn.conv2d, conv2d_grad_weight and conv2d_grad_data of gpu tensors (mshadow/cuda/conv.py):
the column matrix of a chunk of images by the im2col / col2im kernels, the products by
cuBLAS. Oracle: numpy in float64 (test_conv2d's), to cuBLAS's rounding; chunked runs
against whole ones; overlaps against the value of the sources before the call."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.cuda import conv
from mshadow.errors import DTypeError, ShapeError

from gpu_testing import gpu_device, gpu_from  # noqa: F401  (gpu_device: autouse)
from test_conv2d import CASES, _ref_cols, _ref_grad_data, _tol

FLOATS = [np.float32, np.float64]
# test_conv2d's cases but its first (64 channels, for the CPU's panels: 27 s a dtype on the
# emulated device, whose kernels run a thread at a time)
GPU_CASES = CASES[1:]
SAVERS = [("saveto", 0, 1), ("plusto", 1, 1), ("minusto", 1, -1)]   # (saver, beta, sign)


def _data(rng, case, dtype):
    (N, C, H, W), (K, kh, kw), pad, stride = case
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((K, C, kh, kw)).astype(dtype)
    cols = _ref_cols(x, kh, kw, pad, stride)                   # (C*kh*kw, N*oh*ow)
    py, px = (pad, pad) if isinstance(pad, int) else pad
    oh, ow = (H + 2 * py - kh) // stride + 1, (W + 2 * px - kw) // stride + 1
    return x, w, cols, (N, K, oh, ow)


def _conv_ref(w, cols, oshape):
    N, K, oh, ow = oshape
    return (w.reshape(K, -1).astype(np.float64) @ cols).reshape(K, N, oh, ow).transpose(
        1, 0, 2, 3)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", GPU_CASES)
def test_conv2d_and_its_gradients_against_numpy(case, dtype):
    rng = np.random.default_rng(3)
    x, w, cols, oshape = _data(rng, case, dtype)
    pad, stride = case[2], case[3]
    g = rng.standard_normal(oshape).astype(dtype)
    y0, w0, x0 = (rng.standard_normal(s).astype(dtype) for s in (oshape, w.shape, x.shape))
    N, K = oshape[:2]
    want_y = _conv_ref(w, cols, oshape)
    want_w = (g.transpose(1, 0, 2, 3).reshape(K, -1).astype(np.float64) @ cols.T).reshape(
        w.shape)
    want_x = _ref_grad_data(g, w, x.shape, pad, stride)
    for saver, beta, sign in SAVERS:
        y = gpu_from(y0, pad=False)
        ms.nn.conv2d(y, gpu_from(x), gpu_from(w, pad=False), pad, stride, saver)
        np.testing.assert_allclose(y.to_numpy(), beta * y0 + sign * want_y, **_tol(dtype))
        dw = gpu_from(w0, pad=False)
        ms.nn.conv2d_grad_weight(dw, gpu_from(x), gpu_from(g, pad=False), pad, stride, saver)
        np.testing.assert_allclose(dw.to_numpy(), beta * w0 + sign * want_w, **_tol(dtype))
        dx = gpu_from(x0)                        # pitched: the col2im kernel stores it
        ms.nn.conv2d_grad_data(dx, gpu_from(g, pad=False), gpu_from(w, pad=False), pad,
                               stride, saver)
        np.testing.assert_allclose(dx.to_numpy(), beta * x0 + sign * want_x, **_tol(dtype))


@pytest.mark.parametrize("column_bytes", [1, 2 * 27 * 42 * 8])
def test_chunks_of_images_give_the_whole_batch(monkeypatch, column_bytes):
    """A chunk of one image, and chunks of a few (the last one short), against one chunk:
    the forward pass and the data gradient are products an image, so the same bits; the
    weight gradient is one product a chunk (its depth the chunk's images), so the same sum
    in another order."""
    rng = np.random.default_rng(4)
    case = ((5, 3, 6, 7), (4, 3, 3), 1, 1)
    x, w, cols, oshape = _data(rng, case, np.float64)
    g = rng.standard_normal(oshape)
    runs = []
    for limit in (conv.COLUMN_BYTES, column_bytes):
        monkeypatch.setattr(conv, "COLUMN_BYTES", limit)
        assert len(conv._chunks(5, 27 * 42 * 8)) == (1 if limit > 1e6 else 5 if limit == 1
                                                     else 3)
        y, dw, dx = (ms.new_tensor(s, np.nan, dtype=np.float64, device=ms.gpu)
                      for s in (oshape, w.shape, x.shape))
        ms.nn.conv2d(y, gpu_from(x), gpu_from(w, pad=False), 1, 1)
        ms.nn.conv2d_grad_weight(dw, gpu_from(x), gpu_from(g, pad=False), 1, 1)
        ms.nn.conv2d_grad_data(dx, gpu_from(g, pad=False), gpu_from(w, pad=False), 1, 1)
        runs.append([t.to_numpy() for t in (y, dw, dx)])
    for k in (0, 2):
        assert runs[0][k].tobytes() == runs[1][k].tobytes()
    np.testing.assert_allclose(runs[1][1], runs[0][1], rtol=1e-12, atol=1e-12)
    want_dw = np.einsum("nkp,ncp->kc", g.reshape(5, 4, -1),
                        cols.reshape(27, 5, -1).transpose(1, 0, 2)).reshape(w.shape)
    np.testing.assert_allclose(runs[1][1], want_dw, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(runs[1][0], _conv_ref(w, cols, oshape), rtol=1e-11, atol=1e-11)


def test_data_as_an_expression_and_on_a_stream():
    rng = np.random.default_rng(5)
    case = ((2, 3, 5, 6), (2, 3, 3), 1, 1)
    x, w, _, oshape = _data(rng, case, np.float32)
    xr = np.maximum(x * 2 - 0.5, 0)
    cols = _ref_cols(xr, 3, 3, 1, 1)
    s = ms.Stream(ms.gpu)
    y = ms.new_tensor(oshape, np.nan, device=ms.gpu, stream=s)
    xg = gpu_from(x)
    ms.nn.conv2d(y, ms.F(ms.op.relu, xg * 2 - 0.5), gpu_from(w, pad=False), 1, 1)
    s.wait()
    np.testing.assert_allclose(y.to_numpy(), _conv_ref(w, cols, oshape), **_tol(np.float32))
    dw = ms.new_tensor(w.shape, np.nan, device=ms.gpu, stream=s)
    g = rng.standard_normal(oshape).astype(np.float32)
    ms.nn.conv2d_grad_weight(dw, ms.F(ms.op.relu, xg * 2 - 0.5), gpu_from(g, pad=False), 1, 1)
    want = (g.transpose(1, 0, 2, 3).reshape(2, -1).astype(np.float64) @ cols.T).reshape(w.shape)
    np.testing.assert_allclose(dw.to_numpy(), want, **_tol(np.float32))
    ms.delete_stream(s)


def test_a_destination_over_its_sources_reads_them_as_they_were():
    """out is the data (a 1x1 convolution in place), and out is the weight: each source is
    read as it was before the call, whatever the chunks."""
    x = np.arange(1, 2 * 3 * 4 * 5 + 1, dtype=np.float64).reshape(2, 3, 4, 5)
    w = np.arange(9, dtype=np.float64).reshape(3, 3, 1, 1) - 4
    t = gpu_from(x, pad=False)
    ms.nn.conv2d(t, t, gpu_from(w, pad=False), 0, 1, "plusto")
    want = x + np.einsum("kc,nchw->nkhw", w[:, :, 0, 0], x)
    np.testing.assert_array_equal(t.to_numpy(), want)
    one = gpu_from(np.full((1, 1, 1, 1), 3.0), pad=False)
    ms.nn.conv2d(one, gpu_from(np.full((1, 1, 1, 1), 2.0)), one, 0, 1, "minusto")
    np.testing.assert_array_equal(one.to_numpy(), [[[[3.0 - 6.0]]]])
    dw = gpu_from(np.ones((1, 1, 1, 1)), pad=False)          # dweight is the data
    ms.nn.conv2d_grad_weight(dw, dw, gpu_from(np.full((1, 1, 1, 1), 5.0), pad=False), 0, 1,
                             "plusto")
    np.testing.assert_array_equal(dw.to_numpy(), [[[[6.0]]]])


def test_an_empty_batch():
    dw = gpu_from(np.ones((2, 3, 3, 3)), pad=False)
    x, g = (ms.new_tensor(s, 0, dtype=np.float64, device=ms.gpu)
            for s in ((0, 3, 5, 5), (0, 2, 3, 3)))
    ms.nn.conv2d_grad_weight(dw, x, g, 0, 1, "plusto")
    np.testing.assert_array_equal(dw.to_numpy(), 1)
    ms.nn.conv2d_grad_weight(dw, x, g, 0, 1)
    np.testing.assert_array_equal(dw.to_numpy(), 0)
    y = ms.new_tensor((0, 2, 3, 3), 0, dtype=np.float64, device=ms.gpu)
    ms.nn.conv2d(y, x, dw, 0, 1)
    ms.nn.conv2d_grad_data(x, g, dw, 0, 1)


def test_errors_store_nothing():
    x = gpu_from(np.ones((1, 2, 4, 4), np.float32))
    w = gpu_from(np.ones((3, 2, 3, 3), np.float32), pad=False)
    y = gpu_from(np.full((1, 3, 2, 2), 7, np.float32), pad=False)
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.conv2d(y, ms.from_numpy(np.ones((1, 2, 4, 4), np.float32)), w)
    cpu_y = ms.new_tensor((1, 3, 2, 2), 7, dtype=np.float32)
    with pytest.raises(ms.DeviceError, match="conv2d: data: tensors of different devices"):
        ms.nn.conv2d(cpu_y, x, ms.from_numpy(np.ones((3, 2, 3, 3), np.float32)))
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.conv2d_grad_weight(ms.new_tensor((3, 2, 3, 3), 7, dtype=np.float32), x, y)
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.conv2d(y, x, ms.from_numpy(np.ones((3, 2, 3, 3), np.float32)))
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.conv2d_grad_data(ms.new_tensor((1, 2, 4, 4), 0, dtype=np.float32), y, w)
    pitched = gpu_from(np.zeros((1, 3, 2, 65), np.float32))
    assert not pitched.check_contiguous()
    with pytest.raises(ShapeError, match="dense"):
        ms.nn.conv2d(pitched, gpu_from(np.ones((1, 2, 4, 67), np.float32)), w)
    with pytest.raises(ShapeError):
        ms.nn.conv2d(y, x, w, pad=1)
    with pytest.raises(DTypeError, match="cuBLAS multiplies float32 and float64, got float16"):
        ms.nn.conv2d(gpu_from(np.zeros((1, 3, 2, 2), np.float16), pad=False),
                     gpu_from(np.ones((1, 2, 4, 4), np.float16)),
                     gpu_from(np.ones((3, 2, 3, 3), np.float16), pad=False))
    np.testing.assert_array_equal(y.to_numpy(), 7)
    np.testing.assert_array_equal(cpu_y.numpy(), 7)
