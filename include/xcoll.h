/*
 * xcoll.h - the whole public C API of xcoll, a collective communication
 * library with pluggable backends (tcp, ucx, nccl_like).
 *
 * Copyright (c) 2026, the xcoll authors. BSD 3-Clause License (see LICENSE).
 *
 * Conventions (they follow NCCL's and torch.distributed's):
 * - Every function returns an xcoll_status. XCOLL_SUCCESS is 0. On any other
 *   status, xcoll_comm_last_error(comm) (or xcoll_last_error() when there is
 *   no communicator yet) holds a sentence that says what went wrong and, where
 *   it can, what to do about it.
 * - Counts are in elements of the given datatype, never bytes, unless a name
 *   says _bytes. Times are in seconds unless a name says _ms or _us.
 * - The library never prints to stdout, never calls exit() or abort().
 * - Collectives on one communicator must be called in the same order on every
 *   rank (as in NCCL and MPI). Calls on one communicator from several threads
 *   at once must be serialised by the caller; different communicators may be
 *   used concurrently from different threads.
 * - A communicator is bound to a device, as in NCCL: config.device (or
 *   XCOLL_DEVICE) is XCOLL_DEVICE_HOST for a host rank, whose buffers are
 *   host memory, or a CUDA device ordinal for a GPU rank. A buffer in CUDA
 *   device memory handed to a host rank is XCOLL_ERR_INVALID_ARGUMENT
 *   (detected once the CUDA driver is loaded in the process); managed
 *   memory counts as host memory. Host ranks require the stream argument
 *   of the non-blocking calls to be NULL.
 * - GPU ranks on tcp and ucx (Gloo's way): buffers may be device or host
 *   memory. At call time the caller's stream (a cudaStream_t; NULL = the
 *   legacy default stream; the blocking calls use NULL) is synchronised and
 *   device inputs are copied to pinned host memory on it; the host
 *   algorithm then runs as on a host rank, and the result is copied back on
 *   the same stream, which is synchronised again, when the call completes:
 *   before a blocking call returns, and inside the xcoll_wait or xcoll_test
 *   that first reports a non-blocking call done. So: work queued on the
 *   stream before the call is seen by it; results are in device memory
 *   once the call has completed; work queued on the stream after a
 *   non-blocking call must not read its recvbuf until xcoll_wait or a
 *   successful xcoll_test has returned (as with Gloo's Work.wait()). The
 *   driver (libcuda.so.1) is loaded at run time: no CUDA toolkit is needed
 *   to build.
 * - GPU ranks on nccl_like (NCCL's way): buffers must be memory the device
 *   reaches (cudaMalloc'd, managed or pinned); plain host memory is
 *   XCOLL_ERR_INVALID_ARGUMENT. Each call is *enqueued* on the caller's
 *   stream at call time as one ring kernel (NULL = the legacy default
 *   stream) and returns without waiting for it, except that the blocking
 *   calls then wait for that kernel (and so for everything queued on the
 *   stream before it). So: work queued on the stream before the call is
 *   seen by it; work queued on the same stream after the call sees its
 *   results, with no host synchronisation; another stream must wait for it
 *   (an event, or xcoll_wait). A communicator's kernels run one at a time
 *   in issue order, whatever their streams: a call on stream B waits on
 *   the device for the previous call on stream A, as NCCL orders them.
 *   xcoll_wait / xcoll_test complete when the kernel has finished. Ranks of
 *   one communicator may mix GPU and host ranks; results are the same bits
 *   as on a host-only ring. A GPU rank needs a build with nvcc (the kernels
 *   are compiled in); without it, creation is XCOLL_ERR_NOT_SUPPORTED.
 */
#ifndef XCOLL_H
#define XCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API. libxcoll.so is built with hidden visibility, so
 * that only the functions declared here are exported; its internal
 * functions (store, transports, algorithms) stay private to the library. */
#if defined(__GNUC__) || defined(__clang__)
#define XCOLL_API __attribute__((visibility("default")))
#else
#define XCOLL_API
#endif

#define XCOLL_VERSION_MAJOR 0
#define XCOLL_VERSION_MINOR 1
#define XCOLL_VERSION_PATCH 0
/* One integer, comparable: major * 10000 + minor * 100 + patch. */
#define XCOLL_VERSION                                                          \
  (XCOLL_VERSION_MAJOR * 10000 + XCOLL_VERSION_MINOR * 100 + XCOLL_VERSION_PATCH)

/* Status codes. Stable numbers: they may be logged and compared. */
typedef enum xcoll_status {
  XCOLL_SUCCESS = 0,
  XCOLL_ERR_INVALID_ARGUMENT = 1, /* a NULL buffer, bad count, dtype, op, root... */
  XCOLL_ERR_INVALID_USAGE = 2,    /* destroyed or aborted communicator, wrong call order */
  XCOLL_ERR_SYSTEM = 3,           /* an operating system call failed (errno in the message) */
  XCOLL_ERR_NO_MEMORY = 4,        /* an allocation failed */
  XCOLL_ERR_TIMEOUT = 5,          /* XCOLL_TIMEOUT_S passed without progress */
  XCOLL_ERR_REMOTE = 6,           /* a peer died, closed its connection or aborted */
  XCOLL_ERR_PROTOCOL = 7,         /* a peer sent a message whose header failed a check */
  XCOLL_ERR_NOT_SUPPORTED = 8,    /* not compiled in, or not offered by this backend */
  XCOLL_ERR_ABORTED = 9,          /* xcoll_comm_abort() was called on this communicator */
  XCOLL_ERR_ENV = 10,             /* a malformed XCOLL_* or launcher environment variable */
  XCOLL_ERR_INTERNAL = 11,        /* a bug in xcoll: please report it */
  XCOLL_IN_PROGRESS = 12          /* returned by nothing public; internal progress marker */
} xcoll_status;

/* Element types. float16 is IEEE 754 binary16; bfloat16 is the upper half of
 * a float32. Both are reduced in float32 and rounded to nearest even. */
typedef enum xcoll_datatype {
  XCOLL_INT8 = 0,
  XCOLL_UINT8 = 1,
  XCOLL_INT32 = 2,
  XCOLL_UINT32 = 3,
  XCOLL_INT64 = 4,
  XCOLL_UINT64 = 5,
  XCOLL_FLOAT16 = 6,
  XCOLL_BFLOAT16 = 7,
  XCOLL_FLOAT32 = 8,
  XCOLL_FLOAT64 = 9,
  XCOLL_NUM_DATATYPES = 10
} xcoll_datatype;

