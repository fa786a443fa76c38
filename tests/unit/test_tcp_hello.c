/* test_tcp_hello.c - the tcp backend's startup against crafted and stray
 * connections: while rank 1 of a 2-rank world waits for its peer, a stranger
 * connects to its listener and sends HELLO headers whose fields are negative
 * or huge when read as int (sender, socket index, receiver rank), for another
 * communicator, of the wrong kind, with a payload length, corrupted, or
 * truncated, plus a connect+close. Each must be dropped (the stranger sees the
 * connection closed, never a reply) with a WARN naming its address, and the
 * real world must still connect and exchange a message. Run under ASan by
 * scripts/test.sh: an out-of-bounds index into the peer arrays would show. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../backends/tcp/tcp.h"
#include "backend.h"
#include "comm.h"
#include "store.h"
#include "wire.h"

#define COMM_ID 7

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct rank_ctx {
  int rank;
  int port;
  xcoll_comm comm;
  void *state;
  xcoll_status init_status;
  xcoll_status status;
  char payload[16];
} rank_ctx;

static void *rank_main(void *arg) {
  rank_ctx *c = arg;
  xcoll_comm *comm = &c->comm;
  comm->magic = XCOLL_COMM_MAGIC;
  comm->rank = c->rank;
  comm->world_size = 2;
  comm->comm_id = COMM_ID;
  comm->timeout_s = 60.0;
  comm->options.nsocks_per_peer = 1;
  comm->backend = &xcoll_backend_tcp;
  snprintf(comm->store_prefix, sizeof comm->store_prefix, "c7/");
  snprintf(comm->master_addr, sizeof comm->master_addr, "127.0.0.1");
  comm->master_port = c->port;
  pthread_mutex_init(&comm->error_lock, NULL);
  c->init_status = xcoll_store_connect("127.0.0.1", c->port, 60.0, &comm->store);
  if (c->init_status == XCOLL_SUCCESS)
    c->init_status = xcoll_backend_tcp.comm_init(comm, &c->state);
  if (c->init_status == XCOLL_SUCCESS) {
    /* one message from rank 0 to rank 1 proves the mesh works */
    const xcoll_p2p_ops *ops = xcoll_backend_tcp.p2p;
    xcoll_p2p_request *req = NULL;
    if (c->rank == 0) {
      snprintf(c->payload, sizeof c->payload, "hello rank 1");
      c->status = ops->isend(c->state, 1, 42, c->payload, sizeof c->payload, &req);
    } else {
      c->status = ops->irecv(c->state, 0, 42, c->payload, sizeof c->payload, &req);
    }
    if (c->status == XCOLL_SUCCESS) c->status = ops->wait(c->state, &req, 1);
    xcoll_backend_tcp.comm_destroy(comm, c->state);
  }
  xcoll_store_close(comm->store);
  return NULL;
}

static int connect_to(const char *addr) {
  char host[TCP_ADDR_BYTES];
  snprintf(host, sizeof host, "%s", addr);
  char *colon = strrchr(host, ':');
  assert_non_null(colon);
  *colon = '\0';
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)atoi(colon + 1))};
  assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* A HELLO to rank 1 with the given raw fields and a valid checksum. */
static void crafted(uint8_t out[XCOLL_WIRE_HEADER_BYTES], uint16_t kind,
                    uint64_t comm_id, uint32_t to_rank, uint32_t index,
                    uint64_t length, uint32_t sender) {
  xcoll_wire_header h = xcoll_wire_make((xcoll_wire_kind)kind, comm_id,
                                        ((uint64_t)to_rank << 32) | index,
                                        length, (int)sender);
  h.sender = sender;
  xcoll_wire_encode(&h, out);
}

/* The rank must close the connection without answering: read until EOF or
 * reset (60 s bound); any byte received means it answered a bad HELLO. */
static void expect_dropped(int fd, const char *what) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int n = poll(&p, 1, 60000);
  if (n != 1) fail_msg("%s: the rank neither answered nor closed in 60 s", what);
  char byte;
  ssize_t r = recv(fd, &byte, 1, 0);
  if (r > 0) fail_msg("%s: the rank answered a HELLO it should reject", what);
  close(fd);
}

/* Reads the captured log into log (bytes long) and counts the lines about
 * dropped connections in it (every drop is an INFO line, at most one a
 * second is a WARN); *warns (may be NULL) receives how many are WARNs. */
static int count_drops(int log_fd, char *log, size_t bytes, int *warns) {
  fflush(stderr);
  ssize_t got = pread(log_fd, log, bytes - 1, 0);
  log[got > 0 ? got : 0] = '\0';
  int drops = 0;
  if (warns) *warns = 0;
  for (const char *p = log;
       (p = strstr(p, "drops the connection from 127.0.0.1:")); p++) {
    drops++;
    const char *line = p;
    while (line > log && line[-1] != '\n') line--;
    if (warns && memmem(line, (size_t)(p - line), "WARN", 4)) (*warns)++;
  }
  return drops;
}

