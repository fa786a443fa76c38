/* net_socket.c - the "socket" net plugin (xcoll_net_socket): the net API of
 * net/net.h over stream sockets, host memory only: TCP, or Unix-domain
 * sockets between ranks of one host (XCOLL_SOCKET_UNIX), playing the part
 * of NCCL's net_socket transport. One-way connections; a message of
 * SOCK_STRIPE_MIN bytes or more is striped over XCOLL_NSOCKS_PERPEER
 * sockets; all progress happens inside isend/irecv/test, with no thread of
 * its own. This file holds the plugin's table, its device, the data comms
 * and their data path; the connection set-up with its authentication stage
 * machines is in socket_conn.c (the connect side) and socket_listen.c (the
 * listener and the accept side), and socket_internal.h is what the three
 * share. docs/net-plugins.md, "The socket plugin in detail", describes the
 * set-up, the wire format, the receive stage and the error rules. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net.h"
#include "net_plugin_log.h"
#include "net_socket_wire.h"
#include "netaddr.h"
#include "socket_internal.h"

/* NCCL_SOCKET_MIN_TASKSIZE: below this a message is not worth cutting. */
#define SOCK_STRIPE_MIN (64u * 1024u)
#define SOCK_MR_MAGIC 0x524d534eu
/* Socket 0's receive stage, per recv comm, bytes. 16 KiB holds the header
 * and whole payload of any LL-protocol message of the nccl_like backend
 * (at most NL_LL_THRESHOLD_BYTES = 4 KiB of data, 8 KiB as LL lines) with
 * room for the next ones queued behind it, so that one recv() takes a
 * small message, or several; it is small beside a socket buffer, and a
 * payload with half of it or more still to come is read straight into the
 * destination instead, so that of a large message only what came with its
 * header (at most this much) is copied once more. */
#define SOCK_STAGE_BYTES (16u * 1024u)
/* SO_SNDBUF of a Unix-domain data socket (XCOLL_SOCKET_UNIX), bytes; the
 * kernel caps it at net.core.wmem_max. Measured at P=4 on 2 cores
 * (xcoll-perf 1-16 MiB, nccl_like's Rabenseifner): the default 212992 B
 * gave 1.24-1.29 GB/s busbw in place at 1 MiB, 1 MiB gave 1.78-2.09 and
 * 4 MiB 1.75-1.77 (tcp 1.34-2.07 in the same runs). */
#define SOCK_UNIX_SNDBUF_BYTES (1 << 20)

/* ---- options of the data sockets ---- */

/* 1 when connected socket fd joins two addresses of this host (the traffic
 * never leaves the loopback device): its peer's address is its own, or a
 * loopback one. */
static int same_host(int fd) {
  struct sockaddr_storage mine, peer;
  socklen_t mine_len = sizeof mine, peer_len = sizeof peer;
  if (getsockname(fd, (struct sockaddr *)&mine, &mine_len) != 0 ||
      getpeername(fd, (struct sockaddr *)&peer, &peer_len) != 0 ||
      mine.ss_family != peer.ss_family)
    return 0;
  if (peer.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&mine;
    const struct sockaddr_in *b = (const struct sockaddr_in *)&peer;
    return a->sin_addr.s_addr == b->sin_addr.s_addr ||
           (ntohl(b->sin_addr.s_addr) >> 24) == 127;
  }
  if (peer.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&mine;
    const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)&peer;
    return memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0 ||
           IN6_IS_ADDR_LOOPBACK(&b->sin6_addr);
  }
  return 0;
}

/* XCOLL_SOCKET_CC: the TCP congestion control of the data sockets.
 * auto (unset): reno on a connection within this host, the system's
 * default elsewhere; system: the system's default everywhere; NAME: NAME
 * everywhere (tcp(7) TCP_CONGESTION; an unprivileged process may pick
 * those in net.ipv4.tcp_allowed_congestion_control). Why: with bbr as the
 * system default, the kernel paces each socket with a high-resolution
 * timer; on loopback, where there is nothing to control, the nccl_like
 * mesh's flows were paced at 4-5 GB/s with 16,000 timer interrupts a
 * second (tcp_pace_kick) and the P=4 allreduce ran at half tcp's busbw
 * from 4 MiB (docs/nccl_like.md, "Paced sockets"); cubic was paced the
 * same, reno was not. Reno is always allowed. A failure
 * leaves the default and says so once. */
