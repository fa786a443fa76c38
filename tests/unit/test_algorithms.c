/* test_algorithms.c - every host-driven algorithm of core/algorithms/, run
 * in one process with one thread per rank over an in-memory fake p2p backend,
 * for P in {1,2,3,4,5,7,8}, several counts, dtypes, ops, in place and out of
 * place, small and default chunk sizes, and two matching modes, against a
 * reference computed here with scalar code.
 *
 * The fake backend (a "mailbox") keeps per (src, dst) FIFO queues of posted
 * sends and receives under one mutex and matches them in posting order,
 * failing the run on a tag or size mismatch exactly as p2p.h requires. In
 * eager mode a send completes when posted (like a socket with room in its
 * buffer); in synchronous mode only once a receive has matched it, which
 * catches algorithms that wait for a send whose receive the peer has not
 * posted yet (deadlock on a rendezvous transport). Every wait has a 30 s
 * deadline, so a deadlock fails the test instead of hanging it.
 *
 * Exactness: inputs are chosen so that every float result is exact whatever
 * the reduction order (sums of quarters, products of powers of two, min/max),
 * and results are compared bit for bit; integer sums and products use
 * full-range values, so they wrap, and the reference wraps modulo 2^n too.
 * test_float_error_bounds checks random inputs against the error bounds the
 * algorithm files state; test_fingerprint_exchange, that every rank learns
 * of a mismatched rooted call from the exchange's messages alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "fingerprint_exchange.h"

#define MAX_RANKS 8
#define GUARD_BYTES 16
#define GUARD_BYTE 0xA5
#define WAIT_DEADLINE_S 30

/* ---- the fake p2p backend ---- */

struct xcoll_p2p_request {
  int is_send;
  int done;
  xcoll_status status;
  int src, dst;
  uint64_t tag;
  size_t bytes;
  void *recv_buf;        /* receives */
  const void *send_data; /* sends: the sender's buffer or an eager copy */
  void *eager_copy;      /* owned copy in eager mode */
  int matched;           /* sends: consumed by a receive */
  struct xcoll_p2p_request *next;
};

typedef struct request_queue {
  struct xcoll_p2p_request *head, *tail;
} request_queue;

typedef struct fake_world {
  int world_size;
  int synchronous;
  uint64_t seq;
  pthread_mutex_t lock;
  /* One per rank, signalled when one of its requests completes (a rank
   * waits on its own requests only): a broadcast to every rank on every
   * post woke 7 threads for nothing at P=8, and made this test take minutes
   * under ThreadSanitizer. */
  pthread_cond_t cond[MAX_RANKS];
  request_queue sends[MAX_RANKS][MAX_RANKS]; /* [src][dst] */
  request_queue recvs[MAX_RANKS][MAX_RANKS];
  int failed;
  char failure[256];
  size_t messages;
} fake_world;

typedef struct fake_rank {
  fake_world *world;
  int rank;
} fake_rank;

static void queue_push(request_queue *q, struct xcoll_p2p_request *r) {
  r->next = NULL;
  if (q->tail)
    q->tail->next = r;
  else
    q->head = r;
  q->tail = r;
}

static struct xcoll_p2p_request *queue_pop(request_queue *q) {
  struct xcoll_p2p_request *r = q->head;
  if (r) {
    q->head = r->next;
    if (!q->head)
      q->tail = NULL;
  }
  return r;
}

static void world_fail(fake_world *w, const char *fmt, ...) {
  if (!w->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->failure, sizeof w->failure, fmt, ap);
    va_end(ap);
  }
  w->failed = 1;
  for (int r = 0; r < w->world_size; r++)
    pthread_cond_broadcast(&w->cond[r]);
}

/* Match (src -> dst) in posting order. Called with the lock held. */
static void match(fake_world *w, int src, int dst) {
  request_queue *sq = &w->sends[src][dst], *rq = &w->recvs[src][dst];
  int matched = 0;
  while (sq->head && rq->head) {
    matched = 1;
    struct xcoll_p2p_request *send = queue_pop(sq), *recv = queue_pop(rq);
    if (send->tag != recv->tag || send->bytes != recv->bytes) {
      world_fail(w,
                 "protocol: %d->%d send tag %#llx %zu B, receive tag %#llx "
                 "%zu B",
                 src, dst, (unsigned long long)send->tag, send->bytes,
                 (unsigned long long)recv->tag, recv->bytes);
      recv->status = send->status = XCOLL_ERR_PROTOCOL;
    } else if (send->bytes) {
      memcpy(recv->recv_buf, send->send_data, send->bytes);
    }
    w->messages++;
    recv->done = 1;
    send->matched = 1;
    if (send->eager_copy) { /* eager: the request was already released */
      free(send->eager_copy);
      free(send);
    } else {
      send->done = 1;
    }
  }
  if (matched) {
    pthread_cond_broadcast(&w->cond[src]);
    pthread_cond_broadcast(&w->cond[dst]);
  }
}

static xcoll_status check_post(fake_rank *self, int peer, uint64_t tag,
                               const void *buf, size_t bytes) {
  fake_world *w = self->world;
  if (peer < 0 || peer >= w->world_size || peer == self->rank) {
    world_fail(w, "rank %d posted to bad peer %d", self->rank, peer);
    return XCOLL_ERR_INVALID_ARGUMENT;
  }
  if (!buf) {
    world_fail(w, "rank %d posted a NULL buffer (%zu B)", self->rank, bytes);
    return XCOLL_ERR_INVALID_ARGUMENT;
  }
  if ((tag >> 32) != (w->seq & 0xffffffffu) ||
      (tag & 0xffffffffu) >= (1u << 24)) {
    world_fail(w, "rank %d used tag %#llx for seq %llu", self->rank,
               (unsigned long long)tag, (unsigned long long)w->seq);
    return XCOLL_ERR_INVALID_ARGUMENT;
  }
  return XCOLL_SUCCESS;
}

