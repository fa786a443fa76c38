/* wire.c - encoding, decoding and checking the fixed message header that
 * starts every backend message (layout in wire.h). */
#include "wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* The checksum is FNV-1a (core/fingerprint.h): cheap, and catches the
 * corruptions that matter here (a stream that lost sync, a stray
 * connection, a flipped bit in a length). */

static void encode_fields(const xcoll_wire_header *h, uint8_t *out) {
  put32(out + 0, h->magic);
  put16(out + 4, h->version);
  put16(out + 6, h->kind);
  put64(out + 8, h->comm_id);
  put64(out + 16, h->tag);
  put64(out + 24, h->length);
  put32(out + 32, h->sender);
  memcpy(out + 36, h->fingerprint, XCOLL_FINGERPRINT_BYTES);
}

#define CHECKED_BYTES (XCOLL_WIRE_HEADER_BYTES - 4)

void xcoll_wire_set_fingerprint(xcoll_wire_header *header,
                                const xcoll_fingerprint *fp) {
  xcoll_fingerprint_encode(fp, header->fingerprint);
}

xcoll_wire_header xcoll_wire_make(xcoll_wire_kind kind, uint64_t comm_id,
                                  uint64_t tag, uint64_t length, int sender) {
  xcoll_wire_header h;
  h.magic = XCOLL_WIRE_MAGIC;
  h.version = XCOLL_WIRE_VERSION;
  h.kind = (uint16_t)kind;
  h.comm_id = comm_id;
  h.tag = tag;
  h.length = length;
  h.sender = (uint32_t)sender;
  memset(h.fingerprint, 0, sizeof h.fingerprint);
  h.checksum = 0;
  return h;
}

void xcoll_wire_encode(const xcoll_wire_header *header, uint8_t *out) {
  encode_fields(header, out);
  put32(out + CHECKED_BYTES, xcoll_fnv1a32(out, CHECKED_BYTES));
}

int xcoll_wire_decode(const void *in, size_t bytes, xcoll_wire_header *header,
                      char *why, size_t why_bytes) {
  if (bytes < XCOLL_WIRE_HEADER_BYTES) {
    if (why)
      snprintf(why, why_bytes,
               "truncated header: %zu of %d bytes (the connection ended or "
               "lost sync)",
               bytes, XCOLL_WIRE_HEADER_BYTES);
    return -1;
  }
  const uint8_t *p = in;
  header->magic = get32(p + 0);
  header->version = get16(p + 4);
  header->kind = get16(p + 6);
  header->comm_id = get64(p + 8);
  header->tag = get64(p + 16);
  header->length = get64(p + 24);
  header->sender = get32(p + 32);
  memcpy(header->fingerprint, p + 36, XCOLL_FINGERPRINT_BYTES);
  header->checksum = get32(p + CHECKED_BYTES);
  return 0;
}

const char *xcoll_wire_kind_name(unsigned kind) {
  switch (kind) {
  case XCOLL_WIRE_DATA: return "DATA";
  case XCOLL_WIRE_ABORT: return "ABORT";
  case XCOLL_WIRE_HELLO: return "HELLO";
  case XCOLL_WIRE_BYE: return "BYE";
  default: return "unknown";
  }
}

#define WHY(...)                                                               \
  do {                                                                         \
    if (why) snprintf(why, why_bytes, __VA_ARGS__);                            \
  } while (0)

int xcoll_wire_check(const xcoll_wire_header *h, uint64_t expected_comm_id,
                     int expected_peer, uint64_t expected_tag,
                     uint64_t expected_length, uint64_t max_length, char *why,
                     size_t why_bytes) {
  if (h->magic != XCOLL_WIRE_MAGIC) {
    WHY("bad magic 0x%08" PRIx32 " (expected 0x%08x): not an xcoll message, "
        "or the stream lost sync",
        h->magic, XCOLL_WIRE_MAGIC);
    return -1;
  }
  if (h->version != XCOLL_WIRE_VERSION) {
    WHY("protocol version %u, expected %d: peers run different xcoll builds",
        (unsigned)h->version, XCOLL_WIRE_VERSION);
    return -1;
  }
  uint8_t bytes[XCOLL_WIRE_HEADER_BYTES];
  encode_fields(h, bytes);
  uint32_t sum = xcoll_fnv1a32(bytes, CHECKED_BYTES);
  if (sum != h->checksum) {
    WHY("header checksum 0x%08" PRIx32 " does not match its fields "
        "(0x%08" PRIx32 "): corrupted header",
        h->checksum, sum);
    return -1;
  }
  if (h->kind < XCOLL_WIRE_DATA || h->kind > XCOLL_WIRE_BYE) {
    WHY("unknown message kind %u", (unsigned)h->kind);
    return -1;
  }
  if (h->comm_id != expected_comm_id) {
    WHY("%s message for communicator id %" PRIu64 ", expected %" PRIu64,
        xcoll_wire_kind_name(h->kind), h->comm_id, expected_comm_id);
    return -1;
  }
  if (expected_peer >= 0 && h->sender != (uint32_t)expected_peer) {
    WHY("%s message says it comes from rank %" PRIu32
        ", but this connection belongs to rank %d",
        xcoll_wire_kind_name(h->kind), h->sender, expected_peer);
    return -1;
  }
  if (expected_tag != XCOLL_WIRE_ANY && h->tag != expected_tag) {
    WHY("%s message has tag 0x%" PRIx64 ", the posted operation expects tag "
        "0x%" PRIx64 " (sends and receives posted in different orders?)",
        xcoll_wire_kind_name(h->kind), h->tag, expected_tag);
    return -1;
  }
  if (h->length > max_length) {
    WHY("%s message length %" PRIu64 " bytes exceeds the bound of %" PRIu64
        " bytes",
        xcoll_wire_kind_name(h->kind), h->length, max_length);
    return -1;
  }
  if (expected_length != XCOLL_WIRE_ANY && h->length != expected_length) {
    WHY("%s message length %" PRIu64 " bytes, the posted operation expects "
        "%" PRIu64 " bytes (send and receive sizes differ)",
        xcoll_wire_kind_name(h->kind), h->length, expected_length);
    return -1;
  }
  return 0;
}
