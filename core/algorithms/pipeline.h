/* pipeline.h - building blocks shared by the algorithms in core/algorithms/:
 * how a vector is cut into blocks, the chunked and pipelined exchange step
 * that every ring and butterfly step is made of, and chunk tracing.
 * Internal to core/algorithms/. */
#ifndef XCOLL_CORE_ALGORITHMS_PIPELINE_H
#define XCOLL_CORE_ALGORITHMS_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "algorithm.h"
#include "comm.h"
#include "trace.h"
#include "xcoll.h"

/* Block index of parts near-equal blocks of count elements: the first
 * count % parts blocks hold one element more. Sets *offset and *length in
 * elements. Every rank computes the same partition. */
static inline void xcoll_block_range(size_t count, int parts, int index,
                                     size_t *offset, size_t *length) {
  size_t base = count / (size_t)parts;
  size_t extra = count % (size_t)parts;
  size_t i = (size_t)index;
  *offset = i * base + (i < extra ? i : extra);
  *length = base + (i < extra ? 1 : 0);
}

/* (a mod p) for a possibly negative a, as a rank. */
static inline int xcoll_rank_mod(int a, int p) {
  return ((a % p) + p) % p;
}

/* Elements per chunk from comm->options.chunk_bytes (at least one element;
 * 512 KiB when the option is 0), but no more than largest: the biggest piece
 * the caller will cut into chunks, so that receive scratch is never larger
 * than a message (SIZE_MAX: no limit). Every rank must compute the same
 * value: chunking changes the message sizes that p2p matching checks. */
size_t xcoll_chunk_elems(const struct xcoll_comm *comm, size_t elem_size,
                         size_t largest);

/* malloc(bytes) or NULL with XCOLL_ERR_NO_MEMORY set, naming what for.
 * bytes == 0 allocates one byte, so that NULL always means failure. */
void *xcoll_scratch_alloc(struct xcoll_comm *comm, size_t bytes,
                          const char *what);
/* Scratch of bytes in the caller's stack buffer (stack_bytes) when it
 * fits, so that a small call allocates nothing; else xcoll_scratch_alloc.
 * Give it back with xcoll_scratch_release(buffer, stack). */
void *xcoll_scratch_take(struct xcoll_comm *comm, void *stack,
                         size_t stack_bytes, size_t bytes, const char *what);
void xcoll_scratch_release(void *buffer, const void *stack);

/* How a received chunk combines with local data in xcoll_exchange. */
typedef enum xcoll_exchange_mode {
  XCOLL_EXCHANGE_COPY = 0,         /* received data lands in recv_ptr as is */
  XCOLL_EXCHANGE_REDUCE,           /* recv_ptr = local op received */
  XCOLL_EXCHANGE_REDUCE_RECV_FIRST /* recv_ptr = received op local */
} xcoll_exchange_mode;

/* One step of an algorithm: send send_count elements at send_ptr to send_peer
 * and receive recv_count elements from recv_peer, both cut into chunks of
 * chunk_elems elements (the last one shorter) and all sent with tag. Either
 * count may be 0 (no message at all for it), and send_peer / recv_peer are
 * ignored then.
 *
 * COPY: chunks are received straight into recv_ptr, which must not overlap
 * send_ptr. REDUCE / REDUCE_RECV_FIRST: chunk k is received into one of two
 * slots of scratch (2 * chunk_elems elements) and then
 * recv_ptr[i] = local[i] op received[i] (or received op local, which fixes the
 * operand order for bitwise-identical results on both sides of a pair).
 * local may equal recv_ptr, and recv_ptr may overlap send_ptr when the two
 * counts are equal: chunk k is only overwritten after its send completed.
 *
 * Pipelining: two receives are kept posted, so chunk k+1 arrives while chunk
 * k is reduced, and the send of chunk k+1 is posted before chunk k is
 * reduced. Each wait covers this rank's send and receive of the same chunk,
 * so progress never depends on a request nobody waits for.
 *
 * On error the remaining posted requests are waited for (their buffers may be
 * freed afterwards) and the p2p status is returned; its message is set. */
