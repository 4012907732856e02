/* Host SIMT shim: compiles the CUDA C that mshadow/cuda/lower.py emits (and kernels written
 * in the same subset) as C++ for the CPU. The emulated device (mshadow/cuda/emulate.py) and
 * the tests' harness (tests/cuda_host.py) compile every kernel under it.
 *
 * A block's threads run as OpenMP threads (num_threads(blockDim)); blocks run one after
 * another, so __shared__ is a static local; __syncthreads() is an OpenMP barrier; atomics
 * are the compiler's __atomic builtins; the bit-cast intrinsics go through memcpy; warp
 * shuffles through an exchange buffer and barriers. gridDim, blockDim and __shared__ are
 * statics of the library, so its caller runs one launch of a library at a time.
 * Not covered: dynamic shared memory (extern __shared__), warp votes and the other
 * shuffles, textures, cooperative groups, device-side printf. */
#ifndef MS_CUDA_HOST_SHIM_H_
#define MS_CUDA_HOST_SHIM_H_
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>

#define MS_CU_STDINT 1          /* <stdint.h> is here: the emitted typedefs stay out */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static
#define __constant__ static
#define __restrict__ __restrict
#define __syncthreads() _Pragma("omp barrier")

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64); }

template <class T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicCAS(T *p, T cmp, T v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
static inline float atomicAdd(float *p, float v) {   /* CAS loop: no float fetch_add builtin */
  float old = *p, seen;
  do { seen = old; old = __uint_as_float(atomicCAS((unsigned *)p, __float_as_uint(seen),
                                                   __float_as_uint(seen + v))); }
  while (__float_as_uint(old) != __float_as_uint(seen));
  return old;
}

/* __shfl_down_sync: lane l gets lane l + delta's value within its warp of 32 (its own past
 * the warp's end), through an exchange buffer between two barriers. Every thread of the
 * block must call it, as the emitted reductions do (all threads run every fold step). */
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
  static T buf[1024];
  const unsigned t = threadIdx.x;
  T r = v;
  (void)mask;
  buf[t] = v;
#pragma omp barrier
  if (t % 32 + delta < 32 && t + delta < blockDim.x) r = buf[t + delta];
#pragma omp barrier
  return r;
}

/* Run ``body`` (a kernel call) over grid x block: blocks one after another, a block's
 * threads as one OpenMP team. Returns 0, or the size of a team that OpenMP made smaller than
 * the block (OMP_THREAD_LIMIT, thread creation failing): then no thread of that block runs
 * the kernel, and the launch stops there. */
template <class F> static int ms_host_launch(dim3 grid, dim3 block, F body) {
  gridDim = grid;
  blockDim = block;
  const int nthreads = (int)(block.x * block.y * block.z);
  int short_team = 0;
  omp_set_dynamic(0);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
#pragma omp parallel num_threads(nthreads)
        {
          if (omp_get_num_threads() != nthreads) {
            if (omp_get_thread_num() == 0) short_team = omp_get_num_threads();
          } else {
            const unsigned t = (unsigned)omp_get_thread_num();
            blockIdx = dim3(bx, by, bz);
            threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
            body();
          }
        }
        if (short_team) return short_team;
      }
  return 0;
}
#endif  /* MS_CUDA_HOST_SHIM_H_ */
