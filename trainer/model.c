/*
 * model.c - the MLP (784-256-256-10, ReLU) and the LeNet-5-like CNN
 * (conv5x5 pad 2 + ReLU + pool, conv5x5 + ReLU + pool, fc 120, fc 84, fc 10)
 * written as sequences of the layers in layers.c over one parameter buffer;
 * the tensor registry and initialisation shared with the gpt (gpt.c).
 */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "layers.h"

enum { MLP_HIDDEN = 256, CNN_FC1 = 120, CNN_FC2 = 84, CNN_K = 5 };

static void add_param_va(model *m, const char *name, param_init init,
                         int fan_in, int ndim, va_list ap) {
  param_view *v = &m->views[m->num_params++];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->ndim = ndim;
  v->numel = 1;
  v->fan_in = fan_in;
  v->init = init;
  for (int i = 0; i < ndim; i++) {
    v->shape[i] = va_arg(ap, int);
    v->numel *= (size_t)v->shape[i];
  }
  v->offset = m->num_elements;
  m->num_elements += v->numel;
}

static void add_param(model *m, const char *name, int fan_in, int ndim, ...) {
  va_list ap;
  va_start(ap, ndim);
  add_param_va(m, name, PARAM_INIT_FAN_IN, fan_in, ndim, ap);
  va_end(ap);
}

int model_add_param(model *m, const char *name, param_init init, int fan_in,
                    int ndim, ...) {
  int index = m->num_params;
  va_list ap;
  va_start(ap, ndim);
  add_param_va(m, name, init, fan_in, ndim, ap);
  va_end(ap);
  return index;
}

static void add_linear(model *m, const char *prefix, int in, int out) {
  char name[32];
  snprintf(name, sizeof name, "%s.weight", prefix);
  add_param(m, name, in, 2, out, in);
  snprintf(name, sizeof name, "%s.bias", prefix);
  add_param(m, name, in, 1, out);
}

static void add_conv(model *m, const char *prefix, int in, int out, int k) {
  char name[32];
  snprintf(name, sizeof name, "%s.weight", prefix);
  add_param(m, name, in * k * k, 4, out, in, k, k);
  snprintf(name, sizeof name, "%s.bias", prefix);
  add_param(m, name, in * k * k, 1, out);
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

int model_create(model *m, model_kind kind, int conv1_channels,
                 int conv2_channels, int max_batch) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->max_batch = max_batch;
  m->sample_inputs = MODEL_IMAGE_PIXELS;
  m->sample_targets = 1;
  size_t B = (size_t)max_batch;
  size_t act_size[12] = {0};
  int num_acts;
  if (kind == MODEL_MLP) {
    add_linear(m, "fc1", MODEL_IMAGE_PIXELS, MLP_HIDDEN);
    add_linear(m, "fc2", MLP_HIDDEN, MLP_HIDDEN);
    add_linear(m, "fc3", MLP_HIDDEN, MODEL_CLASSES);
    num_acts = 3;
    act_size[0] = act_size[1] = B * MLP_HIDDEN;
    act_size[2] = B * MODEL_CLASSES;
  } else {
    int c1 = conv1_channels, c2 = conv2_channels;
    m->conv1_channels = c1;
    m->conv2_channels = c2;
    add_conv(m, "conv1", 1, c1, CNN_K);
    add_conv(m, "conv2", c1, c2, CNN_K);
    add_linear(m, "fc1", c2 * 5 * 5, CNN_FC1);
    add_linear(m, "fc2", CNN_FC1, CNN_FC2);
    add_linear(m, "fc3", CNN_FC2, MODEL_CLASSES);
    num_acts = 7;
    act_size[0] = B * c1 * 28 * 28; /* conv1 + relu */
    act_size[1] = B * c1 * 14 * 14; /* pool1 */
    act_size[2] = B * c2 * 10 * 10; /* conv2 + relu */
    act_size[3] = B * c2 * 5 * 5;   /* pool2 = flattened fc1 input */
    act_size[4] = B * CNN_FC1;
    act_size[5] = B * CNN_FC2;
    act_size[6] = B * MODEL_CLASSES;
    m->pool_argmax[0] = malloc(act_size[1] * sizeof(int));
    m->pool_argmax[1] = malloc(act_size[3] * sizeof(int));
    size_t col = (size_t)c1 * CNN_K * CNN_K * 10 * 10;
    if (col < (size_t)1 * CNN_K * CNN_K * 28 * 28)
      col = (size_t)1 * CNN_K * CNN_K * 28 * 28;
    m->col = malloc(col * sizeof(float));
    m->dcol = malloc(col * sizeof(float));
    if (!m->pool_argmax[0] || !m->pool_argmax[1] || !m->col || !m->dcol) {
      model_free(m);
      return -1;
    }
  }
  for (int i = 0; i < num_acts; i++) {
    m->act[i] = malloc(act_size[i] * sizeof(float));
    m->dact[i] = malloc(act_size[i] * sizeof(float));
    if (!m->act[i] || !m->dact[i]) {
      model_free(m);
      return -1;
    }
  }
  m->probs = malloc(B * MODEL_CLASSES * sizeof(float));
  if (!m->probs || allocate_params(m) != 0) {
    model_free(m);
    return -1;
  }
  return 0;
}

