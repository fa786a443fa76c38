/* socket.h - the TCP steps the rendezvous store and the tcp backend both
 * need: listen on an address, and connect with retries while the other side
 * may not be listening yet. One copy, so that a fix (a new errno worth a
 * retry, a backoff change) reaches both. */
#ifndef XCOLL_CORE_SOCKET_H
#define XCOLL_CORE_SOCKET_H

#include <sys/socket.h>

/* Bind a non-blocking, close-on-exec TCP socket to sa (len bytes) with
 * SO_REUSEADDR (an IPv6 wildcard also takes IPv4 clients) and listen with
 * backlog connections. Returns the fd, or -1 with errno set (EADDRINUSE,
 * EADDRNOTAVAIL, ...). */
int xcoll_socket_listen(const struct sockaddr *sa, socklen_t len, int backlog);

/* One connect to sa that waits up to deadline (CLOCK_MONOTONIC seconds, see
 * xcoll_socket_now). Returns a connected non-blocking, close-on-exec fd, or
 * -1 with errno set (ETIMEDOUT at the deadline, ECONNREFUSED...). */
int xcoll_socket_connect_once(const struct sockaddr *sa, socklen_t len,
                              double deadline);

/* 1 when a failed connect with this errno is worth retrying: nobody listens
 * there yet (the peer is starting), or a transient network state. */
int xcoll_socket_retryable(int err);

/* Sleep before the next connect attempt: *backoff_s (seconds), doubled for
 * the next time up to 1 s, never past deadline. Returns 0, or -1 when the
 * deadline has passed. Retry pacing, not synchronisation. */
int xcoll_socket_backoff(double *backoff_s, double deadline);

/* CLOCK_MONOTONIC in seconds. */
double xcoll_socket_now(void);
/* Milliseconds from now to deadline for poll(), at least 0. */
int xcoll_socket_ms_left(double deadline);

#endif
