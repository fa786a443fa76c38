/* flight.h - the flight recorder: a ring buffer per communicator of its
 * last XCOLL_FLIGHT_RECORDER calls with their state (queued, started,
 * completed, failed), timestamps, algorithm and, for the host collective
 * running now, the step and the peers it waits on (for a device-driven
 * backend's op, each channel as the backend's describe_op says, read at
 * dump time); dumped as JSON on a
 * timeout, a desync or a peer's failure, on SIGUSR1 when allowed, and by
 * xcoll_comm_dump. PyTorch's Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE)
 * is the model. Format and tools: docs/flight-recorder.md.
 *
 * Hooks: core/dispatch.c records a call when it is dispatched (queued),
 * marks it started where the algorithm or the backend starts it, and ended
 * where its status is known; comm.h's p2p wrappers note the step and peers
 * of the host collective running now. Each hook is a short critical section
 * on the recorder's mutex: no allocation, no I/O. Thread-safe. */
#ifndef XCOLL_CORE_FLIGHT_H
#define XCOLL_CORE_FLIGHT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "algorithm.h"
#include "xcoll.h"

struct xcoll_comm;
struct xcoll_backend_channel;

typedef enum xcoll_flight_state {
  XCOLL_FLIGHT_EMPTY = 0,
  XCOLL_FLIGHT_QUEUED,    /* dispatched, not yet running */
  XCOLL_FLIGHT_STARTED,   /* an algorithm runs it, or the backend has it */
  XCOLL_FLIGHT_COMPLETED, /* succeeded */
  XCOLL_FLIGHT_FAILED     /* ended with the status in the entry */
} xcoll_flight_state;

/* The point-to-point calls of a group kept in its entry (more are counted,
 * not kept). */
#define XCOLL_FLIGHT_GROUP_CALLS 4

/* One send or recv of a group: its peer, and its place among this rank's
 * sends to (recvs from) that peer since the communicator began, which is
 * the place of the matching call on the peer (calls between two ranks
 * match in issue order). */
typedef struct xcoll_flight_p2p {
  uint8_t kind; /* XCOLL_COLL_SEND or XCOLL_COLL_RECV */
  uint8_t dtype;
  int32_t peer;
  uint64_t count;
  uint64_t nth;
} xcoll_flight_p2p;

typedef struct xcoll_flight_entry {
  uint64_t id; /* 1, 2, ... in the order calls were recorded; 0: empty */
  uint64_t seq;
  int32_t kind; /* xcoll_coll_kind, or XCOLL_COLL_GROUP */
  int32_t dtype, op, root, peer;
  int32_t premul;
  uint64_t count;
  const char *algorithm, *protocol; /* static strings, NULL until started */
  int32_t state; /* xcoll_flight_state */
  int32_t status;
  /* Monotonic microseconds (xcoll_time_us's clock) of each state, 0 when
   * not reached: filled by xcoll_flight_snapshot from the ticks below. */
  double queued_us, started_us, ended_us;
  /* In the ring: the recorder's clock at each state (flight.c: the TSC
   * where it is invariant, else CLOCK_MONOTONIC ns); 0 when not reached. */
  uint64_t queued_ticks, started_ticks, ended_ticks;
  /* A host collective that failed: where it stood (xcoll_flight_now's
   * step and peers); has_progress 0 otherwise. */
  int32_t has_progress, step, recv_from, send_to;
  /* XCOLL_COLL_GROUP: its calls, sends and receives first kept here. */
  int32_t group_calls, group_p2p;
  xcoll_flight_p2p p2p[XCOLL_FLIGHT_GROUP_CALLS];
} xcoll_flight_entry;

/* Where the host collective running now stands (written by the p2p
 * wrappers of comm.h, read by a dump from any thread). */
typedef struct xcoll_flight_now {
  _Atomic uint64_t id;    /* the running entry's id, 0 when none */
  _Atomic uint32_t step;  /* the tag's step of the last message posted */
  _Atomic int32_t recv_from, send_to; /* peers of the last receive / send */
  _Atomic uint32_t waiting; /* 1 inside a p2p wait */
} xcoll_flight_now;

/* Channels of a device-driven backend's op a dump describes at most
 * (nccl_like's NL_MAX_CHANNELS). */
#define XCOLL_FLIGHT_CHANNELS 32

