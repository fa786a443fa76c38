/* store_server.c - the rendezvous store's server (store.h): a key-value
 * server that runs on rank 0 in a background thread. This file holds the
 * thread, its connections and their admission; the table and the requests
 * are store_requests.c's (store_server.h).
 *
 * One thread polls the listening socket, every client socket and a wake-up
 * eventfd. Each connection first runs the job secret's exchange (auth.h),
 * then sends requests (store_codec.h), each handed to store_server_handle
 * once read whole.
 *
 * Strangers (docs/security.md, "Strangers cannot starve a listener";
 * core/stranger.h): a connection is read at accept, and its first message
 * (offer and hello tag, auth.h) vouches for it; one that has not
 * authenticated within XCOLL_STRANGER_DEADLINE_S of its accept is closed;
 * unvouched ones are bounded per listener and per peer address, and past a
 * bound the oldest is read one last time and closed, never a vouched one.
 * Drops of unauthenticated connections are a WARN at most once a second
 * with a count, and the thread's log never blocks it
 * (xcoll_log_never_block). */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_BOOTSTRAP /* log.h */
#include "store_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "params.h"
#include "error.h"
#include "log.h"

/* XCOLL_STORE_MAX_BYTES (default 256M in core/params.c) bounds the keys and
 * values held plus requests being read. Bootstrap needs kilobytes per rank;
 * the default leaves room for thousands of ranks and user keys while a
 * runaway or hostile client cannot take the host's memory. */
/* How long accept() rests after EMFILE/ENFILE, with no unauthenticated
 * connection left to close, before it tries again. */
#define STORE_ACCEPT_BACKOFF_S 0.1
/* Connections that have not sent a valid first message (offer and hello
 * tag) held at once, and how many of them may come from one peer address.
 * A rank's first message is there when the store accepts its connection
 * (it is sent as the connect completes), so a rank is vouched for at once
 * and these bound only strangers: a flood costs rank 0 at most this many
 * descriptors. As the tcp mesh's (backends/tcp/tcp_connect.c). */
#define STORE_MAX_PENDING 256
#define STORE_MAX_PENDING_PER_ADDRESS 128
/* Connections accepted in one poll round, so that a flood of connects
 * cannot keep the thread from serving the ranks already connected. */
#define STORE_ACCEPTS_PER_ROUND 64
/* When the job has failed (a rank vanished, or rank 0's communicator broke:
 * xcoll_store_server_stop_failed) and rank 0 stops its server, the server
 * stays this long, or until every joined rank has gone, so that ranks whose
 * requests are still on their way hear why instead of seeing the store
 * vanish: a failure notice one rank is still publishing to the others
 * (backends/nccl_like/failure.c) reaches them. */
#define STORE_FAILURE_LINGER_S 2.0

static void client_free(xcoll_store_server *s, store_client *c) {
  if (c->fd >= 0)
    close(c->fd);
  if (c->payload)
    s->reading_bytes -= c->payload_bytes;
  free(c->discard_why);
  free(c->payload);
  free(c->parked_payload);
  free(c->out);
  free(c);
}

/* How long a rank's handshake took, for XCOLL_STRANGER_DEADLINE_S's
 * margin (core/stranger.h). */
static void client_note_authenticated(const store_client *c) {
  XCOLL_TRACE("rendezvous store: %s authenticated: first message %.3f ms, "
              "proof %.3f ms after its accept",
              c->peer, (c->vouched_at - c->since) * 1e3,
              (store_now_s() - c->since) * 1e3);
}

/* A whole first message (offer and hello tag) or proof is in c->auth_buf:
 * answer or verify it. A client that fails is dropped, naming its address;
 * the server goes on. */
