/*
 * xtrain_report.c - what xtrain tells: errors (every rank's own, or one all
 * ranks agreed on), rank 0's progress, the step, epoch and summary lines
 * with their --log-json records, the --trace spans, the printed layouts and
 * memory, --dump-params and the gpt's sample. Called by xtrain_setup.c and
 * xtrain.c; calls neither (xtrain.h).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xtrain.h"

/* Share of communication hidden under backward, in [0, 1]; 0 when there
 * was none. Clamped because both times are measured independently. */
static double hidden_share(double comm, double blocked) {
  if (comm <= 0.0)
    return 0.0;
  double share = 1.0 - blocked / comm;
  return share < 0.0 ? 0.0 : share;
}

/* Stop this rank after a failure that has been printed. */
__attribute__((noreturn)) static void stop(run *r, int agreed) {
  if (r->trace.file)
    fflush(r->trace.file); /* xcoll-trace-merge reads an unclosed file */
  if (r->comm) {
    /* Tell peers, so they fail fast instead of waiting for a timeout; but
     * when every rank already knows (agreed), an abort right after the
     * collective that told them could cut a peer still finishing it. */
    if (!agreed)
      xcoll_comm_abort(r->comm);
    xcoll_comm_destroy(r->comm);
  }
  exit(1);
}

__attribute__((noreturn)) static void fail_v(run *r, int agreed,
                                             const char *fmt, va_list ap) {
  fprintf(stderr, "xtrain[rank %d]: error: ", r->rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  stop(r, agreed);
}

void fail(run *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(r, 0, fmt, ap);
  va_end(ap);
}

/* A failure every rank has learned from a collective and stops on. */
void fail_together(run *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(r, 1, fmt, ap);
  va_end(ap);
}

/* The failure once: when the library's WARN line showed its message, xtrain
 * stops without printing it again. */
void check_xcoll(run *r, xcoll_status st, const char *what) {
  if (st == XCOLL_SUCCESS)
    return;
  /* --elastic: the loop's hook jumps away when a rank is lost */
  if (r->on_comm_failure)
    r->on_comm_failure(r, st, what);
  if (xcoll_comm_last_error_logged(r->comm))
    stop(r, 0);
  fail(r, "%s failed: %s: %s", what, xcoll_strerror(st),
       xcoll_comm_last_error(r->comm));
}

/* In-place sum over ranks of n doubles; nothing to do with one process. */
void sum_over_ranks(run *r, double *v, size_t n) {
  if (r->comm)
    check_xcoll(r, xcoll_allreduce(v, v, n, XCOLL_FLOAT64, XCOLL_SUM, r->comm),
                "xcoll_allreduce of statistics");
}

void json_line(run *r, cJSON *o) {
  if (r->json) {
    char *s = cJSON_PrintUnformatted(o);
    fprintf(r->json, "%s\n", s);
    fflush(r->json);
    free(s);
  }
  cJSON_Delete(o);
}

/* Live progress on rank 0. A terminal gets a bar redrawn every step. Any
 * other stdout (xcollrun's pipe, a file) would show nothing between epoch
 * lines, so it gets one line every --progress-every seconds: rank 0's own
 * running loss and samples/s (no collective: the ranks are not synchronised
 * for it). */
void progress(run *r, int epoch, int64_t step, int64_t steps,
                     double loss) {
  if (r->rank != 0)
    return;
  if (!r->tty) {
    double every = r->cfg.progress_every;
    if (every <= 0)
      return;
    double now = ddp_now();
    r->progress_steps++;
    if (r->progress_at == 0) {
      r->progress_from = now;
      r->progress_at = now + every;
      return;
    }
    if (now < r->progress_at)
      return;
    double elapsed = now - r->progress_from;
    double sps = elapsed > 0 ? (double)r->progress_steps *
                                   (double)r->cfg.batch_size * r->cfg.grad_accum *
                                   r->world_size /
                                   elapsed
                             : 0.0;
    printf("progress: epoch %d step %" PRId64 "/%" PRId64 " (%.0f%%) loss %.4f "
           "(rank 0) samples/s %.0f\n",
           epoch, step, steps, 100.0 * (double)step / (double)steps, loss, sps);
    fflush(stdout);
    r->progress_at = now + every;
    return;
  }
  int width = 30, filled = (int)(width * (double)step / (double)steps);
  char bar[64];
  for (int i = 0; i < width; i++)
    bar[i] = i < filled ? '=' : ' ';
  bar[width] = '\0';
  printf("\repoch %d [%s] %" PRId64 "/%" PRId64 " loss %.4f", epoch, bar, step,
         steps, loss);
  fflush(stdout);
}

/* --dump-params: the whole model in registration order, gathered from the
 * shards under fsdp, so that files of every strategy compare directly. */
void dump_params(run *r) {
  float *all = malloc(r->m.num_elements * sizeof(float));
  if (!all)
    fail(r, "out of memory gathering parameters for --dump-params");
  check_xcoll(r, strategy_gather_params(&r->strat, all),
              "gathering parameters for --dump-params");
  char path[4096];
  snprintf(path, sizeof path, "%s.rank%d", r->cfg.dump_params, r->rank);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(all, sizeof(float), r->m.num_elements, f) !=
                r->m.num_elements || fclose(f) != 0)
    fail(r, "cannot write --dump-params file %s: %s", path, strerror(errno));
  free(all);
}

