/* net.h - the net plugin interface of the nccl_like backend: one versioned
 * struct of function pointers (modelled on NCCL's ncclNet_v8_t,
 * src/include/plugin/net/net_v8.h), so that a new network is one new struct
 * and nothing else changes.
 *
 * Plugins: "socket" (net/socket/, always built), "ucx" (net/ucx/, when UCX
 * is found), "ibverbs" (net/ibverbs/, when the verbs headers are found;
 * libibverbs itself is loaded at run time), and any shared object libxcoll-net-NAME.so exporting the symbol
 * XCOLL_NET_PLUGIN_SYMBOL_V2 ("xcoll_net_plugin_v2") or, for one built
 * before the optional entries existed, XCOLL_NET_PLUGIN_SYMBOL
 * ("xcoll_net_plugin_v1"), found through
 * XCOLL_NET_PLUGIN (a NAME or a path). XCOLL_NET picks a built-in one
 * (default socket). net/example/ is such a plugin built as its own .so.
 *
 * Model (the proxy thread of backends/nccl_like is the only caller):
 *   - a receiver listens (listen), publishes the opaque handle (at most
 *     XCOLL_NET_HANDLE_MAXSIZE bytes) to its peer through the bootstrap
 *     allgather (core/bootstrap.h); the sender connects to it (connect) and
 *     the receiver accepts (accept). A connection is one-way: a send comm
 *     on one side, a recv comm on the other.
 *   - connect and accept never block: they return XCOLL_SUCCESS with a NULL
 *     comm while the handshake is not done, and the caller calls again.
 *   - isend/irecv never block: XCOLL_SUCCESS with a NULL request means "no
 *     room now, call again later" (back-pressure is never an error). At most
 *     properties.max_requests requests are in flight per comm.
 *   - messages between one send comm and its recv comm are matched in order;
 *     the tag is checked, not searched: a message whose tag differs from the
 *     posted receive's is XCOLL_ERR_PROTOCOL. A message may be shorter than
 *     the posted receive (test reports the size received); longer is
 *     XCOLL_ERR_PROTOCOL ("message truncated").
 *   - all progress happens inside test (and isend/irecv): there is no
 *     requirement for a thread of the plugin's own.
 *
 * Errors: every function returns an xcoll_status. On failure the plugin
 * calls the log function given to init with XCOLL_NET_LOG_ERROR and one
 * sentence that names the peer (address) and says what went wrong; the
 * caller copies that sentence into the communicator's error. Statuses:
 * XCOLL_ERR_INVALID_ARGUMENT (bad argument: NULL, size too large, bad
 * handle), XCOLL_ERR_REMOTE (the peer closed or reset the connection),
 * XCOLL_ERR_PROTOCOL (a bad header or tag or an oversize message),
 * XCOLL_ERR_SYSTEM (a system call failed), XCOLL_ERR_NO_MEMORY,
 * XCOLL_ERR_NOT_SUPPORTED (no device, or the operation is not provided).
 *
 * Threads: a plugin's functions may be called from several threads, but
 * never concurrently on the same comm or request. */
#ifndef XCOLL_NET_NET_H
#define XCOLL_NET_NET_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

#define XCOLL_NET_HANDLE_MAXSIZE 128 /* bytes, NCCL_NET_HANDLE_MAXSIZE */
#define XCOLL_NET_MAX_REQUESTS 32    /* per comm, NCCL_NET_MAX_REQUESTS */
#define XCOLL_NET_PLUGIN_SYMBOL "xcoll_net_plugin_v1"
/* The same struct with the optional entries (get_fds) filled in: looked up
 * first, so a plugin built against this header exports this name. */
#define XCOLL_NET_PLUGIN_SYMBOL_V2 "xcoll_net_plugin_v2"

/* Where a buffer given to reg_mr/isend/irecv may live (bit mask). */
#define XCOLL_NET_PTR_HOST 0x1
#define XCOLL_NET_PTR_CUDA 0x2

typedef enum xcoll_net_log_level {
  XCOLL_NET_LOG_ERROR = 0, /* the sentence explaining a failed call */
  XCOLL_NET_LOG_WARN = 1,
  XCOLL_NET_LOG_INFO = 2,
  XCOLL_NET_LOG_TRACE = 3,
  /* The sentence explaining a failed call that a normal end may cause: a
   * peer closed the connection at a message boundary, with a receive
   * posted ahead that nothing may need. Recorded as the call's error like
   * ERROR (xcoll_net_last_error), logged at INFO only: the caller decides
   * whether it matters, and says so itself. */
  XCOLL_NET_LOG_ERROR_EXPECTED = 4
} xcoll_net_log_level;

