/* store_client.c - the rendezvous store's blocking client (store.h), used
 * by every rank to publish and fetch addresses during bootstrap.
 *
 * One request at a time, each a header plus key plus value (store_codec.h),
 * then one reply; every read and write waits with poll() against a deadline
 * so that a dead or silent server is a timeout, not a hang. A request that
 * times out sends CANCEL, so the connection stays in step and can be reused.
 * The connection starts with the job secret's exchange (auth.h). */
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "env.h"
#include "error.h"
#include "log.h"
#include "socket.h"
#include "store_codec.h"

/* A reply to CANCEL may follow the late reply it cancels: allow this long. */
#define STORE_CANCEL_GRACE_S 10.0
/* Seconds the first connection to the store has to authenticate before it
 * is closed and a new one tried (xcoll_store_connect); doubles each try. A
 * whole exchange took at most 4.3 ms on a loaded 2-core machine
 * (core/stranger.h). */
#define STORE_AUTH_PATIENCE_S 1.0

static double now_s(void) { return xcoll_socket_now(); }

/* ------------------------------------------------------------------ */
/* Client                                                               */
/* ------------------------------------------------------------------ */

struct xcoll_store {
  int fd;
  int broken; /* the byte stream is out of step: every call fails */
  _Atomic int interrupted; /* xcoll_store_interrupt: fail quietly */
  char host[256];
  int port;
  double timeout_s;
  /* Set by xcoll_store_wrap_kv: requests go to the caller's store, fd is -1. */
  int is_kv;
  xcoll_kv_store kv;
};

enum io_result { IO_OK = 0, IO_TIMEOUT, IO_CLOSED, IO_ERROR };

/* Wait until fd is ready for events or the deadline passes. */
static enum io_result io_wait(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - now_s();
    if (left <= 0)
      return IO_TIMEOUT;
    int ms = left > 3600.0 ? 3600000 : (int)ceil(left * 1000.0);
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, ms);
    if (rc > 0)
      return IO_OK;
    if (rc < 0 && errno != EINTR)
      return IO_ERROR;
  }
}

static enum io_result send_all(int fd, const void *buf, size_t bytes,
                               double deadline) {
  const unsigned char *p = buf;
  while (bytes) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      enum io_result r = io_wait(fd, POLLOUT, deadline);
      if (r != IO_OK)
        return r;
    } else {
      return (n < 0 && errno != EPIPE && errno != ECONNRESET) ? IO_ERROR
                                                              : IO_CLOSED;
    }
  }
  return IO_OK;
}

static enum io_result recv_all(int fd, void *buf, size_t bytes,
                               double deadline) {
  unsigned char *p = buf;
  while (bytes) {
    ssize_t n = recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= (size_t)n;
    } else if (n == 0) {
      return IO_CLOSED;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      enum io_result r = io_wait(fd, POLLIN, deadline);
      if (r != IO_OK)
        return r;
    } else {
      return errno == ECONNRESET ? IO_CLOSED : IO_ERROR;
    }
  }
  return IO_OK;
}

static xcoll_status io_failure(xcoll_store *st, enum io_result r,
                               const char *what) {
  st->broken = 1;
  /* Shut down on purpose by another thread of this process: nothing to
   * report. */
  if (atomic_load(&st->interrupted))
    return XCOLL_ERR_ABORTED;
  if (r == IO_CLOSED)
    return xcoll_error(NULL, XCOLL_ERR_REMOTE,
                       "the rendezvous store at %s:%d closed the connection "
                       "during %s: did rank 0 exit or crash?",
                       st->host, st->port, what);
  if (r == IO_TIMEOUT)
    return xcoll_error(NULL, XCOLL_ERR_TIMEOUT,
                       "the rendezvous store at %s:%d did not take or answer "
                       "%s within %.1f s",
                       st->host, st->port, what, st->timeout_s);
  return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                     "talking to the rendezvous store at %s:%d during %s: %s",
                     st->host, st->port, what, strerror(errno));
}

/* Reads one reply, checking its header before allocating. On success
 * *value is malloc'd (at least one byte) and the caller frees it. */
