/* prompt.h - the policy by which a queue of non-blocking calls learns that
 * its caller waits for each call at once ("prompt waits"), shared by core's
 * queue of host algorithms (core/request.c) and nccl_like's channel queues
 * (backends/nccl_like/engine.c, "Deferred kicks").
 *
 * A queue hands each call to another thread (core's progress thread, a
 * channel's worker) and the wait takes the end back: two wake-ups, which
 * for a small call cost more than the call (an 8 B allreduce on nccl_like
 * at P=2 on 2 cores: 7.3 us issued and waited for, 0.35 us blocking). So
 * after XCOLL_PROMPT_WAITS waits in a row that each came within
 * XCOLL_PROMPT_S of their call, the queue *defers*: a new call wakes no
 * thread, and its wait runs it on the waiting thread. A deferred call that
 * nobody waits for is still run by the other thread once it is due
 * (XCOLL_PROMPT_S old). A late wait, a test of a call not done, a full
 * queue or a call that came due means the caller overlaps work with its
 * calls: the queue then stops deferring (xcoll_prompt_stop) and wakes the
 * other thread for everything it holds.
 *
 * The struct is not locked here: each owner changes it under the lock that
 * guards its queue. defer is atomic (relaxed) so that a poll loop may read
 * it without that lock (xcoll_prompt_deferring). */
#ifndef XCOLL_CORE_PROMPT_H
#define XCOLL_CORE_PROMPT_H

#include <stdatomic.h>

/* A wait this soon after its call (seconds) is prompt; a deferred call is
 * due (run by the other thread) once it is this old. */
#define XCOLL_PROMPT_S 100e-6
/* Prompt waits in a row after which new calls are deferred. */
#define XCOLL_PROMPT_WAITS 8

typedef struct xcoll_prompt {
  _Atomic int defer; /* calls issued now are deferred */
  int prompt_waits; /* prompt waits in a row since deferring last stopped */
} xcoll_prompt;

/* A wait for a call issued at issued_at came at now (both monotonic
 * seconds). Returns 1 when it was prompt: counted, and the queue defers
 * from the XCOLL_PROMPT_WAITS-th in a row on. Returns 0 when it was late:
 * the caller must stop deferring (xcoll_prompt_stop, and clear its own
 * calls' deferred marks). */
static inline int xcoll_prompt_note_wait(xcoll_prompt *p, double issued_at,
                                         double now) {
  if (now - issued_at >= XCOLL_PROMPT_S)
    return 0;
  if (++p->prompt_waits >= XCOLL_PROMPT_WAITS)
    atomic_store_explicit(&p->defer, 1, memory_order_relaxed);
  return 1;
}

/* Whether calls issued now are deferred. Without the owner's lock the
 * answer may be a moment old: a caller that read 0 after issuing a
 * deferred call sees deferring stopped since, which cleared its mark. */
static inline int xcoll_prompt_deferring(const xcoll_prompt *p) {
  return atomic_load_explicit(&p->defer, memory_order_relaxed);
}

/* The caller overlaps work with its calls: new calls are not deferred, and
 * the count of prompt waits starts again. */
static inline void xcoll_prompt_stop(xcoll_prompt *p) {
  atomic_store_explicit(&p->defer, 0, memory_order_relaxed);
  p->prompt_waits = 0;
}

/* When a deferred call issued at issued_at is due (monotonic seconds). */
static inline double xcoll_prompt_due_at(double issued_at) {
  return issued_at + XCOLL_PROMPT_S;
}

#endif
