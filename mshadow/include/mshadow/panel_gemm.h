/* The products of conv2d (mshadow/_blas.pyx conv_panels, gemm_tn_image, conv_direct; the
 * weight gradient's outer products, conv_direct_grad_weight, are ms_pg_convw below), at
 * the AVX2 and AVX-512 levels:
 *
 *     C (K x w, row stride ldc) = alpha * W (K x CK) @ P (CK x w, row k at p + off[k]) + beta * C
 *
 * with W packed once a call (ms_pg_pack: blocks of MR rows, k-major, the last block
 * zero-padded) and P read where it lies: an im2col panel where it was written (BLAS packed
 * every panel a second time, a quarter of the convolution's time), or, for a stride-1
 * convolution of a tensor, the padded image itself (ms_pg_conv: the row of tap (c, ky, kx)
 * is the image shifted; no column matrix at all). A tile is MR rows x NV vectors of
 * registers: on a (64 x 576) @ (576 x 448) panel 134-146 GFLOP/s against BLAS's 95 (one
 * thread, Xeon AVX-512).
 *
 * Each output adds its CK products in k order, one fused multiply-add each, from 0: the
 * same bits at both levels, every thread count (threads split the tiles, or the images)
 * and from a panel or the image. beta == 0 stores without reading C (as BLAS). The caller
 * picks the level; a CPU without it never gets here.
 */
#ifndef MSHADOW_PANEL_GEMM_H_
#define MSHADOW_PANEL_GEMM_H_
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "mshadow/packet.h"
#include "mshadow/transpose.h"
#ifdef _OPENMP
#include <omp.h>
static inline int ms_pg_thread(void) { return omp_get_thread_num(); }
static inline int ms_pg_team(void) { return omp_get_num_threads(); }
#else
static inline int ms_pg_thread(void) { return 0; }
static inline int ms_pg_team(void) { return 1; }
#endif

/* W (K x CK, element (m, k) at w[m * rs + k * cs]: a row-major matrix or, with the
 * strides swapped, a transposed one) into wp: block b holds rows b*MR.., element (k, r)
 * at wp[(b * CK + k) * MR + r]; rows past K are 0. Plain C, on every architecture: _blas
 * calls it at any level (the kernels below are x86's) */
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

/* How ms_pg_conv tiles a convolution (K output channels of oh x ow from rows of wrow, N
 * images, nt threads), and what its caller allocates for it. */
typedef struct {
  int by_channels;     /* 1: ms_pg_ktile's tiles (pixels x channel vectors); 0: ms_pg_tile's */
  int pack_rows;       /* rows a block of the packed weights (ms_pg_pack's mr) */
  ptrdiff_t group;     /* images a padded buffer holds (their pixels share tiles) */
  ptrdiff_t nbuf;      /* padded buffers: one a thread where threads take whole buffers */
  ptrdiff_t npix;      /* by_channels: pixel offsets (pix), in the buffer and in y */
  ptrdiff_t scratch;   /* by_channels: elements of the tiles' sums (scr), all threads */
} ms_pg_conv_plan;

/* The kernels' signatures, one definition each: the x86 kernels and the other targets'
 * stubs both take them. */
#define MS_PG_GEMM_SIG(T, t)                                                                  \
  ms_pg_gemm_##t(int level, const T *wp, const T *p, const ptrdiff_t *off, ptrdiff_t w, T *c, \
                 ptrdiff_t ldc, ptrdiff_t K, ptrdiff_t CK, T alpha, T beta, int nt)
#define MS_PG_CONV_SIG(T, t)                                                                  \
  ms_pg_conv_##t(int level, const T *wp, ptrdiff_t K, const T *x, ptrdiff_t N, ptrdiff_t C,   \
                 ptrdiff_t H, ptrdiff_t Wd, ptrdiff_t ldx, ptrdiff_t py, ptrdiff_t px,        \
                 ptrdiff_t kh, ptrdiff_t kw, ptrdiff_t st, T *y, ptrdiff_t ldy, T alpha,      \
                 T beta, const ms_pg_conv_plan *pl, T *xpad, ptrdiff_t *off, ptrdiff_t *pix,  \
                 T *scr, int nt)
#define MS_PG_CONVW_SIG(T, t)                                                                 \
  ms_pg_convw_##t(int level, const T *x, ptrdiff_t N, ptrdiff_t C, ptrdiff_t H, ptrdiff_t Wd, \
                  ptrdiff_t ldx, ptrdiff_t py, ptrdiff_t px, ptrdiff_t kh, ptrdiff_t kw,      \
                  const T *g, ptrdiff_t K, T *s, T *xpad, T *gt, ptrdiff_t *off,              \
                  ptrdiff_t *qs, int nt)

#if MS_X86 && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MS_PG_LEVELS 1

/* a tile: MR rows x NV vectors of accumulators, plus NV panel vectors and a broadcast
 * (AVX-512: 24 + 4 of 32 registers, 8 rows: 64-channel layers fill every block; AVX2:
 * 12 + 3 of 16) */
#define MS_PG_MR_AVX512 8
#define MS_PG_NV_AVX512 3
#define MS_PG_MR_AVX2 6
#define MS_PG_NV_AVX2 2
static inline int ms_pg_mr(int level) { return level >= 3 ? MS_PG_MR_AVX512 : MS_PG_MR_AVX2; }
/* the weight gradient's tile (ms_pg_convw): WMR taps x WNV vectors of filters (AVX-512:
 * 64 float filters in one tile; AVX2: 16) */
#define MS_PG_WMR_AVX512 6
#define MS_PG_WNV_AVX512 4
#define MS_PG_WMR_AVX2 6
#define MS_PG_WNV_AVX2 2
static inline int ms_pg_wmr(int level) { return level >= 3 ? MS_PG_WMR_AVX512 : MS_PG_WMR_AVX2; }
static inline ptrdiff_t ms_pg_wnr(int level, size_t item) {
  return level >= 3 ? MS_PG_WNV_AVX512 * 64 / (ptrdiff_t)item
                    : MS_PG_WNV_AVX2 * 32 / (ptrdiff_t)item;
}
/* columns of a tile: NV vectors of the level's width */
static inline ptrdiff_t ms_pg_nr(int level, size_t item) {
  return level >= 3 ? MS_PG_NV_AVX512 * 64 / (ptrdiff_t)item : MS_PG_NV_AVX2 * 32 / (ptrdiff_t)item;
}

/* The k loop of a tile: row k of B (at pb + off[k], pb the tile's first column): its NV
 * vectors times the packed column k of the block, into acc (MS_PG_TILE's locals). MODE
 * MS_PG_ONE_ROW: all lanes of every vector, in one row; MS_PG_END_IN + j: all lanes, the
 * row's end in vector j (lanes klo there, khi gap further on; the vectors after it gap
 * further on); MS_PG_ANY: vector v at src[v] in two pieces (a partial tile, or one across
 * 3 rows) */