static void client_auth_step(store_client *c) {
  char why[256];
  if (c->auth_stage == AUTH_WAIT_OFFER) {
    int bad = xcoll_auth_parse_offer(c->auth_buf, c->client_nonce, why,
                                     sizeof why) != 0;
    /* A foreign offer gets nothing; a mismatched one (secret against none)
     * or a wrong hello tag gets our offer and proof first, so that a rank
     * with another secret, or none, can say what is wrong. */
    if (bad && memcmp(c->auth_buf, "XCA1", 4) != 0) {
      store_client_drop(c, why);
      return;
    }
    if (!bad &&
        !xcoll_auth_hello_tag_ok(STORE_AUTH_CONTEXT, c->client_nonce,
                                 c->auth_buf + XCOLL_AUTH_OFFER_BYTES)) {
      bad = 1;
      snprintf(why, sizeof why,
               "its hello tag is wrong: it does not know this job's secret "
               "(XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE)");
    }
    c->vouched = !bad;
    c->vouched_at = store_now_s();
    unsigned char answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
    xcoll_auth_offer(answer, c->server_nonce);
    xcoll_auth_prove("server", STORE_AUTH_CONTEXT, c->client_nonce,
                     c->server_nonce, answer + XCOLL_AUTH_OFFER_BYTES);
    /* queued raw: the reply path adds store headers, this is not a reply */
    if (c->out_capacity < sizeof answer) {
      unsigned char *out = realloc(c->out, 256);
      if (!out) {
        store_client_drop(c, "out of memory for the authentication answer");
        return;
      }
      c->out = out;
      c->out_capacity = 256;
    }
    memcpy(c->out, answer, sizeof answer);
    c->out_bytes = sizeof answer;
    c->out_sent = 0;
    store_client_flush(c);
    if (bad) {
      store_client_drop(c, why);
      return;
    }
    c->auth_stage = xcoll_auth_enabled() ? AUTH_WAIT_PROOF : AUTH_DONE;
    c->auth_have = 0;
    if (c->auth_stage == AUTH_DONE)
      client_note_authenticated(c);
    return;
  }
  if (!xcoll_auth_verify("client", STORE_AUTH_CONTEXT, c->client_nonce,
                         c->server_nonce, c->auth_buf)) {
    store_client_drop(c, "authentication failed: it does not know this job's "
                   "secret (XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE)");
    return;
  }
  c->auth_stage = AUTH_DONE;
  client_note_authenticated(c);
}

/* Read the authentication exchange's bytes. 1 when requests may follow. */
static int client_read_auth(store_client *c) {
  while (!c->dead && c->auth_stage != AUTH_DONE) {
    size_t need = c->auth_stage == AUTH_WAIT_OFFER ? XCOLL_AUTH_FIRST_BYTES
                                                   : XCOLL_AUTH_PROOF_BYTES;
    ssize_t n = recv(c->fd, c->auth_buf + c->auth_have, need - c->auth_have, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0) {
      /* connect+close (a port scan) is not worth a warning */
      if (c->auth_have || c->auth_stage != AUTH_WAIT_OFFER)
        store_client_drop(c, n < 0 ? strerror(errno)
                             : "closed during authentication");
      c->dead = 1;
      return 0;
    }
    c->auth_have += (size_t)n;
    if (c->auth_have == need)
      client_auth_step(c);
  }
  return !c->dead;
}

