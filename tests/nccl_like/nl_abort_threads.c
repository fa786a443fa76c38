/* nl_abort_threads.c - xcoll_comm_abort ends a collective that can never
 * complete, and xcoll_comm_destroy leaves no thread behind.
 *
 * Run under xcollrun with >= 2 ranks. Every rank counts its threads
 * (/proc/self/task) before creating the communicator, runs one allreduce
 * (checked), then rank 0 starts an allreduce alone (the others never join:
 * it cannot complete), calls xcoll_comm_abort from a second thread after
 * 200 ms and must see xcoll_wait return within 5 s with ABORTED (or REMOTE,
 * if a peer's destroy closed a connection first). The other ranks destroy
 * at once (not abort: an abort right after a collective may cut the last
 * slots its proxy still had to send, and fail a slower peer's collective).
 * After destroy every rank must be back to its starting thread count. Prints "ABORT-OK rank R" or "ABORT-BAD rank R: why". */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *aborter(void *arg) {
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  xcoll_comm_abort((xcoll_comm_t)arg);
  return NULL;
}

/* Records its kernel thread id in *arg. */
static void *note_tid(void *arg) {
  *(pid_t *)arg = gettid();
  return NULL;
}

/* pthread_join returns once a thread has cleared its tid, which the kernel
 * does before it drops the thread from /proc/self/task: wait (bounded) for
 * that entry to go, so that it is not counted. */
static void wait_gone(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d", (int)tid);
  double until = now_s() + 5.0;
  while (access(path, F_OK) == 0 && now_s() < until)
    sched_yield();
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* A sanitizer's runtime (ThreadSanitizer's background thread) starts its
   * own thread at the process's first pthread_create and keeps it: start
   * and join one thread first, so that it is counted before init too. */
  pthread_t first;
  pid_t first_tid = 0;
  if (pthread_create(&first, NULL, note_tid, &first_tid) == 0) {
    pthread_join(first, NULL);
    wait_gone(first_tid);
  }
  int before = count_threads();
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("ABORT-BAD rank ?: init: %s\n", xcoll_last_error());
    return 1;
  }
  int rank = 0, world = 1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world);
  int during = count_threads();
  float x[4] = {1, 2, 3, 4};
  st = xcoll_allreduce(x, x, 4, XCOLL_FLOAT32, XCOLL_SUM, comm);
  if (st != XCOLL_SUCCESS || x[3] != 4.0f * (float)world) {
    printf("ABORT-BAD rank %d: allreduce gave %s, x[3]=%g\n", rank,
           xcoll_strerror(st), x[3]);
    return 1;
  }
  int ok = 1;
  if (rank == 0) {
    float y[1024] = {0};
    xcoll_request_t request = NULL;
    st = xcoll_iallreduce(y, y, 1024, XCOLL_FLOAT32, XCOLL_SUM, comm, NULL,
                          &request);
    if (st != XCOLL_SUCCESS) {
      printf("ABORT-BAD rank 0: iallreduce: %s\n", xcoll_comm_last_error(comm));
      return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, aborter, comm);
    double t0 = now_s();
    st = xcoll_wait(request);
    double waited = now_s() - t0;
    pthread_join(t, NULL);
    if ((st != XCOLL_ERR_ABORTED && st != XCOLL_ERR_REMOTE) || waited > 5.0) {
      printf("ABORT-BAD rank 0: wait returned %s after %.2f s\n",
             xcoll_strerror(st), waited);
      ok = 0;
    }
  }
  xcoll_comm_destroy(comm);
  int after = count_threads();
  if (after != before) {
    printf("ABORT-BAD rank %d: %d threads before init, %d during, %d after "
           "abort + destroy\n",
           rank, before, during, after);
    ok = 0;
  }
  if (ok)
    printf("ABORT-OK rank %d: threads %d before, %d during, %d after\n", rank,
           before, during, after);
  return ok ? 0 : 1;
}
