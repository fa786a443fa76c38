/* fault_desync.c - ranks that call different collectives (a desync) must all
 * fail with XCOLL_ERR_PROTOCOL within seconds, with a message that names both
 * calls (core/fingerprint.h), instead of returning wrong data or waiting for
 * XCOLL_TIMEOUT_S.
 *
 *   fault_desync CASE     under xcollrun, 2 or more ranks
 * The last rank makes the odd call; every other rank makes the base call:
 *   op     allreduce(sum, float32, 1000)  vs allreduce(max, float32, 1000)
 *   dtype  allreduce(sum, float32, 1000)  vs allreduce(sum, int32, 1000)
 *          (same element size: the byte counts agree)
 *   count  allreduce(sum, float32, 1000)  vs allreduce(sum, float32, 1001)
 *   root   broadcast(root 0, float32, 1000) vs broadcast(root P-1, ...)
 *   bcast-count  broadcast(root 0, float32, 1000) vs broadcast(root 0,
 *          float32, 4000): on nccl_like's host ranks from 3 the first is
 *          a Bruck broadcast, which skips core's agreement round, and the
 *          second (above 4 KiB) runs that round before the ring
 *   kind   allreduce(sum, float32, 1000)  vs broadcast(root P-1, ...)
 *   premul allreduce(sum, float32, 1000)  vs allreduce(premul_sum, ...)
 *          (a pre-multiplied sum runs as a sum over scaled inputs: only
 *          the fingerprint tells them apart; host ranks only)
 * and, as the last call before xcoll_comm_destroy, rank 0 making the odd
 * call (where a rank receives nothing, or waits on a rank that sends it
 * nothing):
 *   broadcast-last  broadcast(root 1, float32, 1000) vs broadcast(root 0, ...)
 *   reduce-last     reduce(sum, root 1, float32, 1000) vs reduce(sum, root 0,
 *                   ...)
 *   gather-last     gather(root 1, float32, 1000) vs gather(root 0, ...)
 *   scatter-last    scatter(root 1, float32, 1000) vs scatter(root 0, ...)
 * A case with "-small" appended runs at 100 elements instead of 1000.
 * A rank whose call returns success (it only sent) must fail by its next
 * barrier; in the -last cases there is none: every rank must fail in the
 * mismatched call itself (or the barrier just before it, when a faster rank
 * has found the mismatch already). And:
 *   unreceived      the last rank makes one allreduce more than the others,
 *                   which wait 1 s and destroy their communicator: that
 *                   call fails on the last rank (its peer left), and the
 *                   others' destroy warns that rank P-1 sent a message none
 *                   of their calls received (tcp; ctest matches the WARN).
 * Each rank prints DESYNC-OK or DESYNC-BAD and exits 0 or 1. Run
 * with a long XCOLL_TIMEOUT_S, so that a timeout cannot pass for detection.
 * FAULT_DESYNC_GPU_RANKS=LIST (comma-separated ranks): those ranks are GPU
 * ranks on CUDA device LOCAL_RANK with device buffers (nccl_like's kernels;
 * the stand-in driver under ctest): a mixed ring must catch a desync as a
 * host ring does, over SIMPLE and over LL (where every rank checks the
 * fingerprint's digest in the LL flags). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../gpu/test_cuda.h"
#include "xcoll.h"

#define COUNT 1000
#define MAX_RANKS 8
#define BOUND_S 10.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct call {
  int broadcast; /* 0: allreduce */
  int reduce;    /* 1: reduce (broadcast 0) */
  const char *rooted; /* "gather" or "scatter" (the others 0), else NULL */
  xcoll_op op;
  xcoll_datatype dtype;
  size_t count;
  int root;
} call;

