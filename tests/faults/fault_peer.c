/* fault_peer.c - a peer fails in the middle of a collective; the others must
 * get an error back from xcoll in bounded time, never hang.
 *
 * Run under xcollrun with 4 ranks (tests/faults/fault_peer.sh does, and
 * checks the output):
 *   fault_peer --kill      rank 2 sends itself SIGKILL before iteration 5 of
 *                          an allreduce loop. Each survivor must return an
 *                          error naming rank 2 within 5 s of the start of the
 *                          collective that failed.
 *   fault_peer --stop S [--blame]
 *                          rank 2 stops itself (SIGSTOP) instead: its sockets
 *                          stay open, so only XCOLL_TIMEOUT_S (S seconds,
 *                          set by the caller) can end the wait. Survivors must
 *                          fail within S + 2 s (at XCOLL_TIMEOUT_S, not twice
 *                          it); with --blame each survivor's message must
 *                          name rank 2, never a healthy rank, as the one that
 *                          stopped. Then each sends SIGKILL to rank 2 (its
 *                          pid was exchanged at start), so that nothing is
 *                          left stopped.
 * Every survivor prints one line "SURVIVOR-OK rank R ..." or
 * "SURVIVOR-BAD rank R ..." and exits 0 or 1 accordingly.
 * FAULT_PEER_COUNT=N: allreduce N float32 elements instead of 1 MiB's
 * (nccl_like runs at most 1024 of them, 4 KiB, as the Bruck allreduce on
 * host ranks: its links, not the ring's, then carry the failure).
 * FAULT_PEER_GPU_RANKS=LIST (comma-separated ranks): those ranks are GPU
 * ranks on CUDA device LOCAL_RANK (nccl_like's kernels on a stream; the
 * stand-in driver in ctest), whose buffers are device memory: the kernel of
 * a survivor must return when the ring breaks, as the host engine does. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "../gpu/test_cuda.h"
#include "xcoll.h"

#define VICTIM 2
#define FAIL_AT_ITERATION 5
#define ITERATIONS 100000  /* far more than can run before the bound */
#define COUNT_DEFAULT (256 * 1024) /* 1 MiB of float32: several ring chunks */

