/* ifname.c - parsing and matching XCOLL_SOCKET_IFNAME (see ifname.h). */
#include "ifname.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "error.h"

#define IFNAME_FORM                                                            \
  "a comma list of interface name prefixes (eth,ib), '=' first for exact "     \
  "names (=eth0), '^' first to exclude (^docker,lo or ^=lo)"

xcoll_status xcoll_ifname_parse(const char *value, xcoll_ifname_spec *spec) {
  memset(spec, 0, sizeof *spec);
  const char *cursor = value;
  if (*cursor == '^') {
    spec->exclude = 1;
    cursor++;
  }
  if (*cursor == '=') {
    spec->exact = 1;
    cursor++;
  }
  for (;;) {
    const char *end = strchr(cursor, ',');
    size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
    if (length == 0)
      return xcoll_error(NULL, XCOLL_ERR_ENV,
                         "XCOLL_SOCKET_IFNAME='%.100s' has an empty entry: "
                         "expected %s",
                         value, IFNAME_FORM);
    if (length >= XCOLL_IFNAME_ENTRY_BYTES)
      return xcoll_error(NULL, XCOLL_ERR_ENV,
                         "XCOLL_SOCKET_IFNAME='%.100s' has an entry of %zu "
                         "characters: interface names are shorter than %d",
                         value, length, XCOLL_IFNAME_ENTRY_BYTES);
    if (spec->count == XCOLL_IFNAME_MAX_ENTRIES)
      return xcoll_error(NULL, XCOLL_ERR_ENV,
                         "XCOLL_SOCKET_IFNAME='%.100s' has more than %d "
                         "entries",
                         value, XCOLL_IFNAME_MAX_ENTRIES);
    memcpy(spec->names[spec->count], cursor, length);
    spec->names[spec->count][length] = '\0';
    spec->count++;
    if (end == NULL)
      break;
    cursor = end + 1;
  }
  return XCOLL_SUCCESS;
}

static int entry_matches(const xcoll_ifname_spec *spec, int i,
                         const char *name) {
  if (spec->exact)
    return strcmp(name, spec->names[i]) == 0;
  return strncmp(name, spec->names[i], strlen(spec->names[i])) == 0;
}

int xcoll_ifname_match(const xcoll_ifname_spec *spec, const char *name) {
  int listed = 0;
  for (int i = 0; i < spec->count && !listed; i++)
    listed = entry_matches(spec, i, name);
  return spec->exclude ? !listed : listed;
}

xcoll_status xcoll_ifname_check(const char *value) {
  xcoll_ifname_spec spec;
  return xcoll_ifname_parse(value, &spec);
}

/* 0 for an interface whose name is one of an include list's entries, 1
 * otherwise; +2 for loopback. Lower is preferred. */
static int preference(const xcoll_ifname_spec *spec,
                      const xcoll_ifaddr_entry *entry) {
  int rank = 1;
  for (int i = 0; i < spec->count && !spec->exclude; i++)
    if (strcmp(entry->name, spec->names[i]) == 0)
      rank = 0;
  return rank + (entry->loopback ? 2 : 0);
}

int xcoll_ifname_pick(const xcoll_ifname_spec *spec, int family,
                      const xcoll_ifaddr_entry *entries, size_t count,
                      char *why, size_t why_bytes) {
  int best = -1, best_rank = 0;
  int matched = 0;
  const char *other_family = NULL, *down_name = NULL;
  for (size_t i = 0; i < count; i++) {
    const xcoll_ifaddr_entry *e = &entries[i];
    if (!xcoll_ifname_match(spec, e->name))
      continue;
    matched++;
    if (!e->up) {
      down_name = e->name;
      continue;
    }
    if (family != AF_UNSPEC && e->family != family) {
      other_family = e->name;
      continue;
    }
    /* Without a family, IPv4 first: an interface is used over IPv6 only
     * when no selected interface has an IPv4 address. */
    int rank = preference(spec, e) + (e->family == AF_INET6 ? 4 : 0);
    if (best < 0 || rank < best_rank) {
      best = (int)i;
      best_rank = rank;
    }
  }
  if (best >= 0)
    return best;
  if (why_bytes == 0)
    return -1;
  if (matched == 0)
    snprintf(why, why_bytes, "no interface matches");
  else if (other_family != NULL)
    snprintf(why, why_bytes,
             "interface %s matches but has only %s addresses that are up%s",
             other_family, family == AF_INET ? "IPv6" : "IPv4",
             family == AF_INET
                 ? "; this transport listens on IPv4 (the tcp backend takes "
                   "IPv6 unless XCOLL_SOCKET_FAMILY=AF_INET)"
                 : "");
  else
    snprintf(why, why_bytes, "interface %s matches but is down",
             down_name ? down_name : "?");
  return -1;
}
