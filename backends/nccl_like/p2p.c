/* p2p.c - the p2p interface (core/p2p.h) of an nccl_like host rank: the
 * isend, irecv, wait and test that core's host algorithms (alltoall(v),
 * gather, scatter, send/recv groups: core/algorithms/, core/group.c) run
 * over, carried on the mesh (channel.c: a link over the net plugin to and
 * from every other rank), as NCCL carries ncclSend/ncclRecv on
 * connections apart from the ring's. docs/nccl_like.md, "Point-to-point
 * over the mesh".
 *
 * A p2p message of B bytes is one net message, a header and the payload,
 * when B <= NL_P2P_EAGER_BYTES; else a header alone, then the payload in
 * net messages of at most chunk_bytes, straight from and into the user's
 * buffer when the plugin takes unregistered host memory (socket, ucx), and
 * through registered slots otherwise. Both ends count the net messages of
 * a message from their own byte count; the receiver checks the header
 * (fingerprint, tag, byte count, message number) before it uses anything
 * that follows. Per link and direction, net messages are posted in the
 * order the p2p calls were made, at most NL_P2P_DEPTH at a time, and
 * retired in that order.
 *
 * The header carries the sender's collective fingerprint (core/
 * fingerprint.h) where a Bruck message carries its own (bruck.c), so that
 * a rank in a host algorithm and a rank in a Bruck allreduce each fail
 * naming both calls. */
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fingerprint.h"
#include "fingerprint_exchange.h"
#include "log.h"
#include "nccl_like.h"

/* Header: the fingerprint (24 B, offset 0, as Bruck's), magic (u32),
 * version (u8), 3 zero bytes, tag (u64), bytes (u64), the message's number
 * on its pair and direction (u64), 8 zero bytes; little-endian. */
#define NL_P2P_HEADER_BYTES 64
#define NL_P2P_MAGIC 0x5032504eu /* "NP2P" */
#define NL_P2P_VERSION 1
/* A message of at most this many bytes rides in its header's net message
 * (one message per send: the latency of a small send is one net message's).
 * Header and payload fill 4 KiB, which a Bruck receive of one block holds. */
#define NL_P2P_EAGER_BYTES (4096 - NL_P2P_HEADER_BYTES)
/* Net messages in flight per link and direction (the socket plugin takes
 * 32 per comm, the example plugin 8). */
#define NL_P2P_DEPTH 8
/* The payload's net messages: at most this many bytes each, from and into
 * user memory (a plugin that takes unregistered host memory). */
#define NL_P2P_CHUNK_BYTES ((size_t)4 << 20)
/* ... or through registered slots of this many bytes (a plugin that needs
 * reg_mr): NL_P2P_DEPTH of them per peer and direction used. */
#define NL_P2P_STAGED_CHUNK_BYTES ((size_t)128 << 10)
/* A waiting rank yields its core on every idle pass this long before it
 * sleeps in poll(2), as mesh.c does (NL_MESH_SPIN_S). */
#define NL_P2P_SPIN_S 10e-6

enum { P2P_FREE = 0, P2P_ACTIVE, P2P_DONE };

struct xcoll_p2p_request {
  struct xcoll_p2p_request *next;     /* its direction's queue, or free list */
  struct xcoll_p2p_request *all_next; /* every request taken (for close) */
  int state;
  int is_send, peer;
  uint64_t tag;
  uint8_t *buf;
  size_t bytes;
  uint64_t number;     /* this message's number on its pair and direction */
  int messages;        /* net messages: 1, or 1 + the payload's chunks */
  int posted, retired; /* of them */
};

/* A net message in flight: message `index` of owner (0: the header). */
typedef struct p2p_entry {
  nl_mesh_request *net;
  struct xcoll_p2p_request *owner;
  int index;
  int done;
  size_t got; /* bytes the plugin reported */
} p2p_entry;

/* One direction of the link to or from a peer. */
typedef struct p2p_dir {
  nl_mesh_link *link;
  /* Requests not yet retired, in posting order; cursor: the first one not
   * fully posted (NULL: none). */
  struct xcoll_p2p_request *head, *tail, *cursor;
  p2p_entry ring[NL_P2P_DEPTH]; /* entry k % NL_P2P_DEPTH: net message k */
  uint64_t posted, retired;     /* net messages */
  uint64_t messages;            /* p2p messages queued: their numbers */
  uint8_t *slots;               /* NL_P2P_DEPTH x slot_bytes, on first use */
  void *mhandle;                /* reg_mr of slots (staged) */
} p2p_dir;

typedef struct nl_p2p {
  p2p_dir *send, *recv; /* by peer rank */
  int staged;           /* the plugin needs registered memory */
  size_t slot_bytes, chunk_bytes;
  struct xcoll_p2p_request *free_requests, *all_requests;
  /* This rank's current and previous collective (core sets
   * comm->fingerprint before a host algorithm runs), to judge a header. */
  xcoll_fingerprint fp_current, fp_previous;
} nl_p2p;

