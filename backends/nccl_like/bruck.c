/* bruck.c - the Bruck collectives of the nccl_like host engine, for small
 * calls on comms of host ranks: every rank's input is allgathered with
 * Bruck's algorithm over direct connections to the ranks 1, 2, 4, ... away
 * (channel.c's mesh links), then every rank finishes the call from the P
 * inputs itself: an allreduce reduces them in rank order, an allgather
 * puts them in rank order, a reduce-scatter reduces its own block of each,
 * a reduce does the allreduce's work on the root only, a broadcast
 * copies the root's input (the other ranks send zeros in its place), a
 * gather puts the inputs in rank order on the root, and a scatter's ranks
 * each copy their block of the root's input (its whole buffer; zeros
 * elsewhere). Gather and scatter have no ring kernel: engine.c takes them
 * only where this runs them (nl_supports).
 *
 * Why: a small collective is latency-bound. The ring takes 2(P-1)
 * dependent messages for an allreduce, P-1 for the others, and the gather
 * algorithm (kernels/ring.h: a ring allgather of the inputs, reduced
 * locally) P-1; on a host where ranks outnumber cores each of them is a
 * wake-up of the next rank by the scheduler. Bruck's allgather (J. Bruck,
 * C.-T. Ho, S. Kipnis, E. Upfal, D. Weathersby, "Efficient algorithms for
 * all-to-all communications in multiport message-passing systems", IEEE
 * TPDS 8(11), 1997) takes ceil(log2 P) rounds for any P: in round k a rank
 * sends the blocks it holds (block j is the input of rank - j), at most
 * 2^k of them, to rank + 2^k and receives as many from rank - 2^k into
 * blocks [2^k, 2^k + cnt). The bytes sent per rank are (P-1) S, as the
 * gather's, for an input of S bytes (a reduce-scatter's input is P times
 * its output, a scatter's the root's whole buffer, and the zeros of a
 * broadcast and a scatter are sent as data: bytes that a small call does
 * not notice). Here a round's send leaves as soon as
 * the blocks it carries are in, and every receive is posted at once, so
 * at P=3 both sends leave at once (each carries only the rank's own
 * input). tcp's recursive doubling also takes log2 P rounds, but exchanges
 * partial sums, whose order differs from the gather's; NCCL keeps to ring
 * and tree.
 *
 * Results: an allreduce's inputs are reduced as acc = x[0] op x[1], then
 * acc op x[q] for q = 2..P-1, with kernels/reduce.h's functors: the order
 * and the functions of xc_gather_allreduce. A reduce-scatter's block o and
 * a reduce to root o are reduced as the ring kernels reduce them,
 * x[o+1] op x[o+2] ... op x[o]. So each result is bitwise what GPU ranks
 * and mixed rings compute (they run the gather and the ring), the same on
 * every rank and from run to run. AVG divides once at the end
 * (xc_scale_avg), as the kernels do.
 *
 * Checking: each message carries the sender's fingerprint of the call, and
 * the receiver compares it with its own before it uses the blocks; every
 * rank's call is compared by the rank after it (round 0), and a block
 * forwarded later was compared on its way. A rank completes only once it
 * holds every rank's block, each of which came along a chain of equal
 * fingerprints: so every rank that returns success made the same call as
 * all the others, root included, and core need not agree on a rooted call
 * first (nl_agrees). The op's fingerprint on the fingerprint connection is
 * deferred, as an LL collective's (desync.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "fingerprint.h"
#include "log.h"
#include "nccl_like.h"
#include "reduce.h"
#include "trace.h"

/* Bytes of one rank's input to the allgather: what the root's sendbuf
 * holds, from the table of collectives (a reduce-scatter's and a
 * scatter's: world_size blocks). */
static size_t input_bytes(const xcoll_coll_info *info, size_t count,
                          xcoll_datatype dtype, int world_size) {
  size_t elems = info->send_per_rank ? count * (size_t)world_size : count;
  return elems * xcoll_datatype_size(dtype);
}

