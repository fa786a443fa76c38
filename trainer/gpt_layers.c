/*
 * gpt_layers.c - forward and backward passes of the transformer's layers
 * (see gpt_layers.h for shapes and references). Attention's products are
 * strided batched GEMMs over all sequences and heads (CBLAS); the
 * elementwise layers are loops the compiler vectorises: no libm call per
 * element (exp is a polynomial below), and every sum runs in LANES partial
 * sums, so that it vectorises without -ffast-math and gives the same
 * result whatever the vector width.
 */
#include "gpt_layers.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The elementwise layers are compiled for x86-64-v4 (AVX-512) and v3
 * (AVX2) besides the baseline, and the loader picks the clone the CPU
 * runs (GCC's target_clones, as PyTorch dispatches its kernels by CPU).
 * All clones compute the same values: ISO C mode contracts no a * b + c
 * into an FMA, and no sum depends on the vector width (LANES below). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&          \
    !defined(__clang__) && __GNUC__ >= 11
#define VECTORISED                                                             \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VECTORISED
#endif

/* ---- building blocks ---- */

/* Partial sums per reduction: one AVX-512 register, two AVX2 or four SSE. */
#define LANES 16

/* acc[0] + ... + acc[LANES-1], pairwise in a fixed order. */
static inline float lanes_total(float acc[LANES]) {
  for (int width = LANES / 2; width > 0; width /= 2)
    for (int l = 0; l < width; l++)
      acc[l] += acc[l + width];
  return acc[0];
}

/* x[0] + ... + x[n-1] */
static inline float sum_of(const float *x, int n) {
  float acc[LANES] = {0.0f};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += x[i + l];
  for (int l = 0; i + l < n; l++)
    acc[l] += x[i + l];
  return lanes_total(acc);
}

/* x[0] y[0] + ... + x[n-1] y[n-1] */
static inline float dot_of(const float *x, const float *y, int n) {
  float acc[LANES] = {0.0f};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += x[i + l] * y[i + l];
  for (int l = 0; i + l < n; l++)
    acc[l] += x[i + l] * y[i + l];
  return lanes_total(acc);
}

/* max(x[0..n)), n >= 1 */
static inline float max_of(const float *x, int n) {
  float acc[LANES];
  for (int l = 0; l < LANES; l++)
    acc[l] = x[0];
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int l = 0; i + l < n; l++)
    acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int width = LANES / 2; width > 0; width /= 2)
    for (int l = 0; l < width; l++)
      acc[l] = acc[l + width] > acc[l] ? acc[l + width] : acc[l];
  return acc[0];
}

/* e^x within 2 ulp of expf for x in [-86.9, 88.3], and between
 * 1.6e-38 and 2.4e38 (normal floats) beyond, without a branch or a call,
 * so that loops over it vectorise: x = n ln2 + r with |r| <= ln2 / 2, e^r
 * by Cephes' degree-6 polynomial (Moshier 1989, expf.c), 2^n by building
 * the exponent bits. n and r are clamped rather than x: GCC would
 * specialise the code after a clamped x for the constant it becomes, and
 * divide twice in gelu_forward. */
static inline float exp_poly(float x) {
  /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  n = n < -125.0f ? -125.0f : n;
  n = n > 127.0f ? 127.0f : n;
  float r = x - n * 0.693359375f; /* ln2 in two parts, exact first */
  r = r - n * -2.12194440e-4f;
  r = r < -0.3466f ? -0.3466f : r;
  r = r > 0.3466f ? 0.3466f : r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union {
    int32_t bits;
    float value;
  } two_n = {.bits = ((int32_t)n + 127) << 23};
  return p * two_n.value;
}

/* ---- embeddings ---- */

void embedding_forward(float *out, const int *ids, const float *weight, int N,
                       int C) {
  for (int n = 0; n < N; n++)
    memcpy(out + (size_t)n * C, weight + (size_t)ids[n] * C,
           (size_t)C * sizeof(float));
}

void embedding_backward(float *dweight, const int *ids, const float *dout,
                        int N, int C) {
  for (int n = 0; n < N; n++) {
    float *row = dweight + (size_t)ids[n] * C;
    const float *d = dout + (size_t)n * C;
    for (int c = 0; c < C; c++)
      row[c] += d[c];
  }
}

void position_embedding_forward(float *out, const float *weight, int B, int T,
                                int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *w = weight + (size_t)t * C;
      for (int c = 0; c < C; c++)
        o[c] += w[c];
    }
  }
}

void position_embedding_backward(float *dweight, const float *dout, int B,
                                 int T, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      float *w = dweight + (size_t)t * C;
      for (int c = 0; c < C; c++)
        w[c] += d[c];
    }
  }
}

/* ---- layer normalisation ---- */

VECTORISED
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float *y = out + (size_t)n * C;
    /* Two passes, mean then the variance around it (the one-pass
     * E[x^2] - E[x]^2 loses digits when the mean is large); y holds
     * x - mean in between. */
    float m = sum_of(x, C) / (float)C;
    for (int c = 0; c < C; c++)
      y[c] = x[c] - m;
    float v = dot_of(y, y, C) / (float)C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    for (int c = 0; c < C; c++)
      y[c] = (y[c] * s) * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

