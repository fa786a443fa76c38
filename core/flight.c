/* flight.c - the flight recorder (core/flight.h): the ring buffer, the JSON
 * dump (docs/flight-recorder.md), and dumps on SIGUSR1.
 *
 * SIGUSR1 (XCOLL_FLIGHT_RECORDER_SIGNAL=1): the handler only calls
 * sem_post, which POSIX lists as async-signal-safe, and keeps errno. A
 * thread of ours, started with the first recorder, waits on the semaphore
 * and writes every live communicator's dump with ordinary code (malloc,
 * snprintf, locks), so no lock is ever taken inside the handler. The handler
 * is installed only where SIGUSR1 is at its default or ignored, so an
 * application's own handler is left alone (a WARN line says so). */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_COLL /* log.h */
#include "flight.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "comm.h"
#include "dtype.h"
#include "env.h"
#include "error.h"
#include "group.h"
#include "json.h"
#include "log.h"
#include "params.h"
#include "spinlock.h"
#include "trace.h"

#define FLIGHT_FORMAT "xcoll-flight-recorder"
#define FLIGHT_VERSION 1

struct xcoll_flight {
  /* Guards the ring, recorded and the p2p counts; held for a few dozen
   * instructions, except by a snapshot or a dump (spinlock.h). */
  xcoll_spinlock lock;
  size_t capacity;
  uint64_t recorded; /* entries ever recorded: the last id */
  xcoll_flight_entry *entries; /* slot (id - 1) % capacity */
  int world_size;
  uint64_t *sends, *recvs; /* per peer: p2p calls issued so far */
  /* The communicator it belongs to (NULL for a test recorder), and its
   * place on the list of recorders SIGUSR1 dumps. */
  struct xcoll_comm *comm;
  struct xcoll_flight *next;
  /* The communicator is connected: its backend state may be read. */
  _Atomic int ready;
  /* The clock of the entries' *_ticks (flight_ticks) and one reading of it
   * beside xcoll_time_us, taken when the recorder was made. */
  int tsc;
  uint64_t anchor_ticks;
  double anchor_us;
};

/* ---- the clock ---- */

/* 1 when the CPU's time-stamp counter runs at a constant rate in every
 * state (CPUID leaf 0x80000007, EDX bit 8, "invariant TSC"; Linux's
 * constant_tsc and nonstop_tsc). Reading it takes about 9 ns where
 * clock_gettime(CLOCK_MONOTONIC) takes about 21 on the machine the tests
 * run on, and a call records three times. */
static int invariant_tsc(void) {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
      __get_cpuid(0x80000007u, &a, &b, &c, &d))
    return (d >> 8) & 1;
#endif
  return 0;
}

/* The entries' clock: time-stamp counter ticks (flight->tsc), else
 * CLOCK_MONOTONIC nanoseconds. Never 0 once the machine has run a
 * moment: 0 marks a state not reached. */