/* Reduction operators. XCOLL_AVG is the sum divided by the world size
 * (NCCL's ncclAvg); it is defined for floating-point types only and is
 * XCOLL_ERR_INVALID_ARGUMENT for integer types. XCOLL_BAND, XCOLL_BOR and
 * XCOLL_BXOR are bitwise and, or, exclusive or (MPI's MPI_BAND, MPI_BOR,
 * MPI_BXOR; torch.distributed's ReduceOp.BAND, BOR, BXOR); they are defined
 * for the integer types only and are XCOLL_ERR_INVALID_ARGUMENT for
 * float16, bfloat16, float32 and float64.
 *
 * Values from XCOLL_NUM_OPS up are not in this enum: they are the
 * pre-multiplied sums a communicator hands out
 * (xcoll_op_create_premul_sum, NCCL's ncclRedOpCreatePreMulSum), valid on
 * that communicator only, until xcoll_op_destroy. */
typedef enum xcoll_op {
  XCOLL_SUM = 0,
  XCOLL_PROD = 1,
  XCOLL_MIN = 2,
  XCOLL_MAX = 3,
  XCOLL_AVG = 4,
  XCOLL_BAND = 5,
  XCOLL_BOR = 6,
  XCOLL_BXOR = 7,
  XCOLL_NUM_OPS = 8
} xcoll_op;

/* Pre-multiplied sums live at once on one communicator: their xcoll_op
 * values are XCOLL_NUM_OPS to XCOLL_NUM_OPS + XCOLL_MAX_PREMUL_OPS - 1. */
#define XCOLL_MAX_PREMUL_OPS 256

/* Where xcoll_op_create_premul_sum's scalar lives (NCCL's
 * ncclScalarResidence_t). */
typedef enum xcoll_scalar_residence {
  /* Host memory, read once by xcoll_op_create_premul_sum (NCCL's
   * ncclScalarHostImmediate): the caller may reuse it at once. */
  XCOLL_SCALAR_HOST = 0,
  /* CUDA device memory, read by each collective that uses the op when it
   * runs (NCCL's ncclScalarDevice): it must stay valid while the op lives.
   * Only on a communicator bound to a CUDA device. */
  XCOLL_SCALAR_DEVICE = 1
} xcoll_scalar_residence;

/* Opaque handles. */
typedef struct xcoll_comm *xcoll_comm_t;
typedef struct xcoll_request *xcoll_request_t;
/* A device stream (cudaStream_t) for nccl_like; NULL for host buffers. */
typedef void *xcoll_stream_t;

/* ---- errors and versions ---- */

/* A short constant description of a status ("remote peer failed", ...).
 * Never NULL; unknown values give "unknown status". */
XCOLL_API const char *xcoll_strerror(xcoll_status status);

/* The message of the last error on this communicator, or "" if none.
 * Valid until the next call on comm. comm may be NULL: then it is the same as
 * xcoll_last_error(). */
XCOLL_API const char *xcoll_comm_last_error(xcoll_comm_t comm);

/* The message of the last error raised on the calling thread (thread-local),
 * for failures where no communicator exists, such as xcoll_comm_init. */
XCOLL_API const char *xcoll_last_error(void);

/* 1 when the message xcoll_comm_last_error(comm) returns was already
 * written to stderr as the library's WARN line (XCOLL_DEBUG is WARN, the
 * default, or more, and XCOLL_DEBUG_FILE is not set), 0 when it was not (a
 * failure the library reports quietly, XCOLL_DEBUG=NONE, a log file, or no
 * error). comm may be NULL: then it is about xcoll_last_error(). A program
 * that reports a failed call prints the message only when this is 0, so
 * that each failure appears once; xcoll's tools do. */
XCOLL_API int xcoll_comm_last_error_logged(xcoll_comm_t comm);

/* The library's version, XCOLL_VERSION of the build that is linked. */
XCOLL_API int xcoll_version(void);

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
XCOLL_API size_t xcoll_datatype_size(xcoll_datatype dtype);

/* "float32", "sum", "band", ...; "premul_sum" for any value a
 * pre-multiplied sum can have (XCOLL_NUM_OPS to XCOLL_NUM_OPS +
 * XCOLL_MAX_PREMUL_OPS - 1, live or not); "unknown" for other values. */
XCOLL_API const char *xcoll_datatype_name(xcoll_datatype dtype);
XCOLL_API const char *xcoll_op_name(xcoll_op op);

/* ---- communicators ---- */

/* How to build a communicator without the environment. Fill it with
 * xcoll_config_init() first, then change what you need. Strings are copied. */
typedef struct xcoll_config {
  int rank;             /* this process, 0 <= rank < world_size */
  int world_size;       /* number of ranks, >= 1 */
  int local_rank;       /* rank among the processes on this host; -1: unknown */
  int local_world_size; /* processes on this host; -1: unknown */
  const char *master_addr; /* host of rank 0's rendezvous store; NULL: "127.0.0.1" */
  int master_port;      /* port of the store, 1..65535; a world of one rank
                           ignores it (its store takes a free port on
                           127.0.0.1) and also accepts 0 */
  const char *backend;  /* "tcp", "ucx", "nccl_like"; NULL: XCOLL_BACKEND or "tcp" */
  double timeout_s;     /* how long any wait may last; <= 0: XCOLL_TIMEOUT_S or 300 */
  int device;           /* XCOLL_DEVICE_HOST, or a CUDA device ordinal >= 0
                           (a GPU rank: tcp and ucx stage device buffers
                           through pinned host memory; nccl_like runs CUDA
                           ring kernels on the caller's stream) */
} xcoll_config;

/* config.device of a host rank: buffers are host memory. */
#define XCOLL_DEVICE_HOST (-1)

/* Defaults: rank 0, world_size 1, local_rank/local_world_size -1,
 * master_addr NULL, master_port 29500, backend NULL, timeout_s 0,
 * device XCOLL_DEVICE_HOST. */
XCOLL_API void xcoll_config_init(xcoll_config *config);