static void set_congestion(int fd) {
  const char *want = getenv("XCOLL_SOCKET_CC");
  if (want != NULL && strcmp(want, "system") == 0)
    return;
  if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
    if (!same_host(fd))
      return;
    want = "reno";
  }
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, want, strlen(want)) != 0) {
    static atomic_int warned;
    if (atomic_exchange(&warned, 1) == 0)
      net_warn("net socket: XCOLL_SOCKET_CC=%s: the kernel refused that "
               "congestion control (%s); the system's default stays (see "
               "net.ipv4.tcp_allowed_congestion_control)",
               want, strerror(errno));
  }
}

static void tune_socket(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int domain = AF_INET;
  socklen_t len = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
      domain == AF_UNIX) {
    /* No TCP to tune; the send buffer bounds a Unix stream's bytes in
     * flight (the receiver's is not used), and its default (212992 B,
     * net.core.wmem_default) halved the P=4 busbw at 1 MiB. */
    int bytes = SOCK_UNIX_SNDBUF_BYTES;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_congestion(fd);
}

/* ---- the device: one, the interface core/netaddr.h picks ---- */

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static xcoll_status device_status;
static char device_error[SOCK_MESSAGE_BYTES];
xcoll_netaddr sock_device_addr;
static char device_name[IF_NAMESIZE];
static int device_speed_mbps;

static void device_init(void) {
  const char *port_text = getenv("MASTER_PORT");
  int port = port_text ? atoi(port_text) : 0;
  device_status = xcoll_netaddr_choose(getenv("XCOLL_SOCKET_IFNAME"),
                                       getenv("MASTER_ADDR"), port,
                                       "net socket", &sock_device_addr,
                                       device_error, sizeof device_error);
  if (device_status != XCOLL_SUCCESS) return;
  xcoll_netaddr_ifname(sock_device_addr.publish_addr, device_name);
  if (device_name[0] == '\0') snprintf(device_name, sizeof device_name, "?");
  char path[128];
  snprintf(path, sizeof path, "/sys/class/net/%s/speed", device_name);
  FILE *f = fopen(path, "r");
  int speed = 0;
  if (f != NULL) {
    if (fscanf(f, "%d", &speed) != 1 || speed < 0) speed = 0;
    fclose(f);
  }
  device_speed_mbps = speed;
}

static xcoll_status socket_init(xcoll_net_log_fn log) {
  net_plugin_log_set(log);
  sock_conn_log_set(log);
  sock_listen_log_set(log);
  pthread_once(&device_once, device_init);
  if (device_status != XCOLL_SUCCESS)
    return net_fail(device_status, "%s", device_error);
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sock_device_addr.publish_addr, ip, sizeof ip);
  net_info("net socket: device 0 is %s (%s), chosen by %s", device_name, ip,
       sock_device_addr.why);
  return XCOLL_SUCCESS;
}

static xcoll_status socket_devices(int *count) {
  if (count == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT, "net socket: devices(NULL)");
  *count = 1;
  return XCOLL_SUCCESS;
}

xcoll_status sock_check_device(int device) {
  pthread_once(&device_once, device_init);
  if (device != 0)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: device %d does not exist (there is 1: 0)", device);
  if (device_status != XCOLL_SUCCESS)
    return net_fail(device_status, "%s", device_error);
  return XCOLL_SUCCESS;
}

