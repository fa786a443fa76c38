/* premul.c - pre-multiplied sums: xcoll_op_create_premul_sum and
 * xcoll_op_destroy (public API, xcoll.h), their checks in a collective, and
 * the multiplication of this rank's input before the sum (premul.h). */
#include "premul.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "request.h"

static xcoll_premul_op *find_live(xcoll_comm *comm, xcoll_op op) {
  if (!xcoll_op_is_premul(op))
    return NULL;
  xcoll_premul_op *slot = &comm->premul_ops[(int)op - XCOLL_NUM_OPS];
  return slot->live ? slot : NULL;
}

xcoll_status xcoll_op_create_premul_sum(xcoll_op *op, const void *scalar,
                                        xcoll_datatype dtype,
                                        xcoll_scalar_residence residence,
                                        xcoll_comm_t comm) {
  static const char fn[] = "xcoll_op_create_premul_sum";
  xcoll_status status = xcoll_comm_check_live(comm, fn);
  if (status == XCOLL_SUCCESS)
    status = xcoll_comm_check(comm);
  if (status != XCOLL_SUCCESS)
    return status;
  if (op == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: op is NULL: pass the address of an xcoll_op", fn);
  if (scalar == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: scalar is NULL: pass the address of one element "
                       "of the dtype",
                       fn);
  if ((unsigned)dtype >= (unsigned)XCOLL_NUM_DATATYPES)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: dtype=%d is not an xcoll_datatype (0 to %d)", fn,
                       (int)dtype, XCOLL_NUM_DATATYPES - 1);
  if (residence == XCOLL_SCALAR_HOST && xcoll_device_pointer(scalar))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: scalar %p is CUDA device memory but residence is "
                       "XCOLL_SCALAR_HOST: pass XCOLL_SCALAR_DEVICE, or the "
                       "value in host memory",
                       fn, scalar);
  if (residence == XCOLL_SCALAR_DEVICE && comm->cuda == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: residence XCOLL_SCALAR_DEVICE on a communicator "
                       "bound to the host (backend '%s'): there is no device "
                       "to read the scalar from; pass it in host memory with "
                       "XCOLL_SCALAR_HOST",
                       fn, comm->backend->name);
  if (residence != XCOLL_SCALAR_HOST && residence != XCOLL_SCALAR_DEVICE)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: residence=%d is not an xcoll_scalar_residence "
                       "(XCOLL_SCALAR_HOST or XCOLL_SCALAR_DEVICE)",
                       fn, (int)residence);
  int k = 0;
  while (k < XCOLL_MAX_PREMUL_OPS && comm->premul_ops[k].live)
    k++;
  if (k == XCOLL_MAX_PREMUL_OPS)
    return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                       "%s: %d premul sum ops are already live on this "
                       "communicator (XCOLL_MAX_PREMUL_OPS): destroy the ones "
                       "no longer used with xcoll_op_destroy",
                       fn, XCOLL_MAX_PREMUL_OPS);
  xcoll_premul_op *slot = &comm->premul_ops[k];
  memset(slot, 0, sizeof *slot);
  slot->live = 1;
  slot->dtype = dtype;
  slot->residence = residence;
  if (residence == XCOLL_SCALAR_HOST)
    memcpy(slot->scalar, scalar, xcoll_datatype_size(dtype));
  else
    slot->device_scalar = scalar;
  *op = (xcoll_op)(XCOLL_NUM_OPS + k);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_op_destroy(xcoll_op op, xcoll_comm_t comm) {
  static const char fn[] = "xcoll_op_destroy";
  xcoll_status status = xcoll_comm_check_live(comm, fn);
  if (status != XCOLL_SUCCESS)
    return status;
  xcoll_premul_op *slot = find_live(comm, op);
  if (slot == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s: op=%d is %s", fn, (int)op,
                       (unsigned)op < (unsigned)XCOLL_NUM_OPS
                           ? "a built-in operator: only ops made by "
                             "xcoll_op_create_premul_sum are destroyed"
                           : "not a live premul sum of this communicator "
                             "(never created here, or destroyed already)");
  slot->live = 0;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_premul_check(xcoll_comm *comm, const xcoll_coll_args *args,
                                const char *name) {
  const xcoll_premul_op *slot = find_live(comm, args->op);
  if (slot == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: op=%d is not an xcoll_op (0 to %d) nor a "
                       "live premul sum of this communicator (made by "
                       "xcoll_op_create_premul_sum and not destroyed)",
                       name, (int)args->op, XCOLL_NUM_OPS - 1);
  if (slot->dtype != args->dtype)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_%s: op=%d is a premul sum made for dtype %s, "
                       "used with dtype %s: make one for %s",
                       name, (int)args->op, xcoll_datatype_name(slot->dtype),
                       xcoll_datatype_name(args->dtype),
                       xcoll_datatype_name(args->dtype));
  if (comm->cuda != NULL)
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "xcoll_%s: premul sum on a GPU rank: not built yet "
                       "(this communicator is bound to CUDA device %d; "
                       "premul sums run on host ranks only)",
                       name, comm->device);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_premul_apply(xcoll_comm *comm, xcoll_coll_args *args,
                                void **scratch) {
  *scratch = NULL;
  const xcoll_premul_op *slot = find_live(comm, args->op);
  args->op = XCOLL_SUM;
  args->premul = 1;
  if (args->count == 0)
    return XCOLL_SUCCESS;
  size_t elements = args->count;
  if (args->kind == XCOLL_COLL_REDUCE_SCATTER)
    elements *= (size_t)comm->world_size;
  /* The input may be the output of a collective issued before this one and
   * still running: let every earlier collective complete before it is read
   * (or written, in place). */
  xcoll_queue_drain(comm);
  xcoll_dispatch_quiesce(comm);
  int whole_output = args->sendbuf == args->recvbuf &&
                     (args->kind == XCOLL_COLL_ALLREDUCE ||
                      (args->kind == XCOLL_COLL_REDUCE &&
                       args->root == comm->rank));
  if (whole_output) {
    xcoll_scale_premul(args->recvbuf, args->sendbuf, elements, args->dtype,
                       slot->scalar);
    return XCOLL_SUCCESS;
  }
  size_t bytes = elements * xcoll_datatype_size(args->dtype);
  void *scaled = malloc(bytes);
  if (scaled == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_%s: cannot allocate %zu bytes for the premul "
                       "sum's scaled input",
                       xcoll_coll_name(args->kind), bytes);
  xcoll_scale_premul(scaled, args->sendbuf, elements, args->dtype,
                     slot->scalar);
  args->sendbuf = scaled;
  *scratch = scaled;
  return XCOLL_SUCCESS;
}
