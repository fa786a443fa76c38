/* store_server.c - the rendezvous store's server (store.h): a key-value
 * server that runs on rank 0 in a background thread.
 *
 * One thread polls the listening socket, every client socket and a wake-up
 * eventfd. Each connection first runs the job secret's exchange (auth.h),
 * then sends requests (store_codec.h). A get or wait on a key that does not
 * exist yet is parked on its connection and answered when a set or add
 * creates the key, so clients never poll. add stores the decimal text of the
 * counter (as in TCPStore), so a get of a counter returns e.g. "12". join
 * registers a world rank (job id, WORLD_SIZE, RANK are checked against the
 * ranks already there); a joined rank whose connection drops without LEAVE
 * fails every parked and later get and wait with a message naming it,
 * until a shrink excludes it (XCOLL_STORE_EXCLUDED_PREFIX in store.h). A
 * CANCEL drops the connection's parked request and is answered CANCELLED, so
 * that the stream stays in step.
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
#include "params.h"
#include "error.h"
#include "log.h"
#include "socket.h"
#include "store_codec.h"
#include "store_join.h"
#include "stranger.h"

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
/* When the job has failed (a rank vanished) and rank 0 stops its server,
 * the server stays this long, or until every joined rank has gone, so that
 * ranks whose requests are still on their way hear why instead of seeing
 * the store vanish. */
#define STORE_FAILURE_LINGER_S 2.0

/* Where a server-side connection is in the authentication exchange. */
enum store_auth_stage {
  AUTH_WAIT_OFFER = 0, /* reading the client's offer and hello tag */
  AUTH_WAIT_PROOF,     /* answered; reading the client's proof */
  AUTH_DONE            /* requests may follow */
};

static double now_s(void) { return xcoll_socket_now(); }

/* ------------------------------------------------------------------ */
/* Server: the table                                                    */
/* ------------------------------------------------------------------ */

typedef struct store_entry {
  unsigned char *key;
  size_t key_bytes;
  unsigned char *value;
  size_t value_bytes;
  uint64_t hash;
  struct store_entry *next;
} store_entry;

typedef struct store_table {
  store_entry **buckets;
  size_t bucket_count; /* a power of two */
  size_t entry_count;
  size_t bytes; /* keys + values held */
} store_table;

static uint64_t key_hash(const unsigned char *key, size_t bytes) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < bytes; i++) {
    h ^= key[i];
    h *= 1099511628211ull;
  }
  return h;
}

static store_entry **table_slot(store_table *t, const unsigned char *key,
                                size_t key_bytes, uint64_t hash) {
  store_entry **slot = &t->buckets[hash & (t->bucket_count - 1)];
  while (*slot && !((*slot)->hash == hash && (*slot)->key_bytes == key_bytes &&
                    memcmp((*slot)->key, key, key_bytes) == 0))
    slot = &(*slot)->next;
  return slot;
}

static store_entry *table_find(store_table *t, const unsigned char *key,
                               size_t key_bytes) {
  return *table_slot(t, key, key_bytes, key_hash(key, key_bytes));
}

