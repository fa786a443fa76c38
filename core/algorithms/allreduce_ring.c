/* allreduce_ring.c - bandwidth-optimal ring allreduce: a ring reduce-scatter
 * followed by a ring allgather (Patarasuk & Yuan, "Bandwidth optimal
 * all-reduce algorithms for clusters of workstations", JPDC 2009).
 *
 * Cost: 2(P-1) steps; each rank sends and receives 2(P-1)/P * S bytes
 * (S = count * element size), the minimum for any allreduce. Each step moves
 * one block (about S/P bytes) to the right neighbour, cut into chunks of
 * comm->options.chunk_bytes that are pipelined (see xcoll_exchange): the
 * next chunk is on the wire while this one is reduced.
 *
 * Blocks: the vector is cut into P near-equal blocks (xcoll_block_range), so
 * count need not be a multiple of P; with count < P some blocks are empty and
 * their steps send nothing.
 *
 * Reduction order: block b is reduced along the ring starting at rank b:
 * acc = x_b, then acc = x_{b+1} op acc, x_{b+2} op acc, ... (ranks mod P), so
 * a float sum is the left fold ((x_b + x_{b+1}) + x_{b+2}) + ..., P-1
 * roundings, and |error| <= (P-1) * eps * sum|x|. The reduced block is then
 * copied to every rank, so all ranks hold bitwise-identical results. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

xcoll_status xcoll_allreduce_ring(struct xcoll_comm *comm,
                                  const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const char *sendbuf = args->sendbuf;
  char *recvbuf = args->recvbuf;
  const size_t count = args->count;

  if (P == 1 || count == 0) {
    if (sendbuf != recvbuf && count > 0)
      memcpy(recvbuf, sendbuf, count * elem_size);
    return XCOLL_SUCCESS; /* avg over one rank is the value itself */
  }

  const int right = (rank + 1) % P, left = (rank - 1 + P) % P;
  size_t largest_block, unused_offset;
  xcoll_block_range(count, P, 0, &unused_offset, &largest_block);
  size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, largest_block);
  char *scratch = xcoll_scratch_alloc(comm, 2 * chunk_elems * elem_size,
                                      "the ring allreduce's receive chunks");
  if (!scratch)
    return XCOLL_ERR_NO_MEMORY;

  xcoll_status status = XCOLL_SUCCESS;
  /* Reduce-scatter: at step s send block rank-s, receive block rank-s-1 and
   * fold this rank's own data into it. Step 0 sends straight from sendbuf
   * and reduces from sendbuf into recvbuf, so out of place needs no copy;
   * after P-1 steps this rank holds the full result of block rank+1. */
  for (int step = 0; step < P - 1 && status == XCOLL_SUCCESS; step++) {
    size_t send_offset, send_length, recv_offset, recv_length;
    xcoll_block_range(count, P, xcoll_rank_mod(rank - step, P), &send_offset,
                      &send_length);
    xcoll_block_range(count, P, xcoll_rank_mod(rank - step - 1, P),
                      &recv_offset, &recv_length);
    const char *send_from = step == 0 ? sendbuf : recvbuf;
    status =
        xcoll_exchange(comm, xcoll_tag(args, (uint32_t)step), right,
                       send_from + send_offset * elem_size, send_length, left,
                       recvbuf + recv_offset * elem_size, recv_length,
                       XCOLL_EXCHANGE_REDUCE, sendbuf + recv_offset * elem_size,
                       scratch, chunk_elems, args->dtype, args->op);
  }
  /* Allgather: at step s send block rank+1-s (complete here), receive block
   * rank-s straight into place. */
  for (int step = 0; step < P - 1 && status == XCOLL_SUCCESS; step++) {
    size_t send_offset, send_length, recv_offset, recv_length;
    xcoll_block_range(count, P, xcoll_rank_mod(rank + 1 - step, P),
                      &send_offset, &send_length);
    xcoll_block_range(count, P, xcoll_rank_mod(rank - step, P), &recv_offset,
                      &recv_length);
    status = xcoll_exchange(comm, xcoll_tag(args, (uint32_t)(P + step)), right,
                            recvbuf + send_offset * elem_size, send_length,
                            left, recvbuf + recv_offset * elem_size,
                            recv_length, XCOLL_EXCHANGE_COPY, NULL, NULL,
                            chunk_elems, args->dtype, args->op);
  }
  free(scratch);
  if (status == XCOLL_SUCCESS && args->op == XCOLL_AVG)
    xcoll_scale_avg(recvbuf, count, args->dtype, P);
  return status;
}
