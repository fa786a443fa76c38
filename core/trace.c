/* trace.c - XCOLL_TRACE (trace.h): spans written as Chrome Trace Event
 * Format JSON, one file per process, for Perfetto or chrome://tracing; and
 * the public xcoll_rank_path (xcoll.h), the same file-naming rule for
 * callers that write their own per-rank files.
 *
 * The file is a JSON array of events rather than {"traceEvents": [...]}:
 * viewers accept an array whose closing bracket is missing, so the trace of
 * a rank that crashed still opens. Writes go through a stdio buffer under a
 * mutex; the buffer is flushed when full and at the last close. */
#include "trace.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "json.h"
#include "log.h"
#include "path_pattern.h"

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

/* Tracks and lanes (trace.h). Both tables live as long as the process, like
 * the file: a reopen continues the same array, whose metadata already names
 * the lanes. Guarded by trace_lock. */
#define TRACE_MAX_TRACKS 256
#define TRACE_MAX_LANES 1000 /* lane tids stay below 1000 */
#define TRACE_LABEL_BYTES 48
#define TRACE_KEY_BYTES 24

typedef struct trace_track {
  uint64_t id;
  char label[TRACE_LABEL_BYTES];
  int lanes_opened; /* counts lanes: orders them in the viewer */
} trace_track;

typedef struct trace_lane {
  int track;                  /* index in trace_tracks */
  char key[TRACE_KEY_BYTES];  /* the category, or the name of a chunk span */
  int number;                 /* 0, 1, ... among the lanes of (track, key) */
  double end_us;              /* latest end of a span on this lane */
} trace_lane;

static trace_track trace_tracks[TRACE_MAX_TRACKS];
static int trace_num_tracks;
static trace_lane trace_lanes[TRACE_MAX_LANES]; /* tid = index + 1 */
static int trace_num_lanes;
static int trace_lanes_full_warned;

double xcoll_time_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

int xcoll_trace_enabled(void) {
  return atomic_load_explicit(&trace_on, memory_order_relaxed);
}

static void put_separator(void) {
  fputs(trace_events++ ? ",\n" : "\n", trace_file);
}

/* Index of track id in trace_tracks, adding it (unnamed) if new; -1 when
 * the table is full. Called with trace_lock held. */
static int track_index(uint64_t id) {
  for (int i = 0; i < trace_num_tracks; i++)
    if (trace_tracks[i].id == id)
      return i;
  if (trace_num_tracks == TRACE_MAX_TRACKS)
    return -1;
  trace_track *t = &trace_tracks[trace_num_tracks];
  t->id = id;
  snprintf(t->label, sizeof t->label, "comm %llu", (unsigned long long)id);
  t->lanes_opened = 0;
  return trace_num_tracks++;
}

void xcoll_trace_name_track(uint64_t track, const char *label) {
  pthread_mutex_lock(&trace_lock);
  int i = track_index(track);
  if (i >= 0 && label)
    snprintf(trace_tracks[i].label, sizeof trace_tracks[i].label, "%s",
             label);
  pthread_mutex_unlock(&trace_lock);
}

/* Writes the metadata that names lane tid and keeps it beside the other
 * lanes of its track. Called with trace_lock held and a file open. */
static void put_lane_metadata(int tid) {
  const trace_lane *lane = &trace_lanes[tid - 1];
  const trace_track *track = &trace_tracks[lane->track];
  char name[TRACE_LABEL_BYTES + TRACE_KEY_BYTES + 16];
  if (lane->number == 0)
    snprintf(name, sizeof name, "%s %s", track->label, lane->key);
  else
    snprintf(name, sizeof name, "%s %s #%d", track->label, lane->key,
             lane->number + 1);
  put_separator();
  fprintf(trace_file,
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"name\":\"",
          trace_rank, tid);
  xcoll_json_put_string(trace_file, name);
  fputs("\"}}", trace_file);
  put_separator();
  /* tracks in order of first use, then their lanes in order of opening */
  fprintf(trace_file,
          "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
          "\"tid\":%d,\"args\":{\"sort_index\":%d}}",
          trace_rank, tid, lane->track * TRACE_MAX_LANES + tid);
}

/* Which lanes of a track a span goes to, also the lanes' name: chunk and
 * proxy spans get a set per kind (send, recv, reduce), the others one set
 * per category. */
static const char *lane_key(const char *cat, const char *name) {
  if (strcmp(cat, "chunk") == 0 || strcmp(cat, "proxy") == 0)
    return name;
  if (strcmp(cat, "collective") == 0)
    return "collectives";
  if (strcmp(cat, "channel") == 0)
    return "kernel";
  if (strcmp(cat, "primitive") == 0)
    return "primitives";
  return cat;
}

