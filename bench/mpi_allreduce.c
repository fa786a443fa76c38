/*
 * mpi_allreduce - the Open MPI peer of bench/allreduce.sh: time in-place
 * float32 sum MPI_Allreduce the way xcoll-perf times xcoll_allreduce, so the
 * two columns of the comparison table mean the same thing; with --alltoall,
 * out-of-place float32 MPI_Alltoall the way xcoll-perf times xcoll_alltoall.
 *
 * usage: mpirun -np N mpi_allreduce [--alltoall] SIZE:ITERS:WARMUP [...]
 *   SIZE in bytes (a multiple of 4; for alltoall of 4 * N: the whole buffer
 *   of one rank, nccl-tests' size), ITERS timed and WARMUP untimed calls.
 * For each size: WARMUP calls, a barrier, ITERS calls timed with MPI_Wtime;
 * the time of the size is the mean per call on the slowest rank (max over
 * ranks). Then one more call on known inputs is checked element by element.
 * Rank 0 prints one JSON object per size:
 *   {"peer":"ompi","world_size":N,"size":B,"iters":I,"time_us":T,"wrong":W}
 * Exit status 0, 1 on a wrong result, 2 on a bad argument.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct size_plan {
  size_t bytes;
  long iters;
  long warmup;
} size_plan;

static int parse_plan(const char *text, size_plan *plan) {
  unsigned long long bytes;
  long iters, warmup;
  char tail;
  if (sscanf(text, "%llu:%ld:%ld%c", &bytes, &iters, &warmup, &tail) != 3)
    return -1;
  if (bytes % sizeof(float) != 0 || iters < 1 || warmup < 0 ||
      bytes / sizeof(float) > (unsigned long long)0x7fffffff)
    return -1;
  plan->bytes = (size_t)bytes;
  plan->iters = iters;
  plan->warmup = warmup;
  return 0;
}

/* Inputs are small integers so that the float sum is exact: the reference
 * below is then an equality test. */
static float input_value(int rank, size_t i) {
  return (float)((i + 3u * (size_t)rank) % 5u);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, world_size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  int alltoall = argc > 1 && strcmp(argv[1], "--alltoall") == 0;
  if (alltoall) {
    argv++;
    argc--;
  }
  int nplans = argc - 1;
  size_plan *plans = calloc((size_t)(nplans > 0 ? nplans : 1), sizeof *plans);
  size_t max_bytes = sizeof(float);
  for (int p = 0; p < nplans; p++) {
    if (parse_plan(argv[p + 1], &plans[p]) != 0) {
      if (rank == 0)
        fprintf(stderr, "mpi_allreduce: bad SIZE:ITERS:WARMUP '%s' (SIZE a "
                "multiple of 4 bytes, ITERS >= 1)\n", argv[p + 1]);
      MPI_Finalize();
      return 2;
    }
    if (plans[p].bytes > max_bytes)
      max_bytes = plans[p].bytes;
  }
  if (nplans == 0) {
    if (rank == 0)
      fprintf(stderr, "usage: %s SIZE:ITERS:WARMUP ...\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  float *buffer = malloc(max_bytes);
  float *received = alltoall ? malloc(max_bytes) : NULL;
  if (!buffer || (alltoall && !received)) {
    fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", rank,
            max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(buffer, 0, max_bytes);

  long long wrong_total = 0;
  for (int p = 0; p < nplans; p++) {
    int count = (int)(plans[p].bytes / sizeof(float));
    int block = count / world_size; /* alltoall: elements per peer */
    for (long it = 0; it < plans[p].warmup; it++)
      if (alltoall)
        MPI_Alltoall(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                     MPI_COMM_WORLD);
      else
        MPI_Allreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (long it = 0; it < plans[p].iters; it++)
      if (alltoall)
        MPI_Alltoall(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                     MPI_COMM_WORLD);
      else
        MPI_Allreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mean = (MPI_Wtime() - start) / (double)plans[p].iters, slowest = 0.0;
    MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    for (int i = 0; i < count; i++)
      buffer[i] = input_value(rank, (size_t)i);
    long long wrong = 0, wrong_sum = 0;
    if (alltoall) {
      /* Block s of the result is block rank of rank s's input. */
      MPI_Alltoall(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                   MPI_COMM_WORLD);
      for (int i = 0; i < block * world_size; i++)
        wrong += received[i] !=
                 input_value(i / block, (size_t)rank * block + (size_t)(i % block));
    } else {
      MPI_Allreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int i = 0; i < count; i++) {
        float want = 0.0f;
        for (int r = 0; r < world_size; r++)
          want += input_value(r, (size_t)i);
        wrong += buffer[i] != want;
      }
    }
    MPI_Reduce(&wrong, &wrong_sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("{\"peer\":\"ompi\",\"world_size\":%d,\"size\":%zu,\"iters\":%ld,"
             "\"time_us\":%.6g,\"wrong\":%lld}\n",
             world_size, plans[p].bytes, plans[p].iters, slowest * 1e6, wrong_sum);
      fflush(stdout);
    }
    wrong_total += wrong_sum;
  }
  free(buffer);
  free(received);
  free(plans);
  MPI_Finalize();
  return wrong_total ? 1 : 0;
}
