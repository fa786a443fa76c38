/* staging.c - CUDA device buffers on the host-driven backends (tcp, ucx),
 * staged through pinned host memory (core/staging.h), and on nccl_like's
 * GPU ranks (its ring kernels on the caller's stream), against the
 * stand-in driver tests/unit/fake_libcuda.c, which runs the kernels' host
 * build on threads.
 *
 * Run one copy per rank under a launcher, with the stand-in first on the
 * library path and every rank bound to a device:
 *   LD_LIBRARY_PATH=build/tests/fake_cuda XCOLL_DEVICE=cuda FAKE_CUDA_DEVICES=8 \
 *     xcollrun --nproc-per-node 3 --master-port 0 staging
 * The stand-in maps device memory PROT_NONE (a host access crashes) and
 * runs an asynchronous copy only when its stream is synchronised, so a
 * library that hands device memory to a host algorithm, or reads a pinned
 * copy before the copy landed, fails here. For each of allreduce,
 * allgather, reduce_scatter, broadcast and reduce, float32 sum and int32
 * max, 1 to 70001 elements, in place and out of place, blocking and
 * non-blocking (xcoll_wait, xcoll_test) on the legacy stream and on a
 * stream handle, every rank compares the device result, copied back, with a
 * reference it computes itself (inputs are small integers: every sum is
 * exact). Also: host buffers and a host/device mix on a device
 * communicator, three requests in flight waited in reverse order, a split
 * communicator, and after each call no context left pushed and no copy
 * left queued; after destroy, no pinned buffer left allocated. Exit 0 when
 * every check passed. No GPU is needed: what this cannot show (real
 * transfers, real streams) is for scripts/gpu-check.sh on a GPU. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/test_cuda.h"
#include "xcoll.h"

static struct {
  int (*mem_alloc)(uintptr_t *dptr, size_t bytes);
  int (*mem_free)(uintptr_t dptr);
  int (*htod)(uintptr_t dst, const void *src, size_t bytes);
  int (*dtoh)(void *dst, uintptr_t src, size_t bytes);
  int (*pinned_outstanding)(void);
  int (*ctx_depth)(void);
  int (*pending_copies)(void);
  int (*stream_create)(void **stream, unsigned int flags);
} cu;

static int rank, world_size;
static long checks, failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      if (failures <= 10) {                                                    \
        fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);    \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
      }                                                                        \
    }                                                                          \
  } while (0)

static int zero(void) { return 0; }

/* The stand-in driver, or a real one (scripts/gpu-check.sh): then the
 * stand-in's own counters read 0 (tests/gpu/test_cuda.h makes the device's
 * primary context current for this process's own buffers). */
static int load_driver(int device) {
  test_cuda d;
  if (test_cuda_load(&d, device, "staging") != 0)
    return -1;
  void *sym[3] = {dlsym(d.handle, "fake_cuda_pinned_outstanding"),
                  dlsym(d.handle, "fake_cuda_ctx_depth"),
                  dlsym(d.handle, "fake_cuda_pending_copies")};
  if (!d.fake || !sym[0] || !sym[1] || !sym[2])
    sym[0] = sym[1] = sym[2] = (void *)(uintptr_t)zero;
  cu.mem_alloc = d.mem_alloc;
  cu.mem_free = d.mem_free;
  cu.htod = d.htod;
  cu.dtoh = d.dtoh;
  cu.stream_create = d.stream_create;
  memcpy(&cu.pinned_outstanding, &sym[0], sizeof sym[0]);
  memcpy(&cu.ctx_depth, &sym[1], sizeof sym[1]);
  memcpy(&cu.pending_copies, &sym[2], sizeof sym[2]);
  return 0;
}

