/*
 * fsdp.c - sharded parameters, gathered per unit (see fsdp.h).
 *
 * Every collective is recorded as an op (kind, unit, communicator, issue
 * and completion times). Completion is looked at with xcoll_test at every
 * hook call and with xcoll_wait where a buffer is needed, so, as for DDP
 * (ddp.c), completion times may be late by one layer: the communication
 * time of an update, summed per communicator as the time from
 * max(issue, end of the previous op on that communicator) to the end, is an
 * upper bound. Blocked time is the time spent inside xcoll calls and
 * waiting in them; the share hidden is 1 - blocked / comm.
 */
#include "fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixed.h"

#define FSDP_MAX_OPS (4 * UNITS_MAX)

typedef enum op_kind { OP_GATHER, OP_REDUCE_SCATTER, OP_ALLREDUCE } op_kind;

typedef struct fsdp_op {
  op_kind kind;
  int unit;
  int comm_index; /* 0: the sharding group, 1: across nodes (hybrid) */
  xcoll_request_t request;
  int done;
  double issue_time, done_time; /* seconds, ddp_now */
} fsdp_op;

typedef struct fsdp_unit {
  size_t numel;        /* unpadded elements */
  size_t shard;        /* ceil(numel / S): elements this rank holds */
  size_t local_offset; /* of the shard in fsdp.local_params / local_grads */
  float *full;      /* (S * shard) gathered parameters, or NULL */
  float *full_grad; /* (S * shard) unsharded gradient in backward, or NULL */
  float *reduced;   /* (shard) reduce-scatter output until accumulated */
  /* Mixed precision: the same buffers in param_dtype / reduce_dtype. */
  uint16_t *full_lowp;    /* (S * shard) gathered, until widened into full */
  uint16_t *grad_lowp;    /* (S * shard) unsharded gradient, cast */
  uint16_t *reduced_lowp; /* (shard) reduce-scatter output */
  int gather_op;    /* ops index of a running all-gather, or -1 */
} fsdp_unit;

typedef struct fsdp {
  fsdp_config cfg;
  model *m;
  unit_plan *plan;
  xcoll_comm_t shard_comm;     /* the world, or this node's ranks */
  xcoll_comm_t replicate_comm; /* hybrid: same local index on every node */
  int own_comms;               /* the two above were made by xcoll_comm_split */
  int shard_rank, shard_size;  /* S */
  fsdp_unit units[UNITS_MAX];
  float *local_params, *local_grads; /* (local_count) this rank's shards */
  size_t local_count;
  float *scratch; /* (largest S * shard) used when an allocation fails */
  xcoll_datatype param_dtype, reduce_dtype; /* FLOAT32, BFLOAT16, FLOAT16 */
  int param_lowp, reduce_lowp; /* the dtype above is a 16-bit one */
  uint16_t *local_lowp; /* (local_count) shards cast to param_dtype */
  int replicate_size;   /* hybrid: ranks across nodes */
  fsdp_op ops[FSDP_MAX_OPS];
  int num_ops;
  int last_forward_unit;
  double blocked;        /* seconds in xcoll calls since before_forward */
  xcoll_status status;   /* first error since before_forward */
  size_t gathered_bytes; /* now */
  size_t *peak_bytes;    /* strategy.memory.peak_gathered_bytes */
  fsdp_op_record last_ops[FSDP_MAX_OPS]; /* of the last after_backward */
  int num_last_ops;
  char name[48];
} fsdp;

static const char *const sharding_names[] = {"full_shard", "shard_grad_op",
                                             "no_shard", "hybrid_shard"};
static const char *const prefetch_names[] = {"pre", "post", "none"};

int fsdp_sharding_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, sharding_names[i]) == 0)
      return i;
  return -1;
}

const char *fsdp_sharding_name(fsdp_sharding s) {
  return (unsigned)s < 4 ? sharding_names[s] : "?";
}

int fsdp_prefetch_parse(const char *name) {
  for (int i = 0; i < 3; i++)
    if (strcmp(name, prefetch_names[i]) == 0)
      return i;
  return -1;
}

const char *fsdp_prefetch_name(fsdp_prefetch p) {
  return (unsigned)p < 3 ? prefetch_names[p] : "?";
}

