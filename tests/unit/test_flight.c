/* test_flight.c - the flight recorder's ring buffer (core/flight.h):
 * wraparound keeps the last N calls in order, states move queued ->
 * started -> completed/failed and never back, an id that left the ring is
 * ignored, groups count sends and receives per peer, the entries format as
 * JSON the documented way (with a device backend's channels), and writers
 * on two threads against a reader (run under ASan/UBSan and TSan with the
 * unit label). Also the cost of
 * one call's three hooks, printed for docs/flight-recorder.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <pthread.h>

#include "backend.h"
#include "flight.h"
#include "group.h"
#include "trace.h"

static xcoll_coll_args allreduce_args(uint64_t seq, size_t count) {
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = XCOLL_COLL_ALLREDUCE;
  args.count = count;
  args.dtype = XCOLL_FLOAT32;
  args.op = XCOLL_SUM;
  args.seq = seq;
  return args;
}

static void test_wraparound(void **state) {
  (void)state;
  xcoll_flight *flight = xcoll_flight_new(4, 2);
  assert_non_null(flight);
  xcoll_flight_entry entries[8];
  assert_int_equal(xcoll_flight_snapshot(flight, entries, 8), 0);
  for (uint64_t seq = 0; seq < 10; seq++) {
    xcoll_coll_args args = allreduce_args(seq, 100 + seq);
    uint64_t id = xcoll_flight_record_in(flight, &args);
    assert_int_equal(id, seq + 1);
    xcoll_flight_start_in(flight, id, "ring", "p2p");
    xcoll_flight_end_in(flight, id, XCOLL_SUCCESS);
  }
  size_t n = xcoll_flight_snapshot(flight, entries, 8);
  assert_int_equal(n, 4); /* the last 4 of 10, oldest first */
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(entries[i].id, 7 + i);
    assert_int_equal(entries[i].seq, 6 + i);
    assert_int_equal(entries[i].count, 106 + i);
    assert_int_equal(entries[i].state, XCOLL_FLIGHT_COMPLETED);
    assert_string_equal(entries[i].algorithm, "ring");
    assert_true(entries[i].queued_us <= entries[i].started_us);
    assert_true(entries[i].started_us <= entries[i].ended_us);
  }
  /* A snapshot smaller than the ring takes the newest. */
  n = xcoll_flight_snapshot(flight, entries, 2);
  assert_int_equal(n, 2);
  assert_int_equal(entries[0].id, 9);
  assert_int_equal(entries[1].id, 10);
  xcoll_flight_free(flight);
}

static void test_states(void **state) {
  (void)state;
  xcoll_flight *flight = xcoll_flight_new(2, 0);
  xcoll_coll_args args = allreduce_args(0, 8);
  uint64_t a = xcoll_flight_record_in(flight, &args);
  xcoll_flight_entry e[2];
  xcoll_flight_snapshot(flight, e, 2);
  assert_int_equal(e[0].state, XCOLL_FLIGHT_QUEUED);
  assert_int_equal(e[0].status, XCOLL_IN_PROGRESS);
  assert_null(e[0].algorithm);
  /* A call may fail before it starts (dispatch refused it). */
  args.seq = 1;
  uint64_t b = xcoll_flight_record_in(flight, &args);
  xcoll_flight_end_in(flight, b, XCOLL_ERR_NOT_SUPPORTED);
  xcoll_flight_start_in(flight, b, "ring", "p2p"); /* too late: ignored */
  xcoll_flight_start_in(flight, a, "ring", "p2p");
  xcoll_flight_snapshot(flight, e, 2);
  assert_int_equal(e[0].state, XCOLL_FLIGHT_STARTED);
  assert_int_equal(e[1].state, XCOLL_FLIGHT_FAILED);
  assert_int_equal(e[1].status, XCOLL_ERR_NOT_SUPPORTED);
  assert_null(e[1].algorithm);
  xcoll_flight_end_in(flight, a, XCOLL_ERR_TIMEOUT);
  xcoll_flight_end_in(flight, a, XCOLL_SUCCESS); /* ended once only */
  xcoll_flight_snapshot(flight, e, 2);
  assert_int_equal(e[0].state, XCOLL_FLIGHT_FAILED);
  assert_int_equal(e[0].status, XCOLL_ERR_TIMEOUT);
  /* Two more calls push a out; ending it then touches nothing. */
  args.seq = 2;
  uint64_t c = xcoll_flight_record_in(flight, &args);
  args.seq = 3;
  xcoll_flight_record_in(flight, &args);
  xcoll_flight_end_in(flight, a, XCOLL_SUCCESS);
  xcoll_flight_end_in(flight, 0, XCOLL_SUCCESS);
  xcoll_flight_snapshot(flight, e, 2);
  assert_int_equal(e[0].id, c);
  assert_int_equal(e[0].state, XCOLL_FLIGHT_QUEUED);
  assert_int_equal(e[1].state, XCOLL_FLIGHT_QUEUED);
  assert_string_equal(xcoll_flight_status_name(XCOLL_ERR_TIMEOUT), "TIMEOUT");
  xcoll_flight_free(flight);
}

