/*
 * timeline.c - xtrain's Chrome trace writer (see timeline.h). Events are
 * written as they come through a large stdio buffer: one rank writes from
 * one thread, and a step adds about a dozen events, so the cost is a few
 * formatted writes per step.
 */
#include "timeline.h"

#include <errno.h>
#include <string.h>

#include "../core/json.h"
#include "xcoll.h"

static void separator(timeline *t) {
  fputs(t->events++ ? ",\n" : "\n", t->file);
}

int timeline_open(timeline *t, const char *pattern, int rank, char *err,
                  size_t err_bytes) {
  memset(t, 0, sizeof *t);
  t->rank = rank;
  if (xcoll_rank_path(pattern, rank, t->path, sizeof t->path) !=
      XCOLL_SUCCESS) {
    snprintf(err, err_bytes,
             "--trace '%s' expands to a path longer than %zu bytes: use a "
             "shorter one", pattern, sizeof t->path);
    return -1;
  }
  t->file = fopen(t->path, "w");
  if (!t->file) {
    snprintf(err, err_bytes, "cannot open the --trace file %s: %s", t->path,
             strerror(errno));
    return -1;
  }
  /* full buffering in large blocks: a step's events cost no system call */
  setvbuf(t->file, NULL, _IOFBF, 1 << 20);
  fputc('[', t->file);
  separator(t);
  fprintf(t->file,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
          "\"args\":{\"name\":\"rank %d\"}}",
          rank, rank);
  separator(t);
  fprintf(t->file,
          "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
          "\"tid\":0,\"args\":{\"sort_index\":%d}}",
          rank, rank);
  return 0;
}

void timeline_name_track(timeline *t, int tid, const char *name) {
  if (!t->file)
    return;
  separator(t);
  fprintf(t->file,
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"name\":\"",
          t->rank, tid);
  xcoll_json_put_string(t->file, name);
  fputs("\"}}", t->file);
  separator(t);
  fprintf(t->file,
          "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"sort_index\":%d}}",
          t->rank, tid, tid);
}

void timeline_span(timeline *t, const char *name, const char *cat, int tid,
                   double start_s, double end_s, const char *args_json) {
  if (!t->file)
    return;
  double start_us = start_s * 1e6;
  double duration_us = end_s > start_s ? (end_s - start_s) * 1e6 : 0.0;
  separator(t);
  fputs("{\"name\":\"", t->file);
  xcoll_json_put_string(t->file, name);
  fputs("\",\"cat\":\"", t->file);
  xcoll_json_put_string(t->file, cat);
  fprintf(t->file,
          "\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
          "\"args\":{%s}}",
          start_us, duration_us, t->rank, tid, args_json ? args_json : "");
}

int timeline_close(timeline *t, char *err, size_t err_bytes) {
  if (!t->file)
    return 0;
  fputs("\n]\n", t->file);
  int failed = ferror(t->file);
  if (fclose(t->file) != 0)
    failed = 1;
  t->file = NULL;
  if (failed) {
    snprintf(err, err_bytes, "writing the --trace file %s failed: %s",
             t->path, strerror(errno));
    return -1;
  }
  return 0;
}
