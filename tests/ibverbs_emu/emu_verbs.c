/* emu_verbs.c - an emulated verbs provider for tests only
 * (libxcoll-ibverbs-emu.so): the libibverbs entry points the ibverbs net
 * plugin loads (net/ibverbs/ibv_wrap.c, through XCOLL_IBVERBS_LIB), with
 * reliable-connected queue pairs between processes of one machine. No RDMA
 * device or kernel module is needed.
 *
 * How a verb is carried out:
 *   - Each process that opens the device ("emu0", one RoCE port) creates a
 *     shared-memory segment (a memfd) holding its memory-region table and its
 *     QPs' inbound immediate queues. Its GID carries its pid and the memfd's
 *     descriptor number, so a peer that moves a QP to RTR towards that GID
 *     opens /proc/PID/fd/FD and maps the segment.
 *   - An RDMA write (ibv_post_send, IBV_WR_RDMA_WRITE[_WITH_IMM]) is carried
 *     out inside the post: the local key and bounds are checked against the
 *     local table, the rkey, bounds and IBV_ACCESS_REMOTE_WRITE against the
 *     table the owner publishes, then the bytes are written into the other
 *     process with process_vm_writev. With an immediate, an event {imm,
 *     length} is appended to the responder QP's inbound queue; the
 *     responder's ibv_poll_cq pairs it with its oldest posted receive, in
 *     order (an event that finds no receive waits, as with rnr_retry 7).
 *   - Errors as an HCA reports them, in the send CQ, the QP then in the error
 *     state and later WRs flushed (IBV_WC_WR_FLUSH_ERR): a bad local key or
 *     bounds -> IBV_WC_LOC_PROT_ERR; a bad rkey, bounds or access ->
 *     IBV_WC_REM_ACCESS_ERR; a responder process that is gone, or whose QP is
 *     not in RTR/RTS or is not connected to this one -> IBV_WC_RETRY_EXC_ERR;
 *     a full inbound queue -> IBV_WC_RNR_RETRY_EXC_ERR.
 * docs/ibverbs.md lists what it does not model (timing, the retry timer,
 * sends and reads, SRQ, events, and more).
 *
 * Environment: XCOLL_IBEMU_DEVICES=0 makes the device list empty (the "no
 * RDMA device" path of the plugin).
 *
 * One lock per device context serialises every verb of a process: the
 * emulator is about semantics, not speed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_writev */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define EMU_EXPORT __attribute__((visibility("default")))

#define EMU_MAX_MR 1024 /* a key's low 10 bits are its table index */
#define EMU_KEY_INDEX_BITS 10
#define EMU_MAX_QP 256
#define EMU_QPN_BASE 0x200
#define EMU_RING 256 /* inbound immediates per QP */
#define EMU_MAX_PEERS 64
#define EMU_MAX_SGE 4
#define EMU_SHM_MAGIC 0x554d4558u /* bytes "XEMU" */

/* ---- the shared segment: what peers read and write ---- */

typedef struct emu_shm_mr {
  _Atomic uint32_t key; /* lkey == rkey; 0: free */
  uint32_t access;
  uint64_t addr;
  uint64_t length;
} emu_shm_mr;

typedef struct emu_event {
  uint32_t imm; /* network order, as posted */
  uint32_t length;
} emu_event;

typedef struct emu_shm_qp {
  _Atomic uint32_t qpn;                /* 0: no QP in this slot */
  _Atomic uint32_t state;              /* enum ibv_qp_state */
  _Atomic uint32_t dest_pid, dest_qpn; /* set at RTR */
  _Atomic uint64_t head;               /* events appended (by the peer) */
  _Atomic uint64_t tail;               /* events taken (by the owner) */
  emu_event ring[EMU_RING];
} emu_shm_qp;

typedef struct emu_shm {
  uint32_t magic;
  uint32_t pid;
  emu_shm_mr mrs[EMU_MAX_MR];
  emu_shm_qp qps[EMU_MAX_QP];
} emu_shm;

/* ---- process-local objects (each starts with the verbs struct) ---- */

typedef struct emu_peer {
  pid_t pid;
  int fd;    /* the peer's memfd number, as in its GID */
  int pidfd; /* readable once the peer has exited; -1: use kill(pid, 0) */
  emu_shm *shm;
} emu_peer;

