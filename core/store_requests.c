/* store_requests.c - the rendezvous store server's table and requests
 * (store_server.h; the connections are store_server.c's).
 *
 * A get or wait on a key that does not exist yet is parked on its
 * connection and answered when a set or add creates the key, so clients
 * never poll. add stores the decimal text of the counter (as in TCPStore),
 * so a get of a counter returns e.g. "12". join registers a world rank (job
 * id, WORLD_SIZE, RANK are checked against the ranks already there); a
 * joined rank whose connection drops without LEAVE fails every parked and
 * later get and wait with a message naming it, until a shrink excludes it
 * (XCOLL_STORE_EXCLUDED_PREFIX in store.h). A CANCEL drops the connection's
 * parked request and is answered CANCELLED, so that the stream stays in
 * step. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_BOOTSTRAP /* log.h */
#include "store_server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

/* ---- the table ---- */

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

void store_table_free(store_table *t) {
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

/* ---- replies ---- */

/* Close c at the end of this poll round, with a WARN naming it. A
 * connection that has not authenticated is a stranger's, as far as the
 * store knows: such drops are a WARN at most once a second with a count of
 * the others (every one an INFO line), so that strangers do not decide how
 * much rank 0 logs. */
void store_client_drop(store_client *c, const char *why) {
  if (c->dead)
    return;
  c->dead = 1;
  xcoll_store_server *s = c->server;
  unsigned long also = 0;
  if (c->auth_stage == AUTH_DONE)
    XCOLL_WARN("rendezvous store: closing the connection from %s: %s", c->peer,
               why);
  else if (!xcoll_drop_tally_note(&s->drops, store_now_s(), &also))
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
void store_client_flush(store_client *c) {
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
      store_client_drop(c, n < 0 ? strerror(errno) : "peer closed");
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
      store_client_drop(c, "out of memory for a reply");
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
  store_client_flush(c);
}

void store_client_reply_error(store_client *c, const char *message) {
  client_reply(c, STORE_REPLY_ERROR, message, strlen(message));
}

/* ---- requests ---- */

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
void store_server_note_departure(xcoll_store_server *s, store_client *c) {
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
    store_client_reply_error(c, why);
    return;
  }
  c->joined_rank = (int)rank;
  client_reply(c, STORE_REPLY_OK, NULL, 0);
}

/* Handles one complete request; payload is handed over (the function frees
 * or keeps it). */
void store_server_handle(xcoll_store_server *s, store_client *c, uint16_t kind,
                          unsigned char *payload, size_t key_bytes,
                          size_t value_bytes) {
  const unsigned char *key = payload;
  const unsigned char *value = payload + key_bytes;

  if (c->parked_kind && kind != STORE_CANCEL) {
    free(payload);
    store_client_drop(c, "a new request arrived while one was still waiting");
    return;
  }
  switch (kind) {
  case STORE_SET: {
    unsigned char *copy = NULL;
    if (value_bytes) {
      copy = malloc(value_bytes);
      if (!copy) {
        store_client_reply_error(c, "the store server is out of memory");
        break;
      }
      memcpy(copy, value, value_bytes);
    }
    if (table_put(&s->table, key, key_bytes, copy, value_bytes) != 0) {
      store_client_reply_error(c, "the store server is out of memory");
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
      store_client_drop(c, "malformed key list in wait");
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
      store_client_reply_error(c,
                         "add on a key whose value is not a decimal integer");
      break;
    }
    if (__builtin_add_overflow(current, delta, &result)) {
      store_client_reply_error(c, "add would overflow a 64-bit counter");
      break;
    }
    char text[32];
    int len = snprintf(text, sizeof text, "%" PRId64, result);
    unsigned char *copy = malloc((size_t)len);
    if (copy)
      memcpy(copy, text, (size_t)len);
    if (!copy || table_put(&s->table, key, key_bytes, copy, (size_t)len)) {
      store_client_reply_error(c, "the store server is out of memory");
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
      store_client_drop(c, "malformed key list in check");
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
    store_client_drop(c, "unknown request kind");
    break;
  }
  free(payload);
}
