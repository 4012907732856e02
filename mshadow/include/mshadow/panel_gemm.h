/* The products of conv2d's forward (mshadow/_blas.pyx conv_panels), at the AVX2 and
 * AVX-512 levels:
 *
 *     C (K x w, row stride ldc) = alpha * W (K x CK) @ P (CK x w, row stride ldp) + beta * C
 *
 * with W packed once a call (ms_pg_pack: blocks of MR rows, k-major, the last block
 * zero-padded) and P read where the im2col panel was written. BLAS packed every panel a
 * second time (a quarter of the convolution's time) and reached 95 GFLOP/s on a
 * (64 x 576) @ (576 x 448) panel; this kernel, MR rows x 2 vectors of registers, 141
 * (one thread, Xeon AVX-512).
 *
 * Each output adds its CK products in k order, one fused multiply-add each, from 0: the
 * same bits at both levels and every thread count (threads split the tiles). beta == 0
 * stores without reading C (as BLAS). The caller picks the level; a CPU without it never
 * gets here.
 */
#ifndef MSHADOW_PANEL_GEMM_H_
#define MSHADOW_PANEL_GEMM_H_
#include <stddef.h>
#include <stdint.h>
#include "mshadow/packet.h"

#if MS_X86 && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MS_PG_LEVELS 1

/* rows of a tile: accumulators MR x 2 vectors, plus 2 panel vectors and a broadcast */
#define MS_PG_MR_AVX512 12
#define MS_PG_MR_AVX2 6
static inline int ms_pg_mr(int level) { return level >= 3 ? MS_PG_MR_AVX512 : MS_PG_MR_AVX2; }

/* W (K x CK, element (m, k) at w[m * rs + k * cs]: a row-major matrix or, with the
 * strides swapped, a transposed one) into wp: block b holds rows b*MR.., element (k, r)
 * at wp[(b * CK + k) * MR + r]; rows past K are 0 */
#define MS_PG_PACK(T, t)                                                                      \
  static void ms_pg_pack_##t(const T *w, ptrdiff_t rs, ptrdiff_t cs, T *wp, ptrdiff_t K,     \
                             ptrdiff_t CK, int mr) {                                          \
    ptrdiff_t b, k, r, nb = (K + mr - 1) / mr;                                                \
    for (b = 0; b < nb; ++b)                                                                  \
      for (k = 0; k < CK; ++k)                                                                \
        for (r = 0; r < mr; ++r)                                                              \
          wp[(b * CK + k) * mr + r] = b * mr + r < K ? w[(b * mr + r) * rs + k * cs] : (T)0;  \
  }
MS_PG_PACK(float, f32)
MS_PG_PACK(double, f64)

/* The k loop of a tile: panel row k's two vectors (their first N0 and N1 columns) times
 * the packed column k of the block, into acc (MS_PG_TILE's locals k, r, acc, p, wp) */
#define MS_PG_KLOOP(T, V, MR, W, LOAD, SET1, FMA, N0, N1)                                    \
  for (k = 0; k < CK; ++k) {                                                                  \
    const V b0 = LOAD(p + k * ldp, N0), b1 = LOAD(p + k * ldp + W, N1);                       \
    const T *a = wp + k * MR;                                                                 \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      const V ar = SET1(a[r]);                                                                \
      acc[r][0] = FMA(ar, b0, acc[r][0]);                                                     \
      acc[r][1] = FMA(ar, b1, acc[r][1]);                                                     \
    }                                                                                         \
  }

/* One tile: rows [0, rows) of a block (rows <= MR) and columns [0, cols) (cols <= 2 W),
 * the columns past cols neither read nor written (masked). */
