/* nccl_like.c - the nccl_like backend's entry points (core/backend.h):
 * options from the environment, comm_init (channels, net connections,
 * worker threads, proxy thread, failure watcher), comm_destroy, comm_abort;
 * the p2p interface core's host algorithms run over is p2p.c's.
 * The failure path every thread shares is failure.c's. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "cuda.h"
#include "env.h"
#include "host.h"
#include "params.h"
#include "error.h"
#include "log.h"
#include "nccl_like.h"
#include "store.h"
#include "trace.h"

const xcoll_net_v1 *nl_net_override = NULL;

/* ---- options ---- */

/* The channels a rank proposes when XCOLL_NCHANNELS is unset.
 *
 * A host rank: the CPUs of its host shared among the host's ranks (the
 * host census, core/host.h), no more than the CPUs this rank may run on,
 * between 1 and the table's default. A host channel is a thread that
 * spins while its ring step waits: with fewer cores than busy threads, a
 * second channel takes the core the neighbour rank needs to forward the
 * next slot (measured on
 * 2 cores, P=2 and P=4, 1-16 MiB: docs/nccl_like.md, "Channels,
 * connections, FIFOs").
 *
 * A GPU rank: its channels are CUDA blocks, one per channel, and a block
 * runs on one SM, so two channels leave most of a large GPU idle. It
 * proposes one channel per NL_SMS_PER_CHANNEL SMs of its device, between
 * the table's default and NL_GPU_AUTO_CHANNELS (16 on a 132-SM H100); ranks
 * that share the GPU share its SMs too. Small calls still run on fewer
 * channels (NL_MIN_BYTES_PER_CHANNEL, engine.c). NCCL bounds its channel
 * count by hardware as well (SMs, links, NICs: ncclTopoCompute in
 * src/graph/search.cc) and runs one block per channel. */
static int channels_for_device(const nl_state *st, int fallback) {
  int sms = 0;
  if (xcoll_cu.device_get_attribute == NULL ||
      xcoll_cu.device_get_attribute(
          &sms, XCOLL_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
          st->comm->cuda->device) != 0 ||
      sms < 1)
    return fallback; /* the driver does not say: the table's default */
  int n = sms / NL_SMS_PER_CHANNEL;
  if (n < fallback)
    n = fallback;
  return n > NL_GPU_AUTO_CHANNELS ? NL_GPU_AUTO_CHANNELS : n;
}

static int channels_auto(const nl_state *st, int fallback) {
  if (st->comm->cuda != NULL)
    return channels_for_device(st, fallback);
  /* The host's CPUs shared out among its ranks (core/host.h), and no more
   * than this rank may run on. */
  const xcoll_comm *comm = st->comm;
  int per_rank =
      comm->host_ranks > 0 ? comm->host_cpus / comm->host_ranks : 1;
  if (per_rank > comm->own_cpus)
    per_rank = comm->own_cpus;
  if (per_rank < 1)
    per_rank = 1;
  return per_rank < fallback ? per_rank : fallback;
}

