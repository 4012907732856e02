/* Complex arithmetic on an interleaved (re, im) last axis (complex.h): complex_mul_cc/cr/rc,
 * complex_div_cc/cr/rc, conj, complex_exchange, complex_pad_imag, complex_abs_square,
 * complex_sum_real_imag. Kernels with the gather contract of mshadow/gather.h
 * (args[0] = ms_gather, args[1] = out, dims = {n, y, x0}).
 *
 * Design: output column x of row y belongs to complex element c = x / 2 of that row
 * (x even: its real part, x odd: its imaginary part); each kernel reads row y of its
 * sources' 2-D flattenings, whose shapes the Python constructors
 * (mshadow/extension/complex.py) checked, so every read is inside a source. A "real"
 * operand (cr's rhs, rc's lhs, pad_imag's source) has one column per complex element.
 * The formulas are mshadow's op::complex, operand for operand, with the missing imaginary
 * part of a real operand an explicit 0 (so ai * 0 is still computed: inf or NaN there gives
 * NaN, as in mshadow). Division is mshadow's textbook formula, not numpy's scaled (Smith)
 * one: it overflows to inf/NaN once |b|^2 does. float and double only, one kernel per
 * storage type (-ffp-contract=off keeps every product rounded, as in the C++).
 * Names start "g_cx_" (the engine binds the ms_gather argument of names starting "g_").
 */
#ifndef MSHADOW_GATHER_COMPLEX_H_
#define MSHADOW_GATHER_COMPLEX_H_
#include <string.h>
#include "mshadow/gather.h"

/* op::complex::mul / div: (ar, ai) op (br, bi) */
#define MS_CX_MUL_RE(ar, ai, br, bi) ((ar) * (br) - (ai) * (bi))
#define MS_CX_MUL_IM(ar, ai, br, bi) ((ar) * (bi) + (br) * (ai))
#define MS_CX_DIV_RE(ar, ai, br, bi) (((ar) * (br) + (ai) * (bi)) / ((br) * (br) + (bi) * (bi)))
#define MS_CX_DIV_IM(ar, ai, br, bi) (((br) * (ai) - (ar) * (bi)) / ((br) * (br) + (bi) * (bi)))

/* Operands of complex element c: kCC both complex, kCR rhs real, kRC lhs real. */
#define MS_CX_LOAD_CC(T, TC, ra, rb, c, ar, ai, br, bi)                                       \
  ar = ms_cx_ld_##TC(ra, 2 * (c)); ai = ms_cx_ld_##TC(ra, 2 * (c) + 1);                       \
  br = ms_cx_ld_##TC(rb, 2 * (c)); bi = ms_cx_ld_##TC(rb, 2 * (c) + 1)
#define MS_CX_LOAD_CR(T, TC, ra, rb, c, ar, ai, br, bi)                                       \
  ar = ms_cx_ld_##TC(ra, 2 * (c)); ai = ms_cx_ld_##TC(ra, 2 * (c) + 1);                       \
  br = ms_cx_ld_##TC(rb, (c)); bi = (T)0
#define MS_CX_LOAD_RC(T, TC, ra, rb, c, ar, ai, br, bi)                                       \
  ar = ms_cx_ld_##TC(ra, (c)); ai = (T)0;                                                     \
  br = ms_cx_ld_##TC(rb, 2 * (c)); bi = ms_cx_ld_##TC(rb, 2 * (c) + 1)

/* A binary kernel: src[0] = lhs, src[1] = rhs. */
#define MS_CX_BINARY(T, TC, NAME, OP, KIND)                                                   \
  static void ms_g_cx_##NAME##_##TC(char **args, npy_intp const *dims, npy_intp const *steps, \
                                    void *data) {                                             \
    const ms_gather *g = (const ms_gather *)args[0];                                          \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                    \
    const char *ra = g->src[0] + y * g->rowstep[0], *rb = g->src[1] + y * g->rowstep[1];      \
    npy_intp i;                                                                               \
    (void)steps; (void)data;                                                                  \
    for (i = 0; i < n; ++i) {                                                                 \
      const npy_intp x = x0 + i, c = x >> 1;                                                  \
      T ar, ai, br, bi, v;                                                                    \
      MS_CX_LOAD_##KIND(T, TC, ra, rb, c, ar, ai, br, bi);                                    \
      v = (x & 1) ? MS_CX_##OP##_IM(ar, ai, br, bi) : MS_CX_##OP##_RE(ar, ai, br, bi);        \
      memcpy(args[1] + i * sizeof(T), &v, sizeof(T));                                         \
    }                                                                                         \
  }

