/* net_ibverbs.c - the "ibverbs" net plugin (xcoll_net_ibverbs): the net API
 * of net/net.h over RDMA verbs, host memory only, with the receiver-driven
 * flow of NCCL's net_ib (src/transport/net_ib.cc, NCCL 2.18-2.21, read for
 * the protocol, not copied).
 *
 * Connection (one reliable-connected queue pair per comm):
 *   listen:  open the QP (RESET -> INIT) and put its number, PSN, LID, GID
 *            and MTU in the handle, next to a socket-plugin handle for the
 *            bootstrap connection (authenticated by the socket plugin; the
 *            socket part of listen, connect and accept is net/handshake.c,
 *            shared with ucx).
 *   connect: socket connect; QP INIT -> RTR -> RTS towards the listener's QP;
 *            send the hello {QP number, PSN, LID, GID, MTU, address and rkey
 *            of this comm's CTS FIFO} over the socket.
 *   accept:  socket accept; the hello arrives; QP INIT -> RTR -> RTS towards
 *            the sender's QP. The socket stays open as a liveness check: a
 *            dead sender closes it, which a QP on its own would only notice
 *            when it next writes, after the retry timer.
 *
 * Messages, k-th on a comm (slot k % IBN_SLOTS):
 *   irecv:   post a receive WR (it takes the immediate of the data write),
 *            then RDMA-write a clear-to-send entry {address, rkey, size, tag,
 *            index} into slot k of the sender's FIFO.
 *   isend:   no CTS for k yet: return a NULL request (back-pressure). Else
 *            check the tag and the size, RDMA-write the data to the CTS's
 *            address with RDMA_WRITE_WITH_IMM, the immediate being the size.
 *   test:    poll the comm's CQ; a send completes at its write's completion,
 *            a receive at the immediate's (which RC orders after the data).
 * A CTS entry carries k + 1 at both ends, so a torn or stale entry is never
 * taken for the k-th one, and the sender clears it once used. At most
 * IBN_SLOTS messages are in flight per comm; the receiver asks the engine
 * to keep that many receives posted (properties.recvs_ahead).
 *
 * Errors, each naming the peer rank: a CQ error fails the comm, with
 * XCOLL_ERR_REMOTE when the peer is gone (retry or RNR retry exceeded,
 * flushed WRs) and XCOLL_ERR_PROTOCOL when its NIC refused a key or an
 * address (remote access error); a receiver whose bootstrap socket closes
 * is XCOLL_ERR_REMOTE (a dead sender, seen at once). A tag mismatch or an
 * oversize message is XCOLL_ERR_PROTOCOL on both ends (the sender tells the
 * receiver with a reserved immediate value).
 *
 * Test hooks (never for production): XCOLL_IB_DEBUG_FAULT=skip_cts makes
 * isend write without waiting for its CTS; =reuse_cts makes every 5th isend
 * take the previous message's CTS again; =bad_rkey makes irecv advertise a
 * wrong rkey. tests/ibverbs.cmake checks that each is caught. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env.h"
#include "error.h"
#include "handshake.h"
#include "ibv_wrap.h"
#include "net.h"
#include "net_plugin_log.h"
#include "params.h"

#define IBN_HANDLE_MAGIC 0x48494e58u /* bytes "XNIH" */
#define IBN_HELLO_MAGIC 0x43494e58u  /* bytes "XNIC" */
#define IBN_VERSION 1
/* The socket handle, from NET_HANDSHAKE_INNER_OFFSET (8): its first 32
 * bytes. The host id after them (net/socket/net_socket_wire.h) is cut, so
 * the bootstrap connection, which carries one hello, is always TCP. */
#define IBN_INNER_BYTES 32
#define IBN_QP_OFFSET 40 /* qpn u32 | psn u32 | lid u16 | mtu u8 | 0 | gid */
#define IBN_HELLO_BYTES                                                        \
  64 /* magic | version | qp info (28) | fifo u64 | rkey */
#define IBN_SLOTS XCOLL_NET_MAX_REQUESTS
#define IBN_CQ_BATCH 16
#define IBN_MESSAGE_BYTES 512
/* Reserved immediates (a size is at most IBN_MAX_MESSAGE). */
#define IBN_IMM_TRUNCATED 0xffffffffu
#define IBN_IMM_BAD_TAG 0xfffffffeu
#define IBN_MAX_MESSAGE 0xfffffff0u
/* Test hooks (XCOLL_IB_DEBUG_FAULT): protocol bugs made on purpose, to show
 * that the tests over the emulator catch them. */
#define IBN_FAULT_NONE 0
#define IBN_FAULT_SKIP_CTS 1  /* isend writes without waiting for its CTS */
#define IBN_FAULT_BAD_RKEY 2  /* irecv advertises a wrong rkey */
#define IBN_FAULT_REUSE_CTS 3 /* every 5th isend takes the previous CTS again  \
                               */
/* wr_id of a CTS write: the request slot with this bit. */
#define IBN_WR_CTS 0x100u

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* ---- the device: opened once per process ---- */

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

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static xcoll_status device_status = XCOLL_ERR_NOT_SUPPORTED;
static char device_error[IBN_MESSAGE_BYTES];
static ibn_device device;
/* Outstanding CTS entries at once, for the INFO line at close (a check that
 * slots are kept in flight, not a speed): written by a receiver and not yet
 * answered by data, in any recv comm of the process; and found waiting in
 * a sender's FIFO at an isend, in any send comm. */
static _Atomic int max_outstanding_cts;
static _Atomic int max_cts_waiting;

static void raise_to(_Atomic int *max, int value) {
  int old = atomic_load(max);
  while (value > old && !atomic_compare_exchange_weak(max, &old, value)) {
  }
}

static void set_device_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void set_device_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(device_error, sizeof device_error, fmt, ap);
  va_end(ap);
}

/* Does this device name appear in XCOLL_IB_HCA (comma-separated names, an
 * optional ":port" ignored here; unset: every device qualifies)? */
