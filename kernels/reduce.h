/* reduce.h - element-wise reduction functors for every xcoll datatype and
 * operator, over the float16 / bfloat16 conversions of fp16.h. One source for
 * core/dtype.c (host-driven algorithms), the host engine and CUDA kernels, so
 * that a value reduced by any of them is bit-identical.
 *
 * Semantics, the same on every path:
 * - Integer sum and prod wrap modulo 2^n (two's complement for the signed
 *   types); they are computed in the unsigned type of the same width, so no
 *   signed overflow (undefined behaviour in C) ever happens.
 * - Floating-point min and max propagate NaN: if either operand is NaN the
 *   result is NaN, so a NaN on any rank reaches every rank. Between -0 and +0
 *   (which compare equal) min and max return their second operand; algorithms
 *   that need bitwise-identical results on every rank fix the operand order.
 * - float16 and bfloat16 are widened to float32, reduced, and rounded back to
 *   nearest even (IEEE 754-2008 roundTiesToEven); NaN stays NaN (made quiet).
 *   On the host, a block of XC_FP_BLOCK elements at a time goes through stack
 *   buffers so that the float32 loop vectorises; on the device, per element.
 * - XCOLL_AVG reduces as XCOLL_SUM; xc_scale_avg divides once at the end.
 * - XCOLL_BAND, XCOLL_BOR, XCOLL_BXOR exist for the integer types only
 *   (callers reject them on floating-point types).
 * - A pre-multiplied sum is xc_scale_premul on each rank's input, then
 *   XCOLL_SUM.
 *
 * The loops take no restrict qualifiers on purpose: dst may be exactly a or b,
 * and gcc and clang still vectorise them by checking at run time that the
 * arrays do not partially overlap. */
#ifndef XCOLL_KERNELS_REDUCE_H
#define XCOLL_KERNELS_REDUCE_H

#include "device.h"
#include "fp16.h"
#include "xcoll.h"

/* Elements of float16/bfloat16 widened at once on the host (3 KiB of stack). */
#define XC_FP_BLOCK 256

/* Bytes per element of dtype; 0 for a value that is not an xcoll_datatype. */
XC_INLINE XC_HD size_t xc_dtype_size(xcoll_datatype dtype) {
  switch (dtype) {
  case XCOLL_INT8:
  case XCOLL_UINT8:
    return 1;
  case XCOLL_FLOAT16:
  case XCOLL_BFLOAT16:
    return 2;
  case XCOLL_INT32:
  case XCOLL_UINT32:
  case XCOLL_FLOAT32:
    return 4;
  case XCOLL_INT64:
  case XCOLL_UINT64:
  case XCOLL_FLOAT64:
    return 8;
  default:
    return 0;
  }
}

XC_INLINE XC_HD int xc_dtype_is_float(xcoll_datatype dtype) {
  return dtype == XCOLL_FLOAT16 || dtype == XCOLL_BFLOAT16 ||
         dtype == XCOLL_FLOAT32 || dtype == XCOLL_FLOAT64;
}

/* ---- element-wise loops: dst[i] = a[i] op b[i], i in [0, n) ---- */

/* NaN-propagating min/max (see the file comment). */
#define XC_FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define XC_FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define XC_IMIN(a, b) ((a) < (b) ? (a) : (b))
#define XC_IMAX(a, b) ((a) > (b) ? (a) : (b))

/* Integer loops: sum and prod in the unsigned type U of the same width.
 * uint8 * uint8 promotes to int, whose product (< 2^16) cannot overflow;
 * the 32- and 64-bit unsigned products wrap as C defines. */
#define XC_DEFINE_INT_LOOPS(NAME, T, U)                                        \
  XC_INLINE XC_HD void xc_##NAME##_sum(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)((U)a[i] + (U)b[i]);                                         \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_prod(T *dst, const T *a, const T *b,        \
                                        size_t n) {                            \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)((U)((U)a[i] * (U)b[i]));                                    \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_min(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = XC_IMIN(a[i], b[i]);                                            \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_max(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = XC_IMAX(a[i], b[i]);                                            \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_band(T *dst, const T *a, const T *b,        \
                                        size_t n) {                            \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)(a[i] & b[i]);                                               \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_bor(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)(a[i] | b[i]);                                               \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_bxor(T *dst, const T *a, const T *b,        \
                                        size_t n) {                            \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)(a[i] ^ b[i]);                                               \
  }                                                                            \
  /* dst[i] = src[i] * scalar, wrapping (a pre-multiplied sum's first step) */ \
  XC_INLINE XC_HD void xc_##NAME##_scale(T *dst, const T *src, T scalar,       \
                                         size_t n) {                           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = (T)((U)((U)src[i] * (U)scalar));                                \
  }

