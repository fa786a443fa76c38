/* channel.c - channels of the nccl_like backend: each channel owns two
 * connection FIFOs (slots + head/tail + sizes) in host memory, one to the
 * next rank of the ring and one from the previous, and the net plugin comms
 * that carry them. The fingerprint connection (desync.c) is set up the
 * same way, as one more link of the ring, and so is the mesh: on a comm
 * of host ranks, a link to every other rank (bruck.c, pairwise.c,
 * rabenseifner.c, p2p.c), each direction over the net plugin unless its
 * two ranks share a host (transport/shm.c carries it). Setup follows NCCL's
 * transport/net.cc: the receiver listens and publishes its handle
 * (bootstrap allgather), the sender connects to it, the receiver accepts;
 * connect and accept are non-blocking and retried. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "error.h"
#include "log.h"
#include "nccl_like.h"

/* Zero bytes at p twice: by read(2) from /dev/zero, so that the kernel
 * itself writes every page once, then by memset, so that this process
 * does. The FIFOs are where the net plugin's recv(2) lands and the kernels
 * read: on a virtual machine whose hypervisor shadows the guest's page
 * tables, the first access to a page from each side faults, kernel and
 * user apart. With memset alone, a
 * 512 KiB slot took 1.0-1.4 ms to receive its first step against 0.05 ms
 * later; with read(2) alone, the kernel's first reduction of each slot
 * was as slow: the first 8 steps of every connection paid it inside the
 * collectives (docs/nccl_like.md, "First use of a slot"). On any other
 * machine both cost what one memset does, at comm init. */
static void zero_by_kernel(uint8_t *p, size_t bytes) {
  size_t done = 0;
  int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    while (done < bytes) {
      ssize_t got = read(fd, p + done, bytes - done);
      if (got <= 0 && !(got < 0 && errno == EINTR))
        break;
      if (got > 0)
        done += (size_t)got;
    }
    close(fd);
  }
  memset(p, 0, bytes);
}

/* Zeroed page-aligned memory: host memory on a host rank, a piece of the
 * mapped pinned block on a GPU rank (gpu_engine.c), which the device
 * reaches over PCIe and nl_gpu_close frees. */
static void *alloc_aligned(nl_state *st, size_t bytes) {
  if (st->gpu != NULL)
    return nl_gpu_carve(st, bytes);
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes) != 0)
    return NULL;
  zero_by_kernel(p, bytes);
  return p;
}

/* 1 when the link from rank `from` to rank `to` joins two host ranks over
 * shm: the sending kernel writes straight into the receiver's slots and
 * FIFO memory, and no GPU kernel or proxy touches them. Such a link
 * carries wide LL lines and each step's check (kernels/conn.h ll_wide,
 * checks). Every rank answers alike for every link (the rank infos and
 * the choice of transport are the same everywhere). */
static int host_shm_link(const nl_state *st, int from, int to) {
  if (st->world_size < 2 || st->rank_infos == NULL)
    return 0;
  const nl_rank_info *a = &st->rank_infos[from], *b = &st->rank_infos[to];
  return a->cuda_device < 0 && b->cuda_device < 0 &&
         nl_transport_pick(a, b) == &nl_transport_shm;
}

/* A connection's ll_wide and checks (kernels/conn.h), on a link that
 * host_shm_link accepts; mem is the receiver's FIFO memory. */
static void conn_checked(xc_conn *conn, nl_fifo_mem *mem, int on) {
  conn->ll_wide = on;
  conn->checks = on ? mem->checks : NULL;
}

/* Point the kernel's view of a connection at its memory. */
static void conn_bind(xc_conn *conn, nl_fifo_mem *mem, uint8_t *buff,
                      size_t step_bytes) {
  memset(conn, 0, sizeof *conn);
  conn->buff = buff;
  conn->step_bytes = step_bytes;
  conn->head = &mem->head;
  conn->tail = &mem->tail;
  conn->sizes = mem->sizes;
  conn->step = 0;
}

