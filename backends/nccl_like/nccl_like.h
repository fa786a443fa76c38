/* nccl_like.h - internal state of the nccl_like backend (NCCL's way): a
 * collective is a ring "kernel" (kernels/ring.h's xc_ring_run, the
 * primitive sequence of NCCL's runRing) run by one worker thread per
 * channel over FIFOs of XCOLL_STEPS slots with head/tail counters, and one
 * proxy thread per rank moves full slots over a net plugin (net/net.h), as
 * NCCL's proxy.cc and transport/net.cc do. See docs/nccl_like.md.
 *
 * Files, from the ground floor up (a file calls only those before it;
 * scripts/check-layers.sh checks it): failure.c (nl_fail, its propagation
 * through the store, the watcher thread, nl_now), desync.c (collective
 * fingerprints around the ring: desync detection), gpu_engine.c (a GPU
 * rank: the same kernels launched on the caller's CUDA stream, the FIFOs
 * in mapped pinned memory), channel.c (FIFOs, net connections, mesh
 * links), proxy.c (the proxy step and thread), mesh.c (drives a schedule
 * over the mesh links), bruck.c, pairwise.c, rabenseifner.c (the mesh
 * algorithms), p2p.c (the p2p interface of core's host algorithms, over
 * the mesh), engine.c (worker threads, work queues, op handles: the ABI
 * 2 coll ops; the one place an op's algorithm is chosen), nccl_like.c
 * (options, comm init/destroy/abort: the front door). */
#ifndef XCOLL_NCCL_LIKE_H
#define XCOLL_NCCL_LIKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "blame.h"
#include "comm.h"
#include "conn.h"
#include "fingerprint.h"
#include "net.h"
#include "p2p.h"
#include "prompt.h"
#include "ring.h"
#include "transport.h"
#include "xcoll.h"

/* XCOLL_NCHANNELS's upper bound (arrays are sized by it), half of NCCL's
 * MAXCHANNELS (64, docs/nccl-vs-gloo.md); the defaults of XCOLL_NCHANNELS
 * (2) and XCOLL_BUFFSIZE (4M, NCCL_BUFFSIZE's) and the ranges xcoll-info
 * prints live in core/params.c's table. */
#define NL_MAX_CHANNELS 32
/* The most channels a GPU rank proposes with XCOLL_NCHANNELS unset
 * (nccl_like.c, channels_for_device): 16 were measured on an H200
 * (docs/benchmarks.md); XCOLL_NCHANNELS sets up to NL_MAX_CHANNELS. */
#define NL_GPU_AUTO_CHANNELS 16
/* A GPU rank proposes one channel (one block) per this many SMs
 * (nccl_like.c, channels_auto; its INFO line says 8). */
#define NL_SMS_PER_CHANNEL 8
/* XCOLL_BUFFSIZE bounds (bytes per connection FIFO): a slot must hold at
 * least a few LL lines; 1 GiB keeps 2 x 16 FIFOs addressable. */
#define NL_MIN_BUFFSIZE ((size_t)XCOLL_STEPS * 256)
#define NL_MAX_BUFFSIZE ((size_t)1 << 30)
/* XCOLL_PROTO=auto runs LL for collectives of at most this many bytes (the
 * larger of the two buffers) and SIMPLE above. Measured with
 * bench/nccl_like.sh (docs/nccl_like.md): LL was faster only at the
 * smallest sizes (8 B: 72 vs 160 us at P=2, 302 vs 871 us at P=4), and lost
 * 2-10x from 1 MiB; once LL carried the fingerprint in its flags, 4 KiB
 * itself went to LL (faster there), while SIMPLE wins from 8 KiB. */
#define NL_LL_THRESHOLD_BYTES ((size_t)4 << 10)
/* An allreduce (and a barrier) of at most this many bytes runs the gather
 * algorithm (kernels/ring.h's xc_gather_allreduce: allgather the inputs,
 * reduce locally: P-1 dependent hops instead of the ring's 2(P-1)); the
 * choice depends only on the arguments, so every rank makes the same.
 * Measured with bench/nccl_like.sh (docs/nccl_like.md). */
#define NL_GATHER_MAX_BYTES ((size_t)4 << 10)
/* The Bruck collectives (bruck.c): on a comm of host ranks only, an
 * allreduce (and a barrier) of at most NL_GATHER_MAX_BYTES that runs LL
 * allgathers the inputs with Bruck's algorithm over direct connections to
 * the ranks 1, 2, 4, ... away and reduces the P inputs locally in rank
 * order: ceil(log2 P) dependent messages, where the gather takes P-1. An
 * allgather, reduce-scatter, broadcast, reduce, gather or scatter over LL
 * whose input on each rank is at most NL_GATHER_MAX_BYTES is the same
 * allgather, finished each its own way (the ring takes P-1 steps). From
 * NL_BRUCK_MIN_RANKS ranks (at P = 2 the gather already is one message;
 * the rooted ones from 2, where one Bruck round replaces core's
 * agreement round and the ring's hop or the tree's message) to
 * NL_BRUCK_MAX_RANKS (the inputs of every rank are held at once). */
#define NL_BRUCK_MIN_RANKS 3
#define NL_BRUCK_MAX_RANKS 16
#define NL_BRUCK_MAX_LINKS 4 /* ceil(log2(NL_BRUCK_MAX_RANKS)) */
/* The pairwise allreduce (pairwise.c): on a comm of host ranks only, from
 * 2 to NL_PAIRWISE_MAX_RANKS ranks, with more ranks on a host than cores
 * (XCOLL_PAIRWISE=auto) or XCOLL_PAIRWISE=1, an allreduce over SIMPLE runs
 * the ring's reduction (the same pieces, reduced in the same order) with
 * every piece sent straight to the rank that reduces it, over a link to
 * every other rank: no step waits on a chain of ranks. Pieces move in
 * units of at most NL_PAIRWISE_UNIT_BYTES. */
#define NL_PAIRWISE_MAX_RANKS 16
#define NL_PAIRWISE_UNIT_BYTES ((size_t)512 << 10)
/* Messages in flight per mesh link each way; the stage holds this many
 * units per peer. Measured at P=4 on 2 cores (1, 4, 16 MiB): 1 MiB x 1,
 * 512 KiB x 2, 256 KiB x 4 and 128 KiB x 8 were within noise of each other
 * from 4 MiB, 512 KiB x 2 the fastest at 1 MiB (0.83 ms, 1 MiB x 1 1.09). */
#define NL_PAIRWISE_DEPTH 2
/* The mesh has a link to every other rank on a comm of host ranks
 * (channel.c), for p2p.c and the mesh algorithms; nl_mesh_poll watches at
 * most this many of them at once (the mesh algorithms use at most
 * NL_PAIRWISE_MAX_RANKS - 1). */
#define NL_MESH_POLL_LINKS 64
/* A Bruck message: this header, then the blocks it carries. The header
 * holds the sender's fingerprint of the call (core/fingerprint.h) and the
 * bytes of one block (one rank's input); its size keeps the blocks 16-byte
 * aligned. */
#define NL_BRUCK_HEADER_BYTES 32
/* A collective uses one channel per this many bytes (at least one, at most
 * XCOLL_NCHANNELS), as NCCL lowers nChannels for small sizes: a small op on
 * many channels only adds threads to wake and slots to send. */
