/* test_wire.c - the wire header (core/wire.c): the encoding is the documented
 * little-endian byte layout, decode inverts encode, and every corrupted field
 * (magic, version, checksum, kind, comm id, sender, tag, length, a length over
 * the bound, a truncated header) is rejected with a reason that names it; the
 * fingerprint field travels intact and is covered by the checksum. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "wire.h"

#define COMM 0x1122334455667788ull
#define TAG 0x0000000700000003ull
#define PEER 5

static xcoll_wire_header sample(void) {
  return xcoll_wire_make(XCOLL_WIRE_DATA, COMM, TAG, 4096, PEER);
}

/* Encode h, optionally flip one byte, decode, and run the check with the
 * sample's expectations. Returns the check's result; why gets the reason. */
static int roundtrip_check(const xcoll_wire_header *h, int flip_byte,
                           char *why) {
  uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
  xcoll_wire_encode(h, bytes);
  if (flip_byte >= 0) bytes[flip_byte] ^= 0x40;
  xcoll_wire_header back;
  assert_int_equal(xcoll_wire_decode(bytes, sizeof bytes, &back, why,
                                     XCOLL_WIRE_WHY_BYTES),
                   0);
  why[0] = '\0';
  return xcoll_wire_check(&back, COMM, PEER, TAG, 4096, 1u << 20, why,
                          XCOLL_WIRE_WHY_BYTES);
}

static void test_layout_is_little_endian(void **state) {
  (void)state;
  xcoll_wire_header h = sample();
  xcoll_fingerprint fp = {.seq = 0x0102, .count = 1000, .root = 1,
                          .kind = XCOLL_COLL_BROADCAST, .dtype = XCOLL_FLOAT32,
                          .op = 0, .valid = 1};
  xcoll_wire_set_fingerprint(&h, &fp);
  uint8_t b[XCOLL_WIRE_HEADER_BYTES];
  xcoll_wire_encode(&h, b);
  /* Written out by hand from the table in wire.h. */
  const uint8_t expected[60] = {
      'X',  'C',  'W',  'M',  2,    0,    1,    0,    0x88, 0x77, 0x66, 0x55,
      0x44, 0x33, 0x22, 0x11, 0x03, 0,    0,    0,    0x07, 0,    0,    0,
      0x00, 0x10, 0,    0,    0,    0,    0,    0,    PEER, 0,    0,    0,
      0x02, 0x01, 0,    0,    0,    0,    0,    0,    0xe8, 0x03, 0,    0,
      0,    0,    0,    0,    1,    0,    0,    0,    XCOLL_COLL_BROADCAST,
      XCOLL_FLOAT32, 0, 1};
  assert_memory_equal(b, expected, sizeof expected);
  /* FNV-1a over bytes 0..59, computed independently here. */
  uint32_t hash = 2166136261u;
  for (int i = 0; i < 60; i++) hash = (hash ^ b[i]) * 16777619u;
  uint32_t stored = (uint32_t)b[60] | (uint32_t)b[61] << 8 |
                    (uint32_t)b[62] << 16 | (uint32_t)b[63] << 24;
  assert_int_equal(stored, hash);
  xcoll_wire_header d;
  assert_int_equal(xcoll_wire_decode(b, sizeof b, &d, NULL, 0), 0);
  xcoll_fingerprint back;
  assert_int_equal(xcoll_fingerprint_decode(d.fingerprint, &back), 0);
  assert_true(xcoll_fingerprint_equal(&fp, &back));
  assert_int_equal(back.root, 1);
}

static void test_roundtrip(void **state) {
  (void)state;
  xcoll_wire_header h = xcoll_wire_make(XCOLL_WIRE_ABORT, UINT64_MAX - 3,
                                        0xfedcba9876543210ull, 77, 65535);
  uint8_t b[XCOLL_WIRE_HEADER_BYTES];
  xcoll_wire_encode(&h, b);
  xcoll_wire_header d;
  char why[XCOLL_WIRE_WHY_BYTES] = "";
  assert_int_equal(xcoll_wire_decode(b, sizeof b, &d, why, sizeof why), 0);
  assert_int_equal(d.magic, XCOLL_WIRE_MAGIC);
  assert_int_equal(d.version, XCOLL_WIRE_VERSION);
  assert_int_equal(d.kind, XCOLL_WIRE_ABORT);
  assert_true(d.comm_id == UINT64_MAX - 3);
  assert_true(d.tag == 0xfedcba9876543210ull);
  assert_true(d.length == 77);
  assert_int_equal(d.sender, 65535);
  assert_int_equal(xcoll_wire_check(&d, UINT64_MAX - 3, 65535,
                                    0xfedcba9876543210ull, 77, 1024, why,
                                    sizeof why),
                   0);
  /* ANY skips tag and length, but the bound still holds. */
  assert_int_equal(xcoll_wire_check(&d, UINT64_MAX - 3, 65535, XCOLL_WIRE_ANY,
                                    XCOLL_WIRE_ANY, 77, why, sizeof why),
                   0);
  /* A good sample passes with its own expectations. */
  xcoll_wire_header s = sample();
  assert_int_equal(roundtrip_check(&s, -1, why), 0);
}

