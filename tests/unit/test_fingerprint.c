/* test_fingerprint.c - collective fingerprints (core/fingerprint.c): the
 * encoding is the documented byte layout and decodes back, unused fields are
 * zeroed so that equal calls compare equal, each differing field (op, dtype,
 * count, root, kind, seq) makes two calls unequal, out-of-range bytes from
 * the network are rejected, and the desync sentence reads as documented. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "fingerprint.h"

static xcoll_coll_args call(xcoll_coll_kind kind, xcoll_datatype dtype,
                            xcoll_op op, size_t count, int root, uint64_t seq) {
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = kind;
  args.dtype = dtype;
  args.op = op;
  args.count = count;
  args.root = root;
  args.seq = seq;
  return args;
}

static void test_layout_and_roundtrip(void **unused) {
  (void)unused;
  xcoll_coll_args args =
      call(XCOLL_COLL_REDUCE, XCOLL_INT32, XCOLL_MAX, 0x0102030405060708ull, 3,
           0x1112131415161718ull);
  xcoll_fingerprint fp = xcoll_fingerprint_of(&args);
  uint8_t bytes[XCOLL_FINGERPRINT_BYTES];
  xcoll_fingerprint_encode(&fp, bytes);
  const uint8_t want[XCOLL_FINGERPRINT_BYTES] = {
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* seq */
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* count */
      3, 0, 0, 0,                                     /* root */
      XCOLL_COLL_REDUCE, XCOLL_INT32, XCOLL_MAX, 1};
  assert_memory_equal(bytes, want, sizeof want);
  xcoll_fingerprint back;
  assert_int_equal(xcoll_fingerprint_decode(bytes, &back), 0);
  assert_true(xcoll_fingerprint_equal(&fp, &back));
  assert_int_equal(back.root, 3);
  assert_int_equal(back.count, 0x0102030405060708ull);
}

static void test_unused_fields_ignored(void **unused) {
  (void)unused;
  /* A broadcast's op and an allreduce's root are not part of the call. */
  xcoll_coll_args a = call(XCOLL_COLL_BROADCAST, XCOLL_FLOAT32, XCOLL_SUM, 10, 1, 4);
  xcoll_coll_args b = call(XCOLL_COLL_BROADCAST, XCOLL_FLOAT32, XCOLL_MAX, 10, 1, 4);
  xcoll_fingerprint fa = xcoll_fingerprint_of(&a), fb = xcoll_fingerprint_of(&b);
  assert_true(xcoll_fingerprint_equal(&fa, &fb));
  a = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 10, 0, 4);
  b = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 10, 2, 4);
  fa = xcoll_fingerprint_of(&a);
  fb = xcoll_fingerprint_of(&b);
  assert_true(xcoll_fingerprint_equal(&fa, &fb));
  a = call(XCOLL_COLL_BARRIER, XCOLL_FLOAT32, XCOLL_SUM, 10, 0, 4);
  b = call(XCOLL_COLL_BARRIER, XCOLL_UINT8, XCOLL_MAX, 0, 1, 4);
  fa = xcoll_fingerprint_of(&a);
  fb = xcoll_fingerprint_of(&b);
  assert_true(xcoll_fingerprint_equal(&fa, &fb));
}

static void test_each_field_differs(void **unused) {
  (void)unused;
  xcoll_coll_args base = call(XCOLL_COLL_REDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 1, 7);
  xcoll_fingerprint fb = xcoll_fingerprint_of(&base);
  xcoll_coll_args variants[] = {
      call(XCOLL_COLL_REDUCE, XCOLL_FLOAT32, XCOLL_MAX, 1000, 1, 7), /* op */
      call(XCOLL_COLL_REDUCE, XCOLL_INT32, XCOLL_SUM, 1000, 1, 7),   /* dtype, same size */
      call(XCOLL_COLL_REDUCE, XCOLL_FLOAT32, XCOLL_SUM, 999, 1, 7),  /* count */
      call(XCOLL_COLL_REDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 0, 7), /* root */
      call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 1, 7), /* kind */
      call(XCOLL_COLL_REDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 1, 8), /* seq */
  };
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    xcoll_fingerprint fv = xcoll_fingerprint_of(&variants[i]);
    assert_false(xcoll_fingerprint_equal(&fb, &fv));
  }
  /* No fingerprint on one side: nothing to compare. */
  xcoll_fingerprint none;
  memset(&none, 0, sizeof none);
  assert_true(xcoll_fingerprint_equal(&fb, &none));
}

