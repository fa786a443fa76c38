/* proxy.c - the proxy thread of the nccl_like backend: one per rank, running
 * the proxy steps of the connections whose transport needs one (net:
 * transport/net.c moves full slots over the net plugin), as NCCL's
 * proxy.cc progress thread runs transport/net.cc's sendProxyProgress and
 * recvProxyProgress. A connection over shm needs no step: its kernels meet
 * in shared memory (transport/shm.c).
 *
 * Who runs a channel's step: whichever thread holds the channel's
 * progress_lock, taken with trylock only. A worker whose kernel waits on a
 * slot runs its own channel's step from the kernel's progress hook
 * (nl_proxy_progress_hook), so a slot goes from the kernel to the socket
 * and back on one thread, with no hand-off; on a 2-core machine with
 * several ranks, every hand-off to another spinning thread cost a
 * scheduler time slice. After a few idle passes the hook sleeps in poll(2)
 * on the channel's sockets (net.h's get_fds), so that waiting ranks leave
 * the cores to the ones that hold data. The proxy thread skips a channel
 * whose lock is taken. It keeps passing only while a channel whose worker
 * is outside its kernel has slots left to send (the kernel's last slots of
 * an op), sleeping in poll on their send sockets between passes (or
 * yielding, for a plugin without get_fds); while every busy channel is
 * driven by its worker, it
 * waits on its condition variable for at most NL_PROXY_NAP_MS, and sleeps
 * without a timeout when no op is in flight and nothing is left to send, so
 * idle ranks cost no CPU. It alone owns the "no progress for timeout_s"
 * check, and the drain before comm_destroy.
 *
 * The fingerprint connection (desync.c) has a lock of its own, taken the
 * same way: the proxy runs its step on every pass and stays awake while
 * fingerprints are left to send; channel 0's hook runs it too. */
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "trace.h"
#include "transport.h"

/* Receives posted ahead per connection over net. One is enough for a plugin that
 * reads a stream in order (net/socket): the socket buffers keep the sender
 * streaming meanwhile, and 1, 4 and 8 measured the same within noise (P=2,
 * 1-16 MiB). It also keeps an older plugin safe that fails every request of
 * a comm once the peer closes (net.h now requires a completed request to
 * report done; net/socket did not before): with one receive outstanding, a
 * peer that closes after its last message is seen only by a receive no
 * kernel needs. */
#define NL_RECVS_AHEAD 1
/* A plugin may ask for more (xcoll_net_properties.recvs_ahead): ibverbs
 * needs a clear-to-send out per slot the sender could fill, as NCCL's
 * net_ib posts a receive per free FIFO slot; capped at XCOLL_STEPS. */
int nl_recvs_ahead(const xcoll_net_v1 *net, int device) {
  xcoll_net_properties props;
  memset(&props, 0, sizeof props);
  if (net == NULL || net->get_properties(device, &props) != XCOLL_SUCCESS ||
      props.recvs_ahead <= 0)
    return NL_RECVS_AHEAD;
  return props.recvs_ahead < XCOLL_STEPS ? props.recvs_ahead : XCOLL_STEPS;
}
/* The proxy thread's longest wait while the workers drive their channels
 * (milliseconds): it still passes over every channel this often, to move a
 * channel whose worker computes a long step and to check the timeout. Each
 * pass wakes a thread on a machine whose cores the ranks already fill: 10
 * rather than 1 halved the context switches of a 16 MiB allreduce at P=2
 * on 2 cores (docs/nccl_like.md, "The proxy's nap"). */
#define NL_PROXY_NAP_MS 10
/* Its longest wait while a worker's kick is deferred (engine.c): the
 * bound on how late an op nobody waits for starts. */
#define NL_DEFER_NAP_MS 1
/* After its last op, the proxy naps (as above) this long (seconds) before
 * it sleeps until start() wakes it: back-to-back ops then cost it no
 * wake-up each. */
