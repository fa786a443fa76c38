/* ucx_backend.c - the "ucx" backend: core's p2p interface (core/p2p.h) over
 * UCP tagged messages, so that every host-driven algorithm in core/algorithms
 * runs on UCX unchanged. UCX picks the transport per peer (shared memory on
 * one host, tcp or rdma across hosts); see docs/ucx.md.
 *
 * This file makes and ends a communicator: the address exchange through
 * the store, connecting, goodbyes, destroy and abort, and the backend's
 * table. The p2p data path is ucx_p2p.c, failures and control messages
 * ucx_failure.c; ucx_backend.h holds what they share. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET /* log.h */
#include "ucx_backend.h"

/* Log, at INFO, what UCX chose for each peer: NCCL_DEBUG=INFO's "Channel
 * 00 : 0[0] -> 1[1] via P2P/IPC" in UCX's words. */
static void log_endpoints(ucx_state *state) {
  if (xcoll_log_level_get() < XCOLL_LOG_INFO)
    return;
  for (int peer = 0; peer < state->world_size; peer++) {
    if (peer == state->rank)
      continue;
    char *info = xcoll_ucx_endpoint_info(state->worker, peer);
    if (info == NULL)
      continue;
    /* ucp_ep_print_info writes a '#'-framed block; keep its lane lines. */
    char *save = NULL;
    for (char *line = strtok_r(info, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
      while (*line == '#' || *line == ' ')
        line++;
      /* The header and "peer: <no debug data>" say nothing useful. */
      if (*line != '\0' && strncmp(line, "UCP endpoint", 12) != 0 &&
          strncmp(line, "peer:", 5) != 0)
        XCOLL_INFO("ucx: rank %d -> rank %d: %s", state->rank, peer, line);
    }
    free(info);
  }
}

/* Tell every peer that this rank leaves cleanly, so that its exit is not
 * taken for a crash by a peer still finishing its last collective. The
 * sends are flushed by the endpoint close that follows. */
static void send_goodbyes(ucx_state *state) {
  static const char goodbye = 0;
  for (int peer = 0; peer < state->world_size; peer++) {
    if (peer == state->rank || state->peers[peer].departed)
      continue;
    ucp_tag_t tag = ((ucp_tag_t)state->rank << (SEQ_BITS + STEP_BITS)) |
                    ((ucp_tag_t)GOODBYE_SEQ << STEP_BITS) | GOODBYE_STEP;
    xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
    if (request == NULL)
      break;
    if (xcoll_ucx_isend(state->worker, peer, tag, &goodbye, 1, request) !=
        UCS_OK)
      xcoll_ucx_request_put(state->worker, request);
    else if (request->done)
      xcoll_ucx_request_put(state->worker, request);
    /* else: released with the worker; ep close flushes it. */
  }
}

/* Wait (up to CLOSE_FLUSH_S) for the goodbye of every peer still alive, so
 * that no peer's goodbye reaches a worker that no longer expects it (UCX
 * would warn about an unmatched message), and so that destroy is a soft
 * barrier: a rank leaves once its peers are done with it. */
static void await_goodbyes(ucx_state *state) {
  double deadline = now_s() + CLOSE_FLUSH_S;
  for (;;) {
    xcoll_ucx_progress(state->worker);
    double t = now_s();
    ucx_check_peers(state, t);
    int waiting = 0;
    for (int peer = 0; peer < state->world_size; peer++) {
      const peer_watch *watch = &state->peers[peer];
      if (peer != state->rank && peer != state->failed_peer &&
          watch->goodbye != NULL && !watch->goodbye->done)
        waiting++;
    }
    if (waiting == 0 || state->failed_peer >= 0 || t > deadline)
      return;
    sched_yield();
  }
}

static void free_state(ucx_state *state, int flush) {
  if (state->peers != NULL) {
    for (int peer = 0; peer < state->world_size; peer++) {
      if (state->peers[peer].pidfd >= 0)
        close(state->peers[peer].pidfd);
      if (state->worker != NULL) {
        peer_watch *watch = &state->peers[peer];
        xcoll_ucx_request_put(state->worker, watch->goodbye);
        xcoll_ucx_request_put(state->worker, watch->fp_receive);
        xcoll_ucx_request_put(state->worker, watch->abort_receive);
        xcoll_ucx_request_put(state->worker, watch->ping_receive);
        xcoll_ucx_request_put(state->worker, watch->pong_receive);
        for (int slot = 0; slot < FP_SLOTS; slot++)
          xcoll_ucx_request_put(state->worker, watch->fp_send[slot]);
      }
    }
  }
  xcoll_ucx_worker_destroy(state->worker, flush ? CLOSE_FLUSH_S : 0.0);
  free(state->peers);
  free(state);
}

static void ucx_comm_destroy(xcoll_comm *comm, void *opaque) {
  (void)comm;
  ucx_state *state = opaque;
  if (state == NULL)
    return;
  /* A broken communicator's peers are broken too (the abort told them):
   * nobody waits for goodbyes. */
  int broken = atomic_load(&state->aborted) || state->broken != 0;
  if (!broken) {
    send_goodbyes(state);
    await_goodbyes(state);
  }
  free_state(state, !broken);
}

/* Post the receive of each peer's goodbye message. */
static xcoll_status post_goodbye_receives(ucx_state *state) {
  static char sink[1];
  for (int peer = 0; peer < state->world_size; peer++) {
    if (peer == state->rank)
      continue;
    ucp_tag_t tag = ((ucp_tag_t)peer << (SEQ_BITS + STEP_BITS)) |
                    ((ucp_tag_t)GOODBYE_SEQ << STEP_BITS) | GOODBYE_STEP;
    xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
    if (request == NULL)
      return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                         "ucx backend: no memory for rank %d's requests",
                         state->rank);
    /* All goodbyes are one byte of nothing: one shared sink will do. */
    ucs_status_t status = xcoll_ucx_irecv(state->worker, peer, tag,
                                          FULL_TAG_MASK, sink, 1, request);
    if (status != UCS_OK) {
      xcoll_ucx_request_put(state->worker, request);
      return xcoll_error(state->comm, XCOLL_ERR_SYSTEM,
                         "ucx backend: rank %d could not post a receive: %s",
                         state->rank, ucs_status_string(status));
    }
    state->peers[peer].goodbye = request;
    /* Fingerprints, aborts and liveness probes from this peer. */
    static char sink[1];
    peer_watch *watch = &state->peers[peer];
    watch->fp_receive = ucx_post_control_receive(
        state, peer, FINGERPRINT_STEP, watch->fp_in, XCOLL_FINGERPRINT_BYTES);
    watch->abort_receive = ucx_post_control_receive(
        state, peer, ABORT_STEP, watch->abort_in, sizeof watch->abort_in);
    watch->ping_receive =
        ucx_post_control_receive(state, peer, PING_STEP, sink, 1);
    watch->pong_receive =
        ucx_post_control_receive(state, peer, PONG_STEP, sink, 1);
    if (!watch->fp_receive || !watch->abort_receive || !watch->ping_receive ||
        !watch->pong_receive)
      return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                         "ucx backend: rank %d could not post its control "
                         "receives for rank %d",
                         state->rank, peer);
  }
  return XCOLL_SUCCESS;
}

