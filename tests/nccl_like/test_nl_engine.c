/* test_nl_engine.c - the nccl_like engine (worker threads, ring kernels,
 * proxy thread, op handles, failure watcher) with the ranks as threads of
 * one process and an in-memory net plugin, so that the engine is tested
 * apart from sockets and from core's dispatch.
 *
 * Each case creates world_size fake communicators sharing one store server,
 * calls the backend's comm_init / coll ops / comm_destroy directly, and
 * checks every result element against a reference computed here from the
 * inputs (integers in float32: exact whatever the reduction order).
 * Cases: every collective at P = 2, 3, 4 with SIMPLE and LL, 1 and 3
 * channels, and a FIFO of 8 x 256 B so that messages wrap it many times;
 * several ops in flight at once (issue order kept); a rank that dies
 * mid-collective makes every other rank fail naming it within 5 s, the ones
 * that are not its ring neighbours included; comm_abort ends a wait; ranks
 * that propose different channel counts at init all run the smallest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm.h"
#include "error.h"
#include "nccl_like.h"
#include "store.h"

/* ---- an in-memory net plugin: one FIFO of messages per connection ---- */

typedef struct mock_msg {
  struct mock_msg *next;
  size_t bytes;
  uint32_t tag;
  unsigned char data[];
} mock_msg;

typedef struct mock_pipe {
  pthread_mutex_t lock;
  mock_msg *head, *tail;
  int connected;
  int closed; /* either end closed */
  int refs;   /* ends not yet closed (send, recv) */
} mock_pipe;

struct xcoll_net_listen_comm { mock_pipe *pipe; };
struct xcoll_net_request;
/* Sends not yet tested done are kept so that close_send releases them
 * (net.h: close releases the requests in flight). */
struct xcoll_net_send_comm {
  mock_pipe *pipe;
  struct xcoll_net_request *pending[XCOLL_NET_MAX_REQUESTS];
};
/* Receives in flight are kept so that close_recv releases them (net.h). */
struct xcoll_net_recv_comm {
  mock_pipe *pipe;
  struct xcoll_net_request *pending[XCOLL_NET_MAX_REQUESTS];
};
struct xcoll_net_request {
  mock_pipe *pipe; /* NULL for a send (complete when posted) */
  struct xcoll_net_recv_comm *owner;
  struct xcoll_net_send_comm *send_owner; /* sends */
  void *data;
  size_t bytes;
  uint32_t tag;
};