static uint64_t flight_ticks(const xcoll_flight *flight) {
#if defined(__x86_64__)
  if (flight->tsc)
    return __rdtsc();
#else
  (void)flight;
#endif
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One reading of both clocks: the ticks between two xcoll_time_us
 * readings at most 2 us apart (a few tries; a thread preempted between
 * them would skew every converted time), *us their midpoint. */
static void clock_pair(const xcoll_flight *flight, uint64_t *ticks,
                       double *us) {
  for (int tries = 0;; tries++) {
    double before = xcoll_time_us();
    *ticks = flight_ticks(flight);
    double after = xcoll_time_us();
    *us = 0.5 * (before + after);
    if (after - before <= 2.0 || tries == 4)
      return;
  }
}

/* Ticks per microsecond, from the anchor to (now_ticks, now_us): exact
 * for nanoseconds; the counter's rate, measured over the recorder's life,
 * for the TSC. A time converted with it is off by about the error of the
 * two clock readings, however long ago it was. */
static double ticks_per_us(const xcoll_flight *flight, uint64_t now_ticks,
                           double now_us) {
  if (!flight->tsc)
    return 1000.0;
  double elapsed_us = now_us - flight->anchor_us;
  if (elapsed_us < 1.0 || now_ticks <= flight->anchor_ticks)
    return 1000.0; /* no interval yet: every entry is within it */
  return (double)(now_ticks - flight->anchor_ticks) / elapsed_us;
}

/* ---- the ring ---- */

xcoll_flight *xcoll_flight_new(size_t capacity, int world_size) {
  xcoll_flight *flight = calloc(1, sizeof *flight);
  if (flight == NULL)
    return NULL;
  flight->tsc = invariant_tsc();
  clock_pair(flight, &flight->anchor_ticks, &flight->anchor_us);
  flight->capacity = capacity;
  flight->world_size = world_size > 0 ? world_size : 0;
  if (capacity > 0)
    flight->entries = calloc(capacity, sizeof *flight->entries);
  if (flight->world_size > 0) {
    flight->sends = calloc((size_t)flight->world_size, sizeof *flight->sends);
    flight->recvs = calloc((size_t)flight->world_size, sizeof *flight->recvs);
  }
  if ((capacity > 0 && flight->entries == NULL) ||
      (flight->world_size > 0 && (flight->sends == NULL || flight->recvs == NULL))) {
    xcoll_flight_free(flight);
    return NULL;
  }
  return flight;
}

void xcoll_flight_free(xcoll_flight *flight) {
  if (flight == NULL)
    return;
  free(flight->entries);
  free(flight->sends);
  free(flight->recvs);
  free(flight);
}

/* The entry of id if it is still in the ring; called under lock. */
static xcoll_flight_entry *entry_of(xcoll_flight *flight, uint64_t id) {
  if (id == 0 || flight->capacity == 0)
    return NULL;
  xcoll_flight_entry *e = &flight->entries[(id - 1) % flight->capacity];
  return e->id == id ? e : NULL;
}

uint64_t xcoll_flight_record_in(xcoll_flight *flight,
                                const xcoll_coll_args *args) {
  uint64_t now = flight_ticks(flight);
  xcoll_spin_lock(&flight->lock);
  uint64_t id = ++flight->recorded;
  xcoll_flight_entry *e = NULL, scratch;
  if (flight->capacity > 0)
    e = &flight->entries[(id - 1) % flight->capacity];
  else
    e = &scratch; /* p2p counts still advance */
  memset(e, 0, sizeof *e);
  e->id = id;
  e->seq = args->seq;
  e->kind = (int32_t)args->kind;
  e->dtype = (int32_t)args->dtype;
  e->op = (int32_t)args->op;
  e->root = args->root;
  e->peer = args->peer;
  e->premul = args->premul;
  e->count = args->count;
  e->state = XCOLL_FLIGHT_QUEUED;
  e->status = XCOLL_IN_PROGRESS;
  e->queued_ticks = now;
  const struct xcoll_group_ops *group =
      args->kind == XCOLL_COLL_GROUP ? args->group : NULL;
  if (group != NULL) {
    e->group_calls = group->count;
    for (int i = 0; i < group->count; i++) {
      const xcoll_coll_args *a = &group->ops[i].args;
      if (a->kind != XCOLL_COLL_SEND && a->kind != XCOLL_COLL_RECV)
        continue;
      uint64_t nth = 0;
      if (a->peer >= 0 && a->peer < flight->world_size)
        nth = a->kind == XCOLL_COLL_SEND ? flight->sends[a->peer]++
                                         : flight->recvs[a->peer]++;
      if (e->group_p2p < XCOLL_FLIGHT_GROUP_CALLS) {
        xcoll_flight_p2p *p = &e->p2p[e->group_p2p];
        p->kind = (uint8_t)a->kind;
        p->dtype = (uint8_t)a->dtype;
        p->peer = a->peer;
        p->count = a->count;
        p->nth = nth;
      }
      e->group_p2p++;
    }
  }
  xcoll_spin_unlock(&flight->lock);
  return id;
}

void xcoll_flight_start_in(xcoll_flight *flight, uint64_t id,
                           const char *algorithm, const char *protocol) {
  uint64_t now = flight_ticks(flight);
  xcoll_spin_lock(&flight->lock);
  xcoll_flight_entry *e = entry_of(flight, id);
  if (e != NULL && e->state == XCOLL_FLIGHT_QUEUED) {
    e->state = XCOLL_FLIGHT_STARTED;
    e->started_ticks = now;
    e->algorithm = algorithm;
    e->protocol = protocol;
  }
  xcoll_spin_unlock(&flight->lock);
}

void xcoll_flight_end_in(xcoll_flight *flight, uint64_t id,
                         xcoll_status status) {
  uint64_t now = flight_ticks(flight);
  xcoll_spin_lock(&flight->lock);
  xcoll_flight_entry *e = entry_of(flight, id);
  if (e != NULL && (e->state == XCOLL_FLIGHT_QUEUED ||
                    e->state == XCOLL_FLIGHT_STARTED)) {
    e->state = status == XCOLL_SUCCESS ? XCOLL_FLIGHT_COMPLETED
                                       : XCOLL_FLIGHT_FAILED;
    e->status = (int32_t)status;
    e->ended_ticks = now;
  }
  xcoll_spin_unlock(&flight->lock);
}

size_t xcoll_flight_snapshot(xcoll_flight *flight, xcoll_flight_entry *out,
                             size_t max) {
  xcoll_spin_lock(&flight->lock);
  uint64_t now_ticks = 0;
  double now_us = 0;
  clock_pair(flight, &now_ticks, &now_us);
  double rate = ticks_per_us(flight, now_ticks, now_us);
  uint64_t last = flight->recorded;
  uint64_t kept = last < flight->capacity ? last : flight->capacity;
  if (kept > max)
    kept = max;
  size_t n = 0;
  for (uint64_t id = last - kept + 1; id <= last && kept > 0; id++) {
    xcoll_flight_entry *e = entry_of(flight, id);
    if (e == NULL)
      continue;
    xcoll_flight_entry *o = &out[n++];
    *o = *e;
    /* Ticks to CLOCK_MONOTONIC microseconds, counted back from now; each
     * state no earlier than the one before it (a counter read on another
     * core may lag by a few ticks). */
    const uint64_t *ticks[3] = {&e->queued_ticks, &e->started_ticks,
                                &e->ended_ticks};
    double *us[3] = {&o->queued_us, &o->started_us, &o->ended_us};
    double floor_us = 0;
    for (int i = 0; i < 3; i++) {
      uint64_t t = *ticks[i];
      double v = t == 0 ? 0
                 : t >= now_ticks
                     ? now_us
                     : now_us - (double)(now_ticks - t) / rate;
      if (t != 0 && v < floor_us)
        v = floor_us;
      if (t != 0)
        floor_us = v;
      *us[i] = v;
    }
  }
  xcoll_spin_unlock(&flight->lock);
  return n;
}

/* ---- communicator hooks ---- */

uint64_t xcoll_flight_record(xcoll_comm *comm, const xcoll_coll_args *args) {
  return comm->flight != NULL ? xcoll_flight_record_in(comm->flight, args) : 0;
}

uint64_t xcoll_flight_start(xcoll_comm *comm, uint64_t id,
                            const xcoll_coll_args *args,
                            const char *algorithm, const char *protocol) {
  if (comm->flight == NULL)
    return 0;
  if (id == 0)
    id = xcoll_flight_record_in(comm->flight, args);
  xcoll_flight_start_in(comm->flight, id, algorithm, protocol);
  return id;
}

void xcoll_flight_end(xcoll_comm *comm, uint64_t id, xcoll_status status) {
  if (comm->flight == NULL || id == 0)
    return;
  xcoll_flight_end_in(comm->flight, id, status);
  const xcoll_flight_now *now = &comm->flight_now;
  if (status == XCOLL_SUCCESS ||
      atomic_load_explicit(&now->id, memory_order_relaxed) != id)
    return;
  /* The failed host collective keeps where it stood, for the dump. */
  xcoll_spin_lock(&comm->flight->lock);
  xcoll_flight_entry *e = entry_of(comm->flight, id);
  if (e != NULL) {
    e->has_progress = 1;
    e->step = (int32_t)atomic_load_explicit(&now->step, memory_order_relaxed);
    e->recv_from = atomic_load_explicit(&now->recv_from, memory_order_relaxed);
    e->send_to = atomic_load_explicit(&now->send_to, memory_order_relaxed);
  }
  xcoll_spin_unlock(&comm->flight->lock);
}

void xcoll_flight_running(xcoll_comm *comm, uint64_t id) {
  if (id != 0) {
    atomic_store_explicit(&comm->flight_now.step, 0, memory_order_relaxed);
    atomic_store_explicit(&comm->flight_now.recv_from, -1, memory_order_relaxed);
    atomic_store_explicit(&comm->flight_now.send_to, -1, memory_order_relaxed);
  }
  atomic_store_explicit(&comm->flight_now.id, id, memory_order_relaxed);
}

/* ---- JSON ---- */

typedef struct text {
  char *data;
  size_t used, size;
  int failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->data + t->used, t->size - t->used, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = 1;
      return;
    }
    if ((size_t)n < t->size - t->used) {
      t->used += (size_t)n;
      return;
    }
    size_t size = (t->size + (size_t)n + 1) * 2;
    char *data = realloc(t->data, size);
    if (data == NULL) {
      t->failed = 1;
      return;
    }
    t->data = data;
    t->size = size;
  }
}

