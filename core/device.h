/* device.h - where a rank's buffers live: the host, or a CUDA device.
 *
 * A communicator is bound to a device as in NCCL (one communicator per
 * device): xcoll_config.device, or XCOLL_DEVICE for xcoll_comm_init_env.
 * A CUDA device is accepted on the host-driven backends (tcp, ucx), which
 * stage device buffers through pinned host memory (core/staging.h), and on
 * a backend with a device engine (xcoll_backend.device_engine: nccl_like,
 * whose ring kernels run on the caller's stream). Every build
 * tells CUDA device memory from host memory, so that a device buffer handed
 * to a host rank is a clear error instead of a crash in memcpy. */
#ifndef XCOLL_CORE_DEVICE_H
#define XCOLL_CORE_DEVICE_H

#include "backend.h"
#include "xcoll.h"

/* Checks config.device (XCOLL_DEVICE_HOST, or a CUDA ordinal >= 0).
 * Errors: XCOLL_ERR_INVALID_ARGUMENT (below XCOLL_DEVICE_HOST). */
xcoll_status xcoll_device_check(int device, const char *source);

/* Bind a new communicator on backend to device (source names where the
 * value came from, for messages): nothing for a host rank; for a CUDA
 * ordinal, *cuda receives the device's driver state (core/cuda.h): the
 * backend's device engine runs on it, or core stages device buffers through
 * it for a host-driven backend (core/staging.h). Errors:
 * XCOLL_ERR_NOT_SUPPORTED (a device-driven backend without a device
 * engine, or no usable CUDA driver), XCOLL_ERR_INVALID_ARGUMENT (no such
 * device), XCOLL_ERR_NO_MEMORY. */
struct xcoll_cuda;
xcoll_status xcoll_device_open(int device, const xcoll_backend *backend,
                               const char *source, struct xcoll_cuda **cuda);

/* Reads XCOLL_DEVICE: unset, "" or "host" -> XCOLL_DEVICE_HOST; "cuda" ->
 * local_rank (0 when unknown), as torchrun programs place one rank per GPU;
 * "cuda:N" or "N" -> N. Errors: XCOLL_ERR_ENV for anything else, naming the
 * value and the accepted forms. */
xcoll_status xcoll_device_from_env(int local_rank, int *device);

/* 1 when ptr is CUDA device memory that the host cannot read (not managed
 * memory), else 0. Without the CUDA driver (libcuda.so) loaded in this
 * process no device memory can exist, so the answer is 0; whether it is
 * loaded is found by a walk over the loaded objects (dl_iterate_phdr,
 * about 0.1 us) made at most once per tick of CLOCK_MONOTONIC_COARSE (a
 * driver loaded since has made no device memory yet: cuInit alone takes
 * longer). With it loaded, its cuPointerGetAttributes decides (CUDA Driver
 * API, "Unified Addressing": CU_POINTER_ATTRIBUTE_MEMORY_TYPE and
 * _IS_MANAGED), which answers host memory it does not know without an
 * error. */
int xcoll_device_pointer(const void *ptr);
/* Forgets that libcuda was found absent: the next question walks the
 * loaded objects at once. For a program (or test) that loads a driver
 * whose memory exists at once, as the stand-in driver's does. */
void xcoll_device_recheck(void);
/* The first of a and b (either may be NULL) that xcoll_device_pointer
 * calls device memory, else NULL; one walk over the loaded objects for
 * both, as a call's send and receive buffers are asked about together. */
const void *xcoll_device_pointer_of(const void *a, const void *b);

/* 1 when the CUDA driver knows ptr (device, managed or pinned host memory:
 * cuPointerGetAttributes gives it a memory type), so that a kernel may
 * reach it; 0 for plain host memory, or when no driver is loaded. */
int xcoll_device_known(const void *ptr);

#endif
