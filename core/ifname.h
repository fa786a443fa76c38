/* ifname.h - XCOLL_SOCKET_IFNAME's syntax, the one NCCL_SOCKET_IFNAME uses:
 *
 *   eth          interfaces whose name starts with "eth" (eth0, eth1...)
 *   =eth0        the interface called exactly "eth0"
 *   eth,ib       a comma list: any entry may match
 *   ^docker,lo   every interface except those starting with docker or lo
 *   ^=lo         every interface except the one called exactly "lo"
 *
 * A leading '^' excludes (it applies to the whole list), a '=' after it (or
 * at the start) asks for exact names. The matcher is pure (no system calls)
 * so that it can be unit-tested; core/netaddr.c applies it to the machine's
 * interfaces, IPv4 and IPv6 alike. */
#ifndef XCOLL_CORE_IFNAME_H
#define XCOLL_CORE_IFNAME_H

#include <stddef.h>

#include "xcoll.h"

#define XCOLL_IFNAME_MAX_ENTRIES 32
#define XCOLL_IFNAME_ENTRY_BYTES 64

typedef struct xcoll_ifname_spec {
  int exclude; /* 1: '^' given, the list says which interfaces NOT to use */
  int exact;   /* 1: '=' given, names match whole, not as prefixes */
  int count;   /* entries in names (at least 1) */
  char names[XCOLL_IFNAME_MAX_ENTRIES][XCOLL_IFNAME_ENTRY_BYTES];
} xcoll_ifname_spec;

/* Parse value (not NULL, not empty) into spec. Errors: XCOLL_ERR_ENV naming
 * XCOLL_SOCKET_IFNAME and the accepted form, for an empty entry ("eth,,ib",
 * "^"), more than XCOLL_IFNAME_MAX_ENTRIES entries, or an entry longer than
 * an interface name can be. */
xcoll_status xcoll_ifname_parse(const char *value, xcoll_ifname_spec *spec);

/* 1 if the interface called name is selected by spec, else 0. */
int xcoll_ifname_match(const xcoll_ifname_spec *spec, const char *name);

/* Parse only, for xcoll-info (the params table's checker). */
xcoll_status xcoll_ifname_check(const char *value);

/* One address of one interface, as getifaddrs lists them. */
typedef struct xcoll_ifaddr_entry {
  const char *name; /* interface name */
  int family;       /* AF_INET or AF_INET6 */
  int up;           /* IFF_UP */
  int loopback;     /* IFF_LOOPBACK */
} xcoll_ifaddr_entry;

/* Choose among entries[0..count) an address of family (AF_INET or AF_INET6;
 * AF_UNSPEC: either, IPv4 preferred) of an interface that is up and
 * selected by spec: an interface whose name equals an entry before one that
 * only starts with it, a non-loopback interface before loopback, then list
 * order. Returns the index, or -1 with a sentence in why (why_bytes) saying
 * what matched: no interface at all, or matching interfaces that are down or
 * have addresses of the other family only (the socket net plugin listens on
 * IPv4 only; the tcp backend on either, see XCOLL_SOCKET_FAMILY). */
int xcoll_ifname_pick(const xcoll_ifname_spec *spec, int family,
                      const xcoll_ifaddr_entry *entries, size_t count,
                      char *why, size_t why_bytes);

#endif
