/* nl_mixed.c - a mixed ring on nccl_like: some ranks are GPU ranks (their
 * collectives run as CUDA ring kernels on a stream, FIFOs in mapped pinned
 * memory), the others host ranks (worker threads), over one wire protocol.
 * The results must equal a host-only ring's bit for bit.
 *
 * Run under xcollrun, with the CUDA driver (or the stand-in,
 * tests/unit/fake_libcuda.c, first on LD_LIBRARY_PATH):
 *   nl_mixed GPU_RANKS [--quick]
 * GPU_RANKS is a comma-separated list of ranks bound to CUDA device
 * LOCAL_RANK % devices ("none": a host-only ring; "all"). Each rank runs
 * allreduce (float32 sum, float64 sum, bfloat16 sum, float32 avg, int32
 * max), allgather, reduce_scatter (float32 sum), broadcast (root 1) and
 * reduce (float32 sum, root world-1), then a barrier, at counts from 1 to
 * 300007 (one and several channels; both protocols under XCOLL_PROTO=auto);
 * GPU ranks alternate the legacy stream, blocking, and a created stream,
 * non-blocking with xcoll_test. Inputs do not add exactly (mixed
 * exponents), so a different reduction order shows in the bits. Each rank
 * prints one line per call, "HASH <call> <fnv1a of its result>", and checks
 * float sums against a double-precision reference within the ring's
 * rounding bound and integer results exactly. A driver script
 * (nl_mixed.sh) runs it mixed and host-only and compares the HASH lines.
 * Exit 0 when every check passed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/test_cuda.h"
#include "xcoll.h"

static test_cuda cu;

static int rank, world_size, gpu;
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

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Rank r's element i of call c: mixed exponents, so sums round. */
static double value(int r, size_t i, int c) {
  uint64_t h = mix(((uint64_t)r << 40) ^ ((uint64_t)c << 32) ^ mix(i));
  double mantissa = (double)(h & 0xffffff) / (double)0x1000000 - 0.5;
  return ldexp(mantissa, (int)((h >> 24) % 16) - 8);
}

static uint64_t fnv1a(const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static size_t dtype_size(xcoll_datatype t) {
  return t == XCOLL_FLOAT64 ? 8 : t == XCOLL_BFLOAT16 ? 2 : 4;
}

/* Element i of a buffer of dtype t holding v. */
static void put(void *buf, size_t i, xcoll_datatype t, double v) {
  if (t == XCOLL_FLOAT64) {
    ((double *)buf)[i] = v;
  } else if (t == XCOLL_INT32) {
    ((int32_t *)buf)[i] = (int32_t)(v * 1e6);
  } else if (t == XCOLL_BFLOAT16) {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16); /* truncation: any input */
  } else {
    ((float *)buf)[i] = (float)v;
  }
}