/* ---- --trace ---- */

static size_t layer_name_length(const char *tensor) {
  return strcspn(tensor, ".");
}

void traced_grad_ready(void *ctx, int param_index) {
  layer_tracer *lt = ctx;
  double now = ddp_now();
  const char *name = lt->m->views[param_index].name;
  size_t len = layer_name_length(name);
  const char *prev = lt->previous >= 0 ? lt->m->views[lt->previous].name : "";
  if (lt->previous < 0 || layer_name_length(prev) != len ||
      strncmp(prev, name, len) != 0) {
    char span[64];
    snprintf(span, sizeof span, "backward %.*s", (int)len, name);
    timeline_span(lt->trace, span, "compute", TIMELINE_TID_STEPS, lt->mark, now,
                  NULL);
  }
  if (lt->inner)
    lt->inner(lt->inner_ctx, param_index);
  lt->previous = param_index;
  lt->mark = ddp_now();
}

/* One span per bucket of the last synchronised backward, from the
 * xcoll_iallreduce call to the first time completion was seen. */
void trace_buckets(run *r, const ddp *d, const model *m) {
  for (int i = 0; i < d->num_buckets; i++) {
    const ddp_bucket *b = &d->buckets[i];
    if (!b->launched)
      continue;
    char name[48], args[256];
    snprintf(name, sizeof name, "allreduce bucket %d", i);
    snprintf(args, sizeof args,
             "\"bucket\":%d,\"bytes\":%zu,\"tensors\":\"%s..%s\","
             "\"completion_seen_by\":\"%s\"",
             i, b->count * sizeof(float), m->views[b->first_param].name,
             m->views[b->last_param].name,
             b->done_at_wait ? "xcoll_wait" : "xcoll_test");
    timeline_span(&r->trace, name, "ddp", TIMELINE_TID_STEPS + 1 + i,
                  b->launch_time, b->done_time, args);
  }
}

/* One span per collective of the last FSDP micro-batch, on one track per
 * communicator (its operations run one after the other). */
void trace_fsdp_ops(run *r) {
  const fsdp_op_record *ops;
  int n = fsdp_last_ops(&r->strat, &ops);
  for (int i = 0; i < n; i++) {
    const unit *u = &r->strat.plan.units[ops[i].unit];
    char name[48], args[160];
    snprintf(name, sizeof name, "%s unit %d", ops[i].what, ops[i].unit);
    snprintf(args, sizeof args,
             "\"unit\":%d,\"bytes\":%zu,\"tensors\":\"%s..%s\"",
             ops[i].unit, ops[i].bytes, r->m.views[u->first_param].name,
             r->m.views[u->last_param].name);
    timeline_span(&r->trace, name, "fsdp",
                  TIMELINE_TID_STEPS + 1 + ops[i].across_nodes,
                  ops[i].issue_time, ops[i].done_time, args);
  }
}

/* ---- setup ---- */

