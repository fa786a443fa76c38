/* ucx_backend.c - the "ucx" backend: core's p2p interface (core/p2p.h) over
 * UCP tagged messages, so that every host-driven algorithm in core/algorithms
 * runs on UCX unchanged. UCX picks the transport per peer (shared memory on
 * one host, tcp or rdma across hosts); see docs/ucx.md. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET /* log.h */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "env.h"
#include "params.h"
#include "fingerprint.h"
#include "error.h"
#include "log.h"
#include "ucx_wrap.h"

/* The UCP tag: source rank (16 bits) | collective seq mod 2^24 (24 bits) |
 * step (24 bits). UCP matches on the tag alone, so the source must be in it;
 * each communicator has its own worker, so no communicator id is needed. */
#define SOURCE_BITS 16
#define SEQ_BITS 24
#define STEP_BITS 24
#define MAX_WORLD_SIZE (1 << SOURCE_BITS)
#define FULL_TAG_MASK ((ucp_tag_t)-1)

/* How often a blocked wait wakes up to look at abort and timeouts, ms. */
#define WAKE_INTERVAL_MS 50
/* Endpoints get this long to flush at destroy, seconds. */
#define CLOSE_FLUSH_S 1.0
/* UCX keepalive interval we ask for (the user's UCX_KEEPALIVE_INTERVAL wins):
 * short enough that a peer killed on a transport without a kernel-reset
 * connection (shared memory) is noticed within seconds. */
#define KEEPALIVE_INTERVAL "1s"
/* How often a wait looks whether same-host peer processes are alive, s. */
#define LIVENESS_INTERVAL_S 0.02
/* The step reserved for the goodbye message a rank sends at destroy: a peer
 * process that exits after saying goodbye left cleanly; one that exits
 * without it died. */
#define GOODBYE_STEP ((1u << STEP_BITS) - 1)
#define GOODBYE_SEQ ((1u << SEQ_BITS) - 1)
/* Control messages take the top steps; a collective's steps stay below
 * CONTROL_STEP_MIN (fold_tag refuses the rest). Each is matched by a receive
 * per peer that ignores the seq bits, so that it is seen whatever collective
 * the two ranks are in:
 *   FINGERPRINT_STEP (seq: the collective's) the sender's collective
 *                    (core/fingerprint.h), before its first message of each
 *                    collective to that peer
 *   ABORT_STEP       the sender gave up: status, origin rank, reason text
 *   PING_STEP/PONG_STEP  a liveness probe and its answer: a rank about to
 *                    time out asks the peers it waits on whether they still
 *                    make progress, to blame the one that stopped */
#define CONTROL_STEP_MIN ((1u << STEP_BITS) - 8)
#define FINGERPRINT_STEP ((1u << STEP_BITS) - 2)
#define ABORT_STEP ((1u << STEP_BITS) - 3)
#define PING_STEP ((1u << STEP_BITS) - 4)
#define PONG_STEP ((1u << STEP_BITS) - 5)
#define ANY_SEQ_MASK                                                           \
  (~(((ucp_tag_t)(1u << SEQ_BITS) - 1) << STEP_BITS))
/* Longest reason an abort message carries, bytes (after 8 bytes of status
 * and origin). */
#define ABORT_TEXT_BYTES 1024
#define ABORT_HEADER_BYTES 8
/* fingerprint messages in flight per peer before a slot is reused */
#define FP_SLOTS 4
/* The liveness probe goes out this long before the timeout, seconds (at most
 * a quarter of XCOLL_TIMEOUT_S). */
#define PROBE_LEAD_S 1.0
/* UCX_TLS when every rank runs on this host (the user's UCX_TLS wins). */
#define LOCAL_TLS "sm,self"
#define HELLO_MAGIC 0x78756378u /* "xucx" */
#define HOST_ID_BYTES XCOLL_UCX_HOST_ID_BYTES

/* What each rank publishes in the store: who and where it is, then its UCP
 * worker address. */
typedef struct hello {
  uint32_t magic;
  int32_t pid;
  uint32_t address_bytes;
  char host_id[HOST_ID_BYTES]; /* host name and pid namespace */
} hello;

