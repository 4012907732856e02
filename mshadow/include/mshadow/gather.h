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

#define MS_GATHER_PARAMS 12

typedef struct {
  const char *src[3];          /* sources (unused ones NULL) */
  npy_intp rowstep[3];         /* their row pitch in bytes */
  npy_intp colstep[3];         /* their column step in bytes (the itemsize for a tensor; a
                                  strided view's last-axis stride: 0, negative, ...) */
  int code[3];                 /* their storage type (TypeFlag) when a kernel reads values */
  npy_intp p[MS_GATHER_PARAMS];
} ms_gather;

#ifndef MS_THREAD_LOCAL
#define MS_THREAD_LOCAL __thread
#endif
/* set when an index read from a tensor is out of range; per thread, like ms_fpe_flags */
static MS_THREAD_LOCAL int ms_gather_error = 0;

/* An index stored in a tensor of TypeFlag `code`, truncated toward zero as mshadow's casts. */
static inline npy_intp ms_read_index(const char *p, int code) {
  switch (code) {
    case 0: { float v; memcpy(&v, p, 4); return (npy_intp)v; }
    case 1: { double v; memcpy(&v, p, 8); return (npy_intp)v; }
    case 2: { uint16_t h; memcpy(&h, p, 2); return (npy_intp)ms_half_to_float(h); }
    case 3: return *(const uint8_t *)p;
    case 4: { int32_t v; memcpy(&v, p, 4); return v; }
    case 5: return *(const int8_t *)p;
    default: { int64_t v; memcpy(&v, p, 8); return (npy_intp)v; }
  }
}

static inline npy_intp ms_imin(npy_intp a, npy_intp b) { return a < b ? a : b; }
static inline npy_intp ms_imax(npy_intp a, npy_intp b) { return a > b ? a : b; }
#define MS_MIN(a, b) ms_imin((a), (b))
#define MS_MAX(a, b) ms_imax((a), (b))

/* MXNet's red::maximum (red 1) / minimum (red 2): a NaN already held sticks, a NaN value is
 * taken (`!(res >= v)` is true for it), so NaN propagates whatever the order. */
#define MS_REDUCE(red, res, v)                                                                  \
  do {                                                                                          \
    if ((red) == 1) { if ((res) == (res) && !((res) >= (v))) (res) = (v); }                     \
    else { if ((res) == (res) && !((res) <= (v))) (res) = (v); }                                \
  } while (0)

#endif  /* MSHADOW_GATHER_H_ */
