/* exchange.c - conformance of the calls that move data without reducing
 * it: alltoall, alltoallv, gather, scatter, and send/recv in groups.
 *
 * Every element's bytes are a hash of (sending rank, receiving rank, index,
 * case), so a block that lands in the wrong place, from the wrong rank, or
 * not at all is caught by comparing bytes with the independent reference
 * computed here. Each case runs one of three modes (blocking, wait, test)
 * in turn, out of place and in place where the call has an in-place form,
 * over every dtype and counts including 0; guard elements around every
 * block must stay untouched. Group patterns: a ring shift in either order,
 * all pairs at once, 64 small sends outstanding to one peer, sends mixed
 * with an allreduce, a non-blocking group. Bad use: a peer out of range, a
 * send to itself outside a group, a group end without a start, a
 * non-blocking call inside a group.
 *
 *   xcollrun --nproc-per-node N exchange [--quick] [--only NAME]
 *            [--gpu-ranks LIST]
 * Prints one line per call and "exchange PASSED|FAILED" on rank 0; exit
 * status 1 on any failure.
 *
 * --gpu-ranks 0,2: those ranks are GPU ranks (bound to CUDA device
 * LOCAL_RANK, the driver through tests/gpu/test_cuda.h: the real one or
 * the stand-in tests/unit/fake_libcuda.c), the others host ranks: a mixed
 * ring on nccl_like. A GPU rank passes device memory to every call: each
 * case's buffers, guards included, are mirrored on the device, copied there
 * before the call and back after it, and checked on the host as on a host
 * rank. Exit 77 (every rank) when there is no CUDA driver. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../gpu/test_cuda.h"
#include "xcoll.h"

static xcoll_comm_t comm;
static int rank, P, quick;
static long cases, failed;
static const char *only, *gpu_ranks;

#define GUARD 0xA5

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* Byte b of element i sent from rank s to rank d in case salt. */
static uint8_t ref_byte(int s, int d, size_t i, size_t b, uint64_t salt) {
  uint64_t h = mix64(((uint64_t)s << 48) ^ ((uint64_t)d << 32) ^ (uint64_t)i ^
                     mix64(salt + 0x9e3779b97f4a7c15ULL * (b + 1)));
  return (uint8_t)(h >> 17);
}

static void fill(uint8_t *buf, int s, int d, size_t count, size_t elem,
                 uint64_t salt) {
  for (size_t i = 0; i < count; i++)
    for (size_t b = 0; b < elem; b++)
      buf[i * elem + b] = ref_byte(s, d, i, b, salt);
}

/* 1 if buf holds what s sent d; reports the first wrong element. */
static int check(const char *what, const uint8_t *buf, int s, int d,
                 size_t count, size_t elem, uint64_t salt) {
  for (size_t i = 0; i < count; i++)
    for (size_t b = 0; b < elem; b++)
      if (buf[i * elem + b] != ref_byte(s, d, i, b, salt)) {
        printf("FAIL rank %d: %s: element %zu of the block from rank %d to "
               "rank %d is wrong (byte %zu: got 0x%02x, want 0x%02x)\n",
               rank, what, i, s, d, b, buf[i * elem + b],
               ref_byte(s, d, i, b, salt));
        return 0;
      }
  return 1;
}

static int check_guard(const char *what, const uint8_t *buf, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (buf[i] != GUARD) {
      printf("FAIL rank %d: %s: byte %zu outside every block was written\n",
             rank, what, i);
      return 0;
    }
  return 1;
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("FATAL rank %d: out of memory (%zu B)\n", rank, bytes);
    exit(2);
  }
  return p;
}

/* ---- buffers, and their device mirrors on a GPU rank ---- */

static int gpu;
static test_cuda cu;
#define MAX_BUFFERS 8
static struct {
  uint8_t *host;
  uintptr_t device; /* 0 on a host rank */
  size_t bytes;
} buffers[MAX_BUFFERS];

/* A buffer a call reads or writes: host memory, mirrored on the device on
 * a GPU rank. Freed with buffer_free. */
