/* engine.c - the host engine of the nccl_like backend: one worker thread per
 * channel runs its share of each collective as a ring kernel
 * (kernels/ring.h's xc_ring_run over the channel's FIFOs), and the ABI 2
 * coll ops (core/backend.h) that start, test and wait for collectives.
 *
 * start() runs on the issuing thread in issue order: it pushes one work item
 * onto every channel's bounded queue and returns an op handle; the op
 * completes when every channel's worker has run it. Channel queues are
 * FIFO, so every channel runs the ops in issue order on every rank, which is
 * what keeps the slots of consecutive collectives matched on the wire
 * (NCCL's per-stream kernel order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "params.h"
#include "prompt.h"
#include "trace.h"

/* Deferred kicks. A non-blocking op on a host rank is queued for its
 * channels' workers; the wait then sleeps until a worker has run it. For
 * a small op that hand-off, a wake-up of the worker and another of the
 * waiter, costs more than the op: an 8 B allreduce issued and waited for
 * at once takes 7-13 us that way at P=2 on 2 cores, against 0.35-0.6 us
 * blocking. So
 * channel 0's queue follows core/prompt.h's policy, as core/request.c's
 * queue of host algorithms does: once the waits come promptly, start()
 * leaves channel 0's worker asleep (op->deferred) and the wait runs the
 * item itself (steal_item), as a blocking wait does. The proxy, which naps
 * at most NL_DEFER_NAP_MS meanwhile, wakes the worker for a deferred item
 * that came due, and the engine stops deferring; so does a late wait, or
 * an nl_test of an op not done: the caller overlaps work with its ops
 * (xtrain's buckets), which the workers must then run at once. */

_Static_assert(XC_COLL_ALLREDUCE == (int)XCOLL_COLL_ALLREDUCE &&
                   XC_COLL_ALLGATHER == (int)XCOLL_COLL_ALLGATHER &&
                   XC_COLL_REDUCE_SCATTER == (int)XCOLL_COLL_REDUCE_SCATTER &&
                   XC_COLL_BROADCAST == (int)XCOLL_COLL_BROADCAST &&
                   XC_COLL_REDUCE == (int)XCOLL_COLL_REDUCE,
               "kernels/ring.h's collective kinds match core/algorithm.h's");

/* ---- ops ---- */

/* The larger buffer's bytes (the table of collectives' size). */
static size_t op_bytes(const nl_state *st, const xcoll_coll_args *args) {
  size_t size = 0;
  if (xcoll_coll_shape(args->kind, args->count, st->world_size, 1, NULL, NULL,
                       &size) != XCOLL_SUCCESS)
    return 0;
  return size * xcoll_datatype_size(args->dtype);
}

/* The protocol for one collective: XCOLL_PROTO, or for auto LL up to
 * NL_LL_THRESHOLD_BYTES (the same choice on every rank: it depends only on
 * the arguments, which match across ranks). */
static int choose_proto(const nl_state *st, size_t bytes) {
  if (st->proto == NL_PROTO_SIMPLE)
    return XC_PROTO_SIMPLE;
  if (st->proto == NL_PROTO_LL)
    return XC_PROTO_LL;
  return bytes <= NL_LL_THRESHOLD_BYTES ? XC_PROTO_LL : XC_PROTO_SIMPLE;
}

/* The kernels' trace hook: one span per primitive call on the channel's
 * track, so that a trace shows the ring pipeline fill and drain. */
static void trace_primitive(void *ctx, int channel, const char *primitive,
                            size_t bytes, uint64_t start_ns, uint64_t end_ns) {
  nl_state *st = ctx;
  char args[64];
  snprintf(args, sizeof args, "\"channel\":%d,\"bytes\":%zu", channel, bytes);
  xcoll_trace_span(primitive, "primitive", st->trace_base + (unsigned)channel,
                   (double)start_ns * 1e-3, (double)end_ns * 1e-3, args);
}

