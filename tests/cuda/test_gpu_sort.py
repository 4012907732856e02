"""nn.sort_by_key and nn.vectorized_sort of gpu tensors (mshadow/cuda/sort.py): a stable LSD
radix sort on the device. Oracle: the CPU's (numpy's stable argsort and lexsort), byte for
byte: NaN last ascending and first descending, -0 and +0 equal (kept in order), ties kept
in order both ways."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.cuda import lower

from gpu_testing import gpu_device, gpu_from  # noqa: F401  (gpu_device: autouse)

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int8, np.uint8, np.int64]


def _keys(rng, dtype, n):
    k = rng.integers(-5, 5, n).astype(dtype) if dtype != np.uint8 else \
        rng.integers(0, 250, n).astype(dtype)
    if np.dtype(dtype).kind == "f":
        k[::7] = np.nan
        k[1::11] = -0.0
        k[2::13] = np.inf
        k[3::17] = -np.inf
        k[4::19] = -np.float32(np.nan)          # a NaN with its sign bit set: still last
    return k


def _bytes_equal(g, c):
    return g.to_numpy().tobytes() == c.numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 256, 300, 3001])      # one tile, tiles, a partial tile
def test_sort_by_key_gives_the_cpu_bytes(dtype, n):
    rng = np.random.default_rng(n)
    k = _keys(rng, dtype, n)
    v = np.arange(n, dtype=np.float64) * 1.5
    for ascend in (True, False):
        kc, vc = ms.from_numpy(k.copy()), ms.from_numpy(v.copy())
        ms.nn.sort_by_key(kc, vc, ascend)
        kg, vg = gpu_from(k), gpu_from(v)
        ms.nn.sort_by_key(kg, vg, ascend)
        assert _bytes_equal(kg, kc) and _bytes_equal(vg, vc), ascend
    # the oracle's own check: ascending numpy order, ties by position
    order = np.argsort(k, kind="stable")
    kc, vc = ms.from_numpy(k.copy()), ms.from_numpy(v.copy())
    ms.nn.sort_by_key(kc, vc)
    np.testing.assert_array_equal(vc.numpy(), v[order])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_vectorized_sort_gives_the_cpu_bytes(dtype):
    rng = np.random.default_rng(1)
    n = 700
    v = _keys(rng, dtype, n)
    seg = rng.integers(0, 5, n).astype(np.int32)
    a, b = ms.from_numpy(v.copy()), ms.from_numpy(seg.copy())
    ms.nn.vectorized_sort(a, b)
    c, d = gpu_from(v), gpu_from(seg)
    ms.nn.vectorized_sort(c, d)
    assert _bytes_equal(c, a) and _bytes_equal(d, b)
    idx = np.lexsort((v, seg))
    np.testing.assert_array_equal(d.to_numpy(), seg[idx])


def test_keys_that_are_the_values_and_a_stream():
    k = np.array([3, 1, 2, 1, 0], np.float32)
    t = gpu_from(k)
    ms.nn.sort_by_key(t, t, False)
    np.testing.assert_array_equal(t.to_numpy(), [3, 2, 1, 1, 0])
    s = ms.Stream(ms.gpu)
    kk = ms.new_tensor((5,), 0, dtype=np.float32, device=ms.gpu, stream=s)
    ms.copy(kk, ms.from_numpy(k), s)
    vv = gpu_from(np.arange(5, dtype=np.int32))
    ms.nn.sort_by_key(kk, vv)
    s.wait()
    np.testing.assert_array_equal(vv.to_numpy(), [4, 1, 3, 2, 0])
    ms.delete_stream(s)
    e = ms.new_tensor((0,), 0, device=ms.gpu)
    ms.nn.sort_by_key(e, e)


def test_errors_store_nothing():
    k, v = gpu_from(np.array([2, 1, 0], np.float32)), gpu_from(np.array([0, 1], np.float32))
    with pytest.raises(ms.ShapeError, match="The sizes of key/value are not equal!"):
        ms.nn.sort_by_key(k, v)
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.nn.sort_by_key(k, ms.from_numpy(np.zeros(3, np.float32)))
    with pytest.raises(ms.ShapeError, match="1-D"):
        ms.nn.vectorized_sort(gpu_from(np.zeros((2, 3), np.float32)), k)
    np.testing.assert_array_equal(k.to_numpy(), [2, 1, 0])


def test_the_passes_and_what_the_emitter_refuses():
    assert [lower.sort_passes(c) for c in ("f32", "f64", "f16", "i8", "u8", "i32", "i64")] == \
        [4, 8, 2, 1, 1, 4, 8]
    with pytest.raises(ValueError, match="no order"):
        lower.emit_sort_keys("c64", False)


@pytest.mark.parametrize("block, dups", [(96, False), (7, True), (1, True)])
def test_a_device_with_small_blocks_sorts_the_same(monkeypatch, block, dups):
    """Blocks smaller than a tile (a device's max_block under SORT_TILE and SORT_SCAN_BLOCK):
    each thread takes several of the tile's elements, and the scan's runs are longer; under
    SORT_SEGMENTS threads, fewer and longer runs of a tile are walked. ``dups``: keys of 3
    values, so every digit of a tile is shared by many elements across runs (the ranks'
    stability)."""
    from mshadow.cuda import executor, launch, sort
    rng = np.random.default_rng(7)
    k = (rng.integers(0, 3, 1500).astype(np.float32) if dups
         else _keys(rng, np.float32, 1500))
    v = np.arange(1500, dtype=np.int32)
    kc, vc = ms.from_numpy(k.copy()), ms.from_numpy(v.copy())
    ms.nn.sort_by_key(kc, vc, False)
    if dups:     # (the CPU against numpy: ties keep their order descending too)
        np.testing.assert_array_equal(vc.numpy(), np.argsort(-k, kind="stable"))
    limits, arch = executor._facts(executor._driver())
    small = launch.Limits(limits.max_grid_x, limits.max_grid_y, block, limits.sm_count)
    monkeypatch.setattr(sort, "_facts", lambda drv: (small, arch))
    kg, vg = gpu_from(k), gpu_from(v)
    ms.nn.sort_by_key(kg, vg, False)
    assert _bytes_equal(kg, kc) and _bytes_equal(vg, vc)


def test_a_scan_of_many_chunks(monkeypatch):
    """The counts' scan over several chunks (a small SORT_SCAN_CHUNK: the chunks' sums, their
    scan, each chunk from its offset), a partial last chunk included."""
    from mshadow.cuda import lower
    monkeypatch.setattr(lower, "SORT_SCAN_CHUNK", 700)
    k = _keys(np.random.default_rng(8), np.int32, 2100)     # 9 tiles: 2304 counts, 4 chunks
    v = np.arange(2100, dtype=np.float32)
    kc, vc = ms.from_numpy(k.copy()), ms.from_numpy(v.copy())
    ms.nn.sort_by_key(kc, vc)
    kg, vg = gpu_from(k), gpu_from(v)
    ms.nn.sort_by_key(kg, vg)
    assert _bytes_equal(kg, kc) and _bytes_equal(vg, vc)
