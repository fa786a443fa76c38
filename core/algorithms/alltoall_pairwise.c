/* alltoall_pairwise.c - all-to-all and all-to-all-v by pairwise exchange
 * (the MPICH long-message alltoall, Thakur, Rabenseifner & Gropp 2005).
 *
 * Cost: P-1 steps; in step k (1 <= k < P) rank r sends its block for rank
 * r+k and receives rank r-k's block for it (mod P). Each rank puts (P-1)/P
 * of its buffer on the wire once: S (P-1)/P bytes for S = P * count *
 * element size, bandwidth-optimal. Every step's messages are posted at
 * once, so the p2p layer overlaps them, sends first: a small message is on
 * its way to the peer while this rank posts its receives (a 4 B block at
 * P=2 over nccl_like's shm: 0.36 -> 0.30 us a call; larger blocks and the
 * tcp and ucx backends unchanged within the noise); the order of the
 * sends is the pairwise order, so that at any moment most ranks talk to
 * distinct peers. A rank's own block is copied locally. Messages of 0
 * bytes are sent too, so that a count that differs between a sender and
 * its receiver is caught by the p2p size check instead of hanging. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

/* Up to this many ranks the per-peer arrays (offsets and lengths, 2 KiB;
 * requests, 1 KiB) live on the stack, and the blocks an in-place call
 * sends are set aside there up to PAIRWISE_STACK_COPY bytes: a small
 * alltoall then calls no malloc (three of them were about a twelfth of a
 * 1 KiB alltoall's instructions at P=2). */
#define PAIRWISE_STACK_RANKS 64
#define PAIRWISE_STACK_COPY 4096

/* Exchange one block with every other rank: send_at/recv_at give each
 * peer's block (byte offset and length). */
static xcoll_status exchange(struct xcoll_comm *comm, const xcoll_coll_args *args,
                             const char *send, char *recv,
                             const size_t *send_off, const size_t *send_len,
                             const size_t *recv_off, const size_t *recv_len) {
  const int P = comm->world_size, rank = comm->rank;
  const uint64_t tag = xcoll_tag(args, 0);
  if (recv_len[rank] > 0 && recv + recv_off[rank] != send + send_off[rank])
    memmove(recv + recv_off[rank], send + send_off[rank], recv_len[rank]);
  if (P == 1)
    return XCOLL_SUCCESS;
  xcoll_p2p_request *on_stack[2 * (PAIRWISE_STACK_RANKS - 1)];
  xcoll_p2p_request **requests = xcoll_scratch_take(
      comm, on_stack, sizeof on_stack, 2 * (size_t)(P - 1) * sizeof *requests,
      "alltoall requests");
  if (requests == NULL)
    return XCOLL_ERR_NO_MEMORY;
  int n = 0;
  xcoll_status status = XCOLL_SUCCESS;
  double start = xcoll_trace_clock();
  for (int k = 1; k < P && status == XCOLL_SUCCESS; k++) {
    int to = xcoll_rank_mod(rank + k, P);
    requests[n] = NULL;
    status = xcoll_p2p_isend(comm, to, tag, send + send_off[to], send_len[to],
                             &requests[n]);
    n++;
  }
  for (int k = 1; k < P && status == XCOLL_SUCCESS; k++) {
    int from = xcoll_rank_mod(rank - k, P);
    requests[n] = NULL;
    status = xcoll_p2p_irecv(comm, from, tag, recv + recv_off[from],
                             recv_len[from], &requests[n]);
    n++;
  }
  xcoll_status wait_status = xcoll_p2p_wait(comm, requests, n);
  if (status == XCOLL_SUCCESS)
    status = wait_status;
  if (start > 0 && status == XCOLL_SUCCESS) {
    size_t total = 0;
    for (int p = 0; p < P; p++)
      total += p == rank ? 0 : send_len[p];
    xcoll_trace_chunk(comm, "alltoall", -1, total, start);
  }
  xcoll_scratch_release(requests, on_stack);
  return status;
}

