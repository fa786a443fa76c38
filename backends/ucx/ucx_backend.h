/* ucx_backend.h - internal state of the "ucx" backend (core/p2p.h over UCP
 * tagged messages), shared by its three parts: ucx_backend.c (the
 * communicator: address exchange through the store, connecting, goodbyes,
 * destroy, abort), ucx_p2p.c (the p2p interface: tag folding, isend, irecv,
 * the wait loop) and ucx_failure.c (failure detection and the control
 * messages: aborts, fingerprints, liveness probes). See docs/ucx.md. */
#ifndef XCOLL_UCX_BACKEND_H
#define XCOLL_UCX_BACKEND_H

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
  int in_grace; /* ucx_state_fail is looking for a peer's abort */
  /* Broken on a collective mismatch: the abort tells peers
   * XCOLL_ERR_PROTOCOL (other failures reach them as XCOLL_ERR_REMOTE). */
  int broken_by_desync;
} ucx_state;

/* How long a rank that sees a peer fail looks for that peer's abort message,
 * seconds: a peer that found a desync or a timeout sends its abort and may
 * exit at once, and its exit must not hide the reason it gave. */
#define ABORT_GRACE_S 0.2

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- ucx_failure.c ---- */

/* UCX's endpoint error callback (xcoll_ucx_peer_error_fn): marks peer
 * suspect, judged in ucx_check_peers. */
void ucx_on_peer_error(void *arg, int peer, ucs_status_t status);
/* Judge endpoint errors and look whether same-host peers still exist. */
void ucx_check_peers(ucx_state *state, double now);
/* Post the receive of peer's next control message of one kind, any seq. */
xcoll_ucx_request *ucx_post_control_receive(ucx_state *state, int peer,
                                            unsigned step, void *buf,
                                            size_t bytes);
/* Break the communicator (first failure wins), log once, tell the peers. */
xcoll_status ucx_state_fail(ucx_state *state, xcoll_status status, int origin,
                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A call on a broken communicator: its status again. */
xcoll_status ucx_rebroken(ucx_state *state);
/* Break the communicator on the peer failure seen (failed_peer): REMOTE. */
xcoll_status ucx_remote_failure(ucx_state *state);
/* Fingerprints: note this rank's collective, send it to peer once. */
void ucx_track_fingerprint(ucx_state *state);
void ucx_send_fingerprint(ucx_state *state, int peer);
/* Handle the control messages that arrived (aborts, fingerprints, pings). */
xcoll_status ucx_service_control(ucx_state *state);
/* Liveness probes of the peers pending requests wait on. */
void ucx_send_probes(ucx_state *state, xcoll_p2p_request **requests,
                     int count);
void ucx_clear_probes(ucx_state *state);
int ucx_silent_peer(const ucx_state *state);

/* ---- ucx_p2p.c: core's p2p interface (core/p2p.h) ---- */

xcoll_status ucx_isend(void *opaque, int peer, uint64_t tag, const void *buf,
                       size_t bytes, xcoll_p2p_request **out);
xcoll_status ucx_irecv(void *opaque, int peer, uint64_t tag, void *buf,
                       size_t bytes, xcoll_p2p_request **out);
xcoll_status ucx_wait(void *opaque, xcoll_p2p_request **requests, int count);
xcoll_status ucx_test(void *opaque, xcoll_p2p_request *opaque_request,
                      int *done);

#endif
