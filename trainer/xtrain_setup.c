/*
 * xtrain_setup.c - xtrain's setup, in the order main calls it: the
 * communicator, the output files, the data, the model and its initial
 * parameters (from the seed, --init-from or --resume), the strategy with
 * its communication hook and loss scaler, the --trace hooks and tracks, the
 * sampler and the schedule; and the teardown (xtrain.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xtrain.h"

void setup_comm(run *r) {
  r->world_size = 1;
  if (r->cfg.strategy == STRATEGY_NONE || r->cfg.strategy == STRATEGY_DP)
    return; /* dp: one process */
  xcoll_status st = xcoll_comm_init_env(&r->comm);
  if (st != XCOLL_SUCCESS) {
    /* once: not again after the library's WARN line */
    if (!xcoll_comm_last_error_logged(NULL))
      fprintf(stderr, "xtrain: error: xcoll_comm_init_env failed: %s: %s\n",
              xcoll_strerror(st), xcoll_last_error());
    exit(1);
  }
  xcoll_comm_rank(r->comm, &r->rank);
  xcoll_comm_size(r->comm, &r->world_size);
}

void setup_outputs(run *r) {
  const config *c = &r->cfg;
  r->tty = isatty(STDOUT_FILENO);
  if (c->trace) {
    char trace_err[4200];
    if (timeline_open(&r->trace, c->trace, r->rank, trace_err,
                      sizeof trace_err) != 0)
      fail(r, "%s", trace_err);
  }
  if (r->rank == 0 && c->log_json) {
    r->json = fopen(c->log_json, c->resume ? "a" : "w");
    if (!r->json)
      fail(r, "cannot open --log-json file %s: %s", c->log_json,
           strerror(errno));
  }
}

/* gpt: the corpus, 90% training and 10% validation by offset. */
static void load_text(run *r) {
  char err[1024];
  const config *c = &r->cfg;
  if (text_load(&r->corpus, c->data_file, c->data_dir, err, sizeof err) != 0)
    fail(r, "%s", err);
  text_split(&r->corpus, 0.1, c->gpt.context, &r->text_train, &r->text_val);
  if (r->text_train.count == 0 || r->text_val.count == 0)
    fail(r, "%s has %zu bytes: too short for one training and one validation "
         "window of --context + 1 = %d bytes (the last 10%% is validation; "
         "give at least %d bytes, or a shorter --context)",
         c->data_file ? c->data_file : c->data_dir, r->corpus.size,
         c->gpt.context + 1, 10 * (c->gpt.context + 1));
  if (c->train_limit > 0 && c->train_limit < r->text_train.count)
    r->text_train.count = c->train_limit;
  if (c->test_limit > 0 && c->test_limit < r->text_val.count)
    r->text_val.count = c->test_limit;
}

void load_data(run *r) {
  char err[1024];
  if (is_gpt(r)) {
    load_text(r);
    return;
  }
  if (data_load(&r->train, r->cfg.data_dir, "train", err, sizeof err) != 0)
    fail(r, "%s", err);
  if (data_load(&r->test, r->cfg.data_dir, "t10k", err, sizeof err) != 0)
    fail(r, "%s", err);
  data_stats(&r->train, &r->mean, &r->std); /* of the whole training set */
  data_truncate(&r->train, r->cfg.train_limit);
  data_truncate(&r->test, r->cfg.test_limit);
}

/* After every rank tried to read its checkpoint (ok, err: this rank's
 * outcome; meta->step what it read): all ranks resume, from the same step,
 * or all fail. Nobody says "resumed" before every rank has read its part:
 * the lowest failing rank is named on every rank, and that rank gives its
 * own reason. what names the checkpoint. */
