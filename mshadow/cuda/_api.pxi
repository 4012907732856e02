# The Python face of mshadow.cuda._cuda (included by _cuda.pyx): facts about the installation
# and the devices, NVRTC's compile, and the owners of CUDA objects. Everything here goes through
# the wrappers above; nothing opens a library itself.

# ---- facts ----------------------------------------------------------------------------------
def device_count():
    """How many CUDA devices the driver sees (0 when it has a driver but no device).

    Raises CudaError when there is no driver to ask."""
    cdef int n = 0
    try:
        init()
    except CudaError as e:
        if e.status == CUDA_ERROR_NO_DEVICE:
            return 0
        raise
    check_status(_cuDeviceGetCount(&n), b"cuDeviceGetCount")
    return n


def unavailable_reason():
    """Why available() is False (the driver's or the loader's words), or None when it is True."""
    try:
        if device_count() > 0:
            return None
        return "the CUDA driver sees no device"
    except CudaError as e:
        return str(e)


def available():
    """True when a CUDA driver is installed and sees at least one device; never raises.

    unavailable_reason() says why not. NVRTC and cuBLAS are not needed for this."""
    return unavailable_reason() is None


is_available = available


def driver_version():
    """The CUDA version the installed driver supports, as (major, minor): (13, 0)."""
    cdef int v = 0
    _DRIVER.load()
    check_status(_cuDriverGetVersion(&v), b"cuDriverGetVersion")
    return (v // 1000, v % 1000 // 10)


def nvrtc_version():
    """The version of the NVRTC library found, as (major, minor)."""
    cdef int major = 0, minor = 0
    _NVRTC.load()
    check_nvrtc(_nvrtcVersion(&major, &minor), b"nvrtcVersion")
    return (major, minor)


def nvrtc_supported_archs():
    """The real architectures this NVRTC compiles for, as ints: (75, 80, 86, ..., 120)."""
    cdef int n = 0
    _NVRTC.load()
    check_nvrtc(_nvrtcGetNumSupportedArchs(&n), b"nvrtcGetNumSupportedArchs")
    cdef int *archs = <int *>malloc(max(n, 1) * sizeof(int))
    if archs == NULL:
        raise MemoryError()
    try:
        check_nvrtc(_nvrtcGetSupportedArchs(archs), b"nvrtcGetSupportedArchs")
        return tuple(archs[i] for i in range(n))
    finally:
        free(archs)


def cublas_version():
    """The version of the cuBLAS library found, as (major, minor, patch)."""
    cdef int major = 0, minor = 0, patch = 0
    _CUBLAS.load()
    check_cublas(_cublasGetProperty(MAJOR_VERSION, &major), b"cublasGetProperty")
    check_cublas(_cublasGetProperty(MINOR_VERSION, &minor), b"cublasGetProperty")
    check_cublas(_cublasGetProperty(PATCH_LEVEL, &patch), b"cublasGetProperty")
    return (major, minor, patch)


# device_attributes' integer entries: key -> CUdevice_attribute
_ATTRIBUTES = (
    ("multiprocessor_count", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    ("max_threads_per_block", CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    ("max_threads_per_multiprocessor", CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
    ("warp_size", CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    ("max_shared_memory_per_block", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    ("max_shared_memory_per_block_optin", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    ("max_registers_per_block", CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
    ("total_constant_memory", CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
    ("l2_cache_size", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    ("max_pitch", CU_DEVICE_ATTRIBUTE_MAX_PITCH),
    ("texture_pitch_alignment", CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT),
    ("pci_bus_id", CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
    ("integrated", CU_DEVICE_ATTRIBUTE_INTEGRATED),
    ("unified_addressing", CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
)
# and the entries that are triples or pairs of attributes
_ATTRIBUTE_TUPLES = (
    ("compute_capability", (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
    ("max_block_dim", (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)),
    ("max_grid_dim", (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)),
)


def device_attributes(int device=0):
    """What the launch and memory code needs to know about a device, as a dict: name,
    compute_capability (major, minor), total_memory (bytes), multiprocessor_count,
    max_threads_per_block, max_block_dim and max_grid_dim (x, y, z), warp_size, shared memory
    and register limits, max_pitch, texture_pitch_alignment, ..."""
    cdef CUdevice dev = _device(device)
    cdef char name[256]
    cdef size_t total = 0
    check_status(_cuDeviceGetName(name, sizeof(name), dev), b"cuDeviceGetName")
    check_status(_cuDeviceTotalMem(&total, dev), b"cuDeviceTotalMem")
    out = {"name": name.decode(errors="replace"), "total_memory": total}
    for key, attrs in _ATTRIBUTE_TUPLES:
        out[key] = tuple(deviceGetAttribute(a, dev) for a in attrs)
    for key, attr in _ATTRIBUTES:
        out[key] = deviceGetAttribute(attr, dev)
    return out


# ---- NVRTC ----------------------------------------------------------------------------------
def compile_cubin(source, arch="sm_90", options=(), name="kernel.cu"):
    """Compile CUDA C++ ``source`` with NVRTC to a CUBIN (bytes, an ELF image) for ``arch``.

    ``arch`` is a real architecture (``sm_80``, ``sm_90``, ...; a virtual ``compute_XX`` gives
    no CUBIN); ``options`` are more NVRTC options (``("--fmad=false", "-default-device")``);
    ``name`` is the file name NVRTC's messages use. A compile error raises CudaError whose
    message carries NVRTC's log. Needs NVRTC only (no GPU, no driver); thread-safe, and the
    compile runs without the GIL."""
    if isinstance(options, (str, bytes)):
        raise TypeError(f"compile_cubin: options is a sequence of strings, not one string "
                        f"({options!r}); write options=({options!r},)")
    src = source.encode() if isinstance(source, str) else bytes(source)
    opts = [f"--gpu-architecture={arch}".encode()] + [
        o.encode() if isinstance(o, str) else bytes(o) for o in options]
    cdef const char **copts = <const char **>malloc(len(opts) * sizeof(char *))
    if copts == NULL:
        raise MemoryError()
    for i, o in enumerate(opts):
        copts[i] = <const char *>o
    cdef nvrtcProgram prog = NULL
    try:
        prog = createProgram(src, name.encode())
        try:
            compileProgram(prog, len(opts), copts)
        except CudaError as e:
            log = getProgramLog(prog).strip()
            raise CudaError(f"NVRTC could not compile {name} for {arch}: {e}\n{log}",
                            e.status) from None
        cubin = getCUBIN(prog)
    finally:
        free(copts)
        if prog != NULL:
            destroyProgram(&prog)
    if not cubin:
        raise CudaError(f"NVRTC made no CUBIN for {arch}: a virtual architecture "
                        f"(compute_XX) gives PTX only; ask for a real one (sm_XX)")
    return cubin


# ---- owners ---------------------------------------------------------------------------------
cdef bint _quiet_activate(int device) noexcept:
    """For __dealloc__, which cannot raise: make the device's context current if it exists;
    False when there is none (then the process is ending, or nothing was ever made)."""
    cdef uintptr_t held = 0
    if _initialized:
        try:
            held = _contexts.get(device, 0)
        except Exception:
            return False
    return held != 0 and _cuCtxSetCurrent(<CUcontext>held) == CUDA_SUCCESS


cdef CUstream _stream(Stream stream):
    """A Stream's handle, or the legacy default stream for None."""
    return NULL if stream is None else stream.handle


cdef CUdeviceptr _dptr(object p) except? 0:
    """A device address from a Memory or an int (an address inside one)."""
    if isinstance(p, Memory):
        return (<Memory>p).ptr
    return <CUdeviceptr>p


def _host_rows(arr, bint writable):
    """(address, rows, row bytes, pitch) of a 1-D or 2-D numpy array with contiguous rows."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected a numpy array, got {type(arr).__name__}")
    if arr.ndim not in (1, 2) or arr.strides[-1] != arr.itemsize:
        raise ShapeError(f"a copy needs a 1-D or 2-D array with contiguous rows, got shape "
                         f"{arr.shape} and strides {arr.strides}")
    if writable and not arr.flags.writeable:
        raise ValueError("the destination array is read-only")
    rows = arr.shape[0] if arr.ndim == 2 else 1
    row_bytes = arr.shape[-1] * arr.itemsize
    pitch = arr.strides[0] if arr.ndim == 2 else row_bytes
    return arr.__array_interface__["data"][0], rows, row_bytes, pitch


cdef class Memory:
    """Device memory: ``Memory(nbytes, device)`` (cuMemAlloc) or ``Memory.pitched(width_bytes,
    height, element_bytes, device)`` (cuMemAllocPitch: each row starts at a multiple of
    ``pitch``). Freed by free() or when collected."""

    def __init__(self, size_t nbytes, int device=0):
        if self.ptr:
            raise ValueError("Memory is allocated once")
        activate(device)
        self.device = device
        self.ptr = memAlloc(nbytes)
        self.nbytes = self.width = self.pitch = nbytes
        self.height = 1

    @staticmethod
    def pitched(size_t width_bytes, size_t height, unsigned int element_bytes=4, int device=0):
        """Rows of ``width_bytes`` each starting at a multiple of ``pitch`` (element_bytes:
        the widest access, 4, 8 or 16, which sets the alignment the driver picks)."""
        cdef Memory m = Memory.__new__(Memory)
        cdef size_t pitch = 0
        activate(device)
        m.device = device
        m.ptr = memAllocPitch(&pitch, width_bytes, height, element_bytes)
        m.pitch, m.width, m.height, m.nbytes = pitch, width_bytes, height, pitch * height
        return m

    @property
    def address(self):
        """The device address (0 once freed)."""
        return self.ptr

    def free(self):
        """Release the memory now (a second call does nothing)."""
        if self.ptr:
            activate(self.device)
            ptr, self.ptr = self.ptr, 0
            memFree(ptr)

    def __dealloc__(self):
        if self.ptr and _quiet_activate(self.device):
            _cuMemFree(self.ptr)

    def copy_from_host(self, arr, Stream stream=None):
        """Copy a 1-D or 2-D numpy array (rows contiguous) into the first rows, and wait."""
        _copy(self, arr, False, stream)

    def copy_to_host(self, arr, Stream stream=None):
        """Copy the first rows into a writable numpy array of that layout, and wait."""
        _copy(self, arr, True, stream)


cdef int _copy(Memory self, arr, bint to_host, Stream stream) except -1:
    """Memory.copy_from_host / copy_to_host: one cuMemcpy2DAsync, then a wait."""
    cdef CUDA_MEMCPY2D c
    cdef uintptr_t host
    if not self.ptr:
        raise ValueError("the device memory was freed")
    addr, rows, row_bytes, pitch = _host_rows(arr, to_host)
    if self.height == 1 and arr.flags.c_contiguous:
        rows, row_bytes, pitch = 1, arr.nbytes, arr.nbytes    # linear memory: one row
    if rows > self.height or row_bytes > self.width:
        raise ShapeError(f"{rows} rows of {row_bytes} bytes do not fit the device memory's "
                         f"{self.height} rows of {self.width} bytes")
    host = addr
    memset(&c, 0, sizeof(c))
    c.WidthInBytes, c.Height = row_bytes, rows
    if to_host:
        c.srcMemoryType, c.srcDevice, c.srcPitch = CU_MEMORYTYPE_DEVICE, self.ptr, self.pitch
        c.dstMemoryType, c.dstHost, c.dstPitch = CU_MEMORYTYPE_HOST, <void *>host, pitch
    else:
        c.srcMemoryType, c.srcHost, c.srcPitch = CU_MEMORYTYPE_HOST, <void *>host, pitch
        c.dstMemoryType, c.dstDevice, c.dstPitch = CU_MEMORYTYPE_DEVICE, self.ptr, self.pitch
    activate(self.device)
    memcpy2DAsync(&c, _stream(stream))
    streamSynchronize(_stream(stream))   # the host array need not outlive this call
    return 0


def copy_2d(size_t dst, size_t dst_pitch, bint dst_device, size_t src, size_t src_pitch,
            bint src_device, size_t width_bytes, size_t height, Stream stream=None,
            int device=0):
    """``height`` rows of ``width_bytes`` from address ``src`` (rows ``src_pitch`` bytes
    apart; on the device when ``src_device``, else host memory) to ``dst``: one
    cuMemcpy2DAsync, then a wait on ``stream`` (the caller keeps both sides alive)."""
    cdef CUDA_MEMCPY2D c
    if height == 0 or width_bytes == 0:
        return
    if (height > 1 and (src_pitch < width_bytes or dst_pitch < width_bytes)) or not (src and dst):
        raise ValueError(f"copy_2d: rows of {width_bytes} bytes at pitches {dst_pitch} and "
                         f"{src_pitch} (the rows must fit their pitch; addresses not 0)")
    memset(&c, 0, sizeof(c))
    c.WidthInBytes, c.Height = width_bytes, height
    if src_device:
        c.srcMemoryType, c.srcDevice = CU_MEMORYTYPE_DEVICE, <CUdeviceptr> src
    else:
        c.srcMemoryType, c.srcHost = CU_MEMORYTYPE_HOST, <void *> src
    if dst_device:
        c.dstMemoryType, c.dstDevice = CU_MEMORYTYPE_DEVICE, <CUdeviceptr> dst
    else:
        c.dstMemoryType, c.dstHost = CU_MEMORYTYPE_HOST, <void *> dst
    c.srcPitch = src_pitch if height > 1 else width_bytes
    c.dstPitch = dst_pitch if height > 1 else width_bytes
    activate(device)
    memcpy2DAsync(&c, _stream(stream))
    streamSynchronize(_stream(stream))


def synchronize(int device=0):
    """Wait for all work on ``device`` (cuCtxSynchronize)."""
    activate(device)
    ctxSynchronize()


cdef class Stream:
    """A CUDA stream on a device (cuStreamCreate); ``non_blocking`` streams do not wait for
    the legacy default stream."""

    def __init__(self, int device=0, bint non_blocking=True):
        activate(device)
        self.device = device
        self.handle = streamCreate(CU_STREAM_NON_BLOCKING if non_blocking else 0)

    @property
    def address(self):
        """The CUstream handle as an int (0 once closed)."""
        return <uintptr_t>self.handle

    def synchronize(self):
        """Wait until the work queued on the stream is done."""
        streamSynchronize(self.handle)

    def query(self):
        """True when the work queued on the stream is done."""
        return streamQuery(self.handle)

    def wait_event(self, Event event not None):
        """Make later work on this stream wait for ``event``."""
        streamWaitEvent(self.handle, event.handle)

    def close(self):
        """Destroy the stream now (a second call does nothing)."""
        if self.handle != NULL:
            handle, self.handle = <uintptr_t>self.handle, NULL
            streamDestroy(<CUstream>handle)

    def __dealloc__(self):
        if self.handle != NULL and _quiet_activate(self.device):
            _cuStreamDestroy(self.handle)


cdef class Event:
    """A CUDA event (cuEventCreate); ``timing=False`` makes a cheaper one without timestamps."""

    def __init__(self, int device=0, bint timing=True):
        activate(device)
        self.device = device
        self.handle = eventCreate(CU_EVENT_DEFAULT if timing else CU_EVENT_DISABLE_TIMING)

    def record(self, Stream stream=None):
        """Record the event on ``stream`` (None: the legacy default stream)."""
        eventRecord(self.handle, _stream(stream))

    def synchronize(self):
        """Wait until the work before the recorded event is done."""
        eventSynchronize(self.handle)

    def query(self):
        """True when the work before the recorded event is done."""
        return eventQuery(self.handle)

    def close(self):
        """Destroy the event now (a second call does nothing)."""
        if self.handle != NULL:
            handle, self.handle = <uintptr_t>self.handle, NULL
            eventDestroy(<CUevent>handle)

    def __dealloc__(self):
        if self.handle != NULL and _quiet_activate(self.device):
            _cuEventDestroy(self.handle)


def elapsed_time(Event start not None, Event end not None):
    """Milliseconds between two recorded, completed events (cuEventElapsedTime)."""
    return eventElapsedTime(start.handle, end.handle)


cdef class Module:
    """A CUBIN (or PTX) image loaded on a device (cuModuleLoadData)."""

    def __init__(self, image, int device=0):
        data = bytes(image)
        activate(device)
        self.device = device
        self.handle = moduleLoadData(<const char *>data)

    def get_function(self, str name):
        """The kernel ``name`` (an ``extern "C"`` name, or the mangled one)."""
        if self.handle == NULL:
            raise ValueError("the module was unloaded")
        cdef Function f = Function.__new__(Function)
        activate(self.device)
        f.handle = moduleGetFunction(self.handle, name.encode())
        f.module, f.name = self, name
        return f

    def unload(self):
        """Unload the module now (its functions can no longer be launched)."""
        if self.handle != NULL:
            activate(self.device)
            handle, self.handle = <uintptr_t>self.handle, NULL
            moduleUnload(<CUmodule>handle)

    def __dealloc__(self):
        if self.handle != NULL and _quiet_activate(self.device):
            _cuModuleUnload(self.handle)


def _dim3(value, what):
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"{what} is 1 to 3 positive ints, got {value!r}")
    return dims + (1,) * (3 - len(dims))


cdef class Function:
    """A kernel of a Module; keeps its module loaded."""

    def launch(self, grid, block, args, unsigned int shared_mem=0, Stream stream=None):
        """Launch on ``grid`` x ``block`` (ints or tuples of up to 3) with ``args``: each a
        Memory (its address) or a numpy scalar whose type is the kernel parameter's
        (np.int32(n), np.float32(x), np.uint64(address)). Asynchronous on ``stream``."""
        if self.module.handle == NULL:
            raise ValueError(f"{self.name}: its module was unloaded")
        gx, gy, gz = _dim3(grid, "grid")
        bx, by, bz = _dim3(block, "block")
        buf, offsets = bytearray(), []
        for i, a in enumerate(args):
            if isinstance(a, Memory):
                raw = np.uint64((<Memory>a).ptr).tobytes()
            elif isinstance(a, np.generic):
                raw = a.tobytes()
            else:
                raise TypeError(f"{self.name}: argument {i} is a {type(a).__name__}; pass a "
                                f"Memory or a numpy scalar of the parameter's type "
                                f"(np.int32(n), np.float32(x))")
            align = min(len(raw), 8) or 1
            buf += bytes(-len(buf) % align)
            offsets.append(len(buf))
            buf += raw
        cdef char *base = buf
        cdef void **params = <void **>malloc(max(len(offsets), 1) * sizeof(void *))
        if params == NULL:
            raise MemoryError()
        try:
            for i, off in enumerate(offsets):
                params[i] = base + <size_t>off
            activate(self.module.device)
            launchKernel(self.handle, gx, gy, gz, bx, by, bz, shared_mem, _stream(stream),
                         params)
        finally:
            free(params)


cdef bint _double(BlasHandle self, dtype) except -1:
    """True for the D routine, False for S; and the handle's device made current."""
    if self.handle == NULL:
        raise ValueError("the cuBLAS handle was closed")
    kind = np.dtype(dtype).char
    if kind not in "fd":
        raise DTypeError(f"cuBLAS routines here take float32 or float64, not "
                         f"{np.dtype(dtype).name}")
    activate(self.device)
    return kind == "d"


cdef class BlasHandle:
    """A cuBLAS handle on a device. Matrices are column-major device arrays (cuBLAS's
    convention); a row-major product is the column-major one of the transposes. Pointers are
    a Memory or an int address; ``dtype`` picks the S (float32) or D (float64) routine."""

    def __init__(self, int device=0):
        activate(device)
        self.device = device
        self.handle = cublasCreate()

    def set_stream(self, Stream stream=None):
        """Queue later calls on ``stream`` (None: the legacy default stream)."""
        cublasSetStream(self.handle, _stream(stream))

    def gemm(self, dtype, bint transa, bint transb, int m, int n, int k, alpha, a, int lda,
             b, int ldb, beta, c, int ldc):
        """C = alpha op(A) op(B) + beta C (cublasSgemm / cublasDgemm)."""
        cdef cublasOperation_t ta = CUBLAS_OP_T if transa else CUBLAS_OP_N
        cdef cublasOperation_t tb = CUBLAS_OP_T if transb else CUBLAS_OP_N
        if _double(self, dtype):
            dgemm(self.handle, ta, tb, m, n, k, alpha, <double *>_dptr(a), lda,
                  <double *>_dptr(b), ldb, beta, <double *>_dptr(c), ldc)
        else:
            sgemm(self.handle, ta, tb, m, n, k, alpha, <float *>_dptr(a), lda,
                  <float *>_dptr(b), ldb, beta, <float *>_dptr(c), ldc)

    def gemv(self, dtype, bint trans, int m, int n, alpha, a, int lda, x, int incx, beta, y,
             int incy):
        """y = alpha op(A) x + beta y (cublasSgemv / cublasDgemv)."""
        cdef cublasOperation_t t = CUBLAS_OP_T if trans else CUBLAS_OP_N
        if _double(self, dtype):
            dgemv(self.handle, t, m, n, alpha, <double *>_dptr(a), lda, <double *>_dptr(x),
                  incx, beta, <double *>_dptr(y), incy)
        else:
            sgemv(self.handle, t, m, n, alpha, <float *>_dptr(a), lda, <float *>_dptr(x),
                  incx, beta, <float *>_dptr(y), incy)

    def dot(self, dtype, int n, x, int incx, y, int incy):
        """The dot product of two device vectors, returned to the host (cublasSdot / Ddot)."""
        if _double(self, dtype):
            return ddot(self.handle, n, <double *>_dptr(x), incx, <double *>_dptr(y), incy)
        return sdot(self.handle, n, <float *>_dptr(x), incx, <float *>_dptr(y), incy)

    def gemm_strided_batched(self, dtype, bint transa, bint transb, int m, int n, int k, alpha,
                             a, int lda, int64_t stride_a, b, int ldb, int64_t stride_b, beta,
                             c, int ldc, int64_t stride_c, int batch):
        """``batch`` gemms whose operands are ``stride_*`` elements apart
        (cublasSgemmStridedBatched / cublasDgemmStridedBatched)."""
        cdef cublasOperation_t ta = CUBLAS_OP_T if transa else CUBLAS_OP_N
        cdef cublasOperation_t tb = CUBLAS_OP_T if transb else CUBLAS_OP_N
        if _double(self, dtype):
            dgemmStridedBatched(self.handle, ta, tb, m, n, k, alpha, <double *>_dptr(a), lda,
                                stride_a, <double *>_dptr(b), ldb, stride_b, beta,
                                <double *>_dptr(c), ldc, stride_c, batch)
        else:
            sgemmStridedBatched(self.handle, ta, tb, m, n, k, alpha, <float *>_dptr(a), lda,
                                stride_a, <float *>_dptr(b), ldb, stride_b, beta,
                                <float *>_dptr(c), ldc, stride_c, batch)

    def close(self):
        """Destroy the handle now (a second call does nothing)."""
        if self.handle != NULL:
            activate(self.device)
            handle, self.handle = <uintptr_t>self.handle, NULL
            cublasDestroy(<cublasHandle_t>handle)

    def __dealloc__(self):
        if self.handle != NULL and _CUBLAS.ready and _quiet_activate(self.device):
            _cublasDestroy(self.handle)
