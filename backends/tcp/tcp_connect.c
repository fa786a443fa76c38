/* tcp_connect.c - how the tcp backend's ranks find and connect to each
 * other: pick the interface (XCOLL_SOCKET_IFNAME, or the one that reaches the
 * master), listen on an ephemeral port, publish "host:port" in the store,
 * then build a full mesh of nsocks connections per pair, each introduced by a
 * checked HELLO header (tcp_hello.c). Every HELLO field is validated as the
 * unsigned value it is on the wire (both bounds); a connection to our
 * listener that sends a bad HELLO, or nothing, is dropped (logged at most
 * once a second) and startup goes on; see MESH_MAX_PENDING_STRANGERS. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET /* log.h */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "bootstrap.h"
#include "error.h"
#include "log.h"
#include "netaddr.h"
#include "params.h"
#include "socket.h"
#include "store.h"
#include "stranger.h"
#include "tcp.h"
#include "tcp_hello.h"

double xcoll_tcp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Remaining milliseconds until deadline (seconds), at least 0. */
static int ms_left(double deadline) {
  double left = deadline - xcoll_tcp_now();
  if (left <= 0) return 0;
  if (left > 1e6) return 1000000000;
  return (int)(left * 1000.0) + 1;
}

/* The interface rule lives in core/netaddr.c, shared with the socket net
 * plugin; the tcp backend also listens on IPv6 (XCOLL_SOCKET_FAMILY, or an
 * interface or master reachable only over IPv6). */
static xcoll_status choose_address(tcp_state *st, xcoll_netaddr_any *chosen) {
  xcoll_comm *comm = st->comm;
  int choice = -1; /* core/params.c: "AF_INET", "AF_INET6" */
  xcoll_status s = xcoll_param_choice("XCOLL_SOCKET_FAMILY", &choice);
  if (s != XCOLL_SUCCESS) return xcoll_error_adopt(comm, s);
  int family = choice == 0 ? AF_INET : choice == 1 ? AF_INET6 : AF_UNSPEC;
  char err[768];
  s = xcoll_netaddr_choose_any(comm->options.socket_ifname, family,
                               comm->master_addr, comm->master_port, "tcp",
                               chosen, err, sizeof err);
  if (s != XCOLL_SUCCESS) return xcoll_error(comm, s, "%s", err);
  return XCOLL_SUCCESS;
}

static xcoll_status start_listening(tcp_state *st) {
  xcoll_netaddr_any chosen;
  xcoll_status s = choose_address(st, &chosen);
  if (s != XCOLL_SUCCESS) return s;
  char where[64];
  xcoll_netaddr_format(&chosen.bind_addr, where, sizeof where);

  struct sockaddr_storage sa = chosen.bind_addr;
  socklen_t len = chosen.bind_addr.ss_family == AF_INET6
                      ? (socklen_t)sizeof(struct sockaddr_in6)
                      : (socklen_t)sizeof(struct sockaddr_in);
  /* The backlog holds every lower rank's connections until we accept. */
  int fd = xcoll_socket_listen((struct sockaddr *)&sa, len, 4096);
  socklen_t got = sizeof sa;
  if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &got) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "tcp: cannot listen on %s (an ephemeral port): %s; set "
                       "XCOLL_SOCKET_IFNAME to another interface",
                       where, strerror(err));
  }
  st->listen_fd = fd;
  struct sockaddr_storage published = chosen.publish_addr;
  uint16_t port = sa.ss_family == AF_INET6
                      ? ((struct sockaddr_in6 *)&sa)->sin6_port
                      : ((struct sockaddr_in *)&sa)->sin_port;
  if (published.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&published)->sin6_port = port;
  else
    ((struct sockaddr_in *)&published)->sin_port = port;
  xcoll_netaddr_format(&sa, where, sizeof where);
  xcoll_netaddr_format(&published, st->my_addr, sizeof st->my_addr);
  XCOLL_INFO("tcp: comm %" PRIu64 " rank %d listens on %s, published as "
             "%s (interface chosen by %s)",
             st->comm_id, st->rank, where, st->my_addr, chosen.why);
  return XCOLL_SUCCESS;
}

/* Seconds between asks to the store whether a rank died, while startup
 * waits on sockets (a dead rank is reported within about this long). */
#define TCP_HEALTH_PERIOD_S 0.5

/* Ask the store (at most every TCP_HEALTH_PERIOD_S) whether a rank of the
 * job died; *last holds the time of the last ask. */
static xcoll_status check_job_health(tcp_state *st, double *last) {
  double now = xcoll_tcp_now();
  if (now - *last < TCP_HEALTH_PERIOD_S || !st->comm->store)
    return XCOLL_SUCCESS;
  *last = now;
  xcoll_status s = xcoll_store_health(st->comm->store);
  if (s == XCOLL_SUCCESS) return s;
  return xcoll_error(st->comm, s, "tcp: rank %d stops connecting: %s",
                     st->rank, xcoll_last_error());
}

/* Connect to addr, retrying refused connections until deadline. Returns the
 * fd (blocking, CLOEXEC) or -1 with errno set (ETIMEDOUT at the deadline;
 * ECANCELED when the store reports a dead rank, message already set). */
