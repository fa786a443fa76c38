/* store.h - the rendezvous store: a key-value server on rank 0 that every
 * rank reaches over TCP (torch.distributed's TCPStore model).
 *
 * Keys are strings (up to 1024 bytes), values are byte strings (up to 64 MiB).
 * Operations: set, get (waits until the key exists), wait (for several keys),
 * add (atomic integer add, returning the new value; a missing key counts as
 * 0), check (do keys exist, without waiting), delete.
 * Every request and reply on the wire starts with a checked header (magic,
 * version, kind, lengths bounded by the limits above): a malformed message
 * closes that connection with an error, never a crash or an allocation sized
 * by an unchecked field.
 *
 * Caps: a key is at most XCOLL_STORE_MAX_KEY bytes and a value at most
 * XCOLL_STORE_MAX_VALUE bytes (protocol limits); the server holds at most
 * XCOLL_STORE_MAX_BYTES (environment, default 256 MiB) of keys, values and
 * requests being read, and refuses a request over it with a message naming
 * the variable.
 * Every connection starts with the job secret's challenge-response (auth.h);
 * a client that fails it is dropped, naming its address. Strangers
 * (core/stranger.h): a connection that has not authenticated
 * XCOLL_STRANGER_DEADLINE_S after its accept is closed; those without a
 * valid first message are bounded (256, 128 per peer address) and shed
 * oldest first, never one with a valid first message; EMFILE sheds one
 * too, and with none to shed accept() rests 100 ms instead of spinning.
 * Such drops are a WARN at most once a second with a count, and the
 * server's thread never blocks on its log. xcoll_store_connect tries again
 * (up to 8 times) when the store closes its connection during the
 * exchange.
 *
 * Errors are recorded with xcoll_error(NULL, ...) (thread-local). One client
 * is used by one thread at a time. */
#ifndef XCOLL_CORE_STORE_H
#define XCOLL_CORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

#define XCOLL_STORE_MAX_KEY 1024
#define XCOLL_STORE_MAX_VALUE (64u << 20)
/* Longest job id (XCOLL_JOB_ID) in bytes. */
#define XCOLL_STORE_MAX_JOB_ID 256
/* Keys "xcoll/excluded/<world rank>" name the world ranks that a shrink
 * (xcoll_comm_shrink) left out. The server reads them: a joined rank whose
 * connection drops without LEAVE fails every parked get and wait (the job
 * lost a rank), unless that rank is excluded; setting the key forgives a
 * departure already seen, so that the survivors can meet in the store again. */
#define XCOLL_STORE_EXCLUDED_PREFIX "xcoll/excluded/"
/* Keys "xcoll/departed/<world rank>" (value: the rank's address) are set by
 * the server itself when a joined rank's connection drops without LEAVE: the
 * ranks known dead, for xcoll_comm_failed_ranks. */
#define XCOLL_STORE_DEPARTED_PREFIX "xcoll/departed/"

typedef struct xcoll_store_server xcoll_store_server;
typedef struct xcoll_store xcoll_store;

/* Listen on addr:port (addr NULL or "" = all interfaces; XCOLL_STORE_BIND,
 * when set, replaces addr) and serve requests from a background thread until
 * stopped. port 0 picks a free port; the chosen one is in *bound_port (may be
 * NULL). Errors: XCOLL_ERR_SYSTEM naming address and port (port already in
 * use, address not of this host); XCOLL_ERR_ENV (XCOLL_STORE_MAX_BYTES or the
 * secret's variables malformed). */
xcoll_status xcoll_store_server_start(const char *addr, int port,
                                      xcoll_store_server **server,
                                      int *bound_port);
/* Stop the thread, close every connection, free. NULL is fine. */
void xcoll_store_server_stop(xcoll_store_server *server);
/* The same, for a job that failed (the stopping rank's communicator is
 * broken): the server first serves on until every rank that joined has
 * closed its connection, for at most 2 s, so that a failure notice another
 * rank is still publishing reaches its readers instead of a refused
 * connection. A rank's death already makes every stop linger so. */
