/* comm_split.c - new communicators from an existing one: xcoll_comm_split
 * (by color and key, as MPI_Comm_split and ncclCommSplit) and
 * xcoll_comm_shrink (without excluded ranks, as ncclCommShrink). The ranks
 * meet through the rendezvous store under the parent's prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "comm_create.h"
#include "cuda.h"
#include "dispatch.h"
#include "error.h"
#include "log.h"
#include "request.h"

/* Job-global store key handing out ids to split communicators (the world is 0).
 */
#define COMM_ID_COUNTER_KEY "xcoll/next_comm_id"

/* ---- split and shrink: the parts they share ---- */

/* This host's name without spaces, for counting ranks per host. */
static void host_name(char host[64]) {
  if (gethostname(host, 64) != 0 || host[0] == '\0')
    snprintf(host, 64, "unknown");
  host[63] = '\0';
  for (char *c = host; *c != '\0'; c++)
    if (*c == ' ')
      *c = '_';
}

/* Read the text a rank published under store_key into text (NUL-ended).
 * function names the caller and what is awaited in the message. */
static xcoll_status read_entry(xcoll_comm *comm, const char *function,
                               const char *what, int rank,
                               const char *store_key, char *text,
                               size_t text_bytes) {
  void *data = NULL;
  size_t bytes = 0;
  xcoll_status status = xcoll_store_get(comm->store, store_key, &data, &bytes);
  if (status != XCOLL_SUCCESS)
    return xcoll_error(comm, status,
                       "%s: waiting for rank %d's %s (store key '%s'): %s",
                       function, rank, what, store_key, xcoll_last_error());
  int fits = bytes < text_bytes;
  if (fits) {
    memcpy(text, data, bytes);
    text[bytes] = '\0';
  }
  free(data);
  if (!fits)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "%s: rank %d published a malformed %s under '%s' "
                       "(%zu bytes)",
                       function, rank, what, store_key, bytes);
  return XCOLL_SUCCESS;
}

/* Reads one rank's published text (NUL-ended) found under store_key. */
typedef xcoll_status (*store_exchange_read_fn)(xcoll_comm *comm, int rank,
                                               const char *store_key,
                                               const char *text, void *arg);

/* The store exchange of split and shrink: publish value under
 * <base><this rank>, then wait for and read, in rank order, the text each
 * rank r published under <base><r>, handing it to read_one with arg. A rank r
 * with skip[r] set takes no part (skip NULL: every rank does). function and
 * what name the caller and the entry in messages. Stops at the first
 * failure, read_one's included. */
static xcoll_status store_exchange(xcoll_comm *comm, const char *function,
                                   const char *what, const char *base,
                                   const char *value,
                                   const unsigned char *skip,
                                   store_exchange_read_fn read_one, void *arg) {
  char store_key[160];
  snprintf(store_key, sizeof store_key, "%s%d", base, comm->rank);
  xcoll_status status =
      xcoll_store_set(comm->store, store_key, value, strlen(value));
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);
  for (int r = 0; r < comm->world_size; r++) {
    if (skip != NULL && skip[r])
      continue;
    snprintf(store_key, sizeof store_key, "%s%d", base, r);
    char text[128];
    status = read_entry(comm, function, what, r, store_key, text, sizeof text);
    if (status != XCOLL_SUCCESS)
      return status;
    status = read_one(comm, r, store_key, text, arg);
    if (status != XCOLL_SUCCESS)
      return status;
  }
  return XCOLL_SUCCESS;
}

/* The new communicator's id: its rank 0 draws one from the job-global
 * counter and publishes it under id_key for the others. */
