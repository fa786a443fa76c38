/* fake_libcuda.c - a stand-in for the CUDA driver (built as libcuda.so.1 in
 * its own directory) for the tests of device buffers and of the CUDA ring
 * kernels on a machine without a GPU: unit.device, the staging tests
 * (tests/conformance/staging.c) and unit.fake_cuda_kernel.
 *
 * What it models, and how it catches a wrong caller:
 * - "Device memory" from cuMemAlloc is mapped PROT_NONE: any host read or
 *   write of it outside the driver's own copies and kernels crashes
 *   (SIGSEGV), as a host access to real device memory would fail. A copy or
 *   a kernel opens an allocation read-write for its duration; an open count
 *   per allocation keeps a copy from closing a running kernel's window.
 * - Streams run their items (copies, kernels, event waits) in order, each
 *   on a worker thread of its own. Asynchronous copies are still lazy: one
 *   runs only once something needs it done (cuStreamSynchronize,
 *   cuStreamQuery, cuCtxSynchronize, an event recorded after it being
 *   queried, synchronised or waited for by another stream, or a kernel
 *   launched after it on its stream), so a caller that reads a staging
 *   buffer without synchronising sees stale bytes.
 * - Kernels (cuModuleLoadData / cuModuleGetFunction / cuLaunchKernel) are
 *   the ring kernels of kernels/cuda/ring_kernel.cu, run as their host build
 *   (kernels/ring.h's xc_ring_run): one host thread per block, all blocks of
 *   a launch at once, started as soon as the stream's earlier items are
 *   done, without the caller synchronising (the other ranks of a ring
 *   depend on it). A kernel whose arguments point at memory a GPU could not
 *   reach (neither cuMemAlloc'd nor mapped pinned memory) aborts the
 *   process: the stand-in's "illegal address".
 * - Pinned memory (cuMemHostAlloc) is page aligned and filled with 0xA5, not
 *   zeroed; with CU_MEMHOSTALLOC_DEVICEMAP its device address
 *   (cuMemHostGetDevicePointer) is its host address (unified addressing).
 * - Asynchronous copies, cuLaunchKernel, cuStreamSynchronize,
 *   cuStreamQuery, cuStreamWaitEvent, cuCtxSynchronize, cuModuleLoadData,
 *   cuEventCreate, cuEventRecord and pinned allocations need a context
 *   pushed on the calling thread (CUDA_ERROR_INVALID_CONTEXT otherwise); the
 *   other calls (cuStreamCreate/Destroy, cuEventQuery/Synchronize/Destroy,
 *   cuModuleGetFunction/Unload, cuMemHostGetDevicePointer) do not. Counters
 *   expose pinned buffers outstanding, the context stack depth, copies
 *   queued and not run, modules loaded and events alive, so a test can
 *   check that a library frees and pops what it takes.
 * - cuMemHostRegister / cuMemHostUnregister record a host range (a shm
 *   segment of nccl_like) as registered: with CU_MEMHOSTREGISTER_DEVICEMAP
 *   cuMemHostGetDevicePointer gives its host address and kernels may
 *   reach it, as a mapped pinned block.
 * - Device memory shared between processes, over memfd: cuMemAlloc's
 *   memory is a memfd mapping (PROT_NONE as above) whose IPC handle
 *   (cuIpcGetMemHandle) names the owner's pid and fd, which
 *   cuIpcOpenMemHandle opens through /proc; cuMemCreate makes a memfd
 *   that cuMemExportToShareableHandle hands out as a POSIX fd, and
 *   cuMemImportFromShareableHandle / cuMemAddressReserve / cuMemMap /
 *   cuMemSetAccess map it (PROT_NONE, opened for kernels as device memory
 *   is). A kernel opens the device memory its connections' slots point
 *   into too, so the p2p transport's writes into a peer's slots land.
 *   cuDeviceGetAttribute answers VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and
 *   HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED with 1 (0 under
 *   FAKE_CUDA_NO_VMM=1, which also makes cuMemCreate fail with
 *   CUDA_ERROR_NOT_SUPPORTED: the CUDA IPC fallback);
 *   FAKE_CUDA_EXPORT_REFUSED=1 and FAKE_CUDA_IPC_REFUSED=1 make
 *   cuMemExportToShareableHandle and cuIpcGetMemHandle refuse
 *   (CUDA_ERROR_NOT_SUPPORTED) while the attributes still promise them
 *   (a setup that refuses at run time what the device reports); cuDeviceGetUuid
 *   gives every ordinal a UUID of its own, the same in every process.
 *   MULTIPROCESSOR_COUNT is FAKE_CUDA_SMS where set, HOST_REGISTER_SUPPORTED
 *   FAKE_CUDA_HOST_REGISTER and MPS_ENABLED FAKE_CUDA_MPS (otherwise
 *   CUDA_ERROR_INVALID_VALUE, as for every other attribute).
 * - Under FAKE_CUDA_CALLS=FILE, each process appends one line to FILE as
 *   it exits: "calls pid P launch N record N create N destroy N query N
 *   sync N wait N push N attributes N", how often it called
 *   cuLaunchKernel, cuEventRecord, cuEventCreate, cuEventDestroy,
 *   cuEventQuery, cuEventSynchronize, cuStreamWaitEvent, cuCtxPushCurrent
 *   and cuPointerGetAttributes (a test's bound on a library's driver
 *   calls).
 * - cuEventDestroy or cuEventRecord of an event that another thread
 *   waits on in cuEventSynchronize aborts: the driver crashed on the
 *   first, and the second would make the waiter wait for other work.
 * - fake_cuda_set_device_range calls one host range device memory for
 *   cuPointerGetAttributes only (unit.device's detection tests), which
 *   answers memory it does not know with type 0, as the driver does.
 * Not modelled: the legacy stream's implicit synchronisation with other
 * streams (the NULL stream is an ordinary stream here), stream priorities
 * and flags, event timing, more than one context, and cuMemFree's implicit
 * wait for kernels using the memory (here the kernel crashes instead).
 * Error codes and attribute numbers are those of cuda.h (CUDA_SUCCESS 0,
 * CUDA_ERROR_INVALID_VALUE 1, CUDA_ERROR_INVALID_DEVICE 101,
 * CUDA_ERROR_INVALID_IMAGE 200, CUDA_ERROR_INVALID_CONTEXT 201,
 * CUDA_ERROR_INVALID_HANDLE 400, CUDA_ERROR_NOT_FOUND 500,
 * CUDA_ERROR_NOT_READY 600, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712,
 * CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713, CUDA_ERROR_NOT_SUPPORTED 801).
 * FAKE_CUDA_DEVICES sets the device count (default 1). */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring.h"

