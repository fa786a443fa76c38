/* desync.c - collective fingerprints of the nccl_like backend: desync
 * detection (docs/desync.md), as tcp and ucx do it, for a device-driven
 * engine.
 *
 * The kernels' slots hold data only, in the wire format shared with the
 * CUDA build, so the fingerprints travel apart: start() appends each op's
 * fingerprint (core/fingerprint.h) to st->fp, and the fingerprint step sends
 * it to the next rank over a net connection of its own (every fingerprint
 * not yet sent in one message, NL_FP_ENTRY_BYTES each, at most
 * NL_FP_BATCH; tag = the first one's op counter), receives
 * the previous rank's, and compares the previous rank's op k with this
 * rank's op k once op k has started here (a fingerprint that arrives first
 * waits in the plugin until then). Every adjacent pair of the ring is compared by one of
 * its ranks, so ranks that disagree anywhere are caught by at least one,
 * which fails with XCOLL_ERR_PROTOCOL naming both calls and publishes the
 * failure to every rank (nl_fail_everywhere).
 *
 * Who runs the step: whichever thread holds st->fp.lock (trylock only, so
 * that the plugin never sees two threads on the connection): the proxy
 * thread on each pass, channel 0's progress hook on one idle pass in
 * NL_FP_HOOK_EVERY (a kernel that waits long sees a mismatch without
 * waiting for the proxy's nap, and one that waits briefly is not slowed),
 * and a thread whose kernel failed with PROTOCOL (nl_fp_explain).
 * Zero-count calls are fingerprinted too, should one reach start(): they
 * are validated calls that the other ranks must make as well (core numbers
 * them and returns without the backend today, so a rank that skipped one
 * is found at its next call, by the sequence number). */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_COLL /* log.h */
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"

/* How long a thread whose kernel found a slot that does not fit its
 * schedule waits for the previous rank's fingerprint of that op (seconds):
 * it leaves that rank within a proxy pass of its start (NL_PROXY_NAP_MS),
 * so it is normally there within a millisecond; past this the kernel's own
 * error is reported. */
#define NL_FP_EXPLAIN_S 1.0

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* urgent = max(urgent, value). */
static void raise_urgent(nl_fp_link *fp, uint64_t value) {
  uint64_t seen = atomic_load(&fp->urgent);
  while (seen < value &&
         !atomic_compare_exchange_weak(&fp->urgent, &seen, value)) {
  }
}

/* Fingerprints the step sends now: every one up to urgent, and all that
 * started once NL_FP_DEFER are unsent or a start() waits for room. */
static uint64_t send_target(nl_fp_link *fp, uint64_t started) {
  if (started - atomic_load(&fp->sent) >= NL_FP_DEFER ||
      atomic_load(&fp->room_waiters) > 0)
    return started;
  return min_u64(atomic_load(&fp->urgent), started);
}

int nl_fp_deferrable(const nl_state *st, const nl_op *op) {
  int kind = (int)op->args.kind;
  /* The same answer on every rank of the ring, GPU ranks included (their
   * kernels check the same flags): a rank that awaits the fingerprint of a
   * previous rank that deferred it would wait for that rank's next batch
   * (about 0.1-0.25 s a call in a mixed ring, seen on an H100). */
  /* Every step that reaches a rank says which collective it belongs to:
   * LL steps in their flags; SIMPLE steps of the ring kernels in their
   * checks, where every link of the ring carries them (ring_checked); the
   * pairwise and Rabenseifner allreduces' messages in theirs, where every
   * link of the mesh does (mesh_checked). */
  int checked = op->work.proto == XC_PROTO_LL ||
                (op->pairwise ? st->mesh_checked
                              : st->ring_checked && !op->bruck);
  /* A call that every rank agreed on in core's fingerprint exchange
   * (xcoll_coll_args.agreed: the rooted ones), or that runs on
   * bruck.c (each rank completes only once every rank's call was
   * compared), was compared with all the ranks' calls, not only
   * neighbours'. */
  return st->world_size > 1 &&
         (op->args.agreed || op->bruck ||
          (checked &&
           (kind == XCOLL_COLL_ALLREDUCE || kind == XCOLL_COLL_ALLGATHER ||
            kind == XCOLL_COLL_REDUCE_SCATTER || kind == XCOLL_COLL_BARRIER)));
}

