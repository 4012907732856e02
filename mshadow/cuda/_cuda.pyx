# cython: language_level=3
"""The only place that opens CUDA libraries: the driver API, NVRTC and cuBLAS, loaded at run
time with dlopen/dlsym (LoadLibrary/GetProcAddress on Windows), and thin wrappers over them.

Design: a library is found and opened on its first use, once, under one lock; importing this
module opens nothing, so the package builds, imports and runs its CPU tests where no CUDA
exists. The driver comes from the system (libcuda.so.1, nvcuda.dll); NVRTC and cuBLAS from
NVIDIA's wheels (found by cuda-pathfinder), a toolkit under CUDA_HOME/CUDA_PATH, or the system
loader's search. A library that cannot be opened raises CudaError naming the library, every
place tried with the loader's reason, and how to get it; the failure is remembered. Each
wrapper loads, calls its symbol without the GIL, and hands the status to one check function per
library, which raises CudaError with the library's own error name and message. Wrappers hold
no logic: launch geometry, pitches and streams are chosen by their callers. The owners at the
end (Memory, Stream, Event, Module, Function, BlasHandle) free their CUDA object once.
"""
import os
import sys
import threading

import numpy as np

from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset

from ..errors import CudaError, DTypeError, ShapeError

cdef extern from *:
    """
    #ifdef _WIN32
    #include <windows.h>
    #include <stdio.h>
    static void *ms_dlopen(const char *path) { return (void *)LoadLibraryA(path); }
    static void *ms_dlsym(void *lib, const char *name) {
        return (void *)GetProcAddress((HMODULE)lib, name);
    }
    static const char *ms_dlerror(void) {
        static char buf[64];
        snprintf(buf, sizeof buf, "Windows error %lu", (unsigned long)GetLastError());
        return buf;
    }
    #else
    #include <dlfcn.h>
    static void *ms_dlopen(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
    static void *ms_dlsym(void *lib, const char *name) { return dlsym(lib, name); }
    static const char *ms_dlerror(void) { const char *e = dlerror(); return e ? e : "unknown"; }
    #endif
    """
    void *ms_dlopen(const char *path) nogil
    void *ms_dlsym(void *lib, const char *name) nogil
    const char *ms_dlerror() nogil


# ---- the symbols (cuda.h, nvrtc.h, cublas_api.h signatures; bound by _bind_*) --------------
cdef CUresult (*_cuGetErrorName)(CUresult, const char **) noexcept nogil
cdef CUresult (*_cuGetErrorString)(CUresult, const char **) noexcept nogil
cdef CUresult (*_cuInit)(unsigned int) noexcept nogil
cdef CUresult (*_cuDriverGetVersion)(int *) noexcept nogil
cdef CUresult (*_cuDeviceGetCount)(int *) noexcept nogil
cdef CUresult (*_cuDeviceGet)(CUdevice *, int) noexcept nogil
cdef CUresult (*_cuDeviceGetName)(char *, int, CUdevice) noexcept nogil
cdef CUresult (*_cuDeviceGetAttribute)(int *, int, CUdevice) noexcept nogil
cdef CUresult (*_cuDeviceTotalMem)(size_t *, CUdevice) noexcept nogil
cdef CUresult (*_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) noexcept nogil
cdef CUresult (*_cuCtxSetCurrent)(CUcontext) noexcept nogil
cdef CUresult (*_cuMemAlloc)(CUdeviceptr *, size_t) noexcept nogil
cdef CUresult (*_cuMemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t,
                                  unsigned int) noexcept nogil
