/* conn.h - one connection FIFO between a ring kernel and a proxy thread: the
 * meeting point of kernels/ (the producer or consumer of slots) and
 * backends/nccl_like/ (the proxy that moves full slots over a net plugin).
 * This header and kernels/ring.h are the contract between the two; see
 * kernels/README.contract.md and docs/kernels.md.
 *
 * Layout (NCCL's ncclConnInfo / ncclSendMem / ncclRecvMem, src/include/
 * device.h and comm.h): XCOLL_STEPS slots of step_bytes each; slot s holds
 * step number k with k % XCOLL_STEPS == s. Two 64-bit counters, each written
 * by one side only, with release, and read by the other with acquire:
 *   tail: steps filled so far (written by the producer);
 *   head: steps consumed and freed so far (written by the consumer).
 * The producer may fill step k once head + XCOLL_STEPS > k (a credit); the
 * consumer may read step k once tail > k. sizes[k % XCOLL_STEPS] holds the
 * bytes of step k that travel on the wire, written before tail is released.
 *
 * Send side (one per channel, towards the next rank in the ring):
 *   kernel = producer: waits for credit, fills the slot, writes sizes[],
 *   releases tail. Proxy = consumer: once tail > k, sends sizes[k % 8] bytes
 *   of the slot; when the send has completed, sets sizes[] to -1 and
 *   releases head = k + 1 (the credit goes back to the kernel).
 * Recv side (one per channel, from the previous rank in the ring):
 *   proxy = producer: receives into slot k % 8 while k < head + XCOLL_STEPS;
 *   when the receive of step k has COMPLETED (every byte landed), writes
 *   sizes[] = bytes received and releases tail = k + 1. Kernel = consumer:
 *   once tail > k reads the slot, checks sizes[], releases head = k + 1.
 *   The proxy must publish tail in step order (k, then k + 1, ...).
 * Direct sends (optional, host engine only): when direct_from is set, the
 *   proxy sends step k from direct_from[k % XCOLL_STEPS] when that is not
 *   NULL, instead of from the slot; the kernel then owns the user bytes
 *   until head passes k (it waits for that before it returns).
 * Direct receives (optional, host engine only): when direct_req is set, the
 *   proxy receives step k only once the kernel has asked for it
 *   (*direct_req > k, released after direct_to[] and direct_to_bytes[]),
 *   into direct_to[k % XCOLL_STEPS] with room for exactly
 *   direct_to_bytes[k % XCOLL_STEPS] bytes when that is not NULL (user
 *   memory: the step's final output), else into the slot. Receives are then
 *   never posted ahead of the kernel.
 *
 * A slice of one primitive call may fill up to slice_steps consecutive steps
 * (each a full slot except the last); the counters then move by that many
 * at once. Each step is still a separate message of sizes[] bytes, so a proxy
 * needs no notion of slices.
 *
 * Protocols (the same FIFO memory, the kernel's choice per collective, the
 * same on both ends of a connection):
 *   SIMPLE: a slot holds raw elements; sizes[] = element bytes.
 *   LL: a slot holds 16-byte lines {u32 data1, u32 flag1, u32 data2,
 *   u32 flag2}, flag = prims.h's xc_ll_flag (the low 16 bits of step + 1,
 *   the high 16 of a hash of the collective's check, xc_work.check), 8
 *   payload bytes per line (the last line of a step zero-padded); sizes[] =
 *   16 * lines. The receiving kernel checks every flag; see prims.h for
 *   when it waits for tail first (every connection but ll_poll ones).
 *   Wide LL lines (xc_conn.ll_wide, between two host kernels only): 64-byte
 *   lines, one cache line each, of 56 payload bytes and then a u64 flag
 *   word ((u64)flag << 32 | flag), the last line of a step holding the rest
 *   of its payload (its unused bytes are left as they were); sizes[] = 64 *
 *   lines. The step carries the same elements as with 16-byte lines (the
 *   schedule does not depend on the format) in 0.57 of the bytes.
 *
 * Requirements checked by xc_ring_run (XCOLL_ERR_INVALID_ARGUMENT otherwise):
 * buff 16-byte aligned, step_bytes a nonzero multiple of 16 (at least 64 for
 * wide LL lines), and the send and
 * recv connections of one channel with equal step_bytes. Every rank of a ring
 * must use the same step_bytes (the proxy guarantees it at connect time). */
