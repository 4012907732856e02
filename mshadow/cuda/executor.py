"""The GPU executor: ``dst <saver> value`` into an ``ms.gpu`` tensor, as one kernel that the
CUDA lowering (mshadow/cuda/lower.py) emits from the value's IR node.

Design:
    engine.assign hands a gpu destination here with the value's IR node, leaves and scalars,
    checked as for the CPU (shape, dtype). Owns: the GPU plan of a structure (GpuPlan: the
    emitted kernel's Function and Binding), made once per (node, dst dtype, saver) and kept
    in the engine's one plan cache under the device ``gpu``; compiling goes through the
    process KernelCache (memory and disk, cache.py) and the driver in use (``driver()``: the
    real device or the emulated one). A run checks every leaf is a live gpu tensor (or a view
    of one), range-checks index sources on the host (a copy of the index: nothing is stored
    when one is out of range, as on the CPU), binds each leaf's device address and row pitch
    and each scalar (rounded to its storage type, passed as its compute type), and launches
    over launch.elementwise's grid on the destination's stream (the default stream when it
    has none). A destination that a leaf reads at other positions than written, or a view
    leaf, goes through a temporary on the device first.
    Never: reads device memory from the host but for an index check; imports the CPU lowering.
"""
from collections import namedtuple

import numpy as np

from .. import _core
from ..device import check_devices, gpu
from ..dtypes import BY_CODE, CODE_BY_FLAG
from ..errors import DeviceError
from . import cache, launch, lower

# ``convs``: per kernel parameter (its Binding name, the numpy scalar type the launch takes)
GpuPlan = namedtuple("GpuPlan", "function binding name convs")


def _driver():
    from . import driver
    return driver()


_DEVICE_FACTS = {}     # driver module name -> (launch.Limits, arch) of its device 0


def _facts(drv):
    got = _DEVICE_FACTS.get(drv.__name__)
    if got is None:
        a = drv.device_attributes(0)
        major, minor = a["compute_capability"]
        got = _DEVICE_FACTS[drv.__name__] = (
            launch.Limits(a["max_grid_dim"][0], a["max_grid_dim"][1],
                          a["max_threads_per_block"], a["multiprocessor_count"]),
            f"sm_{major}{minor}")
    return got


def plan(node, dst_code, saver):
    """The GpuPlan of a structure, from the engine's plan cache or made now."""
    ck = (node, dst_code, saver, gpu)
    got = _core.cached_plan(ck)
    if got is None:
        drv = _driver()
        k = lower.emit(node, dst_code, saver)
        image = cache.kernel_cache().cubin(k.source, _facts(drv)[1])
        fn = drv.Module(image).get_function(k.name)
        from .emulate import as_arg       # (both drivers' argument forms)
        convs = tuple((n, type(as_arg(t, 0))) for n, t in k.binding.params)
        got = GpuPlan(fn, k.binding, k.name, convs)
        _core.cache_plan(ck, got)
    return got


def _leaf_device(obj):
    src = obj.src if isinstance(obj, _core.ViewLeaf) else obj
    return getattr(src, "device", None)


def assign(dst, node, leaves, scalars, saver):
    """Evaluate ``dst <saver> value`` on the GPU (``node``, ``leaves``, ``scalars``: the
    value's, from engine.checked)."""
    devices = tuple(d for d in (_leaf_device(x) for x in leaves) if d is not None)
    check_devices("Assignment", dst.device, devices, gpu_ok=True)
    if dst.readonly:
        raise ValueError("assignment destination is read-only")
    code = CODE_BY_FLAG[dst.type_flag]
    p = plan(node, code, saver)
    drv = _driver()
    args = _bind(drv, p, dst, leaves, scalars)
    geo = launch.elementwise(*_rows_cols(dst.shape), _facts(drv)[0])
    # no stream: the default one, asynchronous as mshadow's MapExp; a copy to the host
    # waits for it, and freeing GPU memory waits for the device first (_tensor.pxi)
    p.function.launch(geo.grid, geo.block, args)


def _rows_cols(shape):
    """The 2-D flattening: every leading axis a row."""
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows, shape[-1]


def _bind(drv, p, dst, leaves, scalars):
    """The launch's arguments, by the Binding's parameter names."""
    rows, cols = _rows_cols(dst.shape)
    named = {"rows": rows, "cols": cols, "dst": _core.data_address(dst),
             "dst_pitch": dst.stride}
    for i, (obj, b) in enumerate(zip(leaves, p.binding.leaves)):
        if b.kind != "tensor":
            raise DeviceError(f"Assignment: {b.kind} leaves are not evaluated on the GPU yet "
                              f"(a tensor leaf is)")
        named[f"L{i}"] = _core.data_address(obj)
        named[f"L{i}_pitch"] = obj.stride
    for i, (v, (store, comp)) in enumerate(zip(scalars, p.binding.scalars)):
        named[f"s{i}"] = np.asarray(v).astype(BY_CODE[store].np).astype(BY_CODE[comp].np)
    return [conv(named[n]) for n, conv in p.convs]