static uint8_t *buffer(size_t bytes) {
  for (int i = 0; i < MAX_BUFFERS; i++) {
    if (buffers[i].host != NULL)
      continue;
    buffers[i].host = xmalloc(bytes);
    buffers[i].bytes = bytes;
    if (gpu && cu.mem_alloc(&buffers[i].device, bytes ? bytes : 1) != 0) {
      printf("FATAL rank %d: cuMemAlloc of %zu B failed\n", rank, bytes);
      exit(2);
    }
    return buffers[i].host;
  }
  printf("FATAL rank %d: more than %d buffers at once\n", rank, MAX_BUFFERS);
  exit(2);
}

static void buffer_free(uint8_t *host) {
  for (int i = 0; i < MAX_BUFFERS; i++)
    if (host != NULL && buffers[i].host == host) {
      if (buffers[i].device != 0)
        (void)cu.mem_free(buffers[i].device);
      free(host);
      buffers[i].host = NULL;
      buffers[i].device = 0;
      return;
    }
}

/* What the call gets for host address p inside a buffer: p on a host
 * rank, the same offset in the device mirror on a GPU rank. The end of a
 * buffer counts only when no buffer starts there: the allocator may place
 * two buffers back to back, and the next one's start is the one meant. */
static void *D(const void *p) {
  if (!gpu || p == NULL)
    return (void *)(uintptr_t)p;
  const uint8_t *at = p;
  for (int end = 0; end < 2; end++)
    for (int i = 0; i < MAX_BUFFERS; i++)
      if (buffers[i].host != NULL && at >= buffers[i].host &&
          (end ? at == buffers[i].host + buffers[i].bytes
               : at < buffers[i].host + buffers[i].bytes ||
                     at == buffers[i].host))
        return (void *)(buffers[i].device +
                        (uintptr_t)(at - buffers[i].host));
  printf("FATAL rank %d: %p is in no buffer\n", rank, p);
  exit(2);
}

/* Before a call: every buffer to its mirror; after: back. */
static void to_device(void) {
  for (int i = 0; gpu && i < MAX_BUFFERS; i++)
    if (buffers[i].host != NULL && buffers[i].bytes > 0 &&
        cu.htod(buffers[i].device, buffers[i].host, buffers[i].bytes) != 0) {
      printf("FATAL rank %d: cuMemcpyHtoD failed\n", rank);
      exit(2);
    }
}

static void from_device(void) {
  if (gpu)
    (void)cu.stream_sync(NULL);
  for (int i = 0; gpu && i < MAX_BUFFERS; i++)
    if (buffers[i].host != NULL && buffers[i].bytes > 0 &&
        cu.dtoh(buffers[i].host, buffers[i].device, buffers[i].bytes) != 0) {
      printf("FATAL rank %d: cuMemcpyDtoH failed\n", rank);
      exit(2);
    }
}

/* Complete a request the mode's way: 1 wait, 2 test until done. */
static xcoll_status finish(xcoll_status st, xcoll_request_t req, int mode) {
  if (st != XCOLL_SUCCESS || mode == 0)
    return st;
  if (mode == 1)
    return xcoll_wait(req);
  int done = 0;
  while (!done) {
    st = xcoll_test(req, &done);
    if (st != XCOLL_SUCCESS)
      break;
  }
  xcoll_status w = xcoll_wait(req);
  return st != XCOLL_SUCCESS ? st : w;
}

static void verdict(const char *what, xcoll_status st, int ok) {
  cases++;
  if (st != XCOLL_SUCCESS) {
    printf("FAIL rank %d: %s returned %s: %s\n", rank, what,
           xcoll_strerror(st), xcoll_comm_last_error(comm));
    failed++;
    if (st != XCOLL_ERR_INVALID_ARGUMENT && st != XCOLL_ERR_INVALID_USAGE) {
      printf("FATAL rank %d: the communicator is broken\n", rank);
      exit(1);
    }
  } else if (!ok) {
    failed++;
  }
}

static const xcoll_datatype dtypes[] = {
    XCOLL_INT8,    XCOLL_UINT8,    XCOLL_INT32,   XCOLL_UINT32, XCOLL_INT64,
    XCOLL_UINT64,  XCOLL_FLOAT16,  XCOLL_BFLOAT16, XCOLL_FLOAT32,
    XCOLL_FLOAT64};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])
static const size_t counts[] = {0, 1, 3, 7, 64, 1000, 33001};
#define NCOUNTS (sizeof counts / sizeof counts[0])
static const char *const modes[] = {"blocking", "wait", "test"};

static int enabled(const char *name) { return !only || !strcmp(only, name); }

/* ---- alltoall ---- */