/* s as a JSON string, quotes included. */
static void put_string(text *t, const char *s) {
  char chunk[128];
  put(t, "\"");
  for (s = s ? s : ""; *s != '\0';) {
    s += xcoll_json_escape(s, chunk, sizeof chunk);
    put(t, "%s", chunk);
  }
  put(t, "\"");
}

const char *xcoll_flight_status_name(xcoll_status status) {
  static const char *const names[] = {
      "SUCCESS",       "INVALID_ARGUMENT", "INVALID_USAGE", "SYSTEM",
      "NO_MEMORY",     "TIMEOUT",          "REMOTE",        "PROTOCOL",
      "NOT_SUPPORTED", "ABORTED",          "ENV",           "INTERNAL",
      "IN_PROGRESS"};
  if ((unsigned)status < sizeof names / sizeof names[0])
    return names[status];
  return "UNKNOWN";
}

static const char *state_name(int32_t state) {
  switch (state) {
  case XCOLL_FLIGHT_QUEUED:
    return "queued";
  case XCOLL_FLIGHT_STARTED:
    return "started";
  case XCOLL_FLIGHT_COMPLETED:
    return "completed";
  case XCOLL_FLIGHT_FAILED:
    return "failed";
  default:
    return "empty";
  }
}

/* A device-driven backend's op, running or failed: where each of its
 * channels stands (core/backend.h's describe_op). The backend reads
 * counters and takes no lock, so every dump path may ask, the SIGUSR1
 * path included (its dump runs on a thread of ours, not in the handler). */
