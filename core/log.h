/* log.h - XCOLL_DEBUG logging (NCCL_DEBUG's model).
 *
 * XCOLL_DEBUG=WARN (default) | INFO | TRACE; XCOLL_DEBUG_FILE=path writes
 * there instead of stderr ("%h" becomes the host name, "%p" the pid).
 * XCOLL_DEBUG_SUBSYS=INIT,COLL,... keeps INFO and TRACE lines of those
 * subsystems only ("^NET,P2P": all but those; default ALL), as
 * NCCL_DEBUG_SUBSYS does; WARN lines always print.
 * Lines read "host:pid:rank xcoll LEVEL message". Never stdout.
 *
 * A source file says which subsystem its lines belong to by defining
 * XCOLL_LOG_SUBSYS before it includes this header, e.g.
 *   #define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET
 * Files that do not are counted as INIT. */
#ifndef XCOLL_CORE_LOG_H
#define XCOLL_CORE_LOG_H

#include <stddef.h>

typedef enum xcoll_log_level {
  XCOLL_LOG_NONE = 0,
  XCOLL_LOG_WARN = 1,
  XCOLL_LOG_INFO = 2,
  XCOLL_LOG_TRACE = 3
} xcoll_log_level;

/* Subsystems, one bit each (XCOLL_DEBUG_SUBSYS's names in brackets). */
typedef enum xcoll_log_subsys {
  XCOLL_SUBSYS_INIT = 1 << 0,  /* [INIT] comm creation, options, backend */
  XCOLL_SUBSYS_COLL = 1 << 1,  /* [COLL] each collective and its algorithm */
  XCOLL_SUBSYS_P2P = 1 << 2,   /* [P2P] host p2p transfers (tcp, ucx) */
  XCOLL_SUBSYS_NET = 1 << 3,   /* [NET] sockets, interfaces, net plugins */
  XCOLL_SUBSYS_ALLOC = 1 << 4, /* [ALLOC] buffers, FIFOs, staging memory */
  XCOLL_SUBSYS_BOOTSTRAP = 1 << 5, /* [BOOTSTRAP] store, rendezvous, auth */
  XCOLL_SUBSYS_ENV = 1 << 6,       /* [ENV] environment variables read */
  XCOLL_SUBSYS_TUNING = 1 << 7,    /* [TUNING] algorithm and protocol choices */
  XCOLL_SUBSYS_PROXY = 1 << 8,     /* [PROXY] nccl_like's proxy and workers */
  XCOLL_SUBSYS_ALL = (1 << 9) - 1  /* [ALL] */
} xcoll_log_subsys;

#ifndef XCOLL_LOG_SUBSYS
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_INIT
#endif

/* XCOLL_DEBUG's accepted values, NULL-terminated: NONE, VERSION, WARN,
 * INFO, TRACE. core/params.c's table takes them as XCOLL_DEBUG's choices
 * (the list xcoll-info checks against); they live here, below the table,
 * so that the log reads no higher layer. */
extern const char *const xcoll_log_level_names[];

/* Parse an XCOLL_DEBUG_SUBSYS value into a mask of xcoll_log_subsys bits:
 * a comma list of names (case-insensitive); a leading '^' keeps every
 * subsystem but those. Returns 0 and sets *mask, or -1 with a sentence
 * naming the variable, the bad entry and the accepted names in why
 * (why_bytes long). */
int xcoll_log_parse_subsys(const char *value, unsigned *mask, char *why,
                           size_t why_bytes);

/* Expand XCOLL_DEBUG_FILE's pattern into out (out_bytes): "%h" the host
 * name (host), "%p" the pid (pid), "%%" a percent sign; any other character
 * is copied. Returns 0, or -1 when the result does not fit. */
int xcoll_log_expand_path(const char *pattern, const char *host, long pid,
                          char *out, size_t out_bytes);

/* Whether lines of subsys print (XCOLL_DEBUG_SUBSYS), read once. */
int xcoll_log_subsys_enabled(unsigned subsys);

/* The level from XCOLL_DEBUG, read once (thread-safe). A malformed value
 * makes xcoll_log_init() return XCOLL_ERR_ENV through comm init. */
xcoll_log_level xcoll_log_level_get(void);

/* Whether a line of level goes to the process's stderr: XCOLL_DEBUG lets it
 * print and XCOLL_DEBUG_FILE does not send it elsewhere. */
int xcoll_log_shows_on_stderr(xcoll_log_level level);

/* Parse XCOLL_DEBUG / XCOLL_DEBUG_FILE. Returns 0 (XCOLL_SUCCESS), or an
 * xcoll_status (XCOLL_ERR_ENV) with the sentence naming the variable written
 * to why (why_bytes long; may be NULL). Logging never records errors itself,
 * so that errors.c can log without a cycle. */
int xcoll_log_init(char *why, size_t why_bytes);

/* Set the rank shown in the line prefix (-1 before it is known). */
void xcoll_log_set_rank(int rank);

/* From now on, log lines of the calling thread never block it: a line that
 * the log cannot take at once (a full pipe, or another thread in the middle
 * of a write) is dropped and counted, and the next line written from such a
 * thread says how many were dropped. For background threads that serve
 * others (the rendezvous store), whose stall would stall the job. */
void xcoll_log_never_block(void);

void xcoll_log(xcoll_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define XCOLL_WARN(...) xcoll_log(XCOLL_LOG_WARN, __VA_ARGS__)
#define XCOLL_INFO(...)                                                        \
  do {                                                                         \
    if (xcoll_log_level_get() >= XCOLL_LOG_INFO &&                             \
        xcoll_log_subsys_enabled(XCOLL_LOG_SUBSYS))                            \
      xcoll_log(XCOLL_LOG_INFO, __VA_ARGS__);                                  \
  } while (0)
/* An INFO line of a given subsystem, whatever the file's. */
#define XCOLL_INFO_SUBSYS(subsys, ...)                                         \
  do {                                                                         \
    if (xcoll_log_level_get() >= XCOLL_LOG_INFO &&                             \
        xcoll_log_subsys_enabled(subsys))                                      \
      xcoll_log(XCOLL_LOG_INFO, __VA_ARGS__);                                  \
  } while (0)
#define XCOLL_TRACE(...) XCOLL_TRACE_SUBSYS(XCOLL_LOG_SUBSYS, __VA_ARGS__)
/* A TRACE line of a given subsystem (for code in headers, which would
 * otherwise take the including file's). */
#define XCOLL_TRACE_SUBSYS(subsys, ...)                                        \
  do {                                                                         \
    if (xcoll_log_level_get() >= XCOLL_LOG_TRACE &&                            \
        xcoll_log_subsys_enabled(subsys))                                      \
      xcoll_log(XCOLL_LOG_TRACE, __VA_ARGS__);                                 \
  } while (0)

#endif