static int connect_until(tcp_state *st, const struct sockaddr_storage *sa,
                         socklen_t sa_len, double deadline) {
  double last_health = xcoll_tcp_now();
  double backoff_s = 0.01;
  for (;;) {
    int fd = xcoll_socket_connect_once((const struct sockaddr *)sa, sa_len,
                                       deadline);
    if (fd >= 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    int err = errno;
    if (!xcoll_socket_retryable(err) || xcoll_tcp_now() >= deadline) {
      errno = xcoll_tcp_now() >= deadline ? ETIMEDOUT : err;
      return -1;
    }
    /* A refused connect to a published address may mean the rank died. */
    if (check_job_health(st, &last_health) != XCOLL_SUCCESS) {
      errno = ECANCELED;
      return -1;
    }
    if (xcoll_socket_backoff(&backoff_s, deadline) != 0) {
      errno = ETIMEDOUT;
      return -1;
    }
  }
}

/* What a connection's peers prove the job's secret for (auth.h): binds the
 * proof to this communicator, these two ranks and this socket. */
static void auth_context(const tcp_state *st, int connector, int acceptor,
                         int index, char *out, size_t bytes) {
  snprintf(out, bytes, "xcoll tcp comm=%" PRIu64 " ranks=%d>%d socket=%d",
           st->comm_id, connector, acceptor, index);
}

/* What the HELLO check (tcp_hello.h) needs to know about this rank. */
static tcp_hello_world hello_world(const tcp_state *st) {
  return (tcp_hello_world){.comm_id = st->comm_id,
                           .rank = st->rank,
                           .world_size = st->world_size,
                           .nsocks = st->nsocks};
}

/* Send a HELLO for to_rank's socket index followed by extra (an
 * authentication offer, and for a reply the server's proof). */
static int send_hello(tcp_state *st, int fd, int to_rank, int index,
                      const uint8_t *extra, size_t extra_bytes) {
  uint8_t bytes[XCOLL_WIRE_HEADER_BYTES + XCOLL_AUTH_OFFER_BYTES +
                XCOLL_AUTH_PROOF_BYTES];
  tcp_hello_world world = hello_world(st);
  xcoll_tcp_hello_encode(&world, to_rank, index, bytes);
  memcpy(bytes + XCOLL_WIRE_HEADER_BYTES, extra, extra_bytes);
  size_t total = XCOLL_WIRE_HEADER_BYTES + extra_bytes;
  return send(fd, bytes, total, MSG_NOSIGNAL) == (ssize_t)total ? 0 : -1;
}

/* Check a HELLO read from the network: xcoll_tcp_hello_check (tcp_hello.h)
 * against this rank. */
static int check_hello(const tcp_state *st, const uint8_t *bytes,
                       int expected_peer, int expected_index, int *peer,
                       int *index, char *why, size_t why_bytes) {
  tcp_hello_world world = hello_world(st);
  return xcoll_tcp_hello_check(&world, bytes, expected_peer, expected_index,
                               peer, index, why, why_bytes);
}

static void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  /* Fixed buffers instead of autotuning: with autotuning (or SO_SNDBUF
   * alone), 4 of 7 launches at P=2 on loopback ran at half the speed for
   * 512 KiB-2 MiB; with both set, 0 of 4, and 4-64 MiB went from about 2 to
   * 2.7-4 GB/s. The kernel caps
   * the value at net.core.[rw]mem_max (and doubles it); failure is
   * harmless, autotuning then stays. */
  int bytes = TCP_SOCKET_BUFFER_BYTES;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

/* ---- building the mesh ----
 * Every connection being introduced is a mesh_link: one we opened to a
 * higher rank (it waits for that rank's HELLO reply) or one our listener
 * accepted (it waits for the caller's HELLO). All of them, and the listener,
 * are served by one poll loop, so that a silent or slow connection (a port
 * scan, a stranger) never holds up the others, and a connection that sends
 * something wrong is dropped with a WARN while startup goes on. */

/* Incoming connections that have not yet sent a valid first message
 * (HELLO, offer and hello tag, see below) that the listener holds at once,
 * and how many of those may come from one peer address. Beyond either
 * bound the oldest such connection (of the listener, or of that address)
 * is closed to make room: a flood of strangers costs at most this many
 * file descriptors, and a rank, whose first message is waiting at accept,
 * is never the oldest silent one. A connection with a valid first message
 * is never evicted; one whose first message is wrong is closed at once;
 * one that stays silent for XCOLL_STRANGER_DEADLINE_S is closed
 * (core/stranger.h). */
#define MESH_MAX_PENDING_STRANGERS 256
#define MESH_MAX_PENDING_PER_ADDRESS 128
/* How many times a connector connects again when the listener closes its
 * connection before a byte of the answer (see link_read). */
#define MESH_SILENT_CLOSE_RETRIES 8
/* After accept fails for lack of descriptors with nothing to shed, the
 * listener rests this long (seconds) instead of spinning on a readable
 * backlog. */
#define MESH_EMFILE_REST_S 0.05

typedef enum { LINK_CONNECTOR = 1, LINK_ACCEPTOR = 2 } link_role;

/* Bytes of each step: the caller's HELLO + offer + hello tag; the reply
 * HELLO + offer + proof; the caller's proof (only with a job secret). The
 * hello tag is HMAC(secret, "hello" | context | caller's nonce | zeros)
 * (auth.h's proof with role "hello" and a zero server nonce): it lets the
 * listener tell a rank from a stranger from the first message on, before
 * it answers, so that a rank's connection is never shed for a stranger's. */
#define MESH_CALL_BYTES                                                        \
  (XCOLL_WIRE_HEADER_BYTES + XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)
#define MESH_REPLY_BYTES                                                       \
  (XCOLL_WIRE_HEADER_BYTES + XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)

/* What an accepted connection waits for. Its HELLO header is judged before
 * anything else is read, so a stranger learns nothing and costs little. */
typedef enum {
  STAGE_HELLO = 0, /* the wire header of its HELLO */
  STAGE_OFFER,     /* the authentication offer and hello tag after it */
  STAGE_PROOF      /* answered; its proof of the job's secret */
} link_stage;

typedef struct mesh_link {
  int fd; /* -1: slot free */
  link_role role;
  int peer, index; /* connector: whom we called; acceptor: from its HELLO */
  int stage;      /* acceptor: link_stage */
  uint8_t nonce_mine[XCOLL_AUTH_NONCE_BYTES];
  uint8_t nonce_peer[XCOLL_AUTH_NONCE_BYTES];
  uint8_t buf[MESH_REPLY_BYTES];
  size_t have, need;
  char who[TCP_ADDR_BYTES + 48];
  /* acceptor: when it was accepted (seconds), whether its first message was
   * valid (then it is never evicted), and its peer address (the bytes of
   * the IPv4 or IPv6 address) for the per-address bound */
  double since;
  int vouched;
  uint8_t origin[16];
  int retries; /* connector: connections opened again after a silent close */
} mesh_link;

typedef struct mesh {
  tcp_state *st;
  mesh_link *links;
  int capacity;
  int installed; /* sockets of the mesh that are ready */
  int expected;  /* (world_size - 1) * nsocks */
  double deadline;
  double accept_rest_until; /* see MESH_EMFILE_REST_S */
  xcoll_drop_tally drops;   /* rejected incoming connections, for the log */
} mesh;

static mesh_link *mesh_add(mesh *m, int fd, link_role role) {
  for (int k = 0; k < m->capacity; k++)
    if (m->links[k].fd < 0) {
      mesh_link *l = &m->links[k];
      memset(l, 0, sizeof *l);
      l->fd = fd;
      l->role = role;
      l->peer = l->index = -1;
      l->need = role == LINK_CONNECTOR ? MESH_REPLY_BYTES
                                       : XCOLL_WIRE_HEADER_BYTES;
      return l;
    }
  return NULL;
}

static void link_drop(mesh_link *l) {
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
}

/* A connection the listener took that failed its introduction: the job goes
 * on without it. A WARN at most once a second, with a count of the drops in
 * between, so that a flood of strangers cannot flood the log; every drop is
 * an INFO line (XCOLL_DEBUG=INFO). */
static void link_reject(mesh *m, mesh_link *l, const char *why) {
  unsigned long also = 0;
  if (xcoll_drop_tally_note(&m->drops, xcoll_tcp_now(), &also)) {
    if (also > 0)
      XCOLL_WARN("tcp: rank %d drops %s: %s (and dropped %lu other "
                 "unauthenticated connection(s) in the last second)",
                 m->st->rank, l->who, why, also);
    else
      XCOLL_WARN("tcp: rank %d drops %s: %s", m->st->rank, l->who, why);
  } else
    XCOLL_INFO("tcp: rank %d drops %s: %s", m->st->rank, l->who, why);
  link_drop(l);
}

static void link_install(mesh *m, mesh_link *l) {
  m->st->peers[l->peer].socks[l->index].fd = l->fd;
  m->installed++;
  l->fd = -1; /* owned by the mesh now */
}

/* An incoming connection sent its HELLO header: judge it before reading
 * on. */
static void acceptor_header(mesh *m, mesh_link *l) {
  tcp_state *st = m->st;
  char why[XCOLL_WIRE_WHY_BYTES];
  int peer = -1, index = -1;
  if (check_hello(st, l->buf, -1, -1, &peer, &index, why, sizeof why) != 0) {
    link_reject(m, l, why);
    return;
  }
  if (st->peers[peer].socks[index].fd >= 0) {
    snprintf(why, sizeof why,
             "a second connection for socket %d of rank %d (that socket is "
             "already connected)",
             index, peer);
    link_reject(m, l, why);
    return;
  }
  l->peer = peer;
  l->index = index;
  l->stage = STAGE_OFFER;
  l->need = MESH_CALL_BYTES;
}

/* An incoming connection sent its HELLO, its authentication offer and its
 * hello tag: its whole first message. */
static void acceptor_hello(mesh *m, mesh_link *l) {
  tcp_state *st = m->st;
  char why[XCOLL_WIRE_WHY_BYTES];
  int peer = l->peer, index = l->index;
  if (xcoll_auth_parse_offer(l->buf + XCOLL_WIRE_HEADER_BYTES, l->nonce_peer,
                             why, sizeof why) != 0) {
    link_reject(m, l, why);
    return;
  }
  char context[XCOLL_AUTH_CONTEXT_BYTES];
  auth_context(st, peer, st->rank, index, context, sizeof context);
  static const uint8_t no_nonce[XCOLL_AUTH_NONCE_BYTES];
  if (!xcoll_auth_verify("hello", context, l->nonce_peer, no_nonce,
                         l->buf + XCOLL_WIRE_HEADER_BYTES +
                             XCOLL_AUTH_OFFER_BYTES)) {
    snprintf(why, sizeof why,
             "its HELLO claims rank %d but its hello tag is wrong (it does "
             "not know this job's secret)",
             peer);
    link_reject(m, l, why);
    return;
  }
  l->vouched = 1;
  uint8_t answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  xcoll_auth_offer(answer, l->nonce_mine);
  xcoll_auth_prove("server", context, l->nonce_peer, l->nonce_mine,
                   answer + XCOLL_AUTH_OFFER_BYTES);
  if (send_hello(st, l->fd, peer, index, answer, sizeof answer) != 0) {
    snprintf(why, sizeof why, "could not answer its HELLO: %s",
             strerror(errno));
    link_reject(m, l, why);
    return;
  }
  l->peer = peer;
  l->index = index;
  if (!xcoll_auth_enabled()) {
    link_install(m, l);
    return;
  }
  l->stage = STAGE_PROOF;
  l->have = 0;
  l->need = XCOLL_AUTH_PROOF_BYTES;
}

/* An incoming connection sent its proof of the job's secret. */
static void acceptor_proof(mesh *m, mesh_link *l) {
  tcp_state *st = m->st;
  char context[XCOLL_AUTH_CONTEXT_BYTES], why[XCOLL_WIRE_WHY_BYTES];
  auth_context(st, l->peer, st->rank, l->index, context, sizeof context);
  if (!xcoll_auth_verify("client", context, l->nonce_peer, l->nonce_mine,
                         l->buf)) {
    snprintf(why, sizeof why,
             "it claims to be rank %d but failed authentication (it does not "
             "know this job's secret)",
             l->peer);
    link_reject(m, l, why);
    return;
  }
  if (st->peers[l->peer].socks[l->index].fd >= 0) {
    snprintf(why, sizeof why, "a second connection for socket %d of rank %d",
             l->index, l->peer);
    link_reject(m, l, why);
    return;
  }
  link_install(m, l);
}

/* The higher rank we connected to answered. A wrong answer from the address
 * a rank published is fatal: that rank cannot be replaced. */
static xcoll_status connector_reply(mesh *m, mesh_link *l) {
  tcp_state *st = m->st;
  char why[XCOLL_WIRE_WHY_BYTES];
  int peer = -1, index = -1;
  if (check_hello(st, l->buf, l->peer, l->index, &peer, &index, why,
                  sizeof why) != 0 ||
      xcoll_auth_parse_offer(l->buf + XCOLL_WIRE_HEADER_BYTES, l->nonce_peer,
                             why, sizeof why) != 0)
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "tcp: rank %d got a bad HELLO reply from %s: %s",
                       st->rank, l->who, why);
  char context[XCOLL_AUTH_CONTEXT_BYTES];
  auth_context(st, st->rank, l->peer, l->index, context, sizeof context);
  if (!xcoll_auth_verify("server", context, l->nonce_mine, l->nonce_peer,
                         l->buf + XCOLL_WIRE_HEADER_BYTES +
                             XCOLL_AUTH_OFFER_BYTES))
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "tcp: rank %d: %s failed authentication: whoever "
                       "listens there does not know this job's secret "
                       "(XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE differ between "
                       "ranks?)",
                       st->rank, l->who);
  if (xcoll_auth_enabled()) {
    uint8_t proof[XCOLL_AUTH_PROOF_BYTES];
    xcoll_auth_prove("client", context, l->nonce_mine, l->nonce_peer, proof);
    if (send(l->fd, proof, sizeof proof, MSG_NOSIGNAL) !=
        (ssize_t)sizeof proof)
      return xcoll_error(st->comm, XCOLL_ERR_REMOTE,
                         "tcp: rank %d could not send its proof to %s: %s",
                         st->rank, l->who, strerror(errno));
  }
  link_install(m, l);
  return XCOLL_SUCCESS;
}

