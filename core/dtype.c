/* dtype.c - host reductions for every xcoll datatype and operator, and the
 * float16 / bfloat16 conversions they use (see dtype.h).
 *
 * The loops themselves live in kernels/reduce.h, shared with the ring
 * primitives of kernels/ (host engine and CUDA), so that a value reduced by
 * core's host-driven algorithms and by a kernel is bit-identical; the
 * semantics (integer wrap-around, NaN-propagating min/max, float16/bfloat16
 * reduced in float32 and rounded to nearest even, AVG divided once at the end)
 * are written there. This file is the core-facing wrapper plus validation. */
#include "dtype.h"

#include "error.h"
#include "../kernels/reduce.h"

/* kernels/ takes xcoll's enums as they are; reduce.h depends on these. */
_Static_assert(XCOLL_NUM_DATATYPES == 10, "reduce.h handles 10 datatypes");
_Static_assert(XCOLL_NUM_OPS == 8, "reduce.h handles 8 operators");

float xcoll_half_to_float(uint16_t h) { return xc_half_to_float(h); }
uint16_t xcoll_float_to_half(float f) { return xc_float_to_half(f); }
float xcoll_bfloat16_to_float(uint16_t b) { return xc_bfloat16_to_float(b); }
uint16_t xcoll_float_to_bfloat16(float f) { return xc_float_to_bfloat16(f); }

void xcoll_reduce_into(void *dst, const void *a, const void *b, size_t count,
                       xcoll_datatype dtype, xcoll_op op) {
  xc_reduce_into(dst, a, b, count, dtype, op);
}

void xcoll_reduce_inplace(void *dst, const void *src, size_t count,
                          xcoll_datatype dtype, xcoll_op op) {
  xc_reduce_into(dst, dst, src, count, dtype, op);
}

void xcoll_scale_premul(void *dst, const void *src, size_t count,
                        xcoll_datatype dtype, const void *scalar) {
  xc_scale_premul(dst, src, count, dtype, scalar);
}

void xcoll_scale_avg(void *buf, size_t count, xcoll_datatype dtype,
                     int world_size) {
  xc_scale_avg(buf, count, dtype, world_size);
}

xcoll_status xcoll_check_dtype_op(struct xcoll_comm *comm, xcoll_datatype dtype,
                                  xcoll_op op) {
  if ((int)dtype < 0 || dtype >= XCOLL_NUM_DATATYPES)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "dtype %d is not an xcoll_datatype: use one of "
                       "XCOLL_INT8 .. XCOLL_FLOAT64 (0..%d)",
                       (int)dtype, XCOLL_NUM_DATATYPES - 1);
  if ((int)op < 0 || op >= XCOLL_NUM_OPS)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "op %d is not an xcoll_op: use XCOLL_SUM, XCOLL_PROD, "
                       "XCOLL_MIN, XCOLL_MAX, XCOLL_AVG, XCOLL_BAND, "
                       "XCOLL_BOR or XCOLL_BXOR (0..%d)",
                       (int)op, XCOLL_NUM_OPS - 1);
  const char *why = xcoll_op_dtype_mismatch(op, dtype);
  if (why != NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "op %s with dtype %s: %s", xcoll_op_name(op),
                       xcoll_datatype_name(dtype), why);
  return XCOLL_SUCCESS;
}

const char *xcoll_op_dtype_mismatch(xcoll_op op, xcoll_datatype dtype) {
  int is_float = xc_dtype_is_float(dtype);
  if (op == XCOLL_AVG && !is_float)
    return "avg is defined only for floating-point types (float16, "
           "bfloat16, float32, float64); use sum and divide yourself";
  if ((op == XCOLL_BAND || op == XCOLL_BOR || op == XCOLL_BXOR) && is_float)
    return "bitwise operators are defined only for integer types (int8, "
           "uint8, int32, uint32, int64, uint64)";
  return NULL;
}

/* ---- names and sizes (public API, xcoll.h) ---- */

size_t xcoll_datatype_size(xcoll_datatype dtype) {
  return xc_dtype_size(dtype); /* one table, shared with the kernels */
}

const char *xcoll_datatype_name(xcoll_datatype dtype) {
  switch (dtype) {
  case XCOLL_INT8:
    return "int8";
  case XCOLL_UINT8:
    return "uint8";
  case XCOLL_INT32:
    return "int32";
  case XCOLL_UINT32:
    return "uint32";
  case XCOLL_INT64:
    return "int64";
  case XCOLL_UINT64:
    return "uint64";
  case XCOLL_FLOAT16:
    return "float16";
  case XCOLL_BFLOAT16:
    return "bfloat16";
  case XCOLL_FLOAT32:
    return "float32";
  case XCOLL_FLOAT64:
    return "float64";
  case XCOLL_NUM_DATATYPES:
    break;
  }
  return "unknown";
}

const char *xcoll_op_name(xcoll_op op) {
  switch (op) {
  case XCOLL_SUM:
    return "sum";
  case XCOLL_PROD:
    return "prod";
  case XCOLL_MIN:
    return "min";
  case XCOLL_MAX:
    return "max";
  case XCOLL_AVG:
    return "avg";
  case XCOLL_BAND:
    return "band";
  case XCOLL_BOR:
    return "bor";
  case XCOLL_BXOR:
    return "bxor";
  case XCOLL_NUM_OPS:
    break;
  }
  if ((int)op >= XCOLL_NUM_OPS && (int)op < XCOLL_NUM_OPS + XCOLL_MAX_PREMUL_OPS)
    return "premul_sum";
  return "unknown";
}
