/* fingerprint_exchange.h - every rank compares its call's fingerprint with
 * every other rank's before a host-driven collective whose data flow
 * depends on the root (core/dispatch.c runs it when xcoll_coll_has_root).
 *
 * Why: the backends check a fingerprint on every message a rank receives
 * (docs/desync.md), and that is enough when every rank receives from a
 * rank in the same call whatever the ranks called. In a rooted collective
 * the root receives nothing (broadcast) or sends nothing (reduce), and a
 * rank that takes another rank for the root may wait on the wrong peer or
 * receive the wrong root's data: a broadcast with root 0 on rank 0 and root
 * 1 elsewhere returned success on the receivers, holding rank 1's data; a
 * reduce with two roots waited for the timeout. The exchange's messages
 * follow a pattern that does not depend on the call, so every rank hears
 * from every other one, directly or not, in that same call. */
#ifndef XCOLL_CORE_FINGERPRINT_EXCHANGE_H
#define XCOLL_CORE_FINGERPRINT_EXCHANGE_H

#include <stdint.h>

#include "algorithm.h"
#include "xcoll.h"

struct xcoll_comm;

/* The steps of the exchange's messages (xcoll_tag): one per round, above
 * every algorithm's steps and below the control steps backends keep for
 * themselves (backends/ucx: the top 8 of 2^24). */
#define XCOLL_FINGERPRINT_EXCHANGE_STEP 0xfff000u

/* Whether tag (xcoll_tag) is a message of the exchange: ceil(log2 P)
 * rounds, fewer than 32 for any int world size. nccl_like's
 * point-to-point layer (backends/nccl_like/p2p.c) does not judge the
 * fingerprint in these messages' headers: the exchange compares the
 * fingerprints it carries and runs every round on every rank. */
static inline int xcoll_fingerprint_exchange_tag(uint64_t tag) {
  return (uint32_t)(tag & 0xffffffu) - XCOLL_FINGERPRINT_EXCHANGE_STEP < 32u;
}

/* Dissemination (Hensgen, Finkel & Manber 1988), as the barrier: in round
 * k every rank sends to rank + 2^k and receives from rank - 2^k (mod P)
 * an 80-byte message: its fingerprint (comm->fingerprint, which must be
 * args' already) and the first mismatch it knows of (two ranks and their
 * fingerprints), found by comparing a received fingerprint with its own or
 * received from an earlier round. ceil(log2 P) rounds, 80 bytes each way
 * per round. After the last round a rank has heard from every rank through
 * a chain of rounds, and each link of that chain compared two ranks'
 * fingerprints, so if any two ranks differ every rank holds a mismatch.
 * The rounds always run to the end, so that the ranks that found nothing
 * themselves learn it from those that did.
 * Returns XCOLL_SUCCESS when every rank called the same; XCOLL_ERR_PROTOCOL
 * naming both ranks and both calls (xcoll_fingerprint_mismatch) when not,
 * on every rank; or the p2p status (a backend that checks fingerprints on
 * its messages, tcp and ucx, finds the mismatch first and tells every rank
 * with its abort; the message then names both calls too). */
xcoll_status xcoll_fingerprint_exchange(struct xcoll_comm *comm,
                                        const xcoll_coll_args *args);

#endif
