/* fuzz_store.c - libFuzzer target for the rendezvous store's decode path
 * (core/store_codec.c): the input is a byte stream read the way the server
 * reads a connection after authentication — header, checks, payload, next
 * header. Every header must survive decode -> encode unchanged, a header
 * that passes store_request_check must describe a payload within the caps,
 * and key lists are walked only within their bytes. ASan/UBSan catch any
 * read outside the input. Seed corpus: tests/fuzz/corpus/fuzz_store/. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t at = 0;
  while (size - at >= STORE_HEADER_BYTES) {
    store_header h;
    store_header_decode(data + at, &h);
    unsigned char again[STORE_HEADER_BYTES];
    store_header_encode(&h, again);
    if (memcmp(again, data + at, STORE_HEADER_BYTES) != 0)
      __builtin_trap(); /* decode and encode disagree */
    const char *why = store_request_check(&h);
    if (why)
      break; /* the server drops the connection here */
    if (h.key_bytes > XCOLL_STORE_MAX_KEY || h.value_bytes > XCOLL_STORE_MAX_VALUE)
      __builtin_trap(); /* a checked header must respect the caps */
    at += STORE_HEADER_BYTES;
    size_t payload = (size_t)h.key_bytes + h.value_bytes;
    if (payload > size - at)
      break; /* the rest of the request has not arrived */
    const uint8_t *value = data + at + h.key_bytes;
    if (h.kind == STORE_WAIT || h.kind == STORE_CHECK)
      (void)store_key_list_valid(value, h.value_bytes);
    if (h.kind == STORE_ADD)
      (void)get_i64(value);
    if (h.kind == STORE_JOIN)
      (void)(get_u32(value) + get_u32(value + 4));
    at += payload;
  }
  return 0;
}