static void alltoall_case(xcoll_datatype dt, size_t count, int in_place,
                          int mode, uint64_t salt) {
  size_t elem = xcoll_datatype_size(dt), block = count * elem;
  size_t all = block * (size_t)P;
  uint8_t *send = buffer(all), *recv = buffer(all + 2 * 64);
  memset(recv, GUARD, all + 128);
  uint8_t *out = recv + 64;
  for (int d = 0; d < P; d++)
    fill((in_place ? out : send) + (size_t)d * block, rank, d, count, elem, salt);
  xcoll_request_t req = NULL;
  const void *sbuf = in_place ? out : send;
  to_device();
  xcoll_status st =
      mode == 0 ? xcoll_alltoall(D(sbuf), D(out), count, dt, comm)
                : xcoll_ialltoall(D(sbuf), D(out), count, dt, comm, NULL, &req);
  st = finish(st, req, mode);
  from_device();
  char what[160];
  snprintf(what, sizeof what, "alltoall(%s, count %zu, %s, %s)",
           xcoll_datatype_name(dt), count, in_place ? "in place" : "out of place",
           modes[mode]);
  int ok = 1;
  for (int s = 0; s < P && ok && st == XCOLL_SUCCESS; s++)
    ok = check(what, out + (size_t)s * block, s, rank, count, elem, salt);
  ok = ok && check_guard(what, recv, 64) && check_guard(what, out + all, 64);
  verdict(what, st, ok);
  buffer_free(send);
  buffer_free(recv);
}

/* ---- alltoallv ---- */

/* Elements rank s sends rank d in case salt: 0 to 4 times scale. */
static size_t vcount(int s, int d, uint64_t salt, size_t scale) {
  return (size_t)(mix64(salt ^ ((uint64_t)s * 131 + (uint64_t)d)) % 5) * scale;
}

static void alltoallv_case(xcoll_datatype dt, size_t scale, int mode,
                           uint64_t salt) {
  size_t elem = xcoll_datatype_size(dt);
  size_t *sc = xmalloc(4 * (size_t)P * sizeof(size_t));
  size_t *sd = sc + P, *rc = sc + 2 * P, *rd = sc + 3 * P;
  size_t stotal = 0, rtotal = 0;
  /* One guard element between blocks, and blocks in reverse peer order in
   * recvbuf, so that displacements matter. */
  for (int p = 0; p < P; p++) {
    sc[p] = vcount(rank, p, salt, scale);
    sd[p] = stotal;
    stotal += sc[p] + 1;
  }
  for (int p = P - 1; p >= 0; p--) {
    rc[p] = vcount(p, rank, salt, scale);
    rd[p] = rtotal + 1;
    rtotal += rc[p] + 1;
  }
  rtotal += 1;
  uint8_t *send = buffer(stotal * elem), *recv = buffer(rtotal * elem);
  memset(send, GUARD, stotal * elem);
  memset(recv, GUARD, rtotal * elem);
  for (int p = 0; p < P; p++)
    fill(send + sd[p] * elem, rank, p, sc[p], elem, salt);
  xcoll_request_t req = NULL;
  to_device();
  xcoll_status st =
      mode == 0 ? xcoll_alltoallv(D(send), sc, sd, D(recv), rc, rd, dt, comm)
                : xcoll_ialltoallv(D(send), sc, sd, D(recv), rc, rd, dt, comm,
                                   NULL, &req);
  /* The arrays are the call's only until it returns. */
  memset(sc, 0xff, 4 * (size_t)P * sizeof(size_t));
  st = finish(st, req, mode);
  from_device();
  char what[160];
  snprintf(what, sizeof what, "alltoallv(%s, scale %zu, %s)",
           xcoll_datatype_name(dt), scale, modes[mode]);
  int ok = 1;
  size_t at = 0;
  for (int p = P - 1; p >= 0 && ok && st == XCOLL_SUCCESS; p--) {
    size_t n = vcount(p, rank, salt, scale);
    ok = check_guard(what, recv + at * elem, elem) &&
         check(what, recv + (at + 1) * elem, p, rank, n, elem, salt);
    at += n + 1;
  }
  ok = ok && check_guard(what, recv + at * elem, elem);
  verdict(what, st, ok);
  free(sc);
  buffer_free(send);
  buffer_free(recv);
}

/* ---- gather and scatter ---- */

