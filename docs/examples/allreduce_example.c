/* allreduce_example.c - a small tour of the xcoll API (docs/api.md):
 * create the world communicator from the launcher's environment, run a
 * blocking allreduce, a non-blocking one, split the world in two, show what
 * an argument error looks like, and clean up.
 *
 * Build (from the repository root, after building the library in build/):
 *   cc -std=c11 -Iinclude docs/examples/allreduce_example.c -Lbuild -lxcoll \
 *      -Wl,-rpath,"$PWD/build" -o allreduce_example
 * Run with three ranks:
 *   build/tools/xcollrun --nproc-per-node 3 --master-port 0 ./allreduce_example
 */
#include <stdio.h>
#include <stdlib.h>

#include <xcoll.h>

/* Print what went wrong and leave. A real program would also call
 * xcoll_comm_abort() so that the other ranks stop at once instead of waiting
 * for XCOLL_TIMEOUT_S; the launcher (xcollrun) stops them too. */
#define CHECK(call, comm)                                                      \
  do {                                                                         \
    xcoll_status status_ = (call);                                             \
    if (status_ != XCOLL_SUCCESS) {                                            \
      fprintf(stderr, "%s failed: %s: %s\n", #call, xcoll_strerror(status_),   \
              xcoll_comm_last_error(comm));                                    \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

enum { COUNT = 1000 };

int main(void) {
  /* 1. The world: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT come from the
   * launcher. Before a communicator exists, errors are in xcoll_last_error(). */
  xcoll_comm_t world = NULL;
  xcoll_status status = xcoll_comm_init_env(&world);
  if (status != XCOLL_SUCCESS) {
    fprintf(stderr, "xcoll_comm_init_env: %s: %s\n", xcoll_strerror(status),
            xcoll_last_error());
    return 1;
  }
  int rank = 0, world_size = 0;
  CHECK(xcoll_comm_rank(world, &rank), world);
  CHECK(xcoll_comm_size(world, &world_size), world);
  printf("rank %d of %d, backend %s, xcoll %d\n", rank, world_size,
         xcoll_comm_backend(world), xcoll_version());

  /* 2. Blocking allreduce, out of place: every rank contributes rank + i, so
   * element i of the sum is world_size * i + (0 + 1 + ... + world_size-1). */
  float *send = malloc(COUNT * sizeof *send);
  float *recv = malloc(COUNT * sizeof *recv);
  if (send == NULL || recv == NULL)
    return 1;
  for (int i = 0; i < COUNT; i++)
    send[i] = (float)(rank + i);
  CHECK(xcoll_allreduce(send, recv, COUNT, XCOLL_FLOAT32, XCOLL_SUM, world),
        world);
  float rank_sum = (float)(world_size * (world_size - 1) / 2);
  for (int i = 0; i < COUNT; i++) {
    if (recv[i] != (float)world_size * (float)i + rank_sum) {
      fprintf(stderr, "rank %d: recv[%d] = %g, expected %g\n", rank, i,
              (double)recv[i], (double)((float)world_size * (float)i + rank_sum));
      return 1;
    }
  }

  /* 3. Non-blocking allreduce, in place (sendbuf == recvbuf): the call
   * returns at once and the progress thread runs it. Do other work, then
   * wait. The buffer must not be touched until the request completes. */
  double *values = malloc(COUNT * sizeof *values);
  if (values == NULL)
    return 1;
  for (int i = 0; i < COUNT; i++)
    values[i] = (double)rank;
  xcoll_request_t request = NULL;
  CHECK(xcoll_iallreduce(values, values, COUNT, XCOLL_FLOAT64, XCOLL_MAX,
                         world, NULL /* stream: host buffers */, &request),
        world);
  int done = 0;
  CHECK(xcoll_test(request, &done), world); /* never blocks */
  CHECK(xcoll_wait(request), world);        /* releases the request */
  if (values[0] != (double)(world_size - 1) ||
      values[COUNT - 1] != (double)(world_size - 1)) {
    fprintf(stderr, "rank %d: max is %g, expected %d\n", rank, values[0],
            world_size - 1);
    return 1;
  }

  /* 4. Split: even and odd ranks each get a communicator of their own,
   * ordered by key (here the old rank). Collective over world. */
  xcoll_comm_t half = NULL;
  CHECK(xcoll_comm_split(world, rank % 2, rank, &half), world);
  int half_rank = 0, half_size = 0;
  CHECK(xcoll_comm_rank(half, &half_rank), half);
  CHECK(xcoll_comm_size(half, &half_size), half);
  int one = 1, members = 0;
  CHECK(xcoll_allreduce(&one, &members, 1, XCOLL_INT32, XCOLL_SUM, half), half);
  printf("rank %d: %s half, rank %d of %d (allreduce counted %d)\n", rank,
         rank % 2 ? "odd" : "even", half_rank, half_size, members);
  if (members != half_size)
    return 1;

  /* 5. An argument error: AVG is defined for floating-point types only. It
   * is caught before anything is sent, so the communicator stays usable; the
   * message names the argument. (The library also logs it at WARN on
   * stderr.) */
  int integers[4] = {1, 2, 3, 4};
  status = xcoll_allreduce(integers, integers, 4, XCOLL_INT32, XCOLL_AVG, world);
  if (status != XCOLL_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "rank %d: expected an invalid-argument error\n", rank);
    return 1;
  }
  if (rank == 0)
    printf("expected error: %s: %s\n", xcoll_strerror(status),
           xcoll_comm_last_error(world));
  CHECK(xcoll_barrier(world), world); /* still works */

  /* 6. Destroy in the reverse order of creation. Destroying the world is
   * where rank 0 waits for every rank to arrive before it stops the
   * rendezvous store. After destroy, the handle must not be used. */
  CHECK(xcoll_comm_destroy(half), NULL);
  CHECK(xcoll_comm_destroy(world), NULL);
  free(values);
  free(recv);
  free(send);
  printf("rank %d: ok\n", rank);
  return 0;
}
