/* AVX-512F packets: 16 floats / 8 doubles; used only when the CPU reports avx512f. */
#ifndef MS_PACKET_INSIDE
#error "include mshadow/packet.h, not packet/avx512.h"
#endif
#include <immintrin.h>

#define MS_AVX512_FN static inline __attribute__((target("avx512f")))
typedef __m512 ms_avx512_v_f32;
typedef __m512d ms_avx512_v_f64;
#define ms_avx512_W_f32 16
#define ms_avx512_W_f64 8

/* AVX-512F has no float xor/andnot (that is AVX-512DQ): flip and clear the sign bit
 * through the integer domain. */
#define MS_AVX512_DEF(T, t, V, s, I, si)                                                       \
  MS_AVX512_FN V ms_avx512_load_##t(const T *p) { return _mm512_load_##s(p); }                 \
  MS_AVX512_FN V ms_avx512_loadu_##t(const T *p) { return _mm512_loadu_##s(p); }               \
  MS_AVX512_FN void ms_avx512_store_##t(T *p, V v) { _mm512_store_##s(p, v); }                 \
  MS_AVX512_FN void ms_avx512_storeu_##t(T *p, V v) { _mm512_storeu_##s(p, v); }               \
  MS_AVX512_FN V ms_avx512_set1_##t(T x) { return _mm512_set1_##s(x); }                        \
  MS_AVX512_FN V ms_avx512_zero_##t(void) { return _mm512_setzero_##s(); }                     \
  MS_AVX512_FN V ms_avx512_add_##t(V a, V b) { return _mm512_add_##s(a, b); }                  \
  MS_AVX512_FN V ms_avx512_sub_##t(V a, V b) { return _mm512_sub_##s(a, b); }                  \
  MS_AVX512_FN V ms_avx512_mul_##t(V a, V b) { return _mm512_mul_##s(a, b); }                  \
  MS_AVX512_FN V ms_avx512_div_##t(V a, V b) { return _mm512_div_##s(a, b); }                  \
  MS_AVX512_FN V ms_avx512_fma_##t(V a, V b, V c) { return _mm512_fmadd_##s(a, b, c); }         \
  MS_AVX512_FN V ms_avx512_max_##t(V a, V b) { return _mm512_max_##s(a, b); }                  \
  MS_AVX512_FN V ms_avx512_min_##t(V a, V b) { return _mm512_min_##s(a, b); }                  \
  MS_AVX512_FN V ms_avx512_sqrt_##t(V a) { return _mm512_sqrt_##s(a); }                        \
  MS_AVX512_FN V ms_avx512_neg_##t(V a) {                                                      \
    return _mm512_cast##si##_##s(_mm512_xor_si512(_mm512_cast##s##_##si(a),                    \
                                                  _mm512_cast##s##_##si(_mm512_set1_##s((T)-0.0)))); } \
  MS_AVX512_FN V ms_avx512_abs_##t(V a) {                                                      \
    return _mm512_cast##si##_##s(_mm512_andnot_si512(_mm512_cast##s##_##si(_mm512_set1_##s((T)-0.0)), \
                                                     _mm512_cast##s##_##si(a))); }

MS_AVX512_DEF(float, f32, __m512, ps, __m512i, si512)
MS_AVX512_DEF(double, f64, __m512d, pd, __m512i, si512)

/* The transcendentals' vocabulary (see sse2.h): masks are AVX-512 mask registers. */
typedef __mmask16 ms_avx512_m_f32;
typedef __mmask8 ms_avx512_m_f64;
#define MS_AVX512_MATH(T, t, V, M, s, I, ibits, ebias, magic_bits, iw, sw)                    \
  MS_AVX512_FN M ms_avx512_lt_##t(V a, V b) { return _mm512_cmp_##s##_mask(a, b, _CMP_LT_OQ); } \
  MS_AVX512_FN M ms_avx512_gt_##t(V a, V b) { return _mm512_cmp_##s##_mask(a, b, _CMP_GT_OQ); } \
  MS_AVX512_FN M ms_avx512_eq_##t(V a, V b) { return _mm512_cmp_##s##_mask(a, b, _CMP_EQ_OQ); } \
  MS_AVX512_FN M ms_avx512_isnan_##t(V a) { return _mm512_cmp_##s##_mask(a, a, _CMP_UNORD_Q); } \
  MS_AVX512_FN M ms_avx512_mor_##t(M a, M b) { return (M)(a | b); }                            \
  MS_AVX512_FN V ms_avx512_sel_##t(M m, V a, V b) { return _mm512_mask_blend_##s(m, b, a); }    \
  MS_AVX512_FN V ms_avx512_pow2i_##t(V n) {                                                    \
    const V magic = _mm512_castsi512_##s(_mm512_set1_epi##sw(magic_bits));                     \
    __m512i k = _mm512_cast##s##_si512(_mm512_add_##s(n, magic));                              \
    k = _mm512_add_epi##iw(k, _mm512_set1_epi##sw((I)(ebias) - (I)(magic_bits)));              \
    return _mm512_castsi512_##s(_mm512_slli_epi##iw(k, ibits)); }                              \
  MS_AVX512_FN V ms_avx512_frexpe_##t(V x) {                                                   \
    const V magic = _mm512_castsi512_##s(_mm512_set1_epi##sw(magic_bits));                     \
    __m512i k = _mm512_srli_epi##iw(_mm512_cast##s##_si512(x), ibits);                         \
    k = _mm512_add_epi##iw(k, _mm512_set1_epi##sw((I)(magic_bits) - (I)(ebias) + 1));          \
    return _mm512_sub_##s(_mm512_castsi512_##s(k), magic); }                                   \
  MS_AVX512_FN V ms_avx512_frexpm_##t(V x) {                                                   \
    const __m512i mant = _mm512_set1_epi##sw((I)(((I)1 << ibits) - 1));                        \
    return _mm512_castsi512_##s(_mm512_or_si512(                                              \
        _mm512_and_si512(_mm512_cast##s##_si512(x), mant),                                     \
        _mm512_cast##s##_si512(_mm512_set1_##s((T)0.5)))); }                                   \
  /* p * 2**n rounded once, as scalar.h's two-step product: one instruction */               \
  MS_AVX512_FN V ms_avx512_ldexp_##t(V p, V n) { return _mm512_scalef_##s(p, n); }            \
  MS_AVX512_FN V ms_avx512_copysign_##t(V a, V b) {   /* 0xCA: bitwise sign ? b : a */    \
    const __m512i sm = _mm512_cast##s##_si512(_mm512_set1_##s((T)-0.0));                      \
    return _mm512_castsi512_##s(_mm512_ternarylogic_epi32(                                    \
        sm, _mm512_cast##s##_si512(b), _mm512_cast##s##_si512(a), 0xCA)); }

MS_AVX512_MATH(float, f32, __m512, __mmask16, ps, int32_t, 23, 127, 0x4B400000, 32, 32)
MS_AVX512_MATH(double, f64, __m512d, __mmask8, pd, int64_t, 52, 1023, 0x4338000000000000LL, 64, 64)

/* Table lookups (see scalar.h): one permute. */
typedef __m512i ms_avx512_i_f32;
MS_AVX512_FN __m512i ms_avx512_bucket_f32(__m512 v, uint32_t base) {
  const __m512i k = _mm512_sub_epi32(_mm512_castps_si512(v), _mm512_set1_epi32((int)base));
  return _mm512_srli_epi32(k, 22); }
MS_AVX512_FN __m512 ms_avx512_tab_f32(const float *t, __m512i i) {
  return _mm512_permutexvar_ps(i, _mm512_loadu_ps(t)); }
