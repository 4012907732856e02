/* Every NEON packet function (packet/neon.h) against its scalar.h twin, bit for bit, on the
 * values where ISAs differ: signed zeros, infinities, NaNs with payloads and signs,
 * subnormals, the extremes (the exponent-field helpers too). Built for aarch64 and run under qemu-user by
 * tests/test_arch_levels.py; prints each mismatch, exits 1 if there is one.
 * NaN results follow nan_rule.h's NANS_OK. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include "mshadow/packet.h"
#include "nan_rule.h"

static int bad = 0;

#define SPECIALS(T, U, nanbits, negnanbits, payload, sub, big)                               \
  static T special_##T(int i) {                                                              \
    static const double vals[] = {0.0, -0.0, 1.0, -1.0, 1.5, -2.75, 1e-3, 3.0e5,             \
                                  INFINITY, -INFINITY, 0.1, -7.0};                           \
    const int nv = (int)(sizeof vals / sizeof vals[0]);                                      \
    T r; U u;                                                                                \
    if (i < nv) return (T)vals[i];                                                           \
    switch (i - nv) {                                                                        \
      case 0: u = nanbits; break;                                                            \
      case 1: u = negnanbits; break;                                                         \
      case 2: u = nanbits | payload; break;                                                  \
      case 3: u = sub; break;                                                                \
      case 4: u = big; break;                                                                \
      default: u = sub | ((U)1 << (sizeof(U) * 8 - 1)); break;                               \
    }                                                                                        \
    memcpy(&r, &u, sizeof r);                                                                \
    return r;                                                                                \
  }
#define NSPECIAL 18
SPECIALS(float, uint32_t, 0x7FC00000u, 0xFFC00000u, 0x1234u, 0x00000001u, 0x7F7FFFFFu)
SPECIALS(double, uint64_t, 0x7FF8000000000000ull, 0xFFF8000000000000ull, 0x1234ull,
         0x1ull, 0x7FEFFFFFFFFFFFFFull)

#define SAME_NAN(T, U, what, got, want, a, b, nan_ok)                                        \
  do {                                                                                       \
    U g_, w_; T gv_ = (got), wv_ = (want);                                                   \
    memcpy(&g_, &gv_, sizeof g_); memcpy(&w_, &wv_, sizeof w_);                              \
    if (g_ != w_ && !((nan_ok) && gv_ != gv_ && wv_ != wv_)) {                               \
      if (bad++ < 20) printf("%s(%a, %a): neon %a, scalar %a\n", what, (double)(a),          \
                             (double)(b), (double)gv_, (double)wv_);                         \
    }                                                                                        \
  } while (0)
#define SAME(T, U, what, got, want, a, b) SAME_NAN(T, U, what, got, want, a, b, 0)

/* W lanes of a, b; lane 0 checked (each lane is the same operation). CHECK2N: an
 * arithmetic operation, whose two-NaN results need only be NaN (see the top) */
