/* float16 <-> float32 conversion (mshadow's half_t storage; arithmetic is done in float).
 * Round-to-nearest-even, NaN and infinity kept, subnormals exact: the same results as
 * numpy's npy_float_to_half / npy_half_to_float. Portable C, no F16C needed. */
#ifndef MSHADOW_HALF_H_
#define MSHADOW_HALF_H_
#include <stdint.h>
#include <string.h>

static inline float ms_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {                       /* inf / nan */
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {                   /* normal */
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man != 0) {                   /* subnormal: normalise */
    exp = 113;
    while ((man & 0x400u) == 0) { man <<= 1; exp--; }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  } else {
    bits = sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t ms_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t fexp = x & 0x7f800000u, fman = x & 0x007fffffu;
  if (fexp >= 0x47800000u) {               /* overflow, inf or nan */
    if (fexp == 0x7f800000u && fman) {
      uint16_t m = (uint16_t)(fman >> 13);
      return (uint16_t)(sign | 0x7c00u | (m ? m : 1u));   /* keep it a nan */
    }
    return (uint16_t)(sign | 0x7c00u);
  }
  if (fexp <= 0x38000000u) {               /* subnormal half or zero */
    if (fexp < 0x33000000u) return sign;   /* underflow to signed zero */
    uint32_t e = fexp >> 23;
    fman |= 0x00800000u;
    uint32_t shift = 126u - e;             /* 14..24 */
    uint32_t m = fman >> shift;
    uint32_t rem = fman & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) m++;
    return (uint16_t)(sign | m);
  }
  uint32_t h = ((fexp - 0x38000000u) >> 13) | (fman >> 13);
  uint32_t rem = fman & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;   /* may carry into inf: correct */
  return (uint16_t)(sign | h);
}

/* double -> half rounded ONCE (through float it would round twice: 1 + 2^-11 + 2^-40 must
 * become 1.001, not 1.0). Same rules as numpy's npy_double_to_half. */
static inline uint16_t ms_double_to_half(double d) {
  uint64_t x;
  memcpy(&x, &d, 8);
  const uint16_t sign = (uint16_t)((x >> 48) & 0x8000u);
  const uint64_t dexp = (x >> 52) & 0x7ffu, dman = x & 0xfffffffffffffull;
  if (dexp == 0x7ffu) {                    /* inf / nan */
    if (dman) {
      uint16_t m = (uint16_t)(dman >> 42);
      return (uint16_t)(sign | 0x7c00u | (m ? m : 1u));
    }
    return (uint16_t)(sign | 0x7c00u);
  }
  const int e = (int)dexp - 1023;          /* |d| in [2^e, 2^(e+1)) */
  if (e >= 16) return (uint16_t)(sign | 0x7c00u);
  if (e < -25) return sign;                /* below half the smallest subnormal */
  const uint64_t m = dman | (1ull << 52);  /* d = m * 2^(e - 52) */
  const int shift = e >= -14 ? 42 : 28 - e;   /* to units of the half's last place */
  uint64_t q = m >> shift;
  const uint64_t rem = m & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) q++;
  /* normal: q holds the implicit bit, so a carry moves into the exponent (up to inf) */
  return (uint16_t)(sign | (e >= -14 ? (uint16_t)((uint32_t)(e + 14) << 10) + q : q));
}

#endif  /* MSHADOW_HALF_H_ */