/* Read what the socket has; handle every message completed. */
static void client_read(xcoll_store_server *s, store_client *c) {
  if (!client_read_auth(c))
    return;
  for (;;) {
    if (c->dead)
      return;
    unsigned char *dst;
    size_t want;
    unsigned char sink[4096];
    if (c->discard_left) {
      dst = sink;
      want = c->discard_left < sizeof sink ? c->discard_left : sizeof sink;
    } else if (c->header_have < STORE_HEADER_BYTES) {
      dst = c->header_buf + c->header_have;
      want = STORE_HEADER_BYTES - c->header_have;
    } else {
      dst = c->payload + c->payload_have;
      want = c->payload_bytes - c->payload_have;
    }
    ssize_t n = want ? recv(c->fd, dst, want, 0) : 0;
    if (want && n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      store_client_drop(c, strerror(errno));
      return;
    }
    if (want && n == 0) {
      c->dead = 1; /* an orderly close: nothing to warn about */
      return;
    }
    if (c->discard_left) {
      c->discard_left -= (size_t)n;
      if (c->discard_left == 0) {
        c->header_have = 0;
        store_client_reply_error(c, c->discard_why);
        free(c->discard_why);
        c->discard_why = NULL;
      }
      continue;
    }
    if (c->header_have < STORE_HEADER_BYTES) {
      c->header_have += (size_t)n;
      if (c->header_have < STORE_HEADER_BYTES)
        continue;
      store_header_decode(c->header_buf, &c->header);
      const char *why = store_request_check(&c->header);
      if (why) {
        store_client_drop(c, why);
        return;
      }
      c->payload_bytes = (size_t)c->header.key_bytes + c->header.value_bytes;
      c->payload_have = 0;
      if (s->table.bytes + s->reading_bytes + c->payload_bytes > s->max_bytes) {
        char reason[256];
        snprintf(reason, sizeof reason,
                 "the store holds %zu bytes and this request carries %zu "
                 "more, over XCOLL_STORE_MAX_BYTES=%zu (set it higher on "
                 "rank 0 if the job needs more)",
                 s->table.bytes, c->payload_bytes, s->max_bytes);
        XCOLL_WARN("rendezvous store: refusing a request from %s: %s",
                   c->peer, reason);
        c->discard_why = strdup(reason);
        c->discard_left = c->payload_bytes;
        if (!c->discard_why) {
          store_client_drop(c, "out of memory");
          return;
        }
        if (c->discard_left == 0) {
          c->header_have = 0;
          store_client_reply_error(c, c->discard_why);
          free(c->discard_why);
          c->discard_why = NULL;
        }
        continue;
      }
      s->reading_bytes += c->payload_bytes;
      /* one spare byte so that an empty payload still gets a buffer */
      c->payload = malloc(c->payload_bytes + 1);
      if (!c->payload) {
        store_client_drop(c, "out of memory for a request");
        return;
      }
    } else {
      c->payload_have += (size_t)n;
    }
    if (c->payload_have == c->payload_bytes) {
      unsigned char *payload = c->payload;
      c->payload = NULL;
      s->reading_bytes -= c->payload_bytes;
      c->header_have = 0;
      store_server_handle(s, c, c->header.kind, payload, c->header.key_bytes,
                    c->header.value_bytes);
    }
  }
}

/* The peer address of an accepted connection as 16 bytes (IPv4, also an
 * IPv4-mapped IPv6 address, in the first 4), for the per-address bound. */
static void origin_of(const struct sockaddr_storage *from, uint8_t out[16]) {
  memset(out, 0, 16);
  if (from->ss_family == AF_INET6) {
    const uint8_t *a = ((const struct sockaddr_in6 *)from)->sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a, mapped, sizeof mapped) == 0)
      memcpy(out, a + 12, 4);
    else
      memcpy(out, a, 16);
  } else if (from->ss_family == AF_INET) {
    memcpy(out, &((const struct sockaddr_in *)from)->sin_addr, 4);
  }
}

/* A live connection whose first message has not vouched for it. */
static int is_stranger(const store_client *c) {
  return !c->dead && !c->vouched && c->auth_stage == AUTH_WAIT_OFFER;
}

/* Close c's descriptor now rather than at the end of the poll round (it is
 * dead already): a flood must not hold descriptors until then. */
static void client_close_now(store_client *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->dead = 1;
}

/* Strangers in the table (from origin only, when not NULL). */
static size_t count_strangers(const xcoll_store_server *s,
                              const uint8_t *origin) {
  size_t n = 0;
  for (size_t i = 0; i < s->client_count; i++) {
    const store_client *c = s->clients[i];
    if (is_stranger(c) &&
        (!origin || memcmp(c->origin, origin, sizeof c->origin) == 0))
      n++;
  }
  return n;
}

/* Close the oldest stranger (from origin only, when not NULL) after one
 * last read of what it sent: a rank whose first message has just arrived
 * is vouched for by that read and kept. Returns 1 when one was closed. */
static int shed_oldest_stranger(xcoll_store_server *s, const uint8_t *origin,
                                const char *why) {
  for (;;) {
    store_client *oldest = NULL;
    for (size_t i = 0; i < s->client_count; i++) {
      store_client *c = s->clients[i];
      if (!is_stranger(c) ||
          (origin && memcmp(c->origin, origin, sizeof c->origin) != 0))
        continue;
      if (!oldest || c->since < oldest->since)
        oldest = c;
    }
    if (!oldest)
      return 0;
    client_read(s, oldest);
    if (!oldest->dead && oldest->vouched)
      continue; /* a rank after all: keep it */
    store_client_drop(oldest, why);
    client_close_now(oldest);
    return 1;
  }
}

/* Close every connection that has not authenticated within
 * XCOLL_STRANGER_DEADLINE_S of its accept (after one last read). Returns
 * the seconds until the next such deadline, or -1 when none is pending. */
