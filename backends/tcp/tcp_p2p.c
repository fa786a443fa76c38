/* tcp_p2p.c - the tcp backend's p2p interface (core/p2p.h) and its progress
 * engine, driven by wait()/test() on the calling thread.
 *
 * Each socket has a send queue and a receive queue of parts; a part is one
 * header plus the payload slice that follows it on that socket. A message to
 * a peer rides one socket, picked round-robin by a per-peer message counter
 * that both ends keep, or, when large and the peer has several sockets, is
 * cut into one part per socket at offsets both ends compute alike. Because
 * every socket carries its parts in posting order, a receiver knows which
 * posted receive the next header on a socket belongs to and checks the tag and
 * length against it before a payload byte lands in the user's buffer. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "error.h"
#include "log.h"
#include "tcp.h"

#define HDR XCOLL_WIRE_HEADER_BYTES
/* iovecs gathered from a socket's send queue into one sendmsg. */
#define TCP_MAX_IOV 64
/* How long wait() retries non-blocking I/O before it sleeps in poll(): a
 * reply that comes within this time costs no wake-up (microseconds). Kept
 * short: with more ranks than cores, a spinning rank steals the core its
 * peer needs (measured: 100 us made 4 KiB allreduce 5-10x slower on 2 cores
 * with 4 ranks; 0-20 us were within noise of each other). */
#define TCP_SPIN_US 10.0
/* Each empty spin round also calls sched_yield(), so that a rank sharing
 * its core hands it to one that has bytes to move. Measured on 2 cores,
 * 4-64 KiB allreduce: P=4 went from 80-250 us to 25-105 us, and P=2 with
 * other load on the machine from 18-110 us to 7-40 us; alone on its core
 * the call returns at once. */
/* Requests allocated at once when the free list is empty. */
#define TCP_SLAB_REQUESTS 64

/* ---- requests ---- */

static struct xcoll_p2p_request *request_get(tcp_state *st) {
  if (!st->free_requests) {
    size_t head = (sizeof(tcp_request_slab) + 15) & ~(size_t)15;
    tcp_request_slab *slab =
        malloc(head + TCP_SLAB_REQUESTS * st->request_bytes);
    if (!slab) return NULL;
    slab->next = st->slabs;
    st->slabs = slab;
    for (int i = 0; i < TCP_SLAB_REQUESTS; i++) {
      struct xcoll_p2p_request *r =
          (void *)((char *)slab + head + (size_t)i * st->request_bytes);
      r->state = TCP_REQUEST_FREE;
      r->next_free = st->free_requests;
      st->free_requests = r;
    }
  }
  struct xcoll_p2p_request *r = st->free_requests;
  st->free_requests = r->next_free;
  return r;
}

static void request_put(tcp_state *st, struct xcoll_p2p_request *r) {
  r->state = TCP_REQUEST_FREE;
  r->next_free = st->free_requests;
  st->free_requests = r;
}

static void part_finished(tcp_part *part) {
  struct xcoll_p2p_request *r = part->request;
  if (--r->parts_left == 0 && r->state == TCP_REQUEST_ACTIVE)
    r->state = TCP_REQUEST_DONE;
}

static void queue_push(tcp_part **head, tcp_part **tail, tcp_part *part) {
  part->next = NULL;
  if (*tail)
    (*tail)->next = part;
  else
    *head = part;
  *tail = part;
}

/* ---- failures ---- */

static int rx_held(const tcp_socket *s) {
  return s->rx_header_got == HDR && !s->rx_in_payload;
}

static const char *peer_addr(tcp_state *st, int rank) {
  if (rank == st->rank) return st->my_addr;
  if (rank < 0 || rank >= st->world_size) return "unknown address";
  return st->peers[rank].addr;
}

/* How long send_aborts may spend finishing messages cut in the middle, so
 * that the ABORT behind them can be read (seconds, for all sockets). */
#define TCP_ABORT_FLUSH_S 0.5

/* Send the rest of the message at the head of s's queue, blocking up to
 * deadline: a peer can read an ABORT only at a message boundary. The buffer
 * is still the caller's (we are inside its wait), so the bytes are valid.
 * Returns 1 when the stream is at a boundary. */
static int finish_started_message(tcp_socket *s, double deadline) {
  tcp_part *p = s->tx_head;
  while (p->header_done < HDR || p->done < p->bytes) {
    struct iovec iov[2];
    int n = 0;
    if (p->header_done < HDR)
      iov[n++] = (struct iovec){p->header + p->header_done,
                                HDR - p->header_done};
    if (p->done < p->bytes)
      iov[n++] = (struct iovec){p->buf + p->done, p->bytes - p->done};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)n;
    ssize_t sent = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
      return 0;
    if (sent > 0) {
      size_t left = (size_t)sent, take = HDR - p->header_done;
      if (take > left) take = left;
      p->header_done += (uint32_t)take;
      p->done += left - take;
      continue;
    }
    double wait_s = deadline - xcoll_tcp_now();
    if (wait_s <= 0) return 0;
    struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
    if (poll(&pfd, 1, (int)(wait_s * 1000.0) + 1) < 0 && errno != EINTR)
      return 0;
  }
  return 1;
}

