/* net_ibverbs.c - the "ibverbs" net plugin (xcoll_net_ibverbs): the net API
 * of net/net.h over RDMA verbs, host memory only, with the receiver-driven
 * flow of NCCL's net_ib (src/transport/net_ib.cc, NCCL 2.18-2.21, read for
 * the protocol, not copied). This file holds the plugin's table, memory
 * registration and the data path (post and poll); ibverbs_setup.c opens
 * the device and sets up the comms and their queue pairs (listen, connect,
 * accept), and ibverbs_internal.h is what the two share.
 *
 * Connection (one reliable-connected queue pair per comm):
 *   listen:  open the QP (RESET -> INIT) and put its number, PSN, LID, GID
 *            and MTU in the handle, next to a socket-plugin handle for the
 *            bootstrap connection (authenticated by the socket plugin; the
 *            socket part of listen, connect and accept is net/handshake.c,
 *            shared with ucx).
 *   connect: socket connect; QP INIT -> RTR -> RTS towards the listener's QP;
 *            send the hello {QP number, PSN, LID, GID, MTU, address and rkey
 *            of this comm's CTS FIFO} over the socket.
 *   accept:  socket accept; the hello arrives; QP INIT -> RTR -> RTS towards
 *            the sender's QP. The socket stays open as a liveness check: a
 *            dead sender closes it, which a QP on its own would only notice
 *            when it next writes, after the retry timer.
 *
 * Messages, k-th on a comm (slot k % IBN_SLOTS):
 *   irecv:   post a receive WR (it takes the immediate of the data write),
 *            then RDMA-write a clear-to-send entry {address, rkey, size, tag,
 *            index} into slot k of the sender's FIFO.
 *   isend:   no CTS for k yet: return a NULL request (back-pressure). Else
 *            check the tag and the size, RDMA-write the data to the CTS's
 *            address with RDMA_WRITE_WITH_IMM, the immediate being the size.
 *   test:    poll the comm's CQ; a send completes at its write's completion,
 *            a receive at the immediate's (which RC orders after the data).
 * A CTS entry carries k + 1 at both ends, so a torn or stale entry is never
 * taken for the k-th one, and the sender clears it once used. At most
 * IBN_SLOTS messages are in flight per comm; the receiver asks the engine
 * to keep that many receives posted (properties.recvs_ahead).
 *
 * Errors, each naming the peer rank: a CQ error fails the comm, with
 * XCOLL_ERR_REMOTE when the peer is gone (retry or RNR retry exceeded,
 * flushed WRs) and XCOLL_ERR_PROTOCOL when its NIC refused a key or an
 * address (remote access error); a receiver whose bootstrap socket closes
 * is XCOLL_ERR_REMOTE (a dead sender, seen at once). A tag mismatch or an
 * oversize message is XCOLL_ERR_PROTOCOL on both ends (the sender tells the
 * receiver with a reserved immediate value). A posted receive keeps its
 * buffer registered until it completes or its comm closes (ibn_mr_hold), so
 * a receiver that deregisters and then closes is seen by its sender as a
 * closed QP (REMOTE), never as a refused key.
 *
 * Test hooks (never for production): XCOLL_IB_DEBUG_FAULT=skip_cts makes
 * isend write without waiting for its CTS; =reuse_cts makes every 5th isend
 * take the previous message's CTS again; =bad_rkey makes irecv advertise a
 * wrong rkey. tests/ibverbs.cmake checks that each is caught. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibv_wrap.h"
#include "ibverbs_internal.h"
#include "net.h"
#include "net_plugin_log.h"

#define IBN_CQ_BATCH 16
/* Reserved immediates (a size is at most IBN_MAX_MESSAGE). */
#define IBN_IMM_TRUNCATED 0xffffffffu
#define IBN_IMM_BAD_TAG 0xfffffffeu
#define IBN_MAX_MESSAGE 0xfffffff0u
/* wr_id of a CTS write: the request slot with this bit. */
#define IBN_WR_CTS 0x100u

/* net_plugin_log.h keeps the log function per file: this file's is set
 * here, ibverbs_setup.c's (with the device) by ibn_setup_init. */
static xcoll_status ib_init(xcoll_net_log_fn log) {
  net_plugin_log_set(log);
  return ibn_setup_init(log);
}

/* Outstanding CTS entries at once, for the INFO line at close (a check that
 * slots are kept in flight, not a speed): written by a receiver and not yet
 * answered by data, in any recv comm of the process; and found waiting in
 * a sender's FIFO at an isend, in any send comm. */
