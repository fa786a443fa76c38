/* mixed_calls.c - irregular mixes of the calls, each result checked
 * against a value computed here from (sender, receiver, index, round):
 *
 *   alltoallv   per-pair counts drawn at random (a fifth of them 0), send
 *               blocks placed last rank first with gaps, receive blocks with
 *               gaps; the gaps must keep their fill;
 *   allpairs    a group in which every rank sends to and receives from every
 *               rank (itself included), each rank posting its 2P calls in an
 *               order of its own, with a random count per ordered pair;
 *   fanin       a group of 64 small sends to the next rank, an allreduce and
 *               64 receives from the previous rank;
 *   inflight    8 different non-blocking calls in flight at once (max, bxor,
 *               allgather, broadcast, alltoall, gather, bor reduce_scatter,
 *               barrier), waited for last to first;
 *   scatter     in place on a root drawn at random;
 *   premul      a pre-multiplied sum whose scalar differs per rank;
 *   split       non-blocking allreduces on an odd/even split and on the
 *               world interleaved, waited for in the other order.
 *
 * Odd rounds use the non-blocking forms (xcoll_ialltoallv, xcoll_igroup_end)
 * where the even ones block. Every rank draws the same plan from the round's
 * seed. Usage: mixed_calls [ROUNDS] (under xcollrun, any backend, 1 to 16
 * ranks). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_call.h"
#include "xcoll.h"

#define MAX_RANKS 16

static int rank, world;
static xcoll_comm_t comm;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);           \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* xorshift64: the same sequence on every rank for one seed. */
static uint64_t seed;
static uint64_t draw(uint64_t below) {
  seed ^= seed << 13;
  seed ^= seed >> 7;
  seed ^= seed << 17;
  return seed % below;
}

/* The element index i that rank src sends rank dst in round r. */
static int64_t value(int src, int dst, size_t i, int r) {
  return (int64_t)src * 1000003 + (int64_t)dst * 1009 + (int64_t)i * 7 + r;
}

static void *must_alloc(size_t bytes) {
  void *p = malloc(bytes > 0 ? bytes : 1);
  EXPECT(p != NULL, "out of memory for %zu bytes", bytes);
  return p;
}

static void alltoallv(int r) {
  size_t counts[MAX_RANKS][MAX_RANKS];
  for (int a = 0; a < world; a++)
    for (int b = 0; b < world; b++)
      counts[a][b] = draw(5) == 0 ? 0 : draw(40);
  size_t sc[MAX_RANKS], sd[MAX_RANKS], rc[MAX_RANKS], rd[MAX_RANKS];
  size_t at = 3;
  for (int p = world - 1; p >= 0; p--) { /* last rank's block first */
    sc[p] = counts[rank][p];
    sd[p] = at;
    at += sc[p] + draw(3);
  }
  size_t send_len = at + 2;
  at = 1;
  for (int p = 0; p < world; p++) {
    rc[p] = counts[p][rank];
    rd[p] = at;
    at += rc[p] + draw(2);
  }
  size_t recv_len = at + 1;
  int64_t *send = must_alloc(send_len * sizeof *send);
  int64_t *recv = must_alloc(recv_len * sizeof *recv);
  for (size_t i = 0; i < send_len; i++)
    send[i] = -7;
  for (size_t i = 0; i < recv_len; i++)
    recv[i] = -9;
  for (int p = 0; p < world; p++)
    for (size_t i = 0; i < sc[p]; i++)
      send[sd[p] + i] = value(rank, p, i, r);
  if (r % 2) {
    xcoll_request_t request;
    CHECK(xcoll_ialltoallv(send, sc, sd, recv, rc, rd, XCOLL_INT64, comm,
                           NULL, &request));
    CHECK(xcoll_wait(request));
  } else {
    CHECK(xcoll_alltoallv(send, sc, sd, recv, rc, rd, XCOLL_INT64, comm));
  }
  size_t gap = 0;
  for (int p = 0; p < world; p++) {
    for (; gap < rd[p]; gap++)
      EXPECT(recv[gap] == -9, "alltoallv round %d: gap element %zu written",
             r, gap);
    for (size_t i = 0; i < rc[p]; i++)
      EXPECT(recv[rd[p] + i] == value(p, rank, i, r),
             "alltoallv round %d: element %zu from rank %d is %lld", r, i, p,
             (long long)recv[rd[p] + i]);
    gap = rd[p] + rc[p];
  }
  for (; gap < recv_len; gap++)
    EXPECT(recv[gap] == -9, "alltoallv round %d: tail element %zu written", r,
           gap);
  free(send);
  free(recv);
}