/* Tell every peer we give up: ABORT goes on one socket per peer, at a
 * message boundary. A message cut in the middle is finished first (bounded
 * by TCP_ABORT_FLUSH_S), or the peer would only see the connection close
 * and blame this rank for a failure that started elsewhere. */
static void send_aborts(tcp_state *st, int origin) {
  double deadline = xcoll_tcp_now() + TCP_ABORT_FLUSH_S;
  size_t len = strlen(st->broken_message);
  if (len > XCOLL_WIRE_MAX_ABORT_BYTES) len = XCOLL_WIRE_MAX_ABORT_BYTES;
  uint8_t bytes[HDR];
  /* A desync rides in the tag's high half as XCOLL_ERR_PROTOCOL, so that it
   * stays a protocol error on every rank; any other failure is REMOTE to the
   * peers. */
  xcoll_status told = st->broken_by_desync ? XCOLL_ERR_PROTOCOL
                                           : XCOLL_ERR_REMOTE;
  uint64_t tag = ((uint64_t)(uint32_t)told << 32) | (uint32_t)origin;
  xcoll_wire_header h = xcoll_wire_make(XCOLL_WIRE_ABORT, st->comm_id, tag,
                                        len, st->rank);
  xcoll_wire_encode(&h, bytes);
  for (int p = 0; p < st->world_size; p++) {
    if (p == st->rank) continue;
    for (int i = 0; i < st->nsocks; i++) {
      tcp_socket *s = &st->peers[p].socks[i];
      if (s->fd < 0 || s->closed || s->tx_broken) continue;
      if (s->tx_head && (s->tx_head->header_done || s->tx_head->done) &&
          !finish_started_message(s, deadline)) {
        s->tx_broken = 1;
        continue;
      }
      struct iovec iov[2] = {{bytes, HDR}, {st->broken_message, len}};
      struct msghdr msg;
      memset(&msg, 0, sizeof msg);
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      ssize_t n = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n != (ssize_t)(HDR + len)) s->tx_broken = 1;
      break;
    }
  }
}

xcoll_status xcoll_tcp_fail(tcp_state *st, xcoll_status status, int origin,
                            const char *fmt, ...) {
  if (st->broken) return (xcoll_status)st->broken;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->broken_message, sizeof st->broken_message, fmt, ap);
  va_end(ap);
  st->broken = status;
  xcoll_error(st->comm, status, "%s", st->broken_message);
  send_aborts(st, origin < 0 ? st->rank : origin);
  /* Every pending request fails now; the caller releases them with wait(). */
  for (int k = 0; k < st->nsockets; k++) {
    tcp_socket *s = &st->sockets[k];
    if (s->tx_head && (s->tx_head->header_done || s->tx_head->done))
      s->tx_broken = 1;
    for (tcp_part *p = s->tx_head; p; p = p->next)
      p->request->state = TCP_REQUEST_FAILED;
    for (tcp_part *p = s->rx_head; p; p = p->next)
      p->request->state = TCP_REQUEST_FAILED;
    s->tx_head = s->tx_tail = NULL;
    s->rx_head = s->rx_tail = NULL;
  }
  return status;
}

/* The status that broke the communicator, recorded again for this call. */
static xcoll_status rebroken(tcp_state *st) {
  return xcoll_error(st->comm, (xcoll_status)st->broken, "%s",
                     st->broken_message);
}

static void describe_pending(const tcp_socket *s, char *out, size_t bytes) {
  if (s->rx_head)
    snprintf(out, bytes, "a receive of %zu bytes (tag 0x%" PRIx64 ") from it",
             s->rx_head->request->bytes, s->rx_head->request->tag);
  else if (s->tx_head)
    snprintf(out, bytes, "a send of %zu bytes (tag 0x%" PRIx64 ") to it",
             s->tx_head->request->bytes, s->tx_head->request->tag);
  else
    snprintf(out, bytes, "a wait on other ranks");
}

static xcoll_status peer_died(tcp_state *st, tcp_socket *s) {
  char what[128];
  describe_pending(s, what, sizeof what);
  return xcoll_tcp_fail(st, XCOLL_ERR_REMOTE, s->peer,
                        "tcp: rank %d (%s) closed the connection during %s "
                        "(seen by rank %d): it probably died; see its log",
                        s->peer, peer_addr(st, s->peer), what, st->rank);
}

/* The peer said BYE (it destroyed its communicator normally) while this
 * rank still waits on it. */
static xcoll_status peer_left(tcp_state *st, tcp_socket *s) {
  char what[128];
  describe_pending(s, what, sizeof what);
  return xcoll_tcp_fail(st, XCOLL_ERR_REMOTE, s->peer,
                        "tcp: rank %d (%s) left (destroyed its communicator) "
                        "during %s: the ranks made different numbers of "
                        "calls, or it finished early",
                        s->peer, peer_addr(st, s->peer), what);
}

