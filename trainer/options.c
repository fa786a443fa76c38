/*
 * options.c - xtrain's command line. One table holds every flag: its name,
 * the value it takes, where it lands in the config, its range or its names,
 * and its help text, in the order the usage prints them. The parser walks the
 * table with getopt_long; the checks between flags (a flag that needs another
 * strategy or model) follow it. A bad command line prints one line saying
 * what was wrong, a pointer to --help, and exits 2.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "data.h"
#include "mixed.h"
#include "options.h"
#include "text.h"

/* How a flag's value is read and stored. */
typedef enum option_kind {
  OPTION_NOTE,    /* a paragraph of the usage, not a flag */
  OPTION_SET,     /* no value: sets an int to 1 */
  OPTION_INT,     /* integer in [lo, hi] into an int */
  OPTION_INT64,   /* ... into an int64_t */
  OPTION_SIZE,    /* ... into a size_t */
  OPTION_UINT64,  /* ... into a uint64_t */
  OPTION_FLOAT,   /* number in [min, max] into a float */
  OPTION_DOUBLE,  /* ... into a double */
  OPTION_STRING,  /* the argument itself */
  OPTION_CHOICE,  /* one of choices, its value into an enum */
  OPTION_PARSED,  /* a name that parse() turns into an enum value, or -1 */
  OPTION_CUSTOM,  /* apply() reads the value */
  OPTION_HELP,
  OPTION_VERSION
} option_kind;

typedef struct option_choice {
  const char *name;
  int value;
} option_choice;

/* Flags whose presence a check after parsing asks about. */
enum {
  GIVEN_GPT = 1 << 0,      /* a gpt-only flag */
  GIVEN_FSDP = 1 << 1,     /* an fsdp-only flag */
  GIVEN_DP = 1 << 2,       /* --dp-devices */
  GIVEN_EPOCHS = 1 << 3,
  GIVEN_OPTIMIZER = 1 << 4,
  GIVEN_DATA_DIR = 1 << 5,
  GIVEN_SCALE = 1 << 6,    /* --init-scale, --scale-growth-interval */
  GIVEN_POWERSGD = 1 << 7  /* --powersgd-rank, --powersgd-warmup */
};

typedef struct option_row {
  const char *name;  /* without the leading "--" */
  const char *value; /* what the usage shows after the name; NULL: none */
  option_kind kind;
  size_t at;         /* destination: offset in config */
  int64_t lo, hi;    /* integers */
  double min, max;   /* numbers */
  const option_choice *choices;    /* OPTION_CHOICE, ending with a NULL name */
  int (*parse)(const char *name);  /* OPTION_PARSED */
  const char *one_of;              /* OPTION_PARSED: the names, for the error */
  void (*apply)(config *c, const char *value); /* OPTION_CUSTOM */
  unsigned given;    /* GIVEN_* set when the flag is on the command line */
  const char *help;  /* lines separated by '\n'; the usage indents them */
} option_row;

static void cnn_channels(config *c, const char *value);

static const option_choice strategies[] = {
    {"none", STRATEGY_NONE}, {"dp", STRATEGY_DP}, {"ddp", STRATEGY_DDP},
    {"fsdp", STRATEGY_FSDP}, {NULL, 0}};
static const option_choice on_off[] = {{"on", 1}, {"off", 0}, {NULL, 0}};
static const option_choice optimizers[] = {{"sgd", OPTIM_SGD},
                                           {"adamw", OPTIM_ADAMW}, {NULL, 0}};
static const option_choice schedules[] = {
    {"constant", SCHEDULE_CONSTANT}, {"cosine", SCHEDULE_COSINE}, {NULL, 0}};
static const option_choice checkpoint_formats[] = {
    {"full", CHECKPOINT_FULL}, {"sharded", CHECKPOINT_SHARDED}, {NULL, 0}};
static const option_choice samplers[] = {{"random", 0}, {"sequential", 1},
                                         {NULL, 0}};

#define AT(field) offsetof(config, field)
#define NOTE(n, v, text)                                                       \
  {.name = n, .value = v, .kind = OPTION_NOTE, .help = text}
