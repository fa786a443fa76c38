/*
 * gpt.h - xtrain's small decoder-only transformer (--model gpt), the
 * model.h functions behind model_create_gpt, model_forward and
 * model_backward for MODEL_GPT, and text generation. Its types (the shape,
 * the tensors' indices) are here, and model.h's struct model holds them;
 * gpt.c registers its tensors through tensors.h, not model.c.
 *
 * Architecture (GPT-2's, Radford et al. 2019, at toy size): token and
 * learned position embeddings; n_layer pre-LayerNorm blocks, each
 *   x = x + attn_proj(attention(qkv(ln1(x))))   causal, n_head heads
 *   x = x + fc_proj(gelu(fc(ln2(x))))           MLP of width 4 * d_model
 * a final LayerNorm ln_f, and an output projection lm_head (untied from the
 * token embedding, no bias) to 256 logits, one per byte; the loss is the
 * cross-entropy of the next byte at every position.
 *
 * Tensors, in registration (= forward) order, C = d_model, T = context:
 *   wte (256, C), wpe (T, C),
 *   h<l>.ln1.weight, h<l>.ln1.bias (C), h<l>.attn.qkv.weight (3C, C),
 *   h<l>.attn.qkv.bias (3C), h<l>.attn.proj.weight (C, C),
 *   h<l>.attn.proj.bias (C), h<l>.ln2.weight, h<l>.ln2.bias (C),
 *   h<l>.mlp.fc.weight (4C, C), h<l>.mlp.fc.bias (4C),
 *   h<l>.mlp.proj.weight (C, 4C), h<l>.mlp.proj.bias (C)   for each block l,
 *   ln_f.weight, ln_f.bias (C), lm_head.weight (256, C).
 * units.h takes the name before the first '.' as the layer, so each block
 * is one layer (one FSDP unit, never split across DDP buckets).
 */
#ifndef XTRAIN_GPT_H
#define XTRAIN_GPT_H

#include <stddef.h>

#include "rng.h"

/* --model gpt's shape. */
typedef struct gpt_config {
  int n_layer;  /* transformer blocks */
  int n_head;   /* attention heads; divides d_model */
  int d_model;  /* width C of the residual stream */
  int context;  /* sequence length T */
} gpt_config;

/* Registration indices (into model.views) of one transformer block's
 * tensors, C = d_model. All are registered under the layer name "h<l>", so
 * that units.h makes one layer, hence one FSDP unit, of each block. */
typedef struct gpt_block_params {
  int ln1_weight, ln1_bias;       /* (C), (C) */
  int qkv_weight, qkv_bias;       /* (3C, C), (3C) */
  int attn_proj_weight, attn_proj_bias; /* (C, C), (C) */
  int ln2_weight, ln2_bias;       /* (C), (C) */
  int fc_weight, fc_bias;         /* (4C, C), (4C) */
  int fc_proj_weight, fc_proj_bias; /* (C, 4C), (C) */
} gpt_block_params;

/* 12 tensors per block, plus wte, wpe, ln_f (2) and lm_head: 245 of
 * model.h's MODEL_MAX_PARAMS (256) tensors, checked there. */
#define GPT_MAX_LAYERS 20

/* Registration indices of the whole gpt's tensors, V = 256, T = context. */
typedef struct gpt_params {
  int wte;     /* (V, C) token embedding */
  int wpe;     /* (T, C) position embedding */
  gpt_block_params blocks[GPT_MAX_LAYERS]; /* n_layer used */
  int ln_f_weight, ln_f_bias; /* (C), (C) */
  int lm_head; /* (V, C) output projection, untied from wte, no bias */
} gpt_params;

struct model; /* model.h: the model the functions below fill and run */

/* Register m->gpt's tensors (above) and fill m->gpt_index. */
void gpt_register_params(struct model *m);
/* Activations for m->max_batch sequences; 0, or -1 when out of memory
 * (gpt_free_activations releases what was taken). */
int gpt_allocate_activations(struct model *m);
void gpt_free_activations(struct model *m); /* safe on any model */

/* model_forward / model_backward of a gpt (see model.h). */
double gpt_forward(struct model *m, const float *x,
                   const unsigned char *targets, int B);
void gpt_backward(struct model *m, int B, float loss_scale);

/* (B, T, 256) logits of the last forward. */
const float *gpt_logits(const struct model *m);

/* Append n bytes to out sampled one at a time from m (max_batch >= 1, no
 * hooks needed: call it on a model holding the whole parameters): the
 * context is the last T bytes of prompt (prompt_len >= 1) followed by what
 * was generated so far; each byte is drawn from softmax(logits /
 * temperature) with r, so a given r state gives the same text. */
void gpt_generate(struct model *m, const unsigned char *prompt,
                  int prompt_len, int n, float temperature, rng *r,
                  unsigned char *out);

#endif /* XTRAIN_GPT_H */
