/* ring_kernel.cu - the CUDA side of kernels/: one __global__ kernel per
 * collective family, each running xc_ring_run (kernels/ring.h) with one
 * thread block per channel; the threads of a block share every slice.
 *
 * Launched by backends/nccl_like/gpu_engine.c through the driver API
 * (cuLaunchKernel on the caller's stream) with <<<channels, threads>>>:
 * - work, by value: the collective as on a host rank, channel 0; block c
 *   runs channel c of gridDim.x, and the gather allreduce's scratch is
 *   work.scratch + c * work.scratch_bytes;
 * - sends[c], recvs[c]: channel c's connections, in pinned host memory
 *   mapped into the device (conn.h), whose step counters persist from one
 *   launch to the next;
 * - abort: the flag the host raises to stop a kernel that waits on a peer;
 * - status[c]: written by thread 0 of block c only when the channel failed
 *   (a kernel never clears it: the communicator has failed).
 * The project's machines have nvcc but no GPU: the build compiles this for
 * sm_75, sm_80 and sm_90 plus PTX; it has never run here. */
#include "../ring.h"

__device__ static void xc_run_block(xc_work work, xc_conn *sends,
                                    xc_conn *recvs, const xc_abort *abort,
                                    int *status, int kind) {
  int c = (int)blockIdx.x;
  work.channel = c;
  work.nchannels = (int)gridDim.x;
  if (work.scratch != NULL)
    work.scratch = (char *)work.scratch + (size_t)c * work.scratch_bytes;
  xcoll_status s =
      work.kind == kind
          ? xc_ring_run(&work, sends ? &sends[c] : NULL,
                        recvs ? &recvs[c] : NULL, abort)
          : XCOLL_ERR_INVALID_ARGUMENT;
  if (threadIdx.x == 0 && s != XCOLL_SUCCESS)
    status[c] = (int)s;
}

/* __launch_bounds__: the block size the engine launches (XC_GPU_THREADS)
 * and one block per SM at least, so that registers never run out at
 * launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) when the block size grows. */
#define XC_DEFINE_KERNEL(NAME, KIND)                                           \
  extern "C" __global__ void __launch_bounds__(XC_GPU_THREADS, 1)              \
      NAME(xc_work work, xc_conn *sends,                                       \
                                  xc_conn *recvs, const xc_abort *abort,       \
                                  int *status) {                               \
    xc_run_block(work, sends, recvs, abort, status, KIND);                     \
  }

XC_DEFINE_KERNEL(xc_allreduce_kernel, XC_COLL_ALLREDUCE)
XC_DEFINE_KERNEL(xc_reduce_scatter_kernel, XC_COLL_REDUCE_SCATTER)
XC_DEFINE_KERNEL(xc_allgather_kernel, XC_COLL_ALLGATHER)
XC_DEFINE_KERNEL(xc_broadcast_kernel, XC_COLL_BROADCAST)
XC_DEFINE_KERNEL(xc_reduce_kernel, XC_COLL_REDUCE)
