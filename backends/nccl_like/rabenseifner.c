/* rabenseifner.c - Rabenseifner's allreduce on the nccl_like host engine's
 * mesh: a reduce-scatter by recursive halving, then an allgather by
 * recursive doubling (R. Rabenseifner, "Optimization of collective reduction
 * operations", ICCS 2004; R. Thakur, R. Rabenseifner, W. Gropp, IJHPCA
 * 19(1), 2005), for a power-of-two number of host ranks that outnumber the
 * cores (where the pairwise allreduce, pairwise.c, would run otherwise).
 *
 * Why: with more ranks than cores a step that needs a third rank waits for
 * it to be scheduled. In the pairwise allreduce every owner needs a unit
 * from all P-1 peers, so no two ranks that share the cores can finish a
 * unit between them; here each of the 2 log2(P) steps is an exchange with
 * one partner, and two ranks that run at once stream to each other at full
 * speed while the others wait their turn, their data still in cache when
 * it is read. Measured on 2 cores, P=4, 16 MiB (docs/nccl_like.md,
 * "Rabenseifner on the mesh"): the pairwise allreduce reached about 1 GB/s
 * busbw where tcp's Rabenseifner (core/algorithms/allreduce_rabenseifner.c)
 * reached 1.6-2.2; the same bytes cross the wire (2 (P-1)/P S per rank).
 *
 * Order of reduction: core's, so that results are bitwise tcp's
 * Rabenseifner (tests: nccl_like.rabenseifner_vs_tcp): the halving pairs
 * the ranks pow2/2 apart first, then pow2/4, ...; at each level the keeper
 * of a half reduces its partner's copy into its own, the lower rank's
 * partial as the left operand, with kernels/reduce.h's functors (the ones
 * core's dtype.c runs); the window splits as core's does (the lower half
 * length / 2 elements). Each element is reduced on one rank and copied to
 * the others, so every rank holds the same bits.
 *
 * Data path: level 0 sends from sendbuf and reduces sendbuf's kept half
 * with the partner's into recvbuf; later levels work in recvbuf only. A
 * half travels in units of at most NL_PAIRWISE_UNIT_BYTES, up to
 * NL_PAIRWISE_DEPTH in flight each way; halving units land in the stage
 * (pairwise.c's, first NL_PAIRWISE_DEPTH units), doubling units straight
 * in recvbuf. The halves sent and kept at a level are disjoint, so in place
 * (sendbuf == recvbuf) needs nothing more. A level starts once the previous
 * one has finished (its reductions feed the next level's sends). */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "reduce.h"
#include "trace.h"

/* Levels of a world of at most NL_PAIRWISE_MAX_RANKS ranks. */
#define RB_MAX_LEVELS 4

int nl_rabenseifner_on(const nl_state *st) {
  int p = st->world_size;
  return st->rabenseifner && p >= 2 && (p & (p - 1)) == 0;
}

int nl_rabenseifner_can_run(const nl_state *st, const nl_op *op) {
  const xc_work *w = &op->work;
  return nl_rabenseifner_on(st) && st->pairwise &&
         w->kind == XC_COLL_ALLREDUCE && w->proto == XC_PROTO_SIMPLE &&
         w->count > 0;
}

/* One direction of the current exchange: `total` elements in units of at
 * most unit_elems, posted and completed in order. */
typedef struct rb_dir {
  uint8_t *base; /* send: where the elements are; recv: where they land
                    (the stage when reducing) */
  size_t total, units;
  size_t posted, done;
  nl_mesh_request *req[NL_PAIRWISE_DEPTH];
} rb_dir;

typedef struct rb_run {
  nl_state *st;
  const xc_work *w;
  size_t elem, unit_elems;
  nl_mesh_link *out, *in; /* the links to and from the partner */
  int partner;
  /* Halving: result[i] = recv_first ? stage[i] op local[i] : local[i] op
   * stage[i]. */
  int reducing, recv_first;
  const uint8_t *local;
  uint8_t *result;
  rb_dir send, recv;
  /* The masks of the exchanges done so far, for a timeout's message. */
  int done_masks[2 * RB_MAX_LEVELS];
  int ndone;
  /* The exchange in flight, for a timeout's message: "halving" or
   * "doubling", and its level. */
  const char *what;
  int level;
} rb_run;

static size_t unit_len(const rb_run *r, const rb_dir *d, size_t i) {
  size_t at = i * r->unit_elems;
  return d->total - at < r->unit_elems ? d->total - at : r->unit_elems;
}