#define NL_MIN_BYTES_PER_CHANNEL ((size_t)256 << 10)
/* A kernel that waits on its FIFO runs its channel's proxy step on every
 * poll; from this many idle passes on (about 10 us: each is a recv() that
 * finds nothing) it sleeps in poll(2) on the channel's sockets instead of
 * yielding, as the tcp backend spins about 10 us before it polls. With more
 * ranks than cores, a spinning waiter takes the core the rank holding the
 * data needs. */
#define NL_SPINS_BEFORE_POLL 8
/* ... and, when every rank of the host has a core of its own (cores >=
 * LOCAL_WORLD_SIZE), not before this many microseconds of waiting: a reply
 * on loopback takes about 8 us, so a waiter that slept after 8 cheap
 * passes paid a wake-up per step (measured on 2 cores, P=2, 8-512 B LL
 * allreduce: 14-22 us per call with passes only, 8-10 us with 10-20 us of
 * spinning, tcp 8 us). With more ranks than cores spinning takes the core
 * the peer needs (P=4 on 2 cores: 105 us per call with passes only, 120-150
 * with 10-40 us), so it stays off there. */
#define NL_SPIN_US 20
/* Longest sleep in poll (milliseconds): the abort flag and the
 * fingerprints are looked at between sleeps. */
#define NL_POLL_MS 1
/* Passes of the proxy step a kernel's thread makes after the kernel
 * returned, to finish its last sends before it hands them to the proxy
 * thread (engine.c: run_one). */
#define NL_TRAILING_PASSES 16

/* Work items a channel's queue holds; start() waits for room beyond that
 * (ABI 2 allows waiting on the backend's own bounded queue). */
#define NL_QUEUE_DEPTH 64
/* After the store connection breaks (rank 0, which hosts it, died), an op
 * in flight that makes no progress for this long fails naming rank 0. */
#define NL_STORE_LOST_GRACE_S 1.0

typedef enum nl_proto_choice {
  NL_PROTO_SIMPLE = 0,
  NL_PROTO_LL = 1,
  NL_PROTO_AUTO = 2
} nl_proto_choice;

/* Fingerprints of ops this rank has started and not yet both sent to the
 * next rank and compared with the previous rank's (desync.c). start()
 * waits for room beyond that, as it does for NL_QUEUE_DEPTH. */
#define NL_FP_WINDOW 512
/* Fingerprints one message carries at most: a step sends every fingerprint
 * that accumulated since the last one in one message, so that back-to-back
 * small collectives do not pay a message each. A batch costs the thread
 * that sends it a sendmsg and a recv: at 32 per batch, that was about a
 * tenth of an 8 B LL allreduce at P=2 (docs/nccl_like.md, "Fewer
 * fingerprint batches"). */
#define NL_FP_BATCH 128
/* Deferred fingerprints (desync.c: an LL collective's travels in its LL
 * flags, kernels/prims.h xc_ll_flag): sent once this many are unsent, or
 * with the next one that is not deferred; the receiver catches up on
 * judging them once it lags by twice this. */
#define NL_FP_DEFER NL_FP_BATCH
/* One entry of the fingerprint connection: the op's fingerprint, then
 * (u64, little-endian) how many point-to-point messages (p2p.c) this rank
 * had sent to the next rank when the op started, so that a next rank
 * waiting in a host call for more of them learns they will never come
 * (nl_fp_peek). */
#define NL_FP_ENTRY_BYTES (XCOLL_FINGERPRINT_BYTES + 8)
/* Memory of one direction of one connection on one channel: the slots and
 * the counters that the kernel (worker thread) and the proxy share. head and
 * tail sit on cache lines of their own (NCCL's ncclSendMem/ncclRecvMem). */
typedef struct nl_fifo_mem {
  _Alignas(64) xc_atomic_u64 head; /* consumer's count of slots freed */
  _Alignas(64) xc_atomic_u64 tail; /* producer's count of slots filled */
  _Alignas(64) int64_t sizes[XCOLL_STEPS]; /* bytes in each slot, -1 = empty */
  /* Each slot's collective check (kernels/conn.h xc_conn.checks), on a
   * link between two host ranks over shm. */
  _Alignas(64) uint32_t checks[XCOLL_STEPS];
  /* An event count for a FIFO both ranks map (transport/shm.c): a kernel
   * that sleeps on head or tail registers in waiters and futex-waits on
   * wake_seq; a kernel that posts bumps wake_seq and wakes it. */
  _Alignas(64) _Atomic uint32_t waiters;
  _Atomic uint32_t wake_seq;
} nl_fifo_mem;

/* One connection end as the proxy drives it. Counters are in steps (slots),
 * counted from the comm's start, never reset: slot = counter % XCOLL_STEPS. */
typedef struct nl_proxy_conn {
  int peer;               /* the rank at the other end */
  void *mhandle;          /* reg_mr of the FIFO's slots */
  xcoll_net_request *requests[XCOLL_STEPS];
  double started_us[XCOLL_STEPS]; /* trace: when each slot's transfer was posted */
  uint64_t posted;      /* recv: irecvs posted; send: isends posted */
  uint64_t completed;   /* recv: slots landed (tail); send: sends done (head) */
} nl_proxy_conn;

/* One connection pair around the ring through the net plugin: a send comm
 * to the next rank and a recv comm from the previous (the listen comm only
 * while they are set up). Each channel has one; so has the fingerprint
 * connection. */
typedef struct nl_ring_link {
  xcoll_net_listen_comm *listen_comm;
  xcoll_net_send_comm *send_comm;
  xcoll_net_recv_comm *recv_comm;
} nl_ring_link;

/* One link of the mesh: it sends to rank + d and receives from rank - d
 * (mod P), for every distance d in 1..P-1 on a comm of host ranks
 * (st->mesh_on); mesh_of[d] is the link of distance d. Bruck's rounds use
 * d = 1, 2, 4, ... (bruck.c), pairwise and Rabenseifner any d, and p2p.c
 * the link to and from its peer. An op posts its messages each way per
 * link in issue order; one op at a time uses the mesh (core runs a host
 * algorithm over p2p.c only once every engine op is done, and an engine
 * op only once the host algorithms are done), and each leaves every link
 * idle: no request posted, as many messages sent as the peer received. */
typedef struct nl_mesh_link nl_mesh_link;
struct nl_state;
/* A message in flight on a mesh link: the net plugin's request, or the
 * shm carrier's (transport/shm.c). Opaque to the mesh algorithms. */
typedef struct nl_mesh_request nl_mesh_request;
/* What carries a direction of a mesh link (chosen at init, the same on
 * both ends): the
 * net plugin's comms (transport/net.c: nl_mesh_net_ops) or, between two
 * ranks of one host that allow shm, a byte ring in the receiver's shm
 * segment (transport/shm.c: nl_mesh_shm_ops). The mesh algorithms and
 * p2p.c post and test through it and never know which it is. The calls
 * follow net.h's isend / irecv / test: they never block, a NULL request
 * with SUCCESS means "no room now, retry", a message is received whole by
 * one irecv of at least its size, messages of a link arrive in the order
 * posted, and test releases a request once it reports it done or failed. */