cdef CUresult (*_cuMemFree)(CUdeviceptr) noexcept nogil
cdef CUresult (*_cuMemcpy2DAsync)(const CUDA_MEMCPY2D *, CUstream) noexcept nogil
cdef CUresult (*_cuStreamCreate)(CUstream *, unsigned int) noexcept nogil
cdef CUresult (*_cuStreamDestroy)(CUstream) noexcept nogil
cdef CUresult (*_cuStreamSynchronize)(CUstream) noexcept nogil
cdef CUresult (*_cuCtxSynchronize)() noexcept nogil
cdef CUresult (*_cuStreamQuery)(CUstream) noexcept nogil
cdef CUresult (*_cuStreamWaitEvent)(CUstream, CUevent, unsigned int) noexcept nogil
cdef CUresult (*_cuEventCreate)(CUevent *, unsigned int) noexcept nogil
cdef CUresult (*_cuEventDestroy)(CUevent) noexcept nogil
cdef CUresult (*_cuEventRecord)(CUevent, CUstream) noexcept nogil
cdef CUresult (*_cuEventSynchronize)(CUevent) noexcept nogil
cdef CUresult (*_cuEventQuery)(CUevent) noexcept nogil
cdef CUresult (*_cuEventElapsedTime)(float *, CUevent, CUevent) noexcept nogil
cdef CUresult (*_cuModuleLoadData)(CUmodule *, const void *) noexcept nogil
cdef CUresult (*_cuModuleUnload)(CUmodule) noexcept nogil
cdef CUresult (*_cuModuleGetFunction)(CUfunction *, CUmodule, const char *) noexcept nogil
cdef CUresult (*_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
                                 unsigned int, unsigned int, unsigned int, unsigned int,
                                 CUstream, void **, void **) noexcept nogil

cdef const char *(*_nvrtcGetErrorString)(nvrtcResult) noexcept nogil
cdef nvrtcResult (*_nvrtcVersion)(int *, int *) noexcept nogil
cdef nvrtcResult (*_nvrtcGetNumSupportedArchs)(int *) noexcept nogil
cdef nvrtcResult (*_nvrtcGetSupportedArchs)(int *) noexcept nogil
cdef nvrtcResult (*_nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                        const char **, const char **) noexcept nogil
cdef nvrtcResult (*_nvrtcDestroyProgram)(nvrtcProgram *) noexcept nogil
cdef nvrtcResult (*_nvrtcCompileProgram)(nvrtcProgram, int, const char **) noexcept nogil
cdef nvrtcResult (*_nvrtcGetCUBINSize)(nvrtcProgram, size_t *) noexcept nogil
cdef nvrtcResult (*_nvrtcGetCUBIN)(nvrtcProgram, char *) noexcept nogil
cdef nvrtcResult (*_nvrtcGetProgramLogSize)(nvrtcProgram, size_t *) noexcept nogil
cdef nvrtcResult (*_nvrtcGetProgramLog)(nvrtcProgram, char *) noexcept nogil

cdef const char *(*_cublasGetStatusName)(cublasStatus_t) noexcept nogil
cdef const char *(*_cublasGetStatusString)(cublasStatus_t) noexcept nogil
cdef cublasStatus_t (*_cublasGetProperty)(int, int *) noexcept nogil
cdef cublasStatus_t (*_cublasCreate)(cublasHandle_t *) noexcept nogil
cdef cublasStatus_t (*_cublasDestroy)(cublasHandle_t) noexcept nogil
cdef cublasStatus_t (*_cublasSetStream)(cublasHandle_t, CUstream) noexcept nogil
cdef cublasStatus_t (*_cublasSgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                    int, int, const float *, const float *, int, const float *,
                                    int, const float *, float *, int) noexcept nogil
cdef cublasStatus_t (*_cublasDgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                    int, int, const double *, const double *, int,
                                    const double *, int, const double *, double *,
                                    int) noexcept nogil
cdef cublasStatus_t (*_cublasSgemv)(cublasHandle_t, cublasOperation_t, int, int, const float *,
                                    const float *, int, const float *, int, const float *,
                                    float *, int) noexcept nogil
cdef cublasStatus_t (*_cublasDgemv)(cublasHandle_t, cublasOperation_t, int, int,
                                    const double *, const double *, int, const double *, int,
                                    const double *, double *, int) noexcept nogil
cdef cublasStatus_t (*_cublasSdot)(cublasHandle_t, int, const float *, int, const float *, int,
                                   float *) noexcept nogil