static xcoll_status socket_get_properties(int device,
                                          xcoll_net_properties *props) {
  xcoll_status s = sock_check_device(device);
  if (s != XCOLL_SUCCESS) return s;
  if (props == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: get_properties with NULL properties");
  memset(props, 0, sizeof *props);
  snprintf(props->name, sizeof props->name, "%s", device_name);
  props->ptr_support = XCOLL_NET_PTR_HOST;
  props->speed_mbps = device_speed_mbps;
  props->latency_us = 0;
  props->max_comms = 65536;
  props->max_requests = XCOLL_NET_MAX_REQUESTS;
  return XCOLL_SUCCESS;
}

/* ---- data comms and requests ---- */

/* Socket i's part of a size-byte message: [*offset, *offset + *length). */
static void part_of(size_t size, int nsocks, int i, size_t *offset,
                    size_t *length) {
  if (size < SOCK_STRIPE_MIN || nsocks == 1) {
    *offset = 0;
    *length = i == 0 ? size : 0;
    return;
  }
  size_t per = (size + (size_t)nsocks - 1) / (size_t)nsocks;
  size_t start = per * (size_t)i;
  if (start > size) start = size;
  size_t end = start + per > size ? size : start + per;
  *offset = start;
  *length = end - start;
}

/* Sockets that carry something of a size-byte message (socket 0 always
 * carries the header). */
static int parts_of(size_t size, int nsocks) {
  int n = 1;
  for (int i = 1; i < nsocks; i++) {
    size_t offset, length;
    part_of(size, nsocks, i, &offset, &length);
    if (length > 0) n++;
  }
  return n;
}

sock_comm *sock_comm_new(int is_send, int nsocks, const int *fds,
                         int peer_rank, const char *peer) {
  sock_comm *c = calloc(1, sizeof *c + (is_send ? 0 : SOCK_STAGE_BYTES));
  if (c == NULL) return NULL;
  c->is_send = is_send;
  c->nsocks = nsocks;
  for (int i = 0; i < nsocks; i++) {
    c->fds[i] = fds[i];
    tune_socket(fds[i]);
  }
  c->peer_rank = peer_rank;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  for (int i = 0; i < XCOLL_NET_MAX_REQUESTS; i++)
    c->requests[i].comm = c;
  return c;
}

static void comm_free(sock_comm *c) {
  if (c == NULL) return;
  for (int i = 0; i < c->nsocks; i++)
    if (c->fds[i] >= 0) close(c->fds[i]);
  free(c);
}

/* Say c's failure again: an expected one (a peer's close at a message
 * boundary, which ends every job) is recorded without a warning. */
static xcoll_status comm_repeat(sock_comm *c) {
  if (c->error_expected)
    return net_fail_expected(c->error, "%s", c->error_text);
  return net_fail(c->error, "%s", c->error_text);
}

/* Break c with status and a sentence; later calls repeat it. */
static xcoll_status comm_fail(sock_comm *c, xcoll_status status,
                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static xcoll_status comm_fail(sock_comm *c, xcoll_status status,
                              const char *fmt, ...) {
  if (c->error == XCOLL_SUCCESS) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error_text, sizeof c->error_text, fmt, ap);
    va_end(ap);
    c->error = status;
  }
  return comm_repeat(c);
}

/* A failed send() or recv() on socket i (r = its return value). */
static xcoll_status io_error(sock_comm *c, int i, ssize_t r, int err) {
  const char *what = c->is_send ? "send to" : "receive from";
  if (r == 0 || err == ECONNRESET || err == EPIPE || err == ENOTCONN)
    return comm_fail(c, XCOLL_ERR_REMOTE,
                     "net socket: rank %d (%s) closed the connection (socket "
                     "%d of %d) during a %s; see that rank's log for why",
                     c->peer_rank, c->peer, i, c->nsocks,
                     c->is_send ? "send" : "receive");
  return comm_fail(c, XCOLL_ERR_SYSTEM,
                   "net socket: %s rank %d (%s) failed on socket %d: %s", what,
                   c->peer_rank, c->peer, i, strerror(err));
}

/* Move what socket i of a send comm can move now. Returns bytes moved (>0),
 * 0 when it would block or has nothing to do, -1 on error. Sets *drained
 * when the kernel took less than offered (its buffer is full) or nothing;
 * with *drained set it makes no more system calls, so that a progress call
 * does not end with a sendmsg() that is sure to fail with EAGAIN. */
