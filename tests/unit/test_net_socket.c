/* test_net_socket.c - the socket net plugin (net/socket/net_socket.c) and
 * the plugin choice (net/net.c), in one process: connect and accept are
 * called in turn until both give a comm; messages of 0 B to 4 MiB arrive
 * intact and in order with 1 and 4 sockets per connection; the 33rd request
 * is a NULL request (back-pressure), not an error; a tag mismatch or an
 * oversize message is PROTOCOL; a closed peer is REMOTE; closing with
 * requests in flight releases them (ASan's leak check); strangers knocking
 * on the listener are dropped without breaking the accept.
 * Authentication (core/auth.h, switched with XCOLL_AUTH_TOKEN and
 * xcoll_auth_reload): the same token on both sides connects and carries
 * messages; a ring of 3 threads connecting and accepting by turns completes
 * (a blocking exchange would deadlock it); a stranger whose client proof is
 * made with another key is dropped and the real rank still gets in; a
 * secret on one side only, or a listener proving with another key, fails
 * at once with a message naming the cause.
 * The receive stage (socket 0 read through 16 KiB, one recv() for all it
 * holds): small messages sent before their receives are posted arrive one
 * by one with their sizes, tags and bytes; headers straddling the stage's
 * end and messages bigger than it arrive intact; a close right after a
 * staged message fails only the receive after it, as an expected close,
 * and a close inside a staged message (partial header or payload) is an
 * error; a staged message completes from test with its socket not
 * readable (a caller polling it would sleep).
 *
 * The test reads the handle's address and port at the offsets the plugin
 * writes them (8: IPv4 address, 12: port, both in network order) to knock
 * on the listener as a stranger, and writes hellos, handles, proof
 * contexts and message headers as net/socket/ documents them to play a
 * stranger, a fake listener or a sender on a raw socket. The stage tests
 * look at socket 0 (get_fds's first descriptor) with FIONREAD and poll to
 * know which bytes the plugin has read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <poll.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "net.h"

#define WAIT_S 20.0 /* bound on any loop that waits for the plugin */

static const xcoll_net_v1 *net;

/* Drops the plugin logged (a WARN at most once a second, every other an
 * INFO line), for the stranger tests; failures it
 * logged, as errors or as expected ones (a close between messages), for
 * the end-of-stream tests. */
static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static int warn_dropped;
static char last_warn[512];
static int errors_logged, expected_logged;

static void test_log(xcoll_net_log_level level, const char *message) {
  pthread_mutex_lock(&warn_lock);
  if ((level == XCOLL_NET_LOG_WARN || level == XCOLL_NET_LOG_INFO) &&
      strstr(message, "dropped a connection") != NULL) {
    warn_dropped++;
    snprintf(last_warn, sizeof last_warn, "%s", message);
  }
  if (level == XCOLL_NET_LOG_ERROR)
    errors_logged++;
  if (level == XCOLL_NET_LOG_ERROR_EXPECTED)
    expected_logged++;
  pthread_mutex_unlock(&warn_lock);
  xcoll_net_log_bridge(level, message);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static xcoll_net_config config_of(uint64_t comm_id, int rank) {
  xcoll_net_config c;
  memset(&c, 0, sizeof c);
  c.comm_id = comm_id;
  c.rank = rank;
  c.timeout_s = 10.0;
  return c;
}

typedef struct net_link {
  xcoll_net_listen_comm *listen;
  xcoll_net_send_comm *send;
  xcoll_net_recv_comm *recv;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
} net_link;

/* Rank 1 listens with nsocks sockets per connection. */
static void listen_link(net_link *l, int nsocks) {
  char text[8];
  snprintf(text, sizeof text, "%d", nsocks);
  setenv("XCOLL_NSOCKS_PERPEER", text, 1);
  memset(l, 0, sizeof *l);
  xcoll_net_config rx = config_of(7, 1);
  assert_int_equal(net->listen(0, &rx, l->handle, &l->listen), XCOLL_SUCCESS);
  assert_non_null(l->listen);
}

/* Rank 0 connects to l's handle; call connect and accept until both are
 * done. */
static void join_link(net_link *l) {
  xcoll_net_config tx = config_of(7, 0);
  double deadline = now_s() + WAIT_S;
  while ((l->send == NULL || l->recv == NULL) && now_s() < deadline) {
    if (l->send == NULL)
      assert_int_equal(net->connect(0, &tx, l->handle, 1, &l->send),
                       XCOLL_SUCCESS);
    if (l->recv == NULL)
      assert_int_equal(net->accept(l->listen, 0, &l->recv), XCOLL_SUCCESS);
  }
  assert_non_null(l->send);
  assert_non_null(l->recv);
}

/* Rank 1 listens, rank 0 connects; call both until both are done. */
static void open_link(net_link *l, int nsocks) {
  listen_link(l, nsocks);
  /* nobody has connected yet: accept must not block, and gives NULL */
  assert_int_equal(net->accept(l->listen, 0, &l->recv), XCOLL_SUCCESS);
  assert_null(l->recv);
  join_link(l);
}

static void close_link(net_link *l) {
  if (l->send) net->close_send(l->send);
  if (l->recv) net->close_recv(l->recv);
  if (l->listen) net->close_listen(l->listen);
  memset(l, 0, sizeof *l);
}

/* Test a request until done or error; returns the status, *bytes the size. */
static xcoll_status wait_request(xcoll_net_request *r, size_t *bytes) {
  double deadline = now_s() + WAIT_S;
  int done = 0;
  while (now_s() < deadline) {
    xcoll_status s = net->test(r, &done, bytes);
    if (s != XCOLL_SUCCESS || done) return s;
  }
  fail_msg("request did not complete within %.0f s", WAIT_S);
  return XCOLL_ERR_TIMEOUT;
}

/* Test a send and a receive together (one thread: neither may wait for the
 * other). Returns the receive's status; the send must succeed unless
 * send_may_fail. */
static xcoll_status wait_pair(xcoll_net_request *s, xcoll_net_request *r,
                              size_t *received, int send_may_fail) {
  double deadline = now_s() + WAIT_S;
  int sdone = 0, rdone = 0;
  xcoll_status rs = XCOLL_SUCCESS;
  while ((!sdone || !rdone) && now_s() < deadline) {
    if (!sdone) {
      xcoll_status ss = net->test(s, &sdone, NULL);
      if (ss != XCOLL_SUCCESS) {
        assert_true(send_may_fail);
        sdone = 1;
      }
    }
    if (!rdone) {
      rs = net->test(r, &rdone, received);
      if (rs != XCOLL_SUCCESS) return rs;
    }
  }
  assert_true(sdone && rdone);
  return rs;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 13)) & 0xff);
}

static int no_secret(void **state);

static int setup(void **state) {
  (void)state;
  setenv("XCOLL_SOCKET_IFNAME", "lo", 1);
  if (no_secret(state) != 0) return -1;
  unsetenv("XCOLL_NET_PLUGIN");
  unsetenv("XCOLL_NET");
  char why[256];
  assert_int_equal(xcoll_net_select(&net, why, sizeof why), XCOLL_SUCCESS);
  assert_ptr_equal(net, &xcoll_net_socket);
  assert_int_equal(net->init(test_log), XCOLL_SUCCESS);
  return 0;
}

static void test_select_and_properties(void **state) {
  (void)state;
  const xcoll_net_v1 *n = NULL;
  char why[512];
  setenv("XCOLL_NET", "socket", 1);
  assert_int_equal(xcoll_net_select(&n, why, sizeof why), XCOLL_SUCCESS);
  assert_ptr_equal(n, &xcoll_net_socket);
  assert_non_null(strstr(why, "socket"));
  setenv("XCOLL_NET", "nosuchnet", 1);
  assert_int_equal(xcoll_net_select(&n, why, sizeof why), XCOLL_ERR_ENV);
  assert_null(n);
  assert_non_null(strstr(why, "XCOLL_NET=nosuchnet"));
  assert_non_null(strstr(why, "libxcoll-net-nosuchnet.so"));
  unsetenv("XCOLL_NET");
  setenv("XCOLL_NET_PLUGIN", "/nonexistent/libx.so", 1);
  assert_int_equal(xcoll_net_select(&n, why, sizeof why), XCOLL_ERR_ENV);
  assert_non_null(strstr(why, "XCOLL_NET_PLUGIN=/nonexistent/libx.so"));
  assert_non_null(strstr(xcoll_last_error(), "/nonexistent/libx.so"));
  /* a library without the symbol (libc has no xcoll_net_plugin_v1) */
  setenv("XCOLL_NET_PLUGIN", "libc.so.6", 1);
  assert_int_equal(xcoll_net_select(&n, why, sizeof why), XCOLL_ERR_ENV);
  assert_non_null(strstr(why, XCOLL_NET_PLUGIN_SYMBOL));
  unsetenv("XCOLL_NET_PLUGIN");

  int count = 0;
  assert_int_equal(net->devices(&count), XCOLL_SUCCESS);
  assert_int_equal(count, 1);
  xcoll_net_properties p;
  assert_int_equal(net->get_properties(0, &p), XCOLL_SUCCESS);
  assert_string_equal(p.name, "lo");
  assert_int_equal(p.ptr_support, XCOLL_NET_PTR_HOST);
  assert_int_equal(p.max_requests, XCOLL_NET_MAX_REQUESTS);
  assert_int_equal(net->get_properties(1, &p), XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_net_last_error(), "device 1"));
}

