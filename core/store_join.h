/* store_join.h - the rendezvous store's registration rule: whether a JOIN
 * (store_codec.h: key = the job id, value = u32 world_size, u32 rank, both
 * big-endian) is accepted against the job the ranks already registered.
 * A pure function over the request's bytes and the job's state, shared by
 * the server (store_server.c) and the fuzz target
 * tests/fuzz/fuzz_store_join.c.
 *
 * The first accepted JOIN fixes the job: its id and WORLD_SIZE. Every later
 * JOIN must name the same job id (byte for byte) and the same WORLD_SIZE, a
 * rank in [0, WORLD_SIZE) that no live registered connection holds, and come
 * from a connection that has not joined yet. */
#ifndef XCOLL_CORE_STORE_JOIN_H
#define XCOLL_CORE_STORE_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* The job a store serves, fixed by the first accepted JOIN. Start zeroed. */
typedef struct store_job {
  unsigned char id[XCOLL_STORE_MAX_JOB_ID]; /* as the first JOIN sent it */
  size_t id_bytes;
  char id_text[XCOLL_STORE_MAX_JOB_ID + 1]; /* printable copy, for messages */
  uint32_t world_size;                      /* 0 until the first JOIN */
  uint32_t world_set_by;                    /* the rank that fixed it */
} store_job;

typedef enum store_join_verdict {
  STORE_JOIN_ACCEPTED = 0,
  STORE_JOIN_INVALID, /* the request makes no sense by itself (rank not
                         below WORLD_SIZE, empty or overlong job id) */
  STORE_JOIN_CONFLICT /* it disagrees with the job or with a registered
                         rank: a launch mistake worth a WARN on the server */
} store_join_verdict;

/* Who holds rank now: the address of a live connection, other than the
 * caller's, registered as that rank and not yet gone with LEAVE; or NULL. */
typedef const char *(*store_rank_holder)(void *context, uint32_t rank);

/* Judge a JOIN from caller (its address, for messages) on a store listening
 * on port. caller_rank: the rank this connection joined as before, or -1.
 * job_id: job_id_bytes bytes, not NUL-terminated; value: the 8 value bytes.
 * holder(context, rank) answers whether the rank is taken. On
 * STORE_JOIN_ACCEPTED *rank is the caller's rank and, for the first JOIN,
 * *job is fixed; otherwise *job is unchanged and why (why_bytes long) says
 * what disagrees, naming both sides. */
store_join_verdict
store_join_judge(store_job *job, const char *caller, int port, int caller_rank,
                 const unsigned char *job_id, size_t job_id_bytes,
                 const unsigned char value[8], store_rank_holder holder,
                 void *context, uint32_t *rank, char *why, size_t why_bytes);

#endif