void print_ddp_layout(run *r) {
  const ddp *d = &r->dp;
  printf("ddp: %d ranks on backend %s, %d bucket(s), the first of at most "
         "%.3g MiB, the others of at most %.3g MiB\n",
         r->world_size, xcoll_comm_backend(r->comm), d->num_buckets,
         r->cfg.first_bucket_mb, r->cfg.bucket_cap_mb);
  for (int i = 0; i < d->num_buckets; i++) {
    const ddp_bucket *b = &d->buckets[i];
    printf("ddp: bucket %d: %d tensors (", i,
           b->last_param - b->first_param + 1);
    for (int p = b->last_param; p >= b->first_param; p--)
      printf("%s%s", r->m.views[p].name, p > b->first_param ? ", " : "");
    printf("), %zu bytes (%.3f MiB)\n", b->count * sizeof(float),
           (double)(b->count * sizeof(float)) / (1024.0 * 1024.0));
  }
}

void print_fsdp_layout(run *r) {
  const config *c = &r->cfg;
  printf("fsdp: %d ranks on backend %s, %s, backward prefetch %s, forward "
         "prefetch %s, %d unit(s)\n",
         r->world_size, xcoll_comm_backend(r->comm), r->strat.name,
         fsdp_prefetch_name(c->fsdp.backward_prefetch),
         c->fsdp.forward_prefetch ? "on" : "off", r->strat.plan.num_units);
  for (int i = 0; i < r->strat.plan.num_units; i++) {
    const unit *u = &r->strat.plan.units[i];
    printf("fsdp: unit %d: %s..%s, %zu parameters\n", i,
           r->m.views[u->first_param].name, r->m.views[u->last_param].name,
           u->count);
  }
}

/* Rank 0's line saying what is trained, on how many ranks, with what
 * batch and data. */
void print_run(run *r) {
  const config *c = &r->cfg;
  if (r->rank == 0 && c->model == MODEL_GPT)
    printf("xtrain: gpt, %d layers, %d heads, d_model %d, context %d, "
           "%zu parameters, %d rank(s), batch %d x %d rank(s) x %d accum = "
           "%d windows per update, %" PRId64 " updates/epoch, text %zu "
           "bytes from %d file(s): train %zu windows, validation %zu windows "
           "of %d bytes\n",
           c->gpt.n_layer, c->gpt.n_head, c->gpt.d_model, c->gpt.context,
           r->m.num_elements, r->world_size, c->batch_size, r->world_size,
           c->grad_accum, c->batch_size * r->world_size * c->grad_accum,
           r->steps_per_epoch, r->corpus.size, r->corpus.files,
           r->text_train.count, r->text_val.count, c->gpt.context + 1);
  else if (r->rank == 0)
    printf("xtrain: %s, %zu parameters, %d rank(s), batch %d x %d rank(s) x "
           "%d accum = %d per update, %" PRId64 " updates/epoch, "
           "train %zu test %zu, mean %.4f std %.4f\n",
           model_kind_name(c->model), r->m.num_elements, r->world_size,
           c->batch_size, r->world_size, c->grad_accum,
           c->batch_size * r->world_size * c->grad_accum, r->steps_per_epoch,
           r->train.count, r->test.count, r->mean, r->std);
}

void print_memory(run *r) {
  const strategy_memory *mem = &r->strat.memory;
  size_t total = mem->param_bytes + mem->grad_bytes + mem->optim_bytes;
  printf("memory: rank %d holds %zu bytes (%.3f MiB) of parameters + "
         "gradients + optimizer state outside gathers: parameters %zu, "
         "gradients %zu, optimizer %zu\n",
         r->rank, total, (double)total / (1024.0 * 1024.0), mem->param_bytes,
         mem->grad_bytes, mem->optim_bytes);
}

/* ---- logging ---- */

/* Wire bytes per step and the loss scaler's state, in a JSON record. */
static void add_mixed_json(run *r, cJSON *o, double wire_per_step) {
  cJSON_AddNumberToObject(o, "wire_bytes_per_step", wire_per_step);
  if (r->scaler.enabled) {
    cJSON_AddNumberToObject(o, "loss_scale", r->scaler.scale);
    cJSON_AddNumberToObject(o, "skipped_steps",
                            (double)r->scaler.skipped_steps);
  }
}