static void test_truncated(void **state) {
  (void)state;
  uint8_t b[XCOLL_WIRE_HEADER_BYTES];
  xcoll_wire_header h = sample(), d;
  xcoll_wire_encode(&h, b);
  char why[XCOLL_WIRE_WHY_BYTES] = "";
  assert_int_equal(xcoll_wire_decode(b, 63, &d, why, sizeof why), -1);
  assert_non_null(strstr(why, "truncated"));
  assert_non_null(strstr(why, "63 of 64"));
  assert_int_equal(xcoll_wire_decode(b, 0, &d, NULL, 0), -1);
}

static void expect_reject(const xcoll_wire_header *h, int flip_byte,
                          const char *word) {
  char why[XCOLL_WIRE_WHY_BYTES];
  assert_int_equal(roundtrip_check(h, flip_byte, why), -1);
  if (!strstr(why, word)) fail_msg("reason \"%s\" does not name \"%s\"", why, word);
}

static void test_corrupted_fields(void **state) {
  (void)state;
  xcoll_wire_header h = sample();
  /* A flipped byte in the encoded stream: magic and version are named as
   * such; a flip in any later field (here comm id, then the checksum itself)
   * is caught by the checksum before the field is compared. */
  expect_reject(&h, 0, "magic");
  expect_reject(&h, 4, "version");
  expect_reject(&h, 9, "checksum");
  expect_reject(&h, 37, "checksum"); /* the fingerprint */
  expect_reject(&h, 61, "checksum");

  /* Well-formed headers with one wrong field each. */
  xcoll_wire_header bad = h;
  bad.magic = 0xdeadbeef;
  expect_reject(&bad, -1, "magic");
  bad = h;
  bad.version = XCOLL_WIRE_VERSION + 1;
  expect_reject(&bad, -1, "version");
  bad = h;
  bad.kind = 99;
  expect_reject(&bad, -1, "kind");
  bad = h;
  bad.comm_id = COMM + 1;
  expect_reject(&bad, -1, "communicator id");
  bad = h;
  bad.sender = PEER + 1;
  expect_reject(&bad, -1, "rank 6");
  bad = h;
  bad.tag = TAG + 1;
  expect_reject(&bad, -1, "tag 0x700000004");
  bad = h;
  bad.length = 4095;
  expect_reject(&bad, -1, "length 4095");
  bad = h;
  bad.length = (1u << 20) + 1;
  expect_reject(&bad, -1, "exceeds the bound");

  /* The over-bound length is rejected even when any length is accepted. */
  char why[XCOLL_WIRE_WHY_BYTES];
  xcoll_wire_header huge = xcoll_wire_make(XCOLL_WIRE_DATA, COMM, TAG,
                                           UINT64_MAX - 1, PEER);
  uint8_t b[XCOLL_WIRE_HEADER_BYTES];
  xcoll_wire_encode(&huge, b);
  xcoll_wire_decode(b, sizeof b, &huge, NULL, 0);
  assert_int_equal(xcoll_wire_check(&huge, COMM, PEER, XCOLL_WIRE_ANY,
                                    XCOLL_WIRE_ANY, 1024, why, sizeof why),
                   -1);
  assert_non_null(strstr(why, "bound"));
  /* A NULL why is allowed. */
  assert_int_equal(xcoll_wire_check(&huge, COMM, PEER, XCOLL_WIRE_ANY,
                                    XCOLL_WIRE_ANY, 1024, NULL, 0),
                   -1);
}

static void test_kind_names(void **state) {
  (void)state;
  assert_string_equal(xcoll_wire_kind_name(XCOLL_WIRE_DATA), "DATA");
  assert_string_equal(xcoll_wire_kind_name(XCOLL_WIRE_ABORT), "ABORT");
  assert_string_equal(xcoll_wire_kind_name(XCOLL_WIRE_HELLO), "HELLO");
  assert_string_equal(xcoll_wire_kind_name(XCOLL_WIRE_BYE), "BYE");
  assert_string_equal(xcoll_wire_kind_name(0), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_is_little_endian),
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_corrupted_fields),
      cmocka_unit_test(test_kind_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