static _Atomic int max_outstanding_cts;
static _Atomic int max_cts_waiting;

static void raise_to(_Atomic int *max, int value) {
  int old = atomic_load(max);
  while (value > old && !atomic_compare_exchange_weak(max, &old, value)) {
  }
}

/* Record the comm's first error (later ones are consequences), silently:
 * poll_comm reports it once. */
static void comm_set(ibn_comm *c, xcoll_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void comm_set(ibn_comm *c, xcoll_status status, const char *fmt, ...) {
  if (c->error != XCOLL_SUCCESS)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->error_text, sizeof c->error_text, fmt, ap);
  va_end(ap);
  c->error = status;
}

/* Record and report: the comm's (first) error, logged, as the status. */
#define comm_fail(c, status, ...)                                              \
  (comm_set((c), (status), __VA_ARGS__),                                       \
   net_fail((c)->error, "%s", (c)->error_text))

static const char *wc_text(enum ibv_wc_status status) {
  const char *t = ibn_dev.api->wc_status_str(status);
  return t ? t : "unknown status";
}

/* ---- memory ---- */

static xcoll_status ib_reg_mr(xcoll_net_send_comm *send_comm,
                              xcoll_net_recv_comm *recv_comm, void *data,
                              size_t bytes, int ptr_type, void **mhandle) {
  if (mhandle != NULL)
    *mhandle = NULL;
  if ((send_comm == NULL) == (recv_comm == NULL) || mhandle == NULL ||
      data == NULL || bytes == 0)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: reg_mr needs exactly one comm, a buffer of "
                    "at least one byte and mhandle");
  if (ptr_type != XCOLL_NET_PTR_HOST)
    return net_fail(XCOLL_ERR_NOT_SUPPORTED,
                    "net ibverbs: reg_mr of pointer type %d: this plugin "
                    "moves host memory only",
                    ptr_type);
  ibn_mr *m = ibn_mr_get(data, bytes);
  if (m == NULL)
    return net_fail(XCOLL_ERR_SYSTEM,
                    "net ibverbs: ibv_reg_mr of %zu bytes on %s failed: %s "
                    "(check ulimit -l, the locked-memory limit)",
                    bytes, ibn_dev.name, strerror(errno));
  *mhandle = m;
  return XCOLL_SUCCESS;
}

static xcoll_status ib_dereg_mr(xcoll_net_send_comm *send_comm,
                                xcoll_net_recv_comm *recv_comm, void *mhandle) {
  (void)send_comm;
  (void)recv_comm;
  ibn_mr_put(mhandle);
  return XCOLL_SUCCESS;
}

/* Is [data, data + bytes) inside the registration m? */
static int mr_covers(const ibn_mr *m, const void *data, size_t bytes) {
  uintptr_t start = (uintptr_t)m->addr, p = (uintptr_t)data;
  return p >= start && bytes <= m->bytes && p - start <= m->bytes - bytes;
}

/* ---- progress ---- */

/* One work completion for comm c: mark its request done, or fail the comm
 * (the first error is kept; later completions are still taken). */
