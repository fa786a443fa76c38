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

/* 1 when tensors a and b belong to one layer: the same name before the
 * first '.' ("fc1.weight", "fc1.bias"). */
static int same_layer(const model *m, int a, int b) {
  const char *x = m->views[a].name, *y = m->views[b].name;
  size_t n = strcspn(x, ".");
  return n == strcspn(y, ".") && strncmp(x, y, n) == 0;
}

void ddp_init(ddp *d, xcoll_comm_t comm, model *m, double first_bucket_mb,
              double bucket_cap_mb) {
  memset(d, 0, sizeof *d);
  d->comm = comm;
  d->m = m;
  ddp_bucket *b = NULL;
  /* The unit of placement is a layer: backward reports a layer's tensors
   * ready together, so splitting one across buckets gains nothing, and the
   * part left in the earlier bucket would hold that bucket back until the
   * layer's backward is over (fc1.bias would delay the MLP's first bucket
   * past fc1's backward, leaving nothing to overlap). */
  int p = m->num_params - 1;
  while (p >= 0) {
    int low = p;
    size_t numel = m->views[p].numel;
    while (low > 0 && same_layer(m, low - 1, p)) {
      low--;
      numel += m->views[low].numel;
    }
    if (b) {
      double cap_mb = d->num_buckets == 1 ? first_bucket_mb : bucket_cap_mb;
      double bytes = (double)(b->count + numel) * sizeof(float);
      if (bytes > cap_mb * 1024.0 * 1024.0)
        b = NULL; /* this layer would overflow the bucket: start the next */
    }
    if (!b) {
      b = &d->buckets[d->num_buckets++];
      b->last_param = p;
      b->count = 0;
    }
    for (int q = p; q >= low; q--)
      d->bucket_of_param[q] = (int)(b - d->buckets);
    b->first_param = low;
    b->offset = m->views[low].offset;
    b->count += numel;
    p = low - 1;
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
