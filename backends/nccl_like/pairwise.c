/* pairwise.c - the pairwise allreduce of the nccl_like host engine: the
 * ring's reduction (its pieces, reduced in its order, so the results are
 * bitwise the ring's) with another schedule, for hosts where ranks
 * outnumber cores.
 *
 * Why: in the ring (kernels/ring.h) a piece is reduced along a chain of
 * P ranks and then copied along another of P-1, and each hop waits until
 * the rank that holds the data is scheduled. With 4 ranks on 2 cores that
 * is a wait in most steps: the ring reached 0.8-0.9 GB/s busbw at 16 MiB
 * where tcp's Rabenseifner (log2 P exchanges of large halves) reached
 * 1.3-1.6 (docs/nccl_like.md). Here every rank sends each piece of its
 * input straight to the piece's owner, and each owner sends the reduced
 * piece straight to every rank: a message waits on its sender only, and a
 * rank that is scheduled moves every message whose data is in.
 *
 * Pieces: those of xc_ring_allreduce for the ring's channel count (each
 * channel a share, each loop k chunks, chunk c owned by ring position c,
 * which is rank c on a host comm). The owner reduces chunk c of a loop as
 * the ring does: acc = x[c+1]; acc = acc op x[c+j] for j = 2..P-1 (the
 * received value first, as xc_recv_reduce_send); out = acc op x[c]
 * (xc_recv_reduce_copy_send). AVG divides the output at the end, as the
 * kernels do. Pieces travel in units of at most NL_PAIRWISE_UNIT_BYTES so
 * that the stage holds one unit per peer.
 *
 * Messages on the mesh link to rank o (distance d = o - rank): this rank's
 * input units that o owns, in order, then this rank's reduced units; the
 * link from rank q carries q's input units that this rank owns, then q's
 * reduced units. Each side posts them in that order, one at a time per
 * link, from and into user memory (no copy but the stage). A reduced unit
 * of q is received into recvbuf only after this rank's input of it went to
 * q (in place, it overwrites that input). Nothing waits on a cycle: input
 * units go unconditionally, a stage frees once every peer's unit is in,
 * and a reduced unit goes once the owner's stage had all of them.
 *
 * Checking: the op's fingerprint goes on the fingerprint connection and
 * the op completes only once it was judged (desync.c), as any SIMPLE op; a
 * message of another size (a peer in another collective) fails the op with
 * PROTOCOL, and the engine lets the fingerprints explain it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "reduce.h"
#include "ring.h"
#include "trace.h"

/* One unit: elements [off, off + len) of the buffers, owned by `owner`. */
typedef struct pw_unit {
  size_t off, len;
  int owner;
} pw_unit;

/* The op's units sorted by owner (partition order within an owner):
 * owner o's are unit[first[o] .. first[o + 1]). */
typedef struct pw_plan {
  pw_unit *unit;
  size_t first[NL_PAIRWISE_MAX_RANKS + 1];
} pw_plan;

/* Per link (distance d): messages posted and completed, each way, and
 * the requests in flight (message i's at i % NL_PAIRWISE_DEPTH). */
typedef struct pw_link {
  size_t sent, send_done, recvd, recv_done;
  nl_mesh_request *send_req[NL_PAIRWISE_DEPTH];
  nl_mesh_request *recv_req[NL_PAIRWISE_DEPTH];
} pw_link;

int nl_pairwise_can_run(const nl_state *st, const nl_op *op) {
  const xc_work *w = &op->work;
  return st->pairwise && w->kind == XC_COLL_ALLREDUCE &&
         w->proto == XC_PROTO_SIMPLE && w->count > 0;
}

/* Visit the ring's pieces (xc_ring_allreduce's loop, per channel share),
 * cut into units of at most max_elems; with plan->unit NULL only count
 * each owner's units into first[o + 1]. */
static void plan_pieces(const nl_state *st, const xc_work *w, size_t elem,
                        size_t max_elems, pw_plan *plan, size_t *fill) {
  int k = st->world_size;
  size_t unit16 = 16 / elem;
  size_t step_elems =
      xc_step_payload_bytes(st->step_bytes, XC_PROTO_SIMPLE) / elem;
  size_t chunk = (size_t)w->chunk_steps * step_elems;
  size_t loop = (size_t)k * chunk;
  for (int c = 0; c < w->nchannels; c++) {
    size_t base, n;
    xc_channel_share(w->count, elem, c, w->nchannels, &base, &n);
    for (size_t grid = 0; grid < n; grid += loop) {
      size_t rest = n - grid;
      size_t per = (rest + (size_t)k - 1) / (size_t)k;
      per = (per + unit16 - 1) / unit16 * unit16;
      size_t real_chunk = per < chunk ? per : chunk;
      for (int owner = 0; owner < k; owner++) {
        size_t at = (size_t)owner * real_chunk;
        if (at >= rest)
          continue;
        size_t len = rest - at < real_chunk ? rest - at : real_chunk;
        for (size_t u = 0; u < len; u += max_elems) {
          size_t part = len - u < max_elems ? len - u : max_elems;
          if (plan->unit == NULL)
            plan->first[owner + 1]++;
          else
            plan->unit[fill[owner]++] =
                (pw_unit){base + grid + at + u, part, owner};
        }
      }
    }
  }
}