/* Gather, or scatter (the same shape, the other way): the root's P blocks
 * (gather's recvbuf, scatter's sendbuf) and every rank's one block
 * (gather's sendbuf, scatter's recvbuf), each between 64-byte guards. In
 * place, the root's one block is its slice of the P blocks. */
static void rooted_case(int scatter, xcoll_datatype dt, size_t count, int root,
                        int in_place, int mode, uint64_t salt) {
  size_t elem = xcoll_datatype_size(dt), block = count * elem;
  size_t all = block * (size_t)P;
  uint8_t *many = buffer(all + 128), *one = buffer(block + 128);
  memset(many, GUARD, all + 128);
  memset(one, GUARD, block + 128);
  uint8_t *blocks = many + 64, *mine = one + 64;
  int is_root = rank == root;
  uint8_t *my_block = in_place && is_root ? blocks + (size_t)root * block : mine;
  if (!scatter)
    fill(my_block, rank, root, count, elem, salt);
  else if (is_root)
    for (int d = 0; d < P; d++)
      fill(blocks + (size_t)d * block, root, d, count, elem, salt);
  /* Off the root the P blocks are unused: pass NULL on odd ranks. */
  void *root_buf = is_root || rank % 2 == 0 ? blocks : NULL;
  xcoll_request_t req = NULL;
  xcoll_status st;
  to_device();
  if (scatter)
    st = mode == 0
             ? xcoll_scatter(D(root_buf), D(my_block), count, dt, root, comm)
             : xcoll_iscatter(D(root_buf), D(my_block), count, dt, root, comm,
                              NULL, &req);
  else
    st = mode == 0
             ? xcoll_gather(D(my_block), D(root_buf), count, dt, root, comm)
             : xcoll_igather(D(my_block), D(root_buf), count, dt, root, comm,
                             NULL, &req);
  st = finish(st, req, mode);
  from_device();
  char what[160];
  snprintf(what, sizeof what, "%s(%s, count %zu, root %d, %s, %s)",
           scatter ? "scatter" : "gather", xcoll_datatype_name(dt), count,
           root, in_place ? "in place" : "out of place", modes[mode]);
  int ok = st == XCOLL_SUCCESS;
  if (scatter)
    ok = ok && check(what, my_block, root, rank, count, elem, salt);
  else if (is_root)
    for (int s = 0; s < P && ok; s++)
      ok = check(what, blocks + (size_t)s * block, s, root, count, elem, salt);
  else
    ok = ok && check_guard(what, blocks, all); /* untouched off the root */
  /* Nothing written outside the blocks, nor into the one block that the
   * in-place root does not use. */
  ok = ok && check_guard(what, many, 64) &&
       check_guard(what, blocks + all, 64) && check_guard(what, one, 64) &&
       check_guard(what, mine + block, 64);
  if (scatter && in_place && is_root)
    ok = ok && check_guard(what, mine, block);
  verdict(what, st, ok);
  buffer_free(many);
  buffer_free(one);
}

/* ---- send/recv and groups ---- */

/* Ring shift: send to next, receive from prev; even ranks post the send
 * first, odd ranks the receive. */
static void ring_shift(xcoll_datatype dt, size_t count, uint64_t salt) {
  size_t elem = xcoll_datatype_size(dt);
  int next = (rank + 1) % P, prev = (rank + P - 1) % P;
  uint8_t *send = buffer(count * elem), *recv = buffer(count * elem);
  fill(send, rank, next, count, elem, salt);
  to_device();
  xcoll_status st = xcoll_group_start();
  if (rank % 2 == 0) {
    if (st == XCOLL_SUCCESS)
      st = xcoll_send(D(send), count, dt, next, comm);
    if (st == XCOLL_SUCCESS)
      st = xcoll_recv(D(recv), count, dt, prev, comm);
  } else {
    if (st == XCOLL_SUCCESS)
      st = xcoll_recv(D(recv), count, dt, prev, comm);
    if (st == XCOLL_SUCCESS)
      st = xcoll_send(D(send), count, dt, next, comm);
  }
  xcoll_status end = xcoll_group_end();
  if (st == XCOLL_SUCCESS)
    st = end;
  from_device();
  char what[128];
  snprintf(what, sizeof what, "group ring shift(%s, count %zu)",
           xcoll_datatype_name(dt), count);
  verdict(what, st, st == XCOLL_SUCCESS &&
                        check(what, recv, prev, rank, count, elem, salt));
  buffer_free(send);
  buffer_free(recv);
}

