/*
 * xtrain.c - the xtrain program: trains an MLP or a CNN on Fashion-MNIST, or
 * a small GPT-style transformer on bytes of text (--model gpt), with
 * one process (--strategy none), DataParallel threads in one process
 * (--strategy dp), data-parallel over xcoll (--strategy ddp) or fully
 * sharded (--strategy fsdp), the last two launched by xcollrun or any
 * torchrun-style launcher. Uses only the public API in xcoll.h. See
 * docs/trainer.md. The strategy's hooks (strategy.h) are all a step knows of
 * distribution.
 */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm_hooks.h"
#include "checkpoint_fsdp.h"
#include "data.h"
#include "ddp.h"
#include "dp.h"
#include "fsdp.h"
#include "gpt.h"
#include "mixed.h"
#include "init_params.h"
#include "model.h"
#include "optim.h"
#include "strategy.h"
#include "text.h"
#include "profile.h"
#include "timeline.h"
#include "xcoll.h"

typedef struct config {
  model_kind model;
  strategy_kind strategy;
  fsdp_config fsdp; /* --sharding, --backward-prefetch, ... */
  int dp_devices;   /* --strategy dp: replicas (threads) */
  int epochs;
  int batch_size; /* per rank, per micro-batch */
  float lr;
  optim_kind optimizer;
  float momentum;
  float weight_decay;
  int nesterov;
  schedule_kind schedule;
  int64_t warmup_steps;
  double clip_grad_norm;
  double first_bucket_mb;
  double bucket_cap_mb;
  int grad_accum;
  uint64_t seed;
  const char *data_dir;
  const char *checkpoint_dir;
  checkpoint_format checkpoint_format; /* fsdp: full or sharded */
  int resume;
  const char *init_from;   /* safetensors with PyTorch's names */
  const char *export_init; /* write the initial parameters there */
  int sampler_sequential;  /* --sampler sequential: no shuffle */
  int64_t log_every;
  double progress_every; /* seconds; < 0: 10 when stdout is not a terminal */
  const char *log_json;
  int drop_last;
  int64_t max_steps;
  int threads;
  size_t train_limit, test_limit;
  int conv1_channels, conv2_channels;
  gpt_config gpt;        /* --n-layer, --n-head, --d-model, --context */
  const char *data_file; /* gpt: --data-file, instead of the fortunes */
  const char *dump_params;
  const char *trace;
  int profile; /* --profile */
  /* mixed precision and communication hooks (mixed.h, comm_hooks.h) */
  xcoll_datatype param_dtype, reduce_dtype;
  double init_scale;
  int64_t scale_growth_interval;
  comm_hook_kind comm_hook;
  int powersgd_rank;
  int64_t powersgd_warmup;
} config;

static void usage(FILE *out) {
  fprintf(out,
"usage: xtrain [options]   (multi-rank: xcollrun --nproc-per-node N xtrain --strategy ddp ...)\n"
"  --model mlp|cnn|gpt      model (mlp: 784-256-256-10; cnn: LeNet-5-like) [mlp]\n"
"  --cnn-channels C1,C2     channels of the CNN's two convolutions [16,32]\n"
"  --model gpt              a decoder-only transformer on bytes of text, trained\n"
"                           on " TEXT_DEFAULT_DIR " (Debian's fortunes)\n"
"                           or --data-file; epochs default to 1, the optimizer\n"
"                           to adamw (see docs/trainer.md)\n"
"  --n-layer N              gpt: transformer blocks [2]\n"
"  --n-head H               gpt: attention heads, dividing --d-model [4]\n"
"  --d-model C              gpt: width of the residual stream [64]\n"
"  --context T              gpt: sequence length; a sample is T+1 bytes [64]\n"
"  --data-file FILE         gpt: train on FILE (any text; the last 10%% is the\n"
"                           validation set) instead of the fortunes\n"
"  --strategy none|dp|ddp|fsdp  one process; DataParallel (one process,\n"
"                           threads); DistributedDataParallel or Fully Sharded\n"
"                           Data Parallel over xcoll [none]\n"
"  --dp-devices N           dp: replicas, one thread each; --batch-size is\n"
"                           the whole batch, scattered over them [2]\n"
"  --sharding S             fsdp: full_shard|shard_grad_op|no_shard|hybrid_shard\n"
"                           (hybrid: full_shard within LOCAL_WORLD_SIZE ranks) [full_shard]\n"
"  --backward-prefetch P    fsdp: pre|post|none [pre]\n"
"  --forward-prefetch on|off  fsdp: gather the next unit during a unit's forward [off]\n"
"  --fsdp-min-params N      fsdp: layers join a unit until it has N parameters [0]\n"
"  --epochs E               passes over the training set [5]\n"
"  --batch-size B           samples per rank per micro-batch [64]\n"
"  --lr LR                  base learning rate [0.02 sgd, 0.001 adamw]\n"
"  --optimizer sgd|adamw    [sgd]\n"
"  --momentum M             SGD momentum [0.9]\n"
"  --weight-decay WD        SGD: L2 on the gradient; AdamW: decoupled [0]\n"
"  --nesterov               Nesterov momentum (SGD)\n"
"  --schedule constant|cosine  cosine = linear warmup then cosine decay [constant]\n"
"  --warmup-steps N         warmup updates for --schedule cosine [0]\n"
"  --clip-grad-norm X       clip gradients to global L2 norm X; 0 = off [0]\n"
"  --first-bucket-mb X      DDP: most MiB in the first bucket (last layers) [1]\n"
"  --bucket-cap-mb X        DDP: most MiB in each later bucket [25]\n"
"  --grad-accum K           micro-batches per update (no_sync on the first K-1) [1]\n"
"  --seed S                 seed of init and sampler [0]\n"
"  --data-dir DIR           IDX .gz files [" DATA_DEFAULT_DIR "]\n"
"  --checkpoint-dir DIR     write checkpoint_latest/best.safetensors there [none]\n"
"  --checkpoint-format full|sharded  fsdp: full = one file as none/ddp write\n"
"                           (gathered to rank 0; resumes at any world size\n"
"                           and strategy); sharded = one file per rank and\n"
"                           checkpoint_latest.index.json (same world size) [full]\n"
"  --resume                 continue from DIR/checkpoint_latest.safetensors\n"
"                           (or the sharded set, when it is there and newer)\n"
"  --init-from FILE         initial parameters from a safetensors file with\n"
"                           PyTorch's names and shapes (fc1.weight, ...)\n"
"  --export-init FILE       write the initial parameters (after --seed or\n"
"                           --init-from) to FILE in that format, then train\n"
"  --sampler random|sequential  random: DistributedSampler(shuffle=True);\n"
"                           sequential: no shuffle [random]\n"
"  --log-every N            log every N updates; 0 = per epoch only [0]\n"
"  --progress-every S       when stdout is not a terminal (under xcollrun, or\n"
"                           redirected), rank 0 prints a progress line every S\n"
"                           seconds; 0 = never; a terminal gets a bar [10]\n"
"  --log-json FILE          also write JSON lines to FILE (rank 0)\n"
"  --drop-last              drop the tail instead of padding / partial batches\n"
"  --max-steps N            stop after N updates in total (the schedule still\n"
"                           spans --epochs); 0 = no limit [0]\n"
"  --threads T              OpenBLAS threads per rank [1]\n"
"  --train-limit N          use the first N training samples; 0 = all [0]\n"
"  --test-limit N           use the first N test samples; 0 = all [0]\n"
"  --dump-params FILE       at the end, each rank writes FILE.rank<r>: the whole\n"
"                           model's parameters, raw float32 (gathered under fsdp)\n"
"  --param-dtype D          fsdp: float32|bfloat16|float16, the dtype parameters\n"
"                           are all-gathered in (layers see them rounded to it);\n"
"                           master weights stay float32 [float32]\n"
"  --reduce-dtype D         ddp, fsdp: float32|bfloat16|float16, the dtype\n"
"                           gradients are reduced in [float32]\n"
"  --init-scale X           float16: initial dynamic loss scale [65536]\n"
"  --scale-growth-interval N  float16: double the scale after N good steps [2000]\n"
"  --comm-hook H            ddp: none|fp16|bf16|powersgd (PyTorch's DDP\n"
"                           communication hooks) [none]\n"
"  --powersgd-rank R        powersgd: rank of the approximation [1]\n"
"  --powersgd-warmup N      powersgd: plain all-reduce for the first N steps [1000]\n"
"  --profile                at the end, rank 0 prints where an update's time\n"
"                           went (gpt: matmul, attention, elementwise, loss;\n"
"                           hooks, comm wait, optimizer), wall and CPU ms\n"
"  --trace FILE             Chrome trace of steps, layers and bucket all-reduces;\n"
"                           each rank writes FILE with .rank<r> before the\n"
"                           extension (or %%r replaced by the rank, %%p by the\n"
"                           pid)\n"
"  --help\n"
"  --version                print the version and exit\n");
}

static void die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xtrain: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  usage(stderr);
  exit(2);
}

static double parse_double(const char *flag, const char *s, double lo,
                           double hi) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi))
    die_usage("%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
  return v;
}

static int64_t parse_int(const char *flag, const char *s, int64_t lo,
                         int64_t hi) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    die_usage("%s expects an integer in [%" PRId64 ", %" PRId64 "], got '%s'",
              flag, lo, hi, s);
  return v;
}

enum {
  OPT_MODEL = 256, OPT_STRATEGY, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_OPTIM,
  OPT_MOMENTUM, OPT_WD, OPT_NESTEROV, OPT_SCHEDULE, OPT_WARMUP, OPT_CLIP,
  OPT_BUCKET, OPT_ACCUM, OPT_SEED, OPT_DATA, OPT_CKPT, OPT_RESUME, OPT_LOG_EVERY, OPT_PROGRESS_EVERY,
  OPT_LOG_JSON, OPT_DROP_LAST, OPT_MAX_STEPS, OPT_THREADS, OPT_TRAIN_LIMIT,
  OPT_TEST_LIMIT, OPT_CHANNELS, OPT_DUMP, OPT_FIRST_BUCKET, OPT_TRACE, OPT_HELP,
  OPT_VERSION, OPT_SHARDING, OPT_BACKWARD_PREFETCH, OPT_FORWARD_PREFETCH,
  OPT_FSDP_MIN_PARAMS, OPT_DP_DEVICES, OPT_N_LAYER, OPT_N_HEAD, OPT_D_MODEL,
  OPT_CONTEXT, OPT_DATA_FILE, OPT_PARAM_DTYPE, OPT_REDUCE_DTYPE,
  OPT_INIT_SCALE, OPT_GROWTH_INTERVAL, OPT_COMM_HOOK, OPT_POWERSGD_RANK,
  OPT_POWERSGD_WARMUP, OPT_CKPT_FORMAT, OPT_INIT_FROM, OPT_EXPORT_INIT,
  OPT_SAMPLER, OPT_PROFILE
};

