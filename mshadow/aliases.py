"""The C++ spellings of the public API, in one table, so code ported from mshadow reads the same.

Free functions are bound here; method spellings live in their class bodies (Tensor is a
compiled type that cannot take attributes later) and are listed in METHOD_ALIASES so that
one grep finds every C++ name and the tests can check each one.
"""
from . import _core, device, shape

_TABLE = {
    "NewTensor": _core.new_tensor,
    "AllocSpace": _core.alloc_space,
    "FreeSpace": _core.free_space,
    "Copy": _core.copy,
    "NewStream": device.new_stream,
    "DeleteStream": device.delete_stream,
    "InitTensorEngine": device.init_tensor_engine,
    "ShutdownTensorEngine": device.shutdown_tensor_engine,
    "SetDevice": device.set_device,
    "ConvertLayout": shape.convert_layout,
}

# (class, C++ name, Python name): the method spellings defined in the class bodies.
METHOD_ALIASES = (
    (shape.Shape, "Size", "size"),
    (shape.Shape, "ProdShape", "prod_shape"),
    (shape.Shape, "FlatTo1D", "flat_to_1d"),
    (shape.Shape, "FlatTo2D", "flat_to_2d"),
    (shape.Shape, "SubShape", "sub_shape"),
    (shape.Shape, "Slice", "slice"),
    (_core.Tensor, "Size", "size"),
    (_core.Tensor, "MSize", "msize"),
    (_core.Tensor, "MemSize", "mem_size"),
    (_core.Tensor, "CheckContiguous", "check_contiguous"),
    (_core.Tensor, "FlatTo1D", "flat_to_1d"),
    (_core.Tensor, "FlatTo2D", "flat_to_2d"),
    (_core.Tensor, "Slice", "slice"),
    (_core.TensorContainer, "Resize", "resize"),
    (_core.TensorContainer, "Release", "release"),
    (_core.TensorContainer, "SaveBinary", "save_binary"),
    (_core.TensorContainer, "LoadBinary", "load_binary"),
    (device.Stream, "Wait", "wait"),
    (device.Stream, "CheckIdle", "check_idle"),
)

globals().update(_TABLE)
__all__ = list(_TABLE)
