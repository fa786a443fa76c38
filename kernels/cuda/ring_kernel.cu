/* ring_kernel.cu - the CUDA side of kernels/: one __global__ kernel per
 * collective family, each running xc_ring_run (kernels/ring.h) with one
 * thread block per channel; the threads of a block share every slice.
 *
 * Built only as a compile check today (ctest unit.kernels_nvcc, for sm_75,
 * sm_80 and sm_90 plus PTX): the project's machines have nvcc but no GPU, so
 * none of these kernels has ever run on a GPU; the stand-in driver
 * tests/unit/fake_libcuda.c runs the host build of the same body (ctest
 * unit.fake_cuda_kernel). Launch shape: <<<nchannels, threads>>>, block c =
 * channel c; sends, recvs, abort and status in pinned mapped host memory
 * (conn.h), status[c] written by thread 0 of block c on failure only.
 *
 * Parameters: work by value (one launch per collective, so the host writes
 * no per-channel work array the GPU would have to read first); each block
 * derives its channel from blockIdx.x and gridDim.x, and its scratch (when
 * work.scratch is set) as scratch + c * scratch_bytes. status is sticky: a
 * success leaves it as the host set it (zero), so one status array can
 * collect the first failure of several launches. */
#include "../ring.h"

/* One channel per block; every thread calls xc_ring_run with the same
 * arguments (it is written for that: thread 0 waits and posts). */
__device__ static void xc_run_block(xc_work w, xc_conn *sends, xc_conn *recvs,
                                    const xc_abort *abort, int *status,
                                    int kind) {
  int c = (int)blockIdx.x;
  w.channel = c;
  w.nchannels = (int)gridDim.x;
  if (w.scratch != NULL)
    w.scratch = (char *)w.scratch + (size_t)c * w.scratch_bytes;
  xcoll_status s = w.kind == kind
                       ? xc_ring_run(&w, sends != NULL ? &sends[c] : NULL,
                                     recvs != NULL ? &recvs[c] : NULL, abort)
                       : XCOLL_ERR_INVALID_ARGUMENT;
  if (s != XCOLL_SUCCESS && threadIdx.x == 0)
    status[c] = (int)s;
}

#define XC_DEFINE_KERNEL(NAME, KIND)                                           \
  extern "C" __global__ void NAME(xc_work work, xc_conn *sends,              \
                                  xc_conn *recvs, const xc_abort *abort,       \
                                  int *status) {                               \
    xc_run_block(work, sends, recvs, abort, status, KIND);                     \
  }

XC_DEFINE_KERNEL(xc_allreduce_kernel, XC_COLL_ALLREDUCE)
XC_DEFINE_KERNEL(xc_reduce_scatter_kernel, XC_COLL_REDUCE_SCATTER)
XC_DEFINE_KERNEL(xc_allgather_kernel, XC_COLL_ALLGATHER)
XC_DEFINE_KERNEL(xc_broadcast_kernel, XC_COLL_BROADCAST)
XC_DEFINE_KERNEL(xc_reduce_kernel, XC_COLL_REDUCE)