static int hca_wanted(const char *hca, const char *name) {
  if (hca == NULL)
    return 1;
  size_t n = strlen(name);
  const char *p = hca;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    size_t name_len = colon ? (size_t)(colon - p) : len;
    if (name_len == n && strncmp(p, name, n) == 0)
      return 1;
    if (!end)
      break;
    p = end + 1;
  }
  return 0;
}

static void open_device(void) {
  char why[IBN_MESSAGE_BYTES];
  const xcoll_ibv_api *api = xcoll_ibv_load(why, sizeof why);
  if (api == NULL) {
    set_device_error("net ibverbs: no RDMA device was found: %s (install "
                     "libibverbs1 and an RDMA NIC driver, or use "
                     "XCOLL_NET=socket)",
                     why);
    return;
  }
  device.api = api;
  /* Defaults and ranges from core/params.c's table, which xcoll-info
   * prints and checks. */
  long gid_index = 0, timeout = 20, retry = 7;
  int fault = -1; /* index in the table's choices: skip_cts, reuse_cts,
                     bad_rkey */
  if (xcoll_param_int("XCOLL_IB_GID_INDEX", &gid_index) != XCOLL_SUCCESS ||
      xcoll_param_int("XCOLL_IB_TIMEOUT", &timeout) != XCOLL_SUCCESS ||
      xcoll_param_int("XCOLL_IB_RETRY_CNT", &retry) != XCOLL_SUCCESS ||
      xcoll_param_choice("XCOLL_IB_DEBUG_FAULT", &fault) != XCOLL_SUCCESS) {
    device_status = XCOLL_ERR_ENV;
    set_device_error("net ibverbs: %s", xcoll_last_error());
    return;
  }
  static const int faults[] = {IBN_FAULT_SKIP_CTS, IBN_FAULT_REUSE_CTS,
                               IBN_FAULT_BAD_RKEY};
  if (fault >= 0)
    device.fault = faults[fault];
  device.gid_index = (int)gid_index;
  device.timeout = timeout;
  device.retry_cnt = retry;

  int count = 0;
  struct ibv_device **list = api->get_device_list(&count);
  if (list == NULL || count <= 0) {
    if (list == NULL)
      set_device_error("net ibverbs: no RDMA device was found "
                       "(ibv_get_device_list failed: %s; is an RDMA kernel "
                       "driver loaded?); use XCOLL_NET=socket",
                       strerror(errno));
    else
      set_device_error("net ibverbs: no RDMA device was found "
                       "(ibv_get_device_list lists none); use "
                       "XCOLL_NET=socket");
    if (list)
      api->free_device_list(list);
    return;
  }
  const char *hca = xcoll_env_str("XCOLL_IB_HCA");
  char seen[256] = "";
  size_t used = 0;
  for (int i = 0; i < count && device.context == NULL; i++) {
    const char *name = api->get_device_name(list[i]);
    if (name == NULL)
      continue;
    used += (size_t)snprintf(seen + used,
                             used < sizeof seen ? sizeof seen - used : 0,
                             "%s%s", used ? " " : "", name);
    if (used >= sizeof seen)
      used = sizeof seen - 1;
    if (!hca_wanted(hca, name))
      continue;
    struct ibv_context *ctx = api->open_device(list[i]);
    if (ctx == NULL)
      continue;
    /* The first active port. */
    for (uint8_t port = 1; port <= 4; port++) {
      struct ibv_port_attr attr;
      memset(&attr, 0, sizeof attr);
      if (api->query_port(ctx, port, &attr) != 0)
        break;
      if (attr.state != IBV_PORT_ACTIVE)
        continue;
      device.context = ctx;
      device.port = port;
      device.lid = attr.lid;
      device.link_layer = attr.link_layer;
      device.mtu = attr.active_mtu;
      snprintf(device.name, sizeof device.name, "%s:%d", name, port);
      break;
    }
    if (device.context == NULL)
      api->close_device(ctx);
  }
  api->free_device_list(list);
  if (device.context == NULL) {
    set_device_error("net ibverbs: no RDMA device was found with an active "
                     "port%s%s (devices: %s)",
                     hca ? " matching XCOLL_IB_HCA=" : "", hca ? hca : "",
                     seen);
    return;
  }
  if (api->query_gid(device.context, device.port, device.gid_index,
                     &device.gid) != 0) {
    set_device_error("net ibverbs: %s has no GID at index %d "
                     "(XCOLL_IB_GID_INDEX)",
                     device.name, device.gid_index);
    api->close_device(device.context);
    device.context = NULL;
    return;
  }
  device.pd = api->alloc_pd(device.context);
  if (device.pd == NULL) {
    set_device_error("net ibverbs: ibv_alloc_pd on %s failed: %s", device.name,
                     strerror(errno));
    api->close_device(device.context);
    device.context = NULL;
    return;
  }
  device_status = XCOLL_SUCCESS;
}

/* ---- memory registrations, cached per buffer ---- */

typedef struct ibn_mr {
  void *addr;
  size_t bytes;
  struct ibv_mr *mr;
  int refs;
  struct ibn_mr *next;
} ibn_mr;

static pthread_mutex_t mr_lock = PTHREAD_MUTEX_INITIALIZER;
static ibn_mr *mr_list;

/* A registration covering [addr, addr + bytes), registering it the first
 * time; NULL with errno when ibv_reg_mr fails. */
