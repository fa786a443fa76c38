/*
 * test_mixed.c - trainer/mixed.c's casts against an independent reference,
 * and the loss scaler's rules.
 *
 * The reference does not touch bits: a 16-bit pattern's value comes from
 * its fields by ldexp (IEEE 754 binary16 and bfloat16 definitions), and
 * narrowing a float32 x is a search of the sorted table of all 16-bit
 * values for the nearest one, ties going to the even pattern (last bit 0).
 * Infinity takes part as the value one ulp past the largest finite number
 * (2^16 for float16, 2^128 for bfloat16), which is IEEE's overflow rule
 * under round to nearest even. Checked: all 65536 patterns widen to the
 * reference value and narrow back to themselves (NaN stays NaN); every
 * midpoint between neighbours, one float32 ulp either side of it, the
 * specials (inf, nan, -0, float32 subnormals) and 4 million random float32
 * bit patterns narrow to the reference.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mixed.h"

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      if (failures++ < 20) {                                                   \
        printf("FAIL %s:%d: ", __FILE__, __LINE__);                            \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
      }                                                                        \
    }                                                                          \
  } while (0)

typedef struct format {
  const char *name;
  int exp_bits, mant_bits, bias;
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
  double table[32768]; /* values of the non-negative patterns 0..0x7fff */
  int finite_top;      /* pattern of the largest finite value */
} format;

/* Value of a non-negative pattern from its fields; NAN for NaN. */
static double reference_value(const format *f, unsigned pattern) {
  unsigned emax = (1u << f->exp_bits) - 1;
  unsigned e = pattern >> f->mant_bits;
  unsigned m = pattern & ((1u << f->mant_bits) - 1);
  if (e == emax)
    return m ? NAN : INFINITY;
  if (e == 0) /* subnormal */
    return ldexp((double)m, 1 - f->bias - f->mant_bits);
  return ldexp((double)((1u << f->mant_bits) + m),
               (int)e - f->bias - f->mant_bits);
}

static void build_table(format *f) {
  for (unsigned p = 0; p < 32768; p++)
    f->table[p] = reference_value(f, p);
  f->finite_top = (int)(((1u << f->exp_bits) - 1) << f->mant_bits) - 1;
}

/* Nearest pattern to x (not NaN) by searching the table. */
static uint16_t reference_narrow(const format *f, float x) {
  double a = fabs((double)x);
  uint16_t sign = signbit(x) ? 0x8000u : 0;
  int inf = f->finite_top + 1;
  /* Infinity stands one ulp past the largest finite value. */
  double top = f->table[f->finite_top];
  double inf_value = top + (top - f->table[f->finite_top - 1]);
  if (a >= inf_value)
    return (uint16_t)(sign | inf);
  int lo = 0, hi = inf; /* table[lo] <= a < value(hi) */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (f->table[mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  double vlo = f->table[lo], vhi = hi == inf ? inf_value : f->table[hi];
  int pick;
  if (a - vlo < vhi - a)
    pick = lo;
  else if (a - vlo > vhi - a)
    pick = hi;
  else
    pick = (lo & 1) ? hi : lo; /* tie: the even pattern */
  return (uint16_t)(sign | pick);
}

static int is_nan16(const format *f, uint16_t h) {
  return isnan(reference_value(f, h & 0x7fffu));
}

static void check_narrow(const format *f, float x) {
  uint16_t got = f->narrow(x), want = reference_narrow(f, x);
  CHECK(got == want, "%s: narrow(%a) = 0x%04x, reference 0x%04x", f->name,
        (double)x, got, want);
}

static float next_up(float x) {
  return nextafterf(x, INFINITY);
}
static float next_down(float x) {
  return nextafterf(x, -INFINITY);
}

static void test_format(format *f) {
  build_table(f);
  /* Every pattern: widening matches, narrowing returns it. */
  for (unsigned p = 0; p < 65536; p++) {
    uint16_t h = (uint16_t)p;
    float w = f->widen(h);
    double want = reference_value(f, p & 0x7fffu);
    if (p & 0x8000u)
      want = -want;
    if (isnan(want)) {
      CHECK(isnan(w), "%s: widen(0x%04x) = %a, want NaN", f->name, p,
            (double)w);
      CHECK(is_nan16(f, f->narrow(w)), "%s: NaN 0x%04x did not stay NaN",
            f->name, p);
      continue;
    }
    CHECK((double)w == want && (signbit(w) != 0) == (int)(p >> 15),
          "%s: widen(0x%04x) = %a, reference %a", f->name, p, (double)w, want);
    CHECK(f->narrow(w) == h, "%s: round trip of 0x%04x gave 0x%04x", f->name, p,
          f->narrow(w));
  }
  /* Midpoints between neighbours (ties), and one float32 ulp around them. */
  for (int p = 0; p < f->finite_top; p++) {
    double mid = 0.5 * (f->table[p] + f->table[p + 1]);
    float x = (float)mid;
    if ((double)x != mid)
      continue; /* not a float32 (never for these formats) */
    for (int s = 0; s < 2; s++) {
      float y = s ? -x : x;
      check_narrow(f, y);
      check_narrow(f, next_up(y));
      check_narrow(f, next_down(y));
    }
    CHECK(f->narrow(x) == ((p & 1) ? p + 1 : p),
          "%s: tie between 0x%04x and 0x%04x went to 0x%04x", f->name, p, p + 1,
          f->narrow(x));
  }
  /* Overflow boundary and specials. */
  double top = f->table[f->finite_top];
  double half_ulp = 0.5 * (top - f->table[f->finite_top - 1]);
  check_narrow(f, (float)(top + half_ulp));
  check_narrow(f, next_down((float)(top + half_ulp)));
  CHECK(f->narrow((float)(top + half_ulp)) == f->finite_top + 1,
        "%s: the tie past the largest finite value must overflow", f->name);
  CHECK(f->narrow(INFINITY) == f->finite_top + 1, "%s: inf", f->name);
  CHECK(f->narrow(-INFINITY) == (0x8000 | (f->finite_top + 1)), "%s: -inf",
        f->name);
  CHECK(is_nan16(f, f->narrow(NAN)), "%s: nan", f->name);
  CHECK(is_nan16(f, f->narrow(-NAN)), "%s: -nan", f->name);
  CHECK(f->narrow(-0.0f) == 0x8000, "%s: -0", f->name);
  CHECK(f->narrow(FLT_MAX) == f->finite_top + 1, "%s: FLT_MAX", f->name);
  check_narrow(f, 0x1p-149f); /* smallest float32 subnormal */
  check_narrow(f, 0x1p-127f);
  check_narrow(f, -0x1.fffffcp-127f);
  /* Random float32 bit patterns (xorshift64*, fixed seed). */
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 4000000; i++) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    uint32_t bits = (uint32_t)((state * 0x2545f4914f6cdd1dull) >> 32);
    /* Half of them in float16's range, where its rounding happens. */
    if (i & 1)
      bits = (bits & 0x807fffffu) | ((uint32_t)(100 + (bits >> 23) % 45) << 23);
    float x;
    memcpy(&x, &bits, sizeof x);
    if (isnan(x))
      CHECK(is_nan16(f, f->narrow(x)), "%s: NaN %08x", f->name, bits);
    else
      check_narrow(f, x);
  }
}