/* A pre-multiplied sum runs as XCOLL_SUM over scaled inputs (core/premul.h)
 * but its fingerprint says premul_sum: against a plain sum, or a bitwise
 * op, it is a desync; two premul sums match (the scalar is not compared,
 * as NCCL does not). Its op byte decodes and reads as "premul_sum". */
static void test_premul_and_bitwise_ops(void **unused) {
  (void)unused;
  xcoll_coll_args sum = call(XCOLL_COLL_ALLREDUCE, XCOLL_INT32, XCOLL_SUM, 8, 0, 2);
  xcoll_coll_args premul = sum;
  premul.premul = 1;
  xcoll_coll_args bxor = call(XCOLL_COLL_ALLREDUCE, XCOLL_INT32, XCOLL_BXOR, 8, 0, 2);
  xcoll_coll_args band = call(XCOLL_COLL_ALLREDUCE, XCOLL_INT32, XCOLL_BAND, 8, 0, 2);
  xcoll_fingerprint fs = xcoll_fingerprint_of(&sum);
  xcoll_fingerprint fp = xcoll_fingerprint_of(&premul), fp2 = fp;
  xcoll_fingerprint fx = xcoll_fingerprint_of(&bxor);
  xcoll_fingerprint fa = xcoll_fingerprint_of(&band);
  assert_int_equal(fp.op, XCOLL_FINGERPRINT_OP_PREMUL_SUM);
  assert_false(xcoll_fingerprint_equal(&fs, &fp));
  assert_false(xcoll_fingerprint_equal(&fs, &fx));
  assert_false(xcoll_fingerprint_equal(&fx, &fa));
  assert_false(xcoll_fingerprint_equal(&fp, &fx));
  assert_true(xcoll_fingerprint_equal(&fp, &fp2));
  assert_int_not_equal(xcoll_fingerprint_digest(&fs), xcoll_fingerprint_digest(&fp));
  uint8_t bytes[XCOLL_FINGERPRINT_BYTES];
  xcoll_fingerprint back;
  xcoll_fingerprint_encode(&fp, bytes);
  assert_int_equal(xcoll_fingerprint_decode(bytes, &back), 0);
  assert_true(xcoll_fingerprint_equal(&fp, &back));
  xcoll_fingerprint_encode(&fx, bytes);
  assert_int_equal(xcoll_fingerprint_decode(bytes, &back), 0);
  bytes[22] = XCOLL_FINGERPRINT_OP_PREMUL_SUM + 1;
  assert_int_equal(xcoll_fingerprint_decode(bytes, &back), -1);
  char text[256];
  assert_string_equal(
      xcoll_fingerprint_mismatch(0, &fs, 1, &fp, text, sizeof text),
      "rank 0 called allreduce(sum, int32, 8) but rank 1 called "
      "allreduce(premul_sum, int32, 8)");
  assert_string_equal(xcoll_fingerprint_describe(&fx, text, sizeof text),
                      "allreduce(bxor, int32, 8)");
}

/* The test's own MurmurHash3 fmix64, from its published constants. */
static uint64_t ref_fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

static uint64_t ref_rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

/* The digest as fingerprint.h defines it, from the encoding's bytes read
 * as three little-endian words. */
static uint32_t ref_digest(const uint8_t *bytes) {
  uint64_t w[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++)
    for (int b = 7; b >= 0; b--)
      w[i] = (w[i] << 8) | bytes[8 * i + b];
  uint64_t h = ref_fmix64(w[0]) ^
               ref_rotl(ref_fmix64(w[1] ^ 0x9e3779b97f4a7c15ULL), 21) ^
               ref_rotl(ref_fmix64(w[2] ^ 0x6a09e667f3bcc909ULL), 42);
  return (uint32_t)(ref_fmix64(h) >> 32);
}

/* The digest: as fingerprint.h defines it over the encoding, equal for
 * equal calls, different when a field differs; FNV-1a (wire.c's checksum)
 * against its published test vectors ("" -> 0x811c9dc5, "a" ->
 * 0xe40c292c). */
