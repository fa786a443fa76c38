/* ucx_p2p.c - the "ucx" backend's p2p interface (core/p2p.h): core's tag
 * and the source rank folded into one UCP tag, isend and irecv, and the
 * wait loop that drives UCP progress and watches for aborts, failures and
 * timeouts. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET /* log.h */
#include "ucx_backend.h"

/* Fold core's 64-bit tag (seq << 32 | step) and the source rank into one UCP
 * tag. Fails when the step does not fit in 24 bits. */
static xcoll_status fold_tag(ucx_state *state, int source, uint64_t tag,
                             ucp_tag_t *out) {
  uint64_t step = tag & 0xffffffffu;
  if (step >= CONTROL_STEP_MIN)
    return xcoll_error(state->comm, XCOLL_ERR_INTERNAL,
                       "ucx backend: tag step %llu of collective seq %llu "
                       "is not below %u (%d bits, the top ones reserved for "
                       "control messages; core/algorithm.h xcoll_tag)",
                       (unsigned long long)step,
                       (unsigned long long)(tag >> 32), CONTROL_STEP_MIN,
                       STEP_BITS);
  uint64_t seq = (tag >> 32) & ((1u << SEQ_BITS) - 1);
  *out = ((ucp_tag_t)source << (SEQ_BITS + STEP_BITS)) |
         ((ucp_tag_t)seq << STEP_BITS) | (ucp_tag_t)step;
  return XCOLL_SUCCESS;
}

static xcoll_status check_peer(ucx_state *state, int peer, const char *what) {
  if (peer < 0 || peer >= state->world_size)
    return xcoll_error(state->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "ucx %s: peer %d is not a rank of this communicator "
                       "(world_size %d)",
                       what, peer, state->world_size);
  return XCOLL_SUCCESS;
}

/* isend and irecv: check the peer and the communicator, fold the tag with
 * the sending rank, deal with fingerprints (a send announces this rank's to
 * the peer; a receive first judges any that came, as the posted receive may
 * match a message already here, so that a desync is named as one rather
 * than as a truncated message), then post a request from the worker's pool
 * to UCP. */
static xcoll_status post(ucx_state *state, int is_send, int peer,
                         uint64_t tag, void *buf, size_t bytes,
                         xcoll_p2p_request **out) {
  const char *what = is_send ? "isend" : "irecv";
  *out = NULL;
  xcoll_status st = check_peer(state, peer, what);
  if (st != XCOLL_SUCCESS)
    return st;
  if (state->broken)
    return ucx_rebroken(state);
  if (state->failed_peer >= 0)
    return ucx_remote_failure(state);
  ucp_tag_t ucp_tag = 0;
  if ((st = fold_tag(state, is_send ? state->rank : peer, tag, &ucp_tag)) !=
      XCOLL_SUCCESS)
    return st;
  if (is_send) {
    ucx_track_fingerprint(state);
    if (peer != state->rank)
      ucx_send_fingerprint(state, peer);
  } else if ((st = ucx_service_control(state)) != XCOLL_SUCCESS) {
    return st;
  }
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                       "ucx %s: no memory for a request %s rank %d", what,
                       is_send ? "to" : "from", peer);
  ucs_status_t status =
      is_send ? xcoll_ucx_isend(state->worker, peer, ucp_tag, buf, bytes,
                                request)
              : xcoll_ucx_irecv(state->worker, peer, ucp_tag, FULL_TAG_MASK,
                                buf, bytes, request);
  if (status == UCS_OK) {
    *out = (xcoll_p2p_request *)request;
    return XCOLL_SUCCESS;
  }
  xcoll_ucx_request_put(state->worker, request);
  if (is_send)
    return ucx_state_fail(state, XCOLL_ERR_REMOTE, peer,
                          "rank %d (ucx endpoint error: %s): sending %zu bytes "
                          "from rank %d failed",
                          peer, ucs_status_string(status), bytes, state->rank);
  if (status == UCS_ERR_MESSAGE_TRUNCATED)
    return ucx_state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
                          "ucx: rank %d sent more than the %zu bytes rank %d "
                          "expected (collective seq %llu): the ranks disagree "
                          "on count or datatype",
                          peer, bytes, state->rank,
                          (unsigned long long)(tag >> 32));
  return ucx_state_fail(state, XCOLL_ERR_SYSTEM, state->rank,
                        "ucx irecv: posting a receive of %zu bytes from rank "
                        "%d failed: %s",
                        bytes, peer, ucs_status_string(status));
}

xcoll_status ucx_isend(void *opaque, int peer, uint64_t tag, const void *buf,
                       size_t bytes, xcoll_p2p_request **out) {
  /* Only read; sends and receives share the request type. */
  return post(opaque, 1, peer, tag, (void *)(uintptr_t)buf, bytes, out);
}

xcoll_status ucx_irecv(void *opaque, int peer, uint64_t tag, void *buf,
                       size_t bytes, xcoll_p2p_request **out) {
  return post(opaque, 0, peer, tag, buf, bytes, out);
}