/* One message of each size, both directions of the size list, with nsocks
 * sockets; the receive is posted larger than the message by 8 bytes so that
 * "shorter than posted" is covered too. */
static void check_sizes(int nsocks) {
  static const size_t sizes[] = {0, 1, 65535, 65536 + 3, 4u << 20};
  net_link l;
  open_link(&l, nsocks);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *out = malloc(n + 1), *in = malloc(n + 8);
    assert_non_null(out);
    assert_non_null(in);
    fill(out, n, (unsigned)k);
    memset(in, 0xee, n + 8);
    void *smr, *rmr;
    assert_int_equal(net->reg_mr(l.send, NULL, out, n + 1, XCOLL_NET_PTR_HOST,
                                 &smr),
                     XCOLL_SUCCESS);
    assert_int_equal(net->reg_mr(NULL, l.recv, in, n + 8, XCOLL_NET_PTR_HOST,
                                 &rmr),
                     XCOLL_SUCCESS);
    xcoll_net_request *s = NULL, *r = NULL;
    assert_int_equal(net->irecv(l.recv, in, n + 8, 40 + (uint32_t)k, rmr, &r),
                     XCOLL_SUCCESS);
    assert_int_equal(net->isend(l.send, out, n, 40 + (uint32_t)k, smr, &s),
                     XCOLL_SUCCESS);
    assert_non_null(s);
    assert_non_null(r);
    size_t got = 12345;
    assert_int_equal(wait_pair(s, r, &got, 0), XCOLL_SUCCESS);
    assert_int_equal(got, n);
    if (n > 0) assert_memory_equal(in, out, n);
    for (int i = 0; i < 8; i++) assert_int_equal(in[n + (size_t)i], 0xee);
    assert_int_equal(net->dereg_mr(l.send, NULL, smr), XCOLL_SUCCESS);
    assert_int_equal(net->dereg_mr(NULL, l.recv, rmr), XCOLL_SUCCESS);
    free(out);
    free(in);
  }
  close_link(&l);
}

static void test_sizes_one_socket(void **state) {
  (void)state;
  check_sizes(1);
}

static void test_sizes_four_sockets(void **state) {
  (void)state;
  check_sizes(4);
}

/* 300 messages, sizes 0..200 KiB, up to 16 in flight each way, tags in
 * order, over 4 sockets (so that parts of different messages interleave). */
static void test_many_messages_in_order(void **state) {
  (void)state;
  enum { COUNT = 300, WINDOW = 16 };
  net_link l;
  open_link(&l, 4);
  size_t max = 200 * 1024;
  unsigned char *out = malloc(WINDOW * max), *in = malloc(WINDOW * max);
  assert_non_null(out);
  assert_non_null(in);
  for (int base = 0; base < COUNT; base += WINDOW) {
    xcoll_net_request *s[WINDOW], *r[WINDOW];
    size_t n[WINDOW];
    for (int j = 0; j < WINDOW; j++) {
      int m = base + j;
      n[j] = (size_t)(m * 7919) % max;
      if (m % 5 == 0) n[j] = (size_t)m % 3;
      fill(out + (size_t)j * max, n[j], (unsigned)m);
      assert_int_equal(net->irecv(l.recv, in + (size_t)j * max, max,
                                  (uint32_t)m, NULL, &r[j]),
                       XCOLL_SUCCESS);
      assert_non_null(r[j]);
      assert_int_equal(net->isend(l.send, out + (size_t)j * max, n[j],
                                  (uint32_t)m, NULL, &s[j]),
                       XCOLL_SUCCESS);
      assert_non_null(s[j]);
    }
    /* complete the receives in reverse order: each test progresses all */
    for (int j = WINDOW - 1; j >= 0; j--) {
      size_t got = 0;
      assert_int_equal(wait_pair(s[j], r[j], &got, 0), XCOLL_SUCCESS);
      assert_int_equal(got, n[j]);
      assert_memory_equal(in + (size_t)j * max, out + (size_t)j * max, n[j]);
    }
  }
  free(out);
  free(in);
  close_link(&l);
}

static void test_back_pressure(void **state) {
  (void)state;
  net_link l;
  open_link(&l, 1);
  enum { N = XCOLL_NET_MAX_REQUESTS };
  size_t bytes = 256 * 1024; /* more than the socket buffers hold in total */
  unsigned char *out = malloc(bytes), *in = malloc((N + 1) * bytes);
  assert_non_null(out);
  assert_non_null(in);
  fill(out, bytes, 3);
  xcoll_net_request *s[N + 1], *r[N + 1];
  for (int i = 0; i < N; i++) {
    assert_int_equal(net->isend(l.send, out, bytes, (uint32_t)i, NULL, &s[i]),
                     XCOLL_SUCCESS);
    assert_non_null(s[i]);
  }
  /* the 33rd: no room, which is not an error */
  xcoll_net_request *extra = (xcoll_net_request *)&extra;
  assert_int_equal(net->isend(l.send, out, bytes, N, NULL, &extra),
                   XCOLL_SUCCESS);
  assert_null(extra);
  for (int i = 0; i < N; i++) {
    assert_int_equal(net->irecv(l.recv, in + (size_t)i * bytes, bytes,
                                (uint32_t)i, NULL, &r[i]),
                     XCOLL_SUCCESS);
    assert_non_null(r[i]);
  }
  extra = (xcoll_net_request *)&extra;
  assert_int_equal(net->irecv(l.recv, in + N * bytes, bytes, N, NULL, &extra),
                   XCOLL_SUCCESS);
  assert_null(extra);
  for (int i = 0; i < N; i++) {
    size_t got = 0;
    assert_int_equal(wait_pair(s[i], r[i], &got, 0), XCOLL_SUCCESS);
    assert_int_equal(got, bytes);
    assert_memory_equal(in + (size_t)i * bytes, out, bytes);
  }
  /* room again once the requests are released */
  assert_int_equal(net->isend(l.send, out, 1, N, NULL, &s[N]), XCOLL_SUCCESS);
  assert_non_null(s[N]);
  assert_int_equal(net->irecv(l.recv, in, 1, N, NULL, &r[N]), XCOLL_SUCCESS);
  assert_non_null(r[N]);
  assert_int_equal(wait_pair(s[N], r[N], NULL, 0), XCOLL_SUCCESS);
  free(out);
  free(in);
  close_link(&l);
}

static void test_tag_mismatch_is_protocol(void **state) {
  (void)state;
  net_link l;
  open_link(&l, 1);
  char out[16] = "hello", in[16];
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(l.send, out, 6, 5, NULL, &s), XCOLL_SUCCESS);
  assert_int_equal(net->irecv(l.recv, in, sizeof in, 6, NULL, &r),
                   XCOLL_SUCCESS);
  assert_int_equal(wait_request(r, NULL), XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_net_last_error(), "tag 5"));
  assert_non_null(strstr(xcoll_net_last_error(), "rank 0"));
  /* the comm stays broken: a new receive fails the same way */
  assert_int_equal(net->irecv(l.recv, in, sizeof in, 6, NULL, &r),
                   XCOLL_ERR_PROTOCOL);
  assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
  close_link(&l);
}

static void test_truncation_is_protocol(void **state) {
  (void)state;
  net_link l;
  open_link(&l, 4);
  size_t bytes = 100 * 1024;
  unsigned char *out = calloc(1, bytes), *in = malloc(bytes);
  assert_non_null(out);
  assert_non_null(in);
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(l.send, out, bytes, 9, NULL, &s), XCOLL_SUCCESS);
  assert_int_equal(net->irecv(l.recv, in, bytes - 1, 9, NULL, &r),
                   XCOLL_SUCCESS);
  assert_int_equal(wait_request(r, NULL), XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_net_last_error(), "message truncated"));
  free(out);
  free(in);
  close_link(&l);
}

