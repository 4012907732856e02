/* scalar.h's ms_fmaf_exact and sse2.h's ms_sse2_fma_f32 / _f64 (the SSE2 level's fused
 * multiply-add, computed without an FMA instruction) against the CPU's FMA instruction, bit
 * for bit: every triple of special values, random triples, and triples whose exact result
 * lies a hair off half an ulp of float (where a double-rounded a * b + c goes wrong).
 * x86-64 only; run by tests/test_vmath.py (test_software_fma_rounds_once). Prints the
 * first mismatches and "mismatches: N".
 *
 * NaN results follow nan_rule.h's NANS_OK (vmath's bodies never meet the cases it lets
 * through: each NaN they pass on is the argument's). */
#define MS_PACKET_INSIDE
#include "mshadow/packet/scalar.h"
#include "mshadow/packet/sse2.h"
#include <immintrin.h>
#include <stdio.h>
#include "nan_rule.h"

static int bad = 0;
static float hw_f32(float a, float b, float c) __attribute__((target("fma")));
static float hw_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static double hw_f64(double a, double b, double c) __attribute__((target("fma")));
static double hw_f64(double a, double b, double c) { return __builtin_fma(a, b, c); }

static float fbits(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
static uint32_t bitsf(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static uint64_t bitsd(double f) { uint64_t u; memcpy(&u, &f, sizeof u); return u; }

/* whether the result's NaN may be any NaN (nan_rule.h) */
static int any_nan_ok(double a, double b, double c, double got, double want) {
  return got != got && want != want && NANS_OK(a, b, c);
}

static void check_f32(float a, float b, float c) {
  float got[4], sv;
  const float want = hw_f32(a, b, c);
  /* the lane under test in every position of the vector */
  const __m128 va = _mm_set_ps(a, 1.5f, a, 2.0f), vb = _mm_set_ps(b, -3.0f, b, 0.25f),
               vc = _mm_set_ps(c, 7.0f, c, -1.0f);
  _mm_storeu_ps(got, ms_sse2_fma_f32(va, vb, vc));
  sv = ms_fmaf_exact(a, b, c);
  if (any_nan_ok(a, b, c, sv, want) && got[1] != got[1] && got[3] != got[3]) return;
  if (bitsf(sv) != bitsf(want) || bitsf(got[1]) != bitsf(want) || bitsf(got[3]) != bitsf(want)) {
    if (bad < 20) printf("f32 fma(%a, %a, %a): hw %a, scalar %a, sse2 %a %a\n", a, b, c, want, sv,
                         got[1], got[3]);
    ++bad;
  }
}

static void check_f64(double a, double b, double c) {
  double got[2];
  const double want = hw_f64(a, b, c);
  _mm_storeu_pd(got, ms_sse2_fma_f64(_mm_set_pd(a, a), _mm_set_pd(b, b), _mm_set_pd(c, c)));
  if (any_nan_ok(a, b, c, got[0], want) && got[1] != got[1]) return;
  if (bitsd(got[0]) != bitsd(want) || bitsd(got[1]) != bitsd(want)) {
    if (bad < 20) printf("f64 fma(%a, %a, %a): hw %a, sse2 %a\n", a, b, c, want, got[0]);
    ++bad;
  }
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

int main(void) {
  static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x3F800000u, 0xBF800000u,
                                0x00000001u, 0x807FFFFFu, 0x00800000u, 0x7F7FFFFFu,
                                0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                                0x7FC01234u, 0x33800000u, 0x3F800001u, 0x4B000000u};
  const int ns = (int)(sizeof sp / sizeof sp[0]);
  int i, j, k;
  for (i = 0; i < ns; ++i) for (j = 0; j < ns; ++j) for (k = 0; k < ns; ++k) {
    check_f32(fbits(sp[i]), fbits(sp[j]), fbits(sp[k]));
    check_f64((double)fbits(sp[i]), (double)fbits(sp[j]), (double)fbits(sp[k]));
  }
  for (i = 0; i < 2000000; ++i) {
    const uint64_t r = next();
    /* random bits, and exponents near each other so the sum cancels or rounds */
    float a = fbits((uint32_t)r), b = fbits((uint32_t)(r >> 32)), c = fbits((uint32_t)next());
    check_f32(a, b, c);
    a = fbits(0x3F000000u | ((uint32_t)r & 0x807FFFFFu));
    b = fbits(0x3F000000u | ((uint32_t)(r >> 32) & 0x807FFFFFu));
    c = fbits((0x3E000000u + ((uint32_t)(r >> 20) & 0x03000000u)) | ((uint32_t)next() & 0x807FFFFFu));
    check_f32(a, b, c);
    /* a * b exactly halfway between two floats (odd 13-bit significands: their product is
     * odd, and where it takes 25 bits it is a float's half ulp), c a nudge either way that
     * double rounding loses, or none */
    {
      const uint32_t m1 = 0x1001u | ((uint32_t)r & 0xFFEu), m2 = 0x1001u | ((uint32_t)(r >> 12) & 0xFFEu);
      const int sh = (int)(r >> 24 & 15) - 8;
      a = ldexpf((float)m1, sh - 12);
      b = ldexpf((float)m2, -12);
      c = ldexpf((float)((int)(r >> 40 & 7) - 3), sh - 70);
      check_f32(a, b, c);
      check_f32(a, -b, c);
      check_f32(-a, b, -c);
    }
    check_f64((double)a * 3.1, (double)b / 7.0, (double)c * 1e-3);
  }
  /* the same in float's subnormal range, where the midpoints are odd multiples of 2^-150:
   * a * b = 2^-150 - 2^-196, and an odd multiple c of 2^-149 of at least 2^-143 makes the
   * double sum drop the 2^-196 and land on a midpoint, which ties-to-even rounds away */
  for (i = 0; i < 1 << 16; ++i) {
    const float a = ldexpf(1.0f + 0x1p-23f, -75), b = ldexpf(1.0f - 0x1p-23f, -75);
    const float c = ldexpf((float)(2 * (64 + i * 29) + 1), -149);
    check_f32(a, b, c); check_f32(a, b, -c); check_f32(-a, b, c); check_f32(a, -b, -c);
  }
  printf("mismatches: %d\n", bad);
  return bad != 0;
}
