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

/* The sum of x[0..n), in eight running sums (one per vector lane) added at
 * the end: a single running sum is a chain of dependent adds that the
 * compiler may not reorder, four cycles each. */
static float sum_floats(const float *x, size_t n) {
  float lane[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++)
      lane[l] += x[i + l];
  float s = 0.0f;
  for (; i < n; i++)
    s += x[i];
  for (int l = 0; l < 8; l++)
    s += lane[l];
  return s;
}

/* Padding is handled once per sample, not per column: the sample is copied
 * into a zero-bordered image (C, H + 2*pad, W + 2*pad), after which every
 * column row is a plain copy and every gradient row a plain add, with no
 * bounds to test and no short zero runs (GCC turns those into memset calls,
 * several per row). */

/* img (C, H + 2*pad, W + 2*pad) = inp (C, H, W) inside a zero border. */
static void pad_image(float *img, const float *inp, int C, int H, int W,
                      int pad) {
  int PH = H + 2 * pad, PW = W + 2 * pad;
  memset(img, 0, (size_t)C * PH * PW * sizeof(float));
  for (int c = 0; c < C; c++)
    for (int h = 0; h < H; h++)
      memcpy(img + ((size_t)c * PH + h + pad) * PW + pad,
             inp + ((size_t)c * H + h) * W, (size_t)W * sizeof(float));
}

/* col (C*K*K, OH*OW) from one unpadded image img (C, IH, IW), OH = IH-K+1:
 * row (c, ki, kj) holds img[c][oh + ki][ow + kj] at oh * OW + ow. */
static void im2col(float *col, const float *img, int C, int IH, int IW, int K,
                   int OH, int OW) {
  size_t P = (size_t)OH * OW;
  for (int c = 0; c < C; c++)
    for (int ki = 0; ki < K; ki++)
      for (int oh = 0; oh < OH; oh++) {
        const float *src = img + ((size_t)c * IH + oh + ki) * IW;
        float *dst = col + (size_t)(c * K + ki) * K * P + (size_t)oh * OW;
        for (int kj = 0; kj < K; kj++, dst += P)
          for (int ow = 0; ow < OW; ow++)
            dst[ow] = src[kj + ow];
      }
}

/* img (C, IH, IW) = the sum of dcol (C*K*K, OH*OW) entries back at their
 * pixels; im2col's adjoint. One column row at a time, so that consecutive
 * adds go to different image rows: adding the rows of kj and kj + 1 to the
 * same image row one after the other would load what was just stored, one
 * element off, which stalls the store-to-load forwarding. */
static void col2im(float *img, const float *dcol, int C, int IH, int IW, int K,
                   int OH, int OW) {
  size_t P = (size_t)OH * OW;
  memset(img, 0, (size_t)C * IH * IW * sizeof(float));
  for (int c = 0; c < C; c++)
    for (int ki = 0; ki < K; ki++)
      for (int kj = 0; kj < K; kj++) {
        const float *src = dcol + ((size_t)(c * K + ki) * K + kj) * P;
        float *dst = img + ((size_t)c * IH + ki) * IW + kj;
        for (int oh = 0; oh < OH; oh++, src += OW, dst += IW)
          for (int ow = 0; ow < OW; ow++)
            dst[ow] += src[ow];
      }
}

/* col (C*K*K, OH*OW) from one sample x (C, H, W); pad > 0 uses img, scratch
 * of C*(H+2*pad)*(W+2*pad) floats. */
static void sample_columns(float *col, float *img, const float *x, int C,
                           int H, int W, int K, int pad, int OH, int OW) {
  if (pad > 0) {
    pad_image(img, x, C, H, W, pad);
    x = img;
  }
  im2col(col, x, C, H + 2 * pad, W + 2 * pad, K, OH, OW);
}

size_t conv2d_scratch(int C, int H, int W, int K, int pad) {
  size_t OH = (size_t)H + 2 * pad - K + 1, OW = (size_t)W + 2 * pad - K + 1;
  size_t img = pad > 0 ? (size_t)C * (H + 2 * pad) * (W + 2 * pad) : 0;
  return (size_t)C * K * K * OH * OW + img;
}

void conv2d_forward(float *out, const float *inp, const float *weight,
                    const float *bias, float *col, int B, int C, int H, int W,
                    int OC, int K, int pad) {
  int OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;
  int CKK = C * K * K, P = OH * OW;
  float *img = col + (size_t)CKK * P;
  for (int b = 0; b < B; b++) {
    const float *x = inp + (size_t)b * C * H * W;
    float *y = out + (size_t)b * OC * P;
    sample_columns(col, img, x, C, H, W, K, pad, OH, OW);
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
  int PH = H + 2 * pad, PW = W + 2 * pad;
  float *img = col + (size_t)CKK * P, *dimg = dcol + (size_t)CKK * P;
  for (int b = 0; b < B; b++) {
    const float *x = inp + (size_t)b * C * H * W;
    const float *dy = dout + (size_t)b * OC * P;
    /* Recomputing im2col here costs far less than the products below and
     * saves keeping B columns matrices alive between forward and backward. */
    sample_columns(col, img, x, C, H, W, K, pad, OH, OW);
    /* dweight (OC, CKK) += dy (OC, P) @ col^T (P, CKK) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, CKK, P, 1.0f, dy, P,
                col, P, 1.0f, dweight, CKK);
    for (int o = 0; o < OC; o++)
      dbias[o] += sum_floats(dy + (size_t)o * P, (size_t)P);
    if (dinp) {
      /* dcol (CKK, P) = weight^T (CKK, OC) @ dy (OC, P) */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, P, OC, 1.0f,
                  weight, CKK, dy, P, 0.0f, dcol, P);
      float *dx = dinp + (size_t)b * C * H * W;
      if (pad == 0) {
        col2im(dx, dcol, C, H, W, K, OH, OW);
        continue;
      }
      /* The padded gradient's interior is the input's gradient. */
      col2im(dimg, dcol, C, PH, PW, K, OH, OW);
      for (int c = 0; c < C; c++)
        for (int h = 0; h < H; h++)
          memcpy(dx + ((size_t)c * H + h) * W,
                 dimg + ((size_t)c * PH + h + pad) * PW + pad,
                 (size_t)W * sizeof(float));
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
