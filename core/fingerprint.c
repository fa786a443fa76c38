/* fingerprint.c - collective fingerprints: building one from a call,
 * encoding, comparing, and the words of a desync error (fingerprint.h). */
#include "fingerprint.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int uses_op(unsigned kind) {
  return xcoll_coll_has_op((xcoll_coll_kind)kind);
}

static int uses_root(unsigned kind) {
  return xcoll_coll_has_root((xcoll_coll_kind)kind);
}

/* Where a fingerprint falls in a communicator's order of calls: a group of
 * point-to-point calls made when the next collective's seq was n comes
 * after collective n-1 and before collective n. */
static uint64_t order_key(const xcoll_fingerprint *fp) {
  return 2 * fp->seq + (fp->kind == XCOLL_COLL_GROUP ? 0 : 1);
}

xcoll_fingerprint xcoll_fingerprint_of(const xcoll_coll_args *args) {
  xcoll_fingerprint fp;
  memset(&fp, 0, sizeof fp);
  fp.valid = 1;
  fp.seq = args->seq;
  fp.kind = (uint8_t)args->kind;
  /* A barrier moves no data; a group's calls are checked one by one
   * (core/group.c); alltoallv's counts differ by peer, and each message's
   * size is checked on its own. */
  if (args->kind == XCOLL_COLL_BARRIER || args->kind == XCOLL_COLL_GROUP)
    return fp;
  if (args->kind == XCOLL_COLL_ALLTOALLV) {
    fp.dtype = (uint8_t)args->dtype;
    return fp;
  }
  fp.count = (uint64_t)args->count;
  fp.dtype = (uint8_t)args->dtype;
  if (uses_op(args->kind))
    fp.op = args->premul ? XCOLL_FINGERPRINT_OP_PREMUL_SUM : (uint8_t)args->op;
  if (uses_root(args->kind))
    fp.root = (int32_t)args->root;
  return fp;
}

uint32_t xcoll_fnv1a32(const void *p, size_t n) {
  const uint8_t *b = p;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 16777619u;
  }
  return h;
}

/* MurmurHash3's 64-bit finalizer (Austin Appleby, public domain): a
 * bijection of 64-bit words in which every input bit flips each output bit
 * with a chance close to 1/2. */
static uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

