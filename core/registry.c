/* registry.c - the compiled-in backends and lookup by name (XCOLL_BACKEND).
 * A backend that exists in xcoll but was left out of this build gets a
 * message saying how to build it in, rather than "unknown backend". */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "log.h"

static const xcoll_backend *const compiled_backends[] = {
    &xcoll_backend_tcp,
#ifdef XCOLL_HAVE_UCX
    &xcoll_backend_ucx,
#endif
#ifdef XCOLL_HAVE_NCCL_LIKE
    &xcoll_backend_nccl_like,
#endif
    NULL,
};

enum { MAX_BACKENDS = sizeof compiled_backends / sizeof compiled_backends[0] };

/* Per-process init state of each backend, by its index in compiled_backends:
 * 0 not yet run, 1 done; with the status every later call repeats. */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_done[MAX_BACKENDS];
static xcoll_status init_status[MAX_BACKENDS];
static char init_message[MAX_BACKENDS][256];

const xcoll_backend *const *xcoll_backend_list(void) {
  return compiled_backends;
}

/* "tcp, ucx": the names of the compiled-in backends, for messages. */
static void list_names(char *out, size_t out_bytes) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; compiled_backends[i] != NULL && used < out_bytes; i++) {
    int n = snprintf(out + used, out_bytes - used, "%s%s", i == 0 ? "" : ", ",
                     compiled_backends[i]->name);
    if (n < 0)
      break;
    used += (size_t)n;
  }
}

xcoll_status xcoll_backend_find(const char *name, const xcoll_backend **out) {
  *out = NULL;
  char available[256];
  list_names(available, sizeof available);
  if (name == NULL || name[0] == '\0')
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "no backend name given: choose one of %s (XCOLL_BACKEND "
                       "or xcoll_config.backend)",
                       available);

  for (int i = 0; compiled_backends[i] != NULL; i++) {
    const xcoll_backend *backend = compiled_backends[i];
    if (strcmp(backend->name, name) != 0)
      continue;
    if (backend->abi_version != XCOLL_BACKEND_ABI_VERSION)
      return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                         "backend '%s' implements backend ABI version %d but "
                         "this library expects version %d: rebuild xcoll",
                         name, backend->abi_version, XCOLL_BACKEND_ABI_VERSION);
    *out = backend;
    return XCOLL_SUCCESS;
  }

#ifndef XCOLL_HAVE_UCX
  if (strcmp(name, "ucx") == 0)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "backend 'ucx' is not compiled into this build: "
                       "apt-get install libucx-dev, then rebuild with "
                       "-DXCOLL_WITH_UCX=ON (compiled in: %s)",
                       available);
#endif
#ifndef XCOLL_HAVE_NCCL_LIKE
  if (strcmp(name, "nccl_like") == 0)
    return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                       "backend 'nccl_like' is not compiled into this build "
                       "(compiled in: %s)",
                       available);
#endif
  return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                     "unknown backend '%.100s': compiled-in backends are %s",
                     name, available);
}

xcoll_status xcoll_backend_init_once(const xcoll_backend *backend) {
  int index = -1;
  for (int i = 0; compiled_backends[i] != NULL; i++)
    if (compiled_backends[i] == backend)
      index = i;
  if (backend->init == NULL || index < 0)
    return XCOLL_SUCCESS;
  pthread_mutex_lock(&init_lock);
  if (!init_done[index]) {
    init_status[index] = backend->init();
    if (init_status[index] != XCOLL_SUCCESS)
      snprintf(init_message[index], sizeof init_message[index], "%s",
               xcoll_last_error());
    else
      XCOLL_INFO("backend %s initialised for this process", backend->name);
    init_done[index] = 1;
  }
  xcoll_status status = init_status[index];
  pthread_mutex_unlock(&init_lock);
  if (status != XCOLL_SUCCESS)
    return xcoll_error(NULL, status, "backend '%s' failed to initialise: %s",
                       backend->name, init_message[index]);
  return XCOLL_SUCCESS;
}
