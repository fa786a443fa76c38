/*
 * xcoll-perf - measure the time, algorithm bandwidth and bus bandwidth of one
 * xcoll collective over a range of message sizes, with the command line and
 * the output columns of nccl-tests (all_reduce_perf and friends), so that
 * figures from xcoll and from NCCL can be read side by side.
 *
 * Run one process per rank under a launcher that sets torchrun's variables
 * (tools/xcollrun, torchrun, mpirun): the communicator comes from
 * xcoll_comm_init_env. Only rank 0 prints. This program uses the public API
 * (include/xcoll.h) and nothing else of the library.
 *
 * Flags follow nccl-tests' README and src/common.cu (checked against
 * NVIDIA/nccl-tests at commit 01d67614): -z blocking (default 0), -N run
 * cycles, -a how rank times are combined (default 1, the average), -m
 * operations per iteration, -o/-d with "all", -T timeout, -g/-t accepted
 * with 1 only (one rank per process here). docs/benchmarks.md has the table.
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
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static const char *const coll_names[PERF_NUM_COLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
    "alltoall",  "gather",    "scatter",        "sendrecv"};

/* The library's row for each (sendrecv: a send, whose shape and busbw
 * factor it has). */
static const xcoll_coll_kind coll_kinds[PERF_NUM_COLLS] = {
    XCOLL_COLL_ALLREDUCE, XCOLL_COLL_ALLGATHER, XCOLL_COLL_REDUCE_SCATTER,
    XCOLL_COLL_BROADCAST, XCOLL_COLL_REDUCE,    XCOLL_COLL_ALLTOALL,
    XCOLL_COLL_GATHER,    XCOLL_COLL_SCATTER,   XCOLL_COLL_SEND};

static const xcoll_coll_info *coll_info(perf_coll coll) {
  return xcoll_coll_info_of(coll_kinds[coll]);
}

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
  xcoll_op op;
  int all_dtypes; /* -d all */
  int all_ops;    /* -o all */
  int check;      /* -c: checked operations per row and half; 0 = none */
  int root;
  perf_coll coll;
  int blocking;
  const char *json_path;
  int device_buffers;    /* --device-buffers: -1 auto, 0 host, 1 device */
  const char *gpu_ranks; /* --gpu-ranks LIST; NULL: XCOLL_DEVICE decides */
} perf_options;

static const char *const average_names[4] = {"rank0", "avg", "min", "max"};

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

static void usage(FILE *out, const char *argv0) {
  fprintf(out,
          "usage: %s [options]   (flags as nccl-tests' all_reduce_perf has them)\n"
          "  -b, --minbytes SIZE      smallest message, bytes, K/M/G suffix (default 32M)\n"
          "  -e, --maxbytes SIZE      largest message (default 32M)\n"
          "  -f, --stepfactor F       multiply the size by F between rows (default 2)\n"
          "  -i, --stepbytes SIZE     add SIZE between rows instead of -f\n"
          "  -n, --iters N            timed iterations per size (default 20)\n"
          "  -w, --warmup_iters N     untimed iterations per size (default 5)\n"
          "  -m, --agg_iters N        operations per timed iteration (default 1)\n"
          "  -N, --run_cycles N       run and print the sweep N times, 0: until\n"
          "                           interrupted (default 1)\n"
          "  -a, --average 0|1|2|3    time reported: 0 rank 0's, 1 mean over ranks,\n"
          "                           2 min, 3 max (default 1)\n"
          "  -d, --datatype TYPE|all  int8 uint8 int32 uint32 int64 uint64 float16\n"
          "                           bfloat16 float32 float64 (nccl-tests names such as\n"
          "                           float, half, double, int also work; default float32)\n"
          "  -o, --op OP|all          reduction: sum prod min max avg band bor bxor\n"
          "                           (default sum; all: each one the type allows);\n"
          "                           a collective name here is taken as --coll\n"
          "      --coll NAME          allreduce allgather reduce_scatter broadcast reduce\n"
          "                           alltoall gather scatter sendrecv\n"
          "                           (default allreduce; --collective is the same)\n"
          "  -c, --check N            check N operations per row against a local\n"
          "                           reference, 0: no check (default 1)\n"
          "  -r, --root R             root of broadcast and reduce (default 0)\n"
          "  -z, --blocking 0|1       1: blocking calls; 0: issue all iterations as\n"
          "                           non-blocking calls, then wait (default 0)\n"
          "  -T, --timeout S          seconds a wait may last (sets XCOLL_TIMEOUT_S);\n"
          "                           0: the library's default (default 0)\n"
          "  -g, --ngpus 1            -t, --nthreads 1   -p, --parallel_init 0|1\n"
          "                           accepted for nccl-tests command lines: one rank\n"
          "                           per process, so only these values\n"
          "  -J, --json FILE          also write one JSON object per row to FILE (rank 0)\n"
          "      --device-buffers auto|0|1\n"
          "                           1: buffers in CUDA device memory (cuMemAlloc), as\n"
          "                           nccl-tests always has them; 0: host memory; auto:\n"
          "                           device memory on ranks bound to a CUDA device\n"
          "                           (XCOLL_DEVICE, --gpu-ranks), host memory on the\n"
          "                           others (default auto). 1 needs a GPU rank.\n"
          "      --gpu-ranks LIST     ranks bound to CUDA device LOCAL_RANK %% devices,\n"
          "                           the others host ranks: comma-separated ranks, all\n"
          "                           or none; overrides XCOLL_DEVICE (a mixed ring on\n"
          "                           nccl_like: --gpu-ranks 0)\n"
          "  -h, --help               this text\n"
          "      --version            print the version and exit\n"
          "Run one process per rank with torchrun-style variables, e.g.\n"
          "  xcollrun --nproc-per-node 4 --master-port 0 %s -b 8 -e 64M -f 2\n"
          "GPU ranks on device buffers (nccl_like runs the CUDA ring kernel):\n"
          "  XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda xcollrun --nproc-per-node 2 \\\n"
          "    --master-port 0 %s -b 8 -e 256M -f 2\n"
          "(nccl-tests' -G is its CUDA-graph flag, so device buffers have no short\n"
          "flag here.)\n",
          argv0, argv0, argv0);
}

/* ---- parsing ---- */

/* Bytes with an optional K/M/G suffix (powers of 1024), like nccl-tests. */
static int parse_size(const char *text, size_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-')
    return -1;
  unsigned long long scale = 1;
  switch (*end) {
  case '\0': break;
  case 'k': case 'K': scale = 1ull << 10; end++; break;
  case 'm': case 'M': scale = 1ull << 20; end++; break;
  case 'g': case 'G': scale = 1ull << 30; end++; break;
  default: return -1;
  }
  if (*end == 'B' || *end == 'b')
    end++;
  if (*end != '\0' || value > SIZE_MAX / scale)
    return -1;
  *out = (size_t)(value * scale);
  return 0;
}