/* A GPU rank's device buffers (tests/gpu/test_cuda.h). */
static test_cuda cu;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int stop_mode = 0;
  int check_blame = 0;
  double timeout_s = 0;
  if (argc == 2 && !strcmp(argv[1], "--kill")) {
    stop_mode = 0;
  } else if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--stop")) {
    stop_mode = 1;
    timeout_s = atof(argv[2]);
    check_blame = argc == 4 && !strcmp(argv[3], "--blame");
  } else {
    fprintf(stderr, "usage: %s --kill | --stop TIMEOUT_S [--blame]\n",
            argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* xcollrun sends SIGTERM to the other ranks as soon as one dies. This test
   * is about what xcoll reports to the survivors, so they outlive that (the
   * driver gives them XCOLLRUN_GRACE_S before SIGKILL). */
  signal(SIGTERM, SIG_IGN);

  /* Tell the driver who to clean up if the job hangs and xcollrun is killed
   * before it can reap us (a stopped rank 2 would otherwise stay behind). */
  const char *pid_file = getenv("FAULT_PEER_PIDS");
  if (pid_file != NULL) {
    int fd = open(pid_file, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd >= 0) {
      char line[32];
      int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
      if (write(fd, line, (size_t)n) != n)
        perror("fault_peer: writing the pid file");
      close(fd);
    }
  }

  int gpu = test_cuda_rank_setup(&cu, "FAULT_PEER_GPU_RANKS", "fault_peer");
  if (gpu < 0) {
    printf("FATAL: FAULT_PEER_GPU_RANKS names this rank, but the CUDA "
           "driver (libcuda.so.1) is not usable\n");
    return 2;
  }
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: init: %s: %s\n", xcoll_strerror(st), xcoll_last_error());
    return 2;
  }
  int rank = -1, world_size = 0;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);
  if (world_size <= VICTIM) {
    printf("FATAL: needs at least %d ranks\n", VICTIM + 1);
    return 2;
  }

  /* Everyone learns the victim's pid, to clean up after --stop. */
  int64_t my_pid = (int64_t)getpid();
  int64_t *pids = calloc((size_t)world_size, sizeof *pids);
  const char *count_text = getenv("FAULT_PEER_COUNT");
  const size_t count = count_text != NULL && atol(count_text) > 0
                           ? (size_t)atol(count_text)
                           : COUNT_DEFAULT;
  float *buf = malloc(count * sizeof *buf);
  if (!pids || !buf)
    return 2;
  /* A GPU rank's collectives take device memory: dbuf for the loop, and
   * the pid exchange through dpid (1 element) and dpids. */
  uintptr_t dbuf = 0, dpid = 0, dpids = 0;
  if (gpu && (cu.mem_alloc(&dbuf, count * sizeof *buf) != 0 ||
              cu.mem_alloc(&dpid, sizeof my_pid) != 0 ||
              cu.mem_alloc(&dpids, (size_t)world_size * sizeof *pids) != 0 ||
              cu.htod(dpid, &my_pid, sizeof my_pid) != 0)) {
    printf("FATAL rank %d: device buffers\n", rank);
    return 2;
  }
  if (gpu) {
    st = xcoll_allgather((const void *)dpid, (void *)dpids, 1, XCOLL_INT64,
                         comm);
    if (st == XCOLL_SUCCESS)
      cu.dtoh(pids, dpids, (size_t)world_size * sizeof *pids);
  } else {
    st = xcoll_allgather(&my_pid, pids, 1, XCOLL_INT64, comm);
  }
  if (st != XCOLL_SUCCESS) {
    printf("FATAL rank %d: allgather of pids: %s\n", rank,
           xcoll_comm_last_error(comm));
    return 2;
  }

  for (int it = 0; it < ITERATIONS; it++) {
    if (rank == VICTIM && it == FAIL_AT_ITERATION) {
      printf("VICTIM rank %d: %s at iteration %d\n", rank,
             stop_mode ? "SIGSTOP" : "SIGKILL", it);
      fflush(stdout);
      kill(getpid(), stop_mode ? SIGSTOP : SIGKILL);
      /* After SIGCONT (if anyone sends it) just leave. */
      return 3;
    }
    for (size_t i = 0; i < count; i++)
      buf[i] = (float)(rank + (int)(i % 7));
    void *data = buf;
    if (gpu) {
      cu.htod(dbuf, buf, count * sizeof *buf);
      data = (void *)dbuf;
    }
    double start = now_s();
    st = xcoll_allreduce(data, data, count, XCOLL_FLOAT32, XCOLL_SUM, comm);
    double elapsed = now_s() - start;
    if (gpu && st == XCOLL_SUCCESS)
      cu.dtoh(buf, dbuf, count * sizeof *buf);
    if (st == XCOLL_SUCCESS) {
      /* Check the sum: a wrong result would hide a broken run. */
      float want0 = (float)(world_size * (world_size - 1) / 2);
      if (buf[0] != want0) {
        printf("SURVIVOR-BAD rank %d: iteration %d gave %g, expected %g\n",
               rank, it, buf[0], want0);
        return 1;
      }
      continue;
    }
    const char *msg = xcoll_comm_last_error(comm);
    int names_victim = strcasestr(msg, "rank 2") != NULL;
    /* The rank blamed: the one the message says stopped or failed. */
    int blames_victim = strstr(msg, "rank 2 stopped") != NULL ||
                        strstr(msg, "rank 2 failed") != NULL ||
                        strstr(msg, "rank 2 (ucx endpoint error") != NULL;
    int ok;
    double bound;
    if (!stop_mode) {
      bound = 5.0;
      ok = names_victim && elapsed < bound && it >= FAIL_AT_ITERATION - 1;
    } else {
      bound = timeout_s + 2.0;
      ok = (st == XCOLL_ERR_TIMEOUT || st == XCOLL_ERR_REMOTE) &&
           elapsed < bound && (!check_blame || blames_victim);
      kill((pid_t)pids[VICTIM], SIGKILL);
    }
    printf("SURVIVOR-%s rank %d: iteration %d failed after %.3f s (bound "
           "%.1f s) with %s (%d), names rank %d: %s, blames it: %s; message: %s\n",
           ok ? "OK" : "BAD", rank, it, elapsed, bound, xcoll_strerror(st),
           (int)st, VICTIM, names_victim ? "yes" : "no",
           blames_victim ? "yes" : "no", msg);
    /* A broken communicator fails at once afterwards. */
    double t1 = now_s();
    xcoll_status again = xcoll_barrier(comm);
    if (again == XCOLL_SUCCESS || now_s() - t1 > 1.0) {
      printf("SURVIVOR-BAD rank %d: barrier after the failure returned %s in "
             "%.3f s (expected an error at once)\n",
             rank, xcoll_strerror(again), now_s() - t1);
      ok = 0;
    }
    xcoll_comm_destroy(comm);
    free(pids);
    free(buf);
    return ok ? 0 : 1;
  }
  printf("SURVIVOR-BAD rank %d: %d allreduces completed without rank %d\n",
         rank, ITERATIONS, VICTIM);
  return 1;
}
