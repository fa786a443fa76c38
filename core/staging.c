/* staging.c - CUDA device buffers on host-driven backends through pinned
 * host memory (staging.h). The driver is reached through dlopen and the
 * CUDA Driver API's documented signatures, declared here so that no CUDA
 * header is needed to build. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_COLL /* log.h */
#include "staging.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "dtype.h"
#include "error.h"
#include "log.h"

/* CUresult is an int (CUDA_SUCCESS = 0), CUdevice an int, CUcontext and
 * CUstream opaque pointers, CUdeviceptr an unsigned 64-bit integer. */
typedef int cu_result;
typedef unsigned long long cu_deviceptr;

static struct driver {
  void *handle;
  cu_result (*init)(unsigned int flags);
  cu_result (*device_get_count)(int *count);
  cu_result (*device_get)(int *device, int ordinal);
  cu_result (*primary_ctx_retain)(void **ctx, int device);
  cu_result (*primary_ctx_release)(int device);
  cu_result (*ctx_push)(void *ctx);
  cu_result (*ctx_pop)(void **ctx);
  cu_result (*mem_host_alloc)(void **p, size_t bytes, unsigned int flags);
  cu_result (*mem_free_host)(void *p);
  cu_result (*memcpy_dtoh_async)(void *dst, cu_deviceptr src, size_t bytes,
                                 void *stream);
  cu_result (*memcpy_htod_async)(cu_deviceptr dst, const void *src,
                                 size_t bytes, void *stream);
  cu_result (*stream_synchronize)(void *stream);
  cu_result (*get_error_string)(cu_result result, const char **text);
  char why[256]; /* why loading failed, when handle is NULL */
} drv;
/* Loading is retried at each communicator creation until it succeeds: a
 * program may load the driver after a first attempt failed. */
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;

/* The driver exports some entry points under a versioned name (cuda.h maps
 * cuCtxPushCurrent to cuCtxPushCurrent_v2 and so on): take the _v2 symbol
 * when there is one. */
static void *driver_symbol(const char *name) {
  char versioned[64];
  snprintf(versioned, sizeof versioned, "%s_v2", name);
  void *fn = dlsym(drv.handle, versioned);
  return fn != NULL ? fn : dlsym(drv.handle, name);
}

#define LOAD(field, name)                                                      \
  do {                                                                         \
    void *symbol_ = driver_symbol(name);                                       \
    memcpy(&drv.field, &symbol_, sizeof symbol_);                              \
    if (symbol_ == NULL) {                                                     \
      snprintf(drv.why, sizeof drv.why, "libcuda.so.1 has no %s", name);       \
      goto missing;                                                            \
    }                                                                          \
  } while (0)

static void driver_load(void) {
  if (drv.handle != NULL)
    return;
  drv.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (drv.handle == NULL) {
    snprintf(drv.why, sizeof drv.why,
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
  return;
missing:
  dlclose(drv.handle);
  drv.handle = NULL;
}

static const char *cu_text(cu_result result) {
  const char *text = NULL;
  if (drv.get_error_string == NULL || drv.get_error_string(result, &text) != 0 ||
      text == NULL)
    return "unknown CUDA error";
  return text;
}

struct xcoll_cuda {
  pthread_mutex_t lock;
  int refs;   /* under lock */
  int device; /* ordinal */
  void *ctx;  /* the device's primary context */
  /* One pinned buffer kept between calls: cuMemHostAlloc is slow (it pins
   * pages), and most programs repeat the same sizes. Under lock. */
  void *spare;
  size_t spare_bytes;
};

struct xcoll_staging {
  xcoll_comm *comm;
  xcoll_cuda *cuda;
  void *stream;
  void *pinned; /* the pinned copies, pinned_bytes long */
  size_t pinned_bytes;
  void *device_recv; /* where the result goes back to; NULL: nowhere */
  const void *pinned_recv;
  size_t recv_bytes;
};

xcoll_status xcoll_cuda_open(int device, const char *backend_name,
                             xcoll_cuda **out) {
  *out = NULL;
  pthread_mutex_lock(&drv_lock);
  driver_load();
  int loaded = drv.handle != NULL;
  pthread_mutex_unlock(&drv_lock);
  if (!loaded)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "CUDA device %d on backend '%s': %s; install the "
                       "NVIDIA driver, or use a host rank (XCOLL_DEVICE=host)",
                       device, backend_name, drv.why);
  int count = 0;
  cu_result rc = drv.init(0);
  if (rc == 0)
    rc = drv.device_get_count(&count);
  if (rc != 0)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "CUDA device %d on backend '%s': the CUDA driver "
                       "failed to start (cuInit/cuDeviceGetCount: error %d, "
                       "%s)",
                       device, backend_name, rc, cu_text(rc));
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
  rc = drv.device_get(&handle, device);
  if (rc == 0)
    rc = drv.primary_ctx_retain(&cuda->ctx, handle);
  if (rc != 0) {
    free(cuda);
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "CUDA device %d: cuDevicePrimaryCtxRetain failed "
                       "(error %d, %s)",
                       device, rc, cu_text(rc));
  }
  pthread_mutex_init(&cuda->lock, NULL);
  cuda->refs = 1;
  cuda->device = handle;
  XCOLL_INFO("CUDA device %d on backend '%s': device buffers are staged "
             "through pinned host memory",
             device, backend_name);
  *out = cuda;
  return XCOLL_SUCCESS;
}

