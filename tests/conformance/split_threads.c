/* split_threads.c - two communicators split from the world, used at the same
 * time from two threads, must both give correct results.
 *
 * Run one copy per rank under a launcher:
 *   xcollrun --nproc-per-node 4 --master-port 0 split_threads [--rounds N]
 * Every rank splits the world twice:
 *   A: by rank parity (color rank % 2, key rank): two communicators of about
 *      half the ranks (one of a single rank when the world has 2 or 3);
 *   B: every rank (color 0) with the key order reversed, so that B's rank of
 *      world rank r is world_size - 1 - r.
 * Thread 1 then loops over collectives on A while thread 2 loops over
 * collectives on B (allreduce, allgather, broadcast, reduce_scatter; counts
 * from 1 element to several pipelining chunks; blocking, wait and test
 * completion), and each ends a round with several non-blocking requests of
 * its own in flight at once, waited in reverse order. Inputs are small
 * integers, exact in every dtype used, so every rank computes every
 * expected output locally and compares it bit for bit.
 * The xcoll contract allows different communicators to be used concurrently
 * from different threads; a library that shares unprotected state between
 * communicators (a progress engine, a connection table, a request pool) or
 * mixes up their messages fails here. Exit status 0 when every check passed
 * on every rank. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xcoll.h"

enum mode { MODE_BLOCKING, MODE_WAIT, MODE_TEST, NUM_MODES };
static const char *const mode_names[NUM_MODES] = {"blocking", "wait", "test"};

enum coll_kind { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_REDUCE_SCATTER, NUM_C };
static const char *const coll_names[NUM_C] = {"allreduce", "allgather",
                                              "broadcast", "reduce_scatter"};

/* Element counts: from one element to several 512 KiB pipelining chunks
 * (300000 float64 are 2.3 MiB, and allgather moves world_size times that). */
static const size_t counts[] = {1, 7, 1021, 40000, 300000};
#define NUM_COUNTS (sizeof counts / sizeof counts[0])
static const xcoll_datatype dtypes[] = {XCOLL_FLOAT32, XCOLL_INT32,
                                        XCOLL_FLOAT64, XCOLL_BFLOAT16};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])
#define MAX_PRINTED 10

/* One thread's communicator and its record of checks. */
typedef struct worker {
  const char *name; /* "A" or "B" */
  xcoll_comm_t comm;
  int world_rank;
  int rank;       /* in comm */
  int world_size; /* of comm */
  uint64_t salt;  /* distinguishes A's inputs from B's */
  int rounds;
  pthread_barrier_t *start;
  long checks;
  long failed;
  long printed;
  char fatal[512]; /* non-empty: the thread stopped on this error */
} worker;

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* The input of comm rank r at element i of operation number op_id: an
 * integer in [-16, 16], so that a sum over 8 ranks (|sum| <= 128) is exact
 * in bfloat16 (8 significant bits) and in every other dtype used here. */
static int input_int(const worker *w, int r, size_t i, uint64_t op_id) {
  uint64_t h = mix64(mix64(w->salt ^ (op_id * 7919u + (uint64_t)r)) ^ i);
  return (int)(h % 33) - 16;
}

static size_t dtype_size(xcoll_datatype dt) { return xcoll_datatype_size(dt); }

static void store(void *buf, size_t idx, xcoll_datatype dt, int v) {
  char *p = (char *)buf + idx * dtype_size(dt);
  switch (dt) {
  case XCOLL_FLOAT32: {
    float f = (float)v;
    memcpy(p, &f, 4);
    break;
  }
  case XCOLL_INT32: {
    int32_t x = v;
    memcpy(p, &x, 4);
    break;
  }
  case XCOLL_FLOAT64: {
    double d = v;
    memcpy(p, &d, 8);
    break;
  }
  default: { /* bfloat16: the upper half of the float32, exact for |v| <= 256 */
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t b = (uint16_t)(bits >> 16);
    memcpy(p, &b, 2);
    break;
  }
  }
}

