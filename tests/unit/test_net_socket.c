/* test_net_socket.c - the socket net plugin (net/socket/net_socket.c) and
 * the plugin choice (net/net.c), in one process: connect and accept are
 * called in turn until both give a comm; messages of 0 B to 4 MiB arrive
 * intact and in order with 1 and 4 sockets per connection; the 33rd request
 * is a NULL request (back-pressure), not an error; a tag mismatch or an
 * oversize message is PROTOCOL; a closed peer is REMOTE; closing with
 * requests in flight releases them (ASan's leak check); strangers knocking
 * on the listener are dropped without breaking the accept.
 *
 * The test reads the handle's address and port at the offsets net_socket.c
 * writes them (8: IPv4 address, 12: port, both in network order) to knock
 * on the listener as a stranger. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net.h"

#define WAIT_S 20.0 /* bound on any loop that waits for the plugin */

static const xcoll_net_v1 *net;

/* WARN lines the plugin logged, for the stranger tests. */
static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static int warn_dropped;
static char last_warn[512];

static void test_log(xcoll_net_log_level level, const char *message) {
  if (level == XCOLL_NET_LOG_WARN && strstr(message, "dropped") != NULL) {
    pthread_mutex_lock(&warn_lock);
    warn_dropped++;
    snprintf(last_warn, sizeof last_warn, "%s", message);
    pthread_mutex_unlock(&warn_lock);
  }
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

/* Rank 1 listens, rank 0 connects; call both until both are done. */
static void open_link(net_link *l, int nsocks) {
  char text[8];
  snprintf(text, sizeof text, "%d", nsocks);
  setenv("XCOLL_NSOCKS_PERPEER", text, 1);
  memset(l, 0, sizeof *l);
  xcoll_net_config rx = config_of(7, 1), tx = config_of(7, 0);
  assert_int_equal(net->listen(0, &rx, l->handle, &l->listen), XCOLL_SUCCESS);
  assert_non_null(l->listen);
  /* nobody has connected yet: accept must not block, and gives NULL */
  assert_int_equal(net->accept(l->listen, 0, &l->recv), XCOLL_SUCCESS);
  assert_null(l->recv);
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

static int setup(void **state) {
  (void)state;
  setenv("XCOLL_SOCKET_IFNAME", "lo", 1);
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
  /* 3: a real hello of another communicator (comm id 99) */
  xcoll_net_config other = config_of(99, 0);
  xcoll_net_send_comm *wrong = NULL;
  double deadline = now_s() + WAIT_S;
  while (wrong == NULL && now_s() < deadline)
    assert_int_equal(net->connect(0, &other, handle, 1, &wrong), XCOLL_SUCCESS);
  /* 4: the right comm but the wrong rank */
  xcoll_net_config rank2 = config_of(7, 2);
  xcoll_net_send_comm *wrong_rank = NULL;
  while (wrong_rank == NULL && now_s() < deadline)
    assert_int_equal(net->connect(0, &rank2, handle, 1, &wrong_rank),
                     XCOLL_SUCCESS);

  xcoll_net_recv_comm *recv = NULL;
  int drops = 0;
  /* 2 sockets of comm 99 + 2 of rank 2 + garbage + the closed one */
  while (drops < 6 && now_s() < deadline) {
    assert_int_equal(net->accept(listen, 0, &recv), XCOLL_SUCCESS);
    assert_null(recv);
    pthread_mutex_lock(&warn_lock);
    drops = warn_dropped;
    pthread_mutex_unlock(&warn_lock);
  }
  assert_int_equal(drops, 6);
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
  net->close_send(wrong);
  net->close_send(wrong_rank);
  net->close_send(send);
  net->close_recv(recv);
  net->close_listen(listen);
}

static void test_connect_timeout_and_secret(void **state) {
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

  /* a secret is refused until authentication exists */
  static const uint8_t secret[16] = {1};
  rx.secret = secret;
  rx.secret_bytes = sizeof secret;
  tx.secret = secret;
  tx.secret_bytes = sizeof secret;
  tx.timeout_s = 10;
  assert_int_equal(net->listen(0, &rx, handle, &listen), XCOLL_SUCCESS);
  s = XCOLL_SUCCESS;
  while (s == XCOLL_SUCCESS && send == NULL && now_s() < deadline)
    s = net->connect(0, &tx, handle, 1, &send);
  assert_int_equal(s, XCOLL_ERR_NOT_SUPPORTED);
  assert_non_null(strstr(xcoll_net_last_error(), "secret"));
  net->close_listen(listen);

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
      cmocka_unit_test(test_close_with_requests_in_flight),
      cmocka_unit_test(test_strangers_do_not_break_accept),
      cmocka_unit_test(test_connect_timeout_and_secret),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