xcoll_cuda *xcoll_cuda_ref(xcoll_cuda *cuda) {
  pthread_mutex_lock(&cuda->lock);
  cuda->refs++;
  pthread_mutex_unlock(&cuda->lock);
  return cuda;
}

/* Push the device's context on this thread; 0 on success. */
static cu_result push(xcoll_cuda *cuda) { return drv.ctx_push(cuda->ctx); }
static void pop(void) {
  void *ignored = NULL;
  drv.ctx_pop(&ignored);
}

void xcoll_cuda_close(xcoll_cuda *cuda) {
  if (cuda == NULL)
    return;
  pthread_mutex_lock(&cuda->lock);
  int last = --cuda->refs == 0;
  pthread_mutex_unlock(&cuda->lock);
  if (!last)
    return;
  if (cuda->spare != NULL && push(cuda) == 0) {
    drv.mem_free_host(cuda->spare);
    pop();
  }
  drv.primary_ctx_release(cuda->device);
  pthread_mutex_destroy(&cuda->lock);
  free(cuda);
}

/* A pinned buffer of at least bytes: the spare when it is large enough.
 * The context is pushed. */
static void *pinned_take(xcoll_cuda *cuda, size_t bytes, size_t *got) {
  pthread_mutex_lock(&cuda->lock);
  if (cuda->spare != NULL && cuda->spare_bytes >= bytes) {
    void *p = cuda->spare;
    *got = cuda->spare_bytes;
    cuda->spare = NULL;
    pthread_mutex_unlock(&cuda->lock);
    return p;
  }
  pthread_mutex_unlock(&cuda->lock);
  void *p = NULL;
  if (drv.mem_host_alloc(&p, bytes, 0) != 0)
    return NULL;
  *got = bytes;
  return p;
}

/* Keep the larger of p and the spare; free the other. Context pushed. */
static void pinned_give(xcoll_cuda *cuda, void *p, size_t bytes) {
  pthread_mutex_lock(&cuda->lock);
  void *drop = p;
  if (cuda->spare == NULL || bytes > cuda->spare_bytes) {
    drop = cuda->spare;
    cuda->spare = p;
    cuda->spare_bytes = bytes;
  }
  pthread_mutex_unlock(&cuda->lock);
  if (drop != NULL)
    drv.mem_free_host(drop);
}

/* Bytes sendbuf and recvbuf span in this call on this rank (0 where a
 * buffer is not used here: broadcast's sendbuf off root, reduce's recvbuf
 * off root, barrier). */
static void span_bytes(const xcoll_comm *comm, const xcoll_coll_args *args,
                       size_t *send_bytes, size_t *recv_bytes) {
  size_t bytes = args->count * xcoll_datatype_size(args->dtype);
  size_t all = bytes * (size_t)comm->world_size;
  *send_bytes = *recv_bytes = bytes;
  switch (args->kind) {
  case XCOLL_COLL_ALLGATHER:
    *recv_bytes = all;
    break;
  case XCOLL_COLL_REDUCE_SCATTER:
    *send_bytes = all;
    break;
  case XCOLL_COLL_BROADCAST:
    if (comm->rank != args->root)
      *send_bytes = 0;
    break;
  case XCOLL_COLL_REDUCE:
    if (comm->rank != args->root)
      *recv_bytes = 0;
    break;
  case XCOLL_COLL_BARRIER:
    *send_bytes = *recv_bytes = 0;
    break;
  default:
    break;
  }
  if (args->sendbuf == NULL)
    *send_bytes = 0;
  if (args->recvbuf == NULL)
    *recv_bytes = 0;
}

static xcoll_status driver_failed(xcoll_comm *comm, const char *call,
                                  cu_result rc) {
  return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                     "%s on CUDA device %d failed: error %d, %s", call,
                     comm->device, rc, cu_text(rc));
}

