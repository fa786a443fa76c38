/* shm.c - the shm transport of nccl_like: two ranks of one host share
 * the receiver's FIFO, as NCCL's src/transport/shm.cc does. Each rank puts
 * the receive FIFOs of its channels (head, tail, sizes, slots) in one
 * memfd segment; the previous rank of the ring maps it and its kernels
 * write the slots and the tail straight into it, while this rank's kernels
 * post head there. No proxy step and no system call per step: a step is a
 * copy into the slot and a release store. See docs/nccl_like.md,
 * "Transports".
 *
 * GPU ranks: a GPU rank registers both segments it maps (its own and
 * next's) with cuMemHostRegister(DEVICEMAP); its kernel reads and writes
 * them through the device addresses cuMemHostGetDevicePointer gives
 * (gpu_engine.c), over PCIe, with no proxy. Between two GPU ranks on one
 * GPU the p2p transport (p2p.c) runs on this file's handshake and
 * counters, with the receiver's slots in its device memory instead, sent
 * as a second fd (cuMem) or an IPC handle in the hello.
 *
 * How the segment travels: each rank listens on an abstract Unix socket
 * whose name holds a random 64-bit nonce, published with its pid in the
 * init allgather (the store, authenticated with the job's secret). The
 * sender connects; the receiver accepts only a connection whose
 * SO_PEERCRED pid and uid are the published ones (anything else is closed
 * at once, so strangers can neither take the segment nor hold the
 * listener), and sends the segment's fd with SCM_RIGHTS and its layout.
 * The sender checks the receiver's credentials the same way before it maps
 * anything. No name in /dev/shm: no process of another job can open it.
 *
 * Deaths: a dead peer closes no FIFO. The two sockets stay open for the
 * communicator's life; a waiting kernel's hook polls them (every
 * NL_SHM_CHECK_S) and a pidfd of each peer tells "died" from "left".
 * A stopped peer is the proxy's timeout (proxy.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/futex.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "host.h"
#include "log.h"
#include "nccl_like.h"
#include "params.h"
#include "transport.h"

/* How often a waiting kernel looks at its peers' sockets (seconds): the
 * bound on noticing a dead neighbour, far inside the 1 s the fault tests
 * allow. */
#define NL_SHM_CHECK_S 0.002
/* A waiting kernel spins this long (seconds; with a sched_yield per pass
 * once it has spun XC_SPINS_BEFORE_YIELD passes, kernels/device.h) before
 * it sleeps on the FIFO's event count. With more ranks than cores the
 * yields hand the core to the rank that holds the data, which a futex
 * wake-up does slower: at P=4 on 2 cores an 8 B allreduce (gather over
 * LL) took 25-27 us with 20 us of spinning, 50 us sleeping after 8 passes
 * and 26-31 us with 1 ms of spinning (docs/nccl_like.md, "Transports"). */
#define NL_SHM_SPIN_S 20e-6
/* Longest futex sleep of a waiting kernel (nanoseconds): the abort flag,
 * the peers' sockets and the fingerprints are looked at between sleeps. */
#define NL_SHM_SLEEP_NS 1000000L
/* A host rank waiting for a GPU rank's post: a kernel on the device
 * never calls the notify hook (it has no system calls), so nobody would
 * wake a futex sleeper before NL_SHM_SLEEP_NS. Instead it keeps spinning
 * with a sched_yield per pass for NL_SHM_GPU_YIELD_S, then sleeps
 * NL_SHM_GPU_NAP_NS at a time: a post costs it at most that much more
 * once it has waited a millisecond, and a long kernel costs one wake-up
 * per nap rather than a spinning core. */
#define NL_SHM_GPU_YIELD_S 1e-3
#define NL_SHM_GPU_NAP_NS 20000L
/* A GPU rank's proxy looks at its shm peers (nl_shm_watch) only once the
 * ring has not moved for this long (seconds): a kernel that has posted
 * its last step while the peer, done, already left, is not a death. */
#define NL_SHM_WATCH_IDLE_S 0.05
/* A segment's header message (receiver -> sender, with the fd). */
/* At destroy, how long a rank whose p2p slots prev opened with legacy CUDA
 * IPC waits for prev to close them (its socket's end) before it frees
 * them (nl_shm_free). */
#define NL_SHM_IPC_CLOSE_WAIT_S 2.0
#define NL_SHM_MAGIC 0x534c4e58u /* "XNLS" */
#define NL_SHM_VERSION 2u

typedef struct nl_shm_hello {
  uint32_t magic, version;
  uint64_t comm_id;
  int32_t rank; /* the receiver */
  int32_t nchannels;
  uint64_t buffsize;
  uint64_t stride; /* bytes per channel in the segment */
  uint64_t segment_bytes;
  /* p2p: where the slots are. 0: in the segment (shm); NL_P2P_SHARE_CUMEM:
   * a second fd, channel c's at c * buffsize; NL_P2P_SHARE_IPC: ipc. */
  uint32_t slot_kind, pad;
  uint64_t slot_bytes;
  uint8_t ipc[64];
} nl_shm_hello;

/* One end of a shm connection: the socket to the peer (liveness) and the
 * peer's pidfd ("died" or "left"). */
typedef struct nl_shm_peer {
  int rank;
  int sock;   /* -1: none */
  int pidfd;  /* -1: could not open (then a close reads as a death) */
  int closed; /* the socket read EOF or an error */
} nl_shm_peer;

typedef struct nl_shm {
  int listen_fd;
  uint64_t nonce;
  /* This rank's receive FIFOs: the segment it serves to prev. */
  int segment_fd;
  uint8_t *segment;
  size_t segment_bytes, stride;
  /* The next rank's segment, mapped here. */
  uint8_t *peer_segment;
  size_t peer_segment_bytes;
  nl_shm_peer to_prev, to_next; /* recv side's and send side's peer */
  /* p2p: this rank's receive slots (device memory) and next's, mapped. */
  nl_gpu_slots slots, peer_slots;
  int segment_on_device, peer_on_device; /* registered with the GPU */
  pthread_mutex_t check_lock; /* one thread polls the sockets at a time; */
  double checked_at;          /* guarded by it, with the peers' closed */
  unsigned long strangers; /* connections refused at the listener */
  /* The mesh (nl_shm_mesh_connect): a listener of its own, this rank's
   * segment of byte rings (one per sending peer) and every mesh peer's,
   * mapped; only the thread that drives the mesh touches these. */
  int mesh_listen_fd;
  uint64_t mesh_nonce;
  int mesh_fd;
  uint8_t *mesh_segment;
  size_t mesh_bytes, mesh_ring;
  struct nl_mesh_peer *mesh_peers; /* by rank */
  struct nl_mesh_shm *mesh_links;  /* by mesh link */
  uint64_t mesh_busy;              /* requests posted, not yet complete */
  double mesh_checked_at;
  unsigned long mesh_strangers;
  /* Single copy (CMA): XCOLL_SHM_CMA, XCOLL_SHM_CMA_MIN, and the messages
   * this rank received each way (reported at INFO when it is freed). */
  int mesh_cma;
  size_t mesh_cma_min;
  unsigned long mesh_received_cma, mesh_received_ring;
} nl_shm;

/* ---- this rank's info ---- */

xcoll_status nl_rank_info_fill(nl_state *st, nl_rank_info *info) {
  memset(info, 0, sizeof *info);
  long disable = 0, p2p_disable = 0;
  xcoll_status s = xcoll_param_int("XCOLL_SHM_DISABLE", &disable);
  if (s == XCOLL_SUCCESS)
    s = xcoll_param_int("XCOLL_P2P_DISABLE", &p2p_disable);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(st->comm, s);
  struct stat shm_dir, pid_ns;
  info->host_id_ok = xcoll_host_netns_id(info->host_id) &&
                     stat("/dev/shm", &shm_dir) == 0 &&
                     stat("/proc/self/ns/pid", &pid_ns) == 0;
  if (info->host_id_ok) {
    info->shm_dev = (uint64_t)shm_dir.st_dev;
    info->pid_ns = (uint64_t)pid_ns.st_ino;
  }
  info->pid = (int32_t)getpid();
  info->cuda_device = st->gpu != NULL ? 0 : -1;
  info->shm_allowed = disable == 0;
  info->p2p_allowed = p2p_disable == 0;
  nl_gpu_describe(st, info);
  return XCOLL_SUCCESS;
}

int nl_same_host(const nl_rank_info *a, const nl_rank_info *b) {
  return a->host_id_ok && b->host_id_ok &&
         memcmp(a->host_id, b->host_id, sizeof a->host_id) == 0 &&
         a->shm_dev == b->shm_dev && a->pid_ns == b->pid_ns;
}

/* A host rank, or a GPU rank that can map the segment into its device. */
static int maps_segment(const nl_rank_info *a) {
  return a->cuda_device < 0 || a->gpu_host_map;
}

/* Two ranks of one boot, network and pid namespace, with the same
 * /dev/shm, neither of which disabled shm, each a host rank or a GPU rank
 * that maps the segment into its device (the mixed pair, and two GPU
 * ranks that p2p does not take). */
static int shm_can_connect(const nl_rank_info *a, const nl_rank_info *b) {
  return a->shm_allowed && b->shm_allowed && maps_segment(a) &&
         maps_segment(b) && nl_same_host(a, b);
}

/* ---- sockets ---- */

static socklen_t shm_address(uint64_t nonce, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  /* Abstract: sun_path[0] = 0, no file, gone with the socket. */
  int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1,
                   "xcoll-nl-shm-%016" PRIx64, nonce);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* 1 when fd's peer is process pid of this user (SO_PEERCRED: what the
 * kernel recorded at connect or listen, not something the peer says). */
