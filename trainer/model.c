/*
 * model.c - the MLP (784-256-256-10, ReLU) and the LeNet-5-like CNN
 * (conv5x5 pad 2 + ReLU + pool, conv5x5 + ReLU + pool, fc 120, fc 84, fc 10)
 * written as sequences of the layers in layers.c over one parameter buffer;
 * their parameters' initialisation; model_create_gpt and the dispatch to
 * gpt.c for --model gpt. Tensors are registered through tensors.c.
 */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "layers.h"
#include "tensors.h"

enum { MLP_HIDDEN = 256, CNN_FC1 = 120, CNN_FC2 = 84, CNN_K = 5 };

static int add_param(model *m, const char *name, int fan_in, int ndim, ...) {
  int index = m->num_params;
  va_list ap;
  va_start(ap, ndim);
  model_add_param_va(m, name, PARAM_INIT_FAN_IN, fan_in, ndim, ap);
  va_end(ap);
  return index;
}

/* Registers prefix.weight (out, in) and prefix.bias (out). */
static void add_linear(model *m, const char *prefix, int in, int out,
                       int *weight, int *bias) {
  char name[32];
  snprintf(name, sizeof name, "%s.weight", prefix);
  *weight = add_param(m, name, in, 2, out, in);
  snprintf(name, sizeof name, "%s.bias", prefix);
  *bias = add_param(m, name, in, 1, out);
}

/* Registers prefix.weight (out, in, k, k) and prefix.bias (out). */
static void add_conv(model *m, const char *prefix, int in, int out, int k,
                     int *weight, int *bias) {
  char name[32];
  snprintf(name, sizeof name, "%s.weight", prefix);
  *weight = add_param(m, name, in * k * k, 4, out, in, k, k);
  snprintf(name, sizeof name, "%s.bias", prefix);
  *bias = add_param(m, name, in * k * k, 1, out);
}

int model_kind_parse(const char *name) {
  if (strcmp(name, "mlp") == 0)
    return MODEL_MLP;
  if (strcmp(name, "cnn") == 0)
    return MODEL_CNN;
  if (strcmp(name, "gpt") == 0)
    return MODEL_GPT;
  return -1;
}

const char *model_kind_name(model_kind kind) {
  if (kind == MODEL_GPT)
    return "gpt";
  return kind == MODEL_CNN ? "cnn" : "mlp";
}

/* params, grads and the per-tensor pointers, once the tensors are
 * registered. */
static int allocate_params(model *m) {
  m->params = calloc(m->num_elements, sizeof(float));
  m->grads = calloc(m->num_elements, sizeof(float));
  if (!m->params || !m->grads)
    return -1;
  for (int i = 0; i < m->num_params; i++) {
    m->tensor_params[i] = m->params + m->views[i].offset;
    m->tensor_grads[i] = m->grads + m->views[i].offset;
  }
  return 0;
}

int model_create_gpt(model *m, const gpt_config *cfg, int max_batch) {
  memset(m, 0, sizeof *m);
  m->kind = MODEL_GPT;
  m->max_batch = max_batch;
  m->gpt = *cfg;
  m->sample_inputs = cfg->context;
  m->sample_targets = cfg->context;
  gpt_register_params(m);
  if (gpt_allocate_activations(m) != 0 || allocate_params(m) != 0) {
    model_free(m);
    return -1;
  }
  return 0;
}

int model_create_like(model *m, const model *src, int max_batch) {
  if (src->kind == MODEL_GPT)
    return model_create_gpt(m, &src->gpt, max_batch);
  return model_create(m, src->kind, src->conv1_channels, src->conv2_channels,
                      max_batch);
}

/* malloc'd arrays of floats (or ints) for model_free to release; NULL on
 * failure, which model_create checks once at the end. */
static float *floats(size_t n) { return malloc(n * sizeof(float)); }