/* The tid of a lane of (track, key) that is free at start_us (every span
 * on it ended by then), opening a lane if none is. Called with trace_lock
 * held and a file open. */
static int lane_for(uint64_t track_id, const char *key, double start_us,
                    double end_us) {
  int track = track_index(track_id);
  if (track < 0)
    track = TRACE_MAX_TRACKS - 1; /* share the last track rather than drop */
  int first_free = -1, earliest = -1, count = 0;
  for (int i = 0; i < trace_num_lanes; i++) {
    trace_lane *lane = &trace_lanes[i];
    if (lane->track != track || strcmp(lane->key, key) != 0)
      continue;
    count++;
    if (lane->end_us <= start_us) {
      /* the lowest-numbered free lane: spans stay on few lanes */
      if (first_free < 0)
        first_free = i;
    }
    if (earliest < 0 || lane->end_us < trace_lanes[earliest].end_us)
      earliest = i;
  }
  int chosen = first_free;
  if (chosen < 0 && trace_num_lanes < TRACE_MAX_LANES) {
    chosen = trace_num_lanes++;
    trace_lane *lane = &trace_lanes[chosen];
    lane->track = track;
    snprintf(lane->key, sizeof lane->key, "%s", key);
    lane->number = count;
    lane->end_us = end_us;
    trace_tracks[track].lanes_opened++;
    put_lane_metadata(chosen + 1);
  } else if (chosen < 0) {
    /* out of lanes: overlap on the least busy one, and say so once */
    if (!trace_lanes_full_warned) {
      trace_lanes_full_warned = 1;
      XCOLL_WARN("XCOLL_TRACE: more than %d lanes; later spans may overlap "
                 "on one track",
                 TRACE_MAX_LANES);
    }
    chosen = earliest >= 0 ? earliest : trace_num_lanes - 1;
  }
  if (end_us > trace_lanes[chosen].end_us)
    trace_lanes[chosen].end_us = end_us;
  return chosen + 1;
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
      xcoll_path_expand_rank(pattern, rank, trace_path, sizeof trace_path) != 0) {
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

void xcoll_trace_span(const char *name, const char *cat, uint64_t track,
                      double start_us, double end_us, const char *args_json) {
  if (!xcoll_trace_enabled())
    return;
  if (end_us < start_us)
    end_us = start_us;
  /* round to the printed nanosecond first, so that the printed ts + dur of
   * spans on one lane never overlap by a rounding step */
  start_us = round(start_us * 1e3) * 1e-3;
  end_us = round(end_us * 1e3) * 1e-3;
  double duration_us = end_us - start_us;
  if (!name)
    name = "?";
  if (!cat)
    cat = "xcoll";
  pthread_mutex_lock(&trace_lock);
  if (trace_file) {
    FILE *f = trace_file;
    int tid = lane_for(track, lane_key(cat, name), start_us, end_us);
    put_separator();
    fputs("{\"name\":\"", f);
    xcoll_json_put_string(f, name);
    fputs("\",\"cat\":\"", f);
    xcoll_json_put_string(f, cat);
    fprintf(f,
            "\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
            "\"tid\":%d,\"args\":{%s}}",
            start_us, duration_us, trace_rank, tid,
            args_json ? args_json : "");
    if (end_us - trace_flushed_us > TRACE_FLUSH_INTERVAL_US) {
      fflush(f);
      trace_flushed_us = end_us;
    }
  }
  pthread_mutex_unlock(&trace_lock);
}

/* ---- public API ---- */

/* XCOLL_TRACE's naming rule (path_pattern.h) for callers that write their
 * own per-rank files (xtrain's --trace). */
xcoll_status xcoll_rank_path(const char *pattern, int rank, char *out,
                             size_t out_bytes) {
  if (pattern == NULL || out == NULL || rank < 0)
    return xcoll_error_quiet(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                             "xcoll_rank_path: pattern and out must not be "
                             "NULL and rank (%d) must be >= 0",
                             rank);
  if (xcoll_path_expand_rank(pattern, rank, out, out_bytes) != 0)
    return xcoll_error_quiet(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                             "xcoll_rank_path: '%.200s' expands to more than "
                             "%zu bytes: use a shorter pattern or a larger "
                             "buffer",
                             pattern, out_bytes == 0 ? 0 : out_bytes - 1);
  return XCOLL_SUCCESS;
}
