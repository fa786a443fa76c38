/* dispatch.c - where a validated collective goes: to the backend's
 * collective ops (device-driven: started on the issuing thread, completed
 * through the request), or to core's host algorithms over the backend's p2p
 * interface (through the request queue); and xcoll_coll_run, which runs one
 * host-driven collective. Also xcoll_wait and xcoll_test, which complete
 * both kinds of request. See dispatch.h for the ordering rule. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_COLL /* log.h */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "fingerprint_exchange.h"
#include "group.h"
#include "log.h"
#include "request.h"
#include "staging.h"
#include "trace.h"

/* Bytes of the larger of the two buffers (the size NCCL's tests report,
 * from the table of collectives): world_size * count elements for
 * allgather's output, reduce_scatter's input, alltoall's buffers, gather's
 * and scatter's root buffer, count elements otherwise; alltoallv's larger
 * side. Validated not to overflow. */
static size_t total_bytes(const xcoll_comm *comm, const xcoll_coll_args *args) {
  size_t element = xcoll_datatype_size(args->dtype);
  if (args->kind == XCOLL_COLL_ALLTOALLV) {
    size_t send = 0, recv = 0;
    for (int p = 0; p < comm->world_size; p++) {
      send += args->sendcounts[p];
      recv += args->recvcounts[p];
    }
    return (send > recv ? send : recv) * element;
  }
  size_t size = 0;
  if (xcoll_coll_shape(args->kind, args->count, comm->world_size, 1, NULL, NULL,
                       &size) != XCOLL_SUCCESS)
    return 0;
  return size * element;
}

/* A world of one: the result is the input (AVG divides by 1); all-to-all,
 * gather and scatter copy this rank's one block. */
static void run_local(const xcoll_comm *comm, const xcoll_coll_args *args) {
  (void)comm;
  if (args->kind == XCOLL_COLL_BARRIER || args->recvbuf == NULL ||
      args->sendbuf == NULL || args->sendbuf == args->recvbuf)
    return;
  size_t element = xcoll_datatype_size(args->dtype);
  if (args->kind == XCOLL_COLL_ALLTOALLV) {
    memmove((char *)args->recvbuf + args->rdispls[0] * element,
            (const char *)args->sendbuf + args->sdispls[0] * element,
            args->recvcounts[0] * element);
    return;
  }
  memmove(args->recvbuf, args->sendbuf, args->count * element);
}

static int is_fatal(xcoll_status status) {
  return status == XCOLL_ERR_REMOTE || status == XCOLL_ERR_TIMEOUT ||
         status == XCOLL_ERR_PROTOCOL || status == XCOLL_ERR_ABORTED;
}

/* The op the caller passed: a premul sum runs as a sum (core/premul.h). */
static const char *op_name(const xcoll_coll_args *args) {
  return args->premul ? "premul_sum" : xcoll_op_name(args->op);
}

/* "4096 B float32 sum" or "0 B" for a barrier: the shared part of the log
 * line and of failure messages. */
static void describe(const xcoll_comm *comm, const xcoll_coll_args *args,
                     char *out, size_t out_bytes) {
  if (args->kind == XCOLL_COLL_BARRIER)
    snprintf(out, out_bytes, "P=%d", comm->world_size);
  else if (args->kind == XCOLL_COLL_GROUP)
    snprintf(out, out_bytes, "%zu calls P=%d", args->count, comm->world_size);
  else if (xcoll_coll_has_op(args->kind))
    snprintf(out, out_bytes, "%zu B %s %s P=%d", total_bytes(comm, args),
             xcoll_datatype_name(args->dtype), op_name(args), comm->world_size);
  else
    snprintf(out, out_bytes, "%zu B %s P=%d", total_bytes(comm, args),
             xcoll_datatype_name(args->dtype), comm->world_size);
}

/* Log the choice at INFO: "allreduce seq 3: 4096 B float32 sum P=4 ->
 * ring (why)". Formatting is skipped unless INFO prints: this runs on every
 * call. */
