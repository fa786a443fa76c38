/* fingerprint_exchange.c - the fingerprint exchange before a rooted
 * host-driven collective (core/fingerprint_exchange.h).
 *
 * Cost: ceil(log2 P) rounds; in each a rank sends and receives one 80-byte
 * message (its fingerprint and the first mismatch it knows of), so a call
 * pays about one message latency per round on top of its algorithm.
 * Pattern: dissemination (Hensgen, Finkel & Manber, "Two algorithms for
 * barrier synchronization", IJPP 1988), as barrier_dissemination.c. */
#include "fingerprint_exchange.h"

#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "fingerprint.h"
#include "pipeline.h"

#define NO_RANK 0xffffffffu
/* The message: the sender's fingerprint, then a mismatch it knows of:
 * rank a, rank b (NO_RANK: none), a's fingerprint, b's fingerprint. */
#define AT_RANK_A XCOLL_FINGERPRINT_BYTES
#define AT_RANK_B (AT_RANK_A + 4)
#define AT_FP_A (AT_RANK_B + 4)
#define AT_FP_B (AT_FP_A + XCOLL_FINGERPRINT_BYTES)
#define MESSAGE_BYTES (AT_FP_B + XCOLL_FINGERPRINT_BYTES)

/* A mismatch between two ranks' calls. */
typedef struct mismatch {
  int found;
  int rank_a, rank_b;
  xcoll_fingerprint a, b;
} mismatch;

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static void encode(const xcoll_fingerprint *mine, const mismatch *known,
                   uint8_t out[MESSAGE_BYTES]) {
  memset(out, 0, MESSAGE_BYTES);
  xcoll_fingerprint_encode(mine, out);
  put_u32(out + AT_RANK_A, known->found ? (uint32_t)known->rank_a : NO_RANK);
  put_u32(out + AT_RANK_B, known->found ? (uint32_t)known->rank_b : NO_RANK);
  if (known->found) {
    xcoll_fingerprint_encode(&known->a, out + AT_FP_A);
    xcoll_fingerprint_encode(&known->b, out + AT_FP_B);
  }
}

/* Read a peer's message; -1 when a field is out of range. */
static int decode(const uint8_t in[MESSAGE_BYTES], int world_size,
                  xcoll_fingerprint *theirs, mismatch *known) {
  memset(known, 0, sizeof *known);
  if (xcoll_fingerprint_decode(in, theirs) != 0)
    return -1;
  uint32_t a = get_u32(in + AT_RANK_A), b = get_u32(in + AT_RANK_B);
  if (a == NO_RANK && b == NO_RANK)
    return 0;
  if (a >= (uint32_t)world_size || b >= (uint32_t)world_size ||
      xcoll_fingerprint_decode(in + AT_FP_A, &known->a) != 0 ||
      xcoll_fingerprint_decode(in + AT_FP_B, &known->b) != 0)
    return -1;
  known->found = 1;
  known->rank_a = (int)a;
  known->rank_b = (int)b;
  return 0;
}

xcoll_status xcoll_fingerprint_exchange(struct xcoll_comm *comm,
                                        const xcoll_coll_args *args) {
  const int P = comm->world_size, rank = comm->rank;
  const xcoll_fingerprint mine = xcoll_fingerprint_of(args);
  mismatch known = {0};
  uint8_t out[MESSAGE_BYTES], in[MESSAGE_BYTES];
  uint32_t round = 0;
  for (int distance = 1; distance < P; distance <<= 1, round++) {
    int to = (rank + distance) % P, from = xcoll_rank_mod(rank - distance, P);
    uint64_t tag = xcoll_tag(args, XCOLL_FINGERPRINT_EXCHANGE_STEP + round);
    xcoll_p2p_request *requests[2] = {NULL, NULL};
    encode(&mine, &known, out);
    xcoll_status status =
        xcoll_p2p_irecv(comm, from, tag, in, sizeof in, &requests[0]);
    if (status == XCOLL_SUCCESS)
      status = xcoll_p2p_isend(comm, to, tag, out, sizeof out, &requests[1]);
    if (requests[0] || requests[1]) {
      xcoll_status wait_status = xcoll_p2p_wait(comm, requests, 2);
      if (status == XCOLL_SUCCESS)
        status = wait_status;
    }
    if (status != XCOLL_SUCCESS)
      return status;
    xcoll_fingerprint theirs;
    mismatch heard;
    if (decode(in, P, &theirs, &heard) != 0)
      return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                         "rank %d got a malformed fingerprint exchange "
                         "message from rank %d (round %u)",
                         rank, from, round);
    if (known.found)
      continue;
    if (heard.found)
      known = heard;
    else if (!xcoll_fingerprint_equal(&mine, &theirs))
      known = (mismatch){1, rank, from, mine, theirs};
  }
  if (!known.found)
    return XCOLL_SUCCESS;
  char sentence[2 * XCOLL_FINGERPRINT_TEXT_BYTES + 160];
  xcoll_fingerprint_mismatch(known.rank_a, &known.a, known.rank_b, &known.b,
                             sentence, sizeof sentence);
  return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                     "collective mismatch: %s (seen by rank %d in the "
                     "fingerprint exchange before a rooted collective): "
                     "every rank must "
                     "call the same collectives in the same order with the "
                     "same count, dtype, op and root",
                     sentence, rank);
}