/* Read and check a peer's hello; *address points into value. */
static xcoll_status parse_hello(ucx_state *state, int peer, const void *value,
                                size_t bytes, hello *out,
                                const void **address) {
  if (bytes < sizeof *out)
    goto bad;
  memcpy(out, value, sizeof *out);
  if (out->magic != HELLO_MAGIC ||
      out->address_bytes != bytes - sizeof *out ||
      memchr(out->host_id, '\0', sizeof out->host_id) == NULL)
    goto bad;
  *address = (const char *)value + sizeof *out;
  return XCOLL_SUCCESS;
bad:
  return xcoll_error(state->comm, XCOLL_ERR_PROTOCOL,
                     "ucx backend: rank %d's entry in the store (%zu bytes) "
                     "is not a ucx worker address: do all ranks run the same "
                     "xcoll with XCOLL_BACKEND=ucx?",
                     peer, bytes);
}

/* Longest record a peer may publish (hello + worker address), bytes: UCX
 * worker addresses are some hundreds of bytes; this only bounds what a
 * malformed record can make a rank allocate. */
#define MAX_HELLO_BYTES (1u << 20)

/* Publish this rank's hello and worker address and collect every rank's
 * (xcoll_bootstrap_allgatherv; free with xcoll_bootstrap_free). */