static xcoll_status read_options(nl_state *st) {
  xcoll_comm *comm = st->comm;
  long nchannels = 0;
  /* Defaults and ranges: core/params.c's table (xcoll-info prints it). */
  xcoll_status s = xcoll_param_int("XCOLL_NCHANNELS", &nchannels);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  if (nchannels > NL_MAX_CHANNELS)
    return xcoll_error(comm, XCOLL_ERR_INTERNAL,
                       "XCOLL_NCHANNELS's range in core/params.c exceeds "
                       "NL_MAX_CHANNELS (%d)",
                       NL_MAX_CHANNELS);
  st->nchannels_auto = xcoll_env_str("XCOLL_NCHANNELS") == NULL;
  st->nchannels = st->nchannels_auto
                      ? channels_auto(st, (int)nchannels)
                      : (int)nchannels;

  size_t buffsize = 0;
  s = xcoll_param_size("XCOLL_BUFFSIZE", 0, &buffsize);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  /* A slot holds whole 16-byte LL lines and whole elements of any dtype. */
  if (buffsize < NL_MIN_BUFFSIZE || buffsize > NL_MAX_BUFFSIZE ||
      buffsize % (XCOLL_STEPS * 16) != 0)
    return xcoll_error(comm, XCOLL_ERR_ENV,
                       "XCOLL_BUFFSIZE=%s: the bytes per connection FIFO must "
                       "be a multiple of %d between %zu and %zu (e.g. 4M, the "
                       "default)",
                       xcoll_env_str("XCOLL_BUFFSIZE"), XCOLL_STEPS * 16,
                       NL_MIN_BUFFSIZE, NL_MAX_BUFFSIZE);
  st->buffsize = buffsize;
  st->step_bytes = buffsize / XCOLL_STEPS;

  /* The table's choices are "simple", "ll", "auto", in nl_proto_choice's
   * order. */
  int proto = -1;
  s = xcoll_param_choice("XCOLL_PROTO", &proto);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  st->proto = proto < 0 ? NL_PROTO_AUTO : (nl_proto_choice)proto;

  /* XCOLL_WAIT_RUNS=1 (default): a thread blocked in wait runs its op's
   * items no worker has taken yet (engine.c: nl_wait); 0: only workers run
   * kernels (for comparison, and to test the workers' path alone). */
  long wait_runs = 1;
  s = xcoll_param_int("XCOLL_WAIT_RUNS", &wait_runs);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  st->inline_wait = (int)wait_runs;

  /* XCOLL_BRUCK=1 (default): this rank proposes the Bruck collectives for
   * small calls (bruck.c; nl_bruck_fits says which at which world size);
   * every rank must agree (agree_channels), and a GPU rank never proposes
   * it (its kernels speak the ring only). */
  long bruck = 1;
  s = xcoll_param_int("XCOLL_BRUCK", &bruck);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  st->bruck = bruck && comm->cuda == NULL &&
              st->world_size >= 2 &&
              st->world_size <= NL_BRUCK_MAX_RANKS;

  /* Spin before sleeping only when each rank of the host has a CPU
   * (NL_SPIN_US): the union of the host's ranks' affinity masks has as
   * many CPUs as ranks (core/host.h). */
  int own_core = comm->host_cpus >= comm->host_ranks;
  st->spin_s = comm->cuda == NULL && own_core ? NL_SPIN_US * 1e-6 : 0.0;
  st->busy_polls = own_core ? XC_SPINS_BEFORE_YIELD : 0;

  /* XCOLL_PAIRWISE: this rank proposes the pairwise allreduce (pairwise.c)
   * when set to 1, or (auto) when the ranks of its host outnumber the
   * cores: there a ring step waits for the one rank that holds its data to
   * be scheduled, 2(P-1) times per chunk, while a pairwise message waits on
   * its sender only (measured in docs/nccl_like.md). Every rank must agree
   * (agree_channels); a GPU rank never proposes it. */
  int pairwise = -1;
  s = xcoll_param_choice("XCOLL_PAIRWISE", &pairwise);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  if (pairwise < 0 || pairwise == 2) /* unset or "auto" */
    pairwise = !own_core;
  st->pairwise = pairwise && comm->cuda == NULL && st->world_size >= 2 &&
                 st->world_size <= NL_PAIRWISE_MAX_RANKS;

  /* XCOLL_RABENSEIFNER=1 (default): over the pairwise allreduce's links, a
   * power-of-two world runs Rabenseifner's allreduce (rabenseifner.c);
   * every rank must agree (agree_channels). */
  long rabenseifner = 1;
  s = xcoll_param_int("XCOLL_RABENSEIFNER", &rabenseifner);
  if (s != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, s);
  st->rabenseifner = rabenseifner != 0;
  return XCOLL_SUCCESS;
}

static const char *proto_name(nl_proto_choice proto) {
  return proto == NL_PROTO_SIMPLE ? "simple" : proto == NL_PROTO_LL ? "ll"
                                                                    : "auto";
}

/* Every rank of a ring must run the same channels (a channel is a ring of
 * its own connections): the ranks exchange their proposals (XCOLL_NCHANNELS,
 * or channels_auto) with one bootstrap allgather and all take the
 * smallest, as NCCL's init takes the minimum of every rank's channel count
 * after its allgather of topology graphs (src/init.cc). A rank that set
 * XCOLL_NCHANNELS and got fewer says so at INFO. */
