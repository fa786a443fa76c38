/* prims.h - ring primitives over the connection FIFOs of conn.h: the
 * vocabulary of NCCL's device code (src/device/primitives.h, prims_simple.h,
 * prims_ll.h), written for xcoll.
 *
 * A primitives object (xc_prims) is built once per collective and channel:
 * send connection, recv connection, user input and output, dtype, op,
 * protocol and slice size, plus a private copy of the two step counters.
 * Then each step of a ring schedule is one short call:
 *   xc_send(p, in, n)                  input            -> next
 *   xc_recv(p, out, n)                 prev             -> output
 *   xc_copy_send(p, in, out, n)        input            -> output, next
 *   xc_recv_send(p, n)                 prev             -> next
 *   xc_recv_copy_send(p, out, n)       prev             -> output, next
 *   xc_recv_reduce_send(p, in, n)      prev op input    -> next
 *   xc_recv_reduce_copy(p, in, out, n) prev op input    -> output
 *   xc_recv_reduce_copy_send(p, in, out, n)
 *                                      prev op input    -> output, next
 * in and out are element offsets into the user input and output; n is in
 * elements. Every call is one generic operation (NCCL's genericOp<Recv, Send,
 * Src, Dst>) selected by four flags. The reduction is always
 * result = received op input (the received partial is the left operand).
 *
 * A call walks its n elements in slices of up to slice_steps steps; a slice
 * waits once for its recv data and its send credits, processes its steps
 * (each one slot), then posts once. A step of the last slice may be partial;
 * the receiver computes the same split from the same n, so no step is empty.
 *
 * SIMPLE: wait (recv: tail >= step + steps; send: head + XCOLL_STEPS >= step
 * + steps), read/reduce/copy straight between slots and user memory, write
 * sizes[] of the send steps, release-store send tail; release-store recv head.
 *
 * LL: the sender packs 8 payload bytes per 16-byte line with flag =
 * xc_ll_flag (step + 1, mixed with the collective's check) beside each 4
 * data bytes, each 8-byte (data, flag) half written as one
 * 64-bit store; it still writes sizes[] and releases tail, so that the proxy
 * knows what to ship. The receiver checks both flags of every line.
 * Why the LL receiver here also waits for tail: NCCL's LL receiver polls the
 * flags alone, relying on each 8-byte half landing atomically (true of GPU
 * stores, and of NCCL's IB path). Over a proxy, the bytes of a step land in
 * the recv slot by a socket recv() (or a memcpy), which writes them in no
 * specified order and not in 8-byte units; a flag could become visible before
 * its data, and a load racing with recv() is a data race in C. So the
 * contract (conn.h) makes the recv proxy release tail only after the whole
 * step has landed, and the LL reader acquires tail before it reads any line:
 * every line it reads is then complete, and the flags become a check that the
 * line belongs to this step (a stale or misrouted slot is caught and reported
 * as XCOLL_ERR_PROTOCOL instead of silently reduced). What LL still buys
 * here: the step boundaries are self-describing, and the same reader works
 * unchanged for a direct (proxy-less) path where a peer kernel writes
 * lines with 64-bit stores, where polling the flags alone is correct.
 *
 * That path is xc_conn.ll_poll: two host ranks over shm, where the sending
 * kernel's stores land in the receiver's slots and nothing else writes
 * them. The sender's last half-line of each pack is a release store
 * (xc_ll_pack). The receiver polls, with acquire, the last half-line of a
 * slice's last step: once it carries that step's flag, every line of the
 * slice is visible (a slot's lines from its previous use carry another
 * step's flag, xc_ll_flag), and is read with its flags checked as above.
 * Or it stops polling once tail says the steps are there (a sender that
 * wrote other flags: then it checks sizes[] too, and a wrong flag is
 * XCOLL_ERR_PROTOCOL). It then reads neither tail nor sizes[] on the
 * common path: per step two cache lines fewer to pull from the sending
 * core, and the line it polls is the data. The sender still writes
 * sizes[] and releases tail, for a sleeping receiver (which waits for
 * tail) and the watchdog. Host kernels only (XC_LL_POLL): the device's
 * pack has no release. Host kernels also remember the largest
 * head they acquired (xc_conn.head_seen) and load head again only when a
 * slice needs credits beyond it, as NCCL's connHead cache does.
 *
 * Bytes each primitive moves for n elements of e bytes (SIMPLE; LL sends and
 * receives twice the payload on the wire):
 *   send: n*e read from input, n*e written to a slot.
 *   recv: n*e read from a slot, n*e written to output.
 *   copySend: input -> output and input -> slot (2 n*e written).
 *   recvCopySend: slot -> output and slot -> slot (2 n*e written).
 *   recvReduceSend: slot and input read, n*e written to a slot.
 *   recvReduceCopy: slot and input read, n*e written to output.
 *   recvReduceCopySend: slot and input read, written to output and to the
 *     send slot (on the device in one pass for a float sum or average with
 *     aligned pointers, else reduced into output, then output copied).
 *
 * Direct sends (host engine only, SIMPLE, when the send connection has
 * direct_from: conn.h): a primitive whose send bytes are user memory that
 * no later primitive of the collective writes skips the slot copy and
 * publishes the address instead, and the proxy sends from there (NCCL's
 * direct* primitives, with the net plugin in the place of the peer GPU):
 *   send: from the input (nothing copied);
 *   copySend: input -> output, sent from the output;
 *   recvCopySend: slot -> output, sent from the output;
 *   recvReduceCopySend: reduced into the output, sent from the output.
 * recvSend and recvReduceSend keep the slot (no user memory holds their
 * bytes). Why the bytes stay untouched until sent: the output a direct
 * send reads is final for the collective, and an input that an in-place
 * collective later overwrites (allreduce's first send) is overwritten only
 * with data that came back round the ring, which the peers computed from
 * these bytes, so the plugin had read them; before the kernel returns
 * (and before AVG divides the output) it waits until the proxy has
 * completed every direct send (xc_prims_wait_direct), so the caller may
 * reuse its buffers. The wire bytes and sizes[] are the same as the slot
 * path's, so a peer cannot tell, and results are bitwise the same.
 *
 * Direct receives (host engine only, SIMPLE, when the recv connection has
 * direct_req: conn.h): before it waits for a slice, the kernel names where
 * each of its steps lands and asks the proxy for them (direct_req). A step
 * whose bytes go unchanged to the output (recv; recvCopySend, whose send is
 * then direct from the output too) lands in the output itself and the
 * kernel copies nothing; the others land in their slots. With both
 * directions direct, a host rank's allgather steps move no byte in user
 * space, as tcp's receive into the user buffer and send from it. Why the
 * output may be written at arrival: the bytes are the step's final output,
 * which is what the slot path would copy there when the kernel consumed
 * the step, and any direct send that read that region (allreduce's first
 * send, in place) had been received by the peers, whose results these
 * bytes are. The receive is posted only once asked for, so it never
 * targets a region of another collective.
 *
 * Threads: on a CUDA rank all threads of the block call the same primitive;
 * thread 0 waits and posts, the elements of a step are split among threads
 * in 16-byte packs (LL: lines) interleaved across the block, so that a
 * warp's accesses coalesce, and the
 * threads meet at barriers; errors are combined with a barrier-or so every
 * thread returns the same status. On the host there is one thread. */
