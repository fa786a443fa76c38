/* test_dtype.c - core/dtype.c: every dtype x op against a scalar reference,
 * float16 and bfloat16 conversions against tables of known encodings
 * (including subnormals, overflow, NaN and ties to even), xcoll_scale_avg,
 * xcoll_scale_premul (a pre-multiplied sum's scaling), and
 * xcoll_check_dtype_op's errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "dtype.h"
#include "xcoll.h"

/* ---- conversions ---- */

typedef struct half_case {
  float value;
  uint16_t bits;
} half_case;

static void test_float_to_half_table(void **state) {
  (void)state;
  static const half_case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.5f, 0x3800},
      {65504.0f, 0x7BFF}, /* largest finite */
      {65519.0f, 0x7BFF}, /* below the halfway point to 65536 */
      {65520.0f, 0x7C00}, /* halfway: ties to even, which is inf */
      {1e10f, 0x7C00},    /* overflow */
      {-1e10f, 0xFC00},
      {0x1p-24f, 0x0001},     /* smallest subnormal */
      {0x1p-25f, 0x0000},     /* half of it: tie to even 0 */
      {0x1.8p-25f, 0x0001},   /* above the tie: rounds up */
      {0x3p-24f, 0x0003},     /* subnormal, exact */
      {0x1p-14f, 0x0400},     /* smallest normal */
      {0x1.ff8p-15f, 0x03FF}, /* largest subnormal */
      {0x1.ffcp-15f, 0x0400}, /* it + half an ulp: ties to even, the normal */
      {0.1f, 0x2E66},
      {0.333333333f, 0x3555},
      {2049.0f, 0x6800}, /* tie between 2048 and 2050: even is 2048 */
      {2051.0f, 0x6802}, /* tie between 2050 and 2052: even is 2052 */
      {2050.0f, 0x6801},
      {1.0f + 0x1p-11f, 0x3C00}, /* tie at 1: even is 1.0 */
      {1.0f + 0x3p-11f, 0x3C02}, /* tie between 1+2^-10 and 1+2^-9: even up */
      {INFINITY, 0x7C00},
      {-INFINITY, 0xFC00},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = xcoll_float_to_half(cases[i].value);
    if (got != cases[i].bits)
      print_error("float_to_half(%a) = %#06x, expected %#06x\n",
                  (double)cases[i].value, got, cases[i].bits);
    assert_int_equal(got, cases[i].bits);
  }
}

