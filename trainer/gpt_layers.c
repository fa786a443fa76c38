/*
 * gpt_layers.c - forward and backward passes of the transformer's layers
 * (see gpt_layers.h for shapes and references). Attention's products go
 * through CBLAS, one sgemm per sequence and head over strided views of the
 * packed qkv array; everything else is plain loops.
 */
#include "gpt_layers.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

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

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float *y = out + (size_t)n * C;
    /* Two passes (mean, then variance around it), in double: the one-pass
     * E[x^2] - E[x]^2 loses digits when the mean is large. */
    double m = 0.0;
    for (int c = 0; c < C; c++)
      m += x[c];
    m /= C;
    double v = 0.0;
    for (int c = 0; c < C; c++)
      v += (x[c] - m) * (x[c] - m);
    v /= C;
    float s = (float)(1.0 / sqrt(v + 1e-5));
    for (int c = 0; c < C; c++)
      y[c] = ((x[c] - (float)m) * s) * weight[c] + bias[c];
    mean[n] = (float)m;
    rstd[n] = s;
  }
}

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
    double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - m) * s;
      float dxhat = dy[c] * weight[c];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += (double)dxhat * xhat;
      dweight[c] += dy[c] * xhat;
      dbias[c] += dy[c];
    }
    float mean_dxhat = (float)(sum_dxhat / C);
    float mean_dxhat_xhat = (float)(sum_dxhat_xhat / C);
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - m) * s;
      float dxhat = dy[c] * weight[c];
      dx[c] += s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T,
                       int C, int NH) {
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
      const float *k = q + C, *v = q + 2 * C;
      float *a = att + ((size_t)b * NH + h) * T * T;
      /* a (T, T) = scale * q (T, hs) @ k^T (hs, T); rows of q and k are
       * 3C apart in qkv. The upper triangle is computed and discarded:
       * one full product is simpler and, at these sizes, not slower than
       * T products of growing length. */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q,
                  C3, k, C3, 0.0f, a, T);
      for (int i = 0; i < T; i++) {
        float *row = a + (size_t)i * T;
        float maxv = -FLT_MAX;
        for (int j = 0; j <= i; j++)
          if (row[j] > maxv)
            maxv = row[j];
        /* Subtracting the row's maximum keeps expf from overflowing. */
        float sum = 0.0f;
        for (int j = 0; j <= i; j++) {
          row[j] = expf(row[j] - maxv);
          sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= i; j++)
          row[j] *= inv;
        for (int j = i + 1; j < T; j++)
          row[j] = 0.0f; /* causal: no attention to later positions */
      }
      /* out (T, hs) = a (T, T) @ v (T, hs), rows C apart in out */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a,
                  T, v, C3, 0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
    }
  }
}

void attention_backward(float *dqkv, const float *dout, const float *qkv,
                        const float *att, float *scratch, int B, int T, int C,
                        int NH) {
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      size_t head = (size_t)b * T * C3 + (size_t)h * hs;
      const float *q = qkv + head, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + head, *dk = dq + C, *dv = dq + 2 * C;
      const float *a = att + ((size_t)b * NH + h) * T * T;
      const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
      float *da = scratch;
      /* da (T, T) = dy (T, hs) @ v^T (hs, T) */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy,
                  C, v, C3, 0.0f, da, T);
      /* dv (T, hs) = a^T (T, T) @ dy (T, hs) */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
                  dy, C, 0.0f, dv, C3);
      /* Softmax backward, row by row: ds_ij = a_ij (da_ij - sum_k a_ik da_ik).
       * Masked entries have a_ij = 0, so their ds is 0 too. */
      for (int i = 0; i < T; i++) {
        const float *arow = a + (size_t)i * T;
        float *drow = da + (size_t)i * T;
        float dot = 0.0f;
        for (int j = 0; j <= i; j++)
          dot += arow[j] * drow[j];
        for (int j = 0; j < T; j++)
          drow[j] = arow[j] * (drow[j] - dot);
      }
      /* The scores were scale * q k^T: dq = scale * ds @ k, dk = scale *
       * ds^T @ q. */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale,
                  da, T, k, C3, 0.0f, dq, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, da,
                  T, q, C3, 0.0f, dk, C3);
    }
  }
}

/* sqrt(2 / pi) */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

void gelu_forward(float *out, const float *inp, size_t N) {
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

void gelu_backward(float *dinp, const float *dout, const float *inp, size_t N) {
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float t = tanhf(u);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    float local = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    dinp[i] = local * dout[i];
  }
}

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
