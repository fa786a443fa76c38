/* log.c - XCOLL_DEBUG logging, modelled on NCCL_DEBUG: a level and a set of
 * subsystems (XCOLL_DEBUG_SUBSYS) read once from the environment, lines
 * prefixed "host:pid:rank xcoll LEVEL", written to stderr or to
 * XCOLL_DEBUG_FILE (%h and %p expanded), never to stdout. A thread that
 * must never block on its log (xcoll_log_never_block) drops a line rather
 * than wait for a full pipe or for another thread's write. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "path_pattern.h"
#include "xcoll.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static xcoll_log_level log_level = XCOLL_LOG_WARN;
static FILE *log_file; /* NULL: stderr */
static char log_host[64] = "?";
static _Atomic int log_rank = -1;
static int log_print_version;
static unsigned log_subsys_mask = XCOLL_SUBSYS_ALL;

/* Threads that must never block on the log (xcoll_log_never_block), and
 * the lines such threads dropped since one was last written. */
static _Thread_local int log_never_block;
static atomic_ulong log_dropped;
/* The log's descriptor reopened with O_NONBLOCK when it is a pipe or a FIFO
 * (the open file description of fd 2 is shared with other processes, so
 * its flags stay as they are), for the file it was opened for (device and
 * inode). Under log_lock. */
static int nonblocking_fd = -1;
static dev_t nonblocking_dev;
static ino_t nonblocking_ino;

/* A failure found while parsing, reported by xcoll_log_init(): the once
 * routine itself must not call xcoll_error(), which logs and would re-enter
 * pthread_once. */
static xcoll_status parse_status = XCOLL_SUCCESS;
static char parse_message[512];

int xcoll_log_expand_path(const char *pattern, const char *host, long pid,
                          char *out, size_t out_bytes) {
  xcoll_path_fields fields = {
      .host = host, .pid = pid, .rank = -1, .percent = 1, .rank_suffix = 0};
  return xcoll_path_expand(pattern, &fields, out, out_bytes);
}

const char *const xcoll_log_level_names[] = {"NONE", "VERSION", "WARN",
                                             "INFO", "TRACE",   NULL};

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {
    {"INIT", XCOLL_SUBSYS_INIT},   {"COLL", XCOLL_SUBSYS_COLL},
    {"P2P", XCOLL_SUBSYS_P2P},     {"NET", XCOLL_SUBSYS_NET},
    {"ALLOC", XCOLL_SUBSYS_ALLOC}, {"BOOTSTRAP", XCOLL_SUBSYS_BOOTSTRAP},
    {"ENV", XCOLL_SUBSYS_ENV},     {"TUNING", XCOLL_SUBSYS_TUNING},
    {"PROXY", XCOLL_SUBSYS_PROXY}, {"ALL", XCOLL_SUBSYS_ALL},
};
#define SUBSYS_ACCEPTED                                                        \
  "a comma list of INIT, COLL, P2P, NET, ALLOC, BOOTSTRAP, ENV, TUNING, "      \
  "PROXY, ALL; '^' first to exclude (^NET,P2P)"

int xcoll_log_parse_subsys(const char *value, unsigned *mask, char *why,
                           size_t why_bytes) {
  const char *cursor = value;
  int exclude = 0;
  if (*cursor == '^') {
    exclude = 1;
    cursor++;
  }
  unsigned listed = 0;
  for (;;) {
    const char *end = strchr(cursor, ',');
    size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
      if (strlen(subsys_names[i].name) == length &&
          strncasecmp(subsys_names[i].name, cursor, length) == 0)
        bit = subsys_names[i].bit;
    if (bit == 0) {
      if (why != NULL && why_bytes > 0)
        snprintf(why, why_bytes,
                 "XCOLL_DEBUG_SUBSYS='%.200s': '%.*s' is not a subsystem: "
                 "expected " SUBSYS_ACCEPTED,
                 value, (int)(length < 64 ? length : 64), cursor);
      return -1;
    }
    listed |= bit;
    if (end == NULL)
      break;
    cursor = end + 1;
  }
  *mask = exclude ? (XCOLL_SUBSYS_ALL & ~listed) : listed;
  return 0;
}