enum { MS_PG_ONE_ROW, MS_PG_ANY, MS_PG_END_IN };
#define MS_PG_KLOOP(T, V, MR, NV, W, LOAD, LD2M, SET1, FMA, MODE)                              \
  for (k = 0; k < CK; ++k) {                                                                  \
    const T *b0 = pb + off[k], *b1 = b0 + gap;                                                \
    const T *a = wp + k * MR;                                                                 \
    /* a line of row k + 16 (the next channels' taps: in a direct convolution they are  \
     * 192 rows of the image a tile, too many streams for the hardware's prefetcher): 4-5% */ \
    if (k + 16 < CK) ms_prefetch((const char *)(pb + off[k + 16]) + (k & 3) * 64);            \
    V bv[NV];                                                                                 \
    (void)b1;                                                                                 \
    _Pragma("GCC unroll 4")                                                                   \
    for (v = 0; v < NV; ++v)                                                                  \
      bv[v] = (MODE) == MS_PG_ONE_ROW         ? LOAD(b0 + v * W, W)                           \
              : (MODE) == MS_PG_ANY           ? LD2M(b0 + src[v], mlo[v], mhi[v], gap)        \
              : v < (MODE) - MS_PG_END_IN     ? LOAD(b0 + v * W, W)                           \
              : v > (MODE) - MS_PG_END_IN     ? LOAD(b1 + v * W, W)                           \
                                              : LD2M(b0 + v * W, klo, khi, gap);              \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      const V ar = SET1(a[r]);                                                                \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) acc[r][v] = FMA(ar, bv[v], acc[r][v]);                         \
    }                                                                                         \
  }

/* Where the product's columns come from and go. Column u (of a panel, or of a direct
 * convolution's image: ms_pg_conv) is row u / R, column x = u % R: read at
 * (u / R) * srow + x of B, stored at (u / R) * ldo + x of the output when x < ow, else
 * dropped. A panel is one row: srow = R = ow = ldo = its width. A convolution reads the
 * padded image, rows of srow columns, and either skips the kw - 1 columns of each row that
 * wrap around its edge (R = ow: a vector across a row's end is loaded and stored in two
 * pieces, so it needs ow >= the vector width; ms_pg_conv asks for a tile's width) or
 * computes them and drops them (R = srow). */
typedef struct { ptrdiff_t srow, R, ow, ldo; } ms_pg_cols;

/* n lanes t[0..n) of columns q.. into row o: the lanes MS_PG_TILE could not store as
 * vectors, with the vector path's operations one at a time (the same bits) */
#define MS_PG_LANES(T, t)                                                                     \
  static inline void ms_pg_lanes_##t(T *o, const T *v, int n, ptrdiff_t q, ms_pg_cols m,      \
                                     T alpha, T beta) {                                       \
    ptrdiff_t ox = q % m.R, d = (q / m.R) * m.ldo + ox;                                       \
    int i;                                                                                    \
    for (i = 0; i < n; ++i) {                                                                 \
      if (ox < m.ow) {                                                                        \
        T x = v[i];                                                                           \
        if (alpha != (T)1) x = alpha * x;                                                     \
        if (beta != (T)0) x = x + beta * o[d];                                                \
        o[d] = x;                                                                             \
      }                                                                                       \
      ++d;                                                                                    \
      if (++ox == m.R) { ox = 0; d += m.ldo - m.R; }                                          \
    }                                                                                         \
  }
MS_PG_LANES(float, f32)
MS_PG_LANES(double, f64)

/* One tile: rows [0, rows) of a block (rows <= MR) and columns [q0, q0 + cols) (cols <=
 * NV W), row k of B at p + off[k], output row r at c + r * ldc, the columns placed by m.
 * Columns past cols are neither read nor written (masked). MT is the ISA's lane mask:
 * MASK(n) lanes [0, n), MASKHI(a, n) lanes [a, n). */
#define MS_PG_TILE(ISA, TARGET, T, t, V, MR, NV, W, MT, MASK, MASKHI, LOAD, LD2M, STORE, STM, \
                   SET1, FMA, MUL, ADD, ZERO)                                            \
  static TARGET void ms_pg_tile_##t##_##ISA(const T *wp, const T *p, const ptrdiff_t *off,    \
                                            T *c, ptrdiff_t ldc, ms_pg_cols m, ptrdiff_t q0,  \
                                            ptrdiff_t CK, int rows, int cols, T alpha,        \
                                            T beta) {                                         \
    V acc[MR][NV];                                                                            \
    T lanes[NV * W] __attribute__((aligned(64)));                                             \
    const ptrdiff_t gap = m.srow - m.R, gapo = m.ldo - m.R, x0 = q0 % m.R;                   \
    const ptrdiff_t src0 = (q0 / m.R) * m.srow + x0, end = m.R - x0; /* lanes to the row's end */\
    const T *pb = p + src0;                                                                   \
    ptrdiff_t k, src[NV], d[NV];                                                              \
    MT mlo[NV], mhi[NV], klo = MASK(0), khi = MASK(0);   /* klo, khi: MS_PG_END_IN + j's */  \
    int r, v, nv[NV], sa[NV], whole = 1, mode;                                                \
    for (v = 0; v < NV; ++v) {                                                                \
      const int left = cols - v * W;                                                          \
      const ptrdiff_t q = q0 + v * W, x = q % m.R;                                            \
      nv[v] = left < 0 ? 0 : left < W ? left : W;                                             \
      src[v] = (q / m.R) * m.srow + x - src0;                                                 \
      d[v] = (q / m.R) * m.ldo + x;                                                           \
      /* the lanes in this row; the rest are the next rows' (the next row's alone where   \
       * gap != 0: ms_pg_conv skips wrap-around columns only where R is a tile wide) */    \
      sa[v] = x + nv[v] <= m.R ? nv[v] : (int)(m.R - x);                                      \
      mlo[v] = MASK(sa[v]);                                                                   \
      mhi[v] = MASKHI(sa[v], nv[v]);                                                          \
      /* stored as vectors unless a lane is dropped (x >= ow: R = srow) or the vector     \
       * spans three rows of a pitched output */                                           \
      if (nv[v] && ((x + nv[v] > m.ow && m.R != m.ow) || (nv[v] - sa[v] > m.R && gapo)))     \
        whole = 0;                                                                            \
    }                                                                                         \
    if (cols == NV * W && (gap == 0 || end >= NV * W))                                        \
      mode = MS_PG_ONE_ROW;                                                                   \
    else if (cols == NV * W && end + m.R >= NV * W) {   /* across one row's end */           \
      const int j = (int)(end / W);                                                           \
      mode = MS_PG_END_IN + j;                                                                \
      /* (the end at a vector's start: all its lanes from the next row) */                  \
      klo = MASK(end - j * W);                                                                \
      khi = MASKHI(end - j * W, W);                                                           \
    } else                                                                                    \
      mode = MS_PG_ANY;                                                                       \
    /* every loop over r and v unrolled: constant indices keep acc in registers (a loop   \
     * to the run-time ``rows`` made the compiler store all of acc every k: 59 GFLOP/s,    \
     * not 141) */                                                                            \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) acc[r][v] = ZERO();                                            \
    }                                                                                         \
    switch (mode) {   /* a constant MODE a loop: the loads and masks fixed (NV <= 3) */      \
      case MS_PG_ONE_ROW: MS_PG_KLOOP(T, V, MR, NV, W, LOAD, LD2M, SET1, FMA, MS_PG_ONE_ROW) break;\
      case MS_PG_END_IN: MS_PG_KLOOP(T, V, MR, NV, W, LOAD, LD2M, SET1, FMA, MS_PG_END_IN) break;\
      case MS_PG_END_IN + 1:                                                                  \
        MS_PG_KLOOP(T, V, MR, NV, W, LOAD, LD2M, SET1, FMA, MS_PG_END_IN + 1) break;          \
      case MS_PG_END_IN + 2:                                                                  \
        MS_PG_KLOOP(T, V, MR, NV, W, LOAD, LD2M, SET1, FMA, MS_PG_END_IN + 2) break;          \
      default: MS_PG_KLOOP(T, V, MR, NV, W, LOAD, LD2M, SET1, FMA, MS_PG_ANY) break;          \
    }                                                                                         \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      T *o = c + r * ldc;                                                                     \
      if (r >= rows) break;                                                                   \
      if (whole) {                                                                            \
        _Pragma("GCC unroll 4")                                                               \
        for (v = 0; v < NV; ++v) {                                                            \
          V x = acc[r][v];                                                                    \
          if (!nv[v]) break;                                                                  \
          if (alpha != (T)1) x = MUL(SET1(alpha), x);                                         \
          if (beta != (T)0) x = ADD(x, MUL(SET1(beta), LD2M(o + d[v], mlo[v], mhi[v], gapo)));\
          if (sa[v] == nv[v]) {                                                               \
            STORE(o + d[v], x, nv[v]);                                                        \
          } else {   /* across a row's end: its two pieces */                                \
            STM(o + d[v], x, mlo[v]);                                                         \
            STM(o + d[v] + gapo, x, mhi[v]);                                                  \
          }                                                                                   \
        }                                                                                     \
      } else {                                                                                \
        _Pragma("GCC unroll 4")                                                               \
        for (v = 0; v < NV; ++v) STORE(lanes + v * W, acc[r][v], W);                          \
        ms_pg_lanes_##t(o, lanes, cols, q0, m, alpha, beta);                                  \
      }                                                                                       \
    }                                                                                         \
  }