static xcoll_status mock_init(xcoll_net_log_fn log) {
  (void)log;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_devices(int *count) {
  *count = 1;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_props(int device, xcoll_net_properties *p) {
  (void)device;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "mock");
  p->ptr_support = XCOLL_NET_PTR_HOST;
  p->max_comms = 1024;
  p->max_requests = XCOLL_NET_MAX_REQUESTS;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_listen(int device, const xcoll_net_config *config,
                                void *handle, xcoll_net_listen_comm **out) {
  (void)device;
  (void)config;
  mock_pipe *pipe = calloc(1, sizeof *pipe);
  xcoll_net_listen_comm *lc = calloc(1, sizeof *lc);
  pthread_mutex_init(&pipe->lock, NULL);
  pipe->refs = 2;
  lc->pipe = pipe;
  memcpy(handle, &pipe, sizeof pipe);
  *out = lc;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_connect(int device, const xcoll_net_config *config,
                                 const void *handle, int peer_rank,
                                 xcoll_net_send_comm **out) {
  (void)device;
  (void)config;
  (void)peer_rank;
  mock_pipe *pipe;
  memcpy(&pipe, handle, sizeof pipe);
  pthread_mutex_lock(&pipe->lock);
  pipe->connected = 1;
  pthread_mutex_unlock(&pipe->lock);
  *out = calloc(1, sizeof **out);
  (*out)->pipe = pipe;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_accept(xcoll_net_listen_comm *lc, int expected_rank,
                                xcoll_net_recv_comm **out) {
  (void)expected_rank;
  pthread_mutex_lock(&lc->pipe->lock);
  int connected = lc->pipe->connected;
  pthread_mutex_unlock(&lc->pipe->lock);
  *out = NULL;
  if (connected) {
    *out = calloc(1, sizeof **out);
    (*out)->pipe = lc->pipe;
  }
  return XCOLL_SUCCESS;
}
static xcoll_status mock_reg(xcoll_net_send_comm *s, xcoll_net_recv_comm *r,
                             void *data, size_t bytes, int type, void **mh) {
  (void)s, (void)r, (void)data, (void)bytes, (void)type;
  *mh = (void *)1;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_dereg(xcoll_net_send_comm *s, xcoll_net_recv_comm *r,
                               void *mh) {
  (void)s, (void)r, (void)mh;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_isend(xcoll_net_send_comm *sc, const void *data,
                               size_t bytes, uint32_t tag, void *mh,
                               xcoll_net_request **out) {
  (void)mh;
  mock_pipe *pipe = sc->pipe;
  pthread_mutex_lock(&pipe->lock);
  if (pipe->closed) {
    pthread_mutex_unlock(&pipe->lock);
    return XCOLL_ERR_REMOTE;
  }
  mock_msg *m = malloc(sizeof *m + bytes);
  m->next = NULL;
  m->bytes = bytes;
  m->tag = tag;
  memcpy(m->data, data, bytes);
  if (pipe->tail)
    pipe->tail->next = m;
  else
    pipe->head = m;
  pipe->tail = m;
  pthread_mutex_unlock(&pipe->lock);
  xcoll_net_request *r = calloc(1, sizeof *r);
  r->send_owner = sc;
  for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
    if (!sc->pending[i]) {
      sc->pending[i] = r;
      break;
    }
  *out = r;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_irecv(xcoll_net_recv_comm *rc, void *data,
                               size_t bytes, uint32_t tag, void *mh,
                               xcoll_net_request **out) {
  (void)mh;
  xcoll_net_request *r = calloc(1, sizeof *r);
  r->pipe = rc->pipe;
  r->owner = rc;
  for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
    if (!rc->pending[i]) {
      rc->pending[i] = r;
      break;
    }
  r->data = data;
  r->bytes = bytes;
  r->tag = tag;
  *out = r;
  return XCOLL_SUCCESS;
}
static xcoll_status mock_test(xcoll_net_request *r, int *done, size_t *bytes) {
  *done = 0;
  if (r->pipe == NULL) {
    for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
      if (r->send_owner->pending[i] == r)
        r->send_owner->pending[i] = NULL;
    *done = 1;
    free(r);
    return XCOLL_SUCCESS;
  }
  mock_pipe *pipe = r->pipe;
  pthread_mutex_lock(&pipe->lock);
  mock_msg *m = pipe->head;
  xcoll_status s = XCOLL_SUCCESS;
  if (m) {
    pipe->head = m->next;
    if (!pipe->head)
      pipe->tail = NULL;
    if (m->tag != r->tag || m->bytes > r->bytes)
      s = XCOLL_ERR_PROTOCOL;
    else
      memcpy(r->data, m->data, m->bytes);
    if (bytes)
      *bytes = m->bytes;
    free(m);
    *done = 1;
  } else if (pipe->closed) {
    s = XCOLL_ERR_REMOTE;
  }
  pthread_mutex_unlock(&pipe->lock);
  if (*done || s != XCOLL_SUCCESS) {
    for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
      if (r->owner->pending[i] == r)
        r->owner->pending[i] = NULL;
    free(r);
  }
  return s;
}
static void pipe_release(mock_pipe *pipe) {
  pthread_mutex_lock(&pipe->lock);
  pipe->closed = 1;
  int left = --pipe->refs;
  pthread_mutex_unlock(&pipe->lock);
  if (left == 0) {
    while (pipe->head) {
      mock_msg *m = pipe->head;
      pipe->head = m->next;
      free(m);
    }
    pthread_mutex_destroy(&pipe->lock);
    free(pipe);
  }
}
static void mock_close_send(xcoll_net_send_comm *sc) {
  for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
    free(sc->pending[i]);
  pipe_release(sc->pipe);
  free(sc);
}
static void mock_close_recv(xcoll_net_recv_comm *rc) {
  for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
    free(rc->pending[i]);
  pipe_release(rc->pipe);
  free(rc);
}
static void mock_close_listen(xcoll_net_listen_comm *lc) { free(lc); }

static const xcoll_net_v1 mock_net = {
    .name = "mock",
    .init = mock_init,
    .devices = mock_devices,
    .get_properties = mock_props,
    .listen = mock_listen,
    .connect = mock_connect,
    .accept = mock_accept,
    .reg_mr = mock_reg,
    .dereg_mr = mock_dereg,
    .isend = mock_isend,
    .irecv = mock_irecv,
    .test = mock_test,
    .close_send = mock_close_send,
    .close_recv = mock_close_recv,
    .close_listen = mock_close_listen,
};

/* ---- ranks as threads ---- */

static xcoll_store_server *server;
static int server_port;
static uint64_t next_comm_id = 100;
/* SCENARIO_ABORT: the other ranks stay connected until rank 0 has seen its
 * abort, so that no closed connection fails rank 0's op first. */
static pthread_barrier_t abort_barrier;

typedef struct rank_ctx {
  xcoll_comm comm;
  void *state;
  int world_size;
  int rank;
  uint64_t comm_id;
  int scenario;
  int nchannels; /* what comm_init agreed on */
  int failures;
  xcoll_status fail_status;
  double fail_after_s;
  char message[XCOLL_ERROR_BYTES];
  /* The backend's failed_status (core/backend.h), for a flight recorder
   * dump: while the op is in flight and healthy, and once it has failed. */
  xcoll_status failed_before, failed_after;
} rank_ctx;

/* SCENARIO_CHANNELS: as SCENARIO_ALL, with XCOLL_NCHANNELS unset and rank
 * 0 alone on its host while the others share theirs with 1000 ranks: rank
 * 0 proposes up to 2 channels from its cores, the others 1, and every rank
 * must run the smallest. */
enum { SCENARIO_ALL, SCENARIO_DEATH, SCENARIO_ABORT, SCENARIO_CHANNELS };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float input(int rank, size_t i) {
  return (float)((int)((rank * 131 + i * 7) % 61) - 30);
}

static int run(rank_ctx *c, xcoll_coll_kind kind, const void *sendbuf,
               void *recvbuf, size_t count, xcoll_op op, int root) {
  xcoll_coll_args args = {.kind = kind, .sendbuf = sendbuf, .recvbuf = recvbuf,
                          .count = count, .dtype = XCOLL_FLOAT32, .op = op,
                          .root = root};
  xcoll_backend_op *handle = NULL;
  xcoll_status s =
      xcoll_backend_nccl_like.coll->start(&c->comm, c->state, &args, &handle);
  if (s == XCOLL_SUCCESS)
    s = xcoll_backend_nccl_like.coll->wait(c->state, handle);
  return (int)s;
}

/* Every collective at a few counts, checked element by element. */
static void run_all(rank_ctx *c) {
  const size_t counts[] = {1, 5, 1000, 33333};
  const int P = c->world_size, r = c->rank;
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    size_t n = counts[k];
    float *in = malloc(n * P * sizeof(float));
    float *out = malloc(n * P * sizeof(float));
    /* allreduce sum, in place and out of place */
    for (size_t i = 0; i < n; i++)
      in[i] = input(r, i);
    if (run(c, XCOLL_COLL_ALLREDUCE, in, out, n, XCOLL_SUM, 0))
      c->failures++;
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int q = 0; q < P; q++)
        want += input(q, i);
      if (out[i] != want) {
        c->failures++;
        break;
      }
    }
    if (run(c, XCOLL_COLL_ALLREDUCE, in, in, n, XCOLL_MAX, 0))
      c->failures++;
    for (size_t i = 0; i < n; i++) {
      float want = input(0, i);
      for (int q = 1; q < P; q++)
        want = input(q, i) > want ? input(q, i) : want;
      if (in[i] != want) {
        c->failures++;
        break;
      }
    }
    /* allgather */
    for (size_t i = 0; i < n; i++)
      in[i] = input(r, i);
    if (run(c, XCOLL_COLL_ALLGATHER, in, out, n, XCOLL_SUM, 0))
      c->failures++;
    for (int q = 0; q < P; q++)
      for (size_t i = 0; i < n; i++)
        if (out[q * n + i] != input(q, i)) {
          c->failures++;
          q = P;
          break;
        }
    /* reduce_scatter: block b of rank q's input is input(q, b * n + i) */
    for (size_t i = 0; i < n * P; i++)
      in[i] = input(r, i);
    if (run(c, XCOLL_COLL_REDUCE_SCATTER, in, out, n, XCOLL_SUM, 0))
      c->failures++;
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int q = 0; q < P; q++)
        want += input(q, r * n + i);
      if (out[i] != want) {
        c->failures++;
        break;
      }
    }
    /* broadcast from the last rank, reduce to rank 1 % P */
    int root = P - 1;
    for (size_t i = 0; i < n; i++)
      in[i] = r == root ? input(root, i) : -1;
    if (run(c, XCOLL_COLL_BROADCAST, in, in, n, XCOLL_SUM, root))
      c->failures++;
    for (size_t i = 0; i < n; i++)
      if (in[i] != input(root, i)) {
        c->failures++;
        break;
      }
    root = 1 % P;
    for (size_t i = 0; i < n; i++)
      in[i] = input(r, i);
    if (run(c, XCOLL_COLL_REDUCE, in, out, n, XCOLL_SUM, root))
      c->failures++;
    if (r == root)
      for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < P; q++)
          want += input(q, i);
        if (out[i] != want) {
          c->failures++;
          break;
        }
      }
    free(in);
    free(out);
  }
  /* Several ops in flight, then waited in reverse: issue order is kept. */
  enum { NOPS = 6, N = 4099 };
  float *bufs = malloc(NOPS * N * sizeof(float));
  xcoll_backend_op *handles[NOPS];
  for (int o = 0; o < NOPS; o++) {
    for (size_t i = 0; i < N; i++)
      bufs[o * N + i] = input(r, i + o);
    xcoll_coll_args args = {.kind = XCOLL_COLL_ALLREDUCE,
                            .sendbuf = &bufs[o * N], .recvbuf = &bufs[o * N],
                            .count = N, .dtype = XCOLL_FLOAT32,
                            .op = XCOLL_SUM};
    if (xcoll_backend_nccl_like.coll->start(&c->comm, c->state, &args,
                                            &handles[o]))
      c->failures++;
  }
  for (int o = NOPS - 1; o >= 0; o--) {
    if (xcoll_backend_nccl_like.coll->wait(c->state, handles[o]))
      c->failures++;
    for (size_t i = 0; i < N; i++) {
      float want = 0;
      for (int q = 0; q < P; q++)
        want += input(q, i + o);
      if (bufs[o * N + i] != want) {
        c->failures++;
        break;
      }
    }
  }
  free(bufs);
  xcoll_coll_args barrier = {.kind = XCOLL_COLL_BARRIER};
  (void)barrier;
  if (run(c, XCOLL_COLL_BARRIER, NULL, NULL, 0, XCOLL_SUM, 0))
    c->failures++;
}

