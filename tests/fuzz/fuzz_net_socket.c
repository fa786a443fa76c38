/* fuzz_net_socket.c - libFuzzer target: what the socket net plugin
 * (net/socket/net_socket_wire.c, behind net_socket.c) reads from others:
 * the hello a listener judges before it keeps a connection, the header that
 * starts each received message, and the listen handle connect decodes.
 * Whatever the bytes: no crash or read out of bounds, every refusal says
 * why within its buffer; an accepted hello names a socket below nsocks that
 * is not yet there and is byte for byte what sock_hello_encode writes; an
 * accepted header announces at most the receive's capacity and re-encodes
 * to its bytes; an accepted handle has 1..SOCK_MAX_NSOCKS sockets and a port
 * and survives encode -> decode.
 *
 * Input: byte 0 % 3 picks the parser.
 *   0 hello:  1: nsocks = 1 + byte % SOCK_MAX_NSOCKS; 2-3: sockets already
 *             there (bit i: socket i, u16 little-endian); 4-7: the rank
 *             expected (u32); then SOCK_HELLO_BYTES (comm_id 7 and nonce
 *             0x0123456789abcdef are the listener's)
 *   1 header: 1-4: the posted receive's tag; 5-12: its capacity in bytes
 *             (u64); then SOCK_HEADER_BYTES
 *   2 handle: the handle's bytes (zero-padded to XCOLL_NET_HANDLE_MAXSIZE)
 * Seed corpus: tests/fuzz/corpus/fuzz_net_socket/ (tests/fuzz/make_seeds.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "net_socket_wire.h"

#define COMM_ID 7
#define NONCE 0x0123456789abcdefull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void hello(const uint8_t *data, size_t size) {
  if (size < 8 + SOCK_HELLO_BYTES)
    return;
  int nsocks = 1 + data[1] % SOCK_MAX_NSOCKS;
  int forming[SOCK_MAX_NSOCKS];
  for (int i = 0; i < SOCK_MAX_NSOCKS; i++)
    forming[i] = (sock_get_u16(data + 2) >> i) & 1 ? 100 + i : -1;
  int expected_rank = (int)sock_get_u32(data + 4);
  const uint8_t *in = data + 8;
  char why[256];
  why[0] = '\0';
  int index = -1;
  if (sock_hello_judge(in, NONCE, COMM_ID, expected_rank, nsocks, forming,
                       &index, why, sizeof why) != NULL) {
    if (why[0] == '\0' || strlen(why) >= sizeof why)
      abort();
    return;
  }
  if (index < 0 || index >= nsocks || forming[index] >= 0)
    abort();
  sock_hello h = {.index = index,
                  .nsocks = nsocks,
                  .rank = expected_rank,
                  .comm_id = COMM_ID,
                  .nonce = NONCE};
  uint8_t again[SOCK_HELLO_BYTES];
  sock_hello_encode(&h, again);
  if (memcmp(again, in, sizeof again) != 0)
    abort();
}

static void header(const uint8_t *data, size_t size) {
  if (size < 13 + SOCK_HEADER_BYTES)
    return;
  uint32_t expected_tag = sock_get_u32(data + 1);
  size_t capacity = (size_t)sock_get_u64(data + 5);
  const uint8_t *in = data + 13;
  uint32_t magic, tag;
  uint64_t bytes;
  sock_header_verdict verdict =
      sock_header_check(in, expected_tag, capacity, &magic, &tag, &bytes);
  if (verdict != SOCK_HEADER_OK)
    return;
  if (bytes > capacity || tag != expected_tag)
    abort();
  uint8_t again[SOCK_HEADER_BYTES];
  sock_header_encode(tag, bytes, again);
  if (memcmp(again, in, sizeof again) != 0)
    abort();
}

static void handle(const uint8_t *data, size_t size) {
  uint8_t in[XCOLL_NET_HANDLE_MAXSIZE];
  memset(in, 0, sizeof in);
  memcpy(in, data + 1, size - 1 < sizeof in ? size - 1 : sizeof in);
  sock_handle h;
  char why[512];
  why[0] = '\0';
  if (sock_handle_decode(in, &h, why, sizeof why) != NULL) {
    if (why[0] == '\0' || strlen(why) >= sizeof why)
      abort();
    return;
  }
  if (h.nsocks < 1 || h.nsocks > SOCK_MAX_NSOCKS || h.addr.sin_port == 0)
    abort();
  uint8_t again[XCOLL_NET_HANDLE_MAXSIZE];
  sock_handle_encode(&h, again);
  sock_handle back;
  if (sock_handle_decode(again, &back, why, sizeof why) != NULL ||
      back.nsocks != h.nsocks || back.nonce != h.nonce ||
      back.addr.sin_port != h.addr.sin_port ||
      back.addr.sin_addr.s_addr != h.addr.sin_addr.s_addr ||
      back.flags != h.flags ||
      memcmp(back.host_id, h.host_id, SOCK_HOST_ID_BYTES) != 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  switch (data[0] % 3) {
  case 0:
    hello(data, size);
    break;
  case 1:
    header(data, size);
    break;
  default:
    handle(data, size);
    break;
  }
  return 0;
}
