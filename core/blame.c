/* blame.c - stall and leave records in the rendezvous store (blame.h). */
#include "blame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

/* Monotonic seconds. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Longest chain followed, in ranks: past it the culprit is unknown. */
#define BLAME_MAX_CHAIN 64

double xcoll_blame_lead_s(double timeout_s) {
  double lead = timeout_s / 4;
  return lead < 1.0 ? lead : 1.0;
}

void xcoll_blame_init(xcoll_blame *blame, xcoll_comm *comm) {
  memset(blame, 0, sizeof *blame);
  atomic_init(&blame->posted, 0);
  blame->comm = comm;
  pthread_mutex_init(&blame->lock, NULL);
}

static void stall_key(const xcoll_comm *comm, int rank, char *key,
                      size_t bytes) {
  snprintf(key, bytes, "%sblame/stall/%d", comm->store_prefix, rank);
}

static void left_key(const xcoll_comm *comm, int rank, char *key,
                     size_t bytes) {
  snprintf(key, bytes, "%sblame/left/%d", comm->store_prefix, rank);
}

/* The blame's own connection, opened on first use within the lead; NULL
 * when the comm uses the caller's store or the store did not answer (then
 * store_silent is set for a timeout). Called with the lock held. */
static xcoll_store *blame_store(xcoll_blame *blame) {
  xcoll_comm *comm = blame->comm;
  if (blame->store != NULL || blame->store_silent || comm->has_kv ||
      comm->master_port <= 0)
    return blame->store;
  double lead = xcoll_blame_lead_s(comm->timeout_s);
  xcoll_status status = xcoll_store_connect(comm->master_addr,
                                            comm->master_port, lead,
                                            &blame->store);
  if (status == XCOLL_ERR_TIMEOUT)
    blame->store_silent = 1;
  else if (status == XCOLL_SUCCESS)
    xcoll_store_set_timeout(blame->store, lead); /* replies, too */
  return blame->store;
}

/* A request on the blame's connection failed: a timeout is a silent store;
 * either way the connection is not used again. Lock held. */
static void store_failed(xcoll_blame *blame, xcoll_status status) {
  if (status == XCOLL_ERR_TIMEOUT)
    blame->store_silent = 1;
  xcoll_store_close(blame->store);
  blame->store = NULL;
  if (!blame->store_silent)
    blame->store_silent = -1; /* gone: nothing more to learn from it */
}

void xcoll_blame_stalled(xcoll_blame *blame, const int *waits_on, int count) {
  pthread_mutex_lock(&blame->lock);
  if (!atomic_load(&blame->posted) && count > 0) {
    xcoll_store *store = blame_store(blame);
    if (store != NULL) {
      char key[96], value[512];
      size_t used = 0;
      value[0] = '\0';
      for (int i = 0; i < count && used + 16 < sizeof value; i++)
        used += (size_t)snprintf(value + used, sizeof value - used, "%s%d",
                                 i ? " " : "", waits_on[i]);
      stall_key(blame->comm, blame->comm->rank, key, sizeof key);
      xcoll_status status = xcoll_store_set(store, key, value, used);
      if (status == XCOLL_SUCCESS)
        atomic_store(&blame->posted, 1);
      else
        store_failed(blame, status);
    }
  }
  pthread_mutex_unlock(&blame->lock);
}

void xcoll_blame_progressed(xcoll_blame *blame) {
  /* Read without the lock first: the common case is nothing posted, on
   * every progress of every wait. A stale read costs one retry later. */
  if (!atomic_load_explicit(&blame->posted, memory_order_relaxed))
    return;
  pthread_mutex_lock(&blame->lock);
  if (atomic_load(&blame->posted) && blame->store != NULL) {
    char key[96];
    stall_key(blame->comm, blame->comm->rank, key, sizeof key);
    xcoll_status status = xcoll_store_delete(blame->store, key, NULL);
    if (status != XCOLL_SUCCESS)
      store_failed(blame, status);
  }
  atomic_store(&blame->posted, 0);
  pthread_mutex_unlock(&blame->lock);
}

/* Read rank's stall record into waits (at most max); returns how many ranks
 * it names, 0 for an empty record, -1 when there is none, -2 when the store
 * failed. Lock held. */
static int read_record(xcoll_blame *blame, xcoll_store *store, int rank,
                       int *waits, int max) {
  char key[96];
  stall_key(blame->comm, rank, key, sizeof key);
  const char *keys[1] = {key};
  int exists = 0;
  xcoll_status status = xcoll_store_check(store, keys, 1, &exists);
  if (status != XCOLL_SUCCESS) {
    store_failed(blame, status);
    return -2;
  }
  if (!exists)
    return -1;
  void *value = NULL;
  size_t bytes = 0;
  status = xcoll_store_get(store, key, &value, &bytes);
  if (status != XCOLL_SUCCESS) {
    store_failed(blame, status);
    return -2;
  }
  char text[512];
  size_t n = bytes < sizeof text - 1 ? bytes : sizeof text - 1;
  memcpy(text, value, n);
  text[n] = '\0';
  free(value);
  int count = 0;
  char *at = text;
  while (count < max) {
    char *end = NULL;
    long r = strtol(at, &end, 10);
    if (end == at)
      break;
    if (r >= 0 && r < blame->comm->world_size)
      waits[count++] = (int)r;
    at = end;
  }
  return count;
}

/* "rank A waits on rank B, which waits on rank C": the path from this rank
 * to rank `to` through parents (parent[r] = the rank whose record named r,
 * -1 for this rank's own waits). */