/* Under st->lock. A slot is free once its fingerprint was both sent and
 * compared. */
static int has_room(nl_fp_link *fp) {
  uint64_t started = atomic_load_explicit(&fp->started, memory_order_relaxed);
  uint64_t done = min_u64(atomic_load(&fp->sent), atomic_load(&fp->judged));
  return started - done < NL_FP_WINDOW;
}

xcoll_status nl_fp_record(nl_state *st, const xcoll_fingerprint *call,
                          int deferred, int caller_steps, uint64_t p2p_sent,
                          uint64_t *index) {
  nl_fp_link *fp = &st->fp;
  if (!has_room(fp) && !atomic_load(&fp->broken)) {
    /* NL_FP_WINDOW ops ahead of what the previous rank has started (or of
     * what the next one takes): wait, as for a full channel queue. The
     * proxy keeps running the step while someone waits (nl_fp_pending). */
    atomic_fetch_add(&fp->room_waiters, 1);
    nl_proxy_wake(st); /* also end a nap: the proxy runs the step */
    while (!has_room(fp) && !atomic_load(&fp->broken) &&
           !atomic_load(&st->failed) && !st->stopping)
      pthread_cond_wait(&st->done_cond, &st->lock);
    atomic_fetch_sub(&fp->room_waiters, 1);
  }
  if (atomic_load(&st->failed) || st->stopping)
    return XCOLL_ERR_ABORTED;
  uint64_t started = atomic_load_explicit(&fp->started, memory_order_relaxed);
  *index = started;
  if (atomic_load(&fp->broken))
    return XCOLL_SUCCESS; /* a neighbour has closed: nothing is compared */
  int slot = (int)(started % NL_FP_WINDOW);
  fp->local[slot] = *call;
  xcoll_fingerprint_encode(&fp->local[slot], fp->out[slot]);
  /* Core starts an engine op with no point-to-point message in flight:
   * p2p_sent is final for every call before it. */
  for (int i = 0; i < 8; i++)
    fp->out[slot][XCOLL_FINGERPRINT_BYTES + i] = (uint8_t)(p2p_sent >> (8 * i));
  atomic_store_explicit(&fp->started, started + 1, memory_order_release);
  if (!deferred)
    raise_urgent(fp, started + 1);
  /* A sleeping proxy must send it (a zero-count op wakes nothing else),
   * unless it waits for a batch. A batch of deferred ones that has come
   * due ends the proxy's nap as well: nobody awaits their judgment, so
   * nobody else sends them, and the window fills behind them; unless the
   * issuing thread sends it when its blocking wait ends (caller_steps).
   * Measured at P=4 on 2 cores, 8 B-4 KiB Bruck allreduce: a wake-up of
   * the proxy every NL_FP_DEFER calls cost 15-20% of the latency. If the
   * caller finds the step taken by the proxy, the batch stays due and
   * goes with the next call's, or with the proxy's next pass. */
  if (send_target(fp, started + 1) > atomic_load(&fp->sent) &&
      (st->proxy_idle || (deferred && !caller_steps)))
    nl_proxy_wake(st);
  return XCOLL_SUCCESS;
}

int nl_fp_step_due(nl_state *st) {
  nl_fp_link *fp = &st->fp;
  if (st->world_size == 1 || atomic_load(&fp->broken))
    return 0;
  uint64_t started = atomic_load_explicit(&fp->started, memory_order_acquire);
  return send_target(fp, started) > atomic_load(&fp->sent);
}

int nl_fp_pending(nl_state *st) {
  /* A start() waiting for room needs the step even with all sent: it
   * frees slots by judging the previous rank's fingerprints. */
  return nl_fp_step_due(st) ||
         (st->world_size > 1 && !atomic_load(&st->fp.broken) &&
          atomic_load(&st->fp.room_waiters) > 0);
}

void nl_fp_flush(nl_state *st) {
  nl_fp_link *fp = &st->fp;
  raise_urgent(fp, atomic_load_explicit(&fp->started, memory_order_acquire));
}

/* A failed plugin call on the fingerprint connection. A closed connection
 * (REMOTE) is not an error here: at the end of a job a neighbour closes
 * after its last op, and a neighbour that died is reported by the data
 * path (the channels), which knows whether an op still needed it. */
