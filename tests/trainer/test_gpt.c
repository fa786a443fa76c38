/*
 * test_gpt.c - gradient checks of the transformer's layers (gpt_layers.h)
 * and of the whole --model gpt against central finite differences, plus
 * causality, the gradient hooks' order, the text windows and deterministic
 * generation.
 *
 * Tolerances: layers run in float32 and the checked scalar is
 * L = sum(out * R) for a fixed random R, accumulated in double. Every layer
 * here is smooth (no ReLU kinks), so with step h the central difference has
 * a truncation error of h^2 |f'''| / 6 and a rounding error of about
 * sqrt(n) * 6e-8 * |out| / (2h). With h = 1e-2 and outputs of size O(1)
 * (n < 1000 outputs) both stay below 5e-4; we accept
 * |analytic - numeric| <= 2e-3 * max(1, |analytic|), which a wrong index, a
 * missing term or a wrong sign (errors of O(0.1) or more) cannot pass.
 * The whole model uses h = 1e-2 on the mean loss, whose gradients are
 * smaller (O(1e-2)): there we accept 5e-3 relative plus 5e-5 absolute on
 * every sampled coordinate (the test prints the worst error as a share of
 * that tolerance; VERBOSE=1 prints every coordinate).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpt.h"
#include "gpt_layers.h"
#include "layers.h"
#include "model.h"
#include "rng.h"
#include "text.h"

#define TOL 2e-3
#define STEP 1e-2f

static rng R;

static float *rand_array(size_t n, float scale) {
  float *a = malloc(n * sizeof(float));
  assert_non_null(a);
  for (size_t i = 0; i < n; i++)
    a[i] = (2.0f * rng_uniform(&R) - 1.0f) * scale;
  return a;
}

static float *zeros(size_t n) {
  float *a = calloc(n, sizeof(float));
  assert_non_null(a);
  return a;
}

static double dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * b[i];
  return s;
}

/* Runs a layer's forward and returns L = sum(out * R). */
typedef double (*loss_fn)(void *ctx);

/* Compares analytic[0..n) with central differences of f in x[0..n). */
static void check_grad(loss_fn f, void *ctx, float *x, const float *analytic,
                       size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = keep + STEP;
    double lp = f(ctx);
    x[i] = keep - STEP;
    double lm = f(ctx);
    x[i] = keep;
    double numeric = (lp - lm) / (2.0 * STEP);
    double tol = TOL * (fabs(analytic[i]) > 1.0 ? fabs(analytic[i]) : 1.0);
    if (fabs(analytic[i] - numeric) > tol)
      fail_msg("%s[%zu]: analytic %.6g vs finite difference %.6g", what, i,
               analytic[i], numeric);
  }
}

/* ---- embeddings ---- */

typedef struct embed_ctx {
  int N, C, V, B, T;
  int *ids;
  float *weight, *wpe, *out, *r;
} embed_ctx;

static double embed_loss(void *p) {
  embed_ctx *c = p;
  embedding_forward(c->out, c->ids, c->weight, c->N, c->C);
  position_embedding_forward(c->out, c->wpe, c->B, c->T, c->C);
  return dot(c->out, c->r, (size_t)c->N * c->C);
}

static void test_embeddings(void **state) {
  (void)state;
  embed_ctx c = {.B = 2, .T = 3, .C = 4, .V = 5};
  c.N = c.B * c.T;
  int ids[6] = {0, 3, 3, 4, 1, 3}; /* repeats: gradients must add up */
  c.ids = ids;
  c.weight = rand_array((size_t)c.V * c.C, 1.0f);
  c.wpe = rand_array((size_t)c.T * c.C, 1.0f);
  c.out = zeros((size_t)c.N * c.C);
  c.r = rand_array((size_t)c.N * c.C, 1.0f);
  float *dw = zeros((size_t)c.V * c.C), *dwpe = zeros((size_t)c.T * c.C);
  embedding_backward(dw, c.ids, c.r, c.N, c.C);
  position_embedding_backward(dwpe, c.r, c.B, c.T, c.C);
  check_grad(embed_loss, &c, c.weight, dw, (size_t)c.V * c.C,
             "embedding dweight");
  check_grad(embed_loss, &c, c.wpe, dwpe, (size_t)c.T * c.C,
             "position_embedding dweight");
  /* token 2 never occurs: its row's gradient is exactly zero */
  for (int k = 0; k < c.C; k++)
    assert_true(dw[2 * c.C + k] == 0.0f);
  free(c.weight); free(c.wpe); free(c.out); free(c.r); free(dw); free(dwpe);
}