static double shed_late_connections(xcoll_store_server *s) {
  double now = store_now_s(), next = -1;
  for (size_t i = 0; i < s->client_count; i++) {
    store_client *c = s->clients[i];
    if (c->dead || c->auth_stage == AUTH_DONE)
      continue;
    double left = c->since + XCOLL_STRANGER_DEADLINE_S - now;
    if (left <= 0) {
      client_read(s, c);
      if (c->dead || c->auth_stage == AUTH_DONE)
        continue;
      char why[96];
      snprintf(why, sizeof why, "it did not authenticate within %.1f s",
               XCOLL_STRANGER_DEADLINE_S);
      store_client_drop(c, why);
      client_close_now(c);
    } else if (next < 0 || left < next) {
      next = left;
    }
  }
  return next;
}

/* Accept what the listener has (at most STORE_ACCEPTS_PER_ROUND), and read
 * each new connection at once: a rank's first message is usually there
 * already, and then it is vouched for before anything is shed. */
static void server_accept(xcoll_store_server *s) {
  for (int accepted = 0; accepted < STORE_ACCEPTS_PER_ROUND; accepted++) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        /* Out of descriptors: close a stranger and try again. With none to
         * close, the pending connection stays in the backlog and poll()
         * would report it again at once: rest instead of spinning. */
        char why[128];
        snprintf(why, sizeof why,
                 "accept: %s; closing the oldest unauthenticated connection",
                 strerror(errno));
        if (shed_oldest_stranger(s, NULL, why))
          continue;
        unsigned long also = 0;
        if (xcoll_drop_tally_note(&s->drops, store_now_s(), &also))
          XCOLL_WARN("rendezvous store: accept on port %d: %s, and no "
                     "unauthenticated connection to close; pausing accepts "
                     "for %.0f ms at a time (raise ulimit -n?)",
                     s->port, strerror(errno), STORE_ACCEPT_BACKOFF_S * 1e3);
        s->accept_resume = store_now_s() + STORE_ACCEPT_BACKOFF_S;
        return;
      }
      s->accept_resume = 0;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        XCOLL_WARN("rendezvous store: accept on port %d failed: %s", s->port,
                   strerror(errno));
      return;
    }
    s->accept_resume = 0;
    uint8_t origin[16];
    origin_of(&sa, origin);
    if (count_strangers(s, origin) >= STORE_MAX_PENDING_PER_ADDRESS)
      shed_oldest_stranger(s, origin,
                           "too many unauthenticated connections from its "
                           "address");
    if (count_strangers(s, NULL) >= STORE_MAX_PENDING)
      shed_oldest_stranger(s, NULL, "too many unauthenticated connections");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (s->client_count == s->client_capacity) {
      size_t capacity = s->client_capacity ? 2 * s->client_capacity : 16;
      store_client **grown = realloc(s->clients, capacity * sizeof *grown);
      if (grown) {
        s->clients = grown;
        s->client_capacity = capacity;
      }
    }
    store_client *c =
        s->client_count < s->client_capacity ? calloc(1, sizeof *c) : NULL;
    if (!c) {
      XCOLL_WARN("rendezvous store: out of memory accepting a connection");
      close(fd);
      continue;
    }
    c->server = s;
    c->fd = fd;
    c->joined_rank = -1;
    c->since = store_now_s();
    memcpy(c->origin, origin, sizeof c->origin);
    char host[INET6_ADDRSTRLEN] = "?", serv[16] = "?";
    getnameinfo((struct sockaddr *)&sa, len, host, sizeof host, serv,
                sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->peer, sizeof c->peer, "%s:%s", host, serv);
    s->clients[s->client_count++] = c;
    client_read(s, c);
  }
}

