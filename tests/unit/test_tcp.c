/* test_tcp.c - the tcp backend alone (backends/tcp): 2-3 communicators in
 * threads of one process, wired through a real store server, exchange
 * messages (one and several sockets per peer, striped and not, zero bytes,
 * wait and test), and every failure path gives the documented status with a
 * message naming the right rank: a tag or size mismatch (PROTOCOL), a
 * corrupted header injected on a socket (PROTOCOL), a peer whose sockets
 * close without BYE (REMOTE, also when nobody waits on that peer), a peer
 * that aborts (ABORTED here, REMOTE there), a receive that never comes
 * (TIMEOUT), and a normal close by a peer that is not an error. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../backends/tcp/tcp.h"
#include "backend.h"
#include "comm.h"
#include "store.h"

#define MAX_RANKS 4

typedef struct world world;
typedef struct rank_ctx {
  world *w;
  int rank;
  xcoll_comm comm;
  void *state;
  xcoll_status init_status;
  xcoll_status status; /* what the body saw */
  char message[XCOLL_ERROR_BYTES];
  long checked_bytes; /* payload bytes verified against the pattern */
} rank_ctx;

struct world {
  int size;
  int nsocks;
  double timeout_s;
  int port;
  xcoll_store_server *server;
  pthread_barrier_t barrier;
  void (*body)(rank_ctx *);
  rank_ctx ranks[MAX_RANKS];
};

static void record(rank_ctx *c, xcoll_status s) {
  c->status = s;
  pthread_mutex_lock(&c->comm.error_lock);
  snprintf(c->message, sizeof c->message, "%s", c->comm.last_error);
  pthread_mutex_unlock(&c->comm.error_lock);
}

static void *rank_main(void *arg) {
  rank_ctx *c = arg;
  world *w = c->w;
  xcoll_comm *comm = &c->comm;
  comm->magic = XCOLL_COMM_MAGIC;
  comm->rank = c->rank;
  comm->world_size = w->size;
  comm->local_rank = c->rank;
  comm->local_world_size = w->size;
  comm->comm_id = 7;
  comm->timeout_s = w->timeout_s;
  comm->options.nsocks_per_peer = w->nsocks;
  comm->backend = &xcoll_backend_tcp;
  snprintf(comm->store_prefix, sizeof comm->store_prefix, "c7/");
  snprintf(comm->master_addr, sizeof comm->master_addr, "127.0.0.1");
  comm->master_port = w->port;
  pthread_mutex_init(&comm->error_lock, NULL);
  c->init_status = xcoll_store_connect("127.0.0.1", w->port, 10.0, &comm->store);
  if (c->init_status == XCOLL_SUCCESS)
    c->init_status = xcoll_backend_tcp.comm_init(comm, &c->state);
  pthread_barrier_wait(&w->barrier);
  if (c->init_status == XCOLL_SUCCESS) w->body(c);
  if (c->state) xcoll_backend_tcp.comm_destroy(comm, c->state);
  c->state = NULL;
  xcoll_store_close(comm->store);
  return NULL;
}

static void run_world(world *w, int size, int nsocks, double timeout_s,
                      void (*body)(rank_ctx *)) {
  memset(w, 0, sizeof *w);
  w->size = size;
  w->nsocks = nsocks;
  w->timeout_s = timeout_s;
  w->body = body;
  assert_int_equal(xcoll_store_server_start("127.0.0.1", 0, &w->server, &w->port),
                   XCOLL_SUCCESS);
  pthread_barrier_init(&w->barrier, NULL, (unsigned)size);
  pthread_t threads[MAX_RANKS];
  for (int r = 0; r < size; r++) {
    w->ranks[r].w = w;
    w->ranks[r].rank = r;
    pthread_create(&threads[r], NULL, rank_main, &w->ranks[r]);
  }
  for (int r = 0; r < size; r++) pthread_join(threads[r], NULL);
  pthread_barrier_destroy(&w->barrier);
  xcoll_store_server_stop(w->server);
  for (int r = 0; r < size; r++)
    assert_int_equal(w->ranks[r].init_status, XCOLL_SUCCESS);
}

