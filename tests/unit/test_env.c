/* test_env.c - the environment readers of core/env.c and the launcher
 * variables of xcoll_comm_init_env: valid values, unset and empty values,
 * malformed and out-of-range values (each must be XCOLL_ERR_ENV with a
 * message naming the variable). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "env.h"
#include "xcoll.h"

#define VAR "XCOLL_TEST_VALUE"

static void expect_message_has(const char *needle) {
  const char *message = xcoll_last_error();
  if (strstr(message, needle) == NULL)
    fail_msg("message '%s' does not contain '%s'", message, needle);
}

static void test_int_valid(void **state) {
  (void)state;
  long value = 0;
  setenv(VAR, "42", 1);
  assert_int_equal(xcoll_env_int(VAR, 7, 0, 100, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 42);
  setenv(VAR, "-5", 1);
  assert_int_equal(xcoll_env_int(VAR, 7, -10, 10, &value), XCOLL_SUCCESS);
  assert_int_equal(value, -5);
  setenv(VAR, "16", 1);
  assert_int_equal(xcoll_env_int(VAR, 1, 1, 16, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 16);
}

static void test_int_unset_and_empty_give_default(void **state) {
  (void)state;
  long value = 0;
  unsetenv(VAR);
  assert_int_equal(xcoll_env_int(VAR, 7, 0, 100, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 7);
  value = 0;
  setenv(VAR, "", 1);
  assert_int_equal(xcoll_env_int(VAR, 9, 0, 100, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 9);
  assert_null(xcoll_env_str(VAR));
  unsetenv(VAR);
}

static void test_int_malformed(void **state) {
  (void)state;
  const char *bad[] = {"12abc", "abc", " 12", "1.5", "0x10", "+", "-", "12 "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    long value = 1234;
    setenv(VAR, bad[i], 1);
    assert_int_equal(xcoll_env_int(VAR, 7, 0, 100, &value), XCOLL_ERR_ENV);
    assert_int_equal(value, 1234); /* untouched on error */
    expect_message_has(VAR);
    expect_message_has(bad[i]);
  }
  unsetenv(VAR);
}

static void test_int_out_of_range_and_overflow(void **state) {
  (void)state;
  long value = 0;
  setenv(VAR, "17", 1);
  assert_int_equal(xcoll_env_int(VAR, 1, 1, 16, &value), XCOLL_ERR_ENV);
  expect_message_has(VAR);
  expect_message_has("[1, 16]");
  setenv(VAR, "0", 1);
  assert_int_equal(xcoll_env_int(VAR, 1, 1, 16, &value), XCOLL_ERR_ENV);
  setenv(VAR, "-1", 1);
  assert_int_equal(xcoll_env_int(VAR, 1, 0, 16, &value), XCOLL_ERR_ENV);
  setenv(VAR, "99999999999999999999999999", 1);
  assert_int_equal(xcoll_env_int(VAR, 1, 0, 16, &value), XCOLL_ERR_ENV);
  expect_message_has(VAR);
  unsetenv(VAR);
}

static void test_double(void **state) {
  (void)state;
  double value = 0;
  setenv(VAR, "2.5", 1);
  assert_int_equal(xcoll_env_double(VAR, 1.0, 0.0, 10.0, &value),
                   XCOLL_SUCCESS);
  assert_true(value == 2.5);
  setenv(VAR, "1e3", 1);
  assert_int_equal(xcoll_env_double(VAR, 1.0, 0.0, 1e4, &value), XCOLL_SUCCESS);
  assert_true(value == 1000.0);
  unsetenv(VAR);
  assert_int_equal(xcoll_env_double(VAR, 3.25, 0.0, 10.0, &value),
                   XCOLL_SUCCESS);
  assert_true(value == 3.25);
  const char *bad[] = {"nan", "inf", "abc", "1.5s", "", "1e999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (bad[i][0] == '\0')
      continue; /* empty is unset, checked above */
    setenv(VAR, bad[i], 1);
    assert_int_equal(xcoll_env_double(VAR, 1.0, 0.0, 1e9, &value),
                     XCOLL_ERR_ENV);
    expect_message_has(VAR);
  }
  setenv(VAR, "11", 1);
  assert_int_equal(xcoll_env_double(VAR, 1.0, 0.0, 10.0, &value),
                   XCOLL_ERR_ENV);
  expect_message_has("out of range");
  unsetenv(VAR);
}