static ssize_t send_progress(sock_comm *c, int i, int *drained) {
  ssize_t moved = 0;
  while (c->cursor[i] < c->posted) {
    sock_request *r = &c->requests[c->cursor[i] % XCOLL_NET_MAX_REQUESTS];
    if (!r->used || r->seq != c->cursor[i]) {
      /* That message completed (and its slot may hold a newer one) without
       * a part on this socket. */
      c->cursor[i]++;
      continue;
    }
    size_t offset, length;
    part_of(r->size, c->nsocks, i, &offset, &length);
    if (i > 0 && length == 0) {
      c->cursor[i]++;
      continue;
    }
    struct iovec iov[2];
    int n = 0;
    if (i == 0 && c->header_done < SOCK_HEADER_BYTES) {
      iov[n].iov_base = r->header + c->header_done;
      iov[n].iov_len = SOCK_HEADER_BYTES - c->header_done;
      n++;
    }
    if (r->part_done[i] < length) {
      iov[n].iov_base = r->data + offset + r->part_done[i];
      iov[n].iov_len = length - r->part_done[i];
      n++;
    }
    if (n > 0) {
      if (*drained)
        return moved;
      struct msghdr msg;
      memset(&msg, 0, sizeof msg);
      msg.msg_iov = iov;
      msg.msg_iovlen = (size_t)n;
      ssize_t sent = sendmsg(c->fds[i], &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
          *drained = 1;
          return moved;
        }
        io_error(c, i, sent, errno);
        return -1;
      }
      moved += sent;
      size_t left = (size_t)sent;
      if (i == 0 && c->header_done < SOCK_HEADER_BYTES) {
        size_t h = SOCK_HEADER_BYTES - c->header_done;
        if (left < h) h = left;
        c->header_done += h;
        left -= h;
      }
      r->part_done[i] += left;
      if (c->header_done < (i == 0 ? SOCK_HEADER_BYTES : 0) ||
          r->part_done[i] < length) {
        *drained = 1; /* the kernel took less: its buffer is full */
        return moved;
      }
    }
    r->parts_left--;
    c->cursor[i]++;
    if (i == 0) c->header_done = 0;
  }
  return moved;
}

/* Socket 0 of a recv comm has read message r's header (SOCK_HEADER_BYTES
 * at header): check it. */
static int check_header(sock_comm *c, sock_request *r, const uint8_t *header) {
  uint32_t magic, tag;
  uint64_t size;
  sock_header_verdict verdict =
      sock_header_check(header, r->tag, r->bytes, &magic, &tag, &size);
  if (verdict == SOCK_HEADER_BAD_MAGIC) {
    comm_fail(c, XCOLL_ERR_PROTOCOL,
              "net socket: rank %d (%s) sent a message header with magic "
              "%08x instead of %08x: the stream is out of step (mismatched "
              "XCOLL_NSOCKS_PERPEER or plugin versions?)",
              c->peer_rank, c->peer, magic, SOCK_MSG_MAGIC);
    return -1;
  }
  if (verdict == SOCK_HEADER_BAD_TAG) {
    comm_fail(c, XCOLL_ERR_PROTOCOL,
              "net socket: rank %d (%s) sent message %" PRIu64 " with tag %" PRIu32
              " where the posted receive expects tag %" PRIu32
              ": the two ranks disagree on the order of messages",
              c->peer_rank, c->peer, r->seq, tag, r->tag);
    return -1;
  }
  if (verdict == SOCK_HEADER_TOO_LONG) {
    comm_fail(c, XCOLL_ERR_PROTOCOL,
              "net socket: message truncated: rank %d (%s) sent %" PRIu64
              " bytes (tag %" PRIu32 ") to a receive of %zu bytes",
              c->peer_rank, c->peer, size, tag, r->bytes);
    return -1;
  }
  r->size = (size_t)size;
  r->header_known = 1;
  r->parts_left = parts_of(r->size, c->nsocks);
  return 0;
}

static size_t stage_held(const sock_comm *c) {
  return c->stage_end - c->stage_start;
}

/* One recv() from socket 0 into the stage, of whatever is there, behind
 * the bytes it still holds (a partial header, moved to its front first).
 * in_header: the recv is for a header (an end of stream before any byte
 * of it is a close between messages). Returns bytes read (0: would
 * block), -1 on error; sets *drained when it got less than the room. */
static ssize_t stage_fill(sock_comm *c, int in_header, int *drained) {
  size_t held = stage_held(c);
  if (c->stage_start > 0) {
    memmove(c->stage, c->stage + c->stage_start, held);
    c->stage_start = 0;
    c->stage_end = held;
  }
  size_t room = SOCK_STAGE_BYTES - held;
  ssize_t got = recv(c->fds[0], c->stage + held, room, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    *drained = 1;
    return 0;
  }
  if (got <= 0) {
    /* End of stream before any byte of the next message: the peer closed
     * between messages, as every rank does at the end of a job while a
     * receive is posted ahead; whether that receive was needed is the
     * caller's to judge. A part of a header in the stage is not a
     * boundary. */
    if (got == 0 && in_header && held == 0 && c->error == XCOLL_SUCCESS)
      c->error_expected = 1;
    io_error(c, 0, got, got == 0 ? 0 : errno);
    return -1;
  }
  c->stage_end += (size_t)got;
  if ((size_t)got < room)
    *drained = 1;
  return got;
}

