/* xcollrun - start the local ranks of a job, the way torchrun does.
 *
 *   xcollrun --nproc-per-node 4 ./train --epochs 2
 *
 * For each local rank it sets torchrun's environment (RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...),
 * runs the program with its output piped back and every line prefixed with
 * "[rank N] ", and watches the group: when one rank fails, the others are
 * sent SIGTERM, then SIGKILL after a grace period, so that a job never hangs
 * on a dead peer. SIGINT and SIGTERM sent to xcollrun go to every rank.
 * --max-restarts restarts the whole local group after a failure.
 *
 * Unless XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE is set, a single-node job gets a
 * fresh random secret in XCOLL_AUTH_TOKEN (docs/security.md), so that no
 * process outside the job can join its store or its ranks. Each rank runs
 * under a keeper process that leads the rank's process group and dies
 * with xcollrun (PR_SET_PDEATHSIG), killing the whole group then, so that
 * killing xcollrun, even by SIGKILL, leaves no rank nor anything a rank
 * started (a wrapper script's children) running.
 *
 * One thread, one poll() loop over the ranks' pipes and a signalfd that
 * delivers SIGCHLD, SIGINT, SIGTERM and SIGHUP. xcollrun's own messages go to
 * stderr; stdout carries only the ranks' output. See docs/launcher.md. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
/* A line longer than this is split, so that one rank cannot hold the others'
 * output back indefinitely. */
#define LINE_BUFFER_BYTES 65536

typedef struct options {
  int nproc_per_node;
  int nnodes;
  int node_rank;
  const char *master_addr;
  int master_port; /* 0: pick a free one for each attempt */
  int max_restarts;
  double grace_s;
  char **program; /* argv of the program, NULL-terminated */
  int program_count; /* arguments from the program on, in main's argv */
  int no_python;  /* --no-python: run a .py program as it is */
  int module;     /* -m: the program is a Python module */
  int run_path;   /* --run-path: the program is a Python file, any name */
  int standalone; /* --standalone: one node, a free port on 127.0.0.1 */
  const char *nproc_spec; /* --nproc-per-node as given: N, auto, cpu, gpu */
  const char *log_dir;    /* --log-dir: per-rank stdout.log / stderr.log */
  const char *redirects;  /* --redirects: 0-3, or local_rank:0-3,... */
  const char *tee;        /* --tee: the same forms */
  const char *ranks_filter; /* --local-ranks-filter: "0,2" */
  unsigned char *shown;   /* per local rank: output on the console */
  /* With a log dir: each attempt's ranks dump their flight recorders
   * (docs/flight-recorder.md) to DIR/attempt_<k>/flight_recorder, unless
   * XCOLL_FLIGHT_RECORDER_DIR was set (then there). */
  const char *user_flight_dir;
  double dump_wait_s; /* XCOLLRUN_DUMP_WAIT_S: how long to wait for dumps */
} options;

/* Bits of --redirects / --tee (torchrun's Std): 1 stdout, 2 stderr. */
#define STD_OUT 1
#define STD_ERR 2

/* One of a rank's output streams: a pipe read end and the line it holds. */
typedef struct rank_stream {
  int fd;      /* -1 once closed */
  int to;      /* 1 (stdout) or 2 (stderr); -1: not shown on the console */
  int file_fd; /* the rank's log file for this stream, or -1 */
  char buffer[LINE_BUFFER_BYTES];
  size_t used;
} rank_stream;

typedef struct rank_process {
  int rank;
  int local_rank;
  pid_t pid;   /* also its process group id */
  int running; /* not yet reaped */
  int status;  /* from waitpid */
  rank_stream streams[2];
} rank_process;

static void message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void message(const char *fmt, ...) {
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
      "  --max-restarts N     restart the local group up to N times after a\n"
      "                       failure (default 0)\n"
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
      "exit status, or 128+signal if it was killed; 2 for bad options.\n",
      to);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("xcollrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n\n", stderr);
  va_end(ap);
  usage(stderr);
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

