/* fake_cuda_kernel.c - ctest unit.fake_cuda_kernel: the stand-in CUDA driver
 * (fake_libcuda.c) running the ring kernels of kernels/cuda/ring_kernel.cu
 * on its own, so that the CUDA engine of nccl_like can rely on it.
 *
 * Two "ranks" in one process: each launches xc_allreduce_kernel with two
 * channels on a stream of its own; their connection FIFOs, status words and
 * abort flag live in pinned mapped memory (cuMemHostAlloc with DEVICEMAP),
 * and a proxy thread here moves filled slots from one rank's send FIFO to
 * the other's recv FIFO as kernels/conn.h asks a proxy to. The proxy starts
 * moving only when the test opens its gate, so a kernel cannot finish
 * before that, and the events and stream queries are checked NOT_READY
 * without any sleep; before any query, the test waits for each kernel's
 * first send to land in its FIFO, which it does only if the kernel runs
 * without the host synchronising. Also: stream order (an asynchronous input
 * copy on the kernel's stream, another on a third stream awaited through an
 * event), lazy copies, the gather allreduce with per-block scratch, a wrong
 * kind, sticky status, launch, device pointer and module refusals, and the leak
 * counters. Every wait is bounded by the ctest TIMEOUT. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

/* The stand-in's exports (cuda.h numbering; handles as void *). */
int cuInit(unsigned int flags);
int cuDevicePrimaryCtxRetain(void **ctx, int device);
int cuDevicePrimaryCtxRelease(int device);
int cuCtxPushCurrent(void *ctx);
int cuCtxPopCurrent(void **ctx);
int cuMemAlloc(uintptr_t *dptr, size_t bytes);
int cuMemFree(uintptr_t dptr);
int cuMemHostAlloc(void **p, size_t bytes, unsigned int flags);
int cuMemFreeHost(void *p);
int cuMemHostGetDevicePointer(unsigned long long *dptr, void *p,
                              unsigned int flags);
int cuMemcpyHtoD(uintptr_t dst, const void *src, size_t bytes);
int cuMemcpyDtoH(void *dst, uintptr_t src, size_t bytes);
int cuMemcpyHtoDAsync(uintptr_t dst, const void *src, size_t bytes,
                      void *stream);
int cuMemcpyDtoHAsync(void *dst, uintptr_t src, size_t bytes, void *stream);
int cuStreamCreate(void **stream, unsigned int flags);
int cuStreamDestroy(void *stream);
int cuStreamSynchronize(void *stream);
int cuStreamQuery(void *stream);
int cuStreamWaitEvent(void *stream, void *ev, unsigned int flags);
int cuCtxSynchronize(void);
int cuEventCreate(void **ev, unsigned int flags);
int cuEventDestroy(void *ev);
int cuEventRecord(void *ev, void *stream);
int cuEventQuery(void *ev);
int cuEventSynchronize(void *ev);
int cuModuleLoadData(void **module, const void *image);
int cuModuleUnload(void *module);
int cuModuleGetFunction(void **fn, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                   unsigned int bx, unsigned int by, unsigned int bz,
                   unsigned int shared_bytes, void *stream, void **params,
                   void **extra);
int fake_cuda_modules_loaded(void);
int fake_cuda_events_live(void);
int fake_cuda_pending_copies(void);
int fake_cuda_pinned_outstanding(void);

enum {
  CU_OK = 0,
  CU_INVALID_VALUE = 1,
  CU_INVALID_IMAGE = 200,
  CU_INVALID_CONTEXT = 201,
  CU_INVALID_HANDLE = 400,
  CU_NOT_FOUND = 500,
  CU_NOT_READY = 600,
  HOSTALLOC_PORTABLE = 1,
  HOSTALLOC_DEVICEMAP = 2,
  RANKS = 2,
  CHANNELS = 2,
  STEP_BYTES = 256 /* small slots: the FIFOs wrap many times */
};

/* A fatbin header's first bytes (magic 0xBA55ED50, little endian): all the
 * stand-in reads of an image. */
