/* group.h - point-to-point calls and groups (xcoll_group_start/end,
 * recorded by core/group_record.c), and the runner of a group's sends and
 * receives (xcoll_group_run in algorithm.h, core/group.c). */
#ifndef XCOLL_CORE_GROUP_H
#define XCOLL_CORE_GROUP_H

#include "algorithm.h"
#include "xcoll.h"

struct xcoll_comm;

/* One recorded call of a group, with what it owns until the group ends. */
typedef struct xcoll_group_op {
  xcoll_coll_args args;
  void *scratch; /* premul scaled input, or alltoallv's copied arrays */
} xcoll_group_op;

/* A group's calls (XCOLL_COLL_GROUP's args->group). */
struct xcoll_group_ops {
  struct xcoll_comm *comm;
  int count, capacity;
  xcoll_group_op *ops;
  int p2p; /* sends and receives among ops */
};

/* Nonzero while this thread is between xcoll_group_start and the
 * outermost xcoll_group_end. */
int xcoll_group_active(void);

/* Record a validated call (premul sums applied, alltoallv's arrays copied:
 * scratch is then owned by the group) in this thread's group. Errors:
 * XCOLL_ERR_INVALID_USAGE (another communicator than the group's),
 * XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_group_record(struct xcoll_comm *comm,
                                const xcoll_coll_args *args, void *scratch);

/* Issue one validated send or recv outside a group: a group of one.
 * request NULL: blocking. */
xcoll_status xcoll_group_single(struct xcoll_comm *comm,
                                const xcoll_coll_args *args,
                                xcoll_request_t *request);

/* Free a group and what its calls own (a request's scratch_free). */
void xcoll_group_free(void *group);

#endif
