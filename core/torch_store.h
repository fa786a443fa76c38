/* torch_store.h - a client of torch.distributed's TCPStore, as an
 * xcoll_kv_store: under torchrun 2.x (TORCHELASTIC_USE_AGENT_STORE=True)
 * torchrun's agent already serves a TCPStore at MASTER_ADDR:MASTER_PORT,
 * where xcoll's rank 0 would start its own store, so xcoll_comm_init_env
 * meets the other ranks in torchrun's store instead (docs/launcher.md). */
#ifndef XCOLL_CORE_TORCH_STORE_H
#define XCOLL_CORE_TORCH_STORE_H

#include "xcoll.h"

/* Connect (once per process; later calls reuse the connection) to the
 * TCPStore at host:port, retrying until timeout_s seconds, and fill *kv with
 * functions that forward to it under the key prefix "/xcoll/<restart>/"
 * (TORCHELASTIC_RESTART_COUNT), so that a restarted job does not read its
 * previous attempt's keys. The connection lives until the process exits:
 * every communicator made through it may use it (split children included).
 * Errors: XCOLL_ERR_TIMEOUT naming host and port (nobody listening),
 * XCOLL_ERR_SYSTEM (name resolution). */
xcoll_status xcoll_torch_store_kv(const char *host, int port, double timeout_s,
                                  xcoll_kv_store *kv);

#endif