enum kind { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, REDUCE, NUM_KINDS };
static const char *const kind_names[NUM_KINDS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"};
enum mode { BLOCKING, WAIT, TEST, NUM_MODES };
static const char *const mode_names[NUM_MODES] = {"blocking", "wait", "test"};
#define ROOT_BCAST (world_size - 1)
#define ROOT_REDUCE 0

/* Element i of rank r's input: small integers, exact in float32 sums. */
static int32_t input(int r, size_t i, int is_float) {
  int32_t v = (int32_t)((i * 7 + (size_t)r * 3) % 100);
  return is_float ? v : (int32_t)((i * 13 + (size_t)r * 31) % 1000) - 500;
}
static void put(uint32_t *slot, int32_t v, int is_float) {
  if (is_float) {
    float f = (float)v;
    memcpy(slot, &f, 4);
  } else {
    memcpy(slot, &v, 4);
  }
}
/* op over ranks of input(r, i): float32 sum or int32 max, as 32 bits. */
static uint32_t reduced(size_t i, int is_float) {
  uint32_t out;
  if (is_float) {
    float sum = 0;
    for (int r = 0; r < world_size; r++)
      sum += (float)input(r, i, 1);
    memcpy(&out, &sum, 4);
  } else {
    int32_t max = INT32_MIN;
    for (int r = 0; r < world_size; r++)
      if (input(r, i, 0) > max)
        max = input(r, i, 0);
    memcpy(&out, &max, 4);
  }
  return out;
}

static xcoll_status finish(xcoll_status issued, xcoll_request_t request,
                           enum mode mode) {
  if (issued != XCOLL_SUCCESS || mode == BLOCKING)
    return issued;
  if (mode == WAIT)
    return xcoll_wait(request);
  int done = 0;
  xcoll_status status = XCOLL_SUCCESS;
  while (!done && status == XCOLL_SUCCESS)
    status = xcoll_test(request, &done);
  /* xcoll_wait once more, as the API asks: it returns the same status */
  xcoll_status again = xcoll_wait(request);
  return status != XCOLL_SUCCESS ? status : again;
}

/* One call of kind on device buffers, checked against the reference. */
static void run_case(xcoll_comm_t comm, enum kind kind, int is_float,
                     size_t count, int in_place, enum mode mode, void *stream) {
  const xcoll_datatype dtype = is_float ? XCOLL_FLOAT32 : XCOLL_INT32;
  const xcoll_op op = is_float ? XCOLL_SUM : XCOLL_MAX;
  const size_t P = (size_t)world_size;
  size_t send_count = kind == REDUCE_SCATTER ? count * P : count;
  size_t recv_count = kind == ALLGATHER ? count * P : count;
  uint32_t *host_in = calloc(send_count, 4);
  uint32_t *host_out = calloc(recv_count, 4);
  uint32_t *expect = calloc(recv_count, 4);
  /* the input as this rank would hold it, at its place in the send buffer */
  for (size_t i = 0; i < send_count; i++)
    put(&host_in[i], input(rank, i, is_float), is_float);

  uintptr_t dsend = 0, drecv = 0;
  size_t dsend_bytes = in_place ? 0 : send_count * 4;
  size_t drecv_bytes = (in_place && kind == REDUCE_SCATTER ? send_count : recv_count) * 4;
  if (cu.mem_alloc(&drecv, drecv_bytes) != 0 ||
      (!in_place && cu.mem_alloc(&dsend, dsend_bytes) != 0)) {
    CHECK(0, "cuMemAlloc failed");
    goto out;
  }
  const char *send;
  char *recv = (char *)drecv;
  if (!in_place) {
    cu.htod(dsend, host_in, send_count * 4);
    send = (const char *)dsend;
  } else if (kind == ALLGATHER) {
    send = recv + (size_t)rank * count * 4;
    cu.htod((uintptr_t)send, host_in, count * 4);
  } else if (kind == REDUCE_SCATTER) {
    cu.htod(drecv, host_in, send_count * 4);
    send = recv;
    recv = recv + (size_t)rank * count * 4;
  } else {
    cu.htod(drecv, host_in, count * 4);
    send = recv;
  }
  /* reduce: recvbuf only on root (NULL elsewhere when out of place) */
  if (kind == REDUCE && !in_place && rank != ROOT_REDUCE)
    recv = NULL;

  xcoll_request_t request = NULL;
  xcoll_request_t *rq = mode == BLOCKING ? NULL : &request;
  xcoll_status status = XCOLL_SUCCESS;
  switch (kind) {
  case ALLREDUCE:
    status = rq ? xcoll_iallreduce(send, recv, count, dtype, op, comm, stream, rq)
                : xcoll_allreduce(send, recv, count, dtype, op, comm);
    break;
  case ALLGATHER:
    status = rq ? xcoll_iallgather(send, recv, count, dtype, comm, stream, rq)
                : xcoll_allgather(send, recv, count, dtype, comm);
    break;
  case REDUCE_SCATTER:
    status = rq ? xcoll_ireduce_scatter(send, recv, count, dtype, op, comm,
                                        stream, rq)
                : xcoll_reduce_scatter(send, recv, count, dtype, op, comm);
    break;
  case BROADCAST:
    status = rq ? xcoll_ibroadcast(send, recv, count, dtype, ROOT_BCAST, comm,
                                   stream, rq)
                : xcoll_broadcast(send, recv, count, dtype, ROOT_BCAST, comm);
    break;
  case REDUCE:
    status = rq ? xcoll_ireduce(send, recv, count, dtype, op, ROOT_REDUCE, comm,
                                stream, rq)
                : xcoll_reduce(send, recv, count, dtype, op, ROOT_REDUCE, comm);
    break;
  default:
    break;
  }
  status = finish(status, request, mode);
  const char *what = kind_names[kind];
  CHECK(status == XCOLL_SUCCESS, "%s %s count %zu %s %s: status %d (%s)", what,
        is_float ? "float32" : "int32", count, in_place ? "in-place" : "out-of-place",
        mode_names[mode], (int)status, xcoll_comm_last_error(comm));
  CHECK(cu.ctx_depth() == 0, "%s: a CUDA context was left pushed (depth %d)",
        what, cu.ctx_depth());
  CHECK(cu.pending_copies() == 0, "%s: %d copies left queued on a stream",
        what, cu.pending_copies());
  /* reduce writes root's recvbuf only */
  if (status != XCOLL_SUCCESS || recv == NULL ||
      (kind == REDUCE && rank != ROOT_REDUCE))
    goto out;

  for (size_t i = 0; i < recv_count; i++) {
    switch (kind) {
    case ALLREDUCE:
    case REDUCE:
      expect[i] = reduced(i, is_float);
      break;
    case ALLGATHER:
      put(&expect[i], input((int)(i / count), i % count, is_float), is_float);
      break;
    case REDUCE_SCATTER:
      expect[i] = reduced((size_t)rank * count + i, is_float);
      break;
    case BROADCAST:
      put(&expect[i], input(ROOT_BCAST, i, is_float), is_float);
      break;
    default:
      break;
    }
  }
  cu.dtoh(host_out, (uintptr_t)recv, recv_count * 4);
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < recv_count; i++)
    if (host_out[i] != expect[i] && wrong++ == 0)
      first = i;
  CHECK(wrong == 0,
        "%s %s count %zu %s %s stream %p: %zu of %zu elements wrong, first at "
        "%zu: 0x%08x, expected 0x%08x",
        what, is_float ? "float32" : "int32", count,
        in_place ? "in-place" : "out-of-place", mode_names[mode], stream, wrong,
        recv_count, first, wrong ? host_out[first] : 0, wrong ? expect[first] : 0);
out:
  if (dsend)
    cu.mem_free(dsend);
  if (drecv)
    cu.mem_free(drecv);
  free(host_in);
  free(host_out);
  free(expect);
}

