/* cuda.h - the CUDA driver, reached through dlopen, and a communicator's
 * binding to one CUDA device (core/cuda.c).
 *
 * libcuda.so.1 is loaded when the first communicator bound to a CUDA device
 * is created, so that xcoll builds without the CUDA toolkit and a host-only
 * machine runs it; its entry points are declared here with the CUDA Driver
 * API's documented signatures (cuda.h: CUresult and CUdevice are ints,
 * CUcontext, CUstream, CUevent, CUmodule and CUfunction opaque pointers,
 * CUdeviceptr an unsigned 64-bit integer). Two users:
 * - core/staging.c: tcp and ucx stage device buffers through pinned host
 *   memory (Gloo's way);
 * - backends/nccl_like/gpu_engine.c: the CUDA ring kernels, launched on
 *   the caller's stream (NCCL's way). The entry points only it needs are
 *   optional (NULL when the driver lacks them): staging still works with a
 *   driver that has only the copy calls.
 * Every call runs with the device's primary context pushed on the calling
 * thread (xcoll_cuda_push) and popped again, so that the caller's own
 * current context is left as it was. */
#ifndef XCOLL_CORE_CUDA_H
#define XCOLL_CORE_CUDA_H

#include <pthread.h>
#include <stddef.h>

#include "xcoll.h"

typedef int xcoll_cu_result; /* CUDA_SUCCESS = 0 */
typedef unsigned long long xcoll_cu_deviceptr;

/* cuda.h's values used by xcoll. */
#define XCOLL_CU_ERROR_OUT_OF_MEMORY 2
#define XCOLL_CU_ERROR_NOT_READY 600
#define XCOLL_CU_MEMHOSTALLOC_PORTABLE 0x01
#define XCOLL_CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define XCOLL_CU_EVENT_DISABLE_TIMING 0x02
#define XCOLL_CU_MEMHOSTREGISTER_PORTABLE 0x01
#define XCOLL_CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define XCOLL_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define XCOLL_CU_DEVICE_ATTRIBUTE_VMM_SUPPORTED 102
#define XCOLL_CU_DEVICE_ATTRIBUTE_POSIX_FD_SUPPORTED 103
#define XCOLL_CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED 99
#define XCOLL_CU_DEVICE_ATTRIBUTE_MPS_ENABLED 133
#define XCOLL_CU_STREAM_NON_BLOCKING 0x1
#define XCOLL_CU_MEM_HANDLE_TYPE_POSIX_FD 0x1
#define XCOLL_CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define XCOLL_CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define XCOLL_CU_MEM_ACCESS_READWRITE 0x3
#define XCOLL_CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0
#define XCOLL_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

/* cuda.h's CUmemLocation, CUmemAllocationProp, CUmemAccessDesc and
 * CUipcMemHandle, field for field (the virtual memory management calls
 * and CUDA IPC that the p2p transport of nccl_like shares device memory
 * with). */
typedef struct xcoll_cu_mem_location {
  int type; /* XCOLL_CU_MEM_LOCATION_TYPE_DEVICE */
  int id;   /* the device ordinal */
} xcoll_cu_mem_location;
typedef struct xcoll_cu_mem_prop {
  int type;                   /* XCOLL_CU_MEM_ALLOCATION_TYPE_PINNED */
  int requested_handle_types; /* XCOLL_CU_MEM_HANDLE_TYPE_POSIX_FD */
  xcoll_cu_mem_location location;
  void *win32_metadata; /* must be NULL */
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
} xcoll_cu_mem_prop;
typedef struct xcoll_cu_mem_access {
  xcoll_cu_mem_location location;
  int flags; /* XCOLL_CU_MEM_ACCESS_READWRITE */
} xcoll_cu_mem_access;
typedef struct xcoll_cu_ipc_handle {
  char reserved[64];
} xcoll_cu_ipc_handle;

