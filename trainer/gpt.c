/*
 * gpt.c - the transformer of gpt.h as a sequence of the layers in
 * gpt_layers.c and layers.c, with named parameter indices (gpt.h's
 * gpt_params) and named activations (below), in the manner of llm.c's
 * ParameterTensors / ActivationTensors.
 */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_layers.h"
#include "layers.h"
#include "model.h"
#include "profile.h"
#include "tensors.h"

/* One block's forward activations, B = max_batch, T = context,
 * C = d_model, NH = n_head. */
typedef struct gpt_block_activations {
  float *ln1;            /* (B, T, C) */
  float *ln1_mean;       /* (B, T) */
  float *ln1_rstd;       /* (B, T) */
  float *qkvr;           /* (3, B, NH, T, hs) q, k, v by (sequence, head) */
  float *att;            /* (B, NH, T, T) attention probabilities */
  float *attn_out;       /* (B, T, C) heads concatenated */
  float *attn_proj;      /* (B, T, C) */
  float *residual_mid;   /* (B, T, C) input + attn_proj */
  float *ln2;            /* (B, T, C) */
  float *ln2_mean;       /* (B, T) */
  float *ln2_rstd;       /* (B, T) */
  float *fc;             /* (B, T, 4C) */
  float *fc_gelu;        /* (B, T, 4C) */
  float *fc_proj;        /* (B, T, C) */
  float *residual_out;   /* (B, T, C) residual_mid + fc_proj */
} gpt_block_activations;

struct gpt_activations {
  int *tokens;                 /* (B, T) x as integers */
  const unsigned char *targets; /* (B, T) of the last forward */
  float *embedded;             /* (B, T, C) wte[token] + wpe[t] */
  gpt_block_activations blocks[GPT_MAX_LAYERS];
  float *ln_f;                 /* (B, T, C) */
  float *ln_f_mean;            /* (B, T) */
  float *ln_f_rstd;            /* (B, T) */
  float *logits;               /* (B, T, V) */
  float *probs;                /* (B, T, V) */
  /* Forward scratch, reused by every block. */
  float *qkv;                  /* (B, T, 3C) the qkv projection */
  float *attn_yr;              /* (B, NH, T, hs) attention's output by head */
  /* Backward scratch, reused by every block. */
  float *dresidual;            /* (B, T, C) gradient of the residual stream,
                                  updated in place from block to block */
  float *dln;                  /* (B, T, C) gradient of a LayerNorm output */
  float *dattn_out;            /* (B, T, C) */
  float *dqkv;                 /* (B, T, 3C) */
  float *dqkvr;                /* (3, B, NH, T, hs) attention_backward's */
  float *datt;                 /* (B, NH, T, T) scratch */
  float *dfc;                  /* (B, T, 4C) */
  float *dlogits;              /* (B, T, V) */
  /* Every array above, for gpt_free_activations. */
  void *owned[32 + 16 * GPT_MAX_LAYERS];
  int num_owned;
};

/* ---- tensors ---- */

static int add(model *m, param_init init, int fan_in, const char *prefix,
               const char *name, int ndim, int d0, int d1) {
  char full[64]; /* param_view.name keeps 31 bytes: "h19.attn.proj.weight" fits */
  snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", name);
  if (ndim == 1)
    return model_add_param(m, full, init, fan_in, 1, d0);
  return model_add_param(m, full, init, fan_in, 2, d0, d1);
}

