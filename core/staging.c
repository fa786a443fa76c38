/* staging.c - CUDA device buffers on host-driven backends through pinned
 * host memory (staging.h). The driver is core/cuda.h's. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_COLL /* log.h */
#include "staging.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda.h"
#include "device.h"
#include "dtype.h"
#include "error.h"
#include "log.h"

struct xcoll_staging {
  xcoll_comm *comm;
  xcoll_cuda *cuda;
  void *stream;
  void *pinned; /* the pinned copies, pinned_bytes long */
  size_t pinned_bytes;
  void *device_recv; /* where the result goes back to; NULL: nowhere */
  const void *pinned_recv;
  size_t recv_bytes;
  struct xcoll_staging *next; /* the next call's, in a group */
};

/* A pinned buffer of at least bytes: the spare when it is large enough.
 * The context is pushed. */
static void *pinned_take(xcoll_cuda *cuda, size_t bytes, size_t *got) {
  pthread_mutex_lock(&cuda->lock);
  if (cuda->spare != NULL && cuda->spare_bytes >= bytes) {
    void *p = cuda->spare;
    *got = cuda->spare_bytes;
    cuda->spare = NULL;
    pthread_mutex_unlock(&cuda->lock);
    return p;
  }
  pthread_mutex_unlock(&cuda->lock);
  void *p = NULL;
  if (xcoll_cu.mem_host_alloc(&p, bytes, 0) != 0)
    return NULL;
  *got = bytes;
  return p;
}

/* Keep the larger of p and the spare; free the other. Context pushed. */
static void pinned_give(xcoll_cuda *cuda, void *p, size_t bytes) {
  pthread_mutex_lock(&cuda->lock);
  void *drop = p;
  if (cuda->spare == NULL || bytes > cuda->spare_bytes) {
    drop = cuda->spare;
    cuda->spare = p;
    cuda->spare_bytes = bytes;
  }
  pthread_mutex_unlock(&cuda->lock);
  if (drop != NULL)
    xcoll_cu.mem_free_host(drop);
}

/* Bytes sendbuf and recvbuf span in this call on this rank (0 where a
 * buffer is not used here: broadcast's sendbuf off root, reduce's recvbuf
 * off root, barrier). */
static void span_bytes(const xcoll_comm *comm, const xcoll_coll_args *args,
                       size_t *send_bytes, size_t *recv_bytes) {
  size_t element = xcoll_datatype_size(args->dtype);
  size_t send = 0, recv = 0;
  if (args->kind == XCOLL_COLL_ALLTOALLV) {
    /* The furthest element any block reaches (validated: no overflow). */
    for (int p = 0; p < comm->world_size; p++) {
      size_t s_end = args->sdispls[p] + args->sendcounts[p];
      size_t r_end = args->rdispls[p] + args->recvcounts[p];
      if (args->sendcounts[p] > 0 && s_end > send)
        send = s_end;
      if (args->recvcounts[p] > 0 && r_end > recv)
        recv = r_end;
    }
  } else {
    xcoll_coll_shape(args->kind, args->count, comm->world_size,
                     comm->rank == args->root, &send, &recv, NULL);
  }
  *send_bytes = send * element;
  *recv_bytes = recv * element;
  if (args->sendbuf == NULL)
    *send_bytes = 0;
  if (args->recvbuf == NULL)
    *recv_bytes = 0;
}

static xcoll_status driver_failed(xcoll_comm *comm, const char *call,
                                  xcoll_cu_result rc) {
  return xcoll_error(comm, XCOLL_ERR_SYSTEM,
                     "%s on CUDA device %d failed: error %d, %s", call,
                     comm->device, rc, xcoll_cu_text(rc));
}