#define SET(n, f, text)                                                        \
  {.name = n, .kind = OPTION_SET, .at = AT(f), .help = text}
#define INTEGER(k, n, v, f, l, h, g, text)                                     \
  {.name = n, .value = v, .kind = k, .at = AT(f), .lo = l, .hi = h,            \
   .given = g, .help = text}
#define NUMBER(k, n, v, f, l, h, g, text)                                      \
  {.name = n, .value = v, .kind = k, .at = AT(f), .min = l, .max = h,          \
   .given = g, .help = text}
#define STRING(n, v, f, g, text)                                               \
  {.name = n, .value = v, .kind = OPTION_STRING, .at = AT(f), .given = g,      \
   .help = text}
#define CHOICE(n, v, f, names, g, text)                                        \
  {.name = n, .value = v, .kind = OPTION_CHOICE, .at = AT(f),                  \
   .choices = names, .given = g, .help = text}
#define PARSED(n, v, f, fn, names, g, text)                                    \
  {.name = n, .value = v, .kind = OPTION_PARSED, .at = AT(f), .parse = fn,     \
   .one_of = names, .given = g, .help = text}

static const option_row rows[] = {
  PARSED("model", "mlp|cnn|gpt", model, model_kind_parse, "mlp, cnn or gpt", 0,
         "model (mlp: 784-256-256-10; cnn: LeNet-5-like) [mlp]"),
  {.name = "cnn-channels", .value = "C1,C2", .kind = OPTION_CUSTOM,
   .apply = cnn_channels,
   .help = "channels of the CNN's two convolutions [16,32]"},
  NOTE("model", "gpt",
       "a decoder-only transformer on bytes of text, trained\n"
       "on " TEXT_DEFAULT_DIR " (Debian's fortunes)\n"
       "or --data-file; epochs default to 1, the optimizer\n"
       "to adamw (see docs/trainer.md)"),
  INTEGER(OPTION_INT, "n-layer", "N", gpt.n_layer, 1, GPT_MAX_LAYERS, GIVEN_GPT,
          "gpt: transformer blocks [2]"),
  INTEGER(OPTION_INT, "n-head", "H", gpt.n_head, 1, 1024, GIVEN_GPT,
          "gpt: attention heads, dividing --d-model [4]"),
  INTEGER(OPTION_INT, "d-model", "C", gpt.d_model, 1, 8192, GIVEN_GPT,
          "gpt: width of the residual stream [64]"),
  INTEGER(OPTION_INT, "context", "T", gpt.context, 1, 4096, GIVEN_GPT,
          "gpt: sequence length; a sample is T+1 bytes [64]"),
  STRING("data-file", "FILE", data_file, GIVEN_GPT,
         "gpt: train on FILE (any text; the last 10% is the\n"
         "validation set) instead of the fortunes"),
  CHOICE("strategy", "none|dp|ddp|fsdp", strategy, strategies, 0,
         "one process; DataParallel (one process,\n"
         "threads); DistributedDataParallel or Fully Sharded\n"
         "Data Parallel over xcoll [none]"),
  INTEGER(OPTION_INT, "dp-devices", "N", dp_devices, 1, 256, GIVEN_DP,
          "dp: replicas, one thread each; --batch-size is\n"
          "the whole batch, scattered over them [2]"),
  PARSED("sharding", "S", fsdp.sharding, fsdp_sharding_parse,
         "full_shard, shard_grad_op, no_shard or hybrid_shard", GIVEN_FSDP,
         "fsdp: full_shard|shard_grad_op|no_shard|hybrid_shard\n"
         "(hybrid: full_shard within LOCAL_WORLD_SIZE ranks) [full_shard]"),
  PARSED("backward-prefetch", "P", fsdp.backward_prefetch, fsdp_prefetch_parse,
         "pre, post or none", GIVEN_FSDP, "fsdp: pre|post|none [pre]"),
  CHOICE("forward-prefetch", "on|off", fsdp.forward_prefetch, on_off,
         GIVEN_FSDP,
         "fsdp: gather the next unit during a unit's forward [off]"),
  INTEGER(OPTION_SIZE, "fsdp-min-params", "N", fsdp.min_params, 0,
          INT64_MAX / 2, GIVEN_FSDP,
          "fsdp: layers join a unit until it has N parameters [0]"),
  INTEGER(OPTION_INT, "epochs", "E", epochs, 1, 100000, GIVEN_EPOCHS,
          "passes over the training set [5]"),
  INTEGER(OPTION_INT, "batch-size", "B", batch_size, 1, 65536, 0,
          "samples per rank per micro-batch [64]"),
  NUMBER(OPTION_FLOAT, "lr", "LR", lr, 0.0, 1e3, 0,
         "base learning rate [0.02 sgd, 0.001 adamw]"),
  CHOICE("optimizer", "sgd|adamw", optimizer, optimizers, GIVEN_OPTIMIZER,
         "[sgd]"),
  NUMBER(OPTION_FLOAT, "momentum", "M", momentum, 0.0, 1.0, 0,
         "SGD momentum [0.9]"),
  NUMBER(OPTION_FLOAT, "weight-decay", "WD", weight_decay, 0.0, 10.0, 0,
         "SGD: L2 on the gradient; AdamW: decoupled [0]"),
  SET("nesterov", nesterov, "Nesterov momentum (SGD)"),
  CHOICE("schedule", "constant|cosine", schedule, schedules, 0,
         "cosine = linear warmup then cosine decay [constant]"),
  INTEGER(OPTION_INT64, "warmup-steps", "N", warmup_steps, 0, INT64_MAX / 2, 0,
          "warmup updates for --schedule cosine [0]"),
  NUMBER(OPTION_DOUBLE, "clip-grad-norm", "X", clip_grad_norm, 0.0, 1e30, 0,
         "clip gradients to global L2 norm X; 0 = off [0]"),
  NUMBER(OPTION_DOUBLE, "first-bucket-mb", "X", first_bucket_mb, 1e-6, 1e6, 0,
         "DDP: most MiB in the first bucket (last layers) [1]"),
  NUMBER(OPTION_DOUBLE, "bucket-cap-mb", "X", bucket_cap_mb, 1e-6, 1e6, 0,
         "DDP: most MiB in each later bucket [25]"),
  INTEGER(OPTION_INT, "grad-accum", "K", grad_accum, 1, 65536, 0,
          "micro-batches per update (no_sync on the first K-1) [1]"),
  INTEGER(OPTION_UINT64, "seed", "S", seed, 0, INT64_MAX, 0,
          "seed of init and sampler [0]"),
  STRING("data-dir", "DIR", data_dir, GIVEN_DATA_DIR,
         "IDX .gz files [" DATA_DEFAULT_DIR "]"),
  STRING("checkpoint-dir", "DIR", checkpoint_dir, 0,
         "write checkpoint_latest/best.safetensors there [none]"),
  CHOICE("checkpoint-format", "full|sharded", checkpoint_format,
         checkpoint_formats, 0,
         "fsdp: full = one file as none/ddp write\n"
         "(gathered to rank 0; resumes at any world size\n"
         "and strategy); sharded = one file per rank and\n"
         "checkpoint_latest.index.json (same world size) [full]"),
  SET("resume", resume,
      "continue from DIR/checkpoint_latest.safetensors\n"
      "(or the sharded set, when it is there and newer)"),
  SET("elastic", elastic,
      "ddp: when a rank dies, the others shrink the\n"
      "communicator, take rank 0's state and go on\n"
      "(run under xcollrun --on-rank-failure continue)"),
  STRING("init-from", "FILE", init_from, 0,
         "initial parameters from a safetensors file with\n"
         "PyTorch's names and shapes (fc1.weight, ...)"),
  STRING("export-init", "FILE", export_init, 0,
         "write the initial parameters (after --seed or\n"
         "--init-from) to FILE in that format, then train"),
  CHOICE("sampler", "random|sequential", sampler_sequential, samplers, 0,
         "random: DistributedSampler(shuffle=True);\n"
         "sequential: no shuffle [random]"),
  INTEGER(OPTION_INT64, "log-every", "N", log_every, 0, INT64_MAX / 2, 0,
          "log every N updates; 0 = per epoch only [0]"),
  NUMBER(OPTION_DOUBLE, "progress-every", "S", progress_every, 0.0, 1e6, 0,
         "when stdout is not a terminal (under xcollrun, or\n"
         "redirected), rank 0 prints a progress line every S\n"
         "seconds; 0 = never; a terminal gets a bar [10]"),
  STRING("log-json", "FILE", log_json, 0,
         "also write JSON lines to FILE (rank 0)"),
  SET("drop-last", drop_last,
      "drop the tail instead of padding / partial batches"),
  INTEGER(OPTION_INT64, "max-steps", "N", max_steps, 0, INT64_MAX / 2, 0,
          "stop after N updates in total (the schedule still\n"
          "spans --epochs); 0 = no limit [0]"),
  INTEGER(OPTION_INT, "threads", "T", threads, 1, 1024, 0,
          "OpenBLAS threads per rank [1]"),
  INTEGER(OPTION_SIZE, "train-limit", "N", train_limit, 0, INT32_MAX, 0,
          "use the first N training samples; 0 = all [0]"),
  INTEGER(OPTION_SIZE, "test-limit", "N", test_limit, 0, INT32_MAX, 0,
          "use the first N test samples; 0 = all [0]"),
  STRING("dump-params", "FILE", dump_params, 0,
         "at the end, each rank writes FILE.rank<r>: the whole\n"
         "model's parameters, raw float32 (gathered under fsdp)"),
  PARSED("param-dtype", "D", param_dtype, mixed_dtype_parse,
         "float32, bfloat16 or float16", 0,
         "fsdp: float32|bfloat16|float16, the dtype parameters\n"
         "are all-gathered in (layers see them rounded to it);\n"
         "master weights stay float32 [float32]"),
  PARSED("reduce-dtype", "D", reduce_dtype, mixed_dtype_parse,
         "float32, bfloat16 or float16", 0,
         "ddp, fsdp: float32|bfloat16|float16, the dtype\n"
         "gradients are reduced in [float32]"),
  NUMBER(OPTION_DOUBLE, "init-scale", "X", init_scale, 1e-30, 1e38,
         GIVEN_SCALE, "float16: initial dynamic loss scale [65536]"),
  INTEGER(OPTION_INT64, "scale-growth-interval", "N", scale_growth_interval, 1,
          INT64_MAX / 2, GIVEN_SCALE,
          "float16: double the scale after N good steps [2000]"),
  PARSED("comm-hook", "H", comm_hook, comm_hook_parse,
         "none, fp16, bf16 or powersgd", 0,
         "ddp: none|fp16|bf16|powersgd (PyTorch's DDP\n"
         "communication hooks) [none]"),
  INTEGER(OPTION_INT, "powersgd-rank", "R", powersgd_rank, 1, 1024,
          GIVEN_POWERSGD, "powersgd: rank of the approximation [1]"),
  INTEGER(OPTION_INT64, "powersgd-warmup", "N", powersgd_warmup, 0,
          INT64_MAX / 2, GIVEN_POWERSGD,
          "powersgd: plain all-reduce for the first N steps [1000]"),
  SET("profile", profile,
      "at the end, rank 0 prints where an update's time\n"
      "went (gpt: matmul, attention, elementwise, loss;\n"
      "hooks, comm wait, optimizer), wall and CPU ms"),
  STRING("trace", "FILE", trace, 0,
         "Chrome trace of steps, layers and bucket all-reduces;\n"
         "each rank writes FILE with .rank<r> before the\n"
         "extension (or %r replaced by the rank, %p by the\n"
         "pid)"),
  {.name = "help", .kind = OPTION_HELP, .help = ""},
  {.name = "version", .kind = OPTION_VERSION,
   .help = "print the version and exit"},
};

