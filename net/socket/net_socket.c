/* net_socket.c - the "socket" net plugin (xcoll_net_socket): the net API of
 * net/net.h over stream sockets, host memory only: TCP, or Unix-domain
 * sockets between ranks of one host (XCOLL_SOCKET_UNIX), playing the part
 * of NCCL's net_socket transport. One-way connections; a message of
 * SOCK_STRIPE_MIN bytes or more is striped over XCOLL_NSOCKS_PERPEER
 * sockets; all progress happens inside isend/irecv/test, with no thread of
 * its own. docs/net-plugins.md, "The socket plugin in detail", describes
 * the connection set-up and its authentication stage machines, the wire
 * format, the receive stage and the error rules that this file implements. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "net.h"
#include "net_plugin_log.h"
#include "net_socket_wire.h"
#include "netaddr.h"
#include "stranger.h"

/* NCCL_SOCKET_MIN_TASKSIZE: below this a message is not worth cutting. */
#define SOCK_STRIPE_MIN (64u * 1024u)
/* Incoming connections in their introduction, per listen comm, and of them
 * how many without a valid first message may come from one peer address
 * (all Unix-domain ones count as one address). Beyond either bound the
 * oldest connection without a valid first message (of the listener, or of
 * that address) is closed to make room, after one last read: a rank's first
 * message is waiting at accept, so a rank is never the oldest silent one,
 * and one with a valid first message is never shed. A wrong first message
 * is closed at once, silence after XCOLL_STRANGER_DEADLINE_S
 * (core/stranger.h). */
#define SOCK_MAX_PENDING 128
#define SOCK_MAX_PENDING_PER_ADDRESS 64
/* Tries of a connect whose listener closed it before answering (shed under
 * a flood before its first message arrived; each try needs another 128
 * strangers to arrive in that moment), before the close is taken as the
 * listener's verdict. */
#define SOCK_SILENT_CLOSE_RETRIES 8
/* Pause between refused connection attempts (the listener may be slow to
 * drain its backlog), seconds. */
#define SOCK_RETRY_S 0.02
#define SOCK_ADDR_BYTES 64
#define SOCK_MESSAGE_BYTES 512
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

/* ---- small helpers ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void format_addr(const struct sockaddr_in *sa, char *out) {
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof ip);
  snprintf(out, SOCK_ADDR_BYTES, "%s:%d", ip, ntohs(sa->sin_port));
}

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

/* XCOLL_SOCKET_UNIX: 1 (default): a connection between two ranks of one
 * host (one running kernel, one network namespace) goes over a Unix-domain
 * stream socket instead of TCP; 0: always TCP. Why: a Unix socket hands
 * the bytes to the peer's socket without the TCP/IP stack (no segments,
 * checksums, acknowledgements or congestion control), as NCCL keeps a
 * node's own traffic off its net transport (shared memory or P2P). On a
 * 2-core machine a ping-pong of 8 B took 9.6 us against TCP's 11.9, and a
 * 1 MiB stream moved about twice TCP's bytes per second
 * (docs/nccl_like.md, "Unix sockets within a host"). */
static xcoll_status read_unix(int *use) {
  const char *text = getenv("XCOLL_SOCKET_UNIX");
  *use = 1;
  if (text == NULL || text[0] == '\0' || strcmp(text, "1") == 0)
    return XCOLL_SUCCESS;
  if (strcmp(text, "0") == 0) {
    *use = 0;
    return XCOLL_SUCCESS;
  }
  return net_fail(XCOLL_ERR_ENV,
                  "net socket: XCOLL_SOCKET_UNIX=%s is neither 1 (ranks of "
                  "one host connect over Unix-domain sockets, the default) "
                  "nor 0 (TCP for every connection)",
                  text);
}

/* This process's host id (net_socket_wire.h: the boot id and the network
 * namespace), or host_id_ok 0 when either cannot be read (then every
 * connection is TCP). */
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static int host_id_ok;
static uint8_t host_id[SOCK_HOST_ID_BYTES];

static void host_init(void) {
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  char text[64] = "";
  if (f == NULL)
    return;
  int read_ok = fgets(text, sizeof text, f) != NULL;
  fclose(f);
  if (!read_ok)
    return;
  int digits = 0;
  for (const char *c = text; *c != '\0' && *c != '\n'; c++) {
    if (*c == '-')
      continue;
    int v = *c >= '0' && *c <= '9'   ? *c - '0'
            : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
            : *c >= 'A' && *c <= 'F' ? *c - 'A' + 10
                                     : -1;
    if (v < 0 || digits == 32)
      return;
    host_id[digits / 2] = (uint8_t)(host_id[digits / 2] << 4 | v);
    digits++;
  }
  struct stat ns;
  if (digits != 32 || stat("/proc/self/ns/net", &ns) != 0)
    return;
  uint64_t inode = (uint64_t)ns.st_ino;
  memcpy(host_id + 16, &inode, sizeof inode);
  host_id_ok = 1;
}

/* The abstract Unix-domain address of the listener with this nonce. */
static socklen_t unix_address(uint64_t nonce, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  size_t n = sock_unix_name(nonce, sa->sun_path);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
}

/* XCOLL_NSOCKS_PERPEER: data sockets per connection, 1..16 (default 1). */
static xcoll_status read_nsocks(int *nsocks) {
  const char *text = getenv("XCOLL_NSOCKS_PERPEER");
  *nsocks = 1;
  if (text == NULL || text[0] == '\0') return XCOLL_SUCCESS;
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 1 ||
      v > SOCK_MAX_NSOCKS)
    return net_fail(XCOLL_ERR_ENV,
                "net socket: XCOLL_NSOCKS_PERPEER=%s is not an integer from 1 "
                "to %d (data sockets per connection)",
                text, SOCK_MAX_NSOCKS);
  *nsocks = (int)v;
  return XCOLL_SUCCESS;
}

