/*
 * fsdp.h - Fully Sharded Data Parallel over xcoll (ZeRO: Rajbhandari et
 * al., SC 2020; PyTorch FSDP: Zhao et al., VLDB 2023).
 *
 * The model's layers are grouped into units (units.h, forward order,
 * --fsdp-min-params). A unit's parameters are one flat buffer of n floats,
 * padded with zeros to S * ceil(n/S), where S is the size of the sharding
 * group (the world, or the ranks of one node under hybrid_shard); rank r of
 * the group holds elements [r*ceil(n/S), (r+1)*ceil(n/S)) of it (the layout
 * of PyTorch's FlatParameter: torch.flatten(t).chunk(S)[r], right-padded).
 * This rank's shards of all units, concatenated, are what the optimizer
 * updates; their gradients and optimizer state are sharded the same way.
 *
 * Per unit, per micro-batch:
 *   forward:  all-gather the unit's shards (xcoll_iallgather) into a full
 *             buffer; under full_shard free it after the unit's forward
 *             (except the last unit, which backward needs first), under
 *             shard_grad_op keep it until backward.
 *   backward: all-gather again if it was freed; compute into a zeroed
 *             unsharded gradient buffer; reduce-scatter it with XCOLL_AVG
 *             into the shard (xcoll_ireduce_scatter); free the full
 *             parameters. hybrid_shard then all-reduces the averaged shard
 *             with XCOLL_AVG across nodes on a second communicator, so the
 *             result is the mean over all ranks, as DDP's.
 * Shard gradients accumulate over micro-batches (--grad-accum): every
 * micro-batch is reduced (FSDP outside no_sync), which is the same mean.
 *
 * Prefetch: with forward prefetch, the all-gather of unit u+1 is issued
 * before unit u's forward computes. In backward (full_shard), BACKWARD_PRE
 * issues unit u-1's all-gather before unit u's gradient is computed,
 * BACKWARD_POST after unit u's reduce-scatter is issued, NONE only when
 * u-1 is needed. Operations of one communicator run in issue order on
 * every rank, which is the same order on every rank here.
 */
#ifndef XTRAIN_FSDP_H
#define XTRAIN_FSDP_H

#include <stddef.h>

#include "strategy.h"
#include "xcoll.h"

typedef enum fsdp_sharding {
  FSDP_FULL_SHARD = 0,
  FSDP_SHARD_GRAD_OP = 1,
  FSDP_NO_SHARD = 2,
  FSDP_HYBRID_SHARD = 3
} fsdp_sharding;

typedef enum fsdp_prefetch {
  FSDP_PREFETCH_PRE = 0,
  FSDP_PREFETCH_POST = 1,
  FSDP_PREFETCH_NONE = 2
} fsdp_prefetch;

/* "full_shard", ... to a value; -1 when unknown. */
int fsdp_sharding_parse(const char *name);
const char *fsdp_sharding_name(fsdp_sharding s);
int fsdp_prefetch_parse(const char *name);
const char *fsdp_prefetch_name(fsdp_prefetch p);

typedef struct fsdp_config {
  fsdp_sharding sharding; /* not FSDP_NO_SHARD: that is DDP */
  fsdp_prefetch backward_prefetch;
  int forward_prefetch;   /* 1: issue unit u+1's all-gather before u's forward */
  size_t min_params;      /* smallest unit, elements (units.h) */
  int local_world_size;   /* hybrid_shard: ranks per node */
  /* Mixed precision (PyTorch's MixedPrecision): XCOLL_BFLOAT16 or
   * XCOLL_FLOAT16 cast the shard before its all-gather and widen the
   * gathered parameters back to float32 for the layers (param_dtype), or
   * cast the unsharded gradient before its reduce-scatter (and hybrid's
   * all-reduce) and widen the result into the float32 shard gradient
   * (reduce_dtype). Anything else is float32. Master parameters, gradient
   * shards and optimizer state stay float32. */
  xcoll_datatype param_dtype, reduce_dtype;
} fsdp_config;

/* One collective of the last micro-batch, for --trace. */
typedef struct fsdp_op_record {
  const char *what; /* "allgather", "reduce_scatter", "allreduce" */
  int unit;
  int across_nodes; /* 1: on the communicator across nodes (hybrid) */
  size_t bytes;     /* this rank's send buffer */
  double issue_time, done_time; /* seconds, ddp_now; done is an upper bound */
} fsdp_op_record;

/* The collectives of the last micro-batch (training forward and backward),
 * in issue order; valid until the next strategy_before_forward. */
int fsdp_last_ops(const strategy *s, const fsdp_op_record **ops);

/* Set up s as FSDP over comm (the world) for m, whose parameters were
 * initialised identically on every rank: each rank keeps its shards and
 * frees model.params and model.grads. hybrid_shard splits comm into one
 * communicator per node (ranks rank / local_world_size) and one across
 * nodes (ranks with the same local index). Returns XCOLL_SUCCESS, or an
 * error with a sentence in err (out of memory: XCOLL_ERR_NO_MEMORY; a world
 * size that is not a multiple of local_world_size: XCOLL_ERR_INVALID_ARGUMENT;
 * or the error of xcoll_comm_split). */
xcoll_status strategy_init_fsdp(strategy *s, model *m, xcoll_comm_t comm,
                                const fsdp_config *cfg, char *err,
                                size_t err_size);

/* The sharding group of s (an fsdp strategy): this rank's index in it, its
 * size S and its communicator (the world, or this node's ranks under
 * hybrid_shard). Unit u of s->plan holds ceil(plan.units[u].count / S)
 * elements of s->params, after the shards of units 0..u-1: what
 * checkpoint_fsdp.c needs to map shards to the model's layout. */
void fsdp_shard_group(const strategy *s, int *shard_rank, int *shard_size,
                      xcoll_comm_t *comm);

#endif /* XTRAIN_FSDP_H */
