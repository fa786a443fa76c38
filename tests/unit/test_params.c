/* test_params.c - the NCCL-style parameter syntaxes and the parameter
 * table: XCOLL_SOCKET_IFNAME's matcher (prefix, =exact, ^exclude, lists,
 * interfaces with only IPv6 addresses), XCOLL_DEBUG_SUBSYS parsing,
 * XCOLL_DEBUG_FILE's %h/%p expansion, and core/params.c's readers taking
 * default and range from the table that xcoll-info prints. Pure functions:
 * no interface or file of the machine is used. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "ifname.h"
#include "log.h"
#include "params.h"
#include "xcoll.h"

static void expect_message_has(const char *needle) {
  const char *message = xcoll_last_error();
  if (strstr(message, needle) == NULL)
    fail_msg("message '%s' does not contain '%s'", message, needle);
}

static xcoll_ifname_spec parsed(const char *value) {
  xcoll_ifname_spec spec;
  assert_int_equal(xcoll_ifname_parse(value, &spec), XCOLL_SUCCESS);
  return spec;
}

static void test_ifname_prefix_and_exact(void **state) {
  (void)state;
  xcoll_ifname_spec spec = parsed("eth");
  assert_true(xcoll_ifname_match(&spec, "eth0"));
  assert_true(xcoll_ifname_match(&spec, "eth"));
  assert_false(xcoll_ifname_match(&spec, "ens3"));
  assert_false(xcoll_ifname_match(&spec, "veth0")); /* prefix, not substring */

  spec = parsed("=eth0");
  assert_true(spec.exact);
  assert_true(xcoll_ifname_match(&spec, "eth0"));
  assert_false(xcoll_ifname_match(&spec, "eth0.100"));
  assert_false(xcoll_ifname_match(&spec, "eth1"));
}

static void test_ifname_lists_and_exclusions(void **state) {
  (void)state;
  xcoll_ifname_spec spec = parsed("eth,ib");
  assert_int_equal(spec.count, 2);
  assert_true(xcoll_ifname_match(&spec, "ib0"));
  assert_true(xcoll_ifname_match(&spec, "eth1"));
  assert_false(xcoll_ifname_match(&spec, "lo"));

  spec = parsed("^lo,docker");
  assert_true(spec.exclude);
  assert_false(xcoll_ifname_match(&spec, "lo"));
  assert_false(xcoll_ifname_match(&spec, "docker0"));
  assert_true(xcoll_ifname_match(&spec, "eth0"));
  assert_true(xcoll_ifname_match(&spec, "ens3"));

  spec = parsed("^=eth0,lo");
  assert_true(spec.exclude && spec.exact);
  assert_false(xcoll_ifname_match(&spec, "eth0"));
  assert_true(xcoll_ifname_match(&spec, "eth0.100"));
  assert_false(xcoll_ifname_match(&spec, "lo"));
}

static void test_ifname_malformed(void **state) {
  (void)state;
  const char *bad[] = {"^", "=", "^=", "eth,,ib", "eth,", ",eth"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    xcoll_ifname_spec spec;
    assert_int_equal(xcoll_ifname_parse(bad[i], &spec), XCOLL_ERR_ENV);
    expect_message_has("XCOLL_SOCKET_IFNAME");
    expect_message_has("=eth0");
  }
  char long_name[200];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  xcoll_ifname_spec spec;
  assert_int_equal(xcoll_ifname_parse(long_name, &spec), XCOLL_ERR_ENV);
}

static void test_ifname_pick(void **state) {
  (void)state;
  /* getifaddrs order: lo, eth0 (IPv6 only), eth1, docker0, eth10. */
  const xcoll_ifaddr_entry entries[] = {
      {"lo", AF_INET, 1, 1},      {"lo", AF_INET6, 1, 1},
      {"eth0", AF_INET6, 1, 0},   {"eth1", AF_INET, 1, 0},
      {"docker0", AF_INET, 1, 0}, {"eth10", AF_INET, 0, 0},
      {"eth1", AF_INET6, 1, 0},
  };
  size_t n = sizeof entries / sizeof entries[0];
  char why[256];

  xcoll_ifname_spec spec = parsed("eth");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), 3);
  spec = parsed("^docker,eth1");
  /* eth0 has only IPv6, eth10 is down: loopback is all that is left. */
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), 0);
  spec = parsed("^docker");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), 3);
  spec = parsed("docker,eth1");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), 3);

  /* An interface with only an IPv6 address is named, not silently used. */
  spec = parsed("=eth0");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), -1);
  assert_non_null(strstr(why, "eth0"));
  assert_non_null(strstr(why, "IPv6"));
  spec = parsed("=eth10");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), -1);
  assert_non_null(strstr(why, "down"));
  spec = parsed("ib");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET, entries, n, why, sizeof why), -1);
  assert_non_null(strstr(why, "no interface"));
}

