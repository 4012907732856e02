/* The CPU MapPlan executor: runs a flat program over the 2-D view of the destination.
 *
 * Design: the destination (rows x cols, pitched) is cut into blocks of at most `block`
 * elements of one row, or, when rows are narrow (ms_rows_per_block), of several whole rows;
 * OpenMP threads take blocks; for each block every instruction calls
 * a kernel with numpy's inner-loop signature on (pointer, step) operands: a register (the
 * thread's small scratch, stays in L1), a leaf tensor read in place at (y, x0) with its own
 * row and column steps (a transposed leaf simply has swapped steps), or a scalar (step 0).
 * The last instruction writes straight into the destination. No Python, no GIL, no
 * allocation proportional to the tensor: registers are nreg x block elements per thread.
 */
#ifndef MSHADOW_PLAN_EXEC_H_
#define MSHADOW_PLAN_EXEC_H_
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <time.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>   /* sysconf */
#endif
#include "mshadow/alloc.h"
#include "mshadow/transpose.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { MS_OPD_REG = 0, MS_OPD_LEAF = 1, MS_OPD_SCALAR = 2 };
#define MS_VIEW_MAXDIM 7   /* leading axes a strided view can map (tensors have up to 8) */

typedef struct {
  ms_loop_fn fn;
  void *data;
  int nin;
  int gemm;           /* implicit_dot: operand 0 is read along row y, operand 1 down columns */
  int gather;         /* a gather kernel: args[0] is its leaf's ms_gather, dims = {n, y, x0} */
  int rows;           /* an accumulating fold (acc_<block>_<code>): operand 1's dims[3] rows,
                         dims[4] bytes apart, fold into the one accumulator row */
  int kind[MS_CHAIN_MAX + 2];   /* operands 0..nin-1, then the output at index nin */
  int idx[MS_CHAIN_MAX + 2];
  npy_intp step[MS_CHAIN_MAX + 2]; /* bytes between elements for registers and scalars (0) */
} ms_inst;

typedef struct {
  char *ptr;
  npy_intp rowstep, colstep;   /* bytes; leaf 0 is the destination */
  npy_intp inner;              /* columns in read orientation (the K of an implicit_dot lhs) */
  int nmap;                    /* 0: row y starts at ptr + y * rowstep. Else a strided view:
                                  row y starts at ptr + sum_k ((y / mdiv[k]) % mmod[k]) * mstride[k]
                                  (the index of each leading axis times its byte stride) */
  npy_intp mdiv[MS_VIEW_MAXDIM], mmod[MS_VIEW_MAXDIM], mstride[MS_VIEW_MAXDIM];
  const ms_gather *gather;     /* a gather leaf's sources and parameters (mshadow/gather.h) */
  npy_intp tsize;              /* > 0: a tensor read transposed (rowstep == tsize, its element
                                  size), copied a tile at a time in a tiled run (ms_run_tile) */
  int per_block;               /* 1: one element per block: block (y, x0) addresses
                                  ptr + y * rowstep + (x0 / block) * colstep (reductions);
                                  2: one row per group of rows (accumulations): block (y, x0)
                                  of group g addresses ptr + g * rowstep + x0 * colstep */
} ms_leaf;

typedef struct {
  int ninst;
  const ms_inst *inst;
  const ms_leaf *leaf;
  char *scalars;        /* slot k at scalars + 16 * k */
  int nreg;
  npy_intp reg_bytes;
  npy_intp rows, cols, block;
  int nthreads;
  /* Grouped runs (gB > 0; column reductions): rows are (A, B, M) with B the reduced axis;
   * group g = (a * M + m) * nch + k, nch = ceil(B / gR), holds rows b in [k gR, (k+1) gR)
   * of (a, m), in order. One thread runs a whole group, so a per_block = 2 leaf (the
   * group's accumulator row) is never written by two threads. gN: the group's rows one
   * call folds where the program can (ms_group_rows). */
  npy_intp gB, gM, gR, gN;
  npy_intp tile;        /* > 1: a tiled run (ms_run_tile), tiles of `tile` rows x block */
  int nleaf;            /* leaves 1..nleaf (0 is the destination) */
  npy_intp y0;          /* the first row: a run over rows [y0, y0 + rows) (a band) */
  npy_intp x0;          /* the first column: blocks cover columns [x0, cols) (a column band) */
} ms_program;