enum {
  OK = 0,
  INVALID_VALUE = 1,
  OUT_OF_MEMORY = 2,
  INVALID_DEVICE = 101,
  INVALID_IMAGE = 200,
  INVALID_CONTEXT = 201,
  INVALID_HANDLE = 400,
  NOT_FOUND = 500,
  NOT_READY = 600,
  ALREADY_REGISTERED = 712,
  NOT_REGISTERED = 713,
  NOT_SUPPORTED = 801,
  MAX_ALLOCATIONS = 256,
  MAX_PENDING = 1024
};

/* Guards allocations, pinned blocks, streams, events and modules. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Broadcast whenever a stream item completes or more of a stream becomes
 * needed: stream workers and every synchronising caller wait on it. */
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;

/* Prints why and aborts: what a GPU would report as an illegal address or
 * a launch failure, for a caller the stand-in cannot otherwise answer. */
static void fault(const char *what) {
  fprintf(stderr, "fake_libcuda: %s\n", what);
  abort();
}

/* ---- driver calls counted (FAKE_CUDA_CALLS) ---- */
enum { CALL_LAUNCH, CALL_RECORD, CALL_CREATE, CALL_DESTROY, CALL_QUERY,
       CALL_SYNC, CALL_WAIT, CALL_PUSH, CALL_ATTRIBUTES, CALLS };
static const char *const call_names[CALLS] = {
    "launch", "record", "create", "destroy",   "query",
    "sync",   "wait",   "push",   "attributes"};
static atomic_ulong calls[CALLS];

static void count_call(int which) {
  atomic_fetch_add_explicit(&calls[which], 1, memory_order_relaxed);
}

__attribute__((destructor)) static void write_calls(void) {
  const char *path = getenv("FAKE_CUDA_CALLS");
  if (path == NULL || *path == '\0')
    return;
  char line[256];
  int n = snprintf(line, sizeof line, "calls pid %ld", (long)getpid());
  for (int i = 0; i < CALLS && n > 0 && n < (int)sizeof line; i++)
    n += snprintf(line + n, sizeof line - (size_t)n, " %s %lu", call_names[i],
                  atomic_load(&calls[i]));
  if (n <= 0 || n >= (int)sizeof line - 1)
    return;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return;
  /* One write of a short line: appends from several processes stay whole. */
  if (write(fd, line, (size_t)n) != n)
    fprintf(stderr, "fake_libcuda: could not write %s\n", path);
  close(fd);
}

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
enum { ALLOC_MEMALLOC, ALLOC_CUMEM_MAP, ALLOC_IPC_OPEN };
static struct allocation {
  uintptr_t base;
  size_t bytes;  /* asked for */
  size_t mapped; /* rounded up to pages */
  int opened;    /* copies and kernels using it now: read-write while > 0 */
  int kind;      /* ALLOC_*: who made it, so only its maker frees it */
  int fd;        /* ALLOC_MEMALLOC: the memfd behind it (IPC), else -1 */
} allocations[MAX_ALLOCATIONS];

static int memfd(const char *name, size_t bytes) {
  int fd = (int)syscall(SYS_memfd_create, name, 1u /* MFD_CLOEXEC */);
  if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Records a mapping as device memory. Under lock; 0 when the table is
 * full. */
static int add_allocation(uintptr_t base, size_t bytes, size_t mapped,
                          int kind, int fd) {
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].base == 0) {
      allocations[i] =
          (struct allocation){base, bytes, mapped, 0, kind, fd};
      return 1;
    }
  return 0;
}

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
  /* A memfd, so that cuIpcOpenMemHandle can map it in another process. */
  int fd = memfd("fake-cuda-alloc", mapped);
  void *p = fd < 0 ? MAP_FAILED
                   : mmap(NULL, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    if (fd >= 0)
      close(fd);
    return OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&lock);
  int added = add_allocation((uintptr_t)p, bytes, mapped, ALLOC_MEMALLOC, fd);
  pthread_mutex_unlock(&lock);
  if (!added) {
    munmap(p, mapped);
    close(fd);
    return OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)p;
  return OK;
}

int cuMemFree(uintptr_t dptr) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].base == dptr && allocations[i].kind == ALLOC_MEMALLOC) {
      munmap((void *)dptr, allocations[i].mapped);
      if (allocations[i].fd >= 0)
        close(allocations[i].fd);
      allocations[i].base = 0;
      pthread_mutex_unlock(&lock);
      return OK;
    }
  pthread_mutex_unlock(&lock);
  return INVALID_VALUE;
}

/* Opens a (read-write) for one more user; close_allocation undoes it, and
 * the pages go back to PROT_NONE only when the last user is done. Under
 * lock. */
static void open_allocation(struct allocation *a) {
  if (a->opened++ == 0)
    mprotect((void *)a->base, a->mapped, PROT_READ | PROT_WRITE);
}
static void close_allocation(struct allocation *a) {
  if (--a->opened == 0)
    mprotect((void *)a->base, a->mapped, PROT_NONE);
}

