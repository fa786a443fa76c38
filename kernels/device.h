/* device.h - the few things that differ between a host rank and a CUDA rank,
 * behind macros, so that kernels/prims.h and kernels/ring.h are one source
 * that gcc compiles as C11 (the host engine: one worker thread per channel)
 * and nvcc compiles as CUDA C++ (one thread block per channel).
 *
 * - XC_HD marks a function callable from both sides; XC_INLINE makes it a
 *   header-local inline.
 * - 64-bit FIFO counters (head, tail) are read with acquire and written with
 *   release. Host, C: C11 <stdatomic.h>. Host, C++ (nvcc's host pass, which
 *   has no <stdatomic.h> in C mode): the GCC/Clang __atomic builtins, which
 *   have the same memory model. Device: volatile loads and stores with
 *   __threadfence_system(), the fence NCCL uses (fence_acq_rel_sys) because
 *   the other party is a host proxy thread reading pinned host memory.
 * - Spinning: XC_SPINS_BEFORE_YIELD busy polls, then sched_yield() on every
 *   poll on the host so that more ranks than cores still progress; the abort
 *   flag is read every XC_SPINS_BEFORE_CHECK_ABORT polls (NCCL checks every
 *   10000; a host poll that yields is slower, so fewer suffice).
 * - Threads: the host runs one thread per channel (index 0 of 1); a CUDA
 *   block shares each slice among its threads, which meet at barriers. */
#ifndef XCOLL_KERNELS_DEVICE_H
#define XCOLL_KERNELS_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define XC_HD __host__ __device__
#define XC_INLINE static inline
#else
#define XC_HD
#define XC_INLINE static inline
#include <stdatomic.h>
#endif

#ifndef __CUDA_ARCH__
#include <sched.h>
#include <time.h>
#endif

#define XC_SPINS_BEFORE_YIELD 64
#define XC_SPINS_BEFORE_CHECK_ABORT 1000

/* A 64-bit counter shared between a kernel and a proxy thread (head, tail),
 * and the abort flag. Both are plain 8- and 4-byte words in memory on every
 * side, so a C host proxy and a CUDA kernel can share them. */
#ifdef __CUDACC__
typedef uint64_t xc_atomic_u64;
typedef int xc_abort;
#else
typedef _Atomic uint64_t xc_atomic_u64;
typedef _Atomic int xc_abort;
#endif

XC_INLINE XC_HD uint64_t xc_load_acquire(const xc_atomic_u64 *p) {
#if defined(__CUDA_ARCH__)
  uint64_t v = *(const volatile uint64_t *)p;
  __threadfence_system();
  return v;
#elif defined(__CUDACC__)
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
  return atomic_load_explicit(p, memory_order_acquire);
#endif
}

/* The same counter read with no ordering: a poll. On the device a strong
 * (volatile) load, which is not hoisted out of a loop; xc_wait_counter
 * fences once the value is reached, which makes the last poll an acquire
 * (PTX ISA, memory consistency model: a strong read followed by a fence is
 * an acquire pattern). */
XC_INLINE XC_HD uint64_t xc_load_relaxed(const xc_atomic_u64 *p) {
#if defined(__CUDA_ARCH__)
  return *(const volatile uint64_t *)p;
#elif defined(__CUDACC__)
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#else
  return atomic_load_explicit(p, memory_order_relaxed);
#endif
}

XC_INLINE XC_HD void xc_store_release(xc_atomic_u64 *p, uint64_t v) {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
  *(volatile uint64_t *)p = v;
#elif defined(__CUDACC__)
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#else
  atomic_store_explicit(p, v, memory_order_release);
#endif
}

/* One 8-byte half of an LL line, stored and loaded as a single 64-bit access
 * (p is 8-byte aligned). Relaxed: the ordering against the proxy comes from
 * the tail release/acquire (see prims.h). */
XC_INLINE XC_HD void xc_store_u64_relaxed(uint8_t *p, uint64_t v) {
#if defined(__CUDA_ARCH__)
  *(volatile uint64_t *)p = v;
#elif defined(__CUDACC__)
  __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELAXED);