static ibn_mr *mr_get(void *addr, size_t bytes) {
  pthread_mutex_lock(&mr_lock);
  ibn_mr *m = mr_list;
  while (m && !(m->addr == addr && m->bytes == bytes))
    m = m->next;
  if (m == NULL) {
    m = calloc(1, sizeof *m);
    if (m != NULL) {
      m->mr =
          device.api->reg_mr(device.pd, addr, bytes,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (m->mr == NULL) {
        int e = errno;
        free(m);
        m = NULL;
        errno = e;
      } else {
        m->addr = addr;
        m->bytes = bytes;
        m->next = mr_list;
        mr_list = m;
      }
    } else {
      errno = ENOMEM;
    }
  }
  if (m != NULL)
    m->refs++;
  pthread_mutex_unlock(&mr_lock);
  return m;
}

static void mr_put(ibn_mr *m) {
  if (m == NULL)
    return;
  pthread_mutex_lock(&mr_lock);
  if (--m->refs == 0) {
    for (ibn_mr **p = &mr_list; *p; p = &(*p)->next)
      if (*p == m) {
        *p = m->next;
        break;
      }
    device.api->dereg_mr(m->mr);
    free(m);
  }
  pthread_mutex_unlock(&mr_lock);
}

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

/* Record the comm's first error (later ones are consequences), silently:
 * poll_comm reports it once. */
static void comm_set(ibn_comm *c, xcoll_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void comm_set(ibn_comm *c, xcoll_status status, const char *fmt, ...) {
  if (c->error != XCOLL_SUCCESS)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->error_text, sizeof c->error_text, fmt, ap);
  va_end(ap);
  c->error = status;
}

/* Record and report: the comm's (first) error, logged, as the status. */
#define comm_fail(c, status, ...)                                              \
  (comm_set((c), (status), __VA_ARGS__),                                       \
   net_fail((c)->error, "%s", (c)->error_text))

static const char *wc_text(enum ibv_wc_status status) {
  const char *t = device.api->wc_status_str(status);
  return t ? t : "unknown status";
}

static void comm_free(ibn_comm *c) {
  if (c == NULL)
    return;
  const xcoll_ibv_api *api = device.api;
  if (c->qp)
    api->destroy_qp(c->qp);
  if (c->cq)
    api->destroy_cq(c->cq);
  mr_put(c->fifo_mr);
  mr_put(c->cts_mr);
  free(c->fifo);
  free(c->cts_out);
  if (c->socket_send)
    xcoll_net_socket.close_send(c->socket_send);
  if (c->socket_recv)
    xcoll_net_socket.close_recv(c->socket_recv);
  free(c);
}

/* A comm with its CQ and an RC QP in INIT, and (send side) its FIFO. */
static ibn_comm *comm_new(int is_send, int rank, int peer_rank, char *err,
                          size_t err_bytes) {
  const xcoll_ibv_api *api = device.api;
  ibn_comm *c = calloc(1, sizeof *c);
  if (c == NULL) {
    snprintf(err, err_bytes, "no memory");
    return NULL;
  }
  c->is_send = is_send;
  c->rank = rank;
  c->peer_rank = peer_rank;
  for (int i = 0; i < IBN_SLOTS; i++)
    c->requests[i].comm = c;
  /* Send queue: a data write per slot (send side) or a CTS write per slot
   * (receive side); doubled for headroom. */
  c->cq = api->create_cq(device.context, 4 * IBN_SLOTS, NULL, NULL, 0);
  if (c->cq == NULL) {
    snprintf(err, err_bytes, "ibv_create_cq: %s", strerror(errno));
    goto failed;
  }
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.send_cq = c->cq;
  init.recv_cq = c->cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = 2 * IBN_SLOTS;
  init.cap.max_recv_wr = 2 * IBN_SLOTS;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  c->qp = api->create_qp(device.pd, &init);
  if (c->qp == NULL) {
    snprintf(err, err_bytes, "ibv_create_qp: %s", strerror(errno));
    goto failed;
  }
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = device.port;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  int e = api->modify_qp(c->qp, &attr,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                             IBV_QP_ACCESS_FLAGS);
  if (e != 0) {
    snprintf(err, err_bytes, "ibv_modify_qp to INIT: %s", strerror(e));
    goto failed;
  }
  c->mine.qpn = c->qp->qp_num;
  /* A start PSN that differs between comms and runs (any 24-bit value is
   * valid; it only has to match what the peer is told). */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  c->mine.psn = (uint32_t)(((uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)c ^
                            ((uint64_t)c->qp->qp_num << 8)) &
                           0xffffff);
  c->mine.lid = device.lid;
  c->mine.mtu = (uint8_t)device.mtu;
  c->mine.gid = device.gid;
  size_t fifo_bytes = IBN_SLOTS * sizeof(ibn_cts);
  ibn_cts **buffer = is_send ? &c->fifo : &c->cts_out;
  ibn_mr **mr = is_send ? &c->fifo_mr : &c->cts_mr;
  if (posix_memalign((void **)buffer, 4096, fifo_bytes) != 0) {
    snprintf(err, err_bytes, "no memory for the CTS FIFO");
    goto failed;
  }
  memset(*buffer, 0, fifo_bytes);
  *mr = mr_get(*buffer, fifo_bytes);
  if (*mr == NULL) {
    snprintf(err, err_bytes, "ibv_reg_mr of the CTS FIFO: %s", strerror(errno));
    goto failed;
  }
  return c;
failed:
  comm_free(c);
  return NULL;
}

/* INIT -> RTR -> RTS towards the remote QP. Returns 0 or an errno. */
static int qp_connect(ibn_comm *c, const ibn_qp_info *remote,
                      const char **stage) {
  const xcoll_ibv_api *api = device.api;
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = remote->mtu < c->mine.mtu ? (enum ibv_mtu)remote->mtu
                                            : (enum ibv_mtu)c->mine.mtu;
  attr.dest_qp_num = remote->qpn;
  attr.rq_psn = remote->psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.dlid = remote->lid;
  attr.ah_attr.sl = 0;
  attr.ah_attr.src_path_bits = 0;
  attr.ah_attr.port_num = device.port;
  /* RoCE has no LIDs: address by GID (RoCE v2 when XCOLL_IB_GID_INDEX
   * names a v2 GID). InfiniBand within a subnet: by LID, no GRH. */
  if (device.link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote->gid;
    attr.ah_attr.grh.sgid_index = (uint8_t)device.gid_index;
    attr.ah_attr.grh.hop_limit = 255;
  }
  *stage = "RTR";
  int e = api->modify_qp(c->qp, &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                             IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (e != 0)
    return e;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = (uint8_t)device.timeout;
  attr.retry_cnt = (uint8_t)device.retry_cnt;
  attr.rnr_retry = 7; /* a receive not posted yet is waited for */
  attr.sq_psn = c->mine.psn;
  attr.max_rd_atomic = 1;
  *stage = "RTS";
  return api->modify_qp(c->qp, &attr,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC);
}

static void put_qp_info(uint8_t *p, const ibn_qp_info *q) {
  put_u32(p, q->qpn);
  put_u32(p + 4, q->psn);
  put_u16(p + 8, q->lid);
  p[10] = q->mtu;
  p[11] = 0;
  memcpy(p + 12, q->gid.raw, 16);
}
static void get_qp_info(const uint8_t *p, ibn_qp_info *q) {
  q->qpn = get_u32(p);
  q->psn = get_u32(p + 4);
  q->lid = get_u16(p + 8);
  q->mtu = p[10];
  memcpy(q->gid.raw, p + 12, 16);
}
static int qp_info_valid(const ibn_qp_info *q) {
  return q->qpn != 0 && q->qpn <= 0xffffff && q->psn <= 0xffffff &&
         q->mtu >= IBV_MTU_256 && q->mtu <= IBV_MTU_4096;
}

/* ---- init, devices ---- */

static xcoll_status ib_init(xcoll_net_log_fn log) {
  net_plugin_log_set(log);
  xcoll_status s = net_handshake_init(log); /* the bootstrap connection */
  if (s != XCOLL_SUCCESS)
    return s;
  pthread_once(&device_once, open_device);
  if (device_status != XCOLL_SUCCESS)
    return net_fail(device_status, "%s", device_error);
  net_info("net ibverbs: device %s, %s, GID index %d, MTU %d, "
           "XCOLL_IB_TIMEOUT=%ld XCOLL_IB_RETRY_CNT=%ld%s",
           device.name,
           device.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
           device.gid_index, 128 << device.mtu, device.timeout,
           device.retry_cnt,
           device.fault != IBN_FAULT_NONE ? " (TEST HOOK: XCOLL_IB_DEBUG_FAULT "
                                            "set)"
                                          : "");
  return XCOLL_SUCCESS;
}

static xcoll_status ib_devices(int *count) {
  if (count == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT, "net ibverbs: devices(NULL)");
  pthread_once(&device_once, open_device);
  *count = device_status == XCOLL_SUCCESS ? 1 : 0;
  if (*count == 0)
    net_info("%s", device_error);
  return XCOLL_SUCCESS;
}

static xcoll_status ib_get_properties(int device_index,
                                      xcoll_net_properties *p) {
  if (device_index != 0 || p == NULL || device_status != XCOLL_SUCCESS)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: get_properties(%d): there is %s device",
                    device_index,
                    device_status == XCOLL_SUCCESS ? "one, 0, the" : "no");
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", device.name);
  p->ptr_support = XCOLL_NET_PTR_HOST;
  p->max_comms = 65536;
  p->max_requests = IBN_SLOTS;
  /* The sender waits for a CTS per message: slots stay in flight only if
   * the receiver has posted ahead. */
  p->recvs_ahead = IBN_SLOTS;
  return XCOLL_SUCCESS;
}

/* ---- listen / accept ---- */

typedef struct ibn_listen {
  net_handshake_receiver bootstrap;
  ibn_comm *comm; /* its QP's number is in the handle */
  uint8_t hello[IBN_HELLO_BYTES];
} ibn_listen;

static xcoll_status ib_listen(int device_index, const xcoll_net_config *config,
                              void *handle,
                              xcoll_net_listen_comm **listen_comm) {
  if (listen_comm != NULL)
    *listen_comm = NULL;
  if (config == NULL || handle == NULL || listen_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: listen with a NULL config, handle or "
                    "listen_comm");
  if (device_index != 0 || device_status != XCOLL_SUCCESS)
    return net_fail(XCOLL_ERR_NOT_SUPPORTED,
                    "net ibverbs: listen on device "
                    "%d: %s",
                    device_index,
                    device_status == XCOLL_SUCCESS ? "there is one, 0"
                                                   : device_error);
  ibn_listen *l = calloc(1, sizeof *l);
  if (l == NULL)
    return net_fail(XCOLL_ERR_NO_MEMORY, "net ibverbs: no memory");
  char err[256];
  l->comm = comm_new(0, config->rank, -1, err, sizeof err);
  if (l->comm == NULL) {
    free(l);
    return net_fail(XCOLL_ERR_SYSTEM, "net ibverbs: rank %d on %s: %s",
                    config->rank, device.name, err);
  }
  xcoll_status s =
      net_handshake_listen(&l->bootstrap, 0, config, IBN_HANDLE_MAGIC,
                           IBN_VERSION, IBN_INNER_BYTES, handle);
  if (s != XCOLL_SUCCESS) {
    comm_free(l->comm);
    free(l);
    return s;
  }
  put_qp_info((uint8_t *)handle + IBN_QP_OFFSET, &l->comm->mine);
  *listen_comm = (xcoll_net_listen_comm *)l;
  return XCOLL_SUCCESS;
}

static xcoll_status ib_accept(xcoll_net_listen_comm *listen_comm,
                              int expected_rank,
                              xcoll_net_recv_comm **recv_comm) {
  if (recv_comm != NULL)
    *recv_comm = NULL;
  ibn_listen *l = (ibn_listen *)listen_comm;
  if (l == NULL || recv_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: accept with a NULL listen_comm or recv_comm");
  if (l->comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: accept called again after it succeeded "
                    "(one listen takes one connection)");
  int received = 0;
  size_t size = 0;
  xcoll_status s =
      net_handshake_receive_hello(&l->bootstrap, "ibverbs", expected_rank,
                                  l->hello, sizeof l->hello, &received, &size);
  if (s != XCOLL_SUCCESS || !received)
    return s;
  int rank = l->bootstrap.config.rank;
  ibn_qp_info remote;
  get_qp_info(l->hello + 8, &remote);
  if (size != IBN_HELLO_BYTES || get_u32(l->hello) != IBN_HELLO_MAGIC ||
      get_u32(l->hello + 4) != IBN_VERSION || !qp_info_valid(&remote))
    return net_fail(XCOLL_ERR_PROTOCOL,
                    "net ibverbs: rank %d's hello (%zu bytes) is not an "
                    "ibverbs plugin hello: do both ranks use XCOLL_NET=ibverbs "
                    "of the same build?",
                    expected_rank, size);
  ibn_comm *c = l->comm;
  c->peer_rank = expected_rank;
  c->remote_fifo = get_u64(l->hello + 36);
  c->remote_rkey = get_u32(l->hello + 44);
  const char *stage = "";
  int e = qp_connect(c, &remote, &stage);
  if (e != 0)
    return net_fail(XCOLL_ERR_SYSTEM,
                    "net ibverbs: rank %d: moving the QP from rank %d to %s "
                    "failed: %s",
                    rank, expected_rank, stage, strerror(e));
  /* Liveness: a one-byte receive the sender never fills; it fails when the
   * sender's process is gone. */
  c->socket_recv = l->bootstrap.socket_recv;
  l->bootstrap.socket_recv = NULL;
  s = xcoll_net_socket.irecv(c->socket_recv, &c->liveness_byte, 1, 0, NULL,
                             &c->liveness);
  if (s != XCOLL_SUCCESS)
    return s;
  l->comm = NULL;
  net_info("net ibverbs: rank %d accepted rank %d (QP %u <- %u)", rank,
           expected_rank, c->mine.qpn, remote.qpn);
  *recv_comm = (xcoll_net_recv_comm *)c;
  return XCOLL_SUCCESS;
}

/* ---- connect ---- */

/* A connect in progress (see net_handshake_sender_get). */
typedef struct ibn_connecting {
  net_handshake_sender bootstrap; /* first: the handshake allocates it */
  ibn_comm *comm;
  uint8_t hello[IBN_HELLO_BYTES];
} ibn_connecting;

static net_handshake_senders connecting = NET_HANDSHAKE_SENDERS_INIT;

static void connecting_drop(ibn_connecting *k) {
  comm_free(k->comm);
  net_handshake_sender_drop(&connecting, &k->bootstrap);
}

/* The socket is connected: this comm's QP ready towards the listener's
 * (remote), and the hello with its QP and CTS FIFO on its way. */
static xcoll_status send_hello(ibn_connecting *k, int rank, int peer_rank,
                               const ibn_qp_info *remote) {
  char err[256];
  k->comm = comm_new(1, rank, peer_rank, err, sizeof err);
  if (k->comm == NULL)
    return net_fail(XCOLL_ERR_SYSTEM, "net ibverbs: rank %d on %s: %s", rank,
                    device.name, err);
  const char *stage = "";
  int e = qp_connect(k->comm, remote, &stage);
  if (e != 0)
    return net_fail(XCOLL_ERR_SYSTEM,
                    "net ibverbs: rank %d: moving the QP to rank %d to %s "
                    "failed: %s",
                    rank, peer_rank, stage, strerror(e));
  put_u32(k->hello, IBN_HELLO_MAGIC);
  put_u32(k->hello + 4, IBN_VERSION);
  put_qp_info(k->hello + 8, &k->comm->mine);
  put_u64(k->hello + 36, (uint64_t)(uintptr_t)k->comm->fifo);
  put_u32(k->hello + 44, k->comm->fifo_mr->mr->rkey);
  return net_handshake_send_hello(&k->bootstrap, "ibverbs", k->hello,
                                  sizeof k->hello);
}

static xcoll_status ib_connect(int device_index, const xcoll_net_config *config,
                               const void *handle, int peer_rank,
                               xcoll_net_send_comm **send_comm) {
  if (send_comm != NULL)
    *send_comm = NULL;
  if (config == NULL || handle == NULL || send_comm == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: connect with a NULL config, handle or "
                    "send_comm");
  if (device_index != 0 || device_status != XCOLL_SUCCESS)
    return net_fail(XCOLL_ERR_NOT_SUPPORTED,
                    "net ibverbs: connect on device %d: %s", device_index,
                    device_status == XCOLL_SUCCESS ? "there is one, 0"
                                                   : device_error);
  const uint8_t *in = handle;
  ibn_qp_info remote;
  get_qp_info(in + IBN_QP_OFFSET, &remote);
  if (get_u32(in) != IBN_HANDLE_MAGIC || get_u32(in + 4) != IBN_VERSION ||
      !qp_info_valid(&remote))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: the handle of rank %d is not an ibverbs "
                    "plugin handle: do both ranks use XCOLL_NET=ibverbs?",
                    peer_rank);
  net_handshake_sender *sender;
  xcoll_status s =
      net_handshake_sender_get(&connecting, "ibverbs", handle, config,
                               peer_rank, sizeof(ibn_connecting), &sender);
  if (s != XCOLL_SUCCESS)
    return s;
  ibn_connecting *k = (ibn_connecting *)sender;

  if (k->bootstrap.stage == NET_HANDSHAKE_CONNECTING) {
    s = net_handshake_connect(&k->bootstrap, 0, config, handle,
                              IBN_INNER_BYTES);
    if (s != XCOLL_SUCCESS)
      goto failed;
    if (k->bootstrap.socket_send == NULL)
      goto check_time;
    s = send_hello(k, config->rank, peer_rank, &remote);
    if (s != XCOLL_SUCCESS)
      goto failed;
  }
  int sent = 0;
  s = net_handshake_hello_sent(&k->bootstrap, &sent);
  if (s != XCOLL_SUCCESS)
    goto failed;
  if (!sent)
    goto check_time;
  /* The bootstrap socket stays with the comm: the receiver's liveness
   * check. */
  ibn_comm *c = k->comm;
  k->comm = NULL;
  c->socket_send = k->bootstrap.socket_send;
  k->bootstrap.socket_send = NULL;
  connecting_drop(k);
  net_info("net ibverbs: rank %d connected to rank %d (QP %u -> %u)",
           config->rank, peer_rank, c->mine.qpn, remote.qpn);
  *send_comm = (xcoll_net_send_comm *)c;
  return XCOLL_SUCCESS;

check_time:
  s = net_handshake_sender_waiting(&k->bootstrap, "ibverbs");
  if (s == XCOLL_SUCCESS)
    return XCOLL_SUCCESS;
failed:
  connecting_drop(k);
  return s;
}

/* ---- memory ---- */

static xcoll_status ib_reg_mr(xcoll_net_send_comm *send_comm,
                              xcoll_net_recv_comm *recv_comm, void *data,
                              size_t bytes, int ptr_type, void **mhandle) {
  if (mhandle != NULL)
    *mhandle = NULL;
  if ((send_comm == NULL) == (recv_comm == NULL) || mhandle == NULL ||
      data == NULL || bytes == 0)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: reg_mr needs exactly one comm, a buffer of "
                    "at least one byte and mhandle");
  if (ptr_type != XCOLL_NET_PTR_HOST)
    return net_fail(XCOLL_ERR_NOT_SUPPORTED,
                    "net ibverbs: reg_mr of pointer type %d: this plugin "
                    "moves host memory only",
                    ptr_type);
  ibn_mr *m = mr_get(data, bytes);
  if (m == NULL)
    return net_fail(XCOLL_ERR_SYSTEM,
                    "net ibverbs: ibv_reg_mr of %zu bytes on %s failed: %s "
                    "(check ulimit -l, the locked-memory limit)",
                    bytes, device.name, strerror(errno));
  *mhandle = m;
  return XCOLL_SUCCESS;
}

