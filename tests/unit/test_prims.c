/* test_prims.c - kernels/ring.h and kernels/prims.h on the host engine,
 * without a network: an in-process ring of 1..5 "ranks", one thread per
 * (rank, channel) running xc_ring_run, and one mover thread that plays every
 * proxy: it copies each filled slot of rank r's send FIFO into a free slot of
 * the next rank's recv FIFO, honouring head, tail and sizes[] exactly as
 * conn.h asks a proxy to (recv tail released only after the copy, which it
 * does second half first, as a socket recv() may land bytes in any order).
 *
 * Every collective x dtype x op x count (0, 1, 7, 1021, 100003) x in place or
 * not x SIMPLE / LL x 1 or 3 channels x 1..5 ranks, with 16- and 64-byte
 * slots (4 KiB for 100003 elements; the FIFO wraps many times either way),
 * chunk/slice shapes 4/2, 1/1, 8/8, 3/1, permuted ring orders, and
 * connections whose step counters start mid-stream; dtype and op rotate
 * with the case number, and allreduce also runs every (dtype, op) pair.
 * Results are compared bitwise with a reference computed here in double or
 * in exact integer arithmetic (not with kernels/reduce.h); inputs are chosen
 * so that every float result is exact or a single correctly rounded
 * division. With inexact floats, allreduce must match the reduction order
 * ring.h documents, bitwise, on every rank. Inputs of out-of-place calls and buffers a collective
 * must not write are checked unchanged. An abort raised while ranks wait
 * must make xc_ring_run return XCOLL_ERR_ABORTED.
 *
 * XCOLL_TEST_PRIMS_FULL=1 runs the whole matrix under sanitizers too (it is
 * trimmed there by default: the 100003-element counts run only for a few
 * cases, and under ThreadSanitizer every other small case, to stay well
 * within a minute on a slow machine). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algorithm.h"
#include "../../kernels/ring.h"

_Static_assert(XC_COLL_ALLREDUCE == XCOLL_COLL_ALLREDUCE, "kind values");
_Static_assert(XC_COLL_ALLGATHER == XCOLL_COLL_ALLGATHER, "kind values");
_Static_assert(XC_COLL_REDUCE_SCATTER == XCOLL_COLL_REDUCE_SCATTER, "kinds");
_Static_assert(XC_COLL_BROADCAST == XCOLL_COLL_BROADCAST, "kind values");
_Static_assert(XC_COLL_REDUCE == XCOLL_COLL_REDUCE, "kind values");

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define THREAD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define THREAD_SANITIZED 1
#endif
#endif
#ifndef THREAD_SANITIZED
#define THREAD_SANITIZED 0
#endif

/* Seconds one collective may take before the test calls it a hang. */
#define CASE_TIMEOUT_S 30
#define MAX_RANKS 5
#define MAX_CHANNELS 3
#define SENTINEL 0xA5

/* ---- FIFO memory and the mover (the proxies) ---- */

typedef struct fifo {
  uint8_t *buff;
  xc_atomic_u64 head, tail;
  int64_t sizes[XCOLL_STEPS];
  const uint8_t *from[XCOLL_STEPS]; /* direct sends (conn.h's direct_from) */
  xc_atomic_u64 req;             /* direct receives (conn.h's direct_req, */
  uint8_t *to[XCOLL_STEPS];      /* direct_to, direct_to_bytes) */
  size_t to_bytes[XCOLL_STEPS];
  xc_conn conn;
} fifo;

typedef struct ring_fixture {
  int nranks, nchannels;
  size_t step_bytes;
  fifo send[MAX_RANKS][MAX_CHANNELS]; /* rank r -> ring position r + 1 */
  fifo recv[MAX_RANKS][MAX_CHANNELS]; /* ring position r <- r - 1 */
  uint64_t moved[MAX_RANKS][MAX_CHANNELS];
  _Atomic int stop;
  _Atomic uint64_t total_moved;
  int direct;                    /* send FIFOs have direct_from, recv FIFOs
                                    direct_req */
  _Atomic uint64_t direct_moved; /* steps the mover took from user memory */
  _Atomic uint64_t direct_landed; /* steps it put into user memory */
  xc_abort abort;
} ring_fixture;

/* ring_init gives the send connections direct_from and the recv ones
 * direct_req (kernels/prims.h's direct sends and receives) while this is
 * set. */
static int g_direct;

static void fifo_init(fifo *f, size_t step_bytes, uint64_t first_step) {
  f->buff = aligned_alloc(16, XCOLL_STEPS * step_bytes);
  assert_non_null(f->buff);
  memset(f->buff, 0, XCOLL_STEPS * step_bytes);
  atomic_init(&f->head, first_step);
  atomic_init(&f->tail, first_step);
  atomic_init(&f->req, first_step);
  for (int s = 0; s < XCOLL_STEPS; s++)
    f->sizes[s] = -1;
  f->conn.buff = f->buff;
  f->conn.step_bytes = step_bytes;
  f->conn.head = &f->head;
  f->conn.tail = &f->tail;
  f->conn.sizes = f->sizes;
  f->conn.step = first_step;
}

static void ring_init(ring_fixture *rf, int nranks, int nchannels,
                      size_t step_bytes, uint64_t first_step) {
  memset(rf, 0, sizeof *rf);
  rf->nranks = nranks;
  rf->nchannels = nchannels;
  rf->step_bytes = step_bytes;
  atomic_init(&rf->stop, 0);
  atomic_init(&rf->total_moved, 0);
  atomic_init(&rf->direct_moved, 0);
  atomic_init(&rf->direct_landed, 0);
  atomic_init(&rf->abort, 0);
  rf->direct = g_direct;
  for (int r = 0; r < nranks; r++)
    for (int c = 0; c < nchannels; c++) {
      fifo_init(&rf->send[r][c], step_bytes, first_step);
      fifo_init(&rf->recv[r][c], step_bytes, first_step);
      if (rf->direct) {
        fifo *in = &rf->recv[r][c];
        rf->send[r][c].conn.direct_from = rf->send[r][c].from;
        in->conn.direct_req = &in->req;
        in->conn.direct_to = in->to;
        in->conn.direct_to_bytes = in->to_bytes;
      }
      rf->moved[r][c] = first_step;
    }
}

static void ring_free(ring_fixture *rf) {
  for (int r = 0; r < rf->nranks; r++)
    for (int c = 0; c < rf->nchannels; c++) {
      free(rf->send[r][c].buff);
      free(rf->recv[r][c].buff);
    }
}

/* Moves what it can from send[r][c] to recv[r+1][c]; returns steps moved. */
static int move_pair(ring_fixture *rf, int r, int c) {
  fifo *src = &rf->send[r][c];
  fifo *dst = &rf->recv[(r + 1) % rf->nranks][c];
  uint64_t filled = atomic_load_explicit(&src->tail, memory_order_acquire);
  int moved = 0;
  while (rf->moved[r][c] < filled) {
    uint64_t step = rf->moved[r][c];
    if (atomic_load_explicit(&dst->head, memory_order_acquire) + XCOLL_STEPS <=
        step)
      break; /* the receiving kernel has not freed the slot yet */
    if (rf->direct &&
        atomic_load_explicit(&dst->req, memory_order_acquire) <= step)
      break; /* the receiving kernel has not asked for this step yet */
    size_t slot = step % XCOLL_STEPS;
    int64_t bytes = src->sizes[slot];
    if (bytes < 0 || (size_t)bytes > rf->step_bytes) {
      fail_msg("send fifo rank %d channel %d step %llu: sizes[%zu] = %lld", r,
               c, (unsigned long long)step, slot, (long long)bytes);
    }
    const uint8_t *from = src->buff + slot * rf->step_bytes;
    if (rf->direct && src->from[slot] != NULL) {
      from = src->from[slot]; /* user memory, as a direct proxy sends it */
      atomic_fetch_add(&rf->direct_moved, 1);
    }
    uint8_t *to = dst->buff + slot * rf->step_bytes;
    if (rf->direct && dst->to[slot] != NULL) {
      /* User memory, as a direct proxy receives: exactly what fits. */
      if ((size_t)bytes > dst->to_bytes[slot])
        fail_msg("recv fifo rank %d channel %d step %llu: %lld bytes for a "
                 "direct receive of %zu",
                 (r + 1) % rf->nranks, c, (unsigned long long)step,
                 (long long)bytes, dst->to_bytes[slot]);
      to = dst->to[slot];
      atomic_fetch_add(&rf->direct_landed, 1);
    }
    size_t half = (size_t)bytes / 2;
    memcpy(to + half, from + half, (size_t)bytes - half);
    memcpy(to, from, half);
    dst->sizes[slot] = bytes;
    atomic_store_explicit(&dst->tail, step + 1, memory_order_release);
    src->sizes[slot] = -1;
    atomic_store_explicit(&src->head, step + 1, memory_order_release);
    rf->moved[r][c] = step + 1;
    moved++;
  }
  return moved;
}

