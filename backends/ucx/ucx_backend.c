/* ucx_backend.c - the "ucx" backend: core's p2p interface (core/p2p.h) over
 * UCP tagged messages, so that every host-driven algorithm in core/algorithms
 * runs on UCX unchanged. UCX picks the transport per peer (shared memory on
 * one host, tcp or rdma across hosts); see docs/ucx.md. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "env.h"
#include "error.h"
#include "log.h"
#include "ucx_wrap.h"

/* The UCP tag: source rank (16 bits) | collective seq mod 2^24 (24 bits) |
 * step (24 bits). UCP matches on the tag alone, so the source must be in it;
 * each communicator has its own worker, so no communicator id is needed. */
#define SOURCE_BITS 16
#define SEQ_BITS 24
#define STEP_BITS 24
#define MAX_WORLD_SIZE (1 << SOURCE_BITS)
#define FULL_TAG_MASK ((ucp_tag_t)-1)

/* How often a blocked wait wakes up to look at abort and timeouts, ms. */
#define WAKE_INTERVAL_MS 50
/* Endpoints get this long to flush at destroy, seconds. */
#define CLOSE_FLUSH_S 1.0
/* UCX keepalive interval we ask for (the user's UCX_KEEPALIVE_INTERVAL wins):
 * short enough that a peer killed on a transport without a kernel-reset
 * connection (shared memory) is noticed within seconds. */
#define KEEPALIVE_INTERVAL "1s"
/* How often a wait looks whether same-host peer processes are alive, s. */
#define LIVENESS_INTERVAL_S 0.02
/* The step reserved for the goodbye message a rank sends at destroy: a peer
 * process that exits after saying goodbye left cleanly; one that exits
 * without it died. */
#define GOODBYE_STEP ((1u << STEP_BITS) - 1)
#define GOODBYE_SEQ ((1u << SEQ_BITS) - 1)
/* UCX_TLS when every rank runs on this host (the user's UCX_TLS wins). */
#define LOCAL_TLS "sm,self"
#define HELLO_MAGIC 0x78756378u /* "xucx" */
#define HOST_ID_BYTES 192

/* What each rank publishes in the store: who and where it is, then its UCP
 * worker address. */
typedef struct hello {
  uint32_t magic;
  int32_t pid;
  uint32_t address_bytes;
  char host_id[HOST_ID_BYTES]; /* host name and pid namespace */
} hello;

typedef struct peer_watch {
  int same_host;       /* connected without UCX peer failure handling */
  int pidfd;           /* same-host peers: readable once the process exits */
  int departed;        /* said goodbye and left: not a failure */
  int suspect;         /* UCX reported an endpoint error, not yet judged */
  ucs_status_t suspect_status;
  xcoll_ucx_request *goodbye; /* the posted receive of its goodbye */
} peer_watch;

typedef struct ucx_state {
  xcoll_comm *comm;
  xcoll_ucx_worker *worker;
  int rank;
  int world_size;
  double timeout_s;
  double spin_s; /* XCOLL_UCX_SPIN_US: busy-poll this long before sleeping */
  _Atomic int aborted;
  /* First peer whose endpoint failed (-1: none), set by UCX's error callback
   * during progress, on the thread that drives the communicator. */
  int failed_peer;
  ucs_status_t failed_status;
  const char *failed_reason; /* a few words on how the failure was seen */
  peer_watch *peers;         /* world_size entries */
  double next_liveness_check;
  int goodbye_sent;
} ucx_state;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* UCX calls this during progress; judged in check_peers, because a peer
 * that closed after its goodbye also looks like an endpoint error. */
static void on_peer_error(void *arg, int peer, ucs_status_t status) {
  ucx_state *state = arg;
  if (!state->peers[peer].suspect) {
    state->peers[peer].suspect = 1;
    state->peers[peer].suspect_status = status;
  }
}

static void mark_failed(ucx_state *state, int peer, ucs_status_t status,
                        const char *reason) {
  if (state->failed_peer < 0) {
    state->failed_peer = peer;
    state->failed_status = status;
    state->failed_reason = reason;
  }
}

/* Did peer's goodbye arrive? Progress once more first: it was sent before
 * the peer closed, so it is at most one progress call behind. */
static int peer_said_goodbye(ucx_state *state, int peer) {
  peer_watch *watch = &state->peers[peer];
  if (watch->goodbye == NULL)
    return 0;
  if (!watch->goodbye->done)
    xcoll_ucx_progress(state->worker);
  return watch->goodbye->done && watch->goodbye->status == UCS_OK;
}