#define NL_PROXY_LINGER_S 0.05
/* Channel 0's progress hook runs the fingerprint step on one idle pass in
 * this many (desync.c). */
#define NL_FP_HOOK_EVERY 64
/* Passes of a kernel's wait on a channel of shm or p2p connections that
 * only poll the counter (nl_proxy_progress_hook): below the kernel's
 * XC_SPINS_BEFORE_YIELD, so that a peer that posts within a few hundred
 * nanoseconds is seen at the first load after its store. */
#define NL_HOOK_POLL_SPINS 32
/* A kernel that has waited this many idle passes (several polls of up to
 * NL_POLL_MS) sends its rank's deferred fingerprints (nl_fp_flush). */
#define NL_FP_FLUSH_SPINS 256
/* Descriptors one comm may give to poll (a socket comm has at most 16). */
#define NL_POLL_MAX_FDS 16


/* The channel's proxy step: each direction whose transport has one. */
static xcoll_status channel_step(nl_state *st, nl_channel *ch,
                                 int *progress) {
  xcoll_status s = XCOLL_SUCCESS;
  if (ch->send_transport->send_progress != NULL)
    s = ch->send_transport->send_progress(st, ch, progress);
  if (s == XCOLL_SUCCESS && ch->recv_transport->recv_progress != NULL)
    s = ch->recv_transport->recv_progress(st, ch, progress);
  return s;
}

/* A slot filled by a kernel and not yet sent: the proxy must keep going
 * even when no op is in flight (the op finished writing its last slots). */
static int sends_pending(nl_state *st) {
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    /* head is the send side's completed count, published by whichever
     * thread ran the step. */
    if (ch->send_transport->send_progress != NULL &&
        atomic_load_explicit(&ch->send_mem->tail, memory_order_acquire) >
            atomic_load_explicit(&ch->send_mem->head, memory_order_acquire))
      return 1;
  }
  return 0;
}

/* Every FIFO counter: the kernel's (so that a kernel busy reducing a large
 * slot counts as progress too) and the proxy step's (which the workers'
 * hooks move without the proxy thread seeing it). */
static uint64_t kernel_counters(nl_state *st) {
  uint64_t sum = 0;
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    sum += atomic_load_explicit(&ch->send_mem->tail, memory_order_relaxed);
    sum += atomic_load_explicit(&ch->send_mem->head, memory_order_relaxed);
    sum += atomic_load_explicit(&ch->recv_mem->head, memory_order_relaxed);
    sum += atomic_load_explicit(&ch->recv_mem->tail, memory_order_relaxed);
  }
  /* The fingerprint step's, which channel 0's hook runs too. */
  sum += atomic_load_explicit(&st->fp.sent, memory_order_relaxed);
  sum += atomic_load_explicit(&st->fp.judged, memory_order_relaxed);
  return sum;
}

/* A GPU rank's kernel calls no host hook: its transports' watch runs
 * here (each once). */
static void gpu_watch(nl_state *st, double idle_s) {
  const nl_transport *send = st->channels[0].send_transport;
  const nl_transport *recv = st->channels[0].recv_transport;
  if (send->watch != NULL)
    send->watch(st, idle_s);
  if (recv->watch != NULL && recv->watch != send->watch)
    recv->watch(st, idle_s);
}

/* The channel whose sends are outstanding (it waits on the next rank), or
 * -1: then the ring waits on the previous rank. */
static int channel_waiting_on_next(nl_state *st) {
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    /* The FIFO counters, not proxy_send's: a worker may hold the channel. */
    if (atomic_load_explicit(&ch->send_mem->tail, memory_order_acquire) >
        atomic_load_explicit(&ch->send_mem->head, memory_order_acquire))
      return c;
  }
  return -1;
}

/* The rank the ring waits on (for the stall record, core/blame.h). */
static int ring_waits_on(nl_state *st) {
  return channel_waiting_on_next(st) >= 0 ? st->next : st->prev;
}

