/* ib_probe.c - does this machine have an RDMA device? Loads the real
 * libibverbs (or the library named by its argument) the way the plugin
 * does, with dlopen, and counts ibv_get_device_list's devices.
 * Exit status: 0 one or more devices (their names on stdout), 77 none or
 * no library (the reason on stdout; ctest's SKIP_RETURN_CODE). */
#include <dlfcn.h>
#include <stdio.h>

struct ibv_device;

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "libibverbs.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("SKIPPED: no RDMA device: cannot load %s: %s\n", path, dlerror());
    return 77;
  }
  struct ibv_device **(*get_list)(int *);
  void (*free_list)(struct ibv_device **);
  const char *(*get_name)(struct ibv_device *);
  *(void **)&get_list = dlsym(lib, "ibv_get_device_list");
  *(void **)&free_list = dlsym(lib, "ibv_free_device_list");
  *(void **)&get_name = dlsym(lib, "ibv_get_device_name");
  if (!get_list || !free_list || !get_name) {
    printf("SKIPPED: %s lacks the verbs entry points\n", path);
    return 77;
  }
  int count = 0;
  struct ibv_device **list = get_list(&count);
  if (list == NULL || count <= 0) {
    printf("SKIPPED: no RDMA device: ibv_get_device_list in %s lists none\n",
           path);
    if (list)
      free_list(list);
    return 77;
  }
  for (int i = 0; i < count; i++)
    printf("RDMA device: %s\n", get_name(list[i]));
  free_list(list);
  return 0;
}