static void *mover_main(void *arg) {
  ring_fixture *rf = arg;
  while (!atomic_load_explicit(&rf->stop, memory_order_acquire)) {
    int moved = 0;
    for (int r = 0; r < rf->nranks; r++)
      for (int c = 0; c < rf->nchannels; c++)
        moved += move_pair(rf, r, c);
    if (moved)
      atomic_fetch_add(&rf->total_moved, (uint64_t)moved);
    else
      sched_yield();
  }
  return NULL;
}

/* ---- datatypes for the reference ---- */

static const xcoll_datatype test_dtypes[] = {
    XCOLL_INT32,   XCOLL_INT8,    XCOLL_FLOAT32, XCOLL_FLOAT16,
    XCOLL_BFLOAT16, XCOLL_FLOAT64, XCOLL_UINT64};
#define NUM_TEST_DTYPES (sizeof test_dtypes / sizeof test_dtypes[0])
static const xcoll_op test_ops[] = {XCOLL_SUM, XCOLL_PROD, XCOLL_MIN,
                                    XCOLL_MAX, XCOLL_AVG};

static size_t esize(xcoll_datatype d) {
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

static uint64_t mix(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* A value for (rank, element) that keeps every float result exact:
 * small integers for sum/min/max, signed powers of two for prod. */
static double float_input(int rank, size_t i, xcoll_op op) {
  uint64_t h = mix(((uint64_t)rank << 40) ^ i);
  if (op == XCOLL_PROD) {
    static const double factors[] = {1, 2, -1, 0.5, -2, 1, -0.5};
    return factors[h % 7];
  }
  return (double)((int)(h % 9) - 4);
}

static uint64_t int_input(int rank, size_t i) {
  return mix(((uint64_t)rank << 40) ^ (i * 0x10001u) ^ 0x55);
}

/* Round x (a normal or zero double) to p significant bits, ties to even,
 * independently of kernels/reduce.h. */
static double round_bits(double x, int p) {
  if (x == 0)
    return x;
  int e;
  double m = frexp(x, &e);
  return ldexp(nearbyint(ldexp(m, p)), e - p);
}

/* Encodes an exactly representable value of dtype into out. */
static void encode_float(double x, xcoll_datatype d, uint8_t *out) {
  if (d == XCOLL_FLOAT64) {
    memcpy(out, &x, 8);
  } else if (d == XCOLL_FLOAT32) {
    float f = (float)x;
    memcpy(out, &f, 4);
  } else if (d == XCOLL_BFLOAT16) {
    float f = (float)round_bits(x, 8);
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t b = (uint16_t)(u >> 16);
    memcpy(out, &b, 2);
  } else { /* float16; test values are normal or zero */
    double y = round_bits(x, 11);
    uint16_t h = 0;
    if (y != 0) {
      int e = ilogb(y);
      double mant = fabs(y) / ldexp(1, e) - 1; /* [0, 1) */
      h = (uint16_t)((y < 0 ? 0x8000u : 0) | (uint32_t)(e + 15) << 10 |
                     (uint32_t)(mant * 1024));
    }
    memcpy(out, &h, 2);
  }
}

static void encode_int(uint64_t v, xcoll_datatype d, uint8_t *out) {
  memcpy(out, &v, esize(d)); /* little-endian truncation = mod 2^n */
}

static int64_t as_signed(uint64_t v, xcoll_datatype d) {
  switch (d) {
  case XCOLL_INT8:
    return (int8_t)(uint8_t)v;
  case XCOLL_INT32:
    return (int32_t)(uint32_t)v;
  default:
    return (int64_t)v;
  }
}

static void write_input(uint8_t *buf, int rank, size_t first, size_t n,
                        xcoll_datatype d, xcoll_op op) {
  size_t e = esize(d);
  for (size_t i = 0; i < n; i++) {
    if (is_float(d))
      encode_float(float_input(rank, first + i, op), d, buf + i * e);
    else
      encode_int(int_input(rank, first + i), d, buf + i * e);
  }
}

/* Expected reduction over ranks of element index i (input numbering). */
static void expected_reduce(uint8_t *out, int nranks, size_t i,
                            xcoll_datatype d, xcoll_op op) {
  if (is_float(d)) {
    double acc = float_input(0, i, op);
    for (int q = 1; q < nranks; q++) {
      double v = float_input(q, i, op);
      if (op == XCOLL_PROD)
        acc *= v;
      else if (op == XCOLL_MIN)
        acc = v < acc ? v : acc;
      else if (op == XCOLL_MAX)
        acc = v > acc ? v : acc;
      else
        acc += v;
    }
    if (op == XCOLL_AVG) {
      /* The sum is exact; one correctly rounded division to the type (a
       * double quotient rounded again is innocuous: 53 >= 2 * 24 + 2). */
      acc = acc / nranks;
      if (d == XCOLL_FLOAT32)
        acc = (double)(float)acc;
    }
    encode_float(acc, d, out);
    return;
  }
  uint64_t acc = int_input(0, i);
  int is_unsigned = d == XCOLL_UINT64;
  for (int q = 1; q < nranks; q++) {
    uint64_t v = int_input(q, i);
    if (op == XCOLL_PROD) {
      acc *= v;
    } else if (op == XCOLL_MIN || op == XCOLL_MAX) {
      int less = is_unsigned ? v < acc : as_signed(v, d) < as_signed(acc, d);
      if ((op == XCOLL_MIN) == less)
        acc = v;
    } else {
      acc += v;
    }
  }
  encode_int(acc, d, out);
}

/* ---- one collective on the in-process ring ---- */

typedef struct coll_case {
  int kind;
  xcoll_datatype dtype;
  xcoll_op op;
  size_t count;
  int in_place;
  int proto;
  int nranks, nchannels;
  int chunk_steps, slice_steps;
  size_t step_bytes;
  uint64_t first_step;
  int root_rank;
  int permute; /* ring order differs from rank order */
  int algo;    /* allreduce: XC_ALGO_RING or XC_ALGO_GATHER */
  int direct;  /* send connections with direct_from (kernels/prims.h) */
} coll_case;

typedef struct rank_buffers {
  uint8_t *send, *recv;       /* allocations */
  const void *sendbuf;        /* what xc_work gets */
  void *recvbuf;
  size_t send_bytes, recv_bytes;
  uint8_t *send_copy;         /* the send allocation before the call */
} rank_buffers;

typedef struct worker {
  ring_fixture *rf;
  xc_work work;
  void *scratch; /* XC_ALGO_GATHER's, freed by the test */
  int position;
  xcoll_status status;
} worker;

static void *worker_main(void *arg) {
  worker *wk = arg;
  ring_fixture *rf = wk->rf;
  int c = wk->work.channel;
  xc_conn *send = &rf->send[wk->position][c].conn;
  xc_conn *recv = &rf->recv[wk->position][c].conn;
  wk->status = xc_ring_run(&wk->work, send, recv, &rf->abort);
  if (wk->status != XCOLL_SUCCESS) /* let the other ranks out */
    atomic_store(&rf->abort, 1);
  return NULL;
}

static void describe(const coll_case *cc, char *buf, size_t len) {
  snprintf(buf, len,
           "%s dtype=%s op=%d count=%zu %s %s nranks=%d nchannels=%d "
           "chunk=%d slice=%d step_bytes=%zu first_step=%llu root=%d perm=%d "
           "algo=%s%s",
           xcoll_coll_name((xcoll_coll_kind)cc->kind),
           xcoll_datatype_name(cc->dtype), (int)cc->op, cc->count,
           cc->in_place ? "in-place" : "out-of-place",
           cc->proto == XC_PROTO_LL ? "LL" : "SIMPLE", cc->nranks,
           cc->nchannels, cc->chunk_steps, cc->slice_steps, cc->step_bytes,
           (unsigned long long)cc->first_step, cc->root_rank, cc->permute,
           cc->algo == XC_ALGO_GATHER ? "gather" : "ring",
           cc->direct ? " direct" : "");
}

static void run_case(const coll_case *cc) {
  int k = cc->nranks;
  size_t e = esize(cc->dtype), n = cc->count;
  char what[400];
  describe(cc, what, sizeof what);
  /* ring position p holds rank ring_ranks[p] */
  int ring_ranks[MAX_RANKS], position_of[MAX_RANKS];
  for (int p = 0; p < k; p++) {
    ring_ranks[p] = cc->permute ? (p * 2 + 1) % k : p;
    if (cc->permute && k % 2 == 0)
      ring_ranks[p] = k - 1 - p;
    position_of[ring_ranks[p]] = p;
  }
  int root_position = position_of[cc->root_rank];

  size_t in_elems = n, out_elems = n;
  if (cc->kind == XC_COLL_ALLGATHER)
    out_elems = (size_t)k * n;
  if (cc->kind == XC_COLL_REDUCE_SCATTER)
    in_elems = (size_t)k * n;

  rank_buffers rb[MAX_RANKS];
  for (int rank = 0; rank < k; rank++) {
    rank_buffers *b = &rb[rank];
    b->send_bytes = in_elems * e;
    b->recv_bytes = out_elems * e;
    b->send = malloc(b->send_bytes + 16);
    b->recv = malloc(b->recv_bytes + 16);
    assert_non_null(b->send);
    assert_non_null(b->recv);
    memset(b->send, SENTINEL, b->send_bytes + 16);
    memset(b->recv, SENTINEL, b->recv_bytes + 16);
    b->sendbuf = b->send;
    b->recvbuf = b->recv;
    if (cc->kind == XC_COLL_REDUCE_SCATTER) {
      for (int blk = 0; blk < k; blk++)
        write_input(b->send + (size_t)blk * n * e, rank, (size_t)blk * n, n,
                    cc->dtype, cc->op);
      if (cc->in_place)
        b->recvbuf = b->send + (size_t)rank * n * e;
    } else if (cc->kind == XC_COLL_ALLGATHER) {
      if (cc->in_place) {
        b->sendbuf = b->recv + (size_t)rank * n * e;
        write_input(b->recv + (size_t)rank * n * e, rank, 0, n, cc->dtype,
                    cc->op);
      } else {
        write_input(b->send, rank, 0, n, cc->dtype, cc->op);
      }
    } else {
      int has_input = cc->kind != XC_COLL_BROADCAST || rank == cc->root_rank;
      if (cc->in_place) {
        b->sendbuf = b->recv;
        if (has_input)
          write_input(b->recv, rank, 0, n, cc->dtype, cc->op);
      } else if (has_input) {
        write_input(b->send, rank, 0, n, cc->dtype, cc->op);
      }
    }
    b->send_copy = malloc(b->send_bytes + 16);
    assert_non_null(b->send_copy);
    memcpy(b->send_copy, b->send, b->send_bytes + 16);
  }
  /* Reduce, non-root, in place: recvbuf is the input and must stay so. */
  uint8_t *recv_copy[MAX_RANKS];
  for (int rank = 0; rank < k; rank++) {
    recv_copy[rank] = malloc(rb[rank].recv_bytes + 16);
    assert_non_null(recv_copy[rank]);
    memcpy(recv_copy[rank], rb[rank].recv, rb[rank].recv_bytes + 16);
  }

  ring_fixture *rf = malloc(sizeof *rf);
  assert_non_null(rf);
  g_direct = cc->direct;
  ring_init(rf, k, cc->nchannels, cc->step_bytes, cc->first_step);
  g_direct = 0;
  pthread_t mover;
  if (k > 1)
    assert_int_equal(pthread_create(&mover, NULL, mover_main, rf), 0);
  worker workers[MAX_RANKS][MAX_CHANNELS];
  pthread_t threads[MAX_RANKS][MAX_CHANNELS];
  for (int p = 0; p < k; p++)
    for (int c = 0; c < cc->nchannels; c++) {
      worker *wk = &workers[p][c];
      int rank = ring_ranks[p];
      wk->rf = rf;
      wk->position = p;
      wk->status = XCOLL_ERR_INTERNAL;
      xc_work *w = &wk->work;
      memset(w, 0, sizeof *w);
      w->kind = cc->kind;
      w->dtype = cc->dtype;
      w->op = cc->op;
      w->sendbuf = rb[rank].sendbuf;
      w->recvbuf = rb[rank].recvbuf;
      w->count = n;
      w->nranks = k;
      w->ring_index = p;
      w->root_index = root_position;
      w->ring_ranks = cc->permute ? ring_ranks : NULL;
      w->channel = c;
      w->nchannels = cc->nchannels;
      w->proto = cc->proto;
      w->chunk_steps = cc->chunk_steps;
      w->slice_steps = cc->slice_steps;
      w->algo = cc->algo;
      wk->scratch = NULL;
      if (cc->algo == XC_ALGO_GATHER) {
        /* k blocks of this channel's share (at most n elements). */
        w->scratch_bytes = ((size_t)k * n * esize(cc->dtype) + 15) / 16 * 16;
        wk->scratch = aligned_alloc(16, w->scratch_bytes + 16);
        assert_non_null(wk->scratch);
        w->scratch = wk->scratch;
      }
      assert_int_equal(pthread_create(&threads[p][c], NULL, worker_main, wk),
                       0);
    }
  /* A schedule mismatch shows as ranks waiting forever: bound the wait,
   * then raise abort so that every worker returns, and fail. */
  int timed_out = 0;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += CASE_TIMEOUT_S;
  for (int p = 0; p < k; p++)
    for (int c = 0; c < cc->nchannels; c++)
      if (pthread_timedjoin_np(threads[p][c], NULL, &deadline) != 0) {
        timed_out = 1;
        atomic_store(&rf->abort, 1);
        pthread_join(threads[p][c], NULL);
      }
  if (k > 1) {
    atomic_store(&rf->stop, 1);
    pthread_join(mover, NULL);
  }
  if (timed_out)
    fail_msg("%s: not done after %d s (ranks disagree on the schedule, or a "
             "step was lost); aborted",
             what, CASE_TIMEOUT_S);
  /* xc_ring_steps counts what each kernel moved (the flight recorder's
   * per-channel totals): the connections' step counters moved by as much. */
  for (int p = 0; p < k; p++)
    for (int c = 0; c < cc->nchannels && k > 1; c++) {
      if (workers[p][c].status != XCOLL_SUCCESS)
        continue;
      uint64_t sends, recvs;
      xc_ring_steps(&workers[p][c].work, cc->step_bytes, &sends, &recvs);
      uint64_t sent = rf->send[p][c].conn.step - cc->first_step;
      uint64_t received = rf->recv[p][c].conn.step - cc->first_step;
      if (sent != sends || received != recvs)
        fail_msg("%s: position %d channel %d moved %llu/%llu steps (send/"
                 "recv), xc_ring_steps says %llu/%llu",
                 what, p, c, (unsigned long long)sent,
                 (unsigned long long)received, (unsigned long long)sends,
                 (unsigned long long)recvs);
    }
  /* Every schedule starts with a send or copySend of user data, so a
   * SIMPLE run with direct sends must have sent some steps from user
   * memory (and none with LL, whose lines are always built in a slot). */
  if (cc->direct && k > 1 && n > 0 && cc->proto == XC_PROTO_SIMPLE &&
      atomic_load(&rf->direct_moved) == 0)
    fail_msg("%s: no step was sent from user memory", what);
  if (cc->proto == XC_PROTO_LL && atomic_load(&rf->direct_moved) != 0)
    fail_msg("%s: an LL step was sent from user memory", what);
  /* Allreduce, allgather and broadcast have steps that receive final
   * output (recv, recvCopySend; the gather allreduce's go to its scratch):
   * with direct receives some must have landed there; reduce and
   * reduce_scatter receive only to reduce, into slots. */
  int lands_output = cc->kind == XC_COLL_ALLGATHER ||
                     cc->kind == XC_COLL_BROADCAST ||
                     cc->kind == XC_COLL_ALLREDUCE;
  if (cc->direct && k > 1 && n > 0 && cc->proto == XC_PROTO_SIMPLE &&
      lands_output && atomic_load(&rf->direct_landed) == 0)
    fail_msg("%s: no step was received into user memory", what);
  if (atomic_load(&rf->direct_landed) != 0 &&
      (cc->proto == XC_PROTO_LL || !lands_output))
    fail_msg("%s: a step was received into user memory where none may be",
             what);
  for (int p = 0; p < k; p++)
    for (int c = 0; c < cc->nchannels; c++)
      free(workers[p][c].scratch);
  for (int p = 0; p < k; p++)
    for (int c = 0; c < cc->nchannels; c++)
      if (workers[p][c].status != XCOLL_SUCCESS)
        fail_msg("%s: position %d channel %d returned %s", what, p, c,
                 xcoll_strerror(workers[p][c].status));
  /* Every slot sent was delivered and freed, and both counters of every
   * FIFO agree with the kernels' step counters. */
  for (int p = 0; p < k && k > 1; p++)
    for (int c = 0; c < cc->nchannels; c++) {
      fifo *s = &rf->send[p][c], *r = &rf->recv[p][c];
      assert_true(atomic_load(&s->head) == s->conn.step);
      assert_true(atomic_load(&s->tail) == s->conn.step);
      assert_true(atomic_load(&r->head) == r->conn.step);
      assert_true(atomic_load(&r->tail) == r->conn.step);
    }

  /* ---- check ---- */
  uint8_t expect[8];
  for (int rank = 0; rank < k; rank++) {
    rank_buffers *b = &rb[rank];
    const uint8_t *out = b->recvbuf;
    int check_out = cc->kind != XC_COLL_REDUCE || rank == cc->root_rank;
    if (check_out) {
      for (size_t i = 0; i < out_elems; i++) {
        switch (cc->kind) {
        case XC_COLL_ALLREDUCE:
        case XC_COLL_REDUCE:
          expected_reduce(expect, k, i, cc->dtype, cc->op);
          break;
        case XC_COLL_REDUCE_SCATTER:
          expected_reduce(expect, k, (size_t)rank * n + i, cc->dtype, cc->op);
          break;
        case XC_COLL_ALLGATHER:
          write_input(expect, (int)(i / (n ? n : 1)), i % (n ? n : 1), 1,
                      cc->dtype, cc->op);
          break;
        default: /* broadcast */
          write_input(expect, cc->root_rank, i, 1, cc->dtype, cc->op);
          break;
        }
        if (memcmp(out + i * e, expect, e) != 0) {
          uint64_t got = 0, want = 0;
          memcpy(&got, out + i * e, e);
          memcpy(&want, expect, e);
          fail_msg("%s: rank %d element %zu of %zu: got 0x%llx, expected "
                   "0x%llx",
                   what, rank, i, out_elems, (unsigned long long)got,
                   (unsigned long long)want);
        }
      }
    } else {
      assert_memory_equal(b->recv, recv_copy[rank], b->recv_bytes + 16);
    }
    /* Nothing past the end of the output was written. */
    for (size_t j = 0; j < 16; j++)
      assert_int_equal(b->recv[b->recv_bytes + j], SENTINEL);
    /* An input is never written (in-place reduce_scatter: the blocks of
     * the other ranks). */
    if (cc->kind == XC_COLL_REDUCE_SCATTER && cc->in_place) {
      size_t own = (size_t)rank * n * e;
      assert_memory_equal(b->send, b->send_copy, own);
      assert_memory_equal(b->send + own + n * e, b->send_copy + own + n * e,
                          b->send_bytes + 16 - own - n * e);
    } else {
      assert_memory_equal(b->send, b->send_copy, b->send_bytes + 16);
    }
    /* Bitwise the same output on every rank (allreduce, allgather,
     * broadcast). */
    if (rank > 0 && (cc->kind == XC_COLL_ALLREDUCE ||
                     cc->kind == XC_COLL_ALLGATHER ||
                     cc->kind == XC_COLL_BROADCAST))
      assert_memory_equal(rb[0].recvbuf, b->recvbuf, out_elems * e);
  }
  for (int rank = 0; rank < k; rank++) {
    free(rb[rank].send);
    free(rb[rank].recv);
    free(rb[rank].send_copy);
    free(recv_copy[rank]);
  }
  ring_free(rf);
  free(rf);
}

/* ---- the matrix ---- */

static int full_matrix(void) {
  const char *v = getenv("XCOLL_TEST_PRIMS_FULL");
  return !SANITIZED || (v && strcmp(v, "1") == 0);
}

static void run_matrix_algo(int kind, int algo, int min_ranks,
                            int max_ranks) {
  static const size_t counts[] = {0, 1, 7, 1021, 100003};
  int full = full_matrix();
  unsigned index = 0, ran = 0;
  for (int nranks = min_ranks; nranks <= max_ranks; nranks++)
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
      for (int in_place = 0; in_place < 2; in_place++)
        for (int proto = 0; proto < 2; proto++)
          for (int nch = 1; nch <= 3; nch += 2) {
            unsigned i = index++;
            size_t count = counts[ci];
            int big = count > 10000;
            /* Trimmed: the 100003-element cases dominate the time. */
            if (!full && big && (i % 8 != 0 || (nranks != 3 && nranks != 4)))
              continue;
            /* ThreadSanitizer is about 4x slower again: every other case. */
            if (!full && THREAD_SANITIZED && !big && i % 2)
              continue;
            coll_case cc;
            memset(&cc, 0, sizeof cc);
            cc.kind = kind;
            cc.dtype = test_dtypes[(i * 3 + (unsigned)kind) % NUM_TEST_DTYPES];
            cc.op = test_ops[(i / NUM_TEST_DTYPES) % 5];
            if (cc.op == XCOLL_AVG && !is_float(cc.dtype))
              cc.op = XCOLL_SUM;
            cc.count = count;
            cc.in_place = in_place;
            cc.proto = proto ? XC_PROTO_LL : XC_PROTO_SIMPLE;
            cc.nranks = nranks;
            cc.nchannels = nch;
            /* NCCL's 4/2 mostly; also 1/1 (its broadcast), 8/8 (a slice as
             * large as the FIFO) and 3/1. */
            static const int shapes[4][2] = {{4, 2}, {1, 1}, {8, 8}, {3, 1}};
            cc.chunk_steps = shapes[i % 4][0];
            cc.slice_steps = shapes[i % 4][1];
            cc.step_bytes = big ? 4096 : (i % 3 == 0 ? 16 : 64);
            cc.first_step = (i * 7) % 23;
            cc.root_rank = (int)(i % (unsigned)nranks);
            cc.permute = nranks > 2 && i % 5 == 1;
            cc.algo = algo;
            /* Half the cases with direct sends: the same bits expected. */
            cc.direct = (i / 2) % 2;
            run_case(&cc);
            ran++;
          }
  assert_true(ran > 0);
}

static void run_matrix(int kind, int min_ranks, int max_ranks) {
  run_matrix_algo(kind, XC_ALGO_RING, min_ranks, max_ranks);
}

static void test_allreduce(void **state) {
  (void)state;
  run_matrix(XC_COLL_ALLREDUCE, 1, MAX_RANKS);
}

/* The small-buffer allreduce (allgather the inputs, reduce locally) over
 * the same matrix: every count, both protocols, wrapping FIFOs. */
static void test_allreduce_gather(void **state) {
  (void)state;
  run_matrix_algo(XC_COLL_ALLREDUCE, XC_ALGO_GATHER, 1, MAX_RANKS);
}
static void test_reduce_scatter(void **state) {
  (void)state;
  run_matrix(XC_COLL_REDUCE_SCATTER, 1, MAX_RANKS);
}
static void test_allgather(void **state) {
  (void)state;
  run_matrix(XC_COLL_ALLGATHER, 1, MAX_RANKS);
}
static void test_broadcast(void **state) {
  (void)state;
  run_matrix(XC_COLL_BROADCAST, 1, MAX_RANKS);
}
static void test_reduce(void **state) {
  (void)state;
  run_matrix(XC_COLL_REDUCE, 1, MAX_RANKS);
}

/* Every (dtype, op) pair of allreduce on 3 ranks, both protocols. */
static void test_allreduce_every_dtype_op(void **state) {
  (void)state;
  for (size_t d = 0; d < NUM_TEST_DTYPES; d++)
    for (int o = 0; o < 5; o++)
      for (int proto = 0; proto < 2; proto++) {
        if (test_ops[o] == XCOLL_AVG && !is_float(test_dtypes[d]))
          continue;
        coll_case cc = {.kind = XC_COLL_ALLREDUCE,
                        .dtype = test_dtypes[d],
                        .op = test_ops[o],
                        .count = 1021,
                        .in_place = (int)(d % 2),
                        .proto = proto,
                        .nranks = 3,
                        .nchannels = 2,
                        .chunk_steps = 4,
                        .slice_steps = 2,
                        .step_bytes = 64,
                        .first_step = 5};
        run_case(&cc);
      }
}

/* ---- the documented reduction order, with inexact floats ---- */

/* Random float32 values of mixed magnitudes: sums round at every hop. */
static float random_float(int rank, size_t i) {
  uint64_t h = mix(((uint64_t)rank << 40) ^ i ^ 0xabcdef);
  double unit = (double)(h >> 11) * 0x1p-53 * 2 - 1; /* [-1, 1) */
  return (float)ldexp(unit, (int)((h >> 3) % 20) - 10);
}

static float to_bf16_value(float f) { return (float)round_bits(f, 8); }

/* Chunk index of element i of an allreduce, per ring.h's partition: channel
 * shares aligned to 16 bytes, loops of k chunks, the last loop's chunk
 * alignUp(divUp(rest, k), 16 bytes). */
static int allreduce_chunk_of(size_t i, size_t count, size_t e, int k,
                              int nchannels, size_t chunk) {
  size_t unit = 16 / e;
  size_t units = (count + unit - 1) / unit;
  size_t per = (units + (size_t)nchannels - 1) / (size_t)nchannels * unit;
  size_t base = i / per * per;
  size_t n = count - base < per ? count - base : per;
  size_t j = i - base, loop = (size_t)k * chunk;
  size_t grid = j / loop * loop, rest = n - grid;
  size_t real = ((rest + (size_t)k - 1) / (size_t)k + unit - 1) / unit * unit;
  if (real > chunk)
    real = chunk;
  return (int)((j - grid) / real);
}

/* result[c] = (((x[c+1] + x[c+2]) + ...) + x[c]), rounded to the dtype at
 * every hop (bfloat16: each partial travels as bfloat16), bitwise; with
 * XC_ALGO_GATHER, ((x[0] + x[1]) + ...) + x[k-1] for every element. */
static void test_allreduce_reduction_order(void **state) {
  (void)state;
  enum { N = 1021 };
  for (int variant = 0; variant < 16; variant++) {
    int bf16 = variant & 1, proto = (variant >> 1) & 1,
        gather = (variant >> 2) & 1;
    g_direct = variant >> 3; /* the same bits with direct sends */
    int k = 5 - (variant & 1), nch = 3;
    xcoll_datatype d = bf16 ? XCOLL_BFLOAT16 : XCOLL_FLOAT32;
    size_t e = esize(d), step_bytes = 64;
    int chunk_steps = 4;
    size_t step_elems =
        (proto ? step_bytes / 2 : step_bytes) / e; /* LL: half payload */
    ring_fixture *rf = malloc(sizeof *rf);
    assert_non_null(rf);
    ring_init(rf, k, nch, step_bytes, 9);
    g_direct = 0;
    uint8_t *buf[MAX_RANKS];
    for (int r = 0; r < k; r++) {
      buf[r] = malloc(N * e);
      assert_non_null(buf[r]);
      for (size_t i = 0; i < N; i++) {
        float f = random_float(r, i);
        if (bf16)
          encode_float(to_bf16_value(f), d, buf[r] + i * e);
        else
          memcpy(buf[r] + i * e, &f, 4);
      }
    }
    /* Expected, from the inputs before they are overwritten in place. */
    uint8_t *expect = malloc(N * e);
    assert_non_null(expect);
    for (size_t i = 0; i < N; i++) {
      int c = allreduce_chunk_of(i, N, e, k, nch,
                                 (size_t)chunk_steps * step_elems);
      float x[MAX_RANKS];
      for (int r = 0; r < k; r++) {
        if (bf16) {
          uint16_t b;
          memcpy(&b, buf[r] + i * e, 2);
          uint32_t u = (uint32_t)b << 16;
          memcpy(&x[r], &u, 4);
        } else {
          memcpy(&x[r], buf[r] + i * e, 4);
        }
      }
      float acc = gather ? x[0] : x[(c + 1) % k];
      for (int m = 2; m <= k; m++) {
        acc = acc + x[gather ? m - 1 : (c + m) % k];
        if (bf16)
          acc = to_bf16_value(acc);
      }
      if (bf16)
        encode_float(acc, d, expect + i * e);
      else
        memcpy(expect + i * e, &acc, 4);
    }
    worker workers[MAX_RANKS][MAX_CHANNELS];
    pthread_t threads[MAX_RANKS][MAX_CHANNELS], mover;
    assert_int_equal(pthread_create(&mover, NULL, mover_main, rf), 0);
    for (int r = 0; r < k; r++)
      for (int c = 0; c < nch; c++) {
        worker *wk = &workers[r][c];
        memset(wk, 0, sizeof *wk);
        wk->rf = rf;
        wk->position = r;
        wk->work = (xc_work){.kind = XC_COLL_ALLREDUCE,
                             .dtype = d,
                             .op = XCOLL_SUM,
                             .sendbuf = buf[r],
                             .recvbuf = buf[r],
                             .count = N,
                             .nranks = k,
                             .ring_index = r,
                             .channel = c,
                             .nchannels = nch,
                             .proto = proto ? XC_PROTO_LL : XC_PROTO_SIMPLE,
                             .chunk_steps = chunk_steps,
                             .slice_steps = 2,
                             .algo = gather ? XC_ALGO_GATHER : XC_ALGO_RING};
        if (gather) {
          wk->work.scratch_bytes = ((size_t)k * N * e + 15) / 16 * 16;
          wk->scratch = aligned_alloc(16, wk->work.scratch_bytes);
          assert_non_null(wk->scratch);
          wk->work.scratch = wk->scratch;
        }
        assert_int_equal(
            pthread_create(&threads[r][c], NULL, worker_main, wk), 0);
      }
    for (int r = 0; r < k; r++)
      for (int c = 0; c < nch; c++) {
        pthread_join(threads[r][c], NULL);
        assert_int_equal(workers[r][c].status, XCOLL_SUCCESS);
        free(workers[r][c].scratch);
      }
    atomic_store(&rf->stop, 1);
    pthread_join(mover, NULL);
    for (int r = 0; r < k; r++)
      for (size_t i = 0; i < N; i++)
        if (memcmp(buf[r] + i * e, expect + i * e, e) != 0)
          fail_msg("%s %s %s k=%d: rank %d element %zu differs from the "
                   "documented order",
                   xcoll_datatype_name(d), proto ? "LL" : "SIMPLE",
                   gather ? "gather" : "ring", k, r, i);
    for (int r = 0; r < k; r++)
      free(buf[r]);
    free(expect);
    ring_free(rf);
    free(rf);
  }
}

/* ---- abort ---- */

typedef struct abort_case {
  int proto;
  int missing_position; /* this ring position never runs */
} abort_case;

static void run_abort(const abort_case *ac) {
  enum { K = 3 };
  size_t count = 100003;
  ring_fixture *rf = malloc(sizeof *rf);
  assert_non_null(rf);
  ring_init(rf, K, 1, 64, 0);
  float *buf[K];
  worker workers[K];
  pthread_t threads[K], mover;
  assert_int_equal(pthread_create(&mover, NULL, mover_main, rf), 0);
  for (int p = 0; p < K; p++) {
    buf[p] = calloc(count, sizeof(float));
    assert_non_null(buf[p]);
    if (p == ac->missing_position)
      continue;
    worker *wk = &workers[p];
    memset(wk, 0, sizeof *wk);
    wk->rf = rf;
    wk->position = p;
    wk->status = XCOLL_ERR_INTERNAL;
    wk->work.kind = XC_COLL_ALLREDUCE;
    wk->work.dtype = XCOLL_FLOAT32;
    wk->work.op = XCOLL_SUM;
    wk->work.sendbuf = buf[p];
    wk->work.recvbuf = buf[p];
    wk->work.count = count;
    wk->work.nranks = K;
    wk->work.ring_index = p;
    wk->work.nchannels = 1;
    wk->work.proto = ac->proto;
    wk->work.chunk_steps = 4;
    wk->work.slice_steps = 2;
    assert_int_equal(pthread_create(&threads[p], NULL, worker_main, wk), 0);
  }
  /* Raise abort mid-collective: once the mover has seen traffic (a rank is
   * missing, so the others are bound to block on it afterwards). */
  while (atomic_load(&rf->total_moved) == 0)
    sched_yield();
  atomic_store(&rf->abort, 1);
  for (int p = 0; p < K; p++)
    if (p != ac->missing_position) {
      pthread_join(threads[p], NULL);
      assert_int_equal(workers[p].status, XCOLL_ERR_ABORTED);
    }
  atomic_store(&rf->stop, 1);
  pthread_join(mover, NULL);
  for (int p = 0; p < K; p++)
    free(buf[p]);
  ring_free(rf);
  free(rf);
}

static void test_abort(void **state) {
  (void)state;
  for (int proto = 0; proto < 2; proto++)
    for (int missing = 0; missing < 3; missing++) {
      abort_case ac = {.proto = proto, .missing_position = missing};
      run_abort(&ac);
    }
}

/* ---- the collective's check in LL flags ---- */

/* Wide LL lines (xc_llw_pack, xc_llw_unpack): for every payload size from
 * 0 to 170 bytes (up to 4 lines), at an odd payload offset, line l holds
 * payload bytes [56 l, 56 l + 56) and then the flag word, the flag in both
 * little-endian halves (conn.h), built here byte by byte; the unused bytes
 * of the last line and everything after the lines are left as they were;
 * unpacking gives the payload back with no flag reported; a changed byte
 * of any line's flag word is reported, and a changed payload byte is not. */
static void test_llw_lines(void **state) {
  (void)state;
  const uint32_t flag = 0x7f4a7c15u;
  enum { MAXB = 170, MAXL = (MAXB + 55) / 56 };
  uint8_t src[MAXB + 1], lines[MAXL * 64 + 64], want[sizeof lines];
  uint8_t back[MAXL * 56];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (uint8_t)(i * 29 + 5);
  for (size_t bytes = 0; bytes <= MAXB; bytes++) {
    const uint8_t *payload = src + 1;
    size_t nlines = (bytes + 55) / 56;
    memset(lines, 0xAB, sizeof lines);
    memset(want, 0xAB, sizeof want);
    for (size_t l = 0; l < nlines; l++) {
      for (size_t b = 0; b < 56 && l * 56 + b < bytes; b++)
        want[l * 64 + b] = payload[l * 56 + b];
      for (int b = 0; b < 8; b++)
        want[l * 64 + 56 + (size_t)b] = (uint8_t)(flag >> (8 * (b % 4)));
    }
    xc_llw_pack(lines, payload, bytes, flag);
    assert_memory_equal(lines, want, sizeof lines);
    memset(back, 0, sizeof back);
    assert_int_equal(xc_llw_unpack(lines, bytes, flag, back), 0);
    if (bytes > 0)
      assert_memory_equal(back, payload, bytes);
    for (size_t l = 0; l < nlines; l++)
      for (int b = 0; b < 8; b++) {
        uint8_t *f = lines + l * 64 + 56 + (size_t)b;
        *f ^= 0x10;
        assert_int_not_equal(xc_llw_unpack(lines, bytes, flag, back), 0);
        *f ^= 0x10;
      }
    if (bytes > 0) {
      lines[(bytes - 1) / 56 * 64 + (bytes - 1) % 56] ^= 0x10;
      assert_int_equal(xc_llw_unpack(lines, bytes, flag, back), 0);
    }
  }
}

/* LL lines themselves (xc_ll_pack, xc_ll_unpack; on x86-64 two lines at a
 * time in SSE2, the rest one by one): for every payload size from 0 to 72
 * bytes, at an odd payload offset, the lines hold exactly the layout
 * conn.h defines, built here byte by byte (4 payload bytes, the flag, 4
 * payload bytes, the flag; the last line zero-padded), and nothing after
 * them is written; unpacking gives the payload back with no flag
 * reported; a wrong flag in any one half of any line is reported, and a
 * changed payload byte is not (it is data). */
static void test_ll_lines(void **state) {
  (void)state;
  const uint32_t flag = 0x9e3779b1u;
  uint8_t src[80 + 1], lines[10 * XC_LL_LINE_BYTES + 16], want[sizeof lines];
  uint8_t back[10 * XC_LL_PAYLOAD_BYTES + 16];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (uint8_t)(i * 37 + 11);
  for (size_t bytes = 0; bytes <= 72; bytes++) {
    const uint8_t *payload = src + 1;
    size_t nlines = (bytes + 7) / 8;
    memset(lines, 0xAB, sizeof lines);
    memset(want, 0xAB, sizeof want);
    for (size_t l = 0; l < nlines; l++)
      for (int half = 0; half < 2; half++) {
        uint8_t *w = want + l * 16 + (size_t)half * 8;
        for (int b = 0; b < 4; b++) {
          size_t at = l * 8 + (size_t)half * 4 + (size_t)b;
          w[b] = at < bytes ? payload[at] : 0;
          w[4 + b] = (uint8_t)(flag >> (8 * b));
        }
      }
    xc_ll_pack(lines, payload, bytes, flag);
    assert_memory_equal(lines, want, sizeof lines);
    memset(back, 0, sizeof back);
    assert_int_equal(xc_ll_unpack(lines, nlines, flag, back), 0);
    if (bytes > 0)
      assert_memory_equal(back, payload, bytes);
    for (size_t l = 0; l < nlines; l++)
      for (int half = 0; half < 2; half++) {
        uint8_t *f = lines + l * 16 + (size_t)half * 8 + 4;
        f[half] ^= 0x40; /* a flag byte */
        assert_int_not_equal(xc_ll_unpack(lines, nlines, flag, back), 0);
        f[half] ^= 0x40;
        f[-4] ^= 0x40; /* a payload byte of the same half */
        assert_int_equal(xc_ll_unpack(lines, nlines, flag, back), 0);
        f[-4] ^= 0x40;
      }
  }
}

/* Position p's worker of a float32 sum LL allreduce over n elements of buf
 * (in place) among k positions of rf, ring or gather, with check as its
 * xc_work.check; the gather's scratch is the test's to free. */
static void ll_allreduce_worker(worker *wk, ring_fixture *rf, int p, int k,
                                float *buf, size_t n, int gather,
                                uint32_t check) {
  memset(wk, 0, sizeof *wk);
  wk->rf = rf;
  wk->position = p;
  xc_work *w = &wk->work;
  w->kind = XC_COLL_ALLREDUCE;
  w->dtype = XCOLL_FLOAT32;
  w->op = XCOLL_SUM;
  w->sendbuf = buf;
  w->recvbuf = buf;
  w->count = n;
  w->nranks = k;
  w->ring_index = p;
  w->nchannels = 1;
  w->proto = XC_PROTO_LL;
  w->chunk_steps = 4;
  w->slice_steps = 2;
  w->check = check;
  if (gather) {
    w->algo = XC_ALGO_GATHER;
    w->scratch_bytes = ((size_t)k * n * sizeof(float) + 15) / 16 * 16;
    wk->scratch = aligned_alloc(16, w->scratch_bytes);
    assert_non_null(wk->scratch);
    w->scratch = wk->scratch;
  }
}

/* An LL allreduce (ring and gather) at 3 positions whose xc_work.check
 * values agree completes with exact sums; when the last position's differs
 * (its rank called another collective), the positions that receive its
 * lines (the next one) return XCOLL_ERR_PROTOCOL, and no position returns
 * success with the sums of mismatched calls unchecked. */
static void test_ll_check(void **state) {
  (void)state;
  enum { K = 3, N = 37 };
  for (int variant = 0; variant < 4; variant++) {
    int gather = variant & 1, odd = variant >> 1;
    ring_fixture *rf = malloc(sizeof *rf);
    assert_non_null(rf);
    ring_init(rf, K, 1, 64, 5);
    pthread_t mover;
    assert_int_equal(pthread_create(&mover, NULL, mover_main, rf), 0);
    float buf[K][N];
    worker workers[K];
    pthread_t threads[K];
    for (int p = 0; p < K; p++) {
      for (int i = 0; i < N; i++)
        buf[p][i] = (float)(p * 100 + i);
      worker *wk = &workers[p];
      ll_allreduce_worker(wk, rf, p, K, buf[p], N, gather,
                          0x5eed1234u + (uint32_t)(odd && p == K - 1));
      assert_int_equal(
          pthread_create(&threads[p], NULL, worker_main, wk), 0);
    }
    for (int p = 0; p < K; p++)
      pthread_join(threads[p], NULL);
    atomic_store(&rf->stop, 1);
    pthread_join(mover, NULL);
    for (int p = 0; p < K; p++) {
      free(workers[p].scratch);
      if (!odd) {
        assert_int_equal(workers[p].status, XCOLL_SUCCESS);
        for (int i = 0; i < N; i++)
          assert_true(buf[p][i] == (float)(300 + 3 * i));
      } else {
        /* The odd position's check differs from its neighbours': position
         * 0 (which receives its lines) and the odd position K-1 (which
         * receives position K-2's) can each find the mismatch, whichever
         * receives first; the one that does raises abort, and the others
         * end ABORTED. Position 1..K-2 receives a matching neighbour's
         * lines only and never reports a mismatch. */
        xcoll_status got = workers[p].status;
        assert_true(got == XCOLL_ERR_PROTOCOL || got == XCOLL_ERR_ABORTED);
        if (p > 0 && p < K - 1)
          assert_int_equal(got, XCOLL_ERR_ABORTED);
      }
    }
    if (odd)
      assert_true(workers[0].status == XCOLL_ERR_PROTOCOL ||
                  workers[K - 1].status == XCOLL_ERR_PROTOCOL);
    ring_free(rf);
    free(rf);
  }
}

enum { OUTCOME_MAXN = 300 };

/* After an allreduce at k positions where position p held p * 1000 + i +
 * shift at element i: with agree, every position succeeded with the exact
 * sums; without, every position failed, with PROTOCOL or ABORTED, and one
 * with PROTOCOL. Frees the workers' scratch. Returns !agree. */
static int ring_outcome(worker *workers, int k, float (*buf)[OUTCOME_MAXN],
                        size_t n, int shift, int agree) {
  int protocol = 0;
  for (int p = 0; p < k; p++) {
    free(workers[p].scratch);
    xcoll_status got = workers[p].status;
    if (agree) {
      assert_int_equal(got, XCOLL_SUCCESS);
      for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < k; q++)
          want += (float)(q * 1000 + (int)i + shift);
        assert_true(buf[p][i] == want);
      }
    } else {
      assert_true(got == XCOLL_ERR_PROTOCOL || got == XCOLL_ERR_ABORTED);
      protocol |= got == XCOLL_ERR_PROTOCOL;
    }
  }
  if (!agree)
    assert_true(protocol);
  return !agree;
}