static int peer_is(int fd, int32_t pid) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return 0;
  return cred.pid == pid && cred.uid == getuid();
}

static int open_pidfd(int32_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
  return fd < 0 ? -1 : (int)fd;
#else
  (void)pid;
  return -1;
#endif
}

/* Listen on a fresh abstract name: *fd, and *nonce to publish. */
static xcoll_status shm_listen(nl_state *st, int *fd, uint64_t *nonce) {
  if (getrandom(nonce, sizeof *nonce, 0) != sizeof *nonce)
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "nccl_like shm: getrandom failed: %s", strerror(errno));
  *fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa;
  socklen_t len = shm_address(*nonce, &sa);
  if (*fd < 0 || bind(*fd, (struct sockaddr *)&sa, len) ||
      listen(*fd, 64) != 0)
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "nccl_like shm: rank %d cannot listen on an abstract "
                       "Unix socket: %s (XCOLL_SHM_DISABLE=1 goes over the "
                       "net plugin instead)",
                       st->rank, strerror(errno));
  return XCOLL_SUCCESS;
}

/* ---- the segment ---- */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Before the infos are exchanged: a host rank that allows shm listens and
 * publishes the listener's nonce in its info. */
static xcoll_status shm_setup(nl_state *st, nl_rank_info *mine) {
  /* p2p runs on this listener too, whether or not shm is disabled. */
  int p2p = mine->cuda_device >= 0 && mine->p2p_allowed &&
            mine->p2p_share != 0;
  if (!(mine->shm_allowed || p2p) || !mine->host_id_ok ||
      !maps_segment(mine))
    return XCOLL_SUCCESS; /* can_connect will say no to every peer */
  nl_shm *shm = calloc(1, sizeof *shm);
  if (!shm)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like shm: out of memory");
  shm->listen_fd = shm->segment_fd = -1;
  shm->slots.fd = shm->peer_slots.fd = -1;
  shm->to_prev = (nl_shm_peer){.rank = st->prev, .sock = -1, .pidfd = -1};
  shm->to_next = (nl_shm_peer){.rank = st->next, .sock = -1, .pidfd = -1};
  shm->mesh_listen_fd = shm->mesh_fd = -1;
  pthread_mutex_init(&shm->check_lock, NULL);
  st->shm = shm;
  xcoll_status s = shm_listen(st, &shm->listen_fd, &shm->nonce);
  mine->shm_nonce = shm->nonce;
  /* The mesh's messages go through shm too, on a listener of its own. */
  if (s == XCOLL_SUCCESS && st->mesh_on && mine->shm_allowed &&
      mine->cuda_device < 0) {
    s = shm_listen(st, &shm->mesh_listen_fd, &shm->mesh_nonce);
    mine->mesh_nonce = shm->mesh_nonce;
  }
  return s;
}

/* Bytes per channel in a segment: the counters' page, then the slots
 * unless they are device memory (p2p). */
static size_t segment_stride(const nl_state *st, const nl_transport *t) {
  return round_up(sizeof(nl_fifo_mem), 4096) +
         (t->device_slots ? 0 : st->buffsize);
}

/* The kind of device memory p2p shares between a and b: cuMem when both
 * can, else CUDA IPC. */
static int share_kind(const nl_rank_info *a, const nl_rank_info *b) {
  int both = nl_p2p_share_both(a, b);
  return (both & NL_P2P_SHARE_CUMEM) ? NL_P2P_SHARE_CUMEM : NL_P2P_SHARE_IPC;
}

/* Every channel's receive FIFO in one memfd: channel c's nl_fifo_mem at
 * c * stride, its slots one page later (p2p: at c * buffsize in one
 * block of device memory). */
xcoll_status nl_shm_recv_alloc(nl_state *st, nl_channel *ch) {
  nl_shm *shm = st->shm;
  int device_slots = ch->recv_transport->device_slots;
  if (shm->segment == NULL) {
    shm->stride = segment_stride(st, ch->recv_transport);
    shm->segment_bytes = shm->stride * (size_t)st->nchannels;
    shm->segment_fd = (int)syscall(SYS_memfd_create, "xcoll-nl-fifo",
                                   (unsigned)MFD_CLOEXEC);
    if (shm->segment_fd < 0 ||
        ftruncate(shm->segment_fd, (off_t)shm->segment_bytes) != 0)
      return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                         "nccl_like shm: rank %d cannot make a %zu B "
                         "memfd segment: %s (XCOLL_SHM_DISABLE=1 goes over "
                         "the net plugin)",
                         st->rank, shm->segment_bytes, strerror(errno));
    void *p = mmap(NULL, shm->segment_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED, shm->segment_fd, 0);
    if (p == MAP_FAILED)
      return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                         "nccl_like shm: rank %d cannot map its %zu B "
                         "segment: %s (lower XCOLL_BUFFSIZE or "
                         "XCOLL_NCHANNELS)",
                         st->rank, shm->segment_bytes, strerror(errno));
    shm->segment = p;
    /* Touch every page here, at init, not inside the first collective. */
    memset(shm->segment, 0, shm->segment_bytes);
    xcoll_status s = XCOLL_SUCCESS;
    if (st->gpu != NULL) {
      s = nl_gpu_map_host(st, shm->segment, shm->segment_bytes);
      shm->segment_on_device = s == XCOLL_SUCCESS;
    }
    int kind = device_slots ? share_kind(&st->rank_infos[st->rank],
                                         &st->rank_infos[st->prev])
                            : 0;
    if (s == XCOLL_SUCCESS && device_slots)
      s = nl_gpu_slots_create(st, kind, st->buffsize * (size_t)st->nchannels,
                              &shm->slots);
    if (s != XCOLL_SUCCESS)
      return s;
    if (device_slots)
      XCOLL_INFO("nccl_like p2p: rank %d's receive slots (%zu B of device "
                 "memory) go to rank %d by %s",
                 st->rank, shm->slots.bytes, st->prev,
                 kind == NL_P2P_SHARE_CUMEM ? "cuMem (a POSIX fd)"
                                            : "CUDA IPC");
  }
  uint8_t *base = shm->segment + (size_t)ch->id * shm->stride;
  ch->recv_mem = (nl_fifo_mem *)base;
  /* p2p: a device address, which only the kernels follow. */
  ch->recv_buff = device_slots
                      ? (uint8_t *)(uintptr_t)shm->slots.dptr +
                            (size_t)ch->id * st->buffsize
                      : base + round_up(sizeof(nl_fifo_mem), 4096);
  return XCOLL_SUCCESS;
}

/* ---- connect: this rank accepts prev's connection and serves its
 * segment; it connects to next and maps next's. ---- */

static xcoll_status send_segment(nl_state *st, nl_shm *shm, int fd) {
  nl_shm_hello hello = {.magic = NL_SHM_MAGIC,
                        .version = NL_SHM_VERSION,
                        .comm_id = st->comm->comm_id,
                        .rank = st->rank,
                        .nchannels = st->nchannels,
                        .buffsize = st->buffsize,
                        .stride = shm->stride,
                        .segment_bytes = shm->segment_bytes,
                        .slot_kind = (uint32_t)(shm->slots.dptr != 0
                                                    ? shm->slots.kind
                                                    : 0),
                        .slot_bytes = shm->slots.bytes};
  int fds[2] = {shm->segment_fd, shm->slots.fd};
  int nfds = hello.slot_kind == NL_P2P_SHARE_CUMEM ? 2 : 1;
  if (hello.slot_kind == NL_P2P_SHARE_IPC)
    memcpy(hello.ipc, shm->slots.ipc, sizeof hello.ipc);
  char control[CMSG_SPACE(2 * sizeof(int))];
  memset(control, 0, sizeof control);
  struct iovec iov = {.iov_base = &hello, .iov_len = sizeof hello};
  struct msghdr msg = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control,
                       .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
  memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
  /* A fresh stream socket has room for 64 bytes: this never blocks. */
  ssize_t sent;
  do
    sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent != (ssize_t)sizeof hello)
    return xcoll_error(st->comm, XCOLL_ERR_REMOTE,
                       "nccl_like shm: rank %d could not send its FIFO "
                       "segment to rank %d (previous in the ring): %s",
                       st->rank, st->prev,
                       sent < 0 ? strerror(errno) : "short write");
  return XCOLL_SUCCESS;
}

/* Receive next's hello and fd, check them and map the segment. Returns
 * SUCCESS with *done = 0 while nothing has arrived yet. */
