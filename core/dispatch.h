/* dispatch.h - where a validated collective goes (core/dispatch.c).
 *
 * A call the backend's collective ops support (ABI 3, core/backend.h) is
 * started on the issuing thread, in issue order, and completed later through
 * its request; every other call runs on core's host algorithms over the
 * backend's p2p interface, through the request queue (core/request.h). The
 * two never interleave: a backend call waits until the host queue is idle,
 * and a host call waits until every backend call started before it has
 * completed. */
#ifndef XCOLL_CORE_DISPATCH_H
#define XCOLL_CORE_DISPATCH_H

#include "algorithm.h"
#include "xcoll.h"

struct xcoll_comm;

/* Send a validated, numbered collective on its way. request NULL: blocking,
 * returns the collective's status. Otherwise *request receives a request for
 * xcoll_wait/xcoll_test and the return value says whether the call was
 * issued. Errors besides the collective's own: XCOLL_ERR_INVALID_ARGUMENT
 * for a stream on a call that runs on host algorithms,
 * XCOLL_ERR_NOT_SUPPORTED when the backend neither runs the call nor offers
 * a p2p interface, XCOLL_ERR_NO_MEMORY, XCOLL_ERR_SYSTEM. */
xcoll_status xcoll_dispatch(struct xcoll_comm *comm, const xcoll_coll_args *args,
                            xcoll_request_t *request);

/* Run one host-driven collective now, on the calling thread: select the
 * algorithm, log the choice at INFO, trace it, mark comm broken on a fatal
 * error. Used by the progress thread and by the blocking path when the queue
 * is idle. */
xcoll_status xcoll_coll_run(struct xcoll_comm *comm, const xcoll_coll_args *args);

/* Wait for every device-driven request still in flight (their statuses stay
 * in the requests for the caller's xcoll_wait). Called before a host
 * collective and by xcoll_comm_destroy. */
void xcoll_dispatch_quiesce(struct xcoll_comm *comm);

#endif