/* Mixed precision and hooks: refuse what has no meaning for the strategy. */
static void check_mixed_flags(config *c, int scale_flag, int powersgd_flag) {
  int distributed = c->strategy == STRATEGY_DDP || c->strategy == STRATEGY_FSDP;
  if (c->reduce_dtype != XCOLL_FLOAT32 && !distributed)
    die_usage("--reduce-dtype needs --strategy ddp or fsdp (nothing is reduced "
              "over ranks otherwise)");
  if (c->param_dtype != XCOLL_FLOAT32 && c->strategy != STRATEGY_FSDP)
    die_usage("--param-dtype needs --strategy fsdp: it is the dtype of the "
              "parameter all-gather, and ddp does not gather parameters "
              "(use --reduce-dtype or --comm-hook for ddp)");
  if (c->comm_hook != COMM_HOOK_NONE && c->strategy != STRATEGY_DDP)
    die_usage("--comm-hook needs --strategy ddp (or fsdp --sharding no_shard)");
  if (c->comm_hook != COMM_HOOK_NONE && c->reduce_dtype != XCOLL_FLOAT32)
    die_usage("--comm-hook %s and --reduce-dtype %s both choose how ddp "
              "reduces gradients: give one of them",
              comm_hook_name(c->comm_hook), mixed_dtype_name(c->reduce_dtype));
  if (powersgd_flag && c->comm_hook != COMM_HOOK_POWERSGD)
    die_usage("--powersgd-rank and --powersgd-warmup need --comm-hook powersgd");
  if (scale_flag && c->param_dtype != XCOLL_FLOAT16 &&
      c->reduce_dtype != XCOLL_FLOAT16)
    die_usage("--init-scale and --scale-growth-interval need --param-dtype or "
              "--reduce-dtype float16 (loss scaling is for float16)");
  /* Under ddp, --reduce-dtype is the matching compression hook. */
  if (c->strategy == STRATEGY_DDP && c->reduce_dtype != XCOLL_FLOAT32)
    c->comm_hook = c->reduce_dtype == XCOLL_FLOAT16 ? COMM_HOOK_FP16
                                                     : COMM_HOOK_BF16;
}

static void parse_args(config *c, int argc, char **argv) {
  static const struct option options[] = {
      {"model", required_argument, 0, OPT_MODEL},
      {"strategy", required_argument, 0, OPT_STRATEGY},
      {"sharding", required_argument, 0, OPT_SHARDING},
      {"backward-prefetch", required_argument, 0, OPT_BACKWARD_PREFETCH},
      {"forward-prefetch", required_argument, 0, OPT_FORWARD_PREFETCH},
      {"fsdp-min-params", required_argument, 0, OPT_FSDP_MIN_PARAMS},
      {"dp-devices", required_argument, 0, OPT_DP_DEVICES},
      {"n-layer", required_argument, 0, OPT_N_LAYER},
      {"n-head", required_argument, 0, OPT_N_HEAD},
      {"d-model", required_argument, 0, OPT_D_MODEL},
      {"context", required_argument, 0, OPT_CONTEXT},
      {"data-file", required_argument, 0, OPT_DATA_FILE},
      {"epochs", required_argument, 0, OPT_EPOCHS},
      {"batch-size", required_argument, 0, OPT_BATCH},
      {"lr", required_argument, 0, OPT_LR},
      {"optimizer", required_argument, 0, OPT_OPTIM},
      {"momentum", required_argument, 0, OPT_MOMENTUM},
      {"weight-decay", required_argument, 0, OPT_WD},
      {"nesterov", no_argument, 0, OPT_NESTEROV},
      {"schedule", required_argument, 0, OPT_SCHEDULE},
      {"warmup-steps", required_argument, 0, OPT_WARMUP},
      {"clip-grad-norm", required_argument, 0, OPT_CLIP},
      {"first-bucket-mb", required_argument, 0, OPT_FIRST_BUCKET},
      {"bucket-cap-mb", required_argument, 0, OPT_BUCKET},
      {"grad-accum", required_argument, 0, OPT_ACCUM},
      {"seed", required_argument, 0, OPT_SEED},
      {"data-dir", required_argument, 0, OPT_DATA},
      {"checkpoint-dir", required_argument, 0, OPT_CKPT},
      {"resume", no_argument, 0, OPT_RESUME},
      {"checkpoint-format", required_argument, 0, OPT_CKPT_FORMAT},
      {"init-from", required_argument, 0, OPT_INIT_FROM},
      {"export-init", required_argument, 0, OPT_EXPORT_INIT},
      {"sampler", required_argument, 0, OPT_SAMPLER},
      {"log-every", required_argument, 0, OPT_LOG_EVERY},
      {"progress-every", required_argument, 0, OPT_PROGRESS_EVERY},
      {"log-json", required_argument, 0, OPT_LOG_JSON},
      {"drop-last", no_argument, 0, OPT_DROP_LAST},
      {"max-steps", required_argument, 0, OPT_MAX_STEPS},
      {"threads", required_argument, 0, OPT_THREADS},
      {"train-limit", required_argument, 0, OPT_TRAIN_LIMIT},
      {"test-limit", required_argument, 0, OPT_TEST_LIMIT},
      {"cnn-channels", required_argument, 0, OPT_CHANNELS},
      {"dump-params", required_argument, 0, OPT_DUMP},
      {"trace", required_argument, 0, OPT_TRACE},
      {"profile", no_argument, 0, OPT_PROFILE},
      {"param-dtype", required_argument, 0, OPT_PARAM_DTYPE},
      {"reduce-dtype", required_argument, 0, OPT_REDUCE_DTYPE},
      {"init-scale", required_argument, 0, OPT_INIT_SCALE},
      {"scale-growth-interval", required_argument, 0, OPT_GROWTH_INTERVAL},
      {"comm-hook", required_argument, 0, OPT_COMM_HOOK},
      {"powersgd-rank", required_argument, 0, OPT_POWERSGD_RANK},
      {"powersgd-warmup", required_argument, 0, OPT_POWERSGD_WARMUP},
      {"help", no_argument, 0, OPT_HELP},
      {"version", no_argument, 0, OPT_VERSION},
      {0, 0, 0, 0}};
  memset(c, 0, sizeof *c);
  c->model = MODEL_MLP;
  c->epochs = 5;
  c->batch_size = 64;
  c->lr = -1.0f;
  c->momentum = 0.9f;
  c->first_bucket_mb = 1.0;
  c->bucket_cap_mb = 25.0;
  c->grad_accum = 1;
  c->progress_every = 10.0;
  c->data_dir = DATA_DEFAULT_DIR;
  c->threads = 1;
  c->conv1_channels = 16;
  c->conv2_channels = 32;
  c->fsdp.sharding = FSDP_FULL_SHARD;
  c->fsdp.backward_prefetch = FSDP_PREFETCH_PRE;
  c->fsdp.forward_prefetch = 0; /* PyTorch FSDP's default too */
  int fsdp_flag = 0; /* an fsdp-only flag was given */
  int dp_flag = 0;   /* --dp-devices was given */
  c->dp_devices = 2;
  c->gpt.n_layer = 2;
  c->gpt.n_head = 4;
  c->gpt.d_model = 64;
  c->gpt.context = 64;
  int gpt_flag = 0;    /* a gpt-only flag was given */
  int epochs_flag = 0, optim_flag = 0, data_dir_flag = 0;
  c->param_dtype = c->reduce_dtype = XCOLL_FLOAT32;
  c->init_scale = 65536.0; /* GradScaler's 2^16 */
  c->scale_growth_interval = 2000;
  c->powersgd_rank = 1;     /* PyTorch's matrix_approximation_rank */
  c->powersgd_warmup = 1000; /* PyTorch's start_powerSGD_iter */
  int scale_flag = 0, powersgd_flag = 0;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
    switch (opt) {
    case OPT_MODEL: {
      int k = model_kind_parse(optarg);
      if (k < 0)
        die_usage("--model must be mlp, cnn or gpt, got '%s'", optarg);
      c->model = (model_kind)k;
      break;
    }
    case OPT_STRATEGY:
      if (strcmp(optarg, "none") == 0)
        c->strategy = STRATEGY_NONE;
      else if (strcmp(optarg, "ddp") == 0)
        c->strategy = STRATEGY_DDP;
      else if (strcmp(optarg, "fsdp") == 0)
        c->strategy = STRATEGY_FSDP;
      else if (strcmp(optarg, "dp") == 0)
        c->strategy = STRATEGY_DP;
      else
        die_usage("--strategy must be none, dp, ddp or fsdp, got '%s'",
                  optarg);
      break;
    case OPT_N_LAYER:
      c->gpt.n_layer = (int)parse_int("--n-layer", optarg, 1, GPT_MAX_LAYERS);
      gpt_flag = 1;
      break;
    case OPT_N_HEAD:
      c->gpt.n_head = (int)parse_int("--n-head", optarg, 1, 1024);
      gpt_flag = 1;
      break;
    case OPT_D_MODEL:
      c->gpt.d_model = (int)parse_int("--d-model", optarg, 1, 8192);
      gpt_flag = 1;
      break;
    case OPT_CONTEXT:
      c->gpt.context = (int)parse_int("--context", optarg, 1, 4096);
      gpt_flag = 1;
      break;
    case OPT_DATA_FILE:
      c->data_file = optarg;
      gpt_flag = 1;
      break;
    case OPT_DP_DEVICES:
      c->dp_devices = (int)parse_int("--dp-devices", optarg, 1, 256);
      dp_flag = 1;
      break;
    case OPT_SHARDING: {
      int v = fsdp_sharding_parse(optarg);
      if (v < 0)
        die_usage("--sharding must be full_shard, shard_grad_op, no_shard or "
                  "hybrid_shard, got '%s'", optarg);
      c->fsdp.sharding = (fsdp_sharding)v;
      fsdp_flag = 1;
      break;
    }
    case OPT_BACKWARD_PREFETCH: {
      int v = fsdp_prefetch_parse(optarg);
      if (v < 0)
        die_usage("--backward-prefetch must be pre, post or none, got '%s'",
                  optarg);
      c->fsdp.backward_prefetch = (fsdp_prefetch)v;
      fsdp_flag = 1;
      break;
    }
    case OPT_FORWARD_PREFETCH:
      if (strcmp(optarg, "on") == 0)
        c->fsdp.forward_prefetch = 1;
      else if (strcmp(optarg, "off") == 0)
        c->fsdp.forward_prefetch = 0;
      else
        die_usage("--forward-prefetch must be on or off, got '%s'", optarg);
      fsdp_flag = 1;
      break;
    case OPT_FSDP_MIN_PARAMS:
      c->fsdp.min_params =
          (size_t)parse_int("--fsdp-min-params", optarg, 0, INT64_MAX / 2);
      fsdp_flag = 1;
      break;
    case OPT_EPOCHS: c->epochs = (int)parse_int("--epochs", optarg, 1, 100000); epochs_flag = 1; break;
    case OPT_BATCH: c->batch_size = (int)parse_int("--batch-size", optarg, 1, 65536); break;
    case OPT_LR: c->lr = (float)parse_double("--lr", optarg, 0.0, 1e3); break;
    case OPT_OPTIM:
      optim_flag = 1;
      if (strcmp(optarg, "sgd") == 0)
        c->optimizer = OPTIM_SGD;
      else if (strcmp(optarg, "adamw") == 0)
        c->optimizer = OPTIM_ADAMW;
      else
        die_usage("--optimizer must be sgd or adamw, got '%s'", optarg);
      break;
    case OPT_MOMENTUM: c->momentum = (float)parse_double("--momentum", optarg, 0.0, 1.0); break;
    case OPT_WD: c->weight_decay = (float)parse_double("--weight-decay", optarg, 0.0, 10.0); break;
    case OPT_NESTEROV: c->nesterov = 1; break;
    case OPT_SCHEDULE:
      if (strcmp(optarg, "constant") == 0)
        c->schedule = SCHEDULE_CONSTANT;
      else if (strcmp(optarg, "cosine") == 0)
        c->schedule = SCHEDULE_COSINE;
      else
        die_usage("--schedule must be constant or cosine, got '%s'", optarg);
      break;
    case OPT_WARMUP: c->warmup_steps = parse_int("--warmup-steps", optarg, 0, INT64_MAX / 2); break;
    case OPT_CLIP: c->clip_grad_norm = parse_double("--clip-grad-norm", optarg, 0.0, 1e30); break;
    case OPT_FIRST_BUCKET: c->first_bucket_mb = parse_double("--first-bucket-mb", optarg, 1e-6, 1e6); break;
    case OPT_BUCKET: c->bucket_cap_mb = parse_double("--bucket-cap-mb", optarg, 1e-6, 1e6); break;
    case OPT_ACCUM: c->grad_accum = (int)parse_int("--grad-accum", optarg, 1, 65536); break;
    case OPT_SEED: c->seed = (uint64_t)parse_int("--seed", optarg, 0, INT64_MAX); break;
    case OPT_DATA: c->data_dir = optarg; data_dir_flag = 1; break;
    case OPT_CKPT: c->checkpoint_dir = optarg; break;
    case OPT_RESUME: c->resume = 1; break;
    case OPT_CKPT_FORMAT:
      if (strcmp(optarg, "full") == 0)
        c->checkpoint_format = CHECKPOINT_FULL;
      else if (strcmp(optarg, "sharded") == 0)
        c->checkpoint_format = CHECKPOINT_SHARDED;
      else
        die_usage("--checkpoint-format must be full or sharded, got '%s'",
                  optarg);
      break;
    case OPT_INIT_FROM: c->init_from = optarg; break;
    case OPT_EXPORT_INIT: c->export_init = optarg; break;
    case OPT_SAMPLER:
      if (strcmp(optarg, "random") == 0)
        c->sampler_sequential = 0;
      else if (strcmp(optarg, "sequential") == 0)
        c->sampler_sequential = 1;
      else
        die_usage("--sampler must be random or sequential, got '%s'", optarg);
      break;
    case OPT_LOG_EVERY: c->log_every = parse_int("--log-every", optarg, 0, INT64_MAX / 2); break;
    case OPT_PROGRESS_EVERY: c->progress_every = parse_double("--progress-every", optarg, 0.0, 1e6); break;
    case OPT_LOG_JSON: c->log_json = optarg; break;
    case OPT_DROP_LAST: c->drop_last = 1; break;
    case OPT_MAX_STEPS: c->max_steps = parse_int("--max-steps", optarg, 0, INT64_MAX / 2); break;
    case OPT_THREADS: c->threads = (int)parse_int("--threads", optarg, 1, 1024); break;
    case OPT_TRAIN_LIMIT: c->train_limit = (size_t)parse_int("--train-limit", optarg, 0, INT32_MAX); break;
    case OPT_TEST_LIMIT: c->test_limit = (size_t)parse_int("--test-limit", optarg, 0, INT32_MAX); break;
    case OPT_CHANNELS: {
      int a, b;
      char tail;
      if (sscanf(optarg, "%d,%d%c", &a, &b, &tail) != 2 || a < 1 || b < 1 ||
          a > 1024 || b > 1024)
        die_usage("--cnn-channels expects C1,C2 (e.g. 16,32), got '%s'", optarg);
      c->conv1_channels = a;
      c->conv2_channels = b;
      break;
    }
    case OPT_DUMP: c->dump_params = optarg; break;
    case OPT_TRACE: c->trace = optarg; break;
    case OPT_PROFILE: c->profile = 1; break;
    case OPT_PARAM_DTYPE:
    case OPT_REDUCE_DTYPE: {
      int v = mixed_dtype_parse(optarg);
      if (v < 0)
        die_usage("%s must be float32, bfloat16 or float16, got '%s'",
                  opt == OPT_PARAM_DTYPE ? "--param-dtype" : "--reduce-dtype",
                  optarg);
      if (opt == OPT_PARAM_DTYPE)
        c->param_dtype = (xcoll_datatype)v;
      else
        c->reduce_dtype = (xcoll_datatype)v;
      break;
    }
    case OPT_INIT_SCALE:
      c->init_scale = parse_double("--init-scale", optarg, 1e-30, 1e38);
      scale_flag = 1;
      break;
    case OPT_GROWTH_INTERVAL:
      c->scale_growth_interval =
          parse_int("--scale-growth-interval", optarg, 1, INT64_MAX / 2);
      scale_flag = 1;
      break;
    case OPT_COMM_HOOK: {
      int v = comm_hook_parse(optarg);
      if (v < 0)
        die_usage("--comm-hook must be none, fp16, bf16 or powersgd, got '%s'",
                  optarg);
      c->comm_hook = (comm_hook_kind)v;
      break;
    }
    case OPT_POWERSGD_RANK:
      c->powersgd_rank = (int)parse_int("--powersgd-rank", optarg, 1, 1024);
      powersgd_flag = 1;
      break;
    case OPT_POWERSGD_WARMUP:
      c->powersgd_warmup =
          parse_int("--powersgd-warmup", optarg, 0, INT64_MAX / 2);
      powersgd_flag = 1;
      break;
    case OPT_HELP: usage(stdout); exit(0);
    case OPT_VERSION:
      printf("xtrain (xcoll) %s\n", XCOLL_PROJECT_VERSION);
      exit(0);
    default:
      die_usage("unknown option, or option without its value: '%s'",
                argv[optind - 1]);
    }
  }
  if (optind < argc)
    die_usage("unexpected argument '%s'", argv[optind]);
  if (gpt_flag && c->model != MODEL_GPT)
    die_usage("--n-layer, --n-head, --d-model, --context and --data-file need "
              "--model gpt");
  if (c->model == MODEL_GPT) {
    if (c->gpt.d_model % c->gpt.n_head != 0)
      die_usage("--d-model %d is not divisible by --n-head %d (each head "
                "gets d_model / n_head dimensions)", c->gpt.d_model,
                c->gpt.n_head);
    if (c->data_file && data_dir_flag)
      die_usage("give --data-file or --data-dir, not both");
    if (!data_dir_flag)
      c->data_dir = TEXT_DEFAULT_DIR;
    /* A pass over the fortunes is ~550 updates of 64 windows: one epoch is
     * a run of about a minute, and AdamW trains a transformer much faster
     * than SGD at any single learning rate. */
    if (!epochs_flag)
      c->epochs = 1;
    if (!optim_flag)
      c->optimizer = OPTIM_ADAMW;
  }
  if (c->lr < 0.0f)
    c->lr = c->optimizer == OPTIM_ADAMW ? 0.001f : 0.02f;
  if (c->resume && !c->checkpoint_dir)
    die_usage("--resume needs --checkpoint-dir");
  if (dp_flag && c->strategy != STRATEGY_DP)
    die_usage("--dp-devices needs --strategy dp");
  if (c->strategy == STRATEGY_DP && c->batch_size < c->dp_devices)
    die_usage("--strategy dp scatters --batch-size %d over --dp-devices %d: "
              "give at least one sample per replica", c->batch_size,
              c->dp_devices);
  if (fsdp_flag && c->strategy != STRATEGY_FSDP)
    die_usage("--sharding, --backward-prefetch, --forward-prefetch and "
              "--fsdp-min-params need --strategy fsdp");
  /* no_shard replicates parameters and all-reduces gradients: the DDP path. */
  if (c->strategy == STRATEGY_FSDP && c->fsdp.sharding == FSDP_NO_SHARD)
    c->strategy = STRATEGY_DDP;
  check_mixed_flags(c, scale_flag, powersgd_flag);
  if (c->param_dtype != XCOLL_FLOAT32 || c->reduce_dtype != XCOLL_FLOAT32) {
    c->fsdp.param_dtype = c->param_dtype;
    c->fsdp.reduce_dtype = c->reduce_dtype;
  }
  if (c->strategy != STRATEGY_FSDP && c->checkpoint_format == CHECKPOINT_SHARDED)
    die_usage("--checkpoint-format sharded needs --strategy fsdp (other "
              "strategies hold the whole model: they write full checkpoints)");
}

