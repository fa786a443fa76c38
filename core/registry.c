/* registry.c - the compiled-in backends and lookup by name (XCOLL_BACKEND).
 * A backend that exists in xcoll but was left out of this build gets a
 * message saying how to build it in, rather than "unknown backend". */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "error.h"

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
                       "backend 'nccl_like' is not built in this version of "
                       "xcoll (compiled in: %s)",
                       available);
#endif
  return xcoll_error(NULL, XCOLL_ERR_NOT_SUPPORTED,
                     "unknown backend '%.100s': compiled-in backends are %s",
                     name, available);
}