static void allpairs(int r) {
  size_t counts[MAX_RANKS][MAX_RANKS];
  for (int a = 0; a < world; a++)
    for (int b = 0; b < world; b++)
      counts[a][b] = draw(100);
  int64_t *out[MAX_RANKS], *in[MAX_RANKS];
  for (int p = 0; p < world; p++) {
    out[p] = must_alloc(counts[rank][p] * sizeof *out[p]);
    in[p] = must_alloc(counts[p][rank] * sizeof *in[p]);
    for (size_t i = 0; i < counts[rank][p]; i++)
      out[p][i] = value(rank, p, i, r);
    for (size_t i = 0; i < counts[p][rank]; i++)
      in[p][i] = -1;
  }
  /* This rank's order: calls 0..P-1 send to that rank, P..2P-1 receive. */
  int order[2 * MAX_RANKS];
  for (int k = 0; k < 2 * world; k++)
    order[k] = k;
  for (int k = 2 * world - 1; k > 0; k--) {
    int j = (int)((unsigned)(rank * 31 + k * 17 + r) % (unsigned)(k + 1));
    int t = order[k];
    order[k] = order[j];
    order[j] = t;
  }
  CHECK(xcoll_group_start());
  for (int k = 0; k < 2 * world; k++) {
    int p = order[k] % world;
    if (order[k] >= world)
      CHECK(xcoll_recv(in[p], counts[p][rank], XCOLL_INT64, p, comm));
    else
      CHECK(xcoll_send(out[p], counts[rank][p], XCOLL_INT64, p, comm));
  }
  if (r % 2) {
    xcoll_request_t request;
    CHECK(xcoll_igroup_end(&request));
    CHECK(xcoll_wait(request));
  } else {
    CHECK(xcoll_group_end());
  }
  for (int p = 0; p < world; p++) {
    for (size_t i = 0; i < counts[p][rank]; i++)
      EXPECT(in[p][i] == value(p, rank, i, r),
             "allpairs round %d: element %zu from rank %d is %lld", r, i, p,
             (long long)in[p][i]);
    free(out[p]);
    free(in[p]);
  }
}

static void fanin(int r) {
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  int64_t out[64][3], in[64][3];
  double mine[5], sum[5];
  for (int k = 0; k < 64; k++)
    for (int i = 0; i < 3; i++) {
      out[k][i] = value(rank, k, (size_t)i, r);
      in[k][i] = -1;
    }
  for (int i = 0; i < 5; i++)
    mine[i] = rank + i * 0.5;
  CHECK(xcoll_group_start());
  for (int k = 0; k < 64; k++)
    CHECK(xcoll_send(out[k], (size_t)(1 + k % 3), XCOLL_INT64, next, comm));
  CHECK(xcoll_allreduce(mine, sum, 5, XCOLL_FLOAT64, XCOLL_SUM, comm));
  for (int k = 0; k < 64; k++)
    CHECK(xcoll_recv(in[k], (size_t)(1 + k % 3), XCOLL_INT64, prev, comm));
  CHECK(xcoll_group_end());
  for (int k = 0; k < 64; k++)
    for (int i = 0; i < 1 + k % 3; i++)
      EXPECT(in[k][i] == value(prev, k, (size_t)i, r),
             "fanin round %d: message %d element %d", r, k, i);
  for (int i = 0; i < 5; i++) {
    double want = 0;
    for (int q = 0; q < world; q++)
      want += q + i * 0.5;
    EXPECT(sum[i] == want, "fanin round %d: allreduce[%d] = %g, not %g", r, i,
           sum[i], want);
  }
}

