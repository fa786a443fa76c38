/* ucx_failure.c - how the "ucx" backend sees and reports failures: UCX's
 * endpoint errors and the liveness of same-host peers, the first failure
 * that breaks the communicator (logged once, sent to every peer as an
 * abort), and the control messages on the top tag steps: aborts,
 * fingerprints of each collective (core/fingerprint.h) and the liveness
 * probes that name the peer that stopped. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET /* log.h */
#include "ucx_backend.h"

/* UCX calls this during progress; judged in ucx_check_peers, because a peer
 * that closed after its goodbye also looks like an endpoint error. */
void ucx_on_peer_error(void *arg, int peer, ucs_status_t status) {
  ucx_state *state = arg;
  if (!state->peers[peer].suspect) {
    state->peers[peer].suspect = 1;
    state->peers[peer].suspect_status = status;
  }
}

static void mark_failed(ucx_state *state, int peer, ucs_status_t status,
                        const char *reason) {
  if (state->failed_peer < 0) {
    state->failed_peer = peer;
    state->failed_status = status;
    state->failed_reason = reason;
  }
}

/* Did peer's goodbye arrive? Progress once more first: it was sent before
 * the peer closed, so it is at most one progress call behind. */
static int peer_said_goodbye(ucx_state *state, int peer) {
  peer_watch *watch = &state->peers[peer];
  if (watch->goodbye == NULL)
    return 0;
  if (!watch->goodbye->done)
    xcoll_ucx_progress(state->worker);
  return watch->goodbye->done && watch->goodbye->status == UCS_OK;
}

/* Judge endpoint errors, and every LIVENESS_INTERVAL_S look whether the
 * same-host peer processes still exist (pidfd becomes readable at exit). */
void ucx_check_peers(ucx_state *state, double now) {
  int look = now >= state->next_liveness_check;
  if (look)
    state->next_liveness_check = now + LIVENESS_INTERVAL_S;
  for (int peer = 0; peer < state->world_size; peer++) {
    peer_watch *watch = &state->peers[peer];
    if (watch->departed || peer == state->rank)
      continue;
    int gone = 0;
    ucs_status_t status = UCS_ERR_CONNECTION_RESET;
    const char *reason = NULL;
    if (watch->suspect) {
      gone = 1;
      status = watch->suspect_status;
      reason = "reported by UCX";
    } else if (look && watch->pidfd >= 0) {
      struct pollfd pfd = {.fd = watch->pidfd, .events = POLLIN};
      if (poll(&pfd, 1, 0) > 0) {
        gone = 1;
        reason = "its process on this host exited";
      }
    }
    if (!gone)
      continue;
    if (peer_said_goodbye(state, peer)) {
      watch->departed = 1;
      continue;
    }
    mark_failed(state, peer, status, reason);
  }
}

/* ---- failures: once, logged once, told to every peer ---- */

static ucp_tag_t control_tag(int source, uint64_t seq, unsigned step) {
  return ((ucp_tag_t)source << (SEQ_BITS + STEP_BITS)) |
         ((ucp_tag_t)(seq & ((1u << SEQ_BITS) - 1)) << STEP_BITS) |
         (ucp_tag_t)step;
}

/* Send a small control message and let UCX finish it: buf must live as long
 * as the worker (static, or in state). */
static void send_control(ucx_state *state, int peer, uint64_t seq,
                         unsigned step, const void *buf, size_t bytes) {
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return;
  (void)xcoll_ucx_isend(state->worker, peer, control_tag(state->rank, seq, step),
                        buf, bytes, request);
  /* Released at once: UCX completes a pending send on its own. */
  xcoll_ucx_request_put(state->worker, request);
}

/* Post the receive of peer's next control message of one kind, any seq. */
xcoll_ucx_request *ucx_post_control_receive(ucx_state *state, int peer,
                                            unsigned step, void *buf,
                                            size_t bytes) {
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return NULL;
  if (xcoll_ucx_irecv(state->worker, peer, control_tag(peer, 0, step),
                      ANY_SEQ_MASK, buf, bytes, request) != UCS_OK) {
    xcoll_ucx_request_put(state->worker, request);
    return NULL;
  }
  return request;
}

