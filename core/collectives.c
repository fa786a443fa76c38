/* collectives.c - the public collective calls: argument checks (each error
 * names the argument), sequence numbers, blocking and non-blocking issue,
 * and xcoll_coll_run, which picks the algorithm, logs and traces it. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "log.h"
#include "request.h"
#include "trace.h"

/* ---- names and sizes ---- */

size_t xcoll_datatype_size(xcoll_datatype dtype) {
  switch (dtype) {
  case XCOLL_INT8:
  case XCOLL_UINT8:
    return 1;
  case XCOLL_FLOAT16:
  case XCOLL_BFLOAT16:
    return 2;
  case XCOLL_INT32:
  case XCOLL_UINT32:
  case XCOLL_FLOAT32:
    return 4;
  case XCOLL_INT64:
  case XCOLL_UINT64:
  case XCOLL_FLOAT64:
    return 8;
  case XCOLL_NUM_DATATYPES:
    break;
  }
  return 0;
}

const char *xcoll_datatype_name(xcoll_datatype dtype) {
  switch (dtype) {
  case XCOLL_INT8:
    return "int8";
  case XCOLL_UINT8:
    return "uint8";
  case XCOLL_INT32:
    return "int32";
  case XCOLL_UINT32:
    return "uint32";
  case XCOLL_INT64:
    return "int64";
  case XCOLL_UINT64:
    return "uint64";
  case XCOLL_FLOAT16:
    return "float16";
  case XCOLL_BFLOAT16:
    return "bfloat16";
  case XCOLL_FLOAT32:
    return "float32";
  case XCOLL_FLOAT64:
    return "float64";
  case XCOLL_NUM_DATATYPES:
    break;
  }
  return "unknown";
}

const char *xcoll_op_name(xcoll_op op) {
  switch (op) {
  case XCOLL_SUM:
    return "sum";
  case XCOLL_PROD:
    return "prod";
  case XCOLL_MIN:
    return "min";
  case XCOLL_MAX:
    return "max";
  case XCOLL_AVG:
    return "avg";
  case XCOLL_NUM_OPS:
    break;
  }
  return "unknown";
}

/* xcoll_coll_name is defined next to the algorithm table, in
 * core/algorithm_select.c. */

static int is_floating(xcoll_datatype dtype) {
  return dtype == XCOLL_FLOAT16 || dtype == XCOLL_BFLOAT16 ||
         dtype == XCOLL_FLOAT32 || dtype == XCOLL_FLOAT64;
}

static int has_op(xcoll_coll_kind kind) {
  return kind == XCOLL_COLL_ALLREDUCE || kind == XCOLL_COLL_REDUCE_SCATTER ||
         kind == XCOLL_COLL_REDUCE;
}

static int has_root(xcoll_coll_kind kind) {
  return kind == XCOLL_COLL_BROADCAST || kind == XCOLL_COLL_REDUCE;
}

/* Bytes of the larger of the two buffers (the size NCCL's tests report):
 * world_size * count elements for allgather's output and reduce_scatter's
 * input, count elements otherwise. Validated not to overflow. */
static size_t total_bytes(const xcoll_comm *comm, const xcoll_coll_args *args) {
  size_t bytes = args->count * xcoll_datatype_size(args->dtype);
  if (args->kind == XCOLL_COLL_ALLGATHER ||
      args->kind == XCOLL_COLL_REDUCE_SCATTER)
    bytes *= (size_t)comm->world_size;
  return bytes;
}

/* ---- validation ---- */

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
  if (args->stream != NULL && comm->backend->coll == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_i%s: stream is not NULL, but backend '%s' works "
                       "on host buffers only: pass NULL",
                       name, comm->backend->name);
  if (args->kind == XCOLL_COLL_BARRIER)
    return XCOLL_SUCCESS;

  if ((unsigned)args->dtype >= (unsigned)XCOLL_NUM_DATATYPES)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: dtype=%d is not an xcoll_datatype (0 to %d)",
                       name, (int)args->dtype, XCOLL_NUM_DATATYPES - 1);
  if (has_op(args->kind)) {
    if ((unsigned)args->op >= (unsigned)XCOLL_NUM_OPS)
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_%s: op=%d is not an xcoll_op (0 to %d)", name,
                         (int)args->op, XCOLL_NUM_OPS - 1);
    if (args->op == XCOLL_AVG && !is_floating(args->dtype))
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_%s: op=avg is defined for floating-point "
                         "dtypes only, not %s: use sum and divide",
                         name, xcoll_datatype_name(args->dtype));
  }
  if (has_root(args->kind) &&
      (args->root < 0 || args->root >= comm->world_size))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: root=%d is outside [0, world_size=%d)", name,
                       args->root, comm->world_size);

  const char *count_name = args->kind == XCOLL_COLL_ALLGATHER ? "sendcount"
                           : args->kind == XCOLL_COLL_REDUCE_SCATTER
                               ? "recvcount"
                               : "count";
  size_t element = xcoll_datatype_size(args->dtype);
  if (args->count > SIZE_MAX / element)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: %s=%zu elements of %s overflows size_t bytes",
                       name, count_name, args->count,
                       xcoll_datatype_name(args->dtype));
  if ((args->kind == XCOLL_COLL_ALLGATHER ||
       args->kind == XCOLL_COLL_REDUCE_SCATTER) &&
      args->count * element > SIZE_MAX / (size_t)comm->world_size)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: world_size=%d * %s=%zu elements of %s "
                       "overflows size_t bytes",
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
                       has_root(args->kind) ? " on the root" : "");
  if (needs_recv && args->recvbuf == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: recvbuf is NULL with %s=%zu%s", name,
                       count_name, args->count,
                       args->kind == XCOLL_COLL_REDUCE ? " on the root" : "");
  return XCOLL_SUCCESS;
}