static void fill_work(nl_state *st, nl_op *op) {
  const xcoll_coll_args *a = &op->args;
  xc_work *w = &op->work;
  memset(w, 0, sizeof *w);
  w->kind = (int)a->kind;
  w->dtype = a->dtype;
  w->op = a->op;
  w->sendbuf = a->sendbuf;
  w->recvbuf = a->recvbuf;
  w->count = a->count;
  if (a->kind == XCOLL_COLL_BARRIER) {
    /* A barrier is a 1-element allreduce: nobody leaves before everyone's
     * element has gone round the ring. */
    op->barrier_value = 1;
    w->kind = XCOLL_COLL_ALLREDUCE;
    w->dtype = XCOLL_INT32;
    w->op = XCOLL_SUM;
    w->sendbuf = &op->barrier_value;
    w->recvbuf = &op->barrier_value;
    w->count = 1;
  }
  /* NCCL's ALLREDUCE_CHUNKSTEPS / SLICESTEPS (src/include/collectives.h):
   * a chunk of half the FIFO in slices of a quarter, so that two slices are
   * in flight while the kernel fills the next; broadcast and reduce move one
   * slot per chunk (BROADCAST_CHUNKSTEPS 1). */
  int rooted = w->kind == XCOLL_COLL_BROADCAST || w->kind == XCOLL_COLL_REDUCE;
  w->chunk_steps = rooted ? 1 : XCOLL_STEPS / 2;
  w->slice_steps = rooted ? 1 : XCOLL_STEPS / 4;
  if (xcoll_trace_enabled()) {
    w->trace = trace_primitive;
    w->trace_ctx = st;
  }
  w->nranks = st->world_size;
  w->ring_index = st->rank; /* ring = rank order */
  w->root_index = a->root;
  size_t bytes = op_bytes(st, a);
  size_t wanted = bytes / NL_MIN_BYTES_PER_CHANNEL + 1;
  op->nchannels = wanted < (size_t)st->nchannels ? (int)wanted : st->nchannels;
  w->nchannels = op->nchannels;
  w->proto = choose_proto(st, bytes);
  /* A small allreduce is latency-bound: allgather the inputs and reduce
   * locally (P-1 hops), the scratch is the channel's (set by run_one). */
  w->algo = w->kind == XCOLL_COLL_ALLREDUCE && bytes <= NL_GATHER_MAX_BYTES
                ? XC_ALGO_GATHER
                : XC_ALGO_RING;
  /* The call's identity in every LL flag (kernels/prims.h xc_ll_flag): a
   * desync fails the first LL step it reaches (desync.c). */
  op->fp = xcoll_fingerprint_of(a);
  w->check = xcoll_fingerprint_digest(&op->fp);
  /* The op's algorithm is chosen here and nowhere else: each algorithm's
   * nl_*_can_run says only whether it can run the op, and the order of
   * preference is this one: Bruck, Rabenseifner, pairwise, then the ring
   * kernels (w->algo: gather or ring).
   *
   * On a comm of host ranks a small LL call runs Bruck's allgather of the
   * inputs over the mesh instead (bruck.c): log2 P dependent messages
   * rather than the ring's or the gather's P-1 or more. A gather or a
   * scatter reaches this engine only when it runs there (nl_supports). */
  op->bruck = nl_bruck_can_run(st, op);
  if (op->bruck)
    op->nchannels = w->nchannels = 1;
  /* With more ranks than cores, a SIMPLE allreduce runs the ring's
   * reduction with every piece sent straight to its owner (pairwise.c), on
   * channel 0's thread; w->nchannels keeps the ring's, which cut the
   * pieces. */
  op->pairwise = !op->bruck && nl_pairwise_can_run(st, op);
  if (op->pairwise)
    op->nchannels = 1;
  /* ... as Rabenseifner's halving and doubling when P is a power of two
   * (rabenseifner.c): each step an exchange with one partner. */
  op->rabenseifner = op->pairwise && nl_rabenseifner_can_run(st, op);
  xcoll_comm_note_algorithm(st->comm,
                            op->bruck                   ? "bruck"
                            : op->rabenseifner          ? "rabenseifner"
                            : op->pairwise              ? "pairwise"
                            : w->algo == XC_ALGO_GATHER ? "gather"
                                                        : "ring",
                            op->bruck || op->pairwise ? "direct"
                            : w->proto == XC_PROTO_LL ? "ll"
                                                      : "simple");
}

/* A zeroed op handle: one of the state's unused ones (NL_OP_CACHE), or a
 * new one; NULL when out of memory. */
static nl_op *op_get(nl_state *st) {
  pthread_mutex_lock(&st->lock);
  nl_op *op = st->op_cache;
  if (op != NULL) {
    st->op_cache = op->next_free;
    st->op_cache_count--;
  }
  pthread_mutex_unlock(&st->lock);
  if (op == NULL)
    return calloc(1, sizeof *op);
  memset(op, 0, sizeof *op);
  return op;
}

/* Under st->lock: op is done with; kept for op_get, or freed. */
static void op_put_locked(nl_state *st, nl_op *op) {
  if (st->op_cache_count >= NL_OP_CACHE) {
    free(op);
    return;
  }
  op->next_free = st->op_cache;
  st->op_cache = op;
  st->op_cache_count++;
}

static void op_put(nl_state *st, nl_op *op) {
  pthread_mutex_lock(&st->lock);
  op_put_locked(st, op);
  pthread_mutex_unlock(&st->lock);
}

/* Under st->lock: the op's final status, the comm's cause in message
 * (XCOLL_ERROR_BYTES) when it failed, and the op's name; gives op back
 * (op_put_locked). op_report then records the error. */
static xcoll_status op_finish_locked(nl_state *st, nl_op *op, char *message,
                                     const char **name) {
  xcoll_status status = op->status;
  message[0] = '\0';
  if (atomic_load(&st->failed)) {
    /* The kernels of a failed comm return ABORTED; the cause is in
     * fail_status (REMOTE, TIMEOUT...). */
    status = st->fail_status;
    snprintf(message, XCOLL_ERROR_BYTES, "%s", st->fail_message);
  }
  *name = xcoll_coll_name(op->args.kind);
  op_put_locked(st, op);
  return status;
}

