/*
 * xcoll-info - say what this build of xcoll contains and how the current
 * environment would configure it: the version, the compiled-in backends,
 * every XCOLL_* and launcher variable with its value and default (checked
 * the way the library checks it), and whether UCX and CUDA are available.
 * Run it first when a job behaves unexpectedly, as one runs ucx_info or
 * nvidia-smi. Exit status: 0, or 1 when a variable is malformed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "env.h"
#include "xcoll.h"

/* How a variable is checked, mirroring the reader the library uses for it. */
typedef enum env_kind {
  ENV_TEXT,   /* free text (a path, a name): not checked here */
  ENV_CHOICE, /* one of choices, case-insensitive */
  ENV_INT,    /* integer in [min, max] */
  ENV_DOUBLE, /* finite number in [min, max] */
  ENV_SIZE    /* bytes with optional K/M/G */
} env_kind;

typedef struct env_entry {
  const char *name;
  const char *fallback; /* what applies when unset, in words */
  const char *meaning;
  env_kind kind;
  long min, max;
  const char *const *choices;
} env_entry;

static const char *const debug_levels[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE", NULL};
static const char *const net_plugins[] = {"socket", "ucx", "ibverbs", NULL};

static const env_entry xcoll_variables[] = {
    {"XCOLL_BACKEND", "tcp", "backend: tcp, ucx or nccl_like", ENV_TEXT, 0, 0, NULL},
    {"XCOLL_DEBUG", "WARN", "log level: NONE, VERSION, WARN, INFO, TRACE", ENV_CHOICE, 0, 0,
     debug_levels},
    {"XCOLL_DEBUG_FILE", "stderr", "log file; %h host name, %p pid", ENV_TEXT, 0,
     0, NULL},
    {"XCOLL_ALGO", "by size and world size",
     "force an algorithm, e.g. ring or recursive_doubling", ENV_TEXT, 0, 0, NULL},
    {"XCOLL_TIMEOUT_S", "300", "seconds any wait may last", ENV_DOUBLE, 0,
     1000000000L, NULL},
    {"XCOLL_SOCKET_IFNAME", "any interface",
     "network interface for the tcp backend", ENV_TEXT, 0, 0, NULL},
    {"XCOLL_NSOCKS_PERPEER", "1", "sockets per peer (tcp)", ENV_INT, 1, 16, NULL},
    {"XCOLL_CHUNK_SIZE", "512K", "pipelining unit in bytes", ENV_SIZE, 0, 0, NULL},
    {"XCOLL_NET", "socket", "nccl_like's net plugin: socket, ucx, ibverbs",
     ENV_CHOICE, 0, 0, net_plugins},
    {"XCOLL_TRACE", "off", "Chrome trace JSON path; %r rank, %p pid", ENV_TEXT,
     0, 0, NULL},
};

/* Launcher variables xcoll_comm_init_env reads, in order of precedence. */
static const env_entry launcher_variables[] = {
    {"RANK", "-", "torchrun: this process's rank", ENV_INT, 0, 1L << 30, NULL},
    {"WORLD_SIZE", "1", "torchrun: number of ranks", ENV_INT, 1, 1L << 30, NULL},
    {"LOCAL_RANK", "unknown", "torchrun: rank on this host", ENV_INT, 0,
     1L << 30, NULL},
    {"LOCAL_WORLD_SIZE", "unknown", "torchrun: ranks on this host", ENV_INT, 1,
     1L << 30, NULL},
    {"MASTER_ADDR", "127.0.0.1", "host of rank 0's rendezvous store", ENV_TEXT, 0,
     0, NULL},
    {"MASTER_PORT", "29500", "port of the rendezvous store", ENV_INT, 1, 65535,
     NULL},
    {"OMPI_COMM_WORLD_RANK", "-", "Open MPI: rank", ENV_INT, 0, 1L << 30, NULL},
    {"OMPI_COMM_WORLD_SIZE", "-", "Open MPI: number of ranks", ENV_INT, 1,
     1L << 30, NULL},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "-", "Open MPI: rank on this host", ENV_INT, 0,
     1L << 30, NULL},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "-", "Open MPI: ranks on this host", ENV_INT, 1,
     1L << 30, NULL},
    {"SLURM_PROCID", "-", "Slurm: rank", ENV_INT, 0, 1L << 30, NULL},
    {"SLURM_NTASKS", "-", "Slurm: number of ranks", ENV_INT, 1, 1L << 30, NULL},
    {"SLURM_LOCALID", "-", "Slurm: rank on this host", ENV_INT, 0, 1L << 30, NULL},
};

