/* net_plugin_checks.h - API checks every net plugin must pass (net/net.h's
 * contract), shared by test_net_ucx.c and test_net_example.c (the socket
 * plugin's own test, test_net_socket.c, adds socket-specific cases). The
 * including file sets `net` before the checks run. Everything runs in one
 * thread: connect/accept and send/receive are called in turn, which also
 * proves that none of them blocks waiting for the other side. */
#ifndef XCOLL_TESTS_NET_PLUGIN_CHECKS_H
#define XCOLL_TESTS_NET_PLUGIN_CHECKS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net.h"

#define CHECK_WAIT_S 30.0 /* bound on any loop that waits for the plugin */

static const xcoll_net_v1 *net;

static double check_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct check_link {
  xcoll_net_listen_comm *listen;
  xcoll_net_send_comm *send;
  xcoll_net_recv_comm *recv;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
} check_link;

static xcoll_net_config check_config(uint64_t comm_id, int rank) {
  xcoll_net_config c;
  memset(&c, 0, sizeof c);
  c.comm_id = comm_id;
  c.rank = rank;
  c.timeout_s = CHECK_WAIT_S;
  return c;
}

/* Rank 1 listens, rank 0 connects; both are called until both are done. */
static void check_open(check_link *l) {
  memset(l, 0, sizeof *l);
  xcoll_net_config rx = check_config(7, 1), tx = check_config(7, 0);
  assert_int_equal(net->listen(0, &rx, l->handle, &l->listen), XCOLL_SUCCESS);
  assert_int_equal(net->accept(l->listen, 0, &l->recv), XCOLL_SUCCESS);
  assert_null(l->recv); /* nobody has connected yet */
  double deadline = check_now() + CHECK_WAIT_S;
  while ((l->send == NULL || l->recv == NULL) && check_now() < deadline) {
    if (l->send == NULL)
      assert_int_equal(net->connect(0, &tx, l->handle, 1, &l->send),
                       XCOLL_SUCCESS);
    if (l->recv == NULL)
      assert_int_equal(net->accept(l->listen, 0, &l->recv), XCOLL_SUCCESS);
  }
  assert_non_null(l->send);
  assert_non_null(l->recv);
}

static void check_close(check_link *l) {
  if (l->send) net->close_send(l->send);
  if (l->recv) net->close_recv(l->recv);
  if (l->listen) net->close_listen(l->listen);
  memset(l, 0, sizeof *l);
}

static xcoll_status check_wait(xcoll_net_request *r, size_t *bytes) {
  double deadline = check_now() + CHECK_WAIT_S;
  int done = 0;
  while (check_now() < deadline) {
    xcoll_status s = net->test(r, &done, bytes);
    if (s != XCOLL_SUCCESS || done) return s;
  }
  fail_msg("request did not complete within %.0f s", CHECK_WAIT_S);
  return XCOLL_ERR_TIMEOUT;
}

/* Test a send and a receive in turn until both are done; returns the
 * receive's status (the send must succeed). */
static xcoll_status check_pair(xcoll_net_request *s, xcoll_net_request *r,
                               size_t *received) {
  double deadline = check_now() + CHECK_WAIT_S;
  int sdone = 0, rdone = 0;
  while ((!sdone || !rdone) && check_now() < deadline) {
    if (!sdone) assert_int_equal(net->test(s, &sdone, NULL), XCOLL_SUCCESS);
    if (!rdone) {
      xcoll_status rs = net->test(r, &rdone, received);
      if (rs != XCOLL_SUCCESS) return rs;
    }
  }
  assert_true(sdone && rdone);
  return XCOLL_SUCCESS;
}

/* Test a send and a receive in turn until the receive fails; returns that
 * status (XCOLL_SUCCESS if the receive completed instead). The send must
 * not fail; it may stay unfinished (close releases it). */
static xcoll_status check_recv_fails(xcoll_net_request *s,
                                     xcoll_net_request *r) {
  double deadline = check_now() + CHECK_WAIT_S;
  int sdone = 0, rdone = 0;
  while (!rdone && check_now() < deadline) {
    if (!sdone) assert_int_equal(net->test(s, &sdone, NULL), XCOLL_SUCCESS);
    xcoll_status rs = net->test(r, &rdone, NULL);
    if (rs != XCOLL_SUCCESS) return rs;
  }
  assert_true(rdone);
  return XCOLL_SUCCESS;
}