#define NUM_ROWS (sizeof rows / sizeof rows[0])
#define HELP_COLUMN 24 /* width of "--name VALUE" before its help */

/* Enum fields are stored through an int. */
_Static_assert(sizeof(model_kind) == sizeof(int) &&
                   sizeof(strategy_kind) == sizeof(int) &&
                   sizeof(xcoll_datatype) == sizeof(int),
               "enums are int-sized");

static void usage(FILE *out) {
  fprintf(out, "usage: xtrain [options]   (multi-rank: xcollrun "
               "--nproc-per-node N xtrain --strategy ddp ...)\n");
  for (size_t i = 0; i < NUM_ROWS; i++) {
    const option_row *row = &rows[i];
    char flag[64];
    snprintf(flag, sizeof flag, "--%s%s%s", row->name, row->value ? " " : "",
             row->value ? row->value : "");
    if (row->help[0] == '\0') {
      fprintf(out, "  %s\n", flag);
      continue;
    }
    /* A name longer than the column pushes its help two spaces on. */
    if (strlen(flag) > HELP_COLUMN)
      fprintf(out, "  %s  ", flag);
    else
      fprintf(out, "  %-*s ", HELP_COLUMN, flag);
    for (const char *line = row->help;;) {
      const char *end = strchr(line, '\n');
      if (end == NULL) {
        fprintf(out, "%s\n", line);
        break;
      }
      fprintf(out, "%.*s\n%*s", (int)(end - line), line, HELP_COLUMN + 3, "");
      line = end + 1;
    }
  }
}