#ifndef XCOLL_KERNELS_PRIMS_H
#define XCOLL_KERNELS_PRIMS_H

#include "conn.h"
#include "reduce.h"
#include "xcoll.h"

/* Host-only trace hook, called once per primitive call with its name (e.g.
 * "recvReduceSend"), its payload bytes and its start and end times in
 * CLOCK_MONOTONIC nanoseconds. Must not block; may be NULL (off). */
typedef void (*xc_trace_fn)(void *ctx, int channel, const char *primitive,
                            size_t bytes, uint64_t start_ns, uint64_t end_ns);

/* Host-only progress hook, called by a waiting kernel before each pause of
 * its spin (xc_wait_counter) with the number of unsuccessful polls so far
 * (from 1), so that the thread that runs the kernel also moves its
 * channel's slots over the network instead of handing them to another
 * thread (backends/nccl_like: the channel's proxy step). It may sleep
 * briefly until the network can progress (nccl_like polls the channel's
 * sockets after a few idle passes, as the tcp backend does) and then
 * returns nonzero: the kernel skips its own pause (sched_yield) and checks
 * the abort flag at once. Must not block for long (a millisecond or so:
 * the abort flag is read between calls); may be NULL (off; always off on
 * the device). */
typedef int (*xc_progress_fn)(void *ctx, const xc_atomic_u64 *counter,
                              uint64_t target, uint64_t spins);
/* The hook's arguments: counter is the FIFO counter waited on (a recv
 * connection's tail or a send connection's head) and target the value it
 * must reach, so that a transport whose peer writes the counter itself
 * (nccl_like's shm) can sleep until that peer posts. */

/* Host-only notify hook, called after the kernel posted a step (released
 * a recv connection's head, flags & XC_OP_RECV, and/or a send
 * connection's tail, flags & XC_OP_SEND), so that a transport can wake a
 * peer that sleeps on that counter (nccl_like's shm). Must not block; may
 * be NULL (off; always off on the device). */
typedef void (*xc_notify_fn)(void *ctx, int flags);

/* Which of the four roles a primitive plays (NCCL's genericOp arguments). */
#define XC_OP_RECV 1 /* read a slot from the previous rank */
#define XC_OP_SEND 2 /* fill a slot for the next rank */
#define XC_OP_SRC 4  /* read user input (reduced with the slot if RECV) */
#define XC_OP_DST 8  /* write user output */

/* The host's one thread takes LL payload XC_LL_BATCH_BYTES at a time, a
 * whole number of 16-byte lines (252) and of wide lines (36). */
#define XC_LL_BATCH_BYTES 2016

/* xc_conn.ll_wide is honoured by host kernels; a device kernel never meets
 * it (channel.c sets it between two host ranks only). */
#ifndef __CUDA_ARCH__
#define XC_LL_WIDE 1
#else
#define XC_LL_WIDE 0
#endif

typedef struct xc_prims {
  xc_conn *send;      /* NULL when this channel sends nothing */
  xc_conn *recv;      /* NULL when it receives nothing */
  /* The connections as the caller passed them; send and recv point at
   * them on the host, at the block's copies in shared memory on the
   * device (xc_prims_init). xc_prims_finish writes the steps back here. */
  xc_conn *send_home, *recv_home;
  const uint8_t *in;  /* user input; offsets are elements from here */
  uint8_t *out;       /* user output */
  xcoll_datatype dtype;
  xcoll_op op;
  size_t elem_bytes;
  int proto;          /* XC_PROTO_SIMPLE or XC_PROTO_LL */
  int slice_steps;    /* steps per slice, 1..XCOLL_STEPS */
  size_t step_elems;  /* payload elements per step (slot) */
  uint64_t send_step; /* private copies of send->step and recv->step, */
  uint64_t recv_step; /* written back by xc_prims_finish */
  const xc_abort *abort;
  xc_trace_fn trace;  /* host only; NULL = off */
  void *trace_ctx;
  xc_progress_fn progress; /* host only; NULL = off */
  void *progress_ctx;
  xc_notify_fn notify; /* host only; NULL = off */
  void *notify_ctx;
  int channel;
  uint64_t direct_until; /* send steps before this went direct (from user
                            memory): xc_prims_wait_direct waits for them */
  uint32_t check; /* xc_work.check: mixed into LL flags (xc_ll_flag) */
} xc_prims;

/* The flag of every LL line of a step: the low 16 bits are those of
 * step + 1, the high 16 those of the collective's check times 2^32 / golden
 * ratio (Knuth's multiplicative hash, whose high bits are the well mixed
 * ones). Equal checks give the same flags on both ends. A slot's lines from
 * its previous use (8 steps earlier) never carry the flag of the step now
 * due, whatever the checks, which is what lets an ll_poll receiver read a
 * step as soon as its flags are there. Different checks differ in the
 * high half with probability 1 - 2^-16, so a rank that receives lines of
 * another collective (the ranks called different ones) fails with
 * XCOLL_ERR_PROTOCOL at the first step it reads, but for that chance, and
 * then at the fingerprint batch that follows (desync.c). */
