/* net_example.c - a net plugin written to be read: the smallest complete
 * implementation of the net/net.h contract, built as its own shared object
 * (libxcoll-net-example.so) and loaded with
 *     XCOLL_NET_PLUGIN=/path/to/libxcoll-net-example.so   (or =example)
 * It uses nothing of libxcoll but the two headers net.h and xcoll.h, as an
 * out-of-tree plugin would. docs/net-plugins.md walks through it.
 *
 * What it does: one TCP socket per connection, host memory only.
 *   handle   = {magic, IPv4 address, port} of the listening socket
 *   connect  = TCP connect + a 16-byte hello {magic, rank, comm_id}
 *   accept   = take one connection, check its hello, drop strangers
 *   message  = an 8-byte header {tag, size} then the bytes
 *   progress = test() moves bytes with non-blocking send/recv, in order
 *
 * Simplifications a production plugin would not make (net/socket/ does the
 * full job): the address is 127.0.0.1 unless XCOLL_NET_EXAMPLE_ADDR says
 * otherwise; connect finishes in one call (a TCP connect to a listening
 * socket completes in the kernel's backlog, without the peer's accept) and
 * may wait up to the config's timeout; accept reads a hello with a 1 s poll,
 * so a silent stranger costs one call 1 s; messages are limited to 4 GiB. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"

#define EX_MAGIC 0x58454e58u /* "XNEX" */
#define EX_HELLO_BYTES 16
#define EX_HEADER_BYTES 8
#define EX_MAX_REQUESTS 8 /* requests in flight per comm (<= 32) */

/* ---- logging: every failure says one sentence through the host's log ---- */

static xcoll_net_log_fn log_fn;

static xcoll_status say(xcoll_net_log_level level, xcoll_status status,
                        const char *fmt, ...) {
  if (log_fn != NULL) {
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    log_fn(level, message);
  }
  return status;
}
#define EX_FAIL(status, ...) say(XCOLL_NET_LOG_ERROR, status, __VA_ARGS__)
#define EX_WARN(...) say(XCOLL_NET_LOG_WARN, XCOLL_SUCCESS, __VA_ARGS__)

static xcoll_status ex_init(xcoll_net_log_fn log) {
  if (log != NULL) log_fn = log;
  return XCOLL_SUCCESS;
}

static xcoll_status ex_devices(int *count) {
  *count = 1;
  return XCOLL_SUCCESS;
}

static xcoll_status ex_get_properties(int device, xcoll_net_properties *p) {
  if (device != 0) return EX_FAIL(XCOLL_ERR_INVALID_ARGUMENT, "example: no device %d", device);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "example");
  p->ptr_support = XCOLL_NET_PTR_HOST;
  p->max_comms = 1024;
  p->max_requests = EX_MAX_REQUESTS;
  return XCOLL_SUCCESS;
}

/* ---- connection set-up ---- */

typedef struct ex_handle { /* what the peer needs; lives in the 128-byte handle */
  uint32_t magic;
  uint32_t addr; /* network byte order */
  uint16_t port; /* network byte order */
} ex_handle;

typedef struct ex_listen {
  int fd;
  xcoll_net_config config;
} ex_listen;

static xcoll_status ex_listen_fn(int device, const xcoll_net_config *config,
                                 void *handle, xcoll_net_listen_comm **out) {
  (void)device;
  const char *addr_text = getenv("XCOLL_NET_EXAMPLE_ADDR");
  struct sockaddr_in sa = {.sin_family = AF_INET};
  if (inet_pton(AF_INET, addr_text ? addr_text : "127.0.0.1", &sa.sin_addr) != 1)
    return EX_FAIL(XCOLL_ERR_ENV, "example: XCOLL_NET_EXAMPLE_ADDR=%s is not an IPv4 address",
                   addr_text);
  socklen_t len = sizeof sa;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return EX_FAIL(XCOLL_ERR_SYSTEM, "example: cannot listen: %s", strerror(err));
  }
  ex_listen *l = malloc(sizeof *l);
  if (l == NULL) {
    close(fd);
    return EX_FAIL(XCOLL_ERR_NO_MEMORY, "example: no memory");
  }
  l->fd = fd;
  l->config = *config;
  ex_handle h = {EX_MAGIC, sa.sin_addr.s_addr, sa.sin_port};
  memset(handle, 0, XCOLL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof h); /* same-architecture peers: raw struct is fine */
  *out = (xcoll_net_listen_comm *)l;
  return XCOLL_SUCCESS;
}

/* A connected socket: the same struct serves as send comm and recv comm. */
typedef struct ex_request {
  struct ex_comm *comm;
  int used, done;
  char *data;
  size_t bytes; /* posted size (send: message size) */
  size_t size;  /* message size (recv: from the header) */
  uint32_t tag;
  uint64_t seq;
} ex_request;

typedef struct ex_comm {
  int fd, peer_rank, is_send;
  xcoll_status error; /* sticky: a broken comm stays broken */
  uint64_t posted, current; /* next seq to post, seq being moved */
  size_t moved;             /* bytes of the current message moved, header included */
  unsigned char header[EX_HEADER_BYTES];
  ex_request requests[EX_MAX_REQUESTS];
} ex_comm;