static xcoll_status ib_dereg_mr(xcoll_net_send_comm *send_comm,
                                xcoll_net_recv_comm *recv_comm, void *mhandle) {
  (void)send_comm;
  (void)recv_comm;
  mr_put(mhandle);
  return XCOLL_SUCCESS;
}

/* Is [data, data + bytes) inside the registration m? */
static int mr_covers(const ibn_mr *m, const void *data, size_t bytes) {
  uintptr_t start = (uintptr_t)m->addr, p = (uintptr_t)data;
  return p >= start && bytes <= m->bytes && p - start <= m->bytes - bytes;
}

/* ---- progress ---- */

/* One work completion for comm c: mark its request done, or fail the comm
 * (the first error is kept; later completions are still taken). */
static void take_completion(ibn_comm *c, const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    /* The peer gone or unreachable is REMOTE; a key or address the peer's
     * NIC refused is a broken protocol (PROTOCOL), not a death. */
    int gone = wc->status == IBV_WC_RETRY_EXC_ERR ||
               wc->status == IBV_WC_RNR_RETRY_EXC_ERR ||
               wc->status == IBV_WC_WR_FLUSH_ERR;
    comm_set(c, gone ? XCOLL_ERR_REMOTE : XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: %s rank %d failed on the QP: %s (work "
             "completion status %d)%s",
             c->rank, c->is_send ? "sending to" : "receiving from",
             c->peer_rank, wc_text(wc->status), (int)wc->status,
             wc->status == IBV_WC_RETRY_EXC_ERR
                 ? "; the peer is gone or unreachable"
             : wc->status == IBV_WC_REM_ACCESS_ERR
                 ? "; the remote key or address was refused"
                 : "");
    return;
  }
  uint64_t id = wc->wr_id;
  if (id & IBN_WR_CTS)
    return; /* a CTS write landed */
  if (id >= IBN_SLOTS || !c->requests[id].used) {
    comm_set(c, XCOLL_ERR_INTERNAL,
             "net ibverbs: rank %d: a completion for no request "
             "(wr_id %" PRIu64 ") from rank %d",
             c->rank, id, c->peer_rank);
    return;
  }
  ibn_request *r = &c->requests[id];
  if (c->is_send) {
    r->done = 1;
    return;
  }
  uint32_t imm = ntohl(wc->imm_data);
  if (!(wc->wc_flags & IBV_WC_WITH_IMM))
    comm_set(c, XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: rank %d's write came without its "
             "immediate size",
             c->rank, c->peer_rank);
  else if (imm == IBN_IMM_TRUNCATED || imm == IBN_IMM_BAD_TAG)
    comm_set(c, XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: %s from rank %d (tag %" PRIu32
             ", %zu bytes posted)",
             c->rank,
             imm == IBN_IMM_TRUNCATED
                 ? "message truncated: a longer message"
                 : "the two ranks disagree on the order of messages: "
                   "another tag",
             c->peer_rank, r->tag, r->bytes);
  else if (imm > r->bytes)
    comm_set(c, XCOLL_ERR_PROTOCOL,
             "net ibverbs: rank %d: rank %d reports %" PRIu32
             " bytes written into a receive of %zu",
             c->rank, c->peer_rank, imm, r->bytes);
  else {
    r->got = imm;
    r->done = 1;
  }
}

/* Take what the CQ holds and hand it to the requests; then the comm's
 * sticky error, if any. The liveness socket is looked at before the CQ: a
 * sender writes its last messages before it exits and closes the socket,
 * so they are in the CQ by the time the close is seen, and their requests
 * report done as net.h requires. */
static xcoll_status poll_comm(ibn_comm *c) {
  int peer_closed = 0;
  if (c->liveness != NULL) {
    int done = 0;
    xcoll_status s = xcoll_net_socket.test(c->liveness, &done, NULL);
    if (s != XCOLL_SUCCESS || done) {
      c->liveness = NULL;
      peer_closed = 1;
    }
  }
  struct ibv_wc wc[IBN_CQ_BATCH];
  for (;;) {
    int n = ibv_poll_cq(c->cq, IBN_CQ_BATCH, wc);
    if (n < 0) {
      comm_set(c, XCOLL_ERR_SYSTEM,
               "net ibverbs: rank %d: polling the CQ of the "
               "connection with rank %d failed (overrun?)",
               c->rank, c->peer_rank);
      break;
    }
    for (int i = 0; i < n; i++)
      take_completion(c, &wc[i]);
    if (n < IBN_CQ_BATCH)
      break;
  }
  if (peer_closed)
    comm_set(c, XCOLL_ERR_REMOTE,
             "net ibverbs: rank %d: rank %d is gone (its bootstrap "
             "connection closed)",
             c->rank, c->peer_rank);
  if (c->error != XCOLL_SUCCESS)
    return net_fail(c->error, "%s", c->error_text);
  return XCOLL_SUCCESS;
}

static ibn_request *take_request(ibn_comm *c, size_t *slot) {
  *slot = (size_t)(c->posted % IBN_SLOTS);
  ibn_request *r = &c->requests[*slot];
  if (c->in_flight >= IBN_SLOTS || r->used)
    return NULL;
  memset(r, 0, sizeof *r);
  r->comm = c;
  r->used = 1;
  return r;
}

static xcoll_status ib_isend(xcoll_net_send_comm *send_comm, const void *data,
                             size_t bytes, uint32_t tag, void *mhandle,
                             xcoll_net_request **request) {
  if (request != NULL)
    *request = NULL;
  ibn_comm *c = (ibn_comm *)send_comm;
  ibn_mr *m = mhandle;
  if (c == NULL || request == NULL || !c->is_send || m == NULL ||
      (!data && bytes) || !mr_covers(m, data, bytes))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: isend needs a send comm, a request and data "
                    "inside the registered region mhandle");
  if (bytes > IBN_MAX_MESSAGE)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: isend of %zu bytes: at most %u per message",
                    bytes, IBN_MAX_MESSAGE);
  xcoll_status s = poll_comm(c);
  if (s != XCOLL_SUCCESS)
    return s;
  size_t slot;
  if (c->in_flight >= IBN_SLOTS || c->requests[c->posted % IBN_SLOTS].used)
    return XCOLL_SUCCESS;
  /* The receiver's NIC writes the FIFO behind the compiler's back: every
   * read of it is an atomic load. */
  ibn_cts *cts = &c->fifo[c->posted % IBN_SLOTS];
  uint64_t want = c->posted + 1;
  int faulty = device.fault == IBN_FAULT_SKIP_CTS ||
               (device.fault == IBN_FAULT_REUSE_CTS && c->posted % 5 == 4);
  if (device.fault == IBN_FAULT_REUSE_CTS && faulty)
    cts = &c->fifo[(c->posted - 1) % IBN_SLOTS];
  if (!faulty &&
      (__atomic_load_n(&cts->seq, __ATOMIC_ACQUIRE) != want ||
       __atomic_load_n(&cts->seq_end, __ATOMIC_ACQUIRE) != (uint32_t)want))
    return XCOLL_SUCCESS; /* no clear-to-send yet */
  /* How far ahead the receiver is: entries for later messages already in. */
  int ahead = 1;
  while (
      ahead < IBN_SLOTS &&
      __atomic_load_n(&c->fifo[(c->posted + (uint64_t)ahead) % IBN_SLOTS].seq,
                      __ATOMIC_RELAXED) == want + (uint64_t)ahead)
    ahead++;
  if (ahead > c->max_cts) {
    c->max_cts = ahead;
    raise_to(&max_cts_waiting, ahead);
  }
  uint64_t remote_addr = __atomic_load_n(&cts->addr, __ATOMIC_RELAXED);
  uint32_t rkey = __atomic_load_n(&cts->rkey, __ATOMIC_RELAXED);
  uint32_t capacity = __atomic_load_n(&cts->size, __ATOMIC_RELAXED);
  uint32_t cts_tag = __atomic_load_n(&cts->tag, __ATOMIC_RELAXED);
  /* Consumed: clear it (as NCCL's sender does), so that a write that runs
   * ahead of its CTS, or takes one twice, finds no key rather than a stale
   * one that happens to point at the right slot. */
  memset(cts, 0, sizeof *cts);
  ibn_request *r = take_request(c, &slot);
  r->tag = tag;
  r->bytes = bytes;
  r->got = bytes;
  uint32_t imm = (uint32_t)bytes;
  size_t write_bytes = bytes;
  xcoll_status verdict = XCOLL_SUCCESS;
  if (!faulty && cts_tag != tag) {
    imm = IBN_IMM_BAD_TAG;
    write_bytes = 0;
    verdict = XCOLL_ERR_PROTOCOL;
  } else if (!faulty && bytes > capacity) {
    imm = IBN_IMM_TRUNCATED;
    write_bytes = 0;
    verdict = XCOLL_ERR_PROTOCOL;
  }
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)data,
                        .length = (uint32_t)write_bytes,
                        .lkey = m->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = write_bytes > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  int e = ibv_post_send(c->qp, &wr, &bad);
  if (e != 0) {
    r->used = 0;
    return comm_fail(c, XCOLL_ERR_SYSTEM,
                     "net ibverbs: rank %d: posting a write to rank %d "
                     "failed: %s",
                     c->rank, c->peer_rank, strerror(e));
  }
  c->posted++;
  c->in_flight++;
  if (verdict != XCOLL_SUCCESS) {
    r->used = 0;
    c->in_flight--;
    return comm_fail(c, verdict,
                     "net ibverbs: rank %d: %s for rank %d (tag %" PRIu32
                     ", %zu bytes; the receive posted tag %" PRIu32 ", %" PRIu32
                     " bytes)",
                     c->rank,
                     cts_tag != tag ? "the two ranks disagree on the order of "
                                      "messages: another tag"
                                    : "message truncated: a message longer "
                                      "than the receive",
                     c->peer_rank, tag, bytes, cts_tag, capacity);
  }
  *request = (xcoll_net_request *)r;
  return XCOLL_SUCCESS;
}