/* Each channel's receive FIFO (in its transport's memory, or this rank's)
 * and send FIFO (this rank's, unless the transport writes into the peer's
 * receive FIFO: then connect_transports points it there). */
static xcoll_status alloc_fifos(nl_state *st) {
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    ch->id = c;
    ch->st = st;
    if (ch->recv_transport->recv_alloc != NULL) {
      xcoll_status s = ch->recv_transport->recv_alloc(st, ch);
      if (s != XCOLL_SUCCESS)
        return s;
    } else {
      ch->recv_mem = alloc_aligned(st, sizeof(nl_fifo_mem));
      ch->recv_buff = alloc_aligned(st, st->buffsize);
    }
    int own_send = !ch->send_transport->send_in_peer_memory;
    if (own_send) {
      ch->send_mem = alloc_aligned(st, sizeof(nl_fifo_mem));
      ch->send_buff = alloc_aligned(st, st->buffsize);
    }
    /* The gather allreduce's k input blocks (kernels/ring.h). */
    ch->scratch_bytes = (size_t)st->world_size * NL_GATHER_MAX_BYTES;
    /* A GPU rank's is device memory (gpu_engine.c). */
    ch->scratch =
        st->gpu != NULL ? NULL : alloc_aligned(st, ch->scratch_bytes);
    if ((own_send && (!ch->send_mem || !ch->send_buff)) || !ch->recv_mem ||
        !ch->recv_buff || (!ch->scratch && st->gpu == NULL))
      return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                         "nccl_like: out of memory for channel %d's FIFOs "
                         "(2 x %zu B; lower XCOLL_BUFFSIZE or "
                         "XCOLL_NCHANNELS)",
                         c, st->buffsize);
    if (own_send) {
      atomic_init(&ch->send_mem->head, 0);
      atomic_init(&ch->send_mem->tail, 0);
      for (int i = 0; i < XCOLL_STEPS; i++)
        ch->send_mem->sizes[i] = -1;
    }
    atomic_init(&ch->recv_mem->head, 0);
    atomic_init(&ch->recv_mem->tail, 0);
    for (int i = 0; i < XCOLL_STEPS; i++)
      ch->recv_mem->sizes[i] = -1;
    conn_bind(&ch->recv, ch->recv_mem, ch->recv_buff, st->step_bytes);
    /* Over shm between two host ranks the previous rank's kernel writes
     * each LL line into these slots with 64-bit stores: an LL step may be
     * read by its flags, before tail (kernels/prims.h). Not where a GPU
     * kernel or a proxy writes them. */
    int host_shm = host_shm_link(st, st->prev, st->rank);
    ch->recv.ll_poll = host_shm;
    conn_checked(&ch->recv, ch->recv_mem, host_shm);
    ch->proxy_send.peer = st->next;
    ch->proxy_recv.peer = st->prev;
  }
  return XCOLL_SUCCESS;
}

/* The links to connect: one per channel, then the fingerprint connection
 * (desync.c), then with st->mesh_on the mesh links 0..mesh_links-1.
 * Link i's handle is the i-th of a rank's blob. */
static int link_count(const nl_state *st) {
  return st->nchannels + 1 + st->mesh_links;
}

static nl_ring_link *link_at(nl_state *st, int i) {
  if (i < st->nchannels)
    return &st->channels[i].link;
  if (i == st->nchannels)
    return &st->fp.link;
  return &st->mesh[i - st->nchannels - 1].link;
}

/* The rank link i sends to (the next in the ring, or the mesh link's). */
static int link_to(const nl_state *st, int i) {
  return i <= st->nchannels ? st->next : st->mesh[i - st->nchannels - 1].to;
}

/* The rank link i receives from. */
static int link_from(const nl_state *st, int i) {
  return i <= st->nchannels ? st->prev : st->mesh[i - st->nchannels - 1].from;
}

/* Whether link i sends (connects to link_to(i)) and receives (listens
 * for and accepts link_from(i)) over the net plugin: a channel's link and
 * a mesh link only in the directions that net carries. */