static void describe_chain(const xcoll_comm *comm, const int *parent, int to,
                           const char *end, char *why, size_t why_size) {
  int path[BLAME_MAX_CHAIN], n = 0;
  for (int r = to; r >= 0 && n < BLAME_MAX_CHAIN; r = parent[r])
    path[n++] = r;
  size_t used = (size_t)snprintf(why, why_size, "rank %d waits on rank %d",
                                 comm->rank, path[n - 1]);
  for (int i = n - 2; i >= 0 && used < why_size; i--)
    used += (size_t)snprintf(why + used, why_size - used,
                             ", which waits on rank %d", path[i]);
  if (used < why_size)
    snprintf(why + used, why_size - used, ", %s", end);
}

int xcoll_blame_culprit(xcoll_blame *blame, const int *waits_on, int count,
                        xcoll_blame_kind *kind, char *why, size_t why_size) {
  xcoll_comm *comm = blame->comm;
  *kind = XCOLL_BLAME_NONE;
  why[0] = '\0';
  int world_size = comm->world_size;
  int *parent = malloc((size_t)world_size * 2 * sizeof *parent);
  if (parent == NULL || count <= 0) {
    free(parent);
    return -1;
  }
  int *queue = parent + world_size;
  for (int r = 0; r < world_size; r++)
    parent[r] = -2; /* not reached */
  parent[comm->rank] = -1;
  int head = 0, tail = 0, culprit = -1;
  for (int i = 0; i < count; i++)
    if (waits_on[i] >= 0 && waits_on[i] < world_size &&
        parent[waits_on[i]] == -2) {
      parent[waits_on[i]] = -1;
      queue[tail++] = waits_on[i];
    }
  pthread_mutex_lock(&blame->lock);
  xcoll_store *store = blame_store(blame);
  while (store != NULL && head < tail && culprit < 0) {
    int r = queue[head++], waits[BLAME_MAX_CHAIN];
    int n = read_record(blame, store, r, waits, BLAME_MAX_CHAIN);
    /* A rank that began waiting up to a lead later than this one posts its
     * record up to a lead later (its own clock started later: it may have
     * moved bytes to a stopped peer's socket meanwhile). Give it that long
     * before naming it; a rank that left says so at once. */
    if (n == -1 && !xcoll_blame_has_left(comm, store, r)) {
      double until = now_s() + xcoll_blame_lead_s(comm->timeout_s);
      while (n == -1 && now_s() < until) {
        pthread_mutex_unlock(&blame->lock);
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&blame->lock);
        n = read_record(blame, store, r, waits, BLAME_MAX_CHAIN);
      }
    }
    if (n == -2) {
      store = NULL;
      break;
    }
    if (n == -1) {
      culprit = r;
      *kind = xcoll_blame_has_left(comm, store, r) ? XCOLL_BLAME_LEFT
                                                   : XCOLL_BLAME_STOPPED;
      describe_chain(comm, parent, r,
                     *kind == XCOLL_BLAME_LEFT
                         ? "which destroyed its communicator"
                         : "which posted no stall record: it is not waiting "
                           "in xcoll",
                     why, why_size);
      break;
    }
    for (int i = 0; i < n; i++)
      if (parent[waits[i]] == -2) {
        parent[waits[i]] = r;
        queue[tail++] = waits[i];
      }
  }
  int silent = blame->store_silent == 1;
  pthread_mutex_unlock(&blame->lock);
  if (culprit < 0 && silent && comm->comm_id == 0 && comm->rank != 0 &&
      !comm->store_external) {
    /* The store runs in rank 0's process: taking a connection (the kernel
     * does that) but never answering means the process does not run. */
    culprit = 0;
    *kind = XCOLL_BLAME_STOPPED;
    snprintf(why, why_size, "the rendezvous store that rank 0 hosts (%s:%d) "
             "does not answer either", comm->master_addr, comm->master_port);
  } else if (culprit < 0 && store != NULL && tail > 0) {
    snprintf(why, why_size, "every rank it waits on, directly or not, waits "
             "on another (the ranks called different collectives?)");
  }
  free(parent);
  return culprit;
}

int xcoll_blame_store_silent(xcoll_blame *blame) {
  pthread_mutex_lock(&blame->lock);
  int silent = blame->store_silent == 1;
  pthread_mutex_unlock(&blame->lock);
  return silent;
}

void xcoll_blame_fini(xcoll_blame *blame) {
  if (blame->comm == NULL)
    return;
  xcoll_blame_progressed(blame);
  xcoll_store_close(blame->store);
  blame->store = NULL;
  pthread_mutex_destroy(&blame->lock);
  blame->comm = NULL;
}

void xcoll_blame_announce_leave(xcoll_comm *comm) {
  if (comm->store == NULL || comm->world_size < 2)
    return;
  char key[96];
  left_key(comm, comm->rank, key, sizeof key);
  if (xcoll_store_set(comm->store, key, "1", 1) != XCOLL_SUCCESS)
    XCOLL_INFO("comm %llu: rank %d could not post its leave record: %s",
               (unsigned long long)comm->comm_id, comm->rank,
               xcoll_last_error());
}

int xcoll_blame_has_left(xcoll_comm *comm, xcoll_store *store, int rank) {
  if (store == NULL || xcoll_store_is_kv(store))
    return 0;
  char key[96];
  left_key(comm, rank, key, sizeof key);
  const char *keys[1] = {key};
  int exists = 0;
  return xcoll_store_check(store, keys, 1, &exists) == XCOLL_SUCCESS && exists;
}
