"""Binary save/load byte-compatible with C++ mshadow (io.h), and a self-describing .npz container.

mshadow's layout: the shape as ``ndim`` native-endian ``index_t`` values, then the elements row by row.
"""
import contextlib
import json
import operator
import os
import sys
import zipfile

import numpy as np

from . import _core
from .device import as_device, check_devices, cpu
from .dtypes import as_dtype, float32
from .errors import DTypeError, FormatError, ShapeError
from .shape import Shape

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


# ---- mshadow's SaveBinary / LoadBinary ------------------------------------------------

def _host_tensor(tensor, what):
    from ._core import Tensor, from_numpy
    t = tensor if isinstance(tensor, Tensor) else from_numpy(tensor)
    check_devices(what, t.device)
    return t


def save_binary(file, tensor, index_dtype=None):
    """Write ``tensor`` (a Tensor or numpy array) to a path or binary stream as C++ ``SaveBinary``.

    The bytes: the shape as native-endian index_t (int32 unless ``index_dtype=int64``), then
    the elements row by row without pitch padding. Neither ndim nor dtype is stored.
    """
    t = _host_tensor(tensor, "save_binary")
    rows = t.flat_to_2d().numpy()
    with _opened(file, "wb") as f:
        write_index(f, list(t.shape), index_dtype)
        # pieces of whole rows: a padded tensor is packed a few MiB at a time, not all at once
        step = max(1, _CHUNK // max(1, rows.shape[1] * rows.itemsize))
        for r in range(0, rows.shape[0], step):
            f.write(np.ascontiguousarray(rows[r:r + step]).data)


def load_binary(file, ndim, dtype=None, device=cpu, out=None, index_dtype=None):
    """Read a tensor written by ``save_binary`` or C++ ``SaveBinary``; the caller names its
    ``ndim`` and ``dtype`` (float32 by default, or ``out``'s) because the file does not hold them.

    With ``out`` the shapes must agree and the data is copied into it (pitch honoured);
    otherwise a new contiguous tensor is returned. A truncated or corrupt file raises
    FormatError before ``out`` is touched and before a size the file cannot back is allocated.
    """
    from ._core import Tensor, new_tensor, copy, from_numpy
    ndim = operator.index(ndim)
    if ndim < 1:
        raise ShapeError(f"load_binary: ndim must be at least 1, got {ndim}")
    if out is not None:
        if not isinstance(out, Tensor):
            raise TypeError(f"load_binary: out must be a Tensor, got {type(out).__name__}")
        if out.ndim != ndim:
            raise ShapeError(f"load_binary: out has {out.ndim} dims, expected ndim={ndim}")
        if dtype is not None and as_dtype(dtype) != out.dtype:
            raise DTypeError(f"load_binary: dtype {as_dtype(dtype)} does not match out's {out.dtype}")
        if out.readonly:
            raise ValueError("load_binary: out is read-only")
        device = out.device
    dtype = as_dtype(float32 if dtype is None else dtype) if out is None else out.dtype
    check_devices("load_binary", as_device(device))
    with _opened(file, "rb") as f:
        shape = Shape(read_index(f, ndim, index_dtype, "mshadow::LoadBinary: shape"))
        if out is not None and out.shape != shape:
            raise ShapeError(f"LoadBinary, shape do not match pre-allocated shape: "
                             f"file has {shape}, out is {out.shape}")
        # read everything before the first store, so a short file leaves `out` untouched
        raw = read_exact(f, shape.size() * dtype.itemsize, "mshadow::LoadBinary: data")
    data = np.frombuffer(raw, dtype=dtype).reshape(shape)
    dst = out if out is not None else new_tensor(shape, init=None, dtype=dtype)
    copy(dst, from_numpy(data))
    return dst


def load_into_container(file, container, index_dtype=None):
    """``TensorContainer.load_binary``: read a tensor of the container's rank and dtype, then
    resize the container to it; on any error the container is left as it was."""
    from ._core import copy
    t = load_binary(file, container.ndim, container.dtype, index_dtype=index_dtype)
    container.resize(t.shape)
    copy(container, t)


# ---- self-describing container (beyond mshadow) ---------------------------------------

_META = "__mshadow__"   # the one entry that is not a tensor: JSON {name: device}


def save(file, tensors):
    """Write ``{name: tensor}`` to a numpy ``.npz`` file (dtype and shape in each .npy header,
    devices in a JSON entry ``__mshadow__``); ``load`` reads it back."""
    if _META in tensors:
        raise ValueError(f"save: the name {_META!r} is reserved")
    arrays = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"save: tensor names must be str, got {name!r}")
        t = _host_tensor(value, "save")
        arrays[name] = (t.numpy(), t.device.name)
    meta = json.dumps({name: dev for name, (_, dev) in arrays.items()})
    # written like np.savez does, without its keyword-argument names (a tensor may be "file")
    with _opened(file, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        for name, (a, _) in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, a, allow_pickle=False)
        with z.open(_META + ".npy", "w") as member:
            np.lib.format.write_array(member, np.array(meta), allow_pickle=False)


def load(file, device=None):
    """Read a file written by ``save`` (or any ``.npz`` of supported dtypes) into
    ``{name: Tensor}``, on the device each was saved from unless ``device`` is given."""
    from ._core import new_tensor, copy, from_numpy
    with _opened(file, "rb") as f:
        try:
            npz = np.load(f, allow_pickle=False)
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive")
            with npz:
                arrays = {name: npz[name] for name in npz.files}
            devices = json.loads(str(arrays.pop(_META))) if _META in arrays else {}
        except (zipfile.BadZipFile, ValueError, EOFError, KeyError, OSError) as e:
            raise FormatError(f"load: not a readable .npz file ({e})") from e
    out = {}
    for name, a in arrays.items():
        if a.ndim == 0:
            raise FormatError(f"load: entry {name!r} is 0-d; tensors have at least one dimension")
        dev = device if device is not None else devices.get(name, "cpu")
        t = new_tensor(a.shape, init=None, dtype=a.dtype, device=as_device(dev))
        copy(t, from_numpy(a))
        out[name] = t
    return out


_core.install_layer(io=sys.modules[__name__])