static uint64_t rotl64(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

uint64_t xcoll_fingerprint_word(const xcoll_fingerprint *fp) {
  return (uint64_t)(uint32_t)fp->root | (uint64_t)fp->kind << 32 |
         (uint64_t)fp->dtype << 40 | (uint64_t)fp->op << 48 |
         (uint64_t)fp->valid << 56;
}

uint32_t xcoll_fingerprint_digest(const xcoll_fingerprint *fp) {
  /* The three words mix side by side (no chain through 24 bytes, as a
   * bytewise hash has): a call's fingerprint costs a few nanoseconds. */
  uint64_t h = fmix64(fp->seq) ^
               rotl64(fmix64(fp->count ^ 0x9e3779b97f4a7c15ULL), 21) ^
               rotl64(fmix64(xcoll_fingerprint_word(fp) ^
                             0x6a09e667f3bcc909ULL),
                      42);
  return (uint32_t)(fmix64(h) >> 32);
}

void xcoll_fingerprint_encode(const xcoll_fingerprint *fp, uint8_t *out) {
  xcoll_put_le64(out, fp->seq);
  xcoll_put_le64(out + 8, fp->count);
  xcoll_put_le64(out + 16, xcoll_fingerprint_word(fp));
}

int xcoll_fingerprint_decode(const uint8_t *in, xcoll_fingerprint *fp) {
  uint64_t word = xcoll_get_le64(in + 16);
  fp->seq = xcoll_get_le64(in);
  fp->count = xcoll_get_le64(in + 8);
  fp->root = (int32_t)(uint32_t)word;
  fp->kind = (uint8_t)(word >> 32);
  fp->dtype = (uint8_t)(word >> 40);
  fp->op = (uint8_t)(word >> 48);
  fp->valid = (uint8_t)(word >> 56);
  if (fp->valid > 1 || fp->kind > XCOLL_COLL_GROUP ||
      fp->dtype >= XCOLL_NUM_DATATYPES || fp->op > XCOLL_FINGERPRINT_OP_PREMUL_SUM ||
      fp->root < 0)
    return -1;
  return 0;
}

int xcoll_fingerprint_equal(const xcoll_fingerprint *a,
                            const xcoll_fingerprint *b) {
  if (!a->valid || !b->valid)
    return 1;
  return a->seq == b->seq && a->count == b->count && a->root == b->root &&
         a->kind == b->kind && a->dtype == b->dtype && a->op == b->op;
}

xcoll_fingerprint_verdict xcoll_fingerprint_judge(
    const xcoll_fingerprint *current, const xcoll_fingerprint *previous,
    const xcoll_fingerprint *theirs, int answers_receive,
    const xcoll_fingerprint **ours) {
  *ours = current;
  if (!current->valid || !theirs->valid)
    return XCOLL_FINGERPRINT_MATCH;
  if (order_key(theirs) < order_key(current)) {
    if (previous->valid && order_key(previous) == order_key(theirs))
      *ours = previous;
    return XCOLL_FINGERPRINT_MISMATCH;
  }
  if (answers_receive || order_key(theirs) == order_key(current))
    return xcoll_fingerprint_equal(current, theirs) ? XCOLL_FINGERPRINT_MATCH
                                                    : XCOLL_FINGERPRINT_MISMATCH;
  return XCOLL_FINGERPRINT_AHEAD;
}

char *xcoll_fingerprint_describe(const xcoll_fingerprint *fp, char *out,
                                 size_t out_bytes) {
  if (out_bytes == 0)
    return out;
  if (!fp->valid) {
    snprintf(out, out_bytes, "no collective");
    return out;
  }
  /* Names of out-of-range values come back as "unknown": a fingerprint
   * from the network is described before anything else judges it. */
  const char *name = fp->kind <= XCOLL_COLL_GROUP
                         ? xcoll_coll_name((xcoll_coll_kind)fp->kind)
                         : "unknown collective";
  const char *dtype = xcoll_datatype_name((xcoll_datatype)fp->dtype);
  const char *op = xcoll_op_name((xcoll_op)fp->op);
  if (fp->kind == XCOLL_COLL_BARRIER)
    snprintf(out, out_bytes, "%s()", name);
  else if (fp->kind == XCOLL_COLL_GROUP)
    snprintf(out, out_bytes, "a group of sends and receives");
  else if (fp->kind == XCOLL_COLL_ALLTOALLV)
    snprintf(out, out_bytes, "%s(%s)", name, dtype);
  else if (uses_op(fp->kind) && uses_root(fp->kind))
    snprintf(out, out_bytes, "%s(%s, root %" PRId32 ", %s, %" PRIu64 ")", name,
             op, fp->root, dtype, fp->count);
  else if (uses_op(fp->kind))
    snprintf(out, out_bytes, "%s(%s, %s, %" PRIu64 ")", name, op, dtype,
             fp->count);
  else if (uses_root(fp->kind))
    snprintf(out, out_bytes, "%s(root %" PRId32 ", %s, %" PRIu64 ")", name,
             fp->root, dtype, fp->count);
  else
    snprintf(out, out_bytes, "%s(%s, %" PRIu64 ")", name, dtype, fp->count);
  return out;
}

char *xcoll_fingerprint_mismatch(int rank_a, const xcoll_fingerprint *a,
                                 int rank_b, const xcoll_fingerprint *b,
                                 char *out, size_t out_bytes) {
  char call_a[XCOLL_FINGERPRINT_TEXT_BYTES], call_b[XCOLL_FINGERPRINT_TEXT_BYTES];
  xcoll_fingerprint_describe(a, call_a, sizeof call_a);
  xcoll_fingerprint_describe(b, call_b, sizeof call_b);
  if (a->seq == b->seq && xcoll_fingerprint_equal(a, b))
    snprintf(out, out_bytes,
             "rank %d called %s and rank %d called the same, but rank %d "
             "sent a message that rank %d never received in it",
             rank_a, call_a, rank_b, rank_b, rank_a);
  else if (a->seq == b->seq)
    snprintf(out, out_bytes, "rank %d called %s but rank %d called %s", rank_a,
             call_a, rank_b, call_b);
  else
    snprintf(out, out_bytes,
             "rank %d called %s as its collective #%" PRIu64
             " but rank %d called %s as its collective #%" PRIu64
             " (one rank made more collective calls than the other)",
             rank_a, call_a, a->seq, rank_b, call_b, b->seq);
  return out;
}