static xcoll_status agree_channels(nl_state *st) {
  if (st->world_size == 1)
    return XCOLL_SUCCESS;
  /* Byte 3: bit 0 pairwise, bit 1 Rabenseifner. Byte 4: XCOLL_PROTO,
   * which must be the same everywhere (each rank chooses an op's protocol
   * and algorithm from it alone). */
  uint8_t mine[5] = {(uint8_t)st->nchannels, (uint8_t)st->nchannels_auto,
                     (uint8_t)st->bruck,
                     (uint8_t)(st->pairwise | st->rabenseifner << 1),
                     (uint8_t)st->proto};
  uint8_t *all = malloc((size_t)st->world_size * sizeof mine);
  if (!all)
    return xcoll_error(st->comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for %d ranks' channel "
                       "counts",
                       st->world_size);
  xcoll_status s = xcoll_bootstrap_allgather(st->comm, "nl_nchannels", mine,
                                             sizeof mine, all);
  if (s == XCOLL_SUCCESS) {
    int agreed = st->nchannels, from = st->rank;
    int bruck = st->bruck, pairwise = st->pairwise;
    int rabenseifner = st->rabenseifner;
    for (int r = 0; r < st->world_size; r++) {
      int theirs = all[5 * r];
      bruck = bruck && all[5 * r + 2];
      pairwise = pairwise && (all[5 * r + 3] & 1);
      rabenseifner = rabenseifner && (all[5 * r + 3] & 2);
      if (all[5 * r + 4] != (uint8_t)st->proto) {
        s = xcoll_error(
            st->comm, XCOLL_ERR_ENV,
            "nccl_like: XCOLL_PROTO is '%s' on rank %d but '%s' on rank %d: "
            "every rank chooses each collective's protocol by itself, so "
            "set it the same on every rank (or unset it everywhere)",
            proto_name(st->proto), st->rank,
            proto_name((nl_proto_choice)all[5 * r + 4]), r);
        break;
      }
      if (theirs < 1 || theirs > NL_MAX_CHANNELS) {
        s = xcoll_error(st->comm, XCOLL_ERR_PROTOCOL,
                        "nccl_like: rank %d proposed %d channels at init "
                        "(1 to %d expected): another xcoll version?",
                        r, theirs, NL_MAX_CHANNELS);
        break;
      }
      if (theirs < agreed)
        agreed = theirs, from = r;
    }
    if (s == XCOLL_SUCCESS && agreed < st->nchannels)
      XCOLL_INFO("nccl_like: rank %d runs %d channel(s), not its %d (%s): "
                 "rank %d proposed %d (%s), and every rank takes the "
                 "smallest",
                 st->rank, agreed, st->nchannels,
                 st->nchannels_auto ? "from its hardware" : "XCOLL_NCHANNELS",
                 from, agreed,
                 all[5 * from + 1] ? "from its hardware" : "XCOLL_NCHANNELS");
    st->nchannels = agreed;
    /* Bruck needs every rank's mesh: any rank that does not propose it
     * (XCOLL_BRUCK=0, a GPU rank) turns it off for all. */
    if (st->bruck && !bruck)
      XCOLL_INFO("nccl_like: rank %d: Bruck allreduce off: another rank "
                 "has XCOLL_BRUCK=0 or is a GPU rank",
                 st->rank);
    st->bruck = bruck;
    /* Likewise pairwise, which needs a link to every rank. */
    if (st->pairwise && !pairwise)
      XCOLL_INFO("nccl_like: rank %d: pairwise allreduce off: another rank "
                 "has XCOLL_PAIRWISE=0, has a core per rank (auto) or is a "
                 "GPU rank",
                 st->rank);
    st->pairwise = pairwise;
    if (st->pairwise && st->rabenseifner && !rabenseifner)
      XCOLL_INFO("nccl_like: rank %d: Rabenseifner allreduce off: another "
                 "rank has XCOLL_RABENSEIFNER=0",
                 st->rank);
    st->rabenseifner = rabenseifner;
    /* The mesh (a link to every rank) is driven by host threads on every
     * rank, GPU ranks included: p2p.c's point-to-point messages run on it
     * everywhere; Bruck and pairwise, whose kernels speak the ring only on
     * a GPU, were turned off above when any rank is a GPU rank. */
    st->mesh_on = 1;
  } else {
    free(all);
    return s; /* the exchange itself failed: nothing was judged */
  }
  if (s != XCOLL_SUCCESS) {
    /* Every rank holds the same records, so every rank found the mismatch.
     * Before any fails, all meet once more: rank 0, which hosts the store,
     * would otherwise exit while a slower rank still reads its record, and
     * that rank would fail with "the store closed" instead of this. */
    char message[XCOLL_ERROR_BYTES];
    snprintf(message, sizeof message, "%s", xcoll_comm_last_error(st->comm));
    uint8_t one = 1; /* all has room for world_size bytes */
    (void)xcoll_bootstrap_allgather(st->comm, "nl_nchannels_judged", &one, 1,
                                    all);
    s = xcoll_error_quiet(st->comm, s, "%s", message);
  }
  free(all);
  return s;
}