void log_interval(run *r, int epoch, window *iv) {
  const config *c = &r->cfg;
  double v[2] = {iv->loss, iv->count};
  sum_over_ranks(r, v, 2);
  if (r->rank == 0) {
    float lr = schedule_lr(c->schedule, c->lr, r->meta.step - 1,
                           c->warmup_steps, r->schedule_steps);
    double steps_in = (double)c->log_every;
    double share = hidden_share(iv->comm, iv->blocked);
    if (r->tty)
      printf("\n");
    printf("step %" PRId64 " epoch %d loss %.4f lr %.5f step_time %.2f ms "
           "samples/s %.0f comm %.2f ms overlap %.0f%% wire %.0f B/step",
           r->meta.step, epoch, v[0] / v[1], lr, 1e3 * iv->time / steps_in,
           v[1] / iv->time, 1e3 * iv->comm / steps_in, 100.0 * share,
           iv->wire / steps_in);
    if (r->scaler.enabled)
      printf(" loss_scale %g skipped %" PRId64, r->scaler.scale,
             r->scaler.skipped_steps);
    printf("\n");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "step");
    cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
    cJSON_AddNumberToObject(o, "epoch", epoch);
    cJSON_AddNumberToObject(o, "loss", v[0] / v[1]);
    cJSON_AddNumberToObject(o, "lr", lr);
    cJSON_AddNumberToObject(o, "step_time_s", iv->time / steps_in);
    cJSON_AddNumberToObject(o, "samples_per_s", v[1] / iv->time);
    cJSON_AddNumberToObject(o, "comm_time_s", iv->comm / steps_in);
    cJSON_AddNumberToObject(o, "overlap", share);
    add_mixed_json(r, o, iv->wire / steps_in);
    json_line(r, o);
  }
  memset(iv, 0, sizeof *iv);
}

void log_epoch(run *r, int epoch, int finished, int64_t updates,
               const double sums[3], double test_loss, double test_acc,
               const window *ep) {
  if (r->rank != 0)
    return;
  double share = hidden_share(ep->comm, ep->blocked);
  double sps = ep->time > 0 ? sums[2] / ep->time : 0.0;
  if (r->tty)
    printf("\n");
  double wire = updates > 0 ? ep->wire / (double)updates : 0.0;
  if (is_gpt(r))
    printf("epoch %d%s: loss %.4f val_loss %.4f val_bpc %.4f val_ppl %.2f "
           "samples/s %.0f step_time %.2f ms comm %.2f ms/step "
           "overlap %.0f%% wire %.0f B/step",
           epoch, finished ? "" : " (partial)",
           sums[2] > 0 ? sums[0] / sums[2] : 0.0, test_loss,
           test_loss / log(2.0), exp(test_loss), sps,
           updates > 0 ? 1e3 * ep->time / updates : 0.0,
           updates > 0 ? 1e3 * ep->comm / updates : 0.0, 100.0 * share, wire);
  else
    printf("epoch %d%s: loss %.4f train_acc %.4f test_loss %.4f test_acc "
           "%.4f samples/s %.0f step_time %.2f ms comm %.2f ms/step "
           "overlap %.0f%% wire %.0f B/step",
           epoch, finished ? "" : " (partial)",
           sums[2] > 0 ? sums[0] / sums[2] : 0.0,
           sums[2] > 0 ? sums[1] / sums[2] : 0.0, test_loss, test_acc, sps,
           updates > 0 ? 1e3 * ep->time / updates : 0.0,
           updates > 0 ? 1e3 * ep->comm / updates : 0.0, 100.0 * share, wire);
  if (r->scaler.enabled)
    printf(" loss_scale %g skipped %" PRId64, r->scaler.scale,
           r->scaler.skipped_steps);
  printf("\n");
  fflush(stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "epoch");
  cJSON_AddNumberToObject(o, "epoch", epoch);
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "loss", sums[2] > 0 ? sums[0] / sums[2] : 0.0);
  cJSON_AddNumberToObject(o, "train_acc", sums[2] > 0 ? sums[1] / sums[2] : 0.0);
  cJSON_AddNumberToObject(o, "test_loss", test_loss);
  cJSON_AddNumberToObject(o, "test_acc", test_acc);
  cJSON_AddNumberToObject(o, "samples_per_s", sps);
  cJSON_AddNumberToObject(o, "step_time_s", updates > 0 ? ep->time / updates : 0.0);
  cJSON_AddNumberToObject(o, "comm_time_s", updates > 0 ? ep->comm / updates : 0.0);
  cJSON_AddNumberToObject(o, "overlap", share);
  add_mixed_json(r, o, wire);
  json_line(r, o);
}


