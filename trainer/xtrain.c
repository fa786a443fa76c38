/*
 * xtrain.c - the xtrain program: trains an MLP or a CNN on Fashion-MNIST, or
 * a small GPT-style transformer on bytes of text (--model gpt), with
 * one process (--strategy none), DataParallel threads in one process
 * (--strategy dp), data-parallel over xcoll (--strategy ddp) or fully
 * sharded (--strategy fsdp), the last two launched by xcollrun or any
 * torchrun-style launcher. Uses only the public API in xcoll.h. See
 * docs/trainer.md. The strategy's hooks (strategy.h) are all a step knows of
 * distribution.
 *
 * This file holds one update (train_step), the loop over epochs and main;
 * the setup is in xtrain_setup.c, what xtrain prints and logs in
 * xtrain_report.c, the command line in options.c (xtrain.h).
 */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_point.h"
#include "xtrain.h"

static void window_add(window *w, const window *d) {
  w->loss += d->loss;
  w->correct += d->correct;
  w->count += d->count;
  w->time += d->time;
  w->comm += d->comm;
  w->blocked += d->blocked;
  w->wire += d->wire;
  w->skipped += d->skipped;
}

/* r->x and r->y for samples indices[0..n) of the training or test set. */
static void fill_batch(run *r, int test, const size_t *indices, int n) {
  if (is_gpt(r))
    text_fill_batch(test ? &r->text_val : &r->text_train, indices, n, r->x,
                    r->y);
  else
    data_fill_batch(test ? &r->test : &r->train, indices, n, r->mean, r->std,
                    r->x, r->y);
}

/* Accuracy and mean loss on this rank's shard (r, r+W, ...) of the test
 * set, combined over ranks. Under a lockstep strategy (fsdp, whose forward
 * runs collectives) every rank runs as many batches as rank 0, which has
 * the most samples; a rank out of samples runs its first sample again and
 * does not count it.
 * For gpt, *acc is exp(-loss), the geometric mean of the probability given
 * to the right next byte (1 / perplexity): higher is better, as accuracy,
 * so that checkpoint_best.safetensors keeps the lowest validation loss. */
static void evaluate(run *r, double *acc, double *loss) {
  size_t idx[65536];
  double totals[3] = {0, 0, 0}; /* correct, count, loss sum */
  size_t count = test_count(r);
  int B = r->m.max_batch > 65536 ? 65536 : r->m.max_batch;
  size_t W = (size_t)r->world_size;
  size_t mine = count > (size_t)r->rank
                    ? (count - (size_t)r->rank + W - 1) / W : 0;
  size_t most = (count + W - 1) / W; /* rank 0's */
  size_t batches = ((r->strat.lockstep ? most : mine) + (size_t)B - 1) / (size_t)B;
  size_t i = (size_t)r->rank;
  for (size_t b = 0; b < batches; b++) {
    int n = 0;
    for (; n < B && i < count; n++, i += W)
      idx[n] = i;
    int counted = n;
    if (n == 0) {
      idx[0] = 0;
      n = 1;
    }
    fill_batch(r, 1, idx, n);
    int correct = 0;
    strategy_before_forward(&r->strat);
    double l = model_forward(&r->m, r->x, r->y, n, &correct);
    if (counted > 0) {
      totals[2] += l;
      totals[0] += correct;
      totals[1] += n;
    }
  }
  check_xcoll(r, strategy_release(&r->strat), "releasing gathered parameters");
  sum_over_ranks(r, totals, 3);
  *acc = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
  *loss = totals[1] > 0 ? totals[2] / totals[1] : 0.0;
  if (is_gpt(r))
    *acc = exp(-*loss);
}

/* Save dir/<stem>.safetensors (or, fsdp sharded, the set of
 * checkpoint_fsdp.h). Collective under fsdp; rank 0 alone otherwise. */
static void save_checkpoint(run *r, const char *stem) {
  char err[1024];
  if (r->strat.kind == STRATEGY_FSDP) {
    if (fsdp_checkpoint_save(&r->strat, &r->opt, &r->meta,
                             r->cfg.checkpoint_format, r->cfg.checkpoint_dir,
                             stem, r->comm, r->rank, r->world_size, err,
                             sizeof err) != 0) {
      /* A sharded save fails on every rank at once; a full one on rank 0. */
      if (r->cfg.checkpoint_format == CHECKPOINT_SHARDED)
        fail_together(r, "%s", err);
      fail(r, "%s", err);
    }
    return;
  }
  if (r->rank != 0)
    return;
  char name[256];
  snprintf(name, sizeof name, "%s.safetensors", stem);
  if (checkpoint_save(r->cfg.checkpoint_dir, name, &r->m, &r->opt, &r->meta,
                      err, sizeof err) != 0)
    fail(r, "%s", err);
}

/* ---- one update ---- */

