/* failure.c - the nccl_like backend's failure path, shared by every thread:
 * nl_fail records the first failure and stops the kernels, and publishes a
 * peer's death to the store so that every rank, not only the dead rank's
 * ring neighbours, fails naming it (nl_fail_everywhere does the same for a
 * collective mismatch); the watcher thread receives what other ranks
 * published. The ground floor of the backend: it calls no other file of
 * backends/nccl_like (scripts/check-layers.sh). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "store.h"

double nl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *nl_net_last_error(void) {
  const char *message = xcoll_net_last_error();
  return message && message[0] ? message : "(the plugin gave no reason)";
}

/* A notice, the failure key's value, is "<status> <message>": the
 * xcoll_status every rank must fail with (REMOTE for a death, PROTOCOL for
 * a collective mismatch) as a decimal number, then the sentence. */
static void notice_parse(const char *value, size_t bytes,
                         xcoll_status *status, const char **text,
                         int *text_bytes) {
  *status = XCOLL_ERR_REMOTE;
  *text = value;
  *text_bytes = (int)(bytes < 900 ? bytes : 900);
  size_t i = 0;
  int number = 0;
  while (i < bytes && i < 3 && value[i] >= '0' && value[i] <= '9')
    number = number * 10 + (value[i++] - '0');
  if (i == 0 || i >= bytes || value[i] != ' ')
    return; /* not ours: the whole text, as a death */
  if (number == XCOLL_ERR_PROTOCOL)
    *status = XCOLL_ERR_PROTOCOL;
  *text = value + i + 1;
  bytes -= i + 1;
  *text_bytes = (int)(bytes < 900 ? bytes : 900);
}

/* Fail this rank with the notice another rank published to the failure
 * key. */
static void fail_from_notice(nl_state *st, const char *value, size_t bytes) {
  xcoll_status status;
  const char *text;
  int text_bytes;
  notice_parse(value, bytes, &status, &text, &text_bytes);
  nl_fail(st, status, -1, "nccl_like: rank %d: %.*s", st->rank, text_bytes,
          text);
}

/* Tell every other rank of a failure through the communicator's failure
 * key. Runs on the detecting thread after the local ops were failed, over a
 * store connection of its own (comm->store belongs to the user's thread).
 * One key for every rank, set once: every watcher is woken by the same set,
 * so no rank can hear of the failure (and return, destroy, close its
 * connections) before the notice is there for every other rank to read.
 * With a key per rank, set one after another, a rank told first could
 * leave before the last was told, and that rank then saw a bare "left"
 * instead of the reason. The first publisher wins: a rank that fails by
 * itself meanwhile publishes nothing. */
static void publish_failure(nl_state *st, xcoll_status status,
                            const char *message) {
  xcoll_comm *comm = st->comm;
  xcoll_store *store = NULL;
  if (xcoll_store_is_kv(comm->store))
    return; /* no store of xcoll's own to carry the notice */
  /* Briefly, as fail_from_published: the store was up at init, so a
   * refused connection means its host (rank 0) has gone, and this rank's
   * caller should not wait to hear it. */
  if (xcoll_store_connect(comm->master_addr, comm->master_port, 0.5,
                          &store) != XCOLL_SUCCESS)
    return; /* the store is gone too: every rank sees that by itself */
  char value[XCOLL_ERROR_BYTES + 16];
  int bytes = snprintf(value, sizeof value, "%d %s", (int)status, message);
  if (bytes < 0)
    bytes = 0;
  if ((size_t)bytes >= sizeof value)
    bytes = (int)sizeof value - 1;
  /* The add elects the one publisher: a check and then a set would let
   * two ranks failing at once both set. */
  char claim_key[80];
  snprintf(claim_key, sizeof claim_key, "%s_claim", st->failure_key);
  int64_t claims = 0;
  if (xcoll_store_add(store, claim_key, 1, &claims) == XCOLL_SUCCESS &&
      claims == 1)
    (void)xcoll_store_set(store, st->failure_key, value, (size_t)bytes);
  xcoll_store_close(store);
}

/* Fail with the store's sentence about a death it saw (a joined rank's
 * connection dropped without a close: core/store_server.c), which names
 * the dead rank. */
static void fail_store_death(nl_state *st, const char *sentence) {
  nl_fail(st, XCOLL_ERR_REMOTE, -1, "nccl_like: rank %d: %s", st->rank,
          sentence);
}

/* A rank that fails everywhere publishes before its connections close
 * (nl_fail_everywhere runs before comm_destroy joins the thread that runs
 * it), and a rank it told closes its own after the notice is in the store
 * (one set tells every rank), so a closed connection may have its reason
 * in the failure key already: fail with that instead of a bare death.
 * Likewise a death the store saw. Returns 1 if it did. Otherwise *left
 * says whether dead_rank (>= 0) announced that it left (it destroyed its
 * communicator: core/blame.h) rather than died. */