static size_t padded(const fsdp *f, const fsdp_unit *u) {
  return (size_t)f->shard_size * u->shard;
}

static void note_error(fsdp *f, xcoll_status st) {
  if (st != XCOLL_SUCCESS && f->status == XCOLL_SUCCESS)
    f->status = st;
}

/* A buffer of n floats (zeroed when zero is set) counted as gathered
 * memory; the scratch buffer, with the error noted, when out of memory, so
 * that the layer still has somewhere to compute. */
static float *take(fsdp *f, size_t n, int zero) {
  float *p = zero ? calloc(n, sizeof(float)) : malloc(n * sizeof(float));
  if (!p) {
    note_error(f, XCOLL_ERR_NO_MEMORY);
    return f->scratch;
  }
  f->gathered_bytes += n * sizeof(float);
  if (f->gathered_bytes > *f->peak_bytes)
    *f->peak_bytes = f->gathered_bytes;
  return p;
}

static void give(fsdp *f, float **p, size_t n) {
  if (*p && *p != f->scratch) {
    free(*p);
    f->gathered_bytes -= n * sizeof(float);
  }
  *p = NULL;
}

/* take and give for 16-bit buffers (the scratch buffer is large enough). */
static uint16_t *take16(fsdp *f, size_t n) {
  uint16_t *p = malloc(n * sizeof(uint16_t));
  if (!p) {
    note_error(f, XCOLL_ERR_NO_MEMORY);
    return (uint16_t *)f->scratch;
  }
  f->gathered_bytes += n * sizeof(uint16_t);
  if (f->gathered_bytes > *f->peak_bytes)
    *f->peak_bytes = f->gathered_bytes;
  return p;
}

static void give16(fsdp *f, uint16_t **p, size_t n) {
  if (*p && *p != (uint16_t *)f->scratch) {
    free(*p);
    f->gathered_bytes -= n * sizeof(uint16_t);
  }
  *p = NULL;
}

/* Gathered parameters in param_dtype: widen them for the layers, so that
 * they carry param_dtype's rounding. */
static void widen_gathered(fsdp *f, fsdp_unit *fu) {
  if (!fu->full_lowp)
    return;
  if (f->status == XCOLL_SUCCESS)
    mixed_widen(fu->full, fu->full_lowp, padded(f, fu), f->param_dtype);
  give16(f, &fu->full_lowp, padded(f, fu));
}

/* The all-gather's arguments for unit u: the float32 shard, or the shard
 * cast to param_dtype into a 16-bit receive buffer. */
static void gather_buffers(fsdp *f, int u, const void **send, void **recv,
                           xcoll_datatype *dtype) {
  fsdp_unit *fu = &f->units[u];
  if (!f->param_lowp) {
    *send = f->local_params + fu->local_offset;
    *recv = fu->full;
    *dtype = XCOLL_FLOAT32;
    return;
  }
  uint16_t *low = f->local_lowp + fu->local_offset;
  mixed_narrow(low, f->local_params + fu->local_offset, fu->shard, 1.0f,
               f->param_dtype);
  fu->full_lowp = take16(f, padded(f, fu));
  *send = low;
  *recv = fu->full_lowp;
  *dtype = f->param_dtype;
}

/* Point the tensors of unit u at its gathered parameters (or NULL). */
static void point_params(fsdp *f, int u, float *full) {
  const unit *pu = &f->plan->units[u];
  for (int p = pu->first_param; p <= pu->last_param; p++)
    f->m->tensor_params[p] =
        full ? full + (f->m->views[p].offset - pu->offset) : NULL;
}

static void point_grads(fsdp *f, int u, float *full_grad) {
  const unit *pu = &f->plan->units[u];
  for (int p = pu->first_param; p <= pu->last_param; p++)
    f->m->tensor_grads[p] =
        full_grad ? full_grad + (f->m->views[p].offset - pu->offset) : NULL;
}

