/*
 * comm_hooks.h - DDP communication hooks (PyTorch's
 * torch.distributed.algorithms.ddp_comm_hooks), run on each bucket in place
 * of the float32 all-reduce:
 *
 *   fp16 / bf16 (default_hooks.fp16_compress_hook / bf16_compress_hook):
 *     divide the bucket by the world size (in float32), cast it to the
 *     16-bit type, all-reduce with XCOLL_SUM in that type (xcoll adds in
 *     float32 and rounds to nearest even), cast back. Half the bytes.
 *     --reduce-dtype float16|bfloat16 under ddp runs the same hook.
 *   powersgd (Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank
 *     Gradient Compression for Distributed Optimization", NeurIPS 2019;
 *     powerSGD_hook.powerSGD_hook): for every weight of the bucket seen as
 *     an n x m matrix M (rows = output features; a convolution's
 *     (out, in, k, k) is out x in*k*k) with r (n + m) < n m:
 *       M += error                      (error feedback)
 *       P = M Q                         (n x r; Q is m x r, kept)
 *       all-reduce P (sum); orthonormalise P's columns (Gram-Schmidt)
 *       Q = M^T P                       (m x r)
 *       all-reduce Q (sum); Q /= world_size
 *       error = M - P Q^T;  M = P Q^T   (the rank-r mean)
 *     All P of a bucket go in one all-reduce, all Q in another; biases and
 *     matrices that compression would not shrink go uncompressed in a third
 *     (XCOLL_SUM, then divided by the world size). Q starts from a Gaussian
 *     of a fixed seed, equal on every rank, and each step starts from the
 *     last step's Q (warm start). The first --powersgd-warmup synchronised
 *     steps all-reduce plainly (PyTorch's start_powerSGD_iter), without
 *     error feedback.
 *     Unlike PyTorch's asynchronous futures, a bucket's three all-reduces
 *     run blocking inside its grad_ready hook (backward waits for them).
 *
 * A hook sees a bucket only through the comm_bucket view that ddp.c builds
 * (PyTorch hands its hooks a GradBucket: index, buffer, the parameters'
 * offsets), and answers with a comm_work; it never reads ddp's own state.
 * Every hook counts the bytes it puts on the wire (mixed.h's ring model),
 * which ddp.c adds to ddp.last.wire_bytes.
 */
#ifndef XTRAIN_COMM_HOOKS_H
#define XTRAIN_COMM_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "xcoll.h"

typedef enum comm_hook_kind {
  COMM_HOOK_NONE = 0,
  COMM_HOOK_FP16 = 1,
  COMM_HOOK_BF16 = 2,
  COMM_HOOK_POWERSGD = 3
} comm_hook_kind;

/* "none", "fp16", "bf16", "powersgd" to a kind; -1 when unknown. */
int comm_hook_parse(const char *name);
const char *comm_hook_name(comm_hook_kind kind);

typedef struct powersgd_matrix {
  int param;       /* tensor index in the model */
  int n, m;        /* rows, columns */
  float *error;    /* (n, m) error feedback */
  size_t p_offset; /* elements into the bucket's packed P buffer */
  size_t q_offset; /* into the packed Q buffer */
} powersgd_matrix;

typedef struct comm_hook {
  comm_hook_kind kind;
  xcoll_datatype dtype; /* fp16/bf16: XCOLL_FLOAT16 / XCOLL_BFLOAT16 */
  int world_size;
  int rank_r;        /* powersgd: matrix approximation rank */
  int64_t warmup;    /* powersgd: plain steps first */
  int64_t iteration; /* synchronised backward passes so far */
  uint16_t *lowp;    /* fp16/bf16: (model.num_elements) bucket copies */
  powersgd_matrix matrices[MODEL_MAX_PARAMS];
  int num_matrices;
  int compressed[MODEL_MAX_PARAMS]; /* tensor -> matrices index, or -1 */
  float *p_all, *q_all; /* powersgd: every matrix's P and Q, packed in
                           tensor order, so a bucket's are one range */
  float *uncompressed;  /* scratch: a bucket's uncompressed tensors */
  float *approx;        /* scratch: one matrix's P Q^T (n m) */
} comm_hook;

/* One bucket as ddp.c hands it to a hook (PyTorch's GradBucket). Tensor p
 * (first_param <= p <= last_param) is params[p].numel floats at
 * buffer + params[p].offset - offset. */
typedef struct comm_bucket {
  int index;     /* bucket number; bucket 0 is the first to be ready */
  float *buffer; /* the bucket's gradients, in place in model.grads */
  size_t offset; /* buffer's first element in model.grads */
  size_t count;  /* floats in buffer */
  int first_param, last_param; /* registration indices of its tensors */
  const param_view *params;    /* the model's views, by registration index */
  xcoll_comm_t comm;
} comm_bucket;

/* What a hook did with a bucket (PyTorch's hook returns a future). */
typedef struct comm_work {
  xcoll_request_t request; /* for ddp.c to wait on; NULL when done already */
  size_t wire_bytes;       /* put on the wire for this bucket */
  xcoll_status status;     /* of the first failed call; then no request */
} comm_work;

/* Set up hook kind for model m over world_size ranks. powersgd: rank r >=
 * 1, warmup steps >= 0, Q drawn from seed. Returns 0, or -1 when out of
 * memory (with the hook left empty). ddp_register_comm_hook attaches it. */
int comm_hook_init(comm_hook *h, const model *m, int world_size,
                   comm_hook_kind kind, xcoll_datatype dtype, int rank_r,
                   int64_t warmup, uint64_t seed);
void comm_hook_free(comm_hook *h);

/* Called by ddp.c: bucket b's gradients are final; start (fp16/bf16) or
 * run (powersgd) its communication, fill *w and return 1, or return 0 for
 * ddp.c's own float32 all-reduce (hook none, powersgd's warmup). */
int comm_hook_bucket_ready(comm_hook *h, const comm_bucket *b, comm_work *w);
/* Called by ddp.c for every bucket once all requests completed: cast the
 * result back into the bucket's buffer (fp16/bf16). */
void comm_hook_bucket_done(comm_hook *h, const comm_bucket *b);
/* Called by ddp.c after comm_hook_bucket_done on every bucket of a
 * synchronised backward: counts the pass (powersgd's warmup). */
void comm_hook_finish(comm_hook *h);

#endif /* XTRAIN_COMM_HOOKS_H */