/* Whether ms_run_block can take several rows a call: every leaf plain (a row at ptr + y *
 * rowstep: no map, no group accumulator), no implicit_dot, and gathers only where
 * `gathers` (whole rows from column 0). */
static inline int ms_rows_together(const ms_program *p, int gathers) {
  int k, j;
  for (k = 0; k < p->ninst; ++k) {
    const ms_inst *in = &p->inst[k];
    if (in->gemm || (in->gather && !gathers)) return 0;
    for (j = 0; j <= in->nin; ++j)
      if (in->kind[j] == MS_OPD_LEAF && (p->leaf[in->idx[j]].per_block > 1 ||
                                         p->leaf[in->idx[j]].nmap))
        return 0;
  }
  return 1;
}

/* Rows a block holds: several when rows are narrow (a call per row of every kernel cost
 * more than the row's elements: concat of 28-wide rows, pool of small maps), 1 otherwise.
 * Only plain leaves (a row at ptr + y * rowstep) and no implicit_dot, column band or group:
 * each instruction then runs the block's rows in one call (a gather takes them as dims[3]
 * rows, dims[4] bytes apart; another kernel, when its leaves' rows follow one another
 * with no gap) or a call a row. A reduction's partial results (per_block 1: one a block,
 * and here a row is one block) take a call a row, each row reduced alone as it was (rows
 * of 49 float32 a block each: sumall_except_dim of (32, 512, 7, 7) took 6x einsum's time). */
static inline npy_intp ms_rows_per_block(const ms_program *p) {
  if (p->gB > 0 || p->x0 != 0 || p->cols <= 0 || 2 * p->cols > p->block ||
      !ms_rows_together(p, 1))
    return 1;
  return p->block / p->cols;
}

/* Rows of a group a call takes in a grouped run: the caller's gN (extension/reduce.py
 * chooses it, the one rule) where the program can take several (ms_rows_per_block's rule
 * for groups): a group's rows follow one another (gM == 1), whole rows a block, no leaf
 * mapped, per block or an implicit_dot's, and the accumulator row read only by the fold
 * (ms_inst.rows), which folds all of them into it in row order; else 1. */
static inline npy_intp ms_group_rows(const ms_program *p) {
  int k, j;
  if (p->gB <= 0 || p->gN <= 1 || p->gM != 1 || p->x0 != 0 || p->cols <= 0 ||
      p->gN * p->cols > p->block)
    return 1;
  for (k = 0; k < p->ninst; ++k) {
    const ms_inst *in = &p->inst[k];
    if (in->gemm) return 1;
    for (j = 0; j <= in->nin; ++j) {
      const ms_leaf *L;
      if (in->kind[j] != MS_OPD_LEAF) continue;
      L = &p->leaf[in->idx[j]];
      if (L->nmap || L->per_block == 1 || (L->per_block == 2 && !in->rows)) return 1;
    }
  }
  return p->gN;
}

/* Evaluate the block of row y from column x0 with scratch `regs`; g is y's group; nr > 1:
 * rows [y, y + nr) whole (x0 = 0, ms_rows_per_block or ms_group_rows). */
