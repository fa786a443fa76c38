/* request.c - requests, and the per-communicator queue that runs host-driven
 * collectives in issue order on one progress thread (the same ordering
 * contract as a CUDA stream or Gloo's work queue), plus the in-flight list of
 * device-driven requests. xcoll_wait and xcoll_test are in core/dispatch.c.
 *
 * Who runs a queued collective: the progress thread, one at a time, in issue
 * order (busy); a deferred one runs on the thread that needs it done (a
 * wait for it or for one behind it, a blocking call, a drain), or on the
 * progress thread once it is due. The queue defers by core/prompt.h's
 * policy, learnt from its caller's waits: where the caller waits for each
 * non-blocking call at once (a torch Work.wait() after an async_op call),
 * a hand-off to the progress thread and back costs more than a small call
 * (5.5-10 us against 0.7 us blocking for a 64 B alltoall at P=2 over
 * nccl_like's shm on 2 cores). While deferring, the progress thread naps
 * in slices of QUEUE_NAP_S, so it sees new calls without a wake-up and
 * runs one that came due. */
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "staging.h"
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "log.h"
#include "prompt.h"
#include "request.h"
#include "socket.h" /* xcoll_socket_now: CLOCK_MONOTONIC seconds */

/* While deferring, the progress thread naps in slices this long (seconds)
 * rather than sleep until signalled, for at most QUEUE_LINGER_S after the
 * last call it saw: it then finds a deferred call without a wake-up. */
#define QUEUE_NAP_S 1e-3
#define QUEUE_LINGER_S 0.05

struct xcoll_queue {
  pthread_mutex_t lock;
  pthread_cond_t work; /* something was queued, a run ended, or stop
                          (CLOCK_MONOTONIC, for the naps) */
  pthread_cond_t idle; /* a run ended or the queue was emptied */
  struct xcoll_request *head, *tail;
  /* A collective is running (on the progress thread or inline on a caller):
   * the next one must wait for it so that issue order is kept on the wire. */
  int busy;
  /* Whether submits defer (core/prompt.h); a call was queued deferred
   * since deferring last stopped. */
  xcoll_prompt prompt;
  int any_deferred;
  /* The progress thread is in an untimed wait: a deferred call must still
   * wake it once, or nothing would run it if nobody waits. */
  int sleeping;
  double last_call; /* when the last call was submitted (monotonic s) */
  /* 1 while head == NULL && !busy: xcoll_queue_drain's answer without the
   * lock. Written under the lock (set_quiet) after each change of either,
   * in release; a caller that queued work itself reads its own 0. */
  _Atomic int quiet;
  int stop;
  int thread_started;
  pthread_t thread;
  xcoll_queue_run_fn run;
  /* Device-driven requests started and not yet seen complete, oldest first. */
  struct xcoll_request *inflight_head, *inflight_tail;
  /* 1 while inflight_head == NULL: xcoll_inflight_snapshot's answer
   * without the lock (written under it, in release, after each change). The
   * thread that issues on a communicator added its own requests itself, so
   * it never reads a stale 1 for them. */
  _Atomic int inflight_none;
};

/* Wait on cond until the monotonic time `until` (seconds, as
 * xcoll_socket_now gives it). */
static void wait_until(pthread_cond_t *cond, pthread_mutex_t *lock,
                       double until) {
  struct timespec ts;
  ts.tv_sec = (time_t)until;
  ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L)
    ts.tv_nsec = 999999999L;
  (void)pthread_cond_timedwait(cond, lock, &ts);
}

/* Under queue->lock, after head or busy changed. */
static void set_quiet(struct xcoll_queue *queue) {
  atomic_store_explicit(&queue->quiet, queue->head == NULL && !queue->busy,
                        memory_order_release);
}

void xcoll_request_init(xcoll_comm *comm, struct xcoll_request *request) {
  memset(request, 0, sizeof *request);
  pthread_mutex_init(&request->lock, NULL);
  pthread_cond_init(&request->completed, NULL);
  request->status = XCOLL_IN_PROGRESS;
  request->comm = comm;
  request->refs = 1;
}

struct xcoll_request *xcoll_request_new(xcoll_comm *comm) {
  struct xcoll_request *request = malloc(sizeof *request);
  if (request == NULL) {
    xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                "cannot allocate a request (%zu bytes)", sizeof *request);
    return NULL;
  }
  /* The pointer made opaque to the compiler: GCC would fold the malloc and
   * xcoll_request_init's memset into one calloc, which glibc serves from
   * its arena, never from the thread's cache (about 370 instructions a
   * non-blocking call, callgrind, against a few dozen). */
  __asm__ volatile("" : "+r"(request));
  xcoll_request_init(comm, request);
  return request;
}

