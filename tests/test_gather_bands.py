"""Gathers over an expression evaluate it band by band into cache-sized scratch (the
readers table's src_rows), never into a temporary of its size: checked against numpy, with
the schedule the lowering chose (its stages), the scratch a run took (the per-thread
arena), aliasing, nesting, threads and the paths that evaluate it whole."""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import mshadow as ms


def ref_pool(a, k, s, red=np.max):
    w = sliding_window_view(a, (k, k), axis=(-2, -1))[..., ::s, ::s, :, :]
    return red(w, axis=(-2, -1))


def _x(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _source_rows(shape):
    return int(np.prod(shape[:-1]))


def _banded(e, dtype=None):
    """The source positions of the top gather that the lowering evaluates band by band."""
    dst = ms.new_tensor(e.shape, dtype=e.dtype if dtype is None else dtype)
    return [st.pos for st in ms.plan_for(dst, e).program.stages if st.schedule != "whole"]


def _scratch_bytes(run):
    """The largest scratch ``run()`` took for a stage (this thread's arena keeps it)."""
    ms._core.release_scratch()
    run()
    held = ms._core.scratch_held()
    return max(held) if held else 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_of_an_expression_runs_in_bands(dtype):
    x = _x((16, 16, 64, 64), dtype=dtype)
    X = ms.from_numpy(x)
    e = ms.pool(ms.F(ms.op.relu, X * 2), 3, 3, 2, 2)
    y = ms.new_tensor(e.shape, dtype=dtype)
    held = _scratch_bytes(lambda: y.__setitem__(slice(None), e))
    np.testing.assert_array_equal(y.numpy(), ref_pool(np.maximum(x * 2, 0), 3, 2))
    assert _banded(e) == [0]
    # the scratch holds one band's source rows: at most 2**18 elements, not the source's 2**20
    itemsize = np.dtype(dtype).itemsize
    assert 0 < held <= (1 << 18) * itemsize
    assert held < _source_rows(x.shape) * 64 * itemsize // 3
    y[:] = e * 0 + e          # twice in one plan, and again: the same values
    np.testing.assert_array_equal(y.numpy(), ref_pool(np.maximum(x * 2, 0), 3, 2))


def test_nested_bands_pool_of_pad_of_an_expression():
    x = _x((4, 8, 90, 70), 1)
    X = ms.from_numpy(x)
    e = ms.pool(ms.pad(ms.F(ms.op.tanh, X) + 1, 2, 1), 2, 2, 2, 2, ms.red.sum)
    y = ms.new_tensor(e.shape)
    y[:] = e
    p = np.pad(np.tanh(x.astype(np.float64)) + 1, ((0, 0), (0, 0), (2, 2), (1, 1)))
    np.testing.assert_allclose(y.numpy(), ref_pool(p, 2, 2, np.sum), rtol=1e-5, atol=1e-5)


def test_upsample_chpool_and_complex_of_expressions():
    x = _x((3, 6, 40, 50), 2)
    X = ms.from_numpy(x)
    up = ms.new_tensor((3, 6, 120, 150))
    up[:] = ms.upsampling_nearest(X - 1, 3)
    np.testing.assert_array_equal(up.numpy(), np.repeat(np.repeat(x - 1, 3, 2), 3, 3))
    ch = ms.new_tensor((3, 6, 40, 50))
    ch[:] = ms.chpool(X * 3, 3, ms.red.maximum)
    xp = np.pad(x * 3, ((0, 0), (1, 1), (0, 0), (0, 0)), constant_values=-np.inf)
    np.testing.assert_array_equal(ch.numpy(), np.max([xp[:, k:k + 6] for k in range(3)], 0))
    c = _x((300, 64), 3)
    C = ms.from_numpy(c)
    out = ms.new_tensor((300, 64))
    out[:] = ms.conj(C * 2)
    z = (c * 2).view(np.complex64)
    np.testing.assert_array_equal(out.numpy().view(np.complex64), np.conj(z))


def test_a_band_reading_the_destination_goes_through_a_temporary():
    x = _x((2, 4, 128, 128), 4)
    X = ms.from_numpy(x.copy())
    X[:] = ms.crop(ms.pad(X * 2, 1), (128, 128))           # every band reads X
    np.testing.assert_array_equal(X.numpy(), x * 2)
    Y = ms.from_numpy(x.copy())
    Y[:] = ms.upsampling_nearest(ms.pool(Y + 1, 2, 2, 2, 2), 2)
    want = np.repeat(np.repeat(ref_pool(x + 1, 2, 2), 2, 2), 2, 3)
    np.testing.assert_array_equal(Y.numpy(), want)


def test_bands_do_not_depend_on_the_thread_count():
    x = _x((8, 16, 64, 64), 5)
    X = ms.from_numpy(x)
    old = ms.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            ms.set_num_threads(n)
            y = ms.new_tensor((8, 16, 32, 32))
            y[:] = ms.pool(ms.F(ms.op.exp, X * 0.5), 2, 2, 2, 2, ms.red.sum) * 0.25
            results.append(y.numpy().tobytes())
    finally:
        ms.set_num_threads(old)
    assert results[0] == results[1]


def test_reductions_and_view_targets_evaluate_a_banded_source_whole():
    x = _x((4, 8, 32, 32), 6)
    X = ms.from_numpy(x)
    pooled = ref_pool(np.maximum(x, 0), 2, 2)
    np.testing.assert_allclose(ms.sum(ms.pool(ms.F(ms.op.relu, X), 2, 2, 2, 2)),
                               pooled.sum(), rtol=1e-5)
    s = ms.new_tensor((8,))
    s[:] = ms.sumall_except_dim(ms.pool(ms.F(ms.op.relu, X), 2, 2, 2, 2), 1)
    np.testing.assert_allclose(s.numpy(), pooled.sum((0, 2, 3)), rtol=1e-5)
    t = ms.new_tensor((4, 8, 16, 40), init=0)
    ms.slice_axis(t, 3, 4, 20)[:] = ms.pool(ms.F(ms.op.relu, X), 2, 2, 2, 2)
    np.testing.assert_array_equal(t.numpy()[..., 4:20], pooled)
    assert not t.numpy()[..., :4].any() and not t.numpy()[..., 20:].any()


def test_a_banded_source_freed_meanwhile_raises_before_anything_is_stored():
    x = _x((2, 2, 16, 16), 7)
    X = ms.new_tensor(x.shape)
    X.numpy()[...] = x
    e = ms.pool(X * 2, 2, 2, 2, 2)
    ms.free_space(X)
    y = ms.new_tensor(e.shape, init=5)
    with pytest.raises(ms.FreedTensorError):
        y[:] = e
    assert (y.numpy() == 5).all()


def test_fill_row_of_an_expression_runs_in_bands():
    x = _x((3000, 200))
    X = ms.from_numpy(x)
    idx = np.random.default_rng(2).integers(0, 200, 3000).astype(np.float32)
    val = np.arange(3000, dtype=np.float32)
    e = ms.mat_fill_row_element(ms.F(ms.op.tanh, X) * 2, ms.from_numpy(val), ms.from_numpy(idx))
    y = ms.new_tensor(e.shape)
    held = _scratch_bytes(lambda: y.__setitem__(slice(None), e))
    want = (np.tanh(x) * 2).astype(np.float32)
    want[np.arange(3000), idx.astype(int)] = val
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)
    assert _banded(e) == [0]
    assert held < 3000 * 200 * 4 // 2


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_concat_of_two_expressions_bands_both_parts(dim):
    rng = np.random.default_rng(dim)
    a = rng.standard_normal((24, 3, 120, 80)).astype(np.float32)
    shape_b = list(a.shape)
    shape_b[dim] = 5
    b = rng.standard_normal(shape_b).astype(np.float32)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    e = ms.concat(ms.F(ms.op.relu, A * 2), B - 1, dim)
    y = ms.new_tensor(e.shape)
    held = _scratch_bytes(lambda: y.__setitem__(slice(None), e))
    np.testing.assert_array_equal(y.numpy(), np.concatenate([np.maximum(a * 2, 0), b - 1], dim))
    assert _banded(e) == [0, 1]
    assert held < a.size * 4 // 2
    # as a source of a windowed reader, bands nest: pool(concat(...)) reads each part a band
    # at a time too
    p = ms.pool(e, 2, 2, 2, 2, ms.red.sum)
    z = ms.new_tensor(p.shape)
    z[:] = p
    c = np.concatenate([np.maximum(a * 2, 0), b - 1], dim).astype(np.float64)
    H, W = c.shape[2] // 2 * 2, c.shape[3] // 2 * 2
    want = c[:, :, :H, :W].reshape(c.shape[0], c.shape[1], H // 2, 2, W // 2, 2).sum((3, 5))
    np.testing.assert_allclose(z.numpy(), want, rtol=1e-5, atol=1e-5)


def test_concat_reads_a_view_part_in_place():
    a = _x((30, 20), 3)
    A = ms.from_numpy(a)
    e = ms.concat(ms.flip(A, 0), ms.broadcast(A[0], (7, 20), 1), 0)
    y = ms.new_tensor(e.shape)
    y[:] = e
    np.testing.assert_array_equal(y.numpy(), np.concatenate([a[::-1], np.tile(a[0], (7, 1))]))
    assert sum(isinstance(s, ms._core.ViewLeaf) for s in e.leaves) == 2
    assert ms.plan_for(y, e).program.stages == []


def test_unpool_and_ch_unpool_band_every_expression_source():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 4, 64, 48)).astype(np.float32)
    g = rng.standard_normal((6, 4, 32, 24)).astype(np.float32)
    X, G = ms.from_numpy(x), ms.from_numpy(g)
    e = ms.unpool(X * 1, ms.pool(X * 1, 2, 2, 2, 2), G * 2, 2, 2, 2, 2)
    y = ms.new_tensor(x.shape)
    y[:] = e
    assert _banded(e) == [0, 1, 2]
    # the oracle: each window's maxima get that window's gradient (no ties in random data)
    w = x.reshape(6, 4, 32, 2, 24, 2)
    m = w.max((3, 5), keepdims=True)
    want = ((w == m) * (g * 2)[:, :, :, None, :, None]).reshape(x.shape)
    np.testing.assert_array_equal(y.numpy(), want)

    c = ms.chpool(X * 1, 3, ms.red.maximum)
    e = ms.ch_unpool(X * 1, c, X * 2, 3, ms.red.maximum)
    y2 = ms.new_tensor(x.shape)
    y2[:] = e
    assert _banded(e) == [0, 1, 2]
    pc, g2 = ms.new_tensor(x.shape), ms.new_tensor(x.shape)
    pc[:] = ms.chpool(X, 3, ms.red.maximum)
    g2[:] = X * 2
    y3 = ms.new_tensor(x.shape)
    y3[:] = ms.ch_unpool(X, pc, g2, 3, ms.red.maximum)      # the same from tensors
    np.testing.assert_array_equal(y2.numpy(), y3.numpy())


