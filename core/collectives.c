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
  size_t world = (size_t)comm->world_size, rank = (size_t)comm->rank;
  size_t block = args->count * element; /* cannot overflow: validated */
  size_t send_bytes = block, recv_bytes = block;
  uintptr_t send = (uintptr_t)args->sendbuf, recv = (uintptr_t)args->recvbuf;
  uintptr_t in_place = send; /* where sendbuf may sit inside recvbuf */
  const char *form = "sendbuf == recvbuf";
  if (args->kind == XCOLL_COLL_ALLGATHER) {
    recv_bytes = block * world;
    in_place = recv + rank * block;
    form = "sendbuf == recvbuf + rank * sendcount elements";
  } else if (args->kind == XCOLL_COLL_REDUCE_SCATTER) {
    send_bytes = block * world;
    in_place = recv; /* recvbuf == sendbuf + rank * block */
    if (recv >= rank * block && recv - rank * block == send)
      return XCOLL_SUCCESS;
    form = "recvbuf == sendbuf + rank * recvcount elements";
  } else {
    in_place = recv;
  }
  if (args->kind != XCOLL_COLL_REDUCE_SCATTER && send == in_place)
    return XCOLL_SUCCESS;
  int disjoint = send + send_bytes <= recv || recv + recv_bytes <= send;
  if (disjoint)
    return XCOLL_SUCCESS;
  return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                     "xcoll_%s: sendbuf (%zu B at %p) and recvbuf (%zu B at "
                     "%p) overlap without being in place: use separate "
                     "buffers, or the in-place form (%s)",
                     name, send_bytes, args->sendbuf, recv_bytes,
                     args->recvbuf, form);
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
  if (xcoll_coll_has_root(args->kind) &&
      (args->root < 0 || args->root >= comm->world_size))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: root=%d is outside [0, world_size=%d)", name,
                       args->root, comm->world_size);

  const char *count_name = args->kind == XCOLL_COLL_ALLGATHER ? "sendcount"
                           : args->kind == XCOLL_COLL_REDUCE_SCATTER
                               ? "recvcount"
                               : "count";
  /* Buffers are indexed with ptrdiff_t offsets (per-rank slices, pointer
   * differences): a byte count above PTRDIFF_MAX cannot be a real buffer. A
   * negative count passed as size_t lands here too, whatever the dtype. */
  size_t element = xcoll_datatype_size(args->dtype);
  size_t max_elements = (size_t)PTRDIFF_MAX / element;
  if (args->count > max_elements)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: %s=%zu elements of %s is more than %zu "
                       "elements (%zu B each: PTRDIFF_MAX bytes); a negative "
                       "count converted to size_t looks like this",
                       name, count_name, args->count,
                       xcoll_datatype_name(args->dtype), max_elements,
                       element);
  if ((args->kind == XCOLL_COLL_ALLGATHER ||
       args->kind == XCOLL_COLL_REDUCE_SCATTER) &&
      args->count > max_elements / (size_t)comm->world_size)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: world_size=%d * %s=%zu elements of %s is "
                       "more than PTRDIFF_MAX bytes",
                       name, comm->world_size, count_name, args->count,
                       xcoll_datatype_name(args->dtype));
  if (args->count == 0)
    return XCOLL_SUCCESS;

  /* sendbuf is read on every rank except for broadcast (root only); recvbuf
   * is written on every rank except for reduce (root only). */
  int is_root = args->root == comm->rank;
  int needs_send = args->kind != XCOLL_COLL_BROADCAST || is_root;
  int needs_recv = args->kind != XCOLL_COLL_REDUCE || is_root;
  if (needs_send && args->sendbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: sendbuf is NULL with %s=%zu%s", name,
                       count_name, args->count,
                       xcoll_coll_has_root(args->kind) ? " on the root" : "");
  if (needs_recv && args->recvbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: recvbuf is NULL with %s=%zu%s", name,
                       count_name, args->count,
                       args->kind == XCOLL_COLL_REDUCE ? " on the root" : "");
  if (needs_send && needs_recv)
    return check_overlap(comm, args, name, element);
  return XCOLL_SUCCESS;
}

/* ---- issue ---- */

static xcoll_status issue(xcoll_comm *comm, xcoll_coll_args *args,
                          int nonblocking, xcoll_request_t *request) {
  if (request != NULL)
    *request = NULL;
  xcoll_status status = validate(comm, args, nonblocking, request);
  if (status != XCOLL_SUCCESS)
    return status;
  /* A premul sum becomes a sum over the scaled input; a scaled copy is
   * owned by the request (non-blocking) or freed here once done. */
  void *scratch = NULL;
  if (xcoll_coll_has_op(args->kind) && xcoll_op_is_premul(args->op)) {
    status = xcoll_premul_apply(comm, args, &scratch);
    if (status != XCOLL_SUCCESS)
      return status;
  }
  /* Every rank numbers every call, even empty ones, so that sequence numbers
   * (and the tags built from them) agree across ranks. */
  args->seq = comm->next_seq++;
  if (args->count == 0 && args->kind != XCOLL_COLL_BARRIER) {
    if (!nonblocking)
      return XCOLL_SUCCESS;
    *request = xcoll_request_completed(comm, XCOLL_SUCCESS);
    return *request != NULL ? XCOLL_SUCCESS : XCOLL_ERR_NO_MEMORY;
  }
  status = xcoll_dispatch(comm, args, nonblocking ? request : NULL);
  if (scratch != NULL && status == XCOLL_SUCCESS && nonblocking)
    xcoll_request_adopt(*request, scratch);
  else
    free(scratch);
  return status;
}

