/* conformance.c - the multi-process conformance suite every backend must pass.
 *
 * Run one copy per rank under a launcher (xcollrun, torchrun-style env):
 *   xcollrun --nproc-per-node 4 --master-port 0 conformance [options]
 * It uses only the public header. Every rank builds its input from a
 * deterministic function of (rank, index, dtype, op), so every rank can
 * compute the expected output of a collective LOCALLY for all ranks' inputs
 * and compare what the library returned with it, element by element.
 *
 * Options:
 *   --quick          fewer combinations (in-place and the blocking modes are
 *                    rotated over the combinations instead of all crossed)
 *   --coll NAME      only this collective (allreduce, allgather,
 *                    reduce_scatter, broadcast, reduce, barrier, errors);
 *                    may be repeated
 *   --max-count N    skip element counts above N (default 131072 + a bit:
 *                    the 4M count only runs when N >= 4194304)
 *   --min-count N    skip element counts below N
 *   --backend NAME   set XCOLL_BACKEND and check that the communicator got it
 *   --lose-rank R    after one allreduce rank R SIGKILLs itself; the others
 *                    see a collective fail, take R from
 *                    xcoll_comm_failed_ranks, shrink with
 *                    XCOLL_SHRINK_ABORT and run the whole suite on the
 *                    shrunk communicator, whose ranks and results must be
 *                    those of a fresh job of one rank fewer (the expected
 *                    values are computed from the new ranks). Run it under
 *                    xcollrun with XCOLLRUN_GRACE_S large: the survivors
 *                    ignore the SIGTERM xcollrun sends when R dies.
 * Exit status 0 when every rank saw every result it expected. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

#define BIG_COUNT ((size_t)4 * 1024 * 1024)
#define GUARD_ELEMS 16     /* sentinel elements after every output buffer */
#define SENTINEL_BYTE 0xA5 /* fill of bytes that must not be written */
#define MAX_PRINTED_PER_CASE 3
#define MAX_PRINTED_TOTAL 30

enum coll_kind {
  COLL_ALLREDUCE,
  COLL_ALLGATHER,
  COLL_REDUCE_SCATTER,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_BARRIER,
  COLL_ERRORS,
  NUM_COLLS
};
static const char *const coll_names[NUM_COLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast",
    "reduce",    "barrier",   "errors"};

/* How a collective is completed: blocking call, i-call + wait, i-call +
 * xcoll_test polling + wait. */
enum mode { MODE_BLOCKING, MODE_WAIT, MODE_TEST, NUM_MODES };

/* A pseudo-op of this suite, after the real ones: XCOLL_SUM on inputs whose
 * exact sum is NOT representable in the dtype (float16, bfloat16, float32),
 * so that the result shows the rounding mode; see ties_input(). */
#define OP_SUM_TIES XCOLL_NUM_OPS
/* Another: a pre-multiplied sum (xcoll_op_create_premul_sum) made for the
 * case's dtype with the scalar below, destroyed as soon as the call that
 * takes it has returned (allowed, as in NCCL, before a non-blocking call
 * completes). */
#define OP_PREMUL (XCOLL_NUM_OPS + 1)
/* The scalar of OP_PREMUL: exact in every float type; negative for the
 * signed integer types so that the products wrap through the sign. */
#define PREMUL_FLOAT_SCALAR 0.75
static uint64_t premul_int_scalar(xcoll_datatype dt);

static int is_bitwise(int op) {
  return op == XCOLL_BAND || op == XCOLL_BOR || op == XCOLL_BXOR;
}
static const char *const mode_names[NUM_MODES] = {"blocking", "wait", "test"};

static struct {
  xcoll_comm_t comm;
  int rank;
  int world_size;
  int quick;
  int coll_enabled[NUM_COLLS];
  size_t max_count;
  size_t min_count;
  long cases;
  long failed_cases;
  long printed;
  long combo; /* rotates mode/in-place choices in --quick */
} g;

/* ---- deterministic inputs ---- */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t hash4(uint64_t r, uint64_t i, uint64_t dtype, uint64_t salt) {
  return mix64(mix64(mix64(r * 1000003ULL + salt) ^ i) + dtype);
}

static int is_float(xcoll_datatype dt) {
  return dt == XCOLL_FLOAT16 || dt == XCOLL_BFLOAT16 || dt == XCOLL_FLOAT32 ||
         dt == XCOLL_FLOAT64;
}
static int is_signed_int(xcoll_datatype dt) {
  return dt == XCOLL_INT8 || dt == XCOLL_INT32 || dt == XCOLL_INT64;
}
static int int_bits(xcoll_datatype dt) {
  return (int)(8 * xcoll_datatype_size(dt));
}
static uint64_t int_mask(xcoll_datatype dt) {
  int bits = int_bits(dt);
  return bits == 64 ? ~0ULL : ((1ULL << bits) - 1);
}
/* Sign-extend the low bits of v as a two's complement number of dt's width. */
static int64_t sign_extend(uint64_t v, xcoll_datatype dt) {
  int bits = int_bits(dt);
  if (bits == 64)
    return (int64_t)v;
  uint64_t m = 1ULL << (bits - 1);
  v &= int_mask(dt);
  return (int64_t)((v ^ m) - m);
}

static uint64_t premul_int_scalar(xcoll_datatype dt) {
  return is_signed_int(dt) ? (uint64_t)(int64_t)-3 : 3;
}

/* Integer input of rank r, element i, as dt's bits in the low end of a
 * uint64 (sign-extended for signed types). Chosen per op so that results are
 * meaningful: SUM mixes carries and (for 8-bit and unsigned types) wraps;
 * PROD uses factors in {1,2,3} / {-1,1,2}; MIN/MAX and OP_PREMUL (whose
 * products wrap) use the full range. BAND sets each bit with probability
 * 7/8 and BOR with 1/8, so that at 8 ranks about a third of the bits differ
 * from what an all-zero (BAND) or all-one (BOR) answer would give; BXOR
 * sets half. */
static uint64_t int_input(int r, size_t i, xcoll_datatype dt, int op) {
  uint64_t h = hash4((uint64_t)r, i, (uint64_t)dt, 17);
  int sgn = is_signed_int(dt);
  switch (op) {
  case XCOLL_PROD: {
    unsigned k = (unsigned)(h % 8);
    int64_t f = k == 0 ? 2 : (k == 1 ? (sgn ? -1 : 3) : 1);
    return (uint64_t)f;
  }
  case XCOLL_MIN:
  case XCOLL_MAX:
  case OP_PREMUL:
  case -1: /* copies: any bits */
    return sgn ? (uint64_t)sign_extend(h, dt) : (h & int_mask(dt));
  case XCOLL_BAND:
    return (h | mix64(h) | mix64(h + 1)) & int_mask(dt);
  case XCOLL_BOR:
    return (h & mix64(h) & mix64(h + 1)) & int_mask(dt);
  case XCOLL_BXOR:
    return h & int_mask(dt);
  default: {                                  /* SUM */
    int64_t small = (int64_t)(h % 201) - 100; /* [-100, 100] */
    switch (dt) {
    case XCOLL_INT8:
      return (uint64_t)small; /* wraps when 8 ranks add up past 127 */
    case XCOLL_INT32:
      return (uint64_t)(small * (1LL << 20)); /* |sum| < 2^30: no overflow */
    case XCOLL_INT64:
      return (uint64_t)(small * (1LL << 40)); /* |sum| < 2^50 */
    case XCOLL_UINT8:
      return h % 256; /* wraps */
    case XCOLL_UINT32:
      return 0xFFFFFF00ULL + (h % 256); /* every sum of >= 2 wraps */
    default:                            /* UINT64 */
      return 0xFFFFFFFFFFFFFF00ULL + (h % 256);
    }
  }
  }
}

static double ties_input(int r, size_t i, xcoll_datatype dt, int P);

/* Float input, exactly representable in dt. For SUM/AVG the values are
 * dyadic with few significant bits, so that any sum of up to 8 of them is
 * exact in dt whatever the reduction order: an exact comparison is then
 * valid. PROD uses {1, 2, -1, 0.5} (exact products). MIN/MAX any value. */