static int link_sends(const nl_state *st, int i) {
  if (i > st->nchannels)
    return st->mesh[i - st->nchannels - 1].send_ops->net;
  return i == st->nchannels ||
         st->channels[i].send_transport == &nl_transport_net;
}

static int link_receives(const nl_state *st, int i) {
  if (i > st->nchannels)
    return st->mesh[i - st->nchannels - 1].recv_ops->net;
  return i == st->nchannels ||
         st->channels[i].recv_transport == &nl_transport_net;
}

/* "channel 1", "the fingerprint connection" or "mesh link 2 (to rank 3)", for
 * messages. */
static const char *link_name(const nl_state *st, int i, char *out,
                             size_t bytes) {
  if (i < st->nchannels)
    snprintf(out, bytes, "channel %d", i);
  else if (i == st->nchannels)
    snprintf(out, bytes, "the fingerprint connection");
  else
    snprintf(out, bytes, "mesh link %d (to rank %d)", i - st->nchannels - 1,
             st->mesh[i - st->nchannels - 1].to);
  return out;
}

/* The mesh's links, one to every other rank (st->mesh_on), and the
 * buffers of the algorithms that use it (st->bruck, st->pairwise). */
static xcoll_status alloc_mesh(nl_state *st) {
  st->mesh_links = 0;
  if (!st->mesh_on)
    return XCOLL_SUCCESS;
  int p = st->world_size;
  st->mesh = calloc((size_t)p - 1, sizeof *st->mesh);
  st->mesh_of = malloc((size_t)p * sizeof *st->mesh_of);
  if (!st->mesh || !st->mesh_of)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for the mesh's %d links",
                       p - 1);
  if (st->bruck) {
    st->mesh_out = alloc_aligned(st, NL_BRUCK_BUFFER_BYTES(p));
    st->mesh_in = alloc_aligned(st, NL_BRUCK_BUFFER_BYTES(p));
    if (!st->mesh_out || !st->mesh_in)
      return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                         "nccl_like: out of memory for the Bruck allreduce's "
                         "buffers (XCOLL_BRUCK=0 goes without them)");
  }
  if (st->pairwise) {
    st->pairwise_stage = alloc_aligned(st, (size_t)(p - 1) * NL_PAIRWISE_DEPTH *
                                               NL_PAIRWISE_UNIT_BYTES);
    if (!st->pairwise_stage)
      return xcoll_error(
          st->comm, XCOLL_ERR_NO_MEMORY,
          "nccl_like: out of memory for the pairwise "
          "allreduce's %d MiB of stage (XCOLL_PAIRWISE=0 goes "
          "without it)",
          (int)((size_t)(p - 1) * NL_PAIRWISE_DEPTH * NL_PAIRWISE_UNIT_BYTES >>
                20));
  }
  st->mesh_of[0] = -1;
  const nl_rank_info *me = &st->rank_infos[st->rank];
  for (int d = 1; d < p; d++) {
    st->mesh_of[d] = st->mesh_links;
    nl_mesh_link *m = &st->mesh[st->mesh_links++];
    m->to = (st->rank + d) % p;
    m->from = (st->rank - d + p) % p;
    /* Each direction on shm when its two ranks share a host (the same
     * answer at the peer's end: nl_shm_mesh_pair is symmetric). */
    m->send_ops = nl_shm_mesh_pair(me, &st->rank_infos[m->to])
                      ? &nl_mesh_shm_ops
                      : &nl_mesh_net_ops;
    m->recv_ops = nl_shm_mesh_pair(&st->rank_infos[m->from], me)
                      ? &nl_mesh_shm_ops
                      : &nl_mesh_net_ops;
    /* One line per mesh link this rank sends on, as for the channels. */
    XCOLL_INFO("mesh %d -> %d via %s", st->rank, m->to, m->send_ops->name);
  }
  atomic_init(&st->mesh_moved, 0);
  return XCOLL_SUCCESS;
}