/* Copy with device pages opened for the copy only. Under lock. */
static void copy_open(struct allocation *a, void *dst, const void *src,
                      size_t bytes) {
  open_allocation(a);
  memcpy(dst, src, bytes);
  close_allocation(a);
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
  count_call(CALL_PUSH);
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

/* ---- pinned host memory ---- */
enum {
  HOSTALLOC_PORTABLE = 1,
  HOSTALLOC_DEVICEMAP = 2,
  HOSTALLOC_WRITECOMBINED = 4
};

/* Every live cuMemHostAlloc block, for cuMemHostGetDevicePointer and for
 * the reachability checks of a launch. */
static struct host_block {
  uintptr_t base;
  size_t bytes;
  unsigned int flags;
  int registered; /* cuMemHostRegister's (the caller owns the memory) */
  struct host_block *next;
} *host_blocks;

/* The live block holding [p, p + bytes) or NULL. Under lock. */
static struct host_block *find_host_block(uintptr_t p, size_t bytes) {
  for (struct host_block *b = host_blocks; b != NULL; b = b->next)
    if (p >= b->base && p < b->base + b->bytes &&
        bytes <= b->base + b->bytes - p)
      return b;
  return NULL;
}

int cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  if ((flags & ~(unsigned)(HOSTALLOC_PORTABLE | HOSTALLOC_DEVICEMAP |
                           HOSTALLOC_WRITECOMBINED)) != 0)
    return INVALID_VALUE;
  struct host_block *b = malloc(sizeof *b);
  void *memory = NULL;
  size_t size = bytes > 0 ? bytes : 1;
  /* Page aligned, as the driver's are; junk-filled, because pinned memory
   * is not zeroed and a caller must not rely on it. */
  if (b == NULL || posix_memalign(&memory, 4096, size) != 0) {
    free(b);
    return OUT_OF_MEMORY;
  }
  memset(memory, 0xA5, size);
  *b = (struct host_block){(uintptr_t)memory, size, flags, 0, NULL};
  pthread_mutex_lock(&lock);
  b->next = host_blocks;
  host_blocks = b;
  pthread_mutex_unlock(&lock);
  atomic_fetch_add(&pinned_outstanding, 1);
  *p = memory;
  return OK;
}
int cuMemFreeHost(void *p) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  struct host_block **at = &host_blocks;
  while (*at != NULL && ((*at)->base != (uintptr_t)p || (*at)->registered))
    at = &(*at)->next;
  struct host_block *b = *at;
  if (b != NULL)
    *at = b->next;
  pthread_mutex_unlock(&lock);
  if (b == NULL)
    return INVALID_VALUE;
  free(p);
  free(b);
  atomic_fetch_sub(&pinned_outstanding, 1);
  return OK;
}

/* Page-locks nothing: records [p, p + bytes) so that, with DEVICEMAP, its
 * device address is its host address and kernels may reach it. Counted in
 * fake_cuda_pinned_outstanding until unregistered. */
int cuMemHostRegister(void *p, size_t bytes, unsigned int flags) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  if (p == NULL || bytes == 0 ||
      (flags & ~(unsigned)(HOSTALLOC_PORTABLE | HOSTALLOC_DEVICEMAP)) != 0)
    return INVALID_VALUE;
  struct host_block *b = malloc(sizeof *b);
  if (b == NULL)
    return OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  for (struct host_block *o = host_blocks; o != NULL; o = o->next)
    if ((uintptr_t)p < o->base + o->bytes && o->base < (uintptr_t)p + bytes) {
      pthread_mutex_unlock(&lock);
      free(b);
      return ALREADY_REGISTERED;
    }
  *b = (struct host_block){(uintptr_t)p, bytes, flags, 1, host_blocks};
  host_blocks = b;
  pthread_mutex_unlock(&lock);
  atomic_fetch_add(&pinned_outstanding, 1);
  return OK;
}
int cuMemHostUnregister(void *p) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  struct host_block **at = &host_blocks;
  while (*at != NULL && ((*at)->base != (uintptr_t)p || !(*at)->registered))
    at = &(*at)->next;
  struct host_block *b = *at;
  if (b != NULL)
    *at = b->next;
  pthread_mutex_unlock(&lock);
  if (b == NULL)
    return NOT_REGISTERED;
  free(b);
  atomic_fetch_sub(&pinned_outstanding, 1);
  return OK;
}
int fake_cuda_pinned_outstanding(void) { return atomic_load(&pinned_outstanding); }

/* ---- device attributes, and device memory shared between processes ---- */
static int no_vmm(void) {
  const char *v = getenv("FAKE_CUDA_NO_VMM");
  return v != NULL && strcmp(v, "1") == 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
  if (value == NULL || device < 0 || device >= device_count())
    return INVALID_VALUE;
  if (attribute == 102 || attribute == 103) { /* VMM, POSIX fd handles */
    *value = !no_vmm();
    return OK;
  }
  /* HOST_REGISTER_SUPPORTED, MPS_ENABLED: answered only when set. */
  const char *answer = attribute == 99    ? getenv("FAKE_CUDA_HOST_REGISTER")
                       : attribute == 133 ? getenv("FAKE_CUDA_MPS")
                                          : NULL;
  if (answer != NULL) {
    *value = atoi(answer);
    return OK;
  }
  const char *sms = getenv("FAKE_CUDA_SMS");
  if (attribute == 16 && sms != NULL) { /* MULTIPROCESSOR_COUNT */
    *value = atoi(sms);
    return OK;
  }
  return INVALID_VALUE;
}

int cuDeviceGetUuid(unsigned char uuid[16], int device) {
  if (uuid == NULL || device < 0 || device >= device_count())
    return INVALID_DEVICE;
  memset(uuid, 0, 16);
  memcpy(uuid, "fake-gpu", 8);
  uuid[15] = (unsigned char)(device + 1);
  return OK;
}

enum { GRANULARITY = 65536, MEM_HANDLE_MAGIC = 0x6d656d68 };
struct mem_handle {
  int magic;
  int fd;
  size_t bytes;
};
struct mem_prop { /* CUmemAllocationProp */
  int type, handle_types, location_type, location_id;
  void *win32;
  unsigned char flags[8];
};
struct mem_access { /* CUmemAccessDesc */
  int location_type, location_id, flags;
};

static struct mem_handle *as_mem_handle(unsigned long long h) {
  struct mem_handle *m = (struct mem_handle *)(uintptr_t)h;
  return m != NULL && m->magic == MEM_HANDLE_MAGIC ? m : NULL;
}

static int prop_ok(const struct mem_prop *prop) {
  return prop != NULL && prop->type == 1 && prop->location_type == 1 &&
         prop->location_id >= 0 && prop->location_id < device_count() &&
         (prop->handle_types & ~1) == 0;
}

int cuMemGetAllocationGranularity(size_t *granularity,
                                  const struct mem_prop *prop, int option) {
  if (granularity == NULL || !prop_ok(prop) || (option != 0 && option != 1))
    return INVALID_VALUE;
  *granularity = GRANULARITY;
  return OK;
}

