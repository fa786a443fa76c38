/*
 * perf_cuda.c - xcoll-perf's device memory: the few CUDA driver entry points
 * it needs (allocate, free, copy, the primary context), loaded with
 * dlopen("libcuda.so.1") as the library loads them, so that the tool builds
 * and runs without the CUDA toolkit. tests/unit/fake_libcuda.c stands in for
 * the driver on machines without a GPU.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "perf.h"

/* cuda.h maps most names to a _v2 entry point (cuMemAlloc -> cuMemAlloc_v2):
 * take the _v2 symbol where there is one, as core/cuda.c does. */
static void *cuda_symbol(void *handle, const char *name) {
  char versioned[64];
  snprintf(versioned, sizeof versioned, "%s_v2", name);
  void *sym = dlsym(handle, versioned);
  return sym ? sym : dlsym(handle, name);
}

/* Load libcuda.so.1 once and cuInit it. Returns 0, or -1 with a message. */
int perf_cuda_load(perf_cuda *cu) {
  if (cu->handle)
    return 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "xcoll-perf: device buffers need the CUDA driver: dlopen "
            "libcuda.so.1: %s\n", dlerror());
    return -1;
  }
  void *sym[9] = {cuda_symbol(h, "cuInit"), cuda_symbol(h, "cuDeviceGetCount"),
                  cuda_symbol(h, "cuDeviceGet"),
                  cuda_symbol(h, "cuDevicePrimaryCtxRetain"),
                  cuda_symbol(h, "cuCtxSetCurrent"), cuda_symbol(h, "cuMemAlloc"),
                  cuda_symbol(h, "cuMemFree"), cuda_symbol(h, "cuMemcpyHtoD"),
                  cuda_symbol(h, "cuMemcpyDtoH")};
  /* The stand-in driver has no cuCtxSetCurrent: its allocations and
   * synchronous copies need no context. It is told by its counters. */
  cu->stand_in = dlsym(h, "fake_cuda_ctx_depth") != NULL;
  for (int i = 0; i < 9; i++) {
    if (!sym[i] && !(i == 4 && cu->stand_in)) {
      fprintf(stderr, "xcoll-perf: libcuda.so.1 lacks entry point %d of "
              "cuInit, cuDeviceGetCount, cuDeviceGet, cuDevicePrimaryCtxRetain, "
              "cuCtxSetCurrent, cuMemAlloc, cuMemFree, cuMemcpyHtoD, "
              "cuMemcpyDtoH\n", i);
      dlclose(h);
      return -1;
    }
  }
  /* Object pointers to function pointers: memcpy, as ISO C has no cast. */
  memcpy(&cu->init, &sym[0], sizeof sym[0]);
  memcpy(&cu->device_get_count, &sym[1], sizeof sym[1]);
  memcpy(&cu->device_get, &sym[2], sizeof sym[2]);
  memcpy(&cu->primary_ctx_retain, &sym[3], sizeof sym[3]);
  memcpy(&cu->ctx_set_current, &sym[4], sizeof sym[4]);
  memcpy(&cu->mem_alloc, &sym[5], sizeof sym[5]);
  memcpy(&cu->mem_free, &sym[6], sizeof sym[6]);
  memcpy(&cu->htod, &sym[7], sizeof sym[7]);
  memcpy(&cu->dtoh, &sym[8], sizeof sym[8]);
  void *release = cuda_symbol(h, "cuDevicePrimaryCtxRelease");
  memcpy(&cu->primary_ctx_release, &release, sizeof release);
  int rc = cu->init(0);
  if (rc != 0) {
    fprintf(stderr, "xcoll-perf: cuInit failed: CUresult %d\n", rc);
    dlclose(h);
    return -1;
  }
  cu->handle = h;
  return 0;
}

/* Make device's primary context current on this thread: the driver API's
 * allocations and copies act on the current context, and the primary one
 * is the context the library (and the CUDA runtime) use on that device. */
int perf_cuda_bind(perf_cuda *cu, int device) {
  if (cu->stand_in)
    return 0;
  int handle = 0, rc;
  void *ctx = NULL;
  if ((rc = cu->device_get(&handle, device)) == 0 &&
      (rc = cu->primary_ctx_retain(&ctx, handle)) == 0) {
    cu->bound_device = handle;
    rc = cu->ctx_set_current(ctx);
  }
  if (rc != 0) {
    fprintf(stderr, "xcoll-perf: no context on CUDA device %d: CUresult %d\n",
            device, rc);
    return -1;
  }
  return 0;
}

/* Release the primary context perf_cuda_bind retained (none on the stand-in). */
void perf_cuda_unbind(perf_cuda *cu) {
  if (cu->bound_device >= 0 && cu->primary_ctx_release)
    cu->primary_ctx_release(cu->bound_device);
  cu->bound_device = -1;
}

