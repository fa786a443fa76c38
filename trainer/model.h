/*
 * model.h - xtrain's models (an MLP and a LeNet-5-like CNN on images, a
 * small GPT-style transformer on bytes of text, gpt.c) over one contiguous
 * parameter buffer.
 *
 * All parameters live in ONE float32 allocation (model.params) and their
 * gradients in another of the same layout (model.grads). Each tensor is a
 * view (name, offset, shape) registered in forward order, so that DDP buckets
 * are contiguous ranges of model.grads, an FSDP unit's flat parameter is a
 * range of model.params (fsdp.c shards it, then frees both buffers),
 * optimizers run over one flat array, and a checkpoint is a few large
 * writes.
 *
 * Backward calls model.grad_ready(ctx, param_index) as soon as a tensor's
 * gradient is final for this backward pass: this is the hook DDP uses to
 * start bucket all-reduces while the remaining layers are still computing.
 * Forward and backward call model.param_needed(ctx, param_index, pass)
 * before each layer (param_index is the layer's first tensor): the hook FSDP
 * uses to gather a unit's parameters. Layers read their tensors through
 * model.tensor_params / model.tensor_grads, which point into params and
 * grads unless a strategy points them at a unit's gathered buffers.
 */
#ifndef XTRAIN_MODEL_H
#define XTRAIN_MODEL_H

#include <stddef.h>

#include "gpt.h"
#include "rng.h"

/* A gpt block registers 12 tensors; 256 allows 20 blocks. */
#define MODEL_MAX_PARAMS 256
#define MODEL_MAX_DIMS 4
#define MODEL_IMAGE_SIDE 28
#define MODEL_IMAGE_PIXELS 784
#define MODEL_CLASSES 10
#define MODEL_GPT_VOCAB 256 /* gpt: one token per byte */

/* gpt.h's blocks fit in the registry: 12 tensors each, plus wte, wpe,
 * ln_f (2) and lm_head. */
_Static_assert(12 * GPT_MAX_LAYERS + 5 <= MODEL_MAX_PARAMS,
               "GPT_MAX_LAYERS blocks must fit in MODEL_MAX_PARAMS");

typedef enum model_kind {
  MODEL_MLP = 0,
  MODEL_CNN = 1,
  MODEL_GPT = 2
} model_kind;

/* How model_init_params fills a tensor. FAN_IN is PyTorch's default for
 * nn.Linear and nn.Conv2d (see model_init_params); the others are what
 * GPT-2 uses for LayerNorm (ones, zeros) and embeddings (normal, std 0.02). */
typedef enum param_init {
  PARAM_INIT_FAN_IN = 0,
  PARAM_INIT_ONES = 1,
  PARAM_INIT_ZEROS = 2,
  PARAM_INIT_NORMAL = 3
} param_init;

/* Registration indices (into model.views) of the MLP's tensors:
 * fc1 784 -> 256, fc2 256 -> 256, fc3 256 -> 10, weights (out, in). */
typedef struct mlp_params {
  int fc1_weight, fc1_bias; /* (256, 784), (256) */
  int fc2_weight, fc2_bias; /* (256, 256), (256) */
  int fc3_weight, fc3_bias; /* (10, 256), (10) */
} mlp_params;

/* B = max_batch. Each array holds the layer's output after its ReLU; the
 * gradients of the same outputs use the same struct. */
typedef struct mlp_activations {
  float *fc1;    /* (B, 256) */
  float *fc2;    /* (B, 256) */
  float *logits; /* (B, 10) */
} mlp_activations;

/* Registration indices of the CNN's tensors, C1 and C2 its channels. */
typedef struct cnn_params {
  int conv1_weight, conv1_bias; /* (C1, 1, 5, 5), (C1) */
  int conv2_weight, conv2_bias; /* (C2, C1, 5, 5), (C2) */
  int fc1_weight, fc1_bias;     /* (120, C2*25), (120) */
  int fc2_weight, fc2_bias;     /* (84, 120), (84) */
  int fc3_weight, fc3_bias;     /* (10, 84), (10) */
} cnn_params;

/* B = max_batch; fc outputs after their ReLU; convolution outputs before
 * it, which follows the pooling (model.c, cnn_forward). */
typedef struct cnn_activations {
  float *conv1;  /* (B, C1, 28, 28) */
  float *pool1;  /* (B, C1, 14, 14) */
  float *conv2;  /* (B, C2, 10, 10) */
  float *pool2;  /* (B, C2, 5, 5), fc1's input as (B, C2*25) */
  float *fc1;    /* (B, 120) */
  float *fc2;    /* (B, 84) */
  float *logits; /* (B, 10) */
} cnn_activations;

struct gpt_activations; /* gpt.c */

/* One parameter tensor inside the flat buffers. offset and numel are in
 * elements (floats), not bytes. fan_in drives PyTorch's default init. */
