/* group.c - point-to-point calls and groups, as ncclGroupStart/End have
 * them: between start and end a thread's calls are recorded, and the end
 * runs them together, so that any pattern of sends and receives completes
 * without deadlock.
 *
 * A group runs as one host-driven job (kind XCOLL_COLL_GROUP) through
 * core's request queue, in issue order with the communicator's other calls:
 *  1. Sends and receives with this rank itself are paired in order and
 *     copied.
 *  2. Fingerprints: for each send and each receive, a 24-byte fingerprint
 *     (core/fingerprint.h: kind send or recv, count, dtype) goes to the
 *     peer, all posted at once. Between two ranks, the messages one way are
 *     the sender's sends' fingerprints in order, then its receives'; each
 *     side checks the other's against its own calls, so a send matched
 *     with a receive of another count or dtype fails on both ranks, naming
 *     both calls, before any data moves.
 *  3. Data: every receive, then every send, posted at once; wait for all.
 *  4. The collectives recorded in the group, in order: core/dispatch.c runs
 *     each through xcoll_coll_run once this file's xcoll_group_run is done.
 * Point-to-point calls do not take a collective sequence number (only two
 * ranks take part); their messages carry the group fingerprint, ordered
 * just before the next collective (fingerprint.h), so a rank in a group
 * and a rank in a collective are told apart.
 *
 * Recording a thread's calls and handing the group to dispatch is in
 * group_record.c, above dispatch; running it is here, below dispatch, which
 * calls xcoll_group_run. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_COLL /* log.h */
#include "group.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms/pipeline.h"
#include "comm.h"
#include "dtype.h"
#include "error.h"
#include "fingerprint.h"

/* Tag steps of a group's messages (below 2^24, above any algorithm's). */
#define GROUP_STEP_FINGERPRINT 0xfffff0u
#define GROUP_STEP_DATA 0xfffff1u
/* Remote sends and receives of a group whose bookkeeping fits on the
 * stack (about 1 KiB). */
#define GROUP_STACK_CALLS 16

/* ---- running a group ---- */

static size_t op_bytes(const xcoll_coll_args *args) {
  return args->count * xcoll_datatype_size(args->dtype);
}

/* "send to rank 1 (4 float32)" */
static void describe_p2p(const xcoll_coll_args *a, char *out, size_t n) {
  snprintf(out, n, "%s %s rank %d (%zu %s)", xcoll_coll_name(a->kind),
           a->kind == XCOLL_COLL_SEND ? "to" : "from", a->peer, a->count,
           xcoll_datatype_name(a->dtype));
}

static xcoll_fingerprint p2p_fingerprint(const xcoll_coll_args *group_args,
                                         const xcoll_coll_args *a) {
  xcoll_fingerprint fp;
  memset(&fp, 0, sizeof fp);
  fp.valid = 1;
  fp.seq = group_args->seq;
  fp.kind = (uint8_t)a->kind;
  fp.count = (uint64_t)a->count;
  fp.dtype = (uint8_t)a->dtype;
  return fp;
}

/* Sends and receives with this rank: the k-th send to self pairs with the
 * k-th receive from self. */
static xcoll_status run_self(xcoll_comm *comm, struct xcoll_group_ops *g) {
  int r = 0;
  for (int s = 0; s < g->count; s++) {
    const xcoll_coll_args *send = &g->ops[s].args;
    if (send->kind != XCOLL_COLL_SEND || send->peer != comm->rank)
      continue;
    while (r < g->count && (g->ops[r].args.kind != XCOLL_COLL_RECV ||
                            g->ops[r].args.peer != comm->rank))
      r++;
    char what[96];
    describe_p2p(send, what, sizeof what);
    if (r == g->count)
      return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                         "xcoll_send to this rank (rank %d, %zu %s) has no "
                         "matching xcoll_recv from rank %d in its group",
                         comm->rank, send->count,
                         xcoll_datatype_name(send->dtype), comm->rank);
    const xcoll_coll_args *recv = &g->ops[r].args;
    if (recv->count != send->count || recv->dtype != send->dtype)
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_send to this rank (%zu %s) is matched by an "
                         "xcoll_recv of %zu %s in its group: a send and its "
                         "receive must have the same count and dtype",
                         send->count, xcoll_datatype_name(send->dtype),
                         recv->count, xcoll_datatype_name(recv->dtype));
    if (op_bytes(send) > 0 && recv->recvbuf != send->sendbuf)
      memmove(recv->recvbuf, send->sendbuf, op_bytes(send));
    r++;
  }
  for (; r < g->count; r++)
    if (g->ops[r].args.kind == XCOLL_COLL_RECV && g->ops[r].args.peer == comm->rank)
      return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                         "xcoll_recv from this rank (rank %d, %zu %s) has no "
                         "matching xcoll_send to rank %d in its group",
                         comm->rank, g->ops[r].args.count,
                         xcoll_datatype_name(g->ops[r].args.dtype), comm->rank);
  return XCOLL_SUCCESS;
}

