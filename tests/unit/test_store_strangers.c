/* test_store_strangers.c - the rendezvous store's listener against
 * strangers (core/store_server.c, core/stranger.h): a connection that has
 * not authenticated XCOLL_STRANGER_DEADLINE_S after its accept is closed,
 * silent or stopped after a valid first message; a wrong first message is
 * closed at once (an xcoll offer with a wrong hello tag after the store's
 * answer, so that a rank with another secret can say so); 300 idle
 * strangers from one address leave at most 128 open and the store serving,
 * and a connection whose first message was valid is not shed for them; and
 * the store's thread serves ranks while its stderr is a full pipe (it never
 * blocks on its log). The store runs with a job secret here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "store.h"
#include "store_codec.h"
#include "stranger.h"

#define STRANGERS 300
/* STORE_MAX_PENDING_PER_ADDRESS in core/store_server.c */
#define PER_ADDRESS_BOUND 128

typedef struct fixture {
  xcoll_store_server *server;
  int port;
} fixture;

static int setup(void **state) {
  unsetenv("XCOLL_AUTH_FILE");
  setenv("XCOLL_AUTH_TOKEN", "store strangers test secret", 1);
  assert_int_equal(xcoll_auth_reload(), XCOLL_SUCCESS);
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

/* A raw non-blocking connection to the store (the connect itself is
 * blocking, so that it has completed). */
static int raw_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
  return fd;
}

/* Bytes the store sent on fd so far (read and thrown away) are added to
 * *got (may be NULL); returns 1 when the store has closed fd. */
static int closed_by_store(int fd, size_t *got) {
  char buf[256];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      if (got)
        *got += (size_t)n;
      continue;
    }
    if (n == 0)
      return 1;
    if (errno == EINTR)
      continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

/* Wait until the store closes fd, at most limit_s; returns the seconds it
 * took, or -1. */
static double wait_closed(int fd, double limit_s, size_t *got) {
  double start = xcoll_auth_now();
  while (xcoll_auth_now() - start < limit_s) {
    if (closed_by_store(fd, got))
      return xcoll_auth_now() - start;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    (void)poll(&p, 1, 20);
  }
  return -1;
}

/* A rank's first message: offer and hello tag (auth.h). */
static void first_message(uint8_t out[XCOLL_AUTH_FIRST_BYTES],
                          uint8_t nonce[XCOLL_AUTH_NONCE_BYTES]) {
  xcoll_auth_offer(out, nonce);
  xcoll_auth_hello_tag(STORE_AUTH_CONTEXT, nonce,
                       out + XCOLL_AUTH_OFFER_BYTES);
}

static void test_deadline(void **state) {
  fixture *f = *state;
  /* silent */
  int silent = raw_open(f->port);
  /* a valid first message, then nothing: no proof */
  int stalled = raw_open(f->port);
  uint8_t first[XCOLL_AUTH_FIRST_BYTES], nonce[XCOLL_AUTH_NONCE_BYTES];
  first_message(first, nonce);
  assert_int_equal(send(stalled, first, sizeof first, 0),
                   (ssize_t)sizeof first);
  double took = wait_closed(silent, XCOLL_STRANGER_DEADLINE_S + 3, NULL);
  printf("# a silent connection was closed after %.2f s (deadline %.1f s)\n",
         took, XCOLL_STRANGER_DEADLINE_S);
  assert_true(took >= XCOLL_STRANGER_DEADLINE_S - 0.1);
  assert_true(took <= XCOLL_STRANGER_DEADLINE_S + 2);
  size_t answer = 0;
  took = wait_closed(stalled, 2, &answer);
  assert_true(took >= 0);
  assert_int_equal(answer, XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES);
  close(silent);
  close(stalled);
}

static void test_wrong_first_message(void **state) {
  fixture *f = *state;
  /* not an xcoll offer: closed at once, without a byte */
  int garbage = raw_open(f->port);
  uint8_t junk[XCOLL_AUTH_FIRST_BYTES];
  memset(junk, 'x', sizeof junk);
  assert_int_equal(send(garbage, junk, sizeof junk, 0), (ssize_t)sizeof junk);
  size_t got = 0;
  double took = wait_closed(garbage, 1.0, &got);
  assert_true(took >= 0);
  assert_int_equal(got, 0);
  close(garbage);
  /* an offer with a wrong hello tag: answered (so that a rank with another
   * secret fails naming it), then closed at once */
  int wrong = raw_open(f->port);
  uint8_t first[XCOLL_AUTH_FIRST_BYTES], nonce[XCOLL_AUTH_NONCE_BYTES];
  first_message(first, nonce);
  first[XCOLL_AUTH_OFFER_BYTES] ^= 1;
  assert_int_equal(send(wrong, first, sizeof first, 0), (ssize_t)sizeof first);
  got = 0;
  took = wait_closed(wrong, 1.0, &got);
  assert_true(took >= 0);
  assert_int_equal(got, XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES);
  close(wrong);
}

