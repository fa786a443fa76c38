/* netaddr.c - choosing the local address to listen on (see netaddr.h).
 * Moved here from backends/tcp/tcp_connect.c so that the socket net plugin
 * makes the same choice as the tcp backend. */
#include "netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Interfaces with an IPv4 address, comma separated, for error messages. */
static void list_interfaces(char *out, size_t out_bytes) {
  struct ifaddrs *ifs = NULL;
  out[0] = '\0';
  if (getifaddrs(&ifs) != 0) {
    snprintf(out, out_bytes, "(getifaddrs failed: %s)", strerror(errno));
    return;
  }
  size_t used = 0;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip,
              sizeof ip);
    int n = snprintf(out + used, out_bytes - used, "%s%s (%s)",
                     used ? ", " : "", i->ifa_name, ip);
    if (n < 0 || (size_t)n >= out_bytes - used) break;
    used += (size_t)n;
  }
  freeifaddrs(ifs);
}

/* The IPv4 address of the interface called ifname, or of the first whose
 * name starts with ifname (NCCL_SOCKET_IFNAME's prefix rule). */
static xcoll_status address_of_interface(const char *ifname, const char *who,
                                         struct in_addr *addr, char *err,
                                         size_t err_bytes) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    snprintf(err, err_bytes,
             "%s: getifaddrs failed while looking for XCOLL_SOCKET_IFNAME=%s: "
             "%s",
             who, ifname, strerror(errno));
    return XCOLL_ERR_SYSTEM;
  }
  int found = 0;
  for (int pass = 0; pass < 2 && !found; pass++) {
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP)) continue;
      int match = pass == 0 ? strcmp(i->ifa_name, ifname) == 0
                            : strncmp(i->ifa_name, ifname, strlen(ifname)) == 0;
      if (match) {
        *addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        found = 1;
      }
    }
  }
  freeifaddrs(ifs);
  if (!found) {
    char list[512];
    list_interfaces(list, sizeof list);
    snprintf(err, err_bytes,
             "%s: XCOLL_SOCKET_IFNAME=%s names no interface that is up with an "
             "IPv4 address; interfaces here: %s",
             who, ifname, list);
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