/* The calls with a peer, for a failure message: "send to rank 1 (4
 * float32), recv from rank 1 (4 float32)"; at most a few. */
static void list_calls(const struct xcoll_group_ops *g, int rank, char *out,
                       size_t n) {
  size_t used = 0;
  int listed = 0, total = 0;
  out[0] = '\0';
  for (int i = 0; i < g->count; i++) {
    const xcoll_coll_args *a = &g->ops[i].args;
    if ((a->kind != XCOLL_COLL_SEND && a->kind != XCOLL_COLL_RECV) ||
        a->peer == rank)
      continue;
    total++;
    if (listed == 4)
      continue;
    char what[96];
    describe_p2p(a, what, sizeof what);
    int w = snprintf(out + used, n - used, "%s%s", listed ? ", " : "", what);
    if (w > 0 && (size_t)w < n - used)
      used += (size_t)w;
    listed++;
  }
  if (total > listed && used < n)
    snprintf(out + used, n - used, " and %d more", total - listed);
}

/* Check a peer's fingerprint for one of this rank's calls (mine). */
static xcoll_status judge(xcoll_comm *comm, const xcoll_coll_args *mine,
                          const uint8_t *bytes) {
  xcoll_fingerprint theirs;
  int malformed = xcoll_fingerprint_decode(bytes, &theirs) != 0;
  xcoll_coll_kind want =
      mine->kind == XCOLL_COLL_SEND ? XCOLL_COLL_RECV : XCOLL_COLL_SEND;
  if (!malformed && theirs.kind == want && theirs.count == mine->count &&
      theirs.dtype == (uint8_t)mine->dtype)
    return XCOLL_SUCCESS;
  /* Only a mismatch is described (formatting it on every match was a
   * quarter of a small sendrecv's instructions). */
  char mine_text[96];
  describe_p2p(mine, mine_text, sizeof mine_text);
  if (malformed)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "%s: rank %d sent a malformed fingerprint", mine_text,
                       mine->peer);
  if (theirs.kind != XCOLL_COLL_SEND && theirs.kind != XCOLL_COLL_RECV)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "point-to-point mismatch: rank %d called %s, but rank "
                       "%d's matching message is not from a send or recv",
                       comm->rank, mine_text, mine->peer);
  return xcoll_error(
      comm, XCOLL_ERR_PROTOCOL,
      "point-to-point mismatch: rank %d called %s, matched by rank %d's %s "
      "(%" PRIu64 " %s): a send and its receive must have the same count and "
      "dtype, and between two ranks sends and receives match in issue order",
      comm->rank, mine_text, mine->peer,
      xcoll_coll_name((xcoll_coll_kind)theirs.kind), theirs.count,
      xcoll_datatype_name((xcoll_datatype)theirs.dtype));
}