static xcoll_status link_failed(nl_state *st, xcoll_status s, int peer,
                                const char *what) {
  if (s == XCOLL_ERR_REMOTE) {
    XCOLL_INFO("nccl_like: rank %d: the fingerprint connection %s rank %d "
               "closed (%s); later collectives are not fingerprinted",
               st->rank, what, peer, nl_net_last_error());
    atomic_store(&st->fp.broken, 1);
    return XCOLL_SUCCESS;
  }
  return nl_fail(st, s, -1,
                 "nccl_like: rank %d: the fingerprint connection %s rank %d "
                 "failed: %s",
                 st->rank, what, peer, nl_net_last_error());
}

/* Send every fingerprint below target not yet sent, NL_FP_BATCH at most
 * per message (the tag is the first one's counter), one message in flight
 * at a time. */
static xcoll_status send_step(nl_state *st, uint64_t target, int *progress) {
  nl_fp_link *fp = &st->fp;
  for (;;) {
    if (fp->send_request) {
      int done = 0;
      xcoll_status s = st->net->test(fp->send_request, &done, NULL);
      if (s != XCOLL_SUCCESS) {
        fp->send_request = NULL;
        return link_failed(st, s, st->next, "to");
      }
      if (!done)
        return XCOLL_SUCCESS;
      fp->send_request = NULL;
      /* seq_cst, as judged's: start() bumps room_waiters and then reads
       * these, the step writes them and then reads room_waiters. */
      atomic_store(&fp->sent, fp->send_posted);
      *progress = 1;
    }
    if (fp->send_posted >= target)
      return XCOLL_SUCCESS;
    /* Up to the end of the ring buffer: a message is contiguous. */
    uint64_t slot = fp->send_posted % NL_FP_WINDOW;
    uint64_t count = min_u64(target - fp->send_posted,
                             min_u64(NL_FP_WINDOW - slot, NL_FP_BATCH));
    xcoll_net_request *request = NULL;
    xcoll_status s = st->net->isend(
        fp->link.send_comm, fp->out[slot], count * NL_FP_ENTRY_BYTES,
        (uint32_t)fp->send_posted, fp->send_mhandle, &request);
    if (s != XCOLL_SUCCESS)
      return link_failed(st, s, st->next, "to");
    if (request == NULL)
      return XCOLL_SUCCESS; /* back-pressure: retry on the next pass */
    fp->send_request = request;
    fp->send_posted += count;
    *progress = 1;
  }
}

/* Compare the previous rank's fingerprint of op `index` (encoded in
 * fp->in) with this rank's. */
static xcoll_status judge(nl_state *st, uint64_t index) {
  nl_fp_link *fp = &st->fp;
  xcoll_fingerprint theirs;
  if (xcoll_fingerprint_decode(fp->in[index - fp->in_base], &theirs) != 0 ||
      !theirs.valid)
    return nl_fail_everywhere(
        st, XCOLL_ERR_PROTOCOL,
        "nccl_like: rank %d got a malformed collective fingerprint from rank "
        "%d (for its op #%" PRIu64 "): a corrupted connection or another "
        "xcoll version",
        st->rank, st->prev, index);
  const xcoll_fingerprint *ours = &fp->local[index % NL_FP_WINDOW];
  /* Op k against op k: no "previous" call to name, and this fingerprint is
   * the one op k waits for (answers_receive). */
  xcoll_fingerprint none;
  memset(&none, 0, sizeof none);
  const xcoll_fingerprint *named = ours;
  if (xcoll_fingerprint_judge(ours, &none, &theirs, 1, &named) ==
      XCOLL_FINGERPRINT_MATCH)
    return XCOLL_SUCCESS;
  char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
  xcoll_fingerprint_mismatch(st->rank, named, st->prev, &theirs, sentence,
                             sizeof sentence);
  return nl_fail_everywhere(
      st, XCOLL_ERR_PROTOCOL,
      "nccl_like: collective mismatch: %s (found by rank %d in the "
      "fingerprint rank %d sent for its collective #%" PRIu64 "): every "
      "rank must call the same collectives in the same order with the same "
      "count, dtype, op and root",
      sentence, st->rank, st->prev, theirs.seq);
}

