/* collectives.c - the public collective calls: argument checks (each error
 * names the argument) and sequence numbers; core/dispatch.c then sends each
 * call to the backend's collective ops or to core's host algorithms. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "group.h"
#include "premul.h"
#include "request.h"

/* ---- validation ---- */

/* Send and receive buffers on this rank may be the same (in place:
 * allreduce, broadcast, reduce), or the send buffer may be this rank's
 * slice of the receive buffer (in-place allgather) or the receive buffer
 * this rank's slice of the send buffer (in-place reduce_scatter), as NCCL
 * defines in-place operation; any other overlap would be read after it was
 * written. Called with count > 0 and both buffers used on this rank. */
static xcoll_status check_overlap(xcoll_comm *comm, const xcoll_coll_args *args,
                                  const char *name, size_t element) {
  const xcoll_coll_info *info = xcoll_coll_info_of(args->kind);
  size_t world = (size_t)comm->world_size, rank = (size_t)comm->rank;
  size_t block = args->count * element; /* cannot overflow: validated */
  size_t send_bytes = info->send_per_rank ? block * world : block;
  size_t recv_bytes = info->recv_per_rank ? block * world : block;
  uintptr_t send = (uintptr_t)args->sendbuf, recv = (uintptr_t)args->recvbuf;
  /* The in-place forms: sendbuf at its slice of recvbuf (allgather: this
   * rank's; gather: the root's), recvbuf at its slice of sendbuf
   * (reduce_scatter: this rank's; scatter: the root's), or the same
   * buffer. */
  size_t slice = args->kind == XCOLL_COLL_ALLGATHER ||
                         args->kind == XCOLL_COLL_REDUCE_SCATTER
                     ? rank
                 : args->kind == XCOLL_COLL_GATHER ||
                         args->kind == XCOLL_COLL_SCATTER
                     ? (size_t)args->root
                     : 0;
  if (info->recv_per_rank && !info->send_per_rank) {
    if (send >= slice * block && send == recv + slice * block)
      return XCOLL_SUCCESS;
  } else if (info->send_per_rank && !info->recv_per_rank) {
    if (recv >= slice * block && recv == send + slice * block)
      return XCOLL_SUCCESS;
  } else if (send == recv) {
    return XCOLL_SUCCESS;
  }
  int disjoint = send + send_bytes <= recv || recv + recv_bytes <= send;
  if (disjoint)
    return XCOLL_SUCCESS;
  return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                     "xcoll_%s: sendbuf (%zu B at %p) and recvbuf (%zu B at "
                     "%p) overlap without being in place: use separate "
                     "buffers, or the in-place form (%s)",
                     name, send_bytes, args->sendbuf, recv_bytes,
                     args->recvbuf, info->in_place);
}

/* alltoallv's arrays: present, each block within PTRDIFF_MAX bytes, the
 * block this rank sends itself the size it receives from itself. */
static xcoll_status validate_vector(xcoll_comm *comm, const xcoll_coll_args *args,
                                    const char *name, size_t element) {
  const size_t *arrays[4] = {args->sendcounts, args->sdispls, args->recvcounts,
                             args->rdispls};
  static const char *const names[4] = {"sendcounts", "sdispls", "recvcounts",
                                       "rdispls"};
  for (int i = 0; i < 4; i++)
    if (arrays[i] == NULL)
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_%s: %s is NULL: pass world_size=%d entries, "
                         "in elements",
                         name, names[i], comm->world_size);
  size_t max_elements = (size_t)PTRDIFF_MAX / element;
  int any_send = 0, any_recv = 0;
  for (int p = 0; p < comm->world_size; p++)
    for (int side = 0; side < 2; side++) {
      size_t count = side ? args->recvcounts[p] : args->sendcounts[p];
      size_t displ = side ? args->rdispls[p] : args->sdispls[p];
      if (count > max_elements || displ > max_elements - count)
        return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                           "xcoll_%s: %s[%d]=%zu + %s[%d]=%zu elements of %s "
                           "is more than %zu elements (PTRDIFF_MAX bytes); a "
                           "negative value converted to size_t looks like "
                           "this",
                           name, names[side ? 3 : 1], p, displ,
                           names[side ? 2 : 0], p, count,
                           xcoll_datatype_name(args->dtype), max_elements);
      if (side)
        any_recv |= count > 0;
      else
        any_send |= count > 0;
    }
  int me = comm->rank;
  if (args->sendcounts[me] != args->recvcounts[me])
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: sendcounts[%d]=%zu but recvcounts[%d]=%zu: "
                       "the block rank %d sends itself must be the size it "
                       "receives from itself",
                       name, me, args->sendcounts[me], me,
                       args->recvcounts[me], me);
  if (any_send && args->sendbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: sendbuf is NULL with sendcounts not all 0",
                       name);
  if (any_recv && args->recvbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: recvbuf is NULL with recvcounts not all 0",
                       name);
  if (any_send && any_recv && args->sendbuf == args->recvbuf)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: sendbuf == recvbuf: alltoallv has no "
                       "in-place form; use separate buffers",
                       name);
  return XCOLL_SUCCESS;
}

