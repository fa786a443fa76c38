/* test_auth.c - the job secret and its challenge-response (core/auth.c):
 * the right secret passes both ways; a wrong secret, no secret against a
 * secret, a truncated answer and a replayed answer or proof all fail with a
 * message; a key file that group or others can read is refused (chmod 600);
 * a token and a key file with the same secret agree; the store server drops
 * a client with a wrong secret (naming its address) and keeps serving.
 * A peer with another secret runs in a child process (the secret is per
 * process), over a socketpair or a real store connection. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "store.h"

#define CONTEXT "test context"

static void use_token(const char *token) {
  unsetenv("XCOLL_AUTH_FILE");
  if (token)
    setenv("XCOLL_AUTH_TOKEN", token, 1);
  else
    unsetenv("XCOLL_AUTH_TOKEN");
  assert_int_equal(xcoll_auth_reload(), XCOLL_SUCCESS);
}

typedef struct server_run {
  int fd;
  xcoll_status status;
} server_run;

static void *server_thread(void *arg) {
  server_run *r = arg;
  r->status = xcoll_auth_server(r->fd, CONTEXT, "the test client",
                                xcoll_auth_now() + 20);
  return NULL;
}

static void test_same_secret(void **unused) {
  (void)unused;
  for (int keyed = 0; keyed < 2; keyed++) {
    use_token(keyed ? "0123456789abcdef" : NULL);
    assert_int_equal(xcoll_auth_enabled(), keyed);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    server_run r = {.fd = sv[1]};
    pthread_t t;
    pthread_create(&t, NULL, server_thread, &r);
    xcoll_status c = xcoll_auth_client(sv[0], CONTEXT, "the test server",
                                       xcoll_auth_now() + 20);
    pthread_join(t, NULL);
    assert_int_equal(c, XCOLL_SUCCESS);
    assert_int_equal(r.status, XCOLL_SUCCESS);
    close(sv[0]);
    close(sv[1]);
  }
}

/* Runs the exchange against a child process that holds child_token (NULL:
 * none) and acts as server (child_serves) or client. Returns our status; the
 * child's exit code is 0 when it failed too (as it should). */
static xcoll_status against_child(const char *my_token, const char *child_token,
                                  int child_serves, int *child_failed) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    alarm(30);
    if (child_token)
      setenv("XCOLL_AUTH_TOKEN", child_token, 1);
    else
      unsetenv("XCOLL_AUTH_TOKEN");
    xcoll_auth_reload();
    double deadline = xcoll_auth_now() + 20;
    xcoll_status s =
        child_serves
            ? xcoll_auth_server(sv[1], CONTEXT, "the parent", deadline)
            : xcoll_auth_client(sv[1], CONTEXT, "the parent", deadline);
    _exit(s == XCOLL_SUCCESS ? 1 : 0);
  }
  close(sv[1]);
  use_token(my_token);
  double deadline = xcoll_auth_now() + 20;
  xcoll_status s = child_serves
                       ? xcoll_auth_client(sv[0], CONTEXT, "the child", deadline)
                       : xcoll_auth_server(sv[0], CONTEXT, "the child", deadline);
  close(sv[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  *child_failed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return s;
}

static void test_wrong_secret(void **unused) {
  (void)unused;
  for (int child_serves = 0; child_serves < 2; child_serves++) {
    int child_failed = 0;
    xcoll_status s = against_child("right secret", "wrong secret",
                                   child_serves, &child_failed);
    assert_int_not_equal(s, XCOLL_SUCCESS);
    assert_non_null(strstr(xcoll_last_error(), "secret"));
    assert_true(child_failed);
  }
}

static void test_secret_against_none(void **unused) {
  (void)unused;
  for (int child_serves = 0; child_serves < 2; child_serves++) {
    for (int mine = 0; mine < 2; mine++) {
      int child_failed = 0;
      xcoll_status s = against_child(mine ? "a secret" : NULL,
                                     mine ? NULL : "a secret", child_serves,
                                     &child_failed);
      assert_int_equal(s, XCOLL_ERR_PROTOCOL);
      assert_non_null(strstr(xcoll_last_error(), "XCOLL_AUTH_TOKEN"));
      /* A client without a secret that meets a server with one learns it
       * from the server's offer; the server sees a mismatched offer too. */
      assert_true(child_failed);
    }
  }
}

static void test_truncated_answer(void **unused) {
  (void)unused;
  use_token("a secret");
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* A fake server: a well-formed offer, half a proof, then it hangs up. */
  uint8_t offer[XCOLL_AUTH_OFFER_BYTES], nonce[XCOLL_AUTH_NONCE_BYTES];
  xcoll_auth_offer(offer, nonce);
  assert_int_equal(write(sv[1], offer, sizeof offer), (ssize_t)sizeof offer);
  assert_int_equal(write(sv[1], nonce, 16), 16);
  shutdown(sv[1], SHUT_WR);
  xcoll_status s =
      xcoll_auth_client(sv[0], CONTEXT, "the fake server", xcoll_auth_now() + 20);
  assert_int_equal(s, XCOLL_ERR_REMOTE);
  assert_non_null(strstr(xcoll_last_error(), "the fake server"));
  close(sv[0]);
  close(sv[1]);
  /* ... and one that says nothing: a timeout at the deadline, not a hang */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  s = xcoll_auth_client(sv[0], CONTEXT, "a silent server",
                        xcoll_auth_now() + 0.2);
  assert_int_equal(s, XCOLL_ERR_TIMEOUT);
  close(sv[0]);
  close(sv[1]);
}

/* Reads exactly bytes from fd (blocking). */
static void read_exact(int fd, void *buf, size_t bytes) {
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = read(fd, (char *)buf + got, bytes - got);
    assert_true(n > 0);
    got += (size_t)n;
  }
}