static enum io_result read_reply(xcoll_store *st, double deadline,
                                 store_header *h, unsigned char **value,
                                 const char **bad) {
  unsigned char raw[STORE_HEADER_BYTES];
  *value = NULL;
  *bad = NULL;
  enum io_result r = recv_all(st->fd, raw, sizeof raw, deadline);
  if (r != IO_OK)
    return r;
  store_header_decode(raw, h);
  *bad = store_header_check(h);
  if (!*bad && h->key_bytes != 0)
    *bad = "reply with a key";
  if (!*bad && h->kind != STORE_REPLY_OK && h->kind != STORE_REPLY_CANCELLED &&
      h->kind != STORE_REPLY_ERROR && h->kind != STORE_REPLY_FAILED)
    *bad = "unknown reply kind";
  if (*bad)
    return IO_ERROR;
  *value = malloc((size_t)h->value_bytes + 1);
  if (!*value) {
    *bad = "out of memory for the reply";
    return IO_ERROR;
  }
  r = recv_all(st->fd, *value, h->value_bytes, deadline);
  if (r != IO_OK) {
    free(*value);
    *value = NULL;
    return r;
  }
  (*value)[h->value_bytes] = '\0';
  return IO_OK;
}

/* Sends one request and waits for its reply. On success *reply (malloc'd,
 * NUL-terminated) and *reply_bytes hold the reply's value. On a timeout it
 * returns XCOLL_ERR_TIMEOUT with no message recorded, so that the caller can
 * say what was missing; every other error is recorded here. what describes
 * the request for messages ("get of key 'x'"). */
static xcoll_status store_request(xcoll_store *st, uint16_t kind,
                                  const char *key, const void *value,
                                  size_t value_bytes, unsigned char **reply,
                                  size_t *reply_bytes, const char *what) {
  *reply = NULL;
  if (st->broken)
    return xcoll_error(NULL, XCOLL_ERR_REMOTE,
                       "the connection to the rendezvous store at %s:%d "
                       "failed earlier; connect again",
                       st->host, st->port);
  size_t key_bytes = key ? strlen(key) : 0;
  double deadline = now_s() + st->timeout_s;
  unsigned char raw[STORE_HEADER_BYTES];
  store_header h = {STORE_MAGIC, STORE_VERSION, kind, (uint32_t)key_bytes,
                    (uint32_t)value_bytes};
  store_header_encode(&h, raw);
  enum io_result r = send_all(st->fd, raw, sizeof raw, deadline);
  if (r == IO_OK && key_bytes)
    r = send_all(st->fd, key, key_bytes, deadline);
  if (r == IO_OK && value_bytes)
    r = send_all(st->fd, value, value_bytes, deadline);
  if (r != IO_OK)
    return io_failure(st, r, what);

  const char *bad = NULL;
  unsigned char *body = NULL;
  r = read_reply(st, deadline, &h, &body, &bad);
  int cancelled = 0;
  if (r == IO_TIMEOUT) {
    /* Withdraw the request so that the connection stays usable. The real
     * reply may already be on its way: then it comes first and wins. */
    unsigned char cancel[STORE_HEADER_BYTES];
    store_header ch = {STORE_MAGIC, STORE_VERSION, STORE_CANCEL, 0, 0};
    store_header_encode(&ch, cancel);
    double grace = now_s() + STORE_CANCEL_GRACE_S;
    r = send_all(st->fd, cancel, sizeof cancel, grace);
    if (r == IO_OK)
      r = read_reply(st, grace, &h, &body, &bad);
    if (r == IO_OK && h.kind != STORE_REPLY_CANCELLED) {
      unsigned char *ack = NULL;
      store_header ah;
      r = read_reply(st, grace, &ah, &ack, &bad);
      if (r == IO_OK && ah.kind != STORE_REPLY_CANCELLED) {
        r = IO_ERROR;
        bad = "no acknowledgement of a cancelled request";
      }
      free(ack);
    } else if (r == IO_OK) {
      cancelled = 1;
    }
  }
  if (r != IO_OK) {
    free(body);
    if (bad) {
      st->broken = 1;
      return xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                         "malformed reply from the rendezvous store at %s:%d "
                         "during %s: %s",
                         st->host, st->port, what, bad);
    }
    return io_failure(st, r, what);
  }
  if (cancelled) {
    free(body);
    return XCOLL_ERR_TIMEOUT;
  }
  if (h.kind == STORE_REPLY_FAILED) {
    xcoll_status status =
        xcoll_error(NULL, XCOLL_ERR_REMOTE, "%s (reported by the rendezvous "
                    "store at %s:%d during %s)",
                    (const char *)body, st->host, st->port, what);
    free(body);
    return status;
  }
  if (h.kind == STORE_REPLY_ERROR) {
    xcoll_status status =
        xcoll_error(NULL, XCOLL_ERR_INVALID_USAGE,
                    "the rendezvous store at %s:%d refused "
                    "%s: %s",
                    st->host, st->port, what, (const char *)body);
    free(body);
    return status;
  }
  if (h.kind != STORE_REPLY_OK) {
    free(body);
    st->broken = 1;
    return xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                       "unexpected reply from the rendezvous store at %s:%d "
                       "during %s",
                       st->host, st->port, what);
  }
  *reply = body;
  if (reply_bytes)
    *reply_bytes = h.value_bytes;
  return XCOLL_SUCCESS;
}