/* A send or receive failed with errno err. */
static xcoll_status peer_lost(tcp_state *st, tcp_socket *s, int err) {
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN ||
      err == ECONNABORTED || err == ETIMEDOUT || err == EHOSTUNREACH) {
    if (s->bye_received)
      return peer_left(st, s);
    return peer_died(st, s);
  }
  return xcoll_tcp_fail(st, XCOLL_ERR_SYSTEM, st->rank,
                        "tcp: I/O with rank %d (%s) failed: %s", s->peer,
                        peer_addr(st, s->peer), strerror(err));
}

/* Keep this rank's current and previous collective fingerprints: a message
 * from the peer's previous collective is named against ours. */
static void track_fingerprint(tcp_state *st) {
  const xcoll_fingerprint *now = &st->comm->fingerprint;
  if (now->valid && (!st->fp_current.valid || now->seq != st->fp_current.seq ||
                      now->kind != st->fp_current.kind)) {
    st->fp_previous = st->fp_current;
    st->fp_current = *now;
  }
}

/* ---- sending ---- */

static xcoll_status do_tx(tcp_state *st, tcp_socket *s, int *progress) {
  while (s->tx_head) {
    struct iovec iov[TCP_MAX_IOV];
    int n = 0;
    size_t total = 0;
    for (tcp_part *p = s->tx_head; p && n + 2 <= TCP_MAX_IOV; p = p->next) {
      if (p->header_done < HDR) {
        iov[n].iov_base = p->header + p->header_done;
        iov[n].iov_len = HDR - p->header_done;
        total += iov[n++].iov_len;
      }
      if (p->done < p->bytes) {
        iov[n].iov_base = p->buf + p->done;
        iov[n].iov_len = p->bytes - p->done;
        total += iov[n++].iov_len;
      }
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)n;
    ssize_t sent = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return XCOLL_SUCCESS;
      return peer_lost(st, s, errno);
    }
    *progress = 1;
    size_t left = (size_t)sent;
    tcp_part *p = s->tx_head;
    while (p) {
      size_t take = HDR - p->header_done;
      if (take > left) take = left;
      p->header_done += (uint32_t)take;
      left -= take;
      if (p->header_done < HDR) break;
      take = p->bytes - p->done;
      if (take > left) take = left;
      p->done += take;
      left -= take;
      if (p->done < p->bytes) break;
      s->tx_head = p->next;
      if (!s->tx_head) s->tx_tail = NULL;
      part_finished(p);
      p = s->tx_head;
    }
    if ((size_t)sent < total) return XCOLL_SUCCESS;
  }
  return XCOLL_SUCCESS;
}

/* ---- receiving ---- */

static void rx_part_complete(tcp_socket *s) {
  tcp_part *p = s->rx_head;
  s->rx_head = p->next;
  if (!s->rx_head) s->rx_tail = NULL;
  s->rx_in_payload = 0;
  s->rx_header_got = 0;
  part_finished(p);
}

/* Read an ABORT's reason (extra bytes of it already sit at the start of the
 * head receive's buffer) and break the communicator naming the origin. */
static xcoll_status on_abort(tcp_state *st, tcp_socket *s, size_t extra) {
  const xcoll_wire_header *h = &s->rx_decoded;
  char text[XCOLL_WIRE_MAX_ABORT_BYTES + 1];
  size_t len = (size_t)h->length, got = extra < len ? extra : len;
  if (got) memcpy(text, s->rx_head->buf, got);
  /* The reason was sent in one piece right behind the header: give it a
   * short while to arrive, and go on with what came if it does not. */
  double deadline = xcoll_tcp_now() + 1.0;
  while (got < len && xcoll_tcp_now() < deadline) {
    ssize_t r = recv(s->fd, text + got, len - got, MSG_DONTWAIT);
    if (r > 0) {
      got += (size_t)r;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
      (void)poll(&pfd, 1, 100);
    } else {
      break;
    }
  }
  text[got] = '\0';
  /* The peer's message carries its own "tcp: " prefix; ours has one. */
  const char *reason = strncmp(text, "tcp: ", 5) == 0 ? text + 5 : text;
  uint64_t origin_field = h->tag & 0xffffffffu;
  int origin = origin_field < (uint64_t)st->world_size ? (int)origin_field
                                                       : s->peer;
  /* A desync found by the peer is a protocol error here too; anything else
   * is a failure elsewhere (REMOTE). */
  xcoll_status status = (h->tag >> 32) == (uint64_t)XCOLL_ERR_PROTOCOL
                            ? XCOLL_ERR_PROTOCOL
                            : XCOLL_ERR_REMOTE;
  if (status == XCOLL_ERR_PROTOCOL && !st->broken) st->broken_by_desync = 1;
  if (origin == s->peer)
    return xcoll_tcp_fail(st, status, origin,
                          "tcp: rank %d (%s) aborted: %s", s->peer,
                          peer_addr(st, s->peer), reason);
  return xcoll_tcp_fail(st, status, origin,
                        "tcp: rank %d (%s) failed (reported by rank %d): %s",
                        origin, peer_addr(st, origin), s->peer, reason);
}