static void check_fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 13)) & 0xff);
}

/* 0 B, 1 B, 64 KiB - 1, 4 MiB; receives posted 8 bytes larger. */
static void check_sizes(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 65535, 4u << 20};
  check_link l;
  check_open(&l);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *out = malloc(n + 1), *in = malloc(n + 8);
    assert_non_null(out);
    assert_non_null(in);
    check_fill(out, n, (unsigned)k);
    memset(in, 0xee, n + 8);
    void *smr = NULL, *rmr = NULL;
    assert_int_equal(
        net->reg_mr(l.send, NULL, out, n + 1, XCOLL_NET_PTR_HOST, &smr),
        XCOLL_SUCCESS);
    assert_int_equal(
        net->reg_mr(NULL, l.recv, in, n + 8, XCOLL_NET_PTR_HOST, &rmr),
        XCOLL_SUCCESS);
    xcoll_net_request *s = NULL, *r = NULL;
    assert_int_equal(net->irecv(l.recv, in, n + 8, 40 + (uint32_t)k, rmr, &r),
                     XCOLL_SUCCESS);
    assert_int_equal(net->isend(l.send, out, n, 40 + (uint32_t)k, smr, &s),
                     XCOLL_SUCCESS);
    assert_non_null(s);
    assert_non_null(r);
    size_t got = 12345;
    assert_int_equal(check_pair(s, r, &got), XCOLL_SUCCESS);
    assert_int_equal(got, n);
    if (n > 0) assert_memory_equal(in, out, n);
    for (int i = 0; i < 8; i++) assert_int_equal(in[n + (size_t)i], 0xee);
    assert_int_equal(net->dereg_mr(l.send, NULL, smr), XCOLL_SUCCESS);
    assert_int_equal(net->dereg_mr(NULL, l.recv, rmr), XCOLL_SUCCESS);
    free(out);
    free(in);
  }
  check_close(&l);
}

/* 120 messages of 0..100 KiB, a window in flight, tags in order. */
static void check_many_in_order(void **state) {
  (void)state;
  xcoll_net_properties p;
  assert_int_equal(net->get_properties(0, &p), XCOLL_SUCCESS);
  int window = p.max_requests < 8 ? p.max_requests : 8;
  check_link l;
  check_open(&l);
  size_t max = 100 * 1024;
  unsigned char *out = malloc((size_t)window * max);
  unsigned char *in = malloc((size_t)window * max);
  assert_non_null(out);
  assert_non_null(in);
  for (int base = 0; base < 120; base += window) {
    xcoll_net_request *s[32], *r[32];
    size_t n[32];
    for (int j = 0; j < window; j++) {
      int m = base + j;
      n[j] = m % 4 == 0 ? (size_t)m % 2 : (size_t)(m * 7919) % max;
      check_fill(out + (size_t)j * max, n[j], (unsigned)m);
      assert_int_equal(net->irecv(l.recv, in + (size_t)j * max, max,
                                  (uint32_t)m, NULL, &r[j]),
                       XCOLL_SUCCESS);
      assert_non_null(r[j]);
      assert_int_equal(net->isend(l.send, out + (size_t)j * max, n[j],
                                  (uint32_t)m, NULL, &s[j]),
                       XCOLL_SUCCESS);
      assert_non_null(s[j]);
    }
    for (int j = window - 1; j >= 0; j--) {
      size_t got = 0;
      assert_int_equal(check_pair(s[j], r[j], &got), XCOLL_SUCCESS);
      assert_int_equal(got, n[j]);
      assert_memory_equal(in + (size_t)j * max, out + (size_t)j * max, n[j]);
    }
  }
  free(out);
  free(in);
  check_close(&l);
}

