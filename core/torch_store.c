/* torch_store.c - a client of torch.distributed's TCPStore as an
 * xcoll_kv_store (torch_store.h), for xcoll programs under torchrun 2.x.
 *
 * The wire format is torch's (torch/csrc/distributed/c10d/TCPStore.cpp and
 * TCPStoreBackend.hpp, the same for its libuv server): a request is one byte
 * of query type then its arguments, a string or a byte vector as a uint64
 * length followed by the bytes, integers in host byte order (client and
 * server share a host, or at least an endianness, in torch's model too).
 * The client first sends VALIDATE with torch's magic number. Used here:
 *   SET   key value            -> (no reply)
 *   CHECK count keys...        -> u8 READY (0) | NOT_READY (1)
 *   GET   key                  -> u64 length, bytes
 *   ADD   key i64              -> i64 new value
 * A get waits by polling CHECK (1 ms doubling to 50 ms) until its timeout,
 * which keeps the client free of WAIT's cancellation protocol. TCPStore has
 * no authentication: torchrun's store is trusted as torch trusts it. */
#include "torch_store.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "error.h"
#include "socket.h"
#include "store.h"

/* torch's c10d::detail::QueryType and validationMagicNumber. */
enum { TS_VALIDATE = 0, TS_SET = 1, TS_GET = 3, TS_ADD = 4, TS_CHECK = 5 };
#define TS_MAGIC 0x3C85F7CEu
#define TS_READY 0

typedef struct torch_store {
  pthread_mutex_t lock; /* one request at a time on the connection */
  int fd;
  char host[256];
  int port;
  char prefix[64];
  double io_timeout_s; /* for one request's bytes to go and come */
} torch_store;

static torch_store the_store = {PTHREAD_MUTEX_INITIALIZER, -1, "", 0, "", 0};

/* Send or receive exactly bytes before deadline; -1 with errno on failure
 * (ETIMEDOUT, ECONNRESET for a closed connection). */
static int io_all(int fd, void *buf, size_t bytes, int sending,
                  double deadline) {
  char *p = buf;
  while (bytes > 0) {
    ssize_t n = sending ? send(fd, p, bytes, MSG_NOSIGNAL) : recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= (size_t)n;
      continue;
    }
    if (n == 0) {
      errno = ECONNRESET;
      return -1;
    }
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -1;
    struct pollfd pfd = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
    int ms = xcoll_socket_ms_left(deadline);
    if (ms == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
      return -1;
  }
  return 0;
}

/* A request being written: type, then strings and integers. */
typedef struct request {
  char *bytes;
  size_t len, cap;
} request;

static int put(request *r, const void *data, size_t n) {
  if (r->len + n > r->cap) {
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + n)
      cap *= 2;
    char *grown = realloc(r->bytes, cap);
    if (grown == NULL)
      return -1;
    r->bytes = grown;
    r->cap = cap;
  }
  memcpy(r->bytes + r->len, data, n);
  r->len += n;
  return 0;
}

static int put_u8(request *r, uint8_t v) { return put(r, &v, 1); }

static int put_bytes(request *r, const void *data, size_t n) {
  uint64_t len = n;
  return put(r, &len, sizeof len) || put(r, data, n) ? -1 : 0;
}

static int put_key(request *r, const torch_store *s, const char *key) {
  size_t prefix = strlen(s->prefix), n = strlen(key);
  uint64_t len = prefix + n;
  return put(r, &len, sizeof len) || put(r, s->prefix, prefix) ||
                 put(r, key, n)
             ? -1
             : 0;
}

/* Sends r and, when reply_bytes > 0, reads that many bytes of reply.
 * Called with s->lock held. */
static xcoll_status exchange(torch_store *s, request *r, const char *what,
                             const char *key, void *reply,
                             size_t reply_bytes) {
  double deadline = xcoll_socket_now() + s->io_timeout_s;
  if (r->bytes == NULL)
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                       "torchrun's store: %s '%s': out of memory", what, key);
  if (io_all(s->fd, r->bytes, r->len, 1, deadline) != 0 ||
      (reply_bytes > 0 &&
       io_all(s->fd, reply, reply_bytes, 0, deadline) != 0)) {
    int err = errno;
    return xcoll_error(NULL, err == ETIMEDOUT ? XCOLL_ERR_TIMEOUT
                                              : XCOLL_ERR_REMOTE,
                       "torchrun's store at %s:%d: %s '%s': %s", s->host,
                       s->port, what, key, strerror(err));
  }
  return XCOLL_SUCCESS;
}

static xcoll_status ts_set(void *context, const char *key, const void *value,
                           size_t bytes) {
  torch_store *s = context;
  request r = {0};
  if (put_u8(&r, TS_SET) || put_key(&r, s, key) ||
      put_bytes(&r, value, bytes)) {
    free(r.bytes);
    r.bytes = NULL;
  }
  pthread_mutex_lock(&s->lock);
  xcoll_status status = exchange(s, &r, "set", key, NULL, 0);
  pthread_mutex_unlock(&s->lock);
  free(r.bytes);
  return status;
}

/* *ready = 1 when key exists. With s->lock held. */
static xcoll_status check_locked(torch_store *s, const char *key, int *ready) {
  request r = {0};
  uint64_t count = 1;
  if (put_u8(&r, TS_CHECK) || put(&r, &count, sizeof count) ||
      put_key(&r, s, key)) {
    free(r.bytes);
    r.bytes = NULL;
  }
  uint8_t answer = 1;
  xcoll_status status = exchange(s, &r, "check", key, &answer, 1);
  free(r.bytes);
  *ready = answer == TS_READY;
  return status;
}

