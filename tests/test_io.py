"""save_binary / load_binary (byte layout of C++ mshadow, corrupt input) and the .npz save / load."""
import io
import os

import numpy as np
import pytest

import mshadow as ms
from mshadow.dtypes import ALL_DTYPES

EXACT_2x3 = bytes.fromhex("02000000 03000000 00000000 0000803f 00000040 00004040 00008040 0000a040")


def _tensor(shape, dtype=ms.float32, pad=False):
    t = ms.new_tensor(shape, init=0, pad=pad, dtype=dtype)
    t.numpy()[...] = (np.arange(t.size()) % 100).reshape(shape)
    return t


def _saved(t, **kw):
    buf = io.BytesIO()
    ms.save_binary(buf, t, **kw)
    return buf.getvalue()


class OnlyReadWrite:
    """A stream with nothing but read/write (mshadow's IStream): no seek, tell or readinto."""

    def __init__(self, data=b""):
        self._buf = io.BytesIO(data)

    def read(self, n):
        return self._buf.read(min(n, 3))      # short reads, as a pipe may give

    def write(self, b):
        return self._buf.write(b)


def test_exact_bytes_of_mshadow_example():
    t = ms.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert _saved(t) == EXACT_2x3
    assert EXACT_2x3 == bytes.fromhex("02000000 03000000") + np.arange(6, dtype=np.float32).tobytes()


def test_padding_is_not_written():
    p = _tensor((2, 3), pad=True)
    assert p.stride > 3
    assert _saved(p) == EXACT_2x3


def test_int64_index_option():
    data = _saved(_tensor((2, 3)), index_dtype=np.int64)
    assert data[:16] == np.array([2, 3], np.int64).tobytes() and data[16:] == EXACT_2x3[8:]
    t = ms.load_binary(io.BytesIO(data), 2, index_dtype=ms.int64)
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    with pytest.raises(ms.DTypeError, match="index_dtype"):
        ms.load_binary(io.BytesIO(data), 2, index_dtype=np.int16)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 1, 3), (0, 4)], ids=str)
@pytest.mark.parametrize("pad", [False, True])
def test_round_trip_every_dtype(dtype, shape, pad):
    t = _tensor(shape, dtype, pad)
    data = _saved(t)
    assert len(data) == 4 * len(shape) + t.size() * dtype.itemsize
    u = ms.load_binary(io.BytesIO(data), len(shape), dtype=dtype)
    assert u.shape == shape and u.dtype == dtype and u.check_contiguous()
    np.testing.assert_array_equal(u.numpy(), t.numpy())
    out = ms.new_tensor(shape, init=0, pad=True, dtype=dtype)
    assert ms.load_binary(io.BytesIO(data), len(shape), out=out) is out
    np.testing.assert_array_equal(out.numpy(), t.numpy())


