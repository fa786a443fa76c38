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

/* The nccl_like proxy's pattern (backends/nccl_like/proxy.c): up to 8
 * receives in flight, each into its own slot of slot_bytes, tags 0, 1, 2...
 * from a running counter; sends of varying smaller sizes with the same tags;
 * both tested oldest first, a new one posted as soon as an old one is done.
 * Messages often arrive before their receive is posted, so a receive may
 * match a waiting message at once (UCP's immediate completion): the tag and
 * length reported must still be the message's own, not the posted ones.
 * (Before the fix: "rank 1 sent message 1 with tag 0 where the posted
 * receive expects tag 1".) */
/* Message m's size, bytes: mostly small (sent eagerly, so they can wait
 * whole at the receiver), every third up to slot_bytes - 1. */
static size_t proxy_bytes(int m, size_t slot_bytes) {
  return m % 3 == 2 ? (size_t)(m * 7919) % slot_bytes : (size_t)(m * 13) % 256;
}

static void check_proxy_pattern(void **state) {
  (void)state;
  enum { WINDOW = 8, TOTAL = 400 };
  const size_t slot_bytes = 512 * 1024;
  check_link l;
  check_open(&l);
  unsigned char *out = malloc(WINDOW * slot_bytes);
  unsigned char *in = malloc(WINDOW * slot_bytes);
  assert_non_null(out);
  assert_non_null(in);
  xcoll_net_request *s[WINDOW] = {0}, *r[WINDOW] = {0};
  int sent = 0, sent_done = 0, posted = 0, received = 0;
  double deadline = check_now() + CHECK_WAIT_S;
  while (received < TOTAL && check_now() < deadline) {
    /* Sends first, so that messages are often waiting for their receive. */
    while (sent < TOTAL && sent - sent_done < WINDOW) {
      int j = sent % WINDOW;
      size_t bytes = proxy_bytes(sent, slot_bytes);
      check_fill(out + (size_t)j * slot_bytes, bytes, (unsigned)sent);
      xcoll_net_request *req = NULL;
      assert_int_equal(net->isend(l.send, out + (size_t)j * slot_bytes, bytes,
                                  (uint32_t)sent, NULL, &req),
                       XCOLL_SUCCESS);
      if (req == NULL) break; /* full: try again later */
      s[j] = req;
      sent++;
    }
    if (sent_done < sent) {
      int done = 0;
      assert_int_equal(net->test(s[sent_done % WINDOW], &done, NULL),
                       XCOLL_SUCCESS);
      if (done) sent_done++;
    }
    /* Testing the oldest receive first lets the worker take in messages
     * sent meanwhile, which the receives posted next then find waiting. */
    if (received < posted) {
      int j = received % WINDOW, done = 0;
      size_t got = 0;
      xcoll_status st = net->test(r[j], &done, &got);
      if (st != XCOLL_SUCCESS)
        fail_msg("receive %d (tag %d) failed with status %d", received,
                 received, (int)st);
      if (done) {
        /* the send of message `received` used out slot j too, and that slot
         * is not rewritten before this send is done; recompute instead */
        size_t want = proxy_bytes(received, slot_bytes);
        assert_int_equal(got, want);
        unsigned char *expect = malloc(want + 1);
        assert_non_null(expect);
        check_fill(expect, want, (unsigned)received);
        assert_memory_equal(in + (size_t)j * slot_bytes, expect, want);
        free(expect);
        assert_int_equal(in[(size_t)j * slot_bytes + want], 0xee);
        received++;
      }
    }
    while (posted < TOTAL && posted - received < WINDOW) {
      int j = posted % WINDOW;
      memset(in + (size_t)j * slot_bytes, 0xee, slot_bytes);
      xcoll_net_request *req = NULL;
      assert_int_equal(net->irecv(l.recv, in + (size_t)j * slot_bytes,
                                  slot_bytes, (uint32_t)posted, NULL, &req),
                       XCOLL_SUCCESS);
      if (req == NULL) break;
      r[j] = req;
      posted++;
    }
  }
  assert_int_equal(received, TOTAL);
  while (sent_done < sent) {
    assert_int_equal(check_wait(s[sent_done % WINDOW], NULL), XCOLL_SUCCESS);
    sent_done++;
  }
  free(out);
  free(in);
  check_close(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {NET_PLUGIN_CHECKS,
                                     cmocka_unit_test(check_proxy_pattern)};
  return cmocka_run_group_tests(tests, setup, NULL);
}
#else
int main(void) {
  printf("SKIP: xcoll was built without UCX (libucx-dev), so there is no "
         "ucx net plugin\n");
  return 77;
}
#endif