/* Create the world communicator from the environment, in this order of
 * precedence: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT; Open MPI's OMPI_COMM_WORLD_RANK, _SIZE,
 * _LOCAL_RANK, _LOCAL_SIZE; Slurm's SLURM_PROCID, SLURM_NTASKS,
 * SLURM_LOCALID. With none of them set, a world of one rank. The device
 * comes from XCOLL_DEVICE: unset or "host" for a host rank; "cuda" for the
 * CUDA device numbered LOCAL_RANK (one GPU per local rank, as torchrun
 * programs place them), "cuda:N" or "N" for device N. Rank 0 hosts the
 * rendezvous store at MASTER_ADDR:MASTER_PORT; the others connect to it,
 * retrying until XCOLL_TIMEOUT_S.
 * Collective over all ranks of the job: every rank must call it.
 * Errors: XCOLL_ERR_ENV (a malformed variable, named in the message),
 * XCOLL_ERR_NOT_SUPPORTED (XCOLL_DEVICE names a CUDA device and no CUDA
 * driver could be loaded, or the backend is nccl_like in a build without
 * nvcc, which has no CUDA ring kernels), XCOLL_ERR_INVALID_ARGUMENT
 * (no such CUDA device),
 * XCOLL_ERR_TIMEOUT (master unreachable: address and port in the message),
 * XCOLL_ERR_SYSTEM (port taken, socket failure), XCOLL_ERR_NOT_SUPPORTED
 * (backend not compiled in: the message lists those that are),
 * XCOLL_ERR_NO_MEMORY, XCOLL_ERR_REMOTE. On error *comm is set to NULL. */
XCOLL_API xcoll_status xcoll_comm_init_env(xcoll_comm_t *comm);

/* Create the world communicator from an explicit configuration. Same
 * semantics and errors as xcoll_comm_init_env, plus XCOLL_ERR_INVALID_ARGUMENT
 * for an inconsistent config (rank outside [0, world_size), port out of range). */
XCOLL_API xcoll_status xcoll_comm_init(xcoll_comm_t *comm,
                                       const xcoll_config *config);

/* A key-value store that the caller already has (torch.distributed's c10d
 * Store, a job scheduler's), for xcoll_comm_init_kv. xcoll uses it in place
 * of its own rendezvous store: it publishes and reads the small records of
 * connection setup (addresses, handles) and draws ids from counters. Keys are
 * NUL-terminated strings of at most 1024 bytes, all starting with "c<id>/" or
 * "xcoll/"; values are byte strings of at most 64 MiB.
 * The functions are called from the thread that calls xcoll_comm_init_kv,
 * xcoll_comm_split and xcoll_comm_destroy, never concurrently for one
 * communicator; context is passed back unchanged. Each returns XCOLL_SUCCESS,
 * or XCOLL_ERR_TIMEOUT, XCOLL_ERR_REMOTE or XCOLL_ERR_SYSTEM, which xcoll
 * passes on with a message naming the operation and the key.
 * The store must outlive every communicator made with it (split children
 * included). */
typedef struct xcoll_kv_store {
  void *context;
  /* Store bytes bytes of value under key, replacing any earlier value. */
  xcoll_status (*set)(void *context, const char *key, const void *value,
                      size_t bytes);
  /* Wait up to timeout_s seconds for key to exist, then return a copy of its
   * value in *value, allocated with malloc() (xcoll frees it with free()),
   * and its size in bytes in *bytes. A key still missing after timeout_s
   * is XCOLL_ERR_TIMEOUT. */
  xcoll_status (*get)(void *context, const char *key, double timeout_s,
                      void **value, size_t *bytes);
  /* Add delta to the integer counter under key (a missing key counts as 0)
   * atomically across ranks, and return the new value in *result. */
  xcoll_status (*add)(void *context, const char *key, int64_t delta,
                      int64_t *result);
} xcoll_kv_store;

/* Create the world communicator from config, meeting the other ranks through
 * the caller's store instead of xcoll's own: no rank starts a rendezvous
 * server and nobody connects to config->master_port; config->master_addr
 * (NULL: "127.0.0.1") only picks the network interface that faces the other
 * ranks. The struct is copied; its functions and
 * context must stay valid until the last communicator made from this one is
 * destroyed. Collective over all ranks of config->world_size.
 * Not offered by a store this way: the death of a rank noticed by the store
 * itself, and (on nccl_like) the notice of one rank's failure that other
 * ranks get through the store; a peer's death is still seen on the data
 * connections, within XCOLL_TIMEOUT_S at worst.
 * Errors: those of xcoll_comm_init, plus XCOLL_ERR_INVALID_ARGUMENT for a
 * NULL store or a NULL function in it, and the store's own errors
 * (XCOLL_ERR_TIMEOUT naming the key a rank waited for). */
XCOLL_API xcoll_status xcoll_comm_init_kv(xcoll_comm_t *comm,
                                          const xcoll_config *config,
                                          const xcoll_kv_store *store);

/* Wait for this rank's outstanding requests, close connections and free comm.
 * Not collective, but peers still using comm will see it close. comm may be
 * NULL (nothing is done). Using comm afterwards is undefined; the library
 * detects it where it can (XCOLL_ERR_INVALID_USAGE). */
XCOLL_API xcoll_status xcoll_comm_destroy(xcoll_comm_t comm);

/* Make every pending and future operation on comm fail with
 * XCOLL_ERR_ABORTED, wake up whatever waits on it, and tell peers that this
 * rank aborted. Safe to call from another thread while a collective is
 * blocked. comm must still be destroyed with xcoll_comm_destroy. */
XCOLL_API xcoll_status xcoll_comm_abort(xcoll_comm_t comm);

/* Pass as color to xcoll_comm_split to get no new communicator (*newcomm = NULL). */
#define XCOLL_SPLIT_NOCOLOR (-1)

/* Split comm into disjoint communicators, one per distinct color (>= 0):
 * ranks with the same color join one, ordered by key and then by their rank
 * in comm (MPI_Comm_split / ncclCommSplit semantics). Collective over comm.
 * The new communicator uses comm's backend and has its own connections, so it
 * may be used concurrently with comm from another thread.
 * Errors: XCOLL_ERR_INVALID_ARGUMENT (color < -1, newcomm NULL), and those
 * of xcoll_comm_init. */
XCOLL_API xcoll_status xcoll_comm_split(xcoll_comm_t comm, int color, int key,
                                        xcoll_comm_t *newcomm);

/* Flags of xcoll_comm_shrink (NCCL_SHRINK_DEFAULT / NCCL_SHRINK_ABORT). */
#define XCOLL_SHRINK_DEFAULT 0 /* comm has nothing in flight on this rank */
#define XCOLL_SHRINK_ABORT 1   /* abort comm first (xcoll_comm_abort) */

