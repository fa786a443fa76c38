/* net.c - the net transport of nccl_like: each side's FIFO is its own
 * memory, and a proxy step moves full slots over the net plugin (net/net.h),
 * as NCCL's src/transport/net.cc sendProxyProgress and recvProxyProgress
 * do. Any pair of ranks can connect over it: it comes last in the table.
 * The steps run on the proxy thread or on a waiting kernel's thread
 * (proxy.c); the net links are set up by channel.c together with the
 * fingerprint connection's and the mesh's.
 *
 * Send side of a connection (the kernel produces): when the kernel's tail
 * passes what was posted, isend that slot (a NULL request means "no room,
 * retry"); when a send completes, mark the slot empty and give the credit
 * back (head = completed, release).
 * Receive side (the kernel consumes): keep irecvs posted into free slots
 * while posted < head + XCOLL_STEPS; when one lands, write its size and
 * publish tail with release, so that the kernel reads a complete slot. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "trace.h"
#include "transport.h"

/* A recv connection broken while the kernel waits on it fails the op after
 * this long (seconds): long enough for a kernel that already holds its last
 * slot to return. */
#define NL_RECV_BROKEN_GRACE_S 0.1

/* XCOLL_TRACE: one span per slot moved. */
static void trace_slot(nl_state *st, nl_channel *ch, int is_send,
                       uint64_t step, double start_us, size_t bytes) {
  if (!xcoll_trace_enabled())
    return;
  char args[128];
  snprintf(args, sizeof args,
           "\"channel\":%d,\"peer\":%d,\"step\":%" PRIu64 ",\"bytes\":%zu",
           ch->id, is_send ? st->next : st->prev, step, bytes);
  xcoll_trace_span(is_send ? "proxy send" : "proxy recv", "proxy",
                   st->trace_base + (is_send ? 100u : 200u) + (unsigned)ch->id,
                   start_us, xcoll_time_us(), args);
}

/* Send side of channel ch. *progress is set when a counter moved. */
static xcoll_status progress_send(nl_state *st, nl_channel *ch,
                                  int *progress) {
  nl_proxy_conn *pc = &ch->proxy_send;
  nl_fifo_mem *mem = ch->send_mem;
  uint64_t tail = atomic_load_explicit(&mem->tail, memory_order_acquire);
  /* Post: every slot the kernel has filled. The kernel never runs more than
   * XCOLL_STEPS ahead of head, so posted - completed <= XCOLL_STEPS. */
  while (pc->posted < tail) {
    int slot = (int)(pc->posted % XCOLL_STEPS);
    int64_t bytes = mem->sizes[slot];
    if (bytes < 0 || (size_t)bytes > st->step_bytes)
      return nl_fail(st, XCOLL_ERR_INTERNAL, -1,
                     "nccl_like: rank %d channel %d: the kernel filled slot "
                     "%d with %" PRId64 " B (step %zu B): a bug, please report",
                     st->rank, ch->id, slot, bytes, st->step_bytes);
    /* A direct step (kernels/conn.h) goes from user memory, which no
     * reg_mr covers: st->direct is set only for plugins that take NULL. */
    const uint8_t *from = ch->send_buff + (size_t)slot * st->step_bytes;
    void *mhandle = pc->mhandle;
    if (st->direct && ch->send_from[slot] != NULL) {
      from = ch->send_from[slot];
      mhandle = NULL;
    }
    xcoll_net_request *request = NULL;
    pc->started_us[slot] = xcoll_trace_enabled() ? xcoll_time_us() : 0;
    xcoll_status s =
        st->net->isend(ch->link.send_comm, from, (size_t)bytes,
                       (uint32_t)pc->posted, mhandle, &request);
    if (s != XCOLL_SUCCESS)
      return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? st->next : -1,
                     "nccl_like: rank %d channel %d: sending to rank %d "
                     "failed: %s",
                     st->rank, ch->id, st->next, nl_net_last_error());
    if (request == NULL)
      break; /* back-pressure: retry on the next pass */
    pc->requests[slot] = request;
    pc->posted++;
    *progress = 1;
  }
  /* Complete in order and give credits back. */
  while (pc->completed < pc->posted) {
    int slot = (int)(pc->completed % XCOLL_STEPS);
    int done = 0;
    size_t bytes = 0;
    xcoll_status s = st->net->test(pc->requests[slot], &done, &bytes);
    if (s != XCOLL_SUCCESS) {
      pc->requests[slot] = NULL;
      return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? st->next : -1,
                     "nccl_like: rank %d channel %d: sending to rank %d "
                     "failed: %s",
                     st->rank, ch->id, st->next, nl_net_last_error());
    }
    if (!done)
      break;
    pc->requests[slot] = NULL;
    trace_slot(st, ch, 1, pc->completed, pc->started_us[slot], bytes);
    mem->sizes[slot] = -1;
    pc->completed++;
    atomic_store_explicit(&mem->head, pc->completed, memory_order_release);
    *progress = 1;
  }
  return XCOLL_SUCCESS;
}