/* Four arrays of P offsets/lengths in one piece of scratch: in on_stack
 * (4 * PAIRWISE_STACK_RANKS entries) up to PAIRWISE_STACK_RANKS ranks. */
static size_t *layout_take(struct xcoll_comm *comm, size_t *on_stack) {
  return xcoll_scratch_take(comm, on_stack,
                            4 * PAIRWISE_STACK_RANKS * sizeof *on_stack,
                            4 * (size_t)comm->world_size * sizeof(size_t),
                            "alltoall layout");
}

xcoll_status xcoll_alltoall_pairwise(struct xcoll_comm *comm,
                                     const xcoll_coll_args *args) {
  const int P = comm->world_size;
  const size_t block = args->count * xcoll_datatype_size(args->dtype);
  size_t on_stack[4 * PAIRWISE_STACK_RANKS];
  size_t *layout = layout_take(comm, on_stack);
  if (layout == NULL)
    return XCOLL_ERR_NO_MEMORY;
  size_t *off = layout, *len = layout + P;
  for (int p = 0; p < P; p++) {
    off[p] = (size_t)p * block;
    len[p] = block;
  }
  /* In place: the blocks this rank sends are set aside first (blocks
   * arrive into the input); its own block stays where it is. */
  const char *send = args->sendbuf;
  size_t *send_off = off, *recv_len = len;
  _Alignas(64) char small_copy[PAIRWISE_STACK_COPY];
  char *copy = NULL;
  if (args->sendbuf == args->recvbuf && P > 1) {
    const int rank = comm->rank;
    const char *in = args->sendbuf;
    copy = xcoll_scratch_take(comm, small_copy, sizeof small_copy,
                              block * (size_t)(P - 1),
                              "in-place alltoall input");
    if (copy == NULL) {
      xcoll_scratch_release(layout, on_stack);
      return XCOLL_ERR_NO_MEMORY;
    }
    memcpy(copy, in, block * (size_t)rank);
    memcpy(copy + block * (size_t)rank, in + block * (size_t)(rank + 1),
           block * (size_t)(P - 1 - rank));
    send_off = layout + 2 * P;
    recv_len = layout + 3 * P;
    for (int p = 0; p < P; p++) {
      send_off[p] = (size_t)(p < rank ? p : p > rank ? p - 1 : 0) * block;
      recv_len[p] = p == rank ? 0 : block; /* no local copy */
    }
    send = copy;
  }
  xcoll_status status =
      exchange(comm, args, send, args->recvbuf, send_off, len, off, recv_len);
  if (copy != NULL)
    xcoll_scratch_release(copy, small_copy);
  xcoll_scratch_release(layout, on_stack);
  return status;
}

xcoll_status xcoll_alltoallv_pairwise(struct xcoll_comm *comm,
                                      const xcoll_coll_args *args) {
  const int P = comm->world_size;
  const size_t element = xcoll_datatype_size(args->dtype);
  size_t on_stack[4 * PAIRWISE_STACK_RANKS];
  size_t *layout = layout_take(comm, on_stack);
  if (layout == NULL)
    return XCOLL_ERR_NO_MEMORY;
  size_t *send_off = layout, *send_len = layout + P;
  size_t *recv_off = layout + 2 * P, *recv_len = layout + 3 * P;
  /* Validated: every product and sum fits in PTRDIFF_MAX. */
  for (int p = 0; p < P; p++) {
    send_off[p] = args->sdispls[p] * element;
    send_len[p] = args->sendcounts[p] * element;
    recv_off[p] = args->rdispls[p] * element;
    recv_len[p] = args->recvcounts[p] * element;
  }
  xcoll_status status = exchange(comm, args, args->sendbuf, args->recvbuf,
                                 send_off, send_len, recv_off, recv_len);
  xcoll_scratch_release(layout, on_stack);
  return status;
}
