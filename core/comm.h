/* comm.h - the communicator: who we are, which backend, the store, the
 * request queue, errors. Shared by core/ and the backends (backends only read
 * the identity fields and use store, store_prefix, timeout_s, options). */
#ifndef XCOLL_CORE_COMM_H
#define XCOLL_CORE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "algorithm.h"
#include "backend.h"
#include "fingerprint.h"
#include "flight.h"
#include "log.h"
#include "premul.h"
#include "store.h"
#include "xcoll.h"

#define XCOLL_ERROR_BYTES 1024
#define XCOLL_COMM_MAGIC 0x78636f6c6c636f6dULL /* "xcollcom" */

/* Options read from the environment once per communicator (docs/env.md). */
typedef struct xcoll_options {
  int nsocks_per_peer;     /* XCOLL_NSOCKS_PERPEER, default 1, 1..16 */
  const char *socket_ifname; /* XCOLL_SOCKET_IFNAME or NULL */
  size_t chunk_bytes;      /* XCOLL_CHUNK_SIZE, else the backend's default_chunk_bytes, else 512 KiB */
} xcoll_options;

typedef struct xcoll_comm {
  uint64_t magic; /* XCOLL_COMM_MAGIC while alive; 0 after destroy */
  int rank;
  int world_size;
  int local_rank;       /* -1 if unknown */
  int local_world_size; /* -1 if unknown */
  /* The host census at creation (core/host.h): CPUs this rank may run on;
   * ranks of the communicator on this host and the CPUs in the union of
   * their affinity masks; every host has more ranks than CPUs (the same on
   * every rank). */
  int own_cpus, host_ranks, host_cpus, oversubscribed;
  int device;           /* XCOLL_DEVICE_HOST or a CUDA ordinal (device.h) */
  /* A CUDA device's driver state when device >= 0 (core/staging.h: tcp
   * and ucx stage device buffers through pinned memory); else NULL. */
  struct xcoll_cuda *cuda;
  /* Unique among the job's communicators: the world is 0, a split child
   * gets one from the store's counter. Written into every wire header. */
  uint64_t comm_id;
  double timeout_s;
  xcoll_options options;

  const xcoll_backend *backend;
  void *backend_state;

  /* Rendezvous: every communicator holds its own client connection; the world
   * communicator of rank 0 also owns the server. store_prefix ("c<comm_id>/")
   * keeps keys of different communicators apart. */
  xcoll_store *store;
  xcoll_store_server *store_server; /* rank 0 of the world only, else NULL */
  /* 1 when the launcher serves the store (XCOLL_STORE_EXTERNAL=1): rank 0
   * starts none, and a silent store says nothing about rank 0. */
  int store_external;
  char store_prefix[32];
  /* Set when the communicator meets its peers through the caller's store
   * (xcoll_comm_init_kv): store forwards to kv, store_server is NULL, and
   * split children use kv too. */
  int has_kv;
  xcoll_kv_store kv;

  /* XCOLL_ALGO as it was when the communicator was created
   * (xcoll_algorithm_check_env), as NCCL reads NCCL_ALGO at init: the
   * algorithm it forces per collective kind (NULL: chosen by size), its
   * value (for XCOLL_DEBUG=INFO's reason, cut to fit) and the status of
   * its parse. */
  const xcoll_algorithm *algo_forced[XCOLL_NUM_COLLS];
  char algo_value[128];
  xcoll_status algo_status;

  /* Next collective's sequence number (issue order, same on every rank). */
  uint64_t next_seq;
  /* The host-driven collective now running (set by xcoll_coll_run before the
   * algorithm starts): backends send it with each collective's first message
   * to a peer and compare it with the peer's (core/fingerprint.h). */
  xcoll_fingerprint fingerprint;

  /* Non-blocking collectives run in issue order on one progress thread per
   * communicator (core/request.c). */
  struct xcoll_queue *queue;

  /* Set once the communicator is broken (peer failure, timeout, abort): the
   * status later calls fail with. */
  _Atomic int broken_status;
  /* The "unusable after an earlier error" line was logged (once). */
  _Atomic int broken_warned;
  _Atomic int aborted;

  pthread_mutex_t error_lock;
  char last_error[XCOLL_ERROR_BYTES];
  int last_error_logged; /* last_error went to stderr as a WARN line */

  /* Where the world's store listens, kept so that xcoll_comm_split can
   * connect the new communicator's own store client. */
  char master_addr[256];
  int master_port;
  /* Number of xcoll_comm_split calls made on this communicator: names the
   * store keys of each split apart (same on every rank). */
  uint64_t split_count;
  /* The same for xcoll_comm_shrink calls (same on every rank left). */
  uint64_t shrink_count;
  /* This communicator's rank r is rank world_ranks[r] of the world (the
   * ranks the store knows by JOIN); NULL for the world itself. */
  int *world_ranks;
  /* Destroy counts every rank in before rank 0 stops the store: set on the
   * world, and on a shrunk communicator that took the store over from it. */
  int finalize_store;
  /* The message of the error that broke the communicator (under error_lock),
   * repeated by every later call that fails with broken_status. */
  char broken_message[XCOLL_ERROR_BYTES];
  /* The algorithm and protocol of the collective started last (static
   * strings; NULL before the first), for xcoll_comm_last_algorithm. */
  _Atomic(const char *) last_algorithm;
  _Atomic(const char *) last_protocol;
  /* The pre-multiplied sums made on this communicator (core/premul.h):
   * slot k is xcoll_op XCOLL_NUM_OPS + k. Used on the caller's thread only. */
  xcoll_premul_op premul_ops[XCOLL_MAX_PREMUL_OPS];
  /* The flight recorder (core/flight.h; NULL before init and after
   * destroy), and where the host collective running now stands. */
  struct xcoll_flight *flight;
  xcoll_flight_now flight_now;
} xcoll_comm;

