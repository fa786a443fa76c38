/* params.h - the one table of XCOLL_* parameters: name, type, default,
 * range and meaning. The library reads its variables through the readers
 * below, which take default and range from the table, and xcoll-info prints
 * and checks the same table: the two cannot disagree on a default or a range.
 *
 * A variable that only some backends read names them (a net plugin's
 * variables name nccl_like, whose plugins read them); xcoll-info shows it
 * only when one of them is compiled in, and a communicator of another
 * backend checks its value and warns once that it does not apply
 * (core/comm_create.c). Free-text variables (paths, lists) have a checker
 * function where the library has a parser for them. */
#ifndef XCOLL_CORE_PARAMS_H
#define XCOLL_CORE_PARAMS_H

#include <stddef.h>

#include "xcoll.h"

typedef enum xcoll_param_kind {
  XCOLL_PARAM_TEXT,   /* free text (a path, a name, a list) */
  XCOLL_PARAM_CHOICE, /* one of choices, compared case-insensitively */
  XCOLL_PARAM_INT,    /* decimal integer in [min, max] */
  XCOLL_PARAM_DOUBLE, /* finite decimal number in [min, max] */
  XCOLL_PARAM_SIZE    /* bytes with an optional K/M/G suffix, in [min, max] */
} xcoll_param_kind;

typedef struct xcoll_param {
  const char *name; /* "XCOLL_TIMEOUT_S" */
  xcoll_param_kind kind;
  const char *backend; /* NULL: read by core for every backend; else the
                          backends that read it, comma-separated
                          ("nccl_like", "ucx,nccl_like") */
  /* INT, DOUBLE, SIZE: default, smallest and largest accepted value (sizes
   * in bytes; every value used is exact in a double). */
  double def, min, max;
  /* TEXT, CHOICE: what applies when unset, in words ("stderr", "WARN"). */
  const char *def_text;
  const char *const *choices; /* CHOICE: NULL-terminated accepted values */
  /* TEXT: the library's own parser for the value, or NULL when any text is
   * accepted. Returns XCOLL_SUCCESS or XCOLL_ERR_ENV with the message set. */
  xcoll_status (*check)(const char *value);
  const char *description; /* one line, for xcoll-info and docs/env.md */
  /* 1: a launcher's variable (torchrun, Open MPI, Slurm) that
   * xcoll_comm_init_env reads; its default may be -1, "unknown". */
  int launcher;
} xcoll_param;

/* Another library's name for an XCOLL_* variable: NCCL_SOCKET_IFNAME for
 * XCOLL_SOCKET_IFNAME. */
typedef struct xcoll_param_alias {
  const char *foreign; /* "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME" */
  const char *xcoll;   /* the table's entry that does the same */
} xcoll_param_alias;

/* Every alias and their number (docs/env.md lists them). */
const xcoll_param_alias *xcoll_param_aliases(size_t *count);

/* The whole table and its length. Entries keep docs/env.md's order. */
const xcoll_param *xcoll_param_table(size_t *count);

/* The entry called name, or NULL. */
const xcoll_param *xcoll_param_find(const char *name);

/* Read an INT / DOUBLE / SIZE / CHOICE parameter from the environment with
 * the table's default and range. name must be in the table with that kind
 * (a programming error otherwise: XCOLL_ERR_INTERNAL). Unset or empty gives
 * the default (CHOICE: *index = -1). Errors: XCOLL_ERR_ENV naming the
 * variable, its value and the accepted form. */
xcoll_status xcoll_param_int(const char *name, long *out);
xcoll_status xcoll_param_double(const char *name, double *out);
xcoll_status xcoll_param_choice(const char *name, int *index);
/* As above for a size; def_bytes replaces the table's default when not 0
 * (a backend's own default chunk), the range still applies. */
xcoll_status xcoll_param_size(const char *name, size_t def_bytes, size_t *out);

/* 1 when backend (a backend's name) reads p: p->backend is NULL or lists
 * it; else 0. */
int xcoll_param_read_by(const xcoll_param *p, const char *backend);

/* Check the environment's value of p the way the library will read it:
 * XCOLL_SUCCESS when unset or valid, else XCOLL_ERR_ENV with the message. */
xcoll_status xcoll_param_check(const xcoll_param *p);

/* The default of p in words into out ("300", "128K", "WARN"). */
void xcoll_param_format_default(const xcoll_param *p, char *out,
                                size_t out_bytes);

/* bytes as the shortest exact "512K", "1M", "4096". */
void xcoll_param_format_size(size_t bytes, char *out, size_t out_bytes);

#endif
