/* fp16.h - float16 and bfloat16 to and from float32, bit-exact: narrowing
 * rounds to nearest even (IEEE 754-2008 roundTiesToEven), values past the
 * largest finite one become infinity, NaN stays NaN (made quiet, sign and top
 * payload bits kept). One source for the reductions of reduce.h (host engine,
 * CUDA kernels, core/dtype.c) and for host C code elsewhere (the trainer's
 * mixed-precision casts, xcoll-perf's data fill and check), so that a value
 * converted anywhere in xcoll has the same bits. Header-only, C11 and CUDA;
 * it includes nothing from core/. */
#ifndef XCOLL_KERNELS_FP16_H
#define XCOLL_KERNELS_FP16_H

#include "device.h"

XC_INLINE XC_HD uint32_t xc_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

XC_INLINE XC_HD float xc_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* condition ? a : b with masks, not a branch: the compiler keeps both
 * computations unconditional, so loops over it vectorise (a ?: around a
 * float operation stays a branch under gcc's default -ftrapping-math). */
XC_INLINE XC_HD uint32_t xc_select(int condition, uint32_t a, uint32_t b) {
  uint32_t mask = 0u - (uint32_t)(condition != 0);
  return (a & mask) | (b & ~mask);
}

/* The float16 conversions are branch-free (each case computed, one
 * selected) so that the host's widening and narrowing loops vectorise;
 * checked against the former branchy versions on all 2^16 and 2^32 inputs. */
XC_INLINE XC_HD float xc_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t magnitude = h & 0x7fffu;
  uint32_t exponent = magnitude >> 10;
  /* Normal: rebias the exponent from 15 to 127. */
  uint32_t normal = (magnitude << 13) + (112u << 23);
  /* Infinity or NaN (payload kept). */
  uint32_t special = 0x7f800000u | (magnitude << 13);
  /* Zero or subnormal: mantissa * 2^-24, exact in float32. */
  uint32_t subnormal = xc_float_bits((float)(magnitude & 0x3ffu) * 0x1p-24f);
  uint32_t bits = xc_select(exponent == 0, subnormal, normal);
  bits = xc_select(exponent == 31, special, bits);
  return xc_bits_float(sign | bits);
}

XC_INLINE XC_HD uint16_t xc_float_to_half(float f) {
  uint32_t x = xc_float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t magnitude = x & 0x7fffffffu;
  /* NaN: keep the top payload bits and force the quiet bit, so that a
   * signalling NaN whose payload is only in the low bits stays a NaN. */
  uint32_t nan = 0x7e00u | ((magnitude & 0x7fffffu) >> 13);
  /* Normal half (float exponent 113..142): rebias and round to nearest
   * even by adding 0xfff plus the lowest kept bit; a carry out of the
   * mantissa bumps the exponent, up to 0x7c00 = inf, as it should. */
  uint32_t normal =
      ((magnitude + 0xfffu + ((magnitude >> 13) & 1u)) >> 13) - (112u << 10);
  /* Subnormal half (or zero), in units of 2^-24: scale by 2^24 (exact) and
   * let a float32 addition of 2^23 round to an integer, ties to even; the
   * integer is then the low bits of the sum. 2^-25 ties to 0; just below
   * the smallest normal rounds up into 0x0400, which is correct. */
  int small = magnitude < (113u << 23);
  float scaled = xc_bits_float(xc_select(small, magnitude, 0u));
  uint32_t subnormal = xc_float_bits(scaled * 0x1p24f + 0x1p23f) - 0x4b000000u;
  uint32_t result = xc_select(small, subnormal, normal);
  result = xc_select(magnitude >= (143u << 23), 0x7c00u, result); /* inf */
  result = xc_select(magnitude > 0x7f800000u, nan, result);
  return (uint16_t)(sign | result);
}

XC_INLINE XC_HD float xc_bfloat16_to_float(uint16_t b) {
  return xc_bits_float((uint32_t)b << 16);
}

/* Branch-free, so that the host's narrowing loop vectorises. */
XC_INLINE XC_HD uint16_t xc_float_to_bfloat16(float f) {
  uint32_t x = xc_float_bits(f);
  /* NaN: keep the sign and top payload, make it quiet. */
  uint32_t quiet_nan = (x >> 16) | 0x0040u;
  /* Round to nearest even: add 0x7fff plus the lowest kept bit, truncate.
   * Values past the largest bfloat16 carry into the exponent and give inf. */
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

#endif
