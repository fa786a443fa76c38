/* host.h - the host census: which of a communicator's ranks share this
 * host's CPUs, and on how many CPUs they may run together.
 *
 * A waiting rank spins only where it has a core to itself, and on an
 * oversubscribed host (more ranks than CPUs) some algorithms win because a
 * step waits on one sender rather than on a chain of ranks that must each
 * be scheduled (core/algorithm_select.c, backends/nccl_like/nccl_like.c).
 * Counting this process's own CPUs (sched_getaffinity) against
 * LOCAL_WORLD_SIZE gets that wrong where a launcher pins each rank to its
 * own core, as Open MPI's mpirun does at 2 ranks and Slurm's srun with
 * --cpu-bind=cores: every rank sees one CPU and takes the host for
 * oversubscribed. So at creation the ranks exchange their boot id and
 * affinity mask (one bootstrap allgather), and the CPUs of a host are the
 * union of its ranks' masks. */
#ifndef XCOLL_CORE_HOST_H
#define XCOLL_CORE_HOST_H

#include <stdint.h>

#include "xcoll.h"

struct xcoll_comm;

/* One rank's contribution: the kernel it runs on and the CPUs it may run
 * on. */
#define XCOLL_HOST_MASK_BYTES 128 /* CPU_SETSIZE (1024) bits */
typedef struct xcoll_host_record {
  uint8_t host_key[16]; /* /proc/sys/kernel/random/boot_id, else a hash of
                           the host name */
  uint8_t mask[XCOLL_HOST_MASK_BYTES]; /* bit c: CPU c */
} xcoll_host_record;

/* What the census says (struct xcoll_comm's host fields). */
typedef struct xcoll_host_tally {
  int own_cpus;   /* CPUs this rank may run on (at least 1) */
  int host_ranks; /* ranks of the communicator on this rank's host, itself
                     included */
  int host_cpus;  /* CPUs in the union of those ranks' masks (at least 1) */
  int oversubscribed; /* every rank's host has more ranks than CPUs: the
                         same answer on every rank */
} xcoll_host_tally;

/* This kernel's boot id (/proc/sys/kernel/random/boot_id, 32 hex digits
 * and dashes) as 16 bytes: 1, or 0 when it cannot be read or is malformed.
 * Processes with one boot id run on one kernel: one host's CPUs. */
int xcoll_host_boot_id(uint8_t id[16]);

/* The boot id, then the inode of this process's network namespace (8
 * bytes, host order): processes with equal ids share a kernel and a
 * network namespace, so an abstract Unix socket or a segment passed over
 * one reaches from one to the other (nccl_like's shm transport, the
 * socket plugin's Unix connections). 1, or 0 when either cannot be read. */
int xcoll_host_netns_id(uint8_t id[24]);

/* This process's record: boot id (or host name) and affinity mask. A mask
 * that cannot be read (more than 1024 CPUs) counts as the first
 * min(online CPUs, 1024) CPUs. */
void xcoll_host_record_fill(xcoll_host_record *record);

/* The tally from every rank's record (count records, rank me's among them).
 * Pure: unit-tested on records made up by the test. */
void xcoll_host_tally_of(const xcoll_host_record *records, int count, int me,
                         xcoll_host_tally *tally);

/* Fill comm's host fields: with one rank from its own record, else by a
 * bootstrap allgather ("host_census") of every rank's; nothing when they
 * are filled already. Core takes it after the backend's comm_init (a tcp
 * rank listens before its first exchange, so that a late rank finds it
 * listening); a backend that needs it at init calls it first (nccl_like).
 * Collective over comm. Logs the tally at INFO. Errors: those of
 * xcoll_bootstrap_allgather; XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_host_census(struct xcoll_comm *comm);

#endif