#define MS_PG_TILE(ISA, TARGET, T, t, V, MR, W, LOAD, STORE, SET1, FMA, MUL, ADD, ZERO)         \
  static TARGET void ms_pg_tile_##t##_##ISA(const T *wp, const T *p, ptrdiff_t ldp, T *c,     \
                                            ptrdiff_t ldc, ptrdiff_t CK, int rows, int cols,  \
                                            T alpha, T beta) {                                \
    V acc[MR][2];                                                                             \
    ptrdiff_t k;                                                                              \
    int r;                                                                                    \
    const int n0 = cols < W ? cols : W, n1 = cols - n0;                                       \
    /* every loop over r unrolled: constant indices keep acc in registers (a loop to the  \
     * run-time ``rows`` made the compiler store all of acc every k: 59 GFLOP/s, not 141) */ \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = ZERO();                                  \
    /* whole rows of both vectors with plain loads (a constant count), else masked */      \
    if (n0 == W && n1 == W) {                                                                 \
      MS_PG_KLOOP(T, V, MR, W, LOAD, SET1, FMA, W, W)                                         \
    } else {                                                                                  \
      MS_PG_KLOOP(T, V, MR, W, LOAD, SET1, FMA, n0, n1)                                       \
    }                                                                                         \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      T *o = c + r * ldc;                                                                     \
      V v0 = acc[r][0], v1 = acc[r][1];                                                       \
      if (r >= rows) break;                                                                   \
      if (alpha != (T)1) { v0 = MUL(SET1(alpha), v0); v1 = MUL(SET1(alpha), v1); }            \
      if (beta != (T)0) {                                                                     \
        v0 = ADD(v0, MUL(SET1(beta), LOAD(o, n0)));                                           \
        v1 = ADD(v1, MUL(SET1(beta), LOAD(o + W, n1)));                                       \
      }                                                                                       \
      STORE(o, v0, n0);                                                                       \
      STORE(o + W, v1, n1);                                                                   \
    }                                                                                         \
  }

/* AVX-512: masked loads and stores */
#define MS_PG_M16(n) ((__mmask16)((n) >= 16 ? 0xFFFF : (1u << (n)) - 1u))
#define MS_PG_M8(n) ((__mmask8)((n) >= 8 ? 0xFF : (1u << (n)) - 1u))
#define MS_PG_LD512S(p, n) _mm512_maskz_loadu_ps(MS_PG_M16(n), (p))
#define MS_PG_ST512S(p, v, n) _mm512_mask_storeu_ps((p), MS_PG_M16(n), (v))
#define MS_PG_LD512D(p, n) _mm512_maskz_loadu_pd(MS_PG_M8(n), (p))
#define MS_PG_ST512D(p, v, n) _mm512_mask_storeu_pd((p), MS_PG_M8(n), (v))
#define MS_PG_T512 __attribute__((target("avx512f")))
MS_PG_TILE(avx512, MS_PG_T512, float, f32, __m512, MS_PG_MR_AVX512, 16, MS_PG_LD512S,
           MS_PG_ST512S, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps,
           _mm512_setzero_ps)
MS_PG_TILE(avx512, MS_PG_T512, double, f64, __m512d, MS_PG_MR_AVX512, 8, MS_PG_LD512D,
           MS_PG_ST512D, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_mul_pd, _mm512_add_pd,
           _mm512_setzero_pd)

