/* test_net_ucx.c - the ucx net plugin (net/ucx/), chosen with XCOLL_NET=ucx,
 * passes the API checks every plugin must pass (net_plugin_checks.h):
 * worker addresses exchanged during connect/accept, messages in order,
 * back-pressure, tag mismatch and truncation as PROTOCOL, a closed peer as
 * REMOTE. Skipped (77) when xcoll is built without UCX. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#ifdef XCOLL_HAVE_UCX
#include "net_plugin_checks.h"

static int setup(void **state) {
  (void)state;
  setenv("XCOLL_SOCKET_IFNAME", "lo", 1);
  setenv("XCOLL_NET", "ucx", 1);
  unsetenv("XCOLL_NET_PLUGIN");
  char why[512];
  assert_int_equal(xcoll_net_select(&net, why, sizeof why), XCOLL_SUCCESS);
  assert_ptr_equal(net, &xcoll_net_ucx);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {NET_PLUGIN_CHECKS};
  return cmocka_run_group_tests(tests, setup, NULL);
}
#else
int main(void) {
  printf("SKIP: xcoll was built without UCX (libucx-dev), so there is no "
         "ucx net plugin\n");
  return 77;
}
#endif
