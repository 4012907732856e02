/* take_grad (take_grad.h): the gradient of take, a scatter-add read as a gather.
 *
 * Design: out[k][x] = sum of src[i][x] over the rows i with index[i] == k, added in
 * increasing i (mshadow's TakeGradExp::Eval loop), so every output element is computed
 * where it is stored: no atomics, no zeroing pass, and it fuses with the assignment like
 * any gather. Each kernel call scans the whole index (O(len(index)) per block of a row, as
 * mshadow does per element). Sums accumulate in the storage type for float and double
 * (mshadow's DType arithmetic), in float for half (mshadow rounds to half after every
 * addition), and in uint64 for integers (wrapping: mshadow's result modulo the type's
 * width, with no signed overflow). The engine checks the index against [0, input_dim)
 * before anything is stored; an index outside it is never added (mshadow ignores it
 * silently) and sets ms_gather_error.
 *
 * Included by mshadow/gather.h after ms_gather is defined, and only from there: its
 * kernels join ms_gather_table through MS_GATHER_TAKE_GRAD_ENTRIES.
 */
#ifndef MSHADOW_GATHER_TAKE_GRAD_H_
#define MSHADOW_GATHER_TAKE_GRAD_H_
#ifndef MSHADOW_GATHER_H_
#error "include mshadow/gather.h, which includes mshadow/gather_take_grad.h"
#endif

#define MS_TG_CHUNK 256   /* accumulators on the stack: columns per pass over the index */

/* take_grad: src[0] = src (N rows), src[1] = index (length N); p = {N, K (= input_dim)};
 * output row y is gradient row k = y. */
#define MS_TAKE_GRAD_TYPED(T, TC, A, LOAD, STORE)                                             \
  static void ms_g_take_grad_##TC(char **args, npy_intp const *dims, npy_intp const *steps,   \
                                  void *data) {                                               \
    const ms_gather *g = (const ms_gather *)args[0];                                          \
    const npy_intp n = dims[0], y = dims[1], x0 = dims[2];                                    \
    const npy_intp N = g->p[0], K = g->p[1];                                                  \
    A acc[MS_TG_CHUNK];                                                                       \
    npy_intp c0, i, j;                                                                        \
    (void)steps; (void)data;                                                                  \
    for (c0 = 0; c0 < n; c0 += MS_TG_CHUNK) {                                                 \
      const npy_intp m = n - c0 < MS_TG_CHUNK ? n - c0 : MS_TG_CHUNK;                         \
      for (j = 0; j < m; ++j) acc[j] = 0;                                                     \
      for (i = 0; i < N; ++i) {                                                               \
        const npy_intp k = ms_read_index(g->src[1] + i * g->rowstep[1], g->code[1]);          \
        const char *row;                                                                      \
        if (k != y) {                                                                         \
          if (k < 0 || k >= K) ms_gather_error = 1;                                           \
          continue;                                                                           \
        }                                                                                     \
        row = g->src[0] + i * g->rowstep[0] + (x0 + c0) * (npy_intp)sizeof(T);                \
        for (j = 0; j < m; ++j) {                                                             \
          T t;                                                                                \
          memcpy(&t, row + j * sizeof(T), sizeof(T));                                         \
          acc[j] += (A)LOAD(t);                                                               \
        }                                                                                     \
      }                                                                                       \
      for (j = 0; j < m; ++j) STORE(T, args[1] + (c0 + j) * sizeof(T), acc[j]);               \
    }                                                                                         \
  }

#define MS_TG_SAME(t) (t)
#define MS_TG_STORE(T, out, v) do { T t_ = (T)(v); memcpy((out), &t_, sizeof(T)); } while (0)
#define MS_TG_STORE_HALF(T, out, v)                                                           \
  do { uint16_t t_ = ms_float_to_half((float)(v)); memcpy((out), &t_, 2); } while (0)

MS_TAKE_GRAD_TYPED(float, f32, float, MS_TG_SAME, MS_TG_STORE)
MS_TAKE_GRAD_TYPED(double, f64, double, MS_TG_SAME, MS_TG_STORE)
MS_TAKE_GRAD_TYPED(uint16_t, f16, float, ms_half_to_float, MS_TG_STORE_HALF)
MS_TAKE_GRAD_TYPED(uint8_t, u8, uint64_t, MS_TG_SAME, MS_TG_STORE)
MS_TAKE_GRAD_TYPED(int8_t, i8, uint64_t, MS_TG_SAME, MS_TG_STORE)
MS_TAKE_GRAD_TYPED(int32_t, i32, uint64_t, MS_TG_SAME, MS_TG_STORE)
MS_TAKE_GRAD_TYPED(int64_t, i64, uint64_t, MS_TG_SAME, MS_TG_STORE)

#define MS_GATHER_TAKE_GRAD_ENTRIES                                                           \
  {"g_take_grad_f32", ms_g_take_grad_f32}, {"g_take_grad_f64", ms_g_take_grad_f64},           \
  {"g_take_grad_f16", ms_g_take_grad_f16}, {"g_take_grad_u8", ms_g_take_grad_u8},             \
  {"g_take_grad_i8", ms_g_take_grad_i8}, {"g_take_grad_i32", ms_g_take_grad_i32},             \
  {"g_take_grad_i64", ms_g_take_grad_i64}

#endif  /* MSHADOW_GATHER_TAKE_GRAD_H_ */
