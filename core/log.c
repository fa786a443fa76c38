/* log.c - XCOLL_DEBUG logging, modelled on NCCL_DEBUG: a level read once from
 * the environment, lines prefixed "host:pid:rank xcoll LEVEL", written to
 * stderr or to XCOLL_DEBUG_FILE, never to stdout. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "xcoll.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static xcoll_log_level log_level = XCOLL_LOG_WARN;
static FILE *log_file; /* NULL: stderr */
static char log_host[64] = "?";
static _Atomic int log_rank = -1;
static int log_print_version;

/* A failure found while parsing, reported by xcoll_log_init(): the once
 * routine itself must not call xcoll_error(), which logs and would re-enter
 * pthread_once. */
static xcoll_status parse_status = XCOLL_SUCCESS;
static char parse_message[512];

/* Expand %h (host name) and %p (pid) in XCOLL_DEBUG_FILE's value; "%%" is a
 * literal percent sign. Returns 0, or -1 if the result does not fit. */
static int expand_path(const char *pattern, char *out, size_t out_bytes) {
  size_t used = 0;
  for (const char *c = pattern; *c != '\0'; c++) {
    char piece[64];
    const char *text = piece;
    if (c[0] == '%' && c[1] == 'h') {
      text = log_host;
      c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      snprintf(piece, sizeof piece, "%ld", (long)getpid());
      c++;
    } else if (c[0] == '%' && c[1] == '%') {
      snprintf(piece, sizeof piece, "%%");
      c++;
    } else {
      piece[0] = *c;
      piece[1] = '\0';
    }
    size_t len = strlen(text);
    if (used + len + 1 > out_bytes)
      return -1;
    memcpy(out + used, text, len);
    used += len;
  }
  out[used] = '\0';
  return 0;
}

static void log_setup(void) {
  if (gethostname(log_host, sizeof log_host) != 0)
    snprintf(log_host, sizeof log_host, "?");
  log_host[sizeof log_host - 1] = '\0';
  /* Keep lines short: the first label of a fully qualified name is enough. */
  char *dot = strchr(log_host, '.');
  if (dot != NULL)
    *dot = '\0';

  const char *level = getenv("XCOLL_DEBUG");
  if (level != NULL && level[0] != '\0') {
    if (strcasecmp(level, "NONE") == 0)
      log_level = XCOLL_LOG_NONE;
    else if (strcasecmp(level, "VERSION") == 0) {
      log_level = XCOLL_LOG_WARN;
      log_print_version = 1;
    } else if (strcasecmp(level, "WARN") == 0)
      log_level = XCOLL_LOG_WARN;
    else if (strcasecmp(level, "INFO") == 0)
      log_level = XCOLL_LOG_INFO;
    else if (strcasecmp(level, "TRACE") == 0)
      log_level = XCOLL_LOG_TRACE;
    else {
      parse_status = XCOLL_ERR_ENV;
      snprintf(parse_message, sizeof parse_message,
               "XCOLL_DEBUG='%.200s' is not a log level: use NONE, VERSION, "
               "WARN (the default), INFO or TRACE",
               level);
    }
  }

  const char *pattern = getenv("XCOLL_DEBUG_FILE");
  if (pattern != NULL && pattern[0] != '\0') {
    char path[4096];
    if (expand_path(pattern, path, sizeof path) != 0) {
      parse_status = XCOLL_ERR_ENV;
      snprintf(parse_message, sizeof parse_message,
               "XCOLL_DEBUG_FILE='%.200s' is too long once %%h and %%p are "
               "expanded (limit %zu bytes)",
               pattern, sizeof path - 1);
    } else {
      log_file = fopen(path, "w");
      if (log_file == NULL) {
        parse_status = XCOLL_ERR_ENV;
        snprintf(parse_message, sizeof parse_message,
                 "XCOLL_DEBUG_FILE='%.200s': cannot open '%.200s' for "
                 "writing (%s); logging to stderr instead",
                 pattern, path, strerror(errno));
      } else {
        setvbuf(log_file, NULL, _IOLBF, 0);
      }
    }
  }
}

xcoll_log_level xcoll_log_level_get(void) {
  pthread_once(&log_once, log_setup);
  return log_level;
}

int xcoll_log_init(char *why, size_t why_bytes) {
  pthread_once(&log_once, log_setup);
  static atomic_flag version_printed = ATOMIC_FLAG_INIT;
  if (log_print_version && !atomic_flag_test_and_set(&version_printed))
    xcoll_log(XCOLL_LOG_WARN, "xcoll version %d.%d.%d", XCOLL_VERSION_MAJOR,
              XCOLL_VERSION_MINOR, XCOLL_VERSION_PATCH);
  if (parse_status != XCOLL_SUCCESS && why != NULL && why_bytes > 0)
    snprintf(why, why_bytes, "%s", parse_message);
  return parse_status;
}

void xcoll_log_set_rank(int rank) {
  atomic_store(&log_rank, rank);
}

void xcoll_log(xcoll_log_level level, const char *fmt, ...) {
  if (level == XCOLL_LOG_NONE || xcoll_log_level_get() < level)
    return;
  static const char *const names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char rank[16];
  int r = atomic_load(&log_rank);
  if (r >= 0)
    snprintf(rank, sizeof rank, "%d", r);
  else
    snprintf(rank, sizeof rank, "-");

  /* Build the whole line first so that one write carries it: lines of
   * different threads and processes sharing a file then do not interleave. */
  char line[2048];
  int prefix = snprintf(line, sizeof line, "%s:%ld:%s xcoll %s ", log_host,
                        (long)getpid(), rank, names[level]);
  if (prefix < 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + prefix, sizeof line - (size_t)prefix - 1, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  line[len] = '\n';
  line[len + 1] = '\0';

  pthread_mutex_lock(&log_lock);
  FILE *out = log_file != NULL ? log_file : stderr;
  fputs(line, out);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}
