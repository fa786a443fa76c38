/* net_socket_wire.h - the socket net plugin's bytes on the wire
 * (net_socket.c): the listen handle, the hello that opens each data socket
 * and the header that starts each message, with their encoders and the
 * checks of what comes from the network, as pure functions over bytes so
 * that tests/fuzz/fuzz_net_socket.c can feed the checks arbitrary bytes.
 * Every integer is little-endian.
 *
 *   handle (XCOLL_NET_HANDLE_MAXSIZE bytes, zero beyond 48):
 *     magic u32 "XNSH" | version u16 | nsocks u16 | IPv4 address (4 bytes,
 *     network order) | port (2 bytes, network order) | flags u16 | nonce u64
 *     | host id (SOCK_HOST_ID_BYTES)
 *   flags bit 0 (SOCK_FLAG_UNIX): the listener also listens on the
 *   abstract Unix-domain socket named by its nonce (sock_unix_name), which
 *   a connector whose host id equals the handle's may use instead of TCP.
 *   hello (SOCK_HELLO_BYTES):
 *     magic u32 "XNSC" | version u16 (SOCK_HELLO_VERSION) | socket index u16
 *     | nsocks u16 | 0 u16 | rank u32 | comm_id u64 | the listener's nonce u64
 *   The hello is followed by the authentication offer (core/auth.h) and,
 *   since hello version 2, a hello tag (socket_internal.h): the three are
 *   the connection's first message.
 *   message header (SOCK_HEADER_BYTES):
 *     magic u32 "XNSM" | tag u32 | size u64 (bytes) */
#ifndef XCOLL_NET_SOCKET_WIRE_H
#define XCOLL_NET_SOCKET_WIRE_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#define SOCK_HANDLE_MAGIC 0x48534e58u /* bytes "XNSH" */
#define SOCK_HELLO_MAGIC 0x43534e58u  /* bytes "XNSC" */
#define SOCK_MSG_MAGIC 0x4d534e58u    /* bytes "XNSM" */
#define SOCK_VERSION 1 /* of the handle */
/* Of the hello. 2: the offer after the hello is followed by a hello tag, an
 * HMAC of the job's secret, so that a listener tells a rank from a stranger
 * from the first message on (a version 1 peer is told so, not left hanging). */
#define SOCK_HELLO_VERSION 2
#define SOCK_HANDLE_BYTES 32
#define SOCK_HELLO_BYTES 32
#define SOCK_HEADER_BYTES 16
#define SOCK_MAX_NSOCKS 16
/* The kernel's boot id (16 bytes) and the network namespace's inode (8
 * bytes): two processes with the same host id reach each other's abstract
 * Unix-domain sockets, which are scoped to one network namespace of one
 * running kernel (unix(7)). */
#define SOCK_HOST_ID_BYTES 24
#define SOCK_FLAG_UNIX 1u

static inline void sock_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void sock_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static inline void sock_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t sock_get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t sock_get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static inline uint64_t sock_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* Where a listener waits: what connect needs to reach it. */
typedef struct sock_handle {
  struct sockaddr_in addr;
  int nsocks;     /* data sockets per connection, [1, SOCK_MAX_NSOCKS] */
  uint64_t nonce; /* the listener's; every hello to it carries it */
  unsigned flags; /* SOCK_FLAG_* */
  uint8_t host_id[SOCK_HOST_ID_BYTES]; /* the listener's, with SOCK_FLAG_UNIX */
} sock_handle;

/* The abstract Unix-domain address of the listener with this nonce: its
 * name, starting with the NUL byte that makes it abstract, in out (at
 * least SOCK_UNIX_NAME_BYTES bytes); returns the name's length in bytes. */
#define SOCK_UNIX_NAME_BYTES 40
size_t sock_unix_name(uint64_t nonce, char *out);

/* Write h into out (XCOLL_NET_HANDLE_MAXSIZE bytes). */
void sock_handle_encode(const sock_handle *h, uint8_t *out);
/* Parse a handle (XCOLL_NET_HANDLE_MAXSIZE bytes) into *h. NULL when it is
 * a handle of this plugin and version with nsocks in [1, SOCK_MAX_NSOCKS]
 * and a port, else why not (in why, why_bytes long). */
const char *sock_handle_decode(const uint8_t *in, sock_handle *h, char *why,
                               size_t why_bytes);

typedef struct sock_hello {
  int index, nsocks, rank;
  uint64_t comm_id, nonce;
} sock_hello;

/* Write h into out (SOCK_HELLO_BYTES bytes). */
void sock_hello_encode(const sock_hello *h, uint8_t *out);
/* Judge a hello (SOCK_HELLO_BYTES bytes) read by a listener with this nonce
 * and comm_id, waiting for expected_rank's nsocks sockets; forming[i] >= 0
 * when socket i of that connection is already there (nsocks entries).
 * NULL when it is acceptable, with *index its socket in [0, nsocks) and
 * forming[*index] < 0; else why not (in why, why_bytes long). */
const char *sock_hello_judge(const uint8_t *in, uint64_t nonce,
                             uint64_t comm_id, int expected_rank, int nsocks,
                             const int *forming, int *index, char *why,
                             size_t why_bytes);

typedef enum sock_header_verdict {
  SOCK_HEADER_OK = 0,
  SOCK_HEADER_BAD_MAGIC, /* the stream is out of step */
  SOCK_HEADER_BAD_TAG,   /* not the tag the posted receive expects */
  SOCK_HEADER_TOO_LONG   /* more bytes than the posted receive holds */
} sock_header_verdict;

/* Write the header of a message of size bytes with tag into out
 * (SOCK_HEADER_BYTES bytes). */
void sock_header_encode(uint32_t tag, uint64_t size, uint8_t *out);
/* Check a header (SOCK_HEADER_BYTES bytes) against the posted receive's tag
 * and capacity (bytes). *magic, *tag and *size are set from the bytes
 * whatever the verdict (for messages); SOCK_HEADER_OK means *size <=
 * capacity. */
sock_header_verdict sock_header_check(const uint8_t *in, uint32_t expected_tag,
                                      size_t capacity, uint32_t *magic,
                                      uint32_t *tag, uint64_t *size);

#endif
