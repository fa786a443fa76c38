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
#include <stdlib.h>
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

static socklen_t sockaddr_length(int family) {
  return family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
                            : (socklen_t)sizeof(struct sockaddr_in);
}

/* A link-local IPv6 address (fe80::/10) only means something together with
 * an interface index, which a peer on another host does not share: never
 * published. */
static int is_link_local(const struct sockaddr *sa) {
  return sa->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* The address of the interface XCOLL_SOCKET_IFNAME selects (ifname.h:
 * prefixes, =exact, ^exclude, comma lists), of family (AF_UNSPEC: IPv4
 * first). */
static xcoll_status address_of_interface(const char *ifname, int family,
                                         const char *who,
                                         struct sockaddr_storage *addr,
                                         char *err, size_t err_bytes) {
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
    int f = i->ifa_addr->sa_family;
    if ((f != AF_INET && f != AF_INET6) || is_link_local(i->ifa_addr))
      continue;
    entries[count].name = i->ifa_name;
    entries[count].family = f;
    entries[count].up = (i->ifa_flags & IFF_UP) != 0;
    entries[count].loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    nodes[count++] = i;
  }
  char why[256];
  int chosen =
      xcoll_ifname_pick(&spec, family, entries, count, why, sizeof why);
  if (chosen >= 0) {
    memset(addr, 0, sizeof *addr);
    memcpy(addr, nodes[chosen]->ifa_addr,
           sockaddr_length(nodes[chosen]->ifa_addr->sa_family));
  }
  freeifaddrs(ifs);
  if (chosen < 0) {
    char list[512];
    list_interfaces(list, sizeof list);
    snprintf(err, err_bytes,
             "%s: XCOLL_SOCKET_IFNAME=%s selects no interface that is up with "
             "an %s address (%s); interfaces here: %s",
             who, ifname,
             family == AF_INET    ? "IPv4"
             : family == AF_INET6 ? "IPv6 (not link-local)"
                                  : "IPv4 or IPv6",
             why, list);
    return XCOLL_ERR_ENV;
  }
  return XCOLL_SUCCESS;
}

/* The local address the kernel would use to reach host: a UDP "connect"
 * sends nothing but picks the route. Returns 0 on success. */
static int address_towards(const char *host, int port, int family,
                           struct sockaddr_storage *addr) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = family;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
  struct sockaddr_storage to;
  memset(&to, 0, sizeof to);
  memcpy(&to, res->ai_addr, res->ai_addrlen);
  socklen_t to_len = res->ai_addrlen;
  freeaddrinfo(res);
  uint16_t net_port = htons((uint16_t)(port > 0 ? port : 9));
  if (to.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&to)->sin6_port = net_port;
  else
    ((struct sockaddr_in *)&to)->sin_port = net_port;
  int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_storage local;
  socklen_t len = sizeof local;
  int ok = connect(fd, (struct sockaddr *)&to, to_len) == 0 &&
           getsockname(fd, (struct sockaddr *)&local, &len) == 0;
  close(fd);
  if (!ok) return -1;
  *addr = local;
  return 0;
}

/* First non-loopback address of family that is up (not link-local), else
 * the loopback address. */
static struct sockaddr_storage default_address(int family) {
  struct sockaddr_storage out;
  memset(&out, 0, sizeof out);
  out.ss_family = (sa_family_t)family;
  if (family == AF_INET6)
    ((struct sockaddr_in6 *)&out)->sin6_addr = in6addr_loopback;
  else
    ((struct sockaddr_in *)&out)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return out;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != family) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    if (is_link_local(i->ifa_addr)) continue;
    memcpy(&out, i->ifa_addr, sockaddr_length(family));
    break;
  }
  freeifaddrs(ifs);
  return out;
}

static void set_port_zero(struct sockaddr_storage *sa) {
  if (sa->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)sa)->sin6_port = 0;
  else
    ((struct sockaddr_in *)sa)->sin_port = 0;
}

