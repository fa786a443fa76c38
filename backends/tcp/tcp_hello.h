/* tcp_hello.h - the HELLO that introduces every tcp backend connection
 * (tcp_connect.c): its encoding and the check of one read from the network,
 * as pure functions over bytes, so that tests/fuzz/fuzz_tcp_hello.c can feed
 * the check arbitrary bytes without sockets. Internal to the tcp backend.
 *
 * A HELLO is a wire header (core/wire.h) of kind XCOLL_WIRE_HELLO, length 0,
 * the communicator's id, sender = the calling rank, tag = (receiver rank
 * << 32) | socket index, and a zero fingerprint. */
#ifndef XCOLL_TCP_HELLO_H
#define XCOLL_TCP_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* What a rank knows about itself when it judges a HELLO. */
typedef struct tcp_hello_world {
  uint64_t comm_id;
  int rank;       /* this rank, in [0, world_size) */
  int world_size; /* ranks in the communicator */
  int nsocks;     /* sockets per peer, in [1, TCP_MAX_SOCKS] */
} tcp_hello_world;

/* Write the HELLO that world->rank sends for to_rank's socket index into out
 * (XCOLL_WIRE_HEADER_BYTES bytes). */
void xcoll_tcp_hello_encode(const tcp_hello_world *world, int to_rank,
                            int index, uint8_t out[XCOLL_WIRE_HEADER_BYTES]);

/* Check a HELLO read from the network (bytes: XCOLL_WIRE_HEADER_BYTES of
 * them). Every field is compared as the unsigned value it is on the wire, so
 * that no sign conversion can turn a huge value into a negative index.
 * expected_peer < 0: an incoming connection, which must come from a rank
 * below ours, for any socket below nsocks; else the rank we connected to,
 * with socket expected_index. Returns 0 with *peer in [0, world_size) other
 * than world->rank and *index in [0, nsocks), or -1 with why (why_bytes long)
 * naming the first field that is wrong. */
int xcoll_tcp_hello_check(const tcp_hello_world *world, const uint8_t *bytes,
                          int expected_peer, int expected_index, int *peer,
                          int *index, char *why, size_t why_bytes);

#endif
