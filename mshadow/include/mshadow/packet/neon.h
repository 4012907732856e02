/* NEON packets (AArch64 Advanced SIMD): 4 floats / 2 doubles, the 128-bit level of arm64
 * (level 1, as SSE2 is on x86). Every AArch64 CPU has NEON, so no target attribute.
 *
 * Each function gives the bits of its scalar.h twin: max/min are compare-and-select, not
 * FMAX/FMIN (which return NaN for one NaN operand and order -0 below +0), so they keep
 * scalar.h's `a > b ? a : b`; neg and abs are sign-bit operations (NaN payloads kept). */
#ifndef MS_PACKET_INSIDE
#error "include mshadow/packet.h, not packet/neon.h"
#endif
#include <arm_neon.h>

typedef float32x4_t ms_neon_v_f32;
typedef float64x2_t ms_neon_v_f64;
#define ms_neon_W_f32 4
#define ms_neon_W_f64 2

/* T: element, t: code, V: vector, s: intrinsic suffix (f32 / f64); in MS_NEON_MATH U, u, B:
 * the unsigned vector, its suffix and its lane type */
#define MS_NEON_DEF(T, t, V, s)                                                              \
  static inline V ms_neon_load_##t(const T *p) { return vld1q_##s(p); }                      \
  static inline V ms_neon_loadu_##t(const T *p) { return vld1q_##s(p); }                     \
  static inline void ms_neon_store_##t(T *p, V v) { vst1q_##s(p, v); }                       \
  static inline void ms_neon_storeu_##t(T *p, V v) { vst1q_##s(p, v); }                      \
  static inline V ms_neon_set1_##t(T x) { return vdupq_n_##s(x); }                           \
  static inline V ms_neon_zero_##t(void) { return vdupq_n_##s((T)0); }                       \
  static inline V ms_neon_add_##t(V a, V b) { return vaddq_##s(a, b); }                      \
  static inline V ms_neon_sub_##t(V a, V b) { return vsubq_##s(a, b); }                      \
  static inline V ms_neon_mul_##t(V a, V b) { return vmulq_##s(a, b); }                      \
  static inline V ms_neon_div_##t(V a, V b) { return vdivq_##s(a, b); }                      \
  static inline V ms_neon_fma_##t(V a, V b, V c) { return vfmaq_##s(c, a, b); }              \
  static inline V ms_neon_max_##t(V a, V b) { return vbslq_##s(vcgtq_##s(a, b), a, b); }     \
  static inline V ms_neon_min_##t(V a, V b) { return vbslq_##s(vcltq_##s(a, b), a, b); }     \
  static inline V ms_neon_sqrt_##t(V a) { return vsqrtq_##s(a); }                            \
  static inline V ms_neon_neg_##t(V a) { return vnegq_##s(a); }                              \
  static inline V ms_neon_abs_##t(V a) { return vabsq_##s(a); }

MS_NEON_DEF(float, f32, float32x4_t, f32)
MS_NEON_DEF(double, f64, float64x2_t, f64)

/* The lanes added as sse2.h adds them: (t0 + t1) + (t2 + t3). */
static inline float ms_neon_sum_f32(float32x4_t v) {
  return (vgetq_lane_f32(v, 0) + vgetq_lane_f32(v, 1)) +
         (vgetq_lane_f32(v, 2) + vgetq_lane_f32(v, 3));
}
static inline double ms_neon_sum_f64(float64x2_t v) {
  return vgetq_lane_f64(v, 0) + vgetq_lane_f64(v, 1);
}

/* The vocabulary of the vectorised transcendentals (see sse2.h and scalar.h): masks are
 * NEON's own all-ones lanes (uint32x4_t / uint64x2_t), the exponent-field helpers work on
 * the same bits with the same magic constant. */
