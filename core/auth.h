/* auth.h - the per-job secret and the mutual challenge-response that proves
 * it on a freshly connected socket (docs/security.md).
 *
 * The secret comes from XCOLL_AUTH_TOKEN (any string, e.g. the 64 hex digits
 * xcollrun generates) or from the file named by XCOLL_AUTH_FILE (readable by
 * its owner only); either is hashed (BLAKE2b, crypto_generichash) into a
 * 32-byte key. Without either, authentication is off: every peer is trusted,
 * which is safe only where nobody else can reach the job's ports.
 *
 * The exchange, between the side that connected (client) and the side that
 * accepted (server); each offer is XCOLL_AUTH_OFFER_BYTES:
 *   client -> server: offer = "XCA1" | flags (1: has a secret) | client nonce,
 *                     then the hello tag (xcoll_auth_hello_tag)
 *   server -> client: offer (server nonce) | server proof
 *   client -> server: client proof                         (only with a secret)
 * proof = HMAC-SHA256(key, role | 0 | context | 0 | client nonce | server
 * nonce), role "server" or "client" so that one side's proof never passes as
 * the other's. Nonces are 32 random bytes per connection, so a recorded proof
 * is worth nothing on another connection (no replay). The secret itself never
 * crosses the wire. Proofs are compared in constant time (sodium_memcmp).
 * context names the connection (e.g. "tcp comm=0 ranks=0>1 socket=0") so that
 * a proof cannot be moved to another connection of the same job either.
 * Without a secret both sides still exchange offers, so that a process with a
 * secret and one without fail at once with a message instead of a timeout. */
#ifndef XCOLL_CORE_AUTH_H
#define XCOLL_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "xcoll.h"

#define XCOLL_AUTH_NONCE_BYTES 32
#define XCOLL_AUTH_PROOF_BYTES 32
/* "XCA1" | flags | nonce */
#define XCOLL_AUTH_OFFER_BYTES (5 + XCOLL_AUTH_NONCE_BYTES)
/* Longest context string, in bytes (longer ones are cut). */
#define XCOLL_AUTH_CONTEXT_BYTES 256

/* Read the secret from the environment once per process (later calls return
 * the first result). Errors: XCOLL_ERR_ENV when both variables are set, the
 * file cannot be read, is empty, larger than 64 KiB, or readable or writable
 * by group or others (the message says chmod 600); XCOLL_ERR_SYSTEM when
 * libsodium cannot start. */
xcoll_status xcoll_auth_init(void);

/* Forget what xcoll_auth_init read and read the environment again (for
 * tests that change XCOLL_AUTH_*; not while connections are being made).
 * Same errors as xcoll_auth_init. */
xcoll_status xcoll_auth_reload(void);

/* 1 when a secret is loaded (xcoll_auth_init succeeded with one), else 0. */
int xcoll_auth_enabled(void);

/* When no secret is set and master_addr is not a loopback address, print one
 * WARN per process saying that anyone who reaches the ports can join. */
void xcoll_auth_warn_if_exposed(const char *master_addr);

/* Building blocks for callers that run the exchange from their own event
 * loop (the tcp backend's startup). */

/* The client's first message in xcoll_auth_client and xcoll_auth_server:
 * its offer, then its hello tag. */
#define XCOLL_AUTH_FIRST_BYTES (XCOLL_AUTH_OFFER_BYTES + XCOLL_AUTH_PROOF_BYTES)

/* The hello tag: HMAC(secret, "hello" | context | client nonce | zeros), the
 * proof of role "hello" with a zero server nonce. It lets a listener tell a
 * process of the job from a stranger by the first message, before it
 * answers anything (core/stranger.h): a listener that must shed
 * connections keeps those with a valid tag. All zero without a secret (and
 * then every tag is valid). It binds the client's nonce, not the server's,
 * so a recorded first message can be replayed; the proofs that follow
 * cannot. */
void xcoll_auth_hello_tag(const char *context,
                          const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                          uint8_t tag[XCOLL_AUTH_PROOF_BYTES]);
/* 1 when tag is the hello tag for context and client_nonce (or there is no
 * secret), else 0. */
int xcoll_auth_hello_tag_ok(const char *context,
                            const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                            const uint8_t tag[XCOLL_AUTH_PROOF_BYTES]);

/* Fill offer with this process's flags and a fresh random nonce, kept in
 * nonce (XCOLL_AUTH_NONCE_BYTES). */
void xcoll_auth_offer(uint8_t offer[XCOLL_AUTH_OFFER_BYTES],
                      uint8_t nonce[XCOLL_AUTH_NONCE_BYTES]);
/* Check a peer's offer and copy out its nonce. Returns 0, or -1 with why set
 * (not an xcoll peer; one side has a secret and the other none). */
int xcoll_auth_parse_offer(const uint8_t offer[XCOLL_AUTH_OFFER_BYTES],
                           uint8_t nonce[XCOLL_AUTH_NONCE_BYTES], char *why,
                           size_t why_bytes);
/* The proof of role ("server" or "client") for context and both nonces. All
 * zero without a secret. */
void xcoll_auth_prove(const char *role, const char *context,
                      const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                      const uint8_t server_nonce[XCOLL_AUTH_NONCE_BYTES],
                      uint8_t proof[XCOLL_AUTH_PROOF_BYTES]);
/* 1 when proof is role's proof for context and both nonces (constant-time
 * compare), or when there is no secret; else 0. */
int xcoll_auth_verify(const char *role, const char *context,
                      const uint8_t client_nonce[XCOLL_AUTH_NONCE_BYTES],
                      const uint8_t server_nonce[XCOLL_AUTH_NONCE_BYTES],
                      const uint8_t proof[XCOLL_AUTH_PROOF_BYTES]);

/* The whole exchange on a connected socket fd (blocking or not), as the side
 * that connected (client) or accepted (server), finishing by deadline (a
 * CLOCK_MONOTONIC time in seconds, see xcoll_auth_now). peer names the other
 * side in messages ("the store at 10.0.0.1:29500", "rank 3 (host:port)").
 * Errors (message set with xcoll_error(NULL, ...)): XCOLL_ERR_PROTOCOL (the
 * peer has another secret, none, or sent something that is not an offer;
 * the server answers a wrong hello tag before it fails, so that a client
 * with another secret learns it from the server's proof),
 * XCOLL_ERR_TIMEOUT (no answer by deadline), XCOLL_ERR_REMOTE (connection
 * closed or reset). On error the caller closes fd.
 * The socket net plugin calls these right after its connect and accept. */
xcoll_status xcoll_auth_client(int fd, const char *context, const char *peer,
                               double deadline);
/* xcoll_auth_client that records a TIMEOUT or REMOTE failure without a log
 * line, for a caller that will try again on a new connection (the store
 * client): a line for each try would report trouble that the retry mends. */
xcoll_status xcoll_auth_client_quiet(int fd, const char *context,
                                     const char *peer, double deadline);
xcoll_status xcoll_auth_server(int fd, const char *context, const char *peer,
                               double deadline);

/* CLOCK_MONOTONIC in seconds, the clock deadlines above are on. */
double xcoll_auth_now(void);

#endif
