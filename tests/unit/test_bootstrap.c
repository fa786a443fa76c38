/* test_bootstrap.c - the store allgather (core/bootstrap.c): four ranks, one
 * thread each with its own store client, get every rank's record in rank
 * order; variable-size records come back with their sizes; a record of the
 * wrong size is a PROTOCOL error naming the rank; a rank that never
 * publishes is a TIMEOUT; bad arguments are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "comm.h"
#include "store.h"

#define WORLD 4

typedef struct fixture {
  xcoll_store_server *server;
  int port;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(
      xcoll_store_server_start("127.0.0.1", 0, &f->server, &f->port),
      XCOLL_SUCCESS);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  xcoll_store_server_stop(f->server);
  free(f);
  return 0;
}

/* The fields of a communicator that bootstrap uses, and nothing else. */
static xcoll_comm *fake_comm(const fixture *f, int rank, int world_size,
                             const char *prefix, double timeout_s) {
  xcoll_comm *comm = calloc(1, sizeof *comm);
  assert_non_null(comm);
  comm->magic = XCOLL_COMM_MAGIC; /* so that errors are recorded in it */
  comm->rank = rank;
  comm->world_size = world_size;
  comm->timeout_s = timeout_s;
  pthread_mutex_init(&comm->error_lock, NULL);
  snprintf(comm->store_prefix, sizeof comm->store_prefix, "%s", prefix);
  assert_int_equal(
      xcoll_store_connect("127.0.0.1", f->port, 10.0, &comm->store),
      XCOLL_SUCCESS);
  xcoll_store_set_timeout(comm->store, timeout_s);
  return comm;
}

static void free_comm(xcoll_comm *comm) {
  xcoll_store_close(comm->store);
  pthread_mutex_destroy(&comm->error_lock);
  free(comm);
}

/* What rank r contributes: 24 bytes that differ per rank and per byte. */
static void record_of(int rank, unsigned char *out) {
  for (int i = 0; i < 24; i++) out[i] = (unsigned char)(rank * 37 + i * 5 + 1);
}

typedef struct rank_args {
  const fixture *f;
  int rank;
  xcoll_status fixed_status, var_status;
  unsigned char all[WORLD * 24];
  void **values;
  size_t *sizes;
} rank_args;

static void *rank_main(void *arg) {
  rank_args *a = arg;
  xcoll_comm *comm = fake_comm(a->f, a->rank, WORLD, "c5/", 20.0);
  unsigned char mine[24];
  record_of(a->rank, mine);
  a->fixed_status = xcoll_bootstrap_allgather(comm, "fixed", mine, 24, a->all);
  /* rank r's variable record: r + 1 copies of the byte 'a' + r */
  char var[WORLD + 1];
  memset(var, 'a' + a->rank, sizeof var);
  a->var_status = xcoll_bootstrap_allgatherv(comm, "var", var,
                                             (size_t)a->rank + 1, 64,
                                             &a->values, &a->sizes);
  free_comm(comm);
  return NULL;
}

static void test_allgather_four_ranks(void **state) {
  rank_args args[WORLD];
  pthread_t threads[WORLD];
  for (int r = 0; r < WORLD; r++) {
    memset(&args[r], 0, sizeof args[r]);
    args[r].f = *state;
    args[r].rank = r;
    assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < WORLD; r++) pthread_join(threads[r], NULL);
  for (int r = 0; r < WORLD; r++) {
    assert_int_equal(args[r].fixed_status, XCOLL_SUCCESS);
    assert_int_equal(args[r].var_status, XCOLL_SUCCESS);
    for (int p = 0; p < WORLD; p++) {
      unsigned char expected[24];
      record_of(p, expected);
      assert_memory_equal(args[r].all + p * 24, expected, 24);
      assert_int_equal(args[r].sizes[p], (size_t)p + 1);
      for (int i = 0; i <= p; i++)
        assert_int_equal(((char *)args[r].values[p])[i], 'a' + p);
    }
    xcoll_bootstrap_free(WORLD, args[r].values, args[r].sizes);
  }
}

static void test_single_rank_needs_no_store(void **state) {
  (void)state;
  xcoll_comm comm;
  memset(&comm, 0, sizeof comm);
  comm.world_size = 1;
  pthread_mutex_init(&comm.error_lock, NULL);
  int mine = 42, all = 0;
  assert_int_equal(xcoll_bootstrap_allgather(&comm, "one", &mine, sizeof mine,
                                             &all),
                   XCOLL_SUCCESS);
  assert_int_equal(all, 42);
  pthread_mutex_destroy(&comm.error_lock);
}

static void test_wrong_size_is_protocol_error(void **state) {
  const fixture *f = *state;
  xcoll_comm *r0 = fake_comm(f, 0, 2, "c9/", 10.0);
  /* rank 1 "publishes" 7 bytes where rank 0 expects 8 */
  assert_int_equal(xcoll_store_set(r0->store, "c9/bootstrap/addr/1", "1234567", 7),
                   XCOLL_SUCCESS);
  char mine[8] = "0000000", all[16];
  assert_int_equal(xcoll_bootstrap_allgather(r0, "addr", mine, 8, all),
                   XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_last_error(), "rank 1 contributed 7 bytes"));
  assert_non_null(strstr(r0->last_error, "rank 1"));
  /* the variable-size form bounds what a peer may send */
  assert_int_equal(xcoll_store_set(r0->store, "c9/bootstrap/big/1", "123456789", 9),
                   XCOLL_SUCCESS);
  void **values = (void **)&values;
  size_t *sizes = NULL;
  assert_int_equal(
      xcoll_bootstrap_allgatherv(r0, "big", "x", 1, 8, &values, &sizes),
      XCOLL_ERR_PROTOCOL);
  assert_null(values);
  assert_null(sizes);
  assert_non_null(strstr(xcoll_last_error(), "rank 1 contributed 9 bytes"));
  free_comm(r0);
}

static void test_missing_rank_times_out(void **state) {
  xcoll_comm *r1 = fake_comm(*state, 1, 3, "c11/", 0.3);
  int mine = 1, all[3];
  assert_int_equal(xcoll_bootstrap_allgather(r1, "late", &mine, sizeof mine, all),
                   XCOLL_ERR_TIMEOUT);
  assert_non_null(strstr(xcoll_last_error(), "rank 0"));
  free_comm(r1);
}

static void test_bad_arguments(void **state) {
  xcoll_comm *c = fake_comm(*state, 0, 2, "c12/", 1.0);
  int mine = 0, all[2];
  assert_int_equal(xcoll_bootstrap_allgather(NULL, "x", &mine, 4, all),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_bootstrap_allgather(c, "a/b", &mine, 4, all),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_bootstrap_allgather(c, "", &mine, 4, all),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_bootstrap_allgather(c, "x", NULL, 4, all),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_bootstrap_allgather(c, "x", &mine, 4, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  free_comm(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_allgather_four_ranks, setup, teardown),
      cmocka_unit_test(test_single_rank_needs_no_store),
      cmocka_unit_test_setup_teardown(test_wrong_size_is_protocol_error, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_missing_rank_times_out, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
