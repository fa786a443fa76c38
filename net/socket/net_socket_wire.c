/* net_socket_wire.c - encoding and checking the socket net plugin's handle,
 * hello and message header (net_socket_wire.h). No sockets, no allocation. */
#include "net_socket_wire.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "net.h"

void sock_handle_encode(const sock_handle *h, uint8_t *out) {
  memset(out, 0, XCOLL_NET_HANDLE_MAXSIZE);
  sock_put_u32(out, SOCK_HANDLE_MAGIC);
  sock_put_u16(out + 4, SOCK_VERSION);
  sock_put_u16(out + 6, (uint16_t)h->nsocks);
  memcpy(out + 8, &h->addr.sin_addr.s_addr, 4); /* network order as is */
  memcpy(out + 12, &h->addr.sin_port, 2);
  sock_put_u16(out + 14, (uint16_t)h->flags);
  sock_put_u64(out + 16, h->nonce);
  if (h->flags & SOCK_FLAG_UNIX)
    memcpy(out + 24, h->host_id, SOCK_HOST_ID_BYTES);
}

size_t sock_unix_name(uint64_t nonce, char *out) {
  out[0] = '\0';
  int n = snprintf(out + 1, SOCK_UNIX_NAME_BYTES - 1,
                   "xcoll-net-socket-%016" PRIx64, nonce);
  return 1 + (size_t)n;
}

const char *sock_handle_decode(const uint8_t *in, sock_handle *h, char *why,
                               size_t why_bytes) {
  if (sock_get_u32(in) != SOCK_HANDLE_MAGIC ||
      sock_get_u16(in + 4) != SOCK_VERSION) {
    snprintf(why, why_bytes,
             "net socket: the handle given to connect is not a socket "
             "plugin handle of version %d (magic %08x): do both ranks use "
             "the same XCOLL_NET?",
             SOCK_VERSION, sock_get_u32(in));
    return why;
  }
  memset(h, 0, sizeof *h);
  h->nsocks = sock_get_u16(in + 6);
  h->addr.sin_family = AF_INET;
  memcpy(&h->addr.sin_addr.s_addr, in + 8, 4);
  memcpy(&h->addr.sin_port, in + 12, 2);
  h->nonce = sock_get_u64(in + 16);
  h->flags = sock_get_u16(in + 14);
  if (h->flags & SOCK_FLAG_UNIX)
    memcpy(h->host_id, in + 24, SOCK_HOST_ID_BYTES);
  if (h->flags & ~SOCK_FLAG_UNIX) {
    snprintf(why, why_bytes,
             "net socket: the handle given to connect is corrupt (flags "
             "%#x)",
             h->flags);
    return why;
  }
  if (h->nsocks < 1 || h->nsocks > SOCK_MAX_NSOCKS || h->addr.sin_port == 0) {
    snprintf(why, why_bytes,
             "net socket: the handle given to connect is corrupt (%d "
             "sockets, port %d)",
             h->nsocks, ntohs(h->addr.sin_port));
    return why;
  }
  return NULL;
}

void sock_hello_encode(const sock_hello *h, uint8_t *out) {
  memset(out, 0, SOCK_HELLO_BYTES);
  sock_put_u32(out, SOCK_HELLO_MAGIC);
  sock_put_u16(out + 4, SOCK_HELLO_VERSION);
  sock_put_u16(out + 6, (uint16_t)h->index);
  sock_put_u16(out + 8, (uint16_t)h->nsocks);
  sock_put_u32(out + 12, (uint32_t)h->rank);
  sock_put_u64(out + 16, h->comm_id);
  sock_put_u64(out + 24, h->nonce);
}

const char *sock_hello_judge(const uint8_t *in, uint64_t nonce,
                             uint64_t comm_id, int expected_rank, int nsocks,
                             const int *forming, int *index, char *why,
                             size_t why_bytes) {
  if (sock_get_u32(in) != SOCK_HELLO_MAGIC) {
    snprintf(why, why_bytes, "its first bytes are not a socket plugin hello");
    return why;
  }
  if (sock_get_u16(in + 4) != SOCK_HELLO_VERSION) {
    snprintf(why, why_bytes,
             "hello version %u, expected %d (ranks of different xcoll "
             "builds?)",
             sock_get_u16(in + 4), SOCK_HELLO_VERSION);
    return why;
  }
  if (sock_get_u16(in + 10) != 0) {
    /* sock_hello_encode writes zeros there: anything else is not a hello
     * of this plugin */
    snprintf(why, why_bytes, "hello bytes 10-11 are 0x%04x, not zero",
             sock_get_u16(in + 10));
    return why;
  }
  int idx = sock_get_u16(in + 6), count = sock_get_u16(in + 8);
  int rank = (int)sock_get_u32(in + 12);
  uint64_t their_comm_id = sock_get_u64(in + 16),
           their_nonce = sock_get_u64(in + 24);
  if (their_nonce != nonce) {
    snprintf(why, why_bytes,
             "its nonce does not match this listener's (a connection meant "
             "for another listener or job)");
    return why;
  }
  if (their_comm_id != comm_id) {
    snprintf(why, why_bytes, "comm id %" PRIu64 ", expected %" PRIu64,
             their_comm_id, comm_id);
    return why;
  }
  if (rank != expected_rank) {
    snprintf(why, why_bytes, "it says it is rank %d, expected rank %d", rank,
             expected_rank);
    return why;
  }
  if (count != nsocks || idx >= count) {
    snprintf(why, why_bytes, "socket %d of %d, expected %d socket(s)", idx,
             count, nsocks);
    return why;
  }
  if (forming[idx] >= 0) {
    snprintf(why, why_bytes, "a second connection for socket %d", idx);
    return why;
  }
  *index = idx;
  return NULL;
}

void sock_header_encode(uint32_t tag, uint64_t size, uint8_t *out) {
  sock_put_u32(out, SOCK_MSG_MAGIC);
  sock_put_u32(out + 4, tag);
  sock_put_u64(out + 8, size);
}

sock_header_verdict sock_header_check(const uint8_t *in, uint32_t expected_tag,
                                      size_t capacity, uint32_t *magic,
                                      uint32_t *tag, uint64_t *size) {
  *magic = sock_get_u32(in);
  *tag = sock_get_u32(in + 4);
  *size = sock_get_u64(in + 8);
  if (*magic != SOCK_MSG_MAGIC)
    return SOCK_HEADER_BAD_MAGIC;
  if (*tag != expected_tag)
    return SOCK_HEADER_BAD_TAG;
  if (*size > capacity)
    return SOCK_HEADER_TOO_LONG;
  return SOCK_HEADER_OK;
}