static inline void ms_run_block(const ms_program *p, char *regs, npy_intp y, npy_intp x0,
                                npy_intp g, npy_intp nr) {
  npy_intp n = p->cols - x0;
  int k, j;
  if (n > p->block) n = p->block;
  for (k = 0; k < p->ninst; ++k) {
    const ms_inst *in = &p->inst[k];
    char *args[MS_CHAIN_MAX + 2];
    npy_intp steps[MS_CHAIN_MAX + 2];
    npy_intp dims[5] = {n, 0, 0, 1, 0};
    int gap = 0;     /* a leaf operand's rows not back to back: a call a row */
    for (j = 0; j <= in->nin; ++j) {
      const int id = in->idx[j];
      switch (in->kind[j]) {
        case MS_OPD_REG:
          args[j] = regs + id * p->reg_bytes;
          steps[j] = in->step[j];
          break;
        case MS_OPD_LEAF: {
          const ms_leaf *L = &p->leaf[id];
          if (L->per_block == 2) {
            args[j] = L->ptr + g * L->rowstep + x0 * L->colstep;
          } else if (L->per_block) {
            args[j] = L->ptr + y * L->rowstep + (x0 / p->block) * L->colstep;
          } else if (L->nmap) {
            npy_intp off = 0;
            int m;
            for (m = 0; m < L->nmap; ++m) off += ((y / L->mdiv[m]) % L->mmod[m]) * L->mstride[m];
            args[j] = L->ptr + off + x0 * L->colstep;
          } else {
            args[j] = L->ptr + y * L->rowstep + x0 * L->colstep;
          }
          steps[j] = L->colstep;
          if (L->per_block || L->rowstep != n * L->colstep) gap = 1;   /* (a partial a row) */
          break;
        }
        default:
          args[j] = p->scalars + 16 * id;
          steps[j] = 0;
      }
    }
    if (in->rows) {   /* the value's nr rows, each n wide, into the accumulator row */
      dims[3] = nr;
      dims[4] = in->kind[1] == MS_OPD_LEAF ? p->leaf[in->idx[1]].rowstep : n * steps[1];
      in->fn(args, dims, steps, in->data);
      continue;
    }
    if (in->gather) {
      args[0] = (char *)p->leaf[in->idx[0]].gather;
      dims[1] = y;
      dims[2] = x0;
      dims[3] = nr;     /* its output (operand 1): a register's rows are back to back */
      dims[4] = in->kind[1] == MS_OPD_LEAF ? p->leaf[in->idx[1]].rowstep : n * steps[1];
      in->fn(args, dims, steps, in->data);
      continue;
    }
    if (in->gemm) {   /* out[x] = sum_k lhs(y, k) * rhs(k, x0 + x) */
      const ms_leaf *A = &p->leaf[in->idx[0]], *B = &p->leaf[in->idx[1]];
      args[0] = A->ptr + y * A->rowstep;
      steps[0] = A->colstep;
      args[1] = B->ptr + x0 * B->colstep;
      steps[1] = B->colstep;
      steps[3] = B->rowstep;
      dims[1] = A->inner;
    }
    if (nr == 1 || !gap) {
      dims[0] = n * nr;
      in->fn(args, dims, steps, in->data);
    } else {
      npy_intp r;
      for (r = 0; r < nr; ++r) {   /* then each operand on to its next row */
        in->fn(args, dims, steps, in->data);
        for (j = 0; j <= in->nin; ++j)
          args[j] += in->kind[j] == MS_OPD_LEAF ? p->leaf[in->idx[j]].rowstep
                     : in->kind[j] == MS_OPD_REG ? n * steps[j] : 0;
      }
    }
  }
}

#define MS_STACK_REGS 8   /* registers a single-threaded run keeps on the stack */
/* A thread's registers. The chain kernels prefetch only operands in memory (ms_chain.fetch),
 * never registers, so nothing is read past their end. */
#define MS_REGS_BYTES(p) ((size_t)((p)->nreg * (p)->reg_bytes))

/* What one run reports, OR-ed over its threads (the kernels' flags are thread-local). */
enum { MS_RUN_NOMEM = 1, MS_RUN_IDIV0 = 2, MS_RUN_GATHER_OOB = 4 };

static inline void ms_clear_thread_flags(void) {
  ms_fpe_flags = 0;
  ms_gather_error = 0;
}