static const unsigned char fatbin_image[16] = {0x50, 0xED, 0x55, 0xBA, 1, 0};

/* ---- mapped FIFOs and the proxy ---- */

typedef struct fifo {
  _Alignas(16) uint8_t buff[XCOLL_STEPS * STEP_BYTES];
  xc_atomic_u64 head, tail;
  int64_t sizes[XCOLL_STEPS];
} fifo;

/* Everything a kernel follows, in one pinned mapped block. */
typedef struct mapped {
  fifo send_fifo[RANKS][CHANNELS]; /* rank r -> rank r + 1 */
  fifo recv_fifo[RANKS][CHANNELS]; /* rank r <- rank r - 1 */
  xc_conn sends[RANKS][CHANNELS];
  xc_conn recvs[RANKS][CHANNELS];
  int status[RANKS][CHANNELS];
  xc_abort abort;
} mapped;

typedef struct ring {
  mapped *m;
  uint64_t moved[RANKS][CHANNELS]; /* proxy-private step counts */
  pthread_mutex_t gate_lock;
  pthread_cond_t gate_cond;
  int gate_open; /* under gate_lock */
  _Atomic int stop;
  pthread_t proxy;
} ring;

static void fifo_conn(fifo *f, xc_conn *conn) {
  memset(f->buff, 0, sizeof f->buff);
  atomic_init(&f->head, 0);
  atomic_init(&f->tail, 0);
  for (int s = 0; s < XCOLL_STEPS; s++)
    f->sizes[s] = -1;
  memset(conn, 0, sizeof *conn); /* direct_from NULL: the slot path */
  conn->buff = f->buff;
  conn->step_bytes = STEP_BYTES;
  conn->head = &f->head;
  conn->tail = &f->tail;
  conn->sizes = f->sizes;
}

/* Moves what it can from rank r's send FIFO of channel c to the next rank's
 * recv FIFO: the recv tail only after the bytes, the send head after. */
static int move(ring *g, int r, int c) {
  fifo *src = &g->m->send_fifo[r][c];
  fifo *dst = &g->m->recv_fifo[(r + 1) % RANKS][c];
  uint64_t filled = atomic_load_explicit(&src->tail, memory_order_acquire);
  int moved = 0;
  while (g->moved[r][c] < filled) {
    uint64_t step = g->moved[r][c];
    if (atomic_load_explicit(&dst->head, memory_order_acquire) + XCOLL_STEPS <=
        step)
      break;
    size_t slot = step % XCOLL_STEPS;
    int64_t bytes = src->sizes[slot];
    if (bytes < 0 || bytes > STEP_BYTES)
      fail_msg("rank %d channel %d step %llu: sizes = %lld", r, c,
               (unsigned long long)step, (long long)bytes);
    memcpy(dst->buff + slot * STEP_BYTES, src->buff + slot * STEP_BYTES,
           (size_t)bytes);
    dst->sizes[slot] = bytes;
    atomic_store_explicit(&dst->tail, step + 1, memory_order_release);
    src->sizes[slot] = -1;
    atomic_store_explicit(&src->head, step + 1, memory_order_release);
    g->moved[r][c] = step + 1;
    moved++;
  }
  return moved;
}

static void *proxy_main(void *arg) {
  ring *g = arg;
  pthread_mutex_lock(&g->gate_lock);
  while (!g->gate_open)
    pthread_cond_wait(&g->gate_cond, &g->gate_lock);
  pthread_mutex_unlock(&g->gate_lock);
  while (!atomic_load_explicit(&g->stop, memory_order_acquire)) {
    int moved = 0;
    for (int r = 0; r < RANKS; r++)
      for (int c = 0; c < CHANNELS; c++)
        moved += move(g, r, c);
    if (!moved)
      sched_yield();
  }
  return NULL;
}

