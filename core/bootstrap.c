/* bootstrap.c - allgather over the rendezvous store (see bootstrap.h). Each
 * rank sets its own key and then gets every peer's, in rank order: the store
 * parks a get until the key exists, so there is no barrier and no polling. */
#include "bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "store.h"

static xcoll_status check_args(xcoll_comm *comm, const char *name,
                               const void *mine, size_t bytes) {
  if (comm == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap: comm is NULL");
  if (name == NULL || name[0] == '\0' ||
      strlen(name) > XCOLL_BOOTSTRAP_MAX_NAME || strchr(name, '/') != NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap: the exchange name \"%s\" must be 1 to %d "
                       "characters without '/'",
                       name ? name : "(null)", XCOLL_BOOTSTRAP_MAX_NAME);
  if (mine == NULL && bytes > 0)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap %s: rank %d's contribution is NULL with %zu "
                       "bytes",
                       name, comm->rank, bytes);
  if (bytes > XCOLL_STORE_MAX_VALUE)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap %s: a contribution of %zu bytes exceeds the "
                       "store's limit of %u bytes",
                       name, bytes, XCOLL_STORE_MAX_VALUE);
  return XCOLL_SUCCESS;
}

static void key_of(const xcoll_comm *comm, const char *name, int rank,
                   char *key, size_t key_bytes) {
  snprintf(key, key_bytes, "%sbootstrap/%s/%d", comm->store_prefix, name, rank);
}

static xcoll_status publish(xcoll_comm *comm, const char *name,
                            const void *mine, size_t bytes) {
  char key[XCOLL_STORE_MAX_KEY];
  key_of(comm, name, comm->rank, key, sizeof key);
  xcoll_status s = xcoll_store_set(comm->store, key, mine, bytes);
  if (s != XCOLL_SUCCESS)
    return xcoll_error(comm, s,
                       "bootstrap %s: rank %d could not publish %zu bytes under "
                       "store key %s: %s",
                       name, comm->rank, bytes, key, xcoll_last_error());
  return XCOLL_SUCCESS;
}

/* Get rank's record (malloc'd into *value, *bytes long). */
static xcoll_status fetch(xcoll_comm *comm, const char *name, int rank,
                          void **value, size_t *bytes) {
  char key[XCOLL_STORE_MAX_KEY];
  key_of(comm, name, rank, key, sizeof key);
  xcoll_status s = xcoll_store_get(comm->store, key, value, bytes);
  if (s != XCOLL_SUCCESS)
    return xcoll_error(comm, s,
                       "bootstrap %s: rank %d did not get rank %d's record "
                       "(store key %s): %s; is rank %d running?",
                       name, comm->rank, rank, key, xcoll_last_error(), rank);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_bootstrap_allgather(xcoll_comm *comm, const char *name,
                                       const void *mine, size_t bytes,
                                       void *all) {
  xcoll_status s = check_args(comm, name, mine, bytes);
  if (s != XCOLL_SUCCESS) return s;
  if (all == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap %s: the output buffer is NULL", name);
  char *out = all;
  /* memmove: mine may already sit at its place inside all. */
  if (bytes > 0) memmove(out + (size_t)comm->rank * bytes, mine, bytes);
  if (comm->world_size == 1) return XCOLL_SUCCESS;
  s = publish(comm, name, out + (size_t)comm->rank * bytes, bytes);
  if (s != XCOLL_SUCCESS) return s;
  for (int r = 0; r < comm->world_size; r++) {
    if (r == comm->rank) continue;
    void *value = NULL;
    size_t got = 0;
    s = fetch(comm, name, r, &value, &got);
    if (s != XCOLL_SUCCESS) return s;
    if (got != bytes) {
      free(value);
      return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                         "bootstrap %s: rank %d contributed %zu bytes where "
                         "rank %d expects %zu: do all ranks run the same "
                         "xcoll build and settings?",
                         name, r, got, comm->rank, bytes);
    }
    if (bytes > 0) memcpy(out + (size_t)r * bytes, value, bytes);
    free(value);
  }
  return XCOLL_SUCCESS;
}

void xcoll_bootstrap_free(int count, void **values, size_t *sizes) {
  if (values != NULL)
    for (int r = 0; r < count; r++) free(values[r]);
  free(values);
  free(sizes);
}

xcoll_status xcoll_bootstrap_allgatherv(xcoll_comm *comm, const char *name,
                                        const void *mine, size_t bytes,
                                        size_t max_bytes, void ***values,
                                        size_t **sizes) {
  if (values != NULL) *values = NULL;
  if (sizes != NULL) *sizes = NULL;
  xcoll_status s = check_args(comm, name, mine, bytes);
  if (s != XCOLL_SUCCESS) return s;
  if (values == NULL || sizes == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap %s: values or sizes is NULL", name);
  if (bytes > max_bytes)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "bootstrap %s: rank %d's record of %zu bytes exceeds "
                       "the limit of %zu bytes",
                       name, comm->rank, bytes, max_bytes);
  int n = comm->world_size;
  void **v = calloc((size_t)n, sizeof *v);
  size_t *z = calloc((size_t)n, sizeof *z);
  if (v == NULL || z == NULL) {
    free(v);
    free(z);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "bootstrap %s: no memory for %d records", name, n);
  }
  /* malloc(0) may return NULL: keep every entry a real buffer. */
  v[comm->rank] = malloc(bytes > 0 ? bytes : 1);
  if (v[comm->rank] == NULL) {
    xcoll_bootstrap_free(n, v, z);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "bootstrap %s: no memory for %zu bytes", name, bytes);
  }
  if (bytes > 0) memcpy(v[comm->rank], mine, bytes);
  z[comm->rank] = bytes;
  if (n > 1) s = publish(comm, name, mine, bytes);
  for (int r = 0; r < n && s == XCOLL_SUCCESS; r++) {
    if (r == comm->rank) continue;
    s = fetch(comm, name, r, &v[r], &z[r]);
    if (s == XCOLL_SUCCESS && z[r] > max_bytes)
      s = xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                      "bootstrap %s: rank %d contributed %zu bytes, more than "
                      "the limit of %zu: do all ranks run the same xcoll "
                      "build?",
                      name, r, z[r], max_bytes);
  }
  if (s != XCOLL_SUCCESS) {
    xcoll_bootstrap_free(n, v, z);
    return s;
  }
  *values = v;
  *sizes = z;
  return XCOLL_SUCCESS;
}
