/* mesh.c - the driver of the nccl_like host engine's mesh (channel.c's
 * direct links to other ranks): the Bruck (bruck.c), pairwise (pairwise.c)
 * and Rabenseifner (rabenseifner.c) allreduces each give it a step function
 * that posts and tests their messages (through each link's carrier,
 * nl_mesh_ops: shm within a host, else the net plugin), and it runs that
 * to the end on the calling thread, yielding and then sleeping while
 * nothing moves (on the shm mesh's event count, or in poll(2) on the net
 * links' sockets), and failing on abort or timeout. */
#include <poll.h>
#include <sched.h>

#include "nccl_like.h"

/* Descriptors one comm may give to poll (a socket comm has at most 16). */
#define NL_MESH_FDS_PER_COMM 16
/* A waiting rank passes over its links, yielding its core after each idle
 * pass, for this long (seconds) before it sleeps in poll(2), whether or not
 * ranks outnumber cores, as the tcp backend spins TCP_SPIN_US. Measured at
 * P=4 on 2 cores, 8-byte allreduce with every rank sending to all others
 * at once (an earlier form of bruck.c): 0 us (sleep at once) 153 us a
 * call, 10 us 108 us, 20 us 117 us. */
#define NL_MESH_SPIN_S 10e-6

/* 1 when a request over the net plugin is posted on a mesh link. */
static int net_busy(const nl_state *st) {
  for (int k = 0; k < st->mesh_links; k++) {
    const nl_mesh_link *m = &st->mesh[k];
    if ((m->send_request != NULL && m->send_ops->net) ||
        (m->recv_request != NULL && m->recv_ops->net))
      return 1;
  }
  return 0;
}

void nl_mesh_idle(nl_state *st, uint64_t spins, double waited_s) {
  /* Fingerprints of earlier ops move meanwhile, as the ring kernels' hook
   * moves them (proxy.c), and a rank that waits long makes its deferred
   * ones due, so that a neighbour that called another collective on the
   * ring explains its failure naming both calls. */
  int progress = 0;
  if (spins % 64 == 0)
    nl_fp_progress(st, &progress);
  if (spins == 256)
    nl_fp_flush(st);
  /* With a core of its own, poll busily first (st->busy_polls). */
  if (spins <= (uint64_t)st->busy_polls)
    return;
  /* Messages in flight over shm (transport/shm.c): spin, then sleep on
   * this rank's mesh event count, which a peer bumps when it posts; that
   * wait also fails the comm when a peer waited on died. With messages
   * over net in flight as well there is no one thing to sleep on: yield. */
  if (nl_shm_mesh_busy(st)) {
    if (!nl_shm_mesh_wait(st, waited_s,
                          net_busy(st) ? 0 : NL_POLL_MS * 1000000L))
      sched_yield();
    return;
  }
  /* Spin NL_MESH_SPIN_S, yielding the core on every idle pass, so that a
   * rank sharing it that has a message to send gets it at once; then
   * sleep in poll(2) until a mesh socket is ready. A plugin without
   * get_fds (ucx) gives nothing to sleep on: yield on, or the waiter would
   * spin through its whole time slice while the rank it waits for shares
   * its core (nccl_like over XCOLL_NET=ucx at P=4 on 2 cores: 150-245 us
   * an 8 B allreduce otherwise; docs/nccl_like.md, "The ucx plugin
   * within a host"). */
  if (waited_s < NL_MESH_SPIN_S || nl_mesh_poll(st, NL_POLL_MS) < 0)
    sched_yield();
}

xcoll_status nl_mesh_drive(nl_state *st, nl_mesh_step_fn step,
                           nl_mesh_waits_fn waits, nl_mesh_stuck_fn stuck,
                           void *ctx) {
  double last_progress = nl_now();
  double post_after = st->timeout_s - xcoll_blame_lead_s(st->timeout_s);
  uint64_t spins = 0;
  int posted = 0;
  for (;;) {
    if (xc_abort_raised(st->abort))
      return XCOLL_ERR_ABORTED;
    int progress = 0, done = 0;
    xcoll_status s = step(ctx, &progress, &done);
    if (done && posted)
      xcoll_blame_progressed(&st->blame);
    if (s != XCOLL_SUCCESS || done)
      return s;
    double now = nl_now();
    if (progress) {
      last_progress = now;
      spins = 0;
      if (posted)
        xcoll_blame_progressed(&st->blame);
      posted = 0;
      continue;
    }
    spins++;
    if (now - last_progress > st->timeout_s)
      return stuck(ctx, now - last_progress);
    if (!posted && now - last_progress > post_after) {
      /* Stalled long enough to tell the store whom this rank waits on. */
      int ranks[NL_PAIRWISE_MAX_RANKS];
      xcoll_blame_stalled(&st->blame, ranks,
                          waits(ctx, ranks, NL_PAIRWISE_MAX_RANKS));
      posted = 1;
    }
    nl_mesh_idle(st, spins, now - last_progress);
  }
}

int nl_mesh_poll(nl_state *st, int timeout_ms) {
  struct pollfd fds[2 * NL_MESH_POLL_LINKS * NL_MESH_FDS_PER_COMM];
  int n = 0, max = (int)(sizeof fds / sizeof fds[0]);
  if (st->net->get_fds == NULL)
    return -1;
  for (int k = 0; k < st->mesh_links; k++) {
    nl_mesh_link *m = &st->mesh[k];
    int ids[NL_MESH_FDS_PER_COMM], count = 0;
    if (m->recv_request != NULL && m->recv_ops->net &&
        st->net->get_fds(NULL, m->link.recv_comm, ids, NL_MESH_FDS_PER_COMM,
                         &count) == XCOLL_SUCCESS)
      for (int i = 0; i < count && n < max; i++)
        fds[n++] = (struct pollfd){.fd = ids[i], .events = POLLIN};
    count = 0;
    if (m->send_request != NULL && m->send_ops->net &&
        st->net->get_fds(m->link.send_comm, NULL, ids, NL_MESH_FDS_PER_COMM,
                         &count) == XCOLL_SUCCESS)
      for (int i = 0; i < count && n < max; i++)
        fds[n++] = (struct pollfd){.fd = ids[i], .events = POLLOUT};
  }
  if (n == 0)
    return -1;
  return poll(fds, (nfds_t)n, timeout_ms) > 0;
}
