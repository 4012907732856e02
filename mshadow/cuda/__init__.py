"""mshadow's GPU backend. Today its first layer: the CUDA driver API, NVRTC and cuBLAS,
opened at run time by mshadow.cuda._cuda (the only module that opens CUDA libraries).

Importing this package opens nothing: the first call that needs a library opens it, once.
Without a GPU, ``available()`` is False and says why (``unavailable_reason()``); NVRTC alone
(``pip install "mshadow[cuda]"``) compiles CUDA C to CUBIN on any Linux or Windows machine.
"""
from ._cuda import (BlasHandle, Event, Function, Memory, Module, Stream, available,
                    compile_cubin, cublas_version, device_attributes, device_count,
                    driver_version, elapsed_time, is_available, nvrtc_supported_archs,
                    nvrtc_version, unavailable_reason)
from ..errors import CudaError

__all__ = ["CudaError", "available", "is_available", "unavailable_reason", "driver_version",
           "device_count", "device_attributes", "nvrtc_version", "nvrtc_supported_archs",
           "cublas_version", "compile_cubin", "Memory", "Stream", "Event", "elapsed_time",
           "Module", "Function", "BlasHandle"]