/* Copy up to want bytes from the front of the stage to dst; returns how
 * many. */
static size_t stage_take(sock_comm *c, char *dst, size_t want) {
  size_t take = stage_held(c) < want ? stage_held(c) : want;
  memcpy(dst, c->stage + c->stage_start, take);
  c->stage_start += take;
  if (c->stage_start == c->stage_end)
    c->stage_start = c->stage_end = 0;
  return take;
}

/* Receive what socket i of a recv comm can receive now; returns bytes given
 * to messages (headers and parts; from the stage or read straight), -1 on
 * error. Socket 0 reads through the stage: a header, or a rest of a part
 * below half the stage, comes from one recv() of all there is, and what
 * follows stays staged for the messages after; a longer rest is read
 * straight into the destination. Sets *drained as send_progress does when
 * a recv() got less than asked or nothing; with *drained set no system
 * call is made, and socket 0 still gives posted messages what the stage
 * holds (irecv calls it so, to make no system call). */
static ssize_t recv_progress(sock_comm *c, int i, int *drained) {
  ssize_t moved = 0;
  while (c->cursor[i] < c->posted) {
    sock_request *r = &c->requests[c->cursor[i] % XCOLL_NET_MAX_REQUESTS];
    if (!r->used || r->seq != c->cursor[i]) {
      /* That message completed (and its slot may hold a newer one) without
       * a part on this socket. */
      c->cursor[i]++;
      continue;
    }
    if (i == 0 && !r->header_known) {
      while (stage_held(c) < SOCK_HEADER_BYTES) {
        if (*drained)
          return moved;
        if (stage_fill(c, 1, drained) < 0)
          return -1;
      }
      if (check_header(c, r, c->stage + c->stage_start) != 0)
        return -1;
      c->stage_start += SOCK_HEADER_BYTES;
      if (c->stage_start == c->stage_end)
        c->stage_start = c->stage_end = 0;
      moved += SOCK_HEADER_BYTES;
    }
    if (!r->header_known) return moved; /* socket 0 has not got there yet */
    size_t offset, length;
    part_of(r->size, c->nsocks, i, &offset, &length);
    if (i > 0 && length == 0) {
      c->cursor[i]++;
      continue;
    }
    while (r->part_done[i] < length) {
      char *dst = r->data + offset + r->part_done[i];
      size_t want = length - r->part_done[i];
      if (i == 0 && stage_held(c) > 0) {
        size_t took = stage_take(c, dst, want);
        r->part_done[0] += took;
        moved += (ssize_t)took;
        continue;
      }
      if (*drained)
        return moved;
      if (i == 0 && want < SOCK_STAGE_BYTES / 2) {
        if (stage_fill(c, 0, drained) < 0)
          return -1;
        continue;
      }
      ssize_t got = recv(c->fds[i], dst, want, MSG_DONTWAIT);
      if (got < 0 &&
          (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        *drained = 1;
        return moved;
      }
      if (got <= 0) {
        io_error(c, i, got, got == 0 ? 0 : errno);
        return -1;
      }
      moved += got;
      r->part_done[i] += (size_t)got;
      if ((size_t)got < want)
        *drained = 1;
    }
    r->parts_left--;
    c->cursor[i]++;
  }
  return moved;
}

/* Progress every socket of c until none moves a byte, each socket until a
 * system call on it moves less than asked (the rest is not there yet, or
 * the kernel's buffer is full), so that the common case ends without a
 * call that would fail with EAGAIN; the next call tries each socket again.
 * Another pass is needed when a header read on socket 0 tells the other
 * sockets the size of their parts. */
static xcoll_status comm_progress(sock_comm *c) {
  if (c->error != XCOLL_SUCCESS) return c->error;
  int drained[SOCK_MAX_NSOCKS] = {0};
  for (;;) {
    ssize_t total = 0;
    for (int i = 0; i < c->nsocks; i++) {
      ssize_t moved = c->is_send ? send_progress(c, i, &drained[i])
                                 : recv_progress(c, i, &drained[i]);
      if (moved < 0) return c->error;
      total += moved;
    }
    if (total == 0) return XCOLL_SUCCESS;
  }
}

/* Give the posted receives of c what socket 0's stage holds, without a
 * system call: bytes in the stage do not make the socket readable, so a
 * message that sits there whole must complete without anyone polling. */
static xcoll_status stage_deliver(sock_comm *c) {
  if (c->is_send || stage_held(c) == 0)
    return c->error;
  int no_calls = 1;
  if (recv_progress(c, 0, &no_calls) < 0)
    return c->error;
  return XCOLL_SUCCESS;
}

/* ---- memory registration: bookkeeping only, sockets need none ---- */

typedef struct sock_mr {
  uint32_t magic;
  char *data;
  size_t bytes;
} sock_mr;

static xcoll_status socket_reg_mr(xcoll_net_send_comm *send_comm,
                                  xcoll_net_recv_comm *recv_comm, void *data,
                                  size_t bytes, int ptr_type, void **mhandle) {
  if (mhandle != NULL) *mhandle = NULL;
  if ((send_comm == NULL) == (recv_comm == NULL) || mhandle == NULL ||
      (data == NULL && bytes > 0))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: reg_mr needs exactly one comm, a buffer and "
                "mhandle");
  if (ptr_type != XCOLL_NET_PTR_HOST)
    return net_fail(XCOLL_ERR_NOT_SUPPORTED,
                "net socket: reg_mr of pointer type %d: the socket plugin "
                "moves host memory only (stage device buffers through host "
                "memory)",
                ptr_type);
  sock_mr *mr = malloc(sizeof *mr);
  if (mr == NULL)
    return net_fail(XCOLL_ERR_NO_MEMORY, "net socket: no memory for reg_mr");
  mr->magic = SOCK_MR_MAGIC;
  mr->data = data;
  mr->bytes = bytes;
  *mhandle = mr;
  return XCOLL_SUCCESS;
}

