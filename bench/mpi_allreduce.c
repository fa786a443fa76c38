/*
 * mpi_allreduce - the Open MPI peer of bench/allreduce.sh: time float32
 * MPI collectives the way xcoll-perf times xcoll's, so the columns of the
 * comparison table mean the same thing. --coll NAME (default allreduce):
 *   allreduce       MPI_Allreduce, sum, in place
 *   broadcast       MPI_Bcast from root 0 (in place by nature)
 *   reduce          MPI_Reduce, sum, to root 0, in place on the root
 *   allgather       MPI_Allgather, out of place
 *   reduce_scatter  MPI_Reduce_scatter_block, sum, out of place
 *   alltoall        MPI_Alltoall, out of place (--alltoall is the same)
 *
 * --nonblocking: each call in its MPI_I* form (MPI_Iallreduce...), waited
 * for at once with MPI_Wait (xcoll-perf -z 2).
 *
 * usage: mpirun -np N mpi_allreduce [--nonblocking] [--coll NAME]
 *        SIZE:ITERS:WARMUP [...]
 *   SIZE in bytes, nccl-tests' size: the buffer of allreduce, broadcast and
 *   reduce; the whole receive buffer of allgather and the whole send buffer
 *   of reduce_scatter and alltoall (one rank's block is SIZE / N, so SIZE
 *   must be a multiple of 4 * N for those three). ITERS timed and WARMUP
 *   untimed calls.
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

enum { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL };
static const char *const coll_names[] = {"allreduce", "broadcast", "reduce",
                                         "allgather", "reduce_scatter",
                                         "alltoall"};

/* --nonblocking: each call in its MPI_I* form, waited for at once. */
static int nonblocking;

/* The non-blocking form of call(), then MPI_Wait. */
static void icall(int coll, float *buffer, float *received, int count,
                  int block, int rank) {
  MPI_Request request;
  switch (coll) {
  case ALLREDUCE:
    MPI_Iallreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM,
                   MPI_COMM_WORLD, &request);
    break;
  case BROADCAST:
    MPI_Ibcast(buffer, count, MPI_FLOAT, 0, MPI_COMM_WORLD, &request);
    break;
  case REDUCE:
    MPI_Ireduce(rank == 0 ? MPI_IN_PLACE : buffer, buffer, count, MPI_FLOAT,
                MPI_SUM, 0, MPI_COMM_WORLD, &request);
    break;
  case ALLGATHER:
    MPI_Iallgather(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                   MPI_COMM_WORLD, &request);
    break;
  case REDUCE_SCATTER:
    MPI_Ireduce_scatter_block(buffer, received, block, MPI_FLOAT, MPI_SUM,
                              MPI_COMM_WORLD, &request);
    break;
  default:
    MPI_Ialltoall(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                  MPI_COMM_WORLD, &request);
  }
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

