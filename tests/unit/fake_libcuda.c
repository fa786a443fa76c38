/* fake_libcuda.c - a stand-in for the CUDA driver (built as libcuda.so.1 in
 * its own directory) for the tests of device buffers on a machine without a
 * GPU: unit.device and the staging tests (tests/conformance/staging.c).
 *
 * What it models, and how it catches a wrong caller:
 * - "Device memory" from cuMemAlloc is mapped PROT_NONE: any host read or
 *   write of it outside the driver's own copies crashes (SIGSEGV), as a
 *   host access to real device memory would fail.
 * - Asynchronous copies are queued on their stream and run only when that
 *   stream is synchronised: a caller that reads a staging buffer before
 *   cuStreamSynchronize sees stale bytes.
 * - Copies and pinned allocations need a context pushed on the calling
 *   thread (CUDA_ERROR_INVALID_CONTEXT otherwise); counters expose pinned
 *   buffers outstanding and the context stack depth, so a test can check
 *   that a library frees and pops what it takes.
 * - fake_cuda_set_device_range calls one host range device memory for
 *   cuPointerGetAttribute only (unit.device's detection tests).
 * Error codes and attribute numbers are those of cuda.h (CUDA_SUCCESS 0,
 * CUDA_ERROR_INVALID_VALUE 1, CUDA_ERROR_INVALID_DEVICE 101,
 * CUDA_ERROR_INVALID_CONTEXT 201). FAKE_CUDA_DEVICES sets the device count
 * (default 1). */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum {
  OK = 0,
  INVALID_VALUE = 1,
  INVALID_DEVICE = 101,
  INVALID_CONTEXT = 201,
  MAX_ALLOCATIONS = 256,
  MAX_PENDING = 1024
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the legacy single range (pointer attributes only) ---- */
static uintptr_t range_base;
static size_t range_bytes;
static int range_managed;

void fake_cuda_set_device_range(void *base, size_t bytes, int managed) {
  range_base = (uintptr_t)base;
  range_bytes = bytes;
  range_managed = managed;
}

/* ---- device allocations (PROT_NONE mappings) ---- */
static struct allocation {
  uintptr_t base;
  size_t bytes;  /* asked for */
  size_t mapped; /* rounded up to pages */
} allocations[MAX_ALLOCATIONS];

/* The allocation holding [p, p + bytes), or NULL. Under lock. */
static struct allocation *find_allocation(uintptr_t p, size_t bytes) {
  for (int i = 0; i < MAX_ALLOCATIONS; i++) {
    struct allocation *a = &allocations[i];
    if (a->base != 0 && p >= a->base && p < a->base + a->bytes &&
        bytes <= a->base + a->bytes - p)
      return a;
  }
  return NULL;
}

static int is_device(uintptr_t p) { return find_allocation(p, 0) != NULL; }

int cuMemAlloc(uintptr_t *dptr, size_t bytes) {
  size_t mapped = (bytes + 4095) / 4096 * 4096;
  if (mapped == 0)
    mapped = 4096;
  void *p = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].base == 0) {
      allocations[i] = (struct allocation){(uintptr_t)p, bytes, mapped};
      pthread_mutex_unlock(&lock);
      *dptr = (uintptr_t)p;
      return OK;
    }
  pthread_mutex_unlock(&lock);
  munmap(p, mapped);
  return 2;
}

int cuMemFree(uintptr_t dptr) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].base == dptr) {
      munmap((void *)dptr, allocations[i].mapped);
      allocations[i].base = 0;
      pthread_mutex_unlock(&lock);
      return OK;
    }
  pthread_mutex_unlock(&lock);
  return INVALID_VALUE;
}

/* Copy with device pages opened for the copy only. Under lock. */
static void copy_open(struct allocation *a, void *dst, const void *src,
                      size_t bytes) {
  mprotect((void *)a->base, a->mapped, PROT_READ | PROT_WRITE);
  memcpy(dst, src, bytes);
  mprotect((void *)a->base, a->mapped, PROT_NONE);
}

/* ---- contexts, devices ---- */
static _Thread_local int ctx_depth;
static atomic_int pinned_outstanding;

static int device_count(void) {
  const char *v = getenv("FAKE_CUDA_DEVICES");
  return v != NULL ? atoi(v) : 1;
}

int cuInit(unsigned int flags) { return flags == 0 ? OK : INVALID_VALUE; }
int cuDeviceGetCount(int *count) {
  *count = device_count();
  return OK;
}
int cuDeviceGet(int *device, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count())
    return INVALID_DEVICE;
  *device = ordinal;
  return OK;
}
int cuDevicePrimaryCtxRetain(void **ctx, int device) {
  if (device < 0 || device >= device_count())
    return INVALID_DEVICE;
  *ctx = (void *)(uintptr_t)(0x1000 + device);
  return OK;
}
int cuDevicePrimaryCtxRelease(int device) {
  return device < 0 || device >= device_count() ? INVALID_DEVICE : OK;
}
int cuCtxPushCurrent(void *ctx) {
  if (ctx == NULL)
    return INVALID_CONTEXT;
  ctx_depth++;
  return OK;
}
int cuCtxPopCurrent(void **ctx) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  ctx_depth--;
  if (ctx != NULL)
    *ctx = (void *)(uintptr_t)0x1000;
  return OK;
}
int fake_cuda_ctx_depth(void) { return ctx_depth; }

int cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
  (void)flags;
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  *p = malloc(bytes > 0 ? bytes : 1);
  if (*p == NULL)
    return 2;
  atomic_fetch_add(&pinned_outstanding, 1);
  return OK;
}
int cuMemFreeHost(void *p) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  free(p);
  atomic_fetch_sub(&pinned_outstanding, 1);
  return OK;
}
int fake_cuda_pinned_outstanding(void) { return atomic_load(&pinned_outstanding); }

/* ---- copies ---- */
static struct pending {
  void *stream;
  void *dst;
  const void *src;
  size_t bytes;
} pending[MAX_PENDING];
static int num_pending;

static int enqueue(void *stream, void *dst, const void *src, size_t bytes,
                   uintptr_t device_side, const void *host_side) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  int rc = OK;
  if (find_allocation(device_side, bytes) == NULL ||
      is_device((uintptr_t)host_side) || num_pending == MAX_PENDING)
    rc = INVALID_VALUE;
  else
    pending[num_pending++] = (struct pending){stream, dst, src, bytes};
  pthread_mutex_unlock(&lock);
  return rc;
}

int cuMemcpyDtoHAsync(void *dst, uintptr_t src, size_t bytes, void *stream) {
  return enqueue(stream, dst, (const void *)src, bytes, src, dst);
}
int cuMemcpyHtoDAsync(uintptr_t dst, const void *src, size_t bytes,
                      void *stream) {
  return enqueue(stream, (void *)dst, src, bytes, dst, src);
}

/* Streams are handles only: a copy is queued under its stream's handle. */
int cuStreamCreate(void **stream, unsigned int flags) {
  static atomic_int next = 1;
  (void)flags;
  *stream = (void *)(uintptr_t)(0x5000 + atomic_fetch_add(&next, 1));
  return OK;
}

int cuStreamSynchronize(void *stream) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  int kept = 0;
  for (int i = 0; i < num_pending; i++) {
    struct pending *op = &pending[i];
    if (op->stream != stream) {
      pending[kept++] = *op;
      continue;
    }
    struct allocation *a = find_allocation((uintptr_t)op->dst, op->bytes);
    if (a == NULL)
      a = find_allocation((uintptr_t)op->src, op->bytes);
    copy_open(a, op->dst, op->src, op->bytes);
  }
  num_pending = kept;
  pthread_mutex_unlock(&lock);
  return OK;
}
int fake_cuda_pending_copies(void) {
  pthread_mutex_lock(&lock);
  int n = num_pending;
  pthread_mutex_unlock(&lock);
  return n;
}

/* Synchronous copies, for the tests' own use (no context needed here). */
int cuMemcpyHtoD(uintptr_t dst, const void *src, size_t bytes) {
  pthread_mutex_lock(&lock);
  struct allocation *a = find_allocation(dst, bytes);
  if (a != NULL)
    copy_open(a, (void *)dst, src, bytes);
  pthread_mutex_unlock(&lock);
  return a != NULL ? OK : INVALID_VALUE;
}
int cuMemcpyDtoH(void *dst, uintptr_t src, size_t bytes) {
  pthread_mutex_lock(&lock);
  struct allocation *a = find_allocation(src, bytes);
  if (a != NULL)
    copy_open(a, dst, (const void *)src, bytes);
  pthread_mutex_unlock(&lock);
  return a != NULL ? OK : INVALID_VALUE;
}

int cuGetErrorString(int result, const char **text) {
  switch (result) {
  case OK: *text = "no error"; return OK;
  case INVALID_VALUE: *text = "invalid argument"; return OK;
  case INVALID_DEVICE: *text = "invalid device ordinal"; return OK;
  case INVALID_CONTEXT: *text = "invalid device context"; return OK;
  default: *text = NULL; return INVALID_VALUE;
  }
}

int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr) {
  pthread_mutex_lock(&lock);
  int device = is_device(ptr);
  pthread_mutex_unlock(&lock);
  int managed = 0;
  if (!device) {
    if (ptr < range_base || ptr >= range_base + range_bytes)
      return INVALID_VALUE;
    managed = range_managed;
  }
  if (attribute == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
    *(unsigned int *)data = 2; /* CU_MEMORYTYPE_DEVICE */
    return OK;
  }
  if (attribute == 8) { /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
    *(unsigned int *)data = (unsigned int)managed;
    return OK;
  }
  return INVALID_VALUE;
}