typedef struct peer_watch {
  int same_host;       /* connected without UCX peer failure handling */
  int pidfd;           /* same-host peers: readable once the process exits */
  int departed;        /* said goodbye and left: not a failure */
  int suspect;         /* UCX reported an endpoint error, not yet judged */
  ucs_status_t suspect_status;
  xcoll_ucx_request *goodbye; /* the posted receive of its goodbye */
  /* Fingerprints: the posted receive of the peer's next one (NULL while one
   * from a later collective is held), what it received, and what we sent. */
  xcoll_ucx_request *fp_receive;
  uint8_t fp_in[XCOLL_FINGERPRINT_BYTES];
  int fp_held;
  xcoll_fingerprint fp_held_value;
  int fp_sent_any;
  uint64_t fp_sent_seq;
  uint8_t fp_sent_kind; /* a group and a collective may share a seq */
  uint8_t fp_out[FP_SLOTS][XCOLL_FINGERPRINT_BYTES];
  xcoll_ucx_request *fp_send[FP_SLOTS];
  int fp_next_slot;
  /* Abort and liveness messages from the peer. */
  xcoll_ucx_request *abort_receive;
  uint8_t abort_in[ABORT_HEADER_BYTES + ABORT_TEXT_BYTES];
  xcoll_ucx_request *ping_receive;
  xcoll_ucx_request *pong_receive;
  int probed;   /* a ping went out in this stall */
  int answered; /* its pong came back */
} peer_watch;

typedef struct ucx_state {
  xcoll_comm *comm;
  xcoll_ucx_worker *worker;
  int rank;
  int world_size;
  double timeout_s;
  double spin_s; /* XCOLL_UCX_SPIN_US: busy-poll this long before sleeping */
  _Atomic int aborted;
  /* First peer whose endpoint failed (-1: none), set by UCX's error callback
   * during progress, on the thread that drives the communicator. */
  int failed_peer;
  ucs_status_t failed_status;
  const char *failed_reason; /* a few words on how the failure was seen */
  peer_watch *peers;         /* world_size entries */
  double next_liveness_check;
  int goodbye_sent;
  /* The first failure breaks the communicator: later waits end at once with
   * this status, and the failure is logged and sent to the peers once. */
  xcoll_status broken;
  char broken_message[XCOLL_ERROR_BYTES];
  uint8_t abort_out[ABORT_HEADER_BYTES + ABORT_TEXT_BYTES];
  /* This rank's collective now and the one before (judging fingerprints). */
  xcoll_fingerprint fp_current;
  xcoll_fingerprint fp_previous;
  int in_grace; /* state_fail is looking for a peer's abort */
  /* Broken on a collective mismatch: the abort tells peers
   * XCOLL_ERR_PROTOCOL (other failures reach them as XCOLL_ERR_REMOTE). */
  int broken_by_desync;
} ucx_state;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* UCX calls this during progress; judged in check_peers, because a peer
 * that closed after its goodbye also looks like an endpoint error. */
