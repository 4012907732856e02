/* SSE2 packets: 4 floats / 2 doubles (mshadow's Packet<DType, kSSE2>). */
#ifndef MS_PACKET_INSIDE
#error "include mshadow/packet.h, not packet/sse2.h"
#endif
#include <emmintrin.h>

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
