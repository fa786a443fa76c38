/* bench_reduce_cuda.cu - on one GPU, the reduce-copy bandwidth of the code
 * the CUDA ring kernel runs (kernels/cuda/ring_kernel.cu) against a
 * device-to-device cudaMemcpyAsync of the same size; the goal is a
 * reduce-copy that reaches at least 70% of the copy's memory traffic
 * (docs/benchmarks.md, "GPU figures: scripts/gpu-check.sh").
 *
 * What is measured: xc_simple_step (kernels/prims.h) with the flags of
 * recvReduceCopy (RECV | SRC | DST: out = slot op input), the SIMPLE
 * protocol's step body, which reduces with xc_reduce_block (kernels/
 * reduce.h): thread t of a block takes the 16-byte packs t, t + T ... of
 * the step (docs/kernels.md, "How a step is shared"). As in the
 * ring kernel, one block of 256 threads per channel, each channel owns a
 * contiguous part of the buffer and walks it one step (slot, 512 KiB =
 * nccl_like's default XCOLL_BUFFSIZE 4 MiB / 8 slots) at a time, with a
 * block barrier per step as xc_generic_op has. What is not: the FIFO waits
 * and posts (a real ring waits for its peer), and where the slot lives: on
 * a GPU rank the received slot is pinned host memory mapped into the device
 * (docs/nccl_like.md, "GPU ranks and mixed rings"), so the kernel reads one operand over
 * PCIe. --pinned-slot puts the slot operand there too, to show that bound.
 *
 * Byte counting (printed with the figures):
 * - "traffic GB/s": bytes read + bytes written per second, the STREAM
 *   benchmark's convention (McCalpin, https://www.cs.virginia.edu/stream/
 *   ref.html: Copy counts 2 words per element, Add 3). Reduce-copy of N
 *   bytes moves 3N (reads slot and input, writes output); cudaMemcpy of N
 *   bytes moves 2N. The goal ratio is taken on this count: both are bound
 *   by memory bandwidth, and the question is how much of what the copy
 *   engine/driver copy reaches the reduction reaches.
 * - "algbw GB/s": N / time, nccl-tests' algbw (PERFORMANCE.md in
 *   NVIDIA/nccl-tests: size / time). On this count a reduce-copy at the
 *   same DRAM bandwidth as the copy scores 2/3 of it, so the traffic ratio
 *   is algbw ratio * 3/2; both are printed.
 * Each figure is the mean over --iters launches (or copies) timed with CUDA
 * events after --warmup untimed ones.
 *
 * Not built by CMake (CI has no GPU, and nvcc time matters); scripts/
 * gpu-check.sh builds and runs it:
 *   nvcc -O3 -std=c++17 -arch=native -I include \
 *       bench/bench_reduce_cuda.cu -o build-gpu/bench_reduce_cuda
 *   build-gpu/bench_reduce_cuda [--dtype float32|float16|bfloat16]
 *       [--minbytes N] [--maxbytes N] [--blocks 1,2,8,32,0] [--threads 256]
 *       [--step BYTES] [--iters N] [--warmup N] [--pinned-slot]
 * (--blocks 0 means one block per SM: the whole GPU.) Exit 0 when every row
 * ran and the result check passed; the goal is reported, not enforced. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/ring.h" /* xc_channel_share; prims.h */

#define BENCH_CHECK(call)                                                      \
  do {                                                                         \
    cudaError_t bench_err = (call);                                            \
    if (bench_err != cudaSuccess) {                                            \
      fprintf(stderr, "bench_reduce_cuda: %s failed: %s (%s:%d)\n", #call,      \
              cudaGetErrorString(bench_err), __FILE__, __LINE__);              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* The ring kernel's SIMPLE step body over device buffers: block c reduces
 * its contiguous part of [0, count) (the ring kernel's channel share,
 * 16-byte aligned: xc_channel_share in kernels/ring.h) one step of
 * step_elems at a time, out = slot op in, exactly as recvReduceCopy does
 * on a received slot. */
__global__ void reduce_copy_kernel(uint8_t *out, const uint8_t *slot,
                                   const uint8_t *in, size_t count,
                                   size_t step_elems, xcoll_datatype dtype) {
  xc_prims p;
  memset(&p, 0, sizeof p);
  p.dtype = dtype;
  p.op = XCOLL_SUM;
  p.elem_bytes = xc_dtype_size(dtype);
  p.proto = XC_PROTO_SIMPLE;
  size_t first, share;
  xc_channel_share(count, p.elem_bytes, (int)blockIdx.x, (int)gridDim.x,
                   &first, &share);
  size_t last = first + share;
  for (size_t at = first; at < last; at += step_elems) {
    size_t n = last - at < step_elems ? last - at : step_elems;
    size_t offset = at * p.elem_bytes;
    xc_simple_step(&p, XC_OP_RECV | XC_OP_SRC | XC_OP_DST, in + offset,
                   slot + offset, out + offset, NULL, n);
    XC_BARRIER();
  }
}

/* Not xcoll code: float32 sum with a grid-stride loop (consecutive threads,
 * consecutive elements: coalesced), for scale: what the same launch shape
 * reaches when the threads of a warp read neighbouring words. */
__global__ void coalesced_sum_kernel(float *out, const float *slot,
                                     const float *in, size_t count) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += stride)
    out[i] = slot[i] + in[i];
}

