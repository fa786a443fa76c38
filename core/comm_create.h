/* comm_create.h - the steps of making a communicator that the world
 * communicator (comm_create.c), split and shrink (comm_split.c) and destroy
 * (comm.c) share: allocate one, connect it, release it. */
#ifndef XCOLL_CORE_COMM_CREATE_H
#define XCOLL_CORE_COMM_CREATE_H

#include "comm.h"

/* What one communicator holds, recorded so that one function can release a
 * communicator whatever point its creation reached. */
enum { XCOLL_COMM_HAVE_TRACE = 1, XCOLL_COMM_HAVE_BACKEND = 2 };

/* A new communicator with its locks, no place yet (local rank and size -1),
 * the host device, and the live magic; NULL, with the error recorded, when
 * memory runs out. */
xcoll_comm *xcoll_comm_new(void);

/* Release comm: its queue, flight recorder, store client and server, CUDA
 * context, interface name and world ranks, and what held
 * (XCOLL_COMM_HAVE_*) says it holds besides. comm is freed. */
void xcoll_comm_free(xcoll_comm *comm, int held);

/* The part of creation shared by the world and split communicators: the
 * queue, the trace, a store client, then the backend's connections.
 * comm's identity, backend, options and master address are set. Adds to
 * *held what it acquired, also on failure, for xcoll_comm_free. */
xcoll_status xcoll_comm_connect(xcoll_comm *comm, int *held);

#endif