static ex_comm *comm_new(int fd, int peer_rank, int is_send) {
  ex_comm *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->fd = fd;
  c->peer_rank = peer_rank;
  c->is_send = is_send;
  for (int i = 0; i < EX_MAX_REQUESTS; i++) c->requests[i].comm = c;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return c;
}

static void encode_hello(unsigned char *out, int rank, uint64_t comm_id) {
  uint32_t magic = EX_MAGIC, r = (uint32_t)rank;
  memcpy(out, &magic, 4);
  memcpy(out + 4, &r, 4);
  memcpy(out + 8, &comm_id, 8);
}

static xcoll_status ex_connect(int device, const xcoll_net_config *config,
                               const void *handle, int peer_rank,
                               xcoll_net_send_comm **out) {
  (void)device;
  ex_handle h;
  memcpy(&h, handle, sizeof h);
  if (h.magic != EX_MAGIC)
    return EX_FAIL(XCOLL_ERR_INVALID_ARGUMENT, "example: not an example plugin handle");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = h.port};
  sa.sin_addr.s_addr = h.addr;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return EX_FAIL(XCOLL_ERR_SYSTEM, "example: socket: %s", strerror(errno));
  /* Bound the (blocking) connect by the config's timeout. */
  struct timeval tv = {(time_t)config->timeout_s, 0};
  if (tv.tv_sec < 1) tv.tv_sec = 1;
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  unsigned char hello[EX_HELLO_BYTES];
  encode_hello(hello, config->rank, config->comm_id);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
    int err = errno;
    close(fd);
    return EX_FAIL(err == ECONNREFUSED ? XCOLL_ERR_REMOTE : XCOLL_ERR_SYSTEM,
                   "example: rank %d cannot connect to rank %d at %s:%d: %s", config->rank,
                   peer_rank, inet_ntoa(sa.sin_addr), ntohs(sa.sin_port), strerror(err));
  }
  ex_comm *c = comm_new(fd, peer_rank, 1);
  if (c == NULL) {
    close(fd);
    return EX_FAIL(XCOLL_ERR_NO_MEMORY, "example: no memory");
  }
  *out = (xcoll_net_send_comm *)c;
  return XCOLL_SUCCESS;
}

static xcoll_status ex_accept(xcoll_net_listen_comm *listen_comm, int expected_rank,
                              xcoll_net_recv_comm **out) {
  ex_listen *l = (ex_listen *)listen_comm;
  *out = NULL;
  struct sockaddr_in from;
  socklen_t len = sizeof from;
  int fd = accept4(l->fd, (struct sockaddr *)&from, &len, SOCK_CLOEXEC);
  if (fd < 0) /* nobody yet (EAGAIN): the caller calls again */
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED
               ? XCOLL_SUCCESS
               : EX_FAIL(XCOLL_ERR_SYSTEM, "example: accept: %s", strerror(errno));
  unsigned char hello[EX_HELLO_BYTES], expected[EX_HELLO_BYTES];
  encode_hello(expected, expected_rank, l->config.comm_id);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 1000) != 1 || recv(fd, hello, sizeof hello, MSG_WAITALL) != sizeof hello ||
      memcmp(hello, expected, sizeof hello) != 0) {
    /* Not our peer (a scanner, another job): drop it and keep listening. */
    EX_WARN("example: dropped a connection from %s:%d without the hello of rank %d",
            inet_ntoa(from.sin_addr), ntohs(from.sin_port), expected_rank);
    close(fd);
    return XCOLL_SUCCESS;
  }
  ex_comm *c = comm_new(fd, expected_rank, 0);
  if (c == NULL) {
    close(fd);
    return EX_FAIL(XCOLL_ERR_NO_MEMORY, "example: no memory");
  }
  *out = (xcoll_net_recv_comm *)c;
  return XCOLL_SUCCESS;
}

/* ---- memory registration: sockets need none ---- */

static xcoll_status ex_reg_mr(xcoll_net_send_comm *s, xcoll_net_recv_comm *r, void *data,
                              size_t bytes, int ptr_type, void **mhandle) {
  (void)s, (void)r, (void)data, (void)bytes;
  *mhandle = NULL;
  if (ptr_type != XCOLL_NET_PTR_HOST)
    return EX_FAIL(XCOLL_ERR_NOT_SUPPORTED, "example: host memory only");
  static char registered;
  *mhandle = &registered;
  return XCOLL_SUCCESS;
}

static xcoll_status ex_dereg_mr(xcoll_net_send_comm *s, xcoll_net_recv_comm *r, void *m) {
  (void)s, (void)r, (void)m;
  return XCOLL_SUCCESS;
}

/* ---- data: requests in a ring, moved in order by progress() ---- */