static void table_grow(store_table *t) {
  size_t count = t->bucket_count * 2;
  store_entry **buckets = calloc(count, sizeof *buckets);
  if (!buckets)
    return; /* longer chains, still correct */
  for (size_t i = 0; i < t->bucket_count; i++) {
    store_entry *e = t->buckets[i];
    while (e) {
      store_entry *next = e->next;
      e->next = buckets[e->hash & (count - 1)];
      buckets[e->hash & (count - 1)] = e;
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = buckets;
  t->bucket_count = count;
}

/* Takes ownership of value (malloc'd, may be NULL when value_bytes is 0).
 * Returns 0, or -1 when out of memory (value is freed). */
static int table_put(store_table *t, const unsigned char *key, size_t key_bytes,
                     unsigned char *value, size_t value_bytes) {
  uint64_t hash = key_hash(key, key_bytes);
  store_entry **slot = table_slot(t, key, key_bytes, hash);
  if (*slot) {
    t->bytes = t->bytes - (*slot)->value_bytes + value_bytes;
    free((*slot)->value);
    (*slot)->value = value;
    (*slot)->value_bytes = value_bytes;
    return 0;
  }
  store_entry *e = calloc(1, sizeof *e);
  unsigned char *key_copy = malloc(key_bytes);
  if (!e || !key_copy) {
    free(e);
    free(key_copy);
    free(value);
    return -1;
  }
  memcpy(key_copy, key, key_bytes);
  e->key = key_copy;
  e->key_bytes = key_bytes;
  e->value = value;
  e->value_bytes = value_bytes;
  e->hash = hash;
  *slot = e;
  t->bytes += key_bytes + value_bytes;
  if (++t->entry_count > 2 * t->bucket_count)
    table_grow(t);
  return 0;
}

static int table_remove(store_table *t, const unsigned char *key,
                        size_t key_bytes) {
  store_entry **slot = table_slot(t, key, key_bytes, key_hash(key, key_bytes));
  store_entry *e = *slot;
  if (!e)
    return 0;
  *slot = e->next;
  t->bytes -= e->key_bytes + e->value_bytes;
  free(e->key);
  free(e->value);
  free(e);
  t->entry_count--;
  return 1;
}

static void table_free(store_table *t) {
  for (size_t i = 0; i < t->bucket_count; i++) {
    store_entry *e = t->buckets[i];
    while (e) {
      store_entry *next = e->next;
      free(e->key);
      free(e->value);
      free(e);
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = NULL;
}

/* ------------------------------------------------------------------ */
/* Server: connections                                                  */
/* ------------------------------------------------------------------ */

typedef struct store_client {
  struct xcoll_store_server *server;
  int fd;
  char peer[64]; /* "addr:port", for log lines */
  /* authentication (auth.h) before any request is read */
  int auth_stage; /* store_auth_stage */
  uint8_t auth_buf[XCOLL_AUTH_FIRST_BYTES];
  size_t auth_have;
  double since;       /* seconds (monotonic) of its accept */
  double vouched_at;  /* and of its valid first message */
  int vouched;        /* its first message carried a valid hello tag */
  uint8_t origin[16]; /* its peer address (IPv4 in the first 4 bytes) */
  uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES];
  uint8_t server_nonce[XCOLL_AUTH_NONCE_BYTES];
  /* the message being read: header first, then key and value */
  unsigned char header_buf[STORE_HEADER_BYTES];
  size_t header_have;
  store_header header;
  unsigned char *payload;
  size_t payload_bytes;
  size_t payload_have;
  /* a request over XCOLL_STORE_MAX_BYTES: its payload is read and thrown
   * away, then it is refused with this reason (keeps the stream in step) */
  size_t discard_left;
  char *discard_why;
  /* a get or wait that waits for keys; its payload is kept here */
  uint16_t parked_kind;
  unsigned char *parked_payload;
  size_t parked_key_bytes;
  size_t parked_value_bytes;
  /* replies not yet written */
  unsigned char *out;
  size_t out_bytes;
  size_t out_sent;
  size_t out_capacity;
  int dead; /* close at the end of this poll round */
  int joined_rank; /* rank of the world it joined as, or -1 */
  int left;        /* it said LEAVE: its close is normal */
} store_client;

/* A joined rank that went without LEAVE (server_note_departure). */
typedef struct store_departure {
  int rank;
  char peer[64];
} store_departure;

struct xcoll_store_server {
  int listen_fd;
  int wake_fd;
  atomic_int stopping;
  pthread_t thread;
  char addr[128];
  int port;
  store_table table;
  store_client **clients;
  size_t client_count;
  size_t client_capacity;
  struct pollfd *pollfds;
  size_t pollfd_capacity;
  size_t max_bytes;     /* XCOLL_STORE_MAX_BYTES */
  size_t reading_bytes; /* payload buffers of requests being read */
  double accept_resume; /* accept() rests until then after EMFILE */
  xcoll_drop_tally drops; /* unauthenticated connections closed */
  store_job job;        /* fixed by the first JOIN (store_join.h) */
  char failure[512];    /* why the job failed (a rank vanished), or "" */
  /* Joined ranks whose connection dropped without LEAVE, in order: failure
   * names the first of them that no shrink has excluded. */
  store_departure *departed;
  size_t departed_count;
  size_t departed_capacity;
  double linger_until;  /* stop asked after a failure: serve until then */
};

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

/* Close c at the end of this poll round, with a WARN naming it. A
 * connection that has not authenticated is a stranger's, as far as the
 * store knows: such drops are a WARN at most once a second with a count of
 * the others (every one an INFO line), so that strangers do not decide how
 * much rank 0 logs. */
static void client_drop(store_client *c, const char *why) {
  if (c->dead)
    return;
  c->dead = 1;
  xcoll_store_server *s = c->server;
  unsigned long also = 0;
  if (c->auth_stage == AUTH_DONE)
    XCOLL_WARN("rendezvous store: closing the connection from %s: %s", c->peer,
               why);
  else if (!xcoll_drop_tally_note(&s->drops, now_s(), &also))
    XCOLL_INFO("rendezvous store: closing the connection from %s: %s", c->peer,
               why);
  else if (also > 0)
    XCOLL_WARN("rendezvous store: closing the connection from %s: %s (and "
               "closed %lu other unauthenticated connection(s) in the last "
               "second)",
               c->peer, why, also);
  else
    XCOLL_WARN("rendezvous store: closing the connection from %s: %s", c->peer,
               why);
}

/* Write what is queued without blocking; the rest goes when poll says
 * POLLOUT. */
static void client_flush(store_client *c) {
  while (!c->dead && c->out_sent < c->out_bytes) {
    ssize_t n = send(c->fd, c->out + c->out_sent, c->out_bytes - c->out_sent,
                     MSG_NOSIGNAL);
    if (n > 0) {
      c->out_sent += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      client_drop(c, n < 0 ? strerror(errno) : "peer closed");
      return;
    }
  }
  if (c->out_sent == c->out_bytes) {
    c->out_sent = 0;
    c->out_bytes = 0;
  }
}

static void client_reply(store_client *c, uint16_t kind, const void *value,
                         size_t value_bytes) {
  if (c->dead)
    return;
  size_t need = c->out_bytes + STORE_HEADER_BYTES + value_bytes;
  if (need > c->out_capacity) {
    size_t capacity = c->out_capacity ? c->out_capacity : 256;
    while (capacity < need)
      capacity *= 2;
    unsigned char *out = realloc(c->out, capacity);
    if (!out) {
      client_drop(c, "out of memory for a reply");
      return;
    }
    c->out = out;
    c->out_capacity = capacity;
  }
  store_header h = {STORE_MAGIC, STORE_VERSION, kind, 0, (uint32_t)value_bytes};
  store_header_encode(&h, c->out + c->out_bytes);
  if (value_bytes)
    memcpy(c->out + c->out_bytes + STORE_HEADER_BYTES, value, value_bytes);
  c->out_bytes = need;
  client_flush(c);
}

static void client_reply_error(store_client *c, const char *message) {
  client_reply(c, STORE_REPLY_ERROR, message, strlen(message));
}

/* store_key_visit: whether key exists in the table (context). */
static int key_exists(const unsigned char *key, size_t key_bytes,
                      void *context) {
  return table_find(context, key, key_bytes) != NULL;
}

/* 1 when list is a well-formed key list whose keys all exist. */
static int all_keys_exist(const unsigned char *list, size_t bytes,
                          store_table *table) {
  return store_key_list_walk(list, bytes, key_exists, table);
}

/* Answer a parked get or wait if its keys now exist. */
static void client_try_unpark(xcoll_store_server *s, store_client *c) {
  if (!c->parked_kind || c->dead)
    return;
  if (c->parked_kind == STORE_GET) {
    store_entry *e =
        table_find(&s->table, c->parked_payload, c->parked_key_bytes);
    if (!e)
      return;
    client_reply(c, STORE_REPLY_OK, e->value, e->value_bytes);
  } else {
    if (!all_keys_exist(c->parked_payload, c->parked_value_bytes, &s->table))
      return;
    client_reply(c, STORE_REPLY_OK, NULL, 0);
  }
  free(c->parked_payload);
  c->parked_payload = NULL;
  c->parked_kind = 0;
}

static void server_wake_parked(xcoll_store_server *s) {
  for (size_t i = 0; i < s->client_count; i++)
    client_try_unpark(s, s->clients[i]);
}

/* Parses the decimal text a counter is stored as. */
static int parse_counter(const unsigned char *text, size_t bytes,
                         int64_t *out) {
  char buf[32];
  if (bytes == 0 || bytes >= sizeof buf)
    return -1;
  memcpy(buf, text, bytes);
  buf[bytes] = '\0';
  char *end = NULL;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno || *end != '\0')
    return -1;
  *out = (int64_t)v;
  return 0;
}

/* Answer every parked get and wait with the job's failure. */
static void server_fail_parked(xcoll_store_server *s) {
  for (size_t i = 0; i < s->client_count; i++) {
    store_client *c = s->clients[i];
    if (!c->parked_kind || c->dead)
      continue;
    client_reply(c, STORE_REPLY_FAILED, s->failure, strlen(s->failure));
    free(c->parked_payload);
    c->parked_payload = NULL;
    c->parked_kind = 0;
  }
}

/* Whether a shrink left world rank out (XCOLL_STORE_EXCLUDED_PREFIX). */
static int server_rank_excluded(xcoll_store_server *s, int rank) {
  char key[64];
  int len = snprintf(key, sizeof key, "%s%d", XCOLL_STORE_EXCLUDED_PREFIX,
                     rank);
  return table_find(&s->table, (const unsigned char *)key, (size_t)len) !=
         NULL;
}

/* failure names the first departed rank not excluded, or is "" when every
 * departed rank is excluded: the survivors' waits are served again. Parked
 * requests are failed when a new failure appears. */
static void server_update_failure(xcoll_store_server *s) {
  int had_failure = s->failure[0] != '\0';
  s->failure[0] = '\0';
  for (size_t i = 0; i < s->departed_count; i++) {
    const store_departure *d = &s->departed[i];
    if (server_rank_excluded(s, d->rank))
      continue;
    snprintf(s->failure, sizeof s->failure,
             "rank %d (%s) lost its connection to the rendezvous store "
             "without closing its communicator: it died or was killed; see "
             "its log",
             d->rank, d->peer);
    break;
  }
  if (s->failure[0] && !had_failure) {
    XCOLL_WARN("rendezvous store: %s", s->failure);
    server_fail_parked(s);
  } else if (!s->failure[0] && had_failure) {
    XCOLL_INFO("rendezvous store: every rank that vanished was excluded by a "
               "shrink; waits are served again");
  }
}

/* A connection is about to be closed. A rank that joined and goes without
 * LEAVE died (or was killed): everyone waiting in the store hears it now
 * instead of at their timeout, unless a shrink already left it out. */
static void server_note_departure(xcoll_store_server *s, store_client *c) {
  if (c->joined_rank < 0 || c->left)
    return;
  if (s->departed_count == s->departed_capacity) {
    size_t capacity = s->departed_capacity ? 2 * s->departed_capacity : 8;
    store_departure *grown =
        realloc(s->departed, capacity * sizeof *grown);
    if (grown == NULL) { /* still fail the job, without the record */
      if (!s->failure[0]) {
        snprintf(s->failure, sizeof s->failure,
                 "rank %d (%s) lost its connection to the rendezvous store "
                 "without closing its communicator",
                 c->joined_rank, c->peer);
        server_fail_parked(s);
      }
      return;
    }
    s->departed = grown;
    s->departed_capacity = capacity;
  }
  store_departure *d = &s->departed[s->departed_count++];
  d->rank = c->joined_rank;
  snprintf(d->peer, sizeof d->peer, "%s", c->peer);
  /* Published for xcoll_comm_failed_ranks (a check, not a wait: it is
   * answered while the job is failed). Out of memory: the record above
   * still fails the job; only the list misses the rank. */
  char key[64];
  int key_len = snprintf(key, sizeof key, "%s%d", XCOLL_STORE_DEPARTED_PREFIX,
                         d->rank);
  size_t peer_len = strlen(d->peer);
  unsigned char *value = malloc(peer_len > 0 ? peer_len : 1);
  if (value != NULL) {
    memcpy(value, d->peer, peer_len);
    (void)table_put(&s->table, (const unsigned char *)key, (size_t)key_len,
                    value, peer_len);
  }
  server_update_failure(s);
}

/* The address of a live connection registered as rank, other than the
 * one asking (store_rank_holder for store_join_judge). */
typedef struct join_query {
  xcoll_store_server *server;
  store_client *caller;
} join_query;

static const char *rank_holder(void *context, uint32_t rank) {
  join_query *q = context;
  for (size_t i = 0; i < q->server->client_count; i++) {
    store_client *o = q->server->clients[i];
    if (o != q->caller && !o->dead && !o->left && o->joined_rank == (int)rank)
      return o->peer;
  }
  return NULL;
}

/* JOIN: check the caller's job id, world size and rank against the job's
 * (store_join.h). */
static void server_join(xcoll_store_server *s, store_client *c,
                        const unsigned char *job, size_t job_bytes,
                        const unsigned char *value) {
  char why[768];
  uint32_t rank = 0;
  join_query query = {s, c};
  store_join_verdict verdict = store_join_judge(
      &s->job, c->peer, s->port, c->joined_rank, job, job_bytes, value,
      rank_holder, &query, &rank, why, sizeof why);
  if (verdict != STORE_JOIN_ACCEPTED) {
    if (verdict == STORE_JOIN_CONFLICT)
      XCOLL_WARN("rendezvous store: %s", why);
    client_reply_error(c, why);
    return;
  }
  c->joined_rank = (int)rank;
  client_reply(c, STORE_REPLY_OK, NULL, 0);
}

/* Handles one complete request; payload is handed over (the function frees
 * or keeps it). */
static void server_handle(xcoll_store_server *s, store_client *c, uint16_t kind,
                          unsigned char *payload, size_t key_bytes,
                          size_t value_bytes) {
  const unsigned char *key = payload;
  const unsigned char *value = payload + key_bytes;

  if (c->parked_kind && kind != STORE_CANCEL) {
    free(payload);
    client_drop(c, "a new request arrived while one was still waiting");
    return;
  }
  switch (kind) {
  case STORE_SET: {
    unsigned char *copy = NULL;
    if (value_bytes) {
      copy = malloc(value_bytes);
      if (!copy) {
        client_reply_error(c, "the store server is out of memory");
        break;
      }
      memcpy(copy, value, value_bytes);
    }
    if (table_put(&s->table, key, key_bytes, copy, value_bytes) != 0) {
      client_reply_error(c, "the store server is out of memory");
      break;
    }
    client_reply(c, STORE_REPLY_OK, NULL, 0);
    size_t prefix_bytes = strlen(XCOLL_STORE_EXCLUDED_PREFIX);
    if (s->departed_count > 0 && key_bytes > prefix_bytes &&
        memcmp(key, XCOLL_STORE_EXCLUDED_PREFIX, prefix_bytes) == 0)
      server_update_failure(s);
    server_wake_parked(s);
    break;
  }
  case STORE_GET:
  case STORE_WAIT:
    if (kind == STORE_WAIT && !store_key_list_valid(value, value_bytes)) {
      client_drop(c, "malformed key list in wait");
      break;
    }
    c->parked_kind = kind;
    c->parked_payload = payload;
    c->parked_key_bytes = key_bytes;
    c->parked_value_bytes = value_bytes;
    payload = NULL;
    client_try_unpark(s, c);
    if (c->parked_kind && s->failure[0]) /* it would wait for the dead */
      server_fail_parked(s);
    break;
  case STORE_ADD: {
    int64_t delta = get_i64(value), current = 0, result;
    store_entry *e = table_find(&s->table, key, key_bytes);
    if (e && parse_counter(e->value, e->value_bytes, &current) != 0) {
      client_reply_error(c,
                         "add on a key whose value is not a decimal integer");
      break;
    }
    if (__builtin_add_overflow(current, delta, &result)) {
      client_reply_error(c, "add would overflow a 64-bit counter");
      break;
    }
    char text[32];
    int len = snprintf(text, sizeof text, "%" PRId64, result);
    unsigned char *copy = malloc((size_t)len);
    if (copy)
      memcpy(copy, text, (size_t)len);
    if (!copy || table_put(&s->table, key, key_bytes, copy, (size_t)len)) {
      client_reply_error(c, "the store server is out of memory");
      break;
    }
    unsigned char reply[8];
    put_i64(reply, result);
    client_reply(c, STORE_REPLY_OK, reply, sizeof reply);
    server_wake_parked(s);
    break;
  }
  case STORE_CHECK: {
    if (!store_key_list_valid(value, value_bytes)) {
      client_drop(c, "malformed key list in check");
      break;
    }
    unsigned char exists =
        (unsigned char)all_keys_exist(value, value_bytes, &s->table);
    client_reply(c, STORE_REPLY_OK, &exists, 1);
    break;
  }
  case STORE_DELETE: {
    unsigned char deleted =
        (unsigned char)table_remove(&s->table, key, key_bytes);
    client_reply(c, STORE_REPLY_OK, &deleted, 1);
    break;
  }
  case STORE_JOIN:
    server_join(s, c, key, key_bytes, value);
    break;
  case STORE_LEAVE:
    c->left = 1;
    break;
  case STORE_HEALTH:
    if (s->failure[0])
      client_reply(c, STORE_REPLY_FAILED, s->failure, strlen(s->failure));
    else
      client_reply(c, STORE_REPLY_OK, NULL, 0);
    break;
  case STORE_CANCEL:
    free(c->parked_payload);
    c->parked_payload = NULL;
    c->parked_kind = 0;
    client_reply(c, STORE_REPLY_CANCELLED, NULL, 0);
    break;
  default:
    client_drop(c, "unknown request kind");
    break;
  }
  free(payload);
}

/* How long a rank's handshake took, for XCOLL_STRANGER_DEADLINE_S's
 * margin (core/stranger.h). */
static void client_note_authenticated(const store_client *c) {
  XCOLL_TRACE("rendezvous store: %s authenticated: first message %.3f ms, "
              "proof %.3f ms after its accept",
              c->peer, (c->vouched_at - c->since) * 1e3,
              (now_s() - c->since) * 1e3);
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
      client_drop(c, why);
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
    c->vouched_at = now_s();
    unsigned char answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
    xcoll_auth_offer(answer, c->server_nonce);
    xcoll_auth_prove("server", STORE_AUTH_CONTEXT, c->client_nonce,
                     c->server_nonce, answer + XCOLL_AUTH_OFFER_BYTES);
    /* queued raw: the reply path adds store headers, this is not a reply */
    if (c->out_capacity < sizeof answer) {
      unsigned char *out = realloc(c->out, 256);
      if (!out) {
        client_drop(c, "out of memory for the authentication answer");
        return;
      }
      c->out = out;
      c->out_capacity = 256;
    }
    memcpy(c->out, answer, sizeof answer);
    c->out_bytes = sizeof answer;
    c->out_sent = 0;
    client_flush(c);
    if (bad) {
      client_drop(c, why);
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
    client_drop(c, "authentication failed: it does not know this job's "
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
        client_drop(c, n < 0 ? strerror(errno)
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
      client_drop(c, strerror(errno));
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
        client_reply_error(c, c->discard_why);
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
        client_drop(c, why);
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
          client_drop(c, "out of memory");
          return;
        }
        if (c->discard_left == 0) {
          c->header_have = 0;
          client_reply_error(c, c->discard_why);
          free(c->discard_why);
          c->discard_why = NULL;
        }
        continue;
      }
      s->reading_bytes += c->payload_bytes;
      /* one spare byte so that an empty payload still gets a buffer */
      c->payload = malloc(c->payload_bytes + 1);
      if (!c->payload) {
        client_drop(c, "out of memory for a request");
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
      server_handle(s, c, c->header.kind, payload, c->header.key_bytes,
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
    client_drop(oldest, why);
    client_close_now(oldest);
    return 1;
  }
}

/* Close every connection that has not authenticated within
 * XCOLL_STRANGER_DEADLINE_S of its accept (after one last read). Returns
 * the seconds until the next such deadline, or -1 when none is pending. */
static double shed_late_connections(xcoll_store_server *s) {
  double now = now_s(), next = -1;
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
      client_drop(c, why);
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
        if (xcoll_drop_tally_note(&s->drops, now_s(), &also))
          XCOLL_WARN("rendezvous store: accept on port %d: %s, and no "
                     "unauthenticated connection to close; pausing accepts "
                     "for %.0f ms at a time (raise ulimit -n?)",
                     s->port, strerror(errno), STORE_ACCEPT_BACKOFF_S * 1e3);
        s->accept_resume = now_s() + STORE_ACCEPT_BACKOFF_S;
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
    c->since = now_s();
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
      if (joined == 0 || now_s() >= s->linger_until)
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
    int resting = s->accept_resume > 0 && now_s() < s->accept_resume;
    if (resting) {
      int rest_ms = (int)((s->accept_resume - now_s()) * 1000.0) + 1;
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
      if (!s->failure[0])
        break;
      uint64_t drained;
      if (read(s->wake_fd, &drained, sizeof drained) < 0) { /* empty */
      }
      if (s->linger_until == 0)
        s->linger_until = now_s() + STORE_FAILURE_LINGER_S;
    }
    /* Clients accepted below are appended after the polled ones. */
    for (size_t i = 0; i < polled; i++) {
      store_client *c = s->clients[i];
      short rev = s->pollfds[i + 2].revents;
      if (rev & POLLOUT)
        client_flush(c);
      if (rev & (POLLIN | POLLHUP | POLLERR))
        client_read(s, c);
      if (rev & POLLNVAL)
        c->dead = 1;
    }
    if (s->pollfds[1].revents & POLLIN)
      server_accept(s);
    else if (s->accept_resume > 0 && now_s() >= s->accept_resume)
      server_accept(s); /* rested: try the backlog again */
    size_t kept = 0;
    for (size_t i = 0; i < s->client_count; i++)
      if (s->clients[i]->dead)
        server_note_departure(s, s->clients[i]);
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
  table_free(&s->table);
  close(s->listen_fd);
  close(s->wake_fd);
  free(s);
}

