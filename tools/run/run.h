/* run.h - the pieces of xcollrun (tools/xcollrun.c: a job's attempts, the
 * poll loop over the ranks, flight recorder dumps, main): the command line,
 * torchrun's flags (run_options.c), and each rank's keeper, process and
 * output (run_ranks.c). The program's opening comment says what it does. */
#ifndef XCOLL_TOOLS_RUN_H
#define XCOLL_TOOLS_RUN_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

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
  const char *run_id;     /* --rdzv-id: TORCHELASTIC_RUN_ID; NULL: own */
  unsigned char *shown;   /* per local rank: output on the console */
  /* With a log dir: each attempt's ranks dump their flight recorders
   * (docs/flight-recorder.md) to DIR/attempt_<k>/flight_recorder, unless
   * XCOLL_FLIGHT_RECORDER_DIR was set (then there). */
  const char *user_flight_dir;
  double dump_wait_s; /* XCOLLRUN_DUMP_WAIT_S: how long to wait for dumps */
  /* --store-host launcher: node 0's xcollrun serves the rendezvous store
   * (torchrun's agent store), so that it outlives every rank, rank 0 too;
   * the ranks get XCOLL_STORE_EXTERNAL=1. 0: rank 0 serves it. */
  int store_on_launcher;
  /* --on-rank-failure continue: a rank's failure is reported and the others
   * run on (an elastic job shrinks); 0 (stop) stops the group. */
  int continue_on_failure;
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

/* ---- run_options.c ---- */

/* One line on stderr, written at once so that it does not interleave with
 * a rank's line. */
void run_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses the options before the program. Exits 2 on a bad one. */
void run_parse_options(int argc, char **argv, options *o);

/* The streams --redirects or --tee (flag, as given in spec) selects for
 * local rank lr of nproc: STD_OUT | STD_ERR bits. Exits 2 on a bad spec. */
int run_std_mask(const char *flag, const char *spec, int lr, int nproc);

/* Whether text ends with suffix. */
int run_ends_with(const char *text, const char *suffix);

/* ---- run_ranks.c ---- */

/* Seconds on the monotonic clock. */
double run_now_s(void);

/* Writes the complete lines s holds to the console, each with r's
 * "[rank N] " prefix; with flush_partial the unterminated tail too. */
void run_emit_lines(const rank_process *r, rank_stream *s, int flush_partial);

/* Reads what s's pipe has, without blocking; closes it at EOF. */
void run_read_stream(const rank_process *r, rank_stream *s);

/* Opens local_rank's stdout.log (stream 0) or stderr.log (1) of attempt
 * under --log-dir, making its folders. The descriptor, or -1 with a
 * message. */
int run_open_rank_log(const options *o, int attempt, int local_rank,
                      int stream);

/* Where attempt's ranks write their flight recorder dumps. */
void run_flight_dir(const options *o, int attempt, char *out, size_t bytes);

/* mkdir -p; 0 or -1 with a message. */
int run_make_dirs(const char *dir);

/* In the child after fork: become r's keeper, then run the program as rank
 * r with torchrun's environment, output to out_fd and err_fd. */
void __attribute__((noreturn))
run_exec_rank(const options *o, int port, int attempt, const rank_process *r,
              int out_fd, int err_fd, const sigset_t *original_mask,
              pid_t launcher);

/* Sends sig to the process group of every running rank. */
void run_signal_group(rank_process *ranks, int count, int sig);

/* sig's name ("SIGTERM") in buffer, which it returns. */
const char *run_signal_name(int sig, char *buffer, size_t bytes);

/* How the job ends when this waitpid status is the first failure. */
int run_exit_code_of(int status);

#endif
