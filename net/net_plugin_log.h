/* net_plugin_log.h - the log helpers every net plugin needs, header-only so
 * that a plugin built as its own shared object (libxcoll-net-NAME.so, see
 * net/example) can use them with net.h alone.
 *
 * A plugin includes this once, stores the function its init was given with
 * net_plugin_log_set, and reports with net_fail (error: returns the status,
 * so that `return net_fail(XCOLL_ERR_REMOTE, "...")` reads as one step),
 * net_warn and net_info. Messages are one sentence, cut at
 * NET_PLUGIN_MESSAGE_BYTES; nothing is printed while no log function is set.
 * Thread-safe: the function pointer is atomic, the text is formatted on the
 * caller's stack. */
#ifndef XCOLL_NET_PLUGIN_LOG_H
#define XCOLL_NET_PLUGIN_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "net.h"

#define NET_PLUGIN_MESSAGE_BYTES 512

static _Atomic(xcoll_net_log_fn) net_plugin_log_fn;

/* Keep log (init's argument) for later messages; NULL keeps the old one. */
static inline void net_plugin_log_set(xcoll_net_log_fn log) {
  if (log != NULL) atomic_store(&net_plugin_log_fn, log);
}

static inline void net_say(xcoll_net_log_level level, const char *fmt,
                           va_list ap) {
  xcoll_net_log_fn fn = atomic_load(&net_plugin_log_fn);
  if (fn == NULL) return;
  char message[NET_PLUGIN_MESSAGE_BYTES];
  vsnprintf(message, sizeof message, fmt, ap);
  fn(level, message);
}

static inline xcoll_status net_fail(xcoll_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline xcoll_status net_fail(xcoll_status status, const char *fmt,
                                    ...) {
  va_list ap;
  va_start(ap, fmt);
  net_say(XCOLL_NET_LOG_ERROR, fmt, ap);
  va_end(ap);
  return status;
}

/* As net_fail, for a failure a normal end may cause (net.h's
 * XCOLL_NET_LOG_ERROR_EXPECTED): the same record, logged at INFO. */
static inline xcoll_status net_fail_expected(xcoll_status status,
                                             const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline xcoll_status net_fail_expected(xcoll_status status,
                                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  net_say(XCOLL_NET_LOG_ERROR_EXPECTED, fmt, ap);
  va_end(ap);
  return status;
}

static inline void net_warn(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static inline void net_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  net_say(XCOLL_NET_LOG_WARN, fmt, ap);
  va_end(ap);
}

static inline void net_info(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static inline void net_info(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  net_say(XCOLL_NET_LOG_INFO, fmt, ap);
  va_end(ap);
}

#endif