/* A recorder of 0 entries keeps nothing but still counts sends/recvs. */
static void test_groups_and_empty(void **state) {
  (void)state;
  xcoll_flight *flight = xcoll_flight_new(0, 4);
  assert_non_null(flight);
  xcoll_group_op ops[3];
  memset(ops, 0, sizeof ops);
  ops[0].args.kind = XCOLL_COLL_SEND;
  ops[0].args.peer = 1;
  ops[1].args.kind = XCOLL_COLL_RECV;
  ops[1].args.peer = 3;
  ops[2].args.kind = XCOLL_COLL_SEND;
  ops[2].args.peer = 1;
  struct xcoll_group_ops group = {.count = 3, .capacity = 3, .ops = ops, .p2p = 3};
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = XCOLL_COLL_GROUP;
  args.group = &group;
  args.count = 3;
  assert_int_equal(xcoll_flight_record_in(flight, &args), 1);
  xcoll_flight_entry e[1];
  assert_int_equal(xcoll_flight_snapshot(flight, e, 1), 0);
  xcoll_flight_free(flight);

  flight = xcoll_flight_new(3, 4);
  xcoll_flight_record_in(flight, &args);
  xcoll_flight_record_in(flight, &args);
  xcoll_flight_entry g[2];
  assert_int_equal(xcoll_flight_snapshot(flight, g, 2), 2);
  assert_int_equal(g[1].group_calls, 3);
  assert_int_equal(g[1].group_p2p, 3);
  assert_int_equal(g[1].p2p[0].peer, 1);
  assert_int_equal(g[1].p2p[0].nth, 2); /* the 3rd send to rank 1 */
  assert_int_equal(g[1].p2p[1].nth, 1); /* the 2nd recv from rank 3 */
  assert_int_equal(g[1].p2p[2].nth, 3);

  char *json = xcoll_flight_entries_json(flight);
  assert_non_null(json);
  cJSON *entries = cJSON_Parse(json);
  assert_non_null(entries);
  assert_int_equal(cJSON_GetArraySize(entries), 2);
  cJSON *last = cJSON_GetArrayItem(entries, 1);
  assert_string_equal(cJSON_GetObjectItem(last, "call")->valuestring, "group");
  assert_string_equal(cJSON_GetObjectItem(last, "state")->valuestring, "queued");
  cJSON *p2p = cJSON_GetObjectItem(last, "p2p");
  assert_int_equal(cJSON_GetArraySize(p2p), 3);
  assert_string_equal(
      cJSON_GetObjectItem(cJSON_GetArrayItem(p2p, 1), "call")->valuestring,
      "recv");
  cJSON_Delete(entries);
  free(json);
  xcoll_flight_free(flight);
}

static void test_json_entry(void **state) {
  (void)state;
  xcoll_flight *flight = xcoll_flight_new(8, 2);
  xcoll_coll_args args = allreduce_args(5, 4096);
  uint64_t id = xcoll_flight_record_in(flight, &args);
  xcoll_flight_start_in(flight, id, "recursive_doubling", "p2p");
  args.kind = XCOLL_COLL_BROADCAST;
  args.root = 1;
  args.seq = 6;
  id = xcoll_flight_record_in(flight, &args);
  xcoll_flight_end_in(flight, id, XCOLL_ERR_REMOTE);
  char *json = xcoll_flight_entries_json(flight);
  cJSON *entries = cJSON_Parse(json);
  assert_non_null(entries);
  cJSON *a = cJSON_GetArrayItem(entries, 0), *b = cJSON_GetArrayItem(entries, 1);
  assert_int_equal(cJSON_GetObjectItem(a, "seq")->valueint, 5);
  assert_string_equal(cJSON_GetObjectItem(a, "call")->valuestring, "allreduce");
  assert_int_equal(cJSON_GetObjectItem(a, "count")->valueint, 4096);
  assert_string_equal(cJSON_GetObjectItem(a, "dtype")->valuestring, "float32");
  assert_string_equal(cJSON_GetObjectItem(a, "op")->valuestring, "sum");
  assert_string_equal(cJSON_GetObjectItem(a, "state")->valuestring, "started");
  assert_string_equal(cJSON_GetObjectItem(a, "algorithm")->valuestring,
                      "recursive_doubling");
  assert_null(cJSON_GetObjectItem(a, "ended_us"));
  assert_int_equal(cJSON_GetObjectItem(b, "root")->valueint, 1);
  assert_null(cJSON_GetObjectItem(b, "op"));
  assert_string_equal(cJSON_GetObjectItem(b, "state")->valuestring, "failed");
  assert_string_equal(cJSON_GetObjectItem(b, "status")->valuestring, "REMOTE");
  cJSON_Delete(entries);
  free(json);
  xcoll_flight_free(flight);
}

