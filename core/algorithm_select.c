/* algorithm_select.c - the table of host-driven algorithms, XCOLL_ALGO, and
 * the choice of an algorithm per call by message size and world size
 * (algorithm.h; the thresholds and their reasons are in docs/algorithms.md).
 *
 * XCOLL_ALGO follows NCCL_ALGO's shape: a bare name ("ring") applies to
 * every collective that has an algorithm of that name; "coll:name" entries,
 * comma-separated, set one collective
 * ("allreduce:rabenseifner,broadcast:chain"). Later entries override earlier
 * ones. Names are case-insensitive. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_TUNING /* log.h */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "algorithm.h"
#include "comm.h"
#include "env.h"
#include "error.h"

/* Allreduce: recursive doubling up to this many bytes (latency-bound). */
#define ALLREDUCE_SMALL_BYTES ((size_t)16 * 1024)
/* Allreduce: Rabenseifner up to this many bytes when P is a power of two; the
 * ring above. Without a power of two the fold costs Rabenseifner one more
 * full-vector exchange, so the ring takes over earlier. */
#define ALLREDUCE_MEDIUM_BYTES_POW2 ((size_t)1024 * 1024)
#define ALLREDUCE_MEDIUM_BYTES_OTHER ((size_t)256 * 1024)
/* ...except when P is a power of two and every host runs more of the
 * communicator's ranks than they have CPUs between them (core/host.h):
 * then Rabenseifner stays at every size. It moves the ring's bytes in
 * 2*log2(P) pairwise exchanges instead of 2(P-1) steps that each wait on
 * a neighbour, and with ranks time-sharing cores every such wait is likely
 * to find the neighbour descheduled.
 * Measured on 2 cores over tcp at P=4, 2-16 MiB: 1.3-1.8x the ring's busbw
 * (docs/tcp.md). */
/* Broadcast: binomial tree below this many bytes, pipelined chain above. */
#define BROADCAST_CHAIN_BYTES ((size_t)256 * 1024)
/* Alltoall blocks (bytes one rank sends one peer) up to this go by Bruck's
 * algorithm at P >= 4: it sends about (P/2) * log2(P) blocks per rank in
 * log2(P) messages against pairwise's P-1 blocks in P-1 messages, so it wins
 * while a message's latency outweighs moving a block again; measured with
 * bench/alltoall.py (docs/benchmarks.md). Not where every message goes
 * through shared memory (xcoll_p2p_ops.shared_memory) and P is at most
 * ALLTOALL_SHM_PAIRWISE_RANKS: there a message costs about a copy, and
 * Bruck's log2(P) rounds, each waiting on the last, cost more than its
 * fewer messages save. Over nccl_like's shm mesh on 2 cores, interleaved
 * (us per call, 64 B / 4 KiB alltoall, pairwise against Bruck): P=4
 * 4.35/3.97 against 4.75/5.17, P=5 6.19/6.77 against 10.59/10.91, P=8
 * 17.66/15.04 against 15.72/18.95; over tcp Bruck stays ahead (P=8: 90
 * against 160 us at 64 B). */
#define ALLTOALL_BRUCK_BYTES ((size_t)1024)
#define ALLTOALL_SHM_PAIRWISE_RANKS 8

/* The table, indexed so that the automatic choice below takes its entry
 * directly (no name lookup on every call). */
enum {
  ALLREDUCE_RING,
  ALLREDUCE_RECURSIVE_DOUBLING,
  ALLREDUCE_RABENSEIFNER,
  ALLGATHER_RING,
  REDUCE_SCATTER_RING,
  BROADCAST_BINOMIAL,
  BROADCAST_CHAIN,
  REDUCE_BINOMIAL,
  BARRIER_DISSEMINATION,
  ALLTOALL_PAIRWISE,
  ALLTOALL_BRUCK,
  ALLTOALLV_PAIRWISE,
  GATHER_BINOMIAL,
  SCATTER_BINOMIAL,
};