/* The tcp backend's choice: IPv6 by request, or when a selected interface
 * has no IPv4 address. */
static void test_ifname_pick_ipv6(void **state) {
  (void)state;
  const xcoll_ifaddr_entry entries[] = {
      {"lo", AF_INET, 1, 1},    {"lo", AF_INET6, 1, 1},
      {"eth0", AF_INET6, 1, 0}, {"eth1", AF_INET, 1, 0},
      {"eth1", AF_INET6, 1, 0},
  };
  size_t n = sizeof entries / sizeof entries[0];
  char why[256];
  xcoll_ifname_spec spec = parsed("eth");
  /* Unspecified family: IPv4 first (eth1), IPv6 only if nothing else. */
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_UNSPEC, entries, n, why, sizeof why), 3);
  spec = parsed("=eth0");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_UNSPEC, entries, n, why, sizeof why), 2);
  /* AF_INET6 asked: the first IPv6 address of a selected interface. */
  spec = parsed("eth");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET6, entries, n, why, sizeof why), 2);
  spec = parsed("^eth0");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET6, entries, n, why, sizeof why), 4);
  spec = parsed("=lo");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET6, entries, n, why, sizeof why), 1);
  /* AF_INET6 asked of an interface with only IPv4: said so. */
  const xcoll_ifaddr_entry v4_only[] = {{"eth9", AF_INET, 1, 0}};
  spec = parsed("eth9");
  assert_int_equal(
      xcoll_ifname_pick(&spec, AF_INET6, v4_only, 1, why, sizeof why), -1);
  assert_non_null(strstr(why, "only IPv4"));
}

static void test_debug_subsys(void **state) {
  (void)state;
  unsigned mask = 0;
  char why[512];
  assert_int_equal(xcoll_log_parse_subsys("INIT,COLL", &mask, why, sizeof why),
                   0);
  assert_int_equal(mask, XCOLL_SUBSYS_INIT | XCOLL_SUBSYS_COLL);
  assert_int_equal(
      xcoll_log_parse_subsys("net,p2p,Alloc", &mask, why, sizeof why), 0);
  assert_int_equal(mask,
                   XCOLL_SUBSYS_NET | XCOLL_SUBSYS_P2P | XCOLL_SUBSYS_ALLOC);
  assert_int_equal(xcoll_log_parse_subsys("ALL", &mask, why, sizeof why), 0);
  assert_int_equal(mask, XCOLL_SUBSYS_ALL);
  assert_int_equal(xcoll_log_parse_subsys("^NET,P2P", &mask, why, sizeof why),
                   0);
  assert_int_equal(mask,
                   XCOLL_SUBSYS_ALL & ~(XCOLL_SUBSYS_NET | XCOLL_SUBSYS_P2P));
  assert_true(mask & XCOLL_SUBSYS_INIT);

  const char *bad[] = {"INIT,BOGUS", "", "^", "INIT,", "COLLX"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mask = 12345;
    assert_int_equal(xcoll_log_parse_subsys(bad[i], &mask, why, sizeof why),
                     -1);
    assert_int_equal(mask, 12345); /* untouched on error */
    assert_non_null(strstr(why, "XCOLL_DEBUG_SUBSYS"));
    assert_non_null(strstr(why, "BOOTSTRAP")); /* lists the names */
  }
}

static void test_debug_file_expansion(void **state) {
  (void)state;
  char out[64];
  assert_int_equal(
      xcoll_log_expand_path("/tmp/x.%h.%p.log", "node7", 4242, out, sizeof out),
      0);
  assert_string_equal(out, "/tmp/x.node7.4242.log");
  assert_int_equal(xcoll_log_expand_path("100%%-%h%q", "h", 1, out, sizeof out),
                   0);
  assert_string_equal(out, "100%-h%q"); /* other escapes stay as written */
  assert_int_equal(xcoll_log_expand_path("%p%p", "h", 7, out, sizeof out), 0);
  assert_string_equal(out, "77");
  /* Too long once expanded: refused, not truncated. */
  char small[8];
  assert_int_equal(
      xcoll_log_expand_path("ab%hcd", "longhost", 1, small, sizeof small), -1);
}

