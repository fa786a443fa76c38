/* make_seeds.c - writes the seed corpora of fuzz_tcp_hello,
 * fuzz_store_join and fuzz_net_socket with the real encoders
 * (backends/tcp/tcp_hello.c, core/store_codec.h,
 * net/socket/net_socket_wire.c), so that the fuzzers start from messages a rank
 * really sends and go deep at once. Built with the fuzz targets
 * (make_fuzz_seeds); build-fuzz/tests/fuzz/make_fuzz_seeds tests/fuzz/corpus
 * rewrites tests/fuzz/corpus/fuzz_tcp_hello/, fuzz_store_join/ and
 * fuzz_net_socket/. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "net.h"
#include "net_socket_wire.h"
#include "store_codec.h"
#include "tcp_hello.h"
#include "wire.h"

static const char *root;
static int failed;

static void write_seed(const char *target, const char *name,
                       const uint8_t *bytes, size_t size) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", root, target);
  if (mkdir(path, 0755) != 0 && errno != EEXIST)
    failed = 1;
  snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, size, f) != size)
    failed = 1;
  if (f && fclose(f) != 0)
    failed = 1;
}

/* ---- fuzz_tcp_hello: 9 setting bytes, then the HELLO ---- */

static void hello_seed(const char *name, int world_size, int rank, int nsocks,
                       int reply, int called, int called_index, int from,
                       int to, int index, int fix_checksum,
                       int fingerprint_byte) {
  uint8_t in[9 + XCOLL_WIRE_HEADER_BYTES];
  in[0] = (uint8_t)(world_size - 1);
  in[1] = (uint8_t)((world_size - 1) >> 8);
  in[2] = (uint8_t)rank;
  in[3] = (uint8_t)(rank >> 8);
  in[4] = (uint8_t)(nsocks - 1);
  in[5] = (uint8_t)((reply ? 1 : 0) | (fix_checksum ? 2 : 0));
  in[6] = (uint8_t)called;
  in[7] = (uint8_t)(called >> 8);
  in[8] = (uint8_t)called_index;
  tcp_hello_world sender = {
      .comm_id = 7, .rank = from, .world_size = world_size, .nsocks = nsocks};
  xcoll_tcp_hello_encode(&sender, to, index, in + 9);
  in[9 + 36 + 13] = (uint8_t)fingerprint_byte; /* 36: the fingerprint */
  write_seed("fuzz_tcp_hello", name, in, sizeof in);
}

/* ---- fuzz_store_join: records of (slot byte, request) ---- */

typedef struct stream {
  uint8_t bytes[4096];
  size_t size;
} stream;

static void put_request(stream *s, int slot, uint16_t kind, const char *key,
                        const uint8_t *value, uint32_t value_bytes) {
  size_t key_bytes = key ? strlen(key) : 0;
  store_header h = {STORE_MAGIC, STORE_VERSION, kind, (uint32_t)key_bytes,
                    value_bytes};
  s->bytes[s->size++] = (uint8_t)slot;
  store_header_encode(&h, s->bytes + s->size);
  s->size += STORE_HEADER_BYTES;
  if (key_bytes)
    memcpy(s->bytes + s->size, key, key_bytes);
  s->size += key_bytes;
  if (value_bytes)
    memcpy(s->bytes + s->size, value, value_bytes);
  s->size += value_bytes;
}

/* The JOIN xcoll_store_join (store_client.c) sends. */
static void put_join(stream *s, int slot, const char *job, uint32_t world_size,
                     uint32_t rank) {
  uint8_t value[8];
  put_u32(value, world_size);
  put_u32(value + 4, rank);
  put_request(s, slot, STORE_JOIN, job, value, sizeof value);
}

static void join_seeds(void) {
  stream s = {.size = 0};
  for (int r = 0; r < 4; r++)
    put_join(&s, r, "job-42", 4, (uint32_t)r);
  for (int r = 0; r < 4; r++)
    put_request(&s, r, STORE_LEAVE, NULL, NULL, 0);
  write_seed("fuzz_store_join", "world_of_4", s.bytes, s.size);

  s.size = 0;
  put_join(&s, 0, "job-42", 4, 0);
  put_join(&s, 1, "job-42", 4, 0);
  write_seed("fuzz_store_join", "duplicate_rank", s.bytes, s.size);

  s.size = 0;
  put_join(&s, 0, "job-42", 4, 0);
  put_join(&s, 1, "job-42", 5, 1);
  write_seed("fuzz_store_join", "world_size_mismatch", s.bytes, s.size);

  s.size = 0;
  put_join(&s, 0, "job-42", 2, 0);
  put_join(&s, 1, "job-43", 2, 1);
  write_seed("fuzz_store_join", "second_job", s.bytes, s.size);

  s.size = 0;
  put_join(&s, 0, "job-42", 2, 0);
  put_join(&s, 0, "job-42", 2, 1);
  write_seed("fuzz_store_join", "join_twice", s.bytes, s.size);

  s.size = 0; /* rank 1 leaves, a new process on a new connection takes it */
  put_join(&s, 0, "job-42", 2, 0);
  put_join(&s, 1, "job-42", 2, 1);
  put_request(&s, 1, STORE_LEAVE, NULL, NULL, 0);
  put_join(&s, 2, "job-42", 2, 1);
  put_join(&s, 0x80 | 1, "job-42", 2, 1);
  write_seed("fuzz_store_join", "rejoin_after_leave", s.bytes, s.size);

  s.size = 0;
  put_join(&s, 0, "job-42", 2, 2);
  put_join(&s, 1, "job-42", 0, 0);
  write_seed("fuzz_store_join", "rank_out_of_range", s.bytes, s.size);
}

