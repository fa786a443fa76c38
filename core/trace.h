/* trace.h - XCOLL_TRACE: Chrome trace JSON (the Trace Event Format that
 * Perfetto and chrome://tracing open).
 *
 * XCOLL_TRACE=path writes one file per process: "%r" in path becomes the
 * rank, "%p" the pid; without either, ".rank<N>" is inserted before the
 * extension. Each event has pid = rank and tid = the communicator's id, so
 * that the files of all ranks can be concatenated into one view
 * (tools/xcoll-trace-merge). Spans: one "X" event per collective (op, bytes,
 * dtype, algorithm) and one per chunk step (peer, bytes). Thread-safe. */
#ifndef XCOLL_CORE_TRACE_H
#define XCOLL_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

/* Open the trace file if XCOLL_TRACE is set (first call wins; later calls
 * only add a reference). Errors: XCOLL_ERR_SYSTEM naming the path. */
xcoll_status xcoll_trace_open(int rank);
/* Drop a reference; the last one writes the closing bracket and closes. */
void xcoll_trace_close(void);
/* 1 when a trace file is open: callers skip building arguments otherwise. */
int xcoll_trace_enabled(void);
/* Monotonic time in microseconds. */
double xcoll_time_us(void);
/* One complete span [start_us, end_us] named name, in category cat
 * ("collective", "chunk", ...), on track tid. args_json is the body of the
 * "args" object (e.g. "\"peer\":3,\"bytes\":4096") or NULL. */
void xcoll_trace_span(const char *name, const char *cat, uint64_t tid,
                      double start_us, double end_us, const char *args_json);

#endif
