/* Hand-written C loops for benchmarks/bench_nn.py: the simple kernels of a neural network.
 *
 * Compiled at benchmark start the way cloop.c and cloop_reduce.c are,
 *     gcc -O3 -march=native -fopenmp -shared -fPIC cloop_nn.c -o cloop_nn.so
 * and called through ctypes over the numpy buffers mshadow, numpy and torch use. Every
 * function exists for float (_f32) and double (_f64) and runs on nt OpenMP threads.
 *
 * No -ffast-math: gcc does not reassociate a single accumulator, so the reductions keep
 * independent lane accumulators by hand (what a careful C programmer writes). There is no
 * softmax here: without -ffast-math gcc calls the scalar libm exp, which would measure libm,
 * not the loop.
 */
#include <omp.h>
#include <string.h>

#define LANES 16

/* ---- pooling: y (planes, oh, ow) from x (planes, H, W), k x k windows, stride s, no
 * padding (every window lies inside x). Output rows split over the threads; each row is
 * built by k*k passes of the window's tap (ky, kx) over the row, the columns being the
 * vector lanes (a gather of stride s). avg multiplies the window sum by 1 / (k*k). */
#define POOL(NAME, T, INIT, FOLD, FINISH)                                                    \
  void NAME(const T *restrict x, T *restrict y, long planes, long H, long W, long k, long s, \
            long oh, long ow, int nt) {                                                      \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                             \
    for (long r = 0; r < planes * oh; ++r) {                                                 \
      const long p = r / oh, oy = r % oh;                                                    \
      T *restrict yr = y + r * ow;                                                           \
      for (long ox = 0; ox < ow; ++ox) yr[ox] = INIT;                                        \
      for (long ky = 0; ky < k; ++ky) {                                                      \
        const T *restrict xr = x + (p * H + oy * s + ky) * W;                                \
        for (long kx = 0; kx < k; ++kx)                                                      \
          for (long ox = 0; ox < ow; ++ox) {                                                 \
            const T v = xr[ox * s + kx];                                                     \
            yr[ox] = FOLD(yr[ox], v);                                                        \
          }                                                                                  \
      }                                                                                      \
      FINISH                                                                                 \
    }                                                                                        \
  }
#define MAXF(a, b) ((b) > (a) ? (b) : (a))
#define ADDF(a, b) ((a) + (b))
#define SCALE                                                                                \
  { const double inv = 1.0 / (double)(k * k);                                                \
    for (long ox = 0; ox < ow; ++ox) yr[ox] *= inv; }

POOL(maxpool_f32, float, -__builtin_inff(), MAXF, )
POOL(maxpool_f64, double, -__builtin_inf(), MAXF, )
POOL(avgpool_f32, float, 0.0f, ADDF, SCALE)
POOL(avgpool_f64, double, 0.0, ADDF, SCALE)

/* ---- im2col: col (C*k*k, N*oh*ow), row (c*k + i)*k + j, column (n*oh + oy)*ow + ox, of x
 * (N, C, H, W), stride 1, no padding: one memcpy of ow elements per (row, n, oy). */
#define IM2COL(NAME, T)                                                                      \
  void NAME(const T *restrict x, T *restrict col, long N, long C, long H, long W, long k,    \
            int nt) {                                                                        \
    const long oh = H - k + 1, ow = W - k + 1, L = N * oh * ow;                              \
    _Pragma("omp parallel for num_threads(nt) schedule(static) collapse(2)")                 \
    for (long row = 0; row < C * k * k; ++row)                                               \
      for (long n = 0; n < N; ++n) {                                                         \
        const long c = row / (k * k), i = row / k % k, j = row % k;                          \
        T *restrict dst = col + row * L + n * oh * ow;                                       \
        const T *restrict src = x + ((n * C + c) * H + i) * W + j;                           \
        for (long oy = 0; oy < oh; ++oy)                                                     \
          memcpy(dst + oy * ow, src + oy * W, (size_t)ow * sizeof(T));                       \
      }                                                                                      \
  }
IM2COL(im2col_f32, float)
IM2COL(im2col_f64, double)

/* ---- concat along axis 1: y (outer, na + nb) of a (outer, na) and b (outer, nb), in
 * elements of the inner block (for 4-D NCHW along C: outer = N, na = Ca*H*W). */
#define CONCAT(NAME, T)                                                                      \
  void NAME(const T *restrict a, const T *restrict b, T *restrict y, long outer, long na,    \
            long nb, int nt) {                                                               \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                             \
    for (long o = 0; o < outer; ++o) {                                                       \
      memcpy(y + o * (na + nb), a + o * na, (size_t)na * sizeof(T));                         \
      memcpy(y + o * (na + nb) + na, b + o * nb, (size_t)nb * sizeof(T));                    \
    }                                                                                        \
  }
CONCAT(concat_f32, float)
CONCAT(concat_f64, double)

/* ---- sumall_except_dim(x, 1): o[c] = sum over n, h, w of x (N, C, HW); channels split over
 * the threads, LANES lane accumulators over each contiguous plane. */
#define SUM_EXCEPT1(NAME, T)                                                                 \
  void NAME(const T *restrict x, T *restrict o, long N, long C, long HW, int nt) {           \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                             \
    for (long c = 0; c < C; ++c) {                                                           \
      T acc[LANES] = {0};                                                                    \
      for (long n = 0; n < N; ++n) {                                                         \
        const T *restrict p = x + (n * C + c) * HW;                                          \
        long j = 0;                                                                          \
        for (; j + LANES <= HW; j += LANES)                                                  \
          for (int l = 0; l < LANES; ++l) acc[l] += p[j + l];                                \
        for (; j < HW; ++j) acc[j % LANES] += p[j];                                          \
      }                                                                                      \
      T s = 0;                                                                               \
      for (int l = 0; l < LANES; ++l) s += acc[l];                                           \
      o[c] = s;                                                                              \
    }                                                                                        \
  }
SUM_EXCEPT1(sum_except1_f32, float)
SUM_EXCEPT1(sum_except1_f64, double)

/* ---- sum_rows(a): r[j] = sum_i a[i, j] of a C-contiguous (rows, cols). Blocks of 256
 * columns split over the threads; a block's sums stay in a local array (1 or 2 KiB, in L1)
 * while every row's stretch of the block is added, the columns being the lanes. */
#define COLBLK 256
#define COLSUM(NAME, T)                                                                      \
  void NAME(const T *restrict a, T *restrict r, long rows, long cols, int nt) {              \
    const long nblk = (cols + COLBLK - 1) / COLBLK;                                          \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                             \
    for (long b = 0; b < nblk; ++b) {                                                        \
      const long j0 = b * COLBLK, w = cols - j0 < COLBLK ? cols - j0 : COLBLK;               \
      T acc[COLBLK] = {0};                                                                   \
      for (long i = 0; i < rows; ++i) {                                                      \
        const T *restrict p = a + i * cols + j0;                                             \
        for (long j = 0; j < w; ++j) acc[j] += p[j];                                         \
      }                                                                                      \
      memcpy(r + j0, acc, (size_t)w * sizeof(T));                                            \
    }                                                                                        \
  }
COLSUM(colsum_f32, float)
COLSUM(colsum_f64, double)
