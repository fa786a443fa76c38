/* request.h - requests, and the per-communicator queue that runs host-driven
 * collectives in issue order on one progress thread (core/request.c).
 *
 * Every collective of a communicator, blocking or not, runs in the order it
 * was issued. Host-driven ones (core's algorithms over p2p) run on one
 * progress thread per communicator, started on the first non-blocking call,
 * or inline on the caller's thread when nothing is queued or running.
 * Device-driven ones (a backend's coll ops) are started by core/dispatch.c on
 * the issuing thread; their requests hold the backend's op handle and sit on
 * the queue's in-flight list until someone has seen them complete. */
#ifndef XCOLL_CORE_REQUEST_H
#define XCOLL_CORE_REQUEST_H

#include <pthread.h>

#include "algorithm.h"
#include "backend.h"
#include "xcoll.h"

struct xcoll_comm;

struct xcoll_request {
  pthread_mutex_t lock;
  pthread_cond_t completed;
  int done;
  xcoll_status status;
  xcoll_coll_args args;
  struct xcoll_request *next; /* in the queue, while queued */
  /* Host-driven requests, under the queue's lock: when submitted
   * (monotonic seconds), and 1 while the progress thread leaves it to a
   * prompt waiter (core/request.c). */
  double issued_at;
  int deferred;
  /* Device-driven requests only (NULL op otherwise). */
  struct xcoll_comm *comm;
  int on_backend;       /* set before the request is published; never changes */
  xcoll_backend_op *op; /* the backend's handle until it completes */
  double start_us;      /* when start() was called, for the trace span */
  struct xcoll_request *inflight_next; /* on the in-flight list */
  int inflight;                        /* 1 while on that list */
  int refs; /* the caller's reference + the in-flight list's; under lock */
  /* The pinned copies of a staged call's device buffers (core/staging.h),
   * copied back by whoever sees the request done (xcoll_wait, xcoll_test);
   * NULL otherwise. Under lock. */
  struct xcoll_staging *staging;
  /* Memory the operation reads until it completes (a premul sum's scaled
   * input, core/premul.h; a group's calls, core/group.c), freed with the
   * request by scratch_free (NULL: free). Under lock. */
  void *scratch;
  void (*scratch_free)(void *);
};

/* The function the progress thread runs each queued collective with
 * (xcoll_coll_run in core/dispatch.c). */
typedef xcoll_status (*xcoll_queue_run_fn)(struct xcoll_comm *comm,
                                           const xcoll_coll_args *args);

/* Allocate comm->queue (no thread yet). Errors: XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_queue_create(struct xcoll_comm *comm, xcoll_queue_run_fn run);

/* Queue args (copied) behind what is pending and return a request for
 * xcoll_wait. Starts the progress thread if needed. Errors:
 * XCOLL_ERR_NO_MEMORY, XCOLL_ERR_SYSTEM (thread creation). */
xcoll_status xcoll_queue_submit(struct xcoll_comm *comm,
                                const xcoll_coll_args *args,
                                xcoll_request_t *request);

/* Run args in issue order and wait for it: inline when the queue is idle.
 * Returns the collective's status. */
xcoll_status xcoll_queue_run(struct xcoll_comm *comm,
                             const xcoll_coll_args *args);

/* Before a wait for request (queued by xcoll_queue_submit): a deferred
 * request (core/request.c), and the deferred ones queued ahead of it, run
 * on the calling thread, in issue order; returns once it is done. Any
 * other is the progress thread's to run: returns at once. Counts the wait
 * as prompt or late. */
void xcoll_queue_wait(struct xcoll_comm *comm, struct xcoll_request *request);

/* An xcoll_test of a queued request that is not done: the caller overlaps
 * work with its calls, so the progress thread runs them from now on. */
void xcoll_queue_test(struct xcoll_comm *comm);

/* Block until nothing is queued or running on the progress thread; the
 * deferred calls run on the calling thread. */
void xcoll_queue_drain(struct xcoll_comm *comm);

/* Whether comm has a collective queued, running, or started on the backend
 * and not yet seen complete (1), or none (0). Any thread. */
int xcoll_queue_busy(struct xcoll_comm *comm);

/* A new request with one reference (the caller's), not done. NULL with
 * XCOLL_ERR_NO_MEMORY set. */
struct xcoll_request *xcoll_request_new(struct xcoll_comm *comm);

/* A request that is already complete with status (count 0 collectives), or
 * NULL with XCOLL_ERR_NO_MEMORY set. */
xcoll_request_t xcoll_request_completed(struct xcoll_comm *comm,
                                        xcoll_status status);

/* Mark request done with status and wake its waiters. */
void xcoll_request_complete(struct xcoll_request *request, xcoll_status status);

/* Block until request is done; return its status. Does not release it. */
xcoll_status xcoll_request_wait_done(struct xcoll_request *request);

/* Give request memory to free when it is released (after the operation
 * has completed: the caller's reference is dropped by xcoll_wait). */
void xcoll_request_adopt(struct xcoll_request *request, void *scratch);
/* The same, freed with scratch_free(scratch) instead of free. */
void xcoll_request_adopt_with(struct xcoll_request *request, void *scratch,
                              void (*scratch_free)(void *));

/* Drop one reference; the last one frees request. */
void xcoll_request_release(struct xcoll_request *request);

/* A blocking call's request on the caller's stack, which no other thread
 * ever sees (no allocation per call): xcoll_request_init makes *request
 * what xcoll_request_new returns; xcoll_request_fini ends it (its scratch
 * freed) in the place of the last xcoll_request_release. */
void xcoll_request_init(struct xcoll_comm *comm, struct xcoll_request *request);
void xcoll_request_fini(struct xcoll_request *request);

/* In-flight list of device-driven requests (under the queue's lock):
 * add takes a reference for the list; remove drops it if request is still
 * on the list. snapshot returns up to max requests (oldest first), each with
 * a reference the caller releases; returns how many. */
void xcoll_inflight_add(struct xcoll_comm *comm, struct xcoll_request *request);
void xcoll_inflight_remove(struct xcoll_comm *comm,
                           struct xcoll_request *request);
int xcoll_inflight_snapshot(struct xcoll_comm *comm,
                            struct xcoll_request **out, int max);

/* Complete every queued, not yet started collective with
 * XCOLL_ERR_ABORTED and wake their waiters. Any thread. */
void xcoll_queue_abort(struct xcoll_comm *comm);

/* Wait until the queue is empty and idle, stop and join the progress
 * thread, free comm->queue. NULL queue is fine. */
void xcoll_queue_destroy(struct xcoll_comm *comm);

#endif
