/* allgather_ring.c - ring allgather: at each of P-1 steps every rank passes
 * the block it received last to its right neighbour (the allgather half of
 * Patarasuk & Yuan 2009).
 *
 * Cost: P-1 steps; each rank sends and receives (P-1) * S bytes, where S is
 * one rank's contribution (sendcount * element size) - the minimum, since
 * every rank must receive the P-1 blocks it lacks. Blocks are cut into
 * pipelined chunks of comm->options.chunk_bytes (xcoll_exchange).
 *
 * No reduction: the result is a copy, bitwise equal on every rank. */
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

xcoll_status xcoll_allgather_ring(struct xcoll_comm *comm,
                                  const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t block = args->count; /* elements per rank */
  char *recvbuf = args->recvbuf;
  if (block == 0)
    return XCOLL_SUCCESS;

  char *mine = recvbuf + (size_t)rank * block * elem_size;
  if ((const char *)args->sendbuf != mine)
    memcpy(mine, args->sendbuf, block * elem_size);

  const int right = (rank + 1) % P, left = (rank - 1 + P) % P;
  size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, SIZE_MAX);
  xcoll_status status = XCOLL_SUCCESS;
  /* Step s: send block rank-s (own at s = 0), receive block rank-s-1. */
  for (int step = 0; step < P - 1 && status == XCOLL_SUCCESS; step++) {
    size_t send_block = (size_t)xcoll_rank_mod(rank - step, P);
    size_t recv_block = (size_t)xcoll_rank_mod(rank - step - 1, P);
    status = xcoll_exchange(comm, xcoll_tag(args, (uint32_t)step), right,
                            recvbuf + send_block * block * elem_size, block,
                            left, recvbuf + recv_block * block * elem_size,
                            block, XCOLL_EXCHANGE_COPY, NULL, NULL, chunk_elems,
                            args->dtype, XCOLL_SUM);
  }
  return status;
}
