/* fault_point.c - test-only kill points and steps (see fault_point.h). */
#include "fault_point.h"

#include <inttypes.h>
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

void fault_step(int rank, int64_t step) {
  static int read = 0, kill_rank = -1;
  static int64_t kill_step = -1;
  if (!read) {
    const char *setting = getenv("XTRAIN_FAULT_STEP");
    /* A job that xcollrun --max-restarts started again must not die at
     * the same step again. */
    const char *restart = getenv("TORCHELASTIC_RESTART_COUNT");
    if (restart && atoi(restart) > 0)
      setting = NULL;
    if (setting && setting[0] != '\0' &&
        sscanf(setting, "%d:%" SCNd64, &kill_rank, &kill_step) != 2) {
      fprintf(stderr, "xtrain: XTRAIN_FAULT_STEP='%s' is not RANK:STEP\n",
              setting);
      kill_rank = -1;
    }
    read = 1;
  }
  if (rank == kill_rank && step == kill_step) {
    fprintf(stderr, "xtrain: killed at the start of step %" PRId64
            " (XTRAIN_FAULT_STEP)\n", step);
    raise(SIGKILL);
  }
}
