/* backend.h - the backend interface: one versioned struct of function
 * pointers per backend (NCCL's net-plugin model), registered in registry.c.
 *
 * A host-driven backend (tcp, ucx) fills p2p and leaves coll NULL: core's
 * algorithms run over its p2p interface. A device-driven backend (nccl_like)
 * fills coll: core starts each collective it supports on the issuing thread
 * and completes it later (ABI 3; core/dispatch.c). */
#ifndef XCOLL_CORE_BACKEND_H
#define XCOLL_CORE_BACKEND_H

#include "p2p.h"
#include "xcoll.h"

struct xcoll_comm;
struct xcoll_coll_args;

#define XCOLL_BACKEND_ABI_VERSION 3

/* A collective a backend has started and not yet completed (ABI 3). The
 * backend defines it. */
typedef struct xcoll_backend_op xcoll_backend_op;

/* Collective ops of a device-driven backend (ABI 3).
 *
 * core/dispatch.c calls supports() then start() on the thread that issued the
 * collective, in issue order, right after the arguments were validated and
 * the sequence number given: so a backend that enqueues work on a stream or
 * on its own worker threads keeps the caller's order, as NCCL's enqueue does.
 * Calls the backend does not support run on core's host algorithms over the
 * backend's p2p interface (p2p must then be non-NULL); core waits for every
 * started backend op before it runs a host algorithm and vice versa, so the
 * two never interleave on the wire. */
typedef struct xcoll_backend_coll_ops {
  /* 1 if the backend runs args itself, 0 to leave it to core. Cheap; no
   * side effects. */
  int (*supports)(void *state, const struct xcoll_coll_args *args);
  /* Start args and return at once: never blocks waiting on a peer (it may
   * wait for room in a bounded queue of its own work). On success *op is the
   * handle to test or wait. args->blocking = 1 says that wait() follows at
   * once on this thread, so the backend may leave the work to that wait
   * (backends/nccl_like runs it on the waiting thread) instead of waking a
   * thread of its own. Errors: XCOLL_ERR_NO_MEMORY, and the comm's
   * broken status when earlier work failed; the message is set. */
  xcoll_status (*start)(struct xcoll_comm *comm, void *state,
                        const struct xcoll_coll_args *args,
                        xcoll_backend_op **op);
  /* Progress without blocking. *done = 1 when op has completed: op is then
   * released and the return value is its status. */
  xcoll_status (*test)(void *state, xcoll_backend_op *op, int *done);
  /* Block until op completes, release it, return its status (REMOTE,
   * TIMEOUT after comm->timeout_s without progress, PROTOCOL, ABORTED, with
   * the message set and naming the peer where one is at fault). */
  xcoll_status (*wait)(void *state, xcoll_backend_op *op);
  /* Optional (NULL: never). 1 when the backend's own run of args, a call
   * it supports, compares every rank's call with the others' before any
   * rank completes it (nccl_like's Bruck collectives carry each sender's
   * fingerprint, and a rank holds every rank's block only once all were
   * compared): core then skips its agreement round before a rooted call
   * (core/fingerprint_exchange.h). The same answer on every rank for the
   * same call. Cheap; no side effects. */
  int (*agrees)(void *state, const struct xcoll_coll_args *args);
} xcoll_backend_coll_ops;

/* Where one channel of a device-driven backend's op stands (the flight
 * recorder's dump, docs/flight-recorder.md): steps (slots) done of the
 * op's total on this channel, each way, and the connection its kernel
 * waits on. */
typedef struct xcoll_backend_channel {
  int channel;
  uint64_t sent, send_steps;     /* steps filled towards the next rank */
  uint64_t received, recv_steps; /* steps consumed from the previous */
  int waits_peer;       /* the rank at the other end; -1: not waiting */
  int waits_send;       /* 1: for credits to send to it; 0: for its data */
  const char *transport; /* of that connection ("SHM", "NET"); static */
} xcoll_backend_channel;