#define CHECK2(T, U, t, W, op) CHECK2_(T, U, t, W, op, 0)
#define CHECK2N(T, U, t, W, op) CHECK2_(T, U, t, W, op, 1)
#define CHECK2_(T, U, t, W, op, arith)                                                       \
  for (i = 0; i < NSPECIAL; ++i) for (j = 0; j < NSPECIAL; ++j) {                            \
    T a[W], b[W], r[W]; int l;                                                               \
    for (l = 0; l < W; ++l) { a[l] = special_##T((i + l) % NSPECIAL);                        \
                              b[l] = special_##T((j + 3 * l) % NSPECIAL); }                  \
    ms_neon_storeu_##t(r, ms_neon_##op##_##t(ms_neon_loadu_##t(a), ms_neon_loadu_##t(b)));   \
    for (l = 0; l < W; ++l)                                                                  \
      SAME_NAN(T, U, #op "_" #t, r[l], ms_s_##op##_##t(a[l], b[l]), a[l], b[l],              \
               (arith) && NANS_OK(a[l], b[l], (T)0));                                        \
  }
#define CHECK1(T, U, t, W, op)                                                               \
  for (i = 0; i < NSPECIAL; ++i) {                                                           \
    T a[W], r[W]; int l;                                                                     \
    for (l = 0; l < W; ++l) a[l] = special_##T((i + l) % NSPECIAL);                          \
    ms_neon_storeu_##t(r, ms_neon_##op##_##t(ms_neon_loadu_##t(a)));                         \
    for (l = 0; l < W; ++l) SAME(T, U, #op "_" #t, r[l], ms_s_##op##_##t(a[l]), a[l], 0);    \
  }
/* fma(a, b, c): every triple of specials (lanes rotate through them as in CHECK2) */
#define CHECK3(T, U, t, W, op)                                                               \
  for (i = 0; i < NSPECIAL; ++i) for (j = 0; j < NSPECIAL; ++j) for (k = 0; k < NSPECIAL; ++k) { \
    T a[W], b[W], c[W], r[W]; int l;                                                         \
    for (l = 0; l < W; ++l) { a[l] = special_##T((i + l) % NSPECIAL);                        \
                              b[l] = special_##T((j + 3 * l) % NSPECIAL);                    \
                              c[l] = special_##T((k + 7 * l) % NSPECIAL); }                  \
    ms_neon_storeu_##t(r, ms_neon_##op##_##t(ms_neon_loadu_##t(a), ms_neon_loadu_##t(b),     \
                                             ms_neon_loadu_##t(c)));                         \
    for (l = 0; l < W; ++l)                                                                  \
      SAME_NAN(T, U, #op "_" #t, r[l], ms_s_##op##_##t(a[l], b[l], c[l]), a[l], b[l],        \
               NANS_OK(a[l], b[l], c[l]));                                                   \
  }
/* a comparison's mask selects between two markers; scalar.h's gives an int */
#define CHECKM(T, U, t, W, op)                                                               \
  for (i = 0; i < NSPECIAL; ++i) for (j = 0; j < NSPECIAL; ++j) {                            \
    T a[W], b[W], r[W]; int l;                                                               \
    for (l = 0; l < W; ++l) { a[l] = special_##T((i + l) % NSPECIAL);                        \
                              b[l] = special_##T((j + 5 * l) % NSPECIAL); }                  \
    ms_neon_storeu_##t(r, ms_neon_sel_##t(ms_neon_##op##_##t(ms_neon_loadu_##t(a),           \
                                                             ms_neon_loadu_##t(b)),          \
                                          ms_neon_set1_##t(1), ms_neon_set1_##t(2)));        \
    for (l = 0; l < W; ++l)                                                                  \
      SAME(T, U, #op "_" #t, r[l], ms_s_sel_##t(ms_s_##op##_##t(a[l], b[l]), 1, 2), a[l], b[l]); \
  }

#define CHECK_TYPE(T, U, t, W, emax)                                                         \
  static void check_##t(void) {                                                              \
    int i, j, k, l;                                                                          \
    CHECK2N(T, U, t, W, add) CHECK2N(T, U, t, W, sub) CHECK2N(T, U, t, W, mul)               \
    CHECK2N(T, U, t, W, div) CHECK2(T, U, t, W, max) CHECK2(T, U, t, W, min)                 \
    CHECK3(T, U, t, W, fma)                                                                  \
    CHECK2(T, U, t, W, copysign)                                                             \
    CHECK1(T, U, t, W, neg) CHECK1(T, U, t, W, abs)                                          \
    /* the exponent-field helpers on every special too (zeros, subnormals, inf, NaN): the    \
     * same integer steps on the same bits, whatever they mean there */                      \
    CHECK1(T, U, t, W, pow2i) CHECK1(T, U, t, W, frexpe) CHECK1(T, U, t, W, frexpm)          \
    CHECK2(T, U, t, W, ldexp)                                                                \
    CHECKM(T, U, t, W, lt) CHECKM(T, U, t, W, gt) CHECKM(T, U, t, W, eq)                     \
    for (i = 0; i < NSPECIAL; ++i) {   /* sqrt (scalar.h has none: C's), isnan, sum */       \
      T a[W], r[W];                                                                          \
      for (l = 0; l < W; ++l) a[l] = special_##T((i + l) % NSPECIAL);                        \
      ms_neon_storeu_##t(r, ms_neon_sqrt_##t(ms_neon_loadu_##t(a)));                         \
      for (l = 0; l < W; ++l) SAME(T, U, "sqrt_" #t, r[l], (T)sqrt(a[l]), a[l], 0);          \
      ms_neon_storeu_##t(r, ms_neon_sel_##t(ms_neon_isnan_##t(ms_neon_loadu_##t(a)),         \
                                            ms_neon_set1_##t(1), ms_neon_set1_##t(2)));      \
      for (l = 0; l < W; ++l)                                                                 \
        SAME(T, U, "isnan_" #t, r[l], ms_s_sel_##t(ms_s_isnan_##t(a[l]), 1, 2), a[l], 0);     \
      for (j = 0, l = 0; l < W; ++l) j |= a[l] != a[l];                                      \
      if (ms_neon_any_##t(ms_neon_isnan_##t(ms_neon_loadu_##t(a))) != j)                     \
        if (bad++ < 20) printf("any_" #t "(isnan) at %d\n", i);                              \
    }                                                                                        \
    for (i = -(emax - 1); i <= emax; ++i) {   /* the exponent-field helpers */               \
      T a[W], r[W], want;                                                                    \
      for (l = 0; l < W; ++l) a[l] = (T)i;                                                   \
      ms_neon_storeu_##t(r, ms_neon_pow2i_##t(ms_neon_loadu_##t(a)));                        \
      SAME(T, U, "pow2i_" #t, r[0], ms_s_pow2i_##t((T)i), i, 0);                             \
      for (l = 0; l < W; ++l) a[l] = (T)ldexp(1.0 + 0.3 * l, i);                             \
      ms_neon_storeu_##t(r, ms_neon_frexpe_##t(ms_neon_loadu_##t(a)));                       \
      for (l = 0; l < W; ++l) SAME(T, U, "frexpe_" #t, r[l], ms_s_frexpe_##t(a[l]), a[l], 0); \
      ms_neon_storeu_##t(r, ms_neon_frexpm_##t(ms_neon_loadu_##t(a)));                       \
      for (l = 0; l < W; ++l) SAME(T, U, "frexpm_" #t, r[l], ms_s_frexpm_##t(a[l]), a[l], 0); \
      for (j = -(2 * emax - 2); j <= 2 * emax - 2; j += 7) {                                 \
        T p[W], n[W];                                                                        \
        for (l = 0; l < W; ++l) { p[l] = (T)(1.0 + 0.37 * l); n[l] = (T)j; }                 \
        ms_neon_storeu_##t(r, ms_neon_ldexp_##t(ms_neon_loadu_##t(p), ms_neon_loadu_##t(n))); \
        for (l = 0; l < W; ++l) {                                                            \
          want = ms_s_ldexp_##t(p[l], n[l]);                                                 \
          SAME(T, U, "ldexp_" #t, r[l], want, p[l], n[l]);                                   \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
    {                                                                                        \
      T a[W]; T want = 0;                                                                    \
      for (l = 0; l < W; ++l) a[l] = (T)(0.1 * (l + 1)) * (T)(l % 2 ? 3 : -1);               \
      if (W == 4) want = (T)((a[0] + a[1]) + (a[2] + a[3])); else want = (T)(a[0] + a[1]);   \
      SAME(T, U, "sum_" #t, ms_neon_sum_##t(ms_neon_loadu_##t(a)), want, a[0], a[1]);        \
    }                                                                                        \
  }
CHECK_TYPE(float, uint32_t, f32, 4, 127)
CHECK_TYPE(double, uint64_t, f64, 2, 1023)

static void check_tab(void) {
  float t[16], v[4], r[4];
  int i, l;
  for (i = 0; i < 16; ++i) t[i] = 1.0f + (float)i / 7.0f;
  for (i = 0; i < 200; ++i) {
    uint32_t base = 0x3F800000u;   /* 1.0f: buckets of half a binade from there */
    for (l = 0; l < 4; ++l) v[l] = 1.0f + (float)((i * 4 + l) % 32) / 16.0f * 3.5f;
    ms_neon_storeu_f32(r, ms_neon_tab_f32(t, ms_neon_bucket_f32(ms_neon_loadu_f32(v), base)));
    for (l = 0; l < 4; ++l) {
      int32_t k = ms_s_bucket_f32(v[l], base);
      if (k < 0 || k > 15) continue;
      SAME(float, uint32_t, "tab_f32", r[l], ms_s_tab_f32(t, k), v[l], k);
    }
  }
}

int main(void) {
  check_f32();
  check_f64();
  check_tab();
  printf("%s: %d mismatches\n", bad ? "FAIL" : "ok", bad);
  return bad != 0;
}