static void inflight(int r) {
  size_t n = 1 + draw(300);
  int root = (int)draw((uint64_t)world);
  size_t P = (size_t)world;
  int32_t *mx = must_alloc(n * sizeof *mx);
  uint8_t *bx = must_alloc(n);
  int64_t *ag = must_alloc(n * P * sizeof *ag);
  float *bc = must_alloc(n * sizeof *bc);
  int64_t *a2s = must_alloc(n * P * sizeof *a2s);
  int64_t *a2r = must_alloc(n * P * sizeof *a2r);
  double *gin = must_alloc(n * sizeof *gin);
  double *gout = must_alloc(n * P * sizeof *gout);
  uint64_t *rsin = must_alloc(n * P * sizeof *rsin);
  uint64_t *rsout = must_alloc(n * sizeof *rsout);
  for (size_t i = 0; i < n; i++) {
    mx[i] = rank * 3 + (int32_t)i;
    bx[i] = (uint8_t)(rank * 37 + (int)i);
    bc[i] = rank == root ? (float)i * 2 : -1.0f;
    gin[i] = rank + (double)i * 0.25;
    ag[(size_t)rank * n + i] = value(rank, 0, i, r);
  }
  for (size_t p = 0; p < P; p++)
    for (size_t i = 0; i < n; i++) {
      a2s[p * n + i] = value(rank, (int)p, i, r);
      rsin[p * n + i] = (uint64_t)(rank + 1) << (p % 8) | i;
    }
  xcoll_request_t q[8];
  CHECK(xcoll_iallreduce(mx, mx, n, XCOLL_INT32, XCOLL_MAX, comm, NULL, &q[0]));
  CHECK(xcoll_iallreduce(bx, bx, n, XCOLL_UINT8, XCOLL_BXOR, comm, NULL, &q[1]));
  CHECK(xcoll_iallgather(ag + (size_t)rank * n, ag, n, XCOLL_INT64, comm, NULL,
                         &q[2]));
  CHECK(xcoll_ibroadcast(bc, bc, n, XCOLL_FLOAT32, root, comm, NULL, &q[3]));
  CHECK(xcoll_ialltoall(a2s, a2r, n, XCOLL_INT64, comm, NULL, &q[4]));
  CHECK(xcoll_igather(gin, gout, n, XCOLL_FLOAT64, root, comm, NULL, &q[5]));
  CHECK(xcoll_ireduce_scatter(rsin, rsout, n, XCOLL_UINT64, XCOLL_BOR, comm,
                              NULL, &q[6]));
  CHECK(xcoll_ibarrier(comm, &q[7]));
  for (int k = 7; k >= 0; k--)
    CHECK(xcoll_wait(q[k]));
  for (size_t i = 0; i < n; i++) {
    EXPECT(mx[i] == (world - 1) * 3 + (int32_t)i, "inflight: max[%zu]", i);
    uint8_t x = 0;
    uint64_t o = 0;
    for (int p = 0; p < world; p++) {
      x ^= (uint8_t)(p * 37 + (int)i);
      o |= (uint64_t)(p + 1) << (rank % 8) | i;
    }
    EXPECT(bx[i] == x, "inflight: bxor[%zu] = %u, not %u", i, bx[i], x);
    EXPECT(rsout[i] == o, "inflight: bor reduce_scatter[%zu]", i);
    EXPECT(bc[i] == (float)i * 2, "inflight: broadcast[%zu] = %g", i, bc[i]);
    for (size_t p = 0; p < P; p++) {
      EXPECT(ag[p * n + i] == value((int)p, 0, i, r),
             "inflight: allgather block %zu element %zu", p, i);
      EXPECT(a2r[p * n + i] == value((int)p, rank, i, r),
             "inflight: alltoall block %zu element %zu", p, i);
      if (rank == root)
        EXPECT(gout[p * n + i] == (double)p + (double)i * 0.25,
               "inflight: gather block %zu element %zu", p, i);
    }
  }
  free(mx);
  free(bx);
  free(ag);
  free(bc);
  free(a2s);
  free(a2r);
  free(gin);
  free(gout);
  free(rsin);
  free(rsout);
}