static void test_scaler(void) {
  loss_scaler ls;
  loss_scaler_init(&ls, 1, 8.0, 2);
  float g[3] = {8.0f, -16.0f, 4.0f};
  CHECK(loss_scaler_unscale(&ls, g, 3) == 0 && g[0] == 1.0f && g[1] == -2.0f,
        "unscale by 8");
  float bad[2] = {1.0f, INFINITY};
  CHECK(loss_scaler_unscale(&ls, bad, 2) == 1, "inf found");
  float nan[1] = {NAN};
  CHECK(loss_scaler_unscale(&ls, nan, 1) == 1, "nan found");
  CHECK(loss_scaler_update(&ls, 1) == 1 && ls.scale == 4.0 &&
            ls.skipped_steps == 1,
        "backoff: skip and halve");
  CHECK(loss_scaler_update(&ls, 0) == 0 && ls.scale == 4.0, "one good step");
  CHECK(loss_scaler_update(&ls, 0) == 0 && ls.scale == 8.0,
        "growth after 2 good steps");
  CHECK(loss_scaler_update(&ls, 0) == 0 && ls.scale == 8.0, "counter reset");
  CHECK(loss_scaler_update(&ls, 1) == 1 && ls.scale == 4.0, "backoff again");
  CHECK(loss_scaler_update(&ls, 0) == 0 && ls.scale == 4.0,
        "a skip resets the good-step counter");
}

int main(void) {
  static format f16 = {"float16",        5,   10, 15, mixed_f32_to_f16,
                       mixed_f16_to_f32, {0}, 0};
  static format bf16 = {"bfloat16",        8,   7, 127, mixed_f32_to_bf16,
                        mixed_bf16_to_f32, {0}, 0};
  test_format(&f16);
  test_format(&bf16);
  test_scaler();
  /* Spot values computed by hand from the definitions. */
  CHECK(mixed_f32_to_f16(65504.0f) == 0x7bff, "65504");
  CHECK(mixed_f32_to_f16(65519.0f) == 0x7bff, "65519 rounds down");
  CHECK(mixed_f32_to_f16(65520.0f) == 0x7c00, "65520 ties to inf (even)");
  CHECK(mixed_f32_to_f16(0x1p-24f) == 0x0001, "smallest subnormal");
  CHECK(mixed_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 ties to zero (even)");
  CHECK(mixed_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 * 2^-24 ties to 2");
  CHECK(mixed_f32_to_f16(0x1.000002p-25f) == 0x0001, "just past 2^-25");
  CHECK(mixed_f32_to_bf16(1.00390625f) == 0x3f80, "1 + 2^-8 ties to 1");
  CHECK(mixed_f32_to_bf16(1.01171875f) == 0x3f82, "1 + 3*2^-8 ties up");
  CHECK(mixed_f16_to_f32(0x3c00) == 1.0f && mixed_bf16_to_f32(0x3f80) == 1.0f,
        "one");
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("casts: all 65536 patterns, all ties and 4M random floats agree "
         "with the reference for float16 and bfloat16; loss scaler rules ok\n");
  return 0;
}