static xcoll_status fake_isend(void *state, int peer, uint64_t tag,
                               const void *buf, size_t bytes,
                               xcoll_p2p_request **request) {
  fake_rank *self = state;
  fake_world *w = self->world;
  pthread_mutex_lock(&w->lock);
  xcoll_status status = check_post(self, peer, tag, buf, bytes);
  if (status != XCOLL_SUCCESS) {
    pthread_mutex_unlock(&w->lock);
    return status;
  }
  struct xcoll_p2p_request *r = calloc(1, sizeof *r);
  r->is_send = 1;
  r->src = self->rank, r->dst = peer, r->tag = tag, r->bytes = bytes;
  if (w->synchronous) {
    r->send_data = buf;
    *request = r;
  } else {
    /* Eager: the queued message owns a copy; the caller gets a separate,
     * already completed request. */
    r->eager_copy = malloc(bytes ? bytes : 1);
    memcpy(r->eager_copy, buf, bytes);
    r->send_data = r->eager_copy;
    struct xcoll_p2p_request *done = calloc(1, sizeof *done);
    done->is_send = 1;
    done->done = 1;
    *request = done;
  }
  queue_push(&w->sends[self->rank][peer], r);
  match(w, self->rank, peer);
  pthread_mutex_unlock(&w->lock);
  return XCOLL_SUCCESS;
}

static xcoll_status fake_irecv(void *state, int peer, uint64_t tag, void *buf,
                               size_t bytes, xcoll_p2p_request **request) {
  fake_rank *self = state;
  fake_world *w = self->world;
  pthread_mutex_lock(&w->lock);
  xcoll_status status = check_post(self, peer, tag, buf, bytes);
  if (status != XCOLL_SUCCESS) {
    pthread_mutex_unlock(&w->lock);
    return status;
  }
  struct xcoll_p2p_request *r = calloc(1, sizeof *r);
  r->src = peer, r->dst = self->rank, r->tag = tag, r->bytes = bytes;
  r->recv_buf = buf;
  *request = r;
  queue_push(&w->recvs[peer][self->rank], r);
  match(w, peer, self->rank);
  pthread_mutex_unlock(&w->lock);
  return XCOLL_SUCCESS;
}

static xcoll_status fake_wait(void *state, xcoll_p2p_request **requests,
                              int count) {
  fake_rank *self = state;
  fake_world *w = self->world;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_DEADLINE_S;
  xcoll_status status = XCOLL_SUCCESS;
  pthread_mutex_lock(&w->lock);
  for (int i = 0; i < count; i++) {
    struct xcoll_p2p_request *r = requests[i];
    if (!r)
      continue;
    while (!r->done && !w->failed) {
      if (pthread_cond_timedwait(&w->cond[self->rank], &w->lock, &deadline) ==
          ETIMEDOUT) {
        world_fail(w, "rank %d: wait timed out (deadlock?) on a %s with %d",
                   self->rank, r->is_send ? "send" : "receive",
                   r->is_send ? r->dst : r->src);
      }
    }
    if (!r->done) {
      status = XCOLL_ERR_TIMEOUT; /* still queued: leaked on purpose */
    } else {
      if (r->status != XCOLL_SUCCESS)
        status = r->status;
      free(r);
    }
    requests[i] = NULL;
  }
  if (w->failed && status == XCOLL_SUCCESS)
    status = XCOLL_ERR_REMOTE;
  pthread_mutex_unlock(&w->lock);
  return status;
}

static xcoll_status fake_test(void *state, xcoll_p2p_request *request,
                              int *done) {
  fake_rank *self = state;
  pthread_mutex_lock(&self->world->lock);
  *done = request->done;
  pthread_mutex_unlock(&self->world->lock);
  if (*done)
    free(request);
  return XCOLL_SUCCESS;
}

static const xcoll_p2p_ops fake_p2p = {.isend = fake_isend,
                                       .irecv = fake_irecv,
                                       .wait = fake_wait,
                                       .test = fake_test};
static const xcoll_backend fake_backend = {
    .abi_version = XCOLL_BACKEND_ABI_VERSION,
    .name = "fake",
    .description = "in-memory mailbox for tests",
    .p2p = &fake_p2p,
};

/* ---- running one collective on P threads ---- */

typedef struct rank_run {
  fake_rank state;
  xcoll_comm comm;
  xcoll_coll_args args;
  xcoll_algorithm_fn run;
  xcoll_status status;
  atomic_int *arrived; /* barrier test */
  int barrier_rounds;
  int barrier_ok;
} rank_run;

static void *rank_main(void *arg) {
  rank_run *rr = arg;
  if (rr->args.kind == XCOLL_COLL_BARRIER) {
    rr->barrier_ok = 1;
    for (int round = 0; round < rr->barrier_rounds; round++) {
      atomic_fetch_add(rr->arrived, 1);
      rr->status = rr->run(&rr->comm, &rr->args);
      if (rr->status != XCOLL_SUCCESS)
        return NULL;
      /* Everyone must have arrived at this round before anyone leaves it. */
      if (atomic_load(rr->arrived) < (round + 1) * rr->comm.world_size)
        rr->barrier_ok = 0;
      rr->args.seq++;
      /* Next round's tags use the next seq; all ranks advance together. */
    }
    return NULL;
  }
  rr->status = rr->run(&rr->comm, &rr->args);
  return NULL;
}

static fake_world world;

static void world_reset(int P, int synchronous, uint64_t seq) {
  memset(&world, 0, sizeof world);
  world.world_size = P;
  world.synchronous = synchronous;
  world.seq = seq;
  pthread_mutex_init(&world.lock, NULL);
  for (int r = 0; r < MAX_RANKS; r++)
    pthread_cond_init(&world.cond[r], NULL);
}

/* Run fn on P threads with per-rank args; returns 1 when every rank returned
 * XCOLL_SUCCESS, no protocol error occurred and no message is left unmatched.
 */
