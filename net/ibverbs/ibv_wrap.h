/* ibv_wrap.h - the libibverbs entry points the ibverbs net plugin uses,
 * loaded with dlopen at run time (ibv_wrap.c), so that libxcoll needs only
 * the verbs.h headers to build and runs where libibverbs is absent.
 *
 * Only exported functions are in the table. ibv_post_send, ibv_post_recv and
 * ibv_poll_cq are static inline in verbs.h and call through the context's
 * ops table (ctx->ops), so they work with whatever library filled it: the
 * real libibverbs and its providers, or the test emulator
 * (tests/ibverbs_emu/). */
#ifndef XCOLL_NET_IBV_WRAP_H
#define XCOLL_NET_IBV_WRAP_H

#include <stddef.h>

#include <infiniband/verbs.h>

typedef struct xcoll_ibv_api {
  struct ibv_device **(*get_device_list)(int *count);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device);
  int (*close_device)(struct ibv_context *context);
  /* The exported symbol (verbs.h wraps it in a macro): fills the leading,
   * compatible part of struct ibv_port_attr; callers zero the rest. */
  int (*query_port)(struct ibv_context *context, uint8_t port,
                    struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *context, uint8_t port, int index,
                   union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t bytes,
                           int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *context, int entries,
                              void *cq_context,
                              struct ibv_comp_channel *channel, int vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  const char *(*wc_status_str)(enum ibv_wc_status status);
} xcoll_ibv_api;

/* Load the library once per process: the path in XCOLL_IBVERBS_LIB when
 * set (the test emulator), else libibverbs.so.1. Returns the table, or NULL
 * with the reason in why (why_bytes long): the library or one of its
 * symbols is missing. Thread-safe; later calls return the first result. */
const xcoll_ibv_api *xcoll_ibv_load(char *why, size_t why_bytes);

#endif