static void explain(const xcoll_comm *comm, const xcoll_coll_args *args,
                    const char *engine, const char *why) {
  if (xcoll_log_level_get() < XCOLL_LOG_INFO)
    return;
  char what[128];
  describe(comm, args, what, sizeof what);
  XCOLL_INFO("%s seq %" PRIu64 ": %s -> %s (%s)", xcoll_coll_name(args->kind),
             args->seq, what, engine, why);
}

/* One "collective" span per call, from start to completion. */
static void trace_collective(const xcoll_comm *comm, const xcoll_coll_args *args,
                             const char *engine, double start_us,
                             xcoll_status status) {
  char trace_args[256];
  if (args->kind == XCOLL_COLL_BARRIER)
    snprintf(trace_args, sizeof trace_args,
             "\"seq\":%" PRIu64 ",\"algorithm\":\"%s\",\"status\":%d",
             args->seq, engine, (int)status);
  else
    snprintf(trace_args, sizeof trace_args,
             "\"seq\":%" PRIu64 ",\"op\":\"%s\",\"bytes\":%zu,"
             "\"dtype\":\"%s\",\"algorithm\":\"%s\",\"status\":%d",
             args->seq,
             xcoll_coll_has_op(args->kind) ? op_name(args) : "none",
             total_bytes(comm, args), xcoll_datatype_name(args->dtype), engine,
             (int)status);
  xcoll_trace_span(xcoll_coll_name(args->kind), "collective", comm->comm_id,
                   start_us, xcoll_time_us(), trace_args);
}

/* Say which call failed around the engine's own message (which names the
 * peer), and mark comm broken when the failure is fatal. */
static xcoll_status fail(xcoll_comm *comm, const xcoll_coll_args *args,
                         const char *engine, xcoll_status status) {
  char cause[XCOLL_ERROR_BYTES];
  char what[128];
  snprintf(cause, sizeof cause, "%s", xcoll_last_error());
  describe(comm, args, what, sizeof what);
  status = xcoll_error(comm, status, "%s seq %" PRIu64 " (%s, %s) failed: %s",
                       xcoll_coll_name(args->kind), args->seq, what, engine,
                       cause);
  if (is_fatal(status))
    xcoll_comm_set_broken(comm, status, xcoll_last_error());
  return status;
}

/* ---- host-driven: core's algorithms over the backend's p2p ---- */