static xcoll_status op_report(nl_state *st, xcoll_status status,
                              const char *message, const char *name);

/* The op's final status, with the message recorded on this (the waiting)
 * thread and on the comm. Gives op back (op_put). */
static xcoll_status op_finish(nl_state *st, nl_op *op) {
  char message[XCOLL_ERROR_BYTES];
  const char *name = NULL;
  pthread_mutex_lock(&st->lock);
  xcoll_status status = op_finish_locked(st, op, message, &name);
  pthread_mutex_unlock(&st->lock);
  return op_report(st, status, message, name);
}

/* An op's final status: the error, recorded on this thread and the comm
 * (message: the comm's cause, or empty). */
static xcoll_status op_report(nl_state *st, xcoll_status status,
                              const char *message, const char *name) {
  if (status == XCOLL_SUCCESS)
    return XCOLL_SUCCESS;
  /* Every op in flight fails with the comm's cause: one log line for all
   * of them (a program may have thousands queued). */
  if (message[0] && atomic_exchange(&st->fail_reported, 1) != 0)
    return xcoll_error_quiet(st->comm, status, "%s failed: %s", name,
                             message);
  if (message[0])
    return xcoll_error(st->comm, status, "%s failed: %s", name, message);
  return xcoll_error(st->comm, status,
                     "nccl_like: %s failed on rank %d: %s", name, st->rank,
                     xcoll_strerror(status));
}

static xcoll_status broken_status(nl_state *st) {
  pthread_mutex_lock(&st->lock);
  xcoll_status status = st->fail_status;
  char message[XCOLL_ERROR_BYTES];
  snprintf(message, sizeof message, "%s", st->fail_message);
  pthread_mutex_unlock(&st->lock);
  return xcoll_error(st->comm, status, "%s", message);
}

/* 1 when op's blocking wait runs the fingerprint step that op makes due
 * (nl_fp_record's caller_steps): a deferred fingerprint of a blocking call
 * whose wait runs items itself (XCOLL_WAIT_RUNS). */
static int caller_steps(const nl_state *st, const nl_op *op) {
  return op->fp_deferred && op->args.blocking && st->inline_wait;
}

/* 1 when fill_work would run args on bruck.c (nl_bruck_fits, with the
 * protocol choose_proto gives it). */
static int bruck_takes(const nl_state *st, const xcoll_coll_args *args) {
  return nl_bruck_fits(st, (int)args->kind, args->count, args->dtype,
                       choose_proto(st, op_bytes(st, args)));
}

static int nl_supports(void *state, const xcoll_coll_args *args) {
  nl_state *st = state;
  /* The reductions and broadcast run on the engine (ring kernels, or the
   * mesh algorithms), and so do small gathers and scatters on host ranks;
   * the others on core's host algorithms over p2p.c's interface (a GPU
   * rank refuses them there). On
   * a host rank a stream is declined: this engine runs on the host, so core
   * answers INVALID_ARGUMENT for it ("pass NULL") as for any host backend.
   * A GPU rank takes every call (start() refuses host buffers, saying
   * why). */
  if (args->kind == XCOLL_COLL_GATHER || args->kind == XCOLL_COLL_SCATTER)
    /* A small one on host ranks: Bruck's (bruck.c), with no ring kernel
     * to fall back on; else core's binomial tree, over p2p. */
    return args->stream == NULL && bruck_takes(st, args);
  if (args->kind > XCOLL_COLL_BARRIER)
    return 0; /* all-to-all, groups: core's, over p2p */
  return st->gpu != NULL || args->stream == NULL;
}

/* xcoll_backend_coll_ops.agrees: the Bruck collectives compare every
 * rank's call before any rank completes (bruck.c), so core's agreement
 * round before a rooted call would only add a round. fill_work makes the
 * same choice from the same arguments. */
static int nl_agrees(void *state, const xcoll_coll_args *args) {
  return bruck_takes(state, args);
}