/* ---- state ---- */

xcoll_status nl_p2p_open(nl_state *st) {
  if (!st->mesh_on)
    return XCOLL_SUCCESS;
  int p = st->world_size;
  nl_p2p *q = calloc(1, sizeof *q);
  if (q != NULL) {
    q->send = calloc((size_t)p, sizeof *q->send);
    q->recv = calloc((size_t)p, sizeof *q->recv);
  }
  st->p2p = q;
  if (q == NULL || q->send == NULL || q->recv == NULL)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for the point-to-point "
                       "queues of %d ranks",
                       p);
  q->staged = !st->net_takes_host;
  q->chunk_bytes = q->staged ? NL_P2P_STAGED_CHUNK_BYTES : NL_P2P_CHUNK_BYTES;
  q->slot_bytes = NL_P2P_HEADER_BYTES + NL_P2P_EAGER_BYTES;
  if (q->staged && q->chunk_bytes > q->slot_bytes)
    q->slot_bytes = q->chunk_bytes;
  for (int r = 0; r < p; r++) {
    if (r == st->rank)
      continue;
    q->send[r].link = &st->mesh[st->mesh_of[(r - st->rank + p) % p]];
    q->recv[r].link = &st->mesh[st->mesh_of[(st->rank - r + p) % p]];
  }
  XCOLL_INFO("nccl_like: point-to-point over the mesh (send/recv, "
             "alltoall(v), gather, scatter): up to %d B in one message, "
             "larger in messages of %zu B %s",
             NL_P2P_EAGER_BYTES, q->chunk_bytes,
             q->staged ? "through registered slots (the plugin needs reg_mr)"
                       : "from and into user memory");
  return XCOLL_SUCCESS;
}

void nl_p2p_close(nl_state *st) {
  nl_p2p *q = st->p2p;
  if (q == NULL)
    return;
  for (int r = 0; r < st->world_size && q->send && q->recv; r++) {
    p2p_dir *dirs[2] = {&q->send[r], &q->recv[r]};
    for (int k = 0; k < 2; k++) {
      p2p_dir *d = dirs[k];
      if (d->mhandle != NULL && st->net != NULL) /* a net direction */
        (void)st->net->dereg_mr(k == 0 ? d->link->link.send_comm : NULL,
                                k == 1 ? d->link->link.recv_comm : NULL,
                                d->mhandle);
      free(d->slots);
    }
  }
  while (q->all_requests != NULL) {
    struct xcoll_p2p_request *r = q->all_requests;
    q->all_requests = r->all_next;
    free(r);
  }
  free(q->send);
  free(q->recv);
  free(q);
  st->p2p = NULL;
}

int nl_p2p_idle(const nl_state *st) {
  const nl_p2p *q = st->p2p;
  if (q == NULL)
    return 1;
  for (int r = 0; r < st->world_size; r++)
    if (q->send[r].head != NULL || q->recv[r].head != NULL ||
        q->send[r].posted != q->send[r].retired ||
        q->recv[r].posted != q->recv[r].retired)
      return 0;
  return 1;
}

uint64_t nl_p2p_sent(const nl_state *st, int peer) {
  const nl_p2p *q = st->p2p;
  return q != NULL && peer != st->rank ? q->send[peer].messages : 0;
}

static xcoll_status failed_status(nl_state *st) {
  pthread_mutex_lock(&st->lock);
  xcoll_status status = st->fail_status;
  char message[XCOLL_ERROR_BYTES];
  snprintf(message, sizeof message, "%s", st->fail_message);
  pthread_mutex_unlock(&st->lock);
  return xcoll_error(st->comm, status, "%s", message);
}

/* A failure of the comm (nl_fail records it for every thread): its status
 * and message, set as the calling thread's error, which core wraps with
 * the call. Any other status is returned as it is. */
static xcoll_status comm_error(nl_state *st, xcoll_status s) {
  return atomic_load(&st->failed) ? failed_status(st) : s;
}

static struct xcoll_p2p_request *request_get(nl_p2p *q) {
  struct xcoll_p2p_request *r = q->free_requests;
  if (r != NULL) {
    q->free_requests = r->next;
  } else {
    r = calloc(1, sizeof *r);
    if (r == NULL)
      return NULL;
    r->all_next = q->all_requests;
    q->all_requests = r;
  }
  return r;
}

static void request_put(nl_p2p *q, struct xcoll_p2p_request *r) {
  r->state = P2P_FREE;
  r->next = q->free_requests;
  q->free_requests = r;
}

