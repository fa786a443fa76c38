/* ucx_wrap.c - UCP context, worker, endpoints and tagged requests for xcoll
 * (see ucx_wrap.h). */
#include "ucx_wrap.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The requests of one worker come from slabs of this many records. */
#define REQUEST_SLAB 64

typedef struct request_slab {
  struct request_slab *next;
  xcoll_ucx_request records[REQUEST_SLAB];
} request_slab;

/* What an endpoint's error callback needs to name the peer. */
typedef struct peer_slot {
  xcoll_ucx_worker *worker;
  int peer;
  ucp_ep_h ep;
  xcoll_ucx_peer_error_fn on_error;
  void *arg;
  int failed; /* the endpoint reported an error: close it forcibly */
} peer_slot;

struct xcoll_ucx_worker {
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_address_t *address;
  size_t address_bytes;
  int event_fd; /* -1 when UCX offers no wake-up for the chosen transports */
  int world_size;
  peer_slot *peers; /* world_size entries */
  xcoll_ucx_request *free_requests;
  request_slab *slabs;
};

static void set_err(char *err, size_t err_bytes, const char *what,
                    ucs_status_t status) {
  if (err != NULL && err_bytes > 0)
    snprintf(err, err_bytes, "%s failed: %s", what, ucs_status_string(status));
}

ucs_status_t xcoll_ucx_worker_create(int world_size,
                                     const char *keepalive_interval,
                                     const char *default_tls,
                                     xcoll_ucx_worker **out, char *err,
                                     size_t err_bytes) {
  *out = NULL;
  xcoll_ucx_worker *w = calloc(1, sizeof *w);
  if (w == NULL)
    return UCS_ERR_NO_MEMORY;
  w->event_fd = -1;
  w->world_size = world_size;
  w->peers = calloc((size_t)world_size, sizeof *w->peers);
  if (w->peers == NULL) {
    free(w);
    return UCS_ERR_NO_MEMORY;
  }

  ucp_config_t *config = NULL;
  ucs_status_t status = ucp_config_read(NULL, NULL, &config);
  if (status != UCS_OK) {
    set_err(err, err_bytes, "ucp_config_read (check UCX_* variables)", status);
    goto fail;
  }
  /* UCX's default keepalive (20 s) is too slow to notice a dead peer on
   * transports without a connection that the kernel resets; the user's own
   * UCX_KEEPALIVE_INTERVAL wins. */
  if (keepalive_interval != NULL && getenv("UCX_KEEPALIVE_INTERVAL") == NULL)
    (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive_interval);
  /* Every interface UCX opens is polled by each ucp_worker_progress, used or
   * not: an idle tcp interface costs an epoll_wait per poll. */
  if (default_tls != NULL && getenv("UCX_TLS") == NULL)
    (void)ucp_config_modify(config, "TLS", default_tls);

  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = (size_t)world_size;
  status = ucp_init(&params, config, &w->context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    set_err(err, err_bytes, "ucp_init", status);
    goto fail;
  }

  ucp_worker_params_t wparams;
  memset(&wparams, 0, sizeof wparams);
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  /* One thread at a time drives a communicator (the caller or the progress
   * thread); only ucp_worker_signal comes from elsewhere, and it is safe. */
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(w->context, &wparams, &w->worker);
  if (status != UCS_OK) {
    set_err(err, err_bytes, "ucp_worker_create", status);
    goto fail;
  }
  status = ucp_worker_get_address(w->worker, &w->address, &w->address_bytes);
  if (status != UCS_OK) {
    set_err(err, err_bytes, "ucp_worker_get_address", status);
    goto fail;
  }
  if (ucp_worker_get_efd(w->worker, &w->event_fd) != UCS_OK)
    w->event_fd = -1;
  *out = w;
  return UCS_OK;

fail:
  xcoll_ucx_worker_destroy(w, 0.0);
  return status;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void xcoll_ucx_worker_destroy(xcoll_ucx_worker *w, double flush_timeout_s) {
  if (w == NULL)
    return;
  if (w->worker != NULL && w->peers != NULL) {
    /* Close all endpoints at once and progress them together, so that a
     * slow peer costs the timeout once, not once per endpoint. */
    void **closing = calloc((size_t)w->world_size, sizeof *closing);
    for (int peer = 0; peer < w->world_size; peer++) {
      peer_slot *slot = &w->peers[peer];
      if (slot->ep == NULL)
        continue;
      ucp_request_param_t param;
      memset(&param, 0, sizeof param);
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = (slot->failed || flush_timeout_s <= 0.0)
                        ? UCP_EP_CLOSE_FLAG_FORCE
                        : 0;
      ucs_status_ptr_t request = ucp_ep_close_nbx(slot->ep, &param);
      slot->ep = NULL;
      if (UCS_PTR_IS_PTR(request)) {
        if (closing != NULL)
          closing[peer] = request;
        else
          ucp_request_free(request);
      }
    }
    if (closing != NULL) {
      double deadline = now_s() + flush_timeout_s;
      for (;;) {
        int pending = 0;
        ucp_worker_progress(w->worker);
        for (int peer = 0; peer < w->world_size; peer++) {
          if (closing[peer] == NULL)
            continue;
          if (ucp_request_check_status(closing[peer]) != UCS_INPROGRESS) {
            ucp_request_free(closing[peer]);
            closing[peer] = NULL;
          } else {
            pending++;
          }
        }
        if (pending == 0 || now_s() > deadline)
          break;
      }
      /* Whatever did not flush in time is dropped with the worker. */
      for (int peer = 0; peer < w->world_size; peer++)
        if (closing[peer] != NULL)
          ucp_request_free(closing[peer]);
      free(closing);
    }
  }
  if (w->address != NULL)
    ucp_worker_release_address(w->worker, w->address);
  if (w->worker != NULL)
    ucp_worker_destroy(w->worker);
  if (w->context != NULL)
    ucp_cleanup(w->context);
  while (w->slabs != NULL) {
    request_slab *next = w->slabs->next;
    free(w->slabs);
    w->slabs = next;
  }
  free(w->peers);
  free(w);
}

void xcoll_ucx_worker_address(xcoll_ucx_worker *w, const void **address,
                              size_t *bytes) {
  *address = w->address;
  *bytes = w->address_bytes;
}

static void endpoint_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  peer_slot *slot = arg;
  slot->failed = 1;
  if (slot->on_error != NULL)
    slot->on_error(slot->arg, slot->peer, status);
}