/* Record an issued op; returns its index, or -1 when the call failed. */
static int record(fsdp *f, op_kind kind, int u, int comm_index, double t0,
                  xcoll_status st, xcoll_request_t request) {
  f->blocked += ddp_now() - t0;
  if (st != XCOLL_SUCCESS || f->num_ops == FSDP_MAX_OPS) {
    note_error(f, st != XCOLL_SUCCESS ? st : XCOLL_ERR_INTERNAL);
    if (request)
      xcoll_wait(request);
    return -1;
  }
  fsdp_op *op = &f->ops[f->num_ops];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->unit = u;
  op->comm_index = comm_index;
  op->request = request;
  op->issue_time = t0;
  return f->num_ops++;
}

/* Add a reduced shard gradient into this rank's shard of the gradients. */
static void accumulate(fsdp *f, int u) {
  fsdp_unit *fu = &f->units[u];
  float *g = f->local_grads + fu->local_offset;
  if (fu->reduced_lowp) {
    mixed_widen_add(g, fu->reduced_lowp, fu->shard, f->reduce_dtype);
    give16(f, &fu->reduced_lowp, fu->shard);
    return;
  }
  for (size_t i = 0; i < fu->shard; i++)
    g[i] += fu->reduced[i];
  give(f, &fu->reduced, fu->shard);
}

/* An op is complete (xcoll_test saw it, or xcoll_wait returned): release
 * its request and start what follows it. */
static void complete(fsdp *f, int i) {
  fsdp_op *op = &f->ops[i];
  note_error(f, xcoll_wait(op->request)); /* returns at once if done */
  op->request = NULL;
  op->done = 1;
  op->done_time = ddp_now();
  fsdp_unit *fu = &f->units[op->unit];
  if (op->kind == OP_GATHER) {
    fu->gather_op = -1;
    widen_gathered(f, fu);
  } else if (op->kind == OP_REDUCE_SCATTER) {
    give(f, &fu->full_grad, padded(f, fu));
    give16(f, &fu->grad_lowp, padded(f, fu));
    if (f->cfg.sharding == FSDP_HYBRID_SHARD && f->status == XCOLL_SUCCESS) {
      /* The node's mean, averaged again over nodes: the mean over all. */
      xcoll_request_t req = NULL;
      double t0 = ddp_now();
      void *buf = fu->reduced_lowp ? (void *)fu->reduced_lowp
                                   : (void *)fu->reduced;
      xcoll_status st =
          xcoll_iallreduce(buf, buf, fu->shard,
                           fu->reduced_lowp ? f->reduce_dtype : XCOLL_FLOAT32,
                           XCOLL_AVG, f->replicate_comm, NULL, &req);
      record(f, OP_ALLREDUCE, op->unit, 1, t0, st, req);
    } else {
      accumulate(f, op->unit);
    }
  } else {
    accumulate(f, op->unit);
  }
}

static void wait_op(fsdp *f, int i) {
  if (i < 0 || f->ops[i].done)
    return;
  double t0 = ddp_now();
  complete(f, i);
  f->blocked += ddp_now() - t0;
}

/* Note completed ops, in issue order per communicator (later ops of one
 * communicator are queued behind an unfinished one). */
static void poll(fsdp *f) {
  double t0 = ddp_now();
  int blocked_comm[2] = {0, 0};
  for (int i = 0; i < f->num_ops; i++) {
    fsdp_op *op = &f->ops[i];
    if (op->done || blocked_comm[op->comm_index])
      continue;
    int done = 0;
    note_error(f, xcoll_test(op->request, &done));
    if (done)
      complete(f, i);
    else
      blocked_comm[op->comm_index] = 1;
  }
  f->blocked += ddp_now() - t0;
}

/* Start gathering unit u unless it is gathered or being gathered. */
static void issue_gather(fsdp *f, int u) {
  fsdp_unit *fu = &f->units[u];
  if (fu->full)
    return;
  fu->full = take(f, padded(f, fu), 0);
  if (f->status != XCOLL_SUCCESS)
    return;
  xcoll_request_t req = NULL;
  const void *send;
  void *recv;
  xcoll_datatype dtype;
  gather_buffers(f, u, &send, &recv, &dtype);
  double t0 = ddp_now();
  xcoll_status st = xcoll_iallgather(send, recv, fu->shard, dtype,
                                     f->shard_comm, NULL, &req);
  fu->gather_op = record(f, OP_GATHER, u, 0, t0, st, req);
}