static xcoll_status new_comm_id(xcoll_comm *comm, const char *function,
                                const char *id_key, int new_rank,
                                uint64_t *comm_id) {
  if (new_rank == 0) {
    int64_t id = 0;
    xcoll_status status =
        xcoll_store_add(comm->store, COMM_ID_COUNTER_KEY, 1, &id);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    char value[32];
    int len = snprintf(value, sizeof value, "%lld", (long long)id);
    status = xcoll_store_set(comm->store, id_key, value, (size_t)len);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    *comm_id = (uint64_t)id;
    return XCOLL_SUCCESS;
  }
  char text[32];
  xcoll_status status = read_entry(comm, function, "new communicator id", 0,
                                   id_key, text, sizeof text);
  if (status != XCOLL_SUCCESS)
    return status;
  unsigned long long id = 0;
  if (sscanf(text, "%llu", &id) != 1 || id == 0)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "%s: malformed communicator id under '%s'", function,
                       id_key);
  *comm_id = id;
  return XCOLL_SUCCESS;
}

/* What a new communicator takes over from comm besides its place in it. */
typedef struct child_place {
  int rank, world_size, local_rank, local_world_size;
  uint64_t comm_id;
  int *world_ranks; /* world rank of each new rank; the child owns it */
} child_place;

/* Make and connect comm's child at place (its world_ranks is taken over,
 * freed on failure). */
static xcoll_status child_create(xcoll_comm *comm, const char *function,
                                 child_place *place, xcoll_comm **out) {
  xcoll_comm *child = xcoll_comm_new();
  if (child == NULL) {
    free(place->world_ranks);
    place->world_ranks = NULL;
    return xcoll_error_adopt(comm, XCOLL_ERR_NO_MEMORY);
  }
  child->rank = place->rank;
  child->world_size = place->world_size;
  child->local_rank = place->local_rank;
  child->local_world_size = place->local_world_size;
  child->world_ranks = place->world_ranks;
  place->world_ranks = NULL;
  child->device = comm->device;
  child->cuda = comm->cuda != NULL ? xcoll_cuda_ref(comm->cuda) : NULL;
  child->comm_id = place->comm_id;
  child->timeout_s = comm->timeout_s;
  child->options = comm->options;
  child->options.socket_ifname = NULL;
  child->backend = comm->backend;
  memcpy(child->master_addr, comm->master_addr, sizeof child->master_addr);
  child->master_port = comm->master_port;
  child->has_kv = comm->has_kv;
  child->kv = comm->kv;
  int held = 0;
  xcoll_status status = XCOLL_SUCCESS;
  if (comm->options.socket_ifname != NULL) {
    child->options.socket_ifname = strdup(comm->options.socket_ifname);
    if (child->options.socket_ifname == NULL) {
      status = xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                           "%s: cannot copy the interface name", function);
      goto fail;
    }
  }
  status = xcoll_algorithm_check_env(child);
  if (status == XCOLL_SUCCESS)
    status = xcoll_comm_connect(child, &held);
  if (status != XCOLL_SUCCESS) {
    xcoll_error_adopt(comm, status);
    goto fail;
  }
  *out = child;
  return XCOLL_SUCCESS;

fail:
  xcoll_comm_free(child, held);
  return status;
}

/* ---- split ---- */

/* What each rank publishes for a split. */
typedef struct split_entry {
  int color;
  int key;
  int old_rank;
  int world_rank;
  char host[64];
} split_entry;

static int compare_by_key_then_rank(const void *a, const void *b) {
  const split_entry *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return (x->old_rank > y->old_rank) - (x->old_rank < y->old_rank);
}

/* Reads split's entry from one rank's text; arg is the entries array. */
static xcoll_status split_read(xcoll_comm *comm, int rank,
                               const char *store_key, const char *text,
                               void *arg) {
  split_entry *entry = &((split_entry *)arg)[rank];
  entry->old_rank = rank;
  if (sscanf(text, "%d %d %63s %d", &entry->color, &entry->key, entry->host,
             &entry->world_rank) != 4)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "xcoll_comm_split: rank %d published a malformed "
                       "entry under '%s'",
                       rank, store_key);
  return XCOLL_SUCCESS;
}

/* Publish (color, key, host, world rank) and read every rank's. entries
 * has world_size slots. */
static xcoll_status split_exchange(xcoll_comm *comm, const char *base,
                                   int color, int key, split_entry *entries) {
  char host[64];
  host_name(host);
  char value[128];
  snprintf(value, sizeof value, "%d %d %s %d", color, key, host,
           xcoll_comm_world_rank(comm, comm->rank));
  return store_exchange(comm, "xcoll_comm_split", "color and key", base,
                        value, NULL, split_read, entries);
}