void xcoll_request_release(struct xcoll_request *request) {
  pthread_mutex_lock(&request->lock);
  int last = --request->refs == 0;
  pthread_mutex_unlock(&request->lock);
  if (!last)
    return;
  xcoll_request_fini(request);
  free(request);
}

void xcoll_request_fini(struct xcoll_request *request) {
  /* Never waited for: drop the result, return the pinned memory. */
  if (request->staging != NULL)
    xcoll_staging_end(request->staging, XCOLL_ERR_ABORTED);
  if (request->scratch_free != NULL)
    request->scratch_free(request->scratch);
  else
    free(request->scratch);
  pthread_cond_destroy(&request->completed);
  pthread_mutex_destroy(&request->lock);
}

void xcoll_request_adopt(struct xcoll_request *request, void *scratch) {
  xcoll_request_adopt_with(request, scratch, NULL);
}

void xcoll_request_adopt_with(struct xcoll_request *request, void *scratch,
                              void (*scratch_free)(void *)) {
  pthread_mutex_lock(&request->lock);
  request->scratch = scratch;
  request->scratch_free = scratch_free;
  pthread_mutex_unlock(&request->lock);
}

void xcoll_request_complete(struct xcoll_request *request,
                            xcoll_status status) {
  pthread_mutex_lock(&request->lock);
  request->status = status;
  request->done = 1;
  pthread_cond_broadcast(&request->completed);
  pthread_mutex_unlock(&request->lock);
}

xcoll_status xcoll_request_wait_done(struct xcoll_request *request) {
  pthread_mutex_lock(&request->lock);
  while (!request->done)
    pthread_cond_wait(&request->completed, &request->lock);
  xcoll_status status = request->status;
  pthread_mutex_unlock(&request->lock);
  return status;
}

xcoll_request_t xcoll_request_completed(xcoll_comm *comm, xcoll_status status) {
  struct xcoll_request *request = xcoll_request_new(comm);
  if (request != NULL) {
    request->status = status;
    request->done = 1;
  }
  return request;
}

xcoll_status xcoll_queue_create(xcoll_comm *comm, xcoll_queue_run_fn run) {
  struct xcoll_queue *queue = calloc(1, sizeof *queue);
  if (queue == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "cannot allocate the request queue (%zu bytes)",
                       sizeof *queue);
  pthread_mutex_init(&queue->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&queue->work, &attr);
  pthread_condattr_destroy(&attr);
  pthread_cond_init(&queue->idle, NULL);
  atomic_init(&queue->quiet, 1);
  atomic_init(&queue->inflight_none, 1);
  queue->run = run;
  comm->queue = queue;
  return XCOLL_SUCCESS;
}

/* Under queue->lock, once a run ended: wake the progress thread for the
 * head, unless the head is deferred and the thread naps (it finds it). */
static void poke_locked(struct xcoll_queue *queue) {
  if (queue->head != NULL && !queue->busy &&
      (!queue->head->deferred || queue->sleeping))
    pthread_cond_signal(&queue->work);
}

/* Under queue->lock, with the queue not busy and a head: take the head,
 * run it with the lock released, complete it, and wake whoever waits for
 * the queue to be idle (and the progress thread for what is queued). */
static void run_head_locked(xcoll_comm *comm, struct xcoll_queue *queue) {
  struct xcoll_request *request = queue->head;
  queue->head = request->next;
  if (queue->head == NULL)
    queue->tail = NULL;
  queue->busy = 1;
  pthread_mutex_unlock(&queue->lock);

  xcoll_status status = queue->run(comm, &request->args);
  xcoll_request_complete(request, status);

  pthread_mutex_lock(&queue->lock);
  queue->busy = 0;
  set_quiet(queue);
  pthread_cond_broadcast(&queue->idle);
  poke_locked(queue);
}

/* Under queue->lock: 1 when a thread other than the progress thread may
 * run the head now: nothing runs, and the head is deferred (a call the
 * progress thread was not woken for is the waiter's; one it was woken for
 * is its own, or the two would take turns, a wake-up each, through a
 * backlog such as xcoll-perf -z 0 issues). */
static int caller_takes_head(const struct xcoll_queue *queue) {
  return !queue->busy && queue->head != NULL && queue->head->deferred;
}

/* Under queue->lock: the caller overlaps work with its calls (a late wait,
 * a test, a deferred call that came due): stop deferring, and let the
 * progress thread run what is queued now. */
static void stop_deferring_locked(struct xcoll_queue *queue) {
  xcoll_prompt_stop(&queue->prompt);
  if (!queue->any_deferred) /* a backlog is not walked on every wait */
    return;
  queue->any_deferred = 0;
  for (struct xcoll_request *r = queue->head; r != NULL; r = r->next)
    r->deferred = 0;
  pthread_cond_signal(&queue->work);
}

