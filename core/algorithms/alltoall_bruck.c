/* alltoall_bruck.c - all-to-all by Bruck's algorithm, for small blocks
 * (Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient algorithms for
 * all-to-all communications in multiport message-passing systems", IEEE
 * TPDS 8(11), 1997; the MPICH short-message alltoall).
 *
 * Cost: ceil(log2 P) steps instead of pairwise's P-1. Rank r first rotates
 * its blocks so that position i holds the block for rank r+i. In the step
 * for bit k, every block whose position has bit k set goes to rank r+2^k
 * and the same positions arrive from rank r-2^k; after the last step
 * position i holds the block rank r-i sent to r, and an inverse rotation
 * puts it at block r-i of recvbuf. Each step moves about P/2 blocks, so a
 * rank sends about (P/2) log2(P) blocks in all (pairwise: P-1): fewer
 * messages, more bytes, which wins for small blocks. Scratch: 3 * P blocks. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

xcoll_status xcoll_alltoall_bruck(struct xcoll_comm *comm,
                                  const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  const size_t block = args->count * xcoll_datatype_size(args->dtype);
  const size_t all = block * (size_t)P;
  char *scratch = xcoll_scratch_alloc(comm, 3 * all, "bruck alltoall");
  if (scratch == NULL)
    return XCOLL_ERR_NO_MEMORY;
  char *work = scratch, *pack = scratch + all, *unpack = scratch + 2 * all;
  const char *send = args->sendbuf;
  char *recv = args->recvbuf;

  /* Rotate: work[i] = the block for rank + i. (In place is fine: send is
   * read in full before recv is written.) */
  size_t head = (size_t)rank * block;
  memcpy(work, send + head, all - head);
  memcpy(work + (all - head), send, head);

  xcoll_status status = XCOLL_SUCCESS;
  uint32_t step = 0;
  for (int bit = 1; bit < P && status == XCOLL_SUCCESS; bit <<= 1, step++) {
    size_t packed = 0;
    for (int i = 0; i < P; i++)
      if (i & bit) {
        memcpy(pack + packed, work + (size_t)i * block, block);
        packed += block;
      }
    int to = xcoll_rank_mod(rank + bit, P), from = xcoll_rank_mod(rank - bit, P);
    xcoll_p2p_request *requests[2] = {NULL, NULL};
    double start = xcoll_trace_clock();
    status = xcoll_p2p_irecv(comm, from, xcoll_tag(args, step), unpack, packed,
                             &requests[0]);
    if (status == XCOLL_SUCCESS)
      status = xcoll_p2p_isend(comm, to, xcoll_tag(args, step), pack, packed,
                               &requests[1]);
    xcoll_status wait_status = xcoll_p2p_wait(comm, requests, 2);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
    if (status != XCOLL_SUCCESS)
      break;
    if (start > 0)
      xcoll_trace_chunk(comm, "bruck", to, packed, start);
    packed = 0;
    for (int i = 0; i < P; i++)
      if (i & bit) {
        memcpy(work + (size_t)i * block, unpack + packed, block);
        packed += block;
      }
  }
  /* Inverse rotation: recv block (rank - i) = work[i]. */
  if (status == XCOLL_SUCCESS)
    for (int i = 0; i < P; i++)
      memcpy(recv + (size_t)xcoll_rank_mod(rank - i, P) * block,
             work + (size_t)i * block, block);
  free(scratch);
  return status;
}