static void test_crafted_hellos(void **unused) {
  (void)unused;
  xcoll_store_server *server = NULL;
  int port = 0;
  assert_int_equal(xcoll_store_server_start("127.0.0.1", 0, &server, &port),
                   XCOLL_SUCCESS);
  /* The WARNs go to stderr: capture it to check that each names the
   * stranger's address. */
  char log_path[] = "/tmp/xcoll_test_tcp_hello_XXXXXX";
  int log_fd = mkstemp(log_path);
  assert_true(log_fd >= 0);
  fflush(stderr);
  int saved_stderr = dup(2);
  dup2(log_fd, 2);

  rank_ctx ranks[2];
  memset(ranks, 0, sizeof ranks);
  for (int r = 0; r < 2; r++) {
    ranks[r].rank = r;
    ranks[r].port = port;
  }
  pthread_t threads[2];
  pthread_create(&threads[1], NULL, rank_main, &ranks[1]);

  /* Rank 0 has not started: a placeholder for its address lets rank 1 into
   * its accept loop (rank 1 never dials rank 0), so that it judges every
   * crafted connection before the real rank 0 arrives. */
  xcoll_store *store = NULL;
  assert_int_equal(xcoll_store_connect("127.0.0.1", port, 60.0, &store),
                   XCOLL_SUCCESS);
  char placeholder[TCP_ADDR_BYTES] = "127.0.0.1:1";
  assert_int_equal(xcoll_store_set(store, "c7/bootstrap/tcp-addr/0",
                                   placeholder, sizeof placeholder),
                   XCOLL_SUCCESS);
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(store, "c7/bootstrap/tcp-addr/1", &value, &bytes),
                   XCOLL_SUCCESS);
  char addr[TCP_ADDR_BYTES];
  snprintf(addr, sizeof addr, "%s", (char *)value);
  free(value);

  struct {
    const char *what;
    uint16_t kind;
    uint64_t comm_id;
    uint32_t to_rank, index, sender;
    uint64_t length;
    size_t send_bytes;
    int corrupt;
  } cases[] = {
      {"sender -1", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0xffffffffu, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"sender INT_MIN", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0x80000000u, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"sender huge", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0x7fffffffu, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"sender = receiver", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 1, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"index -1", XCOLL_WIRE_HELLO, COMM_ID, 1, 0xffffffffu, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"index INT_MIN", XCOLL_WIRE_HELLO, COMM_ID, 1, 0x80000000u, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"index huge", XCOLL_WIRE_HELLO, COMM_ID, 1, 0x7fffffffu, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"receiver -1", XCOLL_WIRE_HELLO, COMM_ID, 0xffffffffu, 0, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"receiver 0", XCOLL_WIRE_HELLO, COMM_ID, 0, 0, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"other comm", XCOLL_WIRE_HELLO, 8, 1, 0, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"DATA kind", XCOLL_WIRE_DATA, COMM_ID, 1, 0, 0, 0, XCOLL_WIRE_HEADER_BYTES, 0},
      {"length 2^63", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0, 1ull << 63, XCOLL_WIRE_HEADER_BYTES, 0},
      {"bad checksum", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0, 0, XCOLL_WIRE_HEADER_BYTES, 1},
      {"truncated", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0, 0, 20, 0},
      {"connect+close", XCOLL_WIRE_HELLO, COMM_ID, 1, 0, 0, 0, 0, 0},
  };
  enum { NCASES = sizeof cases / sizeof cases[0] };
  int fds[NCASES];
  double crafted_at = now_s();
  for (int k = 0; k < NCASES; k++) {
    uint8_t msg[XCOLL_WIRE_HEADER_BYTES];
    crafted(msg, cases[k].kind, cases[k].comm_id, cases[k].to_rank,
            cases[k].index, cases[k].length, cases[k].sender);
    if (cases[k].corrupt) msg[20] ^= 0x55;
    fds[k] = connect_to(addr);
    if (cases[k].send_bytes)
      assert_int_equal(send(fds[k], msg, cases[k].send_bytes, MSG_NOSIGNAL),
                       (ssize_t)cases[k].send_bytes);
    if (cases[k].send_bytes < XCOLL_WIRE_HEADER_BYTES)
      shutdown(fds[k], SHUT_WR); /* truncated: the rank sees EOF mid-HELLO */
  }
  for (int k = 0; k < NCASES; k++) expect_dropped(fds[k], cases[k].what);
  double dropped_s = now_s() - crafted_at;
  /* Each drop gets its INFO line (a WARN at most once a second). The
   * lines were written before the closes that expect_dropped saw. */
  char log[65536];
  for (int tries = 0; tries < 600 && count_drops(log_fd, log, sizeof log,
                                                 NULL) < NCASES;
       tries++)
    usleep(100 * 1000); /* poll the captured log, bounded to 60 s */
  pthread_create(&threads[0], NULL, rank_main, &ranks[0]);
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
  xcoll_store_close(store);
  xcoll_store_server_stop(server);

  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  int warns = 0;
  int drops = count_drops(log_fd, log, sizeof log, &warns);
  close(log_fd);
  unlink(log_path);
  fputs(log, stderr);

  for (int r = 0; r < 2; r++) {
    assert_int_equal(ranks[r].init_status, XCOLL_SUCCESS);
    assert_int_equal(ranks[r].status, XCOLL_SUCCESS);
  }
  assert_string_equal(ranks[1].payload, "hello rank 1");
  /* One line per dropped connection, each naming where it came from; of
   * them at most one WARN a second (strangers do not decide how much a
   * rank warns). */
  assert_int_equal(drops, NCASES);
  assert_true(warns >= 1);
  assert_true(warns <= 1 + (int)dropped_s);
  assert_non_null(strstr(log, "HELLO from rank 4294967295"));
  assert_non_null(strstr(log, "HELLO for socket 4294967295"));
  assert_non_null(strstr(log, "HELLO meant for rank 4294967295"));
}

int main(void) {
  /* every drop's reason is an INFO line */
  setenv("XCOLL_DEBUG", "INFO", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crafted_hellos),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