/* ---- the device: one, the interface core/netaddr.h picks ---- */

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static xcoll_status device_status;
static char device_error[SOCK_MESSAGE_BYTES];
static xcoll_netaddr device_addr;
static char device_name[IF_NAMESIZE];
static int device_speed_mbps;

static void device_init(void) {
  const char *port_text = getenv("MASTER_PORT");
  int port = port_text ? atoi(port_text) : 0;
  device_status = xcoll_netaddr_choose(getenv("XCOLL_SOCKET_IFNAME"),
                                       getenv("MASTER_ADDR"), port,
                                       "net socket", &device_addr,
                                       device_error, sizeof device_error);
  if (device_status != XCOLL_SUCCESS) return;
  xcoll_netaddr_ifname(device_addr.publish_addr, device_name);
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
  pthread_once(&device_once, device_init);
  if (device_status != XCOLL_SUCCESS)
    return net_fail(device_status, "%s", device_error);
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &device_addr.publish_addr, ip, sizeof ip);
  net_info("net socket: device 0 is %s (%s), chosen by %s", device_name, ip,
       device_addr.why);
  return XCOLL_SUCCESS;
}

static xcoll_status socket_devices(int *count) {
  if (count == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT, "net socket: devices(NULL)");
  *count = 1;
  return XCOLL_SUCCESS;
}

