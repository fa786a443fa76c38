/* algorithm.h - host-driven collective algorithms over the p2p interface,
 * one algorithm per file in core/algorithms/, and their selection.
 *
 * Each algorithm file starts with a comment giving its source (paper), its
 * step count and the bytes each rank puts on the wire, in P (world size) and
 * S (message bytes), as docs/algorithms.md does. */
#ifndef XCOLL_CORE_ALGORITHM_H
#define XCOLL_CORE_ALGORITHM_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

struct xcoll_comm;

/* The collectives are xcoll.h's xcoll_coll_kind, described by its table
 * (core/colls.c). One more kind is internal: a group of point-to-point calls
 * (and the collectives recorded with them), run by core/dispatch.c: the
 * sends and receives through core/group.c's xcoll_group_run, then each
 * collective. */
#define XCOLL_COLL_GROUP ((xcoll_coll_kind)XCOLL_NUM_COLLS)

struct xcoll_group_ops;

/* One collective call, validated by core/collectives.c before it reaches
 * core/dispatch.c and then an algorithm or a backend. count is the call's
 * count argument; the table (xcoll_coll_info_of, core/colls.c) says how
 * many elements each buffer holds for it. */
typedef struct xcoll_coll_args {
  xcoll_coll_kind kind;
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  xcoll_datatype dtype;
  xcoll_op op;
  int root;
  xcoll_stream_t stream;
  uint64_t seq; /* the collective's sequence number on its communicator */
  /* 1 when the caller passed a pre-multiplied sum (core/premul.h): sendbuf
   * is then the scaled input and op XCOLL_SUM; the fingerprint still says
   * premul_sum. */
  int premul;
  /* The blocking form: core calls the backend's wait right after start, on
   * the same thread (core/backend.h). A hint only; it never changes what is
   * computed or sent. */
  int blocking;
  /* send and recv: the other rank. */
  int peer;
  /* alltoallv: world_size counts and displacements each, in elements
   * (owned by the call: copied for a non-blocking one). */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
  /* XCOLL_COLL_GROUP: the group's calls (core/group.c). */
  struct xcoll_group_ops *group;
  /* The call's entry in the flight recorder (core/flight.h), given by
   * dispatch; 0 when it has none yet (a group's collectives). */
  uint64_t flight_id;
  /* 1 when every rank's fingerprint of this call was compared with every
   * other rank's before the backend started it (core's fingerprint
   * exchange, run by dispatch before a device-driven rooted collective):
   * the backend need not compare it again before the call completes. */
  int agreed;
} xcoll_coll_args;

/* Tags: high 32 bits the collective's seq (mod 2^32), low 32 bits a step
 * number below 2^24 chosen by the algorithm. Backends may fold them into
 * fewer bits (see backends/ucx). */
static inline uint64_t xcoll_tag(const xcoll_coll_args *args, uint32_t step) {
  return ((args->seq & 0xffffffffu) << 32) | (step & 0xffffffu);
}

typedef xcoll_status (*xcoll_algorithm_fn)(struct xcoll_comm *comm,
                                           const xcoll_coll_args *args);

typedef struct xcoll_algorithm {
  const char *name; /* "ring", "recursive_doubling", ... as XCOLL_ALGO spells it */
  xcoll_coll_kind kind;
  xcoll_algorithm_fn run;
} xcoll_algorithm;

/* "allreduce", ... from the table; "group" for XCOLL_COLL_GROUP. */
const char *xcoll_coll_name(xcoll_coll_kind kind);

/* Whether a collective takes a reduction op, and a root (the table's). */
static inline int xcoll_coll_has_op(xcoll_coll_kind kind) {
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  return info != NULL && info->has_op;
}
static inline int xcoll_coll_has_root(xcoll_coll_kind kind) {
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  return info != NULL && info->has_root;
}

/* Pick the algorithm for args on comm: XCOLL_ALGO, as comm read it when it
 * was created (xcoll_algorithm_check_env), if it names one for this
 * collective, else by message size and world size. why receives a sentence
 * for XCOLL_DEBUG=INFO ("4096 B < 64 KiB at P=4: recursive doubling").
 * Errors: XCOLL_ERR_ENV when comm's XCOLL_ALGO named no algorithm. */
xcoll_status xcoll_algorithm_select(struct xcoll_comm *comm,
                                    const xcoll_coll_args *args,
                                    const xcoll_algorithm **algorithm,
                                    char *why, size_t why_bytes);

/* Read and parse XCOLL_ALGO into comm (algo_forced, algo_value,
 * algo_status), once when the communicator is created: a bad value fails
 * the creation, and a later setenv does not change comm's choice (NCCL
 * reads NCCL_ALGO at init). Errors: XCOLL_ERR_ENV naming the bad entry and
 * the valid names. */
xcoll_status xcoll_algorithm_check_env(struct xcoll_comm *comm);
/* Parse value as XCOLL_ALGO's (for xcoll-info); same errors. */
xcoll_status xcoll_algorithm_check_value(const char *value);

/* The algorithms (core/algorithms/<name>.c). */
xcoll_status xcoll_allreduce_ring(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_allreduce_recursive_doubling(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_allreduce_rabenseifner(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_allgather_ring(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_reduce_scatter_ring(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_broadcast_binomial(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_broadcast_chain(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_reduce_binomial(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_barrier_dissemination(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_alltoall_pairwise(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_alltoall_bruck(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_alltoallv_pairwise(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_gather_binomial(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_scatter_binomial(struct xcoll_comm *, const xcoll_coll_args *);
xcoll_status xcoll_group_run(struct xcoll_comm *, const xcoll_coll_args *);

#endif