/* xc_conn.ll_poll (kernels/prims.h): each position's send connection is
 * the next position's receive FIFO itself, as over shm (no mover: the
 * sending kernel's stores land in the receiver's slots), and the receivers
 * read LL steps by their flags, in 16-byte lines, in wide ones
 * (xc_conn.ll_wide on both ends of every link), and in both (a position
 * that receives one format and sends the other). An LL allreduce, ring
 * and gather, at 2 to
 * 4 positions and counts of one line up to many slices, gives exact sums,
 * also where the step counters cross 2^16 (the flags' step half wraps) and
 * slots hold lines of earlier steps; the receivers' tail never moves, so
 * each step is read by its flags alone. When one position's check differs,
 * its lines never carry the flag its receiver polls for: the receiver
 * reads the step after tail instead and fails with XCOLL_ERR_PROTOCOL, no
 * position returning success. */
static void test_ll_poll(void **state) {
  (void)state;
  enum { MAXK = 4, MAXN = OUTCOME_MAXN };
  static const size_t counts[] = {1, 37, MAXN};
  static const uint64_t first_steps[] = {0, 65521};
  for (int variant = 0; variant < 2 * 3 * 3 * 2 * 2 * 3; variant++) {
    int v = variant;
    int gather = v % 2; v /= 2;
    int k = 2 + v % 3; v /= 3;
    size_t n = counts[v % 3]; v /= 3;
    uint64_t first = first_steps[v % 2]; v /= 2;
    int odd = v % 2; v /= 2;
    int wide_mode = v % 3; /* 0 none, 1 every link, 2 links from even p */
    if (gather && (size_t)k * n * sizeof(float) > 4096)
      continue; /* the gather is for small calls */
    ring_fixture *rf = malloc(sizeof *rf);
    assert_non_null(rf);
    ring_init(rf, k, 1, 64, first); /* 4 lines (32 B of payload) a step */
    /* Without a mismatch the receivers' tail is one nobody moves: each
     * step is read by its flags alone, or the call hangs. */
    static xc_atomic_u64 never[MAXK];
    for (int p = 0; p < k; p++) {
      /* The link p -> p+1: wide on both of its ends, or on neither. */
      int wide = wide_mode == 1 || (wide_mode == 2 && p % 2 == 0);
      rf->recv[(p + 1) % k][0].conn.ll_wide = wide;
      rf->send[p][0].conn = rf->recv[(p + 1) % k][0].conn;
      rf->recv[p][0].conn.ll_poll = 1;
      atomic_init(&never[p], 0);
      if (!odd)
        rf->recv[p][0].conn.tail = &never[p];
    }
    /* Three calls back to back: later ones meet slots holding lines of
     * the earlier ones' steps. */
    for (int call = 0; call < 3; call++) {
      static float buf[MAXK][MAXN];
      worker workers[MAXK];
      pthread_t threads[MAXK];
      for (int p = 0; p < k; p++) {
        for (size_t i = 0; i < n; i++)
          buf[p][i] = (float)(p * 1000 + (int)i + call);
        worker *wk = &workers[p];
        ll_allreduce_worker(wk, rf, p, k, buf[p], n, gather,
                            0x5eed1234u + (uint32_t)call * 7u +
                                (uint32_t)(odd && p == k - 1) * 0x10000u);
        assert_int_equal(
            pthread_create(&threads[p], NULL, worker_main, wk), 0);
      }
      for (int p = 0; p < k; p++)
        pthread_join(threads[p], NULL);
      if (ring_outcome(workers, k, buf, n, call, !odd))
        break; /* the FIFOs are out of step now */
    }
    ring_free(rf);
    free(rf);
  }
}