static void scatter(int r) {
  size_t n = 1 + draw(50);
  int root = (int)draw((uint64_t)world);
  float *all = must_alloc(n * (size_t)world * sizeof *all);
  for (int p = 0; p < world; p++)
    for (size_t i = 0; i < n; i++)
      all[(size_t)p * n + i] = (float)(p * 100 + (int)i + r);
  /* In place on the root: its block of sendbuf is recvbuf. */
  float *mine = rank == root ? all + (size_t)root * n : must_alloc(n * 4);
  CHECK(xcoll_scatter(rank == root ? all : NULL, mine, n, XCOLL_FLOAT32, root,
                      comm));
  for (size_t i = 0; i < n; i++)
    EXPECT(mine[i] == (float)(rank * 100 + (int)i + r),
           "scatter round %d (root %d): element %zu", r, root, i);
  if (rank != root)
    free(mine);
  free(all);
}

static void premul(void) {
  size_t n = 1 + draw(1000);
  double scalar = 0.5 + rank;
  xcoll_op op;
  CHECK(xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT64,
                                   XCOLL_SCALAR_HOST, comm));
  double *v = must_alloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = (double)(i + 1);
  CHECK(xcoll_allreduce(v, v, n, XCOLL_FLOAT64, op, comm));
  double factor = 0;
  for (int p = 0; p < world; p++)
    factor += 0.5 + p;
  /* Small integers times halves: exact in float64 in any order. */
  for (size_t i = 0; i < n; i++)
    EXPECT(v[i] == factor * (double)(i + 1), "premul: element %zu is %g", i,
           v[i]);
  CHECK(xcoll_op_destroy(op, comm));
  free(v);
}

static void split(void) {
  xcoll_comm_t half;
  CHECK(xcoll_comm_split(comm, rank % 2, -rank, &half));
  for (int k = 0; k < 50; k++) {
    int64_t mine = rank, count = k;
    xcoll_request_t in_half, in_world;
    CHECK(xcoll_iallreduce(&mine, &mine, 1, XCOLL_INT64, XCOLL_SUM, half, NULL,
                           &in_half));
    CHECK(xcoll_iallreduce(&count, &count, 1, XCOLL_INT64, XCOLL_SUM, comm,
                           NULL, &in_world));
    CHECK(xcoll_wait(in_world));
    CHECK(xcoll_wait(in_half));
    int64_t want = 0;
    for (int p = rank % 2; p < world; p += 2)
      want += p;
    EXPECT(mine == want, "split: half's sum %lld, not %lld", (long long)mine,
           (long long)want);
    EXPECT(count == (int64_t)k * world, "split: world's sum %lld",
           (long long)count);
  }
  CHECK(xcoll_comm_destroy(half));
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 10;
  if (xcoll_comm_init_env(&comm) != XCOLL_SUCCESS) {
    fprintf(stderr, "mixed_calls: %s\n", xcoll_last_error());
    return 1;
  }
  CHECK(xcoll_comm_rank(comm, &rank));
  CHECK(xcoll_comm_size(comm, &world));
  EXPECT(world <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
  for (int r = 0; r < rounds; r++) {
    seed = 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1);
    alltoallv(r);
    allpairs(r);
    fanin(r);
    inflight(r);
    scatter(r);
    premul();
  }
  split();
  CHECK(xcoll_comm_destroy(comm));
  if (rank == 0)
    printf("mixed_calls: %d ranks, %d rounds, all results right\n", world,
           rounds);
  return 0;
}
