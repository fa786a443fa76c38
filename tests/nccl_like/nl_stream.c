/* nl_stream.c - a stream of nonblocking collectives longer than a
 * channel's queue (NL_QUEUE_DEPTH, 64 items): every call issued before
 * any is waited on, then waited on in issue order (as nccl-tests' -z 0
 * times them), with a blocking allreduce and a test-polled call in the
 * middle of the stream. start() must wait for room and be woken when the
 * workers have taken items, and the results must be each call's own.
 *
 * Run under xcollrun with >= 1 ranks. Call k is an allreduce (int32, sum)
 * of count_k = 1 + (k * 37) % 300 elements, or on every fifth call an
 * allgather of count_k / P + 1 elements per rank, with element i of rank
 * r's input r * 1000003 + k * 131 + i: the expected results are computed
 * here from that formula, independently of the library. Prints
 * "STREAM-OK rank R: N calls" or "STREAM-BAD rank R: why". */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xcoll.h"

#define CALLS 300

static int32_t input(int rank, int k, size_t i) {
  return (int32_t)((int64_t)rank * 1000003 + (int64_t)k * 131 + (int64_t)i);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  xcoll_comm_t comm = NULL;
  if (xcoll_comm_init_env(&comm) != XCOLL_SUCCESS) {
    printf("STREAM-BAD rank ?: init: %s\n", xcoll_last_error());
    return 1;
  }
  int rank = 0, P = 1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &P);
  int32_t *in[CALLS], *out[CALLS];
  size_t count[CALLS];
  int gather[CALLS];
  xcoll_request_t req[CALLS];
  memset(req, 0, sizeof req);
  int bad = 0;
  char why[256] = "";
  for (int k = 0; k < CALLS; k++) {
    count[k] = 1 + (size_t)(k * 37) % 300;
    gather[k] = k % 5 == 4;
    size_t n_in = gather[k] ? count[k] / (size_t)P + 1 : count[k];
    size_t n_out = gather[k] ? n_in * (size_t)P : count[k];
    in[k] = malloc(n_in * sizeof(int32_t));
    out[k] = calloc(n_out, sizeof(int32_t));
    if (in[k] == NULL || out[k] == NULL) {
      printf("STREAM-BAD rank %d: out of memory\n", rank);
      return 1;
    }
    for (size_t i = 0; i < n_in; i++)
      in[k][i] = input(rank, k, i);
  }
  for (int k = 0; k < CALLS && !bad; k++) {
    xcoll_status st;
    if (k == CALLS / 2) {
      /* A blocking call in the middle of the stream: it runs after every
       * call issued before it, and completes before it returns. */
      st = xcoll_allreduce(in[k], out[k], count[k], XCOLL_INT32, XCOLL_SUM,
                           comm);
    } else if (gather[k]) {
      st = xcoll_iallgather(in[k], out[k], count[k] / (size_t)P + 1,
                            XCOLL_INT32, comm, NULL, &req[k]);
    } else {
      st = xcoll_iallreduce(in[k], out[k], count[k], XCOLL_INT32, XCOLL_SUM,
                            comm, NULL, &req[k]);
    }
    if (st != XCOLL_SUCCESS) {
      bad = 1;
      snprintf(why, sizeof why, "call %d failed at issue: %s: %s", k,
               xcoll_strerror(st), xcoll_comm_last_error(comm));
    }
  }
  for (int k = 0; k < CALLS; k++) {
    if (req[k] == NULL)
      continue;
    xcoll_status st;
    if (k == CALLS - 1) {
      /* The last one polled with xcoll_test until done. */
      int done = 0;
      do
        st = xcoll_test(req[k], &done);
      while (st == XCOLL_SUCCESS && !done);
    } else {
      st = xcoll_wait(req[k]);
    }
    if (st != XCOLL_SUCCESS && !bad) {
      bad = 1;
      snprintf(why, sizeof why, "call %d failed: %s: %s", k,
               xcoll_strerror(st), xcoll_comm_last_error(comm));
    }
  }
  for (int k = 0; k < CALLS && !bad; k++) {
    if (gather[k]) {
      size_t per = count[k] / (size_t)P + 1;
      for (int r = 0; r < P && !bad; r++)
        for (size_t i = 0; i < per && !bad; i++)
          if (out[k][(size_t)r * per + i] != input(r, k, i)) {
            bad = 1;
            snprintf(why, sizeof why,
                     "call %d (allgather): element %zu of rank %d's block "
                     "is %" PRId32 ", expected %" PRId32,
                     k, i, r, out[k][(size_t)r * per + i], input(r, k, i));
          }
    } else {
      for (size_t i = 0; i < count[k] && !bad; i++) {
        int64_t sum = 0;
        for (int r = 0; r < P; r++)
          sum += input(r, k, i);
        if (out[k][i] != (int32_t)sum) {
          bad = 1;
          snprintf(why, sizeof why,
                   "call %d (allreduce of %zu): element %zu is %" PRId32
                   ", expected %" PRId32,
                   k, count[k], i, out[k][i], (int32_t)sum);
        }
      }
    }
  }
  for (int k = 0; k < CALLS; k++) {
    free(in[k]);
    free(out[k]);
  }
  if (bad)
    printf("STREAM-BAD rank %d: %s\n", rank, why);
  else
    printf("STREAM-OK rank %d: %d calls\n", rank, CALLS);
  xcoll_comm_destroy(comm);
  return bad ? 1 : 0;
}