/* The plugin's last ERROR sentence, for messages. */
static xcoll_status net_error(nl_state *st, xcoll_status s, const char *what,
                              int link, int peer) {
  char name[48];
  return xcoll_error(st->comm, s,
                     "nccl_like: %s on %s with rank %d failed (net plugin "
                     "%s): %s",
                     what, link_name(st, link, name, sizeof name), peer,
                     st->net->name, nl_net_last_error());
}

/* Listen on every link, then exchange the handles with one bootstrap
 * allgather (core/bootstrap.h, NCCL's bootstrapAllGather): every rank
 * contributes link_count x XCOLL_NET_HANDLE_MAXSIZE bytes; *all receives
 * every rank's blob (free it), of which this rank connects link i to
 * link_to(i)'s i-th handle. */
static xcoll_status exchange_handles(nl_state *st, uint8_t **all_out) {
  xcoll_comm *comm = st->comm;
  size_t blob_bytes = (size_t)link_count(st) * XCOLL_NET_HANDLE_MAXSIZE;
  uint8_t *all = calloc((size_t)st->world_size + 1, blob_bytes);
  *all_out = all;
  if (!all)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for %d ranks' net handles",
                       st->world_size);
  uint8_t *mine = all + (size_t)st->world_size * blob_bytes;
  xcoll_status s = XCOLL_SUCCESS;
  for (int i = 0; i < link_count(st) && s == XCOLL_SUCCESS; i++) {
    if (!link_receives(st, i))
      continue; /* its handle stays zeros: nobody connects to it */
    s = st->net->listen(st->net_device, &st->net_config,
                        mine + (size_t)i * XCOLL_NET_HANDLE_MAXSIZE,
                        &link_at(st, i)->listen_comm);
    if (s != XCOLL_SUCCESS)
      s = net_error(st, s, "listen", i, link_from(st, i));
  }
  /* The blob's size depends on the channel count and the Bruck choice,
   * which every rank agreed on before (nccl_like.c: agree_channels). */
  if (s == XCOLL_SUCCESS)
    s = xcoll_bootstrap_allgather(comm, "nl_handles", mine, blob_bytes, all);
  return s;
}

/* Connect link i to link_to(i) and accept from link_from(i) on every
 * link, retrying the non-blocking calls until all are done or
 * st->timeout_s. */