/* Tell every other rank that this one gave up (what tcp's ABORT does):
 * status and origin (the rank the failure started at), then the reason. */
static void send_aborts(ucx_state *state, xcoll_status status, int origin) {
  size_t len = strlen(state->broken_message);
  if (len > ABORT_TEXT_BYTES)
    len = ABORT_TEXT_BYTES;
  (void)status;
  uint32_t told = state->broken_by_desync ? (uint32_t)XCOLL_ERR_PROTOCOL
                                          : (uint32_t)XCOLL_ERR_REMOTE;
  uint32_t fields[2] = {told, (uint32_t)origin};
  for (int i = 0; i < 2; i++)
    for (int b = 0; b < 4; b++)
      state->abort_out[4 * i + b] = (uint8_t)(fields[i] >> (8 * b));
  memcpy(state->abort_out + ABORT_HEADER_BYTES, state->broken_message, len);
  for (int peer = 0; peer < state->world_size; peer++)
    if (peer != state->rank && !state->peers[peer].departed &&
        peer != state->failed_peer)
      send_control(state, peer, GOODBYE_SEQ, ABORT_STEP, state->abort_out,
                   ABORT_HEADER_BYTES + len);
}

/* Break the communicator (first failure wins): record and log the message
 * once, send the abort to the peers. Returns status (or the earlier one). A
 * peer failure (REMOTE) first gives the peers' aborts ABORT_GRACE_S to
 * arrive: one that does is the failure reported. */
