/*
 * perf_options.c - xcoll-perf's command line: nccl-tests' flags (checked
 * against its README and src/common.cu), the collective names and their
 * aliases, --help's text, and the checks between flags. Sizes (-b, -e, -i)
 * go through the library's parser of XCOLL_* sizes (core/env.h).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "perf.h"

const char *const perf_coll_names[PERF_NUM_COLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
    "alltoall",  "gather",    "scatter",        "sendrecv"};

const xcoll_coll_kind perf_coll_kinds[PERF_NUM_COLLS] = {
    XCOLL_COLL_ALLREDUCE, XCOLL_COLL_ALLGATHER, XCOLL_COLL_REDUCE_SCATTER,
    XCOLL_COLL_BROADCAST, XCOLL_COLL_REDUCE,    XCOLL_COLL_ALLTOALL,
    XCOLL_COLL_GATHER,    XCOLL_COLL_SCATTER,   XCOLL_COLL_SEND};

const xcoll_coll_info *perf_coll_info(perf_coll coll) {
  return xcoll_coll_info_of(perf_coll_kinds[coll]);
}

const char *const perf_average_names[4] = {"rank0", "avg", "min", "max"};

const char *perf_dtype_name(xcoll_datatype dtype) {
  /* nccl-tests' names where they differ from the library's */
  switch (dtype) {
  case XCOLL_FLOAT16: return "half";
  case XCOLL_FLOAT32: return "float";
  case XCOLL_FLOAT64: return "double";
  default: return xcoll_datatype_name(dtype);
  }
}

/* A bad command line gets one line naming what was wrong (printed by the
 * caller, or by getopt for an unknown flag) and this pointer to the rest. */
static int see_help(void) {
  fputs("see 'xcoll-perf --help'\n", stderr);
  return 2;
}

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
          "  -d, --datatype TYPE|all  int8 uint8 int32 uint32 int64 uint64 half\n"
          "                           bfloat16 float double, as nccl-tests names them\n"
          "                           and the table prints them (the library's float16,\n"
          "                           float32, float64 also work; default float)\n"
          "  -o, --op OP|all          reduction: sum prod min max avg band bor bxor, or\n"
          "                           mulsum (a pre-multiplied sum: rank r scales its\n"
          "                           input by 1 + r %% 2; host ranks only) (default sum;\n"
          "                           all: each one the type allows, mulsum apart);\n"
          "                           a collective name here is taken as --coll\n"
          "      --coll NAME          allreduce allgather reduce_scatter broadcast reduce\n"
          "                           alltoall gather scatter sendrecv\n"
          "                           (default allreduce; --collective is the same)\n"
          "  -c, --check N            check N operations per row against a local\n"
          "                           reference, 0: no check (default 1)\n"
          "  -r, --root R             root of broadcast and reduce (default 0)\n"
          "  -z, --blocking 0|1|2     1: blocking calls; 0: issue all iterations as\n"
          "                           non-blocking calls, then wait (default 0);\n"
          "                           2: each non-blocking call waited for at once\n"
          "  -C, --report_cputime 0|1 1: report the time to issue the calls (CPU\n"
          "                           time), not to complete them (default 0)\n"
          "  -G, --cudagraph N        CUDA graph replays: only 0 (xcoll's collectives\n"
          "                           also do host work, which a graph cannot hold)\n"
          "  -R, --local_register 0|1|2  accepted; a no-op: xcoll registers no user\n"
          "                           buffers\n"
          "  -y, --stream_null 0|1    accepted; the calls always use the NULL stream\n"
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
          "(-G is nccl-tests' CUDA-graph flag, so device buffers have no short\n"
          "flag here.)\n",
          argv0, argv0, argv0);
}

/* ---- parsing ---- */

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
    if (strcmp(text, perf_coll_names[c]) == 0) {
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
  return see_help();
}

/* --gpu-ranks: 1 if rank is in LIST ("all", "none" or comma-separated
 * ranks), 0 if not, -1 if LIST is malformed. */