static void test_replay(void **unused) {
  (void)unused;
  use_token("a secret");
  /* Record a genuine session: the client's offer, the server's answer and
   * the client's proof, as an eavesdropper would. */
  uint8_t c_first[XCOLL_AUTH_FIRST_BYTES], c_nonce[XCOLL_AUTH_NONCE_BYTES];
  uint8_t s_nonce[XCOLL_AUTH_NONCE_BYTES];
  uint8_t answer[XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES];
  uint8_t c_proof[XCOLL_AUTH_PROOF_BYTES];
  xcoll_auth_offer(c_first, c_nonce);
  xcoll_auth_hello_tag(CONTEXT, c_nonce, c_first + XCOLL_AUTH_OFFER_BYTES);
  assert_true(xcoll_auth_hello_tag_ok(CONTEXT, c_nonce,
                                      c_first + XCOLL_AUTH_OFFER_BYTES));
  /* the hello tag is bound to its context and nonce */
  assert_false(xcoll_auth_hello_tag_ok("other context", c_nonce,
                                       c_first + XCOLL_AUTH_OFFER_BYTES));
  xcoll_auth_offer(answer, s_nonce);
  assert_false(xcoll_auth_hello_tag_ok(CONTEXT, s_nonce,
                                       c_first + XCOLL_AUTH_OFFER_BYTES));
  xcoll_auth_prove("server", CONTEXT, c_nonce, s_nonce,
                   answer + XCOLL_AUTH_OFFER_BYTES);
  xcoll_auth_prove("client", CONTEXT, c_nonce, s_nonce, c_proof);
  assert_true(xcoll_auth_verify("client", CONTEXT, c_nonce, s_nonce, c_proof));
  /* a role's proof never passes as the other's, nor for another context */
  assert_false(xcoll_auth_verify("server", CONTEXT, c_nonce, s_nonce, c_proof));
  assert_false(
      xcoll_auth_verify("client", "other context", c_nonce, s_nonce, c_proof));

  /* Replay the server's answer to a new client: its nonce is fresh. */
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(write(sv[1], answer, sizeof answer), (ssize_t)sizeof answer);
  xcoll_status s = xcoll_auth_client(sv[0], CONTEXT, "a replaying server",
                                     xcoll_auth_now() + 20);
  assert_int_equal(s, XCOLL_ERR_PROTOCOL);
  assert_non_null(strstr(xcoll_last_error(), "does not know this job's secret"));
  close(sv[0]);
  close(sv[1]);

  /* Replay the client's first message (its hello tag passes: it binds
   * only the client's nonce) and its proof to a new server: the proof does
   * not, the server's nonce is fresh. */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  server_run r = {.fd = sv[1]};
  pthread_t t;
  pthread_create(&t, NULL, server_thread, &r);
  assert_int_equal(write(sv[0], c_first, sizeof c_first),
                   (ssize_t)sizeof c_first);
  read_exact(sv[0], answer, sizeof answer);
  assert_int_equal(write(sv[0], c_proof, sizeof c_proof),
                   (ssize_t)sizeof c_proof);
  pthread_join(t, NULL);
  assert_int_equal(r.status, XCOLL_ERR_PROTOCOL);
  close(sv[0]);
  close(sv[1]);
}