static void create_mlp(model *m, size_t B) {
  mlp_params *p = &m->mlp_index;
  add_linear(m, "fc1", MODEL_IMAGE_PIXELS, MLP_HIDDEN, &p->fc1_weight,
             &p->fc1_bias);
  add_linear(m, "fc2", MLP_HIDDEN, MLP_HIDDEN, &p->fc2_weight, &p->fc2_bias);
  add_linear(m, "fc3", MLP_HIDDEN, MODEL_CLASSES, &p->fc3_weight,
             &p->fc3_bias);
  mlp_activations *acts[2] = {&m->mlp_act, &m->mlp_grad};
  for (int i = 0; i < 2; i++) {
    acts[i]->fc1 = floats(B * MLP_HIDDEN);
    acts[i]->fc2 = floats(B * MLP_HIDDEN);
    acts[i]->logits = floats(B * MODEL_CLASSES);
  }
}

static int mlp_allocated(const mlp_activations *a) {
  return a->fc1 && a->fc2 && a->logits;
}

static void create_cnn(model *m, size_t B, int c1, int c2) {
  cnn_params *p = &m->cnn_index;
  m->conv1_channels = c1;
  m->conv2_channels = c2;
  add_conv(m, "conv1", 1, c1, CNN_K, &p->conv1_weight, &p->conv1_bias);
  add_conv(m, "conv2", c1, c2, CNN_K, &p->conv2_weight, &p->conv2_bias);
  add_linear(m, "fc1", c2 * 5 * 5, CNN_FC1, &p->fc1_weight, &p->fc1_bias);
  add_linear(m, "fc2", CNN_FC1, CNN_FC2, &p->fc2_weight, &p->fc2_bias);
  add_linear(m, "fc3", CNN_FC2, MODEL_CLASSES, &p->fc3_weight, &p->fc3_bias);
  cnn_activations *acts[2] = {&m->cnn_act, &m->cnn_grad};
  for (int i = 0; i < 2; i++) {
    acts[i]->conv1 = floats(B * c1 * 28 * 28);
    acts[i]->pool1 = floats(B * c1 * 14 * 14);
    acts[i]->conv2 = floats(B * c2 * 10 * 10);
    acts[i]->pool2 = floats(B * c2 * 5 * 5);
    acts[i]->fc1 = floats(B * CNN_FC1);
    acts[i]->fc2 = floats(B * CNN_FC2);
    acts[i]->logits = floats(B * MODEL_CLASSES);
  }
  m->pool1_argmax = malloc(B * c1 * 14 * 14 * sizeof(int));
  m->pool2_argmax = malloc(B * c2 * 5 * 5 * sizeof(int));
  size_t col = conv2d_scratch(c1, 14, 14, CNN_K, 0);
  if (col < conv2d_scratch(1, 28, 28, CNN_K, 2))
    col = conv2d_scratch(1, 28, 28, CNN_K, 2);
  m->col = floats(col);
  m->dcol = floats(col);
}

static int cnn_allocated(const model *m, const cnn_activations *a) {
  return a->conv1 && a->pool1 && a->conv2 && a->pool2 && a->fc1 && a->fc2 &&
         a->logits && m->pool1_argmax && m->pool2_argmax && m->col && m->dcol;
}

int model_create(model *m, model_kind kind, int conv1_channels,
                 int conv2_channels, int max_batch) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->max_batch = max_batch;
  m->sample_inputs = MODEL_IMAGE_PIXELS;
  m->sample_targets = 1;
  size_t B = (size_t)max_batch;
  int ok;
  if (kind == MODEL_MLP) {
    create_mlp(m, B);
    ok = mlp_allocated(&m->mlp_act) && mlp_allocated(&m->mlp_grad);
  } else {
    create_cnn(m, B, conv1_channels, conv2_channels);
    ok = cnn_allocated(m, &m->cnn_act) && cnn_allocated(m, &m->cnn_grad);
  }
  m->probs = floats(B * MODEL_CLASSES);
  if (!ok || !m->probs || allocate_params(m) != 0) {
    model_free(m);
    return -1;
  }
  return 0;
}