static xcoll_status connect_links(nl_state *st, const uint8_t *all) {
  size_t blob_bytes = (size_t)link_count(st) * XCOLL_NET_HANDLE_MAXSIZE;
  double deadline = nl_now() + st->timeout_s;
  for (;;) {
    int pending = 0;
    for (int i = 0; i < link_count(st); i++) {
      nl_ring_link *link = link_at(st, i);
      int to = link_to(st, i), from = link_from(st, i);
      if (!link->send_comm && link_sends(st, i)) {
        xcoll_status s =
            st->net->connect(st->net_device, &st->net_config,
                             all + (size_t)to * blob_bytes +
                                 (size_t)i * XCOLL_NET_HANDLE_MAXSIZE,
                             to, &link->send_comm);
        if (s != XCOLL_SUCCESS)
          return net_error(st, s, "connect", i, to);
        pending += link->send_comm == NULL;
      }
      if (!link->recv_comm && link_receives(st, i)) {
        xcoll_status s =
            st->net->accept(link->listen_comm, from, &link->recv_comm);
        if (s != XCOLL_SUCCESS)
          return net_error(st, s, "accept", i, from);
        pending += link->recv_comm == NULL;
      }
    }
    if (!pending)
      return XCOLL_SUCCESS;
    if (nl_now() > deadline) {
      for (int i = 0; i < link_count(st); i++) {
        char name[48];
        link_name(st, i, name, sizeof name);
        int ring = i <= st->nchannels;
        if (!link_at(st, i)->send_comm && link_sends(st, i))
          return xcoll_error(st->comm, XCOLL_ERR_TIMEOUT,
                             "nccl_like: rank %d could not connect %s to "
                             "rank %d%s within %.1f s (XCOLL_TIMEOUT_S)",
                             st->rank, name, link_to(st, i),
                             ring ? " (next in the ring)" : "", st->timeout_s);
        if (!link_at(st, i)->recv_comm && link_receives(st, i))
          return xcoll_error(st->comm, XCOLL_ERR_TIMEOUT,
                             "nccl_like: rank %d: rank %d%s did not connect "
                             "%s within %.1f s (XCOLL_TIMEOUT_S)",
                             st->rank, link_from(st, i),
                             ring ? " (previous in the ring)" : "", name,
                             st->timeout_s);
      }
    }
    /* Ranks start at different times: do not spin a core meanwhile. */
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

static xcoll_status register_buffers(nl_state *st) {
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    xcoll_status s = XCOLL_SUCCESS;
    if (link_sends(st, c))
      s = st->net->reg_mr(ch->link.send_comm, NULL, ch->send_buff,
                          st->buffsize, XCOLL_NET_PTR_HOST,
                          &ch->proxy_send.mhandle);
    if (s != XCOLL_SUCCESS)
      return net_error(st, s, "reg_mr of the send FIFO", c, st->next);
    if (link_receives(st, c))
      s = st->net->reg_mr(NULL, ch->link.recv_comm, ch->recv_buff,
                          st->buffsize, XCOLL_NET_PTR_HOST,
                          &ch->proxy_recv.mhandle);
    if (s != XCOLL_SUCCESS)
      return net_error(st, s, "reg_mr of the receive FIFO", c, st->prev);
  }
  nl_fp_link *fp = &st->fp;
  xcoll_status s =
      st->net->reg_mr(fp->link.send_comm, NULL, fp->out, sizeof fp->out,
                      XCOLL_NET_PTR_HOST, &fp->send_mhandle);
  if (s != XCOLL_SUCCESS)
    return net_error(st, s, "reg_mr of the fingerprints", st->nchannels,
                     st->next);
  s = st->net->reg_mr(NULL, fp->link.recv_comm, fp->in, sizeof fp->in,
                      XCOLL_NET_PTR_HOST, &fp->recv_mhandle);
  if (s != XCOLL_SUCCESS)
    return net_error(st, s, "reg_mr of the fingerprints", st->nchannels,
                     st->prev);
  return XCOLL_SUCCESS;
}

/* GPU ranks that share one GPU without MPS time-slice it: each waits for
 * a slice before its kernel runs, so every step of a ring costs about a
 * slice (2.3 ms an allreduce at 2 ranks on an H100; scripts/gpu-check.sh).
 * The lowest such rank of a GPU says so once, with what to do. */
static void warn_shared_gpu(const nl_state *st) {
  const nl_rank_info *me = &st->rank_infos[st->rank];
  if (me->cuda_device < 0 || me->gpu_mps != NL_GPU_MPS_OFF ||
      !nl_gpu_uuid_known(me))
    return;
  int sharing = 0, lowest = st->rank;
  for (int r = 0; r < st->world_size; r++) {
    const nl_rank_info *o = &st->rank_infos[r];
    if (r == st->rank || o->cuda_device < 0 || !nl_same_host(me, o) ||
        memcmp(o->gpu_uuid, me->gpu_uuid, sizeof me->gpu_uuid) != 0)
      continue;
    sharing++;
    if (r < lowest)
      lowest = r;
  }
  if (sharing > 0 && lowest == st->rank)
    XCOLL_WARN("nccl_like: %d GPU ranks share one GPU (rank %d's) without "
               "MPS: their contexts time-slice it, so each step of a "
               "collective waits for a time slice (milliseconds a call); "
               "start the MPS daemon (nvidia-cuda-mps-control -d) before "
               "the job to run their kernels side by side",
               sharing + 1, st->rank);
}

/* Every rank's info (transport/transport.h) in one bootstrap allgather,
 * after each transport's setup has added what it publishes; then each
 * channel's two directions take the first transport that accepts the pair
 * (NCCL's selectTransport), the same choice on both ends. A transport no
 * direction chose lets go of what its setup took. */
static xcoll_status pick_transports(nl_state *st) {
  nl_rank_info mine;
  xcoll_status s = nl_rank_info_fill(st, &mine);
  for (int t = 0; t < NL_TRANSPORTS && s == XCOLL_SUCCESS; t++)
    if (nl_transports[t]->setup != NULL)
      s = nl_transports[t]->setup(st, &mine);
  if (s != XCOLL_SUCCESS)
    return s;
  st->rank_infos = calloc((size_t)st->world_size, sizeof *st->rank_infos);
  if (!st->rank_infos)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for %d ranks' infos",
                       st->world_size);
  s = xcoll_bootstrap_allgather(st->comm, "nl_rank_info", &mine, sizeof mine,
                                st->rank_infos);
  if (s != XCOLL_SUCCESS)
    return s;
  st->ring_checked = 1;
  for (int r = 0; r < st->world_size; r++)
    st->ring_checked &= host_shm_link(st, r, (r + 1) % st->world_size);
  st->mesh_checked = st->mesh_on;
  for (int a = 0; a < st->world_size && st->mesh_checked; a++)
    for (int b = a + 1; b < st->world_size; b++)
      st->mesh_checked &=
          nl_shm_mesh_pair(&st->rank_infos[a], &st->rank_infos[b]);
  warn_shared_gpu(st);
  const nl_rank_info *me = &st->rank_infos[st->rank];
  const nl_transport *send =
      nl_transport_pick(me, &st->rank_infos[st->next]);
  const nl_transport *recv =
      nl_transport_pick(&st->rank_infos[st->prev], me);
  for (int c = 0; c < st->nchannels; c++) {
    st->channels[c].send_transport = send;
    st->channels[c].recv_transport = recv;
    /* One line per connection this rank sends on, as NCCL prints. */
    XCOLL_INFO("channel %02d : %d -> %d via %s", c, st->rank, st->next,
               send->name);
  }
  /* (A transport whose free is a chosen one's shares its state: p2p runs
   * on shm's listener. So does the mesh when a peer shares this host.) */
  int mesh_shm = 0;
  for (int r = 0; r < st->world_size && st->mesh_on; r++)
    mesh_shm |= r != st->rank && nl_shm_mesh_pair(me, &st->rank_infos[r]);
  for (int t = 0; t < NL_TRANSPORTS; t++)
    if (nl_transports[t]->free != send->free &&
        nl_transports[t]->free != recv->free &&
        nl_transports[t]->free != NULL &&
        !(mesh_shm && nl_transports[t]->free == nl_transport_shm.free))
      nl_transports[t]->free(st);
  return XCOLL_SUCCESS;
}

