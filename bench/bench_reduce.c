/* bench_reduce.c - microbenchmark of xcoll_reduce_inplace (core/dtype.c) on
 * 4 MiB of float32 and of bfloat16, sum, best of 20 runs, in GB/s of dst
 * bytes. Not part of the build; run by hand:
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -Iinclude -Icore -Ikernels \
 *       bench/bench_reduce.c core/dtype.c -o /tmp/bench_reduce
 *   /tmp/bench_reduce */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"

/* dtype.c's error path is not exercised; a stub avoids linking all of core. */
xcoll_status xcoll_error(struct xcoll_comm *comm, xcoll_status status,
                         const char *fmt, ...) {
  (void)comm;
  (void)fmt;
  return status;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run(const char *name, xcoll_datatype dtype, size_t esize,
                xcoll_op op) {
  size_t bytes = (size_t)4 << 20, count = bytes / esize;
  unsigned char *dst = malloc(bytes), *src = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) {
    dst[i] = (unsigned char)(i * 7u + 1u);
    src[i] = (unsigned char)(i * 13u + 3u);
  }
  if (esize == 2) /* keep bfloat16 values finite and normal */
    for (size_t i = 0; i < count; i++) {
      ((uint16_t *)dst)[i] = (uint16_t)(0x3f80u + (i & 0x7fu));
      ((uint16_t *)src)[i] = (uint16_t)(0x3f00u + (i & 0x3fu));
    }
  else
    for (size_t i = 0; i < count; i++) {
      ((float *)dst)[i] = (float)(i & 1023u);
      ((float *)src)[i] = 0.5f;
    }
  double best = 1e9;
  for (int rep = 0; rep < 20; rep++) {
    double t0 = now_s();
    xcoll_reduce_inplace(dst, src, count, dtype, op);
    double t = now_s() - t0;
    if (t < best)
      best = t;
  }
  printf("%-10s 4 MiB: best %.3f ms  %.2f GB/s\n", name, best * 1e3,
         (double)bytes / best * 1e-9);
  free(dst);
  free(src);
}

int main(void) {
  run("float32", XCOLL_FLOAT32, 4, XCOLL_SUM);
  run("bfloat16", XCOLL_BFLOAT16, 2, XCOLL_SUM);
  run("float16", XCOLL_FLOAT16, 2, XCOLL_SUM);
  return 0;
}
