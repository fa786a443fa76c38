/*
 * perf.h - the pieces of xcoll-perf (tools/xcoll-perf.c, the measuring loop
 * and main): the command line (perf_options.c), the CUDA driver loaded with
 * dlopen for device buffers (perf_cuda.c), each collective's buffers and
 * their check against a local reference (perf_check.c), and the text and
 * JSON output (perf_report.c). The program's opening comment says what it
 * measures and how.
 */
#ifndef XCOLL_TOOLS_PERF_H
#define XCOLL_TOOLS_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xcoll.h"

/* The collectives this tool measures, in the order of the usage text. */
typedef enum perf_coll {
  PERF_ALLREDUCE = 0,
  PERF_ALLGATHER,
  PERF_REDUCE_SCATTER,
  PERF_BROADCAST,
  PERF_REDUCE,
  PERF_ALLTOALL,
  PERF_GATHER,
  PERF_SCATTER,
  PERF_SENDRECV,
  PERF_NUM_COLLS
} perf_coll;

/* Each collective's name, as --coll and the output spell it. */
extern const char *const perf_coll_names[PERF_NUM_COLLS];
/* The library's row for each (sendrecv: a send, whose shape and busbw
 * factor it has). */
extern const xcoll_coll_kind perf_coll_kinds[PERF_NUM_COLLS];
const xcoll_coll_info *perf_coll_info(perf_coll coll);

/* Everything the command line decides. */
typedef struct perf_options {
  size_t min_bytes;
  size_t max_bytes;
  double step_factor; /* > 1: multiply sizes by it; 0: add step_bytes */
  size_t step_bytes;
  int iters;
  int warmup_iters;
  int agg_iters;  /* -m: operations per timed iteration */
  int run_cycles; /* -N: sweeps to run and print; 0 = until interrupted */
  int average;    /* -a: 0 rank 0's time, 1 mean, 2 min, 3 max over ranks */
  int timeout_s;  /* -T: XCOLL_TIMEOUT_S for this run; 0 = the library's */
  xcoll_datatype dtype;
  xcoll_op op;    /* XCOLL_SUM under -o mulsum */
  int mulsum;     /* -o mulsum: a premul sum, each rank's scalar
                     perf_premul_scalar(rank) (nccl-tests' mulsum) */
  int all_dtypes; /* -d all */
  int all_ops;    /* -o all */
  int check;      /* -c: checked operations per row and half; 0 = none */
  int root;
  perf_coll coll;
  int blocking;
  const char *json_path;
  int report_cputime; /* -C 1: time to issue the calls, not to complete them */
  int local_register; /* -R 0|1|2: accepted; xcoll registers no buffers */
  int stream_null;    /* -y 0|1: accepted; the calls use the NULL stream */
  int device_buffers;    /* --device-buffers: -1 auto, 0 host, 1 device */
  const char *gpu_ranks; /* --gpu-ranks LIST; NULL: XCOLL_DEVICE decides */
} perf_options;

/* -a's values, 0..3, as the header and the JSON rows name them. */
extern const char *const perf_average_names[4];

/* One measured half-row (out-of-place or in-place). */
typedef struct perf_result {
  double time_us; /* mean time per operation, combined over ranks by -a */
  double algbw;   /* GB/s, 1e9 bytes */
  double busbw;   /* GB/s */
  int64_t wrong;  /* wrong elements summed over ranks; -1 when not checked */
  const char *algorithm; /* what ran the timed operations (library's names) */
  const char *protocol;
} perf_result;

/* Why a run stopped early: the failing call's status and the comm to ask. */
typedef struct perf_failure {
  xcoll_status status;
  const char *what;
} perf_failure;

/* The driver entry points this tool uses (cuda.h's signatures; CUdeviceptr
 * is unsigned long long, CUresult an int whose 0 is CUDA_SUCCESS). */
typedef struct perf_cuda {
  void *handle;
  int (*init)(unsigned int flags);
  int (*device_get_count)(int *count);
  int (*device_get)(int *device, int ordinal);
  int (*primary_ctx_retain)(void **ctx, int device);
  int (*ctx_set_current)(void *ctx);
  int (*primary_ctx_release)(int device);
  int (*mem_alloc)(unsigned long long *dptr, size_t bytes);
  int (*mem_free)(unsigned long long dptr);
  int (*htod)(unsigned long long dst, const void *src, size_t bytes);
  int (*dtoh)(void *dst, unsigned long long src, size_t bytes);
  int stand_in;     /* tests/unit/fake_libcuda.c: needs no current context */
  int bound_device; /* whose primary context cuda_bind retained; -1: none */
} perf_cuda;