typedef struct emu_context {
  struct ibv_context context;
  pthread_mutex_t lock;
  int memfd;
  emu_shm *shm;
  struct emu_qp *qps[EMU_MAX_QP];
  emu_peer peers[EMU_MAX_PEERS];
  int npeers;
  uint32_t generation; /* of memory keys */
} emu_context;

typedef struct emu_cq {
  struct ibv_cq cq;
  struct ibv_wc *wc;
  int size;
  uint64_t head, tail; /* completions queued, taken */
  int overrun;
} emu_cq;

typedef struct emu_qp {
  struct ibv_qp qp;
  int index;
  struct ibv_qp_cap cap;
  int sq_sig_all;
  int send_outstanding; /* signaled WRs whose completion is not polled */
  uint64_t *recv_ids;
  uint64_t recv_head, recv_tail;
  emu_peer *peer;
  uint32_t dest_qpn;
} emu_qp;

typedef struct emu_mr {
  struct ibv_mr mr;
  int index;
} emu_mr;

static struct ibv_device emu_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "emu0",
    .dev_name = "uverbs-emu0",
};

static emu_context *ctx_of(struct ibv_context *c) {
  return (emu_context *)c;
}

/* ---- device list, device, port ---- */

EMU_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices) {
  struct ibv_device **list = calloc(2, sizeof *list);
  if (list == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  const char *n = getenv("XCOLL_IBEMU_DEVICES");
  int count = n != NULL && strcmp(n, "0") == 0 ? 0 : 1;
  if (count)
    list[0] = &emu_device;
  if (num_devices)
    *num_devices = count;
  return list;
}

EMU_EXPORT void ibv_free_device_list(struct ibv_device **list) {
  free(list);
}

EMU_EXPORT const char *ibv_get_device_name(struct ibv_device *device) {
  return device ? device->name : NULL;
}

static int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                         struct ibv_send_wr **bad);
static int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                         struct ibv_recv_wr **bad);
static int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);

EMU_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
  if (device != &emu_device) {
    errno = ENODEV;
    return NULL;
  }
  emu_context *c = calloc(1, sizeof *c);
  if (c == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  c->memfd = (int)syscall(SYS_memfd_create, "xcoll-ibemu", 0);
  if (c->memfd < 0 || ftruncate(c->memfd, sizeof(emu_shm)) != 0) {
    int e = errno;
    if (c->memfd >= 0)
      close(c->memfd);
    free(c);
    errno = e;
    return NULL;
  }
  c->shm = mmap(NULL, sizeof(emu_shm), PROT_READ | PROT_WRITE, MAP_SHARED,
                c->memfd, 0);
  if (c->shm == MAP_FAILED) {
    int e = errno;
    close(c->memfd);
    free(c);
    errno = e;
    return NULL;
  }
  c->shm->magic = EMU_SHM_MAGIC;
  c->shm->pid = (uint32_t)getpid();
  /* Where Yama restricts ptrace, peers may still write into us. */
#ifdef PR_SET_PTRACER
  (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->context.mutex, NULL);
  c->context.device = device;
  c->context.cmd_fd = -1;
  c->context.async_fd = -1;
  c->context.num_comp_vectors = 1;
  c->context.ops.post_send = emu_post_send;
  c->context.ops.post_recv = emu_post_recv;
  c->context.ops.poll_cq = emu_poll_cq;
  return &c->context;
}

EMU_EXPORT int ibv_close_device(struct ibv_context *context) {
  emu_context *c = ctx_of(context);
  for (int i = 0; i < c->npeers; i++) {
    munmap(c->peers[i].shm, sizeof(emu_shm));
    if (c->peers[i].pidfd >= 0)
      close(c->peers[i].pidfd);
  }
  munmap(c->shm, sizeof(emu_shm));
  close(c->memfd);
  pthread_mutex_destroy(&c->lock);
  free(c);
  return 0;
}

/* verbs.h turns ibv_query_port into a macro; the parentheses define the
 * exported function itself, which fills the older (compatible) part of the
 * attributes, up to link_layer. */
