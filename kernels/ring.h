/* ring.h - ring collectives as sequences of primitives (kernels/prims.h): the
 * body of one channel of a collective, run by a host worker thread or by one
 * CUDA thread block. backends/nccl_like/ fills an xc_work and the two
 * connections of a channel and calls xc_ring_run.
 *
 * Source: NCCL's runRing (src/device/all_reduce.h, reduce_scatter.h,
 * all_gather.h, broadcast.h, reduce.h); the bandwidth-optimal ring allreduce
 * of Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
 * of workstations", JPDC 2009. k = nranks ring positions, r = this rank's,
 * chunk c is the c-th of k pieces of a loop (allreduce) or rank block c
 * (reduce_scatter, allgather); indices mod k.
 *
 *   allreduce:      send(c=r-1); for j=2..k-1 recvReduceSend(r-j);
 *                   recvReduceCopySend(r) [final]; for j=1..k-2
 *                   recvCopySend(r-j); recv(r+1).        2(k-1) steps
 *   allreduce, small (XC_ALGO_GATHER): allgather the inputs, reduce
 *                   locally (xc_gather_allreduce).         k-1 steps
 *   reduce_scatter: send(r-1); for j=2..k-1 recvReduceSend(r-j);
 *                   recvReduceCopy(r -> output).          k-1 steps
 *   allgather:      copySend(r) (send if in place); for j=1..k-2
 *                   recvCopySend(r-j); recv(r+1).         k-1 steps
 *   broadcast:      root copySend (send if in place); the rank before the
 *                   root recv; others recvCopySend.       k-1 hops, pipelined
 *   reduce:         the rank after the root send; root recvReduceCopy;
 *                   others recvReduceSend.                 k-1 hops, pipelined
 *
 * Bytes each rank puts on the wire, for P ranks and S bytes (allreduce,
 * broadcast and reduce: the buffer; reduce_scatter: the send buffer;
 * allgather: the receive buffer): allreduce 2(P-1)/P * S; reduce_scatter and
 * allgather (P-1)/P * S; broadcast and reduce S (every rank but one).
 * LL doubles these (8 payload bytes per 16-byte line).
 *
 * Reduction order: the partial of chunk c starts at ring position c+1 and
 * picks up one rank per hop as acc = acc op x[that rank], so
 *   result[c] = (((x[c+1] op x[c+2]) op x[c+3]) ... ) op x[c]
 * (reduce: the same with c = root). It is computed once, by position c, and
 * copied to every other rank unchanged, so allreduce results are bitwise
 * identical on every rank; the order depends only on c, so it is also the
 * same from run to run. AVG divides once at the end (xc_scale_avg), on each
 * rank's own output, by nranks: the same division of the same bits.
 *
 * Partition: the elements of a buffer (allreduce, broadcast, reduce) or of
 * each rank block (reduce_scatter, allgather) are split among channels in
 * contiguous shares aligned to 16 bytes; within a channel, allreduce loops
 * over k*chunk elements with a per-loop chunk of
 * min(chunk, alignUp(divUp(rest, k), 16 bytes)), the others over chunks of
 * chunk = chunk_steps slots; a primitive call walks its chunk in slices of
 * slice_steps slots. Chunks that come out empty are skipped by every rank
 * alike. */
#ifndef XCOLL_KERNELS_RING_H
#define XCOLL_KERNELS_RING_H

#include "prims.h"

/* Collective kinds: the values of core/algorithm.h's xcoll_coll_kind
 * (duplicated so that nvcc needs no core header; core checks they match). */
#define XC_COLL_ALLREDUCE 0
#define XC_COLL_ALLGATHER 1
#define XC_COLL_REDUCE_SCATTER 2
#define XC_COLL_BROADCAST 3
#define XC_COLL_REDUCE 4

