/* comm.c - the public calls on communicators once made: the last
 * algorithm, failed ranks, abort, destroy, getters, the flight recorder's
 * dump. The state every layer reads (liveness and broken-state checks) is
 * in comm_state.c, below dispatch and the flight recorder; creation from a
 * configuration or the environment is in comm_create.c, split and shrink in
 * comm_split.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blame.h"
#include "comm.h"
#include "comm_create.h"
#include "dispatch.h"
#include "error.h"
#include "flight.h"
#include "log.h"
#include "request.h"

xcoll_status xcoll_comm_last_algorithm(xcoll_comm_t comm,
                                       const char **algorithm,
                                       const char **protocol) {
  if (algorithm == NULL || protocol == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_last_algorithm: algorithm or protocol is "
                       "NULL");
  *algorithm = "none";
  *protocol = "none";
  /* A broken communicator still says what it ran last. */
  xcoll_status status =
      xcoll_comm_check_live(comm, "xcoll_comm_last_algorithm");
  if (status != XCOLL_SUCCESS)
    return status;
  const char *a = atomic_load(&comm->last_algorithm);
  const char *p = atomic_load(&comm->last_protocol);
  if (a != NULL)
    *algorithm = a;
  if (p != NULL)
    *protocol = p;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_failed_ranks(xcoll_comm_t comm, int *ranks,
                                     int capacity, int *count) {
  if (count == NULL || capacity < 0 || (ranks == NULL && capacity > 0))
    return xcoll_error(xcoll_comm_is_live(comm) ? comm : NULL,
                       XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_failed_ranks: count is NULL, capacity "
                       "negative, or ranks NULL with capacity > 0 (pass "
                       "ranks with room for capacity ints, or NULL and 0 to "
                       "ask only how many)");
  *count = 0;
  /* A broken communicator passes: it is the one to ask about. */
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_failed_ranks");
  if (status != XCOLL_SUCCESS)
    return status;
  if (comm->has_kv || xcoll_store_is_kv(comm->store))
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "xcoll_comm_failed_ranks: comm %llu rendezvoused "
                       "through the caller's store (xcoll_comm_init_kv), "
                       "which does not record departures: take the ranks "
                       "from the error that broke the communicator",
                       (unsigned long long)comm->comm_id);
  int found = 0;
  for (int r = 0; r < comm->world_size; r++) {
    if (r == comm->rank)
      continue;
    char key[64];
    snprintf(key, sizeof key, "%s%d", XCOLL_STORE_DEPARTED_PREFIX,
             xcoll_comm_world_rank(comm, r));
    const char *keys[1] = {key};
    int dead = 0;
    status = xcoll_store_check(comm->store, keys, 1, &dead);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    if (dead || xcoll_blame_has_left(comm, comm->store, r)) {
      if (found < capacity)
        ranks[found] = r;
      found++;
    }
  }
  *count = found;
  return XCOLL_SUCCESS;
}

/* ---- abort, destroy ---- */

xcoll_status xcoll_comm_abort(xcoll_comm_t comm) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_abort");
  if (status != XCOLL_SUCCESS)
    return status;
  if (atomic_exchange(&comm->aborted, 1))
    return XCOLL_SUCCESS;
  char message[XCOLL_ERROR_BYTES];
  snprintf(message, sizeof message,
           "xcoll_comm_abort() was called on rank %d of communicator %llu",
           comm->rank, (unsigned long long)comm->comm_id);
  /* Abort wins over an earlier failure: every later call must say ABORTED. */
  pthread_mutex_lock(&comm->error_lock);
  atomic_store(&comm->broken_status, XCOLL_ERR_ABORTED);
  snprintf(comm->broken_message, sizeof comm->broken_message, "%s", message);
  snprintf(comm->last_error, sizeof comm->last_error, "%s", message);
  pthread_mutex_unlock(&comm->error_lock);
  XCOLL_WARN("%s", message);
  if (comm->backend->comm_abort != NULL)
    comm->backend->comm_abort(comm, comm->backend_state);
  xcoll_queue_abort(comm);
  return XCOLL_SUCCESS;
}

/* Before rank 0 of the world stops the store, it waits until every rank
 * has reached destroy: a slower rank may still be reading rendezvous keys,
 * and pulling the server from under it would fail its init or split. Each
 * rank counts itself in on entering destroy (before its backend closes
 * anything: the count is all the store it needs from then on), broken or
 * not: a healthy rank 0 that made fewer calls and left would otherwise
 * wait out XCOLL_TIMEOUT_S for the ranks its departure broke. A broken
 * rank waits for no reply longer than a second: a stopped rank 0 answers
 * nothing. Returns the add's status. */