/* xc_conn.checks (kernels/conn.h): each position's send connection is
 * the next position's receive FIFO itself, as over shm, and every link
 * carries a slot's check beside sizes[]. A SIMPLE allreduce, ring and
 * gather, at 2 to 4 positions and counts of one step up to several
 * slices, gives exact sums when the positions' checks agree. When one
 * position's check differs (its rank called another collective with the
 * same count), a position that receives its steps fails with
 * XCOLL_ERR_PROTOCOL and none returns success: without the checks
 * nothing in a SIMPLE step would tell the calls apart. */
static void test_simple_checks(void **state) {
  (void)state;
  enum { MAXK = 4, MAXN = OUTCOME_MAXN };
  static const size_t counts[] = {1, 37, MAXN};
  static uint32_t checks[MAXK][XCOLL_STEPS];
  for (int variant = 0; variant < 2 * 3 * 3 * 2; variant++) {
    int v = variant;
    int gather = v % 2; v /= 2;
    int k = 2 + v % 3; v /= 3;
    size_t n = counts[v % 3]; v /= 3;
    int odd = v % 2;
    if (gather && (size_t)k * n * sizeof(float) > 4096)
      continue;
    ring_fixture *rf = malloc(sizeof *rf);
    assert_non_null(rf);
    ring_init(rf, k, 1, 64, 3); /* 16 floats a step */
    for (int p = 0; p < k; p++) {
      xc_conn *in = &rf->recv[(p + 1) % k][0].conn;
      in->direct_req = NULL; /* no mover: the sender's stores land here */
      in->direct_to = NULL;
      in->direct_to_bytes = NULL;
      in->checks = checks[p];
      rf->send[p][0].conn = *in;
    }
    float buf[MAXK][MAXN];
    worker workers[MAXK];
    pthread_t threads[MAXK];
    for (int p = 0; p < k; p++) {
      for (size_t i = 0; i < n; i++)
        buf[p][i] = (float)(p * 1000 + (int)i);
      worker *wk = &workers[p];
      ll_allreduce_worker(wk, rf, p, k, buf[p], n, gather,
                          0x5eed1234u + (uint32_t)(odd && p == k - 1));
      wk->work.proto = XC_PROTO_SIMPLE;
      assert_int_equal(pthread_create(&threads[p], NULL, worker_main, wk), 0);
    }
    for (int p = 0; p < k; p++)
      pthread_join(threads[p], NULL);
    ring_outcome(workers, k, buf, n, 0, !odd);
    ring_free(rf);
    free(rf);
  }
}

