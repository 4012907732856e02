"""Host SIMT harness: runs the kernels mshadow/cuda/lower.py emits on the CPU.

The emitted CUDA C is compiled as C++ by the system g++ under mshadow/cuda/include/host_shim.h (a
block's threads are an OpenMP team, blocks run one after another) into a shared library,
one per set of sources, cached by the hash of its text under the temporary directory; each
kernel gets a launcher ``run_<name>(grid_x, grid_y, block_x, <kernel parameters>)`` that
ctypes calls with numpy buffers. Flags as the CPU core's: -O2 -ffp-contract=off -fwrapv.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

import mshadow.cuda
from mshadow.cuda.lower import VIEW_MAXDIM
from mshadow.dtypes import BY_CODE

SHIM = os.path.join(os.path.dirname(os.path.abspath(mshadow.cuda.__file__)), "include",
                    "host_shim.h")
CXX = shutil.which("g++")
FLAGS = ("-x", "c++", "-std=gnu++17", "-O2", "-ffp-contract=off", "-fwrapv",
         "-fno-strict-aliasing", "-fopenmp", "-shared", "-fPIC", "-w")
_CACHE = os.path.join(tempfile.gettempdir(), f"mshadow-cuda-host-{os.getuid()}")
_CTYPES = {"long long": ctypes.c_longlong, "float": ctypes.c_float,
           "double": ctypes.c_double, "uint8_t": ctypes.c_uint8, "int8_t": ctypes.c_int8,
           "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64}
_libs = {}


class View(ctypes.Structure):
    """ms_cu_view: a view's row map (lower.py), passed by value."""
    _fields_ = [("nmap", ctypes.c_longlong), ("colstep", ctypes.c_longlong),
                ("mdiv", ctypes.c_longlong * VIEW_MAXDIM), ("mmod", ctypes.c_longlong * VIEW_MAXDIM),
                ("mstride", ctypes.c_longlong * VIEW_MAXDIM)]


_CTYPES["ms_cu_view"] = View
_CTYPES["int"] = ctypes.c_int


def view_map(vl):
    """A ViewLeaf's map as _stages.pxi _bind_view_at binds it, strides in elements."""
    isz = vl.itemsize
    shape, strides = tuple(vl.shape), [s // isz for s in vl.strides]
    m = View(colstep=strides[-1])
    if len(shape) == 1:
        m.nmap, m.mdiv[0], m.mmod[0], m.mstride[0] = 1, 1, 1, 0
        return m
    m.nmap, div = len(shape) - 1, 1
    for a in range(len(shape) - 2, -1, -1):
        m.mdiv[a], m.mmod[a], m.mstride[a] = div, shape[a], strides[a]
        div *= shape[a]
    return m


def _launcher(k):
    params = ", ".join(f"{t}{'' if t.endswith('*') else ' '}{n}" for n, t in k.binding.params)
    names = ", ".join(n for n, _ in k.binding.params)
    return (f'extern "C" void run_{k.name}(unsigned gx, unsigned gy, unsigned bx, {params}) {{\n'
            f"  ms_host_launch(dim3(gx, gy), dim3(bx), [&] {{ {k.name}({names}); }});\n}}\n")


def build(kernels):
    """A ctypes library running every kernel of ``kernels`` (lower.Emitted), compiled once
    per distinct text (memory and disk cache)."""
    uniq = list({k.name: k for k in kernels}.values())
    with open(SHIM) as f:
        shim = f.read()
    text = (shim + "\n" + "\n".join(k.source for k in uniq) + "\n"
            + "\n".join(_launcher(k) for k in uniq))
    key = hashlib.sha256((text + " ".join(FLAGS)).encode()).hexdigest()[:24]
    lib = _libs.get(key)
    if lib is not None:
        return lib
    os.makedirs(_CACHE, exist_ok=True)
    so = os.path.join(_CACHE, key + ".so")
    if not os.path.exists(so):
        tmp = f"{so}.{os.getpid()}.tmp"
        r = subprocess.run([CXX, *FLAGS, "-o", tmp, "-"], input=text, text=True,
                           capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"g++ failed on the emitted source:\n{r.stderr[:4000]}")
        os.replace(tmp, so)   # atomic: a concurrent run sees a whole library or none
    lib = _libs[key] = ctypes.CDLL(so)
    return lib


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
    args = [named[name] for name, _ in k.binding.params]
    fn = getattr(lib, f"run_{k.name}")
    fn.restype = None
    fn.argtypes = [ctypes.c_uint] * 3 + [ctypes.c_void_p if t.endswith("*") else _CTYPES[t]
                                         for _, t in k.binding.params]
    fn(grid[0], grid[1], block, *args)
    return err.value