cdef cublasStatus_t (*_cublasDdot)(cublasHandle_t, int, const double *, int, const double *,
                                   int, double *) noexcept nogil
cdef cublasStatus_t (*_cublasSgemmStridedBatched)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
    const float *, int, long long, const float *, int, long long, const float *, float *, int,
    long long, int) noexcept nogil
cdef cublasStatus_t (*_cublasDgemmStridedBatched)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const double *,
    const double *, int, long long, const double *, int, long long, const double *, double *,
    int, long long, int) noexcept nogil


# ---- the loader ---------------------------------------------------------------------------
_LOCK = threading.RLock()          # loading, cuInit and primary contexts: once each
_WINDOWS = sys.platform == "win32"
_GET = 'pip install "mshadow[cuda]"'

ctypedef int (*_binder)(_Library lib) except -1


cdef class _Library:
    """One CUDA library: where to look for it, its handle once open, or why it is not."""
    cdef readonly str what, hint, path, error
    cdef object pathfinder_name, sonames
    cdef void *handle
    cdef bint ready
    cdef _binder bind_all

    cdef inline int load(self) except -1:
        if self.ready:
            return 0
        return self._load()

    cdef int _load(self) except -1:
        with _LOCK:
            if self.ready:
                return 0
            if self.error is not None:
                raise CudaError(self.error)
            try:
                self._open()
                self.bind_all(self)
            except CudaError as e:
                self.error = str(e)
                raise
            self.ready = True
        return 0

    cdef int _open(self) except -1:
        tried = []
        for path in self._candidates(tried):
            handle = ms_dlopen(os.fsencode(path))
            if handle != NULL:
                self.handle, self.path = handle, path
                return 0
            why = ms_dlerror().decode(errors="replace")
            tried.append(f"{path}: {why.removeprefix(path + ': ')}")
        where = "\n  ".join(tried) if tried else "(nothing to try on this platform)"
        raise CudaError(f"{self.what} could not be loaded. Tried:\n  {where}\n{self.hint}")

    def _candidates(self, tried):
        """Paths and sonames to open, in order; notes on what found nothing go to ``tried``."""
        if self.pathfinder_name:
            try:
                from cuda.pathfinder import load_nvidia_dynamic_lib
            except ImportError:
                tried.append("cuda.pathfinder: not installed")
            else:
                try:
                    found = load_nvidia_dynamic_lib(self.pathfinder_name).abs_path
                except Exception as e:     # DynamicLibNotFoundError and its kin
                    tried.append(f"cuda.pathfinder.load_nvidia_dynamic_lib("
                                 f"{self.pathfinder_name!r}): {type(e).__name__}: {e}")
                else:
                    if found:
                        yield found
            for var in ("CUDA_HOME", "CUDA_PATH"):
                home = os.environ.get(var)
                if not home:
                    continue
                for sub in (("bin",) if _WINDOWS else ("lib64", "lib")):
                    for soname in self.sonames:
                        path = os.path.join(home, sub, soname)
                        if os.path.exists(path):
                            yield path
                        else:
                            tried.append(f"{path} (${var}): no such file")
        yield from self.sonames                            # the system loader's search

    cdef int bind(self, void **slot, const char *name, bint required=True) except -1:
        slot[0] = ms_dlsym(self.handle, name)
        if slot[0] == NULL and required:
            raise CudaError(f"{self.what} at {self.path} has no symbol {name.decode()}: it is "
                            f"older than mshadow needs.\n{self.hint}")
        return 0


cdef _Library _library(str what, object pathfinder_name, object sonames, str hint,
                       _binder bind_all):
    cdef _Library lib = _Library.__new__(_Library)
    lib.what, lib.pathfinder_name, lib.sonames, lib.hint = what, pathfinder_name, sonames, hint
    lib.bind_all = bind_all
    return lib