/* One channel's share of one collective. */
typedef struct xc_work {
  int kind;              /* XC_COLL_* */
  xcoll_datatype dtype;
  xcoll_op op;
  const void *sendbuf;   /* NCCL's conventions: allreduce, broadcast, reduce:
                            count elements; allgather: count (sendcount);
                            reduce_scatter: nranks * count */
  void *recvbuf;         /* allreduce, broadcast, reduce: count; allgather:
                            nranks * count; reduce_scatter: count. In place
                            when sendbuf is recvbuf (allreduce, broadcast,
                            reduce) or its own block of it (allgather,
                            reduce_scatter). Reduce: recvbuf read only on
                            the root; broadcast: sendbuf only on the root. */
  size_t count;          /* elements, as above */
  int nranks;            /* ring length, >= 1 */
  int ring_index;        /* this rank's position in the ring, 0..nranks-1 */
  int root_index;        /* ring position of the root (broadcast, reduce) */
  const int *ring_ranks; /* optional: block index (communicator rank) of each
                            ring position, for allgather and reduce_scatter;
                            NULL = ring position p holds block p */
  int channel;           /* 0..nchannels-1 */
  int nchannels;
  int proto;             /* XC_PROTO_SIMPLE or XC_PROTO_LL */
  int chunk_steps;       /* slots per chunk, 1..XCOLL_STEPS (NCCL: 4) */
  int slice_steps;       /* slots per slice, 1..chunk_steps (NCCL: 2) */
  xc_trace_fn trace;     /* host only; NULL = off (see prims.h) */
  void *trace_ctx;
  xc_progress_fn progress; /* host only; NULL = off (see prims.h) */
  void *progress_ctx;
  xc_notify_fn notify; /* host only; NULL = off (see prims.h) */
  void *notify_ctx;
  /* Allreduce only: XC_ALGO_RING (default, 0) or XC_ALGO_GATHER, chosen by
   * the caller the same way on every rank (see xc_gather_allreduce). */
  int algo;
  void *scratch;         /* XC_ALGO_GATHER: nranks * (this channel's share)
                            elements of scratch, 16-byte aligned */
  size_t scratch_bytes;
  /* A 32-bit digest of the collective's identity (nccl_like: of its
   * fingerprint, core/fingerprint.h), the same on every rank that makes the
   * same call; mixed into every LL flag (prims.h: xc_ll_flag), so that a
   * line of another collective fails the receiver's flag check. 0 leaves
   * the flags at step + 1. */
  uint32_t check;
} xc_work;

/* Allreduce algorithms (xc_work.algo). */
#define XC_ALGO_RING 0
#define XC_ALGO_GATHER 1

/* This channel's contiguous share of total elements: [*offset, *offset +
 * *count), aligned to 16 bytes; possibly empty. */
XC_INLINE XC_HD void xc_channel_share(size_t total, size_t elem_bytes,
                                      int channel, int nchannels,
                                      size_t *offset, size_t *count) {
  size_t unit = 16 / elem_bytes;
  size_t units = (total + unit - 1) / unit;
  size_t per = (units + (size_t)nchannels - 1) / (size_t)nchannels * unit;
  size_t start = per * (size_t)channel;
  if (start > total)
    start = total;
  *offset = start;
  *count = total - start < per ? total - start : per;
}

XC_INLINE XC_HD int xc_ring_mod(int x, int k) { return ((x % k) + k) % k; }

XC_INLINE XC_HD size_t xc_ring_block(const xc_work *w, int position) {
  int p = xc_ring_mod(position, w->nranks);
  return (size_t)(w->ring_ranks ? w->ring_ranks[p] : p);
}

#define XC_TRY(expr)                                                           \
  do {                                                                         \
    xcoll_status xc_try_status_ = (expr);                                      \
    if (xc_try_status_ != XCOLL_SUCCESS)                                       \
      return xc_try_status_;                                                   \
  } while (0)