static void put_channels(text *t, const xcoll_flight_entry *e,
                         xcoll_flight_describe_fn describe,
                         const void *state) {
  if (describe == NULL || state == NULL ||
      (e->state != XCOLL_FLIGHT_STARTED && e->state != XCOLL_FLIGHT_FAILED))
    return;
  xcoll_backend_channel channels[XCOLL_FLIGHT_CHANNELS];
  int n = describe(state, e->id, channels, XCOLL_FLIGHT_CHANNELS);
  if (n > XCOLL_FLIGHT_CHANNELS)
    n = XCOLL_FLIGHT_CHANNELS;
  if (n <= 0)
    return;
  put(t, ",\"channels\":[");
  for (int i = 0; i < n; i++) {
    const xcoll_backend_channel *c = &channels[i];
    put(t,
        "%s{\"channel\":%d,\"sent\":%" PRIu64 ",\"send_steps\":%" PRIu64
        ",\"received\":%" PRIu64 ",\"recv_steps\":%" PRIu64 ",\"waits_on\":",
        i ? "," : "", c->channel, c->sent, c->send_steps, c->received,
        c->recv_steps);
    if (c->waits_peer < 0) {
      put(t, "null}");
      continue;
    }
    put(t, "{\"peer\":%d,\"direction\":\"%s\",\"transport\":",
        c->waits_peer, c->waits_send ? "send" : "recv");
    put_string(t, c->transport ? c->transport : "");
    put(t, "}}");
  }
  put(t, "]");
}