static void *progress_main(void *arg) {
  xcoll_comm *comm = arg;
  struct xcoll_queue *queue = comm->queue;
  pthread_mutex_lock(&queue->lock);
  for (;;) {
    double now = xcoll_socket_now();
    if (queue->head != NULL && !queue->busy) {
      /* A deferred call is the waiter's until it is due. */
      double due = queue->head->deferred
                       ? xcoll_prompt_due_at(queue->head->issued_at)
                       : 0.0;
      if (due <= now || queue->stop) {
        if (due > 0.0)
          stop_deferring_locked(queue);
        run_head_locked(comm, queue);
      } else {
        wait_until(&queue->work, &queue->lock, due);
      }
      continue;
    }
    /* Destroy sets stop only once the queue is empty and idle. */
    if (queue->stop && queue->head == NULL && !queue->busy)
      break;
    if (xcoll_prompt_deferring(&queue->prompt) &&
        now - queue->last_call < QUEUE_LINGER_S) {
      wait_until(&queue->work, &queue->lock, now + QUEUE_NAP_S);
    } else {
      queue->sleeping = 1;
      pthread_cond_wait(&queue->work, &queue->lock);
      queue->sleeping = 0;
    }
  }
  pthread_mutex_unlock(&queue->lock);
  return NULL;
}

/* Append request and make sure the progress thread exists. Called with
 * queue->lock held. */