void model_free(model *m) {
  mlp_activations *mlp[2] = {&m->mlp_act, &m->mlp_grad};
  cnn_activations *cnn[2] = {&m->cnn_act, &m->cnn_grad};
  for (int i = 0; i < 2; i++) {
    free(mlp[i]->fc1);
    free(mlp[i]->fc2);
    free(mlp[i]->logits);
    free(cnn[i]->conv1);
    free(cnn[i]->pool1);
    free(cnn[i]->conv2);
    free(cnn[i]->pool2);
    free(cnn[i]->fc1);
    free(cnn[i]->fc2);
    free(cnn[i]->logits);
  }
  free(m->pool1_argmax);
  free(m->pool2_argmax);
  free(m->col);
  free(m->dcol);
  free(m->probs);
  free(m->params);
  free(m->grads);
  gpt_free_activations(m);
  memset(m, 0, sizeof *m);
}

void model_init_params(model *m, rng *r) {
  for (int i = 0; i < m->num_params; i++) {
    const param_view *v = &m->views[i];
    float *p = m->params + v->offset;
    if (v->init == PARAM_INIT_ONES || v->init == PARAM_INIT_ZEROS) {
      for (size_t j = 0; j < v->numel; j++)
        p[j] = v->init == PARAM_INIT_ONES ? 1.0f : 0.0f;
    } else if (v->init == PARAM_INIT_NORMAL) {
      /* Box-Muller; 1 - u is in (0, 1], so the logarithm is finite. */
      for (size_t j = 0; j < v->numel; j++) {
        float u1 = 1.0f - rng_uniform(r), u2 = rng_uniform(r);
        p[j] = 0.02f * sqrtf(-2.0f * logf(u1)) *
               cosf(6.2831853071795864f * u2);
      }
    } else {
      float bound = 1.0f / sqrtf((float)v->fan_in);
      for (size_t j = 0; j < v->numel; j++)
        p[j] = (2.0f * rng_uniform(r) - 1.0f) * bound;
    }
  }
}

void model_zero_grad(model *m) {
  memset(m->grads, 0, m->num_elements * sizeof(float));
}

static float *param(model *m, int i) { return m->tensor_params[i]; }
static float *grad(model *m, int i) { return m->tensor_grads[i]; }

/* Before the forward or backward of the layer whose first tensor is
 * weight_index. */
static void need(model *m, int weight_index, model_pass pass) {
  if (m->param_needed)
    m->param_needed(m->param_needed_ctx, weight_index, pass);
}

static void ready(model *m, int weight_index) {
  /* bias is registered after weight; it is reported first because it
   * comes later in the reverse order buckets are filled in. */
  if (m->grad_ready) {
    m->grad_ready(m->grad_ready_ctx, weight_index + 1);
    m->grad_ready(m->grad_ready_ctx, weight_index);
  }
}

static void mlp_forward(model *m, const float *x, int B) {
  const mlp_params *p = &m->mlp_index;
  mlp_activations *a = &m->mlp_act;
  need(m, p->fc1_weight, MODEL_FORWARD);
  linear_forward(a->fc1, x, param(m, p->fc1_weight), param(m, p->fc1_bias), B,
                 MODEL_IMAGE_PIXELS, MLP_HIDDEN);
  relu_forward(a->fc1, a->fc1, (size_t)B * MLP_HIDDEN);
  need(m, p->fc2_weight, MODEL_FORWARD);
  linear_forward(a->fc2, a->fc1, param(m, p->fc2_weight),
                 param(m, p->fc2_bias), B, MLP_HIDDEN, MLP_HIDDEN);
  relu_forward(a->fc2, a->fc2, (size_t)B * MLP_HIDDEN);
  need(m, p->fc3_weight, MODEL_FORWARD);
  linear_forward(a->logits, a->fc2, param(m, p->fc3_weight),
                 param(m, p->fc3_bias), B, MLP_HIDDEN, MODEL_CLASSES);
}