xcoll_status xcoll_coll_run(xcoll_comm *comm, const xcoll_coll_args *args) {
  xcoll_status status = xcoll_comm_check(comm);
  if (status != XCOLL_SUCCESS) {
    xcoll_flight_end(comm, args->flight_id, status);
    return status;
  }

  if (args->kind == XCOLL_COLL_GROUP) {
    /* Sends and receives run in core/group.c; then the group's
     * collectives each go through this function again. */
    explain(comm, args, "group", "sends and receives posted at once");
    xcoll_comm_note_algorithm(comm, "group", "p2p");
    const int tracing = xcoll_trace_enabled();
    double start_us = tracing ? xcoll_time_us() : 0.0;
    comm->fingerprint = xcoll_fingerprint_of(args);
    uint64_t flight_id =
        xcoll_flight_start(comm, args->flight_id, args, "group", "p2p");
    xcoll_flight_running(comm, flight_id);
    status = xcoll_group_run(comm, args);
    /* The collectives, in the order they were recorded. */
    const struct xcoll_group_ops *g = args->group;
    for (int i = 0; i < g->count && status == XCOLL_SUCCESS; i++) {
      const xcoll_coll_args *a = &g->ops[i].args;
      if (a->kind == XCOLL_COLL_SEND || a->kind == XCOLL_COLL_RECV)
        continue;
      /* A zero count moves nothing (as outside a group). */
      if (a->count == 0 && a->kind != XCOLL_COLL_BARRIER &&
          a->kind != XCOLL_COLL_ALLTOALLV)
        continue;
      status = xcoll_coll_run(comm, a);
    }
    xcoll_flight_end(comm, flight_id, status);
    xcoll_flight_running(comm, 0);
    if (tracing)
      trace_collective(comm, args, "group", start_us, status);
    if (status != XCOLL_SUCCESS)
      status = fail(comm, args, "group", status);
    return status;
  }
  const int explaining = xcoll_log_level_get() >= XCOLL_LOG_INFO;
  char why[256] = "";
  const char *algorithm_name = NULL;
  const xcoll_algorithm *algorithm = NULL;
  if (comm->world_size == 1) {
    algorithm_name = "local_copy";
    if (explaining)
      snprintf(why, sizeof why, "a world of one rank needs no communication");
  } else {
    status = xcoll_algorithm_select(comm, args, &algorithm,
                                    explaining ? why : NULL, sizeof why);
    if (status != XCOLL_SUCCESS) {
      xcoll_flight_end(comm, args->flight_id, status);
      return xcoll_error_adopt(comm, status);
    }
    algorithm_name = algorithm->name;
  }
  explain(comm, args, algorithm_name, why);
  /* Host algorithms move bytes with the backend's p2p messages: there is no
   * protocol to choose, as there is in nccl_like (simple or ll). */
  xcoll_comm_note_algorithm(comm, algorithm_name,
                            algorithm == NULL ? "none" : "p2p");

  const int tracing = xcoll_trace_enabled();
  double start_us = tracing ? xcoll_time_us() : 0.0;
  comm->fingerprint = xcoll_fingerprint_of(args);
  uint64_t flight_id = xcoll_flight_start(
      comm, args->flight_id, args, algorithm_name, algorithm == NULL ? "none" : "p2p");
  xcoll_flight_running(comm, flight_id);
  if (algorithm == NULL)
    run_local(comm, args);
  else {
    /* A rooted collective's data flow depends on the root: the ranks first
     * check that they agree on the call (core/fingerprint_exchange.h). */
    if (xcoll_coll_has_root(args->kind))
      status = xcoll_fingerprint_exchange(comm, args);
    if (status == XCOLL_SUCCESS)
      status = algorithm->run(comm, args);
  }
  xcoll_flight_end(comm, flight_id, status);
  xcoll_flight_running(comm, 0);
  if (tracing)
    trace_collective(comm, args, algorithm_name, start_us, status);
  if (status != XCOLL_SUCCESS)
    status = fail(comm, args, algorithm_name, status);
  return status;
}

/* ---- device-driven: the backend's collective ops ---- */

/* Wait for a started backend op, then record its end: the flight
 * recorder, the trace span, the error wrapped around the engine's. */
static xcoll_status complete_backend_op(xcoll_comm *comm,
                                        const xcoll_coll_args *args,
                                        xcoll_backend_op *op,
                                        double start_us) {
  xcoll_status status = comm->backend->coll->wait(comm->backend_state, op);
  xcoll_flight_end(comm, args->flight_id, status);
  if (xcoll_trace_enabled())
    trace_collective(comm, args, comm->backend->name, start_us, status);
  if (status != XCOLL_SUCCESS)
    status = fail(comm, args, comm->backend->name, status);
  return status;
}

/* Complete a device-driven request that is not done yet: wait for the
 * backend op, trace, wrap the error, record the status in the request. */
static void finish_backend_request(struct xcoll_request *request) {
  pthread_mutex_lock(&request->lock);
  if (request->done) {
    pthread_mutex_unlock(&request->lock);
    return;
  }
  xcoll_status status = complete_backend_op(request->comm, &request->args,
                                            request->op, request->start_us);
  request->op = NULL;
  request->status = status;
  request->done = 1;
  pthread_cond_broadcast(&request->completed);
  pthread_mutex_unlock(&request->lock);
}

