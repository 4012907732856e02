/* Packets: the SIMD vocabulary of the CPU kernels (mshadow's packet-inl.h, widened).
 *
 * Design: one header per ISA (packet/sse2.h, avx2.h, avx512.h; neon.h on arm64) defines the SAME set of
 * functions, named ms_<isa>_<op>_<t> (load, loadu, store, storeu, set1, zero, add, sub,
 * mul, div, max, min, sqrt, neg, abs, sum); kernels are written once against P(op) and
 * compiled per ISA under a target pragma, then chosen at import (ms_select_isa).
 * The ISA headers cannot be included alone.  Results are bit-identical to the plain path:
 * only IEEE add/sub/mul/div/sqrt/min/max are used and FMA contraction is disabled.
 */
#ifndef MSHADOW_PACKET_H_
#define MSHADOW_PACKET_H_

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define MS_X86 1
#else
#define MS_X86 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define MS_ARM64 1
#else
#define MS_ARM64 0
#endif
#define MS_SIMD (MS_X86 || MS_ARM64)   /* an architecture with packet levels above plain */

/* ISA levels, in order, and their names (simd_info): an architecture's own ladder. */
#define MS_ISA_PLAIN 0
#if MS_X86
#define MS_ISA_SSE2 1
#define MS_ISA_AVX2 2
#define MS_ISA_AVX512 3
static const char *const ms_isa_names[] = {"plain", "sse2", "avx2", "avx512", NULL};
#elif MS_ARM64
#define MS_ISA_NEON 1
static const char *const ms_isa_names[] = {"plain", "neon", NULL};
#else
static const char *const ms_isa_names[] = {"plain", NULL};
#endif

#define MS_PACKET_INSIDE 1
#include "packet/scalar.h"
#if MS_X86
#include "packet/sse2.h"
#if defined(__GNUC__) || defined(__clang__)
#define MS_HAVE_AVX 1
#include "packet/avx2.h"
#include "packet/avx512.h"
#else
#define MS_HAVE_AVX 0
#endif
#elif MS_ARM64
#define MS_HAVE_AVX 0
#include "packet/neon.h"
#else
#define MS_HAVE_AVX 0
#endif
#undef MS_PACKET_INSIDE

/* Ask for the cache line at p ahead of its use: the streaming kernels read far enough
 * ahead that the hardware prefetcher alone leaves a sum of squares memory-latency bound. */
#if MS_X86
#define ms_prefetch(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#elif defined(__GNUC__) || defined(__clang__)
#define ms_prefetch(p) __builtin_prefetch((const void *)(p), 0, 3)
#else
#define ms_prefetch(p) ((void)(p))
#endif
#define MS_PREFETCH_AHEAD 4096   /* bytes */
/* A summing chain (a reduction's pass) reads farther on: 16 KiB ahead, sumall_except_dim(x, 1)
 * of (32, 64, 56, 56) float32 took 1.2-1.3x numpy's einsum at 4 KiB, 1.0-1.06x at 16; an
 * element-wise chain lost 15-25% at 1e6 float32 with 8 or 16 KiB (bench_elementwise E1, E2). */
#define MS_PREFETCH_AHEAD_SUM 16384

/* The best ISA this CPU runs (PacketArch detection). */
static inline int ms_detect_isa(void) {
#if MS_X86 && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return MS_ISA_AVX512;
  /* the AVX2 level is x86-64-v3's AVX2 + FMA: vmath's bodies use fused multiply-adds */
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return MS_ISA_AVX2;
  return MS_ISA_SSE2;
#elif MS_X86
  return MS_ISA_SSE2;
#elif MS_ARM64
  return MS_ISA_NEON;   /* every AArch64 CPU has it */
#else
  return MS_ISA_PLAIN;
#endif
}

#endif  /* MSHADOW_PACKET_H_ */