/* ---- NaN, trace hook, bad arguments ---- */

typedef struct trace_log {
  pthread_mutex_t lock;
  int calls;
  size_t bytes;
  int bad_times;
  char first[32];
} trace_log;

static void trace_hook(void *ctx, int channel, const char *primitive,
                       size_t bytes, uint64_t start_ns, uint64_t end_ns) {
  trace_log *log = ctx;
  (void)channel;
  pthread_mutex_lock(&log->lock);
  if (log->calls == 0)
    snprintf(log->first, sizeof log->first, "%s", primitive);
  log->calls++;
  log->bytes += bytes;
  if (end_ns < start_ns)
    log->bad_times++;
  pthread_mutex_unlock(&log->lock);
}

/* A NaN on one rank reaches every rank (float32 sum, bfloat16 max), and the
 * trace hook sees every primitive call with its bytes. */
static void test_nan_and_trace(void **state) {
  (void)state;
  enum { K = 3, N = 301 };
  for (int variant = 0; variant < 2; variant++) {
    xcoll_datatype d = variant ? XCOLL_BFLOAT16 : XCOLL_FLOAT32;
    xcoll_op op = variant ? XCOLL_MAX : XCOLL_SUM;
    size_t e = esize(d);
    ring_fixture *rf = malloc(sizeof *rf);
    assert_non_null(rf);
    ring_init(rf, K, 1, 64, 3);
    uint8_t *buf[K];
    worker workers[K];
    pthread_t threads[K], mover;
    trace_log log;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.lock, NULL);
    for (int p = 0; p < K; p++) {
      buf[p] = malloc(N * e);
      assert_non_null(buf[p]);
      write_input(buf[p], p, 0, N, d, op);
      if (p == 1)
        for (size_t i = 0; i < N; i += 10) {
          if (variant) {
            uint16_t nan = 0x7fc1;
            memcpy(buf[p] + i * e, &nan, 2);
          } else {
            float nan = NAN;
            memcpy(buf[p] + i * e, &nan, 4);
          }
        }
    }
    assert_int_equal(pthread_create(&mover, NULL, mover_main, rf), 0);
    for (int p = 0; p < K; p++) {
      worker *wk = &workers[p];
      memset(wk, 0, sizeof *wk);
      wk->rf = rf;
      wk->position = p;
      wk->work = (xc_work){.kind = XC_COLL_ALLREDUCE,
                           .dtype = d,
                           .op = op,
                           .sendbuf = buf[p],
                           .recvbuf = buf[p],
                           .count = N,
                           .nranks = K,
                           .ring_index = p,
                           .nchannels = 1,
                           .proto = variant ? XC_PROTO_LL : XC_PROTO_SIMPLE,
                           .chunk_steps = 4,
                           .slice_steps = 2,
                           .trace = trace_hook,
                           .trace_ctx = &log};
      assert_int_equal(pthread_create(&threads[p], NULL, worker_main, wk), 0);
    }
    for (int p = 0; p < K; p++) {
      pthread_join(threads[p], NULL);
      assert_int_equal(workers[p].status, XCOLL_SUCCESS);
    }
    atomic_store(&rf->stop, 1);
    pthread_join(mover, NULL);
    for (int p = 0; p < K; p++)
      for (size_t i = 0; i < N; i++) {
        int nan;
        if (variant) {
          uint16_t h;
          memcpy(&h, buf[p] + i * e, 2);
          nan = (h & 0x7fff) > 0x7f80;
        } else {
          float f;
          memcpy(&f, buf[p] + i * e, 4);
          nan = isnan(f);
        }
        assert_int_equal(nan, i % 10 == 0);
      }
    /* Each rank makes 2(k-1) primitive calls per loop: the first k-1 plus
     * recvReduceCopySend cover all k chunks, the last k-1 all chunks but
     * its own; over the ring that is (2k - 1) buffers' worth of bytes. */
    assert_true(log.calls >= K * 2 * (K - 1));
    assert_int_equal(log.bytes, (size_t)(2 * K - 1) * N * e);
    assert_int_equal(log.bad_times, 0);
    assert_string_equal(log.first, "send");
    pthread_mutex_destroy(&log.lock);
    for (int p = 0; p < K; p++)
      free(buf[p]);
    ring_free(rf);
    free(rf);
  }
}

