/* test_cuda.h - device buffers for the test programs that run GPU ranks
 * (tests/conformance/staging.c, tests/nccl_like/nl_mixed.c,
 * tests/faults/fault_peer.c, tests/faults/fault_desync.c): the CUDA driver
 * through dlopen, as the library reaches it, so that no CUDA header or toolkit
 * is needed to build them.
 *
 * The driver is the stand-in (tests/unit/fake_libcuda.c, first on
 * LD_LIBRARY_PATH under ctest) or a real one (scripts/gpu-check.sh). With a
 * real driver this process makes the device's primary context current for
 * its own allocations and copies (the library pushes and pops the same
 * context around its own calls); the stand-in needs none. */
#ifndef XCOLL_TESTS_TEST_CUDA_H
#define XCOLL_TESTS_TEST_CUDA_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct test_cuda {
  void *handle; /* dlopen's */
  int fake;     /* the stand-in driver (it exports fake_cuda_ctx_depth) */
  int (*mem_alloc)(uintptr_t *dptr, size_t bytes);
  int (*mem_free)(uintptr_t dptr);
  int (*htod)(uintptr_t dst, const void *src, size_t bytes);
  int (*dtoh)(void *dst, uintptr_t src, size_t bytes);
  int (*stream_create)(void **stream, unsigned int flags);
  int (*stream_sync)(void *stream);
} test_cuda;

/* A driver entry point under its versioned name when there is one (cuda.h
 * maps cuMemAlloc to cuMemAlloc_v2 and so on). */
static inline void *test_cuda_symbol(void *h, const char *name) {
  char versioned[64];
  snprintf(versioned, sizeof versioned, "%s_v2", name);
  void *fn = dlsym(h, versioned);
  return fn != NULL ? fn : dlsym(h, name);
}

/* Loads the driver into *cu for device (a CUDA ordinal). Returns 0, or -1
 * after printing why, prefixed with who. */
static inline int test_cuda_load(test_cuda *cu, int device, const char *who) {
  memset(cu, 0, sizeof *cu);
  cu->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (cu->handle == NULL) {
    fprintf(stderr, "%s: dlopen libcuda.so.1: %s\n", who, dlerror());
    return -1;
  }
  static const char *const names[6] = {"cuMemAlloc",   "cuMemFree",
                                       "cuMemcpyHtoD", "cuMemcpyDtoH",
                                       "cuStreamCreate", "cuStreamSynchronize"};
  void *sym[6];
  for (int i = 0; i < 6; i++) {
    sym[i] = test_cuda_symbol(cu->handle, names[i]);
    if (sym[i] == NULL) {
      fprintf(stderr, "%s: libcuda.so.1 lacks %s\n", who, names[i]);
      return -1;
    }
  }
  memcpy(&cu->mem_alloc, &sym[0], sizeof sym[0]);
  memcpy(&cu->mem_free, &sym[1], sizeof sym[1]);
  memcpy(&cu->htod, &sym[2], sizeof sym[2]);
  memcpy(&cu->dtoh, &sym[3], sizeof sym[3]);
  memcpy(&cu->stream_create, &sym[4], sizeof sym[4]);
  memcpy(&cu->stream_sync, &sym[5], sizeof sym[5]);
  cu->fake = dlsym(cu->handle, "fake_cuda_ctx_depth") != NULL;
  if (cu->fake)
    return 0;
  int (*init)(unsigned) = NULL, (*get)(int *, int) = NULL;
  int (*retain)(void **, int) = NULL, (*set)(void *) = NULL;
  void *f[4] = {dlsym(cu->handle, "cuInit"), dlsym(cu->handle, "cuDeviceGet"),
                test_cuda_symbol(cu->handle, "cuDevicePrimaryCtxRetain"),
                dlsym(cu->handle, "cuCtxSetCurrent")};
  memcpy(&init, &f[0], sizeof f[0]);
  memcpy(&get, &f[1], sizeof f[1]);
  memcpy(&retain, &f[2], sizeof f[2]);
  memcpy(&set, &f[3], sizeof f[3]);
  int handle = 0;
  void *ctx = NULL;
  if (!init || !get || !retain || !set || init(0) != 0 ||
      get(&handle, device) != 0 || retain(&ctx, handle) != 0 ||
      set(ctx) != 0) {
    fprintf(stderr, "%s: the CUDA driver did not give device %d a context\n",
            who, device);
    return -1;
  }
  return 0;
}

/* The CUDA devices the driver reports (cuInit, cuDeviceGetCount), or 0. */
static inline int test_cuda_device_count(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL)
    return 0;
  int (*init)(unsigned) = NULL, (*count_fn)(int *) = NULL;
  void *f[2] = {dlsym(h, "cuInit"), dlsym(h, "cuDeviceGetCount")};
  memcpy(&init, &f[0], sizeof f[0]);
  memcpy(&count_fn, &f[1], sizeof f[1]);
  int count = 0;
  if (init == NULL || count_fn == NULL || init(0) != 0 || count_fn(&count) != 0)
    count = 0;
  return count; /* h stays loaded: test_cuda_load opens it again */
}

/* The device of the rank whose LOCAL_RANK is local (NULL: 0), modulo the
 * devices the driver reports, so that ranks share one GPU where there are
 * fewer GPUs than ranks. */
static inline int test_cuda_local_device(const char *local) {
  int device = local != NULL ? atoi(local) : 0,
      devices = test_cuda_device_count();
  return devices > 0 ? device % devices : device;
}

/* A rank of a fault program that may be a GPU rank: 1 when the
 * comma-separated rank list in the environment variable list_env names
 * this process's RANK (then XCOLL_DEVICE is set to cuda:D, D = LOCAL_RANK
 * modulo the devices the driver reports, so that ranks share one GPU as
 * xcoll-perf's --gpu-ranks does, and the driver is loaded into *cu), 0 for
 * a host rank, -1 when the driver is not usable. */
static inline int test_cuda_rank_setup(test_cuda *cu, const char *list_env,
                                       const char *who) {
  const char *list = getenv(list_env);
  const char *rank_text = getenv("RANK"), *local = getenv("LOCAL_RANK");
  if (list == NULL || rank_text == NULL)
    return 0;
  int me = atoi(rank_text), listed = 0;
  char copy[256];
  snprintf(copy, sizeof copy, "%s", list);
  for (char *t = strtok(copy, ","); t != NULL; t = strtok(NULL, ","))
    listed |= atoi(t) == me;
  if (!listed)
    return 0;
  int device = test_cuda_local_device(local);
  char value[32];
  snprintf(value, sizeof value, "cuda:%d", device);
  setenv("XCOLL_DEVICE", value, 1);
  return test_cuda_load(cu, device, who) != 0 ? -1 : 1;
}

#endif
