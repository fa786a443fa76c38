/* handshake.h - the bootstrap connection the ucx and ibverbs plugins open
 * through the socket plugin while they connect and accept, to carry the
 * connection info their own network needs (a UCP worker address; a QP's
 * number, LID and GID). The socket plugin authenticates it (the job's secret,
 * the communicator id and both ranks), so neither plugin reimplements that.
 *
 * A plugin's handle is [magic u32 | version u32 | the socket plugin's handle
 * (first inner_bytes of it)] from byte 0, 8 and on, little-endian; what
 * follows is the plugin's own. The steps, each non-blocking like net.h's
 * connect and accept:
 *   listen:  net_handshake_listen (socket listen, the handle's first part).
 *   accept:  net_handshake_receive_hello until it reports the sender's hello
 *            received; the plugin then does its part; the socket comm stays
 *            in the receiver (socket_recv) for the plugin to keep or close.
 *   connect: net_handshake_sender_get finds the connect in progress for these
 *            arguments (the const handle cannot hold state) or starts one;
 *            net_handshake_connect until socket_send is set; the plugin
 *            builds its hello; net_handshake_send_hello, then
 *            net_handshake_hello_sent until it reports sent; the plugin's
 *            own steps after that; net_handshake_sender_drop at the end.
 * A step that is not done yet leaves the caller to call
 * net_handshake_*_waiting, which fails the handshake with XCOLL_ERR_TIMEOUT
 * once config->timeout_s passed with no progress.
 *
 * Errors: every function that returns an xcoll_status has already logged
 * its sentence through net_plugin_log.h's net_fail (or the socket plugin
 * has), with the plugin's name ("net ucx: ...") where it is ours. */
#ifndef XCOLL_NET_HANDSHAKE_H
#define XCOLL_NET_HANDSHAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "net.h"

/* Where the socket plugin's handle starts in a plugin handle, bytes. */
#define NET_HANDSHAKE_INNER_OFFSET 8

/* Once from the plugin's init, with init's log (NULL keeps the previous
 * one): the socket plugin's init, and the log of this file's messages (the
 * latest plugin's, as for the socket plugin: the plugins of one process
 * share xcoll_net_log_bridge in practice). Errors: the socket plugin's
 * init's. */
xcoll_status net_handshake_init(xcoll_net_log_fn log);

/* ---- the receiving side (listen, accept) ---- */

typedef enum net_handshake_stage {
  NET_HANDSHAKE_CONNECTING = 0, /* waiting for the socket connection */
  NET_HANDSHAKE_HELLO = 1,      /* the hello is in flight */
  NET_HANDSHAKE_DONE = 2        /* the hello arrived (or left): plugin's turn */
} net_handshake_stage;

typedef struct net_handshake_receiver {
  xcoll_net_listen_comm *socket_listen;
  xcoll_net_config config; /* listen's; its secret pointer is not used */
  net_handshake_stage stage;
  xcoll_net_recv_comm *socket_recv; /* the accepted connection, or NULL */
  xcoll_net_request *socket_request;
  double deadline; /* CLOCK_MONOTONIC seconds, from the socket accept */
} net_handshake_receiver;

/* Listen on the socket plugin's device for the bootstrap connection, and
 * write the plugin handle's first part to handle (XCOLL_NET_HANDLE_MAXSIZE
 * bytes, zeroed first): magic, version, then the first inner_bytes (at most
 * XCOLL_NET_HANDLE_MAXSIZE - NET_HANDSHAKE_INNER_OFFSET) of the socket
 * plugin's handle. r is zeroed first. Errors: the socket plugin's listen's. */
xcoll_status net_handshake_listen(net_handshake_receiver *r, int device,
                                  const xcoll_net_config *config,
                                  uint32_t magic, uint32_t version,
                                  size_t inner_bytes, void *handle);

/* Accept expected_rank's bootstrap connection and receive its hello (at most
 * capacity bytes) into hello. *received is 1 and *size the hello's size in
 * bytes once it arrived (r->stage is then NET_HANDSHAKE_DONE; a later call
 * reports it again); 0 while it has not (call again). Errors: the socket
 * plugin's (a stranger's connection is not one: it is dropped and the accept
 * goes on); XCOLL_ERR_TIMEOUT, "net <plugin>: rank R's handshake with rank P
 * made no progress in T s", when the hello has not come within
 * config->timeout_s of the connection. On error the caller cleans up
 * (net_handshake_receiver_reset). */
