/* netaddr.c - choosing the local address to listen on (see netaddr.h).
 * Moved here from backends/tcp/tcp_connect.c so that the socket net plugin
 * makes the same choice as the tcp backend. */
#include "netaddr.h"

#include "ifname.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"

/* Interfaces with an IPv4 or IPv6 address, comma separated, for error
 * messages: "lo (127.0.0.1), eth0 (10.0.0.2), eth0 (fe80::1)". */
static void list_interfaces(char *out, size_t out_bytes) {
  struct ifaddrs *ifs = NULL;
  out[0] = '\0';
  if (getifaddrs(&ifs) != 0) {
    snprintf(out, out_bytes, "(getifaddrs failed: %s)", strerror(errno));
    return;
  }
  size_t used = 0;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char ip[INET6_ADDRSTRLEN];
    const void *raw =
        family == AF_INET
            ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
            : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
    inet_ntop(family, raw, ip, sizeof ip);
    int n = snprintf(out + used, out_bytes - used, "%s%s (%s%s)",
                     used ? ", " : "", i->ifa_name, ip,
                     (i->ifa_flags & IFF_UP) ? "" : ", down");
    if (n < 0 || (size_t)n >= out_bytes - used) break;
    used += (size_t)n;
  }
  freeifaddrs(ifs);
}

/* The IPv4 address of the interface XCOLL_SOCKET_IFNAME selects (ifname.h:
 * prefixes, =exact, ^exclude, comma lists). */
static xcoll_status address_of_interface(const char *ifname, const char *who,
                                         struct in_addr *addr, char *err,
                                         size_t err_bytes) {
  xcoll_ifname_spec spec;
  if (xcoll_ifname_parse(ifname, &spec) != XCOLL_SUCCESS) {
    snprintf(err, err_bytes, "%s: %s", who, xcoll_last_error());
    return XCOLL_ERR_ENV;
  }
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    snprintf(err, err_bytes,
             "%s: getifaddrs failed while looking for XCOLL_SOCKET_IFNAME=%s: "
             "%s",
             who, ifname, strerror(errno));
    return XCOLL_ERR_SYSTEM;
  }
  enum { MAX_ADDRS = 256 };
  xcoll_ifaddr_entry entries[MAX_ADDRS];
  struct ifaddrs *nodes[MAX_ADDRS];
  size_t count = 0;
  for (struct ifaddrs *i = ifs; i && count < MAX_ADDRS; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    entries[count].name = i->ifa_name;
    entries[count].family = family;
    entries[count].up = (i->ifa_flags & IFF_UP) != 0;
    entries[count].loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    nodes[count++] = i;
  }
  char why[256];
  int chosen = xcoll_ifname_pick(&spec, entries, count, why, sizeof why);
  if (chosen >= 0)
    *addr = ((struct sockaddr_in *)nodes[chosen]->ifa_addr)->sin_addr;
  freeifaddrs(ifs);
  if (chosen < 0) {
    char list[512];
    list_interfaces(list, sizeof list);
    snprintf(err, err_bytes,
             "%s: XCOLL_SOCKET_IFNAME=%s selects no interface that is up with "
             "an IPv4 address (%s); interfaces here: %s",
             who, ifname, why, list);
    return XCOLL_ERR_ENV;
  }
  return XCOLL_SUCCESS;
}

/* The local address the kernel would use to reach host: a UDP "connect"
 * sends nothing but picks the route. Returns 0 on success. */
static int address_towards(const char *host, int port, struct in_addr *addr) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
  struct sockaddr_in to = *(struct sockaddr_in *)res->ai_addr;
  freeaddrinfo(res);
  to.sin_port = htons((uint16_t)(port > 0 ? port : 9));
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in local;
  socklen_t len = sizeof local;
  int ok = connect(fd, (struct sockaddr *)&to, sizeof to) == 0 &&
           getsockname(fd, (struct sockaddr *)&local, &len) == 0;
  close(fd);
  if (!ok) return -1;
  *addr = local.sin_addr;
  return 0;
}

/* First non-loopback IPv4 address that is up, else 127.0.0.1. */
static struct in_addr default_address(void) {
  struct in_addr out;
  out.s_addr = htonl(INADDR_LOOPBACK);
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return out;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(ifs);
  return out;
}

xcoll_status xcoll_netaddr_choose(const char *ifname, const char *master_addr,
                                  int master_port, const char *who,
                                  xcoll_netaddr *out, char *err,
                                  size_t err_bytes) {
  if (err_bytes > 0) err[0] = '\0';
  if (ifname && ifname[0]) {
    xcoll_status s =
        address_of_interface(ifname, who, &out->bind_addr, err, err_bytes);
    out->publish_addr = out->bind_addr;
    out->why = "XCOLL_SOCKET_IFNAME";
    return s;
  }
  if (master_addr && master_addr[0] &&
      address_towards(master_addr, master_port, &out->bind_addr) == 0) {
    out->publish_addr = out->bind_addr;
    out->why = "the route to the master";
    return XCOLL_SUCCESS;
  }
  out->bind_addr.s_addr = htonl(INADDR_ANY);
  out->publish_addr = default_address();
  out->why = "the first interface that is up (master address unknown)";
  return XCOLL_SUCCESS;
}

void xcoll_netaddr_ifname(struct in_addr addr, char *name) {
  name[0] = '\0';
  if (addr.s_addr == htonl(INADDR_ANY)) {
    snprintf(name, IF_NAMESIZE, "any");
    return;
  }
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == addr.s_addr) {
      snprintf(name, IF_NAMESIZE, "%s", i->ifa_name);
      break;
    }
  }
  freeifaddrs(ifs);
}