static void agree_on_resume(run *r, int ok, const char *err,
                            const char *what) {
  int64_t mine[2] = {ok ? 1 : 0, r->meta.step};
  int64_t *all = calloc((size_t)r->world_size * 2, sizeof *all);
  if (!all)
    fail(r, "out of memory agreeing on --resume");
  if (r->comm) {
    xcoll_status st = xcoll_allgather(mine, all, 2, XCOLL_INT64, r->comm);
    if (st != XCOLL_SUCCESS)
      fail(r, "--resume: agreeing with the other ranks on %s: %s", what,
           xcoll_strerror(st));
  } else {
    memcpy(all, mine, sizeof mine);
  }
  int failed = -1, other = -1;
  for (int k = 0; k < r->world_size; k++) {
    if (!all[2 * k] && failed < 0)
      failed = k;
    if (all[2 * k + 1] != all[1] && other < 0)
      other = k;
  }
  int64_t step0 = all[1], step_other = other >= 0 ? all[2 * other + 1] : 0;
  free(all);
  if (!ok)
    fail_together(r, "%s", err);
  if (failed >= 0)
    fail_together(r, "--resume: rank %d could not read its part of %s (see "
                  "its error): no rank resumed", failed, what);
  if (other >= 0)
    fail_together(r, "--resume: %s: rank 0 read step %" PRId64 " but rank %d "
                  "read step %" PRId64 ": no rank resumed", what, step0,
                  other, step_other);
}

enum { RESUME_NONE = 0, RESUME_FULL = 1, RESUME_SHARDED = 2 };

/* Rank 0's choice, which every rank follows: from its directory, where a
 * shared one is what all ranks see. */
static int resume_choice(run *r, const char *path, const char *index) {
  const config *c = &r->cfg;
  int64_t choice = RESUME_NONE;
  if (r->rank == 0) {
    struct stat full_st, sharded_st;
    int have_full = stat(path, &full_st) == 0;
    int have_sharded = stat(index, &sharded_st) == 0;
    choice = have_full ? RESUME_FULL : have_sharded ? RESUME_SHARDED
                                                    : RESUME_NONE;
    if (have_sharded && have_full) {
      /* The format was changed between runs: the newer one is where
       * training stopped; --checkpoint-format decides a tie. */
      double full_t = full_st.st_mtim.tv_sec + 1e-9 * full_st.st_mtim.tv_nsec;
      double sharded_t =
          sharded_st.st_mtim.tv_sec + 1e-9 * sharded_st.st_mtim.tv_nsec;
      if (sharded_t > full_t ||
          (sharded_t == full_t && c->checkpoint_format == CHECKPOINT_SHARDED))
        choice = RESUME_SHARDED;
      printf("xtrain: --resume: both %s and %s exist; reading the newer, "
             "%s\n", path, index, choice == RESUME_SHARDED ? index : path);
    }
  }
  if (r->comm) {
    xcoll_status st = xcoll_broadcast(&choice, &choice, 1, XCOLL_INT64, 0,
                                      r->comm);
    if (st != XCOLL_SUCCESS)
      fail(r, "--resume: learning rank 0's choice of checkpoint: %s",
           xcoll_strerror(st));
  }
  return (int)choice;
}

/* --resume: dir/checkpoint_latest.safetensors (full, any strategy) or the
 * sharded set (checkpoint_latest.index.json, fsdp only). When both are
 * there (the format was changed between runs), the newer one.
 * A full one is read here, into the whole model; a sharded one once fsdp
 * has made the shards (resume_sharded). */
