/*
 * perf_check.c - xcoll-perf's buffers and --check: each collective's shape
 * for a row (from the library's table, xcoll_coll_shape), the pointers of
 * its out-of-place and in-place calls, the inputs each rank writes, and the
 * count of output elements that differ from a reference computed here.
 * Values are small integers, exact in every type; float16 and bfloat16 go
 * through the library's own conversions (kernels/reduce.h).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "perf.h"
#include "fp16.h"

static void store_element(void *buf, size_t i, xcoll_datatype dtype, double v) {
  switch (dtype) {
  case XCOLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case XCOLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case XCOLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case XCOLL_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case XCOLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case XCOLL_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case XCOLL_FLOAT16: ((uint16_t *)buf)[i] = xc_float_to_half((float)v); break;
  case XCOLL_BFLOAT16: ((uint16_t *)buf)[i] = xc_float_to_bfloat16((float)v); break;
  case XCOLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case XCOLL_FLOAT64: ((double *)buf)[i] = v; break;
  default: break;
  }
}

static double load_element(const void *buf, size_t i, xcoll_datatype dtype) {
  switch (dtype) {
  case XCOLL_INT8: return ((const int8_t *)buf)[i];
  case XCOLL_UINT8: return ((const uint8_t *)buf)[i];
  case XCOLL_INT32: return ((const int32_t *)buf)[i];
  case XCOLL_UINT32: return ((const uint32_t *)buf)[i];
  case XCOLL_INT64: return (double)((const int64_t *)buf)[i];
  case XCOLL_UINT64: return (double)((const uint64_t *)buf)[i];
  case XCOLL_FLOAT16: return xc_half_to_float(((const uint16_t *)buf)[i]);
  case XCOLL_BFLOAT16: return xc_bfloat16_to_float(((const uint16_t *)buf)[i]);
  case XCOLL_FLOAT32: return ((const float *)buf)[i];
  case XCOLL_FLOAT64: return ((const double *)buf)[i];
  default: return NAN;
  }
}

/* What a receive buffer holds before the operation, so that an element the
 * collective forgot to write is counted wrong. No input value equals it. */
#define PERF_SENTINEL 99.0

/* Rank's input value at element index i. Sums over up to a few hundred ranks
 * stay exact even in float16 and int8 (values 0..4); for prod exactly one rank
 * contributes 2 per element and the others 1, so products never overflow. */
static int is_bitwise(xcoll_op op) {
  return op == XCOLL_BAND || op == XCOLL_BOR || op == XCOLL_BXOR;
}

static double input_value(int rank, int world_size, size_t i, xcoll_op op) {
  if (op == XCOLL_PROD)
    return ((i + (size_t)rank) % (size_t)world_size) == 0 ? 2.0 : 1.0;
  if (is_bitwise(op)) /* 7 bits: every integer type holds them */
    return (double)((i + 37u * (size_t)rank) % 128u);
  return (double)((i + 3u * (size_t)rank) % 5u);
}

/* The reduction over all ranks of input_value at index i. */
static double reduced_value(int world_size, size_t i, xcoll_op op) {
  double acc = input_value(0, world_size, i, op);
  for (int r = 1; r < world_size; r++) {
    double v = input_value(r, world_size, i, op);
    switch (op) {
    case XCOLL_SUM: case XCOLL_AVG: acc += v; break;
    case XCOLL_PROD: acc *= v; break;
    case XCOLL_MIN: acc = v < acc ? v : acc; break;
    case XCOLL_MAX: acc = v > acc ? v : acc; break;
    case XCOLL_BAND: acc = (double)((int64_t)acc & (int64_t)v); break;
    case XCOLL_BOR: acc = (double)((int64_t)acc | (int64_t)v); break;
    case XCOLL_BXOR: acc = (double)((int64_t)acc ^ (int64_t)v); break;
    default: break;
    }
  }
  if (op == XCOLL_AVG)
    acc /= world_size;
  return acc;
}

double perf_premul_scalar(int rank) { return 1.0 + (double)(rank % 2); }

xcoll_status perf_premul_create(const perf_run *run, xcoll_op *op) {
  uint64_t scalar = 0; /* room for one element of any type */
  store_element(&scalar, 0, run->opt->dtype, perf_premul_scalar(run->rank));
  return xcoll_op_create_premul_sum(op, &scalar, run->opt->dtype,
                                    XCOLL_SCALAR_HOST, run->comm);
}

/* The reduction at index i that this run's calls compute: -o's operator,
 * or under mulsum the sum of each rank's input times its scalar. */
