/* transport.c - the table of nccl_like's transports in NCCL's order of
 * preference (src/transport.cc: P2P, SHM, NET) and the choice for a pair
 * of ranks: the first whose can_connect accepts it (selectTransport). */
#include "transport.h"

const nl_transport *const nl_transports[NL_TRANSPORTS] = {
    &nl_transport_p2p, &nl_transport_shm, &nl_transport_net};

const nl_transport *nl_transport_pick(const nl_rank_info *a,
                                      const nl_rank_info *b) {
  for (int t = 0; t < NL_TRANSPORTS; t++)
    if (nl_transports[t]->can_connect(a, b))
      return nl_transports[t];
  return &nl_transport_net;
}