static xcoll_status ib_irecv(xcoll_net_recv_comm *recv_comm, void *data,
                             size_t bytes, uint32_t tag, void *mhandle,
                             xcoll_net_request **request) {
  if (request != NULL)
    *request = NULL;
  ibn_comm *c = (ibn_comm *)recv_comm;
  ibn_mr *m = mhandle;
  if (c == NULL || request == NULL || c->is_send || m == NULL ||
      (!data && bytes) || !mr_covers(m, data, bytes))
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: irecv needs a recv comm, a request and a "
                    "buffer inside the registered region mhandle");
  if (bytes > IBN_MAX_MESSAGE)
    bytes = IBN_MAX_MESSAGE;
  size_t slot;
  ibn_request *r = take_request(c, &slot);
  if (r == NULL)
    return XCOLL_SUCCESS;
  r->tag = tag;
  r->bytes = bytes;
  if (c->error != XCOLL_SUCCESS) {
    /* The sender is gone or the QP broke. The caller may post receives no
     * one needs (ahead of its last message): fail this one at test, where
     * the caller can tell whether it mattered (net.h: only requests that
     * needed data after the failure fail). */
    r->failed = 1;
    c->posted++;
    c->in_flight++;
    *request = (xcoll_net_request *)r;
    return XCOLL_SUCCESS;
  }
  /* The receive first: the data's immediate needs it when it lands. */
  struct ibv_recv_wr rwr, *rbad = NULL;
  memset(&rwr, 0, sizeof rwr);
  rwr.wr_id = slot;
  rwr.num_sge = 0;
  int e = ibv_post_recv(c->qp, &rwr, &rbad);
  if (e != 0) {
    r->used = 0;
    return comm_fail(c, XCOLL_ERR_SYSTEM,
                     "net ibverbs: rank %d: posting a receive for rank %d "
                     "failed: %s",
                     c->rank, c->peer_rank, strerror(e));
  }
  ibn_cts *cts = &c->cts_out[slot];
  uint64_t seq = c->posted + 1;
  cts->seq = seq;
  cts->addr = (uint64_t)(uintptr_t)data;
  cts->rkey = device.fault == IBN_FAULT_BAD_RKEY ? m->mr->rkey ^ 0x5a5a5au
                                                 : m->mr->rkey;
  cts->size = (uint32_t)bytes;
  cts->tag = tag;
  cts->seq_end = (uint32_t)seq;
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)cts,
                        .length = sizeof *cts,
                        .lkey = c->cts_mr->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = IBN_WR_CTS | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = c->remote_fifo + slot * sizeof(ibn_cts);
  wr.wr.rdma.rkey = c->remote_rkey;
  e = ibv_post_send(c->qp, &wr, &bad);
  if (e != 0) {
    r->used = 0;
    return comm_fail(c, XCOLL_ERR_SYSTEM,
                     "net ibverbs: rank %d: posting the clear-to-send to "
                     "rank %d failed: %s",
                     c->rank, c->peer_rank, strerror(e));
  }
  c->posted++;
  c->in_flight++;
  if (c->in_flight > c->max_cts) {
    c->max_cts = c->in_flight;
    raise_to(&max_outstanding_cts, c->in_flight);
  }
  *request = (xcoll_net_request *)r;
  return XCOLL_SUCCESS;
}