/* AVX-512: masked loads and stores */
#define MS_PG_M16(n) ((__mmask16)((n) >= 16 ? 0xFFFF : (1u << (n)) - 1u))
#define MS_PG_M8(n) ((__mmask8)((n) >= 8 ? 0xFF : (1u << (n)) - 1u))
#define MS_PG_LD512S(p, n) _mm512_maskz_loadu_ps(MS_PG_M16(n), (p))
#define MS_PG_ST512S(p, v, n) _mm512_mask_storeu_ps((p), MS_PG_M16(n), (v))
#define MS_PG_LD512D(p, n) _mm512_maskz_loadu_pd(MS_PG_M8(n), (p))
#define MS_PG_ST512D(p, v, n) _mm512_mask_storeu_pd((p), MS_PG_M8(n), (v))
#define MS_PG_HI16(a, n) ((__mmask16)(MS_PG_M16(n) & ~MS_PG_M16(a)))
#define MS_PG_HI8(a, n) ((__mmask8)(MS_PG_M8(n) & ~MS_PG_M8(a)))
/* lanes lo from p and hi from p + g */
#define MS_PG_LD2512S(p, lo, hi, g) _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(lo, p), hi, (p) + (g))
#define MS_PG_LD2512D(p, lo, hi, g) _mm512_mask_loadu_pd(_mm512_maskz_loadu_pd(lo, p), hi, (p) + (g))
#define MS_PG_STM512S(p, v, k) _mm512_mask_storeu_ps((p), k, (v))
#define MS_PG_STM512D(p, v, k) _mm512_mask_storeu_pd((p), k, (v))
#define MS_PG_T512 __attribute__((target("avx512f")))
MS_PG_TILE(avx512, MS_PG_T512, float, f32, __m512, MS_PG_MR_AVX512, MS_PG_NV_AVX512, 16,
           __mmask16, MS_PG_M16, MS_PG_HI16, MS_PG_LD512S,
           MS_PG_LD2512S, MS_PG_ST512S, MS_PG_STM512S, _mm512_set1_ps, _mm512_fmadd_ps,
           _mm512_mul_ps, _mm512_add_ps, _mm512_setzero_ps)
MS_PG_TILE(avx512, MS_PG_T512, double, f64, __m512d, MS_PG_MR_AVX512, MS_PG_NV_AVX512, 8,
           __mmask8, MS_PG_M8, MS_PG_HI8, MS_PG_LD512D, MS_PG_LD2512D,
           MS_PG_ST512D, MS_PG_STM512D, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_mul_pd,
           _mm512_add_pd, _mm512_setzero_pd)

/* AVX2: lane masks from a window of this table */
static const int32_t ms_pg_mask32[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static const int64_t ms_pg_mask64[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
#define MS_PG_T256 __attribute__((target("avx2,fma")))
#define MS_PG_K8(n) _mm256_loadu_si256((const __m256i *)(ms_pg_mask32 + 8 - ((n) < 8 ? (n) : 8)))
#define MS_PG_K4(n) _mm256_loadu_si256((const __m256i *)(ms_pg_mask64 + 4 - ((n) < 4 ? (n) : 4)))
#define MS_PG_HIK8(a, n) _mm256_andnot_si256(MS_PG_K8(a), MS_PG_K8(n))
#define MS_PG_HIK4(a, n) _mm256_andnot_si256(MS_PG_K4(a), MS_PG_K4(n))
#define MS_PG_LD256S(p, n) ((n) >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), MS_PG_K8(n)))
#define MS_PG_ST256S(p, v, n) \
  do { if ((n) >= 8) _mm256_storeu_ps((p), (v)); else _mm256_maskstore_ps((p), MS_PG_K8(n), (v)); } while (0)
#define MS_PG_LD256D(p, n) ((n) >= 4 ? _mm256_loadu_pd(p) : _mm256_maskload_pd((p), MS_PG_K4(n)))
#define MS_PG_ST256D(p, v, n) \
  do { if ((n) >= 4) _mm256_storeu_pd((p), (v)); else _mm256_maskstore_pd((p), MS_PG_K4(n), (v)); } while (0)
/* (masked-off lanes load as +0: the OR keeps the other piece's bits) */
#define MS_PG_LD2256S(p, lo, hi, g) \
  _mm256_or_ps(_mm256_maskload_ps((p), lo), _mm256_maskload_ps((p) + (g), hi))
#define MS_PG_LD2256D(p, lo, hi, g) \
  _mm256_or_pd(_mm256_maskload_pd((p), lo), _mm256_maskload_pd((p) + (g), hi))
#define MS_PG_STM256S(p, v, k) _mm256_maskstore_ps((p), k, (v))
#define MS_PG_STM256D(p, v, k) _mm256_maskstore_pd((p), k, (v))
MS_PG_TILE(avx2, MS_PG_T256, float, f32, __m256, MS_PG_MR_AVX2, MS_PG_NV_AVX2, 8, __m256i,
           MS_PG_K8, MS_PG_HIK8, MS_PG_LD256S, MS_PG_LD2256S, MS_PG_ST256S,
           MS_PG_STM256S, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps,
           _mm256_setzero_ps)
MS_PG_TILE(avx2, MS_PG_T256, double, f64, __m256d, MS_PG_MR_AVX2, MS_PG_NV_AVX2, 4, __m256i,
           MS_PG_K4, MS_PG_HIK4, MS_PG_LD256D, MS_PG_LD2256D, MS_PG_ST256D,
           MS_PG_STM256D, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_mul_pd, _mm256_add_pd,
           _mm256_setzero_pd)

/* The tiles [t0, t1) of the product of packed W (K rows) and B (CK rows, row k at p + off[k],
 * ncol columns), the tile of block b and columns j at index b * nj + j / W2 */
#define MS_PG_TILES(T, t)                                                                     \
  static void ms_pg_tiles_##t(int level, const T *wp, const T *p, const ptrdiff_t *off,       \
                              ptrdiff_t ncol, T *c, ptrdiff_t ldc, ms_pg_cols m, ptrdiff_t K, \
                              ptrdiff_t CK, T alpha, T beta, ptrdiff_t t0, ptrdiff_t t1) {    \
    const int mr = ms_pg_mr(level);                                                           \
    const ptrdiff_t W2 = ms_pg_nr(level, sizeof(T));                                          \
    const ptrdiff_t nb = (K + mr - 1) / mr;                                                   \
    ptrdiff_t q;                                                                              \
    for (q = t0; q < t1; ++q) {                                                               \
      /* a block's tiles one after another: its packed rows stay in L1 */                    \
      const ptrdiff_t nj = (ncol + W2 - 1) / W2, b = q / nj, j = (q % nj) * W2;               \
      const int rows = (int)(K - b * mr < mr ? K - b * mr : mr);                              \
      const int cols = (int)(ncol - j < W2 ? ncol - j : W2);                                  \
      if (level >= 3)                                                                         \
        ms_pg_tile_##t##_avx512(wp + b * CK * mr, p, off, c + b * mr * ldc, ldc, m, j,    \
                                CK, rows, cols, alpha, beta);                                 \
      else                                                                                    \
        ms_pg_tile_##t##_avx2(wp + b * CK * mr, p, off, c + b * mr * ldc, ldc, m, j,      \
                              CK, rows, cols, alpha, beta);                                   \
    }                                                                                         \
  }                                                                                           \
  static inline ptrdiff_t ms_pg_ntiles_##t(int level, ptrdiff_t K, ptrdiff_t ncol) {          \
    const int mr = ms_pg_mr(level);                                                           \
    const ptrdiff_t W2 = ms_pg_nr(level, sizeof(T));                                          \
    return ((K + mr - 1) / mr) * ((ncol + W2 - 1) / W2);                                      \
  }
