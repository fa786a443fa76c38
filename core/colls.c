/* colls.c - the table of collectives (xcoll.h's xcoll_coll_info): each
 * call's name, op, root, peer, the elements it reads and writes as functions
 * of count and world size, its in-place form and nccl-tests' busbw factor.
 * Validation (collectives.c), dispatch, staging, fingerprints, the nccl_like
 * engine, xcoll-perf and the torch backend read this table; nothing else
 * writes a collective's shape. */
#include <stdint.h>
#include <stdio.h>

#include "algorithm.h"

/* name, count_name, op, root, peer, vector,
 * send_per_rank, recv_per_rank, send_root_only, recv_root_only,
 * send_unused, recv_unused, in_place, busbw_scale, busbw_minus_one */
static const xcoll_coll_info table[XCOLL_NUM_COLLS] = {
    [XCOLL_COLL_ALLREDUCE] = {"allreduce", "count", 1, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, "sendbuf == recvbuf", 2, 1},
    [XCOLL_COLL_ALLGATHER] = {"allgather", "sendcount", 0, 0, 0, 0, 0, 1, 0, 0,
                              0, 0,
                              "sendbuf == recvbuf + rank * sendcount elements",
                              1, 1},
    [XCOLL_COLL_REDUCE_SCATTER] = {"reduce_scatter", "recvcount", 1, 0, 0, 0, 1,
                                   0, 0, 0, 0, 0,
                                   "recvbuf == sendbuf + rank * recvcount "
                                   "elements",
                                   1, 1},
    [XCOLL_COLL_BROADCAST] = {"broadcast", "count", 0, 1, 0, 0, 0, 0, 1, 0, 0,
                              0, "sendbuf == recvbuf", 1, 0},
    [XCOLL_COLL_REDUCE] = {"reduce", "count", 1, 1, 0, 0, 0, 0, 0, 1, 0, 0,
                           "sendbuf == recvbuf", 1, 0},
    [XCOLL_COLL_BARRIER] = {"barrier", "count", 0, 0, 0, 0, 0, 0, 0, 0, 1, 1,
                            NULL, 0, 0},
    [XCOLL_COLL_ALLTOALL] = {"alltoall", "count", 0, 0, 0, 0, 1, 1, 0, 0, 0, 0,
                             "sendbuf == recvbuf", 1, 1},
    [XCOLL_COLL_ALLTOALLV] = {"alltoallv", "counts", 0, 0, 0, 1, 1, 1, 0, 0, 0,
                              0, NULL, 1, 1},
    [XCOLL_COLL_GATHER] = {"gather", "count", 0, 1, 0, 0, 0, 1, 0, 1, 0, 0,
                           "sendbuf == recvbuf + root * count elements (on the "
                           "root)",
                           1, 1},
    [XCOLL_COLL_SCATTER] = {"scatter", "count", 0, 1, 0, 0, 1, 0, 1, 0, 0, 0,
                            "recvbuf == sendbuf + root * count elements (on the "
                            "root)",
                            1, 1},
    [XCOLL_COLL_SEND] = {"send", "count", 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, NULL, 1,
                         0},
    [XCOLL_COLL_RECV] = {"recv", "count", 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, NULL, 1,
                         0},
};

const xcoll_coll_info *xcoll_coll_info_of(xcoll_coll_kind kind) {
  if ((unsigned)kind >= (unsigned)XCOLL_NUM_COLLS)
    return NULL;
  return &table[kind];
}

const char *xcoll_coll_name(xcoll_coll_kind kind) {
  if (kind == XCOLL_COLL_GROUP)
    return "group";
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  return info != NULL ? info->name : "unknown";
}

xcoll_status xcoll_coll_shape(xcoll_coll_kind kind, size_t count,
                              int world_size, int is_root, size_t *send_elems,
                              size_t *recv_elems, size_t *size_elems) {
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  if (info == NULL || info->vector || world_size < 1)
    return XCOLL_ERR_INVALID_ARGUMENT;
  size_t world = (size_t)world_size;
  if ((info->send_per_rank || info->recv_per_rank) && count > SIZE_MAX / world)
    return XCOLL_ERR_INVALID_ARGUMENT;
  size_t send = info->send_per_rank ? count * world : count;
  size_t recv = info->recv_per_rank ? count * world : count;
  size_t size = send > recv ? send : recv;
  if (!info->has_root)
    is_root = 1;
  if (info->send_unused || (info->send_root_only && !is_root))
    send = 0;
  if (info->recv_unused || (info->recv_root_only && !is_root))
    recv = 0;
  if (kind == XCOLL_COLL_BARRIER)
    size = 0;
  if (send_elems != NULL)
    *send_elems = send;
  if (recv_elems != NULL)
    *recv_elems = recv;
  if (size_elems != NULL)
    *size_elems = size;
  return XCOLL_SUCCESS;
}

double xcoll_coll_busbw_factor(xcoll_coll_kind kind, int world_size) {
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  if (info == NULL || world_size < 1)
    return 0.0;
  double factor = (double)info->busbw_scale;
  if (info->busbw_minus_one)
    factor *= (double)(world_size - 1) / (double)world_size;
  return factor;
}