int nl_bruck_fits(const nl_state *st, int kind, size_t count,
                  xcoll_datatype dtype, int proto) {
  const xcoll_coll_info *info = xcoll_coll_info_of((xcoll_coll_kind)kind);
  /* At 2 ranks the ring (or the gather) already is one exchange, each way
   * checked in its LL flags; a rooted call is not: there Bruck's one
   * round replaces core's agreement round and the ring's hop (gather and
   * scatter: the binomial tree's message). */
  return st->bruck && proto == XC_PROTO_LL && info != NULL &&
         (info->has_root || st->world_size >= NL_BRUCK_MIN_RANKS) &&
         (info->has_root || kind == XCOLL_COLL_ALLREDUCE ||
          kind == XCOLL_COLL_ALLGATHER || kind == XCOLL_COLL_REDUCE_SCATTER) &&
         input_bytes(info, count, dtype, st->world_size) <=
             NL_GATHER_MAX_BYTES;
}

int nl_bruck_can_run(const nl_state *st, const nl_op *op) {
  /* work.kind: a barrier is filled as a 1-element allreduce. */
  return nl_bruck_fits(st, op->work.kind, op->work.count, op->work.dtype,
                       op->work.proto);
}

/* The header: the 24-byte fingerprint encoding, then the bytes of one
 * rank's input (little-endian u32), then zeros. */
static void header_write(uint8_t *out, const xcoll_fingerprint *fp,
                         size_t block) {
  memset(out, 0, NL_BRUCK_HEADER_BYTES);
  xcoll_fingerprint_encode(fp, out);
  for (int i = 0; i < 4; i++)
    out[XCOLL_FINGERPRINT_BYTES + i] = (uint8_t)(block >> (8 * i));
}

static size_t header_block(const uint8_t *in) {
  size_t block = 0;
  for (int i = 0; i < 4; i++)
    block |= (size_t)in[XCOLL_FINGERPRINT_BYTES + i] << (8 * i);
  return block;
}

/* One round of the schedule: send this rank's blocks [0, cnt) to rank + d
 * over mesh link k (d = 2^k), receive rank - d's blocks [0, cnt) into
 * blocks [d, d + cnt). Its receive lands at mesh_in + stage. */
typedef struct nl_round {
  int d, cnt;
  size_t stage;
  int sent, landed;
} nl_round;

/* Room for round r's receive: cnt blocks of the largest size, so that a
 * peer that called another Bruck allreduce (another count) is found by
 * its fingerprint, not by a truncated receive. */
static size_t room_of(const nl_round *r) {
  return NL_BRUCK_HEADER_BYTES + (size_t)r->cnt * NL_GATHER_MAX_BYTES;
}

/* Bruck's rounds for p ranks: d = 2^k, cnt = min(2^k, p - 2^k). */
static int schedule(int p, nl_round *rounds) {
  int n = 0;
  size_t stage = 0;
  for (int d = 1; d < p; d *= 2) {
    int cnt = d < p - d ? d : p - d;
    rounds[n] = (nl_round){.d = d, .cnt = cnt, .stage = stage};
    stage += room_of(&rounds[n++]);
  }
  return n;
}

/* Rank `from`'s message of round r against this rank's call; then its
 * blocks go to their place. */
static xcoll_status land(nl_state *st, const xcoll_fingerprint *ours,
                         const nl_round *r, size_t bytes, size_t block) {
  int from = (st->rank - r->d + st->world_size) % st->world_size;
  const uint8_t *msg = st->mesh_in + r->stage;
  xcoll_fingerprint theirs;
  if (bytes < NL_BRUCK_HEADER_BYTES ||
      xcoll_fingerprint_decode(msg, &theirs) != 0 || !theirs.valid)
    return nl_fail_everywhere(
        st, XCOLL_ERR_PROTOCOL,
        "nccl_like: rank %d got a malformed Bruck message (%zu B) from "
        "rank %d: a corrupted connection or another xcoll version",
        st->rank, bytes, from);
  if (!xcoll_fingerprint_equal(ours, &theirs) || header_block(msg) != block ||
      bytes != NL_BRUCK_HEADER_BYTES + (size_t)r->cnt * block) {
    char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
    xcoll_fingerprint_mismatch(st->rank, ours, from, &theirs, sentence,
                               sizeof sentence);
    return nl_fail_everywhere(
        st, XCOLL_ERR_PROTOCOL,
        "nccl_like: collective mismatch: %s (found by rank %d in the "
        "Bruck message rank %d sent for its collective #%" PRIu64 "): "
        "every rank must call the same collectives in the same order with "
        "the same count, dtype, op and root",
        sentence, st->rank, from, theirs.seq);
  }
  memcpy(st->mesh_out + NL_BRUCK_HEADER_BYTES + (size_t)r->d * block,
         msg + NL_BRUCK_HEADER_BYTES, (size_t)r->cnt * block);
  return XCOLL_SUCCESS;
}