xcoll_status net_handshake_receive_hello(net_handshake_receiver *r,
                                         const char *plugin, int expected_rank,
                                         void *hello, size_t capacity,
                                         int *received, size_t *size);

/* For a plugin step after the hello that is not done yet: XCOLL_SUCCESS
 * while r's deadline has not passed, else XCOLL_ERR_TIMEOUT with the same
 * sentence as net_handshake_receive_hello's. */
xcoll_status net_handshake_receiver_waiting(const net_handshake_receiver *r,
                                            const char *plugin,
                                            int expected_rank);

/* Forget the connection being accepted (closing its socket comm, if the
 * plugin has not taken it) and start again at NET_HANDSHAKE_CONNECTING. */
void net_handshake_receiver_reset(net_handshake_receiver *r);

/* net_handshake_receiver_reset, then close the socket listen. */
void net_handshake_receiver_close(net_handshake_receiver *r);

/* ---- the connecting side (connect) ---- */

/* One connect in progress. A plugin's own state of it is a struct whose
 * first member is this, allocated by net_handshake_sender_get. */
typedef struct net_handshake_sender {
  uint8_t key_handle[XCOLL_NET_HANDLE_MAXSIZE]; /* the key: the handle, */
  uint64_t comm_id;                             /* comm_id, rank and */
  int rank, peer_rank;                          /* peer_rank */
  double timeout_s;
  double deadline; /* CLOCK_MONOTONIC seconds, from the first call */
  net_handshake_stage stage;
  xcoll_net_send_comm *socket_send; /* set once the socket connected */
  xcoll_net_request *socket_request;
  struct net_handshake_sender *next;
} net_handshake_sender;

/* The connects in progress of one plugin. */
typedef struct net_handshake_senders {
  pthread_mutex_t lock;
  net_handshake_sender *head;
} net_handshake_senders;
#define NET_HANDSHAKE_SENDERS_INIT                                             \
  { PTHREAD_MUTEX_INITIALIZER, NULL }

/* The connect in progress in list for (handle, config->comm_id,
 * config->rank, peer_rank), or a new one of bytes bytes (>= sizeof
 * net_handshake_sender; all but the key zeroed) with its deadline
 * config->timeout_s from now, in *sender. Thread-safe. Errors:
 * XCOLL_ERR_NO_MEMORY. */
xcoll_status net_handshake_sender_get(net_handshake_senders *list,
                                      const char *plugin, const void *handle,
                                      const xcoll_net_config *config,
                                      int peer_rank, size_t bytes,
                                      net_handshake_sender **sender);

/* Connect the bootstrap socket to the socket plugin's handle inside handle
 * (inner_bytes of it, as net_handshake_listen wrote). s->socket_send stays
 * NULL while the connection is not made (call again). Errors: the socket
 * plugin's connect's. */
xcoll_status net_handshake_connect(net_handshake_sender *s, int device,
                                   const xcoll_net_config *config,
                                   const void *handle, size_t inner_bytes);

/* Start sending the hello (bytes bytes at hello, which must stay until it is
 * sent) over the connected socket; s->stage becomes NET_HANDSHAKE_HELLO.
 * Errors: the socket plugin's isend's; XCOLL_ERR_INTERNAL when the fresh
 * socket comm has no room for it. */
xcoll_status net_handshake_send_hello(net_handshake_sender *s,
                                      const char *plugin, const void *hello,
                                      size_t bytes);

/* *sent is 1 once the hello has left (s->stage is then NET_HANDSHAKE_DONE),
 * 0 while it has not (call again). Errors: the socket plugin's test's. */
xcoll_status net_handshake_hello_sent(net_handshake_sender *s, int *sent);

/* For a step of a connect that is not done yet: XCOLL_SUCCESS while s's
 * deadline has not passed, else XCOLL_ERR_TIMEOUT, "net <plugin>: rank R's
 * connection to rank P made no progress in T s". */
xcoll_status net_handshake_sender_waiting(const net_handshake_sender *s,
                                          const char *plugin);

/* Take s out of list, close its socket comm (if the plugin has not taken
 * it) and free it. The plugin releases its own state first. */
void net_handshake_sender_drop(net_handshake_senders *list,
                               net_handshake_sender *s);

#endif
