/* cuda.c - the CUDA driver through dlopen, and device bindings (cuda.h). */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_INIT /* log.h */
#include "cuda.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"

xcoll_cu_driver xcoll_cu;
static char load_why[256]; /* why loading failed, when handle is NULL */
/* Loading is retried at each communicator creation until it succeeds: a
 * program may load the driver after a first attempt failed. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* The driver exports some entry points under a versioned name (cuda.h maps
 * cuCtxPushCurrent to cuCtxPushCurrent_v2, cuMemAlloc to cuMemAlloc_v2 and
 * so on): take the _v2 symbol when there is one. */
static void *driver_symbol(void *handle, const char *name) {
  char versioned[64];
  snprintf(versioned, sizeof versioned, "%s_v2", name);
  void *fn = dlsym(handle, versioned);
  return fn != NULL ? fn : dlsym(handle, name);
}

#define LOAD(field, name)                                                      \
  do {                                                                         \
    void *symbol_ = driver_symbol(d.handle, name);                             \
    memcpy(&d.field, &symbol_, sizeof symbol_);                                \
    if (symbol_ == NULL) {                                                     \
      snprintf(load_why, sizeof load_why, "libcuda.so.1 has no %s", name);     \
      goto missing;                                                            \
    }                                                                          \
  } while (0)

#define LOAD_OPTIONAL(field, name)                                             \
  do {                                                                         \
    void *symbol_ = driver_symbol(d.handle, name);                             \
    memcpy(&d.field, &symbol_, sizeof symbol_);                                \
    if (symbol_ == NULL && d.missing == NULL)                                  \
      d.missing = name;                                                        \
  } while (0)

/* Optional without a fallback the engine needs: NULL leaves the feature
 * off (cuda.h says which) and does not count as missing. */
#define LOAD_IF_PRESENT(field, name)                                           \
  do {                                                                         \
    void *symbol_ = driver_symbol(d.handle, name);                             \
    memcpy(&d.field, &symbol_, sizeof symbol_);                                \
  } while (0)

/* Under load_lock. Fills a local table and publishes it whole. */
static void driver_load(void) {
  if (xcoll_cu.handle != NULL)
    return;
  xcoll_cu_driver d;
  memset(&d, 0, sizeof d);
  d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d.handle == NULL) {
    snprintf(load_why, sizeof load_why,
             "the CUDA driver (libcuda.so.1) could not be loaded: %s",
             dlerror());
    return;
  }
  LOAD(init, "cuInit");
  LOAD(device_get_count, "cuDeviceGetCount");
  LOAD(device_get, "cuDeviceGet");
  LOAD(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  LOAD(primary_ctx_release, "cuDevicePrimaryCtxRelease");
  LOAD(ctx_push, "cuCtxPushCurrent");
  LOAD(ctx_pop, "cuCtxPopCurrent");
  LOAD(mem_host_alloc, "cuMemHostAlloc");
  LOAD(mem_free_host, "cuMemFreeHost");
  LOAD(memcpy_dtoh_async, "cuMemcpyDtoHAsync");
  LOAD(memcpy_htod_async, "cuMemcpyHtoDAsync");
  LOAD(stream_synchronize, "cuStreamSynchronize");
  LOAD(get_error_string, "cuGetErrorString");
  LOAD_OPTIONAL(module_load_data, "cuModuleLoadData");
  LOAD_OPTIONAL(module_unload, "cuModuleUnload");
  LOAD_OPTIONAL(module_get_function, "cuModuleGetFunction");
  LOAD_OPTIONAL(launch_kernel, "cuLaunchKernel");
  LOAD_OPTIONAL(event_create, "cuEventCreate");
  LOAD_OPTIONAL(event_destroy, "cuEventDestroy");
  LOAD_OPTIONAL(event_record, "cuEventRecord");
  LOAD_OPTIONAL(event_query, "cuEventQuery");
  LOAD_OPTIONAL(event_synchronize, "cuEventSynchronize");
  LOAD_OPTIONAL(stream_wait_event, "cuStreamWaitEvent");
  LOAD_OPTIONAL(mem_host_get_device_pointer, "cuMemHostGetDevicePointer");
  LOAD_OPTIONAL(mem_alloc, "cuMemAlloc");
  LOAD_OPTIONAL(mem_free, "cuMemFree");
  LOAD_IF_PRESENT(mem_host_register, "cuMemHostRegister");
  LOAD_IF_PRESENT(mem_host_unregister, "cuMemHostUnregister");
  LOAD_IF_PRESENT(device_get_attribute, "cuDeviceGetAttribute");
  LOAD_IF_PRESENT(device_get_uuid, "cuDeviceGetUuid");
  LOAD_IF_PRESENT(mem_get_allocation_granularity,
                  "cuMemGetAllocationGranularity");
  LOAD_IF_PRESENT(mem_create, "cuMemCreate");
  LOAD_IF_PRESENT(mem_release, "cuMemRelease");
  LOAD_IF_PRESENT(mem_address_reserve, "cuMemAddressReserve");
  LOAD_IF_PRESENT(mem_address_free, "cuMemAddressFree");
  LOAD_IF_PRESENT(mem_map, "cuMemMap");
  LOAD_IF_PRESENT(mem_unmap, "cuMemUnmap");
  LOAD_IF_PRESENT(mem_set_access, "cuMemSetAccess");
  LOAD_IF_PRESENT(mem_export_to_shareable_handle,
                  "cuMemExportToShareableHandle");
  LOAD_IF_PRESENT(mem_import_from_shareable_handle,
                  "cuMemImportFromShareableHandle");
  LOAD_IF_PRESENT(ipc_get_mem_handle, "cuIpcGetMemHandle");
  LOAD_IF_PRESENT(ipc_open_mem_handle, "cuIpcOpenMemHandle");
  LOAD_IF_PRESENT(ipc_close_mem_handle, "cuIpcCloseMemHandle");
  LOAD_IF_PRESENT(stream_create, "cuStreamCreate");
  LOAD_IF_PRESENT(stream_destroy, "cuStreamDestroy");
  xcoll_cu = d;
  return;
missing:
  dlclose(d.handle);
}

