/* fingerprint.h - a collective call's fingerprint (sequence number,
 * collective, dtype, op, count, root), carried with the first message of each
 * collective between every pair of ranks, so that ranks that called
 * different collectives (desync) fail at once with XCOLL_ERR_PROTOCOL naming
 * both calls, instead of returning wrong data or waiting for a timeout.
 * The idea is torch.distributed's TORCH_DISTRIBUTED_DEBUG=DETAIL collective
 * fingerprint check, made cheap enough to be always on (docs/desync.md).
 *
 * Encoding: XCOLL_FINGERPRINT_BYTES bytes, little-endian (three 64-bit
 * words: seq, count, and the rest as xcoll_fingerprint_word packs it):
 *   offset size field
 *   0      8    seq     the collective's sequence number on its communicator
 *   8      8    count   elements (the collective's count argument; 0 for
 *                       alltoallv and a group)
 *   16     4    root    broadcast and reduce; 0 otherwise
 *   20     1    kind    xcoll_coll_kind, or XCOLL_COLL_GROUP: a group of
 *                       sends and receives (core/group.c), whose seq is
 *                       the next collective's: it is ordered after
 *                       collective seq-1 and before collective seq
 *   21     1    dtype   xcoll_datatype; 0 for barrier
 *   22     1    op      xcoll_op for allreduce, reduce_scatter, reduce
 *                       (XCOLL_FINGERPRINT_OP_PREMUL_SUM for any premul
 *                       sum: its scalar is not compared); else 0
 *   23     1    valid   1: a fingerprint; 0: none (a message sent outside a
 *                       collective, never compared)
 * Fields a collective does not use are zero, so that two calls compare equal
 * exactly when they would move the same data the same way. */
#ifndef XCOLL_CORE_FINGERPRINT_H
#define XCOLL_CORE_FINGERPRINT_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "algorithm.h"

#define XCOLL_FINGERPRINT_BYTES 24
/* The op byte of a pre-multiplied sum, whatever its xcoll_op value on the
 * rank (each rank's table hands out its own); xcoll_op_name calls it
 * "premul_sum". */
#define XCOLL_FINGERPRINT_OP_PREMUL_SUM XCOLL_NUM_OPS
/* Enough for describe's longest output, with the seq. */
#define XCOLL_FINGERPRINT_TEXT_BYTES 128

typedef struct xcoll_fingerprint {
  uint64_t seq;
  uint64_t count; /* elements */
  int32_t root;
  uint8_t kind;  /* xcoll_coll_kind */
  uint8_t dtype; /* xcoll_datatype */
  uint8_t op;    /* xcoll_op, or XCOLL_FINGERPRINT_OP_PREMUL_SUM */
  uint8_t valid; /* 0: no fingerprint */
} xcoll_fingerprint;

/* The fingerprint of a validated call, unused fields zeroed. */
xcoll_fingerprint xcoll_fingerprint_of(const xcoll_coll_args *args);

/* A little-endian 64-bit word at out / in, at any alignment: one move on a
 * little-endian host. */
static inline void xcoll_put_le64(uint8_t *out, uint64_t v) {
  v = htole64(v);
  memcpy(out, &v, sizeof v);
}

static inline uint64_t xcoll_get_le64(const uint8_t *in) {
  uint64_t v;
  memcpy(&v, in, sizeof v);
  return le64toh(v);
}

/* Write fp into out (XCOLL_FINGERPRINT_BYTES bytes). */
void xcoll_fingerprint_encode(const xcoll_fingerprint *fp, uint8_t *out);

/* FNV-1a, 32 bits (Fowler, Noll, Vo; draft-eastlake-fnv), of n bytes at p:
 * cheap, and not cryptographic (wire.c's header checksum uses it too). */
uint32_t xcoll_fnv1a32(const void *p, size_t n);

/* The encoding's last 8 bytes as one little-endian word: root (as
 * uint32_t) | kind << 32 | dtype << 40 | op << 48 | valid << 56. */
uint64_t xcoll_fingerprint_word(const xcoll_fingerprint *fp);

/* A 32-bit digest of fp: the encoding's three little-endian 64-bit words
 * (seq, count, xcoll_fingerprint_word), each through MurmurHash3's fmix64
 * (count xor 0x9e3779b97f4a7c15, the word xor 0x6a09e667f3bcc909), the
 * three combined as a ^ rotl(b, 21) ^ rotl(c, 42), through fmix64 again;
 * the high 32 bits. Equal fingerprints give equal digests on every host;
 * fingerprints that differ in one word always differ before the
 * truncation, and the 32 bits collide with a chance of about 2^-32.
 * nccl_like mixes it into its LL flags (kernels/prims.h's xc_ll_flag). */
uint32_t xcoll_fingerprint_digest(const xcoll_fingerprint *fp);

/* Read XCOLL_FINGERPRINT_BYTES bytes of in into *fp. Returns 0, or -1 when a
 * field is out of range (kind, dtype, op not a known value; valid not 0 or 1;
 * negative root); *fp is filled either way, and describe copes with any
 * value. */
int xcoll_fingerprint_decode(const uint8_t *in, xcoll_fingerprint *fp);

/* 1 when a and b describe the same call (every field equal), else 0. Calls
 * where either side is not valid compare equal: nothing to check. */
int xcoll_fingerprint_equal(const xcoll_fingerprint *a,
                            const xcoll_fingerprint *b);

typedef enum xcoll_fingerprint_verdict {
  XCOLL_FINGERPRINT_MATCH = 0, /* same call, or nothing to compare */
  XCOLL_FINGERPRINT_AHEAD,     /* from a later collective of the peer's */
  XCOLL_FINGERPRINT_MISMATCH   /* the ranks called different collectives */
} xcoll_fingerprint_verdict;

/* Judge theirs, a peer's fingerprint that arrived while this rank runs
 * current (previous: this rank's collective before it, valid 0 if none).
 * An earlier seq is a message this rank never received in that collective:
 * a MISMATCH. answers_receive: 1 when the message is the one a receive posted
 * in current waits for: then it must be current exactly. Otherwise (a message
 * no receive waits for yet) the same seq must match current and a later seq
 * is AHEAD (keep it until this rank gets there). On MISMATCH *ours is the
 * call of this rank's to name in the error (previous when theirs.seq is
 * previous's, else current). */
xcoll_fingerprint_verdict xcoll_fingerprint_judge(
    const xcoll_fingerprint *current, const xcoll_fingerprint *previous,
    const xcoll_fingerprint *theirs, int answers_receive,
    const xcoll_fingerprint **ours);

/* The call in words, into out (out_bytes long): "allreduce(sum, float32,
 * 1000)", "broadcast(root 1, float32, 1000)", "reduce(max, root 0, int32,
 * 4)", "allgather(float32, 1000)", "barrier()"; "no collective" when not
 * valid. count is in elements. Returns out. */
char *xcoll_fingerprint_describe(const xcoll_fingerprint *fp, char *out,
                                 size_t out_bytes);

/* The sentence a desync error carries, into out: "rank 0 called
 * allreduce(sum, float32, 1000) but rank 1 called broadcast(root 1, float32,
 * 1000)", with each call's sequence number appended when they differ (one
 * rank made more calls than the other). Returns out. */
char *xcoll_fingerprint_mismatch(int rank_a, const xcoll_fingerprint *a,
                                 int rank_b, const xcoll_fingerprint *b,
                                 char *out, size_t out_bytes);

#endif