static int parse_int(const char *text, long min, long max, int *out) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max)
    return -1;
  *out = (int)value;
  return 0;
}

static int parse_dtype(const char *text, xcoll_datatype *out) {
  static const struct {
    const char *alias;
    xcoll_datatype dtype;
  } aliases[] = {{"char", XCOLL_INT8},     {"int", XCOLL_INT32},
                 {"half", XCOLL_FLOAT16},  {"float", XCOLL_FLOAT32},
                 {"double", XCOLL_FLOAT64}, {"bf16", XCOLL_BFLOAT16},
                 {"fp16", XCOLL_FLOAT16},  {"fp32", XCOLL_FLOAT32},
                 {"fp64", XCOLL_FLOAT64}};
  for (int t = 0; t < XCOLL_NUM_DATATYPES; t++) {
    if (strcmp(text, xcoll_datatype_name((xcoll_datatype)t)) == 0) {
      *out = (xcoll_datatype)t;
      return 0;
    }
  }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    if (strcmp(text, aliases[i].alias) == 0) {
      *out = aliases[i].dtype;
      return 0;
    }
  }
  return -1;
}

static int parse_redop(const char *text, xcoll_op *out) {
  for (int o = 0; o < XCOLL_NUM_OPS; o++) {
    if (strcmp(text, xcoll_op_name((xcoll_op)o)) == 0) {
      *out = (xcoll_op)o;
      return 0;
    }
  }
  return -1;
}

static int parse_coll(const char *text, perf_coll *out) {
  /* nccl-tests' binary names (all_reduce, reduce_scatter...) also work. */
  static const struct {
    const char *alias;
    perf_coll coll;
  } aliases[] = {{"all_reduce", PERF_ALLREDUCE},
                 {"all_gather", PERF_ALLGATHER},
                 {"reducescatter", PERF_REDUCE_SCATTER},
                 {"bcast", PERF_BROADCAST},
                 {"alltoall_perf", PERF_ALLTOALL},
                 {"all_to_all", PERF_ALLTOALL}};
  for (int c = 0; c < PERF_NUM_COLLS; c++) {
    if (strcmp(text, coll_names[c]) == 0) {
      *out = (perf_coll)c;
      return 0;
    }
  }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    if (strcmp(text, aliases[i].alias) == 0) {
      *out = aliases[i].coll;
      return 0;
    }
  }
  return -1;
}

/* -g and -t: nccl-tests runs several GPUs per process (threads, devices);
 * xcoll-perf runs one rank per process, so only 1 is meaningful. */
static int reject_multi(const char *flag, const char *text) {
  fprintf(stderr,
          "xcoll-perf: %s %s: xcoll-perf runs one rank per process (one GPU or "
          "the host each), so %s accepts only 1; for N ranks start N "
          "processes, e.g. xcollrun --nproc-per-node N xcoll-perf ...\n",
          flag, text, flag);
  return 2;
}

/* --gpu-ranks: 1 if rank is in LIST ("all", "none" or comma-separated
 * ranks), 0 if not, -1 if LIST is malformed. */
static int rank_listed(const char *list, int rank) {
  if (strcmp(list, "all") == 0)
    return 1;
  if (strcmp(list, "none") == 0)
    return 0;
  int found = 0;
  const char *p = list;
  for (;;) {
    char *end = NULL;
    errno = 0;
    long value = strtol(p, &end, 10);
    if (errno != 0 || end == p || value < 0 || value > (1L << 30) ||
        (*end != ',' && *end != '\0'))
      return -1;
    if (value == rank)
      found = 1;
    if (*end == '\0')
      return found;
    p = end + 1;
  }
}