EMU_EXPORT int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                               struct _compat_ibv_port_attr *port_attr) {
  (void)context;
  if (port_num != 1 || port_attr == NULL)
    return EINVAL;
  struct ibv_port_attr a;
  memset(&a, 0, sizeof a);
  a.state = IBV_PORT_ACTIVE;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = IBV_MTU_4096;
  a.gid_tbl_len = 1;
  a.max_msg_sz = 0x40000000u;
  a.pkey_tbl_len = 1;
  a.lid = 0; /* RoCE: no LID */
  a.active_width = 1;
  a.active_speed = 1;
  a.phys_state = 5; /* LinkUp */
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  memcpy(port_attr, &a, offsetof(struct ibv_port_attr, link_layer) + 1);
  return 0;
}

/* The GID: fe80::XEMU:0:FD:PID, the two numbers big-endian. */
EMU_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
                             int index, union ibv_gid *gid) {
  emu_context *c = ctx_of(context);
  if (port_num != 1 || index != 0 || gid == NULL) {
    errno = EINVAL;
    return -1;
  }
  memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  memcpy(gid->raw + 2, "XEMU", 4);
  uint32_t fd = htonl((uint32_t)c->memfd), pid = htonl((uint32_t)getpid());
  memcpy(gid->raw + 8, &fd, 4);
  memcpy(gid->raw + 12, &pid, 4);
  return 0;
}

EMU_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pd->context = context;
  return pd;
}

EMU_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

/* ---- memory regions ---- */

EMU_EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr,
                                       size_t length, int access) {
  if (pd == NULL || addr == NULL || length == 0) {
    errno = EINVAL;
    return NULL;
  }
  /* An HCA can only be told to write remotely into writable memory. */
  if ((access & IBV_ACCESS_REMOTE_WRITE) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return NULL;
  }
  emu_context *c = ctx_of(pd->context);
  emu_mr *m = calloc(1, sizeof *m);
  if (m == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&c->lock);
  int index = -1;
  for (int i = 0; i < EMU_MAX_MR && index < 0; i++)
    if (atomic_load(&c->shm->mrs[i].key) == 0)
      index = i;
  if (index < 0) {
    pthread_mutex_unlock(&c->lock);
    free(m);
    errno = ENOMEM;
    return NULL;
  }
  /* A new generation in the high bits: a key is never 0 and a stale key
   * (after dereg) never matches the slot's next registration. */
  c->generation = (c->generation + 1) & 0x3fffffu;
  if (c->generation == 0)
    c->generation = 1;
  uint32_t key = (c->generation << EMU_KEY_INDEX_BITS) | (uint32_t)index;
  emu_shm_mr *s = &c->shm->mrs[index];
  s->addr = (uint64_t)(uintptr_t)addr;
  s->length = length;
  s->access = (uint32_t)access;
  atomic_store_explicit(&s->key, key, memory_order_release);
  pthread_mutex_unlock(&c->lock);
  m->index = index;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = key;
  m->mr.rkey = key;
  return &m->mr;
}

EMU_EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  emu_mr *m = (emu_mr *)mr;
  emu_context *c = ctx_of(mr->context);
  pthread_mutex_lock(&c->lock);
  atomic_store(&c->shm->mrs[m->index].key, 0);
  pthread_mutex_unlock(&c->lock);
  free(m);
  return 0;
}

/* Is [addr, addr + length) inside the region of key in table mrs, with the
 * access bits wanted? */
static int key_covers(emu_shm *shm, uint32_t key, uint64_t addr,
                      uint64_t length, uint32_t wanted) {
  if (key == 0)
    return 0;
  emu_shm_mr *s = &shm->mrs[key & (EMU_MAX_MR - 1)];
  if (atomic_load_explicit(&s->key, memory_order_acquire) != key)
    return 0;
  uint64_t start = s->addr, size = s->length;
  uint32_t access = s->access;
  /* The owner may deregister meanwhile: read the key again. */
  if (atomic_load_explicit(&s->key, memory_order_acquire) != key)
    return 0;
  if ((access & wanted) != wanted)
    return 0;
  return addr >= start && length <= size && addr - start <= size - length;
}

/* ---- completion queues ---- */