static xcoll_status finalize_arrive(xcoll_comm *comm, int broken) {
  char count_key[64], done_key[64];
  snprintf(count_key, sizeof count_key, "%sfinalize", comm->store_prefix);
  snprintf(done_key, sizeof done_key, "%sfinalize_done", comm->store_prefix);
  if (broken)
    xcoll_store_set_timeout(comm->store,
                            comm->timeout_s < 1.0 ? comm->timeout_s : 1.0);
  int64_t arrived = 0;
  xcoll_status status = xcoll_store_add(comm->store, count_key, 1, &arrived);
  if (status == XCOLL_SUCCESS && arrived == comm->world_size)
    status = xcoll_store_set(comm->store, done_key, "1", 1);
  return status;
}

/* Rank 0, healthy, after its backend closed: wait for every rank's arrival. */
static xcoll_status finalize_wait(xcoll_comm *comm, xcoll_status arrived) {
  char done_key[64];
  snprintf(done_key, sizeof done_key, "%sfinalize_done", comm->store_prefix);
  xcoll_status status = arrived;
  if (status == XCOLL_SUCCESS && comm->store_server != NULL) {
    const char *keys[1] = {done_key};
    status = xcoll_store_wait(comm->store, keys, 1);
  }
  if (status != XCOLL_SUCCESS)
    return xcoll_error(NULL, status,
                       "xcoll_comm_destroy: rank %d: not every rank reached "
                       "xcoll_comm_destroy within %.1f s (XCOLL_TIMEOUT_S); "
                       "stopping the store anyway: %s",
                       comm->rank, comm->timeout_s, xcoll_last_error());
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_destroy(xcoll_comm_t comm) {
  if (comm == NULL)
    return XCOLL_SUCCESS;
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_destroy");
  if (status != XCOLL_SUCCESS)
    return status;
  xcoll_dispatch_quiesce(comm);
  xcoll_queue_destroy(comm);
  xcoll_flight_close(comm); /* before the backend state a dump reads */
  int broken = atomic_load(&comm->broken_status) != XCOLL_SUCCESS;
  /* Before any connection closes: a peer still waiting on this rank learns
   * that it left rather than died (core/blame.h). */
  if (!broken)
    xcoll_blame_announce_leave(comm);
  /* A caller's store is not ours to stop: nothing to hold it up for. */
  int finalize = comm->finalize_store && comm->world_size > 1 && !comm->has_kv;
  xcoll_status arrived = finalize ? finalize_arrive(comm, broken)
                                  : XCOLL_SUCCESS;
  comm->backend->comm_destroy(comm, comm->backend_state);
  /* A broken world may have lost ranks for good: do not wait for them. */
  if (finalize && !broken)
    status = finalize_wait(comm, arrived);
  xcoll_comm_free(comm, XCOLL_COMM_HAVE_TRACE);
  return status;
}

/* ---- getters ---- */

xcoll_status xcoll_comm_rank(xcoll_comm_t comm, int *rank) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_rank");
  if (status != XCOLL_SUCCESS)
    return status;
  if (rank == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_rank: rank is NULL");
  *rank = comm->rank;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_size(xcoll_comm_t comm, int *world_size) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_size");
  if (status != XCOLL_SUCCESS)
    return status;
  if (world_size == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_size: world_size is NULL");
  *world_size = comm->world_size;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_local_rank(xcoll_comm_t comm, int *local_rank) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_local_rank");
  if (status != XCOLL_SUCCESS)
    return status;
  if (local_rank == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_local_rank: local_rank is NULL");
  *local_rank = comm->local_rank;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_device(xcoll_comm_t comm, int *device) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_device");
  if (status != XCOLL_SUCCESS)
    return status;
  if (device == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_device: device is NULL");
  *device = comm->device;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_transport(xcoll_comm_t comm, const char **send,
                                  const char **recv) {
  if (send == NULL || recv == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_transport: send or recv is NULL");
  *send = *recv = "none";
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_transport");
  if (status != XCOLL_SUCCESS)
    return status;
  if (comm->backend->transport != NULL) {
    comm->backend->transport(comm->backend_state, send, recv);
  } else {
    *send = *recv = comm->backend->name;
  }
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_host(xcoll_comm_t comm, int *host_ranks,
                             int *host_cpus, int *own_cpus) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_host");
  if (status != XCOLL_SUCCESS)
    return status;
  if (host_ranks != NULL)
    *host_ranks = comm->host_ranks;
  if (host_cpus != NULL)
    *host_cpus = comm->host_cpus;
  if (own_cpus != NULL)
    *own_cpus = comm->own_cpus;
  return XCOLL_SUCCESS;
}

const char *xcoll_comm_backend(xcoll_comm_t comm) {
  if (!xcoll_comm_is_live(comm))
    return "";
  return comm->backend->name;
}

/* ---- the flight recorder's dump ---- */

xcoll_status xcoll_comm_dump(xcoll_comm_t comm, const char *path) {
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_dump");
  if (status != XCOLL_SUCCESS)
    return status;
  return xcoll_flight_dump(comm, path, "api");
}