static void resume_full(run *r) {
  const config *c = &r->cfg;
  checkpoint_meta *meta = &r->meta;
  char err[1024];
  /* A save killed mid-write leaves a temporary file; none is ever read. */
  if (checkpoint_clean_stale(c->checkpoint_dir, err, sizeof err) < 0)
    fail(r, "%s", err);
  char path[4096], index[4096];
  snprintf(path, sizeof path, "%s/checkpoint_latest.safetensors",
           c->checkpoint_dir);
  snprintf(index, sizeof index, "%s/checkpoint_latest.index.json",
           c->checkpoint_dir);
  int choice = resume_choice(r, path, index);
  if (choice == RESUME_SHARDED) {
    if (c->strategy != STRATEGY_FSDP)
      fail(r, "%s is a sharded FSDP checkpoint: resume it with --strategy "
           "fsdp at the world size that wrote it (and save with "
           "--checkpoint-format full to resume under another strategy)",
           index);
    r->resume_sharded = 1;
    return;
  }
  if (choice == RESUME_NONE) {
    if (r->rank == 0)
      fprintf(stderr, "xtrain: --resume: no %s yet, starting from scratch\n",
              path);
    return;
  }
  char saved_config[sizeof meta->config];
  memcpy(saved_config, meta->config, sizeof saved_config);
  int ok = checkpoint_load(path, &r->m, &r->opt, meta, err, sizeof err) == 0;
  agree_on_resume(r, ok, err, path);
  memcpy(meta->config, saved_config, sizeof saved_config);
  if (r->rank == 0)
    printf("resumed from %s: epoch %d, step %" PRId64 "\n", path, meta->epoch,
           meta->step);
}

/* Model and its initial parameters, from the seed or the checkpoint. */
void setup_model(run *r) {
  const config *c = &r->cfg;
  int created = c->model == MODEL_GPT
                    ? model_create_gpt(&r->m, &c->gpt, c->batch_size)
                    : model_create(&r->m, c->model, c->conv1_channels,
                                   c->conv2_channels, c->batch_size);
  if (created != 0)
    fail(r, "out of memory creating the %s model for batch %d",
         model_kind_name(c->model), c->batch_size);
  rng init_rng;
  rng_seed(&init_rng, c->seed);
  model_init_params(&r->m, &init_rng);
  char init_err[1024];
  if (c->init_from &&
      init_params_load(c->init_from, &r->m, init_err, sizeof init_err) != 0)
    fail(r, "%s", init_err);
  if (c->export_init && r->rank == 0) {
    if (init_params_export(c->export_init, &r->m, c->seed, r->mean, r->std,
                           init_err, sizeof init_err) != 0)
      fail(r, "%s", init_err);
    printf("xtrain: wrote the initial parameters to %s\n", c->export_init);
  }
  if (optim_create(&r->opt, c->optimizer, r->m.num_elements, c->lr,
                   c->momentum, c->weight_decay, c->nesterov) != 0)
    fail(r, "out of memory creating the optimizer state");

  checkpoint_meta *meta = &r->meta;
  memset(meta, 0, sizeof *meta);
  char *cfg_json = config_json(c);
  snprintf(meta->config, sizeof meta->config, "%s", cfg_json ? cfg_json : "{}");
  free(cfg_json);
  meta->rng_state = init_rng;
  if (c->resume)
    resume_full(r);
  if (c->checkpoint_dir && r->rank == 0)
    mkdir(c->checkpoint_dir, 0777); /* an existing directory is fine */
}


/* Communication hook (ddp) and loss scaler (float16), after the strategy. */
static void setup_mixed(run *r) {
  const config *c = &r->cfg;
  if (c->strategy == STRATEGY_DDP && c->comm_hook != COMM_HOOK_NONE) {
    if (comm_hook_init(&r->hook, &r->m, r->dp.world_size, c->comm_hook,
                       c->reduce_dtype, c->powersgd_rank, c->powersgd_warmup,
                       c->seed + 0x9e3779b97f4a7c15ull) != 0)
      fail(r, "out of memory setting up --comm-hook %s",
           comm_hook_name(c->comm_hook));
    ddp_register_comm_hook(&r->dp, &r->hook);
  }
  int fp16 = c->param_dtype == XCOLL_FLOAT16 || c->reduce_dtype == XCOLL_FLOAT16;
  loss_scaler_init(&r->scaler, fp16, c->init_scale, c->scale_growth_interval);
  if (r->rank != 0 || (c->comm_hook == COMM_HOOK_NONE &&
                       c->param_dtype == XCOLL_FLOAT32 &&
                       c->reduce_dtype == XCOLL_FLOAT32))
    return;
  printf("mixed precision: param_dtype %s, reduce_dtype %s, comm_hook %s",
         mixed_dtype_name(c->param_dtype), mixed_dtype_name(c->reduce_dtype),
         comm_hook_name(c->comm_hook));
  if (c->comm_hook == COMM_HOOK_POWERSGD)
    printf(" (rank %d, %d matrices compressed, plain for the first %" PRId64
           " steps)", c->powersgd_rank, r->hook.num_matrices,
           c->powersgd_warmup);
  if (fp16)
    printf(", dynamic loss scale from %g, doubled after %" PRId64
           " good steps", c->init_scale, c->scale_growth_interval);
  printf("\n");
}