/* alltoall, gather and scatter (out of place and in place) on device
 * buffers, staged through pinned memory onto core's host algorithms on
 * every backend (nccl_like's GPU ranks too: its ring kernels do not run
 * them). int32 element i of the
 * block rank s sends rank d is input(s * 1000 + d, i). */
enum { EX_ALLTOALL, EX_GATHER, EX_SCATTER };
static void run_exchange(xcoll_comm_t comm, int which, size_t count, int in_place,
                         enum mode mode, void *stream) {
  static const char *const names[] = {"alltoall", "gather", "scatter"};
  const size_t P = (size_t)world_size;
  const int root = world_size - 1, is_root = rank == root;
  size_t send_count = which == EX_GATHER ? count : count * P;
  size_t recv_count = which == EX_SCATTER ? count : count * P;
  uint32_t *host_in = calloc(send_count, 4), *host_out = calloc(recv_count, 4);
  for (size_t i = 0; i < send_count; i++) {
    int to = which == EX_GATHER ? root : (int)(i / count);
    put(&host_in[i], input(rank * 1000 + to, i % count, 0), 0);
  }
  uintptr_t dsend = 0, drecv = 0;
  size_t span = (send_count > recv_count ? send_count : recv_count) * 4;
  cu.mem_alloc(&drecv, span);
  if (!in_place)
    cu.mem_alloc(&dsend, send_count * 4);
  char *recv = (char *)drecv;
  const char *send = (const char *)dsend;
  if (in_place && which == EX_GATHER) {
    send = recv + (size_t)rank * count * 4; /* in place on the root */
  } else if (in_place && which == EX_SCATTER) {
    send = recv;
    recv = recv + (size_t)rank * count * 4;
  } else if (in_place) {
    send = recv;
  }
  cu.htod((uintptr_t)send, host_in, send_count * 4);
  xcoll_request_t request = NULL;
  xcoll_request_t *rq = mode == BLOCKING ? NULL : &request;
  xcoll_status status;
  if (which == EX_ALLTOALL)
    status = rq ? xcoll_ialltoall(send, recv, count, XCOLL_INT32, comm, stream, rq)
                : xcoll_alltoall(send, recv, count, XCOLL_INT32, comm);
  else if (which == EX_GATHER)
    status = rq ? xcoll_igather(send, recv, count, XCOLL_INT32, root, comm, stream, rq)
                : xcoll_gather(send, recv, count, XCOLL_INT32, root, comm);
  else
    status = rq ? xcoll_iscatter(send, recv, count, XCOLL_INT32, root, comm, stream, rq)
                : xcoll_scatter(send, recv, count, XCOLL_INT32, root, comm);
  status = finish(status, request, mode);
  {
    CHECK(status == XCOLL_SUCCESS, "%s count %zu %s %s: status %d (%s)",
          names[which], count, in_place ? "in-place" : "out-of-place",
          mode_names[mode], (int)status, xcoll_comm_last_error(comm));
    CHECK(cu.ctx_depth() == 0 && cu.pending_copies() == 0,
          "%s: a context left pushed or a copy left queued", names[which]);
    if (status == XCOLL_SUCCESS && (which != EX_GATHER || is_root)) {
      cu.dtoh(host_out, (uintptr_t)recv, recv_count * 4);
      size_t wrong = 0;
      for (size_t i = 0; i < recv_count; i++) {
        int from = which == EX_SCATTER ? root : (int)(i / count);
        int to = which == EX_GATHER ? root : rank;
        uint32_t want;
        put(&want, input(from * 1000 + to, i % count, 0), 0);
        wrong += host_out[i] != want;
      }
      CHECK(wrong == 0, "%s count %zu %s %s: %zu of %zu elements wrong",
            names[which], count, in_place ? "in-place" : "out-of-place",
            mode_names[mode], wrong, recv_count);
    }
  }
  if (dsend)
    cu.mem_free(dsend);
  cu.mem_free(drecv);
  free(host_in);
  free(host_out);
}

