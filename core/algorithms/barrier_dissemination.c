/* barrier_dissemination.c - dissemination barrier (Hensgen, Finkel & Manber,
 * "Two algorithms for barrier synchronization", IJPP 1988).
 *
 * Cost: ceil(log2 P) steps; at step k each rank sends a zero-byte message to
 * rank + 2^k and receives one from rank - 2^k (mod P). After step k a rank
 * has heard, directly or not, from the 2^(k+1) - 1 ranks before it, so after
 * the last step it knows every rank has arrived. 0 bytes of payload; only the
 * backend's message headers go on the wire. Works for any P, unlike a
 * butterfly barrier. */
#include "algorithm.h"
#include "comm.h"
#include "pipeline.h"

xcoll_status xcoll_barrier_dissemination(struct xcoll_comm *comm,
                                         const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  /* Zero-byte messages still need a valid address. */
  static const char token = 0;
  char sink = 0;
  xcoll_status status = XCOLL_SUCCESS;
  uint32_t step = 0;
  for (int distance = 1; distance < P && status == XCOLL_SUCCESS;
       distance <<= 1, step++) {
    xcoll_p2p_request *requests[2] = {NULL, NULL};
    int to = (rank + distance) % P, from = xcoll_rank_mod(rank - distance, P);
    double start = xcoll_trace_clock();
    status =
        xcoll_p2p_irecv(comm, from, xcoll_tag(args, step), &sink, 0, &requests[0]);
    if (status == XCOLL_SUCCESS)
      status =
          xcoll_p2p_isend(comm, to, xcoll_tag(args, step), &token, 0, &requests[1]);
    if (requests[0] || requests[1]) {
      xcoll_status wait_status = xcoll_p2p_wait(comm, requests, 2);
      if (status == XCOLL_SUCCESS)
        status = wait_status;
    }
    if (start > 0 && status == XCOLL_SUCCESS)
      xcoll_trace_chunk(comm, "recv", from, 0, start);
  }
  return status;
}