static void *server_main(void *arg) {
  xcoll_store_server *s = arg;
  /* Every rank waits on this thread: a full stderr pipe must not stop it. */
  xcoll_log_never_block();
  for (;;) {
    if (s->linger_until > 0) {
      int joined = 0;
      for (size_t i = 0; i < s->client_count; i++)
        joined += s->clients[i]->joined_rank >= 0 && !s->clients[i]->left &&
                  !s->clients[i]->dead;
      if (joined == 0 || store_now_s() >= s->linger_until)
        break;
    }
    size_t need = s->client_count + 2;
    if (need > s->pollfd_capacity) {
      struct pollfd *grown = realloc(s->pollfds, need * 2 * sizeof *grown);
      if (!grown) {
        XCOLL_WARN("rendezvous store: out of memory; dropping a connection");
        s->clients[--s->client_count]->dead = 1;
        client_free(s, s->clients[s->client_count]);
        continue;
      }
      s->pollfds = grown;
      s->pollfd_capacity = need * 2;
    }
    s->pollfds[0] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
    int timeout_ms = -1;
    double next_deadline = shed_late_connections(s);
    if (next_deadline >= 0)
      timeout_ms = (int)(next_deadline * 1000.0) + 1;
    int resting = s->accept_resume > 0 && store_now_s() < s->accept_resume;
    if (resting) {
      int rest_ms = (int)((s->accept_resume - store_now_s()) * 1000.0) + 1;
      if (timeout_ms < 0 || rest_ms < timeout_ms)
        timeout_ms = rest_ms;
    }
    /* fd -1: poll skips the listener while accept() rests */
    s->pollfds[1] = (struct pollfd){.fd = resting ? -1 : s->listen_fd,
                                    .events = POLLIN};
    for (size_t i = 0; i < s->client_count; i++) {
      store_client *c = s->clients[i];
      s->pollfds[i + 2] = (struct pollfd){
          .fd = c->dead ? -1 : c->fd,
          .events =
              (short)(POLLIN | (c->out_bytes > c->out_sent ? POLLOUT : 0))};
    }
    size_t polled = s->client_count;
    if (s->linger_until > 0 && (timeout_ms < 0 || timeout_ms > 100))
      timeout_ms = 100;
    int ready = poll(s->pollfds, (nfds_t)(polled + 2), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR)
        continue;
      XCOLL_WARN("rendezvous store: poll failed: %s", strerror(errno));
      break;
    }
    if (s->pollfds[0].revents) { /* only stop writes to the eventfd */
      if (!s->failure[0] && !atomic_load(&s->job_failed))
        break;
      uint64_t drained;
      if (read(s->wake_fd, &drained, sizeof drained) < 0) { /* empty */
      }
      if (s->linger_until == 0)
        s->linger_until = store_now_s() + STORE_FAILURE_LINGER_S;
    }
    /* Clients accepted below are appended after the polled ones. */
    for (size_t i = 0; i < polled; i++) {
      store_client *c = s->clients[i];
      short rev = s->pollfds[i + 2].revents;
      if (rev & POLLOUT)
        store_client_flush(c);
      if (rev & (POLLIN | POLLHUP | POLLERR))
        client_read(s, c);
      if (rev & POLLNVAL)
        c->dead = 1;
    }
    if (s->pollfds[1].revents & POLLIN)
      server_accept(s);
    else if (s->accept_resume > 0 && store_now_s() >= s->accept_resume)
      server_accept(s); /* rested: try the backlog again */
    size_t kept = 0;
    for (size_t i = 0; i < s->client_count; i++)
      if (s->clients[i]->dead)
        store_server_note_departure(s, s->clients[i]);
    for (size_t i = 0; i < s->client_count; i++) {
      if (s->clients[i]->dead)
        client_free(s, s->clients[i]);
      else
        s->clients[kept++] = s->clients[i];
    }
    s->client_count = kept;
  }
  unsigned long unlogged = xcoll_drop_tally_flush(&s->drops);
  if (unlogged > 0)
    XCOLL_WARN("rendezvous store: closed %lu more unauthenticated "
               "connection(s) before it stopped",
               unlogged);
  return NULL;
}

