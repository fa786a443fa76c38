/* device.c - device binding and device-pointer detection (device.h). */
#include "device.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda.h"
#include "env.h"
#include "error.h"
#include "log.h"

xcoll_status xcoll_device_check(int device, const char *source) {
  if (device == XCOLL_DEVICE_HOST)
    return XCOLL_SUCCESS;
  if (device < XCOLL_DEVICE_HOST)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "%s=%d: use XCOLL_DEVICE_HOST (-1) for host memory, or "
                       "a CUDA device ordinal >= 0",
                       source, device);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_device_open(int device, const xcoll_backend *backend,
                               const char *source, struct xcoll_cuda **cuda) {
  *cuda = NULL;
  if (device == XCOLL_DEVICE_HOST)
    return XCOLL_SUCCESS;
  if (backend->coll != NULL && !backend->device_engine)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "%s asks for a GPU rank on CUDA device %d with "
                       "backend '%s', which runs host buffers only: use "
                       "XCOLL_BACKEND=nccl_like (CUDA ring kernels), tcp or "
                       "ucx (they stage device buffers through pinned host "
                       "memory), or a host rank (XCOLL_DEVICE=host, "
                       "config.device = XCOLL_DEVICE_HOST)",
                       source, device, backend->name);
  xcoll_status status = xcoll_cuda_open(device, backend->name, cuda);
  if (status != XCOLL_SUCCESS) {
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", xcoll_last_error());
    return xcoll_error(NULL, status, "%s: %s", source, cause);
  }
  if (backend->device_engine)
    XCOLL_INFO("CUDA device %d on backend '%s': collectives run as the "
               "backend's kernels on the caller's stream",
               device, backend->name);
  else
    XCOLL_INFO("CUDA device %d on backend '%s': device buffers are staged "
               "through pinned host memory",
               device, backend->name);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_device_from_env(int local_rank, int *device) {
  *device = XCOLL_DEVICE_HOST;
  const char *value = getenv("XCOLL_DEVICE");
  if (value == NULL || value[0] == '\0' || strcmp(value, "host") == 0)
    return XCOLL_SUCCESS;
  if (strcmp(value, "cuda") == 0) {
    *device = local_rank >= 0 ? local_rank : 0;
    return XCOLL_SUCCESS;
  }
  const char *digits = strncmp(value, "cuda:", 5) == 0 ? value + 5 : value;
  char *end = NULL;
  long n = digits[0] >= '0' && digits[0] <= '9' ? strtol(digits, &end, 10) : -1;
  if (n < 0 || n > 1024 || end == NULL || *end != '\0')
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "XCOLL_DEVICE='%.64s': use 'host', 'cuda' (the device "
                       "of LOCAL_RANK), 'cuda:N' or 'N' (N from 0 to 1024)",
                       value);
  *device = (int)n;
  return XCOLL_SUCCESS;
}

/* cuPointerGetAttributes' signature and the two attributes used, as the
 * CUDA Driver API defines them (cuda.h: CU_POINTER_ATTRIBUTE_MEMORY_TYPE =
 * 2, CU_POINTER_ATTRIBUTE_IS_MANAGED = 8, CU_MEMORYTYPE_DEVICE = 2;
 * CUDA_SUCCESS = 0). Declared here so that no CUDA header is needed. Not
 * cuPointerGetAttribute: that one fails (CUDA_ERROR_INVALID_VALUE) on host
 * memory the driver does not know, where this one succeeds and leaves each
 * attribute 0 (CUDA Driver API reference, cuPointerGetAttributes). A host
 * buffer is the common case here, and a failed driver call is an error to
 * compute-sanitizer's memcheck and to CUDA's own error logging. */
typedef int (*cu_pointer_get_attributes_fn)(unsigned int count,
                                           int *attributes, void **data,
                                           uintptr_t ptr);
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2

static _Atomic(cu_pointer_get_attributes_fn) cu_get_attributes;

/* The number of objects the process had loaded (glibc's dlpi_adds) when
 * libcuda was last looked for and not found, plus one; 0: not looked yet. A
 * host rank asks for every buffer of every call whether it is device memory,
 * and walking the loaded objects' names each time cost about a tenth of an
 * 8-byte allreduce; so the walk is made again only once something new was
 * loaded (libcuda can come later: PyTorch loads it lazily). */
static _Atomic unsigned long long libcuda_absent_at;

/* When that walk last found libcuda absent (CLOCK_MONOTONIC_COARSE, ns).
 * Even the walk costs a lock of the dynamic loader's and a tenth of an
 * 8-byte allreduce between two host ranks, so it is made at most once per
 * LIBCUDA_RECHECK_NS (in effect once per tick of the coarse clock, a few
 * milliseconds): a program that loads libcuda meanwhile has no device
 * memory yet (cuInit and an allocation take far longer), so no device
 * pointer is taken for host memory. */
