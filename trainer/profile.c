/*
 * profile.c - xtrain --profile's laps (see profile.h).
 */
#include "profile.h"

#include <string.h>
#include <time.h>

static double seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void profile_start(profile *p) {
  p->lap_wall = seconds(CLOCK_MONOTONIC);
  p->lap_cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
}

void profile_lap(profile *p, profile_part part) {
  double wall = seconds(CLOCK_MONOTONIC);
  double cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
  p->wall[part] += wall - p->lap_wall;
  p->cpu[part] += cpu - p->lap_cpu;
  p->lap_wall = wall;
  p->lap_cpu = cpu;
}

void profile_reset(profile *p) {
  memset(p->wall, 0, sizeof p->wall);
  memset(p->cpu, 0, sizeof p->cpu);
}

const char *profile_part_name(profile_part part) {
  static const char *names[PROFILE_PARTS] = {
      "matmul",    "attention", "elementwise", "loss",  "model",
      "hooks",     "comm wait", "optimizer",   "other"};
  return names[part];
}

void profile_print(const profile *p, int64_t updates, FILE *out) {
  double wall = 0.0, cpu = 0.0;
  for (int i = 0; i < PROFILE_PARTS; i++) {
    wall += p->wall[i];
    cpu += p->cpu[i];
  }
  if (updates <= 0 || wall <= 0.0)
    return;
  double per = 1e3 / (double)updates;
  fprintf(out, "profile: %lld updates; per update: wall ms, thread cpu ms, "
          "share of cpu\n",
          (long long)updates);
  for (int i = 0; i < PROFILE_PARTS; i++) {
    if (p->wall[i] == 0.0 && p->cpu[i] == 0.0)
      continue;
    fprintf(out, "  %-12s %8.2f %8.2f %6.1f%%\n",
            profile_part_name((profile_part)i), per * p->wall[i],
            per * p->cpu[i], cpu > 0.0 ? 100.0 * p->cpu[i] / cpu : 0.0);
  }
  fprintf(out, "  %-12s %8.2f %8.2f\n", "total", per * wall, per * cpu);
}
