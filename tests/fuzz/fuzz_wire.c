/* fuzz_wire.c - libFuzzer target: the wire header (core/wire.c) and the
 * collective fingerprint it carries (core/fingerprint.c), fed arbitrary
 * bytes as a receiver gets them from the network. Decoding and checking must
 * never crash or read out of bounds whatever the bytes; a header that passes
 * the check must re-encode to the same bytes (nothing is accepted that the
 * encoder could not have written); fingerprints from the network are
 * decoded, judged and described. Input: the header bytes, then 16 bytes of
 * expectations (comm id, peer, max length) when present. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "wire.h"

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xcoll_wire_header h;
  char why[XCOLL_WIRE_WHY_BYTES];
  if (xcoll_wire_decode(data, size, &h, why, sizeof why) != 0) return 0;
  uint64_t comm_id = h.comm_id, max_length = UINT64_MAX;
  int peer = (int)(h.sender & 0x7fffffff);
  if (size >= XCOLL_WIRE_HEADER_BYTES + 16) {
    const uint8_t *x = data + XCOLL_WIRE_HEADER_BYTES;
    comm_id = get64(x);
    peer = (int)(get64(x + 8) & 0xffff) - 1; /* -1: any peer */
    max_length = get64(x + 8) >> 16;
  }
  int ok = xcoll_wire_check(&h, comm_id, peer, XCOLL_WIRE_ANY, XCOLL_WIRE_ANY,
                            max_length, why, sizeof why);
  if (ok == 0) {
    uint8_t again[XCOLL_WIRE_HEADER_BYTES];
    xcoll_wire_encode(&h, again);
    if (memcmp(again, data, XCOLL_WIRE_HEADER_BYTES) != 0) abort();
    (void)xcoll_wire_kind_name(h.kind);
  } else if (strlen(why) >= sizeof why) {
    abort();
  }
  /* The fingerprint field, as tcp reads it after the check. */
  xcoll_fingerprint theirs, ours;
  (void)xcoll_fingerprint_decode(h.fingerprint, &theirs);
  memset(&ours, 0, sizeof ours);
  ours.valid = 1;
  ours.seq = theirs.seq;
  const xcoll_fingerprint *named = NULL;
  (void)xcoll_fingerprint_judge(&ours, &ours, &theirs, (int)(h.kind & 1),
                                &named);
  char text[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
  xcoll_fingerprint_mismatch(0, named, 1, &theirs, text, sizeof text);
  uint8_t bytes[XCOLL_FINGERPRINT_BYTES];
  xcoll_fingerprint_encode(&theirs, bytes);
  xcoll_fingerprint back;
  if (xcoll_fingerprint_decode(bytes, &back) == 0 &&
      !xcoll_fingerprint_equal(&back, &theirs))
    abort();
  return 0;
}