/* Slots of a direction, on its first message (registered when staged). */
static xcoll_status dir_open(nl_state *st, nl_p2p *q, p2p_dir *d,
                             int is_send, int peer) {
  if (d->slots != NULL)
    return XCOLL_SUCCESS;
  void *slots = NULL;
  if (posix_memalign(&slots, 4096, NL_P2P_DEPTH * q->slot_bytes) != 0)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for the point-to-point "
                       "slots %s rank %d (%zu B)",
                       is_send ? "to" : "from", peer,
                       NL_P2P_DEPTH * q->slot_bytes);
  /* Only the net plugin's comms register memory (a shm direction copies
   * through its ring). */
  if (q->staged &&
      (is_send ? d->link->send_ops : d->link->recv_ops)->net) {
    xcoll_status s = st->net->reg_mr(
        is_send ? d->link->link.send_comm : NULL,
        is_send ? NULL : d->link->link.recv_comm, slots,
        NL_P2P_DEPTH * q->slot_bytes, XCOLL_NET_PTR_HOST, &d->mhandle);
    if (s != XCOLL_SUCCESS) {
      free(slots);
      d->mhandle = NULL;
      return xcoll_error(st->comm, s,
                         "nccl_like: reg_mr of the point-to-point slots %s "
                         "rank %d failed (net plugin %s): %s",
                         is_send ? "to" : "from", peer, st->net->name,
                         nl_net_last_error());
    }
  }
  d->slots = slots;
  return XCOLL_SUCCESS;
}

/* ---- the header ---- */

static void header_write(uint8_t *out, const xcoll_fingerprint *fp,
                         const struct xcoll_p2p_request *r) {
  memset(out, 0, NL_P2P_HEADER_BYTES);
  xcoll_fingerprint_encode(fp, out);
  for (int i = 0; i < 4; i++)
    out[XCOLL_FINGERPRINT_BYTES + i] = (uint8_t)(NL_P2P_MAGIC >> (8 * i));
  out[28] = NL_P2P_VERSION;
  xcoll_put_le64(out + 32, r->tag);
  xcoll_put_le64(out + 40, r->bytes);
  xcoll_put_le64(out + 48, r->number);
}

/* Keep this rank's current and previous collective fingerprints: a header
 * from the peer's previous collective is named against ours. */
static void track_fingerprint(nl_state *st, nl_p2p *q) {
  const xcoll_fingerprint *now = &st->comm->fingerprint;
  if (now->valid && (!q->fp_current.valid || now->seq != q->fp_current.seq ||
                     now->kind != q->fp_current.kind)) {
    q->fp_previous = q->fp_current;
    q->fp_current = *now;
  }
}

/* How long a rank that got a mesh message carrying no fingerprint waits
 * for its previous rank's fingerprint on the ring (seconds): the previous
 * rank sent it when it started its call, so it is on its way. */
#define NL_P2P_EXPLAIN_S 1.0

/* Name the previous rank's call if it differs from the host call this rank
 * is in. theirs is the call that rank started, read from the ring's
 * fingerprint link; a later call of theirs is no mismatch when ahead_ok.
 * A mismatch is nl_fail_everywhere(PROTOCOL) naming both calls, found
 * (printf-style, formatted only then) saying how this rank found it and
 * advice added to what every rank must do; else XCOLL_SUCCESS. */
static xcoll_status name_prev_call(nl_state *st, nl_p2p *q,
                                   const xcoll_fingerprint *theirs,
                                   int ahead_ok, const char *advice,
                                   const char *found, ...)
    __attribute__((format(printf, 6, 7)));
static xcoll_status name_prev_call(nl_state *st, nl_p2p *q,
                                   const xcoll_fingerprint *theirs,
                                   int ahead_ok, const char *advice,
                                   const char *found, ...) {
  xcoll_fingerprint none;
  memset(&none, 0, sizeof none);
  const xcoll_fingerprint *ours = NULL;
  xcoll_fingerprint_verdict verdict =
      xcoll_fingerprint_judge(&q->fp_current, &none, theirs, 0, &ours);
  if (verdict == XCOLL_FINGERPRINT_MATCH ||
      (verdict == XCOLL_FINGERPRINT_AHEAD && ahead_ok))
    return XCOLL_SUCCESS;
  char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
  xcoll_fingerprint_mismatch(st->rank, &q->fp_current, st->prev, theirs,
                             sentence, sizeof sentence);
  char how[256];
  va_list ap;
  va_start(ap, found);
  vsnprintf(how, sizeof how, found, ap);
  va_end(ap);
  return nl_fail_everywhere(
      st, XCOLL_ERR_PROTOCOL,
      "nccl_like: collective mismatch: %s (found by rank %d%s): every rank "
      "must call the same collectives in the same order with the same "
      "count, dtype, op and root%s",
      sentence, st->rank, how, advice);
}

/* A message that is no p2p header and carries no fingerprint came from a
 * peer in a ring collective that sends bare data on the mesh (pairwise.c).
 * The previous rank's fingerprint of the call this rank makes next, from
 * the ring's fingerprint link, names the call the ranks disagree on: a
 * PROTOCOL naming both calls when it differs from the host call this rank
 * is in, else XCOLL_SUCCESS (the caller reports the bare message). */