static void test_half_to_float_table(void **state) {
  (void)state;
  assert_true(xcoll_half_to_float(0x3C00) == 1.0f);
  assert_true(xcoll_half_to_float(0x7BFF) == 65504.0f);
  assert_true(xcoll_half_to_float(0x0001) == 0x1p-24f);
  assert_true(xcoll_half_to_float(0x03FF) == 0x3FFp-24f);
  assert_true(xcoll_half_to_float(0x0400) == 0x1p-14f);
  assert_true(xcoll_half_to_float(0xC000) == -2.0f);
  assert_true(xcoll_half_to_float(0x7C00) == INFINITY);
  assert_true(xcoll_half_to_float(0xFC00) == -INFINITY);
  assert_true(signbit(xcoll_half_to_float(0x8000)));
  assert_true(isnan(xcoll_half_to_float(0x7E00)));
  assert_true(isnan(xcoll_half_to_float(0x7C01))); /* signalling NaN */
  /* Every finite half survives a round trip through float32. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7C00) == 0x7C00)
      continue;
    assert_int_equal(xcoll_float_to_half(xcoll_half_to_float((uint16_t)h)), h);
  }
}

static void test_half_nan(void **state) {
  (void)state;
  assert_true(isnan(xcoll_half_to_float(xcoll_float_to_half(NAN))));
  /* A NaN whose payload is only in low float bits must not become inf. */
  uint32_t bits = 0x7F800001u;
  float tiny_payload;
  memcpy(&tiny_payload, &bits, sizeof bits);
  uint16_t h = xcoll_float_to_half(tiny_payload);
  assert_true((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0);
}

static void test_bfloat16_table(void **state) {
  (void)state;
  assert_int_equal(xcoll_float_to_bfloat16(1.0f), 0x3F80);
  assert_int_equal(xcoll_float_to_bfloat16(-2.0f), 0xC000);
  assert_int_equal(xcoll_float_to_bfloat16(0.0f), 0x0000);
  assert_int_equal(xcoll_float_to_bfloat16(-0.0f), 0x8000);
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even 1.0. */
  assert_int_equal(xcoll_float_to_bfloat16(1.0f + 0x1p-8f), 0x3F80);
  /* 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: up to 0x3F82. */
  assert_int_equal(xcoll_float_to_bfloat16(1.0f + 0x3p-8f), 0x3F82);
  /* just above a tie rounds up */
  assert_int_equal(xcoll_float_to_bfloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  assert_int_equal(xcoll_float_to_bfloat16(3.14159265f), 0x4049);
  assert_int_equal(xcoll_float_to_bfloat16(INFINITY), 0x7F80);
  assert_int_equal(xcoll_float_to_bfloat16(-INFINITY), 0xFF80);
  assert_int_equal(xcoll_float_to_bfloat16(3.4e38f), 0x7F80); /* overflow */
  /* NaN stays a (quiet) NaN, even with a payload only in the low bits. */
  uint32_t bits = 0x7F800001u;
  float nan_low;
  memcpy(&nan_low, &bits, sizeof bits);
  uint16_t b = xcoll_float_to_bfloat16(nan_low);
  assert_true((b & 0x7F80) == 0x7F80 && (b & 0x0040));
  assert_true(isnan(xcoll_bfloat16_to_float(xcoll_float_to_bfloat16(NAN))));
  assert_true(xcoll_bfloat16_to_float(0x3F80) == 1.0f);
  assert_true(xcoll_bfloat16_to_float(0x4049) == 3.140625f);
}

/* ---- reductions against a scalar reference ---- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

#define N 1000 /* more than one 256-element block of the 16-bit path */

/* One typed check: a, b random; reference computed per element with the
 * obvious expression in a wider or unsigned type. */
#define CHECK_INT(T, U, op_expr)                                               \
  do {                                                                         \
    T a[N], b[N], out[N], copy[N];                                             \
    for (size_t i = 0; i < N; i++) {                                           \
      a[i] = (T)mix(i * 2 + seed);                                             \
      b[i] = (T)mix(i * 2 + 1 + seed);                                         \
    }                                                                          \
    xcoll_reduce_into(out, a, b, N, dtype, op);                                \
    memcpy(copy, a, sizeof a);                                                 \
    xcoll_reduce_inplace(copy, b, N, dtype, op);                               \
    for (size_t i = 0; i < N; i++) {                                           \
      T x = a[i], y = b[i];                                                    \
      T want = (op_expr);                                                      \
      assert_true(out[i] == want);                                             \
      assert_true(copy[i] == want);                                            \
    }                                                                          \
  } while (0)

#define INT_OP(T, U)                                                           \
  (op == XCOLL_SUM    ? (T)(U)((U)x + (U)y)                                    \
   : op == XCOLL_PROD ? (T)(U)((U)x * (U)y)                                    \
   : op == XCOLL_MIN  ? (x < y ? x : y)                                        \
   : op == XCOLL_BAND ? (T)((U)x & (U)y)                                       \
   : op == XCOLL_BOR  ? (T)((U)x | (U)y)                                       \
   : op == XCOLL_BXOR ? (T)((U)x ^ (U)y)                                       \
                      : (x > y ? x : y))

static void check_ints(xcoll_datatype dtype, xcoll_op op, uint64_t seed) {
  switch (dtype) {
  case XCOLL_INT8:
    CHECK_INT(int8_t, uint8_t, INT_OP(int8_t, uint8_t));
    break;
  case XCOLL_UINT8:
    CHECK_INT(uint8_t, uint8_t, INT_OP(uint8_t, uint8_t));
    break;
  case XCOLL_INT32:
    CHECK_INT(int32_t, uint32_t, INT_OP(int32_t, uint32_t));
    break;
  case XCOLL_UINT32:
    CHECK_INT(uint32_t, uint32_t, INT_OP(uint32_t, uint32_t));
    break;
  case XCOLL_INT64:
    CHECK_INT(int64_t, uint64_t, INT_OP(int64_t, uint64_t));
    break;
  default:
    CHECK_INT(uint64_t, uint64_t, INT_OP(uint64_t, uint64_t));
    break;
  }
}

static void test_integer_ops(void **state) {
  (void)state;
  static const xcoll_datatype ints[] = {XCOLL_INT8,  XCOLL_UINT8,
                                        XCOLL_INT32, XCOLL_UINT32,
                                        XCOLL_INT64, XCOLL_UINT64};
  static const xcoll_op ops[] = {XCOLL_SUM,  XCOLL_PROD, XCOLL_MIN, XCOLL_MAX,
                                 XCOLL_BAND, XCOLL_BOR,  XCOLL_BXOR};
  for (size_t d = 0; d < 6; d++)
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
      check_ints(ints[d], ops[k], (uint64_t)d * 7919 + (uint64_t)ops[k]);
  /* Known wrap-around values. */
  int8_t a8 = 127, b8 = 1;
  xcoll_reduce_inplace(&a8, &b8, 1, XCOLL_INT8, XCOLL_SUM);
  assert_int_equal(a8, -128);
  int32_t a32 = INT32_MIN, b32 = -1;
  xcoll_reduce_inplace(&a32, &b32, 1, XCOLL_INT32, XCOLL_PROD);
  assert_int_equal(a32, INT32_MIN); /* -2^31 * -1 wraps to -2^31 */
  uint64_t a64 = UINT64_MAX, b64 = 2;
  xcoll_reduce_inplace(&a64, &b64, 1, XCOLL_UINT64, XCOLL_SUM);
  assert_true(a64 == 1);
  /* Known bitwise values, the sign bit included. */
  int8_t x8[3] = {(int8_t)0xF0, (int8_t)0xF0, (int8_t)0xF0};
  int8_t y8[3] = {(int8_t)0x3C, (int8_t)0x3C, (int8_t)0x3C};
  xcoll_reduce_inplace(&x8[0], &y8[0], 1, XCOLL_INT8, XCOLL_BAND);
  xcoll_reduce_inplace(&x8[1], &y8[1], 1, XCOLL_INT8, XCOLL_BOR);
  xcoll_reduce_inplace(&x8[2], &y8[2], 1, XCOLL_INT8, XCOLL_BXOR);
  assert_int_equal((uint8_t)x8[0], 0x30);
  assert_int_equal((uint8_t)x8[1], 0xFC);
  assert_int_equal((uint8_t)x8[2], 0xCC);
  uint64_t p64 = 0xFFFF0000FFFF0000ULL, q64 = 0x0F0F0F0F0F0F0F0FULL;
  xcoll_reduce_inplace(&p64, &q64, 1, XCOLL_UINT64, XCOLL_BXOR);
  assert_true(p64 == 0xF0F00F0FF0F00F0FULL);
}

/* xcoll_scale_premul: every dtype against a product computed here (integers
 * in the unsigned type, wrapping; 16-bit types widened, multiplied in
 * float32, rounded to nearest even), out of place and in place. */
static void test_scale_premul(void **state) {
  (void)state;
  enum { LEN = 300 }; /* past one XC_FP_BLOCK of the 16-bit path */
  static int32_t i32[LEN], i32_out[LEN];
  static uint8_t u8[LEN], u8_out[LEN];
  static int64_t i64[LEN], i64_out[LEN];
  static double f64[LEN], f64_out[LEN];
  static float f32[LEN];
  static uint16_t h[LEN], h_out[LEN], bf[LEN], bf_out[LEN];
  int32_t s32 = -3;
  uint8_t s8 = 7;
  int64_t s64 = 0x100000001LL;
  double sd = -0.375;
  float sf = 1.0f / 3.0f;
  uint16_t sh = xcoll_float_to_half(0.1f), sbf = xcoll_float_to_bfloat16(0.1f);
  for (size_t i = 0; i < LEN; i++) {
    i32[i] = (int32_t)(mix(i) >> 32);
    u8[i] = (uint8_t)mix(i + 1);
    i64[i] = (int64_t)mix(i + 2);
    f64[i] = (double)(int64_t)(mix(i + 3) >> 40) / 7.0;
    f32[i] = (float)((int64_t)(mix(i + 4) >> 44) - 400000) / 3.0f;
    h[i] = xcoll_float_to_half((float)((int)(mix(i + 5) % 2001) - 1000) / 9.0f);
    bf[i] = xcoll_float_to_bfloat16((float)(mix(i + 6) % 100000) / 7.0f);
  }
  xcoll_scale_premul(i32_out, i32, LEN, XCOLL_INT32, &s32);
  xcoll_scale_premul(u8_out, u8, LEN, XCOLL_UINT8, &s8);
  xcoll_scale_premul(i64_out, i64, LEN, XCOLL_INT64, &s64);
  xcoll_scale_premul(f64_out, f64, LEN, XCOLL_FLOAT64, &sd);
  xcoll_scale_premul(h_out, h, LEN, XCOLL_FLOAT16, &sh);
  xcoll_scale_premul(bf_out, bf, LEN, XCOLL_BFLOAT16, &sbf);
  static float f32_in[LEN];
  memcpy(f32_in, f32, sizeof f32);
  xcoll_scale_premul(f32, f32, LEN, XCOLL_FLOAT32, &sf); /* in place */
  for (size_t i = 0; i < LEN; i++) {
    assert_int_equal(i32_out[i], (int32_t)((uint32_t)i32[i] * (uint32_t)s32));
    assert_int_equal(u8_out[i], (uint8_t)(u8[i] * s8));
    assert_true(i64_out[i] == (int64_t)((uint64_t)i64[i] * (uint64_t)s64));
    assert_true(f64_out[i] == f64[i] * sd);
    assert_true(f32[i] == f32_in[i] * sf);
    float wide_h = xcoll_half_to_float(h[i]) * xcoll_half_to_float(sh);
    assert_int_equal(h_out[i], xcoll_float_to_half(wide_h));
    float wide_bf =
        xcoll_bfloat16_to_float(bf[i]) * xcoll_bfloat16_to_float(sbf);
    assert_int_equal(bf_out[i], xcoll_float_to_bfloat16(wide_bf));
  }
  /* A value checked by hand: float16 3.0 * 0.75 = 2.25 (0x4080). */
  uint16_t three = 0x4200, three_quarters = 0x3A00, product = 0;
  xcoll_scale_premul(&product, &three, 1, XCOLL_FLOAT16, &three_quarters);
  assert_int_equal(product, 0x4080);
}

static double float_op(xcoll_op op, double x, double y) {
  switch (op) {
  case XCOLL_PROD:
    return x * y;
  case XCOLL_MIN:
    return isnan(x) || isnan(y) ? NAN : (x < y ? x : y);
  case XCOLL_MAX:
    return isnan(x) || isnan(y) ? NAN : (x > y ? x : y);
  default:
    return x + y;
  }
}

/* Random values with a few NaNs. float64 and float32 are compared with the
 * operation done in double and rounded once to the type (for +, *, min, max
 * of two floats that is the float32 result: double rounding is harmless when
 * 53 >= 2 * 24 + 2). The 16-bit types are compared with "widen to float32,
 * reduce, round to nearest even" using the conversions tested above. */
static void check_floats(xcoll_datatype dtype, xcoll_op op) {
  for (size_t i = 0; i < N; i++) {
    double x = ((double)(mix(i) >> 11) * 0x1p-53 - 0.5) * 200.0;
    double y = ((double)(mix(i + 77777) >> 11) * 0x1p-53 - 0.5) * 200.0;
    if (i % 97 == 5)
      x = NAN;
    if (i % 89 == 3)
      y = NAN;
    double want;
    if (dtype == XCOLL_FLOAT64) {
      double out, a = x, b = y;
      xcoll_reduce_into(&out, &a, &b, 1, dtype, op);
      want = float_op(op, a, b);
      assert_true(isnan(want) ? isnan(out) : out == want);
      continue;
    }
    if (dtype == XCOLL_FLOAT32) {
      float a = (float)x, b = (float)y, out;
      xcoll_reduce_into(&out, &a, &b, 1, dtype, op);
      float expect = (float)float_op(op, a, b);
      assert_true(isnan(expect) ? isnan(out) : out == expect);
      continue;
    }
    /* 16-bit: widen, reduce in float32, round back. */
    int half = dtype == XCOLL_FLOAT16;
    uint16_t a = half ? xcoll_float_to_half((float)x)
                      : xcoll_float_to_bfloat16((float)x);
    uint16_t b = half ? xcoll_float_to_half((float)y)
                      : xcoll_float_to_bfloat16((float)y);
    float wa = half ? xcoll_half_to_float(a) : xcoll_bfloat16_to_float(a);
    float wb = half ? xcoll_half_to_float(b) : xcoll_bfloat16_to_float(b);
    float wide = (float)float_op(op, wa, wb);
    uint16_t expect =
        half ? xcoll_float_to_half(wide) : xcoll_float_to_bfloat16(wide);
    uint16_t out;
    xcoll_reduce_into(&out, &a, &b, 1, dtype, op);
    if (isnan(wide)) {
      float back =
          half ? xcoll_half_to_float(out) : xcoll_bfloat16_to_float(out);
      assert_true(isnan(back));
    } else {
      assert_int_equal(out, expect);
    }
  }
}

static void test_float_ops(void **state) {
  (void)state;
  static const xcoll_datatype floats[] = {XCOLL_FLOAT16, XCOLL_BFLOAT16,
                                          XCOLL_FLOAT32, XCOLL_FLOAT64};
  for (size_t d = 0; d < 4; d++) /* the ops defined on floats */
    for (int op = XCOLL_SUM; op <= XCOLL_AVG; op++)
      check_floats(floats[d], (xcoll_op)op);
}

/* Long vectors through the vectorised and blocked paths, with aliasing
 * dst == b as pipeline.c uses it. */
static void test_long_vectors_and_aliasing(void **state) {
  (void)state;
  enum { LEN = 1037 };
  static uint16_t ha[LEN], hb[LEN], hout[LEN];
  static float fa[LEN], fb[LEN], fout[LEN];
  for (size_t i = 0; i < LEN; i++) {
    fa[i] = (float)((int)(i % 31) - 15) / 4.0f;
    fb[i] = (float)((int)(i % 17) - 8) / 2.0f;
    ha[i] = xcoll_float_to_half(fa[i]);
    hb[i] = xcoll_float_to_half(fb[i]);
  }
  xcoll_reduce_into(fout, fa, fb, LEN, XCOLL_FLOAT32, XCOLL_SUM);
  memcpy(hout, hb, sizeof hb);
  xcoll_reduce_into(hout, ha, hout, LEN, XCOLL_FLOAT16, XCOLL_SUM);
  for (size_t i = 0; i < LEN; i++) {
    assert_true(fout[i] == fa[i] + fb[i]);
    assert_true(xcoll_half_to_float(hout[i]) == fa[i] + fb[i]);
  }
  /* dst == a == b: x op x. */
  memcpy(fout, fa, sizeof fa);
  xcoll_reduce_inplace(fout, fout, LEN, XCOLL_FLOAT32, XCOLL_SUM);
  for (size_t i = 0; i < LEN; i++)
    assert_true(fout[i] == 2 * fa[i]);
  /* count 0 touches nothing */
  xcoll_reduce_into(NULL, NULL, NULL, 0, XCOLL_FLOAT32, XCOLL_SUM);
}

static void test_scale_avg(void **state) {
  (void)state;
  float f[3] = {3.0f, 1.0f, -7.5f};
  xcoll_scale_avg(f, 3, XCOLL_FLOAT32, 3);
  assert_true(f[0] == 1.0f && f[1] == 1.0f / 3.0f && f[2] == -2.5f);
  double d[2] = {1.0, 10.0};
  xcoll_scale_avg(d, 2, XCOLL_FLOAT64, 4);
  assert_true(d[0] == 0.25 && d[1] == 2.5);
  /* float16: divide in float32, round once: 1/3 -> 0x3555. */
  uint16_t h[2] = {xcoll_float_to_half(1.0f), xcoll_float_to_half(6.0f)};
  xcoll_scale_avg(h, 2, XCOLL_FLOAT16, 3);
  assert_int_equal(h[0], 0x3555);
  assert_int_equal(h[1], 0x4000);
  uint16_t b[1] = {xcoll_float_to_bfloat16(1.0f)};
  xcoll_scale_avg(b, 1, XCOLL_BFLOAT16, 3);
  assert_int_equal(b[0], xcoll_float_to_bfloat16(1.0f / 3.0f));
  assert_int_equal(b[0], 0x3EAB);
}

static void test_check_dtype_op(void **state) {
  (void)state;
  for (int d = 0; d < XCOLL_NUM_DATATYPES; d++)
    for (int op = 0; op < XCOLL_NUM_OPS; op++) {
      int is_float = d == XCOLL_FLOAT16 || d == XCOLL_BFLOAT16 ||
                     d == XCOLL_FLOAT32 || d == XCOLL_FLOAT64;
      int bitwise = op == XCOLL_BAND || op == XCOLL_BOR || op == XCOLL_BXOR;
      xcoll_status want = (op == XCOLL_AVG && !is_float) || (bitwise && is_float)
                              ? XCOLL_ERR_INVALID_ARGUMENT
                              : XCOLL_SUCCESS;
      assert_int_equal(
          xcoll_check_dtype_op(NULL, (xcoll_datatype)d, (xcoll_op)op), want);
    }
  assert_int_equal(xcoll_check_dtype_op(NULL, XCOLL_INT32, XCOLL_AVG),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(),
                         "avg is defined only for floating-point types"));
  assert_non_null(strstr(xcoll_last_error(), "int32"));
  assert_int_equal(xcoll_check_dtype_op(NULL, XCOLL_BFLOAT16, XCOLL_BXOR),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "op bxor with dtype bfloat16"));
  assert_non_null(strstr(xcoll_last_error(), "integer types"));
  assert_int_equal(xcoll_check_dtype_op(NULL, (xcoll_datatype)42, XCOLL_SUM),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "dtype 42"));
  assert_int_equal(xcoll_check_dtype_op(NULL, XCOLL_FLOAT32, (xcoll_op)-1),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "op -1"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_float_to_half_table),
      cmocka_unit_test(test_half_to_float_table),
      cmocka_unit_test(test_half_nan),
      cmocka_unit_test(test_bfloat16_table),
      cmocka_unit_test(test_integer_ops),
      cmocka_unit_test(test_float_ops),
      cmocka_unit_test(test_long_vectors_and_aliasing),
      cmocka_unit_test(test_scale_avg),
      cmocka_unit_test(test_scale_premul),
      cmocka_unit_test(test_check_dtype_op),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