void gpt_register_params(model *m) {
  const gpt_config *g = &m->gpt;
  gpt_params *p = &m->gpt_index;
  int C = g->d_model, V = MODEL_GPT_VOCAB;
  p->wte = add(m, PARAM_INIT_NORMAL, C, "", "wte", 2, V, C);
  p->wpe = add(m, PARAM_INIT_NORMAL, C, "", "wpe", 2, g->context, C);
  for (int l = 0; l < g->n_layer; l++) {
    gpt_block_params *b = &p->blocks[l];
    char h[16];
    snprintf(h, sizeof h, "h%d", l);
    b->ln1_weight = add(m, PARAM_INIT_ONES, C, h, "ln1.weight", 1, C, 0);
    b->ln1_bias = add(m, PARAM_INIT_ZEROS, C, h, "ln1.bias", 1, C, 0);
    b->qkv_weight = add(m, PARAM_INIT_FAN_IN, C, h, "attn.qkv.weight", 2,
                        3 * C, C);
    b->qkv_bias = add(m, PARAM_INIT_FAN_IN, C, h, "attn.qkv.bias", 1, 3 * C, 0);
    b->attn_proj_weight =
        add(m, PARAM_INIT_FAN_IN, C, h, "attn.proj.weight", 2, C, C);
    b->attn_proj_bias = add(m, PARAM_INIT_FAN_IN, C, h, "attn.proj.bias", 1, C, 0);
    b->ln2_weight = add(m, PARAM_INIT_ONES, C, h, "ln2.weight", 1, C, 0);
    b->ln2_bias = add(m, PARAM_INIT_ZEROS, C, h, "ln2.bias", 1, C, 0);
    b->fc_weight = add(m, PARAM_INIT_FAN_IN, C, h, "mlp.fc.weight", 2, 4 * C, C);
    b->fc_bias = add(m, PARAM_INIT_FAN_IN, C, h, "mlp.fc.bias", 1, 4 * C, 0);
    b->fc_proj_weight =
        add(m, PARAM_INIT_FAN_IN, 4 * C, h, "mlp.proj.weight", 2, C, 4 * C);
    b->fc_proj_bias = add(m, PARAM_INIT_FAN_IN, 4 * C, h, "mlp.proj.bias", 1, C, 0);
  }
  p->ln_f_weight = add(m, PARAM_INIT_ONES, C, "", "ln_f.weight", 1, C, 0);
  p->ln_f_bias = add(m, PARAM_INIT_ZEROS, C, "", "ln_f.bias", 1, C, 0);
  p->lm_head = add(m, PARAM_INIT_FAN_IN, C, "", "lm_head.weight", 2, V, C);
}

/* ---- activations ---- */

static void *own(struct gpt_activations *a, size_t count, size_t size) {
  void *p = calloc(count, size);
  if (p)
    a->owned[a->num_owned++] = p;
  return p;
}

int gpt_allocate_activations(model *m) {
  const gpt_config *g = &m->gpt;
  struct gpt_activations *a = calloc(1, sizeof *a);
  if (!a)
    return -1;
  m->gpt_acts = a;
  size_t BT = (size_t)m->max_batch * g->context, C = (size_t)g->d_model;
  size_t V = MODEL_GPT_VOCAB, TT = (size_t)g->context * g->context;
  size_t f = sizeof(float);
  a->tokens = own(a, BT, sizeof(int));
  a->embedded = own(a, BT * C, f);
  int ok = a->tokens && a->embedded;
  for (int l = 0; l < g->n_layer; l++) {
    gpt_block_activations *b = &a->blocks[l];
    float **arrays[] = {&b->ln1, &b->qkvr, &b->att, &b->attn_out,
                        &b->attn_proj, &b->residual_mid, &b->ln2, &b->fc,
                        &b->fc_gelu, &b->fc_proj, &b->residual_out,
                        &b->ln1_mean, &b->ln1_rstd, &b->ln2_mean,
                        &b->ln2_rstd};
    size_t sizes[] = {BT * C, BT * 3 * C, (size_t)m->max_batch * g->n_head * TT,
                      BT * C, BT * C, BT * C, BT * C, BT * 4 * C, BT * 4 * C,
                      BT * C, BT * C, BT, BT, BT, BT};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      *arrays[i] = own(a, sizes[i], f);
      ok = ok && *arrays[i];
    }
  }
  size_t BHTT = (size_t)m->max_batch * g->n_head * TT;
  float **arrays[] = {&a->qkv, &a->attn_yr, &a->ln_f, &a->ln_f_mean,
                      &a->ln_f_rstd, &a->logits, &a->probs, &a->dresidual,
                      &a->dln, &a->dattn_out, &a->dqkv, &a->dqkvr, &a->datt,
                      &a->dfc, &a->dlogits};
  size_t sizes[] = {BT * 3 * C, BT * C, BT * C, BT, BT, BT * V, BT * V,
                    BT * C, BT * C, BT * C, BT * 3 * C, BT * 3 * C, BHTT,
                    BT * 4 * C, BT * V};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    *arrays[i] = own(a, sizes[i], f);
    ok = ok && *arrays[i];
  }
  return ok ? 0 : -1;
}