static void log_setup(void) {
  if (gethostname(log_host, sizeof log_host) != 0)
    snprintf(log_host, sizeof log_host, "?");
  log_host[sizeof log_host - 1] = '\0';
  /* Keep lines short: the first label of a fully qualified name is enough. */
  char *dot = strchr(log_host, '.');
  if (dot != NULL)
    *dot = '\0';

  /* The levels of xcoll_log_level_names (XCOLL_DEBUG's choices in
   * core/params.c), in this order. */
  static const xcoll_log_level levels[] = {XCOLL_LOG_NONE, XCOLL_LOG_WARN,
                                           XCOLL_LOG_WARN, XCOLL_LOG_INFO,
                                           XCOLL_LOG_TRACE};
  const char *const *names = xcoll_log_level_names;
  const char *level = getenv("XCOLL_DEBUG");
  if (level != NULL && level[0] != '\0') {
    int found = -1;
    for (int i = 0;
         names[i] != NULL && i < (int)(sizeof levels / sizeof levels[0]); i++)
      if (strcasecmp(level, names[i]) == 0)
        found = i;
    if (found >= 0) {
      log_level = levels[found];
      log_print_version = strcasecmp(names[found], "VERSION") == 0;
    } else {
      parse_status = XCOLL_ERR_ENV;
      snprintf(parse_message, sizeof parse_message,
               "XCOLL_DEBUG='%.200s' is not a log level: use NONE, VERSION, "
               "WARN (the default), INFO or TRACE",
               level);
    }
  }

  const char *subsys = getenv("XCOLL_DEBUG_SUBSYS");
  if (subsys != NULL && subsys[0] != '\0' &&
      xcoll_log_parse_subsys(subsys, &log_subsys_mask, parse_message,
                             sizeof parse_message) != 0)
    parse_status = XCOLL_ERR_ENV;

  const char *pattern = getenv("XCOLL_DEBUG_FILE");
  if (pattern != NULL && pattern[0] != '\0') {
    char path[4096];
    if (xcoll_log_expand_path(pattern, log_host, (long)getpid(), path,
                              sizeof path) != 0) {
      parse_status = XCOLL_ERR_ENV;
      snprintf(parse_message, sizeof parse_message,
               "XCOLL_DEBUG_FILE='%.200s' is too long once %%h and %%p are "
               "expanded (limit %zu bytes)",
               pattern, sizeof path - 1);
    } else {
      log_file = fopen(path, "w");
      if (log_file == NULL) {
        parse_status = XCOLL_ERR_ENV;
        snprintf(parse_message, sizeof parse_message,
                 "XCOLL_DEBUG_FILE='%.200s': cannot open '%.200s' for "
                 "writing (%s); logging to stderr instead",
                 pattern, path, strerror(errno));
      } else {
        setvbuf(log_file, NULL, _IOLBF, 0);
      }
    }
  }
}

xcoll_log_level xcoll_log_level_get(void) {
  pthread_once(&log_once, log_setup);
  return log_level;
}

int xcoll_log_shows_on_stderr(xcoll_log_level level) {
  pthread_once(&log_once, log_setup);
  return level != XCOLL_LOG_NONE && level <= log_level && log_file == NULL;
}

int xcoll_log_subsys_enabled(unsigned subsys) {
  pthread_once(&log_once, log_setup);
  return (log_subsys_mask & subsys) != 0;
}