cdef int _bind_driver(_Library L) except -1:
    L.bind(<void **>&_cuGetErrorName, b"cuGetErrorName")
    L.bind(<void **>&_cuGetErrorString, b"cuGetErrorString")
    L.bind(<void **>&_cuInit, b"cuInit")
    L.bind(<void **>&_cuDriverGetVersion, b"cuDriverGetVersion")
    L.bind(<void **>&_cuDeviceGetCount, b"cuDeviceGetCount")
    L.bind(<void **>&_cuDeviceGet, b"cuDeviceGet")
    L.bind(<void **>&_cuDeviceGetName, b"cuDeviceGetName")
    L.bind(<void **>&_cuDeviceGetAttribute, b"cuDeviceGetAttribute")
    L.bind(<void **>&_cuDeviceTotalMem, b"cuDeviceTotalMem_v2")
    L.bind(<void **>&_cuDevicePrimaryCtxRetain, b"cuDevicePrimaryCtxRetain")
    L.bind(<void **>&_cuCtxSetCurrent, b"cuCtxSetCurrent")
    L.bind(<void **>&_cuMemAlloc, b"cuMemAlloc_v2")          # cuda.h: #define cuMemAlloc ..._v2
    L.bind(<void **>&_cuMemAllocPitch, b"cuMemAllocPitch_v2")
    L.bind(<void **>&_cuMemFree, b"cuMemFree_v2")
    L.bind(<void **>&_cuMemcpy2DAsync, b"cuMemcpy2DAsync_v2")
    L.bind(<void **>&_cuStreamCreate, b"cuStreamCreate")
    L.bind(<void **>&_cuStreamDestroy, b"cuStreamDestroy_v2")
    L.bind(<void **>&_cuStreamSynchronize, b"cuStreamSynchronize")
    L.bind(<void **>&_cuCtxSynchronize, b"cuCtxSynchronize")
    L.bind(<void **>&_cuStreamQuery, b"cuStreamQuery")
    L.bind(<void **>&_cuStreamWaitEvent, b"cuStreamWaitEvent")
    L.bind(<void **>&_cuEventCreate, b"cuEventCreate")
    L.bind(<void **>&_cuEventDestroy, b"cuEventDestroy_v2")
    L.bind(<void **>&_cuEventRecord, b"cuEventRecord")
    L.bind(<void **>&_cuEventSynchronize, b"cuEventSynchronize")
    L.bind(<void **>&_cuEventQuery, b"cuEventQuery")
    L.bind(<void **>&_cuEventElapsedTime, b"cuEventElapsedTime")
    L.bind(<void **>&_cuModuleLoadData, b"cuModuleLoadData")
    L.bind(<void **>&_cuModuleUnload, b"cuModuleUnload")
    L.bind(<void **>&_cuModuleGetFunction, b"cuModuleGetFunction")
    L.bind(<void **>&_cuLaunchKernel, b"cuLaunchKernel")
    return 0


cdef int _bind_nvrtc(_Library L) except -1:
    L.bind(<void **>&_nvrtcGetErrorString, b"nvrtcGetErrorString")
    L.bind(<void **>&_nvrtcVersion, b"nvrtcVersion")
    L.bind(<void **>&_nvrtcGetNumSupportedArchs, b"nvrtcGetNumSupportedArchs")
    L.bind(<void **>&_nvrtcGetSupportedArchs, b"nvrtcGetSupportedArchs")
    L.bind(<void **>&_nvrtcCreateProgram, b"nvrtcCreateProgram")
    L.bind(<void **>&_nvrtcDestroyProgram, b"nvrtcDestroyProgram")
    L.bind(<void **>&_nvrtcCompileProgram, b"nvrtcCompileProgram")
    L.bind(<void **>&_nvrtcGetCUBINSize, b"nvrtcGetCUBINSize")
    L.bind(<void **>&_nvrtcGetCUBIN, b"nvrtcGetCUBIN")
    L.bind(<void **>&_nvrtcGetProgramLogSize, b"nvrtcGetProgramLogSize")
    L.bind(<void **>&_nvrtcGetProgramLog, b"nvrtcGetProgramLog")
    return 0