static void ring_start(ring *g) {
  memset(g, 0, sizeof *g);
  void *p = NULL;
  assert_int_equal(cuMemHostAlloc(&p, sizeof(mapped), HOSTALLOC_DEVICEMAP),
                   CU_OK);
  unsigned long long device_address = 0;
  assert_int_equal(cuMemHostGetDevicePointer(&device_address, p, 0), CU_OK);
  assert_ptr_equal((void *)(uintptr_t)device_address, p); /* unified */
  g->m = p;
  for (int r = 0; r < RANKS; r++)
    for (int c = 0; c < CHANNELS; c++) {
      fifo_conn(&g->m->send_fifo[r][c], &g->m->sends[r][c]);
      fifo_conn(&g->m->recv_fifo[r][c], &g->m->recvs[r][c]);
      g->m->status[r][c] = 0;
    }
  atomic_init(&g->m->abort, 0);
  pthread_mutex_init(&g->gate_lock, NULL);
  pthread_cond_init(&g->gate_cond, NULL);
  atomic_init(&g->stop, 0);
  assert_int_equal(pthread_create(&g->proxy, NULL, proxy_main, g), 0);
}

static void ring_open_gate(ring *g) {
  pthread_mutex_lock(&g->gate_lock);
  g->gate_open = 1;
  pthread_cond_broadcast(&g->gate_cond);
  pthread_mutex_unlock(&g->gate_lock);
}

static void ring_stop(ring *g) {
  ring_open_gate(g);
  atomic_store(&g->stop, 1);
  pthread_join(g->proxy, NULL);
  pthread_mutex_destroy(&g->gate_lock);
  pthread_cond_destroy(&g->gate_cond);
  assert_int_equal(cuMemFreeHost(g->m), CU_OK);
}

/* ---- context and module ---- */

static void *context;

static int setup(void **state) {
  (void)state;
  assert_int_equal(cuInit(0), CU_OK);
  assert_int_equal(cuDevicePrimaryCtxRetain(&context, 0), CU_OK);
  assert_int_equal(cuCtxPushCurrent(context), CU_OK);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  assert_int_equal(cuCtxPopCurrent(NULL), CU_OK);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CU_OK);
  assert_int_equal(fake_cuda_modules_loaded(), 0);
  assert_int_equal(fake_cuda_events_live(), 0);
  assert_int_equal(fake_cuda_pending_copies(), 0);
  assert_int_equal(fake_cuda_pinned_outstanding(), 0);
  return 0;
}

static void *get_function(void *module, const char *name) {
  void *fn = NULL;
  assert_int_equal(cuModuleGetFunction(&fn, module, name), CU_OK);
  assert_non_null(fn);
  return fn;
}

static int launch(void *fn, unsigned int blocks, void *stream, xc_work *work,
                  xc_conn *sends, xc_conn *recvs, xc_abort *abort,
                  int *status) {
  void *params[5] = {work, &sends, &recvs, &abort, &status};
  return cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, stream, params, NULL);
}

static xc_work allreduce_work(const void *send, void *recv, size_t count,
                              int ring_index) {
  xc_work w;
  memset(&w, 0, sizeof w);
  w.kind = XC_COLL_ALLREDUCE;
  w.dtype = XCOLL_FLOAT32;
  w.op = XCOLL_SUM;
  w.sendbuf = send;
  w.recvbuf = recv;
  w.count = count;
  w.nranks = RANKS;
  w.ring_index = ring_index;
  w.channel = 7; /* overwritten per block by the launch */
  w.nchannels = 9;
  w.proto = XC_PROTO_SIMPLE;
  w.chunk_steps = 4;
  w.slice_steps = 2;
  return w;
}

/* Input of rank r: quarters below 256, so every float sum is exact and the
 * double reference must match bitwise. */
static float input(int r, size_t i) {
  return (float)((double)((i * 7 + (size_t)r * 131) % 1024) * 0.25 -
                 (r == 1 ? 64.0 : 0.0));
}

/* ---- the tests ---- */

/* The full path: inputs copied asynchronously (rank 0 on its kernel's
 * stream, rank 1 on a third stream it waits for through an event), both
 * ranks launched, events NOT_READY while the proxy is held, then released,
 * results against the reference, copied back asynchronously. */