static const char *strategy_label(const config *c) {
  if (c->strategy == STRATEGY_FSDP)
    return "fsdp";
  if (c->strategy == STRATEGY_DP)
    return "dp";
  return c->strategy == STRATEGY_DDP ? "ddp" : "none";
}

static char *config_json(const config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", model_kind_name(c->model));
  cJSON_AddNumberToObject(o, "conv1_channels", c->conv1_channels);
  cJSON_AddNumberToObject(o, "conv2_channels", c->conv2_channels);
  if (c->model == MODEL_GPT) {
    cJSON_AddNumberToObject(o, "n_layer", c->gpt.n_layer);
    cJSON_AddNumberToObject(o, "n_head", c->gpt.n_head);
    cJSON_AddNumberToObject(o, "d_model", c->gpt.d_model);
    cJSON_AddNumberToObject(o, "context", c->gpt.context);
  }
  cJSON_AddStringToObject(o, "strategy", strategy_label(c));
  if (c->strategy == STRATEGY_FSDP) {
    cJSON_AddStringToObject(o, "sharding", fsdp_sharding_name(c->fsdp.sharding));
    cJSON_AddStringToObject(o, "backward_prefetch",
                            fsdp_prefetch_name(c->fsdp.backward_prefetch));
    cJSON_AddBoolToObject(o, "forward_prefetch", c->fsdp.forward_prefetch);
    cJSON_AddNumberToObject(o, "fsdp_min_params", (double)c->fsdp.min_params);
  }
  if (c->strategy == STRATEGY_DP)
    cJSON_AddNumberToObject(o, "dp_devices", c->dp_devices);
  cJSON_AddNumberToObject(o, "epochs", c->epochs);
  cJSON_AddNumberToObject(o, "batch_size", c->batch_size);
  cJSON_AddNumberToObject(o, "lr", c->lr);
  cJSON_AddStringToObject(o, "optimizer", c->optimizer == OPTIM_ADAMW ? "adamw" : "sgd");
  cJSON_AddNumberToObject(o, "momentum", c->momentum);
  cJSON_AddNumberToObject(o, "weight_decay", c->weight_decay);
  cJSON_AddBoolToObject(o, "nesterov", c->nesterov);
  cJSON_AddStringToObject(o, "schedule", c->schedule == SCHEDULE_COSINE ? "cosine" : "constant");
  cJSON_AddNumberToObject(o, "warmup_steps", (double)c->warmup_steps);
  cJSON_AddNumberToObject(o, "clip_grad_norm", c->clip_grad_norm);
  cJSON_AddNumberToObject(o, "first_bucket_mb", c->first_bucket_mb);
  cJSON_AddNumberToObject(o, "bucket_cap_mb", c->bucket_cap_mb);
  cJSON_AddNumberToObject(o, "grad_accum", c->grad_accum);
  cJSON_AddNumberToObject(o, "seed", (double)c->seed);
  cJSON_AddBoolToObject(o, "drop_last", c->drop_last);
  cJSON_AddNumberToObject(o, "train_limit", (double)c->train_limit);
  /* Only when used, so that a float32 run's config (and checkpoint) reads
   * as before. */
  if (c->param_dtype != XCOLL_FLOAT32)
    cJSON_AddStringToObject(o, "param_dtype", mixed_dtype_name(c->param_dtype));
  if (c->reduce_dtype != XCOLL_FLOAT32)
    cJSON_AddStringToObject(o, "reduce_dtype", mixed_dtype_name(c->reduce_dtype));
  if (c->comm_hook != COMM_HOOK_NONE)
    cJSON_AddStringToObject(o, "comm_hook", comm_hook_name(c->comm_hook));
  if (c->comm_hook == COMM_HOOK_POWERSGD) {
    cJSON_AddNumberToObject(o, "powersgd_rank", c->powersgd_rank);
    cJSON_AddNumberToObject(o, "powersgd_warmup", (double)c->powersgd_warmup);
  }
  cJSON_AddStringToObject(o, "sampler", c->sampler_sequential ? "sequential" : "random");
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

/* Share of communication hidden under backward, in [0, 1]; 0 when there
 * was none. Clamped because both times are measured independently. */
static double hidden_share(double comm, double blocked) {
  if (comm <= 0.0)
    return 0.0;
  double share = 1.0 - blocked / comm;
  return share < 0.0 ? 0.0 : share;
}

/* ---- process-wide state of one run ---- */
typedef struct run {
  config cfg;
  xcoll_comm_t comm; /* NULL with --strategy none */
  int rank, world_size;
  FILE *json;
  int tty;
  double progress_at; /* when the next progress line is due (ddp_now), 0 before the first step */
  double progress_from; /* ddp_now at the first step */
  int64_t progress_steps; /* updates since then */
  timeline trace; /* --trace; file NULL when off */
  profile prof;   /* --profile: the updates after the first */
  int64_t profiled_updates;
  /* data */
  dataset train, test;
  float mean, std; /* of the whole training set */
  text_corpus corpus;               /* gpt */
  text_dataset text_train, text_val; /* gpt: windows of the corpus */
  sampler smp;
  float *x;          /* (B, 784) one micro-batch; gpt: (B, T) bytes */
  unsigned char *y;  /* (B); gpt: (B, T) */
  /* model, optimizer, strategy */
  model m;
  optimizer opt;
  strategy strat;
  ddp dp; /* --strategy ddp: strat.impl */
  comm_hook hook; /* --comm-hook, --reduce-dtype under ddp */
  loss_scaler scaler; /* float16 */
  checkpoint_meta meta;
  int resume_sharded; /* --resume reads a sharded set after fsdp's setup */
  /* schedule */
  int64_t micro_per_epoch, steps_per_epoch, schedule_steps, total_steps;
} run;

/* Sums of one logging window (an epoch, or --log-every updates). */
typedef struct window {
  double loss, correct, count; /* summed over this rank's samples */
  double time, comm, blocked;  /* seconds */
  double wire;                 /* bytes this rank sent */
  double skipped;              /* steps skipped by the loss scaler */
} window;

static void window_add(window *w, const window *d) {
  w->loss += d->loss;
  w->correct += d->correct;
  w->count += d->count;
  w->time += d->time;
  w->comm += d->comm;
  w->blocked += d->blocked;
  w->wire += d->wire;
  w->skipped += d->skipped;
}

static void fail_v(run *r, int agreed, const char *fmt, va_list ap) {
  fprintf(stderr, "xtrain[rank %d]: error: ", r->rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  if (r->trace.file)
    fflush(r->trace.file); /* xcoll-trace-merge reads an unclosed file */
  if (r->comm) {
    /* Tell peers, so they fail fast instead of waiting for a timeout; but
     * when every rank already knows (agreed), an abort right after the
     * collective that told them could cut a peer still finishing it. */
    if (!agreed)
      xcoll_comm_abort(r->comm);
    xcoll_comm_destroy(r->comm);
  }
  exit(1);
}

static void fail(run *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(r, 0, fmt, ap);
  va_end(ap);
}

/* A failure every rank has learned from a collective and stops on. */
static void fail_together(run *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(r, 1, fmt, ap);
  va_end(ap);
}

static void check_xcoll(run *r, xcoll_status st, const char *what) {
  if (st != XCOLL_SUCCESS)
    fail(r, "%s failed: %s: %s", what, xcoll_strerror(st),
         xcoll_comm_last_error(r->comm));
}

/* In-place sum over ranks of n doubles; nothing to do with one process. */
static void sum_over_ranks(run *r, double *v, size_t n) {
  if (r->comm)
    check_xcoll(r, xcoll_allreduce(v, v, n, XCOLL_FLOAT64, XCOLL_SUM, r->comm),
                "xcoll_allreduce of statistics");
}

/* Accuracy and mean loss on this rank's shard (r, r+W, ...) of the test
 * set, combined over ranks. Under a lockstep strategy (fsdp, whose forward
 * runs collectives) every rank runs as many batches as rank 0, which has
 * the most samples; a rank out of samples runs its first sample again and
 * does not count it. */
static int is_gpt(const run *r) { return r->cfg.model == MODEL_GPT; }

/* Samples of the training and the test (gpt: validation) set. */
static size_t train_count(const run *r) {
  return is_gpt(r) ? r->text_train.count : r->train.count;
}
static size_t test_count(const run *r) {
  return is_gpt(r) ? r->text_val.count : r->test.count;
}

/* r->x and r->y for samples indices[0..n) of the training or test set. */
static void fill_batch(run *r, int test, const size_t *indices, int n) {
  if (is_gpt(r))
    text_fill_batch(test ? &r->text_val : &r->text_train, indices, n, r->x,
                    r->y);
  else
    data_fill_batch(test ? &r->test : &r->train, indices, n, r->mean, r->std,
                    r->x, r->y);
}

/* For gpt, *acc is exp(-loss), the geometric mean of the probability given
 * to the right next byte (1 / perplexity): higher is better, as accuracy,
 * so that checkpoint_best.safetensors keeps the lowest validation loss. */
static void evaluate(run *r, double *acc, double *loss) {
  size_t idx[65536];
  double totals[3] = {0, 0, 0}; /* correct, count, loss sum */
  size_t count = test_count(r);
  int B = r->m.max_batch > 65536 ? 65536 : r->m.max_batch;
  size_t W = (size_t)r->world_size;
  size_t mine = count > (size_t)r->rank
                    ? (count - (size_t)r->rank + W - 1) / W : 0;
  size_t most = (count + W - 1) / W; /* rank 0's */
  size_t batches = ((r->strat.lockstep ? most : mine) + (size_t)B - 1) / (size_t)B;
  size_t i = (size_t)r->rank;
  for (size_t b = 0; b < batches; b++) {
    int n = 0;
    for (; n < B && i < count; n++, i += W)
      idx[n] = i;
    int counted = n;
    if (n == 0) {
      idx[0] = 0;
      n = 1;
    }
    fill_batch(r, 1, idx, n);
    int correct = 0;
    strategy_before_forward(&r->strat);
    double l = model_forward(&r->m, r->x, r->y, n, &correct);
    if (counted > 0) {
      totals[2] += l;
      totals[0] += correct;
      totals[1] += n;
    }
  }
  check_xcoll(r, strategy_release(&r->strat), "releasing gathered parameters");
  sum_over_ranks(r, totals, 3);
  *acc = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
  *loss = totals[1] > 0 ? totals[2] / totals[1] : 0.0;
  if (is_gpt(r))
    *acc = exp(-*loss);
}

static void json_line(run *r, cJSON *o) {
  if (r->json) {
    char *s = cJSON_PrintUnformatted(o);
    fprintf(r->json, "%s\n", s);
    fflush(r->json);
    free(s);
  }
  cJSON_Delete(o);
}

/* Live progress on rank 0. A terminal gets a bar redrawn every step. Any
 * other stdout (xcollrun's pipe, a file) would show nothing between epoch
 * lines, so it gets one line every --progress-every seconds: rank 0's own
 * running loss and samples/s (no collective: the ranks are not synchronised
 * for it). */
static void progress(run *r, int epoch, int64_t step, int64_t steps,
                     double loss) {
  if (r->rank != 0)
    return;
  if (!r->tty) {
    double every = r->cfg.progress_every;
    if (every <= 0)
      return;
    double now = ddp_now();
    r->progress_steps++;
    if (r->progress_at == 0) {
      r->progress_from = now;
      r->progress_at = now + every;
      return;
    }
    if (now < r->progress_at)
      return;
    double elapsed = now - r->progress_from;
    double sps = elapsed > 0 ? (double)r->progress_steps *
                                   (double)r->cfg.batch_size * r->cfg.grad_accum *
                                   r->world_size /
                                   elapsed
                             : 0.0;
    printf("progress: epoch %d step %" PRId64 "/%" PRId64 " (%.0f%%) loss %.4f "
           "(rank 0) samples/s %.0f\n",
           epoch, step, steps, 100.0 * (double)step / (double)steps, loss, sps);
    fflush(stdout);
    r->progress_at = now + every;
    return;
  }
  int width = 30, filled = (int)(width * (double)step / (double)steps);
  char bar[64];
  for (int i = 0; i < width; i++)
    bar[i] = i < filled ? '=' : ' ';
  bar[width] = '\0';
  printf("\repoch %d [%s] %" PRId64 "/%" PRId64 " loss %.4f", epoch, bar, step,
         steps, loss);
  fflush(stdout);
}

/* Save dir/<stem>.safetensors (or, fsdp sharded, the set of
 * checkpoint_fsdp.h). Collective under fsdp; rank 0 alone otherwise. */
static void save_checkpoint(run *r, const char *stem) {
  char err[1024];
  if (r->strat.kind == STRATEGY_FSDP) {
    if (fsdp_checkpoint_save(&r->strat, &r->opt, &r->meta,
                             r->cfg.checkpoint_format, r->cfg.checkpoint_dir,
                             stem, r->comm, r->rank, r->world_size, err,
                             sizeof err) != 0) {
      /* A sharded save fails on every rank at once; a full one on rank 0. */
      if (r->cfg.checkpoint_format == CHECKPOINT_SHARDED)
        fail_together(r, "%s", err);
      fail(r, "%s", err);
    }
    return;
  }
  if (r->rank != 0)
    return;
  char name[256];
  snprintf(name, sizeof name, "%s.safetensors", stem);
  if (checkpoint_save(r->cfg.checkpoint_dir, name, &r->m, &r->opt, &r->meta,
                      err, sizeof err) != 0)
    fail(r, "%s", err);
}

/* --dump-params: the whole model in registration order, gathered from the
 * shards under fsdp, so that files of every strategy compare directly. */
static void dump_params(run *r) {
  float *all = malloc(r->m.num_elements * sizeof(float));
  if (!all)
    fail(r, "out of memory gathering parameters for --dump-params");
  check_xcoll(r, strategy_gather_params(&r->strat, all),
              "gathering parameters for --dump-params");
  char path[4096];
  snprintf(path, sizeof path, "%s.rank%d", r->cfg.dump_params, r->rank);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(all, sizeof(float), r->m.num_elements, f) !=
                r->m.num_elements || fclose(f) != 0)
    fail(r, "cannot write --dump-params file %s: %s", path, strerror(errno));
  free(all);
}

/* ---- --trace ---- */

/* Wraps the backward hook to time each layer's backward: the span of a
 * layer runs from the end of the previous layer's hook calls (or the start
 * of backward) to the first hook call for one of its tensors, so it includes
 * the activation backward (ReLU, pooling) just below the next layer and, for
 * the last layer, the loss. Time in the strategy's hook (polling and issuing
 * collectives) falls between layer spans. */
typedef struct layer_tracer {
  timeline *trace;
  const model *m;
  grad_ready_fn inner; /* the strategy's hook */
  void *inner_ctx;
  double mark;  /* seconds: end of the previous hook call or start of backward */
  int previous; /* tensor of the previous hook call; -1 at start of backward */
} layer_tracer;

static size_t layer_name_length(const char *tensor) {
  return strcspn(tensor, ".");
}

static void traced_grad_ready(void *ctx, int param_index) {
  layer_tracer *lt = ctx;
  double now = ddp_now();
  const char *name = lt->m->views[param_index].name;
  size_t len = layer_name_length(name);
  const char *prev = lt->previous >= 0 ? lt->m->views[lt->previous].name : "";
  if (lt->previous < 0 || layer_name_length(prev) != len ||
      strncmp(prev, name, len) != 0) {
    char span[64];
    snprintf(span, sizeof span, "backward %.*s", (int)len, name);
    timeline_span(lt->trace, span, "compute", TIMELINE_TID_STEPS, lt->mark, now,
                  NULL);
  }
  if (lt->inner)
    lt->inner(lt->inner_ctx, param_index);
  lt->previous = param_index;
  lt->mark = ddp_now();
}

/* One span per bucket of the last synchronised backward, from the
 * xcoll_iallreduce call to the first time completion was seen. */
static void trace_buckets(run *r, const ddp *d, const model *m) {
  for (int i = 0; i < d->num_buckets; i++) {
    const ddp_bucket *b = &d->buckets[i];
    if (!b->launched)
      continue;
    char name[48], args[256];
    snprintf(name, sizeof name, "allreduce bucket %d", i);
    snprintf(args, sizeof args,
             "\"bucket\":%d,\"bytes\":%zu,\"tensors\":\"%s..%s\","
             "\"completion_seen_by\":\"%s\"",
             i, b->count * sizeof(float), m->views[b->first_param].name,
             m->views[b->last_param].name,
             b->done_at_wait ? "xcoll_wait" : "xcoll_test");
    timeline_span(&r->trace, name, "ddp", TIMELINE_TID_STEPS + 1 + i,
                  b->launch_time, b->done_time, args);
  }
}

/* One span per collective of the last FSDP micro-batch, on one track per
 * communicator (its operations run one after the other). */
static void trace_fsdp_ops(run *r) {
  const fsdp_op_record *ops;
  int n = fsdp_last_ops(&r->strat, &ops);
  for (int i = 0; i < n; i++) {
    const unit *u = &r->strat.plan.units[ops[i].unit];
    char name[48], args[160];
    snprintf(name, sizeof name, "%s unit %d", ops[i].what, ops[i].unit);
    snprintf(args, sizeof args,
             "\"unit\":%d,\"bytes\":%zu,\"tensors\":\"%s..%s\"",
             ops[i].unit, ops[i].bytes, r->m.views[u->first_param].name,
             r->m.views[u->last_param].name);
    timeline_span(&r->trace, name, "fsdp",
                  TIMELINE_TID_STEPS + 1 + ops[i].across_nodes,
                  ops[i].issue_time, ops[i].done_time, args);
  }
}

/* ---- setup ---- */

static void setup_comm(run *r) {
  r->world_size = 1;
  if (r->cfg.strategy == STRATEGY_NONE || r->cfg.strategy == STRATEGY_DP)
    return; /* dp: one process */
  xcoll_status st = xcoll_comm_init_env(&r->comm);
  if (st != XCOLL_SUCCESS) {
    fprintf(stderr, "xtrain: error: xcoll_comm_init_env failed: %s: %s\n",
            xcoll_strerror(st), xcoll_last_error());
    exit(1);
  }
  xcoll_comm_rank(r->comm, &r->rank);
  xcoll_comm_size(r->comm, &r->world_size);
}

static void setup_outputs(run *r) {
  const config *c = &r->cfg;
  r->tty = isatty(STDOUT_FILENO);
  if (c->trace) {
    char trace_err[4200];
    if (timeline_open(&r->trace, c->trace, r->rank, trace_err,
                      sizeof trace_err) != 0)
      fail(r, "%s", trace_err);
  }
  if (r->rank == 0 && c->log_json) {
    r->json = fopen(c->log_json, c->resume ? "a" : "w");
    if (!r->json)
      fail(r, "cannot open --log-json file %s: %s", c->log_json,
           strerror(errno));
  }
}

/* gpt: the corpus, 90% training and 10% validation by offset. */
static void load_text(run *r) {
  char err[1024];
  const config *c = &r->cfg;
  if (text_load(&r->corpus, c->data_file, c->data_dir, err, sizeof err) != 0)
    fail(r, "%s", err);
  text_split(&r->corpus, 0.1, c->gpt.context, &r->text_train, &r->text_val);
  if (r->text_train.count == 0 || r->text_val.count == 0)
    fail(r, "%s has %zu bytes: too short for one training and one validation "
         "window of --context + 1 = %d bytes (the last 10%% is validation; "
         "give at least %d bytes, or a shorter --context)",
         c->data_file ? c->data_file : c->data_dir, r->corpus.size,
         c->gpt.context + 1, 10 * (c->gpt.context + 1));
  if (c->train_limit > 0 && c->train_limit < r->text_train.count)
    r->text_train.count = c->train_limit;
  if (c->test_limit > 0 && c->test_limit < r->text_val.count)
    r->text_val.count = c->test_limit;
}

static void load_data(run *r) {
  char err[1024];
  if (is_gpt(r)) {
    load_text(r);
    return;
  }
  if (data_load(&r->train, r->cfg.data_dir, "train", err, sizeof err) != 0)
    fail(r, "%s", err);
  if (data_load(&r->test, r->cfg.data_dir, "t10k", err, sizeof err) != 0)
    fail(r, "%s", err);
  data_stats(&r->train, &r->mean, &r->std); /* of the whole training set */
  data_truncate(&r->train, r->cfg.train_limit);
  data_truncate(&r->test, r->cfg.test_limit);
}

/* After every rank tried to read its checkpoint (ok, err: this rank's
 * outcome; meta->step what it read): all ranks resume, from the same step,
 * or all fail. Nobody says "resumed" before every rank has read its part:
 * the lowest failing rank is named on every rank, and that rank gives its
 * own reason. what names the checkpoint. */
static void agree_on_resume(run *r, int ok, const char *err,
                            const char *what) {
  int64_t mine[2] = {ok ? 1 : 0, r->meta.step};
  int64_t *all = calloc((size_t)r->world_size * 2, sizeof *all);
  if (!all)
    fail(r, "out of memory agreeing on --resume");
  if (r->comm) {
    xcoll_status st = xcoll_allgather(mine, all, 2, XCOLL_INT64, r->comm);
    if (st != XCOLL_SUCCESS)
      fail(r, "--resume: agreeing with the other ranks on %s: %s", what,
           xcoll_strerror(st));
  } else {
    memcpy(all, mine, sizeof mine);
  }
  int failed = -1, other = -1;
  for (int k = 0; k < r->world_size; k++) {
    if (!all[2 * k] && failed < 0)
      failed = k;
    if (all[2 * k + 1] != all[1] && other < 0)
      other = k;
  }
  int64_t step0 = all[1], step_other = other >= 0 ? all[2 * other + 1] : 0;
  free(all);
  if (!ok)
    fail_together(r, "%s", err);
  if (failed >= 0)
    fail_together(r, "--resume: rank %d could not read its part of %s (see "
                  "its error): no rank resumed", failed, what);
  if (other >= 0)
    fail_together(r, "--resume: %s: rank 0 read step %" PRId64 " but rank %d "
                  "read step %" PRId64 ": no rank resumed", what, step0,
                  other, step_other);
}

enum { RESUME_NONE = 0, RESUME_FULL = 1, RESUME_SHARDED = 2 };

/* Rank 0's choice, which every rank follows: from its directory, where a
 * shared one is what all ranks see. */
static int resume_choice(run *r, const char *path, const char *index) {
  const config *c = &r->cfg;
  int64_t choice = RESUME_NONE;
  if (r->rank == 0) {
    struct stat full_st, sharded_st;
    int have_full = stat(path, &full_st) == 0;
    int have_sharded = stat(index, &sharded_st) == 0;
    choice = have_full ? RESUME_FULL : have_sharded ? RESUME_SHARDED
                                                    : RESUME_NONE;
    if (have_sharded && have_full) {
      /* The format was changed between runs: the newer one is where
       * training stopped; --checkpoint-format decides a tie. */
      double full_t = full_st.st_mtim.tv_sec + 1e-9 * full_st.st_mtim.tv_nsec;
      double sharded_t =
          sharded_st.st_mtim.tv_sec + 1e-9 * sharded_st.st_mtim.tv_nsec;
      if (sharded_t > full_t ||
          (sharded_t == full_t && c->checkpoint_format == CHECKPOINT_SHARDED))
        choice = RESUME_SHARDED;
      printf("xtrain: --resume: both %s and %s exist; reading the newer, "
             "%s\n", path, index, choice == RESUME_SHARDED ? index : path);
    }
  }
  if (r->comm) {
    xcoll_status st = xcoll_broadcast(&choice, &choice, 1, XCOLL_INT64, 0,
                                      r->comm);
    if (st != XCOLL_SUCCESS)
      fail(r, "--resume: learning rank 0's choice of checkpoint: %s",
           xcoll_strerror(st));
  }
  return (int)choice;
}

/* --resume: dir/checkpoint_latest.safetensors (full, any strategy) or the
 * sharded set (checkpoint_latest.index.json, fsdp only). When both are
 * there (the format was changed between runs), the newer one.
 * A full one is read here, into the whole model; a sharded one once fsdp
 * has made the shards (resume_sharded). */
static void resume_full(run *r) {
  const config *c = &r->cfg;
  checkpoint_meta *meta = &r->meta;
  char err[1024];
  /* A save killed mid-write leaves a temporary file; none is ever read. */
  if (checkpoint_clean_stale(c->checkpoint_dir, err, sizeof err) < 0)
    fail(r, "%s", err);
  char path[4096], index[4096];
  snprintf(path, sizeof path, "%s/checkpoint_latest.safetensors",
           c->checkpoint_dir);
  snprintf(index, sizeof index, "%s/checkpoint_latest.index.json",
           c->checkpoint_dir);
  int choice = resume_choice(r, path, index);
  if (choice == RESUME_SHARDED) {
    if (c->strategy != STRATEGY_FSDP)
      fail(r, "%s is a sharded FSDP checkpoint: resume it with --strategy "
           "fsdp at the world size that wrote it (and save with "
           "--checkpoint-format full to resume under another strategy)",
           index);
    r->resume_sharded = 1;
    return;
  }
  if (choice == RESUME_NONE) {
    if (r->rank == 0)
      fprintf(stderr, "xtrain: --resume: no %s yet, starting from scratch\n",
              path);
    return;
  }
  char saved_config[sizeof meta->config];
  memcpy(saved_config, meta->config, sizeof saved_config);
  int ok = checkpoint_load(path, &r->m, &r->opt, meta, err, sizeof err) == 0;
  agree_on_resume(r, ok, err, path);
  memcpy(meta->config, saved_config, sizeof saved_config);
  if (r->rank == 0)
    printf("resumed from %s: epoch %d, step %" PRId64 "\n", path, meta->epoch,
           meta->step);
}

/* Model and its initial parameters, from the seed or the checkpoint. */
static void setup_model(run *r) {
  const config *c = &r->cfg;
  int created = c->model == MODEL_GPT
                    ? model_create_gpt(&r->m, &c->gpt, c->batch_size)
                    : model_create(&r->m, c->model, c->conv1_channels,
                                   c->conv2_channels, c->batch_size);
  if (created != 0)
    fail(r, "out of memory creating the %s model for batch %d",
         model_kind_name(c->model), c->batch_size);
  rng init_rng;
  rng_seed(&init_rng, c->seed);
  model_init_params(&r->m, &init_rng);
  char init_err[1024];
  if (c->init_from &&
      init_params_load(c->init_from, &r->m, init_err, sizeof init_err) != 0)
    fail(r, "%s", init_err);
  if (c->export_init && r->rank == 0) {
    if (init_params_export(c->export_init, &r->m, c->seed, r->mean, r->std,
                           init_err, sizeof init_err) != 0)
      fail(r, "%s", init_err);
    printf("xtrain: wrote the initial parameters to %s\n", c->export_init);
  }
  if (optim_create(&r->opt, c->optimizer, r->m.num_elements, c->lr,
                   c->momentum, c->weight_decay, c->nesterov) != 0)
    fail(r, "out of memory creating the optimizer state");

  checkpoint_meta *meta = &r->meta;
  memset(meta, 0, sizeof *meta);
  char *cfg_json = config_json(c);
  snprintf(meta->config, sizeof meta->config, "%s", cfg_json ? cfg_json : "{}");
  free(cfg_json);
  meta->rng_state = init_rng;
  if (c->resume)
    resume_full(r);
  if (c->checkpoint_dir && r->rank == 0)
    mkdir(c->checkpoint_dir, 0777); /* an existing directory is fine */
}

static void print_ddp_layout(run *r) {
  const ddp *d = &r->dp;
  printf("ddp: %d ranks on backend %s, %d bucket(s), the first of at most "
         "%.3g MiB, the others of at most %.3g MiB\n",
         r->world_size, xcoll_comm_backend(r->comm), d->num_buckets,
         r->cfg.first_bucket_mb, r->cfg.bucket_cap_mb);
  for (int i = 0; i < d->num_buckets; i++) {
    const ddp_bucket *b = &d->buckets[i];
    printf("ddp: bucket %d: %d tensors (", i,
           b->last_param - b->first_param + 1);
    for (int p = b->last_param; p >= b->first_param; p--)
      printf("%s%s", r->m.views[p].name, p > b->first_param ? ", " : "");
    printf("), %zu bytes (%.3f MiB)\n", b->count * sizeof(float),
           (double)(b->count * sizeof(float)) / (1024.0 * 1024.0));
  }
}

static void print_fsdp_layout(run *r) {
  const config *c = &r->cfg;
  printf("fsdp: %d ranks on backend %s, %s, backward prefetch %s, forward "
         "prefetch %s, %d unit(s)\n",
         r->world_size, xcoll_comm_backend(r->comm), r->strat.name,
         fsdp_prefetch_name(c->fsdp.backward_prefetch),
         c->fsdp.forward_prefetch ? "on" : "off", r->strat.plan.num_units);
  for (int i = 0; i < r->strat.plan.num_units; i++) {
    const unit *u = &r->strat.plan.units[i];
    printf("fsdp: unit %d: %s..%s, %zu parameters\n", i,
           r->m.views[u->first_param].name, r->m.views[u->last_param].name,
           u->count);
  }
}

/* Communication hook (ddp) and loss scaler (float16), after the strategy. */
static void setup_mixed(run *r) {
  const config *c = &r->cfg;
  if (c->strategy == STRATEGY_DDP && c->comm_hook != COMM_HOOK_NONE) {
    if (comm_hook_init(&r->hook, &r->dp, c->comm_hook, c->reduce_dtype,
                       c->powersgd_rank, c->powersgd_warmup,
                       c->seed + 0x9e3779b97f4a7c15ull) != 0)
      fail(r, "out of memory setting up --comm-hook %s",
           comm_hook_name(c->comm_hook));
  }
  int fp16 = c->param_dtype == XCOLL_FLOAT16 || c->reduce_dtype == XCOLL_FLOAT16;
  loss_scaler_init(&r->scaler, fp16, c->init_scale, c->scale_growth_interval);
  if (r->rank != 0 || (c->comm_hook == COMM_HOOK_NONE &&
                       c->param_dtype == XCOLL_FLOAT32 &&
                       c->reduce_dtype == XCOLL_FLOAT32))
    return;
  printf("mixed precision: param_dtype %s, reduce_dtype %s, comm_hook %s",
         mixed_dtype_name(c->param_dtype), mixed_dtype_name(c->reduce_dtype),
         comm_hook_name(c->comm_hook));
  if (c->comm_hook == COMM_HOOK_POWERSGD)
    printf(" (rank %d, %d matrices compressed, plain for the first %" PRId64
           " steps)", c->powersgd_rank, r->hook.num_matrices,
           c->powersgd_warmup);
  if (fp16)
    printf(", dynamic loss scale from %g, doubled after %" PRId64
           " good steps", c->init_scale, c->scale_growth_interval);
  printf("\n");
}

/* The strategy, and the optimizer over what it lets this rank update. */
static void setup_strategy(run *r) {
  const config *c = &r->cfg;
  if (c->strategy == STRATEGY_NONE) {
    strategy_init_none(&r->strat, &r->m);
  } else if (c->strategy == STRATEGY_DP) {
    char err[1024];
    if (strategy_init_dp(&r->strat, &r->m, c->dp_devices, err, sizeof err) !=
        XCOLL_SUCCESS)
      fail(r, "setting up dp: %s", err);
    printf("dp: %d replicas (threads) in one process, batch %d scattered in "
           "chunks of %d\n", c->dp_devices, c->batch_size,
           (c->batch_size + c->dp_devices - 1) / c->dp_devices);
  } else if (c->strategy == STRATEGY_DDP) {
    check_xcoll(r, strategy_init_ddp(&r->strat, &r->m, &r->dp, r->comm,
                                     c->first_bucket_mb, c->bucket_cap_mb),
                "broadcast of parameters");
    if (r->rank == 0)
      print_ddp_layout(r);
  } else {
    fsdp_config fc = c->fsdp;
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    fc.local_world_size = lws && *lws ? atoi(lws) : r->world_size;
    if (fc.sharding == FSDP_HYBRID_SHARD && fc.local_world_size < 1)
      fail(r, "--sharding hybrid_shard needs LOCAL_WORLD_SIZE >= 1 (ranks "
              "per node, set by xcollrun), got '%s'", lws);
    char err[1024];
    xcoll_status st =
        strategy_init_fsdp(&r->strat, &r->m, r->comm, &fc, err, sizeof err);
    if (st != XCOLL_SUCCESS)
      fail(r, "setting up fsdp: %s", err);
    /* The shards are what the optimizer updates: state for them only,
     * this rank's chunks of the whole model's (zeros, or a full
     * checkpoint's). */
    optimizer full_opt = r->opt;
    if (optim_create(&r->opt, c->optimizer, r->strat.count, c->lr, c->momentum,
                     c->weight_decay, c->nesterov) != 0)
      fail(r, "out of memory creating the optimizer state");
    for (int i = 0; i < r->opt.num_state; i++)
      fsdp_shard_from_full(&r->strat, full_opt.state[i], r->opt.state[i]);
    r->opt.step = full_opt.step;
    optim_free(&full_opt);
    if (r->resume_sharded) {
      char saved_config[sizeof r->meta.config];
      memcpy(saved_config, r->meta.config, sizeof saved_config);
      int ok = fsdp_checkpoint_load_sharded(&r->strat, &r->opt, &r->meta,
                                            c->checkpoint_dir,
                                            "checkpoint_latest", r->rank,
                                            r->world_size, err,
                                            sizeof err) == 0;
      char what[4200];
      snprintf(what, sizeof what, "%s/checkpoint_latest.index.json",
               c->checkpoint_dir);
      agree_on_resume(r, ok, err, what);
      memcpy(r->meta.config, saved_config, sizeof saved_config);
      if (r->rank == 0)
        printf("resumed from %s/checkpoint_latest.index.json (sharded): "
               "epoch %d, step %" PRId64 "\n", c->checkpoint_dir,
               r->meta.epoch, r->meta.step);
    }
    if (r->rank == 0)
      print_fsdp_layout(r);
  }
  strategy_attach(&r->strat);
  strategy_count_memory(&r->strat, r->opt.num_state);
  setup_mixed(r);
}

static layer_tracer tracer;

static void setup_trace(run *r) {
  memset(&tracer, 0, sizeof tracer);
  if (!r->trace.file)
    return;
  /* dp's layers run on several threads at once: its trace has one span
   * per micro-batch, without layers. */
  if (r->cfg.strategy != STRATEGY_DP) {
    tracer.trace = &r->trace;
    tracer.m = &r->m;
    tracer.inner = r->m.grad_ready;
    tracer.inner_ctx = r->m.grad_ready_ctx;
    r->m.grad_ready = traced_grad_ready;
    r->m.grad_ready_ctx = &tracer;
  }
  timeline_name_track(&r->trace, TIMELINE_TID_STEPS, "xtrain steps");
  for (int i = 0; r->cfg.strategy == STRATEGY_DDP && i < r->dp.num_buckets;
       i++) {
    char track[48];
    snprintf(track, sizeof track, "xtrain allreduce bucket %d", i);
    timeline_name_track(&r->trace, TIMELINE_TID_STEPS + 1 + i, track);
  }
  if (r->cfg.strategy == STRATEGY_FSDP) {
    timeline_name_track(&r->trace, TIMELINE_TID_STEPS + 1,
                        "xtrain fsdp collectives");
    if (r->cfg.fsdp.sharding == FSDP_HYBRID_SHARD)
      timeline_name_track(&r->trace, TIMELINE_TID_STEPS + 2,
                          "xtrain fsdp allreduce across nodes");
  }
}

static void setup_schedule(run *r) {
  const config *c = &r->cfg;
  if (sampler_init(&r->smp, train_count(r), r->rank, r->world_size,
                   c->drop_last, c->seed) != 0)
    fail(r, "out of memory creating the sampler");
  r->smp.shuffle = !c->sampler_sequential;
  int B = c->batch_size, K = c->grad_accum;
  r->micro_per_epoch = c->drop_last
                           ? (int64_t)(r->smp.num_samples / B)
                           : (int64_t)((r->smp.num_samples + B - 1) / B);
  r->steps_per_epoch = (r->micro_per_epoch + K - 1) / K;
  if (r->steps_per_epoch == 0)
    fail(r, "no complete batch: %zu samples per rank, batch size %d",
         r->smp.num_samples, B);
  /* The schedule spans the configured epochs; --max-steps only stops early,
   * so a run cut by it and resumed follows the same learning rates. */
  r->schedule_steps = r->steps_per_epoch * c->epochs;
  r->total_steps = r->schedule_steps;
  if (c->max_steps > 0 && c->max_steps < r->total_steps)
    r->total_steps = c->max_steps;
  r->x = malloc((size_t)B * r->m.sample_inputs * sizeof(float));
  r->y = malloc((size_t)B * r->m.sample_targets);
  if (!r->x || !r->y)
    fail(r, "out of memory for a batch of %d", B);
}

static void print_memory(run *r) {
  const strategy_memory *mem = &r->strat.memory;
  size_t total = mem->param_bytes + mem->grad_bytes + mem->optim_bytes;
  printf("memory: rank %d holds %zu bytes (%.3f MiB) of parameters + "
         "gradients + optimizer state outside gathers: parameters %zu, "
         "gradients %zu, optimizer %zu\n",
         r->rank, total, (double)total / (1024.0 * 1024.0), mem->param_bytes,
         mem->grad_bytes, mem->optim_bytes);
}

/* ---- one update ---- */

/* float16 loss scaling: unscale this rank's gradients (all of them under
 * ddp, its shard under fsdp), agree over ranks whether any is inf or nan
 * (an all-reduce of one flag), update the scale; 1 when the step must be
 * skipped. */
static int scaler_says_skip(run *r) {
  int32_t found =
      loss_scaler_unscale(&r->scaler, r->strat.grads, r->strat.count);
  if (r->comm) {
    check_xcoll(r, xcoll_allreduce(&found, &found, 1, XCOLL_INT32, XCOLL_MAX,
                                   r->comm),
                "all-reduce of the loss scaler's inf/nan flag");
    r->strat.wire_bytes += mixed_wire_allreduce(sizeof found, r->world_size);
  }
  double before = r->scaler.scale;
  int skip = loss_scaler_update(&r->scaler, found);
  if (skip && r->rank == 0) {
    if (r->tty)
      printf("\n");
    printf("loss scaler: inf/nan in the gradients, step %" PRId64
           " skipped (%" PRId64 " so far), scale %g -> %g\n",
           r->meta.step + 1, r->scaler.skipped_steps, before,
           r->scaler.scale);
  }
  return skip;
}

/* --profile: charge the time since the previous lap to part. */
static void lap(profile *prof, profile_part part) {
  if (prof)
    profile_lap(prof, part);
}

/* Runs update s of the epoch (its K micro-batches, the strategy's
 * communication and the optimizer step); returns its sums in *w. */
static void train_step(run *r, int epoch, int64_t s, window *w) {
  const config *c = &r->cfg;
  int B = c->batch_size, K = c->grad_accum;
  memset(w, 0, sizeof *w);
  /* --profile: laps only in training steps, not in evaluation. The first
   * update (page faults, OpenBLAS's buffers) is not counted. */
  profile *prof = c->profile ? &r->prof : NULL;
  if (prof && r->profiled_updates == 1)
    profile_reset(prof);
  r->m.profile = prof;
  if (prof)
    profile_start(prof);
  double t0 = ddp_now();
  size_t wire_before = r->strat.wire_bytes;
  int64_t m0 = s * K, m1 = m0 + K;
  if (m1 > r->micro_per_epoch)
    m1 = r->micro_per_epoch;
  /* Samples in this update on this rank, so that the accumulated gradient
   * is the mean over all of them. */
  size_t step_samples = 0;
  for (int64_t mb = m0; mb < m1; mb++) {
    size_t lo = (size_t)mb * B, hi = lo + B;
    step_samples += (hi > r->smp.num_samples ? r->smp.num_samples : hi) - lo;
  }
  for (int64_t mb = m0; mb < m1; mb++) {
    size_t lo = (size_t)mb * B;
    int n = (int)((lo + B > r->smp.num_samples) ? r->smp.num_samples - lo
                                                : (size_t)B);
    double t_load = ddp_now();
    fill_batch(r, 0, r->smp.indices + lo, n);
    lap(prof, PROFILE_OTHER);
    double t_forward = ddp_now();
    timeline_span(&r->trace, "load batch", "data", TIMELINE_TID_STEPS, t_load,
                  t_forward, NULL);
    int correct = 0;
    int sync = (mb == m1 - 1);
    float loss_scale = 1.0f / (float)step_samples;
    if (r->scaler.enabled) /* GradScaler: the loss times the scale */
      loss_scale = (float)(r->scaler.scale / (double)step_samples);
    if (r->strat.forward_backward) {
      /* dp: replicate, scatter, forward and backward on every replica,
       * gather, reduce */
      double loss = r->strat.forward_backward(&r->strat, r->x, r->y, n,
                                              loss_scale, &correct);
      lap(prof, PROFILE_MODEL);
      double t_done = ddp_now();
      timeline_span(&r->trace, "dp forward+backward", "compute",
                    TIMELINE_TID_STEPS, t_forward, t_done, NULL);
      w->loss += loss;
      w->correct += correct;
      w->count += n;
      w->comm += r->strat.last.comm_time;
      w->blocked += r->strat.last.blocked_time;
      continue;
    }
    strategy_before_forward(&r->strat);
    lap(prof, PROFILE_HOOKS);
    double loss = model_forward(&r->m, r->x, r->y, n, &correct);
    lap(prof, PROFILE_MODEL);
    w->loss += loss;
    w->correct += correct;
    w->count += n;
    double t_backward = ddp_now();
    timeline_span(&r->trace, "forward", "compute", TIMELINE_TID_STEPS,
                  t_forward, t_backward, NULL);
    strategy_before_backward(&r->strat, sync);
    lap(prof, PROFILE_HOOKS);
    tracer.mark = t_backward;
    tracer.previous = -1;
    model_backward(&r->m, n, loss_scale);
    lap(prof, PROFILE_MODEL);
    double t_wait = ddp_now();
    if (r->trace.file) {
      char args[64];
      snprintf(args, sizeof args, "\"micro_batch\":%" PRId64 ",\"sync\":%d",
               mb - m0, r->comm ? sync : 0);
      timeline_span(&r->trace, "backward", "compute", TIMELINE_TID_STEPS,
                    t_backward, t_wait, args);
    }
    check_xcoll(r, strategy_after_backward(&r->strat),
                r->cfg.strategy == STRATEGY_FSDP ? "gradient reduce-scatter"
                                                 : "gradient all-reduce");
    lap(prof, PROFILE_COMM_WAIT);
    /* DDP communicates on the last micro-batch, FSDP on every one. */
    int fsdp_run = r->cfg.strategy == STRATEGY_FSDP;
    if (r->comm && (sync || fsdp_run)) {
      timeline_span(&r->trace, fsdp_run ? "fsdp wait" : "ddp wait",
                    fsdp_run ? "fsdp" : "ddp", TIMELINE_TID_STEPS, t_wait,
                    ddp_now(), NULL);
      if (fsdp_run)
        trace_fsdp_ops(r);
      else
        trace_buckets(r, &r->dp, &r->m);
    }
    w->comm += r->strat.last.comm_time;
    w->blocked += r->strat.last.blocked_time;
  }
  double t_optim = ddp_now();
  int skip = r->scaler.enabled && scaler_says_skip(r);
  if (!skip) {
    check_xcoll(r, strategy_before_step(&r->strat, c->clip_grad_norm),
                "gradient norm all-reduce");
    float lr = schedule_lr(c->schedule, c->lr, r->meta.step, c->warmup_steps,
                           r->schedule_steps);
    optim_step(&r->opt, r->strat.params, r->strat.grads, lr);
  }
  strategy_after_step(&r->strat);
  lap(prof, PROFILE_OPTIMIZER);
  w->skipped = skip;
  w->wire = (double)(r->strat.wire_bytes - wire_before);
  r->meta.step++;
  double t_end = ddp_now();
  if (r->trace.file) {
    char name[48], args[64];
    timeline_span(&r->trace, "optimizer step", "compute", TIMELINE_TID_STEPS,
                  t_optim, t_end, NULL);
    snprintf(name, sizeof name, "step %" PRId64, r->meta.step);
    snprintf(args, sizeof args, "\"step\":%" PRId64 ",\"epoch\":%d",
             r->meta.step, epoch);
    timeline_span(&r->trace, name, "step", TIMELINE_TID_STEPS, t0, t_end,
                  args);
  }
  w->time = t_end - t0;
  if (prof) {
    lap(prof, PROFILE_OTHER);
    r->profiled_updates++;
    r->m.profile = NULL;
  }
}

/* ---- logging ---- */

/* Wire bytes per step and the loss scaler's state, in a JSON record. */
static void add_mixed_json(run *r, cJSON *o, double wire_per_step) {
  cJSON_AddNumberToObject(o, "wire_bytes_per_step", wire_per_step);
  if (r->scaler.enabled) {
    cJSON_AddNumberToObject(o, "loss_scale", r->scaler.scale);
    cJSON_AddNumberToObject(o, "skipped_steps",
                            (double)r->scaler.skipped_steps);
  }
}

static void log_interval(run *r, int epoch, window *iv) {
  const config *c = &r->cfg;
  double v[2] = {iv->loss, iv->count};
  sum_over_ranks(r, v, 2);
  if (r->rank == 0) {
    float lr = schedule_lr(c->schedule, c->lr, r->meta.step - 1,
                           c->warmup_steps, r->schedule_steps);
    double steps_in = (double)c->log_every;
    double share = hidden_share(iv->comm, iv->blocked);
    if (r->tty)
      printf("\n");
    printf("step %" PRId64 " epoch %d loss %.4f lr %.5f step_time %.2f ms "
           "samples/s %.0f comm %.2f ms overlap %.0f%% wire %.0f B/step",
           r->meta.step, epoch, v[0] / v[1], lr, 1e3 * iv->time / steps_in,
           v[1] / iv->time, 1e3 * iv->comm / steps_in, 100.0 * share,
           iv->wire / steps_in);
    if (r->scaler.enabled)
      printf(" loss_scale %g skipped %" PRId64, r->scaler.scale,
             r->scaler.skipped_steps);
    printf("\n");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "step");
    cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
    cJSON_AddNumberToObject(o, "epoch", epoch);
    cJSON_AddNumberToObject(o, "loss", v[0] / v[1]);
    cJSON_AddNumberToObject(o, "lr", lr);
    cJSON_AddNumberToObject(o, "step_time_s", iv->time / steps_in);
    cJSON_AddNumberToObject(o, "samples_per_s", v[1] / iv->time);
    cJSON_AddNumberToObject(o, "comm_time_s", iv->comm / steps_in);
    cJSON_AddNumberToObject(o, "overlap", share);
    add_mixed_json(r, o, iv->wire / steps_in);
    json_line(r, o);
  }
  memset(iv, 0, sizeof *iv);
}