int xcoll_log_init(char *why, size_t why_bytes) {
  pthread_once(&log_once, log_setup);
  static atomic_flag version_printed = ATOMIC_FLAG_INIT;
  if (log_print_version && !atomic_flag_test_and_set(&version_printed))
    xcoll_log(XCOLL_LOG_WARN, "xcoll version %d.%d.%d", XCOLL_VERSION_MAJOR,
              XCOLL_VERSION_MINOR, XCOLL_VERSION_PATCH);
  if (parse_status != XCOLL_SUCCESS && why != NULL && why_bytes > 0)
    snprintf(why, why_bytes, "%s", parse_message);
  return parse_status;
}

void xcoll_log_set_rank(int rank) {
  atomic_store(&log_rank, rank);
}

void xcoll_log_never_block(void) { log_never_block = 1; }

/* Write line (len bytes, at most PIPE_BUF: one atomic write to a pipe) to
 * fd without blocking. Returns 0, or -1 when the log cannot take it now.
 * Called with log_lock held. */
static int write_nonblocking(int fd, const char *line, size_t len) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return -1;
  ssize_t n;
  if (S_ISSOCK(st.st_mode)) {
    n = send(fd, line, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  } else if (S_ISFIFO(st.st_mode)) {
    if (nonblocking_fd < 0 || nonblocking_dev != st.st_dev ||
        nonblocking_ino != st.st_ino) {
      if (nonblocking_fd >= 0)
        close(nonblocking_fd);
      char path[64];
      snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
      nonblocking_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      nonblocking_dev = st.st_dev;
      nonblocking_ino = st.st_ino;
    }
    if (nonblocking_fd >= 0) {
      n = write(nonblocking_fd, line, len);
    } else { /* no /proc: write only while the pipe has room */
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
        return -1;
      n = write(fd, line, len);
    }
  } else if (S_ISREG(st.st_mode)) {
    n = write(fd, line, len);
  } else { /* a terminal or another device */
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
      return -1;
    n = write(fd, line, len);
  }
  return n == (ssize_t)len ? 0 : -1;
}

void xcoll_log(xcoll_log_level level, const char *fmt, ...) {
  if (level == XCOLL_LOG_NONE || xcoll_log_level_get() < level)
    return;
  static const char *const names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char rank[16];
  int r = atomic_load(&log_rank);
  if (r >= 0)
    snprintf(rank, sizeof rank, "%d", r);
  else
    snprintf(rank, sizeof rank, "-");

  /* Build the whole line first so that one write carries it: lines of
   * different threads and processes sharing a file then do not interleave. */
  char line[2048];
  int prefix = snprintf(line, sizeof line, "%s:%ld:%s xcoll %s ", log_host,
                        (long)getpid(), rank, names[level]);
  if (prefix < 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + prefix, sizeof line - (size_t)prefix - 1, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  line[len] = '\n';
  line[len + 1] = '\0';

  if (log_never_block) {
    /* Another thread's write may wait for a full pipe: do not wait for it. */
    if (pthread_mutex_trylock(&log_lock) != 0) {
      atomic_fetch_add(&log_dropped, 1);
      return;
    }
    FILE *out = log_file != NULL ? log_file : stderr;
    unsigned long dropped = atomic_exchange(&log_dropped, 0);
    if (dropped > 0) { /* say so in this line, which ends at len */
      int more = snprintf(line + len, sizeof line - len,
                          " (%lu earlier log line(s) were dropped: the log "
                          "could not take them)\n",
                          dropped);
      len = more > 0 && (size_t)more < sizeof line - len ? len + (size_t)more
                                                          : strlen(line);
      if (line[len - 1] != '\n') /* cut: end it anyway */
        line[len - 1] = '\n';
    } else {
      len++;
    }
    if (write_nonblocking(fileno(out), line, len) != 0)
      atomic_fetch_add(&log_dropped, 1 + dropped);
    pthread_mutex_unlock(&log_lock);
    return;
  }

  pthread_mutex_lock(&log_lock);
  FILE *out = log_file != NULL ? log_file : stderr;
  fputs(line, out);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}