static const xcoll_algorithm algorithms[] = {
    [ALLREDUCE_RING] = {"ring", XCOLL_COLL_ALLREDUCE, xcoll_allreduce_ring},
    [ALLREDUCE_RECURSIVE_DOUBLING] = {"recursive_doubling", XCOLL_COLL_ALLREDUCE,
                                      xcoll_allreduce_recursive_doubling},
    [ALLREDUCE_RABENSEIFNER] = {"rabenseifner", XCOLL_COLL_ALLREDUCE,
                                xcoll_allreduce_rabenseifner},
    [ALLGATHER_RING] = {"ring", XCOLL_COLL_ALLGATHER, xcoll_allgather_ring},
    [REDUCE_SCATTER_RING] = {"ring", XCOLL_COLL_REDUCE_SCATTER,
                             xcoll_reduce_scatter_ring},
    [BROADCAST_BINOMIAL] = {"binomial", XCOLL_COLL_BROADCAST,
                            xcoll_broadcast_binomial},
    [BROADCAST_CHAIN] = {"chain", XCOLL_COLL_BROADCAST, xcoll_broadcast_chain},
    [REDUCE_BINOMIAL] = {"binomial", XCOLL_COLL_REDUCE, xcoll_reduce_binomial},
    [BARRIER_DISSEMINATION] = {"dissemination", XCOLL_COLL_BARRIER,
                               xcoll_barrier_dissemination},
    [ALLTOALL_PAIRWISE] = {"pairwise", XCOLL_COLL_ALLTOALL,
                           xcoll_alltoall_pairwise},
    [ALLTOALL_BRUCK] = {"bruck", XCOLL_COLL_ALLTOALL, xcoll_alltoall_bruck},
    [ALLTOALLV_PAIRWISE] = {"pairwise", XCOLL_COLL_ALLTOALLV,
                            xcoll_alltoallv_pairwise},
    [GATHER_BINOMIAL] = {"binomial", XCOLL_COLL_GATHER, xcoll_gather_binomial},
    [SCATTER_BINOMIAL] = {"binomial", XCOLL_COLL_SCATTER,
                          xcoll_scatter_binomial},
};
#define NUM_ALGORITHMS (sizeof algorithms / sizeof algorithms[0])

static const xcoll_algorithm *find_algorithm(xcoll_coll_kind kind,
                                             const char *name, size_t length) {
  for (size_t i = 0; i < NUM_ALGORITHMS; i++)
    if (algorithms[i].kind == kind && strlen(algorithms[i].name) == length &&
        strncasecmp(algorithms[i].name, name, length) == 0)
      return &algorithms[i];
  return NULL;
}

/* Append text to out (out_bytes in all, used so far): truncates quietly. */
static void append(char *out, size_t out_bytes, size_t *used,
                   const char *text) {
  int n = snprintf(out + *used, out_bytes - *used, "%s", text);
  if (n > 0)
    *used += (size_t)n < out_bytes - *used ? (size_t)n : out_bytes - *used - 1;
}

/* "allreduce: ring, recursive_doubling, rabenseifner; allgather: ring; ..." */
static void list_valid_names(char *out, size_t out_bytes) {
  size_t used = 0;
  out[0] = '\0';
  for (int kind = 0; kind < XCOLL_NUM_COLLS; kind++) {
    int any = 0;
    for (size_t i = 0; i < NUM_ALGORITHMS; i++)
      any |= (int)algorithms[i].kind == kind;
    if (!any) /* send, recv: no algorithm to choose */
      continue;
    if (used > 0)
      append(out, out_bytes, &used, "; ");
    append(out, out_bytes, &used, xcoll_coll_name((xcoll_coll_kind)kind));
    append(out, out_bytes, &used, ": ");
    int first = 1;
    for (size_t i = 0; i < NUM_ALGORITHMS; i++) {
      if ((int)algorithms[i].kind != kind)
        continue;
      if (!first)
        append(out, out_bytes, &used, ", ");
      append(out, out_bytes, &used, algorithms[i].name);
      first = 0;
    }
  }
}