static inline int ms_thread_flags(void) {
  return ((ms_fpe_flags & 1) ? MS_RUN_IDIV0 : 0) | (ms_gather_error ? MS_RUN_GATHER_OOB : 0);
}

/* Run work item i: block i (row i / nbx, columns from (i % nbx) * block), or, in a grouped
 * run, every block of group i, row by row (gr > 1: gr rows a call, ms_group_rows). */
static inline void ms_run_item(const ms_program *p, char *regs, npy_intp i, npy_intp nbx,
                               npy_intp rpb, npy_intp gr) {
  npy_intp xb;
  if (rpb > 1) {            /* rows [i * rpb, +rpb) whole */
    const npy_intp y = i * rpb, left = p->rows - y;
    ms_run_block(p, regs, p->y0 + y, 0, 0, left < rpb ? left : rpb);
    return;
  }
  if (p->gB <= 0) {
    ms_run_block(p, regs, p->y0 + i / nbx, p->x0 + (i % nbx) * p->block, 0, 1);
    return;
  }
  const npy_intp nch = (p->gB + p->gR - 1) / p->gR;
  const npy_intp k = i % nch, am = i / nch, a = am / p->gM, m = am % p->gM;
  npy_intp b = k * p->gR, bend = b + p->gR;
  if (bend > p->gB) bend = p->gB;
  if (gr > 1) {   /* whole rows (nbx == 1), consecutive (gM == 1) */
    for (; b < bend; b += gr)
      ms_run_block(p, regs, a * p->gB + b, 0, i, bend - b < gr ? bend - b : gr);
    return;
  }
  for (; b < bend; ++b) {
    const npy_intp y = (a * p->gB + b) * p->gM + m;
    for (xb = 0; xb < nbx; ++xb) ms_run_block(p, regs, y, p->x0 + xb * p->block, i, 1);
  }
}

/* Element (y + r, x0 + c) of the transposed leaf L to out[r * n + c], r < h, c < n: the h
 * elements of each source row lie side by side (one cache line, read once). */