static xcoll_status nl_start(xcoll_comm *comm, void *state,
                             const xcoll_coll_args *args, nl_op **out) {
  nl_state *st = state;
  *out = NULL;
  if (atomic_load(&st->failed))
    return broken_status(st);
  /* Core runs an engine op only once its host algorithms are done: their
   * messages are off the mesh, whose links the mesh algorithms share. */
  if (!nl_p2p_idle(st))
    return xcoll_error(comm, XCOLL_ERR_INTERNAL,
                       "nccl_like: xcoll_%s started while point-to-point "
                       "messages are still in flight on the mesh",
                       xcoll_coll_name(args->kind));
  nl_op *op = op_get(st);
  if (!op)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for an op handle");
  op->args = *args;
  op->start_us = xcoll_trace_enabled() ? xcoll_time_us() : 0;
  if (st->gpu != NULL && !nl_gpu_supports(st, args)) {
    char why[512];
    op_put(st, op);
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT, "xcoll_%s: %s",
                       xcoll_coll_name(args->kind),
                       nl_gpu_refusal(st, args, why, sizeof why));
  }

  /* A world of one copies and has no one to compare fingerprints with; on
   * a GPU rank its kernel copies, on the stream. */
  if (st->world_size == 1 && st->gpu != NULL) {
    fill_work(st, op);
    xcoll_status s = nl_gpu_launch(st, op);
    if (s != XCOLL_SUCCESS) {
      op_put(st, op);
      return s;
    }
    op->channels_left = 0;
    *out = op;
    return XCOLL_SUCCESS;
  }
  if (st->world_size == 1) {
    if (args->kind != XCOLL_COLL_BARRIER && args->count > 0 &&
        args->sendbuf && args->recvbuf && args->sendbuf != args->recvbuf)
      memmove(args->recvbuf, args->sendbuf,
              args->count * xcoll_datatype_size(args->dtype));
    op->channels_left = 0;
    *out = op;
    return XCOLL_SUCCESS;
  }
  fill_work(st, op);
  op->deferred = 0;
  op->issued_at =
      !args->blocking && st->gpu == NULL && st->inline_wait ? nl_now() : 0.0;

  pthread_mutex_lock(&st->lock);
  op->seq = ++st->op_seq;
  /* In issue order, so that op k here meets op k of the other ranks. It
   * also wakes a sleeping proxy, which then drives the channels too. */
  op->fp_deferred = nl_fp_deferrable(st, op);
  if (nl_fp_record(st, &op->fp, op->fp_deferred, caller_steps(st, op),
                   nl_p2p_sent(st, st->next), &op->fp_index) != XCOLL_SUCCESS) {
    op_put_locked(st, op);
    pthread_mutex_unlock(&st->lock);
    return broken_status(st);
  }
  /* A zero count moves nothing; its fingerprint still goes to the next
   * rank, which must make the same call. */
  if (args->count == 0 && args->kind != XCOLL_COLL_BARRIER) {
    pthread_mutex_unlock(&st->lock);
    op->channels_left = 0;
    *out = op;
    return XCOLL_SUCCESS;
  }
  if (st->gpu != NULL) {
    /* The kernel goes on the stream in the order the fingerprints were
     * recorded: start() runs on the issuing thread, in issue order. */
    pthread_mutex_unlock(&st->lock);
    op->channels_left = 0;
    xcoll_status s = nl_gpu_launch(st, op);
    if (s != XCOLL_SUCCESS) {
      op_put(st, op);
      return s;
    }
    *out = op;
    return XCOLL_SUCCESS;
  }
  op->channels_left = op->nchannels;
  atomic_fetch_add(&st->ops_in_flight, 1);
  /* The proxy alone checks "no progress for timeout_s": one asleep since
   * the last op (past its linger) must wake for this one, even when the
   * waiting thread runs the op's channels and its fingerprint is batched
   * (then nothing else wakes it, and a peer that is alive but never makes
   * the call would hang this rank for ever). Back-to-back ops find it
   * napping, awake: no wake-up each. */
  if (st->proxy_idle)
    nl_proxy_wake(st);
  int pushed = 0;
  for (int c = 0; c < op->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    /* The blocking form's wait runs channel 0's item itself (nl_wait).
     * With nothing queued or running there, the item is taken now rather
     * than queued and taken back: the channel is this op's until nl_wait
     * has run it. */
    if (c == 0 && args->blocking && st->inline_wait && !ch->running &&
        ch->queue_head == ch->queue_tail && !atomic_load(&st->failed) &&
        !st->stopping) {
      ch->running = 1;
      op->claimed = ch;
      pushed++;
      continue;
    }
    while (ch->queue_tail - ch->queue_head == NL_QUEUE_DEPTH &&
           !atomic_load(&st->failed) && !st->stopping) {
      /* Items queued and not waited for: the workers must run them now. */
      if (atomic_load(&st->any_deferred))
        nl_stop_deferring_locked(st);
      ch->room_waiters++;
      pthread_cond_wait(&ch->queue_cond, &st->lock);
      ch->room_waiters--;
    }
    if (atomic_load(&st->failed) || st->stopping)
      break;
    ch->queue[ch->queue_tail % NL_QUEUE_DEPTH] = op;
    ch->queue_tail++;
    /* The blocking form's wait runs channel 0's item itself (nl_wait),
     * unless the worker, awake for an earlier item, takes it first: no
     * wake-up; so does a prompt waiter's (deferred kicks, at the top).
     * The other channels' workers run theirs in parallel. */
    if (c == 0 && !args->blocking && st->inline_wait &&
        xcoll_prompt_deferring(&st->prompt)) {
      op->deferred = 1;
      atomic_store(&st->any_deferred, 1);
    } else if (!(args->blocking && st->inline_wait && c == 0)) {
      pthread_cond_broadcast(&ch->queue_cond);
    }
    pushed++;
  }
  if (pushed < op->nchannels) {
    /* The comm failed while this op waited for room: the channels that did
     * not get it count as done (failed). */
    op->channels_left -= op->nchannels - pushed;
    if (op->status == XCOLL_SUCCESS)
      op->status = XCOLL_ERR_ABORTED;
    if (op->channels_left == 0)
      atomic_fetch_sub(&st->ops_in_flight, 1);
  }
  pthread_mutex_unlock(&st->lock);
  *out = op;
  return XCOLL_SUCCESS;
}