static xcoll_status exchange_hellos(ucx_state *state, const char *host_id,
                                    void ***values, size_t **sizes) {
  xcoll_comm *comm = state->comm;
  const void *address;
  size_t address_bytes;
  xcoll_ucx_worker_address(state->worker, &address, &address_bytes);
  size_t bytes = sizeof(hello) + address_bytes;
  char *value = malloc(bytes);
  if (value == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "ucx backend: no memory for rank %d's address",
                       comm->rank);
  hello mine;
  memset(&mine, 0, sizeof mine);
  mine.magic = HELLO_MAGIC;
  mine.pid = (int32_t)getpid();
  mine.address_bytes = (uint32_t)address_bytes;
  snprintf(mine.host_id, sizeof mine.host_id, "%s", host_id);
  memcpy(value, &mine, sizeof mine);
  memcpy(value + sizeof mine, address, address_bytes);
  xcoll_status st = xcoll_bootstrap_allgatherv(
      comm, "ucx-address", value, bytes, MAX_HELLO_BYTES, values, sizes);
  free(value);
  return st;
}

/* Connect to peer, whose record (hello + worker address, bytes long) is
 * value. A peer on this host is connected without UCX's peer
 * failure handling, which in UCX 1.13 would rule out shared memory and cma,
 * and is watched through a pidfd instead; a remote peer (or every peer with
 * XCOLL_UCX_ERR_MODE=peer) gets UCP_ERR_HANDLING_MODE_PEER. */
static xcoll_status connect_peer(ucx_state *state, int peer, const void *value,
                                 size_t bytes, const char *host_id,
                                 int force_peer_mode) {
  xcoll_comm *comm = state->comm;
  hello theirs;
  const void *address = NULL;
  xcoll_status st = parse_hello(state, peer, value, bytes, &theirs, &address);
  if (st != XCOLL_SUCCESS) return st;
  peer_watch *watch = &state->peers[peer];
  if (peer != comm->rank && !force_peer_mode &&
      strcmp(theirs.host_id, host_id) == 0) {
    watch->pidfd = xcoll_ucx_open_pidfd((pid_t)theirs.pid);
    watch->same_host = watch->pidfd >= 0;
  }
  /* A rank cannot lose itself: its own endpoint (transport self) needs no
   * peer failure handling, which would otherwise drag in tcp. */
  int peer_mode = !watch->same_host && peer != comm->rank;
  char err[256];
  ucs_status_t status =
      xcoll_ucx_connect(state->worker, peer, address, peer_mode,
                        ucx_on_peer_error, state, err, sizeof err);
  if (status != UCS_OK)
    return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                       "ucx backend: rank %d could not connect to rank %d: %s "
                       "(is UCX_TLS the same on every rank?)",
                       comm->rank, peer, err);
  return XCOLL_SUCCESS;
}