#define VICTIM 2

static void *rank_main(void *arg) {
  rank_ctx *c = arg;
  xcoll_comm *comm = &c->comm;
  comm->rank = c->rank;
  comm->world_size = c->world_size;
  comm->magic = XCOLL_COMM_MAGIC;
  comm->comm_id = c->comm_id;
  comm->timeout_s = 20;
  pthread_mutex_init(&comm->error_lock, NULL);
  snprintf(comm->master_addr, sizeof comm->master_addr, "127.0.0.1");
  comm->master_port = server_port;
  snprintf(comm->store_prefix, sizeof comm->store_prefix, "c%llu/",
           (unsigned long long)c->comm_id);
  if (xcoll_store_connect("127.0.0.1", server_port, 20, &comm->store)) {
    c->failures++;
    return NULL;
  }
  if (c->scenario == SCENARIO_CHANNELS)
    comm->local_world_size = c->rank == 0 ? 1 : 1000;
  if (xcoll_backend_nccl_like.comm_init(comm, &c->state) != XCOLL_SUCCESS) {
    snprintf(c->message, sizeof c->message, "%s", comm->last_error);
    c->failures++;
    xcoll_store_close(comm->store);
    return NULL;
  }
  c->nchannels = ((nl_state *)c->state)->nchannels;
  if (c->scenario == SCENARIO_ALL || c->scenario == SCENARIO_CHANNELS) {
    run_all(c);
  } else if (c->scenario == SCENARIO_DEATH) {
    enum { N = 100000 };
    float *buf = calloc(N, sizeof(float));
    if (run(c, XCOLL_COLL_ALLREDUCE, buf, buf, N, XCOLL_SUM, 0))
      c->failures++;
    if (c->rank == VICTIM) {
      /* Die: close every connection without a word. */
      xcoll_backend_nccl_like.comm_destroy(comm, c->state);
      c->state = NULL;
    } else {
      double t0 = now_s();
      xcoll_status s = XCOLL_SUCCESS;
      for (int it = 0; it < 1000 && s == XCOLL_SUCCESS; it++)
        s = run(c, XCOLL_COLL_ALLREDUCE, buf, buf, N, XCOLL_SUM, 0);
      c->fail_status = s;
      c->fail_after_s = now_s() - t0;
      snprintf(c->message, sizeof c->message, "%s", comm->last_error);
      c->failed_after = xcoll_backend_nccl_like.failed_status(c->state);
    }
    free(buf);
  } else if (c->scenario == SCENARIO_ABORT) {
    /* Rank 0 alone starts an allreduce nobody else joins, then aborts. */
    if (c->rank == 0) {
      float x[64] = {0};
      xcoll_coll_args args = {.kind = XCOLL_COLL_ALLREDUCE, .sendbuf = x,
                              .recvbuf = x, .count = 64,
                              .dtype = XCOLL_FLOAT32, .op = XCOLL_SUM};
      xcoll_backend_op *h = NULL;
      xcoll_backend_nccl_like.coll->start(comm, c->state, &args, &h);
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
      int done = 1;
      if (xcoll_backend_nccl_like.coll->test(c->state, h, &done) !=
              XCOLL_SUCCESS ||
          done)
        c->failures++; /* it cannot have completed */
      double t0 = now_s();
      c->failed_before = xcoll_backend_nccl_like.failed_status(c->state);
      xcoll_backend_nccl_like.comm_abort(comm, c->state);
      /* Before the wait: a dump taken now shows the op failed. */
      c->failed_after = xcoll_backend_nccl_like.failed_status(c->state);
      c->fail_status = xcoll_backend_nccl_like.coll->wait(c->state, h);
      c->fail_after_s = now_s() - t0;
    }
    pthread_barrier_wait(&abort_barrier);
  }
  if (c->state)
    xcoll_backend_nccl_like.comm_destroy(comm, c->state);
  xcoll_store_close(comm->store);
  pthread_mutex_destroy(&comm->error_lock);
  return NULL;
}

