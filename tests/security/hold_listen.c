/* hold_listen.c - an LD_PRELOAD shim for tests/security/attack.py: in the
 * rank whose RANK equals XCOLL_TEST_HOLD_RANK, the first listen() waits
 * until the file XCOLL_TEST_HOLD_FILE exists (at most 60 s). A rank held
 * there has passed every step that needs all ranks before the backends'
 * listeners open, so the other ranks sit in their startup with their
 * listeners open until the test lets it go: the window in which a stranger
 * queues connections ahead of the ranks', made by a condition instead of a
 * guess at how long startup takes.
 * With XCOLL_TEST_HOLD_CONNECT=1 instead, every rank (RANK set) waits for
 * the same file at its first connect() to an IPv4 or IPv6 address: that is
 * its connection to the rendezvous store (rank 0 has started the store's
 * listener by then), so that strangers crowd the store before any rank
 * reaches it. Test code, not part of the library. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void wait_for_hold_file(const char *hold_file) {
  struct timespec pause = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 6000 && access(hold_file, F_OK) != 0; i++)
    nanosleep(&pause, NULL);
}

int listen(int fd, int backlog) {
  static int (*real_listen)(int, int);
  static int held;
  if (real_listen == NULL)
    real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
  const char *rank = getenv("RANK");
  const char *hold_rank = getenv("XCOLL_TEST_HOLD_RANK");
  const char *hold_file = getenv("XCOLL_TEST_HOLD_FILE");
  if (!held && rank && hold_rank && hold_file && strcmp(rank, hold_rank) == 0) {
    held = 1;
    wait_for_hold_file(hold_file);
  }
  return real_listen(fd, backlog);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  static int (*real_connect)(int, const struct sockaddr *, socklen_t);
  static int held;
  if (real_connect == NULL)
    real_connect = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(
        RTLD_NEXT, "connect");
  const char *hold = getenv("XCOLL_TEST_HOLD_CONNECT");
  const char *hold_file = getenv("XCOLL_TEST_HOLD_FILE");
  if (!held && getenv("RANK") && hold && strcmp(hold, "1") == 0 && hold_file &&
      addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6)) {
    held = 1;
    wait_for_hold_file(hold_file);
  }
  return real_connect(fd, addr, len);
}