static void test_digest(void **unused) {
  (void)unused;
  assert_int_equal(xcoll_fnv1a32("", 0), 0x811c9dc5u);
  assert_int_equal(xcoll_fnv1a32("a", 1), 0xe40c292cu);
  xcoll_coll_args a = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 0, 7);
  xcoll_coll_args b = a;
  xcoll_fingerprint fa = xcoll_fingerprint_of(&a), fb = xcoll_fingerprint_of(&b);
  assert_int_equal(xcoll_fingerprint_digest(&fa), xcoll_fingerprint_digest(&fb));
  uint8_t bytes[XCOLL_FINGERPRINT_BYTES];
  xcoll_fingerprint_encode(&fa, bytes);
  assert_int_equal(xcoll_fingerprint_digest(&fa), ref_digest(bytes));
  /* Every field, one at a time, and a rooted call. */
  xcoll_coll_args r = call(XCOLL_COLL_REDUCE, XCOLL_INT64, XCOLL_MIN, 3, 2, 9);
  xcoll_fingerprint fr = xcoll_fingerprint_of(&r);
  xcoll_fingerprint_encode(&fr, bytes);
  assert_int_equal(xcoll_fingerprint_digest(&fr), ref_digest(bytes));
  for (int field = 0; field < 7; field++) {
    xcoll_fingerprint g = fr;
    switch (field) {
    case 0: g.seq++; break;
    case 1: g.count++; break;
    case 2: g.root++; break;
    case 3: g.kind = XCOLL_COLL_ALLREDUCE; break;
    case 4: g.dtype = XCOLL_INT32; break;
    case 5: g.op = XCOLL_MAX; break;
    default: g.valid = 0; break;
    }
    xcoll_fingerprint_encode(&g, bytes);
    assert_int_equal(xcoll_fingerprint_digest(&g), ref_digest(bytes));
    assert_int_not_equal(xcoll_fingerprint_digest(&g),
                         xcoll_fingerprint_digest(&fr));
  }
  b = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_MAX, 1000, 0, 7);
  fb = xcoll_fingerprint_of(&b);
  assert_int_not_equal(xcoll_fingerprint_digest(&fa), xcoll_fingerprint_digest(&fb));
  b = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 0, 8);
  fb = xcoll_fingerprint_of(&b);
  assert_int_not_equal(xcoll_fingerprint_digest(&fa), xcoll_fingerprint_digest(&fb));
}

static void test_decode_rejects_garbage(void **unused) {
  (void)unused;
  xcoll_coll_args args = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 5, 0, 1);
  xcoll_fingerprint fp = xcoll_fingerprint_of(&args), back;
  uint8_t bytes[XCOLL_FINGERPRINT_BYTES];
  const int fields[] = {20, 21, 22, 23, 19};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    xcoll_fingerprint_encode(&fp, bytes);
    bytes[fields[i]] = 0xee;
    assert_int_equal(xcoll_fingerprint_decode(bytes, &back), -1);
    char text[XCOLL_FINGERPRINT_TEXT_BYTES];
    /* Still describable without reading out of bounds. */
    assert_non_null(xcoll_fingerprint_describe(&back, text, sizeof text));
  }
}

