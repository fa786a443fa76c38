/* ibv_wrap.c - dlopen of libibverbs for the ibverbs net plugin (see
 * ibv_wrap.h). The library stays loaded for the life of the process: verbs
 * objects may outlive any one communicator. */
#include "ibv_wrap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static xcoll_ibv_api api;
static const xcoll_ibv_api *loaded;
static char load_error[512];

/* Look up one symbol; the first failure is kept in load_error. */
static void *symbol(void *lib, const char *name, int *ok) {
  void *p = dlsym(lib, name);
  if (p == NULL && *ok) {
    snprintf(load_error, sizeof load_error,
             "the verbs library has no symbol %s", name);
    *ok = 0;
  }
  return p;
}

static void load(void) {
  const char *path = getenv("XCOLL_IBVERBS_LIB");
  if (path == NULL || path[0] == '\0')
    path = "libibverbs.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *text = dlerror();
    snprintf(load_error, sizeof load_error, "cannot load %s: %s", path,
             text ? text : "unknown dlopen error");
    return;
  }
  int ok = 1;
  /* Function pointers from dlsym: POSIX guarantees the conversion. */
#define LOAD(field, name) *(void **)(&api.field) = symbol(lib, name, &ok)
  LOAD(get_device_list, "ibv_get_device_list");
  LOAD(free_device_list, "ibv_free_device_list");
  LOAD(get_device_name, "ibv_get_device_name");
  LOAD(open_device, "ibv_open_device");
  LOAD(close_device, "ibv_close_device");
  LOAD(query_port, "ibv_query_port");
  LOAD(query_gid, "ibv_query_gid");
  LOAD(alloc_pd, "ibv_alloc_pd");
  LOAD(dealloc_pd, "ibv_dealloc_pd");
  LOAD(reg_mr, "ibv_reg_mr");
  LOAD(dereg_mr, "ibv_dereg_mr");
  LOAD(create_cq, "ibv_create_cq");
  LOAD(destroy_cq, "ibv_destroy_cq");
  LOAD(create_qp, "ibv_create_qp");
  LOAD(modify_qp, "ibv_modify_qp");
  LOAD(destroy_qp, "ibv_destroy_qp");
  LOAD(wc_status_str, "ibv_wc_status_str");
#undef LOAD
  if (!ok) {
    dlclose(lib);
    return;
  }
  loaded = &api;
}

const xcoll_ibv_api *xcoll_ibv_load(char *why, size_t why_bytes) {
  pthread_once(&load_once, load);
  if (loaded == NULL && why != NULL && why_bytes > 0)
    snprintf(why, why_bytes, "%s", load_error);
  return loaded;
}
