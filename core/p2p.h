/* p2p.h - the point-to-point interface host-driven backends supply
 * (xcoll's analogue of gloo/transport/pair.h).
 *
 * Core's algorithms (core/algorithms/) are written only against this
 * interface; backends/tcp and backends/ucx implement it. An algorithm never
 * sees a socket or a UCP endpoint.
 *
 * Matching rule (MPI's non-overtaking rule, made strict): between one
 * sender and one receiver on one communicator, messages are matched in the
 * order they were posted. The tag is not searched for; it is checked: a
 * message whose tag differs from the posted receive's is XCOLL_ERR_PROTOCOL,
 * and so is a size mismatch (the receive's byte count must equal the send's).
 * Algorithms are deterministic, so each rank posts receives from a peer in
 * the same order that peer posts its sends.
 *
 * All functions are called from one thread at a time per communicator (the
 * thread running the collective). Waiting drives progress: there is no
 * background thread required by the interface. */
#ifndef XCOLL_CORE_P2P_H
#define XCOLL_CORE_P2P_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

struct xcoll_comm;

/* A pending send or receive; the backend defines it. */
typedef struct xcoll_p2p_request xcoll_p2p_request;

typedef struct xcoll_p2p_ops {
  /* Start sending bytes of buf to peer with tag. buf must stay valid and
   * unchanged until the request completes. bytes may be 0. */
  xcoll_status (*isend)(void *state, int peer, uint64_t tag, const void *buf,
                        size_t bytes, xcoll_p2p_request **request);
  /* Start receiving exactly bytes into buf from peer with tag. */
  xcoll_status (*irecv)(void *state, int peer, uint64_t tag, void *buf,
                        size_t bytes, xcoll_p2p_request **request);
  /* Wait for all count requests (NULL entries are skipped), release them and
   * set each entry to NULL, even on error. Fails with XCOLL_ERR_REMOTE when a
   * peer dies (any peer of the communicator, not only those waited on),
   * XCOLL_ERR_TIMEOUT after comm->timeout_s without progress,
   * XCOLL_ERR_ABORTED after xcoll_comm_abort, XCOLL_ERR_PROTOCOL on a bad
   * header; the message, naming the peer, is set with xcoll_error(). */
  xcoll_status (*wait)(void *state, xcoll_p2p_request **requests, int count);
  /* Make progress without blocking; *done = 1 when request has completed
   * (it is then released and must not be used again). */
  xcoll_status (*test)(void *state, xcoll_p2p_request *request, int *done);
  /* Optional (NULL: 0). 1 when every pair of the communicator's ranks
   * exchanges its messages through shared memory on one host, where a
   * message costs about a copy of its bytes rather than system calls; the
   * same answer on every rank (core/algorithm_select.c chooses by it, and
   * every rank must choose alike). nccl_like's shm mesh says 1. */
  int (*shared_memory)(void *state);
} xcoll_p2p_ops;

#endif