static void describe(const call *c, char *out, size_t bytes) {
  if (c->rooted)
    snprintf(out, bytes, "%s(root %d, %s, %zu)", c->rooted, c->root,
             xcoll_datatype_name(c->dtype), c->count);
  else if (c->reduce)
    snprintf(out, bytes, "reduce(%s, root %d, %s, %zu)", xcoll_op_name(c->op),
             c->root, xcoll_datatype_name(c->dtype), c->count);
  else if (c->broadcast)
    snprintf(out, bytes, "broadcast(root %d, %s, %zu)", c->root,
             xcoll_datatype_name(c->dtype), c->count);
  else
    snprintf(out, bytes, "allreduce(%s, %s, %zu)", xcoll_op_name(c->op),
             xcoll_datatype_name(c->dtype), c->count);
}

/* buf holds (COUNT + 1) * MAX_RANKS elements: a gather's or scatter's root
 * buffer is count per rank, the rank's own block at the start. */
static xcoll_status run(const call *c, float *buf, xcoll_comm_t comm) {
  size_t block = COUNT + 1;
  if (c->rooted && !strcmp(c->rooted, "gather"))
    return xcoll_gather(buf, buf + block, c->count, c->dtype, c->root, comm);
  if (c->rooted)
    return xcoll_scatter(buf + block, buf, c->count, c->dtype, c->root, comm);
  if (c->reduce)
    return xcoll_reduce(buf, buf, c->count, c->dtype, c->op, c->root, comm);
  if (c->broadcast)
    return xcoll_broadcast(buf, buf, c->count, c->dtype, c->root, comm);
  return xcoll_allreduce(buf, buf, c->count, c->dtype, c->op, comm);
}

