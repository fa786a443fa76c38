/*
 * mixed.c - casts between float32 and float16 / bfloat16, and dynamic loss
 * scaling (see mixed.h).
 *
 * Narrowing works on the bit pattern, without branches on the common path:
 * the float32 mantissa loses the bits the narrow format lacks, and adding
 * "half an ulp minus one, plus the kept lowest bit" before the shift rounds
 * to nearest with ties to even (above half carries, below does not,
 * exactly half carries only from an odd result). A carry out of the
 * mantissa bumps the exponent, which is also how the largest finite values
 * round to infinity. float16 subnormals (below 2^-14) are rounded by the
 * FPU itself, by adding 0.5 (see to_f16). trainer.mixed_casts checks all of
 * it against a reference that never touches bits. Per element on this
 * host: about 1 ns to narrow, 0.5 to 1.3 ns to widen.
 */
#include "mixed.h"

#include <math.h>
#include <string.h>

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static inline uint16_t to_bf16(float x) {
  uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and signed */
    return (uint16_t)((u >> 16) | 0x0040u);
  /* Round away the low 16 bits, nearest even, without branches: adding 0x7fff
   * carries into bit 16 when the low half is above 0x8000, and adding the kept
   * lowest bit too carries at exactly 0x8000 only when that bit is odd. The
   * carry runs into the exponent (the largest finite values round to infinity)
   * but never into the sign. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t b) {
  return float_of((uint32_t)b << 16);
}

static inline uint16_t to_f16(float x) {
  uint32_t u = bits_of(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t mag = u & 0x7fffffffu;
  if (mag >= 0x47800000u) { /* >= 2^16: infinity, or NaN kept quiet */
    if (mag > 0x7f800000u)
      return (uint16_t)(sign | 0x7e00u | ((mag >> 13) & 0x03ffu));
    return (uint16_t)(sign | 0x7c00u);
  }
  if (mag < 0x38800000u) {
    /* Below 2^-14, float16's subnormals: adding 0.5, whose float32 ulp is
     * 2^-24 (float16's subnormal step), lets the FPU round the value to
     * that step, nearest even; what remains above 0.5's bits is the
     * float16 pattern (0x400, the smallest normal, when it rounds up). */
    uint32_t sum = bits_of(float_of(mag) + 0.5f);
    return (uint16_t)(sign | (sum - 0x3f000000u));
  }
  /* Normal: rebias the exponent (127 -> 15) and round away 13 mantissa
   * bits (adding 0xfff carries when they exceed half an ulp, adding the
   * kept lowest bit too carries at exactly half only when it is odd); a carry
   * may reach exponent 31, infinity. */
  uint32_t odd = (mag >> 13) & 1u;
  mag += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
  return (uint16_t)(sign | (mag >> 13));
}

static inline float from_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x03ffu;
  if (exp == 0x1fu) /* inf, NaN (payload kept) */
    return float_of(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return float_of(sign);
    /* Subnormal: mant * 2^-24, exact in float32. */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

/* The public one-element casts; the loops below use the inline forms so
 * that the compiler can keep them in registers (a call per element cost
 * more than the conversion). */
uint16_t mixed_f32_to_bf16(float x) {
  return to_bf16(x);
}
float mixed_bf16_to_f32(uint16_t b) {
  return from_bf16(b);
}
uint16_t mixed_f32_to_f16(float x) {
  return to_f16(x);
}
float mixed_f16_to_f32(uint16_t h) {
  return from_f16(h);
}

void mixed_narrow(uint16_t *out, const float *in, size_t n, float divisor,
                  xcoll_datatype dtype) {
  if (divisor == 1.0f && dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      out[i] = to_bf16(in[i]);
  } else if (divisor == 1.0f) {
    for (size_t i = 0; i < n; i++)
      out[i] = to_f16(in[i]);
  } else if (dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      out[i] = to_bf16(in[i] / divisor);
  } else {
    for (size_t i = 0; i < n; i++)
      out[i] = to_f16(in[i] / divisor);
  }
}

void mixed_widen(float *out, const uint16_t *in, size_t n,
                 xcoll_datatype dtype) {
  if (dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      out[i] = from_bf16(in[i]);
  } else {
    for (size_t i = 0; i < n; i++)
      out[i] = from_f16(in[i]);
  }
}

void mixed_widen_add(float *acc, const uint16_t *in, size_t n,
                     xcoll_datatype dtype) {
  if (dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      acc[i] += from_bf16(in[i]);
  } else {
    for (size_t i = 0; i < n; i++)
      acc[i] += from_f16(in[i]);
  }
}

int mixed_dtype_parse(const char *name) {
  if (strcmp(name, "float32") == 0)
    return XCOLL_FLOAT32;
  if (strcmp(name, "bfloat16") == 0)
    return XCOLL_BFLOAT16;
  if (strcmp(name, "float16") == 0)
    return XCOLL_FLOAT16;
  return -1;
}

const char *mixed_dtype_name(xcoll_datatype dtype) {
  return dtype == XCOLL_BFLOAT16  ? "bfloat16"
         : dtype == XCOLL_FLOAT16 ? "float16"
                                  : "float32";
}

size_t mixed_dtype_size(xcoll_datatype dtype) {
  return dtype == XCOLL_BFLOAT16 || dtype == XCOLL_FLOAT16 ? 2 : 4;
}

size_t mixed_wire_allreduce(size_t bytes, int world_size) {
  if (world_size <= 1)
    return 0;
  return 2 * (size_t)(world_size - 1) * bytes / (size_t)world_size;
}

size_t mixed_wire_reduce_scatter(size_t bytes, int world_size) {
  if (world_size <= 1)
    return 0;
  return (size_t)(world_size - 1) * bytes / (size_t)world_size;
}

size_t mixed_wire_allgather(size_t bytes, int world_size) {
  return world_size <= 1 ? 0 : (size_t)(world_size - 1) * bytes;
}

/* ---- dynamic loss scaling ---- */

void loss_scaler_init(loss_scaler *ls, int enabled, double init_scale,
                      int64_t growth_interval) {
  memset(ls, 0, sizeof *ls);
  ls->enabled = enabled;
  ls->scale = enabled ? init_scale : 1.0;
  ls->growth_factor = 2.0;
  ls->backoff_factor = 0.5;
  ls->growth_interval = growth_interval;
}

int loss_scaler_unscale(const loss_scaler *ls, float *grads, size_t n) {
  /* GradScaler multiplies by the float32 reciprocal of the scale. */
  float inv = (float)(1.0 / ls->scale);
  int found = 0;
  for (size_t i = 0; i < n; i++) {
    grads[i] *= inv;
    if (!isfinite(grads[i]))
      found = 1;
  }
  return found;
}

int loss_scaler_update(loss_scaler *ls, int found_inf) {
  if (found_inf) {
    ls->scale *= ls->backoff_factor;
    ls->good_steps = 0;
    ls->skipped_steps++;
    return 1;
  }
  if (++ls->good_steps >= ls->growth_interval) {
    ls->scale *= ls->growth_factor;
    ls->good_steps = 0;
  }
  return 0;
}