XC_INLINE XC_HD uint32_t xc_ll_flag(const xc_prims *p, uint64_t step) {
  return ((uint32_t)(step + 1) & 0xFFFFu) |
         ((p->check * 2654435761u) & 0xFFFF0000u);
}

/* Payload bytes a slot of step_bytes carries under proto. */
XC_INLINE XC_HD size_t xc_step_payload_bytes(size_t step_bytes, int proto) {
  return proto == XC_PROTO_LL
             ? step_bytes / XC_LL_LINE_BYTES * XC_LL_PAYLOAD_BYTES
             : step_bytes;
}

/* A slot of step_bytes (a multiple of 16, at least 64) holds in wide lines
 * the payload it holds in 16-byte lines: ceil(step_bytes / 2 / 56) * 64 is
 * at most step_bytes there. */
XC_INLINE XC_HD int xc_conn_ok(const xc_conn *c) {
  return c->buff != NULL && c->head != NULL && c->tail != NULL &&
         c->sizes != NULL && c->step_bytes >= XC_LL_LINE_BYTES &&
         c->step_bytes % XC_LL_LINE_BYTES == 0 &&
         ((uintptr_t)c->buff % XC_LL_LINE_BYTES) == 0 &&
         (!c->ll_wide || c->step_bytes >= XC_LLW_LINE_BYTES);
}

/* Builds p for one collective on one channel. send / recv may be NULL when
 * unused (a one-rank ring). Returns XCOLL_ERR_INVALID_ARGUMENT for an unknown
 * dtype or proto, slice_steps outside 1..XCOLL_STEPS, a connection that
 * breaks conn.h's requirements, or send and recv with different step_bytes. */
XC_INLINE XC_HD xcoll_status xc_prims_init(xc_prims *p, xc_conn *send,
                                           xc_conn *recv, const void *in,
                                           void *out, xcoll_datatype dtype,
                                           xcoll_op op, int proto,
                                           int slice_steps,
                                           const xc_abort *abort) {
  memset(p, 0, sizeof *p);
  p->send = send;
  p->recv = recv;
  p->in = (const uint8_t *)in;
  p->out = (uint8_t *)out;
  p->dtype = dtype;
  p->op = op;
  p->elem_bytes = xc_dtype_size(dtype);
  p->proto = proto;
  p->slice_steps = slice_steps;
  p->abort = abort;
  if (p->elem_bytes == 0 || (proto != XC_PROTO_SIMPLE && proto != XC_PROTO_LL) ||
      slice_steps < 1 || slice_steps > XCOLL_STEPS)
    return XCOLL_ERR_INVALID_ARGUMENT;
  if ((send && !xc_conn_ok(send)) || (recv && !xc_conn_ok(recv)))
    return XCOLL_ERR_INVALID_ARGUMENT;
  if (send && recv && send->step_bytes != recv->step_bytes)
    return XCOLL_ERR_INVALID_ARGUMENT;
  const xc_conn *any = send ? send : recv;
  if (any) {
    p->step_elems =
        xc_step_payload_bytes(any->step_bytes, proto) / p->elem_bytes;
    p->send_step = send ? send->step : 0;
    p->recv_step = recv ? recv->step : 0;
  }
  p->send_home = send;
  p->recv_home = recv;
#ifdef __CUDA_ARCH__
  /* A GPU rank's connections are in pinned host memory mapped into the
   * device (gpu_engine.c): each read of a field would cross PCIe again
   * after every system-scope fence, which invalidates the SM's L1. Thread
   * 0 copies them into shared memory once per launch, as NCCL loads its
   * channel's peers into ncclShmem. The kernel writes only where a copy
   * points (slots, sizes, head, tail), never a field of the copy: its
   * steps go home in xc_prims_finish. */
  __shared__ xc_conn xc_conn_copies[2];
  if (threadIdx.x == 0) {
    if (send)
      xc_conn_copies[0] = *send;
    if (recv)
      xc_conn_copies[1] = *recv;
  }
  __syncthreads();
  if (send)
    p->send = &xc_conn_copies[0];
  if (recv)
    p->recv = &xc_conn_copies[1];
#endif
  return XCOLL_SUCCESS;
}

/* Writes the private step counters back into the connections (all threads
 * call it; thread 0 writes). */
XC_INLINE XC_HD void xc_prims_finish(xc_prims *p) {
  XC_BARRIER();
  if (XC_TID() == 0) {
    if (p->send_home)
      p->send_home->step = p->send_step;
    if (p->recv_home)
      p->recv_home->step = p->recv_step;
  }
  XC_BARRIER();
}

/* Spins until *counter >= target (acquire), calling p's progress hook (host,
 * when set) before each pause. XCOLL_ERR_ABORTED if p's abort flag is raised
 * meanwhile. */
XC_INLINE XC_HD xcoll_status xc_wait_counter(const xc_prims *p,
                                             const xc_atomic_u64 *counter,
                                             uint64_t target) {
  uint64_t spins = 0;
#ifdef __CUDA_ARCH__
  /* Poll without a fence and fence once the target is seen (the acquire,
   * xc_load_relaxed): a system-scope fence per poll would also invalidate
   * the SM's L1 on every pass, as NCCL's device code avoids by polling
   * with ld.volatile. */
  while (xc_load_relaxed(counter) < target)
    if (xc_spin_pause(++spins, p->abort))
      return XCOLL_ERR_ABORTED;
  xc_fence();
  return XCOLL_SUCCESS;
#else
  while (xc_load_acquire(counter) < target) {
    ++spins;
    if (p->progress) {
      int slept = p->progress(p->progress_ctx, counter, target, spins);
      if (xc_load_acquire(counter) >= target)
        break;
      if (slept) {
        if (xc_abort_raised(p->abort))
          return XCOLL_ERR_ABORTED;
        continue;
      }
    }
    if (xc_spin_pause(spins, p->abort))
      return XCOLL_ERR_ABORTED;
  }
  return XCOLL_SUCCESS;
#endif
}

