/*
 * xtrain.h - what the three files of the xtrain program share (it is not
 * part of xtrain_core): the state of one run, a logging window's sums, and
 * the functions that xtrain.c's train loop and main call. Calls go one way:
 * xtrain.c (one update, the loop, main) -> xtrain_setup.c (setup, teardown)
 * -> xtrain_report.c (errors, progress, logs, traces); options.c parses the
 * command line; elastic.c is --elastic's recovery.
 */
#ifndef XTRAIN_XTRAIN_H
#define XTRAIN_XTRAIN_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "checkpoint_fsdp.h"
#include "comm_hooks.h"
#include "data.h"
#include "ddp.h"
#include "dp.h"
#include "fsdp.h"
#include "gpt.h"
#include "init_params.h"
#include "mixed.h"
#include "model.h"
#include "optim.h"
#include "options.h"
#include "profile.h"
#include "strategy.h"
#include "text.h"
#include "timeline.h"
#include "xcoll.h"

/* ---- --trace ---- */

/* Wraps the backward hook to time each layer's backward: the span of a
 * layer runs from the end of the previous layer's hook calls (or the start
 * of backward) to the first hook call for one of its tensors, so it includes
 * the activation backward (ReLU, pooling) just below the next layer and, for
 * the last layer, the loss. Time in the strategy's hook (polling and issuing
 * collectives) falls between layer spans. */
typedef struct layer_tracer {
  timeline *trace;
  const model *m;
  grad_ready_fn inner; /* the strategy's hook */
  void *inner_ctx;
  double mark;  /* seconds: end of the previous hook call or start of backward */
  int previous; /* tensor of the previous hook call; -1 at start of backward */
} layer_tracer;

/* Sums of one logging window (an epoch, or --log-every updates). */
typedef struct window {
  double loss, correct, count; /* summed over this rank's samples */
  double time, comm, blocked;  /* seconds */
  double wire;                 /* bytes this rank sent */
  double skipped;              /* steps skipped by the loss scaler */
} window;

/* The loop's state (train() in xtrain.c) and --elastic's (elastic.c): kept
 * here, not in train()'s locals, because a recovery jumps back to the top
 * of the loop (longjmp). */
typedef struct elastic_state {
  jmp_buf redo;  /* set in train(); elastic_on_failure jumps there */
  int redo_now;  /* 1 after a recovery, until the loop has re-entered */
  int launch_rank; /* this process's rank when the job started */
  int *lost;     /* ranks of the broken communicator known gone */
  int lost_count;
  double failed_at; /* ddp_now() when the failure was seen */
  /* where this rank's loop stands: the epoch and the positions of its
   * permutation consumed (by every rank together) */
  int at_epoch;
  size_t at_samples;
  size_t epoch_start; /* positions consumed before this world took the
                         epoch over (0 but after a recovery) */
  window ep, iv;  /* the epoch's and the --log-every window's sums */
  int64_t ep_updates; /* updates this rank made in the epoch (in ep) */
  window all;     /* the run's */
  double run_samples; /* samples trained on, over all ranks */
  double best;    /* best test accuracy so far */
} elastic_state;