int cuMemCreate(unsigned long long *handle, size_t bytes,
                const struct mem_prop *prop, unsigned long long flags) {
  if (no_vmm())
    return NOT_SUPPORTED;
  if (handle == NULL || !prop_ok(prop) || flags != 0 || bytes == 0 ||
      bytes % GRANULARITY != 0)
    return INVALID_VALUE;
  struct mem_handle *m = malloc(sizeof *m);
  int fd = m != NULL ? memfd("fake-cuda-cumem", bytes) : -1;
  if (fd < 0) {
    free(m);
    return OUT_OF_MEMORY;
  }
  *m = (struct mem_handle){MEM_HANDLE_MAGIC, fd, bytes};
  *handle = (unsigned long long)(uintptr_t)m;
  return OK;
}

/* The mapping made with it stays, as in the driver. */
int cuMemRelease(unsigned long long handle) {
  struct mem_handle *m = as_mem_handle(handle);
  if (m == NULL)
    return INVALID_VALUE;
  close(m->fd);
  m->magic = 0;
  free(m);
  return OK;
}

/* 1 when the environment variable name is "1". */
static int env_on(const char *name) {
  const char *v = getenv(name);
  return v != NULL && strcmp(v, "1") == 0;
}

int cuMemExportToShareableHandle(void *shareable, unsigned long long handle,
                                 int type, unsigned long long flags) {
  struct mem_handle *m = as_mem_handle(handle);
  if (m == NULL || shareable == NULL || type != 1 || flags != 0)
    return INVALID_VALUE;
  if (env_on("FAKE_CUDA_EXPORT_REFUSED"))
    return NOT_SUPPORTED;
  int fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return OUT_OF_MEMORY;
  memcpy(shareable, &fd, sizeof fd);
  return OK;
}

/* The fd stays the caller's (the driver takes its own reference). */
int cuMemImportFromShareableHandle(unsigned long long *handle, void *os_handle,
                                   int type) {
  int fd = (int)(intptr_t)os_handle;
  struct stat sb;
  if (handle == NULL || type != 1 || fstat(fd, &sb) != 0 || sb.st_size <= 0)
    return INVALID_VALUE;
  struct mem_handle *m = malloc(sizeof *m);
  int own = m != NULL ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (own < 0) {
    free(m);
    return OUT_OF_MEMORY;
  }
  *m = (struct mem_handle){MEM_HANDLE_MAGIC, own, (size_t)sb.st_size};
  *handle = (unsigned long long)(uintptr_t)m;
  return OK;
}

int cuMemAddressReserve(uintptr_t *ptr, size_t bytes, size_t alignment,
                        uintptr_t addr, unsigned long long flags) {
  (void)alignment;
  if (ptr == NULL || bytes == 0 || bytes % GRANULARITY != 0 || addr != 0 ||
      flags != 0)
    return INVALID_VALUE;
  void *p = mmap(NULL, bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return OUT_OF_MEMORY;
  *ptr = (uintptr_t)p;
  return OK;
}

int cuMemAddressFree(uintptr_t ptr, size_t bytes) {
  pthread_mutex_lock(&lock);
  int mapped = find_allocation(ptr, 0) != NULL;
  pthread_mutex_unlock(&lock);
  if (mapped || bytes == 0)
    return INVALID_VALUE; /* still mapped: cuMemUnmap first */
  munmap((void *)ptr, bytes);
  return OK;
}

int cuMemMap(uintptr_t ptr, size_t bytes, size_t offset,
             unsigned long long handle, unsigned long long flags) {
  struct mem_handle *m = as_mem_handle(handle);
  if (m == NULL || flags != 0 || offset != 0 || bytes > m->bytes ||
      bytes % GRANULARITY != 0)
    return INVALID_VALUE;
  void *p = mmap((void *)ptr, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, m->fd,
                 0);
  if (p == MAP_FAILED)
    return INVALID_VALUE;
  pthread_mutex_lock(&lock);
  int added = add_allocation(ptr, bytes, bytes, ALLOC_CUMEM_MAP, -1);
  pthread_mutex_unlock(&lock);
  return added ? OK : OUT_OF_MEMORY;
}

/* Leaves the range reserved (PROT_NONE, no memory behind it). */
int cuMemUnmap(uintptr_t ptr, size_t bytes) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].base == ptr && allocations[i].kind == ALLOC_CUMEM_MAP &&
        allocations[i].mapped == bytes) {
      allocations[i].base = 0;
      pthread_mutex_unlock(&lock);
      mmap((void *)ptr, bytes, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      return OK;
    }
  pthread_mutex_unlock(&lock);
  return INVALID_VALUE;
}

int cuMemSetAccess(uintptr_t ptr, size_t bytes, const struct mem_access *desc,
                   size_t count) {
  if (desc == NULL || count != 1 || desc->location_type != 1 ||
      desc->location_id < 0 || desc->location_id >= device_count() ||
      desc->flags != 3)
    return INVALID_VALUE;
  pthread_mutex_lock(&lock);
  int mapped = find_allocation(ptr, bytes) != NULL;
  pthread_mutex_unlock(&lock);
  return mapped ? OK : INVALID_VALUE;
}

enum { IPC_MAGIC = 0x69706368 };
struct ipc_handle { /* CUipcMemHandle's 64 bytes */
  int magic;
  int pid;
  int fd;
  int pad;
  uint64_t bytes;
  char reserved[40];
};

int cuIpcGetMemHandle(struct ipc_handle *handle, uintptr_t dptr) {
  if (handle == NULL)
    return INVALID_VALUE;
  if (env_on("FAKE_CUDA_IPC_REFUSED"))
    return NOT_SUPPORTED;
  pthread_mutex_lock(&lock);
  struct allocation *a = find_allocation(dptr, 0);
  int ok = a != NULL && a->base == dptr && a->kind == ALLOC_MEMALLOC &&
           a->fd >= 0;
  if (ok) {
    memset(handle, 0, sizeof *handle);
    handle->magic = IPC_MAGIC;
    handle->pid = (int)getpid();
    handle->fd = a->fd;
    handle->bytes = a->mapped;
  }
  pthread_mutex_unlock(&lock);
  return ok ? OK : INVALID_VALUE;
}