/* A whole header sits in s->rx_header; extra payload bytes were already read
 * into the head receive's buffer. Check it, then act on its kind. */
static xcoll_status on_header(tcp_state *st, tcp_socket *s, size_t extra) {
  xcoll_wire_header *h = &s->rx_decoded;
  char why[XCOLL_WIRE_WHY_BYTES];
  xcoll_wire_decode(s->rx_header, HDR, h, NULL, 0);
  if (xcoll_wire_check(h, st->comm_id, s->peer, XCOLL_WIRE_ANY, XCOLL_WIRE_ANY,
                       UINT64_MAX, why, sizeof why) != 0)
    return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                          "tcp: rank %d got a bad header from rank %d (%s) on "
                          "its socket %d: %s",
                          st->rank, s->peer, peer_addr(st, s->peer), s->index,
                          why);
  switch (h->kind) {
  case XCOLL_WIRE_ABORT:
    if (h->length > XCOLL_WIRE_MAX_ABORT_BYTES)
      return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                            "tcp: rank %d got an ABORT of %" PRIu64
                            " bytes from rank %d (%s); the bound is %d",
                            st->rank, h->length, s->peer,
                            peer_addr(st, s->peer), XCOLL_WIRE_MAX_ABORT_BYTES);
    return on_abort(st, s, extra);
  case XCOLL_WIRE_BYE:
    if (h->length != 0 || extra)
      return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                            "tcp: rank %d got a BYE with a payload from rank "
                            "%d (%s)",
                            st->rank, s->peer, peer_addr(st, s->peer));
    s->bye_received = 1;
    s->rx_header_got = 0;
    if (s->rx_head) return peer_lost(st, s, ECONNRESET);
    return XCOLL_SUCCESS;
  case XCOLL_WIRE_DATA:
    break;
  default:
    return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                          "tcp: rank %d got an unexpected %s message from rank "
                          "%d (%s) after the connection was set up",
                          st->rank, xcoll_wire_kind_name(h->kind), s->peer,
                          peer_addr(st, s->peer));
  }
  tcp_part *p = s->rx_head;
  /* The fingerprint before the tag and length: ranks in different
   * collectives also disagree on those, and the fingerprint says how. A
   * message no receive waits for yet is judged too: in a rooted collective
   * whose ranks disagree on the root, it may be the only sign. */
  xcoll_fingerprint theirs;
  if (xcoll_fingerprint_decode(h->fingerprint, &theirs) != 0)
    return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                          "tcp: rank %d got a DATA message with a malformed "
                          "collective fingerprint from rank %d (%s)",
                          st->rank, s->peer, peer_addr(st, s->peer));
  track_fingerprint(st);
  const xcoll_fingerprint *ours = NULL;
  xcoll_fingerprint_verdict verdict = xcoll_fingerprint_judge(
      &st->fp_current, &st->fp_previous, &theirs, p != NULL, &ours);
  if (verdict == XCOLL_FINGERPRINT_MISMATCH) {
    char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
    xcoll_fingerprint_mismatch(st->rank, ours, s->peer, &theirs, sentence,
                               sizeof sentence);
    if (!st->broken) st->broken_by_desync = 1;
    return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                          "tcp: collective mismatch: %s (found by rank %d in "
                          "a message from rank %d, %s): every rank must call "
                          "the same collectives in the same order with the "
                          "same count, dtype, op and root",
                          sentence, st->rank, s->peer, peer_addr(st, s->peer));
  }
  if (!p) return XCOLL_SUCCESS; /* held until a receive is posted */
  if (xcoll_wire_check(h, st->comm_id, s->peer, p->request->tag, p->bytes,
                       p->bytes, why, sizeof why) != 0)
    return xcoll_tcp_fail(st, XCOLL_ERR_PROTOCOL, st->rank,
                          "tcp: rank %d, receiving %zu bytes with tag 0x%" PRIx64
                          " from rank %d (%s): %s",
                          st->rank, p->request->bytes, p->request->tag, s->peer,
                          peer_addr(st, s->peer), why);
  s->rx_in_payload = 1;
  p->done = extra;
  if (p->done == p->bytes) rx_part_complete(s);
  return XCOLL_SUCCESS;
}

static xcoll_status on_eof(tcp_state *st, tcp_socket *s) {
  if (s->bye_received && !s->rx_head && s->rx_header_got == 0) {
    s->closed = 1;
    return XCOLL_SUCCESS;
  }
  /* After BYE nothing more comes: a receive still posted never completes. */
  return s->bye_received ? peer_left(st, s) : peer_died(st, s);
}