xcoll_status xcoll_exchange(struct xcoll_comm *comm, uint64_t tag,
                            int send_peer, const void *send_ptr,
                            size_t send_count, int recv_peer, void *recv_ptr,
                            size_t recv_count, xcoll_exchange_mode mode,
                            const void *local, void *scratch,
                            size_t chunk_elems, xcoll_datatype dtype,
                            xcoll_op op);

/* The fold that lets power-of-two algorithms (recursive doubling, halving)
 * run on any P (Thakur, Rabenseifner & Gropp 2005): with pow2 the largest
 * power of two <= P and extra = P - pow2, each even rank below 2*extra sends
 * its vector to the odd rank above it and sits out; the remaining pow2 ranks
 * are renumbered 0..pow2-1 (newrank); at the end each odd partner sends the
 * result back. newrank is -1 for a rank that sits out. */
typedef struct xcoll_fold {
  int pow2;
  int extra;
  int newrank;
} xcoll_fold;

static inline xcoll_fold xcoll_fold_plan(int rank, int world_size) {
  xcoll_fold fold;
  fold.pow2 = 1;
  while (fold.pow2 * 2 <= world_size)
    fold.pow2 *= 2;
  fold.extra = world_size - fold.pow2;
  if (rank < 2 * fold.extra)
    fold.newrank = (rank % 2 == 0) ? -1 : rank / 2;
  else
    fold.newrank = rank - fold.extra;
  return fold;
}

/* The rank of the communicator that has newrank in fold. */
static inline int xcoll_fold_rank(const xcoll_fold *fold, int newrank) {
  return newrank < fold->extra ? 2 * newrank + 1 : newrank + fold->extra;
}

/* Fold in: a rank that sits out sends sendbuf (count elements) to rank+1;
 * that partner sets recvbuf = received op sendbuf (the lower rank's data
 * first). Other ranks copy sendbuf to recvbuf when out of place. tag is used
 * for the one message. scratch: 2 chunks, as for xcoll_exchange. */
xcoll_status xcoll_fold_in(struct xcoll_comm *comm, const xcoll_fold *fold,
                           uint64_t tag, const void *sendbuf, void *recvbuf,
                           size_t count, void *scratch, size_t chunk_elems,
                           xcoll_datatype dtype, xcoll_op op);

/* Fold out: each partner sends the result in recvbuf to rank-1, which
 * receives it into recvbuf. */
xcoll_status xcoll_fold_out(struct xcoll_comm *comm, const xcoll_fold *fold,
                            uint64_t tag, void *recvbuf, size_t count,
                            size_t chunk_elems, xcoll_datatype dtype);

/* The frame of an allreduce built for a power of two ranks (recursive
 * doubling, Rabenseifner), run on any P: nothing for count 0; 2 chunks of
 * scratch (what names them in an allocation failure); the fold in (tag
 * step XCOLL_FOLD_STEP_IN) from args->sendbuf into args->recvbuf; then, on
 * the pow2 ranks that stay in and only if the fold in succeeded, body over
 * recvbuf in place, with the fold's newrank numbering; the fold out (tag
 * step XCOLL_FOLD_STEP_OUT); AVG's division by P. body's own tag steps lie
 * strictly between the two. Returns the first failing status. */
#define XCOLL_FOLD_STEP_IN 0
#define XCOLL_FOLD_STEP_OUT 63
typedef xcoll_status (*xcoll_folded_body)(struct xcoll_comm *comm,
                                          const xcoll_coll_args *args,
                                          const xcoll_fold *fold,
                                          void *scratch, size_t chunk_elems);
xcoll_status xcoll_allreduce_folded(struct xcoll_comm *comm,
                                    const xcoll_coll_args *args,
                                    const char *what, xcoll_folded_body body);

/* Tracing of chunk spans: xcoll_trace_clock() is 0 when tracing is off, so
 * that callers pay one call and a branch; xcoll_trace_chunk records the span
 * [start_us, now] named name ("send", "recv", "reduce") with peer and bytes. */
static inline double xcoll_trace_clock(void) {
  return xcoll_trace_enabled() ? xcoll_time_us() : 0.0;
}
void xcoll_trace_chunk(const struct xcoll_comm *comm, const char *name,
                       int peer, size_t bytes, double start_us);

#endif