static xcoll_status validate(xcoll_comm *comm, const xcoll_coll_args *args,
                             int nonblocking, const xcoll_request_t *request) {
  const char *name = xcoll_coll_name(args->kind);
  if (comm == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_USAGE,
                       "xcoll_%s: comm is NULL: create one with "
                       "xcoll_comm_init or xcoll_comm_init_env",
                       name);
  xcoll_status status = xcoll_comm_check(comm);
  if (status != XCOLL_SUCCESS)
    return status;
  if (nonblocking && request == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_i%s: request is NULL: pass the address of an "
                       "xcoll_request_t",
                       name);
  if (args->kind == XCOLL_COLL_BARRIER)
    return XCOLL_SUCCESS;

  if ((unsigned)args->dtype >= (unsigned)XCOLL_NUM_DATATYPES)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: dtype=%d is not an xcoll_datatype (0 to %d)",
                       name, (int)args->dtype, XCOLL_NUM_DATATYPES - 1);
  if (xcoll_coll_has_op(args->kind)) {
    if ((unsigned)args->op >= (unsigned)XCOLL_NUM_OPS) {
      status = xcoll_premul_check(comm, args, name);
      if (status != XCOLL_SUCCESS)
        return status;
    } else {
      const char *why = xcoll_op_dtype_mismatch(args->op, args->dtype);
      if (why != NULL)
        return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                           "xcoll_%s: op=%s with dtype %s: %s", name,
                           xcoll_op_name(args->op),
                           xcoll_datatype_name(args->dtype), why);
    }
  }
  const xcoll_coll_info *info = xcoll_coll_info_of(args->kind);
  if (info->has_root && (args->root < 0 || args->root >= comm->world_size))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: root=%d is outside [0, world_size=%d)", name,
                       args->root, comm->world_size);
  if (info->has_peer && (args->peer < 0 || args->peer >= comm->world_size))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: peer=%d is outside [0, world_size=%d)", name,
                       args->peer, comm->world_size);
  if (info->has_peer && args->peer == comm->rank && !xcoll_group_active())
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: peer=%d is this rank: outside a group it "
                       "would wait for itself; put the send and its recv in "
                       "one xcoll_group_start/end",
                       name, args->peer);

  size_t element = xcoll_datatype_size(args->dtype);
  if (info->vector)
    return validate_vector(comm, args, name, element);
  const char *count_name = info->count_name;
  /* Buffers are indexed with ptrdiff_t offsets (per-rank slices, pointer
   * differences): a byte count above PTRDIFF_MAX cannot be a real buffer. A
   * negative count passed as size_t lands here too, whatever the dtype. */
  size_t max_elements = (size_t)PTRDIFF_MAX / element;
  if (args->count > max_elements)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: %s=%zu elements of %s is more than %zu "
                       "elements (%zu B each: PTRDIFF_MAX bytes); a negative "
                       "count converted to size_t looks like this",
                       name, count_name, args->count,
                       xcoll_datatype_name(args->dtype), max_elements,
                       element);
  if ((info->send_per_rank || info->recv_per_rank) &&
      args->count > max_elements / (size_t)comm->world_size)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: world_size=%d * %s=%zu elements of %s is "
                       "more than PTRDIFF_MAX bytes",
                       name, comm->world_size, count_name, args->count,
                       xcoll_datatype_name(args->dtype));
  if (args->count == 0)
    return XCOLL_SUCCESS;

  /* Which buffers this rank uses (the table): broadcast's and scatter's
   * sendbuf on the root only, reduce's and gather's recvbuf on the root
   * only, send's sendbuf and recv's recvbuf. */
  int is_root = !info->has_root || args->root == comm->rank;
  int needs_send = !info->send_unused && (!info->send_root_only || is_root);
  int needs_recv = !info->recv_unused && (!info->recv_root_only || is_root);
  if (needs_send && args->sendbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: sendbuf is NULL with %s=%zu%s", name,
                       count_name, args->count,
                       info->send_root_only ? " on the root" : "");
  if (needs_recv && args->recvbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: recvbuf is NULL with %s=%zu%s", name,
                       count_name, args->count,
                       info->recv_root_only ? " on the root" : "");
  if (needs_send && needs_recv)
    return check_overlap(comm, args, name, element);
  return XCOLL_SUCCESS;
}