/* After an epoch (or the part of it --max-steps allowed): evaluation, the
 * epoch's log line and the checkpoints. */
static void end_epoch(run *r, int epoch, int64_t first, int64_t done_in_epoch,
                      const window *ep, double *best) {
  const config *c = &r->cfg;
  int64_t updates = done_in_epoch - first;
  double sums[3] = {ep->loss, ep->correct, ep->count};
  sum_over_ranks(r, sums, 3);
  double test_acc, test_loss;
  double t_eval = ddp_now();
  evaluate(r, &test_acc, &test_loss);
  if (r->trace.file) {
    char args[32];
    snprintf(args, sizeof args, "\"epoch\":%d", epoch);
    timeline_span(&r->trace, "evaluate", "eval", TIMELINE_TID_STEPS, t_eval,
                  ddp_now(), args);
  }
  int finished = done_in_epoch >= r->steps_per_epoch;
  r->meta.epoch = finished ? epoch + 1 : epoch;
  r->meta.step_in_epoch = finished ? 0 : done_in_epoch;
  if (c->checkpoint_dir) { /* every rank: collective under fsdp */
    if (test_acc > *best) {
      *best = test_acc;
      r->meta.best_test_acc = *best;
      save_checkpoint(r, "checkpoint_best");
    }
    r->meta.best_test_acc = *best;
    save_checkpoint(r, "checkpoint_latest");
  }
  if (r->rank != 0)
    return;
  double share = hidden_share(ep->comm, ep->blocked);
  double sps = ep->time > 0 ? sums[2] / ep->time : 0.0;
  if (r->tty)
    printf("\n");
  double wire = updates > 0 ? ep->wire / (double)updates : 0.0;
  if (is_gpt(r))
    printf("epoch %d%s: loss %.4f val_loss %.4f val_bpc %.4f val_ppl %.2f "
           "samples/s %.0f step_time %.2f ms comm %.2f ms/step "
           "overlap %.0f%% wire %.0f B/step",
           epoch, finished ? "" : " (partial)",
           sums[2] > 0 ? sums[0] / sums[2] : 0.0, test_loss,
           test_loss / log(2.0), exp(test_loss), sps,
           updates > 0 ? 1e3 * ep->time / updates : 0.0,
           updates > 0 ? 1e3 * ep->comm / updates : 0.0, 100.0 * share, wire);
  else
    printf("epoch %d%s: loss %.4f train_acc %.4f test_loss %.4f test_acc "
           "%.4f samples/s %.0f step_time %.2f ms comm %.2f ms/step "
           "overlap %.0f%% wire %.0f B/step",
           epoch, finished ? "" : " (partial)",
           sums[2] > 0 ? sums[0] / sums[2] : 0.0,
           sums[2] > 0 ? sums[1] / sums[2] : 0.0, test_loss, test_acc, sps,
           updates > 0 ? 1e3 * ep->time / updates : 0.0,
           updates > 0 ? 1e3 * ep->comm / updates : 0.0, 100.0 * share, wire);
  if (r->scaler.enabled)
    printf(" loss_scale %g skipped %" PRId64, r->scaler.scale,
           r->scaler.skipped_steps);
  printf("\n");
  fflush(stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "epoch");
  cJSON_AddNumberToObject(o, "epoch", epoch);
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "loss", sums[2] > 0 ? sums[0] / sums[2] : 0.0);
  cJSON_AddNumberToObject(o, "train_acc", sums[2] > 0 ? sums[1] / sums[2] : 0.0);
  cJSON_AddNumberToObject(o, "test_loss", test_loss);
  cJSON_AddNumberToObject(o, "test_acc", test_acc);
  cJSON_AddNumberToObject(o, "samples_per_s", sps);
  cJSON_AddNumberToObject(o, "step_time_s", updates > 0 ? ep->time / updates : 0.0);
  cJSON_AddNumberToObject(o, "comm_time_s", updates > 0 ? ep->comm / updates : 0.0);
  cJSON_AddNumberToObject(o, "overlap", share);
  add_mixed_json(r, o, wire);
  json_line(r, o);
}

