/*
 * test_layers.c - gradient checks of every xtrain layer and of both models
 * against central finite differences, plus the optimizers against values
 * produced by torch.optim (PyTorch 1.13) and the sampler's DistributedSampler
 * semantics.
 *
 * Tolerances: the layers run in float32. The checked scalar is
 * L = sum(out * R) for a fixed random R, accumulated in double, so for the
 * linear layers (linear, conv2d) central differences are exact up to
 * rounding: with outputs of size O(1) and step h = 1e-2 the rounding error of
 * (L(+h) - L(-h)) / 2h is about sqrt(n) * 6e-8 / 2e-2 < 1e-4. Inputs of ReLU
 * and max pooling are kept further than h from their kinks and ties, so the
 * same bound holds. Softmax cross-entropy is smooth: with h = 1e-3 the
 * truncation error h^2 * f''' stays below 1e-5. We accept
 * |analytic - numeric| <= 2e-3 * max(1, |analytic|), which a wrong index or
 * a missing term (errors of O(0.1) or more) cannot pass.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data.h"
#include "ddp.h"
#include "layers.h"
#include "model.h"
#include "optim.h"
#include "rng.h"
#include "units.h"

#define TOL 2e-3

static rng R;

static float *rand_array(size_t n, float scale) {
  float *a = malloc(n * sizeof(float));
  assert_non_null(a);
  for (size_t i = 0; i < n; i++)
    a[i] = (2.0f * rng_uniform(&R) - 1.0f) * scale;
  return a;
}

static double dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * b[i];
  return s;
}

static void check_close(double analytic, double numeric, const char *what,
                        size_t index) {
  double tol = TOL * (fabs(analytic) > 1.0 ? fabs(analytic) : 1.0);
  if (fabs(analytic - numeric) > tol)
    fail_msg("%s[%zu]: analytic %.6g vs finite difference %.6g", what, index,
             analytic, numeric);
}

/* Linear layer: L = sum(out * Rw) as a function of inp, weight, bias. */
static void test_linear(void **state) {
  (void)state;
  int B = 3, C = 7, OC = 5;
  float *inp = rand_array((size_t)B * C, 1.0f), *w = rand_array((size_t)OC * C, 1.0f);
  float *b = rand_array(OC, 1.0f), *r = rand_array((size_t)B * OC, 1.0f);
  float *out = malloc(sizeof(float) * B * OC);
  float *dinp = malloc(sizeof(float) * B * C);
  float *dw = calloc((size_t)OC * C, sizeof(float)), *db = calloc(OC, sizeof(float));
  linear_backward(dinp, dw, db, r, inp, w, B, C, OC);
  float *targets[3] = {inp, w, b};
  float *grads[3] = {dinp, dw, db};
  size_t sizes[3] = {(size_t)B * C, (size_t)OC * C, (size_t)OC};
  const char *names[3] = {"linear dinp", "linear dweight", "linear dbias"};
  float h = 1e-2f;
  for (int t = 0; t < 3; t++) {
    for (size_t i = 0; i < sizes[t]; i++) {
      float keep = targets[t][i];
      targets[t][i] = keep + h;
      linear_forward(out, inp, w, b, B, C, OC);
      double lp = dot(out, r, (size_t)B * OC);
      targets[t][i] = keep - h;
      linear_forward(out, inp, w, b, B, C, OC);
      double lm = dot(out, r, (size_t)B * OC);
      targets[t][i] = keep;
      check_close(grads[t][i], (lp - lm) / (2.0 * h), names[t], i);
    }
  }
  /* Backward accumulates into parameter gradients: a second call doubles. */
  float first = dw[0];
  linear_backward(dinp, dw, db, r, inp, w, B, C, OC);
  assert_float_equal(dw[0], 2.0f * first, 1e-5f * fabsf(first) + 1e-7f);
  free(inp); free(w); free(b); free(r); free(out); free(dinp); free(dw); free(db);
}

