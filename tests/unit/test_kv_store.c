/* test_kv_store.c - xcoll_comm_init_kv: communicators that meet through the
 * caller's key-value store (here a mutex-guarded list in this process, as a
 * c10d Store would be one in torch) instead of xcoll's own. 2-3 ranks in
 * threads: a world on tcp (and nccl_like where built) runs an allreduce, a
 * split child made from it runs another and every store key went through
 * the caller's functions; a rank whose peers never come fails with
 * XCOLL_ERR_TIMEOUT naming the key; a NULL store or function is
 * XCOLL_ERR_INVALID_ARGUMENT. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xcoll.h"

/* ---- the caller's store: a list of keys under one lock ---- */

typedef struct kv_entry {
  struct kv_entry *next;
  char *key;
  void *value;
  size_t bytes;
} kv_entry;

typedef struct test_store {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  kv_entry *entries;
  int calls; /* set, get and add calls, all ranks together */
} test_store;

static kv_entry *find(test_store *ts, const char *key) {
  for (kv_entry *e = ts->entries; e; e = e->next)
    if (strcmp(e->key, key) == 0)
      return e;
  return NULL;
}

/* Under ts->lock. */
static void put(test_store *ts, const char *key, const void *value,
                size_t bytes) {
  kv_entry *e = find(ts, key);
  if (!e) {
    e = calloc(1, sizeof *e);
    e->key = strdup(key);
    e->next = ts->entries;
    ts->entries = e;
  }
  free(e->value);
  e->value = malloc(bytes ? bytes : 1);
  memcpy(e->value, value, bytes);
  e->bytes = bytes;
  pthread_cond_broadcast(&ts->changed);
}

static xcoll_status ts_set(void *context, const char *key, const void *value,
                           size_t bytes) {
  test_store *ts = context;
  pthread_mutex_lock(&ts->lock);
  ts->calls++;
  put(ts, key, value, bytes);
  pthread_mutex_unlock(&ts->lock);
  return XCOLL_SUCCESS;
}

static xcoll_status ts_get(void *context, const char *key, double timeout_s,
                           void **value, size_t *bytes) {
  test_store *ts = context;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)timeout_s;
  deadline.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&ts->lock);
  ts->calls++;
  kv_entry *e;
  int rc = 0;
  while ((e = find(ts, key)) == NULL && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&ts->changed, &ts->lock, &deadline);
  if (e) {
    *value = malloc(e->bytes ? e->bytes : 1);
    memcpy(*value, e->value, e->bytes);
    *bytes = e->bytes;
  }
  pthread_mutex_unlock(&ts->lock);
  return e ? XCOLL_SUCCESS : XCOLL_ERR_TIMEOUT;
}

static xcoll_status ts_add(void *context, const char *key, int64_t delta,
                           int64_t *result) {
  test_store *ts = context;
  pthread_mutex_lock(&ts->lock);
  ts->calls++;
  kv_entry *e = find(ts, key);
  long long now = 0;
  if (e) {
    char text[32] = {0};
    memcpy(text, e->value, e->bytes < 31 ? e->bytes : 31);
    now = atoll(text);
  }
  now += delta;
  char text[32];
  int len = snprintf(text, sizeof text, "%lld", now);
  put(ts, key, text, (size_t)len);
  pthread_mutex_unlock(&ts->lock);
  *result = now;
  return XCOLL_SUCCESS;
}

static void store_init(test_store *ts) {
  memset(ts, 0, sizeof *ts);
  pthread_mutex_init(&ts->lock, NULL);
  pthread_cond_init(&ts->changed, NULL);
}

static void store_free(test_store *ts) {
  for (kv_entry *e = ts->entries, *next; e; e = next) {
    next = e->next;
    free(e->key);
    free(e->value);
    free(e);
  }
  pthread_cond_destroy(&ts->changed);
  pthread_mutex_destroy(&ts->lock);
}

static xcoll_kv_store kv_of(test_store *ts) {
  xcoll_kv_store kv = {ts, ts_set, ts_get, ts_add};
  return kv;
}

/* ---- ranks in threads ---- */

#define MAX_RANKS 3

typedef struct rank_run {
  test_store *ts;
  const char *backend;
  int rank, world_size;
  double timeout_s;
  xcoll_status init, world_sum, split_sum;
  char message[512];
} rank_run;

