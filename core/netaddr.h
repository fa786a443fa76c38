/* netaddr.h - which local address a rank listens on and publishes to its
 * peers: shared by the tcp backend (IPv4 or IPv6, xcoll_netaddr_choose_any)
 * and the socket net plugin (IPv4, xcoll_netaddr_choose) so that both pick
 * the same interface for the same settings.
 *
 * The rule (NCCL_SOCKET_IFNAME's model):
 *   1. ifname given (XCOLL_SOCKET_IFNAME, syntax in ifname.h: prefixes,
 *      =exact names, ^exclusions, comma lists): the selected interface that
 *      is up with an address of the family asked for, an exact name before
 *      a prefix match and non-loopback before loopback;
 *   2. else, when the master's address is known: the local address the
 *      kernel's routing table uses to reach it;
 *   3. else bind to every interface and publish the first non-loopback
 *      address that is up (127.0.0.1 when there is none). */
#ifndef XCOLL_CORE_NETADDR_H
#define XCOLL_CORE_NETADDR_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#include "xcoll.h"

typedef struct xcoll_netaddr {
  struct in_addr bind_addr;    /* what to bind (INADDR_ANY in case 3) */
  struct in_addr publish_addr; /* what peers should connect to */
  const char *why;             /* which rule chose it, for INFO logs */
} xcoll_netaddr;

/* Choose as described above (IPv4 only: an interface with only IPv6
 * addresses is reported, not used). ifname and master_addr may be NULL or "";
 * master_port only picks the route (any port gives the same). who prefixes
 * error messages ("tcp", "net socket").
 * Errors (a sentence in err, err_bytes long): XCOLL_ERR_ENV when ifname
 * is malformed or selects no interface that is up with an IPv4 address (the
 * interfaces found, IPv4 and IPv6, are listed); XCOLL_ERR_SYSTEM when getifaddrs fails. */
xcoll_status xcoll_netaddr_choose(const char *ifname, const char *master_addr,
                                  int master_port, const char *who,
                                  xcoll_netaddr *out, char *err,
                                  size_t err_bytes);

/* The family-generic form, for transports that listen on IPv4 or IPv6 (the
 * tcp backend). family is AF_INET or AF_INET6 (XCOLL_SOCKET_FAMILY), or
 * AF_UNSPEC: an interface's IPv4 address before its IPv6 one (so that an
 * interface with only IPv6 addresses is used over IPv6), and the route to
 * MASTER_ADDR in whatever family the name resolves to first. Link-local
 * IPv6 addresses are never chosen (their scope is one host). Addresses come
 * back with port 0. Errors as xcoll_netaddr_choose. */
typedef struct xcoll_netaddr_any {
  struct sockaddr_storage bind_addr;    /* what to bind */
  struct sockaddr_storage publish_addr; /* what peers should connect to */
  const char *why;                      /* which rule chose it */
} xcoll_netaddr_any;

xcoll_status xcoll_netaddr_choose_any(const char *ifname, int family,
                                      const char *master_addr, int master_port,
                                      const char *who, xcoll_netaddr_any *out,
                                      char *err, size_t err_bytes);

/* sa as "10.0.0.2:5000" or "[fd00::2]:5000" into out (out_bytes; 64 is
 * enough). */
void xcoll_netaddr_format(const struct sockaddr_storage *sa, char *out,
                          size_t out_bytes);

/* Parse xcoll_netaddr_format's text (numeric addresses only) into sa and
 * its length. Returns 0, or -1 if text is not host:port / [v6]:port. */
int xcoll_netaddr_parse(const char *text, struct sockaddr_storage *sa,
                        socklen_t *len);

/* The name of the interface that holds addr into name (IF_NAMESIZE bytes),
 * "any" for INADDR_ANY, or "" when none does. */
void xcoll_netaddr_ifname(struct in_addr addr, char *name);

#endif
