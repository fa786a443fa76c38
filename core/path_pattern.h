/* path_pattern.h - file-name patterns that name one file per process or
 * rank, expanded in one place for XCOLL_DEBUG_FILE (log.c: %h, %p, %%),
 * XCOLL_TRACE (trace.c: %r, %p, else .rank<N>) and the public
 * xcoll_rank_path (in trace.c; xtrain's --trace, the XCOLL_TRACE rule). */
#ifndef XCOLL_CORE_PATH_PATTERN_H
#define XCOLL_CORE_PATH_PATTERN_H

#include <stddef.h>

/* What a pattern's fields become. A field that is off is copied as written
 * ("%h" stays "%h"). */
typedef struct xcoll_path_fields {
  const char *host; /* "%h"; NULL: off */
  long pid;         /* "%p" when >= 0; -1: off */
  int rank;         /* "%r" when >= 0; -1: off */
  int percent;      /* nonzero: "%%" becomes "%" */
  /* Nonzero (and rank >= 0): when no "%r" or "%p" was replaced, ".rank<N>"
   * goes before the extension of the last path component (trace.json ->
   * trace.rank0.json), or at the end when it has none, so that ranks given
   * the same pattern still write separate files. */
  int rank_suffix;
} xcoll_path_fields;

/* Expand pattern into out (out_bytes, NUL-terminated). Any character that is
 * not part of a field that is on is copied. Returns 0, or -1 when the result
 * does not fit (out then holds no usable path). */
int xcoll_path_expand(const char *pattern, const xcoll_path_fields *fields,
                      char *out, size_t out_bytes);

/* XCOLL_TRACE's rule: "%r" the rank, "%p" this process's id, else
 * ".rank<N>" (rank_suffix); "%h" and "%%" are copied. The same returns. */
int xcoll_path_expand_rank(const char *pattern, int rank, char *out,
                           size_t out_bytes);

#endif
