/* fault_blame.c - the right rank is blamed (tests/faults/fault_blame.sh runs
 * it under xcollrun and checks its verdict lines).
 *
 *   fault_blame --stop VICTIM TIMEOUT_S
 *       Rank VICTIM stops itself (SIGSTOP) before iteration 5 of an
 *       allreduce loop. Every survivor must fail within TIMEOUT_S + 2 s
 *       (XCOLL_TIMEOUT_S, set by the caller) with a message that says
 *       "rank VICTIM stopped making progress": not the rank that timed out
 *       first, not a ring neighbour. The last survivor to finish sends
 *       SIGKILL to the victim (before, a kill would turn the stop into a
 *       death for the survivors still waiting).
 *   fault_blame --leave VICTIM TIMEOUT_S
 *       Rank VICTIM makes one allreduce fewer than the others and destroys
 *       its communicator (a clean exit). Every survivor must fail within 2 s,
 *       well before TIMEOUT_S, with a message that says "rank VICTIM left
 *       (destroyed its communicator)" and never that it died or stopped; the
 *       victim's xcoll_comm_destroy must return within 2 s (not wait out
 *       XCOLL_TIMEOUT_S for peers that can no longer finish).
 * Each survivor prints "BLAME-OK rank R: ..." or "BLAME-BAD rank R: ...", the
 * victim "VICTIM rank V ..." (and, leaving, "VICTIM-OK"/"VICTIM-BAD").
 * FAULT_BLAME_COUNT=N: allreduce N float32 elements (default 64 Ki).
 * FAULT_BLAME_COUNTER names a file the survivors count themselves in (under
 * flock) so that the last one knows it is last. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

#define FAIL_AT_ITERATION 5
#define ITERATIONS 100000 /* far more than can run before the bound */
/* 256 KiB of float32, several chunks on a ring; FAULT_BLAME_COUNT=N for
 * another size (16: nccl_like's Bruck allreduce over its mesh). */
#define COUNT_DEFAULT (64 * 1024)
/* A leave is seen from a closed connection or a goodbye, not a timeout. */
#define LEAVE_BOUND_S 2.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 1 when msg says "rank R <phrase>", with or without the rank's address in
 * parentheses after its number ("rank 2 (10.0.0.3:4711) left ..."). */
static int says(const char *msg, int rank, const char *phrase) {
  char name[32];
  int n = snprintf(name, sizeof name, "rank %d", rank);
  for (const char *at = strstr(msg, name); at; at = strstr(at + 1, name)) {
    const char *p = at + n;
    if (*p >= '0' && *p <= '9')
      continue; /* "rank 2" inside "rank 21" */
    if (p[0] == ' ' && p[1] == '(') {
      const char *close = strchr(p, ')');
      if (close == NULL)
        continue;
      p = close + 1;
    }
    if (*p == ' ' && strncmp(p + 1, phrase, strlen(phrase)) == 0)
      return 1;
  }
  return 0;
}

/* Count this survivor in the shared file; 1 when it is the last of n. */
static int last_survivor(int n) {
  const char *path = getenv("FAULT_BLAME_COUNTER");
  if (path == NULL)
    return 1;
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || flock(fd, LOCK_EX) != 0)
    return 1;
  char text[32] = {0};
  ssize_t got = pread(fd, text, sizeof text - 1, 0);
  int count = (got > 0 ? atoi(text) : 0) + 1;
  int len = snprintf(text, sizeof text, "%d\n", count);
  if (pwrite(fd, text, (size_t)len, 0) != len)
    count = n;
  flock(fd, LOCK_UN);
  close(fd);
  return count >= n;
}