#ifndef XCOLL_KERNELS_CONN_H
#define XCOLL_KERNELS_CONN_H

#include "device.h"

/* Slots per connection FIFO (NCCL_STEPS). */
#define XCOLL_STEPS 8

/* Protocols, for xc_work.proto. */
#define XC_PROTO_SIMPLE 0
#define XC_PROTO_LL 1

/* LL line: 16 bytes, of which 8 are payload. */
#define XC_LL_LINE_BYTES 16
#define XC_LL_PAYLOAD_BYTES 8

/* Wide LL line (xc_conn.ll_wide): 64 bytes, of which 56 are payload and 8
 * the flag word. */
#define XC_LLW_LINE_BYTES 64
#define XC_LLW_PAYLOAD_BYTES 56

/* One direction of one connection on one channel, as the kernel sees it. The
 * memory behind the pointers is allocated and owned by nccl_like (host memory
 * on a host rank; pinned, mapped host memory for a CUDA rank later). */
typedef struct xc_conn {
  uint8_t *buff;        /* XCOLL_STEPS * step_bytes bytes, 16-byte aligned */
  size_t step_bytes;    /* bytes per slot (XCOLL_BUFFSIZE / XCOLL_STEPS) */
  xc_atomic_u64 *head;  /* consumer's count of steps freed (credits) */
  xc_atomic_u64 *tail;  /* producer's count of steps filled */
  int64_t *sizes;       /* XCOLL_STEPS entries: wire bytes of the step in the
                           slot, written before tail; -1 = empty */
  uint64_t step;        /* the kernel's running step counter on this conn:
                           kernel-private, starts at 0, never reset while the
                           connection lives (the proxy keeps its own count) */
  uint64_t head_seen;   /* send side, host kernels: the largest head this
                           kernel has acquired (kernel-private, starts at
                           0); credits below it need no new load of head */
  /* Recv side, host kernels, LL only: 1 when the sending kernel writes
   * each line straight into this connection's slots with 64-bit stores
   * (two host ranks over shm), so that a step may be read once every
   * flag of it is there, without waiting for tail (NCCL's LL; see
   * prims.h). 0: tail first, as everywhere else. */
  int ll_poll;
  /* Host kernels, LL only, set on both ends of a connection or on neither:
   * 1 when both ends are host kernels and the sender writes straight into
   * the receiver's slots (two host ranks over shm). LL steps then travel in
   * wide lines (above): a 64-bit store is not what makes a line safe to
   * read there, the release of the step's last flag word is (prims.h), so
   * the flag need not sit beside every 4 payload bytes. 0: 16-byte lines,
   * which a GPU kernel or a proxy can carry. */
  int ll_wide;
  /* Host kernels, optional (NULL = off), set on both ends of a connection
   * or on neither, where ll_wide is: XCOLL_STEPS entries in the receiver's
   * FIFO memory. The sending kernel writes its collective's check
   * (xc_work.check) into entry k % XCOLL_STEPS before it releases tail
   * past step k; the receiving kernel, having acquired tail, compares it
   * with its own, as an LL flag carries it, and fails with
   * XCOLL_ERR_PROTOCOL on a mismatch. A SIMPLE step then says which
   * collective it belongs to as an LL line does. */
  uint32_t *checks;
  /* Send side, optional (NULL = off: every step travels from its slot, as
   * on a CUDA rank). XCOLL_STEPS entries: where the proxy sends step k
   * from, written by the kernel before tail like sizes[]: NULL = the slot,
   * else user memory (SIMPLE only, "direct": the kernel skips the copy
   * into the slot; see prims.h). Only for a proxy whose net plugin can send
   * from any host address. The wire bytes are the same either way. */
  const uint8_t **direct_from;
  /* Recv side, optional (NULL = off, as on a CUDA rank): direct receives.
   * direct_req: steps the kernel has asked for (release, by the kernel);
   * direct_to / direct_to_bytes: XCOLL_STEPS entries, where step k lands
   * (NULL = the slot) and how many bytes fit there, written before
   * direct_req moves past k. SIMPLE steps whose bytes go unchanged to the
   * user's output only (recv, recvCopySend: see prims.h). */
  xc_atomic_u64 *direct_req;
  uint8_t **direct_to;
  size_t *direct_to_bytes;
} xc_conn;

#endif
