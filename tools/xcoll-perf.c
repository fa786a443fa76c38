/*
 * xcoll-perf - measure the time, algorithm bandwidth and bus bandwidth of one
 * xcoll collective over a range of message sizes, with the command line and
 * the output columns of nccl-tests (all_reduce_perf and friends), so that
 * figures from xcoll and from NCCL can be read side by side.
 *
 * Run one process per rank under a launcher that sets torchrun's variables
 * (tools/xcollrun, torchrun, mpirun): the communicator comes from
 * xcoll_comm_init_env. Only rank 0 prints. This program calls the public API
 * (include/xcoll.h) only; it shares the library's float16/bfloat16
 * conversions (kernels/reduce.h) and its size parser (core/env.h).
 *
 * This file is the measuring loop and main; tools/perf/ holds the command
 * line (perf_options.c), the buffers and --check (perf_check.c), the CUDA
 * driver loader (perf_cuda.c) and the output (perf_report.c).
 *
 * Flags follow nccl-tests' README and src/common.cu (checked against
 * NVIDIA/nccl-tests at commit 01d67614): -z blocking (default 0; 2, each
 * non-blocking call waited for at once, is xcoll's own), -N run
 * cycles, -a how rank times are combined (default 1, the average), -m
 * operations per iteration, -o/-d with "all", -o mulsum (a premul sum), -T
 * timeout, -C cputime, -R and -y accepted as no-ops, -G 0 only, -g/-t
 * accepted with 1 only (one rank per process here); the type column uses
 * nccl-tests' names ("float", "half"). docs/benchmarks.md has the table.
 *
 * Size convention (nccl-tests): the size of a row is the whole buffer in bytes
 * (for allgather the receive buffer, for reduce_scatter the send buffer,
 * for alltoall either, for gather and scatter the root's), so each rank
 * contributes size / world_size bytes to those. The shapes and the busbw
 * factors come from the library's table of collectives (xcoll_coll_shape,
 * xcoll_coll_busbw_factor):
 *   algbw = size / time
 *   busbw = algbw * factor, factor = 2(P-1)/P for allreduce, (P-1)/P for
 *   allgather, reduce_scatter, alltoall, gather and scatter, 1 for
 *   broadcast, reduce and sendrecv (P ranks); see docs/benchmarks.md.
 * sendrecv is nccl-tests' sendrecv_perf: each rank sends size bytes to the
 * next rank and receives as much from the previous, in one group; it has no
 * in-place form, so both halves of its rows use separate buffers.
 *
 * Buffers: a rank whose communicator is bound to a CUDA device (XCOLL_DEVICE,
 * or --gpu-ranks) benchmarks device memory, as nccl-tests always does;
 * other ranks use host memory. Device memory comes from the CUDA driver API,
 * loaded with dlopen("libcuda.so.1") as the library loads it, so the tool
 * builds and runs without the CUDA toolkit. --check fills and reads device
 * buffers through host copies, outside the timed loop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf.h"
#include "xcoll.h"

/* The tool's own small collectives (times, counts): at most 32 bytes. On a
 * GPU rank the values travel through run->scratch, sent from its first 32
 * bytes and received into its last 32. */
static xcoll_status small_collective(perf_run *run, int broadcast,
                                     const void *in, void *out, size_t count,
                                     xcoll_datatype dtype, xcoll_op op) {
  size_t bytes = count * xcoll_datatype_size(dtype);
  const void *send = in;
  void *recv = out;
  if (run->scratch) {
    unsigned long long base = (unsigned long long)(uintptr_t)run->scratch;
    if (run->cuda.htod(base, in, bytes) != 0)
      return XCOLL_ERR_SYSTEM;
    send = run->scratch;
    recv = run->scratch + 32;
  }
  xcoll_status st = broadcast
                        ? xcoll_broadcast(send, recv, count, dtype, 0, run->comm)
                        : xcoll_allreduce(send, recv, count, dtype, op, run->comm);
  if (st == XCOLL_SUCCESS && run->scratch &&
      run->cuda.dtoh(out, (unsigned long long)(uintptr_t)recv, bytes) != 0)
    return XCOLL_ERR_SYSTEM;
  return st;
}