static double float_input(int r, size_t i, xcoll_datatype dt, int op) {
  uint64_t h = hash4((uint64_t)r, i, (uint64_t)dt, 29);
  int narrow = dt == XCOLL_FLOAT16 || dt == XCOLL_BFLOAT16;
  switch (op) {
  case XCOLL_PROD: {
    unsigned k = (unsigned)(h % 8);
    return k == 0 ? 2.0 : k == 1 ? -1.0 : k == 2 ? 0.5 : 1.0;
  }
  case XCOLL_MIN:
  case XCOLL_MAX:
  case -1:
    if (narrow) /* integers in [-200, 200]: exact in both 16-bit types */
      return (double)((int64_t)(h % 401) - 200);
    /* 24 significant bits at most: exact in float32 */
    return ldexp((double)((int64_t)(h % (1u << 24)) - (1 << 23)),
                 (int)((h >> 40) % 41) - 20);
  case OP_SUM_TIES:
    return ties_input(r, i, dt, g.world_size);
  case OP_PREMUL:
    /* Times 0.75 and summed over 8 ranks: float32 and float64 as for SUM
     * below (3k/256, 15 bits; 3k * 2^-22, 35 bits); the 16-bit types take
     * integers in [-8, 8]: 3k/4 summed is at most 192 in quarters, 8
     * significant bits, exact in bfloat16. */
    if (narrow)
      return (double)((int64_t)(h % 17) - 8);
    return float_input(r, i, dt, XCOLL_SUM);
  default:      /* SUM, AVG */
    if (narrow) /* halves in [-8, 8]: sums of 8 are <= 64 with 1 bit
                   after the point, 8 significant bits: exact in bfloat16 */
      return (double)((int64_t)(h % 33) - 16) / 2.0;
    if (dt == XCOLL_FLOAT32) /* k/64, |k| <= 1000: 14 significant bits */
      return (double)((int64_t)(h % 2001) - 1000) / 64.0;
    /* float64: k * 2^-20 with |k| < 2^30: sums of 8 fit 34 bits */
    return ldexp((double)((int64_t)(h % (1u << 31)) - (1LL << 30)), -20);
  }
}

/* Significant bits of a float dtype (with the implicit one). */
static int precision_bits(xcoll_datatype dt) {
  return dt == XCOLL_FLOAT16 ? 11 : dt == XCOLL_BFLOAT16 ? 8 : 24;
}

/* Input of rank r at element i for OP_SUM_TIES (world size P >= 2).
 *
 * Why these values give an exact reference whatever the reduction order:
 * with p the precision of dt and g = 2^(1-p) (the spacing of dt in [1, 2)),
 * every input is x_r = k_r * g * 2^s * sign with integers k_r > 0, and
 *   K = sum_r k_r = 2^p + t,  t odd,  0 < t < min_r k_r.
 * Any sum of fewer than P inputs leaves out some k_r > t, so its k-sum is
 * below 2^p: it is a multiple of g below 2 (times 2^s), which needs at most
 * p significant bits, so every partial sum that any algorithm forms (ring,
 * recursive doubling, Rabenseifner's halving, a binomial tree, the extra
 * rank folded in when P is not a power of two, in any association and
 * whether partial sums are kept in float32 or rounded to dt at each hop) is
 * exact. Only the last addition, of two disjoint partial sums covering all
 * P ranks, gives K * g * 2^s, which lies in [2, 4) * 2^s where the spacing
 * is 2g: K is odd, so the exact sum sits exactly halfway between two
 * neighbours and must be rounded once. The correct result is therefore
 * round-to-nearest-even of the exact sum, with no error bound to argue
 * about: tol = 0. A library that truncates, rounds halves up or away from
 * zero, or rounds twice through a coarser type gets about half of these
 * elements wrong (the sign and the scale 2^s vary by element, so rounding
 * towards +inf or -inf is caught too). */
static double ties_input(int r, size_t i, xcoll_datatype dt, int P) {
  const int p = precision_bits(dt);
  const int64_t base = ((int64_t)1 << p) / P;
  const int64_t spread = base / (4 * P); /* |d_r| <= base / (4P) */
  uint64_t h0 = hash4(0, i, (uint64_t)dt, 41);
  /* t odd in [1, base / 2]: below every k_r, which are >= 3/4 base. */
  int64_t t = 2 * (int64_t)(h0 % (uint64_t)(base / 4 > 1 ? base / 4 : 1)) + 1;
  int s = (int)((h0 >> 32) % 7) - 3;
  double sign = (h0 >> 40) & 1 ? -1.0 : 1.0;
  int64_t k, others = 0;
  for (int q = 1; q < P; q++) {
    uint64_t h = hash4((uint64_t)q, i, (uint64_t)dt, 43);
    int64_t kq = base + (int64_t)(h % (uint64_t)(2 * spread + 1)) - spread;
    others += kq;
    if (q == r)
      return sign * ldexp((double)kq, 1 - p + s);
  }
  k = ((int64_t)1 << p) + t - others; /* rank 0 completes K */
  return sign * ldexp((double)k, 1 - p + s);
}

/* ---- float16 / bfloat16 encodings, written here independently of the
 * library so that the reference does not share its bugs ---- */

static uint16_t double_to_half(double d) {
  /* Via float32 is exact for the values generated here; rounding is RNE. */
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) /* inf, nan */
    return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31)
    return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) { /* subnormal or zero */
    if (exp < -10)
      return (uint16_t)sign;
    mant |= 0x800000u;
    int shift = 14 - exp;
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1)))
      half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
    half++; /* may carry into the exponent: that is correct rounding */
  return (uint16_t)half;
}

static double half_to_double(uint16_t h) {
  int sign = h >> 15;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = ldexp(mant + 1024, exp - 25);
  return sign ? -v : v;
}