/* Make a communicator of comm's ranks less the exclude_count ranks of
 * exclude_ranks (ranks of comm, in any order), as ncclCommShrink does: the
 * ranks left keep their order and are numbered 0..P'-1, P' = world size of
 * comm - exclude_count. Collective over the ranks left only: every one of
 * them passes the same set (the excluded ranks do not call it; they may be
 * dead), and none of them waits for or talks to an excluded rank. Works on a
 * broken communicator (a peer died: its error names the rank to exclude).
 * The new communicator has comm's backend and its own connections; comm
 * stays as it was (aborted with XCOLL_SHRINK_ABORT) and must still be
 * destroyed, before or after the new one.
 * flags: XCOLL_SHRINK_DEFAULT when this rank has no collective in flight on
 * comm (every request waited for); XCOLL_SHRINK_ABORT to abort comm first,
 * which fails what is in flight with XCOLL_ERR_ABORTED and waits for it to
 * end (use it right after a failure, or when a non-blocking call may still
 * be blocked).
 * A caller that is itself in exclude_ranks gets XCOLL_SUCCESS and
 * *newcomm = NULL and touches nothing, as NCCL gives such a rank no
 * communicator.
 * Meeting goes through the rendezvous store, which lives in rank 0 of the
 * world unless the launcher serves it (xcollrun --store-host launcher,
 * XCOLL_STORE_EXTERNAL=1) or it is the caller's (xcoll_comm_init_kv): with
 * the store in rank 0, the world's rank 0 must be alive. When rank 0 holds
 * the store and is among the ranks left, the store moves to the new
 * communicator, so comm may be destroyed first.
 * Errors: XCOLL_ERR_INVALID_ARGUMENT (newcomm NULL, exclude_count < 0,
 * exclude_ranks NULL with exclude_count > 0, a rank outside [0, world size),
 * a rank listed twice, every rank excluded, unknown flags, or a rank left
 * passed a different set: the message names it), XCOLL_ERR_INVALID_USAGE
 * (comm NULL or destroyed; XCOLL_SHRINK_DEFAULT while a collective is in
 * flight on comm), and those of xcoll_comm_init (XCOLL_ERR_TIMEOUT naming
 * the rank that never arrived, when a rank left did not call it). */
XCOLL_API xcoll_status xcoll_comm_shrink(xcoll_comm_t comm,
                                         const int *exclude_ranks,
                                         int exclude_count, int flags,
                                         xcoll_comm_t *newcomm);

/* The ranks of comm known to be gone, for xcoll_comm_shrink's exclude list
 * without a coordinator: those whose process died (the rendezvous store
 * saw its connection drop without a close) and those that destroyed comm.
 * Writes the first min(*count, capacity) of them, ascending, to ranks and
 * their number to *count; never lists the caller. Works on a broken
 * communicator. Local, not collective: it asks the store, so survivors
 * that ask while a second peer is still dying may get different lists, and
 * xcoll_comm_shrink then fails naming the rank whose list differs. Ask
 * once the failure that broke comm has been seen. A rank that is stopped
 * (SIGSTOP) or cut off is not listed: only its timeout names it.
 * Errors: XCOLL_ERR_INVALID_ARGUMENT (count NULL, capacity < 0, ranks NULL
 * with capacity > 0), XCOLL_ERR_INVALID_USAGE (comm NULL or destroyed),
 * XCOLL_ERR_NOT_SUPPORTED (comm made by xcoll_comm_init_kv: the caller's
 * store records no departures), and the store's errors (XCOLL_ERR_REMOTE
 * or XCOLL_ERR_TIMEOUT when its host, the world's rank 0, is gone). */
XCOLL_API xcoll_status xcoll_comm_failed_ranks(xcoll_comm_t comm, int *ranks,
                                               int capacity, int *count);

/* Getters. Errors: XCOLL_ERR_INVALID_ARGUMENT for NULL pointers. */
XCOLL_API xcoll_status xcoll_comm_rank(xcoll_comm_t comm, int *rank);
XCOLL_API xcoll_status xcoll_comm_size(xcoll_comm_t comm, int *world_size);
XCOLL_API xcoll_status xcoll_comm_local_rank(xcoll_comm_t comm,
                                             int *local_rank);
/* The device comm is bound to: XCOLL_DEVICE_HOST or a CUDA ordinal.
 * Errors: XCOLL_ERR_INVALID_ARGUMENT (device NULL), XCOLL_ERR_INVALID_USAGE
 * (comm destroyed or NULL). */
XCOLL_API xcoll_status xcoll_comm_device(xcoll_comm_t comm, int *device);
/* The backend's name ("tcp", ...); "" for NULL comm. */
XCOLL_API const char *xcoll_comm_backend(xcoll_comm_t comm);
/* Which algorithm and protocol ran the collective started last on comm
 * (after its completion; for non-blocking calls, after xcoll_wait), as NCCL
 * reports them at NCCL_DEBUG=INFO: for host algorithms the XCOLL_ALGO name
 * ("ring", "recursive_doubling", "rabenseifner", "binomial", "chain",
 * "dissemination", "local_copy" at one rank) and protocol "p2p"; for
 * nccl_like "ring" with "simple" or "ll". Both are "none" before the first
 * collective. The strings are static: valid for the life of the process.
 * Works on a broken communicator. Errors: XCOLL_ERR_INVALID_ARGUMENT (NULL
 * algorithm or protocol), XCOLL_ERR_INVALID_USAGE (NULL or destroyed comm). */
XCOLL_API xcoll_status xcoll_comm_last_algorithm(xcoll_comm_t comm,
                                                 const char **algorithm,
                                                 const char **protocol);
/* How this rank's ring connections move bytes, as XCOLL_DEBUG=INFO's
 * "channel 00 : 0 -> 1 via SHM" lines name them (NCCL's "via P2P/IPC",
 * "via SHM", "via NET"): *send for the connection to the next rank, *recv
 * for the one from the previous. nccl_like: "P2P" (device memory between
 * two GPU ranks of one GPU), "SHM" (shared memory between ranks of one
 * host) or "NET" (the proxy over the net plugin, XCOLL_NET), "none" in a
 * world of one; tcp and ucx: the backend's name.
 * Static strings, valid for the life of the process. Errors:
 * XCOLL_ERR_INVALID_ARGUMENT (NULL send or recv), XCOLL_ERR_INVALID_USAGE
 * (NULL or destroyed comm). */
XCOLL_API xcoll_status xcoll_comm_transport(xcoll_comm_t comm,
                                            const char **send,
                                            const char **recv);
