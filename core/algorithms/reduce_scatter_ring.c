/* reduce_scatter_ring.c - ring reduce-scatter: the first half of the ring
 * allreduce (Patarasuk & Yuan 2009), arranged so that rank r ends with
 * block r.
 *
 * Cost: P-1 steps; each rank sends and receives (P-1) * S bytes, where S is
 * one output block (recvcount * element size) - the minimum. Blocks are cut
 * into pipelined chunks of comm->options.chunk_bytes (xcoll_exchange).
 *
 * Reduction order: block b starts on rank b+1 and travels right, each rank
 * folding in its own data: acc = x_{b+1}, then x_{b+2} op acc, ..., ending
 * with x_b op acc on rank b. A float sum is the left fold starting at rank
 * b+1: P-1 roundings, |error| <= (P-1) * eps * sum|x|.
 *
 * sendbuf is never written, even in place (recvbuf == sendbuf + rank
 * blocks): partial blocks live in two block-sized accumulators, one being
 * sent while the next is reduced. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

xcoll_status xcoll_reduce_scatter_ring(struct xcoll_comm *comm,
                                       const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t block = args->count; /* elements per output block */
  const size_t block_bytes = block * elem_size;
  const char *sendbuf = args->sendbuf;
  char *recvbuf = args->recvbuf;
  if (block == 0)
    return XCOLL_SUCCESS;
  if (P == 1) {
    if (sendbuf != recvbuf)
      memcpy(recvbuf, sendbuf, block_bytes);
    return XCOLL_SUCCESS;
  }

  const int right = (rank + 1) % P, left = (rank - 1 + P) % P;
  size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, block);
  /* One allocation: two accumulators, then two receive chunks. */
  char *memory =
      xcoll_scratch_alloc(comm, 2 * block_bytes + 2 * chunk_elems * elem_size,
                          "the ring reduce-scatter's accumulators");
  if (!memory)
    return XCOLL_ERR_NO_MEMORY;
  char *accumulator[2] = {memory, memory + block_bytes};
  char *scratch = memory + 2 * block_bytes;

  xcoll_status status = XCOLL_SUCCESS;
  /* Step s: send the partial of block rank-s-1 (at s = 0 this rank's own
   * data of that block), receive the partial of block rank-s-2 and fold this
   * rank's data into it. The last step's result is block rank. */
  for (int step = 0; step < P - 1 && status == XCOLL_SUCCESS; step++) {
    size_t send_block = (size_t)xcoll_rank_mod(rank - step - 1, P);
    size_t recv_block = (size_t)xcoll_rank_mod(rank - step - 2, P);
    const char *send_from = step == 0 ? sendbuf + send_block * block_bytes
                                      : accumulator[(step - 1) & 1];
    char *reduce_to = step == P - 2 ? recvbuf : accumulator[step & 1];
    status =
        xcoll_exchange(comm, xcoll_tag(args, (uint32_t)step), right, send_from,
                       block, left, reduce_to, block, XCOLL_EXCHANGE_REDUCE,
                       sendbuf + recv_block * block_bytes, scratch, chunk_elems,
                       args->dtype, args->op);
  }
  free(memory);
  if (status == XCOLL_SUCCESS && args->op == XCOLL_AVG)
    xcoll_scale_avg(recvbuf, block, args->dtype, P);
  return status;
}