static void test_relu(void **state) {
  (void)state;
  size_t n = 40;
  float *inp = rand_array(n, 1.0f), *r = rand_array(n, 1.0f);
  for (size_t i = 0; i < n; i++) /* away from the kink at 0 */
    inp[i] += inp[i] >= 0 ? 0.1f : -0.1f;
  float *out = malloc(n * sizeof(float)), *dinp = malloc(n * sizeof(float));
  relu_forward(out, inp, n);
  relu_backward(dinp, r, out, n);
  float h = 1e-2f;
  for (size_t i = 0; i < n; i++) {
    float keep = inp[i];
    inp[i] = keep + h;
    relu_forward(out, inp, n);
    double lp = dot(out, r, n);
    inp[i] = keep - h;
    relu_forward(out, inp, n);
    double lm = dot(out, r, n);
    inp[i] = keep;
    check_close(dinp[i], (lp - lm) / (2.0 * h), "relu dinp", i);
  }
  free(inp); free(r); free(out); free(dinp);
}

static void conv_case(int pad) {
  int B = 2, C = 3, H = 6, W = 5, OC = 4, K = 3;
  int OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;
  size_t n_in = (size_t)B * C * H * W, n_w = (size_t)OC * C * K * K;
  size_t n_out = (size_t)B * OC * OH * OW, n_col = conv2d_scratch(C, H, W, K, pad);
  float *inp = rand_array(n_in, 1.0f), *w = rand_array(n_w, 1.0f);
  float *b = rand_array(OC, 1.0f), *r = rand_array(n_out, 1.0f);
  float *out = malloc(n_out * sizeof(float)), *dinp = malloc(n_in * sizeof(float));
  float *col = malloc(n_col * sizeof(float)), *dcol = malloc(n_col * sizeof(float));
  float *dw = calloc(n_w, sizeof(float)), *db = calloc(OC, sizeof(float));
  conv2d_backward(dinp, dw, db, r, inp, w, col, dcol, B, C, H, W, OC, K, pad);
  float *targets[3] = {inp, w, b};
  float *grads[3] = {dinp, dw, db};
  size_t sizes[3] = {n_in, n_w, (size_t)OC};
  const char *names[3] = {"conv2d dinp", "conv2d dweight", "conv2d dbias"};
  float h = 1e-2f;
  for (int t = 0; t < 3; t++) {
    for (size_t i = 0; i < sizes[t]; i++) {
      float keep = targets[t][i];
      targets[t][i] = keep + h;
      conv2d_forward(out, inp, w, b, col, B, C, H, W, OC, K, pad);
      double lp = dot(out, r, n_out);
      targets[t][i] = keep - h;
      conv2d_forward(out, inp, w, b, col, B, C, H, W, OC, K, pad);
      double lm = dot(out, r, n_out);
      targets[t][i] = keep;
      check_close(grads[t][i], (lp - lm) / (2.0 * h), names[t], i);
    }
  }
  /* And the forward against a direct convolution, independent of im2col. */
  conv2d_forward(out, inp, w, b, col, B, C, H, W, OC, K, pad);
  for (int bb = 0; bb < B; bb++)
    for (int o = 0; o < OC; o++)
      for (int y = 0; y < OH; y++)
        for (int x = 0; x < OW; x++) {
          double s = b[o];
          for (int c = 0; c < C; c++)
            for (int i = 0; i < K; i++)
              for (int j = 0; j < K; j++) {
                int iy = y + i - pad, ix = x + j - pad;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                  s += (double)w[((o * C + c) * K + i) * K + j] *
                       inp[((bb * C + c) * H + iy) * W + ix];
              }
          assert_float_equal(out[((bb * OC + o) * OH + y) * OW + x], s, 1e-4);
        }
  free(inp); free(w); free(b); free(r); free(out); free(dinp);
  free(col); free(dcol); free(dw); free(db);
}

static void test_conv2d_pad0(void **state) { (void)state; conv_case(0); }
static void test_conv2d_pad2(void **state) { (void)state; conv_case(2); }