static int run_ranks(int P, xcoll_algorithm_fn fn, xcoll_coll_args *args,
                     size_t chunk_bytes, int synchronous, rank_run *runs,
                     char *why, size_t why_bytes) {
  world_reset(P, synchronous, args[0].seq);
  pthread_t threads[MAX_RANKS];
  for (int r = 0; r < P; r++) {
    rank_run *rr = &runs[r];
    rr->state.world = &world;
    rr->state.rank = r;
    memset(&rr->comm, 0, sizeof rr->comm);
    rr->comm.magic = XCOLL_COMM_MAGIC;
    rr->comm.rank = r;
    rr->comm.world_size = P;
    rr->comm.comm_id = 7;
    rr->comm.timeout_s = WAIT_DEADLINE_S;
    rr->comm.options.chunk_bytes = chunk_bytes;
    rr->comm.backend = &fake_backend;
    rr->comm.backend_state = &rr->state;
    pthread_mutex_init(&rr->comm.error_lock, NULL);
    rr->args = args[r];
    rr->run = fn;
    rr->status = XCOLL_ERR_INTERNAL;
    pthread_create(&threads[r], NULL, rank_main, rr);
  }
  for (int r = 0; r < P; r++)
    pthread_join(threads[r], NULL);
  int ok = !world.failed;
  if (world.failed)
    snprintf(why, why_bytes, "%s", world.failure);
  for (int r = 0; r < P && ok; r++)
    if (runs[r].status != XCOLL_SUCCESS) {
      snprintf(why, why_bytes, "rank %d returned status %d", r,
               (int)runs[r].status);
      ok = 0;
    }
  for (int s = 0; s < P && ok; s++)
    for (int d = 0; d < P && ok; d++)
      if (world.sends[s][d].head || world.recvs[s][d].head) {
        snprintf(why, why_bytes, "unmatched %s left from %d to %d",
                 world.sends[s][d].head ? "send" : "receive", s, d);
        ok = 0;
      }
  for (int r = 0; r < P; r++)
    pthread_mutex_destroy(&runs[r].comm.error_lock);
  pthread_mutex_destroy(&world.lock);
  for (int r = 0; r < MAX_RANKS; r++)
    pthread_cond_destroy(&world.cond[r]);
  return ok;
}

/* ---- inputs and the reference ---- */

static const xcoll_datatype test_dtypes[] = {
    XCOLL_INT32,    XCOLL_FLOAT32, XCOLL_FLOAT64, XCOLL_FLOAT16,
    XCOLL_BFLOAT16, XCOLL_INT8,    XCOLL_UINT64};
#define NUM_TEST_DTYPES (sizeof test_dtypes / sizeof test_dtypes[0])
static const int test_sizes[] = {1, 2, 3, 4, 5, 7, 8};
#define NUM_TEST_SIZES (sizeof test_sizes / sizeof test_sizes[0])

static size_t dtype_size(xcoll_datatype d) {
  switch (d) {
  case XCOLL_INT8:
  case XCOLL_UINT8:
    return 1;
  case XCOLL_FLOAT16:
  case XCOLL_BFLOAT16:
    return 2;
  case XCOLL_INT32:
  case XCOLL_UINT32:
  case XCOLL_FLOAT32:
    return 4;
  default:
    return 8;
  }
}

static int is_float(xcoll_datatype d) {
  return d == XCOLL_FLOAT16 || d == XCOLL_BFLOAT16 || d == XCOLL_FLOAT32 ||
         d == XCOLL_FLOAT64;
}

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Input of rank r at element i: an integer bit pattern (full range, so sums
 * and products wrap) or an exactly representable float (see file comment). */
static uint64_t input_bits(xcoll_datatype d, xcoll_op op, int r, size_t i) {
  uint64_t h = mix(((uint64_t)r << 40) ^ i ^ ((uint64_t)d << 56));
  if (!is_float(d))
    return h;
  double v;
  if (op == XCOLL_SUM || op == XCOLL_AVG)
    v = ((double)(h % 17) - 8.0) / 4.0;
  else if (op == XCOLL_PROD) {
    static const double factors[] = {1, -1, 2, -2, 0.5, -0.5};
    v = factors[h % 6];
  } else
    v = ((double)(h % 201) - 100.0) / 8.0;
  return (uint64_t)(int64_t)(v * 1024.0); /* decoded by input_value */
}

static double float_input(uint64_t bits) {
  return (double)(int64_t)bits / 1024.0;
}

static void store_float(xcoll_datatype d, void *buf, size_t i, double v) {
  switch (d) {
  case XCOLL_FLOAT16:
    ((uint16_t *)buf)[i] = xcoll_float_to_half((float)v);
    break;
  case XCOLL_BFLOAT16:
    ((uint16_t *)buf)[i] = xcoll_float_to_bfloat16((float)v);
    break;
  case XCOLL_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  default:
    ((double *)buf)[i] = v;
    break;
  }
}

static void store_int(xcoll_datatype d, void *buf, size_t i, uint64_t v) {
  switch (d) {
  case XCOLL_INT8:
  case XCOLL_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case XCOLL_INT32:
  case XCOLL_UINT32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  default:
    ((uint64_t *)buf)[i] = v;
    break;
  }
}

static void fill_input(xcoll_datatype d, xcoll_op op, int r, void *buf,
                       size_t first, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint64_t bits = input_bits(d, op, r, first + i);
    if (is_float(d))
      store_float(d, buf, i, float_input(bits));
    else
      store_int(d, buf, i, bits);
  }
}

/* Sign-extended value of an integer pattern in dtype d, for min/max. */
static int64_t as_signed(xcoll_datatype d, uint64_t v) {
  switch (d) {
  case XCOLL_INT8:
    return (int8_t)(uint8_t)v;
  case XCOLL_INT32:
    return (int32_t)(uint32_t)v;
  default:
    return (int64_t)v;
  }
}