static void fail_timeout(nl_state *st, double idle_s) {
  /* Name the peer the ring waits on: a channel whose kernel has consumed
   * everything that arrived waits on the previous rank; one with sends
   * outstanding waits on the next. */
  int c = channel_waiting_on_next(st);
  if (c >= 0) {
    nl_channel *ch = &st->channels[c];
    uint64_t sent =
        atomic_load_explicit(&ch->send_mem->head, memory_order_acquire);
    nl_fail_timeout(st, &st->next, 1,
            "nccl_like: rank %d made no progress for %.1f s "
            "(XCOLL_TIMEOUT_S=%.1f): channel %d waits for rank %d (next in "
            "the ring) to take step %" PRIu64 ": is rank %d alive and in "
            "the same collective?",
            st->rank, idle_s, st->timeout_s, c, st->next, sent, st->next);
    return;
  }
  nl_fail_timeout(st, &st->prev, 1,
          "nccl_like: rank %d made no progress for %.1f s "
          "(XCOLL_TIMEOUT_S=%.1f): waiting for data from rank %d (previous in "
          "the ring), step %" PRIu64 " on channel 0: is rank %d alive and in "
          "the same collective?",
          st->rank, idle_s, st->timeout_s, st->prev,
          atomic_load_explicit(&st->channels[0].recv_mem->tail,
                               memory_order_acquire),
          st->prev);
}

void nl_stop_deferring_locked(nl_state *st) {
  xcoll_prompt_stop(&st->prompt);
  if (!atomic_load(&st->any_deferred))
    return;
  atomic_store(&st->any_deferred, 0);
  nl_channel *ch = &st->channels[0];
  for (uint64_t i = ch->queue_head; i != ch->queue_tail; i++)
    ch->queue[i % NL_QUEUE_DEPTH]->deferred = 0;
  pthread_cond_broadcast(&ch->queue_cond);
}

/* With kicks deferred (engine.c), wake channel 0's worker for a deferred
 * item nobody waited for in time, and stop deferring. Takes the lock only
 * while an item may be deferred. */
static void kick_due(nl_state *st) {
  if (!atomic_load(&st->any_deferred))
    return;
  pthread_mutex_lock(&st->lock);
  nl_channel *ch = &st->channels[0];
  if (ch->queue_head != ch->queue_tail) {
    const nl_op *head = ch->queue[ch->queue_head % NL_QUEUE_DEPTH];
    if (head->deferred && nl_now() >= xcoll_prompt_due_at(head->issued_at))
      nl_stop_deferring_locked(st);
  }
  pthread_mutex_unlock(&st->lock);
}

/* Sleep until there is something to move. Returns 0 when the thread must
 * exit. */
static int wait_for_work(nl_state *st) {
  pthread_mutex_lock(&st->lock);
  st->proxy_idle = 1;
  pthread_cond_broadcast(&st->done_cond);
  while (!st->stopping &&
         (atomic_load(&st->failed) ||
          (atomic_load(&st->ops_in_flight) == 0 && !sends_pending(st) &&
           !nl_fp_pending(st))))
    pthread_cond_wait(&st->proxy_cond, &st->lock);
  st->proxy_idle = 0;
  int go = !st->stopping;
  pthread_mutex_unlock(&st->lock);
  return go;
}

void nl_proxy_drain(nl_state *st) {
  if (!st->proxy_started)
    return;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)st->timeout_s + 1;
  pthread_mutex_lock(&st->lock);
  /* Cut the proxy's linger short: it goes idle as soon as all is sent. */
  st->draining = 1;
  pthread_cond_broadcast(&st->proxy_cond);
  /* A kernel may have published its last slot after the proxy went to
   * sleep only if an op was in flight, which wakes it: so proxy_idle with
   * no op in flight means everything was sent. */
  while (!atomic_load(&st->failed) &&
         (!st->proxy_idle || atomic_load(&st->ops_in_flight) > 0)) {
    if (pthread_cond_timedwait(&st->done_cond, &st->lock, &deadline) != 0)
      break;
  }
  pthread_mutex_unlock(&st->lock);
}

