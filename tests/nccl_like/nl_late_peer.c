/* nl_late_peer.c - a rank that reaches a collective late: the others wait
 * for it inside their kernels, asleep in poll(2) on their sockets once the
 * short spin is over (backends/nccl_like/proxy.c: nl_proxy_progress_hook),
 * and must wake when its data comes and finish with the right result.
 *
 * Run under xcollrun: nl_late_peer [late_ms]. For each size (the gather
 * allreduce's 8 B and 4000 B, the ring's 64 KiB and 1 MiB) and each rank in
 * turn, that rank sleeps late_ms (default 300) before its allreduce (the
 * sleep makes it late; nothing relies on it for ordering), the others enter
 * at once. Every rank checks every element against the exact sum of small
 * integers. Prints "LATE-PEER-OK" or exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "xcoll.h"

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int main(int argc, char **argv) {
  long late_ms = argc > 1 ? atol(argv[1]) : 300;
  setvbuf(stdout, NULL, _IOLBF, 0);
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: init: %s: %s\n", xcoll_strerror(st), xcoll_last_error());
    return 2;
  }
  int rank = 0, world = 1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world);
  static const size_t counts[] = {2, 1000, 16384, 262144}; /* float32 */
  int bad = 0;
  for (size_t c = 0; c < sizeof counts / sizeof counts[0] && !bad; c++) {
    size_t count = counts[c];
    float *buf = malloc(count * sizeof *buf);
    if (buf == NULL)
      return 2;
    for (int late = 0; late < world && !bad; late++) {
      for (size_t i = 0; i < count; i++)
        buf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
      if (rank == late)
        sleep_ms(late_ms);
      st = xcoll_allreduce(buf, buf, count, XCOLL_FLOAT32, XCOLL_SUM, comm);
      if (st != XCOLL_SUCCESS) {
        printf("FAIL rank %d: allreduce of %zu floats, rank %d late: %s\n",
               rank, count, late, xcoll_comm_last_error(comm));
        bad = 1;
        break;
      }
      float ranks_sum = (float)(world * (world + 1) / 2);
      for (size_t i = 0; i < count; i++)
        if (buf[i] != ranks_sum * (float)(i % 7 + 1)) {
          printf("FAIL rank %d: %zu floats, rank %d late: element %zu = %g, "
                 "expected %g\n",
                 rank, count, late, i, buf[i],
                 ranks_sum * (float)(i % 7 + 1));
          bad = 1;
          break;
        }
    }
    free(buf);
  }
  printf("%s rank %d/%d backend %s\n", bad ? "LATE-PEER-BAD" : "LATE-PEER-OK",
         rank, world, xcoll_comm_backend(comm));
  xcoll_comm_destroy(comm);
  return bad;
}
