/*
 * dp.h - PyTorch's DataParallel (torch.nn.DataParallel, torch 2.x
 * torch/nn/parallel/data_parallel.py) in one process, for comparison with
 * DDP: N worker threads, each running a replica of the model.
 *
 * Per micro-batch of B samples: scatter the batch into N consecutive chunks
 * of ceil(B/N) rows (torch.chunk; the last ones may be shorter or empty);
 * replicate replica 0's parameters into every other replica (a copy of the
 * whole model, every micro-batch); run forward and backward of each chunk on
 * its own thread (the calling thread is replica 0); gather the losses; and
 * reduce the gradients of replicas 1..N-1 into replica 0's, in replica
 * order, on the calling thread. The optimizer then updates replica 0, which
 * is the model xtrain holds, so evaluation, checkpoints and --dump-params
 * see it unchanged. Replicate and reduce are the copies DDP avoids: they are
 * counted as communication, none of it hidden.
 */
#ifndef XTRAIN_DP_H
#define XTRAIN_DP_H

#include <stddef.h>

#include "strategy.h"

/* Set up s as DataParallel over `devices` replicas of m (m is replica 0;
 * the others are created for batches of ceil(m->max_batch / devices)).
 * Returns XCOLL_SUCCESS, or XCOLL_ERR_NO_MEMORY / XCOLL_ERR_SYSTEM (thread
 * creation) with a sentence in err. */
xcoll_status strategy_init_dp(strategy *s, model *m, int devices, char *err,
                              size_t err_size);

#endif /* XTRAIN_DP_H */
