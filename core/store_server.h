/* store_server.h - the rendezvous store server's private parts, shared by
 * its two files: store_server.c (the thread, connections, authentication,
 * strangers, start and stop) and store_requests.c (the table and the
 * requests: set, get, wait, add, check, delete, join, leave, health,
 * cancel). Nothing outside these two includes it. */
#ifndef XCOLL_CORE_STORE_SERVER_H
#define XCOLL_CORE_STORE_SERVER_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "socket.h"
#include "store.h"
#include "store_codec.h"
#include "store_join.h"
#include "stranger.h"

/* Where a server-side connection is in the authentication exchange. */
enum store_auth_stage {
  AUTH_WAIT_OFFER = 0, /* reading the client's offer and hello tag */
  AUTH_WAIT_PROOF,     /* answered; reading the client's proof */
  AUTH_DONE            /* requests may follow */
};

/* Seconds on the monotonic clock (socket.h). */
static inline double store_now_s(void) { return xcoll_socket_now(); }

/* ---- the table ---- */

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

/* ---- connections ---- */

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
  atomic_int job_failed; /* xcoll_store_server_stop_failed: linger at stop */
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

/* ---- store_requests.c, for the connection side ---- */

/* Free the table's entries and buckets. */
void store_table_free(store_table *t);

/* Close c at the end of this poll round, with a WARN naming it (a
 * stranger's: at most one WARN a second, with a count). */
void store_client_drop(store_client *c, const char *why);

/* Write what is queued to c without blocking. */
void store_client_flush(store_client *c);

/* Queue an ERROR reply carrying message, and write what it can. */
void store_client_reply_error(store_client *c, const char *message);

/* Handle one complete request; payload is handed over (freed or kept). */
void store_server_handle(xcoll_store_server *s, store_client *c,
                         uint16_t kind, unsigned char *payload,
                         size_t key_bytes, size_t value_bytes);

/* c is about to be closed: a rank that joined and goes without LEAVE
 * fails the job's waits, unless a shrink already left it out. */
void store_server_note_departure(xcoll_store_server *s, store_client *c);

#endif