static xcoll_status nl_start_abi(xcoll_comm *comm, void *state,
                                 const xcoll_coll_args *args,
                                 xcoll_backend_op **op) {
  nl_op *mine = NULL;
  xcoll_status s = nl_start(comm, state, args, &mine);
  *op = (xcoll_backend_op *)mine;
  return s;
}

/* Under st->lock, on the wait of a host rank's non-blocking op: prompt
 * or late (core/prompt.h). */
static void note_wait_locked(nl_state *st, const nl_op *op) {
  if (!xcoll_prompt_note_wait(&st->prompt, op->issued_at, nl_now()))
    nl_stop_deferring_locked(st);
}

static xcoll_status nl_test(void *state, xcoll_backend_op *handle, int *done) {
  nl_state *st = state;
  nl_op *op = (nl_op *)handle;
  if (op->event != NULL) { /* a GPU rank's kernel */
    xcoll_status s = nl_gpu_test(st, op, done);
    if (s != XCOLL_SUCCESS) {
      op->status = s;
      return op_finish(st, op);
    }
    if (!*done)
      return XCOLL_SUCCESS;
  }
  pthread_mutex_lock(&st->lock);
  *done = op->channels_left == 0;
  if (!*done && op->issued_at > 0.0)
    nl_stop_deferring_locked(st); /* polled: it must move meanwhile */
  pthread_mutex_unlock(&st->lock);
  if (*done && st->world_size > 1 && !op->fp_deferred &&
      !nl_fp_judged(st, op->fp_index)) {
    /* The data moved; the call is not done until its fingerprint was
     * compared (nl_fp_await). */
    int progress = 0;
    nl_fp_progress(st, &progress);
    *done = nl_fp_judged(st, op->fp_index);
  }
  if (!*done)
    return XCOLL_SUCCESS;
  return op_finish(st, op);
}

static xcoll_status run_item(nl_state *st, nl_channel *ch, nl_op *op,
                             int *kick_out);
static void retire_locked(nl_state *st, nl_op *op, xcoll_status s, int kick);

/* Under st->lock, after an item was taken off ch's queue: wake the start()
 * calls waiting for room once the queue is down to half. */
static void room_freed(nl_channel *ch) {
  if (ch->room_waiters > 0 &&
      ch->queue_tail - ch->queue_head <= NL_QUEUE_DEPTH / 2)
    pthread_cond_broadcast(&ch->queue_cond);
}

/* Under st->lock: takes op's work item, or a deferred item queued before
 * it, off the head of one of its channels' queues when that channel's
 * worker is not running an item (so the channel still runs its items one
 * at a time, in issue order), or returns NULL. *taken is the op whose item
 * it is. */
static nl_channel *steal_item(nl_state *st, nl_op *op, nl_op **taken) {
  if (atomic_load(&st->failed) || st->stopping)
    return NULL;
  for (int c = 0; c < op->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    if (ch->running || ch->queue_head == ch->queue_tail)
      continue;
    /* Its own item, or a deferred one started before it (ahead of it in
     * the queue, and nobody else's to run now). */
    nl_op *head = ch->queue[ch->queue_head % NL_QUEUE_DEPTH];
    if (head != op && !(head->deferred && head->seq < op->seq))
      continue;
    ch->queue_head++;
    ch->running = 1;
    room_freed(ch);
    *taken = head;
    return ch;
  }
  return NULL;
}

/* Blocks until every channel has run op. The waiting thread runs the
 * channels' items that no worker has taken yet itself (steal_item), as a
 * caller of a blocking collective on the host would: a small collective
 * then goes from the issuing thread to the socket and back without a
 * wake-up of the worker and another of the waiter (the two hand-offs cost
 * a scheduler slice each on a loaded machine). Workers keep running the
 * items they took, and every item of nonblocking ops nobody waits for. */