xcoll_status ucx_state_fail(ucx_state *state, xcoll_status status, int origin,
                            const char *fmt, ...) {
  if (state->broken)
    return state->broken;
  if (status == XCOLL_ERR_REMOTE && !state->in_grace) {
    state->in_grace = 1;
    double until = now_s() + ABORT_GRACE_S;
    xcoll_status explained = XCOLL_SUCCESS;
    while (explained == XCOLL_SUCCESS && now_s() < until) {
      xcoll_ucx_progress(state->worker);
      explained = ucx_service_control(state);
      if (explained == XCOLL_SUCCESS)
        sched_yield();
    }
    state->in_grace = 0;
    if (explained != XCOLL_SUCCESS)
      return explained;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(state->broken_message, sizeof state->broken_message, fmt, ap);
  va_end(ap);
  state->broken = status;
  xcoll_error(state->comm, status, "%s", state->broken_message);
  send_aborts(state, status, origin);
  return status;
}

/* A call on a broken communicator: its status again. The message is logged
 * only if this thread does not hold it already (the first failure logged). */
xcoll_status ucx_rebroken(ucx_state *state) {
  if (strcmp(xcoll_last_error(), state->broken_message) != 0)
    return xcoll_error(state->comm, state->broken, "%s", state->broken_message);
  return state->broken;
}

xcoll_status ucx_remote_failure(ucx_state *state) {
  return ucx_state_fail(
      state, XCOLL_ERR_REMOTE, state->failed_peer,
      "rank %d (ucx endpoint error: %s; %s) failed as seen by "
      "rank %d: the process died, aborted or lost its network; "
      "check its log",
      state->failed_peer, ucs_status_string(state->failed_status),
      state->failed_reason, state->rank);
}

/* An abort from peer: fail naming the rank where it started. */
static xcoll_status on_abort(ucx_state *state, int peer,
                             const xcoll_ucx_request *request) {
  const uint8_t *in = state->peers[peer].abort_in;
  char text[ABORT_TEXT_BYTES + 1] = "";
  uint32_t fields[2] = {0, 0};
  size_t got = request->received;
  if (got >= ABORT_HEADER_BYTES) {
    for (int i = 0; i < 2; i++)
      for (int b = 3; b >= 0; b--)
        fields[i] = (fields[i] << 8) | in[4 * i + b];
    size_t len = got - ABORT_HEADER_BYTES;
    if (len > ABORT_TEXT_BYTES)
      len = ABORT_TEXT_BYTES;
    memcpy(text, in + ABORT_HEADER_BYTES, len);
    text[len] = '\0';
  }
  int origin = fields[1] < (uint32_t)state->world_size ? (int)fields[1] : peer;
  xcoll_status status = fields[0] == (uint32_t)XCOLL_ERR_PROTOCOL
                            ? XCOLL_ERR_PROTOCOL
                            : XCOLL_ERR_REMOTE;
  if (status == XCOLL_ERR_PROTOCOL && !state->broken)
    state->broken_by_desync = 1;
  const char *reason = strstr(text, "ucx: ") == text ? text + 5 : text;
  if (origin == peer)
    return ucx_state_fail(state, status, origin, "ucx: rank %d aborted: %s",
                          peer, reason);
  return ucx_state_fail(state, status, origin,
                        "ucx: rank %d failed (reported by rank %d): %s", origin,
                        peer, reason);
}

/* ---- fingerprints ---- */

void ucx_track_fingerprint(ucx_state *state) {
  const xcoll_fingerprint *now = &state->comm->fingerprint;
  if (now->valid &&
      (!state->fp_current.valid || now->seq != state->fp_current.seq ||
                      now->kind != state->fp_current.kind)) {
    state->fp_previous = state->fp_current;
    state->fp_current = *now;
  }
}

/* Before the first message of a collective to peer: our fingerprint. */
void ucx_send_fingerprint(ucx_state *state, int peer) {
  peer_watch *watch = &state->peers[peer];
  if (!state->fp_current.valid ||
      (watch->fp_sent_any && watch->fp_sent_seq == state->fp_current.seq &&
       watch->fp_sent_kind == state->fp_current.kind))
    return;
  int slot = watch->fp_next_slot;
  watch->fp_next_slot = (slot + 1) % FP_SLOTS;
  /* The slot's buffer may still be read by an unfinished send. */
  xcoll_ucx_request *old = watch->fp_send[slot];
  double give_up = now_s() + 0.5;
  while (old != NULL && !old->done && now_s() < give_up)
    xcoll_ucx_progress(state->worker);
  xcoll_ucx_request_put(state->worker, old);
  watch->fp_send[slot] = NULL;
  xcoll_fingerprint_encode(&state->fp_current, watch->fp_out[slot]);
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return;
  ucs_status_t status = xcoll_ucx_isend(
      state->worker, peer,
      control_tag(state->rank, state->fp_current.seq, FINGERPRINT_STEP),
      watch->fp_out[slot], XCOLL_FINGERPRINT_BYTES, request);
  if (status != UCS_OK || request->done)
    xcoll_ucx_request_put(state->worker, request);
  else
    watch->fp_send[slot] = request;
  watch->fp_sent_any = 1;
  watch->fp_sent_seq = state->fp_current.seq;
  watch->fp_sent_kind = state->fp_current.kind;
}

/* Judge the fingerprints that arrived: a mismatch breaks the communicator
 * with a message naming both calls. */
static xcoll_status check_fingerprints(ucx_state *state) {
  ucx_track_fingerprint(state);
  for (int peer = 0; peer < state->world_size; peer++) {
    peer_watch *watch = &state->peers[peer];
    xcoll_ucx_request *request = watch->fp_receive;
    if (!watch->fp_held && request != NULL && request->done) {
      ucs_status_t status = request->status;
      size_t received = request->received;
      xcoll_ucx_request_put(state->worker, request);
      watch->fp_receive = NULL;
      if (status != UCS_OK)
        continue; /* cancelled or the peer failed: judged elsewhere */
      if (received != XCOLL_FINGERPRINT_BYTES ||
          xcoll_fingerprint_decode(watch->fp_in, &watch->fp_held_value) != 0)
        return ucx_state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
                              "ucx: rank %d got a malformed collective "
                              "fingerprint from rank %d",
                              state->rank, peer);
      watch->fp_held = 1;
    }
    if (!watch->fp_held)
      continue;
    const xcoll_fingerprint *ours = NULL;
    xcoll_fingerprint_verdict verdict =
        xcoll_fingerprint_judge(&state->fp_current, &state->fp_previous,
                                &watch->fp_held_value, 0, &ours);
    if (verdict == XCOLL_FINGERPRINT_AHEAD)
      continue; /* the peer is ahead: judge it once we get there */
    if (verdict == XCOLL_FINGERPRINT_MISMATCH) {
      char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
      xcoll_fingerprint_mismatch(state->rank, ours, peer,
                                 &watch->fp_held_value, sentence,
                                 sizeof sentence);
      if (!state->broken)
        state->broken_by_desync = 1;
      return ucx_state_fail(
          state, XCOLL_ERR_PROTOCOL, state->rank,
          "ucx: collective mismatch: %s (found by rank %d in a "
          "message from rank %d): every rank must call the same "
          "collectives in the same order with the same count, "
          "dtype, op and root",
          sentence, state->rank, peer);
    }
    watch->fp_held = 0;
    watch->fp_receive = ucx_post_control_receive(
        state, peer, FINGERPRINT_STEP, watch->fp_in, XCOLL_FINGERPRINT_BYTES);
    if (watch->fp_receive == NULL)
      return ucx_state_fail(
          state, XCOLL_ERR_NO_MEMORY, state->rank,
          "ucx: rank %d could not post a receive for rank %d's "
          "fingerprints",
          state->rank, peer);
  }
  return XCOLL_SUCCESS;
}

