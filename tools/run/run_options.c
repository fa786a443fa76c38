/* run_options.c - xcollrun's command line (run.h): torchrun's flags and
 * their checks, --nproc-per-node's 'cpu', 'gpu' and 'auto', --redirects,
 * --tee and --local-ranks-filter, how a Python program is run, the usage
 * text, and xcollrun's own messages. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

void run_message(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof line - 2)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  /* one write, so that it does not interleave with a rank's line */
  ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
  (void)ignored;
}

static void usage(FILE *to) {
  fputs(
      "usage: xcollrun [options] program [args...]\n"
      "\n"
      "Start nproc-per-node ranks of program on this node with torchrun's\n"
      "environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
      "GROUP_RANK, MASTER_ADDR, MASTER_PORT); prefix their output with\n"
      "\"[rank N] \"; when one fails, stop the others.\n"
      "\n"
      "options (also with '_' for '-', and as --flag=value):\n"
      "  --nproc-per-node N   ranks on this node (default 1); also 'cpu' (the\n"
      "                       cores this process may use), 'gpu' (the NVIDIA\n"
      "                       GPUs the driver lists) or 'auto' (gpu if any,\n"
      "                       else cpu), as torchrun\n"
      "  --standalone         one node: a free port on 127.0.0.1 (torchrun's\n"
      "                       --standalone)\n"
      "  --nnodes N           nodes in the job (default 1)\n"
      "  --node-rank R        this node's index, 0..nnodes-1 (default 0)\n"
      "  --master-addr HOST   host of rank 0's rendezvous store (default "
      "127.0.0.1)\n"
      "  --master-port PORT   its port (default 29500; 0 picks a free port,\n"
      "                       single node only)\n"
      "  --rdzv-endpoint HOST[:PORT]  torchrun's name for --master-addr and\n"
      "                       --master-port ([ADDR]:PORT for IPv6)\n"
      "  --rdzv-id ID         the job id the ranks see as TORCHELASTIC_RUN_ID\n"
      "                       (default xcollrun-<pid>)\n"
      "  --rdzv-backend static|c10d  accepted: the ranks meet at rank 0's store\n"
      "  --role, --monitor-interval, --start-method, --local-addr, --rdzv-conf\n"
      "                       accepted for torchrun command lines; each is\n"
      "                       ignored, with a line saying why\n"
      "  --max-restarts N     restart the local group up to N times after a\n"
      "                       failure (default 0)\n"
      "  --store-host WHO     who serves the rendezvous store: 'rank0' (the\n"
      "                       default) or 'launcher' (xcollrun on node 0,\n"
      "                       as torchrun's agent store: the store outlives\n"
      "                       every rank, so that survivors of rank 0's\n"
      "                       death can shrink their communicator)\n"
      "  --on-rank-failure stop|continue  what a rank's failure does to the\n"
      "                       others: stop (default) sends them SIGTERM;\n"
      "                       continue reports it and lets them run on (for\n"
      "                       programs that shrink their communicator, such\n"
      "                       as xtrain --elastic)\n"
      "  -m, --module         the program is a Python module: run\n"
      "                       '$XCOLLRUN_PYTHON -m program args...'\n"
      "  --no-python          run program as it is, also when it ends in .py\n"
      "                       (without it, as with torchrun, a script.py runs\n"
      "                       as '$XCOLLRUN_PYTHON script.py args...')\n"
      "  --run-path           the program is a Python file whatever its name:\n"
      "                       run '$XCOLLRUN_PYTHON program args...'\n"
      "  --log-dir DIR        write the ranks' output that --redirects or --tee\n"
      "                       select to DIR/attempt_<k>/<local_rank>/\n"
      "                       {stdout,stderr}.log (k: the restart); with it,\n"
      "                       when a rank fails or xcollrun is stopped, the\n"
      "                       ranks' flight recorder dumps are collected in\n"
      "                       DIR/attempt_<k>/flight_recorder and xcoll-fr's\n"
      "                       summary is printed\n"
      "  --redirects SPEC     send ranks' streams to the log files instead of\n"
      "                       the console: 0 none, 1 stdout, 2 stderr, 3 both;\n"
      "                       or per local rank, e.g. '0:3,1:2' (others 0)\n"
      "  --tee SPEC           the same forms: to the log files and the console\n"
      "  --local-ranks-filter LIST  show only these local ranks' output on the\n"
      "                       console, e.g. '0' or '0,2' (files are kept);\n"
      "                       a single rank so chosen, on a terminal and not\n"
      "                       teed, gets the terminal itself (no prefix), so\n"
      "                       that its progress bars work\n"
      "  -h, --help           this text\n"
      "  --version            print the version and exit\n"
      "\n"
      "environment: XCOLLRUN_GRACE_S (default 5) seconds between SIGTERM and\n"
      "SIGKILL when the group is stopped. XCOLLRUN_DUMP_WAIT_S (default 2)\n"
      "seconds to wait for the ranks' flight recorder dumps (--log-dir). XCOLLRUN_PYTHON (default python3):\n"
      "the interpreter for -m and .py programs.\n"
      "XCOLL_AUTH_TOKEN / XCOLL_AUTH_FILE: the job's secret; when neither is\n"
      "set, a single-node job gets a random one (multi-node jobs must set the\n"
      "same one on every node).\n"
      "exit status: 0 when every rank exits 0; else the first failed rank's\n"
      "exit status, or 128+signal if it was killed; 2 for bad options.\n"
      "With --on-rank-failure continue: 0 when at least one rank exits 0 and\n"
      "no rank exits with a non-zero status (ranks killed by a signal are the\n"
      "lost ones); else the first non-zero exit status, or 128+signal when\n"
      "every rank was killed.\n",
      to);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("xcollrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\nsee 'xcollrun --help'\n", stderr);
  va_end(ap);
  exit(EXIT_USAGE);
}

