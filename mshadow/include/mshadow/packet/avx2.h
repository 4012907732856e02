/* AVX2 packets: 8 floats / 4 doubles; compiled under a target attribute, used only when
 * the CPU reports avx2 and fma (ms_detect_isa: the level is x86-64-v3's AVX2 + FMA). */
#ifndef MS_PACKET_INSIDE
#error "include mshadow/packet.h, not packet/avx2.h"
#endif
#include <immintrin.h>

#define MS_AVX2_FN static inline __attribute__((target("avx2,fma")))
typedef __m256 ms_avx2_v_f32;
typedef __m256d ms_avx2_v_f64;
#define ms_avx2_W_f32 8
#define ms_avx2_W_f64 4

#define MS_AVX2_DEF(T, t, V, s)                                                                \
  MS_AVX2_FN V ms_avx2_load_##t(const T *p) { return _mm256_load_##s(p); }                     \
  MS_AVX2_FN V ms_avx2_loadu_##t(const T *p) { return _mm256_loadu_##s(p); }                   \
  MS_AVX2_FN void ms_avx2_store_##t(T *p, V v) { _mm256_store_##s(p, v); }                     \
  MS_AVX2_FN void ms_avx2_storeu_##t(T *p, V v) { _mm256_storeu_##s(p, v); }                   \
  MS_AVX2_FN V ms_avx2_set1_##t(T x) { return _mm256_set1_##s(x); }                            \
  MS_AVX2_FN V ms_avx2_zero_##t(void) { return _mm256_setzero_##s(); }                         \
  MS_AVX2_FN V ms_avx2_add_##t(V a, V b) { return _mm256_add_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_sub_##t(V a, V b) { return _mm256_sub_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_mul_##t(V a, V b) { return _mm256_mul_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_div_##t(V a, V b) { return _mm256_div_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_fma_##t(V a, V b, V c) { return _mm256_fmadd_##s(a, b, c); }             \
  MS_AVX2_FN V ms_avx2_max_##t(V a, V b) { return _mm256_max_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_min_##t(V a, V b) { return _mm256_min_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_sqrt_##t(V a) { return _mm256_sqrt_##s(a); }                            \
  MS_AVX2_FN V ms_avx2_neg_##t(V a) { return _mm256_xor_##s(a, _mm256_set1_##s((T)-0.0)); }    \
  MS_AVX2_FN V ms_avx2_abs_##t(V a) { return _mm256_andnot_##s(_mm256_set1_##s((T)-0.0), a); }

MS_AVX2_DEF(float, f32, __m256, ps)
MS_AVX2_DEF(double, f64, __m256d, pd)

/* The transcendentals' vocabulary (see sse2.h): masks are vectors, sel is a blend. */
typedef __m256 ms_avx2_m_f32;
typedef __m256d ms_avx2_m_f64;
#define MS_AVX2_MATH(T, t, V, s, I, ibits, ebias, magic_bits, iw, sw)                         \
  MS_AVX2_FN V ms_avx2_lt_##t(V a, V b) { return _mm256_cmp_##s(a, b, _CMP_LT_OQ); }          \
  MS_AVX2_FN V ms_avx2_gt_##t(V a, V b) { return _mm256_cmp_##s(a, b, _CMP_GT_OQ); }          \
  MS_AVX2_FN V ms_avx2_eq_##t(V a, V b) { return _mm256_cmp_##s(a, b, _CMP_EQ_OQ); }          \
  MS_AVX2_FN V ms_avx2_isnan_##t(V a) { return _mm256_cmp_##s(a, a, _CMP_UNORD_Q); }          \
  MS_AVX2_FN V ms_avx2_mor_##t(V a, V b) { return _mm256_or_##s(a, b); }                      \
  MS_AVX2_FN V ms_avx2_sel_##t(V m, V a, V b) { return _mm256_blendv_##s(b, a, m); }           \
  MS_AVX2_FN V ms_avx2_pow2i_##t(V n) {                                                       \
    const V magic = _mm256_castsi256_##s(_mm256_set1_epi##sw(magic_bits));                    \
    __m256i k = _mm256_cast##s##_si256(_mm256_add_##s(n, magic));                            \
    k = _mm256_add_epi##iw(k, _mm256_set1_epi##sw((I)(ebias) - (I)(magic_bits)));             \
    return _mm256_castsi256_##s(_mm256_slli_epi##iw(k, ibits)); }                             \
  MS_AVX2_FN V ms_avx2_frexpe_##t(V x) {                                                      \
    const V magic = _mm256_castsi256_##s(_mm256_set1_epi##sw(magic_bits));                    \
    __m256i k = _mm256_srli_epi##iw(_mm256_cast##s##_si256(x), ibits);                        \
    k = _mm256_add_epi##iw(k, _mm256_set1_epi##sw((I)(magic_bits) - (I)(ebias) + 1));         \
    return _mm256_sub_##s(_mm256_castsi256_##s(k), magic); }                                  \
  MS_AVX2_FN V ms_avx2_frexpm_##t(V x) {                                                      \
    const __m256i mant = _mm256_set1_epi##sw((I)(((I)1 << ibits) - 1));                       \
    return _mm256_or_##s(_mm256_castsi256_##s(_mm256_and_si256(_mm256_cast##s##_si256(x), mant)), \
                         _mm256_set1_##s((T)0.5)); }                                           \
  MS_AVX2_FN V ms_avx2_ldexp_##t(V p, V n) {   /* see scalar.h */                            \
    const V magic = _mm256_castsi256_##s(_mm256_set1_epi##sw(magic_bits));                   \
    const V n1 = _mm256_sub_##s(_mm256_add_##s(_mm256_mul_##s(n, _mm256_set1_##s((T)0.5)), magic), \
                                magic);                                                       \
    return _mm256_mul_##s(_mm256_mul_##s(p, ms_avx2_pow2i_##t(n1)),                           \
                          ms_avx2_pow2i_##t(_mm256_sub_##s(n, n1))); }                        \
  MS_AVX2_FN V ms_avx2_copysign_##t(V a, V b) {                                               \
    const V sm = _mm256_set1_##s((T)-0.0);                                                    \
    return _mm256_or_##s(_mm256_andnot_##s(sm, a), _mm256_and_##s(sm, b)); }

MS_AVX2_MATH(float, f32, __m256, ps, int32_t, 23, 127, 0x4B400000, 32, 32)
MS_AVX2_MATH(double, f64, __m256d, pd, int64_t, 52, 1023, 0x4338000000000000LL, 64, 64x)

/* Table lookups (see scalar.h): two 8-entry permutes, blended by index bit 3. */
typedef __m256i ms_avx2_i_f32;
MS_AVX2_FN __m256i ms_avx2_bucket_f32(__m256 v, uint32_t base) {
  const __m256i k = _mm256_sub_epi32(_mm256_castps_si256(v), _mm256_set1_epi32((int)base));
  return _mm256_srli_epi32(k, 22); }
MS_AVX2_FN __m256 ms_avx2_tab_f32(const float *t, __m256i i) {
  const __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28));   /* bit 3 -> sign */
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i),
                          _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + 8), i), b3); }