/* The reduction over ranks 0..P-1 of element i, stored into out[k]. */
static void reference_element(xcoll_datatype d, xcoll_op op, int P, size_t i,
                              void *out, size_t k) {
  if (is_float(d)) {
    double acc = float_input(input_bits(d, op, 0, i));
    for (int r = 1; r < P; r++) {
      double x = float_input(input_bits(d, op, r, i));
      if (op == XCOLL_SUM || op == XCOLL_AVG)
        acc += x;
      else if (op == XCOLL_PROD)
        acc *= x;
      else if (op == XCOLL_MIN)
        acc = x < acc ? x : acc;
      else
        acc = x > acc ? x : acc;
    }
    if (op == XCOLL_AVG)
      acc /= P;
    store_float(d, out, k, acc);
    return;
  }
  uint64_t acc = input_bits(d, op, 0, i);
  for (int r = 1; r < P; r++) {
    uint64_t x = input_bits(d, op, r, i);
    if (op == XCOLL_SUM)
      acc += x; /* mod 2^64, then truncated to the width: mod 2^n */
    else if (op == XCOLL_PROD)
      acc *= x;
    else if (op == XCOLL_BAND)
      acc &= x;
    else if (op == XCOLL_BOR)
      acc |= x;
    else if (op == XCOLL_BXOR)
      acc ^= x;
    else if (d == XCOLL_UINT64 || d == XCOLL_UINT8 || d == XCOLL_UINT32) {
      uint64_t mask = d == XCOLL_UINT8    ? 0xff
                      : d == XCOLL_UINT32 ? 0xffffffffu
                                          : ~(uint64_t)0;
      uint64_t a = acc & mask, b = x & mask;
      acc = op == XCOLL_MIN ? (b < a ? b : a) : (b > a ? b : a);
    } else {
      int64_t a = as_signed(d, acc), b = as_signed(d, x);
      acc = (uint64_t)(op == XCOLL_MIN ? (b < a ? b : a) : (b > a ? b : a));
    }
  }
  store_int(d, out, k, acc);
}

/* ---- one case: build buffers, run, compare ---- */

typedef struct test_case {
  xcoll_coll_kind kind;
  xcoll_algorithm_fn fn;
  const char *name;
  int P;
  size_t count;
  xcoll_datatype dtype;
  xcoll_op op;
  int root;
  int in_place;
  size_t chunk_bytes;
  int synchronous;
} test_case;

static uint64_t next_seq = 1;
static int cases_run;

static void describe(const test_case *c, char *out, size_t out_bytes) {
  snprintf(out, out_bytes,
           "%s P=%d count=%zu dtype=%d op=%d root=%d in_place=%d chunk=%zu "
           "sync=%d",
           c->name, c->P, c->count, (int)c->dtype, (int)c->op, c->root,
           c->in_place, c->chunk_bytes, c->synchronous);
}

static void *guarded(size_t bytes) {
  unsigned char *p = malloc(bytes + GUARD_BYTES);
  assert_non_null(p);
  memset(p, 0x5A, bytes); /* garbage the algorithm must overwrite */
  memset(p + bytes, GUARD_BYTE, GUARD_BYTES);
  return p;
}

static int guard_intact(const void *buf, size_t bytes) {
  const unsigned char *p = (const unsigned char *)buf + bytes;
  for (int i = 0; i < GUARD_BYTES; i++)
    if (p[i] != GUARD_BYTE)
      return 0;
  return 1;
}