static inline void ms_pack_tile(char *out, const ms_leaf *L, npy_intp y, npy_intp h,
                                npy_intp x0, npy_intp n) {
  const npy_intp ts = L->tsize, os = n * ts;
  npy_intp c = 0, r;
#if MS_HAVE_TRANSPOSE_AVX2
  /* 8 x 8 (float32) or 4 x 4 (float64) blocks in AVX registers at the AVX2 level and
   * above (ms_isa_level, kernels_gen.h's, included before this header): A[:] = B + C.T of
   * 2048^2 float32 took 0.81x a 32 x 32-tiled C loop's time with the SSE2 pack below,
   * 0.65x with this one. The source at its elements' alignment, which the scalar edges
   * of the transpose need. */
  if (ms_isa_level >= MS_ISA_AVX2 && h >= 8 && (ts == 4 || ts == 8) && L->colstep % ts == 0 &&
      ((uintptr_t)L->ptr % (uintptr_t)ts) == 0) {
    const char *s0 = L->ptr + y * ts + x0 * L->colstep;
    if (ts == 4)
      ms_transpose_avx2_f32((const float *)s0, L->colstep / 4, (float *)out, n, n, h);
    else
      ms_transpose_avx2_f64((const double *)s0, L->colstep / 8, (double *)out, n, n, h);
    return;
  }
#endif
#if defined(__SSE2__)
  /* 4 x 4 (float32) or 2 x 2 (float64) blocks transposed in registers, the edges below;
   * the same values moved, so the same bits (the element loop ran 1.3 cycles a value) */
  if (ts == (npy_intp)sizeof(float) && h >= 4) {
    const npy_intp h4 = h & ~(npy_intp)3;
    for (; c + 4 <= n; c += 4) {
      const char *s0 = L->ptr + y * 4 + (x0 + c) * L->colstep;
      int u;
      for (r = h4; r < h; ++r)   /* the last rows of a band of h not a multiple of 4 */
        for (u = 0; u < 4; ++u) memcpy(out + r * os + (c + u) * 4, s0 + u * L->colstep + r * 4, 4);
      for (r = 0; r < h4; r += 4) {
        __m128 a0 = _mm_loadu_ps((const float *)(s0 + r * 4));
        __m128 a1 = _mm_loadu_ps((const float *)(s0 + L->colstep + r * 4));
        __m128 a2 = _mm_loadu_ps((const float *)(s0 + 2 * L->colstep + r * 4));
        __m128 a3 = _mm_loadu_ps((const float *)(s0 + 3 * L->colstep + r * 4));
        _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
        _mm_storeu_ps((float *)(out + r * os + c * 4), a0);
        _mm_storeu_ps((float *)(out + (r + 1) * os + c * 4), a1);
        _mm_storeu_ps((float *)(out + (r + 2) * os + c * 4), a2);
        _mm_storeu_ps((float *)(out + (r + 3) * os + c * 4), a3);
      }
    }
  } else if (ts == (npy_intp)sizeof(double) && h >= 2) {
    const npy_intp h2 = h & ~(npy_intp)1;
    for (; c + 2 <= n; c += 2) {
      const char *s0 = L->ptr + y * 8 + (x0 + c) * L->colstep;
      if (h2 < h) {              /* an odd band's last row */
        memcpy(out + h2 * os + c * 8, s0 + h2 * 8, 8);
        memcpy(out + h2 * os + (c + 1) * 8, s0 + L->colstep + h2 * 8, 8);
      }
      for (r = 0; r < h2; r += 2) {
        const __m128d a0 = _mm_loadu_pd((const double *)(s0 + r * 8));
        const __m128d a1 = _mm_loadu_pd((const double *)(s0 + L->colstep + r * 8));
        _mm_storeu_pd((double *)(out + r * os + c * 8), _mm_unpacklo_pd(a0, a1));
        _mm_storeu_pd((double *)(out + (r + 1) * os + c * 8), _mm_unpackhi_pd(a0, a1));
      }
    }
  }
#endif
  for (; c < n; ++c) {
    const char *src = L->ptr + y * ts + (x0 + c) * L->colstep;
    char *o = out + c * ts;
    /* (constant sizes: each copy one move) */
    if (ts == (npy_intp)sizeof(double))
      for (r = 0; r < h; ++r) memcpy(o + r * os, src + r * sizeof(double), sizeof(double));
    else if (ts == (npy_intp)sizeof(float))
      for (r = 0; r < h; ++r) memcpy(o + r * os, src + r * sizeof(float), sizeof(float));
    else if (ts == (npy_intp)sizeof(npy_uint16))
      for (r = 0; r < h; ++r) memcpy(o + r * os, src + r * sizeof(npy_uint16), sizeof(npy_uint16));
    else
      for (r = 0; r < h; ++r) memcpy(o + r * os, src + r * ts, (size_t)ts);
  }
}

/* A tiled run's scratch, each part aligned (alloc.h ms_upper_align): the thread's copy of
 * the leaves, then a tile (at most `tile` rows of at most a block's columns) per
 * transposed leaf; ms_tile_bytes in all. */

static inline size_t ms_tile_leaves_bytes(const ms_program *p) {
  return ms_upper_align((size_t)(p->nleaf + 1) * sizeof(ms_leaf));
}

static inline size_t ms_tile_copy_bytes(const ms_program *p, const ms_leaf *L) {
  const npy_intp cols = p->cols - p->x0 < p->block ? p->cols - p->x0 : p->block;
  return ms_upper_align((size_t)(p->tile * cols * L->tsize));
}

static inline size_t ms_tile_bytes(const ms_program *p) {
  size_t b = ms_tile_leaves_bytes(p);
  int k;
  for (k = 1; k <= p->nleaf; ++k)
    if (p->leaf[k].tsize > 0) b += ms_tile_copy_bytes(p, &p->leaf[k]);
  return b;
}