static xcoll_status plan_build(const nl_state *st, const xc_work *w,
                               size_t elem, pw_plan *plan) {
  memset(plan, 0, sizeof *plan);
  size_t max_elems = NL_PAIRWISE_UNIT_BYTES / elem;
  plan_pieces(st, w, elem, max_elems, plan, NULL);
  for (int o = 0; o < st->world_size; o++)
    plan->first[o + 1] += plan->first[o];
  size_t total = plan->first[st->world_size];
  plan->unit = malloc((total ? total : 1) * sizeof *plan->unit);
  if (plan->unit == NULL)
    return XCOLL_ERR_NO_MEMORY;
  size_t fill[NL_PAIRWISE_MAX_RANKS];
  memcpy(fill, plan->first, sizeof fill);
  plan_pieces(st, w, elem, max_elems, plan, fill);
  return XCOLL_SUCCESS;
}

static size_t units_of(const pw_plan *plan, int owner) {
  return plan->first[owner + 1] - plan->first[owner];
}

typedef struct pw_run {
  nl_state *st;
  const xc_work *w;
  size_t elem;
  pw_plan plan;
  pw_link link[NL_PAIRWISE_MAX_RANKS]; /* by distance, 1..P-1 */
  size_t reduced;                      /* this rank's units reduced */
  size_t unit_bytes;
} pw_run;

/* The stage slot of distance d's unit i (this rank's units, in order). */
static uint8_t *stage_of(const pw_run *r, int d, size_t i) {
  return r->st->pairwise_stage +
         ((size_t)(d - 1) * NL_PAIRWISE_DEPTH + i % NL_PAIRWISE_DEPTH) *
             r->unit_bytes;
}

/* Message i on the link to rank + d: the unit, and where it comes from
 * (NULL: not ready yet, a reduced unit not reduced yet). */
static const uint8_t *send_message(const pw_run *r, int d, size_t i,
                                   const pw_unit **unit) {
  int me = r->st->rank, p = r->st->world_size;
  int to = (me + d) % p;
  size_t inputs = units_of(&r->plan, to);
  if (i < inputs) {
    *unit = &r->plan.unit[r->plan.first[to] + i];
    return (const uint8_t *)r->w->sendbuf + (*unit)->off * r->elem;
  }
  i -= inputs;
  *unit = &r->plan.unit[r->plan.first[me] + i];
  return i < r->reduced
             ? (const uint8_t *)r->w->recvbuf + (*unit)->off * r->elem
             : NULL;
}

/* Message i on the link from rank - d: where it lands (NULL: not yet). */
static uint8_t *recv_message(const pw_run *r, int d, size_t i,
                             const pw_unit **unit) {
  int me = r->st->rank, p = r->st->world_size;
  int from = (me - d + p) % p;
  size_t inputs = units_of(&r->plan, me);
  if (i < inputs) {
    *unit = &r->plan.unit[r->plan.first[me] + i];
    /* Its stage slot is free once unit i - DEPTH was reduced. */
    return i < r->reduced + NL_PAIRWISE_DEPTH ? stage_of(r, d, i) : NULL;
  }
  i -= inputs;
  *unit = &r->plan.unit[r->plan.first[from] + i];
  /* In place, the reduced unit overwrites this rank's input of it: only
   * once that input went to `from` (message i of the link to it). */
  return r->link[p - d].send_done > i
             ? (uint8_t *)r->w->recvbuf + (*unit)->off * r->elem
             : NULL;
}

/* Messages on the link to rank + d (is_send) or from rank - d: the units
 * of that peer and this rank's. */
static size_t messages(const pw_run *r, int d, int is_send) {
  int me = r->st->rank, p = r->st->world_size;
  int peer = is_send ? (me + d) % p : (me - d + p) % p;
  return units_of(&r->plan, peer) + units_of(&r->plan, me);
}

/* Reduce this rank's next unit once every peer's input of it is staged:
 * the ring's order, x[me+1] first (the stage of distance P-1), x[me] last. */