/* Receive side of channel ch. */
static xcoll_status progress_recv(nl_state *st, nl_channel *ch,
                                  int *progress) {
  nl_proxy_conn *pc = &ch->proxy_recv;
  nl_fifo_mem *mem = ch->recv_mem;
  if (ch->recv_broken != XCOLL_SUCCESS) {
    /* The kernel has consumed every slot that landed and still runs: it
     * waits for one that can no longer come. */
    uint64_t head = atomic_load_explicit(&mem->head, memory_order_acquire);
    int kernel_runs = atomic_load(&ch->busy) ||
                      (st->gpu != NULL && atomic_load(&st->ops_in_flight) > 0);
    if (head == pc->completed && kernel_runs &&
        nl_now() - ch->recv_broken_since > NL_RECV_BROKEN_GRACE_S)
      return nl_fail(st, ch->recv_broken,
                     ch->recv_broken == XCOLL_ERR_REMOTE ? st->prev : -1,
                     "nccl_like: rank %d channel %d: receiving from rank %d "
                     "failed: %s",
                     st->rank, ch->id, st->prev, ch->recv_broken_message);
    return XCOLL_SUCCESS;
  }
  uint64_t head = atomic_load_explicit(&mem->head, memory_order_acquire);
  /* Direct receives: only the steps the kernel asked for, each where it
   * said (kernels/conn.h). */
  uint64_t asked = ch->recv.direct_req != NULL
                       ? atomic_load_explicit(&ch->recv_req,
                                              memory_order_acquire)
                       : UINT64_MAX;
  while (pc->posted < head + XCOLL_STEPS && pc->posted < asked &&
         pc->posted - pc->completed < (uint64_t)st->recvs_ahead) {
    int slot = (int)(pc->posted % XCOLL_STEPS);
    uint8_t *to = ch->recv_buff + (size_t)slot * st->step_bytes;
    size_t room = st->step_bytes;
    void *mhandle = pc->mhandle;
    if (ch->recv.direct_req != NULL && ch->recv_to[slot] != NULL) {
      /* User memory, which no reg_mr covers (st->direct: a plugin that
       * takes NULL), with room for exactly the step's bytes. */
      to = ch->recv_to[slot];
      room = ch->recv_to_bytes[slot];
      mhandle = NULL;
    }
    xcoll_net_request *request = NULL;
    pc->started_us[slot] = xcoll_trace_enabled() ? xcoll_time_us() : 0;
    xcoll_status s = st->net->irecv(ch->link.recv_comm, to, room,
                                    (uint32_t)pc->posted, mhandle, &request);
    if (s != XCOLL_SUCCESS)
      return nl_fail(st, s, s == XCOLL_ERR_REMOTE ? st->prev : -1,
                     "nccl_like: rank %d channel %d: receiving from rank %d "
                     "failed: %s",
                     st->rank, ch->id, st->prev, nl_net_last_error());
    if (request == NULL)
      break;
    pc->requests[slot] = request;
    pc->posted++;
    *progress = 1;
  }
  while (pc->completed < pc->posted) {
    int slot = (int)(pc->completed % XCOLL_STEPS);
    int done = 0;
    size_t bytes = 0;
    xcoll_status s = st->net->test(pc->requests[slot], &done, &bytes);
    if (s != XCOLL_SUCCESS) {
      pc->requests[slot] = NULL;
      if (s != XCOLL_ERR_REMOTE)
        return nl_fail(st, s, -1,
                       "nccl_like: rank %d channel %d: receiving from rank "
                       "%d failed: %s",
                       st->rank, ch->id, st->prev, nl_net_last_error());
      ch->recv_broken = s;
      ch->recv_broken_since = nl_now();
      snprintf(ch->recv_broken_message, sizeof ch->recv_broken_message, "%s",
               nl_net_last_error());
      return XCOLL_SUCCESS;
    }
    if (!done)
      break;
    pc->requests[slot] = NULL;
    trace_slot(st, ch, 0, pc->completed, pc->started_us[slot], bytes);
    mem->sizes[slot] = (int64_t)bytes;
    pc->completed++;
    atomic_store_explicit(&mem->tail, pc->completed, memory_order_release);
    *progress = 1;
  }
  return XCOLL_SUCCESS;
}

static int net_can_connect(const nl_rank_info *a, const nl_rank_info *b) {
  (void)a;
  (void)b;
  return 1;
}

const nl_transport nl_transport_net = {
    .name = "NET",
    .can_connect = net_can_connect,
    .setup = NULL,
    .recv_alloc = NULL,
    .send_in_peer_memory = 0,
    .connect = NULL,
    .free = NULL,
    .send_progress = progress_send,
    .recv_progress = progress_recv,
    .wait = NULL,
    .posted = NULL,
};

/* ---- the mesh over the net plugin: a link's comms, one net message per
 * mesh message, tagged with the link's count of messages so far. The
 * plugin's request is the mesh request. ---- */

/* A net plugin's message carries no check (NL_MESH_UNCHECKED). */
static xcoll_status mesh_isend(nl_state *st, nl_mesh_link *m,
                               const void *data, size_t bytes, uint64_t check,
                               void *mhandle, nl_mesh_request **request) {
  (void)check;
  xcoll_net_request *r = NULL;
  xcoll_status s = st->net->isend(m->link.send_comm, data, bytes, m->sends,
                                  mhandle, &r);
  *request = (nl_mesh_request *)r;
  return s;
}

static xcoll_status mesh_irecv(nl_state *st, nl_mesh_link *m, void *data,
                               size_t bytes, uint64_t check, void *mhandle,
                               nl_mesh_request **request) {
  (void)check;
  xcoll_net_request *r = NULL;
  xcoll_status s = st->net->irecv(m->link.recv_comm, data, bytes, m->recvs,
                                  mhandle, &r);
  *request = (nl_mesh_request *)r;
  return s;
}

static xcoll_status mesh_test(nl_state *st, nl_mesh_link *m,
                              nl_mesh_request *request, int *done,
                              size_t *bytes) {
  (void)m;
  return st->net->test((xcoll_net_request *)request, done, bytes);
}

static const char *mesh_last_error(const nl_mesh_link *m) {
  (void)m;
  return nl_net_last_error();
}

const nl_mesh_ops nl_mesh_net_ops = {
    .name = "NET",
    .net = 1,
    .isend = mesh_isend,
    .irecv = mesh_irecv,
    .test = mesh_test,
    .last_error = mesh_last_error,
};
