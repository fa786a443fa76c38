/* ibverbs_setup.c - the ibverbs net plugin's set-up (the plugin is
 * net_ibverbs.c): the verbs library loaded and the device opened once per
 * process, the cache of memory registrations, the comms with their CQ and
 * reliable-connected queue pair (RESET -> INIT -> RTR -> RTS), and init,
 * devices, get_properties, listen, accept and connect, with the handle and
 * hello that carry each end's QP over the bootstrap socket (net/handshake.c).
 * net_ibverbs.c describes the protocol. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env.h"
#include "error.h"
#include "handshake.h"
#include "ibv_wrap.h"
#include "ibverbs_internal.h"
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

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static xcoll_status device_status = XCOLL_ERR_NOT_SUPPORTED;
static char device_error[IBN_MESSAGE_BYTES];
ibn_device ibn_dev;
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
  ibn_dev.api = api;
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
    ibn_dev.fault = faults[fault];
  ibn_dev.gid_index = (int)gid_index;
  ibn_dev.timeout = timeout;
  ibn_dev.retry_cnt = retry;

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
  for (int i = 0; i < count && ibn_dev.context == NULL; i++) {
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
      ibn_dev.context = ctx;
      ibn_dev.port = port;
      ibn_dev.lid = attr.lid;
      ibn_dev.link_layer = attr.link_layer;
      ibn_dev.mtu = attr.active_mtu;
      snprintf(ibn_dev.name, sizeof ibn_dev.name, "%s:%d", name, port);
      break;
    }
    if (ibn_dev.context == NULL)
      api->close_device(ctx);
  }
  api->free_device_list(list);
  if (ibn_dev.context == NULL) {
    set_device_error("net ibverbs: no RDMA device was found with an active "
                     "port%s%s (devices: %s)",
                     hca ? " matching XCOLL_IB_HCA=" : "", hca ? hca : "",
                     seen);
    return;
  }
  if (api->query_gid(ibn_dev.context, ibn_dev.port, ibn_dev.gid_index,
                     &ibn_dev.gid) != 0) {
    set_device_error("net ibverbs: %s has no GID at index %d "
                     "(XCOLL_IB_GID_INDEX)",
                     ibn_dev.name, ibn_dev.gid_index);
    api->close_device(ibn_dev.context);
    ibn_dev.context = NULL;
    return;
  }
  ibn_dev.pd = api->alloc_pd(ibn_dev.context);
  if (ibn_dev.pd == NULL) {
    set_device_error("net ibverbs: ibv_alloc_pd on %s failed: %s", ibn_dev.name,
                     strerror(errno));
    api->close_device(ibn_dev.context);
    ibn_dev.context = NULL;
    return;
  }
  device_status = XCOLL_SUCCESS;
}

/* ---- memory registrations, cached per buffer ---- */

static pthread_mutex_t mr_lock = PTHREAD_MUTEX_INITIALIZER;
static ibn_mr *mr_list;

/* A registration covering [addr, addr + bytes), registering it the first
 * time; NULL with errno when ibv_reg_mr fails. */
