/* test_store.c - the rendezvous store (core/store.c): values round-trip,
 * get parks until another thread sets the key, add is atomic under
 * concurrency, timeouts and unreachable servers give TIMEOUT with the
 * address in the message, and malformed or oversized messages cost only the
 * sender's connection, never the server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "store.h"

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
  assert_true(f->port > 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  xcoll_store_server_stop(f->server);
  free(f);
  return 0;
}

static xcoll_store *connect_client(const fixture *f) {
  xcoll_store *st = NULL;
  assert_int_equal(xcoll_store_connect("127.0.0.1", f->port, 10.0, &st),
                   XCOLL_SUCCESS);
  return st;
}

/* A raw TCP connection to the server, for hand-made messages. */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  struct timeval tv = {10, 0}; /* bound the test if the server misbehaves */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  /* the server reads requests only after the authentication exchange */
  assert_int_equal(xcoll_auth_client(fd, "xcoll rendezvous store",
                                     "the test's store", xcoll_auth_now() + 10),
                   XCOLL_SUCCESS);
  return fd;
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static void test_set_get(void **state) {
  xcoll_store *st = connect_client(*state);
  assert_int_equal(xcoll_store_set(st, "addr/0", "10.0.0.1:4000", 13),
                   XCOLL_SUCCESS);
  /* binary values with NUL bytes keep their length */
  const unsigned char blob[5] = {1, 0, 2, 0, 3};
  assert_int_equal(xcoll_store_set(st, "blob", blob, sizeof blob),
                   XCOLL_SUCCESS);
  /* an empty value is a value */
  assert_int_equal(xcoll_store_set(st, "empty", NULL, 0), XCOLL_SUCCESS);

  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(st, "addr/0", &value, &bytes),
                   XCOLL_SUCCESS);
  assert_int_equal(bytes, 13);
  assert_memory_equal(value, "10.0.0.1:4000", 13);
  free(value);
  assert_int_equal(xcoll_store_get(st, "blob", &value, &bytes), XCOLL_SUCCESS);
  assert_int_equal(bytes, sizeof blob);
  assert_memory_equal(value, blob, sizeof blob);
  free(value);
  assert_int_equal(xcoll_store_get(st, "empty", &value, &bytes), XCOLL_SUCCESS);
  assert_int_equal(bytes, 0);
  free(value);

  /* overwrite replaces, visible from another connection */
  assert_int_equal(xcoll_store_set(st, "addr/0", "x", 1), XCOLL_SUCCESS);
  xcoll_store *other = connect_client(*state);
  assert_int_equal(xcoll_store_get(other, "addr/0", &value, &bytes),
                   XCOLL_SUCCESS);
  assert_int_equal(bytes, 1);
  assert_memory_equal(value, "x", 1);
  free(value);
  xcoll_store_close(other);
  xcoll_store_close(st);
}

typedef struct getter_args {
  const fixture *f;
  char value[64];
  size_t bytes;
  xcoll_status status;
} getter_args;

static void *getter_main(void *arg) {
  getter_args *a = arg;
  xcoll_store *st = NULL;
  a->status = xcoll_store_connect("127.0.0.1", a->f->port, 10.0, &st);
  if (a->status)
    return NULL;
  int64_t ignored;
  /* tell the main thread we are about to ask, through the store itself */
  a->status = xcoll_store_add(st, "getter/ready", 1, &ignored);
  void *value = NULL;
  if (!a->status)
    a->status = xcoll_store_get(st, "late", &value, &a->bytes);
  if (!a->status && a->bytes < sizeof a->value)
    memcpy(a->value, value, a->bytes);
  free(value);
  xcoll_store_close(st);
  return NULL;
}

