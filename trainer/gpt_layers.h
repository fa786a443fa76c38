/*
 * gpt_layers.h - the layers of xtrain's small decoder-only transformer
 * (model.h, --model gpt) as forward/backward pairs, in the style of
 * layers.h: each function's comment gives every array's shape. B is the
 * batch (sequences), T the sequence length, C the model width (d_model),
 * NH the number of heads, V the vocabulary. Arrays are float32, row-major.
 *
 * Parameter gradients ACCUMULATE (+=), as in layers.h. Two input gradients
 * also accumulate, and say so: layernorm's and the residual's, because
 * their inputs are the residual stream, whose gradient is the sum of what
 * flows back through the skip connection and through the branch. The other
 * input gradients are OVERWRITTEN.
 *
 * The linear layers of a block (qkv, attention projection, MLP) are
 * layers.h's linear_forward/backward over B*T rows; the loss is layers.h's
 * softmax_cross_entropy over B*T rows.
 */
#ifndef XTRAIN_GPT_LAYERS_H
#define XTRAIN_GPT_LAYERS_H

#include <stddef.h>

/* Token embedding: out[n] = weight[ids[n]].
 * out (N, C), ids (N) in [0, V), weight (V, C). */
void embedding_forward(float *out, const int *ids, const float *weight, int N,
                       int C);
/* dweight (V, C) += dout rows scattered to their ids. ids (N), dout (N, C). */
void embedding_backward(float *dweight, const int *ids, const float *dout,
                        int N, int C);

/* Learned position embedding, added: out[b, t] += weight[t].
 * out (B, T, C), weight (T, C). */
void position_embedding_forward(float *out, const float *weight, int B, int T,
                                int C);
/* dweight (T, C) += sum over b of dout[b]. dout (B, T, C). */
void position_embedding_backward(float *dweight, const float *dout, int B,
                                 int T, int C);

/* Layer normalisation over the last dimension (Ba, Kiros & Hinton 2016):
 * out = (inp - mean) * rstd * weight + bias, rstd = 1/sqrt(var + 1e-5) with
 * the biased variance, as torch.nn.LayerNorm.
 * out (N, C), mean and rstd (N) saved for backward, inp (N, C),
 * weight and bias (C). */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C);
/* dinp (N, C) ACCUMULATES, dweight and dbias (C) accumulate, dout (N, C),
 * inp (N, C), mean and rstd (N) from forward, weight (C). */
void layernorm_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *mean,
                        const float *rstd, const float *weight, int N, int C);

/* Causal multi-head self-attention (Vaswani et al. 2017): for each
 * sequence b and head h with head size hs = C / NH,
 * att = softmax(q k^T / sqrt(hs)) with position t attending to positions
 * <= t only, and out = att v, heads concatenated along C.
 * As llm.c's CUDA attention, the heads of all sequences are one batch:
 * qkv (B, T, 3C), which holds q, k, v in that order along the last
 * dimension, each split into NH heads of hs, is permuted into
 * qkvr (3, B, NH, T, hs), where every (sequence, head) is a contiguous
 * (T, hs) block one stride from the next; each product is then one strided
 * batched GEMM over the B * NH blocks, and the softmax one pass over the
 * B * NH * T rows of att.
 * out (B, T, C); qkvr (3, B, NH, T, hs) and att (B, NH, T, T), the
 * probabilities (zero above the diagonal), are kept for backward;
 * yr (B, NH, T, hs) is scratch; qkv (B, T, 3C). */
void attention_forward(float *out, float *qkvr, float *att, float *yr,
                       const float *qkv, int B, int T, int C, int NH);
/* dqkv (B, T, 3C) overwritten; dqkvr (3, B, NH, T, hs) and
 * datt (B, NH, T, T) are scratch; dout (B, T, C); qkvr and att from
 * forward. */
void attention_backward(float *dqkv, float *dqkvr, float *datt,
                        const float *dout, const float *qkvr, const float *att,
                        int B, int T, int C, int NH);

/* GELU, tanh approximation as GPT-2 (Hendrycks & Gimpel 2016):
 * out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * out and inp (N); they may be different arrays only (backward needs inp). */
void gelu_forward(float *out, const float *inp, size_t N);
/* dinp (N) overwritten, may alias dout; inp (N) the forward's input. */
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t N);

/* Residual connection: out = inp1 + inp2. out, inp1, inp2 (N). */
void residual_forward(float *out, const float *inp1, const float *inp2,
                      size_t N);
/* dinp1 and dinp2 (N) both ACCUMULATE dout (N). */
void residual_backward(float *dinp1, float *dinp2, const float *dout,
                       size_t N);

#endif /* XTRAIN_GPT_LAYERS_H */
