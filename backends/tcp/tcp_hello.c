/* tcp_hello.c - encoding and checking the tcp backend's HELLO (tcp_hello.h).
 * Pure functions over bytes: no sockets, no allocation. */
#include "tcp_hello.h"

#include <inttypes.h>
#include <stdio.h>

void xcoll_tcp_hello_encode(const tcp_hello_world *world, int to_rank,
                            int index, uint8_t out[XCOLL_WIRE_HEADER_BYTES]) {
  xcoll_wire_header h = xcoll_wire_make(
      XCOLL_WIRE_HELLO, world->comm_id,
      ((uint64_t)(uint32_t)to_rank << 32) | (uint32_t)index, 0, world->rank);
  xcoll_wire_encode(&h, out);
}

int xcoll_tcp_hello_check(const tcp_hello_world *world, const uint8_t *bytes,
                          int expected_peer, int expected_index, int *peer,
                          int *index, char *why, size_t why_bytes) {
  xcoll_wire_header h;
  xcoll_wire_decode(bytes, XCOLL_WIRE_HEADER_BYTES, &h, why, why_bytes);
  if (xcoll_wire_check(&h, world->comm_id, expected_peer, XCOLL_WIRE_ANY, 0, 0,
                       why, why_bytes) != 0)
    return -1;
  if (h.kind != XCOLL_WIRE_HELLO) {
    snprintf(why, why_bytes, "a %s message instead of HELLO",
             xcoll_wire_kind_name(h.kind));
    return -1;
  }
  /* Only DATA carries a fingerprint (wire.h): a HELLO with one was not
   * written by xcoll_tcp_hello_encode. */
  for (size_t i = 0; i < sizeof h.fingerprint; i++)
    if (h.fingerprint[i] != 0) {
      snprintf(why, why_bytes,
               "a HELLO whose fingerprint bytes are not zero (byte %zu is "
               "0x%02x): not sent by an xcoll rank",
               i, h.fingerprint[i]);
      return -1;
    }
  uint32_t to_rank = (uint32_t)(h.tag >> 32);
  uint32_t idx = (uint32_t)(h.tag & 0xffffffffu);
  uint32_t from = h.sender;
  uint32_t below =
      expected_peer < 0 ? (uint32_t)world->rank : (uint32_t)world->world_size;
  if (to_rank != (uint32_t)world->rank) {
    snprintf(why, why_bytes,
             "HELLO meant for rank %" PRIu32 ", but this is rank %d", to_rank,
             world->rank);
    return -1;
  }
  if (from >= below || from == (uint32_t)world->rank) {
    snprintf(why, why_bytes,
             "HELLO from rank %" PRIu32 ", expected a rank in [0, %" PRIu32
             ") other than %d",
             from, below, world->rank);
    return -1;
  }
  if (idx >= (uint32_t)world->nsocks ||
      (expected_index >= 0 && idx != (uint32_t)expected_index)) {
    snprintf(why, why_bytes,
             "HELLO for socket %" PRIu32 ", expected %s %d (mismatched "
             "XCOLL_NSOCKS_PERPEER?)",
             idx, expected_index >= 0 ? "socket" : "a socket below",
             expected_index >= 0 ? expected_index : world->nsocks);
    return -1;
  }
  *peer = (int)from;
  *index = (int)idx;
  return 0;
}
