/* hold_listen.c - an LD_PRELOAD shim for tests/security/attack.py: in the
 * rank whose RANK equals XCOLL_TEST_HOLD_RANK, the first listen() waits
 * until the file XCOLL_TEST_HOLD_FILE exists (at most 60 s). A rank held
 * there has passed every step that needs all ranks before the backends'
 * listeners open, so the other ranks sit in their startup with their
 * listeners open until the test lets it go: the window in which a stranger
 * queues connections ahead of the ranks', made by a condition instead of a
 * guess at how long startup takes. Test code, not part of the library. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    struct timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 6000 && access(hold_file, F_OK) != 0; i++)
      nanosleep(&pause, NULL);
  }
  return real_listen(fd, backlog);
}