/* Returns 0 to run, 1 after --help or --version, 2 on a bad command line (message printed). */
static int parse_options(int argc, char **argv, perf_options *opt) {
  enum { OPT_COLL = 1000, OPT_VERSION, OPT_DEVICE_BUFFERS, OPT_GPU_RANKS };
  static const struct option long_options[] = {
      {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'},
      {"stepbytes", required_argument, NULL, 'i'},
      {"iters", required_argument, NULL, 'n'},
      {"warmup_iters", required_argument, NULL, 'w'},
      {"agg_iters", required_argument, NULL, 'm'},
      {"run_cycles", required_argument, NULL, 'N'},
      {"average", required_argument, NULL, 'a'},
      {"datatype", required_argument, NULL, 'd'},
      {"op", required_argument, NULL, 'o'},
      {"check", required_argument, NULL, 'c'},
      {"root", required_argument, NULL, 'r'},
      {"blocking", required_argument, NULL, 'z'},
      {"timeout", required_argument, NULL, 'T'},
      {"ngpus", required_argument, NULL, 'g'},
      {"nthreads", required_argument, NULL, 't'},
      {"parallel_init", required_argument, NULL, 'p'},
      {"json", required_argument, NULL, 'J'},
      {"coll", required_argument, NULL, OPT_COLL},
      {"collective", required_argument, NULL, OPT_COLL},
      {"op-kind", required_argument, NULL, OPT_COLL},
      {"device-buffers", required_argument, NULL, OPT_DEVICE_BUFFERS},
      {"gpu-ranks", required_argument, NULL, OPT_GPU_RANKS},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},
      {NULL, 0, NULL, 0}};
  const char *argv0 = argv[0];
  memset(opt, 0, sizeof *opt);
  opt->min_bytes = 32u << 20;
  opt->max_bytes = 32u << 20;
  opt->step_factor = 2.0;
  opt->step_bytes = 0;
  opt->iters = 20;
  opt->warmup_iters = 5;
  opt->agg_iters = 1;
  opt->run_cycles = 1;
  opt->average = 1;
  opt->timeout_s = 0;
  opt->dtype = XCOLL_FLOAT32;
  opt->op = XCOLL_SUM;
  opt->check = 1;
  opt->root = 0;
  opt->coll = PERF_ALLREDUCE;
  opt->blocking = 0;
  opt->json_path = NULL;
  opt->device_buffers = -1;
  opt->gpu_ranks = NULL;

  int c;
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:m:N:a:d:o:c:r:z:T:g:t:p:J:h",
                          long_options, NULL)) != -1) {
    int bad = 0, single = 0;
    switch (c) {
    case 'b': bad = parse_size(optarg, &opt->min_bytes); break;
    case 'e': bad = parse_size(optarg, &opt->max_bytes); break;
    case 'f': {
      char *end = NULL;
      opt->step_factor = strtod(optarg, &end);
      bad = end == optarg || *end != '\0' || !(opt->step_factor > 1.0) ||
            !isfinite(opt->step_factor);
      opt->step_bytes = 0;
      break;
    }
    case 'i':
      bad = parse_size(optarg, &opt->step_bytes) || opt->step_bytes == 0;
      opt->step_factor = 0.0;
      break;
    case 'n': bad = parse_int(optarg, 1, 1000000000L, &opt->iters); break;
    case 'w': bad = parse_int(optarg, 0, 1000000000L, &opt->warmup_iters); break;
    case 'm': bad = parse_int(optarg, 1, 1000000L, &opt->agg_iters); break;
    case 'N': bad = parse_int(optarg, 0, 1000000000L, &opt->run_cycles); break;
    case 'a': bad = parse_int(optarg, 0, 3, &opt->average); break;
    case 'd':
      if (strcmp(optarg, "all") == 0)
        opt->all_dtypes = 1;
      else
        bad = parse_dtype(optarg, &opt->dtype);
      break;
    case 'o':
      /* One flag, two meanings: a reduction (nccl-tests), or the collective
       * (older xcoll-perf command lines). The names do not overlap except
       * "reduce", which is the collective: no reduction operator is called
       * that. */
      if (strcmp(optarg, "all") == 0)
        opt->all_ops = 1;
      else if (parse_redop(optarg, &opt->op) != 0)
        bad = parse_coll(optarg, &opt->coll);
      break;
    case 'c': bad = parse_int(optarg, 0, 1000000L, &opt->check); break;
    case 'r': bad = parse_int(optarg, 0, 1 << 30, &opt->root); break;
    case 'z': bad = parse_int(optarg, 0, 1, &opt->blocking); break;
    case 'T': bad = parse_int(optarg, 0, 10000000L, &opt->timeout_s); break;
    case 'g':
    case 't':
      if (parse_int(optarg, 1, 1, &single) != 0)
        return reject_multi(c == 'g' ? "-g/--ngpus" : "-t/--nthreads", optarg);
      break;
    case 'p': bad = parse_int(optarg, 0, 1, &single); break;
    case 'J': opt->json_path = optarg; break;
    case OPT_COLL: bad = parse_coll(optarg, &opt->coll); break;
    case OPT_DEVICE_BUFFERS:
      if (strcmp(optarg, "auto") == 0)
        opt->device_buffers = -1;
      else
        bad = parse_int(optarg, 0, 1, &opt->device_buffers);
      break;
    case OPT_GPU_RANKS:
      opt->gpu_ranks = optarg;
      bad = rank_listed(optarg, 0) < 0;
      break;
    case 'h': usage(stdout, argv0); return 1;
    case OPT_VERSION:
      printf("xcoll-perf (xcoll) %s\n", XCOLL_PROJECT_VERSION);
      return 1;
    default: usage(stderr, argv0); return 2;
    }
    if (bad) {
      char name[3] = {'-', (char)c, '\0'};
      fprintf(stderr, "xcoll-perf: bad value '%s' for option %s\n", optarg,
              c == OPT_COLL             ? "--coll"
              : c == OPT_DEVICE_BUFFERS ? "--device-buffers"
              : c == OPT_GPU_RANKS      ? "--gpu-ranks"
                                        : name);
      usage(stderr, argv0);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "xcoll-perf: unexpected argument '%s'\n", argv[optind]);
    usage(stderr, argv0);
    return 2;
  }
  if (opt->min_bytes > opt->max_bytes) {
    fprintf(stderr, "xcoll-perf: --minbytes (%zu) is larger than --maxbytes (%zu)\n",
            opt->min_bytes, opt->max_bytes);
    usage(stderr, argv0);
    return 2;
  }
  if ((size_t)(opt->iters > opt->warmup_iters ? opt->iters : opt->warmup_iters) >
      (size_t)100000000 / (size_t)opt->agg_iters) {
    fprintf(stderr, "xcoll-perf: --iters (or --warmup_iters) times --agg_iters "
            "exceeds 1e8 operations per row: lower one of them\n");
    return 2;
  }
  return 0;
}

/* ---- element access: values are small integers, exact in every type ---- */

/* float <-> binary16 with round-to-nearest-even; written here because this
 * tool only uses the public header. Inputs are small integers and 99, all
 * exactly representable, but the rounding is right for any finite float. */
static uint16_t float_to_half(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) /* inf or NaN */
    return (uint16_t)(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  if (magnitude >= 0x477ff000u) /* rounds to >= 65520: overflow */
    return (uint16_t)(sign | 0x7c00u);
  if (magnitude < 0x38800000u) { /* subnormal half (or zero) */
    float scaled = fabsf(value) * 16777216.0f; /* 2^24: units of 2^-24 */
    return (uint16_t)(sign | (uint16_t)nearbyintf(scaled));
  }
  uint32_t mantissa = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return (uint16_t)(sign | ((mantissa - 0x38000000u) >> 13));
}