/* Receive the previous rank's fingerprints and judge each against this
 * rank's op of the same index, until `wanted` have been received: started
 * (an op started here waits for its comparison), or started + 1 for
 * nl_fp_peek. Fingerprints that come first wait in the plugin (or in
 * fp->in, for the rest of a message), and no receive is polled for
 * nothing. One receive is posted at a time, and only once the last message
 * was judged: the socket plugin fails every request of a comm once the
 * peer closes, which would lose a message that had landed behind a receive
 * posted further ahead (proxy.c's NL_RECVS_AHEAD says the same); the loop
 * still takes every message that is there in one step. */
static xcoll_status recv_step(nl_state *st, uint64_t started, uint64_t wanted,
                              int *progress) {
  nl_fp_link *fp = &st->fp;
  for (;;) {
    uint64_t judged = atomic_load_explicit(&fp->judged, memory_order_relaxed);
    if (judged < started && fp->received > judged) {
      xcoll_status s = judge(st, judged);
      if (s != XCOLL_SUCCESS)
        return s;
      atomic_store(&fp->judged, judged + 1); /* seq_cst: see send_step */
      *progress = 1;
      continue;
    }
    if (fp->received >= wanted)
      return XCOLL_SUCCESS;
    if (!fp->recv_request) {
      xcoll_net_request *request = NULL;
      xcoll_status s = st->net->irecv(fp->link.recv_comm, fp->in,
                                      sizeof fp->in, (uint32_t)fp->received,
                                      fp->recv_mhandle, &request);
      if (s != XCOLL_SUCCESS)
        return link_failed(st, s, st->prev, "from");
      if (request == NULL)
        return XCOLL_SUCCESS;
      fp->recv_request = request;
    }
    int done = 0;
    size_t bytes = 0;
    xcoll_status s = st->net->test(fp->recv_request, &done, &bytes);
    if (s != XCOLL_SUCCESS) {
      fp->recv_request = NULL;
      return link_failed(st, s, st->prev, "from");
    }
    if (!done)
      return XCOLL_SUCCESS;
    fp->recv_request = NULL;
    if (bytes == 0 || bytes % NL_FP_ENTRY_BYTES != 0)
      return nl_fail_everywhere(
          st, XCOLL_ERR_PROTOCOL,
          "nccl_like: rank %d got a %zu-byte message of collective "
          "fingerprints from rank %d (a multiple of %d expected): a "
          "corrupted connection or another xcoll version",
          st->rank, bytes, st->prev, NL_FP_ENTRY_BYTES);
    fp->in_base = fp->received;
    fp->received += bytes / NL_FP_ENTRY_BYTES;
    *progress = 1;
  }
}

void nl_fp_progress(nl_state *st, int *progress) {
  nl_fp_link *fp = &st->fp;
  if (st->world_size == 1 || atomic_load(&fp->broken) ||
      atomic_load_explicit(&st->failed, memory_order_relaxed))
    return;
  /* Every started op sent and compared: nothing to do until the next
   * start (a fingerprint that arrives meanwhile waits in the plugin). This
   * keeps the step off a spinning kernel's path once its op is checked. */
  uint64_t started = atomic_load_explicit(&fp->started, memory_order_acquire);
  uint64_t target = send_target(fp, started);
  if (atomic_load_explicit(&fp->sent, memory_order_relaxed) >= target &&
      atomic_load_explicit(&fp->judged, memory_order_relaxed) == started)
    return;
  if (pthread_mutex_trylock(&fp->lock) != 0)
    return; /* another thread runs the step right now */
  int moved = 0;
  if (send_step(st, target, &moved) == XCOLL_SUCCESS &&
      !atomic_load(&fp->broken))
    (void)recv_step(st, started, started, &moved);
  pthread_mutex_unlock(&fp->lock);
  if (moved)
    *progress = 1;
  /* A start() waiting for a free slot (or, once broken, for nothing). */
  if ((moved || atomic_load(&fp->broken)) &&
      atomic_load(&fp->room_waiters) > 0) {
    pthread_mutex_lock(&st->lock);
    pthread_cond_broadcast(&st->done_cond);
    pthread_mutex_unlock(&st->lock);
  }
}