static void test_describe_and_mismatch(void **unused) {
  (void)unused;
  char text[256];
  xcoll_coll_args a = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 1000, 0, 3);
  xcoll_coll_args b = call(XCOLL_COLL_BROADCAST, XCOLL_FLOAT32, XCOLL_SUM, 1000, 1, 3);
  xcoll_fingerprint fa = xcoll_fingerprint_of(&a), fb = xcoll_fingerprint_of(&b);
  assert_string_equal(xcoll_fingerprint_describe(&fa, text, sizeof text),
                      "allreduce(sum, float32, 1000)");
  assert_string_equal(xcoll_fingerprint_describe(&fb, text, sizeof text),
                      "broadcast(root 1, float32, 1000)");
  assert_string_equal(
      xcoll_fingerprint_mismatch(0, &fa, 1, &fb, text, sizeof text),
      "rank 0 called allreduce(sum, float32, 1000) but rank 1 called "
      "broadcast(root 1, float32, 1000)");
  xcoll_coll_args r = call(XCOLL_COLL_REDUCE, XCOLL_INT32, XCOLL_MAX, 4, 2, 3);
  xcoll_fingerprint fr = xcoll_fingerprint_of(&r);
  assert_string_equal(xcoll_fingerprint_describe(&fr, text, sizeof text),
                      "reduce(max, root 2, int32, 4)");
  xcoll_coll_args g = call(XCOLL_COLL_BARRIER, XCOLL_INT32, XCOLL_MAX, 4, 2, 9);
  xcoll_fingerprint fg = xcoll_fingerprint_of(&g);
  assert_string_equal(xcoll_fingerprint_describe(&fg, text, sizeof text),
                      "barrier()");
  xcoll_fingerprint_mismatch(2, &fg, 0, &fa, text, sizeof text);
  assert_non_null(strstr(text, "#9"));
  assert_non_null(strstr(text, "#3"));
}

static void test_judge(void **unused) {
  (void)unused;
  xcoll_coll_args a = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 10, 0, 5);
  xcoll_coll_args p = call(XCOLL_COLL_BROADCAST, XCOLL_FLOAT32, XCOLL_SUM, 10, 1, 4);
  xcoll_fingerprint cur = xcoll_fingerprint_of(&a), prev = xcoll_fingerprint_of(&p);
  const xcoll_fingerprint *ours = NULL;
  xcoll_fingerprint t = cur;
  assert_int_equal(xcoll_fingerprint_judge(&cur, &prev, &t, 1, &ours),
                   XCOLL_FINGERPRINT_MATCH);
  t.seq = 6; /* the peer is one collective ahead */
  assert_int_equal(xcoll_fingerprint_judge(&cur, &prev, &t, 0, &ours),
                   XCOLL_FINGERPRINT_AHEAD);
  assert_int_equal(xcoll_fingerprint_judge(&cur, &prev, &t, 1, &ours),
                   XCOLL_FINGERPRINT_MISMATCH);
  t = cur;
  t.op = XCOLL_MAX;
  assert_int_equal(xcoll_fingerprint_judge(&cur, &prev, &t, 0, &ours),
                   XCOLL_FINGERPRINT_MISMATCH);
  assert_ptr_equal(ours, &cur);
  /* A message of the previous collective that was never received there. */
  xcoll_coll_args q = call(XCOLL_COLL_BROADCAST, XCOLL_FLOAT32, XCOLL_SUM, 10, 0, 4);
  t = xcoll_fingerprint_of(&q);
  assert_int_equal(xcoll_fingerprint_judge(&cur, &prev, &t, 0, &ours),
                   XCOLL_FINGERPRINT_MISMATCH);
  assert_ptr_equal(ours, &prev);
  char text[256];
  xcoll_fingerprint_mismatch(0, ours, 1, &t, text, sizeof text);
  assert_string_equal(text, "rank 0 called broadcast(root 1, float32, 10) but "
                            "rank 1 called broadcast(root 0, float32, 10)");
}


/* The table of collectives (core/colls.c) against shapes written out here
 * from NCCL's and MPI's definitions: elements read and written per rank at
 * count 10, P=4, on and off the root; nccl-tests' busbw factors. */