/* The strategy, and the optimizer over what it lets this rank update. */
void setup_strategy(run *r) {
  const config *c = &r->cfg;
  if (c->strategy == STRATEGY_NONE) {
    strategy_init_none(&r->strat, &r->m);
  } else if (c->strategy == STRATEGY_DP) {
    char err[1024];
    if (strategy_init_dp(&r->strat, &r->m, c->dp_devices, err, sizeof err) !=
        XCOLL_SUCCESS)
      fail(r, "setting up dp: %s", err);
    printf("dp: %d replicas (threads) in one process, batch %d scattered in "
           "chunks of %d\n", c->dp_devices, c->batch_size,
           (c->batch_size + c->dp_devices - 1) / c->dp_devices);
  } else if (c->strategy == STRATEGY_DDP) {
    check_xcoll(r, strategy_init_ddp(&r->strat, &r->m, &r->dp, r->comm,
                                     c->first_bucket_mb, c->bucket_cap_mb),
                "broadcast of parameters");
    if (r->rank == 0)
      print_ddp_layout(r);
  } else {
    fsdp_config fc = c->fsdp;
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    fc.local_world_size = lws && *lws ? atoi(lws) : r->world_size;
    if (fc.sharding == FSDP_HYBRID_SHARD && fc.local_world_size < 1)
      fail(r, "--sharding hybrid_shard needs LOCAL_WORLD_SIZE >= 1 (ranks "
              "per node, set by xcollrun), got '%s'", lws);
    char err[1024];
    xcoll_status st =
        strategy_init_fsdp(&r->strat, &r->m, r->comm, &fc, err, sizeof err);
    if (st != XCOLL_SUCCESS)
      fail(r, "setting up fsdp: %s", err);
    /* The shards are what the optimizer updates: state for them only,
     * this rank's chunks of the whole model's (zeros, or a full
     * checkpoint's). */
    optimizer full_opt = r->opt;
    if (optim_create(&r->opt, c->optimizer, r->strat.count, c->lr, c->momentum,
                     c->weight_decay, c->nesterov) != 0)
      fail(r, "out of memory creating the optimizer state");
    for (int i = 0; i < r->opt.num_state; i++)
      fsdp_shard_from_full(&r->strat, full_opt.state[i], r->opt.state[i]);
    r->opt.step = full_opt.step;
    optim_free(&full_opt);
    if (r->resume_sharded) {
      char saved_config[sizeof r->meta.config];
      memcpy(saved_config, r->meta.config, sizeof saved_config);
      int ok = fsdp_checkpoint_load_sharded(&r->strat, &r->opt, &r->meta,
                                            c->checkpoint_dir,
                                            "checkpoint_latest", r->rank,
                                            r->world_size, err,
                                            sizeof err) == 0;
      char what[4200];
      snprintf(what, sizeof what, "%s/checkpoint_latest.index.json",
               c->checkpoint_dir);
      agree_on_resume(r, ok, err, what);
      memcpy(r->meta.config, saved_config, sizeof saved_config);
      if (r->rank == 0)
        printf("resumed from %s/checkpoint_latest.index.json (sharded): "
               "epoch %d, step %" PRId64 "\n", c->checkpoint_dir,
               r->meta.epoch, r->meta.step);
    }
    if (r->rank == 0)
      print_fsdp_layout(r);
  }
  strategy_attach(&r->strat);
  strategy_count_memory(&r->strat, r->opt.num_state);
  setup_mixed(r);
}

