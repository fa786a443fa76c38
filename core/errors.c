/* errors.c - status strings and error messages: one buffer per thread (for
 * calls that have no communicator yet) and one per communicator, plus the
 * library version. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "log.h"

/* The last message raised on this thread, and whether its WARN line went to
 * stderr (xcoll_comm_last_error_logged). */
static _Thread_local char thread_error[XCOLL_ERROR_BYTES];
static _Thread_local int thread_error_logged;
/* xcoll_error_hush: this thread's errors are its caller's to report. */
static _Thread_local int thread_hushed;
/* A stable copy of a communicator's message handed to the caller, so that a
 * progress thread writing comm->last_error cannot tear the string being read.
 */
static _Thread_local char thread_comm_error[XCOLL_ERROR_BYTES];

const char *xcoll_strerror(xcoll_status status) {
  switch (status) {
  case XCOLL_SUCCESS:
    return "success";
  case XCOLL_ERR_INVALID_ARGUMENT:
    return "invalid argument";
  case XCOLL_ERR_INVALID_USAGE:
    return "invalid usage";
  case XCOLL_ERR_SYSTEM:
    return "system call failed";
  case XCOLL_ERR_NO_MEMORY:
    return "out of memory";
  case XCOLL_ERR_TIMEOUT:
    return "timed out";
  case XCOLL_ERR_REMOTE:
    return "remote peer failed";
  case XCOLL_ERR_PROTOCOL:
    return "protocol error";
  case XCOLL_ERR_NOT_SUPPORTED:
    return "not supported";
  case XCOLL_ERR_ABORTED:
    return "communicator aborted";
  case XCOLL_ERR_ENV:
    return "invalid environment variable";
  case XCOLL_ERR_INTERNAL:
    return "internal error";
  case XCOLL_IN_PROGRESS:
    return "in progress";
  }
  return "unknown status";
}

static int comm_is_live(const xcoll_comm *comm) {
  return comm != NULL && comm->magic == XCOLL_COMM_MAGIC;
}

static void comm_store_message(xcoll_comm *comm, const char *message,
                               int logged) {
  if (!comm_is_live(comm))
    return;
  pthread_mutex_lock(&comm->error_lock);
  snprintf(comm->last_error, sizeof comm->last_error, "%s", message);
  comm->last_error_logged = logged;
  pthread_mutex_unlock(&comm->error_lock);
}

/* The message becomes the thread's last and comm's. */
static void keep_message(struct xcoll_comm *comm, const char *message,
                         int logged) {
  memcpy(thread_error, message, sizeof thread_error);
  thread_error_logged = logged;
  comm_store_message(comm, message, logged);
}

xcoll_status xcoll_error(struct xcoll_comm *comm, xcoll_status status,
                         const char *fmt, ...) {
  /* Format into a local buffer first: an argument may point into
   * thread_error itself (re-raising the last message with more context). */
  char message[XCOLL_ERROR_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  /* A message that ends with the thread's last one re-raises it with more
   * context (the callers pass xcoll_last_error() as the last argument): that
   * one was logged already, so the log says each failure once. */
  size_t len = strlen(message), last = strlen(thread_error);
  int rewrap = last > 0 && len > last &&
               memcmp(message + len - last, thread_error, last) == 0;
  /* A re-raised message was shown when the one it wraps was. */
  int logged = rewrap ? thread_error_logged
                      : !thread_hushed &&
                            xcoll_log_shows_on_stderr(XCOLL_LOG_WARN);
  keep_message(comm, message, logged);
  if (!rewrap && !thread_hushed)
    XCOLL_WARN("%s: %s", xcoll_strerror(status), message);
  return status;
}

int xcoll_error_hush(int hushed) {
  int was = thread_hushed;
  thread_hushed = hushed;
  return was;
}

xcoll_status xcoll_error_quiet(struct xcoll_comm *comm, xcoll_status status,
                               const char *fmt, ...) {
  char message[XCOLL_ERROR_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  keep_message(comm, message, 0);
  return status;
}

xcoll_status xcoll_error_adopt(struct xcoll_comm *comm, xcoll_status status) {
  comm_store_message(comm, thread_error, thread_error_logged);
  return status;
}

const char *xcoll_last_error(void) {
  return thread_error;
}

const char *xcoll_comm_last_error(xcoll_comm_t comm) {
  if (!comm_is_live(comm))
    return thread_error;
  pthread_mutex_lock(&comm->error_lock);
  memcpy(thread_comm_error, comm->last_error, sizeof thread_comm_error);
  pthread_mutex_unlock(&comm->error_lock);
  return thread_comm_error;
}

int xcoll_comm_last_error_logged(xcoll_comm_t comm) {
  if (!comm_is_live(comm))
    return thread_error_logged;
  pthread_mutex_lock(&comm->error_lock);
  int logged = comm->last_error_logged;
  pthread_mutex_unlock(&comm->error_lock);
  return logged;
}

int xcoll_version(void) {
  return XCOLL_VERSION;
}