static xcoll_status connector_open(mesh *m, mesh_link *l, int p, int i);

/* Read what l's socket has, up to the message it waits for; act on a whole
 * one. Returns an error only for failures that end startup. */
static xcoll_status link_read(mesh *m, mesh_link *l) {
  tcp_state *st = m->st;
  ssize_t r = recv(l->fd, l->buf + l->have, l->need - l->have, MSG_DONTWAIT);
  if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
    return XCOLL_SUCCESS;
  if (r <= 0) {
    const char *why = r == 0 ? "connection closed" : strerror(errno);
    if (l->role == LINK_ACCEPTOR) {
      /* A port scan or a connect+close: nothing of ours was lost. */
      char reason[160];
      if (l->have == 0 && l->stage == STAGE_HELLO)
        snprintf(reason, sizeof reason, "it closed before saying anything");
      else
        snprintf(reason, sizeof reason, "%s in the middle of its %s", why,
                 l->stage == STAGE_PROOF ? "authentication" : "HELLO");
      link_reject(m, l, reason);
      return XCOLL_SUCCESS;
    }
    if (l->have == 0 && l->retries < MESH_SILENT_CLOSE_RETRIES &&
        xcoll_tcp_now() < m->deadline) {
      /* Closed before a byte of the answer: the listener shed it as a
       * silent stranger because our HELLO came late (a lost SYN-ACK makes
       * the kernel's first RTT sample about 1 s, so a lost HELLO is resent
       * some 2-3 s later, past XCOLL_STRANGER_DEADLINE_S), or under a flood
       * of strangers. A new connection starts with a fresh RTT estimate. A
       * listener that judged the HELLO wrong closes the next one too. */
      XCOLL_INFO("tcp: rank %d: %s closed the connection before answering "
                 "its HELLO (%s); connecting again",
                 st->rank, l->who, why);
      l->retries++;
      close(l->fd);
      l->fd = -1;
      return connector_open(m, l, l->peer, l->index);
    }
    return xcoll_error(st->comm, XCOLL_ERR_REMOTE,
                       "tcp: rank %d lost the connection to %s during the "
                       "HELLO exchange: %s; see that rank's log",
                       st->rank, l->who, why);
  }
  l->have += (size_t)r;
  if (l->have < l->need) return XCOLL_SUCCESS;
  if (l->role == LINK_ACCEPTOR) {
    if (l->stage == STAGE_HELLO) {
      acceptor_header(m, l);
      /* The offer and hello tag came with the header (a rank sends them in
       * one send): read them now, so that one call vouches for a rank. */
      if (l->fd >= 0) return link_read(m, l);
    } else if (l->stage == STAGE_OFFER)
      acceptor_hello(m, l);
    else
      acceptor_proof(m, l);
    return XCOLL_SUCCESS;
  }
  return connector_reply(m, l);
}

