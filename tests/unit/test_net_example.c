/* test_net_example.c - the example net plugin (net/example/), loaded the way
 * a user loads an external plugin, XCOLL_NET_PLUGIN=<path of the .so>,
 * passes the same API checks as the built-in plugins
 * (net_plugin_checks.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdlib.h>

#include "net_plugin_checks.h"

#ifndef XCOLL_NET_EXAMPLE_PATH
#error "tests/CMakeLists.txt passes the path of libxcoll-net-example.so"
#endif

static int setup(void **state) {
  (void)state;
  setenv("XCOLL_NET_PLUGIN", XCOLL_NET_EXAMPLE_PATH, 1);
  char why[512];
  assert_int_equal(xcoll_net_select(&net, why, sizeof why), XCOLL_SUCCESS);
  assert_string_equal(net->name, "example");
  assert_non_null(strstr(why, "XCOLL_NET_PLUGIN="));
  /* cached: the second choice is the same plugin */
  const xcoll_net_v1 *again = NULL;
  assert_int_equal(xcoll_net_select(&again, why, sizeof why), XCOLL_SUCCESS);
  assert_ptr_equal(again, net);
  /* A v1 plugin (exports xcoll_net_plugin_v1 only): its struct is read up
   * to the v1 fields, and the optional entries after them are NULL. */
  assert_null(net->get_fds);
  return 0;
}

static void test_example_errors_reach_the_log(void **state) {
  (void)state;
  check_link l;
  check_open(&l);
  void *mr = (void *)&mr;
  char buf[4];
  assert_int_equal(
      net->reg_mr(l.send, NULL, buf, sizeof buf, XCOLL_NET_PTR_CUDA, &mr),
      XCOLL_ERR_NOT_SUPPORTED);
  /* xcoll_net_select gave the plugin xcoll_net_log_bridge */
  assert_non_null(strstr(xcoll_net_last_error(), "host memory only"));
  check_close(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_PLUGIN_CHECKS,
      cmocka_unit_test(test_example_errors_reach_the_log),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