static xcoll_status take_segment(nl_state *st, nl_shm *shm, int *done) {
  nl_shm_hello hello;
  char control[CMSG_SPACE(2 * sizeof(int))];
  struct iovec iov = {.iov_base = &hello, .iov_len = sizeof hello};
  struct msghdr msg = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control,
                       .msg_controllen = sizeof control};
  ssize_t got = recvmsg(shm->to_next.sock, &msg, MSG_CMSG_CLOEXEC);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return XCOLL_SUCCESS;
  int fd = -1, slot_fd = -1, extra = 0;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); got > 0 && cm != NULL;
       cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int got_fds[2] = {-1, -1};
    memcpy(got_fds, CMSG_DATA(cm), (n < 2 ? n : 2) * sizeof(int));
    if (fd < 0 && n >= 1 && n <= 2) {
      fd = got_fds[0];
      slot_fd = n == 2 ? got_fds[1] : -1;
    } else {
      for (size_t i = 0; i < n && i < 2; i++)
        close(got_fds[i]);
      extra = 1;
    }
  }
  const nl_transport *t = st->channels[0].send_transport;
  size_t want = segment_stride(st, t);
  uint32_t want_kind =
      t->device_slots
          ? (uint32_t)share_kind(&st->rank_infos[st->rank],
                                 &st->rank_infos[st->next])
          : 0;
  struct stat sb;
  const char *bad =
      got < 0                                   ? strerror(errno)
      : got == 0                                ? "it closed the connection"
      : got != (ssize_t)sizeof hello || fd < 0 || extra
                                                ? "a short message or no fd"
      : hello.magic != NL_SHM_MAGIC ||
              hello.version != NL_SHM_VERSION   ? "another protocol version"
      : hello.comm_id != st->comm->comm_id ||
              hello.rank != st->next            ? "another communicator's"
      : hello.nchannels != st->nchannels || hello.buffsize != st->buffsize ||
              hello.stride != want ||
              hello.segment_bytes != want * (size_t)st->nchannels ||
              hello.slot_kind != want_kind ||
              (want_kind != 0 &&
               hello.slot_bytes < st->buffsize * (size_t)st->nchannels) ||
              (want_kind == NL_P2P_SHARE_CUMEM) != (slot_fd >= 0)
                                                ? "another FIFO layout"
      : fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < hello.segment_bytes
                                                ? "a segment smaller than it "
                                                  "says"
                                                : NULL;
  if (bad != NULL) {
    if (fd >= 0)
      close(fd);
    if (slot_fd >= 0)
      close(slot_fd);
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "nccl_like shm: rank %d: rank %d (next in the ring) "
                       "sent no usable FIFO segment: %s",
                       st->rank, st->next, bad);
  }
  void *p = mmap(NULL, hello.segment_bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
  close(fd); /* the mapping keeps the memory */
  if (p == MAP_FAILED) {
    if (slot_fd >= 0)
      close(slot_fd);
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like shm: rank %d cannot map rank %d's %" PRIu64
                       " B segment: %s",
                       st->rank, st->next, hello.segment_bytes,
                       strerror(errno));
  }
  shm->peer_segment = p;
  shm->peer_segment_bytes = hello.segment_bytes;
  xcoll_status s = XCOLL_SUCCESS;
  if (st->gpu != NULL) {
    s = nl_gpu_map_host(st, shm->peer_segment, shm->peer_segment_bytes);
    shm->peer_on_device = s == XCOLL_SUCCESS;
  }
  if (s == XCOLL_SUCCESS && want_kind != 0)
    s = nl_gpu_slots_import(st, (int)want_kind, slot_fd, hello.ipc,
                            hello.slot_bytes, &shm->peer_slots);
  if (slot_fd >= 0)
    close(slot_fd); /* the mapping keeps the memory */
  if (s != XCOLL_SUCCESS)
    return s;
  *done = 1;
  return XCOLL_SUCCESS;
}

/* Accept pending connections: prev's (by its credentials) is kept and
 * served; any other is closed at once. */
static xcoll_status accept_prev(nl_state *st, nl_shm *shm) {
  const nl_rank_info *prev = &st->rank_infos[st->prev];
  for (;;) {
    int fd = accept4(shm->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return XCOLL_SUCCESS; /* EAGAIN, or a connection reset meanwhile */
    if (shm->to_prev.sock >= 0 || !peer_is(fd, prev->pid)) {
      close(fd);
      shm->strangers++;
      continue;
    }
    shm->to_prev.sock = fd;
    xcoll_status s = send_segment(st, shm, fd);
    if (s != XCOLL_SUCCESS)
      return s;
    /* prev holds the slots' memory now: the fd has done its work. */
    if (shm->slots.fd >= 0) {
      close(shm->slots.fd);
      shm->slots.fd = -1;
    }
  }
}

/* Connect to the listener of rank peer (abstract name nonce) and check
 * that its process is the pid peer published: *fd, or -1 (with SUCCESS)
 * while its backlog is full (again on the next pass). what names the
 * listener in errors: "listener" and where = " (next in the ring)", or
 * "mesh listener" and "". */
static xcoll_status dial_listener(nl_state *st, int peer, uint64_t nonce,
                                  const char *what, const char *where,
                                  int *fd) {
  *fd = -1;
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa;
  socklen_t len = shm_address(nonce, &sa);
  if (s < 0)
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "nccl_like shm: socket: %s", strerror(errno));
  if (connect(s, (struct sockaddr *)&sa, len) != 0) {
    int err = errno;
    close(s);
    if (err == EAGAIN || err == ECONNREFUSED || err == EINTR)
      return XCOLL_SUCCESS;
    return xcoll_error(st->comm, XCOLL_ERR_REMOTE,
                       "nccl_like shm: rank %d cannot reach rank %d's %s%s: "
                       "%s",
                       st->rank, peer, what, where, strerror(err));
  }
  int32_t pid = st->rank_infos[peer].pid;
  if (!peer_is(s, pid)) {
    close(s);
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "nccl_like shm: rank %d: the %s of rank %d%s belongs "
                       "to another process than the pid %d it published",
                       st->rank, what, peer, where, (int)pid);
  }
  *fd = s;
  return XCOLL_SUCCESS;
}

static xcoll_status connect_next(nl_state *st, nl_shm *shm) {
  int fd;
  xcoll_status s =
      dial_listener(st, st->next, st->rank_infos[st->next].shm_nonce,
                    "listener", " (next in the ring)", &fd);
  if (s == XCOLL_SUCCESS && fd >= 0)
    shm->to_next.sock = fd;
  return s;
}

static void bind_send(nl_state *st, nl_shm *shm) {
  size_t fifo = round_up(sizeof(nl_fifo_mem), 4096);
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    if (!ch->send_transport->shm_handshake)
      continue;
    uint8_t *base =
        shm->peer_segment + (size_t)c * segment_stride(st, ch->send_transport);
    ch->send_mem = (nl_fifo_mem *)base;
    ch->send_buff = ch->send_transport->device_slots
                        ? (uint8_t *)(uintptr_t)shm->peer_slots.dptr +
                              (size_t)c * st->buffsize
                        : base + fifo;
  }
}

xcoll_status nl_shm_connect(nl_state *st) {
  nl_shm *shm = st->shm;
  int need_prev = st->channels[0].recv_transport->shm_handshake;
  int need_next = st->channels[0].send_transport->shm_handshake;
  /* p2p and shm in the two directions share one exchange: run it once. */
  if (shm->listen_fd < 0 && (!need_next || shm->peer_segment != NULL))
    return XCOLL_SUCCESS;
  int mapped = !need_next;
  double deadline = nl_now() + st->timeout_s;
  xcoll_status s = XCOLL_SUCCESS;
  while (s == XCOLL_SUCCESS) {
    if (need_prev && shm->to_prev.sock < 0)
      s = accept_prev(st, shm);
    if (s == XCOLL_SUCCESS && need_next && shm->to_next.sock < 0)
      s = connect_next(st, shm);
    if (s == XCOLL_SUCCESS && !mapped && shm->to_next.sock >= 0)
      s = take_segment(st, shm, &mapped);
    if (s != XCOLL_SUCCESS)
      break;
    if (mapped && (!need_prev || shm->to_prev.sock >= 0))
      break;
    if (nl_now() > deadline)
      return xcoll_error(
          st->comm, XCOLL_ERR_TIMEOUT,
          "nccl_like shm: rank %d: rank %d (%s in the ring) %s within %.1f s "
          "(XCOLL_TIMEOUT_S)",
          st->rank, !mapped ? st->next : st->prev,
          !mapped ? "next" : "previous",
          !mapped ? "did not send its FIFO segment" : "did not connect",
          st->timeout_s);
    struct pollfd fds[2];
    nfds_t n = 0;
    if (need_prev && shm->to_prev.sock < 0)
      fds[n++] = (struct pollfd){.fd = shm->listen_fd, .events = POLLIN};
    if (!mapped && shm->to_next.sock >= 0)
      fds[n++] = (struct pollfd){.fd = shm->to_next.sock, .events = POLLIN};
    /* Not yet connected to next: its listener exists (it published the
     * nonce after listening), so only a full backlog delays us. */
    (void)poll(fds, n, n == 0 || shm->to_next.sock < 0 ? 1 : 100);
  }
  if (shm->strangers > 0)
    XCOLL_WARN("nccl_like shm: rank %d closed %lu connection(s) to its "
               "FIFO listener from processes other than rank %d",
               st->rank, shm->strangers, st->prev);
  if (s != XCOLL_SUCCESS)
    return s;
  close(shm->listen_fd);
  shm->listen_fd = -1;
  if (need_prev)
    shm->to_prev.pidfd = open_pidfd(st->rank_infos[st->prev].pid);
  if (need_next) {
    shm->to_next.pidfd = open_pidfd(st->rank_infos[st->next].pid);
    bind_send(st, shm);
  }
  return XCOLL_SUCCESS;
}

static void mesh_free(nl_state *st, nl_shm *shm);

static void peer_close(nl_shm_peer *p) {
  if (p->sock >= 0)
    close(p->sock);
  if (p->pidfd >= 0)
    close(p->pidfd);
  p->sock = p->pidfd = -1;
}

/* 1 once p's socket reads end of file (the peer closed it, or exited)
 * within seconds; bytes still queued on it are read past. */
static int peer_closes_within(nl_shm_peer *p, double seconds) {
  if (p->sock < 0 || p->closed)
    return 1;
  const double until = nl_now() + seconds;
  for (;;) {
    double left = until - nl_now();
    if (left <= 0)
      return 0;
    struct pollfd pfd = {.fd = p->sock, .events = POLLIN};
    int ready = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (ready < 0 && errno != EINTR)
      return 0;
    if (ready <= 0)
      continue;
    char bytes[64];
    ssize_t got = recv(p->sock, bytes, sizeof bytes, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
      p->closed = 1;
      return 1;
    }
  }
}

