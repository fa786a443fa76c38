/* request.c - requests, and the per-communicator queue that runs host-driven
 * collectives in issue order on one progress thread (the same ordering
 * contract as a CUDA stream or Gloo's work queue), plus the in-flight list of
 * device-driven requests. xcoll_wait and xcoll_test are in core/dispatch.c. */
#include <errno.h>
#include <stdatomic.h>

#include "staging.h"
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "log.h"
#include "request.h"

struct xcoll_queue {
  pthread_mutex_t lock;
  pthread_cond_t work; /* something was queued, a run ended, or stop */
  pthread_cond_t idle; /* a run ended or the queue was emptied */
  struct xcoll_request *head, *tail;
  /* A collective is running (on the progress thread or inline on a caller):
   * the next one must wait for it so that issue order is kept on the wire. */
  int busy;
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
  pthread_cond_init(&queue->work, NULL);
  pthread_cond_init(&queue->idle, NULL);
  atomic_init(&queue->quiet, 1);
  atomic_init(&queue->inflight_none, 1);
  queue->run = run;
  comm->queue = queue;
  return XCOLL_SUCCESS;
}

static void *progress_main(void *arg) {
  xcoll_comm *comm = arg;
  struct xcoll_queue *queue = comm->queue;
  pthread_mutex_lock(&queue->lock);
  for (;;) {
    while (!queue->stop && (queue->head == NULL || queue->busy))
      pthread_cond_wait(&queue->work, &queue->lock);
    /* Destroy sets stop only once the queue is empty and idle. */
    if (queue->head == NULL)
      break;
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
  if (queue->tail != NULL)
    queue->tail->next = request;
  else
    queue->head = request;
  queue->tail = request;
  set_quiet(queue);
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
  if (queue->head == NULL && !queue->busy) {
    /* Nothing ahead of us: run on this thread and skip two thread
     * hand-offs, which dominate the latency of small collectives. */
    queue->busy = 1;
    set_quiet(queue);
    pthread_mutex_unlock(&queue->lock);
    xcoll_status status = queue->run(comm, args);
    pthread_mutex_lock(&queue->lock);
    queue->busy = 0;
    set_quiet(queue);
    pthread_cond_broadcast(&queue->idle);
    pthread_cond_broadcast(&queue->work);
    pthread_mutex_unlock(&queue->lock);
    return status;
  }
  pthread_mutex_unlock(&queue->lock);

  xcoll_request_t request = NULL;
  xcoll_status status = xcoll_queue_submit(comm, args, &request);
  if (status != XCOLL_SUCCESS)
    return status;
  status = xcoll_request_wait_done(request);
  xcoll_request_release(request);
  return status;
}

void xcoll_queue_drain(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  /* The common case, a device-driven call with no host collective before
   * it, takes no lock. */
  if (atomic_load_explicit(&queue->quiet, memory_order_acquire))
    return;
  pthread_mutex_lock(&queue->lock);
  while (queue->head != NULL || queue->busy)
    pthread_cond_wait(&queue->idle, &queue->lock);
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