static void test_key_file(void **unused) {
  (void)unused;
  char path[] = "/tmp/xcoll_test_auth_key_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "file secret\n", 12), 12);
  close(fd);
  unsetenv("XCOLL_AUTH_TOKEN");
  setenv("XCOLL_AUTH_FILE", path, 1);

  assert_int_equal(chmod(path, 0644), 0);
  assert_int_equal(xcoll_auth_reload(), XCOLL_ERR_ENV);
  assert_non_null(strstr(xcoll_last_error(), "chmod 600"));
  assert_int_equal(xcoll_auth_enabled(), 0);
  assert_int_equal(xcoll_auth_init(), XCOLL_ERR_ENV); /* remembered */

  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(xcoll_auth_reload(), XCOLL_SUCCESS);
  assert_int_equal(xcoll_auth_enabled(), 1);
  uint8_t nonce[XCOLL_AUTH_NONCE_BYTES] = {1}, from_file[32], from_token[32];
  xcoll_auth_prove("client", CONTEXT, nonce, nonce, from_file);

  /* the token with the same secret (the file's newline dropped) agrees */
  setenv("XCOLL_AUTH_TOKEN", "file secret", 1);
  assert_int_equal(xcoll_auth_reload(), XCOLL_ERR_ENV); /* both set */
  assert_non_null(strstr(xcoll_last_error(), "XCOLL_AUTH_FILE"));
  unsetenv("XCOLL_AUTH_FILE");
  assert_int_equal(xcoll_auth_reload(), XCOLL_SUCCESS);
  xcoll_auth_prove("client", CONTEXT, nonce, nonce, from_token);
  assert_memory_equal(from_file, from_token, sizeof from_file);
  unlink(path);
  unsetenv("XCOLL_AUTH_TOKEN");
  assert_int_equal(xcoll_auth_reload(), XCOLL_SUCCESS);
}

/* The store: a client with the wrong secret is refused and the server goes
 * on serving the right ones. */
static void test_store_stranger(void **unused) {
  (void)unused;
  use_token("store secret");
  xcoll_store_server *server = NULL;
  int port = 0;
  assert_int_equal(xcoll_store_server_start("127.0.0.1", 0, &server, &port),
                   XCOLL_SUCCESS);
  xcoll_store *good = NULL;
  assert_int_equal(xcoll_store_connect("127.0.0.1", port, 20, &good),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_store_set(good, "addr/0", "10.0.0.1:1234", 14),
                   XCOLL_SUCCESS);
  /* The stranger is a new process (fork then exec of this binary): a
   * forked copy of this one could inherit a lock that the store's server
   * thread held at the fork (its log line about the previous stranger) and
   * hang in its own first log line (seen in CI: the child hit its alarm). */
  char port_text[16];
  snprintf(port_text, sizeof port_text, "%d", port);
  for (int variant = 0; variant < 2; variant++) {
    char *argv[] = {"test_auth", "--stranger", port_text,
                    variant == 0 ? "guessed" : "none", NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  void *value = NULL;
  size_t bytes = 0;
  assert_int_equal(xcoll_store_get(good, "addr/0", &value, &bytes),
                   XCOLL_SUCCESS);
  assert_int_equal(bytes, 14);
  free(value);
  xcoll_store *again = NULL;
  assert_int_equal(xcoll_store_connect("127.0.0.1", port, 20, &again),
                   XCOLL_SUCCESS);
  xcoll_store_close(again);
  xcoll_store_close(good);
  xcoll_store_server_stop(server);
  use_token(NULL);
}

/* test_store_stranger's stranger: connect to the store on port with a
 * guessed secret or none; 0 when refused with XCOLL_ERR_PROTOCOL. */
static int stranger_main(const char *port_text, const char *secret) {
  alarm(30);
  unsetenv("XCOLL_AUTH_FILE");
  if (strcmp(secret, "guessed") == 0)
    setenv("XCOLL_AUTH_TOKEN", "guessed secret", 1);
  else
    unsetenv("XCOLL_AUTH_TOKEN");
  xcoll_auth_reload();
  xcoll_store *bad = NULL;
  xcoll_status s = xcoll_store_connect("127.0.0.1", atoi(port_text), 5, &bad);
  int ok = s == XCOLL_ERR_PROTOCOL && bad == NULL;
  if (!ok)
    fprintf(stderr, "stranger (%s secret): connect returned %s (%s)\n",
            secret, xcoll_strerror(s), xcoll_last_error());
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--stranger") == 0)
    return stranger_main(argv[2], argv[3]);
  unsetenv("XCOLL_AUTH_TOKEN");
  unsetenv("XCOLL_AUTH_FILE");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_secret),
      cmocka_unit_test(test_wrong_secret),
      cmocka_unit_test(test_secret_against_none),
      cmocka_unit_test(test_truncated_answer),
      cmocka_unit_test(test_replay),
      cmocka_unit_test(test_key_file),
      cmocka_unit_test(test_store_stranger),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
