/* The scalar member of the packet family: the same functions as packet/sse2.h etc. on one
 * value (ISA "s"). The vectorised transcendentals (vmath_gen.h) are generated once for
 * every ISA including this one, so the plain path, the tails of the SIMD loops and every
 * SIMD level compute the same bits. Built on every platform. */
#ifndef MS_PACKET_INSIDE
#error "include mshadow/packet.h, not packet/scalar.h"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float ms_s_v_f32;
typedef double ms_s_v_f64;
typedef int ms_s_m_f32;
typedef int ms_s_m_f64;

/* a * b + c rounded once, for float, without an FMA instruction: in double, a * b is exact
 * and the sum s rounds once; rounding s to float then rounds correctly unless s landed exactly
 * on a midpoint between two floats (the 29 bits below float's precision 1000...0) or in
 * float's subnormal range, where the midpoints sit lower. Those rare sums are rounded to odd
 * instead (TwoSum's error: the rounding undone towards zero, the last bit set where inexact),
 * which keeps a sticky bit, so the float rounding is right (53 >= 2 * 24 + 2 bits). The
 * check is off the common path's latency: a Horner step costs a multiply, an add and two
 * conversions. */
static inline float ms_fmaf_exact(float a, float b, float c) {
#ifdef FP_FAST_FMAF
  return fmaf(a, b, c);
#else
  const double p = (double)a * (double)b, q = (double)c, s = p + q;
  uint64_t u;
  memcpy(&u, &s, sizeof u);
  if ((u & 0x1FFFFFFFu) == 0x10000000u || (u & 0x7FF0000000000000ull) < 0x3810000000000000ull) {
    const double v = s - p, e = (p - (s - v)) + (q - v);   /* s + e = p + q exactly */
    uint64_t w;
    double r;
    memcpy(&w, &e, sizeof w);
    if (e != 0 && e == e) {   /* inexact; a NaN or inf sum is already the answer */
      u -= (u ^ w) >> 63;     /* e against s's sign: |p + q| < |s|, truncate */
      u |= 1;
    }
    memcpy(&r, &u, sizeof r);
    return (float)r;
  }
  return (float)s;
#endif
}

/* fma_fn: a * b + c rounded once, so a scalar fma is the SIMD levels' one: for float
 * ms_fmaf_exact, for double C99's fma (an instruction where the compiler targets one, else
 * the C library's exact emulation) */
#define MS_SCALAR_DEF(T, t, U, ibits, ebias, magic_bits, fma_fn)                                       \
  static inline T ms_s_set1_##t(T x) { return x; }                                             \
  static inline T ms_s_add_##t(T a, T b) { return a + b; }                                     \
  static inline T ms_s_sub_##t(T a, T b) { return a - b; }                                     \
  static inline T ms_s_mul_##t(T a, T b) { return a * b; }                                     \
  static inline T ms_s_div_##t(T a, T b) { return a / b; }                                     \
  static inline T ms_s_fma_##t(T a, T b, T c) { return fma_fn(a, b, c); }                      \
  static inline T ms_s_max_##t(T a, T b) { return a > b ? a : b; }                             \
  static inline T ms_s_min_##t(T a, T b) { return a < b ? a : b; }                             \
  static inline T ms_s_neg_##t(T a) { return -a; }                                             \
  static inline T ms_s_abs_##t(T a) { U u; memcpy(&u, &a, sizeof u);                           \
    u &= ~((U)1 << (sizeof(U) * 8 - 1)); memcpy(&a, &u, sizeof a); return a; }                 \
  static inline int ms_s_lt_##t(T a, T b) { return a < b; }                                    \
  static inline int ms_s_gt_##t(T a, T b) { return a > b; }                                    \
  static inline int ms_s_eq_##t(T a, T b) { return a == b; }                                   \
  static inline int ms_s_isnan_##t(T a) { return a != a; }                                     \
  static inline int ms_s_mor_##t(int a, int b) { return a | b; }                               \
  static inline T ms_s_sel_##t(int m, T a, T b) { return m ? a : b; }                          \
  static inline T ms_s_pow2i_##t(T n) {                                                        \
    U k, mb = (U)(magic_bits); T magic, r; memcpy(&magic, &mb, sizeof magic);                  \
    n = n + magic; memcpy(&k, &n, sizeof k);                                                   \
    k = (k + (U)(ebias) - mb) << ibits; memcpy(&r, &k, sizeof r); return r; }                 \
  static inline T ms_s_frexpe_##t(T x) {                                                       \
    U k, mb = (U)(magic_bits); T magic, r; memcpy(&magic, &mb, sizeof magic);                  \
    memcpy(&k, &x, sizeof k); k = (k >> ibits) + mb - (U)(ebias) + 1;                          \
    memcpy(&r, &k, sizeof r); return r - magic; }                                              \
  static inline T ms_s_frexpm_##t(T x) {                                                       \
    U k; T half = (T)0.5, r; U h; memcpy(&k, &x, sizeof k); memcpy(&h, &half, sizeof h);      \
    k = (k & (((U)1 << ibits) - 1)) | h; memcpy(&r, &k, sizeof r); return r; }               \
  /* p * 2**n rounded once (p normal, n integral, |n| <= 2 * ebias - 2): with n1 = n / 2     \
   * rounded both 2**n1 and 2**(n - n1) are normal, so only the second product rounds */   \
  static inline T ms_s_ldexp_##t(T p, T n) {                                                   \
    U mb = (U)(magic_bits); T magic; memcpy(&magic, &mb, sizeof magic);                        \
    T n1 = (n * (T)0.5 + magic) - magic;                                                       \
    return (p * ms_s_pow2i_##t(n1)) * ms_s_pow2i_##t(n - n1); }                                \
  static inline T ms_s_copysign_##t(T a, T b) { U u, v, s = (U)1 << (sizeof(U) * 8 - 1);     \
    memcpy(&u, &a, sizeof u); memcpy(&v, &b, sizeof v); u = (u & ~s) | (v & s);             \
    memcpy(&a, &u, sizeof a); return a; }

MS_SCALAR_DEF(float, f32, uint32_t, 23, 127, 0x4B400000u, ms_fmaf_exact)
MS_SCALAR_DEF(double, f64, uint64_t, 52, 1023, 0x4338000000000000ull, fma)

/* Table lookups (float only): bucket(v, base) = (bits(v) - base) >> 22 counts runs of 2**22
 * consecutive floats (half a binade) from the float whose bits are base; the caller clamps v
 * so it is 0..15. tab(t, i) = t[i] of a 16-entry table. Both are exact, so every
 * ISA gives the same bits. */
typedef int32_t ms_s_i_f32;
static inline int32_t ms_s_bucket_f32(float v, uint32_t base) {
  uint32_t u; memcpy(&u, &v, sizeof u); return (int32_t)((u - base) >> 22); }
static inline float ms_s_tab_f32(const float *t, int32_t i) { return t[i]; }
