/* tcp_backend.c - the tcp backend's entry points (core/backend.h):
 * comm_init builds the full mesh, comm_destroy closes it, comm_abort wakes
 * a blocked wait and tells peers. The p2p work is in tcp_p2p.c. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "env.h"
#include "error.h"
#include "tcp.h"

static void free_state(tcp_state *st) {
  if (!st) return;
  xcoll_tcp_close_sockets(st);
  if (st->wake_fd >= 0) close(st->wake_fd);
  while (st->slabs) {
    tcp_request_slab *next = st->slabs->next;
    free(st->slabs);
    st->slabs = next;
  }
  xcoll_blame_fini(&st->blame);
  pthread_mutex_destroy(&st->io_lock);
  free(st->pollfds);
  free(st->sockets);
  free(st->peers);
  free(st);
}

static xcoll_status tcp_comm_init(xcoll_comm *comm, void **state) {
  *state = NULL;
  tcp_state *st = calloc(1, sizeof *st);
  if (!st)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "tcp: out of memory for the backend state");
  st->comm = comm;
  st->rank = comm->rank;
  st->world_size = comm->world_size;
  st->comm_id = comm->comm_id;
  st->timeout_s = comm->timeout_s > 0 ? comm->timeout_s : 300.0;
  st->nsocks = comm->options.nsocks_per_peer;
  if (st->nsocks < 1) st->nsocks = 1;
  if (st->nsocks > TCP_MAX_SOCKS) st->nsocks = TCP_MAX_SOCKS;
  st->listen_fd = -1;
  st->wake_fd = -1;
  pthread_mutex_init(&st->io_lock, NULL);
  xcoll_blame_init(&st->blame, comm);
  atomic_init(&st->aborted, 0);
  st->request_bytes = (sizeof(struct xcoll_p2p_request) +
                       (size_t)st->nsocks * sizeof(tcp_part) + 15) &
                      ~(size_t)15;
  if (st->world_size - 1 > (INT_MAX - 1) / st->nsocks) {
    int world_size = st->world_size, nsocks = st->nsocks;
    free_state(st);
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "tcp: world_size=%d with %d socket(s) per peer needs "
                       "more sockets than an int counts; check WORLD_SIZE",
                       world_size, nsocks);
  }
  st->nsockets = (st->world_size - 1) * st->nsocks;
  st->peers = calloc((size_t)st->world_size, sizeof *st->peers);
  st->sockets = calloc((size_t)st->nsockets + 1, sizeof *st->sockets);
  st->pollfds = calloc((size_t)st->nsockets + 1, sizeof *st->pollfds);
  if (!st->peers || !st->sockets || !st->pollfds) {
    int nsockets = st->nsockets;
    free_state(st);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "tcp: out of memory for %d sockets", nsockets);
  }
  int k = 0;
  for (int p = 0; p < st->world_size; p++) {
    if (p == st->rank) continue;
    st->peers[p].socks = &st->sockets[k];
    for (int i = 0; i < st->nsocks; i++, k++) {
      st->sockets[k].fd = -1;
      st->sockets[k].peer = p;
      st->sockets[k].index = i;
    }
  }
  st->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (st->wake_fd < 0) {
    int err = errno;
    free_state(st);
    return xcoll_error(comm, XCOLL_ERR_SYSTEM, "tcp: eventfd failed: %s",
                       strerror(err));
  }
  xcoll_status s = xcoll_tcp_connect_mesh(st);
  if (s != XCOLL_SUCCESS) {
    st->broken = s; /* no BYE: the mesh never worked */
    free_state(st);
    return s;
  }
  *state = st;
  return XCOLL_SUCCESS;
}

static void tcp_comm_destroy(xcoll_comm *comm, void *state) {
  (void)comm;
  tcp_state *st = state;
  if (!st) return;
  pthread_mutex_lock(&st->io_lock);
  /* An abort nobody has acted on yet still reaches the peers. */
  if (atomic_load(&st->aborted) && !st->broken)
    (void)xcoll_tcp_fail(st, XCOLL_ERR_ABORTED, st->rank,
                         "tcp: xcoll_comm_abort was called on rank %d",
                         st->rank);
  xcoll_tcp_report_unreceived(st);
  pthread_mutex_unlock(&st->io_lock);
  free_state(st);
}

static void tcp_comm_abort(xcoll_comm *comm, void *state) {
  (void)comm;
  tcp_state *st = state;
  if (!st) return;
  atomic_store(&st->aborted, 1);
  uint64_t one = 1;
  if (write(st->wake_fd, &one, sizeof one) < 0) { /* already readable */
  }
  /* Nobody inside the engine: tell the peers from here. */
  if (pthread_mutex_trylock(&st->io_lock) == 0) {
    if (!st->broken)
      (void)xcoll_tcp_fail(st, XCOLL_ERR_ABORTED, st->rank,
                           "tcp: xcoll_comm_abort was called on rank %d",
                           st->rank);
    pthread_mutex_unlock(&st->io_lock);
  }
}

const xcoll_backend xcoll_backend_tcp = {
    .abi_version = XCOLL_BACKEND_ABI_VERSION,
    .name = "tcp",
    .description = "Gloo-like: host-driven algorithms over a full mesh of TCP "
                   "sockets (XCOLL_NSOCKS_PERPEER per peer)",
    .comm_init = tcp_comm_init,
    .comm_destroy = tcp_comm_destroy,
    .comm_abort = tcp_comm_abort,
    .p2p = &xcoll_tcp_p2p_ops,
    .coll = NULL,
    /* Small enough that a chunk is still in cache when the peer copies it
     * out of the socket and reduces it (measurements in tcp.h). */
    .default_chunk_bytes = TCP_DEFAULT_CHUNK_BYTES,
};