/* Allreduce over this channel's share [base, base + n) of the buffer. */
XC_INLINE XC_HD xcoll_status xc_ring_allreduce(const xc_work *w, xc_prims *p,
                                               size_t base, size_t n) {
  int k = w->nranks, r = w->ring_index;
  size_t unit = 16 / p->elem_bytes;
  size_t chunk = (size_t)w->chunk_steps * p->step_elems;
  size_t loop = (size_t)k * chunk;
  for (size_t grid = 0; grid < n; grid += loop) {
    size_t rest = n - grid;
    size_t per = (rest + (size_t)k - 1) / (size_t)k;
    per = (per + unit - 1) / unit * unit;
    size_t real_chunk = per < chunk ? per : chunk;
/* Offset and length of chunk c of this loop (length 0 past the end). */
#define XC_AR_CHUNK(c)                                                         \
  size_t at = (size_t)xc_ring_mod(c, k) * real_chunk;                          \
  size_t off = base + grid + at;                                               \
  size_t len = at >= rest ? 0 : (rest - at < real_chunk ? rest - at : real_chunk)
    {
      XC_AR_CHUNK(r - 1);
      XC_TRY(xc_send(p, off, len));
    }
    for (int j = 2; j < k; j++) {
      XC_AR_CHUNK(r - j);
      XC_TRY(xc_recv_reduce_send(p, off, len));
    }
    {
      XC_AR_CHUNK(r);
      XC_TRY(xc_recv_reduce_copy_send(p, off, off, len));
    }
    for (int j = 1; j < k - 1; j++) {
      XC_AR_CHUNK(r - j);
      XC_TRY(xc_recv_copy_send(p, off, len));
    }
    {
      XC_AR_CHUNK(r + 1);
      XC_TRY(xc_recv(p, off, len));
    }
#undef XC_AR_CHUNK
  }
  return XCOLL_SUCCESS;
}

/* Allreduce for small buffers (XC_ALGO_GATHER): a ring allgather of the
 * inputs into scratch, then every rank reduces the k inputs itself:
 *   per chunk: copySend(own input -> scratch[r]); for j=1..k-2
 *   recvCopySend(-> scratch[r-j]); recv(-> scratch[r+1]);
 *   output = ((scratch[0] op scratch[1]) op scratch[2]) ... op scratch[k-1].
 * k-1 dependent hops instead of the ring's 2(k-1), for (k-1) * S bytes on
 * the wire per rank instead of 2(k-1)/k * S: the better trade while a hop
 * costs more than moving S (a few KiB); at k = 2 it is one exchange, like
 * recursive doubling's first step (Thakur, Rabenseifner & Gropp 2005).
 * The reduction order is ring position order on every rank, so results
 * are bitwise identical on every rank and from run to run (they differ from
 * XC_ALGO_RING's order). scratch holds k blocks of n elements (block q =
 * ring position q's input); p->out is pointed at it for the allgather. */
XC_INLINE XC_HD xcoll_status xc_gather_allreduce(const xc_work *w,
                                                 xc_prims *p, size_t base,
                                                 size_t n) {
  int k = w->nranks, r = w->ring_index;
  size_t e = p->elem_bytes;
  size_t chunk = (size_t)w->chunk_steps * p->step_elems;
  uint8_t *out = p->out;
  p->out = (uint8_t *)w->scratch;
  /* Scratch block q of this channel's share starts at element q * n. In
   * chunks of at most chunk_steps slots, as xc_ring_allgather: a rank that
   * sent more than the FIFO holds before receiving would wait for credits
   * its neighbour, sending too, never gives. */
  xcoll_status status = XCOLL_SUCCESS;
  for (size_t off = 0; status == XCOLL_SUCCESS && off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    status = xc_copy_send(p, base + off, (size_t)r * n + off, len);
    for (int j = 1; status == XCOLL_SUCCESS && j < k - 1; j++)
      status = xc_recv_copy_send(p, (size_t)xc_ring_mod(r - j, k) * n + off,
                                 len);
    if (status == XCOLL_SUCCESS)
      status = xc_recv(p, (size_t)xc_ring_mod(r + 1, k) * n + off, len);
  }
  p->out = out;
  if (status != XCOLL_SUCCESS)
    return status;
  XC_BARRIER(); /* every thread's scratch writes before the reduction */
  size_t lo, hi;
  xc_thread_range(n, &lo, &hi);
  const uint8_t *blocks = (const uint8_t *)w->scratch;
  uint8_t *dst = out + (base + lo) * e;
  xc_reduce_into(dst, blocks + lo * e, blocks + (n + lo) * e, hi - lo,
                 p->dtype, p->op);
  for (int q = 2; q < k; q++)
    xc_reduce_into(dst, dst, blocks + ((size_t)q * n + lo) * e, hi - lo,
                   p->dtype, p->op);
  XC_BARRIER();
  return XCOLL_SUCCESS;
}