static void test_strangers_bounded(void **state) {
  fixture *f = *state;
  /* A rank in the middle of its handshake: valid first message, answered,
   * proof not sent yet. */
  int rank = raw_open(f->port);
  double rank_since = xcoll_auth_now();
  uint8_t first[XCOLL_AUTH_FIRST_BYTES], nonce[XCOLL_AUTH_NONCE_BYTES];
  first_message(first, nonce);
  assert_int_equal(send(rank, first, sizeof first, 0), (ssize_t)sizeof first);
  uint8_t answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  size_t have = 0;
  while (have < sizeof answer) {
    struct pollfd p = {.fd = rank, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 2000), 1);
    ssize_t n = recv(rank, answer + have, sizeof answer - have, 0);
    assert_true(n > 0);
    have += (size_t)n;
  }
  /* Strangers, all from 127.0.0.1, all silent. */
  int strangers[STRANGERS];
  for (int i = 0; i < STRANGERS; i++)
    strangers[i] = raw_open(f->port);
  /* A client behind them in the backlog is served: by then the store has
   * accepted every stranger. */
  xcoll_store *st = NULL;
  assert_int_equal(xcoll_store_connect("127.0.0.1", f->port, 5, &st),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_set(st, "k", "v", 1), XCOLL_SUCCESS);
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(st, "k", &value, &bytes), XCOLL_SUCCESS);
  free(value);
  int open_strangers = 0;
  for (int i = 0; i < STRANGERS; i++)
    open_strangers += !closed_by_store(strangers[i], NULL);
  printf("# %d of %d idle strangers still open (bound %d per address)\n",
         open_strangers, STRANGERS, PER_ADDRESS_BOUND);
  assert_true(open_strangers <= PER_ADDRESS_BOUND);
  /* The rank was never shed for them; only its deadline may close it. */
  int rank_closed = closed_by_store(rank, NULL);
  double rank_age = xcoll_auth_now() - rank_since;
  if (rank_closed)
    assert_true(rank_age >= XCOLL_STRANGER_DEADLINE_S);
  if (!rank_closed && rank_age < XCOLL_STRANGER_DEADLINE_S - 0.5) {
    /* and it finishes its handshake and is served */
    uint8_t server_nonce[XCOLL_AUTH_NONCE_BYTES];
    char why[256];
    assert_int_equal(
        xcoll_auth_parse_offer(answer, server_nonce, why, sizeof why), 0);
    uint8_t proof[XCOLL_AUTH_PROOF_BYTES];
    xcoll_auth_prove("client", STORE_AUTH_CONTEXT, nonce, server_nonce, proof);
    assert_int_equal(send(rank, proof, sizeof proof, 0), (ssize_t)sizeof proof);
    unsigned char request[STORE_HEADER_BYTES + 1];
    store_header h = {STORE_MAGIC, STORE_VERSION, STORE_HEALTH, 0, 0};
    store_header_encode(&h, request);
    assert_int_equal(send(rank, request, STORE_HEADER_BYTES, 0),
                     STORE_HEADER_BYTES);
    unsigned char reply[STORE_HEADER_BYTES];
    have = 0;
    while (have < sizeof reply) {
      struct pollfd p = {.fd = rank, .events = POLLIN};
      assert_int_equal(poll(&p, 1, 2000), 1);
      ssize_t n = recv(rank, reply + have, sizeof reply - have, 0);
      assert_true(n > 0);
      have += (size_t)n;
    }
    store_header_decode(reply, &h);
    assert_int_equal(h.kind, STORE_REPLY_OK);
  }
  for (int i = 0; i < STRANGERS; i++)
    close(strangers[i]);
  close(rank);
  xcoll_store_close(st);
}

/* The store thread logs every drop (XCOLL_DEBUG=INFO, set in main) into a
 * stderr that is a full pipe nobody reads: it must go on serving. */
static void test_log_never_blocks(void **state) {
  fixture *f = *state;
  /* This thread logs too (the client's errors, if any): never wait. */
  xcoll_log_never_block();
  int p[2];
  assert_int_equal(pipe(p), 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
  int filler = open(path, O_WRONLY | O_NONBLOCK);
  assert_true(filler >= 0);
  char block[4096];
  memset(block, '.', sizeof block);
  size_t filled = 0;
  for (;;) {
    ssize_t n = write(filler, block, sizeof block);
    if (n <= 0)
      break;
    filled += (size_t)n;
  }
  close(filler);
  fflush(stderr);
  int saved = dup(2);
  assert_true(saved >= 0);
  assert_true(dup2(p[1], 2) == 2);
  /* Strangers the store drops (and logs). */
  for (int i = 0; i < 20; i++) {
    int fd = raw_open(f->port);
    uint8_t junk[XCOLL_AUTH_FIRST_BYTES];
    memset(junk, 'x', sizeof junk);
    (void)send(fd, junk, sizeof junk, 0);
    (void)wait_closed(fd, 1.0, NULL);
    close(fd);
  }
  xcoll_store *st = NULL;
  double start = xcoll_auth_now();
  xcoll_status s = xcoll_store_connect("127.0.0.1", f->port, 5, &st);
  if (s == XCOLL_SUCCESS)
    s = xcoll_store_set(st, "while blocked", "v", 1);
  double took = xcoll_auth_now() - start;
  /* Give stderr back before any assertion prints. */
  assert_true(dup2(saved, 2) == 2);
  close(saved);
  int flags = fcntl(p[0], F_GETFL);
  fcntl(p[0], F_SETFL, flags | O_NONBLOCK);
  while (read(p[0], block, sizeof block) > 0) {
  }
  close(p[0]);
  close(p[1]);
  printf("# with stderr full (%zu bytes in the pipe), a client connected and "
         "set a key in %.3f s: %s\n",
         filled, took, xcoll_strerror(s));
  assert_int_equal(s, XCOLL_SUCCESS);
  assert_true(took < 3.0);
  xcoll_store_close(st);
}

int main(void) {
  /* Every drop is an INFO line: the store thread logs as much as it can. */
  setenv("XCOLL_DEBUG", "INFO", 1);
  setenv("XCOLL_DEBUG_SUBSYS", "BOOTSTRAP", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_wrong_first_message, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_strangers_bounded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_log_never_blocks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