/* Wait on proxy_cond until a kick other than the one counted in kicks,
 * stop, failure or drain, or NL_PROXY_NAP_MS. */
static void nap(nl_state *st, unsigned kicks) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  /* Deferred kicks (engine.c) come due within a short nap. */
  until.tv_nsec += (atomic_load(&st->any_deferred) ? NL_DEFER_NAP_MS
                                                  : NL_PROXY_NAP_MS) *
                   1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&st->lock);
  while (st->proxy_kicks == kicks && !st->stopping && !st->draining &&
         !atomic_load(&st->failed)) {
    if (pthread_cond_timedwait(&st->proxy_cond, &st->lock, &until) != 0)
      break;
  }
  pthread_mutex_unlock(&st->lock);
}

static unsigned read_kicks(nl_state *st, int *draining) {
  pthread_mutex_lock(&st->lock);
  unsigned kicks = st->proxy_kicks;
  *draining = st->draining || st->stopping;
  pthread_mutex_unlock(&st->lock);
  return kicks;
}

static void *proxy_main(void *arg) {
  nl_state *st = arg;
  double post_after = st->timeout_s - xcoll_blame_lead_s(st->timeout_s);
  int posted = 0; /* this stall's record is in the store (core/blame.h) */
  double posted_at = 0;
  double last_progress = nl_now();
  double last_active = 0;
  uint64_t last_kernel = 0, last_moved = 0;
  int was_active = 0;
  for (;;) {
    int active = !atomic_load(&st->failed) &&
                 (atomic_load(&st->ops_in_flight) > 0 || sends_pending(st) ||
                  nl_fp_pending(st));
    if (!active) {
      if (posted) { /* the stall ended with the op: the record is stale */
        xcoll_blame_progressed(&st->blame);
        posted = 0;
      }
      /* Between back-to-back ops, nap rather than sleep, so that start()
       * need not wake the proxy for every op (it wakes an idle one only). */
      int draining = 0;
      unsigned kicks = read_kicks(st, &draining);
      if (was_active && !draining && !atomic_load(&st->failed) &&
          nl_now() - last_active < NL_PROXY_LINGER_S) {
        nap(st, kicks);
        continue;
      }
      was_active = 0;
      if (!wait_for_work(st))
        return NULL;
      continue;
    }
    last_active = nl_now();
    if (!was_active) {
      was_active = 1;
      last_progress = nl_now();
      last_kernel = kernel_counters(st);
    }
    int draining = 0;
    unsigned kicks = read_kicks(st, &draining);
    kick_due(st);
    int progress = 0;
    int spin = 0; /* a channel no worker drives has slots left to send */
    if (st->gpu != NULL) {
      /* A GPU rank: no worker drives a channel; while a kernel runs, every
       * slot it fills or waits for on net moves only through this thread.
       * Over p2p and shm the kernels meet in memory: the thread only
       * retires launches and watches the peers, between naps. */
      nl_gpu_retire(st);
      spin = atomic_load(&st->ops_in_flight) > 0 && nl_proxy_moves_ring(st);
      if (atomic_load(&st->ops_in_flight) > 0)
        gpu_watch(st, nl_now() - last_progress);
    }
    /* The send sockets of such channels: the pass sleeps on them in poll
     * rather than yield, when the plugin can name them. */
    struct pollfd send_fds[NL_POLL_MAX_FDS];
    int nsend_fds = 0, all_pollable = !spin; /* a kernel waits on receives too */
    for (int c = 0; c < st->nchannels; c++) {
      nl_channel *ch = &st->channels[c];
      if (pthread_mutex_trylock(&ch->progress_lock) != 0)
        continue; /* its worker runs the step */
      int busy = atomic_load(&ch->busy);
      const nl_transport *send = ch->send_transport;
      const nl_transport *recv = ch->recv_transport;
      xcoll_status s = XCOLL_SUCCESS;
      if (send->send_progress != NULL)
        s = send->send_progress(st, ch, &progress);
      /* With no op in flight only trailing sends are left: a receive
       * posted ahead waits for the next op. Testing it now would report
       * the previous rank's normal close at the end of a job as a broken
       * connection (a GPU rank's proxy passes until it retires the last
       * kernel, while the previous rank may already be gone). */
      if (s == XCOLL_SUCCESS && recv->recv_progress != NULL &&
          atomic_load(&st->ops_in_flight) > 0)
        s = recv->recv_progress(st, ch, &progress);
      if (!busy && ch->proxy_send.posted > ch->proxy_send.completed) {
        spin = 1;
        int count = 0, ids[NL_POLL_MAX_FDS];
        if (st->net->get_fds != NULL &&
            st->net->get_fds(ch->link.send_comm, NULL, ids,
                             NL_POLL_MAX_FDS - nsend_fds,
                             &count) == XCOLL_SUCCESS &&
            count > 0) {
          for (int i = 0; i < count; i++)
            send_fds[nsend_fds++] =
                (struct pollfd){.fd = ids[i], .events = POLLOUT};
        } else {
          all_pollable = 0;
        }
      }
      if (!busy && send->send_progress != NULL &&
          atomic_load_explicit(&ch->send_mem->tail, memory_order_acquire) >
              ch->proxy_send.posted)
        spin = 1, all_pollable = 0; /* isend said "retry": no fd to wait on */
      pthread_mutex_unlock(&ch->progress_lock);
      if (s != XCOLL_SUCCESS)
        break;
    }
    nl_fp_progress(st, &progress);
    if (atomic_load(&st->failed))
      continue;
    /* Counters the kernels moved are progress for the watchdog, but no
     * work for this thread: over shm they move on every step while the
     * proxy has nothing to do, and passing again at once would take a core
     * from the ranks. Only its own moves make it pass again without a
     * nap. */
    uint64_t kernel = kernel_counters(st);
    if (kernel != last_kernel) {
      last_kernel = kernel;
      last_progress = nl_now();
    }
    if (progress)
      last_progress = nl_now();
    if (posted && last_progress > posted_at) {
      xcoll_blame_progressed(&st->blame);
      posted = 0;
    }
    if (progress)
      continue;
    /* Bruck messages (bruck.c) move no FIFO counter: the thread
     * running the op drives them, so they reset the watchdog without
     * keeping this thread off its nap. */
    uint64_t moved =
        atomic_load_explicit(&st->mesh_moved, memory_order_relaxed);
    if (moved != last_moved) {
      last_moved = moved;
      last_progress = nl_now();
    }
    double idle = nl_now() - last_progress;
    if (atomic_load(&st->store_lost) && idle > NL_STORE_LOST_GRACE_S &&
        atomic_load(&st->ops_in_flight) > 0) {
      nl_fail(st, XCOLL_ERR_REMOTE, -1,
              "nccl_like: rank %d: rank 0 died: the connection to the store "
              "it hosts (%s:%d) broke and the ring made no progress for "
              "%.1f s",
              st->rank, st->comm->master_addr, st->comm->master_port, idle);
      continue;
    }
    if (idle > st->timeout_s) {
      fail_timeout(st, idle);
      continue;
    }
    if (!posted && idle > post_after &&
        atomic_load(&st->ops_in_flight) > 0) {
      int waits_on = ring_waits_on(st);
      xcoll_blame_stalled(&st->blame, &waits_on, 1);
      posted = 1;
      posted_at = nl_now();
    }
    if (spin && !progress && all_pollable && nsend_fds > 0) {
      /* Trailing sends only, each waiting for room in its socket. */
      (void)poll(send_fds, (nfds_t)nsend_fds, NL_POLL_MS);
      continue;
    }
    if (spin || draining) {
      sched_yield();
      continue;
    }
    /* Every busy channel is driven by its worker: nap until a worker leaves
     * its kernel with slots to send, or start() finds a batch of deferred
     * fingerprints due or no room for one (proxy_kicks), or
     * NL_PROXY_NAP_MS. (Before start() kicked for fingerprints, a 10 ms
     * nap made the 8 B-4 KiB Bruck allreduce at P=4 on 2 cores 2x slower,
     * 60-96 us to 153-164 us, waiting for the nap to send a due batch;
     * with the kicks it took 47-60 us against 60-72 us with a 1 ms nap.) */
    nap(st, kicks);
  }
}

