/* test_dtype.c - core/dtype.c: every dtype x op against a scalar reference,
 * float16 and bfloat16 conversions against tables of known encodings
 * (including subnormals, overflow, NaN and ties to even), xcoll_scale_avg,
 * and xcoll_check_dtype_op's errors. */
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
  for (size_t d = 0; d < 6; d++)
    for (int op = XCOLL_SUM; op <= XCOLL_MAX; op++)
      check_ints(ints[d], (xcoll_op)op, (uint64_t)d * 7919 + (uint64_t)op);
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
  for (size_t d = 0; d < 4; d++)
    for (int op = XCOLL_SUM; op < XCOLL_NUM_OPS; op++)
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
      xcoll_status want = (op == XCOLL_AVG && !is_float)
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
      cmocka_unit_test(test_check_dtype_op),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