/* ---- fuzz_net_socket: a selector byte, settings, the bytes ---- */

static void net_hello_seed(const char *name, int nsocks, uint16_t present,
                           int expected_rank, int index, uint64_t nonce,
                           uint8_t reserved) {
  uint8_t in[8 + SOCK_HELLO_BYTES];
  in[0] = 0;
  in[1] = (uint8_t)(nsocks - 1);
  sock_put_u16(in + 2, present);
  sock_put_u32(in + 4, (uint32_t)expected_rank);
  sock_hello h = {.index = index,
                  .nsocks = nsocks,
                  .rank = expected_rank,
                  .comm_id = 7,
                  .nonce = nonce};
  sock_hello_encode(&h, in + 8);
  in[8 + 10] = reserved; /* bytes 10-11 are zero in a real hello */
  write_seed("fuzz_net_socket", name, in, sizeof in);
}

static void net_header_seed(const char *name, uint32_t tag, uint64_t bytes,
                            uint64_t capacity) {
  uint8_t in[13 + SOCK_HEADER_BYTES];
  in[0] = 1;
  sock_put_u32(in + 1, tag);
  sock_put_u64(in + 5, capacity);
  sock_header_encode(tag, bytes, in + 13);
  write_seed("fuzz_net_socket", name, in, sizeof in);
}

static void net_handle_seed(const char *name, int nsocks, int port) {
  uint8_t in[1 + XCOLL_NET_HANDLE_MAXSIZE];
  in[0] = 2;
  sock_handle h;
  memset(&h, 0, sizeof h);
  h.addr.sin_family = AF_INET;
  h.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  h.addr.sin_port = htons((uint16_t)port);
  h.nsocks = nsocks;
  h.nonce = 0x0123456789abcdefull;
  sock_handle_encode(&h, in + 1);
  write_seed("fuzz_net_socket", name, in, 1 + SOCK_HANDLE_BYTES);
}

static void net_socket_seeds(void) {
  const uint64_t nonce = 0x0123456789abcdefull; /* the target's listener */
  net_hello_seed("hello", 2, 0x1, 3, 1, nonce, 0);
  net_hello_seed("hello_reserved_not_zero", 2, 0x1, 3, 1, nonce, 1);
  net_hello_seed("hello_second_socket_1", 2, 0x2, 3, 1, nonce, 0);
  net_hello_seed("hello_other_listener", 4, 0, 1, 0, nonce + 1, 0);
  net_hello_seed("hello_index_over", 16, 0, 0, 16, nonce, 0);
  net_header_seed("header", 5, 4096, 8192);
  net_header_seed("header_truncated", 5, 1u << 20, 4096);
  net_header_seed("header_huge", 9, UINT64_MAX, UINT64_MAX - 1);
  net_handle_seed("handle", 4, 29500);
  net_handle_seed("handle_no_sockets", 0, 29500);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  root = argv[1];
  /* world of 4, rank 2: an incoming HELLO from rank 0 for socket 1 */
  hello_seed("incoming", 4, 2, 2, 0, 0, 0, 0, 2, 1, 0, 0);
  /* rank 1 called rank 3 (socket 0) and rank 3 answers */
  hello_seed("reply", 4, 1, 1, 1, 3, 0, 3, 1, 0, 0, 0);
  /* a HELLO from a rank above ours on our listener */
  hello_seed("incoming_from_above", 4, 1, 1, 0, 0, 0, 3, 1, 0, 0, 0);
  /* a HELLO meant for another rank */
  hello_seed("wrong_receiver", 8, 5, 4, 0, 0, 0, 2, 6, 0, 0, 0);
  /* socket index over nsocks */
  hello_seed("socket_out_of_range", 4, 3, 2, 0, 0, 0, 1, 3, 9, 0, 0);
  /* a large world, checksum recomputed by the target */
  hello_seed("large_world", 4096, 4000, 16, 0, 0, 0, 3999, 4000, 15, 1, 0);
  /* a valid HELLO but for a fingerprint byte (the target fixes the checksum);
   * was accepted before the check looked at the fingerprint */
  hello_seed("fingerprint_not_zero", 4, 2, 1, 0, 0, 0, 0, 2, 0, 1, 0x25);
  join_seeds();
  net_socket_seeds();
  if (failed)
    fprintf(stderr, "make_seeds: could not write under %s\n", root);
  return failed;
}
