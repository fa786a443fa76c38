/*
 * layers.c - forward and backward passes of xtrain's layers (see layers.h
 * for shapes). Matrix products go through CBLAS (OpenBLAS); everything else
 * is plain loops.
 */
#include "layers.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

void linear_forward(float *out, const float *inp, const float *weight,
                    const float *bias, int B, int C, int OC) {
  if (bias) {
    for (int b = 0; b < B; b++)
      memcpy(out + (size_t)b * OC, bias, (size_t)OC * sizeof(float));
  }
  /* out (B, OC) = inp (B, C) @ weight^T (C, OC) [+ out] */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C,
              weight, C, bias ? 1.0f : 0.0f, out, OC);
}

void linear_backward(float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *weight,
                     int B, int C, int OC) {
  /* dweight (OC, C) += dout^T (OC, B) @ inp (B, C) */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC,
              inp, C, 1.0f, dweight, C);
  if (dbias) {
    for (int b = 0; b < B; b++) {
      const float *row = dout + (size_t)b * OC;
      for (int o = 0; o < OC; o++)
        dbias[o] += row[o];
    }
  }
  if (dinp) {
    /* dinp (B, C) = dout (B, OC) @ weight (OC, C) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout,
                OC, weight, C, 0.0f, dinp, C);
  }
}

void relu_forward(float *out, const float *inp, size_t N) {
  for (size_t i = 0; i < N; i++)
    out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float *dinp, const float *dout, const float *out, size_t N) {
  /* dout[i] is read whatever out[i] is, so that the compiler can turn the
   * loop into vector selects (dinp may be dout). */
  for (size_t i = 0; i < N; i++) {
    float g = dout[i];
    dinp[i] = out[i] > 0.0f ? g : 0.0f;
  }
}

/* The output columns ow in [*lo, *hi) whose input column ow + kj - pad
 * lies inside 0..W-1 (the others read the zero padding). */
static void valid_columns(int kj, int pad, int W, int OW, int *lo, int *hi) {
  *lo = pad - kj > 0 ? pad - kj : 0;
  *hi = W + pad - kj < OW ? W + pad - kj : OW;
  if (*lo > OW)
    *lo = OW;
  if (*hi < *lo)
    *hi = *lo;
}

/* col (C*K*K, OH*OW) from one sample's inp (C, H, W). */
static void im2col(float *col, const float *inp, int C, int H, int W, int K,
                   int pad, int OH, int OW) {
  for (int c = 0; c < C; c++) {
    for (int ki = 0; ki < K; ki++) {
      for (int kj = 0; kj < K; kj++) {
        float *row = col + ((size_t)(c * K + ki) * K + kj) * OH * OW;
        int lo, hi;
        valid_columns(kj, pad, W, OW, &lo, &hi);
        for (int oh = 0; oh < OH; oh++) {
          int ih = oh + ki - pad;
          float *dst = row + (size_t)oh * OW;
          if (ih < 0 || ih >= H) {
            memset(dst, 0, (size_t)OW * sizeof(float));
            continue;
          }
          /* dst[lo..hi) = the input row from column lo + kj - pad; the
           * padding columns either side are zero. */
          const float *src = inp + ((size_t)c * H + ih) * W;
          for (int ow = 0; ow < lo; ow++)
            dst[ow] = 0.0f;
          for (int ow = lo; ow < hi; ow++)
            dst[ow] = src[ow + kj - pad];
          for (int ow = hi; ow < OW; ow++)
            dst[ow] = 0.0f;
        }
      }
    }
  }
}

/* dinp (C, H, W) = sum of dcol (C*K*K, OH*OW) entries back at their pixels. */
static void col2im(float *dinp, const float *dcol, int C, int H, int W, int K,
                   int pad, int OH, int OW) {
  memset(dinp, 0, (size_t)C * H * W * sizeof(float));
  for (int c = 0; c < C; c++) {
    for (int ki = 0; ki < K; ki++) {
      for (int kj = 0; kj < K; kj++) {
        const float *row = dcol + ((size_t)(c * K + ki) * K + kj) * OH * OW;
        int lo, hi;
        valid_columns(kj, pad, W, OW, &lo, &hi);
        for (int oh = 0; oh < OH; oh++) {
          int ih = oh + ki - pad;
          if (ih < 0 || ih >= H)
            continue;
          float *dst = dinp + ((size_t)c * H + ih) * W;
          const float *src = row + (size_t)oh * OW;
          for (int ow = lo; ow < hi; ow++)
            dst[ow + kj - pad] += src[ow];
        }
      }
    }
  }
}