static xcoll_status explain_bare_message(nl_state *st, nl_p2p *q,
                                         const char *found) {
  if (st->prev == st->rank || !q->fp_current.valid)
    return XCOLL_SUCCESS;
  const double until = nl_now() + NL_P2P_EXPLAIN_S;
  xcoll_fingerprint theirs;
  uint64_t sent = 0;
  while (!nl_fp_peek(st, &theirs, &sent)) {
    if (nl_now() > until || xc_abort_raised(st->abort))
      return XCOLL_SUCCESS;
    sched_yield();
  }
  return name_prev_call(st, q, &theirs, 1, "", "%s", found);
}

/* The header of r's message from r->peer landed (got bytes): check it
 * before anything that follows is used. */
static xcoll_status header_check(nl_state *st, nl_p2p *q,
                                 const struct xcoll_p2p_request *r,
                                 const uint8_t *in, size_t got) {
  int peer = r->peer;
  xcoll_fingerprint theirs;
  /* The fingerprint first: a peer in another call (a Bruck allreduce, a
   * host algorithm of another collective) sends other messages, and the
   * fingerprint says which call. Not for a message of the fingerprint
   * exchange's that the peer sent in the same round (the tag says so): the
   * exchange compares the fingerprints it carries itself and runs every
   * round to the end, so that every rank, not just this one, fails the
   * call naming both (core/fingerprint_exchange.h). Failing here at once
   * would leave a rank further along the chain to learn of it from ranks
   * that may have destroyed their communicators by then. */
  uint64_t tag = got >= NL_P2P_HEADER_BYTES ? xcoll_get_le64(in + 32) : 0;
  int exchange_round = xcoll_fingerprint_exchange_tag(r->tag) && tag == r->tag;
  if (!exchange_round && got >= XCOLL_FINGERPRINT_BYTES &&
      xcoll_fingerprint_decode(in, &theirs) == 0 && theirs.valid) {
    const xcoll_fingerprint *ours = NULL;
    if (xcoll_fingerprint_judge(&q->fp_current, &q->fp_previous, &theirs, 1,
                                &ours) == XCOLL_FINGERPRINT_MISMATCH) {
      char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
      xcoll_fingerprint_mismatch(st->rank, ours, peer, &theirs, sentence,
                                 sizeof sentence);
      return nl_fail_everywhere(
          st, XCOLL_ERR_PROTOCOL,
          "nccl_like: collective mismatch: %s (found by rank %d in a "
          "point-to-point message from rank %d): every rank must call the "
          "same collectives in the same order with the same count, dtype, "
          "op and root",
          sentence, st->rank, peer);
    }
  }
  uint32_t magic = 0;
  for (int i = 0; i < 4 && got >= XCOLL_FINGERPRINT_BYTES + 4; i++)
    magic |= (uint32_t)in[XCOLL_FINGERPRINT_BYTES + i] << (8 * i);
  if (got < NL_P2P_HEADER_BYTES || magic != NL_P2P_MAGIC ||
      in[28] != NL_P2P_VERSION) {
    char found[128];
    snprintf(found, sizeof found,
             " after a message of %zu B from rank %d that is no "
             "point-to-point header",
             got, peer);
    xcoll_status named = explain_bare_message(st, q, found);
    if (named != XCOLL_SUCCESS)
      return named;
    return nl_fail_everywhere(
        st, XCOLL_ERR_PROTOCOL,
        "nccl_like: rank %d got a message of %zu B from rank %d that is not "
        "a point-to-point header (magic %08x, expected %08x) while receiving "
        "%zu B with tag 0x%" PRIx64 ": the two ranks are in different calls "
        "(one in an nccl_like collective?) or run different xcoll versions",
        st->rank, got, peer, magic, NL_P2P_MAGIC, r->bytes, r->tag);
  }
  uint64_t bytes = xcoll_get_le64(in + 40);
  uint64_t number = xcoll_get_le64(in + 48);
  int eager = r->messages == 1;
  if (tag != r->tag || bytes != r->bytes || number != r->number ||
      got != NL_P2P_HEADER_BYTES + (eager ? r->bytes : 0))
    return nl_fail_everywhere(
        st, XCOLL_ERR_PROTOCOL,
        "nccl_like: rank %d, receiving %zu B with tag 0x%" PRIx64 " from "
        "rank %d (its point-to-point message %" PRIu64 "), got %" PRIu64
        " B with tag 0x%" PRIx64 " (its message %" PRIu64 "): the two ranks "
        "disagree on the order or size of their messages",
        st->rank, r->bytes, r->tag, peer, r->number, bytes, tag, number);
  return XCOLL_SUCCESS;
}

/* ---- moving net messages ---- */