static xcoll_status enqueue_locked(xcoll_comm *comm,
                                   struct xcoll_request *request) {
  struct xcoll_queue *queue = comm->queue;
  if (!queue->thread_started) {
    int rc = pthread_create(&queue->thread, NULL, progress_main, comm);
    if (rc != 0)
      return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                         "cannot start the progress thread of communicator "
                         "%llu: pthread_create: %s",
                         (unsigned long long)comm->comm_id, strerror(rc));
    queue->thread_started = 1;
  }
  request->next = NULL;
  request->issued_at = queue->last_call = xcoll_socket_now();
  request->deferred = xcoll_prompt_deferring(&queue->prompt);
  queue->any_deferred |= request->deferred;
  if (queue->tail != NULL)
    queue->tail->next = request;
  else
    queue->head = request;
  queue->tail = request;
  set_quiet(queue);
  /* A deferred call wakes the thread only out of an untimed wait: napping,
   * it finds the call itself. */
  if (!request->deferred || queue->sleeping)
    pthread_cond_signal(&queue->work);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_queue_submit(xcoll_comm *comm, const xcoll_coll_args *args,
                                xcoll_request_t *out) {
  *out = NULL;
  struct xcoll_request *request = xcoll_request_new(comm);
  if (request == NULL)
    return XCOLL_ERR_NO_MEMORY;
  request->args = *args;
  pthread_mutex_lock(&comm->queue->lock);
  xcoll_status status = enqueue_locked(comm, request);
  pthread_mutex_unlock(&comm->queue->lock);
  if (status != XCOLL_SUCCESS) {
    xcoll_request_release(request);
    return status;
  }
  *out = request;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_queue_run(xcoll_comm *comm, const xcoll_coll_args *args) {
  struct xcoll_queue *queue = comm->queue;
  pthread_mutex_lock(&queue->lock);
  /* The calls queued before this one run first, in issue order (the
   * deferred ones here); then this one runs here, with no hand-off to the
   * progress thread and back (two wake-ups, which dominate the latency of
   * small collectives). */
  while (queue->busy || queue->head != NULL) {
    if (caller_takes_head(queue))
      run_head_locked(comm, queue);
    else
      pthread_cond_wait(&queue->idle, &queue->lock);
  }
  queue->busy = 1;
  set_quiet(queue);
  pthread_mutex_unlock(&queue->lock);
  xcoll_status status = queue->run(comm, args);
  pthread_mutex_lock(&queue->lock);
  queue->busy = 0;
  set_quiet(queue);
  pthread_cond_broadcast(&queue->idle);
  poke_locked(queue);
  pthread_mutex_unlock(&queue->lock);
  return status;
}

void xcoll_queue_wait(xcoll_comm *comm, struct xcoll_request *request) {
  struct xcoll_queue *queue = comm->queue;
  pthread_mutex_lock(&queue->lock);
  if (!xcoll_prompt_note_wait(&queue->prompt, request->issued_at,
                              xcoll_socket_now()))
    stop_deferring_locked(queue);
  /* Not deferred: the progress thread runs it, and every call ahead of it
   * (those are not deferred either: a queue defers from some call on, and
   * stops deferring all at once). */
  while (request->deferred) {
    pthread_mutex_lock(&request->lock);
    int done = request->done;
    pthread_mutex_unlock(&request->lock);
    if (done)
      break;
    /* The head is this request or one issued before it. */
    if (caller_takes_head(queue))
      run_head_locked(comm, queue);
    else if (queue->busy || queue->head != NULL)
      pthread_cond_wait(&queue->idle, &queue->lock);
    else
      break; /* completed meanwhile (abort): its waiters are woken */
  }
  pthread_mutex_unlock(&queue->lock);
}

void xcoll_queue_test(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  /* A poll loop takes no lock while nothing defers (core/prompt.h). */
  if (!xcoll_prompt_deferring(&queue->prompt))
    return;
  pthread_mutex_lock(&queue->lock);
  stop_deferring_locked(queue);
  pthread_mutex_unlock(&queue->lock);
}

void xcoll_queue_drain(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  /* The common case, a device-driven call with no host collective before
   * it, takes no lock. */
  if (atomic_load_explicit(&queue->quiet, memory_order_acquire))
    return;
  pthread_mutex_lock(&queue->lock);
  while (queue->head != NULL || queue->busy) {
    if (caller_takes_head(queue))
      run_head_locked(comm, queue);
    else
      pthread_cond_wait(&queue->idle, &queue->lock);
  }
  pthread_mutex_unlock(&queue->lock);
}

int xcoll_queue_busy(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  if (queue == NULL)
    return 0;
  pthread_mutex_lock(&queue->lock);
  int busy = queue->head != NULL || queue->busy || queue->inflight_head != NULL;
  pthread_mutex_unlock(&queue->lock);
  return busy;
}

void xcoll_inflight_add(xcoll_comm *comm, struct xcoll_request *request) {
  struct xcoll_queue *queue = comm->queue;
  pthread_mutex_lock(&request->lock);
  request->refs++;
  request->inflight = 1;
  pthread_mutex_unlock(&request->lock);
  pthread_mutex_lock(&queue->lock);
  request->inflight_next = NULL;
  if (queue->inflight_tail != NULL)
    queue->inflight_tail->inflight_next = request;
  else
    queue->inflight_head = request;
  queue->inflight_tail = request;
  atomic_store_explicit(&queue->inflight_none, 0, memory_order_release);
  pthread_mutex_unlock(&queue->lock);
}

void xcoll_inflight_remove(xcoll_comm *comm, struct xcoll_request *request) {
  struct xcoll_queue *queue = comm->queue;
  int removed = 0;
  pthread_mutex_lock(&queue->lock);
  struct xcoll_request **link = &queue->inflight_head, *prev = NULL;
  while (*link != NULL && *link != request) {
    prev = *link;
    link = &(*link)->inflight_next;
  }
  if (*link == request) {
    *link = request->inflight_next;
    if (queue->inflight_tail == request)
      queue->inflight_tail = prev;
    request->inflight = 0;
    removed = 1;
    atomic_store_explicit(&queue->inflight_none, queue->inflight_head == NULL,
                          memory_order_release);
  }
  pthread_mutex_unlock(&queue->lock);
  if (removed)
    xcoll_request_release(request);
}

int xcoll_inflight_snapshot(xcoll_comm *comm, struct xcoll_request **out,
                            int max) {
  struct xcoll_queue *queue = comm->queue;
  int n = 0;
  if (atomic_load_explicit(&queue->inflight_none, memory_order_acquire))
    return 0; /* the common case of every host-algorithm call: no lock */
  pthread_mutex_lock(&queue->lock);
  for (struct xcoll_request *r = queue->inflight_head; r != NULL && n < max;
       r = r->inflight_next) {
    pthread_mutex_lock(&r->lock);
    r->refs++;
    pthread_mutex_unlock(&r->lock);
    out[n++] = r;
  }
  pthread_mutex_unlock(&queue->lock);
  return n;
}

void xcoll_queue_abort(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  if (queue == NULL)
    return;
  pthread_mutex_lock(&queue->lock);
  struct xcoll_request *request = queue->head;
  queue->head = queue->tail = NULL;
  set_quiet(queue);
  while (request != NULL) {
    struct xcoll_request *next = request->next;
    xcoll_request_complete(request, XCOLL_ERR_ABORTED);
    request = next;
  }
  pthread_cond_broadcast(&queue->idle);
  pthread_mutex_unlock(&queue->lock);
}

void xcoll_queue_destroy(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  if (queue == NULL)
    return;
  pthread_mutex_lock(&queue->lock);
  stop_deferring_locked(queue);
  while (queue->head != NULL || queue->busy)
    pthread_cond_wait(&queue->idle, &queue->lock);
  queue->stop = 1;
  pthread_cond_broadcast(&queue->work);
  pthread_mutex_unlock(&queue->lock);
  if (queue->thread_started)
    pthread_join(queue->thread, NULL);
  pthread_cond_destroy(&queue->idle);
  pthread_cond_destroy(&queue->work);
  pthread_mutex_destroy(&queue->lock);
  free(queue);
  comm->queue = NULL;
}
