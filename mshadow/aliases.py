"""The C++ spellings of the public API, in one table, so code ported from mshadow reads the same."""
from . import _core, device, shape

_TABLE = {
    "NewTensor": _core.new_tensor,
    "AllocSpace": _core.alloc_space,
    "FreeSpace": _core.free_space,
    "Copy": _core.copy,
    "NewStream": device.new_stream,
    "DeleteStream": device.delete_stream,
    "ConvertLayout": shape.convert_layout,
}

globals().update(_TABLE)
__all__ = list(_TABLE)