xcoll_status xcoll_comm_split(xcoll_comm_t comm, int color, int key,
                              xcoll_comm_t *newcomm) {
  if (newcomm == NULL)
    return xcoll_error(xcoll_comm_is_live(comm) ? comm : NULL,
                       XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_split: newcomm is NULL");
  *newcomm = NULL;
  xcoll_status status = xcoll_comm_check(comm);
  if (status != XCOLL_SUCCESS)
    return status;
  if (color < XCOLL_SPLIT_NOCOLOR)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_split: color=%d must be >= 0, or "
                       "XCOLL_SPLIT_NOCOLOR (-1) for no new communicator",
                       color);

  char base[96];
  snprintf(base, sizeof base, "%ssplit%llu/", comm->store_prefix,
           (unsigned long long)comm->split_count++);
  split_entry *entries = calloc((size_t)comm->world_size, sizeof *entries);
  if (entries == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_comm_split: cannot allocate %d entries",
                       comm->world_size);
  status = split_exchange(comm, base, color, key, entries);
  if (status != XCOLL_SUCCESS || color == XCOLL_SPLIT_NOCOLOR) {
    free(entries);
    return status;
  }

  /* Keep this color's members, ordered by (key, old rank). */
  int size = 0;
  for (int r = 0; r < comm->world_size; r++)
    if (entries[r].color == color)
      entries[size++] = entries[r];
  qsort(entries, (size_t)size, sizeof *entries, compare_by_key_then_rank);
  child_place place = {.rank = -1};
  const char *my_host = NULL;
  place.world_ranks = malloc((size_t)size * sizeof *place.world_ranks);
  if (place.world_ranks == NULL) {
    free(entries);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_comm_split: cannot allocate %d ranks", size);
  }
  for (int i = 0; i < size; i++) {
    place.world_ranks[i] = entries[i].world_rank;
    if (entries[i].old_rank == comm->rank) {
      place.rank = i;
      my_host = entries[i].host;
    }
  }
  if (place.rank < 0) {
    free(entries);
    free(place.world_ranks);
    return xcoll_error(comm, XCOLL_ERR_INTERNAL,
                       "xcoll_comm_split: rank %d missing from its own group",
                       comm->rank);
  }
  place.world_size = size;
  for (int i = 0; i < size; i++) {
    if (strcmp(entries[i].host, my_host) != 0)
      continue;
    if (i < place.rank)
      place.local_rank++;
    place.local_world_size++;
  }
  free(entries);

  char id_key[160];
  snprintf(id_key, sizeof id_key, "%scolor%d/id", base, color);
  status = new_comm_id(comm, "xcoll_comm_split", id_key, place.rank,
                       &place.comm_id);
  if (status != XCOLL_SUCCESS) {
    free(place.world_ranks);
    return status;
  }
  xcoll_comm *child = NULL;
  status = child_create(comm, "xcoll_comm_split", &place, &child);
  if (status != XCOLL_SUCCESS)
    return status;
  XCOLL_INFO("comm %llu: split of comm %llu (color %d, key %d): rank %d of "
             "%d, local %d of %d",
             (unsigned long long)child->comm_id,
             (unsigned long long)comm->comm_id, color, key, child->rank,
             child->world_size, child->local_rank, child->local_world_size);
  *newcomm = child;
  return XCOLL_SUCCESS;
}

/* ---- shrink ---- */

/* Check the exclude list against comm; mark excluded[r] for each rank r
 * listed. */