MS_PG_TILES(float, f32)
MS_PG_TILES(double, f64)

/* The whole product C (K x w, row stride ldc) = alpha * W @ P + beta * C, P's row k at
 * p + off[k], over tiles of MR rows x 2 W columns, on nt threads (level 2 or 3). */
#define MS_PG_GEMM(T, t)                                                                      \
  static void MS_PG_GEMM_SIG(T, t) {                                                          \
    const ms_pg_cols m = {w, w > 0 ? w : 1, w, w};                                            \
    const ptrdiff_t n = ms_pg_ntiles_##t(level, K, w);                                        \
    ptrdiff_t i;                                                                              \
    (void)nt;                                                                                 \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (nt > 1)")                  \
    for (i = 0; i < n; ++i)                                                                   \
      ms_pg_tiles_##t(level, wp, p, off, w, c, ldc, m, K, CK, alpha, beta, i, i + 1);         \
  }
MS_PG_GEMM(float, f32)
MS_PG_GEMM(double, f64)

/* Channels [c0, c1) of image x (C, H, W; rows ldx apart) into the interior of its padded
 * copy xp (rows of wrow, Hp a channel); the border is left as it is (0). */
#define MS_PG_FILL(T, t)                                                                      \
  static void ms_pg_fill_##t(T *xp, const T *x, ptrdiff_t c0, ptrdiff_t c1, ptrdiff_t H,      \
                             ptrdiff_t Wd, ptrdiff_t ldx, ptrdiff_t py, ptrdiff_t px,        \
                             ptrdiff_t Hp, ptrdiff_t wrow) {                                  \
    ptrdiff_t ch, i;                                                                          \
    for (ch = c0; ch < c1; ++ch)                                                              \
      for (i = 0; i < H; ++i)                                                                 \
        memcpy(xp + (ch * Hp + py + i) * wrow + px, x + (ch * H + i) * ldx,                   \
               (size_t)Wd * sizeof(T));                                                       \
  }                                                                                           \
  /* off[(c, ky, kx)]: where tap (c, ky, kx)'s row starts in the padded image */            \
  static void ms_pg_taps_##t(ptrdiff_t *off, ptrdiff_t C, ptrdiff_t kh, ptrdiff_t kw,         \
                             ptrdiff_t Hp, ptrdiff_t wrow) {                                  \
    ptrdiff_t ch, ky, kx;                                                                     \
    for (ch = 0; ch < C; ++ch)                                                                \
      for (ky = 0; ky < kh; ++ky)                                                             \
        for (kx = 0; kx < kw; ++kx) off[(ch * kh + ky) * kw + kx] = (ch * Hp + ky) * wrow + kx;\
  }
MS_PG_FILL(float, f32)
MS_PG_FILL(double, f64)

/* The other tile of a stride-1 convolution, for small images (ms_pg_conv_plan chooses):
 * MP pixels x NV vectors of output channels. Each pixel's tap value xpad[pix + off[k]] is
 * broadcast, times row k of the packed weights (ms_pg_pack with a block of KB = NV W
 * channels, k-major): the vectors run along the channels, so a tile never straddles a
 * row's end and any pixels can share one (those of several images, where an image has
 * fewer pixels than a few tiles). Each output adds its products in k order, one fused
 * multiply-add each, from 0, as ms_pg_tile does: the same bits. The k loop runs a chunk
 * of MS_PG_KJC taps over every tile of a buffer before the next chunk (the chunk's
 * weights stay in L1; a tile's sums wait in the scratch between chunks). On 64 images of
 * 512 x 7 x 7 (K = 512, one thread, Xeon AVX-512): 75 -> 144 GFLOP/s. */
#define MS_PG_KMP_AVX512 6
#define MS_PG_KNV_AVX512 4
#define MS_PG_KMP_AVX2 6
#define MS_PG_KNV_AVX2 2
#define MS_PG_KJC 64
static inline int ms_pg_kmp(int level) { return level >= 3 ? MS_PG_KMP_AVX512 : MS_PG_KMP_AVX2; }
/* the channels of a tile (its packed weights' block) */
static inline ptrdiff_t ms_pg_kb(int level, size_t item) {
  return level >= 3 ? MS_PG_KNV_AVX512 * 64 / (ptrdiff_t)item : MS_PG_KNV_AVX2 * 32 / (ptrdiff_t)item;
}

/* Taps [0, jn) of the block's packed weights wq (row k at wq + k * KB) for the npx pixels
 * at xp + pix[r], into s (MP x KB, pixel-major): from 0 where first, else from s. */
#define MS_PG_KTILE(ISA, TARGET, T, t, V, MP, NV, W, LOADU, STOREU, SET1, FMA, ZERO)         \
  static TARGET void ms_pg_ktile_##t##_##ISA(const T *wq, const T *xp, const ptrdiff_t *off,  \
                                             ptrdiff_t jn, const ptrdiff_t *pix, int npx,    \
                                             T *s, int first) {                              \
    V acc[MP][NV];                                                                            \
    const T *a[MP];                                                                           \
    ptrdiff_t k;                                                                              \
    int r, v;                                                                                 \
    _Pragma("GCC unroll 8")                                                                   \
    for (r = 0; r < MP; ++r) {                                                                \
      a[r] = xp + pix[r < npx ? r : 0];   /* a pixel past the last: computed, not stored */  \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) acc[r][v] = first ? ZERO() : LOADU(s + (r * NV + v) * W);     \
    }                                                                                         \
    for (k = 0; k < jn; ++k) {                                                                \
      const ptrdiff_t o = off[k];                                                             \
      V bv[NV];                                                                               \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) bv[v] = LOADU(wq + (k * NV + v) * W);                          \
      _Pragma("GCC unroll 8")                                                                 \
      for (r = 0; r < MP; ++r) {                                                              \
        const V ar = SET1(a[r][o]);                                                           \
        _Pragma("GCC unroll 4")                                                               \
        for (v = 0; v < NV; ++v) acc[r][v] = FMA(ar, bv[v], acc[r][v]);                       \
      }                                                                                       \
    }                                                                                         \
    _Pragma("GCC unroll 8")                                                                   \
    for (r = 0; r < MP; ++r) {                                                                \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) STOREU(s + (r * NV + v) * W, acc[r][v]);                       \
    }                                                                                         \
  }