/* A mesh message's check (nl_mesh_ops isend, irecv): NL_MESH_UNCHECKED,
 * or a collective's check (xc_work.check). The shm carrier sends 30 bits
 * of it in the message's length word, and a receive fails with
 * XCOLL_ERR_PROTOCOL, as for a message too large, when the message's check
 * is not the one it was posted with (or one has a check and the other
 * none); the net carrier carries none (nl_state.mesh_checked says whether
 * every link of the mesh carries them). Both ends of a message pass the
 * same: pairwise.c and rabenseifner.c their collective's, the others
 * none. */
#define NL_MESH_UNCHECKED ((uint64_t)1 << 32)

typedef struct nl_mesh_ops {
  const char *name; /* "NET", "SHM": what XCOLL_DEBUG=INFO prints */
  /* 1: the link is the net plugin's comms (link.send_comm, recv_comm):
   * reg_mr and get_fds apply to it. 0: no descriptor, no registration;
   * a waiting rank sleeps in nl_shm_mesh_wait instead. */
  int net;
  xcoll_status (*isend)(struct nl_state *st, nl_mesh_link *m,
                        const void *data, size_t bytes, uint64_t check,
                        void *mhandle, nl_mesh_request **request);
  xcoll_status (*irecv)(struct nl_state *st, nl_mesh_link *m, void *data,
                        size_t bytes, uint64_t check, void *mhandle,
                        nl_mesh_request **request);
  xcoll_status (*test)(struct nl_state *st, nl_mesh_link *m,
                       nl_mesh_request *request, int *done, size_t *bytes);
  /* The sentence of the link's last failed call, for messages. */
  const char *(*last_error)(const nl_mesh_link *m);
} nl_mesh_ops;

struct nl_mesh_link {
  nl_ring_link link; /* the net plugin's comms (ops->net only) */
  int to, from; /* the peers of send_comm and recv_comm */
  /* What carries each direction: the send to `to`, the receive from
   * `from` (two peers, so two choices; each the same as the peer's end). */
  const nl_mesh_ops *send_ops, *recv_ops;
  struct nl_mesh_shm *shm; /* the shm carrier's state (transport/shm.c) */
  nl_mesh_request *send_request, *recv_request;
  uint32_t sends, recvs; /* messages posted so far: the tags */
};

typedef struct nl_channel {
  int id;
  struct nl_state *st; /* back pointer, for the progress hook */
  /* Kernel's view of the two connections (kernels/conn.h). */
  xc_conn send;  /* to the next rank in the ring */
  xc_conn recv;  /* from the previous rank */
  nl_fifo_mem *send_mem, *recv_mem;
  uint8_t *send_buff, *recv_buff; /* XCOLL_STEPS * step_bytes each */
  /* Direct sends (st->direct): send.direct_from points here (kernels/
   * conn.h); entry k % XCOLL_STEPS, when not NULL, is where step k's bytes
   * are sent from instead of its slot. */
  const uint8_t *send_from[XCOLL_STEPS];
  /* Direct receives (st->direct): recv.direct_req / direct_to /
   * direct_to_bytes point here (kernels/conn.h); the proxy posts step k's
   * receive only once recv_req > k, into recv_to[k % XCOLL_STEPS] (room:
   * recv_to_bytes[]) when not NULL, else into its slot. */
  xc_atomic_u64 recv_req;
  uint8_t *recv_to[XCOLL_STEPS];
  size_t recv_to_bytes[XCOLL_STEPS];
  /* world_size * NL_GATHER_MAX_BYTES: the inputs of a small allreduce
   * (kernels/ring.h's XC_ALGO_GATHER), one op at a time per channel. */
  uint8_t *scratch;
  size_t scratch_bytes;
  /* How each direction moves (transport/): chosen per channel and
   * direction at init, the same choice on both ends of a connection. */
  const nl_transport *send_transport, *recv_transport;
  nl_ring_link link; /* net plugin objects (channel.c), for net directions */
  nl_proxy_conn proxy_send, proxy_recv;
  /* The previous rank closed the receive connection (an error from a posted
   * irecv). Not fatal by itself: at the end of a job a peer may close while
   * receives for later steps are still posted. It is fatal once the kernel
   * waits for a slot that can no longer come (proxy.c). */
  xcoll_status recv_broken;
  char recv_broken_message[256];
  double recv_broken_since;
  /* Idle passes of the progress hook (proxy.c), by the thread running the
   * channel's item: it paces the fingerprint step on channel 0. */
  unsigned fp_polls;
  double wait_since; /* the hook: when the current wait began (nl_now) */
  /* For the flight recorder (engine.c: nl_describe_op). run_id: the
   * flight id of the op whose ring kernel this channel runs, published
   * (release) after the connections' step counters when it began and its
   * totals (kernels/ring.h's xc_ring_steps); 0 while they change and after
   * the kernel succeeded; kept after a failed kernel, so that a dump taken
   * after the failure says where it stopped. */
  _Atomic uint64_t run_id;
  _Atomic uint64_t run_send_base, run_recv_base, run_send_steps,
      run_recv_steps;
  /* The counter the kernel's progress hook last waited on and the value it
   * waited for (proxy.c); a dump compares them to say what it waits on. */
  _Atomic uintptr_t wait_counter;
  _Atomic uint64_t wait_target;
  /* The worker is inside xc_ring_run (read by the proxy). */
  _Atomic int busy;
  /* Held (trylock only) by the one thread that runs this channel's proxy
   * step: the worker from its kernel's progress hook while it waits, or the
   * proxy thread. It guards proxy_send, proxy_recv, the net requests and
   * recv_broken*, so net calls on a channel never run concurrently. */
  pthread_mutex_t progress_lock;

  /* The worker thread and its bounded queue of work items. */
  pthread_t worker;
  int worker_started;
  struct nl_op *queue[NL_QUEUE_DEPTH];
  unsigned queue_head, queue_tail; /* under the state's lock */
  /* A thread is running an item taken from this queue: the worker, or a
   * thread in nl_wait that took the head item because it was its own op
   * and the worker had not yet (engine.c: steal_item). One item at a time
   * per channel keeps the channel's issue order. Under the state's lock. */
  int running;
  /* start() calls waiting for room in a full queue. They are woken once
   * the queue is down to half (engine.c: room_freed), not per item taken:
   * a stream of nonblocking calls then costs the issuing thread one
   * sleep per NL_QUEUE_DEPTH / 2 items, not one per item. Under the
   * state's lock. */
  int room_waiters;
  pthread_cond_t queue_cond;       /* work arrived, room freed or stop */
} nl_channel;

/* Desync detection (desync.c): every op's fingerprint (core/fingerprint.h)
 * goes to the next rank over a connection of its own, and the previous
 * rank's fingerprint of op k is compared with this rank's op k. Counters
 * count ops from the comm's start (slot = counter % NL_FP_WINDOW). */
