/* netns_loop.c - one rank of the multi-host test (tests/netns/netns.sh): an
 * allreduce loop across network namespaces, whose results are checked
 * exactly. Once NETNS_READY_DIR is given, the rank creates the file
 * <dir>/<rank> after a few iterations, so that the driver cuts a host off
 * only when every rank is mid-run.
 *   netns_loop --iterations N        run N checked allreduces, then exit 0
 *   netns_loop --until-failure B     loop until a call fails; print
 *                                    CUT-OK when the failing call returned
 *                                    within B seconds, else CUT-BAD */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

#define COUNT (64 * 1024) /* 256 KiB of float32: several chunks */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  long iterations = -1;
  double bound = 0;
  if (argc == 3 && !strcmp(argv[1], "--iterations")) {
    iterations = atol(argv[2]);
  } else if (argc == 3 && !strcmp(argv[1], "--until-failure")) {
    bound = atof(argv[2]);
  } else {
    fprintf(stderr, "usage: %s --iterations N | --until-failure BOUND_S\n",
            argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: init: %s\n", xcoll_last_error());
    return 2;
  }
  int rank = 0, world_size = 0;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);
  float *buf = malloc(COUNT * sizeof *buf);
  if (!buf)
    return 2;
  const char *ready_dir = getenv("NETNS_READY_DIR");
  for (long it = 0; iterations < 0 || it < iterations; it++) {
    /* Small integers: the sum is exact in float32 whatever the order. */
    for (int i = 0; i < COUNT; i++)
      buf[i] = (float)((rank + 1) * (i % 13) + it % 5);
    double start = now_s();
    st = xcoll_allreduce(buf, buf, COUNT, XCOLL_FLOAT32, XCOLL_SUM, comm);
    double elapsed = now_s() - start;
    if (st != XCOLL_SUCCESS) {
      int ok = iterations < 0 && elapsed < bound;
      printf("CUT-%s rank %d: iteration %ld failed after %.2f s (bound %.1f "
             "s) with %s: %s\n",
             ok ? "OK" : "BAD", rank, it, elapsed, bound, xcoll_strerror(st),
             xcoll_comm_last_error(comm));
      xcoll_comm_destroy(comm);
      return ok ? 0 : 1;
    }
    for (int i = 0; i < COUNT; i++) {
      float want = (float)((world_size * (world_size + 1) / 2) * (i % 13) +
                           world_size * (it % 5));
      if (buf[i] != want) {
        printf("WRONG rank %d: iteration %ld element %d is %g, expected %g\n",
               rank, it, i, buf[i], want);
        return 1;
      }
    }
    if (it == 3 && ready_dir) {
      char path[512];
      snprintf(path, sizeof path, "%s/%d", ready_dir, rank);
      int fd = open(path, O_WRONLY | O_CREAT, 0600);
      if (fd >= 0)
        close(fd);
    }
  }
  printf("EXACT rank %d: %ld allreduces of %d floats matched the reference\n",
         rank, iterations, COUNT);
  xcoll_comm_destroy(comm);
  free(buf);
  return 0;
}