/* This thread's contiguous share [*lo, *hi) of n items. */
XC_INLINE XC_HD void xc_thread_range(size_t n, size_t *lo, size_t *hi) {
  size_t tid = (size_t)XC_TID(), nthreads = (size_t)XC_NTHREADS();
  *lo = n * tid / nthreads;
  *hi = n * (tid + 1) / nthreads;
}

/* One step, SIMPLE: n elements between a recv slot, the user input, the user
 * output and a send slot (each NULL when its role is off). */
XC_INLINE XC_HD void xc_simple_step(const xc_prims *p, int flags,
                                    const uint8_t *in, const uint8_t *rslot,
                                    uint8_t *out, uint8_t *sslot, size_t n) {
#ifdef __CUDA_ARCH__
  /* The block shares the step in 16-byte packs interleaved across its
   * threads (reduce.h's xc_reduce_block, xc_copy_block), so that a warp's
   * loads and stores coalesce; every thread calls this with the same
   * arguments. */
  size_t bytes_all = n * p->elem_bytes;
  if (bytes_all == 0)
    return;
  if ((flags & XC_OP_RECV) && (flags & XC_OP_SRC)) {
    uint8_t *first = (flags & XC_OP_DST) ? out : sslot;
    /* recvReduceCopySend: both destinations in one pass where it can. */
    if ((flags & XC_OP_DST) && (flags & XC_OP_SEND) &&
        xc_reduce_block2(out, sslot, rslot, in, n, p->dtype, p->op))
      return;
    xc_reduce_block(first, rslot, in, n, p->dtype, p->op);
    if ((flags & XC_OP_DST) && (flags & XC_OP_SEND)) {
      XC_BARRIER(); /* other threads' packs of out are read below */
      xc_copy_block(sslot, out, bytes_all);
    }
    return;
  }
  const uint8_t *from = (flags & XC_OP_RECV) ? rslot : in;
  int to_out = (flags & XC_OP_DST) && out != from;
  if (to_out && (flags & XC_OP_SEND))
    xc_copy_block2(out, sslot, from, bytes_all); /* one read of from */
  else if (to_out)
    xc_copy_block(out, from, bytes_all);
  else if (flags & XC_OP_SEND)
    xc_copy_block(sslot, from, bytes_all);
  return;
#endif
  size_t lo, hi, e = p->elem_bytes;
  xc_thread_range(n, &lo, &hi);
  size_t at = lo * e, bytes = (hi - lo) * e;
  if (bytes == 0)
    return;
  if ((flags & XC_OP_RECV) && (flags & XC_OP_SRC)) {
    uint8_t *first = (flags & XC_OP_DST) ? out : sslot;
    xc_reduce_into(first + at, rslot + at, in + at, hi - lo, p->dtype, p->op);
    if ((flags & XC_OP_DST) && (flags & XC_OP_SEND))
      memcpy(sslot + at, out + at, bytes);
    return;
  }
  const uint8_t *src = (flags & XC_OP_RECV) ? rslot : in;
  if ((flags & XC_OP_DST) && out != src)
    memcpy(out + at, src + at, bytes);
  if (flags & XC_OP_SEND)
    memcpy(sslot + at, src + at, bytes);
}

/* The host's LL lines two at a time in SSE2 registers (x86-64's baseline),
 * for gcc's build of the host engine only (nvcc's host pass, which no rank
 * runs the host engine from, keeps the portable loops). Plain 16-byte
 * accesses are enough: a host reader touches a line only after acquiring
 * the tail, or the last half-line (ll_poll), that the writer released
 * after its other lines (see the top of this file), so no access races
 * with another; the line-at-a-time loops
 * below cost about half of a 4 KiB LL allreduce at P=2. */
#if defined(__SSE2__) && !defined(__CUDACC__)
#include <emmintrin.h>
#define XC_LL_SSE2 1
#endif

/* xc_conn.ll_poll is honoured by host kernels (see the top of this file). */
#ifndef __CUDA_ARCH__
#define XC_LL_POLL 1
#else
#define XC_LL_POLL 0
#endif

/* LL: unpacks lines [0, nlines) of a slot into payload (8 bytes per line).
 * Returns nonzero if a flag is not the expected one. */