/* Called by the plugin with one formatted sentence (no newline). Thread-safe. */
typedef void (*xcoll_net_log_fn)(xcoll_net_log_level level, const char *message);

typedef struct xcoll_net_properties {
  char name[64];        /* the device: an interface name ("lo", "eth0") or "ucx" */
  int ptr_support;      /* XCOLL_NET_PTR_* mask */
  int speed_mbps;       /* link speed, megabits per second (0: unknown) */
  double latency_us;    /* one-way latency estimate, microseconds (0: unknown) */
  int max_comms;        /* comms the device can hold at once */
  int max_requests;     /* in-flight requests per comm, <= XCOLL_NET_MAX_REQUESTS */
  /* Receives the caller should keep posted ahead per recv comm (0: the
   * caller's default). A stream (socket) needs one; a receiver-driven plugin
   * (ibverbs: a sender waits for the clear-to-send each receive writes)
   * needs several to keep slots in flight. Added last: a plugin built
   * against an older net.h leaves it 0 when the caller zeroes the struct. */
  int recvs_ahead;
} xcoll_net_properties;

/* Opaque objects of the plugin. */
typedef struct xcoll_net_listen_comm xcoll_net_listen_comm;
typedef struct xcoll_net_send_comm xcoll_net_send_comm;
typedef struct xcoll_net_recv_comm xcoll_net_recv_comm;
typedef struct xcoll_net_request xcoll_net_request;

/* Everything a listen, connect or accept needs beyond the handle: who this
 * rank is, the job's limits, and the per-job secret when one is set (the
 * plugin authenticates every connection with it; NULL: none). */
typedef struct xcoll_net_config {
  uint64_t comm_id;        /* the communicator's id, checked in the handshake */
  int rank;                /* this rank */
  double timeout_s;        /* a handshake that makes no progress this long fails */
  /* A plugin outside libxcoll may use these; the built-in plugins take the
   * job's secret from XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE (core/auth.h). */
  const uint8_t *secret;   /* per-job secret or NULL */
  size_t secret_bytes;
} xcoll_net_config;