static void test_maxpool(void **state) {
  (void)state;
  int B = 2, C = 2, H = 4, W = 6;
  size_t n_in = (size_t)B * C * H * W, n_out = n_in / 4;
  float *inp = malloc(n_in * sizeof(float)), *r = rand_array(n_out, 1.0f);
  /* A shuffled ramp: distinct values 0.1 apart, so h = 1e-2 never swaps a
   * maximum. */
  for (size_t i = 0; i < n_in; i++)
    inp[i] = 0.1f * (float)i;
  for (size_t i = n_in; i > 1; i--) {
    size_t j = rng_below(&R, i);
    float t = inp[i - 1];
    inp[i - 1] = inp[j];
    inp[j] = t;
  }
  float *out = malloc(n_out * sizeof(float)), *dinp = malloc(n_in * sizeof(float));
  int *am = malloc(n_out * sizeof(int));
  maxpool2x2_forward(out, am, inp, B, C, H, W);
  maxpool2x2_backward(dinp, r, am, B, C, H, W);
  float h = 1e-2f;
  for (size_t i = 0; i < n_in; i++) {
    float keep = inp[i];
    inp[i] = keep + h;
    maxpool2x2_forward(out, am, inp, B, C, H, W);
    double lp = dot(out, r, n_out);
    inp[i] = keep - h;
    maxpool2x2_forward(out, am, inp, B, C, H, W);
    double lm = dot(out, r, n_out);
    inp[i] = keep;
    check_close(dinp[i], (lp - lm) / (2.0 * h), "maxpool dinp", i);
  }
  free(inp); free(r); free(out); free(dinp); free(am);
}

static void test_softmax_cross_entropy(void **state) {
  (void)state;
  int B = 4, V = 10;
  float *logits = rand_array((size_t)B * V, 3.0f);
  unsigned char targets[4] = {0, 3, 9, 5};
  float *probs = malloc(sizeof(float) * B * V), *d = malloc(sizeof(float) * B * V);
  double loss = softmax_cross_entropy_forward(probs, logits, targets, B, V, NULL);
  /* Independent reference of the loss in double. */
  double ref = 0.0;
  for (int b = 0; b < B; b++) {
    double s = 0.0;
    for (int v = 0; v < V; v++)
      s += exp((double)logits[b * V + v]);
    ref += log(s) - logits[b * V + targets[b]];
  }
  assert_true(fabs(loss - ref) < 1e-5 * ref);
  softmax_cross_entropy_backward(d, probs, targets, B, V, 1.0f / B);
  float h = 1e-3f;
  for (int i = 0; i < B * V; i++) {
    float keep = logits[i];
    logits[i] = keep + h;
    double lp = softmax_cross_entropy_forward(probs, logits, targets, B, V, NULL);
    logits[i] = keep - h;
    double lm = softmax_cross_entropy_forward(probs, logits, targets, B, V, NULL);
    logits[i] = keep;
    check_close(d[i], (lp - lm) / (2.0 * h) / B, "softmax_ce dlogits", (size_t)i);
  }
  free(logits); free(probs); free(d);
}

/* Whole-model check: forward + backward wiring, on a few coordinates of
 * every tensor. Mean loss over the batch. A bias moves every sample's
 * pre-activation at once, so a step can cross a ReLU kink or swap a pooling
 * maximum; with h = 1e-3 that is rare, and we require 95% of coordinates
 * within 1e-2 relative (a wiring error breaks whole tensors, not 5%). */
static void model_case(model_kind kind) {
  int B = 4;
  model m;
  assert_int_equal(model_create(&m, kind, 4, 6, B), 0);
  rng init;
  rng_seed(&init, 7);
  model_init_params(&m, &init);
  float *x = rand_array((size_t)B * 784, 1.0f);
  unsigned char y[4] = {1, 7, 3, 0};
  model_zero_grad(&m);
  model_forward(&m, x, y, B, NULL);
  model_backward(&m, B, 1.0f / B);
  int checked = 0, good = 0;
  float h = 1e-3f; /* smaller than for single layers: fewer ReLU kinks crossed */
  for (int p = 0; p < m.num_params; p++) {
    const param_view *v = &m.views[p];
    for (int k = 0; k < 6; k++) {
      size_t i = v->offset + rng_below(&R, v->numel);
      float keep = m.params[i];
      m.params[i] = keep + h;
      double lp = model_forward(&m, x, y, B, NULL) / B;
      m.params[i] = keep - h;
      double lm = model_forward(&m, x, y, B, NULL) / B;
      m.params[i] = keep;
      double num = (lp - lm) / (2.0 * h), ana = m.grads[i];
      checked++;
      int ok = fabs(num - ana) <= 1e-2 * (fabs(ana) > 0.1 ? fabs(ana) : 0.1);
      if (!ok && getenv("VERBOSE"))
        print_message("%s[%zu]: %g vs %g\n", v->name, i - v->offset, ana, num);
      good += ok;
    }
  }
  if (good < checked * 95 / 100)
    fail_msg("%s: only %d of %d coordinates match finite differences",
             model_kind_name(kind), good, checked);
  free(x);
  model_free(&m);
}