/* Test without blocking; 1 when the request is done (status recorded). */
static int test_backend_request(struct xcoll_request *request) {
  pthread_mutex_lock(&request->lock);
  if (!request->done) {
    xcoll_comm *comm = request->comm;
    int done = 0;
    xcoll_status status =
        comm->backend->coll->test(comm->backend_state, request->op, &done);
    if (done || status != XCOLL_SUCCESS) {
      request->op = NULL;
      xcoll_flight_end(comm, request->args.flight_id, status);
      if (xcoll_trace_enabled())
        trace_collective(comm, &request->args, comm->backend->name,
                         request->start_us, status);
      if (status != XCOLL_SUCCESS)
        status = fail(comm, &request->args, comm->backend->name, status);
      request->status = status;
      request->done = 1;
      pthread_cond_broadcast(&request->completed);
    }
  }
  int done = request->done;
  pthread_mutex_unlock(&request->lock);
  return done;
}

void xcoll_dispatch_quiesce(xcoll_comm *comm) {
  if (comm->backend->coll == NULL || comm->queue == NULL)
    return;
  enum { BATCH = 64 };
  struct xcoll_request *batch[BATCH];
  int n;
  while ((n = xcoll_inflight_snapshot(comm, batch, BATCH)) > 0) {
    for (int i = 0; i < n; i++) {
      finish_backend_request(batch[i]);
      xcoll_inflight_remove(comm, batch[i]);
      xcoll_request_release(batch[i]);
    }
  }
}

/* The flight recorder's "started", with the algorithm the backend named
 * in start(). */
static void note_started(xcoll_comm *comm, const xcoll_coll_args *args) {
  const char *algorithm = atomic_load(&comm->last_algorithm);
  xcoll_flight_start(comm, args->flight_id, args,
                     algorithm != NULL ? algorithm : comm->backend->name,
                     atomic_load(&comm->last_protocol));
}

static xcoll_status dispatch_backend(xcoll_comm *comm,
                                     const xcoll_coll_args *args,
                                     xcoll_request_t *out) {
  const xcoll_backend_coll_ops *coll = comm->backend->coll;
  xcoll_coll_args agreed_args; /* args, once the exchange agreed on them */
  /* Host collectives issued earlier must be on the wire first. */
  xcoll_queue_drain(comm);
  explain(comm, args, comm->backend->name, "the backend runs it (device-driven)");
  /* A device engine compares each rank's fingerprint with its ring
   * neighbour's only (nccl_like). At 3 ranks and more, a rank whose
   * neighbours agree with it could return success from a rooted collective
   * whose root another rank named differently, and learn of it only in its
   * next call: the ranks first agree on the call over the backend's p2p
   * interface, as host-driven rooted collectives do
   * (core/fingerprint_exchange.h). At 2 ranks too: the root of a
   * broadcast receives nothing, so only a message back tells it of a
   * mismatch, and the exchange's (one round over the mesh, shared memory
   * within a host) costs less than the engine's own fingerprint round
   * trip, which then goes in a batch (xcoll_coll_args.agreed; nccl_like:
   * desync.c nl_fp_deferrable). The exchange's messages share the mesh with the
   * engine's own (Bruck, pairwise), so the engine's calls issued earlier
   * complete first, as before a host algorithm (dispatch). A backend that
   * compares every rank's call itself in this one (coll->agrees) needs no
   * such round. */
  if (xcoll_coll_has_root(args->kind) && comm->world_size > 1 &&
      comm->backend->p2p != NULL &&
      (coll->agrees == NULL || !coll->agrees(comm->backend_state, args))) {
    xcoll_dispatch_quiesce(comm);
    comm->fingerprint = xcoll_fingerprint_of(args);
    xcoll_status status = xcoll_fingerprint_exchange(comm, args);
    if (status != XCOLL_SUCCESS)
      return fail(comm, args, comm->backend->name, status);
    agreed_args = *args;
    agreed_args.agreed = 1;
    args = &agreed_args;
  }

  /* The backend names its own algorithm and protocol in start(). */
  xcoll_comm_note_algorithm(comm, comm->backend->name, "backend");
  double start_us = xcoll_trace_enabled() ? xcoll_time_us() : 0.0;
  if (out == NULL) {
    /* A blocking call needs no request: no other thread can see it, so
     * it is started and waited for here, with nothing allocated, locked
     * or signalled on its behalf. */
    xcoll_coll_args call = *args;
    call.blocking = 1;
    xcoll_backend_op *op = NULL;
    xcoll_status status = coll->start(comm, comm->backend_state, &call, &op);
    if (status != XCOLL_SUCCESS)
      return fail(comm, args, comm->backend->name, status);
    note_started(comm, &call);
    return complete_backend_op(comm, &call, op, start_us);
  }
  struct xcoll_request *request = xcoll_request_new(comm);
  if (request == NULL)
    return XCOLL_ERR_NO_MEMORY;
  request->args = *args;
  request->on_backend = 1;
  request->start_us = start_us;
  request->args.blocking = 0;
  xcoll_status status =
      coll->start(comm, comm->backend_state, &request->args, &request->op);
  if (status != XCOLL_SUCCESS) {
    xcoll_request_release(request);
    return fail(comm, args, comm->backend->name, status);
  }
  note_started(comm, &request->args);
  xcoll_inflight_add(comm, request);
  *out = request;
  return XCOLL_SUCCESS;
}

