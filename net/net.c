/* net.c - choosing the net plugin (XCOLL_NET, XCOLL_NET_PLUGIN), loading
 * an external one with dlopen, and the log bridge from plugins to core's log.
 *
 * NCCL's model (src/plugin/net.cc): an external plugin is a shared object
 * named libxcoll-net-NAME.so (found through the dynamic loader's search path,
 * LD_LIBRARY_PATH included) or given by path, exporting one versioned struct.
 * The choice is made once per process for each setting and cached, so that
 * every communicator of a process talks through the same plugin. */
#define XCOLL_LOG_SUBSYS XCOLL_SUBSYS_NET /* log.h */
#include "net.h"

#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"

#define NET_LAST_ERROR_BYTES 512
/* Different settings seen by one process; a test that switches XCOLL_NET
 * between calls is the only user of more than one. */
#define NET_CACHE_ENTRIES 8

static _Thread_local char last_error[NET_LAST_ERROR_BYTES];

void xcoll_net_log_bridge(xcoll_net_log_level level, const char *message) {
  if (message == NULL) return;
  switch (level) {
  case XCOLL_NET_LOG_ERROR:
    snprintf(last_error, sizeof last_error, "%s", message);
    XCOLL_WARN("%s", message);
    break;
  case XCOLL_NET_LOG_WARN:
    XCOLL_WARN("%s", message);
    break;
  case XCOLL_NET_LOG_INFO:
    XCOLL_INFO("%s", message);
    break;
  case XCOLL_NET_LOG_ERROR_EXPECTED:
    snprintf(last_error, sizeof last_error, "%s", message);
    XCOLL_INFO("%s", message);
    break;
  default:
    XCOLL_TRACE("%s", message);
    break;
  }
}

const char *xcoll_net_last_error(void) { return last_error; }

typedef struct net_choice {
  char key[512]; /* "XCOLL_NET_PLUGIN=..." or "XCOLL_NET=..." */
  const xcoll_net_v1 *net;
  void *library; /* dlopen handle, kept open for the process's life */
} net_choice;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static net_choice cache[NET_CACHE_ENTRIES];
static int cache_count;

/* Record the error in the thread's buffer and in why; return status. */
static xcoll_status fail(char *why, size_t why_bytes, xcoll_status status,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static xcoll_status fail(char *why, size_t why_bytes, xcoll_status status,
                         const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (why != NULL && why_bytes > 0) snprintf(why, why_bytes, "%s", message);
  return xcoll_error(NULL, status, "%s", message);
}

/* Every function pointer of an external plugin must be filled in: a NULL
 * one would crash the proxy thread much later, far from its cause. */
static const char *missing_field(const xcoll_net_v1 *n) {
  if (n->name == NULL) return "name";
#define NET_REQUIRE(field)                                                     \
  if (n->field == NULL) return #field
  NET_REQUIRE(init);
  NET_REQUIRE(devices);
  NET_REQUIRE(get_properties);
  NET_REQUIRE(listen);
  NET_REQUIRE(connect);
  NET_REQUIRE(accept);
  NET_REQUIRE(reg_mr);
  NET_REQUIRE(dereg_mr);
  NET_REQUIRE(isend);
  NET_REQUIRE(irecv);
  NET_REQUIRE(test);
  NET_REQUIRE(close_send);
  NET_REQUIRE(close_recv);
  NET_REQUIRE(close_listen);
#undef NET_REQUIRE
  return NULL;
}

/* dlopen the plugin named by variable (value: a NAME, a path or a file
 * name). */
static xcoll_status load_external(const char *variable, const char *value,
                                  const xcoll_net_v1 **net, void **library,
                                  char *why, size_t why_bytes) {
  char file[512];
  /* A path, or a file name the loader can find ("libfoo.so.1"), is used as
   * given; a bare NAME becomes libxcoll-net-NAME.so. */
  if (strchr(value, '/') != NULL || strstr(value, ".so") != NULL)
    snprintf(file, sizeof file, "%s", value);
  else
    snprintf(file, sizeof file, "libxcoll-net-%s.so", value);
  void *lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *text = dlerror();
    return fail(why, why_bytes, XCOLL_ERR_ENV,
                "%s=%s: cannot load the net plugin %s: %s; give a path to the "
                "shared object, put its folder in LD_LIBRARY_PATH, or use a "
                "built-in plugin with XCOLL_NET=socket%s",
                variable, value, file, text ? text : "unknown dlopen error",
#ifdef XCOLL_HAVE_UCX
                "|ucx"
#else
                ""
#endif
    );
  }
  /* A plugin that knows the optional entries exports the v2 name; one
   * that does not has a struct that ends before them, so only its v1 fields
   * are read, into a copy whose optional entries are NULL. */
  dlerror();
  const xcoll_net_v1 *found = dlsym(lib, XCOLL_NET_PLUGIN_SYMBOL_V2);
  const char *text = dlerror();
  int v1_only = found == NULL || text != NULL;
  if (v1_only) {
    dlerror();
    found = dlsym(lib, XCOLL_NET_PLUGIN_SYMBOL);
    text = dlerror();
  }
  if (found == NULL || text != NULL) {
    xcoll_status s =
        fail(why, why_bytes, XCOLL_ERR_ENV,
             "%s=%s: %s does not export the symbol %s (%s); a net plugin "
             "must define `const xcoll_net_v1 %s` (see docs/net-plugins.md)",
             variable, value, file, XCOLL_NET_PLUGIN_SYMBOL,
             text ? text : "its value is NULL", XCOLL_NET_PLUGIN_SYMBOL);
    dlclose(lib);
    return s;
  }
  const char *missing = missing_field(found);
  if (missing != NULL) {
    xcoll_status s = fail(why, why_bytes, XCOLL_ERR_ENV,
                          "%s=%s: the plugin in %s leaves the field '%s' of %s "
                          "NULL; every field is required (see "
                          "docs/net-plugins.md)",
                          variable, value, file, missing,
                          XCOLL_NET_PLUGIN_SYMBOL);
    dlclose(lib);
    return s;
  }
  if (v1_only) {
    /* Kept for the process's life, like the library (the cache holds it). */
    xcoll_net_v1 *copy = calloc(1, sizeof *copy);
    if (copy == NULL) {
      dlclose(lib);
      return fail(why, why_bytes, XCOLL_ERR_NO_MEMORY,
                  "%s=%s: out of memory loading the net plugin", variable,
                  value);
    }
    memcpy(copy, found, offsetof(xcoll_net_v1, get_fds));
    found = copy;
  }
  *net = found;
  *library = lib;
  return XCOLL_SUCCESS;
}

