/*
 * mixed.c - casts between float32 and float16 / bfloat16, and dynamic loss
 * scaling (see mixed.h). The conversions are kernels/fp16.h's, the ones
 * xcoll's own float16 / bfloat16 reductions use, so a value the trainer
 * narrows has the bits a collective would give it. They are branch-free, so
 * the loops below vectorise. trainer.mixed_casts checks them against a
 * reference that never touches bits.
 *
 * fp16.h is a header-only file of pure functions (no state, no symbol of the
 * library): including it keeps the trainer on the public API for everything
 * it links, while the conversions stay written once.
 */
#include "mixed.h"

#include <math.h>
#include <string.h>

#include "../kernels/fp16.h"

/* The public one-element casts; the loops below use the inline forms so
 * that the compiler can keep them in registers (a call per element cost
 * more than the conversion). */
uint16_t mixed_f32_to_bf16(float x) {
  return xc_float_to_bfloat16(x);
}
float mixed_bf16_to_f32(uint16_t b) {
  return xc_bfloat16_to_float(b);
}
uint16_t mixed_f32_to_f16(float x) {
  return xc_float_to_half(x);
}
float mixed_f16_to_f32(uint16_t h) {
  return xc_half_to_float(h);
}

void mixed_narrow(uint16_t *out, const float *in, size_t n, float divisor,
                  xcoll_datatype dtype) {
  if (divisor == 1.0f && dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      out[i] = xc_float_to_bfloat16(in[i]);
  } else if (divisor == 1.0f) {
    for (size_t i = 0; i < n; i++)
      out[i] = xc_float_to_half(in[i]);
  } else if (dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      out[i] = xc_float_to_bfloat16(in[i] / divisor);
  } else {
    for (size_t i = 0; i < n; i++)
      out[i] = xc_float_to_half(in[i] / divisor);
  }
}

void mixed_widen(float *out, const uint16_t *in, size_t n,
                 xcoll_datatype dtype) {
  if (dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      out[i] = xc_bfloat16_to_float(in[i]);
  } else {
    for (size_t i = 0; i < n; i++)
      out[i] = xc_half_to_float(in[i]);
  }
}

void mixed_widen_add(float *acc, const uint16_t *in, size_t n,
                     xcoll_datatype dtype) {
  if (dtype == XCOLL_BFLOAT16) {
    for (size_t i = 0; i < n; i++)
      acc[i] += xc_bfloat16_to_float(in[i]);
  } else {
    for (size_t i = 0; i < n; i++)
      acc[i] += xc_half_to_float(in[i]);
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