/* Reduce-scatter: this channel's share [base, base + n) of every block. */
XC_INLINE XC_HD xcoll_status xc_ring_reduce_scatter(const xc_work *w,
                                                    xc_prims *p, size_t base,
                                                    size_t n) {
  int k = w->nranks, r = w->ring_index;
  size_t chunk = (size_t)w->chunk_steps * p->step_elems;
  for (size_t off = 0; off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    size_t at = base + off;
    XC_TRY(xc_send(p, xc_ring_block(w, r - 1) * w->count + at, len));
    for (int j = 2; j < k; j++)
      XC_TRY(xc_recv_reduce_send(p, xc_ring_block(w, r - j) * w->count + at,
                                 len));
    XC_TRY(xc_recv_reduce_copy(p, xc_ring_block(w, r) * w->count + at, at,
                               len));
  }
  return XCOLL_SUCCESS;
}

/* Allgather: this channel's share [base, base + n) of every block. */
XC_INLINE XC_HD xcoll_status xc_ring_allgather(const xc_work *w, xc_prims *p,
                                               size_t base, size_t n) {
  int k = w->nranks, r = w->ring_index;
  size_t chunk = (size_t)w->chunk_steps * p->step_elems;
  size_t own = xc_ring_block(w, r) * w->count;
  int in_place = p->in == p->out + own * p->elem_bytes;
  for (size_t off = 0; off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    size_t at = base + off;
    if (in_place)
      XC_TRY(xc_send(p, at, len));
    else
      XC_TRY(xc_copy_send(p, at, own + at, len));
    for (int j = 1; j < k - 1; j++)
      XC_TRY(xc_recv_copy_send(p, xc_ring_block(w, r - j) * w->count + at,
                               len));
    XC_TRY(xc_recv(p, xc_ring_block(w, r + 1) * w->count + at, len));
  }
  return XCOLL_SUCCESS;
}

/* Broadcast from root_index: this channel's share [base, base + n). */
XC_INLINE XC_HD xcoll_status xc_ring_broadcast(const xc_work *w, xc_prims *p,
                                               size_t base, size_t n) {
  int k = w->nranks, r = w->ring_index;
  size_t chunk = (size_t)w->chunk_steps * p->step_elems;
  for (size_t off = 0; off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    size_t at = base + off;
    if (r == w->root_index) {
      if (p->in == p->out)
        XC_TRY(xc_send(p, at, len));
      else
        XC_TRY(xc_copy_send(p, at, at, len));
    } else if (xc_ring_mod(r + 1, k) == w->root_index) {
      XC_TRY(xc_recv(p, at, len));
    } else {
      XC_TRY(xc_recv_copy_send(p, at, len));
    }
  }
  return XCOLL_SUCCESS;
}

/* Reduce to root_index: this channel's share [base, base + n). */
XC_INLINE XC_HD xcoll_status xc_ring_reduce(const xc_work *w, xc_prims *p,
                                            size_t base, size_t n) {
  int k = w->nranks, r = w->ring_index;
  size_t chunk = (size_t)w->chunk_steps * p->step_elems;
  for (size_t off = 0; off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    size_t at = base + off;
    if (r == xc_ring_mod(w->root_index + 1, k))
      XC_TRY(xc_send(p, at, len));
    else if (r == w->root_index)
      XC_TRY(xc_recv_reduce_copy(p, at, at, len));
    else
      XC_TRY(xc_recv_reduce_send(p, at, len));
  }
  return XCOLL_SUCCESS;
}

/* Steps (slots) of one primitive call over len elements. */
XC_INLINE XC_HD uint64_t xc_ring_call_steps(size_t len, size_t step_elems) {
  return (len + step_elems - 1) / step_elems;
}

/* The steps xc_ring_run of w (channel w->channel) moves on this rank's
 * connections of step_bytes slots: *sends filled towards the next ring
 * position, *recvs consumed from the previous one; both 0 on a one-rank
 * ring or an empty share. The same schedules as the kernels above, counted
 * (tests/unit/test_prims.c checks the two agree): the flight recorder's
 * "steps done of the op's total" per channel (backends/nccl_like). */