/* The peer address of an accepted connection, as 16 bytes (IPv4 in the
 * first 4), for the per-address bound. */
static void origin_of(const struct sockaddr_storage *from, uint8_t out[16]) {
  memset(out, 0, 16);
  if (from->ss_family == AF_INET6)
    memcpy(out, &((const struct sockaddr_in6 *)from)->sin6_addr, 16);
  else if (from->ss_family == AF_INET)
    memcpy(out, &((const struct sockaddr_in *)from)->sin_addr, 4);
}

/* Close the oldest incoming connection that has not sent a valid first
 * message (of origin only, when origin is not NULL), after one last read
 * of what it sent: a rank whose first message has just arrived is vouched
 * for by that read and kept. Returns 1 when a slot was freed. */
static int shed_oldest_stranger(mesh *m, const uint8_t *origin,
                                const char *why) {
  for (;;) {
    mesh_link *oldest = NULL;
    for (int k = 0; k < m->capacity; k++) {
      mesh_link *l = &m->links[k];
      if (l->fd < 0 || l->role != LINK_ACCEPTOR || l->vouched) continue;
      if (origin && memcmp(l->origin, origin, sizeof l->origin) != 0) continue;
      if (!oldest || l->since < oldest->since) oldest = l;
    }
    if (!oldest) return 0;
    (void)link_read(m, oldest); /* acceptors never fail the mesh */
    if (oldest->fd < 0) return 1; /* it was wrong or closed: dropped */
    if (oldest->vouched) continue; /* a rank after all: keep it */
    link_reject(m, oldest, why);
    return 1;
  }
}

