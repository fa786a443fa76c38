/*
 * fault_point.h - named points where a test can kill xtrain, to check that
 * a save interrupted anywhere leaves a checkpoint that resumes
 * (tests/trainer/checkpoint_kill.sh).
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

void fault_point(const char *name);

#endif /* XTRAIN_FAULT_POINT_H */