/* layernorm_backward's work on entries c0 .. c0 + lanes - 1 of one row
 * (lanes <= LANES): dweight and dbias, and lane l of the two sums. */
static inline void layernorm_backward_lanes(
    int c0, int lanes, float *dweight, float *dbias, const float *dy,
    const float *x, const float *weight, float m, float s,
    float acc_dxhat[LANES], float acc_dxhat_xhat[LANES]) {
  for (int l = 0; l < lanes; l++) {
    int c = c0 + l;
    float xhat = (x[c] - m) * s;
    float dxhat = dy[c] * weight[c];
    acc_dxhat[l] += dxhat;
    acc_dxhat_xhat[l] += dxhat * xhat;
    dweight[c] += dy[c] * xhat;
    dbias[c] += dy[c];
  }
}

VECTORISED
void layernorm_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *mean,
                        const float *rstd, const float *weight, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    const float *dy = dout + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    /* With xhat = (x - mean) * rstd and dxhat = dy * weight:
     * dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)). */
    float acc_dxhat[LANES] = {0.0f}, acc_dxhat_xhat[LANES] = {0.0f};
    int c0 = 0;
    for (; c0 + LANES <= C; c0 += LANES)
      layernorm_backward_lanes(c0, LANES, dweight, dbias, dy, x, weight, m, s,
                               acc_dxhat, acc_dxhat_xhat);
    layernorm_backward_lanes(c0, C - c0, dweight, dbias, dy, x, weight, m, s,
                             acc_dxhat, acc_dxhat_xhat);
    float mean_dxhat = lanes_total(acc_dxhat) / (float)C;
    float mean_dxhat_xhat = lanes_total(acc_dxhat_xhat) / (float)C;
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - m) * s;
      float dxhat = dy[c] * weight[c];
      dx[c] += s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

/* ---- attention ---- */

/* C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for i in [0, batch), where
 * X[i] starts stride_x floats after X[i-1]: cuBLAS's
 * cublasSgemmStridedBatched, row-major. OpenBLAS 0.3.21 has no batched
 * call, so this is a loop; on contiguous (T, hs) blocks its small-matrix
 * kernels run the 64 x 64 x 32 products of bench/gpt.sh at 70-110
 * GFLOP/s, about the rate of the model's large GEMMs. */
static void sgemm_strided_batched(CBLAS_TRANSPOSE trans_a,
                                  CBLAS_TRANSPOSE trans_b, int M, int N, int K,
                                  float alpha, const float *A, int lda,
                                  size_t stride_a, const float *B, int ldb,
                                  size_t stride_b, float beta, float *C, int ldc,
                                  size_t stride_c, int batch) {
  for (int i = 0; i < batch; i++)
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, M, N, K, alpha,
                A + i * stride_a, lda, B + i * stride_b, ldb, beta,
                C + i * stride_c, ldc);
}

/* The head h of token (b, t) moves between the token-major (B, T, NH, hs),
 * the layout of a row of qkv or of out, and the head-major
 * (B, NH, T, hs). parts is how many such arrays the token-major row holds
 * side by side (3 for qkv, 1 for out), each head-major array following
 * the previous one. */
static void heads_to_blocks(float *blocks, const float *tokens, int parts,
                            int B, int T, int C, int NH) {
  int hs = C / NH;
  size_t all = (size_t)B * T * C;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int part = 0; part < parts; part++)
        for (int h = 0; h < NH; h++) {
          const float *src =
              tokens + ((size_t)b * T + t) * parts * C + (size_t)part * C +
              (size_t)h * hs;
          float *dst = blocks + part * all +
                       (((size_t)b * NH + h) * T + t) * hs;
          for (int d = 0; d < hs; d++)
            dst[d] = src[d];
        }
}

static void blocks_to_heads(float *tokens, const float *blocks, int parts,
                            int B, int T, int C, int NH) {
  int hs = C / NH;
  size_t all = (size_t)B * T * C;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int part = 0; part < parts; part++)
        for (int h = 0; h < NH; h++) {
          float *dst = tokens + ((size_t)b * T + t) * parts * C +
                       (size_t)part * C + (size_t)h * hs;
          const float *src = blocks + part * all +
                             (((size_t)b * NH + h) * T + t) * hs;
          for (int d = 0; d < hs; d++)
            dst[d] = src[d];
        }
}

/* Causal softmax of every row of att (rows, T), row r being position
 * i = r % T of its sequence: entries 0..i become probabilities, the rest 0.
 * Each loop runs over the whole row and masks, so that it has the same
 * length T every time and vectorises without a remainder per row. */
VECTORISED
static void causal_softmax_forward(float *att, int rows, int T) {
  for (int r = 0; r < rows; r++) {
    float *row = att + (size_t)r * T;
    int i = r % T;
    /* Subtracting the row's maximum keeps exp from overflowing. */
    float maxv = max_of(row, i + 1);
    for (int j = 0; j < T; j++) {
      float e = exp_poly(row[j] - maxv);
      row[j] = j <= i ? e : 0.0f; /* causal: nothing from later positions */
    }
    float inv = 1.0f / sum_of(row, T);
    for (int j = 0; j < T; j++)
      row[j] *= inv;
  }
}

