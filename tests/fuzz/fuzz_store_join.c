/* fuzz_store_join.c - libFuzzer target: the rendezvous store's registration
 * (JOIN) as the server judges it (core/store_join.c, store_join_judge,
 * behind the codec's store_request_check), over a sequence of requests from
 * up to 8 connections against one job, so that the duplicate-rank, wrong
 * WORLD_SIZE, second-job, rejoin and LEAVE paths are reached. Whatever the
 * bytes: no crash or read out of bounds, every refusal says why within its
 * buffer, and the registry stays sound: an accepted JOIN names the job's id
 * and WORLD_SIZE and a rank below it, comes from a connection that had not
 * joined, the job never changes once fixed, and no two live connections
 * hold the same rank.
 *
 * Input: records of one byte, then a store request (16-byte header, key,
 * value; store_codec.h). The byte: bits 0-2 the connection (slot) it comes
 * from; bit 7: that connection closes first and a new one takes the slot.
 * A header the codec refuses drops its connection (the slot starts anew).
 * Seed corpus: tests/fuzz/corpus/fuzz_store_join/ (tests/fuzz/make_seeds.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_codec.h"
#include "store_join.h"

#define SLOTS 8
#define PORT 29500

typedef struct slot {
  char peer[32];
  int joined_rank; /* -1: not joined */
  int left;        /* said LEAVE */
} slot;

typedef struct registry {
  slot slots[SLOTS];
  int caller; /* the slot asking now */
} registry;

static const char *holder(void *context, uint32_t rank) {
  registry *r = context;
  for (int i = 0; i < SLOTS; i++)
    if (i != r->caller && !r->slots[i].left &&
        r->slots[i].joined_rank == (int)rank)
      return r->slots[i].peer;
  return NULL;
}

static void slot_reset(slot *s) {
  s->joined_rank = -1;
  s->left = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  registry r;
  for (int i = 0; i < SLOTS; i++) {
    snprintf(r.slots[i].peer, sizeof r.slots[i].peer, "10.0.0.%d:4000%d", i, i);
    slot_reset(&r.slots[i]);
  }
  store_job job;
  memset(&job, 0, sizeof job);
  store_job fixed;
  memset(&fixed, 0, sizeof fixed);
  size_t at = 0;
  while (size - at >= 1 + STORE_HEADER_BYTES) {
    int which = data[at] & (SLOTS - 1);
    slot *c = &r.slots[which];
    if (data[at] & 0x80)
      slot_reset(c);
    at++;
    store_header h;
    store_header_decode(data + at, &h);
    at += STORE_HEADER_BYTES;
    if (store_request_check(&h) != NULL) {
      slot_reset(c); /* the server closes this connection */
      continue;
    }
    size_t payload = (size_t)h.key_bytes + h.value_bytes;
    if (payload > size - at)
      break; /* the rest has not arrived */
    const uint8_t *key = data + at, *value = data + at + h.key_bytes;
    at += payload;
    if (h.kind == STORE_LEAVE) {
      c->left = 1;
      continue;
    }
    if (h.kind != STORE_JOIN)
      continue;

    char why[768];
    why[0] = '\0';
    uint32_t rank = UINT32_MAX;
    int had_job = job.world_size != 0, before = c->joined_rank;
    r.caller = which;
    store_join_verdict verdict =
        store_join_judge(&job, c->peer, PORT, c->joined_rank, key, h.key_bytes,
                         value, holder, &r, &rank, why, sizeof why);
    if (verdict != STORE_JOIN_ACCEPTED) {
      if (why[0] == '\0' || strlen(why) >= sizeof why)
        abort();
      if (had_job && memcmp(&job, &fixed, sizeof job) != 0)
        abort();
      if (!had_job && job.world_size != 0)
        abort(); /* fixed by a refusal */
      continue;
    }
    if (before >= 0)
      abort(); /* a connection joined twice */
    if (job.world_size == 0 || rank >= job.world_size)
      abort();
    if (get_u32(value) != job.world_size || get_u32(value + 4) != rank)
      abort();
    if (h.key_bytes != job.id_bytes || memcmp(key, job.id, job.id_bytes) != 0)
      abort();
    if (strlen(job.id_text) != job.id_bytes)
      abort();
    if (had_job && memcmp(&job, &fixed, sizeof job) != 0)
      abort();
    fixed = job;
    c->joined_rank = (int)rank;
    for (int i = 0; i < SLOTS; i++) /* one live holder per rank */
      for (int k = i + 1; k < SLOTS; k++)
        if (!r.slots[i].left && !r.slots[k].left &&
            r.slots[i].joined_rank >= 0 &&
            r.slots[i].joined_rank == r.slots[k].joined_rank)
          abort();
  }
  return 0;
}