/* One Bruck allreduce or allgather in flight, for nl_mesh_drive. */
typedef struct bruck_run {
  nl_state *st;
  const nl_op *op;
  nl_round rounds[NL_BRUCK_MAX_LINKS];
  int nrounds;
  size_t block;
} bruck_run;

/* Round r's send: posted once the blocks it carries are in, then tested. */
static xcoll_status send_part(bruck_run *b, nl_round *r, int *progress) {
  nl_state *st = b->st;
  nl_mesh_link *m = &st->mesh[st->mesh_of[r->d]];
  xcoll_status s = XCOLL_SUCCESS;
  if (r->sent)
    return XCOLL_SUCCESS;
  if (m->send_request == NULL) {
    for (int j = 0; j < b->nrounds; j++)
      if (b->rounds[j].d < r->cnt && !b->rounds[j].landed)
        return XCOLL_SUCCESS; /* a block it carries is not in yet */
    s = m->send_ops->isend(st, m, st->mesh_out,
                           NL_BRUCK_HEADER_BYTES + (size_t)r->cnt * b->block,
                           NL_MESH_UNCHECKED, NULL, &m->send_request);
    if (s != XCOLL_SUCCESS)
      goto failed;
    if (m->send_request == NULL)
      return XCOLL_SUCCESS; /* the plugin said "retry" */
    m->sends++, *progress = 1;
  }
  int done = 0;
  size_t bytes = 0;
  s = m->send_ops->test(st, m, m->send_request, &done, &bytes);
  if (s != XCOLL_SUCCESS) {
    m->send_request = NULL;
    goto failed;
  }
  if (done) {
    m->send_request = NULL;
    r->sent = 1;
    atomic_fetch_add(&st->mesh_moved, 1);
    *progress = 1;
  }
  return XCOLL_SUCCESS;
failed:
  return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? m->to : -1,
                 "nccl_like: rank %d: Bruck send to rank %d failed: %s",
                 st->rank, m->to, m->send_ops->last_error(m));
}

/* Round r's receive: posted at once, then tested; a message that landed
 * is checked and its blocks go to their place (land). Sets *landed. */
static xcoll_status recv_part(bruck_run *b, nl_round *r, int *progress,
                              int *landed) {
  nl_state *st = b->st;
  nl_mesh_link *m = &st->mesh[st->mesh_of[r->d]];
  xcoll_status s = XCOLL_SUCCESS;
  if (r->landed)
    return XCOLL_SUCCESS;
  if (m->recv_request == NULL) {
    s = m->recv_ops->irecv(st, m, st->mesh_in + r->stage, room_of(r),
                           NL_MESH_UNCHECKED, NULL,
                           &m->recv_request);
    if (s != XCOLL_SUCCESS)
      goto failed;
    if (m->recv_request == NULL)
      return XCOLL_SUCCESS;
    m->recvs++, *progress = 1;
  }
  int done = 0;
  size_t bytes = 0;
  s = m->recv_ops->test(st, m, m->recv_request, &done, &bytes);
  if (s != XCOLL_SUCCESS) {
    m->recv_request = NULL;
    goto failed;
  }
  if (done) {
    m->recv_request = NULL;
    s = land(st, &b->op->fp, r, bytes, b->block);
    if (s != XCOLL_SUCCESS)
      return s;
    r->landed = 1;
    atomic_fetch_add(&st->mesh_moved, 1);
    *progress = *landed = 1;
  }
  return XCOLL_SUCCESS;
failed:
  return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? m->from : -1,
                 "nccl_like: rank %d: Bruck receive from rank %d "
                 "failed: %s",
                 st->rank, m->from, m->recv_ops->last_error(m));
}