ucs_status_t xcoll_ucx_connect(xcoll_ucx_worker *w, int peer,
                               const void *address, int peer_failure_handling,
                               xcoll_ucx_peer_error_fn on_error, void *arg,
                               char *err, size_t err_bytes) {
  peer_slot *slot = &w->peers[peer];
  slot->worker = w;
  slot->peer = peer;
  slot->on_error = on_error;
  slot->arg = arg;
  ucp_ep_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = address;
  params.err_mode = peer_failure_handling ? UCP_ERR_HANDLING_MODE_PEER
                                          : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = endpoint_error;
  params.err_handler.arg = slot;
  ucs_status_t status = ucp_ep_create(w->worker, &params, &slot->ep);
  if (status != UCS_OK) {
    slot->ep = NULL;
    set_err(err, err_bytes, "ucp_ep_create", status);
  }
  return status;
}

/* Read what a UCX print function writes into a string. */
static char *print_to_string(void (*print)(void *object, FILE *stream),
                             void *object) {
  char *text = NULL;
  size_t bytes = 0;
  FILE *stream = open_memstream(&text, &bytes);
  if (stream == NULL)
    return NULL;
  print(object, stream);
  fclose(stream);
  return text;
}

static void print_endpoint(void *ep, FILE *stream) {
  ucp_ep_print_info(ep, stream);
}

static void print_context(void *context, FILE *stream) {
  ucp_context_print_info(context, stream);
}

char *xcoll_ucx_endpoint_info(xcoll_ucx_worker *w, int peer) {
  if (w->peers[peer].ep == NULL)
    return NULL;
  return print_to_string(print_endpoint, w->peers[peer].ep);
}

char *xcoll_ucx_context_info(xcoll_ucx_worker *w) {
  return print_to_string(print_context, w->context);
}

xcoll_ucx_request *xcoll_ucx_request_get(xcoll_ucx_worker *w) {
  if (w->free_requests == NULL) {
    request_slab *slab = calloc(1, sizeof *slab);
    if (slab == NULL)
      return NULL;
    slab->next = w->slabs;
    w->slabs = slab;
    for (int i = 0; i < REQUEST_SLAB; i++) {
      slab->records[i].next = w->free_requests;
      w->free_requests = &slab->records[i];
    }
  }
  xcoll_ucx_request *request = w->free_requests;
  w->free_requests = request->next;
  memset(request, 0, sizeof *request);
  return request;
}

void xcoll_ucx_request_put(xcoll_ucx_worker *w, xcoll_ucx_request *request) {
  if (request == NULL)
    return;
  if (request->handle != NULL) {
    if (!request->done && request->is_recv)
      ucp_request_cancel(w->worker, request->handle);
    ucp_request_free(request->handle);
    request->handle = NULL;
  }
  request->next = w->free_requests;
  w->free_requests = request;
}

static void send_done(void *handle, ucs_status_t status, void *user_data) {
  (void)handle;
  xcoll_ucx_request *request = user_data;
  request->status = status;
  request->done = 1;
}

static void recv_done(void *handle, ucs_status_t status,
                      const ucp_tag_recv_info_t *info, void *user_data) {
  (void)handle;
  xcoll_ucx_request *request = user_data;
  request->status = status;
  if (info != NULL) {
    request->received = info->length;
    request->sender_tag = info->sender_tag;
  }
  request->done = 1;
}

