/* Matrix transposes in AVX registers, at the AVX2 level and above (the caller checks
 * ms_isa_level or its own level): conv2d's weight gradient (panel_gemm.h) and the tiles of
 * a statement that reads a transposed tensor (plan_exec.h ms_pack_tile). The same values
 * moved, so the same bits at every level. */
#ifndef MSHADOW_TRANSPOSE_H_
#define MSHADOW_TRANSPOSE_H_
#include <stddef.h>
#include "mshadow/packet.h"

#if MS_X86 && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MS_HAVE_TRANSPOSE_AVX2 1
#define MS_T256 __attribute__((target("avx2")))

/* d[c * ldd + r] = s[r * lds + c] for r < rows, c < cols: blocks of 8 x 8 floats or 4 x 4
 * doubles transposed in AVX registers (the scalar loop's strided stores were a fifth of
 * conv2d's weight gradient time), the edges one by one */
static MS_T256 void ms_transpose_avx2_f32(const float *s, ptrdiff_t lds, float *d,
                                           ptrdiff_t ldd, ptrdiff_t rows, ptrdiff_t cols) {
  ptrdiff_t r0, c0, r, c;
  /* 8 rows of s at a time across all their columns: each line of s read once while it
   * is fresh (columns outer re-read every line cols / 8 times: 1.25x slower packing tiles
   * of 256 rows of s) */
  for (r0 = 0; r0 + 8 <= rows; r0 += 8)
    for (c0 = 0; c0 + 8 <= cols; c0 += 8) {
      const float *p = s + r0 * lds + c0;
      float *q = d + c0 * ldd + r0;
      __m256 a0 = _mm256_loadu_ps(p), a1 = _mm256_loadu_ps(p + lds);
      __m256 a2 = _mm256_loadu_ps(p + 2 * lds), a3 = _mm256_loadu_ps(p + 3 * lds);
      __m256 a4 = _mm256_loadu_ps(p + 4 * lds), a5 = _mm256_loadu_ps(p + 5 * lds);
      __m256 a6 = _mm256_loadu_ps(p + 6 * lds), a7 = _mm256_loadu_ps(p + 7 * lds);
      __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
      __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
      __m256 t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5);
      __m256 t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      _mm256_storeu_ps(q, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(q + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(q + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(q + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(q + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(q + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(q + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(q + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
  for (c = 0; c < cols; ++c)   /* the edges: rows past the last block, columns past theirs */
    for (r = c < cols / 8 * 8 ? rows / 8 * 8 : 0; r < rows; ++r) d[c * ldd + r] = s[r * lds + c];
}

static MS_T256 void ms_transpose_avx2_f64(const double *s, ptrdiff_t lds, double *d,
                                           ptrdiff_t ldd, ptrdiff_t rows, ptrdiff_t cols) {
  ptrdiff_t r0, c0, r, c;
  for (r0 = 0; r0 + 4 <= rows; r0 += 4)
    for (c0 = 0; c0 + 4 <= cols; c0 += 4) {
      const double *p = s + r0 * lds + c0;
      double *q = d + c0 * ldd + r0;
      __m256d a0 = _mm256_loadu_pd(p), a1 = _mm256_loadu_pd(p + lds);
      __m256d a2 = _mm256_loadu_pd(p + 2 * lds), a3 = _mm256_loadu_pd(p + 3 * lds);
      __m256d t0 = _mm256_unpacklo_pd(a0, a1), t1 = _mm256_unpackhi_pd(a0, a1);
      __m256d t2 = _mm256_unpacklo_pd(a2, a3), t3 = _mm256_unpackhi_pd(a2, a3);
      _mm256_storeu_pd(q, _mm256_permute2f128_pd(t0, t2, 0x20));
      _mm256_storeu_pd(q + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
      _mm256_storeu_pd(q + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
      _mm256_storeu_pd(q + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
    }
  for (c = 0; c < cols; ++c)
    for (r = c < cols / 4 * 4 ? rows / 4 * 4 : 0; r < rows; ++r) d[c * ldd + r] = s[r * lds + c];
}

#else
#define MS_HAVE_TRANSPOSE_AVX2 0
#endif
#endif  /* MSHADOW_TRANSPOSE_H_ */
