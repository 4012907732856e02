/* Gathers: leaves whose elements come from computed addresses, not a strided view
 * (pad, take, mat_choose_row_element, mat_fill_row_element, upsampling_nearest,
 * one_hot_encode, range, concat; take_grad in gather_take_grad.h, included below).
 *
 * Design: a gather kernel fills out[0..n) with the values of destination row y, columns
 * x0..x0+n-1 (dims = {n, y, x0}); args[0] is its ms_gather (sources and parameters bound
 * for this assignment), args[1] the output (a register or the destination row, contiguous).
 * Kernels only read inside their sources: every index read from a tensor is checked and an
 * out-of-range one sets ms_gather_error instead of touching memory (the engine raises).
 * Pure copies are written once per element size; kernels that make values (one_hot, range)
 * once per storage type.
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

static inline void ms_copy_elem(char *d, const char *s, int size) {
  switch (size) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    default: memcpy(d, s, 8);
  }
}

/* pad: p = {size, H, W, py, px, oH, oW}; rows of the output are (leading..., oh). Outside
 * the source the value is zero (all-zero bytes for every dtype). */
static void ms_g_pad(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  char *out = args[1];
  const int sz = (int)g->p[0];
  const npy_intp H = g->p[1], W = g->p[2], py = g->p[3], px = g->p[4], oH = g->p[5];
  const npy_intp n = dims[0], y = dims[1], x0 = dims[2];
  const npy_intp lead = y / oH, oh = y % oH, h = oh - py;
  npy_intp i;
  (void)steps; (void)data;
  if (h < 0 || h >= H) { memset(out, 0, (size_t)(n * sz)); return; }
  const char *row = g->src[0] + (lead * H + h) * g->rowstep[0];
  for (i = 0; i < n; ++i) {
    const npy_intp w = x0 + i - px;
    if (w < 0 || w >= W) memset(out + i * sz, 0, (size_t)sz);
    else ms_copy_elem(out + i * sz, row + w * sz, sz);
  }
}

/* take: out[i][j] = src[index[i]][j]; p = {size, K (src rows)}; src[1] is the index. */
static void ms_g_take(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  const int sz = (int)g->p[0];
  const npy_intp n = dims[0], y = dims[1], x0 = dims[2];
  const npy_intp r = ms_read_index(g->src[1] + y * g->rowstep[1], g->code[1]);
  (void)steps; (void)data;
  if (r < 0 || r >= g->p[1]) { ms_gather_error = 1; memset(args[1], 0, (size_t)(n * sz)); return; }
  memcpy(args[1], g->src[0] + r * g->rowstep[0] + x0 * sz, (size_t)(n * sz));
}

/* mat_choose_row_element: out[i] = src[i][index[i]] (a 1-D output: row 0, columns i);
 * p = {size, cols}. */
static void ms_g_choose_row(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  const int sz = (int)g->p[0];
  const npy_intp n = dims[0], x0 = dims[2];
  npy_intp i;
  (void)steps; (void)data;
  for (i = 0; i < n; ++i) {
    const npy_intp r = x0 + i;
    const npy_intp c = ms_read_index(g->src[1] + r * g->rowstep[1], g->code[1]);
    if (c < 0 || c >= g->p[1]) { ms_gather_error = 1; memset(args[1] + i * sz, 0, (size_t)sz); continue; }
    ms_copy_elem(args[1] + i * sz, g->src[0] + r * g->rowstep[0] + c * sz, sz);
  }
}

/* mat_fill_row_element: a copy of src with src[i][index[i]] = val[i]; src[2] is val. */
static void ms_g_fill_row(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  const int sz = (int)g->p[0];
  const npy_intp n = dims[0], y = dims[1], x0 = dims[2];
  const npy_intp c = ms_read_index(g->src[1] + y * g->rowstep[1], g->code[1]);
  (void)steps; (void)data;
  if (c < 0 || c >= g->p[1]) ms_gather_error = 1;
  memcpy(args[1], g->src[0] + y * g->rowstep[0] + x0 * sz, (size_t)(n * sz));
  if (c >= x0 && c < x0 + n) ms_copy_elem(args[1] + (c - x0) * sz, g->src[2] + y * g->rowstep[2], sz);
}

/* upsampling_nearest: out(.., oh, ow) = src(.., oh / scale, ow / scale);
 * p = {size, H, scale, oH}. */
static void ms_g_upsample(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  const int sz = (int)g->p[0];
  const npy_intp H = g->p[1], s = g->p[2], oH = g->p[3];
  const npy_intp n = dims[0], y = dims[1], x0 = dims[2];
  const char *row = g->src[0] + ((y / oH) * H + (y % oH) / s) * g->rowstep[0];
  npy_intp i;
  (void)steps; (void)data;
  for (i = 0; i < n; ++i) ms_copy_elem(args[1] + i * sz, row + ((x0 + i) / s) * sz, sz);
}