static xcoll_status check_key(const char *key, const char *function) {
  if (!key || !*key)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: the key is NULL or empty", function);
  if (strlen(key) > XCOLL_STORE_MAX_KEY)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: key '%.40s...' is %zu bytes, more than "
                       "XCOLL_STORE_MAX_KEY (%d)",
                       function, key, strlen(key), XCOLL_STORE_MAX_KEY);
  return XCOLL_SUCCESS;
}

/* Encodes count keys as a key list (see the wire format above). */
static xcoll_status encode_key_list(const char *const *keys, int count,
                                    const char *function, unsigned char **list,
                                    size_t *bytes) {
  *list = NULL;
  if (!keys || count <= 0)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: keys is NULL or count %d is not positive", function,
                       count);
  size_t total = 4;
  for (int i = 0; i < count; i++) {
    xcoll_status status = check_key(keys[i], function);
    if (status)
      return status;
    total += 4 + strlen(keys[i]);
  }
  if (total > XCOLL_STORE_MAX_VALUE)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: %d keys take %zu bytes, more than "
                       "XCOLL_STORE_MAX_VALUE",
                       function, count, total);
  unsigned char *p = malloc(total);
  if (!p)
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY, "%s: out of memory",
                       function);
  put_u32(p, (uint32_t)count);
  size_t at = 4;
  for (int i = 0; i < count; i++) {
    size_t len = strlen(keys[i]);
    put_u32(p + at, (uint32_t)len);
    memcpy(p + at + 4, keys[i], len);
    at += 4 + len;
  }
  *list = p;
  *bytes = total;
  return XCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* A caller's store (xcoll_comm_init_kv)                                */
/* ------------------------------------------------------------------ */

xcoll_status xcoll_store_wrap_kv(const xcoll_kv_store *kv, double timeout_s,
                                 xcoll_store **store) {
  if (!store)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_wrap_kv: store is NULL");
  *store = NULL;
  if (!kv || !kv->set || !kv->get || !kv->add)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "the key-value store is NULL or lacks its set, get or "
                       "add function");
  xcoll_store *st = calloc(1, sizeof *st);
  if (!st)
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                       "out of memory for a key-value store client");
  st->fd = -1;
  st->is_kv = 1;
  st->kv = *kv;
  st->timeout_s = timeout_s > 0 && isfinite(timeout_s) ? timeout_s : 300.0;
  snprintf(st->host, sizeof st->host, "the caller's key-value store");
  *store = st;
  return XCOLL_SUCCESS;
}

int xcoll_store_is_kv(const xcoll_store *store) {
  return store != NULL && store->is_kv;
}