static xcoll_status shrink_check_list(xcoll_comm *comm, const int *ranks,
                                      int count, unsigned char *excluded) {
  if (count < 0 || (count > 0 && ranks == NULL))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: exclude_count=%d with "
                       "exclude_ranks %s: pass a list of count >= 0 ranks",
                       count, ranks == NULL ? "NULL" : "set");
  for (int i = 0; i < count; i++) {
    int r = ranks[i];
    if (r < 0 || r >= comm->world_size)
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_comm_shrink: exclude_ranks[%d]=%d is outside "
                         "[0, world_size=%d) of communicator %llu",
                         i, r, comm->world_size,
                         (unsigned long long)comm->comm_id);
    if (excluded[r])
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_comm_shrink: rank %d is listed twice in "
                         "exclude_ranks",
                         r);
    excluded[r] = 1;
  }
  if (count == comm->world_size)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: exclude_ranks lists all %d ranks: "
                       "at least one must be left",
                       count);
  return XCOLL_SUCCESS;
}

/* A digest of the excluded set (FNV-1a over the marks), published by each
 * rank left so that the others can see they agree. */
static uint64_t shrink_digest(const unsigned char *excluded, int world_size) {
  uint64_t hash = 14695981039346656037ULL;
  for (int r = 0; r < world_size; r++) {
    hash ^= excluded[r];
    hash *= 1099511628211ULL;
  }
  return hash;
}

/* Settle comm before the shrink, as flags ask. */
static xcoll_status shrink_settle(xcoll_comm *comm, int flags) {
  if (flags & XCOLL_SHRINK_ABORT) {
    xcoll_status status = xcoll_comm_abort(comm);
    if (status != XCOLL_SUCCESS)
      return status;
    xcoll_queue_drain(comm);
    xcoll_dispatch_quiesce(comm);
    return XCOLL_SUCCESS;
  }
  if (xcoll_queue_busy(comm))
    return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                       "xcoll_comm_shrink: communicator %llu has a collective "
                       "in flight on rank %d: wait for its requests first, or "
                       "pass XCOLL_SHRINK_ABORT",
                       (unsigned long long)comm->comm_id, comm->rank);
  return XCOLL_SUCCESS;
}

/* Tell the store which world ranks are gone for good, so that their
 * departure no longer fails its waits (XCOLL_STORE_EXCLUDED_PREFIX). */
static xcoll_status shrink_forgive(xcoll_comm *comm,
                                   const unsigned char *excluded) {
  if (comm->has_kv)
    return XCOLL_SUCCESS; /* a caller's store fails nobody's waits */
  for (int r = 0; r < comm->world_size; r++) {
    if (!excluded[r])
      continue;
    char key[64];
    snprintf(key, sizeof key, "%s%d", XCOLL_STORE_EXCLUDED_PREFIX,
             xcoll_comm_world_rank(comm, r));
    xcoll_status status = xcoll_store_set(comm->store, key, "1", 1);
    if (status != XCOLL_SUCCESS)
      return xcoll_error(comm, status,
                         "xcoll_comm_shrink: cannot mark rank %d excluded in "
                         "the rendezvous store: %s",
                         r, xcoll_last_error());
  }
  return XCOLL_SUCCESS;
}

/* What shrink_read compares each rank's entry with, and fills. */
typedef struct shrink_reading {
  uint64_t digest;   /* of this rank's exclude list */
  const char *host;  /* this rank's host */
  child_place *place;
} shrink_reading;

/* Checks one rank left's digest against ours and counts it into the new
 * communicator's place; arg is a shrink_reading. */
static xcoll_status shrink_read(xcoll_comm *comm, int r,
                                const char *store_key, const char *text,
                                void *arg) {
  shrink_reading *reading = arg;
  child_place *place = reading->place;
  int new_rank = place->world_size++;
  place->world_ranks[new_rank] = xcoll_comm_world_rank(comm, r);
  if (r == comm->rank)
    place->rank = new_rank;
  unsigned long long theirs = 0;
  char their_host[64];
  if (sscanf(text, "%16llx %63s", &theirs, their_host) != 2)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "xcoll_comm_shrink: rank %d published a malformed "
                       "entry under '%s'",
                       r, store_key);
  if (theirs != reading->digest)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: rank %d passed a different "
                       "exclude list than rank %d: every rank left must "
                       "exclude the same ranks",
                       r, comm->rank);
  if (strcmp(their_host, reading->host) == 0) {
    if (r < comm->rank)
      place->local_rank++;
    place->local_world_size++;
  }
  return XCOLL_SUCCESS;
}