/* The host census taken when comm was created (docs/how-it-works.md, "The
 * host census"): *host_ranks, the ranks of comm on this rank's host (the
 * same running kernel, by boot id), itself included; *host_cpus, the CPUs
 * in the union of their affinity masks (sched_getaffinity); *own_cpus, the
 * CPUs this rank may run on. Each is at least 1. A host whose ranks
 * outnumber its CPUs is oversubscribed: its ranks time-share cores, and
 * there a waiting rank does not spin and some algorithms are chosen for
 * it. Ranks pinned one per core (mpirun's binding, srun --cpu-bind=cores)
 * have one CPU each and are not oversubscribed. Any output may be NULL.
 * Works on a broken communicator. Errors: XCOLL_ERR_INVALID_USAGE (NULL or
 * destroyed comm). */
XCOLL_API xcoll_status xcoll_comm_host(xcoll_comm_t comm, int *host_ranks,
                                       int *host_cpus, int *own_cpus);

/* Write comm's flight recorder to path as one JSON object (format and
 * fields: docs/flight-recorder.md; "version" says which): who this rank is,
 * why the communicator broke if it did, and its last XCOLL_FLIGHT_RECORDER
 * calls (default 1024), oldest first, each with its sequence number,
 * collective, count (elements, as the call took it), dtype, op, root or
 * peer, algorithm, protocol, state (queued, started, completed, failed),
 * status and monotonic timestamps in microseconds; the host collective
 * running now also says which step it is at and which peers it waits on.
 * path NULL: XCOLL_FLIGHT_RECORDER_DIR/xcoll_fr.c<comm_id>.r<rank>.json.
 * The file is written under a temporary name and renamed, so a reader never
 * sees half of it. Not collective; callable from any thread, also while a
 * collective is blocked and on a broken communicator. tools/xcoll-fr reads
 * the dumps of all ranks and names the rank that holds the job up. Errors:
 * XCOLL_ERR_INVALID_USAGE (NULL or destroyed comm), XCOLL_ERR_INVALID_ARGUMENT
 * (path NULL and XCOLL_FLIGHT_RECORDER_DIR unset), XCOLL_ERR_SYSTEM (the
 * file cannot be written: path and errno in the message),
 * XCOLL_ERR_NO_MEMORY. */
XCOLL_API xcoll_status xcoll_comm_dump(xcoll_comm_t comm, const char *path);

/* ---- reduction operators made at run time ---- */

/* A pre-multiplied sum (NCCL's ncclRedOpCreatePreMulSum, which PyTorch's
 * ReduceOp.PREMUL_SUM uses): the reductions that take the returned *op
 * compute, element by element, recvbuf[i] = sum over ranks r of
 * (scalar * sendbuf_r[i]), each product rounded to dtype (float16 and
 * bfloat16 multiply in float32 and round to nearest even, as they reduce;
 * integers wrap modulo 2^bits, two's complement for the signed types). The
 * op is valid on comm only, with dtype only, until xcoll_op_destroy.
 *
 * op:        receives the new operator, a value from XCOLL_NUM_OPS up
 *            (XCOLL_NUM_OPS + a slot of comm's table, as NCCL's dynamic
 *            ops follow ncclNumOps).
 * scalar:    one element of dtype (not a double: a float16 scalar is 2
 *            bytes of float16), in host memory for XCOLL_SCALAR_HOST, read
 *            before the call returns; in CUDA device memory for
 *            XCOLL_SCALAR_DEVICE, read by each collective when it runs.
 * dtype:     the only dtype the op may be used with; every xcoll_datatype,
 *            integer types included (as NCCL).
 * residence: where scalar lives (xcoll_scalar_residence).
 *
 * How it runs: on host ranks (every backend: tcp, ucx, nccl_like) the
 * collective first multiplies this rank's input by the scalar into a
 * temporary buffer of the input's size (one extra pass over the input and
 * that much memory until the collective completes; the caller's sendbuf is
 * never written unless it is also the output), then runs XCOLL_SUM. Ranks
 * compare the op's kind in each collective's fingerprint (a premul sum
 * against a plain sum is a desync), not the scalar, as NCCL does not.
 * Not built yet: on a communicator bound to a CUDA device (GPU ranks of
 * nccl_like, and tcp/ucx staging device buffers) a collective with a premul
 * op returns XCOLL_ERR_NOT_SUPPORTED ("premul sum on a GPU rank: not built
 * yet"); the op itself, with either residence, can be created there.
 *
 * The op may be destroyed as soon as the last call that takes it has
 * returned, even if that call is non-blocking and not complete (NCCL's
 * rule): the scalar was applied when the call was made.
 *
 * Errors:
 *  XCOLL_ERR_INVALID_ARGUMENT: op or scalar NULL; dtype not an
 *    xcoll_datatype; residence not an xcoll_scalar_residence;
 *    XCOLL_SCALAR_DEVICE on a communicator bound to the host (no device to
 *    read from); XCOLL_SCALAR_HOST with scalar in CUDA device memory.
 *  XCOLL_ERR_INVALID_USAGE: comm NULL or destroyed; XCOLL_MAX_PREMUL_OPS
 *    ops already live on comm (destroy some).
 *  A broken communicator: the status that broke it.
 * The message names the argument. */
XCOLL_API xcoll_status xcoll_op_create_premul_sum(xcoll_op *op,
                                                  const void *scalar,
                                                  xcoll_datatype dtype,
                                                  xcoll_scalar_residence residence,
                                                  xcoll_comm_t comm);

/* Release an operator made by xcoll_op_create_premul_sum on comm (NCCL's
 * ncclRedOpDestroy); its value may be handed out again. Errors:
 * XCOLL_ERR_INVALID_ARGUMENT (op is a built-in operator, or not a live
 * premul sum of comm: never created, or destroyed already),
 * XCOLL_ERR_INVALID_USAGE (comm NULL or destroyed). Works on a broken
 * communicator. */
XCOLL_API xcoll_status xcoll_op_destroy(xcoll_op op, xcoll_comm_t comm);

/* ---- the table of collectives ----
 *
 * One row per call: what xcoll's validation, dispatch, staging, fingerprints,
 * the nccl_like engine, xcoll-perf and the torch backend read to know a
 * call's shape. Nothing else writes a collective's shape. */
typedef enum xcoll_coll_kind {
  XCOLL_COLL_ALLREDUCE = 0,
  XCOLL_COLL_ALLGATHER = 1,
  XCOLL_COLL_REDUCE_SCATTER = 2,
  XCOLL_COLL_BROADCAST = 3,
  XCOLL_COLL_REDUCE = 4,
  XCOLL_COLL_BARRIER = 5,
  XCOLL_COLL_ALLTOALL = 6,
  XCOLL_COLL_ALLTOALLV = 7,
  XCOLL_COLL_GATHER = 8,
  XCOLL_COLL_SCATTER = 9,
  XCOLL_COLL_SEND = 10,
  XCOLL_COLL_RECV = 11,
  XCOLL_NUM_COLLS = 12
} xcoll_coll_kind;