int nl_fp_peek(nl_state *st, xcoll_fingerprint *theirs, uint64_t *p2p_sent) {
  nl_fp_link *fp = &st->fp;
  if (st->world_size == 1 || atomic_load(&fp->broken) ||
      atomic_load(&st->failed) || pthread_mutex_trylock(&fp->lock) != 0)
    return 0;
  uint64_t started = atomic_load_explicit(&fp->started, memory_order_acquire);
  int moved = 0, found = 0;
  if (recv_step(st, started, started + 1, &moved) == XCOLL_SUCCESS &&
      !atomic_load(&fp->broken) && fp->received > started) {
    const uint8_t *entry = fp->in[started - fp->in_base];
    found = xcoll_fingerprint_decode(entry, theirs) == 0 && theirs->valid;
    *p2p_sent = 0;
    for (int i = 0; i < 8; i++)
      *p2p_sent |= (uint64_t)entry[XCOLL_FINGERPRINT_BYTES + i] << (8 * i);
  }
  pthread_mutex_unlock(&fp->lock);
  return found;
}

int nl_fp_judged(nl_state *st, uint64_t index) {
  nl_fp_link *fp = &st->fp;
  return st->world_size == 1 || atomic_load(&st->failed) ||
         atomic_load(&fp->broken) || atomic_load(&fp->judged) > index;
}

/* Sleeps in poll(2), at most NL_POLL_MS, until the previous rank's next
 * fingerprint message can be read; 0 when it cannot (no get_fds, no
 * receive posted, or another thread runs the step). */
static int sleep_on_fp(nl_state *st) {
  nl_fp_link *fp = &st->fp;
  int ids[16], count = 0, slept = 0;
  if (st->net->get_fds == NULL || pthread_mutex_trylock(&fp->lock) != 0)
    return 0;
  if (fp->recv_request != NULL && !atomic_load(&fp->broken) &&
      st->net->get_fds(NULL, fp->link.recv_comm, ids, 16, &count) ==
          XCOLL_SUCCESS &&
      count > 0) {
    struct pollfd fds[16];
    for (int i = 0; i < count; i++)
      fds[i] = (struct pollfd){.fd = ids[i], .events = POLLIN};
    (void)poll(fds, (nfds_t)count, NL_POLL_MS);
    slept = 1;
  }
  pthread_mutex_unlock(&fp->lock);
  return slept;
}

void nl_fp_await(nl_state *st, uint64_t index, double limit_s) {
  double deadline = nl_now() + limit_s;
  unsigned idle = 0;
  while (!nl_fp_judged(st, index) && nl_now() < deadline) {
    int progress = 0;
    nl_fp_progress(st, &progress);
    if (progress) {
      idle = 0;
      continue;
    }
    /* As the kernels' hook does: a short spin, then sleep on the socket
     * rather than yield; on a loaded machine one sched_yield could give
     * the core away for a whole slice (1 ms seen) while the message was
     * already there to read. */
    if (++idle >= NL_SPINS_BEFORE_POLL && sleep_on_fp(st))
      continue;
    sched_yield(); /* the proxy thread may hold the step: let it run */
  }
}

void nl_fp_explain(nl_state *st, uint64_t index) {
  /* Send this rank's, deferred ones included: the next rank may be
   * explaining too. */
  raise_urgent(&st->fp, index + 1);
  nl_fp_await(st, index, NL_FP_EXPLAIN_S);
  /* The previous rank closed its link before its fingerprint came: it
   * failed, most often by finding the mismatch itself, and published why
   * before closing anything (failure.c). Its notice, not this rank's bare
   * PROTOCOL, is what every rank must report. */
  if (atomic_load(&st->fp.broken))
    (void)nl_fail_published(st);
}

void nl_fp_explain_mesh(nl_state *st, uint64_t index) {
  nl_fp_explain(st, index);
  double deadline = nl_now() + NL_FP_EXPLAIN_S;
  while (!atomic_load(&st->failed) && nl_now() < deadline) {
    int progress = 0;
    nl_fp_progress(st, &progress);
    if (!progress) {
      struct timespec pause = {0, 100000}; /* 0.1 ms: a failure path */
      nanosleep(&pause, NULL);
    }
  }
}