/* Opens the owner's memfd through /proc (same user), mapped PROT_NONE. */
int cuIpcOpenMemHandle(uintptr_t *dptr, struct ipc_handle handle,
                       unsigned int flags) {
  if (dptr == NULL || flags != 1 || handle.magic != IPC_MAGIC ||
      handle.bytes == 0)
    return INVALID_VALUE;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", handle.pid, handle.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return INVALID_HANDLE;
  void *p = mmap(NULL, handle.bytes, PROT_NONE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  int added = add_allocation((uintptr_t)p, handle.bytes, handle.bytes,
                             ALLOC_IPC_OPEN, -1);
  pthread_mutex_unlock(&lock);
  if (!added) {
    munmap(p, handle.bytes);
    return OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)p;
  return OK;
}

int cuIpcCloseMemHandle(uintptr_t dptr) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].base == dptr && allocations[i].kind == ALLOC_IPC_OPEN) {
      munmap((void *)dptr, allocations[i].mapped);
      allocations[i].base = 0;
      pthread_mutex_unlock(&lock);
      return OK;
    }
  pthread_mutex_unlock(&lock);
  return INVALID_VALUE;
}

/* Unified addressing: the device sees a mapped block at its host address.
 * Only blocks allocated with CU_MEMHOSTALLOC_DEVICEMAP are mapped. */
int cuMemHostGetDevicePointer(unsigned long long *dptr, void *p,
                              unsigned int flags) {
  if (dptr == NULL || flags != 0)
    return INVALID_VALUE;
  pthread_mutex_lock(&lock);
  struct host_block *b = find_host_block((uintptr_t)p, 0);
  int mapped = b != NULL && (b->flags & HOSTALLOC_DEVICEMAP) != 0;
  pthread_mutex_unlock(&lock);
  if (!mapped)
    return INVALID_VALUE;
  *dptr = (unsigned long long)(uintptr_t)p;
  return OK;
}

/* Whether a kernel could reach [p, p + bytes): device memory or a mapped
 * pinned block. Under lock. */
static int device_reachable(const void *p, size_t bytes) {
  if (find_allocation((uintptr_t)p, bytes) != NULL)
    return 1;
  struct host_block *b = find_host_block((uintptr_t)p, bytes);
  return b != NULL && (b->flags & HOSTALLOC_DEVICEMAP) != 0;
}

/* ---- modules and functions ---- */
enum { MODULE_MAGIC = 0x6d6f64 };
struct module {
  int magic;
};
static int modules_loaded; /* under lock */

static const struct function {
  const char *name;
  int kind; /* XC_COLL_* */
} functions[] = {
    {"xc_allreduce_kernel", XC_COLL_ALLREDUCE},
    {"xc_reduce_scatter_kernel", XC_COLL_REDUCE_SCATTER},
    {"xc_allgather_kernel", XC_COLL_ALLGATHER},
    {"xc_broadcast_kernel", XC_COLL_BROADCAST},
    {"xc_reduce_kernel", XC_COLL_REDUCE},
};
enum { NUM_FUNCTIONS = sizeof functions / sizeof functions[0] };

/* Accepts what the driver would try to load: a fatbin (magic 0xBA55ED50,
 * little endian), a cubin (ELF) or PTX text; the image's contents are not
 * read further, the kernels being the host build of ring_kernel.cu's. */
int cuModuleLoadData(void **module, const void *image) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  if (module == NULL || image == NULL)
    return INVALID_VALUE;
  const unsigned char *b = image;
  int fatbin = b[0] == 0x50 && b[1] == 0xED && b[2] == 0x55 && b[3] == 0xBA;
  int elf = b[0] == 0x7F && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  int ptx = b[0] == '/' && b[1] == '/';
  if (!fatbin && !elf && !ptx)
    return INVALID_IMAGE;
  struct module *m = malloc(sizeof *m);
  if (m == NULL)
    return OUT_OF_MEMORY;
  m->magic = MODULE_MAGIC;
  pthread_mutex_lock(&lock);
  modules_loaded++;
  pthread_mutex_unlock(&lock);
  *module = m;
  return OK;
}
int cuModuleUnload(void *module) {
  struct module *m = module;
  if (m == NULL || m->magic != MODULE_MAGIC)
    return INVALID_HANDLE;
  m->magic = 0;
  free(m);
  pthread_mutex_lock(&lock);
  modules_loaded--;
  pthread_mutex_unlock(&lock);
  return OK;
}
int fake_cuda_modules_loaded(void) {
  pthread_mutex_lock(&lock);
  int n = modules_loaded;
  pthread_mutex_unlock(&lock);
  return n;
}
int cuModuleGetFunction(void **fn, void *module, const char *name) {
  const struct module *m = module;
  if (m == NULL || m->magic != MODULE_MAGIC)
    return INVALID_HANDLE;
  if (fn == NULL || name == NULL)
    return INVALID_VALUE;
  for (int i = 0; i < NUM_FUNCTIONS; i++)
    if (strcmp(functions[i].name, name) == 0) {
      *fn = (void *)&functions[i];
      return OK;
    }
  return NOT_FOUND;
}

static const struct function *as_function(const void *f) {
  for (int i = 0; i < NUM_FUNCTIONS; i++)
    if (f == &functions[i])
      return &functions[i];
  return NULL;
}

/* ---- streams: ordered queues of items, each run by a worker thread ---- */
enum item_kind { ITEM_COPY, ITEM_KERNEL, ITEM_WAIT };

struct stream;

/* A launch as the kernel sees it: parameters are copied at launch time, as
 * the driver does; what they point at is read when the kernel runs. */
struct launch {
  const struct function *fn;
  unsigned int blocks;
  xc_work work;
  xc_conn *sends, *recvs;
  const xc_abort *abort;
  int *status;
};

struct item {
  enum item_kind kind;
  uint64_t ticket; /* position on its stream, from 1 */
  union {
    struct {
      void *dst;
      const void *src;
      size_t bytes;
    } copy;
    struct launch launch;
    struct {
      struct stream *stream; /* wait until its done count reaches ticket */
      uint64_t ticket;
    } wait;
  } u;
  struct item *next;
};

/* Items get tickets 1, 2, ... in order; the worker completes them in order,
 * so "everything up to ticket t is done" is done >= t. Streams are never
 * freed (events may name a destroyed one), only marked destroyed. */
struct stream {
  void *handle;
  uint64_t issued; /* tickets handed out */
  uint64_t done;   /* items completed */
  uint64_t needed; /* copies with ticket <= needed may run */
  struct item *first, *last;
  int has_worker, destroyed;
  pthread_t worker;
  struct stream *next;
};
static struct stream *streams; /* under lock */
static int num_pending;        /* copies queued and not run, under lock */

