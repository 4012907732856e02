/* The gather contract: leaves whose elements come from computed addresses, not a strided
 * view (the readers of mshadow/readers.py: pad, take, pool, im2col, ...).
 *
 * A gather kernel fills out[0..n) with the values of destination row y, columns
 * x0..x0+n-1 (dims = {n, y, x0}); args[0] is its ms_gather (sources and parameters bound
 * for this assignment), args[1] the output (a register or the destination row, contiguous).
 * Kernels only read inside their sources: every index read from a tensor is checked and an
 * out-of-range one sets ms_gather_error instead of touching memory (the engine raises).
 * The kernels are generated from mshadow/readers.py into kernels_gen.h (codegen_cpu.py).
 */
#ifndef MSHADOW_GATHER_H_
#define MSHADOW_GATHER_H_
#include <string.h>
#include <stdint.h>
#include "mshadow/half.h"
#include "mshadow/dtypes_gen.h"

#define MS_GATHER_PARAMS 16

typedef struct {
  const char *src[3];          /* sources (unused ones NULL) */
  npy_intp rowstep[3];         /* their row pitch in bytes */
  npy_intp colstep[3];         /* their column step in bytes (the itemsize for a tensor; a
                                  strided view's last-axis stride: 0, negative, ...) */
  int code[3];                 /* their storage type (MS_TYPEFLAG_*) when a kernel reads values */
  npy_intp p[MS_GATHER_PARAMS];
} ms_gather;

#ifndef MS_THREAD_LOCAL
#define MS_THREAD_LOCAL __thread
#endif
/* set when an index read from a tensor is out of range; per thread, like ms_fpe_flags */
static MS_THREAD_LOCAL int ms_gather_error = 0;

/* An index stored in a tensor of TypeFlag `code`, truncated toward zero as mshadow's casts:
 * one case per row of the dtype table (dtypes_gen.h). */
static inline npy_intp ms_read_index(const char *p, int code) {
  switch (code) {
#define MS_READ_INDEX_CASE(flag, NAME, code_, ctype, compute, is_float) \
    case flag: { ctype v; memcpy(&v, p, sizeof v); return (npy_intp)MS_WIDEN_##code_(v); }
    MS_FOR_EACH_DTYPE(MS_READ_INDEX_CASE)
#undef MS_READ_INDEX_CASE
    default: return 0;   /* not a TypeFlag: the binding never stores one */
  }
}

/* take_grad's accumulating scatter: rows [0, n) of `band` (rows i0.. of take_grad's
 * source, evaluated into scratch of TypeFlag `code`, `cols` a row) are added, in increasing
 * row, into row index[i0 + j] of `acc` (K rows of the same type): the order mshadow's
 * TakeGradExp sums them in. Integers wrap (as the gather kernel's uint64 sum does, modulo
 * the width). Returns -1, having added nothing more, at an index outside [0, K). */
static inline int ms_scatter_add(int code, char *acc, const char *band, npy_intp n,
                                 npy_intp cols, const char *index, npy_intp index_step,
                                 int index_code, npy_intp i0, npy_intp K) {
  npy_intp j, x;
  if (code == MS_TYPEFLAG_FLOAT16) return -1;   /* float16 sources are added as float32 */
  for (j = 0; j < n; ++j) {
    const npy_intp k = ms_read_index(index + (i0 + j) * index_step, index_code);
    if (k < 0 || k >= K) return -1;
    switch (code) {
#define MS_SCATTER_CASE(flag, NAME, code_, ctype, compute, is_float)                        \
      case flag: {                                                                       \
        ctype *a = (ctype *)acc + k * cols;                                              \
        const ctype *b = (const ctype *)band + j * cols;                                 \
        for (x = 0; x < cols; ++x) a[x] = (ctype)(a[x] + b[x]);                          \
        break;                                                                           \
      }
      MS_FOR_EACH_DTYPE(MS_SCATTER_CASE)
#undef MS_SCATTER_CASE
      default: return -1;
    }
  }
  return 0;
}

/* take_b ? b : a without a branch, on the bit patterns (readers' SELECT_<NAME>,
 * codegen_cpu.reducer_select): pool's maximum on random data mispredicted a ?: on floats
 * about every other element */
static inline float ms_pick_float(int take_b, float a, float b) {
  uint32_t ia, ib; const uint32_t m = 0u - (uint32_t)(take_b != 0);
  memcpy(&ia, &a, sizeof a); memcpy(&ib, &b, sizeof b); ia = (ia & ~m) | (ib & m);
  memcpy(&a, &ia, sizeof a); return a;
}
static inline double ms_pick_double(int take_b, double a, double b) {
  uint64_t ia, ib; const uint64_t m = 0u - (uint64_t)(take_b != 0);
  memcpy(&ia, &a, sizeof a); memcpy(&ib, &b, sizeof b); ia = (ia & ~m) | (ib & m);
  memcpy(&a, &ia, sizeof a); return a;
}
/* ms_pick on the readers' 16-byte vectors (codegen_cpu.reducer_vselect): lane i of b where
 * lane i of the comparison mask m is set (all ones), else lane i of a, by bits. */
#define ms_vpick(m, a, b) __extension__ ({ const __typeof__(m) m_ = (m); \
  (__typeof__(a))(((__typeof__(m_))(a) & ~m_) | ((__typeof__(m_))(b) & m_)); })

/* lanes of two such vectors by number (0.. the first's, then the second's), at constant
 * numbers: one shuffle instruction; ``mask_t`` the vector of integers of the lanes' size */
#if defined(__clang__)
#define MS_VSHUFFLE(a, b, mask_t, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define MS_VSHUFFLE(a, b, mask_t, ...) __builtin_shuffle((a), (b), (mask_t){__VA_ARGS__})
#endif

static inline npy_intp ms_imin(npy_intp a, npy_intp b) { return a < b ? a : b; }
static inline npy_intp ms_imax(npy_intp a, npy_intp b) { return a > b ? a : b; }
#define MS_MIN(a, b) ms_imin((a), (b))
#define MS_MAX(a, b) ms_imax((a), (b))
/* where window i of stride s starts, clipped to lim (i, s, lim >= 0): lim where i * s
 * passes it or overflows (a pshape's windows may start at any index times any stride) */
static inline npy_intp ms_start(npy_intp i, npy_intp s, npy_intp lim) {
  npy_intp r; return (__builtin_mul_overflow(i, s, &r) || r > lim) ? lim : r; }
#define MS_START(i, s, lim) ms_start((i), (s), (lim))
/* a / b and a % b as C computes them, with one 32-bit division when both are in [0, 2**31):
 * every reader divides its row index, and a 64-bit division costs 40-90 cycles on Intel
 * cores before Ice Lake (a 32-bit one about 26; on a GPU 64-bit division is a subroutine) */
static inline npy_intp ms_idiv(npy_intp a, npy_intp b) {
  return ((unsigned long long)(a | b) >> 31) == 0 ? (npy_intp)((unsigned)a / (unsigned)b) : a / b; }
static inline npy_intp ms_imod(npy_intp a, npy_intp b) {
  return ((unsigned long long)(a | b) >> 31) == 0 ? (npy_intp)((unsigned)a % (unsigned)b) : a % b; }
#define MS_DIV(a, b) ms_idiv((a), (b))
#define MS_MOD(a, b) ms_imod((a), (b))

#endif  /* MSHADOW_GATHER_H_ */
