/* dtype.c - host reductions for every xcoll datatype and operator, and the
 * float16 / bfloat16 conversions they use (see dtype.h).
 *
 * Semantics, the same on every path:
 * - Integer sum and prod wrap modulo 2^n (two's complement for the signed
 *   types); they are computed in the unsigned type of the same width, so no
 *   signed overflow (undefined behaviour in C) ever happens.
 * - Floating-point min and max propagate NaN: if either operand is NaN the
 *   result is NaN, so a NaN on any rank reaches every rank. Between -0 and +0
 *   (which compare equal) min and max return their second operand; algorithms
 *   that need bitwise-identical results on every rank fix the operand order.
 * - float16 and bfloat16 are widened to float32, reduced, and rounded back to
 *   nearest even, one block of FP_BLOCK elements at a time through a stack
 *   buffer so that the float32 loop vectorises.
 * - XCOLL_AVG reduces as XCOLL_SUM; xcoll_scale_avg divides once at the end
 *   (in float32 for the 16-bit types, then rounds).
 *
 * The kernels take no restrict qualifiers on purpose: dst may be exactly a or
 * b (dtype.h allows it), and gcc and clang still vectorise such loops by
 * checking at run time that the arrays do not partially overlap. */
#include "dtype.h"

#include <string.h>

#include "error.h"

/* Elements of float16/bfloat16 widened at once (3 KiB of stack). */
#define FP_BLOCK 256

/* ---- conversions ---- */

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float xcoll_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    /* Zero or subnormal: mantissa * 2^-24, exact in float32. */
    float magnitude = (float)mantissa * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) /* infinity or NaN (payload kept) */
    return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t xcoll_float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t exponent = (x >> 23) & 0xffu;
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xff) {
    if (mantissa == 0)
      return sign | 0x7c00u;
    /* NaN: keep the top payload bits and force the quiet bit, so that a
     * signalling NaN whose payload is only in the low bits stays a NaN. */
    return (uint16_t)(sign | 0x7e00u | (mantissa >> 13));
  }
  /* Biased half exponent of this value if it were normal. */
  int half_exponent = (int)exponent - 127 + 15;
  if (half_exponent >= 31)
    return sign | 0x7c00u; /* overflow: too large even before rounding */
  if (half_exponent <= 0) {
    /* Subnormal half (or zero): units of 2^-24. Below 2^-25 everything
     * rounds to zero; exactly 2^-25 ties to the even value 0. */
    if (half_exponent < -10)
      return sign;
    uint32_t full = mantissa | 0x800000u; /* the implicit leading 1 */
    unsigned shift = (unsigned)(14 - half_exponent); /* 14..24 */
    uint32_t result = full >> shift;
    uint32_t rest = full & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1u)))
      result++; /* may carry into the smallest normal, 0x0400: correct */
    return (uint16_t)(sign | result);
  }
  uint32_t result = ((uint32_t)half_exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u)))
    result++; /* a carry out of the mantissa bumps the exponent; 0x7c00 is inf
               */
  return (uint16_t)(sign | result);
}

float xcoll_bfloat16_to_float(uint16_t b) {
  return bits_float((uint32_t)b << 16);
}

uint16_t xcoll_float_to_bfloat16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x0040u); /* NaN: keep sign, make it quiet */
  /* Round to nearest even: add 0x7fff plus the lowest kept bit, truncate.
   * Values past the largest bfloat16 carry into the exponent and give inf. */
  uint32_t lowest_kept = (x >> 16) & 1u;
  return (uint16_t)((x + 0x7fffu + lowest_kept) >> 16);
}

/* ---- element-wise kernels ---- */

/* NaN-propagating min/max (see the file comment). */
#define FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))

/* Integer kernels: sum and prod in the unsigned type U of the same width. */
#define DEFINE_INT_KERNELS(NAME, T, U)                                         \
  static void NAME##_sum(T *dst, const T *a, const T *b, size_t n) {           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)((U)a[i] + (U)b[i]);                                         \
  }                                                                            \
  static void NAME##_prod(T *dst, const T *a, const T *b, size_t n) {          \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)((U)((U)a[i] * (U)b[i]));                                    \
  }                                                                            \
  static void NAME##_min(T *dst, const T *a, const T *b, size_t n) {           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = IMIN(a[i], b[i]);                                               \
  }                                                                            \
  static void NAME##_max(T *dst, const T *a, const T *b, size_t n) {           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = IMAX(a[i], b[i]);                                               \
  }