static void test_table_readers(void **state) {
  (void)state;
  const xcoll_param *timeout = xcoll_param_find("XCOLL_TIMEOUT_S");
  assert_non_null(timeout);
  double seconds = 0;
  unsetenv("XCOLL_TIMEOUT_S");
  assert_int_equal(xcoll_param_double("XCOLL_TIMEOUT_S", &seconds),
                   XCOLL_SUCCESS);
  assert_true(seconds == timeout->def);
  /* The bound the library rejects is the bound xcoll-info checks. */
  setenv("XCOLL_TIMEOUT_S", "0", 1);
  assert_int_equal(xcoll_param_check(timeout), XCOLL_ERR_ENV);
  expect_message_has("XCOLL_TIMEOUT_S");
  unsetenv("XCOLL_TIMEOUT_S");

  size_t bytes = 0;
  unsetenv("XCOLL_CHUNK_SIZE");
  assert_int_equal(xcoll_param_size("XCOLL_CHUNK_SIZE", 128 << 10, &bytes),
                   XCOLL_SUCCESS);
  assert_int_equal(bytes, 128 << 10); /* a backend's own default wins */
  setenv("XCOLL_CHUNK_SIZE", "4", 1);
  assert_int_equal(xcoll_param_size("XCOLL_CHUNK_SIZE", 0, &bytes),
                   XCOLL_ERR_ENV);
  expect_message_has("out of range");
  unsetenv("XCOLL_CHUNK_SIZE");

  setenv("XCOLL_DEBUG_SUBSYS", "INIT,NOPE", 1);
  assert_int_equal(xcoll_param_check(xcoll_param_find("XCOLL_DEBUG_SUBSYS")),
                   XCOLL_ERR_ENV);
  unsetenv("XCOLL_DEBUG_SUBSYS");
  setenv("XCOLL_SOCKET_IFNAME", "^=lo,docker", 1);
  assert_int_equal(xcoll_param_check(xcoll_param_find("XCOLL_SOCKET_IFNAME")),
                   XCOLL_SUCCESS);
  unsetenv("XCOLL_SOCKET_IFNAME");

  /* Every entry has a name, a description and a sane range. */
  size_t count = 0;
  const xcoll_param *table = xcoll_param_table(&count);
  assert_true(count > 10);
  for (size_t i = 0; i < count; i++) {
    assert_non_null(table[i].description);
    /* xcoll's own variables first, then the launchers' (-1: unknown). */
    assert_true(table[i].launcher || strncmp(table[i].name, "XCOLL_", 6) == 0);
    if (table[i].kind == XCOLL_PARAM_INT ||
        table[i].kind == XCOLL_PARAM_DOUBLE ||
        table[i].kind == XCOLL_PARAM_SIZE) {
      assert_true(table[i].min <= table[i].def ||
                  (table[i].launcher && table[i].def == -1));
      assert_true(table[i].def <= table[i].max);
    }
    if (table[i].kind == XCOLL_PARAM_CHOICE)
      assert_non_null(table[i].choices);
  }
}

/* Every NCCL/Gloo alias names a variable of the table, and no foreign name
 * is listed twice. */
static void test_aliases(void **unused) {
  (void)unused;
  size_t count = 0;
  const xcoll_param_alias *aliases = xcoll_param_aliases(&count);
  assert_true(count > 10);
  for (size_t i = 0; i < count; i++) {
    assert_non_null(xcoll_param_find(aliases[i].xcoll));
    assert_true(strncmp(aliases[i].foreign, "NCCL_", 5) == 0 ||
                strncmp(aliases[i].foreign, "GLOO_", 5) == 0);
    for (size_t j = 0; j < i; j++)
      assert_string_not_equal(aliases[i].foreign, aliases[j].foreign);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ifname_prefix_and_exact),
      cmocka_unit_test(test_ifname_lists_and_exclusions),
      cmocka_unit_test(test_ifname_malformed),
      cmocka_unit_test(test_ifname_pick),
      cmocka_unit_test(test_ifname_pick_ipv6),
      cmocka_unit_test(test_debug_subsys),
      cmocka_unit_test(test_debug_file_expansion),
      cmocka_unit_test(test_table_readers),
      cmocka_unit_test(test_aliases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
