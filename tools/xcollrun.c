/* xcollrun - start the local ranks of a job, the way torchrun does.
 *
 *   xcollrun --nproc-per-node 4 ./train --epochs 2
 *
 * For each local rank it sets torchrun's environment (RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...),
 * runs the program with its output piped back and every line prefixed with
 * "[rank N] ", and watches the group: when one rank fails, the others are
 * sent SIGTERM, then SIGKILL after a grace period, so that a job never hangs
 * on a dead peer (unless --on-rank-failure continue: then the others run on,
 * for programs that shrink their communicator and go on). SIGINT and
 * SIGTERM sent to xcollrun go to every rank.
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
 * stderr; stdout carries only the ranks' output. See docs/launcher.md.
 *
 * This file runs the job's attempts, the poll loop and the flight recorder
 * dumps; the command line and each rank's process are in run/ (run.h). */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "run.h"
#include "store.h"

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
    run_message("xcollrun: cannot resolve --master-addr '%s': %s", host,
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
    run_message("xcollrun: cannot find a free port on --master-addr '%s'",
                host);
  return port;
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
        !run_ends_with(e->d_name, rank < 0 ? ".json" : suffix) ||
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
  run_flight_dir(o, attempt, dir, sizeof dir);
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
  run_message(
      "xcollrun: asking %d rank(s) for their flight recorder dumps in %s",
      asked, dir);
  double deadline = run_now_s() + o->dump_wait_s;
  for (;;) {
    int waiting = 0;
    for (int k = 0; k < count; k++)
      if (ranks[k].running && !has_exited(ranks[k].pid) &&
          !has_dump(dir, ranks[k].rank, since))
        waiting++;
    double left = deadline - run_now_s();
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
          run_read_stream(&ranks[k], &ranks[k].streams[st]);
  }
}

/* After a failed or stopped attempt: xcoll-fr's summary of the dumps, on
 * stderr. xcoll-fr is looked for next to xcollrun, then on PATH. */