/* Name the operation and key when the caller's function fails, keeping the
 * message it may have recorded. */
static xcoll_status kv_result(xcoll_status status, const char *what,
                              const char *key) {
  if (status == XCOLL_SUCCESS)
    return status;
  if (status == XCOLL_ERR_TIMEOUT)
    return xcoll_error(NULL, status,
                       "key '%.200s' did not appear in the key-value store in "
                       "time (%s): did every rank reach this point?",
                       key, what);
  return xcoll_error(NULL, status,
                     "the key-value store's %s of key '%.200s' failed (%s)",
                     what, key, xcoll_strerror(status));
}

static xcoll_status kv_get(xcoll_store *store, const char *key, void **value,
                           size_t *bytes) {
  *value = NULL;
  *bytes = 0;
  xcoll_status status =
      store->kv.get(store->kv.context, key, store->timeout_s, value, bytes);
  if (status != XCOLL_SUCCESS) {
    free(*value);
    *value = NULL;
    *bytes = 0;
  }
  return kv_result(status, "get", key);
}

static xcoll_status kv_wait(xcoll_store *store, const char *const *keys,
                            int count) {
  for (int i = 0; i < count; i++) {
    void *value = NULL;
    size_t bytes = 0;
    xcoll_status status = kv_get(store, keys[i], &value, &bytes);
    free(value);
    if (status != XCOLL_SUCCESS)
      return status;
  }
  return XCOLL_SUCCESS;
}

static xcoll_status kv_not_supported(const char *what) {
  return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                     "%s is not offered on a caller's key-value store "
                     "(xcoll_comm_init_kv)",
                     what);
}

xcoll_status xcoll_store_connect(const char *host, int port, double timeout_s,
                                 xcoll_store **store) {
  if (!store)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_connect: store is NULL");
  *store = NULL;
  if (!host || !*host || strlen(host) >= sizeof((xcoll_store *)0)->host)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_connect: the host is NULL, empty or too "
                       "long (set MASTER_ADDR)");
  if (port < 1 || port > 65535)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_connect: port %d is out of range 1..65535 "
                       "(set MASTER_PORT)",
                       port);
  if (!(timeout_s > 0) || !isfinite(timeout_s))
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_connect: timeout_s %g must be a positive "
                       "number of seconds",
                       timeout_s);

  char service[16];
  snprintf(service, sizeof service, "%d", port);
  xcoll_status auth_status = xcoll_auth_init();
  if (auth_status != XCOLL_SUCCESS)
    return auth_status;
  double start = now_s(), deadline = start + timeout_s;
  double backoff_s = 0.01;
  /* How long one connection may take to authenticate before a new one is
   * tried (doubling each time): see below. */
  double patience_s = STORE_AUTH_PATIENCE_S;
  int last_errno = 0, fd = -1;
  char who[300];
  snprintf(who, sizeof who, "the rendezvous store at %s:%d", host, port);