/* One pass over the rounds: every send whose blocks are in leaves before
 * the receives are tested (each test is a system call on the way of the
 * next rank's message), and again after a receive landed blocks that a
 * later round's send carries. Sets *progress when something moved and
 * *done when every round was sent and landed (an nl_mesh_step_fn; ctx:
 * the bruck_run). */
static xcoll_status mesh_step(void *ctx, int *progress, int *done) {
  bruck_run *b = ctx;
  int landed = 0;
  xcoll_status s = XCOLL_SUCCESS;
  for (int i = 0; i < b->nrounds && s == XCOLL_SUCCESS; i++)
    s = send_part(b, &b->rounds[i], progress);
  for (int i = 0; i < b->nrounds && s == XCOLL_SUCCESS; i++)
    s = recv_part(b, &b->rounds[i], progress, &landed);
  for (int i = 0; i < b->nrounds && s == XCOLL_SUCCESS && landed; i++)
    s = send_part(b, &b->rounds[i], progress);
  *done = 1;
  for (int i = 0; i < b->nrounds; i++)
    *done = *done && b->rounds[i].sent && b->rounds[i].landed;
  return s;
}

/* The messages not yet landed, for a timeout's message: "rank 3 (the
 * inputs of ranks 3, 2)"; a message carries the inputs of the ranks before
 * its sender too, so a stopped rank may be one of those. */
static void missing_ranks(const nl_state *st, const nl_round *rounds,
                          int nrounds, char *out, size_t bytes) {
  size_t used = 0;
  int p = st->world_size;
  out[0] = '\0';
  for (int i = 0; i < nrounds && used < bytes; i++) {
    if (rounds[i].landed)
      continue;
    int from = (st->rank - rounds[i].d + p) % p;
    int w =
        snprintf(out + used, bytes - used, "%srank %d (the input%s of rank%s",
                 used ? "; " : "", from, rounds[i].cnt > 1 ? "s" : "",
                 rounds[i].cnt > 1 ? "s" : "");
    for (int j = 0; j < rounds[i].cnt && w >= 0 && used + (size_t)w < bytes;
         j++) {
      used += (size_t)w;
      w = snprintf(out + used, bytes - used, "%s %d", j ? "," : "",
                   (from - j + p) % p);
    }
    if (w < 0 || used + (size_t)w >= bytes)
      break;
    used += (size_t)w;
    w = snprintf(out + used, bytes - used, ")");
    if (w < 0)
      break;
    used += (size_t)w;
  }
}

/* The senders of the rounds not yet landed (an nl_mesh_waits_fn). */
static int bruck_waits(void *ctx, int *ranks, int max) {
  bruck_run *b = ctx;
  int p = b->st->world_size, n = 0;
  for (int i = 0; i < b->nrounds && n < max; i++)
    if (!b->rounds[i].landed)
      ranks[n++] = (b->st->rank - b->rounds[i].d + p) % p;
  return n;
}

static xcoll_status bruck_stuck(void *ctx, double waited_s) {
  bruck_run *b = ctx;
  nl_state *st = b->st;
  char who[256];
  missing_ranks(st, b->rounds, b->nrounds, who, sizeof who);
  int waits[NL_BRUCK_MAX_LINKS];
  int count = bruck_waits(b, waits, NL_BRUCK_MAX_LINKS);
  return nl_fail_timeout(st, waits, count,
                 "nccl_like: rank %d made no progress for %.1f s "
                 "(XCOLL_TIMEOUT_S=%.1f) in a Bruck %s: no message "
                 "from %s: are they alive and in the same "
                 "collective?",
                 st->rank, waited_s, st->timeout_s,
                 xcoll_coll_name(b->op->args.kind), who[0] ? who : "none");
}