static ucs_status_t isend(xcoll_ucx_worker *w, int peer, ucp_tag_t tag,
                          const void *buf, size_t bytes,
                          xcoll_ucx_request *request, int sync) {
  request->peer = peer;
  request->is_recv = 0;
  request->bytes = bytes;
  request->tag = tag;
  ucp_ep_h ep = w->peers[peer].ep;
  if (ep == NULL)
    return UCS_ERR_NOT_CONNECTED;
  ucp_request_param_t param;
  memset(&param, 0, sizeof param);
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = send_done;
  param.user_data = request;
  ucs_status_ptr_t handle =
      sync ? ucp_tag_send_sync_nbx(ep, buf, bytes, tag, &param)
           : ucp_tag_send_nbx(ep, buf, bytes, tag, &param);
  if (handle == NULL) {
    request->status = UCS_OK;
    request->done = 1;
    return UCS_OK;
  }
  if (UCS_PTR_IS_ERR(handle))
    return UCS_PTR_STATUS(handle);
  request->handle = handle;
  return UCS_OK;
}

ucs_status_t xcoll_ucx_isend(xcoll_ucx_worker *w, int peer, ucp_tag_t tag,
                             const void *buf, size_t bytes,
                             xcoll_ucx_request *request) {
  return isend(w, peer, tag, buf, bytes, request, 0);
}

ucs_status_t xcoll_ucx_isend_sync(xcoll_ucx_worker *w, int peer,
                                  ucp_tag_t tag, const void *buf,
                                  size_t bytes, xcoll_ucx_request *request) {
  return isend(w, peer, tag, buf, bytes, request, 1);
}

ucs_status_t xcoll_ucx_irecv(xcoll_ucx_worker *w, int peer, ucp_tag_t tag,
                             ucp_tag_t tag_mask, void *buf, size_t bytes,
                             xcoll_ucx_request *request) {
  request->peer = peer;
  request->is_recv = 1;
  request->bytes = bytes;
  request->tag = tag;
  ucp_request_param_t param;
  memset(&param, 0, sizeof param);
  /* A message already waiting (eager, unexpected) may complete the receive
   * inside ucp_tag_recv_nbx. UCX 1.13 then returns NULL without calling the
   * callback, and the message's length and sender tag were found missing
   * (zero) even with recv_info given; the posted size and tag are not the
   * message's (a receive may be larger, and a mask may ignore bits of the
   * tag), so nothing can stand in for them. NO_IMM_CMPL makes UCX always
   * return a request and report through recv_done, which carries both. */
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                      UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FIELD_RECV_INFO |
                      UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = recv_done;
  param.user_data = request;
  param.recv_info.tag_info = &request->info;
  ucs_status_ptr_t handle =
      ucp_tag_recv_nbx(w->worker, buf, bytes, tag, tag_mask, &param);
  if (handle == NULL) {
    /* Not expected with NO_IMM_CMPL; if UCX does, trust only what it
     * reported, and report a receive of unknown origin as failed rather
     * than as the posted message. */
    if (!request->done) {
      request->received = request->info.length;
      request->sender_tag = request->info.sender_tag;
      request->status = (request->info.sender_tag & tag_mask) ==
                                (tag & tag_mask)
                            ? UCS_OK
                            : UCS_ERR_NO_MESSAGE;
      request->done = 1;
    }
    return UCS_OK;
  }
  if (UCS_PTR_IS_ERR(handle))
    return UCS_PTR_STATUS(handle);
  request->handle = handle;
  return UCS_OK;
}

unsigned xcoll_ucx_progress(xcoll_ucx_worker *w) {
  return ucp_worker_progress(w->worker);
}

void xcoll_ucx_wait_event(xcoll_ucx_worker *w, int timeout_ms) {
  if (w->event_fd < 0) {
    struct timespec pause = {0, 50 * 1000};
    nanosleep(&pause, NULL);
    return;
  }
  ucs_status_t status = ucp_worker_arm(w->worker);
  if (status == UCS_ERR_BUSY)
    return; /* events are pending: progress again */
  if (status != UCS_OK) {
    struct timespec pause = {0, 50 * 1000};
    nanosleep(&pause, NULL);
    return;
  }
  struct pollfd pfd = {.fd = w->event_fd, .events = POLLIN};
  int rc;
  do {
    rc = poll(&pfd, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
}

void xcoll_ucx_worker_signal(xcoll_ucx_worker *w) {
  if (w != NULL && w->worker != NULL)
    (void)ucp_worker_signal(w->worker);
}

void xcoll_ucx_host_identity(char *out, size_t out_bytes) {
  char host[128] = "unknown-host";
  char pidns[64] = "";
  gethostname(host, sizeof host - 1);
  ssize_t n = readlink("/proc/self/ns/pid", pidns, sizeof pidns - 1);
  pidns[n > 0 ? n : 0] = '\0';
  snprintf(out,
           out_bytes < XCOLL_UCX_HOST_ID_BYTES ? out_bytes
                                               : XCOLL_UCX_HOST_ID_BYTES,
           "%s|%s", host, pidns);
}

int xcoll_ucx_open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : (int)fd;
#else
  (void)pid;
  return -1;
#endif
}
