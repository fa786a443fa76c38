/* store_join.c - the rendezvous store's registration rule (store_join.h).
 * No sockets, no allocation. */
#include "store_join.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "store_codec.h"

/* Copy of id (bytes long) fit for a log line: NUL-terminated, every byte
 * outside printable ASCII shown as '?'. */
static void printable(const unsigned char *id, size_t bytes,
                      char text[XCOLL_STORE_MAX_JOB_ID + 1]) {
  for (size_t i = 0; i < bytes; i++)
    text[i] = id[i] < 0x20 || id[i] > 0x7e ? '?' : (char)id[i];
  text[bytes] = '\0';
}

store_join_verdict
store_join_judge(store_job *job, const char *caller, int port, int caller_rank,
                 const unsigned char *job_id, size_t job_id_bytes,
                 const unsigned char value[8], store_rank_holder holder,
                 void *context, uint32_t *rank, char *why, size_t why_bytes) {
  uint32_t world_size = get_u32(value), asked = get_u32(value + 4);
  if (job_id_bytes == 0 || job_id_bytes > XCOLL_STORE_MAX_JOB_ID) {
    snprintf(why, why_bytes, "a job id of %zu bytes (1 to %d allowed)",
             job_id_bytes, XCOLL_STORE_MAX_JOB_ID);
    return STORE_JOIN_INVALID;
  }
  char text[XCOLL_STORE_MAX_JOB_ID + 1];
  printable(job_id, job_id_bytes, text);
  if (world_size == 0 || world_size > INT32_MAX || asked >= world_size) {
    snprintf(why, why_bytes, "rank %u of WORLD_SIZE=%u is not a valid rank",
             asked, world_size);
    return STORE_JOIN_INVALID;
  }
  if (caller_rank >= 0) {
    /* A second JOIN would silently give up the first rank: another process
     * could take it, and a death would be reported under the wrong rank. */
    snprintf(why, why_bytes,
             "%s joined as rank %d already and now says rank %u: a "
             "connection registers one rank, once",
             caller, caller_rank, asked);
    return STORE_JOIN_CONFLICT;
  }
  if (job->world_size != 0) {
    if (job_id_bytes != job->id_bytes ||
        memcmp(job_id, job->id, job_id_bytes) != 0) {
      snprintf(why, why_bytes,
               "a second job on this port: this store on port %d serves job "
               "'%s', but rank %u (%s) says job '%s'; give each job its own "
               "MASTER_PORT",
               port, job->id_text, asked, caller, text);
      return STORE_JOIN_CONFLICT;
    }
    if (world_size != job->world_size) {
      snprintf(why, why_bytes,
               "rank %u says WORLD_SIZE=%u but rank %u says %u: every rank "
               "must be started with the same WORLD_SIZE",
               asked, world_size, job->world_set_by, job->world_size);
      return STORE_JOIN_CONFLICT;
    }
  }
  const char *other = holder ? holder(context, asked) : NULL;
  if (other) {
    snprintf(why, why_bytes,
             "rank %u is already registered from %s; this process (%s) says "
             "RANK=%u too: every rank needs its own RANK",
             asked, other, caller, asked);
    return STORE_JOIN_CONFLICT;
  }
  if (job->world_size == 0) {
    memcpy(job->id, job_id, job_id_bytes);
    job->id_bytes = job_id_bytes;
    memcpy(job->id_text, text, job_id_bytes + 1);
    job->world_size = world_size;
    job->world_set_by = asked;
  }
  *rank = asked;
  return STORE_JOIN_ACCEPTED;
}