/* The verdict on a completed request. */
static xcoll_status check_completed(ucx_state *state,
                                    const xcoll_ucx_request *request) {
  unsigned long long seq =
      (request->tag >> STEP_BITS) & ((1u << SEQ_BITS) - 1);
  unsigned long long step = request->tag & ((1u << STEP_BITS) - 1);
  if (request->status == UCS_ERR_MESSAGE_TRUNCATED)
    return ucx_state_fail(
        state, XCOLL_ERR_PROTOCOL, state->rank,
        "rank %d sent more than the %zu bytes rank %d expected "
        "(collective seq %llu, step %llu): the ranks disagree "
        "on count or datatype",
        request->peer, request->bytes, state->rank, seq, step);
  if (request->status == UCS_ERR_CANCELED && atomic_load(&state->aborted))
    return ucx_state_fail(state, XCOLL_ERR_ABORTED, state->rank,
                          "ucx: communicator aborted (rank %d)", state->rank);
  if (request->status != UCS_OK)
    return ucx_state_fail(
        state, XCOLL_ERR_REMOTE, request->peer,
        "rank %d (ucx endpoint error: %s): %s of %zu bytes at "
        "rank %d failed (collective seq %llu, step %llu)",
        request->peer, ucs_status_string(request->status),
        request->is_recv ? "receive" : "send", request->bytes, state->rank, seq,
        step);
  if (request->is_recv && request->received != request->bytes)
    return ucx_state_fail(
        state, XCOLL_ERR_PROTOCOL, state->rank,
        "rank %d sent %zu bytes where rank %d expected %zu "
        "(collective seq %llu, step %llu): the ranks disagree "
        "on count or datatype",
        request->peer, request->received, state->rank, request->bytes, seq,
        step);
  return XCOLL_SUCCESS;
}

/* "from rank 3, to rank 1": the peers of the requests still pending. */
static void describe_pending(xcoll_p2p_request **requests, int count,
                             char *pending, size_t bytes) {
  size_t used = 0;
  pending[0] = '\0';
  for (int i = 0; i < count && used + 24 < bytes; i++) {
    const xcoll_ucx_request *request = (const xcoll_ucx_request *)requests[i];
    if (request == NULL || request->done)
      continue;
    int n = snprintf(pending + used, bytes - used, "%s%s rank %d",
                     used == 0 ? "" : ", ", request->is_recv ? "from" : "to",
                     request->peer);
    if (n > 0)
      used += (size_t)n;
  }
}

/* A pending request whose peer said goodbye (it destroyed its
 * communicator) can never complete: the first such peer, or -1. A request
 * matched just before the goodbye may still be finishing, so the caller
 * gives it ABORT_GRACE_S. */
static int departed_peer(const ucx_state *state, xcoll_p2p_request **requests,
                         int count) {
  for (int i = 0; i < count; i++) {
    const xcoll_ucx_request *request = (const xcoll_ucx_request *)requests[i];
    if (request == NULL || request->done || request->peer == state->rank)
      continue;
    const peer_watch *watch = &state->peers[request->peer];
    if (watch->departed ||
        (watch->goodbye != NULL && watch->goodbye->done &&
         watch->goodbye->status == UCS_OK))
      return request->peer;
  }
  return -1;
}

/* XCOLL_TIMEOUT_S passed without a completion. The peer to blame is one we
 * wait on that did not answer the liveness probe; if all answered, they are
 * stuck on someone else, and the rank that waits on the stopped one sends
 * the abort: wait a little longer (up to lead_s) for it. Returns
 * XCOLL_SUCCESS to keep waiting. */
static xcoll_status timeout_failure(ucx_state *state,
                                    xcoll_p2p_request **requests, int count,
                                    double stalled_s, double lead_s) {
  char pending[256];
  describe_pending(requests, count, pending, sizeof pending);
  int silent = ucx_silent_peer(state);
  if (silent >= 0)
    return ucx_state_fail(
        state, XCOLL_ERR_TIMEOUT, silent,
        "ucx: rank %d stopped making progress: rank %d waited "
        "%.1f s (XCOLL_TIMEOUT_S) on messages %s, and rank %d "
        "did not answer a liveness probe within %.1f s (stopped, "
        "stuck outside xcoll, or its network is gone); raise "
        "XCOLL_TIMEOUT_S if it is only slow",
        silent, state->rank, state->timeout_s, pending, silent, lead_s);
  if (stalled_s < state->timeout_s + lead_s)
    return XCOLL_SUCCESS;
  return ucx_state_fail(state, XCOLL_ERR_TIMEOUT, state->rank,
                        "ucx: rank %d made no progress for %.1f s waiting on "
                        "messages %s; the ranks it waits on are alive but wait "
                        "themselves (raise XCOLL_TIMEOUT_S if expected)",
                        state->rank, state->timeout_s, pending);
}

