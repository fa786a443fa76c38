/* bootstrap.h - collectives over the rendezvous store, for the setup phase
 * of a communicator: every rank publishes a small record (an address, a net
 * plugin handle) and learns everyone else's (NCCL's bootstrapAllGather,
 * src/bootstrap.cc, done over xcoll's store instead of a ring of sockets).
 *
 * Keys live under comm->store_prefix + "bootstrap/<name>/<rank>", so two
 * communicators never mix, and name keeps two exchanges of one communicator
 * apart. A name must be used once per communicator: the keys are not deleted
 * (that would need a barrier), so a second exchange under the same name would
 * read the first one's values. Callers run in the setup phase, one thread per
 * communicator (the store client is not shared between threads). */
#ifndef XCOLL_CORE_BOOTSTRAP_H
#define XCOLL_CORE_BOOTSTRAP_H

#include <stddef.h>

#include "xcoll.h"

struct xcoll_comm;

/* Longest name accepted, bytes without the terminating NUL. */
#define XCOLL_BOOTSTRAP_MAX_NAME 128

/* Every rank contributes bytes bytes at mine; all (world_size * bytes bytes)
 * receives every rank's contribution in rank order, this rank's included.
 * bytes must be the same on every rank. Waits for each peer up to the
 * store's timeout (comm->timeout_s).
 * Errors: XCOLL_ERR_INVALID_ARGUMENT (NULL comm, name, mine with bytes > 0 or
 * all; a name that is empty, too long or contains '/'); a store error
 * (XCOLL_ERR_TIMEOUT naming the missing key, XCOLL_ERR_REMOTE...); and
 * XCOLL_ERR_PROTOCOL naming the rank whose value is not bytes long
 * (a rank built differently, or a name used twice). The message is recorded
 * in comm. */
xcoll_status xcoll_bootstrap_allgather(struct xcoll_comm *comm,
                                       const char *name, const void *mine,
                                       size_t bytes, void *all);

/* Like xcoll_bootstrap_allgather, for records whose size differs between
 * ranks (a UCX worker address): rank r's record comes back as values[r], a
 * malloc'd buffer of sizes[r] bytes. *values and *sizes are malloc'd arrays of
 * world_size entries; free them with xcoll_bootstrap_free. A record longer
 * than max_bytes is XCOLL_ERR_PROTOCOL naming the rank (bounding what a
 * malformed peer can make this rank allocate). On error *values and *sizes
 * are NULL and nothing is left to free. */
xcoll_status xcoll_bootstrap_allgatherv(struct xcoll_comm *comm,
                                        const char *name, const void *mine,
                                        size_t bytes, size_t max_bytes,
                                        void ***values, size_t **sizes);

/* Free what xcoll_bootstrap_allgatherv returned (count = world_size). NULL
 * is fine. */
void xcoll_bootstrap_free(int count, void **values, size_t *sizes);

#endif
