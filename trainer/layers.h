/*
 * layers.h - the layers of xtrain as plain forward/backward function pairs,
 * in the style of llm.c: each function's comment gives every array's shape.
 * Arrays are float32, row-major (C order), batch first. Image tensors are
 * NCHW like PyTorch, and weights use PyTorch's layouts, so that a parameter
 * buffer can be compared with, or loaded into, a torch model.
 *
 * Every backward ACCUMULATES into parameter gradients (dweight += ...), as
 * autograd does, so that gradient accumulation over micro-batches is only a
 * matter of not zeroing the gradient buffer. Gradients with respect to inputs
 * (dinp) are OVERWRITTEN; pass dinp = NULL when it is not needed (first layer).
 */
#ifndef XTRAIN_LAYERS_H
#define XTRAIN_LAYERS_H

#include <stddef.h>

/* out = inp @ weight^T + bias.
 * out (B, OC), inp (B, C), weight (OC, C), bias (OC) or NULL. */
void linear_forward(float *out, const float *inp, const float *weight,
                    const float *bias, int B, int C, int OC);
/* dinp (B, C) or NULL, dweight (OC, C), dbias (OC) or NULL, dout (B, OC),
 * inp (B, C), weight (OC, C). */
void linear_backward(float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *weight,
                     int B, int C, int OC);

/* out = max(inp, 0); out and inp (N) may be the same array. */
void relu_forward(float *out, const float *inp, size_t N);
/* dinp = dout where out > 0, else 0. dinp, dout, out (N); dinp may alias dout. */
void relu_backward(float *dinp, const float *dout, const float *out, size_t N);

/* 2-D convolution, stride 1, zero padding pad, square kernel K, lowered to
 * one matrix product per sample with im2col (Chellapilla et al. 2006).
 * out (B, OC, OH, OW) with OH = H + 2*pad - K + 1, OW likewise;
 * inp (B, C, H, W), weight (OC, C, K, K), bias (OC),
 * col is scratch of conv2d_scratch(C, H, W, K, pad) floats. */
/* Floats of scratch conv2d_forward and conv2d_backward need for one sample:
 * its columns (C*K*K, OH*OW) and, with pad > 0, its zero-bordered copy
 * (C, H + 2*pad, W + 2*pad). */
size_t conv2d_scratch(int C, int H, int W, int K, int pad);
void conv2d_forward(float *out, const float *inp, const float *weight,
                    const float *bias, float *col, int B, int C, int H, int W,
                    int OC, int K, int pad);
/* dinp (B, C, H, W) or NULL, dweight (OC, C, K, K), dbias (OC),
 * dout (B, OC, OH, OW), inp (B, C, H, W), weight (OC, C, K, K),
 * col and dcol are scratch of conv2d_scratch(C, H, W, K, pad) floats each. */
void conv2d_backward(float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *weight,
                     float *col, float *dcol, int B, int C, int H, int W,
                     int OC, int K, int pad);

/* 2x2 max pooling, stride 2. H and W must be even.
 * out (B, C, H/2, W/2), inp (B, C, H, W), argmax (B, C, H/2, W/2) receives
 * the index within inp's (H, W) plane of each maximum, for backward. */
void maxpool2x2_forward(float *out, int *argmax, const float *inp, int B, int C,
                        int H, int W);
/* dinp (B, C, H, W) overwritten, dout (B, C, H/2, W/2), argmax as forward. */
void maxpool2x2_backward(float *dinp, const float *dout, const int *argmax,
                         int B, int C, int H, int W);

/* Softmax followed by cross-entropy against integer targets.
 * probs (B, V) receives the softmax, logits (B, V), targets (B) in [0, V).
 * Returns the SUM over the batch of -log p[target] (callers divide).
 * correct, when not NULL, receives how many argmax(logits) == target. */
double softmax_cross_entropy_forward(float *probs, const float *logits,
                                     const unsigned char *targets, int B, int V,
                                     int *correct);
/* dlogits (B, V) = (probs - onehot(targets)) * scale, where scale is usually
 * 1 / (number of samples the loss is averaged over). probs (B, V). */
void softmax_cross_entropy_backward(float *dlogits, const float *probs,
                                    const unsigned char *targets, int B, int V,
                                    float scale);

#endif /* XTRAIN_LAYERS_H */