XC_INLINE XC_HD void xc_ring_steps(const xc_work *w, size_t step_bytes,
                                   uint64_t *sends, uint64_t *recvs) {
  *sends = *recvs = 0;
  size_t e = xc_dtype_size(w->dtype);
  size_t step_elems = e ? xc_step_payload_bytes(step_bytes, w->proto) / e : 0;
  int k = w->nranks, r = w->ring_index;
  if (k < 2 || step_elems == 0 || w->chunk_steps < 1)
    return;
  size_t base, n;
  xc_channel_share(w->count, e, w->channel, w->nchannels, &base, &n);
  size_t chunk = (size_t)w->chunk_steps * step_elems;
  if (w->kind == XC_COLL_ALLREDUCE && w->algo == XC_ALGO_RING) {
    /* Per loop: sends every chunk, then all but r and r+1; receives all
     * but r and r-1, then r, all but r and r+1, and r+1. */
    size_t unit = 16 / e, loop = (size_t)k * chunk;
    for (size_t grid = 0; grid < n; grid += loop) {
      size_t rest = n - grid;
      size_t per = ((rest + (size_t)k - 1) / (size_t)k + unit - 1) / unit * unit;
      size_t real_chunk = per < chunk ? per : chunk;
      uint64_t all = 0, at_r = 0, at_next = 0, at_prev = 0;
      for (int c = 0; c < k; c++) {
        size_t at = (size_t)c * real_chunk;
        size_t len = at >= rest ? 0 : (rest - at < real_chunk ? rest - at
                                                                : real_chunk);
        uint64_t steps = xc_ring_call_steps(len, step_elems);
        all += steps;
        if (c == r)
          at_r = steps;
        if (c == xc_ring_mod(r + 1, k))
          at_next = steps;
        if (c == xc_ring_mod(r - 1, k))
          at_prev = steps;
      }
      *sends += 2 * all - at_r - at_next;
      *recvs += 2 * all - at_r - at_prev;
    }
    return;
  }
  /* The others walk chunks of the share; per chunk each primitive call
   * moves the same len. */
  uint64_t per_send = 0, per_recv = 0;
  switch (w->kind) {
  case XC_COLL_ALLREDUCE: /* XC_ALGO_GATHER: a ring allgather of inputs */
  case XC_COLL_ALLGATHER:
  case XC_COLL_REDUCE_SCATTER:
    per_send = per_recv = (uint64_t)(k - 1);
    break;
  case XC_COLL_BROADCAST:
    per_send = xc_ring_mod(r + 1, k) != w->root_index;
    per_recv = r != w->root_index;
    break;
  case XC_COLL_REDUCE:
    per_send = r != w->root_index;
    per_recv = r != xc_ring_mod(w->root_index + 1, k);
    break;
  default:
    return;
  }
  for (size_t off = 0; off < n; off += chunk) {
    uint64_t steps = xc_ring_call_steps(n - off < chunk ? n - off : chunk,
                                        step_elems);
    *sends += per_send * steps;
    *recvs += per_recv * steps;
  }
}

/* A one-rank ring: output = input, no FIFO. */
XC_INLINE XC_HD void xc_ring_single(const xc_work *w, xc_prims *p,
                                    size_t base, size_t n) {
  (void)w;
  xc_copy_local(p, base, base, n);
  XC_BARRIER();
}

/* Runs channel w->channel of the collective w on this rank: send is the
 * connection to the next ring position, recv the one from the previous (both
 * may be NULL when nranks == 1); abort is polled while waiting (may be NULL).
 * On the device, every thread of the block calls it with the same arguments.
 * Returns XCOLL_SUCCESS; XCOLL_ERR_ABORTED when *abort became nonzero while
 * this channel waited (the FIFO state is then undefined: the connection must
 * be torn down); XCOLL_ERR_PROTOCOL when a received step did not match this
 * rank's schedule (sizes[] or LL flags: ranks disagree on the collective, or
 * the proxy delivered wrong bytes); XCOLL_ERR_INVALID_ARGUMENT for a work or
 * connection outside the limits written in this header and conn.h (no
 * message can be set here: the caller validates first and says what). */