MS_PG_KTILE(avx512, MS_PG_T512, float, f32, __m512, MS_PG_KMP_AVX512, MS_PG_KNV_AVX512, 16,
            _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps)
MS_PG_KTILE(avx512, MS_PG_T512, double, f64, __m512d, MS_PG_KMP_AVX512, MS_PG_KNV_AVX512, 8,
            _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_setzero_pd)
MS_PG_KTILE(avx2, MS_PG_T256, float, f32, __m256, MS_PG_KMP_AVX2, MS_PG_KNV_AVX2, 8,
            _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps)
MS_PG_KTILE(avx2, MS_PG_T256, double, f64, __m256d, MS_PG_KMP_AVX2, MS_PG_KNV_AVX2, 4,
            _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_setzero_pd)

#define MS_PG_KPIX 192   /* pixels a buffer aims at: 4 images of 7 x 7 fill 33 tiles of 6 */
#define MS_PG_KTR 48     /* tiles a range: their sums (72 KiB of float32) wait in L2 */

static inline ptrdiff_t ms_pg_ceil(ptrdiff_t a, ptrdiff_t b) { return (a + b - 1) / b; }

/* The tile that costs less: lanes computed, each CK taps and, where it is stored alone,
 * MS_PG_STORE_TAPS vectors' taps more (a scalar store with the savers' scalars, about 1.5
 * cycles). ms_pg_tile's are a row of vectors across the padded rows, its wrap-around
 * columns too where a row is narrower than a tile (and then stored lane by lane);
 * ms_pg_ktile's are channels in vectors, stored lane by lane. The store's cost keeps 3
 * input channels on 56 x 56 on ms_pg_tile (1.3 -> 0.5 ms: ms_pg_ktile's tiles of 27
 * taps stored more than they computed); small images take ms_pg_ktile's (AVX-512,
 * float32, one thread: 16 x 128 x 28 x 28, K = 128: 145 -> 164 GFLOP/s). */
#define MS_PG_STORE_TAPS 3
#define MS_PG_KBUF (2 << 20)   /* bytes of padded images a buffer holds at most (an L2) */
static inline void ms_pg_conv_plan_for(int level, size_t item, ptrdiff_t K, ptrdiff_t CK,
                                       ptrdiff_t N, ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t wrow,
                                       ptrdiff_t stride, ptrdiff_t plane, int nt,
                                       ms_pg_conv_plan *pl) {
  const double image = (double)plane * (double)item;   /* one padded image's bytes */
  const ptrdiff_t nr = ms_pg_nr(level, item), mr = ms_pg_mr(level);
  const ptrdiff_t kb = ms_pg_kb(level, item), mp = ms_pg_kmp(level), npx = oh * ow;
  /* (a stride above 1: ms_pg_tile's tiles over im2col's panels, the caller's other path) */
  const ptrdiff_t R = ow >= nr || stride != 1 ? ow : wrow, ncol = (oh - 1) * R + ow;
  const ptrdiff_t team = nt > 1 ? nt : 1, per_thread = ms_pg_ceil(N > 0 ? N : 1, team);
  const double store = MS_PG_STORE_TAPS * (double)(level >= 3 ? 64 : 32) / (double)item;
  ptrdiff_t g = npx > 0 ? ms_pg_ceil(MS_PG_KPIX, npx) : 1;
  double by_pixels, by_channels;
  if (g > per_thread) g = per_thread;   /* every thread a buffer while there are images */
  if (g > 1 && g * image > MS_PG_KBUF) g = image >= MS_PG_KBUF ? 1 : (ptrdiff_t)(MS_PG_KBUF / image);
  by_pixels = (double)ms_pg_ceil(K, mr) * mr * ms_pg_ceil(ncol, nr) * nr *
              ((double)CK + (R == ow ? 0 : store));
  /* and im2col's panels, written and read, each a parallel region to wake: 40% more. 3x3
   * stride 2, K 128 on 16 x 64 x 56 x 56: panels 112 GFLOP/s, channel tiles 150; ResNet's
   * first layer (8 x 3 x 224 x 224, 7x7 stride 2, K 64): panels 18 / 23 ms on 1 / 2
   * threads, channel tiles 17.5 / 10.2 */
  if (stride != 1) by_pixels *= 1.40;
  by_channels = (double)ms_pg_ceil(K, kb) * kb * ms_pg_ceil(g * npx, mp) * mp / g *
                ((double)CK + store);
  pl->by_channels = oh > 0 && ow > 0 && K > 0 && by_channels <= by_pixels;
  /* A strided tile's pixels scatter over the image: where one image passes an L2, every
   * chunk's reads miss it (1x1 stride 2, K 512 on 16 x 256 x 56 x 56, 3.2 MB an image:
   * panels 27 ms, channel tiles 42) */
  if (stride != 1 && image > MS_PG_KBUF) pl->by_channels = 0;
  pl->pack_rows = (int)(pl->by_channels ? kb : mr);
  pl->group = pl->by_channels ? g : 1;
  pl->nbuf = team > 1 && ms_pg_ceil(N, pl->group) >= team ? team : 1;
  pl->npix = pl->by_channels ? 2 * g * npx + mp : 0;   /* (where pixels are read, stored) */
  pl->scratch = pl->by_channels ? team * MS_PG_KTR * mp * kb : 0;
}

/* ms_pg_ktile's work on one buffer (npix pixels, pixel p at xp + pix[p]): channel block
 * b's tiles [t0, t1) (at most MS_PG_KTR), chunk by chunk into s, then stored (pixel p of
 * channel k at y + k * oh * ldy + yo[p]) with the savers' alpha and beta, as ms_pg_lanes
 * does (the same bits as ms_pg_tile's vectors). */
#define MS_PG_KRANGE(T, t)                                                                    \
  static void ms_pg_krange_##t(int level, const T *wq, ptrdiff_t K, ptrdiff_t CK,            \
                               const T *xp, const ptrdiff_t *off, const ptrdiff_t *pix,      \
                               const ptrdiff_t *yo, ptrdiff_t npix, ptrdiff_t b, ptrdiff_t t0,\
                               ptrdiff_t t1, T *s, T *y, ptrdiff_t oh, ptrdiff_t ldy, T alpha,\
                               T beta) {                                                      \
    const ptrdiff_t kb = ms_pg_kb(level, sizeof(T)), mp = ms_pg_kmp(level);                  \
    const ptrdiff_t k0 = b * kb, k1 = K - k0 < kb ? K : k0 + kb;                              \
    const ptrdiff_t p0 = t0 * mp, p1 = t1 * mp < npix ? t1 * mp : npix;                       \
    const T *wb = wq + b * CK * kb;                                                           \
    ptrdiff_t j0, q, p, k;                                                                    \
    for (j0 = 0; j0 < CK; j0 += MS_PG_KJC) {                                                  \
      const ptrdiff_t jn = CK - j0 < MS_PG_KJC ? CK - j0 : MS_PG_KJC;                         \
      for (q = t0; q < t1; ++q) {                                                             \
        const int n = (int)(npix - q * mp < mp ? npix - q * mp : mp);                         \
        if (level >= 3)                                                                       \
          ms_pg_ktile_##t##_avx512(wb + j0 * kb, xp, off + j0, jn, pix + q * mp, n,           \
                                   s + (q - t0) * mp * kb, j0 == 0);                          \
        else                                                                                  \
          ms_pg_ktile_##t##_avx2(wb + j0 * kb, xp, off + j0, jn, pix + q * mp, n,             \
                                 s + (q - t0) * mp * kb, j0 == 0);                            \
      }                                                                                       \
    }                                                                                         \
    for (k = k0; k < k1; ++k) {   /* a channel's pixels one after another in y */          \
      T *o = y + k * oh * ldy;                                                                \
      const T *v = s + (k - k0);                                                              \
      for (p = p0; p < p1; ++p) {                                                             \
        T x = v[(p - p0) * kb];                                                               \
        if (alpha != (T)1) x = alpha * x;                                                     \
        if (beta != (T)0) x = x + beta * o[yo[p]];                                            \
        o[yo[p]] = x;                                                                         \
      }                                                                                       \
    }                                                                                         \
  }