cdef int _bind_cublas(_Library L) except -1:
    # the status names came in cuBLAS 11.4; without them the check prints the number
    L.bind(<void **>&_cublasGetStatusName, b"cublasGetStatusName", False)
    L.bind(<void **>&_cublasGetStatusString, b"cublasGetStatusString", False)
    L.bind(<void **>&_cublasGetProperty, b"cublasGetProperty")
    L.bind(<void **>&_cublasCreate, b"cublasCreate_v2")     # cublas_v2.h: the _v2 API
    L.bind(<void **>&_cublasDestroy, b"cublasDestroy_v2")
    L.bind(<void **>&_cublasSetStream, b"cublasSetStream_v2")
    L.bind(<void **>&_cublasSgemm, b"cublasSgemm_v2")
    L.bind(<void **>&_cublasDgemm, b"cublasDgemm_v2")
    L.bind(<void **>&_cublasSgemv, b"cublasSgemv_v2")
    L.bind(<void **>&_cublasDgemv, b"cublasDgemv_v2")
    L.bind(<void **>&_cublasSdot, b"cublasSdot_v2")
    L.bind(<void **>&_cublasDdot, b"cublasDdot_v2")
    L.bind(<void **>&_cublasSgemmStridedBatched, b"cublasSgemmStridedBatched")
    L.bind(<void **>&_cublasDgemmStridedBatched, b"cublasDgemmStridedBatched")
    return 0


cdef _Library _DRIVER = _library(
    "The CUDA driver (libcuda)", None,
    ("nvcuda.dll",) if _WINDOWS else ("libcuda.so.1", "libcuda.so"),
    "It comes with NVIDIA's display driver, not with pip: this machine needs an NVIDIA GPU "
    "and its driver.", _bind_driver)
cdef _Library _NVRTC = _library(
    "NVRTC (the CUDA runtime compiler, libnvrtc)", "nvrtc",
    ("nvrtc64_130_0.dll", "nvrtc64_120_0.dll") if _WINDOWS
    else ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"),
    f"Install it with {_GET} (NVIDIA's nvidia-cuda-nvrtc wheel), or install a CUDA toolkit "
    f"and set CUDA_HOME to it.", _bind_nvrtc)
cdef _Library _CUBLAS = _library(
    "cuBLAS (libcublas)", "cublas",
    ("cublas64_13.dll", "cublas64_12.dll") if _WINDOWS
    else ("libcublas.so.13", "libcublas.so.12", "libcublas.so"),
    f"Install it with {_GET} (NVIDIA's nvidia-cublas wheel), or install a CUDA toolkit and "
    f"set CUDA_HOME to it.", _bind_cublas)


# ---- status -> CudaError: one check per library ---------------------------------------------
cdef int check_status(CUresult status, const char *call) except -1:
    """A driver API status: CUDA_SUCCESS, or CudaError with cuGetErrorName/String's words."""
    cdef const char *name = NULL
    cdef const char *text = NULL
    if status == CUDA_SUCCESS:
        return 0
    if _cuGetErrorName(status, &name) != CUDA_SUCCESS or name == NULL:
        name = b"CUDA_ERROR_UNKNOWN"
    if _cuGetErrorString(status, &text) != CUDA_SUCCESS or text == NULL:
        text = b"unrecognized error code"
    raise CudaError(f"{call.decode()} failed: {name.decode()} ({text.decode()}) [{status}]",
                    status)


cdef int check_nvrtc(nvrtcResult status, const char *call) except -1:
    if status == NVRTC_SUCCESS:
        return 0
    raise CudaError(f"{call.decode()} failed: {_nvrtcGetErrorString(status).decode()} "
                    f"[{status}]", status)


cdef int check_cublas(cublasStatus_t status, const char *call) except -1:
    if status == CUBLAS_STATUS_SUCCESS:
        return 0
    if _cublasGetStatusName != NULL and _cublasGetStatusString != NULL:
        words = (f"{_cublasGetStatusName(status).decode()} "
                 f"({_cublasGetStatusString(status).decode()})")
    else:
        words = "CUBLAS_STATUS_UNKNOWN"
    raise CudaError(f"{call.decode()} failed: {words} [{status}]", status)