static void *rank_main(void *arg) {
  rank_run *r = arg;
  xcoll_config config;
  xcoll_config_init(&config);
  config.rank = r->rank;
  config.world_size = r->world_size;
  config.backend = r->backend;
  config.timeout_s = r->timeout_s;
  xcoll_kv_store kv = kv_of(r->ts);
  xcoll_comm_t comm = NULL;
  r->init = xcoll_comm_init_kv(&comm, &config, &kv);
  if (r->init != XCOLL_SUCCESS) {
    snprintf(r->message, sizeof r->message, "%s", xcoll_last_error());
    return NULL;
  }
  float values[1000];
  for (int i = 0; i < 1000; i++)
    values[i] = (float)(r->rank + 1);
  r->world_sum =
      xcoll_allreduce(values, values, 1000, XCOLL_FLOAT32, XCOLL_SUM, comm);
  float want = (float)(r->world_size * (r->world_size + 1) / 2);
  for (int i = 0; i < 1000 && r->world_sum == XCOLL_SUCCESS; i++)
    if (values[i] != want)
      r->world_sum = XCOLL_ERR_INTERNAL;

  /* Even ranks and odd ranks each form a child. */
  xcoll_comm_t child = NULL;
  r->split_sum = xcoll_comm_split(comm, r->rank % 2, r->rank, &child);
  if (r->split_sum == XCOLL_SUCCESS) {
    int rank = -1, size = 0;
    xcoll_comm_rank(child, &rank);
    xcoll_comm_size(child, &size);
    int64_t one = 1;
    r->split_sum =
        xcoll_allreduce(&one, &one, 1, XCOLL_INT64, XCOLL_SUM, child);
    if (r->split_sum == XCOLL_SUCCESS && one != size)
      r->split_sum = XCOLL_ERR_INTERNAL;
    xcoll_comm_destroy(child);
  }
  xcoll_comm_destroy(comm);
  return NULL;
}

static void run_world(const char *backend, int world_size) {
  test_store ts;
  store_init(&ts);
  pthread_t threads[MAX_RANKS];
  rank_run runs[MAX_RANKS];
  for (int r = 0; r < world_size; r++) {
    runs[r] = (rank_run){.ts = &ts,
                         .backend = backend,
                         .rank = r,
                         .world_size = world_size,
                         .timeout_s = 30};
    assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &runs[r]), 0);
  }
  for (int r = 0; r < world_size; r++)
    pthread_join(threads[r], NULL);
  for (int r = 0; r < world_size; r++) {
    if (runs[r].init != XCOLL_SUCCESS)
      print_error("%s rank %d: %s\n", backend, r, runs[r].message);
    assert_int_equal(runs[r].init, XCOLL_SUCCESS);
    assert_int_equal(runs[r].world_sum, XCOLL_SUCCESS);
    assert_int_equal(runs[r].split_sum, XCOLL_SUCCESS);
  }
  /* Every rank met through this store: it was asked at least once per rank. */
  assert_true(ts.calls >= world_size);
  assert_non_null(find(&ts, "xcoll/next_comm_id"));
  store_free(&ts);
}

static void test_tcp_world_and_split(void **unused) {
  (void)unused;
  run_world("tcp", 2);
  run_world("tcp", 3);
}

static void test_nccl_like_world_and_split(void **unused) {
  (void)unused;
#ifdef XCOLL_HAVE_NCCL_LIKE
  run_world("nccl_like", 3);
#else
  skip();
#endif
}

static void test_missing_peer_times_out(void **unused) {
  (void)unused;
  test_store ts;
  store_init(&ts);
  rank_run run = {.ts = &ts,
                  .backend = "tcp",
                  .rank = 1,
                  .world_size = 2,
                  .timeout_s = 0.5};
  rank_main(&run);
  assert_int_equal(run.init, XCOLL_ERR_TIMEOUT);
  assert_non_null(strstr(run.message, "key-value store"));
  store_free(&ts);
}

static void test_bad_arguments(void **unused) {
  (void)unused;
  xcoll_config config;
  xcoll_config_init(&config);
  xcoll_comm_t comm = (xcoll_comm_t)&config; /* must be reset to NULL */
  assert_int_equal(xcoll_comm_init_kv(&comm, &config, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_null(comm);
  test_store ts;
  store_init(&ts);
  xcoll_kv_store kv = kv_of(&ts);
  kv.add = NULL;
  assert_int_equal(xcoll_comm_init_kv(&comm, &config, &kv),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "add"));
  store_free(&ts);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tcp_world_and_split),
      cmocka_unit_test(test_nccl_like_world_and_split),
      cmocka_unit_test(test_missing_peer_times_out),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