static void put_entry(text *t, const xcoll_flight_entry *e,
                      const xcoll_comm *comm, xcoll_flight_describe_fn describe,
                      const void *state) {
  xcoll_coll_kind kind = (xcoll_coll_kind)e->kind;
  const char *call = xcoll_coll_name(kind);
  /* A group of one send or recv is that call. */
  if (kind == XCOLL_COLL_GROUP && e->group_calls == 1 && e->group_p2p == 1)
    call = xcoll_coll_name((xcoll_coll_kind)e->p2p[0].kind);
  put(t, "{\"id\":%" PRIu64 ",\"seq\":%" PRIu64 ",\"call\":\"%s\"", e->id,
      e->seq, call);
  if (kind != XCOLL_COLL_BARRIER && kind != XCOLL_COLL_GROUP)
    put(t, ",\"count\":%" PRIu64 ",\"dtype\":\"%s\"", e->count,
        xcoll_datatype_name((xcoll_datatype)e->dtype));
  if (kind != XCOLL_COLL_GROUP && xcoll_coll_has_op(kind))
    put(t, ",\"op\":\"%s\"",
        e->premul ? "premul_sum" : xcoll_op_name((xcoll_op)e->op));
  if (kind != XCOLL_COLL_GROUP && xcoll_coll_has_root(kind))
    put(t, ",\"root\":%d", e->root);
  if (kind == XCOLL_COLL_GROUP) {
    put(t, ",\"group_calls\":%d,\"p2p_calls\":%d,\"p2p\":[", e->group_calls,
        e->group_p2p);
    int kept = e->group_p2p < XCOLL_FLIGHT_GROUP_CALLS ? e->group_p2p
                                                       : XCOLL_FLIGHT_GROUP_CALLS;
    for (int i = 0; i < kept; i++) {
      const xcoll_flight_p2p *p = &e->p2p[i];
      put(t,
          "%s{\"call\":\"%s\",\"peer\":%d,\"count\":%" PRIu64
          ",\"dtype\":\"%s\",\"nth\":%" PRIu64 "}",
          i ? "," : "", xcoll_coll_name((xcoll_coll_kind)p->kind), p->peer,
          p->count, xcoll_datatype_name((xcoll_datatype)p->dtype), p->nth);
    }
    put(t, "]");
    if (e->group_calls == 1 && e->group_p2p == 1)
      put(t, ",\"peer\":%d,\"count\":%" PRIu64 ",\"dtype\":\"%s\"",
          e->p2p[0].peer, e->p2p[0].count,
          xcoll_datatype_name((xcoll_datatype)e->p2p[0].dtype));
  }
  /* A call whose backend has failed as a whole ends with its status, even
   * when the call has not returned yet (core/backend.h's failed_status). */
  int32_t shown = e->state, status = e->status;
  if (comm != NULL && comm->backend->failed_status != NULL &&
      comm->backend_state != NULL &&
      (shown == XCOLL_FLIGHT_QUEUED || shown == XCOLL_FLIGHT_STARTED)) {
    xcoll_status failed = comm->backend->failed_status(comm->backend_state);
    if (failed != XCOLL_SUCCESS) {
      shown = XCOLL_FLIGHT_FAILED;
      status = (int32_t)failed;
    }
  }
  put(t, ",\"state\":\"%s\",\"status\":\"%s\"", state_name(shown),
      xcoll_flight_status_name((xcoll_status)status));
  put(t, ",\"algorithm\":");
  put_string(t, e->algorithm ? e->algorithm : "");
  put(t, ",\"protocol\":");
  put_string(t, e->protocol ? e->protocol : "");
  put(t, ",\"queued_us\":%.3f", e->queued_us);
  if (e->started_us > 0)
    put(t, ",\"started_us\":%.3f", e->started_us);
  if (e->ended_us > 0)
    put(t, ",\"ended_us\":%.3f", e->ended_us);
  /* The host collective running now: where it stands. */
  if (comm != NULL && e->state == XCOLL_FLIGHT_STARTED &&
      atomic_load_explicit(&comm->flight_now.id, memory_order_relaxed) ==
          e->id) {
    const xcoll_flight_now *now = &comm->flight_now;
    put(t,
        ",\"progress\":{\"step\":%u,\"recv_from\":%d,\"send_to\":%d,"
        "\"waiting\":%s}",
        atomic_load_explicit(&now->step, memory_order_relaxed),
        atomic_load_explicit(&now->recv_from, memory_order_relaxed),
        atomic_load_explicit(&now->send_to, memory_order_relaxed),
        atomic_load_explicit(&now->waiting, memory_order_relaxed) ? "true"
                                                                  : "false");
  } else if (e->has_progress) {
    put(t,
        ",\"progress\":{\"step\":%d,\"recv_from\":%d,\"send_to\":%d,"
        "\"waiting\":true}",
        e->step, e->recv_from, e->send_to);
  }
  put_channels(t, e, describe, state);
  put(t, "}");
}