static void test_model_mlp(void **state) { (void)state; model_case(MODEL_MLP); }
static void test_model_cnn(void **state) { (void)state; model_case(MODEL_CNN); }

/* Hook order: reverse registration order, each tensor exactly once. */
static int seen[MODEL_MAX_PARAMS], seen_order[MODEL_MAX_PARAMS], seen_count;
static void record(void *ctx, int p) {
  (void)ctx;
  seen[p]++;
  seen_order[seen_count++] = p;
}
static void test_grad_ready_order(void **state) {
  (void)state;
  for (int kind = 0; kind < 2; kind++) {
    model m;
    assert_int_equal(model_create(&m, (model_kind)kind, 2, 3, 2), 0);
    m.grad_ready = record;
    float *x = rand_array(2 * 784, 1.0f);
    unsigned char y[2] = {1, 2};
    memset(seen, 0, sizeof seen);
    seen_count = 0;
    model_forward(&m, x, y, 2, NULL);
    model_backward(&m, 2, 0.5f);
    assert_int_equal(seen_count, m.num_params);
    for (int i = 0; i < m.num_params; i++) {
      assert_int_equal(seen[i], 1);
      assert_int_equal(seen_order[i], m.num_params - 1 - i);
    }
    free(x);
    model_free(&m);
  }
}

/* Expected values from PyTorch 1.13: p0 = [0.5, -1, 2, 0] and the gradients
 * below, three steps of torch.optim.SGD / AdamW. */
static const float P0[4] = {0.5f, -1.0f, 2.0f, 0.0f};
static const float G[3][4] = {{0.1f, -0.2f, 0.3f, -0.4f},
                              {-0.5f, 0.25f, 0.0f, 1.0f},
                              {0.3f, 0.3f, -0.3f, 0.2f}};

static void run_optim(optim_kind kind, float lr, float mom, float wd,
                      int nesterov, const float expect[4]) {
  optimizer o;
  assert_int_equal(optim_create(&o, kind, 4, lr, mom, wd, nesterov), 0);
  float p[4];
  memcpy(p, P0, sizeof p);
  for (int s = 0; s < 3; s++)
    optim_step(&o, p, G[s], lr);
  for (int i = 0; i < 4; i++)
    assert_float_equal(p[i], expect[i], 2e-6);
  optim_free(&o);
}

static void test_optimizers_match_torch(void **state) {
  (void)state;
  const float nesterov[4] = {0.540014803f, -1.04805052f, 1.93806863f, -0.171490625f};
  const float momentum[4] = {0.537900031f, -1.02330005f, 1.94870007f, -0.101599991f};
  const float adamw[4] = {0.495244414f, -0.993936002f, 1.9781909f, 0.00103451218f};
  run_optim(OPTIM_SGD, 0.1f, 0.9f, 0.01f, 1, nesterov);
  run_optim(OPTIM_SGD, 0.1f, 0.9f, 0.0f, 0, momentum);
  run_optim(OPTIM_ADAMW, 0.01f, 0.0f, 0.1f, 0, adamw);
}

static void test_schedule_and_clip(void **state) {
  (void)state;
  assert_float_equal(schedule_lr(SCHEDULE_CONSTANT, 0.1f, 50, 10, 100), 0.1f, 0);
  assert_float_equal(schedule_lr(SCHEDULE_COSINE, 0.1f, 0, 10, 110), 0.01f, 1e-7);
  assert_float_equal(schedule_lr(SCHEDULE_COSINE, 0.1f, 9, 10, 110), 0.1f, 1e-7);
  assert_float_equal(schedule_lr(SCHEDULE_COSINE, 0.1f, 10, 10, 110), 0.1f, 1e-7);
  assert_float_equal(schedule_lr(SCHEDULE_COSINE, 0.1f, 60, 10, 110), 0.05f, 1e-7);
  assert_float_equal(schedule_lr(SCHEDULE_COSINE, 0.1f, 110, 10, 110), 0.0f, 1e-7);
  float g[2] = {3.0f, 4.0f};
  assert_float_equal(clip_grad_norm(g, 2, 1.0), 5.0, 1e-6);
  assert_float_equal(g[0], 0.6f, 1e-6);
  assert_float_equal(g[1], 0.8f, 1e-6);
  float g2[2] = {0.3f, 0.4f};
  clip_grad_norm(g2, 2, 1.0); /* below the limit: untouched */
  assert_float_equal(g2[0], 0.3f, 0);
}

