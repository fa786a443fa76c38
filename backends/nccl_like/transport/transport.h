/* transport.h - how nccl_like moves one direction of one channel's
 * connection, as NCCL's struct ncclTransport does (src/include/transport.h,
 * src/transport.cc): a table of transports tried in order, the first whose
 * can_connect accepts the pair carries the connection. The kernels see only
 * the connection (kernels/conn.h: slots, head, tail, sizes) and never know
 * which transport made it. See docs/nccl_like.md, "Transports".
 *
 *   p2p  two GPU ranks of one host on the same GPU: as shm, but the
 *        receiver's slots are its device memory (cuMem exported as a POSIX
 *        fd, or CUDA IPC), which the sending kernel writes (p2p.c; the
 *        handshake and the counters are shm.c's).
 *   shm  two ranks of one host, host or GPU: the receiver's FIFO lives in a
 *        shared memory segment (a memfd passed over a Unix socket with
 *        SCM_RIGHTS) that both map, a GPU rank into its device too
 *        (cuMemHostRegister); the sending kernel writes the receiver's
 *        slots and tail itself, the receiving kernel posts head: no proxy,
 *        no system call per step (shm.c).
 *   net  everything else: each side's FIFO is its own memory and the proxy
 *        thread moves slots over the net plugin (net.c, proxy.c).
 *
 * A transport's choice depends only on what both ranks published at init
 * (nl_rank_info), so the two ends of a connection always make the same. */
#ifndef XCOLL_NL_TRANSPORT_H
#define XCOLL_NL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

struct nl_state;
struct nl_channel;

/* What each rank tells every other at init (one bootstrap allgather), for
 * can_connect and for the shm handshake. Fixed size, no pointers. */
typedef struct nl_rank_info {
  uint8_t host_id[24];   /* boot id, then the network namespace's inode */
  uint64_t shm_dev;      /* st_dev of /dev/shm (NCCL's shm.cc asks for the
                            same /dev/shm too) */
  uint64_t pid_ns;       /* inode of /proc/self/ns/pid: pids compare */
  int32_t pid;
  int32_t cuda_device;   /* -1: a host rank */
  uint8_t host_id_ok;    /* host_id, shm_dev and pid_ns could be read */
  uint8_t shm_allowed;   /* XCOLL_SHM_DISABLE unset or 0 */
  uint8_t p2p_allowed;   /* XCOLL_P2P_DISABLE unset or 0 */
  uint8_t gpu_host_map;  /* a GPU rank whose driver maps host memory into
                            the device (cuMemHostRegister, DEVICEMAP) */
  uint8_t p2p_share;     /* a GPU rank: NL_P2P_SHARE_* it can do */
  uint8_t gpu_mps;       /* a GPU rank: NL_GPU_MPS_* of its device */
  uint8_t pad[2];
  uint64_t shm_nonce;    /* the shm listener's abstract name (shm.c); 0:
                            none */
  uint8_t gpu_uuid[16];  /* a GPU rank: its device's UUID, 0s: unknown */
  uint64_t mesh_nonce;   /* the shm mesh listener's abstract name (shm.c);
                            0: the mesh does not go through shm here */
} nl_rank_info;

/* How a GPU rank can share device memory with another process: cuMem
 * with POSIX file-descriptor handles, legacy CUDA IPC. */
#define NL_P2P_SHARE_CUMEM 1
#define NL_P2P_SHARE_IPC 2

/* 1 when a GPU rank's gpu_uuid was read (all zeros: unknown). */
static inline int nl_gpu_uuid_known(const nl_rank_info *a) {
  for (size_t i = 0; i < sizeof a->gpu_uuid; i++)
    if (a->gpu_uuid[i] != 0)
      return 1;
  return 0;
}

/* A GPU rank's device: MPS shares its contexts (CUDA's
 * CU_DEVICE_ATTRIBUTE_MPS_ENABLED), does not, or the driver cannot say. */