/* Every rank sends a block to every rank (itself included) in one group;
 * the order of the calls differs by rank. mode 1: xcoll_igroup_end. */
static void all_pairs(size_t count, int nonblocking, uint64_t salt) {
  xcoll_datatype dt = XCOLL_FLOAT32;
  size_t elem = 4, block = count * elem;
  uint8_t *send = buffer(block * (size_t)P), *recv = buffer(block * (size_t)P);
  for (int d = 0; d < P; d++)
    fill(send + (size_t)d * block, rank, d, count, elem, salt);
  to_device();
  xcoll_status st = xcoll_group_start();
  for (int k = 0; k < P && st == XCOLL_SUCCESS; k++) {
    int p = (rank % 2 == 0) ? k : P - 1 - k;
    st = xcoll_recv(D(recv + (size_t)p * block), count, dt, p, comm);
    if (st == XCOLL_SUCCESS)
      st = xcoll_send(D(send + (size_t)p * block), count, dt, p, comm);
  }
  xcoll_status end;
  if (nonblocking) {
    xcoll_request_t req = NULL;
    end = xcoll_igroup_end(&req);
    end = finish(end, req, 2);
  } else {
    end = xcoll_group_end();
  }
  if (st == XCOLL_SUCCESS)
    st = end;
  from_device();
  char what[128];
  snprintf(what, sizeof what, "group all pairs(count %zu, %s)", count,
           nonblocking ? "igroup_end" : "group_end");
  int ok = 1;
  for (int s = 0; s < P && ok && st == XCOLL_SUCCESS; s++)
    ok = check(what, recv + (size_t)s * block, s, rank, count, elem, salt);
  verdict(what, st, ok);
  buffer_free(send);
  buffer_free(recv);
}

/* 64 small sends outstanding to one peer (next), 64 receives from prev. */
static void many_small(uint64_t salt) {
  enum { N = 64 };
  int next = (rank + 1) % P, prev = (rank + P - 1) % P;
  const size_t bytes = 3 * 4; /* 3 int32 each */
  uint8_t *out = buffer(N * bytes), *in = buffer(N * bytes);
  for (int k = 0; k < N; k++)
    fill(out + k * bytes, rank, next, 3, 4, salt + (uint64_t)k);
  to_device();
  xcoll_status st = xcoll_group_start();
  for (int k = 0; k < N && st == XCOLL_SUCCESS; k++)
    st = xcoll_send(D(out + k * bytes), 3, XCOLL_INT32, next, comm);
  for (int k = 0; k < N && st == XCOLL_SUCCESS; k++)
    st = xcoll_recv(D(in + k * bytes), 3, XCOLL_INT32, prev, comm);
  xcoll_status end = xcoll_group_end();
  if (st == XCOLL_SUCCESS)
    st = end;
  from_device();
  int ok = 1;
  for (int k = 0; k < N && ok && st == XCOLL_SUCCESS; k++)
    ok = check("group 64 sends to one peer", in + k * bytes, prev, rank, 3, 4,
               salt + (uint64_t)k);
  verdict("group 64 sends to one peer", st, ok);
  buffer_free(out);
  buffer_free(in);
}

/* Sends, an allreduce and receives in one group. */
static void mixed(uint64_t salt) {
  int next = (rank + 1) % P, prev = (rank + P - 1) % P;
  uint8_t *send = buffer(40), *recv = buffer(40), *sums = buffer(16);
  fill(send, rank, next, 10, 4, salt);
  int64_t mine = rank + 1, sum = 0;
  memcpy(sums, &mine, 8);
  to_device();
  xcoll_status st = xcoll_group_start();
  if (st == XCOLL_SUCCESS)
    st = xcoll_send(D(send), 10, XCOLL_FLOAT32, next, comm);
  if (st == XCOLL_SUCCESS)
    st = xcoll_allreduce(D(sums), D(sums + 8), 1, XCOLL_INT64, XCOLL_SUM,
                         comm);
  if (st == XCOLL_SUCCESS)
    st = xcoll_recv(D(recv), 10, XCOLL_FLOAT32, prev, comm);
  xcoll_status end = xcoll_group_end();
  if (st == XCOLL_SUCCESS)
    st = end;
  from_device();
  memcpy(&sum, sums + 8, 8);
  int ok = st == XCOLL_SUCCESS &&
           check("group send + allreduce + recv", recv, prev, rank, 10, 4, salt);
  if (st == XCOLL_SUCCESS && sum != (int64_t)P * (P + 1) / 2) {
    printf("FAIL rank %d: group send + allreduce + recv: allreduce gave %lld, "
           "want %lld\n",
           rank, (long long)sum, (long long)P * (P + 1) / 2);
    ok = 0;
  }
  verdict("group send + allreduce + recv", st, ok);
  buffer_free(send);
  buffer_free(recv);
  buffer_free(sums);
}