static int ends_with(const char *text, const char *suffix) {
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
      o->run_path || (!o->no_python && ends_with(program[0], ".py"));
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
static int std_mask(const char *flag, const char *spec, int lr, int nproc) {
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
static void parse_options(int argc, char **argv, options *o) {
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
        "--local-ranks-filter"};
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
    (void)std_mask("--redirects", o->redirects, k, o->nproc_per_node);
    (void)std_mask("--tee", o->tee, k, o->nproc_per_node);
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
    message("xcollrun: no --log-dir: logs go to %s", dir);
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

/* Asks the kernel for a free port on the master address: bind to port 0,
 * read the port, close. Another process may take it before rank 0 binds
 * it; a restart then gets a new one. Returns the port or -1. */
static int pick_free_port(const char *host) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *list = NULL;
  int rc = getaddrinfo(host, "0", &hints, &list);
  if (rc != 0) {
    message("xcollrun: cannot resolve --master-addr '%s': %s", host,
            gai_strerror(rc));
    return -1;
  }
  int port = -1;
  for (struct addrinfo *ai = list; ai && port < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    struct sockaddr_storage bound;
    socklen_t len = sizeof bound;
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&bound, &len) == 0)
      port = ntohs(bound.ss_family == AF_INET6
                       ? ((struct sockaddr_in6 *)&bound)->sin6_port
                       : ((struct sockaddr_in *)&bound)->sin_port);
    close(fd);
  }
  freeaddrinfo(list);
  if (port < 0)
    message("xcollrun: cannot find a free port on --master-addr '%s'", host);
  return port;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_all(int fd, const char *data, size_t bytes) {
  while (bytes) {
    ssize_t n = write(fd, data, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return; /* the reader went away (EPIPE): drop the output */
    data += n;
    bytes -= (size_t)n;
  }
}

/* Writes the complete lines held by s, each with the rank's prefix, in one
 * write so that lines of different ranks never mix. With flush_partial the
 * unterminated tail is written too, ended with a newline. */
static void emit_lines(const rank_process *r, rank_stream *s,
                       int flush_partial) {
  if (s->to < 0) { /* not on the console: the log file got it as it came */
    s->used = 0;
    return;
  }
  char prefix[32];
  int prefix_len = snprintf(prefix, sizeof prefix, "[rank %d] ", r->rank);
  size_t lines = 0;
  for (size_t k = 0; k < s->used; k++)
    lines += s->buffer[k] == '\n';
  int partial = flush_partial && s->used > 0 && s->buffer[s->used - 1] != '\n';
  if (lines == 0 && !partial)
    return;
  size_t out_bytes = s->used + (lines + 1) * ((size_t)prefix_len + 1);
  char *out = malloc(out_bytes);
  size_t at = 0, start = 0, consumed = 0;
  for (size_t k = 0; k < s->used; k++) {
    if (s->buffer[k] != '\n' && !(partial && k == s->used - 1))
      continue;
    size_t len = k + 1 - start;
    if (out) {
      memcpy(out + at, prefix, (size_t)prefix_len);
      memcpy(out + at + prefix_len, s->buffer + start, len);
      at += (size_t)prefix_len + len;
      if (s->buffer[k] != '\n')
        out[at++] = '\n';
    } else { /* no memory: still deliver, in pieces */
      write_all(s->to, prefix, (size_t)prefix_len);
      write_all(s->to, s->buffer + start, len);
      if (s->buffer[k] != '\n')
        write_all(s->to, "\n", 1);
    }
    start = consumed = k + 1;
  }
  if (out) {
    write_all(s->to, out, at);
    free(out);
  }
  memmove(s->buffer, s->buffer + consumed, s->used - consumed);
  s->used -= consumed;
}

/* Reads what the pipe has (without blocking). At EOF or error the stream's
 * partial line is written and the pipe closed. */
static void read_stream(const rank_process *r, rank_stream *s) {
  while (s->fd >= 0) {
    if (s->used == sizeof s->buffer) {
      /* a line longer than the buffer: pass it on in pieces */
      emit_lines(r, s, 1);
    }
    ssize_t n = read(s->fd, s->buffer + s->used, sizeof s->buffer - s->used);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n <= 0) {
      emit_lines(r, s, 1);
      close(s->fd);
      s->fd = -1;
      return;
    }
    if (s->file_fd >= 0)
      write_all(s->file_fd, s->buffer + s->used, (size_t)n);
    s->used += (size_t)n;
    emit_lines(r, s, 0);
  }
}

