/* ibverbs_internal.h - what the two files of the ibverbs net plugin share,
 * private to net/ibverbs/: net_ibverbs.c (the plugin's table, memory
 * registration and the data path) and ibverbs_setup.c (the device, the
 * registration cache, the comms and their queue pairs, and listen,
 * connect, accept). Each function's comment is at its definition. */
#ifndef XCOLL_NET_IBVERBS_INTERNAL_H
#define XCOLL_NET_IBVERBS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "ibv_wrap.h"
#include "net.h"

#define IBN_SLOTS XCOLL_NET_MAX_REQUESTS
#define IBN_MESSAGE_BYTES 512
/* Test hooks (XCOLL_IB_DEBUG_FAULT): protocol bugs made on purpose, to show
 * that the tests over the emulator catch them. */
#define IBN_FAULT_NONE 0
#define IBN_FAULT_SKIP_CTS 1  /* isend writes without waiting for its CTS */
#define IBN_FAULT_BAD_RKEY 2  /* irecv advertises a wrong rkey */
#define IBN_FAULT_REUSE_CTS 3 /* every 5th isend takes the previous CTS again  \
                               */

/* ---- the device ---- */

typedef struct ibn_device {
  const xcoll_ibv_api *api;
  struct ibv_context *context;
  struct ibv_pd *pd;
  char name[64];
  uint8_t port;
  int gid_index;
  int link_layer; /* IBV_LINK_LAYER_* */
  uint16_t lid;
  union ibv_gid gid;
  enum ibv_mtu mtu;
  long timeout;   /* XCOLL_IB_TIMEOUT: 4.096 us * 2^timeout per retry */
  long retry_cnt; /* XCOLL_IB_RETRY_CNT */
  int fault;      /* XCOLL_IB_DEBUG_FAULT: IBN_FAULT_* */
} ibn_device;

/* ---- memory registrations, cached per buffer ---- */

typedef struct ibn_mr {
  void *addr;
  size_t bytes;
  struct ibv_mr *mr;
  int refs;
  struct ibn_mr *next;
} ibn_mr;

/* ---- comms ---- */

/* One CTS entry as it lies in the sender's FIFO (32 bytes). */
typedef struct ibn_cts {
  uint64_t seq; /* k + 1 */
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  uint32_t tag;
  uint32_t seq_end; /* (k + 1) low bits again: the entry is whole */
} ibn_cts;

typedef struct ibn_qp_info {
  uint32_t qpn, psn;
  uint16_t lid;
  uint8_t mtu;
  union ibv_gid gid;
} ibn_qp_info;

typedef struct ibn_comm ibn_comm;

typedef struct ibn_request {
  ibn_comm *comm;
  int used;
  int done;
  int failed; /* posted on a failed comm: test reports the comm's error */
  uint32_t tag;
  size_t bytes; /* asked for (receive: capacity) */
  size_t got;   /* sent or received */
  /* Receive: the registration its clear-to-send names, held until the
   * request is released or its comm closed (ibn_mr_hold). */
  struct ibn_mr *mr;
} ibn_request;

struct ibn_comm {
  int is_send;
  int rank, peer_rank;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  ibn_qp_info mine;
  uint64_t posted; /* messages started */
  int in_flight;
  xcoll_status error;
  char error_text[IBN_MESSAGE_BYTES];
  ibn_request requests[IBN_SLOTS];
  /* Send side: the FIFO the receiver writes CTS entries into. */
  ibn_cts *fifo;
  ibn_mr *fifo_mr;
  int max_cts; /* send: most CTS entries found waiting; recv: most out */
  /* Receive side: the CTS entries as written from, and the sender's FIFO. */
  ibn_cts *cts_out;
  ibn_mr *cts_mr;
  uint64_t remote_fifo;
  uint32_t remote_rkey;
  /* The bootstrap connection: a liveness check on the receive side. */
  xcoll_net_send_comm *socket_send;
  xcoll_net_recv_comm *socket_recv;
  xcoll_net_request *liveness;
  uint8_t liveness_byte;
};

/* ---- ibverbs_setup.c ---- */

/* The device, opened once per process; its fields hold once init has
 * succeeded. */
extern ibn_device ibn_dev;
ibn_mr *ibn_mr_get(void *addr, size_t bytes);
void ibn_mr_put(ibn_mr *m);
/* One more reference on m, for a posted receive: its clear-to-send gave
 * the sender m's key, so m stays registered until the receive completes or
 * its comm's QP is destroyed. A caller that deregisters a buffer and then
 * closes the comm (the engine's order at teardown) thus never leaves a key
 * the sender may still write to: the sender sees the closed QP (retry
 * exceeded: XCOLL_ERR_REMOTE, a peer that left), not a refused key
 * (XCOLL_ERR_PROTOCOL). */
void ibn_mr_hold(ibn_mr *m);
void ibn_comm_free(ibn_comm *c);
/* The plugin's init, but for net_ibverbs.c's copy of the log function. */
xcoll_status ibn_setup_init(xcoll_net_log_fn log);
xcoll_status ib_devices(int *count);
xcoll_status ib_get_properties(int device_index, xcoll_net_properties *p);
xcoll_status ib_listen(int device_index, const xcoll_net_config *config,
                       void *handle, xcoll_net_listen_comm **listen_comm);
xcoll_status ib_accept(xcoll_net_listen_comm *listen_comm, int expected_rank,
                       xcoll_net_recv_comm **recv_comm);
xcoll_status ib_connect(int device_index, const xcoll_net_config *config,
                        const void *handle, int peer_rank,
                        xcoll_net_send_comm **send_comm);
void ib_close_listen(xcoll_net_listen_comm *listen_comm);

#endif