/* ---- init, destroy, abort ---- */

static void stop_threads(nl_state *st) {
  pthread_mutex_lock(&st->lock);
  st->stopping = 1;
  atomic_store_explicit(st->abort, 1, memory_order_release);
  pthread_cond_broadcast(&st->proxy_cond);
  pthread_cond_broadcast(&st->done_cond);
  for (int c = 0; c < st->nchannels; c++)
    pthread_cond_broadcast(&st->channels[c].queue_cond);
  pthread_mutex_unlock(&st->lock);
  nl_workers_join(st);
  nl_proxy_join(st);
  nl_watcher_join(st);
}

static void free_state(nl_state *st) {
  if (!st)
    return;
  stop_threads(st);
  nl_p2p_close(st);
  nl_channels_free(st);
  nl_gpu_close(st);
  while (st->op_cache != NULL) {
    nl_op *op = st->op_cache;
    st->op_cache = op->next_free;
    free(op);
  }
  for (int c = 0; c < NL_MAX_CHANNELS; c++) {
    pthread_cond_destroy(&st->channels[c].queue_cond);
    pthread_mutex_destroy(&st->channels[c].progress_lock);
  }
  pthread_mutex_destroy(&st->fp.lock);
  pthread_cond_destroy(&st->done_cond);
  pthread_cond_destroy(&st->proxy_cond);
  pthread_mutex_destroy(&st->lock);
  xcoll_blame_fini(&st->blame);
  free(st);
}

static void log_choices(nl_state *st, const char *net_why) {
  if (xcoll_log_level_get() < XCOLL_LOG_INFO)
    return;
  char ring[256] = "";
  size_t used = 0;
  for (int r = 0; r < st->world_size && used + 16 < sizeof ring; r++)
    used += (size_t)snprintf(ring + used, sizeof ring - used, "%s%d",
                             r ? " -> " : "", r);
  if (st->world_size > 1 && used + 16 < sizeof ring)
    snprintf(ring + used, sizeof ring - used, " -> 0");
  xcoll_net_properties props;
  memset(&props, 0, sizeof props);
  if (st->net)
    (void)st->net->get_properties(st->net_device, &props);
  XCOLL_INFO("nccl_like: comm %llu rank %d/%d: ring %s (rank order); "
             "prev %d next %d",
             (unsigned long long)st->comm->comm_id, st->rank, st->world_size,
             ring, st->prev, st->next);
  XCOLL_INFO("nccl_like: %d channel(s) (%s), protocol %s "
             "(XCOLL_PROTO%s), FIFO %zu B per connection = %d slots of %zu B "
             "(XCOLL_BUFFSIZE)",
             st->nchannels,
             st->nchannels_auto
                 ? "XCOLL_NCHANNELS unset: the smallest proposal; a host "
                   "rank's is its host's CPUs / ranks, a GPU rank's its "
                   "SMs / 8"
                 : "XCOLL_NCHANNELS, or a smaller proposal of another rank",
             proto_name(st->proto),
             st->proto == NL_PROTO_AUTO ? ": LL up to 4 KiB, SIMPLE above" : "",
             st->buffsize, XCOLL_STEPS, st->step_bytes);
  XCOLL_INFO("nccl_like: net plugin %s (%s), device %d '%s' (%d Mbps), "
             "%d receive(s) posted ahead per connection; "
             "engine: %s%s",
             st->net ? st->net->name : "none", net_why, st->net_device,
             props.name, props.speed_mbps, st->recvs_ahead,
             st->gpu != NULL ? "CUDA (a kernel per collective on the "
                               "caller's stream, proxy thread"
                             : "host (worker thread per channel, proxy thread",
             st->gpu == NULL && st->inline_wait
                 ? "; wait runs untaken items, XCOLL_WAIT_RUNS=1)"
                 : ")");
}

/* Names the channel and proxy tracks of XCOLL_TRACE (trace.h). */
static void name_trace_tracks(const nl_state *st) {
  unsigned long long id = (unsigned long long)st->comm->comm_id;
  for (int c = 0; c < st->nchannels; c++) {
    char label[48];
    snprintf(label, sizeof label, "comm %llu channel %d", id, c);
    xcoll_trace_name_track(st->trace_base + (unsigned)c, label);
    xcoll_trace_name_track(st->trace_base + 100u + (unsigned)c, label);
    xcoll_trace_name_track(st->trace_base + 200u + (unsigned)c, label);
  }
}

