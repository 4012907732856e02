"""The emulated device: mshadow.cuda's driver layer (the Python face of _cuda.pyx) run on the
host, so the GPU path runs where there is no GPU (CI). Selected by ``MSHADOW_CUDA=emulate``.

Design:
    Owns: host memory standing in for device memory (bases BASE_ALIGNMENT-aligned, rows
    pitched and aligned to PITCH_ALIGNMENT as cuMemAllocPitch does on an H100, filled with
    FILL bytes as a GPU's fresh memory holds garbage); the registry of live allocations
    that every pointer a launch or a BLAS call takes is checked against; streams and events
    that run each piece of work at once and in order; kernels compiled by g++ under
    include/host_shim.h into shared libraries (memory and disk cache, LibraryCache);
    launches checked against an H100's limits (DEVICE); cuBLAS's four routines computed by
    numpy on views of the emulated memory, column-major as cuBLAS.

    The API is _cuda's: the same class and function names and signatures, the same argument
    kinds (a Memory or a numpy scalar of the parameter's type; a struct parameter takes an
    np.void of its bytes), and every failure is a CudaError in the driver's, NVRTC's or
    cuBLAS's own words and status (_STATUS). An image (compile_cubin's result) is the CUDA
    source behind an IMAGE_MAGIC header, so a CUBIN given to the emulator, or an emulated
    image given to the real driver, is refused as an invalid image.

    Assumes: kernels in the subset the shim compiles (what mshadow/cuda/lower.py emits),
    each an ``extern "C" __global__ void name(type name, ...)`` whose parameters are plain
    ``type name`` pairs; the launchers are generated from those signatures.

    Never: opens a CUDA library; touches a freed Memory or an address outside every live
    one (a launch's pointer arguments and a BLAS call's whole operands are checked first);
    runs two launches of one library at once (its gridDim, blockDim and __shared__ are
    statics); runs streams concurrently, or times anything (events read the host clock).
    What it does not check: accesses inside a kernel (no memory protection within or past
    an allocation), races between a block's threads, warp-synchronous code that the shim
    does not express.
"""
import atexit
import bisect
import ctypes
import functools
import hashlib
import itertools
import json
import operator
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections import namedtuple

import numpy as np

from ..errors import CudaError, DTypeError, ShapeError
from ._cuda import _dim3, _host_rows
from .cache import default_directory, write_atomic

__all__ = ["available", "is_available", "unavailable_reason", "driver_version",
           "device_count", "device_attributes", "nvrtc_version", "nvrtc_supported_archs",
           "cublas_version", "compile_cubin", "copy_2d", "synchronize", "Memory", "Stream",
           "Event", "elapsed_time",
           "Module", "Function", "BlasHandle", "compiler", "compiler_version", "image_ok",
           "as_arg", "kernel_signatures", "build_library", "library_cache", "HostLibrary",
           "LibraryCache", "DEVICE", "EMULATED", "IMAGE_MAGIC", "BASE_ALIGNMENT",
           "PITCH_ALIGNMENT", "FILL", "SHIM", "FLAGS"]

EMULATED = True             # what mshadow.cuda and its cache test to tell the drivers apart
# An H100 with driver 580 seen: cuMemAllocPitch pitches rows to a multiple of 512 bytes
# whatever element_bytes is (1 -> 512, 513 -> 1024, 5000 -> 5120), and starts them there
BASE_ALIGNMENT = 256        # cuMemAlloc's promise for the start of an allocation
PITCH_ALIGNMENT = 512       # cuMemAllocPitch's row pitch and base alignment
FILL = 0xFF                 # fresh memory: NaN in every float, -1 in every signed integer
DRIVER_VERSION = (12, 0)    # the CUDA API whose behaviour the emulator follows
SUPPORTED_ARCHS = (75, 80, 86, 87, 89, 90, 100, 120)   # what compile_cubin accepts
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include", "host_shim.h")
# the CPU core's floating-point flags (no contraction: --fmad=false's bits)
FLAGS = ("-x", "c++", "-std=gnu++17", "-O2", "-ffp-contract=off", "-fwrapv",
         "-fno-strict-aliasing", "-fopenmp", "-shared", "-fPIC", "-w")
IMAGE_MAGIC = b"/* mshadow emulated CUDA image v1"

# The emulated device: an H100 SXM's limits (cuDeviceGetAttribute's answers), the keys of
# _cuda.device_attributes; total_memory is the host's (device_attributes).
DEVICE = {
    "name": "mshadow emulated device (H100 limits)",
    "compute_capability": (9, 0),
    "max_block_dim": (1024, 1024, 64),
    "max_grid_dim": (2 ** 31 - 1, 65535, 65535),
    "multiprocessor_count": 132,
    "max_threads_per_block": 1024,
    "max_threads_per_multiprocessor": 2048,
    "warp_size": 32,
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory_per_block_optin": 227 * 1024,
    "max_registers_per_block": 65536,
    "total_constant_memory": 64 * 1024,
    "l2_cache_size": 50 * 1024 * 1024,
    "max_pitch": 2 ** 31 - 1,
    "texture_pitch_alignment": 32,
    "pci_bus_id": 0,
    "integrated": 0,
    "unified_addressing": 1,
}

# ---- errors: each status in its library's words (cuda.h, nvrtc.h, cublas_api.h) ------------
_STATUS = {
    "CUDA_ERROR_INVALID_VALUE": (1, "invalid argument"),
    "CUDA_ERROR_OUT_OF_MEMORY": (2, "out of memory"),
    "CUDA_ERROR_INVALID_DEVICE": (101, "invalid device ordinal"),
    "CUDA_ERROR_INVALID_IMAGE": (200, "device kernel image is invalid"),
    "CUDA_ERROR_NO_BINARY_FOR_GPU": (209, "no kernel image is available for execution on "
                                          "the device"),
    "CUDA_ERROR_INVALID_HANDLE": (400, "invalid resource handle"),
    "CUDA_ERROR_NOT_FOUND": (500, "named symbol not found"),
    "CUDA_ERROR_ILLEGAL_ADDRESS": (700, "an illegal memory access was encountered"),
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": (701, "too many resources requested for launch"),
    "NVRTC_ERROR_INVALID_OPTION": (5, None),
    "NVRTC_ERROR_COMPILATION": (6, None),
    "CUBLAS_STATUS_NOT_INITIALIZED": (1, "the library was not initialized"),
    "CUBLAS_STATUS_INVALID_VALUE": (7, "an invalid numeric value was used as an argument"),
    "CUBLAS_STATUS_EXECUTION_FAILED": (13, "the GPU program failed to execute"),
}