/* Payload chunk i (message i + 1) of r: offset and length. */
static size_t chunk_of(const nl_p2p *q, const struct xcoll_p2p_request *r,
                       int i, size_t *len) {
  size_t off = (size_t)i * q->chunk_bytes;
  size_t rest = r->bytes - off;
  *len = rest < q->chunk_bytes ? rest : q->chunk_bytes;
  return off;
}

/* A link's failure. A peer's death or leave (REMOTE) is nl_fail's to name
 * and publish. Any other failure fails every rank (nl_fail_everywhere): the
 * peers may be waiting on this rank, and a message that does not fit the
 * receive (the shm mesh refuses it, PROTOCOL) means the two ranks are in
 * different calls, which the previous rank's fingerprint names when it
 * can. */
static xcoll_status net_failed(nl_state *st, nl_p2p *q,
                               const struct xcoll_p2p_request *r,
                               const p2p_dir *d, xcoll_status s) {
  const nl_mesh_ops *ops = r->is_send ? d->link->send_ops : d->link->recv_ops;
  char what[XCOLL_ERROR_BYTES - 64];
  snprintf(what, sizeof what,
           "nccl_like: rank %d: point-to-point %s of %zu B (tag 0x%" PRIx64
           ") %s rank %d failed (%s %s): %s",
           st->rank, r->is_send ? "send" : "receive", r->bytes, r->tag,
           r->is_send ? "to" : "from", r->peer,
           ops->net ? "net plugin" : "mesh over",
           ops->net ? st->net->name : ops->name, ops->last_error(d->link));
  if (s == XCOLL_ERR_REMOTE)
    return nl_fail(st, s, r->peer, "%s", what);
  if (s == XCOLL_ERR_PROTOCOL && !r->is_send) {
    char found[96];
    snprintf(found, sizeof found,
             " after a message from rank %d that does not fit the receive",
             r->peer);
    xcoll_status named = explain_bare_message(st, q, found);
    if (named != XCOLL_SUCCESS)
      return named;
  }
  return nl_fail_everywhere(st, s, "%s", what);
}

/* Post the next net message of d's cursor request; *posted = 0 when the
 * plugin has no room now. */
static xcoll_status post_one(nl_state *st, nl_p2p *q, p2p_dir *d, int is_send,
                             int *posted) {
  struct xcoll_p2p_request *r = d->cursor;
  p2p_entry *e = &d->ring[d->posted % NL_P2P_DEPTH];
  uint8_t *slot = d->slots + (d->posted % NL_P2P_DEPTH) * q->slot_bytes;
  int index = r->posted;
  void *data = slot, *mhandle = d->mhandle;
  size_t len;
  if (index == 0) {
    int eager = r->messages == 1;
    len = NL_P2P_HEADER_BYTES + (eager ? r->bytes : 0);
    if (is_send) {
      header_write(slot, &q->fp_current, r);
      if (eager && r->bytes > 0)
        memcpy(slot + NL_P2P_HEADER_BYTES, r->buf, r->bytes);
    } else {
      len = NL_P2P_HEADER_BYTES + NL_P2P_EAGER_BYTES; /* room for any */
    }
  } else {
    size_t off = chunk_of(q, r, index - 1, &len);
    if (!q->staged) {
      data = r->buf + off;
      mhandle = NULL;
    } else if (is_send) {
      memcpy(slot, r->buf + off, len);
    }
  }
  nl_mesh_request *request = NULL;
  nl_mesh_link *m = d->link;
  xcoll_status s =
      is_send ? m->send_ops->isend(st, m, data, len, NL_MESH_UNCHECKED,
                                   mhandle, &request)
              : m->recv_ops->irecv(st, m, data, len, NL_MESH_UNCHECKED,
                                   mhandle, &request);
  if (s != XCOLL_SUCCESS)
    return net_failed(st, q, r, d, s);
  *posted = request != NULL;
  if (request == NULL)
    return XCOLL_SUCCESS;
  if (is_send)
    m->sends++;
  else
    m->recvs++;
  *e = (p2p_entry){.net = request, .owner = r, .index = index};
  d->posted++;
  if (++r->posted == r->messages)
    d->cursor = r->next;
  return XCOLL_SUCCESS;
}

/* Net message k of d (entry e) is done: use it, and retire its request
 * when it was the last. */
