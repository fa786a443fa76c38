/* trace.c - XCOLL_TRACE (trace.h): spans written as Chrome Trace Event
 * Format JSON, one file per process, for Perfetto or chrome://tracing.
 *
 * The file is a JSON array of events rather than {"traceEvents": [...]}:
 * viewers accept an array whose closing bracket is missing, so the trace of
 * a rank that crashed still opens. Writes go through a stdio buffer under a
 * mutex; the buffer is flushed when full and at the last close. */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "log.h"

#define TRACE_BUFFER_BYTES (256 * 1024)
/* Flush at least this often, so that a rank that dies loses only the last
 * moments of its trace, while a span costs no system call. */
#define TRACE_FLUSH_INTERVAL_US 100000.0

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int trace_on;
static FILE *trace_file;
static char *trace_buffer;
static int trace_refs;
static int trace_rank;
static long trace_events; /* events written so far: decides the comma */
static double trace_flushed_us;
/* After the last close: where the closing bracket starts, so that a later
 * open (a new communicator in the same process) continues the same array. */
static char trace_path[4096];
static long trace_end_offset = -1;

double xcoll_time_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

int xcoll_trace_enabled(void) {
  return atomic_load_explicit(&trace_on, memory_order_relaxed);
}

/* Expands %r (rank) and %p (pid); without either, inserts ".rank<N>" before
 * the extension of the file name. Returns 0, or -1 if out is too small. */
static int trace_expand_path(const char *pattern, int rank, char *out,
                             size_t out_bytes) {
  size_t used = 0;
  int expanded = 0;
  for (const char *p = pattern; *p; p++) {
    char piece[32];
    const char *text = piece;
    if (p[0] == '%' && p[1] == 'r') {
      snprintf(piece, sizeof piece, "%d", rank);
      p++;
      expanded = 1;
    } else if (p[0] == '%' && p[1] == 'p') {
      snprintf(piece, sizeof piece, "%ld", (long)getpid());
      p++;
      expanded = 1;
    } else {
      piece[0] = *p;
      piece[1] = '\0';
    }
    size_t len = strlen(text);
    if (used + len >= out_bytes)
      return -1;
    memcpy(out + used, text, len);
    used += len;
  }
  out[used] = '\0';
  if (expanded)
    return 0;
  const char *slash = strrchr(out, '/');
  char *dot = strrchr(out, '.');
  if (dot && (!slash || dot > slash + 1)) {
    char extension[256];
    if (strlen(dot) >= sizeof extension)
      return -1;
    strcpy(extension, dot);
    int n = snprintf(dot, out_bytes - (size_t)(dot - out), ".rank%d%s", rank,
                     extension);
    return (n < 0 || (size_t)n >= out_bytes - (size_t)(dot - out)) ? -1 : 0;
  }
  int n = snprintf(out + used, out_bytes - used, ".rank%d", rank);
  return (n < 0 || (size_t)n >= out_bytes - used) ? -1 : 0;
}

/* Writes s as the inside of a JSON string. */
static void put_json_string(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
}

static void put_separator(void) {
  fputs(trace_events++ ? ",\n" : "\n", trace_file);
}

xcoll_status xcoll_trace_open(int rank) {
  const char *pattern = getenv("XCOLL_TRACE");
  if (!pattern || !*pattern)
    return XCOLL_SUCCESS;
  pthread_mutex_lock(&trace_lock);
  if (trace_refs > 0) {
    trace_refs++;
    pthread_mutex_unlock(&trace_lock);
    return XCOLL_SUCCESS;
  }
  int reopen = trace_end_offset >= 0;
  if (!reopen &&
      trace_expand_path(pattern, rank, trace_path, sizeof trace_path) != 0) {
    pthread_mutex_unlock(&trace_lock);
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_TRACE='%s' expands to a path longer than %zu "
                       "bytes: use a shorter one",
                       pattern, sizeof trace_path);
  }
  FILE *f = fopen(trace_path, reopen ? "r+" : "w");
  if (f && reopen && fseek(f, trace_end_offset, SEEK_SET) != 0) {
    fclose(f);
    f = NULL;
  }
  if (!f) {
    int saved = errno;
    pthread_mutex_unlock(&trace_lock);
    return xcoll_error(NULL, XCOLL_ERR_SYSTEM,
                       "could not open the trace file '%s' (from "
                       "XCOLL_TRACE='%s'): %s",
                       trace_path, pattern, strerror(saved));
  }
  trace_buffer = malloc(TRACE_BUFFER_BYTES);
  if (trace_buffer)
    setvbuf(f, trace_buffer, _IOFBF, TRACE_BUFFER_BYTES);
  trace_file = f;
  trace_refs = 1;
  if (!reopen) {
    trace_rank = rank;
    trace_events = 0;
    fputc('[', f);
    /* name and order each rank's row in the viewer */
    put_separator();
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":\"rank %d\"}}",
            rank, rank);
    put_separator();
    fprintf(f,
            "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
            "\"tid\":0,\"args\":{\"sort_index\":%d}}",
            rank, rank);
  }
  /* so that a crash right after init still leaves a readable file */
  fflush(f);
  trace_flushed_us = xcoll_time_us();
  atomic_store(&trace_on, 1);
  pthread_mutex_unlock(&trace_lock);
  XCOLL_INFO("XCOLL_TRACE: writing rank %d's trace to %s", trace_rank,
             trace_path);
  return XCOLL_SUCCESS;
}

void xcoll_trace_close(void) {
  pthread_mutex_lock(&trace_lock);
  if (trace_refs == 0 || --trace_refs > 0) {
    pthread_mutex_unlock(&trace_lock);
    return;
  }
  atomic_store(&trace_on, 0);
  FILE *f = trace_file;
  trace_file = NULL;
  fflush(f);
  trace_end_offset = ftell(f);
  fputs("\n]\n", f);
  fflush(f);
  /* a reopen that added fewer bytes than an earlier close must not leave
   * the old tail behind */
  if (ftruncate(fileno(f), ftell(f)) != 0)
    XCOLL_WARN("XCOLL_TRACE: could not trim %s: %s", trace_path,
               strerror(errno));
  if (fclose(f) != 0)
    XCOLL_WARN("XCOLL_TRACE: writing %s failed: %s", trace_path,
               strerror(errno));
  free(trace_buffer);
  trace_buffer = NULL;
  pthread_mutex_unlock(&trace_lock);
}

void xcoll_trace_span(const char *name, const char *cat, uint64_t tid,
                      double start_us, double end_us, const char *args_json) {
  if (!xcoll_trace_enabled())
    return;
  double duration_us = end_us > start_us ? end_us - start_us : 0.0;
  pthread_mutex_lock(&trace_lock);
  if (trace_file) {
    FILE *f = trace_file;
    put_separator();
    fputs("{\"name\":\"", f);
    put_json_string(f, name ? name : "?");
    fputs("\",\"cat\":\"", f);
    put_json_string(f, cat ? cat : "xcoll");
    fprintf(f,
            "\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
            "\"tid\":%llu,\"args\":{%s}}",
            start_us, duration_us, trace_rank, (unsigned long long)tid,
            args_json ? args_json : "");
    if (end_us - trace_flushed_us > TRACE_FLUSH_INTERVAL_US) {
      fflush(f);
      trace_flushed_us = end_us;
    }
  }
  pthread_mutex_unlock(&trace_lock);
}
