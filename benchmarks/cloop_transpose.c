/* C loops for bench_transpose.py: a[i][j] = b[i][j] + c[j][i], n x n, row-major.
 * naive: row by row (c read down a column); tiled: 32 x 32 tiles (the reference). */
#include <stddef.h>
#define DEF(T, S)                                                                        \
  void add_t_naive_##S(T *a, const T *b, const T *c, long n) {                           \
    for (long i = 0; i < n; ++i)                                                         \
      for (long j = 0; j < n; ++j) a[i * n + j] = b[i * n + j] + c[j * n + i];           \
  }                                                                                      \
  void add_t_tiled_##S(T *a, const T *b, const T *c, long n) {                           \
    const long B = 32;                                                                   \
    for (long i0 = 0; i0 < n; i0 += B)                                                   \
      for (long j0 = 0; j0 < n; j0 += B) {                                               \
        const long ie = i0 + B < n ? i0 + B : n, je = j0 + B < n ? j0 + B : n;           \
        for (long i = i0; i < ie; ++i)                                                   \
          for (long j = j0; j < je; ++j) a[i * n + j] = b[i * n + j] + c[j * n + i];     \
      }                                                                                  \
  }
DEF(float, f32)
DEF(double, f64)
