/* auth.c - the per-job secret and its HMAC-SHA256 challenge-response
 * (auth.h), on libsodium: randombytes_buf for nonces, crypto_generichash to
 * turn the token or key file into a 32-byte key, crypto_auth_hmacsha256 for
 * proofs, sodium_memcmp to compare them in constant time. */
#include "auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "error.h"
#include "log.h"

#define OFFER_MAGIC "XCA1"
#define OFFER_HAS_SECRET 1u
/* A key file is a short secret; anything larger is a mistake (wrong file). */
#define KEY_FILE_MAX_BYTES (64u << 10)
/* Domain separation: the key is the hash of this prefix and the secret. */
#define KEY_DOMAIN "xcoll-auth-v1:"

static pthread_mutex_t auth_lock = PTHREAD_MUTEX_INITIALIZER;
static int auth_loaded;           /* xcoll_auth_init ran (under auth_lock) */
static xcoll_status auth_status;  /* and what it returned */
static char auth_message[512];    /* its error message, repeated later */
static int auth_has_key;
static uint8_t auth_key[crypto_auth_hmacsha256_KEYBYTES];

double xcoll_auth_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void derive_key(const void *secret, size_t bytes) {
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, sizeof auth_key);
  crypto_generichash_update(&h, (const unsigned char *)KEY_DOMAIN,
                            strlen(KEY_DOMAIN));
  crypto_generichash_update(&h, secret, bytes);
  crypto_generichash_final(&h, auth_key, sizeof auth_key);
  auth_has_key = 1;
}

/* Reads the key file, refusing one that others may read or change. */
static xcoll_status load_key_file(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_AUTH_FILE='%.200s' cannot be opened: %s", path,
                       strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_AUTH_FILE='%.200s' is not a regular file", path);
  }
  if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_AUTH_FILE='%.200s' has mode %03o: group or others "
                       "may read or change the job's secret; run chmod 600 "
                       "'%.200s'",
                       path, (unsigned)(sb.st_mode & 0777), path);
  }
  if (sb.st_size <= 0 || (uint64_t)sb.st_size > KEY_FILE_MAX_BYTES) {
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_AUTH_FILE='%.200s' holds %lld bytes: expected a "
                       "secret of 1 byte to 64 KiB",
                       path, (long long)sb.st_size);
  }
  size_t want = (size_t)sb.st_size, got = 0;
  unsigned char *buf = sodium_malloc(want);
  if (!buf) {
    close(fd);
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                       "out of memory reading XCOLL_AUTH_FILE");
  }
  while (got < want) {
    ssize_t n = read(fd, buf + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  /* "echo secret > file" adds a newline the token form would not have. */
  while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r'))
    got--;
  if (got == 0) {
    sodium_free(buf);
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_AUTH_FILE='%.200s' holds no secret (empty or "
                       "only a newline)",
                       path);
  }
  derive_key(buf, got);
  sodium_free(buf);
  return XCOLL_SUCCESS;
}

static xcoll_status load_locked(void) {
  auth_has_key = 0;
  sodium_memzero(auth_key, sizeof auth_key);
  if (sodium_init() < 0)
    return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                       "libsodium failed to initialise (no entropy source?)");
  const char *token = xcoll_env_str("XCOLL_AUTH_TOKEN");
  const char *file = xcoll_env_str("XCOLL_AUTH_FILE");
  if (token && file)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "both XCOLL_AUTH_TOKEN and XCOLL_AUTH_FILE are set: set "
                       "one of them (the same one on every rank)");
  if (token) {
    derive_key(token, strlen(token));
    return XCOLL_SUCCESS;
  }
  if (file) return load_key_file(file);
  return XCOLL_SUCCESS;
}

static xcoll_status load(int again) {
  pthread_mutex_lock(&auth_lock);
  if (!auth_loaded || again) {
    auth_status = load_locked();
    snprintf(auth_message, sizeof auth_message, "%s",
             auth_status ? xcoll_last_error() : "");
    if (auth_status) auth_has_key = 0;
    auth_loaded = 1;
  }
  xcoll_status status = auth_status;
  pthread_mutex_unlock(&auth_lock);
  if (status && !again) /* repeat the message for this thread */
    return xcoll_error(NULL, status, "%s", auth_message);
  return status;
}