void nl_shm_free(nl_state *st) {
  nl_shm *shm = st->shm;
  if (shm == NULL)
    return;
  /* A GPU rank's kernels may still run on this memory (a comm aborted
   * with calls nobody waited for): they end soon, the abort flag is up. */
  nl_gpu_quiesce(st);
  for (int c = 0; c < NL_MAX_CHANNELS; c++) {
    nl_channel *ch = &st->channels[c];
    if (ch->send_transport != NULL && ch->send_transport->shm_handshake)
      ch->send_mem = NULL, ch->send_buff = NULL;
    if (ch->recv_transport != NULL && ch->recv_transport->shm_handshake)
      ch->recv_mem = NULL, ch->recv_buff = NULL;
  }
  if (shm->segment_on_device)
    nl_gpu_unmap_host(st, shm->segment);
  if (shm->peer_on_device)
    nl_gpu_unmap_host(st, shm->peer_segment);
  /* next's slots first, then the socket to next, whose end tells next
   * that this rank no longer maps them. Legacy CUDA IPC memory must not
   * be freed before the process that opened it has closed it (CUDA Driver
   * API, cuIpcOpenMemHandle: undefined behaviour otherwise; cuMem's
   * handles are counted, so freeing them is always safe): this rank waits
   * for prev's end before it frees its own IPC slots, and leaves them to
   * the context's end if prev keeps its socket open past
   * NL_SHM_IPC_CLOSE_WAIT_S (prev destroys its communicators in another
   * order, or hangs). Every rank closes towards next before it waits for
   * prev, so the waits form no cycle. */
  nl_gpu_slots_free(st, &shm->peer_slots);
  peer_close(&shm->to_next);
  if (shm->slots.kind == NL_P2P_SHARE_IPC && shm->slots.dptr != 0 &&
      !peer_closes_within(&shm->to_prev, NL_SHM_IPC_CLOSE_WAIT_S)) {
    XCOLL_INFO("nccl_like: rank %d: rank %d still has this rank's p2p "
               "slots open (CUDA IPC) after %.0f s; they are left to the "
               "CUDA context's end rather than freed under it",
               st->rank, st->prev, NL_SHM_IPC_CLOSE_WAIT_S);
    shm->slots.dptr = 0;
  }
  nl_gpu_slots_free(st, &shm->slots);
  if (shm->listen_fd >= 0)
    close(shm->listen_fd);
  if (shm->segment_fd >= 0)
    close(shm->segment_fd);
  if (shm->segment)
    munmap(shm->segment, shm->segment_bytes);
  if (shm->peer_segment)
    munmap(shm->peer_segment, shm->peer_segment_bytes);
  peer_close(&shm->to_prev);
  mesh_free(st, shm);
  pthread_mutex_destroy(&shm->check_lock);
  free(shm);
  st->shm = NULL;
}

/* ---- watching the peers ---- */

/* 1 once p's socket is closed (EOF, reset): read without blocking. */
static int peer_gone(nl_shm_peer *p) {
  if (p->closed)
    return 1;
  if (p->sock < 0)
    return 0;
  struct pollfd pfd = {.fd = p->sock, .events = POLLIN};
  if (poll(&pfd, 1, 0) <= 0)
    return 0;
  char byte;
  ssize_t got = recv(p->sock, &byte, 1, MSG_DONTWAIT);
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
    p->closed = 1;
  return p->closed;
}

/* "died" when the peer's process has exited (or its pidfd could not be
 * opened), else "left (destroyed its communicator)". */
static const char *how_gone(const nl_shm_peer *p) {
  if (p->pidfd < 0)
    return "died (its connection closed)";
  /* Not waited for: a killed process closes its files a moment before its
   * pidfd becomes readable, so a death seen in that moment is called a
   * leave; waiting for the pidfd would hold every survivor's failure back,
   * past the launcher's stop of the job when the peer left on an error. */
  struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
  return poll(&pfd, 1, 0) > 0 ? "died (its process exited)"
                              : "left (destroyed its communicator)";
}

static void check_peers(nl_state *st, nl_channel *ch) {
  nl_shm *shm = st->shm;
  int send_shm = ch->send_transport->shm_handshake;
  int recv_shm = ch->recv_transport->shm_handshake;
  uint64_t sent = send_shm ? atomic_load_explicit(&ch->send_mem->tail,
                                                  memory_order_acquire)
                           : 0;
  uint64_t taken = send_shm ? atomic_load_explicit(&ch->send_mem->head,
                                                   memory_order_acquire)
                            : 0;
  /* next took fewer steps than this rank wrote: it never will. */
  if (send_shm && sent > taken && peer_gone(&shm->to_next)) {
    nl_fail(st, XCOLL_ERR_REMOTE, st->next,
            "nccl_like: rank %d channel %d: rank %d (next in the ring) %s "
            "before it took step %" PRIu64 " of the shared-memory FIFO",
            st->rank, ch->id, st->next, how_gone(&shm->to_next), taken);
    return;
  }
  /* The kernel waits with every step of prev consumed and nothing of its
   * own outstanding: it waits for prev, which is gone. */
  uint64_t landed = recv_shm ? atomic_load_explicit(&ch->recv_mem->tail,
                                                    memory_order_acquire)
                             : 0;
  uint64_t consumed = recv_shm ? atomic_load_explicit(&ch->recv_mem->head,
                                                      memory_order_acquire)
                               : 0;
  if (recv_shm && landed == consumed && sent == taken &&
      peer_gone(&shm->to_prev))
    nl_fail(st, XCOLL_ERR_REMOTE, st->prev,
            "nccl_like: rank %d channel %d: rank %d (previous in the ring) "
            "%s while rank %d waits for step %" PRIu64
            " of the shared-memory FIFO",
            st->rank, ch->id, st->prev, how_gone(&shm->to_prev), st->rank,
            landed);
}

/* The FIFO memory that holds counter: the channel's receive FIFO (tail) or
 * the peer's, which the send side writes (head). */
static nl_fifo_mem *fifo_of(nl_channel *ch, const _Atomic uint64_t *counter) {
  return counter == &ch->recv_mem->tail ? ch->recv_mem : ch->send_mem;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t seen, long ns) {
  struct timespec limit = {0, ns};
  /* Not FUTEX_PRIVATE_FLAG: the word is in memory two processes map. */
  (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &limit, NULL,
                0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
  (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT32_MAX, NULL,
                NULL, 0);
}

/* A kernel that spun NL_SHM_SPIN_S sleeps on the FIFO's event count until
 * the peer posts (nl_shm_posted) or NL_SHM_SLEEP_NS.
 * The count is bumped after the post's release store and read before the
 * counter is checked again, both in sequentially consistent order, so a
 * post is never slept through. A GPU rank posts without a wake-up: waiting
 * on one, the kernel yields, then naps NL_SHM_GPU_NAP_NS at a time. */
int nl_shm_wait(nl_state *st, nl_channel *ch, const _Atomic uint64_t *counter,
                uint64_t target, double now, double waited_s) {
  nl_shm *shm = st->shm;
  /* now is the hook's reading: no second clock read per pass of the
   * kernel's wait. */
  if (pthread_mutex_trylock(&shm->check_lock) == 0) {
    if (now - shm->checked_at >= NL_SHM_CHECK_S) {
      shm->checked_at = now;
      check_peers(st, ch);
    }
    pthread_mutex_unlock(&shm->check_lock);
  }
  if (waited_s < NL_SHM_SPIN_S)
    return 0;
  nl_fifo_mem *fifo = fifo_of(ch, counter);
  int poster = fifo == ch->recv_mem ? st->prev : st->next;
  if (st->rank_infos[poster].cuda_device >= 0) {
    if (waited_s < NL_SHM_GPU_YIELD_S)
      return 0; /* the kernel's own pass yields */
    struct timespec nap = {0, NL_SHM_GPU_NAP_NS};
    nanosleep(&nap, NULL);
    return 1;
  }
  uint32_t seen = atomic_load(&fifo->wake_seq);
  atomic_fetch_add(&fifo->waiters, 1);
  if (atomic_load(counter) < target &&
      !atomic_load_explicit(st->abort, memory_order_relaxed))
    futex_wait(&fifo->wake_seq, seen, NL_SHM_SLEEP_NS);
  atomic_fetch_sub(&fifo->waiters, 1);
  return 1;
}

/* After a post: wake the peer if it sleeps on this FIFO. */
void nl_shm_posted(nl_state *st, nl_channel *ch, int is_send) {
  (void)st;
  nl_fifo_mem *fifo = is_send ? ch->send_mem : ch->recv_mem;
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&fifo->waiters, memory_order_relaxed) > 0) {
    atomic_fetch_add(&fifo->wake_seq, 1);
    futex_wake_all(&fifo->wake_seq);
  }
}

/* A GPU rank's proxy, while a kernel runs and the ring stands still: the
 * peers' sockets, as a host rank's waiting kernel looks at them. */
void nl_shm_watch(nl_state *st, double idle_s) {
  nl_shm *shm = st->shm;
  if (shm == NULL || idle_s < NL_SHM_WATCH_IDLE_S)
    return;
  pthread_mutex_lock(&shm->check_lock);
  double now = nl_now();
  if (now - shm->checked_at >= NL_SHM_CHECK_S) {
    shm->checked_at = now;
    for (int c = 0; c < st->nchannels && !atomic_load(&st->failed); c++)
      check_peers(st, &st->channels[c]);
  }
  pthread_mutex_unlock(&shm->check_lock);
}