static xcoll_status do_rx(tcp_state *st, tcp_socket *s, int *progress) {
  while (!s->closed && !st->broken) {
    ssize_t r;
    if (!s->rx_in_payload) {
      if (s->rx_header_got == HDR) { /* a held header */
        if (!s->rx_head) return XCOLL_SUCCESS;
        xcoll_status status = on_header(st, s, 0);
        if (status != XCOLL_SUCCESS) return status;
        continue;
      }
      /* Header and payload in one call when a receive is posted: the
       * payload bytes count only once the header has passed its checks. */
      struct iovec iov[2];
      int n = 1;
      iov[0].iov_base = s->rx_header + s->rx_header_got;
      iov[0].iov_len = HDR - s->rx_header_got;
      if (s->rx_head && s->rx_head->bytes > 0) {
        iov[1].iov_base = s->rx_head->buf;
        iov[1].iov_len = s->rx_head->bytes;
        n = 2;
      }
      struct msghdr msg;
      memset(&msg, 0, sizeof msg);
      msg.msg_iov = iov;
      msg.msg_iovlen = (size_t)n;
      r = recvmsg(s->fd, &msg, MSG_DONTWAIT);
      if (r > 0) {
        *progress = 1;
        size_t total = s->rx_header_got + (size_t)r;
        if (total < HDR) {
          s->rx_header_got = (uint32_t)total;
          continue;
        }
        s->rx_header_got = HDR;
        xcoll_status status = on_header(st, s, total - HDR);
        if (status != XCOLL_SUCCESS) return status;
        continue;
      }
    } else {
      tcp_part *p = s->rx_head;
      size_t want = p->bytes - p->done;
      r = recv(s->fd, p->buf + p->done, want, MSG_DONTWAIT);
      if (r > 0) {
        *progress = 1;
        p->done += (size_t)r;
        if (p->done == p->bytes) {
          rx_part_complete(s);
          continue;
        }
        return XCOLL_SUCCESS; /* a short read: the socket is drained */
      }
    }
    if (r == 0) return on_eof(st, s);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return XCOLL_SUCCESS;
    return peer_lost(st, s, errno);
  }
  return st->broken ? (xcoll_status)st->broken : XCOLL_SUCCESS;
}

/* The peer hung up while a message of its sits unconsumed in front of
 * whatever followed. A normal close always ends with BYE after the data, so
 * if no byte follows the held payload, the peer died. */
static xcoll_status hangup_while_held(tcp_state *st, tcp_socket *s,
                                      short revents) {
  int avail = 0;
  if ((revents & POLLERR) || ioctl(s->fd, FIONREAD, &avail) != 0 ||
      (uint64_t)avail <= s->rx_decoded.length)
    return peer_died(st, s);
  s->hup_deferred = 1;
  return XCOLL_SUCCESS;
}

/* ---- the progress engine ---- */

static xcoll_status sweep(tcp_state *st, int *progress) {
  for (int k = 0; k < st->nsockets; k++) {
    tcp_socket *s = &st->sockets[k];
    xcoll_status status = XCOLL_SUCCESS;
    if (s->tx_head) status = do_tx(st, s, progress);
    if (status == XCOLL_SUCCESS && s->rx_head) status = do_rx(st, s, progress);
    if (status != XCOLL_SUCCESS) return status;
  }
  return XCOLL_SUCCESS;
}

static void build_pollfds(tcp_state *st) {
  for (int k = 0; k < st->nsockets; k++) {
    tcp_socket *s = &st->sockets[k];
    struct pollfd *pfd = &st->pollfds[k];
    int held = rx_held(s) && !s->rx_head;
    pfd->revents = 0;
    if (s->fd < 0 || s->closed || (held && s->hup_deferred)) {
      pfd->fd = -1;
      continue;
    }
    pfd->fd = s->fd;
    /* POLLRDHUP on every socket, waited on or not: a peer that dies fails
     * this wait at once even if we expect nothing from it now. */
    pfd->events = POLLRDHUP;
    if (!held) pfd->events |= POLLIN;
    if (s->tx_head) pfd->events |= POLLOUT;
  }
  struct pollfd *wake = &st->pollfds[st->nsockets];
  wake->fd = st->wake_fd;
  wake->events = POLLIN;
  wake->revents = 0;
}

