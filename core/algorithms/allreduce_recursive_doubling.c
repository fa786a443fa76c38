/* allreduce_recursive_doubling.c - latency-optimal allreduce for small
 * messages: recursive doubling (Thakur, Rabenseifner & Gropp, "Optimization
 * of collective communication operations in MPICH", IJHPCA 2005).
 *
 * Cost with P a power of two: log2(P) steps; at step i each rank exchanges
 * its whole partial vector with the rank whose number differs in bit i, so
 * each rank sends log2(P) * S bytes (S = count * element size). Other P use
 * the fold of pipeline.h: 2 more steps and S more bytes for the ranks below
 * 2 * (P - pow2). Cheap in latency, expensive in bandwidth: for small S.
 *
 * Reduction order: a balanced binary tree. After the fold, the partial of
 * newrank group [g, g + 2^i) is combined with that of the group next to it,
 * the lower group always the left operand, so both partners compute
 * bitwise-identical values (even min/max on -0/+0) and every rank ends with
 * the same result. A float sum has depth log2(pow2) (+1 with a fold), hence
 * |error| <= ceil(log2 P) * eps * sum|x|. */
#include <stdlib.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

/* Tag steps: the fold in, the doubling steps 1..30, the fold out. */
#define STEP_FOLD_IN 0
#define STEP_FOLD_OUT 63

xcoll_status xcoll_allreduce_recursive_doubling(struct xcoll_comm *comm,
                                                const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t count = args->count;
  char *recvbuf = args->recvbuf;
  if (count == 0)
    return XCOLL_SUCCESS;

  size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, count);
  char *scratch =
      xcoll_scratch_alloc(comm, 2 * chunk_elems * elem_size,
                          "the recursive-doubling allreduce's receive chunks");
  if (!scratch)
    return XCOLL_ERR_NO_MEMORY;

  xcoll_fold fold = xcoll_fold_plan(rank, P);
  xcoll_status status = xcoll_fold_in(
      comm, &fold, xcoll_tag(args, STEP_FOLD_IN), args->sendbuf, recvbuf, count,
      scratch, chunk_elems, args->dtype, args->op);
  if (fold.newrank >= 0) {
    uint32_t step = 1;
    for (int mask = 1; mask < fold.pow2 && status == XCOLL_SUCCESS;
         mask <<= 1, step++) {
      int partner_new = fold.newrank ^ mask;
      int partner = xcoll_fold_rank(&fold, partner_new);
      xcoll_exchange_mode mode = partner_new < fold.newrank
                                     ? XCOLL_EXCHANGE_REDUCE_RECV_FIRST
                                     : XCOLL_EXCHANGE_REDUCE;
      status = xcoll_exchange(comm, xcoll_tag(args, step), partner, recvbuf,
                              count, partner, recvbuf, count, mode, recvbuf,
                              scratch, chunk_elems, args->dtype, args->op);
    }
  }
  if (status == XCOLL_SUCCESS)
    status = xcoll_fold_out(comm, &fold, xcoll_tag(args, STEP_FOLD_OUT),
                            recvbuf, count, chunk_elems, args->dtype);
  free(scratch);
  if (status == XCOLL_SUCCESS && args->op == XCOLL_AVG)
    xcoll_scale_avg(recvbuf, count, args->dtype, P);
  return status;
}