static double reference_reduced(const perf_run *run, size_t i) {
  const perf_options *o = run->opt;
  if (!o->mulsum)
    return reduced_value(run->world_size, i, o->op);
  double acc = 0.0;
  for (int r = 0; r < run->world_size; r++)
    acc += perf_premul_scalar(r) * input_value(r, run->world_size, i, XCOLL_SUM);
  return acc;
}

/* avg divides, so it may round differently from our reference; every other
 * case in this tool is exact. Tolerances are a few units in the last place. */
static int element_matches(double got, double want, xcoll_datatype dtype,
                           xcoll_op op) {
  if (op != XCOLL_AVG)
    return got == want;
  double ulp = dtype == XCOLL_FLOAT16    ? 1e-3
               : dtype == XCOLL_BFLOAT16 ? 8e-3
               : dtype == XCOLL_FLOAT32  ? 1e-6
                                         : 1e-14;
  return fabs(got - want) <= 4.0 * ulp * (fabs(want) > 1.0 ? fabs(want) : 1.0);
}

perf_shape perf_shape_for(const perf_run *run, size_t total_bytes) {
  perf_shape s;
  size_t P = (size_t)run->world_size;
  size_t elems = total_bytes / run->elem_bytes;
  const xcoll_coll_info *info = perf_coll_info(run->opt->coll);
  /* The row's size is the larger buffer: a per-rank count divides it. */
  s.call_count = info->send_per_rank || info->recv_per_rank ? elems / P : elems;
  size_t send = 0, recv = 0, size = 0;
  xcoll_coll_shape(perf_coll_kinds[run->opt->coll], s.call_count, run->world_size,
                   1, &send, &recv, &size);
  if (run->opt->coll == PERF_SENDRECV)
    recv = send; /* the recv half of the pair */
  s.send_elems = send;
  s.recv_elems = recv;
  s.count = size;
  s.bytes = s.count * run->elem_bytes;
  return s;
}


static perf_buffers buffers_at(const perf_run *run, const perf_shape *s,
                               int in_place, char *sendbuf, char *recvbuf) {
  perf_buffers b;
  if (!in_place) {
    b.send = sendbuf;
    b.recv = recvbuf;
  } else if (run->opt->coll == PERF_SENDRECV) {
    b.send = sendbuf; /* no in-place form */
    b.recv = recvbuf;
  } else if (run->opt->coll == PERF_ALLGATHER || run->opt->coll == PERF_GATHER) {
    /* In place: the input is this rank's slot (gather: on the root). */
    b.recv = recvbuf;
    b.send = recvbuf + (size_t)run->rank * s->call_count * run->elem_bytes;
  } else if (run->opt->coll == PERF_REDUCE_SCATTER ||
             run->opt->coll == PERF_SCATTER) {
    b.send = recvbuf;
    b.recv = recvbuf + (size_t)run->rank * s->call_count * run->elem_bytes;
  } else {
    b.send = recvbuf;
    b.recv = recvbuf;
  }
  b.input = b.send;
  b.output = b.recv;
  return b;
}

/* The pointers the calls get. */
perf_buffers perf_buffers_for(const perf_run *run, const perf_shape *s,
                              int in_place) {
  return buffers_at(run, s, in_place, run->sendbuf, run->recvbuf);
}

/* Their host copies, where --check writes inputs and reads results. */
static perf_buffers host_buffers_for(const perf_run *run, const perf_shape *s,
                                     int in_place) {
  return buffers_at(run, s, in_place, run->host_send, run->host_recv);
}

/* Fill this rank's input and poison the part of the output that the
 * operation must write (for in-place operations they overlap: the output
 * slot of an in-place allgather/broadcast/reduce holds the input). */
static void fill_check(const perf_run *run, const perf_shape *s,
                       const perf_buffers *b, int in_place) {
  const perf_options *o = run->opt;
  xcoll_datatype t = o->dtype;
  int gathers = o->coll == PERF_ALLGATHER || o->coll == PERF_GATHER;
  /* In place, a non-root's buffer of broadcast or scatter is output only. */
  int output_only = in_place && (o->coll == PERF_BROADCAST ||
                                 o->coll == PERF_SCATTER) && run->rank != o->root;
  if (!in_place || o->coll == PERF_SENDRECV || gathers || output_only) {
    for (size_t i = 0; i < s->recv_elems; i++)
      store_element(b->output, i, t, PERF_SENTINEL);
  }
  if (output_only)
    return; /* a non-root's in-place input is not read */
  /* Allgather's input is this rank's slot: element j of the input is element
   * rank * call_count + j of the gathered buffer, so value it by that index. */
  size_t offset = gathers ? (size_t)run->rank * s->call_count : 0;
  for (size_t i = 0; i < s->send_elems; i++)
    store_element(b->input, i, t,
                  input_value(run->rank, run->world_size, offset + i, o->op));
}