typedef struct nl_fp_link {
  nl_ring_link link;
  void *send_mhandle; /* reg_mr of out */
  void *recv_mhandle; /* reg_mr of in */
  /* Held (trylock only) by the one thread running the fingerprint step:
   * the proxy thread, channel 0's progress hook, or a kernel's thread
   * explaining a failed kernel. Guards everything below but the atomics
   * and the slots start() writes. */
  pthread_mutex_t lock;
  /* This rank's fingerprints, and as sent. start() writes slot `started`
   * under the state's lock, then publishes started (release). */
  xcoll_fingerprint local[NL_FP_WINDOW];
  uint8_t out[NL_FP_WINDOW][NL_FP_ENTRY_BYTES];
  /* The previous rank's last message: fingerprints in_base.. received-1. */
  uint8_t in[NL_FP_BATCH][NL_FP_ENTRY_BYTES];
  _Atomic uint64_t started; /* ops start() fingerprinted */
  _Atomic uint64_t sent;    /* fingerprints whose message was sent */
  _Atomic uint64_t judged;  /* compared with the previous rank's */
  uint64_t send_posted;     /* fingerprints handed to isend */
  xcoll_net_request *send_request; /* the one message in flight */
  uint64_t in_base, received; /* in_base <= judged <= received */
  xcoll_net_request *recv_request; /* the one receive posted */
  /* A neighbour closed the connection (end of job, or a death the data
   * path reports): no more fingerprints move; not an error by itself. */
  _Atomic int broken;
  _Atomic int room_waiters; /* start() waits on done_cond for a free slot */
  /* Fingerprints below this count must be sent and judged now: those of
   * ops that await their judgment (not deferred), and of an op whose
   * failure is being explained. Never decreases. */
  _Atomic uint64_t urgent;
} nl_fp_link;

/* A started collective: completes when every channel has run its share. */
typedef struct nl_op {
  xcoll_coll_args args;
  xcoll_fingerprint fp; /* the call's (fill_work): LL flags, the fingerprint
                           connection, Bruck's headers */
  uint64_t fp_index; /* its fingerprint's slot counter (desync.c) */
  int fp_deferred;   /* its fingerprint is checked in its LL flags; the op
                        does not wait for the fingerprint's judgment */
  int bruck;         /* runs nl_bruck_run on channel 0, not a ring kernel */
  int pairwise;      /* runs nl_pairwise_run on channel 0 (work.nchannels
                        keeps the ring's channels: its pieces) */
  int rabenseifner;  /* with pairwise: runs nl_rabenseifner_run instead */
  int nchannels; /* channels this op runs on: 0..nchannels-1 */
  xc_work work; /* channel and nchannels filled per channel by the worker */
  int channels_left;      /* under the state's lock */
  xcoll_status status;    /* the first failing channel's status */
  double start_us;        /* trace */
  int32_t barrier_value;  /* barrier = 1-element allreduce of this */
  /* GPU rank: the event recorded after the op's kernel, and the number of
   * its launch (gpu_engine.c); NULL once the op's test or wait ended. */
  void *event;
  unsigned gpu_flight;
  struct nl_op *next_free; /* in nl_state.op_cache while unused */
  /* Channel 0, taken by start() for a blocking wait that runs the item
   * itself (engine.c): never queued; its running flag is set until
   * nl_wait has run it. NULL otherwise. */
  struct nl_channel *claimed;
  /* A host rank's non-blocking op (engine.c, "Deferred kicks"): its
   * number in issue order, when start() queued it (nl_now), and 1 while
   * its channel 0 item waits for its waiter with the worker not woken.
   * Under lock. */
  uint64_t seq;
  double issued_at;
  int deferred;
} nl_op;

/* Finished op handles the state keeps for the next start() (engine.c:
 * op_get, op_put), so that a call costs no allocation: a comm's ops in
 * flight are bounded by its queues, and more than this many are freed. */
#define NL_OP_CACHE 16

/* The GPU engine's state (gpu_engine.c); NULL on a host rank. */
typedef struct nl_gpu nl_gpu;
/* Kernel families (XC_COLL_ALLREDUCE .. XC_COLL_REDUCE). */
#define NL_GPU_KINDS 5