/* Outside a group: even ranks send to the odd rank above, which receives;
 * blocking, then non-blocking the other way. */
static void standalone(size_t count, uint64_t salt) {
  int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
  if (partner >= P)
    return;
  size_t elem = 8;
  uint8_t *buf = buffer(count * elem);
  xcoll_status st;
  int ok = 1;
  if (rank % 2 == 0) {
    fill(buf, rank, partner, count, elem, salt);
    to_device();
    st = xcoll_send(D(buf), count, XCOLL_FLOAT64, partner, comm);
    if (st == XCOLL_SUCCESS) {
      xcoll_request_t req = NULL;
      st = xcoll_irecv(D(buf), count, XCOLL_FLOAT64, partner, comm, NULL, &req);
      st = finish(st, req, 1);
      from_device();
      ok = st == XCOLL_SUCCESS &&
           check("send/recv outside a group", buf, partner, rank, count, elem,
                 salt + 1);
    }
  } else {
    st = xcoll_recv(D(buf), count, XCOLL_FLOAT64, partner, comm);
    from_device();
    ok = st == XCOLL_SUCCESS &&
         check("send/recv outside a group", buf, partner, rank, count, elem,
               salt);
    if (st == XCOLL_SUCCESS) {
      fill(buf, rank, partner, count, elem, salt + 1);
      to_device();
      xcoll_request_t req = NULL;
      st = xcoll_isend(D(buf), count, XCOLL_FLOAT64, partner, comm, NULL,
                       &req);
      st = finish(st, req, 2);
    }
  }
  verdict("send/recv outside a group", st, ok);
  buffer_free(buf);
}

/* ---- bad use (local errors: nothing is sent) ---- */

static void expect(const char *what, xcoll_status st, xcoll_status want) {
  cases++;
  if (st != want) {
    printf("FAIL rank %d: %s returned %s, want %s (%s)\n", rank, what,
           xcoll_strerror(st), xcoll_strerror(want), xcoll_last_error());
    failed++;
  }
}