/* ---- layernorm ---- */

typedef struct ln_ctx {
  int N, C;
  float *inp, *weight, *bias, *out, *mean, *rstd, *r;
} ln_ctx;

static double ln_loss(void *p) {
  ln_ctx *c = p;
  layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->weight, c->bias, c->N,
                    c->C);
  return dot(c->out, c->r, (size_t)c->N * c->C);
}

static void test_layernorm(void **state) {
  (void)state;
  ln_ctx c = {.N = 5, .C = 37}; /* two blocks of LANES (16) and a tail */
  size_t n = (size_t)c.N * c.C;
  c.inp = rand_array(n, 2.0f);
  for (size_t i = 0; i < n; i++)
    c.inp[i] += 3.0f; /* a mean far from zero */
  c.weight = rand_array((size_t)c.C, 1.0f);
  c.bias = rand_array((size_t)c.C, 1.0f);
  c.out = zeros(n);
  c.mean = zeros((size_t)c.N);
  c.rstd = zeros((size_t)c.N);
  c.r = rand_array(n, 1.0f);
  float *dinp = rand_array(n, 1.0f), *before = malloc(n * sizeof(float));
  memcpy(before, dinp, n * sizeof(float));
  float *dw = zeros((size_t)c.C), *db = zeros((size_t)c.C);
  ln_loss(&c);
  layernorm_backward(dinp, dw, db, c.r, c.inp, c.mean, c.rstd, c.weight, c.N,
                     c.C);
  /* dinp accumulates: subtract what was there */
  for (size_t i = 0; i < n; i++)
    dinp[i] -= before[i];
  check_grad(ln_loss, &c, c.inp, dinp, n, "layernorm dinp");
  check_grad(ln_loss, &c, c.weight, dw, (size_t)c.C, "layernorm dweight");
  check_grad(ln_loss, &c, c.bias, db, (size_t)c.C, "layernorm dbias");
  /* torch.nn.LayerNorm's definition, on the first row */
  ln_loss(&c);
  double m = 0.0, v = 0.0;
  for (int k = 0; k < c.C; k++)
    m += c.inp[k];
  m /= c.C;
  for (int k = 0; k < c.C; k++)
    v += (c.inp[k] - m) * (c.inp[k] - m);
  v /= c.C;
  for (int k = 0; k < c.C; k++) {
    double want = (c.inp[k] - m) / sqrt(v + 1e-5) * c.weight[k] + c.bias[k];
    assert_float_equal(c.out[k], want, 1e-5);
  }
  free(c.inp); free(c.weight); free(c.bias); free(c.out); free(c.mean);
  free(c.rstd); free(c.r); free(dinp); free(before); free(dw); free(db);
}

/* ---- attention ---- */

typedef struct attn_ctx {
  int B, T, C, NH;
  float *qkv, *qkvr, *yr, *out, *att, *r;
} attn_ctx;