typedef struct xcoll_coll_info {
  const char *name;       /* "allreduce": the C call is xcoll_<name> */
  const char *count_name; /* the count argument's name: "count", "sendcount"
                             (allgather), "recvcount" (reduce_scatter) */
  int has_op;             /* takes an xcoll_op */
  int has_root;           /* takes a root (broadcast, reduce, gather, scatter) */
  int has_peer;           /* takes a peer (send, recv) */
  int vector;             /* counts per peer in arrays (alltoallv): the
                             element counts below do not apply */
  /* Elements of sendbuf read and of recvbuf written on one rank:
   * count * world_size where *_per_rank is 1, else count; 0 where the
   * buffer is unused (*_root_only on a rank that is not the root; send's
   * recvbuf, recv's sendbuf, barrier's both). */
  int send_per_rank, recv_per_rank;
  int send_root_only, recv_root_only;
  int send_unused, recv_unused;
  /* The in-place form in words ("sendbuf == recvbuf"), or NULL if none. */
  const char *in_place;
  /* busbw = algbw * busbw_scale * ((P-1)/P if busbw_minus_one else 1),
   * nccl-tests' factors (doc/PERFORMANCE.md): allreduce 2(P-1)/P;
   * allgather, reduce_scatter, alltoall, gather, scatter (P-1)/P;
   * broadcast, reduce, send/recv 1; barrier 0. */
  int busbw_scale, busbw_minus_one;
} xcoll_coll_info;

/* The row of kind, or NULL for a value outside the enum. */
XCOLL_API const xcoll_coll_info *xcoll_coll_info_of(xcoll_coll_kind kind);

/* Elements of sendbuf read and of recvbuf written by a call of kind with
 * count on a rank of a world of world_size ranks (is_root: this rank is the
 * root; ignored without a root), and the "size" nccl-tests reports in
 * elements (the larger buffer's, as if on the root). Errors:
 * XCOLL_ERR_INVALID_ARGUMENT for an unknown kind, the vector kind
 * (alltoallv), world_size < 1, or a product that overflows size_t. Any
 * output pointer may be NULL. */
XCOLL_API xcoll_status xcoll_coll_shape(xcoll_coll_kind kind, size_t count,
                                        int world_size, int is_root,
                                        size_t *send_elems, size_t *recv_elems,
                                        size_t *size_elems);

/* nccl-tests' bus-bandwidth factor for kind at world_size ranks (busbw =
 * algbw * factor); 0 for an unknown kind or world_size < 1. */
XCOLL_API double xcoll_coll_busbw_factor(xcoll_coll_kind kind, int world_size);

/* ---- collectives (blocking) ----
 *
 * Common errors of every collective:
 *  XCOLL_ERR_INVALID_ARGUMENT: NULL buffer with count > 0, count * element
 *    size overflows size_t, unknown dtype or op, XCOLL_AVG on an integer
 *    type, XCOLL_BAND, XCOLL_BOR or XCOLL_BXOR on a floating-point type, a
 *    premul sum op that is not live on comm or was made for another dtype,
 *    root outside [0, world_size), a non-NULL stream on a host backend,
 *    a buffer in CUDA device memory on a host rank, sendbuf and recvbuf
 *    that overlap without being the in-place form (sendbuf == recvbuf;
 *    allgather: sendbuf == recvbuf + rank * sendcount elements;
 *    reduce_scatter: recvbuf == sendbuf + rank * recvcount elements).
 *    The message names the argument. Nothing is sent: peers are not affected
 *    only if every rank makes the same mistake.
 *  XCOLL_ERR_NOT_SUPPORTED: a premul sum op on a communicator bound to a
 *    CUDA device (see xcoll_op_create_premul_sum).
 *  XCOLL_ERR_INVALID_USAGE: comm destroyed or NULL.
 *  XCOLL_ERR_REMOTE: a peer died or aborted (the message names its rank).
 *  XCOLL_ERR_TIMEOUT: no progress for XCOLL_TIMEOUT_S seconds.
 *  XCOLL_ERR_PROTOCOL: a malformed message from a peer (named).
 *  XCOLL_ERR_ABORTED: xcoll_comm_abort was called.
 * After a REMOTE, TIMEOUT, PROTOCOL or ABORTED error the communicator is
 * broken: later collectives fail at once; destroy it.
 */

/* recvbuf[i] = op over ranks of sendbuf[i], for i in [0, count), on every
 * rank. In place when sendbuf == recvbuf. Algorithms: ring (Patarasuk & Yuan,
 * 2009), recursive doubling and Rabenseifner's halving-doubling (Thakur,
 * Rabenseifner & Gropp, 2005); see docs/algorithms.md. */
XCOLL_API xcoll_status xcoll_allreduce(const void *sendbuf, void *recvbuf,
                                       size_t count, xcoll_datatype dtype,
                                       xcoll_op op, xcoll_comm_t comm);

/* Gather sendcount elements from every rank into recvbuf, which holds
 * world_size * sendcount elements, rank r's at offset r * sendcount.
 * In place when sendbuf == recvbuf + rank * sendcount elements. */
XCOLL_API xcoll_status xcoll_allgather(const void *sendbuf, void *recvbuf,
                                       size_t sendcount, xcoll_datatype dtype,
                                       xcoll_comm_t comm);

/* sendbuf holds world_size * recvcount elements; rank r receives in recvbuf
 * the reduction over ranks of block r (elements [r*recvcount, (r+1)*recvcount)).
 * In place when recvbuf == sendbuf + rank * recvcount elements. */
XCOLL_API xcoll_status xcoll_reduce_scatter(const void *sendbuf, void *recvbuf,
                                            size_t recvcount,
                                            xcoll_datatype dtype, xcoll_op op,
                                            xcoll_comm_t comm);

/* Copy count elements of root's sendbuf into every rank's recvbuf
 * (ncclBroadcast). sendbuf is read on root only; in place when
 * sendbuf == recvbuf. */
XCOLL_API xcoll_status xcoll_broadcast(const void *sendbuf, void *recvbuf,
                                       size_t count, xcoll_datatype dtype,
                                       int root, xcoll_comm_t comm);

/* Reduce count elements over ranks into root's recvbuf. recvbuf is written
 * on root only and may be NULL elsewhere; in place when sendbuf == recvbuf. */
