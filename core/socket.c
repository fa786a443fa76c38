/* socket.c - listen and connect-with-retry shared by the store and the tcp
 * backend (socket.h). */
#include "socket.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

double xcoll_socket_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int xcoll_socket_ms_left(double deadline) {
  double left = deadline - xcoll_socket_now();
  if (left <= 0) return 0;
  if (left > 1e6) return 1000000000;
  return (int)(left * 1000.0) + 1;
}

int xcoll_socket_listen(const struct sockaddr *sa, socklen_t len, int backlog) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (sa->sa_family == AF_INET6) /* "::" also takes IPv4 clients */
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, sa, len) != 0 || listen(fd, backlog) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int xcoll_socket_connect_once(const struct sockaddr *sa, socklen_t len,
                              double deadline) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int err = connect(fd, sa, len) == 0 ? 0 : errno;
  while (err == EINPROGRESS) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, xcoll_socket_ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    socklen_t err_len = sizeof err;
    if (n <= 0)
      err = n == 0 ? ETIMEDOUT : errno;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0)
      err = errno;
  }
  if (err == 0) return fd;
  close(fd);
  errno = err;
  return -1;
}

int xcoll_socket_retryable(int err) {
  return err == ECONNREFUSED || err == EAGAIN || err == ETIMEDOUT ||
         err == ECONNRESET || err == ENETUNREACH || err == EHOSTUNREACH ||
         err == EINTR;
}

int xcoll_socket_backoff(double *backoff_s, double deadline) {
  double left = deadline - xcoll_socket_now();
  if (left <= 0) return -1;
  double pause = *backoff_s < left ? *backoff_s : left;
  struct timespec ts = {(time_t)pause,
                        (long)((pause - (double)(time_t)pause) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  *backoff_s = *backoff_s * 2 > 1.0 ? 1.0 : *backoff_s * 2;
  return 0;
}
