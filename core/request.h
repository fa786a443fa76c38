/* request.h - the per-communicator queue of collectives and its progress
 * thread (core/request.c), used by collectives.c and comm.c.
 *
 * Every collective of a communicator, blocking or not, runs in the order it
 * was issued: non-blocking ones on one progress thread per communicator,
 * started on the first non-blocking call; a blocking one inline on the
 * caller's thread when nothing is queued or running, else behind the queue. */
#ifndef XCOLL_CORE_REQUEST_H
#define XCOLL_CORE_REQUEST_H

#include "algorithm.h"
#include "xcoll.h"

struct xcoll_comm;

/* Allocate comm->queue (no thread yet). Errors: XCOLL_ERR_NO_MEMORY,
 * XCOLL_ERR_SYSTEM. */
xcoll_status xcoll_queue_create(struct xcoll_comm *comm);

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

/* A request that is already complete with status (count 0 collectives), or
 * NULL with XCOLL_ERR_NO_MEMORY set. */
xcoll_request_t xcoll_request_completed(struct xcoll_comm *comm,
                                        xcoll_status status);

/* Complete every queued, not yet started collective with
 * XCOLL_ERR_ABORTED and wake their waiters. Any thread. */
void xcoll_queue_abort(struct xcoll_comm *comm);

/* Wait until the queue is empty and idle, stop and join the progress
 * thread, free comm->queue. NULL queue is fine. */
void xcoll_queue_destroy(struct xcoll_comm *comm);

#endif