static void run_case(const test_case *c) {
  const int P = c->P;
  const size_t es = dtype_size(c->dtype), n = c->count;
  /* Elements of each rank's send and receive buffers. */
  size_t send_elems = n, recv_elems = n;
  if (c->kind == XCOLL_COLL_ALLGATHER)
    recv_elems = (size_t)P * n;
  if (c->kind == XCOLL_COLL_REDUCE_SCATTER)
    send_elems = (size_t)P * n;
  xcoll_coll_args args[MAX_RANKS];
  void *send_alloc[MAX_RANKS], *recv_alloc[MAX_RANKS];
  rank_run runs[MAX_RANKS];
  uint64_t seq = next_seq++;
  char text[256], why[256] = "";

  for (int r = 0; r < P; r++) {
    xcoll_coll_args *a = &args[r];
    memset(a, 0, sizeof *a);
    a->kind = c->kind, a->count = n, a->dtype = c->dtype, a->op = c->op;
    a->root = c->root, a->seq = seq;
    send_alloc[r] = recv_alloc[r] = NULL;
    int is_root = r == c->root;
    switch (c->kind) {
    case XCOLL_COLL_ALLREDUCE:
    case XCOLL_COLL_REDUCE:
      if (c->kind == XCOLL_COLL_REDUCE && !is_root) {
        send_alloc[r] = guarded(n * es);
        fill_input(c->dtype, c->op, r, send_alloc[r], 0, n);
        a->sendbuf = send_alloc[r];
        a->recvbuf = NULL; /* recvbuf is unused off the root */
        break;
      }
      recv_alloc[r] = guarded(n * es);
      if (c->in_place) {
        fill_input(c->dtype, c->op, r, recv_alloc[r], 0, n);
        a->sendbuf = recv_alloc[r];
      } else {
        send_alloc[r] = guarded(n * es);
        fill_input(c->dtype, c->op, r, send_alloc[r], 0, n);
        a->sendbuf = send_alloc[r];
      }
      a->recvbuf = recv_alloc[r];
      break;
    case XCOLL_COLL_ALLGATHER:
      recv_alloc[r] = guarded(recv_elems * es);
      a->recvbuf = recv_alloc[r];
      if (c->in_place) {
        char *mine = (char *)recv_alloc[r] + (size_t)r * n * es;
        fill_input(c->dtype, c->op, r, mine, (size_t)r * n, n);
        a->sendbuf = mine;
      } else {
        send_alloc[r] = guarded(n * es);
        fill_input(c->dtype, c->op, r, send_alloc[r], (size_t)r * n, n);
        a->sendbuf = send_alloc[r];
      }
      break;
    case XCOLL_COLL_REDUCE_SCATTER:
      send_alloc[r] = guarded(send_elems * es);
      fill_input(c->dtype, c->op, r, send_alloc[r], 0, send_elems);
      a->sendbuf = send_alloc[r];
      if (c->in_place) {
        a->recvbuf = (char *)send_alloc[r] + (size_t)r * n * es;
      } else {
        recv_alloc[r] = guarded(n * es);
        a->recvbuf = recv_alloc[r];
      }
      break;
    case XCOLL_COLL_BROADCAST:
      recv_alloc[r] = guarded(n * es);
      a->recvbuf = recv_alloc[r];
      if (is_root) {
        if (c->in_place) {
          fill_input(c->dtype, c->op, r, recv_alloc[r], 0, n);
          a->sendbuf = recv_alloc[r];
        } else {
          send_alloc[r] = guarded(n * es);
          fill_input(c->dtype, c->op, r, send_alloc[r], 0, n);
          a->sendbuf = send_alloc[r];
        }
      } else {
        a->sendbuf = NULL; /* read on the root only */
      }
      break;
    default:
      break;
    }
  }

  int ok = run_ranks(P, c->fn, args, c->chunk_bytes, c->synchronous, runs, why,
                     sizeof why);
  /* Expected result of each rank, then a bitwise comparison. */
  size_t expected_elems = send_elems > recv_elems ? send_elems : recv_elems;
  void *expected = malloc((expected_elems ? expected_elems : 1) * es);
  for (int r = 0; r < P && ok; r++) {
    const void *result = args[r].recvbuf;
    size_t elems = recv_elems, first = 0;
    switch (c->kind) {
    case XCOLL_COLL_ALLREDUCE:
      for (size_t i = 0; i < n; i++)
        reference_element(c->dtype, c->op, P, i, expected, i);
      break;
    case XCOLL_COLL_REDUCE:
      if (r != c->root) {
        elems = 0;
        break;
      }
      for (size_t i = 0; i < n; i++)
        reference_element(c->dtype, c->op, P, i, expected, i);
      break;
    case XCOLL_COLL_REDUCE_SCATTER:
      first = (size_t)r * n;
      for (size_t i = 0; i < n; i++)
        reference_element(c->dtype, c->op, P, first + i, expected, i);
      break;
    case XCOLL_COLL_ALLGATHER:
      for (int q = 0; q < P; q++)
        fill_input(c->dtype, c->op, q, (char *)expected + (size_t)q * n * es,
                   (size_t)q * n, n);
      break;
    case XCOLL_COLL_BROADCAST:
      fill_input(c->dtype, c->op, c->root, expected, 0, n);
      break;
    default:
      elems = 0;
    }
    if (elems && memcmp(result, expected, elems * es) != 0) {
      size_t bad = 0;
      while (memcmp((const char *)result + bad * es,
                    (char *)expected + bad * es, es) == 0)
        bad++;
      snprintf(why, sizeof why,
               "rank %d differs from the reference at "
               "element %zu of %zu",
               r, bad, elems);
      ok = 0;
    }
  }
  for (int r = 0; r < P; r++) {
    if (ok && send_alloc[r] && !guard_intact(send_alloc[r], send_elems * es)) {
      snprintf(why, sizeof why, "rank %d: write past its send buffer", r);
      ok = 0;
    }
    if (ok && recv_alloc[r] && !guard_intact(recv_alloc[r], recv_elems * es)) {
      snprintf(why, sizeof why, "rank %d: write past its receive buffer", r);
      ok = 0;
    }
    /* Out of place, the input must be left as it was. */
    if (ok && !c->in_place && send_alloc[r] &&
        c->kind != XCOLL_COLL_BROADCAST) {
      size_t first = c->kind == XCOLL_COLL_ALLGATHER ? (size_t)r * n : 0;
      fill_input(c->dtype, c->op, r, expected, first, send_elems);
      if (memcmp(send_alloc[r], expected, send_elems * es) != 0) {
        snprintf(why, sizeof why, "rank %d: sendbuf was modified", r);
        ok = 0;
      }
    }
    free(send_alloc[r]);
    free(recv_alloc[r]);
  }
  free(expected);
  cases_run++;
  if (!ok) {
    describe(c, text, sizeof text);
    print_error("FAILED %s: %s\n", text, why);
    fail();
  }
}

/* The counts of the brief: 0, 1, 7, 1021 and P*1000+3 elements. */
static size_t test_count(int index, int P) {
  static const size_t fixed[] = {0, 1, 7, 1021};
  return index < 4 ? fixed[index] : (size_t)P * 1000 + 3;
}

/* Chunk sizes vary with the case so that both tiny chunks (many pipelined
 * chunks, a partial last one) and the default are exercised. */
static size_t pick_chunk_bytes(size_t count, unsigned salt) {
  if (salt % 3 == 0)
    return 0; /* default, 512 KiB */
  if (count <= 1021)
    return 64;
  return 1000; /* not a multiple of any element size but 1, 2, 4, 8... */
}

/* Sanitizer builds run every ALGORITHMS_CASE_STRIDE-th case of the matrix
 * (tests/CMakeLists.txt); the normal build runs all of them. */
#ifndef ALGORITHMS_CASE_STRIDE
#define ALGORITHMS_CASE_STRIDE 1
#endif

static void run_matrix(xcoll_coll_kind kind, xcoll_algorithm_fn fn,
                       const char *name, int with_ops) {
  unsigned salt = 0;
  for (size_t p = 0; p < NUM_TEST_SIZES; p++) {
    int P = test_sizes[p];
    for (int ci = 0; ci < 5; ci++) {
      size_t count = test_count(ci, P);
      for (size_t di = 0; di < NUM_TEST_DTYPES; di++) {
        xcoll_datatype dtype = test_dtypes[di];
        for (int op = 0; op < (with_ops ? XCOLL_NUM_OPS : 1); op++) {
          if ((op == XCOLL_AVG && !is_float(dtype)) ||
              ((op == XCOLL_BAND || op == XCOLL_BOR || op == XCOLL_BXOR) &&
               is_float(dtype)))
            continue; /* rejected before any algorithm runs */
          for (int in_place = 0; in_place < 2; in_place++) {
            salt++;
            if (salt % ALGORITHMS_CASE_STRIDE != 0)
              continue;
            test_case c = {kind,
                           fn,
                           name,
                           P,
                           count,
                           dtype,
                           (xcoll_op)op,
                           (int)(salt % (unsigned)P),
                           in_place,
                           pick_chunk_bytes(count, salt),
                           (int)(salt / 2 % 2)};
            run_case(&c);
          }
        }
      }
    }
  }
}