typedef struct xcoll_flight xcoll_flight;

/* XCOLL_FLIGHT_RECORDER's default (entries per communicator). */
#define XCOLL_FLIGHT_DEFAULT_ENTRIES 1024

/* Give comm its recorder (XCOLL_FLIGHT_RECORDER entries; 0 keeps none but
 * still dumps the communicator's state) and register it for SIGUSR1 dumps
 * (XCOLL_FLIGHT_RECORDER_SIGNAL). Errors: XCOLL_ERR_ENV, NO_MEMORY. */
xcoll_status xcoll_flight_open(struct xcoll_comm *comm);
/* comm is connected (its backend state set): SIGUSR1 dumps it from now. */
void xcoll_flight_ready(struct xcoll_comm *comm);
/* Unregister and free comm's recorder (waits for a dump in progress).
 * Idempotent. Call before the backend's state goes. */
void xcoll_flight_close(struct xcoll_comm *comm);

/* Record a dispatched call as queued; returns its id (0 without a
 * recorder). A group's sends and receives are counted per peer here, on
 * the issuing thread, in issue order. */
uint64_t xcoll_flight_record(struct xcoll_comm *comm,
                             const xcoll_coll_args *args);
/* Mark id started with its algorithm and protocol (static strings). id 0
 * (a group's collective, never dispatched alone): record args first.
 * Returns the id. */
uint64_t xcoll_flight_start(struct xcoll_comm *comm, uint64_t id,
                            const xcoll_coll_args *args,
                            const char *algorithm, const char *protocol);
/* Mark id completed (status SUCCESS) or failed, unless it has ended
 * already or left the ring. */
void xcoll_flight_end(struct xcoll_comm *comm, uint64_t id,
                      xcoll_status status);

/* The host collective id now runs on the calling thread (0: none). */
void xcoll_flight_running(struct xcoll_comm *comm, uint64_t id);

/* comm broke with status: dump it when the status is TIMEOUT, PROTOCOL
 * (a desync or a bad header) or REMOTE and XCOLL_FLIGHT_RECORDER_DIR is
 * set, and log where. */
void xcoll_flight_on_broken(struct xcoll_comm *comm, xcoll_status status);

/* Write comm's dump (JSON, docs/flight-recorder.md) to path, or with path
 * NULL to XCOLL_FLIGHT_RECORDER_DIR/xcoll_fr.c<comm_id>.r<rank>.json.
 * reason: "api", "timeout", "protocol", "remote", "signal". Written to a
 * temporary name and renamed, so a reader never sees half a file. Errors:
 * XCOLL_ERR_INVALID_ARGUMENT (path NULL and no directory),
 * XCOLL_ERR_SYSTEM (naming the path), XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_flight_dump(struct xcoll_comm *comm, const char *path,
                               const char *reason);

/* For tests: a recorder of capacity entries without a communicator, and
 * its entries oldest first (up to max; returns how many). */
/* world_size: peers counted for sends and receives (0: none). */
xcoll_flight *xcoll_flight_new(size_t capacity, int world_size);
void xcoll_flight_free(xcoll_flight *flight);
uint64_t xcoll_flight_record_in(xcoll_flight *flight,
                                const xcoll_coll_args *args);
void xcoll_flight_start_in(xcoll_flight *flight, uint64_t id,
                           const char *algorithm, const char *protocol);
void xcoll_flight_end_in(xcoll_flight *flight, uint64_t id,
                         xcoll_status status);
size_t xcoll_flight_snapshot(xcoll_flight *flight, xcoll_flight_entry *out,
                             size_t max);
/* The same entries as the dump's JSON "entries" array, into a malloc'd
 * string (NULL on no memory). */
char *xcoll_flight_entries_json(xcoll_flight *flight);
/* ... with the channels of started and failed entries as describe (a
 * backend's describe_op, core/backend.h) says for state. */
typedef int (*xcoll_flight_describe_fn)(const void *state, uint64_t flight_id,
                                        struct xcoll_backend_channel *out,
                                        int max);
char *xcoll_flight_entries_json_described(xcoll_flight *flight,
                                          xcoll_flight_describe_fn describe,
                                          const void *state);

/* "TIMEOUT", "SUCCESS", ... : status names as dumps spell them. */
const char *xcoll_flight_status_name(xcoll_status status);

#endif