static float half_to_float(uint16_t half) {
  uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  float magnitude;
  if (exponent == 0)
    magnitude = ldexpf((float)mantissa, -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = ldexpf((float)(mantissa | 0x400u), (int)exponent - 25);
  uint32_t bits;
  memcpy(&bits, &magnitude, sizeof bits);
  bits |= sign;
  memcpy(&magnitude, &bits, sizeof bits);
  return magnitude;
}

static uint16_t float_to_bfloat16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static float bfloat16_to_float(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static void store_element(void *buf, size_t i, xcoll_datatype dtype, double v) {
  switch (dtype) {
  case XCOLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case XCOLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case XCOLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case XCOLL_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case XCOLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case XCOLL_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case XCOLL_FLOAT16: ((uint16_t *)buf)[i] = float_to_half((float)v); break;
  case XCOLL_BFLOAT16: ((uint16_t *)buf)[i] = float_to_bfloat16((float)v); break;
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
  case XCOLL_FLOAT16: return half_to_float(((const uint16_t *)buf)[i]);
  case XCOLL_BFLOAT16: return bfloat16_to_float(((const uint16_t *)buf)[i]);
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

/* ---- device memory: the CUDA driver API through dlopen ---- */

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

/* cuda.h maps most names to a _v2 entry point (cuMemAlloc -> cuMemAlloc_v2):
 * take the _v2 symbol where there is one, as core/cuda.c does. */
static void *cuda_symbol(void *handle, const char *name) {
  char versioned[64];
  snprintf(versioned, sizeof versioned, "%s_v2", name);
  void *sym = dlsym(handle, versioned);
  return sym ? sym : dlsym(handle, name);
}

/* Load libcuda.so.1 once and cuInit it. Returns 0, or -1 with a message. */
static int cuda_load(perf_cuda *cu) {
  if (cu->handle)
    return 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "xcoll-perf: device buffers need the CUDA driver: dlopen "
            "libcuda.so.1: %s\n", dlerror());
    return -1;
  }
  void *sym[9] = {cuda_symbol(h, "cuInit"), cuda_symbol(h, "cuDeviceGetCount"),
                  cuda_symbol(h, "cuDeviceGet"),
                  cuda_symbol(h, "cuDevicePrimaryCtxRetain"),
                  cuda_symbol(h, "cuCtxSetCurrent"), cuda_symbol(h, "cuMemAlloc"),
                  cuda_symbol(h, "cuMemFree"), cuda_symbol(h, "cuMemcpyHtoD"),
                  cuda_symbol(h, "cuMemcpyDtoH")};
  /* The stand-in driver has no cuCtxSetCurrent: its allocations and
   * synchronous copies need no context. It is told by its counters. */
  cu->stand_in = dlsym(h, "fake_cuda_ctx_depth") != NULL;
  for (int i = 0; i < 9; i++) {
    if (!sym[i] && !(i == 4 && cu->stand_in)) {
      fprintf(stderr, "xcoll-perf: libcuda.so.1 lacks entry point %d of "
              "cuInit, cuDeviceGetCount, cuDeviceGet, cuDevicePrimaryCtxRetain, "
              "cuCtxSetCurrent, cuMemAlloc, cuMemFree, cuMemcpyHtoD, "
              "cuMemcpyDtoH\n", i);
      dlclose(h);
      return -1;
    }
  }
  /* Object pointers to function pointers: memcpy, as ISO C has no cast. */
  memcpy(&cu->init, &sym[0], sizeof sym[0]);
  memcpy(&cu->device_get_count, &sym[1], sizeof sym[1]);
  memcpy(&cu->device_get, &sym[2], sizeof sym[2]);
  memcpy(&cu->primary_ctx_retain, &sym[3], sizeof sym[3]);
  memcpy(&cu->ctx_set_current, &sym[4], sizeof sym[4]);
  memcpy(&cu->mem_alloc, &sym[5], sizeof sym[5]);
  memcpy(&cu->mem_free, &sym[6], sizeof sym[6]);
  memcpy(&cu->htod, &sym[7], sizeof sym[7]);
  memcpy(&cu->dtoh, &sym[8], sizeof sym[8]);
  void *release = cuda_symbol(h, "cuDevicePrimaryCtxRelease");
  memcpy(&cu->primary_ctx_release, &release, sizeof release);
  int rc = cu->init(0);
  if (rc != 0) {
    fprintf(stderr, "xcoll-perf: cuInit failed: CUresult %d\n", rc);
    dlclose(h);
    return -1;
  }
  cu->handle = h;
  return 0;
}

/* Make device's primary context current on this thread: the driver API's
 * allocations and copies act on the current context, and the primary one
 * is the context the library (and the CUDA runtime) use on that device. */
static int cuda_bind(perf_cuda *cu, int device) {
  if (cu->stand_in)
    return 0;
  int handle = 0, rc;
  void *ctx = NULL;
  if ((rc = cu->device_get(&handle, device)) == 0 &&
      (rc = cu->primary_ctx_retain(&ctx, handle)) == 0) {
    cu->bound_device = handle;
    rc = cu->ctx_set_current(ctx);
  }
  if (rc != 0) {
    fprintf(stderr, "xcoll-perf: no context on CUDA device %d: CUresult %d\n",
            device, rc);
    return -1;
  }
  return 0;
}

/* Release the primary context cuda_bind retained (none on the stand-in). */
static void cuda_unbind(perf_cuda *cu) {
  if (cu->bound_device >= 0 && cu->primary_ctx_release)
    cu->primary_ctx_release(cu->bound_device);
  cu->bound_device = -1;
}

/* ---- one benchmark ---- */

typedef struct perf_run {
  const perf_options *opt;
  xcoll_comm_t comm;
  int rank;
  int world_size;
  int device;     /* the communicator's: XCOLL_DEVICE_HOST or a CUDA ordinal */
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

/* The tool's own small collectives: count <= 3 elements, <= 16 bytes.
 * On a GPU rank the values travel through run->scratch. */
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

/* Per-rank element counts and buffer sizes for one row of size total_bytes,
 * following the NCCL argument conventions. */
typedef struct perf_shape {
  size_t bytes;      /* total buffer bytes, rounded down to a whole shape */
  size_t count;      /* elements of the whole buffer (printed) */
  size_t call_count; /* count argument of the call */
  size_t send_elems; /* elements in the send buffer */
  size_t recv_elems; /* elements in the receive buffer */
} perf_shape;

static perf_shape shape_for(const perf_run *run, size_t total_bytes) {
  perf_shape s;
  size_t P = (size_t)run->world_size;
  size_t elems = total_bytes / run->elem_bytes;
  const xcoll_coll_info *info = coll_info(run->opt->coll);
  /* The row's size is the larger buffer: a per-rank count divides it. */
  s.call_count = info->send_per_rank || info->recv_per_rank ? elems / P : elems;
  size_t send = 0, recv = 0, size = 0;
  xcoll_coll_shape(coll_kinds[run->opt->coll], s.call_count, run->world_size,
                   1, &send, &recv, &size);
  if (run->opt->coll == PERF_SENDRECV)
    recv = send; /* the recv half of the pair */
  s.send_elems = send;
  s.recv_elems = recv;
  s.count = size;
  s.bytes = s.count * run->elem_bytes;
  return s;
}

/* The pointers one call uses. In place follows xcoll.h: allgather reads its
 * input from its slot of the receive buffer, reduce_scatter writes its output
 * into its block of the send buffer (which lives in recvbuf here). */
typedef struct perf_buffers {
  void *send; /* what the call reads */
  void *recv; /* what the call writes */
  void *input;  /* where to write this rank's input (== send) */
  void *output; /* where to check the result (== recv) */
} perf_buffers;

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
static perf_buffers buffers_for(const perf_run *run, const perf_shape *s,
                                int in_place) {
  return buffers_at(run, s, in_place, run->sendbuf, run->recvbuf);
}

/* Their host copies, where --check writes inputs and reads results. */
static perf_buffers host_buffers_for(const perf_run *run, const perf_shape *s,
                                     int in_place) {
  return buffers_at(run, s, in_place, run->host_send, run->host_recv);
}

/* Issue one operation; with request non-NULL, its non-blocking form. */
static xcoll_status issue(const perf_run *run, const perf_shape *s,
                          const perf_buffers *b, xcoll_request_t *request) {
  const perf_options *o = run->opt;
  size_t n = s->call_count;
  switch (o->coll) {
  case PERF_ALLREDUCE:
    return request ? xcoll_iallreduce(b->send, b->recv, n, o->dtype, o->op,
                                      run->comm, NULL, request)
                   : xcoll_allreduce(b->send, b->recv, n, o->dtype, o->op, run->comm);
  case PERF_ALLGATHER:
    return request ? xcoll_iallgather(b->send, b->recv, n, o->dtype, run->comm,
                                      NULL, request)
                   : xcoll_allgather(b->send, b->recv, n, o->dtype, run->comm);
  case PERF_REDUCE_SCATTER:
    return request ? xcoll_ireduce_scatter(b->send, b->recv, n, o->dtype, o->op,
                                           run->comm, NULL, request)
                   : xcoll_reduce_scatter(b->send, b->recv, n, o->dtype, o->op,
                                          run->comm);
  case PERF_BROADCAST:
    return request ? xcoll_ibroadcast(b->send, b->recv, n, o->dtype, o->root,
                                      run->comm, NULL, request)
                   : xcoll_broadcast(b->send, b->recv, n, o->dtype, o->root,
                                     run->comm);
  case PERF_REDUCE:
    return request ? xcoll_ireduce(b->send, b->recv, n, o->dtype, o->op, o->root,
                                   run->comm, NULL, request)
                   : xcoll_reduce(b->send, b->recv, n, o->dtype, o->op, o->root,
                                  run->comm);
  case PERF_ALLTOALL:
    return request ? xcoll_ialltoall(b->send, b->recv, n, o->dtype, run->comm,
                                     NULL, request)
                   : xcoll_alltoall(b->send, b->recv, n, o->dtype, run->comm);
  case PERF_GATHER:
    return request ? xcoll_igather(b->send, b->recv, n, o->dtype, o->root,
                                   run->comm, NULL, request)
                   : xcoll_gather(b->send, b->recv, n, o->dtype, o->root,
                                  run->comm);
  case PERF_SCATTER:
    return request ? xcoll_iscatter(b->send, b->recv, n, o->dtype, o->root,
                                    run->comm, NULL, request)
                   : xcoll_scatter(b->send, b->recv, n, o->dtype, o->root,
                                   run->comm);
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

/* Run iterations * agg operations back to back (agg: -m, nccl-tests'
 * aggregation of several operations in one iteration). Non-blocking mode
 * issues all of them first so the library may overlap them, then waits in
 * order, as nccl-tests' -z 0 launches every iteration before it synchronises
 * the stream. */
static xcoll_status run_iterations(perf_run *run, const perf_shape *s,
                                   const perf_buffers *b, int iterations,
                                   int agg, perf_failure *failure) {
  iterations *= agg;
  if (run->opt->blocking) {
    for (int it = 0; it < iterations; it++) {
      xcoll_status st = issue(run, s, b, NULL);
      if (st != XCOLL_SUCCESS) {
        failure->status = st;
        failure->what = coll_names[run->opt->coll];
        return st;
      }
    }
    return XCOLL_SUCCESS;
  }
  int issued = 0;
  xcoll_status first = XCOLL_SUCCESS;
  for (; issued < iterations; issued++) {
    first = issue(run, s, b, &run->requests[issued]);
    if (first != XCOLL_SUCCESS)
      break;
  }
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

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fill this rank's input and poison the part of the output that the
 * operation must write (for in-place operations they overlap: the output
 * slot of an in-place allgather/broadcast/reduce holds the input). */
static void fill_check(const perf_run *run, const perf_shape *s,
                       const perf_buffers *b, int in_place) {
  const perf_options *o = run->opt;
  xcoll_datatype t = o->dtype;
  if (!in_place || o->coll == PERF_SENDRECV) {
    for (size_t i = 0; i < s->recv_elems; i++)
      store_element(b->output, i, t, PERF_SENTINEL);
  } else if (o->coll == PERF_ALLGATHER || o->coll == PERF_GATHER) {
    for (size_t i = 0; i < s->recv_elems; i++)
      store_element(b->output, i, t, PERF_SENTINEL);
  } else if ((o->coll == PERF_BROADCAST || o->coll == PERF_SCATTER) &&
             run->rank != o->root) {
    for (size_t i = 0; i < s->recv_elems; i++)
      store_element(b->output, i, t, PERF_SENTINEL);
    return; /* a non-root's in-place input is not read */
  }
  /* Allgather's input is this rank's slot: element j of the input is element
   * rank * call_count + j of the gathered buffer, so value it by that index. */
  size_t offset = o->coll == PERF_ALLGATHER || o->coll == PERF_GATHER
                      ? (size_t)run->rank * s->call_count
                      : 0;
  for (size_t i = 0; i < s->send_elems; i++)
    store_element(b->input, i, t,
                  input_value(run->rank, run->world_size, offset + i, o->op));
}

/* fill_check on the host copies; on device buffers, then copy both to the
 * device (a row's whole span, s->bytes, of each: in place, the input lives
 * in recvbuf). The synchronous copies run on the legacy default stream, so
 * they are ordered with the calls, which use it too. Returns 0 or -1. */
static int prepare_check(const perf_run *run, const perf_shape *s, int in_place,
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
 * read from the host copies. */
static int64_t count_wrong_host(const perf_run *run, const perf_shape *s,
                                const perf_buffers *b) {
  const perf_options *o = run->opt;
  xcoll_datatype t = o->dtype;
  int P = run->world_size;
  int64_t wrong = 0;
  for (size_t i = 0; i < s->recv_elems; i++) {
    double want;
    switch (o->coll) {
    case PERF_ALLREDUCE:
      want = reduced_value(P, i, o->op);
      break;
    case PERF_ALLGATHER:
      want = input_value((int)(i / (s->call_count ? s->call_count : 1)), P, i, o->op);
      break;
    case PERF_REDUCE_SCATTER:
      want = reduced_value(P, (size_t)run->rank * s->call_count + i, o->op);
      break;
    case PERF_BROADCAST:
      want = input_value(o->root, P, i, o->op);
      break;
    case PERF_REDUCE:
      if (run->rank != o->root)
        return 0; /* only root's buffer is defined */
      want = reduced_value(P, i, o->op);
      break;
    case PERF_ALLTOALL: {
      /* Block s of the output is block rank of rank s's input. */
      size_t n = s->call_count ? s->call_count : 1;
      want = input_value((int)(i / n), P, (size_t)run->rank * n + i % n, o->op);
      break;
    }
    case PERF_GATHER:
      if (run->rank != o->root)
        return 0;
      want = input_value((int)(i / (s->call_count ? s->call_count : 1)), P, i, o->op);
      break;
    case PERF_SCATTER:
      want = input_value(o->root, P, (size_t)run->rank * s->call_count + i, o->op);
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

static double bus_factor(perf_coll coll, int world_size) {
  return xcoll_coll_busbw_factor(coll_kinds[coll], world_size);
}

/* count_wrong_host after copying device results back (recvbuf's span).
 * Returns -1 with failure set when the copy fails. */
static int64_t count_wrong(const perf_run *run, const perf_shape *s, int in_place,
                           perf_failure *failure) {
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
  perf_buffers b = buffers_for(run, s, in_place);
  xcoll_status st;

  if (o->check && prepare_check(run, s, in_place, failure) != 0)
    return failure->status;
  if (o->warmup_iters > 0 &&
      (st = run_iterations(run, s, &b, o->warmup_iters, o->agg_iters,
                           failure)) != XCOLL_SUCCESS)
    return st;
  if ((st = xcoll_barrier(run->comm)) != XCOLL_SUCCESS) {
    failure->status = st;
    failure->what = "xcoll_barrier";
    return st;
  }
  double start = now_seconds();
  if ((st = run_iterations(run, s, &b, o->iters, o->agg_iters, failure)) !=
      XCOLL_SUCCESS)
    return st;
  double mean_seconds =
      (now_seconds() - start) / ((double)o->iters * o->agg_iters);
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
      if (prepare_check(run, s, in_place, failure) != 0)
        return failure->status;
      if ((st = run_iterations(run, s, &b, 1, 1, failure)) != XCOLL_SUCCESS)
        return st;
      int64_t row_wrong = count_wrong(run, s, in_place, failure);
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

/* ---- output ---- */

static void print_header(const perf_run *run) {
  const perf_options *o = run->opt;
  const char *forced = getenv("XCOLL_ALGO");
  const char *proto = getenv("XCOLL_PROTO");
  printf("# xcoll-perf %d.%d.%d: %s, backend %s, world_size %d, %s mode (-z %d), "
         "time %s over ranks (-a %d); algorithm/protocol: per row, as the "
         "library ran them (XCOLL_ALGO %s, XCOLL_PROTO %s)\n",
         xcoll_version() / 10000, xcoll_version() / 100 % 100,
         xcoll_version() % 100, coll_names[o->coll], xcoll_comm_backend(run->comm),
         run->world_size, o->blocking ? "blocking" : "non-blocking", o->blocking,
         average_names[o->average], o->average,
         forced && forced[0] ? forced : "unset: by size",
         proto && proto[0] ? proto : "unset");
  if (run->p2p_send_ranks + run->shm_send_ranks + run->net_send_ranks > 0)
    printf("# transports (each rank's connection to the next): P2P on %d "
           "rank(s), SHM on %d, NET on %d (XCOLL_P2P_DISABLE, "
           "XCOLL_SHM_DISABLE, XCOLL_NET)\n",
           run->p2p_send_ranks, run->shm_send_ranks, run->net_send_ranks);
  else
    printf("# transports: %s\n", xcoll_comm_backend(run->comm));
  printf("# GPU ranks (bound to a CUDA device): %d of %d; buffers: CUDA device "
         "memory on %d ranks, host memory on %d\n",
         run->gpu_ranks, run->world_size, run->device_buffer_ranks,
         run->world_size - run->device_buffer_ranks);
  printf("# minbytes %zu maxbytes %zu step %s%g iters %d warmup_iters %d "
         "agg_iters %d run_cycles %d check %d timeout %d\n#\n",
         o->min_bytes, o->max_bytes, o->step_factor > 0 ? "x" : "+",
         o->step_factor > 0 ? o->step_factor : (double)o->step_bytes, o->iters,
         o->warmup_iters, o->agg_iters, o->run_cycles, o->check, o->timeout_s);
  printf("# %10s %12s %8s %6s %6s   %-30s   %-30s\n", "", "", "", "", "",
         "            out-of-place", "              in-place");
  printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s  %s\n", "size",
         "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
         "time", "algbw", "busbw", "#wrong", "algorithm/protocol");
  printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
         "(GB/s)", "(GB/s)", "");
}

/* "ring/p2p", or "ring/p2p|rabenseifner/p2p" when the in-place half ran
 * something else. */
static void format_algorithm(char *out, size_t out_bytes, const perf_result *oop,
                             const perf_result *ip) {
  if (strcmp(oop->algorithm, ip->algorithm) == 0 &&
      strcmp(oop->protocol, ip->protocol) == 0)
    snprintf(out, out_bytes, "%s/%s", oop->algorithm, oop->protocol);
  else
    snprintf(out, out_bytes, "%s/%s|%s/%s", oop->algorithm, oop->protocol,
             ip->algorithm, ip->protocol);
}

static void format_wrong(char *out, size_t out_bytes, int64_t wrong) {
  if (wrong < 0)
    snprintf(out, out_bytes, "N/A");
  else
    snprintf(out, out_bytes, "%" PRId64, wrong);
}

static const char *redop_column(const perf_options *o) {
  if (!coll_info(o->coll)->has_op)
    return "none";
  return xcoll_op_name(o->op);
}

static int root_column(const perf_options *o) {
  return coll_info(o->coll)->has_root ? o->root : -1;
}

static void print_row(const perf_run *run, const perf_shape *s,
                      const perf_result *oop, const perf_result *ip) {
  const perf_options *o = run->opt;
  char wrong_oop[24], wrong_ip[24], algorithm[128];
  format_wrong(wrong_oop, sizeof wrong_oop, oop->wrong);
  format_wrong(wrong_ip, sizeof wrong_ip, ip->wrong);
  format_algorithm(algorithm, sizeof algorithm, oop, ip);
  printf("  %10zu %12zu %8s %6s %6d %9.2f %7.3f %7.3f %6s %9.2f %7.3f %7.3f %6s  %s\n",
         s->bytes, s->count, xcoll_datatype_name(o->dtype), redop_column(o),
         root_column(o), oop->time_us, oop->algbw, oop->busbw, wrong_oop,
         ip->time_us, ip->algbw, ip->busbw, wrong_ip, algorithm);
  fflush(stdout);
}

/* JSON Lines: every string written here is a fixed name from this program or
 * the library (no user text), and numbers are finite, so no escaping is
 * needed. "algorithm"/"protocol" are the out-of-place half's, "ip_..." the
 * in-place half's (xcoll_comm_last_algorithm). */
static void json_number(FILE *f, const char *key, double value) {
  fprintf(f, "\"%s\":%.6g", key, isfinite(value) ? value : 0.0);
}

static void write_json_row(FILE *f, const perf_run *run, const perf_shape *s,
                           const perf_result *oop, const perf_result *ip,
                           int cycle) {
  const perf_options *o = run->opt;
  fprintf(f,
          "{\"tool\":\"xcoll-perf\",\"collective\":\"%s\",\"backend\":\"%s\","
          "\"algorithm\":\"%s\",\"protocol\":\"%s\","
          "\"ip_algorithm\":\"%s\",\"ip_protocol\":\"%s\","
          "\"world_size\":%d,\"gpu_ranks\":%d,\"device_buffer_ranks\":%d,"
          "\"blocking\":%d,\"average\":\"%s\",\"cycle\":%d,"
          "\"size\":%zu,\"count\":%zu,"
          "\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"iters\":%d,"
          "\"warmup_iters\":%d,\"agg_iters\":%d,",
          coll_names[o->coll], xcoll_comm_backend(run->comm), oop->algorithm,
          oop->protocol, ip->algorithm, ip->protocol, run->world_size,
          run->gpu_ranks, run->device_buffer_ranks, o->blocking, average_names[o->average], cycle, s->bytes, s->count,
          xcoll_datatype_name(o->dtype), redop_column(o), root_column(o),
          o->iters, o->warmup_iters, o->agg_iters);
  const perf_result *halves[2] = {oop, ip};
  const char *prefixes[2] = {"oop", "ip"};
  for (int h = 0; h < 2; h++) {
    char key[32];
    snprintf(key, sizeof key, "%s_time_us", prefixes[h]);
    json_number(f, key, halves[h]->time_us);
    snprintf(key, sizeof key, "%s_algbw", prefixes[h]);
    fputc(',', f);
    json_number(f, key, halves[h]->algbw);
    snprintf(key, sizeof key, "%s_busbw", prefixes[h]);
    fputc(',', f);
    json_number(f, key, halves[h]->busbw);
    if (halves[h]->wrong < 0)
      fprintf(f, ",\"%s_wrong\":null", prefixes[h]);
    else
      fprintf(f, ",\"%s_wrong\":%" PRId64, prefixes[h], halves[h]->wrong);
    fputc(h == 0 ? ',' : '}', f);
  }
  fputc('\n', f);
  fflush(f);
}

/* ---- main ---- */

/* The totals a run reports at its end. */
typedef struct perf_totals {
  double busbw_sum;
  int busbw_rows;
  int64_t wrong;
} perf_totals;

/* One sweep over the sizes with run->opt's dtype and op: print (rank 0) and
 * total each row. Returns XCOLL_SUCCESS or the failing call's status. */
static xcoll_status sweep(perf_run *run, FILE *json, int cycle,
                          perf_totals *totals, perf_failure *failure) {
  const perf_options *o = run->opt;
  run->elem_bytes = xcoll_datatype_size(o->dtype);
  for (double size = (double)o->min_bytes; size <= (double)o->max_bytes;
       size = o->step_factor > 0 ? size * o->step_factor
                                 : size + (double)o->step_bytes) {
    perf_shape shape = shape_for(run, (size_t)size);
    perf_result oop, ip;
    xcoll_status st;
    if ((st = measure(run, &shape, 0, &oop, failure)) != XCOLL_SUCCESS ||
        (st = measure(run, &shape, 1, &ip, failure)) != XCOLL_SUCCESS)
      return st;
    if (run->rank == 0) {
      print_row(run, &shape, &oop, &ip);
      if (json)
        write_json_row(json, run, &shape, &oop, &ip, cycle);
    }
    totals->busbw_sum += oop.busbw + ip.busbw;
    totals->busbw_rows += 2;
    totals->wrong += (oop.wrong > 0 ? oop.wrong : 0) + (ip.wrong > 0 ? ip.wrong : 0);
    if (size == 0.0 && o->step_factor > 0)
      break; /* -b 0: a zero-byte row, then nothing grows */
  }
  return XCOLL_SUCCESS;
}

/* Whether -o all runs op on dtype: the library defines avg for the
 * floating-point types and band, bor, bxor for the integer types. */
static int op_fits_dtype(xcoll_op op, xcoll_datatype dtype) {
  int is_float = dtype == XCOLL_FLOAT16 || dtype == XCOLL_BFLOAT16 ||
                 dtype == XCOLL_FLOAT32 || dtype == XCOLL_FLOAT64;
  if (op == XCOLL_AVG)
    return is_float;
  return is_bitwise(op) ? !is_float : 1;
}

/* Every sweep the command line asks for: -N cycles, each over -d types and
 * -o operations (nccl-tests' order: type outside, operation inside). */
static xcoll_status run_all(perf_run *run, const perf_options *opt, FILE *json,
                            perf_totals *totals, perf_failure *failure) {
  /* nccl-tests' order of operations; "all" runs each. */
  static const xcoll_op all_ops[] = {XCOLL_SUM,  XCOLL_PROD, XCOLL_MAX,
                                     XCOLL_MIN,  XCOLL_AVG,  XCOLL_BAND,
                                     XCOLL_BOR,  XCOLL_BXOR};
  int has_op = coll_info(opt->coll)->has_op;
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
          if (!op_fits_dtype(current.op, current.dtype))
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

static int fail(xcoll_comm_t comm, int rank, const perf_failure *failure) {
  fprintf(stderr, "xcoll-perf: rank %d: %s failed: %s: %s\n", rank,
          failure->what, xcoll_strerror(failure->status),
          comm ? xcoll_comm_last_error(comm) : xcoll_last_error());
  return 1;
}

int main(int argc, char **argv) {
  perf_options opt;
  int parsed = parse_options(argc, argv, &opt);
  if (parsed == 1)
    return 0;
  if (parsed != 0)
    return 2;

  perf_run run;
  memset(&run, 0, sizeof run);
  run.opt = &opt;
  run.cuda.bound_device = -1;
  run.elem_bytes = xcoll_datatype_size(opt.dtype);
  perf_failure failure = {XCOLL_SUCCESS, "xcoll_comm_init_env"};

  /* -T: nccl-tests gives up on a collective after this many seconds; the
   * library's XCOLL_TIMEOUT_S is that bound for every wait. The command line
   * wins over the environment. */
  if (opt.timeout_s > 0) {
    char seconds[32];
    snprintf(seconds, sizeof seconds, "%d", opt.timeout_s);
    if (setenv("XCOLL_TIMEOUT_S", seconds, 1) != 0) {
      fprintf(stderr, "xcoll-perf: cannot set XCOLL_TIMEOUT_S for -T: %s\n",
              strerror(errno));
      return 1;
    }
  }

  /* --gpu-ranks: bind this rank (RANK, from the launcher) before the
   * communicator reads XCOLL_DEVICE, to CUDA device LOCAL_RANK % devices, as
   * one GPU per local rank would be placed, sharing when there are fewer. */
  if (opt.gpu_ranks) {
    const char *rank_text = getenv("RANK");
    const char *local_text = getenv("LOCAL_RANK");
    int rank = rank_text ? atoi(rank_text) : 0;
    int local_rank = local_text ? atoi(local_text) : 0;
    char device_text[32] = "host";
    if (rank_listed(opt.gpu_ranks, rank) == 1) {
      int devices = 0;
      if (cuda_load(&run.cuda) != 0 || run.cuda.device_get_count(&devices) != 0 ||
          devices <= 0) {
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

  xcoll_status st = xcoll_comm_init_env(&run.comm);
  if (st != XCOLL_SUCCESS) {
    failure.status = st;
    fprintf(stderr, "xcoll-perf: xcoll_comm_init_env failed: %s: %s\n",
            xcoll_strerror(st), xcoll_last_error());
    return 1;
  }
  if ((st = xcoll_comm_rank(run.comm, &run.rank)) != XCOLL_SUCCESS ||
      (st = xcoll_comm_size(run.comm, &run.world_size)) != XCOLL_SUCCESS ||
      (st = xcoll_comm_device(run.comm, &run.device)) != XCOLL_SUCCESS) {
    failure.status = st;
    failure.what = "xcoll_comm_rank/size/device";
    int code = fail(run.comm, run.rank, &failure);
    xcoll_comm_destroy(run.comm);
    return code;
  }
  int exit_code = 0;
  FILE *json = NULL;
  if (coll_info(opt.coll)->has_root && opt.root >= run.world_size) {
    if (run.rank == 0)
      fprintf(stderr, "xcoll-perf: --root %d is outside [0, %d): pass a rank "
              "below the world size\n", opt.root, run.world_size);
    xcoll_comm_destroy(run.comm);
    return 2;
  }

  int is_gpu_rank = run.device != XCOLL_DEVICE_HOST;
  run.on_device = opt.device_buffers < 0 ? is_gpu_rank : opt.device_buffers;
  if (run.on_device && !is_gpu_rank) {
    /* Every rank checks alone; the bad one tells, and all return 2 after
     * the count below, in step. */
    fprintf(stderr, "xcoll-perf: rank %d: --device-buffers 1 on a host rank: "
            "bind it to a CUDA device (XCOLL_DEVICE=cuda, --gpu-ranks)\n",
            run.rank);
  }
  /* A GPU rank loads the driver and makes its device's context current:
   * its small collectives go through device memory, whatever the buffers. */
  if (is_gpu_rank) {
    unsigned long long scratch = 0;
    if (cuda_load(&run.cuda) != 0 || cuda_bind(&run.cuda, run.device) != 0 ||
        run.cuda.mem_alloc(&scratch, 64) != 0) {
      fprintf(stderr, "xcoll-perf: rank %d: cannot allocate device memory on "
              "CUDA device %d\n", run.rank, run.device);
      exit_code = 1;
      goto done;
    }
    run.scratch = (char *)(uintptr_t)scratch;
  }
  {
    const char *send = "none", *recv = "none";
    (void)xcoll_comm_transport(run.comm, &send, &recv);
    int32_t flags[6] = {is_gpu_rank, run.on_device,
                        run.on_device && !is_gpu_rank,
                        strcmp(send, "SHM") == 0, strcmp(send, "NET") == 0,
                        strcmp(send, "P2P") == 0};
    int32_t totals[6] = {0, 0, 0, 0, 0, 0};
    if ((st = small_collective(&run, 0, flags, totals, 6, XCOLL_INT32,
                               XCOLL_SUM)) != XCOLL_SUCCESS) {
      failure.status = st;
      failure.what = "counting GPU ranks";
      exit_code = fail(run.comm, run.rank, &failure);
      goto done;
    }
    run.gpu_ranks = totals[0];
    run.device_buffer_ranks = totals[1];
    run.shm_send_ranks = totals[3];
    run.net_send_ranks = totals[4];
    run.p2p_send_ranks = totals[5];
    if (totals[2] > 0) {
      exit_code = 2;
      goto done;
    }
  }

  /* Round the buffer up to a whole cache line so aligned_alloc accepts it. */
  size_t buffer_bytes = (opt.max_bytes + 63u) / 64u * 64u;
  if (buffer_bytes == 0)
    buffer_bytes = 64;
  run.host_send = aligned_alloc(64, buffer_bytes);
  run.host_recv = aligned_alloc(64, buffer_bytes);
  size_t max_requests = (size_t)(opt.iters > opt.warmup_iters ? opt.iters
                                                              : opt.warmup_iters) *
                        (size_t)opt.agg_iters;
  run.requests = calloc(max_requests, sizeof *run.requests);
  if (!run.host_send || !run.host_recv || !run.requests) {
    fprintf(stderr, "xcoll-perf: rank %d: cannot allocate 2 x %zu bytes of "
            "buffers: lower --maxbytes\n", run.rank, buffer_bytes);
    exit_code = 1;
    goto done;
  }
  /* Touch every page now, so first-touch faults do not land in a timing. */
  memset(run.host_send, 0, buffer_bytes);
  memset(run.host_recv, 0, buffer_bytes);
  run.sendbuf = run.host_send;
  run.recvbuf = run.host_recv;
  if (run.on_device) {
    unsigned long long send = 0, recv = 0;
    int rc = run.cuda.mem_alloc(&send, buffer_bytes);
    if (rc == 0)
      run.sendbuf = (char *)(uintptr_t)send;
    if (rc == 0 && (rc = run.cuda.mem_alloc(&recv, buffer_bytes)) == 0)
      run.recvbuf = (char *)(uintptr_t)recv;
    /* Defined contents, so an unchecked run never reduces garbage (NaNs
     * can be slower on some paths). */
    if (rc == 0 && (rc = run.cuda.htod(send, run.host_send, buffer_bytes)) == 0)
      rc = run.cuda.htod(recv, run.host_recv, buffer_bytes);
    if (rc != 0) {
      fprintf(stderr, "xcoll-perf: rank %d: cannot allocate or clear 2 x %zu "
              "bytes of device memory on CUDA device %d (CUresult %d): lower "
              "--maxbytes\n", run.rank, buffer_bytes, run.device, rc);
      exit_code = 1;
      goto done;
    }
  }

  if (run.rank == 0 && opt.json_path) {
    json = fopen(opt.json_path, "w");
    if (!json) {
      fprintf(stderr, "xcoll-perf: cannot open --json file %s: %s\n",
              opt.json_path, strerror(errno));
      /* Keep going in step with the other ranks; the text output is whole. */
      exit_code = 1;
    }
  }
  if (run.rank == 0)
    print_header(&run);

  perf_totals totals = {0.0, 0, 0};
  if (run_all(&run, &opt, json, &totals, &failure) != XCOLL_SUCCESS) {
    exit_code = fail(run.comm, run.rank, &failure);
    goto done;
  }
  if (run.rank == 0) {
    if (opt.check)
      printf("# Out of bounds values : %" PRId64 " %s\n", totals.wrong,
             totals.wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth : %g\n",
           totals.busbw_rows ? totals.busbw_sum / totals.busbw_rows : 0.0);
  }
  if (totals.wrong > 0)
    exit_code = 1;

done:
  if (json)
    fclose(json);
  free(run.requests);
  /* Destroy first: after a failure a kernel of the communicator may still
   * use the device buffers until the communicator is torn down. */
  st = xcoll_comm_destroy(run.comm);
  if (st != XCOLL_SUCCESS && exit_code == 0) {
    fprintf(stderr, "xcoll-perf: rank %d: xcoll_comm_destroy failed: %s\n",
            run.rank, xcoll_strerror(st));
    exit_code = 1;
  }
  if (run.on_device) {
    if (run.sendbuf && run.sendbuf != run.host_send)
      run.cuda.mem_free((unsigned long long)(uintptr_t)run.sendbuf);
    if (run.recvbuf && run.recvbuf != run.host_recv)
      run.cuda.mem_free((unsigned long long)(uintptr_t)run.recvbuf);
  }
  if (run.scratch)
    run.cuda.mem_free((unsigned long long)(uintptr_t)run.scratch);
  cuda_unbind(&run.cuda);
  free(run.host_send);
  free(run.host_recv);
  return exit_code;
}