/* The descriptors whose readiness lets channel ch's requests in flight
 * progress (net.h's get_fds): the recv comm's while a receive is posted,
 * the send comm's while a send is. Called with the channel's
 * progress_lock held. Returns how many were written to fds (0: nothing to
 * wait on, or the plugin cannot say). */
static int channel_poll_fds(nl_state *st, nl_channel *ch, struct pollfd *fds,
                            int max_fds) {
  int n = 0, count = 0;
  int ids[2 * NL_POLL_MAX_FDS];
  if (st->net->get_fds == NULL)
    return 0;
  if (ch->recv_broken == XCOLL_SUCCESS &&
      ch->proxy_recv.posted > ch->proxy_recv.completed &&
      st->net->get_fds(NULL, ch->link.recv_comm, ids, max_fds, &count) ==
          XCOLL_SUCCESS)
    for (int i = 0; i < count && n < max_fds; i++)
      fds[n++] = (struct pollfd){.fd = ids[i], .events = POLLIN};
  count = 0;
  if (ch->proxy_send.posted > ch->proxy_send.completed &&
      st->net->get_fds(ch->link.send_comm, NULL, ids, max_fds - n, &count) ==
          XCOLL_SUCCESS)
    for (int i = 0; i < count && n < max_fds; i++)
      fds[n++] = (struct pollfd){.fd = ids[i], .events = POLLOUT};
  return n;
}