static void take_completion(ibn_comm *c, const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    /* The peer gone or unreachable is REMOTE; a key or address the peer's
     * NIC refused is a broken protocol (PROTOCOL), not a death. */
    int gone = wc->status == IBV_WC_RETRY_EXC_ERR ||
               wc->status == IBV_WC_RNR_RETRY_EXC_ERR ||
               wc->status == IBV_WC_WR_FLUSH_ERR;
    comm_set(c, gone ? XCOLL_ERR_REMOTE : XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: %s rank %d failed on the QP: %s (work "
             "completion status %d)%s",
             c->rank, c->is_send ? "sending to" : "receiving from",
             c->peer_rank, wc_text(wc->status), (int)wc->status,
             wc->status == IBV_WC_RETRY_EXC_ERR
                 ? "; the peer is gone or unreachable"
             : wc->status == IBV_WC_REM_ACCESS_ERR
                 ? "; the remote key or address was refused"
                 : "");
    return;
  }
  uint64_t id = wc->wr_id;
  if (id & IBN_WR_CTS)
    return; /* a CTS write landed */
  if (id >= IBN_SLOTS || !c->requests[id].used) {
    comm_set(c, XCOLL_ERR_INTERNAL,
             "net ibverbs: rank %d: a completion for no request "
             "(wr_id %" PRIu64 ") from rank %d",
             c->rank, id, c->peer_rank);
    return;
  }
  ibn_request *r = &c->requests[id];
  if (c->is_send) {
    r->done = 1;
    return;
  }
  uint32_t imm = ntohl(wc->imm_data);
  if (!(wc->wc_flags & IBV_WC_WITH_IMM))
    comm_set(c, XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: rank %d's write came without its "
             "immediate size",
             c->rank, c->peer_rank);
  else if (imm == IBN_IMM_TRUNCATED || imm == IBN_IMM_BAD_TAG)
    comm_set(c, XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: %s from rank %d (tag %" PRIu32
             ", %zu bytes posted)",
             c->rank,
             imm == IBN_IMM_TRUNCATED
                 ? "message truncated: a longer message"
                 : "the two ranks disagree on the order of messages: "
                   "another tag",
             c->peer_rank, r->tag, r->bytes);
  else if (imm > r->bytes)
    comm_set(c, XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: rank %d reports %" PRIu32
             " bytes written into a receive of %zu",
             c->rank, c->peer_rank, imm, r->bytes);
  else {
    r->got = imm;
    r->done = 1;
  }
}

/* Take what the CQ holds and hand it to the requests; then the comm's
 * sticky error, if any. The liveness socket is looked at before the CQ: a
 * sender writes its last messages before it exits and closes the socket,
 * so they are in the CQ by the time the close is seen, and their requests
 * report done as net.h requires. */
static xcoll_status poll_comm(ibn_comm *c) {
  int peer_closed = 0;
  if (c->liveness != NULL) {
    int done = 0;
    xcoll_status s = xcoll_net_socket.test(c->liveness, &done, NULL);
    if (s != XCOLL_SUCCESS || done) {
      c->liveness = NULL;
      peer_closed = 1;
    }
  }
  struct ibv_wc wc[IBN_CQ_BATCH];
  for (;;) {
    int n = ibv_poll_cq(c->cq, IBN_CQ_BATCH, wc);
    if (n < 0) {
      comm_set(c, XCOLL_ERR_SYSTEM,
               "net ibverbs: rank %d: polling the CQ of the "
               "connection with rank %d failed (overrun?)",
               c->rank, c->peer_rank);
      break;
    }
    for (int i = 0; i < n; i++)
      take_completion(c, &wc[i]);
    if (n < IBN_CQ_BATCH)
      break;
  }
  if (peer_closed)
    comm_set(c, XCOLL_ERR_REMOTE,
             "net ibverbs: rank %d: rank %d is gone (its bootstrap "
             "connection closed)",
             c->rank, c->peer_rank);
  if (c->error != XCOLL_SUCCESS)
    return net_fail(c->error, "%s", c->error_text);
  return XCOLL_SUCCESS;
}

static ibn_request *take_request(ibn_comm *c, size_t *slot) {
  *slot = (size_t)(c->posted % IBN_SLOTS);
  ibn_request *r = &c->requests[*slot];
  if (c->in_flight >= IBN_SLOTS || r->used)
    return NULL;
  memset(r, 0, sizeof *r);
  r->comm = c;
  r->used = 1;
  return r;
}

static xcoll_status ib_isend(xcoll_net_send_comm *send_comm, const void *data,
                             size_t bytes, uint32_t tag, void *mhandle,
                             xcoll_net_request **request) {
  if (request != NULL)
    *request = NULL;
  ibn_comm *c = (ibn_comm *)send_comm;
  ibn_mr *m = mhandle;
  if (c == NULL || request == NULL || !c->is_send || m == NULL ||
      (!data && bytes) || !mr_covers(m, data, bytes))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: isend needs a send comm, a request and data "
                    "inside the registered region mhandle");
  if (bytes > IBN_MAX_MESSAGE)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: isend of %zu bytes: at most %u per message",
                    bytes, IBN_MAX_MESSAGE);
  xcoll_status s = poll_comm(c);
  if (s != XCOLL_SUCCESS)
    return s;
  size_t slot;
  if (c->in_flight >= IBN_SLOTS || c->requests[c->posted % IBN_SLOTS].used)
    return XCOLL_SUCCESS;
  /* The receiver's NIC writes the FIFO behind the compiler's back: every
   * read of it is an atomic load. */
  ibn_cts *cts = &c->fifo[c->posted % IBN_SLOTS];
  uint64_t want = c->posted + 1;
  int faulty = ibn_dev.fault == IBN_FAULT_SKIP_CTS ||
               (ibn_dev.fault == IBN_FAULT_REUSE_CTS && c->posted % 5 == 4);
  if (ibn_dev.fault == IBN_FAULT_REUSE_CTS && faulty)
    cts = &c->fifo[(c->posted - 1) % IBN_SLOTS];
  if (!faulty &&
      (__atomic_load_n(&cts->seq, __ATOMIC_ACQUIRE) != want ||
       __atomic_load_n(&cts->seq_end, __ATOMIC_ACQUIRE) != (uint32_t)want))
    return XCOLL_SUCCESS; /* no clear-to-send yet */
  /* How far ahead the receiver is: entries for later messages already in. */
  int ahead = 1;
  while (
      ahead < IBN_SLOTS &&
      __atomic_load_n(&c->fifo[(c->posted + (uint64_t)ahead) % IBN_SLOTS].seq,
                      __ATOMIC_RELAXED) == want + (uint64_t)ahead)
    ahead++;
  if (ahead > c->max_cts) {
    c->max_cts = ahead;
    raise_to(&max_cts_waiting, ahead);
  }
  uint64_t remote_addr = __atomic_load_n(&cts->addr, __ATOMIC_RELAXED);
  uint32_t rkey = __atomic_load_n(&cts->rkey, __ATOMIC_RELAXED);
  uint32_t capacity = __atomic_load_n(&cts->size, __ATOMIC_RELAXED);
  uint32_t cts_tag = __atomic_load_n(&cts->tag, __ATOMIC_RELAXED);
  /* Consumed: clear it (as NCCL's sender does), so that a write that runs
   * ahead of its CTS, or takes one twice, finds no key rather than a stale
   * one that happens to point at the right slot. */
  memset(cts, 0, sizeof *cts);
  ibn_request *r = take_request(c, &slot);
  r->tag = tag;
  r->bytes = bytes;
  r->got = bytes;
  uint32_t imm = (uint32_t)bytes;
  size_t write_bytes = bytes;
  xcoll_status verdict = XCOLL_SUCCESS;
  if (!faulty && cts_tag != tag) {
    imm = IBN_IMM_BAD_TAG;
    write_bytes = 0;
    verdict = XCOLL_ERR_PROTOCOL;
  } else if (!faulty && bytes > capacity) {
    imm = IBN_IMM_TRUNCATED;
    write_bytes = 0;
    verdict = XCOLL_ERR_PROTOCOL;
  }
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)data,
                        .length = (uint32_t)write_bytes,
                        .lkey = m->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = write_bytes > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  int e = ibv_post_send(c->qp, &wr, &bad);
  if (e != 0) {
    r->used = 0;
    return comm_fail(c, XCOLL_ERR_SYSTEM,
                     "net ibverbs: rank %d: posting a write to rank %d "
                     "failed: %s",
                     c->rank, c->peer_rank, strerror(e));
  }
  c->posted++;
  c->in_flight++;
  if (verdict != XCOLL_SUCCESS) {
    r->used = 0;
    c->in_flight--;
    return comm_fail(c, verdict,
                     "net ibverbs: rank %d: %s for rank %d (tag %" PRIu32
                     ", %zu bytes; the receive posted tag %" PRIu32 ", %" PRIu32
                     " bytes)",
                     c->rank,
                     cts_tag != tag ? "the two ranks disagree on the order of "
                                      "messages: another tag"
                                    : "message truncated: a message longer "
                                      "than the receive",
                     c->peer_rank, tag, bytes, cts_tag, capacity);
  }
  *request = (xcoll_net_request *)r;
  return XCOLL_SUCCESS;
}