/* A message that arrived whole before the peer closed is delivered: its
 * receive reports done, even when a later receive's progress (in the same
 * test call) finds the close. Only the later receive fails with REMOTE.
 * (Before: every request of the comm failed once the close was seen, which
 * made nccl_like keep one receive posted ahead; NL_RECVS_AHEAD.) */
static void test_complete_then_close(void **state) {
  (void)state;
  for (int nsocks = 1; nsocks <= 2; nsocks++) {
    net_link l;
    open_link(&l, nsocks);
    char out[100], in1[100], in2[100];
    memset(out, 0x5a, sizeof out);
    memset(in1, 0, sizeof in1);
    xcoll_net_request *s, *r1, *r2;
    assert_int_equal(net->irecv(l.recv, in1, sizeof in1, 0, NULL, &r1),
                     XCOLL_SUCCESS);
    assert_int_equal(net->irecv(l.recv, in2, sizeof in2, 1, NULL, &r2),
                     XCOLL_SUCCESS);
    assert_int_equal(net->isend(l.send, out, sizeof out, 0, NULL, &s),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
    net->close_send(l.send);
    l.send = NULL;
    /* the second receive sees the close first (its test moves the comm) */
    assert_int_equal(wait_request(r2, NULL), XCOLL_ERR_REMOTE);
    size_t got = 0;
    assert_int_equal(wait_request(r1, &got), XCOLL_SUCCESS);
    assert_int_equal(got, sizeof out);
    assert_memory_equal(in1, out, sizeof out);
    close_link(&l);
  }
}

static void test_peer_close_is_remote(void **state) {
  (void)state;
  net_link l;
  open_link(&l, 2);
  char in[64];
  xcoll_net_request *r;
  assert_int_equal(net->irecv(l.recv, in, sizeof in, 1, NULL, &r),
                   XCOLL_SUCCESS);
  net->close_send(l.send);
  l.send = NULL;
  assert_int_equal(wait_request(r, NULL), XCOLL_ERR_REMOTE);
  assert_non_null(strstr(xcoll_net_last_error(), "rank 0"));
  assert_non_null(strstr(xcoll_net_last_error(), "127.0.0.1"));
  close_link(&l);

  /* the sending side: the receiver goes away; sends fail with REMOTE once
   * the kernel has the reset (bounded: the buffers fill otherwise) */
  open_link(&l, 1);
  net->close_recv(l.recv);
  l.recv = NULL;
  size_t bytes = 1 << 20;
  unsigned char *out = calloc(1, bytes);
  assert_non_null(out);
  xcoll_status status = XCOLL_SUCCESS;
  double deadline = now_s() + WAIT_S;
  while (status == XCOLL_SUCCESS && now_s() < deadline) {
    xcoll_net_request *s = NULL;
    status = net->isend(l.send, out, bytes, 2, NULL, &s);
    if (status == XCOLL_SUCCESS && s != NULL) status = wait_request(s, NULL);
  }
  assert_int_equal(status, XCOLL_ERR_REMOTE);
  assert_non_null(strstr(xcoll_net_last_error(), "closed the connection"));
  free(out);
  close_link(&l);
}

/* get_fds (net.h's optional entry): the descriptors a waiting proxy may
 * sleep on in poll(2). A receive posted before its data: poll finds
 * nothing, then wakes once the data is sent and test completes it; a peer
 * that closes while the receiver polls wakes it, and test says REMOTE; a
 * send stuck on a full socket buffer names its sockets for POLLOUT, and an
 * idle send comm names none (it would always be writable). */
/* The domain (AF_UNIX or AF_INET) of a link's receiving data socket, found
 * through get_fds while a receive is posted. */
static int link_domain(net_link *l) {
  char in[8];
  xcoll_net_request *r;
  assert_int_equal(net->irecv(l->recv, in, sizeof in, 0, NULL, &r),
                   XCOLL_SUCCESS);
  int ids[16], count = 0;
  assert_int_equal(net->get_fds(NULL, l->recv, ids, 16, &count), XCOLL_SUCCESS);
  assert_int_equal(count, 1);
  int domain = -1;
  socklen_t len = sizeof domain;
  assert_int_equal(getsockopt(ids[0], SOL_SOCKET, SO_DOMAIN, &domain, &len), 0);
  char out[8] = "unix-ok";
  xcoll_net_request *s;
  assert_int_equal(net->isend(l->send, out, sizeof out, 0, NULL, &s),
                   XCOLL_SUCCESS);
  size_t got = 0;
  assert_int_equal(wait_pair(s, r, &got, 0), XCOLL_SUCCESS);
  assert_memory_equal(in, out, sizeof out);
  return domain;
}

/* XCOLL_SOCKET_UNIX: ranks of one host connect over a Unix-domain socket
 * (default, or 1), over TCP with 0 on either side, and over TCP when the
 * handle's host id is not this process's (another kernel or network
 * namespace: the abstract name would not reach the listener there); any
 * other value is an ENV error naming the variable. */
static void test_unix_within_a_host(void **state) {
  (void)state;
  const char *env = getenv("XCOLL_SOCKET_UNIX");
  char *saved = env ? strdup(env) : NULL;
  net_link l;
  for (int case_ = 0; case_ < 4; case_++) {
    /* 0: default; 1: "1"; 2: "0"; 3: "1", the connector with "0" */
    if (case_ == 0)
      unsetenv("XCOLL_SOCKET_UNIX");
    else
      setenv("XCOLL_SOCKET_UNIX", case_ == 2 ? "0" : "1", 1);
    if (case_ < 3) {
      open_link(&l, 1);
    } else {
      /* the environment switched between the listen and the connect */
      listen_link(&l, 1);
      setenv("XCOLL_SOCKET_UNIX", "0", 1);
      join_link(&l);
    }
    assert_int_equal(link_domain(&l), case_ < 2 ? AF_UNIX : AF_INET);
    close_link(&l);
  }

  /* A listener of another host (its id in the handle differs): TCP. */
  unsetenv("XCOLL_SOCKET_UNIX");
  listen_link(&l, 1);
  assert_int_equal(l.handle[14] & 1, 1); /* it offers the Unix socket */
  l.handle[24] ^= 0xff;                  /* another boot id */
  join_link(&l);
  assert_int_equal(link_domain(&l), AF_INET);
  close_link(&l);

  /* A value that is neither 0 nor 1. */
  setenv("XCOLL_SOCKET_UNIX", "yes", 1);
  xcoll_net_listen_comm *listen = (xcoll_net_listen_comm *)0x1;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  xcoll_net_config rx = config_of(7, 1);
  xcoll_status status = net->listen(0, &rx, handle, &listen);
  char said[512];
  snprintf(said, sizeof said, "%s", xcoll_net_last_error());
  if (saved != NULL)
    setenv("XCOLL_SOCKET_UNIX", saved, 1);
  else
    unsetenv("XCOLL_SOCKET_UNIX");
  free(saved);
  assert_int_equal(status, XCOLL_ERR_ENV);
  assert_null(listen);
  if (strstr(said, "XCOLL_SOCKET_UNIX=yes") == NULL)
    fail_msg("the error does not name XCOLL_SOCKET_UNIX=yes: '%s'", said);
}

static void test_get_fds(void **state) {
  (void)state;
  assert_non_null(net->get_fds);
  for (int nsocks = 1; nsocks <= 2; nsocks++) {
    net_link l;
    open_link(&l, nsocks);
    int ids[16], count = -1;
    assert_int_equal(net->get_fds(l.send, l.recv, ids, 16, &count),
                     XCOLL_ERR_INVALID_ARGUMENT);
    assert_int_equal(net->get_fds(NULL, l.recv, ids, 16, &count),
                     XCOLL_SUCCESS);
    assert_int_equal(count, 0); /* nothing posted */
    char out[100], in[100];
    fill((unsigned char *)out, sizeof out, 3);
    xcoll_net_request *r, *s;
    assert_int_equal(net->irecv(l.recv, in, sizeof in, 0, NULL, &r),
                     XCOLL_SUCCESS);
    int done = 0;
    assert_int_equal(net->test(r, &done, NULL), XCOLL_SUCCESS);
    assert_false(done);
    assert_int_equal(net->get_fds(NULL, l.recv, ids, 16, &count),
                     XCOLL_SUCCESS);
    assert_true(count >= 1 && count <= nsocks);
    struct pollfd fds[16];
    for (int i = 0; i < count; i++)
      fds[i] = (struct pollfd){.fd = ids[i], .events = POLLIN};
    assert_int_equal(poll(fds, (nfds_t)count, 0), 0); /* no data yet */
    /* The data comes late: the sleeper wakes and the receive completes. */
    assert_int_equal(net->isend(l.send, out, sizeof out, 0, NULL, &s),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
    assert_int_equal(net->get_fds(l.send, NULL, ids, 16, &count),
                     XCOLL_SUCCESS);
    assert_int_equal(count, 0); /* the send is done: an idle send comm */
    assert_true(poll(fds, (nfds_t)1, (int)(WAIT_S * 1000)) > 0);
    size_t got = 0;
    assert_int_equal(wait_request(r, &got), XCOLL_SUCCESS);
    assert_int_equal(got, sizeof out);
    assert_memory_equal(in, out, sizeof out);

    /* A peer that closes while the receiver sleeps wakes it. */
    assert_int_equal(net->irecv(l.recv, in, sizeof in, 1, NULL, &r),
                     XCOLL_SUCCESS);
    assert_int_equal(net->get_fds(NULL, l.recv, ids, 16, &count),
                     XCOLL_SUCCESS);
    assert_true(count >= 1);
    for (int i = 0; i < count; i++)
      fds[i] = (struct pollfd){.fd = ids[i], .events = POLLIN};
    net->close_send(l.send);
    l.send = NULL;
    double t0 = now_s();
    assert_true(poll(fds, (nfds_t)count, (int)(WAIT_S * 1000)) > 0);
    assert_true(now_s() - t0 < WAIT_S);
    assert_int_equal(wait_request(r, NULL), XCOLL_ERR_REMOTE);
    close_link(&l);
  }

  /* A send that fills the socket buffers waits for POLLOUT on them. */
  net_link l;
  open_link(&l, 1);
  size_t bytes = 16u << 20;
  unsigned char *out = malloc(bytes), *in = malloc(bytes);
  assert_non_null(out);
  assert_non_null(in);
  fill(out, bytes, 5);
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(l.send, out, bytes, 2, NULL, &s), XCOLL_SUCCESS);
  int done = 0, ids[16], count = 0;
  assert_int_equal(net->test(s, &done, NULL), XCOLL_SUCCESS);
  assert_false(done); /* 16 MiB do not fit loopback's socket buffers */
  assert_int_equal(net->get_fds(l.send, NULL, ids, 16, &count),
                   XCOLL_SUCCESS);
  assert_int_equal(count, 1);
  assert_int_equal(net->irecv(l.recv, in, bytes, 2, NULL, &r), XCOLL_SUCCESS);
  size_t got = 0;
  assert_int_equal(wait_pair(s, r, &got, 0), XCOLL_SUCCESS);
  assert_int_equal(got, bytes);
  assert_memory_equal(in, out, bytes);
  free(out);
  free(in);
  close_link(&l);
}

static void test_close_with_requests_in_flight(void **state) {
  (void)state;
  net_link l;
  open_link(&l, 4);
  size_t bytes = 4u << 20;
  unsigned char *out = calloc(1, bytes), *in = malloc(bytes);
  assert_non_null(out);
  assert_non_null(in);
  for (int i = 0; i < 8; i++) {
    xcoll_net_request *s, *r;
    assert_int_equal(net->isend(l.send, out, bytes, (uint32_t)i, NULL, &s),
                     XCOLL_SUCCESS);
    assert_non_null(s);
    assert_int_equal(net->irecv(l.recv, in, bytes, (uint32_t)i, NULL, &r),
                     XCOLL_SUCCESS);
    assert_non_null(r);
  }
  /* a half-made connection too */
  xcoll_net_config rx = config_of(8, 1), tx = config_of(8, 0);
  xcoll_net_listen_comm *listen = NULL;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  xcoll_net_send_comm *send = NULL;
  assert_int_equal(net->connect(0, &tx, handle, 1, &send), XCOLL_SUCCESS);
  close_link(&l); /* no test(): ASan reports anything left behind */
  net->close_listen(listen);
  /* finish the connect so that its state is freed (the listener is gone,
   * so it either completed already or fails) */
  double deadline = now_s() + WAIT_S;
  while (send == NULL && now_s() < deadline)
    if (net->connect(0, &tx, handle, 1, &send) != XCOLL_SUCCESS) break;
  if (send) net->close_send(send);
  free(out);
  free(in);
}

/* Open a raw TCP connection to the listener whose handle is given. */
static int knock(const unsigned char *handle) {
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  memcpy(&sa.sin_addr.s_addr, handle + 8, 4);
  memcpy(&sa.sin_port, handle + 12, 2);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* Call connect with config until it gives up; accept on listen meanwhile
 * (the listener drops it). Returns connect's final status. */
static xcoll_status connect_until_refused(const xcoll_net_config *config,
                                          const unsigned char *handle,
                                          xcoll_net_listen_comm *listen,
                                          double deadline) {
  xcoll_net_send_comm *send = NULL;
  xcoll_net_recv_comm *recv = NULL;
  xcoll_status s = XCOLL_SUCCESS;
  while (s == XCOLL_SUCCESS && now_s() < deadline) {
    s = net->connect(0, config, handle, 1, &send);
    assert_null(send);
    assert_int_equal(net->accept(listen, 0, &recv), XCOLL_SUCCESS);
    assert_null(recv);
  }
  return s;
}

static int drops_seen(void) {
  pthread_mutex_lock(&warn_lock);
  int n = warn_dropped;
  pthread_mutex_unlock(&warn_lock);
  return n;
}

static void test_strangers_do_not_break_accept(void **state) {
  (void)state;
  setenv("XCOLL_NSOCKS_PERPEER", "2", 1);
  /* the latest init's log function is the one used: take it back from
   * whatever xcoll_net_select installed */
  assert_int_equal(net->init(test_log), XCOLL_SUCCESS);
  xcoll_net_config rx = config_of(7, 1), tx = config_of(7, 0);
  xcoll_net_listen_comm *listen = NULL;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  pthread_mutex_lock(&warn_lock);
  warn_dropped = 0;
  pthread_mutex_unlock(&warn_lock);

  /* 1: connect and close at once (a port scanner, a health check) */
  close(knock(handle));
  /* 2: garbage instead of a hello */
  int garbage = knock(handle);
  char junk[64];
  memset(junk, 'G', sizeof junk);
  assert_int_equal(send(garbage, junk, sizeof junk, 0), (ssize_t)sizeof junk);
  double deadline = now_s() + WAIT_S;
  /* 3: a real hello of another communicator (comm id 99): dropped, and the
   * connecting side hears it as a closed connection during authentication */
  xcoll_net_config other = config_of(99, 0);
  assert_int_equal(connect_until_refused(&other, handle, listen, deadline),
                   XCOLL_ERR_REMOTE);
  assert_non_null(strstr(xcoll_net_last_error(), "authentication"));
  /* 4: the right comm but the wrong rank */
  xcoll_net_config rank2 = config_of(7, 2);
  assert_int_equal(connect_until_refused(&rank2, handle, listen, deadline),
                   XCOLL_ERR_REMOTE);

  xcoll_net_recv_comm *recv = NULL;
  /* at least one socket each of comm 99 and rank 2 (the connect gives up
   * at its first refused socket, the others may or may not have arrived),
   * the garbage and the closed one */
  while (drops_seen() < 4 && now_s() < deadline) {
    assert_int_equal(net->accept(listen, 0, &recv), XCOLL_SUCCESS);
    assert_null(recv);
  }
  assert_true(drops_seen() >= 4);
  pthread_mutex_lock(&warn_lock);
  assert_non_null(strstr(last_warn, "127.0.0.1"));
  pthread_mutex_unlock(&warn_lock);

  /* the real peer still gets in, and its messages flow */
  xcoll_net_send_comm *send = NULL;
  while ((send == NULL || recv == NULL) && now_s() < deadline) {
    if (!send)
      assert_int_equal(net->connect(0, &tx, handle, 1, &send), XCOLL_SUCCESS);
    if (!recv)
      assert_int_equal(net->accept(listen, 0, &recv), XCOLL_SUCCESS);
  }
  assert_non_null(send);
  assert_non_null(recv);
  char out[8] = "abcdefg", in[8] = "";
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(send, out, 8, 3, NULL, &s), XCOLL_SUCCESS);
  assert_int_equal(net->irecv(recv, in, 8, 3, NULL, &r), XCOLL_SUCCESS);
  assert_int_equal(wait_pair(s, r, NULL, 0), XCOLL_SUCCESS);
  assert_string_equal(in, "abcdefg");
  close(garbage);
  net->close_send(send);
  net->close_recv(recv);
  net->close_listen(listen);
}

static void test_connect_timeout(void **state) {
  (void)state;
  setenv("XCOLL_NSOCKS_PERPEER", "1", 1);
  xcoll_net_config rx = config_of(7, 1), tx = config_of(7, 0);
  xcoll_net_listen_comm *listen = NULL;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  net->close_listen(listen); /* nobody listens at that port any more */
  tx.timeout_s = 0.3;
  xcoll_net_send_comm *send = NULL;
  xcoll_status s = XCOLL_SUCCESS;
  double deadline = now_s() + WAIT_S;
  while (s == XCOLL_SUCCESS && send == NULL && now_s() < deadline)
    s = net->connect(0, &tx, handle, 1, &send);
  assert_int_equal(s, XCOLL_ERR_TIMEOUT);
  assert_null(send);
  assert_non_null(strstr(xcoll_net_last_error(), "rank 1"));

  /* a handle that is not one */
  unsigned char bogus[XCOLL_NET_HANDLE_MAXSIZE] = {1, 2, 3};
  assert_int_equal(net->connect(0, &tx, bogus, 1, &send),
                   XCOLL_ERR_INVALID_ARGUMENT);

  /* device memory is not for this plugin */
  net_link l;
  open_link(&l, 1);
  void *mr = NULL;
  char buf[8];
  assert_int_equal(
      net->reg_mr(l.send, NULL, buf, sizeof buf, XCOLL_NET_PTR_CUDA, &mr),
      XCOLL_ERR_NOT_SUPPORTED);
  assert_null(mr);
  close_link(&l);
}

/* ---- authentication (core/auth.h) ---- */

#define TOKEN_A "job-a-0123456789abcdef0123456789abcdef"
#define TOKEN_B "job-b-fedcba9876543210fedcba9876543210"

/* Load a secret (NULL: none) for the whole process, as a rank started with
 * or without XCOLL_AUTH_TOKEN would have. */
static void use_token(const char *token) {
  unsetenv("XCOLL_AUTH_FILE");
  if (token != NULL)
    setenv("XCOLL_AUTH_TOKEN", token, 1);
  else
    unsetenv("XCOLL_AUTH_TOKEN");
  assert_int_equal(xcoll_auth_reload(), XCOLL_SUCCESS);
  assert_int_equal(xcoll_auth_enabled(), token != NULL);
}

static int no_secret(void **state) {
  (void)state;
  unsetenv("XCOLL_AUTH_TOKEN");
  unsetenv("XCOLL_AUTH_FILE");
  return xcoll_auth_reload() == XCOLL_SUCCESS ? 0 : -1;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* The context socket_conn.c documents for the proofs. */
static void context_of(uint64_t comm_id, int connector, int acceptor,
                       int index, uint64_t listener_nonce, char *out) {
  snprintf(out, XCOLL_AUTH_CONTEXT_BYTES,
           "net socket comm=%llu ranks=%d>%d socket=%d listener=%016llx",
           (unsigned long long)comm_id, connector, acceptor, index,
           (unsigned long long)listener_nonce);
}

static void tag_first(unsigned char *first, uint64_t comm_id, int connector,
                      int acceptor, int index, uint64_t listener_nonce) {
  static const uint8_t no_nonce[XCOLL_AUTH_NONCE_BYTES];
  char context[XCOLL_AUTH_CONTEXT_BYTES];
  context_of(comm_id, connector, acceptor, index, listener_nonce, context);
  xcoll_auth_prove("hello", context, first + 32 + 5, no_nonce,
                   first + 32 + XCOLL_AUTH_OFFER_BYTES);
}

/* The hello net_socket.c documents: magic "XNSC", version 2, socket index,
 * socket count, rank, comm id, the handle's nonce. */
/* A connection's first message: hello | offer | hello tag. */
#define FIRST_BYTES (32 + XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)

/* The hello tag of a first message whose hello and offer are written: the
 * proof with role "hello" (socket_internal.h), under the current secret (all
 * zero without one). */
static void tag_first(unsigned char *first, uint64_t comm_id, int connector,
                      int acceptor, int index, uint64_t listener_nonce);

static void make_hello(unsigned char *out, int index, int nsocks, int rank,
                       uint64_t comm_id, const unsigned char *handle) {
  memset(out, 0, 32);
  memcpy(out, "XNSC", 4);
  out[4] = 2; /* SOCK_HELLO_VERSION */
  out[6] = (unsigned char)index;
  out[8] = (unsigned char)nsocks;
  put32(out + 12, (uint32_t)rank);
  for (int i = 0; i < 8; i++) out[16 + i] = (unsigned char)(comm_id >> (8 * i));
  memcpy(out + 24, handle + 16, 8);
}

/* Read exactly n bytes from a blocking fd (bounded by SO_RCVTIMEO). */
static void read_exactly(int fd, unsigned char *p, size_t n) {
  struct timeval tv = {.tv_sec = (time_t)WAIT_S, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, p + got, n - got, 0);
    assert_true(r > 0);
    got += (size_t)r;
  }
}

static void exchange_messages(net_link *l, int count) {
  for (int m = 0; m < count; m++) {
    size_t n = m % 2 ? (size_t)300000 : (size_t)100;
    unsigned char *out = malloc(n), *in = calloc(1, n);
    assert_non_null(out);
    assert_non_null(in);
    fill(out, n, (unsigned)m);
    xcoll_net_request *s, *r;
    assert_int_equal(net->isend(l->send, out, n, (uint32_t)m, NULL, &s),
                     XCOLL_SUCCESS);
    assert_int_equal(net->irecv(l->recv, in, n, (uint32_t)m, NULL, &r),
                     XCOLL_SUCCESS);
    size_t got = 0;
    assert_int_equal(wait_pair(s, r, &got, 0), XCOLL_SUCCESS);
    assert_int_equal(got, n);
    assert_memory_equal(in, out, n);
    free(out);
    free(in);
  }
}

static void test_auth_same_token(void **state) {
  (void)state;
  use_token(TOKEN_A);
  net_link l;
  open_link(&l, 1);
  exchange_messages(&l, 4);
  close_link(&l);
  open_link(&l, 4); /* every data socket runs its own exchange */
  exchange_messages(&l, 4);
  close_link(&l);
}

/* A ring: thread r connects to r+1 and accepts from r-1, by turns, as the
 * nccl_like backend does. With an exchange that waited for the peer inside
 * connect, every thread would wait on its successor, itself inside connect,
 * until the timeout. */
#define RING 3
typedef struct ring_rank {
  int rank;
  xcoll_net_listen_comm *listen;
  unsigned char (*handles)[XCOLL_NET_HANDLE_MAXSIZE];
  xcoll_status status;
  int received; /* the rank its predecessor sent, or -1 */
} ring_rank;

static void *ring_main(void *arg) {
  ring_rank *me = arg;
  int next = (me->rank + 1) % RING, prev = (me->rank + RING - 1) % RING;
  xcoll_net_config config = config_of(11, me->rank);
  xcoll_net_send_comm *send = NULL;
  xcoll_net_recv_comm *recv = NULL;
  double deadline = now_s() + WAIT_S;
  xcoll_status s = XCOLL_SUCCESS;
  while (s == XCOLL_SUCCESS && (send == NULL || recv == NULL) &&
         now_s() < deadline) {
    if (send == NULL)
      s = net->connect(0, &config, me->handles[next], next, &send);
    if (s == XCOLL_SUCCESS && recv == NULL)
      s = net->accept(me->listen, prev, &recv);
  }
  me->status = s;
  me->received = -1;
  if (s != XCOLL_SUCCESS || send == NULL || recv == NULL) {
    if (s == XCOLL_SUCCESS) me->status = XCOLL_ERR_TIMEOUT;
    if (send) net->close_send(send);
    if (recv) net->close_recv(recv);
    return NULL;
  }
  int out = me->rank, in = -1, sdone = 0, rdone = 0;
  xcoll_net_request *sr = NULL, *rr = NULL;
  s = net->isend(send, &out, sizeof out, 5, NULL, &sr);
  if (s == XCOLL_SUCCESS) s = net->irecv(recv, &in, sizeof in, 5, NULL, &rr);
  while (s == XCOLL_SUCCESS && (!sdone || !rdone) && now_s() < deadline) {
    if (!sdone) s = net->test(sr, &sdone, NULL);
    if (s == XCOLL_SUCCESS && !rdone) s = net->test(rr, &rdone, NULL);
  }
  me->status = s == XCOLL_SUCCESS && !(sdone && rdone) ? XCOLL_ERR_TIMEOUT : s;
  me->received = in;
  net->close_send(send);
  net->close_recv(recv);
  return NULL;
}

static void test_auth_ring_does_not_deadlock(void **state) {
  (void)state;
  use_token(TOKEN_A);
  setenv("XCOLL_NSOCKS_PERPEER", "2", 1);
  unsigned char handles[RING][XCOLL_NET_HANDLE_MAXSIZE];
  ring_rank ranks[RING];
  pthread_t threads[RING];
  for (int r = 0; r < RING; r++) {
    xcoll_net_config config = config_of(11, r);
    ranks[r] = (ring_rank){.rank = r, .handles = handles};
    assert_int_equal(net->listen(0, &config, handles[r], &ranks[r].listen),
                     XCOLL_SUCCESS);
  }
  for (int r = 0; r < RING; r++)
    assert_int_equal(pthread_create(&threads[r], NULL, ring_main, &ranks[r]),
                     0);
  for (int r = 0; r < RING; r++) pthread_join(threads[r], NULL);
  for (int r = 0; r < RING; r++) {
    assert_int_equal(ranks[r].status, XCOLL_SUCCESS);
    assert_int_equal(ranks[r].received, (r + RING - 1) % RING);
    net->close_listen(ranks[r].listen);
  }
}

/* A stranger that knows the listener's handle (it crossed the network in
 * the clear) and speaks the protocol, but holds another job's secret: its
 * hello tag is made with that key. It is dropped on its first message
 * (after an answer with an empty proof), with a line naming its address, and the real rank still gets
 * in. */
static void test_auth_wrong_key_is_dropped(void **state) {
  (void)state;
  use_token(TOKEN_A);
  setenv("XCOLL_NSOCKS_PERPEER", "1", 1);
  assert_int_equal(net->init(test_log), XCOLL_SUCCESS);
  xcoll_net_config rx = config_of(7, 1), tx = config_of(7, 0);
  xcoll_net_listen_comm *listen = NULL;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  pthread_mutex_lock(&warn_lock);
  warn_dropped = 0;
  last_warn[0] = '\0';
  pthread_mutex_unlock(&warn_lock);

  int fd = knock(handle);
  unsigned char first[FIRST_BYTES];
  uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES];
  make_hello(first, 0, 1, 0, 7, handle);
  xcoll_auth_offer(first + 32, client_nonce); /* says "has a secret" */
  /* its hello tag is made with its own key: the listener tells it from a
   * rank on this first message, answers with an empty proof and closes */
  use_token(TOKEN_B);
  tag_first(first, 7, 0, 1, 0, get64(handle + 16));
  use_token(TOKEN_A);
  assert_int_equal(send(fd, first, sizeof first, 0), (ssize_t)sizeof first);
  double deadline = now_s() + WAIT_S;
  xcoll_net_recv_comm *rcomm = NULL;
  while (drops_seen() < 1 && now_s() < deadline) {
    assert_int_equal(net->accept(listen, 0, &rcomm), XCOLL_SUCCESS);
    assert_null(rcomm);
  }
  assert_int_equal(drops_seen(), 1);
  pthread_mutex_lock(&warn_lock);
  assert_non_null(strstr(last_warn, "hello tag is wrong"));
  assert_non_null(strstr(last_warn, "127.0.0.1"));
  pthread_mutex_unlock(&warn_lock);
  /* the answer proves nothing (an empty proof), then the listener closes */
  unsigned char answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  unsigned char empty[XCOLL_AUTH_PROOF_BYTES] = {0};
  read_exactly(fd, answer, sizeof answer);
  assert_memory_equal(answer + XCOLL_AUTH_OFFER_BYTES, empty, sizeof empty);
  unsigned char byte;
  assert_true(recv(fd, &byte, 1, 0) <= 0);
  close(fd);

  /* the real rank 0 still gets in */
  xcoll_net_send_comm *send = NULL;
  while ((send == NULL || rcomm == NULL) && now_s() < deadline) {
    if (!send)
      assert_int_equal(net->connect(0, &tx, handle, 1, &send), XCOLL_SUCCESS);
    if (!rcomm)
      assert_int_equal(net->accept(listen, 0, &rcomm), XCOLL_SUCCESS);
  }
  assert_non_null(send);
  assert_non_null(rcomm);
  net_link l = {.listen = listen, .send = send, .recv = rcomm};
  exchange_messages(&l, 2);
  close_link(&l);
}