/* fill_check on the host copies; on device buffers, then copy both to the
 * device (a row's whole span, s->bytes, of each: in place, the input lives
 * in recvbuf). The synchronous copies run on the legacy default stream, so
 * they are ordered with the calls, which use it too. Returns 0 or -1. */
int perf_prepare_check(const perf_run *run, const perf_shape *s, int in_place,
                       perf_failure *failure) {
  perf_buffers host = host_buffers_for(run, s, in_place);
  fill_check(run, s, &host, in_place);
  if (!run->on_device || s->bytes == 0)
    return 0;
  if (run->cuda.htod((unsigned long long)(uintptr_t)run->sendbuf, run->host_send,
                     s->bytes) != 0 ||
      run->cuda.htod((unsigned long long)(uintptr_t)run->recvbuf, run->host_recv,
                     s->bytes) != 0) {
    failure->status = XCOLL_ERR_SYSTEM;
    failure->what = "cuMemcpyHtoD (check inputs)";
    return -1;
  }
  return 0;
}

/* Elements of the output that differ from the reference, on this rank,
 * read from the host copies. The rooted collectives are their unrooted
 * twins seen from the root: reduce is allreduce on the root, gather is
 * allgather on the root, scatter hands each rank its block of the root's
 * input as reduce_scatter hands it its block of the reduction. */
static int64_t count_wrong_host(const perf_run *run, const perf_shape *s,
                                const perf_buffers *b) {
  const perf_options *o = run->opt;
  xcoll_datatype t = o->dtype;
  int P = run->world_size;
  size_t n = s->call_count ? s->call_count : 1;
  size_t block = (size_t)run->rank * s->call_count; /* this rank's block */
  if ((o->coll == PERF_REDUCE || o->coll == PERF_GATHER) &&
      run->rank != o->root)
    return 0; /* only root's buffer is defined */
  int64_t wrong = 0;
  for (size_t i = 0; i < s->recv_elems; i++) {
    double want;
    switch (o->coll) {
    case PERF_ALLREDUCE:
    case PERF_REDUCE:
      want = reference_reduced(run, i);
      break;
    case PERF_ALLGATHER:
    case PERF_GATHER:
      want = input_value((int)(i / n), P, i, o->op);
      break;
    case PERF_REDUCE_SCATTER:
      want = reference_reduced(run, block + i);
      break;
    case PERF_SCATTER:
      want = input_value(o->root, P, block + i, o->op);
      break;
    case PERF_BROADCAST:
      want = input_value(o->root, P, i, o->op);
      break;
    case PERF_ALLTOALL:
      /* Block s of the output is block rank of rank s's input. */
      want = input_value((int)(i / n), P, (size_t)run->rank * n + i % n, o->op);
      break;
    case PERF_SENDRECV:
      want = input_value((run->rank + P - 1) % P, P, i, o->op);
      break;
    default:
      return -1;
    }
    if (!element_matches(load_element(b->output, i, t), want, t, o->op))
      wrong++;
  }
  return wrong;
}

/* count_wrong_host after copying device results back (recvbuf's span).
 * Returns -1 with failure set when the copy fails. */
int64_t perf_count_wrong(const perf_run *run, const perf_shape *s,
                         int in_place, perf_failure *failure) {
  if (run->on_device && s->bytes > 0 &&
      run->cuda.dtoh(run->host_recv, (unsigned long long)(uintptr_t)run->recvbuf,
                     s->bytes) != 0) {
    failure->status = XCOLL_ERR_SYSTEM;
    failure->what = "cuMemcpyDtoH (check results)";
    return -1;
  }
  perf_buffers host = host_buffers_for(run, s, in_place);
  return count_wrong_host(run, s, &host);
}

/* Whether -o all runs op on dtype: the library defines avg for the
 * floating-point types and band, bor, bxor for the integer types. */
int perf_op_fits_dtype(xcoll_op op, xcoll_datatype dtype) {
  int is_float = dtype == XCOLL_FLOAT16 || dtype == XCOLL_BFLOAT16 ||
                 dtype == XCOLL_FLOAT32 || dtype == XCOLL_FLOAT64;
  if (op == XCOLL_AVG)
    return is_float;
  return is_bitwise(op) ? !is_float : 1;
}