static void release(ibn_request *r) {
  r->used = 0;
  r->done = 0;
  r->failed = 0;
  r->comm->in_flight--;
}

static xcoll_status ib_test(xcoll_net_request *request, int *done,
                            size_t *bytes) {
  if (done != NULL)
    *done = 0;
  ibn_request *r = (ibn_request *)request;
  if (r == NULL || done == NULL || !r->used)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: test of a NULL or already released "
                    "request");
  ibn_comm *c = r->comm;
  if (r->failed) {
    release(r);
    return net_fail(c->error, "%s", c->error_text);
  }
  xcoll_status s = r->done ? XCOLL_SUCCESS : poll_comm(c);
  /* poll_comm may have completed r even when it reports an error. */
  /* A request that completed before the comm failed still reports done. */
  if (r->done) {
    *done = 1;
    if (bytes != NULL)
      *bytes = r->got;
    release(r);
    return XCOLL_SUCCESS;
  }
  if (s != XCOLL_SUCCESS)
    release(r);
  return s;
}

static void close_comm(ibn_comm *c) {
  if (c == NULL)
    return;
  if (c->is_send)
    net_info("net ibverbs: rank %d's connection to rank %d closed after "
             "%" PRIu64 " messages; at most %d CTS entries waited in its FIFO "
             "at once (%d in this process)",
             c->rank, c->peer_rank, c->posted, c->max_cts,
             atomic_load(&max_cts_waiting));
  else
    net_info("net ibverbs: rank %d's connection from rank %d closed after "
             "%" PRIu64 " messages; at most %d CTS entries were outstanding "
             "at once (%d in this process)",
             c->rank, c->peer_rank, c->posted, c->max_cts,
             atomic_load(&max_outstanding_cts));
  /* Destroying the QP releases whatever was in flight: the requests are
   * slots of the comm and go with it. */
  comm_free(c);
}

static void ib_close_send(xcoll_net_send_comm *send_comm) {
  close_comm((ibn_comm *)send_comm);
}

static void ib_close_recv(xcoll_net_recv_comm *recv_comm) {
  close_comm((ibn_comm *)recv_comm);
}

static void ib_close_listen(xcoll_net_listen_comm *listen_comm) {
  ibn_listen *l = (ibn_listen *)listen_comm;
  if (l == NULL)
    return;
  comm_free(l->comm);
  net_handshake_receiver_close(&l->bootstrap);
  free(l);
}

const xcoll_net_v1 xcoll_net_ibverbs = {
    .name = "ibverbs",
    .init = ib_init,
    .devices = ib_devices,
    .get_properties = ib_get_properties,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .close_send = ib_close_send,
    .close_recv = ib_close_recv,
    .close_listen = ib_close_listen,
};
