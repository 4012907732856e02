"""The kernel cache of the CUDA backend: CUDA C -> CUBIN by NVRTC once per structure (on the
emulated device, MSHADOW_CUDA=emulate: CUDA C -> its image, compiled by g++).

A kernel is compiled once per (source text, NVRTC version, architecture, options) and kept
twice: in memory, in a bounded least-recently-used table, and on disk, so that the next
process on the machine loads it instead of compiling (NVRTC takes 50-500 ms a kernel, a
structure's whole cost the first time it runs).

The key is the SHA-256 of those four, so a changed emitter, NVRTC or option never meets a
stale binary; the compiler, its version and the check of a file read back are the driver's
in use (mshadow.cuda.driver()), so the real and the emulated device never share an entry.
Disk writes are atomic: a CUBIN is written to a temporary file in the cache directory and
renamed over its name, so a process (or thread) that reads it sees a whole file or none. A
file that is not an ELF image (truncated by a full disk, damaged), or not a whole emulated
image, is compiled again and replaced. The disk is an optimisation only: a directory that
cannot be made, read or written leaves the cache in memory, it never fails a compile.

Where: ``$MSHADOW_CUDA_CACHE`` if set (an empty value or ``0`` turns the disk cache off),
else ``$XDG_CACHE_HOME/mshadow/cuda``, else ``~/.cache/mshadow/cuda``.
"""
import hashlib
import os
import tempfile
import threading
from collections import OrderedDict, namedtuple

__all__ = ["KernelCache", "CacheStats", "OPTIONS", "default_directory", "kernel_cache",
           "write_atomic"]

# What every emitted kernel compiles with: no fused multiply-add, so a kernel gives the CPU
# backend's bits (mshadow/cuda/lower.py); --prec-div, --prec-sqrt and --ftz keep NVRTC's
# IEEE defaults.
OPTIONS = ("--fmad=false",)

_ELF_MAGIC = b"\x7fELF"
CacheStats = namedtuple("CacheStats", "memory_hits disk_hits compiles disk_errors entries")


def _is_elf(data):
    return data.startswith(_ELF_MAGIC)


def write_atomic(path, data):
    """Write ``data`` to ``path`` whole or not at all: into a temporary file beside it, then
    renamed over it, so a reader sees the old file or the new one. Makes the directory;
    raises OSError, leaving no temporary file behind."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path)[:16] + ".", suffix=".tmp",
                               dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def default_directory():
    """The disk cache's directory from the environment (module docstring), or None when
    ``MSHADOW_CUDA_CACHE`` turns it off."""
    env = os.environ.get("MSHADOW_CUDA_CACHE")
    if env is not None:
        return None if env in ("", "0") else os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mshadow", "cuda")


class KernelCache:
    """CUBINs by (source, NVRTC version, arch, options), in memory (at most ``capacity``,
    least recently used out first) and under ``directory`` (None: memory only).

    ``compile`` is the compiler, ``version`` what keys the entries besides their inputs and
    ``verify`` the check of a file read back; each left None is ``driver``'s (a driver
    module; None: mshadow.cuda.driver() when the cache first needs it, see _facts). Tests
    give a counting compiler. Thread-safe: two threads asking for one new kernel may both
    compile it, and the second write replaces the first with the same bytes."""

    def __init__(self, directory=None, capacity=512, compile=None, version=None, verify=None,
                 driver=None):
        if capacity < 1:
            raise ValueError(f"KernelCache: capacity must be >= 1, got {capacity}")
        self.directory = directory
        self.capacity = capacity
        self._compile = compile
        self._version = version
        self._verify = verify
        self._driver = driver
        self._memory = OrderedDict()
        self._lock = threading.Lock()
        self._counts = {"memory_hits": 0, "disk_hits": 0, "compiles": 0, "disk_errors": 0}

    def _facts(self):
        """Fill in what was not given from the driver: on a real device NVRTC's compile_cubin,
        its version and the ELF check; on the emulated one (mshadow/cuda/emulate.py) its
        compile_cubin, its compiler's version and its image check. A compiler given is
        taken to make CUBINs (the ELF check) unless ``verify`` says otherwise."""
        if None not in (self._compile, self._version, self._verify):
            return
        from . import driver
        drv = self._driver or driver()
        emulated = getattr(drv, "EMULATED", False)
        if self._verify is None:
            self._verify = drv.image_ok if emulated and self._compile is None else _is_elf
        if self._compile is None:
            self._compile = drv.compile_cubin
        if self._version is None:
            self._version = (("emulate", drv.compiler_version()) if emulated
                             else drv.nvrtc_version())

    def key(self, source, arch, options=OPTIONS):
        """The entry's name: a hex SHA-256 of the compiler's version, arch, options and
        source."""
        self._facts()
        head = ("compiler " + ".".join(map(str, self._version)) + f"\0{arch}\0"
                + "\0".join(options))
        text = source.encode() if isinstance(source, str) else bytes(source)
        return hashlib.sha256(head.encode() + b"\0\0" + text).hexdigest()

    def cubin(self, source, arch, options=OPTIONS):
        """The CUBIN of ``source`` for ``arch`` (``"sm_90"``): from memory, else from disk,
        else compiled by NVRTC (a compile error raises CudaError; nothing is kept)."""
        options = tuple(options)
        key = self.key(source, arch, options)      # (and the compiler, by _facts)
        with self._lock:
            got = self._memory.get(key)
            if got is not None:
                self._memory.move_to_end(key)
                self._counts["memory_hits"] += 1
                return got
        got = self._read(key)
        if got is not None:
            self._count("disk_hits")
        else:
            got = self._compile(source, arch=arch, options=options)
            self._count("compiles")
            self._write(key, got)
        with self._lock:
            self._memory[key] = got
            self._memory.move_to_end(key)
            while len(self._memory) > self.capacity:
                self._memory.popitem(last=False)
        return got

    def stats(self):
        """Hits in memory and on disk, compiles, disk errors and entries in memory."""
        with self._lock:
            return CacheStats(entries=len(self._memory), **self._counts)

    def clear_memory(self):
        """Forget the entries in memory (the disk keeps its own)."""
        with self._lock:
            self._memory.clear()

    # ---- disk ----------------------------------------------------------------------------
    def _path(self, key):
        return os.path.join(self.directory, key[:2], key + ".cubin")

    def _read(self, key):
        if self.directory is None:
            return None
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            self._count("disk_errors")
            return None
        return data if self._verify(data) else None   # damaged: compile again

    def _write(self, key, data):
        if self.directory is None:
            return
        try:
            write_atomic(self._path(key), data)
        except OSError:
            self._count("disk_errors")     # the memory entry still serves this process

    def _count(self, what):
        with self._lock:
            self._counts[what] += 1


_process_caches = {}
_process_lock = threading.Lock()


def kernel_cache():
    """The process's KernelCache of the driver in use (mshadow.cuda.driver()), at
    default_directory(), made on first use."""
    from . import driver
    drv = driver()
    with _process_lock:
        got = _process_caches.get(drv.__name__)
        if got is None:
            got = _process_caches[drv.__name__] = KernelCache(default_directory(), driver=drv)
        return got