/* Judge endpoint errors, and every LIVENESS_INTERVAL_S look whether the
 * same-host peer processes still exist (pidfd becomes readable at exit). */
static void check_peers(ucx_state *state, double now) {
  int look = now >= state->next_liveness_check;
  if (look)
    state->next_liveness_check = now + LIVENESS_INTERVAL_S;
  for (int peer = 0; peer < state->world_size; peer++) {
    peer_watch *watch = &state->peers[peer];
    if (watch->departed || peer == state->rank)
      continue;
    int gone = 0;
    ucs_status_t status = UCS_ERR_CONNECTION_RESET;
    const char *reason = NULL;
    if (watch->suspect) {
      gone = 1;
      status = watch->suspect_status;
      reason = "reported by UCX";
    } else if (look && watch->pidfd >= 0) {
      struct pollfd pfd = {.fd = watch->pidfd, .events = POLLIN};
      if (poll(&pfd, 1, 0) > 0) {
        gone = 1;
        reason = "its process on this host exited";
      }
    }
    if (!gone)
      continue;
    if (peer_said_goodbye(state, peer)) {
      watch->departed = 1;
      continue;
    }
    mark_failed(state, peer, status, reason);
  }
}

/* Fold core's 64-bit tag (seq << 32 | step) and the source rank into one UCP
 * tag. Fails when the step does not fit in 24 bits. */
static xcoll_status fold_tag(ucx_state *state, int source, uint64_t tag,
                             ucp_tag_t *out) {
  uint64_t step = tag & 0xffffffffu;
  if (step >> STEP_BITS)
    return xcoll_error(state->comm, XCOLL_ERR_INTERNAL,
                       "ucx backend: tag step %llu of collective seq %llu "
                       "does not fit in %d bits (core/algorithm.h xcoll_tag)",
                       (unsigned long long)step,
                       (unsigned long long)(tag >> 32), STEP_BITS);
  uint64_t seq = (tag >> 32) & ((1u << SEQ_BITS) - 1);
  if (step == GOODBYE_STEP && seq == GOODBYE_SEQ)
    return xcoll_error(state->comm, XCOLL_ERR_INTERNAL,
                       "ucx backend: step %u of a collective whose seq is "
                       "%u mod 2^%d is reserved for the goodbye message",
                       GOODBYE_STEP, GOODBYE_SEQ, SEQ_BITS);
  *out = ((ucp_tag_t)source << (SEQ_BITS + STEP_BITS)) |
         ((ucp_tag_t)seq << STEP_BITS) | (ucp_tag_t)step;
  return XCOLL_SUCCESS;
}

static xcoll_status check_peer(ucx_state *state, int peer, const char *what) {
  if (peer < 0 || peer >= state->world_size)
    return xcoll_error(state->comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "ucx %s: peer %d is not a rank of this communicator "
                       "(world_size %d)",
                       what, peer, state->world_size);
  return XCOLL_SUCCESS;
}

static xcoll_status remote_failure(ucx_state *state) {
  return xcoll_error(state->comm, XCOLL_ERR_REMOTE,
                     "rank %d (ucx endpoint error: %s; %s) failed as seen by "
                     "rank %d: the process died, aborted or lost its network; "
                     "check its log",
                     state->failed_peer,
                     ucs_status_string(state->failed_status),
                     state->failed_reason, state->rank);
}

static xcoll_status ucx_isend(void *opaque, int peer, uint64_t tag,
                              const void *buf, size_t bytes,
                              xcoll_p2p_request **out) {
  ucx_state *state = opaque;
  *out = NULL;
  xcoll_status st = check_peer(state, peer, "isend");
  if (st != XCOLL_SUCCESS)
    return st;
  if (state->failed_peer >= 0)
    return remote_failure(state);
  ucp_tag_t ucp_tag = 0;
  if ((st = fold_tag(state, state->rank, tag, &ucp_tag)) != XCOLL_SUCCESS)
    return st;
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                       "ucx isend: no memory for a request to rank %d", peer);
  ucs_status_t status =
      xcoll_ucx_isend(state->worker, peer, ucp_tag, buf, bytes, request);
  if (status != UCS_OK) {
    xcoll_ucx_request_put(state->worker, request);
    return xcoll_error(state->comm, XCOLL_ERR_REMOTE,
                       "rank %d (ucx endpoint error: %s): sending %zu bytes "
                       "from rank %d failed",
                       peer, ucs_status_string(status), bytes, state->rank);
  }
  *out = (xcoll_p2p_request *)request;
  return XCOLL_SUCCESS;
}