static int parse_int(const char *flag, const char *text, int min, int max) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (!*text || *end || errno || value < min || value > max)
    usage_error("%s wants an integer in %d..%d, got '%s'", flag, min, max,
                text);
  return (int)value;
}

/* Why each of torchrun's flags that xcollrun accepts and ignores has no
 * effect here, in the order of the table in run_parse_options. */
static const char *ignored_why(int k) {
  static const char *const why[] = {
      /* --role */ "every rank has the one role (ROLE_RANK is RANK)",
      /* --monitor-interval */ "xcollrun hears of a rank's exit at once "
                               "(signalfd), without polling",
      /* --start-method */ "ranks are always new processes (fork and exec); "
                           "the method applies to Python functions only",
      /* --local-addr */ "xcollrun advertises no address of its own; the "
                         "ranks choose theirs (XCOLL_SOCKET_IFNAME)",
      /* --rdzv-conf */ "there is no rendezvous backend to configure; the "
                        "ranks wait XCOLL_TIMEOUT_S for each other"};
  return why[k];
}

/* --rdzv-endpoint HOST[:PORT] (IPv6 as [ADDR]:PORT): the master's address
 * and, when given, its port, as --master-addr and --master-port. */
static void rdzv_endpoint(options *o, const char *value) {
  static char host[256];
  const char *port = NULL;
  size_t len;
  if (value[0] == '[') {
    const char *close = strchr(value, ']');
    if (!close || (close[1] != '\0' && close[1] != ':'))
      usage_error("--rdzv-endpoint '%s': want HOST:PORT, or [IPV6]:PORT",
                  value);
    len = (size_t)(close - value - 1);
    value++;
    port = close[1] == ':' ? close + 2 : NULL;
  } else {
    const char *colon = strrchr(value, ':');
    if (colon && strchr(value, ':') != colon)
      usage_error("--rdzv-endpoint '%s': write an IPv6 address as "
                  "[ADDR]:PORT", value);
    len = colon ? (size_t)(colon - value) : strlen(value);
    port = colon ? colon + 1 : NULL;
  }
  if (len == 0 || len >= sizeof host)
    usage_error("--rdzv-endpoint '%s': want HOST:PORT", value);
  memcpy(host, value, len);
  host[len] = '\0';
  o->master_addr = host;
  if (port)
    o->master_port = parse_int("--rdzv-endpoint's port", port, 0, 65535);
}

int run_ends_with(const char *text, const char *suffix) {
  size_t n = strlen(text), k = strlen(suffix);
  return n >= k && strcmp(text + n - k, suffix) == 0;
}

