/*
 * optim.h - optimizers over the flat parameter buffer, with PyTorch's
 * update rules (torch.optim.SGD and torch.optim.AdamW), a learning-rate
 * schedule, and gradient clipping by global norm.
 */
#ifndef XTRAIN_OPTIM_H
#define XTRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum optim_kind { OPTIM_SGD = 0, OPTIM_ADAMW = 1 } optim_kind;
typedef enum schedule_kind { SCHEDULE_CONSTANT = 0, SCHEDULE_COSINE = 1 } schedule_kind;

typedef struct optimizer {
  optim_kind kind;
  float lr;           /* base learning rate */
  float momentum;     /* SGD */
  float weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
  int nesterov;       /* SGD */
  float beta1, beta2, eps; /* AdamW: 0.9, 0.999, 1e-8 like PyTorch */
  size_t n;           /* elements in params, grads and each state buffer */
  int64_t step;       /* updates done so far */
  /* SGD: state[0] is the momentum buffer. AdamW: state[0] is exp_avg (m),
   * state[1] exp_avg_sq (v). Same layout as the parameter buffer. */
  float *state[2];
  int num_state;
} optimizer;

/* Allocate state for n parameters (zeros). Returns 0 or -1 (no memory). */
int optim_create(optimizer *o, optim_kind kind, size_t n, float lr,
                 float momentum, float weight_decay, int nesterov);
void optim_free(optimizer *o);

/* One update of params (n) from grads (n) at learning rate lr.
 * SGD (PyTorch, dampening 0): g = grad + wd*p; buf = g at the first step,
 * else buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf;
 * p -= lr*g.
 * AdamW (Loshchilov & Hutter 2019, PyTorch): p *= 1 - lr*wd;
 * m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
void optim_step(optimizer *o, float *params, const float *grads, float lr);

/* Learning rate for update number step (0-based) out of total_steps:
 * constant, or linear warmup from lr/warmup to lr over warmup_steps followed
 * by half a cosine down to 0 at total_steps. */
float schedule_lr(schedule_kind kind, float base_lr, int64_t step,
                  int64_t warmup_steps, int64_t total_steps);

/* Global L2 norm of grads (n); when max_norm > 0 and the norm exceeds it,
 * scale grads by max_norm / (norm + 1e-6) as torch.nn.utils.clip_grad_norm_
 * does. Returns the norm before clipping. */
double clip_grad_norm(float *grads, size_t n, double max_norm);

#endif /* XTRAIN_OPTIM_H */