static const xcoll_p2p_ops *ops(void) { return xcoll_backend_tcp.p2p; }

/* Byte i of the message from src to dst number k. */
static unsigned char pattern(int src, int dst, int k, size_t i) {
  return (unsigned char)(i * 131 + (size_t)src * 17 + (size_t)dst * 5 + (size_t)k * 3 + 1);
}

/* ---- exchange ---- */

static const size_t sizes[] = {0, 1, 40, 4096, 65537, 300000, 1u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void body_exchange(rank_ctx *c) {
  int me = c->rank, n = c->w->size;
  unsigned char *sendbufs[MAX_RANKS][NSIZES], *recvbufs[MAX_RANKS][NSIZES];
  xcoll_p2p_request *reqs[2 * MAX_RANKS * NSIZES];
  int nreq = 0;
  xcoll_status s = XCOLL_SUCCESS;
  /* Receives first to some peers, sends first to others: order of posting
   * across peers must not matter, only per peer and direction. */
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    for (size_t k = 0; k < NSIZES; k++) {
      sendbufs[p][k] = malloc(sizes[k] + 1);
      recvbufs[p][k] = calloc(1, sizes[k] + 1);
      for (size_t i = 0; i < sizes[k]; i++)
        sendbufs[p][k][i] = pattern(me, p, (int)k, i);
    }
  }
  for (int p = 0; p < n && s == XCOLL_SUCCESS; p++) {
    if (p == me) continue;
    for (size_t k = 0; k < NSIZES && s == XCOLL_SUCCESS; k++) {
      uint64_t tag = ((uint64_t)k << 32) | (uint64_t)p;
      uint64_t rtag = ((uint64_t)k << 32) | (uint64_t)me;
      if ((p + me) % 2) {
        s = ops()->irecv(c->state, p, rtag, recvbufs[p][k], sizes[k], &reqs[nreq++]);
        if (s == XCOLL_SUCCESS)
          s = ops()->isend(c->state, p, tag, sendbufs[p][k], sizes[k], &reqs[nreq++]);
      } else {
        s = ops()->isend(c->state, p, tag, sendbufs[p][k], sizes[k], &reqs[nreq++]);
        if (s == XCOLL_SUCCESS)
          s = ops()->irecv(c->state, p, rtag, recvbufs[p][k], sizes[k], &reqs[nreq++]);
      }
    }
  }
  /* Half the requests finish through test(), the rest through wait(). */
  for (int i = 0; i < nreq / 2 && s == XCOLL_SUCCESS; i++) {
    int done = 0;
    while (!done && s == XCOLL_SUCCESS) s = ops()->test(c->state, reqs[i], &done);
    reqs[i] = NULL;
  }
  if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, reqs, nreq);
  long checked = 0;
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    for (size_t k = 0; k < NSIZES; k++) {
      for (size_t i = 0; i < sizes[k] && s == XCOLL_SUCCESS; i++) {
        if (recvbufs[p][k][i] != pattern(p, me, (int)k, i)) {
          s = XCOLL_ERR_INTERNAL;
          snprintf(c->comm.last_error, sizeof c->comm.last_error,
                   "byte %zu of message %zu from rank %d differs", i, k, p);
        }
        checked++;
      }
      free(sendbufs[p][k]);
      free(recvbufs[p][k]);
    }
  }
  c->checked_bytes = checked;
  record(c, s);
}

static void check_exchange(int size, int nsocks) {
  world *w = malloc(sizeof *w);
  run_world(w, size, nsocks, 20.0, body_exchange);
  long total = 0;
  for (size_t k = 0; k < NSIZES; k++) total += (long)sizes[k];
  for (int r = 0; r < size; r++) {
    if (w->ranks[r].status != XCOLL_SUCCESS)
      fail_msg("rank %d: status %d: %s", r, w->ranks[r].status,
               w->ranks[r].message);
    assert_int_equal(w->ranks[r].checked_bytes, total * (size - 1));
  }
  free(w);
}