/* ---- issue ---- */

/* alltoallv's four arrays, copied into one allocation that args then
 * points to (the caller may free its arrays once the call returns). */
static xcoll_status copy_vectors(xcoll_comm *comm, xcoll_coll_args *args,
                                 void **owned) {
  size_t P = (size_t)comm->world_size;
  size_t *copy = malloc(4 * P * sizeof *copy);
  if (copy == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_alltoallv: out of memory copying the counts");
  memcpy(copy, args->sendcounts, P * sizeof *copy);
  memcpy(copy + P, args->sdispls, P * sizeof *copy);
  memcpy(copy + 2 * P, args->recvcounts, P * sizeof *copy);
  memcpy(copy + 3 * P, args->rdispls, P * sizeof *copy);
  args->sendcounts = copy;
  args->sdispls = copy + P;
  args->recvcounts = copy + 2 * P;
  args->rdispls = copy + 3 * P;
  *owned = copy;
  return XCOLL_SUCCESS;
}

/* A call with nothing to do: success, and for the non-blocking form a
 * request that is already complete. */
static xcoll_status nothing_to_do(xcoll_comm *comm, int nonblocking,
                                  xcoll_request_t *request) {
  if (!nonblocking)
    return XCOLL_SUCCESS;
  *request = xcoll_request_completed(comm, XCOLL_SUCCESS);
  return *request != NULL ? XCOLL_SUCCESS : XCOLL_ERR_NO_MEMORY;
}

static xcoll_status issue(xcoll_comm *comm, xcoll_coll_args *args,
                          int nonblocking, xcoll_request_t *request) {
  if (request != NULL)
    *request = NULL;
  xcoll_status status = validate(comm, args, nonblocking, request);
  if (status != XCOLL_SUCCESS)
    return status;
  const char *name = xcoll_coll_name(args->kind);
  int grouped = xcoll_group_active();
  if (grouped && nonblocking)
    return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                       "xcoll_i%s inside a group: calls in a group are "
                       "recorded and run by its end; use xcoll_%s, and "
                       "xcoll_igroup_end for one request for the group",
                       name, name);
  const xcoll_coll_info *info = xcoll_coll_info_of(args->kind);
  /* Point-to-point: no sequence number (only two ranks take part), and a
   * zero count is no call at all, as in NCCL. Outside a group a send or
   * recv is a group of one. */
  if (info->has_peer) {
    if (args->count == 0)
      return nothing_to_do(comm, nonblocking, request);
    if (grouped)
      return xcoll_group_record(comm, args, NULL);
    return xcoll_group_single(comm, args, nonblocking ? request : NULL);
  }
  /* Memory the call reads until it completes: a premul sum's scaled input
   * (the call becomes a sum over it), or alltoallv's copied arrays; owned
   * by the request (non-blocking), the group, or freed here once done. */
  void *scratch = NULL;
  if (xcoll_coll_has_op(args->kind) && xcoll_op_is_premul(args->op)) {
    status = xcoll_premul_apply(comm, args, &scratch);
    if (status != XCOLL_SUCCESS)
      return status;
  }
  if (info->vector && (nonblocking || grouped)) {
    status = copy_vectors(comm, args, &scratch);
    if (status != XCOLL_SUCCESS)
      return status;
  }
  /* A collective in a group is numbered when the group ends. */
  if (grouped)
    return xcoll_group_record(comm, args, scratch);
  /* Every rank numbers every call, even empty ones, so that sequence numbers
   * (and the tags built from them) agree across ranks. */
  args->seq = comm->next_seq++;
  if (args->count == 0 && args->kind != XCOLL_COLL_BARRIER && !info->vector) {
    free(scratch);
    return nothing_to_do(comm, nonblocking, request);
  }
  status = xcoll_dispatch(comm, args, nonblocking ? request : NULL);
  if (scratch != NULL && status == XCOLL_SUCCESS && nonblocking)
    xcoll_request_adopt(*request, scratch);
  else
    free(scratch);
  return status;
}