/* One call of coll on count elements (block = count / world_size). */
static void call(int coll, float *buffer, float *received, int count,
                 int block, int rank) {
  if (nonblocking) {
    icall(coll, buffer, received, count, block, rank);
    return;
  }
  switch (coll) {
  case ALLREDUCE:
    MPI_Allreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    break;
  case BROADCAST:
    MPI_Bcast(buffer, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    break;
  case REDUCE:
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : buffer, buffer, count, MPI_FLOAT,
               MPI_SUM, 0, MPI_COMM_WORLD);
    break;
  case ALLGATHER:
    MPI_Allgather(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                  MPI_COMM_WORLD);
    break;
  case REDUCE_SCATTER:
    MPI_Reduce_scatter_block(buffer, received, block, MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
    break;
  default:
    MPI_Alltoall(buffer, block, MPI_FLOAT, received, block, MPI_FLOAT,
                 MPI_COMM_WORLD);
  }
}

/* Sum over ranks of input_value(r, i). */
static float sum_value(int world_size, size_t i) {
  float want = 0.0f;
  for (int r = 0; r < world_size; r++)
    want += input_value(r, i);
  return want;
}

/* Elements of the checked call's result that differ from the reference. */
static long long check(int coll, const float *buffer, const float *received,
                       int count, int block, int rank, int world_size) {
  long long wrong = 0;
  switch (coll) {
  case ALLREDUCE:
    for (int i = 0; i < count; i++)
      wrong += buffer[i] != sum_value(world_size, (size_t)i);
    break;
  case BROADCAST:
    for (int i = 0; i < count; i++)
      wrong += buffer[i] != input_value(0, (size_t)i);
    break;
  case REDUCE:
    for (int i = 0; rank == 0 && i < count; i++)
      wrong += buffer[i] != sum_value(world_size, (size_t)i);
    break;
  case ALLGATHER:
    /* Block s of the result is rank s's input. */
    for (int i = 0; i < block * world_size; i++)
      wrong += received[i] != input_value(i / block, (size_t)(i % block));
    break;
  case REDUCE_SCATTER:
    for (int i = 0; i < block; i++)
      wrong += received[i] != sum_value(world_size, (size_t)rank * block + i);
    break;
  default:
    /* Block s of the result is block rank of rank s's input. */
    for (int i = 0; i < block * world_size; i++)
      wrong += received[i] !=
               input_value(i / block, (size_t)rank * block + (size_t)(i % block));
  }
  return wrong;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, world_size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  int coll = ALLREDUCE;
  if (argc > 1 && strcmp(argv[1], "--nonblocking") == 0) {
    nonblocking = 1;
    argv++;
    argc--;
  }
  if (argc > 1 && strcmp(argv[1], "--alltoall") == 0) {
    coll = ALLTOALL;
    argv++;
    argc--;
  } else if (argc > 2 && strcmp(argv[1], "--coll") == 0) {
    coll = -1;
    for (int c = 0; c <= ALLTOALL; c++)
      if (strcmp(argv[2], coll_names[c]) == 0)
        coll = c;
    if (coll < 0) {
      if (rank == 0)
        fprintf(stderr, "mpi_allreduce: --coll %s: use allreduce, broadcast, "
                "reduce, allgather, reduce_scatter or alltoall\n", argv[2]);
      MPI_Finalize();
      return 2;
    }
    argv += 2;
    argc -= 2;
  }
  int blocked = coll == ALLGATHER || coll == REDUCE_SCATTER || coll == ALLTOALL;
  int nplans = argc - 1;
  size_plan *plans = calloc((size_t)(nplans > 0 ? nplans : 1), sizeof *plans);
  size_t max_bytes = sizeof(float);
  for (int p = 0; p < nplans; p++) {
    if (parse_plan(argv[p + 1], &plans[p]) != 0 ||
        (blocked && plans[p].bytes % (sizeof(float) * (size_t)world_size))) {
      if (rank == 0)
        fprintf(stderr, "mpi_allreduce: bad SIZE:ITERS:WARMUP '%s' (SIZE a "
                "multiple of 4 bytes, of 4 * %d for %s; ITERS >= 1)\n",
                argv[p + 1], world_size, coll_names[coll]);
      MPI_Finalize();
      return 2;
    }
    if (plans[p].bytes > max_bytes)
      max_bytes = plans[p].bytes;
  }
  if (nplans == 0) {
    if (rank == 0)
      fprintf(stderr, "usage: %s [--nonblocking] [--coll NAME] "
              "SIZE:ITERS:WARMUP ...\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  float *buffer = malloc(max_bytes);
  float *received = blocked ? malloc(max_bytes) : NULL;
  if (!buffer || (blocked && !received)) {
    fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", rank,
            max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(buffer, 0, max_bytes);

  long long wrong_total = 0;
  for (int p = 0; p < nplans; p++) {
    int count = (int)(plans[p].bytes / sizeof(float));
    int block = count / world_size; /* elements per rank or peer */
    /* An allgather sends one block: the whole SIZE is what it receives. */
    int sent = coll == ALLGATHER ? block : count;
    for (long it = 0; it < plans[p].warmup; it++)
      call(coll, buffer, received, count, block, rank);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (long it = 0; it < plans[p].iters; it++)
      call(coll, buffer, received, count, block, rank);
    double mean = (MPI_Wtime() - start) / (double)plans[p].iters, slowest = 0.0;
    MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    for (int i = 0; i < sent; i++)
      buffer[i] = input_value(rank, (size_t)i);
    call(coll, buffer, received, count, block, rank);
    long long wrong =
        check(coll, buffer, received, count, block, rank, world_size);
    long long wrong_sum = 0;
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