/* Peak resident set size of this process (VmHWM), bytes; 0 if unknown. */
static size_t peak_rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %zu kB", &kib) == 1)
      break;
  fclose(f);
  return kib * 1024;
}

static void log_summary(run *r, const window *all, double samples) {
  if (r->rank != 0)
    return;
  double share = hidden_share(all->comm, all->blocked);
  double sps = all->time > 0 ? samples / all->time : 0.0;
  const strategy_memory *mem = &r->strat.memory;
  size_t held = mem->param_bytes + mem->grad_bytes + mem->optim_bytes;
  printf("done: %" PRId64 " updates, %.0f samples/s (training only), "
         "comm %.1f s, overlap %.0f%%\n",
         r->meta.step, sps, all->comm, 100.0 * share);
  if (r->strat.kind == STRATEGY_FSDP)
    printf("fsdp: peak gathered parameters + unsharded gradients %zu bytes "
           "(%.3f MiB)\n",
           mem->peak_gathered_bytes,
           (double)mem->peak_gathered_bytes / (1024.0 * 1024.0));
  /* The whole process: the data set (47 MB of training images) dominates. */
  size_t rss = peak_rss_bytes();
  printf("memory: rank 0 peak resident set %zu bytes (%.1f MiB)\n", rss,
         (double)rss / (1024.0 * 1024.0));
  if (r->cfg.profile)
    profile_print(&r->prof, r->profiled_updates - 1, stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "summary");
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "world_size", r->world_size);
  cJSON_AddNumberToObject(o, "samples_per_s", sps);
  cJSON_AddNumberToObject(o, "train_time_s", all->time);
  cJSON_AddNumberToObject(o, "comm_time_s", all->comm);
  cJSON_AddNumberToObject(o, "overlap", share);
  cJSON_AddNumberToObject(o, "memory_bytes", (double)held);
  cJSON_AddNumberToObject(o, "peak_gathered_bytes",
                          (double)mem->peak_gathered_bytes);
  cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
  json_line(r, o);
}