/* Unvouched incoming connections in the table (of origin, when not NULL). */
static int count_strangers(const mesh *m, const uint8_t *origin) {
  int n = 0;
  for (int k = 0; k < m->capacity; k++) {
    const mesh_link *l = &m->links[k];
    if (l->fd >= 0 && l->role == LINK_ACCEPTOR && !l->vouched &&
        (!origin || memcmp(l->origin, origin, sizeof l->origin) == 0))
      n++;
  }
  return n;
}

/* Close every incoming connection that has had XCOLL_STRANGER_DEADLINE_S
 * to send a valid first message and has not (after one last read). */
static void shed_silent_strangers(mesh *m) {
  double now = xcoll_tcp_now();
  for (int k = 0; k < m->capacity; k++) {
    mesh_link *l = &m->links[k];
    if (l->fd < 0 || l->role != LINK_ACCEPTOR || l->vouched ||
        now - l->since < XCOLL_STRANGER_DEADLINE_S)
      continue;
    (void)link_read(m, l);
    if (l->fd >= 0 && !l->vouched) {
      char why[96];
      snprintf(why, sizeof why, "no valid first message within %.1f s",
               XCOLL_STRANGER_DEADLINE_S);
      link_reject(m, l, why);
    }
  }
}

/* Accept what the listener has. Each new connection is read at once: a
 * rank's first message is usually there already, and then it is vouched
 * for before anything is shed. */