static xcoll_status nl_comm_init(xcoll_comm *comm, void **state) {
  *state = NULL;
  nl_state *st = calloc(1, sizeof *st);
  if (!st)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "nccl_like: out of memory for the backend state");
  st->comm = comm;
  st->rank = comm->rank;
  st->world_size = comm->world_size;
  st->prev = (comm->rank + comm->world_size - 1) % comm->world_size;
  st->next = (comm->rank + 1) % comm->world_size;
  st->timeout_s = comm->timeout_s > 0 ? comm->timeout_s : 300.0;
  st->trace_base = 1000000u + 1000u * comm->comm_id;
  pthread_mutex_init(&st->lock, NULL);
  xcoll_blame_init(&st->blame, comm);
  pthread_cond_init(&st->done_cond, NULL);
  pthread_cond_init(&st->proxy_cond, NULL);
  for (int c = 0; c < NL_MAX_CHANNELS; c++) {
    pthread_cond_init(&st->channels[c].queue_cond, NULL);
    pthread_mutex_init(&st->channels[c].progress_lock, NULL);
  }
  pthread_mutex_init(&st->fp.lock, NULL);
  atomic_init(&st->abort_flag, 0);
  st->abort = &st->abort_flag;
  atomic_init(&st->failed, 0);
  atomic_init(&st->store_lost, 0);
  atomic_init(&st->fp.started, 0);
  atomic_init(&st->fp.sent, 0);
  atomic_init(&st->fp.judged, 0);
  atomic_init(&st->fp.broken, 0);
  atomic_init(&st->fp.room_waiters, 0);
  atomic_init(&st->fp.urgent, 0);

  /* The host census first (core/host.h): the channels a host rank
   * proposes, whether it spins and whether it proposes the pairwise
   * allreduce follow from it. Like agree_channels, one exchange before
   * any listener opens. */
  xcoll_status s = xcoll_host_census(comm);
  if (s == XCOLL_SUCCESS)
    s = read_options(st);
  if (s == XCOLL_SUCCESS)
    s = agree_channels(st);
  /* A GPU rank: the kernels run on the device, the FIFOs in mapped memory. */
  if (s == XCOLL_SUCCESS && comm->cuda != NULL)
    s = nl_gpu_open(st, comm->cuda);
  if (s == XCOLL_SUCCESS && xcoll_trace_enabled())
    name_trace_tracks(st);
  char net_why[256] = "a world of one rank needs no network";
  if (s == XCOLL_SUCCESS && st->world_size > 1 && nl_net_override) {
    st->net = nl_net_override;
    snprintf(net_why, sizeof net_why, "set by a test");
  } else if (s == XCOLL_SUCCESS && st->world_size > 1) {
    s = xcoll_net_select(&st->net, net_why, sizeof net_why);
    if (s != XCOLL_SUCCESS)
      s = xcoll_error_adopt(comm, s);
  }
  st->recvs_ahead = nl_recvs_ahead(st->net, st->net_device);
  /* Bruck and pairwise send from and receive into unregistered host
   * memory: only plugins that take it (socket, ucx; ibverbs needs reg_mr).
   * p2p.c copies through registered slots on the others. The plugin is the
   * same on every rank, so is this choice. */
  st->net_takes_host = st->net != NULL &&
                       (strcmp(st->net->name, "socket") == 0 ||
                        strcmp(st->net->name, "ucx") == 0);
  if (!st->net_takes_host)
    st->bruck = st->pairwise = 0;
  if (st->world_size < 2)
    st->mesh_on = 0;
  if (s == XCOLL_SUCCESS && st->world_size > 1)
    XCOLL_INFO("nccl_like: Bruck collectives %s (XCOLL_BRUCK; up to %zu B "
               "of input per rank over LL, %d to %d host ranks (the "
               "rooted ones from 2), net socket or ucx)",
               st->bruck ? "on" : "off", NL_GATHER_MAX_BYTES,
               NL_BRUCK_MIN_RANKS, NL_BRUCK_MAX_RANKS);
  if (s == XCOLL_SUCCESS && st->world_size > 1)
    XCOLL_INFO("nccl_like: pairwise allreduce %s (XCOLL_PAIRWISE; SIMPLE "
               "allreduces, 2 to %d host ranks, net socket or ucx)",
               st->pairwise ? "on" : "off", NL_PAIRWISE_MAX_RANKS);
  if (s == XCOLL_SUCCESS && st->pairwise)
    XCOLL_INFO("nccl_like: Rabenseifner allreduce %s (XCOLL_RABENSEIFNER; "
               "in place of the pairwise allreduce when the world size is a "
               "power of two)",
               nl_rabenseifner_on(st) ? "on" : "off");
  if (s == XCOLL_SUCCESS)
    s = nl_channels_setup(st);
  if (s == XCOLL_SUCCESS && st->gpu != NULL)
    nl_gpu_bind_conns(st);
  if (s == XCOLL_SUCCESS)
    s = nl_p2p_open(st);
  if (s == XCOLL_SUCCESS && st->gpu == NULL)
    s = nl_workers_start(st);
  if (s == XCOLL_SUCCESS && st->world_size > 1)
    s = nl_proxy_start(st);
  /* The watcher and the failure notices need connections of their own to
   * xcoll's store; a caller's store (xcoll_comm_init_kv) offers none, and
   * failures are then seen on the ring's connections only. */
  if (s == XCOLL_SUCCESS && st->world_size > 1 &&
      !xcoll_store_is_kv(comm->store))
    s = nl_watcher_start(st);
  if (s != XCOLL_SUCCESS) {
    free_state(st);
    return s;
  }
  log_choices(st, net_why);
  *state = st;
  return XCOLL_SUCCESS;
}