# ---- driver: init, devices, primary contexts ------------------------------------------------
cdef bint _initialized = False
cdef str _init_error = None
cdef int _init_status = CUDA_SUCCESS
cdef dict _contexts = {}          # device ordinal -> its retained primary context (address)


cdef int init() except -1:
    """Open the driver and cuInit it, once; a failure is remembered and raised again."""
    global _initialized, _init_error, _init_status
    if _initialized:
        return 0
    with _LOCK:
        if _initialized:
            return 0
        if _init_error is None:
            _DRIVER.load()
            try:
                check_status(_cuInit(0), b"cuInit")
            except CudaError as e:
                _init_error, _init_status = str(e), e.status
            else:
                _initialized = True
                return 0
        raise CudaError(_init_error, _init_status)


cdef CUdevice _device(int ordinal) except? -1:
    cdef CUdevice dev
    init()
    check_status(_cuDeviceGet(&dev, ordinal), b"cuDeviceGet")
    return dev


cdef int activate(int device) except -1:
    cdef CUcontext ctx = NULL
    cdef uintptr_t held
    init()
    held = _contexts.get(device, 0)
    if held == 0:
        with _LOCK:
            held = _contexts.get(device, 0)
            if held == 0:
                # retained for the life of the process, like the runtime API's
                check_status(_cuDevicePrimaryCtxRetain(&ctx, _device(device)),
                             b"cuDevicePrimaryCtxRetain")
                held = <uintptr_t>ctx
                _contexts[device] = held
    check_status(_cuCtxSetCurrent(<CUcontext>held), b"cuCtxSetCurrent")
    return 0


cdef int deviceGetAttribute(int attribute, CUdevice device) except? -1:
    cdef int value = 0
    init()
    check_status(_cuDeviceGetAttribute(&value, attribute, device), b"cuDeviceGetAttribute")
    return value


# ---- driver: memory, streams, events, modules, launches -------------------------------------
cdef CUdeviceptr memAlloc(size_t nbytes) except? 0:
    cdef CUdeviceptr ptr = 0
    cdef CUresult st
    init()
    with nogil:
        st = _cuMemAlloc(&ptr, nbytes)
    check_status(st, b"cuMemAlloc")
    return ptr


cdef CUdeviceptr memAllocPitch(size_t *pitch, size_t width_bytes, size_t height,
                               unsigned int element_bytes) except? 0:
    cdef CUdeviceptr ptr = 0
    cdef CUresult st
    init()
    with nogil:
        st = _cuMemAllocPitch(&ptr, pitch, width_bytes, height, element_bytes)
    check_status(st, b"cuMemAllocPitch")
    return ptr


cdef int memFree(CUdeviceptr ptr) except -1:
    cdef CUresult st
    init()
    with nogil:
        st = _cuMemFree(ptr)
    return check_status(st, b"cuMemFree")


cdef int memcpy2DAsync(const CUDA_MEMCPY2D *copy, CUstream stream) except -1:
    cdef CUresult st
    init()
    with nogil:
        st = _cuMemcpy2DAsync(copy, stream)
    return check_status(st, b"cuMemcpy2DAsync")


cdef CUstream streamCreate(unsigned int flags) except NULL:
    cdef CUstream stream = NULL
    init()
    check_status(_cuStreamCreate(&stream, flags), b"cuStreamCreate")
    return stream


cdef int streamDestroy(CUstream stream) except -1:
    init()
    return check_status(_cuStreamDestroy(stream), b"cuStreamDestroy")


cdef int streamSynchronize(CUstream stream) except -1:
    cdef CUresult st
    init()
    with nogil:
        st = _cuStreamSynchronize(stream)
    return check_status(st, b"cuStreamSynchronize")


cdef int ctxSynchronize() except -1:
    cdef CUresult st
    init()
    with nogil:
        st = _cuCtxSynchronize()
    return check_status(st, b"cuCtxSynchronize")


cdef bint _done(CUresult st, const char *what) except -1:
    """A query's answer: False while the work is pending, True once it is done."""
    if st == CUDA_ERROR_NOT_READY:
        return False
    check_status(st, what)
    return True