typedef struct bench_options {
  xcoll_datatype dtype;
  const char *dtype_name;
  size_t min_bytes;
  size_t max_bytes;
  int blocks[16];
  int nblocks;
  int threads;
  size_t step_bytes;
  int iters;
  int warmup;
  int pinned_slot;
} bench_options;

static size_t parse_bytes(const char *text) {
  char *end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text)
    return 0;
  switch (*end) {
  case 'K': case 'k': v <<= 10; break;
  case 'M': case 'm': v <<= 20; break;
  case 'G': case 'g': v <<= 30; break;
  default: break;
  }
  return (size_t)v;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_reduce_cuda [--dtype float32|float16|bfloat16] "
          "[--minbytes N] [--maxbytes N]\n"
          "       [--blocks LIST (0: one per SM)] [--threads N] [--step BYTES] "
          "[--iters N] [--warmup N] [--pinned-slot]\n");
  exit(2);
}

static void parse(int argc, char **argv, bench_options *o) {
  o->dtype = XCOLL_FLOAT32;
  o->dtype_name = "float32";
  o->min_bytes = (size_t)1 << 20;
  o->max_bytes = (size_t)256 << 20;
  const int default_blocks[] = {1, 2, 8, 32, 0};
  o->nblocks = 5;
  memcpy(o->blocks, default_blocks, sizeof default_blocks);
  o->threads = 256;
  o->step_bytes = (size_t)512 << 10;
  o->iters = 20;
  o->warmup = 5;
  o->pinned_slot = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--pinned-slot") == 0) {
      o->pinned_slot = 1;
      continue;
    }
    if (v == NULL)
      usage();
    i++;
    if (strcmp(a, "--dtype") == 0) {
      o->dtype_name = v;
      if (strcmp(v, "float32") == 0)
        o->dtype = XCOLL_FLOAT32;
      else if (strcmp(v, "float16") == 0)
        o->dtype = XCOLL_FLOAT16;
      else if (strcmp(v, "bfloat16") == 0)
        o->dtype = XCOLL_BFLOAT16;
      else
        usage();
    } else if (strcmp(a, "--minbytes") == 0) {
      o->min_bytes = parse_bytes(v);
    } else if (strcmp(a, "--maxbytes") == 0) {
      o->max_bytes = parse_bytes(v);
    } else if (strcmp(a, "--blocks") == 0) {
      o->nblocks = 0;
      for (const char *p = v; *p && o->nblocks < 16;) {
        char *end = NULL;
        long b = strtol(p, &end, 10);
        if (end == p || b < 0 || b > 65535)
          usage();
        o->blocks[o->nblocks++] = (int)b;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
          usage();
      }
    } else if (strcmp(a, "--threads") == 0) {
      o->threads = atoi(v);
    } else if (strcmp(a, "--step") == 0) {
      o->step_bytes = parse_bytes(v);
    } else if (strcmp(a, "--iters") == 0) {
      o->iters = atoi(v);
    } else if (strcmp(a, "--warmup") == 0) {
      o->warmup = atoi(v);
    } else {
      usage();
    }
  }
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes || o->threads < 32 ||
      o->threads > 1024 || o->step_bytes < 64 || o->iters < 1 || o->warmup < 0 ||
      o->nblocks == 0)
    usage();
}

/* Host value of element i of the slot and input buffers: small integers,
 * exact in every float type, so the sum is exact and checkable. */
static float slot_value(size_t i) { return (float)(i % 7); }
static float input_value(size_t i) { return (float)(i % 5); }