static xcoll_status nl_wait(void *state, xcoll_backend_op *handle) {
  nl_state *st = state;
  nl_op *op = (nl_op *)handle;
  if (op->event != NULL) { /* a GPU rank's kernel */
    xcoll_status s = nl_gpu_wait(st, op);
    if (s != XCOLL_SUCCESS)
      op->status = s;
  }
  /* The item start() took for this thread (op->claimed) runs first, with
   * no lock; then those no worker has taken yet. Workers always finish:
   * kernels poll the abort flag, which a failure, the proxy's timeout or
   * comm_abort raises. */
  nl_channel *ch = op->claimed;
  nl_op *item = op; /* whose item ch runs: op's, or an earlier deferred op's */
  op->claimed = NULL;
  if (ch == NULL)
    pthread_mutex_lock(&st->lock);
  if (op->issued_at > 0.0)
    note_wait_locked(st, op);
  for (;;) {
    if (ch != NULL) {
      int kick = 0;
      xcoll_status s = run_item(st, ch, item, &kick);
      pthread_mutex_lock(&st->lock);
      retire_locked(st, item, s, kick);
      ch->running = 0;
      /* The worker's next item, unless it is deferred (a waiter's). */
      if (st->stopping ||
          (ch->queue_head != ch->queue_tail &&
           !ch->queue[ch->queue_head % NL_QUEUE_DEPTH]->deferred))
        pthread_cond_broadcast(&ch->queue_cond);
    }
    if (op->channels_left == 0)
      break;
    ch = st->inline_wait ? steal_item(st, op, &item) : NULL;
    if (ch == NULL)
      pthread_cond_wait(&st->done_cond, &st->lock);
    else
      pthread_mutex_unlock(&st->lock);
  }
  /* With no fingerprint to send or await, the op ends under this lock. */
  int fp_work = (caller_steps(st, op) && nl_fp_step_due(st)) ||
                (st->world_size > 1 && !op->fp_deferred);
  if (!fp_work) {
    char message[XCOLL_ERROR_BYTES];
    const char *name = NULL;
    xcoll_status status = op_finish_locked(st, op, message, &name);
    pthread_mutex_unlock(&st->lock);
    return op_report(st, status, message, name);
  }
  pthread_mutex_unlock(&st->lock);
  /* The batch of deferred fingerprints that this op made due, sent from
   * here rather than by waking the proxy (nl_fp_record). */
  if (caller_steps(st, op) && nl_fp_step_due(st)) {
    int progress = 0;
    nl_fp_progress(st, &progress);
  }
  /* Not done until its fingerprint was compared with the previous rank's
   * (bounded: the previous rank sent it before its data, which arrived);
   * a deferred one was, in the LL flags of every step it received. */
  if (st->world_size > 1 && !op->fp_deferred)
    nl_fp_await(st, op->fp_index, st->timeout_s);
  return op_finish(st, op);
}

const xcoll_backend_coll_ops nl_coll_ops = {
    .supports = nl_supports,
    .agrees = nl_agrees,
    .start = nl_start_abi,
    .test = nl_test,
    .wait = nl_wait,
};

/* ---- workers ---- */

typedef struct worker_arg {
  nl_state *st;
  int channel;
} worker_arg;

static void trace_channel_op(nl_state *st, nl_channel *ch, const nl_op *op,
                             double start_us) {
  if (!xcoll_trace_enabled())
    return;
  char args[160];
  snprintf(args, sizeof args,
           "\"channel\":%d,\"seq\":%llu,\"count\":%zu,\"proto\":\"%s\"",
           ch->id, (unsigned long long)op->args.seq, op->work.count,
           op->work.proto == XC_PROTO_LL ? "ll" : "simple");
  xcoll_trace_span(xcoll_coll_name(op->args.kind), "channel",
                   st->trace_base + (unsigned)ch->id, start_us,
                   xcoll_time_us(), args);
}

/* Before ch's kernel runs work of the op recorded as flight_id: what
 * nl_describe_op reads (nccl_like.h, nl_channel.run_id). */
static void publish_run(nl_channel *ch, const xc_work *work,
                        uint64_t flight_id) {
  /* A sequence lock in acquire/release operations only (no fences, which
   * ThreadSanitizer does not model; on x86 each is a plain store): run_id
   * is 0 while the fields change, then the op's id. Each field's release
   * store orders the 0 before it; the id's release store orders the fields
   * before it. The reader (nl_describe_op) loads run_id, the fields and
   * run_id again, each with acquire: a field written by an update makes
   * that update's 0 visible to the second load, which then differs. */
  atomic_store_explicit(&ch->run_id, 0, memory_order_relaxed);
  if (flight_id == 0)
    return;
  uint64_t sends = 0, recvs = 0;
  xc_ring_steps(work, ch->send.step_bytes, &sends, &recvs);
  atomic_store_explicit(&ch->run_send_base, ch->send.step,
                        memory_order_release);
  atomic_store_explicit(&ch->run_recv_base, ch->recv.step,
                        memory_order_release);
  atomic_store_explicit(&ch->run_send_steps, sends, memory_order_release);
  atomic_store_explicit(&ch->run_recv_steps, recvs, memory_order_release);
  atomic_store_explicit(&ch->run_id, flight_id, memory_order_release);
}

/* Runs op's item on ch (a kernel, or a mesh algorithm on channel 0) and
 * returns its status; *kick: slots are left to send, which the proxy must
 * finish (retire_locked wakes it). Takes no lock. */
