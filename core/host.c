/* host.c - the host census (host.h). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "error.h"
#include "host.h"
#include "log.h"

int xcoll_host_boot_id(uint8_t id[16]) {
  memset(id, 0, 16);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == NULL)
    return 0;
  char text[64] = "";
  int ok = fgets(text, sizeof text, f) != NULL;
  fclose(f);
  if (!ok)
    return 0;
  int digits = 0;
  for (const char *c = text; *c != '\0' && *c != '\n'; c++) {
    if (*c == '-')
      continue;
    int v = *c >= '0' && *c <= '9'   ? *c - '0'
            : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
            : *c >= 'A' && *c <= 'F' ? *c - 'A' + 10
                                     : -1;
    if (v < 0 || digits == 32)
      return 0;
    id[digits / 2] = (uint8_t)(id[digits / 2] << 4 | v);
    digits++;
  }
  return digits == 32;
}

int xcoll_host_netns_id(uint8_t id[24]) {
  struct stat ns;
  if (!xcoll_host_boot_id(id) || stat("/proc/self/ns/net", &ns) != 0)
    return 0;
  uint64_t inode = (uint64_t)ns.st_ino;
  memcpy(id + 16, &inode, sizeof inode);
  return 1;
}

/* Two 64-bit FNV-1a hashes of the host name, for a kernel without a boot
 * id: ranks with one name count as one host. */
static void hash_host_name(uint8_t key[16]) {
  char name[256] = "";
  if (gethostname(name, sizeof name) != 0)
    snprintf(name, sizeof name, "unknown");
  name[sizeof name - 1] = '\0';
  for (int half = 0; half < 2; half++) {
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)half;
    for (const char *c = name; *c != '\0'; c++)
      h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    memcpy(key + 8 * half, &h, 8);
  }
}

void xcoll_host_record_fill(xcoll_host_record *record) {
  memset(record, 0, sizeof *record);
  if (!xcoll_host_boot_id(record->host_key))
    hash_host_name(record->host_key);
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = XCOLL_HOST_MASK_BYTES * 8;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < cpus && c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set))
        record->mask[c / 8] |= (uint8_t)(1u << (c % 8));
    return;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 1)
    online = 1;
  for (int c = 0; c < cpus && c < online; c++)
    record->mask[c / 8] |= (uint8_t)(1u << (c % 8));
}

static int popcount(const uint8_t *mask) {
  int n = 0;
  for (int i = 0; i < XCOLL_HOST_MASK_BYTES; i++)
    n += __builtin_popcount(mask[i]);
  return n;
}

/* Ranks on host_key and the CPUs in the union of their masks. */
static void count_host(const xcoll_host_record *records, int count,
                       const uint8_t host_key[16], int *ranks, int *cpus) {
  uint8_t all[XCOLL_HOST_MASK_BYTES] = {0};
  *ranks = 0;
  for (int r = 0; r < count; r++) {
    if (memcmp(records[r].host_key, host_key, 16) != 0)
      continue;
    ++*ranks;
    for (int i = 0; i < XCOLL_HOST_MASK_BYTES; i++)
      all[i] |= records[r].mask[i];
  }
  *cpus = popcount(all);
  if (*cpus < 1)
    *cpus = 1;
}

void xcoll_host_tally_of(const xcoll_host_record *records, int count, int me,
                         xcoll_host_tally *tally) {
  tally->own_cpus = popcount(records[me].mask);
  if (tally->own_cpus < 1)
    tally->own_cpus = 1;
  count_host(records, count, records[me].host_key, &tally->host_ranks,
             &tally->host_cpus);
  /* Every host: the first rank of each host counts it. */
  tally->oversubscribed = 1;
  for (int r = 0; r < count && tally->oversubscribed; r++) {
    int first = 1;
    for (int q = 0; q < r && first; q++)
      first = memcmp(records[q].host_key, records[r].host_key, 16) != 0;
    if (!first)
      continue;
    int ranks = 0, cpus = 0;
    count_host(records, count, records[r].host_key, &ranks, &cpus);
    tally->oversubscribed = ranks > 1 && ranks > cpus;
  }
}

xcoll_status xcoll_host_census(xcoll_comm *comm) {
  if (comm->host_ranks > 0)
    return XCOLL_SUCCESS; /* taken already */
  xcoll_host_record mine;
  xcoll_host_record_fill(&mine);
  xcoll_host_record *all = &mine;
  if (comm->world_size > 1) {
    all = malloc((size_t)comm->world_size * sizeof *all);
    if (all == NULL)
      return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                         "out of memory for %d ranks' host records",
                         comm->world_size);
    xcoll_status s = xcoll_bootstrap_allgather(comm, "host_census", &mine,
                                               sizeof mine, all);
    if (s != XCOLL_SUCCESS) {
      free(all);
      return s;
    }
  }
  xcoll_host_tally tally;
  xcoll_host_tally_of(all, comm->world_size, comm->world_size > 1 ? comm->rank
                                                                  : 0,
                      &tally);
  if (all != &mine)
    free(all);
  comm->own_cpus = tally.own_cpus;
  comm->host_ranks = tally.host_ranks;
  comm->host_cpus = tally.host_cpus;
  comm->oversubscribed = tally.oversubscribed;
  XCOLL_INFO("rank %d: %d rank(s) of this communicator on this host, on %d "
             "CPU(s) between them (this rank may run on %d)%s",
             comm->rank, tally.host_ranks, tally.host_cpus, tally.own_cpus,
             tally.oversubscribed ? "; oversubscribed" : "");
  return XCOLL_SUCCESS;
}