/* Record which algorithm and protocol (static strings) run the collective
 * being started on comm: core's dispatch for host algorithms, a
 * device-driven backend for its own. */
void xcoll_comm_note_algorithm(xcoll_comm *comm, const char *algorithm,
                               const char *protocol);

/* XCOLL_SUCCESS if comm is a live communicator, else XCOLL_ERR_INVALID_USAGE
 * with a message (NULL, destroyed, or broken: then its broken status). */
xcoll_status xcoll_comm_check(xcoll_comm *comm);

/* The same, but a broken communicator passes (for calls that must work on
 * one, such as destroy); function names the caller in the message. */
xcoll_status xcoll_comm_check_live(xcoll_comm *comm, const char *function);

/* Whether comm is a live communicator (not NULL, not destroyed), without a
 * message: for choosing which communicator an argument error is logged on. */
int xcoll_comm_is_live(const xcoll_comm *comm);

/* The world rank of comm's rank. */
int xcoll_comm_world_rank(const xcoll_comm *comm, int rank);

/* Mark comm broken with status (REMOTE, TIMEOUT, PROTOCOL, ABORTED) unless it
 * already is: later calls fail at once with status and repeat message.
 * Thread-safe; the first caller wins. */
void xcoll_comm_set_broken(xcoll_comm *comm, xcoll_status status,
                           const char *message);

/* Thin inline wrappers so algorithms read as p2p calls. */
static inline xcoll_status xcoll_p2p_isend(xcoll_comm *comm, int peer, uint64_t tag,
                                       const void *buf, size_t bytes,
                                       xcoll_p2p_request **request) {
  XCOLL_TRACE_SUBSYS(XCOLL_SUBSYS_P2P, "comm %llu: rank %d sends %zu B to rank %d (seq %u step %u)",
              (unsigned long long)comm->comm_id, comm->rank, bytes, peer,
              (unsigned)(tag >> 32), (unsigned)(tag & 0xffffffu));
  atomic_store_explicit(&comm->flight_now.step, (uint32_t)(tag & 0xffffffu),
                        memory_order_relaxed);
  atomic_store_explicit(&comm->flight_now.send_to, peer, memory_order_relaxed);
  return comm->backend->p2p->isend(comm->backend_state, peer, tag, buf, bytes,
                                   request);
}
static inline xcoll_status xcoll_p2p_irecv(xcoll_comm *comm, int peer, uint64_t tag,
                                       void *buf, size_t bytes,
                                       xcoll_p2p_request **request) {
  XCOLL_TRACE_SUBSYS(XCOLL_SUBSYS_P2P, "comm %llu: rank %d receives %zu B from rank %d (seq %u step %u)",
              (unsigned long long)comm->comm_id, comm->rank, bytes, peer,
              (unsigned)(tag >> 32), (unsigned)(tag & 0xffffffu));
  atomic_store_explicit(&comm->flight_now.step, (uint32_t)(tag & 0xffffffu),
                        memory_order_relaxed);
  atomic_store_explicit(&comm->flight_now.recv_from, peer, memory_order_relaxed);
  return comm->backend->p2p->irecv(comm->backend_state, peer, tag, buf, bytes,
                                   request);
}
static inline xcoll_status xcoll_p2p_wait(xcoll_comm *comm,
                                          xcoll_p2p_request **requests,
                                          int count) {
  atomic_store_explicit(&comm->flight_now.waiting, 1, memory_order_relaxed);
  xcoll_status status =
      comm->backend->p2p->wait(comm->backend_state, requests, count);
  atomic_store_explicit(&comm->flight_now.waiting, 0, memory_order_relaxed);
  return status;
}

#endif