xcoll_status xcoll_store_server_start(const char *addr, int port,
                                      xcoll_store_server **server,
                                      int *bound_port) {
  if (!server)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_server_start: server is NULL");
  *server = NULL;
  xcoll_status auth_status = xcoll_auth_init();
  if (auth_status != XCOLL_SUCCESS)
    return auth_status;
  size_t max_bytes = 0;
  /* At least 1M (core/params.c): the job's own rendezvous keys must fit. */
  auth_status = xcoll_param_size("XCOLL_STORE_MAX_BYTES", 0, &max_bytes);
  if (auth_status != XCOLL_SUCCESS)
    return auth_status;
  /* XCOLL_STORE_BIND overrides where the server listens ("0.0.0.0", "::" or
   * "*" for every interface). */
  const char *bind_override = xcoll_env_str("XCOLL_STORE_BIND");
  if (bind_override) {
    int any = strcmp(bind_override, "*") == 0 ||
              strcmp(bind_override, "0.0.0.0") == 0 ||
              strcmp(bind_override, "::") == 0;
    addr = any ? NULL : bind_override;
  }
  if (port < 0 || port > 65535)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "rendezvous store port %d is out of range: use 0..65535 "
                       "(0 picks a free port)",
                       port);
  int wildcard = !addr || !*addr;
  const char *shown = wildcard ? "*" : addr;
  int fd = -1, err = 0;
  if (wildcard) {
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t)port),
                               .sin6_addr = IN6ADDR_ANY_INIT};
    fd = xcoll_socket_listen((struct sockaddr *)&sa6, sizeof sa6, 1024);
    if (fd < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL)) {
      struct sockaddr_in sa4 = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_ANY)};
      fd = xcoll_socket_listen((struct sockaddr *)&sa4, sizeof sa4, 1024);
    }
    err = errno;
  } else {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int rc = getaddrinfo(addr, service, &hints, &list);
    if (rc != 0)
      return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                         "could not resolve the rendezvous store address '%s' "
                         "(port %d): %s",
                         addr, port, gai_strerror(rc));
    err = EADDRNOTAVAIL;
    for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next) {
      fd = xcoll_socket_listen(ai->ai_addr, ai->ai_addrlen, 1024);
      if (fd < 0)
        err = errno;
    }
    freeaddrinfo(list);
  }
  if (fd < 0)
    return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                       "could not listen on %s:%d for the rendezvous store: "
                       "%s%s",
                       shown, port, strerror(err),
                       err == EADDRINUSE
                           ? " (another process, perhaps an earlier run, holds "
                             "this port: pick another MASTER_PORT, or 0 in "
                             "xcollrun for a free one)"
                       : err == EADDRNOTAVAIL
                           ? " (the store binds to the address MASTER_ADDR "
                             "resolves to, and it is not one of this host's: "
                             "set XCOLL_STORE_BIND to a local address, or "
                             "0.0.0.0 for every interface)"
                           : "");

  struct sockaddr_storage bound;
  socklen_t bound_len = sizeof bound;
  int actual_port = port;
  if (getsockname(fd, (struct sockaddr *)&bound, &bound_len) == 0)
    actual_port = ntohs(bound.ss_family == AF_INET6
                            ? ((struct sockaddr_in6 *)&bound)->sin6_port
                            : ((struct sockaddr_in *)&bound)->sin_port);

  xcoll_store_server *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                       "out of memory starting the rendezvous store");
  }
  s->listen_fd = fd;
  s->port = actual_port;
  s->max_bytes = max_bytes;
  snprintf(s->addr, sizeof s->addr, "%s", shown);
  s->table.bucket_count = 256;
  s->table.buckets = calloc(s->table.bucket_count, sizeof *s->table.buckets);
  s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!s->table.buckets || s->wake_fd < 0) {
    int saved = errno;
    if (s->wake_fd >= 0)
      close(s->wake_fd);
    free(s->table.buckets);
    free(s);
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                       "could not set up the rendezvous store on %s:%d: %s",
                       shown, actual_port, strerror(saved));
  }
  /* The server thread takes no signals: they belong to the application. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&s->thread, NULL, server_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    close(s->wake_fd);
    free(s->table.buckets);
    free(s);
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                       "could not start the rendezvous store thread for "
                       "%s:%d: %s",
                       shown, actual_port, strerror(rc));
  }
  XCOLL_INFO("rendezvous store listening on %s:%d", shown, actual_port);
  *server = s;
  if (bound_port)
    *bound_port = actual_port;
  return XCOLL_SUCCESS;
}

void xcoll_store_server_stop_failed(xcoll_store_server *s) {
  if (!s)
    return;
  atomic_store(&s->job_failed, 1);
  xcoll_store_server_stop(s);
}

void xcoll_store_server_stop(xcoll_store_server *s) {
  if (!s)
    return;
  atomic_store(&s->stopping, 1);
  uint64_t one = 1;
  while (write(s->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
  pthread_join(s->thread, NULL);
  for (size_t i = 0; i < s->client_count; i++)
    client_free(s, s->clients[i]);
  free(s->clients);
  free(s->pollfds);
  free(s->departed);
  store_table_free(&s->table);
  close(s->listen_fd);
  close(s->wake_fd);
  free(s);
}