static void test_allreduce_ring(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_ALLREDUCE, xcoll_allreduce_ring, "allreduce_ring", 1);
}
static void test_allreduce_recursive_doubling(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_ALLREDUCE, xcoll_allreduce_recursive_doubling,
             "allreduce_recursive_doubling", 1);
}
static void test_allreduce_rabenseifner(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_ALLREDUCE, xcoll_allreduce_rabenseifner,
             "allreduce_rabenseifner", 1);
}
static void test_allgather_ring(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_ALLGATHER, xcoll_allgather_ring, "allgather_ring", 0);
}
static void test_reduce_scatter_ring(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_REDUCE_SCATTER, xcoll_reduce_scatter_ring,
             "reduce_scatter_ring", 1);
}
static void test_broadcast_binomial(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_BROADCAST, xcoll_broadcast_binomial,
             "broadcast_binomial", 0);
}
static void test_broadcast_chain(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_BROADCAST, xcoll_broadcast_chain, "broadcast_chain", 0);
}
static void test_reduce_binomial(void **state) {
  (void)state;
  run_matrix(XCOLL_COLL_REDUCE, xcoll_reduce_binomial, "reduce_binomial", 1);
}

static void test_barrier_dissemination(void **state) {
  (void)state;
  for (size_t p = 0; p < NUM_TEST_SIZES; p++) {
    for (int synchronous = 0; synchronous < 2; synchronous++) {
      int P = test_sizes[p];
      atomic_int arrived = 0;
      xcoll_coll_args args[MAX_RANKS];
      rank_run runs[MAX_RANKS];
      char why[256] = "";
      memset(args, 0, sizeof args);
      memset(runs, 0, sizeof runs);
      uint64_t seq = next_seq;
      for (int r = 0; r < P; r++) {
        args[r].kind = XCOLL_COLL_BARRIER;
        args[r].seq = seq;
        runs[r].arrived = &arrived;
        runs[r].barrier_rounds = 1;
      }
      next_seq++;
      /* run_ranks copies args into runs; arrived/rounds survive there. */
      int ok = run_ranks(P, xcoll_barrier_dissemination, args, 0, synchronous,
                         runs, why, sizeof why);
      if (!ok)
        print_error("barrier P=%d: %s\n", P, why);
      assert_true(ok);
      for (int r = 0; r < P; r++)
        assert_true(runs[r].barrier_ok);
      assert_int_equal(atomic_load(&arrived), P);
    }
  }
}

/* Random floats: the error of each algorithm stays within the bound its
 * file states for its reduction order, and (for allreduce) every rank holds
 * the same bits. */
static void check_float_bounds(xcoll_algorithm_fn fn, const char *name,
                               xcoll_datatype dtype, int P, double unit,
                               int depth) {
  const size_t n = 3001, es = dtype_size(dtype);
  xcoll_coll_args args[MAX_RANKS];
  rank_run runs[MAX_RANKS];
  void *send[MAX_RANKS], *recv[MAX_RANKS];
  double *exact = calloc(n, sizeof *exact),
         *magnitude = calloc(n, sizeof *magnitude);
  char why[256] = "";
  uint64_t seq = next_seq++;
  for (int r = 0; r < P; r++) {
    send[r] = malloc(n * es);
    recv[r] = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
      double v =
          (double)(mix((uint64_t)r * 1000003u + i) >> 11) * 0x1p-53 * 2.0 - 1.0;
      store_float(dtype, send[r], i, v);
      /* The exact sum of what was stored (after rounding to dtype). */
      double stored = dtype == XCOLL_FLOAT16
                          ? xcoll_half_to_float(((uint16_t *)send[r])[i])
                      : dtype == XCOLL_BFLOAT16
                          ? xcoll_bfloat16_to_float(((uint16_t *)send[r])[i])
                      : dtype == XCOLL_FLOAT32 ? ((float *)send[r])[i]
                                               : ((double *)send[r])[i];
      exact[i] += stored;
      magnitude[i] += fabs(stored);
    }
    memset(&args[r], 0, sizeof args[r]);
    args[r].kind = XCOLL_COLL_ALLREDUCE;
    args[r].sendbuf = send[r], args[r].recvbuf = recv[r];
    args[r].count = n, args[r].dtype = dtype, args[r].op = XCOLL_SUM;
    args[r].seq = seq;
  }
  int ok = run_ranks(P, fn, args, 96, 0, runs, why, sizeof why);
  if (!ok)
    print_error("%s float bounds P=%d: %s\n", name, P, why);
  assert_true(ok);
  for (size_t i = 0; i < n; i++) {
    double got = dtype == XCOLL_FLOAT16
                     ? xcoll_half_to_float(((uint16_t *)recv[0])[i])
                 : dtype == XCOLL_BFLOAT16
                     ? xcoll_bfloat16_to_float(((uint16_t *)recv[0])[i])
                 : dtype == XCOLL_FLOAT32 ? ((float *)recv[0])[i]
                                          : ((double *)recv[0])[i];
    /* depth roundings of a partial sum, each <= unit * sum|x|. */
    double bound = depth * unit * magnitude[i];
    if (fabs(got - exact[i]) > bound) {
      print_error("%s %d P=%d element %zu: got %.9g, exact %.9g, bound %.3g\n",
                  name, (int)dtype, P, i, got, exact[i], bound);
      fail();
    }
  }
  for (int r = 1; r < P; r++)
    assert_memory_equal(recv[r], recv[0], n * es);
  for (int r = 0; r < P; r++) {
    free(send[r]);
    free(recv[r]);
  }
  free(exact);
  free(magnitude);
}

