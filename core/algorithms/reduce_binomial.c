/* reduce_binomial.c - binomial-tree reduce toward the root (the MPICH
 * short-message reduce, Thakur, Rabenseifner & Gropp 2005).
 *
 * Cost: ceil(log2 P) steps. Ranks are numbered relative to the root
 * (vrank = rank - root mod P); at step i a vrank with bit i set sends its
 * partial (its own and its subtree's data) to vrank - 2^i and is done; the
 * others receive from vrank + 2^i when it exists. Each non-root rank sends S
 * bytes once; the root receives ceil(log2 P) * S bytes (S = count * element
 * size). Each message is cut into pipelined chunks of
 * comm->options.chunk_bytes (xcoll_exchange), so receiving overlaps
 * reducing; for very large S a reduce-scatter plus gather would move less
 * data through the root (not implemented).
 *
 * Reduction order: a binomial tree in vrank order; the partial of the lower
 * vranks is always the left operand, so the result is the in-order
 * combination x_root op x_root+1 op ... with the tree's association: a float
 * sum has depth ceil(log2 P), |error| <= ceil(log2 P) * eps * sum|x|. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

xcoll_status xcoll_reduce_binomial(struct xcoll_comm *comm,
                                   const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank, root = args->root;
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t count = args->count;
  const int vrank = xcoll_rank_mod(rank - root, P);
  if (count == 0)
    return XCOLL_SUCCESS;
  if (P == 1) {
    if (args->sendbuf != args->recvbuf)
      memcpy(args->recvbuf, args->sendbuf, count * elem_size);
    return XCOLL_SUCCESS;
  }

  /* A rank with children needs an accumulator: the root's recvbuf, or a
   * temporary buffer elsewhere (recvbuf may be NULL off the root). */
  const int has_children = vrank % 2 == 0 && vrank + 1 < P;
  size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, count);
  char *memory = NULL, *accumulator = NULL, *scratch = NULL;
  if (has_children) {
    size_t accumulator_bytes = vrank == 0 ? 0 : count * elem_size;
    memory = xcoll_scratch_alloc(
        comm, accumulator_bytes + 2 * chunk_elems * elem_size,
        "the binomial reduce's partial results");
    if (!memory)
      return XCOLL_ERR_NO_MEMORY;
    accumulator = vrank == 0 ? args->recvbuf : memory;
    scratch = memory + accumulator_bytes;
  }

  const void *partial = args->sendbuf; /* until a child's data is folded in */
  xcoll_status status = XCOLL_SUCCESS;
  uint32_t level = 0;
  for (int mask = 1; mask < P && status == XCOLL_SUCCESS; mask <<= 1, level++) {
    if (vrank & mask) {
      int parent = xcoll_rank_mod(vrank - mask + root, P);
      status = xcoll_exchange(comm, xcoll_tag(args, level), parent, partial,
                              count, -1, NULL, 0, XCOLL_EXCHANGE_COPY, NULL,
                              NULL, chunk_elems, args->dtype, args->op);
      break;
    }
    if (vrank + mask >= P)
      continue;
    int child = xcoll_rank_mod(vrank + mask + root, P);
    status = xcoll_exchange(comm, xcoll_tag(args, level), -1, NULL, 0, child,
                            accumulator, count, XCOLL_EXCHANGE_REDUCE, partial,
                            scratch, chunk_elems, args->dtype, args->op);
    partial = accumulator;
  }
  free(memory);
  if (status == XCOLL_SUCCESS && vrank == 0 && args->op == XCOLL_AVG)
    xcoll_scale_avg(args->recvbuf, count, args->dtype, P);
  return status;
}