/* comm: the communicator whose host collective and backend ops are
 * described (NULL: describe and state, for tests). */
static void put_entries(text *t, xcoll_flight *flight, const xcoll_comm *comm,
                        xcoll_flight_describe_fn describe, const void *state) {
  if (comm != NULL) {
    describe = comm->backend->describe_op;
    state = comm->backend_state;
  }
  put(t, "[");
  size_t max = flight != NULL ? flight->capacity : 0;
  xcoll_flight_entry *entries = max ? malloc(max * sizeof *entries) : NULL;
  if (max > 0 && entries == NULL) {
    t->failed = 1;
    return;
  }
  size_t n = max ? xcoll_flight_snapshot(flight, entries, max) : 0;
  for (size_t i = 0; i < n; i++) {
    put(t, i ? ",\n  " : "\n  ");
    put_entry(t, &entries[i], comm, describe, state);
  }
  put(t, "]");
  free(entries);
}

char *xcoll_flight_entries_json(xcoll_flight *flight) {
  return xcoll_flight_entries_json_described(flight, NULL, NULL);
}

char *xcoll_flight_entries_json_described(xcoll_flight *flight,
                                          xcoll_flight_describe_fn describe,
                                          const void *state) {
  text t = {0};
  put_entries(&t, flight, NULL, describe, state);
  if (t.failed) {
    free(t.data);
    return NULL;
  }
  return t.data;
}

static void put_dump(text *t, xcoll_comm *comm, const char *reason) {
  char host[256] = "";
  if (gethostname(host, sizeof host) != 0)
    host[0] = '\0';
  host[sizeof host - 1] = '\0';
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  const char *send = comm->backend->name, *recv = comm->backend->name;
  if (comm->backend->transport != NULL && comm->backend_state != NULL)
    comm->backend->transport(comm->backend_state, &send, &recv);
  xcoll_flight *flight = comm->flight;
  uint64_t recorded = 0;
  if (flight != NULL) {
    xcoll_spin_lock(&flight->lock);
    recorded = flight->recorded;
    xcoll_spin_unlock(&flight->lock);
  }
  put(t, "{\"format\":\"%s\",\"version\":%d,\"reason\":", FLIGHT_FORMAT,
      FLIGHT_VERSION);
  put_string(t, reason);
  put(t, ",\n \"job\":");
  char job[300];
  snprintf(job, sizeof job, "%s:%d", comm->master_addr, comm->master_port);
  put_string(t, job);
  put(t,
      ",\"comm_id\":%" PRIu64 ",\"rank\":%d,\"world_size\":%d,"
      "\"local_rank\":%d,\"pid\":%d,\"host\":",
      comm->comm_id, comm->rank, comm->world_size, comm->local_rank,
      (int)getpid());
  put_string(t, host);
  put(t, ",\n \"backend\":");
  put_string(t, comm->backend->name);
  put(t, ",\"transport\":{\"send\":");
  put_string(t, send);
  put(t, ",\"recv\":");
  put_string(t, recv);
  put(t, "},\"device\":%d,\"timeout_s\":%g,", comm->device, comm->timeout_s);
  put(t,
      "\n \"dumped_us\":%.3f,\"wall_time_s\":%lld.%06ld,\"capacity\":%zu,"
      "\"recorded\":%" PRIu64 ",\"next_seq\":%" PRIu64 ",",
      xcoll_time_us(), (long long)wall.tv_sec, wall.tv_nsec / 1000,
      flight != NULL ? flight->capacity : 0, recorded, comm->next_seq);
  int broken = atomic_load(&comm->broken_status);
  put(t, "\n \"broken\":");
  if (broken == XCOLL_SUCCESS) {
    put(t, "null");
  } else {
    char message[XCOLL_ERROR_BYTES];
    pthread_mutex_lock(&comm->error_lock);
    snprintf(message, sizeof message, "%s", comm->broken_message);
    pthread_mutex_unlock(&comm->error_lock);
    put(t, "{\"status\":\"%s\",\"message\":",
        xcoll_flight_status_name((xcoll_status)broken));
    put_string(t, message);
    put(t, "}");
  }
  put(t, ",\n \"p2p_counts\":[");
  int first = 1;
  if (flight != NULL && flight->world_size > 0) {
    xcoll_spin_lock(&flight->lock);
    for (int p = 0; p < flight->world_size; p++)
      if (flight->sends[p] || flight->recvs[p]) {
        put(t,
            "%s{\"peer\":%d,\"sends\":%" PRIu64 ",\"recvs\":%" PRIu64 "}",
            first ? "" : ",", p, flight->sends[p], flight->recvs[p]);
        first = 0;
      }
    xcoll_spin_unlock(&flight->lock);
  }
  put(t, "],\n \"entries\":");
  put_entries(t, flight, comm, NULL, NULL);
  put(t, "}\n");
}