/* Rows of a tile (n columns from x0, h rows) one ms_run_block call takes: each instruction
 * then runs them a call a row with the operands moved on a row, its setup once (A[:] = B +
 * C.T at 1000^2 float32: 558-597 -> 554-566 us). ms_rows_together's programs, no gather (a
 * tile starts mid-row), and the rows' values within the registers (reg_bytes of 8-byte
 * elements at most). A tiled run has no group and no partials (_stages.pxi). */
static inline npy_intp ms_tile_rows(const ms_program *p, npy_intp n, npy_intp h) {
  npy_intp g = h;
  if (n <= 0 || !ms_rows_together(p, 0)) return 1;
  if (p->nreg && g > p->reg_bytes / 8 / n) g = p->reg_bytes / 8 / n;
  return g > 1 ? g : 1;
}

/* Tile i of a tiled run: rows [yb, yb + h) of band i / nbx (p->tile rows, the last fewer),
 * columns of block i % nbx. Each transposed leaf's elements of the tile are copied into
 * the thread's scratch first; the tile's rows then run reading the copies in row order.
 * A transposed leaf read in place took a cache line a element: rows of 4 KiB (1024^2
 * float32 a.T + b) all fall in a few cache sets, and every read missed. `mem`:
 * ms_tile_bytes of the thread's own. */
static inline void ms_run_tile(const ms_program *p, char *regs, char *mem, npy_intp i,
                               npy_intp nbx) {
  const npy_intp yb = p->y0 + (i / nbx) * p->tile, x0 = p->x0 + (i % nbx) * p->block;
  const npy_intp left = p->y0 + p->rows - yb, h = left < p->tile ? left : p->tile;
  ms_leaf *lv = (ms_leaf *)mem;
  char *scratch = mem + ms_tile_leaves_bytes(p);
  ms_program q = *p;
  npy_intp n = p->cols - x0, r;
  int k;
  if (n > p->block) n = p->block;
  memcpy(lv, p->leaf, (size_t)(p->nleaf + 1) * sizeof(ms_leaf));
  q.leaf = lv;
  for (k = 1; k <= p->nleaf; ++k) {
    const ms_leaf *L = &p->leaf[k];
    if (L->tsize <= 0) continue;
    ms_pack_tile(scratch, L, yb, h, x0, n);
    /* element (yb + r, x0 + c) at scratch + r * n * ts + c * ts */
    lv[k].rowstep = n * L->tsize;
    lv[k].colstep = L->tsize;
    lv[k].ptr = scratch - yb * lv[k].rowstep - x0 * L->tsize;
    lv[k].tsize = 0;
    scratch += ms_tile_copy_bytes(p, L);
  }
  /* narrow rows several a call where the program can (ms_rows_per_block: the copies are
   * dense rows), else the tile's rows a call where ms_tile_rows allows, each call within a
   * block's registers */
  npy_intp g = ms_rows_per_block(&q);
  if (g == 1) g = ms_tile_rows(&q, n, h);
  for (r = 0; r < h; r += g) ms_run_block(&q, regs, yb + r, x0, 0, h - r < g ? h - r : g);
}