static void die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xtrain: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nsee 'xtrain --help'\n");
  va_end(ap);
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

static void cnn_channels(config *c, const char *value) {
  int a, b;
  char tail;
  if (sscanf(value, "%d,%d%c", &a, &b, &tail) != 2 || a < 1 || b < 1 ||
      a > 1024 || b > 1024)
    die_usage("--cnn-channels expects C1,C2 (e.g. 16,32), got '%s'", value);
  c->conv1_channels = a;
  c->conv2_channels = b;
}

/* "a, b or c" from a choice list. */
static void choice_names(const option_choice *choices, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; choices[i].name && used < size; i++) {
    const char *sep = i == 0 ? "" : choices[i + 1].name ? ", " : " or ";
    int n = snprintf(out + used, size - used, "%s%s", sep, choices[i].name);
    used += n > 0 ? (size_t)n : 0;
  }
}

/* Reads one flag's value into its field of c. */
static void apply_row(config *c, const option_row *row, const char *value) {
  char flag[64];
  snprintf(flag, sizeof flag, "--%s", row->name);
  char *dest = (char *)c + row->at;
  switch (row->kind) {
  case OPTION_NOTE:
    break;
  case OPTION_SET: {
    int one = 1;
    memcpy(dest, &one, sizeof one);
    break;
  }
  case OPTION_INT: {
    int v = (int)parse_int(flag, value, row->lo, row->hi);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_INT64: {
    int64_t v = parse_int(flag, value, row->lo, row->hi);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_SIZE: {
    size_t v = (size_t)parse_int(flag, value, row->lo, row->hi);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_UINT64: {
    uint64_t v = (uint64_t)parse_int(flag, value, row->lo, row->hi);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_FLOAT: {
    float v = (float)parse_double(flag, value, row->min, row->max);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_DOUBLE: {
    double v = parse_double(flag, value, row->min, row->max);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_STRING:
    memcpy(dest, &value, sizeof value);
    break;
  case OPTION_CHOICE: {
    const option_choice *ch = row->choices;
    while (ch->name && strcmp(ch->name, value) != 0)
      ch++;
    if (ch->name == NULL) {
      char names[256];
      choice_names(row->choices, names, sizeof names);
      die_usage("%s must be %s, got '%s'", flag, names, value);
    }
    memcpy(dest, &ch->value, sizeof ch->value);
    break;
  }
  case OPTION_PARSED: {
    int v = row->parse(value);
    if (v < 0)
      die_usage("%s must be %s, got '%s'", flag, row->one_of, value);
    memcpy(dest, &v, sizeof v);
    break;
  }
  case OPTION_CUSTOM:
    row->apply(c, value);
    break;
  case OPTION_HELP:
    usage(stdout);
    exit(0);
  case OPTION_VERSION:
    printf("xtrain (xcoll) %s\n", XCOLL_PROJECT_VERSION);
    exit(0);
  }
}

static void set_defaults(config *c) {
  memset(c, 0, sizeof *c);
  c->model = MODEL_MLP;
  c->epochs = 5;
  c->batch_size = 64;
  c->lr = -1.0f; /* chosen by the optimizer after parsing */
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
  c->dp_devices = 2;
  c->gpt.n_layer = 2;
  c->gpt.n_head = 4;
  c->gpt.d_model = 64;
  c->gpt.context = 64;
  c->param_dtype = c->reduce_dtype = XCOLL_FLOAT32;
  c->init_scale = 65536.0; /* GradScaler's 2^16 */
  c->scale_growth_interval = 2000;
  c->powersgd_rank = 1;      /* PyTorch's matrix_approximation_rank */
  c->powersgd_warmup = 1000; /* PyTorch's start_powerSGD_iter */
}

/* Mixed precision and hooks: refuse what has no meaning for the strategy. */
static void check_mixed_flags(config *c, unsigned given) {
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
  if ((given & GIVEN_POWERSGD) && c->comm_hook != COMM_HOOK_POWERSGD)
    die_usage("--powersgd-rank and --powersgd-warmup need --comm-hook powersgd");
  if ((given & GIVEN_SCALE) && c->param_dtype != XCOLL_FLOAT16 &&
      c->reduce_dtype != XCOLL_FLOAT16)
    die_usage("--init-scale and --scale-growth-interval need --param-dtype or "
              "--reduce-dtype float16 (loss scaling is for float16)");
  /* Under ddp, --reduce-dtype is the matching compression hook. */
  if (c->strategy == STRATEGY_DDP && c->reduce_dtype != XCOLL_FLOAT32)
    c->comm_hook = c->reduce_dtype == XCOLL_FLOAT16 ? COMM_HOOK_FP16
                                                     : COMM_HOOK_BF16;
}

/* The checks between flags, and the defaults that depend on other flags. */
static void check_config(config *c, unsigned given) {
  if ((given & GIVEN_GPT) && c->model != MODEL_GPT)
    die_usage("--n-layer, --n-head, --d-model, --context and --data-file need "
              "--model gpt");
  if (c->model == MODEL_GPT) {
    if (c->gpt.d_model % c->gpt.n_head != 0)
      die_usage("--d-model %d is not divisible by --n-head %d (each head "
                "gets d_model / n_head dimensions)", c->gpt.d_model,
                c->gpt.n_head);
    if (c->data_file && (given & GIVEN_DATA_DIR))
      die_usage("give --data-file or --data-dir, not both");
    if (!(given & GIVEN_DATA_DIR))
      c->data_dir = TEXT_DEFAULT_DIR;
    /* A pass over the fortunes is ~550 updates of 64 windows: one epoch is
     * a run of about a minute, and AdamW trains a transformer much faster
     * than SGD at any single learning rate. */
    if (!(given & GIVEN_EPOCHS))
      c->epochs = 1;
    if (!(given & GIVEN_OPTIMIZER))
      c->optimizer = OPTIM_ADAMW;
  }
  if (c->lr < 0.0f)
    c->lr = c->optimizer == OPTIM_ADAMW ? 0.001f : 0.02f;
  if (c->resume && !c->checkpoint_dir)
    die_usage("--resume needs --checkpoint-dir");
  if ((given & GIVEN_DP) && c->strategy != STRATEGY_DP)
    die_usage("--dp-devices needs --strategy dp");
  if (c->strategy == STRATEGY_DP && c->batch_size < c->dp_devices)
    die_usage("--strategy dp scatters --batch-size %d over --dp-devices %d: "
              "give at least one sample per replica", c->batch_size,
              c->dp_devices);
  if ((given & GIVEN_FSDP) && c->strategy != STRATEGY_FSDP)
    die_usage("--sharding, --backward-prefetch, --forward-prefetch and "
              "--fsdp-min-params need --strategy fsdp");
  if (c->elastic && c->strategy == STRATEGY_FSDP)
    die_usage("fsdp: --elastic is not supported: use --checkpoint-dir with "
              "xcollrun --max-restarts");
  if (c->elastic && c->strategy != STRATEGY_DDP)
    die_usage("--elastic needs --strategy ddp: %s runs in one process, "
              "which cannot lose a rank and go on",
              c->strategy == STRATEGY_DP ? "dp (threads)" : "none");
  /* no_shard replicates parameters and all-reduces gradients: the DDP path. */
  if (c->strategy == STRATEGY_FSDP && c->fsdp.sharding == FSDP_NO_SHARD)
    c->strategy = STRATEGY_DDP;
  check_mixed_flags(c, given);
  if (c->param_dtype != XCOLL_FLOAT32 || c->reduce_dtype != XCOLL_FLOAT32) {
    c->fsdp.param_dtype = c->param_dtype;
    c->fsdp.reduce_dtype = c->reduce_dtype;
  }
  if (c->elastic && c->comm_hook != COMM_HOOK_NONE)
    die_usage("--elastic works with the float32 gradient all-reduce only: "
              "drop --comm-hook and --reduce-dtype (a hook's state is sized "
              "for the world it started with)");
  if (c->strategy != STRATEGY_FSDP && c->checkpoint_format == CHECKPOINT_SHARDED)
    die_usage("--checkpoint-format sharded needs --strategy fsdp (other "
              "strategies hold the whole model: they write full checkpoints)");
}

void options_parse(config *c, int argc, char **argv) {
  struct option flags[NUM_ROWS + 1];
  size_t n = 0;
  for (size_t i = 0; i < NUM_ROWS; i++) {
    option_kind k = rows[i].kind;
    if (k == OPTION_NOTE)
      continue;
    int takes_value = k != OPTION_SET && k != OPTION_HELP && k != OPTION_VERSION;
    flags[n++] = (struct option){rows[i].name,
                                 takes_value ? required_argument : no_argument,
                                 NULL, 256 + (int)i};
  }
  flags[n] = (struct option){0, 0, 0, 0};
  set_defaults(c);
  unsigned given = 0;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", flags, NULL)) != -1) {
    if (opt < 256) {
      const char *arg = argv[optind - 1];
      for (size_t i = 0; i < n; i++)
        if (strncmp(arg, "--", 2) == 0 && strcmp(arg + 2, flags[i].name) == 0)
          die_usage("%s needs a value", arg);
      die_usage("unknown option '%s'", arg);
    }
    const option_row *row = &rows[opt - 256];
    apply_row(c, row, optarg);
    given |= row->given;
  }
  if (optind < argc)
    die_usage("unexpected argument '%s'", argv[optind]);
  check_config(c, given);
}

/* The name of value in choices (the command line's spelling). */
static const char *choice_name(const option_choice *choices, int value) {
  while (choices->name && choices->value != value)
    choices++;
  return choices->name ? choices->name : "?";
}

char *config_json(const config *c) {
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
  cJSON_AddStringToObject(o, "strategy",
                          choice_name(strategies, (int)c->strategy));
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
  cJSON_AddStringToObject(o, "optimizer",
                          choice_name(optimizers, (int)c->optimizer));
  cJSON_AddNumberToObject(o, "momentum", c->momentum);
  cJSON_AddNumberToObject(o, "weight_decay", c->weight_decay);
  cJSON_AddBoolToObject(o, "nesterov", c->nesterov);
  cJSON_AddStringToObject(o, "schedule",
                          choice_name(schedules, (int)c->schedule));
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
  cJSON_AddStringToObject(o, "sampler",
                          choice_name(samplers, c->sampler_sequential));
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}