static xcoll_status post(ex_comm *c, void *data, size_t bytes, uint32_t tag,
                         xcoll_net_request **request) {
  *request = NULL;
  if (c->error != XCOLL_SUCCESS)
    return EX_FAIL(c->error, "example: the connection to rank %d is broken", c->peer_rank);
  if (bytes > UINT32_MAX)
    return EX_FAIL(XCOLL_ERR_INVALID_ARGUMENT, "example: %zu bytes is over 4 GiB", bytes);
  ex_request *r = &c->requests[c->posted % EX_MAX_REQUESTS];
  if (r->used) return XCOLL_SUCCESS; /* full: a NULL request means "later" */
  *r = (ex_request){.comm = c, .used = 1, .data = data, .bytes = bytes, .size = bytes,
                    .tag = tag, .seq = c->posted++};
  *request = (xcoll_net_request *)r;
  return XCOLL_SUCCESS;
}

static xcoll_status ex_isend(xcoll_net_send_comm *comm, const void *data, size_t bytes,
                             uint32_t tag, void *mhandle, xcoll_net_request **request) {
  (void)mhandle;
  return post((ex_comm *)comm, (void *)data, bytes, tag, request);
}

static xcoll_status ex_irecv(xcoll_net_recv_comm *comm, void *data, size_t bytes, uint32_t tag,
                             void *mhandle, xcoll_net_request **request) {
  (void)mhandle;
  return post((ex_comm *)comm, data, bytes, tag, request);
}

static xcoll_status broken(ex_comm *c, xcoll_status status, const char *why) {
  c->error = status;
  return EX_FAIL(status, "example: rank %d: %s", c->peer_rank, why);
}

/* Move bytes of the message in order until the socket would block. */
static xcoll_status progress(ex_comm *c) {
  while (c->error == XCOLL_SUCCESS && c->current < c->posted) {
    ex_request *r = &c->requests[c->current % EX_MAX_REQUESTS];
    if (c->is_send && c->moved == 0) { /* header: tag and size, little-endian host */
      uint32_t fields[2] = {r->tag, (uint32_t)r->size};
      memcpy(c->header, fields, sizeof fields);
    }
    int in_header = c->moved < EX_HEADER_BYTES;
    char *at = in_header ? (char *)c->header + c->moved
                         : r->data + (c->moved - EX_HEADER_BYTES);
    size_t left = in_header ? EX_HEADER_BYTES - c->moved
                            : r->size - (c->moved - EX_HEADER_BYTES);
    ssize_t n = 0;
    if (left > 0) {
      n = c->is_send ? send(c->fd, at, left, MSG_DONTWAIT | MSG_NOSIGNAL)
                     : recv(c->fd, at, left, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return XCOLL_SUCCESS;
      if (n <= 0) return broken(c, XCOLL_ERR_REMOTE, "the peer closed the connection");
      c->moved += (size_t)n;
    }
    if (!c->is_send && in_header && c->moved == EX_HEADER_BYTES) {
      uint32_t fields[2];
      memcpy(fields, c->header, sizeof fields);
      if (fields[0] != r->tag) return broken(c, XCOLL_ERR_PROTOCOL, "tag mismatch");
      if (fields[1] > r->bytes) return broken(c, XCOLL_ERR_PROTOCOL, "message truncated");
      r->size = fields[1];
    }
    if (c->moved == EX_HEADER_BYTES + r->size) { /* this message is complete */
      r->done = 1;
      c->current++;
      c->moved = 0;
    }
  }
  return c->error;
}

static xcoll_status ex_test(xcoll_net_request *request, int *done, size_t *bytes) {
  ex_request *r = (ex_request *)request;
  *done = 0;
  xcoll_status before = r->comm->error;
  xcoll_status s = progress(r->comm);
  if (s != XCOLL_SUCCESS) {
    r->used = 0; /* on error the request is released too */
    if (before != XCOLL_SUCCESS) /* a new failure was logged by broken() */
      EX_FAIL(s, "example: the connection to rank %d is broken", r->comm->peer_rank);
    return s;
  }
  if (r->done) {
    *done = 1;
    if (bytes) *bytes = r->size;
    r->used = 0;
  }
  return XCOLL_SUCCESS;
}

static void ex_close(void *comm) {
  ex_comm *c = comm;
  if (c == NULL) return;
  close(c->fd);
  free(c); /* requests live inside the comm: closing releases them */
}
static void ex_close_send(xcoll_net_send_comm *c) { ex_close(c); }
static void ex_close_recv(xcoll_net_recv_comm *c) { ex_close(c); }
static void ex_close_listen(xcoll_net_listen_comm *listen_comm) {
  ex_listen *l = (ex_listen *)listen_comm;
  if (l == NULL) return;
  close(l->fd);
  free(l);
}

/* The one symbol xcoll looks for (XCOLL_NET_PLUGIN_SYMBOL). */
__attribute__((visibility("default"))) const xcoll_net_v1 xcoll_net_plugin_v1 = {
    .name = "example",
    .init = ex_init,
    .devices = ex_devices,
    .get_properties = ex_get_properties,
    .listen = ex_listen_fn,
    .connect = ex_connect,
    .accept = ex_accept,
    .reg_mr = ex_reg_mr,
    .dereg_mr = ex_dereg_mr,
    .isend = ex_isend,
    .irecv = ex_irecv,
    .test = ex_test,
    .close_send = ex_close_send,
    .close_recv = ex_close_recv,
    .close_listen = ex_close_listen,
};