/* A rank without a secret knocks on a listener that has one: the listener
 * drops it with the reason, and the answer it sent first says "secret". */
static void test_auth_client_without_secret(void **state) {
  (void)state;
  use_token(TOKEN_A);
  setenv("XCOLL_NSOCKS_PERPEER", "1", 1);
  assert_int_equal(net->init(test_log), XCOLL_SUCCESS);
  xcoll_net_config rx = config_of(7, 1);
  xcoll_net_listen_comm *listen = NULL;
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  pthread_mutex_lock(&warn_lock);
  warn_dropped = 0;
  last_warn[0] = '\0';
  pthread_mutex_unlock(&warn_lock);
  int fd = knock(handle);
  unsigned char first[FIRST_BYTES];
  make_hello(first, 0, 1, 0, 7, handle);
  memcpy(first + 32, "XCA1", 4);
  /* flags 0: no secret, and so no hello tag (zeros) */
  memset(first + 36, 0, sizeof first - 36);
  assert_int_equal(send(fd, first, sizeof first, 0), (ssize_t)sizeof first);
  double deadline = now_s() + WAIT_S;
  xcoll_net_recv_comm *rcomm = NULL;
  while (drops_seen() < 1 && now_s() < deadline) {
    assert_int_equal(net->accept(listen, 0, &rcomm), XCOLL_SUCCESS);
    assert_null(rcomm);
  }
  assert_int_equal(drops_seen(), 1);
  pthread_mutex_lock(&warn_lock);
  assert_non_null(strstr(last_warn, "no job secret"));
  assert_non_null(strstr(last_warn, "127.0.0.1"));
  pthread_mutex_unlock(&warn_lock);
  unsigned char answer[XCOLL_AUTH_OFFER_BYTES];
  read_exactly(fd, answer, sizeof answer);
  use_token(NULL);
  uint8_t nonce[XCOLL_AUTH_NONCE_BYTES];
  char why[256] = "";
  assert_int_equal(xcoll_auth_parse_offer(answer, nonce, why, sizeof why), -1);
  assert_non_null(strstr(why, "requires a job secret"));
  close(fd);
  net->close_listen(listen);
}

