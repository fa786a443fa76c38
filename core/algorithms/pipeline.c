/* pipeline.c - the chunked, pipelined exchange step and the small helpers
 * (chunk size, scratch buffers, chunk tracing, the fold that runs the
 * power-of-two allreduces on any P) that the algorithms in core/algorithms/
 * are built from. See pipeline.h. */
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"

#define DEFAULT_CHUNK_BYTES ((size_t)512 * 1024)

size_t xcoll_chunk_elems(const struct xcoll_comm *comm, size_t elem_size,
                         size_t largest) {
  size_t bytes = comm->options.chunk_bytes ? comm->options.chunk_bytes
                                           : DEFAULT_CHUNK_BYTES;
  size_t elems = elem_size ? bytes / elem_size : bytes;
  if (elems == 0)
    elems = 1;
  return elems < largest ? elems : largest;
}

void *xcoll_scratch_alloc(struct xcoll_comm *comm, size_t bytes,
                          const char *what) {
  void *buffer = malloc(bytes ? bytes : 1);
  if (!buffer)
    xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                "out of memory allocating %zu bytes for %s", bytes, what);
  return buffer;
}

void *xcoll_scratch_take(struct xcoll_comm *comm, void *stack,
                         size_t stack_bytes, size_t bytes, const char *what) {
  return bytes <= stack_bytes ? stack : xcoll_scratch_alloc(comm, bytes, what);
}

void xcoll_scratch_release(void *buffer, const void *stack) {
  if (buffer != stack)
    free(buffer);
}

void xcoll_trace_chunk(const struct xcoll_comm *comm, const char *name,
                       int peer, size_t bytes, double start_us) {
  char args[96];
  snprintf(args, sizeof args, "\"peer\":%d,\"bytes\":%zu", peer, bytes);
  xcoll_trace_span(name, "chunk", comm->comm_id, start_us, xcoll_time_us(),
                   args);
}

/* Chunk k of a sequence of count elements: its first element and length. */
static void chunk_range(size_t count, size_t chunk_elems, size_t k,
                        size_t *first, size_t *length) {
  *first = k * chunk_elems;
  size_t left = count - *first;
  *length = left < chunk_elems ? left : chunk_elems;
}

xcoll_status xcoll_exchange(struct xcoll_comm *comm, uint64_t tag,
                            int send_peer, const void *send_ptr,
                            size_t send_count, int recv_peer, void *recv_ptr,
                            size_t recv_count, xcoll_exchange_mode mode,
                            const void *local, void *scratch,
                            size_t chunk_elems, xcoll_datatype dtype,
                            xcoll_op op) {
  size_t elem_size = xcoll_datatype_size(dtype);
  size_t send_chunks = (send_count + chunk_elems - 1) / chunk_elems;
  size_t recv_chunks = (recv_count + chunk_elems - 1) / chunk_elems;
  size_t steps = send_chunks > recv_chunks ? send_chunks : recv_chunks;
  const char *send_bytes = send_ptr;
  char *recv_bytes = recv_ptr;
  const char *local_bytes = local;
  char *scratch_bytes = scratch;
  int reduce = mode != XCOLL_EXCHANGE_COPY;

  /* Requests and their post times, by slot k % 2. */
  xcoll_p2p_request *send_req[2] = {NULL, NULL};
  xcoll_p2p_request *recv_req[2] = {NULL, NULL};
  double send_start[2] = {0, 0}, recv_start[2] = {0, 0};
  xcoll_status status = XCOLL_SUCCESS;

#define POST_RECV(k)                                                           \
  do {                                                                         \
    size_t first_, length_;                                                    \
    chunk_range(recv_count, chunk_elems, (k), &first_, &length_);              \
    int slot_ = (int)((k)&1);                                                  \
    char *into_ =                                                              \
        reduce ? scratch_bytes + (size_t)slot_ * chunk_elems * elem_size       \
               : recv_bytes + first_ * elem_size;                              \
    recv_start[slot_] = xcoll_trace_clock();                                   \
    status = xcoll_p2p_irecv(comm, recv_peer, tag, into_, length_ * elem_size,     \
                         &recv_req[slot_]);                                    \
  } while (0)

#define POST_SEND(k)                                                           \
  do {                                                                         \
    size_t first_, length_;                                                    \
    chunk_range(send_count, chunk_elems, (k), &first_, &length_);              \
    int slot_ = (int)((k)&1);                                                  \
    send_start[slot_] = xcoll_trace_clock();                                   \
    status =                                                                   \
        xcoll_p2p_isend(comm, send_peer, tag, send_bytes + first_ * elem_size,     \
                    length_ * elem_size, &send_req[slot_]);                    \
  } while (0)

  for (size_t k = 0; k < recv_chunks && k < 2 && status == XCOLL_SUCCESS; k++)
    POST_RECV(k);
  if (send_chunks > 0 && status == XCOLL_SUCCESS)
    POST_SEND(0);

  for (size_t k = 0; k < steps && status == XCOLL_SUCCESS; k++) {
    int slot = (int)(k & 1);
    if (k + 1 < send_chunks) {
      POST_SEND(k + 1);
      if (status != XCOLL_SUCCESS)
        break;
    }
    xcoll_p2p_request *pair[2] = {send_req[slot], recv_req[slot]};
    int had_send = pair[0] != NULL, had_recv = pair[1] != NULL;
    send_req[slot] = recv_req[slot] = NULL; /* wait releases them */
    status = xcoll_p2p_wait(comm, pair, 2);
    if (status != XCOLL_SUCCESS)
      break;
    if (send_start[slot] > 0 && had_send) {
      size_t first, length;
      chunk_range(send_count, chunk_elems, k, &first, &length);
      xcoll_trace_chunk(comm, "send", send_peer, length * elem_size,
                        send_start[slot]);
    }
    if (had_recv) {
      size_t first, length;
      chunk_range(recv_count, chunk_elems, k, &first, &length);
      if (recv_start[slot] > 0)
        xcoll_trace_chunk(comm, "recv", recv_peer, length * elem_size,
                          recv_start[slot]);
      if (reduce) {
        double reduce_start = xcoll_trace_clock();
        const char *received =
            scratch_bytes + (size_t)slot * chunk_elems * elem_size;
        const char *mine = local_bytes + first * elem_size;
        char *out = recv_bytes + first * elem_size;
        if (mode == XCOLL_EXCHANGE_REDUCE)
          xcoll_reduce_into(out, mine, received, length, dtype, op);
        else
          xcoll_reduce_into(out, received, mine, length, dtype, op);
        if (reduce_start > 0)
          xcoll_trace_chunk(comm, "reduce", recv_peer, length * elem_size,
                            reduce_start);
      }
      if (k + 2 < recv_chunks)
        POST_RECV(k + 2);
    }
  }
#undef POST_RECV
#undef POST_SEND

  if (status != XCOLL_SUCCESS) {
    /* Release what is still posted before the caller frees the buffers; the
     * communicator is failing, so these waits end quickly. The first error
     * (already recorded) is the one returned. */
    xcoll_p2p_request *rest[4] = {send_req[0], send_req[1], recv_req[0],
                                  recv_req[1]};
    if (rest[0] || rest[1] || rest[2] || rest[3])
      (void)xcoll_p2p_wait(comm, rest, 4);
  }
  return status;
}