/* Returns the MS_RUN_* flags of this run (0: done, nothing to report). */
static int ms_run_program(const ms_program *p) {
  const npy_intp nbx = (p->cols - p->x0 + p->block - 1) / p->block;
  /* one row in one block (a small statement) is one item: no walk to choose how to cut */
  const int one = p->rows == 1 && nbx == 1 && p->gB <= 0;
  const int tiled = !one && p->tile > 1 && p->gB <= 0;   /* (narrow rows: in its tiles) */
  const npy_intp rpb = one || tiled ? 1 : ms_rows_per_block(p), gr = one ? 1 : ms_group_rows(p);
  const npy_intp total = p->gB > 0
      ? (p->rows / (p->gB * p->gM)) * p->gM * ((p->gB + p->gR - 1) / p->gR)
      : tiled ? (p->rows + p->tile - 1) / p->tile * nbx
      : rpb > 1 ? (p->rows + rpb - 1) / rpb : p->rows * nbx;
  int failed = 0;
  npy_intp b;
  if (total <= 0) return 0;
  if (p->nthreads <= 1 || total == 1) {
    /* the small-tensor path: no thread team, no allocation */
    char stack_regs[MS_STACK_REGS * 4096] __attribute__((aligned(64)));
    char *regs = stack_regs;
    if (MS_REGS_BYTES(p) > sizeof(stack_regs)) {
      regs = (char *)ms_aligned_malloc(MS_REGS_BYTES(p));
      if (regs == NULL) return MS_RUN_NOMEM;
    }
    char *tmem = tiled ? (char *)ms_aligned_malloc(ms_tile_bytes(p)) : NULL;
    if (tiled && tmem == NULL) {
      if (regs != stack_regs) ms_aligned_free(regs);
      return MS_RUN_NOMEM;
    }
    ms_clear_thread_flags();
    for (b = 0; b < total; ++b) {
      if (tiled) ms_run_tile(p, regs, tmem, b, nbx);
      else ms_run_item(p, regs, b, nbx, rpb, gr);
    }
    if (tmem) ms_aligned_free(tmem);
    if (regs != stack_regs) ms_aligned_free(regs);
    return ms_thread_flags();
  }
#ifdef _OPENMP
  int nt = p->nthreads;
  if (nt > total) nt = (int)total;
  #pragma omp parallel num_threads(nt) reduction(|: failed)
#endif
  {
    char *regs = p->nreg ? (char *)ms_aligned_malloc(MS_REGS_BYTES(p)) : NULL;
    char *tmem = tiled ? (char *)ms_aligned_malloc(ms_tile_bytes(p)) : NULL;
    const int lost = (p->nreg && regs == NULL) || (tiled && tmem == NULL);
    if (lost) failed |= MS_RUN_NOMEM;
    ms_clear_thread_flags();
#ifdef _OPENMP
    /* nowait: what follows is each thread's own, and under OMP_WAIT_POLICY=PASSIVE every
     * barrier a thread waits at sleeps and is woken through the kernel (E1 of 1e6 float32
     * on 2 threads paid 1.13-1.16x an omp parallel for's time for the second barrier) */
    #pragma omp for schedule(static) nowait
#endif
    for (b = 0; b < total; ++b) {
      if (lost) continue;
      if (tiled) ms_run_tile(p, regs, tmem, b, nbx);
      else ms_run_item(p, regs, b, nbx, rpb, gr);
    }
    if (tmem) ms_aligned_free(tmem);
    if (regs) ms_aligned_free(regs);
    failed |= ms_thread_flags();
  }
  return failed;
}

/* Each of `rows` rows of n elements (row k at a + k * ra, elements sa apart) reduced alone
 * by a reducer's block kernel (reduce_<block>_<code>, ms_inst's fn) into out + k * so: the
 * last axis of a chunk or a tensor whose rows are too short for a block a row (a kernel
 * call a row of 49 elements cost 4x the fold). Rows shared among nt threads, in runs of
 * MS_REDUCE_ROWS_RUN; each row's bits are the same at any thread count. */
#define MS_REDUCE_ROWS_RUN 256
static void ms_reduce_rows(ms_loop_fn fn, const char *a, npy_intp rows, npy_intp n, npy_intp ra,
                           npy_intp sa, char *out, npy_intp so, int nt) {
  const npy_intp runs = (rows + MS_REDUCE_ROWS_RUN - 1) / MS_REDUCE_ROWS_RUN;
  npy_intp b;
  if (nt > runs) nt = (int)runs;
#ifdef _OPENMP
  #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (b = 0; b < runs; ++b) {
    const npy_intp k0 = b * MS_REDUCE_ROWS_RUN, left = rows - k0;
    npy_intp dims[5] = {n, 0, 0, left < MS_REDUCE_ROWS_RUN ? left : MS_REDUCE_ROWS_RUN, ra};
    npy_intp steps[2] = {sa, so};
    char *args[2] = {(char *)(a + k0 * ra), out + k0 * so};
    fn(args, dims, steps, NULL);
  }
}