/* A ring shift of device buffers in one group (send to next, recv from
 * previous), staged call by call. */
static void run_group_shift(xcoll_comm_t comm, size_t count, enum mode mode) {
  int next = (rank + 1) % world_size, prev = (rank + world_size - 1) % world_size;
  uint32_t *host = calloc(count, 4);
  for (size_t i = 0; i < count; i++)
    put(&host[i], input(rank * 1000 + next, i, 0), 0);
  uintptr_t dsend = 0, drecv = 0;
  cu.mem_alloc(&dsend, count * 4);
  cu.mem_alloc(&drecv, count * 4);
  cu.htod(dsend, host, count * 4);
  xcoll_status status = xcoll_group_start();
  if (status == XCOLL_SUCCESS)
    status = xcoll_send((const void *)dsend, count, XCOLL_INT32, next, comm);
  if (status == XCOLL_SUCCESS)
    status = xcoll_recv((void *)drecv, count, XCOLL_INT32, prev, comm);
  xcoll_request_t request = NULL;
  xcoll_status end = mode == BLOCKING ? xcoll_group_end() : xcoll_igroup_end(&request);
  end = finish(end, request, mode);
  if (status == XCOLL_SUCCESS)
    status = end;
  CHECK(status == XCOLL_SUCCESS, "group ring shift count %zu %s: status %d (%s)",
        count, mode_names[mode], (int)status, xcoll_comm_last_error(comm));
  if (status == XCOLL_SUCCESS) {
    cu.dtoh(host, drecv, count * 4);
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
      uint32_t want;
      put(&want, input(prev * 1000 + rank, i, 0), 0);
      wrong += host[i] != want;
    }
    CHECK(wrong == 0, "group ring shift count %zu %s: %zu elements wrong", count,
          mode_names[mode], wrong);
  }
  cu.mem_free(dsend);
  cu.mem_free(drecv);
  free(host);
}