xcoll_status xcoll_auth_init(void) { return load(0); }
xcoll_status xcoll_auth_reload(void) { return load(1); }

int xcoll_auth_enabled(void) {
  pthread_mutex_lock(&auth_lock);
  int on = auth_loaded && auth_has_key;
  pthread_mutex_unlock(&auth_lock);
  return on;
}

/* 1 when every address host resolves to is a loopback address. */
static int is_loopback(const char *host) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
  struct addrinfo *list = NULL;
  if (getaddrinfo(host, NULL, &hints, &list) != 0) return 0;
  int all = list != NULL;
  for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      uint32_t a = ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr);
      all &= (a >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      all &= IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    } else {
      all = 0;
    }
  }
  freeaddrinfo(list);
  return all;
}

void xcoll_auth_warn_if_exposed(const char *master_addr) {
  static atomic_int warned;
  if (xcoll_auth_enabled() || !master_addr || is_loopback(master_addr)) return;
  if (atomic_exchange(&warned, 1)) return;
  XCOLL_WARN("no job secret (XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE) while "
             "MASTER_ADDR=%s is not a loopback address: any process that "
             "reaches the rendezvous store or a rank's ports can read the "
             "job's addresses, join it or feed it wrong data. Set the same "
             "XCOLL_AUTH_TOKEN on every rank (xcollrun does it for one "
             "node); see docs/security.md",
             master_addr);
}

void xcoll_auth_offer(uint8_t offer[XCOLL_AUTH_OFFER_BYTES],
                      uint8_t nonce[XCOLL_AUTH_NONCE_BYTES]) {
  memcpy(offer, OFFER_MAGIC, 4);
  offer[4] = xcoll_auth_enabled() ? OFFER_HAS_SECRET : 0;
  randombytes_buf(nonce, XCOLL_AUTH_NONCE_BYTES);
  memcpy(offer + 5, nonce, XCOLL_AUTH_NONCE_BYTES);
}

int xcoll_auth_parse_offer(const uint8_t offer[XCOLL_AUTH_OFFER_BYTES],
                           uint8_t nonce[XCOLL_AUTH_NONCE_BYTES], char *why,
                           size_t why_bytes) {
  if (memcmp(offer, OFFER_MAGIC, 4) != 0) {
    snprintf(why, why_bytes,
             "no authentication offer where one was due (not an xcoll peer, "
             "or an older xcoll)");
    return -1;
  }
  if (offer[4] & ~OFFER_HAS_SECRET) {
    snprintf(why, why_bytes, "unknown authentication flags 0x%02x", offer[4]);
    return -1;
  }
  int theirs = (offer[4] & OFFER_HAS_SECRET) != 0, ours = xcoll_auth_enabled();
  if (theirs != ours) {
    snprintf(why, why_bytes,
             ours ? "the peer has no job secret but this process has one: set "
                    "the same XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE on every rank"
                  : "the peer requires a job secret but this process has none: "
                    "set the same XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE on every "
                    "rank");
    return -1;
  }
  memcpy(nonce, offer + 5, XCOLL_AUTH_NONCE_BYTES);
  return 0;
}

void xcoll_auth_prove(const char *role, const char *context,
                      const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                      const uint8_t server_nonce[XCOLL_AUTH_NONCE_BYTES],
                      uint8_t proof[XCOLL_AUTH_PROOF_BYTES]) {
  memset(proof, 0, XCOLL_AUTH_PROOF_BYTES);
  pthread_mutex_lock(&auth_lock);
  if (auth_loaded && auth_has_key) {
    crypto_auth_hmacsha256_state h;
    crypto_auth_hmacsha256_init(&h, auth_key, sizeof auth_key);
    /* The terminating zeros keep ("ab","c") apart from ("a","bc"). */
    crypto_auth_hmacsha256_update(&h, (const unsigned char *)role,
                                  strlen(role) + 1);
    size_t context_bytes = strnlen(context, XCOLL_AUTH_CONTEXT_BYTES - 1);
    crypto_auth_hmacsha256_update(&h, (const unsigned char *)context,
                                  context_bytes);
    crypto_auth_hmacsha256_update(&h, (const unsigned char *)"", 1);
    crypto_auth_hmacsha256_update(&h, client_nonce, XCOLL_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&h, server_nonce, XCOLL_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&h, proof);
  }
  pthread_mutex_unlock(&auth_lock);
}