/* Unit u's parameters, gathered now unless a prefetch already started.
 * Gathering now uses the blocking call: xcoll runs it on this thread when
 * nothing is queued, which saves two thread hand-offs (see xcoll_queue_run
 * in core/request.c) that cost milliseconds on an oversubscribed machine. */
static void ensure_gathered(fsdp *f, int u) {
  fsdp_unit *fu = &f->units[u];
  if (!fu->full) {
    fu->full = take(f, padded(f, fu), 0);
    if (f->status == XCOLL_SUCCESS) {
      const void *send;
      void *recv;
      xcoll_datatype dtype;
      gather_buffers(f, u, &send, &recv, &dtype);
      double t0 = ddp_now();
      xcoll_status st =
          xcoll_allgather(send, recv, fu->shard, dtype, f->shard_comm);
      int i = record(f, OP_GATHER, u, 0, t0, st, NULL);
      if (i >= 0) {
        f->ops[i].done = 1;
        f->ops[i].done_time = ddp_now();
      }
      widen_gathered(f, fu);
    }
  }
  wait_op(f, fu->gather_op);
  point_params(f, u, fu->full);
}

static void reshard(fsdp *f, int u) {
  fsdp_unit *fu = &f->units[u];
  wait_op(f, fu->gather_op);
  give(f, &fu->full, padded(f, fu));
  give16(f, &fu->full_lowp, padded(f, fu)); /* only after a failed gather */
  point_params(f, u, NULL);
}

static int reshard_after_forward(const fsdp *f) {
  return f->cfg.sharding == FSDP_FULL_SHARD ||
         f->cfg.sharding == FSDP_HYBRID_SHARD;
}

/* ---- the strategy's hooks ---- */

static void hook_param_needed(strategy *s, int u, model_pass pass) {
  fsdp *f = s->impl;
  poll(f);
  if (pass == MODEL_FORWARD) {
    /* The previous unit's forward is over. The last unit is never freed
     * here: backward needs it first (as PyTorch keeps the root's). */
    if (f->last_forward_unit >= 0 && f->last_forward_unit != u &&
        reshard_after_forward(f))
      reshard(f, f->last_forward_unit);
    ensure_gathered(f, u);
    if (f->cfg.forward_prefetch && u + 1 < f->plan->num_units)
      issue_gather(f, u + 1);
    f->last_forward_unit = u;
    return;
  }
  ensure_gathered(f, u);
  fsdp_unit *fu = &f->units[u];
  fu->full_grad = take(f, padded(f, fu), 1);
  point_grads(f, u, fu->full_grad);
  if (f->cfg.backward_prefetch == FSDP_PREFETCH_PRE && u > 0)
    issue_gather(f, u - 1);
}

static void hook_poll(strategy *s) { poll(s->impl); }

static void hook_grad_ready(strategy *s, int u) {
  fsdp *f = s->impl;
  fsdp_unit *fu = &f->units[u];
  point_grads(f, u, NULL);
  reshard(f, u); /* parameters are not needed again in this micro-batch */
  if (f->reduce_lowp) {
    /* Reduce in reduce_dtype: cast the unsharded gradient, which is then
     * not needed any more. */
    fu->grad_lowp = take16(f, padded(f, fu));
    mixed_narrow(fu->grad_lowp, fu->full_grad, padded(f, fu), 1.0f,
                 f->reduce_dtype);
    give(f, &fu->full_grad, padded(f, fu));
    fu->reduced_lowp = take16(f, fu->shard);
  } else {
    fu->reduced = take(f, fu->shard, 0);
  }
  if (f->status == XCOLL_SUCCESS) {
    xcoll_request_t req = NULL;
    double t0 = ddp_now();
    xcoll_status st =
        f->reduce_lowp
            ? xcoll_ireduce_scatter(fu->grad_lowp, fu->reduced_lowp, fu->shard,
                                    f->reduce_dtype, XCOLL_AVG, f->shard_comm,
                                    NULL, &req)
            : xcoll_ireduce_scatter(fu->full_grad, fu->reduced, fu->shard,
                                    XCOLL_FLOAT32, XCOLL_AVG, f->shard_comm,
                                    NULL, &req);
    record(f, OP_REDUCE_SCATTER, u, 0, t0, st, req);
  }
  if (f->cfg.backward_prefetch == FSDP_PREFETCH_POST && u > 0)
    issue_gather(f, u - 1);
}