static void train(run *r) {
  const config *c = &r->cfg;
  double best = r->meta.best_test_acc;
  window all;
  memset(&all, 0, sizeof all);
  double run_samples = 0.0;
  for (int epoch = r->meta.epoch;
       epoch < c->epochs && r->meta.step < r->total_steps; epoch++) {
    if (sampler_set_epoch(&r->smp, epoch) != 0)
      fail(r, "out of memory shuffling epoch %d", epoch);
    int64_t first = epoch == r->meta.epoch ? r->meta.step_in_epoch : 0;
    window ep, iv;
    memset(&ep, 0, sizeof ep);
    memset(&iv, 0, sizeof iv);
    int64_t s;
    for (s = first; s < r->steps_per_epoch; s++) {
      if (r->meta.step >= r->total_steps)
        break;
      window w;
      train_step(r, epoch, s, &w);
      window_add(&ep, &w);
      window_add(&iv, &w);
      run_samples += w.count * r->world_size;
      progress(r, epoch, s + 1, r->steps_per_epoch,
               iv.count > 0 ? iv.loss / iv.count : 0.0);
      if (c->log_every > 0 && r->meta.step % c->log_every == 0)
        log_interval(r, epoch, &iv);
    }
    window_add(&all, &ep);
    end_epoch(r, epoch, first, s, &ep, &best);
  }
  log_summary(r, &all, run_samples);
}