/* DistributedSampler: ranks share one permutation, padded to a multiple of
 * W; rank r holds entries r, r+W, ...; all together cover every index. */
static void test_sampler(void **state) {
  (void)state;
  size_t n = 10;
  for (int W = 1; W <= 4; W++) {
    for (int drop = 0; drop <= 1; drop++) {
      size_t per = drop ? n / W : (n + W - 1) / W;
      size_t *all = malloc(per * W * sizeof(size_t));
      int count[10] = {0};
      for (int r = 0; r < W; r++) {
        sampler s;
        assert_int_equal(sampler_init(&s, n, r, W, drop, 42), 0);
        assert_int_equal(s.num_samples, per);
        assert_int_equal(sampler_set_epoch(&s, 3), 0);
        for (size_t i = 0; i < per; i++) {
          all[r + i * W] = s.indices[i];
          count[s.indices[i]]++;
        }
        sampler_free(&s);
      }
      /* The interleaving is the single-rank permutation, cut or padded by
       * repeating its start. */
      sampler one;
      assert_int_equal(sampler_init(&one, n, 0, 1, 0, 42), 0);
      assert_int_equal(sampler_set_epoch(&one, 3), 0);
      for (size_t k = 0; k < per * W; k++)
        assert_int_equal(all[k], one.indices[k % n]);
      if (!drop)
        for (size_t i = 0; i < n; i++)
          assert_true(count[i] >= 1);
      sampler_free(&one);
      free(all);
    }
  }
  /* Another epoch gives another order. */
  sampler a, b;
  sampler_init(&a, 100, 0, 1, 0, 42);
  sampler_init(&b, 100, 0, 1, 0, 42);
  sampler_set_epoch(&a, 0);
  sampler_set_epoch(&b, 1);
  assert_memory_not_equal(a.indices, b.indices, 100 * sizeof(size_t));
  sampler_free(&a);
  sampler_free(&b);
}

/* Bucket layout (no communicator needed: ddp_init only plans). MLP tensors
 * in reverse order, floats: fc3.bias 10, fc3.weight 2560, fc2.bias 256,
 * fc2.weight 65536, fc1.bias 256, fc1.weight 200704 (1.027 MiB in all). */
static void test_ddp_buckets(void **state) {
  (void)state;
  model m;
  assert_int_equal(model_create(&m, MODEL_MLP, 0, 0, 4), 0);
  static ddp d;
  /* Default caps (1 MiB first, 25 MiB then): fc3 and fc2 make 0.261 MiB,
   * fc1 (0.767 MiB) would overflow the first bucket, so it opens the second
   * whole: its bias is not left behind in the first. */
  ddp_init(&d, NULL, &m, 1.0, 25.0);
  assert_int_equal(d.num_buckets, 2);
  assert_int_equal(d.buckets[0].first_param, 2);
  assert_int_equal(d.buckets[0].last_param, 5);
  assert_int_equal(d.buckets[0].count, 10 + 2560 + 256 + 65536);
  assert_int_equal(d.buckets[0].offset, m.views[2].offset);
  assert_int_equal(d.buckets[1].first_param, 0);
  assert_int_equal(d.buckets[1].last_param, 1);
  assert_int_equal(d.buckets[1].count, 200704 + 256);
  assert_int_equal(d.buckets[1].offset, 0);
  for (int p = 0; p < m.num_params; p++)
    assert_int_equal(d.bucket_of_param[p], p < 2 ? 1 : 0);
  /* A first bucket large enough for everything: one bucket. */
  ddp_init(&d, NULL, &m, 2.0, 25.0);
  assert_int_equal(d.num_buckets, 1);
  assert_int_equal(d.buckets[0].count, m.num_elements);
  /* 0.25 MiB = 65536 floats: fc2 (65792) and fc1 are larger than the cap
   * and get a bucket each; the buckets tile grads from the end. */
  ddp_init(&d, NULL, &m, 0.25, 0.25);
  assert_int_equal(d.num_buckets, 3);
  assert_int_equal(d.buckets[0].count, 10 + 2560);
  assert_int_equal(d.buckets[1].count, 65536 + 256);
  assert_int_equal(d.buckets[2].count, 200704 + 256);
  size_t end = m.num_elements;
  for (int i = 0; i < d.num_buckets; i++) {
    assert_int_equal(d.buckets[i].offset + d.buckets[i].count, end);
    end = d.buckets[i].offset;
  }
  assert_int_equal(end, 0);
  model_free(&m);
}

