/*
 * test_comm_hooks.c - the DDP communication hooks on one rank (a world of
 * one: every all-reduce returns its input), where their arithmetic can be
 * checked exactly:
 *  - fp16 / bf16: the gradients come back rounded to the 16-bit type,
 *    bit for bit mixed_f32_to_f16 / _bf16 of the input;
 *  - PowerSGD rank 4: a weight of rank 2 comes back unchanged (its column
 *    space is inside P's), P's columns are orthonormal, a full-rank weight
 *    comes back as its approximation with approximation + error = input,
 *    biases come back untouched, and the next step adds the error in (error
 *    feedback): with zero gradients, output + new error = old error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_hooks.h"
#include "ddp.h"
#include "mixed.h"
#include "model.h"
#include "rng.h"
#include "xcoll.h"

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                              \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

static void one_step(ddp *d) {
  ddp_begin_backward(d, 1);
  for (int b = 0; b < d->num_buckets; b++)
    ddp_bucket_ready(d, b);
  CHECK(ddp_finish_backward(d) == XCOLL_SUCCESS, "ddp_finish_backward");
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void fill_random(float *x, size_t n, rng *r) {
  for (size_t i = 0; i < n; i++)
    x[i] = 2.0f * rng_uniform(r) - 1.0f;
}

static void test_compress(xcoll_comm_t comm, comm_hook_kind kind) {
  model m;
  ddp d;
  comm_hook h;
  CHECK(model_create(&m, MODEL_MLP, 0, 0, 1) == 0, "model_create");
  ddp_init(&d, comm, &m, 0.1, 25.0);
  CHECK(comm_hook_init(&h, &m, d.world_size, kind, XCOLL_FLOAT32, 1, 0, 1)
            == 0,
        "init");
  ddp_register_comm_hook(&d, &h);
  rng r;
  rng_seed(&r, 5);
  fill_random(m.grads, m.num_elements, &r);
  m.grads[0] = 1e-6f; /* a float16 subnormal */
  float *want = malloc(m.num_elements * sizeof(float));
  for (size_t i = 0; i < m.num_elements; i++)
    want[i] = kind == COMM_HOOK_FP16
                  ? mixed_f16_to_f32(mixed_f32_to_f16(m.grads[i]))
                  : mixed_bf16_to_f32(mixed_f32_to_bf16(m.grads[i]));
  one_step(&d);
  CHECK(memcmp(want, m.grads, m.num_elements * sizeof(float)) == 0,
        "%s: one rank's gradients must come back rounded to the 16-bit type",
        comm_hook_name(kind));
  free(want);
  comm_hook_free(&h);
  model_free(&m);
}