/* A communicator bound to a CUDA device on a host-driven backend: the
 * host algorithms run on pinned copies of the device buffers
 * (core/staging.h). A non-blocking call's result is copied back by the
 * xcoll_wait or xcoll_test that sees it done. */
static xcoll_status dispatch_staged(xcoll_comm *comm, const xcoll_coll_args *args,
                                    xcoll_request_t *request) {
  xcoll_coll_args host_args;
  xcoll_staging *staging = NULL;
  /* A device engine's calls issued earlier must be off the wire first. */
  xcoll_dispatch_quiesce(comm);
  xcoll_status status = XCOLL_SUCCESS;
  if (args->kind == XCOLL_COLL_GROUP) {
    /* Each call of the group is staged on its own; the group (ours until
     * it is freed) then holds the calls on the pinned copies. */
    struct xcoll_group_ops *group = args->group;
    for (int i = 0; i < group->count && status == XCOLL_SUCCESS; i++) {
      xcoll_coll_args host_op;
      xcoll_staging *one = NULL;
      status = xcoll_staging_begin(comm, &group->ops[i].args, &host_op, &one);
      if (status == XCOLL_SUCCESS) {
        group->ops[i].args = host_op;
        staging = xcoll_staging_chain(one, staging);
      }
    }
    host_args = *args;
    host_args.stream = NULL;
  } else {
    status = xcoll_staging_begin(comm, args, &host_args, &staging);
  }
  if (status != XCOLL_SUCCESS)
    return xcoll_staging_end(staging, status);
  if (request == NULL)
    return xcoll_staging_end(staging, xcoll_queue_run(comm, &host_args));
  status = xcoll_queue_submit(comm, &host_args, request);
  if (status != XCOLL_SUCCESS)
    return xcoll_staging_end(staging, status);
  pthread_mutex_lock(&(*request)->lock);
  (*request)->staging = staging;
  pthread_mutex_unlock(&(*request)->lock);
  return XCOLL_SUCCESS;
}

/* Copy a staged request's result back once it is done (at most once);
 * returns the request's final status. */
static xcoll_status finish_staging(struct xcoll_request *request,
                                   xcoll_status status) {
  pthread_mutex_lock(&request->lock);
  xcoll_staging *staging = request->staging;
  request->staging = NULL;
  pthread_mutex_unlock(&request->lock);
  if (staging == NULL)
    return status;
  status = xcoll_staging_end(staging, status);
  pthread_mutex_lock(&request->lock);
  request->status = status;
  pthread_mutex_unlock(&request->lock);
  return status;
}

static xcoll_status dispatch(xcoll_comm *comm, const xcoll_coll_args *args,
                             xcoll_request_t *request);

/* Record the call in the flight recorder (core/flight.h), then send it on
 * its way; a call that fails before it runs is marked failed there. */
xcoll_status xcoll_dispatch(xcoll_comm *comm, const xcoll_coll_args *args,
                            xcoll_request_t *request) {
  xcoll_coll_args recorded = *args;
  recorded.flight_id = xcoll_flight_record(comm, args);
  xcoll_status status = dispatch(comm, &recorded, request);
  if (status != XCOLL_SUCCESS)
    xcoll_flight_end(comm, recorded.flight_id, status);
  return status;
}