static xcoll_status handle_events(tcp_state *st, int *progress) {
  for (int k = 0; k < st->nsockets; k++) {
    short re = st->pollfds[k].revents;
    if (!re || st->pollfds[k].fd < 0) continue;
    tcp_socket *s = &st->sockets[k];
    xcoll_status status = XCOLL_SUCCESS;
    if (re & POLLOUT) status = do_tx(st, s, progress);
    if (status == XCOLL_SUCCESS &&
        (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
      if (!(rx_held(s) && !s->rx_head))
        status = do_rx(st, s, progress);
      else if (re & (POLLRDHUP | POLLHUP | POLLERR))
        status = hangup_while_held(st, s, re);
    }
    if (status != XCOLL_SUCCESS) return status;
  }
  return XCOLL_SUCCESS;
}

static xcoll_status check_abort(tcp_state *st) {
  if (atomic_load(&st->aborted))
    return xcoll_tcp_fail(st, XCOLL_ERR_ABORTED, st->rank,
                          "tcp: xcoll_comm_abort was called on rank %d",
                          st->rank);
  return XCOLL_SUCCESS;
}

/* The peers the requests of this wait still wait on (at most max), for the
 * stall record and the culprit (core/blame.h). */
static int waited_peers(xcoll_p2p_request **requests, int count, int *peers,
                        int max) {
  int n = 0;
  for (int i = 0; i < count && n < max; i++) {
    if (!requests[i] || requests[i]->state != TCP_REQUEST_ACTIVE) continue;
    int seen = 0;
    for (int k = 0; k < n && !seen; k++) seen = peers[k] == requests[i]->peer;
    if (!seen) peers[n++] = requests[i]->peer;
  }
  return n;
}

static xcoll_status timed_out(tcp_state *st, xcoll_p2p_request **requests,
                              int count) {
  char pending[512];
  size_t used = 0;
  pending[0] = '\0';
  for (int k = 0; k < st->nsockets && used + 96 < sizeof pending; k++) {
    tcp_socket *s = &st->sockets[k];
    if (s->rx_head)
      used += (size_t)snprintf(pending + used, sizeof pending - used,
                               "%sreceive of %zu bytes from rank %d (%s)",
                               used ? ", " : "", s->rx_head->request->bytes,
                               s->peer, peer_addr(st, s->peer));
    if (s->tx_head && used + 96 < sizeof pending)
      used += (size_t)snprintf(pending + used, sizeof pending - used,
                               "%ssend of %zu bytes to rank %d (%s)",
                               used ? ", " : "", s->tx_head->request->bytes,
                               s->peer, peer_addr(st, s->peer));
  }
  int peers[64];
  int n = waited_peers(requests, count, peers, 64);
  xcoll_blame_kind kind;
  char why[512];
  int culprit = xcoll_blame_culprit(&st->blame, peers, n, &kind, why,
                                    sizeof why);
  if (culprit >= 0 && culprit != st->rank)
    /* The ABORT carries the culprit as its origin: every peer names it. */
    return xcoll_tcp_fail(st, XCOLL_ERR_TIMEOUT, culprit,
                          "tcp: rank %d %s: rank %d waited %.1f s "
                          "(XCOLL_TIMEOUT_S), still pending: %s; %s",
                          culprit,
                          kind == XCOLL_BLAME_LEFT
                              ? "left (destroyed its communicator)"
                              : "stopped making progress",
                          st->rank, st->timeout_s,
                          used ? pending : "nothing", why);
  return xcoll_tcp_fail(st, XCOLL_ERR_TIMEOUT, st->rank,
                        "tcp: rank %d made no progress for %.1f s "
                        "(XCOLL_TIMEOUT_S); still pending: %s%s%s",
                        st->rank, st->timeout_s, used ? pending : "nothing",
                        why[0] ? "; " : "", why);
}

static int all_done(xcoll_p2p_request **requests, int count) {
  for (int i = 0; i < count; i++)
    if (requests[i] && requests[i]->state == TCP_REQUEST_ACTIVE) return 0;
  return 1;
}

/* One poll() over every socket and the wake fd; timeout in milliseconds. */
static xcoll_status poll_once(tcp_state *st, int timeout_ms, int *progress) {
  build_pollfds(st);
  int n = poll(st->pollfds, (nfds_t)st->nsockets + 1, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return XCOLL_SUCCESS;
    return xcoll_tcp_fail(st, XCOLL_ERR_SYSTEM, st->rank,
                          "tcp: poll() failed on rank %d: %s", st->rank,
                          strerror(errno));
  }
  if (n == 0) return XCOLL_SUCCESS;
  if (st->pollfds[st->nsockets].revents) {
    uint64_t value;
    if (read(st->wake_fd, &value, sizeof value) < 0) { /* drained already */
    }
    xcoll_status status = check_abort(st);
    if (status != XCOLL_SUCCESS) return status;
  }
  return handle_events(st, progress);
}

static xcoll_status progress_until_done(tcp_state *st,
                                        xcoll_p2p_request **requests,
                                        int count) {
  if (st->broken) return rebroken(st);
  double last_progress = xcoll_tcp_now();
  double spin_until = last_progress + TCP_SPIN_US * 1e-6;
  /* Stalled this long, the wait posts what it waits on (core/blame.h). */
  double lead = xcoll_blame_lead_s(st->timeout_s);
  int posted = 0;
  int need_sweep = 1;
  for (;;) {
    xcoll_status status = check_abort(st);
    if (status != XCOLL_SUCCESS) return status;
    int progress = 0;
    if (need_sweep) {
      status = sweep(st, &progress);
      if (status != XCOLL_SUCCESS) return status;
    }
    if (all_done(requests, count)) return XCOLL_SUCCESS;
    double now = xcoll_tcp_now();
    if (progress) {
      last_progress = now;
      spin_until = now + TCP_SPIN_US * 1e-6;
      if (posted) xcoll_blame_progressed(&st->blame);
      posted = 0;
    }
    if (now < spin_until) {
      need_sweep = 1;
      if (!progress) sched_yield();
      continue;
    }
    double left = last_progress + st->timeout_s - now;
    if (left <= 0) return timed_out(st, requests, count);
    if (!posted && left <= lead) {
      int peers[64];
      xcoll_blame_stalled(&st->blame, peers,
                          waited_peers(requests, count, peers, 64));
      posted = 1;
      continue; /* posting may have taken a while: look at the clock again */
    }
    double sleep_s = posted ? left : left - lead;
    int timeout_ms = sleep_s > 1e6 ? 1000000000 : (int)(sleep_s * 1000.0) + 1;
    status = poll_once(st, timeout_ms, &progress);
    if (status != XCOLL_SUCCESS) return status;
    if (progress) {
      last_progress = xcoll_tcp_now();
      spin_until = last_progress + TCP_SPIN_US * 1e-6;
      if (posted) xcoll_blame_progressed(&st->blame);
      posted = 0;
    }
    /* After poll only the sockets it reported have news; the sweep resumes
     * with the next spin. */
    need_sweep = 0;
    if (all_done(requests, count)) return XCOLL_SUCCESS;
  }
}

/* comm_abort may have found the lock taken by a call that has just returned
 * without seeing the flag: whoever holds the lock last makes sure peers are
 * told. */
static void after_unlock(tcp_state *st) {
  if (atomic_load(&st->aborted) && pthread_mutex_trylock(&st->io_lock) == 0) {
    if (!st->broken) (void)check_abort(st);
    pthread_mutex_unlock(&st->io_lock);
  }
}

/* ---- the p2p interface ---- */

static xcoll_status post(tcp_state *st, int is_send, int peer, uint64_t tag,
                         void *buf, size_t bytes,
                         xcoll_p2p_request **request) {
  if (!request)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "tcp: %s with a NULL request pointer",
                       is_send ? "isend" : "irecv");
  *request = NULL;
  if (peer < 0 || peer >= st->world_size || peer == st->rank)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "tcp: %s on rank %d names peer %d, which is not another "
                       "rank of this communicator (world_size %d)",
                       is_send ? "isend" : "irecv", st->rank, peer,
                       st->world_size);
  if (bytes && !buf)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "tcp: %s of %zu bytes with a NULL buffer",
                       is_send ? "isend" : "irecv", bytes);
  pthread_mutex_lock(&st->io_lock);
  xcoll_status status = st->broken ? rebroken(st) : check_abort(st);
  struct xcoll_p2p_request *r = NULL;
  if (status == XCOLL_SUCCESS && !(r = request_get(st)))
    status = xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                         "tcp: out of memory for a p2p request");
  if (status != XCOLL_SUCCESS) {
    pthread_mutex_unlock(&st->io_lock);
    after_unlock(st);
    return status;
  }
  track_fingerprint(st);
  tcp_peer *pe = &st->peers[peer];
  uint64_t message = is_send ? pe->tx_messages++ : pe->rx_messages++;
  int nparts = st->nsocks > 1 && bytes >= TCP_STRIPE_MIN_BYTES ? st->nsocks : 1;
  r->state = TCP_REQUEST_ACTIVE;
  r->is_send = is_send;
  r->peer = peer;
  r->tag = tag;
  r->bytes = bytes;
  r->parts_left = nparts;
  /* Part i covers [i*L/n, (i+1)*L/n), computed without overflow; the
   * receiver cuts its buffer the same way. */
  size_t base = bytes / (size_t)nparts, rest = bytes % (size_t)nparts;
  size_t offset = 0;
  int kick = 0;
  for (int i = 0; i < nparts; i++) {
    tcp_part *p = &r->parts[i];
    int sock = nparts == 1 ? (int)(message % (uint64_t)st->nsocks) : i;
    tcp_socket *s = &pe->socks[sock];
    p->request = r;
    p->buf = (char *)buf + offset;
    p->bytes = base + ((size_t)i < rest ? 1 : 0);
    offset += p->bytes;
    p->done = 0;
    p->header_done = 0;
    if (is_send) {
      xcoll_wire_header h =
          xcoll_wire_make(XCOLL_WIRE_DATA, st->comm_id, tag, p->bytes, st->rank);
      xcoll_wire_set_fingerprint(&h, &st->comm->fingerprint);
      xcoll_wire_encode(&h, p->header);
      if (!s->tx_head) kick = 1;
      queue_push(&s->tx_head, &s->tx_tail, p);
    } else {
      queue_push(&s->rx_head, &s->rx_tail, p);
    }
  }
  /* A peer that said BYE on a socket will send nothing more on it. */
  for (int i = 0; !is_send && i < nparts && status == XCOLL_SUCCESS; i++) {
    int sock = nparts == 1 ? (int)(message % (uint64_t)st->nsocks) : i;
    if (pe->socks[sock].bye_received)
      status = peer_lost(st, &pe->socks[sock], ECONNRESET);
  }
  /* Start a send at once: the bytes are on their way before the caller
   * posts its receives and waits. */
  if (kick && status == XCOLL_SUCCESS) {
    int progress = 0;
    for (int i = 0; i < nparts && status == XCOLL_SUCCESS; i++) {
      int sock = nparts == 1 ? (int)(message % (uint64_t)st->nsocks) : i;
      tcp_socket *s = &pe->socks[sock];
      if (s->tx_head == &r->parts[i]) status = do_tx(st, s, &progress);
    }
  }
  if (status != XCOLL_SUCCESS) {
    request_put(st, r);
  } else {
    *request = r;
  }
  pthread_mutex_unlock(&st->io_lock);
  after_unlock(st);
  return status;
}

