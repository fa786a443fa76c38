/* socket_internal.h - what the files of the socket net plugin share,
 * private to net/socket/: net_socket.c (the plugin's table, its device, the
 * data comms and their data path), socket_conn.c (what both ends of a
 * connection share, and the connect side) and socket_listen.c (the
 * listener and the accept side). Each function's comment is at its
 * definition. */
#ifndef XCOLL_NET_SOCKET_INTERNAL_H
#define XCOLL_NET_SOCKET_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "auth.h"
#include "net.h"
#include "net_socket_wire.h"
#include "netaddr.h"

#define SOCK_ADDR_BYTES 64
#define SOCK_MESSAGE_BYTES 512

/* Sizes on the wire: the client's first message (hello, offer, hello tag),
 * the server's offer and proof, the client's proof (only with a secret).
 * The hello tag is HMAC(secret, "hello" | context | client nonce | zeros)
 * (auth.h's proof with role "hello" and a zero server nonce): a listener
 * knows a rank from a stranger before it answers, and a connection with a
 * valid first message is never shed for a stranger's. */
#define SOCK_CLIENT_SEND                                                       \
  (SOCK_HELLO_BYTES + XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)
#define SOCK_SERVER_ANSWER (XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)

/* ---- net_socket.c: the device and the data comms ---- */

typedef struct sock_comm sock_comm;

/* One isend or irecv; lives in its comm's ring of XCOLL_NET_MAX_REQUESTS. */
typedef struct sock_request {
  sock_comm *comm;
  int used;
  uint64_t seq;      /* position in the comm's message order */
  char *data;
  size_t bytes;      /* posted: send size, or receive capacity */
  uint32_t tag;
  size_t size;       /* the message's size (receives: once header_known) */
  int header_known;  /* receives: socket 0 has read this message's header */
  int parts_left;    /* sockets still moving a part of this message */
  size_t part_done[SOCK_MAX_NSOCKS]; /* bytes of each socket's part moved */
  uint8_t header[SOCK_HEADER_BYTES]; /* sends: the encoded header */
} sock_request;

struct sock_comm {
  int is_send;
  int nsocks;
  int fds[SOCK_MAX_NSOCKS];
  int peer_rank;
  char peer[SOCK_ADDR_BYTES]; /* the peer's address, for messages */
  uint64_t posted;            /* messages posted so far */
  uint64_t cursor[SOCK_MAX_NSOCKS]; /* message each socket works on */
  size_t header_done; /* sends: header bytes of socket 0's message sent */
  xcoll_status error;         /* first failure; sticks */
  char error_text[SOCK_MESSAGE_BYTES];
  int error_expected; /* the peer closed at a message boundary (see fail) */
  sock_request requests[XCOLL_NET_MAX_REQUESTS];
  /* Recv comms: bytes read from socket 0 that no message has taken yet,
   * stage[stage_start, stage_end) of SOCK_STAGE_BYTES (docs/net-plugins.md,
   * "System calls per message"); send comms have no stage. */
  size_t stage_start, stage_end;
  uint8_t stage[];
};

/* The device's addresses (core/netaddr.h), once sock_check_device passed. */
extern xcoll_netaddr sock_device_addr;
xcoll_status sock_check_device(int device);
sock_comm *sock_comm_new(int is_send, int nsocks, const int *fds,
                         int peer_rank, const char *peer);

/* ---- socket_conn.c: what both ends share, and the connect side ---- */

void sock_conn_log_set(xcoll_net_log_fn log);
double sock_now_s(void);
void sock_format_addr(const struct sockaddr_in *sa, char *out);
xcoll_status sock_read_unix(int *use);
extern pthread_once_t sock_host_once;
extern int sock_host_id_ok;
extern uint8_t sock_host_id[SOCK_HOST_ID_BYTES];
void sock_host_init(void);
socklen_t sock_unix_address(uint64_t nonce, struct sockaddr_un *sa);
void sock_auth_context(uint64_t comm_id, int connector, int acceptor,
                       int index, uint64_t nonce, char *out);
xcoll_status sock_auth_ready(void);
double sock_timeout_of(const xcoll_net_config *config);
xcoll_status socket_connect(int device, const xcoll_net_config *config,
                            const void *handle, int peer_rank,
                            xcoll_net_send_comm **send_comm);

/* ---- socket_listen.c: the listener and the accept side ---- */

void sock_listen_log_set(xcoll_net_log_fn log);
xcoll_status socket_listen(int device, const xcoll_net_config *config,
                           void *handle, xcoll_net_listen_comm **listen_comm);
xcoll_status socket_accept(xcoll_net_listen_comm *listen_comm,
                           int expected_rank, xcoll_net_recv_comm **recv_comm);
void socket_close_listen(xcoll_net_listen_comm *listen_comm);

#endif
