/* tcp_connect.c - how the tcp backend's ranks find and connect to each
 * other: pick the interface (XCOLL_SOCKET_IFNAME, or the one that reaches the
 * master), listen on an ephemeral port, publish "host:port" in the store,
 * then build a full mesh of nsocks connections per pair, each introduced by a
 * checked HELLO header. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "error.h"
#include "log.h"
#include "netaddr.h"
#include "store.h"
#include "tcp.h"

double xcoll_tcp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Remaining milliseconds until deadline (seconds), at least 0. */
static int ms_left(double deadline) {
  double left = deadline - xcoll_tcp_now();
  if (left <= 0) return 0;
  if (left > 1e6) return 1000000000;
  return (int)(left * 1000.0) + 1;
}

/* The interface rule lives in core/netaddr.c, shared with the socket net
 * plugin. */
static xcoll_status choose_address(tcp_state *st, struct in_addr *bind_addr,
                                   struct in_addr *publish_addr,
                                   const char **why) {
  xcoll_comm *comm = st->comm;
  xcoll_netaddr chosen;
  char err[768];
  xcoll_status s = xcoll_netaddr_choose(
      comm->options.socket_ifname, comm->master_addr, comm->master_port, "tcp",
      &chosen, err, sizeof err);
  if (s != XCOLL_SUCCESS) return xcoll_error(comm, s, "%s", err);
  *bind_addr = chosen.bind_addr;
  *publish_addr = chosen.publish_addr;
  *why = chosen.why;
  return XCOLL_SUCCESS;
}

static xcoll_status start_listening(tcp_state *st) {
  struct in_addr bind_addr, publish_addr;
  const char *why = "";
  xcoll_status s = choose_address(st, &bind_addr, &publish_addr, &why);
  if (s != XCOLL_SUCCESS) return s;
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &bind_addr, ip, sizeof ip);

  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "tcp: socket() for the listener failed: %s",
                       strerror(errno));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr = bind_addr;
  sa.sin_port = 0;
  socklen_t len = sizeof sa;
  /* The backlog holds every lower rank's connections until we accept. */
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(fd, 4096) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    int err = errno;
    close(fd);
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "tcp: cannot listen on %s (an ephemeral port): %s; set "
                       "XCOLL_SOCKET_IFNAME to another interface",
                       ip, strerror(err));
  }
  st->listen_fd = fd;
  char pub[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &publish_addr, pub, sizeof pub);
  snprintf(st->my_addr, sizeof st->my_addr, "%s:%d", pub, ntohs(sa.sin_port));
  XCOLL_INFO("tcp: comm %" PRIu64 " rank %d listens on %s:%d, published as "
             "%s (interface chosen by %s)",
             st->comm_id, st->rank, ip, ntohs(sa.sin_port), st->my_addr, why);
  return XCOLL_SUCCESS;
}

static int parse_addr(const char *text, struct sockaddr_in *sa) {
  char host[TCP_ADDR_BYTES];
  snprintf(host, sizeof host, "%s", text);
  char *colon = strrchr(host, ':');
  if (!colon) return -1;
  *colon = '\0';
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!end || *end || port <= 0 || port > 65535) return -1;
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

/* Connect to addr, retrying refused connections until deadline. Returns the
 * fd (blocking, CLOEXEC) or -1 with errno set (ETIMEDOUT at the deadline). */