static int reduce_ready(pw_run *r) {
  nl_state *st = r->st;
  int p = st->world_size, me = st->rank;
  if (r->reduced >= units_of(&r->plan, me))
    return 0;
  for (int d = 1; d < p; d++)
    if (r->link[d].recv_done <= r->reduced)
      return 0;
  const pw_unit *u = &r->plan.unit[r->plan.first[me] + r->reduced];
  const xc_work *w = r->w;
  uint8_t *acc = stage_of(r, p - 1, r->reduced);
  for (int j = 2; j < p; j++)
    xc_reduce_into(acc, acc, stage_of(r, p - j, r->reduced), u->len, w->dtype,
                   w->op);
  size_t at = u->off * r->elem;
  xc_reduce_into((uint8_t *)w->recvbuf + at, acc,
                 (const uint8_t *)w->sendbuf + at, u->len, w->dtype, w->op);
  r->reduced++;
  return 1;
}

/* Post and test every link's next message each way; reduce what is in.
 * *done: every message done and every unit reduced (an nl_mesh_step_fn;
 * ctx: the pw_run). */
static xcoll_status pw_step(void *ctx, int *progress, int *done) {
  pw_run *r = ctx;
  nl_state *st = r->st;
  int p = st->world_size;
  size_t left = 0;
  for (int d = 1; d < p; d++) {
    nl_mesh_link *m = &st->mesh[st->mesh_of[d]];
    pw_link *l = &r->link[d];
    const pw_unit *unit = NULL;
    xcoll_status s = XCOLL_SUCCESS;
    size_t nsend = messages(r, d, 1), nrecv = messages(r, d, 0);
    while (l->sent < nsend && l->sent - l->send_done < NL_PAIRWISE_DEPTH) {
      const uint8_t *from = send_message(r, d, l->sent, &unit);
      nl_mesh_request *request = NULL;
      if (from == NULL)
        break;
      s = m->send_ops->isend(st, m, from, unit->len * r->elem, r->w->check,
                             NULL, &request);
      if (s != XCOLL_SUCCESS)
        goto send_failed;
      if (request == NULL)
        break; /* back-pressure: retry on the next pass */
      l->send_req[l->sent % NL_PAIRWISE_DEPTH] = request;
      m->sends++, l->sent++, *progress = 1;
    }
    while (l->send_done < l->sent) {
      int done = 0;
      size_t bytes = 0;
      nl_mesh_request **request =
          &l->send_req[l->send_done % NL_PAIRWISE_DEPTH];
      s = m->send_ops->test(st, m, *request, &done, &bytes);
      if (s != XCOLL_SUCCESS) {
        *request = NULL;
        goto send_failed;
      }
      if (!done)
        break;
      *request = NULL;
      l->send_done++;
      atomic_fetch_add(&st->mesh_moved, 1);
      *progress = 1;
    }
    while (l->recvd < nrecv && l->recvd - l->recv_done < NL_PAIRWISE_DEPTH) {
      uint8_t *to = recv_message(r, d, l->recvd, &unit);
      nl_mesh_request *request = NULL;
      if (to == NULL)
        break;
      s = m->recv_ops->irecv(st, m, to, unit->len * r->elem, r->w->check,
                             NULL, &request);
      if (s != XCOLL_SUCCESS)
        goto recv_failed;
      if (request == NULL)
        break;
      l->recv_req[l->recvd % NL_PAIRWISE_DEPTH] = request;
      m->recvs++, l->recvd++, *progress = 1;
    }
    while (l->recv_done < l->recvd) {
      int done = 0;
      size_t bytes = 0;
      nl_mesh_request **request =
          &l->recv_req[l->recv_done % NL_PAIRWISE_DEPTH];
      s = m->recv_ops->test(st, m, *request, &done, &bytes);
      if (s != XCOLL_SUCCESS) {
        *request = NULL;
        goto recv_failed;
      }
      if (!done)
        break;
      *request = NULL;
      (void)recv_message(r, d, l->recv_done, &unit);
      if (bytes != unit->len * r->elem) {
        XCOLL_WARN("nccl_like: rank %d: the pairwise allreduce got %zu B "
                   "from rank %d where it expected %zu B: ranks in "
                   "different collectives?",
                   st->rank, bytes, m->from, unit->len * r->elem);
        return XCOLL_ERR_PROTOCOL;
      }
      l->recv_done++;
      atomic_fetch_add(&st->mesh_moved, 1);
      *progress = 1;
    }
    /* nl_mesh_poll watches the links with a request in flight. */
    m->send_request = l->send_done < l->sent
                          ? l->send_req[l->send_done % NL_PAIRWISE_DEPTH]
                          : NULL;
    m->recv_request = l->recv_done < l->recvd
                          ? l->recv_req[l->recv_done % NL_PAIRWISE_DEPTH]
                          : NULL;
    left += (nsend - l->send_done) + (nrecv - l->recv_done);
    continue;
  recv_failed:
    /* The plugin's PROTOCOL (a truncated message: a peer in another
     * collective) goes to the engine, which lets the fingerprints say. */
    if (s == XCOLL_ERR_PROTOCOL)
      return s;
    return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? m->from : -1,
                   "nccl_like: rank %d: pairwise receive from rank %d "
                   "failed: %s",
                   st->rank, m->from, m->recv_ops->last_error(m));
  send_failed:
    return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? m->to : -1,
                   "nccl_like: rank %d: pairwise send to rank %d failed: %s",
                   st->rank, m->to, m->send_ops->last_error(m));
  }
  while (reduce_ready(r))
    *progress = 1;
  left += units_of(&r->plan, st->rank) - r->reduced;
  *done = left == 0;
  return XCOLL_SUCCESS;
}