static void set_env_int(const char *name, long value) {
  char text[32];
  snprintf(text, sizeof text, "%ld", value);
  setenv(name, text, 1);
}

/* Creates (mkdir -p) DIR/attempt_<attempt>/<local_rank>/ and opens its
 * stdout.log (stream 0) or stderr.log (1), torchrun's layout under its
 * run id. Returns the descriptor (close-on-exec), or -1 with a message. */
static int open_rank_log(const options *o, int attempt, int local_rank,
                         int stream) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/attempt_%d/%d", o->log_dir, attempt,
                   local_rank);
  if (n < 0 || (size_t)n >= sizeof path - 16) {
    message("xcollrun: --log-dir '%s' is too long", o->log_dir);
    return -1;
  }
  for (char *p = path + 1; *p; p++) { /* each parent, then the leaf */
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      message("xcollrun: cannot create %s: %s", path, strerror(errno));
      return -1;
    }
    *p = '/';
  }
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    message("xcollrun: cannot create %s: %s", path, strerror(errno));
    return -1;
  }
  strcat(path, stream == 0 ? "/stdout.log" : "/stderr.log");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    message("xcollrun: cannot open %s: %s", path, strerror(errno));
  return fd;
}

/* Where attempt's ranks write their flight recorder dumps. */
static void flight_dir(const options *o, int attempt, char *out, size_t bytes) {
  if (o->user_flight_dir)
    snprintf(out, bytes, "%s", o->user_flight_dir);
  else
    snprintf(out, bytes, "%s/attempt_%d/flight_recorder", o->log_dir, attempt);
}

/* mkdir -p; 0 or -1 with a message. */
static int make_dirs(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      message("xcollrun: cannot create %s: %s", path, strerror(errno));
      return -1;
    }
    *p = c;
    if (c == '\0')
      return 0;
  }
}

/* The keeper of one rank: the process xcollrun forks, leader of the
 * rank's process group and a child subreaper. It runs the rank as its
 * child and waits. When the rank exits, it kills what the rank left in its
 * group (a wrapper's children) and exits the same way; when xcollrun dies,
 * even by SIGKILL, the kernel sends it SIGUSR2 (PR_SET_PDEATHSIG) and it
 * kills the whole group. SIGUSR1 from xcollrun goes on to the rank alone
 * (a flight recorder dump). PR_SET_PDEATHSIG alone reaches only the direct
 * child: a rank started through `bash -c prog` would leave prog running.
 * The signals xcollrun forwards to the group (SIGTERM, SIGINT, SIGHUP)
 * stay blocked here: the rank decides what they do. Returns in the rank's
 * process (child), never in the keeper. */