static void on_peer_error(void *arg, int peer, ucs_status_t status) {
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
static void check_peers(ucx_state *state, double now) {
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
static xcoll_ucx_request *post_control_receive(ucx_state *state, int peer,
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

static xcoll_status service_control(ucx_state *state);

/* How long a rank that sees a peer fail looks for that peer's abort message,
 * seconds: a peer that found a desync or a timeout sends its abort and may
 * exit at once, and its exit must not hide the reason it gave. */
#define ABORT_GRACE_S 0.2

/* Break the communicator (first failure wins): record and log the message
 * once, send the abort to the peers. Returns status (or the earlier one). A
 * peer failure (REMOTE) first gives the peers' aborts ABORT_GRACE_S to
 * arrive: one that does is the failure reported. */
static xcoll_status state_fail(ucx_state *state, xcoll_status status,
                               int origin, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static xcoll_status state_fail(ucx_state *state, xcoll_status status,
                               int origin, const char *fmt, ...) {
  if (state->broken)
    return state->broken;
  if (status == XCOLL_ERR_REMOTE && !state->in_grace) {
    state->in_grace = 1;
    double until = now_s() + ABORT_GRACE_S;
    xcoll_status explained = XCOLL_SUCCESS;
    while (explained == XCOLL_SUCCESS && now_s() < until) {
      xcoll_ucx_progress(state->worker);
      explained = service_control(state);
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
static xcoll_status rebroken(ucx_state *state) {
  if (strcmp(xcoll_last_error(), state->broken_message) != 0)
    return xcoll_error(state->comm, state->broken, "%s", state->broken_message);
  return state->broken;
}

static xcoll_status remote_failure(ucx_state *state) {
  return state_fail(state, XCOLL_ERR_REMOTE, state->failed_peer,
                    "rank %d (ucx endpoint error: %s; %s) failed as seen by "
                    "rank %d: the process died, aborted or lost its network; "
                    "check its log",
                    state->failed_peer,
                    ucs_status_string(state->failed_status),
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
    return state_fail(state, status, origin, "ucx: rank %d aborted: %s", peer,
                      reason);
  return state_fail(state, status, origin,
                    "ucx: rank %d failed (reported by rank %d): %s", origin,
                    peer, reason);
}

/* ---- fingerprints ---- */

static void track_fingerprint(ucx_state *state) {
  const xcoll_fingerprint *now = &state->comm->fingerprint;
  if (now->valid &&
      (!state->fp_current.valid || now->seq != state->fp_current.seq ||
                      now->kind != state->fp_current.kind)) {
    state->fp_previous = state->fp_current;
    state->fp_current = *now;
  }
}

/* Before the first message of a collective to peer: our fingerprint. */
static void send_fingerprint(ucx_state *state, int peer) {
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
  track_fingerprint(state);
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
        return state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
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
      return state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
                        "ucx: collective mismatch: %s (found by rank %d in a "
                        "message from rank %d): every rank must call the same "
                        "collectives in the same order with the same count, "
                        "dtype, op and root",
                        sentence, state->rank, peer);
    }
    watch->fp_held = 0;
    watch->fp_receive = post_control_receive(
        state, peer, FINGERPRINT_STEP, watch->fp_in, XCOLL_FINGERPRINT_BYTES);
    if (watch->fp_receive == NULL)
      return state_fail(state, XCOLL_ERR_NO_MEMORY, state->rank,
                        "ucx: rank %d could not post a receive for rank %d's "
                        "fingerprints",
                        state->rank, peer);
  }
  return XCOLL_SUCCESS;
}

/* Aborts, liveness probes and fingerprints that arrived since last time. */
static xcoll_status service_control(ucx_state *state) {
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
            post_control_receive(state, peer, PING_STEP, sink, 1);
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
            post_control_receive(state, peer, PONG_STEP, sink, 1);
      }
    }
  }
  return check_fingerprints(state);
}

/* Ask each peer that a pending request waits on whether it is still making
 * progress (it answers from its own wait loop). */
static void send_probes(ucx_state *state, xcoll_p2p_request **requests,
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

static void clear_probes(ucx_state *state) {
  for (int peer = 0; peer < state->world_size; peer++)
    state->peers[peer].probed = state->peers[peer].answered = 0;
}

/* The first peer probed in this stall that did not answer, or -1. */
static int silent_peer(const ucx_state *state) {
  for (int peer = 0; peer < state->world_size; peer++)
    if (state->peers[peer].probed && !state->peers[peer].answered)
      return peer;
  return -1;
}

static xcoll_status ucx_isend(void *opaque, int peer, uint64_t tag,
                              const void *buf, size_t bytes,
                              xcoll_p2p_request **out) {
  ucx_state *state = opaque;
  *out = NULL;
  xcoll_status st = check_peer(state, peer, "isend");
  if (st != XCOLL_SUCCESS)
    return st;
  if (state->broken)
    return rebroken(state);
  if (state->failed_peer >= 0)
    return remote_failure(state);
  ucp_tag_t ucp_tag = 0;
  if ((st = fold_tag(state, state->rank, tag, &ucp_tag)) != XCOLL_SUCCESS)
    return st;
  track_fingerprint(state);
  if (peer != state->rank)
    send_fingerprint(state, peer);
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                       "ucx isend: no memory for a request to rank %d", peer);
  ucs_status_t status =
      xcoll_ucx_isend(state->worker, peer, ucp_tag, buf, bytes, request);
  if (status != UCS_OK) {
    xcoll_ucx_request_put(state->worker, request);
    return state_fail(state, XCOLL_ERR_REMOTE, peer,
                      "rank %d (ucx endpoint error: %s): sending %zu bytes "
                      "from rank %d failed",
                      peer, ucs_status_string(status), bytes, state->rank);
  }
  *out = (xcoll_p2p_request *)request;
  return XCOLL_SUCCESS;
}

static xcoll_status ucx_irecv(void *opaque, int peer, uint64_t tag, void *buf,
                              size_t bytes, xcoll_p2p_request **out) {
  ucx_state *state = opaque;
  *out = NULL;
  xcoll_status st = check_peer(state, peer, "irecv");
  if (st != XCOLL_SUCCESS)
    return st;
  if (state->broken)
    return rebroken(state);
  if (state->failed_peer >= 0)
    return remote_failure(state);
  ucp_tag_t ucp_tag = 0;
  if ((st = fold_tag(state, peer, tag, &ucp_tag)) != XCOLL_SUCCESS)
    return st;
  /* The posted receive may match a message that is already here: judge the
   * fingerprint that came before it first, so that a desync is named as
   * one rather than as a truncated message. */
  if ((st = service_control(state)) != XCOLL_SUCCESS)
    return st;
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                       "ucx irecv: no memory for a request from rank %d", peer);
  ucs_status_t status = xcoll_ucx_irecv(state->worker, peer, ucp_tag,
                                        FULL_TAG_MASK, buf, bytes, request);
  if (status != UCS_OK) {
    xcoll_ucx_request_put(state->worker, request);
    if (status == UCS_ERR_MESSAGE_TRUNCATED)
      return state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
                        "ucx: rank %d sent more than the %zu bytes rank %d "
                        "expected (collective seq %llu): the ranks disagree "
                        "on count or datatype",
                        peer, bytes, state->rank,
                        (unsigned long long)(tag >> 32));
    return state_fail(state, XCOLL_ERR_SYSTEM, state->rank,
                      "ucx irecv: posting a receive of %zu bytes from rank "
                      "%d failed: %s",
                      bytes, peer, ucs_status_string(status));
  }
  *out = (xcoll_p2p_request *)request;
  return XCOLL_SUCCESS;
}

