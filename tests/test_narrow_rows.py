"""Narrow rows: a program whose rows are at most half a block runs several whole rows a block
(plan_exec.h ms_rows_per_block): a gather fills them in one call, another kernel takes them
in one call when its operands' rows follow one another, else a call a row. Each case mixes
gathers with element-wise operands that are contiguous, pitched or transposed, into
contiguous and pitched destinations, over row counts that end in a partial block."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import padded, tensor as T

ROWS = [1, 3, 37, 300]            # with widths 1-9: one block, several, a partial last one


def _dst(shape, dtype, pitched, init):
    d = ms.new_tensor(shape, dtype=dtype, pad=pitched)
    d.numpy()[...] = init
    return d


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-9, 10, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("pitched", [False, True], ids=["dense", "pitched"])
def test_pool_plus_operands(dtype, rows, pitched):
    for W in (2, 4, 9, 14):
        x = _data((rows, 4, W), dtype, rows + W)
        oh, ow = 2, W // 2
        c = _data((rows, oh, ow), dtype, 1)
        want = x[:, :4, :2 * ow].reshape(rows, 2, 2, ow, 2).max(axis=(2, 4)) * 2 + c
        for src in (T(x), padded(x)):
            for cc in (T(c), padded(c)):
                d = _dst((rows, oh, ow), dtype, pitched, 5)
                d[:] = ms.pool(src, 2, 2, 2, 2) * 2 + cc
                np.testing.assert_array_equal(d.numpy(), want)
                d += ms.pool(src, 2, 2, 2, 2)                   # a saver reading dst
                np.testing.assert_array_equal(
                    d.numpy(), want + x[:, :4, :2 * ow].reshape(rows, 2, 2, ow, 2).max(axis=(2, 4)))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("pitched", [False, True], ids=["dense", "pitched"])
def test_concat_and_transposed_operands(dtype, rows, pitched):
    for wa, wb in ((1, 2), (3, 4), (2, 7)):
        a, b = _data((rows, wa), dtype, 2), _data((rows, wb), dtype, 3)
        t = _data((wa + wb, rows), dtype, 4)                       # read transposed
        want = np.concatenate((a, b), 1) - t.T * 3
        for sa, sb in ((T(a), T(b)), (padded(a), padded(b))):
            d = _dst((rows, wa + wb), dtype, pitched, 0)
            d[:] = ms.concat(sa, sb, 1) - T(t).T * 3
            np.testing.assert_array_equal(d.numpy(), want)
        a4, b4 = _data((rows, 2, 3, wa), dtype, 5), _data((rows, 1, 3, wa), dtype, 6)
        d = _dst((rows, 3, 3, wa), dtype, pitched, 0)
        d[:] = ms.concat(T(a4), padded(b4), 1) + 1                # a leading axis
        np.testing.assert_array_equal(d.numpy(), np.concatenate((a4, b4), 1) + 1)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("pitched", [False, True], ids=["dense", "pitched"])
def test_take_pad_and_index_errors(rows, pitched):
    m = _data((50, 5), np.float32, 7)
    idx = np.random.default_rng(rows).integers(0, 50, rows).astype(np.float32)
    d = _dst((rows, 5), np.float32, pitched, 0)
    d[:] = ms.take(T(idx), T(m)) * 2 + ms.take(T(idx), padded(m))
    np.testing.assert_array_equal(d.numpy(), m[idx.astype(int)] * 3)
    x = _data((rows, 3, 2), np.float32, 8)
    d2 = _dst((rows, 5, 4), np.float32, pitched, 0)
    d2[:] = ms.pad(padded(x), 1) - 1
    np.testing.assert_array_equal(d2.numpy(), np.pad(x, ((0, 0), (1, 1), (1, 1))) - 1)
    bad = idx.copy()
    bad[-1] = 50                                           # the last row of the last block
    d3 = _dst((rows, 5), np.float32, pitched, -7)
    with pytest.raises(IndexError):
        d3[:] = ms.take(T(bad), T(m)) + 1
    assert (d3.numpy() == -7).all()                        # nothing stored


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("pitched", [False, True], ids=["dense", "pitched"])
def test_concat_alone_copies_runs_of_rows_bit_for_bit(threads, pitched):
    """A concat assigned alone writes straight into the destination, a run of whole rows
    of one source a copy: runs end at each group's boundary, at each call's last row and
    at a partial last call (26,000 narrow rows: several calls a thread). float16 NaN
    payloads and signed zeros come back bit for bit (a copy, not a conversion)."""
    rng = np.random.default_rng(11)
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        for n, ca, cb, w in ((1, 1, 2, 3), (4, 3, 5, 7), (500, 3, 2, 13), (10, 1, 1, 1)):
            a = rng.integers(0, 2**16, (n, ca, 2, w)).astype(np.uint16).view(np.float16)
            b = rng.integers(0, 2**16, (n, cb, 2, w)).astype(np.uint16).view(np.float16)
            want = np.concatenate((a, b), 1)
            for sa, sb in ((T(a), T(b)), (padded(a), T(b)), (T(a), padded(b))):
                d = _dst(want.shape, np.float16, pitched, 0)
                d[:] = ms.concat(sa, sb, 1)
                np.testing.assert_array_equal(d.numpy().view(np.uint16), want.view(np.uint16))
            a2 = rng.standard_normal((n * 3, w)).astype(np.float32)
            b2 = rng.standard_normal((n * 3, w + 2)).astype(np.float32)
            d = _dst((n * 3, 2 * w + 2), np.float32, pitched, 0)
            d[:] = ms.concat(T(a2), padded(b2), 1)               # along columns
            np.testing.assert_array_equal(d.numpy(), np.concatenate((a2, b2), 1))
    finally:
        ms.set_num_threads(old)


@pytest.mark.parametrize("threads", [2, 8])
def test_gathers_split_among_many_threads(threads):
    """With more threads a gather's kernel calls get smaller (at least 4 a thread), down to
    parts of a row: take's row copies, concat's runs and pad's zeros stay exact."""
    rng = np.random.default_rng(12)
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        m = rng.standard_normal((40, 5000)).astype(np.float32)
        idx = rng.integers(0, 40, 12).astype(np.float32)
        d = _dst((12, 5000), np.float32, True, 0)
        d[:] = ms.take(T(idx), padded(m))
        np.testing.assert_array_equal(d.numpy(), m[idx.astype(int)])
        a, b = m[:, :3001], rng.standard_normal((40, 7)).astype(np.float32)
        d2 = _dst((40, 3008), np.float32, False, 0)
        d2[:] = ms.concat(T(np.ascontiguousarray(a)), T(b), 1)
        np.testing.assert_array_equal(d2.numpy(), np.concatenate((a, b), 1))
        x = rng.standard_normal((6, 30, 700)).astype(np.float32)
        d3 = _dst((6, 32, 706), np.float32, True, 0)
        d3[:] = ms.pad(T(x), 1, 3)
        np.testing.assert_array_equal(d3.numpy(), np.pad(x, ((0, 0), (1, 1), (3, 3))))
    finally:
        ms.set_num_threads(old)