static void cnn_forward(model *m, const float *x, int B) {
  const cnn_params *p = &m->cnn_index;
  cnn_activations *a = &m->cnn_act;
  int c1 = m->conv1_channels, c2 = m->conv2_channels;
  need(m, p->conv1_weight, MODEL_FORWARD);
  conv2d_forward(a->conv1, x, param(m, p->conv1_weight),
                 param(m, p->conv1_bias), m->col, B, 1, 28, 28, c1, CNN_K, 2);
  /* relu(maxpool(x)) == maxpool(relu(x)), value for value (relu is
   * monotone), and where they pick different window elements both
   * gradients are zero; pooling first runs the relu on a quarter of the
   * values. */
  maxpool2x2_forward(a->pool1, m->pool1_argmax, a->conv1, B, c1, 28, 28);
  relu_forward(a->pool1, a->pool1, (size_t)B * c1 * 14 * 14);
  need(m, p->conv2_weight, MODEL_FORWARD);
  conv2d_forward(a->conv2, a->pool1, param(m, p->conv2_weight),
                 param(m, p->conv2_bias), m->col, B, c1, 14, 14, c2, CNN_K, 0);
  maxpool2x2_forward(a->pool2, m->pool2_argmax, a->conv2, B, c2, 10, 10);
  relu_forward(a->pool2, a->pool2, (size_t)B * c2 * 5 * 5);
  need(m, p->fc1_weight, MODEL_FORWARD);
  linear_forward(a->fc1, a->pool2, param(m, p->fc1_weight),
                 param(m, p->fc1_bias), B, c2 * 25, CNN_FC1);
  relu_forward(a->fc1, a->fc1, (size_t)B * CNN_FC1);
  need(m, p->fc2_weight, MODEL_FORWARD);
  linear_forward(a->fc2, a->fc1, param(m, p->fc2_weight),
                 param(m, p->fc2_bias), B, CNN_FC1, CNN_FC2);
  relu_forward(a->fc2, a->fc2, (size_t)B * CNN_FC2);
  need(m, p->fc3_weight, MODEL_FORWARD);
  linear_forward(a->logits, a->fc2, param(m, p->fc3_weight),
                 param(m, p->fc3_bias), B, CNN_FC2, MODEL_CLASSES);
}

double model_forward(model *m, const float *x, const unsigned char *targets,
                     int B, int *correct) {
  if (m->kind == MODEL_GPT)
    return gpt_forward(m, x, targets, B);
  m->input = x;
  m->targets = targets;
  const float *logits;
  if (m->kind == MODEL_MLP) {
    mlp_forward(m, x, B);
    logits = m->mlp_act.logits;
  } else {
    cnn_forward(m, x, B);
    logits = m->cnn_act.logits;
  }
  int hits = 0;
  double loss = softmax_cross_entropy_forward(m->probs, logits, targets, B,
                                              MODEL_CLASSES, &hits);
  if (correct)
    *correct += hits;
  return loss;
}

static void mlp_backward(model *m, int B, float loss_scale) {
  const mlp_params *p = &m->mlp_index;
  const mlp_activations *a = &m->mlp_act;
  mlp_activations *d = &m->mlp_grad;
  softmax_cross_entropy_backward(d->logits, m->probs, m->targets, B,
                                 MODEL_CLASSES, loss_scale);
  need(m, p->fc3_weight, MODEL_BACKWARD);
  linear_backward(d->fc2, grad(m, p->fc3_weight), grad(m, p->fc3_bias),
                  d->logits, a->fc2, param(m, p->fc3_weight), B, MLP_HIDDEN,
                  MODEL_CLASSES);
  ready(m, p->fc3_weight);
  relu_backward(d->fc2, d->fc2, a->fc2, (size_t)B * MLP_HIDDEN);
  need(m, p->fc2_weight, MODEL_BACKWARD);
  linear_backward(d->fc1, grad(m, p->fc2_weight), grad(m, p->fc2_bias), d->fc2,
                  a->fc1, param(m, p->fc2_weight), B, MLP_HIDDEN, MLP_HIDDEN);
  ready(m, p->fc2_weight);
  relu_backward(d->fc1, d->fc1, a->fc1, (size_t)B * MLP_HIDDEN);
  need(m, p->fc1_weight, MODEL_BACKWARD);
  linear_backward(NULL, grad(m, p->fc1_weight), grad(m, p->fc1_bias), d->fc1,
                  m->input, param(m, p->fc1_weight), B, MODEL_IMAGE_PIXELS,
                  MLP_HIDDEN);
  ready(m, p->fc1_weight);
}