#define NL_GPU_MPS_UNKNOWN 0
#define NL_GPU_MPS_OFF 1
#define NL_GPU_MPS_ON 2

/* The NL_P2P_SHARE_* ways that a and b both have. Legacy IPC only between
 * two processes: cuIpcOpenMemHandle refuses a handle that its own process
 * exported (CUDA Driver API, cuIpcOpenMemHandle), as NCCL's p2p.cc knows
 * (P2P_SAME_PID). */
static inline int nl_p2p_share_both(const nl_rank_info *a,
                                    const nl_rank_info *b) {
  int both = a->p2p_share & b->p2p_share;
  if (a->pid == b->pid)
    both &= ~NL_P2P_SHARE_IPC;
  return both;
}

/* One transport: NCCL's ncclTransport with comm-wide setup. Setup and
 * connect run once per communicator for every channel direction that chose
 * the transport (the ranks exchange what they need in one round, as NCCL
 * batches a channel's peers), then free at destroy. */
typedef struct nl_transport {
  const char *name; /* "SHM", "NET": what XCOLL_DEBUG=INFO prints */
  /* 1 when this transport can carry a connection between ranks a and b;
   * must be symmetric, and depend only on the two infos. */
  int (*can_connect)(const nl_rank_info *a, const nl_rank_info *b);
  /* Before the ranks exchange their infos, on every rank, whether or not
   * a connection will choose this transport: take what a peer needs to
   * find this rank and write it into *mine (shm: a listener and its
   * nonce). NULL = nothing to do. */
  xcoll_status (*setup)(struct nl_state *st, nl_rank_info *mine);
  /* The channel's receive FIFO (recv_mem, recv_buff) in this transport's
   * memory; NULL = ordinary memory (channel.c). */
  xcoll_status (*recv_alloc)(struct nl_state *st, struct nl_channel *ch);
  /* 1: a send FIFO is the peer's receive FIFO, which connect maps and
   * points send_mem / send_buff at; 0: the sender's own memory. */
  int send_in_peer_memory;
  /* 1: the FIFO's counters are in the receiver's shm segment, set up by
   * shm.c's setup / recv_alloc / connect (shm and p2p). */
  int shm_handshake;
  /* 1: the receiver's slots are its device memory (p2p); 0: they follow
   * the counters. */
  int device_slots;
  /* Meet the peers and point the send FIFOs at where the bytes go; NULL =
   * channel.c's net links (one handle exchange with the fingerprint
   * connection's and the mesh's). */
  xcoll_status (*connect)(struct nl_state *st);
  /* Release what setup and connect took (idempotent). */
  void (*free)(struct nl_state *st);
  /* The proxy step of one direction of a channel, for transports whose
   * bytes the proxy moves; NULL = the kernels move them. *progress is set
   * when a counter moved. */
  xcoll_status (*send_progress)(struct nl_state *st, struct nl_channel *ch,
                                int *progress);
  xcoll_status (*recv_progress)(struct nl_state *st, struct nl_channel *ch,
                                int *progress);
  /* Called by a kernel's progress hook while it waits for *counter (of a
   * FIFO this transport carries) to reach target, with the hook's clock
   * reading (now, nl_now) and the seconds waited so far: watch the peers
   * for a death the memory cannot show, and sleep until the peer posts
   * once spinning no longer pays. Returns 1 when it
   * slept. NULL = the net transport's wait (poll on the plugin's fds). */
  int (*wait)(struct nl_state *st, struct nl_channel *ch,
              const _Atomic uint64_t *counter, uint64_t target, double now,
              double waited_s);
  /* Called after the kernel posted a step on the channel's send side
   * (is_send) or receive side: wake a peer that sleeps on it. NULL =
   * nothing to do. */
  void (*posted)(struct nl_state *st, struct nl_channel *ch, int is_send);
  /* Called by the proxy thread of a GPU rank while a kernel runs and the
   * ring has not moved for idle_s seconds (the kernel has no host hook to
   * call wait): watch the peers for a death. NULL = nothing to do. */
  void (*watch)(struct nl_state *st, double idle_s);
} nl_transport;

