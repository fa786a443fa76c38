/* test_dispatch.c - core/dispatch.c with a fake device-driven backend (ABI 3):
 * supported calls are started on the issuing thread in issue order and
 * completed through their request; unsupported ones run on core's host path;
 * the two never overlap; failures are wrapped and break the communicator. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "dispatch.h"
#include "error.h"
#include "request.h"
#include "xcoll.h"

/* The fake backend takes calls of at least DEVICE_COUNT elements. Its ops
 * complete when waited on, or when tested after `ready` was set. */
#define DEVICE_COUNT 100
#define MAX_EVENTS 64

struct xcoll_backend_op {
  uint64_t seq;
  int ready;
};

typedef struct fake_state {
  pthread_t issuer;
  int started_on_issuer; /* every start ran on the issuing thread */
  char events[MAX_EVENTS][32];
  int nevents;
  xcoll_status fail_with; /* status wait/test return (SUCCESS normally) */
  struct xcoll_backend_op ops[MAX_EVENTS];
  int nops;
} fake_state;

static xcoll_comm *the_comm;

static void record(fake_state *st, const char *what, uint64_t seq) {
  if (st->nevents < MAX_EVENTS)
    snprintf(st->events[st->nevents++], sizeof st->events[0], "%s %llu", what,
             (unsigned long long)seq);
}

static int fake_supports(void *state, const xcoll_coll_args *args) {
  (void)state;
  return args->count >= DEVICE_COUNT;
}

static xcoll_status fake_start(xcoll_comm *comm, void *state,
                               const xcoll_coll_args *args,
                               xcoll_backend_op **op) {
  (void)comm;
  fake_state *st = state;
  if (!pthread_equal(pthread_self(), st->issuer))
    st->started_on_issuer = 0;
  record(st, "start", args->seq);
  *op = &st->ops[st->nops++];
  (*op)->seq = args->seq;
  (*op)->ready = 0;
  return XCOLL_SUCCESS;
}

static xcoll_status fake_finish(fake_state *st, xcoll_backend_op *op) {
  record(st, "done", op->seq);
  if (st->fail_with != XCOLL_SUCCESS)
    return xcoll_error(the_comm, st->fail_with, "fake: peer rank 1 vanished");
  return XCOLL_SUCCESS;
}

static xcoll_status fake_test(void *state, xcoll_backend_op *op, int *done) {
  *done = op->ready;
  return op->ready ? fake_finish(state, op) : XCOLL_SUCCESS;
}

static xcoll_status fake_wait(void *state, xcoll_backend_op *op) {
  return fake_finish(state, op);
}

static const xcoll_backend_coll_ops fake_coll = {
    .supports = fake_supports,
    .start = fake_start,
    .test = fake_test,
    .wait = fake_wait,
};
static const xcoll_backend fake_backend = {
    .abi_version = XCOLL_BACKEND_ABI_VERSION,
    .name = "fake_device",
    .description = "records ABI 3 calls",
    .coll = &fake_coll,
};

static fake_state state;

static int setup(void **unused) {
  (void)unused;
  memset(&state, 0, sizeof state);
  state.issuer = pthread_self();
  state.started_on_issuer = 1;
  xcoll_comm *comm = calloc(1, sizeof *comm);
  comm->magic = XCOLL_COMM_MAGIC;
  comm->rank = 0;
  comm->world_size = 1; /* host calls take the local-copy path: no p2p */
  comm->timeout_s = 10;
  comm->backend = &fake_backend;
  comm->backend_state = &state;
  pthread_mutex_init(&comm->error_lock, NULL);
  assert_int_equal(xcoll_queue_create(comm, xcoll_coll_run), XCOLL_SUCCESS);
  the_comm = comm;
  return 0;
}

static int teardown(void **unused) {
  (void)unused;
  xcoll_dispatch_quiesce(the_comm);
  xcoll_queue_destroy(the_comm);
  pthread_mutex_destroy(&the_comm->error_lock);
  free(the_comm);
  return 0;
}

static void test_blocking_device_call(void **unused) {
  (void)unused;
  float buf[DEVICE_COUNT] = {0};
  assert_int_equal(xcoll_allreduce(buf, buf, DEVICE_COUNT, XCOLL_FLOAT32,
                                   XCOLL_SUM, the_comm),
                   XCOLL_SUCCESS);
  assert_int_equal(state.nevents, 2);
  assert_string_equal(state.events[0], "start 0");
  assert_string_equal(state.events[1], "done 0");
  assert_true(state.started_on_issuer);
}