EMU_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
                                        void *cq_context,
                                        struct ibv_comp_channel *channel,
                                        int comp_vector) {
  (void)comp_vector;
  if (cqe <= 0 || cqe > 65536 || channel != NULL) {
    errno = EINVAL;
    return NULL;
  }
  emu_cq *q = calloc(1, sizeof *q);
  if (q == NULL || (q->wc = calloc((size_t)cqe, sizeof *q->wc)) == NULL) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->size = cqe;
  q->cq.context = context;
  q->cq.cq_context = cq_context;
  q->cq.cqe = cqe;
  return &q->cq;
}

EMU_EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  emu_cq *q = (emu_cq *)cq;
  emu_context *c = ctx_of(cq->context);
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < EMU_MAX_QP; i++)
    if (c->qps[i] &&
        (c->qps[i]->qp.send_cq == cq || c->qps[i]->qp.recv_cq == cq)) {
      pthread_mutex_unlock(&c->lock);
      return EBUSY; /* a QP still uses it, as on a real device */
    }
  pthread_mutex_unlock(&c->lock);
  free(q->wc);
  free(q);
  return 0;
}

/* Queue a completion (lock held). A full CQ is an overrun: the HCA raises
 * IBV_EVENT_CQ_ERR; here the next poll fails. */
static void cq_push(emu_cq *q, const struct ibv_wc *wc) {
  if (q->head - q->tail >= (uint64_t)q->size) {
    q->overrun = 1;
    return;
  }
  q->wc[q->head % (uint64_t)q->size] = *wc;
  q->head++;
}

/* ---- queue pairs ---- */

EMU_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                        struct ibv_qp_init_attr *attr) {
  if (pd == NULL || attr == NULL || attr->qp_type != IBV_QPT_RC ||
      attr->send_cq == NULL || attr->recv_cq == NULL || attr->srq != NULL ||
      attr->cap.max_send_wr == 0 || attr->cap.max_send_wr > 4096 ||
      attr->cap.max_recv_wr > 4096 || attr->cap.max_send_sge > EMU_MAX_SGE ||
      attr->cap.max_recv_sge > EMU_MAX_SGE) {
    errno = EINVAL; /* only what the plugin needs: RC, no SRQ */
    return NULL;
  }
  emu_context *c = ctx_of(pd->context);
  emu_qp *q = calloc(1, sizeof *q);
  uint32_t recv_slots = attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1;
  if (q == NULL ||
      (q->recv_ids = calloc(recv_slots, sizeof(uint64_t))) == NULL) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&c->lock);
  int index = -1;
  for (int i = 0; i < EMU_MAX_QP && index < 0; i++)
    if (c->qps[i] == NULL)
      index = i;
  if (index < 0) {
    pthread_mutex_unlock(&c->lock);
    free(q->recv_ids);
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  c->qps[index] = q;
  emu_shm_qp *s = &c->shm->qps[index];
  atomic_store(&s->state, IBV_QPS_RESET);
  atomic_store(&s->dest_pid, 0);
  atomic_store(&s->dest_qpn, 0);
  atomic_store(&s->head, 0);
  atomic_store(&s->tail, 0);
  atomic_store(&s->qpn, EMU_QPN_BASE + (uint32_t)index);
  pthread_mutex_unlock(&c->lock);
  q->index = index;
  q->cap = attr->cap;
  q->cap.max_recv_wr = recv_slots;
  q->cap.max_inline_data = 0;
  attr->cap.max_inline_data = 0;
  q->sq_sig_all = attr->sq_sig_all;
  q->qp.context = pd->context;
  q->qp.qp_context = attr->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = attr->send_cq;
  q->qp.recv_cq = attr->recv_cq;
  q->qp.qp_num = EMU_QPN_BASE + (uint32_t)index;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  return &q->qp;
}

EMU_EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = ctx_of(qp->context);
  pthread_mutex_lock(&c->lock);
  emu_shm_qp *s = &c->shm->qps[q->index];
  atomic_store(&s->qpn, 0);
  atomic_store(&s->state, IBV_QPS_RESET);
  c->qps[q->index] = NULL;
  pthread_mutex_unlock(&c->lock);
  free(q->recv_ids);
  free(q);
  return 0;
}

/* The peer whose GID this is: its segment mapped (lock held). NULL with
 * errno when the GID is not an emulator's or the process is gone. */