static xcoll_status ucx_irecv(void *opaque, int peer, uint64_t tag, void *buf,
                              size_t bytes, xcoll_p2p_request **out) {
  ucx_state *state = opaque;
  *out = NULL;
  xcoll_status st = check_peer(state, peer, "irecv");
  if (st != XCOLL_SUCCESS)
    return st;
  if (state->failed_peer >= 0)
    return remote_failure(state);
  ucp_tag_t ucp_tag = 0;
  if ((st = fold_tag(state, peer, tag, &ucp_tag)) != XCOLL_SUCCESS)
    return st;
  xcoll_ucx_request *request = xcoll_ucx_request_get(state->worker);
  if (request == NULL)
    return xcoll_error(state->comm, XCOLL_ERR_NO_MEMORY,
                       "ucx irecv: no memory for a request from rank %d", peer);
  ucs_status_t status = xcoll_ucx_irecv(state->worker, peer, ucp_tag,
                                        FULL_TAG_MASK, buf, bytes, request);
  if (status != UCS_OK) {
    xcoll_ucx_request_put(state->worker, request);
    return xcoll_error(state->comm, XCOLL_ERR_SYSTEM,
                       "ucx irecv: posting a receive of %zu bytes from rank "
                       "%d failed: %s",
                       bytes, peer, ucs_status_string(status));
  }
  *out = (xcoll_p2p_request *)request;
  return XCOLL_SUCCESS;
}

/* The verdict on a completed request. */
static xcoll_status check_completed(ucx_state *state,
                                    const xcoll_ucx_request *request) {
  unsigned long long seq =
      (request->tag >> STEP_BITS) & ((1u << SEQ_BITS) - 1);
  unsigned long long step = request->tag & ((1u << STEP_BITS) - 1);
  if (request->status == UCS_ERR_MESSAGE_TRUNCATED)
    return xcoll_error(state->comm, XCOLL_ERR_PROTOCOL,
                       "rank %d sent more than the %zu bytes rank %d expected "
                       "(collective seq %llu, step %llu): the ranks disagree "
                       "on count or datatype",
                       request->peer, request->bytes, state->rank, seq, step);
  if (request->status == UCS_ERR_CANCELED && atomic_load(&state->aborted))
    return xcoll_error(state->comm, XCOLL_ERR_ABORTED,
                       "ucx: communicator aborted (rank %d)", state->rank);
  if (request->status != UCS_OK)
    return xcoll_error(state->comm, XCOLL_ERR_REMOTE,
                       "rank %d (ucx endpoint error: %s): %s of %zu bytes at "
                       "rank %d failed (collective seq %llu, step %llu)",
                       request->peer, ucs_status_string(request->status),
                       request->is_recv ? "receive" : "send", request->bytes,
                       state->rank, seq, step);
  if (request->is_recv && request->received != request->bytes)
    return xcoll_error(state->comm, XCOLL_ERR_PROTOCOL,
                       "rank %d sent %zu bytes where rank %d expected %zu "
                       "(collective seq %llu, step %llu): the ranks disagree "
                       "on count or datatype",
                       request->peer, request->received, state->rank,
                       request->bytes, seq, step);
  return XCOLL_SUCCESS;
}

static xcoll_status timeout_failure(ucx_state *state,
                                    xcoll_p2p_request **requests, int count) {
  char pending[256];
  size_t used = 0;
  pending[0] = '\0';
  for (int i = 0; i < count && used + 24 < sizeof pending; i++) {
    const xcoll_ucx_request *request = (const xcoll_ucx_request *)requests[i];
    if (request == NULL || request->done)
      continue;
    int n = snprintf(pending + used, sizeof pending - used, "%s%s rank %d",
                     used == 0 ? "" : ", ", request->is_recv ? "from" : "to",
                     request->peer);
    if (n > 0)
      used += (size_t)n;
  }
  return xcoll_error(state->comm, XCOLL_ERR_TIMEOUT,
                     "ucx: rank %d made no progress for %.1f s waiting on "
                     "messages %s; a peer may be stuck or slow (raise "
                     "XCOLL_TIMEOUT_S if expected)",
                     state->rank, state->timeout_s, pending);
}

