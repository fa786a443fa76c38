/* fuzz_tcp_hello.c - libFuzzer target: the HELLO that introduces a tcp
 * backend connection (backends/tcp/tcp_hello.c, xcoll_tcp_hello_check), as
 * a rank judges it before it reads anything else from a stranger or from the
 * peer it called. Whatever the bytes, the check must not crash or read out
 * of bounds, its reason must fit its buffer, and a HELLO it accepts must name
 * a peer and socket inside this rank's arrays (peer in [0, world_size), not
 * this rank, below it for an incoming connection, the one called for a
 * reply; socket below nsocks) and be byte for byte the HELLO that peer's
 * encoder writes: nothing is accepted that a real rank could not have sent.
 *
 * Input: 9 bytes of setting, then the 64-byte header:
 *   0-1  world_size - 1 (u16, little-endian)   2-3  rank (u16) % world_size
 *   4    nsocks = 1 + byte % TCP_MAX_SOCKS
 *   5    bit 0: a reply to a connection we opened (else an incoming one);
 *        bit 1: recompute the header's checksum first (so that the fuzzer
 *        reaches the field checks behind it)
 *   6-7  the rank we called (u16) % world_size   8  its socket % nsocks
 * Seed corpus: tests/fuzz/corpus/fuzz_tcp_hello/ (tests/fuzz/make_seeds.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tcp.h"
#include "tcp_hello.h"
#include "wire.h"

#define SETTING_BYTES 9

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < SETTING_BYTES + XCOLL_WIRE_HEADER_BYTES)
    return 0;
  tcp_hello_world world;
  world.comm_id = 7;
  world.world_size = 1 + (data[0] | data[1] << 8);
  world.rank = (data[2] | data[3] << 8) % world.world_size;
  world.nsocks = 1 + data[4] % TCP_MAX_SOCKS;
  int reply = data[5] & 1;
  int expected_peer = -1, expected_index = -1;
  if (reply) {
    expected_peer = (data[6] | data[7] << 8) % world.world_size;
    expected_index = data[8] % world.nsocks;
  }
  uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
  memcpy(bytes, data + SETTING_BYTES, sizeof bytes);
  if (data[5] & 2) {
    xcoll_wire_header h;
    xcoll_wire_decode(bytes, sizeof bytes, &h, NULL, 0);
    xcoll_wire_encode(&h, bytes); /* same fields, checksum recomputed */
  }

  char why[XCOLL_WIRE_WHY_BYTES];
  int peer = -1, index = -1;
  why[0] = '\0';
  if (xcoll_tcp_hello_check(&world, bytes, expected_peer, expected_index, &peer,
                            &index, why, sizeof why) != 0) {
    if (why[0] == '\0' || strlen(why) >= sizeof why)
      abort();
    return 0;
  }
  if (peer < 0 || peer >= world.world_size || peer == world.rank)
    abort();
  if (index < 0 || index >= world.nsocks)
    abort();
  if (!reply && peer >= world.rank)
    abort();
  if (reply && (peer != expected_peer || index != expected_index))
    abort();
  tcp_hello_world sender = world;
  sender.rank = peer;
  uint8_t again[XCOLL_WIRE_HEADER_BYTES];
  xcoll_tcp_hello_encode(&sender, world.rank, index, again);
  if (memcmp(again, bytes, sizeof again) != 0)
    abort();
  return 0;
}