/* The stream of handle, created on first use. Under lock. */
static struct stream *find_stream(void *handle) {
  for (struct stream *s = streams; s != NULL; s = s->next)
    if (s->handle == handle && !s->destroyed)
      return s;
  struct stream *s = calloc(1, sizeof *s);
  if (s == NULL)
    fault("out of memory for a stream");
  s->handle = handle;
  s->next = streams;
  streams = s;
  return s;
}

/* Lets the copies of s up to ticket run. Under lock. */
static void need(struct stream *s, uint64_t ticket) {
  if (ticket > s->needed) {
    s->needed = ticket;
    pthread_cond_broadcast(&progress);
  }
}

/* Waits until everything on s up to ticket is done. Under lock. */
static void wait_done(struct stream *s, uint64_t ticket) {
  need(s, ticket);
  while (s->done < ticket)
    pthread_cond_wait(&progress, &lock);
}

static void run_copy(const struct item *it) {
  pthread_mutex_lock(&lock);
  struct allocation *a =
      find_allocation((uintptr_t)it->u.copy.dst, it->u.copy.bytes);
  if (a == NULL)
    a = find_allocation((uintptr_t)it->u.copy.src, it->u.copy.bytes);
  if (a == NULL)
    fault("a queued copy's device memory was freed before the copy ran");
  copy_open(a, it->u.copy.dst, it->u.copy.src, it->u.copy.bytes);
  num_pending--;
  pthread_mutex_unlock(&lock);
}

struct block {
  const struct launch *launch;
  unsigned int index;
  pthread_t thread;
};

/* Block c of a launch: ring_kernel.cu's xc_run_block, host build. */
static void *run_block(void *arg) {
  const struct block *b = arg;
  const struct launch *l = b->launch;
  unsigned int c = b->index;
  xc_work w = l->work;
  w.channel = (int)c;
  w.nchannels = (int)l->blocks;
  if (w.scratch != NULL)
    w.scratch = (char *)w.scratch + (size_t)c * w.scratch_bytes;
  /* The hooks are host function pointers: the device build compiles them
   * out, so the stand-in ignores them too. */
  w.trace = NULL;
  w.progress = NULL;
  w.notify = NULL;
  xcoll_status s =
      w.kind == l->fn->kind
          ? xc_ring_run(&w, l->sends != NULL ? &l->sends[c] : NULL,
                        l->recvs != NULL ? &l->recvs[c] : NULL, l->abort)
          : XCOLL_ERR_INVALID_ARGUMENT;
  if (s != XCOLL_SUCCESS)
    l->status[c] = (int)s;
  return NULL;
}

/* Aborts unless every pointer the kernel will follow is memory a GPU could
 * reach: a real kernel would fault on it. The conn arrays are read here at
 * start, as the kernel reads them first. Under lock. */
static void check_reachable(const struct launch *l) {
  char why[256];
  unsigned int n = l->blocks;
#define REQUIRE(p, bytes, what)                                                \
  do {                                                                         \
    if (!device_reachable((p), (bytes))) {                                     \
      snprintf(why, sizeof why,                                                \
               "%s: %s at %p (%zu bytes) is neither device memory nor mapped " \
               "pinned memory (illegal address)",                              \
               l->fn->name, what, (const void *)(p), (size_t)(bytes));         \
      fault(why);                                                              \
    }                                                                          \
  } while (0)
  REQUIRE(l->status, n * sizeof(int), "status");
  if (l->abort != NULL)
    REQUIRE(l->abort, sizeof *l->abort, "abort");
  if (l->work.ring_ranks != NULL)
    REQUIRE(l->work.ring_ranks, (size_t)l->work.nranks * sizeof(int),
            "work.ring_ranks");
  const void *buffers[3] = {l->work.sendbuf, l->work.recvbuf, l->work.scratch};
  const char *names[3] = {"work.sendbuf", "work.recvbuf", "work.scratch"};
  for (int i = 0; i < 3; i++)
    if (buffers[i] != NULL)
      REQUIRE(buffers[i], 0, names[i]);
  /* A one-rank ring never touches its connections (xc_ring_run). */
  const xc_conn *sides[2] = {l->sends, l->recvs};
  for (int side = 0; side < 2 && l->work.nranks > 1; side++) {
    if (sides[side] == NULL)
      continue;
    REQUIRE(sides[side], n * sizeof(xc_conn), side ? "recvs" : "sends");
    for (unsigned int c = 0; c < n; c++) {
      const xc_conn *conn = &sides[side][c];
      REQUIRE(conn->buff, XCOLL_STEPS * conn->step_bytes, "conn buff");
      REQUIRE(conn->head, sizeof *conn->head, "conn head");
      REQUIRE(conn->tail, sizeof *conn->tail, "conn tail");
      REQUIRE(conn->sizes, XCOLL_STEPS * sizeof(int64_t), "conn sizes");
    }
  }
#undef REQUIRE
}

/* Runs a launch's blocks, each on a thread of its own, with the device
 * allocations its work points into opened for the kernel's duration. */
static void run_kernel(const struct launch *l) {
  /* The work's buffers, and the slots of every connection (device memory
   * over p2p: this rank's, or the peer's mapped here). */
  size_t nbuffers = 3 + 2 * (size_t)l->blocks;
  const void **buffers = calloc(nbuffers, sizeof *buffers);
  struct allocation **opened = calloc(nbuffers, sizeof *opened);
  if (buffers == NULL || opened == NULL)
    fault("out of memory for a launch");
  buffers[0] = l->work.sendbuf;
  buffers[1] = l->work.recvbuf;
  buffers[2] = l->work.scratch;
  pthread_mutex_lock(&lock);
  check_reachable(l);
  for (unsigned int c = 0; c < l->blocks && l->work.nranks > 1; c++) {
    buffers[3 + 2 * c] = l->sends != NULL ? l->sends[c].buff : NULL;
    buffers[4 + 2 * c] = l->recvs != NULL ? l->recvs[c].buff : NULL;
  }
  for (size_t i = 0; i < nbuffers; i++) {
    /* One allocation opened once even when two buffers lie in it. */
    struct allocation *a =
        buffers[i] != NULL ? find_allocation((uintptr_t)buffers[i], 0) : NULL;
    for (size_t j = 0; j < i && a != NULL; j++)
      if (opened[j] == a)
        a = NULL;
    if (a != NULL)
      open_allocation(a);
    opened[i] = a;
  }
  pthread_mutex_unlock(&lock);
  struct block *blocks = calloc(l->blocks, sizeof *blocks);
  if (blocks == NULL)
    fault("out of memory for a launch");
  for (unsigned int c = 0; c < l->blocks; c++) {
    blocks[c] = (struct block){l, c, 0};
    if (pthread_create(&blocks[c].thread, NULL, run_block, &blocks[c]) != 0)
      fault("cannot start a thread for a block");
  }
  for (unsigned int c = 0; c < l->blocks; c++)
    pthread_join(blocks[c].thread, NULL);
  free(blocks);
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nbuffers; i++)
    if (opened[i] != NULL)
      close_allocation(opened[i]);
  pthread_mutex_unlock(&lock);
  free(buffers);
  free(opened);
}

