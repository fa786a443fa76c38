/* fault_shrink.c - survivors shrink a communicator and go on
 * (xcoll_comm_shrink).
 *
 * Run under xcollrun with 4 ranks (tests/faults/fault_shrink.sh does, and
 * checks the output):
 *   fault_shrink --kill    after one allreduce, rank 2 sends itself SIGKILL.
 *                          Each survivor's next allreduce (or that one, if
 *                          rank 2 died before the survivor finished it) must
 *                          fail with an error naming rank 2; it then shrinks
 *                          with
 *                          XCOLL_SHRINK_ABORT, excluding rank 2.
 *   fault_shrink --kill0   the same with rank 0, which would host the
 *                          rendezvous store unless the launcher does
 *                          (xcollrun --store-host launcher).
 *   fault_shrink --abort-blocked
 *                          after one allreduce, rank 2 stops itself
 *                          (SIGSTOP). Each survivor has a thread blocked in
 *                          an allreduce that cannot end, and shrinks with
 *                          XCOLL_SHRINK_ABORT from its main thread,
 *                          excluding 2 (a stopped rank is not a failed
 *                          one: the caller knows it); the blocked allreduce
 *                          must fail with XCOLL_ERR_ABORTED long before
 *                          XCOLL_TIMEOUT_S. The survivors then SIGKILL
 *                          rank 2.
 *   fault_shrink --leave   after one allreduce, rank 1 destroys its
 *                          communicator and exits. The others first check
 *                          the argument errors (out of range, duplicate,
 *                          every rank, the caller itself listed), then
 *                          shrink with XCOLL_SHRINK_DEFAULT, excluding 1.
 * On the new communicator each survivor checks its rank (old ranks in order,
 * renumbered 0..2) and size 3, and that an allreduce and an allgather give
 * exactly what is computed here from the old ranks that are left. The
 * exclude list comes from xcoll_comm_failed_ranks, which must list the gone
 * rank alone. Each survivor prints "SHRINK-OK rank R ..." or "SHRINK-BAD
 * rank R ..." and exits 0 or 1 accordingly. The GONE and SHRINK-OK lines
 * end with CLOCK_MONOTONIC times (one clock for the host's processes), from
 * which fault_shrink.sh gives the time from the loss to going on. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

#define WORLD 4
/* 256 KiB of int32: the ring on every backend (nccl_like takes its small
 * host allreduces another way). */
#define COUNT (64 * 1024)

static int bad(int rank, const char *what, xcoll_status status,
               xcoll_comm_t comm) {
  printf("SHRINK-BAD rank %d: %s (status %d: %s)\n", rank, what, (int)status,
         comm != NULL ? xcoll_comm_last_error(comm) : xcoll_last_error());
  fflush(stdout);
  return 1;
}

/* Element i of old rank r's allreduce input. */
static int32_t input(int old_rank, int i) {
  return old_rank * 100000 + i;
}

/* The checks on the shrunk communicator. left[k] is the old rank of new
 * rank k. */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* When the first collective on the shrunk communicator ended (CLOCK_MONOTONIC
 * seconds, one clock for every process of the host). */
static double first_collective_at;

static int check_new(xcoll_comm_t shrunk, int old_rank, const int *left,
                     int left_count) {
  int rank = -1, size = -1;
  xcoll_comm_rank(shrunk, &rank);
  xcoll_comm_size(shrunk, &size);
  int expected_rank = -1;
  for (int k = 0; k < left_count; k++)
    if (left[k] == old_rank)
      expected_rank = k;
  if (size != left_count || rank != expected_rank) {
    printf("SHRINK-BAD rank %d: new rank %d of %d, expected %d of %d\n",
           old_rank, rank, size, expected_rank, left_count);
    return 1;
  }
  static int32_t send[COUNT], recv[COUNT];
  for (int i = 0; i < COUNT; i++)
    send[i] = input(old_rank, i);
  xcoll_status status =
      xcoll_allreduce(send, recv, COUNT, XCOLL_INT32, XCOLL_SUM, shrunk);
  first_collective_at = now_s();
  if (status != XCOLL_SUCCESS)
    return bad(old_rank, "allreduce on the shrunk communicator", status,
               shrunk);
  for (int i = 0; i < COUNT; i++) {
    int32_t expected = 0;
    for (int k = 0; k < left_count; k++)
      expected += input(left[k], i);
    if (recv[i] != expected) {
      printf("SHRINK-BAD rank %d: allreduce element %d is %d, expected %d\n",
             old_rank, i, (int)recv[i], (int)expected);
      return 1;
    }
  }
  int32_t mine = old_rank, gathered[WORLD] = {-1, -1, -1, -1};
  status = xcoll_allgather(&mine, gathered, 1, XCOLL_INT32, shrunk);
  if (status != XCOLL_SUCCESS)
    return bad(old_rank, "allgather on the shrunk communicator", status,
               shrunk);
  for (int k = 0; k < left_count; k++)
    if (gathered[k] != left[k]) {
      printf("SHRINK-BAD rank %d: allgather slot %d holds %d, expected old "
             "rank %d\n",
             old_rank, k, (int)gathered[k], left[k]);
      return 1;
    }
  return 0;
}