static xcoll_status retire_one(nl_state *st, nl_p2p *q, p2p_dir *d,
                               int is_send, p2p_entry *e) {
  struct xcoll_p2p_request *r = e->owner;
  const uint8_t *slot =
      d->slots + (d->retired % NL_P2P_DEPTH) * q->slot_bytes;
  if (!is_send && e->index == 0) {
    xcoll_status s = header_check(st, q, r, slot, e->got);
    if (s != XCOLL_SUCCESS)
      return s;
    if (r->messages == 1 && r->bytes > 0)
      memcpy(r->buf, slot + NL_P2P_HEADER_BYTES, r->bytes);
  } else if (!is_send) {
    size_t len;
    size_t off = chunk_of(q, r, e->index - 1, &len);
    if (e->got != len)
      return nl_fail_everywhere(
          st, XCOLL_ERR_PROTOCOL,
          "nccl_like: rank %d, receiving %zu B with tag 0x%" PRIx64
          " from rank %d: part %d of the payload came with %zu B instead "
          "of %zu: the two ranks disagree on their messages",
          st->rank, r->bytes, r->tag, r->peer, e->index, e->got, len);
    if (q->staged)
      memcpy(r->buf + off, slot, len);
  }
  d->retired++;
  if (++r->retired == r->messages) {
    /* Messages retire in posting order: r is the queue's head. */
    d->head = r->next;
    if (d->head == NULL)
      d->tail = NULL;
    r->state = P2P_DONE;
  }
  return XCOLL_SUCCESS;
}

/* Post what d has room for, test what is in flight, retire in order. */
static xcoll_status pump(nl_state *st, nl_p2p *q, p2p_dir *d, int is_send,
                         int *progress) {
  xcoll_status s = XCOLL_SUCCESS;
  for (int pass = 0; pass < 2; pass++) {
    while (d->cursor != NULL && d->posted - d->retired < NL_P2P_DEPTH) {
      int posted = 0;
      s = post_one(st, q, d, is_send, &posted);
      if (s != XCOLL_SUCCESS)
        return s;
      if (!posted)
        break;
      *progress = 1;
    }
    int retired = 0;
    for (uint64_t k = d->retired; k < d->posted; k++) {
      p2p_entry *e = &d->ring[k % NL_P2P_DEPTH];
      if (!e->done) {
        int done = 0;
        size_t got = 0;
        s = (is_send ? d->link->send_ops : d->link->recv_ops)
                ->test(st, d->link, e->net, &done, &got);
        if (s != XCOLL_SUCCESS) {
          e->net = NULL;
          return net_failed(st, q, e->owner, d, s);
        }
        if (!done)
          break; /* the plugin moves a comm's messages in order */
        e->net = NULL;
        e->done = 1;
        e->got = got;
      }
      if (k == d->retired) {
        s = retire_one(st, q, d, is_send, e);
        if (s != XCOLL_SUCCESS)
          return s;
        retired = 1;
        *progress = 1;
      }
    }
    if (!retired || d->cursor == NULL)
      break; /* a second pass only posts into the room just freed */
  }
  return XCOLL_SUCCESS;
}

static xcoll_status progress_all(nl_state *st, nl_p2p *q, int *progress) {
  if (atomic_load(&st->failed))
    return failed_status(st);
  for (int r = 0; r < st->world_size; r++) {
    xcoll_status s = XCOLL_SUCCESS;
    if (q->send[r].head != NULL)
      s = pump(st, q, &q->send[r], 1, progress);
    if (s == XCOLL_SUCCESS && q->recv[r].head != NULL)
      s = pump(st, q, &q->recv[r], 0, progress);
    if (s != XCOLL_SUCCESS)
      return s;
  }
  return XCOLL_SUCCESS;
}

/* Sleep in poll(2) on the links with net messages in flight, at most
 * timeout_ms. Returns -1 when there is nothing to sleep on (a plugin
 * without get_fds). */
static int sleep_on_links(nl_state *st, nl_p2p *q, int timeout_ms) {
  enum { MAX_FDS = 256, FDS_PER_COMM = 16 };
  struct pollfd fds[MAX_FDS];
  int n = 0;
  if (st->net->get_fds == NULL)
    return -1;
  for (int r = 0; r < st->world_size && n < MAX_FDS; r++) {
    for (int k = 0; k < 2; k++) {
      p2p_dir *d = k == 0 ? &q->send[r] : &q->recv[r];
      if (d->posted == d->retired ||
          !(k == 0 ? d->link->send_ops : d->link->recv_ops)->net)
        continue;
      int ids[FDS_PER_COMM], count = 0;
      if (st->net->get_fds(k == 0 ? d->link->link.send_comm : NULL,
                           k == 1 ? d->link->link.recv_comm : NULL, ids,
                           FDS_PER_COMM, &count) != XCOLL_SUCCESS)
        continue;
      for (int i = 0; i < count && n < MAX_FDS; i++)
        fds[n++] = (struct pollfd){.fd = ids[i],
                                   .events = k == 0 ? POLLOUT : POLLIN};
    }
  }
  if (n == 0)
    return -1;
  return poll(fds, (nfds_t)n, timeout_ms) > 0;
}

/* 1 when a net message of a direction over the net plugin is in flight. */
static int net_busy(const nl_p2p *q, int world_size) {
  for (int r = 0; r < world_size; r++)
    if ((q->send[r].posted != q->send[r].retired &&
         q->send[r].link->send_ops->net) ||
        (q->recv[r].posted != q->recv[r].retired &&
         q->recv[r].link->recv_ops->net))
      return 1;
  return 0;
}