typedef struct xcoll_cu_driver {
  void *handle; /* dlopen's; NULL until loaded */
  /* Always present (staging needs them). */
  xcoll_cu_result (*init)(unsigned int flags);
  xcoll_cu_result (*device_get_count)(int *count);
  xcoll_cu_result (*device_get)(int *device, int ordinal);
  xcoll_cu_result (*primary_ctx_retain)(void **ctx, int device);
  xcoll_cu_result (*primary_ctx_release)(int device);
  xcoll_cu_result (*ctx_push)(void *ctx);
  xcoll_cu_result (*ctx_pop)(void **ctx);
  xcoll_cu_result (*mem_host_alloc)(void **p, size_t bytes,
                                    unsigned int flags);
  xcoll_cu_result (*mem_free_host)(void *p);
  xcoll_cu_result (*memcpy_dtoh_async)(void *dst, xcoll_cu_deviceptr src,
                                       size_t bytes, void *stream);
  xcoll_cu_result (*memcpy_htod_async)(xcoll_cu_deviceptr dst,
                                       const void *src, size_t bytes,
                                       void *stream);
  xcoll_cu_result (*stream_synchronize)(void *stream);
  xcoll_cu_result (*get_error_string)(xcoll_cu_result result,
                                      const char **text);
  /* Optional: the kernel engine's (nccl_like). */
  xcoll_cu_result (*module_load_data)(void **module, const void *image);
  xcoll_cu_result (*module_unload)(void *module);
  xcoll_cu_result (*module_get_function)(void **function, void *module,
                                         const char *name);
  xcoll_cu_result (*launch_kernel)(void *function, unsigned int grid_x,
                                   unsigned int grid_y, unsigned int grid_z,
                                   unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z,
                                   unsigned int shared_bytes, void *stream,
                                   void **params, void **extra);
  xcoll_cu_result (*event_create)(void **event, unsigned int flags);
  xcoll_cu_result (*event_destroy)(void *event);
  xcoll_cu_result (*event_record)(void *event, void *stream);
  xcoll_cu_result (*event_query)(void *event);
  xcoll_cu_result (*event_synchronize)(void *event);
  xcoll_cu_result (*stream_wait_event)(void *stream, void *event,
                                       unsigned int flags);
  xcoll_cu_result (*mem_host_get_device_pointer)(xcoll_cu_deviceptr *dptr,
                                                 void *p, unsigned int flags);
  xcoll_cu_result (*mem_alloc)(xcoll_cu_deviceptr *dptr, size_t bytes);
  xcoll_cu_result (*mem_free)(xcoll_cu_deviceptr dptr);
  const char *missing; /* the first optional entry point not found */
  /* Optional, and not counted in missing: nccl_like's transports between
   * ranks of one host (transport/shm.c). Each is NULL when the driver
   * lacks it; a GPU rank then keeps such connections on net. Shared host
   * memory mapped into the device (shm): */
  xcoll_cu_result (*mem_host_register)(void *p, size_t bytes,
                                       unsigned int flags);
  xcoll_cu_result (*mem_host_unregister)(void *p);
  /* Device memory shared between processes (p2p): the device's identity
   * and abilities, */
  xcoll_cu_result (*device_get_attribute)(int *value, int attribute,
                                          int device);
  xcoll_cu_result (*device_get_uuid)(unsigned char uuid[16], int device);
  /* cuMem with POSIX file-descriptor handles, */
  xcoll_cu_result (*mem_get_allocation_granularity)(
      size_t *granularity, const xcoll_cu_mem_prop *prop, int option);
  xcoll_cu_result (*mem_create)(unsigned long long *handle, size_t bytes,
                                const xcoll_cu_mem_prop *prop,
                                unsigned long long flags);
  xcoll_cu_result (*mem_release)(unsigned long long handle);
  xcoll_cu_result (*mem_address_reserve)(xcoll_cu_deviceptr *ptr,
                                         size_t bytes, size_t alignment,
                                         xcoll_cu_deviceptr addr,
                                         unsigned long long flags);
  xcoll_cu_result (*mem_address_free)(xcoll_cu_deviceptr ptr, size_t bytes);
  xcoll_cu_result (*mem_map)(xcoll_cu_deviceptr ptr, size_t bytes,
                             size_t offset, unsigned long long handle,
                             unsigned long long flags);
  xcoll_cu_result (*mem_unmap)(xcoll_cu_deviceptr ptr, size_t bytes);
  xcoll_cu_result (*mem_set_access)(xcoll_cu_deviceptr ptr, size_t bytes,
                                    const xcoll_cu_mem_access *desc,
                                    size_t count);
  xcoll_cu_result (*mem_export_to_shareable_handle)(void *shareable,
                                                    unsigned long long handle,
                                                    int type,
                                                    unsigned long long flags);
  xcoll_cu_result (*mem_import_from_shareable_handle)(
      unsigned long long *handle, void *os_handle, int type);
  /* and legacy CUDA IPC. */
  xcoll_cu_result (*ipc_get_mem_handle)(xcoll_cu_ipc_handle *handle,
                                        xcoll_cu_deviceptr dptr);
  xcoll_cu_result (*ipc_open_mem_handle)(xcoll_cu_deviceptr *dptr,
                                         xcoll_cu_ipc_handle handle,
                                         unsigned int flags);
  xcoll_cu_result (*ipc_close_mem_handle)(xcoll_cu_deviceptr dptr);
  /* A stream of the engine's own (zeroing p2p slots without the legacy
   * NULL stream's implicit synchronisation); NULL: the NULL stream. */
  xcoll_cu_result (*stream_create)(void **stream, unsigned int flags);
  xcoll_cu_result (*stream_destroy)(void *stream);
} xcoll_cu_driver;

/* The loaded driver: valid once xcoll_cuda_open has succeeded (it is never
 * unloaded while the process runs). */
extern xcoll_cu_driver xcoll_cu;

/* The driver's sentence for result ("unknown CUDA error" when it has none). */
const char *xcoll_cu_text(xcoll_cu_result result);

/* One device's driver handles, shared by a communicator and the
 * communicators split from it (reference counted). */
typedef struct xcoll_cuda {
  pthread_mutex_t lock;
  int refs;    /* under lock */
  int ordinal; /* the CUDA device ordinal */
  int device;  /* the driver's CUdevice */
  void *ctx;   /* the device's primary context */
  /* One pinned buffer kept between staged calls (core/staging.c):
   * cuMemHostAlloc is slow (it pins pages), and most programs repeat the
   * same sizes. Under lock. */
  void *spare;
  size_t spare_bytes;
} xcoll_cuda;

/* Load the driver and retain device's primary context for a communicator
 * on backend_name. Errors: XCOLL_ERR_NOT_SUPPORTED (no libcuda.so.1, or a
 * driver call failed: the message says which and why),
 * XCOLL_ERR_INVALID_ARGUMENT (device >= the number of devices),
 * XCOLL_ERR_NO_MEMORY. */
xcoll_status xcoll_cuda_open(int device, const char *backend_name,
                             xcoll_cuda **out);

/* Another reference (for a split child). */
xcoll_cuda *xcoll_cuda_ref(xcoll_cuda *cuda);

/* Drop a reference; the last one frees the spare pinned buffer and
 * releases the primary context. NULL is fine. */
void xcoll_cuda_close(xcoll_cuda *cuda);

/* Push cuda's context on the calling thread (0 on success, else the
 * driver's error); xcoll_cuda_pop pops it. */
xcoll_cu_result xcoll_cuda_push(xcoll_cuda *cuda);
void xcoll_cuda_pop(void);

#endif