/* Issue one operation; with request non-NULL, its non-blocking form. */
static xcoll_status issue(const perf_run *run, const perf_shape *s,
                          const perf_buffers *b, xcoll_request_t *request) {
  const perf_options *o = run->opt;
  size_t n = s->call_count;
  switch (o->coll) {
  case PERF_ALLREDUCE:
    return request ? xcoll_iallreduce(b->send, b->recv, n, o->dtype, run->op,
                                      run->comm, NULL, request)
                   : xcoll_allreduce(b->send, b->recv, n, o->dtype, run->op, run->comm);
  case PERF_ALLGATHER:
    return request ? xcoll_iallgather(b->send, b->recv, n, o->dtype, run->comm,
                                      NULL, request)
                   : xcoll_allgather(b->send, b->recv, n, o->dtype, run->comm);
  case PERF_REDUCE_SCATTER:
    return request ? xcoll_ireduce_scatter(b->send, b->recv, n, o->dtype, run->op,
                                           run->comm, NULL, request)
                   : xcoll_reduce_scatter(b->send, b->recv, n, o->dtype, run->op,
                                          run->comm);
  case PERF_REDUCE:
    return request ? xcoll_ireduce(b->send, b->recv, n, o->dtype, run->op, o->root,
                                   run->comm, NULL, request)
                   : xcoll_reduce(b->send, b->recv, n, o->dtype, run->op, o->root,
                                  run->comm);
  case PERF_ALLTOALL:
    return request ? xcoll_ialltoall(b->send, b->recv, n, o->dtype, run->comm,
                                     NULL, request)
                   : xcoll_alltoall(b->send, b->recv, n, o->dtype, run->comm);
  case PERF_BROADCAST:
  case PERF_GATHER:
  case PERF_SCATTER: {
    /* Rooted, without an operator: one signature, so one call. */
    typedef xcoll_status (*rooted_fn)(const void *, void *, size_t,
                                      xcoll_datatype, int, xcoll_comm_t);
    typedef xcoll_status (*irooted_fn)(const void *, void *, size_t,
                                       xcoll_datatype, int, xcoll_comm_t,
                                       xcoll_stream_t, xcoll_request_t *);
    rooted_fn call = o->coll == PERF_BROADCAST ? xcoll_broadcast
                     : o->coll == PERF_GATHER  ? xcoll_gather
                                               : xcoll_scatter;
    irooted_fn icall = o->coll == PERF_BROADCAST ? xcoll_ibroadcast
                       : o->coll == PERF_GATHER  ? xcoll_igather
                                                 : xcoll_iscatter;
    return request ? icall(b->send, b->recv, n, o->dtype, o->root, run->comm,
                           NULL, request)
                   : call(b->send, b->recv, n, o->dtype, o->root, run->comm);
  }
  case PERF_SENDRECV: {
    int P = run->world_size;
    xcoll_group_start();
    xcoll_status st = xcoll_send(b->send, n, o->dtype, (run->rank + 1) % P,
                                 run->comm);
    xcoll_status st2 = xcoll_recv(b->recv, n, o->dtype, (run->rank + P - 1) % P,
                                  run->comm);
    xcoll_status end = request ? xcoll_igroup_end(request) : xcoll_group_end();
    return st != XCOLL_SUCCESS ? st : st2 != XCOLL_SUCCESS ? st2 : end;
  }
  default:
    return XCOLL_ERR_INVALID_ARGUMENT;
  }
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Run iterations * agg operations back to back (agg: -m, nccl-tests'
 * aggregation of several operations in one iteration). Non-blocking mode
 * issues all of them first so the library may overlap them, then waits in
 * order, as nccl-tests' -z 0 launches every iteration before it synchronises
 * the stream. *issued_at (may be NULL) gets the time the last call
 * returned, before the waits: what -C reports, as nccl-tests' cputime. */
static xcoll_status run_iterations(perf_run *run, const perf_shape *s,
                                   const perf_buffers *b, int iterations,
                                   int agg, double *issued_at,
                                   perf_failure *failure) {
  iterations *= agg;
  if (run->opt->blocking) {
    /* -z 2: each call non-blocking and waited for at once, as a torch
     * program's work.wait() after an async_op=True call: the latency of
     * one non-blocking call, not the throughput of a backlog (-z 0). */
    const int wait_each = run->opt->blocking == 2;
    for (int it = 0; it < iterations; it++) {
      xcoll_request_t request = NULL;
      xcoll_status st = issue(run, s, b, wait_each ? &request : NULL);
      if (st == XCOLL_SUCCESS && wait_each)
        st = xcoll_wait(request);
      if (st != XCOLL_SUCCESS) {
        failure->status = st;
        failure->what = perf_coll_names[run->opt->coll];
        return st;
      }
    }
    if (issued_at)
      *issued_at = now_seconds();
    return XCOLL_SUCCESS;
  }
  int issued = 0;
  xcoll_status first = XCOLL_SUCCESS;
  for (; issued < iterations; issued++) {
    first = issue(run, s, b, &run->requests[issued]);
    if (first != XCOLL_SUCCESS)
      break;
  }
  if (issued_at)
    *issued_at = now_seconds();
  /* Wait for every issued request even after a failure: each must be
   * released exactly once. */
  for (int it = 0; it < issued; it++) {
    xcoll_status st = xcoll_wait(run->requests[it]);
    if (first == XCOLL_SUCCESS)
      first = st;
  }
  if (first != XCOLL_SUCCESS) {
    failure->status = first;
    failure->what = "xcoll_wait";
  }
  return first;
}

static double bus_factor(perf_coll coll, int world_size) {
  return xcoll_coll_busbw_factor(perf_coll_kinds[coll], world_size);
}

/* Combine this rank's seconds per operation over ranks as -a says:
 * nccl-tests' 0 (rank 0's), 1 (mean), 2 (min), 3 (max). */
static xcoll_status combine_time(perf_run *run, double mine, double *out,
                                 perf_failure *failure) {
  xcoll_status st;
  *out = mine;
  switch (run->opt->average) {
  case 0:
    st = small_collective(run, 1, &mine, out, 1, XCOLL_FLOAT64, XCOLL_SUM);
    break;
  case 2:
    st = small_collective(run, 0, &mine, out, 1, XCOLL_FLOAT64, XCOLL_MIN);
    break;
  case 3:
    st = small_collective(run, 0, &mine, out, 1, XCOLL_FLOAT64, XCOLL_MAX);
    break;
  default:
    st = small_collective(run, 0, &mine, out, 1, XCOLL_FLOAT64, XCOLL_SUM);
    *out /= run->world_size;
    break;
  }
  if (st != XCOLL_SUCCESS) {
    failure->status = st;
    failure->what = "combining times over ranks";
  }
  return st;
}

/* Measure one half-row. */
static xcoll_status measure(perf_run *run, const perf_shape *s, int in_place,
                            perf_result *result, perf_failure *failure) {
  const perf_options *o = run->opt;
  perf_buffers b = perf_buffers_for(run, s, in_place);
  xcoll_status st;

  if (o->check && perf_prepare_check(run, s, in_place, failure) != 0)
    return failure->status;
  if (o->warmup_iters > 0 &&
      (st = run_iterations(run, s, &b, o->warmup_iters, o->agg_iters, NULL,
                           failure)) != XCOLL_SUCCESS)
    return st;
  if ((st = xcoll_barrier(run->comm)) != XCOLL_SUCCESS) {
    failure->status = st;
    failure->what = "xcoll_barrier";
    return st;
  }
  double start = now_seconds(), issued_at = start;
  if ((st = run_iterations(run, s, &b, o->iters, o->agg_iters, &issued_at,
                           failure)) != XCOLL_SUCCESS)
    return st;
  /* -C 1: until the last call returned; else until the last completed */
  double end = o->report_cputime ? issued_at : now_seconds();
  double mean_seconds = (end - start) / ((double)o->iters * o->agg_iters);
  /* Asked now, before the timing and check collectives below run. */
  if ((st = xcoll_comm_last_algorithm(run->comm, &result->algorithm,
                                      &result->protocol)) != XCOLL_SUCCESS) {
    failure->status = st;
    failure->what = "xcoll_comm_last_algorithm";
    return st;
  }

  double seconds = 0.0;
  if ((st = combine_time(run, mean_seconds, &seconds, failure)) != XCOLL_SUCCESS)
    return st;
  result->time_us = seconds * 1e6;
  result->algbw = seconds > 0.0 ? (double)s->bytes / seconds / 1e9 : 0.0;
  result->busbw = result->algbw * bus_factor(o->coll, run->world_size);
  result->wrong = -1;

  if (o->check) {
    /* The timed iterations fed in-place results back as inputs: start again
     * from known data before each checked operation (-c of them). */
    int64_t wrong = 0, total = 0;
    for (int k = 0; k < o->check; k++) {
      if (perf_prepare_check(run, s, in_place, failure) != 0)
        return failure->status;
      if ((st = run_iterations(run, s, &b, 1, 1, NULL, failure)) !=
          XCOLL_SUCCESS)
        return st;
      int64_t row_wrong = perf_count_wrong(run, s, in_place, failure);
      if (row_wrong < 0)
        return failure->status;
      wrong += row_wrong;
    }
    if ((st = small_collective(run, 0, &wrong, &total, 1, XCOLL_INT64,
                               XCOLL_SUM)) != XCOLL_SUCCESS) {
      failure->status = st;
      failure->what = "xcoll_allreduce (check)";
      return st;
    }
    result->wrong = total;
  }
  return XCOLL_SUCCESS;
}

/* ---- sweeps and main ---- */

/* The totals a run reports at its end. */
typedef struct perf_totals {
  double busbw_sum;
  int busbw_rows;
  int64_t wrong;
} perf_totals;

/* sweep's loop over the sizes, with run->op made. */
static xcoll_status sweep_sizes(perf_run *run, FILE *json, int cycle,
                                perf_totals *totals, perf_failure *failure) {
  const perf_options *o = run->opt;
  for (double size = (double)o->min_bytes; size <= (double)o->max_bytes;
       size = o->step_factor > 0 ? size * o->step_factor
                                 : size + (double)o->step_bytes) {
    perf_shape shape = perf_shape_for(run, (size_t)size);
    perf_result oop, ip;
    xcoll_status st;
    if ((st = measure(run, &shape, 0, &oop, failure)) != XCOLL_SUCCESS ||
        (st = measure(run, &shape, 1, &ip, failure)) != XCOLL_SUCCESS)
      return st;
    if (run->rank == 0) {
      perf_print_row(run, &shape, &oop, &ip);
      if (json)
        perf_write_json_row(json, run, &shape, &oop, &ip, cycle);
    }
    totals->busbw_sum += oop.busbw + ip.busbw;
    totals->busbw_rows += 2;
    totals->wrong += (oop.wrong > 0 ? oop.wrong : 0) + (ip.wrong > 0 ? ip.wrong : 0);
    if (size == 0.0 && o->step_factor > 0)
      break; /* -b 0: a zero-byte row, then nothing grows */
  }
  return XCOLL_SUCCESS;
}

/* One sweep over the sizes with run->opt's dtype and op (-o mulsum: this
 * rank's premul op, made for the sweep's dtype): print (rank 0) and total
 * each row. Returns XCOLL_SUCCESS or the failing call's status. */
static xcoll_status sweep(perf_run *run, FILE *json, int cycle,
                          perf_totals *totals, perf_failure *failure) {
  const perf_options *o = run->opt;
  run->elem_bytes = xcoll_datatype_size(o->dtype);
  run->op = o->op;
  int premul = o->mulsum && perf_coll_info(o->coll)->has_op;
  xcoll_status st;
  if (premul && (st = perf_premul_create(run, &run->op)) != XCOLL_SUCCESS) {
    failure->status = st;
    failure->what = "xcoll_op_create_premul_sum (-o mulsum)";
    return st;
  }
  st = sweep_sizes(run, json, cycle, totals, failure);
  if (premul)
    (void)xcoll_op_destroy(run->op, run->comm);
  run->op = o->op;
  return st;
}

/* Every sweep the command line asks for: -N cycles, each over -d types and
 * -o operations (nccl-tests' order: type outside, operation inside). */
static xcoll_status run_all(perf_run *run, const perf_options *opt, FILE *json,
                            perf_totals *totals, perf_failure *failure) {
  /* nccl-tests' order of operations; "all" runs each. */
  static const xcoll_op all_ops[] = {XCOLL_SUM,  XCOLL_PROD, XCOLL_MAX,
                                     XCOLL_MIN,  XCOLL_AVG,  XCOLL_BAND,
                                     XCOLL_BOR,  XCOLL_BXOR};
  int has_op = perf_coll_info(opt->coll)->has_op;
  int ntypes = opt->all_dtypes ? XCOLL_NUM_DATATYPES : 1;
  int nops = opt->all_ops && has_op ? (int)(sizeof all_ops / sizeof all_ops[0]) : 1;
  perf_options current = *opt;
  run->opt = &current;
  for (int cycle = 0; opt->run_cycles == 0 || cycle < opt->run_cycles; cycle++) {
    for (int t = 0; t < ntypes; t++) {
      if (opt->all_dtypes)
        current.dtype = (xcoll_datatype)t;
      for (int k = 0; k < nops; k++) {
        if (opt->all_ops && has_op) {
          current.op = all_ops[k];
          if (!perf_op_fits_dtype(current.op, current.dtype))
            continue; /* avg on integers, bitwise ops on floats */
        }
        xcoll_status st = sweep(run, json, cycle, totals, failure);
        if (st != XCOLL_SUCCESS) {
          run->opt = opt;
          return st;
        }
      }
    }
  }
  run->opt = opt;
  return XCOLL_SUCCESS;
}

/* A failed call: its message once, so not when the library's WARN line
 * showed it already. */
static int fail(xcoll_comm_t comm, int rank, const perf_failure *failure) {
  if (!xcoll_comm_last_error_logged(comm))
    fprintf(stderr, "xcoll-perf: rank %d: %s failed: %s: %s\n", rank,
            failure->what, xcoll_strerror(failure->status),
            xcoll_comm_last_error(comm));
  return 1;
}

/* The environment the communicator reads at init: -T sets XCOLL_TIMEOUT_S,
 * --gpu-ranks XCOLL_DEVICE. Returns 0, or the exit code after a message. */
static int set_environment(perf_run *run) {
  const perf_options *opt = run->opt;
  /* -T: nccl-tests gives up on a collective after this many seconds; the
   * library's XCOLL_TIMEOUT_S is that bound for every wait. The command line
   * wins over the environment. */
  if (opt->timeout_s > 0) {
    char seconds[32];
    snprintf(seconds, sizeof seconds, "%d", opt->timeout_s);
    if (setenv("XCOLL_TIMEOUT_S", seconds, 1) != 0) {
      fprintf(stderr, "xcoll-perf: cannot set XCOLL_TIMEOUT_S for -T: %s\n",
              strerror(errno));
      return 1;
    }
  }
  /* --gpu-ranks: bind this rank (RANK, from the launcher) before the
   * communicator reads XCOLL_DEVICE, to CUDA device LOCAL_RANK % devices, as
   * one GPU per local rank would be placed, sharing when there are fewer. */
  if (opt->gpu_ranks) {
    const char *rank_text = getenv("RANK");
    const char *local_text = getenv("LOCAL_RANK");
    int rank = rank_text ? atoi(rank_text) : 0;
    int local_rank = local_text ? atoi(local_text) : 0;
    char device_text[32] = "host";
    if (perf_rank_listed(opt->gpu_ranks, rank) == 1) {
      int devices = 0;
      if (perf_cuda_load(&run->cuda) != 0 ||
          run->cuda.device_get_count(&devices) != 0 || devices <= 0) {
        fprintf(stderr, "xcoll-perf: rank %d: --gpu-ranks lists it, but no CUDA "
                "device was found\n", rank);
        return 1;
      }
      snprintf(device_text, sizeof device_text, "cuda:%d", local_rank % devices);
    }
    if (setenv("XCOLL_DEVICE", device_text, 1) != 0) {
      fprintf(stderr, "xcoll-perf: cannot set XCOLL_DEVICE: %s\n", strerror(errno));
      return 1;
    }
  }
  return 0;
}

/* After init: rank, size and device; --root against the world size; on a
 * GPU rank its context and scratch memory; then, over all ranks, how many
 * are GPU ranks, have device buffers, and reach the next rank by which
 * transport. Returns 0, or the exit code after a message. */
static int setup_comm(perf_run *run) {
  const perf_options *opt = run->opt;
  perf_failure failure = {XCOLL_SUCCESS, "xcoll_comm_rank/size/device"};
  xcoll_status st;
  if ((st = xcoll_comm_rank(run->comm, &run->rank)) != XCOLL_SUCCESS ||
      (st = xcoll_comm_size(run->comm, &run->world_size)) != XCOLL_SUCCESS ||
      (st = xcoll_comm_device(run->comm, &run->device)) != XCOLL_SUCCESS) {
    failure.status = st;
    return fail(run->comm, run->rank, &failure);
  }
  if (perf_coll_info(opt->coll)->has_root && opt->root >= run->world_size) {
    if (run->rank == 0)
      fprintf(stderr, "xcoll-perf: --root %d is outside [0, %d): pass a rank "
              "below the world size\n", opt->root, run->world_size);
    return 2;
  }

  int is_gpu_rank = run->device != XCOLL_DEVICE_HOST;
  run->on_device = opt->device_buffers < 0 ? is_gpu_rank : opt->device_buffers;
  if (run->on_device && !is_gpu_rank) {
    /* Every rank checks alone; the bad one tells, and all return 2 after
     * the count below, in step. */
    fprintf(stderr, "xcoll-perf: rank %d: --device-buffers 1 on a host rank: "
            "bind it to a CUDA device (XCOLL_DEVICE=cuda, --gpu-ranks)\n",
            run->rank);
  }
  /* A GPU rank loads the driver and makes its device's context current:
   * its small collectives go through device memory, whatever the buffers. */
  if (is_gpu_rank) {
    unsigned long long scratch = 0;
    if (perf_cuda_load(&run->cuda) != 0 ||
        perf_cuda_bind(&run->cuda, run->device) != 0 ||
        run->cuda.mem_alloc(&scratch, 64) != 0) {
      fprintf(stderr, "xcoll-perf: rank %d: cannot allocate device memory on "
              "CUDA device %d\n", run->rank, run->device);
      return 1;
    }
    run->scratch = (char *)(uintptr_t)scratch;
  }
  const char *send = "none", *recv = "none";
  (void)xcoll_comm_transport(run->comm, &send, &recv);
  int32_t flags[6] = {is_gpu_rank, run->on_device,
                      run->on_device && !is_gpu_rank,
                      strcmp(send, "SHM") == 0, strcmp(send, "NET") == 0,
                      strcmp(send, "P2P") == 0};
  int32_t totals[6] = {0, 0, 0, 0, 0, 0};
  if ((st = small_collective(run, 0, flags, totals, 6, XCOLL_INT32,
                             XCOLL_SUM)) != XCOLL_SUCCESS) {
    failure.status = st;
    failure.what = "counting GPU ranks";
    return fail(run->comm, run->rank, &failure);
  }
  run->gpu_ranks = totals[0];
  run->device_buffer_ranks = totals[1];
  run->shm_send_ranks = totals[3];
  run->net_send_ranks = totals[4];
  run->p2p_send_ranks = totals[5];
  return totals[2] > 0 ? 2 : 0;
}

/* The two buffers of --maxbytes, their host copies and the request slots.
 * Returns 0, or the exit code after a message. */
static int setup_buffers(perf_run *run) {
  const perf_options *opt = run->opt;
  /* Round the buffer up to a whole cache line so aligned_alloc accepts it. */
  size_t buffer_bytes = (opt->max_bytes + 63u) / 64u * 64u;
  if (buffer_bytes == 0)
    buffer_bytes = 64;
  run->host_send = aligned_alloc(64, buffer_bytes);
  run->host_recv = aligned_alloc(64, buffer_bytes);
  size_t max_requests =
      (size_t)(opt->iters > opt->warmup_iters ? opt->iters : opt->warmup_iters) *
      (size_t)opt->agg_iters;
  run->requests = calloc(max_requests, sizeof *run->requests);
  if (!run->host_send || !run->host_recv || !run->requests) {
    fprintf(stderr, "xcoll-perf: rank %d: cannot allocate 2 x %zu bytes of "
            "buffers: lower --maxbytes\n", run->rank, buffer_bytes);
    return 1;
  }
  /* Touch every page now, so first-touch faults do not land in a timing. */
  memset(run->host_send, 0, buffer_bytes);
  memset(run->host_recv, 0, buffer_bytes);
  run->sendbuf = run->host_send;
  run->recvbuf = run->host_recv;
  if (run->on_device) {
    unsigned long long send = 0, recv = 0;
    int rc = run->cuda.mem_alloc(&send, buffer_bytes);
    if (rc == 0)
      run->sendbuf = (char *)(uintptr_t)send;
    if (rc == 0 && (rc = run->cuda.mem_alloc(&recv, buffer_bytes)) == 0)
      run->recvbuf = (char *)(uintptr_t)recv;
    /* Defined contents, so an unchecked run never reduces garbage (NaNs
     * can be slower on some paths). */
    if (rc == 0 && (rc = run->cuda.htod(send, run->host_send, buffer_bytes)) == 0)
      rc = run->cuda.htod(recv, run->host_recv, buffer_bytes);
    if (rc != 0) {
      fprintf(stderr, "xcoll-perf: rank %d: cannot allocate or clear 2 x %zu "
              "bytes of device memory on CUDA device %d (CUresult %d): lower "
              "--maxbytes\n", run->rank, buffer_bytes, run->device, rc);
      return 1;
    }
  }
  return 0;
}

/* The header, every sweep, and the totals (rank 0 prints). Returns the exit
 * code: 1 after a failed call or a wrong element, else 0. */
static int benchmark(perf_run *run) {
  const perf_options *opt = run->opt;
  int exit_code = 0;
  FILE *json = NULL;
  if (run->rank == 0 && opt->json_path) {
    json = fopen(opt->json_path, "w");
    if (!json) {
      fprintf(stderr, "xcoll-perf: cannot open --json file %s: %s\n",
              opt->json_path, strerror(errno));
      /* Keep going in step with the other ranks; the text output is whole. */
      exit_code = 1;
    }
  }
  if (run->rank == 0)
    perf_print_header(run);

  perf_totals totals = {0.0, 0, 0};
  perf_failure failure = {XCOLL_SUCCESS, ""};
  if (run_all(run, opt, json, &totals, &failure) != XCOLL_SUCCESS) {
    exit_code = fail(run->comm, run->rank, &failure);
  } else {
    if (run->rank == 0) {
      if (opt->check)
        printf("# Out of bounds values : %" PRId64 " %s\n", totals.wrong,
               totals.wrong ? "FAILED" : "OK");
      printf("# Avg bus bandwidth : %g\n",
             totals.busbw_rows ? totals.busbw_sum / totals.busbw_rows : 0.0);
    }
    if (totals.wrong > 0)
      exit_code = 1;
  }
  if (json)
    fclose(json);
  return exit_code;
}

/* Destroy the communicator, then free what the run holds. Returns the exit
 * code, 1 when it was 0 and the destroy failed. */
static int teardown(perf_run *run, int exit_code) {
  free(run->requests);
  /* Destroy first: after a failure a kernel of the communicator may still
   * use the device buffers until the communicator is torn down. */
  xcoll_status st = xcoll_comm_destroy(run->comm);
  if (st != XCOLL_SUCCESS && exit_code == 0) {
    fprintf(stderr, "xcoll-perf: rank %d: xcoll_comm_destroy failed: %s\n",
            run->rank, xcoll_strerror(st));
    exit_code = 1;
  }
  if (run->on_device) {
    if (run->sendbuf && run->sendbuf != run->host_send)
      run->cuda.mem_free((unsigned long long)(uintptr_t)run->sendbuf);
    if (run->recvbuf && run->recvbuf != run->host_recv)
      run->cuda.mem_free((unsigned long long)(uintptr_t)run->recvbuf);
  }
  if (run->scratch)
    run->cuda.mem_free((unsigned long long)(uintptr_t)run->scratch);
  perf_cuda_unbind(&run->cuda);
  free(run->host_send);
  free(run->host_recv);
  return exit_code;
}

int main(int argc, char **argv) {
  perf_options opt;
  /* Rows reach a launcher's pipe as they are measured, and are not lost
   * with a buffer if a rank dies. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int parsed = perf_parse_options(argc, argv, &opt);
  if (parsed != 0)
    return parsed == 1 ? 0 : 2;

  perf_run run;
  memset(&run, 0, sizeof run);
  run.opt = &opt;
  run.cuda.bound_device = -1;
  run.elem_bytes = xcoll_datatype_size(opt.dtype);
  run.op = opt.op;
  int exit_code = set_environment(&run);
  if (exit_code != 0)
    return exit_code;
  xcoll_status st = xcoll_comm_init_env(&run.comm);
  if (st != XCOLL_SUCCESS) {
    if (!xcoll_comm_last_error_logged(NULL))
      fprintf(stderr, "xcoll-perf: xcoll_comm_init_env failed: %s: %s\n",
              xcoll_strerror(st), xcoll_last_error());
    return 1;
  }
  exit_code = setup_comm(&run);
  if (exit_code == 0)
    exit_code = setup_buffers(&run);
  if (exit_code == 0)
    exit_code = benchmark(&run);
  return teardown(&run, exit_code);
}
