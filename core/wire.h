/* wire.h - the fixed header that starts every message a backend puts on the
 * wire (docs/tcp.md, "The header"; docs/security.md).
 *
 * Layout: 64 bytes, every field little-endian, encoded and decoded byte by
 * byte so that the format does not depend on the host's endianness, struct
 * padding or alignment:
 *
 *   offset size field
 *   0      4    magic      XCOLL_WIRE_MAGIC ("XCWM" read as bytes)
 *   4      2    version    XCOLL_WIRE_VERSION
 *   6      2    kind       xcoll_wire_kind
 *   8      8    comm_id    the communicator's id (xcoll_comm.comm_id)
 *   16     8    tag        DATA: the p2p tag; HELLO: (receiver rank << 32) |
 *                          socket index; ABORT: (status << 32) | the rank
 *                          at the origin of the failure, status being
 *                          XCOLL_ERR_PROTOCOL for a collective mismatch
 *                          (every rank fails with it), else XCOLL_ERR_REMOTE;
 *                          BYE: 0
 *   24     8    length     payload bytes that follow this header on the same
 *                          connection
 *   32     4    sender     the sending rank
 *   36     24   fingerprint DATA: the sender's collective (core/fingerprint.h,
 *                          valid byte 0 outside a collective); else zeros
 *   60     4    checksum   FNV-1a (32 bit) of bytes 0..59
 *
 * A peer of another version is refused (version 1 was 40 bytes, without
 * the fingerprint).
 *
 * A receiver decodes the header, then calls xcoll_wire_check() with what it
 * expects BEFORE it uses the length for anything: a bad header is a protocol
 * error naming the peer, never a crash or an allocation sized by an
 * unchecked field. */
#ifndef XCOLL_CORE_WIRE_H
#define XCOLL_CORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "fingerprint.h"

#define XCOLL_WIRE_HEADER_BYTES 64
#define XCOLL_WIRE_MAGIC 0x4d574358u /* bytes 'X' 'C' 'W' 'M' */
#define XCOLL_WIRE_VERSION 2
/* Pass as expected tag or length to xcoll_wire_check: accept any value (the
 * length is still bounded by max_length). */
#define XCOLL_WIRE_ANY UINT64_MAX
/* Longest reason text an ABORT message carries, in bytes. */
#define XCOLL_WIRE_MAX_ABORT_BYTES 1024
/* Size of the buffer xcoll_wire_check and xcoll_wire_decode write a reason to. */
#define XCOLL_WIRE_WHY_BYTES 256

typedef enum xcoll_wire_kind {
  XCOLL_WIRE_DATA = 1,  /* a p2p message: payload is the user's bytes */
  XCOLL_WIRE_ABORT = 2, /* the sender gave up: payload is a reason (text) */
  XCOLL_WIRE_HELLO = 3, /* first message on a new connection: who is calling */
  XCOLL_WIRE_BYE = 4    /* the sender closes the communicator normally */
} xcoll_wire_kind;

typedef struct xcoll_wire_header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint64_t comm_id;
  uint64_t tag;
  uint64_t length; /* bytes */
  uint32_t sender;
  /* Encoded xcoll_fingerprint (DATA), else zeros; decode it with
   * xcoll_fingerprint_decode after xcoll_wire_check passed. */
  uint8_t fingerprint[XCOLL_FINGERPRINT_BYTES];
  uint32_t checksum; /* as received; xcoll_wire_encode computes it */
} xcoll_wire_header;

/* A header with magic and version set, checksum 0 and no fingerprint (zero
 * bytes), the other fields given. */
xcoll_wire_header xcoll_wire_make(xcoll_wire_kind kind, uint64_t comm_id,
                                  uint64_t tag, uint64_t length, int sender);

/* Put fp into header's fingerprint field (encoded). */
void xcoll_wire_set_fingerprint(xcoll_wire_header *header,
                                const xcoll_fingerprint *fp);

/* Write header into out (XCOLL_WIRE_HEADER_BYTES bytes), computing the
 * checksum over the encoded fields (header->checksum is ignored). */
void xcoll_wire_encode(const xcoll_wire_header *header, uint8_t *out);

/* Parse bytes (bytes of them available) into *header without judging the
 * fields. Returns 0, or -1 with a reason in why (why_bytes long, may be NULL)
 * when fewer than XCOLL_WIRE_HEADER_BYTES bytes are given. */
int xcoll_wire_decode(const void *in, size_t bytes, xcoll_wire_header *header,
                      char *why, size_t why_bytes);

/* Check a decoded header: magic, version, checksum, a known kind, comm_id ==
 * expected_comm_id, sender == expected_peer, tag == expected_tag and length ==
 * expected_length (each skipped when XCOLL_WIRE_ANY), length <= max_length.
 * Returns 0 when all hold, else -1 with why (why_bytes long, may be NULL) set
 * to a sentence naming the first field that is wrong, its value and what was
 * expected. Does not check the kind against the caller's wish: callers
 * dispatch on header->kind after this passes. */
int xcoll_wire_check(const xcoll_wire_header *header, uint64_t expected_comm_id,
                     int expected_peer, uint64_t expected_tag,
                     uint64_t expected_length, uint64_t max_length, char *why,
                     size_t why_bytes);

/* "DATA", "ABORT", "HELLO", "BYE" or "unknown". */
const char *xcoll_wire_kind_name(unsigned kind);

#endif