/* A device-driven backend's describe_op (core/backend.h) for every id:
 * channel 0 waits for data from rank 3 over NET, channel 1 on nothing. */
static int fake_describe(const void *state, uint64_t flight_id,
                         xcoll_backend_channel *out, int max) {
  assert_string_equal((const char *)state, "backend state");
  assert_true(max >= 2);
  memset(out, 0, 2 * sizeof *out);
  out[0] = (xcoll_backend_channel){.channel = 0, .sent = 5, .send_steps = 88,
                                   .received = (uint64_t)flight_id,
                                   .recv_steps = 88, .waits_peer = 3,
                                   .waits_send = 0, .transport = "NET"};
  out[1] = (xcoll_backend_channel){.channel = 1, .sent = 88, .send_steps = 88,
                                   .received = 88, .recv_steps = 88,
                                   .waits_peer = -1};
  return 2;
}

/* Started and failed entries carry the backend's channels (the format of
 * docs/flight-recorder.md); queued and completed ones do not. */
static void test_json_channels(void **state) {
  (void)state;
  xcoll_flight *flight = xcoll_flight_new(8, 4);
  xcoll_coll_args args = allreduce_args(0, 1 << 20);
  uint64_t started = xcoll_flight_record_in(flight, &args);
  xcoll_flight_start_in(flight, started, "ring", "simple");
  uint64_t completed = xcoll_flight_record_in(flight, &args);
  xcoll_flight_start_in(flight, completed, "ring", "simple");
  xcoll_flight_end_in(flight, completed, XCOLL_SUCCESS);
  uint64_t failed = xcoll_flight_record_in(flight, &args);
  xcoll_flight_start_in(flight, failed, "ring", "simple");
  xcoll_flight_end_in(flight, failed, XCOLL_ERR_TIMEOUT);
  xcoll_flight_record_in(flight, &args); /* queued */
  char *json = xcoll_flight_entries_json_described(flight, fake_describe,
                                                   "backend state");
  cJSON *entries = cJSON_Parse(json);
  assert_non_null(entries);
  assert_int_equal(cJSON_GetArraySize(entries), 4);
  for (int i = 0; i < 4; i++) {
    cJSON *e = cJSON_GetArrayItem(entries, i);
    cJSON *channels = cJSON_GetObjectItem(e, "channels");
    if (i == 1 || i == 3) {
      assert_null(channels);
      continue;
    }
    assert_int_equal(cJSON_GetArraySize(channels), 2);
    cJSON *c0 = cJSON_GetArrayItem(channels, 0);
    assert_int_equal(cJSON_GetObjectItem(c0, "channel")->valueint, 0);
    assert_int_equal(cJSON_GetObjectItem(c0, "sent")->valueint, 5);
    assert_int_equal(cJSON_GetObjectItem(c0, "send_steps")->valueint, 88);
    assert_int_equal(cJSON_GetObjectItem(c0, "received")->valueint,
                     cJSON_GetObjectItem(e, "id")->valueint);
    assert_int_equal(cJSON_GetObjectItem(c0, "recv_steps")->valueint, 88);
    cJSON *w = cJSON_GetObjectItem(c0, "waits_on");
    assert_int_equal(cJSON_GetObjectItem(w, "peer")->valueint, 3);
    assert_string_equal(cJSON_GetObjectItem(w, "direction")->valuestring,
                        "recv");
    assert_string_equal(cJSON_GetObjectItem(w, "transport")->valuestring,
                        "NET");
    cJSON *c1 = cJSON_GetArrayItem(channels, 1);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c1, "waits_on")));
  }
  cJSON_Delete(entries);
  free(json);
  /* Without a describer, no channels. */
  json = xcoll_flight_entries_json(flight);
  assert_null(strstr(json, "\"channels\""));
  free(json);
  xcoll_flight_free(flight);
}

/* Two writers (an issuing thread and a progress thread, as in core) and a
 * reader taking snapshots: every snapshot is in id order with no torn
 * entry (each entry's count equals its seq). */
enum { RACE_CALLS = 20000 };
static xcoll_flight *race_flight;
static _Atomic uint64_t race_issued;