/* The verdict on a completed request. */
static xcoll_status check_completed(ucx_state *state,
                                    const xcoll_ucx_request *request) {
  unsigned long long seq =
      (request->tag >> STEP_BITS) & ((1u << SEQ_BITS) - 1);
  unsigned long long step = request->tag & ((1u << STEP_BITS) - 1);
  if (request->status == UCS_ERR_MESSAGE_TRUNCATED)
    return state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
                       "rank %d sent more than the %zu bytes rank %d expected "
                       "(collective seq %llu, step %llu): the ranks disagree "
                       "on count or datatype",
                       request->peer, request->bytes, state->rank, seq, step);
  if (request->status == UCS_ERR_CANCELED && atomic_load(&state->aborted))
    return state_fail(state, XCOLL_ERR_ABORTED, state->rank,
                      "ucx: communicator aborted (rank %d)", state->rank);
  if (request->status != UCS_OK)
    return state_fail(state, XCOLL_ERR_REMOTE, request->peer,
                       "rank %d (ucx endpoint error: %s): %s of %zu bytes at "
                       "rank %d failed (collective seq %llu, step %llu)",
                       request->peer, ucs_status_string(request->status),
                       request->is_recv ? "receive" : "send", request->bytes,
                       state->rank, seq, step);
  if (request->is_recv && request->received != request->bytes)
    return state_fail(state, XCOLL_ERR_PROTOCOL, state->rank,
                       "rank %d sent %zu bytes where rank %d expected %zu "
                       "(collective seq %llu, step %llu): the ranks disagree "
                       "on count or datatype",
                       request->peer, request->received, state->rank,
                       request->bytes, seq, step);
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
  int silent = silent_peer(state);
  if (silent >= 0)
    return state_fail(state, XCOLL_ERR_TIMEOUT, silent,
                      "ucx: rank %d stopped making progress: rank %d waited "
                      "%.1f s (XCOLL_TIMEOUT_S) on messages %s, and rank %d "
                      "did not answer a liveness probe within %.1f s (stopped, "
                      "stuck outside xcoll, or its network is gone); raise "
                      "XCOLL_TIMEOUT_S if it is only slow",
                      silent, state->rank, state->timeout_s, pending, silent,
                      lead_s);
  if (stalled_s < state->timeout_s + lead_s)
    return XCOLL_SUCCESS;
  return state_fail(state, XCOLL_ERR_TIMEOUT, state->rank,
                    "ucx: rank %d made no progress for %.1f s waiting on "
                    "messages %s; the ranks it waits on are alive but wait "
                    "themselves (raise XCOLL_TIMEOUT_S if expected)",
                    state->rank, state->timeout_s, pending);
}