/* ---- writing a dump ---- */

/* Errors are recorded on comm (NULL: the thread's message only). */
static xcoll_status write_file(xcoll_comm *comm, const char *path,
                               const text *t) {
  char tmp[4096];
  static _Atomic unsigned counter;
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", path, (int)getpid(),
                   atomic_fetch_add(&counter, 1));
  if (n < 0 || (size_t)n >= sizeof tmp)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_dump: path '%s' is too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                       "xcoll_comm_dump: cannot create %s: %s", tmp,
                       strerror(errno));
  size_t done = 0;
  while (done < t->used) {
    ssize_t w = write(fd, t->data + done, t->used - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int err = errno;
      close(fd);
      unlink(tmp);
      return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                         "xcoll_comm_dump: cannot write %s: %s", tmp,
                         strerror(err));
    }
    done += (size_t)w;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                       "xcoll_comm_dump: cannot write %s: %s", path,
                       strerror(err));
  }
  return XCOLL_SUCCESS;
}

/* The default path in XCOLL_FLIGHT_RECORDER_DIR; 0 when unset. */
static int default_path(const xcoll_comm *comm, char *out, size_t bytes) {
  const char *dir = xcoll_env_str("XCOLL_FLIGHT_RECORDER_DIR");
  if (dir == NULL || dir[0] == '\0')
    return 0;
  int n = snprintf(out, bytes, "%s/xcoll_fr.c%" PRIu64 ".r%d.json", dir,
                   comm->comm_id, comm->rank);
  return n > 0 && (size_t)n < bytes;
}

/* comm's dump to path; errors recorded on error_comm (NULL: the thread's
 * message only, so that an automatic dump keeps the comm's error). */
static xcoll_status dump_to(xcoll_comm *comm, const char *path,
                            const char *reason, xcoll_comm *error_comm) {
  text t = {0};
  put_dump(&t, comm, reason);
  xcoll_status status = XCOLL_SUCCESS;
  if (t.failed)
    status = xcoll_error(error_comm, XCOLL_ERR_NO_MEMORY,
                         "xcoll_comm_dump: out of memory formatting the dump");
  else
    status = write_file(error_comm, path, &t);
  free(t.data);
  return status;
}

xcoll_status xcoll_flight_dump(xcoll_comm *comm, const char *path,
                               const char *reason) {
  char buffer[4096];
  if (path == NULL) {
    if (!default_path(comm, buffer, sizeof buffer))
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_comm_dump: path is NULL and "
                         "XCOLL_FLIGHT_RECORDER_DIR is not set (or too long)");
    path = buffer;
  }
  return dump_to(comm, path, reason, comm);
}

void xcoll_flight_on_broken(xcoll_comm *comm, xcoll_status status) {
  const char *reason = status == XCOLL_ERR_TIMEOUT    ? "timeout"
                       : status == XCOLL_ERR_PROTOCOL ? "protocol"
                       : status == XCOLL_ERR_REMOTE   ? "remote"
                                                      : NULL;
  if (reason == NULL)
    return;
  char path[4096];
  if (!default_path(comm, path, sizeof path)) {
    XCOLL_INFO("flight recorder: comm %" PRIu64 " rank %d broke (%s); set "
               "XCOLL_FLIGHT_RECORDER_DIR to keep a dump of its last calls",
               comm->comm_id, comm->rank, reason);
    return;
  }
  /* The caller's error message stays the one the user sees. */
  char keep[XCOLL_ERROR_BYTES];
  snprintf(keep, sizeof keep, "%s", xcoll_last_error());
  if (dump_to(comm, path, reason, NULL) == XCOLL_SUCCESS)
    XCOLL_WARN("flight recorder: comm %" PRIu64 " rank %d: %s: wrote %s",
               comm->comm_id, comm->rank, reason, path);
  else
    xcoll_error_quiet(NULL, status, "%s", keep);
}