/* ---- the mesh over shared memory ----
 *
 * Between two ranks of one host, each direction of a mesh link (channel.c)
 * is a byte ring in the receiver's mesh segment: the sender copies a
 * message in (an 8-byte length, the bytes, padding to 8) and publishes its
 * tail; the receiver copies it out into the buffer of its oldest posted
 * receive and publishes its head. A message larger than the ring streams
 * through it in pieces of at most NL_MESH_SHM_PIECE bytes. Requests are
 * moved forward by isend, irecv and test, in the order posted: no thread
 * of its own, no system call per message. A rank that waits sleeps on the
 * event count of its own segment, which a peer bumps (waking it) after it
 * posts a tail or head there while someone sleeps (nl_shm_mesh_wait), as
 * the ring's shm FIFOs do. Deaths: each pair of peers holds a connection
 * to each other's mesh listener and a pidfd, looked at while a request
 * waits on the peer, as check_peers does for the ring.
 *
 * Single copy (CMA): a message of at least XCOLL_SHM_CMA_MIN bytes, where
 * the receiver found at connect that it may read the sender's memory
 * (mesh_probe: the ring's cma word), puts only a descriptor in the ring:
 * its length word with NL_MESH_CMA_FLAG and the address of the sender's
 * buffer. The receiver copies the bytes straight from that buffer into its
 * posted receive with process_vm_readv and then publishes its head past
 * the descriptor; only then is the send complete, so the sender's buffer
 * stays untouched until the copy is done. One copy instead of two, as
 * Open MPI's sm does with CMA; off unless XCOLL_SHM_CMA=1, since a
 * process_vm_readv copies several times slower than a memcpy through the
 * ring, which stays in cache (docs/nccl_like.md, "The mesh over shm"). */

/* Requests in flight per mesh link and direction (p2p.c keeps 8 posted). */
#define NL_MESH_SHM_DEPTH 8
/* Bytes copied before the tail or head is published, so that the peer
 * can start on a large message before all of it is in. */
#define NL_MESH_SHM_PIECE ((size_t)64 << 10)
/* The segment's first page holds its event count; the ring from rank s
 * sits at NL_MESH_SHM_HDR + s * stride: its counters' page, then the
 * ring's bytes. */
#define NL_MESH_SHM_HDR ((size_t)4096)
#define NL_MESH_SHM_MAGIC 0x4d4c4e58u /* "XNLM" */
#define NL_MESH_SHM_VERSION 2u
/* The length word's top bit: a CMA descriptor, whose next word is the
 * address of the message in the sender's memory. */
#define NL_MESH_CMA_FLAG ((uint64_t)1 << 63)
/* The next bit: a checked message (NL_MESH_UNCHECKED), whose length is
 * the word's low 32 bits and its check's low 30 bits the 30 above. */
#define NL_MESH_CHECK_FLAG ((uint64_t)1 << 62)
#define NL_MESH_CHECK_MASK ((uint64_t)0x3fffffff)
/* Ring bytes of a CMA descriptor: the length word and the address. */
#define NL_MESH_CMA_DESC 16u
/* Bytes per process_vm_readv call, so that a copy that the peer's death
 * cuts short is noticed between pieces. */
#define NL_MESH_CMA_PIECE ((size_t)4 << 20)

/* Bytes of each ring: 1 MiB (two of pairwise's 512 KiB units) up to 8
 * ranks, 256 KiB beyond, so that a rank's segment stays within 16 MiB up
 * to 64 ranks of a host. */
static size_t mesh_ring_bytes(int world_size) {
  return world_size <= 8 ? (size_t)1 << 20 : (size_t)256 << 10;
}

typedef struct nl_mesh_event {
  _Alignas(64) _Atomic uint32_t waiters;
  _Atomic uint32_t wake_seq;
} nl_mesh_event;

typedef struct nl_mesh_ring {
  _Alignas(64) _Atomic uint64_t head; /* bytes the receiver consumed */
  _Alignas(64) _Atomic uint64_t tail; /* bytes the sender wrote */
  /* Written once by the receiver at connect: 1 when it may read the
   * sender's memory (mesh_probe) and takes CMA descriptors; 0 (not probed
   * yet, or not allowed): the sender copies every message into the ring. */
  _Alignas(64) _Atomic uint64_t cma;
} nl_mesh_ring;

typedef struct nl_mesh_hello {
  uint32_t magic, version;
  uint64_t comm_id;
  int32_t rank, world_size; /* the segment's owner */
  uint64_t ring_bytes, segment_bytes;
  /* Where the owner's mesh nonce (published in the init allgather) lies
   * in its memory: the receiver of its messages reads it there with
   * process_vm_readv to learn whether CMA works (mesh_probe); 0 where
   * the owner has CMA off, so that no address of its leaves it then. */
  uint64_t nonce_at;
} nl_mesh_hello;

/* A mesh peer on shm: the connection to its mesh listener (it sent its
 * segment over it; liveness) and its pidfd, the one it made to this rank's
 * (kept open: the peer watches this rank through it), its segment. */
typedef struct nl_mesh_peer {
  int on; /* the mesh reaches this rank through shm */
  nl_shm_peer out;
  int in_sock;
  uint8_t *segment;
  size_t segment_bytes;
  uint64_t nonce_at; /* its hello's */
} nl_mesh_peer;

enum { MESH_REQ_FREE = 0, MESH_REQ_POSTED, MESH_REQ_DONE };

struct nl_mesh_request {
  int state;
  xcoll_status status; /* a DONE request's */
  uint8_t *buf;        /* send: const in spirit */
  size_t bytes;        /* send: the message; receive: the room */
  uint64_t len;        /* the message's length (receive: once read) */
  uint64_t check;      /* NL_MESH_UNCHECKED, or the check it was posted
                          with */
  uint64_t total;      /* ring bytes it takes: 8 + len rounded up to 8,
                          or NL_MESH_CMA_DESC for a CMA descriptor */
  uint64_t moved;      /* ring bytes of it written or consumed */
  int cma;             /* sent or received as a CMA descriptor */
  uint64_t end;        /* CMA send: the tail after its descriptor, which
                          the receiver's head passes once it copied */
};

/* One direction's end: the ring, the requests in posting order (request
 * k at k % NL_MESH_SHM_DEPTH), the counter this end owns, kept here. */
typedef struct mesh_end {
  nl_mesh_ring *ring;
  uint8_t *data;
  nl_mesh_event *wake; /* the peer's event count (it may sleep on us) */
  int peer;
  uint64_t mine; /* send: tail; receive: head */
  nl_mesh_request req[NL_MESH_SHM_DEPTH];
  uint64_t posted, active; /* requests posted; the first not complete */
  int broken;              /* a bad length: the stream is lost */
} mesh_end;

typedef struct nl_mesh_shm {
  mesh_end send, recv;
  size_t ring_bytes;
  char error[192];
} nl_mesh_shm;

/* Two ranks in one process (threads) are left to net: the mesh listener
 * tells its peers apart by their pids. */
int nl_shm_mesh_pair(const nl_rank_info *a, const nl_rank_info *b) {
  return shm_can_connect(a, b) && a->cuda_device < 0 && b->cuda_device < 0 &&
         a->mesh_nonce != 0 && b->mesh_nonce != 0 && a->pid != b->pid;
}

/* After this end published its counter: wake the peer if it sleeps. The
 * waiters count is read with a read-modify-write, not a plain load after a
 * fence (which the ThreadSanitizer build refuses): the peer registers with
 * one too (nl_shm_mesh_wait), so the two are ordered on waiters. Either the
 * peer's comes first and this one sees it, or this one comes first and the
 * peer, reading from it, then sees the counter published before it. */
static void mesh_wake(nl_mesh_event *e) {
  if (atomic_fetch_add(&e->waiters, 0) > 0) {
    atomic_fetch_add(&e->wake_seq, 1);
    futex_wake_all(&e->wake_seq);
  }
}

/* Ring bytes the active request of end can move now (0: it waits on the
 * peer, or nothing is posted). */
static uint64_t mesh_ready(const mesh_end *e, size_t cap, int is_send) {
  if (e->active == e->posted || e->broken)
    return 0;
  const nl_mesh_request *r = &e->req[e->active % NL_MESH_SHM_DEPTH];
  if (is_send && r->cma && r->moved == r->total)
    /* Its descriptor is out: it waits for the receiver's copy. */
    return atomic_load_explicit(&e->ring->head, memory_order_acquire) >=
           r->end;
  uint64_t room =
      is_send ? cap - (e->mine - atomic_load_explicit(&e->ring->head,
                                                      memory_order_acquire))
              : atomic_load_explicit(&e->ring->tail, memory_order_acquire) -
                    e->mine;
  /* The length word, and a CMA descriptor, move whole. */
  uint64_t whole = is_send && r->cma ? NL_MESH_CMA_DESC : 8;
  return r->moved == 0 && room < whole ? 0 : room;
}

static void ring_copy(uint8_t *ring, size_t cap, uint64_t at, void *user,
                      size_t n, int to_ring) {
  size_t off = (size_t)(at % cap), first = cap - off < n ? cap - off : n;
  uint8_t *u = user;
  if (to_ring) {
    memcpy(ring + off, u, first);
    memcpy(ring, u + first, n - first);
  } else {
    memcpy(u, ring + off, first);
    memcpy(u + first, ring, n - first);
  }
}

/* A CMA message: copy r->len bytes from address at in the sending peer's
 * memory into r's buffer, in pieces. 0, with the link's error set, when
 * the kernel refuses or a piece comes short: the sender died or its
 * buffer is no longer mapped. */