/* Parse value into chosen[kind] (NULL: no choice). Errors name XCOLL_ALGO,
 * the bad entry, and the valid names. */
static xcoll_status parse_algo(struct xcoll_comm *comm, const char *value,
                               const xcoll_algorithm *chosen[XCOLL_NUM_COLLS]) {
  for (int kind = 0; kind < XCOLL_NUM_COLLS; kind++)
    chosen[kind] = NULL;
  char valid[512];
  const char *cursor = value;
  while (*cursor) {
    const char *end = strchr(cursor, ',');
    if (!end)
      end = cursor + strlen(cursor);
    const char *start = cursor;
    const char *stop = end;
    while (start < stop && isspace((unsigned char)*start))
      start++;
    while (stop > start && isspace((unsigned char)stop[-1]))
      stop--;
    cursor = *end ? end + 1 : end;
    if (start == stop) {
      list_valid_names(valid, sizeof valid);
      return xcoll_error(comm, XCOLL_ERR_ENV,
                         "XCOLL_ALGO=\"%s\" has an empty entry; use a name "
                         "or coll:name entries separated by commas (%s)",
                         value, valid);
    }
    const char *colon = memchr(start, ':', (size_t)(stop - start));
    if (colon) {
      int kind = -1;
      size_t coll_length = (size_t)(colon - start);
      for (int k = 0; k < XCOLL_NUM_COLLS; k++)
        if (strlen(xcoll_coll_name((xcoll_coll_kind)k)) == coll_length &&
            strncasecmp(xcoll_coll_name((xcoll_coll_kind)k), start,
                         coll_length) == 0)
          kind = k;
      const char *name = colon + 1;
      const xcoll_algorithm *algorithm =
          kind < 0 ? NULL
                   : find_algorithm((xcoll_coll_kind)kind, name,
                                    (size_t)(stop - name));
      if (!algorithm) {
        list_valid_names(valid, sizeof valid);
        return xcoll_error(
            comm, XCOLL_ERR_ENV,
            "XCOLL_ALGO=\"%s\": \"%.*s\" names no algorithm; valid names "
            "per collective are %s",
            value, (int)(stop - start), start, valid);
      }
      chosen[kind] = algorithm;
    } else {
      int matched = 0;
      for (int k = 0; k < XCOLL_NUM_COLLS; k++) {
        const xcoll_algorithm *algorithm =
            find_algorithm((xcoll_coll_kind)k, start, (size_t)(stop - start));
        if (algorithm) {
          chosen[k] = algorithm;
          matched = 1;
        }
      }
      if (!matched) {
        list_valid_names(valid, sizeof valid);
        return xcoll_error(
            comm, XCOLL_ERR_ENV,
            "XCOLL_ALGO=\"%s\": \"%.*s\" is not an algorithm of any "
            "collective; valid names per collective are %s",
            value, (int)(stop - start), start, valid);
      }
    }
  }
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_algorithm_check_value(const char *value) {
  const xcoll_algorithm *chosen[XCOLL_NUM_COLLS];
  return parse_algo(NULL, value, chosen);
}

xcoll_status xcoll_algorithm_check_env(struct xcoll_comm *comm) {
  const char *value = xcoll_env_str("XCOLL_ALGO");
  for (int kind = 0; kind < XCOLL_NUM_COLLS; kind++)
    comm->algo_forced[kind] = NULL;
  comm->algo_value[0] = '\0';
  comm->algo_status = XCOLL_SUCCESS;
  if (!value)
    return XCOLL_SUCCESS;
  snprintf(comm->algo_value, sizeof comm->algo_value, "%s", value);
  comm->algo_status = parse_algo(comm, value, comm->algo_forced);
  return comm->algo_status;
}

/* "512 B", "16 KiB", "1 MiB": exact for the thresholds used here. */
static void format_bytes(size_t bytes, char *out, size_t out_bytes) {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) == 0)
    snprintf(out, out_bytes, "%zu MiB", bytes / (1024 * 1024));
  else if (bytes >= 1024 && bytes % 1024 == 0)
    snprintf(out, out_bytes, "%zu KiB", bytes / 1024);
  else
    snprintf(out, out_bytes, "%zu B", bytes);
}

