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
