/* store_codec.h - the rendezvous store's wire format, shared by its server
 * and client (store.c) and by the fuzz target tests/fuzz/fuzz_store.c.
 *
 * Every message is a 16-byte header (all integers big-endian):
 *   magic u32 ("XCST") | version u16 | kind u16 | key_bytes u32 |
 *   value_bytes u32
 * followed by key_bytes of key and value_bytes of value. wait and check carry
 * their keys in the value as u32 count, then for each key u32 length and the
 * bytes; join carries the job id as key and u32 world_size, u32 rank as
 * value. A connection starts with the job secret's exchange (auth.h) before
 * the first header. */
#ifndef XCOLL_CORE_STORE_CODEC_H
#define XCOLL_CORE_STORE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STORE_MAGIC 0x58435354u /* "XCST" */
#define STORE_VERSION 1
#define STORE_HEADER_BYTES 16
/* What client and server prove the job's secret for (auth.h). */
#define STORE_AUTH_CONTEXT "xcoll rendezvous store"

enum store_kind {
  STORE_SET = 1,
  STORE_GET = 2,
  STORE_WAIT = 3,
  STORE_ADD = 4,
  STORE_CHECK = 5,
  STORE_DELETE = 6,
  STORE_CANCEL = 7,
  STORE_JOIN = 8,   /* key: job id; value: u32 world_size, u32 rank */
  STORE_LEAVE = 9,  /* this rank closes normally; no reply */
  STORE_HEALTH = 10, /* has a rank of the job failed? */
  STORE_REPLY_OK = 64,
  STORE_REPLY_CANCELLED = 65,
  STORE_REPLY_ERROR = 66,
  STORE_REPLY_FAILED = 67 /* the job lost a rank: value is why */
};

typedef struct store_header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t key_bytes;
  uint32_t value_bytes;
} store_header;

static inline void put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static inline uint32_t get_u32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
         ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void put_i64(unsigned char *p, int64_t v) {
  uint64_t u = (uint64_t)v;
  put_u32(p, (uint32_t)(u >> 32));
  put_u32(p + 4, (uint32_t)u);
}

static inline int64_t get_i64(const unsigned char *p) {
  uint64_t u = ((uint64_t)get_u32(p) << 32) | get_u32(p + 4);
  return (int64_t)u;
}

void store_header_encode(const store_header *h,
                         unsigned char out[STORE_HEADER_BYTES]);
/* Parse without judging: every bit pattern decodes. */
void store_header_decode(const unsigned char in[STORE_HEADER_BYTES],
                         store_header *h);
/* Checks for both directions, before anything is allocated: magic, version,
 * key_bytes <= XCOLL_STORE_MAX_KEY, value_bytes <= XCOLL_STORE_MAX_VALUE.
 * NULL when acceptable, else why not. */
const char *store_header_check(const store_header *h);
/* store_header_check plus the shape each request kind must have. NULL when
 * acceptable, else why not. */
const char *store_request_check(const store_header *h);
/* 1 when list (bytes long) is a well-formed key list: count >= 1, every key
 * 1..XCOLL_STORE_MAX_KEY bytes, nothing left over. */
int store_key_list_valid(const unsigned char *list, size_t bytes);
/* The one parser of key lists: as store_key_list_valid, and visit (when not
 * NULL) is called on each key in order once its length is checked, with
 * context; the walk stops with 0 at the first visit that returns 0. */
typedef int (*store_key_visit)(const unsigned char *key, size_t key_bytes,
                               void *context);
int store_key_list_walk(const unsigned char *list, size_t bytes,
                        store_key_visit visit, void *context);

#endif