typedef struct param_view {
  char name[32];
  size_t offset;
  size_t numel;
  int ndim;
  int shape[MODEL_MAX_DIMS];
  int fan_in;
  param_init init;
} param_view;

struct profile; /* profile.h */

typedef void (*grad_ready_fn)(void *ctx, int param_index);

typedef enum model_pass { MODEL_FORWARD = 0, MODEL_BACKWARD = 1 } model_pass;
typedef void (*param_needed_fn)(void *ctx, int param_index, model_pass pass);

typedef struct model {
  model_kind kind;
  int conv1_channels, conv2_channels; /* CNN only */
  gpt_config gpt;                     /* GPT only */
  gpt_params gpt_index;               /* GPT only */
  struct gpt_activations *gpt_acts;   /* GPT only, owned (gpt.c) */
  /* One sample is sample_inputs floats of model_forward's x and
   * sample_targets bytes of its targets: 784 and 1 for mlp and cnn, T and T
   * for gpt. */
  int sample_inputs, sample_targets;
  int max_batch;                      /* activations are sized for this */
  int num_params;
  param_view views[MODEL_MAX_PARAMS];
  size_t num_elements; /* length of params and grads, in floats */
  float *params;
  float *grads;
  /* Where each tensor's values and gradient are read and written:
   * params + views[i].offset and grads + views[i].offset after
   * model_create. */
  float *tensor_params[MODEL_MAX_PARAMS];
  float *tensor_grads[MODEL_MAX_PARAMS];
  grad_ready_fn grad_ready; /* may be NULL */
  void *grad_ready_ctx;
  param_needed_fn param_needed; /* may be NULL */
  void *param_needed_ctx;
  /* xtrain --profile: the gpt's forward and backward charge each layer to
   * its part (profile.h); NULL when not profiling. */
  struct profile *profile;
  /* Tensors by name, and activations and their gradients, owned by the
   * model (see model.c): MLP only / CNN only. */
  mlp_params mlp_index;
  mlp_activations mlp_act, mlp_grad;
  cnn_params cnn_index;
  cnn_activations cnn_act, cnn_grad;
  int *pool1_argmax; /* (B, C1, 14, 14) index in each 28x28 plane */
  int *pool2_argmax; /* (B, C2, 5, 5) index in each 10x10 plane */
  float *col, *dcol; /* im2col scratch, one sample */
  float *probs;      /* (B, 10) softmax of the logits */
  const float *input; /* last forward's input, kept for backward */
  const unsigned char *targets;
} model;

/* Build the tensor layout and allocate buffers for batches of up to
 * max_batch samples. conv1_channels/conv2_channels are used for MODEL_CNN.
 * Returns 0, or -1 when an allocation fails (nothing is left allocated). */
int model_create(model *m, model_kind kind, int conv1_channels,
                 int conv2_channels, int max_batch);
/* The gpt of cfg (validated by the caller: positive sizes, n_head divides
 * d_model, 12 * n_layer + 5 <= MODEL_MAX_PARAMS) for batches of up to
 * max_batch sequences. Returns 0, or -1 when an allocation fails. */
int model_create_gpt(model *m, const gpt_config *cfg, int max_batch);
/* A model of src's kind and shape (not its values) for max_batch samples. */
int model_create_like(model *m, const model *src, int max_batch);
void model_free(model *m);

/* PyTorch's default initialisation of nn.Linear and nn.Conv2d:
 * kaiming_uniform_(a=sqrt(5)) reduces to weight ~ U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)), and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); gpt's
 * LayerNorms start at weight 1, bias 0, and its embeddings at N(0, 0.02^2)
 * (GPT-2's). Tensors are filled in registration order from r. */
void model_init_params(model *m, rng *r);

/* Forward on x (B, 784) normalised pixels (viewed as (B, 1, 28, 28) by the
 * CNN) with targets (B); returns the summed cross-entropy over the batch,
 * and adds the number of correct predictions to *correct if not NULL.
 * B <= max_batch.
 * gpt: x (B, T) byte tokens stored as floats (exact integers 0..255) and
 * targets (B, T) the next byte of each position; the loss of one sample is
 * its MEAN cross-entropy per position, so the return value is the sum over
 * the B sequences of that mean, and *correct receives nothing. */
double model_forward(model *m, const float *x, const unsigned char *targets,
                     int B, int *correct);

/* Backward of the last forward: ACCUMULATES into m->grads the gradient of
 * loss_scale * (the value model_forward returned). For a mean over the B
 * samples of this batch, loss_scale = 1/B. Calls grad_ready for every tensor, in
 * reverse registration order, once its gradient is final. */
void model_backward(model *m, int B, float loss_scale);

void model_zero_grad(model *m);

/* "mlp" / "cnn" / "gpt" to a kind; -1 if unknown. */
int model_kind_parse(const char *name);
const char *model_kind_name(model_kind kind);

#endif /* XTRAIN_MODEL_H */
