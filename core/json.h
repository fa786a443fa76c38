/* json.h - a string written as the inside of a JSON string ('"' and '\'
 * escaped, control characters as \u00XX, other bytes as they are), the one
 * escape core's trace (trace.c), the flight recorder's dumps (flight.c) and
 * xtrain's timeline (trainer/timeline.c) write. Header-only pure functions
 * (no state, no symbol of the library), so the trainer includes it and still
 * links only the public API, as with kernels/fp16.h. */
#ifndef XCOLL_CORE_JSON_H
#define XCOLL_CORE_JSON_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Escapes the start of s (NUL-terminated) into out, cap bytes (at least 7:
 * one escape and the NUL), as many whole characters as fit, and
 * NUL-terminates it. Returns the bytes of s taken: a caller writes out and
 * goes on at s + that until s[that] is the NUL. */
static inline size_t xcoll_json_escape(const char *s, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  size_t taken = 0, used = 0;
  for (; s[taken] != '\0'; taken++) {
    unsigned char c = (unsigned char)s[taken];
    char escaped[6] = {(char)c};
    size_t n = 1;
    if (c == '"' || c == '\\') {
      escaped[0] = '\\';
      escaped[1] = (char)c;
      n = 2;
    } else if (c < 0x20) {
      memcpy(escaped, "\\u00", 4);
      escaped[4] = hex[c >> 4];
      escaped[5] = hex[c & 15];
      n = 6;
    }
    if (used + n >= cap)
      break;
    memcpy(out + used, escaped, n);
    used += n;
  }
  out[used] = '\0';
  return taken;
}

/* Writes s (NUL-terminated) to f as the inside of a JSON string. */
static inline void xcoll_json_put_string(FILE *f, const char *s) {
  char chunk[128];
  while (*s != '\0') {
    s += xcoll_json_escape(s, chunk, sizeof chunk);
    fputs(chunk, f);
  }
}

#endif
