/* dtype.h - datatypes and host reductions.
 *
 * Reductions are element-wise loops written so that gcc and clang vectorise
 * them at -O2/-O3 (restrict pointers, no branches in the loop body).
 * float16 and bfloat16 are widened to float32, reduced, and rounded back to
 * nearest even (IEEE 754-2008 roundTiesToEven); NaN stays NaN. */
#ifndef XCOLL_CORE_DTYPE_H
#define XCOLL_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

struct xcoll_comm;

/* dst[i] = dst[i] op src[i] for i in [0, count). XCOLL_AVG reduces as SUM
 * here; the division is done once by xcoll_scale_avg. dst and src may alias
 * only if equal. */
void xcoll_reduce_inplace(void *dst, const void *src, size_t count,
                          xcoll_datatype dtype, xcoll_op op);
/* dst[i] = a[i] op b[i]: saves a copy when the result goes to a third buffer. */
void xcoll_reduce_into(void *dst, const void *a, const void *b, size_t count,
                       xcoll_datatype dtype, xcoll_op op);
/* dst[i] = src[i] * *scalar (one element of dtype): a pre-multiplied sum's
 * first step (kernels/reduce.h's xc_scale_premul). dst may be src. */
void xcoll_scale_premul(void *dst, const void *src, size_t count,
                        xcoll_datatype dtype, const void *scalar);
/* buf[i] /= world_size, for floating-point types (XCOLL_AVG's last step). */
void xcoll_scale_avg(void *buf, size_t count, xcoll_datatype dtype,
                     int world_size);

/* Conversions, exported for the tests and the trainer's tools. */
float xcoll_half_to_float(uint16_t h);
uint16_t xcoll_float_to_half(float f);
float xcoll_bfloat16_to_float(uint16_t b);
uint16_t xcoll_float_to_bfloat16(float f);

/* NULL when the built-in op is defined for dtype; else why not, a sentence
 * for an error message (avg on an integer type, a bitwise op on a
 * floating-point type). */
const char *xcoll_op_dtype_mismatch(xcoll_op op, xcoll_datatype dtype);

/* XCOLL_SUCCESS or XCOLL_ERR_INVALID_ARGUMENT (message names dtype/op). */
xcoll_status xcoll_check_dtype_op(struct xcoll_comm *comm, xcoll_datatype dtype,
                                  xcoll_op op);

#endif