/* The wait of a net connection, with the channel's progress_lock held
 * after its step (s, progress): from the NL_SPINS_BEFORE_POLL-th idle
 * pass (and, with st->spin_s, once that long was spun), sleep in poll on
 * the channel's sockets. Returns 1 when it slept. */
static int net_wait(nl_state *st, nl_channel *ch, xcoll_status s,
                    int progress, uint64_t spins, double now) {
  int slept = 0;
  int sleep_now = spins >= NL_SPINS_BEFORE_POLL;
  if (st->spin_s > 0)
    sleep_now = sleep_now && now - ch->wait_since >= st->spin_s;
  if (s == XCOLL_SUCCESS && !progress && sleep_now) {
    /* Nothing moved for a while: sleep until a socket can move something
     * (the peer's data or room to send), then move it at once. Holding the
     * lock meanwhile keeps the proxy thread off this channel: it would only
     * find the same sockets not ready. */
    struct pollfd fds[2 * NL_POLL_MAX_FDS];
    int n = channel_poll_fds(st, ch, fds, 2 * NL_POLL_MAX_FDS);
    if (n > 0) {
      slept = 1;
      if (poll(fds, (nfds_t)n, NL_POLL_MS) > 0) {
        (void)channel_step(st, ch, &progress);
      }
    }
  }
  return slept;
}

/* The transport that carries the FIFO counter a kernel waits on: a
 * receive's tail, or a send's head (credits, or direct sends' return). */
static const nl_transport *waited_transport(const nl_channel *ch,
                                            const xc_atomic_u64 *counter) {
  if (ch->recv_mem != NULL && counter == &ch->recv_mem->tail)
    return ch->recv_transport;
  if (ch->send_mem != NULL && counter == &ch->send_mem->head)
    return ch->send_transport;
  return NULL;
}