/* torchrun runs its program with Python: as a module after -m, and a
 * script ending in .py unless --no-python. Other programs run as they are.
 * Returns the argv to exec (count entries from program). */
static char **python_program(const options *o, int count, char **program) {
  if (o->module && o->no_python)
    usage_error("-m and --no-python exclude each other");
  if (o->run_path && (o->module || o->no_python))
    usage_error("--run-path excludes -m and --no-python");
  int as_script =
      o->run_path || (!o->no_python && run_ends_with(program[0], ".py"));
  if (!o->module && !as_script)
    return program;
  const char *python = getenv("XCOLLRUN_PYTHON");
  if (!python || !*python)
    python = "python3";
  int extra = o->module ? 2 : 1;
  char **argv = calloc((size_t)(count + extra + 1), sizeof *argv);
  if (!argv) {
    fprintf(stderr, "xcollrun: out of memory\n");
    exit(1);
  }
  argv[0] = (char *)python;
  if (o->module)
    argv[1] = "-m";
  for (int k = 0; k < count; k++)
    argv[extra + k] = program[k];
  return argv; /* main frees it */
}

/* The cores this process may run on (sched_getaffinity), as torchrun's
 * 'cpu' counts them; at least 1. */
static int cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (int)online : 1;
}

/* NVIDIA GPUs the kernel driver lists (one directory each under
 * /proc/driver/nvidia/gpus); 0 without the driver. xcollrun does not link
 * CUDA, so this is what it can see without it. */
static int gpu_count(void) {
  const char *path = getenv("XCOLLRUN_GPU_DIR");
  DIR *dir = opendir(path && *path ? path : "/proc/driver/nvidia/gpus");
  if (!dir)
    return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(dir);
  return n;
}

/* --nproc-per-node: a number, or torchrun's 'cpu', 'gpu' and 'auto'. */
static int nproc_from_spec(const char *spec) {
  if (strcmp(spec, "cpu") == 0)
    return cpu_count();
  if (strcmp(spec, "gpu") == 0) {
    int n = gpu_count();
    if (n == 0)
      usage_error("--nproc-per-node gpu: no NVIDIA GPU found (no "
                  "/proc/driver/nvidia/gpus): use a number or 'cpu'");
    return n;
  }
  if (strcmp(spec, "auto") == 0) {
    int n = gpu_count();
    return n > 0 ? n : cpu_count();
  }
  return parse_int("--nproc-per-node", spec, 1, 4096);
}

/* The streams --redirects or --tee selects for local rank lr: SPEC is one
 * value 0-3 for every rank, or 'local_rank:value' pairs separated by commas
 * (ranks not named get 0), as torchrun's. Exits 2 on a bad SPEC. */
int run_std_mask(const char *flag, const char *spec, int lr, int nproc) {
  if (!spec)
    return 0;
  if (strchr(spec, ':') == NULL)
    return parse_int(flag, spec, 0, 3);
  int mask = 0;
  const char *p = spec;
  while (*p) {
    char *end = NULL;
    errno = 0;
    long rank = strtol(p, &end, 10);
    if (end == p || *end != ':' || errno || rank < 0 || rank >= nproc)
      usage_error("%s '%s': want 0-3, or local_rank:0-3 pairs with local "
                  "ranks 0..%d, e.g. '0:3,1:2'",
                  flag, spec, nproc - 1);
    p = end + 1;
    long value = strtol(p, &end, 10);
    if (end == p || (*end != ',' && *end != '\0') || value < 0 || value > 3)
      usage_error("%s '%s': the value after ':' must be 0-3 (0 none, 1 "
                  "stdout, 2 stderr, 3 both)",
                  flag, spec);
    if (rank == lr)
      mask = (int)value;
    p = *end == ',' ? end + 1 : end;
  }
  return mask;
}

/* --local-ranks-filter: which local ranks the console shows. */
static void parse_ranks_filter(options *o) {
  memset(o->shown, o->ranks_filter ? 0 : 1, (size_t)o->nproc_per_node);
  if (!o->ranks_filter)
    return;
  const char *p = o->ranks_filter;
  while (*p) {
    char *end = NULL;
    errno = 0;
    long rank = strtol(p, &end, 10);
    if (end == p || (*end != ',' && *end != '\0') || errno || rank < 0 ||
        rank >= o->nproc_per_node)
      usage_error("--local-ranks-filter '%s': want local ranks 0..%d "
                  "separated by commas, e.g. '0' or '0,2'",
                  o->ranks_filter, o->nproc_per_node - 1);
    o->shown[rank] = 1;
    p = *end == ',' ? end + 1 : end;
  }
}