static xcoll_status run_p2p(xcoll_comm *comm, const xcoll_coll_args *args,
                            struct xcoll_group_ops *g) {
  const int rank = comm->rank;
  int remote = 0;
  for (int i = 0; i < g->count; i++) {
    const xcoll_coll_args *a = &g->ops[i].args;
    if ((a->kind == XCOLL_COLL_SEND || a->kind == XCOLL_COLL_RECV) &&
        a->peer != rank)
      remote++;
  }
  if (remote == 0)
    return XCOLL_SUCCESS;
  if (comm->backend->p2p == NULL)
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "xcoll_send/xcoll_recv: backend '%s' has no "
                       "point-to-point interface",
                       comm->backend->name);
  /* Per remote call: its fingerprint out, the peer's in, and a request for
   * each of the three messages (fingerprint out, in, data); on the stack
   * for a group of at most GROUP_STACK_CALLS remote calls, so that a small
   * one calls no malloc. */
  size_t per = 2 * XCOLL_FINGERPRINT_BYTES;
  /* One piece of scratch: the requests, the calls' indices, the
   * fingerprints. */
  size_t request_bytes = 2 * (size_t)remote * sizeof(xcoll_p2p_request *);
  size_t index_bytes = (size_t)remote * sizeof(int);
  _Alignas(max_align_t) uint8_t on_stack[GROUP_STACK_CALLS *
                                         (2 * sizeof(xcoll_p2p_request *) +
                                          sizeof(int) + 2 * XCOLL_FINGERPRINT_BYTES)];
  uint8_t *scratch = xcoll_scratch_take(
      comm, on_stack, sizeof on_stack,
      request_bytes + index_bytes + (size_t)remote * per, "a group's calls");
  if (scratch == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_group: out of memory for %d sends and receives",
                       remote);
  xcoll_p2p_request **requests = (xcoll_p2p_request **)(void *)scratch;
  int *index = (int *)(void *)(scratch + request_bytes);
  uint8_t *fps = scratch + request_bytes + index_bytes;
  memset(requests, 0, request_bytes);
  int n = 0;
  for (int i = 0; i < g->count; i++) {
    const xcoll_coll_args *a = &g->ops[i].args;
    if ((a->kind == XCOLL_COLL_SEND || a->kind == XCOLL_COLL_RECV) &&
        a->peer != rank)
      index[n++] = i;
  }
  const uint64_t fp_tag = xcoll_tag(args, GROUP_STEP_FINGERPRINT);
  const uint64_t data_tag = xcoll_tag(args, GROUP_STEP_DATA);
  xcoll_status status = XCOLL_SUCCESS;
  int posted = 0;
  /* Fingerprints. To each peer: this rank's sends', then its receives', in
   * issue order; from each peer: the peer's sends' (for this rank's
   * receives), then its receives' (for this rank's sends). Posting in
   * call order keeps each kind's order per peer, and the two kinds are
   * posted in two passes. */
  for (int pass = 0; pass < 2 && status == XCOLL_SUCCESS; pass++) {
    xcoll_coll_kind kind = pass == 0 ? XCOLL_COLL_SEND : XCOLL_COLL_RECV;
    for (int k = 0; k < remote && status == XCOLL_SUCCESS; k++) {
      const xcoll_coll_args *a = &g->ops[index[k]].args;
      if (a->kind != kind)
        continue;
      uint8_t *out = fps + (size_t)k * per;
      xcoll_fingerprint fp = p2p_fingerprint(args, a);
      xcoll_fingerprint_encode(&fp, out);
      status = xcoll_p2p_isend(comm, a->peer, fp_tag, out,
                               XCOLL_FINGERPRINT_BYTES, &requests[posted++]);
    }
    kind = pass == 0 ? XCOLL_COLL_RECV : XCOLL_COLL_SEND;
    for (int k = 0; k < remote && status == XCOLL_SUCCESS; k++) {
      const xcoll_coll_args *a = &g->ops[index[k]].args;
      if (a->kind != kind)
        continue;
      status = xcoll_p2p_irecv(comm, a->peer, fp_tag,
                               fps + (size_t)k * per + XCOLL_FINGERPRINT_BYTES,
                               XCOLL_FINGERPRINT_BYTES, &requests[posted++]);
    }
  }
  xcoll_status wait_status = xcoll_p2p_wait(comm, requests, posted);
  if (status == XCOLL_SUCCESS)
    status = wait_status;
  /* A timeout here (or a peer's, which aborts this rank's wait) means a
   * matching call never came: say which calls were waiting. */
  if (status == XCOLL_ERR_TIMEOUT || status == XCOLL_ERR_REMOTE) {
    char calls[512], cause[XCOLL_ERROR_BYTES];
    snprintf(cause, sizeof cause, "%s", xcoll_last_error());
    list_calls(g, rank, calls, sizeof calls);
    status = xcoll_error(comm, status,
                         "%s; waiting for the peers' matching calls of: %s "
                         "(a peer that never posts the matching send or "
                         "recv leaves its partner waiting)",
                         cause, calls);
  }
  for (int k = 0; k < remote && status == XCOLL_SUCCESS; k++)
    status = judge(comm, &g->ops[index[k]].args,
                   fps + (size_t)k * per + XCOLL_FINGERPRINT_BYTES);

  /* Data: receives first, then sends. Zero counts move nothing. */
  posted = 0;
  for (int pass = 0; pass < 2 && status == XCOLL_SUCCESS; pass++)
    for (int k = 0; k < remote && status == XCOLL_SUCCESS; k++) {
      const xcoll_coll_args *a = &g->ops[index[k]].args;
      size_t bytes = op_bytes(a);
      if (bytes == 0)
        continue;
      if (pass == 0 && a->kind == XCOLL_COLL_RECV)
        status = xcoll_p2p_irecv(comm, a->peer, data_tag, a->recvbuf, bytes,
                                 &requests[posted++]);
      else if (pass == 1 && a->kind == XCOLL_COLL_SEND)
        status = xcoll_p2p_isend(comm, a->peer, data_tag, a->sendbuf, bytes,
                                 &requests[posted++]);
    }
  if (posted > 0) {
    wait_status = xcoll_p2p_wait(comm, requests, posted);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  xcoll_scratch_release(scratch, on_stack);
  return status;
}

xcoll_status xcoll_group_run(xcoll_comm *comm, const xcoll_coll_args *args) {
  struct xcoll_group_ops *g = args->group;
  xcoll_status status = run_self(comm, g);
  if (status == XCOLL_SUCCESS && g->p2p > 0)
    status = run_p2p(comm, args, g);
  return status;
}