/* Peak resident set size of this process (VmHWM), bytes; 0 if unknown. */
static size_t peak_rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %zu kB", &kib) == 1)
      break;
  fclose(f);
  return kib * 1024;
}

void log_summary(run *r, const window *all, double samples) {
  if (r->rank != 0)
    return;
  double share = hidden_share(all->comm, all->blocked);
  double sps = all->time > 0 ? samples / all->time : 0.0;
  const strategy_memory *mem = &r->strat.memory;
  size_t held = mem->param_bytes + mem->grad_bytes + mem->optim_bytes;
  printf("done: %" PRId64 " updates, %.0f samples/s (training only), "
         "comm %.1f s, overlap %.0f%%\n",
         r->meta.step, sps, all->comm, 100.0 * share);
  if (r->strat.kind == STRATEGY_FSDP)
    printf("fsdp: peak gathered parameters + unsharded gradients %zu bytes "
           "(%.3f MiB)\n",
           mem->peak_gathered_bytes,
           (double)mem->peak_gathered_bytes / (1024.0 * 1024.0));
  /* The whole process: the data set (47 MB of training images) dominates. */
  size_t rss = peak_rss_bytes();
  printf("memory: rank 0 peak resident set %zu bytes (%.1f MiB)\n", rss,
         (double)rss / (1024.0 * 1024.0));
  if (r->cfg.profile)
    profile_print(&r->prof, r->profiled_updates - 1, stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "summary");
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "world_size", r->world_size);
  cJSON_AddNumberToObject(o, "samples_per_s", sps);
  cJSON_AddNumberToObject(o, "train_time_s", all->time);
  cJSON_AddNumberToObject(o, "comm_time_s", all->comm);
  cJSON_AddNumberToObject(o, "overlap", share);
  cJSON_AddNumberToObject(o, "memory_bytes", (double)held);
  cJSON_AddNumberToObject(o, "peak_gathered_bytes",
                          (double)mem->peak_gathered_bytes);
  cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
  json_line(r, o);
}

#define GPT_SAMPLE_PROMPT "The "
#define GPT_SAMPLE_BYTES 200
#define GPT_SAMPLE_TEMPERATURE 0.8f

/* gpt, after training: every rank takes part in gathering the parameters
 * (a collective under fsdp); rank 0 generates GPT_SAMPLE_BYTES bytes from
 * GPT_SAMPLE_PROMPT on a copy of the model with a generator seeded from
 * --seed, so the text depends only on the parameters and the seed. */
void print_sample(run *r) {
  float *all = malloc(r->m.num_elements * sizeof(float));
  if (!all)
    fail(r, "out of memory gathering parameters for the sample");
  check_xcoll(r, strategy_gather_params(&r->strat, all),
              "gathering parameters for the sample");
  if (r->rank == 0) {
    model g;
    if (model_create_like(&g, &r->m, 1) != 0)
      fail(r, "out of memory creating the sampling model");
    memcpy(g.params, all, r->m.num_elements * sizeof(float));
    rng sample_rng;
    rng_seed(&sample_rng, r->cfg.seed ^ 0x5eed5eedULL);
    unsigned char text[GPT_SAMPLE_BYTES];
    const char *prompt = GPT_SAMPLE_PROMPT;
    gpt_generate(&g, (const unsigned char *)prompt, (int)strlen(prompt),
                 GPT_SAMPLE_BYTES, GPT_SAMPLE_TEMPERATURE, &sample_rng, text);
    printf("sample (temperature %.1f, seed %" PRIu64 "):\n%s%.*s\n",
           (double)GPT_SAMPLE_TEMPERATURE, r->cfg.seed, prompt,
           GPT_SAMPLE_BYTES, (const char *)text);
    fflush(stdout);
    model_free(&g);
  }
  free(all);
}