typedef struct perf_run {
  const perf_options *opt;
  xcoll_comm_t comm;
  int rank;
  int world_size;
  int device;     /* the communicator's: XCOLL_DEVICE_HOST or a CUDA ordinal */
  xcoll_op op;    /* what the calls get: opt->op, or -o mulsum's premul op */
  int on_device;  /* sendbuf/recvbuf are CUDA device memory */
  int gpu_ranks;  /* ranks bound to a CUDA device, over the communicator */
  int device_buffer_ranks; /* ranks with on_device, over the communicator */
  /* Ranks whose connection to the next rank is shm / net (nccl_like's
   * transports, xcoll_comm_transport), over the communicator. */
  int p2p_send_ranks, shm_send_ranks, net_send_ranks;
  size_t elem_bytes;
  /* What the calls get: max_bytes each, host memory 64-byte aligned, or
   * device memory (cuMemAlloc, 256-byte aligned) when on_device. */
  char *sendbuf;
  char *recvbuf;
  /* Host copies of the two for --check: the same memory as sendbuf/recvbuf
   * on host buffers; filled then copied to the device, or copied back and
   * read, on device buffers. */
  char *host_send;
  char *host_recv;
  /* On a GPU rank, 64 bytes of device memory for the tool's own small
   * collectives (times, counts): nccl_like's GPU ranks take only memory the
   * device reaches. NULL on a host rank. */
  char *scratch;
  perf_cuda cuda;
  /* max(iters, warmup_iters) * agg_iters slots, for --blocking 0 */
  xcoll_request_t *requests;
} perf_run;

/* Per-rank element counts and buffer sizes for one row of size total_bytes,
 * following the NCCL argument conventions. */
typedef struct perf_shape {
  size_t bytes;      /* total buffer bytes, rounded down to a whole shape */
  size_t count;      /* elements of the whole buffer (printed) */
  size_t call_count; /* count argument of the call */
  size_t send_elems; /* elements in the send buffer */
  size_t recv_elems; /* elements in the receive buffer */
} perf_shape;

/* The pointers one call uses. In place follows xcoll.h: allgather reads its
 * input from its slot of the receive buffer, reduce_scatter writes its output
 * into its block of the send buffer (which lives in recvbuf here). */
typedef struct perf_buffers {
  void *send; /* what the call reads */
  void *recv; /* what the call writes */
  void *input;  /* where to write this rank's input (== send) */
  void *output; /* where to check the result (== recv) */
} perf_buffers;

/* ---- perf_options.c ---- */

/* Fills opt from the command line. Returns 0 to run, 1 after --help or
 * --version (printed), 2 on a bad command line (message printed). */
int perf_parse_options(int argc, char **argv, perf_options *opt);
/* --gpu-ranks: 1 if rank is in list ("all", "none" or comma-separated
 * ranks), 0 if not, -1 if list is malformed. */
int perf_rank_listed(const char *list, int rank);

/* nccl-tests' name of dtype, as its tables print it (test_typenames in
 * src/common.cu): "float", "half", "double", "bfloat16", "int32"... */
const char *perf_dtype_name(xcoll_datatype dtype);

/* ---- perf_cuda.c ---- */

/* Load libcuda.so.1 once and cuInit it. Returns 0, or -1 with a message. */
int perf_cuda_load(perf_cuda *cu);
/* Make device's primary context current on this thread. 0, or -1 with a
 * message. */
int perf_cuda_bind(perf_cuda *cu, int device);
/* Release the primary context perf_cuda_bind retained. */
void perf_cuda_unbind(perf_cuda *cu);

/* ---- perf_check.c ---- */

/* The row of total_bytes: counts and sizes as the NCCL conventions give. */
perf_shape perf_shape_for(const perf_run *run, size_t total_bytes);
/* The pointers the calls get, out of place or in place. */
perf_buffers perf_buffers_for(const perf_run *run, const perf_shape *s,
                              int in_place);
/* Writes this rank's input and poisons the output (device buffers: through
 * the host copies). 0, or -1 with failure set. */
int perf_prepare_check(const perf_run *run, const perf_shape *s, int in_place,
                       perf_failure *failure);
/* Elements of this rank's output that differ from the reference; -1 with
 * failure set when device results cannot be copied back. */
int64_t perf_count_wrong(const perf_run *run, const perf_shape *s,
                         int in_place, perf_failure *failure);
/* -o mulsum: the scalar rank multiplies its input by (1 or 2). */
double perf_premul_scalar(int rank);
/* -o mulsum: this rank's premul sum op for run->opt->dtype on run->comm. */
xcoll_status perf_premul_create(const perf_run *run, xcoll_op *op);
/* Whether -o all runs op on dtype. */
int perf_op_fits_dtype(xcoll_op op, xcoll_datatype dtype);

/* ---- perf_report.c ---- */

void perf_print_header(const perf_run *run);
void perf_print_row(const perf_run *run, const perf_shape *s,
                    const perf_result *oop, const perf_result *ip);
/* One JSON object per row (JSON Lines) to f. */
void perf_write_json_row(FILE *f, const perf_run *run, const perf_shape *s,
                         const perf_result *oop, const perf_result *ip,
                         int cycle);

#endif