#define DEFINE_FLOAT_KERNELS(NAME, T)                                          \
  static void NAME##_sum(T *dst, const T *a, const T *b, size_t n) {           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = a[i] + b[i];                                                    \
  }                                                                            \
  static void NAME##_prod(T *dst, const T *a, const T *b, size_t n) {          \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = a[i] * b[i];                                                    \
  }                                                                            \
  static void NAME##_min(T *dst, const T *a, const T *b, size_t n) {           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = FMIN(a[i], b[i]);                                               \
  }                                                                            \
  static void NAME##_max(T *dst, const T *a, const T *b, size_t n) {           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = FMAX(a[i], b[i]);                                               \
  }

/* uint8 * uint8 promotes to int, whose product (< 2^16) cannot overflow;
 * the 32- and 64-bit unsigned products wrap as C defines. */
DEFINE_INT_KERNELS(i8, int8_t, uint8_t)
DEFINE_INT_KERNELS(u8, uint8_t, uint8_t)
DEFINE_INT_KERNELS(i32, int32_t, uint32_t)
DEFINE_INT_KERNELS(u32, uint32_t, uint32_t)
DEFINE_INT_KERNELS(i64, int64_t, uint64_t)
DEFINE_INT_KERNELS(u64, uint64_t, uint64_t)
DEFINE_FLOAT_KERNELS(f32, float)
DEFINE_FLOAT_KERNELS(f64, double)

typedef void (*kernel_fn)(void *dst, const void *a, const void *b, size_t n);
typedef void (*f32_kernel_fn)(float *dst, const float *a, const float *b,
                              size_t n);

static f32_kernel_fn f32_kernel(xcoll_op op) {
  switch (op) {
  case XCOLL_PROD:
    return f32_prod;
  case XCOLL_MIN:
    return f32_min;
  case XCOLL_MAX:
    return f32_max;
  default: /* SUM and AVG */
    return f32_sum;
  }
}

/* float16 / bfloat16: widen a block, reduce in float32, round back. */
static void reduce_16bit(uint16_t *dst, const uint16_t *a, const uint16_t *b,
                         size_t n, xcoll_op op, float (*widen)(uint16_t),
                         uint16_t (*narrow)(float)) {
  float wide_a[FP_BLOCK], wide_b[FP_BLOCK], wide_out[FP_BLOCK];
  f32_kernel_fn kernel = f32_kernel(op);
  for (size_t start = 0; start < n; start += FP_BLOCK) {
    size_t len = n - start < FP_BLOCK ? n - start : FP_BLOCK;
    for (size_t i = 0; i < len; i++) {
      wide_a[i] = widen(a[start + i]);
      wide_b[i] = widen(b[start + i]);
    }
    kernel(wide_out, wide_a, wide_b, len);
    for (size_t i = 0; i < len; i++)
      dst[start + i] = narrow(wide_out[i]);
  }
}

#define DISPATCH(NAME, T)                                                      \
  switch (op) {                                                                \
  case XCOLL_PROD:                                                             \
    NAME##_prod((T *)dst, (const T *)a, (const T *)b, count);                  \
    return;                                                                    \
  case XCOLL_MIN:                                                              \
    NAME##_min((T *)dst, (const T *)a, (const T *)b, count);                   \
    return;                                                                    \
  case XCOLL_MAX:                                                              \
    NAME##_max((T *)dst, (const T *)a, (const T *)b, count);                   \
    return;                                                                    \
  default:                                                                     \
    NAME##_sum((T *)dst, (const T *)a, (const T *)b, count);                   \
    return;                                                                    \
  }