static emu_peer *peer_of(emu_context *c, const union ibv_gid *gid) {
  if (gid->raw[0] != 0xfe || gid->raw[1] != 0x80 ||
      memcmp(gid->raw + 2, "XEMU", 4) != 0) {
    errno = EINVAL;
    return NULL;
  }
  uint32_t fd, pid;
  memcpy(&fd, gid->raw + 8, 4);
  memcpy(&pid, gid->raw + 12, 4);
  fd = ntohl(fd);
  pid = ntohl(pid);
  for (int i = 0; i < c->npeers; i++)
    if (c->peers[i].pid == (pid_t)pid && c->peers[i].fd == (int)fd)
      return &c->peers[i];
  if (c->npeers == EMU_MAX_PEERS) {
    errno = ENOMEM;
    return NULL;
  }
  emu_shm *shm;
  if ((pid_t)pid == getpid()) {
    /* loopback: a QP connected to another QP of this process */
    shm = mmap(NULL, sizeof(emu_shm), PROT_READ | PROT_WRITE, MAP_SHARED,
               c->memfd, 0);
  } else {
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%u", pid, fd);
    int f = open(path, O_RDWR);
    if (f < 0)
      return NULL;
    shm = mmap(NULL, sizeof(emu_shm), PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
  }
  if (shm == MAP_FAILED)
    return NULL;
  if (shm->magic != EMU_SHM_MAGIC || shm->pid != pid) {
    munmap(shm, sizeof(emu_shm));
    errno = EINVAL;
    return NULL;
  }
  emu_peer *p = &c->peers[c->npeers++];
  p->pid = (pid_t)pid;
  p->fd = (int)fd;
  p->shm = shm;
  p->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  return p;
}

/* Has the peer's process exited (a zombie counts)? */
static int peer_gone(const emu_peer *p) {
  if (p->pidfd >= 0) {
    struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0;
  }
  return kill(p->pid, 0) != 0 && errno == ESRCH;
}

EMU_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                             int mask) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = ctx_of(qp->context);
  if (!(mask & IBV_QP_STATE))
    return EINVAL; /* only state changes here */
  pthread_mutex_lock(&c->lock);
  emu_shm_qp *s = &c->shm->qps[q->index];
  enum ibv_qp_state from = qp->state, to = attr->qp_state;
  int e = 0;
  const int rtr_needs = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                        IBV_QP_MIN_RNR_TIMER;
  const int rts_needs = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    /* always allowed */
  } else if (to == IBV_QPS_INIT) {
    if (from != IBV_QPS_RESET && from != IBV_QPS_INIT)
      e = EINVAL;
    else if (from == IBV_QPS_RESET &&
             (mask & (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) !=
                 (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      e = EINVAL;
    else if ((mask & IBV_QP_PORT) && attr->port_num != 1)
      e = EINVAL;
  } else if (to == IBV_QPS_RTR) {
    if (from != IBV_QPS_INIT || (mask & rtr_needs) != rtr_needs ||
        !attr->ah_attr.is_global || attr->dest_qp_num == 0)
      e = EINVAL; /* RoCE: the address must carry a GID */
    else {
      emu_peer *p = peer_of(c, &attr->ah_attr.grh.dgid);
      if (p == NULL)
        e = errno ? errno : EINVAL;
      else {
        q->peer = p;
        q->dest_qpn = attr->dest_qp_num;
        atomic_store(&s->dest_pid, (uint32_t)p->pid);
        atomic_store(&s->dest_qpn, attr->dest_qp_num);
      }
    }
  } else if (to == IBV_QPS_RTS) {
    if (from != IBV_QPS_RTR || (mask & rts_needs) != rts_needs)
      e = EINVAL;
  } else {
    e = EINVAL;
  }
  if (e == 0) {
    qp->state = to;
    atomic_store(&s->state, to);
  }
  pthread_mutex_unlock(&c->lock);
  return e;
}

/* ---- work requests ---- */

/* Carry out one RDMA write (lock held); the completion status. */
static enum ibv_wc_status do_write(emu_context *c, emu_qp *q,
                                   const struct ibv_send_wr *wr,
                                   uint32_t *vendor_err) {
  struct iovec local[EMU_MAX_SGE];
  uint64_t length = 0;
  for (int i = 0; i < wr->num_sge; i++) {
    const struct ibv_sge *g = &wr->sg_list[i];
    if (g->length > 0 && !key_covers(c->shm, g->lkey, g->addr, g->length, 0))
      return IBV_WC_LOC_PROT_ERR;
    local[i].iov_base = (void *)(uintptr_t)g->addr;
    local[i].iov_len = g->length;
    length += g->length;
  }
  emu_peer *p = q->peer;
  emu_shm_qp *r = &p->shm->qps[(q->dest_qpn - EMU_QPN_BASE) % EMU_MAX_QP];
  uint32_t rstate = atomic_load(&r->state);
  /* A responder that is gone or not ready drops the packets: the requester
   * retries until its retry count runs out. */
  if (peer_gone(p) || q->dest_qpn < EMU_QPN_BASE ||
      q->dest_qpn >= EMU_QPN_BASE + EMU_MAX_QP ||
      atomic_load(&r->qpn) != q->dest_qpn ||
      (rstate != IBV_QPS_RTR && rstate != IBV_QPS_RTS) ||
      atomic_load(&r->dest_pid) != (uint32_t)getpid() ||
      atomic_load(&r->dest_qpn) != q->qp.qp_num) {
    *vendor_err = 1;
    return IBV_WC_RETRY_EXC_ERR;
  }
  if (length > 0) {
    if (!key_covers(p->shm, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, length,
                    IBV_ACCESS_REMOTE_WRITE)) {
      *vendor_err = 2;
      return IBV_WC_REM_ACCESS_ERR;
    }
    struct iovec remote = {.iov_base =
                               (void *)(uintptr_t)wr->wr.rdma.remote_addr,
                           .iov_len = length};
    ssize_t n = process_vm_writev(p->pid, local, (unsigned long)wr->num_sge,
                                  &remote, 1, 0);
    if (n < 0 && errno == ESRCH) {
      *vendor_err = 3;
      return IBV_WC_RETRY_EXC_ERR;
    }
    if (n < 0 && errno == EPERM) {
      fprintf(stderr,
              "ibverbs emulator: process_vm_writev into pid %d: "
              "permission denied (ptrace restrictions?)\n",
              (int)p->pid);
      return IBV_WC_FATAL_ERR;
    }
    if (n != (ssize_t)length) {
      *vendor_err = 4;
      return IBV_WC_REM_ACCESS_ERR;
    }
  }
  if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head - atomic_load_explicit(&r->tail, memory_order_acquire) >= EMU_RING)
      return IBV_WC_RNR_RETRY_EXC_ERR;
    r->ring[head % EMU_RING].imm = wr->imm_data;
    r->ring[head % EMU_RING].length = (uint32_t)length;
    atomic_store_explicit(&r->head, head + 1, memory_order_release);
  }
  return IBV_WC_SUCCESS;
}

