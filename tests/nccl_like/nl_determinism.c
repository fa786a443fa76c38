/* nl_determinism.c - floats come out bit-identical on every rank and on
 * every repetition of the same collective (NCCL's property: the ring reduces
 * each chunk in one fixed order and then copies the result round the ring).
 *
 * Run under xcollrun: nl_determinism [count] [repeats]. Each rank fills a
 * float32 buffer with values that do NOT add exactly (pseudo-random, mixed
 * exponents), so that a different reduction order would show in the bits.
 * It runs the allreduce (sum) `repeats` times from the same input, hashes the
 * result bytes, checks the hash is the same every time, then allgathers the
 * hashes and checks every rank has the same. Also checks the result against
 * a double-precision sum within float rounding, so that a wrong but
 * consistent answer fails too. Prints "DETERMINISM-OK" or exits 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xcoll.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static float input(int rank, size_t i) {
  uint64_t h = mix((uint64_t)rank * 0x100000001b3ULL ^ mix(i));
  double mantissa = (double)(h & 0xffffff) / (double)0x1000000 - 0.5;
  int exponent = (int)((h >> 24) % 20) - 10;
  return (float)ldexp(mantissa, exponent);
}

static uint64_t fnv1a(const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

int main(int argc, char **argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000003;
  int repeats = argc > 2 ? atoi(argv[2]) : 3;
  setvbuf(stdout, NULL, _IOLBF, 0);
  xcoll_comm_t comm = NULL;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("FATAL: init: %s: %s\n", xcoll_strerror(st), xcoll_last_error());
    return 2;
  }
  int rank = 0, world = 1;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &world);
  float *buf = malloc(count * sizeof *buf);
  if (!buf)
    return 2;
  uint64_t first = 0;
  int bad = 0;
  for (int r = 0; r < repeats; r++) {
    for (size_t i = 0; i < count; i++)
      buf[i] = input(rank, i);
    st = xcoll_allreduce(buf, buf, count, XCOLL_FLOAT32, XCOLL_SUM, comm);
    if (st != XCOLL_SUCCESS) {
      printf("FAIL rank %d: allreduce: %s\n", rank, xcoll_comm_last_error(comm));
      return 1;
    }
    uint64_t h = fnv1a(buf, count * sizeof *buf);
    if (r == 0)
      first = h;
    else if (h != first) {
      printf("FAIL rank %d: repetition %d hashed %016llx, first %016llx\n",
             rank, r, (unsigned long long)h, (unsigned long long)first);
      bad = 1;
    }
  }
  /* Independent check of the values: each element within a few float ulps
   * of the double sum (P-1 roundings of partial sums). */
  for (size_t i = 0; i < count; i += 997) {
    double want = 0, mag = 0;
    for (int q = 0; q < world; q++) {
      want += input(q, i);
      mag += fabs(input(q, i));
    }
    if (fabs(buf[i] - want) > mag * world * 1.2e-7) {
      printf("FAIL rank %d: element %zu = %.9g, expected %.9g\n", rank, i,
             buf[i], want);
      bad = 1;
      break;
    }
  }
  int64_t mine = (int64_t)first;
  int64_t *all = calloc((size_t)world, sizeof *all);
  st = xcoll_allgather(&mine, all, 1, XCOLL_INT64, comm);
  if (st != XCOLL_SUCCESS) {
    printf("FAIL rank %d: allgather: %s\n", rank, xcoll_comm_last_error(comm));
    return 1;
  }
  for (int q = 0; q < world; q++)
    if (all[q] != mine) {
      printf("FAIL rank %d: rank %d's result hashed %016llx, mine %016llx\n",
             rank, q, (unsigned long long)all[q], (unsigned long long)mine);
      bad = 1;
    }
  printf("%s rank %d/%d backend %s: %zu floats x %d repeats, hash %016llx\n",
         bad ? "DETERMINISM-BAD" : "DETERMINISM-OK", rank, world,
         xcoll_comm_backend(comm), count, repeats, (unsigned long long)first);
  xcoll_comm_destroy(comm);
  free(all);
  free(buf);
  return bad;
}