/* float16 loss scaling: unscale this rank's gradients (all of them under
 * ddp, its shard under fsdp), agree over ranks whether any is inf or nan
 * (an all-reduce of one flag), update the scale; 1 when the step must be
 * skipped. */
static int scaler_says_skip(run *r) {
  int32_t found =
      loss_scaler_unscale(&r->scaler, r->strat.grads, r->strat.count);
  if (r->comm) {
    check_xcoll(r, xcoll_allreduce(&found, &found, 1, XCOLL_INT32, XCOLL_MAX,
                                   r->comm),
                "all-reduce of the loss scaler's inf/nan flag");
    r->strat.wire_bytes += mixed_wire_allreduce(sizeof found, r->world_size);
  }
  double before = r->scaler.scale;
  int skip = loss_scaler_update(&r->scaler, found);
  if (skip && r->rank == 0) {
    if (r->tty)
      printf("\n");
    printf("loss scaler: inf/nan in the gradients, step %" PRId64
           " skipped (%" PRId64 " so far), scale %g -> %g\n",
           r->meta.step + 1, r->scaler.skipped_steps, before,
           r->scaler.scale);
  }
  return skip;
}

/* --profile: charge the time since the previous lap to part. */
static void lap(profile *prof, profile_part part) {
  if (prof)
    profile_lap(prof, part);
}

/* Runs update s of the epoch (its K micro-batches, the strategy's
 * communication and the optimizer step); returns its sums in *w. */
static void train_step(run *r, int epoch, int64_t s, window *w) {
  const config *c = &r->cfg;
  int B = c->batch_size, K = c->grad_accum;
  memset(w, 0, sizeof *w);
  /* --profile: laps only in training steps, not in evaluation. The first
   * update (page faults, OpenBLAS's buffers) is not counted. */
  profile *prof = c->profile ? &r->prof : NULL;
  if (prof && r->profiled_updates == 1)
    profile_reset(prof);
  r->m.profile = prof;
  if (prof)
    profile_start(prof);
  double t0 = ddp_now();
  size_t wire_before = r->strat.wire_bytes;
  int64_t m0 = s * K, m1 = m0 + K;
  if (m1 > r->micro_per_epoch)
    m1 = r->micro_per_epoch;
  /* Samples in this update on this rank, so that the accumulated gradient
   * is the mean over all of them. */
  size_t step_samples = 0;
  for (int64_t mb = m0; mb < m1; mb++) {
    size_t lo = (size_t)mb * B, hi = lo + B;
    step_samples += (hi > r->smp.num_samples ? r->smp.num_samples : hi) - lo;
  }
  for (int64_t mb = m0; mb < m1; mb++) {
    size_t lo = (size_t)mb * B;
    int n = (int)((lo + B > r->smp.num_samples) ? r->smp.num_samples - lo
                                                : (size_t)B);
    double t_load = ddp_now();
    fill_batch(r, 0, r->smp.indices + lo, n);
    lap(prof, PROFILE_OTHER);
    double t_forward = ddp_now();
    timeline_span(&r->trace, "load batch", "data", TIMELINE_TID_STEPS, t_load,
                  t_forward, NULL);
    int correct = 0;
    int sync = (mb == m1 - 1);
    float loss_scale = 1.0f / (float)step_samples;
    if (r->scaler.enabled) /* GradScaler: the loss times the scale */
      loss_scale = (float)(r->scaler.scale / (double)step_samples);
    if (r->strat.forward_backward) {
      /* dp: replicate, scatter, forward and backward on every replica,
       * gather, reduce */
      double loss = r->strat.forward_backward(&r->strat, r->x, r->y, n,
                                              loss_scale, &correct);
      lap(prof, PROFILE_MODEL);
      double t_done = ddp_now();
      timeline_span(&r->trace, "dp forward+backward", "compute",
                    TIMELINE_TID_STEPS, t_forward, t_done, NULL);
      w->loss += loss;
      w->correct += correct;
      w->count += n;
      w->comm += r->strat.last.comm_time;
      w->blocked += r->strat.last.blocked_time;
      continue;
    }
    strategy_before_forward(&r->strat);
    lap(prof, PROFILE_HOOKS);
    double loss = model_forward(&r->m, r->x, r->y, n, &correct);
    lap(prof, PROFILE_MODEL);
    w->loss += loss;
    w->correct += correct;
    w->count += n;
    double t_backward = ddp_now();
    timeline_span(&r->trace, "forward", "compute", TIMELINE_TID_STEPS,
                  t_forward, t_backward, NULL);
    strategy_before_backward(&r->strat, sync);
    lap(prof, PROFILE_HOOKS);
    r->tracer.mark = t_backward;
    r->tracer.previous = -1;
    model_backward(&r->m, n, loss_scale);
    lap(prof, PROFILE_MODEL);
    double t_wait = ddp_now();
    if (r->trace.file) {
      char args[64];
      snprintf(args, sizeof args, "\"micro_batch\":%" PRId64 ",\"sync\":%d",
               mb - m0, r->comm ? sync : 0);
      timeline_span(&r->trace, "backward", "compute", TIMELINE_TID_STEPS,
                    t_backward, t_wait, args);
    }
    check_xcoll(r, strategy_after_backward(&r->strat),
                r->cfg.strategy == STRATEGY_FSDP ? "gradient reduce-scatter"
                                                 : "gradient all-reduce");
    lap(prof, PROFILE_COMM_WAIT);
    /* DDP communicates on the last micro-batch, FSDP on every one. */
    int fsdp_run = r->cfg.strategy == STRATEGY_FSDP;
    if (r->comm && (sync || fsdp_run)) {
      timeline_span(&r->trace, fsdp_run ? "fsdp wait" : "ddp wait",
                    fsdp_run ? "fsdp" : "ddp", TIMELINE_TID_STEPS, t_wait,
                    ddp_now(), NULL);
      if (fsdp_run)
        trace_fsdp_ops(r);
      else
        trace_buckets(r, &r->dp, &r->m);
    }
    w->comm += r->strat.last.comm_time;
    w->blocked += r->strat.last.blocked_time;
  }
  double t_optim = ddp_now();
  int skip = r->scaler.enabled && scaler_says_skip(r);
  if (!skip) {
    check_xcoll(r, strategy_before_step(&r->strat, c->clip_grad_norm),
                "gradient norm all-reduce");
    float lr = schedule_lr(c->schedule, c->lr, r->meta.step, c->warmup_steps,
                           r->schedule_steps);
    optim_step(&r->opt, r->strat.params, r->strat.grads, lr);
  }
  strategy_after_step(&r->strat);
  lap(prof, PROFILE_OPTIMIZER);
  w->skipped = skip;
  w->wire = (double)(r->strat.wire_bytes - wire_before);
  r->meta.step++;
  double t_end = ddp_now();
  if (r->trace.file) {
    char name[48], args[64];
    timeline_span(&r->trace, "optimizer step", "compute", TIMELINE_TID_STEPS,
                  t_optim, t_end, NULL);
    snprintf(name, sizeof name, "step %" PRId64, r->meta.step);
    snprintf(args, sizeof args, "\"step\":%" PRId64 ",\"epoch\":%d",
             r->meta.step, epoch);
    timeline_span(&r->trace, name, "step", TIMELINE_TID_STEPS, t0, t_end,
                  args);
  }
  w->time = t_end - t0;
  if (prof) {
    lap(prof, PROFILE_OTHER);
    r->profiled_updates++;
    r->m.profile = NULL;
  }
}