/* Pick (without initialising) the plugin the environment names. */
static xcoll_status choose(const char *plugin_var, const char *net_var,
                           const xcoll_net_v1 **net, void **library,
                           char *why, size_t why_bytes) {
  *library = NULL;
  if (plugin_var != NULL && plugin_var[0] != '\0')
    return load_external("XCOLL_NET_PLUGIN", plugin_var, net, library, why,
                         why_bytes);
  const char *name = net_var != NULL && net_var[0] != '\0' ? net_var : "socket";
  if (strcmp(name, xcoll_net_socket.name) == 0) {
    *net = &xcoll_net_socket;
    return XCOLL_SUCCESS;
  }
#ifdef XCOLL_HAVE_UCX
  if (strcmp(name, xcoll_net_ucx.name) == 0) {
    *net = &xcoll_net_ucx;
    return XCOLL_SUCCESS;
  }
#else
  if (strcmp(name, "ucx") == 0)
    return fail(why, why_bytes, XCOLL_ERR_ENV,
                "XCOLL_NET=ucx: this xcoll was built without UCX (install "
                "libucx-dev and rebuild with -DXCOLL_WITH_UCX=ON), or use "
                "XCOLL_NET=socket");
#endif
#ifdef XCOLL_HAVE_IBVERBS
  if (strcmp(name, xcoll_net_ibverbs.name) == 0) {
    *net = &xcoll_net_ibverbs;
    return XCOLL_SUCCESS;
  }
#else
  if (strcmp(name, "ibverbs") == 0)
    return fail(why, why_bytes, XCOLL_ERR_ENV,
                "XCOLL_NET=ibverbs: this xcoll was built without the verbs "
                "headers (install libibverbs-dev and rebuild with "
                "-DXCOLL_WITH_IBVERBS=ON), or use XCOLL_NET=socket");
#endif
  /* Any other name is an external plugin, libxcoll-net-NAME.so. */
  return load_external("XCOLL_NET", name, net, library, why, why_bytes);
}

xcoll_status xcoll_net_select(const xcoll_net_v1 **net, char *why,
                              size_t why_bytes) {
  if (why != NULL && why_bytes > 0) why[0] = '\0';
  if (net == NULL)
    return fail(why, why_bytes, XCOLL_ERR_INVALID_ARGUMENT,
                "xcoll_net_select: net is NULL");
  *net = NULL;
  const char *plugin_var = getenv("XCOLL_NET_PLUGIN");
  const char *net_var = getenv("XCOLL_NET");
  char key[512];
  if (plugin_var != NULL && plugin_var[0] != '\0')
    snprintf(key, sizeof key, "XCOLL_NET_PLUGIN=%s", plugin_var);
  else
    snprintf(key, sizeof key, "XCOLL_NET=%s",
             net_var != NULL && net_var[0] != '\0' ? net_var
                                                   : "socket (default)");

  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < cache_count; i++) {
    if (strcmp(cache[i].key, key) == 0) {
      *net = cache[i].net;
      pthread_mutex_unlock(&cache_lock);
      if (why != NULL && why_bytes > 0)
        snprintf(why, why_bytes, "net plugin %s chosen by %s", (*net)->name,
                 key);
      return XCOLL_SUCCESS;
    }
  }
  const xcoll_net_v1 *chosen = NULL;
  void *library = NULL;
  xcoll_status s = choose(plugin_var, net_var, &chosen, &library, why,
                          why_bytes);
  if (s == XCOLL_SUCCESS) {
    last_error[0] = '\0';
    s = chosen->init(xcoll_net_log_bridge);
    if (s != XCOLL_SUCCESS) {
      s = fail(why, why_bytes, s, "%s: the net plugin %s failed to start: %s",
               key, chosen->name,
               last_error[0] ? last_error : "(it gave no reason)");
      if (library != NULL) dlclose(library);
    }
  }
  if (s == XCOLL_SUCCESS) {
    if (cache_count < NET_CACHE_ENTRIES) {
      net_choice *c = &cache[cache_count++];
      snprintf(c->key, sizeof c->key, "%s", key);
      c->net = chosen;
      c->library = library;
    }
    /* else: not cached; the library stays loaded (its comms may be alive) */
    *net = chosen;
    if (why != NULL && why_bytes > 0)
      snprintf(why, why_bytes, "net plugin %s chosen by %s", chosen->name, key);
    XCOLL_INFO("net plugin %s chosen by %s", chosen->name, key);
  }
  pthread_mutex_unlock(&cache_lock);
  return s;
}