/* The worker of s: runs its items in order, forever (it sleeps when the
 * queue is empty) or until s is destroyed and drained. A copy waits until
 * it is needed (the lazy copies above); a wait waits for the other stream,
 * making the copies it waits for needed. */
static void *stream_worker(void *arg) {
  struct stream *s = arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    struct item *it = s->first;
    if (it == NULL) {
      if (s->destroyed)
        break;
      pthread_cond_wait(&progress, &lock);
      continue;
    }
    if (it->kind == ITEM_COPY && it->ticket > s->needed) {
      pthread_cond_wait(&progress, &lock);
      continue;
    }
    if (it->kind == ITEM_WAIT) {
      wait_done(it->u.wait.stream, it->u.wait.ticket);
    } else {
      pthread_mutex_unlock(&lock);
      if (it->kind == ITEM_COPY)
        run_copy(it);
      else
        run_kernel(&it->u.launch);
      pthread_mutex_lock(&lock);
    }
    s->first = it->next;
    if (s->first == NULL)
      s->last = NULL;
    free(it);
    s->done++;
    pthread_cond_broadcast(&progress);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* Appends it to stream handle and starts its worker if it has none; sets
 * it->ticket. Under lock. */
static struct stream *enqueue_item(void *handle, struct item *it) {
  struct stream *s = find_stream(handle);
  it->ticket = ++s->issued;
  it->next = NULL;
  if (s->last != NULL)
    s->last->next = it;
  else
    s->first = it;
  s->last = it;
  if (!s->has_worker) {
    if (pthread_create(&s->worker, NULL, stream_worker, s) != 0)
      fault("cannot start a stream worker");
    pthread_detach(s->worker);
    s->has_worker = 1;
  }
  pthread_cond_broadcast(&progress);
  return s;
}

/* ---- copies ---- */
static int enqueue_copy(void *stream, void *dst, const void *src, size_t bytes,
                        uintptr_t device_side, const void *host_side) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  struct item *it = malloc(sizeof *it);
  if (it == NULL)
    return OUT_OF_MEMORY;
  it->kind = ITEM_COPY;
  it->u.copy.dst = dst;
  it->u.copy.src = src;
  it->u.copy.bytes = bytes;
  pthread_mutex_lock(&lock);
  int rc = OK;
  if (find_allocation(device_side, bytes) == NULL ||
      is_device((uintptr_t)host_side) || num_pending == MAX_PENDING)
    rc = INVALID_VALUE;
  else {
    num_pending++;
    enqueue_item(stream, it);
  }
  pthread_mutex_unlock(&lock);
  if (rc != OK)
    free(it);
  return rc;
}

int cuMemcpyDtoHAsync(void *dst, uintptr_t src, size_t bytes, void *stream) {
  return enqueue_copy(stream, dst, (const void *)src, bytes, src, dst);
}
int cuMemcpyHtoDAsync(uintptr_t dst, const void *src, size_t bytes,
                      void *stream) {
  return enqueue_copy(stream, (void *)dst, src, bytes, dst, src);
}

/* Handles 0x5000 + n; the queue behind one is made on first use. */
int cuStreamCreate(void **stream, unsigned int flags) {
  static atomic_int next = 1;
  (void)flags;
  *stream = (void *)(uintptr_t)(0x5000 + atomic_fetch_add(&next, 1));
  return OK;
}

/* As the driver: returns at once; work already queued still completes. */
int cuStreamDestroy(void *stream) {
  if (stream == NULL)
    return INVALID_HANDLE;
  pthread_mutex_lock(&lock);
  struct stream *s = find_stream(stream);
  need(s, s->issued);
  s->destroyed = 1;
  pthread_cond_broadcast(&progress);
  pthread_mutex_unlock(&lock);
  return OK;
}

int cuStreamSynchronize(void *stream) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  struct stream *s = find_stream(stream);
  wait_done(s, s->issued);
  pthread_mutex_unlock(&lock);
  return OK;
}

/* 0 when everything queued on stream is done, else CUDA_ERROR_NOT_READY;
 * asking makes its copies needed, so polling alone completes a stream. */
int cuStreamQuery(void *stream) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  struct stream *s = find_stream(stream);
  need(s, s->issued);
  int rc = s->done >= s->issued ? OK : NOT_READY;
  pthread_mutex_unlock(&lock);
  return rc;
}

int cuCtxSynchronize(void) {
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  for (struct stream *s = streams; s != NULL; s = s->next)
    wait_done(s, s->issued);
  pthread_mutex_unlock(&lock);
  return OK;
}

int fake_cuda_pending_copies(void) {
  pthread_mutex_lock(&lock);
  int n = num_pending;
  pthread_mutex_unlock(&lock);
  return n;
}

/* ---- kernels ---- */
int cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                   unsigned int bx, unsigned int by, unsigned int bz,
                   unsigned int shared_bytes, void *stream, void **params,
                   void **extra) {
  (void)shared_bytes;
  count_call(CALL_LAUNCH);
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  const struct function *fn = as_function(f);
  if (fn == NULL)
    return INVALID_HANDLE;
  if (gx < 1 || gy != 1 || gz != 1 || bx < 1 || by != 1 || bz != 1 ||
      params == NULL || extra != NULL)
    return INVALID_VALUE;
  for (int i = 0; i < 5; i++)
    if (params[i] == NULL)
      return INVALID_VALUE;
  struct item *it = malloc(sizeof *it);
  if (it == NULL)
    return OUT_OF_MEMORY;
  it->kind = ITEM_KERNEL;
  struct launch *l = &it->u.launch;
  l->fn = fn;
  l->blocks = gx;
  memcpy(&l->work, params[0], sizeof l->work);
  memcpy(&l->sends, params[1], sizeof l->sends);
  memcpy(&l->recvs, params[2], sizeof l->recvs);
  memcpy(&l->abort, params[3], sizeof l->abort);
  memcpy(&l->status, params[4], sizeof l->status);
  pthread_mutex_lock(&lock);
  /* The kernel runs as soon as what precedes it is done, copies included:
   * the host does not synchronise before the other ranks need it. */
  struct stream *s = enqueue_item(stream, it);
  need(s, it->ticket);
  pthread_mutex_unlock(&lock);
  return OK;
}

