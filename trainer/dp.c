/* dp.c - DataParallel with worker threads (see dp.h). */
#include "dp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dp_replica {
  model *m;           /* replica 0: the strategy's model; others owned */
  model own;
  pthread_t thread;
  int started;
  /* this micro-batch's chunk */
  const float *x;           /* (rows, 784) */
  const unsigned char *y;   /* (rows) */
  int rows;
  double loss;
  int correct;
} dp_replica;

typedef struct dp {
  int devices;
  dp_replica *replicas; /* (devices) */
  float loss_scale;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  unsigned generation; /* bumped for each micro-batch */
  int running;         /* workers still computing this generation */
  int stop;
} dp;

static void compute(dp_replica *rp, float loss_scale) {
  rp->loss = 0.0;
  rp->correct = 0;
  if (rp->rows == 0)
    return;
  rp->loss = model_forward(rp->m, rp->x, rp->y, rp->rows, &rp->correct);
  model_backward(rp->m, rp->rows, loss_scale);
}

typedef struct worker_arg {
  dp *d;
  int index;
} worker_arg;

static void *worker(void *arg) {
  worker_arg *wa = arg;
  dp *d = wa->d;
  dp_replica *rp = &d->replicas[wa->index];
  free(wa);
  unsigned seen = 0;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->stop && d->generation == seen)
      pthread_cond_wait(&d->work, &d->lock);
    if (d->stop)
      break;
    seen = d->generation;
    float scale = d->loss_scale;
    pthread_mutex_unlock(&d->lock);
    compute(rp, scale);
    pthread_mutex_lock(&d->lock);
    if (--d->running == 0)
      pthread_cond_signal(&d->done);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

static double hook_forward_backward(strategy *s, const float *x,
                                    const unsigned char *y, int n,
                                    float loss_scale, int *correct) {
  dp *d = s->impl;
  model *m0 = s->m;
  int N = d->devices, chunk = (n + N - 1) / N;
  double t0 = ddp_now();
  /* replicate: every replica starts from replica 0's parameters, and its
   * gradient from zero (replica 0 accumulates over micro-batches) */
  for (int i = 1; i < N; i++) {
    memcpy(d->replicas[i].m->params, m0->params,
           m0->num_elements * sizeof(float));
    model_zero_grad(d->replicas[i].m);
  }
  /* scatter */
  for (int i = 0; i < N; i++) {
    dp_replica *rp = &d->replicas[i];
    int lo = i * chunk < n ? i * chunk : n;
    int hi = lo + chunk < n ? lo + chunk : n;
    rp->x = x + (size_t)lo * m0->sample_inputs;
    rp->y = y + (size_t)lo * m0->sample_targets;
    rp->rows = hi - lo;
  }
  double t1 = ddp_now();
  pthread_mutex_lock(&d->lock);
  d->loss_scale = loss_scale;
  d->running = N - 1;
  d->generation++;
  pthread_cond_broadcast(&d->work);
  pthread_mutex_unlock(&d->lock);
  compute(&d->replicas[0], loss_scale);
  pthread_mutex_lock(&d->lock);
  while (d->running > 0)
    pthread_cond_wait(&d->done, &d->lock);
  pthread_mutex_unlock(&d->lock);
  double t2 = ddp_now();
  /* gather the losses; reduce the gradients onto replica 0, in order */
  double loss = 0.0;
  for (int i = 0; i < N; i++) {
    loss += d->replicas[i].loss;
    *correct += d->replicas[i].correct;
  }
  for (int i = 1; i < N; i++) {
    const float *g = d->replicas[i].m->grads;
    if (d->replicas[i].rows == 0)
      continue;
    for (size_t j = 0; j < m0->num_elements; j++)
      m0->grads[j] += g[j];
  }
  double t3 = ddp_now();
  s->last.comm_time = (t1 - t0) + (t3 - t2);
  s->last.blocked_time = s->last.comm_time;
  return loss;
}

static void hook_destroy(strategy *s) {
  dp *d = s->impl;
  if (!d)
    return;
  pthread_mutex_lock(&d->lock);
  d->stop = 1;
  pthread_cond_broadcast(&d->work);
  pthread_mutex_unlock(&d->lock);
  for (int i = 1; i < d->devices; i++) {
    if (d->replicas[i].started)
      pthread_join(d->replicas[i].thread, NULL);
    model_free(&d->replicas[i].own);
  }
  pthread_mutex_destroy(&d->lock);
  pthread_cond_destroy(&d->work);
  pthread_cond_destroy(&d->done);
  free(d->replicas);
  free(d);
  s->impl = NULL;
}

xcoll_status strategy_init_dp(strategy *s, model *m, int devices, char *err,
                              size_t err_size) {
  memset(s, 0, sizeof *s);
  s->kind = STRATEGY_DP;
  s->name = "dp";
  s->m = m;
  s->params = m->params;
  s->grads = m->grads;
  s->count = m->num_elements;
  s->current_unit = -1;
  s->replicas = devices;
  units_plan_forward_by_min_params(&s->plan, m, 0);
  dp *d = calloc(1, sizeof *d);
  dp_replica *replicas = calloc((size_t)devices, sizeof *replicas);
  if (!d || !replicas) {
    free(d);
    free(replicas);
    snprintf(err, err_size, "out of memory for %d replicas", devices);
    return XCOLL_ERR_NO_MEMORY;
  }
  d->devices = devices;
  d->replicas = replicas;
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->work, NULL);
  pthread_cond_init(&d->done, NULL);
  s->impl = d;
  s->forward_backward = hook_forward_backward;
  s->destroy = hook_destroy;
  replicas[0].m = m;
  int rows = (m->max_batch + devices - 1) / devices;
  for (int i = 1; i < devices; i++) {
    if (model_create_like(&replicas[i].own, m, rows) != 0) {
      snprintf(err, err_size, "out of memory creating replica %d", i);
      hook_destroy(s);
      return XCOLL_ERR_NO_MEMORY;
    }
    replicas[i].m = &replicas[i].own;
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) {
      snprintf(err, err_size, "out of memory starting replica %d", i);
      hook_destroy(s);
      return XCOLL_ERR_NO_MEMORY;
    }
    wa->d = d;
    wa->index = i;
    if (pthread_create(&replicas[i].thread, NULL, worker, wa) != 0) {
      free(wa);
      snprintf(err, err_size, "cannot start the thread of replica %d", i);
      hook_destroy(s);
      return XCOLL_ERR_SYSTEM;
    }
    replicas[i].started = 1;
  }
  return XCOLL_SUCCESS;
}