static void run_allreduce(size_t count, int algo, int proto) {
  void *module = NULL;
  assert_int_equal(cuModuleLoadData(&module, fatbin_image), CU_OK);
  void *fn = get_function(module, "xc_allreduce_kernel");
  ring g;
  ring_start(&g);
  size_t bytes = count * sizeof(float);
  float *host_in[RANKS], *host_out[RANKS];
  uintptr_t send[RANKS], recv[RANKS], scratch[RANKS] = {0, 0};
  size_t scratch_bytes = 0;
  if (algo == XC_ALGO_GATHER) {
    /* Each block's share is at most ceil(count / CHANNELS) rounded to 16
     * bytes; RANKS of them per block. */
    size_t per = (count + CHANNELS * 4 - 1) / (CHANNELS * 4) * 4;
    scratch_bytes = RANKS * per * sizeof(float);
  }
  void *streams[RANKS], *side_stream;
  void *done[RANKS], *inputs_ready;
  for (int r = 0; r < RANKS; r++) {
    host_in[r] = malloc(bytes);
    host_out[r] = malloc(bytes);
    assert_non_null(host_in[r]);
    assert_non_null(host_out[r]);
    for (size_t i = 0; i < count; i++) {
      host_in[r][i] = input(r, i);
      host_out[r][i] = -1.0f;
    }
    assert_int_equal(cuMemAlloc(&send[r], bytes), CU_OK);
    assert_int_equal(cuMemAlloc(&recv[r], bytes), CU_OK);
    if (scratch_bytes > 0)
      assert_int_equal(cuMemAlloc(&scratch[r], CHANNELS * scratch_bytes),
                       CU_OK);
    assert_int_equal(cuStreamCreate(&streams[r], 0), CU_OK);
    assert_int_equal(cuEventCreate(&done[r], 0), CU_OK);
  }
  assert_int_equal(cuStreamCreate(&side_stream, 0), CU_OK);
  assert_int_equal(cuEventCreate(&inputs_ready, 0), CU_OK);

  assert_int_equal(cuMemcpyHtoDAsync(send[0], host_in[0], bytes, streams[0]),
                   CU_OK);
  assert_int_equal(cuMemcpyHtoDAsync(send[1], host_in[1], bytes, side_stream),
                   CU_OK);
  assert_int_equal(cuEventRecord(inputs_ready, side_stream), CU_OK);
  assert_int_equal(cuStreamWaitEvent(streams[1], inputs_ready, 0), CU_OK);

  for (int r = 0; r < RANKS; r++) {
    xc_work w =
        allreduce_work((const void *)send[r], (void *)recv[r], count, r);
    w.algo = algo;
    w.proto = proto;
    w.scratch = scratch_bytes > 0 ? (void *)scratch[r] : NULL;
    w.scratch_bytes = scratch_bytes;
    assert_int_equal(launch(fn, CHANNELS, streams[r], &w, g.m->sends[r],
                            g.m->recvs[r], &g.m->abort, g.m->status[r]),
                     CU_OK);
    assert_int_equal(cuEventRecord(done[r], streams[r]), CU_OK);
  }
  if (count > 0) {
    /* The kernels run without the host synchronising or querying (the other
     * ranks of a real ring depend on it), after the copies queued before
     * them: each one's first send lands in its FIFO on credits alone. */
    for (int r = 0; r < RANKS; r++)
      for (int c = 0; c < CHANNELS; c++)
        while (atomic_load_explicit(&g.m->send_fifo[r][c].tail,
                                    memory_order_acquire) == 0)
          sched_yield();
    /* A copy out of a buffer a running kernel reads: the input copied
     * before the launch is there, and the copy's end must not close the
     * kernel's window on that memory (it crashes on its next read if so). */
    float *probe = malloc(bytes);
    assert_non_null(probe);
    assert_int_equal(cuMemcpyDtoH(probe, send[0], bytes), CU_OK);
    assert_memory_equal(probe, host_in[0], bytes);
    free(probe);
    /* Neither kernel can finish before the proxy moves a slot. */
    for (int r = 0; r < RANKS; r++) {
      assert_int_equal(cuEventQuery(done[r]), CU_NOT_READY);
      assert_int_equal(cuStreamQuery(streams[r]), CU_NOT_READY);
    }
  }
  ring_open_gate(&g);
  for (int r = 0; r < RANKS; r++) {
    assert_int_equal(cuEventSynchronize(done[r]), CU_OK);
    assert_int_equal(cuEventQuery(done[r]), CU_OK);
    assert_int_equal(cuMemcpyDtoHAsync(host_out[r], recv[r], bytes, streams[r]),
                     CU_OK);
  }
  assert_int_equal(cuCtxSynchronize(), CU_OK);
  for (int r = 0; r < RANKS; r++) {
    assert_int_equal(cuStreamQuery(streams[r]), CU_OK);
    for (int c = 0; c < CHANNELS; c++)
      assert_int_equal(g.m->status[r][c], 0);
    for (size_t i = 0; i < count; i++) {
      double expected = (double)input(0, i) + (double)input(1, i);
      if ((double)host_out[r][i] != expected)
        fail_msg("count %zu algo %d proto %d rank %d element %zu: %g, "
                 "expected %g",
                 count, algo, proto, r, i, (double)host_out[r][i], expected);
    }
  }
  ring_stop(&g);
  for (int r = 0; r < RANKS; r++) {
    assert_int_equal(cuMemFree(send[r]), CU_OK);
    assert_int_equal(cuMemFree(recv[r]), CU_OK);
    if (scratch[r] != 0)
      assert_int_equal(cuMemFree(scratch[r]), CU_OK);
    assert_int_equal(cuStreamDestroy(streams[r]), CU_OK);
    assert_int_equal(cuEventDestroy(done[r]), CU_OK);
    free(host_in[r]);
    free(host_out[r]);
  }
  assert_int_equal(cuStreamDestroy(side_stream), CU_OK);
  assert_int_equal(cuEventDestroy(inputs_ready), CU_OK);
  assert_int_equal(cuModuleUnload(module), CU_OK);
}