static void test_powersgd(xcoll_comm_t comm) {
  model m;
  ddp d;
  comm_hook h;
  const int r = 4;
  CHECK(model_create(&m, MODEL_MLP, 0, 0, 1) == 0, "model_create");
  ddp_init(&d, comm, &m, 0.1, 25.0); /* several buckets */
  CHECK(d.num_buckets >= 2, "want several buckets, got %d", d.num_buckets);
  CHECK(comm_hook_init(&h, &m, d.world_size, COMM_HOOK_POWERSGD,
                       XCOLL_FLOAT32, r, 0, 3) == 0,
        "init");
  ddp_register_comm_hook(&d, &h);
  CHECK(h.num_matrices == 3, "all three MLP weights compress at rank 4, got %d",
        h.num_matrices);
  rng g;
  rng_seed(&g, 11);
  fill_random(m.grads, m.num_elements, &g);
  /* fc1.weight (256 x 784) of rank 2: u1 v1^T + u2 v2^T. */
  const param_view *fc1 = &m.views[0];
  int n = fc1->shape[0], cols = fc1->shape[1];
  float u[2][256], v[2][784];
  for (int k = 0; k < 2; k++) {
    fill_random(u[k], (size_t)n, &g);
    fill_random(v[k], (size_t)cols, &g);
  }
  float *w1 = m.grads + fc1->offset;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < cols; j++)
      w1[(size_t)i * cols + j] = u[0][i] * v[0][j] + u[1][i] * v[1][j];
  float *before = malloc(m.num_elements * sizeof(float));
  memcpy(before, m.grads, m.num_elements * sizeof(float));
  one_step(&d);
  for (int p = 0; p < m.num_params; p++) {
    const param_view *pv = &m.views[p];
    const float *out = m.grads + pv->offset, *in = before + pv->offset;
    if (h.compressed[p] < 0) {
      CHECK(memcmp(out, in, pv->numel * sizeof(float)) == 0,
            "%s: an uncompressed tensor must come back unchanged", pv->name);
      continue;
    }
    const powersgd_matrix *pm = &h.matrices[h.compressed[p]];
    /* approximation + error = input */
    float *sum = malloc(pv->numel * sizeof(float));
    for (size_t i = 0; i < pv->numel; i++)
      sum[i] = out[i] + pm->error[i];
    double e = rel_diff(sum, in, pv->numel);
    CHECK(e < 1e-6, "%s: approximation + error differs from the input by %g",
          pv->name, e);
    free(sum);
    /* P's columns orthonormal */
    const float *P = h.p_all + pm->p_offset;
    for (int a = 0; a < r; a++)
      for (int b = 0; b < r; b++) {
        double dot = 0.0;
        for (int i = 0; i < pm->n; i++)
          dot += (double)P[i * r + a] * P[i * r + b];
        CHECK(fabs(dot - (a == b)) < 1e-5, "%s: P^T P [%d][%d] = %g", pv->name,
              a, b, dot);
      }
    double approx = rel_diff(out, in, pv->numel);
    if (p == 0)
      CHECK(approx < 1e-5,
            "fc1.weight has rank 2 <= 4: it must come back "
            "unchanged, relative difference %g",
            approx);
    else
      CHECK(approx > 1e-2,
            "%s is full rank: a rank-4 approximation cannot "
            "be exact (relative difference %g)",
            pv->name, approx);
    printf("%s (%d x %d): rank-%d relative error %.3g\n", pv->name, pm->n,
           pm->m, r, approx);
  }
  /* Error feedback: zero gradients, so the input is the old error. */
  const powersgd_matrix *pm2 = &h.matrices[h.compressed[2]]; /* fc2.weight */
  size_t n2 = (size_t)pm2->n * pm2->m;
  float *old_error = malloc(n2 * sizeof(float));
  memcpy(old_error, pm2->error, n2 * sizeof(float));
  memset(m.grads, 0, m.num_elements * sizeof(float));
  one_step(&d);
  float *sum = malloc(n2 * sizeof(float));
  const float *out2 = m.grads + m.views[2].offset;
  for (size_t i = 0; i < n2; i++)
    sum[i] = out2[i] + pm2->error[i];
  double e = rel_diff(sum, old_error, n2);
  CHECK(e < 1e-6,
        "error feedback: output + new error differs from the old "
        "error by %g",
        e);
  double moved = rel_diff(out2, old_error, n2);
  CHECK(moved < 1.0,
        "the second step must send part of the old error "
        "(relative difference %g)",
        moved);
  free(sum);
  free(old_error);
  free(before);
  comm_hook_free(&h);
  model_free(&m);
}

int main(void) {
  xcoll_config cfg;
  xcoll_config_init(&cfg); /* a world of one rank */
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init(&comm, &cfg);
  if (st != XCOLL_SUCCESS) {
    printf("xcoll_comm_init: %s\n", xcoll_strerror(st));
    return 1;
  }
  test_compress(comm, COMM_HOOK_FP16);
  test_compress(comm, COMM_HOOK_BF16);
  test_powersgd(comm);
  xcoll_comm_destroy(comm);
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("comm hooks: fp16/bf16 rounding, PowerSGD approximation, "
         "orthonormal P and error feedback ok\n");
  return 0;
}