/* Parses the options before the program. Exits 2 on a bad one. */
void run_parse_options(int argc, char **argv, options *o) {
  *o = (options){.nproc_per_node = 1,
                 .nnodes = 1,
                 .node_rank = 0,
                 .master_addr = "127.0.0.1",
                 .master_port = 29500,
                 .max_restarts = 0,
                 .grace_s = 5.0};
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (arg[0] != '-')
      break;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      usage(stdout);
      exit(0);
    }
    if (strcmp(arg, "--version") == 0) {
      printf("xcollrun (xcoll) %s\n", XCOLL_PROJECT_VERSION);
      exit(0);
    }
    if (strcmp(arg, "-m") == 0 || strcmp(arg, "--module") == 0) {
      o->module = 1;
      continue;
    }
    if (strcmp(arg, "--no-python") == 0 || strcmp(arg, "--no_python") == 0) {
      o->no_python = 1;
      continue;
    }
    if (strcmp(arg, "--run-path") == 0 || strcmp(arg, "--run_path") == 0) {
      o->run_path = 1;
      continue;
    }
    if (strcmp(arg, "--standalone") == 0) {
      o->standalone = 1;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0)
      usage_error("unknown option '%s'", arg);
    /* --flag_name=value and --flag-name value are the same */
    char name[64];
    const char *equals = strchr(arg, '=');
    size_t len = equals ? (size_t)(equals - arg) : strlen(arg);
    if (len >= sizeof name)
      usage_error("unknown option '%s'", arg);
    for (size_t k = 0; k < len; k++)
      name[k] = arg[k] == '_' ? '-' : arg[k];
    name[len] = '\0';
    static const char *const known[] = {
        "--nproc-per-node", "--nnodes",    "--node-rank",
        "--master-addr",    "--master-port", "--max-restarts",
        "--log-dir",        "--redirects",   "--tee",
        "--local-ranks-filter",
        /* torchrun's rendezvous flags (10..12), then those accepted and
         * ignored (13..17), then xcollrun's own (18, 19) */
        "--rdzv-endpoint", "--rdzv-id", "--rdzv-backend",
        "--role", "--monitor-interval", "--start-method", "--local-addr",
        "--rdzv-conf", "--store-host", "--on-rank-failure"};
    int which = -1;
    for (int k = 0; k < (int)(sizeof known / sizeof known[0]); k++)
      if (strcmp(name, known[k]) == 0)
        which = k;
    if (which < 0)
      usage_error("unknown option '%s'", arg);
    const char *value = equals ? equals + 1 : NULL;
    if (!value) {
      if (i + 1 >= argc)
        usage_error("%s needs a value", name);
      value = argv[++i];
    }
    switch (which) {
    case 0:
      o->nproc_spec = value;
      break;
    case 1:
      o->nnodes = parse_int(name, value, 1, 65536);
      break;
    case 2:
      o->node_rank = parse_int(name, value, 0, 65535);
      break;
    case 3:
      if (!*value)
        usage_error("--master-addr is empty");
      o->master_addr = value;
      break;
    case 4:
      o->master_port = parse_int(name, value, 0, 65535);
      break;
    case 5:
      o->max_restarts = parse_int(name, value, 0, 1000000);
      break;
    case 6:
      if (!*value)
        usage_error("--log-dir is empty");
      o->log_dir = value;
      break;
    case 7:
      o->redirects = value;
      break;
    case 8:
      o->tee = value;
      break;
    case 9:
      o->ranks_filter = value;
      break;
    case 10:
      rdzv_endpoint(o, value);
      break;
    case 11:
      if (!*value)
        usage_error("--rdzv-id is empty");
      o->run_id = value;
      break;
    case 12:
      /* torchrun's static rendezvous is what xcollrun does; c10d's store
       * also lives at the endpoint, so a c10d command line works as is. */
      if (strcmp(value, "static") != 0 && strcmp(value, "c10d") != 0)
        usage_error("--rdzv-backend %s: xcollrun's ranks meet at rank 0's "
                    "store (MASTER_ADDR:MASTER_PORT); give static or c10d",
                    value);
      break;
    case 18:
      if (strcmp(value, "launcher") == 0)
        o->store_on_launcher = 1;
      else if (strcmp(value, "rank0") == 0)
        o->store_on_launcher = 0;
      else
        usage_error("--store-host '%s': use 'launcher' (this xcollrun on "
                    "node 0 serves the rendezvous store) or 'rank0'",
                    value);
      break;
    case 19:
      if (strcmp(value, "stop") != 0 && strcmp(value, "continue") != 0)
        usage_error("--on-rank-failure wants 'stop' or 'continue', got '%s'",
                    value);
      o->continue_on_failure = strcmp(value, "continue") == 0;
      break;
    default:
      run_message("xcollrun: ignored: %s %s: %s", name, value,
                  ignored_why(which - 13));
      break;
    }
  }
  if (i >= argc)
    usage_error(o->module ? "-m needs a module name" : "no program to run");
  o->program_count = argc - i;
  o->program = python_program(o, argc - i, &argv[i]);
  if (o->nproc_spec)
    o->nproc_per_node = nproc_from_spec(o->nproc_spec);
  if (o->standalone) {
    if (o->nnodes != 1 || o->node_rank != 0)
      usage_error("--standalone is one node: drop --nnodes/--node-rank");
    o->master_addr = "127.0.0.1";
    o->master_port = 0;
  }
  /* every spec is checked now, not when the ranks start */
  for (int k = 0; k < o->nproc_per_node; k++) {
    (void)run_std_mask("--redirects", o->redirects, k, o->nproc_per_node);
    (void)run_std_mask("--tee", o->tee, k, o->nproc_per_node);
  }
  o->shown = malloc((size_t)o->nproc_per_node);
  if (!o->shown) {
    fprintf(stderr, "xcollrun: out of memory\n");
    exit(1);
  }
  parse_ranks_filter(o);
  if ((o->redirects || o->tee) && !o->log_dir) {
    /* torchrun logs to a temporary directory then; say where */
    static char dir[] = "/tmp/xcollrun_logs.XXXXXX";
    if (!mkdtemp(dir)) {
      fprintf(stderr, "xcollrun: cannot create a log directory: %s\n",
              strerror(errno));
      exit(1);
    }
    o->log_dir = dir;
    run_message("xcollrun: no --log-dir: logs go to %s", dir);
  }
  if (o->node_rank >= o->nnodes)
    usage_error("--node-rank %d must be less than --nnodes %d", o->node_rank,
                o->nnodes);
  if ((long)o->nnodes * o->nproc_per_node > INT_MAX / 2)
    usage_error("--nnodes %d times --nproc-per-node %d is too many ranks",
                o->nnodes, o->nproc_per_node);
  if (o->master_port == 0 && o->nnodes > 1)
    usage_error("--master-port 0 (pick a free port) only works with one node: "
                "the other nodes could not know the port");
  o->dump_wait_s = 2.0;
  const char *dump_wait = getenv("XCOLLRUN_DUMP_WAIT_S");
  if (dump_wait && *dump_wait) {
    char *end = NULL;
    errno = 0;
    o->dump_wait_s = strtod(dump_wait, &end);
    if (*end || errno || !(o->dump_wait_s >= 0) || !isfinite(o->dump_wait_s))
      usage_error("XCOLLRUN_DUMP_WAIT_S='%s' is not a number of seconds >= 0",
                  dump_wait);
  }
  const char *flight_dir = getenv("XCOLL_FLIGHT_RECORDER_DIR");
  o->user_flight_dir = flight_dir && *flight_dir ? flight_dir : NULL;
  const char *grace = getenv("XCOLLRUN_GRACE_S");
  if (grace && *grace) {
    char *end = NULL;
    errno = 0;
    o->grace_s = strtod(grace, &end);
    if (*end || errno || !(o->grace_s >= 0) || !isfinite(o->grace_s))
      usage_error("XCOLLRUN_GRACE_S='%s' is not a number of seconds >= 0",
                  grace);
  }
}