/* A fake listener for the connecting side's tests: it takes one connection,
 * reads hello | offer | hello tag, answers with flags and a server proof made under
 * proof_token (NULL: an all-zero proof), and returns connect's final status
 * (the connect is driven meanwhile, with this process's current secret). */
static xcoll_status connect_to_fake(unsigned char flags,
                                    const char *proof_token,
                                    const char *restore_token) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  assert_true(lfd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(lfd, 4), 0);
  assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
  /* the handle net_socket.c documents: "XNSH", version, socket count,
   * address, port, nonce */
  unsigned char handle[XCOLL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof handle);
  memcpy(handle, "XNSH", 4);
  handle[4] = 1;
  handle[6] = 1;
  memcpy(handle + 8, &sa.sin_addr.s_addr, 4);
  memcpy(handle + 12, &sa.sin_port, 2);
  memcpy(handle + 16, "fakenonc", 8);

  xcoll_net_config tx = config_of(7, 0);
  xcoll_net_send_comm *send_comm = NULL;
  int fd = -1, answered = 0;
  unsigned char first[FIRST_BYTES];
  size_t got = 0;
  xcoll_status s = XCOLL_SUCCESS;
  double deadline = now_s() + WAIT_S;
  while (s == XCOLL_SUCCESS && send_comm == NULL && now_s() < deadline) {
    s = net->connect(0, &tx, handle, 1, &send_comm);
    if (fd < 0) fd = accept(lfd, NULL, NULL);
    if (fd >= 0 && got < sizeof first) {
      ssize_t r = recv(fd, first + got, sizeof first - got, MSG_DONTWAIT);
      if (r > 0) got += (size_t)r;
    }
    if (got == sizeof first && !answered) {
      assert_memory_equal(first, "XNSC", 4);
      unsigned char answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
      memset(answer, 0, sizeof answer);
      memcpy(answer, "XCA1", 4);
      answer[4] = flags;
      for (int i = 0; i < XCOLL_AUTH_NONCE_BYTES; i++)
        answer[5 + i] = (unsigned char)(i * 37 + 1);
      if (proof_token != NULL) {
        char context[XCOLL_AUTH_CONTEXT_BYTES];
        context_of(7, 0, 1, 0, get64(handle + 16), context);
        use_token(proof_token);
        xcoll_auth_prove("server", context, first + 32 + 5, answer + 5,
                         answer + XCOLL_AUTH_OFFER_BYTES);
        use_token(restore_token);
      }
      assert_int_equal(send(fd, answer, sizeof answer, 0),
                       (ssize_t)sizeof answer);
      answered = 1;
    }
  }
  if (send_comm != NULL) net->close_send(send_comm);
  if (fd >= 0) close(fd);
  close(lfd);
  return s;
}