void xcoll_reduce_into(void *dst, const void *a, const void *b, size_t count,
                       xcoll_datatype dtype, xcoll_op op) {
  if (count == 0)
    return;
  switch (dtype) {
  case XCOLL_INT8:
    DISPATCH(i8, int8_t)
  case XCOLL_UINT8:
    DISPATCH(u8, uint8_t)
  case XCOLL_INT32:
    DISPATCH(i32, int32_t)
  case XCOLL_UINT32:
    DISPATCH(u32, uint32_t)
  case XCOLL_INT64:
    DISPATCH(i64, int64_t)
  case XCOLL_UINT64:
    DISPATCH(u64, uint64_t)
  case XCOLL_FLOAT32:
    DISPATCH(f32, float)
  case XCOLL_FLOAT64:
    DISPATCH(f64, double)
  case XCOLL_FLOAT16:
    reduce_16bit(dst, a, b, count, op, xcoll_half_to_float,
                 xcoll_float_to_half);
    return;
  case XCOLL_BFLOAT16:
    reduce_16bit(dst, a, b, count, op, xcoll_bfloat16_to_float,
                 xcoll_float_to_bfloat16);
    return;
  default:
    return; /* rejected earlier by xcoll_check_dtype_op */
  }
}

void xcoll_reduce_inplace(void *dst, const void *src, size_t count,
                          xcoll_datatype dtype, xcoll_op op) {
  xcoll_reduce_into(dst, dst, src, count, dtype, op);
}

void xcoll_scale_avg(void *buf, size_t count, xcoll_datatype dtype,
                     int world_size) {
  if (world_size <= 1)
    return;
  /* A true division, not a multiplication by 1/P: it is correctly rounded,
   * so the result is the nearest value to sum / P (1/P is inexact for P=3). */
  switch (dtype) {
  case XCOLL_FLOAT32: {
    float *x = buf;
    float divisor = (float)world_size;
    for (size_t i = 0; i < count; i++)
      x[i] /= divisor;
    return;
  }
  case XCOLL_FLOAT64: {
    double *x = buf;
    double divisor = (double)world_size;
    for (size_t i = 0; i < count; i++)
      x[i] /= divisor;
    return;
  }
  case XCOLL_FLOAT16: {
    uint16_t *x = buf;
    float divisor = (float)world_size;
    for (size_t i = 0; i < count; i++)
      x[i] = xcoll_float_to_half(xcoll_half_to_float(x[i]) / divisor);
    return;
  }
  case XCOLL_BFLOAT16: {
    uint16_t *x = buf;
    float divisor = (float)world_size;
    for (size_t i = 0; i < count; i++)
      x[i] = xcoll_float_to_bfloat16(xcoll_bfloat16_to_float(x[i]) / divisor);
    return;
  }
  default:
    return; /* integers: AVG is rejected by xcoll_check_dtype_op */
  }
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
                       "XCOLL_MIN, XCOLL_MAX or XCOLL_AVG (0..%d)",
                       (int)op, XCOLL_NUM_OPS - 1);
  int is_float = dtype == XCOLL_FLOAT16 || dtype == XCOLL_BFLOAT16 ||
                 dtype == XCOLL_FLOAT32 || dtype == XCOLL_FLOAT64;
  if (op == XCOLL_AVG && !is_float)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "op avg with dtype %s: avg is defined only for "
                       "floating-point types (float16, bfloat16, float32, "
                       "float64); use sum and divide yourself",
                       xcoll_datatype_name(dtype));
  return XCOLL_SUCCESS;
}

/* ---- names and sizes (public API, xcoll.h) ---- */

size_t xcoll_datatype_size(xcoll_datatype dtype) {
  switch (dtype) {
  case XCOLL_INT8:
  case XCOLL_UINT8:
    return 1;
  case XCOLL_FLOAT16:
  case XCOLL_BFLOAT16:
    return 2;
  case XCOLL_INT32:
  case XCOLL_UINT32:
  case XCOLL_FLOAT32:
    return 4;
  case XCOLL_INT64:
  case XCOLL_UINT64:
  case XCOLL_FLOAT64:
    return 8;
  case XCOLL_NUM_DATATYPES:
    break;
  }
  return 0;
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
  case XCOLL_NUM_OPS:
    break;
  }
  return "unknown";
}