def test_a_binary_complex_op_bands_both_operands():
    a, b = _x((500, 64), 5), _x((500, 64), 6)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    e = ms.complex_mul_cc(A + 1, B * 2)
    y = ms.new_tensor(e.shape)
    y[:] = e
    ca = (a + 1)[:, 0::2] + 1j * (a + 1)[:, 1::2]
    cb = (b * 2)[:, 0::2] + 1j * (b * 2)[:, 1::2]
    want = np.empty_like(a)
    want[:, 0::2], want[:, 1::2] = (ca * cb).real, (ca * cb).imag
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    assert _banded(e) == [0, 1]


@pytest.mark.parametrize("geom", [(2, 3, 9, 8, 3, 3, 1, 1, 1, 1), (3, 2, 11, 10, 3, 2, 2, 3, 1, 2),
                                  (1, 4, 7, 7, 2, 2, 2, 2, 2, 1), (2, 3, 5, 6, 5, 6, 1, 1, 1, 1),
                                  (6, 16, 40, 30, 3, 3, 1, 1, 1, 1)])
def test_col2im_of_an_expression_reads_boxes_of_its_columns(geom):
    N, C, H, W, ky, kx, sy, sx, dy, dx = geom
    oh, ow = (H - (dy * (ky - 1) + 1)) // sy + 1, (W - (dx * (kx - 1) + 1)) // sx + 1
    rng = np.random.default_rng(7)
    m = rng.standard_normal((C * ky * kx, N * oh * ow)).astype(np.float32)
    m2 = rng.standard_normal(m.shape).astype(np.float32)
    M, M2 = ms.from_numpy(m), ms.from_numpy(m2)
    src = np.tanh(m) * 2 - m2
    # the oracle: every column entry added to the pixel unpack_patch2col reads it from
    want = np.zeros((N, C, H, W), np.float64)
    for c in range(C):
        for a in range(ky):
            for b in range(kx):
                row = src[(c * ky + a) * kx + b].reshape(N, oh, ow)
                want[:, c, a * dy:a * dy + sy * (oh - 1) + 1:sy,
                     b * dx:b * dx + sx * (ow - 1) + 1:sx] += row
    for threads in (1, 2):
        ms.set_num_threads(threads)
        try:
            e = ms.pack_col2patch(ms.F(ms.op.tanh, M) * 2 - M2, (N, C, H, W), ky, kx, sy, sx,
                                  dy, dx)
            y = ms.new_tensor((N, C, H, W))
            held = _scratch_bytes(lambda: y.__setitem__(slice(None), e))
        finally:
            ms.set_num_threads(2)
        np.testing.assert_allclose(y.numpy(), want, rtol=2e-5, atol=2e-5)
        assert _banded(e) == [0]
    if m.size > 1 << 18:   # the box of a band: never the whole source
        assert held < m.size * 4 // 2


