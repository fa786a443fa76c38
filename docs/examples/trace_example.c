/* trace_example.c - one allreduce, to look at in a trace (docs/tracing.md).
 *
 * Each rank fills a vector of `count` float32 values (argument 1, default
 * 1048576 = 4 MiB) with its rank, all-reduces it with SUM, checks that every
 * element equals 0 + 1 + ... + (world_size - 1), and exits. At 4 MiB and four
 * ranks xcoll picks the ring where each rank has a core (Rabenseifner on a
 * smaller machine); XCOLL_ALGO=allreduce:ring forces the ring, so that the
 * trace shows its 2(P-1) steps.
 *
 *   XCOLL_ALGO=allreduce:ring XCOLL_TRACE=/tmp/ring.json XCOLL_DEBUG=INFO \
 *     build/tools/xcollrun --nproc-per-node 4 --master-port 0 ./trace_example
 */
#include <stdio.h>
#include <stdlib.h>

#include <xcoll.h>

int main(int argc, char **argv) {
  size_t count = argc > 1 ? strtoul(argv[1], NULL, 10) : (size_t)1 << 20;
  xcoll_comm_t comm = NULL;
  xcoll_status status = xcoll_comm_init_env(&comm);
  if (status != XCOLL_SUCCESS) {
    fprintf(stderr, "init: %s: %s\n", xcoll_strerror(status),
            xcoll_last_error());
    return 1;
  }
  int rank = 0, world_size = 1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);

  float *values = malloc(count * sizeof *values);
  if (values == NULL)
    return 1;
  for (size_t i = 0; i < count; i++)
    values[i] = (float)rank;
  status = xcoll_allreduce(values, values, count, XCOLL_FLOAT32, XCOLL_SUM,
                           comm);
  if (status != XCOLL_SUCCESS) {
    fprintf(stderr, "rank %d: allreduce: %s: %s\n", rank,
            xcoll_strerror(status), xcoll_comm_last_error(comm));
    return 1;
  }
  float expected = (float)(world_size * (world_size - 1) / 2);
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += values[i] != expected;
  printf("rank %d: %zu of %zu elements wrong\n", rank, wrong, count);
  free(values);
  status = xcoll_comm_destroy(comm);
  return wrong == 0 && status == XCOLL_SUCCESS ? 0 : 1;
}
