/* fault_point.c - test-only kill points (see fault_point.h). */
#include "fault_point.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 32

void fault_point(const char *name) {
  static int read = 0;
  static const char *setting = NULL;
  static const char *names[MAX_NAMES];
  static int hits[MAX_NAMES];
  static int num_names = 0;
  if (!read) {
    setting = getenv("XTRAIN_FAULT_POINT");
    read = 1;
  }
  if (setting == NULL || setting[0] == '\0')
    return;
  /* Names are string literals: one slot per distinct pointer or text. */
  int i = 0;
  while (i < num_names && strcmp(names[i], name) != 0)
    i++;
  if (i == num_names) {
    if (num_names == MAX_NAMES)
      return;
    names[num_names++] = name;
  }
  int hit = ++hits[i];
  if (strcmp(setting, "list") == 0) {
    fprintf(stderr, "xtrain: fault point %s#%d\n", name, hit);
    return;
  }
  size_t n = strlen(name);
  if (strncmp(setting, name, n) == 0 && setting[n] == '#' &&
      atoi(setting + n + 1) == hit) {
    fprintf(stderr, "xtrain: killed at fault point %s#%d\n", name, hit);
    raise(SIGKILL);
  }
}
