/* spinlock.h - a lock for critical sections of a few dozen instructions
 * that every call takes (the flight recorder's three stamps of a call).
 *
 * Taking it is one atomic exchange and giving it back one release store,
 * where an uncontended pthread mutex costs two atomic read-modify-writes
 * and two calls into libc: on an 8-byte nccl_like allreduce between two
 * host ranks the recorder's three mutex pairs were about a tenth of the
 * call. A waiter polls with plain loads (no cache-line ping-pong), and
 * after XCOLL_SPIN_YIELD_AFTER polls yields the core on every pass:
 * ranks that outnumber the cores may preempt the holder, which
 * pthread_spin_lock would wait out for a whole time slice. Not for long
 * critical sections or ones that block. */
#ifndef XCOLL_SPINLOCK_H
#define XCOLL_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>

#define XCOLL_SPIN_YIELD_AFTER 64

typedef struct xcoll_spinlock {
  _Atomic int held;
} xcoll_spinlock;

#define XCOLL_SPINLOCK_INIT {0}

static inline void xcoll_spin_lock(xcoll_spinlock *lock) {
  for (unsigned polls = 0;; polls++) {
    if (!atomic_load_explicit(&lock->held, memory_order_relaxed) &&
        !atomic_exchange_explicit(&lock->held, 1, memory_order_acquire))
      return;
    if (polls >= XCOLL_SPIN_YIELD_AFTER)
      sched_yield();
  }
}

static inline void xcoll_spin_unlock(xcoll_spinlock *lock) {
  atomic_store_explicit(&lock->held, 0, memory_order_release);
}

#endif
