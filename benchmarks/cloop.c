/* Hand-written C reference loops for benchmarks/bench_elementwise.py.
 *
 * Compiled at benchmark start with
 *     gcc -O3 -march=native -fopenmp -shared -fPIC cloop.c -o cloop.so
 * and called through ctypes over the very numpy buffers mshadow, numpy and numexpr use.
 *
 * Every loop is what a careful C programmer would write by hand: one pass, restrict
 * pointers, `omp parallel for simd` with the benchmark's thread count `nt`, and
 * `if (n > thr)` so that small arrays stay on the calling thread (the benchmark passes
 * the same threshold mshadow uses; see README.md).
 *
 * The *_rep variants run the same loop `reps` times inside C, so the benchmark can report
 * the pure loop time with no ctypes/Python call in it (used by the overhead section).
 */
#include <math.h>
#include <omp.h>

#define E1_BODY  w[i] = -eta * (g[i] + lam * w[i]);
#define E2_BODY  a[i] += b[i] * c[i] + d[i];

#define PAR _Pragma("omp parallel for simd num_threads(nt) if(n > thr) schedule(static)")

/* E1: w[:] = -eta * (g + lam * w) */
void e1_f32(float *restrict w, const float *restrict g, float eta, float lam,
            long n, int nt, long thr) {
  PAR
  for (long i = 0; i < n; ++i) E1_BODY
}

void e1_f64(double *restrict w, const double *restrict g, double eta, double lam,
            long n, int nt, long thr) {
  PAR
  for (long i = 0; i < n; ++i) E1_BODY
}

/* E2: a += b * c + d */
void e2_f32(float *restrict a, const float *restrict b, const float *restrict c,
            const float *restrict d, long n, int nt, long thr) {
  PAR
  for (long i = 0; i < n; ++i) E2_BODY
}

void e2_f64(double *restrict a, const double *restrict b, const double *restrict c,
            const double *restrict d, long n, int nt, long thr) {
  PAR
  for (long i = 0; i < n; ++i) E2_BODY
}

/* transcendentals: y = exp(x) * 0.5 + tanh(x)  (plain libm calls, no -ffast-math) */
void tr_f32(float *restrict y, const float *restrict x, long n, int nt, long thr) {
  PAR
  for (long i = 0; i < n; ++i) y[i] = expf(x[i]) * 0.5f + tanhf(x[i]);
}

void tr_f64(double *restrict y, const double *restrict x, long n, int nt, long thr) {
  PAR
  for (long i = 0; i < n; ++i) y[i] = exp(x[i]) * 0.5 + tanh(x[i]);
}

/* the same E1/E2 loops repeated inside C: pure loop time without the ctypes call */
void e1_f32_rep(float *restrict w, const float *restrict g, float eta, float lam,
                long n, int nt, long thr, long reps) {
  for (long r = 0; r < reps; ++r) e1_f32(w, g, eta, lam, n, nt, thr);
}

void e1_f64_rep(double *restrict w, const double *restrict g, double eta, double lam,
                long n, int nt, long thr, long reps) {
  for (long r = 0; r < reps; ++r) e1_f64(w, g, eta, lam, n, nt, thr);
}

void e2_f32_rep(float *restrict a, const float *restrict b, const float *restrict c,
                const float *restrict d, long n, int nt, long thr, long reps) {
  for (long r = 0; r < reps; ++r) e2_f32(a, b, c, d, n, nt, thr);
}

void e2_f64_rep(double *restrict a, const double *restrict b, const double *restrict c,
                const double *restrict d, long n, int nt, long thr, long reps) {
  for (long r = 0; r < reps; ++r) e2_f64(a, b, c, d, n, nt, thr);
}