/* Aborts, liveness probes and fingerprints that arrived since last time. */
xcoll_status ucx_service_control(ucx_state *state) {
  static const char probe = 0;
  for (int peer = 0; peer < state->world_size; peer++) {
    peer_watch *watch = &state->peers[peer];
    if (watch->abort_receive != NULL && watch->abort_receive->done) {
      xcoll_ucx_request *request = watch->abort_receive;
      watch->abort_receive = NULL;
      xcoll_status result = XCOLL_SUCCESS;
      if (request->status == UCS_OK)
        result = on_abort(state, peer, request);
      xcoll_ucx_request_put(state->worker, request);
      if (result != XCOLL_SUCCESS)
        return result;
    }
    if (watch->ping_receive != NULL && watch->ping_receive->done) {
      int ok = watch->ping_receive->status == UCS_OK;
      xcoll_ucx_request_put(state->worker, watch->ping_receive);
      watch->ping_receive = NULL;
      if (ok) {
        send_control(state, peer, GOODBYE_SEQ, PONG_STEP, &probe, 1);
        static char sink[1];
        watch->ping_receive =
            ucx_post_control_receive(state, peer, PING_STEP, sink, 1);
      }
    }
    if (watch->pong_receive != NULL && watch->pong_receive->done) {
      int ok = watch->pong_receive->status == UCS_OK;
      xcoll_ucx_request_put(state->worker, watch->pong_receive);
      watch->pong_receive = NULL;
      if (ok) {
        watch->answered = 1;
        static char sink[1];
        watch->pong_receive =
            ucx_post_control_receive(state, peer, PONG_STEP, sink, 1);
      }
    }
  }
  return check_fingerprints(state);
}

/* Ask each peer that a pending request waits on whether it is still making
 * progress (it answers from its own wait loop). */
void ucx_send_probes(ucx_state *state, xcoll_p2p_request **requests,
                     int count) {
  static const char probe = 0;
  for (int i = 0; i < count; i++) {
    const xcoll_ucx_request *request = (const xcoll_ucx_request *)requests[i];
    if (request == NULL || request->done)
      continue;
    peer_watch *watch = &state->peers[request->peer];
    if (watch->probed || request->peer == state->rank)
      continue;
    watch->probed = 1;
    watch->answered = 0;
    send_control(state, request->peer, GOODBYE_SEQ, PING_STEP, &probe, 1);
  }
}

void ucx_clear_probes(ucx_state *state) {
  for (int peer = 0; peer < state->world_size; peer++)
    state->peers[peer].probed = state->peers[peer].answered = 0;
}

/* The first peer probed in this stall that did not answer, or -1. */
int ucx_silent_peer(const ucx_state *state) {
  for (int peer = 0; peer < state->world_size; peer++)
    if (state->peers[peer].probed && !state->peers[peer].answered)
      return peer;
  return -1;
}
