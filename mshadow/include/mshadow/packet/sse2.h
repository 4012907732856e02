/* SSE2 packets: 4 floats / 2 doubles (mshadow's Packet<DType, kSSE2>). */
#ifndef MS_PACKET_INSIDE
#error "include mshadow/packet.h, not packet/sse2.h"
#endif
#include <emmintrin.h>
#include <math.h>

typedef __m128 ms_sse2_v_f32;
typedef __m128d ms_sse2_v_f64;
#define ms_sse2_W_f32 4
#define ms_sse2_W_f64 2

#define MS_SSE2_DEF(T, t, V, s)                                                              \
  static inline V ms_sse2_load_##t(const T *p) { return _mm_load_##s(p); }                   \
  static inline V ms_sse2_loadu_##t(const T *p) { return _mm_loadu_##s(p); }                 \
  static inline void ms_sse2_store_##t(T *p, V v) { _mm_store_##s(p, v); }                   \
  static inline void ms_sse2_storeu_##t(T *p, V v) { _mm_storeu_##s(p, v); }                 \
  static inline V ms_sse2_set1_##t(T x) { return _mm_set1_##s(x); }                          \
  static inline V ms_sse2_zero_##t(void) { return _mm_setzero_##s(); }                      \
  static inline V ms_sse2_add_##t(V a, V b) { return _mm_add_##s(a, b); }                    \
  static inline V ms_sse2_sub_##t(V a, V b) { return _mm_sub_##s(a, b); }                    \
  static inline V ms_sse2_mul_##t(V a, V b) { return _mm_mul_##s(a, b); }                    \
  static inline V ms_sse2_div_##t(V a, V b) { return _mm_div_##s(a, b); }                    \
  static inline V ms_sse2_max_##t(V a, V b) { return _mm_max_##s(a, b); }                    \
  static inline V ms_sse2_min_##t(V a, V b) { return _mm_min_##s(a, b); }                    \
  static inline V ms_sse2_sqrt_##t(V a) { return _mm_sqrt_##s(a); }                          \
  static inline V ms_sse2_neg_##t(V a) { return _mm_xor_##s(a, _mm_set1_##s((T)-0.0)); }     \
  static inline V ms_sse2_abs_##t(V a) { return _mm_andnot_##s(_mm_set1_##s((T)-0.0), a); }

MS_SSE2_DEF(float, f32, __m128, ps)
MS_SSE2_DEF(double, f64, __m128d, pd)

/* a * b + c rounded once. SSE2 has no fused multiply-add, and a multiply then an add would
 * round twice (other bits than the other levels). float: scalar.h's ms_fmaf_exact two lanes
 * at a time in double (the rare midpoint or subnormal sums rounded to odd); double: C99's
 * fma lane by lane. The level is for CPUs without AVX2 + FMA, and this is its price. */
static inline __m128d ms_sse2_fma_half_pd(__m128d a, __m128d b, __m128d c, int *rare) {
  const __m128d s = _mm_add_pd(_mm_mul_pd(a, b), c);
  const __m128i u = _mm_castpd_si128(s);
  /* 64-bit compares from 32-bit ones: the low word's 29 bits, the high word's exponent */
  const __m128i mid = _mm_cmpeq_epi32(_mm_and_si128(u, _mm_set_epi32(0, 0x1FFFFFFF, 0, 0x1FFFFFFF)),
                                      _mm_set_epi32(0, 0x10000000, 0, 0x10000000));
  const __m128i low = _mm_cmplt_epi32(_mm_and_si128(u, _mm_set_epi32(0x7FF00000, 0, 0x7FF00000, 0)),
                                      _mm_set_epi32(0x38100000, 0, 0x38100000, 0));
  *rare |= (_mm_movemask_epi8(mid) & 0x0F0F) | (_mm_movemask_epi8(low) & 0xF0F0);
  return s;
}
static inline __m128d ms_sse2_fma_odd_pd(__m128d a, __m128d b, __m128d c) {
  const __m128d p = _mm_mul_pd(a, b), s = _mm_add_pd(p, c), v = _mm_sub_pd(s, p);
  const __m128d e = _mm_add_pd(_mm_sub_pd(p, _mm_sub_pd(s, v)), _mm_sub_pd(c, v));
  const __m128i u = _mm_castpd_si128(s);
  const __m128i odd = _mm_or_si128(
      _mm_sub_epi64(u, _mm_srli_epi64(_mm_castpd_si128(_mm_xor_pd(s, e)), 63)),
      _mm_set_epi32(0, 1, 0, 1));
  const __m128d inexact = _mm_and_pd(_mm_cmpneq_pd(e, _mm_setzero_pd()), _mm_cmpord_pd(e, e));
  return _mm_or_pd(_mm_and_pd(inexact, _mm_castsi128_pd(odd)), _mm_andnot_pd(inexact, s));
}
static inline __m128 ms_sse2_fma_f32(__m128 a, __m128 b, __m128 c) {
  const __m128d al = _mm_cvtps_pd(a), bl = _mm_cvtps_pd(b), cl = _mm_cvtps_pd(c);
  const __m128d ah = _mm_cvtps_pd(_mm_movehl_ps(a, a)), bh = _mm_cvtps_pd(_mm_movehl_ps(b, b)),
                ch = _mm_cvtps_pd(_mm_movehl_ps(c, c));
  int rare = 0;
  __m128d lo = ms_sse2_fma_half_pd(al, bl, cl, &rare), hi = ms_sse2_fma_half_pd(ah, bh, ch, &rare);
  if (rare) {
    lo = ms_sse2_fma_odd_pd(al, bl, cl);
    hi = ms_sse2_fma_odd_pd(ah, bh, ch);
  }
  return _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
}
static inline __m128d ms_sse2_fma_f64(__m128d a, __m128d b, __m128d c) {
  double x[2], y[2], z[2];
  _mm_storeu_pd(x, a); _mm_storeu_pd(y, b); _mm_storeu_pd(z, c);
  return _mm_set_pd(fma(x[1], y[1], z[1]), fma(x[0], y[0], z[0]));
}