ibn_mr *ibn_mr_get(void *addr, size_t bytes) {
  pthread_mutex_lock(&mr_lock);
  ibn_mr *m = mr_list;
  while (m && !(m->addr == addr && m->bytes == bytes))
    m = m->next;
  if (m == NULL) {
    m = calloc(1, sizeof *m);
    if (m != NULL) {
      m->mr =
          ibn_dev.api->reg_mr(ibn_dev.pd, addr, bytes,
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

void ibn_mr_hold(ibn_mr *m) {
  pthread_mutex_lock(&mr_lock);
  m->refs++;
  pthread_mutex_unlock(&mr_lock);
}

void ibn_mr_put(ibn_mr *m) {
  if (m == NULL)
    return;
  pthread_mutex_lock(&mr_lock);
  if (--m->refs == 0) {
    for (ibn_mr **p = &mr_list; *p; p = &(*p)->next)
      if (*p == m) {
        *p = m->next;
        break;
      }
    ibn_dev.api->dereg_mr(m->mr);
    free(m);
  }
  pthread_mutex_unlock(&mr_lock);
}

void ibn_comm_free(ibn_comm *c) {
  if (c == NULL)
    return;
  const xcoll_ibv_api *api = ibn_dev.api;
  if (c->qp)
    api->destroy_qp(c->qp);
  if (c->cq)
    api->destroy_cq(c->cq);
  /* With the QP gone, nothing writes into the posted receives' buffers. */
  for (int i = 0; i < IBN_SLOTS; i++)
    if (c->requests[i].used)
      ibn_mr_put(c->requests[i].mr);
  ibn_mr_put(c->fifo_mr);
  ibn_mr_put(c->cts_mr);
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
  const xcoll_ibv_api *api = ibn_dev.api;
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
  c->cq = api->create_cq(ibn_dev.context, 4 * IBN_SLOTS, NULL, NULL, 0);
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
  c->qp = api->create_qp(ibn_dev.pd, &init);
  if (c->qp == NULL) {
    snprintf(err, err_bytes, "ibv_create_qp: %s", strerror(errno));
    goto failed;
  }
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = ibn_dev.port;
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
  c->mine.lid = ibn_dev.lid;
  c->mine.mtu = (uint8_t)ibn_dev.mtu;
  c->mine.gid = ibn_dev.gid;
  size_t fifo_bytes = IBN_SLOTS * sizeof(ibn_cts);
  ibn_cts **buffer = is_send ? &c->fifo : &c->cts_out;
  ibn_mr **mr = is_send ? &c->fifo_mr : &c->cts_mr;
  if (posix_memalign((void **)buffer, 4096, fifo_bytes) != 0) {
    snprintf(err, err_bytes, "no memory for the CTS FIFO");
    goto failed;
  }
  memset(*buffer, 0, fifo_bytes);
  *mr = ibn_mr_get(*buffer, fifo_bytes);
  if (*mr == NULL) {
    snprintf(err, err_bytes, "ibv_reg_mr of the CTS FIFO: %s", strerror(errno));
    goto failed;
  }
  return c;
failed:
  ibn_comm_free(c);
  return NULL;
}

/* INIT -> RTR -> RTS towards the remote QP. Returns 0 or an errno. */
static int qp_connect(ibn_comm *c, const ibn_qp_info *remote,
                      const char **stage) {
  const xcoll_ibv_api *api = ibn_dev.api;
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
  attr.ah_attr.port_num = ibn_dev.port;
  /* RoCE has no LIDs: address by GID (RoCE v2 when XCOLL_IB_GID_INDEX
   * names a v2 GID). InfiniBand within a subnet: by LID, no GRH. */
  if (ibn_dev.link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote->gid;
    attr.ah_attr.grh.sgid_index = (uint8_t)ibn_dev.gid_index;
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
  attr.timeout = (uint8_t)ibn_dev.timeout;
  attr.retry_cnt = (uint8_t)ibn_dev.retry_cnt;
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

xcoll_status ibn_setup_init(xcoll_net_log_fn log) {
  net_plugin_log_set(log);
  xcoll_status s = net_handshake_init(log); /* the bootstrap connection */
  if (s != XCOLL_SUCCESS)
    return s;
  pthread_once(&device_once, open_device);
  if (device_status != XCOLL_SUCCESS)
    return net_fail(device_status, "%s", device_error);
  net_info("net ibverbs: device %s, %s, GID index %d, MTU %d, "
           "XCOLL_IB_TIMEOUT=%ld XCOLL_IB_RETRY_CNT=%ld%s",
           ibn_dev.name,
           ibn_dev.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE"
                                                         : "InfiniBand",
           ibn_dev.gid_index, 128 << ibn_dev.mtu, ibn_dev.timeout,
           ibn_dev.retry_cnt,
           ibn_dev.fault != IBN_FAULT_NONE
               ? " (TEST HOOK: XCOLL_IB_DEBUG_FAULT set)"
               : "");
  return XCOLL_SUCCESS;
}

xcoll_status ib_devices(int *count) {
  if (count == NULL)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT, "net ibverbs: devices(NULL)");
  pthread_once(&device_once, open_device);
  *count = device_status == XCOLL_SUCCESS ? 1 : 0;
  if (*count == 0)
    net_info("%s", device_error);
  return XCOLL_SUCCESS;
}

xcoll_status ib_get_properties(int device_index,
                               xcoll_net_properties *p) {
  if (device_index != 0 || p == NULL || device_status != XCOLL_SUCCESS)
    return net_fail(XCOLL_ERR_INVALID_ARGUMENT,
                    "net ibverbs: get_properties(%d): there is %s device",
                    device_index,
                    device_status == XCOLL_SUCCESS ? "one, 0, the" : "no");
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", ibn_dev.name);
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

xcoll_status ib_listen(int device_index, const xcoll_net_config *config,
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
                    config->rank, ibn_dev.name, err);
  }
  xcoll_status s =
      net_handshake_listen(&l->bootstrap, 0, config, IBN_HANDLE_MAGIC,
                           IBN_VERSION, IBN_INNER_BYTES, handle);
  if (s != XCOLL_SUCCESS) {
    ibn_comm_free(l->comm);
    free(l);
    return s;
  }
  put_qp_info((uint8_t *)handle + IBN_QP_OFFSET, &l->comm->mine);
  *listen_comm = (xcoll_net_listen_comm *)l;
  return XCOLL_SUCCESS;
}

xcoll_status ib_accept(xcoll_net_listen_comm *listen_comm,
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
  ibn_comm_free(k->comm);
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
                    ibn_dev.name, err);
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

xcoll_status ib_connect(int device_index, const xcoll_net_config *config,
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

void ib_close_listen(xcoll_net_listen_comm *listen_comm) {
  ibn_listen *l = (ibn_listen *)listen_comm;
  if (l == NULL)
    return;
  ibn_comm_free(l->comm);
  net_handshake_receiver_close(&l->bootstrap);
  free(l);
}

