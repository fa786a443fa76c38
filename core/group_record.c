/* group_record.c - the calling side of point-to-point calls and groups
 * (group.h): xcoll_group_start and xcoll_group_end, recording a thread's
 * calls between them, a send or recv outside a group as a group of one, and
 * handing the group to dispatch (core/dispatch.c) as one job of kind
 * XCOLL_COLL_GROUP. Running the group is in group.c, below dispatch. */
#include "group.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "dispatch.h"
#include "error.h"
#include "request.h"

static _Thread_local int group_depth;
static _Thread_local struct xcoll_group_ops *group_now;

int xcoll_group_active(void) { return group_depth > 0; }

/* One freed group kept for the next, with its ops array, so that a small
 * send, recv or group allocates nothing (a calloc, a realloc and two frees
 * were about a tenth of a small sendrecv's instructions). Any thread may
 * free a group (a request completes on the progress thread) and any may
 * start one: the slot is taken and given back by atomic exchange. */
#define GROUP_SPARE_OPS 64
static _Atomic(struct xcoll_group_ops *) group_spare;

void xcoll_group_free(void *p) {
  struct xcoll_group_ops *group = p;
  if (group == NULL)
    return;
  for (int i = 0; i < group->count; i++)
    free(group->ops[i].scratch);
  if (group->capacity <= GROUP_SPARE_OPS) {
    group->count = group->p2p = 0;
    group->comm = NULL;
    group = atomic_exchange(&group_spare, group);
    if (group == NULL)
      return;
  }
  free(group->ops);
  free(group);
}

static struct xcoll_group_ops *group_new(xcoll_comm *comm) {
  struct xcoll_group_ops *group = atomic_exchange(&group_spare, NULL);
  if (group == NULL)
    group = calloc(1, sizeof *group);
  if (group != NULL)
    group->comm = comm;
  return group;
}

static xcoll_status group_append(struct xcoll_group_ops *group,
                                 const xcoll_coll_args *args, void *scratch) {
  if (group->count == group->capacity) {
    int capacity = group->capacity ? 2 * group->capacity : 8;
    xcoll_group_op *ops = realloc(group->ops, (size_t)capacity * sizeof *ops);
    if (ops == NULL)
      return xcoll_error(group->comm, XCOLL_ERR_NO_MEMORY,
                         "xcoll_group: out of memory recording call %d",
                         group->count + 1);
    group->ops = ops;
    group->capacity = capacity;
  }
  group->ops[group->count].args = *args;
  group->ops[group->count].scratch = scratch;
  group->count++;
  if (args->kind == XCOLL_COLL_SEND || args->kind == XCOLL_COLL_RECV)
    group->p2p++;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_group_record(xcoll_comm *comm, const xcoll_coll_args *args,
                                void *scratch) {
  if (group_now == NULL) {
    group_now = group_new(comm);
    if (group_now == NULL) {
      free(scratch);
      return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                         "xcoll_group: out of memory for a group");
    }
  }
  if (group_now->comm != comm) {
    free(scratch);
    return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                       "xcoll_%s in a group on communicator %p, but the "
                       "group's earlier calls are on %p: a group holds calls "
                       "of one communicator; end it first",
                       xcoll_coll_name(args->kind), (void *)comm,
                       (void *)group_now->comm);
  }
  xcoll_status status = group_append(group_now, args, scratch);
  if (status != XCOLL_SUCCESS)
    free(scratch);
  return status;
}

/* Number the group's collectives (every rank records them in the same
 * order) and send it on its way. The group is owned by the request
 * (non-blocking) or freed here. */
static xcoll_status group_submit(struct xcoll_group_ops *group,
                                 xcoll_request_t *request) {
  xcoll_comm *comm = group->comm;
  xcoll_coll_args args;
  memset(&args, 0, sizeof args);
  args.kind = XCOLL_COLL_GROUP;
  args.group = group;
  args.dtype = XCOLL_UINT8;
  /* The group's place among the collectives: before the next one. */
  args.seq = comm->next_seq;
  args.count = (size_t)group->count;
  if (group->count == 1) /* xcoll_isend/irecv: checked by dispatch */
    args.stream = group->ops[0].args.stream;
  for (int i = 0; i < group->count; i++) {
    xcoll_coll_args *op = &group->ops[i].args;
    if (op->kind != XCOLL_COLL_SEND && op->kind != XCOLL_COLL_RECV)
      op->seq = comm->next_seq++;
  }
  xcoll_status status = xcoll_dispatch(comm, &args, request);
  if (request != NULL && status == XCOLL_SUCCESS)
    xcoll_request_adopt_with(*request, group, xcoll_group_free);
  else
    xcoll_group_free(group);
  return status;
}

xcoll_status xcoll_group_single(xcoll_comm *comm, const xcoll_coll_args *args,
                                xcoll_request_t *request) {
  struct xcoll_group_ops *group = group_new(comm);
  if (group == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_%s: out of memory", xcoll_coll_name(args->kind));
  xcoll_status status = group_append(group, args, NULL);
  if (status != XCOLL_SUCCESS) {
    xcoll_group_free(group);
    return status;
  }
  return group_submit(group, request);
}

xcoll_status xcoll_group_start(void) {
  group_depth++;
  return XCOLL_SUCCESS;
}

static xcoll_status group_end(xcoll_request_t *request) {
  if (request != NULL)
    *request = NULL;
  if (group_depth == 0)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_USAGE,
                       "xcoll_group_end without xcoll_group_start on this "
                       "thread");
  if (--group_depth > 0 || group_now == NULL) {
    /* An inner end, or an empty group: nothing to run. */
    if (request == NULL)
      return XCOLL_SUCCESS;
    *request = xcoll_request_completed(NULL, XCOLL_SUCCESS);
    return *request != NULL ? XCOLL_SUCCESS : XCOLL_ERR_NO_MEMORY;
  }
  struct xcoll_group_ops *group = group_now;
  group_now = NULL;
  xcoll_status status = xcoll_comm_check(group->comm);
  if (status != XCOLL_SUCCESS) {
    xcoll_group_free(group);
    return status;
  }
  return group_submit(group, request);
}

xcoll_status xcoll_group_end(void) { return group_end(NULL); }

xcoll_status xcoll_igroup_end(xcoll_request_t *request) {
  if (request == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_igroup_end: request is NULL: pass the address "
                       "of an xcoll_request_t");
  return group_end(request);
}
