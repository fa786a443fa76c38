/* staging.h - CUDA device buffers on host-driven backends, Gloo's way
 * (core/staging.c).
 *
 * A communicator bound to a CUDA device (config.device >= 0) on a backend
 * that runs core's host algorithms (tcp, ucx) moves device buffers through
 * pinned host memory: the input is copied to a pinned buffer on the caller's
 * stream, the stream is synchronised, the host algorithm runs on the pinned
 * copies, and the result is copied back on the same stream once the
 * collective completes (at once for a blocking call, in xcoll_wait or in the
 * xcoll_test that sees it done for a non-blocking one). PyTorch's
 * ProcessGroupGloo does the same for CUDA tensors (a pinned copy, the host
 * algorithm, a copy back). The cost: two extra copies over PCIe per call and
 * a host synchronisation with the stream, which is why NCCL instead runs the
 * collective as a kernel on the stream (docs/nccl-vs-gloo.md).
 *
 * The CUDA driver is core/cuda.h's (dlopen, so that builds without the CUDA
 * toolkit stage too); every driver call runs with the device's primary
 * context pushed on the calling thread and popped again. */
#ifndef XCOLL_CORE_STAGING_H
#define XCOLL_CORE_STAGING_H

#include "algorithm.h"
#include "cuda.h"
#include "xcoll.h"

struct xcoll_comm;

/* The pinned copies of one collective's device buffers. */
typedef struct xcoll_staging xcoll_staging;

/* Prepare args of a collective on comm (bound to a CUDA device) for the
 * host algorithms: synchronise args->stream, copy each device buffer's
 * input (sendbuf; recvbuf too when it overlaps sendbuf, the in-place forms,
 * or for alltoallv, whose receive span may have gaps no block covers that
 * the copy back must leave unchanged) into pinned memory, and write to *host_args the same call on the pinned
 * copies with stream NULL. *staging is NULL when neither buffer is device
 * memory (host_args then only has its stream cleared). Errors:
 * XCOLL_ERR_NO_MEMORY (pinned allocation), XCOLL_ERR_SYSTEM (a driver call
 * failed; the message names it). */
xcoll_status xcoll_staging_begin(struct xcoll_comm *comm,
                                 const xcoll_coll_args *args,
                                 xcoll_coll_args *host_args,
                                 xcoll_staging **staging);

/* Chain rest behind first (the calls of a group, staged one by one):
 * xcoll_staging_end on the chain finishes every one. Either may be NULL;
 * returns the chain. */
xcoll_staging *xcoll_staging_chain(xcoll_staging *first, xcoll_staging *rest);

/* Finish a staged collective (or a chain) whose host part ended with status: on
 * success copy the result back to the device buffer on the call's stream
 * and synchronise it; then return the pinned memory. Returns status, or
 * XCOLL_ERR_SYSTEM when the copy back failed. NULL staging returns status. */
xcoll_status xcoll_staging_end(xcoll_staging *staging, xcoll_status status);

#endif