/* Check one variable with the library's own reader; returns 1 if malformed
 * (the reader's message is printed under the line). */
static int check_variable(const env_entry *entry) {
  xcoll_status st = XCOLL_SUCCESS;
  long as_int;
  double as_double;
  size_t as_size;
  int index;
  switch (entry->kind) {
  case ENV_CHOICE: st = xcoll_env_choice(entry->name, entry->choices, &index); break;
  case ENV_INT: st = xcoll_env_int(entry->name, 0, entry->min, entry->max, &as_int); break;
  case ENV_DOUBLE:
    st = xcoll_env_double(entry->name, 0.0, (double)entry->min, (double)entry->max,
                          &as_double);
    break;
  case ENV_SIZE: st = xcoll_env_size(entry->name, 0, &as_size); break;
  case ENV_TEXT: break;
  }
  if (st == XCOLL_SUCCESS)
    return 0;
  printf("    ^ malformed: %s\n", xcoll_last_error());
  return 1;
}

static int print_variables(const char *title, const env_entry *entries,
                           size_t count) {
  int malformed = 0;
  printf("\n%s\n", title);
  printf("  %-28s %-24s %-24s %s\n", "variable", "value", "default", "meaning");
  for (size_t i = 0; i < count; i++) {
    const char *value = xcoll_env_str(entries[i].name);
    printf("  %-28s %-24s %-24s %s\n", entries[i].name, value ? value : "(unset)",
           entries[i].fallback, entries[i].meaning);
    if (value)
      malformed += check_variable(&entries[i]);
  }
  return malformed;
}

static int backend_compiled_in(const char *name) {
  for (const xcoll_backend *const *b = xcoll_backend_list(); *b; b++)
    if (strcmp((*b)->name, name) == 0)
      return 1;
  return 0;
}

static void print_availability(void) {
  printf("\navailability\n");
  if (backend_compiled_in("ucx"))
    printf("  ucx:  compiled in (backend ucx); UCX picks its transports at run "
           "time, see `ucx_info -d`\n");
  else
    printf("  ucx:  not compiled in (apt-get install libucx-dev, then configure "
           "with -DXCOLL_WITH_UCX=ON)\n");
  /* The CUDA parts live in the nccl_like backend; its presence is the answer
   * for the build, and the driver's device nodes for the machine. */
  int cuda_built = backend_compiled_in("nccl_like");
  int cuda_device = access("/dev/nvidiactl", F_OK) == 0;
  printf("  cuda: %s; NVIDIA driver device nodes %s\n",
         cuda_built ? "nccl_like backend compiled in"
                    : "not compiled in (configure with -DXCOLL_WITH_CUDA=ON on a "
                      "machine with nvcc)",
         cuda_device ? "present (/dev/nvidiactl)" : "absent: no GPU visible");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    printf("xcoll-info (xcoll) %s\n", XCOLL_PROJECT_VERSION);
    return 0;
  }
  if (argc > 1) {
    int help = strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0;
    fprintf(help ? stdout : stderr,
            "usage: %s [--version]\n  prints the xcoll version, compiled-in "
            "backends, environment variables and UCX/CUDA availability\n",
            argv[0]);
    return help ? 0 : 2;
  }
  int version = xcoll_version();
  printf("xcoll %d.%d.%d (library), built against header %d.%d.%d\n",
         version / 10000, version / 100 % 100, version % 100, XCOLL_VERSION_MAJOR,
         XCOLL_VERSION_MINOR, XCOLL_VERSION_PATCH);

  printf("\nbackends compiled in\n");
  for (const xcoll_backend *const *b = xcoll_backend_list(); *b; b++)
    printf("  %-10s %s (backend ABI %d)\n", (*b)->name,
           (*b)->description ? (*b)->description : "", (*b)->abi_version);

  int malformed = 0;
  malformed += print_variables("xcoll variables", xcoll_variables,
                               sizeof xcoll_variables / sizeof xcoll_variables[0]);
  malformed += print_variables("launcher variables (read by xcoll_comm_init_env)",
                               launcher_variables,
                               sizeof launcher_variables / sizeof launcher_variables[0]);
  const char *backend = xcoll_env_str("XCOLL_BACKEND");
  if (backend && !backend_compiled_in(backend)) {
    printf("    ^ XCOLL_BACKEND=%s is not compiled in: pick one listed above\n",
           backend);
    malformed++;
  }
  print_availability();
  return malformed ? 1 : 0;
}