static void test_get_waits_for_set(void **state) {
  fixture *f = *state;
  getter_args a = {.f = f};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, getter_main, &a), 0);
  xcoll_store *st = connect_client(f);
  const char *ready = "getter/ready";
  assert_int_equal(xcoll_store_wait(st, &ready, 1), XCOLL_SUCCESS);
  /* "late" did not exist before now: the getter can only have its value
   * through a get that waited for this set */
  int exists = 1;
  const char *late = "late";
  assert_int_equal(xcoll_store_check(st, &late, 1, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 0);
  assert_int_equal(xcoll_store_set(st, "late", "arrived", 7), XCOLL_SUCCESS);
  pthread_join(thread, NULL);
  assert_int_equal(a.status, XCOLL_SUCCESS);
  assert_int_equal(a.bytes, 7);
  assert_memory_equal(a.value, "arrived", 7);
  xcoll_store_close(st);
}

#define ADD_THREADS 4
#define ADDS_PER_THREAD 250

typedef struct adder_args {
  const fixture *f;
  int64_t results[ADDS_PER_THREAD];
  xcoll_status status;
} adder_args;

static void *adder_main(void *arg) {
  adder_args *a = arg;
  xcoll_store *st = NULL;
  a->status = xcoll_store_connect("127.0.0.1", a->f->port, 10.0, &st);
  for (int i = 0; i < ADDS_PER_THREAD && !a->status; i++)
    a->status = xcoll_store_add(st, "counter", 1, &a->results[i]);
  xcoll_store_close(st);
  return NULL;
}

static int compare_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static void test_add_is_atomic(void **state) {
  fixture *f = *state;
  static adder_args args[ADD_THREADS];
  pthread_t threads[ADD_THREADS];
  for (int t = 0; t < ADD_THREADS; t++) {
    args[t].f = f;
    assert_int_equal(pthread_create(&threads[t], NULL, adder_main, &args[t]),
                     0);
  }
  for (int t = 0; t < ADD_THREADS; t++)
    pthread_join(threads[t], NULL);

  /* every add returned a distinct value: together exactly 1..N*M */
  static int64_t all[ADD_THREADS * ADDS_PER_THREAD];
  for (int t = 0; t < ADD_THREADS; t++) {
    assert_int_equal(args[t].status, XCOLL_SUCCESS);
    memcpy(&all[t * ADDS_PER_THREAD], args[t].results, sizeof args[t].results);
  }
  qsort(all, ADD_THREADS * ADDS_PER_THREAD, sizeof all[0], compare_i64);
  for (int i = 0; i < ADD_THREADS * ADDS_PER_THREAD; i++)
    assert_int_equal(all[i], i + 1);

  /* the stored form is decimal text, as in TCPStore; negative deltas work */
  xcoll_store *st = connect_client(f);
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(st, "counter", &value, &bytes),
                   XCOLL_SUCCESS);
  char expected[32];
  snprintf(expected, sizeof expected, "%d", ADD_THREADS * ADDS_PER_THREAD);
  assert_int_equal(bytes, strlen(expected));
  assert_memory_equal(value, expected, bytes);
  free(value);
  int64_t result = 0;
  assert_int_equal(xcoll_store_add(st, "counter", -1000, &result),
                   XCOLL_SUCCESS);
  assert_int_equal(result, ADD_THREADS * ADDS_PER_THREAD - 1000);
  assert_int_equal(xcoll_store_add(st, "fresh", 5, &result), XCOLL_SUCCESS);
  assert_int_equal(result, 5);
  /* add on a non-number is refused, and the connection stays usable */
  assert_int_equal(xcoll_store_set(st, "text", "abc", 3), XCOLL_SUCCESS);
  assert_int_not_equal(xcoll_store_add(st, "text", 1, &result), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_add(st, "fresh", 1, &result), XCOLL_SUCCESS);
  assert_int_equal(result, 6);
  xcoll_store_close(st);
}