static rank_ctx *run_world(int world_size, int scenario) {
  rank_ctx *ctx = calloc((size_t)world_size, sizeof *ctx);
  pthread_t *threads = calloc((size_t)world_size, sizeof *threads);
  uint64_t id = next_comm_id++;
  for (int r = 0; r < world_size; r++) {
    ctx[r].rank = r;
    ctx[r].world_size = world_size;
    ctx[r].comm_id = id;
    ctx[r].scenario = scenario;
    pthread_create(&threads[r], NULL, rank_main, &ctx[r]);
  }
  for (int r = 0; r < world_size; r++)
    pthread_join(threads[r], NULL);
  free(threads);
  return ctx;
}

static void check_all(const char *proto, const char *nchannels, int P) {
  setenv("XCOLL_PROTO", proto, 1);
  setenv("XCOLL_NCHANNELS", nchannels, 1);
  setenv("XCOLL_BUFFSIZE", "2K", 1);
  rank_ctx *ctx = run_world(P, SCENARIO_ALL);
  for (int r = 0; r < P; r++) {
    if (ctx[r].failures)
      fprintf(stderr, "P=%d proto %s nchannels %s rank %d: %d failures %s\n",
              P, proto, nchannels, r, ctx[r].failures, ctx[r].message);
    assert_int_equal(ctx[r].failures, 0);
  }
  free(ctx);
}