void setup_trace(run *r) {
  layer_tracer *tracer = &r->tracer;
  memset(tracer, 0, sizeof *tracer);
  if (!r->trace.file)
    return;
  /* dp's layers run on several threads at once: its trace has one span
   * per micro-batch, without layers. */
  if (r->cfg.strategy != STRATEGY_DP) {
    tracer->trace = &r->trace;
    tracer->m = &r->m;
    tracer->inner = r->m.grad_ready;
    tracer->inner_ctx = r->m.grad_ready_ctx;
    r->m.grad_ready = traced_grad_ready;
    r->m.grad_ready_ctx = tracer;
  }
  timeline_name_track(&r->trace, TIMELINE_TID_STEPS, "xtrain steps");
  for (int i = 0; r->cfg.strategy == STRATEGY_DDP && i < r->dp.num_buckets;
       i++) {
    char track[48];
    snprintf(track, sizeof track, "xtrain allreduce bucket %d", i);
    timeline_name_track(&r->trace, TIMELINE_TID_STEPS + 1 + i, track);
  }
  if (r->cfg.strategy == STRATEGY_FSDP) {
    timeline_name_track(&r->trace, TIMELINE_TID_STEPS + 1,
                        "xtrain fsdp collectives");
    if (r->cfg.fsdp.sharding == FSDP_HYBRID_SHARD)
      timeline_name_track(&r->trace, TIMELINE_TID_STEPS + 2,
                          "xtrain fsdp allreduce across nodes");
  }
}

void setup_schedule(run *r) {
  const config *c = &r->cfg;
  if (sampler_init(&r->smp, train_count(r), r->rank, r->world_size,
                   c->drop_last, c->seed) != 0)
    fail(r, "out of memory creating the sampler");
  r->smp.shuffle = !c->sampler_sequential;
  int B = c->batch_size, K = c->grad_accum;
  r->micro_per_epoch = c->drop_last
                           ? (int64_t)(r->smp.num_samples / B)
                           : (int64_t)((r->smp.num_samples + B - 1) / B);
  r->steps_per_epoch = (r->micro_per_epoch + K - 1) / K;
  if (r->steps_per_epoch == 0)
    fail(r, "no complete batch: %zu samples per rank, batch size %d",
         r->smp.num_samples, B);
  /* The schedule spans the configured epochs; --max-steps only stops early,
   * so a run cut by it and resumed follows the same learning rates. */
  r->schedule_steps = r->steps_per_epoch * c->epochs;
  r->total_steps = r->schedule_steps;
  if (c->max_steps > 0 && c->max_steps < r->total_steps)
    r->total_steps = c->max_steps;
  r->x = malloc((size_t)B * r->m.sample_inputs * sizeof(float));
  r->y = malloc((size_t)B * r->m.sample_targets);
  if (!r->x || !r->y)
    fail(r, "out of memory for a batch of %d", B);
}

void teardown(run *r) {
  if (r->trace.file) {
    char trace_err[4200];
    if (timeline_close(&r->trace, trace_err, sizeof trace_err) != 0)
      fail(r, "%s", trace_err);
  }
  if (r->json)
    fclose(r->json);
  free(r->x);
  free(r->y);
  sampler_free(&r->smp);
  free(r->elastic.lost);
  strategy_destroy(&r->strat);
  comm_hook_free(&r->hook);
  optim_free(&r->opt);
  model_free(&r->m);
  data_free(&r->train);
  data_free(&r->test);
  text_free(&r->corpus);
  if (r->comm) {
    xcoll_status st = xcoll_comm_destroy(r->comm);
    if (st != XCOLL_SUCCESS)
      fprintf(stderr, "xtrain: xcoll_comm_destroy: %s\n", xcoll_strerror(st));
  }
}