/* The transports' own connects (shm's segment exchange), then the send
 * side of every channel is bound where its transport put it. */
static xcoll_status connect_transports(nl_state *st) {
  const nl_transport *send = st->channels[0].send_transport;
  const nl_transport *recv = st->channels[0].recv_transport;
  xcoll_status s = XCOLL_SUCCESS;
  if (send->connect != NULL)
    s = send->connect(st);
  if (s == XCOLL_SUCCESS && recv != send && recv->connect != NULL)
    s = recv->connect(st);
  return s;
}

static void bind_sends(nl_state *st) {
  for (int c = 0; c < st->nchannels; c++) {
    nl_channel *ch = &st->channels[c];
    conn_bind(&ch->send, ch->send_mem, ch->send_buff, st->step_bytes);
    conn_checked(&ch->send, ch->send_mem,
                 host_shm_link(st, st->rank, st->next));
  }
}

xcoll_status nl_channels_setup(nl_state *st) {
  xcoll_status s = XCOLL_SUCCESS;
  if (st->world_size == 1) {
    for (int c = 0; c < st->nchannels; c++)
      st->channels[c].send_transport = st->channels[c].recv_transport =
          &nl_transport_net;
  } else {
    s = pick_transports(st);
  }
  if (s == XCOLL_SUCCESS)
    s = alloc_fifos(st);
  if (s != XCOLL_SUCCESS)
    return s;
  if (st->world_size == 1) {
    bind_sends(st);
    return s;
  }

  st->net_device = 0;
  st->net_config.comm_id = st->comm->comm_id;
  st->net_config.rank = st->rank;
  st->net_config.timeout_s = st->timeout_s;
  st->net_config.secret = NULL;
  st->net_config.secret_bytes = 0;

  s = alloc_mesh(st);
  if (s != XCOLL_SUCCESS)
    return s;
  uint8_t *all = NULL;
  s = exchange_handles(st, &all);
  if (s == XCOLL_SUCCESS)
    s = connect_links(st, all);
  free(all);
  if (s == XCOLL_SUCCESS)
    s = register_buffers(st);
  if (s == XCOLL_SUCCESS)
    s = connect_transports(st);
  if (s == XCOLL_SUCCESS && st->mesh_on)
    s = nl_shm_mesh_connect(st);
  if (s == XCOLL_SUCCESS)
    bind_sends(st);
  /* Listening is over: each listen comm accepted its one connection. */
  for (int i = 0; i < link_count(st); i++) {
    nl_ring_link *link = link_at(st, i);
    if (link->listen_comm) {
      st->net->close_listen(link->listen_comm);
      link->listen_comm = NULL;
    }
  }
  return s;
}