typedef struct nl_state {
  xcoll_comm *comm;
  int rank, world_size;
  int prev, next; /* ring neighbours (ring = rank order) */
  int nchannels; /* agreed by every rank at init (agree_channels) */
  int nchannels_auto; /* XCOLL_NCHANNELS unset: this rank's proposal came
                         from its hardware (nccl_like.c: channels_auto) */
  size_t buffsize;   /* bytes per connection FIFO */
  size_t step_bytes; /* buffsize / XCOLL_STEPS */
  nl_proto_choice proto;
  int inline_wait; /* XCOLL_WAIT_RUNS: nl_wait runs untaken items */
  /* Deferred kicks (engine.c), under lock: whether start() leaves channel
   * 0's worker asleep for non-blocking ops (core/prompt.h); an op was
   * queued deferred since deferring last stopped (also read by the proxy
   * without the lock); the last op's seq. */
  xcoll_prompt prompt;
  _Atomic int any_deferred;
  uint64_t op_seq;
  double spin_s; /* a waiting kernel polls this long before it sleeps in
                    poll(2) (0: NL_SPINS_BEFORE_POLL passes only); see
                    NL_SPIN_US */
  int busy_polls; /* a host rank waiting on the mesh or point-to-point
                     polls this many times before it yields its core:
                     XC_SPINS_BEFORE_YIELD when every rank of the host has
                     a core of its own, else 0 (yield on every idle pass,
                     so that the rank it waits for gets the core) */
  /* XCOLL_BRUCK and every rank a host rank (agreed at init), P within
   * 2..NL_BRUCK_MAX_RANKS and a plugin that takes unregistered host
   * memory: small collectives run bruck.c over the mesh links of
   * distance 1, 2, 4, ... */
  int bruck;
  /* XCOLL_PAIRWISE (auto: ranks outnumber the host's cores), every rank a
   * host rank, P within 2..NL_PAIRWISE_MAX_RANKS and a plugin that takes
   * unregistered host memory, agreed at init: SIMPLE allreduces run
   * pairwise.c over the mesh. */
  int pairwise;
  /* XCOLL_RABENSEIFNER (default 1), agreed at init: with pairwise and P a
   * power of two, SIMPLE allreduces run rabenseifner.c over the mesh. */
  int rabenseifner;
  uint8_t *pairwise_stage; /* (P-1) x NL_PAIRWISE_DEPTH units: pairwise.c */
  /* Every rank of the comm is a host rank (agreed at init), P >= 2: the
   * mesh links this rank to every other (channel.c), and p2p.c runs core's
   * host algorithms over it. Off on a GPU rank and in a mixed ring. */
  int mesh_on;
  /* The net plugin sends from and receives into unregistered host memory
   * (socket, ucx): Bruck, pairwise and p2p.c's payloads go straight from
   * and to user memory. Else p2p.c copies through registered slots. */
  int net_takes_host;
  int mesh_links; /* P-1 with mesh_on, else 0 */
  nl_mesh_link *mesh; /* mesh_links links: link d-1 is distance d */
  int *mesh_of;       /* P entries: distance -> link, -1: none */
  struct nl_p2p *p2p; /* p2p.c's state (NULL: not opened) */
  uint8_t *mesh_out;           /* header + P blocks: what this rank sends */
  uint8_t *mesh_in;            /* the messages it receives, one per link */
  _Atomic uint64_t mesh_moved; /* messages sent or landed (the proxy's
                                  watchdog counts them as progress) */
  int direct; /* XCOLL_DIRECT and a plugin that sends from any host address:
                 SIMPLE sends skip the slot copy (engine.c) */
  double timeout_s;
  const xcoll_net_v1 *net;
  int net_device;
  int recvs_ahead; /* receives posted ahead per connection (proxy.c) */
  xcoll_net_config net_config;
  nl_channel channels[NL_MAX_CHANNELS];
  nl_fp_link fp; /* world_size > 1 only */
  /* Every rank's info from init (transport/transport.h), world_size
   * entries; the shm transport's state (transport/shm.c), NULL when no
   * connection of this rank uses it. */
  nl_rank_info *rank_infos;
  struct nl_shm *shm;
  /* 1 when every link of the ring joins two host ranks over shm: each
   * step then carries its collective's check (xc_conn.checks, wide LL
   * lines), so that a SIMPLE ring op's fingerprint may be batched as an LL
   * op's is (desync.c nl_fp_deferrable). The same on every rank. */
  int ring_checked;
  /* 1 when every pair of ranks is joined by the mesh over shm, whose
   * messages carry checks (NL_MESH_UNCHECKED): the pairwise and
   * Rabenseifner allreduces then batch their fingerprints too. The same
   * on every rank. */
  int mesh_checked;

  /* One lock for queues, op completion, proxy sleep and failure: the
   * threads that take it do so a few times per op, not per slot. */
  pthread_mutex_t lock;
  pthread_cond_t done_cond;  /* an op completed or the comm failed */
  pthread_cond_t proxy_cond; /* work for the sleeping proxy */
  /* Started and not yet completed by all channels: changed under lock,
   * read without it by the proxy's loop. */
  _Atomic int ops_in_flight;
  int stopping;              /* comm_destroy: threads exit */
  /* Bumped under lock with proxy_cond signalled (nl_proxy_wake) when the
   * proxy may have work its timed wait must not sleep through (a worker
   * left its kernel with slots to send, an op started). */
  unsigned proxy_kicks;
  int draining; /* nl_proxy_drain runs: the proxy must not linger */
  nl_op *op_cache;    /* unused op handles (NL_OP_CACHE), under lock */
  int op_cache_count; /* under lock */

  pthread_t proxy;
  int proxy_started;
  /* The proxy sleeps: no op in flight and every filled slot sent (set under
   * lock, with done_cond broadcast, so comm_destroy can wait for it). */
  int proxy_idle;
  /* Nonzero stops every kernel (kernels/conn.h's abort flag), raised by
   * nl_fail and comm_abort: abort_flag on a host rank, a word of mapped
   * pinned memory the device reads on a GPU rank. */
  xc_abort abort_flag;
  xc_abort *abort;
  /* A GPU rank (the comm is bound to a CUDA device), else NULL. */
  nl_gpu *gpu;
  _Atomic int failed;                    /* nonzero once fail_status is set */
  _Atomic int fail_reported; /* an op's failure was logged (engine.c) */
  xcoll_status fail_status;              /* under lock */
  char fail_message[XCOLL_ERROR_BYTES];  /* under lock */
  /* Set by the watcher when the store connection broke: rank 0 is gone. */
  _Atomic int store_lost;

  /* The watcher thread, blocked on the communicator's failure key in the
   * store over a connection of its own, learns of other ranks' failures. */
  pthread_t watcher;
  int watcher_started;
  xcoll_store *watch_store;
  char failure_key[64]; /* "<prefix>nl/failure", one for every rank */
  /* Stall records in the store: a timeout names the rank that stopped,
   * not the first to give up (core/blame.h). */
  xcoll_blame blame;

  uint64_t trace_base; /* tids: channels base+c, proxy sends base+100+c, recvs base+200+c */
} nl_state;

/* Declarations by file, from the ground floor up: a file calls only
 * files declared above it (scripts/check-layers.sh). */

/* ---- failure.c ---- */
/* Mark the backend failed with status (REMOTE, TIMEOUT, PROTOCOL, ABORTED)
 * and a message (first failure wins), raise the kernels' abort flag and wake
 * every waiter. dead_rank >= 0 names a rank this rank saw die (a closed
 * connection): the message is then published to the failure key (one set
 * that every rank's watcher reads) so that ranks that are not its ring
 * neighbours fail too. Returns status. */