/* Host buffers, and host in / device out, on a device communicator: the
 * staging backends take them; nccl_like's GPU rank refuses them (its
 * kernels read device memory), saying what to pass instead. On every rank
 * alike, so the refusal leaves the ring in step. */
static void run_host_mix(xcoll_comm_t comm) {
  enum { N = 1000 };
  float in[N], out[N];
  for (int i = 0; i < N; i++)
    in[i] = (float)input(rank, (size_t)i, 1);
  const char *backend = getenv("XCOLL_BACKEND");
  if (backend != NULL && strcmp(backend, "nccl_like") == 0) {
    xcoll_status refused =
        xcoll_allreduce(in, out, N, XCOLL_FLOAT32, XCOLL_SUM, comm);
    CHECK(refused == XCOLL_ERR_INVALID_ARGUMENT,
          "host buffers on a GPU rank: status %d", (int)refused);
    CHECK(strstr(xcoll_last_error(), "pass device buffers") != NULL,
          "host buffers on a GPU rank: message '%s'", xcoll_last_error());
    return;
  }
  xcoll_status status = xcoll_allreduce(in, out, N, XCOLL_FLOAT32, XCOLL_SUM, comm);
  CHECK(status == XCOLL_SUCCESS, "host buffers on a device comm: %d", (int)status);
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    uint32_t bits;
    memcpy(&bits, &out[i], 4);
    wrong += bits != reduced((size_t)i, 1);
  }
  CHECK(wrong == 0, "host buffers on a device comm: %d wrong", wrong);

  uintptr_t d = 0;
  if (cu.mem_alloc(&d, sizeof out) != 0)
    return;
  status = xcoll_allreduce(in, (void *)d, N, XCOLL_FLOAT32, XCOLL_SUM, comm);
  CHECK(status == XCOLL_SUCCESS, "host in, device out: %d", (int)status);
  memset(out, 0, sizeof out);
  cu.dtoh(out, d, sizeof out);
  wrong = 0;
  for (int i = 0; i < N; i++) {
    uint32_t bits;
    memcpy(&bits, &out[i], 4);
    wrong += bits != reduced((size_t)i, 1);
  }
  CHECK(wrong == 0, "host in, device out: %d wrong", wrong);
  cu.mem_free(d);
}

/* Three requests in flight, each on its own stream, waited in reverse. */
static void run_in_flight(xcoll_comm_t comm) {
  enum { N = 5000, K = 3 };
  uintptr_t d[K] = {0};
  xcoll_request_t rq[K] = {0};
  float *host = malloc(N * sizeof(float));
  for (int k = 0; k < K; k++) {
    void *stream = NULL;
    CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
    for (int i = 0; i < N; i++)
      host[i] = (float)input(rank, (size_t)(i + k), 1);
    if (cu.mem_alloc(&d[k], N * sizeof(float)) != 0) {
      CHECK(0, "cuMemAlloc");
      free(host);
      return;
    }
    cu.htod(d[k], host, N * sizeof(float));
    xcoll_status status =
        xcoll_iallreduce((void *)d[k], (void *)d[k], N, XCOLL_FLOAT32, XCOLL_SUM,
                         comm, stream, &rq[k]);
    CHECK(status == XCOLL_SUCCESS, "in flight %d: issue %d", k, (int)status);
  }
  for (int k = K - 1; k >= 0; k--) {
    xcoll_status status = rq[k] ? xcoll_wait(rq[k]) : XCOLL_ERR_INTERNAL;
    CHECK(status == XCOLL_SUCCESS, "in flight %d: wait %d", k, (int)status);
    cu.dtoh(host, d[k], N * sizeof(float));
    int wrong = 0;
    for (int i = 0; i < N; i++) {
      uint32_t bits;
      memcpy(&bits, &host[i], 4);
      wrong += bits != reduced((size_t)(i + k), 1);
    }
    CHECK(wrong == 0, "in flight %d: %d wrong", k, wrong);
    cu.mem_free(d[k]);
  }
  free(host);
}