/* Where unit i of the receive lands. */
static uint8_t *recv_at(const rb_run *r, size_t i) {
  if (r->reducing)
    return r->st->pairwise_stage +
           (i % NL_PAIRWISE_DEPTH) * r->unit_elems * r->elem;
  return r->recv.base + i * r->unit_elems * r->elem;
}

/* Set up the exchange with `partner`: send `send_n` elements at send_base,
 * receive `recv_n` into recv_base (copy) or reduce them with local into
 * result (reducing). */
static void exchange_begin(rb_run *r, int partner, const uint8_t *send_base,
                           size_t send_n, uint8_t *recv_base, size_t recv_n,
                           int reducing, const uint8_t *local,
                           uint8_t *result) {
  nl_state *st = r->st;
  int p = st->world_size, me = st->rank;
  r->partner = partner;
  r->out = &st->mesh[st->mesh_of[(partner - me + p) % p]];
  r->in = &st->mesh[st->mesh_of[(me - partner + p) % p]];
  memset(&r->send, 0, sizeof r->send);
  memset(&r->recv, 0, sizeof r->recv);
  r->send.base = (uint8_t *)send_base;
  r->send.total = send_n;
  r->send.units = (send_n + r->unit_elems - 1) / r->unit_elems;
  r->recv.base = recv_base;
  r->recv.total = recv_n;
  r->recv.units = (recv_n + r->unit_elems - 1) / r->unit_elems;
  r->reducing = reducing;
  r->recv_first = partner < me;
  r->local = local;
  r->result = result;
}

/* Test d's oldest request in flight (on link m, carried by ops); a
 * request that completed or failed is released (NULL). *done and *bytes
 * as net.h's test. */
static xcoll_status test_oldest(nl_state *st, nl_mesh_link *m,
                                const nl_mesh_ops *ops, rb_dir *d, int *done,
                                size_t *bytes) {
  nl_mesh_request **request = &d->req[d->done % NL_PAIRWISE_DEPTH];
  *done = 0;
  *bytes = 0;
  xcoll_status s = ops->test(st, m, *request, done, bytes);
  if (s != XCOLL_SUCCESS || *done)
    *request = NULL;
  return s;
}

/* Post and test the exchange's messages, reducing each unit as it lands.
 * *done: every unit done both ways (an nl_mesh_step_fn; ctx: the rb_run). */
static xcoll_status exchange_step(void *ctx, int *progress, int *done) {
  rb_run *r = ctx;
  nl_state *st = r->st;
  const xc_work *w = r->w;
  xcoll_status s = XCOLL_SUCCESS;
  rb_dir *d = &r->send;
  while (d->posted < d->units && d->posted - d->done < NL_PAIRWISE_DEPTH) {
    nl_mesh_request *request = NULL;
    s = r->out->send_ops->isend(
        st, r->out, d->base + d->posted * r->unit_elems * r->elem,
        unit_len(r, d, d->posted) * r->elem, r->w->check, NULL, &request);
    if (s != XCOLL_SUCCESS)
      goto send_failed;
    if (request == NULL)
      break; /* back-pressure: retry on the next pass */
    d->req[d->posted % NL_PAIRWISE_DEPTH] = request;
    r->out->sends++, d->posted++, *progress = 1;
  }
  while (d->done < d->posted) {
    int done = 0;
    size_t bytes = 0;
    s = test_oldest(st, r->out, r->out->send_ops, d, &done, &bytes);
    if (s != XCOLL_SUCCESS)
      goto send_failed;
    if (!done)
      break;
    d->done++, *progress = 1;
    atomic_fetch_add(&st->mesh_moved, 1);
  }
  d = &r->recv;
  while (d->posted < d->units && d->posted - d->done < NL_PAIRWISE_DEPTH) {
    nl_mesh_request *request = NULL;
    s = r->in->recv_ops->irecv(st, r->in, recv_at(r, d->posted),
                               unit_len(r, d, d->posted) * r->elem,
                               r->w->check, NULL, &request);
    if (s != XCOLL_SUCCESS)
      goto recv_failed;
    if (request == NULL)
      break;
    d->req[d->posted % NL_PAIRWISE_DEPTH] = request;
    r->in->recvs++, d->posted++, *progress = 1;
  }
  while (d->done < d->posted) {
    int done = 0;
    size_t bytes = 0;
    s = test_oldest(st, r->in, r->in->recv_ops, d, &done, &bytes);
    if (s != XCOLL_SUCCESS)
      goto recv_failed;
    if (!done)
      break;
    size_t len = unit_len(r, d, d->done);
    if (bytes != len * r->elem) {
      XCOLL_WARN("nccl_like: rank %d: the Rabenseifner allreduce got %zu B "
                 "from rank %d where it expected %zu B: ranks in different "
                 "collectives?",
                 st->rank, bytes, r->partner, len * r->elem);
      return XCOLL_ERR_PROTOCOL;
    }
    if (r->reducing) {
      size_t at = d->done * r->unit_elems * r->elem;
      const uint8_t *got = recv_at(r, d->done);
      if (r->recv_first)
        xc_reduce_into(r->result + at, got, r->local + at, len, w->dtype,
                       w->op);
      else
        xc_reduce_into(r->result + at, r->local + at, got, len, w->dtype,
                       w->op);
    }
    d->done++, *progress = 1;
    atomic_fetch_add(&st->mesh_moved, 1);
  }
  /* nl_mesh_poll watches the links with a request in flight. */
  r->out->send_request = r->send.done < r->send.posted
                             ? r->send.req[r->send.done % NL_PAIRWISE_DEPTH]
                             : NULL;
  r->in->recv_request = r->recv.done < r->recv.posted
                            ? r->recv.req[r->recv.done % NL_PAIRWISE_DEPTH]
                            : NULL;
  *done = r->send.done == r->send.units && r->recv.done == r->recv.units;
  return XCOLL_SUCCESS;
recv_failed:
  /* PROTOCOL (a truncated message: a peer in another collective) goes to
   * the engine, which lets the fingerprints say. */
  if (s == XCOLL_ERR_PROTOCOL)
    return s;
  return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? r->partner : -1,
                 "nccl_like: rank %d: Rabenseifner receive from rank %d "
                 "failed: %s",
                 st->rank, r->partner, r->in->recv_ops->last_error(r->in));