/* The connecting side: a listener that has a secret when this rank has
 * none, or one whose proof is made with another key, is a PROTOCOL error
 * naming the peer's address, at once (no timeout). */
static void test_auth_connector_checks_the_server(void **state) {
  (void)state;
  setenv("XCOLL_NSOCKS_PERPEER", "1", 1);
  use_token(NULL);
  double start = now_s();
  assert_int_equal(connect_to_fake(1, NULL, NULL), XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_net_last_error(), "requires a job secret"));
  assert_non_null(strstr(xcoll_net_last_error(), "127.0.0.1"));

  use_token(TOKEN_A);
  assert_int_equal(connect_to_fake(0, NULL, TOKEN_A), XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_net_last_error(), "no job secret"));

  assert_int_equal(connect_to_fake(1, TOKEN_B, TOKEN_A), XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_net_last_error(), "failed authentication"));
  assert_non_null(strstr(xcoll_net_last_error(), "127.0.0.1"));
  /* the control: the same fake with the right key passes */
  xcoll_status s = connect_to_fake(1, TOKEN_A, TOKEN_A);
  assert_true(s == XCOLL_SUCCESS);
  /* all of it well inside config_of's 10 s timeout: no hang */
  assert_true(now_s() - start < 8.0);
}

/* ---- socket 0's receive stage: one recv() takes all that socket 0 holds
 * (up to 16 KiB); what belongs to later messages waits in the stage, where
 * polling the socket does not see it, until their receives are posted ---- */