/* A unary kernel: src[0] = the source, VALUE(x) the output column x (in T). */
#define MS_CX_UNARY(T, TC, NAME, VALUE)                                                       \
  static void ms_g_cx_##NAME##_##TC(char **args, npy_intp const *dims, npy_intp const *steps, \
                                    void *data) {                                             \
    const ms_gather *g = (const ms_gather *)args[0];                                          \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                    \
    const char *ra = g->src[0] + y * g->rowstep[0];                                           \
    npy_intp i;                                                                               \
    (void)steps; (void)data;                                                                  \
    for (i = 0; i < n; ++i) {                                                                 \
      const npy_intp x = x0 + i;                                                              \
      const T v = VALUE(T, TC, ra, x);                                                        \
      memcpy(args[1] + i * sizeof(T), &v, sizeof(T));                                         \
    }                                                                                         \
  }

/* conjugate, exchange (C2C); pad_imag (R2C); abs_square, sum_real_imag (C2R) */
#define MS_CX_CONJ(T, TC, ra, x) ((x) & 1 ? -ms_cx_ld_##TC(ra, x) : ms_cx_ld_##TC(ra, x))
#define MS_CX_EXCHANGE(T, TC, ra, x) ms_cx_ld_##TC(ra, (x) ^ 1)
#define MS_CX_PAD_IMAG(T, TC, ra, x) ((x) & 1 ? (T)0 : ms_cx_ld_##TC(ra, (x) >> 1))
#define MS_CX_ABS_SQUARE(T, TC, ra, x)                                                        \
  (ms_cx_ld_##TC(ra, 2 * (x)) * ms_cx_ld_##TC(ra, 2 * (x)) +                                  \
   ms_cx_ld_##TC(ra, 2 * (x) + 1) * ms_cx_ld_##TC(ra, 2 * (x) + 1))
#define MS_CX_SUM_REAL_IMAG(T, TC, ra, x)                                                     \
  (ms_cx_ld_##TC(ra, 2 * (x)) + ms_cx_ld_##TC(ra, 2 * (x) + 1))

#define MS_CX_TYPED(T, TC)                                                                    \
  static inline T ms_cx_ld_##TC(const char *row, npy_intp k) {                               \
    T v;                                                                                      \
    memcpy(&v, row + k * (npy_intp)sizeof(T), sizeof(T));                                     \
    return v;                                                                                 \
  }                                                                                           \
  MS_CX_BINARY(T, TC, mul_cc, MUL, CC)                                                        \
  MS_CX_BINARY(T, TC, mul_cr, MUL, CR)                                                        \
  MS_CX_BINARY(T, TC, mul_rc, MUL, RC)                                                        \
  MS_CX_BINARY(T, TC, div_cc, DIV, CC)                                                        \
  MS_CX_BINARY(T, TC, div_cr, DIV, CR)                                                        \
  MS_CX_BINARY(T, TC, div_rc, DIV, RC)                                                        \
  MS_CX_UNARY(T, TC, conj, MS_CX_CONJ)                                                        \
  MS_CX_UNARY(T, TC, exchange, MS_CX_EXCHANGE)                                                \
  MS_CX_UNARY(T, TC, pad_imag, MS_CX_PAD_IMAG)                                                \
  MS_CX_UNARY(T, TC, abs_square, MS_CX_ABS_SQUARE)                                            \
  MS_CX_UNARY(T, TC, sum_real_imag, MS_CX_SUM_REAL_IMAG)

MS_CX_TYPED(float, f32)
MS_CX_TYPED(double, f64)

static const ms_kernel_entry ms_gather_complex_table[] = {
#define MS_CX_ENTRIES(TC)                                                                     \
  {"g_cx_mul_cc_" #TC, ms_g_cx_mul_cc_##TC}, {"g_cx_mul_cr_" #TC, ms_g_cx_mul_cr_##TC},       \
  {"g_cx_mul_rc_" #TC, ms_g_cx_mul_rc_##TC}, {"g_cx_div_cc_" #TC, ms_g_cx_div_cc_##TC},       \
  {"g_cx_div_cr_" #TC, ms_g_cx_div_cr_##TC}, {"g_cx_div_rc_" #TC, ms_g_cx_div_rc_##TC},       \
  {"g_cx_conj_" #TC, ms_g_cx_conj_##TC}, {"g_cx_exchange_" #TC, ms_g_cx_exchange_##TC},       \
  {"g_cx_pad_imag_" #TC, ms_g_cx_pad_imag_##TC},                                              \
  {"g_cx_abs_square_" #TC, ms_g_cx_abs_square_##TC},                                          \
  {"g_cx_sum_real_imag_" #TC, ms_g_cx_sum_real_imag_##TC}
  MS_CX_ENTRIES(f32), MS_CX_ENTRIES(f64),
#undef MS_CX_ENTRIES
  {NULL, NULL}
};

#endif  /* MSHADOW_GATHER_COMPLEX_H_ */