static xcoll_status ucx_comm_init(xcoll_comm *comm, void **out) {
  *out = NULL;
  if (comm->world_size > MAX_WORLD_SIZE)
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "ucx backend: world_size %d exceeds %d (the source rank "
                       "has %d bits in the UCP tag); use the tcp backend",
                       comm->world_size, MAX_WORLD_SIZE, SOURCE_BITS);
  long spin_us = 0;
  xcoll_status st =
      xcoll_param_int("XCOLL_UCX_SPIN_US", &spin_us);
  if (st != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, st);
  int err_mode = -1; /* core/params.c: "auto", "peer" */
  st = xcoll_param_choice("XCOLL_UCX_ERR_MODE", &err_mode);
  if (st != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, st);
  int force_peer_mode = err_mode == 1;

  ucx_state *state = calloc(1, sizeof *state);
  peer_watch *peers = calloc((size_t)comm->world_size, sizeof *peers);
  if (state == NULL || peers == NULL) {
    free(state);
    free(peers);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "ucx backend: no memory for rank %d's state", comm->rank);
  }
  for (int peer = 0; peer < comm->world_size; peer++)
    peers[peer].pidfd = -1;
  state->peers = peers;
  state->comm = comm;
  state->rank = comm->rank;
  state->world_size = comm->world_size;
  state->timeout_s = comm->timeout_s > 0 ? comm->timeout_s : 1e9;
  state->spin_s = 1e-6 * (double)spin_us;
  state->failed_peer = -1;
  atomic_init(&state->aborted, 0);

  char err[256];
  /* When the launcher says every rank is on this host, only shared memory
   * and self can be used (peer failure handling would need tcp): leave the
   * network interfaces closed so that progress does not poll them. */
  const char *default_tls = NULL;
  if (!force_peer_mode && comm->local_world_size == comm->world_size)
    default_tls = LOCAL_TLS;
  ucs_status_t status =
      xcoll_ucx_worker_create(comm->world_size, KEEPALIVE_INTERVAL,
                              default_tls, &state->worker, err, sizeof err);
  if (status != UCS_OK) {
    st = xcoll_error(comm, XCOLL_ERR_SYSTEM,
                     "ucx backend on rank %d: %s (check UCX_TLS / "
                     "UCX_NET_DEVICES; ucx_info -d lists transports)",
                     comm->rank, err);
    goto fail;
  }
  char host_id[HOST_ID_BYTES];
  xcoll_ucx_host_identity(host_id, sizeof host_id);
  void **records = NULL;
  size_t *record_bytes = NULL;
  if ((st = exchange_hellos(state, host_id, &records, &record_bytes)) !=
      XCOLL_SUCCESS)
    goto fail;
  int same_host = 0;
  for (int peer = 0; peer < comm->world_size && st == XCOLL_SUCCESS; peer++) {
    st = connect_peer(state, peer, records[peer], record_bytes[peer], host_id,
                      force_peer_mode);
    same_host += state->peers[peer].same_host;
  }
  xcoll_bootstrap_free(comm->world_size, records, record_bytes);
  if (st != XCOLL_SUCCESS)
    goto fail;
  if ((st = post_goodbye_receives(state)) != XCOLL_SUCCESS)
    goto fail;
  XCOLL_INFO("ucx: rank %d connected to %d ranks, %d on this host watched by "
             "pidfd, %d with UCX peer failure handling (UCX %s, spin %ld us, "
             "XCOLL_UCX_ERR_MODE=%s)",
             comm->rank, comm->world_size, same_host,
             comm->world_size - 1 - same_host, ucp_get_version_string(),
             spin_us, force_peer_mode ? "peer" : "auto");
  log_endpoints(state);
  *out = state;
  return XCOLL_SUCCESS;

fail:
  free_state(state, 0);
  return st;
}

static void ucx_comm_abort(xcoll_comm *comm, void *opaque) {
  (void)comm;
  ucx_state *state = opaque;
  if (state == NULL)
    return;
  atomic_store(&state->aborted, 1);
  xcoll_ucx_worker_signal(state->worker);
}

static const xcoll_p2p_ops ucx_p2p = {
    .isend = ucx_isend,
    .irecv = ucx_irecv,
    .wait = ucx_wait,
    .test = ucx_test,
};

const xcoll_backend xcoll_backend_ucx = {
    .abi_version = XCOLL_BACKEND_ABI_VERSION,
    .name = "ucx",
    .description = "host-driven algorithms over UCX tagged messages (UCP): "
                   "shared memory, cma, tcp or rdma as UCX picks",
    .comm_init = ucx_comm_init,
    .comm_destroy = ucx_comm_destroy,
    .comm_abort = ucx_comm_abort,
    .p2p = &ucx_p2p,
    .coll = NULL,
};
