/* error.h - recording error messages: per communicator and per thread.
 *
 * Every failing path in the library calls xcoll_error() with a sentence that
 * names what was wrong (argument, variable, peer rank, address) and returns
 * the status it gives back. */
#ifndef XCOLL_CORE_ERROR_H
#define XCOLL_CORE_ERROR_H

#include "xcoll.h"

struct xcoll_comm;

/* Record a message for status: in the calling thread's buffer (read by
 * xcoll_last_error) and, if comm is non-NULL, in comm's (read by
 * xcoll_comm_last_error). Also logs it at WARN level. Returns status, so that
 * callers can write `return xcoll_error(comm, XCOLL_ERR_..., "...", ...);`. */
xcoll_status xcoll_error(struct xcoll_comm *comm, xcoll_status status,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copy the calling thread's last message into comm (after a call into a
 * package that has no comm, such as the store). Returns status. */
/* As xcoll_error without the WARN line: for a failure already logged once
 * (a broken communicator's later calls). */
xcoll_status xcoll_error_quiet(struct xcoll_comm *comm, xcoll_status status,
                               const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
xcoll_status xcoll_error_adopt(struct xcoll_comm *comm, xcoll_status status);

/* 1: xcoll_error on the calling thread records its message but logs no
 * WARN line, until a call with 0; returns the previous setting. For a
 * thread whose failures are expected or reported by its caller in its own
 * words (nccl_like's failure watcher, whose store connection breaks when
 * rank 0 ends the job first). */
int xcoll_error_hush(int hushed);

#endif
