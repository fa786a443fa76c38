/* path_pattern.c - expansion of per-process and per-rank file-name patterns
 * (path_pattern.h). It sits below the log (log.c expands XCOLL_DEBUG_FILE
 * with it), so it reports no error itself: the public xcoll_rank_path,
 * which does, is in trace.c. */
#include "path_pattern.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>


/* Insert ".rank<N>" before the extension of the last component of out
 * (used bytes long), or append it. Returns 0, or -1 when it does not fit. */
static int insert_rank_suffix(char *out, size_t used, size_t out_bytes,
                              int rank) {
  const char *slash = strrchr(out, '/');
  char *dot = strrchr(out, '.');
  char extension[256] = "";
  size_t base = used;
  if (dot && (!slash || dot > slash + 1)) {
    if (strlen(dot) >= sizeof extension)
      return -1;
    strcpy(extension, dot);
    base = (size_t)(dot - out);
  }
  int n = snprintf(out + base, out_bytes - base, ".rank%d%s", rank, extension);
  return (n < 0 || (size_t)n >= out_bytes - base) ? -1 : 0;
}

int xcoll_path_expand(const char *pattern, const xcoll_path_fields *fields,
                      char *out, size_t out_bytes) {
  size_t used = 0;
  int per_rank = 0; /* a %r or %p was replaced */
  if (out_bytes == 0)
    return -1;
  for (const char *c = pattern; *c != '\0'; c++) {
    char piece[32];
    const char *text = piece;
    if (c[0] == '%' && c[1] == 'h' && fields->host != NULL) {
      text = fields->host;
      c++;
    } else if (c[0] == '%' && c[1] == 'p' && fields->pid >= 0) {
      snprintf(piece, sizeof piece, "%ld", fields->pid);
      c++;
      per_rank = 1;
    } else if (c[0] == '%' && c[1] == 'r' && fields->rank >= 0) {
      snprintf(piece, sizeof piece, "%d", fields->rank);
      c++;
      per_rank = 1;
    } else if (c[0] == '%' && c[1] == '%' && fields->percent) {
      snprintf(piece, sizeof piece, "%%");
      c++;
    } else {
      piece[0] = *c;
      piece[1] = '\0';
    }
    size_t len = strlen(text);
    if (used + len >= out_bytes)
      return -1;
    memcpy(out + used, text, len);
    used += len;
  }
  out[used] = '\0';
  if (!fields->rank_suffix || fields->rank < 0 || per_rank)
    return 0;
  return insert_rank_suffix(out, used, out_bytes, fields->rank);
}

int xcoll_path_expand_rank(const char *pattern, int rank, char *out,
                           size_t out_bytes) {
  xcoll_path_fields fields = {.host = NULL,
                              .pid = (long)getpid(),
                              .rank = rank,
                              .percent = 0,
                              .rank_suffix = 1};
  return xcoll_path_expand(pattern, &fields, out, out_bytes);
}