#else
  atomic_store_explicit((_Atomic uint64_t *)(void *)p, v, memory_order_relaxed);
#endif
}

XC_INLINE XC_HD uint64_t xc_load_u64_relaxed(const uint8_t *p) {
#if defined(__CUDA_ARCH__)
  return *(const volatile uint64_t *)p;
#elif defined(__CUDACC__)
  return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
#else
  return atomic_load_explicit((_Atomic uint64_t *)(void *)p,
                              memory_order_relaxed);
#endif
}

/* The last half-line of an LL pack, and the ll_poll receiver's poll of it
 * (prims.h): release and acquire on the host, so that the lines stored
 * before it are visible to a reader that sees its flag. The device's lines
 * are read only after tail (ll_poll is host-only): there they are the
 * relaxed forms above. */
XC_INLINE XC_HD void xc_store_u64_release(uint8_t *p, uint64_t v) {
#if defined(__CUDA_ARCH__)
  *(volatile uint64_t *)p = v;
#elif defined(__CUDACC__)
  __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
#else
  atomic_store_explicit((_Atomic uint64_t *)(void *)p, v, memory_order_release);
#endif
}

XC_INLINE XC_HD uint64_t xc_load_u64_acquire(const uint8_t *p) {
#if defined(__CUDA_ARCH__)
  return *(const volatile uint64_t *)p;
#elif defined(__CUDACC__)
  return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
#else
  return atomic_load_explicit((_Atomic uint64_t *)(void *)p,
                              memory_order_acquire);
#endif
}

XC_INLINE XC_HD int xc_abort_raised(const xc_abort *abort) {
  if (abort == NULL)
    return 0;
#if defined(__CUDA_ARCH__)
  return *(const volatile int *)abort != 0;
#elif defined(__CUDACC__)
  return __atomic_load_n(abort, __ATOMIC_ACQUIRE) != 0;
#else
  return atomic_load_explicit(abort, memory_order_acquire) != 0;
#endif
}

/* A full fence (both directions, system scope on the device). */
XC_INLINE XC_HD void xc_fence(void) {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
#elif defined(__CUDACC__)
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#else
  atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* Called once per unsuccessful poll with the number of polls so far (from
 * 1). Returns nonzero when the caller must stop because abort is raised. */
XC_INLINE XC_HD int xc_spin_pause(uint64_t spins, const xc_abort *abort) {
#ifndef __CUDA_ARCH__
  if (spins > XC_SPINS_BEFORE_YIELD)
    sched_yield();
#endif
  if (spins % XC_SPINS_BEFORE_CHECK_ABORT == 0)
    return xc_abort_raised(abort);
  return 0;
}

/* Threads per block of a GPU rank's ring kernel: the launch
 * (backends/nccl_like/gpu_engine.c) and the kernel's __launch_bounds__
 * (kernels/cuda/ring_kernel.cu), which lets the compiler budget registers
 * for exactly this many. NCCL runs 512 for SIMPLE. */
#define XC_GPU_THREADS 256

/* Thread of the block (device) or of the channel (host: always 0 of 1). */
#ifdef __CUDA_ARCH__
#define XC_TID() ((int)threadIdx.x)
#define XC_NTHREADS() ((int)blockDim.x)
#define XC_BARRIER() __syncthreads()
/* Barrier that returns nonzero on every thread if x was nonzero on any. */
#define XC_BARRIER_OR(x) __syncthreads_or(x)
#else
#define XC_TID() 0
#define XC_NTHREADS() 1
#define XC_BARRIER() ((void)0)
#define XC_BARRIER_OR(x) (x)
#endif

/* Monotonic nanoseconds for the host trace hook (the clock core/trace.c
 * uses); 0 on the device, where the hook is compiled out. */
XC_INLINE XC_HD uint64_t xc_now_ns(void) {
#if defined(__CUDA_ARCH__)
  return 0;
#elif defined(CLOCK_MONOTONIC)
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#else
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

#endif