static int mesh_cma_copy(nl_state *st, nl_mesh_shm *l, const mesh_end *e,
                         nl_mesh_request *r, uint64_t at) {
  pid_t pid = (pid_t)st->rank_infos[e->peer].pid;
  uint64_t done = 0;
  while (done < r->len) {
    size_t n = r->len - done > NL_MESH_CMA_PIECE ? NL_MESH_CMA_PIECE
                                                 : (size_t)(r->len - done);
    struct iovec local = {.iov_base = r->buf + done, .iov_len = n};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)(at + done),
                           .iov_len = n};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      snprintf(l->error, sizeof l->error,
               "rank %d could not copy a message of %" PRIu64
               " B from rank %d's memory after %" PRIu64
               " B (process_vm_readv: %s): rank %d died or unmapped its "
               "send buffer",
               st->rank, r->len, e->peer, done,
               got < 0 ? strerror(errno) : "nothing read", e->peer);
      return 0;
    }
    done += (uint64_t)got;
  }
  /* The pid names the sender only while the sender lives (a dead one's
   * pid can be reused): a sender still alive now was the one read. */
  int pidfd = st->shm->mesh_peers[e->peer].out.pidfd;
  struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
  if (pidfd >= 0 && poll(&pfd, 1, 0) > 0) {
    snprintf(l->error, sizeof l->error,
             "rank %d died while rank %d copied a message of %" PRIu64
             " B from its memory",
             e->peer, st->rank, r->len);
    return 0;
  }
  return 1;
}

/* Move the end's requests forward in order as far as the ring allows. */
static void mesh_pump(nl_state *st, nl_mesh_link *m, mesh_end *e,
                      int is_send) {
  nl_mesh_shm *l = m->shm;
  size_t cap = l->ring_bytes;
  while (e->active < e->posted && !e->broken) {
    nl_mesh_request *r = &e->req[e->active % NL_MESH_SHM_DEPTH];
    uint64_t room = mesh_ready(e, cap, is_send);
    if (room == 0)
      return;
    if (is_send && r->cma && r->moved == r->total) {
      /* The receiver's head passed the descriptor: it copied. */
      r->state = MESH_REQ_DONE;
      r->status = XCOLL_SUCCESS;
      e->active++;
      st->shm->mesh_busy--;
      continue;
    }
    if (r->moved == 0) { /* the length word: 8-aligned, never split */
      uint64_t *word = (uint64_t *)(void *)(e->data + e->mine % cap);
      uint64_t head = 8;
      uint64_t checked = r->check == NL_MESH_UNCHECKED
                             ? 0
                             : NL_MESH_CHECK_FLAG |
                                   (r->check & NL_MESH_CHECK_MASK) << 32;
      if (is_send && r->cma) {
        /* A descriptor: the length with the flag, the buffer's address. */
        *word = r->len | checked | NL_MESH_CMA_FLAG;
        *(uint64_t *)(void *)(e->data + (e->mine + 8) % cap) =
            (uint64_t)(uintptr_t)r->buf;
        head = NL_MESH_CMA_DESC;
      } else if (is_send) {
        *word = r->len | checked;
      } else {
        uint64_t value = *word;
        r->cma = (value & NL_MESH_CMA_FLAG) != 0;
        uint64_t theirs = value & (NL_MESH_CHECK_FLAG |
                                   NL_MESH_CHECK_MASK << 32);
        r->len = value & NL_MESH_CHECK_FLAG
                     ? (uint32_t)value
                     : value & ~NL_MESH_CMA_FLAG;
        if (r->cma && room < NL_MESH_CMA_DESC)
          return; /* the sender publishes the descriptor whole */
        if (theirs != checked) {
          /* Two collectives that move messages of one size: another
           * call's message, which its check says. */
          snprintf(l->error, sizeof l->error,
                   "rank %d sent a message of another collective (check "
                   "%#" PRIx64 "%s) where rank %d posted a receive for "
                   "check %#" PRIx64 "%s",
                   e->peer, theirs >> 32 & NL_MESH_CHECK_MASK,
                   theirs ? "" : ": none", st->rank,
                   checked >> 32 & NL_MESH_CHECK_MASK,
                   checked ? "" : ": none");
          r->status = XCOLL_ERR_PROTOCOL;
          r->state = MESH_REQ_DONE;
          e->broken = 1;
          return;
        }
        if (r->len > r->bytes) {
          snprintf(l->error, sizeof l->error,
                   "rank %d sent a message of %" PRIu64
                   " B where rank %d posted a receive of %zu B",
                   e->peer, r->len, st->rank, r->bytes);
          r->status = XCOLL_ERR_PROTOCOL;
          r->state = MESH_REQ_DONE;
          e->broken = 1;
          return;
        }
        if (r->cma) {
          uint64_t at =
              *(uint64_t *)(void *)(e->data + (e->mine + 8) % cap);
          r->status = XCOLL_SUCCESS;
          if (atomic_load_explicit(&e->ring->cma, memory_order_relaxed) !=
              1) {
            snprintf(l->error, sizeof l->error,
                     "rank %d sent a single-copy descriptor that rank %d "
                     "never allowed",
                     e->peer, st->rank);
            r->status = XCOLL_ERR_PROTOCOL;
          } else if (!mesh_cma_copy(st, l, e, r, at)) {
            r->status = XCOLL_ERR_REMOTE;
          }
          if (r->status != XCOLL_SUCCESS) {
            r->state = MESH_REQ_DONE;
            e->broken = 1;
            return;
          }
          r->total = head = NL_MESH_CMA_DESC;
          st->shm->mesh_received_cma++;
        } else {
          r->total = 8 + ((r->len + 7) & ~(uint64_t)7);
          st->shm->mesh_received_ring++;
        }
      }
      r->moved = head, e->mine += head, room -= head;
      if (is_send && r->cma)
        r->end = e->mine;
    }
    while (r->moved < r->total && room > 0) {
      uint64_t at = r->moved - 8;
      uint64_t n = r->total - r->moved;
      if (n > room)
        n = room;
      if (n > NL_MESH_SHM_PIECE)
        n = NL_MESH_SHM_PIECE;
      /* The padding after the bytes is skipped, not copied. */
      uint64_t copy = at < r->len ? r->len - at : 0;
      if (copy > n)
        copy = n;
      if (copy > 0)
        ring_copy(e->data, cap, e->mine, r->buf + at, (size_t)copy, is_send);
      r->moved += n, e->mine += n, room -= n;
      /* A piece: a peer that is spinning starts on it; a sleeping one is
       * woken once, below, not per piece (with ranks sharing cores, each
       * wake-up would hand the core over for one piece). */
      if (room > 0 && r->moved < r->total)
        atomic_store_explicit(is_send ? &e->ring->tail : &e->ring->head,
                              e->mine, memory_order_release);
    }
    atomic_store_explicit(is_send ? &e->ring->tail : &e->ring->head, e->mine,
                          memory_order_release);
    mesh_wake(e->wake);
    if (r->moved < r->total || (is_send && r->cma))
      return; /* a CMA send completes once the receiver copied */
    r->state = MESH_REQ_DONE;
    r->status = XCOLL_SUCCESS;
    e->active++;
    st->shm->mesh_busy--;
  }
}

static xcoll_status mesh_post(nl_state *st, nl_mesh_link *m, int is_send,
                              const void *data, size_t bytes, uint64_t check,
                              nl_mesh_request **request) {
  mesh_end *e = is_send ? &m->shm->send : &m->shm->recv;
  nl_mesh_request *r = &e->req[e->posted % NL_MESH_SHM_DEPTH];
  *request = NULL;
  if (check != NL_MESH_UNCHECKED && bytes > UINT32_MAX)
    return xcoll_error(st->comm, XCOLL_ERR_INTERNAL,
                       "nccl_like: a checked mesh message of %zu B (at most "
                       "4 GiB - 1)",
                       bytes);
  if (r->state != MESH_REQ_FREE)
    return XCOLL_SUCCESS; /* every request of the end in use: retry */
  nl_shm *shm = st->shm;
  /* One copy when the receiver allowed it (mesh_probe, read once per
   * message: it may come after the first messages). */
  int cma = is_send && shm->mesh_cma && bytes >= shm->mesh_cma_min &&
            atomic_load_explicit(&e->ring->cma, memory_order_acquire) == 1;
  *r = (nl_mesh_request){
      .state = MESH_REQ_POSTED,
      .buf = (uint8_t *)(uintptr_t)data,
      .bytes = bytes,
      .len = bytes,
      .check = check,
      .total = cma ? NL_MESH_CMA_DESC
                   : 8 + (((uint64_t)bytes + 7) & ~(uint64_t)7),
      .cma = cma};
  e->posted++;
  st->shm->mesh_busy++;
  *request = r;
  mesh_pump(st, m, e, is_send); /* a small message goes at once */
  return XCOLL_SUCCESS;
}

static xcoll_status mesh_shm_isend(nl_state *st, nl_mesh_link *m,
                                   const void *data, size_t bytes,
                                   uint64_t check, void *mhandle,
                                   nl_mesh_request **request) {
  (void)mhandle;
  return mesh_post(st, m, 1, data, bytes, check, request);
}

static xcoll_status mesh_shm_irecv(nl_state *st, nl_mesh_link *m, void *data,
                                   size_t bytes, uint64_t check, void *mhandle,
                                   nl_mesh_request **request) {
  (void)mhandle;
  return mesh_post(st, m, 0, data, bytes, check, request);
}

static xcoll_status mesh_shm_test(nl_state *st, nl_mesh_link *m,
                                  nl_mesh_request *r, int *done,
                                  size_t *bytes) {
  nl_mesh_shm *l = m->shm;
  int is_send = r >= l->send.req && r < l->send.req + NL_MESH_SHM_DEPTH;
  mesh_end *e = is_send ? &l->send : &l->recv;
  *done = 0;
  if (r->state == MESH_REQ_POSTED)
    mesh_pump(st, m, e, is_send);
  if (r->state != MESH_REQ_DONE)
    return XCOLL_SUCCESS;
  *done = 1;
  if (bytes != NULL)
    *bytes = (size_t)r->len;
  xcoll_status s = r->status;
  if (s != XCOLL_SUCCESS && e->active < e->posted) {
    /* The failed one is never counted done by the pump. */
    e->active++;
    st->shm->mesh_busy--;
  }
  r->state = MESH_REQ_FREE;
  return s;
}