static void test_exchange_one_socket(void **state) {
  (void)state;
  check_exchange(2, 1);
  check_exchange(3, 1);
}

static void test_exchange_striped(void **state) {
  (void)state;
  check_exchange(3, 3);
}

/* ---- mismatches ---- */

static int mismatch_kind; /* 0: tag, 1: size, 2: raw corrupted header */

static void body_mismatch(rank_ctx *c) {
  char buf[64] = {0};
  xcoll_p2p_request *r = NULL;
  xcoll_status s;
  if (c->rank == 0) {
    if (mismatch_kind == 2) {
      /* Garbage where a header should start. */
      tcp_state *st = c->state;
      char junk[XCOLL_WIRE_HEADER_BYTES];
      memset(junk, 0x5a, sizeof junk);
      assert_int_equal(send(st->peers[1].socks[0].fd, junk, sizeof junk, 0),
                       (ssize_t)sizeof junk);
      s = XCOLL_SUCCESS;
    } else {
      s = ops()->isend(c->state, 1, 5, buf, 16, &r);
      if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, &r, 1);
    }
    /* Then wait for a reply that never comes: rank 1's ABORT ends it. */
    if (s == XCOLL_SUCCESS) s = ops()->irecv(c->state, 1, 9, buf, 8, &r);
    if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, &r, 1);
  } else {
    s = ops()->irecv(c->state, 0, mismatch_kind == 0 ? 6 : 5, buf,
                     mismatch_kind == 1 ? 17 : 16, &r);
    if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, &r, 1);
  }
  record(c, s);
}

static void check_mismatch(int kind, const char *word) {
  world *w = malloc(sizeof *w);
  mismatch_kind = kind;
  run_world(w, 2, 1, 20.0, body_mismatch);
  rank_ctx *r0 = &w->ranks[0], *r1 = &w->ranks[1];
  assert_int_equal(r1->status, XCOLL_ERR_PROTOCOL);
  if (!strstr(r1->message, "rank 0") || !strstr(r1->message, word))
    fail_msg("rank 1's message lacks \"rank 0\" or \"%s\": %s", word, r1->message);
  assert_int_equal(r0->status, XCOLL_ERR_REMOTE);
  if (!strstr(r0->message, "rank 1") || !strstr(r0->message, "aborted"))
    fail_msg("rank 0's message does not say rank 1 aborted: %s", r0->message);
  free(w);
}

static void test_tag_mismatch(void **state) {
  (void)state;
  check_mismatch(0, "tag 0x5");
}
static void test_size_mismatch(void **state) {
  (void)state;
  check_mismatch(1, "length 16");
}
static void test_corrupted_header(void **state) {
  (void)state;
  check_mismatch(2, "magic");
}

/* ---- a peer dies ---- */

/* Rank 2 closes its sockets without BYE (as the kernel does for a killed
 * process) while rank 0 waits on rank 1 and rank 1 waits on rank 0: both
 * must fail at once naming rank 2, though neither waits on it. */
static void body_death(rank_ctx *c) {
  char buf[8];
  xcoll_p2p_request *r = NULL;
  xcoll_status s = XCOLL_SUCCESS;
  if (c->rank == 2) {
    tcp_state *st = c->state;
    for (int k = 0; k < st->nsockets; k++) {
      close(st->sockets[k].fd);
      st->sockets[k].fd = -1;
    }
    st->broken = XCOLL_ERR_ABORTED; /* no BYE on destroy either */
  } else {
    s = ops()->irecv(c->state, 1 - c->rank, 1, buf, sizeof buf, &r);
    if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, &r, 1);
  }
  record(c, s);
}

static void test_peer_death(void **state) {
  (void)state;
  world *w = malloc(sizeof *w);
  run_world(w, 3, 2, 20.0, body_death);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(w->ranks[r].status, XCOLL_ERR_REMOTE);
    if (!strstr(w->ranks[r].message, "rank 2 ("))
      fail_msg("rank %d's message does not name rank 2: %s", r,
               w->ranks[r].message);
  }
  free(w);
}

