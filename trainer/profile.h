/*
 * profile.h - xtrain --profile: where a training step's time goes. The
 * step is cut into laps, each charged to one part: inside the gpt, its
 * layer groups (gpt.c laps after every layer); around the model, xtrain's
 * train_step laps after data loading, the strategy's waits and the
 * optimizer. Each lap is measured on two clocks: wall (CLOCK_MONOTONIC)
 * and the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), which other
 * jobs on a shared machine do not inflate. With --threads 1 every layer
 * runs on the calling thread, so its CPU time is the layer's work.
 */
#ifndef XTRAIN_PROFILE_H
#define XTRAIN_PROFILE_H

#include <stdint.h>
#include <stdio.h>

typedef enum profile_part {
  PROFILE_MATMUL,      /* linear layers: sgemm, bias */
  PROFILE_ATTENTION,   /* causal self-attention: scores, softmax, att @ v */
  PROFILE_ELEMENTWISE, /* layernorm, gelu, residual adds, embeddings */
  PROFILE_LOSS,        /* softmax cross-entropy over the logits */
  PROFILE_MODEL,       /* a model without a breakdown (mlp, cnn) */
  PROFILE_HOOKS,       /* strategy hooks in forward/backward (fsdp gathers,
                          ddp bucket launches) */
  PROFILE_COMM_WAIT,   /* after backward: waiting for gradient reduction */
  PROFILE_OPTIMIZER,   /* gradient clipping and the optimizer step */
  PROFILE_OTHER,       /* loading the batch, the rest of the step */
  PROFILE_PARTS
} profile_part;

typedef struct profile {
  double wall[PROFILE_PARTS]; /* seconds, summed over laps */
  double cpu[PROFILE_PARTS];
  double lap_wall, lap_cpu; /* when the current lap began */
} profile;

/* Begin a lap now (at the start of a step). */
void profile_start(profile *p);
/* Charge the time since the lap began to part, and begin the next lap. */
void profile_lap(profile *p, profile_part part);
/* Forget the sums (after the warm-up steps). */
void profile_reset(profile *p);
/* One line per part: milliseconds per update (wall and thread CPU) and
 * its share of the wall total, over updates updates. */
void profile_print(const profile *p, int64_t updates, FILE *out);
const char *profile_part_name(profile_part part);

#endif /* XTRAIN_PROFILE_H */