/* ---- events ---- */
enum { EVENT_MAGIC = 0x657674 };
struct event {
  int magic;
  struct stream *stream; /* NULL until recorded */
  uint64_t ticket;       /* complete once stream->done >= ticket */
  int waiters;           /* threads inside cuEventSynchronize on it */
};
static int events_live; /* under lock */

static struct event *as_event(void *ev) {
  struct event *e = ev;
  return e != NULL && e->magic == EVENT_MAGIC ? e : NULL;
}

int cuEventCreate(void **ev, unsigned int flags) {
  (void)flags;
  count_call(CALL_CREATE);
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  if (ev == NULL)
    return INVALID_VALUE;
  struct event *e = calloc(1, sizeof *e);
  if (e == NULL)
    return OUT_OF_MEMORY;
  e->magic = EVENT_MAGIC;
  pthread_mutex_lock(&lock);
  events_live++;
  pthread_mutex_unlock(&lock);
  *ev = e;
  return OK;
}
int cuEventDestroy(void *ev) {
  count_call(CALL_DESTROY);
  pthread_mutex_lock(&lock);
  struct event *e = as_event(ev);
  /* The real driver crashed in cuEventSynchronize on an event another
   * thread destroyed meanwhile (a call of address 0): here it is caught. */
  if (e != NULL && e->waiters > 0)
    fault("cuEventDestroy of an event another thread waits on in "
          "cuEventSynchronize");
  if (e != NULL) {
    e->magic = 0;
    events_live--;
  }
  pthread_mutex_unlock(&lock);
  if (e == NULL)
    return INVALID_HANDLE;
  free(e);
  return OK;
}
int fake_cuda_events_live(void) {
  pthread_mutex_lock(&lock);
  int n = events_live;
  pthread_mutex_unlock(&lock);
  return n;
}

/* The event stands for everything queued on stream so far. */
int cuEventRecord(void *ev, void *stream) {
  count_call(CALL_RECORD);
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  struct event *e = as_event(ev);
  if (e != NULL && e->waiters > 0)
    fault("cuEventRecord of an event another thread waits on in "
          "cuEventSynchronize");
  if (e != NULL) {
    e->stream = find_stream(stream);
    e->ticket = e->stream->issued;
  }
  pthread_mutex_unlock(&lock);
  return e != NULL ? OK : INVALID_HANDLE;
}

/* An event never recorded is complete, as in the driver. */
int cuEventQuery(void *ev) {
  count_call(CALL_QUERY);
  pthread_mutex_lock(&lock);
  struct event *e = as_event(ev);
  int rc = e == NULL ? INVALID_HANDLE : OK;
  if (e != NULL && e->stream != NULL) {
    need(e->stream, e->ticket);
    rc = e->stream->done >= e->ticket ? OK : NOT_READY;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int cuEventSynchronize(void *ev) {
  count_call(CALL_SYNC);
  pthread_mutex_lock(&lock);
  struct event *e = as_event(ev);
  if (e != NULL && e->stream != NULL) {
    e->waiters++;
    wait_done(e->stream, e->ticket);
    e->waiters--;
  }
  pthread_mutex_unlock(&lock);
  return e != NULL ? OK : INVALID_HANDLE;
}

/* Later items on stream wait for the event as recorded now. */
int cuStreamWaitEvent(void *stream, void *ev, unsigned int flags) {
  count_call(CALL_WAIT);
  if (ctx_depth == 0)
    return INVALID_CONTEXT;
  if (flags != 0)
    return INVALID_VALUE;
  struct item *it = malloc(sizeof *it);
  if (it == NULL)
    return OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  struct event *e = as_event(ev);
  int rc = e != NULL ? OK : INVALID_HANDLE;
  if (e != NULL && e->stream != NULL) {
    it->kind = ITEM_WAIT;
    it->u.wait.stream = e->stream;
    it->u.wait.ticket = e->ticket;
    enqueue_item(stream, it);
    it = NULL;
  }
  pthread_mutex_unlock(&lock);
  free(it);
  return rc;
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
  case OUT_OF_MEMORY: *text = "out of memory"; return OK;
  case INVALID_DEVICE: *text = "invalid device ordinal"; return OK;
  case INVALID_IMAGE: *text = "device kernel image is invalid"; return OK;
  case INVALID_CONTEXT: *text = "invalid device context"; return OK;
  case INVALID_HANDLE: *text = "invalid resource handle"; return OK;
  case NOT_FOUND: *text = "named symbol not found"; return OK;
  case NOT_READY: *text = "device not ready"; return OK;
  default: *text = NULL; return INVALID_VALUE;
  }
}

/* As the driver's: host memory it does not know is no error, every
 * attribute is left 0 (MEMORY_TYPE 0, IS_MANAGED 0). */
int cuPointerGetAttributes(unsigned int count, int *attributes, void **data,
                           uintptr_t ptr) {
  count_call(CALL_ATTRIBUTES);
  if (attributes == NULL || data == NULL)
    return INVALID_VALUE;
  pthread_mutex_lock(&lock);
  int device = is_device(ptr);
  pthread_mutex_unlock(&lock);
  int known = device || (ptr >= range_base && ptr < range_base + range_bytes);
  int managed = !device && known && range_managed;
  for (unsigned int i = 0; i < count; i++) {
    if (attributes[i] == 2) /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
      *(unsigned int *)data[i] = known ? 2u : 0u; /* CU_MEMORYTYPE_DEVICE */
    else if (attributes[i] == 8) /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
      *(unsigned int *)data[i] = (unsigned int)managed;
    else
      return INVALID_VALUE;
  }
  return OK;
}