/* Rank 2 finishes normally and destroys its communicator; ranks 0 and 1
 * then exchange: a normal close is not a failure. */
static void body_graceful(rank_ctx *c) {
  int x = c->rank, y = -1;
  xcoll_p2p_request *r[2] = {NULL, NULL};
  xcoll_status s = XCOLL_SUCCESS;
  if (c->rank == 2) {
    xcoll_backend_tcp.comm_destroy(&c->comm, c->state);
    c->state = NULL;
    pthread_barrier_wait(&c->w->barrier);
  } else {
    pthread_barrier_wait(&c->w->barrier);
    int peer = 1 - c->rank;
    s = ops()->isend(c->state, peer, 3, &x, sizeof x, &r[0]);
    if (s == XCOLL_SUCCESS) s = ops()->irecv(c->state, peer, 3, &y, sizeof y, &r[1]);
    if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, r, 2);
    if (s == XCOLL_SUCCESS && y != peer) s = XCOLL_ERR_INTERNAL;
  }
  record(c, s);
}

static void test_graceful_close(void **state) {
  (void)state;
  world *w = malloc(sizeof *w);
  run_world(w, 3, 1, 20.0, body_graceful);
  for (int r = 0; r < 3; r++)
    if (w->ranks[r].status != XCOLL_SUCCESS)
      fail_msg("rank %d: %s", r, w->ranks[r].message);
  free(w);
}

/* ---- abort and timeout ---- */

static void *abort_thread(void *arg) {
  rank_ctx *c = arg;
  xcoll_backend_tcp.comm_abort(&c->comm, c->state);
  return NULL;
}

static void body_abort(rank_ctx *c) {
  char buf[8];
  xcoll_p2p_request *r = NULL;
  pthread_t t;
  if (c->rank == 0) pthread_create(&t, NULL, abort_thread, c);
  xcoll_status s = ops()->irecv(c->state, 1 - c->rank, 1, buf, sizeof buf, &r);
  if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, &r, 1);
  if (c->rank == 0) pthread_join(t, NULL);
  record(c, s);
}

static void test_abort(void **state) {
  (void)state;
  world *w = malloc(sizeof *w);
  run_world(w, 2, 1, 20.0, body_abort);
  assert_int_equal(w->ranks[0].status, XCOLL_ERR_ABORTED);
  assert_int_equal(w->ranks[1].status, XCOLL_ERR_REMOTE);
  if (!strstr(w->ranks[1].message, "rank 0") ||
      !strstr(w->ranks[1].message, "aborted"))
    fail_msg("rank 1's message: %s", w->ranks[1].message);
  free(w);
}

static void body_timeout(rank_ctx *c) {
  char buf[8];
  xcoll_p2p_request *r = NULL;
  xcoll_status s = XCOLL_SUCCESS;
  if (c->rank == 0) {
    s = ops()->irecv(c->state, 1, 1, buf, sizeof buf, &r);
    if (s == XCOLL_SUCCESS) s = ops()->wait(c->state, &r, 1);
  }
  /* Rank 1 stays alive (no EOF) until rank 0 has given up. */
  pthread_barrier_wait(&c->w->barrier);
  record(c, s);
}

static void test_timeout(void **state) {
  (void)state;
  world *w = malloc(sizeof *w);
  run_world(w, 2, 1, 0.3, body_timeout);
  assert_int_equal(w->ranks[0].status, XCOLL_ERR_TIMEOUT);
  if (!strstr(w->ranks[0].message, "receive of 8 bytes from rank 1"))
    fail_msg("rank 0's message: %s", w->ranks[0].message);
  free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exchange_one_socket),
      cmocka_unit_test(test_exchange_striped),
      cmocka_unit_test(test_tag_mismatch),
      cmocka_unit_test(test_size_mismatch),
      cmocka_unit_test(test_corrupted_header),
      cmocka_unit_test(test_peer_death),
      cmocka_unit_test(test_graceful_close),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