static void fill(void *host, size_t count, xcoll_datatype dtype,
                 float (*value)(size_t)) {
  for (size_t i = 0; i < count; i++) {
    float v = value(i);
    if (dtype == XCOLL_FLOAT32)
      ((float *)host)[i] = v;
    else if (dtype == XCOLL_FLOAT16)
      ((uint16_t *)host)[i] = xc_float_to_half(v);
    else
      ((uint16_t *)host)[i] = xc_float_to_bfloat16(v);
  }
}

static float element(const void *host, size_t i, xcoll_datatype dtype) {
  if (dtype == XCOLL_FLOAT32)
    return ((const float *)host)[i];
  if (dtype == XCOLL_FLOAT16)
    return xc_half_to_float(((const uint16_t *)host)[i]);
  return xc_bfloat16_to_float(((const uint16_t *)host)[i]);
}

/* Mean seconds per launch of the reduce-copy (coalesced: the reference
 * kernel instead), after warmup. */
static double time_kernel(const bench_options *o, int blocks, int coalesced,
                          uint8_t *out, const uint8_t *slot, const uint8_t *in,
                          size_t bytes, cudaStream_t stream, cudaEvent_t start,
                          cudaEvent_t stop) {
  size_t e = xc_dtype_size(o->dtype);
  size_t count = bytes / e;
  size_t step_elems = o->step_bytes / e;
  for (int it = -o->warmup; it < o->iters; it++) {
    if (it == 0)
      BENCH_CHECK(cudaEventRecord(start, stream));
    if (coalesced)
      coalesced_sum_kernel<<<blocks, o->threads, 0, stream>>>(
          (float *)out, (const float *)slot, (const float *)in, bytes / 4);
    else
      reduce_copy_kernel<<<blocks, o->threads, 0, stream>>>(
          out, slot, in, count, step_elems, o->dtype);
    BENCH_CHECK(cudaGetLastError());
  }
  BENCH_CHECK(cudaEventRecord(stop, stream));
  BENCH_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return (double)ms * 1e-3 / o->iters;
}