static void test_simple(void **unused) {
  (void)unused;
  for (int P = 2; P <= 4; P++) {
    check_all("simple", "1", P);
    check_all("simple", "3", P);
  }
}

static void test_ll(void **unused) {
  (void)unused;
  for (int P = 2; P <= 4; P++) {
    check_all("ll", "1", P);
    check_all("ll", "3", P);
  }
}

/* Ranks whose cores allow different channel counts agree on the smallest
 * (nccl_like.c: agree_channels), and run correct collectives with it; an
 * explicit XCOLL_NCHANNELS on every rank is kept as set. */
static void test_channels_agreed(void **unused) {
  (void)unused;
  setenv("XCOLL_PROTO", "simple", 1);
  setenv("XCOLL_BUFFSIZE", "2K", 1);
  unsetenv("XCOLL_NCHANNELS");
  rank_ctx *ctx = run_world(3, SCENARIO_CHANNELS);
  for (int r = 0; r < 3; r++) {
    if (ctx[r].failures)
      fprintf(stderr, "rank %d: %d failures %s\n", r, ctx[r].failures,
              ctx[r].message);
    assert_int_equal(ctx[r].failures, 0);
    assert_int_equal(ctx[r].nchannels, 1);
  }
  free(ctx);
  setenv("XCOLL_NCHANNELS", "3", 1);
  ctx = run_world(3, SCENARIO_CHANNELS);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(ctx[r].failures, 0);
    assert_int_equal(ctx[r].nchannels, 3);
  }
  free(ctx);
}

