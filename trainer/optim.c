/* optim.c - SGD, AdamW, schedules and clipping (see optim.h). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int optim_create(optimizer *o, optim_kind kind, size_t n, float lr,
                 float momentum, float weight_decay, int nesterov) {
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->lr = lr;
  o->momentum = momentum;
  o->weight_decay = weight_decay;
  o->nesterov = nesterov;
  o->beta1 = 0.9f;
  o->beta2 = 0.999f;
  o->eps = 1e-8f;
  o->n = n;
  o->num_state = kind == OPTIM_ADAMW ? 2 : (momentum != 0.0f ? 1 : 0);
  for (int i = 0; i < o->num_state; i++) {
    o->state[i] = calloc(n ? n : 1, sizeof(float));
    if (!o->state[i]) {
      optim_free(o);
      return -1;
    }
  }
  return 0;
}

void optim_free(optimizer *o) {
  free(o->state[0]);
  free(o->state[1]);
  o->state[0] = o->state[1] = NULL;
}

static void sgd_step(optimizer *o, float *p, const float *grads, float lr) {
  float mu = o->momentum, wd = o->weight_decay;
  float *buf = o->state[0];
  for (size_t i = 0; i < o->n; i++) {
    float g = grads[i] + wd * p[i];
    if (buf) {
      buf[i] = o->step == 0 ? g : mu * buf[i] + g;
      g = o->nesterov ? g + mu * buf[i] : buf[i];
    }
    p[i] -= lr * g;
  }
}

static void adamw_step(optimizer *o, float *p, const float *grads, float lr) {
  float b1 = o->beta1, b2 = o->beta2;
  double t = (double)(o->step + 1);
  float bias1 = (float)(1.0 - pow(b1, t));
  float bias2_sqrt = (float)sqrt(1.0 - pow(b2, t));
  float step_size = lr / bias1;
  float decay = 1.0f - lr * o->weight_decay;
  float *m = o->state[0], *v = o->state[1];
  /* In locals: stores through p could alias o's fields, which would keep
   * the loop from vectorising. */
  float eps = o->eps;
  size_t n = o->n;
  for (size_t i = 0; i < n; i++) {
    float g = grads[i];
    p[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    float denom = sqrtf(v[i]) / bias2_sqrt + eps;
    p[i] -= step_size * m[i] / denom;
  }
}

void optim_step(optimizer *o, float *params, const float *grads, float lr) {
  if (o->kind == OPTIM_ADAMW)
    adamw_step(o, params, grads, lr);
  else
    sgd_step(o, params, grads, lr);
  o->step++;
}

float schedule_lr(schedule_kind kind, float base_lr, int64_t step,
                  int64_t warmup_steps, int64_t total_steps) {
  if (kind == SCHEDULE_CONSTANT)
    return base_lr;
  if (step < warmup_steps)
    return base_lr * (float)(step + 1) / (float)warmup_steps;
  int64_t span = total_steps - warmup_steps;
  if (span <= 0)
    return base_lr;
  double progress = (double)(step - warmup_steps) / (double)span;
  if (progress > 1.0)
    progress = 1.0;
  return (float)(base_lr * 0.5 * (1.0 + cos(M_PI * progress)));
}

double clip_grad_norm(float *grads, size_t n, double max_norm) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++)
    sum += (double)grads[i] * grads[i];
  double norm = sqrt(sum);
  if (max_norm > 0.0 && norm > max_norm) {
    float scale = (float)(max_norm / (norm + 1e-6));
    for (size_t i = 0; i < n; i++)
      grads[i] *= scale;
  }
  return norm;
}
