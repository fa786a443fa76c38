/* test_checkpoint.c - checkpoint header validation and stale temporary files
 * (trainer/checkpoint.c): a well-formed header passes; each bad field
 * (negative step or epoch, overlapping or out-of-bounds or reversed
 * data_offsets, a shape or dtype that disagrees with the byte count, an
 * unknown dtype, a fractional offset, an impossible header length) is
 * rejected with a message naming the file and the field; temporary files of
 * dead writers are removed and a live writer's file is kept. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

#define RNG "00000000000000010000000000000002000000000000000300000000000000ff"

/* A safetensors image: 8-byte length, header, data_bytes zero bytes. */
static uint8_t *image(const char *header, size_t data_bytes, size_t *size) {
  size_t n = strlen(header);
  *size = 8 + n + data_bytes;
  uint8_t *b = calloc(1, *size);
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(b + 8, header, n);
  return b;
}

static char *header(const char *step, const char *tensors) {
  static char text[4096];
  snprintf(text, sizeof text,
           "{\"__metadata__\":{\"format\":\"xtrain-1\",\"step\":\"%s\","
           "\"epoch\":\"1\",\"step_in_epoch\":\"0\",\"rng_state\":\"" RNG
           "\"}%s%s}",
           step, tensors[0] ? "," : "", tensors);
  return text;
}

/* Validate header with data_bytes of data; expect rc, and each word. */
static void expect(const char *text, size_t data_bytes, int rc,
                   const char *word1, const char *word2) {
  size_t size = 0;
  uint8_t *b = image(text, data_bytes, &size);
  char err[512] = "";
  int got = checkpoint_validate_buffer("ck.safetensors", b, size, err, sizeof err);
  free(b);
  if (got != rc)
    fail_msg("rc %d, expected %d (%s) for %s", got, rc, err, text);
  if (rc != 0) {
    if (!strstr(err, "ck.safetensors"))
      fail_msg("\"%s\" does not name the file", err);
    if (word1 && !strstr(err, word1))
      fail_msg("\"%s\" does not name \"%s\"", err, word1);
    if (word2 && !strstr(err, word2))
      fail_msg("\"%s\" does not name \"%s\"", err, word2);
  }
}

#define A "\"model.a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"
#define B "\"model.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}"

static void test_valid(void **unused) {
  (void)unused;
  expect(header("5", A "," B), 40, 0, NULL, NULL);
  expect(header("0", ""), 0, 0, NULL, NULL);
  /* An empty tensor may sit anywhere. */
  expect(header("0", A ",\"model.e\":{\"dtype\":\"F32\",\"shape\":[0],"
                    "\"data_offsets\":[8,8]}"),
         24, 0, NULL, NULL);
}

static void test_bad_metadata(void **unused) {
  (void)unused;
  expect(header("-1", A), 24, -1, "step", "-1");
  expect(header("abc", A), 24, -1, "step", NULL);
  char text[4096];
  snprintf(text, sizeof text, "%s", header("3", A));
  char *epoch = strstr(text, "\"epoch\":\"1\"");
  memcpy(epoch, "\"epoch\":\"-\"", 11);
  expect(text, 24, -1, "epoch", NULL);
  expect("{\"model.a\":{}}", 0, -1, "__metadata__", NULL);
  snprintf(text, sizeof text, "%s", header("3", A));
  char *rng = strstr(text, RNG);
  rng[5] = 'z';
  expect(text, 24, -1, "rng_state", NULL);
}

static void test_bad_tensors(void **unused) {
  (void)unused;
  /* Overlap: b starts inside a. */
  expect(header("1", A ",\"model.b\":{\"dtype\":\"F32\",\"shape\":[4],"
                    "\"data_offsets\":[16,32]}"),
         40, -1, "overlap", "model.a");
  /* Out of bounds. */
  expect(header("1", B), 39, -1, "model.b", "data_offsets");
  /* Reversed. */
  expect(header("1", "\"model.r\":{\"dtype\":\"F32\",\"shape\":[0],"
                     "\"data_offsets\":[8,0]}"),
         8, -1, "model.r", "ordered");
  /* Shape disagrees with the byte count. */
  expect(header("1", "\"model.s\":{\"dtype\":\"F32\",\"shape\":[5],"
                     "\"data_offsets\":[0,16]}"),
         16, -1, "model.s", "need");
  /* dtype disagrees with the byte count. */
  expect(header("1", "\"model.d\":{\"dtype\":\"F64\",\"shape\":[4],"
                     "\"data_offsets\":[0,16]}"),
         16, -1, "model.d", "F64");
  expect(header("1", "\"model.u\":{\"dtype\":\"F33\",\"shape\":[4],"
                     "\"data_offsets\":[0,16]}"),
         16, -1, "model.u", "dtype");
  expect(header("1", "\"model.f\":{\"dtype\":\"F32\",\"shape\":[4],"
                     "\"data_offsets\":[0.5,16.5]}"),
         17, -1, "model.f", "data_offsets");
  expect(header("1", "\"model.n\":{\"dtype\":\"F32\",\"shape\":[-4],"
                     "\"data_offsets\":[0,16]}"),
         16, -1, "model.n", "shape[0]");
  /* A shape whose product overflows 64 bits. */
  expect(header("1", "\"model.o\":{\"dtype\":\"U8\",\"shape\":[4294967296,"
                     "4294967296,16],\"data_offsets\":[0,16]}"),
         16, -1, "model.o", "shape");
}

static void test_bad_length(void **unused) {
  (void)unused;
  uint8_t b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  char err[256] = "";
  assert_int_equal(checkpoint_validate_buffer("ck.safetensors", b, sizeof b,
                                              err, sizeof err),
                   -1);
  assert_non_null(strstr(err, "header length"));
  assert_int_equal(checkpoint_validate_buffer("ck.safetensors", b, 5, err,
                                              sizeof err),
                   -1);
  assert_non_null(strstr(err, "too short"));
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("partial", f);
  fclose(f);
}

static void test_clean_stale(void **unused) {
  (void)unused;
  char dir[] = "/tmp/xtrain_ckXXXXXX";
  assert_non_null(mkdtemp(dir));
  /* A pid that is surely dead: a child that exited and was reaped. */
  pid_t child = fork();
  if (child == 0)
    _exit(0);
  assert_true(child > 0);
  waitpid(child, NULL, 0);
  char dead[256], live[256], other[256], done[256];
  snprintf(dead, sizeof dead, "%s/.checkpoint_latest.safetensors.tmp.%d", dir,
           (int)child);
  snprintf(live, sizeof live, "%s/.checkpoint_best.safetensors.tmp.%d", dir,
           (int)getppid());
  snprintf(other, sizeof other, "%s/.notes.tmp.x", dir);
  snprintf(done, sizeof done, "%s/checkpoint_latest.safetensors", dir);
  touch(dead);
  touch(live);
  touch(other);
  touch(done);
  char err[256] = "";
  assert_int_equal(checkpoint_clean_stale(dir, err, sizeof err), 1);
  assert_int_not_equal(access(dead, F_OK), 0);
  assert_int_equal(access(live, F_OK), 0);
  assert_int_equal(access(other, F_OK), 0);
  assert_int_equal(access(done, F_OK), 0);
  unlink(live);
  unlink(other);
  unlink(done);
  rmdir(dir);
  assert_int_equal(checkpoint_clean_stale("/nonexistent/xtrain", err, sizeof err), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),       cmocka_unit_test(test_bad_metadata),
      cmocka_unit_test(test_bad_tensors), cmocka_unit_test(test_bad_length),
      cmocka_unit_test(test_clean_stale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