/* ---- running one collective ---- */

/* A world of one: the result is the input (AVG divides by 1). */
static void run_local(const xcoll_comm *comm, const xcoll_coll_args *args) {
  (void)comm;
  if (args->kind == XCOLL_COLL_BARRIER || args->recvbuf == NULL ||
      args->sendbuf == NULL || args->sendbuf == args->recvbuf)
    return;
  memmove(args->recvbuf, args->sendbuf,
          args->count * xcoll_datatype_size(args->dtype));
}

static int is_fatal(xcoll_status status) {
  return status == XCOLL_ERR_REMOTE || status == XCOLL_ERR_TIMEOUT ||
         status == XCOLL_ERR_PROTOCOL || status == XCOLL_ERR_ABORTED;
}

/* "4096 B float32 sum" or "0 B" for a barrier: the shared part of the log
 * line and of failure messages. */
static void describe(const xcoll_comm *comm, const xcoll_coll_args *args,
                     char *out, size_t out_bytes) {
  if (args->kind == XCOLL_COLL_BARRIER)
    snprintf(out, out_bytes, "P=%d", comm->world_size);
  else if (has_op(args->kind))
    snprintf(out, out_bytes, "%zu B %s %s P=%d", total_bytes(comm, args),
             xcoll_datatype_name(args->dtype), xcoll_op_name(args->op),
             comm->world_size);
  else
    snprintf(out, out_bytes, "%zu B %s P=%d", total_bytes(comm, args),
             xcoll_datatype_name(args->dtype), comm->world_size);
}

xcoll_status xcoll_coll_run(xcoll_comm *comm, const xcoll_coll_args *args) {
  xcoll_status status = xcoll_comm_check(comm);
  if (status != XCOLL_SUCCESS)
    return status;

  const char *name = xcoll_coll_name(args->kind);
  /* The description and the reason are formatted only when INFO logging
   * will print them (or an error needs them): this runs on every call. */
  const int explain = xcoll_log_level_get() >= XCOLL_LOG_INFO;
  char what[128] = "";
  char why[256] = "";
  const char *algorithm_name = NULL;
  const xcoll_algorithm *algorithm = NULL;
  if (comm->world_size == 1) {
    algorithm_name = "local_copy";
    snprintf(why, sizeof why, "a world of one rank needs no communication");
  } else {
    status = xcoll_algorithm_select(comm, args, &algorithm,
                                    explain ? why : NULL, sizeof why);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    algorithm_name = algorithm->name;
  }
  if (explain) {
    describe(comm, args, what, sizeof what);
    XCOLL_INFO("%s seq %" PRIu64 ": %s -> %s (%s)", name, args->seq, what,
               algorithm_name, why);
  }

  int tracing = xcoll_trace_enabled();
  double start_us = tracing ? xcoll_time_us() : 0.0;
  if (algorithm == NULL)
    run_local(comm, args);
  else
    status = algorithm->run(comm, args);

  if (tracing) {
    char trace_args[256];
    if (args->kind == XCOLL_COLL_BARRIER)
      snprintf(trace_args, sizeof trace_args,
               "\"seq\":%" PRIu64 ",\"algorithm\":\"%s\",\"status\":%d",
               args->seq, algorithm_name, (int)status);
    else
      snprintf(trace_args, sizeof trace_args,
               "\"seq\":%" PRIu64 ",\"op\":\"%s\",\"bytes\":%zu,"
               "\"dtype\":\"%s\",\"algorithm\":\"%s\",\"status\":%d",
               args->seq, has_op(args->kind) ? xcoll_op_name(args->op) : "none",
               total_bytes(comm, args), xcoll_datatype_name(args->dtype),
               algorithm_name, (int)status);
    xcoll_trace_span(name, "collective", comm->comm_id, start_us,
                     xcoll_time_us(), trace_args);
  }

  if (status != XCOLL_SUCCESS) {
    /* Keep the algorithm's message (it names the peer) and say which call. */
    char cause[XCOLL_ERROR_BYTES];
    snprintf(cause, sizeof cause, "%s", xcoll_last_error());
    if (!explain)
      describe(comm, args, what, sizeof what);
    status = xcoll_error(comm, status, "%s seq %" PRIu64 " (%s, %s) failed: %s",
                         name, args->seq, what, algorithm_name, cause);
    if (is_fatal(status))
      xcoll_comm_set_broken(comm, status, xcoll_last_error());
  }
  return status;
}

/* ---- issue ---- */

static xcoll_status issue(xcoll_comm *comm, xcoll_coll_args *args,
                          int nonblocking, xcoll_request_t *request) {
  if (request != NULL)
    *request = NULL;
  xcoll_status status = validate(comm, args, nonblocking, request);
  if (status != XCOLL_SUCCESS)
    return status;
  /* Every rank numbers every call, even empty ones, so that sequence numbers
   * (and the tags built from them) agree across ranks. */
  args->seq = comm->next_seq++;
  if (args->count == 0 && args->kind != XCOLL_COLL_BARRIER) {
    if (!nonblocking)
      return XCOLL_SUCCESS;
    *request = xcoll_request_completed(comm, XCOLL_SUCCESS);
    return *request != NULL ? XCOLL_SUCCESS : XCOLL_ERR_NO_MEMORY;
  }
  if (nonblocking)
    return xcoll_queue_submit(comm, args, request);
  return xcoll_queue_run(comm, args);
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
