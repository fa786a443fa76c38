/* test_device.c - device binding (config.device, XCOLL_DEVICE,
 * xcoll_comm_device), the rejection of CUDA device buffers on host ranks
 * (core/device.c) and of premul sums on GPU ranks (core/premul.c), with a
 * stand-in CUDA driver (fake_libcuda.c) that calls one host range device
 * memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "xcoll.h"

#ifndef FAKE_LIBCUDA_PATH
#error "FAKE_LIBCUDA_PATH must name the stand-in libcuda.so.1"
#endif

enum { COUNT = 64 };
static float device_memory[COUNT]; /* what the stand-in calls device memory */

static xcoll_comm_t world_of_one(void) {
  xcoll_config config;
  xcoll_config_init(&config);
  config.master_port = 0;
  config.backend = "tcp";
  xcoll_comm_t comm = NULL;
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_SUCCESS);
  return comm;
}

static void test_config_device(void **state) {
  (void)state;
  xcoll_config config;
  xcoll_config_init(&config);
  assert_int_equal(config.device, XCOLL_DEVICE_HOST);
  config.master_port = 0;
  xcoll_comm_t comm = (xcoll_comm_t)0x1;
  config.device = 0;
  /* tcp stages device buffers and nccl_like runs its CUDA kernels, given a
   * driver; without one (main skips where there is one) both say so */
  const char *backends[] = {"tcp", "nccl_like"};
  for (int b = 0; b < 2; b++) {
    config.backend = backends[b];
    comm = (xcoll_comm_t)0x1;
    assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_NOT_SUPPORTED);
    assert_null(comm);
    assert_non_null(strstr(xcoll_last_error(), "CUDA device 0"));
    assert_non_null(strstr(xcoll_last_error(), "libcuda.so.1"));
    assert_non_null(strstr(xcoll_last_error(), "XCOLL_DEVICE=host"));
  }
  config.backend = NULL;
  config.device = -2;
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "XCOLL_DEVICE_HOST"));

  comm = world_of_one();
  int device = 7;
  assert_int_equal(xcoll_comm_device(comm, &device), XCOLL_SUCCESS);
  assert_int_equal(device, XCOLL_DEVICE_HOST);
  assert_int_equal(xcoll_comm_device(comm, NULL), XCOLL_ERR_INVALID_ARGUMENT);
  xcoll_comm_t half = NULL;
  assert_int_equal(xcoll_comm_split(comm, 0, 0, &half), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_device(half, &device), XCOLL_SUCCESS);
  assert_int_equal(device, XCOLL_DEVICE_HOST);
  assert_int_equal(xcoll_comm_destroy(half), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_device(NULL, &device), XCOLL_ERR_INVALID_USAGE);
}

static void test_env_device(void **state) {
  (void)state;
  struct {
    const char *value;
    xcoll_status status;
    int device;           /* from xcoll_device_from_env, local rank 3 */
    const char *message;  /* in the error of xcoll_comm_init_env */
  } cases[] = {
      {"host", XCOLL_SUCCESS, XCOLL_DEVICE_HOST, NULL},
      {"", XCOLL_SUCCESS, XCOLL_DEVICE_HOST, NULL},
      {"cuda", XCOLL_ERR_NOT_SUPPORTED, 3, "CUDA device 0"},
      {"cuda:2", XCOLL_ERR_NOT_SUPPORTED, 2, "CUDA device 2"},
      {"5", XCOLL_ERR_NOT_SUPPORTED, 5, "CUDA device 5"},
      {"cuda:x", XCOLL_ERR_ENV, XCOLL_DEVICE_HOST, "XCOLL_DEVICE='cuda:x'"},
      {"gpu", XCOLL_ERR_ENV, XCOLL_DEVICE_HOST, "'host', 'cuda'"},
      {"-1", XCOLL_ERR_ENV, XCOLL_DEVICE_HOST, "XCOLL_DEVICE='-1'"},
      {"99999", XCOLL_ERR_ENV, XCOLL_DEVICE_HOST, "0 to 1024"},
  };
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_RANK");
  /* no driver is loaded here: every CUDA device is refused, naming it */
  setenv("XCOLL_BACKEND", "nccl_like", 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("XCOLL_DEVICE", cases[i].value, 1);
    int device = 12345;
    xcoll_status parsed = xcoll_device_from_env(3, &device);
    assert_int_equal(parsed == XCOLL_ERR_ENV, cases[i].status == XCOLL_ERR_ENV);
    if (parsed == XCOLL_SUCCESS)
      assert_int_equal(device, cases[i].device);
    /* the whole path: a world of one from the (empty) launcher environment,
     * where "cuda" means LOCAL_RANK unknown -> device 0 */
    xcoll_comm_t comm = NULL;
    xcoll_status status = xcoll_comm_init_env(&comm);
    if (status != cases[i].status)
      fail_msg("XCOLL_DEVICE='%s': status %d, expected %d (%s)", cases[i].value,
               (int)status, (int)cases[i].status, xcoll_last_error());
    if (status == XCOLL_SUCCESS) {
      int bound = 0;
      assert_int_equal(xcoll_comm_device(comm, &bound), XCOLL_SUCCESS);
      assert_int_equal(bound, XCOLL_DEVICE_HOST);
      assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
    } else {
      assert_null(comm);
      if (!strstr(xcoll_last_error(), cases[i].message))
        fail_msg("XCOLL_DEVICE='%s': message '%s' lacks '%s'", cases[i].value,
                 xcoll_last_error(), cases[i].message);
    }
  }
  unsetenv("XCOLL_DEVICE");
  unsetenv("XCOLL_BACKEND");
}

