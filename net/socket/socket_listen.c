/* socket_listen.c - the socket net plugin's listening end (the plugin is
 * net_socket.c): listen, on TCP and on the abstract Unix-domain name of its
 * nonce, and accept's stage machine for incoming connections: the hello,
 * the offer and hello tag, the answer and the client's proof, with the
 * bounds that keep strangers (connections without a valid first message)
 * from crowding out a rank. socket_conn.c is the other end.
 * docs/net-plugins.md, "Connection set-up", describes the exchange, and
 * docs/security.md the bounds. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "auth.h"
#include "net.h"
#include "net_plugin_log.h"
#include "net_socket_wire.h"
#include "netaddr.h"
#include "socket_internal.h"
#include "stranger.h"

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

/* net_plugin_log.h keeps the log function per file: socket_init hands it
 * to this one too. */
void sock_listen_log_set(xcoll_net_log_fn log) { net_plugin_log_set(log); }

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

/* ---- listen and accept ---- */


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

xcoll_status socket_listen(int device, const xcoll_net_config *config,
                           void *handle,
                           xcoll_net_listen_comm **listen_comm) {
  if (listen_comm != NULL) *listen_comm = NULL;
  xcoll_status s = sock_check_device(device);
  if (s != XCOLL_SUCCESS) return s;
  if (config == NULL || handle == NULL || listen_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: listen with a NULL config, handle or listen_comm");
  int nsocks, use_unix;
  if ((s = read_nsocks(&nsocks)) != XCOLL_SUCCESS) return s;
  if ((s = sock_read_unix(&use_unix)) != XCOLL_SUCCESS)
    return s;
  if ((s = sock_auth_ready()) != XCOLL_SUCCESS) return s;
  pthread_once(&sock_host_once, sock_host_init);
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
    l->nonce = (uint64_t)(sock_now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
  }
  l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr = sock_device_addr.bind_addr;
  socklen_t len = sizeof sa;
  if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(l->fd, 256) != 0 ||
      getsockname(l->fd, (struct sockaddr *)&sa, &len) != 0) {
    int err = errno;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sock_device_addr.bind_addr, ip, sizeof ip);
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
  h.addr.sin_addr = sock_device_addr.publish_addr;
  h.addr.sin_port = sa.sin_port;
  h.nsocks = nsocks;
  h.nonce = l->nonce;
  sock_format_addr(&h.addr, l->addr);
  if (use_unix && sock_host_id_ok) {
    /* The same listener, for this host's ranks: an abstract name vanishes
     * with its socket, so a killed rank leaves no file behind. */
    struct sockaddr_un ua;
    socklen_t ulen = sock_unix_address(l->nonce, &ua);
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
      memcpy(h.host_id, sock_host_id, SOCK_HOST_ID_BYTES);
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

/* Log a dropped incoming connection: a WARN at most once a second, with a
 * count of the drops in between, so that strangers do not decide how much
 * a rank warns; every drop is an INFO line. */
static void log_drop(sock_listen *l, const char *who, const char *why) {
  unsigned long also = 0;
  if (!xcoll_drop_tally_note(&l->drops, sock_now_s(), &also))
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
               what, sock_timeout_of(&l->config));
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
      sock_auth_context(l->config.comm_id, claimed, l->config.rank, p->index,
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
      p->deadline = now + sock_timeout_of(&l->config);
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
    sock_auth_context(l->config.comm_id, expected_rank, l->config.rank,
                      p->index, l->nonce, context);
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
    sock_auth_context(l->config.comm_id, expected_rank, l->config.rank,
                      p->index, l->nonce, context);
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

xcoll_status socket_accept(xcoll_net_listen_comm *listen_comm,
                           int expected_rank,
                           xcoll_net_recv_comm **recv_comm) {
  if (recv_comm != NULL) *recv_comm = NULL;
  sock_listen *l = (sock_listen *)listen_comm;
  if (l == NULL || recv_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: accept with a NULL listen_comm or recv_comm");
  double now = sock_now_s();
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
        inet_ntop(AF_INET, &sock_device_addr.publish_addr, ip, sizeof ip);
        snprintf(who, sizeof who, "%s (unix)", ip);
        origin = (uint64_t)1 << 32;
      } else {
        sock_format_addr((const struct sockaddr_in *)&from, who);
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
      sock_comm_new(0, l->nsocks, l->forming, expected_rank, l->forming_who);
  if (c == NULL)
    return net_fail(XCOLL_ERR_NO_MEMORY, "net socket: no memory for a recv comm");
  for (int i = 0; i < SOCK_MAX_NSOCKS; i++) l->forming[i] = -1;
  l->formed = 0;
  net_info("net socket: rank %d accepted rank %d from %s on %s (%d socket(s))",
       l->config.rank, expected_rank, c->peer, l->addr, c->nsocks);
  *recv_comm = (xcoll_net_recv_comm *)c;
  return XCOLL_SUCCESS;
}

void socket_close_listen(xcoll_net_listen_comm *listen_comm) {
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
