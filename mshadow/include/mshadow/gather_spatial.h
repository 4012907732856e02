/* Spatial gathers (spatial_pool.h, spatial_unpool.h, channel_pool.h, channel_unpool.h,
 * unpack_patch2col.h, pack_col2patch.h): kernels with the gather contract of
 * mshadow/gather.h (args[0] = ms_gather, args[1] = out, dims = {n, y, x0}).
 *
 * Design: each kernel fills destination row y, columns x0..x0+n-1, from its sources'
 * 2-D flattenings (row r of a source starts at src + r * rowstep). The Python constructors
 * (mshadow/extension/spatial.py) check every shape before a kernel runs; the kernels still
 * clip every window to the source extents they are given, so no parameter combination makes
 * them read outside a source. A reducer is p[0]: 0 sum, 1 maximum, 2 minimum. Sums
 * accumulate in the storage type for float and double (mshadow's DType arithmetic), in
 * float for half, and in uint64 for integers (wrapping, which equals mshadow's result
 * modulo the type's width without signed overflow). maximum/minimum start from MXNet's
 * SetInitValue (-inf/+inf for floats, the type's limits for integers) and propagate NaN.
 * im2col is a copy, written once per element size; everything else once per storage type.
 * Names start "g_sp_": the engine binds a kernel's ms_gather argument only for names that
 * start "g_" (_engine.pxi), so a "gs_" name would be called without its sources.
 */
#ifndef MSHADOW_GATHER_SPATIAL_H_
#define MSHADOW_GATHER_SPATIAL_H_
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mshadow/gather.h"

#define MS_SP_SUM 0
#define MS_SP_MAX 1
#define MS_SP_MIN 2

static inline npy_intp ms_sp_min(npy_intp a, npy_intp b) { return a < b ? a : b; }
static inline npy_intp ms_sp_max(npy_intp a, npy_intp b) { return a > b ? a : b; }

/* MXNet's red::maximum / minimum: a NaN already held sticks, a NaN source is taken
 * (`!(res >= v)` is true for it), so NaN propagates whatever the order. */
#define MS_SP_REDUCE(r, res, v)                                                                 \
  do {                                                                                          \
    if ((r) == MS_SP_MAX) { if ((res) == (res) && !((res) >= (v))) (res) = (v); }               \
    else { if ((res) == (res) && !((res) <= (v))) (res) = (v); }                                \
  } while (0)

/* unpack_patch2col: out[(c*ky + i)*kx + j][(n*oh + oy)*ow + ox] = img(n, c, oy*sy + i*dy,
 * ox*sx + j*dx), zero outside the image; p = {size, C, H, W, ky, kx, sy, sx, dy, dx, oh, ow}. */
static void ms_g_sp_im2col(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
  const ms_gather *g = (const ms_gather *)args[0];
  char *out = args[1];
  const int sz = (int)g->p[0];
  const npy_intp C = g->p[1], H = g->p[2], W = g->p[3], ky = g->p[4], kx = g->p[5];
  const npy_intp sy = g->p[6], sx = g->p[7], dy = g->p[8], dx = g->p[9];
  const npy_intp oh = g->p[10], ow = g->p[11];
  const npy_intp n = dims[0], y = dims[1], x0 = dims[2];
  const npy_intp xoff = (y % kx) * dx, yoff = ((y / kx) % ky) * dy, c = y / (kx * ky);
  /* walk (image, oy, ox) incrementally: divisions once per block, not per element */
  npy_intp ox = x0 % ow, oy = (x0 / ow) % oh, img = x0 / (ow * oh), i;
  (void)steps; (void)data; (void)C;
  for (i = 0; i < n; ++i) {
    const npy_intp h = oy * sy + yoff, w = ox * sx + xoff;
    if (h < H && w < W)
      ms_copy_elem(out + i * sz, g->src[0] + ((img * C + c) * H + h) * g->rowstep[0] + w * sz, sz);
    else
      memset(out + i * sz, 0, (size_t)sz);
    if (++ox == ow) { ox = 0; if (++oy == oh) { oy = 0; ++img; } }
  }
}

/* Per storage type T (code TC): V is the type values are compared in, A the sum
 * accumulator, LOAD turns the stored T into V, STORE writes a V or an A back as T. */