void xcoll_store_server_stop_failed(xcoll_store_server *server);

/* Connect to host:port, retrying until timeout_s (seconds). Errors:
 * XCOLL_ERR_TIMEOUT naming host and port; XCOLL_ERR_SYSTEM (resolution). */
xcoll_status xcoll_store_connect(const char *host, int port, double timeout_s,
                                 xcoll_store **store);
void xcoll_store_close(xcoll_store *store);

xcoll_status xcoll_store_set(xcoll_store *store, const char *key,
                             const void *value, size_t bytes);
/* Wait until key exists (up to the store's timeout), then return a malloc'd
 * copy in *value (caller frees) and its size in *bytes. */
xcoll_status xcoll_store_get(xcoll_store *store, const char *key, void **value,
                             size_t *bytes);
/* Wait until all count keys exist. XCOLL_ERR_TIMEOUT names a missing one. */
xcoll_status xcoll_store_wait(xcoll_store *store, const char *const *keys,
                              int count);
xcoll_status xcoll_store_add(xcoll_store *store, const char *key, int64_t delta,
                             int64_t *result);
/* *exists = 1 if every key exists now. */
xcoll_status xcoll_store_check(xcoll_store *store, const char *const *keys,
                               int count, int *exists);
/* *deleted = 1 if the key existed. deleted may be NULL. */
xcoll_status xcoll_store_delete(xcoll_store *store, const char *key,
                                int *deleted);
/* Register this connection as rank of a world of world_size ranks, of the
 * job named by XCOLL_JOB_ID, else TORCHELASTIC_RUN_ID, else "host:port" of
 * the store. The server checks them against the ranks already registered.
 * Errors: XCOLL_ERR_ENV naming what disagrees ("rank 3 says WORLD_SIZE=5 but
 * rank 0 says 4"; a rank already registered from another address; a second
 * job on the port); the ranks already registered are not affected.
 * Once joined, a connection that drops without xcoll_store_close (the
 * process died) fails every pending and later get and wait of the job with
 * XCOLL_ERR_REMOTE naming that rank; a server stopped after such a failure
 * keeps answering up to 2 s, until the joined ranks have gone, so that they
 * hear why rather than see the store vanish. */
xcoll_status xcoll_store_join(xcoll_store *store, int world_size, int rank);
/* XCOLL_SUCCESS while no joined rank has died; else XCOLL_ERR_REMOTE naming
 * it (for loops that wait on something other than the store). */
xcoll_status xcoll_store_health(xcoll_store *store);
/* Change the timeout (seconds) used by get, wait and replies. */
void xcoll_store_set_timeout(xcoll_store *store, double timeout_s);
/* From another thread: make the request blocked on store (a wait with a long
 * timeout) return at once with an error, by shutting the connection down;
 * the store is then broken and only xcoll_store_close remains to call.
 * That request returns XCOLL_ERR_ABORTED without a message or a log line. For
 * a connection that never joined (a joined rank's departure is reported to
 * the others as a death). Safe to call while the other thread is inside a
 * request; the descriptor stays open until close. */
void xcoll_store_interrupt(xcoll_store *store);

/* A client that forwards set, get, wait and add to the caller's store
 * (xcoll_kv_store of xcoll.h, copied) instead of a connection: for
 * communicators made by xcoll_comm_init_kv. get and wait wait up to
 * timeout_s. On such a client join and health succeed without doing anything
 * (the caller's store has its own membership), interrupt only marks it, and
 * check and delete fail with XCOLL_ERR_NOT_SUPPORTED. Errors:
 * XCOLL_ERR_INVALID_ARGUMENT (NULL kv or function), XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_store_wrap_kv(const xcoll_kv_store *kv, double timeout_s,
                                 xcoll_store **store);
/* 1 when store forwards to a caller's store (xcoll_store_wrap_kv), else 0. */
int xcoll_store_is_kv(const xcoll_store *store);

#endif
