/* Hand-written C reference reductions for benchmarks/bench_ir.py.
 *
 * Compiled at benchmark start the way cloop.c is,
 *     gcc -O3 -march=native -fopenmp -shared -fPIC cloop_reduce.c -o cloop_reduce.so
 * and called through ctypes over the numpy buffers mshadow, numpy and torch use.
 *
 * No -ffast-math: gcc does not reassociate a single float accumulator, so every loop keeps
 * independent lane accumulators by hand (acc[l] for element i + l), which gcc turns into
 * vector accumulators. That is what a careful C programmer writes.
 */
#include <omp.h>
#include <stdlib.h>

/* sum of x[i]^2 with 16 lane accumulators (two AVX2 registers), one thread */
float sumsq_f32(const float *restrict x, long n) {
  float acc[16] = {0};
  long i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l] * x[i + l];
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}

/* the same with 8 lane accumulators (one AVX2 register: bound by the add latency) */
float sumsq8_f32(const float *restrict x, long n) {
  float acc[8] = {0};
  long i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * x[i + l];
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  float s = 0;
  for (int l = 0; l < 8; ++l) s += acc[l];
  return s;
}

/* r[i] = sum_j a[i, j] * b[i, j] over a C-contiguous (rows, cols) pair: (a*b).sum(1).
 * 16 lane accumulators per row, rows split over nt threads. */
void rowsum_prod_f32(const float *restrict a, const float *restrict b, float *restrict r,
                     long rows, long cols, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
  for (long i = 0; i < rows; ++i) {
    const float *pa = a + i * cols, *pb = b + i * cols;
    float acc[16] = {0};
    long j = 0;
    for (; j + 16 <= cols; j += 16)
      for (int l = 0; l < 16; ++l) acc[l] += pa[j + l] * pb[j + l];
    for (; j < cols; ++j) acc[0] += pa[j] * pb[j];
    float s = 0;
    for (int l = 0; l < 16; ++l) s += acc[l];
    r[i] = s;
  }
}

/* r[j] = sum_i a[i, j] * b[i, j]: (a*b).sum(0). One streaming pass: each of nt threads sums
 * its block of rows into a private row of partial sums (4 KiB for 1024 columns: in L1), the
 * columns being the lanes; the threads' rows are then added into r. */
void colsum_prod_f32(const float *restrict a, const float *restrict b, float *restrict r,
                     long rows, long cols, int nt) {
  for (long j = 0; j < cols; ++j) r[j] = 0;
#pragma omp parallel num_threads(nt)
  {
    float *acc = calloc((size_t)cols, sizeof(float));
#pragma omp for schedule(static)
    for (long i = 0; i < rows; ++i) {
      const float *pa = a + i * cols, *pb = b + i * cols;
      for (long j = 0; j < cols; ++j) acc[j] += pa[j] * pb[j];
    }
#pragma omp critical
    for (long j = 0; j < cols; ++j) r[j] += acc[j];
    free(acc);
  }
}