/* gpt, before training: the validation loss of the initial parameters,
 * against the uniform distribution's ln(256). */
static void log_initial_validation(run *r) {
  double acc, loss;
  evaluate(r, &acc, &loss);
  if (r->rank != 0)
    return;
  printf("step %" PRId64 ": val_loss %.4f val_bpc %.4f (uniform over %d "
         "bytes: %.4f)\n",
         r->meta.step, loss, loss / log(2.0), MODEL_GPT_VOCAB,
         log((double)MODEL_GPT_VOCAB));
  fflush(stdout);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "initial_validation");
  cJSON_AddNumberToObject(o, "step", (double)r->meta.step);
  cJSON_AddNumberToObject(o, "test_loss", loss);
  json_line(r, o);
}

#define GPT_SAMPLE_PROMPT "The "
#define GPT_SAMPLE_BYTES 200
#define GPT_SAMPLE_TEMPERATURE 0.8f

/* gpt, after training: every rank takes part in gathering the parameters
 * (a collective under fsdp); rank 0 generates GPT_SAMPLE_BYTES bytes from
 * GPT_SAMPLE_PROMPT on a copy of the model with a generator seeded from
 * --seed, so the text depends only on the parameters and the seed. */
static void print_sample(run *r) {
  float *all = malloc(r->m.num_elements * sizeof(float));
  if (!all)
    fail(r, "out of memory gathering parameters for the sample");
  check_xcoll(r, strategy_gather_params(&r->strat, all),
              "gathering parameters for the sample");
  if (r->rank == 0) {
    model g;
    if (model_create_like(&g, &r->m, 1) != 0)
      fail(r, "out of memory creating the sampling model");
    memcpy(g.params, all, r->m.num_elements * sizeof(float));
    rng sample_rng;
    rng_seed(&sample_rng, r->cfg.seed ^ 0x5eed5eedULL);
    unsigned char text[GPT_SAMPLE_BYTES];
    const char *prompt = GPT_SAMPLE_PROMPT;
    gpt_generate(&g, (const unsigned char *)prompt, (int)strlen(prompt),
                 GPT_SAMPLE_BYTES, GPT_SAMPLE_TEMPERATURE, &sample_rng, text);
    printf("sample (temperature %.1f, seed %" PRIu64 "):\n%s%.*s\n",
           (double)GPT_SAMPLE_TEMPERATURE, r->cfg.seed, prompt,
           GPT_SAMPLE_BYTES, (const char *)text);
    fflush(stdout);
    model_free(&g);
  }
  free(all);
}