static xcoll_status tcp_isend(void *state, int peer, uint64_t tag,
                              const void *buf, size_t bytes,
                              xcoll_p2p_request **request) {
  /* The buffer is only read; the part keeps a non-const pointer because
   * sends and receives share the part type. */
  return post(state, 1, peer, tag, (void *)(uintptr_t)buf, bytes, request);
}

static xcoll_status tcp_irecv(void *state, int peer, uint64_t tag, void *buf,
                              size_t bytes, xcoll_p2p_request **request) {
  return post(state, 0, peer, tag, buf, bytes, request);
}

static xcoll_status tcp_wait(void *state, xcoll_p2p_request **requests,
                             int count) {
  tcp_state *st = state;
  if (count > 0 && !requests)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "tcp: wait on %d requests with a NULL array", count);
  pthread_mutex_lock(&st->io_lock);
  xcoll_status status = progress_until_done(st, requests, count);
  /* A stall record posted during a wait that then completed is stale; one
   * of a wait that timed out stays, for the ranks waiting on this one. */
  if (status == XCOLL_SUCCESS) xcoll_blame_progressed(&st->blame);
  for (int i = 0; i < count; i++) {
    if (!requests[i]) continue;
    if (requests[i]->state != TCP_REQUEST_FREE) request_put(st, requests[i]);
    requests[i] = NULL;
  }
  pthread_mutex_unlock(&st->io_lock);
  after_unlock(st);
  return status;
}

