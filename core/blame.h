/* blame.h - naming the rank at fault, as seen through the rendezvous store,
 * for the backends whose wire cannot say it (tcp, nccl_like; ucx asks its
 * peers with liveness probes instead). docs/how-it-works.md, "Which rank is
 * blamed".
 *
 * Stall records. When one rank stops, every rank waiting on it, directly or
 * through a chain of waits, times out at about the same time, and the first
 * to give up is usually not the stopped one. So a rank whose wait has made
 * no progress for XCOLL_TIMEOUT_S - lead (xcoll_blame_lead_s) posts the
 * ranks it waits on under "<prefix>blame/stall/<rank>", and withdraws the
 * record if it progresses after all. At its timeout it follows the records
 * from the ranks it waits on: the first rank on that chain with no record
 * is the one that made no progress (stopped, or stuck outside xcoll), and
 * the message names it. Ranks that stalled within `lead` of each other all
 * find the records of the others in place.
 * The store lives in rank 0's process: when rank 0 is the stopped one, the
 * store takes a connection but never answers, and that silence names rank 0
 * (of the world communicator; a split one cannot tell).
 *
 * Leave records. xcoll_comm_destroy of a healthy communicator posts
 * "<prefix>blame/left/<rank>" before the backend closes its connections, so
 * that a peer that sees a connection close can tell a rank that left
 * (destroyed its communicator: it made fewer calls) from one that died.
 *
 * Each xcoll_blame holds a store connection of its own (comm->store belongs
 * to the user's thread), opened at the first stall; its functions may be
 * called from several threads. A communicator on the caller's store
 * (xcoll_comm_init_kv) posts and reads nothing: the culprit is then
 * unknown (-1). */
#ifndef XCOLL_CORE_BLAME_H
#define XCOLL_CORE_BLAME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "comm.h"
#include "store.h"

typedef struct xcoll_blame {
  xcoll_comm *comm;
  pthread_mutex_t lock;
  xcoll_store *store;   /* own connection, opened at the first stall */
  int store_silent;     /* the store took no request within the lead */
  _Atomic int posted;   /* this rank's stall record is in the store */
} xcoll_blame;

/* How a rank on the chain failed to progress. */
typedef enum xcoll_blame_kind {
  XCOLL_BLAME_NONE = 0,    /* no culprit found (-1) */
  XCOLL_BLAME_STOPPED = 1, /* alive or not, it posted no stall record */
  XCOLL_BLAME_LEFT = 2     /* it destroyed its communicator */
} xcoll_blame_kind;

void xcoll_blame_init(xcoll_blame *blame, xcoll_comm *comm);
/* Withdraw a posted record, close the connection. */
void xcoll_blame_fini(xcoll_blame *blame);

/* How long before XCOLL_TIMEOUT_S a stalled rank posts its record: a quarter
 * of the timeout, at most 1 s (seconds). */
double xcoll_blame_lead_s(double timeout_s);

/* This rank's wait has made no progress for timeout_s - lead: post that it
 * waits on waits_on[0..count) (ranks of comm). Once per stall; blocks at
 * most the lead (the store's host may be the stopped rank). */
void xcoll_blame_stalled(xcoll_blame *blame, const int *waits_on, int count);
/* The wait progressed: withdraw the record, if one was posted. Cheap when
 * none was. */
void xcoll_blame_progressed(xcoll_blame *blame);

/* At this rank's timeout, waiting on waits_on[0..count): the rank to blame,
 * or -1 (every rank on the chain waits on another: a cycle, or the store
 * cannot tell). *kind says how it failed; why (why_size bytes) gets the
 * chain in words, e.g. "rank 1 waits on rank 0, which waits on rank 2,
 * which posted no stall record". Blocks at most the lead. */
int xcoll_blame_culprit(xcoll_blame *blame, const int *waits_on, int count,
                        xcoll_blame_kind *kind, char *why, size_t why_size);

/* 1 when the store did not answer this rank's stall record in time (its
 * host, rank 0 of the world, is stopped or cut off): publishing anything
 * through it would only wait too. */
int xcoll_blame_store_silent(xcoll_blame *blame);

/* xcoll_comm_destroy, before the backend closes its connections: tell the
 * peers this rank leaves on purpose. Best effort, on comm->store. */
void xcoll_blame_announce_leave(xcoll_comm *comm);
/* 1 when rank announced its leave on comm (a read on store, a connection
 * of the caller's; 0 when it did not or the store cannot tell). */
int xcoll_blame_has_left(xcoll_comm *comm, xcoll_store *store, int rank);

#endif
