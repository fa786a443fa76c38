/*
 * ddp.h - DistributedDataParallel over xcoll (Li et al., "PyTorch
 * Distributed: Experiences on Accelerating Data Parallel Training", VLDB
 * 2020).
 *
 * Gradients are grouped into buckets of at most first_bucket_mb (the first
 * bucket, 1 MiB by default like PyTorch's _DEFAULT_FIRST_BUCKET_BYTES) and
 * bucket_cap_mb (the others, 25 MiB by default), filled in REVERSE
 * registration order because backward produces gradients from the
 * last layer to the first. Parameters are registered in forward order in one
 * buffer, so a run of consecutive tensors in reverse order is still one
 * contiguous range of model.grads: a bucket is a view, never a copy.
 * A bucket is a unit of units.h (units_plan_reverse_by_bytes). Backward
 * reports each tensor as ready; the strategy (strategy.c) counts a unit's
 * tensors down and calls ddp_bucket_ready when the last one is ready, which
 * starts the bucket's in-place XCOLL_AVG all-reduce with xcoll_iallreduce; it
 * runs on xcoll's progress thread while backward goes on with earlier
 * layers. ddp_finish_backward waits for all buckets before the optimizer
 * step.
 *
 * Gradient accumulation uses no_sync semantics: ddp_begin_backward(d, 0)
 * turns the hooks off, so micro-batches only accumulate locally; the last
 * micro-batch, with sync on, all-reduces the accumulated sums.
 */
#ifndef XTRAIN_DDP_H
#define XTRAIN_DDP_H

#include <stddef.h>

#include "model.h"
#include "units.h"
#include "xcoll.h"

#define DDP_MAX_BUCKETS MODEL_MAX_PARAMS

typedef struct ddp_bucket {
  size_t offset;   /* first element in model.grads */
  size_t count;    /* elements */
  int first_param; /* lowest registration index in the bucket */
  int last_param;  /* highest */
  xcoll_request_t request;
  int launched, done;
  int done_at_wait; /* completion first seen by ddp_finish_backward's wait,
                     * not by an xcoll_test between layers */
  double launch_time, done_time; /* seconds, monotonic clock */
} ddp_bucket;

/* Communication statistics of one synchronised backward pass, seconds. */
typedef struct ddp_stats {
  size_t wire_bytes;   /* bytes this rank sent (mixed.h's ring model) */
  double comm_time;    /* time all-reduces were running (see ddp.c) */
  double blocked_time; /* time compute was stalled by communication: in
                        * xcoll calls during backward and waiting after it */
} ddp_stats;

struct comm_hook; /* comm_hooks.h */

typedef struct ddp {
  xcoll_comm_t comm;
  int world_size;
  model *m;
  struct comm_hook *hook; /* NULL: float32 XCOLL_AVG all-reduce per bucket */
  size_t wire_bytes;      /* sent in the current backward */
  unit_plan plan; /* bucket i is plan.units[i] */
  int num_buckets;
  ddp_bucket buckets[DDP_MAX_BUCKETS];
  int bucket_of_param[MODEL_MAX_PARAMS];
  int sync;          /* hooks on for the current backward */
  double backward_start;
  double blocked_in_calls; /* seconds inside xcoll calls during backward */
  xcoll_status status; /* first error raised inside a hook */
  ddp_stats last;      /* of the last synchronised backward */
} ddp;

/* Build buckets for m over comm. Buckets fill in reverse registration
 * order, one layer (tensors whose names share the part before the first
 * '.') at a time, never splitting a layer. The first
 * bucket (the last layers, whose gradients are ready first) holds at most
 * first_bucket_mb MiB, the others at most bucket_cap_mb MiB: a layer that
 * would overflow a bucket starts the next one, and a layer larger than the
 * cap gets a bucket of its own. comm is only stored: nothing is sent. */
void ddp_init(ddp *d, xcoll_comm_t comm, model *m, double first_bucket_mb,
              double bucket_cap_mb);

/* Go on over comm, the survivors' communicator after a shrink (xtrain
 * --elastic): the buckets stay, the world size is comm's, nothing is in
 * flight. comm is only stored. */
void ddp_set_comm(ddp *d, xcoll_comm_t comm);

/* Make every rank start from rank 0's parameters (xcoll_broadcast). */
xcoll_status ddp_broadcast_params(ddp *d);

/* Between layers of backward: note which buckets' all-reduces completed
 * (xcoll_test), so that communication time is measured. */
void ddp_poll(ddp *d);

/* Every tensor of bucket b has its final gradient: start its all-reduce.
 * Buckets become ready in the same order on every rank. A no-op with sync
 * off or after an error (kept for ddp_finish_backward). */
void ddp_bucket_ready(ddp *d, int b);

/* Call before model_backward. sync = 0 is no_sync: gradients only
 * accumulate locally. */
void ddp_begin_backward(ddp *d, int sync);

/* Call after model_backward: waits for every bucket's all-reduce. On return
 * model.grads holds the mean over ranks. Returns the first error of the pass
 * (message in xcoll_comm_last_error). A no-op with sync off. */
xcoll_status ddp_finish_backward(ddp *d);

/* Run hook h (comm_hooks.h, set up for d's model and world) on every
 * bucket in place of the float32 all-reduce; NULL detaches. */
void ddp_register_comm_hook(ddp *d, struct comm_hook *h);

/* Monotonic clock in seconds. */
double ddp_now(void);

#endif /* XTRAIN_DDP_H */