void gpt_free_activations(model *m) {
  struct gpt_activations *a = m->gpt_acts;
  if (!a)
    return;
  for (int i = 0; i < a->num_owned; i++)
    free(a->owned[i]);
  free(a);
  m->gpt_acts = NULL;
}

/* ---- forward and backward ---- */

static float *param(model *m, int i) { return m->tensor_params[i]; }
static float *grad(model *m, int i) { return m->tensor_grads[i]; }

/* --profile: charge the time since the previous lap to part. */
static void lap(model *m, profile_part part) {
  if (m->profile)
    profile_lap(m->profile, part);
}

/* Before the forward or backward of the layer whose first tensor is
 * first_index (model.h's param_needed). */
static void need(model *m, int first_index, model_pass pass) {
  if (m->param_needed)
    m->param_needed(m->param_needed_ctx, first_index, pass);
  lap(m, PROFILE_HOOKS);
}

/* Tensors first..last have their final gradient; reported last first, the
 * reverse registration order DDP fills its buckets in. */
static void ready(model *m, int first, int last) {
  if (m->grad_ready)
    for (int i = last; i >= first; i--)
      m->grad_ready(m->grad_ready_ctx, i);
  lap(m, PROFILE_HOOKS);
}

/* Input of block l (B, T, C): the embeddings or the previous block's. */
static float *block_input(struct gpt_activations *a, int l) {
  return l == 0 ? a->embedded : a->blocks[l - 1].residual_out;
}

static void block_forward(model *m, int l, int B) {
  const gpt_config *g = &m->gpt;
  const gpt_block_params *p = &m->gpt_index.blocks[l];
  struct gpt_activations *a = m->gpt_acts;
  gpt_block_activations *b = &a->blocks[l];
  int T = g->context, C = g->d_model, BT = B * T;
  size_t N = (size_t)BT * C;
  const float *x = block_input(a, l);
  layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, x, param(m, p->ln1_weight),
                    param(m, p->ln1_bias), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  linear_forward(a->qkv, b->ln1, param(m, p->qkv_weight), param(m, p->qkv_bias),
                 BT, C, 3 * C);
  lap(m, PROFILE_MATMUL);
  attention_forward(b->attn_out, b->qkvr, b->att, a->attn_yr, a->qkv, B, T, C,
                    g->n_head);
  lap(m, PROFILE_ATTENTION);
  linear_forward(b->attn_proj, b->attn_out, param(m, p->attn_proj_weight),
                 param(m, p->attn_proj_bias), BT, C, C);
  lap(m, PROFILE_MATMUL);
  residual_forward(b->residual_mid, x, b->attn_proj, N);
  layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->residual_mid,
                    param(m, p->ln2_weight), param(m, p->ln2_bias), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  linear_forward(b->fc, b->ln2, param(m, p->fc_weight), param(m, p->fc_bias),
                 BT, C, 4 * C);
  lap(m, PROFILE_MATMUL);
  gelu_forward(b->fc_gelu, b->fc, 4 * N);
  lap(m, PROFILE_ELEMENTWISE);
  linear_forward(b->fc_proj, b->fc_gelu, param(m, p->fc_proj_weight),
                 param(m, p->fc_proj_bias), BT, 4 * C, C);
  lap(m, PROFILE_MATMUL);
  residual_forward(b->residual_out, b->residual_mid, b->fc_proj, N);
  lap(m, PROFILE_ELEMENTWISE);
}