xcoll_status nl_bruck_run(nl_state *st, nl_channel *ch, nl_op *op) {
  const xc_work *w = &op->work;
  int p = st->world_size;
  int kind = w->kind, root = op->args.root;
  const xcoll_coll_info *info = xcoll_coll_info_of((xcoll_coll_kind)kind);
  size_t elem = xcoll_datatype_size(w->dtype);
  size_t block = input_bytes(info, w->count, w->dtype, p);
  double t0 = xcoll_trace_enabled() ? xcoll_time_us() : 0;
  header_write(st->mesh_out, &op->fp, block);
  /* A broadcast's and a scatter's sendbuf is read on the root only: the
   * other ranks send a block of zeros in its place. */
  uint8_t *own = st->mesh_out + NL_BRUCK_HEADER_BYTES;
  if (block > 0 && info->send_root_only && st->rank != root)
    memset(own, 0, block);
  else if (block > 0)
    memcpy(own, w->sendbuf, block);
  bruck_run run = {.st = st, .op = op, .block = block};
  run.nrounds = schedule(p, run.rounds);
  xcoll_status s =
      nl_mesh_drive(st, mesh_step, bruck_waits, bruck_stuck, &run);
  if (s != XCOLL_SUCCESS)
    return s;

  /* Every block is in (block j: rank - j's input). An allgather puts them
   * in rank order, a gather on the root only; a scatter takes this rank's
   * block of the root's, a broadcast the root's whole; the reductions
   * reduce them (a reduce-scatter the rank's own block of each input, a
   * reduce on the root only). */
  const uint8_t *in[NL_BRUCK_MAX_RANKS] = {NULL};
  for (int q = 0; q < p; q++)
    in[q] = own + (size_t)((st->rank - q + p) % p) * block;
  if (block == 0)
    ; /* nothing to place */
  else if (kind == XCOLL_COLL_ALLGATHER) {
    for (int q = 0; q < p; q++)
      memcpy((uint8_t *)w->recvbuf + (size_t)q * block, in[q], block);
  } else if (kind == XCOLL_COLL_GATHER) {
    for (int q = 0; st->rank == root && q < p; q++)
      memcpy((uint8_t *)w->recvbuf + (size_t)q * block, in[q], block);
  } else if (kind == XCOLL_COLL_SCATTER) {
    size_t piece = w->count * elem;
    memcpy(w->recvbuf, in[root] + (size_t)st->rank * piece, piece);
  } else if (kind == XCOLL_COLL_BROADCAST) {
    memcpy(w->recvbuf, in[root], block);
  } else if (kind != XCOLL_COLL_REDUCE || st->rank == root) {
    /* An allreduce starts at rank 0, as the gather algorithm; a
     * reduce-scatter's block (the owner: this rank) and a reduce (the
     * root) at the owner + 1 and end with the owner, as the ring kernels
     * (kernels/ring.h, "Reduction order"), which GPU ranks and mixed rings
     * run: the same bits either way. */
    int owner = kind == XCOLL_COLL_REDUCE_SCATTER ? st->rank
                : kind == XCOLL_COLL_REDUCE       ? root
                                                  : p - 1;
    size_t at = kind == XCOLL_COLL_REDUCE_SCATTER
                    ? (size_t)st->rank * w->count * elem
                    : 0;
    xc_reduce_into(w->recvbuf, in[(owner + 1) % p] + at,
                   in[(owner + 2) % p] + at, w->count, w->dtype, w->op);
    for (int j = 3; j <= p; j++)
      xc_reduce_into(w->recvbuf, w->recvbuf, in[(owner + j) % p] + at,
                     w->count, w->dtype, w->op);
    if (w->op == XCOLL_AVG)
      xc_scale_avg(w->recvbuf, w->count, w->dtype, p);
  }
  if (xcoll_trace_enabled()) {
    char args[160];
    snprintf(args, sizeof args,
             "\"channel\":%d,\"seq\":%llu,\"count\":%zu,\"rounds\":%d", ch->id,
             (unsigned long long)op->args.seq, w->count, run.nrounds);
    xcoll_trace_span("bruck", "channel", st->trace_base + (unsigned)ch->id, t0,
                     xcoll_time_us(), args);
  }
  return XCOLL_SUCCESS;
}