static xcoll_status ib_irecv(xcoll_net_recv_comm *recv_comm, void *data,
                             size_t bytes, uint32_t tag, void *mhandle,
                             xcoll_net_request **request) {
  if (request != NULL)
    *request = NULL;
  ibn_comm *c = (ibn_comm *)recv_comm;
  ibn_mr *m = mhandle;
  if (c == NULL || request == NULL || c->is_send || m == NULL ||
      (!data && bytes) || !mr_covers(m, data, bytes))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: irecv needs a recv comm, a request and a "
                    "buffer inside the registered region mhandle");
  if (bytes > IBN_MAX_MESSAGE)
    bytes = IBN_MAX_MESSAGE;
  size_t slot;
  ibn_request *r = take_request(c, &slot);
  if (r == NULL)
    return XCOLL_SUCCESS;
  r->tag = tag;
  r->bytes = bytes;
  if (c->error != XCOLL_SUCCESS) {
    /* The sender is gone or the QP broke. The caller may post receives no
     * one needs (ahead of its last message): fail this one at test, where
     * the caller can tell whether it mattered (net.h: only requests that
     * needed data after the failure fail). */
    r->failed = 1;
    c->posted++;
    c->in_flight++;
    *request = (xcoll_net_request *)r;
    return XCOLL_SUCCESS;
  }
  /* The receive first: the data's immediate needs it when it lands. */
  struct ibv_recv_wr rwr, *rbad = NULL;
  memset(&rwr, 0, sizeof rwr);
  rwr.wr_id = slot;
  rwr.num_sge = 0;
  int e = ibv_post_recv(c->qp, &rwr, &rbad);
  if (e != 0) {
    r->used = 0;
    return comm_fail(c, XCOLL_ERR_SYSTEM,
                     "net ibverbs: rank %d: posting a receive for rank %d "
                     "failed: %s",
                     c->rank, c->peer_rank, strerror(e));
  }
  ibn_cts *cts = &c->cts_out[slot];
  uint64_t seq = c->posted + 1;
  cts->seq = seq;
  cts->addr = (uint64_t)(uintptr_t)data;
  cts->rkey = ibn_dev.fault == IBN_FAULT_BAD_RKEY ? m->mr->rkey ^ 0x5a5a5au
                                                  : m->mr->rkey;
  cts->size = (uint32_t)bytes;
  cts->tag = tag;
  cts->seq_end = (uint32_t)seq;
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)cts,
                        .length = sizeof *cts,
                        .lkey = c->cts_mr->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = IBN_WR_CTS | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = c->remote_fifo + slot * sizeof(ibn_cts);
  wr.wr.rdma.rkey = c->remote_rkey;
  e = ibv_post_send(c->qp, &wr, &bad);
  if (e != 0) {
    r->used = 0;
    return comm_fail(c, XCOLL_ERR_SYSTEM,
                     "net ibverbs: rank %d: posting the clear-to-send to "
                     "rank %d failed: %s",
                     c->rank, c->peer_rank, strerror(e));
  }
  ibn_mr_hold(m);
  r->mr = m;
  c->posted++;
  c->in_flight++;
  if (c->in_flight > c->max_cts) {
    c->max_cts = c->in_flight;
    raise_to(&max_outstanding_cts, c->in_flight);
  }
  *request = (xcoll_net_request *)r;
  return XCOLL_SUCCESS;
}