static void *race_issuer(void *arg) {
  (void)arg;
  for (uint64_t seq = 0; seq < RACE_CALLS; seq++) {
    xcoll_coll_args args = allreduce_args(seq, seq);
    xcoll_flight_record_in(race_flight, &args);
    atomic_store(&race_issued, seq + 1);
  }
  return NULL;
}
static void *race_progress(void *arg) {
  (void)arg;
  for (uint64_t id = 1; id <= RACE_CALLS; id++) {
    while (atomic_load(&race_issued) < id) {
    }
    xcoll_flight_start_in(race_flight, id, "ring", "p2p");
    xcoll_flight_end_in(race_flight, id, XCOLL_SUCCESS);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  race_flight = xcoll_flight_new(64, 2);
  atomic_store(&race_issued, 0);
  pthread_t a, b;
  pthread_create(&a, NULL, race_issuer, NULL);
  pthread_create(&b, NULL, race_progress, NULL);
  xcoll_flight_entry entries[64];
  int snapshots = 0;
  while (atomic_load(&race_issued) < RACE_CALLS || snapshots < 10) {
    size_t n = xcoll_flight_snapshot(race_flight, entries, 64);
    for (size_t i = 0; i < n; i++) {
      assert_int_equal(entries[i].count, entries[i].seq);
      assert_int_equal(entries[i].id, entries[i].seq + 1);
      if (i > 0)
        assert_int_equal(entries[i].id, entries[i - 1].id + 1);
    }
    snapshots++;
  }
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  size_t n = xcoll_flight_snapshot(race_flight, entries, 64);
  assert_int_equal(n, 64);
  assert_int_equal(entries[63].id, RACE_CALLS);
  assert_int_equal(entries[63].state, XCOLL_FLIGHT_COMPLETED);
  xcoll_flight_free(race_flight);
}

/* What the three hooks of one call cost on this machine (for the docs'
 * figure): record, start, end, as dispatch.c makes them. */
/* Each state's time in a snapshot lies between xcoll_time_us readings
 * taken just before and after the hook (within 5 us: the conversion of the
 * recorder's clock), for calls a few milliseconds apart, so that the
 * counter's rate is measured over an interval. */
static void test_times(void **state) {
  (void)state;
  enum { CALLS = 4 };
  xcoll_flight *flight = xcoll_flight_new(16, 2);
  assert_non_null(flight);
  double lo[CALLS][3], hi[CALLS][3];
  for (int i = 0; i < CALLS; i++) {
    xcoll_coll_args args = allreduce_args((uint64_t)i, 2);
    lo[i][0] = xcoll_time_us();
    uint64_t id = xcoll_flight_record_in(flight, &args);
    hi[i][0] = lo[i][1] = xcoll_time_us();
    xcoll_flight_start_in(flight, id, "ring", "p2p");
    hi[i][1] = lo[i][2] = xcoll_time_us();
    xcoll_flight_end_in(flight, id, XCOLL_SUCCESS);
    hi[i][2] = xcoll_time_us();
    /* The next call 2 ms later (the gap is the point, not an order). */
    double until = xcoll_time_us() + 2000.0;
    while (xcoll_time_us() < until)
      ;
  }
  xcoll_flight_entry entries[CALLS];
  assert_int_equal(xcoll_flight_snapshot(flight, entries, CALLS), CALLS);
  for (int i = 0; i < CALLS; i++) {
    double got[3] = {entries[i].queued_us, entries[i].started_us,
                     entries[i].ended_us};
    for (int k = 0; k < 3; k++) {
      if (got[k] < lo[i][k] - 5.0 || got[k] > hi[i][k] + 5.0)
        fail_msg("call %d state %d at %.3f us, outside [%.3f, %.3f]", i, k,
                 got[k], lo[i][k], hi[i][k]);
    }
  }
  xcoll_flight_free(flight);
}

static void test_cost(void **state) {
  (void)state;
  xcoll_flight *flight = xcoll_flight_new(XCOLL_FLIGHT_DEFAULT_ENTRIES, 2);
  enum { CALLS = 200000 };
  xcoll_coll_args args = allreduce_args(0, 2);
  double start = xcoll_time_us();
  for (int i = 0; i < CALLS; i++) {
    args.seq = (uint64_t)i;
    uint64_t id = xcoll_flight_record_in(flight, &args);
    xcoll_flight_start_in(flight, id, "ring", "p2p");
    xcoll_flight_end_in(flight, id, XCOLL_SUCCESS);
  }
  double per_call_ns = (xcoll_time_us() - start) * 1e3 / CALLS;
  printf("flight recorder: %.0f ns per call (record + start + end, %d "
         "entries)\n",
         per_call_ns, XCOLL_FLIGHT_DEFAULT_ENTRIES);
  xcoll_flight_free(flight);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wraparound),  cmocka_unit_test(test_states),
      cmocka_unit_test(test_groups_and_empty), cmocka_unit_test(test_json_entry),
      cmocka_unit_test(test_json_channels),
      cmocka_unit_test(test_threads),     cmocka_unit_test(test_times),
      cmocka_unit_test(test_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
