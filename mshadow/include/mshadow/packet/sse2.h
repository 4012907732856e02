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