xcoll_status ucx_wait(void *opaque, xcoll_p2p_request **requests, int count) {
  ucx_state *state = opaque;
  xcoll_status result = XCOLL_SUCCESS;
  double last_progress = now_s();
  double spin_until = last_progress + state->spin_s;
  double lead_s = state->timeout_s / 4 < PROBE_LEAD_S ? state->timeout_s / 4
                                                      : PROBE_LEAD_S;
  int probing = 0;
  double departed_since = 0; /* when a peer we wait on said goodbye */
  /* On a broken communicator (a cleanup wait after a failure) release the
   * requests at once: no second timeout, no second log line. */
  if (state->broken) {
    result = ucx_rebroken(state);
    goto release;
  }
  ucx_clear_probes(state);
  for (;;) {
    if (atomic_load(&state->aborted)) {
      result =
          ucx_state_fail(state, XCOLL_ERR_ABORTED, state->rank,
                         "ucx: xcoll_comm_abort was called on rank %d while "
                         "it waited",
                         state->rank);
      break;
    }
    unsigned events = xcoll_ucx_progress(state->worker);
    /* Aborts and fingerprints first: a completed receive is handed out only
     * after its sender's fingerprint (sent before it) was judged. */
    if ((result = ucx_service_control(state)) != XCOLL_SUCCESS)
      break;
    /* UCX reports internal activity (keepalive, wireup) as progress too, so
     * only a completed request counts as progress for the timeout. */
    int completed = 0;
    int pending = 0;
    for (int i = 0; i < count; i++) {
      xcoll_ucx_request *request = (xcoll_ucx_request *)requests[i];
      if (request == NULL)
        continue;
      if (!request->done) {
        pending++;
        continue;
      }
      result = check_completed(state, request);
      xcoll_ucx_request_put(state->worker, request);
      requests[i] = NULL;
      events++;
      completed++;
      if (result != XCOLL_SUCCESS)
        break;
    }
    if (result != XCOLL_SUCCESS)
      break;
    double t = now_s();
    ucx_check_peers(state, t);
    if (state->failed_peer >= 0) {
      result = ucx_remote_failure(state);
      break;
    }
    if (pending == 0)
      return XCOLL_SUCCESS;
    if (completed > 0) {
      last_progress = t;
      departed_since = 0;
      if (probing)
        ucx_clear_probes(state);
      probing = 0;
    }
    int gone = departed_peer(state, requests, count);
    if (gone >= 0 && departed_since == 0)
      departed_since = t;
    if (gone >= 0 && t - departed_since > ABORT_GRACE_S) {
      char what[256];
      describe_pending(requests, count, what, sizeof what);
      result = ucx_state_fail(state, XCOLL_ERR_REMOTE, gone,
                              "ucx: rank %d left (destroyed its communicator) "
                              "while rank %d waited on messages %s: the ranks "
                              "made different numbers of calls, or it finished "
                              "early",
                              gone, state->rank, what);
      break;
    }
    double stalled = t - last_progress;
    if (!probing && stalled > state->timeout_s - lead_s) {
      ucx_send_probes(state, requests, count);
      probing = 1;
    }
    if (stalled > state->timeout_s) {
      result = timeout_failure(state, requests, count, stalled, lead_s);
      if (result != XCOLL_SUCCESS)
        break;
    }
    if (events > 0) {
      spin_until = t + state->spin_s;
    } else if (t > spin_until) {
      xcoll_ucx_wait_event(state->worker, WAKE_INTERVAL_MS);
    } else {
      /* Ranks often outnumber cores: let the peer we wait for run. */
      sched_yield();
    }
  }
release:
  for (int i = 0; i < count; i++) {
    xcoll_ucx_request_put(state->worker, (xcoll_ucx_request *)requests[i]);
    requests[i] = NULL;
  }
  return result;
}

xcoll_status ucx_test(void *opaque, xcoll_p2p_request *opaque_request,
                      int *done) {
  ucx_state *state = opaque;
  xcoll_ucx_request *request = (xcoll_ucx_request *)opaque_request;
  *done = 0;
  xcoll_status result = XCOLL_SUCCESS;
  if (state->broken) {
    result = ucx_rebroken(state);
  } else if (atomic_load(&state->aborted)) {
    result = ucx_state_fail(state, XCOLL_ERR_ABORTED, state->rank,
                            "ucx: communicator aborted (rank %d)", state->rank);
  } else {
    xcoll_ucx_progress(state->worker);
    result = ucx_service_control(state);
    if (result == XCOLL_SUCCESS) {
      ucx_check_peers(state, now_s());
      if (request == NULL || request->done) {
        result =
            request == NULL ? XCOLL_SUCCESS : check_completed(state, request);
        xcoll_ucx_request_put(state->worker, request);
        *done = 1;
        return result;
      }
      if (state->failed_peer >= 0)
        result = ucx_remote_failure(state);
    }
  }
  if (result != XCOLL_SUCCESS) {
    xcoll_ucx_request_put(state->worker, request);
    *done = 1;
  }
  return result;
}
