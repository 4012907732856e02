/* C models of the element-wise chain kernel's loop shape, for bench_chain_models.py: E1
 * (w = -eta * (g + lam * w)) over float64, AVX-512, each variant one of the kernel's
 * choices taken away. Compiled at run time like cloop.c (gcc -O2 -ffp-contract=off) and called
 * through ctypes over numpy's buffers (numpy madvises large ones to huge pages: a C main
 * with plain 4 KiB pages runs every variant at the same speed and hides the differences).
 *
 *   chain       8 zmm a step, a switch a step over the chain's step codes (mul by a scalar,
 *               add a leaf), the start's lines prefetched 4 KiB ahead at the top and each
 *               leaf's inside its step (kernels_gen.h ms_chain_f64_avx512's shape)
 *   chain_nopf  the same without the prefetches
 *   blocked     the same steps in a straight line (no switch), the same prefetches
 *   blocked_nopf  straight, no prefetches
 *   vector_nopf   straight, one zmm at a time (load w, mul, load g, add, mul, store)
 */
#include <immintrin.h>

#define AHEAD 4096
#define PF8(p) do { int q_; for (q_ = 0; q_ < 8; ++q_) \
  _mm_prefetch((const char *)(p) + AHEAD + 64 * q_, _MM_HINT_T0); } while (0)
typedef __m512d V;
#define T512 __attribute__((noinline, target("avx512f")))
#define T512_INLINE static inline __attribute__((always_inline, target("avx512f")))

/* the step codes: 0 multiply by the step's scalar, 1 add the step's leaf */
#define STEP(c, O, b) switch (c) { \
  case 0: v0 = _mm512_mul_pd(b, v0); v1 = _mm512_mul_pd(b, v1); v2 = _mm512_mul_pd(b, v2); \
          v3 = _mm512_mul_pd(b, v3); v4 = _mm512_mul_pd(b, v4); v5 = _mm512_mul_pd(b, v5); \
          v6 = _mm512_mul_pd(b, v6); v7 = _mm512_mul_pd(b, v7); break; \
  case 1: v0 = _mm512_add_pd(_mm512_loadu_pd(O), v0); v1 = _mm512_add_pd(_mm512_loadu_pd(O + 8), v1); \
          v2 = _mm512_add_pd(_mm512_loadu_pd(O + 16), v2); v3 = _mm512_add_pd(_mm512_loadu_pd(O + 24), v3); \
          v4 = _mm512_add_pd(_mm512_loadu_pd(O + 32), v4); v5 = _mm512_add_pd(_mm512_loadu_pd(O + 40), v5); \
          v6 = _mm512_add_pd(_mm512_loadu_pd(O + 48), v6); v7 = _mm512_add_pd(_mm512_loadu_pd(O + 56), v7); break; }
#define LOAD8(S) V v0 = _mm512_loadu_pd(S), v1 = _mm512_loadu_pd(S + 8), v2 = _mm512_loadu_pd(S + 16), \
  v3 = _mm512_loadu_pd(S + 24), v4 = _mm512_loadu_pd(S + 32), v5 = _mm512_loadu_pd(S + 40), \
  v6 = _mm512_loadu_pd(S + 48), v7 = _mm512_loadu_pd(S + 56);
#define STORE8(r) _mm512_storeu_pd(r, v0); _mm512_storeu_pd(r + 8, v1); _mm512_storeu_pd(r + 16, v2); \
  _mm512_storeu_pd(r + 24, v3); _mm512_storeu_pd(r + 32, v4); _mm512_storeu_pd(r + 40, v5); \
  _mm512_storeu_pd(r + 48, v6); _mm512_storeu_pd(r + 56, v7);

T512_INLINE void chain_loop(double *w, const double *g, double lam, double meta, long n, int pf) {
  const int code[3] = {0, 1, 0};
  const double *opd[3] = {w, g, w};
  V bc[3];
  int s;
  long i;
  bc[0] = _mm512_set1_pd(lam);
  bc[1] = _mm512_setzero_pd();
  bc[2] = _mm512_set1_pd(meta);
  for (i = 0; i + 64 <= n; i += 64) {
    if (pf) PF8(w + i);
    LOAD8(w + i)
    for (s = 0; s < 3; ++s) {
      const double *O = opd[s] + i;
      const V b = bc[s];
      if (pf && code[s] == 1) PF8(O);
      STEP(code[s], O, b)
    }
    STORE8(w + i)
  }
}

T512 void chain(double *w, const double *g, double lam, double meta, long n) {
  chain_loop(w, g, lam, meta, n, 1);
}

T512 void chain_nopf(double *w, const double *g, double lam, double meta, long n) {
  chain_loop(w, g, lam, meta, n, 0);
}

T512_INLINE void blocked_loop(double *w, const double *g, double lam, double meta, long n, int pf) {
  const V l = _mm512_set1_pd(lam), m = _mm512_set1_pd(meta);
  long i;
  for (i = 0; i + 64 <= n; i += 64) {
    const double *G = g + i;
    if (pf) PF8(w + i);
    LOAD8(w + i)
    STEP(0, G, l)
    if (pf) PF8(G);
    STEP(1, G, l)
    STEP(0, G, m)
    STORE8(w + i)
  }
}

T512 void blocked(double *w, const double *g, double lam, double meta, long n) {
  blocked_loop(w, g, lam, meta, n, 1);
}

T512 void blocked_nopf(double *w, const double *g, double lam, double meta, long n) {
  blocked_loop(w, g, lam, meta, n, 0);
}

T512 void vector_nopf(double *w, const double *g, double lam, double meta, long n) {
  const V l = _mm512_set1_pd(lam), m = _mm512_set1_pd(meta);
  long i;
  for (i = 0; i + 8 <= n; i += 8) {
    V v = _mm512_mul_pd(l, _mm512_loadu_pd(w + i));
    v = _mm512_add_pd(_mm512_loadu_pd(g + i), v);
    _mm512_storeu_pd(w + i, _mm512_mul_pd(m, v));
  }
}
