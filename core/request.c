/* request.c - requests of non-blocking collectives and the per-communicator
 * queue that runs all collectives in issue order on one progress thread
 * (the same ordering contract as a CUDA stream or Gloo's work queue). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "log.h"
#include "request.h"

struct xcoll_request {
  pthread_mutex_t lock;
  pthread_cond_t completed;
  int done;
  xcoll_status status;
  xcoll_coll_args args;
  struct xcoll_request *next; /* in the queue, while queued */
};

struct xcoll_queue {
  pthread_mutex_t lock;
  pthread_cond_t work; /* something was queued, a run ended, or stop */
  pthread_cond_t idle; /* a run ended or the queue was emptied */
  struct xcoll_request *head, *tail;
  /* A collective is running (on the progress thread or inline on a caller):
   * the next one must wait for it so that issue order is kept on the wire. */
  int busy;
  int stop;
  int thread_started;
  pthread_t thread;
};

static struct xcoll_request *request_new(xcoll_comm *comm) {
  struct xcoll_request *request = calloc(1, sizeof *request);
  if (request == NULL) {
    xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                "cannot allocate a request (%zu bytes)", sizeof *request);
    return NULL;
  }
  pthread_mutex_init(&request->lock, NULL);
  pthread_cond_init(&request->completed, NULL);
  request->status = XCOLL_IN_PROGRESS;
  return request;
}

static void request_free(struct xcoll_request *request) {
  pthread_cond_destroy(&request->completed);
  pthread_mutex_destroy(&request->lock);
  free(request);
}

/* After this, the waiter may free request at any moment: touch nothing. */
static void request_complete(struct xcoll_request *request,
                             xcoll_status status) {
  pthread_mutex_lock(&request->lock);
  request->status = status;
  request->done = 1;
  pthread_cond_broadcast(&request->completed);
  pthread_mutex_unlock(&request->lock);
}

xcoll_request_t xcoll_request_completed(xcoll_comm *comm, xcoll_status status) {
  struct xcoll_request *request = request_new(comm);
  if (request != NULL) {
    request->status = status;
    request->done = 1;
  }
  return request;
}

xcoll_status xcoll_queue_create(xcoll_comm *comm) {
  struct xcoll_queue *queue = calloc(1, sizeof *queue);
  if (queue == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "cannot allocate the request queue (%zu bytes)",
                       sizeof *queue);
  pthread_mutex_init(&queue->lock, NULL);
  pthread_cond_init(&queue->work, NULL);
  pthread_cond_init(&queue->idle, NULL);
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

    xcoll_status status = xcoll_coll_run(comm, &request->args);
    request_complete(request, status);

    pthread_mutex_lock(&queue->lock);
    queue->busy = 0;
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
  pthread_cond_signal(&queue->work);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_queue_submit(xcoll_comm *comm, const xcoll_coll_args *args,
                                xcoll_request_t *out) {
  *out = NULL;
  struct xcoll_request *request = request_new(comm);
  if (request == NULL)
    return XCOLL_ERR_NO_MEMORY;
  request->args = *args;
  pthread_mutex_lock(&comm->queue->lock);
  xcoll_status status = enqueue_locked(comm, request);
  pthread_mutex_unlock(&comm->queue->lock);
  if (status != XCOLL_SUCCESS) {
    request_free(request);
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
    pthread_mutex_unlock(&queue->lock);
    xcoll_status status = xcoll_coll_run(comm, args);
    pthread_mutex_lock(&queue->lock);
    queue->busy = 0;
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
  return xcoll_wait(request);
}

void xcoll_queue_abort(xcoll_comm *comm) {
  struct xcoll_queue *queue = comm->queue;
  if (queue == NULL)
    return;
  pthread_mutex_lock(&queue->lock);
  struct xcoll_request *request = queue->head;
  queue->head = queue->tail = NULL;
  while (request != NULL) {
    struct xcoll_request *next = request->next;
    request_complete(request, XCOLL_ERR_ABORTED);
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

xcoll_status xcoll_wait(xcoll_request_t request) {
  if (request == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_wait: request is NULL (a failed non-blocking "
                       "call sets *request to NULL; check its status)");
  pthread_mutex_lock(&request->lock);
  while (!request->done)
    pthread_cond_wait(&request->completed, &request->lock);
  xcoll_status status = request->status;
  pthread_mutex_unlock(&request->lock);
  request_free(request);
  return status;
}

xcoll_status xcoll_test(xcoll_request_t request, int *done) {
  if (request == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_test: request is NULL");
  if (done == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_test: done is NULL");
  pthread_mutex_lock(&request->lock);
  *done = request->done;
  xcoll_status status = request->done ? request->status : XCOLL_SUCCESS;
  pthread_mutex_unlock(&request->lock);
  return status;
}