/* Bytes waiting in the kernel's receive queue of fd. */
static int queued(int fd) {
  int n = -1;
  assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
  return n;
}

/* Wait (bounded, no sleep) until fd's queue holds at least bytes: what was
 * sent on loopback is there by now or very soon. */
static void wait_queued(int fd, int bytes) {
  double deadline = now_s() + WAIT_S;
  while (queued(fd) < bytes && now_s() < deadline) {
  }
  assert_true(queued(fd) >= bytes);
}

/* Socket 0 of recv: the first descriptor get_fds names while a receive
 * waits for data. */
static int socket0_of(xcoll_net_recv_comm *recv) {
  int ids[16], count = 0;
  assert_int_equal(net->get_fds(NULL, recv, ids, 16, &count), XCOLL_SUCCESS);
  assert_true(count >= 1);
  return ids[0];
}

static void failures_logged(int *errors, int *expected) {
  pthread_mutex_lock(&warn_lock);
  *errors = errors_logged;
  *expected = expected_logged;
  pthread_mutex_unlock(&warn_lock);
}

/* 32 small messages sent before any receive is posted; the first receive's
 * recv() takes them all (socket 0's queue is empty afterwards), and every
 * later receive, posted one at a time, gets its own size, tag and bytes,
 * and nothing beyond its size. */
static void test_small_messages_received_late(void **state) {
  (void)state;
  enum { COUNT = XCOLL_NET_MAX_REQUESTS, MAX = 200, SLACK = 16 };
  for (int nsocks = 1; nsocks <= 2; nsocks++) {
    net_link l;
    open_link(&l, nsocks);
    static unsigned char out[COUNT][MAX], in[COUNT][MAX + SLACK];
    size_t n[COUNT];
    int total = 0;
    for (int m = 0; m < COUNT; m++) {
      n[m] = m % 7 == 3 ? 0 : (size_t)(m * 37 + 1) % MAX;
      fill(out[m], n[m], (unsigned)m);
      xcoll_net_request *s = NULL;
      assert_int_equal(
          net->isend(l.send, out[m], n[m], (uint32_t)(1000 + m), NULL, &s),
          XCOLL_SUCCESS);
      assert_non_null(s);
      assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
      total += 16 + (int)n[m];
    }
    for (int m = 0; m < COUNT; m++) {
      memset(in[m], 0xee, sizeof in[m]);
      xcoll_net_request *r = NULL;
      assert_int_equal(net->irecv(l.recv, in[m], sizeof in[m],
                                  (uint32_t)(1000 + m), NULL, &r),
                       XCOLL_SUCCESS);
      assert_non_null(r);
      int fd = -1;
      if (m == 0) {
        fd = socket0_of(l.recv);
        wait_queued(fd, total);
      }
      size_t got = 0;
      assert_int_equal(wait_request(r, &got), XCOLL_SUCCESS);
      assert_int_equal(got, n[m]);
      assert_memory_equal(in[m], out[m], n[m]);
      for (size_t k = n[m]; k < sizeof in[m]; k++)
        assert_int_equal(in[m][k], 0xee);
      if (m == 0)
        assert_int_equal(queued(fd), 0); /* all in the stage */
    }
    close_link(&l);
  }
}

/* Messages around the stage's size, all sent before the receives are
 * posted: a header that straddles the end of the first 16 KiB read, a
 * message bigger than the stage behind small ones, payloads just below and
 * at half the stage (staged or read straight), and a striped one with two
 * sockets; every receive gets its size and bytes. */
static void test_stage_boundaries_and_large_messages(void **state) {
  (void)state;
  /* 17 + 116 bytes, then 16 + 16228 end 7 bytes short of 16 KiB: the
   * next header straddles the first read of a 16 KiB stage */
  static const size_t sizes[] = {1,    100, 16228,  5, 1u << 20, 3, 40000, 8191,
                                 8192, 0,   300000, 2, 16384,    7};
  enum { COUNT = sizeof sizes / sizeof sizes[0], SLACK = 64, SMALL = 5 };
  for (int nsocks = 1; nsocks <= 2; nsocks++) {
    net_link l;
    open_link(&l, nsocks);
    unsigned char *out[COUNT], *in[COUNT];
    xcoll_net_request *s[COUNT];
    int sdone[COUNT];
    for (int m = 0; m < COUNT; m++) {
      out[m] = malloc(sizes[m] + 1);
      in[m] = malloc(sizes[m] + SLACK);
      assert_non_null(out[m]);
      assert_non_null(in[m]);
      fill(out[m], sizes[m], (unsigned)m + 50);
      memset(in[m], 0xee, sizes[m] + SLACK);
      assert_int_equal(
          net->isend(l.send, out[m], sizes[m], (uint32_t)m, NULL, &s[m]),
          XCOLL_SUCCESS);
      assert_non_null(s[m]);
      sdone[m] = 0;
    }
    /* the small ones ahead of the 1 MiB one leave without a receive */
    for (int m = 0; m < SMALL; m++) {
      assert_int_equal(wait_request(s[m], NULL), XCOLL_SUCCESS);
      sdone[m] = 1;
    }
    for (int m = 0; m < COUNT; m++) {
      xcoll_net_request *r = NULL;
      assert_int_equal(
          net->irecv(l.recv, in[m], sizes[m] + SLACK, (uint32_t)m, NULL, &r),
          XCOLL_SUCCESS);
      assert_non_null(r);
      int done = 0;
      size_t got = 0;
      double deadline = now_s() + WAIT_S;
      while (!done && now_s() < deadline) {
        for (int k = 0; k < COUNT; k++)
          if (!sdone[k])
            assert_int_equal(net->test(s[k], &sdone[k], NULL), XCOLL_SUCCESS);
        assert_int_equal(net->test(r, &done, &got), XCOLL_SUCCESS);
      }
      assert_true(done);
      assert_int_equal(got, sizes[m]);
      assert_memory_equal(in[m], out[m], sizes[m]);
      for (size_t k = sizes[m]; k < sizes[m] + SLACK; k++)
        assert_int_equal(in[m][k], 0xee);
    }
    for (int m = 0; m < COUNT; m++) {
      if (!sdone[m])
        assert_int_equal(wait_request(s[m], NULL), XCOLL_SUCCESS);
      free(out[m]);
      free(in[m]);
    }
    close_link(&l);
  }
}

/* The sender sends two messages and closes; the receiver's first recv()
 * takes both and the close is still unread. The second message, staged,
 * is received whole with nothing logged; only the receive after it sees
 * the close, as REMOTE, an expected failure (a close between messages). */