static void bad_use(void) {
  float x[64] = {0};
  expect("send to peer -1", xcoll_send(x, 4, XCOLL_FLOAT32, -1, comm),
         XCOLL_ERR_INVALID_ARGUMENT);
  expect("recv from peer world_size",
         xcoll_recv(x, 4, XCOLL_FLOAT32, P, comm), XCOLL_ERR_INVALID_ARGUMENT);
  expect("send to itself outside a group",
         xcoll_send(x, 4, XCOLL_FLOAT32, rank, comm), XCOLL_ERR_INVALID_ARGUMENT);
  expect("group end without start", xcoll_group_end(), XCOLL_ERR_INVALID_USAGE);
  xcoll_group_start();
  xcoll_request_t req = NULL;
  expect("isend inside a group",
         xcoll_isend(x, 4, XCOLL_FLOAT32, 0, comm, NULL, &req),
         XCOLL_ERR_INVALID_USAGE);
  expect("empty group end", xcoll_group_end(), XCOLL_SUCCESS);
  size_t zeros[64] = {0};
  expect("alltoallv with NULL sendcounts",
         xcoll_alltoallv(x, NULL, zeros, x, zeros, zeros, XCOLL_FLOAT32, comm),
         XCOLL_ERR_INVALID_ARGUMENT);
  expect("gather with root world_size",
         xcoll_gather(x, x, 1, XCOLL_FLOAT32, P, comm),
         XCOLL_ERR_INVALID_ARGUMENT);
  /* In place would be recvbuf == sendbuf + root * 2 elements. */
  expect("scatter with overlapping buffers",
         xcoll_scatter(x, x + 1, 2, XCOLL_FLOAT32, rank, comm),
         XCOLL_ERR_INVALID_ARGUMENT);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--gpu-ranks") && i + 1 < argc)
      gpu_ranks = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--quick] [--only alltoall|alltoallv|gather|scatter|"
              "group|errors] [--gpu-ranks LIST]\n",
              argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (gpu_ranks != NULL) {
    /* Every rank looks for the driver, so that all skip together rather
     * than leave the others waiting for a rank that left. */
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (driver == NULL) {
      printf("SKIP: --gpu-ranks and no CUDA driver (libcuda.so.1): %s\n",
             dlerror());
      return 77;
    }
    /* This rank's placement, before the communicator reads XCOLL_DEVICE. */
    const char *env_rank = getenv("RANK"), *local = getenv("LOCAL_RANK");
    int me = env_rank ? atoi(env_rank) : 0;
    char list[256];
    snprintf(list, sizeof list, "%s", gpu_ranks);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
      gpu |= atoi(tok) == me;
    int device = test_cuda_local_device(local);
    char value[32];
    snprintf(value, sizeof value, "cuda:%d", device);
    setenv("XCOLL_DEVICE", gpu ? value : "host", 1);
    if (gpu && test_cuda_load(&cu, device, "exchange") != 0)
      return 2;
  }
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: xcoll_comm_init_env: %s: %s\n", xcoll_strerror(st),
           xcoll_last_error());
    return 2;
  }
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &P);
  double t0 = now_s();
  uint64_t salt = 1;
  int mode = 0;
  size_t ncounts = quick ? 5 : NCOUNTS;
  if (enabled("errors"))
    bad_use();
  if (enabled("alltoall"))
    for (size_t t = 0; t < NDTYPES; t++)
      for (size_t c = 0; c < ncounts; c++)
        for (int ip = 0; ip < 2; ip++)
          alltoall_case(dtypes[t], counts[c], ip, mode++ % 3, salt++);
  if (enabled("alltoallv"))
    for (size_t t = 0; t < NDTYPES; t++)
      for (size_t scale = 0; scale <= (quick ? (size_t)3 : (size_t)300); scale = scale ? scale * 10 : 1)
        alltoallv_case(dtypes[t], scale, mode++ % 3, salt++);
  for (int root = 0; root < P; root++) {
    /* Every root with a few shapes; all dtypes and counts at root P-1. */
    int full = root == P - 1;
    for (size_t t = 0; t < NDTYPES; t++) {
      if (!full && t % 4 != (size_t)root % 4)
        continue;
      for (size_t c = 0; c < ncounts; c++)
        for (int ip = 0; ip < 2; ip++) {
          if (enabled("gather"))
            rooted_case(0, dtypes[t], counts[c], root, ip, mode++ % 3,
                        salt++);
          if (enabled("scatter"))
            rooted_case(1, dtypes[t], counts[c], root, ip, mode++ % 3,
                        salt++);
        }
    }
  }
  if (enabled("group")) {
    for (size_t t = 0; t < NDTYPES; t++)
      for (size_t c = 1; c < ncounts; c++)
        ring_shift(dtypes[t], counts[c], salt++);
    all_pairs(1, 0, salt++);
    all_pairs(1000, 1, salt++);
    all_pairs(quick ? 1000 : 70000, 0, salt++);
    many_small(salt += 100);
    mixed(salt++);
    standalone(5, salt += 2);
    standalone(100000, salt += 2);
  }
  int64_t mine[2] = {failed, cases}, total[2] = {0, 0};
  uint8_t *tally = buffer(sizeof mine + sizeof total);
  memcpy(tally, mine, sizeof mine);
  to_device();
  st = xcoll_allreduce(D(tally), D(tally + sizeof mine), 2, XCOLL_INT64,
                       XCOLL_SUM, comm);
  from_device();
  memcpy(total, tally + sizeof mine, sizeof total);
  buffer_free(tally);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL rank %d: final allreduce: %s\n", rank, xcoll_comm_last_error(comm));
    return 1;
  }
  if (rank == 0)
    printf("exchange %s: backend %s, %d ranks, %lld cases, %lld failed, %.2f s\n",
           total[0] ? "FAILED" : "PASSED", xcoll_comm_backend(comm), P,
           (long long)total[1], (long long)total[0], now_s() - t0);
  st = xcoll_comm_destroy(comm);
  return (total[0] || st != XCOLL_SUCCESS) ? 1 : 0;
}