static void test_float_error_bounds(void **state) {
  (void)state;
  /* unit roundoff: 2^-24 float32, 2^-11 float16, 2^-8 bfloat16. The ring
   * makes P-1 roundings, the trees ceil(log2 P); with a 16-bit type the
   * final rounding is one of them. */
  static const int sizes[] = {2, 3, 5, 7, 8};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    int P = sizes[s];
    int log_depth = 0;
    while ((1 << log_depth) < P)
      log_depth++;
    check_float_bounds(xcoll_allreduce_ring, "ring", XCOLL_FLOAT32, P, 0x1p-24,
                       P - 1);
    check_float_bounds(xcoll_allreduce_ring, "ring", XCOLL_BFLOAT16, P, 0x1p-8,
                       P - 1);
    check_float_bounds(xcoll_allreduce_ring, "ring", XCOLL_FLOAT16, P, 0x1p-11,
                       P - 1);
    check_float_bounds(xcoll_allreduce_recursive_doubling, "recursive_doubling",
                       XCOLL_FLOAT32, P, 0x1p-24, log_depth);
    check_float_bounds(xcoll_allreduce_recursive_doubling, "recursive_doubling",
                       XCOLL_BFLOAT16, P, 0x1p-8, log_depth);
    check_float_bounds(xcoll_allreduce_rabenseifner, "rabenseifner",
                       XCOLL_FLOAT32, P, 0x1p-24, log_depth);
    check_float_bounds(xcoll_allreduce_rabenseifner, "rabenseifner",
                       XCOLL_FLOAT16, P, 0x1p-11, log_depth);
  }
}

/* A NaN on one rank reaches every rank through max (dtype.c's rule). */
static void test_nan_propagates(void **state) {
  (void)state;
  xcoll_algorithm_fn fns[] = {xcoll_allreduce_ring,
                              xcoll_allreduce_recursive_doubling,
                              xcoll_allreduce_rabenseifner};
  for (size_t f = 0; f < 3; f++) {
    const int P = 5;
    const size_t n = 9;
    float send[MAX_RANKS][9], recv[MAX_RANKS][9];
    xcoll_coll_args args[MAX_RANKS];
    rank_run runs[MAX_RANKS];
    char why[256] = "";
    uint64_t seq = next_seq++;
    for (int r = 0; r < P; r++) {
      for (size_t i = 0; i < n; i++)
        send[r][i] = (float)(r + (int)i);
      memset(&args[r], 0, sizeof args[r]);
      args[r].kind = XCOLL_COLL_ALLREDUCE;
      args[r].sendbuf = send[r], args[r].recvbuf = recv[r];
      args[r].count = n, args[r].dtype = XCOLL_FLOAT32, args[r].op = XCOLL_MAX;
      args[r].seq = seq;
    }
    send[3][4] = NAN;
    assert_true(run_ranks(P, fns[f], args, 8, 1, runs, why, sizeof why));
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < n; i++) {
        if (i == 4)
          assert_true(isnan(recv[r][i]));
        else
          assert_true(recv[r][i] == (float)(P - 1 + (int)i));
      }
  }
}

/* The fake itself: a size mismatch must be caught, or the tests above could
 * pass with algorithms that disagree on chunk sizes. */
static xcoll_status mismatched_sizes(struct xcoll_comm *comm,
                                     const xcoll_coll_args *args) {
  char buf[8] = {0};
  xcoll_p2p_request *request = NULL;
  xcoll_status status;
  if (comm->rank == 0)
    status = xcoll_p2p_isend(comm, 1, xcoll_tag(args, 0), buf, 4, &request);
  else
    status = xcoll_p2p_irecv(comm, 0, xcoll_tag(args, 0), buf, 8, &request);
  if (status == XCOLL_SUCCESS)
    status = xcoll_p2p_wait(comm, &request, 1);
  return status;
}

static void test_fake_detects_mismatch(void **state) {
  (void)state;
  xcoll_coll_args args[2];
  rank_run runs[2];
  char why[256] = "";
  memset(args, 0, sizeof args);
  args[0].seq = args[1].seq = next_seq++;
  assert_false(
      run_ranks(2, mismatched_sizes, args, 0, 1, runs, why, sizeof why));
  assert_non_null(strstr(why, "protocol"));
}

/* The fingerprint exchange before a rooted collective
 * (core/fingerprint_exchange.h) over the fake backend, which compares no
 * fingerprint: the messages' own contents must tell every rank. Ranks that
 * agree pass and leave no message behind; when one rank names another root
 * (each rank in turn), every rank fails with PROTOCOL naming both calls, at
 * every P and in both matching modes. */
static void test_fingerprint_exchange(void **state) {
  (void)state;
  xcoll_coll_args args[MAX_RANKS];
  rank_run runs[MAX_RANKS];
  char why[256] = "";
  for (size_t i = 0; i < sizeof test_sizes / sizeof test_sizes[0]; i++) {
    int P = test_sizes[i];
    for (int synchronous = 0; synchronous < 2 && P > 1; synchronous++) {
      for (int odd = -1; odd < P; odd++) {
        uint64_t seq = next_seq++;
        for (int r = 0; r < P; r++) {
          memset(&args[r], 0, sizeof args[r]);
          args[r].kind = XCOLL_COLL_BROADCAST;
          args[r].count = 1000;
          args[r].dtype = XCOLL_FLOAT32;
          args[r].root = r == odd ? 1 : 0;
          args[r].seq = seq;
        }
        int ok = run_ranks(P, xcoll_fingerprint_exchange, args, 0, synchronous,
                           runs, why, sizeof why);
        if (odd < 0) {
          if (!ok)
            fail_msg("P=%d, every rank agreeing: %s", P, why);
          continue;
        }
        assert_false(world.failed);
        for (int r = 0; r < P; r++) {
          const char *message = runs[r].comm.last_error;
          if (runs[r].status != XCOLL_ERR_PROTOCOL ||
              !strstr(message, "broadcast(root 0, float32, 1000)") ||
              !strstr(message, "broadcast(root 1, float32, 1000)"))
            fail_msg("P=%d, rank %d calling root 1 (%s): rank %d returned "
                     "%d: %s",
                     P, odd, synchronous ? "synchronous" : "eager", r,
                     (int)runs[r].status, message);
        }
        for (int a = 0; a < P; a++)
          for (int b = 0; b < P; b++)
            assert_true(!world.sends[a][b].head && !world.recvs[a][b].head);
      }
    }
  }
}

