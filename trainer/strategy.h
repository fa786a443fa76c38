/*
 * strategy.h - how a training step is distributed: one process (none),
 * DataParallel over threads (dp.h), DistributedDataParallel (ddp.h) or
 * Fully Sharded Data Parallel (fsdp.h), behind one struct of hooks, so that
 * xtrain's step reads the same under every strategy (dp replaces the
 * forward/backward pair by its forward_backward hook):
 *
 *   strategy_before_forward(s)
 *   model_forward      -> param_needed(unit, MODEL_FORWARD) before each unit
 *   strategy_before_backward(s, sync)
 *   model_backward     -> param_needed(unit, MODEL_BACKWARD) before each unit,
 *                         grad_ready(unit) once all its gradients are final
 *   strategy_after_backward(s)   (waits for gradient communication)
 *   strategy_before_step(s, clip) (gradient clipping over all shards)
 *   optim_step(opt, s->params, s->grads, lr)
 *   strategy_after_step(s)       (zero the gradients)
 *
 * A strategy owns the parameters the optimizer updates: s->params and
 * s->grads, s->count floats each. Under none and ddp they are model.params
 * and model.grads (the whole model); under fsdp they are this rank's shards.
 * The model's per-tensor hooks (model.grad_ready, model.param_needed) are
 * routed through strategy_attach, which maps tensors to units (units.h) and
 * counts each unit's tensors down in backward.
 */
#ifndef XTRAIN_STRATEGY_H
#define XTRAIN_STRATEGY_H

#include <stddef.h>

#include "ddp.h"
#include "model.h"
#include "units.h"
#include "xcoll.h"

typedef enum strategy_kind {
  STRATEGY_NONE = 0,
  STRATEGY_DDP = 1,
  STRATEGY_FSDP = 2,
  STRATEGY_DP = 3
} strategy_kind;

/* Communication statistics of one update, seconds. comm_time: time
 * collectives were running; blocked_time: time compute waited for them or
 * was inside xcoll calls. 1 - blocked/comm is the share hidden. */
typedef struct strategy_stats {
  double comm_time;
  double blocked_time;
} strategy_stats;

/* Bytes one rank holds for the whole run (outside any unit's gather). */
typedef struct strategy_memory {
  size_t param_bytes;
  size_t grad_bytes;
  size_t optim_bytes;
  size_t peak_gathered_bytes; /* most bytes of gathered parameters and
                                 unsharded gradients held at once (fsdp) */
} strategy_memory;

typedef struct strategy strategy;
struct strategy {
  strategy_kind kind;
  const char *name; /* "none", "ddp", "fsdp full_shard", ... */
  model *m;
  unit_plan plan; /* units of the hooks below */
  float *params, *grads; /* what the optimizer updates, count floats each */
  size_t count;
  int lockstep; /* 1 when every rank must run the same forwards (fsdp) */
  int replicas; /* dp: copies of parameters and gradients held (0 = 1) */
  strategy_stats last; /* of the last update that communicated */
  size_t wire_bytes; /* bytes this rank sent in the training steps so far
                        (mixed.h's ring model); never reset */
  strategy_memory memory;
  void *impl;
  /* dp: runs a micro-batch's forward and backward itself, over its
   * replicas; returns the summed loss and adds to *correct. NULL: the step
   * calls model_forward and model_backward. */
  double (*forward_backward)(strategy *s, const float *x,
                             const unsigned char *y, int n, float loss_scale,
                             int *correct);
  /* Hooks; NULL where a strategy has nothing to do. */
  void (*param_needed)(strategy *s, int unit, model_pass pass);
  void (*poll)(strategy *s); /* at every tensor's grad_ready */
  void (*grad_ready)(strategy *s, int unit);
  void (*before_forward)(strategy *s);
  void (*before_backward)(strategy *s, int sync);
  xcoll_status (*after_backward)(strategy *s);
  xcoll_status (*before_step)(strategy *s, double clip_norm);
  void (*after_step)(strategy *s);
  xcoll_status (*release)(strategy *s); /* after evaluation */
  xcoll_status (*gather_params)(strategy *s, float *out); /* full model */
  void (*destroy)(strategy *s);
  /* strategy.c's bookkeeping */
  int pending[UNITS_MAX]; /* tensors of each unit not yet ready */
  int current_unit;
  model_pass current_pass;
};

/* One process: the optimizer updates model.params; nothing is sent. */
void strategy_init_none(strategy *s, model *m);

/* DDP over comm with the bucket caps of ddp_init (d is owned by the caller
 * and must outlive s). Broadcasts rank 0's parameters. */
xcoll_status strategy_init_ddp(strategy *s, model *m, ddp *d, xcoll_comm_t comm,
                               double first_bucket_mb, double bucket_cap_mb);

/* Route m's hooks through s (model.grad_ready and model.param_needed). */
void strategy_attach(strategy *s);

void strategy_before_forward(strategy *s);
void strategy_before_backward(strategy *s, int sync);
xcoll_status strategy_after_backward(strategy *s);
xcoll_status strategy_before_step(strategy *s, double clip_norm);
void strategy_after_step(strategy *s);
xcoll_status strategy_release(strategy *s);

/* Write the whole model's float32 parameters, in registration order
 * (model.num_elements floats), to out. Collective under fsdp. */
xcoll_status strategy_gather_params(strategy *s, float *out);

/* Fill s->memory for an optimizer keeping num_state buffers of s->count
 * (parameters and gradients counted once per replica). */
void strategy_count_memory(strategy *s, int optim_num_state);

void strategy_destroy(strategy *s);

/* The model's hooks, as installed by strategy_attach (ctx = strategy). */
void strategy_tensor_ready(void *ctx, int param_index);
void strategy_layer_needed(void *ctx, int param_index, model_pass pass);

#endif /* XTRAIN_STRATEGY_H */
