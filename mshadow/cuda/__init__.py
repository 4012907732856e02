"""mshadow's GPU backend. Its first layer, the driver: the CUDA driver API, NVRTC and cuBLAS,
opened at run time by mshadow.cuda._cuda (the only module that opens CUDA libraries), or the
emulated device of mshadow.cuda.emulate when ``MSHADOW_CUDA=emulate`` (CI with no GPU).

``driver()`` is the module in use; the public names here (Memory, Stream, Module,
available, ...) are its names, looked up at each access, so code that says
``cuda.Memory(...)`` runs on whichever device the environment chose. Importing this package
opens nothing: the first call that needs a library opens it, once. Without a GPU,
``available()`` is False and says why (``unavailable_reason()``); NVRTC alone
(``pip install "mshadow[cuda]"``) compiles CUDA C to CUBIN on any Linux or Windows machine.
"""
import importlib
import os

from . import _cuda
from ..errors import CudaError, DeviceError

__all__ = ["CudaError", "driver", "require_device", "available", "is_available", "unavailable_reason",
           "driver_version", "device_count", "device_attributes", "nvrtc_version",
           "nvrtc_supported_archs", "cublas_version", "compile_cubin", "copy_2d",
           "synchronize", "Memory", "Stream",
           "Event", "elapsed_time", "Module", "Function", "BlasHandle"]

ENV = "MSHADOW_CUDA"
# what MSHADOW_CUDA may say -> the driver module: unset or empty, the real one
DRIVERS = {"": "_cuda", "emulate": "emulate"}
_DRIVER_NAMES = frozenset(__all__) - {"CudaError", "driver", "require_device"}


def driver():
    """The driver module in use: mshadow.cuda._cuda (the real device), or
    mshadow.cuda.emulate when the environment says ``MSHADOW_CUDA=emulate``. Any other
    value raises CudaError naming the accepted ones. Read at each call (cheap)."""
    value = os.environ.get(ENV, "")
    got = _LOADED.get(value)
    if got is not None:
        return got
    name = DRIVERS.get(value)
    if name is None:
        raise CudaError(f"{ENV}={value!r} is not a CUDA driver mshadow has: leave {ENV} unset "
                        f"(or empty) for the real device, or set {ENV}=emulate for the "
                        f"emulated one")
    got = _LOADED[value] = (_cuda if name == "_cuda"
                            else importlib.import_module(f"{__name__}.{name}"))
    return got


def require_device(where):
    """A DeviceError saying why when there is no CUDA device (and no emulated one)."""
    reason = driver().unavailable_reason()
    if reason is not None:
        raise DeviceError(f"{where}: gpu tensors need the CUDA backend, which has no device "
                          f"here: {reason.splitlines()[0]}")


_LOADED = {}    # MSHADOW_CUDA's value -> its driver module (an import per call cost 13 us)


def __getattr__(name):
    if name in _DRIVER_NAMES:
        return getattr(driver(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _DRIVER_NAMES)