/* concat along axis k: the source of a row or a column switches at p[1];
 * p = {size, split, along_columns (1: split is a column), rows per group of a, of b}. */
static void ms_g_concat(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  const int sz = (int)g->p[0];
  const npy_intp n = dims[0], y = dims[1], x0 = dims[2];
  npy_intp i;
  (void)steps; (void)data;
  if (g->p[2]) {   /* the last axis is the concat axis: columns < split come from a */
    const npy_intp split = g->p[1];
    for (i = 0; i < n; ++i) {
      const npy_intp x = x0 + i;
      if (x < split) ms_copy_elem(args[1] + i * sz, g->src[0] + y * g->rowstep[0] + x * sz, sz);
      else ms_copy_elem(args[1] + i * sz, g->src[1] + y * g->rowstep[1] + (x - split) * sz, sz);
    }
  } else {         /* rows: inside each group of (ra + rb) rows the first ra come from a */
    const npy_intp ra = g->p[3], rb = g->p[4];
    const npy_intp grp = y / (ra + rb), r = y % (ra + rb);
    const char *row = r < ra ? g->src[0] + (grp * ra + r) * g->rowstep[0]
                             : g->src[1] + (grp * rb + r - ra) * g->rowstep[1];
    memcpy(args[1], row + x0 * sz, (size_t)(n * sz));
  }
}

/* Kernels that make values, per storage type: one_hot_encode and range. */
#define MS_STORE_F32(T, out, v) (*(T *)(out) = (T)(v))
#define MS_GATHER_TYPED(T, TC, STORE)                                                          \
  /* one_hot: out[i][j] = (index[i] == j); src[0] is the index; p = {-, num_choices} */                               \
  static void ms_g_one_hot_##TC(char **args, npy_intp const *dims, npy_intp const *steps,     \
                                  void *data) {                                                  \
    const ms_gather *g = (const ms_gather *)args[0];                                             \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                       \
    const npy_intp c = ms_read_index(g->src[0] + y * g->rowstep[0], g->code[0]);                 \
    npy_intp i;                                                                                  \
    (void)steps; (void)data;                                                                     \
    for (i = 0; i < n; ++i) STORE(T, args[1] + i * sizeof(T), (x0 + i == c) ? 1.0 : 0.0);       \
  }                                                                                              \
  /* range: out[x] = start + (x / repeat) * step (p holds start and step as doubles) */         \
  static void ms_g_range_##TC(char **args, npy_intp const *dims, npy_intp const *steps,       \
                                void *data) {                                                    \
    const ms_gather *g = (const ms_gather *)args[0];                                             \
    const npy_intp n = dims[0], x0 = dims[2], repeat = g->p[1];                                  \
    double start, step;                                                                          \
    npy_intp i;                                                                                  \
    memcpy(&start, &g->p[2], 8);                                                                 \
    memcpy(&step, &g->p[3], 8);                                                                  \
    (void)steps; (void)data;                                                                     \
    for (i = 0; i < n; ++i) STORE(T, args[1] + i * sizeof(T), start + (double)((x0 + i) / repeat) * step); \
  }

#define MS_STORE_HALF(T, out, v) (*(uint16_t *)(out) = ms_float_to_half((float)(v)))
MS_GATHER_TYPED(float, f32, MS_STORE_F32)
MS_GATHER_TYPED(double, f64, MS_STORE_F32)
MS_GATHER_TYPED(uint16_t, f16, MS_STORE_HALF)
MS_GATHER_TYPED(uint8_t, u8, MS_STORE_F32)
MS_GATHER_TYPED(int8_t, i8, MS_STORE_F32)
MS_GATHER_TYPED(int32_t, i32, MS_STORE_F32)
MS_GATHER_TYPED(int64_t, i64, MS_STORE_F32)

#include "mshadow/gather_take_grad.h"

static const ms_kernel_entry ms_gather_table[] = {
  {"g_pad", ms_g_pad}, {"g_take", ms_g_take}, {"g_choose_row", ms_g_choose_row},
  {"g_fill_row", ms_g_fill_row}, {"g_upsample", ms_g_upsample}, {"g_concat", ms_g_concat},
#define MS_GT(code) {"g_one_hot_" #code, ms_g_one_hot_##code}, {"g_range_" #code, ms_g_range_##code}
  MS_GT(f32), MS_GT(f64), MS_GT(f16), MS_GT(u8), MS_GT(i8), MS_GT(i32), MS_GT(i64),
#undef MS_GT
  MS_GATHER_TAKE_GRAD_ENTRIES,
  {NULL, NULL}
};

#endif  /* MSHADOW_GATHER_H_ */