int perf_rank_listed(const char *list, int rank) {
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
int perf_parse_options(int argc, char **argv, perf_options *opt) {
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
      {"report_cputime", required_argument, NULL, 'C'},
      {"cudagraph", required_argument, NULL, 'G'},
      {"local_register", required_argument, NULL, 'R'},
      {"stream_null", required_argument, NULL, 'y'},
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
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:m:N:a:d:o:c:r:z:T:g:t:p:J:C:G:R:y:h",
                          long_options, NULL)) != -1) {
    int bad = 0, single = 0;
    switch (c) {
    case 'b': bad = xcoll_parse_size(optarg, &opt->min_bytes) != 0; break;
    case 'e': bad = xcoll_parse_size(optarg, &opt->max_bytes) != 0; break;
    case 'f': {
      char *end = NULL;
      opt->step_factor = strtod(optarg, &end);
      bad = end == optarg || *end != '\0' || !(opt->step_factor > 1.0) ||
            !isfinite(opt->step_factor);
      opt->step_bytes = 0;
      break;
    }
    case 'i':
      bad = xcoll_parse_size(optarg, &opt->step_bytes) != 0 ||
            opt->step_bytes == 0;
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
      opt->mulsum = 0;
      if (strcmp(optarg, "all") == 0) {
        opt->all_ops = 1;
      } else if (strcmp(optarg, "mulsum") == 0 ||
                 strcmp(optarg, "premul_sum") == 0) {
        opt->mulsum = 1; /* nccl-tests' name; premul_sum: the library's */
        opt->op = XCOLL_SUM;
      } else if (parse_redop(optarg, &opt->op) != 0) {
        bad = parse_coll(optarg, &opt->coll);
      }
      break;
    case 'c': bad = parse_int(optarg, 0, 1000000L, &opt->check); break;
    case 'r': bad = parse_int(optarg, 0, 1 << 30, &opt->root); break;
    case 'z': bad = parse_int(optarg, 0, 2, &opt->blocking); break;
    case 'T': bad = parse_int(optarg, 0, 10000000L, &opt->timeout_s); break;
    case 'g':
    case 't':
      if (parse_int(optarg, 1, 1, &single) != 0)
        return reject_multi(c == 'g' ? "-g/--ngpus" : "-t/--nthreads", optarg);
      break;
    case 'p': bad = parse_int(optarg, 0, 1, &single); break;
    case 'C': bad = parse_int(optarg, 0, 1, &opt->report_cputime); break;
    case 'R': bad = parse_int(optarg, 0, 2, &opt->local_register); break;
    case 'y': bad = parse_int(optarg, 0, 1, &opt->stream_null); break;
    case 'G':
      if (parse_int(optarg, 0, 1000000000L, &single) != 0) {
        bad = 1;
      } else if (single > 0) {
        /* A replayed graph holds only the device work; xcoll's calls also
         * run on the host (nccl_like's proxy and FIFO bookkeeping, tcp and
         * ucx staging), so replaying one would not repeat the collective. */
        fprintf(stderr, "xcoll-perf: -G %s needs collectives that are only "
                "device work, for CUDA graph capture; xcoll's calls also run "
                "on the host, on GPU ranks too: use -G 0\n", optarg);
        return see_help();
      }
      break;
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
      bad = perf_rank_listed(optarg, 0) < 0;
      break;
    case 'h': usage(stdout, argv0); return 1;
    case OPT_VERSION:
      printf("xcoll-perf (xcoll) %s\n", XCOLL_PROJECT_VERSION);
      return 1;
    default: return see_help(); /* getopt named the flag */
    }
    if (bad) {
      char name[3] = {'-', (char)c, '\0'};
      fprintf(stderr, "xcoll-perf: bad value '%s' for option %s\n", optarg,
              c == OPT_COLL             ? "--coll"
              : c == OPT_DEVICE_BUFFERS ? "--device-buffers"
              : c == OPT_GPU_RANKS      ? "--gpu-ranks"
                                        : name);
      return see_help();
    }
  }
  if (optind < argc) {
    fprintf(stderr, "xcoll-perf: unexpected argument '%s': every value "
            "follows its flag (-b 8, --minbytes 8)\n", argv[optind]);
    return see_help();
  }
  if (opt->min_bytes > opt->max_bytes) {
    fprintf(stderr, "xcoll-perf: --minbytes (%zu) is larger than --maxbytes (%zu)\n",
            opt->min_bytes, opt->max_bytes);
    return see_help();
  }
  if ((size_t)(opt->iters > opt->warmup_iters ? opt->iters : opt->warmup_iters) >
      (size_t)100000000 / (size_t)opt->agg_iters) {
    fprintf(stderr, "xcoll-perf: --iters (or --warmup_iters) times --agg_iters "
            "exceeds 1e8 operations per row: lower one of them\n");
    return see_help();
  }
  return 0;
}