/* ---- the loop ---- */

/* After an epoch (or the part of it --max-steps allowed): evaluation, the
 * epoch's log line and the checkpoints. */
static void end_epoch(run *r, int epoch, int64_t updates,
                      int64_t done_in_epoch, const window *ep, double *best) {
  const config *c = &r->cfg;
  double sums[3] = {ep->loss, ep->correct, ep->count};
  sum_over_ranks(r, sums, 3);
  double test_acc, test_loss;
  double t_eval = ddp_now();
  evaluate(r, &test_acc, &test_loss);
  if (r->trace.file) {
    char args[32];
    snprintf(args, sizeof args, "\"epoch\":%d", epoch);
    timeline_span(&r->trace, "evaluate", "eval", TIMELINE_TID_STEPS, t_eval,
                  ddp_now(), args);
  }
  int finished = done_in_epoch >= r->steps_per_epoch;
  r->meta.epoch = finished ? epoch + 1 : epoch;
  r->meta.step_in_epoch = finished ? 0 : done_in_epoch;
  if (c->checkpoint_dir) { /* every rank: collective under fsdp */
    if (test_acc > *best) {
      *best = test_acc;
      r->meta.best_test_acc = *best;
      save_checkpoint(r, "checkpoint_best");
    }
    r->meta.best_test_acc = *best;
    save_checkpoint(r, "checkpoint_latest");
  }
  log_epoch(r, epoch, finished, updates, sums, test_loss, test_acc, ep);
}

/* The epoch's micro-batches and updates on this rank, from the sampler's
 * share (which --elastic changes in the middle of an epoch). */
static void epoch_schedule(run *r) {
  int64_t B = r->cfg.batch_size, K = r->cfg.grad_accum;
  int64_t n = (int64_t)r->smp.num_samples;
  r->micro_per_epoch = r->cfg.drop_last ? n / B : (n + B - 1) / B;
  r->steps_per_epoch = (r->micro_per_epoch + K - 1) / K;
}

/* --elastic: positions of the epoch's permutation consumed by every rank
 * once this rank has done updates [0, s) of its share. */