xcoll_status nl_fail(nl_state *st, xcoll_status status, int dead_rank,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* As nl_fail for a failure that every rank must share with its status and
 * message, not only this one (a collective mismatch, found by the ranks
 * whose ring neighbour called another collective; a timeout, which the
 * ranks waiting on the one that waits would otherwise each find later at
 * their own timers): published to the
 * failure key, where every rank's watcher fails the rank with status and a
 * message naming this rank as the one that found it. */
xcoll_status nl_fail_everywhere(nl_state *st, xcoll_status status,
                                const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A timeout: the wait made no progress for XCOLL_TIMEOUT_S, waiting on
 * waits_on[0..count). As nl_fail_everywhere, but naming the rank the stall
 * records (core/blame.h) show made no progress, when they show one, as
 * "rank C stopped making progress", with the message formatted here after
 * it; published unless the store itself does not answer. */
xcoll_status nl_fail_timeout(nl_state *st, const int *waits_on, int count,
                             const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* When this rank has not failed yet and another rank's notice is in the
 * failure key, fail with it (as the watcher would) and return 1; 1 too when
 * this rank had failed already; 0 otherwise. For a thread about to report
 * a failure of its own that the notice may explain (a fingerprint link
 * closed by the rank that found a mismatch), whose watcher may not have
 * read the key yet. Costs a store connection (at most 0.5 s). */
int nl_fail_published(nl_state *st);
/* The backend's failed_status (core/backend.h): fail_status once the
 * backend has failed (every op queued or in flight ends with it:
 * engine.c's op_finish_locked), else XCOLL_SUCCESS. No lock: fail_status
 * is written before failed is raised. */
xcoll_status nl_failed_status(const void *state);
/* Monotonic clock, seconds. */
double nl_now(void);
/* The sentence explaining the calling thread's last failed plugin call
 * (net.h's xcoll_net_last_error, or a placeholder when it gave none). */
const char *nl_net_last_error(void);
/* Start the watcher thread: it waits on the failure key over a store
 * connection of its own and fails the rank with what another rank
 * published there (a death, a collective mismatch). Errors: the store's
 * status (connection), SYSTEM (thread). */
xcoll_status nl_watcher_start(nl_state *st);
/* Stop and join the watcher and close its store connection (idempotent). */
void nl_watcher_join(nl_state *st);

/* ---- desync.c ---- */
/* In start(), under st->lock, world_size > 1: append the call's fingerprint
 * (op->fp, from fill_work) (waiting for a free slot while NL_FP_WINDOW are
 * unsent or unjudged) and write its counter to *index. deferred: the op's
 * steps carry its fingerprint's digest (nl_fp_deferrable), so the fingerprint
 * may wait for a batch (NL_FP_DEFER) and nobody awaits its judgment; otherwise
 * it is sent at once and the op completes only once it was judged. caller_steps
 * (with deferred): the issuing thread runs the step itself once the op is
 * done (nl_fp_step_due, in a blocking wait), so a batch that comes due
 * does not wake the proxy. p2p_sent: the point-to-point messages this rank
 * has queued to the next one (nl_p2p_sent), which the fingerprint carries.
 * Errors: the comm's failure status. */
xcoll_status nl_fp_record(nl_state *st, const xcoll_fingerprint *call,
                          int deferred, int caller_steps, uint64_t p2p_sent,
                          uint64_t *index);
/* 1 when the step has fingerprints to send (a batch came due): what a
 * blocking wait checks after an op recorded with caller_steps. */
int nl_fp_step_due(nl_state *st);
/* 1 when op's fingerprint may be deferred: a collective in which every
 * rank receives steps from the previous one (allreduce, allgather,
 * reduce_scatter, barrier) that carry its digest, so that every adjacent
 * pair of the ring compares it on the data path, as the fingerprints
 * would: LL lines, or a ring kernel's SIMPLE steps where every link
 * carries checks (nl_state.ring_checked). The same answer on every rank,
 * host and GPU: a rank must not await a fingerprint its previous rank
 * deferred. */
int nl_fp_deferrable(const nl_state *st, const nl_op *op);
/* The fingerprint step, when no other thread runs it (trylock): send this
 * rank's fingerprints, receive the previous rank's and compare those whose
 * op started here; a mismatch is nl_fail_everywhere(PROTOCOL) naming both
 * calls. *progress is set when something moved. */
void nl_fp_progress(nl_state *st, int *progress);
/* Fingerprints to send now (not deferred, or a full batch), or a start()
 * waiting for a free slot: the proxy must not sleep. */
int nl_fp_pending(nl_state *st);
/* Make every fingerprint started so far due now (deferred ones included):
 * called by a kernel that has waited long on an LL step, so that a
 * neighbour explaining a failed step (nl_fp_explain) gets this rank's. */
void nl_fp_flush(nl_state *st);
/* For a thread waiting in a host call (p2p.c), no engine op in flight:
 * run the receive side of the step (trylock) until the previous rank's
 * fingerprint of this rank's next op is here, judging the ones before it.
 * 1 and *theirs, *p2p_sent (the point-to-point messages that rank had sent
 * to this one when it started that op) once it is; 0 when not yet (or the
 * step is another thread's now, the link closed, the comm failed). */
int nl_fp_peek(nl_state *st, xcoll_fingerprint *theirs, uint64_t *p2p_sent);
/* After a kernel of op index failed with PROTOCOL (a slot that does not
 * fit its schedule): run the fingerprint step until the previous rank's
 * fingerprint of that op is compared (at most NL_FP_EXPLAIN_S), so that a
 * desync fails naming both calls rather than as a bad slot. */
void nl_fp_explain(nl_state *st, uint64_t index);
/* As nl_fp_explain, after a mesh algorithm's message (pairwise,
 * Rabenseifner) failed a check or size: it came from any rank, and the
 * previous rank may have made the same call as this one. The ranks then
 * differ between two other neighbours, the later of which names both
 * calls to every rank (nl_fail_everywhere): wait for that as well, up to
 * NL_FP_EXPLAIN_S, so that this rank fails with that message. */
void nl_fp_explain_mesh(nl_state *st, uint64_t index);
/* 1 once op `index`'s fingerprint was compared with the previous rank's
 * (or nothing will be: world of one, failed comm, closed link). */
int nl_fp_judged(nl_state *st, uint64_t index);
/* Run the fingerprint step until op `index` is judged, at most limit_s
 * seconds. A collective completes only once judged (engine.c), so that a
 * mismatched call fails itself, not only a later one: calls of the same
 * element size (float32 against int32, sum against max) complete on the
 * data path, and a short next call could complete before the comparison
 * too (seen: the barrier after a dtype mismatch returned success). */
void nl_fp_await(nl_state *st, uint64_t index, double limit_s);

/* ---- gpu_engine.c ---- */
struct xcoll_cuda;
/* Make st a GPU rank on cuda's device: load the ring kernels, allocate the
 * mapped block the FIFOs are carved from (before nl_channels_setup), the
 * gather scratch and the order event; st->abort moves to mapped memory.
 * Errors: NOT_SUPPORTED (built without nvcc, or a driver without the
 * calls), SYSTEM (a driver call failed, named), NO_MEMORY. */
xcoll_status nl_gpu_open(nl_state *st, struct xcoll_cuda *cuda);
/* bytes of zeroed, page-aligned mapped pinned memory from the block, or
 * NULL when it is exhausted (channel.c's FIFOs on a GPU rank). */
void *nl_gpu_carve(nl_state *st, size_t bytes);
/* After the FIFOs exist: write the kernels' connections (device
 * addresses) into mapped memory. */
void nl_gpu_bind_conns(nl_state *st);
/* Free everything nl_gpu_open took (after the proxy has stopped). */
void nl_gpu_close(nl_state *st);
/* Whether a call's buffers are reachable by the device (device, managed or
 * pinned memory); nl_gpu_refusal writes why not into out. */
int nl_gpu_supports(nl_state *st, const xcoll_coll_args *args);
const char *nl_gpu_refusal(nl_state *st, const xcoll_coll_args *args,
                           char *out, size_t bytes);
/* Enqueue op's kernel on its stream (after the previous launch of this
 * comm, whatever its stream) and record op->event (one event record; no
 * event is created or destroyed per launch). Errors: SYSTEM (a
 * driver call failed; the comm is failed, since the ring expected the
 * kernel's slots). */
xcoll_status nl_gpu_launch(nl_state *st, nl_op *op);
/* Query / wait for op's kernel; once it ended, op->status holds a failed
 * kernel's status. Errors: SYSTEM (the driver failed). */
xcoll_status nl_gpu_test(nl_state *st, nl_op *op, int *done);
xcoll_status nl_gpu_wait(nl_state *st, nl_op *op);
/* The proxy thread: retire launches that completed and that no op's test
 * or wait has retired yet (ops_in_flight). */
void nl_gpu_retire(nl_state *st);

/* ---- channel.c ---- */
/* Allocate the FIFOs of every channel and connect the ring, one link per
 * channel and one for fingerprints (st->fp): listen for the previous rank,
 * exchange handles through the store, connect to the next and accept from
 * the previous (non-blocking calls retried until st->timeout_s). Errors: NO_MEMORY, TIMEOUT naming the peer, the plugin's
 * status with its message. */
xcoll_status nl_channels_setup(nl_state *st);
/* Close the net comms and free the FIFOs (idempotent). */
void nl_channels_free(nl_state *st);

/* ---- proxy.c ---- */
xcoll_status nl_proxy_start(nl_state *st);
/* Receives to keep posted ahead per connection over net (device): the
 * plugin's properties.recvs_ahead capped at XCOLL_STEPS, else 1. */
int nl_recvs_ahead(const xcoll_net_v1 *net, int device);
/* 1 when the proxy thread moves the bytes of the ring's connections (a
 * transport with a progress step: net), 0 when the kernels meet in memory
 * (p2p, shm) or there is no ring (a world of one). Every channel connects
 * the same two ranks, so channel 0's transports are every channel's. */
static inline int nl_proxy_moves_ring(const nl_state *st) {
  const nl_channel *ch = &st->channels[0];
  return st->world_size > 1 && (ch->send_transport->send_progress != NULL ||
                                ch->recv_transport->recv_progress != NULL);
}
/* Under st->lock: the proxy may have work now (an op started, fingerprints
 * came due, a kernel left slots to send): end its nap (NL_PROXY_NAP_MS)
 * or its sleep until work, so that it looks at once. Inline here, not in
 * proxy.c, so that the files that wake the proxy (engine.c, desync.c,
 * gpu_engine.c) need none of proxy.c's symbols: no loop among the files
 * (scripts/check-layers.sh). */
static inline void nl_proxy_wake(nl_state *st) {
  st->proxy_kicks++;
  pthread_cond_signal(&st->proxy_cond);
}
/* Stop and join (st->stopping must be set and proxy_cond signalled). */
void nl_proxy_join(nl_state *st);
/* The worker's progress hook (xc_work.progress; ctx is its nl_channel,
 * whose st points back to the state): runs the channel's proxy step when no
 * other thread is running it (trylock), so the thread that waits on a slot
 * also moves it over the network, with no hand-off to the proxy thread.
 * A wait on a counter of a net connection: from the NL_SPINS_BEFORE_POLL-th
 * idle pass (spins) on, when the plugin has get_fds, it sleeps in poll(2)
 * on the channel's sockets for at most NL_POLL_MS and returns 1 (0 when it
 * did not sleep). A wait on a counter of a transport with a wait hook
 * (shm): that hook's. Failures go through nl_fail, which raises the
 * kernels' abort flag. */
int nl_proxy_progress_hook(void *ctx, const xc_atomic_u64 *counter,
                           uint64_t target, uint64_t spins);
/* The worker's notify hook (xc_work.notify, set only when a direction of
 * the channel has a transport with a posted hook): passes the kernel's
 * post of a step to the transport of each direction posted (shm wakes a
 * peer that sleeps on the counter). */
void nl_proxy_notify_hook(void *ctx, int flags);
/* Before a normal comm_destroy: wait (up to timeout_s) until every slot a
 * kernel filled has been sent, so that the last collective's data reaches
 * the next rank before the connections close. */
void nl_proxy_drain(nl_state *st);
/* Under st->lock: the caller overlaps work with its ops (engine.c,
 * "Deferred kicks"): start() wakes the workers from now on, and channel
 * 0's worker runs the items deferred so far. The proxy calls it for a
 * deferred item that came due (core/prompt.h). */
void nl_stop_deferring_locked(nl_state *st);

/* ---- transport/net.c, transport/shm.c: the mesh's carriers ---- */
extern const nl_mesh_ops nl_mesh_net_ops;
extern const nl_mesh_ops nl_mesh_shm_ops;
/* 1 when the mesh's messages from rank a to rank b go through shared
 * memory: shm's can_connect accepts the pair, both took a mesh listener
 * at setup (a host rank of a comm with the mesh; shm.c), and they are two
 * processes. */
int nl_shm_mesh_pair(const nl_rank_info *a, const nl_rank_info *b);
/* After the transports are picked, with a direction of some mesh link
 * on shm: make this rank's mesh segment (a byte ring from each such
 * peer), serve it to those peers and map theirs, through the mesh
 * listener (each connection checked by its SO_PEERCRED pid and uid, as
 * the ring's); then point those links' directions at nl_mesh_shm_ops.
 * Errors: SYSTEM, NO_MEMORY, PROTOCOL (a bad segment), TIMEOUT naming a
 * peer that did not connect or send its segment within st->timeout_s. */
xcoll_status nl_shm_mesh_connect(nl_state *st);
/* 1 while a shm mesh request is posted and not yet complete. */
int nl_shm_mesh_busy(nl_state *st);
/* A thread that drives the mesh and made no progress for waited_s: every
 * NL_SHM_CHECK_S, a peer that a posted shm request waits on and that has
 * died or left fails the comm naming it (nl_fail, REMOTE); then, once it
 * has spun NL_SHM_SPIN_S, sleep on this rank's mesh event count until a
 * peer posts or sleep_ns (0: no sleep). Returns 1 when it slept. */
int nl_shm_mesh_wait(nl_state *st, double waited_s, long sleep_ns);

/* ---- mesh.c ---- */
/* One idle pass of a thread that drives the mesh (spins: idle passes so
 * far, waited_s: seconds since the last progress): the fingerprint step
 * every 64 passes, the deferred fingerprints made due at 256; then, with
 * a shm request in flight, nl_shm_mesh_wait (a sched_yield when it did
 * not sleep); else a sched_yield while waited_s < 10 us, else
 * nl_mesh_poll for NL_POLL_MS (a sched_yield again when it has no
 * descriptor to sleep on). */
void nl_mesh_idle(nl_state *st, uint64_t spins, double waited_s);
/* One pass of a schedule over the mesh: post and test what it can; set
 * *progress when something moved and *done when nothing is left. */
typedef xcoll_status (*nl_mesh_step_fn)(void *ctx, int *progress, int *done);
/* The schedule made no progress for waited_s > st->timeout_s: returns
 * nl_fail_timeout with a message naming what it waits for. */
typedef xcoll_status (*nl_mesh_stuck_fn)(void *ctx, double waited_s);
/* The ranks the schedule waits on now (at most max, into ranks): posted as
 * this rank's stall record when it has made no progress for a while. */
typedef int (*nl_mesh_waits_fn)(void *ctx, int *ranks, int max);
/* Drive a schedule over the mesh to its end on the calling thread (Bruck,
 * pairwise and Rabenseifner share it): step until done, idling with
 * nl_mesh_idle between passes that moved nothing. Returns step's error,
 * ABORTED once the comm's abort flag is raised, or stuck's status after
 * st->timeout_s without progress. */
xcoll_status nl_mesh_drive(nl_state *st, nl_mesh_step_fn step,
                           nl_mesh_waits_fn waits, nl_mesh_stuck_fn stuck,
                           void *ctx);
/* poll(2) the sockets of the mesh directions over net that have a request
 * posted, at most timeout_ms.
 * Returns 1 when one is ready, 0 when none is (or poll failed: the caller
 * tests every link anyway), -1 when the plugin names no descriptor. */
int nl_mesh_poll(nl_state *st, int timeout_ms);

/* ---- bruck.c ---- */
/* Bytes of mesh_out and of mesh_in: a header per link and P blocks. */
#define NL_BRUCK_BUFFER_BYTES(p)                                               \
  (NL_BRUCK_MAX_LINKS * NL_BRUCK_HEADER_BYTES + (size_t)(p)*NL_GATHER_MAX_BYTES)
/* 1 when bruck.c can run a call of this kind (XCOLL_COLL_*), count and
 * dtype over protocol proto (XC_PROTO_*) on this comm: st->bruck, an
 * allreduce (or barrier), allgather, reduce-scatter, broadcast, reduce,
 * gather or scatter over LL whose input on each rank (a reduce-scatter's
 * and a scatter's: world_size * count elements) is at most
 * NL_GATHER_MAX_BYTES; from 3 ranks, or 2 for the rooted ones. The same answer on every
 * rank: it depends on the arguments and on what the ranks agreed at init.
 * nl_bruck_can_run asks it for an op filled by fill_work; whether the op
 * does run on bruck.c is engine.c's choice (fill_work). */
int nl_bruck_fits(const nl_state *st, int kind, size_t count,
                  xcoll_datatype dtype, int proto);
int nl_bruck_can_run(const nl_state *st, const nl_op *op);
/* Run op on the calling thread (channel 0's item): allgather every rank's
 * input with Bruck's algorithm over the mesh, each message carrying the
 * sender's fingerprint, which the receiver compares with its own (a
 * mismatch is nl_fail_everywhere(PROTOCOL) naming both calls), then finish
 * the call from the P inputs: an allgather puts them in rank order into
 * recvbuf (a gather: on the root), a broadcast copies the root's, a
 * scatter this rank's block of the root's, an allreduce reduces them in
 * rank order (the gather algorithm's), a reduce on the root and a
 * reduce-scatter (this rank's block of each) in the ring kernels' order
 * (kernels/ring.h), so results are bitwise what GPU ranks and mixed rings
 * compute and the same on every rank. Waits in poll(2) on
 * the mesh's sockets. Errors: ABORTED (the comm failed), REMOTE naming a
 * peer that closed, TIMEOUT naming the peers not heard from within
 * st->timeout_s, PROTOCOL; each through nl_fail. */
xcoll_status nl_bruck_run(nl_state *st, nl_channel *ch, nl_op *op);

/* ---- pairwise.c ---- */
/* 1 when pairwise.c can run op (filled by fill_work) on this comm:
 * st->pairwise, an allreduce over SIMPLE of at least one element. The same
 * answer on every rank; engine.c's fill_work chooses. */
int nl_pairwise_can_run(const nl_state *st, const nl_op *op);
/* Run op on the calling thread (channel 0's item). The buffer is cut into
 * the ring's pieces (kernels/ring.h xc_ring_allreduce with work.nchannels
 * channels: piece c of a loop is reduced by ring position c) and each
 * piece is reduced by its owner in the ring's order, x[c+1] op x[c+2] ...
 * op x[c], with kernels/reduce.h's functors, so results are bitwise the
 * ring's. Reduce-scatter: every rank sends each piece of its input
 * straight to the piece's owner over the mesh (from the user buffer, in
 * units of at most NL_PAIRWISE_UNIT_BYTES); the owner receives one unit per
 * peer into its stage and reduces them in that order. Allgather: the owner
 * sends each reduced unit to every rank, received straight into recvbuf.
 * Bytes per rank on the wire: 2 (P-1)/P S, as the ring's; messages
 * 2 (P-1) per unit, none of which waits on a third rank. This is the
 * pairwise-exchange reduce-scatter of R. Thakur, R. Rabenseifner, W. Gropp,
 * "Optimization of collective communication operations in MPICH",
 * IJHPCA 19(1), 2005, followed by a direct allgather. Waits as
 * nl_bruck_run. Errors: ABORTED (the comm failed), REMOTE naming a peer
 * that closed, TIMEOUT naming the peers not heard from within
 * st->timeout_s, PROTOCOL (a message of another size: ranks in different
 * collectives; the caller lets the fingerprints explain), NO_MEMORY. */
xcoll_status nl_pairwise_run(nl_state *st, nl_channel *ch, nl_op *op);

/* ---- rabenseifner.c ---- */
/* 1 when this comm can run Rabenseifner's allreduce: st->rabenseifner
 * (agreed at init) and a world size that is a power of two. */
int nl_rabenseifner_on(const nl_state *st);
/* 1 when rabenseifner.c can run op (filled by fill_work) on this comm:
 * nl_rabenseifner_on, the mesh of every rank and its stage (st->pairwise),
 * an allreduce over SIMPLE of at least one element. The same answer on
 * every rank; engine.c's fill_work chooses. */
int nl_rabenseifner_can_run(const nl_state *st, const nl_op *op);
/* Run op on the calling thread (channel 0's item): Rabenseifner's
 * allreduce, a reduce-scatter by recursive halving and an allgather by
 * recursive doubling over the mesh (R. Rabenseifner, ICCS 2004; Thakur,
 * Rabenseifner & Gropp, IJHPCA 19(1), 2005), in core's order of reduction
 * (core/algorithms/allreduce_rabenseifner.c), so that results are bitwise
 * tcp's Rabenseifner; kernels/reduce.h's functors. 2 log2(P) exchanges,
 * each with one partner; bytes per rank on the wire 2 (P-1)/P S, as the
 * ring's. Units of at most NL_PAIRWISE_UNIT_BYTES, NL_PAIRWISE_DEPTH in
 * flight each way. Waits as nl_pairwise_run. Errors: ABORTED (the comm
 * failed), REMOTE naming a partner that closed, TIMEOUT naming the
 * partner not heard from within st->timeout_s, PROTOCOL (a message of
 * another size: ranks in different collectives; the caller lets the
 * fingerprints explain). */
xcoll_status nl_rabenseifner_run(nl_state *st, nl_channel *ch, nl_op *op);

/* ---- p2p.c ---- */
/* The p2p interface (core/p2p.h) of a host rank, over the mesh: core's
 * host algorithms (alltoall(v), gather, scatter, send/recv groups) run
 * over it. Refused with NOT_SUPPORTED when the mesh is off (a GPU rank, or
 * a host rank of a mixed ring). */
extern const xcoll_p2p_ops nl_p2p_ops;
/* Take p2p.c's state (per-peer queues; slots come on first use). Errors:
 * NO_MEMORY. Nothing to do without the mesh. */
xcoll_status nl_p2p_open(nl_state *st);
/* Free it, deregistering the slots (before nl_channels_free closes the
 * comms); idempotent. */
void nl_p2p_close(nl_state *st);
/* 1 when no p2p message is queued or in flight on any link (what an engine
 * op on the mesh needs; core waits for host algorithms before it starts
 * one). */
int nl_p2p_idle(const nl_state *st);
/* Point-to-point messages queued to peer since the comm started (0 without
 * the mesh): what the fingerprint of an op carries for the next rank. */
uint64_t nl_p2p_sent(const nl_state *st, int peer);

/* ---- engine.c ---- */
xcoll_status nl_workers_start(nl_state *st);
void nl_workers_join(nl_state *st);

extern const xcoll_backend_coll_ops nl_coll_ops;
/* The backend's describe_op (core/backend.h): where the ring kernels of
 * the op recorded as flight_id stand on each channel. Reads counters only,
 * no lock: callable from a dump on any thread. A GPU rank's kernels, and
 * the ops that run over the mesh (Bruck, pairwise, Rabenseifner), are not
 * described (0). */
int nl_describe_op(const void *state, uint64_t flight_id,
                   xcoll_backend_channel *out, int max);

/* ---- nccl_like.c ---- */
/* Tests only (tests/nccl_like/test_nl_engine.c): when non-NULL, comm_init
 * uses this plugin instead of xcoll_net_select's. */
extern const xcoll_net_v1 *nl_net_override;

#endif