static xcoll_status ucx_wait(void *opaque, xcoll_p2p_request **requests,
                             int count) {
  ucx_state *state = opaque;
  xcoll_status result = XCOLL_SUCCESS;
  double last_progress = now_s();
  double spin_until = last_progress + state->spin_s;
  for (;;) {
    if (atomic_load(&state->aborted)) {
      result = xcoll_error(state->comm, XCOLL_ERR_ABORTED,
                           "ucx: communicator aborted while rank %d waited",
                           state->rank);
      break;
    }
    unsigned events = xcoll_ucx_progress(state->worker);
    /* UCX reports internal activity (keepalive, wireup) as progress too, so
     * only a completed request counts as progress for the timeout. */
    int completed = 0;
    int pending = 0;
    for (int i = 0; i < count; i++) {
      xcoll_ucx_request *request = (xcoll_ucx_request *)requests[i];
      if (request == NULL)
        continue;
      if (!request->done) {
        pending++;
        continue;
      }
      result = check_completed(state, request);
      xcoll_ucx_request_put(state->worker, request);
      requests[i] = NULL;
      events++;
      completed++;
      if (result != XCOLL_SUCCESS)
        break;
    }
    if (result != XCOLL_SUCCESS)
      break;
    double t = now_s();
    check_peers(state, t);
    if (state->failed_peer >= 0) {
      result = remote_failure(state);
      break;
    }
    if (pending == 0)
      return XCOLL_SUCCESS;
    if (completed > 0)
      last_progress = t;
    if (t - last_progress > state->timeout_s) {
      result = timeout_failure(state, requests, count);
      break;
    }
    if (events > 0) {
      spin_until = t + state->spin_s;
    } else if (t > spin_until) {
      xcoll_ucx_wait_event(state->worker, WAKE_INTERVAL_MS);
    } else {
      /* Ranks often outnumber cores: let the peer we wait for run. */
      sched_yield();
    }
  }
  for (int i = 0; i < count; i++) {
    xcoll_ucx_request_put(state->worker, (xcoll_ucx_request *)requests[i]);
    requests[i] = NULL;
  }
  return result;
}

static xcoll_status ucx_test(void *opaque, xcoll_p2p_request *opaque_request,
                             int *done) {
  ucx_state *state = opaque;
  xcoll_ucx_request *request = (xcoll_ucx_request *)opaque_request;
  *done = 0;
  if (atomic_load(&state->aborted))
    return xcoll_error(state->comm, XCOLL_ERR_ABORTED,
                       "ucx: communicator aborted (rank %d)", state->rank);
  xcoll_ucx_progress(state->worker);
  check_peers(state, now_s());
  if (request == NULL || request->done) {
    xcoll_status result =
        request == NULL ? XCOLL_SUCCESS : check_completed(state, request);
    xcoll_ucx_request_put(state->worker, request);
    *done = 1;
    return result;
  }
  if (state->failed_peer >= 0)
    return remote_failure(state);
  return XCOLL_SUCCESS;
}

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
    check_peers(state, t);
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
      if (state->worker != NULL)
        xcoll_ucx_request_put(state->worker, state->peers[peer].goodbye);
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
  int broken = atomic_load(&state->aborted);
  if (!broken) {
    send_goodbyes(state);
    await_goodbyes(state);
  }
  free_state(state, !broken);
}

/* "host:pid-namespace": two ranks with the same one can watch each other's
 * process (pidfd) and share memory. */
static void host_identity(char *out, size_t out_bytes) {
  char host[128] = "unknown-host";
  char pidns[64] = "";
  gethostname(host, sizeof host - 1);
  ssize_t n = readlink("/proc/self/ns/pid", pidns, sizeof pidns - 1);
  pidns[n > 0 ? n : 0] = '\0';
  snprintf(out, out_bytes, "%s|%s", host, pidns);
}

/* A pidfd for pid, or -1 where the kernel has none (before Linux 5.3). */
static int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : (int)fd;
#else
  (void)pid;
  return -1;
#endif
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
    watch->pidfd = open_pidfd((pid_t)theirs.pid);
    watch->same_host = watch->pidfd >= 0;
  }
  /* A rank cannot lose itself: its own endpoint (transport self) needs no
   * peer failure handling, which would otherwise drag in tcp. */
  int peer_mode = !watch->same_host && peer != comm->rank;
  char err[256];
  ucs_status_t status =
      xcoll_ucx_connect(state->worker, peer, address, peer_mode,
                        on_peer_error, state, err, sizeof err);
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
      xcoll_env_int("XCOLL_UCX_SPIN_US", 1000, 0, 10 * 1000 * 1000, &spin_us);
  if (st != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, st);
  static const char *const err_modes[] = {"auto", "peer", NULL};
  int err_mode = -1;
  st = xcoll_env_choice("XCOLL_UCX_ERR_MODE", err_modes, &err_mode);
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
  host_identity(host_id, sizeof host_id);
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