static int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                         struct ibv_send_wr **bad) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = ctx_of(qp->context);
  emu_cq *cq = (emu_cq *)qp->send_cq;
  int e = 0;
  pthread_mutex_lock(&c->lock);
  for (; wr != NULL; wr = wr->next) {
    if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
      e = EINVAL;
      break;
    }
    if ((wr->opcode != IBV_WR_RDMA_WRITE &&
         wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) ||
        wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge ||
        (wr->send_flags & IBV_SEND_INLINE)) {
      e = EINVAL;
      break;
    }
    if (q->send_outstanding >= (int)q->cap.max_send_wr) {
      e = ENOMEM; /* the send queue is full */
      break;
    }
    uint32_t vendor_err = 0;
    enum ibv_wc_status status = qp->state == IBV_QPS_ERR
                                    ? IBV_WC_WR_FLUSH_ERR
                                    : do_write(c, q, wr, &vendor_err);
    if (status != IBV_WC_SUCCESS && qp->state != IBV_QPS_ERR) {
      qp->state = IBV_QPS_ERR;
      atomic_store(&c->shm->qps[q->index].state, IBV_QPS_ERR);
    }
    if (status != IBV_WC_SUCCESS || q->sq_sig_all ||
        (wr->send_flags & IBV_SEND_SIGNALED)) {
      struct ibv_wc wc;
      memset(&wc, 0, sizeof wc);
      wc.wr_id = wr->wr_id;
      wc.status = status;
      wc.opcode = IBV_WC_RDMA_WRITE; /* with or without an immediate */
      wc.vendor_err = vendor_err;
      wc.qp_num = qp->qp_num;
      cq_push(cq, &wc);
      q->send_outstanding++;
    }
  }
  if (e != 0 && bad != NULL)
    *bad = wr;
  pthread_mutex_unlock(&c->lock);
  return e;
}

