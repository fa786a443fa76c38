/* env.c - strict readers for XCOLL_* and launcher environment variables:
 * a value with trailing junk, out of range or overflowing is an
 * XCOLL_ERR_ENV that names the variable, repeats its value and says what is
 * accepted, instead of silently becoming a default. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "error.h"

const char *xcoll_env_str(const char *name) {
  const char *value = getenv(name);
  if (value == NULL || value[0] == '\0')
    return NULL;
  return value;
}

/* strtol and friends skip leading blanks and accept a sign; the readers
 * below want the value to start with a digit (or '-' where negatives may be
 * accepted), so that " 8" and "+8" are reported rather than guessed at. */
static int starts_like_number(const char *value, int allow_sign) {
  if (isdigit((unsigned char)value[0]))
    return 1;
  if (allow_sign && value[0] == '-' && isdigit((unsigned char)value[1]))
    return 1;
  return 0;
}

xcoll_status xcoll_env_int(const char *name, long def, long min, long max,
                           long *out) {
  const char *value = xcoll_env_str(name);
  if (value == NULL) {
    *out = def;
    return XCOLL_SUCCESS;
  }
  char *end = NULL;
  errno = 0;
  long parsed = starts_like_number(value, 1) ? strtol(value, &end, 10) : 0;
  if (end == NULL || end == value || *end != '\0')
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s='%.100s' is not an integer: expected a decimal "
                       "integer in [%ld, %ld]",
                       name, value, min, max);
  if (errno == ERANGE || parsed < min || parsed > max)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s='%.100s' is out of range: expected an integer in "
                       "[%ld, %ld]",
                       name, value, min, max);
  *out = parsed;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_env_double(const char *name, double def, double min,
                              double max, double *out) {
  const char *value = xcoll_env_str(name);
  if (value == NULL) {
    *out = def;
    return XCOLL_SUCCESS;
  }
  char *end = NULL;
  errno = 0;
  double parsed = 0.0;
  if (starts_like_number(value, 1) || value[0] == '.')
    parsed = strtod(value, &end);
  if (end == NULL || end == value || *end != '\0' || !isfinite(parsed))
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s='%.100s' is not a finite number: expected a "
                       "decimal number in [%g, %g]",
                       name, value, min, max);
  if (errno == ERANGE || parsed < min || parsed > max)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s='%.100s' is out of range: expected a number in "
                       "[%g, %g]",
                       name, value, min, max);
  *out = parsed;
  return XCOLL_SUCCESS;
}

int xcoll_parse_size(const char *text, size_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long parsed =
      starts_like_number(text, 0) ? strtoull(text, &end, 10) : 0;
  if (end == NULL || end == text)
    return XCOLL_SIZE_MALFORMED;
  if (errno == ERANGE)
    return XCOLL_SIZE_TOO_LARGE;

  unsigned shift = 0;
  switch (*end) {
  case '\0':
    break;
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  default:
    return XCOLL_SIZE_MALFORMED;
  }
  /* "64K", "64KB" and "64KiB" all mean 65536 bytes: people write all three. */
  if (shift != 0 && (strcmp(end, "B") == 0 || strcmp(end, "iB") == 0))
    end += strlen(end);
  if (*end != '\0')
    return XCOLL_SIZE_MALFORMED;
  if (parsed > (unsigned long long)(SIZE_MAX >> shift))
    return XCOLL_SIZE_TOO_LARGE;
  *out = (size_t)(parsed << shift);
  return 0;
}

xcoll_status xcoll_env_size(const char *name, size_t def, size_t *out) {
  const char *value = xcoll_env_str(name);
  if (value == NULL) {
    *out = def;
    return XCOLL_SUCCESS;
  }
  int parsed = xcoll_parse_size(value, out);
  if (parsed == XCOLL_SIZE_MALFORMED)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s='%.100s' is not a size: expected a number of bytes "
                       "with an optional K, M or G suffix (powers of 1024), "
                       "e.g. 524288 or 512K",
                       name, value);
  if (parsed == XCOLL_SIZE_TOO_LARGE)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s='%.100s' is too large: sizes must fit in %zu bytes",
                       name, value, (size_t)SIZE_MAX);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_env_choice(const char *name, const char *const *choices,
                              int *index) {
  const char *value = xcoll_env_str(name);
  *index = -1;
  if (value == NULL)
    return XCOLL_SUCCESS;
  for (int i = 0; choices[i] != NULL; i++) {
    if (strcasecmp(value, choices[i]) == 0) {
      *index = i;
      return XCOLL_SUCCESS;
    }
  }
  char accepted[512];
  size_t used = 0;
  accepted[0] = '\0';
  for (int i = 0; choices[i] != NULL && used < sizeof accepted; i++) {
    int n = snprintf(accepted + used, sizeof accepted - used, "%s%s",
                     i == 0 ? "" : ", ", choices[i]);
    if (n < 0)
      break;
    used += (size_t)n;
  }
  return xcoll_error(NULL, XCOLL_ERR_ENV,
                     "%s='%.100s' is not one of the accepted values: %s", name,
                     value, accepted);
}