/* max(a, b) of SSE returns b when either is NaN: the same as the plain a > b ? a : b. */
static inline float ms_sse2_sum_f32(__m128 v) {
  float t[4];
  _mm_storeu_ps(t, v);
  return (t[0] + t[1]) + (t[2] + t[3]);
}
static inline double ms_sse2_sum_f64(__m128d v) {
  double t[2];
  _mm_storeu_pd(t, v);
  return t[0] + t[1];
}

/* The vocabulary of the vectorised transcendentals (vmath_gen.h): comparisons give a mask,
 * sel(m, a, b) picks a where m is set, exponent-field helpers for IEEE values (pow2i, ldexp,
 * frexpe, frexpm), copysign, and float table lookups (bucket, tab; see scalar.h).
 * The integer tricks use the magic constant M = 1.5 * 2^(mantissa bits): for an integral
 * value n with |n| < 2^(mantissa bits - 1), bits(n + M) - bits(M) == n. */
typedef __m128 ms_sse2_m_f32;
typedef __m128d ms_sse2_m_f64;
#define MS_SSE2_MATH(T, t, V, s, I, ibits, ebias, magic_bits, iw, sw)                           \
  static inline V ms_sse2_lt_##t(V a, V b) { return _mm_cmplt_##s(a, b); }                   \
  static inline V ms_sse2_gt_##t(V a, V b) { return _mm_cmpgt_##s(a, b); }                   \
  static inline V ms_sse2_eq_##t(V a, V b) { return _mm_cmpeq_##s(a, b); }                   \
  static inline V ms_sse2_isnan_##t(V a) { return _mm_cmpunord_##s(a, a); }                  \
  static inline V ms_sse2_mor_##t(V a, V b) { return _mm_or_##s(a, b); }                     \
  static inline V ms_sse2_sel_##t(V m, V a, V b) {                                           \
    return _mm_or_##s(_mm_and_##s(m, a), _mm_andnot_##s(m, b)); }                            \
  static inline V ms_sse2_pow2i_##t(V n) {                                                   \
    const V magic = _mm_castsi128_##s(_mm_set1_epi##sw(magic_bits));                         \
    __m128i k = _mm_cast##s##_si128(_mm_add_##s(n, magic));                                  \
    k = _mm_add_epi##iw(k, _mm_set1_epi##sw((I)(ebias) - (I)(magic_bits)));                  \
    return _mm_castsi128_##s(_mm_slli_epi##iw(k, ibits)); }                                  \
  static inline V ms_sse2_frexpe_##t(V x) {                                                  \
    const V magic = _mm_castsi128_##s(_mm_set1_epi##sw(magic_bits));                         \
    __m128i k = _mm_srli_epi##iw(_mm_cast##s##_si128(x), ibits);                             \
    k = _mm_add_epi##iw(k, _mm_set1_epi##sw((I)(magic_bits) - (I)(ebias) + 1));              \
    return _mm_sub_##s(_mm_castsi128_##s(k), magic); }                                       \
  static inline V ms_sse2_frexpm_##t(V x) {                                                  \
    const __m128i mant = _mm_set1_epi##sw((I)(((I)1 << ibits) - 1));                         \
    return _mm_or_##s(_mm_castsi128_##s(_mm_and_si128(_mm_cast##s##_si128(x), mant)),         \
                      _mm_set1_##s((T)0.5)); }                                                     \
  static inline V ms_sse2_ldexp_##t(V p, V n) {   /* see scalar.h */                       \
    const V magic = _mm_castsi128_##s(_mm_set1_epi##sw(magic_bits));                         \
    const V n1 = _mm_sub_##s(_mm_add_##s(_mm_mul_##s(n, _mm_set1_##s((T)0.5)), magic), magic); \
    return _mm_mul_##s(_mm_mul_##s(p, ms_sse2_pow2i_##t(n1)),                                \
                       ms_sse2_pow2i_##t(_mm_sub_##s(n, n1))); }                             \
  static inline V ms_sse2_copysign_##t(V a, V b) {                                           \
    const V sm = _mm_set1_##s((T)-0.0);                                                      \
    return _mm_or_##s(_mm_andnot_##s(sm, a), _mm_and_##s(sm, b)); }

MS_SSE2_MATH(float, f32, __m128, ps, int32_t, 23, 127, 0x4B400000, 32, 32)
MS_SSE2_MATH(double, f64, __m128d, pd, int64_t, 52, 1023, 0x4338000000000000LL, 64, 64x)

/* Table lookups (see scalar.h): SSE2 has no variable shuffle, so the lanes are read one by one. */
typedef __m128i ms_sse2_i_f32;
static inline __m128i ms_sse2_bucket_f32(__m128 v, uint32_t base) {
  return _mm_srli_epi32(_mm_sub_epi32(_mm_castps_si128(v), _mm_set1_epi32((int)base)), 22); }
static inline __m128 ms_sse2_tab_f32(const float *t, __m128i i) {
  int32_t k[4];
  _mm_storeu_si128((__m128i *)k, i);
  return _mm_setr_ps(t[k[0]], t[k[1]], t[k[2]], t[k[3]]); }