static xcoll_status dispatch(xcoll_comm *comm, const xcoll_coll_args *args,
                             xcoll_request_t *request) {
  const xcoll_backend_coll_ops *coll = comm->backend->coll;
  const char *name = xcoll_coll_name(args->kind);
  if (comm->cuda != NULL && comm->backend->device_engine) {
    if (coll->supports(comm->backend_state, args))
      return dispatch_backend(comm, args, request);
    /* A call the device engine does not run (all-to-all, gather, scatter)
     * is staged through pinned memory onto core's host algorithms over the
     * backend's p2p interface, as tcp and ucx stage every call. */
    if (comm->backend->p2p != NULL)
      return dispatch_staged(comm, args, request);
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "xcoll_%s on a communicator bound to CUDA device %d: "
                       "backend '%s' does not run this call on GPU ranks "
                       "(host ranks, or the tcp and ucx backends, do)",
                       xcoll_coll_name(args->kind), comm->device,
                       comm->backend->name);
  }
  if (comm->cuda != NULL)
    return dispatch_staged(comm, args, request);
  /* Host ranks only: a device buffer would crash the first memcpy. Both
   * buffers are asked about at once: each question walks the loaded
   * objects while no CUDA driver is loaded. */
  const void *device_buffer =
      xcoll_device_pointer_of(args->sendbuf, args->recvbuf);
  if (device_buffer != NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: %s %p is CUDA device memory, but this "
                       "communicator is a host rank (backend '%s'): pass host "
                       "memory (copy it to the host first, or use managed "
                       "memory)",
                       name, device_buffer == args->sendbuf ? "sendbuf" : "recvbuf",
                       device_buffer, comm->backend->name);
  if (coll != NULL && coll->supports(comm->backend_state, args))
    return dispatch_backend(comm, args, request);
  if (args->stream != NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_i%s: stream is not NULL, but backend '%s' runs "
                       "this call on host buffers only: pass NULL",
                       name, comm->backend->name);
  if (comm->backend->p2p == NULL && comm->world_size > 1)
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "xcoll_%s: backend '%s' does not run this call and has "
                       "no p2p interface for core's algorithms",
                       name, comm->backend->name);
  /* Backend collectives issued earlier must be off the wire first. */
  xcoll_dispatch_quiesce(comm);
  if (request != NULL)
    return xcoll_queue_submit(comm, args, request);
  return xcoll_queue_run(comm, args);
}

/* ---- completing requests (public API) ---- */

xcoll_status xcoll_wait(xcoll_request_t request) {
  if (request == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_wait: request is NULL (a failed non-blocking "
                       "call sets *request to NULL; check its status)");
  if (request->on_backend) {
    finish_backend_request(request);
    xcoll_inflight_remove(request->comm, request);
  } else {
    /* A request not done yet is queued on a live communicator (destroy
     * drains the queue first): what is ahead of it and it run here, unless
     * the progress thread took them first (core/request.c). */
    pthread_mutex_lock(&request->lock);
    int done = request->done;
    pthread_mutex_unlock(&request->lock);
    if (!done)
      xcoll_queue_wait(request->comm, request);
  }
  xcoll_status status = finish_staging(request, xcoll_request_wait_done(request));
  xcoll_request_release(request);
  return status;
}

xcoll_status xcoll_test(xcoll_request_t request, int *done) {
  if (request == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_test: request is NULL");
  if (done == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_test: done is NULL");
  if (request->on_backend && test_backend_request(request)) {
    *done = 1;
    return request->status;
  }
  pthread_mutex_lock(&request->lock);
  *done = request->done;
  xcoll_status status = request->done ? request->status : XCOLL_SUCCESS;
  pthread_mutex_unlock(&request->lock);
  if (*done)
    status = finish_staging(request, status);
  else if (!request->on_backend)
    xcoll_queue_test(request->comm); /* queued: run in the background */
  return status;
}