static void summarize_dumps(const options *o, int attempt) {
  if (!o->log_dir)
    return;
  char dir[PATH_MAX];
  run_flight_dir(o, attempt, dir, sizeof dir);
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
  run_message("xcollrun: flight recorder dumps are in %s; xcoll-fr says:", dir);
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
    run_message("xcollrun: out of memory for %d ranks", count);
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
  /* --on-rank-failure continue: ranks that exited 0, the first non-zero
   * exit status, and the first death's code (128+signal) */
  int exited_ok = 0, first_exit_status = 0, first_death_code = 0;

  int shown_count = 0;
  for (int k = 0; k < count; k++)
    shown_count += o->shown[k];
  if (o->log_dir) {
    char dir[PATH_MAX];
    run_flight_dir(o, attempt, dir, sizeof dir);
    if (run_make_dirs(dir) != 0)
      stopping = 1;
  }
  for (int k = 0; k < count && !stopping; k++) {
    rank_process *r = &ranks[k];
    r->local_rank = k;
    r->rank = o->node_rank * o->nproc_per_node + k;
    r->streams[0].fd = r->streams[1].fd = -1;
    r->streams[0].file_fd = r->streams[1].file_fd = -1;
    int redirect = run_std_mask("--redirects", o->redirects, k, count);
    int tee = run_std_mask("--tee", o->tee, k, count);
    int file_fd[2] = {-1, -1}, to[2] = {-1, -1}, direct[2] = {0, 0};
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    int ok = 1;
    for (int st = 0; st < 2 && ok; st++) {
      int bit = st == 0 ? STD_OUT : STD_ERR;
      int console = st == 0 ? STDOUT_FILENO : STDERR_FILENO;
      if ((redirect | tee) & bit) {
        file_fd[st] = run_open_rank_log(o, attempt, k, st);
        ok = file_fd[st] >= 0;
      }
      if (o->shown[k] && !(redirect & bit))
        to[st] = console;
      /* one rank chosen by the filter, not copied to a file: it gets the
       * terminal itself, so that it can tell it is on one */
      direct[st] = to[st] >= 0 && file_fd[st] < 0 && o->ranks_filter &&
                   shown_count == 1 && isatty(console);
      if (ok && !direct[st] && pipe2(pipes[st], O_CLOEXEC) != 0) {
        run_message("xcollrun: cannot create pipes for rank %d: %s", r->rank,
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
      run_exec_rank(o, port, attempt, r, child_out, child_err, original_mask,
                    launcher);
    for (int st = 0; st < 2; st++)
      if (pipes[st][1] >= 0)
        close(pipes[st][1]);
    if (pid < 0) {
      run_message("xcollrun: cannot start rank %d: %s", r->rank,
                  strerror(errno));
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
    run_signal_group(ranks, count, SIGTERM);
    kill_deadline = run_now_s() + o->grace_s;
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
      double left = kill_deadline - run_now_s();
      timeout_ms = left <= 0 ? 0 : (int)ceil(left * 1000.0);
    }
    int ready = poll(fds, (nfds_t)nfds, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      run_message("xcollrun: poll failed: %s", strerror(errno));
      run_signal_group(ranks, count, SIGKILL);
      killed = 1;
    }

    /* output first, so that a rank's last words come before its obituary */
    for (int k = 0; k < count; k++)
      for (int s = 0; s < 2; s++)
        if (ranks[k].streams[s].fd >= 0)
          run_read_stream(&ranks[k], &ranks[k].streams[s]);

    struct signalfd_siginfo info;
    while (read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {
      int sig = (int)info.ssi_signo;
      if (sig == SIGCHLD)
        continue; /* reaped below */
      char name[32];
      run_message("xcollrun: got %s: passing it to every rank",
                  run_signal_name(sig, name, sizeof name));
      if (!stopping)
        collect_dumps(o, attempt, ranks, count, fds);
      run_signal_group(ranks, count, sig);
      if (result != GROUP_FAILED) {
        result = GROUP_INTERRUPTED;
        *exit_code = 128 + sig;
      }
      if (!stopping) {
        stopping = 1;
        kill_deadline = run_now_s() + o->grace_s;
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
          run_read_stream(r, &r->streams[s]);
      int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      exited_ok += !failed;
      if (!failed || stopping)
        continue; /* a clean exit, or a rank we are stopping anyway */
      char name[32];
      const char *run_on = o->continue_on_failure && live > 0
                               ? "; the others run on (--on-rank-failure "
                                 "continue)"
                               : "";
      if (WIFSIGNALED(status))
        run_message(
            "xcollrun: rank %d (pid %d) was killed by signal %s (%s)%s",
            r->rank, (int)pid,
            run_signal_name(WTERMSIG(status), name, sizeof name),
            strsignal(WTERMSIG(status)), run_on);
      else
        run_message("xcollrun: rank %d (pid %d) exited with status %d%s",
                    r->rank, (int)pid, WEXITSTATUS(status), run_on);
      if (o->continue_on_failure) {
        if (WIFEXITED(status) && !first_exit_status)
          first_exit_status = WEXITSTATUS(status);
        if (!WIFEXITED(status) && !first_death_code)
          first_death_code = run_exit_code_of(status);
        continue;
      }
      result = GROUP_FAILED;
      *exit_code = run_exit_code_of(status);
      if (live > 0)
        collect_dumps(o, attempt, ranks, count, fds);
      if (live > 0)
        run_message("xcollrun: stopping the other %d rank(s) (SIGTERM, then "
                    "SIGKILL after %.3g s)",
                    live, o->grace_s);
      stopping = 1;
      kill_deadline = run_now_s() + o->grace_s;
      run_signal_group(ranks, count, SIGTERM);
    }

    if (stopping && !killed && live > 0 && run_now_s() >= kill_deadline) {
      for (int k = 0; k < count; k++)
        if (ranks[k].running)
          run_message("xcollrun: rank %d (pid %d) did not exit %.3g s after "
                      "SIGTERM: sending SIGKILL",
                      ranks[k].rank, (int)ranks[k].pid, o->grace_s);
      run_signal_group(ranks, count, SIGKILL);
      killed = 1;
    }
  }

  /* Every rank has exited. What they wrote is in the pipes; a process they
   * left behind may keep a pipe open, so read without waiting for EOF. */
  for (int k = 0; k < count; k++)
    for (int s = 0; s < 2; s++) {
      rank_stream *st = &ranks[k].streams[s];
      if (st->fd >= 0) {
        run_read_stream(&ranks[k], st);
        run_emit_lines(&ranks[k], st, 1);
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
  /* continue: the job succeeded if a rank is left and none of them failed */
  if (result == GROUP_OK && (first_exit_status || first_death_code) &&
      (first_exit_status || exited_ok == 0)) {
    result = GROUP_FAILED;
    *exit_code = first_exit_status ? first_exit_status : first_death_code;
  }
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
    run_message("xcollrun: no XCOLL_AUTH_TOKEN or XCOLL_AUTH_FILE: the ranks "
                "of this %d-node job will accept any peer; set the same "
                "secret on every node (see docs/security.md)",
                o->nnodes);
    return 0;
  }
  if (sodium_init() < 0) {
    run_message("xcollrun: libsodium failed to initialise: cannot make a job "
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
  run_parse_options(argc, argv, &o);
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
    run_message("xcollrun: signalfd failed: %s", strerror(errno));
    return 1;
  }
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher */
  /* Orphans of the ranks' keepers come here to be reaped, not to init. */
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);

  int exit_code = 1;
  if (o.store_on_launcher)
    setenv("XCOLL_STORE_EXTERNAL", "1", 1);
  for (int attempt = 0; attempt <= o.max_restarts; attempt++) {
    /* Each attempt meets in a fresh store: nothing of a failed attempt's
     * keys can mislead the next. */
    xcoll_store_server *store = NULL;
    int port = o.master_port;
    if (o.store_on_launcher && o.node_rank == 0) {
      if (xcoll_store_server_start(o.master_addr, o.master_port, &store,
                                   &port) != XCOLL_SUCCESS) {
        run_message("xcollrun: cannot serve the rendezvous store on %s:%d "
                    "(--store-host launcher): %s",
                    o.master_addr, o.master_port, xcoll_last_error());
        return 1;
      }
    } else if (port == 0) {
      port = pick_free_port(o.master_addr);
    }
    if (port < 0)
      return 1;
    enum group_result result =
        run_group(&o, port, attempt, signal_fd, &original_mask, &exit_code);
    xcoll_store_server_stop(store);
    if (result != GROUP_FAILED)
      break;
    if (attempt < o.max_restarts)
      run_message("xcollrun: restarting the local group (restart %d of %d)%s",
                  attempt + 1, o.max_restarts,
                  o.master_port ? "" : " on a new port");
  }
  close(signal_fd);
  free(o.shown);
  if (o.program != argv + (argc - o.program_count))
    free(o.program); /* python_program built it */
  return exit_code;
}