static void mesh_accept(mesh *m) {
  tcp_state *st = m->st;
  for (;;) {
    struct sockaddr_storage from;
    socklen_t len = sizeof from;
    int fd = accept4(st->listen_fd, (struct sockaddr *)&from, &len,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        /* Out of descriptors: shed a stranger and try again; with none to
         * shed, rest the listener a little (the backlog keeps the rest). */
        char why[96];
        snprintf(why, sizeof why, "accept: %s; shedding the oldest silent "
                 "connection", strerror(errno));
        if (shed_oldest_stranger(m, NULL, why)) continue;
        XCOLL_WARN("tcp: rank %d: accept on %s: %s, and no unauthenticated "
                   "connection to close; raise the descriptor limit "
                   "(ulimit -n)",
                   st->rank, st->my_addr, strerror(errno));
        m->accept_rest_until = xcoll_tcp_now() + MESH_EMFILE_REST_S;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK)
        XCOLL_WARN("tcp: rank %d: accept on %s failed: %s", st->rank,
                   st->my_addr, strerror(errno));
      return;
    }
    uint8_t origin[16];
    origin_of(&from, origin);
    if (count_strangers(m, origin) >= MESH_MAX_PENDING_PER_ADDRESS)
      shed_oldest_stranger(m, origin,
                           "too many connections from its address waiting to "
                           "introduce themselves");
    if (count_strangers(m, NULL) >= MESH_MAX_PENDING_STRANGERS)
      shed_oldest_stranger(m, NULL,
                           "too many connections waiting to introduce "
                           "themselves");
    mesh_link *l = mesh_add(m, fd, LINK_ACCEPTOR);
    if (!l && shed_oldest_stranger(m, NULL,
                                   "too many connections waiting to "
                                   "introduce themselves"))
      l = mesh_add(m, fd, LINK_ACCEPTOR);
    char peer[64];
    xcoll_netaddr_format(&from, peer, sizeof peer);
    if (!l) {
      /* Every slot holds a connection with a valid first message: this
       * one cannot be a rank we still wait for. */
      mesh_link gone = {.fd = fd};
      snprintf(gone.who, sizeof gone.who, "the connection from %s", peer);
      link_reject(m, &gone, "every slot holds an introduced connection");
      continue;
    }
    l->since = xcoll_tcp_now();
    memcpy(l->origin, origin, sizeof l->origin);
    snprintf(l->who, sizeof l->who, "the connection from %s", peer);
    (void)link_read(m, l);
  }
}

/* Connect socket i to higher rank p and send its HELLO, into link l (a
 * free slot, or the link of an earlier try). Our connects complete in the
 * peer's listen backlog, so nobody waits for anyone's accept. */
static xcoll_status connector_open(mesh *m, mesh_link *l, int p, int i) {
  tcp_state *st = m->st;
  struct sockaddr_storage sa;
  socklen_t sa_len = 0;
  if (xcoll_netaddr_parse(st->peers[p].addr, &sa, &sa_len) != 0)
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "tcp: rank %d published the address \"%s\", which is "
                       "neither IPv4 host:port nor [IPv6]:port",
                       p, st->peers[p].addr);
  /* offer | hello tag (see MESH_CALL_BYTES) */
  uint8_t first[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  uint8_t nonce[XCOLL_AUTH_NONCE_BYTES];
  static const uint8_t no_nonce[XCOLL_AUTH_NONCE_BYTES];
  char context[XCOLL_AUTH_CONTEXT_BYTES];
  xcoll_auth_offer(first, nonce);
  auth_context(st, st->rank, p, i, context, sizeof context);
  xcoll_auth_prove("hello", context, nonce, no_nonce,
                   first + XCOLL_AUTH_OFFER_BYTES);
  int fd = connect_until(st, &sa, sa_len, m->deadline);
  if (fd < 0 && errno == ECANCELED) return XCOLL_ERR_REMOTE;
  if (fd < 0 || send_hello(st, fd, p, i, first, sizeof first) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return xcoll_error(st->comm,
                       err == ETIMEDOUT ? XCOLL_ERR_TIMEOUT : XCOLL_ERR_REMOTE,
                       "tcp: rank %d cannot connect to rank %d at %s: %s "
                       "(check XCOLL_SOCKET_IFNAME and firewalls; is rank "
                       "%d alive?)",
                       st->rank, p, st->peers[p].addr, strerror(err), p);
  }
  int retries = l ? l->retries : 0;
  if (l) {
    memset(l, 0, sizeof *l);
    l->fd = fd;
    l->role = LINK_CONNECTOR;
    l->need = MESH_REPLY_BYTES;
  } else {
    l = mesh_add(m, fd, LINK_CONNECTOR);
  }
  l->peer = p;
  l->index = i;
  l->retries = retries;
  memcpy(l->nonce_mine, nonce, sizeof nonce);
  snprintf(l->who, sizeof l->who, "rank %d (%s)", p, st->peers[p].addr);
  return XCOLL_SUCCESS;
}