static xcoll_coll_args make_args(xcoll_coll_kind kind, const void *sendbuf,
                                 void *recvbuf, size_t count,
                                 xcoll_datatype dtype, xcoll_op op, int root,
                                 xcoll_stream_t stream) {
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = kind;
  args.sendbuf = sendbuf;
  args.recvbuf = recvbuf;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  args.root = root;
  args.stream = stream;
  return args;
}

xcoll_status xcoll_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                             xcoll_datatype dtype, xcoll_op op,
                             xcoll_comm_t comm) {
  xcoll_coll_args args = make_args(XCOLL_COLL_ALLREDUCE, sendbuf, recvbuf,
                                   count, dtype, op, 0, NULL);
  return issue(comm, &args, 0, NULL);
}

xcoll_status xcoll_allgather(const void *sendbuf, void *recvbuf,
                             size_t sendcount, xcoll_datatype dtype,
                             xcoll_comm_t comm) {
  xcoll_coll_args args = make_args(XCOLL_COLL_ALLGATHER, sendbuf, recvbuf,
                                   sendcount, dtype, XCOLL_SUM, 0, NULL);
  return issue(comm, &args, 0, NULL);
}

xcoll_status xcoll_reduce_scatter(const void *sendbuf, void *recvbuf,
                                  size_t recvcount, xcoll_datatype dtype,
                                  xcoll_op op, xcoll_comm_t comm) {
  xcoll_coll_args args = make_args(XCOLL_COLL_REDUCE_SCATTER, sendbuf, recvbuf,
                                   recvcount, dtype, op, 0, NULL);
  return issue(comm, &args, 0, NULL);
}

xcoll_status xcoll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                             xcoll_datatype dtype, int root,
                             xcoll_comm_t comm) {
  xcoll_coll_args args = make_args(XCOLL_COLL_BROADCAST, sendbuf, recvbuf,
                                   count, dtype, XCOLL_SUM, root, NULL);
  return issue(comm, &args, 0, NULL);
}

xcoll_status xcoll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                          xcoll_datatype dtype, xcoll_op op, int root,
                          xcoll_comm_t comm) {
  xcoll_coll_args args = make_args(XCOLL_COLL_REDUCE, sendbuf, recvbuf, count,
                                   dtype, op, root, NULL);
  return issue(comm, &args, 0, NULL);
}

xcoll_status xcoll_barrier(xcoll_comm_t comm) {
  xcoll_coll_args args = make_args(XCOLL_COLL_BARRIER, NULL, NULL, 0,
                                   XCOLL_UINT8, XCOLL_SUM, 0, NULL);
  return issue(comm, &args, 0, NULL);
}

xcoll_status xcoll_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                              xcoll_datatype dtype, xcoll_op op,
                              xcoll_comm_t comm, xcoll_stream_t stream,
                              xcoll_request_t *request) {
  xcoll_coll_args args = make_args(XCOLL_COLL_ALLREDUCE, sendbuf, recvbuf,
                                   count, dtype, op, 0, stream);
  return issue(comm, &args, 1, request);
}

xcoll_status xcoll_iallgather(const void *sendbuf, void *recvbuf,
                              size_t sendcount, xcoll_datatype dtype,
                              xcoll_comm_t comm, xcoll_stream_t stream,
                              xcoll_request_t *request) {
  xcoll_coll_args args = make_args(XCOLL_COLL_ALLGATHER, sendbuf, recvbuf,
                                   sendcount, dtype, XCOLL_SUM, 0, stream);
  return issue(comm, &args, 1, request);
}

xcoll_status xcoll_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                   size_t recvcount, xcoll_datatype dtype,
                                   xcoll_op op, xcoll_comm_t comm,
                                   xcoll_stream_t stream,
                                   xcoll_request_t *request) {
  xcoll_coll_args args = make_args(XCOLL_COLL_REDUCE_SCATTER, sendbuf, recvbuf,
                                   recvcount, dtype, op, 0, stream);
  return issue(comm, &args, 1, request);
}

xcoll_status xcoll_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                              xcoll_datatype dtype, int root, xcoll_comm_t comm,
                              xcoll_stream_t stream, xcoll_request_t *request) {
  xcoll_coll_args args = make_args(XCOLL_COLL_BROADCAST, sendbuf, recvbuf,
                                   count, dtype, XCOLL_SUM, root, stream);
  return issue(comm, &args, 1, request);
}

xcoll_status xcoll_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                           xcoll_datatype dtype, xcoll_op op, int root,
                           xcoll_comm_t comm, xcoll_stream_t stream,
                           xcoll_request_t *request) {
  xcoll_coll_args args = make_args(XCOLL_COLL_REDUCE, sendbuf, recvbuf, count,
                                   dtype, op, root, stream);
  return issue(comm, &args, 1, request);
}

xcoll_status xcoll_ibarrier(xcoll_comm_t comm, xcoll_request_t *request) {
  xcoll_coll_args args = make_args(XCOLL_COLL_BARRIER, NULL, NULL, 0,
                                   XCOLL_UINT8, XCOLL_SUM, 0, NULL);
  return issue(comm, &args, 1, request);
}
