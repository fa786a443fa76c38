/* fault_quiet.c - a communicator that breaks with many requests queued
 * fails every one of them, and says so in a few log lines, not one per
 * request (issue: each survivor of a dead peer once printed one WARN per
 * queued request, tens of MB).
 *
 * Run under xcollrun with 3 ranks: fault_quiet [requests]. Rank 2 exits at
 * once after init without destroying its communicator (a death as its
 * peers see it) once ranks 0 and 1 have queued 64 each. Ranks 0 and 1 start `requests` (default 20000)
 * non-blocking 1-element allreduces, which cannot complete, then wait for
 * each. Each survivor prints "QUIET-OK rank R: N of N failed" when every
 * request failed, else "QUIET-BAD ...". The caller (fault_quiet.sh) counts
 * the survivors' WARN lines. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

int main(int argc, char **argv) {
  long requests = argc > 1 ? atol(argv[1]) : 20000;
  setvbuf(stdout, NULL, _IOLBF, 0);
  xcoll_comm_t comm = NULL;
  if (xcoll_comm_init_env(&comm) != XCOLL_SUCCESS) {
    printf("QUIET-BAD init: %s\n", xcoll_last_error());
    return 1;
  }
  int rank = -1;
  xcoll_comm_rank(comm, &rank);
  /* Every rank is connected (ucx connects lazily at init's end) before
   * rank 2 goes. */
  float one = 1;
  if (xcoll_allreduce(&one, &one, 1, XCOLL_FLOAT32, XCOLL_SUM, comm) !=
      XCOLL_SUCCESS) {
    printf("QUIET-BAD first allreduce: %s\n", xcoll_last_error());
    return 1;
  }
  /* Rank 2 dies once both survivors have queued 64 requests (each then
   * creates FAULT_QUIET_GATE.<rank>): dying any earlier, it could leave
   * while a survivor still finishes the first allreduce. */
  const char *gate = getenv("FAULT_QUIET_GATE");
  char gate0[4096], gate1[4096];
  snprintf(gate0, sizeof gate0, "%s.0", gate ? gate : "");
  snprintf(gate1, sizeof gate1, "%s.1", gate ? gate : "");
  if (rank == 2) {
    struct timespec poll_interval = {0, 5000000};
    for (int i = 0; gate != NULL && i < 6000 &&
                    (access(gate0, F_OK) != 0 || access(gate1, F_OK) != 0);
         i++)
      nanosleep(&poll_interval, NULL);
    _exit(0); /* dies: no destroy, its connections close with the process */
  }
  float *values = calloc((size_t)requests, sizeof *values);
  xcoll_request_t *reqs = calloc((size_t)requests, sizeof *reqs);
  if (values == NULL || reqs == NULL) {
    printf("QUIET-BAD rank %d: out of memory\n", rank);
    return 1;
  }
  long started = 0, failed = 0;
  for (long i = 0; i < requests; i++) {
    /* Past its first allreduce with some requests queued (fewer than
     * nccl_like's window of 128, beyond which a start waits for room):
     * rank 2 may go once both survivors say so. */
    if (i == 64 && gate != NULL) {
      FILE *f = fopen(rank == 0 ? gate0 : gate1, "w");
      if (f != NULL)
        fclose(f);
    }
    xcoll_status st = xcoll_iallreduce(&values[i], &values[i], 1, XCOLL_FLOAT32,
                                       XCOLL_SUM, comm, NULL, &reqs[i]);
    if (st != XCOLL_SUCCESS) {
      failed++; /* refused at the start: the comm broke already */
      reqs[i] = NULL;
      continue;
    }
    started++;
  }
  for (long i = 0; i < requests; i++)
    if (reqs[i] != NULL && xcoll_wait(reqs[i]) != XCOLL_SUCCESS)
      failed++;
  if (failed == requests)
    printf("QUIET-OK rank %d: %ld of %ld failed (%ld started)\n", rank,
           failed, requests, started);
  else
    printf("QUIET-BAD rank %d: only %ld of %ld failed\n", rank, failed,
           requests);
  xcoll_comm_destroy(comm);
  free(reqs);
  free(values);
  return failed == requests ? 0 : 1;
}