static void keep_rank(pid_t launcher) {
  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGUSR1);
  sigaddset(&wanted, SIGUSR2);
  sigaddset(&wanted, SIGCHLD);
  sigprocmask(SIG_BLOCK, &wanted, NULL);
  /* If xcollrun died before this line, the signal was never armed:
   * getppid() then names another process. */
  if (prctl(PR_SET_PDEATHSIG, SIGUSR2) != 0 || getppid() != launcher)
    _exit(127);
  setpgid(0, 0);
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_t keeper = getpid();
  pid_t rank = fork();
  if (rank < 0)
    _exit(127);
  if (rank == 0) {
    /* The rank dies with its keeper (whose death means xcollrun's). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != keeper)
      _exit(127);
    return;
  }
  /* A signal xcollrun sent the group before the fork is pending here only
   * (a child does not inherit pending signals): pass it on. One sent after
   * the fork reached the rank too and is passed on a second time, which a
   * window of a few instructions makes rare and a stopping rank survives. */
  const int forwarded[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
    sigset_t pending, one;
    sigpending(&pending);
    if (!sigismember(&pending, forwarded[i]))
      continue;
    sigemptyset(&one);
    sigaddset(&one, forwarded[i]);
    struct timespec now = {0, 0};
    (void)sigtimedwait(&one, NULL, &now); /* consume it here */
    kill(rank, forwarded[i]);
  }
  for (;;) {
    siginfo_t info;
    if (sigwaitinfo(&wanted, &info) < 0)
      continue;
    if (info.si_signo == SIGUSR2) {
      kill(0, SIGKILL); /* the whole group, this process with it */
      _exit(137);
    }
    if (info.si_signo == SIGUSR1) {
      /* xcollrun asks for the rank's flight recorder dump: the rank
       * only, not what it started (SIGUSR1 would end a wrapper shell). */
      kill(rank, SIGUSR1);
      continue;
    }
    int status;
    pid_t done;
    while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
      if (done != rank)
        continue; /* an orphan of the rank's, adopted here */
      /* What the rank left behind goes with it; then its exit status
       * (or its signal) becomes this process's, as xcollrun reads it. */
      /* This process steps out of the group (into xcollrun's) so that
       * SIGKILL to the group spares it; SIGTERM where it cannot. */
      if (setpgid(0, getpgid(launcher)) == 0)
        kill(-keeper, SIGKILL);
      else
        kill(0, SIGTERM); /* blocked here */
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
      if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
      }
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
  }
}

/* In the child, after fork: the keeper (keep_rank), then in the rank's
 * process environment, pipes, signals, exec. */
static void __attribute__((noreturn))
exec_rank(const options *o, int port, int attempt, const rank_process *r,
          int out_fd, int err_fd, const sigset_t *original_mask,
          pid_t launcher) {
  keep_rank(launcher);
  if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0)
    _exit(127);
  /* SIGPIPE was ignored in xcollrun; the program gets the defaults back */
  signal(SIGPIPE, SIG_DFL);
  signal(SIGUSR1, SIG_DFL);
  signal(SIGUSR2, SIG_DFL);
  if (o->log_dir) {
    /* Dumps on a failure and on xcollrun's SIGUSR1 (docs/flight-recorder.md).
     * Until xcoll installs its handler, SIGUSR1 is ignored, so that an early
     * request cannot kill the rank (xcoll takes over an ignored SIGUSR1). */
    char dir[PATH_MAX];
    flight_dir(o, attempt, dir, sizeof dir);
    setenv("XCOLL_FLIGHT_RECORDER_DIR", dir, 1);
    setenv("XCOLL_FLIGHT_RECORDER_SIGNAL", "1", 0);
    const char *with_signal = getenv("XCOLL_FLIGHT_RECORDER_SIGNAL");
    if (with_signal && strcmp(with_signal, "1") == 0)
      signal(SIGUSR1, SIG_IGN);
  }
  sigprocmask(SIG_SETMASK, original_mask, NULL);

  int world_size = o->nnodes * o->nproc_per_node;
  set_env_int("RANK", r->rank);
  set_env_int("WORLD_SIZE", world_size);
  set_env_int("LOCAL_RANK", r->local_rank);
  set_env_int("LOCAL_WORLD_SIZE", o->nproc_per_node);
  set_env_int("GROUP_RANK", o->node_rank);
  set_env_int("GROUP_WORLD_SIZE", o->nnodes);
  set_env_int("NODE_RANK", o->node_rank);
  set_env_int("ROLE_RANK", r->rank);
  set_env_int("ROLE_WORLD_SIZE", world_size);
  setenv("MASTER_ADDR", o->master_addr, 1);
  set_env_int("MASTER_PORT", port);
  set_env_int("TORCHELASTIC_RESTART_COUNT", attempt);
  set_env_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts);
  /* One id per job, the same in every rank and restart, as torchrun's
   * --standalone makes one (a random uuid); kept when already set. */
  char run_id[64];
  snprintf(run_id, sizeof run_id, "xcollrun-%d", (int)launcher);
  setenv("TORCHELASTIC_RUN_ID", run_id, 0);
  /* N ranks each with a thread per core would oversubscribe the machine */
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);

  execvp(o->program[0], o->program);
  fprintf(stderr, "xcollrun: cannot run '%s': %s\n", o->program[0],
          strerror(errno));
  _exit(127);
}