static double get(const void *buf, size_t i, xcoll_datatype t) {
  if (t == XCOLL_FLOAT64)
    return ((const double *)buf)[i];
  if (t == XCOLL_INT32)
    return ((const int32_t *)buf)[i];
  if (t == XCOLL_BFLOAT16) {
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  return ((const float *)buf)[i];
}

typedef enum { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, REDUCE } kind;
static const char *const kind_names[] = {"allreduce", "allgather",
                                         "reduce_scatter", "broadcast",
                                         "reduce"};

/* One call: inputs filled, the collective run (on the device for a GPU
 * rank), the result hashed and printed, and checked. */
static void run(int call, kind k, xcoll_datatype t, xcoll_op op,
                size_t count, xcoll_comm_t comm) {
  size_t e = dtype_size(t), P = (size_t)world_size;
  size_t send_n = k == REDUCE_SCATTER ? P * count : count;
  size_t recv_n = k == ALLGATHER ? P * count : count;
  int root = k == BROADCAST ? 1 % world_size : world_size - 1;
  unsigned char *in = malloc(send_n * e), *out = calloc(recv_n, e);
  for (size_t i = 0; i < send_n; i++)
    put(in, i, t, value(rank, i, call));
  const void *sendbuf = in;
  void *recvbuf = out;
  uintptr_t dsend = 0, drecv = 0;
  void *stream = NULL;
  int nonblocking = gpu && call % 2 == 1;
  if (gpu) {
    if (cu.mem_alloc(&dsend, send_n * e) != 0 ||
        cu.mem_alloc(&drecv, recv_n * e) != 0 ||
        cu.htod(dsend, in, send_n * e) != 0 ||
        cu.htod(drecv, out, recv_n * e) != 0) {
      CHECK(0, "call %d: device buffers", call);
      return;
    }
    sendbuf = (const void *)dsend;
    recvbuf = (void *)drecv;
    if (nonblocking)
      CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
  }
  xcoll_status s = XCOLL_SUCCESS;
  xcoll_request_t request = NULL;
  xcoll_request_t *rq = nonblocking ? &request : NULL;
  switch (k) {
  case ALLREDUCE:
    s = rq ? xcoll_iallreduce(sendbuf, recvbuf, count, t, op, comm, stream, rq)
           : xcoll_allreduce(sendbuf, recvbuf, count, t, op, comm);
    break;
  case ALLGATHER:
    s = rq ? xcoll_iallgather(sendbuf, recvbuf, count, t, comm, stream, rq)
           : xcoll_allgather(sendbuf, recvbuf, count, t, comm);
    break;
  case REDUCE_SCATTER:
    s = rq ? xcoll_ireduce_scatter(sendbuf, recvbuf, count, t, op, comm,
                                   stream, rq)
           : xcoll_reduce_scatter(sendbuf, recvbuf, count, t, op, comm);
    break;
  case BROADCAST:
    s = rq ? xcoll_ibroadcast(sendbuf, recvbuf, count, t, root, comm, stream,
                              rq)
           : xcoll_broadcast(sendbuf, recvbuf, count, t, root, comm);
    break;
  case REDUCE:
    s = rq ? xcoll_ireduce(sendbuf, recvbuf, count, t, op, root, comm, stream,
                           rq)
           : xcoll_reduce(sendbuf, recvbuf, count, t, op, root, comm);
    break;
  }
  CHECK(s == XCOLL_SUCCESS, "call %d %s: %s", call, kind_names[k],
        xcoll_last_error());
  if (s == XCOLL_SUCCESS && rq) {
    int done = 0;
    while (!done && s == XCOLL_SUCCESS)
      s = xcoll_test(request, &done);
    CHECK(s == XCOLL_SUCCESS, "call %d test: %s", call, xcoll_last_error());
    /* xcoll_wait releases the request (it returns the same status) */
    xcoll_status again = xcoll_wait(request);
    CHECK(again == s, "call %d: wait after test: %d, test said %d", call,
          (int)again, (int)s);
    if (s == XCOLL_SUCCESS)
      (void)cu.stream_sync(stream);
  }
  if (gpu) {
    cu.dtoh(out, drecv, recv_n * e);
    cu.mem_free(dsend);
    cu.mem_free(drecv);
  }
  int has_result = !(k == REDUCE && rank != root);
  if (has_result)
    printf("HASH %d %s dtype %d op %d count %zu: %016llx\n", call,
           kind_names[k], (int)t, (int)op, count,
           (unsigned long long)fnv1a(out, recv_n * e));
  /* The reference: the exact sum of the rounded inputs, within the ring's
   * bound (P - 1 roundings of the running sum, each at most half an ulp of
   * a partial sum bounded by the sum of magnitudes). */
  int bad = 0;
  for (size_t i = 0; has_result && i < recv_n && bad < 3; i++) {
    size_t block = k == ALLGATHER ? i / count : 0;
    size_t src = k == ALLGATHER ? i % count
                 : k == REDUCE_SCATTER ? (size_t)rank * count + i : i;
    double expect = 0, magnitude = 0, got = get(out, i, t);
    if (k == ALLGATHER || k == BROADCAST) {
      unsigned char one[8];
      put(one, 0, t, value(k == ALLGATHER ? (int)block : root, src, call));
      expect = get(one, 0, t);
    } else {
      for (int r = 0; r < world_size; r++) {
        unsigned char one[8];
        put(one, 0, t, value(r, src, call));
        double v = get(one, 0, t);
        expect = op == XCOLL_MAX ? (r == 0 || v > expect ? v : expect)
                                 : expect + v;
        magnitude += fabs(v);
      }
      if (op == XCOLL_AVG) {
        expect /= world_size;
        magnitude /= world_size;
      }
    }
    double eps = t == XCOLL_FLOAT64 ? 0x1p-53
                 : t == XCOLL_BFLOAT16 ? 0x1p-8
                 : t == XCOLL_INT32    ? 0
                                       : 0x1p-24;
    double bound = (world_size + 1) * eps * magnitude + 1e-300;
    if (!(fabs(got - expect) <= bound)) {
      bad++;
      CHECK(0, "call %d %s dtype %d count %zu [%zu]: %.17g, expected %.17g",
            call, kind_names[k], (int)t, count, i, got, expect);
    }
  }
  checks++;
  free(in);
  free(out);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: nl_mixed GPU_RANKS|none|all [--quick]\n");
    return 2;
  }
  int quick = argc > 2 && strcmp(argv[2], "--quick") == 0;
  const char *env_rank = getenv("RANK");
  const char *local = getenv("LOCAL_RANK");
  rank = env_rank ? atoi(env_rank) : 0;
  /* This rank's placement, before the communicator reads XCOLL_DEVICE. */
  const char *list = argv[1];
  gpu = strcmp(list, "all") == 0;
  if (!gpu && strcmp(list, "none") != 0) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","))
      gpu |= atoi(tok) == rank;
  }
  int device = local ? atoi(local) : 0;
  const char *devices = getenv("NL_MIXED_DEVICES"); /* GPUs to share */
  if (devices != NULL && atoi(devices) > 0)
    device %= atoi(devices);
  char value_text[32];
  snprintf(value_text, sizeof value_text, "cuda:%d", device);
  setenv("XCOLL_DEVICE", gpu ? value_text : "host", 1);
  if (gpu && test_cuda_load(&cu, device, "nl_mixed") != 0)
    return 2;
  xcoll_comm_t comm = NULL;
  xcoll_status s = xcoll_comm_init_env(&comm);
  if (s != XCOLL_SUCCESS) {
    fprintf(stderr, "nl_mixed: init: %s\n", xcoll_last_error());
    return 2;
  }
  xcoll_comm_size(comm, &world_size);
  int bound = 0;
  xcoll_comm_device(comm, &bound);
  CHECK(bound == (gpu ? device : XCOLL_DEVICE_HOST), "bound to %d", bound);

  static const size_t counts[] = {1, 1021, 70001, 300007};
  size_t ncounts = quick ? 3 : 4;
  int call = 0;
  for (size_t c = 0; c < ncounts; c++) {
    size_t n = counts[c];
    run(call++, ALLREDUCE, XCOLL_FLOAT32, XCOLL_SUM, n, comm);
    run(call++, ALLREDUCE, XCOLL_FLOAT64, XCOLL_SUM, n, comm);
    run(call++, ALLREDUCE, XCOLL_BFLOAT16, XCOLL_SUM, n, comm);
    run(call++, ALLREDUCE, XCOLL_FLOAT32, XCOLL_AVG, n, comm);
    run(call++, ALLREDUCE, XCOLL_INT32, XCOLL_MAX, n, comm);
    run(call++, ALLGATHER, XCOLL_FLOAT32, XCOLL_SUM, n, comm);
    run(call++, REDUCE_SCATTER, XCOLL_FLOAT32, XCOLL_SUM, n, comm);
    run(call++, BROADCAST, XCOLL_FLOAT32, XCOLL_SUM, n, comm);
    run(call++, REDUCE, XCOLL_FLOAT32, XCOLL_SUM, n, comm);
  }
  s = xcoll_barrier(comm);
  CHECK(s == XCOLL_SUCCESS, "barrier: %s", xcoll_last_error());
  s = xcoll_comm_destroy(comm);
  CHECK(s == XCOLL_SUCCESS, "destroy: %s", xcoll_last_error());
  printf("nl_mixed: rank %d (%s): %ld checks, %ld failed\n", rank,
         gpu ? "GPU" : "host", checks, failures);
  return failures == 0 ? 0 : 1;
}