/* ---- SIGUSR1 and the list of recorders ---- */

static pthread_mutex_t recorders_lock = PTHREAD_MUTEX_INITIALIZER;
static xcoll_flight *recorders;
static sem_t signal_sem;
static int signal_state; /* 0 not tried, 1 installed, -1 refused */

static void on_sigusr1(int sig) {
  (void)sig;
  int saved = errno;
  sem_post(&signal_sem); /* async-signal-safe (POSIX) */
  errno = saved;
}

static void *signal_main(void *arg) {
  (void)arg;
  for (;;) {
    if (sem_wait(&signal_sem) != 0)
      continue; /* EINTR */
    pthread_mutex_lock(&recorders_lock);
    for (xcoll_flight *f = recorders; f != NULL; f = f->next) {
      /* A communicator still connecting has no backend state to read. */
      char path[4096];
      if (atomic_load(&f->ready) && default_path(f->comm, path, sizeof path) &&
          dump_to(f->comm, path, "signal", NULL) == XCOLL_SUCCESS)
        XCOLL_WARN("flight recorder: comm %" PRIu64 " rank %d: SIGUSR1: "
                   "wrote %s",
                   f->comm->comm_id, f->comm->rank, path);
    }
    pthread_mutex_unlock(&recorders_lock);
  }
  return NULL;
}

/* Called under recorders_lock, once. */
static void install_signal(void) {
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) != 0 ||
      ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler != SIG_DFL &&
       old.sa_handler != SIG_IGN) ||
      (old.sa_flags & SA_SIGINFO) != 0) {
    XCOLL_WARN("XCOLL_FLIGHT_RECORDER_SIGNAL=1: SIGUSR1 already has a "
               "handler; leaving it alone (dump with xcoll_comm_dump)");
    signal_state = -1;
    return;
  }
  if (sem_init(&signal_sem, 0, 0) != 0) {
    signal_state = -1;
    return;
  }
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* The dump thread never takes SIGUSR1 itself: a dump in progress is not
   * interrupted. Other signals keep their mask. */
  sigset_t block, saved;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &saved);
  int rc = pthread_create(&thread, &attr, signal_main, NULL);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    XCOLL_WARN("XCOLL_FLIGHT_RECORDER_SIGNAL=1: cannot start the dump "
               "thread: %s",
               strerror(rc));
    signal_state = -1;
    return;
  }
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, NULL);
  signal_state = 1;
}

xcoll_status xcoll_flight_open(xcoll_comm *comm) {
  long entries = XCOLL_FLIGHT_DEFAULT_ENTRIES, with_signal = 0;
  xcoll_status status = xcoll_param_int("XCOLL_FLIGHT_RECORDER", &entries);
  if (status == XCOLL_SUCCESS)
    status = xcoll_param_int("XCOLL_FLIGHT_RECORDER_SIGNAL", &with_signal);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);
  xcoll_flight *flight = xcoll_flight_new((size_t)entries, comm->world_size);
  if (flight == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "cannot allocate the flight recorder (%ld entries of "
                       "%zu bytes; XCOLL_FLIGHT_RECORDER)",
                       entries, sizeof(xcoll_flight_entry));
  flight->comm = comm;
  atomic_store(&comm->flight_now.recv_from, -1);
  atomic_store(&comm->flight_now.send_to, -1);
  comm->flight = flight;
  pthread_mutex_lock(&recorders_lock);
  if (with_signal && signal_state == 0)
    install_signal();
  flight->next = recorders;
  recorders = flight;
  pthread_mutex_unlock(&recorders_lock);
  return XCOLL_SUCCESS;
}

void xcoll_flight_ready(xcoll_comm *comm) {
  if (comm->flight != NULL)
    atomic_store(&comm->flight->ready, 1);
}

void xcoll_flight_close(xcoll_comm *comm) {
  xcoll_flight *flight = comm->flight;
  if (flight == NULL)
    return;
  pthread_mutex_lock(&recorders_lock);
  for (xcoll_flight **link = &recorders; *link != NULL; link = &(*link)->next)
    if (*link == flight) {
      *link = flight->next;
      break;
    }
  comm->flight = NULL;
  pthread_mutex_unlock(&recorders_lock);
  xcoll_flight_free(flight);
}