static void test_size_suffixes(void **state) {
  (void)state;
  struct {
    const char *text;
    size_t bytes;
  } good[] = {{"512", 512},        {"0", 0},
              {"64K", 64u << 10},  {"64k", 64u << 10},
              {"64KB", 64u << 10}, {"64KiB", 64u << 10},
              {"3M", 3u << 20},    {"1G", (size_t)1 << 30}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    size_t value = 1;
    setenv(VAR, good[i].text, 1);
    assert_int_equal(xcoll_env_size(VAR, 7, &value), XCOLL_SUCCESS);
    assert_int_equal(value, good[i].bytes);
  }
  size_t value = 0;
  unsetenv(VAR);
  assert_int_equal(xcoll_env_size(VAR, 4096, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 4096);

  const char *bad[] = {"10X",         "-1",  "K",   "1.5M",
                       "12 K",        "1KK", "1Kb", "99999999999999999999999",
                       "17179869184G"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    value = 99;
    setenv(VAR, bad[i], 1);
    assert_int_equal(xcoll_env_size(VAR, 7, &value), XCOLL_ERR_ENV);
    assert_int_equal(value, 99);
    expect_message_has(VAR);
  }
  unsetenv(VAR);
}

/* The parser itself, as the tools call it: which failure it is. */
static void test_parse_size(void **state) {
  (void)state;
  size_t value = 5;
  assert_int_equal(xcoll_parse_size("2KiB", &value), 0);
  assert_int_equal(value, 2048);
  assert_int_equal(xcoll_parse_size("32M", &value), 0);
  assert_int_equal(value, (size_t)32 << 20);
  const char *malformed[] = {"", "B", " 1", "+1", "1B", "1 K", "1Kb", "1KiBs"};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
    value = 5;
    assert_int_equal(xcoll_parse_size(malformed[i], &value),
                     XCOLL_SIZE_MALFORMED);
    assert_int_equal(value, 5);
  }
  assert_int_equal(xcoll_parse_size("99999999999999999999999", &value),
                   XCOLL_SIZE_TOO_LARGE);
  assert_int_equal(xcoll_parse_size("17179869184G", &value),
                   XCOLL_SIZE_TOO_LARGE);
  assert_int_equal(value, 5);
}

static void test_choice(void **state) {
  (void)state;
  const char *const choices[] = {"ring", "tree", NULL};
  int index = 5;
  unsetenv(VAR);
  assert_int_equal(xcoll_env_choice(VAR, choices, &index), XCOLL_SUCCESS);
  assert_int_equal(index, -1);
  setenv(VAR, "ring", 1);
  assert_int_equal(xcoll_env_choice(VAR, choices, &index), XCOLL_SUCCESS);
  assert_int_equal(index, 0);
  setenv(VAR, "TREE", 1);
  assert_int_equal(xcoll_env_choice(VAR, choices, &index), XCOLL_SUCCESS);
  assert_int_equal(index, 1);
  setenv(VAR, "bogus", 1);
  assert_int_equal(xcoll_env_choice(VAR, choices, &index), XCOLL_ERR_ENV);
  expect_message_has(VAR);
  expect_message_has("bogus");
  expect_message_has("ring, tree");
  unsetenv(VAR);
}

/* ---- xcoll_comm_init_env with malformed launcher variables ---- */

static const char *const launcher_vars[] = {"RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE",
                                            "MASTER_ADDR",
                                            "MASTER_PORT",
                                            "OMPI_COMM_WORLD_RANK",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "OMPI_COMM_WORLD_LOCAL_SIZE",
                                            "SLURM_PROCID",
                                            "SLURM_NTASKS",
                                            "SLURM_LOCALID",
                                            "XCOLL_NSOCKS_PERPEER",
                                            "XCOLL_TIMEOUT_S",
                                            "XCOLL_CHUNK_SIZE",
                                            "XCOLL_BACKEND",
                                            NULL};

static int clear_launcher_env(void **state) {
  (void)state;
  for (int i = 0; launcher_vars[i] != NULL; i++)
    unsetenv(launcher_vars[i]);
  return 0;
}

/* Set the NULL-terminated name/value pairs, call init_env, expect
 * XCOLL_ERR_ENV naming variable, and a NULL communicator. */