/* Argument errors, all found before anything is sent. */
/* The exclude list from xcoll_comm_failed_ranks, which must come to list
 * exactly `gone`: the store hears of a death (or a destroy) about when the
 * peers do, but not necessarily before this rank asks, so ask until it
 * does, within 10 s. 0 when it did, else 1 (SHRINK-BAD printed). */
static int await_failed(xcoll_comm_t comm, int rank, int gone, int *ranks,
                        int *count) {
  int none = -1;
  xcoll_status status = xcoll_comm_failed_ranks(comm, ranks, 1, NULL);
  if (status != XCOLL_ERR_INVALID_ARGUMENT)
    return bad(rank, "xcoll_comm_failed_ranks with count NULL", status, comm);
  double deadline = now_s() + 10.0;
  for (;;) {
    status = xcoll_comm_failed_ranks(comm, ranks, WORLD, count);
    if (status != XCOLL_SUCCESS)
      return bad(rank, "xcoll_comm_failed_ranks", status, comm);
    if (*count == 1 && ranks[0] == gone)
      break;
    if (*count > 0) {
      printf("SHRINK-BAD rank %d: xcoll_comm_failed_ranks lists %d rank(s), "
             "the first %d, not rank %d alone\n",
             rank, *count, ranks[0], gone);
      return 1;
    }
    if (now_s() > deadline) {
      printf("SHRINK-BAD rank %d: xcoll_comm_failed_ranks did not list rank "
             "%d within 10 s\n",
             rank, gone);
      return 1;
    }
    struct timespec nap = {0, 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  /* Only asking how many: ranks NULL with capacity 0. */
  status = xcoll_comm_failed_ranks(comm, NULL, 0, &none);
  if (status != XCOLL_SUCCESS || none != 1)
    return bad(rank, "xcoll_comm_failed_ranks(NULL, 0) did not count 1",
               status, comm);
  return 0;
}

static int check_errors(xcoll_comm_t comm, int rank) {
  xcoll_comm_t out = NULL;
  int out_of_range[1] = {WORLD};
  int twice[2] = {1, 1};
  int every[WORLD] = {0, 1, 2, 3};
  struct {
    const char *what;
    const int *list;
    int count;
    int flags;
  } cases[] = {{"rank out of range", out_of_range, 1, XCOLL_SHRINK_DEFAULT},
               {"rank listed twice", twice, 2, XCOLL_SHRINK_DEFAULT},
               {"every rank", every, WORLD, XCOLL_SHRINK_DEFAULT},
               {"negative count", twice, -1, XCOLL_SHRINK_DEFAULT},
               {"unknown flags", twice, 0, 4}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    xcoll_status status = xcoll_comm_shrink(comm, cases[c].list, cases[c].count,
                                            cases[c].flags, &out);
    if (status != XCOLL_ERR_INVALID_ARGUMENT || out != NULL)
      return bad(rank, cases[c].what, status, comm);
  }
  /* The caller listed: no communicator for it, as NCCL does. */
  xcoll_status status =
      xcoll_comm_shrink(comm, &rank, 1, XCOLL_SHRINK_DEFAULT, &out);
  if (status != XCOLL_SUCCESS || out != NULL)
    return bad(rank, "caller in its own list", status, comm);
  return 0;
}

/* --abort-blocked: an allreduce on comm in a thread of its own, which
 * the main thread's shrink with XCOLL_SHRINK_ABORT must end. */
typedef struct blocked_call {
  xcoll_comm_t comm;
  _Atomic int entering; /* set just before the call */
  xcoll_status status;
  double ended_at;
} blocked_call;

static void *blocked_allreduce(void *arg) {
  blocked_call *call = arg;
  static int32_t send[COUNT], recv[COUNT];
  atomic_store(&call->entering, 1);
  call->status =
      xcoll_allreduce(send, recv, COUNT, XCOLL_INT32, XCOLL_SUM, call->comm);
  call->ended_at = now_s();
  return NULL;
}

/* --abort-blocked: rank 2 leaves its pid in a file of the job's (named by
 * its run id) before its first collective, so that a survivor, which gets
 * past that collective only once rank 2 has joined it, can end it. */
static void victim_pid_path(char *path, size_t bytes) {
  const char *tmp = getenv("TMPDIR"), *run = getenv("TORCHELASTIC_RUN_ID");
  snprintf(path, bytes, "%s/fault-shrink-%s.pid", tmp ? tmp : "/tmp",
           run ? run : "none");
}

static int write_victim_pid(void) {
  char path[512], temp[600];
  victim_pid_path(path, sizeof path);
  snprintf(temp, sizeof temp, "%s.tmp", path);
  FILE *f = fopen(temp, "w");
  if (f == NULL)
    return -1;
  fprintf(f, "%d\n", (int)getpid());
  if (fclose(f) != 0)
    return -1;
  return rename(temp, path);
}

static void kill_victim(void) {
  char path[512];
  victim_pid_path(path, sizeof path);
  FILE *f = fopen(path, "r");
  int pid = 0;
  if (f != NULL) {
    if (fscanf(f, "%d", &pid) != 1)
      pid = 0;
    fclose(f);
  }
  if (pid > 0)
    kill((pid_t)pid, SIGKILL);
  unlink(path);
}

static int abort_blocked(xcoll_comm_t comm, int rank) {
  const int gone = 2;
  blocked_call call = {.comm = comm};
  pthread_t thread;
  if (pthread_create(&thread, NULL, blocked_allreduce, &call) != 0)
    return bad(rank, "pthread_create", XCOLL_ERR_SYSTEM, comm);
  /* The thread is about to block (or blocked): the abort must end its
   * call whichever, and the shrink must not wait for rank 2. */
  while (!atomic_load(&call.entering))
    sched_yield();
  double start = now_s();
  xcoll_comm_t shrunk = NULL;
  int exclude[1] = {gone};
  xcoll_status status =
      xcoll_comm_shrink(comm, exclude, 1, XCOLL_SHRINK_ABORT, &shrunk);
  pthread_join(thread, NULL);
  kill_victim(); /* every survivor, whichever comes first: no longer needed */
  if (status != XCOLL_SUCCESS || shrunk == NULL)
    return bad(rank, "shrink with XCOLL_SHRINK_ABORT", status, comm);
  /* ABORTED, or REMOTE when a survivor's abort reached this rank's call
   * first: either way an error, and no wait for XCOLL_TIMEOUT_S. */
  if (call.status != XCOLL_ERR_ABORTED && call.status != XCOLL_ERR_REMOTE)
    return bad(rank, "the blocked allreduce did not fail with ABORTED",
               call.status, comm);
  printf("rank %d: the blocked allreduce ended %.3f s after the shrink "
         "began: %s\n",
         rank, call.ended_at - start, xcoll_strerror(call.status));
  int left[WORLD], left_count = 0;
  for (int r = 0; r < WORLD; r++)
    if (r != gone)
      left[left_count++] = r;
  xcoll_comm_destroy(comm);
  int failed = check_new(shrunk, rank, left, left_count);
  if (!failed && xcoll_comm_destroy(shrunk) != XCOLL_SUCCESS)
    failed = bad(rank, "destroy of the shrunk communicator", XCOLL_ERR_INTERNAL,
                 NULL);
  if (!failed)
    printf("SHRINK-OK rank %d: rank %d of 3 after rank %d stopped; first "
           "collective on it done at %.6f\n",
           rank, rank - (rank > gone), gone, first_collective_at);
  fflush(stdout);
  return failed;
}

int main(int argc, char **argv) {
  int blocked_mode = argc > 1 && strcmp(argv[1], "--abort-blocked") == 0;
  int kill0_mode = argc > 1 && strcmp(argv[1], "--kill0") == 0;
  int kill_mode = kill0_mode || (argc > 1 && strcmp(argv[1], "--kill") == 0);
  int leave_mode = argc > 1 && strcmp(argv[1], "--leave") == 0;
  if (!kill_mode && !leave_mode && !blocked_mode) {
    fprintf(stderr, "usage: fault_shrink --kill | --kill0 | --leave | "
                    "--abort-blocked\n");
    return 2;
  }
  /* xcollrun sends SIGTERM to the other ranks as soon as one dies: the
   * survivors must live on to shrink. */
  signal(SIGTERM, SIG_IGN);
  const int gone = kill0_mode ? 0 : kill_mode || blocked_mode ? 2 : 1;
  xcoll_comm_t comm = NULL;
  xcoll_status status = xcoll_comm_init_env(&comm);
  if (status != XCOLL_SUCCESS)
    return bad(-1, "init", status, NULL);
  int rank = -1, size = -1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &size);
  if (size != WORLD) {
    printf("SHRINK-BAD rank %d: needs %d ranks, got %d\n", rank, WORLD, size);
    return 1;
  }
  if (blocked_mode && rank == gone && write_victim_pid() != 0)
    return bad(rank, "writing the pid file", XCOLL_ERR_SYSTEM, comm);
  static int32_t send[COUNT], recv[COUNT];
  for (int i = 0; i < COUNT; i++)
    send[i] = input(rank, i);
  /* Rank 2 may die before a survivor has finished the first allreduce:
   * then that one fails already, as the second would. */
  status = xcoll_allreduce(send, recv, COUNT, XCOLL_INT32, XCOLL_SUM, comm);
  /* --abort-blocked: a survivor's abort may end the first allreduce of a
   * slower rank, the stopped one included. */
  if (status != XCOLL_SUCCESS && !blocked_mode && !(kill_mode && rank != gone))
    return bad(rank, "first allreduce", status, comm);

  if (blocked_mode) {
    /* No collective may follow the first allreduce on the communicator
     * to be aborted: a survivor's abort would fail a slower rank's. */
    if (rank == gone) {
      printf("GONE rank %d at %.6f\n", rank, now_s());
      fflush(stdout);
      raise(SIGSTOP);
      return 0; /* not reached: the survivors SIGKILL it */
    }
    return abort_blocked(comm, rank);
  }
  if (rank == gone) {
    printf("GONE rank %d at %.6f\n", rank, now_s());
    fflush(stdout);
    if (kill_mode)
      raise(SIGKILL);
    status = xcoll_comm_destroy(comm);
    return status == XCOLL_SUCCESS ? 0 : bad(rank, "destroy", status, NULL);
  }

  int flags = XCOLL_SHRINK_DEFAULT;
  if (kill_mode) {
    if (status == XCOLL_SUCCESS)
      status =
          xcoll_allreduce(send, recv, COUNT, XCOLL_INT32, XCOLL_SUM, comm);
    if (status == XCOLL_SUCCESS)
      return bad(rank, "the allreduce after the gone rank died succeeded",
                 status, comm);
    const char *message = xcoll_comm_last_error(comm);
    char gone_name[16];
    snprintf(gone_name, sizeof gone_name, "rank %d", gone);
    if (strstr(message, gone_name) == NULL)
      return bad(rank, "the error does not name the gone rank", status, comm);
    printf("rank %d saw: %s\n", rank, message);
    flags = XCOLL_SHRINK_ABORT;
  } else if (check_errors(comm, rank) != 0) {
    return 1;
  }

  int exclude[WORLD], exclude_count = 0;
  if (await_failed(comm, rank, gone, exclude, &exclude_count) != 0)
    return 1;
  xcoll_comm_t shrunk = NULL;
  status = xcoll_comm_shrink(comm, exclude, exclude_count, flags, &shrunk);
  if (status != XCOLL_SUCCESS || shrunk == NULL)
    return bad(rank, "shrink", status, comm);
  int left[WORLD], left_count = 0;
  for (int r = 0; r < WORLD; r++)
    if (r != gone)
      left[left_count++] = r;
  /* The old communicator first: the new one must not need it. */
  xcoll_comm_destroy(comm);
  if (check_new(shrunk, rank, left, left_count) != 0)
    return 1;
  status = xcoll_comm_destroy(shrunk);
  if (status != XCOLL_SUCCESS)
    return bad(rank, "destroy of the shrunk communicator", status, NULL);
  printf("SHRINK-OK rank %d: rank %d of 3 after rank %d %s; first "
         "collective on it done at %.6f\n",
         rank, rank - (rank > gone), gone, kill_mode ? "died" : "left",
         first_collective_at);
  fflush(stdout);
  return 0;
}