/* The arguments every call has; the rest are zero. */
static xcoll_coll_args make_args(xcoll_coll_kind kind, const void *sendbuf,
                                 void *recvbuf, size_t count,
                                 xcoll_datatype dtype, xcoll_op op, int root) {
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = kind;
  args.sendbuf = sendbuf;
  args.recvbuf = recvbuf;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  args.root = root;
  return args;
}

/* The two forms of every call, over the same arguments: xcoll_X is
 * blocking(make_X(...)), xcoll_iX nonblocking(make_X(...), stream,
 * request). */
static xcoll_status blocking(xcoll_comm_t comm, xcoll_coll_args args) {
  return issue(comm, &args, 0, NULL);
}

static xcoll_status nonblocking(xcoll_comm_t comm, xcoll_coll_args args,
                                xcoll_stream_t stream,
                                xcoll_request_t *request) {
  args.stream = stream;
  return issue(comm, &args, 1, request);
}

xcoll_status xcoll_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                             xcoll_datatype dtype, xcoll_op op,
                             xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_ALLREDUCE, sendbuf, recvbuf,
                                  count, dtype, op, 0));
}

xcoll_status xcoll_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                              xcoll_datatype dtype, xcoll_op op,
                              xcoll_comm_t comm, xcoll_stream_t stream,
                              xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_ALLREDUCE, sendbuf, recvbuf,
                                     count, dtype, op, 0),
                     stream, request);
}

xcoll_status xcoll_allgather(const void *sendbuf, void *recvbuf,
                             size_t sendcount, xcoll_datatype dtype,
                             xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_ALLGATHER, sendbuf, recvbuf,
                                  sendcount, dtype, XCOLL_SUM, 0));
}

xcoll_status xcoll_iallgather(const void *sendbuf, void *recvbuf,
                              size_t sendcount, xcoll_datatype dtype,
                              xcoll_comm_t comm, xcoll_stream_t stream,
                              xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_ALLGATHER, sendbuf, recvbuf,
                                     sendcount, dtype, XCOLL_SUM, 0),
                     stream, request);
}

xcoll_status xcoll_reduce_scatter(const void *sendbuf, void *recvbuf,
                                  size_t recvcount, xcoll_datatype dtype,
                                  xcoll_op op, xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_REDUCE_SCATTER, sendbuf, recvbuf,
                                  recvcount, dtype, op, 0));
}

xcoll_status xcoll_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                   size_t recvcount, xcoll_datatype dtype,
                                   xcoll_op op, xcoll_comm_t comm,
                                   xcoll_stream_t stream,
                                   xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_REDUCE_SCATTER, sendbuf,
                                     recvbuf, recvcount, dtype, op, 0),
                     stream, request);
}

xcoll_status xcoll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                             xcoll_datatype dtype, int root,
                             xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_BROADCAST, sendbuf, recvbuf,
                                  count, dtype, XCOLL_SUM, root));
}

xcoll_status xcoll_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                              xcoll_datatype dtype, int root, xcoll_comm_t comm,
                              xcoll_stream_t stream, xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_BROADCAST, sendbuf, recvbuf,
                                     count, dtype, XCOLL_SUM, root),
                     stream, request);
}

xcoll_status xcoll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                          xcoll_datatype dtype, xcoll_op op, int root,
                          xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_REDUCE, sendbuf, recvbuf, count,
                                  dtype, op, root));
}

xcoll_status xcoll_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                           xcoll_datatype dtype, xcoll_op op, int root,
                           xcoll_comm_t comm, xcoll_stream_t stream,
                           xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_REDUCE, sendbuf, recvbuf,
                                     count, dtype, op, root),
                     stream, request);
}

static xcoll_coll_args make_barrier(void) {
  return make_args(XCOLL_COLL_BARRIER, NULL, NULL, 0, XCOLL_UINT8, XCOLL_SUM,
                   0);
}

xcoll_status xcoll_barrier(xcoll_comm_t comm) {
  return blocking(comm, make_barrier());
}

xcoll_status xcoll_ibarrier(xcoll_comm_t comm, xcoll_request_t *request) {
  return nonblocking(comm, make_barrier(), NULL, request);
}

/* ---- all-to-all, gather, scatter ---- */

xcoll_status xcoll_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                            xcoll_datatype dtype, xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_ALLTOALL, sendbuf, recvbuf, count,
                                  dtype, XCOLL_SUM, 0));
}

xcoll_status xcoll_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                             xcoll_datatype dtype, xcoll_comm_t comm,
                             xcoll_stream_t stream, xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_ALLTOALL, sendbuf, recvbuf,
                                     count, dtype, XCOLL_SUM, 0),
                     stream, request);
}