static xcoll_status tcp_test(void *state, xcoll_p2p_request *request,
                             int *done) {
  tcp_state *st = state;
  if (!request || !done)
    return xcoll_error(st->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "tcp: test with a NULL %s", request ? "done" : "request");
  *done = 0;
  pthread_mutex_lock(&st->io_lock);
  xcoll_status status = st->broken ? rebroken(st) : check_abort(st);
  int progress = 0;
  if (status == XCOLL_SUCCESS) status = sweep(st, &progress);
  if (status == XCOLL_SUCCESS && request->state == TCP_REQUEST_ACTIVE)
    status = poll_once(st, 0, &progress);
  if (status != XCOLL_SUCCESS || request->state != TCP_REQUEST_ACTIVE) {
    *done = 1;
    request_put(st, request);
  }
  pthread_mutex_unlock(&st->io_lock);
  after_unlock(st);
  return status;
}

/* ---- at destroy: messages nobody received ---- */

/* The next message on s that no call of this rank received, if its header
 * is here already (held, or waiting in the socket); 1 and *h when there is
 * one. */
static int unreceived_header(tcp_socket *s, xcoll_wire_header *h) {
  if (s->fd < 0 || s->closed || s->rx_in_payload) return 0;
  uint8_t bytes[HDR];
  if (s->rx_header_got == HDR) {
    memcpy(bytes, s->rx_header, HDR);
  } else if (s->rx_header_got == 0) {
    ssize_t r = recv(s->fd, bytes, HDR, MSG_PEEK | MSG_DONTWAIT);
    if (r != (ssize_t)HDR) return 0;
  } else {
    return 0;
  }
  xcoll_wire_decode(bytes, HDR, h, NULL, 0);
  return h->kind == XCOLL_WIRE_DATA;
}

void xcoll_tcp_report_unreceived(tcp_state *st) {
  if (st->broken || !st->sockets) return;
  for (int p = 0; p < st->world_size; p++) {
    if (p == st->rank || !st->peers[p].socks) continue;
    for (int i = 0; i < st->nsocks; i++) {
      xcoll_wire_header h;
      if (!unreceived_header(&st->peers[p].socks[i], &h)) continue;
      xcoll_fingerprint theirs;
      char call[XCOLL_FINGERPRINT_TEXT_BYTES];
      if (xcoll_fingerprint_decode(h.fingerprint, &theirs) != 0)
        snprintf(call, sizeof call, "a collective");
      else
        xcoll_fingerprint_describe(&theirs, call, sizeof call);
      XCOLL_WARN("tcp: rank %d destroys its communicator with a message from "
                 "rank %d (%s) that none of its calls received: %" PRIu64
                 " bytes (tag 0x%" PRIx64 ") of rank %d's %s, its collective "
                 "#%" PRIu64 ": the ranks called different collectives, or "
                 "rank %d made more calls than this rank",
                 st->rank, p, peer_addr(st, p), h.length, h.tag, p, call,
                 theirs.seq, p);
      break; /* one line per peer */
    }
  }
}

const xcoll_p2p_ops xcoll_tcp_p2p_ops = {
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .wait = tcp_wait,
    .test = tcp_test,
};