static int connect_until(const struct sockaddr_in *sa, double deadline) {
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    int rc = connect(fd, (const struct sockaddr *)sa, sizeof *sa);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int n = poll(&p, 1, ms_left(deadline));
      socklen_t len = sizeof err;
      if (n <= 0) err = n == 0 ? ETIMEDOUT : errno;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    if (err == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    close(fd);
    if ((err != ECONNREFUSED && err != EAGAIN && err != ETIMEDOUT &&
         err != ECONNRESET) ||
        xcoll_tcp_now() >= deadline) {
      errno = xcoll_tcp_now() >= deadline ? ETIMEDOUT : err;
      return -1;
    }
    /* Back off before retrying: the peer's listener may not exist yet. */
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
}

/* Read exactly bytes from a blocking fd before deadline. 0, or -1 with errno
 * (ETIMEDOUT, or 0 = EOF mapped to ECONNRESET). */
static int read_until(int fd, void *buf, size_t bytes, double deadline) {
  size_t got = 0;
  while (got < bytes) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    ssize_t r = recv(fd, (char *)buf + got, bytes - got, MSG_DONTWAIT);
    if (r == 0) {
      errno = ECONNRESET;
      return -1;
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

static int send_hello(tcp_state *st, int fd, int to_rank, int index) {
  uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
  xcoll_wire_header h =
      xcoll_wire_make(XCOLL_WIRE_HELLO, st->comm_id,
                      ((uint64_t)(uint32_t)to_rank << 32) | (uint32_t)index, 0,
                      st->rank);
  xcoll_wire_encode(&h, bytes);
  return send(fd, bytes, sizeof bytes, MSG_NOSIGNAL) == (ssize_t)sizeof bytes
             ? 0
             : -1;
}

/* Read and check a HELLO on fd. expected_peer < 0 accepts any lower rank. */
static xcoll_status recv_hello(tcp_state *st, int fd, int expected_peer,
                               int expected_index, const char *who,
                               double deadline, int *peer, int *index) {
  uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
  if (read_until(fd, bytes, sizeof bytes, deadline) != 0) {
    int err = errno;
    if (err == ETIMEDOUT)
      return xcoll_error(st->comm, XCOLL_ERR_TIMEOUT,
                         "tcp: rank %d waited %.0f s for the HELLO of %s; is "
                         "that rank running and in the same communicator?",
                         st->rank, st->timeout_s, who);
    return xcoll_error(st->comm, XCOLL_ERR_REMOTE,
                       "tcp: rank %d lost the connection to %s during the "
                       "HELLO exchange: %s; see that rank's log",
                       st->rank, who, strerror(err));
  }
  xcoll_wire_header h;
  char why[XCOLL_WIRE_WHY_BYTES];
  xcoll_wire_decode(bytes, sizeof bytes, &h, why, sizeof why);
  int bad = xcoll_wire_check(&h, st->comm_id, expected_peer, XCOLL_WIRE_ANY,
                             0, 0, why, sizeof why) != 0;
  if (!bad && h.kind != XCOLL_WIRE_HELLO) {
    bad = 1;
    snprintf(why, sizeof why, "a %s message instead of HELLO",
             xcoll_wire_kind_name(h.kind));
  }
  if (bad) {
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "tcp: rank %d got a bad HELLO from %s: %s", st->rank,
                       who, why);
  }
  int to_rank = (int)(h.tag >> 32);
  int idx = (int)(h.tag & 0xffffffffu);
  int from = (int)h.sender;
  if (to_rank != st->rank || idx >= st->nsocks ||
      (expected_index >= 0 && idx != expected_index) || from >= st->world_size ||
      (expected_peer < 0 && from >= st->rank))
    return xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                       "tcp: rank %d got a HELLO from %s meant for rank %d "
                       "socket %d from rank %d (expected socket < %d from a "
                       "rank below %d): mismatched XCOLL_NSOCKS_PERPEER or a "
                       "stray connection",
                       st->rank, who, to_rank, idx, from, st->nsocks, st->rank);
  *peer = from;
  *index = idx;
  return XCOLL_SUCCESS;
}

static void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  /* Fixed buffers instead of autotuning: with autotuning (or SO_SNDBUF
   * alone), 4 of 7 launches at P=2 on loopback ran at half the speed for
   * 512 KiB-2 MiB; with both set, 0 of 4, and 4-64 MiB went from about 2 to
   * 2.7-4 GB/s. The kernel caps
   * the value at net.core.[rw]mem_max (and doubles it); failure is
   * harmless, autotuning then stays. */
  int bytes = TCP_SOCKET_BUFFER_BYTES;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

xcoll_status xcoll_tcp_connect_mesh(tcp_state *st) {
  xcoll_comm *comm = st->comm;
  xcoll_status s = start_listening(st);
  if (s != XCOLL_SUCCESS) return s;
  if (st->world_size == 1) return XCOLL_SUCCESS;

  /* Every rank's "host:port", NUL-padded to TCP_ADDR_BYTES, in rank order. */
  char(*addrs)[TCP_ADDR_BYTES] = calloc((size_t)st->world_size, TCP_ADDR_BYTES);
  if (addrs == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "tcp: no memory for %d addresses", st->world_size);
  snprintf(addrs[st->rank], TCP_ADDR_BYTES, "%s", st->my_addr);
  s = xcoll_bootstrap_allgather(comm, "tcp-addr", addrs[st->rank],
                                TCP_ADDR_BYTES, addrs);
  for (int p = 0; p < st->world_size && s == XCOLL_SUCCESS; p++) {
    if (p == st->rank) continue;
    if (memchr(addrs[p], '\0', TCP_ADDR_BYTES) == NULL || addrs[p][0] == '\0')
      s = xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                      "tcp: rank %d's published address is not a host:port "
                      "string",
                      p);
    else
      memcpy(st->peers[p].addr, addrs[p], TCP_ADDR_BYTES);
  }
  free(addrs);
  if (s != XCOLL_SUCCESS) return s;

  double deadline = xcoll_tcp_now() + st->timeout_s;
  /* Lower rank connects to higher: our connects complete in the peers'
   * listen backlogs, so nobody waits for anyone's accept. */
  for (int p = st->rank + 1; p < st->world_size; p++) {
    struct sockaddr_in sa;
    if (parse_addr(st->peers[p].addr, &sa) != 0)
      return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                         "tcp: rank %d published the address \"%s\", which is "
                         "not IPv4 host:port",
                         p, st->peers[p].addr);
    for (int i = 0; i < st->nsocks; i++) {
      int fd = connect_until(&sa, deadline);
      if (fd < 0 || send_hello(st, fd, p, i) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return xcoll_error(comm,
                           err == ETIMEDOUT ? XCOLL_ERR_TIMEOUT
                                            : XCOLL_ERR_REMOTE,
                           "tcp: rank %d cannot connect to rank %d at %s: %s "
                           "(check XCOLL_SOCKET_IFNAME and firewalls; is rank "
                           "%d alive?)",
                           st->rank, p, st->peers[p].addr, strerror(err), p);
      }
      st->peers[p].socks[i].fd = fd;
    }
  }
  int expected = st->rank * st->nsocks;
  for (int accepted = 0; accepted < expected; accepted++) {
    struct pollfd pl = {.fd = st->listen_fd, .events = POLLIN};
    int n = poll(&pl, 1, ms_left(deadline));
    if (n < 0 && errno == EINTR) {
      accepted--;
      continue;
    }
    if (n <= 0) {
      char missing[256] = "";
      size_t used = 0;
      for (int p = 0; p < st->rank && used < sizeof missing - 16; p++)
        for (int i = 0; i < st->nsocks; i++)
          if (st->peers[p].socks[i].fd < 0) {
            used += (size_t)snprintf(missing + used, sizeof missing - used,
                                     "%s%d", used ? ", " : "", p);
            break;
          }
      return xcoll_error(comm, XCOLL_ERR_TIMEOUT,
                         "tcp: rank %d waited %.0f s for connections from "
                         "rank(s) %s at %s; are they running?",
                         st->rank, st->timeout_s, missing, st->my_addr);
    }
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    int fd = accept4(st->listen_fd, (struct sockaddr *)&from, &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) {
        accepted--;
        continue;
      }
      return xcoll_error(comm, XCOLL_ERR_SYSTEM, "tcp: accept on %s failed: %s",
                         st->my_addr, strerror(errno));
    }
    char who[TCP_ADDR_BYTES + 32], ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
    snprintf(who, sizeof who, "a connection from %s:%d", ip, ntohs(from.sin_port));
    int peer = -1, index = -1;
    s = recv_hello(st, fd, -1, -1, who, deadline, &peer, &index);
    if (s == XCOLL_SUCCESS && st->peers[peer].socks[index].fd >= 0)
      s = xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                      "tcp: rank %d got a second connection for socket %d "
                      "from rank %d (%s)",
                      st->rank, index, peer, who);
    if (s == XCOLL_SUCCESS && send_hello(st, fd, peer, index) != 0)
      s = xcoll_error(comm, XCOLL_ERR_REMOTE,
                      "tcp: rank %d could not answer rank %d's HELLO: %s",
                      st->rank, peer, strerror(errno));
    if (s != XCOLL_SUCCESS) {
      close(fd);
      return s;
    }
    st->peers[peer].socks[index].fd = fd;
  }
  for (int p = st->rank + 1; p < st->world_size; p++) {
    for (int i = 0; i < st->nsocks; i++) {
      char who[TCP_ADDR_BYTES + 32];
      snprintf(who, sizeof who, "rank %d (%s)", p, st->peers[p].addr);
      int peer, index;
      s = recv_hello(st, st->peers[p].socks[i].fd, p, i, who, deadline, &peer,
                     &index);
      if (s != XCOLL_SUCCESS) return s;
    }
  }
  for (int k = 0; k < st->nsockets; k++) tune_socket(st->sockets[k].fd);
  close(st->listen_fd);
  st->listen_fd = -1;
  if (xcoll_log_level_get() >= XCOLL_LOG_INFO) {
    for (int p = 0; p < st->world_size; p++) {
      if (p == st->rank) continue;
      struct sockaddr_in local;
      socklen_t len = sizeof local;
      getsockname(st->peers[p].socks[0].fd, (struct sockaddr *)&local, &len);
      XCOLL_INFO("tcp: comm %" PRIu64 " rank %d <-> rank %d at %s: %d "
                 "socket(s), first local port %d, %s",
                 st->comm_id, st->rank, p, st->peers[p].addr, st->nsocks,
                 ntohs(local.sin_port),
                 p > st->rank ? "we connected" : "it connected");
    }
  }
  return XCOLL_SUCCESS;
}