int main(int argc, char **argv) {
  if (argc != 4 ||
      (strcmp(argv[1], "--stop") != 0 && strcmp(argv[1], "--leave") != 0)) {
    fprintf(stderr, "usage: %s --stop|--leave VICTIM TIMEOUT_S\n", argv[0]);
    return 2;
  }
  int stop_mode = strcmp(argv[1], "--stop") == 0;
  int victim = atoi(argv[2]);
  double timeout_s = atof(argv[3]);
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* xcollrun SIGTERMs the group when a rank fails: the verdicts come first
   * (the driver gives XCOLLRUN_GRACE_S before SIGKILL). */
  signal(SIGTERM, SIG_IGN);

  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: init: %s: %s\n", xcoll_strerror(st), xcoll_last_error());
    return 2;
  }
  int rank = -1, world_size = 0;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);
  if (victim < 0 || victim >= world_size || world_size < 3) {
    printf("FATAL: victim %d of %d ranks (needs 3 or more)\n", victim,
           world_size);
    return 2;
  }
  int64_t my_pid = (int64_t)getpid();
  int64_t *pids = calloc((size_t)world_size, sizeof *pids);
  const char *count_text = getenv("FAULT_BLAME_COUNT");
  const size_t count = count_text != NULL && atol(count_text) > 0
                           ? (size_t)atol(count_text)
                           : COUNT_DEFAULT;
  float *buf = malloc(count * sizeof *buf);
  if (!pids || !buf) {
    free(pids);
    free(buf);
    return 2;
  }
  st = xcoll_allgather(&my_pid, pids, 1, XCOLL_INT64, comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL rank %d: allgather of pids: %s\n", rank,
           xcoll_comm_last_error(comm));
    free(pids);
    free(buf);
    return 2;
  }

  for (int it = 0; it < ITERATIONS; it++) {
    if (rank == victim && it == FAIL_AT_ITERATION) {
      if (stop_mode) {
        printf("VICTIM rank %d: SIGSTOP at iteration %d\n", rank, it);
        kill(getpid(), SIGSTOP);
        free(pids);
        free(buf);
        return 3; /* after a SIGCONT, if anyone sends one */
      }
      double t0 = now_s();
      xcoll_status destroyed = xcoll_comm_destroy(comm);
      double took = now_s() - t0;
      int ok = took < LEAVE_BOUND_S;
      printf("VICTIM-%s rank %d: left before iteration %d; "
             "xcoll_comm_destroy returned %s after %.3f s (bound %.1f s)%s%s\n",
             ok ? "OK" : "BAD", rank, it, xcoll_strerror(destroyed), took,
             LEAVE_BOUND_S, destroyed ? ": " : "",
             destroyed ? xcoll_last_error() : "");
      free(pids);
      free(buf);
      return ok ? 0 : 1;
    }
    for (size_t i = 0; i < count; i++)
      buf[i] = (float)(rank + (int)(i % 7));
    double start = now_s();
    st = xcoll_allreduce(buf, buf, count, XCOLL_FLOAT32, XCOLL_SUM, comm);
    double elapsed = now_s() - start;
    if (st == XCOLL_SUCCESS) {
      float want = (float)(world_size * (world_size - 1) / 2);
      if (buf[0] != want) {
        printf("BLAME-BAD rank %d: iteration %d gave %g, expected %g\n", rank,
               it, buf[0], want);
        free(pids);
        free(buf);
        return 1;
      }
      continue;
    }
    const char *msg = xcoll_comm_last_error(comm);
    const char *stopped = "stopped making progress";
    const char *left = "left (destroyed its communicator)";
    double bound = stop_mode ? timeout_s + 2.0 : LEAVE_BOUND_S;
    int blames = stop_mode ? says(msg, victim, stopped)
                           : says(msg, victim, left) &&
                                 !says(msg, victim, "died") &&
                                 !says(msg, victim, stopped) &&
                                 strstr(msg, "probably died") == NULL;
    int ok = blames && elapsed < bound && it >= FAIL_AT_ITERATION - 1;
    printf("BLAME-%s rank %d: iteration %d failed after %.3f s (bound %.1f "
           "s) with %s; says \"rank %d %s\": %s; message: %s\n",
           ok ? "OK" : "BAD", rank, it, elapsed, bound, xcoll_strerror(st),
           victim, stop_mode ? stopped : left, blames ? "yes" : "no", msg);
    if (stop_mode && last_survivor(world_size - 1))
      kill((pid_t)pids[victim], SIGKILL);
    xcoll_comm_destroy(comm);
    free(pids);
    free(buf);
    return ok ? 0 : 1;
  }
  printf("BLAME-BAD rank %d: %d allreduces completed without rank %d\n", rank,
         ITERATIONS, victim);
  free(pids);
  free(buf);
  return 1;
}