def _error(call, name, detail=""):
    """The CudaError _cuda's check functions raise for ``name`` from ``call``, and what the
    emulator saw (``detail``) after it."""
    status, words = _STATUS[name]
    text = f"{call} failed: {name}" + (f" ({words})" if words else "") + f" [{status}]"
    return CudaError(text + (f": {detail}" if detail else ""), status)


def _device(device):
    """The one device's ordinal, 0; another is CUDA_ERROR_INVALID_DEVICE as cuDeviceGet."""
    device = operator.index(device)
    if device != 0:
        raise _error("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE",
                     f"the emulated device is device 0 only, not {device}")
    return device


def _typed(value, cls, what):
    """``value`` when it is a ``cls`` (None too when ``what`` allows it), else TypeError as
    Cython's typed arguments give it."""
    if isinstance(value, cls) or (value is None and what.endswith("=None")):
        return value
    raise TypeError(f"Argument '{what.split('=')[0]}' has incorrect type (expected "
                    f"{cls.__module__}.{cls.__qualname__}, got {type(value).__name__})")


# ---- facts ----------------------------------------------------------------------------------
def available():
    """True: the emulated device is always there (kernels need g++: compile_cubin says so)."""
    return True


is_available = available


def unavailable_reason():
    """None: the emulated device is available."""
    return None


def driver_version():
    """The CUDA version whose driver behaviour the emulator follows, as (major, minor)."""
    return DRIVER_VERSION


def device_count():
    """1: the emulated device."""
    return 1


@functools.lru_cache(maxsize=None)
def _host_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):       # not POSIX: an H100's 80 GB
        return 80 * 2 ** 30


def device_attributes(device=0):
    """The emulated device's limits (DEVICE, an H100's) with the keys of the real driver's
    answer; total_memory is the host's physical memory, what allocations come from."""
    _device(device)
    return dict(DEVICE, total_memory=_host_memory())


def nvrtc_version():
    """Raises CudaError: the emulated device compiles with g++ (compiler_version())."""
    raise CudaError("nvrtcVersion: the emulated device (MSHADOW_CUDA=emulate) has no NVRTC; "
                    f"its compile_cubin runs {compiler_version() or 'g++ (not found)'}")


def nvrtc_supported_archs():
    """The architectures compile_cubin accepts (a device of compute capability 9.0 loads
    sm_90 images only, as the real driver loads a CUBIN of its own major version)."""
    return SUPPORTED_ARCHS


def cublas_version():
    """Raises CudaError: the emulated BlasHandle computes with numpy, not cuBLAS."""
    raise CudaError("cublasGetProperty: the emulated device (MSHADOW_CUDA=emulate) has no "
                    "cuBLAS; its BlasHandle computes with numpy")


# ---- memory ---------------------------------------------------------------------------------
# The live allocations: start address -> (end, weak Memory), starts sorted. The one authority
# on whether an address may be touched; free() leaves it under the same lock.
_LIVE_LOCK = threading.Lock()
_LIVE_STARTS = []
_LIVE = {}


def _forget(start):
    with _LIVE_LOCK:
        if _LIVE.pop(start, None) is not None:
            del _LIVE_STARTS[bisect.bisect_left(_LIVE_STARTS, start)]


def _owner(address, nbytes=1):
    """(Memory, its buffer, offset) of the live allocation holding [address, address +
    nbytes), or None. The buffer returned keeps the bytes alive while the caller uses them,
    whatever another thread frees meanwhile."""
    with _LIVE_LOCK:
        i = bisect.bisect_right(_LIVE_STARTS, address) - 1
        if i < 0:
            return None
        start = _LIVE_STARTS[i]
        end, ref = _LIVE[start]
        mem = ref()
        if mem is None or mem._buf is None or address + max(nbytes, 1) > end:
            return None
        return mem, mem._buf, address - start


