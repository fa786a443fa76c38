/* p2p.c - the p2p transport of nccl_like: two GPU ranks of one host on
 * the same GPU, as NCCL's src/transport/p2p.cc ("P2P write"): the
 * receiver's FIFO slots are its device memory, which the sending kernel
 * writes directly; no proxy, no host copy, no PCIe crossing for the
 * bytes.
 *
 * How the memory is shared: cuMem when both drivers support it
 * (cuMemCreate with POSIX file-descriptor handles,
 * cuMemExportToShareableHandle; the peer cuMemImportFromShareableHandle,
 * cuMemAddressReserve, cuMemMap, cuMemSetAccess), else legacy CUDA IPC
 * (cuIpcGetMemHandle / cuIpcOpenMemHandle) (gpu_engine.c). The fd travels
 * with the shm segment, over shm.c's authenticated Unix socket
 * (SCM_RIGHTS, peer credentials checked both ways); an IPC handle rides
 * in the same hello.
 *
 * The counters (head, tail, sizes) stay in the receiver's shm segment,
 * mapped into both devices (cuMemHostRegister): the host can read them,
 * so the proxy's watchdog, the names of a stalled peer and the death
 * checks work as over shm. Only the slots are device memory.
 *
 * Which GPUs: the two ranks' devices must have the same UUID (ranks that
 * share one GPU, with MPS or without). Two different GPUs would need peer
 * access (cuDeviceCanAccessPeer), which this transport does not ask for:
 * such pairs go over shm. See docs/nccl_like.md, "Transports". */
#include <string.h>

#include "nccl_like.h"
#include "transport.h"

/* Two GPU ranks of one host, neither with XCOLL_P2P_DISABLE=1, on the same
 * GPU, both able to map host memory (the counters) and sharing one way of
 * sharing device memory (nl_p2p_share_both). */
static int p2p_can_connect(const nl_rank_info *a, const nl_rank_info *b) {
  return a->cuda_device >= 0 && b->cuda_device >= 0 && a->p2p_allowed &&
         b->p2p_allowed && a->gpu_host_map && b->gpu_host_map &&
         nl_p2p_share_both(a, b) != 0 && nl_gpu_uuid_known(a) &&
         memcmp(a->gpu_uuid, b->gpu_uuid, sizeof a->gpu_uuid) == 0 &&
         nl_same_host(a, b);
}

const nl_transport nl_transport_p2p = {
    .name = "P2P",
    .can_connect = p2p_can_connect,
    .setup = NULL, /* shm's setup listens for both */
    .recv_alloc = nl_shm_recv_alloc,
    .send_in_peer_memory = 1,
    .shm_handshake = 1,
    .device_slots = 1,
    .connect = nl_shm_connect,
    .free = nl_shm_free,
    .send_progress = NULL,
    .recv_progress = NULL,
    .wait = nl_shm_wait,
    .posted = nl_shm_posted,
    .watch = nl_shm_watch,
};