xcoll_status xcoll_netaddr_choose_any(const char *ifname, int family,
                                      const char *master_addr, int master_port,
                                      const char *who, xcoll_netaddr_any *out,
                                      char *err, size_t err_bytes) {
  if (err_bytes > 0) err[0] = '\0';
  memset(out, 0, sizeof *out);
  if (ifname && ifname[0]) {
    xcoll_status s = address_of_interface(ifname, family, who,
                                          &out->bind_addr, err, err_bytes);
    set_port_zero(&out->bind_addr);
    out->publish_addr = out->bind_addr;
    out->why = "XCOLL_SOCKET_IFNAME";
    return s;
  }
  if (master_addr && master_addr[0] &&
      address_towards(master_addr, master_port, family, &out->bind_addr) ==
          0) {
    set_port_zero(&out->bind_addr);
    out->publish_addr = out->bind_addr;
    out->why = "the route to the master";
    return XCOLL_SUCCESS;
  }
  int f = family == AF_INET6 ? AF_INET6 : AF_INET;
  out->bind_addr.ss_family = (sa_family_t)f;
  if (f == AF_INET6)
    ((struct sockaddr_in6 *)&out->bind_addr)->sin6_addr = in6addr_any;
  else
    ((struct sockaddr_in *)&out->bind_addr)->sin_addr.s_addr =
        htonl(INADDR_ANY);
  out->publish_addr = default_address(f);
  out->why = "the first interface that is up (master address unknown)";
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_netaddr_choose(const char *ifname, const char *master_addr,
                                  int master_port, const char *who,
                                  xcoll_netaddr *out, char *err,
                                  size_t err_bytes) {
  xcoll_netaddr_any any;
  xcoll_status s = xcoll_netaddr_choose_any(
      ifname, AF_INET, master_addr, master_port, who, &any, err, err_bytes);
  out->why = any.why;
  if (s != XCOLL_SUCCESS) return s;
  if (any.bind_addr.ss_family != AF_INET) {
    /* MASTER_ADDR names an IPv6-only host: this caller speaks IPv4. */
    snprintf(err, err_bytes,
             "%s: the route to MASTER_ADDR=%s is IPv6; this transport "
             "listens on IPv4: set XCOLL_SOCKET_IFNAME to an interface with "
             "an IPv4 address",
             who, master_addr ? master_addr : "");
    return XCOLL_ERR_ENV;
  }
  out->bind_addr = ((struct sockaddr_in *)&any.bind_addr)->sin_addr;
  out->publish_addr = ((struct sockaddr_in *)&any.publish_addr)->sin_addr;
  return XCOLL_SUCCESS;
}

void xcoll_netaddr_format(const struct sockaddr_storage *sa, char *out,
                          size_t out_bytes) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (sa->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    snprintf(out, out_bytes, "[%s]:%d", ip, ntohs(a->sin6_port));
  } else {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(out, out_bytes, "%s:%d", ip, ntohs(a->sin_port));
  }
}

int xcoll_netaddr_parse(const char *text, struct sockaddr_storage *sa,
                        socklen_t *len) {
  char host[INET6_ADDRSTRLEN + 8];
  const char *colon = strrchr(text, ':');
  if (colon == NULL || (size_t)(colon - text) >= sizeof host) return -1;
  memcpy(host, text, (size_t)(colon - text));
  host[colon - text] = '\0';
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!end || *end || port <= 0 || port > 65535) return -1;
  memset(sa, 0, sizeof *sa);
  size_t host_len = strlen(host);
  if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
    host[host_len - 1] = '\0';
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)sa;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    *len = sizeof *a;
    return inet_pton(AF_INET6, host + 1, &a->sin6_addr) == 1 ? 0 : -1;
  }
  struct sockaddr_in *a = (struct sockaddr_in *)sa;
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)port);
  *len = sizeof *a;
  return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
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