xcoll_status xcoll_staging_begin(xcoll_comm *comm, const xcoll_coll_args *args,
                                 xcoll_coll_args *host_args,
                                 xcoll_staging **out) {
  *out = NULL;
  *host_args = *args;
  host_args->stream = NULL;
  xcoll_cuda *cuda = comm->cuda;
  size_t send_bytes, recv_bytes;
  span_bytes(comm, args, &send_bytes, &recv_bytes);
  const char *send = args->sendbuf;
  char *recv = args->recvbuf;
  int send_device = send_bytes > 0 && xcoll_device_pointer(send);
  int recv_device = recv_bytes > 0 && xcoll_device_pointer(recv);

  cu_result rc = push(cuda);
  if (rc != 0)
    return driver_failed(comm, "cuCtxPushCurrent", rc);
  if (!send_device && !recv_device) {
    /* Host buffers: the call still follows the stream's earlier work. */
    rc = drv.stream_synchronize(args->stream);
    pop();
    return rc == 0 ? XCOLL_SUCCESS
                   : driver_failed(comm, "cuStreamSynchronize", rc);
  }

  /* One pinned allocation: both buffers' copies side by side, or one copy
   * of the range they share (the in-place forms), at the same offsets. */
  const char *lo;
  size_t span, send_at, recv_at;
  int overlap = send_device && recv_device && send < recv + recv_bytes &&
                recv < send + send_bytes;
  if (overlap) {
    lo = send < recv ? send : recv;
    const char *hi_send = send + send_bytes, *hi_recv = recv + recv_bytes;
    span = (size_t)((hi_send > hi_recv ? hi_send : hi_recv) - lo);
    send_at = (size_t)(send - lo);
    recv_at = (size_t)(recv - lo);
  } else {
    send_at = 0;
    recv_at = send_device ? (send_bytes + 63) / 64 * 64 : 0;
    span = recv_at + (recv_device ? recv_bytes : 0);
  }

  xcoll_staging *staging = calloc(1, sizeof *staging);
  size_t got = 0;
  char *pinned = staging != NULL ? pinned_take(cuda, span, &got) : NULL;
  if (pinned == NULL) {
    pop();
    free(staging);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "no pinned host memory for %zu bytes of staging "
                       "(CUDA device %d)",
                       span, comm->device);
  }
  staging->comm = comm;
  staging->cuda = cuda;
  staging->stream = args->stream;
  staging->pinned = pinned;
  staging->pinned_bytes = got;
  if (send_device) {
    host_args->sendbuf = pinned + send_at;
    rc = drv.memcpy_dtoh_async(pinned + send_at, (cu_deviceptr)(uintptr_t)send,
                               send_bytes, args->stream);
    if (rc != 0) {
      pinned_give(cuda, pinned, got);
      pop();
      free(staging);
      return driver_failed(comm, "cuMemcpyDtoHAsync", rc);
    }
  }
  if (recv_device) {
    host_args->recvbuf = pinned + recv_at;
    staging->device_recv = recv;
    staging->pinned_recv = pinned + recv_at;
    staging->recv_bytes = recv_bytes;
  }
  /* The host algorithm reads the copy: it must have landed. */
  rc = drv.stream_synchronize(args->stream);
  pop();
  if (rc != 0) {
    staging->device_recv = NULL;
    xcoll_staging_end(staging, XCOLL_SUCCESS);
    return driver_failed(comm, "cuStreamSynchronize", rc);
  }
  *out = staging;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_staging_end(xcoll_staging *staging, xcoll_status status) {
  if (staging == NULL)
    return status;
  xcoll_cuda *cuda = staging->cuda;
  cu_result rc = push(cuda);
  if (rc != 0) {
    /* Without a context the pinned memory cannot be freed: leak it rather
     * than free it wrongly, and say so. */
    xcoll_status failed = driver_failed(staging->comm, "cuCtxPushCurrent", rc);
    free(staging);
    return status != XCOLL_SUCCESS ? status : failed;
  }
  if (status == XCOLL_SUCCESS && staging->device_recv != NULL) {
    rc = drv.memcpy_htod_async((cu_deviceptr)(uintptr_t)staging->device_recv,
                               staging->pinned_recv, staging->recv_bytes,
                               staging->stream);
    const char *call = "cuMemcpyHtoDAsync";
    if (rc == 0) {
      /* The pinned copy is reused once this returns: wait for the copy. */
      rc = drv.stream_synchronize(staging->stream);
      call = "cuStreamSynchronize";
    }
    if (rc != 0)
      status = driver_failed(staging->comm, call, rc);
  }
  pinned_give(cuda, staging->pinned, staging->pinned_bytes);
  pop();
  free(staging);
  return status;
}