static void signal_group(rank_process *ranks, int count, int sig) {
  for (int k = 0; k < count; k++)
    if (ranks[k].running && ranks[k].pid > 0)
      kill(-ranks[k].pid, sig); /* the rank and whatever it started */
}

static const char *signal_name(int sig, char *buffer, size_t bytes) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buffer, bytes, "SIG%s", abbrev);
  else
    snprintf(buffer, bytes, "signal %d", sig);
  return buffer;
}

/* How the job ends when this status is the first failure. */
static int exit_code_of(int status) {
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return WEXITSTATUS(status);
  return 1;
}

enum group_result { GROUP_OK, GROUP_FAILED, GROUP_INTERRUPTED };

/* ---- flight recorder dumps (docs/flight-recorder.md) ---- */

/* Whether dir holds a dump of rank (xcoll_fr.c<id>.r<rank>.json) written
 * at or after since (CLOCK_REALTIME seconds); rank -1: any dump. */
static int has_dump(const char *dir, int rank, double since) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  char suffix[32];
  snprintf(suffix, sizeof suffix, ".r%d.json", rank);
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "xcoll_fr.", 9) != 0 ||
        !ends_with(e->d_name, rank < 0 ? ".json" : suffix) ||
        strstr(e->d_name, ".tmp.") != NULL)
      continue;
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0 &&
        st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9 >= since)
      found = 1;
  }
  closedir(d);
  return found;
}