typedef struct xcoll_backend {
  int abi_version; /* XCOLL_BACKEND_ABI_VERSION */
  const char *name;
  const char *description;
  /* Once per process before the first comm_init of this backend (NULL: none
   * needed). Errors are returned to that comm_init's caller, and every later
   * comm_init of the backend returns the same status. */
  xcoll_status (*init)(void);
  /* Connect comm's ranks: exchange addresses through comm->store under keys
   * prefixed by comm->store_prefix (core/bootstrap.h), then build the
   * backend's state. Collective over comm. On error, free what was taken and
   * set a message. */
  xcoll_status (*comm_init)(struct xcoll_comm *comm, void **state);
  /* Close connections and free state. Never fails. */
  void (*comm_destroy)(struct xcoll_comm *comm, void *state);
  /* Called from any thread: make waits in progress return XCOLL_ERR_ABORTED
   * soon, and tell peers if possible. Must be async-safe with respect to the
   * thread running a collective. */
  void (*comm_abort)(struct xcoll_comm *comm, void *state);
  /* Host-driven: the p2p interface core's algorithms run over (NULL when
   * coll supports every call). */
  const xcoll_p2p_ops *p2p;
  /* Device-driven: collectives started on the issuing thread (NULL for
   * host-driven backends). */
  const xcoll_backend_coll_ops *coll;
  /* The pipelining chunk (bytes) the algorithms use on this backend when
   * XCOLL_CHUNK_SIZE is unset; 0 means core's default (512 KiB). */
  size_t default_chunk_bytes;
  /* Nonzero: on a communicator bound to a CUDA device (comm->cuda), coll
   * runs the collectives on the device itself (kernels on the caller's
   * stream) and core hands it every call; zero: core stages device
   * buffers through pinned memory for p2p backends, and refuses a CUDA
   * device for coll-only ones. */
  int device_engine;
  /* Optional (NULL: both are the backend's name): the transports of this
   * rank's connections to the next rank (send) and from the previous
   * (recv), as XCOLL_DEBUG=INFO names them (nccl_like: "SHM", "NET");
   * static strings. xcoll_comm_transport returns them. */
  void (*transport)(const void *state, const char **send, const char **recv);
  /* Optional (NULL: none): where the op recorded as flight_id (the
   * flight recorder's id, xcoll_coll_args.flight_id) stands on each of its
   * channels, into out (at most max); returns how many were written, 0
   * when the backend does not run that op now and did not fail in it.
   * Called by a dump from any thread, with no lock of core's held, while
   * the op may run: it must take no lock and not block (read counters). */
  int (*describe_op)(const void *state, uint64_t flight_id,
                     xcoll_backend_channel *out, int max);
  /* Optional (NULL: never): the status every op queued or in flight will
   * end with, when the backend has failed as a whole (a peer's death, a
   * collective mismatch: every later op fails the same way), else
   * XCOLL_SUCCESS. A dump shows such ops as failed with it: the calls
   * that return it may not have returned yet. Same rules as describe_op:
   * any thread, no lock, no blocking. */
  xcoll_status (*failed_status)(const void *state);
} xcoll_backend;

/* The backend called name, or NULL with XCOLL_ERR_NOT_SUPPORTED set (the
 * message lists the compiled-in backends, and for a known-but-not-built one
 * says which CMake option builds it in). */
xcoll_status xcoll_backend_find(const char *name, const xcoll_backend **out);

/* Run backend->init once per process (thread-safe); later calls repeat its
 * status and message. */
xcoll_status xcoll_backend_init_once(const xcoll_backend *backend);

/* Compiled-in backends, NULL-terminated. */
const xcoll_backend *const *xcoll_backend_list(void);

extern const xcoll_backend xcoll_backend_tcp;
#ifdef XCOLL_HAVE_UCX
extern const xcoll_backend xcoll_backend_ucx;
#endif
#ifdef XCOLL_HAVE_NCCL_LIKE
extern const xcoll_backend xcoll_backend_nccl_like;
#endif

#endif