/* FSDP units in forward order: one per layer with no minimum; fc2 (65792)
 * and fc3 (2570) share one when a unit needs 100000 parameters (fc1 has
 * 200960 and closes its own); everything in one unit above the model size.
 * CNN (channels 6, 16): conv1 (156) and conv2 (2416) join to pass 1000. */
static void test_fsdp_units(void **state) {
  (void)state;
  model m;
  unit_plan p;
  assert_int_equal(model_create(&m, MODEL_MLP, 0, 0, 4), 0);
  units_plan_forward_by_min_params(&p, &m, 0);
  assert_int_equal(p.num_units, 3);
  for (int u = 0; u < 3; u++) {
    assert_int_equal(p.units[u].first_param, 2 * u);
    assert_int_equal(p.units[u].last_param, 2 * u + 1);
  }
  units_plan_forward_by_min_params(&p, &m, 100000);
  assert_int_equal(p.num_units, 2);
  assert_int_equal(p.units[0].count, 200704 + 256);
  assert_int_equal(p.units[1].first_param, 2);
  assert_int_equal(p.units[1].last_param, 5);
  assert_int_equal(p.units[1].offset, m.views[2].offset);
  assert_int_equal(p.units[1].count, 65536 + 256 + 2560 + 10);
  for (int q = 0; q < m.num_params; q++)
    assert_int_equal(p.unit_of_param[q], q < 2 ? 0 : 1);
  units_plan_forward_by_min_params(&p, &m, 1000000);
  assert_int_equal(p.num_units, 1);
  assert_int_equal(p.units[0].count, m.num_elements);
  model_free(&m);
  assert_int_equal(model_create(&m, MODEL_CNN, 6, 16, 4), 0);
  units_plan_forward_by_min_params(&p, &m, 1000);
  assert_int_equal(p.num_units, 4);
  assert_int_equal(p.units[0].first_param, 0);
  assert_int_equal(p.units[0].last_param, 3);
  assert_int_equal(p.units[0].count, 6 * 25 + 6 + 16 * 6 * 25 + 16);
  model_free(&m);
}

/* param_needed comes before each layer, in forward then reverse order, with
 * the layer's first tensor. */
static int needed[2 * MODEL_MAX_PARAMS], needed_pass[2 * MODEL_MAX_PARAMS],
    needed_count;
static void record_needed(void *ctx, int p, model_pass pass) {
  (void)ctx;
  needed[needed_count] = p;
  needed_pass[needed_count++] = (int)pass;
}
static void test_param_needed_order(void **state) {
  (void)state;
  model m;
  assert_int_equal(model_create(&m, MODEL_MLP, 0, 0, 2), 0);
  m.param_needed = record_needed;
  float *x = rand_array(2 * 784, 1.0f);
  unsigned char y[2] = {1, 2};
  needed_count = 0;
  model_forward(&m, x, y, 2, NULL);
  model_backward(&m, 2, 0.5f);
  int want[6] = {0, 2, 4, 4, 2, 0};
  assert_int_equal(needed_count, 6);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(needed[i], want[i]);
    assert_int_equal(needed_pass[i], i < 3 ? MODEL_FORWARD : MODEL_BACKWARD);
  }
  free(x);
  model_free(&m);
}

int main(void) {
  rng_seed(&R, 12345);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_relu),
      cmocka_unit_test(test_conv2d_pad0),
      cmocka_unit_test(test_conv2d_pad2),
      cmocka_unit_test(test_maxpool),
      cmocka_unit_test(test_softmax_cross_entropy),
      cmocka_unit_test(test_model_mlp),
      cmocka_unit_test(test_model_cnn),
      cmocka_unit_test(test_grad_ready_order),
      cmocka_unit_test(test_optimizers_match_torch),
      cmocka_unit_test(test_schedule_and_clip),
      cmocka_unit_test(test_sampler),
      cmocka_unit_test(test_ddp_buckets),
      cmocka_unit_test(test_fsdp_units),
      cmocka_unit_test(test_param_needed_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