static void test_wait_timeout(void **state) {
  xcoll_store *st = connect_client(*state);
  assert_int_equal(xcoll_store_set(st, "present", "1", 1), XCOLL_SUCCESS);
  xcoll_store_set_timeout(st, 0.2);
  const char *keys[2] = {"present", "absent"};
  assert_int_equal(xcoll_store_wait(st, keys, 2), XCOLL_ERR_TIMEOUT);
  assert_non_null(strstr(xcoll_last_error(), "'absent'"));
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(st, "absent", &value, &bytes),
                   XCOLL_ERR_TIMEOUT);
  assert_null(value);
  assert_non_null(strstr(xcoll_last_error(), "absent"));

  /* the withdrawn requests leave the connection in step */
  assert_int_equal(xcoll_store_wait(st, keys, 1), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_set(st, "absent", "2", 1), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_get(st, "absent", &value, &bytes),
                   XCOLL_SUCCESS);
  assert_int_equal(bytes, 1);
  assert_memory_equal(value, "2", 1);
  free(value);
  assert_int_equal(xcoll_store_wait(st, keys, 2), XCOLL_SUCCESS);
  xcoll_store_close(st);
}

static void test_check_delete(void **state) {
  xcoll_store *st = connect_client(*state);
  const char *keys[2] = {"k1", "k2"};
  int exists = -1, deleted = -1;
  assert_int_equal(xcoll_store_check(st, keys, 2, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 0);
  assert_int_equal(xcoll_store_set(st, "k1", "a", 1), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_check(st, keys, 1, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 1);
  assert_int_equal(xcoll_store_check(st, keys, 2, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 0);
  assert_int_equal(xcoll_store_set(st, "k2", "b", 1), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_check(st, keys, 2, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 1);
  assert_int_equal(xcoll_store_delete(st, "k1", &deleted), XCOLL_SUCCESS);
  assert_int_equal(deleted, 1);
  assert_int_equal(xcoll_store_delete(st, "k1", &deleted), XCOLL_SUCCESS);
  assert_int_equal(deleted, 0);
  assert_int_equal(xcoll_store_check(st, keys, 1, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 0);
  assert_int_equal(xcoll_store_delete(st, "k2", NULL), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_check(st, &keys[1], 1, &exists), XCOLL_SUCCESS);
  assert_int_equal(exists, 0);
  /* bad arguments are refused before anything is sent */
  assert_int_equal(xcoll_store_check(st, keys, 0, &exists),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_store_set(st, "", "a", 1), XCOLL_ERR_INVALID_ARGUMENT);
  xcoll_store_close(st);
}

/* A port that nothing listens on: bind to 0, read it, close. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  close(fd);
  return ntohs(sa.sin_port);
}

static void test_connect_nothing_listening(void **state) {
  (void)state;
  int port = free_port();
  xcoll_store *st = (xcoll_store *)&port; /* must be reset to NULL */
  assert_int_equal(xcoll_store_connect("127.0.0.1", port, 0.3, &st),
                   XCOLL_ERR_TIMEOUT);
  assert_null(st);
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", port);
  assert_non_null(strstr(xcoll_last_error(), where));
  assert_non_null(strstr(xcoll_last_error(), "MASTER_ADDR"));
}

static void test_port_taken(void **state) {
  fixture *f = *state;
  xcoll_store_server *second = NULL;
  assert_int_equal(
      xcoll_store_server_start("127.0.0.1", f->port, &second, NULL),
      XCOLL_ERR_SYSTEM);
  assert_null(second);
  char port_text[16];
  snprintf(port_text, sizeof port_text, ":%d", f->port);
  assert_non_null(strstr(xcoll_last_error(), port_text));
  assert_non_null(strstr(xcoll_last_error(), "in use"));
  /* the first server is unharmed */
  xcoll_store *st = connect_client(f);
  assert_int_equal(xcoll_store_set(st, "still", "ok", 2), XCOLL_SUCCESS);
  xcoll_store_close(st);
}

/* Sends bytes on a fresh raw connection and checks that the server closes
 * it (recv sees EOF) instead of answering. */
static void expect_closed_after(int port, const unsigned char *bytes,
                                size_t count) {
  int fd = raw_connect(port);
  assert_int_equal(send(fd, bytes, count, MSG_NOSIGNAL), (ssize_t)count);
  unsigned char reply[64];
  assert_int_equal(recv(fd, reply, sizeof reply, 0), 0);
  close(fd);
}

static void test_malformed_messages(void **state) {
  fixture *f = *state;
  xcoll_store *st = connect_client(f);
  assert_int_equal(xcoll_store_set(st, "before", "1", 1), XCOLL_SUCCESS);

  unsigned char garbage[16];
  memset(garbage, 0xA5, sizeof garbage);
  expect_closed_after(f->port, garbage, sizeof garbage);

  /* right magic and version, absurd lengths: refused before allocation */
  unsigned char header[16];
  put_be32(header, 0x58435354u);
  header[4] = 0;
  header[5] = 1; /* version */
  header[6] = 0;
  header[7] = 1; /* set */
  put_be32(header + 8, 4);
  put_be32(header + 12, 0xFFFFFFFFu);
  expect_closed_after(f->port, header, sizeof header);
  put_be32(header + 12, XCOLL_STORE_MAX_VALUE + 1u);
  expect_closed_after(f->port, header, sizeof header);
  put_be32(header + 8, XCOLL_STORE_MAX_KEY + 1u);
  put_be32(header + 12, 0);
  expect_closed_after(f->port, header, sizeof header);
  /* unknown request kind */
  put_be32(header + 8, 1);
  header[7] = 99;
  expect_closed_after(f->port, header, sizeof header);
  /* wait whose key list lies about its lengths */
  unsigned char wait_msg[16 + 12];
  memcpy(wait_msg, header, 16);
  wait_msg[7] = 3;
  put_be32(wait_msg + 8, 0);
  put_be32(wait_msg + 12, 12);
  put_be32(wait_msg + 16, 1);   /* one key */
  put_be32(wait_msg + 20, 500); /* of 500 bytes, but only 4 follow */
  memcpy(wait_msg + 24, "abcd", 4);
  expect_closed_after(f->port, wait_msg, sizeof wait_msg);

  /* the server kept running and the old connection still works */
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(st, "before", &value, &bytes),
                   XCOLL_SUCCESS);
  assert_int_equal(bytes, 1);
  free(value);
  xcoll_store *fresh = connect_client(f);
  assert_int_equal(xcoll_store_set(fresh, "after", "2", 1), XCOLL_SUCCESS);
  xcoll_store_close(fresh);
  xcoll_store_close(st);
}

static void test_oversized_value_rejected(void **state) {
  xcoll_store *st = connect_client(*state);
  static const char small[8];
  /* refused by the client before a byte is read from the buffer */
  assert_int_equal(
      xcoll_store_set(st, "big", small, (size_t)XCOLL_STORE_MAX_VALUE + 1),
      XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "big"));
  char long_key[XCOLL_STORE_MAX_KEY + 2];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  assert_int_equal(xcoll_store_set(st, long_key, "v", 1),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_store_set(st, "small", "v", 1), XCOLL_SUCCESS);
  xcoll_store_close(st);
}

/* XCOLL_STORE_MAX_BYTES caps what the server holds: a set over it is
 * refused with a message naming the variable, the connection stays usable,
 * and room freed by a delete can be used again. */
static void test_total_bytes_cap(void **unused) {
  (void)unused;
  setenv("XCOLL_STORE_MAX_BYTES", "1M", 1);
  xcoll_store_server *server = NULL;
  int port = 0;
  assert_int_equal(xcoll_store_server_start("127.0.0.1", 0, &server, &port),
                   XCOLL_SUCCESS);
  unsetenv("XCOLL_STORE_MAX_BYTES");
  xcoll_store *st = NULL;
  assert_int_equal(xcoll_store_connect("127.0.0.1", port, 20, &st),
                   XCOLL_SUCCESS);
  size_t bytes = 600u << 10;
  char *value = calloc(1, bytes);
  assert_int_equal(xcoll_store_set(st, "a", value, bytes), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_set(st, "b", value, bytes),
                   XCOLL_ERR_INVALID_USAGE);
  assert_non_null(strstr(xcoll_last_error(), "XCOLL_STORE_MAX_BYTES=1048576"));
  assert_int_equal(xcoll_store_delete(st, "a", NULL), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_set(st, "b", value, bytes), XCOLL_SUCCESS);
  free(value);
  xcoll_store_close(st);
  xcoll_store_server_stop(server);
  /* a cap below what bootstrap needs is refused at start */
  setenv("XCOLL_STORE_MAX_BYTES", "4K", 1);
  assert_int_equal(xcoll_store_server_start("127.0.0.1", 0, &server, &port),
                   XCOLL_ERR_ENV);
  unsetenv("XCOLL_STORE_MAX_BYTES");
}

static void *blocked_get_main(void *arg) {
  getter_args *a = arg;
  xcoll_store *st = NULL;
  a->status = xcoll_store_connect("127.0.0.1", a->f->port, 10.0, &st);
  if (a->status)
    return NULL;
  int64_t ignored;
  a->status = xcoll_store_add(st, "blocked/ready", 1, &ignored);
  void *value = NULL;
  if (!a->status)
    a->status = xcoll_store_get(st, "never", &value, &a->bytes);
  free(value);
  xcoll_store_close(st);
  return NULL;
}

/* A joined rank that vanishes without LEAVE (interrupted, then closed, so
 * no LEAVE goes out): the get that waits on a missing key fails naming it. */
static void vanish(xcoll_store *st) {
  xcoll_store_interrupt(st);
  xcoll_store_close(st);
}

static xcoll_status get_missing(xcoll_store *st) {
  void *value = NULL;
  size_t bytes = 0;
  xcoll_status status = xcoll_store_get(st, "never-set", &value, &bytes);
  free(value);
  return status;
}

/* A shrink's exclusion key forgives a vanished rank: waits are served again
 * (XCOLL_STORE_EXCLUDED_PREFIX); a rank that vanishes later, not excluded,
 * fails them again. */
static void test_excluded_rank_is_forgiven(void **state) {
  xcoll_store *st[3];
  for (int r = 0; r < 3; r++) {
    st[r] = connect_client(*state);
    assert_int_equal(xcoll_store_join(st[r], 3, r), XCOLL_SUCCESS);
    xcoll_store_set_timeout(st[r], 10.0); /* bounds a failing test */
  }
  vanish(st[2]);
  assert_int_equal(get_missing(st[0]), XCOLL_ERR_REMOTE);
  assert_non_null(strstr(xcoll_last_error(), "rank 2"));
  assert_int_equal(xcoll_store_set(st[0], XCOLL_STORE_EXCLUDED_PREFIX "2", "1",
                                   1),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_health(st[1]), XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_set(st[0], "after", "x", 1), XCOLL_SUCCESS);
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(st[1], "after", &value, &bytes),
                   XCOLL_SUCCESS);
  free(value);
  vanish(st[1]);
  assert_int_equal(get_missing(st[0]), XCOLL_ERR_REMOTE);
  assert_non_null(strstr(xcoll_last_error(), "rank 1"));
  xcoll_store_close(st[0]);
}

static void test_stop_wakes_clients(void **state) {
  (void)state;
  fixture f = {0};
  assert_int_equal(xcoll_store_server_start(NULL, 0, &f.server, &f.port),
                   XCOLL_SUCCESS);
  getter_args a = {.f = &f};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, blocked_get_main, &a), 0);
  xcoll_store *st = connect_client(&f);
  const char *ready = "blocked/ready";
  assert_int_equal(xcoll_store_wait(st, &ready, 1), XCOLL_SUCCESS);
  xcoll_store_server_stop(f.server);
  pthread_join(thread, NULL);
  /* the waiting get ends with an error well before its 10 s timeout */
  assert_int_equal(a.status, XCOLL_ERR_REMOTE);
  int exists = 0;
  assert_int_not_equal(xcoll_store_check(st, &ready, 1, &exists),
                       XCOLL_SUCCESS);
  xcoll_store_close(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_set_get, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_waits_for_set, setup, teardown),
      cmocka_unit_test_setup_teardown(test_add_is_atomic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wait_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_delete, setup, teardown),
      cmocka_unit_test(test_connect_nothing_listening),
      cmocka_unit_test(test_total_bytes_cap),
      cmocka_unit_test_setup_teardown(test_port_taken, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malformed_messages, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversized_value_rejected, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_excluded_rank_is_forgiven, setup,
                                      teardown),
      cmocka_unit_test(test_stop_wakes_clients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
