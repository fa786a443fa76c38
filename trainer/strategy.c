/*
 * strategy.c - the hooks of --strategy none and ddp, and the routing of the
 * model's per-tensor hooks to per-unit strategy hooks (see strategy.h).
 */
#include "strategy.h"

#include <string.h>

#include "optim.h"

/* ---- routing the model's hooks ---- */

void strategy_layer_needed(void *ctx, int param_index, model_pass pass) {
  strategy *s = ctx;
  int u = s->plan.unit_of_param[param_index];
  /* A unit of several layers is announced once per pass. */
  if (u == s->current_unit && pass == s->current_pass)
    return;
  s->current_unit = u;
  s->current_pass = pass;
  if (s->param_needed)
    s->param_needed(s, u, pass);
}

void strategy_tensor_ready(void *ctx, int param_index) {
  strategy *s = ctx;
  if (s->poll)
    s->poll(s);
  int u = s->plan.unit_of_param[param_index];
  if (--s->pending[u] == 0 && s->grad_ready)
    s->grad_ready(s, u);
}

void strategy_attach(strategy *s) {
  s->m->grad_ready = strategy_tensor_ready;
  s->m->grad_ready_ctx = s;
  s->m->param_needed = strategy_layer_needed;
  s->m->param_needed_ctx = s;
}

void strategy_before_forward(strategy *s) {
  s->current_unit = -1;
  if (s->before_forward)
    s->before_forward(s);
}

void strategy_before_backward(strategy *s, int sync) {
  for (int u = 0; u < s->plan.num_units; u++)
    s->pending[u] =
        s->plan.units[u].last_param - s->plan.units[u].first_param + 1;
  s->current_unit = -1;
  if (s->before_backward)
    s->before_backward(s, sync);
}

xcoll_status strategy_after_backward(strategy *s) {
  memset(&s->last, 0, sizeof s->last);
  return s->after_backward ? s->after_backward(s) : XCOLL_SUCCESS;
}

xcoll_status strategy_before_step(strategy *s, double clip_norm) {
  if (s->before_step)
    return s->before_step(s, clip_norm);
  if (clip_norm > 0.0)
    clip_grad_norm(s->grads, s->count, clip_norm);
  return XCOLL_SUCCESS;
}

void strategy_after_step(strategy *s) {
  if (s->after_step)
    s->after_step(s);
  else
    memset(s->grads, 0, s->count * sizeof(float));
}

xcoll_status strategy_release(strategy *s) {
  s->current_unit = -1;
  return s->release ? s->release(s) : XCOLL_SUCCESS;
}

xcoll_status strategy_gather_params(strategy *s, float *out) {
  if (s->gather_params)
    return s->gather_params(s, out);
  memcpy(out, s->m->params, s->m->num_elements * sizeof(float));
  return XCOLL_SUCCESS;
}

void strategy_count_memory(strategy *s, int optim_num_state) {
  size_t copies = s->replicas > 1 ? (size_t)s->replicas : 1;
  s->memory.param_bytes = copies * s->count * sizeof(float);
  s->memory.grad_bytes = copies * s->count * sizeof(float);
  s->memory.optim_bytes = (size_t)optim_num_state * s->count * sizeof(float);
}

void strategy_destroy(strategy *s) {
  if (s->destroy)
    s->destroy(s);
  if (s->m) {
    s->m->grad_ready = NULL;
    s->m->param_needed = NULL;
  }
}

/* ---- none ---- */

static void common_init(strategy *s, model *m, strategy_kind kind,
                        const char *name) {
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->name = name;
  s->m = m;
  s->params = m->params;
  s->grads = m->grads;
  s->count = m->num_elements;
  s->current_unit = -1;
}

void strategy_init_none(strategy *s, model *m) {
  common_init(s, m, STRATEGY_NONE, "none");
  /* One unit per layer, only so that the routing has a plan. */
  units_plan_forward_by_min_params(&s->plan, m, 0);
}

/* ---- ddp: the hooks are ddp.c's ---- */

static void ddp_hook_poll(strategy *s) { ddp_poll(s->impl); }

static void ddp_hook_grad_ready(strategy *s, int unit) {
  ddp_bucket_ready(s->impl, unit);
}

static void ddp_hook_before_backward(strategy *s, int sync) {
  ddp_begin_backward(s->impl, sync);
}

static xcoll_status ddp_hook_after_backward(strategy *s) {
  ddp *d = s->impl;
  if (!d->sync)
    return XCOLL_SUCCESS; /* no_sync: nothing was sent */
  xcoll_status st = ddp_finish_backward(d);
  s->last.comm_time = d->last.comm_time;
  s->last.blocked_time = d->last.blocked_time;
  s->wire_bytes += d->last.wire_bytes;
  return st;
}

xcoll_status strategy_init_ddp(strategy *s, model *m, ddp *d, xcoll_comm_t comm,
                               double first_bucket_mb, double bucket_cap_mb) {
  common_init(s, m, STRATEGY_DDP, "ddp");
  ddp_init(d, comm, m, first_bucket_mb, bucket_cap_mb);
  s->plan = d->plan;
  s->impl = d;
  s->poll = ddp_hook_poll;
  s->grad_ready = ddp_hook_grad_ready;
  s->before_backward = ddp_hook_before_backward;
  s->after_backward = ddp_hook_after_backward;
  return ddp_broadcast_params(d);
}
