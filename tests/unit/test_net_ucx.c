/* test_net_ucx.c - the ucx net plugin (net/ucx/), chosen with XCOLL_NET=ucx,
 * passes the API checks every plugin must pass (net_plugin_checks.h):
 * worker addresses exchanged during connect/accept, messages in order,
 * back-pressure, tag mismatch and truncation as PROTOCOL, a closed peer as
 * REMOTE; and a killed peer process of this host as REMOTE naming its pid.
 * Skipped (77) when xcoll is built without UCX. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* A peer in another process of this host (a forked child): the two
 * connect without UCX's peer failure handling, so that UCX may use shared
 * memory, and the receiver watches the child's process instead. The child
 * sends one message and, once it is matched, is killed without closing
 * anything: the message must have arrived, and the next receive must fail
 * with REMOTE naming the child's pid within the bound, where before it
 * would wait for ever (nothing else reports a dead peer there). Runs first,
 * before this process has made any UCX context, so that the child starts
 * from a clean UCX. */
static void check_same_host_peer_killed(void **state) {
  (void)state;
  xcoll_net_config rx = check_config(9, 1), tx = check_config(9, 0);
  xcoll_net_listen_comm *listen = NULL;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    double deadline = check_now() + CHECK_WAIT_S;
    xcoll_net_send_comm *send = NULL;
    while (send == NULL && check_now() < deadline)
      if (net->connect(0, &tx, handle, 1, &send) != XCOLL_SUCCESS)
        _exit(2);
    char out[64] = "sent before the end";
    xcoll_net_request *r = NULL;
    while (send != NULL && r == NULL && check_now() < deadline)
      if (net->isend(send, out, sizeof out, 5, NULL, &r) != XCOLL_SUCCESS)
        _exit(3);
    int done = 0;
    while (r != NULL && !done && check_now() < deadline)
      if (net->test(r, &done, NULL) != XCOLL_SUCCESS)
        _exit(4);
    if (!done)
      _exit(5);
    raise(SIGKILL);
    _exit(6);
  }
  xcoll_net_recv_comm *recv = NULL;
  double deadline = check_now() + CHECK_WAIT_S;
  while (recv == NULL && check_now() < deadline)
    assert_int_equal(net->accept(listen, 0, &recv), XCOLL_SUCCESS);
  assert_non_null(recv);
  char in[64] = "";
  xcoll_net_request *r = NULL;
  assert_int_equal(net->irecv(recv, in, sizeof in, 5, NULL, &r), XCOLL_SUCCESS);
  assert_non_null(r);
  size_t got = 0;
  assert_int_equal(check_wait(r, &got), XCOLL_SUCCESS);
  assert_int_equal(got, sizeof in);
  assert_string_equal(in, "sent before the end");
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  assert_int_equal(net->irecv(recv, in, sizeof in, 6, NULL, &r), XCOLL_SUCCESS);
  assert_non_null(r);
  xcoll_status st = XCOLL_SUCCESS;
  int done = 0;
  double start = check_now();
  while (st == XCOLL_SUCCESS && !done && check_now() < start + CHECK_WAIT_S)
    st = net->test(r, &done, NULL);
  assert_int_equal(st, XCOLL_ERR_REMOTE);
  char pid_text[32];
  snprintf(pid_text, sizeof pid_text, "pid %d", (int)child);
  if (strstr(xcoll_net_last_error(), pid_text) == NULL)
    fail_msg("the error does not name %s: %s", pid_text,
             xcoll_net_last_error());
  net->close_recv(recv);
  net->close_listen(listen);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(check_same_host_peer_killed), NET_PLUGIN_CHECKS,
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
