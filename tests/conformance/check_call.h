/* check_call.h - CHECK(call) for the conformance programs that drive one
 * communicator: a call that does not return XCOLL_SUCCESS prints this
 * rank, the place, the call, its status and the communicator's last error,
 * and exits 1. The including file defines the globals `rank` and `comm`. */
#ifndef XCOLL_TESTS_CHECK_CALL_H
#define XCOLL_TESTS_CHECK_CALL_H

#include <stdio.h>
#include <stdlib.h>

#include "xcoll.h"

#define CHECK(call)                                                            \
  do {                                                                         \
    xcoll_status s_ = (call);                                                  \
    if (s_ != XCOLL_SUCCESS) {                                                 \
      fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", rank, __FILE__,         \
              __LINE__, #call, xcoll_strerror(s_),                             \
              xcoll_comm_last_error(comm));                                    \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#endif