extern const nl_transport nl_transport_p2p;
extern const nl_transport nl_transport_shm;
extern const nl_transport nl_transport_net;

/* The transports in NCCL's order of preference: p2p, shm, net. */
#define NL_TRANSPORTS 3
extern const nl_transport *const nl_transports[NL_TRANSPORTS];

/* Fill this rank's info (XCOLL_SHM_DISABLE and XCOLL_P2P_DISABLE read
 * through params.c). Errors: ENV (a malformed value). */
xcoll_status nl_rank_info_fill(struct nl_state *st, nl_rank_info *info);

/* Ranks a and b share a boot, network and pid namespace and /dev/shm
 * (shm.c): they can map one memfd and check each other's pids. */
int nl_same_host(const nl_rank_info *a, const nl_rank_info *b);

/* shm.c's pieces that p2p runs on (one listener, one segment exchange). */
xcoll_status nl_shm_recv_alloc(struct nl_state *st, struct nl_channel *ch);
xcoll_status nl_shm_connect(struct nl_state *st);
void nl_shm_free(struct nl_state *st);
int nl_shm_wait(struct nl_state *st, struct nl_channel *ch,
                const _Atomic uint64_t *counter, uint64_t target, double now,
                double waited_s);
void nl_shm_posted(struct nl_state *st, struct nl_channel *ch, int is_send);
void nl_shm_watch(struct nl_state *st, double idle_s);

/* ---- what a GPU rank's transports ask of its engine (gpu_engine.c) ---- */

/* Fill info's GPU fields (gpu_host_map, p2p_share, gpu_uuid) from the
 * driver; nothing on a host rank. */
void nl_gpu_describe(struct nl_state *st, nl_rank_info *info);
/* Register host memory [p, p + bytes) (a shm segment) with the device
 * (cuMemHostRegister, DEVICEMAP) so that the kernels' view of a
 * connection in it gets device addresses; nl_gpu_unmap_host undoes it.
 * Errors: SYSTEM (the driver's, named). */
xcoll_status nl_gpu_map_host(struct nl_state *st, void *p, size_t bytes);
void nl_gpu_unmap_host(struct nl_state *st, void *p);
/* Wait for every kernel this rank launched (before memory they use goes). */
void nl_gpu_quiesce(struct nl_state *st);

/* Device memory two processes share (p2p's slots). The creator keeps the
 * allocation (and for cuMem an fd to send); the importer maps it. */
typedef struct nl_gpu_slots {
  int kind;       /* NL_P2P_SHARE_CUMEM or NL_P2P_SHARE_IPC */
  int imported;   /* mapped from a peer's */
  int has_handle; /* cuMem: handle is live */
  int fd;         /* cuMem creator: the exported fd, -1 once sent/closed */
  unsigned long long dptr; /* device address, 0: none */
  size_t bytes;            /* mapped bytes (cuMem: granularity-rounded) */
  unsigned long long handle; /* cuMem allocation handle */
  uint8_t ipc[64];           /* IPC creator: cuIpcGetMemHandle's handle */
} nl_gpu_slots;
/* Create at least bytes of zeroed device memory to share by kind. Errors:
 * SYSTEM (the driver's call and error, named). */
xcoll_status nl_gpu_slots_create(struct nl_state *st, int kind, size_t bytes,
                                 nl_gpu_slots *out);
/* Map a peer's: kind CUMEM from fd (not consumed), IPC from ipc. */
xcoll_status nl_gpu_slots_import(struct nl_state *st, int kind, int fd,
                                 const uint8_t ipc[64], size_t bytes,
                                 nl_gpu_slots *out);
void nl_gpu_slots_free(struct nl_state *st, nl_gpu_slots *s);

/* The first transport of nl_transports whose can_connect accepts (a, b). */
const nl_transport *nl_transport_pick(const nl_rank_info *a,
                                      const nl_rank_info *b);

#endif