/* Open the connections to every higher rank and send each its HELLO. */
static xcoll_status mesh_connect_up(mesh *m) {
  tcp_state *st = m->st;
  for (int p = st->rank + 1; p < st->world_size; p++)
    for (int i = 0; i < st->nsocks; i++) {
      xcoll_status s = connector_open(m, NULL, p, i);
      if (s != XCOLL_SUCCESS) return s;
    }
  return XCOLL_SUCCESS;
}

static xcoll_status mesh_timeout(mesh *m) {
  tcp_state *st = m->st;
  char missing[256] = "";
  size_t used = 0;
  for (int p = 0; p < st->world_size && used < sizeof missing - 16; p++) {
    if (p == st->rank) continue;
    for (int i = 0; i < st->nsocks; i++)
      if (st->peers[p].socks[i].fd < 0) {
        used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                 used ? ", " : "", p);
        break;
      }
  }
  return xcoll_error(st->comm, XCOLL_ERR_TIMEOUT,
                     "tcp: rank %d waited %.0f s for the connections with "
                     "rank(s) %s (listening at %s); are they running?",
                     st->rank, st->timeout_s, missing, st->my_addr);
}

/* Serve the listener and every link until the mesh is complete. */
static xcoll_status mesh_run(mesh *m) {
  tcp_state *st = m->st;
  int accepting = st->rank > 0;
  /* mesh_accept takes every connection waiting, until accept4 would block. */
  fcntl(st->listen_fd, F_SETFL, fcntl(st->listen_fd, F_GETFL) | O_NONBLOCK);
  struct pollfd *pfds = calloc((size_t)m->capacity + 1, sizeof *pfds);
  int *which = calloc((size_t)m->capacity + 1, sizeof *which);
  xcoll_status s = XCOLL_SUCCESS;
  if (!pfds || !which)
    s = xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                    "tcp: out of memory for %d startup connections",
                    m->capacity);
  double last_health = xcoll_tcp_now();
  while (s == XCOLL_SUCCESS && m->installed < m->expected) {
    int n = 0;
    shed_silent_strangers(m);
    if (accepting && xcoll_tcp_now() >= m->accept_rest_until) {
      pfds[n] = (struct pollfd){.fd = st->listen_fd, .events = POLLIN};
      which[n++] = -1;
    }
    for (int k = 0; k < m->capacity; k++)
      if (m->links[k].fd >= 0) {
        pfds[n] = (struct pollfd){.fd = m->links[k].fd, .events = POLLIN};
        which[n++] = k;
      }
    int ms = ms_left(m->deadline);
    if (ms == 0) {
      s = mesh_timeout(m);
      break;
    }
    s = check_job_health(st, &last_health);
    if (s != XCOLL_SUCCESS) break;
    /* Wake at least every TCP_HEALTH_PERIOD_S, which also bounds how late a
     * silent stranger is closed, and after an EMFILE rest. */
    if (ms > (int)(TCP_HEALTH_PERIOD_S * 1000)) ms = (int)(TCP_HEALTH_PERIOD_S * 1000);
    if (accepting && m->accept_rest_until > xcoll_tcp_now() &&
        ms > (int)(MESH_EMFILE_REST_S * 1000) + 1)
      ms = (int)(MESH_EMFILE_REST_S * 1000) + 1;
    int ready = poll(pfds, (nfds_t)n, ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      s = xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                      "tcp: rank %d: poll during startup failed: %s", st->rank,
                      strerror(errno));
      break;
    }
    for (int j = 0; j < n && s == XCOLL_SUCCESS; j++) {
      if (!pfds[j].revents) continue;
      if (which[j] < 0)
        mesh_accept(m);
      else if (m->links[which[j]].fd == pfds[j].fd)
        s = link_read(m, &m->links[which[j]]);
    }
  }
  free(pfds);
  free(which);
  unsigned long unlogged = xcoll_drop_tally_flush(&m->drops);
  if (unlogged > 0)
    XCOLL_WARN("tcp: rank %d dropped %lu more unauthenticated connection(s) "
               "during startup",
               st->rank, unlogged);
  return s;
}