static double attn_loss(void *p) {
  attn_ctx *c = p;
  attention_forward(c->out, c->qkvr, c->att, c->yr, c->qkv, c->B, c->T, c->C,
                    c->NH);
  return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void test_attention(void **state) {
  (void)state;
  attn_ctx c = {.B = 2, .T = 19, .C = 6, .NH = 2}; /* rows longer than LANES */
  size_t nqkv = (size_t)c.B * c.T * 3 * c.C, nout = (size_t)c.B * c.T * c.C;
  c.qkv = rand_array(nqkv, 1.0f);
  c.out = zeros(nout);
  c.att = zeros((size_t)c.B * c.NH * c.T * c.T);
  c.qkvr = zeros(nqkv);
  c.yr = zeros(nout);
  c.r = rand_array(nout, 1.0f);
  float *dqkv = rand_array(nqkv, 1.0f); /* overwritten */
  float *dqkvr = rand_array(nqkv, 1.0f); /* scratch */
  float *datt = rand_array((size_t)c.B * c.NH * c.T * c.T, 1.0f);
  attn_loss(&c);
  /* out against the definition, one (sequence, head, position) at a time */
  int hs = c.C / c.NH;
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.NH; h++)
      for (int i = 0; i < c.T; i++) {
        const float *q = c.qkv + ((size_t)b * c.T + i) * 3 * c.C + h * hs;
        double w[32], sum = 0.0, maxv = -1e30;
        for (int j = 0; j <= i; j++) {
          const float *k = c.qkv + ((size_t)b * c.T + j) * 3 * c.C + c.C + h * hs;
          w[j] = dot(q, k, (size_t)hs) / sqrt((double)hs);
          maxv = w[j] > maxv ? w[j] : maxv;
        }
        for (int j = 0; j <= i; j++)
          sum += (w[j] = exp(w[j] - maxv));
        for (int d = 0; d < hs; d++) {
          double want = 0.0;
          for (int j = 0; j <= i; j++)
            want += w[j] / sum *
                    c.qkv[((size_t)b * c.T + j) * 3 * c.C + 2 * c.C + h * hs + d];
          assert_float_equal(c.out[((size_t)b * c.T + i) * c.C + h * hs + d],
                             want, 1e-5);
        }
      }
  /* probabilities: rows sum to 1, nothing above the diagonal */
  for (int row = 0; row < c.B * c.NH * c.T; row++) {
    int i = row % c.T;
    double s = 0.0;
    for (int j = 0; j < c.T; j++) {
      float a = c.att[(size_t)row * c.T + j];
      s += a;
      if (j > i)
        assert_true(a == 0.0f);
    }
    assert_float_equal(s, 1.0, 1e-5);
  }
  attention_backward(dqkv, dqkvr, datt, c.r, c.qkvr, c.att, c.B, c.T, c.C,
                     c.NH);
  check_grad(attn_loss, &c, c.qkv, dqkv, nqkv, "attention dqkv");
  free(c.qkv); free(c.qkvr); free(c.yr); free(c.out); free(c.att); free(c.r);
  free(dqkv); free(dqkvr); free(datt);
}

/* ---- gelu and residual ---- */

typedef struct pointwise_ctx {
  size_t n;
  float *a, *b, *out, *r;
  int residual;
} pointwise_ctx;

static double pointwise_loss(void *p) {
  pointwise_ctx *c = p;
  if (c->residual)
    residual_forward(c->out, c->a, c->b, c->n);
  else
    gelu_forward(c->out, c->a, c->n);
  return dot(c->out, c->r, c->n);
}

static void test_gelu(void **state) {
  (void)state;
  pointwise_ctx c = {.n = 40};
  c.a = rand_array(c.n, 3.0f);
  c.out = zeros(c.n);
  c.r = rand_array(c.n, 1.0f);
  float *dinp = zeros(c.n);
  gelu_backward(dinp, c.r, c.a, c.n);
  check_grad(pointwise_loss, &c, c.a, dinp, c.n, "gelu dinp");
  /* GPT-2's tanh form at a few points: 0 -> 0, large x -> x, 1 -> 0.8412 */
  float x[3] = {0.0f, 6.0f, 1.0f}, y[3];
  gelu_forward(y, x, 3);
  assert_float_equal(y[0], 0.0f, 1e-7);
  assert_float_equal(y[1], 6.0f, 1e-5);
  assert_float_equal(y[2], 0.841192f, 1e-5);
  /* and against tanh, within float rounding, across the range */
  for (int i = -1600; i <= 1600; i++) {
    float xi = (float)i / 100.0f, yi;
    gelu_forward(&yi, &xi, 1);
    double u = 0.7978845608028654 * (xi + 0.044715 * xi * xi * xi);
    double want = 0.5 * xi * (1.0 + tanh(u));
    assert_float_equal(yi, want, 2e-7 * (fabs(want) > 1.0 ? fabs(want) : 1.0));
  }
  free(c.a); free(c.out); free(c.r); free(dinp);
}

static void test_residual(void **state) {
  (void)state;
  pointwise_ctx c = {.n = 20, .residual = 1};
  c.a = rand_array(c.n, 1.0f);
  c.b = rand_array(c.n, 1.0f);
  c.out = zeros(c.n);
  c.r = rand_array(c.n, 1.0f);
  float *da = zeros(c.n), *db = zeros(c.n);
  residual_backward(da, db, c.r, c.n);
  check_grad(pointwise_loss, &c, c.a, da, c.n, "residual dinp1");
  check_grad(pointwise_loss, &c, c.b, db, c.n, "residual dinp2");
  residual_backward(da, db, c.r, c.n); /* accumulates */
  assert_float_equal(da[3], 2.0f * c.r[3], 1e-6);
  free(c.a); free(c.b); free(c.out); free(c.r); free(da); free(db);
}