static void cnn_backward(model *m, int B, float loss_scale) {
  const cnn_params *p = &m->cnn_index;
  const cnn_activations *a = &m->cnn_act;
  cnn_activations *d = &m->cnn_grad;
  int c1 = m->conv1_channels, c2 = m->conv2_channels;
  softmax_cross_entropy_backward(d->logits, m->probs, m->targets, B,
                                 MODEL_CLASSES, loss_scale);
  need(m, p->fc3_weight, MODEL_BACKWARD);
  linear_backward(d->fc2, grad(m, p->fc3_weight), grad(m, p->fc3_bias),
                  d->logits, a->fc2, param(m, p->fc3_weight), B, CNN_FC2,
                  MODEL_CLASSES);
  ready(m, p->fc3_weight);
  relu_backward(d->fc2, d->fc2, a->fc2, (size_t)B * CNN_FC2);
  need(m, p->fc2_weight, MODEL_BACKWARD);
  linear_backward(d->fc1, grad(m, p->fc2_weight), grad(m, p->fc2_bias), d->fc2,
                  a->fc1, param(m, p->fc2_weight), B, CNN_FC1, CNN_FC2);
  ready(m, p->fc2_weight);
  relu_backward(d->fc1, d->fc1, a->fc1, (size_t)B * CNN_FC1);
  need(m, p->fc1_weight, MODEL_BACKWARD);
  linear_backward(d->pool2, grad(m, p->fc1_weight), grad(m, p->fc1_bias),
                  d->fc1, a->pool2, param(m, p->fc1_weight), B, c2 * 25,
                  CNN_FC1);
  ready(m, p->fc1_weight);
  relu_backward(d->pool2, d->pool2, a->pool2, (size_t)B * c2 * 5 * 5);
  maxpool2x2_backward(d->conv2, d->pool2, m->pool2_argmax, B, c2, 10, 10);
  need(m, p->conv2_weight, MODEL_BACKWARD);
  conv2d_backward(d->pool1, grad(m, p->conv2_weight), grad(m, p->conv2_bias),
                  d->conv2, a->pool1, param(m, p->conv2_weight), m->col,
                  m->dcol, B, c1, 14, 14, c2, CNN_K, 0);
  ready(m, p->conv2_weight);
  relu_backward(d->pool1, d->pool1, a->pool1, (size_t)B * c1 * 14 * 14);
  maxpool2x2_backward(d->conv1, d->pool1, m->pool1_argmax, B, c1, 28, 28);
  need(m, p->conv1_weight, MODEL_BACKWARD);
  conv2d_backward(NULL, grad(m, p->conv1_weight), grad(m, p->conv1_bias),
                  d->conv1, m->input, param(m, p->conv1_weight), m->col,
                  m->dcol, B, 1, 28, 28, c1, CNN_K, 2);
  ready(m, p->conv1_weight);
}

void model_backward(model *m, int B, float loss_scale) {
  if (m->kind == MODEL_GPT)
    gpt_backward(m, B, loss_scale);
  else if (m->kind == MODEL_MLP)
    mlp_backward(m, B, loss_scale);
  else
    cnn_backward(m, B, loss_scale);
}