/* close() on a socket with unread bytes sends RST instead of FIN, and a RST
 * makes the peer's kernel drop what it has not read yet: the ABORT or BYE we
 * just sent would be lost, and the peer would blame this rank for a failure
 * that started elsewhere. So: send FIN first (SHUT_WR), then read and discard
 * until each peer closes too. A broken communicator waits for that up to
 * TCP_CLOSE_DRAIN_S (peers stop sending once they read our ABORT); a clean
 * one only discards what is already there. */
#define TCP_CLOSE_DRAIN_S 1.0
static void drain_before_close(tcp_state *st) {
  struct pollfd *pfds = calloc((size_t)st->nsockets, sizeof *pfds);
  if (!pfds) return;
  for (int k = 0; k < st->nsockets; k++) {
    pfds[k].fd = st->sockets[k].fd;
    pfds[k].events = POLLIN;
    if (pfds[k].fd >= 0) (void)shutdown(pfds[k].fd, SHUT_WR);
  }
  double deadline = xcoll_tcp_now() + (st->broken ? TCP_CLOSE_DRAIN_S : 0.0);
  char sink[65536];
  for (;;) {
    int open_sockets = 0;
    for (int k = 0; k < st->nsockets; k++) {
      if (pfds[k].fd < 0) continue;
      ssize_t r;
      while ((r = recv(pfds[k].fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        pfds[k].fd = -1; /* EOF or reset: nothing more will come */
      else
        open_sockets++;
    }
    double left = deadline - xcoll_tcp_now();
    if (open_sockets == 0 || left <= 0) break;
    (void)poll(pfds, (nfds_t)st->nsockets, (int)(left * 1000.0) + 1);
  }
  free(pfds);
}

void xcoll_tcp_close_sockets(tcp_state *st) {
  if (!st->broken) {
    /* BYE tells peers that the EOF which follows is a normal close, not a
     * crash. Only at a message boundary: mid-message it would corrupt the
     * stream, and then the EOF is an error anyway. */
    uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
    xcoll_wire_header h =
        xcoll_wire_make(XCOLL_WIRE_BYE, st->comm_id, 0, 0, st->rank);
    xcoll_wire_encode(&h, bytes);
    for (int k = 0; k < st->nsockets; k++) {
      tcp_socket *s = &st->sockets[k];
      if (s->fd >= 0 && !s->tx_head && !s->tx_broken)
        (void)send(s->fd, bytes, sizeof bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  drain_before_close(st);
  for (int k = 0; k < st->nsockets; k++) {
    if (st->sockets[k].fd >= 0) close(st->sockets[k].fd);
    st->sockets[k].fd = -1;
  }
  if (st->listen_fd >= 0) close(st->listen_fd);
  st->listen_fd = -1;
}