const char *xcoll_cu_text(xcoll_cu_result result) {
  const char *text = NULL;
  if (xcoll_cu.get_error_string == NULL ||
      xcoll_cu.get_error_string(result, &text) != 0 || text == NULL)
    return "unknown CUDA error";
  return text;
}

xcoll_status xcoll_cuda_open(int device, const char *backend_name,
                             xcoll_cuda **out) {
  *out = NULL;
  pthread_mutex_lock(&load_lock);
  driver_load();
  int loaded = xcoll_cu.handle != NULL;
  pthread_mutex_unlock(&load_lock);
  if (!loaded)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "CUDA device %d on backend '%s': %s; install the "
                       "NVIDIA driver, or use a host rank (XCOLL_DEVICE=host)",
                       device, backend_name, load_why);
  int count = 0;
  xcoll_cu_result rc = xcoll_cu.init(0);
  if (rc == 0)
    rc = xcoll_cu.device_get_count(&count);
  if (rc != 0)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "CUDA device %d on backend '%s': the CUDA driver "
                       "failed to start (cuInit/cuDeviceGetCount: error %d, "
                       "%s)",
                       device, backend_name, rc, xcoll_cu_text(rc));
  if (device >= count)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "CUDA device %d does not exist: this machine has %d "
                       "(XCOLL_DEVICE=cuda picks LOCAL_RANK's device; run at "
                       "most %d ranks per node, or use host ranks)",
                       device, count, count);
  xcoll_cuda *cuda = calloc(1, sizeof *cuda);
  if (cuda == NULL)
    return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                       "no memory for CUDA device %d's state", device);
  int handle = 0;
  rc = xcoll_cu.device_get(&handle, device);
  if (rc == 0)
    rc = xcoll_cu.primary_ctx_retain(&cuda->ctx, handle);
  if (rc != 0) {
    free(cuda);
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "CUDA device %d: cuDevicePrimaryCtxRetain failed "
                       "(error %d, %s)",
                       device, rc, xcoll_cu_text(rc));
  }
  pthread_mutex_init(&cuda->lock, NULL);
  cuda->refs = 1;
  cuda->ordinal = device;
  cuda->device = handle;
  *out = cuda;
  return XCOLL_SUCCESS;
}

xcoll_cuda *xcoll_cuda_ref(xcoll_cuda *cuda) {
  pthread_mutex_lock(&cuda->lock);
  cuda->refs++;
  pthread_mutex_unlock(&cuda->lock);
  return cuda;
}

xcoll_cu_result xcoll_cuda_push(xcoll_cuda *cuda) {
  return xcoll_cu.ctx_push(cuda->ctx);
}

void xcoll_cuda_pop(void) {
  void *ignored = NULL;
  xcoll_cu.ctx_pop(&ignored);
}

void xcoll_cuda_close(xcoll_cuda *cuda) {
  if (cuda == NULL)
    return;
  pthread_mutex_lock(&cuda->lock);
  int last = --cuda->refs == 0;
  pthread_mutex_unlock(&cuda->lock);
  if (!last)
    return;
  if (cuda->spare != NULL && xcoll_cuda_push(cuda) == 0) {
    xcoll_cu.mem_free_host(cuda->spare);
    xcoll_cuda_pop();
  }
  xcoll_cu.primary_ctx_release(cuda->device);
  pthread_mutex_destroy(&cuda->lock);
  free(cuda);
}