/* Three non-blocking device calls start in issue order on the issuing thread
 * before anything completes; a host call then waits for all three. */
static void test_order_device_then_host(void **unused) {
  (void)unused;
  float big[DEVICE_COUNT] = {0}, small_in[4] = {1, 2, 3, 4}, small_out[4];
  xcoll_request_t r[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(xcoll_iallreduce(big, big, DEVICE_COUNT, XCOLL_FLOAT32,
                                      XCOLL_SUM, the_comm, NULL, &r[i]),
                     XCOLL_SUCCESS);
  assert_int_equal(state.nevents, 3);
  assert_string_equal(state.events[0], "start 0");
  assert_string_equal(state.events[1], "start 1");
  assert_string_equal(state.events[2], "start 2");
  /* Not ready yet: test says not done and completes nothing. */
  int done = 1;
  assert_int_equal(xcoll_test(r[1], &done), XCOLL_SUCCESS);
  assert_int_equal(done, 0);
  assert_int_equal(state.nevents, 3);

  /* The host call runs only after the three device calls completed. */
  assert_int_equal(xcoll_allreduce(small_in, small_out, 4, XCOLL_FLOAT32,
                                   XCOLL_SUM, the_comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(small_out, small_in, sizeof small_in);
  assert_int_equal(state.nevents, 6);
  assert_string_equal(state.events[3], "done 0");
  assert_string_equal(state.events[4], "done 1");
  assert_string_equal(state.events[5], "done 2");
  /* Their requests keep their status for the caller; no second wait. */
  for (int i = 0; i < 3; i++)
    assert_int_equal(xcoll_wait(r[i]), XCOLL_SUCCESS);
  assert_int_equal(state.nevents, 6);
  assert_true(state.started_on_issuer);
}

static void test_test_completes(void **unused) {
  (void)unused;
  float big[DEVICE_COUNT] = {0};
  xcoll_request_t r;
  assert_int_equal(xcoll_ibroadcast(big, big, DEVICE_COUNT, XCOLL_FLOAT32, 0,
                                    the_comm, NULL, &r),
                   XCOLL_SUCCESS);
  state.ops[0].ready = 1;
  int done = 0;
  assert_int_equal(xcoll_test(r, &done), XCOLL_SUCCESS);
  assert_int_equal(done, 1);
  assert_int_equal(xcoll_wait(r), XCOLL_SUCCESS);
  assert_int_equal(state.nevents, 2); /* start, done: exactly once */
}

static void test_failure_is_wrapped_and_breaks(void **unused) {
  (void)unused;
  float big[DEVICE_COUNT] = {0};
  state.fail_with = XCOLL_ERR_REMOTE;
  assert_int_equal(xcoll_allreduce(big, big, DEVICE_COUNT, XCOLL_FLOAT32,
                                   XCOLL_SUM, the_comm),
                   XCOLL_ERR_REMOTE);
  const char *message = xcoll_comm_last_error(the_comm);
  assert_non_null(strstr(message, "allreduce seq 0"));
  assert_non_null(strstr(message, "fake_device"));
  assert_non_null(strstr(message, "peer rank 1 vanished"));
  /* Broken: the next call fails at once without reaching the backend. */
  int before = state.nevents;
  assert_int_equal(xcoll_allreduce(big, big, DEVICE_COUNT, XCOLL_FLOAT32,
                                   XCOLL_SUM, the_comm),
                   XCOLL_ERR_REMOTE);
  assert_int_equal(state.nevents, before);
}

static void test_stream_on_host_call(void **unused) {
  (void)unused;
  float small[4] = {0};
  xcoll_request_t r = NULL;
  assert_int_equal(xcoll_iallreduce(small, small, 4, XCOLL_FLOAT32, XCOLL_SUM,
                                    the_comm, (xcoll_stream_t)small, &r),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_null(r);
  assert_non_null(strstr(xcoll_comm_last_error(the_comm), "stream"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_blocking_device_call, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_order_device_then_host, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_test_completes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failure_is_wrapped_and_breaks,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_on_host_call, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