static void test_device_buffers_rejected(void **state) {
  (void)state;
  float host_in[COUNT], host_out[COUNT];
  for (int i = 0; i < COUNT; i++)
    host_in[i] = (float)i;
  /* no driver loaded: nothing can be device memory */
  assert_int_equal(xcoll_device_pointer(device_memory), 0);

  void *driver = dlopen(FAKE_LIBCUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
  if (driver == NULL)
    fail_msg("dlopen %s: %s", FAKE_LIBCUDA_PATH, dlerror());
  void (*set_range)(void *, size_t, int) = (void (*)(void *, size_t, int))(
      uintptr_t)dlsym(driver, "fake_cuda_set_device_range");
  assert_non_null(set_range);
  set_range(device_memory, sizeof device_memory, 0);
  /* A real driver has made no device memory within a tick of the coarse
   * clock of its load (core/device.h); the stand-in has at once. */
  xcoll_device_recheck();
  assert_int_equal(xcoll_device_pointer(device_memory), 1);
  assert_int_equal(xcoll_device_pointer(device_memory + COUNT - 1), 1);
  assert_int_equal(xcoll_device_pointer(device_memory + COUNT), 0);
  assert_int_equal(xcoll_device_pointer(host_in), 0);
  assert_int_equal(xcoll_device_pointer(NULL), 0);

  xcoll_comm_t comm = world_of_one();
  assert_int_equal(xcoll_allreduce(device_memory, host_out, COUNT,
                                   XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  const char *message = xcoll_comm_last_error(comm);
  assert_non_null(strstr(message, "sendbuf"));
  assert_non_null(strstr(message, "CUDA device memory"));
  assert_non_null(strstr(message, "tcp"));
  xcoll_request_t request = NULL;
  assert_int_equal(xcoll_iallgather(host_in, device_memory, COUNT, XCOLL_FLOAT32,
                                    comm, NULL, &request),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_null(request);
  assert_non_null(strstr(xcoll_comm_last_error(comm), "recvbuf"));
  assert_int_equal(xcoll_broadcast(device_memory, device_memory, COUNT,
                                   XCOLL_FLOAT32, 0, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  /* A premul sum's scalar: host residence wants host memory; a host rank
   * has no device to read a device-resident one from. */
  xcoll_op op = XCOLL_SUM;
  assert_int_equal(xcoll_op_create_premul_sum(&op, device_memory, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_comm_last_error(comm), "CUDA device memory"));
  assert_int_equal(xcoll_op_create_premul_sum(&op, device_memory, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_DEVICE, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_comm_last_error(comm), "bound to the host"));
  /* nothing was sent, the communicator still works on host memory */
  assert_int_equal(xcoll_allreduce(host_in, host_out, COUNT, XCOLL_FLOAT32,
                                   XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(host_in, host_out, sizeof host_in);

  /* managed memory is host-readable: accepted */
  set_range(device_memory, sizeof device_memory, 1);
  assert_int_equal(xcoll_device_pointer(device_memory), 0);
  assert_int_equal(xcoll_allreduce(host_in, device_memory, COUNT, XCOLL_FLOAT32,
                                   XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(host_in, device_memory, sizeof host_in);
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
}

/* With the stand-in driver loaded (the test before this one loads it): a
 * communicator bound to a CUDA device on tcp stages device buffers; a
 * device the driver does not have is refused. The multi-process cases are
 * conformance.staging.*. */
static void test_device_comm_stages(void **state) {
  (void)state;
  void *driver = dlopen(FAKE_LIBCUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
  assert_non_null(driver);
  int (*mem_alloc)(uintptr_t *, size_t) =
      (int (*)(uintptr_t *, size_t))(uintptr_t)dlsym(driver, "cuMemAlloc");
  int (*htod)(uintptr_t, const void *, size_t) =
      (int (*)(uintptr_t, const void *, size_t))(uintptr_t)dlsym(driver, "cuMemcpyHtoD");
  int (*dtoh)(void *, uintptr_t, size_t) =
      (int (*)(void *, uintptr_t, size_t))(uintptr_t)dlsym(driver, "cuMemcpyDtoH");
  int (*mem_free)(uintptr_t) = (int (*)(uintptr_t))(uintptr_t)dlsym(driver, "cuMemFree");
  int (*pinned)(void) = (int (*)(void))(uintptr_t)dlsym(driver, "fake_cuda_pinned_outstanding");
  assert_non_null(mem_alloc);
  assert_non_null(pinned);

  xcoll_config config;
  xcoll_config_init(&config);
  config.master_port = 0;
  config.backend = "tcp";
  config.device = 3; /* the stand-in has one device unless told otherwise */
  xcoll_comm_t comm = NULL;
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "CUDA device 3 does not exist"));
  config.device = 0;
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_SUCCESS);
  int device = -5;
  assert_int_equal(xcoll_comm_device(comm, &device), XCOLL_SUCCESS);
  assert_int_equal(device, 0);

  float in[COUNT], out[COUNT];
  for (int i = 0; i < COUNT; i++)
    in[i] = (float)(3 * i);
  uintptr_t d_in = 0, d_out = 0;
  assert_int_equal(mem_alloc(&d_in, sizeof in), 0);
  assert_int_equal(mem_alloc(&d_out, sizeof out), 0);
  assert_int_equal(htod(d_in, in, sizeof in), 0);
  assert_int_equal(xcoll_allreduce((void *)d_in, (void *)d_out, COUNT,
                                   XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  memset(out, 0, sizeof out);
  assert_int_equal(dtoh(out, d_out, sizeof out), 0);
  assert_memory_equal(in, out, sizeof in);

  /* Premul sums on a GPU rank: the ops can be made (either residence),
   * the collectives say they are not built yet, and nothing was sent. */
  float two = 2.0f;
  xcoll_op host_op = XCOLL_SUM, device_op = XCOLL_SUM;
  assert_int_equal(xcoll_op_create_premul_sum(&host_op, &two, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_op_create_premul_sum(&device_op, (void *)d_in,
                                              XCOLL_FLOAT32,
                                              XCOLL_SCALAR_DEVICE, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_allreduce((void *)d_in, (void *)d_out, COUNT,
                                   XCOLL_FLOAT32, host_op, comm),
                   XCOLL_ERR_NOT_SUPPORTED);
  assert_non_null(strstr(xcoll_comm_last_error(comm),
                         "premul sum on a GPU rank: not built yet"));
  assert_int_equal(xcoll_allreduce((void *)d_in, (void *)d_out, COUNT,
                                   XCOLL_FLOAT32, device_op, comm),
                   XCOLL_ERR_NOT_SUPPORTED);
  assert_int_equal(xcoll_op_destroy(host_op, comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_op_destroy(device_op, comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_allreduce((void *)d_in, (void *)d_out, COUNT,
                                   XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
  assert_int_equal(pinned(), 0);
  mem_free(d_in);
  mem_free(d_out);
}

int main(void) {
  /* These cases need a machine without a CUDA driver, where the stand-in
   * takes the driver's place: with a real libcuda.so.1 the library loads
   * that one (its devices exist, nothing is refused) and the stand-in's
   * device memory, which the real driver does not know, is read as host
   * memory. The gpu.* tests cover a real driver. */
  void *real_driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (real_driver != NULL) {
    printf("skipped: a CUDA driver (libcuda.so.1) is installed; unit.device "
           "needs a machine without one, where the stand-in driver stands "
           "in for it (ctest -L gpu tests the real driver)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_device),
      cmocka_unit_test(test_env_device),
      /* last: it loads the stand-in driver for the rest of the process */
      cmocka_unit_test(test_device_buffers_rejected),
      cmocka_unit_test(test_device_comm_stages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