MS_PG_KRANGE(float, f32)
MS_PG_KRANGE(double, f64)

/* ms_pg_conv with ms_pg_ktile's tiles (pl->by_channels): buffers of pl->group images, each
 * image's pixels numbered on from the last's; a stride st > 1 only spaces the pixels'
 * offsets (tap (c, ky, kx) of output (oy, ox) at (c Hp + oy st + ky) wrow + ox st + kx).
 * Threads take whole buffers (pl->nbuf, one each) where there are as many, else share
 * each buffer: its channels filled, then its (channel block, tile range) items split. */
#define MS_PG_CONVK(T, t)                                                                     \
  static void ms_pg_convk_##t(int level, const T *wp, ptrdiff_t K, const T *x, ptrdiff_t N,   \
                              ptrdiff_t C, ptrdiff_t H, ptrdiff_t Wd, ptrdiff_t ldx,          \
                              ptrdiff_t py, ptrdiff_t px, ptrdiff_t kh, ptrdiff_t kw,         \
                              ptrdiff_t st, T *y, ptrdiff_t ldy, T alpha, T beta,             \
                              const ms_pg_conv_plan *pl, T *xpad, const ptrdiff_t *off,       \
                              ptrdiff_t *pix, T *scr, int nt) {                               \
    const ptrdiff_t Hp = H + 2 * py, wrow = Wd + 2 * px;                                      \
    const ptrdiff_t oh = (Hp - kh) / st + 1, ow = (wrow - kw) / st + 1;                       \
    const ptrdiff_t CK = C * kh * kw, plane = C * Hp * wrow, npx = oh * ow, G = pl->group;    \
    const ptrdiff_t kb = ms_pg_kb(level, sizeof(T)), mp = ms_pg_kmp(level);                  \
    const ptrdiff_t nb = ms_pg_ceil(K, kb), ngrp = ms_pg_ceil(N, G), sstep = MS_PG_KTR * mp * kb;\
    ptrdiff_t *yo = pix + G * npx + mp;   /* where each pixel goes in y's channel 0 */     \
    ptrdiff_t p, gi;                                                                          \
    for (p = 0; p < G * npx; ++p) {                                                           \
      pix[p] = (p / npx) * plane + ((p % npx) / ow * wrow + (p % npx) % ow) * st;             \
      yo[p] = (p / npx) * K * oh * ldy + (p % npx) / ow * ldy + (p % npx) % ow;               \
    }                                                                                         \
    if (pl->nbuf > 1 || nt <= 1) {                                                            \
      _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                     \
      {                                                                                       \
        T *xp = xpad + (ptrdiff_t)ms_pg_thread() * G * plane, *s = scr + ms_pg_thread() * sstep;\
        ptrdiff_t q, b, t0, m;                                                                \
        _Pragma("omp for schedule(static) nowait")                                            \
        for (q = 0; q < ngrp; ++q) {                                                          \
          const ptrdiff_t n0 = q * G, ng = N - n0 < G ? N - n0 : G;                           \
          const ptrdiff_t ntile = ms_pg_ceil(ng * npx, mp);                                   \
          for (m = 0; m < ng; ++m)                                                            \
            ms_pg_fill_##t(xp + m * plane, x + (n0 + m) * C * H * ldx, 0, C, H, Wd, ldx, py, px,\
                           Hp, wrow);                                                         \
          for (b = 0; b < nb; ++b)                                                            \
            for (t0 = 0; t0 < ntile; t0 += MS_PG_KTR)                                         \
              ms_pg_krange_##t(level, wp, K, CK, xp, off, pix, yo, ng * npx, b, t0,          \
                               ntile - t0 < MS_PG_KTR ? ntile : t0 + MS_PG_KTR, s,            \
                               y + n0 * K * oh * ldy, oh, ldy, alpha, beta);                  \
        }                                                                                     \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    for (gi = 0; gi < ngrp; ++gi) {                                                           \
      const ptrdiff_t n0 = gi * G, ng = N - n0 < G ? N - n0 : G;                              \
      const ptrdiff_t ntile = ms_pg_ceil(ng * npx, mp);                                       \
      /* ranges enough for every thread an item where the blocks alone are too few */       \
      ptrdiff_t rt = ms_pg_ceil(ntile, ms_pg_ceil(nt, nb)), nrng, items, i;                   \
      if (rt > MS_PG_KTR) rt = MS_PG_KTR;                                                     \
      nrng = ms_pg_ceil(ntile, rt);                                                           \
      items = nb * nrng;                                                                      \
      _Pragma("omp parallel num_threads(nt)")                                                 \
      {                                                                                       \
        T *s = scr + ms_pg_thread() * sstep;                                                  \
        _Pragma("omp for schedule(static)")                                                   \
        for (i = 0; i < ng * C; ++i)                                                          \
          ms_pg_fill_##t(xpad + (i / C) * plane, x + (n0 + i / C) * C * H * ldx, i % C,       \
                         i % C + 1, H, Wd, ldx, py, px, Hp, wrow);                            \
        _Pragma("omp for schedule(static) nowait")                                            \
        for (i = 0; i < items; ++i) {                                                         \
          const ptrdiff_t b = i / nrng, t0 = (i % nrng) * rt;                                 \
          ms_pg_krange_##t(level, wp, K, CK, xpad, off, pix, yo, ng * npx, b, t0,            \
                           ntile - t0 < rt ? ntile : t0 + rt, s, y + n0 * K * oh * ldy, oh,   \
                           ldy, alpha, beta);                                                 \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }
MS_PG_CONVK(float, f32)
MS_PG_CONVK(double, f64)

/* A stride-1 convolution read straight from the padded image (no column matrix):
 *
 *     y[n, k, oy, ox] = alpha * sum_{c, ky, kx} W[k, (c, ky, kx)] * xpad[n, c, oy + ky, ox + kx]
 *                       + beta * y[n, k, oy, ox]
 *
 * With xpad's rows (wrow = W + 2 px columns) read as one long row, the panel row of
 * (c, ky, kx) is xpad shifted by off = (c * Hp + ky) * wrow + kx: its column q is output
 * (q / wrow, q % wrow), and the kw - 1 columns of each row past ow wrap around the edge
 * (skipped: ms_pg_cols). Each output adds the same products in the same order as the
 * panels of im2col do: the same bits.
 *
 * x (N, C, H, W) has rows ldx apart; y (N, K, oh, ow) rows ldy apart. xpad holds nt zeroed
 * buffers of C * Hp * wrow (their borders stay 0: only the interior is copied); off holds
 * C * kh * kw. Threads take whole images (each its own buffer) when there are at least
 * as many images, else share each image's buffer and split its tiles. */
#define MS_PG_CONV(T, t)                                                                      \
  static void MS_PG_CONV_SIG(T, t) {                                                          \
    const ptrdiff_t Hp = H + 2 * py, wrow = Wd + 2 * px, oh = Hp - kh + 1, ow = wrow - kw + 1;\
    const ptrdiff_t CK = C * kh * kw, plane = C * Hp * wrow;                                  \
    /* the kw - 1 columns of each row that wrap around the edge are skipped where a tile  \
     * spans at most two rows, else computed and dropped (on 56x56, 3.4% of the products, \
     * and tiles across a row's end stored lane by lane: 136 -> 146 GFLOP/s, one thread; \
     * on 28x28 at AVX-512, where 4 tiles in 7 would take MS_PG_ANY's two loads a vector, \
     * 27 -> 31 ms) */                                                                      \
    const ptrdiff_t R = ow >= ms_pg_nr(level, sizeof(T)) ? ow : wrow;                         \
    const ms_pg_cols m = {wrow, R, ow, ldy};                                                  \
    /* the columns up to the last output: the last row's wrap-around is never read */       \
    const ptrdiff_t ncol = (oh - 1) * R + ow;                                                 \
    ptrdiff_t n, ntile;                                                                       \
    if (N <= 0 || K <= 0 || oh <= 0 || ow <= 0) return;                                       \
    ms_pg_taps_##t(off, C, kh, kw, Hp, wrow);                                                 \
    if (pl->by_channels) {                                                                    \
      ms_pg_convk_##t(level, wp, K, x, N, C, H, Wd, ldx, py, px, kh, kw, st, y, ldy, alpha,   \
                      beta, pl, xpad, off, pix, scr, nt);                                     \
      return;                                                                                 \
    }                                                                                         \
    if (st != 1) return;   /* (the plan never asks for it: ms_pg_tile's columns are stride 1) */\
    ntile = ms_pg_ntiles_##t(level, K, ncol);                                                 \
    if (nt <= 1 || N >= nt) {                                                                 \
      _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                     \
      {                                                                                       \
        T *xp = xpad + (ptrdiff_t)ms_pg_thread() * plane;                                     \
        _Pragma("omp for schedule(static) nowait")                                            \
        for (n = 0; n < N; ++n) {                                                             \
          ms_pg_fill_##t(xp, x + n * C * H * ldx, 0, C, H, Wd, ldx, py, px, Hp, wrow);        \
          ms_pg_tiles_##t(level, wp, xp, off, ncol, y + n * K * oh * ldy, oh * ldy, m, K, CK, \
                          alpha, beta, 0, ntile);                                             \
        }                                                                                     \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    for (n = 0; n < N; ++n) {                                                                 \
      const T *xn = x + n * C * H * ldx;                                                      \
      T *yn = y + n * K * oh * ldy;                                                           \
      ptrdiff_t i;                                                                            \
      (void)xn; (void)yn;                                                                     \
      _Pragma("omp parallel num_threads(nt)")                                                 \
      {                                                                                       \
        _Pragma("omp for schedule(static)")                                                   \
        for (i = 0; i < C; ++i) ms_pg_fill_##t(xpad, xn, i, i + 1, H, Wd, ldx, py, px, Hp, wrow);\
        _Pragma("omp for schedule(static) nowait")                                            \
        for (i = 0; i < ntile; ++i)                                                           \
          ms_pg_tiles_##t(level, wp, xpad, off, ncol, yn, oh * ldy, m, K, CK, alpha, beta, i,  \
                          i + 1);                                                             \
      }                                                                                       \
    }                                                                                         \
  }