/* ---- the whole model ---- */

static const gpt_config TINY = {.n_layer = 2, .n_head = 2, .d_model = 8,
                                .context = 6};

static void random_tokens(float *x, unsigned char *y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)rng_below(&R, 256);
    y[i] = (unsigned char)rng_below(&R, 256);
  }
}

/* Mean loss over the batch against finite differences, on 6 random
 * coordinates of every tensor (and all of the LayerNorm gains of block 0). */
static void test_model_gpt(void **state) {
  (void)state;
  int B = 3;
  model m;
  assert_int_equal(model_create_gpt(&m, &TINY, B), 0);
  assert_int_equal(m.num_params, 12 * TINY.n_layer + 5);
  rng init;
  rng_seed(&init, 11);
  model_init_params(&m, &init);
  /* Larger embeddings than GPT-2's 0.02 so that every path carries a
   * gradient well above the rounding floor. */
  for (int p = 0; p < 2; p++)
    for (size_t i = 0; i < m.views[p].numel; i++)
      m.params[m.views[p].offset + i] *= 25.0f;
  size_t n = (size_t)B * TINY.context;
  float *x = malloc(n * sizeof(float));
  unsigned char *y = malloc(n);
  random_tokens(x, y, n);
  model_zero_grad(&m);
  model_forward(&m, x, y, B, NULL);
  model_backward(&m, B, 1.0f / B);
  int checked = 0;
  double worst = 0.0;
  for (int p = 0; p < m.num_params; p++) {
    const param_view *v = &m.views[p];
    for (int k = 0; k < 6; k++) {
      size_t i = v->offset + rng_below(&R, v->numel);
      float keep = m.params[i];
      m.params[i] = keep + STEP;
      double lp = model_forward(&m, x, y, B, NULL) / B;
      m.params[i] = keep - STEP;
      double lm = model_forward(&m, x, y, B, NULL) / B;
      m.params[i] = keep;
      double num = (lp - lm) / (2.0 * STEP), ana = m.grads[i];
      double err = fabs(num - ana) / (5e-3 * fabs(ana) + 5e-5);
      if (err > worst)
        worst = err;
      if (getenv("VERBOSE"))
        print_message("%s[%zu]: %g vs %g\n", v->name, i - v->offset, ana, num);
      if (err > 1.0)
        fail_msg("%s[%zu]: analytic %.6g vs finite difference %.6g", v->name,
                 i - v->offset, ana, num);
      checked++;
    }
  }
  print_message("gpt: %d coordinates, worst error %.2f of the tolerance\n",
                checked, worst);
  free(x);
  free(y);
  model_free(&m);
}

/* Causal attention: the logits of positions 0..2 do not depend on the
 * tokens at positions 3.. (and those of later positions do). */
static void test_causal(void **state) {
  (void)state;
  model m;
  assert_int_equal(model_create_gpt(&m, &TINY, 1), 0);
  rng init;
  rng_seed(&init, 5);
  model_init_params(&m, &init);
  int T = TINY.context, V = MODEL_GPT_VOCAB, keep = 3;
  float xa[6], xb[6];
  unsigned char y[6];
  random_tokens(xa, y, (size_t)T);
  memcpy(xb, xa, sizeof xa);
  for (int t = keep; t < T; t++)
    xb[t] = (float)(((int)xa[t] + 7) % 256);
  float *la = malloc((size_t)T * V * sizeof(float));
  model_forward(&m, xa, y, 1, NULL);
  memcpy(la, gpt_logits(&m), (size_t)T * V * sizeof(float));
  model_forward(&m, xb, y, 1, NULL);
  const float *lb = gpt_logits(&m);
  for (size_t i = 0; i < (size_t)keep * V; i++)
    assert_float_equal(la[i], lb[i], 1e-6);
  double diff = 0.0;
  for (size_t i = (size_t)keep * V; i < (size_t)T * V; i++)
    diff += fabs(la[i] - lb[i]);
  assert_true(diff > 1e-3);
  free(la);
  model_free(&m);
}

/* grad_ready: every tensor once, in reverse registration order;
 * param_needed: the first tensor of each layer, forward then backward. */