#define MS_SP_TYPED(T, TC, V, A, LOAD, STORE, VLOW, VHIGH)                                      \
  static inline V ms_sp_ld_##TC(const char *p) { T t; memcpy(&t, p, sizeof(T)); return LOAD(t); } \
                                                                                                \
  /* pool: p = {red, H, W, ky, kx, sy, sx, oH}; out row y = (lead, py) */                       \
  static void ms_g_sp_pool_##TC(char **args, npy_intp const *dims, npy_intp const *steps,       \
                              void *data) {                                                     \
    const ms_gather *g = (const ms_gather *)args[0];                                            \
    char *out = args[1];                                                                        \
    const int r = (int)g->p[0];                                                                 \
    const npy_intp H = g->p[1], W = g->p[2], ky = g->p[3], kx = g->p[4];                        \
    const npy_intp sy = g->p[5], sx = g->p[6], oH = g->p[7], rs = g->rowstep[0];                \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                      \
    /* a pshape larger than the natural one gives windows that start past the image: */         \
    /* clipped to empty, they keep the init value */                                            \
    const npy_intp ys = ms_sp_min((y % oH) * sy, H), ye = ms_sp_min(ys + ky, H);                \
    const char *base = g->src[0] + (y / oH) * H * rs;                                           \
    npy_intp i, a, b;                                                                           \
    (void)steps; (void)data;                                                                    \
    for (i = 0; i < n; ++i) {                                                                   \
      const npy_intp xs = ms_sp_min((x0 + i) * sx, W), xe = ms_sp_min(xs + kx, W);              \
      if (r == MS_SP_SUM) {                                                                     \
        A acc = 0;                                                                              \
        for (a = ys; a < ye; ++a)                                                               \
          for (b = xs; b < xe; ++b) acc += (A)ms_sp_ld_##TC(base + a * rs + b * sizeof(T));     \
        STORE(T, out + i * sizeof(T), acc);                                                     \
      } else {                                                                                  \
        V res = r == MS_SP_MAX ? VLOW : VHIGH;                                                  \
        for (a = ys; a < ye; ++a)                                                               \
          for (b = xs; b < xe; ++b) {                                                           \
            const V v = ms_sp_ld_##TC(base + a * rs + b * sizeof(T));                           \
            MS_SP_REDUCE(r, res, v);                                                            \
          }                                                                                     \
        STORE(T, out + i * sizeof(T), res);                                                     \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
                                                                                                \
  /* unpool: src = {data_src, data_pooled, grad_pooled}; p = {red, H, ky, kx, sy, sx, pH, pW};  \
   * out(y, x) = sum over pooled windows holding (y, x) of PartialGrad * grad */                \
  static void ms_g_sp_unpool_##TC(char **args, npy_intp const *dims, npy_intp const *steps,     \
                                void *data) {                                                   \
    const ms_gather *g = (const ms_gather *)args[0];                                            \
    char *out = args[1];                                                                        \
    const int r = (int)g->p[0];                                                                 \
    const npy_intp H = g->p[1], ky = g->p[2], kx = g->p[3], sy = g->p[4], sx = g->p[5];         \
    const npy_intp pH = g->p[6], pW = g->p[7];                                                  \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                      \
    const npy_intp h = y % H, prow = (y / H) * pH;                                              \
    const npy_intp pymin = h < ky ? 0 : (h - ky + sy) / sy;                                     \
    const npy_intp pymax = ms_sp_min((h + sy) / sy, pH);                                        \
    const char *srow = g->src[0] + y * g->rowstep[0];                                           \
    npy_intp i, a, b;                                                                           \
    (void)steps; (void)data;                                                                    \
    for (i = 0; i < n; ++i) {                                                                   \
      const npy_intp x = x0 + i;                                                                \
      const npy_intp pxmin = x < kx ? 0 : (x - kx + sx) / sx;                                   \
      const npy_intp pxmax = ms_sp_min((x + sx) / sx, pW);                                      \
      const V vsrc = ms_sp_ld_##TC(srow + x * sizeof(T));                                       \
      A acc = 0;                                                                                \
      for (a = pymin; a < pymax; ++a) {                                                         \
        const char *prw = g->src[1] + (prow + a) * g->rowstep[1];                               \
        const char *grw = g->src[2] + (prow + a) * g->rowstep[2];                               \
        for (b = pxmin; b < pxmax; ++b) {                                                       \
          /* PartialGrad times grad, as mshadow: a 0 partial still multiplies (0 * inf) */      \
          const A pg = (r == MS_SP_SUM || vsrc == ms_sp_ld_##TC(prw + b * sizeof(T))) ? 1 : 0;  \
          acc += pg * (A)ms_sp_ld_##TC(grw + b * sizeof(T));                                    \
        }                                                                                       \
      }                                                                                         \
      STORE(T, out + i * sizeof(T), acc);                                                       \
    }                                                                                           \
  }                                                                                             \
                                                                                                \
  /* chpool: p = {red, C, oC, H, nsize, stride, pad}; out row y = (n, c, h). The window         \
   * [c*stride - pad, +nsize) is clipped by the output channel count (quirk 11) and by C. */    \
  static void ms_g_sp_chpool_##TC(char **args, npy_intp const *dims, npy_intp const *steps,     \
                                void *data) {                                                   \
    const ms_gather *g = (const ms_gather *)args[0];                                            \
    char *out = args[1];                                                                        \
    const int r = (int)g->p[0];                                                                 \
    const npy_intp C = g->p[1], oC = g->p[2], H = g->p[3], ns = g->p[4];                        \
    const npy_intp st = g->p[5], pd = g->p[6], rs = g->rowstep[0];                              \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                      \
    const npy_intp h = y % H, c = (y / H) % oC, img = (y / H) / oC;                             \
    const npy_intp cs = ms_sp_max(c * st - pd, 0);                                              \
    const npy_intp ce = ms_sp_min(ms_sp_min(c * st - pd + ns, oC), C);                          \
    const char *base = g->src[0] + (img * C * H + h) * rs + x0 * (npy_intp)sizeof(T);           \
    npy_intp i, k;                                                                              \
    (void)steps; (void)data;                                                                    \
    for (i = 0; i < n; ++i) {                                                                   \
      if (r == MS_SP_SUM) {                                                                     \
        A acc = 0;                                                                              \
        for (k = cs; k < ce; ++k) acc += (A)ms_sp_ld_##TC(base + k * H * rs + i * sizeof(T));   \
        STORE(T, out + i * sizeof(T), acc);                                                     \
      } else {                                                                                  \
        V res = r == MS_SP_MAX ? VLOW : VHIGH;                                                  \
        for (k = cs; k < ce; ++k) {                                                             \
          const V v = ms_sp_ld_##TC(base + k * H * rs + i * sizeof(T));                         \
          MS_SP_REDUCE(r, res, v);                                                              \
        }                                                                                       \
        STORE(T, out + i * sizeof(T), res);                                                     \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
                                                                                                \
  /* ch_unpool: src = {data_src, data_pooled, grad_pooled}; p = {red, C, pC, H, nsize,          \
   * stride, pad}: mshadow's window formula, its end clipped by the pooled channel count */     \
  static void ms_g_sp_ch_unpool_##TC(char **args, npy_intp const *dims, npy_intp const *steps,  \
                                   void *data) {                                                \
    const ms_gather *g = (const ms_gather *)args[0];                                            \
    char *out = args[1];                                                                        \
    const int r = (int)g->p[0];                                                                 \
    const npy_intp C = g->p[1], pC = g->p[2], H = g->p[3], ns = g->p[4];                        \
    const npy_intp st = g->p[5], pd = g->p[6];                                                  \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                      \
    const npy_intp h = y % H, c = (y / H) % C, img = (y / H) / C;                               \
    const npy_intp cs = c < ns - pd ? 0 : (c - (ns - pd) + st) / st;                            \
    const npy_intp ce = ms_sp_min((c + pd + st) / st, pC);                                      \
    const char *srow = g->src[0] + y * g->rowstep[0];                                           \
    npy_intp i, k;                                                                              \
    (void)steps; (void)data;                                                                    \
    for (i = 0; i < n; ++i) {                                                                   \
      const npy_intp x = x0 + i;                                                                \
      const V vsrc = ms_sp_ld_##TC(srow + x * sizeof(T));                                       \
      A acc = 0;                                                                                \
      for (k = cs; k < ce; ++k) {                                                               \
        const npy_intp prow = (img * pC + k) * H + h;                                           \
        const A pg = (r == MS_SP_SUM ||                                                         \
                      vsrc == ms_sp_ld_##TC(g->src[1] + prow * g->rowstep[1] + x * sizeof(T)))  \
                         ? 1 : 0;                                                               \
        acc += pg * (A)ms_sp_ld_##TC(g->src[2] + prow * g->rowstep[2] + x * sizeof(T));         \
      }                                                                                         \
      STORE(T, out + i * sizeof(T), acc);                                                       \
    }                                                                                           \
  }                                                                                             \
                                                                                                \
  /* pack_col2patch: out(n, c, h, w) = sum of the column entries unpack_patch2col reads from    \
   * (h, w); p = {C, H, ky, kx, sy, sx, dy, dx, oh, ow}. Windows in mshadow's order (oy, ox     \
   * ascending), each tap found exactly (mshadow's dilated loop skips taps when stride > 1). */ \
  static void ms_g_sp_col2im_##TC(char **args, npy_intp const *dims, npy_intp const *steps,     \
                                void *data) {                                                   \
    const ms_gather *g = (const ms_gather *)args[0];                                            \
    char *out = args[1];                                                                        \
    const npy_intp C = g->p[0], H = g->p[1], ky = g->p[2], kx = g->p[3];                        \
    const npy_intp sy = g->p[4], sx = g->p[5], dy = g->p[6], dx = g->p[7];                      \
    const npy_intp oh = g->p[8], ow = g->p[9], rs = g->rowstep[0];                              \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                      \
    const npy_intp h = y % H, c = (y / H) % C, img = (y / H) / C;                               \
    npy_intp i, a, b;                                                                           \
    (void)steps; (void)data;                                                                    \
    for (i = 0; i < n; ++i) {                                                                   \
      const npy_intp w = x0 + i;                                                                \
      A acc = 0;                                                                                \
      for (a = ky - 1; a >= 0; --a) {                                                           \
        const npy_intp ty = h - a * dy;                                                         \
        if (ty < 0 || ty % sy != 0 || ty / sy >= oh) continue;                                  \
        for (b = kx - 1; b >= 0; --b) {                                                         \
          const npy_intp tx = w - b * dx;                                                       \
          if (tx < 0 || tx % sx != 0 || tx / sx >= ow) continue;                                \
          acc += (A)ms_sp_ld_##TC(g->src[0] + ((c * ky + a) * kx + b) * rs +                    \
                                  ((img * oh + ty / sy) * ow + tx / sx) * sizeof(T));           \
        }                                                                                       \
      }                                                                                         \
      STORE(T, out + i * sizeof(T), acc);                                                       \
    }                                                                                           \
  }

#define MS_SP_LOAD_SAME(t) (t)
#define MS_SP_STORE_CAST(T, out, v) do { T t_ = (T)(v); memcpy((out), &t_, sizeof(T)); } while (0)
#define MS_SP_STORE_HALF(T, out, v)                                                             \
  do { uint16_t t_ = ms_float_to_half((float)(v)); memcpy((out), &t_, 2); } while (0)

MS_SP_TYPED(float, f32, float, float, MS_SP_LOAD_SAME, MS_SP_STORE_CAST, -INFINITY, INFINITY)
MS_SP_TYPED(double, f64, double, double, MS_SP_LOAD_SAME, MS_SP_STORE_CAST, -INFINITY, INFINITY)
MS_SP_TYPED(uint16_t, f16, float, float, ms_half_to_float, MS_SP_STORE_HALF, -INFINITY, INFINITY)
MS_SP_TYPED(uint8_t, u8, uint8_t, uint64_t, MS_SP_LOAD_SAME, MS_SP_STORE_CAST, 0, UINT8_MAX)
MS_SP_TYPED(int8_t, i8, int8_t, uint64_t, MS_SP_LOAD_SAME, MS_SP_STORE_CAST, INT8_MIN, INT8_MAX)
MS_SP_TYPED(int32_t, i32, int32_t, uint64_t, MS_SP_LOAD_SAME, MS_SP_STORE_CAST, INT32_MIN, INT32_MAX)
MS_SP_TYPED(int64_t, i64, int64_t, uint64_t, MS_SP_LOAD_SAME, MS_SP_STORE_CAST, INT64_MIN, INT64_MAX)

static const ms_kernel_entry ms_gather_spatial_table[] = {
  {"g_sp_im2col", ms_g_sp_im2col},
#define MS_SP_ENTRIES(TC)                                                                       \
  {"g_sp_pool_" #TC, ms_g_sp_pool_##TC}, {"g_sp_unpool_" #TC, ms_g_sp_unpool_##TC},             \
  {"g_sp_chpool_" #TC, ms_g_sp_chpool_##TC}, {"g_sp_ch_unpool_" #TC, ms_g_sp_ch_unpool_##TC},   \
  {"g_sp_col2im_" #TC, ms_g_sp_col2im_##TC}
  MS_SP_ENTRIES(f32), MS_SP_ENTRIES(f64), MS_SP_ENTRIES(f16), MS_SP_ENTRIES(u8),
  MS_SP_ENTRIES(i8), MS_SP_ENTRIES(i32), MS_SP_ENTRIES(i64),
#undef MS_SP_ENTRIES
  {NULL, NULL}
};

#endif  /* MSHADOW_GATHER_SPATIAL_H_ */
