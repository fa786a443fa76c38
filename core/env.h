/* env.h - reading XCOLL_* and launcher environment variables.
 *
 * Every reader distinguishes "unset" (the default is used) from "set but
 * malformed" (XCOLL_ERR_ENV with a message naming the variable, its value and
 * what is accepted). An empty value counts as unset. */
#ifndef XCOLL_CORE_ENV_H
#define XCOLL_CORE_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

/* Integer in [min, max]; *out = def when unset. */
xcoll_status xcoll_env_int(const char *name, long def, long min, long max,
                           long *out);
/* Finite double in [min, max]; *out = def when unset. */
xcoll_status xcoll_env_double(const char *name, double def, double min,
                              double max, double *out);
/* Byte size with an optional K/M/G suffix (powers of 1024); *out = def when
 * unset. Parsed by xcoll_parse_size. */
xcoll_status xcoll_env_size(const char *name, size_t def, size_t *out);

/* The one parser of byte sizes, for XCOLL_* variables and the tools'
 * options (tools reach it through the xcoll_internal target): decimal
 * digits, then optionally K, M or G in either case (powers of 1024), which
 * may be followed by "B" or "iB" ("64K", "64KB" and "64KiB" are 65536).
 * Nothing else: no sign, blank, fraction or other trailing text. Returns 0
 * and sets *out, or XCOLL_SIZE_MALFORMED or XCOLL_SIZE_TOO_LARGE (more than
 * SIZE_MAX bytes) with *out unchanged. */
#define XCOLL_SIZE_MALFORMED (-1)
#define XCOLL_SIZE_TOO_LARGE (-2)
int xcoll_parse_size(const char *text, size_t *out);
/* One of choices (NULL-terminated, compared case-insensitively); *index = -1
 * when unset. */
xcoll_status xcoll_env_choice(const char *name, const char *const *choices,
                              int *index);
/* The raw value, or NULL when unset or empty. */
const char *xcoll_env_str(const char *name);

#endif