xcoll_status xcoll_fold_in(struct xcoll_comm *comm, const xcoll_fold *fold,
                           uint64_t tag, const void *sendbuf, void *recvbuf,
                           size_t count, void *scratch, size_t chunk_elems,
                           xcoll_datatype dtype, xcoll_op op) {
  int rank = comm->rank;
  if (fold->newrank < 0)
    return xcoll_exchange(comm, tag, rank + 1, sendbuf, count, -1, NULL, 0,
                          XCOLL_EXCHANGE_COPY, NULL, NULL, chunk_elems, dtype,
                          op);
  if (rank < 2 * fold->extra)
    return xcoll_exchange(comm, tag, -1, NULL, 0, rank - 1, recvbuf, count,
                          XCOLL_EXCHANGE_REDUCE_RECV_FIRST, sendbuf, scratch,
                          chunk_elems, dtype, op);
  if (sendbuf != recvbuf)
    memcpy(recvbuf, sendbuf, count * xcoll_datatype_size(dtype));
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_fold_out(struct xcoll_comm *comm, const xcoll_fold *fold,
                            uint64_t tag, void *recvbuf, size_t count,
                            size_t chunk_elems, xcoll_datatype dtype) {
  int rank = comm->rank;
  if (rank >= 2 * fold->extra)
    return XCOLL_SUCCESS;
  if (fold->newrank < 0)
    return xcoll_exchange(comm, tag, -1, NULL, 0, rank + 1, recvbuf, count,
                          XCOLL_EXCHANGE_COPY, NULL, NULL, chunk_elems, dtype,
                          XCOLL_SUM);
  return xcoll_exchange(comm, tag, rank - 1, recvbuf, count, -1, NULL, 0,
                        XCOLL_EXCHANGE_COPY, NULL, NULL, chunk_elems, dtype,
                        XCOLL_SUM);
}

xcoll_status xcoll_allreduce_folded(struct xcoll_comm *comm,
                                    const xcoll_coll_args *args,
                                    const char *what, xcoll_folded_body body) {
  const size_t elem_size = xcoll_datatype_size(args->dtype);
  const size_t count = args->count;
  if (count == 0)
    return XCOLL_SUCCESS;

  size_t chunk_elems = xcoll_chunk_elems(comm, elem_size, count);
  char *scratch = xcoll_scratch_alloc(comm, 2 * chunk_elems * elem_size, what);
  if (!scratch)
    return XCOLL_ERR_NO_MEMORY;

  xcoll_fold fold = xcoll_fold_plan(comm->rank, comm->world_size);
  xcoll_status status = xcoll_fold_in(
      comm, &fold, xcoll_tag(args, XCOLL_FOLD_STEP_IN), args->sendbuf,
      args->recvbuf, count, scratch, chunk_elems, args->dtype, args->op);
  if (fold.newrank >= 0 && status == XCOLL_SUCCESS)
    status = body(comm, args, &fold, scratch, chunk_elems);
  if (status == XCOLL_SUCCESS)
    status = xcoll_fold_out(comm, &fold, xcoll_tag(args, XCOLL_FOLD_STEP_OUT),
                            args->recvbuf, count, chunk_elems, args->dtype);
  free(scratch);
  if (status == XCOLL_SUCCESS && args->op == XCOLL_AVG)
    xcoll_scale_avg(args->recvbuf, count, args->dtype, comm->world_size);
  return status;
}