static void wait_all(fsdp *f) {
  for (int i = 0; i < f->num_ops; i++) /* completing may add ops */
    wait_op(f, i);
}

static void hook_before_forward(strategy *s) {
  fsdp *f = s->impl;
  wait_all(f); /* nothing should be running; never leave a request */
  f->num_ops = 0;
  f->blocked = 0.0;
  f->last_forward_unit = -1;
}

static xcoll_status hook_after_backward(strategy *s) {
  fsdp *f = s->impl;
  wait_all(f);
  /* A unit whose reduction failed to start still holds its buffers. */
  for (int u = 0; u < f->plan->num_units; u++) {
    give(f, &f->units[u].full_grad, padded(f, &f->units[u]));
    give(f, &f->units[u].reduced, f->units[u].shard);
    give16(f, &f->units[u].grad_lowp, padded(f, &f->units[u]));
    give16(f, &f->units[u].reduced_lowp, f->units[u].shard);
  }
  double comm = 0.0, prev_done[2] = {0.0, 0.0};
  for (int i = 0; i < f->num_ops; i++) {
    const fsdp_op *op = &f->ops[i];
    double start = op->issue_time > prev_done[op->comm_index]
                       ? op->issue_time
                       : prev_done[op->comm_index];
    if (op->done_time > start)
      comm += op->done_time - start;
    prev_done[op->comm_index] = op->done_time;
  }
  s->last.comm_time = comm;
  s->last.blocked_time = f->blocked;
  static const char *const names[] = {"allgather", "reduce_scatter",
                                      "allreduce"};
  for (int i = 0; i < f->num_ops; i++) {
    const fsdp_op *op = &f->ops[i];
    const fsdp_unit *fu = &f->units[op->unit];
    fsdp_op_record *rec = &f->last_ops[i];
    rec->what = names[op->kind];
    rec->unit = op->unit;
    rec->across_nodes = op->comm_index;
    size_t elem = mixed_dtype_size(op->kind == OP_GATHER ? f->param_dtype
                                                         : f->reduce_dtype);
    rec->bytes =
        (op->kind == OP_REDUCE_SCATTER ? padded(f, fu) : fu->shard) * elem;
    s->wire_bytes +=
        op->kind == OP_GATHER ? mixed_wire_allgather(rec->bytes, f->shard_size)
        : op->kind == OP_REDUCE_SCATTER
            ? mixed_wire_reduce_scatter(rec->bytes, f->shard_size)
            : mixed_wire_allreduce(rec->bytes, f->replicate_size);
    rec->issue_time = op->issue_time;
    rec->done_time = op->done_time;
  }
  f->num_last_ops = f->num_ops;
  xcoll_status st = f->status;
  f->status = XCOLL_SUCCESS;
  f->num_ops = 0;
  f->blocked = 0.0;
  return st;
}

/* clip_grad_norm (optim.h) over all shards: the squared norms of the
 * shards are summed over the sharding group (under hybrid_shard the nodes
 * hold equal copies, so the group is one node). Padding is zero. */
static xcoll_status hook_before_step(strategy *s, double clip_norm) {
  fsdp *f = s->impl;
  if (clip_norm <= 0.0)
    return XCOLL_SUCCESS;
  double sum = 0.0;
  for (size_t i = 0; i < f->local_count; i++)
    sum += (double)f->local_grads[i] * f->local_grads[i];
  s->wire_bytes += mixed_wire_allreduce(sizeof sum, f->shard_size);
  xcoll_status st =
      xcoll_allreduce(&sum, &sum, 1, XCOLL_FLOAT64, XCOLL_SUM, f->shard_comm);
  if (st != XCOLL_SUCCESS)
    return st;
  double norm = sqrt(sum);
  if (norm > clip_norm) {
    float scale = (float)(clip_norm / (norm + 1e-6));
    for (size_t i = 0; i < f->local_count; i++)
      f->local_grads[i] *= scale;
  }
  return XCOLL_SUCCESS;
}

