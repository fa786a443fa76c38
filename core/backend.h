/* backend.h - the backend interface: one versioned struct of function
 * pointers per backend (NCCL's net-plugin model), registered in registry.c.
 *
 * A host-driven backend (tcp, ucx) fills p2p and leaves collective NULL: core's
 * algorithms run over its p2p interface. A device-driven backend (nccl_like)
 * fills collective and runs the whole operation itself. */
#ifndef XCOLL_CORE_BACKEND_H
#define XCOLL_CORE_BACKEND_H

#include "p2p.h"
#include "xcoll.h"

struct xcoll_comm;
struct xcoll_coll_args;

#define XCOLL_BACKEND_ABI_VERSION 1

typedef struct xcoll_backend {
  int abi_version; /* XCOLL_BACKEND_ABI_VERSION */
  const char *name;
  const char *description;
  /* Connect comm's ranks: exchange addresses through comm->store under keys
   * prefixed by comm->store_prefix, then build the backend's state. Collective
   * over comm. On error, free what was taken and set a message. */
  xcoll_status (*comm_init)(struct xcoll_comm *comm, void **state);
  /* Close connections and free state. Never fails. */
  void (*comm_destroy)(struct xcoll_comm *comm, void *state);
  /* Called from any thread: make waits in progress return XCOLL_ERR_ABORTED
   * soon, and tell peers if possible. Must be async-safe with respect to the
   * thread running a collective. */
  void (*comm_abort)(struct xcoll_comm *comm, void *state);
  /* Host-driven: the p2p interface. */
  const xcoll_p2p_ops *p2p;
  /* Device-driven: run one collective. NULL for host-driven backends. */
  xcoll_status (*collective)(struct xcoll_comm *comm, void *state,
                             const struct xcoll_coll_args *args);
  /* The pipelining chunk (bytes) the algorithms use on this backend when
   * XCOLL_CHUNK_SIZE is unset; 0 means core's default (512 KiB). */
  size_t default_chunk_bytes;
} xcoll_backend;

/* The backend called name, or NULL with XCOLL_ERR_NOT_SUPPORTED set (the
 * message lists the compiled-in backends, and for a known-but-not-built one
 * says which CMake option builds it in). */
xcoll_status xcoll_backend_find(const char *name, const xcoll_backend **out);

/* Compiled-in backends, NULL-terminated. */
const xcoll_backend *const *xcoll_backend_list(void);

extern const xcoll_backend xcoll_backend_tcp;
#ifdef XCOLL_HAVE_UCX
extern const xcoll_backend xcoll_backend_ucx;
#endif

#endif