static int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                         struct ibv_recv_wr **bad) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = ctx_of(qp->context);
  int e = 0;
  pthread_mutex_lock(&c->lock);
  for (; wr != NULL; wr = wr->next) {
    if (qp->state == IBV_QPS_RESET || wr->num_sge < 0 ||
        wr->num_sge > (int)q->cap.max_recv_sge) {
      e = EINVAL;
      break;
    }
    if (qp->state == IBV_QPS_ERR) {
      struct ibv_wc wc;
      memset(&wc, 0, sizeof wc);
      wc.wr_id = wr->wr_id;
      wc.status = IBV_WC_WR_FLUSH_ERR;
      wc.opcode = IBV_WC_RECV;
      wc.qp_num = qp->qp_num;
      cq_push((emu_cq *)qp->recv_cq, &wc);
      continue;
    }
    if (q->recv_head - q->recv_tail >= q->cap.max_recv_wr) {
      e = ENOMEM;
      break;
    }
    q->recv_ids[q->recv_head % q->cap.max_recv_wr] = wr->wr_id;
    q->recv_head++;
  }
  if (e != 0 && bad != NULL)
    *bad = wr;
  pthread_mutex_unlock(&c->lock);
  return e;
}

static int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  emu_cq *q = (emu_cq *)cq;
  emu_context *c = ctx_of(cq->context);
  pthread_mutex_lock(&c->lock);
  /* Pair the immediates that arrived with posted receives, in order. */
  for (int i = 0; i < EMU_MAX_QP; i++) {
    emu_qp *p = c->qps[i];
    if (p == NULL || p->qp.recv_cq != cq)
      continue;
    emu_shm_qp *s = &c->shm->qps[i];
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    while (p->recv_tail < p->recv_head &&
           atomic_load_explicit(&s->head, memory_order_acquire) > tail &&
           q->head - q->tail < (uint64_t)q->size) {
      emu_event ev = s->ring[tail % EMU_RING];
      tail++;
      atomic_store_explicit(&s->tail, tail, memory_order_release);
      struct ibv_wc w;
      memset(&w, 0, sizeof w);
      w.wr_id = p->recv_ids[p->recv_tail % p->cap.max_recv_wr];
      p->recv_tail++;
      w.status = IBV_WC_SUCCESS;
      w.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      w.wc_flags = IBV_WC_WITH_IMM;
      w.imm_data = ev.imm;
      w.byte_len = ev.length;
      w.qp_num = p->qp.qp_num;
      cq_push(q, &w);
    }
  }
  int got = 0;
  if (q->overrun) {
    pthread_mutex_unlock(&c->lock);
    return -1;
  }
  while (got < n && q->tail < q->head) {
    wc[got] = q->wc[q->tail % (uint64_t)q->size];
    q->tail++;
    if (!(wc[got].opcode & IBV_WC_RECV)) {
      /* A send completion frees its send queue entry. */
      for (int i = 0; i < EMU_MAX_QP; i++)
        if (c->qps[i] && c->qps[i]->qp.qp_num == wc[got].qp_num) {
          c->qps[i]->send_outstanding--;
          break;
        }
    }
    got++;
  }
  pthread_mutex_unlock(&c->lock);
  return got;
}

EMU_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
  switch (status) {
  case IBV_WC_SUCCESS:
    return "success";
  case IBV_WC_LOC_LEN_ERR:
    return "local length error";
  case IBV_WC_LOC_QP_OP_ERR:
    return "local QP operation error";
  case IBV_WC_LOC_PROT_ERR:
    return "local protection error";
  case IBV_WC_WR_FLUSH_ERR:
    return "work request flushed (the QP is in error)";
  case IBV_WC_REM_ACCESS_ERR:
    return "remote access error";
  case IBV_WC_RETRY_EXC_ERR:
    return "transport retry counter exceeded";
  case IBV_WC_RNR_RETRY_EXC_ERR:
    return "RNR retry counter exceeded";
  case IBV_WC_FATAL_ERR:
    return "fatal error";
  default:
    return "other error";
  }
}