connect_again:
  while (fd < 0) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int rc = getaddrinfo(host, service, &hints, &list);
    if (rc != 0 && rc != EAI_AGAIN)
      return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                         "could not resolve the rendezvous store host '%s': "
                         "%s (check MASTER_ADDR)",
                         host, gai_strerror(rc));
    for (struct addrinfo *ai = rc == 0 ? list : NULL; ai && fd < 0;
         ai = ai->ai_next) {
      fd = xcoll_socket_connect_once(ai->ai_addr, ai->ai_addrlen, deadline);
      /* out of time: the earlier attempt's reason says more */
      if (fd < 0 && !(errno == ETIMEDOUT && last_errno))
        last_errno = errno;
    }
    if (list)
      freeaddrinfo(list);
    if (fd >= 0)
      break;
    double left = deadline - now_s();
    if (left <= 0)
      return xcoll_error(NULL, XCOLL_ERR_TIMEOUT,
                         "could not reach the rendezvous store at %s:%d after "
                         "%.1f s (%s): is rank 0 running and "
                         "MASTER_ADDR/MASTER_PORT right?",
                         host, port, now_s() - start,
                         strerror(last_errno ? last_errno : ETIMEDOUT));
    /* Retry backoff while rank 0 starts its server; not synchronisation. */
    (void)xcoll_socket_backoff(&backoff_s, deadline);
  }

  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* The store answers at once unless a packet was lost. A lost SYN-ACK
   * makes the kernel's first RTT sample of this connection about 1 s (the
   * SYN-ACK's retransmission delay), so its RTO starts near 3 s and
   * doubles: a lost offer then costs 2.3 s, two 6.7 s, three 12.5 s
   * (measured between network namespaces), past a 10 s XCOLL_TIMEOUT_S
   * with 4 packets lost. A new connection starts with a fresh estimate:
   * after patience_s without an answer, or when the store closed this one
   * (it sheds silent connections), connect again. */
  double attempt_deadline = now_s() + patience_s;
  int last_try = attempt_deadline >= deadline;
  xcoll_status handshake =
      last_try ? xcoll_auth_client(fd, STORE_AUTH_CONTEXT, who, deadline)
               : xcoll_auth_client_quiet(fd, STORE_AUTH_CONTEXT, who,
                                         attempt_deadline);
  if (handshake != XCOLL_SUCCESS) {
    close(fd);
    fd = -1;
    if (!last_try &&
        (handshake == XCOLL_ERR_TIMEOUT || handshake == XCOLL_ERR_REMOTE)) {
      XCOLL_INFO("%s; connecting again (%.1f s left)", xcoll_last_error(),
                 deadline - now_s());
      patience_s *= 2;
      backoff_s = 0.01;
      goto connect_again;
    }
    return handshake;
  }
  xcoll_auth_warn_if_exposed(host);
  xcoll_store *st = calloc(1, sizeof *st);
  if (!st) {
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                       "out of memory connecting to the rendezvous store");
  }
  st->fd = fd;
  st->port = port;
  st->timeout_s = timeout_s;
  snprintf(st->host, sizeof st->host, "%s", host);
  *store = st;
  return XCOLL_SUCCESS;
}

void xcoll_store_interrupt(xcoll_store *store) {
  if (!store)
    return;
  atomic_store(&store->interrupted, 1);
  if (store->is_kv)
    return;
  (void)shutdown(store->fd, SHUT_RDWR);
}

void xcoll_store_close(xcoll_store *store) {
  if (!store)
    return;
  if (store->is_kv) {
    free(store);
    return;
  }
  /* A normal close: the server must not report this rank as dead. Best
   * effort and without a reply; a broken stream cannot carry it. */
  if (!store->broken) {
    unsigned char leave[STORE_HEADER_BYTES];
    store_header h = {STORE_MAGIC, STORE_VERSION, STORE_LEAVE, 0, 0};
    store_header_encode(&h, leave);
    (void)send(store->fd, leave, sizeof leave, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  close(store->fd);
  free(store);
}

void xcoll_store_set_timeout(xcoll_store *store, double timeout_s) {
  if (store && timeout_s > 0 && isfinite(timeout_s))
    store->timeout_s = timeout_s;
}

xcoll_status xcoll_store_set(xcoll_store *store, const char *key,
                             const void *value, size_t bytes) {
  xcoll_status status = check_key(key, "xcoll_store_set");
  if (status)
    return status;
  if (!store || (!value && bytes))
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_set: store is NULL, or value is NULL with "
                       "%zu bytes",
                       bytes);
  if (bytes > XCOLL_STORE_MAX_VALUE)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_set: the value of key '%s' is %zu bytes, "
                       "more than XCOLL_STORE_MAX_VALUE (%u)",
                       key, bytes, XCOLL_STORE_MAX_VALUE);
  if (store->is_kv)
    return kv_result(store->kv.set(store->kv.context, key, value, bytes), "set",
                     key);
  char what[96];
  snprintf(what, sizeof what, "set of key '%.60s'", key);
  unsigned char *reply = NULL;
  status =
      store_request(store, STORE_SET, key, value, bytes, &reply, NULL, what);
  free(reply);
  if (status == XCOLL_ERR_TIMEOUT)
    return io_failure(store, IO_TIMEOUT, what);
  return status;
}