static xcoll_status socket_dereg_mr(xcoll_net_send_comm *send_comm,
                                    xcoll_net_recv_comm *recv_comm,
                                    void *mhandle) {
  (void)send_comm;
  (void)recv_comm;
  sock_mr *mr = mhandle;
  if (mr == NULL) return XCOLL_SUCCESS;
  if (mr->magic != SOCK_MR_MAGIC)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: dereg_mr of something reg_mr did not return");
  mr->magic = 0;
  free(mr);
  return XCOLL_SUCCESS;
}

/* data..data+bytes must lie inside mhandle's region (NULL: not checked). */
static xcoll_status check_region(const void *mhandle, const void *data,
                                 size_t bytes, const char *op) {
  const sock_mr *mr = mhandle;
  if (mr == NULL) return XCOLL_SUCCESS;
  if (mr->magic != SOCK_MR_MAGIC)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: %s with an mhandle that reg_mr did not return", op);
  const char *p = data;
  if (bytes > 0 && (p < mr->data || (size_t)(p - mr->data) > mr->bytes ||
                    bytes > mr->bytes - (size_t)(p - mr->data)))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: %s of %zu bytes at %p lies outside the registered "
                "region of %zu bytes at %p",
                op, bytes, data, mr->bytes, (void *)mr->data);
  return XCOLL_SUCCESS;
}

/* A free request slot for the next message of c, or NULL (back-pressure). */
static sock_request *take_request(sock_comm *c) {
  sock_request *r = &c->requests[c->posted % XCOLL_NET_MAX_REQUESTS];
  if (r->used) return NULL;
  memset(r->part_done, 0, sizeof r->part_done);
  r->used = 1;
  r->seq = c->posted++;
  r->header_known = 0;
  return r;
}

static xcoll_status socket_isend(xcoll_net_send_comm *send_comm,
                                 const void *data, size_t bytes, uint32_t tag,
                                 void *mhandle, xcoll_net_request **request) {
  if (request != NULL) *request = NULL;
  sock_comm *c = (sock_comm *)send_comm;
  if (c == NULL || request == NULL || (data == NULL && bytes > 0) ||
      !c->is_send)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: isend needs a send comm, data and request");
  xcoll_status s = check_region(mhandle, data, bytes, "isend");
  if (s != XCOLL_SUCCESS) return s;
  if (c->error != XCOLL_SUCCESS) return comm_repeat(c);
  sock_request *r = take_request(c);
  if (r == NULL) return comm_progress(c); /* full: NULL request, not an error */
  r->data = (char *)data;
  r->bytes = bytes;
  r->size = bytes;
  r->tag = tag;
  r->header_known = 1;
  r->parts_left = parts_of(bytes, c->nsocks);
  sock_header_encode(tag, (uint64_t)bytes, r->header);
  *request = (xcoll_net_request *)r;
  /* Start at once: small messages often leave within this call. */
  s = comm_progress(c);
  if (s != XCOLL_SUCCESS) {
    r->used = 0;
    *request = NULL;
  }
  return s;
}