static int fail_from_published(nl_state *st, int dead_rank, int *left) {
  xcoll_comm *comm = st->comm;
  xcoll_store *store = NULL;
  *left = 0;
  /* Briefly: when the store is gone too (rank 0 exited), the watcher and
   * the proxy report that, and this failure should not wait for it. */
  if (xcoll_store_connect(comm->master_addr, comm->master_port, 0.5,
                          &store) != XCOLL_SUCCESS)
    return 0;
  const char *keys[1] = {st->failure_key};
  int exists = 0;
  void *value = NULL;
  size_t bytes = 0;
  if (xcoll_store_check(store, keys, 1, &exists) == XCOLL_SUCCESS && exists &&
      xcoll_store_get(store, st->failure_key, &value, &bytes) != XCOLL_SUCCESS)
    bytes = 0;
  int found = bytes > 0;
  /* A death the store saw (a joined rank's connection dropped) is not in
   * the key: the store fails the watchers' gets with it, and a rank told
   * that way may fail and leave before this rank's watcher has run. Ask
   * the store, so that this rank names the dead rank too, not the one
   * that left after hearing of it. */
  char death[XCOLL_ERROR_BYTES];
  death[0] = '\0';
  if (!found) {
    int hushed = xcoll_error_hush(1);
    if (xcoll_store_health(store) == XCOLL_ERR_REMOTE)
      snprintf(death, sizeof death, "%s", xcoll_last_error());
    xcoll_error_hush(hushed);
  }
  if (!found && !death[0] && dead_rank >= 0)
    *left = xcoll_blame_has_left(comm, store, dead_rank);
  xcoll_store_close(store);
  if (found)
    fail_from_notice(st, value, bytes);
  else if (death[0])
    fail_store_death(st, death);
  free(value);
  return found || death[0];
}

int nl_fail_published(nl_state *st) {
  int left = 0;
  if (atomic_load(&st->failed) || !st->failure_key[0])
    return atomic_load(&st->failed);
  return fail_from_published(st, -1, &left);
}

xcoll_status nl_failed_status(const void *state) {
  nl_state *st = (nl_state *)state;
  if (!atomic_load(&st->failed))
    return XCOLL_SUCCESS;
  return st->fail_status;
}

/* Record the first failure: status, message, abort flag, wake everyone.
 * Returns 1 when this was the first. */
static int record_failure(nl_state *st, xcoll_status status,
                          const char *message) {
  pthread_mutex_lock(&st->lock);
  int first = !atomic_load(&st->failed);
  if (first) {
    st->fail_status = status;
    snprintf(st->fail_message, sizeof st->fail_message, "%s", message);
    atomic_store(&st->failed, 1);
    atomic_store_explicit(st->abort, 1, memory_order_release);
    pthread_cond_broadcast(&st->done_cond);
    pthread_cond_broadcast(&st->proxy_cond);
    for (int c = 0; c < st->nchannels; c++)
      pthread_cond_broadcast(&st->channels[c].queue_cond);
  }
  pthread_mutex_unlock(&st->lock);
  if (first)
    XCOLL_WARN("%s", message);
  return first;
}

xcoll_status nl_fail(nl_state *st, xcoll_status status, int dead_rank,
                     const char *fmt, ...) {
  char message[XCOLL_ERROR_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);

  int left = 0;
  if (dead_rank >= 0 && !atomic_load(&st->failed) && st->failure_key[0] &&
      fail_from_published(st, dead_rank, &left))
    return st->fail_status;
  if (left)
    /* Not a death: the transport saw a connection close, which is what a
     * normal destroy does too. */
    snprintf(message, sizeof message,
             "nccl_like: rank %d: rank %d left (destroyed its communicator) "
             "while this rank still waited on it in a collective: the ranks "
             "made different numbers of calls, or it finished early",
             st->rank, dead_rank);
  if (!record_failure(st, status, message))
    return status;
  if (dead_rank >= 0) {
    char published[XCOLL_ERROR_BYTES];
    if (left)
      snprintf(published, sizeof published,
               "rank %d left (destroyed its communicator) while rank %d "
               "still waited on it in a collective: the ranks made different "
               "numbers of calls, or it finished early",
               dead_rank, st->rank);
    else
      snprintf(published, sizeof published,
               "rank %d died (seen by rank %d): %.900s", dead_rank, st->rank,
               message);
    publish_failure(st, XCOLL_ERR_REMOTE, published);
  }
  return status;
}