typedef struct xcoll_net_v1 {
  const char *name; /* "socket", "ucx", ... as XCOLL_NET spells it */
  /* Once per process before any other call; log may be NULL. Idempotent.
   * Errors: XCOLL_ERR_NOT_SUPPORTED when the network is absent. */
  xcoll_status (*init)(xcoll_net_log_fn log);
  /* Number of devices (network interfaces) in *count (>= 1 on success). */
  xcoll_status (*devices)(int *count);
  xcoll_status (*get_properties)(int device, xcoll_net_properties *properties);
  /* Listen on device for one incoming connection and write its handle
   * (an opaque blob of at most XCOLL_NET_HANDLE_MAXSIZE bytes) to handle. */
  xcoll_status (*listen)(int device, const xcoll_net_config *config,
                         void *handle, xcoll_net_listen_comm **listen_comm);
  /* Non-blocking: *send_comm stays NULL until the connection is made; call
   * again with the same arguments. peer_rank is the rank that published
   * handle (for messages and for the handshake's check). */
  xcoll_status (*connect)(int device, const xcoll_net_config *config,
                          const void *handle, int peer_rank,
                          xcoll_net_send_comm **send_comm);
  /* Non-blocking: *recv_comm stays NULL until a peer has connected and
   * passed the handshake (a stranger's connection is dropped with a WARN and
   * the accept goes on); call again. expected_rank is the rank that must be
   * calling. */
  xcoll_status (*accept)(xcoll_net_listen_comm *listen_comm, int expected_rank,
                         xcoll_net_recv_comm **recv_comm);
  /* Register bytes at data (XCOLL_NET_PTR_HOST or _CUDA) for isend/irecv on
   * comm (a send or recv comm: pass exactly one, the other NULL). */
  xcoll_status (*reg_mr)(xcoll_net_send_comm *send_comm,
                         xcoll_net_recv_comm *recv_comm, void *data,
                         size_t bytes, int ptr_type, void **mhandle);
  xcoll_status (*dereg_mr)(xcoll_net_send_comm *send_comm,
                           xcoll_net_recv_comm *recv_comm, void *mhandle);
  /* Start sending bytes at data (inside a registered region mhandle).
   * *request NULL with XCOLL_SUCCESS: retry later. */
  xcoll_status (*isend)(xcoll_net_send_comm *send_comm, const void *data,
                        size_t bytes, uint32_t tag, void *mhandle,
                        xcoll_net_request **request);
  /* Start receiving at most bytes into data. *request NULL: retry later. */
  xcoll_status (*irecv)(xcoll_net_recv_comm *recv_comm, void *data,
                        size_t bytes, uint32_t tag, void *mhandle,
                        xcoll_net_request **request);
  /* Progress; *done = 1 when request completed: *bytes (may be NULL) gets
   * the size sent or received and the request is released. On error the
   * request is released too. A request that completed before its comm
   * failed (a message that arrived whole, then the peer closed) still
   * reports done with XCOLL_SUCCESS; only requests that needed data after
   * the failure fail. */
  xcoll_status (*test)(xcoll_net_request *request, int *done, size_t *bytes);
  /* Close; requests still in flight on the comm are cancelled and released.
   * Never fail, never block longer than it takes to close a socket. */
  void (*close_send)(xcoll_net_send_comm *send_comm);
  void (*close_recv)(xcoll_net_recv_comm *recv_comm);
  void (*close_listen)(xcoll_net_listen_comm *listen_comm);

  /* ---- Optional entries, appended after the v1 fields: NULL means "not
   * provided". A plugin exported as XCOLL_NET_PLUGIN_SYMBOL (built against
   * the older header, whose struct ends above) is read only up to here by
   * xcoll_net_select, so its struct keeps working; a plugin that fills the
   * entries below exports XCOLL_NET_PLUGIN_SYMBOL_V2 as well (or instead). */

  /* The file descriptors a caller may poll(2) to sleep until a request in
   * flight on comm (a send or recv comm: pass exactly one, the other NULL)
   * can make progress: readable (POLLIN) for a recv comm, writable
   * (POLLOUT) for a send comm. Writes at most max_fds descriptors to fds and
   * their number to *count (0: nothing to poll; the caller spins instead).
   * A ready descriptor is a hint: the caller still calls test. A peer that
   * closes or resets makes them ready (POLLIN/POLLHUP/POLLERR), so a
   * sleeper wakes and test reports the failure. The descriptors stay the
   * plugin's: the caller never reads, writes or closes them. Errors: as
   * test's for a broken comm (the caller may also simply not poll). */
  xcoll_status (*get_fds)(xcoll_net_send_comm *send_comm,
                          xcoll_net_recv_comm *recv_comm, int *fds,
                          int max_fds, int *count);
} xcoll_net_v1;

/* The plugin XCOLL_NET / XCOLL_NET_PLUGIN select, initialised (net/net.c).
 * Errors: XCOLL_ERR_ENV naming the variable for an unknown name or a plugin
 * that cannot be loaded (dlopen's message included), or the plugin's init
 * status. Thread-safe; the choice is made once per process and name. */
xcoll_status xcoll_net_select(const xcoll_net_v1 **net, char *why,
                              size_t why_bytes);

/* A log function for plugins (pass it to init): WARN, INFO and TRACE go to
 * core's log (XCOLL_DEBUG); ERROR goes to the log at WARN level and is also
 * kept, per thread, for xcoll_net_last_error. xcoll_net_select initialises
 * the plugin it returns with it; a caller that wants another log calls the
 * plugin's init again with its own (init is idempotent and takes the latest
 * log function). */
void xcoll_net_log_bridge(xcoll_net_log_level level, const char *message);

/* The last sentence the calling thread's plugin calls logged at
 * XCOLL_NET_LOG_ERROR through xcoll_net_log_bridge ("" when none). Valid until
 * the next such call on this thread. */
const char *xcoll_net_last_error(void);

/* Built-in plugins. */
extern const xcoll_net_v1 xcoll_net_socket;
#ifdef XCOLL_HAVE_UCX
extern const xcoll_net_v1 xcoll_net_ucx;
#endif
#ifdef XCOLL_HAVE_IBVERBS
extern const xcoll_net_v1 xcoll_net_ibverbs;
#endif

#endif
