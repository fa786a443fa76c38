/*
 * timeline.h - xtrain --trace: a per-rank Chrome trace (the Trace Event
 * Format that Perfetto and chrome://tracing open) of the training loop:
 * steps, forward, backward per layer, each DDP bucket's all-reduce from issue
 * to observed completion, the wait, the optimizer step and evaluation.
 *
 * The file is a JSON array of events like XCOLL_TRACE's: pid = rank, times in
 * microseconds of CLOCK_MONOTONIC (the clock XCOLL_TRACE uses), so the files
 * of all ranks and XCOLL_TRACE's files merge with tools/xcoll-trace-merge
 * into one view where the trainer's rows sit next to the collectives.
 * xtrain's rows use track ids from TIMELINE_TID_STEPS up, far from xcoll's
 * (the communicator id: 0 for the world communicator, small for splits).
 */
#ifndef XTRAIN_TIMELINE_H
#define XTRAIN_TIMELINE_H

#include <stddef.h>
#include <stdio.h>

/* Track (tid) of steps, forward, backward and optimizer spans; bucket i's
 * all-reduces go on TIMELINE_TID_STEPS + 1 + i, one track per bucket because
 * consecutive buckets overlap without nesting. */
#define TIMELINE_TID_STEPS 1000

typedef struct timeline {
  FILE *file; /* NULL: tracing off, every call is a no-op */
  int rank;
  long events;
  char path[4096];
} timeline;

/* Open the trace of rank, named by xcoll_rank_path (XCOLL_TRACE's rule):
 * "%r" in pattern becomes the rank and "%p" the pid; without either,
 * ".rank<N>" goes before the extension (trace.json -> trace.rank0.json). Writes the opening bracket and the process name. Returns
 * 0, or -1 with a message naming the path in err. */
int timeline_open(timeline *t, const char *pattern, int rank, char *err,
                  size_t err_bytes);

/* Name track tid in the viewer (a "thread_name" metadata event). */
void timeline_name_track(timeline *t, int tid, const char *name);

/* One complete span named name in category cat on track tid, from start_s
 * to end_s (seconds of CLOCK_MONOTONIC, as ddp_now returns). args_json is
 * the inside of the "args" object (e.g. "\"bytes\":4096") or NULL. */
void timeline_span(timeline *t, const char *name, const char *cat, int tid,
                   double start_s, double end_s, const char *args_json);

/* Write the closing bracket and close. Returns 0, or -1 with a message in
 * err when a write failed (disk full...). No-op when tracing is off. */
int timeline_close(timeline *t, char *err, size_t err_bytes);

#endif /* XTRAIN_TIMELINE_H */
