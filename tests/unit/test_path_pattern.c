/* test_path_pattern.c - core/path_pattern.c, the one expander of per-process
 * and per-rank file names: each field on and off (XCOLL_DEBUG_FILE's %h %p
 * %%, XCOLL_TRACE's %r %p and .rank<N>), the extension rule, results that do
 * not fit, and the public xcoll_rank_path. Expected names are written out by
 * hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "path_pattern.h"
#include "xcoll.h"

static void expect(const char *pattern, const xcoll_path_fields *fields,
                   const char *want) {
  char out[128];
  if (xcoll_path_expand(pattern, fields, out, sizeof out) != 0)
    fail_msg("'%s' did not expand", pattern);
  if (strcmp(out, want) != 0)
    fail_msg("'%s' expanded to '%s', expected '%s'", pattern, out, want);
}

static void test_fields_on_and_off(void **state) {
  (void)state;
  xcoll_path_fields log = {
      .host = "node7", .pid = 42, .rank = -1, .percent = 1, .rank_suffix = 0};
  expect("/tmp/x.%h.%p.log", &log, "/tmp/x.node7.42.log");
  expect("100%%-%r%q%", &log, "100%-%r%q%"); /* %r off, unknown kept */
  xcoll_path_fields trace = {
      .host = NULL, .pid = 42, .rank = 3, .percent = 0, .rank_suffix = 1};
  expect("t.%r.json", &trace, "t.3.json");
  expect("t.%p.json", &trace, "t.42.json");
  expect("%h%%r", &trace, "%h%3"); /* %h and %% off: "%" then "%r" */
  xcoll_path_fields rank_only = {
      .host = NULL, .pid = -1, .rank = 5, .percent = 0, .rank_suffix = 1};
  expect("t.%p.json", &rank_only, "t.%p.rank5.json"); /* %p off: no field */
}

static void test_rank_suffix(void **state) {
  (void)state;
  xcoll_path_fields f = {
      .host = NULL, .pid = 42, .rank = 0, .percent = 0, .rank_suffix = 1};
  expect("trace.json", &f, "trace.rank0.json");
  expect("out/trace", &f, "out/trace.rank0");
  expect("a.b/trace", &f, "a.b/trace.rank0");   /* dot of a folder */
  expect("out/.hidden", &f, "out/.hidden.rank0"); /* leading dot */
  expect("x.tar.gz", &f, "x.tar.rank0.gz");      /* last extension only */
  f.rank_suffix = 0;
  expect("trace.json", &f, "trace.json");
}

static void test_too_long(void **state) {
  (void)state;
  xcoll_path_fields f = {
      .host = "longhost", .pid = 1, .rank = 12, .percent = 1, .rank_suffix = 1};
  char small[8];
  assert_int_equal(xcoll_path_expand("ab%hcd", &f, small, sizeof small), -1);
  f.host = NULL;
  assert_int_equal(xcoll_path_expand("%r.json", &f, small, sizeof small), 0);
  assert_string_equal(small, "12.json");
  /* "abcdefg" fits 8 bytes; with ".rank12" it does not */
  assert_int_equal(xcoll_path_expand("abcdefg", &f, small, sizeof small), -1);
  f.rank_suffix = 0;
  assert_int_equal(xcoll_path_expand("abcdefg", &f, small, sizeof small), 0);
  assert_int_equal(xcoll_path_expand("abcdefgh", &f, small, sizeof small), -1);
  assert_int_equal(xcoll_path_expand("", &f, small, 0), -1);
}

static void test_public_rank_path(void **state) {
  (void)state;
  char out[64], want[64];
  assert_int_equal(xcoll_rank_path("d/t.json", 2, out, sizeof out),
                   XCOLL_SUCCESS);
  assert_string_equal(out, "d/t.rank2.json");
  assert_int_equal(xcoll_rank_path("t.%p.json", 2, out, sizeof out),
                   XCOLL_SUCCESS);
  snprintf(want, sizeof want, "t.%ld.json", (long)getpid());
  assert_string_equal(out, want);
  assert_int_equal(xcoll_rank_path("t.json", -1, out, sizeof out),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "rank"));
  assert_int_equal(xcoll_rank_path(NULL, 0, out, sizeof out),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_rank_path("trace.json", 0, out, 8),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "trace.json"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fields_on_and_off),
      cmocka_unit_test(test_rank_suffix),
      cmocka_unit_test(test_too_long),
      cmocka_unit_test(test_public_rank_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