xcoll_status xcoll_staging_begin(xcoll_comm *comm, const xcoll_coll_args *args,
                                 xcoll_coll_args *host_args,
                                 xcoll_staging **out) {
  *out = NULL;
  *host_args = *args;
  host_args->stream = NULL;
  xcoll_cuda *cuda = comm->cuda;
  size_t send_bytes, recv_bytes;
  span_bytes(comm, args, &send_bytes, &recv_bytes);
  const char *send = args->sendbuf;
  char *recv = args->recvbuf;
  int send_device = send_bytes > 0 && xcoll_device_pointer(send);
  int recv_device = recv_bytes > 0 && xcoll_device_pointer(recv);

  xcoll_cu_result rc = xcoll_cuda_push(cuda);
  if (rc != 0)
    return driver_failed(comm, "cuCtxPushCurrent", rc);
  if (!send_device && !recv_device) {
    /* Host buffers: the call still follows the stream's earlier work. */
    rc = xcoll_cu.stream_synchronize(args->stream);
    xcoll_cuda_pop();
    return rc == 0 ? XCOLL_SUCCESS
                   : driver_failed(comm, "cuStreamSynchronize", rc);
  }

  /* One pinned allocation: both buffers' copies side by side, or one copy
   * of the range they share (the in-place forms), at the same offsets. */
  const char *lo;
  size_t span, send_at, recv_at;
  int overlap = send_device && recv_device && send < recv + recv_bytes &&
                recv < send + send_bytes;
  if (overlap) {
    lo = send < recv ? send : recv;
    const char *hi_send = send + send_bytes, *hi_recv = recv + recv_bytes;
    span = (size_t)((hi_send > hi_recv ? hi_send : hi_recv) - lo);
    send_at = (size_t)(send - lo);
    recv_at = (size_t)(recv - lo);
  } else {
    send_at = 0;
    recv_at = send_device ? (send_bytes + 63) / 64 * 64 : 0;
    span = recv_at + (recv_device ? recv_bytes : 0);
  }

  xcoll_staging *staging = calloc(1, sizeof *staging);
  size_t got = 0;
  char *pinned = staging != NULL ? pinned_take(cuda, span, &got) : NULL;
  if (pinned == NULL) {
    xcoll_cuda_pop();
    free(staging);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "no pinned host memory for %zu bytes of staging "
                       "(CUDA device %d)",
                       span, comm->device);
  }
  staging->comm = comm;
  staging->cuda = cuda;
  staging->stream = args->stream;
  staging->pinned = pinned;
  staging->pinned_bytes = got;
  if (send_device) {
    host_args->sendbuf = pinned + send_at;
    rc = xcoll_cu.memcpy_dtoh_async(pinned + send_at, (xcoll_cu_deviceptr)(uintptr_t)send,
                               send_bytes, args->stream);
  }
  /* alltoallv's receive span may hold bytes no block covers (gaps its
   * displacements leave): they go back to the device with the result, so
   * they come in first, unchanged. */
  if (rc == 0 && recv_device && args->kind == XCOLL_COLL_ALLTOALLV && !overlap)
    rc = xcoll_cu.memcpy_dtoh_async(pinned + recv_at,
                                    (xcoll_cu_deviceptr)(uintptr_t)recv,
                                    recv_bytes, args->stream);
  if (rc != 0) {
    pinned_give(cuda, pinned, got);
    xcoll_cuda_pop();
    free(staging);
    return driver_failed(comm, "cuMemcpyDtoHAsync", rc);
  }
  if (recv_device) {
    host_args->recvbuf = pinned + recv_at;
    staging->device_recv = recv;
    staging->pinned_recv = pinned + recv_at;
    staging->recv_bytes = recv_bytes;
  }
  /* The host algorithm reads the copy: it must have landed. */
  rc = xcoll_cu.stream_synchronize(args->stream);
  xcoll_cuda_pop();
  if (rc != 0) {
    staging->device_recv = NULL;
    xcoll_staging_end(staging, XCOLL_SUCCESS);
    return driver_failed(comm, "cuStreamSynchronize", rc);
  }
  *out = staging;
  return XCOLL_SUCCESS;
}

xcoll_staging *xcoll_staging_chain(xcoll_staging *first, xcoll_staging *rest) {
  if (first == NULL)
    return rest;
  xcoll_staging *last = first;
  while (last->next != NULL)
    last = last->next;
  last->next = rest;
  return first;
}

xcoll_status xcoll_staging_end(xcoll_staging *staging, xcoll_status status) {
  if (staging == NULL)
    return status;
  if (staging->next != NULL) {
    status = xcoll_staging_end(staging->next, status);
    staging->next = NULL;
  }
  xcoll_cuda *cuda = staging->cuda;
  xcoll_cu_result rc = xcoll_cuda_push(cuda);
  if (rc != 0) {
    /* Without a context the pinned memory cannot be freed: leak it rather
     * than free it wrongly, and say so. */
    xcoll_status failed = driver_failed(staging->comm, "cuCtxPushCurrent", rc);
    free(staging);
    return status != XCOLL_SUCCESS ? status : failed;
  }
  if (status == XCOLL_SUCCESS && staging->device_recv != NULL) {
    rc = xcoll_cu.memcpy_htod_async((xcoll_cu_deviceptr)(uintptr_t)staging->device_recv,
                               staging->pinned_recv, staging->recv_bytes,
                               staging->stream);
    const char *call = "cuMemcpyHtoDAsync";
    if (rc == 0) {
      /* The pinned copy is reused once this returns: wait for the copy. */
      rc = xcoll_cu.stream_synchronize(staging->stream);
      call = "cuStreamSynchronize";
    }
    if (rc != 0)
      status = driver_failed(staging->comm, call, rc);
  }
  pinned_give(cuda, staging->pinned, staging->pinned_bytes);
  xcoll_cuda_pop();
  free(staging);
  return status;
}
