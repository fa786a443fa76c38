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
#include "algorithm.h"
#include "comm.h"
#include "pipeline.h"

/* The doubling steps over the pow2 ranks left after the fold, with tag
 * steps 1..30 (between the fold's). */
static xcoll_status doubling_steps(struct xcoll_comm *comm,
                                   const xcoll_coll_args *args,
                                   const xcoll_fold *fold, void *scratch,
                                   size_t chunk_elems) {
  char *recvbuf = args->recvbuf;
  xcoll_status status = XCOLL_SUCCESS;
  uint32_t step = 1;
  for (int mask = 1; mask < fold->pow2 && status == XCOLL_SUCCESS;
       mask <<= 1, step++) {
    int partner_new = fold->newrank ^ mask;
    int partner = xcoll_fold_rank(fold, partner_new);
    xcoll_exchange_mode mode = partner_new < fold->newrank
                                   ? XCOLL_EXCHANGE_REDUCE_RECV_FIRST
                                   : XCOLL_EXCHANGE_REDUCE;
    status = xcoll_exchange(comm, xcoll_tag(args, step), partner, recvbuf,
                            args->count, partner, recvbuf, args->count, mode,
                            recvbuf, scratch, chunk_elems, args->dtype,
                            args->op);
  }
  return status;
}

xcoll_status xcoll_allreduce_recursive_doubling(struct xcoll_comm *comm,
                                                const xcoll_coll_args *args) {
  return xcoll_allreduce_folded(
      comm, args, "the recursive-doubling allreduce's receive chunks",
      doubling_steps);
}