static xcoll_status run_item(nl_state *st, nl_channel *ch, nl_op *op,
                             int *kick_out) {
  xcoll_status s = XCOLL_ERR_ABORTED;
  int kick = 0; /* slots left to send: the proxy must finish them */
  if (!atomic_load(&st->failed) && op->bruck) {
    s = nl_bruck_run(st, ch, op);
  } else if (!atomic_load(&st->failed) && op->pairwise) {
    s = op->rabenseifner ? nl_rabenseifner_run(st, ch, op)
                         : nl_pairwise_run(st, ch, op);
    /* A message of another size: ranks in different collectives (the
     * fingerprints say which), or memory. */
    if (s == XCOLL_ERR_PROTOCOL)
      nl_fp_explain_mesh(st, op->fp_index);
    if (s != XCOLL_SUCCESS && s != XCOLL_ERR_ABORTED)
      nl_fail(st, s, -1, "nccl_like: rank %d: the %s allreduce failed: %s",
              st->rank, op->rabenseifner ? "Rabenseifner" : "pairwise",
              xcoll_strerror(s));
  } else if (!atomic_load(&st->failed)) {
    xc_work work = op->work;
    work.channel = ch->id;
    work.progress = nl_proxy_progress_hook;
    work.progress_ctx = ch;
    if (ch->send_transport->posted != NULL ||
        ch->recv_transport->posted != NULL) {
      work.notify = nl_proxy_notify_hook;
      work.notify_ctx = ch;
    }
    work.scratch = ch->scratch;
    work.scratch_bytes = ch->scratch_bytes;
    double t0 = xcoll_trace_enabled() ? xcoll_time_us() : 0;
    publish_run(ch, &work, op->args.flight_id);
    /* Release: read by the proxy's periodic checks only, which need no
     * order against this thread's later loads. */
    atomic_store_explicit(&ch->busy, 1, memory_order_release);
    s = xc_ring_run(&work, &ch->send, &ch->recv, st->abort);
    atomic_store_explicit(&ch->busy, 0, memory_order_release);
    if (s == XCOLL_SUCCESS)
      atomic_store_explicit(&ch->run_id, 0, memory_order_relaxed);
    /* Post the slots the kernel filled last (nothing waited after them)
     * and drive them for a few passes (a small send completes as soon as
     * the socket takes it); the proxy thread finishes what is left. */
    for (int pass = 0; ch->send_transport->send_progress != NULL &&
                       pass < NL_TRAILING_PASSES;
         pass++) {
      (void)nl_proxy_progress_hook(ch, NULL, 0, 0);
      kick = atomic_load_explicit(&ch->send_mem->tail, memory_order_acquire) >
             atomic_load_explicit(&ch->send_mem->head, memory_order_acquire);
      if (!kick)
        break;
    }
    trace_channel_op(st, ch, op, t0);
    /* A slot that does not fit this rank's schedule is most often ranks
     * that called different collectives: let the fingerprints say which. */
    if (s == XCOLL_ERR_PROTOCOL)
      nl_fp_explain(st, op->fp_index);
    if (s != XCOLL_SUCCESS && s != XCOLL_ERR_ABORTED)
      nl_fail(st, s, -1,
              "nccl_like: rank %d channel %d: the %s kernel failed: %s",
              st->rank, ch->id, xcoll_coll_name(op->args.kind),
              xcoll_strerror(s));
  }
  *kick_out = kick;
  return s;
}

/* Under st->lock, after one of op's items ran (run_item). */
static void retire_locked(nl_state *st, nl_op *op, xcoll_status s, int kick) {
  if (s != XCOLL_SUCCESS && op->status == XCOLL_SUCCESS)
    op->status = s;
  if (--op->channels_left == 0) {
    atomic_fetch_sub(&st->ops_in_flight, 1);
    pthread_cond_broadcast(&st->done_cond);
  }
  if (kick)
    nl_proxy_wake(st);
}

static void run_one(nl_state *st, nl_channel *ch, nl_op *op) {
  int kick = 0;
  xcoll_status s = run_item(st, ch, op, &kick);
  pthread_mutex_lock(&st->lock);
  retire_locked(st, op, s, kick);
  pthread_mutex_unlock(&st->lock);
}

static void *worker_main(void *arg) {
  worker_arg wa = *(worker_arg *)arg;
  free(arg);
  nl_state *st = wa.st;
  nl_channel *ch = &st->channels[wa.channel];
  for (;;) {
    pthread_mutex_lock(&st->lock);
    while (ch->running ||
           (!st->stopping && ch->queue_head == ch->queue_tail))
      pthread_cond_wait(&ch->queue_cond, &st->lock);
    if (ch->queue_head == ch->queue_tail) { /* stopping, nothing queued */
      pthread_mutex_unlock(&st->lock);
      return NULL;
    }
    nl_op *op = ch->queue[ch->queue_head % NL_QUEUE_DEPTH];
    ch->queue_head++;
    ch->running = 1;
    room_freed(ch);
    pthread_mutex_unlock(&st->lock);
    run_one(st, ch, op);
    pthread_mutex_lock(&st->lock);
    ch->running = 0;
    pthread_mutex_unlock(&st->lock);
  }
}

/* Direct sends (kernels/prims.h): on with XCOLL_DIRECT=1 (default) for a
 * plugin whose isend takes any host address with a NULL mhandle (socket,
 * ucx: they register nothing). ibverbs needs every buffer registered, and
 * registering user buffers per op would cost more than the copy saved. */