/* --probe: exit 0 when a real CUDA driver with a device is there, else 77
 * (ctest's skip code) with the reason. */
static int probe(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("skipped: no CUDA device (no CUDA driver: %s)\n", dlerror());
    return 77;
  }
  if (dlsym(h, "fake_cuda_ctx_depth") != NULL) {
    printf("skipped: libcuda.so.1 is the stand-in driver, not a GPU's\n");
    return 77;
  }
  int n = test_cuda_device_count();
  if (n == 0) {
    printf("skipped: no CUDA device (the driver found none)\n");
    return 77;
  }
  printf("CUDA devices: %d\n", n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--probe") == 0)
    return probe();
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  /* the device XCOLL_DEVICE names: cuda:N, or cuda for LOCAL_RANK's */
  const char *local = getenv("LOCAL_RANK"), *named = getenv("XCOLL_DEVICE");
  int expected_device = named != NULL && strncmp(named, "cuda:", 5) == 0
                            ? atoi(named + 5)
                            : (local ? atoi(local) : 0);
  if (load_driver(expected_device) != 0)
    return 2;
  xcoll_comm_t comm = NULL;
  xcoll_status status = xcoll_comm_init_env(&comm);
  if (status != XCOLL_SUCCESS) {
    fprintf(stderr, "staging: init: %s\n", xcoll_last_error());
    return 1;
  }
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);
  int device = -5;
  xcoll_comm_device(comm, &device);
  CHECK(device == expected_device, "bound to device %d, expected %d", device,
        expected_device);

  static const size_t counts[] = {1, 1021, 70001};
  void *streams[2] = {NULL, NULL};
  CHECK(cu.stream_create(&streams[1], 0) == 0, "cuStreamCreate");
  for (int kind = 0; kind < NUM_KINDS; kind++)
    for (int is_float = 1; is_float >= 0; is_float--)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int in_place = 0; in_place < 2; in_place++)
          for (int mode = 0; mode < NUM_MODES; mode++) {
            if (quick && (c == 1 || (mode == TEST && !is_float)))
              continue;
            run_case(comm, (enum kind)kind, is_float, counts[c], in_place,
                     (enum mode)mode, mode == BLOCKING ? NULL : streams[c % 2]);
          }
  for (int which = EX_ALLTOALL; which <= EX_SCATTER; which++)
    for (int in_place = 0; in_place < 2; in_place++)
      for (int mode = 0; mode < NUM_MODES; mode++)
        run_exchange(comm, which, mode == WAIT ? 70001 : 3, in_place,
                     (enum mode)mode, mode == BLOCKING ? NULL : streams[mode % 2]);
  for (int mode = 0; mode < NUM_MODES; mode++)
    run_group_shift(comm, mode == WAIT ? 70001 : 5, (enum mode)mode);
  run_host_mix(comm);
  run_in_flight(comm);

  xcoll_comm_t half = NULL;
  status = xcoll_comm_split(comm, rank % 2, rank, &half);
  CHECK(status == XCOLL_SUCCESS, "split: %d", (int)status);
  if (status == XCOLL_SUCCESS) {
    int half_device = -5;
    xcoll_comm_device(half, &half_device);
    CHECK(half_device == device, "split child bound to %d, parent %d", half_device,
          device);
    int saved_rank = rank, saved_size = world_size;
    xcoll_comm_rank(half, &rank);
    xcoll_comm_size(half, &world_size);
    run_case(half, ALLREDUCE, 1, 1021, 0, WAIT, NULL);
    rank = saved_rank;
    world_size = saved_size;
    CHECK(xcoll_comm_destroy(half) == XCOLL_SUCCESS, "destroy split child");
  }
  CHECK(xcoll_comm_destroy(comm) == XCOLL_SUCCESS, "destroy");
  CHECK(cu.pinned_outstanding() == 0, "%d pinned buffers left after destroy",
        cu.pinned_outstanding());
  printf("staging: rank %d: %ld checks, %ld failed\n", rank, checks, failures);
  return failures == 0 ? 0 : 1;
}