/* ---- process-wide state of one run ---- */
typedef struct run {
  config cfg;
  xcoll_comm_t comm; /* NULL with --strategy none */
  int rank, world_size;
  FILE *json;
  int tty;
  double progress_at; /* when the next progress line is due (ddp_now), 0 before the first step */
  double progress_from; /* ddp_now at the first step */
  int64_t progress_steps; /* updates since then */
  timeline trace; /* --trace; file NULL when off */
  profile prof;   /* --profile: the updates after the first */
  int64_t profiled_updates;
  /* data */
  dataset train, test;
  float mean, std; /* of the whole training set */
  text_corpus corpus;               /* gpt */
  text_dataset text_train, text_val; /* gpt: windows of the corpus */
  sampler smp;
  float *x;          /* (B, 784) one micro-batch; gpt: (B, T) bytes */
  unsigned char *y;  /* (B); gpt: (B, T) */
  /* model, optimizer, strategy */
  model m;
  optimizer opt;
  strategy strat;
  ddp dp; /* --strategy ddp: strat.impl */
  comm_hook hook; /* --comm-hook, --reduce-dtype under ddp */
  loss_scaler scaler; /* float16 */
  checkpoint_meta meta;
  layer_tracer tracer; /* --trace: wraps the backward hook (setup_trace) */
  int resume_sharded; /* --resume reads a sharded set after fsdp's setup */
  /* schedule */
  int64_t micro_per_epoch, steps_per_epoch, schedule_steps, total_steps;
  elastic_state elastic;
  /* Called by check_xcoll on a failed collective before it fails the run;
   * may not return. train() sets it to elastic_on_failure under --elastic
   * (a pointer, so that xtrain_report.c calls nothing in elastic.c). */
  void (*on_comm_failure)(struct run *r, xcoll_status st, const char *what);
} run;

static inline int is_gpt(const run *r) { return r->cfg.model == MODEL_GPT; }

/* Samples of the training and the test (gpt: validation) set. */
static inline size_t train_count(const run *r) {
  return is_gpt(r) ? r->text_train.count : r->train.count;
}
static inline size_t test_count(const run *r) {
  return is_gpt(r) ? r->text_val.count : r->test.count;
}

/* ---- xtrain_setup.c, in the order main calls them ---- */

/* The communicator (none for --strategy none and dp); rank and world size. */
void setup_comm(run *r);
/* --trace and --log-json files. */
void setup_outputs(run *r);
/* Fashion-MNIST, or the gpt's text split into training and validation. */
void load_data(run *r);
void setup_model(run *r);
void setup_strategy(run *r);
void setup_trace(run *r);
void setup_schedule(run *r);
void teardown(run *r);

/* ---- xtrain_report.c ---- */

/* Print "xtrain[rank R]: error: ..." and exit(1), aborting the communicator
 * so that the peers stop too. */
void fail(run *r, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* A failure every rank has learned from a collective and stops on. */
void fail_together(run *r, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* fail naming what, unless st is XCOLL_SUCCESS. */
void check_xcoll(run *r, xcoll_status st, const char *what);
/* In-place sum over ranks of n doubles; nothing to do with one process. */
void sum_over_ranks(run *r, double *v, size_t n);
/* One --log-json record (rank 0's file); deletes o. */
void json_line(run *r, cJSON *o);
void progress(run *r, int epoch, int64_t step, int64_t steps, double loss);
void dump_params(run *r);
/* --trace: the backward hook of layer_tracer, bucket and FSDP spans. */
void traced_grad_ready(void *ctx, int param_index);
void trace_buckets(run *r, const ddp *d, const model *m);
void trace_fsdp_ops(run *r);
/* Rank 0's lines at setup. */
void print_ddp_layout(run *r);
void print_fsdp_layout(run *r);
void print_run(run *r);
void print_memory(run *r);
/* Every --log-every updates. */
void log_interval(run *r, int epoch, window *iv);
/* The epoch's line and record on rank 0: sums = training loss, correct
 * predictions and samples, summed over ranks; updates done in this run. */
void log_epoch(run *r, int epoch, int finished, int64_t updates,
               const double sums[3], double test_loss, double test_acc,
               const window *ep);
void log_summary(run *r, const window *all, double samples);
void print_sample(run *r);

/* ---- elastic.c (--elastic) ---- */

/* After collective what failed with st: when a rank is known lost (asked
 * of xcoll_comm_failed_ranks), jump to the loop's redo point (never
 * returns); otherwise returns and the caller fails as without --elastic.
 * train() installs it as run.on_comm_failure while its loop runs. */
void elastic_on_failure(run *r, xcoll_status st, const char *what);
/* At the redo point: shrink the communicator without the lost ranks, take
 * the new rank 0's parameters, optimizer state and position, split the
 * rest of the epoch over the new world and log the recovery. */
void elastic_recover(run *r);

#endif /* XTRAIN_XTRAIN_H */