static xcoll_status setup_direct(nl_state *st) {
  long direct = 1;
  xcoll_status s = xcoll_param_int("XCOLL_DIRECT", &direct);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(st->comm, s);
  st->direct = direct && st->net != NULL &&
               (strcmp(st->net->name, "socket") == 0 ||
                strcmp(st->net->name, "ucx") == 0);
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    /* Only where the proxy moves the bytes (net): over shm the kernels
     * meet in the receiver's slots. */
    int send_direct = st->direct && ch->send_transport == &nl_transport_net;
    int recv_direct = st->direct && ch->recv_transport == &nl_transport_net;
    memset(ch->send_from, 0, sizeof ch->send_from);
    ch->send.direct_from = send_direct ? ch->send_from : NULL;
    memset(ch->recv_to, 0, sizeof ch->recv_to);
    memset(ch->recv_to_bytes, 0, sizeof ch->recv_to_bytes);
    atomic_init(&ch->recv_req, 0);
    ch->recv.direct_req = recv_direct ? &ch->recv_req : NULL;
    ch->recv.direct_to = recv_direct ? ch->recv_to : NULL;
    ch->recv.direct_to_bytes = recv_direct ? ch->recv_to_bytes : NULL;
  }
  XCOLL_INFO("nccl_like: direct sends %s (XCOLL_DIRECT=%ld, net plugin %s)",
             st->direct ? "on: SIMPLE sends of user data skip the slot copy, "
                          "and receives of final output land in it"
                        : "off: every step is copied into a slot",
             direct, st->net ? st->net->name : "none");
  return XCOLL_SUCCESS;
}

xcoll_status nl_workers_start(nl_state *st) {
  if (st->world_size == 1)
    return XCOLL_SUCCESS;
  xcoll_status s = setup_direct(st);
  if (s != XCOLL_SUCCESS)
    return s;
  for (int c = 0; c < st->nchannels; c++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa)
      return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                         "nccl_like: out of memory for a worker thread");
    wa->st = st;
    wa->channel = c;
    if (pthread_create(&st->channels[c].worker, NULL, worker_main, wa) != 0) {
      free(wa);
      return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                         "nccl_like: cannot start the worker thread of "
                         "channel %d",
                         c);
    }
    st->channels[c].worker_started = 1;
  }
  return XCOLL_SUCCESS;
}

void nl_workers_join(nl_state *st) {
  for (int c = 0; c < st->nchannels; c++) {
    if (!st->channels[c].worker_started)
      continue;
    pthread_join(st->channels[c].worker, NULL);
    st->channels[c].worker_started = 0;
  }
}

/* ---- the flight recorder ---- */

/* Counters only, as a seqlock reader: run_id before (acquire) and after
 * the fields; a channel that moved on to another op meanwhile is left
 * out. */
int nl_describe_op(const void *state, uint64_t flight_id,
                   xcoll_backend_channel *out, int max) {
  nl_state *st = (nl_state *)state;
  if (flight_id == 0 || st == NULL || st->gpu != NULL)
    return 0;
  int n = 0;
  for (int c = 0; c < st->nchannels && n < max; c++) {
    nl_channel *ch = &st->channels[c];
    if (ch->send_mem == NULL || ch->recv_mem == NULL ||
        atomic_load(&ch->run_id) != flight_id)
      continue;
    xcoll_backend_channel d;
    memset(&d, 0, sizeof d);
    d.channel = c;
    d.waits_peer = -1;
    uint64_t send_base = atomic_load(&ch->run_send_base);
    uint64_t recv_base = atomic_load(&ch->run_recv_base);
    d.send_steps = atomic_load(&ch->run_send_steps);
    d.recv_steps = atomic_load(&ch->run_recv_steps);
    uint64_t tail = xc_load_acquire(&ch->send_mem->tail);
    uint64_t head = xc_load_acquire(&ch->recv_mem->head);
    d.sent = tail > send_base ? tail - send_base : 0;
    d.received = head > recv_base ? head - recv_base : 0;
    /* The hook's last wait, if the counter has not reached it since. */
    uintptr_t counter =
        atomic_load_explicit(&ch->wait_counter, memory_order_relaxed);
    uint64_t target =
        atomic_load_explicit(&ch->wait_target, memory_order_relaxed);
    if (counter == (uintptr_t)&ch->send_mem->head &&
        xc_load_acquire(&ch->send_mem->head) < target) {
      d.waits_peer = st->next;
      d.waits_send = 1;
      d.transport = ch->send_transport->name;
    } else if (counter == (uintptr_t)&ch->recv_mem->tail &&
               xc_load_acquire(&ch->recv_mem->tail) < target) {
      d.waits_peer = st->prev;
      d.waits_send = 0;
      d.transport = ch->recv_transport->name;
    }
    if (atomic_load(&ch->run_id) != flight_id)
      continue;
    out[n++] = d;
  }
  return n;
}