static double time_memcpy(const bench_options *o, uint8_t *dst,
                          const uint8_t *src, size_t bytes, cudaStream_t stream,
                          cudaEvent_t start, cudaEvent_t stop) {
  for (int it = -o->warmup; it < o->iters; it++) {
    if (it == 0)
      BENCH_CHECK(cudaEventRecord(start, stream));
    BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  BENCH_CHECK(cudaEventRecord(stop, stream));
  BENCH_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return (double)ms * 1e-3 / o->iters;
}

int main(int argc, char **argv) {
  bench_options o;
  parse(argc, argv, &o);
  int device = 0;
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDevice(&device));
  BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  size_t e = xc_dtype_size(o.dtype);
  size_t max_bytes = o.max_bytes / e * e;

  uint8_t *out = NULL, *in = NULL, *slot = NULL, *slot_host = NULL;
  BENCH_CHECK(cudaMalloc(&out, max_bytes));
  BENCH_CHECK(cudaMalloc(&in, max_bytes));
  if (o.pinned_slot) {
    /* As a GPU rank's FIFO: pinned host memory mapped into the device. */
    BENCH_CHECK(cudaHostAlloc(&slot_host, max_bytes, cudaHostAllocMapped));
    BENCH_CHECK(cudaHostGetDevicePointer(&slot, slot_host, 0));
  } else {
    BENCH_CHECK(cudaMalloc(&slot, max_bytes));
  }
  size_t max_count = max_bytes / e;
  void *host = malloc(max_bytes);
  if (host == NULL) {
    fprintf(stderr, "bench_reduce_cuda: cannot allocate %zu host bytes\n", max_bytes);
    return 1;
  }
  fill(host, max_count, o.dtype, slot_value);
  BENCH_CHECK(cudaMemcpy(slot, host, max_bytes, cudaMemcpyHostToDevice));
  fill(host, max_count, o.dtype, input_value);
  BENCH_CHECK(cudaMemcpy(in, host, max_bytes, cudaMemcpyHostToDevice));

  cudaStream_t stream;
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));

  printf("# bench_reduce_cuda: %s (sm_%d%d, %d SMs), %s sum, slot operand in %s\n",
         prop.name, prop.major, prop.minor, prop.multiProcessorCount, o.dtype_name,
         o.pinned_slot ? "mapped pinned host memory (as a GPU rank's FIFO)"
                       : "device memory");
  printf("# reduce-copy = xc_simple_step(recvReduceCopy) of kernels/prims.h, "
         "%d threads per block (channel), step %zu B; memcpy = cudaMemcpyAsync "
         "device-to-device\n", o.threads, o.step_bytes);
  printf("# traffic GB/s: (bytes read + written) / time, STREAM's count: "
         "reduce-copy 3N, memcpy 2N; algbw GB/s: N / time (nccl-tests)\n");
  printf("# ratio = reduce-copy traffic / memcpy traffic (goal >= 0.70); "
         "algbw ratio = ratio * 2/3\n");
  printf("# %10s %7s %10s %10s %9s %10s %9s %7s %7s\n", "size(B)", "blocks",
         "memcpy(us)", "memcpy", "kernel", "kernel", "coalesced", "ratio",
         "algbw");
  printf("# %10s %7s %10s %10s %9s %10s %9s %7s %7s\n", "", "", "",
         "traffic", "(us)", "traffic", "traffic", "", "ratio");

  int failed = 0;
  /* The summary's ratio is the one at the largest size, for each block
   * count: beyond the L2 cache both kernels stream from HBM, while at small
   * sizes the data sits in L2 and the copy is launch-bound (a best row
   * there says nothing about memory speed). */
  double last_ratio[16] = {0};
  size_t last_bytes = 0;
  for (size_t bytes = o.min_bytes / e * e; bytes <= max_bytes && bytes > 0;
       bytes *= 2) {
    double copy_s = time_memcpy(&o, out, in, bytes, stream, start, stop);
    double copy_traffic = 2.0 * (double)bytes / copy_s / 1e9;
    for (int b = 0; b < o.nblocks; b++) {
      int blocks = o.blocks[b] > 0 ? o.blocks[b] : prop.multiProcessorCount;
      double kernel_s =
          time_kernel(&o, blocks, 0, out, slot, in, bytes, stream, start, stop);
      double kernel_traffic = 3.0 * (double)bytes / kernel_s / 1e9;
      char coalesced[16] = "-";
      if (o.dtype == XCOLL_FLOAT32) {
        double ref_s =
            time_kernel(&o, blocks, 1, out, slot, in, bytes, stream, start, stop);
        snprintf(coalesced, sizeof coalesced, "%.1f",
                 3.0 * (double)bytes / ref_s / 1e9);
        /* Leave out[] as the kernel under test wrote it, for the check. */
        time_kernel(&o, blocks, 0, out, slot, in, bytes, stream, start, stop);
      }
      double ratio = kernel_traffic / copy_traffic;
      if (b < 16)
        last_ratio[b] = ratio;
      last_bytes = bytes;
      printf("  %10zu %7d %10.1f %10.1f %9.1f %10.1f %9s %7.2f %7.2f\n", bytes,
             blocks, copy_s * 1e6, copy_traffic, kernel_s * 1e6, kernel_traffic,
             coalesced, ratio, ratio * 2.0 / 3.0);
      fflush(stdout);
    }
    /* Check the last launch's output: out = slot + input, every element. */
    size_t count = bytes / e;
    BENCH_CHECK(cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
      if (element(host, i, o.dtype) != slot_value(i) + input_value(i))
        wrong++;
    if (wrong) {
      printf("# %zu B: %zu wrong elements in the reduce-copy output: FAILED\n",
             bytes, wrong);
      failed = 1;
    }
    if (bytes > max_bytes / 2)
      break;
  }
  int beyond_l2 = last_bytes >= 2 * (size_t)prop.l2CacheSize;
  for (int b = 0; b < o.nblocks && b < 16; b++) {
    int blocks = o.blocks[b] > 0 ? o.blocks[b] : prop.multiProcessorCount;
    printf("# reduce-copy / memcpy traffic ratio at %zu B (%s the %d MB L2), "
           "%d blocks: %.2f (goal >= 0.70: %s)\n",
           last_bytes, beyond_l2 ? "at least twice" : "NOT beyond twice",
           prop.l2CacheSize >> 20, blocks, last_ratio[b],
           !beyond_l2 ? "not judged: raise --maxbytes"
           : last_ratio[b] >= 0.70 ? "met" : "not met");
  }
  printf("# check: %s\n", failed ? "FAILED" : "OK");

  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  BENCH_CHECK(cudaStreamDestroy(stream));
  BENCH_CHECK(cudaFree(out));
  BENCH_CHECK(cudaFree(in));
  if (o.pinned_slot)
    BENCH_CHECK(cudaFreeHost(slot_host));
  else
    BENCH_CHECK(cudaFree(slot));
  free(host);
  return failed;
}
