/* stranger.h - the rules every listener that strangers can reach applies to
 * connections that have not yet proved the job's secret (the tcp backend's
 * mesh, the socket net plugin, the rendezvous store; docs/security.md,
 * "Strangers cannot starve a listener"):
 * how long such a connection may stay silent, how many of them a listener
 * and one peer address may hold, and how dropping them is logged (one line
 * a second, with a count, so that strangers cannot decide how much a rank
 * logs). The tables themselves live with each listener; this is what they
 * share. */
#ifndef XCOLL_CORE_STRANGER_H
#define XCOLL_CORE_STRANGER_H

/* Seconds a connection has, from the listener's accept, to deliver a valid
 * first message (one that carries the HMAC of the job's secret); then it is
 * closed. Measured on loopback with 4 ranks (xcoll-perf; the tcp mesh and
 * nccl_like's socket listeners over Unix and TCP; 12 jobs, 156 incoming
 * connections, a 2-core machine at load average 7 to 11): a rank's first
 * message arrived at most 0.53 ms after the accept (the tcp mesh: 0.01
 * ms), the whole handshake (accept to the client's proof) took at most
 * 4.3 ms. The rendezvous store, which closes a connection that has not
 * finished its whole authentication by then (71 connections of 4- and
 * 8-rank jobs, 3 at a time, load average 6): first message at most 4.7 ms
 * after the accept (median 0.007 ms), proof at most 5.2 ms (median 0.23
 * ms). 2 s is over 400 times the latter, so that a rank descheduled on
 * a loaded machine is not taken for a stranger, and short enough that a
 * silent stranger holds a slot only briefly. */
#define XCOLL_STRANGER_DEADLINE_S 2.0

/* Drops logged individually in a second before the rest are only counted. */
typedef struct xcoll_drop_tally {
  double window_start; /* seconds (monotonic) of the last logged drop; 0: none */
  unsigned long counted; /* drops since then that were not logged */
} xcoll_drop_tally;

/* Note one dropped connection at now (seconds, monotonic). Returns 1 when
 * the caller logs it now, and *also (may be NULL) receives how many drops
 * since the previous logged one were only counted (the caller adds "and N
 * more in the last second"); returns 0 when it is only counted. */
int xcoll_drop_tally_note(xcoll_drop_tally *t, double now,
                          unsigned long *also);

/* Drops counted and not yet reported (then forgotten): for a last line when
 * the listener closes. */
unsigned long xcoll_drop_tally_flush(xcoll_drop_tally *t);

#endif