/* max_requests in flight, then one more is a NULL request, not an error. */
static void check_back_pressure(void **state) {
  (void)state;
  xcoll_net_properties p;
  assert_int_equal(net->get_properties(0, &p), XCOLL_SUCCESS);
  int n = p.max_requests;
  assert_true(n >= 1 && n <= XCOLL_NET_MAX_REQUESTS);
  check_link l;
  check_open(&l);
  size_t bytes = 64 * 1024;
  unsigned char *out = malloc(bytes), *in = malloc((size_t)n * bytes);
  assert_non_null(out);
  assert_non_null(in);
  check_fill(out, bytes, 1);
  xcoll_net_request *s[XCOLL_NET_MAX_REQUESTS], *r[XCOLL_NET_MAX_REQUESTS];
  for (int i = 0; i < n; i++) {
    assert_int_equal(net->isend(l.send, out, bytes, (uint32_t)i, NULL, &s[i]),
                     XCOLL_SUCCESS);
    assert_non_null(s[i]);
  }
  xcoll_net_request *extra = (xcoll_net_request *)&extra;
  assert_int_equal(net->isend(l.send, out, bytes, (uint32_t)n, NULL, &extra),
                   XCOLL_SUCCESS);
  assert_null(extra);
  for (int i = 0; i < n; i++) {
    assert_int_equal(net->irecv(l.recv, in + (size_t)i * bytes, bytes,
                                (uint32_t)i, NULL, &r[i]),
                     XCOLL_SUCCESS);
    assert_non_null(r[i]);
  }
  extra = (xcoll_net_request *)&extra;
  assert_int_equal(net->irecv(l.recv, in, bytes, (uint32_t)n, NULL, &extra),
                   XCOLL_SUCCESS);
  assert_null(extra);
  for (int i = 0; i < n; i++) {
    size_t got = 0;
    assert_int_equal(check_pair(s[i], r[i], &got), XCOLL_SUCCESS);
    assert_int_equal(got, bytes);
    assert_memory_equal(in + (size_t)i * bytes, out, bytes);
  }
  free(out);
  free(in);
  check_close(&l);
}

static void check_tag_mismatch(void **state) {
  (void)state;
  check_link l;
  check_open(&l);
  char out[8] = "abc", in[8];
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(l.send, out, 4, 5, NULL, &s), XCOLL_SUCCESS);
  assert_int_equal(net->irecv(l.recv, in, sizeof in, 6, NULL, &r),
                   XCOLL_SUCCESS);
  assert_non_null(s);
  assert_non_null(r);
  assert_int_equal(check_recv_fails(s, r), XCOLL_ERR_PROTOCOL);
  check_close(&l);
}

static void check_truncation(void **state) {
  (void)state;
  check_link l;
  check_open(&l);
  size_t bytes = 1000;
  unsigned char *out = calloc(1, bytes), *in = malloc(bytes);
  assert_non_null(out);
  assert_non_null(in);
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(l.send, out, bytes, 9, NULL, &s), XCOLL_SUCCESS);
  assert_int_equal(net->irecv(l.recv, in, bytes / 2, 9, NULL, &r),
                   XCOLL_SUCCESS);
  assert_int_equal(check_recv_fails(s, r), XCOLL_ERR_PROTOCOL);
  free(out);
  free(in);
  check_close(&l);
}

static void check_peer_close(void **state) {
  (void)state;
  check_link l;
  check_open(&l);
  char in[64];
  xcoll_net_request *r;
  assert_int_equal(net->irecv(l.recv, in, sizeof in, 1, NULL, &r),
                   XCOLL_SUCCESS);
  net->close_send(l.send);
  l.send = NULL;
  assert_int_equal(check_wait(r, NULL), XCOLL_ERR_REMOTE);
  check_close(&l);
}

/* Requests left in flight are released by close (ASan's leak check). */
static void check_close_in_flight(void **state) {
  (void)state;
  check_link l;
  check_open(&l);
  size_t bytes = 1u << 20;
  unsigned char *out = calloc(1, bytes), *in = malloc(bytes);
  assert_non_null(out);
  assert_non_null(in);
  for (int i = 0; i < 4; i++) {
    xcoll_net_request *s, *r;
    assert_int_equal(net->isend(l.send, out, bytes, (uint32_t)i, NULL, &s),
                     XCOLL_SUCCESS);
    assert_int_equal(net->irecv(l.recv, in, bytes, (uint32_t)i, NULL, &r),
                     XCOLL_SUCCESS);
  }
  check_close(&l);
  free(out);
  free(in);
}

#define NET_PLUGIN_CHECKS                                                      \
  cmocka_unit_test(check_sizes), cmocka_unit_test(check_many_in_order),        \
      cmocka_unit_test(check_back_pressure),                                   \
      cmocka_unit_test(check_tag_mismatch),                                    \
      cmocka_unit_test(check_truncation), cmocka_unit_test(check_peer_close),  \
      cmocka_unit_test(check_close_in_flight)

#endif
