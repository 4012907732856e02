"""Binary save/load byte-compatible with C++ mshadow (io.h), and a self-describing .npz container.

mshadow's layout: the shape as ``ndim`` native-endian ``index_t`` values, then the elements row by row.
"""
import contextlib
import os

import numpy as np

from .errors import DTypeError, FormatError, ShapeError

# Read in pieces of this size when the stream's length is unknown, so a corrupt header
# costs at most what the stream really holds, never what the header claims.
_CHUNK = 1 << 20


def _index_dtype(index_dtype):
    """index_t: int32 by default, int64 for files from MSHADOW_INT64_TENSOR_SIZE=1 builds."""
    dt = np.dtype(np.int32 if index_dtype is None else index_dtype)
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise DTypeError(f"index_dtype must be int32 or int64 (mshadow's index_t), got {dt}")
    return dt


@contextlib.contextmanager
def _opened(file, mode):
    """Yield a binary stream: ``file`` itself if it has read/write, else the opened path."""
    if hasattr(file, "read" if "r" in mode else "write"):
        yield file
    else:
        with open(os.fspath(file), mode) as f:
            yield f


def _remaining(f):
    """Bytes left in a seekable stream, or None when that cannot be known."""
    try:
        if hasattr(f, "seekable") and not f.seekable():
            return None
        here = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(here)
    except (AttributeError, OSError, ValueError):
        return None
    return None if end is None else end - here


def read_exact(f, nbytes, what):
    """Read exactly ``nbytes`` from ``f`` into a bytearray, or raise FormatError naming ``what``."""
    left = _remaining(f)
    if left is not None and left < nbytes:
        raise FormatError(f"{what}: needs {nbytes} bytes but the stream holds only {left} "
                          f"(truncated or corrupt file)")
    buf = bytearray()
    while len(buf) < nbytes:
        piece = f.read(min(_CHUNK, nbytes - len(buf)))
        if not piece:
            raise FormatError(f"{what}: unexpected end of stream after {len(buf)} of "
                              f"{nbytes} bytes (truncated or corrupt file)")
        buf += piece
    return buf


def write_index(f, values, index_dtype=None):
    """Write ints as native-endian index_t values, refusing any that index_t cannot hold."""
    dt = _index_dtype(index_dtype)
    info = np.iinfo(dt)
    for v in values:
        if not 0 <= v <= info.max:
            raise ShapeError(f"dimension {v} does not fit mshadow's {dt} index_t"
                             + ("; pass index_dtype=int64" if dt == np.int32 else ""))
    f.write(np.asarray(values, dtype=dt).tobytes())


def read_index(f, count, index_dtype=None, what="mshadow::LoadBinary"):
    """Read ``count`` index_t values; a negative one means the bytes are not a shape."""
    dt = _index_dtype(index_dtype)
    if count < 0:
        raise FormatError(f"{what}: negative count {count} (corrupt file)")
    vals = np.frombuffer(read_exact(f, count * dt.itemsize, what), dtype=dt).tolist()
    if any(v < 0 for v in vals):
        raise FormatError(f"{what}: negative dimension in {vals} (corrupt file or wrong index_dtype)")
    return vals
