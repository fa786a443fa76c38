/* socket_conn.c - the socket net plugin's connection set-up (the plugin is
 * net_socket.c): what both ends of a connection share (the host id, the
 * abstract Unix-domain address, XCOLL_SOCKET_UNIX, the authentication
 * context of core/auth.h) and the connect side's stage machine: for each
 * data socket, connect, the hello with its offer and hello tag, the
 * listener's answer and the client's proof, one non-blocking step per
 * call. socket_listen.c is the other end. docs/net-plugins.md, "Connection
 * set-up", describes the exchange. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "host.h"
#include "net.h"
#include "net_plugin_log.h"
#include "net_socket_wire.h"
#include "socket_internal.h"

/* Tries of a connect whose listener closed it before answering (shed under
 * a flood before its first message arrived; each try needs another 128
 * strangers to arrive in that moment), before the close is taken as the
 * listener's verdict. */
#define SOCK_SILENT_CLOSE_RETRIES 8
/* Pause between refused connection attempts (the listener may be slow to
 * drain its backlog), seconds. */
#define SOCK_RETRY_S 0.02

/* ---- small helpers ---- */

/* net_plugin_log.h keeps the log function per file: socket_init hands it
 * to this one too. */
void sock_conn_log_set(xcoll_net_log_fn log) { net_plugin_log_set(log); }

double sock_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sock_format_addr(const struct sockaddr_in *sa, char *out) {
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof ip);
  snprintf(out, SOCK_ADDR_BYTES, "%s:%d", ip, ntohs(sa->sin_port));
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
xcoll_status sock_read_unix(int *use) {
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
 * namespace), or sock_host_id_ok 0 when either cannot be read (then every
 * connection is TCP). */
pthread_once_t sock_host_once = PTHREAD_ONCE_INIT;
int sock_host_id_ok;
uint8_t sock_host_id[SOCK_HOST_ID_BYTES];

void sock_host_init(void) {
  sock_host_id_ok = xcoll_host_netns_id(sock_host_id);
}

/* The abstract Unix-domain address of the listener with this nonce. */
socklen_t sock_unix_address(uint64_t nonce, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  size_t n = sock_unix_name(nonce, sa->sun_path);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
}

/* ---- handle and hello: net_socket_wire.c ---- */

static xcoll_status decode_handle(const uint8_t *in, sock_handle *h) {
  char why[SOCK_MESSAGE_BYTES];
  if (sock_handle_decode(in, h, why, sizeof why) != NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT, "%s", why);
  return XCOLL_SUCCESS;
}

/* ---- authentication of each data socket (core/auth.h) ---- */

/* The context both sides put into the proofs: it names the connection, down
 * to the listener (its handle nonce) and the socket index, so that a proof
 * seen on one connection is worth nothing on any other of the same job. */
void sock_auth_context(uint64_t comm_id, int connector, int acceptor,
                       int index, uint64_t nonce, char *out) {
  snprintf(out, XCOLL_AUTH_CONTEXT_BYTES,
           "net socket comm=%" PRIu64 " ranks=%d>%d socket=%d listener=%016" PRIx64,
           comm_id, connector, acceptor, index, nonce);
}

/* Read the job's secret (once per process; xcoll_auth_reload reads again).
 * Errors: those of xcoll_auth_init, said again through the plugin's log. */
xcoll_status sock_auth_ready(void) {
  xcoll_status s = xcoll_auth_init();
  if (s != XCOLL_SUCCESS)
    return net_fail(s, "net socket: cannot read the job's secret: %s",
                xcoll_last_error());
  return XCOLL_SUCCESS;
}

double sock_timeout_of(const xcoll_net_config *config) {
  return config->timeout_s > 0 ? config->timeout_s : 1e9;
}

/* ---- connect ---- */

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
    sock_auth_context(config->comm_id, config->rank, k->peer_rank, i,
                      k->target.nonce, context);
    xcoll_auth_prove("hello", context, k->nonce_mine[i], no_nonce,
                     k->out[i] + SOCK_HELLO_BYTES + XCOLL_AUTH_OFFER_BYTES);
    struct sockaddr_un ua;
    socklen_t ulen = sock_unix_address(k->target.nonce, &ua);
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
    sock_auth_context(config->comm_id, config->rank, k->peer_rank, i,
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
                config->rank, k->peer_rank, k->who, sock_timeout_of(config),
                strerror(err), k->peer_rank);
  k->retry_at[i] = now + SOCK_RETRY_S;
  return XCOLL_SUCCESS;
}
}

xcoll_status socket_connect(int device, const xcoll_net_config *config,
                            const void *handle, int peer_rank,
                            xcoll_net_send_comm **send_comm) {
  if (send_comm != NULL) *send_comm = NULL;
  xcoll_status s = sock_check_device(device);
  if (s != XCOLL_SUCCESS) return s;
  if (config == NULL || handle == NULL || send_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                "net socket: connect with a NULL config, handle or send_comm");
  sock_handle target;
  int use_unix;
  if ((s = decode_handle(handle, &target)) != XCOLL_SUCCESS) return s;
  if ((s = sock_read_unix(&use_unix)) != XCOLL_SUCCESS)
    return s;
  if ((s = sock_auth_ready()) != XCOLL_SUCCESS) return s;
  pthread_once(&sock_host_once, sock_host_init);

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
    k->over_unix = use_unix && sock_host_id_ok &&
                   (target.flags & SOCK_FLAG_UNIX) != 0 &&
                   memcmp(target.host_id, sock_host_id,
                          SOCK_HOST_ID_BYTES) == 0;
    sock_format_addr(&target.addr, k->who);
    if (k->over_unix)
      snprintf(k->who + strlen(k->who), SOCK_ADDR_BYTES - strlen(k->who),
               " (unix)");
    for (int i = 0; i < SOCK_MAX_NSOCKS; i++) k->fds[i] = -1;
    k->deadline = sock_now_s() + sock_timeout_of(config);
    k->next = connecting_list;
    connecting_list = k;
  }
  pthread_mutex_unlock(&connecting_lock);

  double now = sock_now_s();
  int done = 0;
  for (int i = 0; i < target.nsocks && s == XCOLL_SUCCESS; i++) {
    s = connect_step(k, config, i, now);
    done += k->stage[i] == CONN_DONE;
  }
  if (s == XCOLL_SUCCESS && done < target.nsocks && now >= k->deadline)
    s = net_fail(XCOLL_ERR_TIMEOUT,
             "net socket: rank %d's connection to rank %d at %s made no "
             "progress in %.1f s",
             config->rank, peer_rank, k->who, sock_timeout_of(config));
  if (s != XCOLL_SUCCESS) {
    connecting_remove(k);
    connecting_free(k);
    return s;
  }
  if (done < target.nsocks) return XCOLL_SUCCESS; /* call again */
  sock_comm *c = sock_comm_new(1, target.nsocks, k->fds, peer_rank, k->who);
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