/* AVX2: lane masks from a window of this table */
static const int32_t ms_pg_mask32[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static const int64_t ms_pg_mask64[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
#define MS_PG_T256 __attribute__((target("avx2,fma")))
#define MS_PG_K8(n) _mm256_loadu_si256((const __m256i *)(ms_pg_mask32 + 8 - ((n) < 8 ? (n) : 8)))
#define MS_PG_K4(n) _mm256_loadu_si256((const __m256i *)(ms_pg_mask64 + 4 - ((n) < 4 ? (n) : 4)))
#define MS_PG_LD256S(p, n) ((n) >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), MS_PG_K8(n)))
#define MS_PG_ST256S(p, v, n) \
  do { if ((n) >= 8) _mm256_storeu_ps((p), (v)); else _mm256_maskstore_ps((p), MS_PG_K8(n), (v)); } while (0)
#define MS_PG_LD256D(p, n) ((n) >= 4 ? _mm256_loadu_pd(p) : _mm256_maskload_pd((p), MS_PG_K4(n)))
#define MS_PG_ST256D(p, v, n) \
  do { if ((n) >= 4) _mm256_storeu_pd((p), (v)); else _mm256_maskstore_pd((p), MS_PG_K4(n), (v)); } while (0)
MS_PG_TILE(avx2, MS_PG_T256, float, f32, __m256, MS_PG_MR_AVX2, 8, MS_PG_LD256S,
           MS_PG_ST256S, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps,
           _mm256_setzero_ps)
MS_PG_TILE(avx2, MS_PG_T256, double, f64, __m256d, MS_PG_MR_AVX2, 4, MS_PG_LD256D,
           MS_PG_ST256D, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_mul_pd, _mm256_add_pd,
           _mm256_setzero_pd)

/* The whole product over tiles of MR rows x 2 W columns, on nt threads (level 2 or 3). */
#define MS_PG_GEMM(T, t)                                                                      \
  static void ms_pg_gemm_##t(int level, const T *wp, const T *p, ptrdiff_t ldp, ptrdiff_t w, \
                             T *c, ptrdiff_t ldc, ptrdiff_t K, ptrdiff_t CK, T alpha, T beta, \
                             int nt) {                                                        \
    const int mr = ms_pg_mr(level);                                                           \
    const ptrdiff_t W2 = 2 * (ptrdiff_t)(level >= 3 ? 64 : 32) / (ptrdiff_t)sizeof(T);        \
    const ptrdiff_t nb = (K + mr - 1) / mr, nj = (w + W2 - 1) / W2;                           \
    ptrdiff_t q;                                                                              \
    (void)nt;                                                                                 \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (nt > 1)")                  \
    for (q = 0; q < nb * nj; ++q) {                                                           \
      const ptrdiff_t b = q % nb, j = (q / nb) * W2;                                          \
      const int rows = (int)(K - b * mr < mr ? K - b * mr : mr);                              \
      const int cols = (int)(w - j < W2 ? w - j : W2);                                        \
      if (level >= 3)                                                                         \
        ms_pg_tile_##t##_avx512(wp + b * CK * mr, p + j, ldp, c + b * mr * ldc + j, ldc, CK,  \
                                rows, cols, alpha, beta);                                     \
      else                                                                                    \
        ms_pg_tile_##t##_avx2(wp + b * CK * mr, p + j, ldp, c + b * mr * ldc + j, ldc, CK,    \
                              rows, cols, alpha, beta);                                       \
    }                                                                                         \
  }
MS_PG_GEMM(float, f32)
MS_PG_GEMM(double, f64)

#else
#define MS_PG_LEVELS 0
static inline int ms_pg_mr(int level) { (void)level; return 1; }
static void ms_pg_pack_f32(const float *w, ptrdiff_t rs, ptrdiff_t cs, float *wp, ptrdiff_t K,
                           ptrdiff_t CK, int mr) {
  (void)w; (void)rs; (void)cs; (void)wp; (void)K; (void)CK; (void)mr; }
static void ms_pg_pack_f64(const double *w, ptrdiff_t rs, ptrdiff_t cs, double *wp, ptrdiff_t K,
                           ptrdiff_t CK, int mr) {
  (void)w; (void)rs; (void)cs; (void)wp; (void)K; (void)CK; (void)mr; }
static void ms_pg_gemm_f32(int level, const float *wp, const float *p, ptrdiff_t ldp, ptrdiff_t w,
                           float *c, ptrdiff_t ldc, ptrdiff_t K, ptrdiff_t CK, float alpha,
                           float beta, int nt) {
  (void)level; (void)wp; (void)p; (void)ldp; (void)w; (void)c; (void)ldc; (void)K; (void)CK;
  (void)alpha; (void)beta; (void)nt; }
static void ms_pg_gemm_f64(int level, const double *wp, const double *p, ptrdiff_t ldp, ptrdiff_t w,
                           double *c, ptrdiff_t ldc, ptrdiff_t K, ptrdiff_t CK, double alpha,
                           double beta, int nt) {
  (void)level; (void)wp; (void)p; (void)ldp; (void)w; (void)c; (void)ldc; (void)K; (void)CK;
  (void)alpha; (void)beta; (void)nt; }
#endif

#endif  /* MSHADOW_PANEL_GEMM_H_ */
