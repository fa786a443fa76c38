/* allreduce_rabenseifner.c - Rabenseifner's allreduce: a reduce-scatter by
 * recursive halving, then an allgather by recursive doubling (Rabenseifner,
 * "Optimization of collective reduction operations", ICCS 2004; Thakur,
 * Rabenseifner & Gropp, IJHPCA 2005).
 *
 * Cost with P a power of two: 2 * log2(P) steps; each rank sends
 * 2 * (P-1)/P * S bytes (S = count * element size): at halving step i it
 * sends S / 2^(i+1) and keeps the other half, and the allgather mirrors it.
 * Same bandwidth as the ring in far fewer steps, so it wins for medium
 * messages. Other P use the fold of pipeline.h: 2 more steps and S more
 * bytes for the ranks below 2 * (P - pow2).
 *
 * Reduction order: a balanced binary tree over newranks, pairing the ranks
 * that differ in the highest bit first (pow2/2 apart), then the next bit;
 * the partial of the lower newrank is always the left operand. A float sum has
 * depth log2(pow2) (+1 with a fold): |error| <= ceil(log2 P) * eps * sum|x|.
 * Each element is reduced on one rank and then copied, so all ranks hold
 * bitwise-identical results. */
#include "algorithm.h"
#include "comm.h"
#include "pipeline.h"

#define STEP_HALVING 1   /* + level, level < 31; after the fold in */
#define STEP_DOUBLING 32 /* + level; before the fold out */
#define MAX_LEVELS 31

/* Halving then doubling over the pow2 ranks left after the fold. */
static xcoll_status halving_doubling(struct xcoll_comm *comm,
                                     const xcoll_coll_args *args,
                                     const xcoll_fold *fold, void *scratch,
                                     size_t chunk_elems) {
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t count = args->count;
  char *recvbuf = args->recvbuf;
  xcoll_status status = XCOLL_SUCCESS;
  /* The window [lo, lo + length) this rank is responsible for, before each
   * halving level: the allgather walks them back up. */
  size_t saved_lo[MAX_LEVELS], saved_length[MAX_LEVELS];
  size_t lo = 0, length = count;
  int levels = 0;
  for (int mask = fold->pow2 / 2; mask >= 1 && status == XCOLL_SUCCESS;
       mask /= 2, levels++) {
    saved_lo[levels] = lo;
    saved_length[levels] = length;
    int partner_new = fold->newrank ^ mask;
    int partner = xcoll_fold_rank(fold, partner_new);
    size_t lower = length / 2, upper = length - lower;
    size_t keep_lo, keep_length, give_lo, give_length;
    if ((fold->newrank & mask) == 0) {
      keep_lo = lo, keep_length = lower;
      give_lo = lo + lower, give_length = upper;
    } else {
      keep_lo = lo + lower, keep_length = upper;
      give_lo = lo, give_length = lower;
    }
    xcoll_exchange_mode mode = partner_new < fold->newrank
                                   ? XCOLL_EXCHANGE_REDUCE_RECV_FIRST
                                   : XCOLL_EXCHANGE_REDUCE;
    status = xcoll_exchange(
        comm, xcoll_tag(args, (uint32_t)(STEP_HALVING + levels)), partner,
        recvbuf + give_lo * elem_size, give_length, partner,
        recvbuf + keep_lo * elem_size, keep_length, mode,
        recvbuf + keep_lo * elem_size, scratch, chunk_elems, args->dtype,
        args->op);
    lo = keep_lo, length = keep_length;
  }
  /* Allgather: undo the halving levels in reverse; at each, the partner
   * holds the other part of the parent window. */
  for (int level = levels - 1; level >= 0 && status == XCOLL_SUCCESS;
       level--) {
    int mask = fold->pow2 >> (level + 1);
    int partner = xcoll_fold_rank(fold, fold->newrank ^ mask);
    size_t parent_lo = saved_lo[level], parent_length = saved_length[level];
    size_t other_lo =
        (fold->newrank & mask) == 0 ? parent_lo + length : parent_lo;
    size_t other_length = parent_length - length;
    status = xcoll_exchange(
        comm, xcoll_tag(args, (uint32_t)(STEP_DOUBLING + level)), partner,
        recvbuf + lo * elem_size, length, partner,
        recvbuf + other_lo * elem_size, other_length, XCOLL_EXCHANGE_COPY,
        NULL, NULL, chunk_elems, args->dtype, args->op);
    lo = parent_lo, length = parent_length;
  }
  return status;
}

xcoll_status xcoll_allreduce_rabenseifner(struct xcoll_comm *comm,
                                          const xcoll_coll_args *args) {
  return xcoll_allreduce_folded(
      comm, args, "the Rabenseifner allreduce's receive chunks",
      halving_doubling);
}