static void test_table_of_collectives(void **unused) {
  (void)unused;
  static const struct {
    xcoll_coll_kind kind;
    size_t send_root, recv_root, send_other, recv_other, size;
    double busbw;
  } want[] = {
      {XCOLL_COLL_ALLREDUCE, 10, 10, 10, 10, 10, 1.5},
      {XCOLL_COLL_ALLGATHER, 10, 40, 10, 40, 40, 0.75},
      {XCOLL_COLL_REDUCE_SCATTER, 40, 10, 40, 10, 40, 0.75},
      {XCOLL_COLL_BROADCAST, 10, 10, 0, 10, 10, 1.0},
      {XCOLL_COLL_REDUCE, 10, 10, 10, 0, 10, 1.0},
      {XCOLL_COLL_BARRIER, 0, 0, 0, 0, 0, 0.0},
      {XCOLL_COLL_ALLTOALL, 40, 40, 40, 40, 40, 0.75},
      {XCOLL_COLL_GATHER, 10, 40, 10, 0, 40, 0.75},
      {XCOLL_COLL_SCATTER, 40, 10, 0, 10, 40, 0.75},
      {XCOLL_COLL_SEND, 10, 0, 10, 0, 10, 1.0},
      {XCOLL_COLL_RECV, 0, 10, 0, 10, 10, 1.0},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    size_t send = 99, recv = 99, size = 99;
    assert_int_equal(xcoll_coll_shape(want[i].kind, 10, 4, 1, &send, &recv, &size),
                     XCOLL_SUCCESS);
    assert_int_equal(send, want[i].send_root);
    assert_int_equal(recv, want[i].recv_root);
    assert_int_equal(size, want[i].size);
    assert_int_equal(xcoll_coll_shape(want[i].kind, 10, 4, 0, &send, &recv, NULL),
                     XCOLL_SUCCESS);
    assert_int_equal(send, want[i].send_other);
    assert_int_equal(recv, want[i].recv_other);
    double factor = xcoll_coll_busbw_factor(want[i].kind, 4);
    assert_true(factor > want[i].busbw - 1e-12 && factor < want[i].busbw + 1e-12);
    assert_non_null(xcoll_coll_info_of(want[i].kind));
  }
  /* alltoallv has no count shape; unknown kinds and overflow are refused. */
  assert_int_equal(xcoll_coll_shape(XCOLL_COLL_ALLTOALLV, 10, 4, 1, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_coll_shape(XCOLL_NUM_COLLS, 10, 4, 1, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_coll_shape(XCOLL_COLL_ALLTOALL, SIZE_MAX / 2, 4, 1, NULL,
                                    NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_null(xcoll_coll_info_of(XCOLL_NUM_COLLS));
  assert_string_equal(xcoll_coll_info_of(XCOLL_COLL_REDUCE_SCATTER)->count_name,
                      "recvcount");
}

/* A group of sends and receives is ordered after collective seq-1 and
 * before collective seq: a group's message seen during collective seq is
 * from an earlier call (a mismatch), collective seq's message seen in a
 * group is from a later one (kept), and two groups at the same place
 * match. */
static void test_group_order(void **unused) {
  (void)unused;
  xcoll_coll_args g = call(XCOLL_COLL_GROUP, XCOLL_UINT8, XCOLL_SUM, 0, 0, 5);
  xcoll_coll_args c = call(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, 4, 0, 5);
  xcoll_fingerprint group = xcoll_fingerprint_of(&g);
  xcoll_fingerprint coll = xcoll_fingerprint_of(&c);
  xcoll_fingerprint none;
  memset(&none, 0, sizeof none);
  const xcoll_fingerprint *ours = NULL;
  assert_int_equal(xcoll_fingerprint_judge(&coll, &none, &group, 0, &ours),
                   XCOLL_FINGERPRINT_MISMATCH);
  assert_int_equal(xcoll_fingerprint_judge(&group, &none, &coll, 0, &ours),
                   XCOLL_FINGERPRINT_AHEAD);
  assert_int_equal(xcoll_fingerprint_judge(&group, &none, &group, 1, &ours),
                   XCOLL_FINGERPRINT_MATCH);
  uint8_t bytes[XCOLL_FINGERPRINT_BYTES];
  xcoll_fingerprint back;
  xcoll_fingerprint_encode(&group, bytes);
  assert_int_equal(xcoll_fingerprint_decode(bytes, &back), 0);
  assert_int_equal(back.kind, XCOLL_COLL_GROUP);
  char text[XCOLL_FINGERPRINT_TEXT_BYTES];
  assert_string_equal(xcoll_fingerprint_describe(&group, text, sizeof text),
                      "a group of sends and receives");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_and_roundtrip),
      cmocka_unit_test(test_unused_fields_ignored),
      cmocka_unit_test(test_each_field_differs),
      cmocka_unit_test(test_digest),
      cmocka_unit_test(test_premul_and_bitwise_ops),
      cmocka_unit_test(test_decode_rejects_garbage),
      cmocka_unit_test(test_describe_and_mismatch),
      cmocka_unit_test(test_judge),
      cmocka_unit_test(test_table_of_collectives),
      cmocka_unit_test(test_group_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