send_failed:
  return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? r->partner : -1,
                 "nccl_like: rank %d: Rabenseifner send to rank %d failed: %s",
                 st->rank, r->partner, r->out->send_ops->last_error(r->out));
}

/* ", which may itself wait on rank(s) ...": the partners the partner had
 * before this exchange (a stopped rank blocks its partner, which blocks
 * its own next partner, ...); empty at the first exchange. */
static void partner_waits(const rb_run *r, char *out, size_t bytes) {
  size_t used = 0;
  int listed[2 * RB_MAX_LEVELS], n = 0;
  out[0] = '\0';
  for (int j = 0; j < r->ndone; j++) {
    int q = r->partner ^ r->done_masks[j], seen = q == r->st->rank;
    for (int k = 0; k < n && !seen; k++)
      seen = listed[k] == q;
    if (seen)
      continue;
    listed[n++] = q;
    int w = snprintf(out + used, bytes - used, "%s%d",
                     used ? ", " : ", which may itself wait on rank(s) ", q);
    if (w < 0 || (size_t)w >= bytes - used)
      break;
    used += (size_t)w;
  }
}

/* The partner of this exchange (an nl_mesh_waits_fn). */
static int rb_waits(void *ctx, int *ranks, int max) {
  rb_run *r = ctx;
  if (max < 1)
    return 0;
  ranks[0] = r->partner;
  return 1;
}

static xcoll_status rb_stuck(void *ctx, double waited_s) {
  rb_run *r = ctx;
  nl_state *st = r->st;
  char chain[128];
  partner_waits(r, chain, sizeof chain);
  return nl_fail_timeout(st, &r->partner, 1,
                 "nccl_like: rank %d made no progress for %.1f s "
                 "(XCOLL_TIMEOUT_S=%.1f) in a Rabenseifner allreduce "
                 "(%s level %d): waiting for rank %d (%zu of %zu units "
                 "in, %zu of %zu out)%s: is it alive and in the same "
                 "collective?",
                 st->rank, waited_s, st->timeout_s, r->what, r->level,
                 r->partner, r->recv.done, r->recv.units, r->send.done,
                 r->send.units, chain);
}

/* Drive the exchange to its end (nl_mesh_drive). `what` and `level` name
 * it for a timeout and the trace. */