def test_unpool_with_a_smaller_pooled_shape_bands_the_rows_it_reads():
    # regression: a band that starts late in one image read the next image's first pooled
    # rows from before its scratch (the window's first pooled row was not capped at pH)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 61, 1024)).astype(np.float32)
    g = rng.standard_normal((2, 4, 2, 2)).astype(np.float32)
    X, G = ms.from_numpy(x), ms.from_numpy(g)
    pooled = ms.pool(X * 1, 5, 5, 2, 2, pshape=(2, 2))
    got = ms.new_tensor(x.shape)
    got[:] = ms.unpool(X * 1, pooled, G * 1, 5, 5, 2, 2)
    P = ms.new_tensor(pooled.shape)
    P[:] = pooled
    want = ms.new_tensor(x.shape)
    want[:] = ms.unpool(X, P, G, 5, 5, 2, 2)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_banded_source_at_two_levels_is_evaluated_whole():
    # regression: a + pool(a) with a banded: the nested band re-cut a's scratch while the
    # outer level read it as its own band
    x = _x((4, 4, 300, 256), 9)
    X = ms.from_numpy(x)
    a = ms.pool(ms.F(ms.op.relu, X), 1, 1, 1, 1, ms.red.sum)
    e = a + ms.pool(a, 1, 1, 2, 1, ms.red.sum, pshape=(300, 256))
    r = np.maximum(x, 0)
    want = r.copy()
    want[:, :, :150] += r[:, :, ::2]
    got = ms.new_tensor(e.shape)
    got[:] = e
    np.testing.assert_array_equal(got.numpy(), want)
    got[:] = 0
    got += e * 1                 # through the same expression again, another saver
    np.testing.assert_array_equal(got.numpy(), want)
    s = ms.new_tensor((4,))      # and under a fused reduction
    s[:] = ms.sumall_except_dim(e, 0)
    np.testing.assert_allclose(s.numpy(), want.astype(np.float64).sum((1, 2, 3)), rtol=1e-5)