static uint16_t double_to_bf16(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static double bf16_to_double(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Store a value (uint64 bits for integers, double for floats) at elem. */
static void store_elem(void *buf, size_t idx, xcoll_datatype dt, uint64_t iv,
                       double fv) {
  char *p = (char *)buf + idx * xcoll_datatype_size(dt);
  switch (dt) {
  case XCOLL_INT8:
  case XCOLL_UINT8: {
    uint8_t v = (uint8_t)iv;
    memcpy(p, &v, 1);
    break;
  }
  case XCOLL_INT32:
  case XCOLL_UINT32: {
    uint32_t v = (uint32_t)iv;
    memcpy(p, &v, 4);
    break;
  }
  case XCOLL_INT64:
  case XCOLL_UINT64:
    memcpy(p, &iv, 8);
    break;
  case XCOLL_FLOAT16: {
    uint16_t v = double_to_half(fv);
    memcpy(p, &v, 2);
    break;
  }
  case XCOLL_BFLOAT16: {
    uint16_t v = double_to_bf16(fv);
    memcpy(p, &v, 2);
    break;
  }
  case XCOLL_FLOAT32: {
    float v = (float)fv;
    memcpy(p, &v, 4);
    break;
  }
  default:
    memcpy(p, &fv, 8);
    break;
  }
}

/* Read an element: integers as bits (masked to the type's width), floats as
 * double (exact widening). */
static void load_elem(const void *buf, size_t idx, xcoll_datatype dt,
                      uint64_t *iv, double *fv) {
  const char *p = (const char *)buf + idx * xcoll_datatype_size(dt);
  *iv = 0;
  *fv = 0;
  switch (dt) {
  case XCOLL_INT8:
  case XCOLL_UINT8: {
    uint8_t v;
    memcpy(&v, p, 1);
    *iv = v;
    break;
  }
  case XCOLL_INT32:
  case XCOLL_UINT32: {
    uint32_t v;
    memcpy(&v, p, 4);
    *iv = v;
    break;
  }
  case XCOLL_INT64:
  case XCOLL_UINT64:
    memcpy(iv, p, 8);
    break;
  case XCOLL_FLOAT16: {
    uint16_t v;
    memcpy(&v, p, 2);
    *fv = half_to_double(v);
    break;
  }
  case XCOLL_BFLOAT16: {
    uint16_t v;
    memcpy(&v, p, 2);
    *fv = bf16_to_double(v);
    break;
  }
  case XCOLL_FLOAT32: {
    float v;
    memcpy(&v, p, 4);
    *fv = v;
    break;
  }
  default:
    memcpy(fv, p, 8);
    break;
  }
}

/* Fill buf[0..count) with rank r's input for elements [first, first+count). */
static void fill_input_direct(void *buf, size_t first, size_t count, int r,
                              xcoll_datatype dt, int op) {
  for (size_t k = 0; k < count; k++) {
    if (is_float(dt))
      store_elem(buf, k, dt, 0, float_input(r, first + k, dt, op));
    else
      store_elem(buf, k, dt, int_input(r, first + k, dt, op), 0);
  }
}

/* The value rank r contributes at element i, read back through the dtype so
 * that the reference uses exactly what was sent. */
static void input_value_direct(int r, size_t i, xcoll_datatype dt, int op,
                               uint64_t *iv, double *fv) {
  /* What load_elem reads back, without the store for the types that keep
   * every bit: integers masked to their width, float32 through a float. */
  *iv = 0;
  *fv = 0;
  if (!is_float(dt)) {
    *iv = int_input(r, i, dt, op) & int_mask(dt);
  } else if (dt == XCOLL_FLOAT64) {
    *fv = float_input(r, i, dt, op);
  } else if (dt == XCOLL_FLOAT32) {
    *fv = (float)float_input(r, i, dt, op);
  } else {
    unsigned char tmp[8];
    fill_input_direct(tmp, i, 1, r, dt, op);
    load_elem(tmp, 0, dt, iv, fv);
  }
}

static double unit_roundoff(xcoll_datatype dt) {
  switch (dt) {
  case XCOLL_FLOAT16:
    return ldexp(1, -11);
  case XCOLL_BFLOAT16:
    return ldexp(1, -8);
  case XCOLL_FLOAT32:
    return ldexp(1, -24);
  default:
    return ldexp(1, -53);
  }
}

/* Expected result of reducing element i over all ranks with op.
 * Integers: computed in uint64 arithmetic, which agrees with the type's own
 * wrapping arithmetic modulo 2^bits. Floats: in double; for SUM/PROD/MIN/MAX
 * the inputs make the result exact (*tol = 0). For AVG the division by P is
 * not exact. A sum of P terms computed in any order, with every partial
 * result rounded (the ring rounds each hop for 16-bit types) and with the
 * division by P done either once at the end or as a premultiplication of each
 * input by 1/P, is within (P-1)*u*sum|x_i|/P of the exact value, plus one
 * rounding (u*sum|x_i|/P) for the final division or the premultiplication:
 * |error| <= (P+1) * u * sum|x_i| / P, with u the unit roundoff of dt. */
static void reference_direct(size_t i, xcoll_datatype dt, int op, uint64_t *iv,
                             double *fv, double *tol) {
  int P = g.world_size;
  *tol = 0;
  if (!is_float(dt)) {
    uint64_t acc = 0;
    for (int r = 0; r < P; r++) {
      uint64_t v;
      double unused;
      input_value_direct(r, i, dt, op, &v, &unused);
      if (op == OP_PREMUL) /* modulo 2^64, then 2^bits: the type's wrap */
        v *= premul_int_scalar(dt);
      if (r == 0) {
        acc = v;
        continue;
      }
      switch (op) {
      case XCOLL_SUM:
      case OP_PREMUL:
        acc += v;
        break;
      case XCOLL_BAND:
        acc &= v;
        break;
      case XCOLL_BOR:
        acc |= v;
        break;
      case XCOLL_BXOR:
        acc ^= v;
        break;
      case XCOLL_PROD:
        acc *= v;
        break;
      case XCOLL_MIN:
      case XCOLL_MAX: {
        int less = is_signed_int(dt)
                       ? sign_extend(v, dt) < sign_extend(acc, dt)
                       : (v & int_mask(dt)) < (acc & int_mask(dt));
        int greater = is_signed_int(dt)
                          ? sign_extend(v, dt) > sign_extend(acc, dt)
                          : (v & int_mask(dt)) > (acc & int_mask(dt));
        if ((op == XCOLL_MIN && less) || (op == XCOLL_MAX && greater))
          acc = v;
        break;
      }
      }
    }
    *iv = acc & int_mask(dt);
    return;
  }
  double acc = 0, sum_abs = 0;
  for (int r = 0; r < P; r++) {
    uint64_t unused;
    double v;
    input_value_direct(r, i, dt, op, &unused, &v);
    if (op == OP_PREMUL)
      v *= PREMUL_FLOAT_SCALAR; /* exact: see float_input() */
    sum_abs += fabs(v);
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (op) {
    case XCOLL_SUM:
    case XCOLL_AVG:
    case OP_SUM_TIES:
    case OP_PREMUL:
      acc += v; /* exact: see ties_input() and float_input() */
      break;
    case XCOLL_PROD:
      acc *= v;
      break;
    case XCOLL_MIN:
      acc = v < acc ? v : acc;
      break;
    case XCOLL_MAX:
      acc = v > acc ? v : acc;
      break;
    }
  }
  if (op == OP_SUM_TIES) {
    /* The exact sum, rounded once to nearest even by this file's own
     * conversions (C's double-to-float for float32). */
    unsigned char tmp[8];
    uint64_t unused;
    store_elem(tmp, 0, dt, 0, acc);
    load_elem(tmp, 0, dt, &unused, &acc);
  }
  if (op == XCOLL_AVG) {
    acc /= P;
    *tol = (P + 1) * unit_roundoff(dt) * sum_abs / P;
  }
  *fv = acc;
}

/* ---- a memo of the two functions above ----
 * Both are pure functions of (rank, element, dtype, op) and the world size.
 * The sweep checks the same elements of one (dtype, op) in every root,
 * mode and placement, and of every count from 0 up, and the reference costs
 * P inputs per element: most of a full run's time went to this file, not
 * to the library. So a run_case names the elements it will read
 * (memo_prepare): each slot (rank r's inputs, or r = P: the reference)
 * keeps one window [lo, hi) of the current (dtype, op), extended when a
 * request starts at lo and goes further, replaced otherwise; an element
 * outside the window is computed directly. */
#define MEMO_MAX_ELEMS ((size_t)1 << 21)

typedef struct {
  uint64_t iv;
  double fv, tol;
} memo_entry;

typedef struct {
  size_t lo, hi, cap;
  memo_entry *entries; /* entries[k] is element lo + k */
} memo_slot;

static struct {
  int dt, op, nslots; /* key; nslots = P + 1 once allocated */
  memo_slot *slots;
} memo = {-1, -2, 0, NULL};

static void memo_compute(int r, size_t i, xcoll_datatype dt, int op,
                         memo_entry *e) {
  e->tol = 0;
  if (r == g.world_size)
    reference_direct(i, dt, op, &e->iv, &e->fv, &e->tol);
  else
    input_value_direct(r, i, dt, op, &e->iv, &e->fv);
}

/* Make slot r (a rank, or P for the reference) hold elements
 * [first, first + count) of (dt, op); windows over MEMO_MAX_ELEMS are not
 * kept. */
static void memo_prepare(int r, size_t first, size_t count, xcoll_datatype dt,
                         int op) {
  if (count == 0 || count > MEMO_MAX_ELEMS)
    return;
  if (memo.nslots == 0) {
    memo.nslots = g.world_size + 1;
    memo.slots = calloc((size_t)memo.nslots, sizeof *memo.slots);
    if (memo.slots == NULL) {
      printf("FATAL rank %d: out of memory for the reference memo\n", g.rank);
      exit(2);
    }
  }
  if (memo.dt != (int)dt || memo.op != op) {
    memo.dt = (int)dt;
    memo.op = op;
    for (int k = 0; k < memo.nslots; k++)
      memo.slots[k].lo = memo.slots[k].hi = 0;
  }
  memo_slot *m = &memo.slots[r];
  size_t end = first + count;
  if (first >= m->lo && end <= m->hi)
    return;
  if (first != m->lo)
    m->lo = m->hi = first; /* replace the window */
  if (end - m->lo > m->cap) {
    size_t cap = m->cap ? m->cap : 1024;
    while (cap < end - m->lo)
      cap *= 2;
    memo_entry *grown = realloc(m->entries, cap * sizeof *grown);
    if (grown == NULL) {
      printf("FATAL rank %d: out of memory for the reference memo\n", g.rank);
      exit(2);
    }
    m->entries = grown;
    m->cap = cap;
  }
  for (size_t i = m->hi; i < end; i++)
    memo_compute(r, i, dt, op, &m->entries[i - m->lo]);
  m->hi = end;
}

static inline const memo_entry *memo_get(int r, size_t i, xcoll_datatype dt,
                                         int op) {
  if (memo.dt != (int)dt || memo.op != op) /* no key before the slots */
    return NULL;
  const memo_slot *m = &memo.slots[r];
  return i >= m->lo && i < m->hi ? &m->entries[i - m->lo] : NULL;
}

static void input_value(int r, size_t i, xcoll_datatype dt, int op,
                        uint64_t *iv, double *fv) {
  const memo_entry *e = memo_get(r, i, dt, op);
  if (e == NULL) {
    input_value_direct(r, i, dt, op, iv, fv);
    return;
  }
  *iv = e->iv;
  *fv = e->fv;
}

static void reference(size_t i, xcoll_datatype dt, int op, uint64_t *iv,
                      double *fv, double *tol) {
  const memo_entry *e = memo_get(g.world_size, i, dt, op);
  if (e == NULL) {
    reference_direct(i, dt, op, iv, fv, tol);
    return;
  }
  *iv = e->iv;
  *fv = e->fv;
  *tol = e->tol;
}

/* Fill buf[0..count) with rank r's input for elements [first, first+count),
 * from the memo: the values read back from what fill_input_direct stores,
 * which store again to the same bits (every input is exact in its dtype). */
static void fill_input(void *buf, size_t first, size_t count, int r,
                       xcoll_datatype dt, int op) {
  memo_prepare(r, first, count, dt, op);
  for (size_t k = 0; k < count; k++) {
    uint64_t iv;
    double fv;
    input_value(r, first + k, dt, op, &iv, &fv);
    store_elem(buf, k, dt, iv, fv);
  }
}

/* ---- comparing and reporting ---- */

static void format_value(char *out, size_t n, xcoll_datatype dt, uint64_t iv,
                         double fv) {
  if (is_float(dt))
    snprintf(out, n, "%.17g", fv);
  else if (is_signed_int(dt))
    snprintf(out, n, "%lld", (long long)sign_extend(iv, dt));
  else
    snprintf(out, n, "%llu", (unsigned long long)iv);
}

typedef struct case_desc {
  int coll;
  xcoll_datatype dt;
  int op; /* -1 for copies */
  size_t count;
  int in_place;
  int mode;
  int root; /* -1 when not rooted */
} case_desc;

static void describe(char *out, size_t n, const case_desc *c) {
  snprintf(out, n, "%s %s%s%s count=%zu %s %s root=%d", coll_names[c->coll],
           xcoll_datatype_name(c->dt), c->op >= 0 ? " " : "",
           c->op == OP_SUM_TIES ? "sum (rounding ties)"
           : c->op == OP_PREMUL ? "premul_sum"
           : c->op >= 0         ? xcoll_op_name((xcoll_op)c->op)
                                : "",
           c->count,
           c->in_place ? "in-place" : "out-of-place", mode_names[c->mode],
           c->root);
}

static long case_mismatches; /* mismatches in the current case */

static void report(const case_desc *c, const char *what, size_t index,
                   const char *expected, const char *got) {
  case_mismatches++;
  if (case_mismatches > MAX_PRINTED_PER_CASE || g.printed >= MAX_PRINTED_TOTAL)
    return;
  g.printed++;
  char desc[256];
  describe(desc, sizeof desc, c);
  printf("MISMATCH rank %d: %s: %s index %zu expected %s got %s\n", g.rank,
         desc, what, index, expected, got);
  fflush(stdout);
}

/* Compare element idx of buf with the expected value. */
static void check_elem(const case_desc *c, const char *what, const void *buf,
                       size_t idx, uint64_t eiv, double efv, double tol) {
  uint64_t giv;
  double gfv;
  load_elem(buf, idx, c->dt, &giv, &gfv);
  int ok;
  if (is_float(c->dt))
    ok = tol == 0 ? gfv == efv : fabs(gfv - efv) <= tol;
  else
    ok = giv == (eiv & int_mask(c->dt));
  if (!ok) {
    char e[64], gs[64];
    format_value(e, sizeof e, c->dt, eiv & int_mask(c->dt), efv);
    format_value(gs, sizeof gs, c->dt, giv, gfv);
    report(c, what, idx, e, gs);
  }
}

/* Bytes [from, to) of buf must still hold the sentinel. */
static void check_sentinel(const case_desc *c, const char *what,
                           const void *buf, size_t from, size_t to) {
  const unsigned char *p = buf;
  for (size_t b = from; b < to; b++) {
    if (p[b] != SENTINEL_BYTE) {
      char got[16];
      snprintf(got, sizeof got, "0x%02x", p[b]);
      report(c, what, b, "sentinel 0xa5", got);
      return;
    }
  }
}

/* ---- running one case ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fatal(const char *what, xcoll_status st) {
  printf("FATAL rank %d: %s returned %d (%s): %s\n", g.rank, what, (int)st,
         xcoll_strerror(st), xcoll_comm_last_error(g.comm));
  fflush(stdout);
  exit(2);
}

/* Complete a non-blocking request according to mode. */
static xcoll_status finish(xcoll_status st, xcoll_request_t req, int mode) {
  if (st != XCOLL_SUCCESS)
    return st;
  if (req == NULL) {
    printf("FATAL rank %d: a non-blocking call returned XCOLL_SUCCESS and a "
           "NULL request (a request must be passed to xcoll_wait)\n",
           g.rank);
    exit(2);
  }
  if (mode == MODE_TEST) {
    int done = 0;
    long polls = 0;
    while (!done) {
      xcoll_status ts = xcoll_test(req, &done);
      if (ts != XCOLL_SUCCESS && !done) {
        printf("FATAL rank %d: xcoll_test returned %s before done\n", g.rank,
               xcoll_strerror(ts));
        exit(2);
      }
      /* Give the CPU to the peers we wait for: 8 ranks share 2 cores. */
      if (!done && ++polls % 4 == 0)
        sched_yield();
    }
  }
  return xcoll_wait(req);
}

/* The blocking call, or the i-call (its request into *req). */
static xcoll_status issue_coll(const case_desc *c, xcoll_op op,
                               const void *send, void *recv,
                               xcoll_request_t *req) {
  int blocking = c->mode == MODE_BLOCKING;
  switch (c->coll) {
  case COLL_ALLREDUCE:
    if (blocking)
      return xcoll_allreduce(send, recv, c->count, c->dt, op, g.comm);
    return xcoll_iallreduce(send, recv, c->count, c->dt, op, g.comm, NULL, req);
  case COLL_ALLGATHER:
    if (blocking)
      return xcoll_allgather(send, recv, c->count, c->dt, g.comm);
    return xcoll_iallgather(send, recv, c->count, c->dt, g.comm, NULL, req);
  case COLL_REDUCE_SCATTER:
    if (blocking)
      return xcoll_reduce_scatter(send, recv, c->count, c->dt, op, g.comm);
    return xcoll_ireduce_scatter(send, recv, c->count, c->dt, op, g.comm, NULL,
                                 req);
  case COLL_BROADCAST:
    if (blocking)
      return xcoll_broadcast(send, recv, c->count, c->dt, c->root, g.comm);
    return xcoll_ibroadcast(send, recv, c->count, c->dt, c->root, g.comm, NULL,
                            req);
  case COLL_REDUCE:
    if (blocking)
      return xcoll_reduce(send, recv, c->count, c->dt, op, c->root, g.comm);
    return xcoll_ireduce(send, recv, c->count, c->dt, op, c->root, g.comm, NULL,
                         req);
  default:
    return XCOLL_ERR_INTERNAL;
  }
}

/* A premul sum of dt with this file's scalar (OP_PREMUL). */
static xcoll_op create_premul(xcoll_datatype dt) {
  unsigned char scalar[8];
  store_elem(scalar, 0, dt, premul_int_scalar(dt), PREMUL_FLOAT_SCALAR);
  xcoll_op op = XCOLL_SUM;
  xcoll_status st =
      xcoll_op_create_premul_sum(&op, scalar, dt, XCOLL_SCALAR_HOST, g.comm);
  if (st != XCOLL_SUCCESS)
    fatal("xcoll_op_create_premul_sum", st);
  return op;
}

static void destroy_premul(xcoll_op op) {
  xcoll_status st = xcoll_op_destroy(op, g.comm);
  if (st != XCOLL_SUCCESS)
    fatal("xcoll_op_destroy", st);
}

static xcoll_status run_coll(const case_desc *c, const void *send, void *recv) {
  xcoll_request_t req = NULL;
  xcoll_op op = (xcoll_op)(c->op < 0 || c->op == OP_SUM_TIES ? 0 : c->op);
  if (c->op == OP_PREMUL)
    op = create_premul(c->dt);
  /* The i-call must return before req is read: finish() gets it after. */
  xcoll_status st = issue_coll(c, op, send, recv, &req);
  if (c->op == OP_PREMUL)
    destroy_premul(op); /* before the wait: the call has returned */
  if (c->mode == MODE_BLOCKING)
    return st;
  return finish(st, req, c->mode);
}

static void *alloc_or_die(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("FATAL rank %d: out of memory (%zu bytes)\n", g.rank, bytes);
    exit(2);
  }
  return p;
}

static void run_case(const case_desc *c) {
  const int P = g.world_size, me = g.rank;
  const size_t es = xcoll_datatype_size(c->dt);
  const size_t n = c->count;
  /* Elements of the send and receive buffers, by collective. */
  size_t send_elems = n, recv_elems = n;
  if (c->coll == COLL_ALLGATHER)
    recv_elems = n * P;
  if (c->coll == COLL_REDUCE_SCATTER)
    send_elems = n * P;
  const size_t guard = GUARD_ELEMS * es;
  size_t in_elems = send_elems > recv_elems ? send_elems : recv_elems;
  unsigned char *sendbuf = alloc_or_die(send_elems * es + guard);
  unsigned char *recvbuf = alloc_or_die(in_elems * es + guard);
  memset(sendbuf, SENTINEL_BYTE, send_elems * es + guard);
  memset(recvbuf, SENTINEL_BYTE, in_elems * es + guard);
  const int op = c->op;
  const int is_root = c->root < 0 || c->root == me;

  /* Build the inputs and pick the pointers the call gets. */
  const void *send = sendbuf;
  void *recv = recvbuf;
  switch (c->coll) {
  case COLL_ALLREDUCE:
  case COLL_REDUCE:
  case COLL_BROADCAST:
    if (c->coll == COLL_BROADCAST && me != c->root && c->in_place) {
      /* non-root in-place: the buffer is output only, keep the sentinel */
    } else {
      fill_input(c->in_place ? recvbuf : sendbuf, 0, n, me, c->dt, op);
    }
    if (c->in_place)
      send = recvbuf;
    /* A non-root may pass NULL as reduce's recvbuf: try it in one mode. */
    if (c->coll == COLL_REDUCE && !c->in_place && me != c->root &&
        c->mode == MODE_WAIT)
      recv = NULL;
    break;
  case COLL_ALLGATHER:
    if (c->in_place) {
      fill_input(recvbuf + (size_t)me * n * es, 0, n, me, c->dt, op);
      send = recvbuf + (size_t)me * n * es;
    } else {
      fill_input(sendbuf, 0, n, me, c->dt, op);
    }
    break;
  case COLL_REDUCE_SCATTER:
    if (c->in_place) {
      fill_input(recvbuf, 0, n * P, me, c->dt, op);
      send = recvbuf;
      recv = recvbuf + (size_t)me * n * es;
    } else {
      fill_input(sendbuf, 0, n * P, me, c->dt, op);
    }
    break;
  }

  case_mismatches = 0;
  xcoll_status st = run_coll(c, send, recv);
  if (st != XCOLL_SUCCESS) {
    char desc[256];
    describe(desc, sizeof desc, c);
    fatal(desc, st);
  }

  /* Check the output against the locally computed reference. */
  uint64_t eiv = 0;
  double efv = 0, tol = 0;
  switch (c->coll) {
  case COLL_ALLREDUCE:
    memo_prepare(P, 0, n, c->dt, op);
    for (size_t i = 0; i < n; i++) {
      reference(i, c->dt, op, &eiv, &efv, &tol);
      check_elem(c, "recvbuf", recvbuf, i, eiv, efv, tol);
    }
    check_sentinel(c, "recvbuf guard", recvbuf, n * es, n * es + guard);
    break;
  case COLL_REDUCE:
    if (is_root) {
      memo_prepare(P, 0, n, c->dt, op);
      for (size_t i = 0; i < n; i++) {
        reference(i, c->dt, op, &eiv, &efv, &tol);
        check_elem(c, "recvbuf", recvbuf, i, eiv, efv, tol);
      }
    } else if (c->in_place) {
      /* recvbuf is written on root only; here it is also the const input */
      for (size_t i = 0; i < n; i++) {
        input_value(me, i, c->dt, op, &eiv, &efv);
        check_elem(c, "non-root in-place buffer", recvbuf, i, eiv, efv, 0);
      }
    } else {
      check_sentinel(c, "non-root recvbuf (written on root only)", recvbuf, 0,
                     n * es);
    }
    check_sentinel(c, "recvbuf guard", recvbuf, n * es, n * es + guard);
    break;
  case COLL_BROADCAST:
    memo_prepare(c->root, 0, n, c->dt, op);
    for (size_t i = 0; i < n; i++) {
      input_value(c->root, i, c->dt, op, &eiv, &efv);
      check_elem(c, "recvbuf", recvbuf, i, eiv, efv, 0);
    }
    check_sentinel(c, "recvbuf guard", recvbuf, n * es, n * es + guard);
    break;
  case COLL_ALLGATHER:
    for (int r = 0; r < P; r++) {
      memo_prepare(r, 0, n, c->dt, op);
      for (size_t i = 0; i < n; i++) {
        input_value(r, i, c->dt, op, &eiv, &efv);
        check_elem(c, "recvbuf", recvbuf, (size_t)r * n + i, eiv, efv, 0);
      }
    }
    check_sentinel(c, "recvbuf guard", recvbuf, P * n * es, P * n * es + guard);
    break;
  case COLL_REDUCE_SCATTER: {
    const unsigned char *out =
        c->in_place ? recvbuf + (size_t)me * n * es : recvbuf;
    memo_prepare(P, (size_t)me * n, n, c->dt, op);
    for (size_t i = 0; i < n; i++) {
      reference((size_t)me * n + i, c->dt, op, &eiv, &efv, &tol);
      check_elem(c, "recvbuf", out, i, eiv, efv, tol);
    }
    if (!c->in_place)
      check_sentinel(c, "recvbuf guard", recvbuf, n * es, n * es + guard);
    else
      check_sentinel(c, "buffer guard", recvbuf, P * n * es,
                     P * n * es + guard);
    break;
  }
  }
  /* sendbuf is const: an out-of-place call must leave it as it was. */
  if (!c->in_place && (c->coll != COLL_BROADCAST || me == c->root)) {
    memo_prepare(me, 0, send_elems, c->dt, op);
    for (size_t i = 0; i < send_elems; i++) {
      input_value(me, i, c->dt, op, &eiv, &efv);
      check_elem(c, "sendbuf (must not change)", sendbuf, i, eiv, efv, 0);
    }
  }
  g.cases++;
  if (case_mismatches)
    g.failed_cases++;
  free(sendbuf);
  free(recvbuf);
}

/* ---- the sweep ---- */

static int dtype_in_big_subset(xcoll_datatype dt, int op) {
  if (dt == XCOLL_FLOAT32 || dt == XCOLL_INT64)
    return op == XCOLL_SUM || op == XCOLL_MAX || op < 0;
  if (dt == XCOLL_BFLOAT16)
    return op == XCOLL_SUM || op < 0;
  return 0;
}

static int check_invalid(const char *what, xcoll_status st, xcoll_status want) {
  g.cases++;
  if (st == want && xcoll_comm_last_error(g.comm)[0] != '\0')
    return 1;
  if (g.printed++ < MAX_PRINTED_TOTAL) {
    printf("MISMATCH rank %d: %s returned %d (%s), expected %d (%s) with a "
           "message; message: \"%s\"\n",
           g.rank, what, (int)st, xcoll_strerror(st), (int)want,
           xcoll_strerror(want), xcoll_comm_last_error(g.comm));
    fflush(stdout);
  }
  g.failed_cases++;
  return 0;
}

/* An op the dtype does not have (XCOLL_AVG on an integer type, a bitwise
 * op on a floating-point type) is XCOLL_ERR_INVALID_ARGUMENT, blocking or
 * not, and a non-blocking call then sets *request to NULL. Every rank makes
 * the same mistake, so the communicator stays usable. */
static void check_op_rejected(xcoll_datatype dt, xcoll_op op) {
  int64_t buf[8 * 16] = {0}, out[8 * 16] = {0};
  char what[128];
  const char *dtype = xcoll_datatype_name(dt), *name = xcoll_op_name(op);
  const int root = g.world_size - 1;
  xcoll_request_t req = (xcoll_request_t)(uintptr_t)1;
  snprintf(what, sizeof what, "allreduce %s %s", dtype, name);
  check_invalid(what, xcoll_allreduce(buf, out, 7, dt, op, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  snprintf(what, sizeof what, "iallreduce %s %s (in place)", dtype, name);
  check_invalid(what,
                xcoll_iallreduce(buf, buf, 7, dt, op, g.comm, NULL, &req),
                XCOLL_ERR_INVALID_ARGUMENT);
  if (req != NULL) {
    printf("MISMATCH rank %d: %s left *request non-NULL\n", g.rank, what);
    g.failed_cases++;
  }
  snprintf(what, sizeof what, "reduce_scatter %s %s", dtype, name);
  check_invalid(what, xcoll_reduce_scatter(buf, out, 1, dt, op, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  snprintf(what, sizeof what, "reduce %s %s", dtype, name);
  check_invalid(what, xcoll_reduce(buf, out, 7, dt, op, root, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
}

static void sweep_collective(int coll) {
  const int P = g.world_size;
  size_t nondiv = 131072 + 1;
  while (P > 1 && nondiv % (size_t)P == 0)
    nondiv++;
  const size_t counts[] = {0, 1, 7, 1021, nondiv, BIG_COUNT};
  const int ncounts = (int)(sizeof counts / sizeof counts[0]);
  int roots[3] = {0, P - 1, P / 2};
  int nroots = 1;
  if (coll == COLL_BROADCAST || coll == COLL_REDUCE) {
    nroots = P == 1 ? 1 : (P == 2 ? 2 : 3);
  } else {
    roots[0] = -1;
  }
  const int reduces = coll == COLL_ALLREDUCE || coll == COLL_REDUCE ||
                      coll == COLL_REDUCE_SCATTER;
  for (int dt = 0; dt < XCOLL_NUM_DATATYPES; dt++) {
    for (int op = reduces ? 0 : -1; op < (reduces ? OP_PREMUL + 1 : 0);
         op++) {
      /* Rounding ties: for the three float types that round, once the sum
       * has at least two terms. */
      if (op == OP_SUM_TIES &&
          (!is_float((xcoll_datatype)dt) || dt == XCOLL_FLOAT64 || P < 2))
        continue;
      if ((op == XCOLL_AVG && !is_float((xcoll_datatype)dt)) ||
          (is_bitwise(op) && is_float((xcoll_datatype)dt))) {
        if (coll == COLL_ALLREDUCE)
          check_op_rejected((xcoll_datatype)dt, (xcoll_op)op);
        continue;
      }
      /* The bitwise ops and premul sums rotate the mode as big counts do
       * (both placements, one mode each), which keeps their cost to a
       * third: their functors are simple, and every mode still runs. */
      int light = is_bitwise(op) || op == OP_PREMUL;
      for (int ci = 0; ci < ncounts; ci++) {
        size_t count = counts[ci];
        if (count > g.max_count || count < g.min_count)
          continue;
        int big = count == BIG_COUNT;
        if (big && !dtype_in_big_subset((xcoll_datatype)dt, op))
          continue;
        /* --quick: the new ops up to 1021 elements only (the full runs
         * take them through every count): the larger counts run the same
         * functors down the same paths as the other ops. */
        if (light && g.quick && count > counts[3])
          continue;
        /* allgather/reduce_scatter counts are per rank: keep the total at 4M */
        if (big && (coll == COLL_ALLGATHER || coll == COLL_REDUCE_SCATTER))
          count = BIG_COUNT / (size_t)P;
        for (int ri = 0; ri < nroots; ri++) {
          for (int in_place = 0; in_place < 2; in_place++) {
            for (int mode = 0; mode < NUM_MODES; mode++) {
              /* Big counts and --quick: one mode per (in-place) choice,
               * rotating so that all modes are still exercised. */
              if (g.quick || big || light) {
                long pick = g.combo;
                if (mode != (int)(pick % NUM_MODES))
                  continue;
                if (g.quick && in_place != (int)((pick / NUM_MODES) % 2))
                  continue;
              }
              case_desc c = {coll, (xcoll_datatype)dt, op, count, in_place,
                             mode, roots[ri]};
              run_case(&c);
            }
            if (g.quick || big || light)
              g.combo++;
          }
        }
      }
    }
  }
}

/* Several non-blocking operations in flight at once, completed in reverse
 * order: they must run in issue order and each must land in its own buffer.
 * Mixes sizes (so that algorithms differ) and a broadcast between them. */
static void check_inflight(void) {
  enum { NOPS = 5 };
  const size_t counts[NOPS] = {1021, 7, 131072 + 3, 1, 4096};
  const xcoll_datatype dts[NOPS] = {XCOLL_FLOAT32, XCOLL_INT32, XCOLL_FLOAT64,
                                    XCOLL_UINT8, XCOLL_BFLOAT16};
  void *bufs[NOPS];
  xcoll_request_t reqs[NOPS];
  const int root = g.world_size - 1;
  for (int k = 0; k < NOPS; k++) {
    size_t es = xcoll_datatype_size(dts[k]);
    bufs[k] = alloc_or_die(counts[k] * es);
    fill_input(bufs[k], 0, counts[k], g.rank, dts[k], XCOLL_SUM);
    xcoll_status st;
    if (k == 3) /* a broadcast among the allreduces */
      st = xcoll_ibroadcast(bufs[k], bufs[k], counts[k], dts[k], root, g.comm,
                            NULL, &reqs[k]);
    else
      st = xcoll_iallreduce(bufs[k], bufs[k], counts[k], dts[k], XCOLL_SUM,
                            g.comm, NULL, &reqs[k]);
    if (st != XCOLL_SUCCESS)
      fatal("issuing non-blocking operations in flight together", st);
  }
  for (int k = NOPS - 1; k >= 0; k--) {
    xcoll_status st = xcoll_wait(reqs[k]);
    if (st != XCOLL_SUCCESS)
      fatal("waiting (in reverse order) on operations in flight together", st);
  }
  for (int k = 0; k < NOPS; k++) {
    case_desc c = {k == 3 ? COLL_BROADCAST : COLL_ALLREDUCE,
                   dts[k],
                   XCOLL_SUM,
                   counts[k],
                   1,
                   MODE_WAIT,
                   k == 3 ? root : -1};
    case_mismatches = 0;
    for (size_t i = 0; i < counts[k]; i++) {
      uint64_t eiv = 0;
      double efv = 0, tol = 0;
      if (k == 3)
        input_value(root, i, dts[k], XCOLL_SUM, &eiv, &efv);
      else
        reference(i, dts[k], XCOLL_SUM, &eiv, &efv, &tol);
      check_elem(&c, "in flight with 4 others", bufs[k], i, eiv, efv, tol);
    }
    g.cases++;
    if (case_mismatches)
      g.failed_cases++;
    free(bufs[k]);
  }
}

/* A premul sum issued while the collective before it, on the same buffer,
 * is still in flight must scale that collective's result, not the buffer
 * as it was when the call was made: an in-place sum, then an in-place
 * premul sum, waited in reverse order, give scalar * P * (the sum). */
static void check_premul_in_flight(void) {
  const size_t n = 131072 + 3;
  const xcoll_datatype dt = XCOLL_FLOAT64;
  const int P = g.world_size;
  double *buf = alloc_or_die(n * sizeof *buf);
  fill_input(buf, 0, n, g.rank, dt, XCOLL_SUM);
  xcoll_request_t reqs[2];
  xcoll_op op = create_premul(dt);
  xcoll_status st =
      xcoll_iallreduce(buf, buf, n, dt, XCOLL_SUM, g.comm, NULL, &reqs[0]);
  if (st == XCOLL_SUCCESS)
    st = xcoll_iallreduce(buf, buf, n, dt, op, g.comm, NULL, &reqs[1]);
  if (st != XCOLL_SUCCESS)
    fatal("a premul sum issued behind a sum on its buffer", st);
  destroy_premul(op);
  for (int k = 1; k >= 0; k--) {
    st = xcoll_wait(reqs[k]);
    if (st != XCOLL_SUCCESS)
      fatal("waiting on a premul sum issued behind a sum on its buffer", st);
  }
  case_desc c = {COLL_ALLREDUCE, dt, OP_PREMUL, n, 1, MODE_WAIT, -1};
  case_mismatches = 0;
  memo_prepare(P, 0, n, dt, XCOLL_SUM);
  for (size_t i = 0; i < n; i++) {
    uint64_t eiv = 0;
    double efv = 0, tol = 0;
    reference(i, dt, XCOLL_SUM, &eiv, &efv, &tol);
    /* exact: the sum has 34 significant bits at most */
    check_elem(&c, "premul sum behind a sum in flight", buf, i, eiv,
               PREMUL_FLOAT_SCALAR * P * efv, 0);
  }
  g.cases++;
  if (case_mismatches)
    g.failed_cases++;
  free(buf);
}

/* Barrier: each rank publishes "I reached barrier k" in a file before the
 * barrier; after it, every rank must see every other rank's mark >= k. The
 * files are the independent witness; no sleep is involved. Only meaningful
 * when all ranks share a file system (one host), which xcollrun gives. */
static void sweep_barrier(void) {
  const char *tmp = getenv("TMPDIR");
  char dir[512];
  /* One directory per job: its launcher's run id (xcollrun and torchrun
   * set TORCHELASTIC_RUN_ID), else the parent's pid (every rank a child of
   * one launcher). */
  const char *run_id = getenv("TORCHELASTIC_RUN_ID");
  char parent[32];
  snprintf(parent, sizeof parent, "%d", (int)getppid());
  snprintf(dir, sizeof dir, "%s/xcoll-conformance-%s-%s", tmp ? tmp : "/tmp",
           run_id && run_id[0] ? run_id : parent,
           getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0");
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    printf("rank %d: cannot create %s (%s): barrier witness skipped\n", g.rank,
           dir, strerror(errno));
    dir[0] = '\0';
  }
  /* Make sure the directory exists for all before anyone writes. */
  xcoll_status st = xcoll_barrier(g.comm);
  if (st != XCOLL_SUCCESS)
    fatal("barrier", st);
  const int rounds = g.quick ? 6 : 30;
  for (int k = 1; k <= rounds; k++) {
    if (dir[0]) {
      char path[600], tmpname[640];
      snprintf(path, sizeof path, "%s/rank%d", dir, g.rank);
      snprintf(tmpname, sizeof tmpname, "%s.tmp", path);
      FILE *f = fopen(tmpname, "w");
      if (f) {
        fprintf(f, "%d\n", k);
        fclose(f);
        rename(tmpname, path); /* atomic: readers see k-1 or k, never half */
      }
    }
    int mode = k % NUM_MODES;
    xcoll_request_t req = NULL;
    if (mode == MODE_BLOCKING)
      st = xcoll_barrier(g.comm);
    else {
      st = xcoll_ibarrier(g.comm, &req);
      st = finish(st, req, mode);
    }
    if (st != XCOLL_SUCCESS)
      fatal("barrier", st);
    g.cases++;
    if (!dir[0])
      continue;
    for (int r = 0; r < g.world_size; r++) {
      char path[600];
      snprintf(path, sizeof path, "%s/rank%d", dir, r);
      FILE *f = fopen(path, "r");
      int seen = -1;
      if (f) {
        if (fscanf(f, "%d", &seen) != 1)
          seen = -1;
        fclose(f);
      }
      if (seen < k) {
        printf("MISMATCH rank %d: barrier %d (%s) returned before rank %d "
               "entered it (its mark is %d)\n",
               g.rank, k, mode_names[mode], r, seen);
        g.failed_cases++;
      }
    }
  }
  /* Nobody reads the files after this barrier: clean up. */
  st = xcoll_barrier(g.comm);
  if (st != XCOLL_SUCCESS)
    fatal("barrier", st);
  if (dir[0]) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank%d", dir, g.rank);
    unlink(path);
    st = xcoll_barrier(g.comm);
    if (st != XCOLL_SUCCESS)
      fatal("barrier", st);
    if (g.rank == 0)
      rmdir(dir);
  }
}

/* Argument errors that every rank makes alike: each must be
 * XCOLL_ERR_INVALID_ARGUMENT with a message, and must leave the communicator
 * usable (checked by a correct allreduce afterwards). */
static void sweep_errors(void) {
  float a[8] = {0}, b[8 * 16] = {0};
  int stream_dummy;
  xcoll_request_t req = NULL;
  const int P = g.world_size;
  check_invalid(
      "allreduce with an unknown dtype",
      xcoll_allreduce(a, b, 4, XCOLL_NUM_DATATYPES, XCOLL_SUM, g.comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("allreduce with an unknown op",
                xcoll_allreduce(a, b, 4, XCOLL_FLOAT32, XCOLL_NUM_OPS, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("allreduce with a NULL sendbuf and count 4",
                xcoll_allreduce(NULL, b, 4, XCOLL_FLOAT32, XCOLL_SUM, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("allgather with a NULL recvbuf and count 4",
                xcoll_allgather(a, NULL, 4, XCOLL_FLOAT32, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("broadcast with root == world_size",
                xcoll_broadcast(a, a, 4, XCOLL_FLOAT32, P, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("reduce with root -1",
                xcoll_reduce(a, b, 4, XCOLL_FLOAT32, XCOLL_SUM, -1, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid(
      "allreduce with count * size overflowing size_t",
      xcoll_allreduce(a, b, SIZE_MAX / 2, XCOLL_FLOAT32, XCOLL_SUM, g.comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  req = (xcoll_request_t)(uintptr_t)1;
  check_invalid("iallreduce with a non-NULL stream on a host backend",
                xcoll_iallreduce(a, b, 4, XCOLL_FLOAT32, XCOLL_SUM, g.comm,
                                 &stream_dummy, &req),
                XCOLL_ERR_INVALID_ARGUMENT);
  if (req != NULL) {
    printf("MISMATCH rank %d: iallreduce argument error left *request "
           "non-NULL\n",
           g.rank);
    g.failed_cases++;
  }
  check_invalid("xcoll_wait(NULL)", xcoll_wait(NULL),
                XCOLL_ERR_INVALID_ARGUMENT);
  /* Premul sums: with another dtype than their own, once destroyed, and a
   * device-resident scalar on a host rank. */
  xcoll_op premul = create_premul(XCOLL_FLOAT32);
  int32_t ints[4] = {0}, ints_out[4];
  check_invalid("allreduce int32 with a premul sum made for float32",
                xcoll_allreduce(ints, ints_out, 4, XCOLL_INT32, premul, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  destroy_premul(premul);
  check_invalid("allreduce with a destroyed premul sum",
                xcoll_allreduce(a, b, 4, XCOLL_FLOAT32, premul, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("xcoll_op_destroy of a destroyed premul sum",
                xcoll_op_destroy(premul, g.comm), XCOLL_ERR_INVALID_ARGUMENT);
  check_invalid("premul sum with XCOLL_SCALAR_DEVICE on a host rank",
                xcoll_op_create_premul_sum(&premul, a, XCOLL_FLOAT32,
                                           XCOLL_SCALAR_DEVICE, g.comm),
                XCOLL_ERR_INVALID_ARGUMENT);
  g.cases++;
  xcoll_status st =
      xcoll_allreduce(NULL, NULL, 0, XCOLL_FLOAT32, XCOLL_SUM, g.comm);
  if (st != XCOLL_SUCCESS) {
    printf("MISMATCH rank %d: allreduce with NULL buffers and count 0 returned "
           "%s: %s\n",
           g.rank, xcoll_strerror(st), xcoll_comm_last_error(g.comm));
    g.failed_cases++;
  }
  /* Still usable: a real allreduce gives the right answer. */
  for (int i = 0; i < 8; i++)
    a[i] = (float)(g.rank + i);
  st = xcoll_allreduce(a, b, 8, XCOLL_FLOAT32, XCOLL_SUM, g.comm);
  if (st != XCOLL_SUCCESS)
    fatal("allreduce after argument errors", st);
  g.cases++;
  for (int i = 0; i < 8; i++) {
    float want = (float)(P * (P - 1) / 2 + P * i);
    if (b[i] != want) {
      printf("MISMATCH rank %d: allreduce after argument errors: index %d "
             "expected %g got %g\n",
             g.rank, i, want, b[i]);
      g.failed_cases++;
      break;
    }
  }
  /* The getters agree with the launcher's environment. */
  int r = -1, s = -1;
  g.cases++;
  if (xcoll_comm_rank(g.comm, &r) != XCOLL_SUCCESS ||
      xcoll_comm_size(g.comm, &s) != XCOLL_SUCCESS || r != g.rank ||
      s != g.world_size ||
      xcoll_comm_rank(g.comm, NULL) != XCOLL_ERR_INVALID_ARGUMENT) {
    printf("MISMATCH rank %d: getters disagree (rank %d size %d)\n", g.rank, r,
           s);
    g.failed_cases++;
  }
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--quick] [--coll NAME]... [--max-count N] "
          "[--min-count N] [--backend NAME] [--lose-rank R]\n",
          argv0);
  exit(2);
}

/* --lose-rank: rank `lost` dies after one allreduce and the others go on
 * with the communicator shrunk without it (g.comm, g.rank, g.world_size
 * become the new one's). */
static void lose_rank(int lost) {
  if (lost < 0 || lost >= g.world_size || g.world_size < 2) {
    printf("FATAL: --lose-rank %d needs a rank of a world of 2 or more "
           "(world size %d)\n", lost, g.world_size);
    exit(2);
  }
  int32_t one = 1, sum = 0;
  xcoll_status st = xcoll_allreduce(&one, &sum, 1, XCOLL_INT32, XCOLL_SUM,
                                    g.comm);
  if (g.rank == lost) {
    printf("rank %d: leaving by SIGKILL (--lose-rank)\n", g.rank);
    raise(SIGKILL);
  }
  /* The first allreduce may fail already if the lost rank died first. */
  double deadline = now_s() + 30;
  while (st == XCOLL_SUCCESS && now_s() < deadline)
    st = xcoll_allreduce(&one, &sum, 1, XCOLL_INT32, XCOLL_SUM, g.comm);
  if (st == XCOLL_SUCCESS)
    fatal("a collective after the lost rank died kept succeeding",
          XCOLL_ERR_INTERNAL);
  int failed[64], count = 0;
  do {
    st = xcoll_comm_failed_ranks(g.comm, failed, 64, &count);
    if (st != XCOLL_SUCCESS)
      fatal("xcoll_comm_failed_ranks", st);
    if (count == 0)
      sched_yield();
  } while (count == 0 && now_s() < deadline);
  if (count != 1 || failed[0] != lost) {
    printf("FATAL rank %d: xcoll_comm_failed_ranks gave %d rank(s), the "
           "first %d; expected rank %d alone\n",
           g.rank, count, count > 0 ? failed[0] : -1, lost);
    exit(2);
  }
  xcoll_comm_t shrunk = NULL;
  st = xcoll_comm_shrink(g.comm, failed, count, XCOLL_SHRINK_ABORT, &shrunk);
  if (st != XCOLL_SUCCESS || shrunk == NULL)
    fatal("xcoll_comm_shrink", st == XCOLL_SUCCESS ? XCOLL_ERR_INTERNAL : st);
  xcoll_comm_destroy(g.comm);
  int old_rank = g.rank, old_size = g.world_size;
  g.comm = shrunk;
  if (xcoll_comm_rank(g.comm, &g.rank) != XCOLL_SUCCESS ||
      xcoll_comm_size(g.comm, &g.world_size) != XCOLL_SUCCESS)
    fatal("comm_rank/comm_size of the shrunk communicator",
          XCOLL_ERR_INTERNAL);
  if (g.world_size != old_size - 1 || g.rank != old_rank - (old_rank > lost)) {
    printf("FATAL: old rank %d of %d is rank %d of %d after the shrink; "
           "expected %d of %d\n", old_rank, old_size, g.rank, g.world_size,
           old_rank - (old_rank > lost), old_size - 1);
    exit(2);
  }
  printf("rank %d: was rank %d of %d; rank %d died; the suite runs on the "
         "shrunk communicator\n", g.rank, old_rank, old_size, lost);
}

int main(int argc, char **argv) {
  const char *want_backend = NULL;
  int any_coll = 0, lose = -1;
  g.max_count = 131072 + 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      g.quick = 1;
    } else if (!strcmp(argv[i], "--coll") && i + 1 < argc) {
      const char *name = argv[++i];
      int found = 0;
      for (int c = 0; c < NUM_COLLS; c++)
        if (!strcmp(name, coll_names[c])) {
          g.coll_enabled[c] = found = any_coll = 1;
        }
      if (!found) {
        fprintf(stderr, "unknown collective '%s'\n", name);
        usage(argv[0]);
      }
    } else if (!strcmp(argv[i], "--max-count") && i + 1 < argc) {
      g.max_count = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--min-count") && i + 1 < argc) {
      g.min_count = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--lose-rank") && i + 1 < argc) {
      lose = atoi(argv[++i]);
      /* xcollrun stops the other ranks when one dies: they go on. */
      signal(SIGTERM, SIG_IGN);
    } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
      want_backend = argv[++i];
      setenv("XCOLL_BACKEND", want_backend, 1);
    } else {
      usage(argv[0]);
    }
  }
  if (!any_coll)
    for (int c = 0; c < NUM_COLLS; c++)
      g.coll_enabled[c] = 1;

  /* Line-buffered so that ranks' lines do not interleave mid-line. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  double t0 = now_s();
  xcoll_status st = xcoll_comm_init_env(&g.comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: xcoll_comm_init_env returned %s: %s\n", xcoll_strerror(st),
           xcoll_last_error());
    return 2;
  }
  if (xcoll_comm_rank(g.comm, &g.rank) != XCOLL_SUCCESS ||
      xcoll_comm_size(g.comm, &g.world_size) != XCOLL_SUCCESS)
    fatal("comm_rank/comm_size", XCOLL_ERR_INTERNAL);
  const char *backend = xcoll_comm_backend(g.comm);
  if (want_backend && strcmp(backend, want_backend) != 0) {
    printf("FATAL rank %d: asked for backend %s, got %s\n", g.rank,
           want_backend, backend);
    return 2;
  }

  if (lose >= 0)
    lose_rank(lose);
  if (g.coll_enabled[COLL_ERRORS])
    sweep_errors();
  for (int c = 0; c < COLL_BARRIER; c++) {
    if (!g.coll_enabled[c])
      continue;
    double tc = now_s();
    long before = g.cases;
    sweep_collective(c);
    if (c == COLL_ALLREDUCE) {
      check_inflight();
      check_premul_in_flight();
    }
    if (g.rank == 0)
      printf("rank 0: %-14s %5ld cases in %6.2f s\n", coll_names[c],
             g.cases - before, now_s() - tc);
  }
  if (g.coll_enabled[COLL_BARRIER])
    sweep_barrier();

  /* Every rank learns the total, so that rank 0's verdict covers all. */
  int64_t mine[2] = {g.failed_cases, g.cases}, total[2] = {0, 0};
  st = xcoll_allreduce(mine, total, 2, XCOLL_INT64, XCOLL_SUM, g.comm);
  if (st != XCOLL_SUCCESS)
    fatal("final allreduce of the failure counts", st);
  printf("rank %d/%d backend %s: %ld cases, %ld failed, %.2f s\n", g.rank,
         g.world_size, backend, g.cases, g.failed_cases, now_s() - t0);
  if (g.rank == 0)
    printf("conformance %s: backend %s, %d ranks, %lld cases, %lld failed\n",
           total[0] ? "FAILED" : "PASSED", backend, g.world_size,
           (long long)total[1], (long long)total[0]);
  for (int k = 0; k < memo.nslots; k++)
    free(memo.slots[k].entries);
  free(memo.slots);
  st = xcoll_comm_destroy(g.comm);
  if (st != XCOLL_SUCCESS) {
    printf("rank %d: xcoll_comm_destroy returned %s\n", g.rank,
           xcoll_strerror(st));
    return 1;
  }
  return (total[0] || g.failed_cases) ? 1 : 0;
}
