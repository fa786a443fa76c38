/*
 * elastic.c - xtrain --elastic: when a rank of a ddp job dies, the others
 * shrink the communicator (xcoll_comm_shrink) and go on from what they hold
 * in memory; nothing is read from a checkpoint. See docs/trainer.md,
 * "Elastic: --elastic".
 *
 * The survivors may stand at different places when they learn of the
 * death: one may have finished a step's gradient all-reduce and applied the
 * optimizer while another's all-reduce failed. So after the shrink every
 * survivor takes the new rank 0's state (parameters, optimizer state, the
 * run's counters and where the epoch stands) and the loop redoes, from the
 * top, the step (or the end of epoch) that rank 0 was in. The rest of the
 * epoch's permutation is split over the new world size.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xtrain.h"

/* How long to ask the store which rank is gone: it learns of a death about
 * when the peers do, but not necessarily before this rank asks. */
#define ELASTIC_WAIT_S 10.0

void elastic_on_failure(run *r, xcoll_status st, const char *what) {
  elastic_state *e = &r->elastic;
  double t0 = ddp_now();
  /* A death shows as REMOTE (or as a timeout on a rank that waited on the
   * dead one through a live peer); other errors are not a lost rank. */
  int may_be_death = st == XCOLL_ERR_REMOTE || st == XCOLL_ERR_TIMEOUT;
  int count = 0;
  for (;;) {
    xcoll_status asked =
        xcoll_comm_failed_ranks(r->comm, e->lost, r->world_size, &count);
    if (asked != XCOLL_SUCCESS) {
      fprintf(stderr,
              "xtrain[rank %d]: --elastic: %s failed and the store cannot "
              "say which rank is gone (%s: %s); it lives in rank 0 unless "
              "xcollrun --store-host launcher serves it, so a job that "
              "loses rank 0 cannot go on without that\n",
              r->rank, what, xcoll_strerror(asked),
              xcoll_comm_last_error(r->comm));
      return;
    }
    if (count > 0 || !may_be_death || ddp_now() - t0 > ELASTIC_WAIT_S)
      break;
    struct timespec nap = {0, 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  if (count == 0)
    return;
  e->lost_count = count < r->world_size ? count : r->world_size;
  e->failed_at = t0;
  longjmp(e->redo, 1);
}

/* "rank 2" or "ranks 1, 2" in the numbering of the broken communicator. */
static void lost_list(const elastic_state *e, char *out, size_t bytes) {
  size_t at = (size_t)snprintf(out, bytes, "rank%s",
                               e->lost_count > 1 ? "s" : "");
  for (int k = 0; k < e->lost_count && at < bytes; k++)
    at += (size_t)snprintf(out + at, bytes - at, "%s %d", k ? "," : "",
                           e->lost[k]);
}

/* Every survivor takes the new rank 0's parameters, optimizer state,
 * counters and position. A failure here (a second death) jumps back to the
 * redo point through check_xcoll, which recovers again. */
static void take_rank0_state(run *r) {
  elastic_state *e = &r->elastic;
  int64_t position[4] = {e->at_epoch, (int64_t)e->at_samples, r->meta.step,
                         r->opt.step};
  check_xcoll(r, xcoll_broadcast(position, position, 4, XCOLL_INT64, 0,
                                 r->comm),
              "--elastic: broadcast of the position");
  check_xcoll(r, xcoll_broadcast(r->m.params, r->m.params, r->m.num_elements,
                                 XCOLL_FLOAT32, 0, r->comm),
              "--elastic: broadcast of the parameters");
  for (int k = 0; k < r->opt.num_state; k++)
    check_xcoll(r, xcoll_broadcast(r->opt.state[k], r->opt.state[k], r->opt.n,
                                   XCOLL_FLOAT32, 0, r->comm),
                "--elastic: broadcast of the optimizer state");
  /* Plain structs, the same build on every rank: sent as bytes. */
  check_xcoll(r, xcoll_broadcast(&r->meta, &r->meta, sizeof r->meta,
                                 XCOLL_UINT8, 0, r->comm),
              "--elastic: broadcast of the run's counters");
  check_xcoll(r, xcoll_broadcast(&r->scaler, &r->scaler, sizeof r->scaler,
                                 XCOLL_UINT8, 0, r->comm),
              "--elastic: broadcast of the loss scaler");
  e->at_epoch = (int)position[0];
  e->at_samples = (size_t)position[1];
  r->meta.step = position[2];
  r->opt.step = position[3];
}

/* Updates each rank makes over `positions` positions of a permutation split
 * over the world (the sampler's and the loop's rounding). */
static int64_t updates_for(const run *r, size_t positions) {
  const config *c = &r->cfg;
  int64_t W = r->world_size, B = c->batch_size, K = c->grad_accum;
  int64_t n = (int64_t)positions;
  int64_t per_rank = c->drop_last ? n / W : (n + W - 1) / W;
  int64_t micro = c->drop_last ? per_rank / B : (per_rank + B - 1) / B;
  return (micro + K - 1) / K;
}

void elastic_recover(run *r) {
  elastic_state *e = &r->elastic;
  int old_world = r->world_size;
  xcoll_comm_t shrunk = NULL;
  xcoll_status st = xcoll_comm_shrink(r->comm, e->lost, e->lost_count,
                                      XCOLL_SHRINK_ABORT, &shrunk);
  if (st != XCOLL_SUCCESS || shrunk == NULL)
    fail(r, "--elastic: shrinking the communicator failed: %s: %s",
         xcoll_strerror(st), xcoll_comm_last_error(r->comm));
  xcoll_comm_destroy(r->comm);
  r->comm = shrunk;
  xcoll_comm_rank(shrunk, &r->rank);
  xcoll_comm_size(shrunk, &r->world_size);
  ddp_set_comm(&r->dp, shrunk);
  char lost[256];
  lost_list(e, lost, sizeof lost);

  take_rank0_state(r);
  /* The step is redone from rank 0's parameters: what this rank had
   * accumulated of it goes. */
  model_zero_grad(&r->m);
  /* The rest of the epoch is split over the new world; the loop recomputes
   * the steps of the epoch from the sampler. */
  r->meta.epoch = e->at_epoch;
  r->meta.step_in_epoch = 0;
  e->epoch_start = e->at_samples;
  int shuffle = r->smp.shuffle;
  sampler_free(&r->smp);
  if (sampler_init(&r->smp, train_count(r), r->rank, r->world_size,
                   r->cfg.drop_last, r->cfg.seed) != 0)
    fail(r, "--elastic: out of memory creating the sampler");
  r->smp.shuffle = shuffle;
  /* The learning rate schedule is stretched to end with the last update
   * of the last epoch at the new world size; --max-steps still counts
   * updates. */
  size_t n = r->smp.dataset_size;
  r->schedule_steps = r->meta.step + updates_for(r, n - e->at_samples) +
                      (r->cfg.epochs - 1 - e->at_epoch) * updates_for(r, n);
  r->total_steps = r->schedule_steps;
  if (r->cfg.max_steps > 0 && r->cfg.max_steps < r->total_steps)
    r->total_steps = r->cfg.max_steps;
  e->best = r->meta.best_test_acc;
  e->redo_now = 1;

  double took = ddp_now() - e->failed_at;
  if (r->rank != 0)
    return;
  if (r->tty)
    printf("\n");
  printf("elastic: lost %s (of %d) at step %" PRId64 " (epoch %d); going on "
         "with world size %d from rank 0's state, redoing step %" PRId64
         "; recovery took %.3f s\n",
         lost, old_world, r->meta.step, e->at_epoch, r->world_size,
         r->meta.step, took);
  fflush(stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "elastic");
  cJSON *ranks = cJSON_AddArrayToObject(o, "lost_ranks");
  for (int k = 0; k < e->lost_count; k++)
    cJSON_AddItemToArray(ranks, cJSON_CreateNumber(e->lost[k]));
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "epoch", e->at_epoch);
  cJSON_AddNumberToObject(o, "old_world_size", old_world);
  cJSON_AddNumberToObject(o, "world_size", r->world_size);
  cJSON_AddNumberToObject(o, "recovery_s", took);
  json_line(r, o);
}