static void test_close_after_staged_message(void **state) {
  (void)state;
  for (int nsocks = 1; nsocks <= 2; nsocks++) {
    net_link l;
    open_link(&l, nsocks);
    unsigned char out0[8], out1[24], in0[64], in1[64], in2[64];
    fill(out0, sizeof out0, 1);
    fill(out1, sizeof out1, 2);
    xcoll_net_request *s, *r;
    assert_int_equal(net->isend(l.send, out0, sizeof out0, 0, NULL, &s),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
    assert_int_equal(net->isend(l.send, out1, sizeof out1, 1, NULL, &s),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
    net->close_send(l.send);
    l.send = NULL;

    assert_int_equal(net->irecv(l.recv, in0, sizeof in0, 0, NULL, &r),
                     XCOLL_SUCCESS);
    int fd = socket0_of(l.recv);
    wait_queued(fd, 16 + 8 + 16 + 24);
    size_t got = 0;
    assert_int_equal(wait_request(r, &got), XCOLL_SUCCESS);
    assert_int_equal(got, sizeof out0);
    assert_memory_equal(in0, out0, sizeof out0);
    assert_int_equal(queued(fd), 0); /* the second message is staged */

    int errors0, expected0, errors1, expected1;
    failures_logged(&errors0, &expected0);
    assert_int_equal(net->irecv(l.recv, in1, sizeof in1, 1, NULL, &r),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(r, &got), XCOLL_SUCCESS);
    assert_int_equal(got, sizeof out1);
    assert_memory_equal(in1, out1, sizeof out1);
    failures_logged(&errors1, &expected1);
    assert_int_equal(errors1, errors0);
    assert_int_equal(expected1, expected0);

    assert_int_equal(net->irecv(l.recv, in2, sizeof in2, 2, NULL, &r),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(r, NULL), XCOLL_ERR_REMOTE);
    failures_logged(&errors1, &expected1);
    assert_int_equal(errors1, errors0);
    assert_true(expected1 > expected0);
    close_link(&l);
  }
}

/* A rank 0 played by the test on one raw socket (no secret: hello, offer
 * and an all-zero hello tag, then the listener's answer): l gets the listener and the recv
 * comm; returns the socket to write messages on. */
static int raw_sender(net_link *l) {
  setenv("XCOLL_NSOCKS_PERPEER", "1", 1);
  memset(l, 0, sizeof *l);
  xcoll_net_config rx = config_of(7, 1);
  assert_int_equal(net->listen(0, &rx, l->handle, &l->listen), XCOLL_SUCCESS);
  int fd = knock(l->handle);
  unsigned char first[FIRST_BYTES];
  uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES];
  make_hello(first, 0, 1, 0, 7, l->handle);
  xcoll_auth_offer(first + 32, client_nonce);
  tag_first(first, 7, 0, 1, 0, get64(l->handle + 16));
  assert_int_equal(send(fd, first, sizeof first, 0), (ssize_t)sizeof first);
  double deadline = now_s() + WAIT_S;
  while (l->recv == NULL && now_s() < deadline)
    assert_int_equal(net->accept(l->listen, 0, &l->recv), XCOLL_SUCCESS);
  assert_non_null(l->recv);
  unsigned char answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  read_exactly(fd, answer, sizeof answer);
  return fd;
}

/* The header net_socket.c documents: "XNSM", tag u32, size u64. */
static void make_header(unsigned char *out, uint32_t tag, uint64_t size) {
  memcpy(out, "XNSM", 4);
  put32(out + 4, tag);
  put32(out + 8, (uint32_t)size);
  put32(out + 12, (uint32_t)(size >> 32));
}

/* A peer that closes with part of the next message already sent: the
 * bytes sit in the stage behind a whole message, which is received; the
 * next receive fails with REMOTE as an error, not as a close between
 * messages (a partial header or a partial payload is no boundary). A close
 * right after a whole message is the expected kind. */
static void test_close_inside_staged_message(void **state) {
  (void)state;
  enum { TAIL_NONE, TAIL_HEADER, TAIL_PAYLOAD };
  for (int tail = TAIL_NONE; tail <= TAIL_PAYLOAD; tail++) {
    net_link l;
    int fd = raw_sender(&l);
    unsigned char wire[16 + 8 + 16 + 50], payload[8], in[128];
    fill(payload, sizeof payload, 9);
    make_header(wire, 0, sizeof payload);
    memcpy(wire + 16, payload, sizeof payload);
    make_header(wire + 24, 1, 100); /* 100 bytes announced, at most 50 sent */
    memset(wire + 40, 0x33, 50);
    size_t length = tail == TAIL_NONE     ? 24
                    : tail == TAIL_HEADER ? 24 + 10
                                          : sizeof wire;
    assert_int_equal(send(fd, wire, length, 0), (ssize_t)length);
    close(fd);

    xcoll_net_request *r;
    assert_int_equal(net->irecv(l.recv, in, sizeof in, 0, NULL, &r),
                     XCOLL_SUCCESS);
    wait_queued(socket0_of(l.recv), (int)length);
    size_t got = 0;
    assert_int_equal(wait_request(r, &got), XCOLL_SUCCESS);
    assert_int_equal(got, sizeof payload);
    assert_memory_equal(in, payload, sizeof payload);

    int errors0, expected0, errors1, expected1;
    failures_logged(&errors0, &expected0);
    assert_int_equal(net->irecv(l.recv, in, sizeof in, 1, NULL, &r),
                     XCOLL_SUCCESS);
    assert_int_equal(wait_request(r, NULL), XCOLL_ERR_REMOTE);
    failures_logged(&errors1, &expected1);
    if (tail == TAIL_NONE) {
      assert_int_equal(errors1, errors0);
      assert_true(expected1 > expected0);
    } else {
      assert_true(errors1 > errors0);
      assert_int_equal(expected1, expected0);
      assert_non_null(strstr(xcoll_net_last_error(), "closed the connection"));
    }
    close_link(&l);
  }
}

/* Two messages sent; the first receive's recv() takes both, so socket 0 is
 * no longer readable: a caller that polled it would sleep for ever. The
 * second receive, posted later with nothing more sent, completes within a
 * few test calls from the stage alone. */
static void test_staged_message_completes_without_poll(void **state) {
  (void)state;
  net_link l;
  open_link(&l, 1);
  unsigned char out0[32], out1[40], in0[64], in1[64];
  fill(out0, sizeof out0, 3);
  fill(out1, sizeof out1, 4);
  xcoll_net_request *s, *r;
  assert_int_equal(net->isend(l.send, out0, sizeof out0, 5, NULL, &s),
                   XCOLL_SUCCESS);
  assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);
  assert_int_equal(net->isend(l.send, out1, sizeof out1, 6, NULL, &s),
                   XCOLL_SUCCESS);
  assert_int_equal(wait_request(s, NULL), XCOLL_SUCCESS);

  assert_int_equal(net->irecv(l.recv, in0, sizeof in0, 5, NULL, &r),
                   XCOLL_SUCCESS);
  int fd = socket0_of(l.recv);
  wait_queued(fd, 16 + 32 + 16 + 40);
  int done = 0;
  size_t got = 0;
  assert_int_equal(net->test(r, &done, &got), XCOLL_SUCCESS);
  assert_true(done); /* all of it was there */
  assert_int_equal(got, sizeof out0);
  assert_memory_equal(in0, out0, sizeof out0);
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&pfd, 1, 0), 0); /* the rest is in the stage */

  assert_int_equal(net->irecv(l.recv, in1, sizeof in1, 6, NULL, &r),
                   XCOLL_SUCCESS);
  done = 0;
  for (int k = 0; k < 3 && !done; k++)
    assert_int_equal(net->test(r, &done, &got), XCOLL_SUCCESS);
  assert_true(done);
  assert_int_equal(got, sizeof out1);
  assert_memory_equal(in1, out1, sizeof out1);
  close_link(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_select_and_properties),
      cmocka_unit_test(test_sizes_one_socket),
      cmocka_unit_test(test_sizes_four_sockets),
      cmocka_unit_test(test_many_messages_in_order),
      cmocka_unit_test(test_back_pressure),
      cmocka_unit_test(test_tag_mismatch_is_protocol),
      cmocka_unit_test(test_truncation_is_protocol),
      cmocka_unit_test(test_peer_close_is_remote),
      cmocka_unit_test(test_complete_then_close),
      cmocka_unit_test(test_close_with_requests_in_flight),
      cmocka_unit_test(test_get_fds),
      cmocka_unit_test(test_unix_within_a_host),
      cmocka_unit_test(test_strangers_do_not_break_accept),
      cmocka_unit_test(test_connect_timeout),
      cmocka_unit_test_teardown(test_auth_same_token, no_secret),
      cmocka_unit_test_teardown(test_auth_ring_does_not_deadlock, no_secret),
      cmocka_unit_test_teardown(test_auth_wrong_key_is_dropped, no_secret),
      cmocka_unit_test_teardown(test_auth_client_without_secret, no_secret),
      cmocka_unit_test_teardown(test_auth_connector_checks_the_server,
                                no_secret),
      cmocka_unit_test(test_small_messages_received_late),
      cmocka_unit_test(test_stage_boundaries_and_large_messages),
      cmocka_unit_test(test_close_after_staged_message),
      cmocka_unit_test(test_close_inside_staged_message),
      cmocka_unit_test(test_staged_message_completes_without_poll),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