/* The unreceived case: returns the exit code. */
static int unreceived_case(xcoll_comm_t comm, int rank, int odd) {
  static float buf[COUNT];
  xcoll_status st = xcoll_barrier(comm);
  const char *what = "the barrier";
  int ok = st == XCOLL_SUCCESS;
  if (ok && rank == odd) {
    st = xcoll_allreduce(buf, buf, COUNT, XCOLL_FLOAT32, XCOLL_SUM, comm);
    what = "its extra allreduce";
    ok = st == XCOLL_ERR_REMOTE;
  } else if (ok) {
    /* time for the extra call's message to arrive before the destroy */
    struct timespec pause = {1, 0};
    nanosleep(&pause, NULL);
  }
  printf("DESYNC-%s rank %d (unreceived): %s returned %s; message: %s\n",
         ok ? "OK" : "BAD", rank, what, xcoll_strerror(st),
         st == XCOLL_SUCCESS ? "" : xcoll_comm_last_error(comm));
  xcoll_comm_destroy(comm);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr,
            "usage: %s op|dtype|count|root|kind|premul|broadcast-last|"
            "reduce-last|gather-last|scatter-last|unreceived\n",
            argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_cuda cu;
  int gpu = test_cuda_rank_setup(&cu, "FAULT_DESYNC_GPU_RANKS", "fault_desync");
  if (gpu < 0) {
    printf("FATAL: FAULT_DESYNC_GPU_RANKS names this rank, but the CUDA "
           "driver (libcuda.so.1) is not usable\n");
    return 2;
  }
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: init: %s\n", xcoll_last_error());
    return 2;
  }
  int rank = 0, world_size = 0;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);
  int odd = world_size - 1;
  if (!strcmp(argv[1], "unreceived"))
    return unreceived_case(comm, rank, odd);
  call base = {0, 0, NULL, XCOLL_SUM, XCOLL_FLOAT32, COUNT, 0};
  call other = base;
  char which[32];
  snprintf(which, sizeof which, "%s", argv[1]);
  /* CASE-small: the case at 100 elements, a small call (nccl_like's host
   * ranks run small gathers and scatters as Bruck collectives). */
  size_t length = strlen(which);
  if (length > 6 && !strcmp(which + length - 6, "-small")) {
    which[length - 6] = '\0';
    base.count = other.count = 100;
  }
  int last = !strcmp(which, "broadcast-last") ||
             !strcmp(which, "reduce-last") || !strcmp(which, "gather-last") ||
             !strcmp(which, "scatter-last");
  if (world_size > MAX_RANKS) {
    printf("FATAL: at most %d ranks\n", MAX_RANKS);
    return 2;
  }
  if (last) {
    /* rank 0 says root 0, the others root 1 */
    odd = 0;
    base.broadcast = other.broadcast = !strcmp(which, "broadcast-last");
    base.reduce = other.reduce = !strcmp(which, "reduce-last");
    if (!strcmp(which, "gather-last") || !strcmp(which, "scatter-last"))
      base.rooted = other.rooted =
          !strcmp(which, "gather-last") ? "gather" : "scatter";
    base.root = 1;
    other.root = 0;
  } else if (!strcmp(which, "op")) {
    other.op = XCOLL_MAX;
  } else if (!strcmp(which, "dtype")) {
    other.dtype = XCOLL_INT32;
  } else if (!strcmp(which, "count")) {
    other.count = COUNT + 1;
  } else if (!strcmp(which, "root")) {
    base.broadcast = 1;
    other.broadcast = 1;
    other.root = odd;
  } else if (!strcmp(which, "bcast-count")) {
    base.broadcast = 1;
    other.broadcast = 1;
    other.count = 4 * COUNT;
  } else if (!strcmp(which, "kind")) {
    other.broadcast = 1;
    other.root = odd;
  } else if (!strcmp(which, "premul")) {
    float two = 2.0f;
    st = xcoll_op_create_premul_sum(&other.op, &two, XCOLL_FLOAT32,
                                    XCOLL_SCALAR_HOST, comm);
    if (st != XCOLL_SUCCESS) {
      printf("FATAL: xcoll_op_create_premul_sum: %s\n",
             xcoll_comm_last_error(comm));
      return 2;
    }
  } else {
    fprintf(stderr, "unknown case %s\n", which);
    return 2;
  }
  char base_text[96], other_text[96];
  describe(&base, base_text, sizeof base_text);
  describe(&other, other_text, sizeof other_text);

  size_t elements = (COUNT + 1) * (MAX_RANKS + 1);
  float *host = calloc(elements, sizeof *host), *buf = host;
  if (!host)
    return 2;
  uintptr_t dbuf = 0;
  if (gpu) { /* a GPU rank's collectives take device memory */
    if (cu.mem_alloc(&dbuf, elements * sizeof *host) != 0 ||
        cu.htod(dbuf, host, elements * sizeof *host) != 0) {
      printf("FATAL rank %d: device buffers\n", rank);
      return 2;
    }
    buf = (float *)dbuf;
  }
  /* Start together, so that the bound measures detection. A rank may still
   * be finishing this barrier when a faster one has found the mismatch and
   * aborted: then the barrier itself fails, with the same message. */
  double start = now_s();
  const char *step = "the barrier before the mismatched call";
  st = xcoll_barrier(comm);
  if (st == XCOLL_SUCCESS) {
    start = now_s();
    st = run(rank == odd ? &other : &base, buf, comm);
    step = "the mismatched call";
  }
  for (int i = 0; !last && st == XCOLL_SUCCESS && i < 3; i++) {
    st = xcoll_barrier(comm);
    step = "a barrier after it";
  }
  double elapsed = now_s() - start;
  const char *msg = xcoll_comm_last_error(comm);
  int names_both = strstr(msg, base_text) != NULL && strstr(msg, other_text) != NULL;
  int ok = st == XCOLL_ERR_PROTOCOL && names_both && elapsed < BOUND_S;
  printf("DESYNC-%s rank %d (%s): %s returned %s after %.3f s (bound %.0f s); "
         "names \"%s\" and \"%s\": %s; message: %s\n",
         ok ? "OK" : "BAD", rank, which, step, xcoll_strerror(st), elapsed,
         BOUND_S, base_text, other_text, names_both ? "yes" : "no", msg);
  xcoll_comm_destroy(comm);
  if (gpu)
    cu.mem_free(dbuf);
  free(host);
  return ok ? 0 : 1;
}