static _Atomic long long libcuda_checked_ns;
#define LIBCUDA_RECHECK_NS 1000000LL

static long long coarse_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

typedef struct libcuda_search {
  const char *path;        /* out: libcuda's path, if loaded */
  unsigned long long adds; /* out: dlpi_adds; 0 where glibc gives none */
  int first;               /* the callback has not run yet */
  int unchanged;           /* out: nothing was loaded since the last search */
} libcuda_search;

/* dl_iterate_phdr callback: stops at once when nothing was loaded since
 * libcuda was last found absent, else copies the path of a loaded
 * libcuda.so*. */
static int find_libcuda(struct dl_phdr_info *info, size_t size, void *data) {
  libcuda_search *search = data;
  if (search->first) {
    search->first = 0;
    if (size >=
        offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) {
      search->adds = info->dlpi_adds;
      if (search->adds + 1 == atomic_load(&libcuda_absent_at)) {
        search->unchanged = 1;
        return 1;
      }
    }
  }
  const char *name = info->dlpi_name;
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libcuda.so", 10) != 0)
    return 0;
  search->path = name;
  return 1;
}

/* The driver's cuPointerGetAttributes once libcuda is loaded, else NULL.
 * The pointer is kept: the driver is not unloaded while the process runs
 * (the handle taken here holds a reference). */
static cu_pointer_get_attributes_fn driver_get_attributes(void) {
  cu_pointer_get_attributes_fn fn = atomic_load(&cu_get_attributes);
  if (fn != NULL)
    return fn;
  long long now = coarse_ns();
  if (atomic_load_explicit(&libcuda_absent_at, memory_order_relaxed) != 0 &&
      now - atomic_load_explicit(&libcuda_checked_ns, memory_order_relaxed) <
          LIBCUDA_RECHECK_NS)
    return NULL;
  libcuda_search search = {.first = 1};
  dl_iterate_phdr(find_libcuda, &search);
  if (search.unchanged) {
    atomic_store_explicit(&libcuda_checked_ns, now, memory_order_relaxed);
    return NULL;
  }
  if (search.path == NULL) {
    if (search.adds != 0) {
      atomic_store(&libcuda_absent_at, search.adds + 1);
      atomic_store_explicit(&libcuda_checked_ns, now, memory_order_relaxed);
    }
    return NULL;
  }
  void *handle = dlopen(search.path, RTLD_NOW | RTLD_NOLOAD);
  if (handle == NULL)
    return NULL;
  fn = (cu_pointer_get_attributes_fn)(uintptr_t)dlsym(handle,
                                                     "cuPointerGetAttributes");
  if (fn != NULL)
    atomic_store(&cu_get_attributes, fn);
  return fn;
}

/* What the driver says of ptr: its memory type (0: memory it does not
 * know) and whether it is managed. 0 when it answers, else -1. */
static int pointer_kind(cu_pointer_get_attributes_fn get, const void *ptr,
                        unsigned int *memory_type, unsigned int *managed) {
  int attributes[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                       CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *data[2] = {memory_type, managed};
  *memory_type = 0;
  *managed = 0;
  return get(2, attributes, data, (uintptr_t)ptr) == 0 ? 0 : -1;
}

static int device_pointer_by(cu_pointer_get_attributes_fn get,
                             const void *ptr) {
  if (ptr == NULL)
    return 0;
  unsigned int memory_type, managed;
  if (pointer_kind(get, ptr, &memory_type, &managed) != 0)
    return 0;
  /* managed memory is readable from the host */
  return memory_type == CU_MEMORYTYPE_DEVICE && !managed;
}

void xcoll_device_recheck(void) {
  atomic_store(&libcuda_absent_at, 0);
}

int xcoll_device_pointer(const void *ptr) {
  if (ptr == NULL)
    return 0;
  cu_pointer_get_attributes_fn get = driver_get_attributes();
  return get != NULL && device_pointer_by(get, ptr);
}

const void *xcoll_device_pointer_of(const void *a, const void *b) {
  if (a == NULL && b == NULL)
    return NULL;
  cu_pointer_get_attributes_fn get = driver_get_attributes();
  if (get == NULL)
    return NULL;
  if (device_pointer_by(get, a))
    return a;
  return b != a && device_pointer_by(get, b) ? b : NULL;
}

int xcoll_device_known(const void *ptr) {
  if (ptr == NULL)
    return 0;
  cu_pointer_get_attributes_fn get = driver_get_attributes();
  unsigned int memory_type, managed;
  return get != NULL && pointer_kind(get, ptr, &memory_type, &managed) == 0 &&
         (memory_type != 0 || managed);
}
