/* handshake.c - the bootstrap connection of the ucx and ibverbs plugins,
 * over the socket plugin (see handshake.h). */
#include "handshake.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net_plugin_log.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* No timeout set: wait (practically) forever. */
static double timeout_of(const xcoll_net_config *config) {
  return config->timeout_s > 0 ? config->timeout_s : 1e9;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

xcoll_status net_handshake_init(xcoll_net_log_fn log) {
  net_plugin_log_set(log);
  return xcoll_net_socket.init(log);
}

/* ---- the receiving side ---- */

xcoll_status net_handshake_listen(net_handshake_receiver *r, int device,
                                  const xcoll_net_config *config,
                                  uint32_t magic, uint32_t version,
                                  size_t inner_bytes, void *handle) {
  memset(r, 0, sizeof *r);
  uint8_t inner[XCOLL_NET_HANDLE_MAXSIZE];
  xcoll_status s =
      xcoll_net_socket.listen(device, config, inner, &r->socket_listen);
  if (s != XCOLL_SUCCESS)
    return s;
  r->config = *config;
  uint8_t *out = handle;
  memset(out, 0, XCOLL_NET_HANDLE_MAXSIZE);
  put_u32(out, magic);
  put_u32(out + 4, version);
  memcpy(out + NET_HANDSHAKE_INNER_OFFSET, inner, inner_bytes);
  return XCOLL_SUCCESS;
}

xcoll_status net_handshake_receiver_waiting(const net_handshake_receiver *r,
                                            const char *plugin,
                                            int expected_rank) {
  if (now_s() < r->deadline)
    return XCOLL_SUCCESS;
  return net_fail(XCOLL_ERR_TIMEOUT,
                  "net %s: rank %d's handshake with rank %d made no "
                  "progress in %.1f s",
                  plugin, r->config.rank, expected_rank,
                  timeout_of(&r->config));
}

xcoll_status net_handshake_receive_hello(net_handshake_receiver *r,
                                         const char *plugin, int expected_rank,
                                         void *hello, size_t capacity,
                                         int *received, size_t *size) {
  *received = 0;
  xcoll_status s = XCOLL_SUCCESS;
  if (r->stage == NET_HANDSHAKE_CONNECTING) {
    s = xcoll_net_socket.accept(r->socket_listen, expected_rank,
                                &r->socket_recv);
    if (s != XCOLL_SUCCESS || r->socket_recv == NULL)
      return s;
    s = xcoll_net_socket.irecv(r->socket_recv, hello, capacity, 0, NULL,
                               &r->socket_request);
    if (s != XCOLL_SUCCESS)
      return s;
    r->stage = NET_HANDSHAKE_HELLO;
    r->deadline = now_s() + timeout_of(&r->config);
  }
  if (r->stage == NET_HANDSHAKE_HELLO) {
    int done = 0;
    size_t got = 0;
    s = xcoll_net_socket.test(r->socket_request, &done, &got);
    if (s != XCOLL_SUCCESS) {
      r->socket_request = NULL; /* test released it */
      return s;
    }
    if (!done)
      return net_handshake_receiver_waiting(r, plugin, expected_rank);
    r->socket_request = NULL;
    r->stage = NET_HANDSHAKE_DONE;
    *size = got;
  }
  *received = 1;
  return XCOLL_SUCCESS;
}

void net_handshake_receiver_reset(net_handshake_receiver *r) {
  if (r->socket_recv)
    xcoll_net_socket.close_recv(r->socket_recv);
  r->socket_recv = NULL;
  r->socket_request = NULL;
  r->stage = NET_HANDSHAKE_CONNECTING;
}

void net_handshake_receiver_close(net_handshake_receiver *r) {
  net_handshake_receiver_reset(r);
  xcoll_net_socket.close_listen(r->socket_listen);
  r->socket_listen = NULL;
}

/* ---- the connecting side ---- */

xcoll_status net_handshake_sender_get(net_handshake_senders *list,
                                      const char *plugin, const void *handle,
                                      const xcoll_net_config *config,
                                      int peer_rank, size_t bytes,
                                      net_handshake_sender **sender) {
  pthread_mutex_lock(&list->lock);
  net_handshake_sender *s = list->head;
  while (s != NULL &&
         !(memcmp(s->key_handle, handle, sizeof s->key_handle) == 0 &&
           s->comm_id == config->comm_id && s->rank == config->rank &&
           s->peer_rank == peer_rank))
    s = s->next;
  if (s == NULL) {
    s = calloc(1, bytes);
    if (s == NULL) {
      pthread_mutex_unlock(&list->lock);
      *sender = NULL;
      return net_fail(XCOLL_ERR_NO_MEMORY, "net %s: no memory for a connect",
                      plugin);
    }
    memcpy(s->key_handle, handle, sizeof s->key_handle);
    s->comm_id = config->comm_id;
    s->rank = config->rank;
    s->peer_rank = peer_rank;
    s->timeout_s = timeout_of(config);
    s->deadline = now_s() + s->timeout_s;
    s->next = list->head;
    list->head = s;
  }
  pthread_mutex_unlock(&list->lock);
  *sender = s;
  return XCOLL_SUCCESS;
}

xcoll_status net_handshake_connect(net_handshake_sender *s, int device,
                                   const xcoll_net_config *config,
                                   const void *handle, size_t inner_bytes) {
  uint8_t inner[XCOLL_NET_HANDLE_MAXSIZE] = {0};
  memcpy(inner, (const uint8_t *)handle + NET_HANDSHAKE_INNER_OFFSET,
         inner_bytes);
  return xcoll_net_socket.connect(device, config, inner, s->peer_rank,
                                  &s->socket_send);
}

xcoll_status net_handshake_send_hello(net_handshake_sender *s,
                                      const char *plugin, const void *hello,
                                      size_t bytes) {
  xcoll_status st = xcoll_net_socket.isend(s->socket_send, hello, bytes, 0,
                                           NULL, &s->socket_request);
  if (st != XCOLL_SUCCESS)
    return st;
  if (s->socket_request == NULL)
    return net_fail(XCOLL_ERR_INTERNAL, "net %s: a fresh socket comm is full",
                    plugin);
  s->stage = NET_HANDSHAKE_HELLO;
  return XCOLL_SUCCESS;
}

xcoll_status net_handshake_hello_sent(net_handshake_sender *s, int *sent) {
  *sent = 0;
  if (s->stage == NET_HANDSHAKE_DONE) {
    *sent = 1;
    return XCOLL_SUCCESS;
  }
  int done = 0;
  xcoll_status st = xcoll_net_socket.test(s->socket_request, &done, NULL);
  if (st != XCOLL_SUCCESS) {
    s->socket_request = NULL; /* test released it */
    return st;
  }
  if (!done)
    return XCOLL_SUCCESS;
  s->socket_request = NULL;
  s->stage = NET_HANDSHAKE_DONE;
  *sent = 1;
  return XCOLL_SUCCESS;
}

xcoll_status net_handshake_sender_waiting(const net_handshake_sender *s,
                                          const char *plugin) {
  if (now_s() < s->deadline)
    return XCOLL_SUCCESS;
  return net_fail(XCOLL_ERR_TIMEOUT,
                  "net %s: rank %d's connection to rank %d made no "
                  "progress in %.1f s",
                  plugin, s->rank, s->peer_rank, s->timeout_s);
}

void net_handshake_sender_drop(net_handshake_senders *list,
                               net_handshake_sender *s) {
  pthread_mutex_lock(&list->lock);
  for (net_handshake_sender **p = &list->head; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&list->lock);
  if (s->socket_send)
    xcoll_net_socket.close_send(s->socket_send);
  free(s);
}