static xcoll_status ts_get(void *context, const char *key, double timeout_s,
                           void **value, size_t *bytes) {
  torch_store *s = context;
  double deadline = xcoll_socket_now() + timeout_s;
  struct timespec pause = {0, 1000000}; /* 1 ms, doubling to 50 ms */
  for (;;) {
    int ready = 0;
    pthread_mutex_lock(&s->lock);
    xcoll_status status = check_locked(s, key, &ready);
    if (status == XCOLL_SUCCESS && ready) {
      request r = {0};
      if (put_u8(&r, TS_GET) || put_key(&r, s, key)) {
        free(r.bytes);
        r.bytes = NULL;
      }
      uint64_t len = 0;
      status = exchange(s, &r, "get", key, &len, sizeof len);
      free(r.bytes);
      if (status == XCOLL_SUCCESS && len > XCOLL_STORE_MAX_VALUE)
        status = xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                             "torchrun's store: get '%s': a value of %llu "
                             "bytes, more than xcoll's %u",
                             key, (unsigned long long)len,
                             XCOLL_STORE_MAX_VALUE);
      void *data = NULL;
      if (status == XCOLL_SUCCESS) {
        data = malloc(len ? (size_t)len : 1);
        if (data == NULL)
          status = xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                               "torchrun's store: get '%s': %llu bytes", key,
                               (unsigned long long)len);
      }
      if (status == XCOLL_SUCCESS && len > 0 &&
          io_all(s->fd, data, (size_t)len, 0,
                 xcoll_socket_now() + s->io_timeout_s) != 0)
        status = xcoll_error(NULL, XCOLL_ERR_REMOTE,
                             "torchrun's store at %s:%d: get '%s': %s",
                             s->host, s->port, key, strerror(errno));
      pthread_mutex_unlock(&s->lock);
      if (status != XCOLL_SUCCESS) {
        free(data);
        return status;
      }
      *value = data;
      *bytes = (size_t)len;
      return XCOLL_SUCCESS;
    }
    pthread_mutex_unlock(&s->lock);
    if (status != XCOLL_SUCCESS)
      return status;
    if (xcoll_socket_now() >= deadline)
      return xcoll_error(NULL, XCOLL_ERR_TIMEOUT,
                         "torchrun's store at %s:%d: key '%s%s' did not "
                         "appear within %.0f s",
                         s->host, s->port, s->prefix, key, timeout_s);
    nanosleep(&pause, NULL);
    if (pause.tv_nsec < 50000000)
      pause.tv_nsec *= 2;
  }
}

static xcoll_status ts_add(void *context, const char *key, int64_t delta,
                           int64_t *result) {
  torch_store *s = context;
  request r = {0};
  if (put_u8(&r, TS_ADD) || put_key(&r, s, key) ||
      put(&r, &delta, sizeof delta)) {
    free(r.bytes);
    r.bytes = NULL;
  }
  pthread_mutex_lock(&s->lock);
  xcoll_status status = exchange(s, &r, "add", key, result, sizeof *result);
  pthread_mutex_unlock(&s->lock);
  free(r.bytes);
  return status;
}

/* Connect to host:port before deadline, trying each address. */
static int connect_store(const char *host, int port, double deadline) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {0}, *list = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, service, &hints, &list);
  if (rc != 0) {
    errno = EHOSTUNREACH;
    return -2;
  }
  double backoff = 0.01;
  int fd = -1;
  for (;;) {
    for (struct addrinfo *a = list; a != NULL && fd < 0; a = a->ai_next)
      fd = xcoll_socket_connect_once(a->ai_addr, a->ai_addrlen, deadline);
    if (fd >= 0 || !xcoll_socket_retryable(errno) ||
        xcoll_socket_backoff(&backoff, deadline) != 0)
      break;
  }
  freeaddrinfo(list);
  return fd;
}

xcoll_status xcoll_torch_store_kv(const char *host, int port, double timeout_s,
                                  xcoll_kv_store *kv) {
  torch_store *s = &the_store;
  if (host == NULL || host[0] == '\0')
    host = "127.0.0.1";
  pthread_mutex_lock(&s->lock);
  if (s->fd < 0) {
    int fd = connect_store(host, port, xcoll_socket_now() + timeout_s);
    if (fd < 0) {
      int err = errno;
      pthread_mutex_unlock(&s->lock);
      if (fd == -2)
        return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                           "torchrun's store: cannot resolve MASTER_ADDR=%s",
                           host);
      return xcoll_error(NULL, XCOLL_ERR_TIMEOUT,
                         "torchrun's store at %s:%d (MASTER_ADDR:MASTER_PORT, "
                         "TORCHELASTIC_USE_AGENT_STORE=True) did not accept "
                         "a connection within %.0f s: %s",
                         host, port, timeout_s, strerror(err));
    }
    snprintf(s->host, sizeof s->host, "%s", host);
    s->port = port;
    s->fd = fd;
    s->io_timeout_s = timeout_s;
    const char *restart = xcoll_env_str("TORCHELASTIC_RESTART_COUNT");
    snprintf(s->prefix, sizeof s->prefix, "/xcoll/%.16s/",
             restart ? restart : "0");
    request r = {0};
    uint32_t magic = TS_MAGIC;
    if (put_u8(&r, TS_VALIDATE) || put(&r, &magic, sizeof magic)) {
      free(r.bytes);
      r.bytes = NULL;
    }
    xcoll_status status = exchange(s, &r, "validate", "", NULL, 0);
    free(r.bytes);
    if (status != XCOLL_SUCCESS) {
      close(s->fd);
      s->fd = -1;
      pthread_mutex_unlock(&s->lock);
      return status;
    }
  }
  pthread_mutex_unlock(&s->lock);
  kv->context = s;
  kv->set = ts_set;
  kv->get = ts_get;
  kv->add = ts_add;
  return XCOLL_SUCCESS;
}