xcoll_status xcoll_store_get(xcoll_store *store, const char *key, void **value,
                             size_t *bytes) {
  xcoll_status status = check_key(key, "xcoll_store_get");
  if (status)
    return status;
  if (!store || !value || !bytes)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_get: store, value or bytes is NULL");
  *value = NULL;
  *bytes = 0;
  if (store->is_kv)
    return kv_get(store, key, value, bytes);
  char what[96];
  snprintf(what, sizeof what, "get of key '%.60s'", key);
  unsigned char *reply = NULL;
  size_t reply_bytes = 0;
  status =
      store_request(store, STORE_GET, key, NULL, 0, &reply, &reply_bytes, what);
  if (status == XCOLL_ERR_TIMEOUT)
    return xcoll_error(NULL, XCOLL_ERR_TIMEOUT,
                       "key '%s' did not appear in the rendezvous store at "
                       "%s:%d within %.1f s: did every rank reach this point?",
                       key, store->host, store->port, store->timeout_s);
  if (status)
    return status;
  *value = reply;
  *bytes = reply_bytes;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_store_check(xcoll_store *store, const char *const *keys,
                               int count, int *exists) {
  if (!store || !exists)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_check: store or exists is NULL");
  if (store->is_kv)
    return kv_not_supported("check");
  unsigned char *list = NULL, *reply = NULL;
  size_t list_bytes = 0, reply_bytes = 0;
  xcoll_status status =
      encode_key_list(keys, count, "xcoll_store_check", &list, &list_bytes);
  if (status)
    return status;
  status = store_request(store, STORE_CHECK, NULL, list, list_bytes, &reply,
                         &reply_bytes, "check");
  free(list);
  if (status == XCOLL_ERR_TIMEOUT)
    return io_failure(store, IO_TIMEOUT, "check");
  if (status == XCOLL_SUCCESS && reply_bytes != 1) {
    store->broken = 1;
    status = xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                         "the rendezvous store at %s:%d answered check with "
                         "%zu bytes instead of 1",
                         store->host, store->port, reply_bytes);
  }
  if (status == XCOLL_SUCCESS)
    *exists = reply[0] != 0;
  free(reply);
  return status;
}

xcoll_status xcoll_store_wait(xcoll_store *store, const char *const *keys,
                              int count) {
  if (!store)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_wait: store is NULL");
  if (store->is_kv)
    return kv_wait(store, keys, count);
  unsigned char *list = NULL, *reply = NULL;
  size_t list_bytes = 0;
  xcoll_status status =
      encode_key_list(keys, count, "xcoll_store_wait", &list, &list_bytes);
  if (status)
    return status;
  status = store_request(store, STORE_WAIT, NULL, list, list_bytes, &reply,
                         NULL, "wait");
  free(list);
  free(reply);
  if (status != XCOLL_ERR_TIMEOUT)
    return status;
  /* Name the first key still missing, for the message. */
  const char *missing = keys[0];
  for (int i = 0; i < count; i++) {
    int exists = 0;
    if (xcoll_store_check(store, &keys[i], 1, &exists) != XCOLL_SUCCESS)
      break;
    if (!exists) {
      missing = keys[i];
      break;
    }
  }
  return xcoll_error(NULL, XCOLL_ERR_TIMEOUT,
                     "waited %.1f s for %d key(s) in the rendezvous store at "
                     "%s:%d; key '%s' is still missing: did every rank reach "
                     "this point?",
                     store->timeout_s, count, store->host, store->port,
                     missing);
}

