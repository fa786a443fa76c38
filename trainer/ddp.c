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
#include <time.h>

double ddp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void poll_buckets(ddp *d) {
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

static void on_grad_ready(void *ctx, int param_index) {
  ddp *d = ctx;
  if (!d->sync || d->status != XCOLL_SUCCESS)
    return;
  poll_buckets(d);
  ddp_bucket *b = &d->buckets[d->bucket_of_param[param_index]];
  if (--b->pending > 0)
    return;
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
}

void ddp_init(ddp *d, xcoll_comm_t comm, model *m, double bucket_cap_mb) {
  memset(d, 0, sizeof *d);
  d->comm = comm;
  d->m = m;
  double cap_bytes = bucket_cap_mb * 1024.0 * 1024.0;
  ddp_bucket *b = NULL;
  for (int p = m->num_params - 1; p >= 0; p--) {
    if (!b) {
      b = &d->buckets[d->num_buckets++];
      b->last_param = p;
    }
    b->first_param = p;
    d->bucket_of_param[p] = (int)(b - d->buckets);
    b->offset = m->views[p].offset;
    const param_view *last = &m->views[b->last_param];
    b->count = last->offset + last->numel - b->offset;
    if ((double)b->count * sizeof(float) >= cap_bytes)
      b = NULL;
  }
  m->grad_ready = on_grad_ready;
  m->grad_ready_ctx = d;
}

xcoll_status ddp_broadcast_params(ddp *d) {
  return xcoll_broadcast(d->m->params, d->m->params, d->m->num_elements,
                         XCOLL_FLOAT32, 0, d->comm);
}

void ddp_begin_backward(ddp *d, int sync) {
  d->sync = sync;
  d->backward_start = ddp_now();
  d->blocked_in_calls = 0.0;
  for (int i = 0; i < d->num_buckets; i++) {
    ddp_bucket *b = &d->buckets[i];
    b->pending = b->last_param - b->first_param + 1;
    b->launched = b->done = 0;
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
    xcoll_status st = xcoll_wait(b->request); /* also releases done ones */
    if (!b->done) {
      b->done = 1;
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
  d->last.blocked_time = end - backward_end + d->blocked_in_calls;
  d->status = XCOLL_SUCCESS;
  d->sync = 0;
  return result;
}