static void teardown(run *r) {
  if (r->trace.file) {
    char trace_err[4200];
    if (timeline_close(&r->trace, trace_err, sizeof trace_err) != 0)
      fail(r, "%s", trace_err);
  }
  if (r->json)
    fclose(r->json);
  free(r->x);
  free(r->y);
  sampler_free(&r->smp);
  strategy_destroy(&r->strat);
  comm_hook_free(&r->hook);
  optim_free(&r->opt);
  model_free(&r->m);
  data_free(&r->train);
  data_free(&r->test);
  text_free(&r->corpus);
  if (r->comm) {
    xcoll_status st = xcoll_comm_destroy(r->comm);
    if (st != XCOLL_SUCCESS)
      fprintf(stderr, "xtrain: xcoll_comm_destroy: %s\n", xcoll_strerror(st));
  }
}

int main(int argc, char **argv) {
  static run r; /* large (the ddp buckets): not on the stack */
  /* Serve the parameter, gradient and optimizer buffers (about 1 MiB each
   * for the MLP) from the heap instead of one mmap each: with glibc's
   * default 128 KiB threshold the SGD step over them ran 1.2 to 8 times
   * slower, varying from run to run, and single-rank training 20k instead
   * of 50k samples/s (docs/trainer.md, "Allocation and throughput"). */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  parse_args(&r.cfg, argc, argv);
  openblas_set_num_threads(r.cfg.threads);
  setup_comm(&r);
  setup_outputs(&r);
  load_data(&r);
  setup_model(&r);
  setup_strategy(&r);
  setup_trace(&r);
  setup_schedule(&r);
  const config *c = &r.cfg;
  if (r.rank == 0 && c->model == MODEL_GPT)
    printf("xtrain: gpt, %d layers, %d heads, d_model %d, context %d, "
           "%zu parameters, %d rank(s), batch %d x %d rank(s) x %d accum = "
           "%d windows per update, %" PRId64 " updates/epoch, text %zu "
           "bytes from %d file(s): train %zu windows, validation %zu windows "
           "of %d bytes\n",
           c->gpt.n_layer, c->gpt.n_head, c->gpt.d_model, c->gpt.context,
           r.m.num_elements, r.world_size, c->batch_size, r.world_size,
           c->grad_accum, c->batch_size * r.world_size * c->grad_accum,
           r.steps_per_epoch, r.corpus.size, r.corpus.files,
           r.text_train.count, r.text_val.count, c->gpt.context + 1);
  else if (r.rank == 0)
    printf("xtrain: %s, %zu parameters, %d rank(s), batch %d x %d rank(s) x "
           "%d accum = %d per update, %" PRId64 " updates/epoch, "
           "train %zu test %zu, mean %.4f std %.4f\n",
           model_kind_name(c->model), r.m.num_elements, r.world_size,
           c->batch_size, r.world_size, c->grad_accum,
           c->batch_size * r.world_size * c->grad_accum, r.steps_per_epoch,
           r.train.count, r.test.count, r.mean, r.std);
  if (r.rank == 0 || r.strat.kind == STRATEGY_FSDP)
    print_memory(&r);
  if (c->model == MODEL_GPT)
    log_initial_validation(&r);
  train(&r);
  if (c->model == MODEL_GPT)
    print_sample(&r);
  if (c->dump_params)
    dump_params(&r);
  teardown(&r);
  return 0;
}