xcoll_status xcoll_store_add(xcoll_store *store, const char *key, int64_t delta,
                             int64_t *result) {
  xcoll_status status = check_key(key, "xcoll_store_add");
  if (status)
    return status;
  if (!store)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_add: store is NULL");
  if (store->is_kv) {
    int64_t total = 0;
    status = store->kv.add(store->kv.context, key, delta, &total);
    if (status == XCOLL_SUCCESS && result)
      *result = total;
    return kv_result(status, "add", key);
  }
  unsigned char delta_bytes[8], *reply = NULL;
  size_t reply_bytes = 0;
  put_i64(delta_bytes, delta);
  char what[96];
  snprintf(what, sizeof what, "add on key '%.60s'", key);
  status = store_request(store, STORE_ADD, key, delta_bytes, sizeof delta_bytes,
                         &reply, &reply_bytes, what);
  if (status == XCOLL_ERR_TIMEOUT)
    return io_failure(store, IO_TIMEOUT, what);
  if (status == XCOLL_SUCCESS && reply_bytes != 8) {
    store->broken = 1;
    status = xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                         "the rendezvous store at %s:%d answered %s with %zu "
                         "bytes instead of 8",
                         store->host, store->port, what, reply_bytes);
  }
  if (status == XCOLL_SUCCESS && result)
    *result = get_i64(reply);
  free(reply);
  return status;
}

xcoll_status xcoll_store_delete(xcoll_store *store, const char *key,
                                int *deleted) {
  xcoll_status status = check_key(key, "xcoll_store_delete");
  if (status)
    return status;
  if (!store)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_delete: store is NULL");
  if (store->is_kv)
    return kv_not_supported("delete");
  unsigned char *reply = NULL;
  size_t reply_bytes = 0;
  char what[96];
  snprintf(what, sizeof what, "delete of key '%.60s'", key);
  status = store_request(store, STORE_DELETE, key, NULL, 0, &reply,
                         &reply_bytes, what);
  if (status == XCOLL_ERR_TIMEOUT)
    return io_failure(store, IO_TIMEOUT, what);
  if (status == XCOLL_SUCCESS && reply_bytes != 1) {
    store->broken = 1;
    status = xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                         "the rendezvous store at %s:%d answered %s with %zu "
                         "bytes instead of 1",
                         store->host, store->port, what, reply_bytes);
  }
  if (status == XCOLL_SUCCESS && deleted)
    *deleted = reply[0] != 0;
  free(reply);
  return status;
}

xcoll_status xcoll_store_join(xcoll_store *store, int world_size, int rank) {
  if (!store || world_size < 1 || rank < 0 || rank >= world_size)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_join: store is NULL or rank %d is not in "
                       "[0, world_size=%d)",
                       rank, world_size);
  if (store->is_kv)
    return XCOLL_SUCCESS;
  char job_id[XCOLL_STORE_MAX_JOB_ID + 1];
  const char *named = xcoll_env_str("XCOLL_JOB_ID");
  if (!named)
    named = xcoll_env_str("TORCHELASTIC_RUN_ID");
  if (named)
    snprintf(job_id, sizeof job_id, "%s", named);
  else
    snprintf(job_id, sizeof job_id, "%.240s:%d", store->host, store->port);
  unsigned char value[8];
  put_u32(value, (uint32_t)world_size);
  put_u32(value + 4, (uint32_t)rank);
  unsigned char *reply = NULL;
  xcoll_status status = store_request(store, STORE_JOIN, job_id, value,
                                      sizeof value, &reply, NULL, "join");
  free(reply);
  if (status == XCOLL_ERR_TIMEOUT)
    return io_failure(store, IO_TIMEOUT, "join");
  if (status == XCOLL_ERR_INVALID_USAGE) /* refused: the launch is wrong */
    return xcoll_error(NULL, XCOLL_ERR_ENV, "rank %d: %s", rank,
                       xcoll_last_error());
  return status;
}

xcoll_status xcoll_store_health(xcoll_store *store) {
  if (!store)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_store_health: store is NULL");
  if (store->is_kv)
    return XCOLL_SUCCESS;
  unsigned char *reply = NULL;
  xcoll_status status = store_request(store, STORE_HEALTH, NULL, NULL, 0,
                                      &reply, NULL, "health check");
  free(reply);
  if (status == XCOLL_ERR_TIMEOUT)
    return io_failure(store, IO_TIMEOUT, "health check");
  return status;
}