XC_INLINE XC_HD int xc_ll_unpack(const uint8_t *lines, size_t nlines,
                                 uint32_t flag, uint8_t *payload) {
  int bad = 0;
  size_t i = 0;
#ifdef XC_LL_SSE2
  /* Lines {d0, f, d1, f} and {d2, f, d3, f}: lanes 0 and 2 of each are
   * payload, 1 and 3 flags. */
  const __m128i want = _mm_set1_epi32((int)flag);
  __m128i diff = _mm_setzero_si128();
  for (; i + 2 <= nlines; i += 2) {
    __m128i l0 = _mm_loadu_si128(
        (const __m128i *)(const void *)(lines + i * XC_LL_LINE_BYTES));
    __m128i l1 = _mm_loadu_si128(
        (const __m128i *)(const void *)(lines + (i + 1) * XC_LL_LINE_BYTES));
    __m128i s0 = _mm_shuffle_epi32(l0, _MM_SHUFFLE(3, 1, 2, 0));
    __m128i s1 = _mm_shuffle_epi32(l1, _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128((__m128i *)(void *)(payload + i * XC_LL_PAYLOAD_BYTES),
                     _mm_unpacklo_epi64(s0, s1));
    diff = _mm_or_si128(diff, _mm_xor_si128(_mm_unpackhi_epi64(s0, s1), want));
  }
  bad = _mm_movemask_epi8(_mm_cmpeq_epi32(diff, _mm_setzero_si128())) != 0xFFFF;
#endif
  for (; i < nlines; i++) {
    uint64_t h0 = xc_load_u64_relaxed(lines + i * XC_LL_LINE_BYTES);
    uint64_t h1 = xc_load_u64_relaxed(lines + i * XC_LL_LINE_BYTES + 8);
    bad |= (uint32_t)(h0 >> 32) != flag || (uint32_t)(h1 >> 32) != flag;
    uint32_t d1 = (uint32_t)h0, d2 = (uint32_t)h1;
    memcpy(payload + i * XC_LL_PAYLOAD_BYTES, &d1, 4);
    memcpy(payload + i * XC_LL_PAYLOAD_BYTES + 4, &d2, 4);
  }
  return bad;
}

/* LL: packs bytes of payload into lines (the last one zero-padded). The
 * layout {data1, flag1, data2, flag2} read as two little-endian 64-bit words
 * is (data1 | flag << 32), (data2 | flag << 32). */
XC_INLINE XC_HD void xc_ll_pack(uint8_t *lines, const uint8_t *payload,
                                size_t bytes, uint32_t flag) {
  size_t nlines = (bytes + XC_LL_PAYLOAD_BYTES - 1) / XC_LL_PAYLOAD_BYTES;
  size_t i = 0;
#ifdef XC_LL_SSE2
  /* 16 payload bytes {d0, d1, d2, d3} make lines {d0, f, d1, f} and
   * {d2, f, d3, f}. */
  const __m128i f = _mm_set1_epi32((int)flag);
  for (; (i + 2) * XC_LL_PAYLOAD_BYTES <= bytes && i + 2 < nlines; i += 2) {
    __m128i p = _mm_loadu_si128(
        (const __m128i *)(const void *)(payload + i * XC_LL_PAYLOAD_BYTES));
    _mm_storeu_si128((__m128i *)(void *)(lines + i * XC_LL_LINE_BYTES),
                     _mm_unpacklo_epi32(p, f));
    _mm_storeu_si128((__m128i *)(void *)(lines + (i + 1) * XC_LL_LINE_BYTES),
                     _mm_unpackhi_epi32(p, f));
  }
#endif
  for (; i < nlines; i++) {
    uint32_t d[2] = {0, 0};
    size_t at = i * XC_LL_PAYLOAD_BYTES;
    size_t len = bytes - at < XC_LL_PAYLOAD_BYTES ? bytes - at
                                                  : XC_LL_PAYLOAD_BYTES;
    memcpy(d, payload + at, len);
    xc_store_u64_relaxed(lines + i * XC_LL_LINE_BYTES,
                         (uint64_t)d[0] | ((uint64_t)flag << 32));
    uint64_t h1 = (uint64_t)d[1] | ((uint64_t)flag << 32);
    /* The last half-line is a release: an ll_poll reader that acquires
     * its flag sees every line before it (the SSE2 pairs stop short of
     * the last line for this). */
    if (i + 1 == nlines)
      xc_store_u64_release(lines + i * XC_LL_LINE_BYTES + 8, h1);
    else
      xc_store_u64_relaxed(lines + i * XC_LL_LINE_BYTES + 8, h1);
  }
}

#if XC_LL_WIDE
/* A wide line's flag word (conn.h): the flag in both halves, so that the
 * ll_poll wait reads it as it reads a 16-byte line's last half. */
XC_INLINE uint64_t xc_llw_word(uint32_t flag) {
  return (uint64_t)flag << 32 | flag;
}

/* Wide LL: packs bytes of payload into ceil(bytes / 56) wide lines. Each
 * line's flag word is stored with release after its payload, so a reader
 * that acquires the last flag word sees every line before it; the unused
 * bytes of the last line are not written. */
XC_INLINE void xc_llw_pack(uint8_t *lines, const uint8_t *payload,
                           size_t bytes, uint32_t flag) {
  const uint64_t word = xc_llw_word(flag);
  size_t at = 0;
  uint8_t *line = lines;
  for (; at + XC_LLW_PAYLOAD_BYTES <= bytes;
       at += XC_LLW_PAYLOAD_BYTES, line += XC_LLW_LINE_BYTES) {
    memcpy(line, payload + at, XC_LLW_PAYLOAD_BYTES);
    xc_store_u64_release(line + XC_LLW_PAYLOAD_BYTES, word);
  }
  if (at < bytes) {
    memcpy(line, payload + at, bytes - at);
    xc_store_u64_release(line + XC_LLW_PAYLOAD_BYTES, word);
  }
}

/* Wide LL: unpacks bytes of payload from its lines. Returns nonzero if a
 * flag word is not the expected one. The caller has acquired the last
 * line's flag word, or tail. */
XC_INLINE int xc_llw_unpack(const uint8_t *lines, size_t bytes,
                            uint32_t flag, uint8_t *payload) {
  const uint64_t word = xc_llw_word(flag);
  uint64_t diff = 0;
  size_t at = 0;
  const uint8_t *line = lines;
  for (; at + XC_LLW_PAYLOAD_BYTES <= bytes;
       at += XC_LLW_PAYLOAD_BYTES, line += XC_LLW_LINE_BYTES) {
    diff |= xc_load_u64_relaxed(line + XC_LLW_PAYLOAD_BYTES) ^ word;
    memcpy(payload + at, line, XC_LLW_PAYLOAD_BYTES);
  }
  if (at < bytes) {
    diff |= xc_load_u64_relaxed(line + XC_LLW_PAYLOAD_BYTES) ^ word;
    memcpy(payload + at, line, bytes - at);
  }
  return diff != 0;
}
#endif

/* The middle of an LL batch of bytes at payload offset at: with RECV, buf
 * holds the received payload, reduced with the input (SRC) or copied to the
 * output (DST); without, the input is copied to the output (DST). Returns
 * where the batch's bytes to send are. */
XC_INLINE XC_HD const uint8_t *xc_ll_batch_data(const xc_prims *p, int flags,
                                                const uint8_t *in,
                                                uint8_t *out, uint8_t *buf,
                                                size_t at, size_t bytes) {
  if (!(flags & XC_OP_RECV)) {
    if ((flags & XC_OP_DST) && out != in)
      memcpy(out + at, in + at, bytes);
    return in + at;
  }
  if (flags & XC_OP_SRC) {
    uint8_t *dst = (flags & XC_OP_DST) ? out + at : buf;
    xc_reduce_into(dst, buf, in + at, bytes / p->elem_bytes, p->dtype, p->op);
    return dst;
  }
  if (flags & XC_OP_DST)
    memcpy(out + at, buf, bytes);
  return buf;
}

/* One step, LL: like xc_simple_step, with slots holding lines. rflag/sflag
 * are the expected/written flags. Returns nonzero on a bad recv flag. Lines
 * after a wrong flag are not sent: an ll_poll receiver reads a step by its
 * last line's flag. */
XC_INLINE XC_HD int xc_ll_step(const xc_prims *p, int flags, const uint8_t *in,
                               const uint8_t *rslot, uint8_t *out,
                               uint8_t *sslot, size_t n, uint32_t rflag,
                               uint32_t sflag) {
  size_t total = n * p->elem_bytes;
  int bad = 0;
#ifndef __CUDA_ARCH__
  /* The host's one thread takes batches of payload bytes through a stack
   * buffer, each a whole number of lines in either format and of elements
   * (every element size divides 2016), so that a batch is unpacked,
   * reduced and packed on its own. */
  uint64_t bounce[XC_LL_BATCH_BYTES / 8];
  for (size_t at = 0; at < total; at += XC_LL_BATCH_BYTES) {
    size_t bytes = total - at < XC_LL_BATCH_BYTES ? total - at
                                                  : XC_LL_BATCH_BYTES;
    uint8_t *buf = (uint8_t *)bounce;
    if ((flags & XC_OP_RECV) && p->recv->ll_wide)
      bad |= xc_llw_unpack(
          rslot + at / XC_LLW_PAYLOAD_BYTES * XC_LLW_LINE_BYTES, bytes, rflag,
          buf);
    else if (flags & XC_OP_RECV)
      bad |= xc_ll_unpack(
          rslot + at / XC_LL_PAYLOAD_BYTES * XC_LL_LINE_BYTES,
          (bytes + XC_LL_PAYLOAD_BYTES - 1) / XC_LL_PAYLOAD_BYTES, rflag, buf);
    const uint8_t *result = xc_ll_batch_data(p, flags, in, out, buf, at, bytes);
    if ((flags & XC_OP_SEND) && !bad && p->send->ll_wide)
      xc_llw_pack(sslot + at / XC_LLW_PAYLOAD_BYTES * XC_LLW_LINE_BYTES, result,
                  bytes, sflag);
    else if ((flags & XC_OP_SEND) && !bad)
      xc_ll_pack(sslot + at / XC_LL_PAYLOAD_BYTES * XC_LL_LINE_BYTES, result,
                 bytes, sflag);
  }
#else
  /* A CUDA block's threads take one line each, interleaved, so that a warp
   * reads and writes 32 adjacent lines (coalesced). */
  size_t nlines = (total + XC_LL_PAYLOAD_BYTES - 1) / XC_LL_PAYLOAD_BYTES;
  uint64_t bounce[1];
  for (size_t line = (size_t)XC_TID(); line < nlines;
       line += (size_t)XC_NTHREADS()) {
    size_t at = line * XC_LL_PAYLOAD_BYTES; /* payload byte offset */
    /* whole elements: 8-byte lines hold whole ones */
    size_t bytes = total - at < XC_LL_PAYLOAD_BYTES ? total - at
                                                    : XC_LL_PAYLOAD_BYTES;
    uint8_t *buf = (uint8_t *)bounce;
    if (flags & XC_OP_RECV)
      bad |= xc_ll_unpack(rslot + line * XC_LL_LINE_BYTES, 1, rflag, buf);
    const uint8_t *result = xc_ll_batch_data(p, flags, in, out, buf, at, bytes);
    if ((flags & XC_OP_SEND) && !bad)
      xc_ll_pack(sslot + line * XC_LL_LINE_BYTES, result, bytes, sflag);
  }
#endif
  return bad;
}

/* Wire bytes of a step that carries n elements over connection c. */
XC_INLINE XC_HD int64_t xc_conn_wire_bytes(const xc_prims *p, const xc_conn *c,
                                           size_t n) {
  size_t bytes = n * p->elem_bytes;
  if (p->proto != XC_PROTO_LL)
    return (int64_t)bytes;
#if XC_LL_WIDE
  if (c->ll_wide)
    return (int64_t)((bytes + XC_LLW_PAYLOAD_BYTES - 1) /
                     XC_LLW_PAYLOAD_BYTES * XC_LLW_LINE_BYTES);
#else
  (void)c;
#endif
  return (int64_t)((bytes + XC_LL_PAYLOAD_BYTES - 1) / XC_LL_PAYLOAD_BYTES *
                   XC_LL_LINE_BYTES);
}

#if XC_LL_POLL
/* Waits until the slice's lines are there (*by_flags = 1) or tail says
 * its steps are (*by_flags = 0), with xc_wait_counter's progress hook and
 * pauses (a hook that sleeps waits for tail). The lines are there once the
 * last half-line of the slice's last step (n elements from the slice's
 * start, nsteps steps) carries that step's flag: it is the sender's last
 * store of the slice, a release (xc_ll_pack), so acquiring it makes every
 * line of the slice visible (see the top of this file). XCOLL_ERR_ABORTED
 * if the abort flag is raised meanwhile. */
XC_INLINE xcoll_status xc_wait_ll_poll(const xc_prims *p, size_t n,
                                       uint64_t nsteps, int *by_flags) {
  const xc_atomic_u64 *tail = p->recv->tail;
  uint64_t target = p->recv_step + nsteps;
  /* The half-line to poll and the flag it must carry, once per wait. */
  size_t seg = (size_t)(nsteps - 1) * p->step_elems;
  size_t seg_n = n - seg < p->step_elems ? n - seg : p->step_elems;
  size_t line_bytes = p->recv->ll_wide ? XC_LLW_LINE_BYTES : XC_LL_LINE_BYTES;
  size_t nlines = (size_t)xc_conn_wire_bytes(p, p->recv, seg_n) / line_bytes;
  uint64_t step = target - 1;
  /* The last 8 bytes of the last line: a flag word, or a half-line. */
  const uint8_t *last = p->recv->buff +
                        (step % XCOLL_STEPS) * p->recv->step_bytes +
                        nlines * line_bytes - 8;
  uint32_t flag = xc_ll_flag(p, step);
  uint64_t spins = 0;
  for (;;) {
    if ((uint32_t)(xc_load_u64_acquire(last) >> 32) == flag) {
      *by_flags = 1;
      return XCOLL_SUCCESS;
    }
    if (xc_load_acquire(tail) >= target) {
      *by_flags = 0;
      return XCOLL_SUCCESS;
    }
    ++spins;
    if (p->progress) {
      int slept = p->progress(p->progress_ctx, tail, target, spins);
      if (slept) {
        if (xc_abort_raised(p->abort))
          return XCOLL_ERR_ABORTED;
        continue;
      }
    }
    if (xc_spin_pause(spins, p->abort))
      return XCOLL_ERR_ABORTED;
  }
}
#endif

/* The one generic operation under every primitive: nelem elements, from
 * input offset in_off and/or to output offset out_off (elements), roles in
 * flags. Errors: XCOLL_ERR_ABORTED (abort raised while waiting),
 * XCOLL_ERR_PROTOCOL (a recv step whose sizes[] or LL flags do not match
 * what this rank expects: the peers disagree on the schedule or a proxy
 * delivered the wrong bytes). */
XC_INLINE XC_HD xcoll_status xc_generic_op(xc_prims *p, int flags,
                                           size_t in_off, size_t out_off,
                                           size_t nelem) {
  size_t e = p->elem_bytes;
  size_t slice_elems = p->step_elems * (size_t)p->slice_steps;
  /* Direct send (see the top of this file): the role list without SEND is
   * what remains to do here; the proxy reads the bytes from the output
   * (or, for a plain send, the input). */
  int direct = 0;
#ifndef __CUDA_ARCH__
  direct = (flags & XC_OP_SEND) && p->proto == XC_PROTO_SIMPLE &&
           p->send->direct_from != NULL &&
           ((flags & XC_OP_DST) || !(flags & XC_OP_RECV));
#endif
  int step_flags = direct ? flags & ~XC_OP_SEND : flags;
  /* Direct receive (see the top of this file): the proxy writes the
   * output; nothing is left to copy here (a send is direct too). */
#ifndef __CUDA_ARCH__
  int rdirect = (flags & XC_OP_RECV) && (flags & XC_OP_DST) &&
            !(flags & XC_OP_SRC) && p->proto == XC_PROTO_SIMPLE &&
            p->recv->direct_req != NULL && (!(flags & XC_OP_SEND) || direct);
  if (rdirect)
    step_flags &= ~(XC_OP_RECV | XC_OP_DST);
#endif
  for (size_t done = 0; done < nelem; done += slice_elems) {
    size_t n = nelem - done < slice_elems ? nelem - done : slice_elems;
    uint64_t nsteps = (n + p->step_elems - 1) / p->step_elems;
    int failed = 0; /* 1 aborted, 2 protocol */
#ifndef __CUDA_ARCH__
    if ((flags & XC_OP_RECV) && p->recv->direct_req != NULL) {
      /* Ask for the slice's steps, naming where each lands. */
      for (uint64_t j = 0; j < nsteps; j++) {
        size_t seg = (size_t)j * p->step_elems;
        size_t seg_n = n - seg < p->step_elems ? n - seg : p->step_elems;
        size_t slot = (size_t)((p->recv_step + j) % XCOLL_STEPS);
        p->recv->direct_to[slot] =
            rdirect ? p->out + (out_off + done + seg) * e : NULL;
        p->recv->direct_to_bytes[slot] = rdirect ? seg_n * e : 0;
      }
      xc_store_release(p->recv->direct_req, p->recv_step + nsteps);
    }
#endif
    int by_flags = 0; /* ll_poll: the flags said the slice is there */
    if (XC_TID() == 0) {
#if XC_LL_POLL
      if ((flags & XC_OP_RECV) && p->recv->ll_poll &&
          p->proto == XC_PROTO_LL) {
        if (xc_wait_ll_poll(p, n, nsteps, &by_flags))
          failed = 1;
      } else
#endif
      if ((flags & XC_OP_RECV) &&
          xc_wait_counter(p, p->recv->tail, p->recv_step + nsteps))
        failed = 1;
      /* Credits: head + XCOLL_STEPS >= send_step + nsteps. */
      uint64_t need = p->send_step + nsteps;
      if (!failed && (flags & XC_OP_SEND) && need > XCOLL_STEPS) {
#ifndef __CUDA_ARCH__
        if (p->send->head_seen < need - XCOLL_STEPS) {
          if (xc_wait_counter(p, p->send->head, need - XCOLL_STEPS))
            failed = 1;
          else
            p->send->head_seen = xc_load_acquire(p->send->head);
        }
#else
        if (xc_wait_counter(p, p->send->head, need - XCOLL_STEPS))
          failed = 1;
#endif
      }
    }
    if (XC_BARRIER_OR(failed == 1))
      return XCOLL_ERR_ABORTED;
    for (uint64_t j = 0; j < nsteps; j++) {
      size_t seg = (size_t)j * p->step_elems;
      size_t seg_n = n - seg < p->step_elems ? n - seg : p->step_elems;
      const uint8_t *in = (flags & XC_OP_SRC) ? p->in + (in_off + done + seg) * e
                                              : NULL;
      uint8_t *out = (flags & XC_OP_DST) ? p->out + (out_off + done + seg) * e
                                         : NULL;
      const uint8_t *rslot = NULL;
      uint8_t *sslot = NULL;
      uint64_t rstep = p->recv_step + j, sstep = p->send_step + j;
      if (flags & XC_OP_RECV) {
        rslot = p->recv->buff + (rstep % XCOLL_STEPS) * p->recv->step_bytes;
        /* Lines read by their flags may come before sizes[] (and carry
         * the check in their flags). */
        if (XC_TID() == 0 && !by_flags &&
            p->recv->sizes[rstep % XCOLL_STEPS] !=
                xc_conn_wire_bytes(p, p->recv, seg_n))
          failed = 2;
#ifndef __CUDA_ARCH__
        if (!by_flags && p->recv->checks != NULL &&
            p->recv->checks[rstep % XCOLL_STEPS] != p->check)
          failed = 2;
#endif
      }
      if (flags & XC_OP_SEND) {
        sslot = p->send->buff + (sstep % XCOLL_STEPS) * p->send->step_bytes;
        if (p->send->direct_from != NULL && XC_TID() == 0)
          p->send->direct_from[sstep % XCOLL_STEPS] =
              !direct ? NULL : (flags & XC_OP_DST) ? out : in;
      }
      if (p->proto == XC_PROTO_LL) {
        /* A step after a failed check is not written: an ll_poll receiver
         * would take its flags for a good step. */
        if (!failed && xc_ll_step(p, flags, in, rslot, out, sslot, seg_n,
                                  xc_ll_flag(p, rstep), xc_ll_flag(p, sstep)))
          failed = 2;
      } else {
        if (step_flags != 0) /* 0: direct both ways, nothing to copy */
          xc_simple_step(p, step_flags, in, rslot, out, sslot, seg_n);
      }
      if ((flags & XC_OP_SEND) && XC_TID() == 0) {
        p->send->sizes[sstep % XCOLL_STEPS] =
            xc_conn_wire_bytes(p, p->send, seg_n);
#ifndef __CUDA_ARCH__
        if (p->send->checks != NULL)
          p->send->checks[sstep % XCOLL_STEPS] = p->check;
#endif
      }
    }
    /* Every thread's slot writes come before the post: the barrier orders
     * them before thread 0's release (xc_store_release's system-scope
     * fence is cumulative over what the barrier made it observe), as
     * NCCL's postPeer has one thread fence after the block's barrier. */
    if (XC_BARRIER_OR(failed == 2))
      return XCOLL_ERR_PROTOCOL;
    if (XC_TID() == 0) {
      if (flags & XC_OP_RECV)
        xc_store_release(p->recv->head, p->recv_step + nsteps);
      if (flags & XC_OP_SEND)
        xc_store_release(p->send->tail, p->send_step + nsteps);
#ifndef __CUDA_ARCH__
      if (p->notify)
        p->notify(p->notify_ctx, flags & (XC_OP_RECV | XC_OP_SEND));
#endif
    }
    if (flags & XC_OP_RECV)
      p->recv_step += nsteps;
    if (flags & XC_OP_SEND)
      p->send_step += nsteps;
    if (direct)
      p->direct_until = p->send_step;
  }
  return XCOLL_SUCCESS;
}

/* Waits until the proxy has completed every direct send of this
 * collective (send head >= direct_until), so that the user memory they
 * read may change: before an AVG division of the output and before the
 * kernel returns. XCOLL_ERR_ABORTED as xc_wait_counter. */
XC_INLINE XC_HD xcoll_status xc_prims_wait_direct(xc_prims *p) {
  int failed = 0;
  if (XC_TID() == 0 && p->direct_until > 0 &&
      xc_wait_counter(p, p->send->head, p->direct_until))
    failed = 1;
  return XC_BARRIER_OR(failed) ? XCOLL_ERR_ABORTED : XCOLL_SUCCESS;
}

/* Runs the generic op, reporting it to the trace hook on the host. */
XC_INLINE XC_HD xcoll_status xc_prim(xc_prims *p, const char *name, int flags,
                                     size_t in_off, size_t out_off,
                                     size_t nelem) {
#ifndef __CUDA_ARCH__
  if (p->trace != NULL && nelem > 0) {
    uint64_t start = xc_now_ns();
    xcoll_status status = xc_generic_op(p, flags, in_off, out_off, nelem);
    p->trace(p->trace_ctx, p->channel, name, nelem * p->elem_bytes, start,
             xc_now_ns());
    return status;
  }
#endif
  (void)name;
  return xc_generic_op(p, flags, in_off, out_off, nelem);
}

XC_INLINE XC_HD xcoll_status xc_send(xc_prims *p, size_t in, size_t n) {
  return xc_prim(p, "send", XC_OP_SEND | XC_OP_SRC, in, 0, n);
}
XC_INLINE XC_HD xcoll_status xc_recv(xc_prims *p, size_t out, size_t n) {
  return xc_prim(p, "recv", XC_OP_RECV | XC_OP_DST, 0, out, n);
}
XC_INLINE XC_HD xcoll_status xc_copy_send(xc_prims *p, size_t in, size_t out,
                                          size_t n) {
  return xc_prim(p, "copySend", XC_OP_SRC | XC_OP_DST | XC_OP_SEND, in, out, n);
}
XC_INLINE XC_HD xcoll_status xc_recv_send(xc_prims *p, size_t n) {
  return xc_prim(p, "recvSend", XC_OP_RECV | XC_OP_SEND, 0, 0, n);
}
XC_INLINE XC_HD xcoll_status xc_recv_copy_send(xc_prims *p, size_t out,
                                               size_t n) {
  return xc_prim(p, "recvCopySend", XC_OP_RECV | XC_OP_DST | XC_OP_SEND, 0,
                 out, n);
}
XC_INLINE XC_HD xcoll_status xc_recv_reduce_send(xc_prims *p, size_t in,
                                                 size_t n) {
  return xc_prim(p, "recvReduceSend", XC_OP_RECV | XC_OP_SRC | XC_OP_SEND, in,
                 0, n);
}
XC_INLINE XC_HD xcoll_status xc_recv_reduce_copy(xc_prims *p, size_t in,
                                                 size_t out, size_t n) {
  return xc_prim(p, "recvReduceCopy", XC_OP_RECV | XC_OP_SRC | XC_OP_DST, in,
                 out, n);
}
XC_INLINE XC_HD xcoll_status xc_recv_reduce_copy_send(xc_prims *p, size_t in,
                                                      size_t out, size_t n) {
  return xc_prim(p, "recvReduceCopySend",
                 XC_OP_RECV | XC_OP_SRC | XC_OP_DST | XC_OP_SEND, in, out, n);
}

/* Local copy input -> output of n elements (a one-rank ring); no FIFO.
 * On the device every thread of the block moves its interleaved 16-byte
 * packs (xc_copy_block): a reader of another thread's part waits at
 * XC_BARRIER first. */
XC_INLINE XC_HD void xc_copy_local(xc_prims *p, size_t in, size_t out,
                                   size_t n) {
  size_t e = p->elem_bytes;
  if (p->in + in * e == p->out + out * e)
    return;
  xc_copy_block(p->out + out * e, p->in + in * e, n * e);
}

#endif