def test_paths_and_numpy_arrays(tmp_path):
    path = tmp_path / "w.bin"
    ms.save_binary(path, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert path.read_bytes() == EXACT_2x3
    np.testing.assert_array_equal(ms.load_binary(str(path), 2).numpy(),
                                  np.arange(6).reshape(2, 3))


def test_several_tensors_in_one_stream():
    buf = io.BytesIO()
    ms.save_binary(buf, _tensor((2, 3)))
    ms.save_binary(buf, _tensor((4,), ms.int8))
    buf.seek(0)
    assert ms.load_binary(buf, 2).shape == (2, 3)
    assert ms.load_binary(buf, 1, dtype=ms.int8).numpy().tolist() == [0, 1, 2, 3]
    assert buf.read() == b""


def test_stream_with_only_read_and_write():
    s = OnlyReadWrite()
    ms.save_binary(s, _tensor((2, 3)))
    assert s._buf.getvalue() == EXACT_2x3
    t = ms.load_binary(OnlyReadWrite(EXACT_2x3), 2)
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    with pytest.raises(ms.FormatError, match="unexpected end of stream"):
        ms.load_binary(OnlyReadWrite(EXACT_2x3[:-1]), 2)


@pytest.mark.parametrize("make_stream", [io.BytesIO, OnlyReadWrite], ids=["seekable", "pipe"])
def test_truncation_at_every_offset_leaves_out_untouched(make_stream):
    before = np.full((2, 3), -7, np.float32)
    out = ms.new_tensor((2, 3), init=-7, pad=True)
    for cut in range(len(EXACT_2x3)):
        with pytest.raises(ms.FormatError):
            ms.load_binary(make_stream(EXACT_2x3[:cut]), 2, out=out)
        np.testing.assert_array_equal(out.numpy(), before)
        with pytest.raises(ms.FormatError):
            ms.load_binary(make_stream(EXACT_2x3[:cut]), 2)


def test_huge_header_refused_before_allocating():
    # (2**31-1)^2 float32 elements: 16 EiB that the 8-byte file cannot back
    header = np.array([2 ** 31 - 1, 2 ** 31 - 1], np.int32).tobytes()
    with pytest.raises(ms.FormatError, match="holds only 0"):
        ms.load_binary(io.BytesIO(header), 2)
    # without a length to check, it reads what is there and stops at the end
    with pytest.raises(ms.FormatError, match="unexpected end of stream after 0"):
        ms.load_binary(OnlyReadWrite(header), 2)


def test_negative_dimension_is_corrupt():
    data = np.array([2, -3], np.int32).tobytes()
    with pytest.raises(ms.FormatError, match="negative dimension"):
        ms.load_binary(io.BytesIO(data), 2)


def test_out_shape_mismatch_leaves_out_untouched():
    out = ms.new_tensor((2, 4), init=5)
    with pytest.raises(ms.ShapeError,
                       match=r"^LoadBinary, shape do not match pre-allocated shape"):
        ms.load_binary(io.BytesIO(EXACT_2x3), 2, out=out)
    assert (out.numpy() == 5).all()


def test_out_argument_checks():
    out = ms.new_tensor((2, 3), init=0)
    with pytest.raises(ms.DTypeError):
        ms.load_binary(io.BytesIO(EXACT_2x3), 2, dtype=ms.float64, out=out)
    with pytest.raises(ms.ShapeError, match="ndim"):
        ms.load_binary(io.BytesIO(EXACT_2x3), 3, out=out)
    with pytest.raises(TypeError):
        ms.load_binary(io.BytesIO(EXACT_2x3), 2, out=np.zeros((2, 3), np.float32))
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ms.load_binary(io.BytesIO(EXACT_2x3), 2, out=ms.from_numpy(ro))
    with pytest.raises(ms.ShapeError):
        ms.load_binary(io.BytesIO(EXACT_2x3), 0)
    with pytest.raises(ms.DeviceError):
        ms.load_binary(io.BytesIO(EXACT_2x3), 2, device=ms.gpu)


def test_container_save_load_resizes():
    src = ms.TensorContainer((3, 5), dtype=ms.float64)
    src.numpy()[...] = np.arange(15).reshape(3, 5)
    buf = io.BytesIO()
    src.save_binary(buf)
    assert len(buf.getvalue()) == 8 + 15 * 8
    dst = ms.TensorContainer((1, 1), dtype=ms.float64)
    buf.seek(0)
    dst.LoadBinary(buf)
    assert dst.shape == (3, 5)
    np.testing.assert_array_equal(dst.numpy(), np.arange(15).reshape(3, 5))


def test_container_untouched_by_corrupt_file():
    c = ms.TensorContainer((2, 2), init=4)
    with pytest.raises(ms.FormatError):
        c.load_binary(io.BytesIO(EXACT_2x3[:-2]))
    assert c.shape == (2, 2) and (c.numpy() == 4).all()


def test_save_refuses_gpu_and_oversized_dims():
    buf = io.BytesIO()
    with pytest.raises(ms.ShapeError, match="index_dtype=int64"):
        ms.save_binary(buf, ms.new_tensor((0, 2 ** 31)))
    assert buf.getvalue() == b""                  # checked before the first byte
    ms.save_binary(buf, ms.new_tensor((0, 2 ** 31)), index_dtype=np.int64)
    assert buf.getvalue() == np.array([0, 2 ** 31], np.int64).tobytes()
    with pytest.raises(ms.DeviceError):
        ms.save_binary(io.BytesIO(), ms.Tensor((2, 2), device=ms.gpu))


# ---- self-describing .npz -------------------------------------------------------------------

def test_npz_round_trip(tmp_path):
    tensors = {"w": _tensor((3, 5), pad=True), "b": _tensor((5,), ms.int64),
               "file": _tensor((2, 2, 2), ms.float16), "raw": np.arange(4, dtype=np.uint8)}
    path = tmp_path / "model.npz"
    ms.save(path, tensors)
    back = ms.load(path)
    assert list(back) == list(tensors)
    for name, t in tensors.items():
        assert isinstance(back[name], ms.Tensor) and back[name].device is ms.cpu
        assert back[name].dtype == np.asarray(t).dtype
        np.testing.assert_array_equal(back[name].numpy(), np.asarray(t))
    with np.load(path) as plain:                  # a standard .npz any numpy reads
        np.testing.assert_array_equal(plain["w"], tensors["w"].numpy())


def test_npz_errors(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        ms.save(io.BytesIO(), {"__mshadow__": _tensor((2,))})
    with pytest.raises(TypeError):
        ms.save(io.BytesIO(), {3: _tensor((2,))})
    for junk in (b"", b"not a zip at all", EXACT_2x3):
        with pytest.raises(ms.FormatError):
            ms.load(io.BytesIO(junk))
    single = io.BytesIO()
    np.save(single, np.zeros(3))
    single.seek(0)
    with pytest.raises(ms.FormatError, match="npz"):
        ms.load(single)
    good = io.BytesIO()
    ms.save(good, {"w": _tensor((64, 64))})
    with pytest.raises(ms.FormatError):
        ms.load(io.BytesIO(good.getvalue()[: len(good.getvalue()) // 2]))
    scalar = io.BytesIO()
    np.savez(scalar, s=np.float32(1))
    scalar.seek(0)
    with pytest.raises(ms.FormatError, match="0-d"):
        ms.load(scalar)
    bad_meta = io.BytesIO()
    np.savez(bad_meta, w=np.zeros(2, np.float32), __mshadow__=np.array("{not json"))
    bad_meta.seek(0)
    with pytest.raises(ms.FormatError):
        ms.load(bad_meta)
    assert os.path.exists(tmp_path)