MS_PG_CONV(float, f32)
MS_PG_CONV(double, f64)

/* The weight gradient of a stride-1 convolution, read straight from the padded images:
 *
 *     S[(c, ky, kx), k] = sum_n sum_{oy, ox} xpad[n, c, oy + ky, ox + kx] * g[n, k, oy, ox]
 *
 * an outer product per column q of the padded image (as in ms_pg_conv): the taps' values
 * xpad[off[j] + q] broadcast, times row q of gt, g transposed to (columns x K); the
 * wrap-around columns are skipped. A tile is WMR taps x WNV vectors of k, over a chunk of columns
 * (gt's chunk stays in L1 across the thread's taps); S, tap-major with rows of KP (K
 * rounded up to the tile's vectors), holds the running sums between chunks. Each sum adds
 * its products in (n, q) order, one fused multiply-add each, from 0: the same bits at both
 * levels (the vectors run along k) and every thread count (threads split the taps). */
#define MS_PG_WTILE(ISA, TARGET, T, t, V, MR, NV, W, LOAD, STORE, SET1, FMA, ZERO)            \
  static TARGET void ms_pg_wtile_##t##_##ISA(const T *xp, const ptrdiff_t *offj, int rows,    \
                                             const T *gt, ptrdiff_t ldg, const ptrdiff_t *qs, \
                                             ptrdiff_t nq, T *s, ptrdiff_t lds) {             \
    V acc[MR][NV];                                                                            \
    const T *a[MR];                                                                           \
    ptrdiff_t u;                                                                              \
    int r, v;                                                                                 \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      a[r] = xp + offj[r < rows ? r : 0];   /* a row past the taps: computed, not stored */ \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) acc[r][v] = r < rows ? LOAD(s + r * lds + v * W, W) : ZERO(); \
    }                                                                                         \
    /* the output columns qs[0..nq), in order: the wrap-around ones and the rows between  \
     * stacked images are not among them, never multiplied by gt's zeros (an inf or NaN of \
     * the image there would make a NaN); one loop, not one a row (rows of 7 columns ended \
     * a loop every 7) */                                                                   \
    for (u = 0; u < nq; ++u) {                                                                \
      const ptrdiff_t q = qs[u];                                                              \
      V bv[NV];                                                                               \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) bv[v] = LOAD(gt + q * ldg + v * W, W);                         \
      _Pragma("GCC unroll 12")                                                                \
      for (r = 0; r < MR; ++r) {                                                              \
        const V ar = SET1(a[r][q]);                                                           \
        _Pragma("GCC unroll 4")                                                               \
        for (v = 0; v < NV; ++v) acc[r][v] = FMA(ar, bv[v], acc[r][v]);                       \
      }                                                                                       \
    }                                                                                         \
    _Pragma("GCC unroll 12")                                                                  \
    for (r = 0; r < MR; ++r) {                                                                \
      if (r >= rows) break;                                                                   \
      _Pragma("GCC unroll 4")                                                                 \
      for (v = 0; v < NV; ++v) STORE(s + r * lds + v * W, acc[r][v], W);                      \
    }                                                                                         \
  }
MS_PG_WTILE(avx512, MS_PG_T512, float, f32, __m512, MS_PG_WMR_AVX512, MS_PG_WNV_AVX512, 16,
            MS_PG_LD512S, MS_PG_ST512S, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps)
MS_PG_WTILE(avx512, MS_PG_T512, double, f64, __m512d, MS_PG_WMR_AVX512, MS_PG_WNV_AVX512, 8,
            MS_PG_LD512D, MS_PG_ST512D, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_setzero_pd)
MS_PG_WTILE(avx2, MS_PG_T256, float, f32, __m256, MS_PG_WMR_AVX2, MS_PG_WNV_AVX2, 8,
            MS_PG_LD256S, MS_PG_ST256S, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps)