static xcoll_status exchange_run(rb_run *r, const char *what, int level,
                                 unsigned track) {
  double t0 = xcoll_trace_enabled() ? xcoll_time_us() : 0;
  r->what = what;
  r->level = level;
  xcoll_status s =
      nl_mesh_drive(r->st, exchange_step, rb_waits, rb_stuck, r);
  if (s == XCOLL_SUCCESS && r->ndone < 2 * RB_MAX_LEVELS)
    r->done_masks[r->ndone++] = r->partner ^ r->st->rank;
  if (s == XCOLL_SUCCESS && xcoll_trace_enabled()) {
    char args[128];
    snprintf(args, sizeof args,
             "\"level\":%d,\"peer\":%d,\"sent\":%zu,\"received\":%zu", level,
             r->partner, r->send.total * r->elem, r->recv.total * r->elem);
    xcoll_trace_span(what, "channel", track, t0, xcoll_time_us(), args);
  }
  return s;
}

xcoll_status nl_rabenseifner_run(nl_state *st, nl_channel *ch, nl_op *op) {
  rb_run r;
  memset(&r, 0, sizeof r);
  r.st = st;
  r.w = &op->work;
  r.elem = xcoll_datatype_size(op->work.dtype);
  r.unit_elems = NL_PAIRWISE_UNIT_BYTES / r.elem;
  const xc_work *w = r.w;
  const int p = st->world_size, me = st->rank;
  uint8_t *recvbuf = w->recvbuf;
  const uint8_t *sendbuf = w->sendbuf;
  const unsigned track = st->trace_base + (unsigned)ch->id;
  double t0 = xcoll_trace_enabled() ? xcoll_time_us() : 0;

  /* This op's fingerprint goes to the next rank now (start() left it to
   * the proxy, which may be napping): the op there completes only once it
   * has compared it. */
  int fp_moved = 0;
  nl_fp_progress(st, &fp_moved);

  /* Halving: the window [lo, lo + length) this rank is responsible for
   * before each level; the doubling walks them back up. */
  size_t saved_lo[RB_MAX_LEVELS], saved_length[RB_MAX_LEVELS];
  size_t lo = 0, length = w->count;
  int levels = 0;
  xcoll_status s = XCOLL_SUCCESS;
  for (int mask = p / 2; mask >= 1 && s == XCOLL_SUCCESS; mask /= 2, levels++) {
    saved_lo[levels] = lo;
    saved_length[levels] = length;
    int partner = me ^ mask;
    size_t lower = length / 2, upper = length - lower;
    size_t keep_lo = (me & mask) == 0 ? lo : lo + lower;
    size_t keep_length = (me & mask) == 0 ? lower : upper;
    size_t give_lo = (me & mask) == 0 ? lo + lower : lo;
    size_t give_length = length - keep_length;
    /* Level 0 reads the input; later levels the partial sums in recvbuf. */
    const uint8_t *from = levels == 0 ? sendbuf : recvbuf;
    exchange_begin(&r, partner, from + give_lo * r.elem, give_length, NULL,
                   keep_length, 1, from + keep_lo * r.elem,
                   recvbuf + keep_lo * r.elem);
    s = exchange_run(&r, "halving", levels, track);
    lo = keep_lo, length = keep_length;
  }
  /* Doubling: at each level the partner holds the other part of the
   * parent window. */
  for (int level = levels - 1; level >= 0 && s == XCOLL_SUCCESS; level--) {
    int mask = p >> (level + 1);
    size_t parent_lo = saved_lo[level], parent_length = saved_length[level];
    size_t other_lo = (me & mask) == 0 ? parent_lo + length : parent_lo;
    exchange_begin(&r, me ^ mask, recvbuf + lo * r.elem, length,
                   recvbuf + other_lo * r.elem, parent_length - length, 0, NULL,
                   NULL);
    s = exchange_run(&r, "doubling", level, track);
    lo = parent_lo, length = parent_length;
  }
  if (s != XCOLL_SUCCESS) {
    /* No request may outlive the op: the failure aborted the comm, and the
     * links are torn down with it; forget what nl_mesh_poll watched. */
    if (r.out != NULL)
      r.out->send_request = NULL;
    if (r.in != NULL)
      r.in->recv_request = NULL;
    return s;
  }
  if (w->op == XCOLL_AVG)
    xc_scale_avg(recvbuf, w->count, w->dtype, p);
  int progress = 0;
  nl_fp_progress(st, &progress);
  if (xcoll_trace_enabled()) {
    char args[160];
    snprintf(args, sizeof args,
             "\"channel\":%d,\"seq\":%llu,\"count\":%zu,\"levels\":%d", ch->id,
             (unsigned long long)op->args.seq, w->count, levels);
    xcoll_trace_span("rabenseifner", "channel", track, t0, xcoll_time_us(),
                     args);
  }
  return XCOLL_SUCCESS;
}