/* Whether a rank's keeper has exited (not reaped: the loop reaps it). */
static int has_exited(pid_t pid) {
  siginfo_t info;
  memset(&info, 0, sizeof info);
  return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

/* Before the group is stopped: ask every running rank for its flight
 * recorder dump (SIGUSR1 through its keeper, which the ranks were told to
 * handle) and wait until each has written one, has exited, or
 * XCOLLRUN_DUMP_WAIT_S has passed (a stopped rank never answers). The
 * ranks' output is read meanwhile. */
static void collect_dumps(const options *o, int attempt, rank_process *ranks,
                          int count, struct pollfd *fds) {
  const char *with_signal = getenv("XCOLL_FLIGHT_RECORDER_SIGNAL");
  if (!o->log_dir || (with_signal && strcmp(with_signal, "1") != 0))
    return;
  char dir[PATH_MAX];
  flight_dir(o, attempt, dir, sizeof dir);
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  /* file times can be a tick coarser than the clock */
  double since = (double)wall.tv_sec + wall.tv_nsec * 1e-9 - 0.05;
  int asked = 0;
  for (int k = 0; k < count; k++)
    if (ranks[k].running && !has_exited(ranks[k].pid)) {
      kill(ranks[k].pid, SIGUSR1); /* the keeper passes it to the rank */
      asked++;
    }
  if (!asked)
    return;
  message("xcollrun: asking %d rank(s) for their flight recorder dumps in %s",
          asked, dir);
  double deadline = now_s() + o->dump_wait_s;
  for (;;) {
    int waiting = 0;
    for (int k = 0; k < count; k++)
      if (ranks[k].running && !has_exited(ranks[k].pid) &&
          !has_dump(dir, ranks[k].rank, since))
        waiting++;
    double left = deadline - now_s();
    if (!waiting || left <= 0)
      break;
    int nfds = 0;
    for (int k = 0; k < count; k++)
      for (int st = 0; st < 2; st++)
        if (ranks[k].streams[st].fd >= 0)
          fds[nfds++] =
              (struct pollfd){.fd = ranks[k].streams[st].fd, .events = POLLIN};
    int wait_ms = (int)ceil(left * 1000.0);
    (void)poll(fds, (nfds_t)nfds, wait_ms < 50 ? wait_ms : 50);
    for (int k = 0; k < count; k++)
      for (int st = 0; st < 2; st++)
        if (ranks[k].streams[st].fd >= 0)
          read_stream(&ranks[k], &ranks[k].streams[st]);
  }
}

/* After a failed or stopped attempt: xcoll-fr's summary of the dumps, on
 * stderr. xcoll-fr is looked for next to xcollrun, then on PATH. */
static void summarize_dumps(const options *o, int attempt) {
  if (!o->log_dir)
    return;
  char dir[PATH_MAX];
  flight_dir(o, attempt, dir, sizeof dir);
  if (!has_dump(dir, -1, 0))
    return;
  char tool[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", tool, sizeof tool - 16);
  const char *program = "xcoll-fr";
  if (n > 0) {
    tool[n] = '\0';
    char *slash = strrchr(tool, '/');
    if (slash) {
      strcpy(slash + 1, "xcoll-fr");
      if (access(tool, X_OK) == 0)
        program = tool;
    }
  }
  message("xcollrun: flight recorder dumps are in %s; xcoll-fr says:", dir);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execlp(program, program, dir, (char *)NULL);
    fprintf(stderr, "xcollrun: cannot run xcoll-fr: %s\n", strerror(errno));
    _exit(127);
  }
  if (pid > 0)
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* Runs one attempt of the local group until every rank has exited.
 * *exit_code is what xcollrun should exit with if this is the end. */
static enum group_result run_group(const options *o, int port, int attempt,
                                   int signal_fd, const sigset_t *original_mask,
                                   int *exit_code) {
  int count = o->nproc_per_node;
  rank_process *ranks = calloc((size_t)count, sizeof *ranks);
  struct pollfd *fds = calloc((size_t)(2 * count + 1), sizeof *fds);
  if (!ranks || !fds) {
    message("xcollrun: out of memory for %d ranks", count);
    free(ranks);
    free(fds);
    *exit_code = 1;
    return GROUP_FAILED;
  }
  enum group_result result = GROUP_OK;
  int stopping = 0; /* SIGTERM sent to the group */
  double kill_deadline = 0;
  int killed = 0;
  int live = 0;

  int shown_count = 0;
  for (int k = 0; k < count; k++)
    shown_count += o->shown[k];
  if (o->log_dir) {
    char dir[PATH_MAX];
    flight_dir(o, attempt, dir, sizeof dir);
    if (make_dirs(dir) != 0)
      stopping = 1;
  }
  for (int k = 0; k < count && !stopping; k++) {
    rank_process *r = &ranks[k];
    r->local_rank = k;
    r->rank = o->node_rank * o->nproc_per_node + k;
    r->streams[0].fd = r->streams[1].fd = -1;
    r->streams[0].file_fd = r->streams[1].file_fd = -1;
    int redirect = std_mask("--redirects", o->redirects, k, count);
    int tee = std_mask("--tee", o->tee, k, count);
    int file_fd[2] = {-1, -1}, to[2] = {-1, -1}, direct[2] = {0, 0};
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    int ok = 1;
    for (int st = 0; st < 2 && ok; st++) {
      int bit = st == 0 ? STD_OUT : STD_ERR;
      int console = st == 0 ? STDOUT_FILENO : STDERR_FILENO;
      if ((redirect | tee) & bit) {
        file_fd[st] = open_rank_log(o, attempt, k, st);
        ok = file_fd[st] >= 0;
      }
      if (o->shown[k] && !(redirect & bit))
        to[st] = console;
      /* one rank chosen by the filter, not copied to a file: it gets the
       * terminal itself, so that it can tell it is on one */
      direct[st] = to[st] >= 0 && file_fd[st] < 0 && o->ranks_filter &&
                   shown_count == 1 && isatty(console);
      if (ok && !direct[st] && pipe2(pipes[st], O_CLOEXEC) != 0) {
        message("xcollrun: cannot create pipes for rank %d: %s", r->rank,
                strerror(errno));
        ok = 0;
      }
    }
    if (!ok) {
      for (int st = 0; st < 2; st++) {
        if (file_fd[st] >= 0)
          close(file_fd[st]);
        for (int p = 0; p < 2; p++)
          if (pipes[st][p] >= 0)
            close(pipes[st][p]);
      }
      stopping = 1;
      break;
    }
    int child_out = direct[0] ? STDOUT_FILENO : pipes[0][1];
    int child_err = direct[1] ? STDERR_FILENO : pipes[1][1];
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid == 0)
      exec_rank(o, port, attempt, r, child_out, child_err, original_mask,
                launcher);
    for (int st = 0; st < 2; st++)
      if (pipes[st][1] >= 0)
        close(pipes[st][1]);
    if (pid < 0) {
      message("xcollrun: cannot start rank %d: %s", r->rank, strerror(errno));
      for (int st = 0; st < 2; st++) {
        if (pipes[st][0] >= 0)
          close(pipes[st][0]);
        if (file_fd[st] >= 0)
          close(file_fd[st]);
      }
      stopping = 1;
      break;
    }
    /* also here, so that a signal sent before the child runs setpgid
     * still reaches its group */
    setpgid(pid, pid);
    r->pid = pid;
    r->running = 1;
    live++;
    for (int st = 0; st < 2; st++) {
      r->streams[st] = (rank_stream){
          .fd = pipes[st][0], .to = to[st], .file_fd = file_fd[st]};
      if (pipes[st][0] >= 0)
        fcntl(pipes[st][0], F_SETFL, O_NONBLOCK);
    }
  }
  if (stopping) {
    result = GROUP_FAILED;
    *exit_code = 1;
    signal_group(ranks, count, SIGTERM);
    kill_deadline = now_s() + o->grace_s;
  }

  while (live > 0) {
    int nfds = 0;
    fds[nfds++] = (struct pollfd){.fd = signal_fd, .events = POLLIN};
    for (int k = 0; k < count; k++)
      for (int s = 0; s < 2; s++)
        if (ranks[k].streams[s].fd >= 0)
          fds[nfds++] =
              (struct pollfd){.fd = ranks[k].streams[s].fd, .events = POLLIN};
    int timeout_ms = -1;
    if (stopping && !killed) {
      double left = kill_deadline - now_s();
      timeout_ms = left <= 0 ? 0 : (int)ceil(left * 1000.0);
    }
    int ready = poll(fds, (nfds_t)nfds, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      message("xcollrun: poll failed: %s", strerror(errno));
      signal_group(ranks, count, SIGKILL);
      killed = 1;
    }

    /* output first, so that a rank's last words come before its obituary */
    for (int k = 0; k < count; k++)
      for (int s = 0; s < 2; s++)
        if (ranks[k].streams[s].fd >= 0)
          read_stream(&ranks[k], &ranks[k].streams[s]);

    struct signalfd_siginfo info;
    while (read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {
      int sig = (int)info.ssi_signo;
      if (sig == SIGCHLD)
        continue; /* reaped below */
      char name[32];
      message("xcollrun: got %s: passing it to every rank",
              signal_name(sig, name, sizeof name));
      if (!stopping)
        collect_dumps(o, attempt, ranks, count, fds);
      signal_group(ranks, count, sig);
      if (result != GROUP_FAILED) {
        result = GROUP_INTERRUPTED;
        *exit_code = 128 + sig;
      }
      if (!stopping) {
        stopping = 1;
        kill_deadline = now_s() + o->grace_s;
      }
    }

    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      rank_process *r = NULL;
      for (int k = 0; k < count; k++)
        if (ranks[k].pid == pid && ranks[k].running)
          r = &ranks[k];
      if (!r)
        continue; /* not one of ours (an orphan adopted by nobody) */
      r->running = 0;
      r->status = status;
      live--;
      for (int s = 0; s < 2; s++)
        if (r->streams[s].fd >= 0)
          read_stream(r, &r->streams[s]);
      int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed || stopping)
        continue; /* a clean exit, or a rank we are stopping anyway */
      char name[32];
      if (WIFSIGNALED(status))
        message("xcollrun: rank %d (pid %d) was killed by signal %s (%s)",
                r->rank, (int)pid,
                signal_name(WTERMSIG(status), name, sizeof name),
                strsignal(WTERMSIG(status)));
      else
        message("xcollrun: rank %d (pid %d) exited with status %d", r->rank,
                (int)pid, WEXITSTATUS(status));
      result = GROUP_FAILED;
      *exit_code = exit_code_of(status);
      if (live > 0)
        collect_dumps(o, attempt, ranks, count, fds);
      if (live > 0)
        message("xcollrun: stopping the other %d rank(s) (SIGTERM, then "
                "SIGKILL after %.3g s)",
                live, o->grace_s);
      stopping = 1;
      kill_deadline = now_s() + o->grace_s;
      signal_group(ranks, count, SIGTERM);
    }

    if (stopping && !killed && live > 0 && now_s() >= kill_deadline) {
      for (int k = 0; k < count; k++)
        if (ranks[k].running)
          message("xcollrun: rank %d (pid %d) did not exit %.3g s after "
                  "SIGTERM: sending SIGKILL",
                  ranks[k].rank, (int)ranks[k].pid, o->grace_s);
      signal_group(ranks, count, SIGKILL);
      killed = 1;
    }
  }

  /* Every rank has exited. What they wrote is in the pipes; a process they
   * left behind may keep a pipe open, so read without waiting for EOF. */
  for (int k = 0; k < count; k++)
    for (int s = 0; s < 2; s++) {
      rank_stream *st = &ranks[k].streams[s];
      if (st->fd >= 0) {
        read_stream(&ranks[k], st);
        emit_lines(&ranks[k], st, 1);
        if (st->fd >= 0)
          close(st->fd);
        st->fd = -1;
      }
      if (st->file_fd >= 0)
        close(st->file_fd);
      st->file_fd = -1;
    }
  free(ranks);
  free(fds);
  if (result == GROUP_OK)
    *exit_code = 0;
  else
    summarize_dumps(o, attempt);
  return result;
}

