/* broadcast_chain.c - pipelined chain broadcast for large messages: the
 * ranks form a chain starting at the root (root, root+1, ..., mod P), the
 * message is cut into chunks of comm->options.chunk_bytes, and each rank
 * forwards chunk k to the next while chunk k+1 arrives (the pipelined
 * broadcast of Traff & Ripke, "Optimal broadcast for fully connected
 * processor-node networks", JPDC 2008, in its simplest linear form; NCCL's
 * ring broadcast works the same way).
 *
 * Cost: C + P - 2 chunk steps for C chunks; every rank but the last sends S
 * bytes and every rank but the root receives S bytes (S = count * element
 * size). For S much larger than P chunks, the time approaches S / bandwidth
 * whatever P is, which is why it beats the binomial tree for large S. */
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

xcoll_status xcoll_broadcast_chain(struct xcoll_comm *comm,
                                   const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank, root = args->root;
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t count = args->count;
  const int vrank = xcoll_rank_mod(rank - root, P);
  const uint64_t tag = xcoll_tag(args, 0);
  if (count == 0)
    return XCOLL_SUCCESS;

  char *recvbuf = args->recvbuf;
  const char *data = recvbuf;
  if (vrank == 0) {
    data = args->sendbuf;
    if (args->sendbuf != args->recvbuf)
      memcpy(recvbuf, args->sendbuf, count * elem_size);
  }
  if (P == 1)
    return XCOLL_SUCCESS;
  const int receives = vrank != 0, sends = vrank != P - 1;
  const int prev = xcoll_rank_mod(rank - 1, P), next = (rank + 1) % P;
  const size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, SIZE_MAX);
  const size_t chunks = (count + chunk_elems - 1) / chunk_elems;

  /* Two receives and two sends in flight, by slot k % 2. */
  xcoll_p2p_request *recv_req[2] = {NULL, NULL}, *send_req[2] = {NULL, NULL};
  xcoll_status status = XCOLL_SUCCESS;
#define CHUNK_FIRST(k) ((k)*chunk_elems)
#define CHUNK_LENGTH(k)                                                        \
  (count - CHUNK_FIRST(k) < chunk_elems ? count - CHUNK_FIRST(k) : chunk_elems)
  for (size_t k = 0; receives && k < 2 && k < chunks; k++)
    if (status == XCOLL_SUCCESS)
      status =
          xcoll_p2p_irecv(comm, prev, tag, recvbuf + CHUNK_FIRST(k) * elem_size,
                      CHUNK_LENGTH(k) * elem_size, &recv_req[k]);

  for (size_t k = 0; k < chunks && status == XCOLL_SUCCESS; k++) {
    int slot = (int)(k & 1);
    /* This chunk must have arrived, and the send two chunks back (same
     * slot) must be done before the slot is reused. */
    xcoll_p2p_request *pair[2] = {recv_req[slot], send_req[slot]};
    recv_req[slot] = send_req[slot] = NULL;
    double start = xcoll_trace_clock();
    if (pair[0] || pair[1])
      status = xcoll_p2p_wait(comm, pair, 2);
    if (status != XCOLL_SUCCESS)
      break;
    if (start > 0 && receives)
      xcoll_trace_chunk(comm, "recv", prev, CHUNK_LENGTH(k) * elem_size, start);
    if (sends)
      status = xcoll_p2p_isend(comm, next, tag, data + CHUNK_FIRST(k) * elem_size,
                           CHUNK_LENGTH(k) * elem_size, &send_req[slot]);
    if (status == XCOLL_SUCCESS && receives && k + 2 < chunks)
      status =
          xcoll_p2p_irecv(comm, prev, tag, recvbuf + CHUNK_FIRST(k + 2) * elem_size,
                      CHUNK_LENGTH(k + 2) * elem_size, &recv_req[slot]);
  }
#undef CHUNK_FIRST
#undef CHUNK_LENGTH
  /* The last sends; on error, release whatever is still posted. */
  xcoll_p2p_request *rest[4] = {send_req[0], send_req[1], recv_req[0],
                                recv_req[1]};
  if (rest[0] || rest[1] || rest[2] || rest[3]) {
    xcoll_status wait_status = xcoll_p2p_wait(comm, rest, 4);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  return status;
}