double gpt_forward(model *m, const float *x, const unsigned char *targets,
                   int B) {
  const gpt_config *g = &m->gpt;
  const gpt_params *p = &m->gpt_index;
  struct gpt_activations *a = m->gpt_acts;
  int T = g->context, C = g->d_model, V = MODEL_GPT_VOCAB, BT = B * T;
  for (int i = 0; i < BT; i++)
    a->tokens[i] = (int)x[i];
  a->targets = targets;
  need(m, p->wte, MODEL_FORWARD);
  embedding_forward(a->embedded, a->tokens, param(m, p->wte), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  need(m, p->wpe, MODEL_FORWARD);
  position_embedding_forward(a->embedded, param(m, p->wpe), B, T, C);
  lap(m, PROFILE_ELEMENTWISE);
  for (int l = 0; l < g->n_layer; l++) {
    need(m, p->blocks[l].ln1_weight, MODEL_FORWARD);
    block_forward(m, l, B);
  }
  need(m, p->ln_f_weight, MODEL_FORWARD);
  layernorm_forward(a->ln_f, a->ln_f_mean, a->ln_f_rstd,
                    block_input(a, g->n_layer), param(m, p->ln_f_weight),
                    param(m, p->ln_f_bias), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  need(m, p->lm_head, MODEL_FORWARD);
  linear_forward(a->logits, a->ln_f, param(m, p->lm_head), NULL, BT, C, V);
  lap(m, PROFILE_MATMUL);
  double sum = softmax_cross_entropy_forward(a->probs, a->logits, targets, BT,
                                             V, NULL);
  lap(m, PROFILE_LOSS);
  return sum / T; /* per sequence: the mean over its positions */
}

/* Backward of block l. dresidual (B, T, C) holds the gradient of the
 * block's output and receives that of its input, in place: a skip
 * connection passes the gradient on unchanged, so the branch reads it as
 * its output's gradient and its layernorm_backward adds the branch's part. */
static void block_backward(model *m, int l, int B, float *dresidual) {
  const gpt_config *g = &m->gpt;
  const gpt_block_params *p = &m->gpt_index.blocks[l];
  struct gpt_activations *a = m->gpt_acts;
  gpt_block_activations *b = &a->blocks[l];
  int T = g->context, C = g->d_model, BT = B * T;
  size_t N = (size_t)BT * C;
  /* residual_out = residual_mid + fc_proj(gelu(fc(ln2(residual_mid)))) */
  linear_backward(a->dfc, grad(m, p->fc_proj_weight), grad(m, p->fc_proj_bias),
                  dresidual, b->fc_gelu, param(m, p->fc_proj_weight), BT,
                  4 * C, C);
  lap(m, PROFILE_MATMUL);
  gelu_backward(a->dfc, a->dfc, b->fc, 4 * N);
  lap(m, PROFILE_ELEMENTWISE);
  linear_backward(a->dln, grad(m, p->fc_weight), grad(m, p->fc_bias), a->dfc,
                  b->ln2, param(m, p->fc_weight), BT, C, 4 * C);
  lap(m, PROFILE_MATMUL);
  layernorm_backward(dresidual, grad(m, p->ln2_weight), grad(m, p->ln2_bias),
                     a->dln, b->residual_mid, b->ln2_mean, b->ln2_rstd,
                     param(m, p->ln2_weight), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  /* residual_mid = input + attn_proj(attention(qkv(ln1(input)))) */
  linear_backward(a->dattn_out, grad(m, p->attn_proj_weight),
                  grad(m, p->attn_proj_bias), dresidual, b->attn_out,
                  param(m, p->attn_proj_weight), BT, C, C);
  lap(m, PROFILE_MATMUL);
  attention_backward(a->dqkv, a->dqkvr, a->datt, a->dattn_out, b->qkvr, b->att,
                     B, T, C, g->n_head);
  lap(m, PROFILE_ATTENTION);
  linear_backward(a->dln, grad(m, p->qkv_weight), grad(m, p->qkv_bias),
                  a->dqkv, b->ln1, param(m, p->qkv_weight), BT, C, 3 * C);
  lap(m, PROFILE_MATMUL);
  layernorm_backward(dresidual, grad(m, p->ln1_weight), grad(m, p->ln1_bias),
                     a->dln, block_input(a, l), b->ln1_mean, b->ln1_rstd,
                     param(m, p->ln1_weight), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
}

void gpt_backward(model *m, int B, float loss_scale) {
  const gpt_config *g = &m->gpt;
  const gpt_params *p = &m->gpt_index;
  struct gpt_activations *a = m->gpt_acts;
  int T = g->context, C = g->d_model, V = MODEL_GPT_VOCAB, BT = B * T;
  size_t N = (size_t)BT * C;
  /* The forward's value per sequence is its mean over T positions. */
  softmax_cross_entropy_backward(a->dlogits, a->probs, a->targets, BT, V,
                                 loss_scale / (float)T);
  lap(m, PROFILE_LOSS);
  need(m, p->lm_head, MODEL_BACKWARD);
  linear_backward(a->dln, grad(m, p->lm_head), NULL, a->dlogits, a->ln_f,
                  param(m, p->lm_head), BT, C, V);
  lap(m, PROFILE_MATMUL);
  ready(m, p->lm_head, p->lm_head);
  need(m, p->ln_f_weight, MODEL_BACKWARD);
  float *dres = a->dresidual;
  memset(dres, 0, N * sizeof(float));
  layernorm_backward(dres, grad(m, p->ln_f_weight), grad(m, p->ln_f_bias),
                     a->dln, block_input(a, g->n_layer), a->ln_f_mean,
                     a->ln_f_rstd, param(m, p->ln_f_weight), BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  ready(m, p->ln_f_weight, p->ln_f_bias);
  for (int l = g->n_layer - 1; l >= 0; l--) {
    const gpt_block_params *bp = &p->blocks[l];
    need(m, bp->ln1_weight, MODEL_BACKWARD);
    block_backward(m, l, B, dres);
    ready(m, bp->ln1_weight, bp->fc_proj_bias);
  }
  need(m, p->wpe, MODEL_BACKWARD);
  position_embedding_backward(grad(m, p->wpe), dres, B, T, C);
  lap(m, PROFILE_ELEMENTWISE);
  ready(m, p->wpe, p->wpe);
  need(m, p->wte, MODEL_BACKWARD);
  embedding_backward(grad(m, p->wte), a->tokens, dres, BT, C);
  lap(m, PROFILE_ELEMENTWISE);
  ready(m, p->wte, p->wte);
}

/* ---- generation ---- */

const float *gpt_logits(const model *m) { return m->gpt_acts->logits; }

void gpt_generate(model *m, const unsigned char *prompt, int prompt_len, int n,
                  float temperature, rng *r, unsigned char *out) {
  int T = m->gpt.context, V = MODEL_GPT_VOCAB;
  float *x = calloc((size_t)T, sizeof(float));
  unsigned char *targets = calloc((size_t)T, 1);
  double *weights = malloc((size_t)V * sizeof(double));
  if (!x || !targets || !weights) {
    memset(out, '?', (size_t)n);
    free(x);
    free(targets);
    free(weights);
    return;
  }
  /* The window holds the last len <= T bytes; positions after len are
   * zeros that causal attention keeps from influencing position len - 1. */
  int len = prompt_len < T ? prompt_len : T;
  for (int i = 0; i < len; i++)
    x[i] = prompt[prompt_len - len + i];
  for (int k = 0; k < n; k++) {
    gpt_forward(m, x, targets, 1);
    const float *z = gpt_logits(m) + (size_t)(len - 1) * V;
    float maxv = z[0];
    for (int v = 1; v < V; v++)
      if (z[v] > maxv)
        maxv = z[v];
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
      weights[v] = exp((z[v] - maxv) / temperature);
      sum += weights[v];
    }
    double u = (double)rng_uniform(r) * sum, acc = 0.0;
    int pick = V - 1;
    for (int v = 0; v < V; v++) {
      acc += weights[v];
      if (u < acc) {
        pick = v;
        break;
      }
    }
    out[k] = (unsigned char)pick;
    if (len == T) { /* slide the window by one byte */
      memmove(x, x + 1, (size_t)(T - 1) * sizeof(float));
      len--;
    }
    x[len++] = (float)pick;
  }
  free(x);
  free(targets);
  free(weights);
}
