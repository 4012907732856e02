# Type stubs of mshadow/cuda/__init__.py: driver(), and the names it resolves through the
# driver in use, typed as mshadow.cuda._cuda's (mshadow.cuda.emulate has the same API).
from types import ModuleType

from ..errors import CudaError as CudaError
from ._cuda import (BlasHandle as BlasHandle, Event as Event, Function as Function,
                    Memory as Memory, Module as Module, Stream as Stream,
                    available as available, compile_cubin as compile_cubin, copy_2d as copy_2d,
                    synchronize as synchronize,
                    cublas_version as cublas_version, device_attributes as device_attributes,
                    device_count as device_count, driver_version as driver_version,
                    elapsed_time as elapsed_time, is_available as is_available,
                    nvrtc_supported_archs as nvrtc_supported_archs,
                    nvrtc_version as nvrtc_version, unavailable_reason as unavailable_reason)

ENV: str
DRIVERS: dict[str, str]

def driver() -> ModuleType: ...
def require_device(where: str) -> None: ...

__all__: list[str]
