/* fake_libcuda.c - a stand-in for the CUDA driver (built as libcuda.so.1 in
 * its own directory) for unit.device: cuPointerGetAttribute calls one host
 * range "device memory", optionally managed, and every other address
 * unknown (CUDA_ERROR_INVALID_VALUE), as the driver does for host memory it
 * did not allocate. Attribute numbers from cuda.h. */
#include <stddef.h>
#include <stdint.h>

static uintptr_t device_base;
static size_t device_bytes;
static int device_managed;

void fake_cuda_set_device_range(void *base, size_t bytes, int managed) {
  device_base = (uintptr_t)base;
  device_bytes = bytes;
  device_managed = managed;
}

int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr) {
  if (ptr < device_base || ptr >= device_base + device_bytes)
    return 1; /* CUDA_ERROR_INVALID_VALUE */
  if (attribute == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
    *(unsigned int *)data = 2; /* CU_MEMORYTYPE_DEVICE */
    return 0;
  }
  if (attribute == 8) { /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
    *(unsigned int *)data = (unsigned int)device_managed;
    return 0;
  }
  return 1;
}