/* Every message of comm's p2p interface goes through shared memory
 * (xcoll_p2p_ops.shared_memory; the same answer on every rank). */
static int p2p_shared_memory(const struct xcoll_comm *comm) {
  const xcoll_p2p_ops *p2p = comm->backend ? comm->backend->p2p : NULL;
  return p2p != NULL && p2p->shared_memory != NULL &&
         p2p->shared_memory(comm->backend_state);
}


xcoll_status xcoll_algorithm_select(struct xcoll_comm *comm,
                                    const xcoll_coll_args *args,
                                    const xcoll_algorithm **algorithm,
                                    char *why, size_t why_bytes) {
  const int P = comm->world_size;
  const char *coll = xcoll_coll_name(args->kind);
  /* The reason is text for XCOLL_DEBUG=INFO; without a buffer for it, no
   * time goes into formatting it (this runs on every collective). */
  const int explain = why != NULL && why_bytes > 0;
#define EXPLAIN(...)                                                           \
  do {                                                                         \
    if (explain)                                                               \
      snprintf(why, why_bytes, __VA_ARGS__);                                   \
  } while (0)
  *algorithm = NULL;
  if ((int)args->kind < 0 || args->kind >= XCOLL_NUM_COLLS)
    return xcoll_error(comm, XCOLL_ERR_INTERNAL,
                       "algorithm selection got collective kind %d, which is "
                       "not an xcoll_coll_kind",
                       (int)args->kind);

  if (comm->algo_status != XCOLL_SUCCESS)
    return xcoll_error(comm, comm->algo_status,
                       "XCOLL_ALGO=\"%s\" names no algorithm (the "
                       "communicator's creation said which entry and the "
                       "valid names)",
                       comm->algo_value);
  if (comm->algo_forced[args->kind]) {
    *algorithm = comm->algo_forced[args->kind];
    EXPLAIN("XCOLL_ALGO=\"%s\" sets %s to %s", comm->algo_value, coll,
            (*algorithm)->name);
    return XCOLL_SUCCESS;
  }

  /* bytes: of the vector being reduced or broadcast (allreduce, broadcast,
   * reduce: count elements per rank). */
  size_t bytes = args->count * xcoll_datatype_size(args->dtype);
  char size_text[32], limit_text[32];
  if (explain)
    format_bytes(bytes, size_text, sizeof size_text);
  switch (args->kind) {
  case XCOLL_COLL_ALLREDUCE: {
    int pow2 = (P & (P - 1)) == 0;
    int rabenseifner_always = pow2 && comm->oversubscribed;
    size_t medium =
        pow2 ? ALLREDUCE_MEDIUM_BYTES_POW2 : ALLREDUCE_MEDIUM_BYTES_OTHER;
    if (P == 1) {
      *algorithm = &algorithms[ALLREDUCE_RING];
      EXPLAIN("P=1: allreduce is a copy (ring)");
    } else if (bytes <= ALLREDUCE_SMALL_BYTES) {
      *algorithm = &algorithms[ALLREDUCE_RECURSIVE_DOUBLING];
      if (explain)
        format_bytes(ALLREDUCE_SMALL_BYTES, limit_text, sizeof limit_text);
      EXPLAIN("%s <= %s at P=%d: recursive doubling (fewest steps, "
              "latency-bound)",
              size_text, limit_text, P);
    } else if (rabenseifner_always) {
      *algorithm = &algorithms[ALLREDUCE_RABENSEIFNER];
      if (explain)
        format_bytes(ALLREDUCE_SMALL_BYTES, limit_text, sizeof limit_text);
      EXPLAIN("%s > %s at P=%d (a power of two), every host oversubscribed "
              "(here %d ranks on %d CPUs): rabenseifner (ring's bandwidth in "
              "2*log2(P) pairwise steps)",
              size_text, limit_text, P, comm->host_ranks, comm->host_cpus);
    } else if (bytes <= medium) {
      *algorithm = &algorithms[ALLREDUCE_RABENSEIFNER];
      if (explain)
        format_bytes(medium, limit_text, sizeof limit_text);
      EXPLAIN("%s <= %s at P=%d (%s): rabenseifner (ring's bandwidth in "
              "2*log2(P) steps)",
              size_text, limit_text, P,
              pow2 ? "a power of two" : "not a power of two");
    } else {
      *algorithm = &algorithms[ALLREDUCE_RING];
      if (explain)
        format_bytes(medium, limit_text, sizeof limit_text);
      EXPLAIN("%s > %s at P=%d: ring (bandwidth-optimal, pipelined in "
              "chunks)",
              size_text, limit_text, P);
    }
    break;
  }
  case XCOLL_COLL_BROADCAST:
    if (explain)
      format_bytes(BROADCAST_CHAIN_BYTES, limit_text, sizeof limit_text);
    if (bytes < BROADCAST_CHAIN_BYTES) {
      *algorithm = &algorithms[BROADCAST_BINOMIAL];
      EXPLAIN("%s < %s at P=%d: binomial tree", size_text, limit_text, P);
    } else {
      *algorithm = &algorithms[BROADCAST_CHAIN];
      EXPLAIN("%s >= %s at P=%d: pipelined chain", size_text, limit_text, P);
    }
    break;
  case XCOLL_COLL_ALLGATHER:
  case XCOLL_COLL_REDUCE_SCATTER:
    *algorithm = &algorithms[args->kind == XCOLL_COLL_ALLGATHER
                                 ? ALLGATHER_RING
                                 : REDUCE_SCATTER_RING];
    EXPLAIN("%s: ring, the only %s algorithm", coll, coll);
    break;
  case XCOLL_COLL_REDUCE:
    *algorithm = &algorithms[REDUCE_BINOMIAL];
    EXPLAIN("reduce: binomial tree, the only one");
    break;
  case XCOLL_COLL_ALLTOALL:
    /* bytes is one block (count elements, what one rank sends one peer). */
    if (explain)
      format_bytes(ALLTOALL_BRUCK_BYTES, limit_text, sizeof limit_text);
    if (P >= 4 && bytes <= ALLTOALL_BRUCK_BYTES &&
        P <= ALLTOALL_SHM_PAIRWISE_RANKS && p2p_shared_memory(comm)) {
      *algorithm = &algorithms[ALLTOALL_PAIRWISE];
      EXPLAIN("%s blocks at P=%d over shared memory: pairwise exchange (one "
              "round: a message costs about a copy there, less than Bruck's "
              "dependent rounds)",
              size_text, P);
    } else if (P >= 4 && bytes <= ALLTOALL_BRUCK_BYTES) {
      *algorithm = &algorithms[ALLTOALL_BRUCK];
      EXPLAIN("%s blocks <= %s at P=%d: bruck (ceil(log2 P) steps)",
              size_text, limit_text, P);
    } else {
      *algorithm = &algorithms[ALLTOALL_PAIRWISE];
      EXPLAIN("%s blocks at P=%d: pairwise exchange (P-1 steps, each block "
              "sent once)",
              size_text, P);
    }
    break;
  case XCOLL_COLL_ALLTOALLV:
  case XCOLL_COLL_GATHER:
  case XCOLL_COLL_SCATTER:
    *algorithm = &algorithms[args->kind == XCOLL_COLL_ALLTOALLV ? ALLTOALLV_PAIRWISE
                             : args->kind == XCOLL_COLL_GATHER  ? GATHER_BINOMIAL
                                                                : SCATTER_BINOMIAL];
    EXPLAIN("%s: %s, the only one", coll, (*algorithm)->name);
    break;
  case XCOLL_COLL_BARRIER:
  default:
    *algorithm = &algorithms[BARRIER_DISSEMINATION];
    EXPLAIN("barrier: dissemination, the only one");
    break;
  }
  return XCOLL_SUCCESS;
#undef EXPLAIN
}
