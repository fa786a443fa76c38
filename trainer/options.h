/*
 * options.h - xtrain's command line: the run's configuration (one field per
 * flag, with its default), the parser that fills it from argv, and the
 * configuration as the JSON object that the log and checkpoints carry.
 * The flags and their help text are one table in options.c; docs/trainer.md
 * describes them.
 */
#ifndef XTRAIN_OPTIONS_H
#define XTRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint_fsdp.h"
#include "comm_hooks.h"
#include "fsdp.h"
#include "gpt.h"
#include "model.h"
#include "optim.h"
#include "strategy.h"
#include "xcoll.h"

typedef struct config {
  model_kind model;
  strategy_kind strategy;
  fsdp_config fsdp; /* --sharding, --backward-prefetch, ... */
  int dp_devices;   /* --strategy dp: replicas (threads) */
  int epochs;
  int batch_size; /* per rank, per micro-batch */
  float lr;
  optim_kind optimizer;
  float momentum;
  float weight_decay;
  int nesterov;
  schedule_kind schedule;
  int64_t warmup_steps;
  double clip_grad_norm;
  double first_bucket_mb;
  double bucket_cap_mb;
  int grad_accum;
  uint64_t seed;
  const char *data_dir;
  const char *checkpoint_dir;
  checkpoint_format checkpoint_format; /* fsdp: full or sharded */
  int resume;
  int elastic; /* --elastic: survivors of a lost rank shrink and go on */
  const char *init_from;   /* safetensors with PyTorch's names */
  const char *export_init; /* write the initial parameters there */
  int sampler_sequential;  /* --sampler sequential: no shuffle */
  int64_t log_every;
  double progress_every; /* seconds; < 0: 10 when stdout is not a terminal */
  const char *log_json;
  int drop_last;
  int64_t max_steps;
  int threads;
  size_t train_limit, test_limit;
  int conv1_channels, conv2_channels;
  gpt_config gpt;        /* --n-layer, --n-head, --d-model, --context */
  const char *data_file; /* gpt: --data-file, instead of the fortunes */
  const char *dump_params;
  const char *trace;
  int profile; /* --profile */
  /* mixed precision and communication hooks (mixed.h, comm_hooks.h) */
  xcoll_datatype param_dtype, reduce_dtype;
  double init_scale;
  int64_t scale_growth_interval;
  comm_hook_kind comm_hook;
  int powersgd_rank;
  int64_t powersgd_warmup;
} config;

/* Fills c from the command line: defaults first, then each flag, then the
 * checks between flags. Prints the usage and exits 0 on --help; prints the
 * version and exits 0 on --version; prints one line saying what was wrong
 * and "see 'xtrain --help'" to stderr and exits 2 on a bad command line. */
void options_parse(config *c, int argc, char **argv);

/* The configuration as one line of JSON, which the caller frees; NULL when
 * out of memory. */
char *config_json(const config *c);

#endif