static void expect_env_error(const char *variable, ...) {
  clear_launcher_env(NULL);
  va_list ap;
  va_start(ap, variable);
  for (;;) {
    const char *name = va_arg(ap, const char *);
    if (name == NULL)
      break;
    setenv(name, va_arg(ap, const char *), 1);
  }
  va_end(ap);
  xcoll_comm_t comm = (xcoll_comm_t)(uintptr_t)1;
  assert_int_equal(xcoll_comm_init_env(&comm), XCOLL_ERR_ENV);
  assert_null(comm);
  expect_message_has(variable);
  clear_launcher_env(NULL);
}

static void test_init_env_malformed_torchrun(void **state) {
  (void)state;
  expect_env_error("RANK", "RANK", "abc", "WORLD_SIZE", "2", NULL);
  expect_env_error("WORLD_SIZE", "RANK", "0", "WORLD_SIZE", "2x", NULL);
  expect_env_error("WORLD_SIZE", "RANK", "0", "WORLD_SIZE", "0", NULL);
  expect_env_error("RANK", "RANK", "-1", "WORLD_SIZE", "2", NULL);
  /* RANK >= WORLD_SIZE names both. */
  expect_env_error("RANK", "RANK", "2", "WORLD_SIZE", "2", NULL);
  expect_env_error("WORLD_SIZE", "RANK", "2", "WORLD_SIZE", "2", NULL);
  /* One of the pair without the other. */
  expect_env_error("WORLD_SIZE", "RANK", "0", NULL);
  expect_env_error("RANK", "WORLD_SIZE", "4", NULL);
  expect_env_error("LOCAL_RANK", "RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK",
                   "one", NULL);
  expect_env_error("LOCAL_RANK", "RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK",
                   "3", "LOCAL_WORLD_SIZE", "2", NULL);
}

static void test_init_env_malformed_master_port(void **state) {
  (void)state;
  expect_env_error("MASTER_PORT", "RANK", "0", "WORLD_SIZE", "1", "MASTER_PORT",
                   "70000", NULL);
  expect_env_error("MASTER_PORT", "RANK", "0", "WORLD_SIZE", "1", "MASTER_PORT",
                   "0", NULL);
  expect_env_error("MASTER_PORT", "RANK", "0", "WORLD_SIZE", "1", "MASTER_PORT",
                   "29500x", NULL);
  /* Even with no launcher variables, a malformed port is reported. */
  expect_env_error("MASTER_PORT", "MASTER_PORT", "-3", NULL);
}

static void test_init_env_malformed_mpi_and_slurm(void **state) {
  (void)state;
  expect_env_error("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "1",
                   "OMPI_COMM_WORLD_SIZE", "two", NULL);
  expect_env_error("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "5",
                   "OMPI_COMM_WORLD_SIZE", "4", NULL);
  expect_env_error("SLURM_PROCID", "SLURM_PROCID", "3", "SLURM_NTASKS", "2",
                   NULL);
  expect_env_error("SLURM_NTASKS", "SLURM_PROCID", "0", NULL);
}

static void test_init_env_malformed_xcoll_options(void **state) {
  (void)state;
  expect_env_error("XCOLL_NSOCKS_PERPEER", "XCOLL_NSOCKS_PERPEER", "17", NULL);
  expect_env_error("XCOLL_NSOCKS_PERPEER", "XCOLL_NSOCKS_PERPEER", "0", NULL);
  expect_env_error("XCOLL_TIMEOUT_S", "XCOLL_TIMEOUT_S", "soon", NULL);
  expect_env_error("XCOLL_TIMEOUT_S", "XCOLL_TIMEOUT_S", "-1", NULL);
  expect_env_error("XCOLL_CHUNK_SIZE", "XCOLL_CHUNK_SIZE", "1Q", NULL);
  expect_env_error("XCOLL_CHUNK_SIZE", "XCOLL_CHUNK_SIZE", "0", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_int_valid),
      cmocka_unit_test(test_int_unset_and_empty_give_default),
      cmocka_unit_test(test_int_malformed),
      cmocka_unit_test(test_int_out_of_range_and_overflow),
      cmocka_unit_test(test_double),
      cmocka_unit_test(test_size_suffixes),
      cmocka_unit_test(test_parse_size),
      cmocka_unit_test(test_choice),
      cmocka_unit_test_setup(test_init_env_malformed_torchrun,
                             clear_launcher_env),
      cmocka_unit_test_setup(test_init_env_malformed_master_port,
                             clear_launcher_env),
      cmocka_unit_test_setup(test_init_env_malformed_mpi_and_slurm,
                             clear_launcher_env),
      cmocka_unit_test_setup(test_init_env_malformed_xcoll_options,
                             clear_launcher_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
