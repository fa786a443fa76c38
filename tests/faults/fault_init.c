/* fault_init.c - communicator creation must fail cleanly, in bounded time and
 * with a message that names the culprit, when the environment is wrong.
 * One process; tests/faults/fault_env.sh runs it with each bad environment.
 *
 *   fault_init --free-port
 *       print a TCP port that nothing listens on (bound, then released)
 *   fault_init [--occupy-master-port] [--collective] --expect STATUS
 *              [--contains TEXT]... [--min-s S] [--max-s S]
 *       call xcoll_comm_init_env() (and, with --collective, one allreduce
 *       when init succeeds: some variables are only read then) and check
 *       that the first failure has status STATUS (a number, or a list
 *       "5,10"), that its message contains every TEXT, and that it came
 *       between S seconds after the start. --occupy-master-port first binds
 *       and listens on a free port and exports it as MASTER_PORT, so that
 *       rank 0's store cannot have it.
 * Prints "PASS ..." or "FAIL ..." and exits 0 or 1. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "xcoll.h"

#define MAX_CONTAINS 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Bind a TCP socket to an ephemeral port on all addresses; listen if asked.
 * Returns the socket (the caller closes it) and the port in *port. */
static int bind_free_port(int do_listen, int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &len) != 0 ||
      (do_listen && listen(fd, 4) != 0)) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

static int status_in(xcoll_status st, const char *list) {
  char copy[64];
  snprintf(copy, sizeof copy, "%s", list);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save))
    if (atoi(tok) == (int)st)
      return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *expect = NULL;
  const char *contains[MAX_CONTAINS];
  int ncontains = 0, occupy = 0, collective = 0;
  double min_s = 0, max_s = 1e9;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--free-port")) {
      int port = 0;
      int fd = bind_free_port(0, &port);
      if (fd < 0) {
        perror("bind");
        return 2;
      }
      close(fd);
      printf("%d\n", port);
      return 0;
    } else if (!strcmp(argv[i], "--occupy-master-port")) {
      occupy = 1;
    } else if (!strcmp(argv[i], "--collective")) {
      collective = 1;
    } else if (!strcmp(argv[i], "--expect") && i + 1 < argc) {
      expect = argv[++i];
    } else if (!strcmp(argv[i], "--contains") && i + 1 < argc &&
               ncontains < MAX_CONTAINS) {
      contains[ncontains++] = argv[++i];
    } else if (!strcmp(argv[i], "--min-s") && i + 1 < argc) {
      min_s = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--max-s") && i + 1 < argc) {
      max_s = atof(argv[++i]);
    } else {
      fprintf(stderr, "fault_init: bad argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!expect) {
    fprintf(stderr, "fault_init: --expect is required\n");
    return 2;
  }

  int occupier = -1;
  char port_text[16] = "";
  if (occupy) {
    int port = 0;
    occupier = bind_free_port(1, &port);
    if (occupier < 0) {
      perror("fault_init: occupying a port");
      return 2;
    }
    snprintf(port_text, sizeof port_text, "%d", port);
    setenv("MASTER_PORT", port_text, 1);
  }

  double start = now_s();
  xcoll_comm_t comm = NULL;
  const char *where = "xcoll_comm_init_env";
  xcoll_status st = xcoll_comm_init_env(&comm);
  const char *msg = xcoll_last_error();
  if (st == XCOLL_SUCCESS && comm == NULL) {
    printf("FAIL: init returned success and a NULL communicator\n");
    return 1;
  }
  if (st != XCOLL_SUCCESS && comm != NULL) {
    printf("FAIL: init returned %s but left *comm non-NULL\n",
           xcoll_strerror(st));
    return 1;
  }
  if (st == XCOLL_SUCCESS && collective) {
    float x = 1, y = 0;
    where = "allreduce after a successful init";
    st = xcoll_allreduce(&x, &y, 1, XCOLL_FLOAT32, XCOLL_SUM, comm);
    msg = xcoll_comm_last_error(comm);
  }
  double elapsed = now_s() - start;
  int ok = st != XCOLL_SUCCESS && status_in(st, expect) && elapsed >= min_s &&
           elapsed <= max_s;
  const char *missing = NULL;
  for (int i = 0; i < ncontains; i++) {
    const char *want = strcmp(contains[i], "@PORT@") ? contains[i] : port_text;
    if (!strstr(msg, want)) {
      missing = want;
      ok = 0;
      break;
    }
  }
  printf("%s: %s returned %s (%d) after %.3f s (expected status %s in [%.1f, "
         "%.1f] s%s%s); message: %s\n",
         ok ? "PASS" : "FAIL", where, xcoll_strerror(st), (int)st, elapsed,
         expect, min_s, max_s, missing ? "; message lacks " : "",
         missing ? missing : "", msg);
  if (comm)
    xcoll_comm_destroy(comm);
  if (occupier >= 0)
    close(occupier);
  return ok ? 0 : 1;
}