static void hook_after_step(strategy *s) {
  fsdp *f = s->impl;
  memset(f->local_grads, 0, f->local_count * sizeof(float));
}

static xcoll_status hook_release(strategy *s) {
  fsdp *f = s->impl;
  wait_all(f);
  for (int u = 0; u < f->plan->num_units; u++)
    reshard(f, u);
  f->num_ops = 0;
  f->last_forward_unit = -1;
  xcoll_status st = f->status;
  f->status = XCOLL_SUCCESS;
  return st;
}

static xcoll_status hook_gather_params(strategy *s, float *out) {
  fsdp *f = s->impl;
  xcoll_status st = hook_release(s);
  for (int u = 0; st == XCOLL_SUCCESS && u < f->plan->num_units; u++) {
    fsdp_unit *fu = &f->units[u];
    float *full = malloc(padded(f, fu) * sizeof(float));
    if (!full)
      return XCOLL_ERR_NO_MEMORY;
    st = xcoll_allgather(f->local_params + fu->local_offset, full, fu->shard,
                         XCOLL_FLOAT32, f->shard_comm);
    if (st == XCOLL_SUCCESS)
      memcpy(out + f->plan->units[u].offset, full, fu->numel * sizeof(float));
    free(full);
  }
  return st;
}

static void hook_destroy(strategy *s) {
  fsdp *f = s->impl;
  if (!f)
    return;
  wait_all(f);
  for (int u = 0; u < f->plan->num_units; u++) {
    fsdp_unit *fu = &f->units[u];
    give(f, &fu->full, padded(f, fu));
    give(f, &fu->full_grad, padded(f, fu));
    give(f, &fu->reduced, fu->shard);
    give16(f, &fu->full_lowp, padded(f, fu));
    give16(f, &fu->grad_lowp, padded(f, fu));
    give16(f, &fu->reduced_lowp, fu->shard);
  }
  if (f->own_comms) {
    xcoll_comm_destroy(f->shard_comm);
    xcoll_comm_destroy(f->replicate_comm);
  }
  free(f->local_params);
  free(f->local_grads);
  free(f->scratch);
  free(f->local_lowp);
  free(f);
  s->impl = NULL;
}

int fsdp_last_ops(const strategy *s, const fsdp_op_record **ops) {
  const fsdp *f = s->impl;
  *ops = f->last_ops;
  return f->num_last_ops;
}

void fsdp_shard_group(const strategy *s, int *shard_rank, int *shard_size,
                      xcoll_comm_t *comm) {
  const fsdp *f = s->impl;
  *shard_rank = f->shard_rank;
  *shard_size = f->shard_size;
  *comm = f->shard_comm;
}

/* ---- setup ---- */

static xcoll_status split_nodes(fsdp *f, xcoll_comm_t comm, int rank,
                                int world_size, char *err, size_t err_size) {
  int L = f->cfg.local_world_size;
  if (L < 1 || world_size % L != 0) {
    snprintf(err, err_size,
             "hybrid_shard needs the world size (%d) to be a multiple of "
             "LOCAL_WORLD_SIZE (%d), the ranks of one node",
             world_size, L);
    return XCOLL_ERR_INVALID_ARGUMENT;
  }
  /* Ranks are numbered node by node (RANK = node * L + local rank). */
  xcoll_status st = xcoll_comm_split(comm, rank / L, rank, &f->shard_comm);
  if (st == XCOLL_SUCCESS)
    st = xcoll_comm_split(comm, rank % L, rank, &f->replicate_comm);
  if (st != XCOLL_SUCCESS) {
    snprintf(err, err_size, "xcoll_comm_split: %s: %s", xcoll_strerror(st),
             xcoll_comm_last_error(comm));
    if (f->shard_comm)
      xcoll_comm_destroy(f->shard_comm);
    return st;
  }
  f->own_comms = 1;
  return XCOLL_SUCCESS;
}

