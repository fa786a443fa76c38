/* store_codec.c - encoding and checking of the rendezvous store's messages
 * (store_codec.h). Pure functions over bytes: no sockets, no allocation. */
#include "store_codec.h"

#include <stdio.h>

void store_header_encode(const store_header *h,
                          unsigned char out[STORE_HEADER_BYTES]) {
  put_u32(out, h->magic);
  out[4] = (unsigned char)(h->version >> 8);
  out[5] = (unsigned char)h->version;
  out[6] = (unsigned char)(h->kind >> 8);
  out[7] = (unsigned char)h->kind;
  put_u32(out + 8, h->key_bytes);
  put_u32(out + 12, h->value_bytes);
}

void store_header_decode(const unsigned char in[STORE_HEADER_BYTES],
                          store_header *h) {
  h->magic = get_u32(in);
  h->version = (uint16_t)((in[4] << 8) | in[5]);
  h->kind = (uint16_t)((in[6] << 8) | in[7]);
  h->key_bytes = get_u32(in + 8);
  h->value_bytes = get_u32(in + 12);
}

/* The checks shared by both directions, done before anything is allocated.
 * Returns NULL when the header is acceptable, else why it is not. */
const char *store_header_check(const store_header *h) {
  if (h->magic != STORE_MAGIC)
    return "bad magic (not an xcoll store peer?)";
  if (h->version != STORE_VERSION)
    return "unsupported protocol version";
  if (h->key_bytes > XCOLL_STORE_MAX_KEY)
    return "key longer than XCOLL_STORE_MAX_KEY";
  if (h->value_bytes > XCOLL_STORE_MAX_VALUE)
    return "value longer than XCOLL_STORE_MAX_VALUE";
  return NULL;
}

/* Request-specific shape: which parts must be present and how long. */
const char *store_request_check(const store_header *h) {
  const char *why = store_header_check(h);
  if (why)
    return why;
  switch (h->kind) {
  case STORE_SET:
    return h->key_bytes == 0 ? "set without a key" : NULL;
  case STORE_GET:
  case STORE_DELETE:
    return (h->key_bytes == 0 || h->value_bytes != 0) ? "malformed get/delete"
                                                      : NULL;
  case STORE_ADD:
    return (h->key_bytes == 0 || h->value_bytes != 8) ? "malformed add" : NULL;
  case STORE_WAIT:
  case STORE_CHECK:
    return (h->key_bytes != 0 || h->value_bytes < 4) ? "malformed key list"
                                                     : NULL;
  case STORE_CANCEL:
  case STORE_LEAVE:
  case STORE_HEALTH:
    return (h->key_bytes != 0 || h->value_bytes != 0) ? "malformed cancel, "
                                                        "leave or health"
                                                      : NULL;
  case STORE_JOIN:
    return (h->key_bytes == 0 || h->key_bytes > XCOLL_STORE_MAX_JOB_ID ||
            h->value_bytes != 8)
               ? "malformed join"
               : NULL;
  default:
    return "unknown request kind";
  }
}

int store_key_list_walk(const unsigned char *list, size_t bytes,
                        store_key_visit visit, void *context) {
  if (bytes < 4)
    return 0;
  uint32_t count = get_u32(list);
  size_t at = 4;
  if (count == 0)
    return 0;
  for (uint32_t i = 0; i < count; i++) {
    if (bytes - at < 4)
      return 0;
    uint32_t len = get_u32(list + at);
    at += 4;
    if (len == 0 || len > XCOLL_STORE_MAX_KEY || len > bytes - at)
      return 0;
    if (visit && !visit(list + at, len, context))
      return 0;
    at += len;
  }
  return at == bytes;
}

int store_key_list_valid(const unsigned char *list, size_t bytes) {
  return store_key_list_walk(list, bytes, NULL, NULL);
}