xcoll_status nl_fail_timeout(nl_state *st, const int *waits_on, int count,
                             const char *fmt, ...) {
  char message[XCOLL_ERROR_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  xcoll_blame_kind kind;
  char why[512];
  int culprit = xcoll_blame_culprit(&st->blame, waits_on, count, &kind, why,
                                    sizeof why);
  if (culprit < 0 || culprit == st->rank)
    return nl_fail_everywhere(st, XCOLL_ERR_TIMEOUT, "%s%s%s", message,
                              why[0] ? "; " : "", why);
  const char *how = kind == XCOLL_BLAME_LEFT
                        ? "left (destroyed its communicator)"
                        : "stopped making progress";
  char headline[XCOLL_ERROR_BYTES];
  snprintf(headline, sizeof headline,
           "nccl_like: rank %d %s (%.300s): %.600s", culprit, how, why,
           message);
  if (!record_failure(st, XCOLL_ERR_TIMEOUT, headline))
    return XCOLL_ERR_TIMEOUT;
  /* The store's host is the silent one: publishing would only wait too,
   * and every other rank times out by itself the same way. */
  if (!xcoll_blame_store_silent(&st->blame)) {
    char published[XCOLL_ERROR_BYTES];
    snprintf(published, sizeof published,
             "rank %d %s (seen by rank %d: %.300s): %.600s", culprit, how,
             st->rank, why, message);
    publish_failure(st, XCOLL_ERR_TIMEOUT, published);
  }
  return XCOLL_ERR_TIMEOUT;
}

xcoll_status nl_fail_everywhere(nl_state *st, xcoll_status status,
                                const char *fmt, ...) {
  char message[XCOLL_ERROR_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (!record_failure(st, status, message))
    return status;
  char published[XCOLL_ERROR_BYTES];
  snprintf(published, sizeof published, "rank %d failed: %.900s", st->rank,
           message);
  publish_failure(st, status, published);
  return status;
}

/* The watcher: blocked on the failure key over its own store
 * connection. Another rank's failure (a death, a collective mismatch)
 * arrives as that key's value; comm_destroy interrupts the connection to
 * wake it (nl_watcher_join); rank 0's death (the store's host) shows up as
 * the connection breaking. */
static void *watcher_main(void *arg) {
  nl_state *st = arg;
  for (;;) {
    /* One blocking get rather than a wait and then a get: the value comes
     * with the wake-up, so the news of a rank that publishes and exits at
     * once (rank 0 takes the store with it) still arrives. */
    void *value = NULL;
    size_t bytes = 0;
    /* The get's own error is no news: rank 0 ending the job before this
     * rank's comm_destroy breaks the connection (no WARN at the end of a
     * job that succeeded), and a real failure is logged below (nl_fail) or
     * by the op it stalls (store_lost). */
    int hushed = xcoll_error_hush(1);
    xcoll_status s =
        xcoll_store_get(st->watch_store, st->failure_key, &value, &bytes);
    xcoll_error_hush(hushed);
    pthread_mutex_lock(&st->lock);
    int stopping = st->stopping;
    pthread_mutex_unlock(&st->lock);
    if (stopping) {
      /* nl_watcher_join interrupted the get: destroy. */
      free(value);
      return NULL;
    }
    if (s == XCOLL_ERR_TIMEOUT)
      continue; /* a very long wait ran out: wait again */
    if (s == XCOLL_ERR_REMOTE &&
        strstr(xcoll_last_error(), "reported by the rendezvous store")) {
      /* The store itself saw a rank's connection drop (core/store_server.c
       * server_note_departure) and failed this wait with a message naming
       * that rank: the fastest news of a death that is not a neighbour's. */
      fail_store_death(st, xcoll_last_error());
      return NULL;
    }
    if (s != XCOLL_SUCCESS) {
      /* Rank 0 hosts the store: it is gone. Ops already in flight fail once
       * they stall (proxy.c), so that a rank 0 that merely finished does not
       * fail the last slots still in its neighbours' sockets. */
      atomic_store(&st->store_lost, 1);
      pthread_mutex_lock(&st->lock);
      pthread_cond_broadcast(&st->proxy_cond);
      pthread_mutex_unlock(&st->lock);
      return NULL;
    }
    if (bytes > 0)
      fail_from_notice(st, value, bytes);
    free(value);
    return NULL;
  }
}

xcoll_status nl_watcher_start(nl_state *st) {
  xcoll_comm *comm = st->comm;
  snprintf(st->failure_key, sizeof st->failure_key, "%snl/failure",
           comm->store_prefix);
  xcoll_status s = xcoll_store_connect(comm->master_addr, comm->master_port,
                                       st->timeout_s, &st->watch_store);
  if (s != XCOLL_SUCCESS)
    return xcoll_error(comm, s,
                       "nccl_like: rank %d cannot open its failure-watch "
                       "connection to the store at %s:%d: %s",
                       st->rank, comm->master_addr, comm->master_port,
                       xcoll_last_error());
  /* Waits end only when a key is set or the connection breaks. */
  xcoll_store_set_timeout(st->watch_store, 1e7);
  if (pthread_create(&st->watcher, NULL, watcher_main, st) != 0)
    return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                       "nccl_like: cannot start the failure-watch thread");
  st->watcher_started = 1;
  return XCOLL_SUCCESS;
}

/* Wake and join the watcher by shutting its store connection down: its wait
 * returns at once whatever the network does. (A set of a key over
 * comm->store would take the store's timeout when the store's host is cut
 * off, and the watcher's own wait would never end: a process cut off from
 * the network could not exit; tests/netns's cut test.) The watch
 * connection never joined, so the store reports no death for it. */
void nl_watcher_join(nl_state *st) {
  if (st->watcher_started) {
    xcoll_store_interrupt(st->watch_store);
    pthread_join(st->watcher, NULL);
    st->watcher_started = 0;
  }
  if (st->watch_store) {
    xcoll_store_close(st->watch_store);
    st->watch_store = NULL;
  }
}