def test_threads_assigning_one_banded_expression_get_its_values():
    import threading
    x = _x((8, 8, 128, 128), 10)
    X = ms.from_numpy(x)
    e = ms.pool(ms.F(ms.op.relu, X * 2), 2, 2, 2, 2)
    want = ref_pool(np.maximum(x * 2, 0), 2, 2)
    errors = []

    def work():
        y = ms.new_tensor(e.shape)
        for _ in range(6):
            y[:] = 0
            y[:] = e
            if not np.array_equal(y.numpy(), want):
                errors.append("wrong values")
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_arg_reduction_of_a_view_of_a_gather_over_many_chunks(monkeypatch):
    from mshadow.extension import reduce as red_mod
    monkeypatch.setattr(red_mod, "CHUNK_ELEMS", 3000)
    x = _x((40, 30, 20), 11)
    X = ms.from_numpy(x)
    e = ms.reduce_with_axis(ms.flip(ms.pad(X * 1, 1), 0) * 2, 2, ms.red.maximum, True)
    y = ms.new_tensor(e.shape)
    y[:] = e
    p = np.pad(x, ((0, 0), (1, 1), (1, 1)))[::-1] * 2
    np.testing.assert_array_equal(y.numpy(), np.argmax(p, 2).astype(np.float32))
