/* trace.h - XCOLL_TRACE: Chrome trace JSON (the Trace Event Format that
 * Perfetto and chrome://tracing open).
 *
 * XCOLL_TRACE=path writes one file per process: "%r" in path becomes the
 * rank, "%p" the pid; without either, ".rank<N>" is inserted before the
 * extension. Each event has pid = rank, so that the files of all ranks can
 * be concatenated into one view (tools/xcoll-trace-merge). Spans: one "X"
 * event per collective (op, bytes, dtype, algorithm), one per chunk step
 * (peer, bytes), and with nccl_like one per channel kernel, primitive and
 * proxy transfer. Thread-safe.
 *
 * Tracks and lanes. The Trace Event Format draws the complete events of one
 * (pid, tid) as a stack, so they must nest; Perfetto documents that spans
 * which overlap without nesting are drawn wrong
 * (https://perfetto.dev/docs/faq). Chunk spans of a pipelined collective do
 * overlap (two sends and two receives in flight), and so do non-blocking
 * collectives. So a caller names a logical track (a communicator, a
 * channel), and the trace puts each span on a lane of that track, one lane
 * per category (per name for "chunk" spans: send, recv, reduce), opening a
 * new lane when every existing one is still busy at the span's start. Each
 * lane is its own tid with a thread_name ("comm 0 recv #2") and a sort index
 * that keeps a track's lanes together. Spans are placed when they end, so a
 * lane only takes a span that starts after every span already on it ended:
 * the spans of one tid never overlap. Lane tids are small integers (1, 2,
 * ...; fewer than 1000), so that a program's own spans can use tids from
 * 1000 up in the same view (xtrain --trace does). */
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
 * ("collective", "chunk", "channel", "primitive", "proxy"), on a lane of
 * the logical track `track` (see above). args_json is the body of the
 * "args" object (e.g. "\"peer\":3,\"bytes\":4096") or NULL. */
void xcoll_trace_span(const char *name, const char *cat, uint64_t track,
                      double start_us, double end_us, const char *args_json);
/* Name track in the viewer: its lanes are called "<label> <lane name>".
 * Without a name a track is "comm <track>" (communicator tracks use the
 * communicator's id). label is copied (at most 47 bytes are kept). Call it
 * before the track's first span; a later call renames only lanes opened
 * afterwards. */
void xcoll_trace_name_track(uint64_t track, const char *label);

#endif