static void link_close(nl_state *st, nl_ring_link *link) {
  if (st->net) {
    if (link->send_comm)
      st->net->close_send(link->send_comm);
    if (link->recv_comm)
      st->net->close_recv(link->recv_comm);
    if (link->listen_comm)
      st->net->close_listen(link->listen_comm);
  }
  link->send_comm = NULL;
  link->recv_comm = NULL;
  link->listen_comm = NULL;
}

void nl_channels_free(nl_state *st) {
  /* First the transports' memory (shm unmaps and clears its pointers). */
  for (int t = 0; t < NL_TRANSPORTS; t++)
    if (nl_transports[t]->free != NULL)
      nl_transports[t]->free(st);
  free(st->rank_infos);
  st->rank_infos = NULL;
  for (int c = 0; c < NL_MAX_CHANNELS; c++) {
    nl_channel *ch = &st->channels[c];
    if (st->net) {
      if (ch->proxy_send.mhandle)
        (void)st->net->dereg_mr(ch->link.send_comm, NULL,
                                ch->proxy_send.mhandle);
      if (ch->proxy_recv.mhandle)
        (void)st->net->dereg_mr(NULL, ch->link.recv_comm,
                                ch->proxy_recv.mhandle);
      ch->proxy_send.mhandle = ch->proxy_recv.mhandle = NULL;
    }
    link_close(st, &ch->link);
    if (st->gpu == NULL) { /* else the mapped block holds them */
      free(ch->send_mem);
      free(ch->recv_mem);
      free(ch->send_buff);
      free(ch->recv_buff);
      free(ch->scratch);
    }
    ch->scratch = NULL;
    ch->send_mem = ch->recv_mem = NULL;
    ch->send_buff = ch->recv_buff = NULL;
  }
  nl_fp_link *fp = &st->fp;
  if (st->net) {
    if (fp->send_mhandle)
      (void)st->net->dereg_mr(fp->link.send_comm, NULL, fp->send_mhandle);
    if (fp->recv_mhandle)
      (void)st->net->dereg_mr(NULL, fp->link.recv_comm, fp->recv_mhandle);
  }
  fp->send_mhandle = fp->recv_mhandle = NULL;
  /* Closing cancels and releases the requests still posted (net.h). */
  link_close(st, &fp->link);
  fp->send_request = NULL;
  fp->recv_request = NULL;
  for (int k = 0; k < st->mesh_links; k++)
    link_close(st, &st->mesh[k].link);
  st->mesh_links = 0;
  free(st->mesh);
  free(st->mesh_of);
  st->mesh = NULL;
  st->mesh_of = NULL;
  if (st->gpu == NULL) { /* a GPU rank never runs Bruck */
    free(st->mesh_out);
    free(st->mesh_in);
    free(st->pairwise_stage);
  }
  st->mesh_out = st->mesh_in = NULL;
  st->pairwise_stage = NULL;
}
