/*
 * comm_hooks.c - fp16/bf16 compression and PowerSGD for DDP buckets (see
 * comm_hooks.h).
 */
#include "comm_hooks.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixed.h"
#include "rng.h"

static const char *const hook_names[] = {"none", "fp16", "bf16", "powersgd"};

int comm_hook_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, hook_names[i]) == 0)
      return i;
  return -1;
}

const char *comm_hook_name(comm_hook_kind kind) {
  return (unsigned)kind < 4 ? hook_names[kind] : "?";
}

/* A standard normal draw (Box-Muller on two uniforms). */
static float gaussian(rng *r) {
  double u1 = ((double)(rng_next(r) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
  double u2 = (double)(rng_next(r) >> 11) * 0x1p-53;
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* Lay out PowerSGD's matrices: which tensors are compressed and where
 * their P and Q live. */
static int powersgd_init(comm_hook *h, const model *m, uint64_t seed) {
  size_t p_total = 0, q_total = 0, largest = 0;
  int r = h->rank_r;
  for (int p = 0; p < m->num_params; p++) {
    const param_view *v = &m->views[p];
    h->compressed[p] = -1;
    if (v->ndim < 2)
      continue;
    size_t n = (size_t)v->shape[0], cols = v->numel / n;
    /* PyTorch compresses only where it saves bytes. */
    if ((size_t)r * (n + cols) >= n * cols)
      continue;
    powersgd_matrix *pm = &h->matrices[h->num_matrices];
    pm->param = p;
    pm->n = (int)n;
    pm->m = (int)cols;
    pm->p_offset = p_total;
    pm->q_offset = q_total;
    p_total += n * (size_t)r;
    q_total += cols * (size_t)r;
    if (n * cols > largest)
      largest = n * cols;
    h->compressed[p] = h->num_matrices++;
  }
  h->p_all = calloc(p_total ? p_total : 1, sizeof(float));
  h->q_all = calloc(q_total ? q_total : 1, sizeof(float));
  h->uncompressed = calloc(m->num_elements, sizeof(float));
  h->approx = calloc(largest ? largest : 1, sizeof(float));
  if (!h->p_all || !h->q_all || !h->uncompressed || !h->approx)
    return -1;
  for (int i = 0; i < h->num_matrices; i++) {
    powersgd_matrix *pm = &h->matrices[i];
    pm->error = calloc((size_t)pm->n * pm->m, sizeof(float));
    if (!pm->error)
      return -1;
  }
  /* The same seed on every rank: equal Q everywhere without sending it. */
  rng g;
  rng_seed(&g, seed);
  for (size_t i = 0; i < q_total; i++)
    h->q_all[i] = gaussian(&g);
  return 0;
}

int comm_hook_init(comm_hook *h, const model *m, int world_size,
                   comm_hook_kind kind, xcoll_datatype dtype, int rank_r,
                   int64_t warmup, uint64_t seed) {
  memset(h, 0, sizeof *h);
  h->kind = kind;
  h->dtype = dtype;
  h->rank_r = rank_r;
  h->warmup = warmup;
  h->world_size = world_size;
  int status = 0;
  if (kind == COMM_HOOK_FP16 || kind == COMM_HOOK_BF16) {
    h->dtype = kind == COMM_HOOK_FP16 ? XCOLL_FLOAT16 : XCOLL_BFLOAT16;
    h->lowp = malloc(m->num_elements * sizeof(uint16_t));
    status = h->lowp ? 0 : -1;
  } else if (kind == COMM_HOOK_POWERSGD) {
    status = powersgd_init(h, m, seed);
  }
  if (status != 0) {
    comm_hook_free(h);
    return -1;
  }
  return 0;
}

void comm_hook_free(comm_hook *h) {
  free(h->lowp);
  free(h->p_all);
  free(h->q_all);
  free(h->uncompressed);
  free(h->approx);
  for (int i = 0; i < h->num_matrices; i++)
    free(h->matrices[i].error);
  memset(h, 0, sizeof *h);
}

/* ---- fp16 / bf16 ---- */

static void compress_bucket(comm_hook *h, const comm_bucket *b,
                            comm_work *w) {
  uint16_t *low = h->lowp + b->offset;
  float world = (float)h->world_size;
  /* Divide in float32 first, then round once (PyTorch casts, then divides
   * in the 16-bit type: the same for power-of-two world sizes). */
  mixed_narrow(low, b->buffer, b->count, world, h->dtype);
  w->status = xcoll_iallreduce(low, low, b->count, h->dtype, XCOLL_SUM,
                               b->comm, NULL, &w->request);
  if (w->status == XCOLL_SUCCESS)
    w->wire_bytes += mixed_wire_allreduce(b->count * 2, h->world_size);
}

/* ---- PowerSGD ---- */

/* Columns of P (n x r, row-major) made orthonormal, in order: Gram-Schmidt
 * (as PyTorch's _orthogonalize_gram_schmidt), each column projected off the
 * earlier ones twice ("twice is enough", Giraud et al. 2005). One pass
 * leaves a column that was nearly dependent on the earlier ones (a gradient
 * of rank < r) as float32 noise that is not orthogonal to them; the second
 * pass makes it so, and then P P^T M still reproduces M. A zero column
 * stays zero. Dot products in double. */
static void orthonormalise(float *P, int n, int r) {
  for (int j = 0; j < r; j++) {
    for (int pass = 0; pass < 2; pass++)
      for (int k = 0; k < j; k++) {
        double dot = 0.0;
        for (int i = 0; i < n; i++)
          dot += (double)P[i * r + k] * P[i * r + j];
        for (int i = 0; i < n; i++)
          P[i * r + j] -= (float)dot * P[i * r + k];
      }
    double norm = 0.0;
    for (int i = 0; i < n; i++)
      norm += (double)P[i * r + j] * P[i * r + j];
    norm = sqrt(norm);
    if (norm > 0.0)
      for (int i = 0; i < n; i++)
        P[i * r + j] = (float)(P[i * r + j] / norm);
  }
}

static xcoll_status allreduce_sum(comm_hook *h, const comm_bucket *b,
                                  comm_work *w, float *x, size_t n) {
  if (n == 0)
    return XCOLL_SUCCESS;
  w->wire_bytes += mixed_wire_allreduce(n * sizeof(float), h->world_size);
  return xcoll_allreduce(x, x, n, XCOLL_FLOAT32, XCOLL_SUM, b->comm);
}

/* Tensor p's gradient inside the bucket's buffer. */
static float *tensor_grad(const comm_bucket *b, int p) {
  return b->buffer + (b->params[p].offset - b->offset);
}

static xcoll_status powersgd_bucket(comm_hook *h, const comm_bucket *b,
                                    comm_work *w) {
  int r = h->rank_r;
  float world = (float)h->world_size;
  /* Tensors sent whole: packed, summed, averaged, unpacked. */
  size_t nu = 0;
  int first_matrix = -1, last_matrix = -1;
  for (int p = b->first_param; p <= b->last_param; p++) {
    if (h->compressed[p] >= 0) {
      if (first_matrix < 0)
        first_matrix = h->compressed[p];
      last_matrix = h->compressed[p];
      continue;
    }
    memcpy(h->uncompressed + nu, tensor_grad(b, p),
           b->params[p].numel * sizeof(float));
    nu += b->params[p].numel;
  }
  xcoll_status st = allreduce_sum(h, b, w, h->uncompressed, nu);
  if (st != XCOLL_SUCCESS)
    return st;
  nu = 0;
  for (int p = b->first_param; p <= b->last_param; p++) {
    if (h->compressed[p] >= 0)
      continue;
    float *g = tensor_grad(b, p);
    for (size_t i = 0; i < b->params[p].numel; i++)
      g[i] = h->uncompressed[nu + i] / world;
    nu += b->params[p].numel;
  }
  if (first_matrix < 0)
    return XCOLL_SUCCESS;
  /* P = (M + error) Q for every matrix, then one all-reduce of all P. */
  for (int i = first_matrix; i <= last_matrix; i++) {
    powersgd_matrix *pm = &h->matrices[i];
    float *M = tensor_grad(b, pm->param);
    size_t nm = (size_t)pm->n * pm->m;
    for (size_t k = 0; k < nm; k++)
      M[k] += pm->error[k];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, pm->n, r, pm->m,
                1.0f, M, pm->m, h->q_all + pm->q_offset, r, 0.0f,
                h->p_all + pm->p_offset, r);
  }
  const powersgd_matrix *a = &h->matrices[first_matrix];
  const powersgd_matrix *z = &h->matrices[last_matrix];
  st = allreduce_sum(h, b, w, h->p_all + a->p_offset,
                     z->p_offset + (size_t)z->n * r - a->p_offset);
  if (st != XCOLL_SUCCESS)
    return st;
  /* Q = M^T P with P orthonormal, then one all-reduce of all Q. */
  for (int i = first_matrix; i <= last_matrix; i++) {
    powersgd_matrix *pm = &h->matrices[i];
    float *P = h->p_all + pm->p_offset;
    orthonormalise(P, pm->n, r);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pm->m, r, pm->n, 1.0f,
                tensor_grad(b, pm->param), pm->m, P, r, 0.0f,
                h->q_all + pm->q_offset, r);
  }
  st = allreduce_sum(h, b, w, h->q_all + a->q_offset,
                     z->q_offset + (size_t)z->m * r - a->q_offset);
  if (st != XCOLL_SUCCESS)
    return st;
  /* M = P Q^T / world (the rank-r mean); what the local M lost to the
   * approximation is fed back next step. The averaged Q is kept as the
   * next step's start. */
  for (int i = first_matrix; i <= last_matrix; i++) {
    powersgd_matrix *pm = &h->matrices[i];
    float *Q = h->q_all + pm->q_offset;
    for (size_t k = 0; k < (size_t)pm->m * r; k++)
      Q[k] /= world;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, pm->n, pm->m, r, 1.0f,
                h->p_all + pm->p_offset, r, Q, r, 0.0f, h->approx, pm->m);
    float *M = tensor_grad(b, pm->param);
    size_t nm = (size_t)pm->n * pm->m;
    for (size_t k = 0; k < nm; k++) {
      pm->error[k] = M[k] - h->approx[k];
      M[k] = h->approx[k];
    }
  }
  return XCOLL_SUCCESS;
}

int comm_hook_bucket_ready(comm_hook *h, const comm_bucket *b,
                           comm_work *w) {
  w->request = NULL;
  w->wire_bytes = 0;
  w->status = XCOLL_SUCCESS;
  if (h->kind == COMM_HOOK_FP16 || h->kind == COMM_HOOK_BF16) {
    compress_bucket(h, b, w);
    return 1;
  }
  if (h->kind != COMM_HOOK_POWERSGD || h->iteration < h->warmup)
    return 0;
  /* Done on return: no request to wait for. */
  w->status = powersgd_bucket(h, b, w);
  return 1;
}

void comm_hook_bucket_done(comm_hook *h, const comm_bucket *b) {
  if (h->kind == COMM_HOOK_FP16 || h->kind == COMM_HOOK_BF16)
    mixed_widen(b->buffer, h->lowp + b->offset, b->count, h->dtype);
}

void comm_hook_finish(comm_hook *h) { h->iteration++; }