/* Publish (digest, host) and read those of the ranks left; fill place's
 * rank, sizes and world ranks. */
static xcoll_status shrink_exchange(xcoll_comm *comm, const char *base,
                                    const unsigned char *excluded,
                                    child_place *place) {
  char host[64];
  host_name(host);
  shrink_reading reading = {
      .digest = shrink_digest(excluded, comm->world_size),
      .host = host,
      .place = place,
  };
  char value[128];
  snprintf(value, sizeof value, "%016llx %s",
           (unsigned long long)reading.digest, host);
  return store_exchange(comm, "xcoll_comm_shrink", "exclude list", base,
                        value, excluded, shrink_read, &reading);
}

xcoll_status xcoll_comm_shrink(xcoll_comm_t comm, const int *exclude_ranks,
                               int exclude_count, int flags,
                               xcoll_comm_t *newcomm) {
  if (newcomm == NULL)
    return xcoll_error(xcoll_comm_is_live(comm) ? comm : NULL,
                       XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: newcomm is NULL");
  *newcomm = NULL;
  /* A broken communicator passes: shrinking it is the point. */
  xcoll_status status = xcoll_comm_check_live(comm, "xcoll_comm_shrink");
  if (status != XCOLL_SUCCESS)
    return status;
  if ((flags & ~XCOLL_SHRINK_ABORT) != 0)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: flags=%#x: pass "
                       "XCOLL_SHRINK_DEFAULT or XCOLL_SHRINK_ABORT",
                       (unsigned)flags);
  unsigned char *excluded = calloc((size_t)comm->world_size, 1);
  child_place place = {.rank = -1};
  place.world_ranks = malloc((size_t)comm->world_size * sizeof(int));
  if (excluded == NULL || place.world_ranks == NULL) {
    free(excluded);
    free(place.world_ranks);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_comm_shrink: cannot allocate %d ranks",
                       comm->world_size);
  }
  status = shrink_check_list(comm, exclude_ranks, exclude_count, excluded);
  if (status != XCOLL_SUCCESS || excluded[comm->rank]) {
    if (status == XCOLL_SUCCESS)
      XCOLL_INFO("comm %llu: rank %d is in its own shrink's exclude list: no "
                 "new communicator for it",
                 (unsigned long long)comm->comm_id, comm->rank);
    goto out;
  }
  status = shrink_settle(comm, flags);
  if (status != XCOLL_SUCCESS)
    goto out;
  status = shrink_forgive(comm, excluded);
  if (status != XCOLL_SUCCESS)
    goto out;
  char base[96];
  snprintf(base, sizeof base, "%sshrink%llu/", comm->store_prefix,
           (unsigned long long)comm->shrink_count++);
  status = shrink_exchange(comm, base, excluded, &place);
  if (status != XCOLL_SUCCESS)
    goto out;
  char id_key[160];
  snprintf(id_key, sizeof id_key, "%sid", base);
  status = new_comm_id(comm, "xcoll_comm_shrink", id_key, place.rank,
                       &place.comm_id);
  if (status != XCOLL_SUCCESS)
    goto out;
  xcoll_comm *child = NULL;
  status = child_create(comm, "xcoll_comm_shrink", &place, &child);
  if (status != XCOLL_SUCCESS)
    goto out;
  /* The world's rank 0 is the new rank 0 when it is left: the store moves
   * with it, and the new communicator's destroy holds it up for its ranks. */
  child->finalize_store = comm->finalize_store && !excluded[0];
  if (comm->store_server != NULL) {
    child->store_server = comm->store_server;
    comm->store_server = NULL;
  }
  XCOLL_INFO("comm %llu: shrink of comm %llu (%d ranks excluded%s): rank %d "
             "of %d was rank %d",
             (unsigned long long)child->comm_id,
             (unsigned long long)comm->comm_id, exclude_count,
             (flags & XCOLL_SHRINK_ABORT) ? ", old one aborted" : "",
             child->rank, child->world_size, comm->rank);
  *newcomm = child;

out:
  free(excluded);
  free(place.world_ranks);
  return status;
}