#define XC_DEFINE_FLOAT_LOOPS(NAME, T)                                         \
  XC_INLINE XC_HD void xc_##NAME##_sum(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = a[i] + b[i];                                                    \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_prod(T *dst, const T *a, const T *b,        \
                                        size_t n) {                            \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = a[i] * b[i];                                                    \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_min(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = XC_FMIN(a[i], b[i]);                                            \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_max(T *dst, const T *a, const T *b,         \
                                       size_t n) {                             \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = XC_FMAX(a[i], b[i]);                                            \
  }                                                                            \
  XC_INLINE XC_HD void xc_##NAME##_scale(T *dst, const T *src, T scalar,       \
                                         size_t n) {                           \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = src[i] * scalar;                                                \
  }

XC_DEFINE_INT_LOOPS(i8, int8_t, uint8_t)
XC_DEFINE_INT_LOOPS(u8, uint8_t, uint8_t)
XC_DEFINE_INT_LOOPS(i32, int32_t, uint32_t)
XC_DEFINE_INT_LOOPS(u32, uint32_t, uint32_t)
XC_DEFINE_INT_LOOPS(i64, int64_t, uint64_t)
XC_DEFINE_INT_LOOPS(u64, uint64_t, uint64_t)
XC_DEFINE_FLOAT_LOOPS(f32, float)
XC_DEFINE_FLOAT_LOOPS(f64, double)

XC_INLINE XC_HD void xc_f32_loop(float *dst, const float *a, const float *b,
                                 size_t n, xcoll_op op) {
  switch (op) {
  case XCOLL_PROD:
    xc_f32_prod(dst, a, b, n);
    return;
  case XCOLL_MIN:
    xc_f32_min(dst, a, b, n);
    return;
  case XCOLL_MAX:
    xc_f32_max(dst, a, b, n);
    return;
  default: /* SUM and AVG */
    xc_f32_sum(dst, a, b, n);
    return;
  }
}

/* float16 (is_bf16 == 0) or bfloat16 (1): widen, reduce in float32, round.
 * The two formats are separate loops so that each conversion is inlined. */
XC_INLINE XC_HD void xc_reduce_16bit(uint16_t *dst, const uint16_t *a,
                                     const uint16_t *b, size_t n, xcoll_op op,
                                     int is_bf16) {
#ifdef __CUDA_ARCH__
  for (size_t i = 0; i < n; i++) {
    float x = is_bf16 ? xc_bfloat16_to_float(a[i]) : xc_half_to_float(a[i]);
    float y = is_bf16 ? xc_bfloat16_to_float(b[i]) : xc_half_to_float(b[i]);
    float r;
    xc_f32_loop(&r, &x, &y, 1, op);
    dst[i] = is_bf16 ? xc_float_to_bfloat16(r) : xc_float_to_half(r);
  }
#else
  float wide_a[XC_FP_BLOCK], wide_b[XC_FP_BLOCK], wide_out[XC_FP_BLOCK];
  for (size_t start = 0; start < n; start += XC_FP_BLOCK) {
    size_t len = n - start < XC_FP_BLOCK ? n - start : XC_FP_BLOCK;
    if (is_bf16) {
      for (size_t i = 0; i < len; i++) {
        wide_a[i] = xc_bfloat16_to_float(a[start + i]);
        wide_b[i] = xc_bfloat16_to_float(b[start + i]);
      }
    } else {
      for (size_t i = 0; i < len; i++) {
        wide_a[i] = xc_half_to_float(a[start + i]);
        wide_b[i] = xc_half_to_float(b[start + i]);
      }
    }
    xc_f32_loop(wide_out, wide_a, wide_b, len, op);
    if (is_bf16) {
      for (size_t i = 0; i < len; i++)
        dst[start + i] = xc_float_to_bfloat16(wide_out[i]);
    } else {
      for (size_t i = 0; i < len; i++)
        dst[start + i] = xc_float_to_half(wide_out[i]);
    }
  }
#endif
}

#define XC_DISPATCH_OP(NAME, T)                                                \
  switch (op) {                                                                \
  case XCOLL_PROD:                                                             \
    xc_##NAME##_prod((T *)dst, (const T *)a, (const T *)b, n);                 \
    return;                                                                    \
  case XCOLL_MIN:                                                              \
    xc_##NAME##_min((T *)dst, (const T *)a, (const T *)b, n);                  \
    return;                                                                    \
  case XCOLL_MAX:                                                              \
    xc_##NAME##_max((T *)dst, (const T *)a, (const T *)b, n);                  \
    return;                                                                    \
  default: /* SUM and AVG */                                                   \
    xc_##NAME##_sum((T *)dst, (const T *)a, (const T *)b, n);                  \
    return;                                                                    \
  }

/* The same plus the bitwise operators, for the integer types. */
#define XC_DISPATCH_INT_OP(NAME, T)                                            \
  switch (op) {                                                                \
  case XCOLL_BAND:                                                             \
    xc_##NAME##_band((T *)dst, (const T *)a, (const T *)b, n);                 \
    return;                                                                    \
  case XCOLL_BOR:                                                              \
    xc_##NAME##_bor((T *)dst, (const T *)a, (const T *)b, n);                  \
    return;                                                                    \
  case XCOLL_BXOR:                                                             \
    xc_##NAME##_bxor((T *)dst, (const T *)a, (const T *)b, n);                 \
    return;                                                                    \
  default:                                                                     \
    XC_DISPATCH_OP(NAME, T)                                                    \
  }

/* dst[i] = a[i] op b[i] for i in [0, n) elements of dtype. dst may be exactly
 * a or b, not a partial overlap. XCOLL_AVG reduces as XCOLL_SUM; a bitwise
 * op on a floating-point dtype reduces as XCOLL_SUM too (callers reject
 * it). An unknown dtype does nothing (callers validate with
 * xcoll_check_dtype_op). */
XC_INLINE XC_HD void xc_reduce_into(void *dst, const void *a, const void *b,
                                    size_t n, xcoll_datatype dtype,
                                    xcoll_op op) {
  if (n == 0)
    return;
  switch (dtype) {
  case XCOLL_INT8:
    XC_DISPATCH_INT_OP(i8, int8_t)
  case XCOLL_UINT8:
    XC_DISPATCH_INT_OP(u8, uint8_t)
  case XCOLL_INT32:
    XC_DISPATCH_INT_OP(i32, int32_t)
  case XCOLL_UINT32:
    XC_DISPATCH_INT_OP(u32, uint32_t)
  case XCOLL_INT64:
    XC_DISPATCH_INT_OP(i64, int64_t)
  case XCOLL_UINT64:
    XC_DISPATCH_INT_OP(u64, uint64_t)
  case XCOLL_FLOAT32:
    XC_DISPATCH_OP(f32, float)
  case XCOLL_FLOAT64:
    XC_DISPATCH_OP(f64, double)
  case XCOLL_FLOAT16:
    xc_reduce_16bit((uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b,
                    n, op, 0);
    return;
  case XCOLL_BFLOAT16:
    xc_reduce_16bit((uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b,
                    n, op, 1);
    return;
  default:
    return;
  }
}

/* dst[i] = src[i] * *scalar for i in [0, n) elements of dtype: the
 * multiplication of a pre-multiplied sum (NCCL's ncclRedOpCreatePreMulSum),
 * done on each rank's input before XCOLL_SUM. scalar points to one element
 * of dtype. Integers wrap as their sum does; float16 and bfloat16 multiply
 * in float32 and round to nearest even. dst may be exactly src. An unknown
 * dtype does nothing. */
XC_INLINE XC_HD void xc_scale_premul(void *dst, const void *src, size_t n,
                                     xcoll_datatype dtype, const void *scalar) {
#define XC_SCALE(NAME, T)                                                      \
  {                                                                            \
    T s;                                                                       \
    memcpy(&s, scalar, sizeof s);                                              \
    xc_##NAME##_scale((T *)dst, (const T *)src, s, n);                         \
    return;                                                                    \
  }
  switch (dtype) {
  case XCOLL_INT8:
    XC_SCALE(i8, int8_t)
  case XCOLL_UINT8:
    XC_SCALE(u8, uint8_t)
  case XCOLL_INT32:
    XC_SCALE(i32, int32_t)
  case XCOLL_UINT32:
    XC_SCALE(u32, uint32_t)
  case XCOLL_INT64:
    XC_SCALE(i64, int64_t)
  case XCOLL_UINT64:
    XC_SCALE(u64, uint64_t)
  case XCOLL_FLOAT32:
    XC_SCALE(f32, float)
  case XCOLL_FLOAT64:
    XC_SCALE(f64, double)
  case XCOLL_FLOAT16:
  case XCOLL_BFLOAT16: {
    uint16_t bits;
    memcpy(&bits, scalar, sizeof bits);
    int is_bf16 = dtype == XCOLL_BFLOAT16;
    float s = is_bf16 ? xc_bfloat16_to_float(bits) : xc_half_to_float(bits);
    const uint16_t *in = (const uint16_t *)src;
    uint16_t *out = (uint16_t *)dst;
    for (size_t i = 0; i < n; i++)
      out[i] = is_bf16 ? xc_float_to_bfloat16(xc_bfloat16_to_float(in[i]) * s)
                       : xc_float_to_half(xc_half_to_float(in[i]) * s);
    return;
  }
  default:
    return;
  }
#undef XC_SCALE
}

/* ---- a CUDA block's share of a step ----
 * xc_reduce_block and xc_copy_block are called by every thread of a block
 * with the same arguments (on the host, by the channel's one thread: they
 * are then xc_reduce_into and memcpy). On the device thread t takes the
 * 16-byte packs t, t + T, t + 2T ... (T threads) when every pointer is
 * 16-byte aligned, else the elements (words, bytes) t, t + T ...: the 32
 * threads of a warp touch adjacent addresses, so their accesses coalesce
 * into whole transactions, and an aligned pack is one 128-bit load or
 * store (NCCL's kernels move data in 16-byte packs the same way). A
 * caller that reads what another thread wrote waits at XC_BARRIER first. */
#ifdef __CUDA_ARCH__
/* 16-byte packs each thread moves per pass (memory-level parallelism: a
 * thread's loads of one pass are all in flight together). */
#define XC_UNROLL 4
/* The same for the reduction (xc_reduce_block), 1 unless the build sets it
 * (CMake: XCOLL_CUDA_REDUCE_UNROLL). 4 took the reduce-copy step from 37.8
 * to 56.9 GB/s with 2 blocks and from 564 to 870 GB/s with 32 on an H100
 * (docs/benchmarks.md, "Measured on a GPU"), but it more than doubles the fatbin's
 * build (135 s to 302 s for sm_75/80/90 + PTX on 2 cores): the dtype and
 * op dispatch inside the loop is compiled once per unrolled pack. */
#ifndef XC_REDUCE_UNROLL
#define XC_REDUCE_UNROLL 1
#endif
XC_INLINE __device__ int xc_aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}
#endif

#ifdef __CUDA_ARCH__
/* The packs [v0, packs) of dst = a op b, XC_FAST_UNROLL per thread per
 * pass, each stored in dst2 too unless it is NULL. Always inlined into a
 * switch case where dtype and op are constants, so xc_reduce_into's
 * dispatch folds away and the loop body is the reduction alone: the
 * generic loop below pays the dispatch per pack, which is why it unrolls
 * only XC_REDUCE_UNROLL times. Returns the first pack not done. */
#define XC_FAST_UNROLL 8
static __forceinline__ __device__ size_t
xc_reduce_packs_fixed(uint4 *dst, uint4 *dst2, const uint4 *a,
                      const uint4 *b, size_t packs, size_t per,
                      xcoll_datatype dtype, xcoll_op op) {
  size_t nth = blockDim.x, v = threadIdx.x;
  for (; v + (XC_FAST_UNROLL - 1) * nth < packs; v += XC_FAST_UNROLL * nth) {
    uint4 x[XC_FAST_UNROLL], y[XC_FAST_UNROLL];
#pragma unroll
    for (int u = 0; u < XC_FAST_UNROLL; u++) {
      x[u] = a[v + u * nth];
      y[u] = b[v + u * nth];
    }
#pragma unroll
    for (int u = 0; u < XC_FAST_UNROLL; u++) {
      xc_reduce_into(&x[u], &x[u], &y[u], per, dtype, op);
      dst[v + u * nth] = x[u];
      if (dst2 != NULL)
        dst2[v + u * nth] = x[u];
    }
  }
  for (; v < packs; v += nth) {
    uint4 x = a[v], y = b[v];
    xc_reduce_into(&x, &x, &y, per, dtype, op);
    dst[v] = x;
    if (dst2 != NULL)
      dst2[v] = x;
  }
  return packs;
}

/* 1 when xc_reduce_packs_fixed has a loop for dtype and op: the sums and
 * averages that training runs (gradients in float32, float16, bfloat16). */
XC_INLINE __device__ int xc_reduce_fast(xcoll_datatype dtype, xcoll_op op) {
  /* AVG reduces as SUM (the division comes once, at the end). */
  return (op == XCOLL_SUM || op == XCOLL_AVG) &&
         (dtype == XCOLL_FLOAT32 || dtype == XCOLL_BFLOAT16 ||
          dtype == XCOLL_FLOAT16);
}

/* xc_reduce_packs_fixed's sum loop for dtype, where xc_reduce_fast holds:
 * one call per dtype, each with constant arguments. */
static __forceinline__ __device__ void
xc_reduce_packs_sum(uint4 *dst, uint4 *dst2, const uint4 *a, const uint4 *b,
                    size_t packs, size_t per, xcoll_datatype dtype) {
  if (dtype == XCOLL_FLOAT32)
    xc_reduce_packs_fixed(dst, dst2, a, b, packs, per, XCOLL_FLOAT32,
                          XCOLL_SUM);
  else if (dtype == XCOLL_BFLOAT16)
    xc_reduce_packs_fixed(dst, dst2, a, b, packs, per, XCOLL_BFLOAT16,
                          XCOLL_SUM);
  else
    xc_reduce_packs_fixed(dst, dst2, a, b, packs, per, XCOLL_FLOAT16,
                          XCOLL_SUM);
}
#endif

XC_INLINE XC_HD void xc_reduce_block(void *dst, const void *a, const void *b,
                                     size_t n, xcoll_datatype dtype,
                                     xcoll_op op) {
#ifdef __CUDA_ARCH__
  size_t e = xc_dtype_size(dtype), tid = threadIdx.x, nth = blockDim.x;
  size_t done = 0;
  if (e > 0 && xc_aligned16(dst) && xc_aligned16(a) && xc_aligned16(b)) {
    size_t per = 16 / e, packs = n / per, v = tid;
    uint4 *d4 = (uint4 *)dst;
    const uint4 *a4 = (const uint4 *)a, *b4 = (const uint4 *)b;
    /* The sums and averages that training runs (gradients in float32,
     * float16, bfloat16; xc_reduce_fast): one loop each, specialised, with
     * XC_FAST_UNROLL packs in flight per thread. Everything else: the
     * generic loop. */
    if (xc_reduce_fast(dtype, op)) {
      xc_reduce_packs_sum(d4, NULL, a4, b4, packs, per, dtype);
    } else {
      /* XC_REDUCE_UNROLL packs per thread per pass, all loaded before any
       * is reduced (see its definition for what it gains and costs). */
      for (; v + (XC_REDUCE_UNROLL - 1) * nth < packs;
           v += XC_REDUCE_UNROLL * nth) {
        uint4 x[XC_REDUCE_UNROLL], y[XC_REDUCE_UNROLL];
#pragma unroll
        for (int u = 0; u < XC_REDUCE_UNROLL; u++) {
          x[u] = a4[v + u * nth];
          y[u] = b4[v + u * nth];
        }
#pragma unroll
        for (int u = 0; u < XC_REDUCE_UNROLL; u++) {
          xc_reduce_into(&x[u], &x[u], &y[u], per, dtype, op);
          d4[v + u * nth] = x[u];
        }
      }
#if XC_REDUCE_UNROLL > 1
      for (; v < packs; v += nth) {
        uint4 x = a4[v], y = b4[v];
        xc_reduce_into(&x, &x, &y, per, dtype, op);
        d4[v] = x;
      }
#endif
    }
    done = packs * per;
  }
  for (size_t i = done + tid; i < n; i += nth)
    xc_reduce_into((uint8_t *)dst + i * e, (const uint8_t *)a + i * e,
                   (const uint8_t *)b + i * e, 1, dtype, op);
#else
  xc_reduce_into(dst, a, b, n, dtype, op);
#endif
}

/* recvReduceCopySend's step in one pass: dst = dst2 = a op b, each pack
 * stored twice by the thread that reduced it (no barrier, no second read
 * of dst). Only where xc_reduce_block would take its fast loop (every
 * pointer 16-byte aligned, xc_reduce_fast); returns 0 having done
 * nothing otherwise, and always on the host, whose caller reduces then
 * copies. */
XC_INLINE XC_HD int xc_reduce_block2(void *dst, void *dst2, const void *a,
                                     const void *b, size_t n,
                                     xcoll_datatype dtype, xcoll_op op) {
#ifdef __CUDA_ARCH__
  size_t e = xc_dtype_size(dtype), tid = threadIdx.x, nth = blockDim.x;
  if (e == 0 || !xc_reduce_fast(dtype, op) || !xc_aligned16(dst) ||
      !xc_aligned16(dst2) || !xc_aligned16(a) || !xc_aligned16(b))
    return 0;
  size_t per = 16 / e, packs = n / per;
  uint4 *d4 = (uint4 *)dst, *e4 = (uint4 *)dst2;
  const uint4 *a4 = (const uint4 *)a, *b4 = (const uint4 *)b;
  xc_reduce_packs_sum(d4, e4, a4, b4, packs, per, dtype);
  for (size_t i = packs * per + tid; i < n; i += nth) {
    uint8_t *d = (uint8_t *)dst + i * e;
    xc_reduce_into(d, (const uint8_t *)a + i * e, (const uint8_t *)b + i * e,
                   1, dtype, op);
    for (size_t k = 0; k < e; k++)
      ((uint8_t *)dst2)[i * e + k] = d[k];
  }
  return 1;
#else
  (void)dst, (void)dst2, (void)a, (void)b, (void)n, (void)dtype, (void)op;
  return 0;
#endif
}

#ifdef __CUDA_ARCH__
/* The 16-byte packs [0, packs) of src into dst and, unless it is NULL,
 * dst2: XC_UNROLL packs per thread per pass, all loaded before any is
 * stored; every pointer 16-byte aligned. */
XC_INLINE __device__ void xc_copy_packs(uint4 *dst, uint4 *dst2,
                                        const uint4 *src, size_t packs) {
  size_t nth = blockDim.x, v = threadIdx.x;
  for (; v + (XC_UNROLL - 1) * nth < packs; v += XC_UNROLL * nth) {
    uint4 x[XC_UNROLL];
#pragma unroll
    for (int u = 0; u < XC_UNROLL; u++)
      x[u] = src[v + u * nth];
#pragma unroll
    for (int u = 0; u < XC_UNROLL; u++) {
      dst[v + u * nth] = x[u];
      if (dst2 != NULL)
        dst2[v + u * nth] = x[u];
    }
  }
  for (; v < packs; v += nth) {
    uint4 x = src[v];
    dst[v] = x;
    if (dst2 != NULL)
      dst2[v] = x;
  }
}
#endif

XC_INLINE XC_HD void xc_copy_block(void *dst, const void *src, size_t bytes) {
#ifdef __CUDA_ARCH__
  size_t tid = threadIdx.x, nth = blockDim.x, done = 0;
  if (xc_aligned16(dst) && xc_aligned16(src)) {
    xc_copy_packs((uint4 *)dst, NULL, (const uint4 *)src, bytes / 16);
    done = bytes / 16 * 16;
  } else if ((((uintptr_t)dst | (uintptr_t)src) & 3u) == 0) {
    size_t words = bytes / 4;
    for (size_t v = tid; v < words; v += nth)
      ((uint32_t *)dst)[v] = ((const uint32_t *)src)[v];
    done = words * 4;
  }
  for (size_t i = done + tid; i < bytes; i += nth)
    ((uint8_t *)dst)[i] = ((const uint8_t *)src)[i];
#else
  memcpy(dst, src, bytes);
#endif
}

/* xc_copy_block into two destinations with one read of src (recvCopySend:
 * the received slot to the output and to the next rank's slot; over net a
 * GPU rank's slot is host memory, read across PCIe). */
XC_INLINE XC_HD void xc_copy_block2(void *dst, void *dst2, const void *src,
                                    size_t bytes) {
#ifdef __CUDA_ARCH__
  if (!xc_aligned16(dst) || !xc_aligned16(dst2) || !xc_aligned16(src)) {
    /* each copy in the widest accesses its own pointers allow */
    xc_copy_block(dst, src, bytes);
    xc_copy_block(dst2, src, bytes);
    return;
  }
  xc_copy_packs((uint4 *)dst, (uint4 *)dst2, (const uint4 *)src, bytes / 16);
  for (size_t i = bytes / 16 * 16 + threadIdx.x; i < bytes; i += blockDim.x) {
    uint8_t x = ((const uint8_t *)src)[i];
    ((uint8_t *)dst)[i] = x;
    ((uint8_t *)dst2)[i] = x;
  }
#else
  memcpy(dst, src, bytes);
  memcpy(dst2, src, bytes);
#endif
}

/* buf[i] /= nranks for the n elements of a floating-point dtype (AVG's last
 * step; integers are left alone: AVG is rejected for them). A true division,
 * not a product with 1/nranks: it is correctly rounded (1/3 is inexact). The
 * 16-bit types divide in float32 and round to nearest even. */
XC_INLINE XC_HD void xc_scale_avg(void *buf, size_t n, xcoll_datatype dtype,
                                  int nranks) {
  if (nranks <= 1)
    return;
  switch (dtype) {
  case XCOLL_FLOAT32: {
    float *x = (float *)buf;
    float divisor = (float)nranks;
    for (size_t i = 0; i < n; i++)
      x[i] /= divisor;
    return;
  }
  case XCOLL_FLOAT64: {
    double *x = (double *)buf;
    double divisor = (double)nranks;
    for (size_t i = 0; i < n; i++)
      x[i] /= divisor;
    return;
  }
  case XCOLL_FLOAT16: {
    uint16_t *x = (uint16_t *)buf;
    float divisor = (float)nranks;
    for (size_t i = 0; i < n; i++)
      x[i] = xc_float_to_half(xc_half_to_float(x[i]) / divisor);
    return;
  }
  case XCOLL_BFLOAT16: {
    uint16_t *x = (uint16_t *)buf;
    float divisor = (float)nranks;
    for (size_t i = 0; i < n; i++)
      x[i] = xc_float_to_bfloat16(xc_bfloat16_to_float(x[i]) / divisor);
    return;
  }
  default:
    return;
  }
}

/* xc_scale_avg called by every thread of a block with the same arguments
 * (as xc_copy_block): on the device thread t divides the elements t,
 * t + T ... (T threads), so that a warp's accesses coalesce; on the host
 * the channel's one thread divides them all. */
XC_INLINE XC_HD void xc_scale_avg_block(void *buf, size_t n,
                                        xcoll_datatype dtype, int nranks) {
#ifdef __CUDA_ARCH__
  if (nranks <= 1)
    return;
  size_t tid = threadIdx.x, nth = blockDim.x;
  float fdiv = (float)nranks;
  switch (dtype) {
  case XCOLL_FLOAT32:
    for (size_t i = tid; i < n; i += nth)
      ((float *)buf)[i] /= fdiv;
    return;
  case XCOLL_FLOAT64:
    for (size_t i = tid; i < n; i += nth)
      ((double *)buf)[i] /= (double)nranks;
    return;
  case XCOLL_FLOAT16:
    for (size_t i = tid; i < n; i += nth) {
      uint16_t *x = (uint16_t *)buf + i;
      *x = xc_float_to_half(xc_half_to_float(*x) / fdiv);
    }
    return;
  case XCOLL_BFLOAT16:
    for (size_t i = tid; i < n; i += nth) {
      uint16_t *x = (uint16_t *)buf + i;
      *x = xc_float_to_bfloat16(xc_bfloat16_to_float(*x) / fdiv);
    }
    return;
  default:
    return;
  }
#else
  xc_scale_avg(buf, n, dtype, nranks);
#endif
}

#endif
