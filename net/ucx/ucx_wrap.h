/* ucx_wrap.h - a small layer over UCP tagged messages: one context and one
 * worker, one endpoint per peer, tagged isend/irecv with completion records,
 * progress and blocking wake-up.
 *
 * It knows nothing of communicators or the store, so that both the ucx backend
 * (backends/ucx/ucx_backend.c) and the ucx net plugin (net/ucx/net_ucx.c) use
 * it; it lives in net/ because code two users need moves down a layer.
 * Functions return ucs_status_t; err/err_bytes, where present, receive a
 * sentence saying which UCX call failed. All functions except
 * xcoll_ucx_worker_signal must be called by one thread at a time. */
#ifndef XCOLL_NET_UCX_WRAP_H
#define XCOLL_NET_UCX_WRAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <ucp/api/ucp.h>

/* Bytes of a host identity (xcoll_ucx_host_identity), its NUL included. */
#define XCOLL_UCX_HOST_ID_BYTES 192

/* This process's host identity, "host name|pid namespace", into out
 * (out_bytes, at most XCOLL_UCX_HOST_ID_BYTES used): two processes with the
 * same one can watch each other through a pidfd and share memory, so that
 * their endpoints may go without UCX's peer failure handling, which in UCX
 * 1.13 rules out shared memory and cma (ucp_ep_params_t err_mode). */
void xcoll_ucx_host_identity(char *out, size_t out_bytes);

/* A pidfd for pid (pidfd_open(2): readable once the process exits), or -1
 * where the kernel has none (before Linux 5.3) or the process is gone. */
int xcoll_ucx_open_pidfd(pid_t pid);

typedef struct xcoll_ucx_worker xcoll_ucx_worker;

/* Called from ucp_worker_progress when the endpoint to peer fails (peer died,
 * connection reset, keepalive timeout). */
typedef void (*xcoll_ucx_peer_error_fn)(void *arg, int peer,
                                        ucs_status_t status);

/* One send or receive. The caller takes it with xcoll_ucx_request_get and
 * gives it back with xcoll_ucx_request_put; UCX writes the completion fields
 * from its callback during progress. */
typedef struct xcoll_ucx_request {
  void *handle;         /* UCX's request, NULL once released or if immediate */
  int peer;             /* sends: destination; receives: expected source */
  int is_recv;
  size_t bytes;         /* bytes posted */
  ucp_tag_t tag;        /* tag posted */
  volatile int done;    /* set by the completion callback */
  ucs_status_t status;  /* valid once done */
  size_t received;      /* receives: length of the matched message, bytes */
  ucp_tag_t sender_tag; /* receives: tag of the matched message */
  /* receives: where UCX writes length and sender tag when the receive
   * completes at once (no callback then) */
  ucp_tag_recv_info_t info;
  struct xcoll_ucx_request *next; /* free list */
} xcoll_ucx_request;

/* Create a context (features TAG and WAKEUP) and one worker. UCX reads its
 * UCX_* environment variables here (UCX_TLS, UCX_NET_DEVICES, ...).
 * keepalive_interval, when non-NULL, is the UCX_KEEPALIVE_INTERVAL used
 * unless the user set that variable (e.g. "1s"). default_tls, when
 * non-NULL, is the UCX_TLS used unless the user set that variable. */
ucs_status_t xcoll_ucx_worker_create(int world_size,
                                     const char *keepalive_interval,
                                     const char *default_tls,
                                     xcoll_ucx_worker **worker, char *err,
                                     size_t err_bytes);

/* Close endpoints (flushing them for up to flush_timeout_s seconds, then
 * forcibly), destroy the worker and context, free everything. NULL is fine. */
void xcoll_ucx_worker_destroy(xcoll_ucx_worker *worker, double flush_timeout_s);

/* This worker's address, valid until destroy: what peers need to connect. */
void xcoll_ucx_worker_address(xcoll_ucx_worker *worker, const void **address,
                              size_t *bytes);

/* Create the endpoint to peer (0 <= peer < world_size) from its worker
 * address. With peer_failure_handling (UCP_ERR_HANDLING_MODE_PEER) a failure
 * calls on_error(arg, peer, status); UCX 1.13 then uses only transports that
 * can detect a dead peer, which excludes shared memory (sysv, posix, cma):
 * a peer on the same host is better connected without it and watched by
 * other means (see ucx_backend.c). */
ucs_status_t xcoll_ucx_connect(xcoll_ucx_worker *worker, int peer,
                               const void *address, int peer_failure_handling,
                               xcoll_ucx_peer_error_fn on_error, void *arg,
                               char *err, size_t err_bytes);

/* Write what UCX chose for the endpoint to peer (lanes, transports, devices)
 * into a malloc'd string (caller frees); NULL if unavailable. */
char *xcoll_ucx_endpoint_info(xcoll_ucx_worker *worker, int peer);
/* The context's transports and devices as UCX describes them (caller frees). */
char *xcoll_ucx_context_info(xcoll_ucx_worker *worker);

/* A free request record, or NULL when out of memory. */
xcoll_ucx_request *xcoll_ucx_request_get(xcoll_ucx_worker *worker);
/* Give request back. If it has not completed, a receive is cancelled and a
 * send is left to UCX to finish; either way UCX calls back no more (UCP's
 * ucp_request_free promise), so the record is reused at once. */
void xcoll_ucx_request_put(xcoll_ucx_worker *worker, xcoll_ucx_request *request);

/* Post a tagged send of bytes of buf to peer. On an immediate completion
 * request->done is already set. */
ucs_status_t xcoll_ucx_isend(xcoll_ucx_worker *worker, int peer, ucp_tag_t tag,
                             const void *buf, size_t bytes,
                             xcoll_ucx_request *request);
/* As xcoll_ucx_isend, but complete only once the receiver has matched the
 * message (ucp_tag_send_sync_nbx): the bytes have left this process for
 * good, so closing the endpoint afterwards cannot drop them. A plain send
 * completes as soon as UCX has taken the buffer, possibly into a transport
 * queue that a forced close discards. */
ucs_status_t xcoll_ucx_isend_sync(xcoll_ucx_worker *worker, int peer,
                                  ucp_tag_t tag, const void *buf,
                                  size_t bytes, xcoll_ucx_request *request);
/* Post a tagged receive of up to bytes into buf for a message whose tag
 * matches tag under tag_mask; peer is recorded for error messages only.
 * Once request->done, received and sender_tag are the matched message's
 * (also when a waiting message completes it at once), never the posted
 * size and tag. */
ucs_status_t xcoll_ucx_irecv(xcoll_ucx_worker *worker, int peer, ucp_tag_t tag,
                             ucp_tag_t tag_mask, void *buf, size_t bytes,
                             xcoll_ucx_request *request);

/* Drive communication; returns the number of events UCX processed. */
unsigned xcoll_ucx_progress(xcoll_ucx_worker *worker);

/* Block until UCX has something to do, xcoll_ucx_worker_signal is called, or
 * timeout_ms (milliseconds) passes. Returns at once when events are already
 * pending. Without wake-up support it sleeps a short while instead. */
void xcoll_ucx_wait_event(xcoll_ucx_worker *worker, int timeout_ms);

/* Wake a thread in xcoll_ucx_wait_event. Safe from any thread. */
void xcoll_ucx_worker_signal(xcoll_ucx_worker *worker);

#endif
