/* ring_kernel.cu - the CUDA side of kernels/: one __global__ kernel per
 * collective family, each running xc_ring_run (kernels/ring.h) with one
 * thread block per channel; the threads of a block share every slice.
 *
 * Built only as a compile check today (ctest unit.kernels_nvcc, for sm_75,
 * sm_80 and sm_90 plus PTX): the project's machines have nvcc but no GPU, so
 * none of these kernels has ever run. Launch shape, when a GPU rank exists:
 * <<<nchannels, threads>>>, works/sends/recvs indexed by blockIdx.x, the
 * FIFOs in pinned mapped host memory (conn.h), status[channel] set by thread
 * 0 of each block. */
#include "../ring.h"

/* One channel per block; every thread calls xc_ring_run with the same
 * arguments (it is written for that: thread 0 waits and posts). */
__device__ static void xc_run_block(const xc_work *works, xc_conn *sends,
                                    xc_conn *recvs, const xc_abort *abort,
                                    xcoll_status *status, int kind) {
  const xc_work *w = &works[blockIdx.x];
  xcoll_status s = w->kind == kind
                       ? xc_ring_run(w, &sends[blockIdx.x], &recvs[blockIdx.x],
                                     abort)
                       : XCOLL_ERR_INVALID_ARGUMENT;
  if (threadIdx.x == 0)
    status[blockIdx.x] = s;
}

#define XC_DEFINE_KERNEL(NAME, KIND)                                           \
  extern "C" __global__ void NAME(const xc_work *works, xc_conn *sends,        \
                                  xc_conn *recvs, const xc_abort *abort,       \
                                  xcoll_status *status) {                      \
    xc_run_block(works, sends, recvs, abort, status, KIND);                    \
  }

XC_DEFINE_KERNEL(xc_allreduce_kernel, XC_COLL_ALLREDUCE)
XC_DEFINE_KERNEL(xc_reduce_scatter_kernel, XC_COLL_REDUCE_SCATTER)
XC_DEFINE_KERNEL(xc_allgather_kernel, XC_COLL_ALLGATHER)
XC_DEFINE_KERNEL(xc_broadcast_kernel, XC_COLL_BROADCAST)
XC_DEFINE_KERNEL(xc_reduce_kernel, XC_COLL_REDUCE)
