/* fault_fr.c - the hangs the flight recorder must explain
 * (tests/faults/fault_fr.sh runs each under xcollrun --log-dir and checks
 * that xcoll-fr names the culprit rank and call):
 *   skip   3 ranks, 8 allreduces; rank 1 skips the 4th, then blocks: the
 *          others hang in allreduce seq 7, which rank 1 never enters.
 *   order  3 ranks; ranks 0 and 1 call allreduce then broadcast, rank 2
 *          broadcast then allreduce: a desync at seq 0.
 *   stop   3 ranks; rank 1 stops itself (SIGSTOP) once its large
 *          allreduce (seq 1) has started: the others wait on it.
 *   recv   2 ranks; rank 0 receives from rank 1, which never sends.
 * A rank that must hang blocks in pause() until xcollrun ends it (the
 * faulty rank's SIGUSR1 dump comes from XCOLL_FLIGHT_RECORDER_SIGNAL=1,
 * which xcollrun --log-dir sets). A rank whose call fails exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xcoll.h"

static void hang(void) {
  for (;;)
    pause();
}

/* Rank 1 of "stop": wait until its non-blocking allreduce is running
 * (its dump says "started"), so that the stop lands inside it. */
static int started(xcoll_comm_t comm, const char *path) {
  if (xcoll_comm_dump(comm, path) != XCOLL_SUCCESS)
    return 0;
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  return strstr(text, "\"seq\":1,\"call\":\"allreduce\",\"count\":8388608,"
                      "\"dtype\":\"float32\",\"op\":\"sum\",\"state\":"
                      "\"started\"") != NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fault_fr skip|order|stop|recv\n");
    return 2;
  }
  const char *mode = argv[1];
  xcoll_comm_t comm;
  xcoll_status status = xcoll_comm_init_env(&comm);
  if (status != XCOLL_SUCCESS) {
    fprintf(stderr, "init: %s\n", xcoll_last_error());
    return 1;
  }
  int rank = 0;
  xcoll_comm_rank(comm, &rank);
  enum { SMALL = 1024 };
  static float small[SMALL];
  for (int i = 0; i < SMALL; i++)
    small[i] = (float)(rank + i);
  status = XCOLL_SUCCESS;

  if (strcmp(mode, "skip") == 0) {
    for (int i = 0; i < 8 && status == XCOLL_SUCCESS; i++) {
      if (rank == 1 && i == 3)
        continue;
      status = xcoll_allreduce(small, small, SMALL, XCOLL_FLOAT32, XCOLL_SUM,
                               comm);
    }
    if (rank == 1 && status == XCOLL_SUCCESS)
      hang();
  } else if (strcmp(mode, "order") == 0) {
    if (rank == 2) {
      status = xcoll_broadcast(small, small, SMALL, XCOLL_FLOAT32, 0, comm);
      if (status == XCOLL_SUCCESS)
        status = xcoll_allreduce(small, small, SMALL, XCOLL_FLOAT32,
                                 XCOLL_SUM, comm);
    } else {
      status = xcoll_allreduce(small, small, SMALL, XCOLL_FLOAT32, XCOLL_SUM,
                               comm);
      if (status == XCOLL_SUCCESS)
        status = xcoll_broadcast(small, small, SMALL, XCOLL_FLOAT32, 0, comm);
    }
  } else if (strcmp(mode, "stop") == 0) {
    enum { LARGE = 8 << 20 }; /* 32 MiB of float32 */
    float *large = calloc(LARGE, sizeof *large);
    if (large == NULL)
      return 1;
    status = xcoll_barrier(comm);
    if (status == XCOLL_SUCCESS && rank == 1) {
      xcoll_request_t request;
      status = xcoll_iallreduce(large, large, LARGE, XCOLL_FLOAT32, XCOLL_SUM,
                                comm, NULL, &request);
      /* The last self-dump stays in the dump directory as inflight.json
       * (not a name xcoll-fr reads): the test checks the call in it. */
      char path[4096];
      const char *dir = getenv("XCOLL_FLIGHT_RECORDER_DIR");
      snprintf(path, sizeof path, "%s/inflight.json", dir ? dir : "/tmp");
      while (status == XCOLL_SUCCESS && !started(comm, path)) {
      }
      printf("VICTIM rank 1 stops inside allreduce seq 1\n");
      fflush(stdout);
      raise(SIGSTOP);
      hang();
    } else if (status == XCOLL_SUCCESS) {
      status = xcoll_allreduce(large, large, LARGE, XCOLL_FLOAT32, XCOLL_SUM,
                               comm);
    }
    free(large);
  } else if (strcmp(mode, "recv") == 0) {
    if (rank == 1)
      hang();
    status = xcoll_recv(small, SMALL, XCOLL_FLOAT32, 1, comm);
  } else {
    fprintf(stderr, "fault_fr: unknown mode '%s'\n", mode);
    return 2;
  }
  printf("rank %d: %s: %s\n", rank, status == XCOLL_SUCCESS ? "ok" : "failed",
         status == XCOLL_SUCCESS ? "" : xcoll_last_error());
  xcoll_comm_destroy(comm);
  /* As an application would: a failed call ends the rank with an error,
   * which makes xcollrun collect the dumps and stop the others. */
  return status == XCOLL_SUCCESS ? 0 : 1;
}