static xcoll_coll_args make_alltoallv(const void *sendbuf,
                                      const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts,
                                      const size_t *rdispls,
                                      xcoll_datatype dtype) {
  xcoll_coll_args args = make_args(XCOLL_COLL_ALLTOALLV, sendbuf, recvbuf, 0,
                                   dtype, XCOLL_SUM, 0);
  args.sendcounts = sendcounts;
  args.sdispls = sdispls;
  args.recvcounts = recvcounts;
  args.rdispls = rdispls;
  return args;
}

xcoll_status xcoll_alltoallv(const void *sendbuf, const size_t *sendcounts,
                             const size_t *sdispls, void *recvbuf,
                             const size_t *recvcounts, const size_t *rdispls,
                             xcoll_datatype dtype, xcoll_comm_t comm) {
  return blocking(comm, make_alltoallv(sendbuf, sendcounts, sdispls, recvbuf,
                                       recvcounts, rdispls, dtype));
}

xcoll_status xcoll_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                              const size_t *sdispls, void *recvbuf,
                              const size_t *recvcounts, const size_t *rdispls,
                              xcoll_datatype dtype, xcoll_comm_t comm,
                              xcoll_stream_t stream, xcoll_request_t *request) {
  return nonblocking(comm, make_alltoallv(sendbuf, sendcounts, sdispls,
                                          recvbuf, recvcounts, rdispls, dtype),
                     stream, request);
}

xcoll_status xcoll_gather(const void *sendbuf, void *recvbuf, size_t count,
                          xcoll_datatype dtype, int root, xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_GATHER, sendbuf, recvbuf, count,
                                  dtype, XCOLL_SUM, root));
}

xcoll_status xcoll_igather(const void *sendbuf, void *recvbuf, size_t count,
                           xcoll_datatype dtype, int root, xcoll_comm_t comm,
                           xcoll_stream_t stream, xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_GATHER, sendbuf, recvbuf,
                                     count, dtype, XCOLL_SUM, root),
                     stream, request);
}

xcoll_status xcoll_scatter(const void *sendbuf, void *recvbuf, size_t count,
                           xcoll_datatype dtype, int root, xcoll_comm_t comm) {
  return blocking(comm, make_args(XCOLL_COLL_SCATTER, sendbuf, recvbuf, count,
                                  dtype, XCOLL_SUM, root));
}

xcoll_status xcoll_iscatter(const void *sendbuf, void *recvbuf, size_t count,
                            xcoll_datatype dtype, int root, xcoll_comm_t comm,
                            xcoll_stream_t stream, xcoll_request_t *request) {
  return nonblocking(comm, make_args(XCOLL_COLL_SCATTER, sendbuf, recvbuf,
                                     count, dtype, XCOLL_SUM, root),
                     stream, request);
}

/* ---- point-to-point (core/group.c runs them) ---- */

static xcoll_coll_args make_p2p(xcoll_coll_kind kind, const void *sendbuf,
                                void *recvbuf, size_t count,
                                xcoll_datatype dtype, int peer) {
  xcoll_coll_args args =
      make_args(kind, sendbuf, recvbuf, count, dtype, XCOLL_SUM, 0);
  args.peer = peer;
  return args;
}

xcoll_status xcoll_send(const void *sendbuf, size_t count, xcoll_datatype dtype,
                        int peer, xcoll_comm_t comm) {
  return blocking(comm,
                  make_p2p(XCOLL_COLL_SEND, sendbuf, NULL, count, dtype, peer));
}

xcoll_status xcoll_isend(const void *sendbuf, size_t count, xcoll_datatype dtype,
                         int peer, xcoll_comm_t comm, xcoll_stream_t stream,
                         xcoll_request_t *request) {
  return nonblocking(
      comm, make_p2p(XCOLL_COLL_SEND, sendbuf, NULL, count, dtype, peer),
      stream, request);
}

xcoll_status xcoll_recv(void *recvbuf, size_t count, xcoll_datatype dtype,
                        int peer, xcoll_comm_t comm) {
  return blocking(comm,
                  make_p2p(XCOLL_COLL_RECV, NULL, recvbuf, count, dtype, peer));
}

xcoll_status xcoll_irecv(void *recvbuf, size_t count, xcoll_datatype dtype,
                         int peer, xcoll_comm_t comm, xcoll_stream_t stream,
                         xcoll_request_t *request) {
  return nonblocking(
      comm, make_p2p(XCOLL_COLL_RECV, NULL, recvbuf, count, dtype, peer),
      stream, request);
}