XCOLL_API xcoll_status xcoll_reduce(const void *sendbuf, void *recvbuf,
                                    size_t count, xcoll_datatype dtype,
                                    xcoll_op op, int root, xcoll_comm_t comm);

/* Return once every rank of comm has entered the barrier (dissemination
 * barrier, Hensgen, Finkel & Manber 1988). */
XCOLL_API xcoll_status xcoll_barrier(xcoll_comm_t comm);

/* ---- collectives (non-blocking) ----
 *
 * Same arguments and semantics as the blocking forms, plus a stream (must be
 * NULL on host backends) and *request, which receives a handle to pass to
 * xcoll_wait exactly once. Operations on one communicator run in the order
 * they were issued. Buffers must not be touched until the request completes.
 * Argument errors are returned at once and *request is set to NULL; errors
 * during the operation are returned by xcoll_wait / xcoll_test.
 */
XCOLL_API xcoll_status xcoll_iallreduce(const void *sendbuf, void *recvbuf,
                                        size_t count, xcoll_datatype dtype,
                                        xcoll_op op, xcoll_comm_t comm,
                                        xcoll_stream_t stream,
                                        xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_iallgather(const void *sendbuf, void *recvbuf,
                                        size_t sendcount, xcoll_datatype dtype,
                                        xcoll_comm_t comm,
                                        xcoll_stream_t stream,
                                        xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                             size_t recvcount,
                                             xcoll_datatype dtype, xcoll_op op,
                                             xcoll_comm_t comm,
                                             xcoll_stream_t stream,
                                             xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_ibroadcast(const void *sendbuf, void *recvbuf,
                                        size_t count, xcoll_datatype dtype,
                                        int root, xcoll_comm_t comm,
                                        xcoll_stream_t stream,
                                        xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_ireduce(const void *sendbuf, void *recvbuf,
                                     size_t count, xcoll_datatype dtype,
                                     xcoll_op op, int root, xcoll_comm_t comm,
                                     xcoll_stream_t stream,
                                     xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_ibarrier(xcoll_comm_t comm,
                                      xcoll_request_t *request);

/* ---- all-to-all, gather, scatter (blocking) ----
 *
 * Errors: those common to every collective (above), and for alltoallv a
 * NULL counts or displacements array, or a peer's block that does not fit
 * in size_t/PTRDIFF_MAX bytes. A non-blocking form (below) exists for each.
 * Backends: tcp, ucx and nccl_like, over their point-to-point messages (on
 * nccl_like, its mesh of links to every rank, driven by the host). On a
 * communicator bound to a CUDA device (nccl_like's GPU ranks, and tcp and
 * ucx) device buffers are staged through pinned host memory: nccl_like's
 * ring kernels do not run these calls, so a mixed ring runs them on the
 * host too.
 */

/* Every rank sends count elements to every rank (itself included): block p
 * of sendbuf (elements [p*count, (p+1)*count)) goes to rank p, and the block
 * rank p sent to this rank lands in block p of recvbuf (ncclAlltoAll,
 * MPI_Alltoall). sendbuf and recvbuf each hold world_size * count elements.
 * In place when sendbuf == recvbuf (then xcoll copies the input first, one
 * extra buffer of world_size * count elements while the call runs).
 * Algorithms (docs/algorithms.md): pairwise exchange (P-1 steps, each rank
 * puts (P-1)/P of its buffer on the wire) and, for small blocks, Bruck's
 * (Bruck, Ho, Kipnis, Upfal & Weathersby, 1997: ceil(log2 P) steps, each
 * moving about half the buffer). */
XCOLL_API xcoll_status xcoll_alltoall(const void *sendbuf, void *recvbuf,
                                      size_t count, xcoll_datatype dtype,
                                      xcoll_comm_t comm);

/* All-to-all with a count per peer (MPI_Alltoallv, torch's all_to_all_single
 * with split sizes): sendcounts[p] elements starting at element sdispls[p]
 * of sendbuf go to rank p, and recvcounts[p] elements from rank p land at
 * element rdispls[p] of recvbuf. Each array has world_size entries, in
 * elements; recvcounts[p] on this rank must equal sendcounts[this rank] on
 * rank p (a difference is XCOLL_ERR_PROTOCOL on the receiving side, naming
 * both ranks). Blocks of recvbuf must not overlap one another, nor sendbuf
 * (no in-place form). Algorithm: pairwise exchange. */
XCOLL_API xcoll_status xcoll_alltoallv(const void *sendbuf,
                                       const size_t *sendcounts,
                                       const size_t *sdispls, void *recvbuf,
                                       const size_t *recvcounts,
                                       const size_t *rdispls,
                                       xcoll_datatype dtype, xcoll_comm_t comm);

/* Every rank sends count elements to root, which stores rank r's at element
 * r * count of recvbuf (world_size * count elements; read on root only, may
 * be NULL elsewhere) (ncclGather, MPI_Gather). In place on root when
 * sendbuf == recvbuf + root * count elements. Algorithm: binomial tree
 * (ceil(log2 P) steps; the root receives (P-1) * count elements); on
 * nccl_like's host ranks a gather of at most 4 KiB in all is Bruck's
 * allgather of every rank's input (ceil(log2 P) steps; every rank receives
 * them all; docs/nccl_like.md). */
XCOLL_API xcoll_status xcoll_gather(const void *sendbuf, void *recvbuf,
                                    size_t count, xcoll_datatype dtype,
                                    int root, xcoll_comm_t comm);

/* Root sends block r of sendbuf (world_size * count elements; read on root
 * only, may be NULL elsewhere) to rank r, which stores it in recvbuf (count
 * elements) (ncclScatter, MPI_Scatter). In place on root when recvbuf ==
 * sendbuf + root * count elements. Algorithm: binomial tree; on
 * nccl_like's host ranks a scatter of at most 4 KiB in all is Bruck's
 * allgather of the root's buffer (docs/nccl_like.md). */
XCOLL_API xcoll_status xcoll_scatter(const void *sendbuf, void *recvbuf,
                                     size_t count, xcoll_datatype dtype,
                                     int root, xcoll_comm_t comm);

XCOLL_API xcoll_status xcoll_ialltoall(const void *sendbuf, void *recvbuf,
                                       size_t count, xcoll_datatype dtype,
                                       xcoll_comm_t comm, xcoll_stream_t stream,
                                       xcoll_request_t *request);
/* The four arrays are read before xcoll_ialltoallv returns. */
XCOLL_API xcoll_status xcoll_ialltoallv(
    const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
    void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
    xcoll_datatype dtype, xcoll_comm_t comm, xcoll_stream_t stream,
    xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_igather(const void *sendbuf, void *recvbuf,
                                     size_t count, xcoll_datatype dtype,
                                     int root, xcoll_comm_t comm,
                                     xcoll_stream_t stream,
                                     xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_iscatter(const void *sendbuf, void *recvbuf,
                                      size_t count, xcoll_datatype dtype,
                                      int root, xcoll_comm_t comm,
                                      xcoll_stream_t stream,
                                      xcoll_request_t *request);

/* ---- point-to-point and groups (ncclSend/ncclRecv, ncclGroupStart/End) ----
 *
 * xcoll_send sends count elements of sendbuf to rank peer; xcoll_recv
 * receives count elements from rank peer into recvbuf. Sends and receives
 * between two ranks are matched in the order they were issued (MPI's
 * non-overtaking rule); a send matches a receive of the same count and
 * dtype, and anything else is XCOLL_ERR_PROTOCOL on both ranks, the message
 * naming both calls. Point-to-point calls are not collectives: only the two
 * ranks take part, and they do not count in the collectives' sequence.
 *
 * Outside a group, xcoll_send returns once the receiver has posted the
 * matching receive and the data is on its way, and xcoll_recv once the data
 * has arrived; a send to this rank itself is INVALID_ARGUMENT there (it
 * would wait for itself).
 *
 * Groups: between xcoll_group_start and xcoll_group_end (per thread;
 * nesting counts, and only the outermost end runs the group), calls are
 * recorded and return at once, and the group's end runs them together, as
 * ncclGroupEnd does: every send and receive of the group is posted at once,
 * so any pattern (a ring shift, all pairs exchanging, many sends to one
 * peer) completes without deadlock, and a send to this rank itself is
 * copied locally (it needs the matching xcoll_recv from this rank in the
 * same group). Collectives recorded in a group run after its sends and
 * receives, in the order they were recorded. Buffers must stay valid and
 * untouched until the group completes. All calls of a group must be on one
 * communicator, and must be blocking forms (the group gives one request:
 * xcoll_igroup_end).
 *
 * Cost: each send and receive first exchanges a 24-byte fingerprint with
 * its peer (count, dtype, order), all at once for a group, then the data:
 * one extra one-way latency per group, so that a mismatch is caught before
 * any byte lands in the wrong buffer.
 *
 * Errors (besides the collectives' common ones): XCOLL_ERR_INVALID_ARGUMENT
 * for peer outside [0, world_size), or a send to or receive from this rank
 * outside a group; XCOLL_ERR_INVALID_USAGE for a group end without a start,
 * calls on two communicators in one group, a non-blocking call inside a
 * group, or a receive from this rank without a matching send in its group;
 * XCOLL_ERR_PROTOCOL for a send matched with a receive of another count or
 * dtype; XCOLL_ERR_TIMEOUT, naming the peer and the call, for a receive
 * (or send) whose peer never posts the matching call. Backends: tcp, ucx
 * and nccl_like; on a communicator bound to a CUDA device each call's
 * device buffers are staged through pinned host memory (nccl_like's ring
 * kernels do not run point-to-point calls). */
XCOLL_API xcoll_status xcoll_send(const void *sendbuf, size_t count,
                                  xcoll_datatype dtype, int peer,
                                  xcoll_comm_t comm);
XCOLL_API xcoll_status xcoll_recv(void *recvbuf, size_t count,
                                  xcoll_datatype dtype, int peer,
                                  xcoll_comm_t comm);
/* Non-blocking forms, outside a group only. They run in issue order with
 * the communicator's other calls, as NCCL's do on one stream: two ranks
 * that each xcoll_isend before their xcoll_irecv wait for each other (until
 * XCOLL_TIMEOUT_S); put crossing exchanges in one group. */
XCOLL_API xcoll_status xcoll_isend(const void *sendbuf, size_t count,
                                   xcoll_datatype dtype, int peer,
                                   xcoll_comm_t comm, xcoll_stream_t stream,
                                   xcoll_request_t *request);
XCOLL_API xcoll_status xcoll_irecv(void *recvbuf, size_t count,
                                   xcoll_datatype dtype, int peer,
                                   xcoll_comm_t comm, xcoll_stream_t stream,
                                   xcoll_request_t *request);

/* Start a group on this thread (nests). Never fails. */
XCOLL_API xcoll_status xcoll_group_start(void);
/* End a group: at the outermost end, run the group's calls and return when
 * all have completed, with the first error among them (an argument error
 * in a recorded call was returned by that call and the call dropped). An
 * empty group succeeds. Errors: XCOLL_ERR_INVALID_USAGE without a group
 * started; the calls' own. */
XCOLL_API xcoll_status xcoll_group_end(void);
/* xcoll_group_end without waiting: *request completes when every call of
 * the group has; pass it to xcoll_wait or xcoll_test. An inner (nested) end
 * or an empty group gives a request that is already complete. */
XCOLL_API xcoll_status xcoll_igroup_end(xcoll_request_t *request);

/* Block until request completes, release it, and return the operation's
 * status. request NULL: XCOLL_ERR_INVALID_ARGUMENT. */
XCOLL_API xcoll_status xcoll_wait(xcoll_request_t request);

/* Set *done to 1 if request has completed, 0 if not; never blocks. Returns
 * the operation's status once done (XCOLL_SUCCESS while running). The request
 * is not released: call xcoll_wait on it afterwards (it returns at once). */
XCOLL_API xcoll_status xcoll_test(xcoll_request_t request, int *done);

/* ---- per-rank file names ---- */

/* Name one file per rank from pattern by the rule XCOLL_TRACE follows, for
 * an application's own per-rank outputs (xtrain's --trace): "%r" becomes
 * rank and "%p" the calling process's id; a pattern with neither gets
 * ".rank<rank>" before the extension of its last path component
 * ("out/trace.json" -> "out/trace.rank0.json"), or at its end when it has
 * no extension. Every other character is copied. Writes the
 * NUL-terminated name to out, out_bytes bytes long.
 * Errors: XCOLL_ERR_INVALID_ARGUMENT when pattern or out is NULL, rank is
 * negative, or the name and its NUL need more than out_bytes (use a
 * shorter pattern or a larger buffer); xcoll_last_error() says which. */
XCOLL_API xcoll_status xcoll_rank_path(const char *pattern, int rank,
                                       char *out, size_t out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* XCOLL_H */