cdef bint streamQuery(CUstream stream) except -1:
    init()
    return _done(_cuStreamQuery(stream), b"cuStreamQuery")


cdef int streamWaitEvent(CUstream stream, CUevent event) except -1:
    init()
    return check_status(_cuStreamWaitEvent(stream, event, 0), b"cuStreamWaitEvent")


cdef CUevent eventCreate(unsigned int flags) except NULL:
    cdef CUevent event = NULL
    init()
    check_status(_cuEventCreate(&event, flags), b"cuEventCreate")
    return event


cdef int eventDestroy(CUevent event) except -1:
    init()
    return check_status(_cuEventDestroy(event), b"cuEventDestroy")


cdef int eventRecord(CUevent event, CUstream stream) except -1:
    init()
    return check_status(_cuEventRecord(event, stream), b"cuEventRecord")


cdef int eventSynchronize(CUevent event) except -1:
    cdef CUresult st
    init()
    with nogil:
        st = _cuEventSynchronize(event)
    return check_status(st, b"cuEventSynchronize")


cdef bint eventQuery(CUevent event) except -1:
    init()
    return _done(_cuEventQuery(event), b"cuEventQuery")


cdef float eventElapsedTime(CUevent start, CUevent end) except? -1:
    cdef float ms = 0
    init()
    check_status(_cuEventElapsedTime(&ms, start, end), b"cuEventElapsedTime")
    return ms


cdef CUmodule moduleLoadData(const void *image) except NULL:
    cdef CUmodule module = NULL
    cdef CUresult st
    init()
    with nogil:
        st = _cuModuleLoadData(&module, image)
    check_status(st, b"cuModuleLoadData")
    return module


cdef int moduleUnload(CUmodule module) except -1:
    init()
    return check_status(_cuModuleUnload(module), b"cuModuleUnload")


cdef CUfunction moduleGetFunction(CUmodule module, const char *name) except NULL:
    cdef CUfunction f = NULL
    init()
    check_status(_cuModuleGetFunction(&f, module, name), b"cuModuleGetFunction")
    return f


cdef int launchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                      unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                      unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                      void **params) except -1:
    cdef CUresult st
    init()
    with nogil:
        st = _cuLaunchKernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                             shared_bytes, stream, params, NULL)
    return check_status(st, b"cuLaunchKernel")


# ---- NVRTC ----------------------------------------------------------------------------------
cdef nvrtcProgram createProgram(const char *source, const char *name) except NULL:
    cdef nvrtcProgram prog = NULL
    _NVRTC.load()
    check_nvrtc(_nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL), b"nvrtcCreateProgram")
    return prog


cdef int compileProgram(nvrtcProgram prog, int n, const char **options) except -1:
    cdef nvrtcResult st
    _NVRTC.load()
    with nogil:
        st = _nvrtcCompileProgram(prog, n, options)
    return check_nvrtc(st, b"nvrtcCompileProgram")


cdef bytes getCUBIN(nvrtcProgram prog):
    cdef size_t size = 0
    _NVRTC.load()
    check_nvrtc(_nvrtcGetCUBINSize(prog, &size), b"nvrtcGetCUBINSize")
    out = bytearray(size)
    if size:
        check_nvrtc(_nvrtcGetCUBIN(prog, <char *>out), b"nvrtcGetCUBIN")
    return bytes(out)


cdef str getProgramLog(nvrtcProgram prog):
    cdef size_t size = 0
    _NVRTC.load()
    check_nvrtc(_nvrtcGetProgramLogSize(prog, &size), b"nvrtcGetProgramLogSize")
    out = bytearray(size + 1)
    check_nvrtc(_nvrtcGetProgramLog(prog, <char *>out), b"nvrtcGetProgramLog")
    return bytes(out).split(b"\0", 1)[0].decode(errors="replace")


cdef int destroyProgram(nvrtcProgram *prog) except -1:
    _NVRTC.load()
    return check_nvrtc(_nvrtcDestroyProgram(prog), b"nvrtcDestroyProgram")