static int always_shared(void *state) {
  (void)state;
  return 1;
}

/* Selection by size and P, and XCOLL_ALGO overrides and errors. */
static const char *selected(xcoll_comm *comm, xcoll_coll_kind kind,
                            size_t bytes, xcoll_status *status) {
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = kind, args.count = bytes, args.dtype = XCOLL_UINT8;
  const xcoll_algorithm *algorithm = NULL;
  char why[256] = "";
  *status = xcoll_algorithm_select(comm, &args, &algorithm, why, sizeof why);
  if (*status != XCOLL_SUCCESS)
    return "";
  assert_non_null(algorithm);
  assert_int_equal(algorithm->kind, kind);
  assert_true(strlen(why) > 0);
  return algorithm->name;
}

static void test_algorithm_select(void **state) {
  (void)state;
  xcoll_comm comm;
  memset(&comm, 0, sizeof comm);
  pthread_mutex_init(&comm.error_lock, NULL);
  comm.world_size = 4;
  xcoll_status st;
  unsetenv("XCOLL_ALGO");
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 4096, &st),
                      "recursive_doubling");
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 256 * 1024, &st),
                      "rabenseifner");
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 8 << 20, &st),
                      "ring");
  assert_string_equal(selected(&comm, XCOLL_COLL_BROADCAST, 1024, &st),
                      "binomial");
  assert_string_equal(selected(&comm, XCOLL_COLL_BROADCAST, 1 << 20, &st),
                      "chain");
  assert_string_equal(selected(&comm, XCOLL_COLL_BARRIER, 0, &st),
                      "dissemination");
  /* Every collective core runs gets an algorithm of its own kind
   * (selected() asserts it), by name where there is a choice. */
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLGATHER, 64, &st), "ring");
  assert_string_equal(selected(&comm, XCOLL_COLL_REDUCE_SCATTER, 64, &st),
                      "ring");
  assert_string_equal(selected(&comm, XCOLL_COLL_REDUCE, 64, &st), "binomial");
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLTOALL, 64, &st), "bruck");
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLTOALL, 64 * 1024, &st),
                      "pairwise");
  /* Over shared memory (a p2p interface that says so) small blocks go
   * pairwise up to 8 ranks; Bruck again beyond. */
  static const xcoll_p2p_ops shm_p2p = {.shared_memory = always_shared};
  xcoll_backend shm_backend;
  memset(&shm_backend, 0, sizeof shm_backend);
  shm_backend.p2p = &shm_p2p;
  comm.backend = &shm_backend;
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLTOALL, 64, &st),
                      "pairwise");
  comm.world_size = 9;
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLTOALL, 64, &st), "bruck");
  comm.world_size = 4;
  comm.backend = NULL;
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLTOALLV, 64, &st),
                      "pairwise");
  assert_string_equal(selected(&comm, XCOLL_COLL_GATHER, 64, &st), "binomial");
  assert_string_equal(selected(&comm, XCOLL_COLL_SCATTER, 64, &st), "binomial");
  comm.world_size = 1;
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 4096, &st), "ring");
  comm.world_size = 5; /* not a power of two: ring earlier */
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 512 * 1024, &st),
                      "ring");

  setenv("XCOLL_ALGO", "ring", 1);
  assert_int_equal(xcoll_algorithm_check_env(&comm), XCOLL_SUCCESS);
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 16, &st), "ring");
  assert_string_equal(selected(&comm, XCOLL_COLL_BROADCAST, 16, &st),
                      "binomial");
  /* Read when the communicator is created (check_env), not per call. */
  setenv("XCOLL_ALGO", " allreduce:Rabenseifner , broadcast:chain", 1);
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 16, &st), "ring");
  assert_int_equal(xcoll_algorithm_check_env(&comm), XCOLL_SUCCESS);
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 16, &st),
                      "rabenseifner");
  assert_string_equal(selected(&comm, XCOLL_COLL_BROADCAST, 16, &st), "chain");
  static const char *const bad[] = {"bogus", "allreduce:chain", "nocoll:ring",
                                    "ring,,chain"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("XCOLL_ALGO", bad[i], 1);
    assert_int_equal(xcoll_algorithm_check_env(&comm), XCOLL_ERR_ENV);
    assert_non_null(strstr(xcoll_last_error(), "XCOLL_ALGO"));
    assert_non_null(strstr(xcoll_last_error(), "recursive_doubling"));
    selected(&comm, XCOLL_COLL_ALLREDUCE, 16, &st);
    assert_int_equal(st, XCOLL_ERR_ENV);
  }
  unsetenv("XCOLL_ALGO");
  assert_int_equal(xcoll_algorithm_check_env(&comm), XCOLL_SUCCESS);
  assert_string_equal(selected(&comm, XCOLL_COLL_ALLREDUCE, 16, &st),
                      "recursive_doubling");
  pthread_mutex_destroy(&comm.error_lock);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fake_detects_mismatch),
      cmocka_unit_test(test_fingerprint_exchange),
      cmocka_unit_test(test_allreduce_ring),
      cmocka_unit_test(test_allreduce_recursive_doubling),
      cmocka_unit_test(test_allreduce_rabenseifner),
      cmocka_unit_test(test_allgather_ring),
      cmocka_unit_test(test_reduce_scatter_ring),
      cmocka_unit_test(test_broadcast_binomial),
      cmocka_unit_test(test_broadcast_chain),
      cmocka_unit_test(test_reduce_binomial),
      cmocka_unit_test(test_barrier_dissemination),
      cmocka_unit_test(test_float_error_bounds),
      cmocka_unit_test(test_nan_propagates),
      cmocka_unit_test(test_algorithm_select),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
