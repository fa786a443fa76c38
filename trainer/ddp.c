/*
 * ddp.c - gradient bucketing and overlapped all-reduce (see ddp.h).
 *
 * Communication time of a pass is measured as the time the all-reduces were
 * running: bucket i runs from max(launch_i, done_{i-1}) (xcoll runs the
 * operations of one communicator in issue order) to done_i. Completion of a
 * bucket is observed with xcoll_test at every later hook call, and with
 * xcoll_wait at the end, so done_i may be late by at most one layer's
 * backward: the comm time is an upper bound. The share hidden under backward
 * is 1 - blocked_time / comm_time, where blocked_time counts the wait after
 * backward and the time spent inside xcoll_iallreduce and xcoll_test calls
 * during backward (compute is stalled there too).
 */
#include "ddp.h"

#include <string.h>

#include "comm_hooks.h"
#include "mixed.h"
#include <time.h>

double ddp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ddp_poll(ddp *d) {
  if (!d->sync || d->status != XCOLL_SUCCESS)
    return;
  double t0 = ddp_now();
  for (int i = 0; i < d->num_buckets; i++) {
    ddp_bucket *b = &d->buckets[i];
    if (!b->launched || b->done)
      continue;
    int done = 0;
    xcoll_status st = xcoll_test(b->request, &done);
    if (st != XCOLL_SUCCESS && d->status == XCOLL_SUCCESS)
      d->status = st;
    if (done) {
      b->done = 1;
      b->done_time = ddp_now();
    } else {
      break; /* later buckets are queued behind this one */
    }
  }
  d->blocked_in_calls += ddp_now() - t0;
}

/* What a communication hook sees of bucket i. */
static comm_bucket bucket_view(const ddp *d, int i) {
  const ddp_bucket *b = &d->buckets[i];
  comm_bucket v = {.index = i,
                   .buffer = d->m->grads + b->offset,
                   .offset = b->offset,
                   .count = b->count,
                   .first_param = b->first_param,
                   .last_param = b->last_param,
                   .params = d->m->views,
                   .comm = d->comm};
  return v;
}

/* Bucket b through the hook; 0 when the hook leaves it to ddp.c. */
static int hook_bucket_ready(ddp *d, int bucket) {
  ddp_bucket *b = &d->buckets[bucket];
  comm_bucket view = bucket_view(d, bucket);
  comm_work work;
  b->launch_time = ddp_now();
  if (!comm_hook_bucket_ready(d->hook, &view, &work))
    return 0;
  double now = ddp_now();
  /* A hook's casts and blocking calls stall backward as well. */
  d->blocked_in_calls += now - b->launch_time;
  if (work.status != XCOLL_SUCCESS) {
    d->status = work.status;
    return 1;
  }
  b->launched = 1;
  b->request = work.request;
  d->wire_bytes += work.wire_bytes;
  if (!work.request) { /* ran to completion (powersgd) */
    b->done = 1;
    b->done_time = now;
  }
  return 1;
}

void ddp_register_comm_hook(ddp *d, struct comm_hook *h) { d->hook = h; }

void ddp_bucket_ready(ddp *d, int bucket) {
  if (!d->sync || d->status != XCOLL_SUCCESS)
    return;
  if (d->hook && hook_bucket_ready(d, bucket))
    return;
  ddp_bucket *b = &d->buckets[bucket];
  float *range = d->m->grads + b->offset;
  b->launch_time = ddp_now();
  xcoll_status st = xcoll_iallreduce(range, range, b->count, XCOLL_FLOAT32,
                                     XCOLL_AVG, d->comm, NULL, &b->request);
  /* Time inside the call is time backward could not compute. */
  d->blocked_in_calls += ddp_now() - b->launch_time;
  if (st != XCOLL_SUCCESS) {
    d->status = st;
    return;
  }
  b->launched = 1;
  d->wire_bytes += mixed_wire_allreduce(b->count * sizeof(float), d->world_size);
}

