/*
 * fault_point.h - named points where a test can kill xtrain, to check that
 * a save interrupted anywhere leaves a checkpoint that resumes
 * (tests/trainer/checkpoint_kill.sh), and a step at which a test can kill
 * one rank (tests/trainer/elastic.sh).
 *
 * XTRAIN_FAULT_POINT (read once):
 *   unset       fault_point does nothing;
 *   "list"      each call prints "xtrain: fault point NAME#HIT" on stderr,
 *               HIT counting the calls with that NAME in this process (1 up);
 *   "NAME#HIT"  the HIT-th call with NAME sends this process SIGKILL, as
 *               kill -9 or a power cut would stop it: no handler, no flush.
 * Only tests set it; a normal run pays one getenv.
 */
#ifndef XTRAIN_FAULT_POINT_H
#define XTRAIN_FAULT_POINT_H

#include <stdint.h>

void fault_point(const char *name);

/* XTRAIN_FAULT_STEP="RANK:STEP" (read once): the process of rank RANK
 * sends itself SIGKILL when it starts update STEP (0-based: the updates
 * done so far, over the whole run), before it loads a batch. Unset or
 * empty: nothing; nothing either in a restarted job
 * (TORCHELASTIC_RESTART_COUNT above 0: xcollrun --max-restarts), which
 * would otherwise die at the same step again. Call at the start of every
 * update. */
void fault_step(int rank, int64_t step);

#endif /* XTRAIN_FAULT_POINT_H */