void model_free(model *m) {
  for (int i = 0; i < 12; i++) {
    free(m->act[i]);
    free(m->dact[i]);
  }
  free(m->pool_argmax[0]);
  free(m->pool_argmax[1]);
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

double model_forward(model *m, const float *x, const unsigned char *targets,
                     int B, int *correct) {
  if (m->kind == MODEL_GPT)
    return gpt_forward(m, x, targets, B);
  m->input = x;
  m->targets = targets;
  float **a = m->act;
  float *logits;
  if (m->kind == MODEL_MLP) {
    need(m, 0, MODEL_FORWARD);
    linear_forward(a[0], x, param(m, 0), param(m, 1), B, MODEL_IMAGE_PIXELS,
                   MLP_HIDDEN);
    relu_forward(a[0], a[0], (size_t)B * MLP_HIDDEN);
    need(m, 2, MODEL_FORWARD);
    linear_forward(a[1], a[0], param(m, 2), param(m, 3), B, MLP_HIDDEN,
                   MLP_HIDDEN);
    relu_forward(a[1], a[1], (size_t)B * MLP_HIDDEN);
    need(m, 4, MODEL_FORWARD);
    linear_forward(a[2], a[1], param(m, 4), param(m, 5), B, MLP_HIDDEN,
                   MODEL_CLASSES);
    logits = a[2];
  } else {
    int c1 = m->conv1_channels, c2 = m->conv2_channels;
    need(m, 0, MODEL_FORWARD);
    conv2d_forward(a[0], x, param(m, 0), param(m, 1), m->col, B, 1, 28, 28, c1,
                   CNN_K, 2);
    relu_forward(a[0], a[0], (size_t)B * c1 * 28 * 28);
    maxpool2x2_forward(a[1], m->pool_argmax[0], a[0], B, c1, 28, 28);
    need(m, 2, MODEL_FORWARD);
    conv2d_forward(a[2], a[1], param(m, 2), param(m, 3), m->col, B, c1, 14, 14,
                   c2, CNN_K, 0);
    relu_forward(a[2], a[2], (size_t)B * c2 * 10 * 10);
    maxpool2x2_forward(a[3], m->pool_argmax[1], a[2], B, c2, 10, 10);
    need(m, 4, MODEL_FORWARD);
    linear_forward(a[4], a[3], param(m, 4), param(m, 5), B, c2 * 25, CNN_FC1);
    relu_forward(a[4], a[4], (size_t)B * CNN_FC1);
    need(m, 6, MODEL_FORWARD);
    linear_forward(a[5], a[4], param(m, 6), param(m, 7), B, CNN_FC1, CNN_FC2);
    relu_forward(a[5], a[5], (size_t)B * CNN_FC2);
    need(m, 8, MODEL_FORWARD);
    linear_forward(a[6], a[5], param(m, 8), param(m, 9), B, CNN_FC2,
                   MODEL_CLASSES);
    logits = a[6];
  }
  int hits = 0;
  double loss = softmax_cross_entropy_forward(m->probs, logits, targets, B,
                                              MODEL_CLASSES, &hits);
  if (correct)
    *correct += hits;
  return loss;
}

void model_backward(model *m, int B, float loss_scale) {
  if (m->kind == MODEL_GPT) {
    gpt_backward(m, B, loss_scale);
    return;
  }
  float **a = m->act, **d = m->dact;
  if (m->kind == MODEL_MLP) {
    softmax_cross_entropy_backward(d[2], m->probs, m->targets, B, MODEL_CLASSES,
                                   loss_scale);
    need(m, 4, MODEL_BACKWARD);
    linear_backward(d[1], grad(m, 4), grad(m, 5), d[2], a[1], param(m, 4), B,
                    MLP_HIDDEN, MODEL_CLASSES);
    ready(m, 4);
    relu_backward(d[1], d[1], a[1], (size_t)B * MLP_HIDDEN);
    need(m, 2, MODEL_BACKWARD);
    linear_backward(d[0], grad(m, 2), grad(m, 3), d[1], a[0], param(m, 2), B,
                    MLP_HIDDEN, MLP_HIDDEN);
    ready(m, 2);
    relu_backward(d[0], d[0], a[0], (size_t)B * MLP_HIDDEN);
    need(m, 0, MODEL_BACKWARD);
    linear_backward(NULL, grad(m, 0), grad(m, 1), d[0], m->input, param(m, 0),
                    B, MODEL_IMAGE_PIXELS, MLP_HIDDEN);
    ready(m, 0);
  } else {
    int c1 = m->conv1_channels, c2 = m->conv2_channels;
    softmax_cross_entropy_backward(d[6], m->probs, m->targets, B, MODEL_CLASSES,
                                   loss_scale);
    need(m, 8, MODEL_BACKWARD);
    linear_backward(d[5], grad(m, 8), grad(m, 9), d[6], a[5], param(m, 8), B,
                    CNN_FC2, MODEL_CLASSES);
    ready(m, 8);
    relu_backward(d[5], d[5], a[5], (size_t)B * CNN_FC2);
    need(m, 6, MODEL_BACKWARD);
    linear_backward(d[4], grad(m, 6), grad(m, 7), d[5], a[4], param(m, 6), B,
                    CNN_FC1, CNN_FC2);
    ready(m, 6);
    relu_backward(d[4], d[4], a[4], (size_t)B * CNN_FC1);
    need(m, 4, MODEL_BACKWARD);
    linear_backward(d[3], grad(m, 4), grad(m, 5), d[4], a[3], param(m, 4), B,
                    c2 * 25, CNN_FC1);
    ready(m, 4);
    maxpool2x2_backward(d[2], d[3], m->pool_argmax[1], B, c2, 10, 10);
    relu_backward(d[2], d[2], a[2], (size_t)B * c2 * 10 * 10);
    need(m, 2, MODEL_BACKWARD);
    conv2d_backward(d[1], grad(m, 2), grad(m, 3), d[2], a[1], param(m, 2),
                    m->col, m->dcol, B, c1, 14, 14, c2, CNN_K, 0);
    ready(m, 2);
    maxpool2x2_backward(d[0], d[1], m->pool_argmax[0], B, c1, 28, 28);
    relu_backward(d[0], d[0], a[0], (size_t)B * c1 * 28 * 28);
    need(m, 0, MODEL_BACKWARD);
    conv2d_backward(NULL, grad(m, 0), grad(m, 1), d[0], m->input, param(m, 0),
                    m->col, m->dcol, B, 1, 28, 28, c1, CNN_K, 2);
    ready(m, 0);
  }
}