static void test_death(void **unused) {
  (void)unused;
  setenv("XCOLL_PROTO", "simple", 1);
  setenv("XCOLL_NCHANNELS", "2", 1);
  setenv("XCOLL_BUFFSIZE", "64K", 1);
  rank_ctx *ctx = run_world(4, SCENARIO_DEATH);
  for (int r = 0; r < 4; r++) {
    if (r == VICTIM)
      continue;
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", r,
            xcoll_strerror(ctx[r].fail_status), ctx[r].fail_after_s,
            ctx[r].message);
    assert_int_equal(ctx[r].fail_status, XCOLL_ERR_REMOTE);
    assert_int_equal(ctx[r].failed_after, XCOLL_ERR_REMOTE);
    assert_true(ctx[r].fail_after_s < 5.0);
    assert_non_null(strstr(ctx[r].message, "rank 2"));
  }
  free(ctx);
}

static void test_abort(void **unused) {
  (void)unused;
  pthread_barrier_init(&abort_barrier, NULL, 3);
  rank_ctx *ctx = run_world(3, SCENARIO_ABORT);
  pthread_barrier_destroy(&abort_barrier);
  assert_int_equal(ctx[0].failures, 0);
  assert_int_equal(ctx[0].fail_status, XCOLL_ERR_ABORTED);
  assert_int_equal(ctx[0].failed_before, XCOLL_SUCCESS);
  assert_int_equal(ctx[0].failed_after, XCOLL_ERR_ABORTED);
  assert_true(ctx[0].fail_after_s < 2.0);
  free(ctx);
}

int main(void) {
  if (xcoll_store_server_start("127.0.0.1", 0, &server, &server_port)) {
    fprintf(stderr, "cannot start a store server: %s\n", xcoll_last_error());
    return 1;
  }
  nl_net_override = &mock_net;
  /* The ranks are threads of this process, which the shm transport would
   * connect in memory: this test is of the net transport's proxy over the
   * mock plugin. */
  setenv("XCOLL_SHM_DISABLE", "1", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_simple),
      cmocka_unit_test(test_ll),
      cmocka_unit_test(test_channels_agreed),
      cmocka_unit_test(test_death),
      cmocka_unit_test(test_abort),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  xcoll_store_server_stop(server);
  return failed;
}