/* Read an element back as a double (exact for all values used here). */
static double load(const void *buf, size_t idx, xcoll_datatype dt) {
  const char *p = (const char *)buf + idx * dtype_size(dt);
  switch (dt) {
  case XCOLL_FLOAT32: {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  case XCOLL_INT32: {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
  }
  case XCOLL_FLOAT64: {
    double d;
    memcpy(&d, p, 8);
    return d;
  }
  default: {
    uint16_t b;
    memcpy(&b, p, 2);
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  }
}

static void mismatch(worker *w, const char *what, size_t idx, double want,
                     double got) {
  w->failed++;
  if (w->printed++ >= MAX_PRINTED)
    return;
  printf("MISMATCH world rank %d, comm %s (rank %d of %d): %s: index %zu "
         "expected %.17g got %.17g\n",
         w->world_rank, w->name, w->rank, w->world_size, what, idx, want, got);
}

/* Complete a non-blocking call the way mode asks. */
static xcoll_status finish(xcoll_status st, xcoll_request_t req, int mode) {
  if (st != XCOLL_SUCCESS)
    return st;
  if (req == NULL)
    return XCOLL_ERR_INTERNAL; /* success must come with a request */
  if (mode == MODE_TEST) {
    int done = 0;
    long polls = 0;
    while (!done) {
      xcoll_status ts = xcoll_test(req, &done);
      if (ts != XCOLL_SUCCESS && !done)
        return ts;
      if (!done && ++polls % 4 == 0)
        sched_yield(); /* the peers we wait for share the cores */
    }
  }
  return xcoll_wait(req);
}

/* The buffers and expected outputs of one collective. */
typedef struct op_desc {
  int coll;
  xcoll_datatype dt;
  size_t count; /* per rank for allgather and reduce_scatter */
  int root;
  uint64_t op_id;
  void *send;
  void *recv;
  size_t recv_elems;
} op_desc;

/* Allocate and fill the buffers of d for this worker's rank. */
static int prepare(const worker *w, op_desc *d) {
  const int P = w->world_size;
  size_t send_elems = d->count, recv_elems = d->count;
  if (d->coll == C_ALLGATHER)
    recv_elems = d->count * (size_t)P;
  if (d->coll == C_REDUCE_SCATTER)
    send_elems = d->count * (size_t)P;
  size_t es = dtype_size(d->dt);
  d->send = malloc(send_elems * es + 1);
  d->recv = malloc(recv_elems * es + 1);
  if (!d->send || !d->recv)
    return -1;
  d->recv_elems = recv_elems;
  /* A recognisable non-result in the output, so a missing write shows. */
  memset(d->recv, 0x7f, recv_elems * es + 1);
  for (size_t i = 0; i < send_elems; i++)
    store(d->send, i, d->dt, input_int(w, w->rank, i, d->op_id));
  return 0;
}

static xcoll_status issue(const worker *w, const op_desc *d, int mode,
                          xcoll_request_t *req) {
  *req = NULL;
  int blocking = mode == MODE_BLOCKING;
  switch (d->coll) {
  case C_ALLREDUCE:
    return blocking ? xcoll_allreduce(d->send, d->recv, d->count, d->dt,
                                      XCOLL_SUM, w->comm)
                    : xcoll_iallreduce(d->send, d->recv, d->count, d->dt,
                                       XCOLL_SUM, w->comm, NULL, req);
  case C_ALLGATHER:
    return blocking ? xcoll_allgather(d->send, d->recv, d->count, d->dt,
                                      w->comm)
                    : xcoll_iallgather(d->send, d->recv, d->count, d->dt,
                                       w->comm, NULL, req);
  case C_BROADCAST:
    /* Out of place: root sends from send, everyone receives in recv. */
    return blocking ? xcoll_broadcast(d->send, d->recv, d->count, d->dt,
                                      d->root, w->comm)
                    : xcoll_ibroadcast(d->send, d->recv, d->count, d->dt,
                                       d->root, w->comm, NULL, req);
  default:
    return blocking ? xcoll_reduce_scatter(d->send, d->recv, d->count, d->dt,
                                           XCOLL_SUM, w->comm)
                    : xcoll_ireduce_scatter(d->send, d->recv, d->count, d->dt,
                                            XCOLL_SUM, w->comm, NULL, req);
  }
}

/* Compare d's output with the reference computed from every rank's input,
 * then free the buffers. */
static void verify(worker *w, const op_desc *d, const char *how) {
  const int P = w->world_size;
  char what[160];
  snprintf(what, sizeof what, "%s %s count=%zu root=%d op #%llu (%s)",
           coll_names[d->coll], xcoll_datatype_name(d->dt), d->count, d->root,
           (unsigned long long)d->op_id, how);
  long before = w->failed;
  for (size_t k = 0; k < d->recv_elems && w->failed - before < 3; k++) {
    double want = 0;
    switch (d->coll) {
    case C_ALLREDUCE:
      for (int r = 0; r < P; r++)
        want += input_int(w, r, k, d->op_id);
      break;
    case C_ALLGATHER:
      want = input_int(w, (int)(k / d->count), k % d->count, d->op_id);
      break;
    case C_BROADCAST:
      want = input_int(w, d->root, k, d->op_id);
      break;
    default: /* my block of the sums */
      for (int r = 0; r < P; r++)
        want += input_int(w, r, (size_t)w->rank * d->count + k, d->op_id);
      break;
    }
    double got = load(d->recv, k, d->dt);
    if (got != want)
      mismatch(w, what, k, want, got);
  }
  w->checks++;
  free(d->send);
  free(d->recv);
}

static int stop(worker *w, const char *what, xcoll_status st) {
  snprintf(w->fatal, sizeof w->fatal, "%s returned %s: %s", what,
           xcoll_strerror(st), xcoll_comm_last_error(w->comm));
  return -1;
}

/* One round of single collectives, each completed before the next. */
static int round_single(worker *w, int round, uint64_t *op_id) {
  for (size_t ci = 0; ci < NUM_COUNTS; ci++) {
    for (int coll = 0; coll < NUM_C; coll++) {
      op_desc d = {0};
      d.coll = coll;
      d.dt = dtypes[(ci + (size_t)coll + (size_t)round) % NUM_DTYPES];
      d.count = counts[ci];
      d.root = (int)((*op_id) % (uint64_t)w->world_size);
      d.op_id = (*op_id)++;
      int mode = (int)((ci + (size_t)coll + (size_t)round) % NUM_MODES);
      if (prepare(w, &d) != 0)
        return stop(w, "malloc", XCOLL_ERR_NO_MEMORY);
      xcoll_request_t req;
      xcoll_status st = issue(w, &d, mode, &req);
      if (mode != MODE_BLOCKING)
        st = finish(st, req, mode);
      if (st != XCOLL_SUCCESS)
        return stop(w, coll_names[coll], st);
      verify(w, &d, mode_names[mode]);
    }
  }
  return 0;
}

/* Several non-blocking requests of this thread in flight together, waited
 * in reverse order of issue (one completed by polling first). */
static int round_inflight(worker *w, int round, uint64_t *op_id) {
  enum { NOPS = 5 };
  op_desc d[NOPS];
  xcoll_request_t req[NOPS];
  for (int k = 0; k < NOPS; k++) {
    memset(&d[k], 0, sizeof d[k]);
    d[k].coll = (k + round) % NUM_C;
    d[k].dt = dtypes[(size_t)k % NUM_DTYPES];
    d[k].count = counts[(size_t)(k + round) % NUM_COUNTS];
    d[k].root = (w->world_size - 1 + k) % w->world_size;
    d[k].op_id = (*op_id)++;
    if (prepare(w, &d[k]) != 0)
      return stop(w, "malloc", XCOLL_ERR_NO_MEMORY);
    xcoll_status st = issue(w, &d[k], MODE_WAIT, &req[k]);
    if (st != XCOLL_SUCCESS)
      return stop(w, "issuing requests in flight together", st);
  }
  for (int k = NOPS - 1; k >= 0; k--) {
    xcoll_status st = finish(XCOLL_SUCCESS, req[k],
                             k == NOPS - 1 ? MODE_TEST : MODE_WAIT);
    if (st != XCOLL_SUCCESS)
      return stop(w, "waiting (in reverse order) on requests in flight", st);
  }
  for (int k = 0; k < NOPS; k++)
    verify(w, &d[k], "in flight with 4 others");
  return 0;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  uint64_t op_id = 0;
  /* Both threads start their loops together, so that they overlap. */
  pthread_barrier_wait(w->start);
  for (int round = 0; round < w->rounds; round++) {
    if (round_single(w, round, &op_id) != 0 ||
        round_inflight(w, round, &op_id) != 0)
      break;
  }
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, xcoll_status st, xcoll_comm_t comm, int rank) {
  printf("FATAL world rank %d: %s returned %s: %s\n", rank, what,
         xcoll_strerror(st), comm ? xcoll_comm_last_error(comm)
                                  : xcoll_last_error());
  exit(2);
}

int main(int argc, char **argv) {
  int rounds = 6;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  double t0 = now_s();
  xcoll_comm_t world = NULL;
  int rank = -1, P = 0;
  xcoll_status st = xcoll_comm_init_env(&world);
  if (st != XCOLL_SUCCESS)
    die("xcoll_comm_init_env", st, NULL, rank);
  if (xcoll_comm_rank(world, &rank) != XCOLL_SUCCESS ||
      xcoll_comm_size(world, &P) != XCOLL_SUCCESS)
    die("comm_rank/comm_size", XCOLL_ERR_INTERNAL, world, rank);

  worker w[2];
  memset(w, 0, sizeof w);
  xcoll_comm_t comm_a = NULL, comm_b = NULL;
  st = xcoll_comm_split(world, rank % 2, rank, &comm_a);
  if (st != XCOLL_SUCCESS)
    die("xcoll_comm_split by parity", st, world, rank);
  st = xcoll_comm_split(world, 0, P - 1 - rank, &comm_b);
  if (st != XCOLL_SUCCESS)
    die("xcoll_comm_split with reversed keys", st, world, rank);
  w[0].name = "A";
  w[0].comm = comm_a;
  w[0].salt = 0xA0000000ULL + (uint64_t)(rank % 2);
  w[1].name = "B";
  w[1].comm = comm_b;
  w[1].salt = 0xB0000000ULL;

  /* The split must have given the documented ranks and sizes. */
  long setup_failed = 0;
  const int want_rank[2] = {rank / 2, P - 1 - rank};
  const int want_size[2] = {rank % 2 ? P / 2 : (P + 1) / 2, P};
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  for (int t = 0; t < 2; t++) {
    w[t].world_rank = rank;
    w[t].rounds = rounds;
    w[t].start = &start;
    if (xcoll_comm_rank(w[t].comm, &w[t].rank) != XCOLL_SUCCESS ||
        xcoll_comm_size(w[t].comm, &w[t].world_size) != XCOLL_SUCCESS ||
        w[t].rank != want_rank[t] || w[t].world_size != want_size[t]) {
      printf("MISMATCH world rank %d: comm %s has rank %d of %d, expected "
             "rank %d of %d\n",
             rank, w[t].name, w[t].rank, w[t].world_size, want_rank[t],
             want_size[t]);
      setup_failed++;
    }
  }
  if (setup_failed == 0) {
    pthread_t tid[2];
    for (int t = 0; t < 2; t++)
      if (pthread_create(&tid[t], NULL, worker_main, &w[t]) != 0) {
        printf("FATAL world rank %d: pthread_create failed\n", rank);
        exit(2);
      }
    for (int t = 0; t < 2; t++)
      pthread_join(tid[t], NULL);
  }
  pthread_barrier_destroy(&start);

  int64_t mine[2] = {setup_failed, 0}, total[2] = {0, 0};
  for (int t = 0; t < 2; t++) {
    mine[0] += w[t].failed + (w[t].fatal[0] ? 1 : 0);
    mine[1] += w[t].checks;
    if (w[t].fatal[0])
      printf("FATAL world rank %d, comm %s: %s\n", rank, w[t].name,
             w[t].fatal);
  }
  /* A thread that stopped on an error left its communicator out of step
   * with its peers: the world communicator is still in step. */
  st = xcoll_allreduce(mine, total, 2, XCOLL_INT64, XCOLL_SUM, world);
  if (st != XCOLL_SUCCESS)
    die("final allreduce of the failure counts", st, world, rank);
  printf("world rank %d/%d backend %s: %lld checks, %lld failed, %.2f s\n",
         rank, P, xcoll_comm_backend(world), (long long)mine[1],
         (long long)mine[0], now_s() - t0);
  if (rank == 0)
    printf("split_threads %s: backend %s, %d ranks, %lld checks, %lld "
           "failed\n",
           total[0] ? "FAILED" : "PASSED", xcoll_comm_backend(world), P,
           (long long)total[1], (long long)total[0]);
  if (mine[0] == 0) {
    xcoll_comm_destroy(comm_a);
    xcoll_comm_destroy(comm_b);
  }
  st = xcoll_comm_destroy(world);
  if (st != XCOLL_SUCCESS)
    die("xcoll_comm_destroy", st, NULL, rank);
  return total[0] ? 1 : 0;
}
