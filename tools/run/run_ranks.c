/* run_ranks.c - one rank of xcollrun (run.h): its output, read from its
 * pipes and written line by line with a "[rank N] " prefix (and to its log
 * files); its keeper process and its exec with torchrun's environment; the
 * signals xcollrun sends its group and how its exit ends the job. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

double run_now_s(void) {
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
void run_emit_lines(const rank_process *r, rank_stream *s,
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
void run_read_stream(const rank_process *r, rank_stream *s) {
  while (s->fd >= 0) {
    if (s->used == sizeof s->buffer) {
      /* a line longer than the buffer: pass it on in pieces */
      run_emit_lines(r, s, 1);
    }
    ssize_t n = read(s->fd, s->buffer + s->used, sizeof s->buffer - s->used);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n <= 0) {
      run_emit_lines(r, s, 1);
      close(s->fd);
      s->fd = -1;
      return;
    }
    if (s->file_fd >= 0)
      write_all(s->file_fd, s->buffer + s->used, (size_t)n);
    s->used += (size_t)n;
    run_emit_lines(r, s, 0);
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
int run_open_rank_log(const options *o, int attempt, int local_rank,
                      int stream) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/attempt_%d/%d", o->log_dir, attempt,
                   local_rank);
  if (n < 0 || (size_t)n >= sizeof path - 16) {
    run_message("xcollrun: --log-dir '%s' is too long", o->log_dir);
    return -1;
  }
  for (char *p = path + 1; *p; p++) { /* each parent, then the leaf */
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      run_message("xcollrun: cannot create %s: %s", path, strerror(errno));
      return -1;
    }
    *p = '/';
  }
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    run_message("xcollrun: cannot create %s: %s", path, strerror(errno));
    return -1;
  }
  strcat(path, stream == 0 ? "/stdout.log" : "/stderr.log");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    run_message("xcollrun: cannot open %s: %s", path, strerror(errno));
  return fd;
}

/* Where attempt's ranks write their flight recorder dumps. */
void run_flight_dir(const options *o, int attempt, char *out, size_t bytes) {
  if (o->user_flight_dir)
    snprintf(out, bytes, "%s", o->user_flight_dir);
  else
    snprintf(out, bytes, "%s/attempt_%d/flight_recorder", o->log_dir, attempt);
}

/* mkdir -p; 0 or -1 with a message. */
int run_make_dirs(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      run_message("xcollrun: cannot create %s: %s", path, strerror(errno));
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
void __attribute__((noreturn))
run_exec_rank(const options *o, int port, int attempt, const rank_process *r,
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
    run_flight_dir(o, attempt, dir, sizeof dir);
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
  if (o->run_id)
    setenv("TORCHELASTIC_RUN_ID", o->run_id, 1); /* --rdzv-id */
  else
    setenv("TORCHELASTIC_RUN_ID", run_id, 0);
  /* N ranks each with a thread per core would oversubscribe the machine */
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);

  execvp(o->program[0], o->program);
  fprintf(stderr, "xcollrun: cannot run '%s': %s\n", o->program[0],
          strerror(errno));
  _exit(127);
}

void run_signal_group(rank_process *ranks, int count, int sig) {
  for (int k = 0; k < count; k++)
    if (ranks[k].running && ranks[k].pid > 0)
      kill(-ranks[k].pid, sig); /* the rank and whatever it started */
}

const char *run_signal_name(int sig, char *buffer, size_t bytes) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buffer, bytes, "SIG%s", abbrev);
  else
    snprintf(buffer, bytes, "signal %d", sig);
  return buffer;
}

/* How the job ends when this status is the first failure. */
int run_exit_code_of(int status) {
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return WEXITSTATUS(status);
  return 1;
}
