/*
 * mixed.h - mixed precision for xtrain: float32 <-> float16 / bfloat16
 * casts with round to nearest even, the reduced-precision dtypes of
 * --param-dtype and --reduce-dtype, and dynamic loss scaling with the rules
 * of PyTorch's torch.amp.GradScaler.
 *
 * Formats (IEEE 754-2008 binary16; Google Brain's bfloat16):
 *   float16:  1 sign, 5 exponent (bias 15), 10 mantissa bits; largest
 *             finite 65504, smallest normal 2^-14, subnormals down to 2^-24.
 *   bfloat16: the top 16 bits of a float32: 1 sign, 8 exponent (bias 127),
 *             7 mantissa bits; float32's range, 3 significant digits.
 * Narrowing rounds to nearest, ties to even (what xcoll's reductions and
 * PyTorch's .to(dtype) do); values past the largest finite one round to
 * infinity; NaN stays NaN (quiet, sign kept). Widening is exact.
 */
#ifndef XTRAIN_MIXED_H
#define XTRAIN_MIXED_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

/* One float32 to float16 / bfloat16 bits, round to nearest even. */
uint16_t mixed_f32_to_f16(float x);
uint16_t mixed_f32_to_bf16(float x);
/* float16 / bfloat16 bits to float32, exact. */
float mixed_f16_to_f32(uint16_t h);
float mixed_bf16_to_f32(uint16_t b);

/* dtype is XCOLL_FLOAT16 or XCOLL_BFLOAT16: out[i] = narrow(in[i] /
 * divisor) for n elements, the division in float32 (divisor 1 is a plain
 * cast). */
void mixed_narrow(uint16_t *out, const float *in, size_t n, float divisor,
                  xcoll_datatype dtype);
/* out[i] = widen(in[i]) for n elements. */
void mixed_widen(float *out, const uint16_t *in, size_t n,
                 xcoll_datatype dtype);
/* acc[i] += widen(in[i]) for n elements. */
void mixed_widen_add(float *acc, const uint16_t *in, size_t n,
                     xcoll_datatype dtype);
/* "float32", "bfloat16", "float16" to XCOLL_FLOAT32 / _BFLOAT16 / _FLOAT16;
 * -1 when unknown. */
int mixed_dtype_parse(const char *name);
const char *mixed_dtype_name(xcoll_datatype dtype);
/* Bytes of one element: 4 or 2. */
size_t mixed_dtype_size(xcoll_datatype dtype);

/* Bytes one rank sends in a bandwidth-optimal (ring) algorithm over
 * world_size ranks (Patarasuk & Yuan 2009), for a collective whose
 * per-rank buffer is bytes long: the input of an all-reduce
 * (2 (W-1)/W of it), the input of a reduce-scatter ((W-1)/W of it), or
 * this rank's contribution to an all-gather ((W-1) times it). 0 for one
 * rank. Rounded down to whole bytes. */
size_t mixed_wire_allreduce(size_t bytes, int world_size);
size_t mixed_wire_reduce_scatter(size_t bytes, int world_size);
size_t mixed_wire_allgather(size_t bytes, int world_size);

/* Dynamic loss scaling (torch.amp.GradScaler): the loss is multiplied by
 * scale before backward; after backward the gradients are multiplied by
 * 1/scale and checked for inf/nan on every rank. A step with any non-finite
 * gradient on any rank is skipped and scale *= backoff_factor (0.5); after
 * growth_interval consecutive finite steps scale *= growth_factor (2). */
typedef struct loss_scaler {
  int enabled;
  double scale;            /* now; --init-scale, 2^16 by default */
  double growth_factor;    /* 2.0 */
  double backoff_factor;   /* 0.5 */
  int64_t growth_interval; /* --scale-growth-interval, 2000 by default */
  int64_t good_steps;      /* consecutive finite steps since the last change */
  int64_t skipped_steps;   /* in the whole run */
} loss_scaler;

void loss_scaler_init(loss_scaler *ls, int enabled, double init_scale,
                      int64_t growth_interval);

/* grads *= 1/scale over n floats; returns 1 when one of them is inf or nan
 * (before or after unscaling), else 0. */
int loss_scaler_unscale(const loss_scaler *ls, float *grads, size_t n);

/* After the ranks agreed whether any gradient was non-finite: update the
 * scale. Returns 1 when the step must be skipped. */
int loss_scaler_update(loss_scaler *ls, int found_inf);

#endif /* XTRAIN_MIXED_H */