void ddp_init(ddp *d, xcoll_comm_t comm, model *m, double first_bucket_mb,
              double bucket_cap_mb) {
  memset(d, 0, sizeof *d);
  d->comm = comm;
  d->world_size = 1;
  if (comm)
    xcoll_comm_size(comm, &d->world_size);
  d->m = m;
  /* The unit of placement is a layer: backward reports a layer's tensors
   * ready together, so splitting one across buckets gains nothing, and the
   * part left in the earlier bucket would hold that bucket back until the
   * layer's backward is over (fc1.bias would delay the MLP's first bucket
   * past fc1's backward, leaving nothing to overlap). */
  units_plan_reverse_by_bytes(&d->plan, m, first_bucket_mb, bucket_cap_mb);
  d->num_buckets = d->plan.num_units;
  for (int i = 0; i < d->num_buckets; i++) {
    const unit *u = &d->plan.units[i];
    d->buckets[i].first_param = u->first_param;
    d->buckets[i].last_param = u->last_param;
    d->buckets[i].offset = u->offset;
    d->buckets[i].count = u->count;
  }
  memcpy(d->bucket_of_param, d->plan.unit_of_param, sizeof d->bucket_of_param);
}

void ddp_set_comm(ddp *d, xcoll_comm_t comm) {
  d->comm = comm;
  xcoll_comm_size(comm, &d->world_size);
  d->status = XCOLL_SUCCESS;
  d->sync = 0;
  for (int i = 0; i < d->num_buckets; i++) {
    d->buckets[i].launched = d->buckets[i].done = 0;
    d->buckets[i].request = NULL;
  }
}

xcoll_status ddp_broadcast_params(ddp *d) {
  return xcoll_broadcast(d->m->params, d->m->params, d->m->num_elements,
                         XCOLL_FLOAT32, 0, d->comm);
}

void ddp_begin_backward(ddp *d, int sync) {
  d->sync = sync;
  d->backward_start = ddp_now();
  d->blocked_in_calls = 0.0;
  d->wire_bytes = 0;
  for (int i = 0; i < d->num_buckets; i++) {
    ddp_bucket *b = &d->buckets[i];
    b->launched = b->done = b->done_at_wait = 0;
    b->request = NULL;
  }
}

xcoll_status ddp_finish_backward(ddp *d) {
  if (!d->sync)
    return XCOLL_SUCCESS;
  double backward_end = ddp_now();
  xcoll_status result = d->status;
  for (int i = 0; i < d->num_buckets; i++) {
    ddp_bucket *b = &d->buckets[i];
    if (!b->launched)
      continue; /* only after an error: the bucket was never started */
    if (!b->request)
      continue; /* a hook ran it to completion (powersgd) */
    xcoll_status st = xcoll_wait(b->request); /* also releases done ones */
    if (!b->done) {
      b->done = 1;
      b->done_at_wait = 1;
      b->done_time = ddp_now();
    }
    if (st != XCOLL_SUCCESS && result == XCOLL_SUCCESS)
      result = st;
    b->request = NULL;
  }
  if (result == XCOLL_SUCCESS) {
    for (int i = 0; i < d->num_buckets; i++)
      if (!d->buckets[i].launched)
        result = XCOLL_ERR_INTERNAL; /* a tensor was never reported ready */
  }
  if (result == XCOLL_SUCCESS && d->hook) {
    for (int i = 0; i < d->num_buckets; i++) {
      comm_bucket view = bucket_view(d, i);
      comm_hook_bucket_done(d->hook, &view);
    }
    comm_hook_finish(d->hook);
  }
  double end = ddp_now();
  double comm = 0.0, prev_done = 0.0;
  for (int i = 0; i < d->num_buckets; i++) {
    ddp_bucket *b = &d->buckets[i];
    if (!b->launched)
      continue;
    double start = b->launch_time > prev_done ? b->launch_time : prev_done;
    if (b->done_time > start)
      comm += b->done_time - start;
    prev_done = b->done_time;
  }
  d->last.comm_time = comm;
  d->last.wire_bytes = d->wire_bytes;
  d->last.blocked_time = end - backward_end + d->blocked_in_calls;
  d->status = XCOLL_SUCCESS;
  d->sync = 0;
  return result;
}