static void release(ibn_request *r) {
  ibn_mr_put(r->mr);
  r->mr = NULL;
  r->used = 0;
  r->done = 0;
  r->failed = 0;
  r->comm->in_flight--;
}

static xcoll_status ib_test(xcoll_net_request *request, int *done,
                            size_t *bytes) {
  if (done != NULL)
    *done = 0;
  ibn_request *r = (ibn_request *)request;
  if (r == NULL || done == NULL || !r->used)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: test of a NULL or already released "
                    "request");
  ibn_comm *c = r->comm;
  if (r->failed) {
    release(r);
    return net_fail(c->error, "%s", c->error_text);
  }
  xcoll_status s = r->done ? XCOLL_SUCCESS : poll_comm(c);
  /* poll_comm may have completed r even when it reports an error. */
  /* A request that completed before the comm failed still reports done. */
  if (r->done) {
    *done = 1;
    if (bytes != NULL)
      *bytes = r->got;
    release(r);
    return XCOLL_SUCCESS;
  }
  if (s != XCOLL_SUCCESS)
    release(r);
  return s;
}

static void close_comm(ibn_comm *c) {
  if (c == NULL)
    return;
  if (c->is_send)
    net_info("net ibverbs: rank %d's connection to rank %d closed after "
             "%" PRIu64 " messages; at most %d CTS entries waited in its FIFO "
             "at once (%d in this process)",
             c->rank, c->peer_rank, c->posted, c->max_cts,
             atomic_load(&max_cts_waiting));
  else
    net_info("net ibverbs: rank %d's connection from rank %d closed after "
             "%" PRIu64 " messages; at most %d CTS entries were outstanding "
             "at once (%d in this process)",
             c->rank, c->peer_rank, c->posted, c->max_cts,
             atomic_load(&max_outstanding_cts));
  /* Destroying the QP releases whatever was in flight: the requests are
   * slots of the comm and go with it. */
  ibn_comm_free(c);
}

static void ib_close_send(xcoll_net_send_comm *send_comm) {
  close_comm((ibn_comm *)send_comm);
}

static void ib_close_recv(xcoll_net_recv_comm *recv_comm) {
  close_comm((ibn_comm *)recv_comm);
}

const xcoll_net_v1 xcoll_net_ibverbs = {
    .name = "ibverbs",
    .init = ib_init,
    .devices = ib_devices,
    .get_properties = ib_get_properties,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .close_send = ib_close_send,
    .close_recv = ib_close_recv,
    .close_listen = ib_close_listen,
};