XC_INLINE XC_HD xcoll_status xc_ring_run(const xc_work *w, xc_conn *send,
                                         xc_conn *recv,
                                         const xc_abort *abort) {
  xc_prims prims;
  xc_prims *p = &prims;
  if (w->nranks < 1 || w->ring_index < 0 || w->ring_index >= w->nranks ||
      w->nchannels < 1 || w->channel < 0 || w->channel >= w->nchannels ||
      w->chunk_steps < 1 || w->chunk_steps > XCOLL_STEPS ||
      w->slice_steps < 1 || w->slice_steps > w->chunk_steps ||
      ((w->kind == XC_COLL_BROADCAST || w->kind == XC_COLL_REDUCE) &&
       (w->root_index < 0 || w->root_index >= w->nranks)) ||
      (w->nranks > 1 && (send == NULL || recv == NULL)) ||
      (w->algo != XC_ALGO_RING &&
       (w->algo != XC_ALGO_GATHER || w->kind != XC_COLL_ALLREDUCE ||
        w->scratch == NULL || (uintptr_t)w->scratch % 16 != 0)))
    return XCOLL_ERR_INVALID_ARGUMENT;
  int single = w->nranks == 1;
  XC_TRY(xc_prims_init(p, single ? NULL : send, single ? NULL : recv,
                       w->sendbuf, w->recvbuf, w->dtype, w->op, w->proto,
                       w->slice_steps, abort));
  p->trace = w->trace;
  p->trace_ctx = w->trace_ctx;
  p->progress = w->progress;
  p->progress_ctx = w->progress_ctx;
  p->notify = w->notify;
  p->notify_ctx = w->notify_ctx;
  p->channel = w->channel;
  p->check = w->check;
  size_t base, n;
  xc_channel_share(w->count, p->elem_bytes, w->channel, w->nchannels, &base,
                   &n);
  if (n == 0) /* every rank computes the same empty share: nothing to do */
    return XCOLL_SUCCESS;
  if (w->algo == XC_ALGO_GATHER &&
      (size_t)w->nranks * n * p->elem_bytes > w->scratch_bytes)
    return XCOLL_ERR_INVALID_ARGUMENT;
  xcoll_status status = XCOLL_SUCCESS;
  int divide = 0; /* AVG: divide this rank's output share at the end */
  switch (w->kind) {
  case XC_COLL_ALLREDUCE:
    if (single)
      xc_ring_single(w, p, base, n);
    else if (w->algo == XC_ALGO_GATHER)
      status = xc_gather_allreduce(w, p, base, n);
    else
      status = xc_ring_allreduce(w, p, base, n);
    divide = 1;
    break;
  case XC_COLL_REDUCE_SCATTER:
    if (single)
      xc_copy_local(p, xc_ring_block(w, 0) * w->count + base, base, n);
    else
      status = xc_ring_reduce_scatter(w, p, base, n);
    divide = 1;
    break;
  case XC_COLL_ALLGATHER:
    if (single)
      xc_copy_local(p, base, xc_ring_block(w, 0) * w->count + base, n);
    else
      status = xc_ring_allgather(w, p, base, n);
    break;
  case XC_COLL_BROADCAST:
    if (single)
      xc_ring_single(w, p, base, n);
    else
      status = xc_ring_broadcast(w, p, base, n);
    break;
  case XC_COLL_REDUCE:
    if (single)
      xc_ring_single(w, p, base, n);
    else
      status = xc_ring_reduce(w, p, base, n);
    divide = w->ring_index == w->root_index;
    break;
  default:
    return XCOLL_ERR_INVALID_ARGUMENT;
  }
  if (status == XCOLL_SUCCESS)
    status = xc_prims_wait_direct(p);
  xc_prims_finish(p);
  if (status == XCOLL_SUCCESS && divide && w->op == XCOLL_AVG) {
    /* xc_prims_finish's barrier: every thread's output is written. */
    xc_scale_avg_block(p->out + base * p->elem_bytes, n, w->dtype,
                       w->nranks);
    XC_BARRIER();
  }
  return status;
}

#endif
