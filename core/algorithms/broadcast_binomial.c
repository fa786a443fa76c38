/* broadcast_binomial.c - binomial-tree broadcast for small messages (the
 * MPICH short-message broadcast, Thakur, Rabenseifner & Gropp 2005).
 *
 * Cost: ceil(log2 P) steps. Ranks are numbered relative to the root
 * (vrank = rank - root mod P); vrank v receives the whole message from
 * v - 2^k, where 2^k is its lowest set bit, then sends it to v + 2^j for each
 * j < k with v + 2^j < P. The root sends ceil(log2 P) * S bytes, an inner
 * rank up to (log2 P - 1) * S, a leaf nothing (S = count * element size).
 * Every message is the whole buffer: few steps, but no pipelining, so for
 * large S broadcast_chain is faster. */
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

#define MAX_CHILDREN 32

xcoll_status xcoll_broadcast_binomial(struct xcoll_comm *comm,
                                      const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank, root = args->root;
  const size_t bytes = args->count * xcoll_datatype_size(args->dtype);
  const int vrank = xcoll_rank_mod(rank - root, P);
  const uint64_t tag = xcoll_tag(args, 0);
  if (args->count == 0)
    return XCOLL_SUCCESS;

  const char *data = args->recvbuf;
  xcoll_status status = XCOLL_SUCCESS;
  int mask = 1;
  if (vrank == 0) {
    data = args->sendbuf;
    if (args->sendbuf != args->recvbuf)
      memcpy(args->recvbuf, args->sendbuf, bytes);
    while (mask < P)
      mask <<= 1;
  } else {
    while (!(vrank & mask))
      mask <<= 1;
    int parent = xcoll_rank_mod(vrank - mask + root, P);
    xcoll_p2p_request *request = NULL;
    double start = xcoll_trace_clock();
    status = xcoll_p2p_irecv(comm, parent, tag, args->recvbuf, bytes, &request);
    if (status == XCOLL_SUCCESS)
      status = xcoll_p2p_wait(comm, &request, 1);
    if (status != XCOLL_SUCCESS)
      return status;
    if (start > 0)
      xcoll_trace_chunk(comm, "recv", parent, bytes, start);
  }

  /* Send to every child at once, then wait for all of them. */
  xcoll_p2p_request *requests[MAX_CHILDREN];
  int children = 0;
  double start = xcoll_trace_clock();
  for (mask >>= 1; mask > 0 && status == XCOLL_SUCCESS; mask >>= 1) {
    if (vrank + mask >= P)
      continue;
    int child = xcoll_rank_mod(vrank + mask + root, P);
    requests[children] = NULL;
    status = xcoll_p2p_isend(comm, child, tag, data, bytes, &requests[children]);
    children++;
  }
  if (children > 0) {
    xcoll_status wait_status = xcoll_p2p_wait(comm, requests, children);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  if (start > 0 && status == XCOLL_SUCCESS && children > 0)
    xcoll_trace_chunk(comm, "send", -1, bytes * (size_t)children, start);
  return status;
}