int xcoll_auth_verify(const char *role, const char *context,
                      const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                      const uint8_t server_nonce[XCOLL_AUTH_NONCE_BYTES],
                      const uint8_t proof[XCOLL_AUTH_PROOF_BYTES]) {
  if (!xcoll_auth_enabled()) return 1;
  uint8_t expected[XCOLL_AUTH_PROOF_BYTES];
  xcoll_auth_prove(role, context, client_nonce, server_nonce, expected);
  int ok = sodium_memcmp(expected, proof, XCOLL_AUTH_PROOF_BYTES) == 0;
  sodium_memzero(expected, sizeof expected);
  return ok;
}

static const uint8_t no_server_nonce[XCOLL_AUTH_NONCE_BYTES];

void xcoll_auth_hello_tag(const char *context,
                          const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                          uint8_t tag[XCOLL_AUTH_PROOF_BYTES]) {
  xcoll_auth_prove("hello", context, client_nonce, no_server_nonce, tag);
}

int xcoll_auth_hello_tag_ok(const char *context,
                            const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                            const uint8_t tag[XCOLL_AUTH_PROOF_BYTES]) {
  return xcoll_auth_verify("hello", context, client_nonce, no_server_nonce,
                           tag);
}

/* ---- the blocking exchange ---- */

static int ms_left(double deadline) {
  double left = deadline - xcoll_auth_now();
  if (left <= 0) return 0;
  if (left > 1e6) return 1000000000;
  return (int)(left * 1000.0) + 1;
}