static int seen[MODEL_MAX_PARAMS], order[MODEL_MAX_PARAMS], count;
static int needed[2 * MODEL_MAX_PARAMS], needed_count;
static void record_ready(void *ctx, int p) {
  (void)ctx;
  seen[p]++;
  order[count++] = p;
}
static void record_needed(void *ctx, int p, model_pass pass) {
  (void)ctx;
  needed[needed_count++] = pass == MODEL_FORWARD ? p : -1 - p;
}

static void test_hooks(void **state) {
  (void)state;
  model m;
  assert_int_equal(model_create_gpt(&m, &TINY, 2), 0);
  m.grad_ready = record_ready;
  m.param_needed = record_needed;
  size_t n = 2 * (size_t)TINY.context;
  float *x = malloc(n * sizeof(float));
  unsigned char *y = malloc(n);
  random_tokens(x, y, n);
  memset(seen, 0, sizeof seen);
  count = needed_count = 0;
  model_forward(&m, x, y, 2, NULL);
  model_backward(&m, 2, 0.5f);
  assert_int_equal(count, m.num_params);
  for (int i = 0; i < m.num_params; i++) {
    assert_int_equal(seen[i], 1);
    assert_int_equal(order[i], m.num_params - 1 - i);
  }
  /* layers: wte, wpe, h0, h1, ln_f, lm_head */
  const gpt_params *p = &m.gpt_index;
  int layers[6] = {p->wte, p->wpe, p->blocks[0].ln1_weight,
                   p->blocks[1].ln1_weight, p->ln_f_weight, p->lm_head};
  assert_int_equal(needed_count, 12);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(needed[i], layers[i]);
    assert_int_equal(needed[6 + i], -1 - layers[5 - i]);
  }
  assert_string_equal(m.views[p->blocks[1].qkv_weight].name,
                      "h1.attn.qkv.weight");
  free(x);
  free(y);
  model_free(&m);
}

/* The same seed and parameters give the same text; another seed differs. */
static void test_generate_deterministic(void **state) {
  (void)state;
  model m;
  assert_int_equal(model_create_gpt(&m, &TINY, 1), 0);
  rng init;
  rng_seed(&init, 3);
  model_init_params(&m, &init);
  const unsigned char prompt[] = "The quick brown fox"; /* longer than T */
  unsigned char a[40], b[40], c[40];
  rng ra, rb, rc;
  rng_seed(&ra, 1);
  rng_seed(&rb, 1);
  rng_seed(&rc, 2);
  gpt_generate(&m, prompt, 19, 40, 1.0f, &ra, a);
  gpt_generate(&m, prompt, 19, 40, 1.0f, &rb, b);
  gpt_generate(&m, prompt, 19, 40, 1.0f, &rc, c);
  assert_memory_equal(a, b, sizeof a);
  assert_memory_not_equal(a, c, sizeof a);
  model_free(&m);
}

/* Windows of T + 1 bytes, not overlapping; the split is by offset. */
static void test_text_windows(void **state) {
  (void)state;
  text_corpus t;
  unsigned char bytes[100];
  for (int i = 0; i < 100; i++)
    bytes[i] = (unsigned char)i;
  t.bytes = bytes;
  t.size = 100;
  t.files = 1;
  text_dataset train, val;
  text_split(&t, 0.1, 4, &train, &val);
  assert_int_equal(train.size, 90);
  assert_int_equal(val.size, 10);
  assert_int_equal(train.count, 18); /* 90 / 5 */
  assert_int_equal(val.count, 2);
  size_t idx[2] = {3, 0};
  float x[8];
  unsigned char y[8];
  text_fill_batch(&train, idx, 2, x, y);
  assert_float_equal(x[0], 15.0f, 0); /* window 3 starts at byte 15 */
  assert_int_equal(y[0], 16);
  assert_int_equal(y[3], 19);
  assert_float_equal(x[4], 0.0f, 0);
  text_fill_batch(&val, idx + 1, 1, x, y);
  assert_float_equal(x[0], 90.0f, 0);
  assert_int_equal(y[3], 94);
}

int main(void) {
  rng_seed(&R, 2026);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embeddings),
      cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_residual),
      cmocka_unit_test(test_model_gpt),
      cmocka_unit_test(test_causal),
      cmocka_unit_test(test_hooks),
      cmocka_unit_test(test_generate_deterministic),
      cmocka_unit_test(test_text_windows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