static xcoll_status check_device(int device) {
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
  xcoll_status s = check_device(device);
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

/* ---- handle and hello: net_socket_wire.c ---- */

static xcoll_status decode_handle(const uint8_t *in, sock_handle *h) {
  char why[SOCK_MESSAGE_BYTES];
  if (sock_handle_decode(in, h, why, sizeof why) != NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT, "%s", why);
  return XCOLL_SUCCESS;
}

/* ---- authentication of each data socket (core/auth.h) ---- */

/* Sizes on the wire: the client's first message (hello, offer, hello tag),
 * the server's offer and proof, the client's proof (only with a secret).
 * The hello tag is HMAC(secret, "hello" | context | client nonce | zeros)
 * (auth.h's proof with role "hello" and a zero server nonce): a listener
 * knows a rank from a stranger before it answers, and a connection with a
 * valid first message is never shed for a stranger's. */
#define SOCK_CLIENT_SEND                                                       \
  (SOCK_HELLO_BYTES + XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)
#define SOCK_SERVER_ANSWER (XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)

/* The context both sides put into the proofs: it names the connection, down
 * to the listener (its handle nonce) and the socket index, so that a proof
 * seen on one connection is worth nothing on any other of the same job. */
static void auth_context(uint64_t comm_id, int connector, int acceptor,
                         int index, uint64_t nonce, char *out) {
  snprintf(out, XCOLL_AUTH_CONTEXT_BYTES,
           "net socket comm=%" PRIu64 " ranks=%d>%d socket=%d listener=%016" PRIx64,
           comm_id, connector, acceptor, index, nonce);
}

/* Read the job's secret (once per process; xcoll_auth_reload reads again).
 * Errors: those of xcoll_auth_init, said again through the plugin's log. */
static xcoll_status auth_ready(void) {
  xcoll_status s = xcoll_auth_init();
  if (s != XCOLL_SUCCESS)
    return net_fail(s, "net socket: cannot read the job's secret: %s",
                xcoll_last_error());
  return XCOLL_SUCCESS;
}

/* ---- data comms and requests ---- */

typedef struct sock_comm sock_comm;

/* One isend or irecv; lives in its comm's ring of XCOLL_NET_MAX_REQUESTS. */
typedef struct sock_request {
  sock_comm *comm;
  int used;
  uint64_t seq;      /* position in the comm's message order */
  char *data;
  size_t bytes;      /* posted: send size, or receive capacity */
  uint32_t tag;
  size_t size;       /* the message's size (receives: once header_known) */
  int header_known;  /* receives: socket 0 has read this message's header */
  int parts_left;    /* sockets still moving a part of this message */
  size_t part_done[SOCK_MAX_NSOCKS]; /* bytes of each socket's part moved */
  uint8_t header[SOCK_HEADER_BYTES]; /* sends: the encoded header */
} sock_request;

struct sock_comm {
  int is_send;
  int nsocks;
  int fds[SOCK_MAX_NSOCKS];
  int peer_rank;
  char peer[SOCK_ADDR_BYTES]; /* the peer's address, for messages */
  uint64_t posted;            /* messages posted so far */
  uint64_t cursor[SOCK_MAX_NSOCKS]; /* message each socket works on */
  size_t header_done; /* sends: header bytes of socket 0's message sent */
  xcoll_status error;         /* first failure; sticks */
  char error_text[SOCK_MESSAGE_BYTES];
  int error_expected; /* the peer closed at a message boundary (see fail) */
  sock_request requests[XCOLL_NET_MAX_REQUESTS];
  /* Recv comms: bytes read from socket 0 that no message has taken yet,
   * stage[stage_start, stage_end) of SOCK_STAGE_BYTES (docs/net-plugins.md,
   * "System calls per message"); send comms have no stage. */
  size_t stage_start, stage_end;
  uint8_t stage[];
};

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

static sock_comm *comm_new(int is_send, int nsocks, const int *fds,
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

/* ---- listen / connect / accept ---- */

/* Stages of an incoming connection (see CONN_* for the other side). */
enum {
  PEND_HELLO,  /* reading the hello */
  PEND_OFFER,  /* reading the client's offer and hello tag */
  PEND_ANSWER, /* sending offer | server proof */
  PEND_PROOF   /* reading the client's proof (with a secret) */
};

typedef struct pending {
  int fd;
  int stage;   /* PEND_* */
  int index;   /* its socket index, once the hello passed */
  size_t got;  /* bytes of the stage's read or send done */
  uint8_t hello[SOCK_HELLO_BYTES];
  /* offer | hello tag or proof in; answer out */
  uint8_t buf[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  uint8_t nonce_peer[XCOLL_AUTH_NONCE_BYTES];
  uint8_t nonce_mine[XCOLL_AUTH_NONCE_BYTES];
  double since;    /* accepted at (seconds) */
  double deadline; /* since + XCOLL_STRANGER_DEADLINE_S; once vouched for,
                      since + the config's timeout */
  int vouched;     /* its first message was valid: never shed */
  uint64_t origin; /* peer IPv4 address; 1 << 32 for a Unix-domain peer */
  char who[SOCK_ADDR_BYTES];
} pending;

typedef struct sock_listen {
  int fd;
  int ufd; /* the abstract Unix-domain listener, or -1 (SOCK_FLAG_UNIX) */
  xcoll_net_config config;
  int nsocks;
  uint64_t nonce;
  char addr[SOCK_ADDR_BYTES]; /* as published */
  pending pending[SOCK_MAX_PENDING]; /* before the hello and in the exchange */
  int npending;
  /* The connection being assembled: its sockets by index. */
  int forming[SOCK_MAX_NSOCKS];
  int formed;
  char forming_who[SOCK_ADDR_BYTES];
  xcoll_drop_tally drops; /* dropped incoming connections, for the log */
} sock_listen;

static double timeout_of(const xcoll_net_config *config) {
  return config->timeout_s > 0 ? config->timeout_s : 1e9;
}

static xcoll_status socket_listen(int device, const xcoll_net_config *config,
                                  void *handle,
                                  xcoll_net_listen_comm **listen_comm) {
  if (listen_comm != NULL) *listen_comm = NULL;
  xcoll_status s = check_device(device);
  if (s != XCOLL_SUCCESS) return s;
  if (config == NULL || handle == NULL || listen_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: listen with a NULL config, handle or listen_comm");
  int nsocks, use_unix;
  if ((s = read_nsocks(&nsocks)) != XCOLL_SUCCESS) return s;
  if ((s = read_unix(&use_unix)) != XCOLL_SUCCESS)
    return s;
  if ((s = auth_ready()) != XCOLL_SUCCESS) return s;
  pthread_once(&host_once, host_init);
  sock_listen *l = calloc(1, sizeof *l);
  if (l == NULL)
    return net_fail(XCOLL_ERR_NO_MEMORY, "net socket: no memory for a listen comm");
  l->config = *config;
  l->nsocks = nsocks;
  l->ufd = -1;
  for (int i = 0; i < SOCK_MAX_NSOCKS; i++) l->forming[i] = -1;
  if (getrandom(&l->nonce, sizeof l->nonce, 0) != (ssize_t)sizeof l->nonce) {
    /* getrandom cannot fail for 8 bytes once the pool is ready; a clock
     * mix is still unique enough to tell jobs apart (not a secret). */
    l->nonce = (uint64_t)(now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
  }
  l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr = device_addr.bind_addr;
  socklen_t len = sizeof sa;
  if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(l->fd, 256) != 0 ||
      getsockname(l->fd, (struct sockaddr *)&sa, &len) != 0) {
    int err = errno;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &device_addr.bind_addr, ip, sizeof ip);
    if (l->fd >= 0) close(l->fd);
    free(l);
    return net_fail(XCOLL_ERR_SYSTEM,
                "net socket: cannot listen on %s (an ephemeral port): %s; set "
                "XCOLL_SOCKET_IFNAME to another interface",
                ip, strerror(err));
  }
  sock_handle h;
  memset(&h, 0, sizeof h);
  h.addr.sin_family = AF_INET;
  h.addr.sin_addr = device_addr.publish_addr;
  h.addr.sin_port = sa.sin_port;
  h.nsocks = nsocks;
  h.nonce = l->nonce;
  format_addr(&h.addr, l->addr);
  if (use_unix && host_id_ok) {
    /* The same listener, for this host's ranks: an abstract name vanishes
     * with its socket, so a killed rank leaves no file behind. */
    struct sockaddr_un ua;
    socklen_t ulen = unix_address(l->nonce, &ua);
    l->ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->ufd < 0 || bind(l->ufd, (struct sockaddr *)&ua, ulen) != 0 ||
        listen(l->ufd, 256) != 0) {
      net_info("net socket: rank %d: no Unix-domain listener (%s): this "
               "host's ranks connect over TCP",
               config->rank, strerror(errno));
      if (l->ufd >= 0)
        close(l->ufd);
      l->ufd = -1;
    } else {
      h.flags |= SOCK_FLAG_UNIX;
      memcpy(h.host_id, host_id, SOCK_HOST_ID_BYTES);
    }
  }
  sock_handle_encode(&h, handle);
  net_info("net socket: rank %d listens on %s%s for comm %" PRIu64
           " (%d socket(s))",
           config->rank, l->addr,
           l->ufd >= 0 ? " and a Unix socket for this host's ranks" : "",
           config->comm_id, nsocks);
  *listen_comm = (xcoll_net_listen_comm *)l;
  return XCOLL_SUCCESS;
}

/* Stages of one data socket of a connect. The exchange after the hello
 * runs here, one non-blocking step per call, never waiting for the peer:
 * on a ring every rank connects to the next and accepts from the previous
 * by turns, so a connect that waited for its server's answer would wait on
 * a rank that is itself inside connect (a deadlock). */
enum {
  CONN_IDLE,       /* no socket (yet, or again after a refusal) */
  CONN_CONNECTING, /* connect() in progress */
  CONN_HELLO,      /* sending hello | offer */
  CONN_ANSWER,     /* reading the server's offer | proof */
  CONN_PROOF,      /* sending the client proof (with a secret) */
  CONN_DONE
};

/* A connect in progress: connect() is called again and again with the same
 * handle until it is done, and the const handle cannot hold state, so the
 * state lives here, keyed by what identifies the connection. */
typedef struct connecting {
  uint64_t comm_id, nonce;
  int rank, peer_rank;
  sock_handle target;
  int over_unix; /* the target's Unix-domain listener, not its TCP port */
  char who[SOCK_ADDR_BYTES];
  int fds[SOCK_MAX_NSOCKS];
  int stage[SOCK_MAX_NSOCKS]; /* CONN_* */
  size_t io_done[SOCK_MAX_NSOCKS]; /* bytes of the stage's send or read */
  /* hello | offer, then the client proof */
  uint8_t out[SOCK_MAX_NSOCKS][SOCK_CLIENT_SEND];
  uint8_t in[SOCK_MAX_NSOCKS][SOCK_SERVER_ANSWER]; /* the server's answer */
  uint8_t nonce_mine[SOCK_MAX_NSOCKS][XCOLL_AUTH_NONCE_BYTES];
  double retry_at[SOCK_MAX_NSOCKS];
  int silent_closes[SOCK_MAX_NSOCKS]; /* see SOCK_SILENT_CLOSE_RETRIES */
  double deadline;
  struct connecting *next;
} connecting;

static pthread_mutex_t connecting_lock = PTHREAD_MUTEX_INITIALIZER;
static connecting *connecting_list;

static void connecting_free(connecting *k) {
  for (int i = 0; i < k->target.nsocks; i++)
    if (k->fds[i] >= 0) close(k->fds[i]);
  free(k);
}

/* Take k out of the list (caller holds nothing; k is owned by the caller
 * while it is being progressed: one thread per connection). */
static void connecting_remove(connecting *k) {
  pthread_mutex_lock(&connecting_lock);
  for (connecting **p = &connecting_list; *p; p = &(*p)->next)
    if (*p == k) {
      *p = k->next;
      break;
    }
  pthread_mutex_unlock(&connecting_lock);
}

/* A caller that gives up on a connect (its communicator failed elsewhere)
 * never calls again: free what is left at exit, so that leak checkers see
 * only real leaks. */
__attribute__((destructor)) static void connecting_free_all(void) {
  pthread_mutex_lock(&connecting_lock);
  connecting *k = connecting_list;
  connecting_list = NULL;
  pthread_mutex_unlock(&connecting_lock);
  while (k != NULL) {
    connecting *next = k->next;
    connecting_free(k);
    k = next;
  }
}

/* Advance socket i of k. Returns 0 (maybe progressed), or an error status. */
static xcoll_status connect_step(connecting *k, const xcoll_net_config *config,
                                 int i, double now) {
  if (k->stage[i] == CONN_IDLE) {
    if (now < k->retry_at[i]) return XCOLL_SUCCESS;
    int fd = socket(k->over_unix ? AF_UNIX : AF_INET,
                    SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return net_fail(XCOLL_ERR_SYSTEM, "net socket: socket() failed: %s",
                  strerror(errno));
    k->fds[i] = fd;
    k->io_done[i] = 0;
    /* A fresh nonce per attempt: each TCP connection is its own exchange. */
    sock_hello h = {.index = i,
                    .nsocks = k->target.nsocks,
                    .rank = config->rank,
                    .comm_id = config->comm_id,
                    .nonce = k->target.nonce};
    sock_hello_encode(&h, k->out[i]);
    xcoll_auth_offer(k->out[i] + SOCK_HELLO_BYTES, k->nonce_mine[i]);
    static const uint8_t no_nonce[XCOLL_AUTH_NONCE_BYTES];
    char context[XCOLL_AUTH_CONTEXT_BYTES];
    auth_context(config->comm_id, config->rank, k->peer_rank, i,
                 k->target.nonce, context);
    xcoll_auth_prove("hello", context, k->nonce_mine[i], no_nonce,
                     k->out[i] + SOCK_HELLO_BYTES + XCOLL_AUTH_OFFER_BYTES);
    struct sockaddr_un ua;
    socklen_t ulen = unix_address(k->target.nonce, &ua);
    int rc = k->over_unix ? connect(fd, (struct sockaddr *)&ua, ulen)
                          : connect(fd, (struct sockaddr *)&k->target.addr,
                                    sizeof k->target.addr);
    if (rc == 0)
      k->stage[i] = CONN_HELLO;
    else if (errno == EINPROGRESS)
      k->stage[i] = CONN_CONNECTING;
    else
      goto refused;
  }
  if (k->stage[i] == CONN_CONNECTING) {
    struct pollfd p = {.fd = k->fds[i], .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0) return XCOLL_SUCCESS;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(k->fds[i], SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      errno = err;
      goto refused;
    }
    k->stage[i] = CONN_HELLO;
  }
  if (k->stage[i] == CONN_HELLO) {
    ssize_t sent = send(k->fds[i], k->out[i] + k->io_done[i],
                        SOCK_CLIENT_SEND - k->io_done[i],
                        MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return XCOLL_SUCCESS;
    if (sent < 0) goto refused;
    k->io_done[i] += (size_t)sent;
    if (k->io_done[i] < SOCK_CLIENT_SEND) return XCOLL_SUCCESS;
    k->io_done[i] = 0;
    k->stage[i] = CONN_ANSWER;
  }
  if (k->stage[i] == CONN_ANSWER) {
    ssize_t got = recv(k->fds[i], k->in[i] + k->io_done[i],
                       SOCK_SERVER_ANSWER - k->io_done[i], MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return XCOLL_SUCCESS;
    if (got <= 0 && k->io_done[i] == 0 &&
        ++k->silent_closes[i] <= SOCK_SILENT_CLOSE_RETRIES) {
      /* Closed before a byte of the answer: either the listener judged the
       * hello wrong (another communicator or rank), or it shed this
       * connection before its first message arrived (a listener under a
       * flood of strangers that accepted it in the moment between the
       * connect and the hello). The second passes on another try; the
       * first fails the same way each time and ends below. */
      errno = got == 0 ? ECONNRESET : errno;
      goto refused;
    }
    if (got <= 0)
      /* The listener took the hello and began its answer, so this is its
       * verdict (or its death), not a full backlog: retrying would meet
       * the same. */
      return net_fail(XCOLL_ERR_REMOTE,
                  "net socket: rank %d at %s closed rank %d's connection "
                  "during authentication (%s): it dropped it (do both ranks "
                  "set the same XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE? rank %d's "
                  "log names the reason) or it went away",
                  k->peer_rank, k->who, config->rank,
                  got == 0 ? "end of stream" : strerror(errno), k->peer_rank);
    k->io_done[i] += (size_t)got;
    if (k->io_done[i] < SOCK_SERVER_ANSWER) return XCOLL_SUCCESS;
    char why[160];
    uint8_t nonce_peer[XCOLL_AUTH_NONCE_BYTES];
    if (xcoll_auth_parse_offer(k->in[i], nonce_peer, why, sizeof why) != 0)
      return net_fail(XCOLL_ERR_PROTOCOL,
                  "net socket: rank %d's connection to rank %d at %s: %s",
                  config->rank, k->peer_rank, k->who, why);
    char context[XCOLL_AUTH_CONTEXT_BYTES];
    auth_context(config->comm_id, config->rank, k->peer_rank, i,
                 k->target.nonce, context);
    if (!xcoll_auth_verify("server", context, k->nonce_mine[i], nonce_peer,
                           k->in[i] + XCOLL_AUTH_OFFER_BYTES))
      return net_fail(XCOLL_ERR_PROTOCOL,
                  "net socket: rank %d: the listener at %s (rank %d's "
                  "address) failed authentication: it does not know this "
                  "job's secret (XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE differ "
                  "between ranks, or another process took that port)",
                  config->rank, k->who, k->peer_rank);
    if (!xcoll_auth_enabled()) {
      k->stage[i] = CONN_DONE;
      return XCOLL_SUCCESS;
    }
    xcoll_auth_prove("client", context, k->nonce_mine[i], nonce_peer,
                     k->out[i]);
    k->io_done[i] = 0;
    k->stage[i] = CONN_PROOF;
  }
  if (k->stage[i] == CONN_PROOF) {
    ssize_t sent = send(k->fds[i], k->out[i] + k->io_done[i],
                        XCOLL_AUTH_PROOF_BYTES - k->io_done[i],
                        MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return XCOLL_SUCCESS;
    if (sent < 0)
      return net_fail(XCOLL_ERR_REMOTE,
                  "net socket: rank %d could not send its proof to rank %d at "
                  "%s: %s",
                  config->rank, k->peer_rank, k->who, strerror(errno));
    k->io_done[i] += (size_t)sent;
    if (k->io_done[i] < XCOLL_AUTH_PROOF_BYTES) return XCOLL_SUCCESS;
    k->stage[i] = CONN_DONE;
  }
  return XCOLL_SUCCESS;

refused : {
  int err = errno;
  close(k->fds[i]);
  k->fds[i] = -1;
  k->stage[i] = CONN_IDLE;
  /* The listener exists before its handle is published, so a refusal means
   * a full backlog or a peer that is going away: retry until the deadline. */
  if (err != ECONNREFUSED && err != ECONNRESET && err != ETIMEDOUT &&
      err != EAGAIN && err != EPIPE)
    return net_fail(XCOLL_ERR_SYSTEM,
                "net socket: rank %d cannot connect to rank %d at %s: %s "
                "(check XCOLL_SOCKET_IFNAME and firewalls)",
                config->rank, k->peer_rank, k->who, strerror(err));
  if (now >= k->deadline)
    return net_fail(XCOLL_ERR_TIMEOUT,
                "net socket: rank %d could not connect to rank %d at %s within "
                "%.1f s: %s; is rank %d alive and listening?",
                config->rank, k->peer_rank, k->who, timeout_of(config),
                strerror(err), k->peer_rank);
  k->retry_at[i] = now + SOCK_RETRY_S;
  return XCOLL_SUCCESS;
}
}

static xcoll_status socket_connect(int device, const xcoll_net_config *config,
                                   const void *handle, int peer_rank,
                                   xcoll_net_send_comm **send_comm) {
  if (send_comm != NULL) *send_comm = NULL;
  xcoll_status s = check_device(device);
  if (s != XCOLL_SUCCESS) return s;
  if (config == NULL || handle == NULL || send_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: connect with a NULL config, handle or send_comm");
  sock_handle target;
  int use_unix;
  if ((s = decode_handle(handle, &target)) != XCOLL_SUCCESS) return s;
  if ((s = read_unix(&use_unix)) != XCOLL_SUCCESS)
    return s;
  if ((s = auth_ready()) != XCOLL_SUCCESS) return s;
  pthread_once(&host_once, host_init);

  pthread_mutex_lock(&connecting_lock);
  connecting *k = connecting_list;
  while (k != NULL &&
         !(k->nonce == target.nonce && k->comm_id == config->comm_id &&
           k->rank == config->rank && k->peer_rank == peer_rank))
    k = k->next;
  if (k == NULL) {
    k = calloc(1, sizeof *k);
    if (k == NULL) {
      pthread_mutex_unlock(&connecting_lock);
      return net_fail(XCOLL_ERR_NO_MEMORY, "net socket: no memory for a connect");
    }
    k->comm_id = config->comm_id;
    k->nonce = target.nonce;
    k->rank = config->rank;
    k->peer_rank = peer_rank;
    k->target = target;
    k->over_unix = use_unix && host_id_ok &&
                   (target.flags & SOCK_FLAG_UNIX) != 0 &&
                   memcmp(target.host_id, host_id, SOCK_HOST_ID_BYTES) == 0;
    format_addr(&target.addr, k->who);
    if (k->over_unix)
      snprintf(k->who + strlen(k->who), SOCK_ADDR_BYTES - strlen(k->who),
               " (unix)");
    for (int i = 0; i < SOCK_MAX_NSOCKS; i++) k->fds[i] = -1;
    k->deadline = now_s() + timeout_of(config);
    k->next = connecting_list;
    connecting_list = k;
  }
  pthread_mutex_unlock(&connecting_lock);

  double now = now_s();
  int done = 0;
  for (int i = 0; i < target.nsocks && s == XCOLL_SUCCESS; i++) {
    s = connect_step(k, config, i, now);
    done += k->stage[i] == CONN_DONE;
  }
  if (s == XCOLL_SUCCESS && done < target.nsocks && now >= k->deadline)
    s = net_fail(XCOLL_ERR_TIMEOUT,
             "net socket: rank %d's connection to rank %d at %s made no "
             "progress in %.1f s",
             config->rank, peer_rank, k->who, timeout_of(config));
  if (s != XCOLL_SUCCESS) {
    connecting_remove(k);
    connecting_free(k);
    return s;
  }
  if (done < target.nsocks) return XCOLL_SUCCESS; /* call again */
  sock_comm *c = comm_new(1, target.nsocks, k->fds, peer_rank, k->who);
  if (c == NULL) {
    connecting_remove(k);
    connecting_free(k);
    return net_fail(XCOLL_ERR_NO_MEMORY, "net socket: no memory for a send comm");
  }
  for (int i = 0; i < target.nsocks; i++) k->fds[i] = -1; /* now c's */
  connecting_remove(k);
  connecting_free(k);
  net_info("net socket: rank %d connected to rank %d at %s (%d socket(s))",
       config->rank, peer_rank, c->peer, c->nsocks);
  *send_comm = (xcoll_net_send_comm *)c;
  return XCOLL_SUCCESS;
}

/* Log a dropped incoming connection: a WARN at most once a second, with a
 * count of the drops in between, so that strangers do not decide how much
 * a rank warns; every drop is an INFO line. */
static void log_drop(sock_listen *l, const char *who, const char *why) {
  unsigned long also = 0;
  if (!xcoll_drop_tally_note(&l->drops, now_s(), &also))
    net_info("net socket: rank %d dropped a connection from %s to %s: %s",
             l->config.rank, who, l->addr, why);
  else if (also > 0)
    net_warn("net socket: rank %d dropped a connection from %s to %s: %s "
             "(and %lu other unauthenticated connection(s) in the last "
             "second)",
             l->config.rank, who, l->addr, why, also);
  else
    net_warn("net socket: rank %d dropped a connection from %s to %s: %s",
             l->config.rank, who, l->addr, why);
}

static void drop_pending(sock_listen *l, int j, const char *why) {
  log_drop(l, l->pending[j].who, why);
  close(l->pending[j].fd);
  l->pending[j] = l->pending[--l->npending];
}

/* Judge a complete hello (sock_hello_judge); returns NULL when it is
 * acceptable (and *index is its socket), else a reason. */
static const char *judge_hello(const sock_listen *l, const uint8_t *in,
                               int expected_rank, int *index, char *why,
                               size_t why_bytes) {
  return sock_hello_judge(in, l->nonce, l->config.comm_id, expected_rank,
                          l->nsocks, l->forming, index, why, why_bytes);
}

/* Read what pending[j] still owes of its current stage into dst[*got..need).
 * Returns 1 when complete, 0 to come back later, -1 when dropped (why
 * logged). */
static int pending_read(sock_listen *l, int j, uint8_t *dst, size_t need,
                        double now, const char *what) {
  pending *p = &l->pending[j];
  ssize_t got = recv(p->fd, dst + p->got, need - p->got, MSG_DONTWAIT);
  char why[160];
  if (got == 0) {
    snprintf(why, sizeof why, "it closed before sending a complete %s", what);
    drop_pending(l, j, why);
    return -1;
  }
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    snprintf(why, sizeof why, "reading its %s: %s", what, strerror(errno));
    drop_pending(l, j, why);
    return -1;
  }
  if (got > 0) p->got += (size_t)got;
  if (p->got == need) return 1;
  if (now >= p->deadline) {
    if (p->vouched)
      snprintf(why, sizeof why, "no complete %s within the timeout (%.1f s)",
               what, timeout_of(&l->config));
    else
      snprintf(why, sizeof why,
               "no valid first message within %.1f s (it sent %zu bytes of "
               "its %s)",
               XCOLL_STRANGER_DEADLINE_S, p->got, what);
    drop_pending(l, j, why);
    return -1;
  }
  return 0;
}

/* Advance pending[j] as far as it goes without waiting. Returns 0 when it
 * stays pending (j is still it), 1 when it left the list (dropped, or
 * authenticated and moved into forming), so that j now names another. */
static int pending_step(sock_listen *l, int j, int expected_rank, double now) {
  pending *p = &l->pending[j];
  char why[256];
  char context[XCOLL_AUTH_CONTEXT_BYTES];
  if (p->stage == PEND_HELLO) {
    int r = pending_read(l, j, p->hello, SOCK_HELLO_BYTES, now, "hello");
    if (r != 1) return r < 0;
    if (judge_hello(l, p->hello, expected_rank, &p->index, why, sizeof why)) {
      drop_pending(l, j, why);
      return 1;
    }
    p->stage = PEND_OFFER;
    p->got = 0;
  }
  if (p->stage == PEND_OFFER) {
    int r = pending_read(l, j, p->buf,
                         XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES, now,
                         "authentication offer and hello tag");
    if (r != 1) return r < 0;
    char reason[160];
    int bad = xcoll_auth_parse_offer(p->buf, p->nonce_peer, reason,
                                     sizeof reason);
    if (!bad) {
      static const uint8_t no_nonce[XCOLL_AUTH_NONCE_BYTES];
      int claimed = (int)sock_get_u32(p->hello + 12);
      auth_context(l->config.comm_id, claimed, l->config.rank, p->index,
                   l->nonce, context);
      if (!xcoll_auth_verify("hello", context, p->nonce_peer, no_nonce,
                             p->buf + XCOLL_AUTH_OFFER_BYTES)) {
        /* Answered (an offer and an empty proof) before the drop, as a
         * mismatched offer is: a rank with another secret then fails at
         * once, on the proof, instead of retrying a silent close. */
        xcoll_auth_offer(p->buf, p->nonce_mine);
        memset(p->buf + XCOLL_AUTH_OFFER_BYTES, 0, XCOLL_AUTH_PROOF_BYTES);
        (void)send(p->fd, p->buf, SOCK_SERVER_ANSWER,
                   MSG_DONTWAIT | MSG_NOSIGNAL);
        snprintf(why, sizeof why,
                 "its hello claims rank %d but its hello tag is wrong (it "
                 "does not know this job's secret)",
                 claimed);
        drop_pending(l, j, why);
        return 1;
      }
      /* A rank: from now on it has the whole timeout and is never shed. */
      p->vouched = 1;
      p->deadline = now + timeout_of(&l->config);
    }
    /* The answer goes out even to a mismatched offer (with an empty proof),
     * so that the connecting rank reads the same reason from its own side
     * of the comparison instead of a bare closed connection. */
    xcoll_auth_offer(p->buf, p->nonce_mine);
    memset(p->buf + XCOLL_AUTH_OFFER_BYTES, 0, XCOLL_AUTH_PROOF_BYTES);
    if (bad) {
      (void)send(p->fd, p->buf, SOCK_SERVER_ANSWER,
                  MSG_DONTWAIT | MSG_NOSIGNAL);
      snprintf(why, sizeof why, "authentication: %s", reason);
      drop_pending(l, j, why);
      return 1;
    }
    auth_context(l->config.comm_id, expected_rank, l->config.rank, p->index,
                 l->nonce, context);
    xcoll_auth_prove("server", context, p->nonce_peer, p->nonce_mine,
                     p->buf + XCOLL_AUTH_OFFER_BYTES);
    p->stage = PEND_ANSWER;
    p->got = 0;
  }
  if (p->stage == PEND_ANSWER) {
    ssize_t sent = send(p->fd, p->buf + p->got, SOCK_SERVER_ANSWER - p->got,
                        MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      snprintf(why, sizeof why, "sending its authentication answer: %s",
               strerror(errno));
      drop_pending(l, j, why);
      return 1;
    }
    if (sent > 0) p->got += (size_t)sent;
    if (p->got < SOCK_SERVER_ANSWER) {
      if (now >= p->deadline) {
        drop_pending(l, j, "its authentication answer could not be sent "
                           "within the timeout");
        return 1;
      }
      return 0;
    }
    p->got = 0;
    p->stage = PEND_PROOF;
    if (!xcoll_auth_enabled()) goto authenticated;
  }
  if (p->stage == PEND_PROOF) {
    int r = pending_read(l, j, p->buf, XCOLL_AUTH_PROOF_BYTES, now,
                         "authentication proof");
    if (r != 1) return r < 0;
    auth_context(l->config.comm_id, expected_rank, l->config.rank, p->index,
                 l->nonce, context);
    if (!xcoll_auth_verify("client", context, p->nonce_peer, p->nonce_mine,
                           p->buf)) {
      snprintf(why, sizeof why,
               "it claims to be rank %d but failed authentication (it does "
               "not know this job's secret)",
               expected_rank);
      drop_pending(l, j, why);
      return 1;
    }
  }
authenticated:
  /* Only now does it take its socket index: a stranger that copied a
   * hello must not be able to hold a slot. */
  if (l->forming[p->index] >= 0) {
    snprintf(why, sizeof why, "a second connection for socket %d", p->index);
    drop_pending(l, j, why);
    return 1;
  }
  l->forming[p->index] = p->fd;
  l->formed++;
  snprintf(l->forming_who, sizeof l->forming_who, "%s", p->who);
  l->pending[j] = l->pending[--l->npending]; /* the fd is forming's now */
  return 1;
}

/* Pending connections without a valid first message (from origin only,
 * when by_origin). */
static int count_strangers(const sock_listen *l, int by_origin,
                           uint64_t origin) {
  int n = 0;
  for (int j = 0; j < l->npending; j++)
    if (!l->pending[j].vouched &&
        (!by_origin || l->pending[j].origin == origin))
      n++;
  return n;
}

/* Close the oldest pending connection without a valid first message (from
 * origin only, when by_origin), after one last step of what it sent: a
 * rank whose first message has just arrived is vouched for by that step
 * and kept. Returns 1 when an entry was freed. */
static int shed_oldest(sock_listen *l, int expected_rank, double now,
                       int by_origin, uint64_t origin, const char *why) {
  for (;;) {
    int oldest = -1;
    for (int j = 0; j < l->npending; j++) {
      const pending *p = &l->pending[j];
      if (p->vouched || (by_origin && p->origin != origin)) continue;
      if (oldest < 0 || p->since < l->pending[oldest].since) oldest = j;
    }
    if (oldest < 0) return 0;
    if (pending_step(l, oldest, expected_rank, now)) return 1; /* it left */
    if (l->pending[oldest].vouched) continue; /* a rank after all */
    drop_pending(l, oldest, why);
    return 1;
  }
}

static xcoll_status socket_accept(xcoll_net_listen_comm *listen_comm,
                                  int expected_rank,
                                  xcoll_net_recv_comm **recv_comm) {
  if (recv_comm != NULL) *recv_comm = NULL;
  sock_listen *l = (sock_listen *)listen_comm;
  if (l == NULL || recv_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: accept with a NULL listen_comm or recv_comm");
  double now = now_s();
  /* Take every connection waiting in either backlog, reading each at once:
   * a rank's first message is usually there already, and then it is
   * vouched for before anything is shed. */
  for (int over_unix = 0; over_unix < 2; over_unix++) {
    int lfd = over_unix ? l->ufd : l->fd;
    while (lfd >= 0) {
      struct sockaddr_storage from;
      socklen_t len = sizeof from;
      int fd = accept4(lfd, (struct sockaddr *)&from, &len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
            errno == ECONNABORTED)
          break;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          /* Out of descriptors: shed a stranger and try again; with none
           * to shed, the backlog keeps the rest until the next call. */
          char why[96];
          snprintf(why, sizeof why,
                   "accept: %s; shedding the oldest silent connection",
                   strerror(errno));
          int err = errno;
          if (shed_oldest(l, expected_rank, now, 0, 0, why)) continue;
          static atomic_int warned;
          if (atomic_exchange(&warned, 1) == 0)
            net_warn("net socket: rank %d: accept on %s%s: %s, and no "
                     "unauthenticated connection to close; raise the "
                     "descriptor limit (ulimit -n)",
                     l->config.rank, l->addr, over_unix ? " (unix)" : "",
                     strerror(err));
          break;
        }
        return net_fail(XCOLL_ERR_SYSTEM,
                        "net socket: accept on %s%s failed: %s", l->addr,
                        over_unix ? " (unix)" : "", strerror(errno));
      }
      char who[SOCK_ADDR_BYTES];
      uint64_t origin;
      if (over_unix) {
        /* a rank of this host: named by this host's address */
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &device_addr.publish_addr, ip, sizeof ip);
        snprintf(who, sizeof who, "%s (unix)", ip);
        origin = (uint64_t)1 << 32;
      } else {
        format_addr((const struct sockaddr_in *)&from, who);
        origin = ((const struct sockaddr_in *)&from)->sin_addr.s_addr;
      }
      if (count_strangers(l, 1, origin) >= SOCK_MAX_PENDING_PER_ADDRESS)
        shed_oldest(l, expected_rank, now, 1, origin,
                    "too many connections from its address waiting to "
                    "introduce themselves");
      if (l->npending == SOCK_MAX_PENDING &&
          !shed_oldest(l, expected_rank, now, 0, 0,
                       "too many connections waiting to introduce "
                       "themselves")) {
        /* Every entry has a valid first message: this one cannot be the
         * rank this accept waits for. */
        log_drop(l, who, "every slot holds an introduced connection");
        close(fd);
        continue;
      }
      pending *p = &l->pending[l->npending++];
      memset(p, 0, sizeof *p);
      p->fd = fd;
      p->since = now;
      p->deadline = now + XCOLL_STRANGER_DEADLINE_S;
      p->origin = origin;
      snprintf(p->who, sizeof p->who, "%s", who);
      (void)pending_step(l, l->npending - 1, expected_rank, now);
    }
  }
  /* Read hellos and run the exchange; keep the good, drop the rest. */
  for (int j = 0; j < l->npending;)
    if (pending_step(l, j, expected_rank, now) == 0) j++;
  if (l->formed < l->nsocks) return XCOLL_SUCCESS; /* call again */
  sock_comm *c =
      comm_new(0, l->nsocks, l->forming, expected_rank, l->forming_who);
  if (c == NULL)
    return net_fail(XCOLL_ERR_NO_MEMORY, "net socket: no memory for a recv comm");
  for (int i = 0; i < SOCK_MAX_NSOCKS; i++) l->forming[i] = -1;
  l->formed = 0;
  net_info("net socket: rank %d accepted rank %d from %s on %s (%d socket(s))",
       l->config.rank, expected_rank, c->peer, l->addr, c->nsocks);
  *recv_comm = (xcoll_net_recv_comm *)c;
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

static void socket_close_listen(xcoll_net_listen_comm *listen_comm) {
  sock_listen *l = (sock_listen *)listen_comm;
  if (l == NULL) return;
  for (int j = 0; j < l->npending; j++) close(l->pending[j].fd);
  unsigned long unlogged = xcoll_drop_tally_flush(&l->drops);
  if (unlogged > 0)
    net_warn("net socket: rank %d dropped %lu more unauthenticated "
             "connection(s) to %s",
             l->config.rank, unlogged, l->addr);
  for (int i = 0; i < SOCK_MAX_NSOCKS; i++)
    if (l->forming[i] >= 0) close(l->forming[i]);
  close(l->fd);
  if (l->ufd >= 0)
    close(l->ufd);
  free(l);
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