static xcoll_status socket_irecv(xcoll_net_recv_comm *recv_comm, void *data,
                                 size_t bytes, uint32_t tag, void *mhandle,
                                 xcoll_net_request **request) {
  if (request != NULL) *request = NULL;
  sock_comm *c = (sock_comm *)recv_comm;
  if (c == NULL || request == NULL || (data == NULL && bytes > 0) ||
      c->is_send)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: irecv needs a recv comm, data and request");
  xcoll_status s = check_region(mhandle, data, bytes, "irecv");
  if (s != XCOLL_SUCCESS) return s;
  if (c->error != XCOLL_SUCCESS) return comm_repeat(c);
  sock_request *r = take_request(c);
  if (r == NULL) return XCOLL_SUCCESS; /* full: call again later */
  r->data = data;
  r->bytes = bytes;
  r->size = 0;
  r->tag = tag;
  r->parts_left = 1; /* unknown until the header arrives */
  *request = (xcoll_net_request *)r;
  /* Its message may already sit in the stage, where polling the socket
   * would not find it. */
  s = stage_deliver(c);
  if (s != XCOLL_SUCCESS) {
    r->used = 0;
    *request = NULL;
  }
  return s;
}

static xcoll_status socket_test(xcoll_net_request *request, int *done,
                                size_t *bytes) {
  if (done != NULL) *done = 0;
  sock_request *r = (sock_request *)request;
  if (r == NULL || done == NULL || !r->used)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: test of a NULL or already released request");
  sock_comm *c = r->comm;
  xcoll_status before = c->error;
  xcoll_status s = comm_progress(c);
  /* A request that finished before the comm failed (a message that arrived
   * whole, then the peer closed) is done: its data is all there. */
  if (r->header_known && r->parts_left == 0) {
    *done = 1;
    if (bytes != NULL) *bytes = r->size;
    r->used = 0;
    return XCOLL_SUCCESS;
  }
  if (s != XCOLL_SUCCESS) {
    r->used = 0;
    /* A failure found now was logged by comm_fail; an older one is said
     * again for this request's caller. */
    if (before != XCOLL_SUCCESS) comm_repeat(c);
    return s;
  }
  return XCOLL_SUCCESS;
}

/* The sockets that still have a part of a posted message to move: those
 * are the ones whose readiness (POLLIN on a recv comm, POLLOUT on a send
 * comm) lets test progress. An idle send socket is left out: it is always
 * writable, and a caller polling it would never sleep. */
static xcoll_status socket_get_fds(xcoll_net_send_comm *send_comm,
                                   xcoll_net_recv_comm *recv_comm, int *fds,
                                   int max_fds, int *count) {
  sock_comm *c = send_comm != NULL ? (sock_comm *)send_comm
                                   : (sock_comm *)recv_comm;
  if (c == NULL || (send_comm != NULL && recv_comm != NULL) || fds == NULL ||
      count == NULL || max_fds < 0)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net socket: get_fds needs exactly one comm, fds and "
                    "count");
  *count = 0;
  if (c->error != XCOLL_SUCCESS) return comm_repeat(c);
  for (int i = 0; i < c->nsocks && *count < max_fds; i++)
    if (c->cursor[i] < c->posted) fds[(*count)++] = c->fds[i];
  return XCOLL_SUCCESS;
}

static void socket_close_send(xcoll_net_send_comm *send_comm) {
  comm_free((sock_comm *)send_comm);
}

static void socket_close_recv(xcoll_net_recv_comm *recv_comm) {
  comm_free((sock_comm *)recv_comm);
}


const xcoll_net_v1 xcoll_net_socket = {
    .name = "socket",
    .init = socket_init,
    .devices = socket_devices,
    .get_properties = socket_get_properties,
    .listen = socket_listen,
    .connect = socket_connect,
    .accept = socket_accept,
    .reg_mr = socket_reg_mr,
    .dereg_mr = socket_dereg_mr,
    .isend = socket_isend,
    .irecv = socket_irecv,
    .test = socket_test,
    .close_send = socket_close_send,
    .close_recv = socket_close_recv,
    .close_listen = socket_close_listen,
    .get_fds = socket_get_fds,
};