# ---- cuBLAS (column-major, host scalars: CUBLAS_POINTER_MODE_HOST, the default) -------------
cdef cublasHandle_t cublasCreate() except NULL:
    cdef cublasHandle_t handle = NULL
    _CUBLAS.load()
    check_cublas(_cublasCreate(&handle), b"cublasCreate")
    return handle


cdef int cublasDestroy(cublasHandle_t handle) except -1:
    _CUBLAS.load()
    return check_cublas(_cublasDestroy(handle), b"cublasDestroy")


cdef int cublasSetStream(cublasHandle_t handle, CUstream stream) except -1:
    _CUBLAS.load()
    return check_cublas(_cublasSetStream(handle, stream), b"cublasSetStream")


cdef int sgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
               int m, int n, int k, float alpha, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc) except -1:
    cdef cublasStatus_t st
    _CUBLAS.load()
    with nogil:
        st = _cublasSgemm(handle, transa, transb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc)
    return check_cublas(st, b"cublasSgemm")


cdef int dgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
               int m, int n, int k, double alpha, const double *A, int lda, const double *B,
               int ldb, double beta, double *C, int ldc) except -1:
    cdef cublasStatus_t st
    _CUBLAS.load()
    with nogil:
        st = _cublasDgemm(handle, transa, transb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc)
    return check_cublas(st, b"cublasDgemm")


cdef int sgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, float alpha,
               const float *A, int lda, const float *x, int incx, float beta, float *y,
               int incy) except -1:
    cdef cublasStatus_t st
    _CUBLAS.load()
    with nogil:
        st = _cublasSgemv(handle, trans, m, n, &alpha, A, lda, x, incx, &beta, y, incy)
    return check_cublas(st, b"cublasSgemv")


cdef int dgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, double alpha,
               const double *A, int lda, const double *x, int incx, double beta, double *y,
               int incy) except -1:
    cdef cublasStatus_t st
    _CUBLAS.load()
    with nogil:
        st = _cublasDgemv(handle, trans, m, n, &alpha, A, lda, x, incx, &beta, y, incy)
    return check_cublas(st, b"cublasDgemv")


cdef float sdot(cublasHandle_t handle, int n, const float *x, int incx, const float *y,
                int incy) except? -1:
    cdef cublasStatus_t st
    cdef float result = 0
    _CUBLAS.load()
    with nogil:
        st = _cublasSdot(handle, n, x, incx, y, incy, &result)
    check_cublas(st, b"cublasSdot")
    return result


cdef double ddot(cublasHandle_t handle, int n, const double *x, int incx, const double *y,
                 int incy) except? -1:
    cdef cublasStatus_t st
    cdef double result = 0
    _CUBLAS.load()
    with nogil:
        st = _cublasDdot(handle, n, x, incx, y, incy, &result)
    check_cublas(st, b"cublasDdot")
    return result


cdef int sgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                             cublasOperation_t transb, int m, int n, int k, float alpha,
                             const float *A, int lda, int64_t strideA, const float *B, int ldb,
                             int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                             int batch) except -1:
    cdef cublasStatus_t st
    _CUBLAS.load()
    with nogil:
        st = _cublasSgemmStridedBatched(handle, transa, transb, m, n, k, &alpha, A, lda,
                                        strideA, B, ldb, strideB, &beta, C, ldc, strideC, batch)
    return check_cublas(st, b"cublasSgemmStridedBatched")


cdef int dgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                             cublasOperation_t transb, int m, int n, int k, double alpha,
                             const double *A, int lda, int64_t strideA, const double *B,
                             int ldb, int64_t strideB, double beta, double *C, int ldc,
                             int64_t strideC, int batch) except -1:
    cdef cublasStatus_t st
    _CUBLAS.load()
    with nogil:
        st = _cublasDgemmStridedBatched(handle, transa, transb, m, n, k, &alpha, A, lda,
                                        strideA, B, ldb, strideB, &beta, C, ldc, strideC, batch)
    return check_cublas(st, b"cublasDgemmStridedBatched")


include "_api.pxi"