MS_PG_WTILE(avx2, MS_PG_T256, double, f64, __m256d, MS_PG_WMR_AVX2, MS_PG_WNV_AVX2, 4,
            MS_PG_LD256D, MS_PG_ST256D, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_setzero_pd)

#define MS_PG_WQC 128   /* output columns a chunk: gt's (128 x 64 floats) 32 KiB stay in L1 */

/* K rounded up to whole tiles of vectors: S's and gt's row length */
static inline ptrdiff_t ms_pg_kpad(int level, size_t item, ptrdiff_t K) {
  const ptrdiff_t nr = ms_pg_wnr(level, item);
  return (K + nr - 1) / nr * nr;
}

/* Images ms_pg_convw stacks in one buffer (of Hp padded rows of wrow each): a chunk holds
 * more than one small image's columns, and a pass (a parallel region, a fill and a
 * transpose) takes several (64 x 512 x 7 x 7, K = 512, one thread: 145-152 -> 128-135 ms). */
#define MS_PG_WCOLS 512
static inline ptrdiff_t ms_pg_wgroup(ptrdiff_t N, ptrdiff_t Hp, ptrdiff_t wrow) {
  const ptrdiff_t g = Hp * wrow > 0 ? MS_PG_WCOLS / (Hp * wrow) : 1;
  return g < 1 ? 1 : g > N ? (N > 0 ? N : 1) : g;
}

/* x (N, C, H, W) rows ldx apart, g (N, K, oh, ow) dense; s: C*kh*kw x KP zeroed (the sums),
 * xpad: G * C * Hp * wrow zeroed, gt: G * Hp * wrow x KP zeroed, off: C*kh*kw, qs: G * oh
 * * ow, with G = ms_pg_wgroup's images a pass. A pass stacks its images in each channel of
 * xpad (image i's rows from i * Hp) and their gradients in gt's rows alike; qs lists the
 * pass's output columns image by image, so each sum still adds its products in (n, oy, ox)
 * order. */
#define MS_PG_CONVW(T, t)                                                                     \
  static void MS_PG_CONVW_SIG(T, t) {                                                         \
    const ptrdiff_t Hp = H + 2 * py, wrow = Wd + 2 * px, oh = Hp - kh + 1, ow = wrow - kw + 1;\
    const ptrdiff_t CK = C * kh * kw, KP = ms_pg_kpad(level, sizeof(T), K);                   \
    const ptrdiff_t G = ms_pg_wgroup(N, Hp, wrow), Hs = G * Hp, nr = ms_pg_wnr(level, sizeof(T));\
    const int mr = ms_pg_wmr(level);                                                          \
    const ptrdiff_t ntap = (CK + mr - 1) / mr;                                                \
    ptrdiff_t n0;                                                                             \
    if (N <= 0 || K <= 0 || CK <= 0 || oh <= 0 || ow <= 0) return;                            \
    ms_pg_taps_##t(off, C, kh, kw, Hs, wrow);                                                 \
    for (n0 = 0; n0 < G * oh * ow; ++n0)   /* the output columns: image, row, column */    \
      qs[n0] = (n0 / (oh * ow) * Hp + n0 % (oh * ow) / ow) * wrow + n0 % ow;                  \
    for (n0 = 0; n0 < N; n0 += G) {                                                           \
      const ptrdiff_t ng = N - n0 < G ? N - n0 : G, ncol = ng * oh * ow;                      \
      const T *xn = x + n0 * C * H * ldx, *gn = g + n0 * K * oh * ow;                         \
      ptrdiff_t i;                                                                            \
      (void)xn; (void)gn;                                                                     \
      _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                     \
      {                                                                                       \
        const int tid = ms_pg_thread(), nth = ms_pg_team();                                   \
        /* this thread's taps: the same for every image, so each sum has one owner */      \
        const ptrdiff_t j0 = ntap * tid / nth, j1 = ntap * (tid + 1) / nth;                   \
        ptrdiff_t q0, jt, kt;                                                                 \
        /* (nowait: the transpose's barrier covers the fill; a barrier sleeps, PASSIVE) */     \
        _Pragma("omp for schedule(static) nowait")                                            \
        for (i = 0; i < ng * C; ++i)   /* image i / C's channel i % C, from row (i / C) Hp */ \
          ms_pg_fill_##t(xpad + (i / C) * Hp * wrow, xn + (i / C) * C * H * ldx, i % C,       \
                         i % C + 1, H, Wd, ldx, py, px, Hs, wrow);                            \
        _Pragma("omp for schedule(static)")                                                   \
        for (i = 0; i < ng * oh; ++i)   /* gt's rows of output row i % oh of image i / oh */ \
          ms_transpose_avx2_##t(gn + (i / oh) * K * oh * ow + (i % oh) * ow, oh * ow,         \
                                gt + ((i / oh) * Hp + i % oh) * wrow * KP, KP, K, ow);        \
        for (q0 = 0; q0 < ncol; q0 += MS_PG_WQC) {                                            \
          const ptrdiff_t q1 = ncol - q0 < MS_PG_WQC ? ncol : q0 + MS_PG_WQC;                 \
          for (jt = j0; jt < j1; ++jt) {                                                      \
            const int rows = (int)(CK - jt * mr < mr ? CK - jt * mr : mr);                    \
            for (kt = 0; kt < KP; kt += nr) {                                                 \
              if (level >= 3)                                                                 \
                ms_pg_wtile_##t##_avx512(xpad, off + jt * mr, rows, gt + kt, KP, qs + q0,    \
                                         q1 - q0, s + jt * mr * KP + kt, KP);                 \
              else                                                                            \
                ms_pg_wtile_##t##_avx2(xpad, off + jt * mr, rows, gt + kt, KP, qs + q0,      \
                                       q1 - q0, s + jt * mr * KP + kt, KP);                   \
            }                                                                                 \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }
MS_PG_CONVW(float, f32)
MS_PG_CONVW(double, f64)


#else
#define MS_PG_LEVELS 0
static inline int ms_pg_mr(int level) { (void)level; return 1; }
static inline ptrdiff_t ms_pg_kpad(int level, size_t item, ptrdiff_t K) {
  (void)level; (void)item; return K; }
static inline ptrdiff_t ms_pg_wgroup(ptrdiff_t N, ptrdiff_t Hp, ptrdiff_t wrow) {
  (void)N; (void)Hp; (void)wrow; return 1; }
static inline void ms_pg_conv_plan_for(int level, size_t item, ptrdiff_t K, ptrdiff_t CK,
                                       ptrdiff_t N, ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t wrow,
                                       ptrdiff_t stride, ptrdiff_t plane, int nt,
                                       ms_pg_conv_plan *pl) {
  (void)level; (void)item; (void)K; (void)CK; (void)N; (void)stride; (void)plane; (void)oh; (void)ow; (void)wrow; (void)nt;
  memset(pl, 0, sizeof *pl);
  pl->pack_rows = 1;
  pl->group = pl->nbuf = 1;
}
/* No kernels on this target (level 0 never calls them); the stubs keep the callers' symbols,
 * with the kernels' own signatures. */
#define MS_PG_STUBS(T, t)                                                                     \
  static void MS_PG_GEMM_SIG(T, t) {}                                                         \
  static void MS_PG_CONV_SIG(T, t) {}                                                         \
  static void MS_PG_CONVW_SIG(T, t) {}
MS_PG_STUBS(float, f32)
MS_PG_STUBS(double, f64)
#endif

#endif  /* MSHADOW_PANEL_GEMM_H_ */