/* At the destroy of a communicator that did not fail: a fingerprint the
 * previous rank sent for a call this rank never started means that rank
 * made a call this one did not (a desync nothing else reports when it was
 * this rank's last call): one WARN naming it, as tcp names a message no
 * call received. Looks at what arrived only (a few non-blocking passes of
 * the fingerprint step), so a healthy destroy costs nothing more. */
static void report_unstarted(nl_state *st) {
  enum { PASSES = 4 };
  xcoll_fingerprint theirs;
  uint64_t p2p_sent = 0;
  if (st->world_size == 1 || atomic_load(&st->failed))
    return;
  for (int pass = 0; pass < PASSES; pass++) {
    if (!nl_fp_peek(st, &theirs, &p2p_sent))
      continue;
    char call[XCOLL_FINGERPRINT_TEXT_BYTES];
    xcoll_fingerprint_describe(&theirs, call, sizeof call);
    XCOLL_WARN("nccl_like: rank %d destroys its communicator after rank %d "
               "(previous on the ring) started %s, its collective #%" PRIu64
               ", which this rank never called: the ranks called different "
               "collectives, or rank %d made more calls than this rank",
               st->rank, st->prev, call, theirs.seq, st->prev);
    return;
  }
}

static void nl_comm_destroy(xcoll_comm *comm, void *state) {
  (void)comm;
  nl_state *st = state;
  if (st) {
    report_unstarted(st);
    nl_proxy_drain(st);
  }
  free_state(st);
}

static void nl_comm_abort(xcoll_comm *comm, void *state) {
  nl_state *st = state;
  if (!st)
    return;
  nl_fail(st, XCOLL_ERR_ABORTED, -1,
          "nccl_like: xcoll_comm_abort was called on rank %d of communicator "
          "%llu",
          comm->rank, (unsigned long long)comm->comm_id);
}

static void nl_transport_names(const void *state, const char **send,
                               const char **recv) {
  const nl_state *st = state;
  if (st == NULL || st->world_size == 1)
    return; /* "none": no connection */
  *send = st->channels[0].send_transport->name;
  *recv = st->channels[0].recv_transport->name;
}

const xcoll_backend xcoll_backend_nccl_like = {
    .abi_version = XCOLL_BACKEND_ABI_VERSION,
    .name = "nccl_like",
    .description = "NCCL-like: ring kernels over slot FIFOs per channel, a "
                   "proxy thread and a net plugin (XCOLL_NET)",
    .comm_init = nl_comm_init,
    .comm_destroy = nl_comm_destroy,
    .comm_abort = nl_comm_abort,
    .p2p = &nl_p2p_ops,
    .coll = &nl_coll_ops,
    .default_chunk_bytes = 0,
    .device_engine = 1,
    .transport = nl_transport_names,
    .describe_op = nl_describe_op,
    .failed_status = nl_failed_status,
};