xcoll_status strategy_init_fsdp(strategy *s, model *m, xcoll_comm_t comm,
                                const fsdp_config *cfg, char *err,
                                size_t err_size) {
  memset(s, 0, sizeof *s);
  s->kind = STRATEGY_FSDP;
  s->m = m;
  s->current_unit = -1;
  s->lockstep = 1;
  fsdp *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, err_size, "out of memory");
    return XCOLL_ERR_NO_MEMORY;
  }
  f->cfg = *cfg;
  f->m = m;
  f->plan = &s->plan;
  f->peak_bytes = &s->memory.peak_gathered_bytes;
  f->last_forward_unit = -1;
  s->impl = f;
  int rank = 0, world_size = 1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world_size);
  f->shard_comm = comm;
  if (cfg->sharding == FSDP_HYBRID_SHARD) {
    xcoll_status st = split_nodes(f, comm, rank, world_size, err, err_size);
    if (st != XCOLL_SUCCESS) {
      hook_destroy(s);
      return st;
    }
  }
  xcoll_comm_rank(f->shard_comm, &f->shard_rank);
  xcoll_comm_size(f->shard_comm, &f->shard_size);
  f->replicate_size = 1;
  if (f->replicate_comm)
    xcoll_comm_size(f->replicate_comm, &f->replicate_size);
  f->param_lowp = cfg->param_dtype == XCOLL_BFLOAT16 ||
                  cfg->param_dtype == XCOLL_FLOAT16;
  f->reduce_lowp = cfg->reduce_dtype == XCOLL_BFLOAT16 ||
                   cfg->reduce_dtype == XCOLL_FLOAT16;
  f->param_dtype = f->param_lowp ? cfg->param_dtype : XCOLL_FLOAT32;
  f->reduce_dtype = f->reduce_lowp ? cfg->reduce_dtype : XCOLL_FLOAT32;
  snprintf(f->name, sizeof f->name, "fsdp %s", fsdp_sharding_name(cfg->sharding));
  s->name = f->name;

  units_plan_forward_by_min_params(&s->plan, m, cfg->min_params);
  size_t S = (size_t)f->shard_size, largest = 0;
  for (int u = 0; u < s->plan.num_units; u++) {
    fsdp_unit *fu = &f->units[u];
    fu->numel = s->plan.units[u].count;
    fu->shard = (fu->numel + S - 1) / S;
    fu->local_offset = f->local_count;
    fu->gather_op = -1;
    f->local_count += fu->shard;
    if (padded(f, fu) > largest)
      largest = padded(f, fu);
  }
  f->local_params = calloc(f->local_count, sizeof(float));
  f->local_grads = calloc(f->local_count, sizeof(float));
  f->scratch = calloc(largest, sizeof(float));
  if (f->param_lowp)
    f->local_lowp = calloc(f->local_count, sizeof(uint16_t));
  if (!f->local_params || !f->local_grads || !f->scratch ||
      (f->param_lowp && !f->local_lowp)) {
    snprintf(err, err_size, "out of memory for %zu shard elements",
             f->local_count);
    hook_destroy(s);
    return XCOLL_ERR_NO_MEMORY;
  }
  /* Keep this rank's chunk of each unit (zero padding past the end), then
   * drop the full copy: from here on only shards are held. */
  for (int u = 0; u < s->plan.num_units; u++) {
    fsdp_unit *fu = &f->units[u];
    size_t begin = (size_t)f->shard_rank * fu->shard;
    size_t end = begin + fu->shard > fu->numel ? fu->numel : begin + fu->shard;
    if (begin < end)
      memcpy(f->local_params + fu->local_offset,
             m->params + s->plan.units[u].offset + begin,
             (end - begin) * sizeof(float));
  }
  free(m->params);
  free(m->grads);
  m->params = m->grads = NULL;
  for (int p = 0; p < m->num_params; p++)
    m->tensor_params[p] = m->tensor_grads[p] = NULL;

  s->params = f->local_params;
  s->grads = f->local_grads;
  s->count = f->local_count;
  s->param_needed = hook_param_needed;
  s->poll = hook_poll;
  s->grad_ready = hook_grad_ready;
  s->before_forward = hook_before_forward;
  s->after_backward = hook_after_backward;
  s->before_step = hook_before_step;
  s->after_step = hook_after_step;
  s->release = hook_release;
  s->gather_params = hook_gather_params;
  s->destroy = hook_destroy;
  return XCOLL_SUCCESS;
}