xcoll_status xcoll_tcp_connect_mesh(tcp_state *st) {
  xcoll_comm *comm = st->comm;
  xcoll_status s = xcoll_auth_init();
  if (s != XCOLL_SUCCESS) return xcoll_error_adopt(comm, s);
  s = start_listening(st);
  if (s != XCOLL_SUCCESS) return s;
  if (st->world_size == 1) return XCOLL_SUCCESS;

  /* Every rank's "host:port", NUL-padded to TCP_ADDR_BYTES, in rank order. */
  char(*addrs)[TCP_ADDR_BYTES] = calloc((size_t)st->world_size, TCP_ADDR_BYTES);
  if (addrs == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "tcp: no memory for %d addresses", st->world_size);
  snprintf(addrs[st->rank], TCP_ADDR_BYTES, "%s", st->my_addr);
  s = xcoll_bootstrap_allgather(comm, "tcp-addr", addrs[st->rank],
                                TCP_ADDR_BYTES, addrs);
  for (int p = 0; p < st->world_size && s == XCOLL_SUCCESS; p++) {
    if (p == st->rank) continue;
    if (memchr(addrs[p], '\0', TCP_ADDR_BYTES) == NULL || addrs[p][0] == '\0')
      s = xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                      "tcp: rank %d's published address is not a host:port "
                      "string",
                      p);
    else
      memcpy(st->peers[p].addr, addrs[p], TCP_ADDR_BYTES);
  }
  free(addrs);
  if (s != XCOLL_SUCCESS) return s;

  mesh m = {.st = st,
            .expected = st->nsockets,
            .deadline = xcoll_tcp_now() + st->timeout_s};
  m.capacity = (st->world_size - 1 - st->rank) * st->nsocks +
               MESH_MAX_PENDING_STRANGERS + st->rank * st->nsocks;
  m.links = calloc((size_t)m.capacity, sizeof *m.links);
  if (!m.links)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "tcp: out of memory for %d startup connections",
                       m.capacity);
  for (int k = 0; k < m.capacity; k++) m.links[k].fd = -1;
  s = mesh_connect_up(&m);
  if (s == XCOLL_SUCCESS) s = mesh_run(&m);
  for (int k = 0; k < m.capacity; k++) link_drop(&m.links[k]);
  free(m.links);
  if (s != XCOLL_SUCCESS) return s;

  for (int k = 0; k < st->nsockets; k++) tune_socket(st->sockets[k].fd);
  close(st->listen_fd);
  st->listen_fd = -1;
  if (xcoll_log_level_get() >= XCOLL_LOG_INFO) {
    for (int p = 0; p < st->world_size; p++) {
      if (p == st->rank) continue;
      struct sockaddr_storage local;
      socklen_t len = sizeof local;
      memset(&local, 0, sizeof local);
      getsockname(st->peers[p].socks[0].fd, (struct sockaddr *)&local, &len);
      XCOLL_INFO("tcp: comm %" PRIu64 " rank %d <-> rank %d at %s: %d "
                 "socket(s), first local port %d, %s",
                 st->comm_id, st->rank, p, st->peers[p].addr, st->nsocks,
                 ntohs(local.ss_family == AF_INET6
                           ? ((struct sockaddr_in6 *)&local)->sin6_port
                           : ((struct sockaddr_in *)&local)->sin_port),
                 p > st->rank ? "we connected" : "it connected");
    }
  }
  return XCOLL_SUCCESS;
}

/* close() on a socket with unread bytes sends RST instead of FIN, and a RST
 * makes the peer's kernel drop what it has not read yet: the ABORT or BYE we
 * just sent would be lost, and the peer would blame this rank for a failure
 * that started elsewhere. So: send FIN first (SHUT_WR), then read and discard
 * until each peer closes too. A broken communicator waits for that up to
 * TCP_CLOSE_DRAIN_S (peers stop sending once they read our ABORT); a clean
 * one only discards what is already there. */
#define TCP_CLOSE_DRAIN_S 1.0
static void drain_before_close(tcp_state *st) {
  struct pollfd *pfds = calloc((size_t)st->nsockets, sizeof *pfds);
  if (!pfds) return;
  for (int k = 0; k < st->nsockets; k++) {
    pfds[k].fd = st->sockets[k].fd;
    pfds[k].events = POLLIN;
    if (pfds[k].fd >= 0) (void)shutdown(pfds[k].fd, SHUT_WR);
  }
  double deadline = xcoll_tcp_now() + (st->broken ? TCP_CLOSE_DRAIN_S : 0.0);
  char sink[65536];
  for (;;) {
    int open_sockets = 0;
    for (int k = 0; k < st->nsockets; k++) {
      if (pfds[k].fd < 0) continue;
      ssize_t r;
      while ((r = recv(pfds[k].fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        pfds[k].fd = -1; /* EOF or reset: nothing more will come */
      else
        open_sockets++;
    }
    double left = deadline - xcoll_tcp_now();
    if (open_sockets == 0 || left <= 0) break;
    (void)poll(pfds, (nfds_t)st->nsockets, (int)(left * 1000.0) + 1);
  }
  free(pfds);
}

void xcoll_tcp_close_sockets(tcp_state *st) {
  if (!st->sockets) { /* its allocation failed: only the listener exists */
    if (st->listen_fd >= 0) close(st->listen_fd);
    st->listen_fd = -1;
    return;
  }
  if (!st->broken) {
    /* BYE tells peers that the EOF which follows is a normal close, not a
     * crash. Only at a message boundary: mid-message it would corrupt the
     * stream, and then the EOF is an error anyway. */
    uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
    xcoll_wire_header h =
        xcoll_wire_make(XCOLL_WIRE_BYE, st->comm_id, 0, 0, st->rank);
    xcoll_wire_encode(&h, bytes);
    for (int k = 0; k < st->nsockets; k++) {
      tcp_socket *s = &st->sockets[k];
      if (s->fd >= 0 && !s->tx_head && !s->tx_broken)
        (void)send(s->fd, bytes, sizeof bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  drain_before_close(st);
  for (int k = 0; k < st->nsockets; k++) {
    if (st->sockets[k].fd >= 0) close(st->sockets[k].fd);
    st->sockets[k].fd = -1;
  }
  if (st->listen_fd >= 0) close(st->listen_fd);
  st->listen_fd = -1;
}