static int ms_max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

static int ms_have_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
/* What waking a team of nt threads costs under the wait policy in force: the median, in
 * ns, of 7 empty parallel regions one after another (the team made first). A sleeping team
 * (OMP_WAIT_POLICY=PASSIVE) is woken through the kernel at each region; a spinning one is
 * not. 0 without OpenMP or for one thread. */
static long long ms_team_wake_ns(int nt) {
#ifdef _OPENMP
  enum { REPS = 7 };
  long long t[REPS], v;
  struct timespec a, b;
  int r, i;
  if (nt <= 1) return 0;
  #pragma omp parallel num_threads(nt)
  { (void)omp_get_thread_num(); }
  for (r = 0; r < REPS; ++r) {
    clock_gettime(CLOCK_MONOTONIC, &a);
    #pragma omp parallel num_threads(nt)
    { (void)omp_get_thread_num(); }
    clock_gettime(CLOCK_MONOTONIC, &b);
    t[r] = (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
  }
  for (r = 1; r < REPS; ++r)   /* insertion sort of 7 */
    for (i = r; i > 0 && t[i - 1] > t[i]; --i) { v = t[i]; t[i] = t[i - 1]; t[i - 1] = v; }
  return t[REPS / 2];
#else
  (void)nt;
  return 0;
#endif
}

/* The per-core cache a run's bytes must fit in to move at the in-cache rate: the L2's size
 * (glibc's sysconf), 1 MiB where the system does not say. */
static long long ms_cache_bytes(void) {
#ifdef _SC_LEVEL2_CACHE_SIZE
  const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (v > 0) return v;
#endif
  return 1LL << 20;
}

/* The bytes a ns one thread moves through E1 (w = a * (g + b * w), float32: 12 bytes an
 * element) over buffers past the cache (2 x 2 MiB at least, and 4 times the cache in
 * all): the best of 3 passes after one that touches the pages. Where the next level is
 * slow (an Intel Xeon VM's L3: 39-43 bytes a ns, against 94 in L2) a run from there is
 * worth threads at less than half the in-cache size; where it streams at 96 or more the
 * in-cache rule stands. 0 if the buffers cannot be had. */
static long long ms_stream_bytes_a_ns(void) {
  long long cache = ms_cache_bytes(), best = -1, dt;
  size_t half = (size_t)(cache * 2 > (2LL << 20) ? cache * 2 : (2LL << 20));
  const npy_intp n = (npy_intp)(half / sizeof(float));
  float *w = (float *)ms_aligned_malloc(half), *g = (float *)ms_aligned_malloc(half);
  volatile float sink;
  struct timespec a, b;
  npy_intp i;
  int r;
  if (!w || !g) { ms_aligned_free(w); ms_aligned_free(g); return 0; }
  for (i = 0; i < n; ++i) { w[i] = 1.0f; g[i] = 0.5f; }
  for (r = 0; r < 4; ++r) {
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (i = 0; i < n; ++i) w[i] = -0.5f * (g[i] + 0.25f * w[i]);
    clock_gettime(CLOCK_MONOTONIC, &b);
    dt = (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
    if (r > 0 && (best < 0 || dt < best)) best = dt;
  }
  sink = w[n / 2];   /* (the stores are read: not dead before the free) */
  (void)sink;
  ms_aligned_free(w);
  ms_aligned_free(g);
  return best > 0 ? (long long)(12 * (double)n / (double)best) : 0;
}
#endif  /* MSHADOW_PLAN_EXEC_H_ */