/* No progress for waited_s > st->timeout_s: fail naming what is pending. */
static xcoll_status stuck(nl_state *st, nl_p2p *q, double waited_s) {
  char pending[512];
  size_t used = 0;
  pending[0] = '\0';
  for (int r = 0; r < st->world_size && used + 96 < sizeof pending; r++) {
    const struct xcoll_p2p_request *heads[2] = {q->recv[r].head,
                                                q->send[r].head};
    for (int k = 0; k < 2 && used + 96 < sizeof pending; k++)
      if (heads[k] != NULL)
        used += (size_t)snprintf(
            pending + used, sizeof pending - used,
            "%s%s of %zu B (tag 0x%" PRIx64 ") %s rank %d", used ? ", " : "",
            k == 0 ? "receive" : "send", heads[k]->bytes, heads[k]->tag,
            k == 0 ? "from" : "to", r);
  }
  return nl_fail(st, XCOLL_ERR_TIMEOUT, -1,
                 "nccl_like: rank %d made no progress for %.1f s "
                 "(XCOLL_TIMEOUT_S=%.1f) in point-to-point messages; still "
                 "pending: %s: is the peer alive and in the same call?",
                 st->rank, waited_s, st->timeout_s,
                 used ? pending : "nothing");
}

/* A host call waits for a message from the previous rank of the ring, which
 * may be in an engine op instead (a group here, an allreduce there): its
 * messages and this rank's go over different connections, and neither
 * would see the other's fingerprint. The fingerprint connection from that
 * rank says which op it started after this rank's last engine op, and how
 * many point-to-point messages it had sent to this rank by then: if that op
 * comes after this call, or is another call of the same place, and this
 * rank waits for a message numbered beyond those, the message would have
 * to come from a call after that op: the ranks called different things. */
static xcoll_status check_prev(nl_state *st, nl_p2p *q) {
  const p2p_dir *d = &q->recv[st->prev];
  xcoll_fingerprint theirs;
  uint64_t sent = 0;
  if (st->prev == st->rank || d->tail == NULL || !q->fp_current.valid ||
      !nl_fp_peek(st, &theirs, &sent))
    return XCOLL_SUCCESS;
  return name_prev_call(
      st, q, &theirs, d->tail->number < sent,
      ", and make its sends and receives in the same place among them",
      ", waiting for point-to-point message %" PRIu64 " from rank %d, which "
      "had sent %" PRIu64 " when it started its call",
      d->tail->number, st->prev, sent);
}

static int all_done(xcoll_p2p_request **requests, int count) {
  for (int i = 0; i < count; i++)
    if (requests[i] != NULL && requests[i]->state == P2P_ACTIVE)
      return 0;
  return 1;
}

/* ---- the p2p interface ---- */

static xcoll_status post(nl_state *st, int is_send, int peer, uint64_t tag,
                         void *buf, size_t bytes,
                         xcoll_p2p_request **request) {
  const char *what = is_send ? "isend" : "irecv";
  if (request == NULL)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "nccl_like: %s with a NULL request pointer", what);
  *request = NULL;
  if (peer < 0 || peer >= st->world_size || peer == st->rank)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "nccl_like: %s on rank %d names peer %d, which is not "
                       "another rank of this communicator (world_size %d)",
                       what, st->rank, peer, st->world_size);
  if (!st->mesh_on)
    return xcoll_error(st->comm, XCOLL_ERR_NOT_SUPPORTED,
                       "nccl_like: rank %d has no mesh of links to the other "
                       "ranks, which point-to-point messages (send/recv, "
                       "alltoall(v), gather, scatter) need",
                       st->rank);
  if (bytes > 0 && buf == NULL)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "nccl_like: %s of %zu B with a NULL buffer", what,
                       bytes);
  if (atomic_load(&st->failed))
    return failed_status(st);
  nl_p2p *q = st->p2p;
  p2p_dir *d = is_send ? &q->send[peer] : &q->recv[peer];
  /* The mesh algorithms leave every link idle (nccl_like.h); a request of
   * theirs still posted would take this message's place on the wire. */
  if ((is_send ? d->link->send_request : d->link->recv_request) != NULL)
    return xcoll_error(st->comm, XCOLL_ERR_INTERNAL,
                       "nccl_like: rank %d: the mesh link %s rank %d still "
                       "has a message of an engine collective in flight "
                       "when a point-to-point message is posted",
                       st->rank, is_send ? "to" : "from", peer);
  xcoll_status s = dir_open(st, q, d, is_send, peer);
  if (s != XCOLL_SUCCESS)
    return s;
  struct xcoll_p2p_request *r = request_get(q);
  if (r == NULL)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for a p2p request");
  track_fingerprint(st, q);
  r->next = NULL;
  r->state = P2P_ACTIVE;
  r->is_send = is_send;
  r->peer = peer;
  r->tag = tag;
  r->buf = buf;
  r->bytes = bytes;
  r->number = d->messages++;
  r->messages = bytes <= NL_P2P_EAGER_BYTES
                    ? 1
                    : 1 + (int)((bytes + q->chunk_bytes - 1) / q->chunk_bytes);
  r->posted = r->retired = 0;
  if (d->tail != NULL)
    d->tail->next = r;
  else
    d->head = r;
  d->tail = r;
  if (d->cursor == NULL)
    d->cursor = r;
  /* Start at once: a send is on its way, and a receive posted, before the
   * caller posts the rest and waits. */
  int progress = 0;
  s = pump(st, q, d, is_send, &progress);
  if (s != XCOLL_SUCCESS) {
    request_put(q, r); /* the comm failed: its queues are not used again */
    return comm_error(st, s);
  }
  *request = r;
  return XCOLL_SUCCESS;
}

