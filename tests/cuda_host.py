"""Host SIMT harness: runs the kernels mshadow/cuda/lower.py emits on the CPU, over numpy
arrays and CPU tensors in place.

The emulated device's compiler does the work (mshadow/cuda/emulate.py: the emitted CUDA C
compiled by g++ under mshadow/cuda/include/host_shim.h, a block's threads an OpenMP team,
blocks one after another, flags as the CPU core's, its libraries cached in memory and on
disk); this module binds a kernel's parameters by name (lower.Binding) to host arrays and
calls the library's launcher, which unlike Function.launch takes any host address.
"""
import ctypes

import numpy as np

from mshadow.cuda import emulate
from mshadow.cuda import lower
from mshadow.cuda.lower import VIEW_MAXDIM
from mshadow.dtypes import BY_CODE

CXX = emulate.compiler()


class View(ctypes.Structure):
    """ms_cu_view: a view's row map (lower.py), passed by value."""
    _fields_ = [("nmap", ctypes.c_longlong), ("colstep", ctypes.c_longlong),
                ("mdiv", ctypes.c_longlong * VIEW_MAXDIM), ("mmod", ctypes.c_longlong * VIEW_MAXDIM),
                ("mstride", ctypes.c_longlong * VIEW_MAXDIM)]



def view_map(vl):
    """A ViewLeaf's map as _stages.pxi _bind_view_at binds it, strides in elements."""
    isz = vl.itemsize
    nmap, colstep, mdiv, mmod, mstride = lower.view_map(vl.shape, [s // isz for s in vl.strides])
    m = View(nmap=nmap, colstep=colstep)
    for a in range(VIEW_MAXDIM):
        m.mdiv[a], m.mmod[a], m.mstride[a] = mdiv[a], mmod[a], mstride[a]
    return m


def build(kernels):
    """The emulate.HostLibrary running every kernel of ``kernels`` (lower.Emitted): their
    sources in one translation unit, compiled once per distinct text."""
    uniq = list({k.name: k for k in kernels}.values())
    return emulate.build_library("\n".join(k.source for k in uniq))


def _rows(a):
    """(2-D view, pitch in elements) of an array whose last axis is contiguous."""
    a2 = a.reshape(-1, a.shape[-1]) if a.ndim != 2 else a
    assert a2.strides[-1] == a2.itemsize and np.shares_memory(a2, a)
    return a2, a2.strides[0] // a2.itemsize


def run(lib, k, dst, leaves, scalars, grid=(3, 2), block=8, extra=None):
    """Run kernel ``k`` over numpy ``dst`` (written in place) with the expression's leaves
    (Tensors or numpy arrays, ViewLeafs, GatherArgs, in binding order) and the scalar values
    ``scalars``, as a launcher binds them (lower.Binding); ``extra``: the values of the
    kernel's other parameters by name (a reduction's nout, nred, ...). Returns the kernel's
    index flag (ms_err: 1 when a gather met an index out of range), 0 when it takes none."""
    d2, dpitch = _rows(dst)
    assert len(leaves) == len(k.binding.leaves) and len(scalars) == len(k.binding.scalars)
    named = {}
    keep = []
    for i, (obj, b) in enumerate(zip(leaves, k.binding.leaves)):
        if b.kind == "tensor":
            arr = np.asarray(obj)
            assert arr.dtype == BY_CODE[b.code].np
            if hasattr(obj, "stride"):   # a Tensor: its own row pitch (any shape)
                named[f"L{i}"], named[f"L{i}_pitch"] = arr.ctypes.data, obj.stride
            else:
                a2, pitch = _rows(arr)
                named[f"L{i}"], named[f"L{i}_pitch"] = a2.ctypes.data, pitch
            keep.append(arr)
        elif b.kind == "view":
            arr = obj.numpy()
            named[f"L{i}"], named[f"L{i}_map"] = arr.ctypes.data, view_map(obj)
            keep.append(arr)
        else:   # a GatherArgs: its parameters by name, each source's 1-D flag
            assert obj.name == b.detail, (obj.name, b.detail)
            from mshadow.readers import READERS_BY_NAME
            for p, v in zip(READERS_BY_NAME[b.detail].params, obj.params):
                named[f"L{i}_{p}"] = v
            for j, shape in enumerate(obj.src_shapes):
                named[f"L{i}_vec{j}"] = int(len(shape) == 1)
    vals = [np.asarray(v).astype(BY_CODE[store].np).astype(BY_CODE[comp].np).item()
            for v, (store, comp) in zip(scalars, k.binding.scalars)]
    named.update({f"s{i}": v for i, v in enumerate(vals)})
    err = ctypes.c_int(0)
    named.update({"rows": d2.shape[0], "cols": d2.shape[1], "dst": d2.ctypes.data,
                  "dst_pitch": dpitch, "ms_err": ctypes.addressof(err)})
    named.update(extra or {})
    args = [emulate.as_arg(t, named[name]) for name, t in k.binding.params]
    assert lib.run(k.name, (grid[0], grid[1], 1), (block, 1, 1), args) == 0
    return err.value