static xcoll_status ucx_wait(void *opaque, xcoll_p2p_request **requests,
                             int count) {
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
    result = rebroken(state);
    goto release;
  }
  clear_probes(state);
  for (;;) {
    if (atomic_load(&state->aborted)) {
      result = state_fail(state, XCOLL_ERR_ABORTED, state->rank,
                          "ucx: xcoll_comm_abort was called on rank %d while "
                          "it waited",
                          state->rank);
      break;
    }
    unsigned events = xcoll_ucx_progress(state->worker);
    /* Aborts and fingerprints first: a completed receive is handed out only
     * after its sender's fingerprint (sent before it) was judged. */
    if ((result = service_control(state)) != XCOLL_SUCCESS)
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
    check_peers(state, t);
    if (state->failed_peer >= 0) {
      result = remote_failure(state);
      break;
    }
    if (pending == 0)
      return XCOLL_SUCCESS;
    if (completed > 0) {
      last_progress = t;
      departed_since = 0;
      if (probing)
        clear_probes(state);
      probing = 0;
    }
    int gone = departed_peer(state, requests, count);
    if (gone >= 0 && departed_since == 0)
      departed_since = t;
    if (gone >= 0 && t - departed_since > ABORT_GRACE_S) {
      char what[256];
      describe_pending(requests, count, what, sizeof what);
      result = state_fail(state, XCOLL_ERR_REMOTE, gone,
                          "ucx: rank %d left (destroyed its communicator) "
                          "while rank %d waited on messages %s: the ranks "
                          "made different numbers of calls, or it finished "
                          "early",
                          gone, state->rank, what);
      break;
    }
    double stalled = t - last_progress;
    if (!probing && stalled > state->timeout_s - lead_s) {
      send_probes(state, requests, count);
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

static xcoll_status ucx_test(void *opaque, xcoll_p2p_request *opaque_request,
                             int *done) {
  ucx_state *state = opaque;
  xcoll_ucx_request *request = (xcoll_ucx_request *)opaque_request;
  *done = 0;
  xcoll_status result = XCOLL_SUCCESS;
  if (state->broken) {
    result = rebroken(state);
  } else if (atomic_load(&state->aborted)) {
    result = state_fail(state, XCOLL_ERR_ABORTED, state->rank,
                        "ucx: communicator aborted (rank %d)", state->rank);
  } else {
    xcoll_ucx_progress(state->worker);
    result = service_control(state);
    if (result == XCOLL_SUCCESS) {
      check_peers(state, now_s());
      if (request == NULL || request->done) {
        result =
            request == NULL ? XCOLL_SUCCESS : check_completed(state, request);
        xcoll_ucx_request_put(state->worker, request);
        *done = 1;
        return result;
      }
      if (state->failed_peer >= 0)
        result = remote_failure(state);
    }
  }
  if (result != XCOLL_SUCCESS) {
    xcoll_ucx_request_put(state->worker, request);
    *done = 1;
  }
  return result;
}

/* Log, at INFO, what UCX chose for each peer: NCCL_DEBUG=INFO's "Channel
 * 00 : 0[0] -> 1[1] via P2P/IPC" in UCX's words. */
static void log_endpoints(ucx_state *state) {
  if (xcoll_log_level_get() < XCOLL_LOG_INFO)
    return;
  for (int peer = 0; peer < state->world_size; peer++) {
    if (peer == state->rank)
      continue;
    char *info = xcoll_ucx_endpoint_info(state->worker, peer);
    if (info == NULL)
      continue;
    /* ucp_ep_print_info writes a '#'-framed block; keep its lane lines. */
    char *save = NULL;
    for (char *line = strtok_r(info, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
      while (*line == '#' || *line == ' ')
        line++;
      /* The header and "peer: <no debug data>" say nothing useful. */
      if (*line != '\0' && strncmp(line, "UCP endpoint", 12) != 0 &&
          strncmp(line, "peer:", 5) != 0)
        XCOLL_INFO("ucx: rank %d -> rank %d: %s", state->rank, peer, line);
    }
    free(info);
  }
}

/* Tell every peer that this rank leaves cleanly, so that its exit is not
 * taken for a crash by a peer still finishing its last collective. The
 * sends are flushed by the endpoint close that follows. */
static void send_goodbyes(ucx_state *state) {
  static const char goodbye = 0;
  for (int peer = 0; peer < state->world_size; peer++) {
    if (peer == state->rank || state->peers[peer].departed)
      continue;
    ucp_tag_t tag = ((ucp_tag_t)state->rank << (SEQ_BITS + STEP_BITS)) |
                    ((ucp_tag_t)GOODBYE_SEQ << STEP_BITS) | GOODBYE_STEP;
    xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
    if (request == NULL)
      break;
    if (xcoll_ucx_isend(state->worker, peer, tag, &goodbye, 1, request) !=
        UCS_OK)
      xcoll_ucx_request_put(state->worker, request);
    else if (request->done)
      xcoll_ucx_request_put(state->worker, request);
    /* else: released with the worker; ep close flushes it. */
  }
}

/* Wait (up to CLOSE_FLUSH_S) for the goodbye of every peer still alive, so
 * that no peer's goodbye reaches a worker that no longer expects it (UCX
 * would warn about an unmatched message), and so that destroy is a soft
 * barrier: a rank leaves once its peers are done with it. */
static void await_goodbyes(ucx_state *state) {
  double deadline = now_s() + CLOSE_FLUSH_S;
  for (;;) {
    xcoll_ucx_progress(state->worker);
    double t = now_s();
    check_peers(state, t);
    int waiting = 0;
    for (int peer = 0; peer < state->world_size; peer++) {
      const peer_watch *watch = &state->peers[peer];
      if (peer != state->rank && peer != state->failed_peer &&
          watch->goodbye != NULL && !watch->goodbye->done)
        waiting++;
    }
    if (waiting == 0 || state->failed_peer >= 0 || t > deadline)
      return;
    sched_yield();
  }
}

static void free_state(ucx_state *state, int flush) {
  if (state->peers != NULL) {
    for (int peer = 0; peer < state->world_size; peer++) {
      if (state->peers[peer].pidfd >= 0)
        close(state->peers[peer].pidfd);
      if (state->worker != NULL) {
        peer_watch *watch = &state->peers[peer];
        xcoll_ucx_request_put(state->worker, watch->goodbye);
        xcoll_ucx_request_put(state->worker, watch->fp_receive);
        xcoll_ucx_request_put(state->worker, watch->abort_receive);
        xcoll_ucx_request_put(state->worker, watch->ping_receive);
        xcoll_ucx_request_put(state->worker, watch->pong_receive);
        for (int slot = 0; slot < FP_SLOTS; slot++)
          xcoll_ucx_request_put(state->worker, watch->fp_send[slot]);
      }
    }
  }
  xcoll_ucx_worker_destroy(state->worker, flush ? CLOSE_FLUSH_S : 0.0);
  free(state->peers);
  free(state);
}

static void ucx_comm_destroy(xcoll_comm *comm, void *opaque) {
  (void)comm;
  ucx_state *state = opaque;
  if (state == NULL)
    return;
  /* A broken communicator's peers are broken too (the abort told them):
   * nobody waits for goodbyes. */
  int broken = atomic_load(&state->aborted) || state->broken != 0;
  if (!broken) {
    send_goodbyes(state);
    await_goodbyes(state);
  }
  free_state(state, !broken);
}

/* Post the receive of each peer's goodbye message. */
static xcoll_status post_goodbye_receives(ucx_state *state) {
  static char sink[1];
  for (int peer = 0; peer < state->world_size; peer++) {
    if (peer == state->rank)
      continue;
    ucp_tag_t tag = ((ucp_tag_t)peer << (SEQ_BITS + STEP_BITS)) |
                    ((ucp_tag_t)GOODBYE_SEQ << STEP_BITS) | GOODBYE_STEP;
    xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
    if (request == NULL)
      return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                         "ucx backend: no memory for rank %d's requests",
                         state->rank);
    /* All goodbyes are one byte of nothing: one shared sink will do. */
    ucs_status_t status = xcoll_ucx_irecv(state->worker, peer, tag,
                                          FULL_TAG_MASK, sink, 1, request);
    if (status != UCS_OK) {
      xcoll_ucx_request_put(state->worker, request);
      return xcoll_error(state->comm, XCOLL_ERR_SYSTEM,
                         "ucx backend: rank %d could not post a receive: %s",
                         state->rank, ucs_status_string(status));
    }
    state->peers[peer].goodbye = request;
    /* Fingerprints, aborts and liveness probes from this peer. */
    static char sink[1];
    peer_watch *watch = &state->peers[peer];
    watch->fp_receive = post_control_receive(
        state, peer, FINGERPRINT_STEP, watch->fp_in, XCOLL_FINGERPRINT_BYTES);
    watch->abort_receive = post_control_receive(
        state, peer, ABORT_STEP, watch->abort_in, sizeof watch->abort_in);
    watch->ping_receive = post_control_receive(state, peer, PING_STEP, sink, 1);
    watch->pong_receive = post_control_receive(state, peer, PONG_STEP, sink, 1);
    if (!watch->fp_receive || !watch->abort_receive || !watch->ping_receive ||
        !watch->pong_receive)
      return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                         "ucx backend: rank %d could not post its control "
                         "receives for rank %d",
                         state->rank, peer);
  }
  return XCOLL_SUCCESS;
}

/* Read and check a peer's hello; *address points into value. */
static xcoll_status parse_hello(ucx_state *state, int peer, const void *value,
                                size_t bytes, hello *out,
                                const void **address) {
  if (bytes < sizeof *out)
    goto bad;
  memcpy(out, value, sizeof *out);
  if (out->magic != HELLO_MAGIC ||
      out->address_bytes != bytes - sizeof *out ||
      memchr(out->host_id, '\0', sizeof out->host_id) == NULL)
    goto bad;
  *address = (const char *)value + sizeof *out;
  return XCOLL_SUCCESS;
bad:
  return xcoll_error(state->comm, XCOLL_ERR_PROTOCOL,
                     "ucx backend: rank %d's entry in the store (%zu bytes) "
                     "is not a ucx worker address: do all ranks run the same "
                     "xcoll with XCOLL_BACKEND=ucx?",
                     peer, bytes);
}

/* Longest record a peer may publish (hello + worker address), bytes: UCX
 * worker addresses are some hundreds of bytes; this only bounds what a
 * malformed record can make a rank allocate. */
#define MAX_HELLO_BYTES (1u << 20)

/* Publish this rank's hello and worker address and collect every rank's
 * (xcoll_bootstrap_allgatherv; free with xcoll_bootstrap_free). */
static xcoll_status exchange_hellos(ucx_state *state, const char *host_id,
                                    void ***values, size_t **sizes) {
  xcoll_comm *comm = state->comm;
  const void *address;
  size_t address_bytes;
  xcoll_ucx_worker_address(state->worker, &address, &address_bytes);
  size_t bytes = sizeof(hello) + address_bytes;
  char *value = malloc(bytes);
  if (value == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "ucx backend: no memory for rank %d's address",
                       comm->rank);
  hello mine;
  memset(&mine, 0, sizeof mine);
  mine.magic = HELLO_MAGIC;
  mine.pid = (int32_t)getpid();
  mine.address_bytes = (uint32_t)address_bytes;
  snprintf(mine.host_id, sizeof mine.host_id, "%s", host_id);
  memcpy(value, &mine, sizeof mine);
  memcpy(value + sizeof mine, address, address_bytes);
  xcoll_status st = xcoll_bootstrap_allgatherv(
      comm, "ucx-address", value, bytes, MAX_HELLO_BYTES, values, sizes);
  free(value);
  return st;
}

/* Connect to peer, whose record (hello + worker address, bytes long) is
 * value. A peer on this host is connected without UCX's peer
 * failure handling, which in UCX 1.13 would rule out shared memory and cma,
 * and is watched through a pidfd instead; a remote peer (or every peer with
 * XCOLL_UCX_ERR_MODE=peer) gets UCP_ERR_HANDLING_MODE_PEER. */
static xcoll_status connect_peer(ucx_state *state, int peer, const void *value,
                                 size_t bytes, const char *host_id,
                                 int force_peer_mode) {
  xcoll_comm *comm = state->comm;
  hello theirs;
  const void *address = NULL;
  xcoll_status st = parse_hello(state, peer, value, bytes, &theirs, &address);
  if (st != XCOLL_SUCCESS) return st;
  peer_watch *watch = &state->peers[peer];
  if (peer != comm->rank && !force_peer_mode &&
      strcmp(theirs.host_id, host_id) == 0) {
    watch->pidfd = xcoll_ucx_open_pidfd((pid_t)theirs.pid);
    watch->same_host = watch->pidfd >= 0;
  }
  /* A rank cannot lose itself: its own endpoint (transport self) needs no
   * peer failure handling, which would otherwise drag in tcp. */
  int peer_mode = !watch->same_host && peer != comm->rank;
  char err[256];
  ucs_status_t status =
      xcoll_ucx_connect(state->worker, peer, address, peer_mode,
                        on_peer_error, state, err, sizeof err);
  if (status != UCS_OK)
    return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                       "ucx backend: rank %d could not connect to rank %d: %s "
                       "(is UCX_TLS the same on every rank?)",
                       comm->rank, peer, err);
  return XCOLL_SUCCESS;
}