static void test_allreduce_two_ranks(void **state) {
  (void)state;
  run_allreduce(10007, XC_ALGO_RING, XC_PROTO_SIMPLE);
  run_allreduce(1021, XC_ALGO_RING, XC_PROTO_LL);
}

static void test_allreduce_gather_scratch(void **state) {
  (void)state;
  run_allreduce(300, XC_ALGO_GATHER, XC_PROTO_SIMPLE);
}

/* A one-rank launch (no FIFO): a kernel of another family than work.kind
 * sets status[c] on every block; a success leaves status as it was. */
static void test_kind_and_sticky_status(void **state) {
  (void)state;
  void *module = NULL;
  assert_int_equal(cuModuleLoadData(&module, fatbin_image), CU_OK);
  void *broadcast = get_function(module, "xc_broadcast_kernel");
  void *allreduce = get_function(module, "xc_allreduce_kernel");
  int *status = NULL;
  assert_int_equal(cuMemHostAlloc((void **)&status, 3 * sizeof(int),
                                  HOSTALLOC_DEVICEMAP | HOSTALLOC_PORTABLE),
                   CU_OK);
  enum { COUNT = 100 };
  float host[COUNT], back[COUNT];
  for (int i = 0; i < COUNT; i++)
    host[i] = (float)i;
  uintptr_t buf = 0;
  assert_int_equal(cuMemAlloc(&buf, sizeof host), CU_OK);
  assert_int_equal(cuMemcpyHtoD(buf, host, sizeof host), CU_OK);
  xc_work w = allreduce_work((void *)buf, (void *)buf, COUNT, 0);
  w.nranks = 1;

  status[0] = status[1] = 0;
  status[2] = 42; /* past the grid: never touched */
  assert_int_equal(launch(broadcast, 2, NULL, &w, NULL, NULL, NULL, status),
                   CU_OK);
  assert_int_equal(cuStreamSynchronize(NULL), CU_OK);
  assert_int_equal(status[0], XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(status[1], XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(status[2], 42);

  status[0] = 77;
  status[1] = 0;
  assert_int_equal(launch(allreduce, 2, NULL, &w, NULL, NULL, NULL, status),
                   CU_OK);
  assert_int_equal(cuStreamSynchronize(NULL), CU_OK);
  assert_int_equal(status[0], 77);
  assert_int_equal(status[1], 0);
  assert_int_equal(cuMemcpyDtoH(back, buf, sizeof back), CU_OK);
  assert_memory_equal(back, host, sizeof host); /* one rank: unchanged */

  assert_int_equal(cuMemFree(buf), CU_OK);
  assert_int_equal(cuMemFreeHost(status), CU_OK);
  assert_int_equal(cuModuleUnload(module), CU_OK);
}

static void test_launch_refusals(void **state) {
  (void)state;
  void *module = NULL;
  assert_int_equal(cuModuleLoadData(&module, fatbin_image), CU_OK);
  void *fn = get_function(module, "xc_reduce_kernel");
  int *status = NULL;
  assert_int_equal(
      cuMemHostAlloc((void **)&status, sizeof(int), HOSTALLOC_DEVICEMAP),
      CU_OK);
  xc_work w = allreduce_work(NULL, NULL, 0, 0);
  xc_conn *none = NULL;
  xc_abort *no_abort = NULL;
  void *params[5] = {&w, &none, &none, &no_abort, &status};
  void *extra[1] = {NULL};
  assert_int_equal(cuLaunchKernel(fn, 0, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                   CU_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(fn, 1, 2, 1, 1, 1, 1, 0, NULL, params, NULL),
                   CU_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(fn, 1, 1, 2, 1, 1, 1, 0, NULL, params, NULL),
                   CU_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(fn, 1, 1, 1, 1, 2, 1, 0, NULL, params, NULL),
                   CU_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 2, 0, NULL, params, NULL),
                   CU_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, extra),
                   CU_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                   CU_INVALID_VALUE);
  assert_int_equal(
      cuLaunchKernel(module, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
      CU_INVALID_HANDLE);
  void *popped = NULL;
  assert_int_equal(cuCtxPopCurrent(&popped), CU_OK);
  assert_int_equal(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                   CU_INVALID_CONTEXT);
  assert_int_equal(cuCtxPushCurrent(context), CU_OK);
  assert_int_equal(cuMemFreeHost(status), CU_OK);
  assert_int_equal(cuModuleUnload(module), CU_OK);
}

static void test_device_pointer_refusals(void **state) {
  (void)state;
  unsigned long long address = 0;
  void *mapped_block = NULL, *pinned_only = NULL;
  assert_int_equal(cuMemHostAlloc(&mapped_block, 4096, HOSTALLOC_DEVICEMAP),
                   CU_OK);
  assert_int_equal(cuMemHostAlloc(&pinned_only, 4096, HOSTALLOC_PORTABLE),
                   CU_OK);
  assert_int_equal((uintptr_t)mapped_block % 16, 0);
  /* not zeroed, as real pinned memory is not */
  assert_int_equal(((unsigned char *)mapped_block)[0], 0xA5);
  char *inside = (char *)mapped_block + 100;
  assert_int_equal(cuMemHostGetDevicePointer(&address, inside, 0), CU_OK);
  assert_ptr_equal((void *)(uintptr_t)address, inside);
  assert_int_equal(cuMemHostGetDevicePointer(&address, mapped_block, 1),
                   CU_INVALID_VALUE);
  assert_int_equal(cuMemHostGetDevicePointer(&address, pinned_only, 0),
                   CU_INVALID_VALUE);
  void *plain = malloc(64);
  assert_non_null(plain);
  assert_int_equal(cuMemHostGetDevicePointer(&address, plain, 0),
                   CU_INVALID_VALUE);
  free(plain);
  assert_int_equal(
      cuMemHostGetDevicePointer(&address, (char *)mapped_block + 4096, 0),
      CU_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost(mapped_block), CU_OK);
  assert_int_equal(cuMemHostGetDevicePointer(&address, mapped_block, 0),
                   CU_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost(pinned_only), CU_OK);
  assert_int_equal(cuMemHostAlloc(&mapped_block, 64, 8), CU_INVALID_VALUE);
}

static void test_module_refusals(void **state) {
  (void)state;
  void *module = NULL, *fn = NULL;
  assert_int_equal(cuModuleLoadData(&module, "garbage"), CU_INVALID_IMAGE);
  assert_int_equal(fake_cuda_modules_loaded(), 0);
  void *ptx = NULL, *elf = NULL;
  assert_int_equal(cuModuleLoadData(&ptx, "//\n.version 8.0\n"), CU_OK);
  assert_int_equal(cuModuleLoadData(&elf, "\x7f"
                                          "ELF\x02\x01"),
                   CU_OK);
  assert_int_equal(fake_cuda_modules_loaded(), 2);
  static const char *const names[] = {
      "xc_allreduce_kernel", "xc_reduce_scatter_kernel", "xc_allgather_kernel",
      "xc_broadcast_kernel", "xc_reduce_kernel"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    (void)get_function(ptx, names[i]);
  assert_int_equal(cuModuleGetFunction(&fn, ptx, "xc_allreduce"), CU_NOT_FOUND);
  assert_int_equal(cuModuleGetFunction(&fn, ptx, "main"), CU_NOT_FOUND);
  assert_int_equal(cuModuleUnload(ptx), CU_OK);
  assert_int_equal(cuModuleUnload(elf), CU_OK);
  assert_int_equal(fake_cuda_modules_loaded(), 0);
  void *popped = NULL;
  assert_int_equal(cuCtxPopCurrent(&popped), CU_OK);
  assert_int_equal(cuModuleLoadData(&module, fatbin_image), CU_INVALID_CONTEXT);
  assert_int_equal(cuCtxPushCurrent(context), CU_OK);
}

/* Copies stay lazy until needed; an event recorded after one stands for it
 * and completes once waited for; an event never recorded is complete. */
static void test_lazy_copies_and_events(void **state) {
  (void)state;
  enum { COUNT = 32 };
  int host[COUNT], back[COUNT];
  for (int i = 0; i < COUNT; i++)
    host[i] = i * 3;
  uintptr_t buf = 0;
  assert_int_equal(cuMemAlloc(&buf, sizeof host), CU_OK);
  void *stream = NULL, *ev = NULL, *never = NULL;
  assert_int_equal(cuStreamCreate(&stream, 0), CU_OK);
  assert_int_equal(cuEventCreate(&ev, 0), CU_OK);
  assert_int_equal(cuEventCreate(&never, 0), CU_OK);
  assert_int_equal(fake_cuda_events_live(), 2);
  assert_int_equal(cuEventQuery(never), CU_OK);
  assert_int_equal(cuMemcpyHtoDAsync(buf, host, sizeof host, stream), CU_OK);
  assert_int_equal(fake_cuda_pending_copies(), 1);
  assert_int_equal(cuEventRecord(ev, stream), CU_OK);
  assert_int_equal(fake_cuda_pending_copies(), 1); /* recording needs none */
  assert_int_equal(cuEventSynchronize(ev), CU_OK);
  assert_int_equal(fake_cuda_pending_copies(), 0);
  memset(back, 0, sizeof back);
  assert_int_equal(cuMemcpyDtoHAsync(back, buf, sizeof back, stream), CU_OK);
  assert_int_equal(back[1], 0); /* not run before the stream is synchronised */
  assert_int_equal(cuStreamSynchronize(stream), CU_OK);
  assert_memory_equal(back, host, sizeof host);
  assert_int_equal(cuEventDestroy(ev), CU_OK);
  assert_int_equal(cuEventDestroy(never), CU_OK);
  assert_int_equal(cuStreamDestroy(stream), CU_OK);
  assert_int_equal(cuMemFree(buf), CU_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_allreduce_two_ranks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_allreduce_gather_scratch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_kind_and_sticky_status, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_launch_refusals, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_pointer_refusals, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_module_refusals, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lazy_copies_and_events, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