typedef uint32x4_t ms_neon_m_f32;
typedef uint64x2_t ms_neon_m_f64;
#define MS_NEON_MATH(T, t, V, s, U, u, B, ibits, ebias, magic_bits)                          \
  static inline U ms_neon_lt_##t(V a, V b) { return vcltq_##s(a, b); }                       \
  static inline U ms_neon_gt_##t(V a, V b) { return vcgtq_##s(a, b); }                       \
  static inline U ms_neon_eq_##t(V a, V b) { return vceqq_##s(a, b); }                       \
  static inline U ms_neon_isnan_##t(V a) {                                                   \
    return veorq_##u(vceqq_##s(a, a), vdupq_n_##u(~(B)0)); }                                 \
  static inline U ms_neon_mor_##t(U a, U b) { return vorrq_##u(a, b); }                      \
  static inline V ms_neon_sel_##t(U m, V a, V b) { return vbslq_##s(m, a, b); }              \
  static inline V ms_neon_pow2i_##t(V n) {                                                   \
    const V magic = vreinterpretq_##s##_##u(vdupq_n_##u(magic_bits));                        \
    U k = vreinterpretq_##u##_##s(vaddq_##s(n, magic));                                      \
    k = vaddq_##u(k, vdupq_n_##u((B)(ebias) - (B)(magic_bits)));                             \
    return vreinterpretq_##s##_##u(vshlq_n_##u(k, ibits)); }                                 \
  static inline V ms_neon_frexpe_##t(V x) {                                                  \
    const V magic = vreinterpretq_##s##_##u(vdupq_n_##u(magic_bits));                        \
    U k = vshrq_n_##u(vreinterpretq_##u##_##s(x), ibits);                                    \
    k = vaddq_##u(k, vdupq_n_##u((B)(magic_bits) - (B)(ebias) + 1));                         \
    return vsubq_##s(vreinterpretq_##s##_##u(k), magic); }                                   \
  static inline V ms_neon_frexpm_##t(V x) {                                                  \
    const U mant = vdupq_n_##u((((B)1) << ibits) - 1);                                       \
    return vreinterpretq_##s##_##u(vorrq_##u(vandq_##u(vreinterpretq_##u##_##s(x), mant),    \
                                             vreinterpretq_##u##_##s(vdupq_n_##s((T)0.5)))); } \
  static inline V ms_neon_ldexp_##t(V p, V n) {   /* see scalar.h */                         \
    const V magic = vreinterpretq_##s##_##u(vdupq_n_##u(magic_bits));                        \
    const V n1 = vsubq_##s(vaddq_##s(vmulq_##s(n, vdupq_n_##s((T)0.5)), magic), magic);      \
    return vmulq_##s(vmulq_##s(p, ms_neon_pow2i_##t(n1)),                                     \
                     ms_neon_pow2i_##t(vsubq_##s(n, n1))); }                                 \
  static inline V ms_neon_copysign_##t(V a, V b) {                                           \
    return vbslq_##s(vdupq_n_##u(((B)1) << (sizeof(T) * 8 - 1)), b, a); }

MS_NEON_MATH(float, f32, float32x4_t, f32, uint32x4_t, u32, uint32_t, 23, 127, 0x4B400000u)
MS_NEON_MATH(double, f64, float64x2_t, f64, uint64x2_t, u64, uint64_t, 52, 1023,
             0x4338000000000000ull)

/* Whether any lane of a mask is set (codegen_cpu._any_lane). */
static inline int ms_neon_any_f32(uint32x4_t m) { return vmaxvq_u32(m) != 0; }
static inline int ms_neon_any_f64(uint64x2_t m) {
  return (vgetq_lane_u64(m, 0) | vgetq_lane_u64(m, 1)) != 0; }

/* Table lookups (see scalar.h): the 16-entry table as 64 bytes, each lane's 4 bytes picked
 * by one TBL of four registers. */
typedef uint32x4_t ms_neon_i_f32;
static inline uint32x4_t ms_neon_bucket_f32(float32x4_t v, uint32_t base) {
  return vshrq_n_u32(vsubq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(base)), 22); }
static inline float32x4_t ms_neon_tab_f32(const float *t, uint32x4_t i) {
  /* lane byte b of entry k is table byte 4k + b: (4k) * 0x01010101 + 0x03020100 */
  const uint32x4_t bytes = vaddq_u32(vmulq_n_u32(vshlq_n_u32(i, 2), 0x01010101u),
                                     vdupq_n_u32(0x03020100u));
  const uint8x16x4_t tab = vld1q_u8_x4((const uint8_t *)t);
  return vreinterpretq_f32_u8(vqtbl4q_u8(tab, vreinterpretq_u8_u32(bytes))); }