/* datt (rows, T) holds the gradient of the probabilities att and receives
 * that of the scores: ds_ij = a_ij (da_ij - sum_k a_ik da_ik). Masked
 * entries have a_ij = 0, so their ds is 0 too. */
VECTORISED
static void causal_softmax_backward(float *datt, const float *att, int rows,
                                    int T) {
  for (int r = 0; r < rows; r++) {
    const float *a = att + (size_t)r * T;
    float *d = datt + (size_t)r * T;
    float dot = dot_of(a, d, T);
    for (int j = 0; j < T; j++)
      d[j] = a[j] * (d[j] - dot);
  }
}

void attention_forward(float *out, float *qkvr, float *att, float *yr,
                       const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH, BH = B * NH;
  size_t block = (size_t)T * hs, all = (size_t)B * T * C;
  const float *q = qkvr, *k = qkvr + all, *v = qkvr + 2 * all;
  float scale = 1.0f / sqrtf((float)hs);
  heads_to_blocks(qkvr, qkv, 3, B, T, C, NH);
  /* att (T, T) = scale * q (T, hs) @ k^T (hs, T) for every (b, h). The
   * upper triangle is computed and discarded: one full product is simpler
   * and, at these sizes, not slower than T products of growing length. */
  sgemm_strided_batched(CblasNoTrans, CblasTrans, T, T, hs, scale, q, hs, block,
                        k, hs, block, 0.0f, att, T, (size_t)T * T, BH);
  causal_softmax_forward(att, BH * T, T);
  /* yr (T, hs) = att (T, T) @ v (T, hs) for every (b, h) */
  sgemm_strided_batched(CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, att, T,
                        (size_t)T * T, v, hs, block, 0.0f, yr, hs, block, BH);
  blocks_to_heads(out, yr, 1, B, T, C, NH);
}

void attention_backward(float *dqkv, float *dqkvr, float *datt,
                        const float *dout, const float *qkvr, const float *att,
                        int B, int T, int C, int NH) {
  int hs = C / NH, BH = B * NH;
  size_t block = (size_t)T * hs, all = (size_t)B * T * C, TT = (size_t)T * T;
  const float *q = qkvr, *k = qkvr + all, *v = qkvr + 2 * all;
  float *dq = dqkvr, *dk = dqkvr + all, *dv = dqkvr + 2 * all;
  float scale = 1.0f / sqrtf((float)hs);
  /* dy (B, NH, T, hs) waits in dq's place until dq is computed, last. */
  float *dy = dq;
  heads_to_blocks(dy, dout, 1, B, T, C, NH);
  /* datt (T, T) = dy (T, hs) @ v^T (hs, T) */
  sgemm_strided_batched(CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, hs, block,
                        v, hs, block, 0.0f, datt, T, TT, BH);
  /* dv (T, hs) = att^T (T, T) @ dy (T, hs) */
  sgemm_strided_batched(CblasTrans, CblasNoTrans, T, hs, T, 1.0f, att, T, TT,
                        dy, hs, block, 0.0f, dv, hs, block, BH);
  causal_softmax_backward(datt, att, BH * T, T);
  /* The scores were scale * q k^T: dk = scale * ds^T @ q,
   * dq = scale * ds @ k (overwriting dy). */
  sgemm_strided_batched(CblasTrans, CblasNoTrans, T, hs, T, scale, datt, T, TT,
                        q, hs, block, 0.0f, dk, hs, block, BH);
  sgemm_strided_batched(CblasNoTrans, CblasNoTrans, T, hs, T, scale, datt, T,
                        TT, k, hs, block, 0.0f, dq, hs, block, BH);
  blocks_to_heads(dqkv, dqkvr, 3, B, T, C, NH);
}

/* ---- GELU and the residual ---- */

/* sqrt(2 / pi) */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

/* 0.5 (1 + tanh(u)) is the logistic function of 2u, 1 / (1 + e^-2u):
 * one exp_poly per element instead of a call to tanhf. */
VECTORISED
void gelu_forward(float *out, const float *inp, size_t N) {
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    out[i] = x / (1.0f + exp_poly(-2.0f * u));
  }
}

VECTORISED
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t N) {
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    /* s = 0.5 (1 + tanh u), and 0.5 (1 - tanh^2 u) = 2 s (1 - s) */
    float s = 1.0f / (1.0f + exp_poly(-2.0f * u));
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    float local = s + 2.0f * x * s * (1.0f - s) * du;
    dinp[i] = local * dout[i];
  }
}

VECTORISED
void residual_forward(float *out, const float *inp1, const float *inp2,
                      size_t N) {
  for (size_t i = 0; i < N; i++)
    out[i] = inp1[i] + inp2[i];
}

void residual_backward(float *dinp1, float *dinp2, const float *dout,
                       size_t N) {
  for (size_t i = 0; i < N; i++) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}