/* "rank 3 (2 of 5 messages)": the peers whose messages have not all
 * landed, for a timeout's message. */
static void missing_peers(const pw_run *r, char *out, size_t bytes) {
  size_t used = 0;
  int p = r->st->world_size;
  out[0] = '\0';
  for (int d = 1; d < p && used < bytes; d++) {
    size_t want = messages(r, d, 0);
    if (r->link[d].recv_done == want)
      continue;
    int w = snprintf(out + used, bytes - used,
                     "%srank %d (%zu of %zu messages in)", used ? ", " : "",
                     (r->st->rank - d + p) % p, r->link[d].recv_done, want);
    if (w < 0)
      break;
    used += (size_t)w;
  }
}

/* The peers whose messages have not all landed (an nl_mesh_waits_fn). */
static int pw_waits(void *ctx, int *ranks, int max) {
  pw_run *r = ctx;
  int p = r->st->world_size, n = 0;
  for (int d = 1; d < p && n < max; d++)
    if (r->link[d].recv_done != messages(r, d, 0))
      ranks[n++] = (r->st->rank - d + p) % p;
  return n;
}

static xcoll_status pw_stuck(void *ctx, double waited_s) {
  pw_run *r = ctx;
  nl_state *st = r->st;
  char who[256];
  missing_peers(r, who, sizeof who);
  int waits[NL_PAIRWISE_MAX_RANKS];
  int count = pw_waits(r, waits, NL_PAIRWISE_MAX_RANKS);
  return nl_fail_timeout(st, waits, count,
                 "nccl_like: rank %d made no progress for %.1f s "
                 "(XCOLL_TIMEOUT_S=%.1f) in a pairwise allreduce: waiting "
                 "for %s: are they alive and in the same collective?",
                 st->rank, waited_s, st->timeout_s,
                 who[0] ? who : "rank(s) to take this rank's messages");
}

xcoll_status nl_pairwise_run(nl_state *st, nl_channel *ch, nl_op *op) {
  pw_run r;
  memset(&r, 0, sizeof r);
  r.st = st;
  r.w = &op->work;
  r.elem = xcoll_datatype_size(op->work.dtype);
  r.unit_bytes = NL_PAIRWISE_UNIT_BYTES / r.elem * r.elem;
  double t0 = xcoll_trace_enabled() ? xcoll_time_us() : 0;
  xcoll_status s = plan_build(st, r.w, r.elem, &r.plan);
  if (s != XCOLL_SUCCESS)
    return nl_fail(st, s, -1,
                   "nccl_like: rank %d: out of memory for the pairwise "
                   "allreduce's plan of %zu elements",
                   st->rank, op->work.count);

  /* This op's fingerprint goes to the next rank now (start() left it to
   * the proxy, which may be napping): the op there completes only once it
   * has compared it. */
  int fp_moved = 0;
  nl_fp_progress(st, &fp_moved);
  s = nl_mesh_drive(st, pw_step, pw_waits, pw_stuck, &r);
  free(r.plan.unit);
  if (s != XCOLL_SUCCESS)
    return s;
  if (op->work.op == XCOLL_AVG)
    xc_scale_avg(op->work.recvbuf, op->work.count, op->work.dtype,
                 st->world_size);
  int progress = 0;
  nl_fp_progress(st, &progress);
  if (xcoll_trace_enabled()) {
    char args[160];
    snprintf(args, sizeof args,
             "\"channel\":%d,\"seq\":%llu,\"count\":%zu,\"units\":%zu", ch->id,
             (unsigned long long)op->args.seq, op->work.count,
             r.plan.first[st->world_size]);
    xcoll_trace_span("pairwise", "channel", st->trace_base + (unsigned)ch->id,
                     t0, xcoll_time_us(), args);
  }
  return XCOLL_SUCCESS;
}