/* 0, or -1 with errno (ETIMEDOUT at the deadline, ECONNRESET for EOF). */
static int io_all(int fd, void *buf, size_t bytes, int sending,
                  double deadline) {
  size_t done = 0;
  while (done < bytes) {
    struct pollfd p = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
    int n = poll(&p, 1, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    ssize_t r = sending ? send(fd, (char *)buf + done, bytes - done,
                               MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, (char *)buf + done, bytes - done,
                               MSG_DONTWAIT);
    if (r == 0 && !sending) {
      errno = ECONNRESET;
      return -1;
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return -1;
    }
    done += (size_t)r;
  }
  return 0;
}

static xcoll_status io_error_how(const char *peer, const char *step,
                                 int quiet) {
  int err = errno;
  xcoll_status (*record)(struct xcoll_comm *, xcoll_status, const char *,
                         ...) = quiet ? xcoll_error_quiet : xcoll_error;
  if (err == ETIMEDOUT)
    return record(NULL, XCOLL_ERR_TIMEOUT,
                  "authentication with %s: no answer in time while %s", peer,
                  step);
  return record(NULL, XCOLL_ERR_REMOTE,
                "authentication with %s: connection lost while %s: %s (the "
                "peer may have rejected our secret: see its log)",
                peer, step, strerror(err));
}

static xcoll_status io_error(const char *peer, const char *step) {
  return io_error_how(peer, step, 0);
}

static xcoll_status auth_client(int fd, const char *context, const char *peer,
                                double deadline, int quiet);

xcoll_status xcoll_auth_client(int fd, const char *context, const char *peer,
                               double deadline) {
  return auth_client(fd, context, peer, deadline, 0);
}

xcoll_status xcoll_auth_client_quiet(int fd, const char *context,
                                     const char *peer, double deadline) {
  return auth_client(fd, context, peer, deadline, 1);
}

static xcoll_status auth_client(int fd, const char *context, const char *peer,
                                double deadline, int quiet) {
  xcoll_status status = xcoll_auth_init();
  if (status) return status;
  uint8_t first[XCOLL_AUTH_FIRST_BYTES], mine[XCOLL_AUTH_NONCE_BYTES],
      theirs[XCOLL_AUTH_NONCE_BYTES];
  uint8_t answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  xcoll_auth_offer(first, mine);
  xcoll_auth_hello_tag(context, mine, first + XCOLL_AUTH_OFFER_BYTES);
  if (io_all(fd, first, sizeof first, 1, deadline) != 0)
    return io_error_how(peer, "sending our offer", quiet);
  if (io_all(fd, answer, sizeof answer, 0, deadline) != 0)
    return io_error_how(peer, "waiting for its answer", quiet);
  char why[256];
  if (xcoll_auth_parse_offer(answer, theirs, why, sizeof why) != 0)
    return xcoll_error(NULL, XCOLL_ERR_PROTOCOL, "authentication with %s: %s",
                       peer, why);
  if (!xcoll_auth_verify("server", context, mine, theirs,
                         answer + XCOLL_AUTH_OFFER_BYTES))
    return xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                       "authentication with %s failed: it does not know this "
                       "job's secret (different XCOLL_AUTH_TOKEN or "
                       "XCOLL_AUTH_FILE, or not this job's process)",
                       peer);
  if (!xcoll_auth_enabled()) return XCOLL_SUCCESS;
  uint8_t proof[XCOLL_AUTH_PROOF_BYTES];
  xcoll_auth_prove("client", context, mine, theirs, proof);
  if (io_all(fd, proof, sizeof proof, 1, deadline) != 0)
    return io_error_how(peer, "sending our proof", quiet);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_auth_server(int fd, const char *context, const char *peer,
                               double deadline) {
  xcoll_status status = xcoll_auth_init();
  if (status) return status;
  uint8_t first[XCOLL_AUTH_FIRST_BYTES], mine[XCOLL_AUTH_NONCE_BYTES],
      theirs[XCOLL_AUTH_NONCE_BYTES];
  uint8_t answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  if (io_all(fd, first, sizeof first, 0, deadline) != 0)
    return io_error(peer, "waiting for its offer");
  char why[256];
  int bad = xcoll_auth_parse_offer(first, theirs, why, sizeof why);
  /* Answer even a mismatched offer or a wrong hello tag, so that the other
   * side can say what is wrong; a foreign offer gets nothing. */
  if (bad && memcmp(first, OFFER_MAGIC, 4) != 0)
    return xcoll_error(NULL, XCOLL_ERR_PROTOCOL, "authentication with %s: %s",
                       peer, why);
  if (!bad && !xcoll_auth_hello_tag_ok(context, theirs,
                                       first + XCOLL_AUTH_OFFER_BYTES)) {
    bad = 1;
    snprintf(why, sizeof why,
             "its hello tag does not match this job's secret (another "
             "XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE, or not this job's process)");
  }
  xcoll_auth_offer(answer, mine);
  xcoll_auth_prove("server", context, theirs, mine,
                   answer + XCOLL_AUTH_OFFER_BYTES);
  if (io_all(fd, answer, sizeof answer, 1, deadline) != 0 && !bad)
    return io_error(peer, "sending our answer");
  if (bad)
    return xcoll_error(NULL, XCOLL_ERR_PROTOCOL, "authentication with %s: %s",
                       peer, why);
  if (!xcoll_auth_enabled()) return XCOLL_SUCCESS;
  uint8_t proof[XCOLL_AUTH_PROOF_BYTES];
  if (io_all(fd, proof, sizeof proof, 0, deadline) != 0)
    return io_error(peer, "waiting for its proof");
  if (!xcoll_auth_verify("client", context, theirs, mine, proof))
    return xcoll_error(NULL, XCOLL_ERR_PROTOCOL,
                       "authentication with %s failed: its proof does not "
                       "match this job's secret",
                       peer);
  return XCOLL_SUCCESS;
}