static void note_position(run *r, int epoch, int64_t s) {
  elastic_state *e = &r->elastic;
  size_t local = (size_t)(s * r->cfg.grad_accum * r->cfg.batch_size);
  e->at_epoch = epoch;
  e->at_samples = s >= r->steps_per_epoch
                      ? r->smp.dataset_size
                      : e->epoch_start + local * (size_t)r->world_size;
}

static void train(run *r) {
  const config *c = &r->cfg;
  elastic_state *e = &r->elastic;
  e->best = r->meta.best_test_acc;
  memset(&e->all, 0, sizeof e->all);
  e->run_samples = 0.0;
  e->launch_rank = r->rank;
  if (c->elastic) {
    e->lost = malloc((size_t)r->world_size * sizeof *e->lost);
    if (!e->lost)
      fail(r, "out of memory for --elastic");
  }
  /* --elastic: a lost rank brings every survivor back here (check_xcoll
   * calls elastic_on_failure, which jumps), to recover and re-enter the
   * loop where rank 0 stood. What the loop keeps across epochs lives in
   * r->elastic, which the jump leaves as it was. */
  if (c->elastic && setjmp(e->redo) != 0)
    elastic_recover(r);
  if (c->elastic)
    r->on_comm_failure = elastic_on_failure;
  for (int epoch = r->meta.epoch;
       epoch < c->epochs && r->meta.step < r->total_steps; epoch++) {
    if (sampler_set_epoch_from(&r->smp, epoch, e->epoch_start) != 0)
      fail(r, "out of memory shuffling epoch %d", epoch);
    epoch_schedule(r);
    int64_t first = epoch == r->meta.epoch ? r->meta.step_in_epoch : 0;
    if (!e->redo_now) {
      memset(&e->ep, 0, sizeof e->ep);
      memset(&e->iv, 0, sizeof e->iv);
      e->ep_updates = 0;
    }
    e->redo_now = 0;
    note_position(r, epoch, first);
    int64_t s;
    for (s = first; s < r->steps_per_epoch; s++) {
      if (r->meta.step >= r->total_steps)
        break;
      fault_step(e->launch_rank, r->meta.step);
      window w;
      train_step(r, epoch, s, &w);
      note_position(r, epoch, s + 1);
      window_add(&e->ep, &w);
      window_add(&e->iv, &w);
      e->ep_updates++;
      e->run_samples += w.count * r->world_size;
      progress(r, epoch, s + 1, r->steps_per_epoch,
               e->iv.count > 0 ? e->iv.loss / e->iv.count : 0.0);
      if (c->log_every > 0 && r->meta.step % c->log_every == 0)
        log_interval(r, epoch, &e->iv);
    }
    window_add(&e->all, &e->ep);
    end_epoch(r, epoch, e->ep_updates, s, &e->ep, &e->best);
    e->epoch_start = 0;
  }
  r->on_comm_failure = NULL;
  log_summary(r, &e->all, e->run_samples);
}

/* gpt, before training: the validation loss of the initial parameters,
 * against the uniform distribution's ln(256). */
static void log_initial_validation(run *r) {
  double acc, loss;
  evaluate(r, &acc, &loss);
  if (r->rank != 0)
    return;
  printf("step %" PRId64 ": val_loss %.4f val_bpc %.4f (uniform over %d "
         "bytes: %.4f)\n",
         r->meta.step, loss, loss / log(2.0), MODEL_GPT_VOCAB,
         log((double)MODEL_GPT_VOCAB));
  fflush(stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "initial_validation");
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "test_loss", loss);
  json_line(r, o);
}

int main(int argc, char **argv) {
  static run r; /* large (the ddp buckets): not on the stack */
  /* Serve the parameter, gradient and optimizer buffers (about 1 MiB each
   * for the MLP) from the heap instead of one mmap each: with glibc's
   * default 128 KiB threshold the SGD step over them ran 1.2 to 8 times
   * slower, varying from run to run, and single-rank training 20k instead
   * of 50k samples/s (docs/trainer.md, "Allocation and throughput"). */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  options_parse(&r.cfg, argc, argv);
  openblas_set_num_threads(r.cfg.threads);
  setup_comm(&r);
  setup_outputs(&r);
  load_data(&r);
  setup_model(&r);
  setup_strategy(&r);
  setup_trace(&r);
  setup_schedule(&r);
  const config *c = &r.cfg;
  print_run(&r);
  if (r.rank == 0 || r.strat.kind == STRATEGY_FSDP)
    print_memory(&r);
  if (c->model == MODEL_GPT)
    log_initial_validation(&r);
  train(&r);
  if (c->model == MODEL_GPT)
    print_sample(&r);
  if (c->dump_params)
    dump_params(&r);
  teardown(&r);
  return 0;
}