/* Give the job a secret of its own unless the user chose one. Another node
 * could not know a secret made here, so a multi-node job must bring its own. */
static int setup_job_secret(const options *o) {
  const char *token = getenv("XCOLL_AUTH_TOKEN");
  const char *file = getenv("XCOLL_AUTH_FILE");
  if ((token && *token) || (file && *file))
    return 0;
  if (o->nnodes > 1) {
    message("xcollrun: no XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE: the ranks of "
            "this %d-node job will accept any peer; set the same secret on "
            "every node (see docs/security.md)",
            o->nnodes);
    return 0;
  }
  if (sodium_init() < 0) {
    message("xcollrun: libsodium failed to initialise: cannot make a job "
            "secret");
    return -1;
  }
  unsigned char secret[32];
  char hex[2 * sizeof secret + 1];
  randombytes_buf(secret, sizeof secret);
  sodium_bin2hex(hex, sizeof hex, secret, sizeof secret);
  sodium_memzero(secret, sizeof secret);
  setenv("XCOLL_AUTH_TOKEN", hex, 1);
  sodium_memzero(hex, sizeof hex);
  return 0;
}

int main(int argc, char **argv) {
  options o;
  parse_options(argc, argv, &o);
  if (setup_job_secret(&o) != 0)
    return 1;

  /* Signals arrive through the signalfd, in the poll loop. */
  sigset_t handled, original_mask;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGHUP);
  sigprocmask(SIG_BLOCK, &handled, &original_mask);
  int signal_fd = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    message("xcollrun: signalfd failed: %s", strerror(errno));
    return 1;
  }
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher */
  /* Orphans of the ranks' keepers come here to be reaped, not to init. */
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);

  int exit_code = 1;
  for (int attempt = 0; attempt <= o.max_restarts; attempt++) {
    int port = o.master_port ? o.master_port : pick_free_port(o.master_addr);
    if (port < 0)
      return 1;
    enum group_result result =
        run_group(&o, port, attempt, signal_fd, &original_mask, &exit_code);
    if (result != GROUP_FAILED)
      break;
    if (attempt < o.max_restarts)
      message("xcollrun: restarting the local group (restart %d of %d)%s",
              attempt + 1, o.max_restarts,
              o.master_port ? "" : " on a new port");
  }
  close(signal_fd);
  free(o.shown);
  if (o.program != argv + (argc - o.program_count))
    free(o.program); /* python_program built it */
  return exit_code;
}
