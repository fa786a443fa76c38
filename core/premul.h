/* premul.h - pre-multiplied sums (NCCL's ncclRedOpCreatePreMulSum): the
 * table of them each communicator keeps, their checks, and the step that
 * turns a collective with one into XCOLL_SUM over this rank's input
 * multiplied by the scalar. Every backend then runs it as a plain sum. */
#ifndef XCOLL_CORE_PREMUL_H
#define XCOLL_CORE_PREMUL_H

#include "algorithm.h"
#include "xcoll.h"

struct xcoll_comm;

/* One slot of a communicator's table (xcoll_comm.premul_ops). */
typedef struct xcoll_premul_op {
  int live;
  xcoll_datatype dtype;
  xcoll_scalar_residence residence;
  unsigned char scalar[8];   /* XCOLL_SCALAR_HOST: one element of dtype */
  const void *device_scalar; /* XCOLL_SCALAR_DEVICE: where it is read */
} xcoll_premul_op;

/* 1 when op is in the range premul sums take (it may not be live). */
static inline int xcoll_op_is_premul(xcoll_op op) {
  return (int)op >= XCOLL_NUM_OPS &&
         (int)op < XCOLL_NUM_OPS + XCOLL_MAX_PREMUL_OPS;
}

/* A collective's op args->op from XCOLL_NUM_OPS up, on comm: XCOLL_SUCCESS
 * when it is a live premul sum of comm made for args->dtype on a host rank.
 * Errors (message prefixed "xcoll_NAME: "): XCOLL_ERR_INVALID_ARGUMENT (not
 * a live premul sum of comm, or made for another dtype: both named),
 * XCOLL_ERR_NOT_SUPPORTED (comm is bound to a CUDA device). */
xcoll_status xcoll_premul_check(struct xcoll_comm *comm,
                                const xcoll_coll_args *args, const char *name);

/* Make a checked collective with a premul sum a sum: multiply this rank's
 * input (count elements; world_size * count for reduce_scatter) by the
 * scalar, then set args->op = XCOLL_SUM and args->premul = 1. The product
 * goes over the input itself when the input is also the whole output
 * (in-place allreduce; in-place reduce on the root), else into a new buffer
 * that args->sendbuf then points to and *scratch receives: the caller frees
 * it once the collective has completed (NULL when none was needed).
 * Errors: XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_premul_apply(struct xcoll_comm *comm, xcoll_coll_args *args,
                                void **scratch);

#endif