class Memory:
    """Emulated device memory: ``Memory(nbytes, device)`` (cuMemAlloc) or
    ``Memory.pitched(width_bytes, height, element_bytes, device)`` (cuMemAllocPitch: each
    row starts at a multiple of ``pitch``). Host bytes, freed by free() or when collected."""

    _buf = None

    def __init__(self, nbytes, device=0):
        if self._buf is not None:
            raise ValueError("Memory is allocated once")
        nbytes = operator.index(nbytes)
        self._allocate("cuMemAlloc", nbytes, 1, nbytes, device)

    @staticmethod
    def pitched(width_bytes, height, element_bytes=4, device=0):
        """Rows of ``width_bytes`` each starting at a multiple of ``pitch``: the width
        rounded up to PITCH_ALIGNMENT (element_bytes: the widest access, 4, 8 or 16)."""
        width_bytes, height = operator.index(width_bytes), operator.index(height)
        if operator.index(element_bytes) not in (4, 8, 16):
            raise _error("cuMemAllocPitch", "CUDA_ERROR_INVALID_VALUE",
                         f"element_bytes is 4, 8 or 16, not {element_bytes}")
        m = Memory.__new__(Memory)
        pitch = -(-width_bytes // PITCH_ALIGNMENT) * PITCH_ALIGNMENT
        m._allocate("cuMemAllocPitch", width_bytes, height, pitch, device, PITCH_ALIGNMENT)
        return m

    def _allocate(self, call, width, height, pitch, device, align=BASE_ALIGNMENT):
        self._device = _device(device)
        nbytes = pitch * height
        if width <= 0 or height <= 0:
            raise _error(call, "CUDA_ERROR_INVALID_VALUE", f"{width} x {height} bytes")
        if nbytes > _host_memory():
            raise _error(call, "CUDA_ERROR_OUT_OF_MEMORY", f"{nbytes} bytes")
        try:
            raw = np.empty(nbytes + align, np.uint8)
        except MemoryError:
            raise _error(call, "CUDA_ERROR_OUT_OF_MEMORY", f"{nbytes} bytes") from None
        skip = -raw.ctypes.data % align
        buf = raw[skip:skip + nbytes]
        buf.fill(FILL)
        self._width, self._height, self._pitch, self._nbytes = width, height, pitch, nbytes
        start = buf.ctypes.data
        with _LIVE_LOCK:
            self._buf = buf
            bisect.insort(_LIVE_STARTS, start)
            _LIVE[start] = (start + nbytes, weakref.ref(self))
        self._release = weakref.finalize(self, _forget, start)

    device = property(lambda self: self._device, doc="The device ordinal (0).")
    nbytes = property(lambda self: self._nbytes, doc="Bytes allocated (pitch * height).")
    pitch = property(lambda self: self._pitch, doc="Bytes from a row to the next.")
    width = property(lambda self: self._width, doc="Bytes a row holds.")
    height = property(lambda self: self._height, doc="Rows (1 for linear memory).")

    @property
    def address(self):
        """The emulated device address (a host address; 0 once freed)."""
        buf = self._buf
        return 0 if buf is None else buf.ctypes.data

    def free(self):
        """Release the memory now (a second call does nothing)."""
        with _LIVE_LOCK:
            buf, self._buf = self._buf, None
        if buf is not None:
            self._release()

    def _bytes(self, call):
        """The live buffer (height x pitch bytes), or CudaError once freed."""
        buf = self._buf
        if buf is None:
            raise _error(call, "CUDA_ERROR_INVALID_VALUE", "the device memory was freed")
        return buf.reshape(self._height, self._pitch)

    def copy_from_host(self, arr, stream=None):
        """Copy a 1-D or 2-D numpy array (rows contiguous) into the first rows."""
        _copy(self, arr, False, stream)

    def copy_to_host(self, arr, stream=None):
        """Copy the first rows into a writable numpy array of that layout."""
        _copy(self, arr, True, stream)

    def __repr__(self):
        return (f"<emulated Memory {self._height} x {self._width} bytes, pitch {self._pitch}"
                f"{'' if self._buf is not None else ', freed'}>")


def _copy(mem, arr, to_host, stream):
    """copy_from_host / copy_to_host: cuMemcpy2D's rules (a linear Memory takes a contiguous
    array as one row; rows and row bytes must fit), through numpy byte views."""
    call = "cuMemcpy2DAsync"
    _live_stream(stream, call)
    dev = mem._bytes(call)
    _, rows, row_bytes, _ = _host_rows(arr, to_host)
    if mem.height == 1 and arr.flags.c_contiguous:
        rows, row_bytes = 1, arr.nbytes                     # linear memory: one row
    if rows > mem.height or row_bytes > mem.width:
        raise ShapeError(f"{rows} rows of {row_bytes} bytes do not fit the device memory's "
                         f"{mem.height} rows of {mem.width} bytes")
    if arr.size == 0:
        return
    host = arr.reshape(rows, -1).view(np.uint8)
    if to_host:
        host[...] = dev[:rows, :row_bytes]
    else:
        dev[:rows, :row_bytes] = host


def _side(call, address, pitch, width, height, device, what):
    """A 2-D copy's side as a (height, pitch)-strided uint8 numpy view of its bytes (rows of
    ``width``), with what keeps them alive: device memory checked whole against the live
    allocations (CUDA_ERROR_INVALID_VALUE outside them), host memory taken as given."""
    span = (height - 1) * pitch + width
    if not device:
        buf = (ctypes.c_uint8 * span).from_address(address)
        return np.lib.stride_tricks.as_strided(np.frombuffer(buf, np.uint8), (height, width),
                                               (pitch, 1)), buf
    got = _owner(address, span)
    if got is None:
        raise _error(call, "CUDA_ERROR_INVALID_VALUE",
                     f"the {what} rows [{address:#x}, +{span}) are not in one live allocation")
    _, buf, off = got
    return np.lib.stride_tricks.as_strided(buf[off:], (height, width), (pitch, 1)), buf


def copy_2d(dst, dst_pitch, dst_device, src, src_pitch, src_device, width_bytes, height,
            stream=None, device=0):
    """``height`` rows of ``width_bytes`` from address ``src`` (rows ``src_pitch`` bytes
    apart; emulated device memory when ``src_device``, else host memory) to ``dst``, as
    cuMemcpy2DAsync then a wait (at once, here). The device sides must lie in live
    allocations; overlapping rows copy from a snapshot."""
    call = "cuMemcpy2DAsync"
    _live_stream(stream, call)
    _device(device)
    if height == 0 or width_bytes == 0:
        return
    if (height > 1 and (src_pitch < width_bytes or dst_pitch < width_bytes)) or not (src and dst):
        raise ValueError(f"copy_2d: rows of {width_bytes} bytes at pitches {dst_pitch} and "
                         f"{src_pitch} (the rows must fit their pitch; addresses not 0)")
    d, keep_d = _side(call, dst, dst_pitch, width_bytes, height, dst_device, "destination")
    s, keep_s = _side(call, src, src_pitch, width_bytes, height, src_device, "source")
    d[...] = np.array(s) if np.shares_memory(d, s) else s


def synchronize(device=0):
    """Wait for all work on the device (cuCtxSynchronize): everything has run already."""
    _device(device)


# ---- streams and events ---------------------------------------------------------------------
_HANDLES = itertools.count(0x5000, 0x10)     # fake handles: distinct non-zero ints


def _live_stream(stream, call):
    """``stream`` checked: None (the legacy default stream) or an open Stream."""
    if _typed(stream, Stream, "stream=None") is not None and not stream._handle:
        raise _error(call, "CUDA_ERROR_INVALID_HANDLE", "the stream was closed")
    return stream


class Stream:
    """An emulated stream: work given to it runs at once, in order, before the call returns,
    so it is always done. ``non_blocking`` is kept and has no effect."""

    def __init__(self, device=0, non_blocking=True):
        self._device = _device(device)
        self.non_blocking = bool(non_blocking)
        self._handle = next(_HANDLES)

    device = property(lambda self: self._device, doc="The device ordinal (0).")
    address = property(lambda self: self._handle, doc="The handle as an int (0 once closed).")

    def synchronize(self):
        """Wait for the stream's work (done already)."""
        _live_stream(self, "cuStreamSynchronize")

    def query(self):
        """True: the stream's work is done."""
        _live_stream(self, "cuStreamQuery")
        return True

    def wait_event(self, event):
        """Make later work wait for ``event`` (recorded work is done already)."""
        _live_stream(self, "cuStreamWaitEvent")
        _live_event(_typed(event, Event, "event"), "cuStreamWaitEvent")

    def close(self):
        """Destroy the stream now (a second call does nothing)."""
        self._handle = 0


def _live_event(event, call):
    if not event._handle:
        raise _error(call, "CUDA_ERROR_INVALID_HANDLE", "the event was closed")
    return event


class Event:
    """An emulated event: record() notes the host clock (the work before it is done)."""

    def __init__(self, device=0, timing=True):
        self._device = _device(device)
        self._timing = bool(timing)
        self._handle = next(_HANDLES)
        self._time = None

    device = property(lambda self: self._device, doc="The device ordinal (0).")

    def record(self, stream=None):
        """Record the event on ``stream`` (None: the legacy default stream)."""
        _live_event(self, "cuEventRecord")
        _live_stream(stream, "cuEventRecord")
        self._time = time.perf_counter()

    def synchronize(self):
        """Wait for the work before the recorded event (done already)."""
        _live_event(self, "cuEventSynchronize")

    def query(self):
        """True: the work before the recorded event is done."""
        _live_event(self, "cuEventQuery")
        return True

    def close(self):
        """Destroy the event now (a second call does nothing)."""
        self._handle = 0


def elapsed_time(start, end):
    """Milliseconds of host clock between two recorded events (not a GPU's timing)."""
    for e in (_typed(start, Event, "start"), _typed(end, Event, "end")):
        _live_event(e, "cuEventElapsedTime")
        if not e._timing or e._time is None:
            raise _error("cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE",
                         "an event made with timing=False" if not e._timing
                         else "an event that was never recorded")
    return (end._time - start._time) * 1000.0


# ---- kernels: signatures, launchers, the library cache --------------------------------------
Kernel = namedtuple("Kernel", "name params sizes")      # params: ((name, C type), ...)

_KERNEL = re.compile(r'extern\s*"C"\s+__global__\s+void\s+'
                     r'(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_PARAM = re.compile(r"^(.*?)\s*\b(\w+)$", re.S)


def kernel_signatures(source):
    """((name, ((param, C type), ...)), ...) of every ``extern "C" __global__`` kernel
    of ``source``, in order."""
    text = _COMMENT.sub(" ", source)
    out = {}
    for m in _KERNEL.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        params = []
        inner = text[m.end():i - 1].strip()
        for p in ([] if inner in ("", "void") else inner.split(",")):
            pm = _PARAM.match(" ".join(p.split()))
            if pm is None or not pm.group(1):
                raise CudaError(f"the emulated device cannot launch kernel {m.group(1)}: its "
                                f"parameter {p.strip()!r} is not a plain 'type name'")
            params.append((pm.group(2), pm.group(1)))
        out.setdefault(m.group(1), tuple(params))     # a prototype, then the definition
    return tuple(out.items())


def _launchers(signatures):
    """C++ of each kernel's launcher ``int run_<name>(const unsigned dims[6], void **args)``
    (cuLaunchKernel's kernelParams: args[i] points at parameter i's bytes) and its table
    ``ms_sizes_<name>`` (each parameter's sizeof, then 0)."""
    out = []
    for name, params in signatures:
        call = ", ".join(f"*({t} *)a[{i}]" for i, (_, t) in enumerate(params))
        sizes = ", ".join([f"sizeof({t})" for _, t in params] + ["0"])
        out.append(f'extern "C" int run_{name}(const unsigned *d, void **a) {{\n'
                   f"  (void)a;\n"
                   f"  return ms_host_launch(dim3(d[0], d[1], d[2]), dim3(d[3], d[4], d[5]),\n"
                   f"                        [&] {{ {name}({call}); }});\n}}\n"
                   f'extern "C" const unsigned long long ms_sizes_{name}[] = {{{sizes}}};\n')
    return "".join(out)


_SOURCE_NAME = "ms-emulated-source.cu"      # #line's name for the source, in g++'s log


@functools.lru_cache(maxsize=None)
def _shim():
    with open(SHIM, encoding="utf-8") as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def compiler():
    """The path of g++, which compiles the kernels, or None where there is none."""
    return shutil.which("g++")


@functools.lru_cache(maxsize=None)
def compiler_version():
    """The first line of ``g++ --version`` (keys the library cache), or '' without g++."""
    cxx = compiler()
    if cxx is None:
        return ""
    try:
        r = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (r.stdout.strip().splitlines() or [""])[0]


class HostLibrary:
    """A compiled library of kernels: ``kernels`` by name, and run(), which launches one
    with no check of what its pointers point at (the host harness passes host arrays)."""

    def __init__(self, path, signatures):
        self.path = path
        self._dll = ctypes.CDLL(path)
        self._lock = threading.Lock()        # the shim's statics: one launch at a time
        self._run = {}
        kernels = {}
        for name, params in signatures:
            sizes = (ctypes.c_ulonglong * (len(params) + 1)).in_dll(self._dll, f"ms_sizes_{name}")
            kernels[name] = Kernel(name, params, tuple(sizes[:len(params)]))
            fn = getattr(self._dll, f"run_{name}")
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]
            self._run[name] = fn
        self.kernels = kernels

    def run(self, name, grid, block, args):
        """Launch kernel ``name`` on ``grid`` x ``block`` (3 ints each) with ``args`` (numpy
        scalars or bytes, one per parameter, each of its sizeof). Returns the shim's status:
        0, or the smaller OpenMP team it got (then the launch stopped)."""
        k = self.kernels[name]
        _count_args(k, args)
        raws = [a.tobytes() if isinstance(a, np.generic) else bytes(a) for a in args]
        for i, (raw, (p, t), size) in enumerate(zip(raws, k.params, k.sizes)):
            if len(raw) != size:
                raise _error("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE",
                             f"{name}: argument {i} ({p}, {t}) takes {size} bytes, got "
                             f"{len(raw)}")
        offsets = [16 * i for i in itertools.accumulate([0] + [-(-len(r) // 16) for r in raws])]
        packed = np.zeros(max(offsets[-1], 16), np.uint8)    # 16-byte slots, numpy-aligned
        for raw, off in zip(raws, offsets):
            packed[off:off + len(raw)] = np.frombuffer(raw, np.uint8)
        base = packed.ctypes.data
        argv = (ctypes.c_void_p * max(len(raws), 1))(*[base + off for off in offsets[:-1]])
        dims = (ctypes.c_uint * 6)(*grid, *block)
        with self._lock:
            return self._run[name](dims, argv)


def _count_args(kernel, args):
    if len(args) != len(kernel.params):
        raise _error("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE",
                     f"{kernel.name} takes {len(kernel.params)} arguments "
                     f"({', '.join(p for p, _ in kernel.params)}), got {len(args)}")


_TRAILER = b"MSEMU1\0\0"      # a library file: the ELF bytes, their SHA-256, then this


def _verified(path):
    """True when the file at ``path`` is a whole library as written (its digest matches)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    body, digest, tail = data[:-40], data[-40:-8], data[-8:]
    return tail == _TRAILER and hashlib.sha256(body).digest() == digest


class LibraryCache:
    """Shared libraries compiled by g++ under the shim, by key (SHA-256 of the compiler's
    version, the flags and the text): loaded once in the process, kept on disk under
    ``directory`` (None: a private temporary directory, removed at exit) with atomic
    writes (a temporary file, then os.replace); a damaged file is compiled again. Two
    threads asking for one new library compile it once."""

    def __init__(self, directory=None):
        self.directory = directory
        self._libs = {}
        self._building = {}
        self._lock = threading.Lock()
        self._private = None
        self._counts = dict(memory_hits=0, disk_hits=0, compiles=0, rebuilt=0, disk_errors=0)

    def stats(self):
        """Counts: memory_hits, disk_hits, compiles, rebuilt (damaged files), disk_errors."""
        with self._lock:
            return dict(self._counts, entries=len(self._libs))

    def load(self, source, options=(), name="kernel.cu"):
        """The HostLibrary of CUDA ``source`` (its kernels' launchers added) compiled with
        the NVRTC ``options`` that mean something on the host (-D, -I); a compile error
        raises CudaError (NVRTC_ERROR_COMPILATION) carrying g++'s log, names as ``name``."""
        signatures = kernel_signatures(source)
        flags = FLAGS + _host_flags(options)
        text = (f'{_shim()}\n#line 1 "{_SOURCE_NAME}"\n{source}\n#line 1 "ms-launchers.cu"\n'
                f"{_launchers(signatures)}")
        key = hashlib.sha256("\0".join((compiler_version(),) + flags + (text,))
                             .encode()).hexdigest()
        with self._lock:
            lib = self._libs.get(key)
            if lib is not None:
                self._counts["memory_hits"] += 1
                return lib
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                lib = self._libs.get(key)
                if lib is not None:
                    self._counts["memory_hits"] += 1
                    return lib
            lib = HostLibrary(self._file(key, text, flags, name), signatures)
            with self._lock:
                self._libs[key] = lib
                self._building.pop(key, None)
        return lib

    def _count(self, what):
        with self._lock:
            self._counts[what] += 1

    def _private_dir(self):
        """This cache's own temporary directory (made once, removed at exit)."""
        with self._lock:
            if self._private is None:
                self._private = tempfile.mkdtemp(prefix="mshadow-emulate-")
                atexit.register(shutil.rmtree, self._private, True)
            return self._private

    def _file(self, key, text, flags, name):
        """The path of the key's verified library: from disk, else compiled and written."""
        where = self.directory if self.directory is not None else self._private_dir()
        path = os.path.join(where, key[:2], key + ".so")
        if os.path.exists(path):
            if _verified(path):
                self._count("disk_hits")
                return path
            self._count("rebuilt")
        data = self._compile(text, flags, name)
        data += hashlib.sha256(data).digest() + _TRAILER
        try:
            write_atomic(path, data)
        except OSError:
            if self.directory is None:
                raise
            self._count("disk_errors")        # the disk is in the way: a private copy
            path = os.path.join(self._private_dir(), key[:2], key + ".so")
            write_atomic(path, data)
        return path

    def _compile(self, text, flags, name):
        """The bytes of the library g++ makes of ``text``, or CudaError with its log."""
        cxx = compiler()
        if cxx is None:
            raise CudaError("the emulated device compiles kernels with g++, which is not on "
                            "PATH (install g++, or run on a real GPU)")
        with tempfile.TemporaryDirectory(prefix="mshadow-emulate-") as work:
            out = os.path.join(work, "lib.so")
            r = subprocess.run([cxx, *flags, "-o", out, "-"], input=text, text=True,
                               capture_output=True, env=dict(os.environ, LC_ALL="C"))
            self._count("compiles")
            if r.returncode != 0:
                log = r.stderr.replace(_SOURCE_NAME, name).strip()
                raise CudaError(f"g++ could not compile {name} for the emulated device: "
                                f"NVRTC_ERROR_COMPILATION [6]\n{log}", 6)
            with open(out, "rb") as f:
                return f.read()


def _host_flags(options):
    """The g++ flags of the NVRTC options that mean the same on the host: -D and -I (the
    others, --fmad=false included, are what the host build does anyway, or nothing)."""
    out = []
    for o in options:
        for nv, gcc in (("--define-macro=", "-D"), ("--include-path=", "-I"),
                        ("-D", "-D"), ("-I", "-I")):
            if o.startswith(nv) and len(o) > len(nv):
                out.append(gcc + o[len(nv):])
                break
    return tuple(out)


_process_cache = None
_process_lock = threading.Lock()


def library_cache():
    """The process's LibraryCache: under mshadow.cuda.cache.default_directory()/emulate, or
    a private temporary directory when the disk cache is off (MSHADOW_CUDA_CACHE=0)."""
    global _process_cache
    with _process_lock:
        if _process_cache is None:
            base = default_directory()
            _process_cache = LibraryCache(None if base is None
                                          else os.path.join(base, "emulate"))
        return _process_cache


def build_library(source, options=()):
    """The HostLibrary of ``source`` from the process's cache (the host harness's entry:
    its run() takes any host address; Module and Function.launch check theirs)."""
    return library_cache().load(source, options)


# ---- images, modules, launches --------------------------------------------------------------
_HEADER = re.compile(re.escape(IMAGE_MAGIC.decode()) +
                     r"; arch (sm_\d+[a-z]?); options (\[.*\]); sha256 ([0-9a-f]{64}) \*/\n")


def _image(source, arch, options):
    digest = hashlib.sha256(source.encode()).hexdigest()
    return (f"{IMAGE_MAGIC.decode()}; arch {arch}; options {json.dumps(list(options))}; "
            f"sha256 {digest} */\n{source}").encode()


def _parse_image(data):
    """(arch, options, source) of an emulated image, or None when ``data`` is not a whole
    one (a CUBIN, PTX, a truncated or altered image)."""
    if not data.startswith(IMAGE_MAGIC):
        return None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    m = _HEADER.match(text)
    if m is None:
        return None
    source = text[m.end():]
    if hashlib.sha256(source.encode()).hexdigest() != m.group(3):
        return None
    return m.group(1), tuple(json.loads(m.group(2))), source


def image_ok(data):
    """True when ``data`` is a whole emulated image (the kernel cache's check on load)."""
    return _parse_image(bytes(data)) is not None


def compile_cubin(source, arch="sm_90", options=(), name="kernel.cu"):
    """The emulated image of CUDA C++ ``source`` (what the emulated Module loads): the
    source behind an IMAGE_MAGIC header naming ``arch`` and ``options``, compiled once by
    g++ under the shim now so that a compile error raises CudaError carrying g++'s log (as
    NVRTC's is carried); the library is cached for Module. ``arch`` is a real architecture
    of nvrtc_supported_archs(); ``name`` is the file name g++'s messages use."""
    if isinstance(options, (str, bytes)):
        raise TypeError(f"compile_cubin: options is a sequence of strings, not one string "
                        f"({options!r}); write options=({options!r},)")
    src = source.decode() if isinstance(source, (bytes, bytearray)) else str(source)
    opts = tuple(o.decode() if isinstance(o, (bytes, bytearray)) else str(o) for o in options)
    m = re.fullmatch(r"(sm|compute)_(\d+)[a-z]?", arch)
    if m is not None and m.group(1) == "compute":
        raise CudaError(f"NVRTC made no CUBIN for {arch}: a virtual architecture "
                        f"(compute_XX) gives PTX only; ask for a real one (sm_XX)")
    if m is None or int(m.group(2)) not in SUPPORTED_ARCHS:
        err = _error("nvrtcCompileProgram", "NVRTC_ERROR_INVALID_OPTION")
        raise CudaError(f"NVRTC could not compile {name} for {arch}: {err}\nnvrtc: error: "
                        f"invalid value for --gpu-architecture (-arch)", err.status)
    library_cache().load(src, opts, name)
    return _image(src, arch, opts)


class Module:
    """An emulated image loaded on the device: its source compiled by g++ (or found in the
    library cache). A CUBIN, PTX or damaged image is CUDA_ERROR_INVALID_IMAGE; an image for
    another architecture than the device's is CUDA_ERROR_NO_BINARY_FOR_GPU."""

    def __init__(self, image, device=0):
        data = bytes(image)
        self._device = _device(device)
        parsed = _parse_image(data)
        if parsed is None:
            raise _error("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE",
                         "not an emulated image (compile it with the emulated compile_cubin: "
                         "MSHADOW_CUDA=emulate)")
        arch, options, source = parsed
        major, minor = DEVICE["compute_capability"]
        cc = int(re.match(r"sm_(\d+)", arch).group(1))
        if cc // 10 != major or cc % 10 > minor:
            raise _error("cuModuleLoadData", "CUDA_ERROR_NO_BINARY_FOR_GPU",
                         f"the image is for {arch}, the device is sm_{major}{minor}")
        try:
            self._lib = library_cache().load(source, options)
        except CudaError as e:
            raise _error("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE", str(e)) from None

    device = property(lambda self: self._device, doc="The device ordinal (0).")

    def get_function(self, name):
        """The kernel ``name`` (an ``extern "C" __global__`` function of the image)."""
        name = _typed(name, str, "name")
        if self._lib is None:
            raise _error("cuModuleGetFunction", "CUDA_ERROR_INVALID_HANDLE",
                         "the module was unloaded")
        if name not in self._lib.kernels:
            raise _error("cuModuleGetFunction", "CUDA_ERROR_NOT_FOUND",
                         f"no extern \"C\" __global__ kernel {name!r} in the image (it has "
                         f"{', '.join(sorted(self._lib.kernels)) or 'none'})")
        f = Function.__new__(Function)
        f._module, f._name = self, name
        return f

    def unload(self):
        """Unload the module now (its functions can no longer be launched)."""
        self._lib = None


# A C type of a kernel parameter -> the numpy dtype its argument must have (integers: that
# size, either signedness; floats: that type). Other types (structs, typedefs the table
# does not know) take any argument of their size, an np.void of their bytes.
_INTS = {"char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1,
         "bool": 1, "short": 2, "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "int": 4,
         "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "long": 8,
         "unsigned long": 8, "long long": 8, "unsigned long long": 8, "int64_t": 8,
         "uint64_t": 8, "size_t": 8, "ptrdiff_t": 8, "npy_intp": 8}
_FLOATS = {"float": np.dtype(np.float32), "double": np.dtype(np.float64)}


def _bare(ctype):
    """A parameter's C type without qualifiers: 'const float *' -> 'float *'."""
    words = [w for w in ctype.replace("*", " * ").split()
             if w not in ("const", "volatile", "__restrict__", "__restrict", "restrict")]
    return " ".join(words)


def as_arg(ctype, value):
    """``value`` as the numpy scalar a parameter of C type ``ctype`` takes: an address for a
    pointer (np.uint64), the type's own for an integer or a float, an np.void of the bytes of
    a ctypes Structure or bytes for a struct. The form both drivers' launch() takes."""
    bare = _bare(ctype)
    if bare.endswith("*"):
        return np.uint64(value)
    if bare in _FLOATS:
        return _FLOATS[bare].type(value)
    if bare in _INTS:
        size = _INTS[bare]
        unsigned = bare.startswith(("u", "bool", "size_t"))
        return np.dtype(f"{'u' if unsigned else 'i'}{size}").type(value)
    if isinstance(value, ctypes.Structure):
        return np.void(bytes(value))
    if isinstance(value, (bytes, bytearray)):
        return np.void(bytes(value))
    raise TypeError(f"as_arg: no numpy form of a {type(value).__name__} for the C type "
                    f"{ctype!r}")


def _arg_bytes(fname, i, pname, ctype, a, keep):
    """Argument ``i`` of a launch as bytes, checked: a Memory (live) or an address (0, or in a
    live allocation: its buffer goes to ``keep``) for a pointer, a numpy scalar of the type's
    kind for the rest."""
    call = "cuLaunchKernel"
    bare = _bare(ctype)
    what = f"{fname}: argument {i} ({pname}, {ctype})"
    if isinstance(a, Memory):
        if not bare.endswith("*"):
            raise _error(call, "CUDA_ERROR_INVALID_VALUE", f"{what} is not a pointer, got a "
                                                           f"Memory")
        buf = a._buf
        if buf is None:
            raise _error(call, "CUDA_ERROR_INVALID_VALUE", f"{what} is a freed Memory")
        keep.append(buf)
        return np.uint64(buf.ctypes.data).tobytes()
    if not isinstance(a, np.generic):
        raise TypeError(f"{fname}: argument {i} is a {type(a).__name__}; pass a Memory or a "
                        f"numpy scalar of the parameter's type (np.int32(n), np.float32(x))")
    kind = a.dtype.kind
    if bare.endswith("*"):
        if kind not in "iu" or a.dtype.itemsize != 8:
            raise _error(call, "CUDA_ERROR_INVALID_VALUE",
                         f"{what} takes a Memory or an address (np.uint64), got {a.dtype}")
        address = int(a.astype(np.uint64))
        if address:
            owner = _owner(address)
            if owner is None:
                raise _error(call, "CUDA_ERROR_ILLEGAL_ADDRESS",
                             f"{what} = {address:#x} is in no live Memory (freed, or never "
                             f"device memory)")
            keep.append(owner[1])
    elif bare in _FLOATS and a.dtype != _FLOATS[bare]:
        raise _error(call, "CUDA_ERROR_INVALID_VALUE", f"{what} takes np.{_FLOATS[bare]}, "
                                                       f"got {a.dtype}")
    elif bare in _INTS and (kind not in "iub" or a.dtype.itemsize != _INTS[bare]):
        raise _error(call, "CUDA_ERROR_INVALID_VALUE",
                     f"{what} takes a {_INTS[bare]}-byte integer, got {a.dtype}")
    return a.tobytes()


class Function:
    """A kernel of an emulated Module; keeps its module."""

    module = property(lambda self: self._module, doc="The Module the kernel is in.")
    name = property(lambda self: self._name, doc="The kernel's name.")

    def launch(self, grid, block, args, shared_mem=0, stream=None):
        """Run on ``grid`` x ``block`` (ints or tuples of up to 3) with ``args``: each a
        Memory (its address) or a numpy scalar whose type is the kernel parameter's
        (np.int32(n), np.float32(x), np.uint64(address), np.void(struct bytes)). Runs now;
        ``stream`` orders nothing more. Limits, argument kinds and sizes and every pointer
        are checked first: a failure is a CudaError and nothing ran."""
        call = "cuLaunchKernel"
        lib = self._module._lib
        if lib is None:
            raise _error(call, "CUDA_ERROR_INVALID_HANDLE", f"{self._name}: its module was "
                                                            f"unloaded")
        dims = _dim3(grid, "grid") + _dim3(block, "block")
        shared_mem = operator.index(shared_mem)
        if shared_mem < 0:
            raise OverflowError("can't convert negative value to unsigned int")
        _live_stream(stream, call)
        _check_limits(dims, shared_mem)
        k = lib.kernels[self._name]
        args = list(args)
        _count_args(k, args)
        keep = []        # the buffers the pointers point into, alive until the launch ends
        raws = [_arg_bytes(self._name, i, p, t, a, keep)
                for i, ((p, t), a) in enumerate(zip(k.params, args))]
        short = lib.run(self._name, dims[:3], dims[3:], raws)
        if short:
            raise _error(call, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                         f"OpenMP gave {short} threads for a block of "
                         f"{dims[3] * dims[4] * dims[5]} (OMP_THREAD_LIMIT?)")


def _check_limits(dims, shared_mem):
    """CUDA_ERROR_INVALID_VALUE, as cuLaunchKernel, for a grid or block past the device's
    limits or more dynamic shared memory than a block has."""
    grid, block = dims[:3], dims[3:]
    why = None
    if any(g > most for g, most in zip(grid, DEVICE["max_grid_dim"])):
        why = f"grid {grid} exceeds max_grid_dim {DEVICE['max_grid_dim']}"
    elif any(b > most for b, most in zip(block, DEVICE["max_block_dim"])):
        why = f"block {block} exceeds max_block_dim {DEVICE['max_block_dim']}"
    elif block[0] * block[1] * block[2] > DEVICE["max_threads_per_block"]:
        why = (f"block {block} has {block[0] * block[1] * block[2]} threads, more than "
               f"max_threads_per_block {DEVICE['max_threads_per_block']}")
    elif shared_mem > DEVICE["max_shared_memory_per_block"]:
        why = (f"{shared_mem} bytes of dynamic shared memory, more than "
               f"max_shared_memory_per_block {DEVICE['max_shared_memory_per_block']}")
    if why:
        raise _error("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE", why)


# ---- cuBLAS from numpy ----------------------------------------------------------------------
def _blas_dtype(handle, dtype, routine):
    """(the routine's name, its dtype) for float32 (S) or float64 (D); the handle and its
    stream checked."""
    if not handle._open:
        raise _error(f"cublas{routine}", "CUBLAS_STATUS_NOT_INITIALIZED",
                     "the cuBLAS handle was closed")
    dt = np.dtype(dtype)
    if dt.char not in "fd":
        raise DTypeError(f"cuBLAS routines here take float32 or float64, not {dt.name}")
    call = f"cublas{'D' if dt.char == 'd' else 'S'}{routine}"
    _live_stream(handle._stream, call)
    return call, dt


def _address(call, ptr):
    """A device pointer (a Memory or an int address) as an int; a freed Memory fails."""
    if isinstance(ptr, Memory):
        if ptr._buf is None:
            raise _error(call, "CUBLAS_STATUS_EXECUTION_FAILED", "a freed Memory")
        return ptr._buf.ctypes.data
    return operator.index(ptr)


def _span(call, ptr, count, dt):
    """``count`` elements of ``dt`` at device pointer ``ptr`` as a 1-D numpy view of the
    emulated memory; they must lie in one live allocation, aligned."""
    address, nbytes = _address(call, ptr), count * dt.itemsize
    owner = _owner(address, nbytes)
    if owner is None:
        raise _error(call, "CUBLAS_STATUS_EXECUTION_FAILED",
                     f"{nbytes} bytes at {address:#x} are not inside one live Memory")
    if address % dt.itemsize:
        raise _error(call, "CUBLAS_STATUS_EXECUTION_FAILED",
                     f"{address:#x} is not aligned to {dt.itemsize} bytes")
    _, buf, offset = owner
    return buf[offset:offset + nbytes].view(dt)


def _matrix(call, ptr, rows, cols, ld, dt, write=False):
    """A column-major ``rows`` x ``cols`` matrix with leading dimension ``ld``."""
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), dt)
    span = _span(call, ptr, (cols - 1) * ld + rows, dt)
    return np.lib.stride_tricks.as_strided(span, (rows, cols), (dt.itemsize, ld * dt.itemsize),
                                           writeable=write)


def _vector(call, ptr, n, inc, dt):
    """``n`` elements ``inc`` apart (BLAS: a negative ``inc`` walks from the far end)."""
    if n <= 0:
        return np.zeros(0, dt)
    if inc == 0:
        return np.broadcast_to(_span(call, ptr, 1, dt), (n,))
    return _span(call, ptr, (n - 1) * abs(inc) + 1, dt)[::inc]


def _need(call, ok, what):
    if not ok:
        raise _error(call, "CUBLAS_STATUS_INVALID_VALUE", what)


def _gemm(call, dt, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """The views of C = alpha op(A) op(B) + beta C, column-major, every operand checked:
    (C, op(A), op(B), alpha, beta) for _gemm_store, or None when there is nothing to do.
    alpha = 0 or k = 0 reads neither A nor B (their views are None), as cuBLAS."""
    _need(call, m >= 0 and n >= 0 and k >= 0, f"m, n, k = {m}, {n}, {k}")
    _need(call, lda >= max(1, k if transa else m), f"lda = {lda}")
    _need(call, ldb >= max(1, n if transb else k), f"ldb = {ldb}")
    _need(call, ldc >= max(1, m), f"ldc = {ldc}")
    if m == 0 or n == 0:
        return None
    alpha, beta = dt.type(alpha), dt.type(beta)
    C = _matrix(call, c, m, n, ldc, dt, write=True)
    A = B = None
    if k and alpha != 0:
        A = _matrix(call, a, k, m, lda, dt).T if transa else _matrix(call, a, m, k, lda, dt)
        B = _matrix(call, b, n, k, ldb, dt).T if transb else _matrix(call, b, k, n, ldb, dt)
    return C, A, B, alpha, beta


def _gemm_store(views):
    """Compute and store what _gemm checked; beta = 0 does not read C (NaNs there vanish)."""
    if views is None:
        return
    C, A, B, alpha, beta = views
    out = None
    if A is not None:
        out = A @ B
        if alpha != 1:
            out *= alpha
    if beta != 0:
        out = beta * C if out is None else out + beta * C
    C[...] = 0 if out is None else out


class BlasHandle:
    """An emulated cuBLAS handle: gemm, gemv, dot and gemm_strided_batched, float32 (S) and
    float64 (D), column-major as cuBLAS, computed by numpy on views of the emulated memory
    (so equal to cuBLAS to rounding, not bit for bit). Pointers are a Memory or an int
    address inside one; each operand must lie in one live allocation."""

    def __init__(self, device=0):
        self._device = _device(device)
        self._open = True
        self._stream = None

    device = property(lambda self: self._device, doc="The device ordinal (0).")

    def set_stream(self, stream=None):
        """Queue later calls on ``stream`` (None: the legacy default stream)."""
        if not self._open:
            raise _error("cublasSetStream", "CUBLAS_STATUS_NOT_INITIALIZED",
                         "the cuBLAS handle was closed")
        self._stream = _live_stream(stream, "cublasSetStream")

    def gemm(self, dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        """C = alpha op(A) op(B) + beta C (cublasSgemm / cublasDgemm)."""
        call, dt = _blas_dtype(self, dtype, "gemm")
        i = operator.index
        _gemm_store(_gemm(call, dt, bool(transa), bool(transb), i(m), i(n), i(k), alpha, a,
                          i(lda), b, i(ldb), beta, c, i(ldc)))

    def gemv(self, dtype, trans, m, n, alpha, a, lda, x, incx, beta, y, incy):
        """y = alpha op(A) x + beta y (cublasSgemv / cublasDgemv)."""
        call, dt = _blas_dtype(self, dtype, "gemv")
        m, n, lda, incx, incy = map(operator.index, (m, n, lda, incx, incy))
        _need(call, m >= 0 and n >= 0, f"m, n = {m}, {n}")
        _need(call, lda >= max(1, m), f"lda = {lda}")
        _need(call, incx != 0 and incy != 0, f"incx, incy = {incx}, {incy}")
        if m == 0 or n == 0:
            return
        alpha, beta = dt.type(alpha), dt.type(beta)
        lx, ly = (m, n) if trans else (n, m)
        Y = _vector(call, y, ly, incy, dt)
        out = None
        if alpha != 0:
            A = _matrix(call, a, m, n, lda, dt)
            out = (A.T if trans else A) @ _vector(call, x, lx, incx, dt)
            if alpha != 1:
                out *= alpha
        if beta != 0:
            out = beta * Y if out is None else out + beta * Y
        Y[...] = 0 if out is None else out

    def dot(self, dtype, n, x, incx, y, incy):
        """The dot product of two device vectors, returned to the host (cublasSdot / Ddot)."""
        call, dt = _blas_dtype(self, dtype, "dot")
        n, incx, incy = map(operator.index, (n, incx, incy))
        if n <= 0:
            return 0.0
        return float(np.dot(_vector(call, x, n, incx, dt), _vector(call, y, n, incy, dt)))

    def gemm_strided_batched(self, dtype, transa, transb, m, n, k, alpha, a, lda, stride_a,
                             b, ldb, stride_b, beta, c, ldc, stride_c, batch):
        """``batch`` gemms whose operands are ``stride_*`` elements apart
        (cublasSgemmStridedBatched / cublasDgemmStridedBatched); every batch's operands are
        checked before the first is computed."""
        call, dt = _blas_dtype(self, dtype, "gemmStridedBatched")
        i = operator.index
        batch = i(batch)
        _need(call, batch >= 0, f"batch = {batch}")
        pa, pb, pc = (_address(call, p) for p in (a, b, c))
        sa, sb, sc = (i(s) * dt.itemsize for s in (stride_a, stride_b, stride_c))
        views = [_gemm(call, dt, bool(transa), bool(transb), i(m), i(n), i(k), alpha,
                       pa + j * sa, i(lda), pb + j * sb, i(ldb), beta, pc + j * sc, i(ldc))
                 for j in range(batch)]
        for v in views:
            _gemm_store(v)

    def close(self):
        """Destroy the handle now (a second call does nothing)."""
        self._open = False