static xcoll_status nl_p2p_isend(void *state, int peer, uint64_t tag,
                                 const void *buf, size_t bytes,
                                 xcoll_p2p_request **request) {
  /* Only read; sends and receives share the request type. */
  return post(state, 1, peer, tag, (void *)(uintptr_t)buf, bytes, request);
}

static xcoll_status nl_p2p_irecv(void *state, int peer, uint64_t tag,
                                 void *buf, size_t bytes,
                                 xcoll_p2p_request **request) {
  return post(state, 0, peer, tag, buf, bytes, request);
}

static xcoll_status nl_p2p_wait(void *state, xcoll_p2p_request **requests,
                                int count) {
  nl_state *st = state;
  nl_p2p *q = st->p2p;
  if (count > 0 && requests == NULL)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "nccl_like: wait on %d requests with a NULL array",
                       count);
  xcoll_status s = XCOLL_SUCCESS;
  double last_progress = nl_now();
  uint64_t spins = 0;
  for (;;) {
    int progress = 0;
    s = q != NULL ? progress_all(st, q, &progress) : XCOLL_SUCCESS;
    if (s != XCOLL_SUCCESS || all_done(requests, count))
      break;
    if (progress) {
      last_progress = nl_now();
      spins = 0;
      continue;
    }
    /* With a core of its own, busy polls first, as the ring kernels spin
     * (xc_spin_pause): a message a few hundred nanoseconds away is taken
     * without a system call (st->busy_polls). */
    if (++spins <= (uint64_t)st->busy_polls)
      continue;
    double now = nl_now();
    if (now - last_progress > st->timeout_s) {
      s = stuck(st, q, now - last_progress);
      break;
    }
    if (now - last_progress >= NL_P2P_SPIN_S &&
        (s = check_prev(st, q)) != XCOLL_SUCCESS)
      break;
    /* Messages in flight over shm: spin, then sleep on this rank's mesh
     * event count (which also watches the peers waited on for a death),
     * unless messages over net are in flight too: then yield. */
    if (nl_shm_mesh_busy(st)) {
      if (!nl_shm_mesh_wait(st, now - last_progress,
                            net_busy(q, st->world_size)
                                ? 0
                                : NL_POLL_MS * 1000000L))
        sched_yield();
      continue;
    }
    /* Yield the core first, so that a rank sharing it that has a message
     * for this one gets it at once; then sleep on the links' sockets
     * (NL_POLL_MS at a time: the failure flag is looked at between). */
    if (now - last_progress < NL_P2P_SPIN_S ||
        sleep_on_links(st, q, NL_POLL_MS) < 0)
      sched_yield();
  }
  for (int i = 0; i < count; i++) {
    if (requests[i] != NULL)
      request_put(q, requests[i]);
    requests[i] = NULL;
  }
  return s != XCOLL_SUCCESS ? comm_error(st, s) : s;
}

static xcoll_status nl_p2p_test(void *state, xcoll_p2p_request *request,
                                int *done) {
  nl_state *st = state;
  if (request == NULL || done == NULL)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "nccl_like: test with a NULL %s",
                       request ? "done" : "request");
  int progress = 0;
  xcoll_status s = st->p2p != NULL ? progress_all(st, st->p2p, &progress)
                                   : XCOLL_ERR_INTERNAL;
  *done = s != XCOLL_SUCCESS || request->state != P2P_ACTIVE;
  if (*done)
    request_put(st->p2p, request);
  return s != XCOLL_SUCCESS ? comm_error(st, s) : s;
}

/* Every pair of ranks on the shm mesh (nl_state.mesh_checked: computed
 * from the infos every rank holds, so the same on all). */
static int nl_p2p_shared_memory(void *state) {
  const nl_state *st = state;
  return st->mesh_checked;
}

const xcoll_p2p_ops nl_p2p_ops = {
    .isend = nl_p2p_isend,
    .irecv = nl_p2p_irecv,
    .wait = nl_p2p_wait,
    .test = nl_p2p_test,
    .shared_memory = nl_p2p_shared_memory,
};