static const char *mesh_shm_last_error(const nl_mesh_link *m) {
  return m->shm != NULL && m->shm->error[0] ? m->shm->error
                                            : "no error recorded";
}

const nl_mesh_ops nl_mesh_shm_ops = {
    .name = "SHM",
    .net = 0,
    .isend = mesh_shm_isend,
    .irecv = mesh_shm_irecv,
    .test = mesh_shm_test,
    .last_error = mesh_shm_last_error,
};

int nl_shm_mesh_busy(nl_state *st) {
  return st->shm != NULL && st->shm->mesh_busy > 0;
}

/* A waiting end whose peer is gone: fail naming it (1). */
static int mesh_check_end(nl_state *st, nl_mesh_link *m, int is_send) {
  nl_shm *shm = st->shm;
  mesh_end *e = is_send ? &m->shm->send : &m->shm->recv;
  if (e->active == e->posted ||
      mesh_ready(e, m->shm->ring_bytes, is_send) > 0)
    return 0;
  nl_mesh_peer *p = &shm->mesh_peers[e->peer];
  if (!peer_gone(&p->out))
    return 0;
  const nl_mesh_request *r = &e->req[e->active % NL_MESH_SHM_DEPTH];
  nl_fail(st, XCOLL_ERR_REMOTE, e->peer,
          "nccl_like: rank %d: rank %d %s while rank %d waits %s it on the "
          "shared-memory mesh (a message of %zu B, %" PRIu64 " B moved%s)",
          st->rank, e->peer, how_gone(&p->out), st->rank,
          is_send ? "to send to" : "to receive from", r->bytes,
          r->cma || r->moved <= 8 ? 0 : r->moved - 8,
          r->cma ? "; sent with one copy, for the receiver to read" : "");
  return 1;
}

int nl_shm_mesh_wait(nl_state *st, double waited_s, long sleep_ns) {
  nl_shm *shm = st->shm;
  if (shm == NULL || shm->mesh_links == NULL || shm->mesh_busy == 0)
    return 0;
  double now = nl_now();
  if (now - shm->mesh_checked_at >= NL_SHM_CHECK_S) {
    shm->mesh_checked_at = now;
    for (int k = 0; k < st->mesh_links; k++) {
      nl_mesh_link *m = &st->mesh[k];
      if ((m->send_ops == &nl_mesh_shm_ops && mesh_check_end(st, m, 1)) ||
          (m->recv_ops == &nl_mesh_shm_ops && mesh_check_end(st, m, 0)))
        return 0;
    }
  }
  if (waited_s < NL_SHM_SPIN_S || sleep_ns <= 0)
    return 0;
  nl_mesh_event *own = (nl_mesh_event *)(void *)shm->mesh_segment;
  uint32_t seen = atomic_load(&own->wake_seq);
  /* Registered before the counters are read again: a post is either seen
   * below or wakes us (mesh_wake says why). */
  atomic_fetch_add(&own->waiters, 1);
  int ready = atomic_load_explicit(st->abort, memory_order_relaxed) != 0;
  for (int k = 0; k < st->mesh_links && !ready; k++) {
    nl_mesh_link *m = &st->mesh[k];
    if (m->send_ops == &nl_mesh_shm_ops)
      ready = mesh_ready(&m->shm->send, m->shm->ring_bytes, 1) > 0;
    if (!ready && m->recv_ops == &nl_mesh_shm_ops)
      ready = mesh_ready(&m->shm->recv, m->shm->ring_bytes, 0) > 0;
  }
  if (!ready)
    futex_wait(&own->wake_seq, seen, sleep_ns);
  atomic_fetch_sub(&own->waiters, 1);
  return 1;
}

/* ---- the mesh's handshake ---- */

static nl_mesh_ring *mesh_ring_at(uint8_t *segment, size_t ring_bytes,
                                  int sender) {
  return (nl_mesh_ring *)(void *)(segment + NL_MESH_SHM_HDR +
                                  (size_t)sender * (4096 + ring_bytes));
}

static xcoll_status mesh_segment_make(nl_state *st, nl_shm *shm) {
  int p = st->world_size;
  shm->mesh_ring = mesh_ring_bytes(p);
  shm->mesh_bytes = NL_MESH_SHM_HDR + (size_t)p * (4096 + shm->mesh_ring);
  shm->mesh_fd = (int)syscall(SYS_memfd_create, "xcoll-nl-mesh",
                              (unsigned)MFD_CLOEXEC);
  if (shm->mesh_fd < 0 ||
      ftruncate(shm->mesh_fd, (off_t)shm->mesh_bytes) != 0)
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "nccl_like shm: rank %d cannot make a %zu B memfd "
                       "segment for the mesh: %s (XCOLL_SHM_DISABLE=1 goes "
                       "over the net plugin)",
                       st->rank, shm->mesh_bytes, strerror(errno));
  void *seg = mmap(NULL, shm->mesh_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   shm->mesh_fd, 0);
  if (seg == MAP_FAILED)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like shm: rank %d cannot map its %zu B mesh "
                       "segment: %s",
                       st->rank, shm->mesh_bytes, strerror(errno));
  shm->mesh_segment = seg;
  /* Touch the pages of the rings in use here, at init (see recv_alloc). */
  memset(shm->mesh_segment, 0, NL_MESH_SHM_HDR);
  for (int r = 0; r < p; r++)
    if (shm->mesh_peers[r].on)
      memset(mesh_ring_at(shm->mesh_segment, shm->mesh_ring, r), 0,
             4096 + shm->mesh_ring);
  return XCOLL_SUCCESS;
}

/* The mesh peer whose process is at the other end of fd, or -1. */
static int mesh_peer_of(nl_state *st, int fd) {
  for (int r = 0; r < st->world_size; r++)
    if (st->shm->mesh_peers[r].on && peer_is(fd, st->rank_infos[r].pid))
      return r;
  return -1;
}

static xcoll_status mesh_accept(nl_state *st, nl_shm *shm) {
  for (;;) {
    int fd =
        accept4(shm->mesh_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return XCOLL_SUCCESS;
    int r = mesh_peer_of(st, fd);
    if (r < 0 || shm->mesh_peers[r].in_sock >= 0) {
      close(fd);
      shm->mesh_strangers++;
      continue;
    }
    shm->mesh_peers[r].in_sock = fd;
    nl_mesh_hello hello = {.magic = NL_MESH_SHM_MAGIC,
                           .version = NL_MESH_SHM_VERSION,
                           .comm_id = st->comm->comm_id,
                           .rank = st->rank,
                           .world_size = st->world_size,
                           .ring_bytes = shm->mesh_ring,
                           .segment_bytes = shm->mesh_bytes,
                           /* An address in this process only where
                            * CMA is on, which needs it. */
                           .nonce_at = shm->mesh_cma
                                           ? (uint64_t)(uintptr_t)&shm->mesh_nonce
                                           : 0};
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = &hello, .iov_len = sizeof hello};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &shm->mesh_fd, sizeof(int));
    ssize_t sent;
    do
      sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent != (ssize_t)sizeof hello)
      return xcoll_error(st->comm, XCOLL_ERR_REMOTE,
                         "nccl_like shm: rank %d could not send its mesh "
                         "segment to rank %d: %s",
                         st->rank, r, sent < 0 ? strerror(errno) : "short "
                                                                   "write");
  }
}

static xcoll_status mesh_connect_one(nl_state *st, nl_shm *shm, int r) {
  int fd;
  xcoll_status s = dial_listener(st, r, st->rank_infos[r].mesh_nonce,
                                 "mesh listener", "", &fd);
  if (s == XCOLL_SUCCESS && fd >= 0)
    shm->mesh_peers[r].out.sock = fd;
  return s;
}

static xcoll_status mesh_take(nl_state *st, nl_shm *shm, int r) {
  nl_mesh_peer *p = &shm->mesh_peers[r];
  nl_mesh_hello hello;
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &hello, .iov_len = sizeof hello};
  struct msghdr msg = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control,
                       .msg_controllen = sizeof control};
  ssize_t got = recvmsg(p->out.sock, &msg, MSG_CMSG_CLOEXEC);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return XCOLL_SUCCESS;
  int fd = -1;
  struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
  if (cm != NULL && cm->cmsg_level == SOL_SOCKET &&
      cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  struct stat sb;
  const char *bad =
      got < 0 ? strerror(errno)
      : got == 0 ? "it closed the connection"
      : got != (ssize_t)sizeof hello || fd < 0 ? "a short message or no fd"
      : hello.magic != NL_MESH_SHM_MAGIC ||
              hello.version != NL_MESH_SHM_VERSION
          ? "another protocol version"
      : hello.comm_id != st->comm->comm_id || hello.rank != r ||
              hello.world_size != st->world_size
          ? "another communicator's"
      : hello.ring_bytes != shm->mesh_ring ||
              hello.segment_bytes != shm->mesh_bytes
          ? "another layout"
      : fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < hello.segment_bytes
          ? "a segment smaller than it says"
          : NULL;
  if (bad != NULL) {
    if (fd >= 0)
      close(fd);
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "nccl_like shm: rank %d: rank %d sent no usable mesh "
                       "segment: %s",
                       st->rank, r, bad);
  }
  void *seg = mmap(NULL, hello.segment_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
  close(fd); /* the mapping keeps the memory */
  if (seg == MAP_FAILED)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like shm: rank %d cannot map rank %d's %" PRIu64
                       " B mesh segment: %s",
                       st->rank, r, hello.segment_bytes, strerror(errno));
  p->segment = seg;
  p->segment_bytes = hello.segment_bytes;
  p->nonce_at = hello.nonce_at;
  return XCOLL_SUCCESS;
}

