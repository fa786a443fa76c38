/* log.h - XCOLL_DEBUG logging (NCCL_DEBUG's model).
 *
 * XCOLL_DEBUG=WARN (default) | INFO | TRACE; XCOLL_DEBUG_FILE=path writes
 * there instead of stderr ("%h" becomes the host name, "%p" the pid).
 * Lines read "host:pid:rank xcoll LEVEL message". Never stdout. */
#ifndef XCOLL_CORE_LOG_H
#define XCOLL_CORE_LOG_H

#include <stddef.h>

typedef enum xcoll_log_level {
  XCOLL_LOG_NONE = 0,
  XCOLL_LOG_WARN = 1,
  XCOLL_LOG_INFO = 2,
  XCOLL_LOG_TRACE = 3
} xcoll_log_level;

/* The level from XCOLL_DEBUG, read once (thread-safe). A malformed value
 * makes xcoll_log_init() return XCOLL_ERR_ENV through comm init. */
xcoll_log_level xcoll_log_level_get(void);

/* Parse XCOLL_DEBUG / XCOLL_DEBUG_FILE. Returns 0 (XCOLL_SUCCESS), or an
 * xcoll_status (XCOLL_ERR_ENV) with the sentence naming the variable written
 * to why (why_bytes long; may be NULL). Logging never records errors itself,
 * so that errors.c can log without a cycle. */
int xcoll_log_init(char *why, size_t why_bytes);

/* Set the rank shown in the line prefix (-1 before it is known). */
void xcoll_log_set_rank(int rank);

void xcoll_log(xcoll_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define XCOLL_WARN(...) xcoll_log(XCOLL_LOG_WARN, __VA_ARGS__)
#define XCOLL_INFO(...)                                                        \
  do {                                                                         \
    if (xcoll_log_level_get() >= XCOLL_LOG_INFO)                               \
      xcoll_log(XCOLL_LOG_INFO, __VA_ARGS__);                                  \
  } while (0)
#define XCOLL_TRACE(...)                                                       \
  do {                                                                         \
    if (xcoll_log_level_get() >= XCOLL_LOG_TRACE)                              \
      xcoll_log(XCOLL_LOG_TRACE, __VA_ARGS__);                                 \
  } while (0)

#endif