static void test_bad_arguments(void **state) {
  (void)state;
  float x = 1;
  xc_work w = {.kind = XC_COLL_ALLREDUCE,
               .dtype = XCOLL_FLOAT32,
               .op = XCOLL_SUM,
               .sendbuf = &x,
               .recvbuf = &x,
               .count = 1,
               .nranks = 1,
               .nchannels = 1,
               .chunk_steps = 4,
               .slice_steps = 2};
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL), XCOLL_SUCCESS);
  w.slice_steps = 5; /* larger than the chunk */
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  w.slice_steps = 2;
  /* The gather allreduce needs 16-byte aligned scratch for nranks shares,
   * and is an allreduce only. */
  _Alignas(16) float scratch[4];
  w.algo = XC_ALGO_GATHER;
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT); /* no scratch */
  w.scratch = scratch;
  w.scratch_bytes = 2; /* less than one element */
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  w.scratch_bytes = sizeof scratch;
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL), XCOLL_SUCCESS);
  w.kind = XC_COLL_BROADCAST;
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  w.kind = XC_COLL_ALLREDUCE;
  w.algo = 7; /* unknown */
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  w.algo = XC_ALGO_RING;
  w.scratch = NULL;
  w.nranks = 2; /* no connections */
  assert_int_equal(xc_ring_run(&w, NULL, NULL, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  ring_fixture *rf = malloc(sizeof *rf);
  assert_non_null(rf);
  ring_init(rf, 2, 1, 24, 0); /* step_bytes not a multiple of 16 */
  assert_int_equal(xc_ring_run(&w, &rf->send[0][0].conn,
                               &rf->recv[0][0].conn, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  ring_free(rf);
  free(rf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_allreduce),
      cmocka_unit_test(test_allreduce_gather),
      cmocka_unit_test(test_allreduce_every_dtype_op),
      cmocka_unit_test(test_reduce_scatter),
      cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_allreduce_reduction_order),
      cmocka_unit_test(test_nan_and_trace),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_ll_check),
      cmocka_unit_test(test_ll_lines),
      cmocka_unit_test(test_ll_poll),
      cmocka_unit_test(test_llw_lines),
      cmocka_unit_test(test_simple_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
