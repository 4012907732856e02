# The CUDA driver API, NVRTC and cuBLAS as far as mshadow uses them, declared here so that the
# build needs no CUDA header (values and signatures from NVIDIA's cuda.h, nvrtc.h and
# cublas_api.h; 64-bit platforms only, where CUdeviceptr is unsigned long long), followed by
# the cdef API of mshadow/cuda/_cuda.pyx that other Cython modules cimport.
from libc.stdint cimport int64_t

# ---- cuda.h -------------------------------------------------------------------------------
ctypedef int CUresult                  # enum cudaError_enum
ctypedef int CUdevice
ctypedef unsigned long long CUdeviceptr
ctypedef void *CUcontext               # struct CUctx_st *
ctypedef void *CUmodule                # struct CUmod_st *
ctypedef void *CUfunction              # struct CUfunc_st *
ctypedef void *CUstream                # struct CUstream_st *
ctypedef void *CUevent                 # struct CUevent_st *
ctypedef void *CUarray                 # struct CUarray_st *

cdef enum:
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_NOT_READY = 600
    # CUmemorytype
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    # CUstream_flags, CUevent_flags
    CU_STREAM_NON_BLOCKING = 1
    CU_EVENT_DEFAULT = 0
    CU_EVENT_DISABLE_TIMING = 2

# CUdevice_attribute
cdef enum:
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8
    CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10
    CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
    CU_DEVICE_ATTRIBUTE_INTEGRATED = 18
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41
    CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97

# CUDA_MEMCPY2D (CUDA_MEMCPY2D_v2): a plain C struct, so Cython's own definition has its layout
cdef struct CUDA_MEMCPY2D:
    size_t srcXInBytes
    size_t srcY
    int srcMemoryType
    const void *srcHost
    CUdeviceptr srcDevice
    CUarray srcArray
    size_t srcPitch
    size_t dstXInBytes
    size_t dstY
    int dstMemoryType
    void *dstHost
    CUdeviceptr dstDevice
    CUarray dstArray
    size_t dstPitch
    size_t WidthInBytes
    size_t Height

# ---- nvrtc.h ------------------------------------------------------------------------------
ctypedef int nvrtcResult
ctypedef void *nvrtcProgram            # struct _nvrtcProgram *

cdef enum:
    NVRTC_SUCCESS = 0

# ---- cublas_api.h -------------------------------------------------------------------------
ctypedef int cublasStatus_t
ctypedef int cublasOperation_t
ctypedef void *cublasHandle_t          # struct cublasContext *

cdef enum:
    CUBLAS_STATUS_SUCCESS = 0
    CUBLAS_OP_N = 0
    CUBLAS_OP_T = 1
    # library_types.h: libraryPropertyType
    MAJOR_VERSION = 0
    MINOR_VERSION = 1
    PATCH_LEVEL = 2


# ---- the cdef API of _cuda.pyx: thin wrappers (load, call without the GIL, check) -----------
# Names drop the cu/nvrtc/cublas prefix, so a grep for the CUDA name finds the wrapper; the
# cuBLAS handle calls keep theirs (a bare "create" would say nothing).
cdef int init() except -1
cdef int activate(int device) except -1          # the device's primary context, current
cdef CUdeviceptr memAlloc(size_t nbytes) except? 0
cdef CUdeviceptr memAllocPitch(size_t *pitch, size_t width_bytes, size_t height,
                               unsigned int element_bytes) except? 0
cdef int memFree(CUdeviceptr ptr) except -1
cdef int memcpy2DAsync(const CUDA_MEMCPY2D *copy, CUstream stream) except -1
cdef CUstream streamCreate(unsigned int flags) except NULL
cdef int streamDestroy(CUstream stream) except -1
cdef int streamSynchronize(CUstream stream) except -1
cdef int ctxSynchronize() except -1
cdef bint streamQuery(CUstream stream) except -1
cdef int streamWaitEvent(CUstream stream, CUevent event) except -1
cdef CUevent eventCreate(unsigned int flags) except NULL
cdef int eventDestroy(CUevent event) except -1
cdef int eventRecord(CUevent event, CUstream stream) except -1
cdef int eventSynchronize(CUevent event) except -1
cdef bint eventQuery(CUevent event) except -1
cdef float eventElapsedTime(CUevent start, CUevent end) except? -1
cdef CUmodule moduleLoadData(const void *image) except NULL
cdef int moduleUnload(CUmodule module) except -1
cdef CUfunction moduleGetFunction(CUmodule module, const char *name) except NULL
cdef int launchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                      unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                      unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                      void **params) except -1
cdef int deviceGetAttribute(int attribute, CUdevice device) except? -1

cdef nvrtcProgram createProgram(const char *source, const char *name) except NULL
cdef int compileProgram(nvrtcProgram prog, int n, const char **options) except -1
cdef bytes getCUBIN(nvrtcProgram prog)
cdef str getProgramLog(nvrtcProgram prog)
cdef int destroyProgram(nvrtcProgram *prog) except -1

cdef cublasHandle_t cublasCreate() except NULL
cdef int cublasDestroy(cublasHandle_t handle) except -1
cdef int cublasSetStream(cublasHandle_t handle, CUstream stream) except -1
cdef int sgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
               int m, int n, int k, float alpha, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc) except -1
cdef int dgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
               int m, int n, int k, double alpha, const double *A, int lda, const double *B,
               int ldb, double beta, double *C, int ldc) except -1
cdef int sgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, float alpha,
               const float *A, int lda, const float *x, int incx, float beta, float *y,
               int incy) except -1
cdef int dgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, double alpha,
               const double *A, int lda, const double *x, int incx, double beta, double *y,
               int incy) except -1
cdef float sdot(cublasHandle_t handle, int n, const float *x, int incx, const float *y,
                int incy) except? -1
cdef double ddot(cublasHandle_t handle, int n, const double *x, int incx, const double *y,
                 int incy) except? -1
cdef int sgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                             cublasOperation_t transb, int m, int n, int k, float alpha,
                             const float *A, int lda, int64_t strideA, const float *B, int ldb,
                             int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                             int batch) except -1
cdef int dgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                             cublasOperation_t transb, int m, int n, int k, double alpha,
                             const double *A, int lda, int64_t strideA, const double *B,
                             int ldb, int64_t strideB, double beta, double *C, int ldc,
                             int64_t strideC, int batch) except -1


# ---- owners of CUDA objects (Python-visible; each frees its object once) -------------------
cdef class Memory:
    cdef readonly int device
    cdef CUdeviceptr ptr
    cdef readonly size_t nbytes, pitch, width, height


cdef class Stream:
    cdef readonly int device
    cdef CUstream handle


cdef class Event:
    cdef readonly int device
    cdef CUevent handle


cdef class Module:
    cdef readonly int device
    cdef CUmodule handle


cdef class Function:
    cdef readonly Module module
    cdef readonly str name
    cdef CUfunction handle


cdef class BlasHandle:
    cdef readonly int device
    cdef cublasHandle_t handle