/* Whether this rank may read each mesh peer's memory (CMA): read the
 * peer's published nonce where its hello says it lies. The answer goes in
 * the cma word of the peer's ring here, which the peer reads before it
 * picks a path. The kernel refuses where ptrace is not allowed (Yama's
 * ptrace_scope, a seccomp filter, another user): then the ring, two
 * copies, said once at INFO. */
static void mesh_probe(nl_state *st, nl_shm *shm) {
  const char *why = NULL;
  int first = -1, on = 0;
  for (int r = 0; r < st->world_size && shm->mesh_cma; r++) {
    nl_mesh_peer *p = &shm->mesh_peers[r];
    if (!p->on)
      continue;
    uint64_t seen = 0;
    struct iovec local = {.iov_base = &seen, .iov_len = sizeof seen};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)p->nonce_at,
                           .iov_len = sizeof seen};
    ssize_t got = p->nonce_at == 0 ? 0
                                    : process_vm_readv(
                                          (pid_t)st->rank_infos[r].pid,
                                          &local, 1, &remote, 1, 0);
    if (got == (ssize_t)sizeof seen &&
        seen == st->rank_infos[r].mesh_nonce) {
      atomic_store_explicit(
          &mesh_ring_at(shm->mesh_segment, shm->mesh_ring, r)->cma, 1,
          memory_order_release);
      on++;
    } else if (why == NULL) {
      why = p->nonce_at == 0 ? "that rank does not offer it: XCOLL_SHM_CMA "
                               "is not 1 there"
            : got < 0 ? strerror(errno)
            : got == (ssize_t)sizeof seen ? "it read another value"
                                          : "a short read";
      first = r;
    }
  }
  if (why != NULL)
    XCOLL_INFO("nccl_like shm: rank %d cannot read rank %d's memory "
               "(process_vm_readv: %s): messages from it on the mesh go "
               "through the ring, two copies",
               st->rank, first, why);
  if (on > 0)
    XCOLL_INFO("nccl_like shm: rank %d copies mesh messages of at least "
               "%zu B from %d peer(s) once, from the sender's memory (CMA; "
               "XCOLL_SHM_CMA)",
               st->rank, shm->mesh_cma_min, on);
}

/* Point each shm direction of the mesh at its ring. */
static void mesh_bind(nl_state *st, nl_shm *shm) {
  for (int k = 0; k < st->mesh_links; k++) {
    nl_mesh_link *m = &st->mesh[k];
    nl_mesh_shm *l = &shm->mesh_links[k];
    l->ring_bytes = shm->mesh_ring;
    m->shm = l;
    if (m->send_ops == &nl_mesh_shm_ops) {
      uint8_t *seg = shm->mesh_peers[m->to].segment;
      l->send.ring = mesh_ring_at(seg, shm->mesh_ring, st->rank);
      l->send.data = (uint8_t *)l->send.ring + 4096;
      l->send.wake = (nl_mesh_event *)(void *)seg;
      l->send.peer = m->to;
#ifdef MADV_POPULATE_WRITE
      /* Map the ring's pages here now, not on the first messages (a page
       * first touched from a process faults there once; see
       * zero_by_kernel in channel.c). Best effort: older kernels say no. */
      (void)madvise(l->send.ring, 4096 + shm->mesh_ring, MADV_POPULATE_WRITE);
#endif
    }
    if (m->recv_ops == &nl_mesh_shm_ops) {
      l->recv.ring = mesh_ring_at(shm->mesh_segment, shm->mesh_ring, m->from);
      l->recv.data = (uint8_t *)l->recv.ring + 4096;
      l->recv.wake = (nl_mesh_event *)(void *)shm->mesh_peers[m->from].segment;
      l->recv.peer = m->from;
    }
  }
}

xcoll_status nl_shm_mesh_connect(nl_state *st) {
  nl_shm *shm = st->shm;
  int p = st->world_size, want = 0;
  if (shm == NULL || shm->mesh_listen_fd < 0)
    return XCOLL_SUCCESS;
  shm->mesh_peers = calloc((size_t)p, sizeof *shm->mesh_peers);
  shm->mesh_links = calloc((size_t)st->mesh_links, sizeof *shm->mesh_links);
  if (!shm->mesh_peers || !shm->mesh_links)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like shm: out of memory for the mesh");
  for (int r = 0; r < p; r++) {
    nl_mesh_peer *q = &shm->mesh_peers[r];
    q->out = (nl_shm_peer){.rank = r, .sock = -1, .pidfd = -1};
    q->in_sock = -1;
    q->on = r != st->rank && nl_shm_mesh_pair(&st->rank_infos[st->rank],
                                              &st->rank_infos[r]);
    want += q->on;
  }
  long cma = 0;
  xcoll_status s = xcoll_param_int("XCOLL_SHM_CMA", &cma);
  if (s == XCOLL_SUCCESS)
    s = xcoll_param_size("XCOLL_SHM_CMA_MIN", 0, &shm->mesh_cma_min);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(st->comm, s);
  shm->mesh_cma = cma != 0;
  s = want > 0 ? mesh_segment_make(st, shm) : XCOLL_SUCCESS;
  double deadline = nl_now() + st->timeout_s;
  while (s == XCOLL_SUCCESS && want > 0) {
    int left = 0, waiting_on = -1;
    s = mesh_accept(st, shm);
    struct pollfd fds[1 + NL_MESH_POLL_LINKS];
    nfds_t n = 0;
    fds[n++] = (struct pollfd){.fd = shm->mesh_listen_fd, .events = POLLIN};
    for (int r = 0; r < p && s == XCOLL_SUCCESS; r++) {
      nl_mesh_peer *q = &shm->mesh_peers[r];
      if (!q->on)
        continue;
      if (q->out.sock < 0)
        s = mesh_connect_one(st, shm, r);
      if (s == XCOLL_SUCCESS && q->out.sock >= 0 && q->segment == NULL)
        s = mesh_take(st, shm, r);
      if (q->segment == NULL || q->in_sock < 0) {
        left++;
        waiting_on = r;
        if (q->out.sock >= 0 && q->segment == NULL && n < 1 + NL_MESH_POLL_LINKS)
          fds[n++] = (struct pollfd){.fd = q->out.sock, .events = POLLIN};
      }
    }
    if (s != XCOLL_SUCCESS || left == 0)
      break;
    if (nl_now() > deadline)
      return xcoll_error(st->comm, XCOLL_ERR_TIMEOUT,
                         "nccl_like shm: rank %d: rank %d did not %s within "
                         "%.1f s (XCOLL_TIMEOUT_S)",
                         st->rank, waiting_on,
                         shm->mesh_peers[waiting_on].segment == NULL
                             ? "send its mesh segment"
                             : "connect to the mesh listener",
                         st->timeout_s);
    (void)poll(fds, n, 1);
  }
  if (shm->mesh_strangers > 0)
    XCOLL_WARN("nccl_like shm: rank %d closed %lu connection(s) to its mesh "
               "listener from processes other than its mesh peers",
               st->rank, shm->mesh_strangers);
  if (s != XCOLL_SUCCESS)
    return s;
  close(shm->mesh_listen_fd);
  shm->mesh_listen_fd = -1;
  for (int r = 0; r < p; r++)
    if (shm->mesh_peers[r].on)
      shm->mesh_peers[r].out.pidfd = open_pidfd(st->rank_infos[r].pid);
  mesh_probe(st, shm);
  mesh_bind(st, shm);
  return XCOLL_SUCCESS;
}

static void mesh_free(nl_state *st, nl_shm *shm) {
  if (shm->mesh_received_cma + shm->mesh_received_ring > 0)
    XCOLL_INFO("nccl_like shm: rank %d received %lu mesh message(s) with "
               "one copy (CMA) and %lu through the ring",
               st->rank, shm->mesh_received_cma, shm->mesh_received_ring);
  for (int k = 0; k < st->mesh_links && st->mesh != NULL; k++)
    st->mesh[k].shm = NULL;
  if (shm->mesh_peers != NULL)
    for (int r = 0; r < st->world_size; r++) {
      nl_mesh_peer *q = &shm->mesh_peers[r];
      peer_close(&q->out);
      if (q->in_sock >= 0)
        close(q->in_sock);
      if (q->segment != NULL)
        munmap(q->segment, q->segment_bytes);
    }
  free(shm->mesh_peers);
  free(shm->mesh_links);
  shm->mesh_peers = NULL;
  shm->mesh_links = NULL;
  if (shm->mesh_listen_fd >= 0)
    close(shm->mesh_listen_fd);
  if (shm->mesh_fd >= 0)
    close(shm->mesh_fd);
  if (shm->mesh_segment != NULL)
    munmap(shm->mesh_segment, shm->mesh_bytes);
  shm->mesh_listen_fd = shm->mesh_fd = -1;
  shm->mesh_segment = NULL;
}

const nl_transport nl_transport_shm = {
    .name = "SHM",
    .can_connect = shm_can_connect,
    .setup = shm_setup,
    .recv_alloc = nl_shm_recv_alloc,
    .send_in_peer_memory = 1,
    .shm_handshake = 1,
    .device_slots = 0,
    .connect = nl_shm_connect,
    .free = nl_shm_free,
    .send_progress = NULL,
    .recv_progress = NULL,
    .wait = nl_shm_wait,
    .posted = nl_shm_posted,
    .watch = nl_shm_watch,
};