void conv2d_forward(float *out, const float *inp, const float *weight,
                    const float *bias, float *col, int B, int C, int H, int W,
                    int OC, int K, int pad) {
  int OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;
  int CKK = C * K * K, P = OH * OW;
  for (int b = 0; b < B; b++) {
    const float *x = inp + (size_t)b * C * H * W;
    float *y = out + (size_t)b * OC * P;
    im2col(col, x, C, H, W, K, pad, OH, OW);
    for (int o = 0; o < OC; o++)
      for (int p = 0; p < P; p++)
        y[(size_t)o * P + p] = bias[o];
    /* y (OC, P) += weight (OC, CKK) @ col (CKK, P) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, P, CKK, 1.0f,
                weight, CKK, col, P, 1.0f, y, P);
  }
}

void conv2d_backward(float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *weight,
                     float *col, float *dcol, int B, int C, int H, int W,
                     int OC, int K, int pad) {
  int OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;
  int CKK = C * K * K, P = OH * OW;
  for (int b = 0; b < B; b++) {
    const float *x = inp + (size_t)b * C * H * W;
    const float *dy = dout + (size_t)b * OC * P;
    /* Recomputing im2col here costs far less than the products below and
     * saves keeping B columns matrices alive between forward and backward. */
    im2col(col, x, C, H, W, K, pad, OH, OW);
    /* dweight (OC, CKK) += dy (OC, P) @ col^T (P, CKK) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, CKK, P, 1.0f, dy, P,
                col, P, 1.0f, dweight, CKK);
    for (int o = 0; o < OC; o++) {
      float s = 0.0f;
      for (int p = 0; p < P; p++)
        s += dy[(size_t)o * P + p];
      dbias[o] += s;
    }
    if (dinp) {
      /* dcol (CKK, P) = weight^T (CKK, OC) @ dy (OC, P) */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, P, OC, 1.0f,
                  weight, CKK, dy, P, 0.0f, dcol, P);
      col2im(dinp + (size_t)b * C * H * W, dcol, C, H, W, K, pad, OH, OW);
    }
  }
}

void maxpool2x2_forward(float *out, int *argmax, const float *inp, int B, int C,
                        int H, int W) {
  int OH = H / 2, OW = W / 2;
  for (size_t plane = 0; plane < (size_t)B * C; plane++) {
    const float *x = inp + plane * H * W;
    float *y = out + plane * OH * OW;
    int *am = argmax + plane * OH * OW;
    for (int oh = 0; oh < OH; oh++) {
      for (int ow = 0; ow < OW; ow++) {
        int best = (2 * oh) * W + 2 * ow;
        /* Ties keep the first in row-major order, as PyTorch does. */
        const int cand[3] = {best + 1, best + W, best + W + 1};
        for (int k = 0; k < 3; k++)
          if (x[cand[k]] > x[best])
            best = cand[k];
        y[oh * OW + ow] = x[best];
        am[oh * OW + ow] = best;
      }
    }
  }
}

void maxpool2x2_backward(float *dinp, const float *dout, const int *argmax,
                         int B, int C, int H, int W) {
  int OH = H / 2, OW = W / 2;
  memset(dinp, 0, (size_t)B * C * H * W * sizeof(float));
  for (size_t plane = 0; plane < (size_t)B * C; plane++) {
    float *dx = dinp + plane * H * W;
    const float *dy = dout + plane * OH * OW;
    const int *am = argmax + plane * OH * OW;
    for (int i = 0; i < OH * OW; i++)
      dx[am[i]] += dy[i];
  }
}

double softmax_cross_entropy_forward(float *probs, const float *logits,
                                     const unsigned char *targets, int B, int V,
                                     int *correct) {
  double loss = 0.0;
  int hits = 0;
  for (int b = 0; b < B; b++) {
    const float *z = logits + (size_t)b * V;
    float *p = probs + (size_t)b * V;
    float maxv = -FLT_MAX;
    int arg = 0;
    for (int v = 0; v < V; v++) {
      if (z[v] > maxv) {
        maxv = z[v];
        arg = v;
      }
    }
    /* Subtracting the maximum keeps exp() from overflowing. */
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
      p[v] = expf(z[v] - maxv);
      sum += p[v];
    }
    for (int v = 0; v < V; v++)
      p[v] = (float)(p[v] / sum);
    int t = targets[b];
    /* log p[t] computed from the logits, not from p, so it stays finite. */
    loss += -((double)z[t] - maxv - log(sum));
    hits += (arg == t);
  }
  if (correct)
    *correct = hits;
  return loss;
}

void softmax_cross_entropy_backward(float *dlogits, const float *probs,
                                    const unsigned char *targets, int B, int V,
                                    float scale) {
  for (int b = 0; b < B; b++) {
    const float *p = probs + (size_t)b * V;
    float *d = dlogits + (size_t)b * V;
    for (int v = 0; v < V; v++)
      d[v] = (p[v] - (v == targets[b] ? 1.0f : 0.0f)) * scale;
  }
}
