/* tcp.h - internal state of the tcp backend (Gloo-like: host-driven
 * algorithms over a full mesh of TCP connections). Shared by tcp_connect.c
 * (address choice, listening, building the mesh) and tcp_p2p.c (the p2p
 * interface and its progress engine). See docs/tcp.md. */
#ifndef XCOLL_TCP_TCP_H
#define XCOLL_TCP_TCP_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "blame.h"
#include "comm.h"
#include "p2p.h"
#include "wire.h"
#include "xcoll.h"

/* Most sockets per peer (XCOLL_NSOCKS_PERPEER's upper bound). */
#define TCP_MAX_SOCKS 16
/* Messages of at least this many bytes are striped over all of a peer's
 * sockets when there are several; smaller ones ride one socket. */
#define TCP_STRIPE_MIN_BYTES (128u << 10)
/* Pipelining chunk (bytes) the tcp backend asks core's algorithms for when
 * XCOLL_CHUNK_SIZE is unset. Measured on 2 cores over loopback (float32 sum,
 * P=2, 2-16 MiB): 128 KiB ran 1.5-2x faster than core's 512 KiB default and
 * than 32 or 64 KiB; with 512 KiB a chunk's socket copy, peer copy and
 * reduction no longer share the cache. docs/tcp.md has the table. */
#define TCP_DEFAULT_CHUNK_BYTES ((size_t)128 << 10)
/* SO_SNDBUF and SO_RCVBUF asked for on every data socket (bytes). */
#define TCP_SOCKET_BUFFER_BYTES (4 << 20)
/* Text form of an address: "host:port". */
#define TCP_ADDR_BYTES 80

/* One slice of a request's bytes on one socket: a header and the payload
 * slice that follows it on that socket. */
typedef struct tcp_part {
  struct tcp_part *next; /* in its socket's tx or rx queue */
  struct xcoll_p2p_request *request;
  char *buf;    /* the slice of the user's buffer */
  size_t bytes; /* slice length */
  size_t done;  /* payload bytes moved so far */
  uint32_t header_done; /* tx: header bytes sent so far */
  uint8_t header[XCOLL_WIRE_HEADER_BYTES]; /* tx: encoded header */
} tcp_part;

typedef enum tcp_request_state {
  TCP_REQUEST_FREE = 0,
  TCP_REQUEST_ACTIVE,
  TCP_REQUEST_DONE,
  TCP_REQUEST_FAILED /* the communicator broke before it completed */
} tcp_request_state;

struct xcoll_p2p_request {
  struct xcoll_p2p_request *next_free;
  int state;   /* tcp_request_state */
  int is_send;
  int peer;
  int parts_left;
  uint64_t tag;
  size_t bytes;
  tcp_part parts[]; /* nsocks entries */
};

typedef struct tcp_socket {
  int fd;
  int peer;
  int index; /* 0..nsocks-1 among the peer's sockets */
  tcp_part *tx_head, *tx_tail;
  tcp_part *rx_head, *rx_tail;
  /* Receive side: the next header, read eagerly (so that ABORT and BYE are
   * seen even when nothing is posted) and held until a receive matches it. */
  uint8_t rx_header[XCOLL_WIRE_HEADER_BYTES];
  uint32_t rx_header_got;
  int rx_in_payload; /* header accepted: payload flows into rx_head */
  xcoll_wire_header rx_decoded;
  int bye_received; /* the peer destroyed its communicator normally */
  int closed;       /* EOF after BYE: no longer polled */
  int hup_deferred; /* peer hung up behind a held message: look again once it is consumed */
  int tx_broken;    /* a send stopped mid-message: the stream can't be used */
} tcp_socket;

typedef struct tcp_peer {
  char addr[TCP_ADDR_BYTES]; /* where it listens, "host:port" */
  tcp_socket *socks;         /* nsocks entries */
  uint64_t tx_messages;      /* messages posted to it (both ends count) */
  uint64_t rx_messages;      /* messages posted from it */
} tcp_peer;

typedef struct tcp_request_slab {
  struct tcp_request_slab *next;
  /* requests follow */
} tcp_request_slab;

typedef struct tcp_state {
  xcoll_comm *comm;
  int rank;
  int world_size;
  int nsocks;
  uint64_t comm_id;
  double timeout_s;

  int listen_fd;
  char my_addr[TCP_ADDR_BYTES];
  tcp_peer *peers;      /* world_size entries; peers[rank] unused */
  tcp_socket *sockets;  /* (world_size - 1) * nsocks, grouped by peer */
  int nsockets;
  struct pollfd *pollfds; /* nsockets + 1 (the wake eventfd last) */
  int wake_fd;            /* eventfd written by comm_abort */

  size_t request_bytes;
  struct xcoll_p2p_request *free_requests;
  tcp_request_slab *slabs;

  /* Held by the thread that runs the collective while it touches sockets;
   * comm_abort only try-locks it, to send ABORT itself when nobody waits. */
  pthread_mutex_t io_lock;
  _Atomic int aborted;
  int broken; /* xcoll_status that broke the communicator, or 0 */
  /* This rank's collective now and the one before, as the p2p engine last
   * saw comm->fingerprint: incoming fingerprints are judged against them. */
  xcoll_fingerprint fp_current;
  xcoll_fingerprint fp_previous;
  /* The communicator broke on a collective mismatch: its ABORT carries
   * XCOLL_ERR_PROTOCOL, so that every rank fails with it (other failures
   * reach the peers as XCOLL_ERR_REMOTE). */
  int broken_by_desync;
  char broken_message[XCOLL_ERROR_BYTES];
  /* Stall records in the store, to name the rank that stopped when a wait
   * times out (core/blame.h). */
  xcoll_blame blame;
} tcp_state;

/* tcp_connect.c: listen, publish the address, connect the full mesh. */
xcoll_status xcoll_tcp_connect_mesh(tcp_state *st);
/* Log a failure-free close: send BYE where possible, close every fd. */
void xcoll_tcp_close_sockets(tcp_state *st);
/* At destroy of a communicator that did not break: a WARN per peer whose
 * DATA message has arrived (its header held, or waiting in the socket) and
 * no call of this rank received, naming the peer and its call. What is
 * still on its way is not seen. */
void xcoll_tcp_report_unreceived(tcp_state *st);

/* tcp_p2p.c */
extern const xcoll_p2p_ops xcoll_tcp_p2p_ops;
/* Break the communicator with status and a message (first failure wins),
 * tell peers with ABORT (origin: the rank at the root of the failure), mark
 * every pending request failed. Returns the status that broke it. */
xcoll_status xcoll_tcp_fail(tcp_state *st, xcoll_status status, int origin,
                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Monotonic clock in seconds. */
double xcoll_tcp_now(void);

#endif