int nl_proxy_progress_hook(void *ctx, const xc_atomic_u64 *counter,
                           uint64_t target, uint64_t spins) {
  nl_channel *ch = ctx;
  nl_state *st = ch->st;
  if (counter != NULL) { /* what the kernel waits on, for a dump */
    atomic_store_explicit(&ch->wait_counter, (uintptr_t)counter,
                          memory_order_relaxed);
    atomic_store_explicit(&ch->wait_target, target, memory_order_relaxed);
  }
  if (atomic_load_explicit(&st->failed, memory_order_relaxed))
    return 0;
  /* A channel whose both directions meet in memory (shm, p2p) has no step
   * to run, and its peer posts the counter itself: the first
   * NL_HOOK_POLL_SPINS passes of a wait only poll it (the kernel's loop),
   * without the lock, the clock and the peers' check. */
  int poll_only = counter != NULL &&
                  ch->send_transport->send_progress == NULL &&
                  ch->recv_transport->recv_progress == NULL;
  if (poll_only && spins <= NL_HOOK_POLL_SPINS)
    return 0;
  if (pthread_mutex_trylock(&ch->progress_lock) != 0)
    return 0; /* the proxy thread runs the step right now */
  int progress = 0, slept = 0;
  xcoll_status s = channel_step(st, ch, &progress);
  double now = nl_now();
  /* The wait's first pass that gets here starts its spin timer. */
  if (spins == (poll_only ? NL_HOOK_POLL_SPINS + 1 : 1) || progress)
    ch->wait_since = now;
  const nl_transport *waited = waited_transport(ch, counter);
  if (waited != NULL && waited->wait != NULL) {
    /* Its kernels meet in memory (shm): nothing for poll to watch. The
     * lock is let go first, so that the proxy can move the other
     * direction meanwhile if that one is net; wait_since is read under
     * it. */
    double waited_s = now - ch->wait_since;
    pthread_mutex_unlock(&ch->progress_lock);
    if (s == XCOLL_SUCCESS && !progress)
      slept = waited->wait(st, ch, counter, target, now, waited_s);
  } else {
    slept = net_wait(st, ch, s, progress, spins, now);
    pthread_mutex_unlock(&ch->progress_lock);
  }
  /* Fingerprints from a kernel that waits long too, so that a mismatch
   * fails the wait at once rather than after the proxy's nap; not on every
   * idle pass: the proxy thread moves them meanwhile, off the path of the
   * loop that watches for data. */
  if (ch->id == 0 && spins == NL_FP_FLUSH_SPINS)
    nl_fp_flush(st);
  if (ch->id == 0 && !progress &&
      (slept || ++ch->fp_polls % NL_FP_HOOK_EVERY == 0))
    nl_fp_progress(st, &progress);
  return slept;
}

void nl_proxy_notify_hook(void *ctx, int flags) {
  nl_channel *ch = ctx;
  if ((flags & XC_OP_SEND) && ch->send_transport->posted != NULL)
    ch->send_transport->posted(ch->st, ch, 1);
  if ((flags & XC_OP_RECV) && ch->recv_transport->posted != NULL)
    ch->recv_transport->posted(ch->st, ch, 0);
}


xcoll_status nl_proxy_start(nl_state *st) {
  if (pthread_create(&st->proxy, NULL, proxy_main, st) != 0)
    return xcoll_error(st->comm, XCOLL_ERR_SYSTEM,
                       "nccl_like: cannot start the proxy thread");
  st->proxy_started = 1;
  return XCOLL_SUCCESS;
}

void nl_proxy_join(nl_state *st) {
  if (!st->proxy_started)
    return;
  pthread_join(st->proxy, NULL);
  st->proxy_started = 0;
}