static xcoll_status ucx_comm_init(xcoll_comm *comm, void **out) {
  *out = NULL;
  if (comm->world_size > MAX_WORLD_SIZE)
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "ucx backend: world_size %d exceeds %d (the source rank "
                       "has %d bits in the UCP tag); use the tcp backend",
                       comm->world_size, MAX_WORLD_SIZE, SOURCE_BITS);
  long spin_us = 0;
  xcoll_status st =
      xcoll_param_int("XCOLL_UCX_SPIN_US", &spin_us);
  if (st != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, st);
  int err_mode = -1; /* core/params.c: "auto", "peer" */
  st = xcoll_param_choice("XCOLL_UCX_ERR_MODE", &err_mode);
  if (st != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, st);
  int force_peer_mode = err_mode == 1;

  ucx_state *state = calloc(1, sizeof *state);
  peer_watch *peers = calloc((size_t)comm->world_size, sizeof *peers);
  if (state == NULL || peers == NULL) {
    free(state);
    free(peers);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "ucx backend: no memory for rank %d's state", comm->rank);
  }
  for (int peer = 0; peer < comm->world_size; peer++)
    peers[peer].pidfd = -1;
  state->peers = peers;
  state->comm = comm;
  state->rank = comm->rank;
  state->world_size = comm->world_size;
  state->timeout_s = comm->timeout_s > 0 ? comm->timeout_s : 1e9;
  state->spin_s = 1e-6 * (double)spin_us;
  state->failed_peer = -1;
  atomic_init(&state->aborted, 0);

  char err[256];
  /* When the launcher says every rank is on this host, only shared memory
   * and self can be used (peer failure handling would need tcp): leave the
   * network interfaces closed so that progress does not poll them. */
  const char *default_tls = NULL;
  if (!force_peer_mode && comm->local_world_size == comm->world_size)
    default_tls = LOCAL_TLS;
  ucs_status_t status =
      xcoll_ucx_worker_create(comm->world_size, KEEPALIVE_INTERVAL,
                              default_tls, &state->worker, err, sizeof err);
  if (status != UCS_OK) {
    st = xcoll_error(comm, XCOLL_ERR_SYSTEM,
                     "ucx backend on rank %d: %s (check UCX_TLS / "
                     "UCX_NET_DEVICES; ucx_info -d lists transports)",
                     comm->rank, err);
    goto fail;
  }
  char host_id[HOST_ID_BYTES];
  xcoll_ucx_host_identity(host_id, sizeof host_id);
  void **records = NULL;
  size_t *record_bytes = NULL;
  if ((st = exchange_hellos(state, host_id, &records, &record_bytes)) !=
      XCOLL_SUCCESS)
    goto fail;
  int same_host = 0;
  for (int peer = 0; peer < comm->world_size && st == XCOLL_SUCCESS; peer++) {
    st = connect_peer(state, peer, records[peer], record_bytes[peer], host_id,
                      force_peer_mode);
    same_host += state->peers[peer].same_host;
  }
  xcoll_bootstrap_free(comm->world_size, records, record_bytes);
  if (st != XCOLL_SUCCESS)
    goto fail;
  if ((st = post_goodbye_receives(state)) != XCOLL_SUCCESS)
    goto fail;
  XCOLL_INFO("ucx: rank %d connected to %d ranks, %d on this host watched by "
             "pidfd, %d with UCX peer failure handling (UCX %s, spin %ld us, "
             "XCOLL_UCX_ERR_MODE=%s)",
             comm->rank, comm->world_size, same_host,
             comm->world_size - 1 - same_host, ucp_get_version_string(),
             spin_us, force_peer_mode ? "peer" : "auto");
  log_endpoints(state);
  *out = state;
  return XCOLL_SUCCESS;

fail:
  free_state(state, 0);
  return st;
}

static void ucx_comm_abort(xcoll_comm *comm, void *opaque) {
  (void)comm;
  ucx_state *state = opaque;
  if (state == NULL)
    return;
  atomic_store(&state->aborted, 1);
  xcoll_ucx_worker_signal(state->worker);
}

static const xcoll_p2p_ops ucx_p2p = {
    .isend = ucx_isend,
    .irecv = ucx_irecv,
    .wait = ucx_wait,
    .test = ucx_test,
};

const xcoll_backend xcoll_backend_ucx = {
    .abi_version = XCOLL_BACKEND_ABI_VERSION,
    .name = "ucx",
    .description = "host-driven algorithms over UCX tagged messages (UCP): "
                   "shared memory, cma, tcp or rdma as UCX picks",
    .comm_init = ucx_comm_init,
    .comm_destroy = ucx_comm_destroy,
    .comm_abort = ucx_comm_abort,
    .p2p = &ucx_p2p,
    .coll = NULL,
};
