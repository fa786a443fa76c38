/* comm_state.c - the state of a communicator that every layer reads and
 * sets: liveness and broken-state checks, the algorithm last run, the
 * transition to broken (which has the flight recorder dump its calls).
 * Below dispatch (core/dispatch.c) and the flight recorder's users; the
 * public calls on a communicator are in comm.c, above them. */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "flight.h"
#include "log.h"

/* ---- helpers ---- */

int xcoll_comm_is_live(const xcoll_comm *comm) {
  return comm != NULL && comm->magic == XCOLL_COMM_MAGIC;
}

int xcoll_comm_world_rank(const xcoll_comm *comm, int rank) {
  return comm->world_ranks != NULL ? comm->world_ranks[rank] : rank;
}

/* Like xcoll_comm_check, but a broken communicator still passes: getters,
 * abort and destroy must work on it. */
static xcoll_status check_live(xcoll_comm *comm, const char *function) {
  if (comm == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_USAGE,
                       "%s: comm is NULL: create one with xcoll_comm_init or "
                       "xcoll_comm_init_env",
                       function);
  if (comm->magic != XCOLL_COMM_MAGIC)
    return xcoll_error(
        NULL, XCOLL_ERR_INVALID_USAGE,
        "%s: comm is not a live communicator (already destroyed, "
        "or not made by xcoll_comm_init)",
        function);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_check_live(xcoll_comm *comm, const char *function) {
  return check_live(comm, function);
}

xcoll_status xcoll_comm_check(xcoll_comm *comm) {
  xcoll_status status = check_live(comm, "xcoll");
  if (status != XCOLL_SUCCESS)
    return status;
  int broken = atomic_load(&comm->broken_status);
  if (broken != XCOLL_SUCCESS) {
    char reason[XCOLL_ERROR_BYTES];
    pthread_mutex_lock(&comm->error_lock);
    memcpy(reason, comm->broken_message, sizeof reason);
    pthread_mutex_unlock(&comm->error_lock);
    /* Logged once: a program with thousands of requests queued on a comm
     * that broke gets one line, not one per request. */
    if (atomic_exchange(&comm->broken_warned, 1) == 0)
      return xcoll_error(comm, (xcoll_status)broken,
                         "communicator %llu is unusable after an earlier "
                         "error; destroy it (every later call fails the "
                         "same way, without another log line). The error "
                         "was: %s",
                         (unsigned long long)comm->comm_id, reason);
    return xcoll_error_quiet(comm, (xcoll_status)broken,
                             "communicator %llu is unusable after an earlier "
                             "error; destroy it. The error was: %s",
                             (unsigned long long)comm->comm_id, reason);
  }
  return XCOLL_SUCCESS;
}

void xcoll_comm_note_algorithm(xcoll_comm *comm, const char *algorithm,
                               const char *protocol) {
  /* Release (a plain store on x86): readers want the names, not an order
   * against other memory; two seq_cst stores cost a few percent of an 8 B
   * nccl_like allreduce. */
  atomic_store_explicit(&comm->last_algorithm, algorithm, memory_order_release);
  atomic_store_explicit(&comm->last_protocol, protocol, memory_order_release);
}

void xcoll_comm_set_broken(xcoll_comm *comm, xcoll_status status,
                           const char *message) {
  int expected = XCOLL_SUCCESS;
  pthread_mutex_lock(&comm->error_lock);
  if (atomic_compare_exchange_strong(&comm->broken_status, &expected,
                                     (int)status))
    snprintf(comm->broken_message, sizeof comm->broken_message, "%s", message);
  pthread_mutex_unlock(&comm->error_lock);
  if (expected == XCOLL_SUCCESS) /* this call broke it */
    xcoll_flight_on_broken(comm, status);
}
