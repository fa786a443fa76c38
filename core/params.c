/* params.c - the table of XCOLL_* parameters and the readers that take
 * their defaults and ranges from it (see params.h). Change a default or a
 * range here and the library, xcoll-info and its test follow. */
#include "params.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "algorithm.h"
#include "device.h"
#include "env.h"
#include "error.h"
#include "ifname.h"
#include "log.h"

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const protocols[] = {"simple", "ll", "auto", NULL};
static const char *const socket_families[] = {"AF_INET", "AF_INET6", NULL};
static const char *const ucx_err_modes[] = {"auto", "peer", NULL};
static const char *const on_off_auto[] = {"0", "1", "auto", NULL};
static const char *const ib_faults[] = {"skip_cts", "reuse_cts", "bad_rkey",
                                        NULL};

static xcoll_status check_subsys(const char *value) {
  unsigned mask = 0;
  char why[512];
  if (xcoll_log_parse_subsys(value, &mask, why, sizeof why) != 0)
    return xcoll_error(NULL, XCOLL_ERR_ENV, "%s", why);
  return XCOLL_SUCCESS;
}

/* The device the library would bind: malformed is XCOLL_ERR_ENV, a CUDA
 * device XCOLL_ERR_NOT_SUPPORTED in this build (as at comm creation). */
static xcoll_status check_device(const char *value) {
  (void)value; /* xcoll_device_from_env reads the same variable */
  int device = XCOLL_DEVICE_HOST;
  xcoll_status status = xcoll_device_from_env(0, &device);
  if (status == XCOLL_SUCCESS)
    status = xcoll_device_check(device, "XCOLL_DEVICE");
  return status;
}

static xcoll_status check_algo(const char *value) {
  return xcoll_algorithm_check_value(value);
}

/* nccl_like's FIFO: XCOLL_STEPS (8) slots of whole 16-byte LL lines; the
 * backend also requires a multiple of 128 bytes (backends/nccl_like). */
#define NL_BUFFSIZE_MIN (8.0 * 256.0)

static const xcoll_param params[] = {
    {"XCOLL_BACKEND", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "tcp", NULL, NULL,
     "backend: one of those compiled in (xcoll-info lists them)", 0},
    {"XCOLL_DEVICE", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "host", NULL,
     check_device, "device to bind: host, cuda (LOCAL_RANK's), cuda:N, N", 0},
    {"XCOLL_DEBUG", XCOLL_PARAM_CHOICE, NULL, 0, 0, 0, "WARN",
     xcoll_log_level_names, NULL,
     "log level: NONE, VERSION, WARN, INFO, TRACE", 0},
    {"XCOLL_DEBUG_SUBSYS", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "ALL", NULL,
     check_subsys,
     "INFO/TRACE subsystems: INIT,COLL,P2P,NET,ALLOC,BOOTSTRAP,ENV,TUNING,"
     "PROXY,ALL; ^ excludes",
     0},
    {"XCOLL_DEBUG_FILE", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "stderr", NULL, NULL,
     "log file; %h host name, %p pid, %% a percent sign", 0},
    {"XCOLL_ALGO", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "by size and world size",
     NULL, check_algo, "force algorithms: ring, or allreduce:rabenseifner,...",
     0},
    {"XCOLL_TIMEOUT_S", XCOLL_PARAM_DOUBLE, NULL, 300, 0.001, 1e7, NULL, NULL,
     NULL, "seconds any wait may last without progress", 0},
    {"XCOLL_STORE_EXTERNAL", XCOLL_PARAM_INT, NULL, 0, 0, 1, NULL, NULL, NULL,
     "1: the launcher serves the rendezvous store at MASTER_ADDR:MASTER_PORT "
     "(xcollrun --store-host launcher), so rank 0 starts none and the store "
     "outlives any rank",
     0},
    {"XCOLL_SOCKET_IFNAME", XCOLL_PARAM_TEXT, NULL, 0, 0, 0,
     "route to MASTER_ADDR", NULL, xcoll_ifname_check,
     "interfaces: eth,ib prefixes; =eth0 exact; ^docker,lo excludes", 0},
    {"XCOLL_SOCKET_FAMILY", XCOLL_PARAM_CHOICE, "tcp", 0, 0, 0,
     "either, IPv4 first", socket_families, NULL,
     "address family the tcp backend listens on", 0},
    {"XCOLL_NSOCKS_PERPEER", XCOLL_PARAM_INT, NULL, 1, 1, 16, NULL, NULL, NULL,
     "sockets per peer (tcp, net socket)", 0},
    {"XCOLL_SOCKET_CC", XCOLL_PARAM_TEXT, "nccl_like", 0, 0, 0, "auto", NULL,
     NULL,
     "net socket's TCP congestion control: auto is reno within a host "
     "(no pacing), the system's elsewhere; system; or a name",
     0},
    {"XCOLL_SOCKET_UNIX", XCOLL_PARAM_INT, "nccl_like", 1, 0, 1, NULL, NULL,
     NULL,
     "1: net socket connects ranks of one host over Unix-domain sockets; "
     "0: TCP",
     0},
    {"XCOLL_CHUNK_SIZE", XCOLL_PARAM_SIZE, NULL, 512 * KIB, 8, GIB, NULL, NULL,
     NULL, "pipelining unit of host algorithms (default per backend)", 0},
    {"XCOLL_TRACE", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "off", NULL, NULL,
     "Chrome trace JSON path; %r rank, %p pid", 0},
    {"XCOLL_FLIGHT_RECORDER", XCOLL_PARAM_INT, NULL, 1024, 0, 1 << 20, NULL,
     NULL, NULL, "calls each communicator's flight recorder keeps; 0 none",
     0},
    {"XCOLL_FLIGHT_RECORDER_DIR", XCOLL_PARAM_TEXT, NULL, 0, 0, 0,
     "unset: no automatic dumps", NULL, NULL,
     "directory of flight recorder dumps (timeout, desync, peer failure)", 0},
    {"XCOLL_FLIGHT_RECORDER_SIGNAL", XCOLL_PARAM_INT, NULL, 0, 0, 1, NULL,
     NULL, NULL, "1: SIGUSR1 dumps every communicator's flight recorder", 0},
    {"XCOLL_STORE_MAX_BYTES", XCOLL_PARAM_SIZE, NULL, 256 * MIB, MIB,
     (double)((size_t)1 << 40), NULL, NULL, NULL,
     "bytes of keys and values rank 0's store holds", 0},
    {"XCOLL_STORE_BIND", XCOLL_PARAM_TEXT, NULL, 0, 0, 0,
     "MASTER_ADDR's address", NULL, NULL,
     "where rank 0's store listens; 0.0.0.0, :: or * for all", 0},
    {"XCOLL_JOB_ID", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "MASTER_ADDR:MASTER_PORT",
     NULL, NULL, "the job's name in the rendezvous handshake", 0},
    {"XCOLL_AUTH_TOKEN", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "unset", NULL, NULL,
     "the job's secret (xcollrun sets one)", 0},
    {"XCOLL_AUTH_FILE", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "unset", NULL, NULL,
     "file holding the secret (mode 600)", 0},
    {"XCOLL_NET", XCOLL_PARAM_TEXT, "nccl_like", 0, 0, 0, "socket", NULL, NULL,
     "nccl_like's net plugin: socket, ucx, ibverbs as built, or NAME for "
     "libxcoll-net-NAME.so",
     0},
    {"XCOLL_NET_PLUGIN", XCOLL_PARAM_TEXT, "nccl_like", 0, 0, 0, "unset", NULL,
     NULL,
     "external net plugin, wins over XCOLL_NET: NAME, a .so file or a path "
     "(net/net.c)",
     0},
    {"XCOLL_NCHANNELS", XCOLL_PARAM_INT, "nccl_like", 2, 1, 32, NULL, NULL,
     NULL,
     "nccl_like's channels (rings run side by side); unset: a host rank's "
     "cores per local rank, at most this default, a GPU rank's SMs / 8, at "
     "least this default and at most 16; the smallest over ranks",
     0},
    {"XCOLL_BUFFSIZE", XCOLL_PARAM_SIZE, "nccl_like", 4 * MIB, NL_BUFFSIZE_MIN,
     GIB, NULL, NULL, NULL,
     "nccl_like's FIFO bytes per connection, a multiple of 128", 0},
    {"XCOLL_PROTO", XCOLL_PARAM_CHOICE, "nccl_like", 0, 0, 0, "auto", protocols,
     NULL, "nccl_like's protocol: auto is LL up to 4 KiB", 0},
    {"XCOLL_WAIT_RUNS", XCOLL_PARAM_INT, "nccl_like", 1, 0, 1, NULL, NULL, NULL,
     "1: a waiting thread runs its op's kernels", 0},
    {"XCOLL_P2P_DISABLE", XCOLL_PARAM_INT, "nccl_like", 0, 0, 1, NULL, NULL,
     NULL,
     "1: GPU ranks of one host connect over shared host memory (shm) or "
     "the net plugin, not each other's device memory (NCCL_P2P_DISABLE)",
     0},
    {"XCOLL_SHM_DISABLE", XCOLL_PARAM_INT, "nccl_like", 0, 0, 1, NULL, NULL,
     NULL,
     "1: ranks of one host connect over the net plugin, not shared "
     "memory (NCCL_SHM_DISABLE)",
     0},
    {"XCOLL_SHM_CMA", XCOLL_PARAM_INT, "nccl_like", 0, 0, 1, NULL, NULL, NULL,
     "1: large messages on the shm mesh are copied once, by the receiver, "
     "from the sender's buffer (process_vm_readv) where the kernel allows "
     "it; 0: always through the ring (two copies)",
     0},
    {"XCOLL_SHM_CMA_MIN", XCOLL_PARAM_SIZE, "nccl_like", 64 * KIB, 1, GIB,
     NULL, NULL, NULL,
     "smallest message (bytes) the shm mesh sends with one copy (CMA)", 0},
    {"XCOLL_DIRECT", XCOLL_PARAM_INT, "nccl_like", 1, 0, 1, NULL, NULL, NULL,
     "1: SIMPLE sends go from user memory, not a slot copy (net socket, ucx)",
     0},
    {"XCOLL_BRUCK", XCOLL_PARAM_INT, "nccl_like", 1, 0, 1, NULL, NULL, NULL,
     "1: allreduce and allgather <= 4 KiB over LL run Bruck's allgather "
     "over direct connections (3 to 16 host ranks, net socket or ucx)",
     0},
    {"XCOLL_PAIRWISE", XCOLL_PARAM_CHOICE, "nccl_like", 0, 0, 0, "auto",
     on_off_auto, NULL,
     "1: SIMPLE allreduces send each piece straight to the rank that "
     "reduces it, in the ring's order (2 to 16 host ranks, net socket or "
     "ucx); auto: when a host has more ranks than cores",
     0},
    {"XCOLL_RABENSEIFNER", XCOLL_PARAM_INT, "nccl_like", 1, 0, 1, NULL, NULL,
     NULL,
     "1: where the pairwise allreduce runs and the world size is a power of "
     "two, run Rabenseifner's halving and doubling over its links instead",
     0},
    {"XCOLL_UCX_SPIN_US", XCOLL_PARAM_INT, "ucx", 1000, 0, 1e7, NULL, NULL,
     NULL, "microseconds ucx polls before it sleeps", 0},
    {"XCOLL_UCX_ERR_MODE", XCOLL_PARAM_CHOICE, "ucx,nccl_like", 0, 0, 0,
     "auto", ucx_err_modes, NULL,
     "ucx endpoints' error handling (also nccl_like's XCOLL_NET=ucx)", 0},

    /* The ibverbs and example net plugins' own variables (net/ibverbs/,
     * net/example/): read by the plugin when nccl_like loads it. */
    {"XCOLL_IB_HCA", XCOLL_PARAM_TEXT, "nccl_like", 0, 0, 0,
     "the first device with an active port", NULL, NULL,
     "net ibverbs: RDMA devices that may be used, comma-separated", 0},
    {"XCOLL_IB_GID_INDEX", XCOLL_PARAM_INT, "nccl_like", 0, 0, 255, NULL, NULL,
     NULL, "net ibverbs: GID table index of the local address", 0},
    {"XCOLL_IB_TIMEOUT", XCOLL_PARAM_INT, "nccl_like", 20, 1, 31, NULL, NULL,
     NULL, "net ibverbs: ack timeout exponent, 4.096 us x 2^value", 0},
    {"XCOLL_IB_RETRY_CNT", XCOLL_PARAM_INT, "nccl_like", 7, 0, 7, NULL, NULL,
     NULL, "net ibverbs: retries before a send fails", 0},
    {"XCOLL_IB_DEBUG_FAULT", XCOLL_PARAM_CHOICE, "nccl_like", 0, 0, 0, "unset",
     ib_faults, NULL, "net ibverbs, tests only: a protocol bug on purpose", 0},
    {"XCOLL_IBVERBS_LIB", XCOLL_PARAM_TEXT, "nccl_like", 0, 0, 0,
     "libibverbs.so.1", NULL, NULL, "net ibverbs: the verbs library to dlopen",
     0},
    {"XCOLL_NET_EXAMPLE_ADDR", XCOLL_PARAM_TEXT, "nccl_like", 0, 0, 0,
     "127.0.0.1", NULL, NULL,
     "net example plugin (libxcoll-net-example.so): IPv4 address to listen on",
     0},

    /* Launcher variables, in xcoll_comm_init_env's order of precedence;
     * -1 is "unknown". */
    {"RANK", XCOLL_PARAM_INT, NULL, 0, 0, INT_MAX, NULL, NULL, NULL,
     "torchrun: this process's rank", 1},
    {"WORLD_SIZE", XCOLL_PARAM_INT, NULL, 1, 1, INT_MAX, NULL, NULL, NULL,
     "torchrun: number of ranks", 1},
    {"LOCAL_RANK", XCOLL_PARAM_INT, NULL, -1, 0, INT_MAX, NULL, NULL, NULL,
     "torchrun: rank on this host", 1},
    {"LOCAL_WORLD_SIZE", XCOLL_PARAM_INT, NULL, -1, 1, INT_MAX, NULL, NULL,
     NULL, "torchrun: ranks on this host", 1},
    {"MASTER_ADDR", XCOLL_PARAM_TEXT, NULL, 0, 0, 0, "127.0.0.1", NULL, NULL,
     "host of rank 0's rendezvous store", 1},
    {"MASTER_PORT", XCOLL_PARAM_INT, NULL, 29500, 1, 65535, NULL, NULL, NULL,
     "port of the rendezvous store", 1},
    {"OMPI_COMM_WORLD_RANK", XCOLL_PARAM_INT, NULL, 0, 0, INT_MAX, NULL, NULL,
     NULL, "Open MPI: rank", 1},
    {"OMPI_COMM_WORLD_SIZE", XCOLL_PARAM_INT, NULL, 1, 1, INT_MAX, NULL, NULL,
     NULL, "Open MPI: number of ranks", 1},
    {"OMPI_COMM_WORLD_LOCAL_RANK", XCOLL_PARAM_INT, NULL, -1, 0, INT_MAX, NULL,
     NULL, NULL, "Open MPI: rank on this host", 1},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", XCOLL_PARAM_INT, NULL, -1, 1, INT_MAX, NULL,
     NULL, NULL, "Open MPI: ranks on this host", 1},
    {"SLURM_PROCID", XCOLL_PARAM_INT, NULL, 0, 0, INT_MAX, NULL, NULL, NULL,
     "Slurm: rank", 1},
    {"SLURM_NTASKS", XCOLL_PARAM_INT, NULL, 1, 1, INT_MAX, NULL, NULL, NULL,
     "Slurm: number of ranks", 1},
    {"SLURM_LOCALID", XCOLL_PARAM_INT, NULL, -1, 0, INT_MAX, NULL, NULL, NULL,
     "Slurm: rank on this host", 1},
};
#define NUM_PARAMS (sizeof params / sizeof params[0])

/* NCCL's and Gloo's names for what an XCOLL_* variable sets (NCCL's
 * docs/env.html, Gloo's gloo/transport/tcp; PyTorch passes GLOO_SOCKET_IFNAME
 * to gloo). xcoll never reads them: a set one gets one warning naming the
 * variable to set instead (core/comm_create.c). */
static const xcoll_param_alias aliases[] = {
    {"NCCL_DEBUG", "XCOLL_DEBUG"},
    {"NCCL_DEBUG_SUBSYS", "XCOLL_DEBUG_SUBSYS"},
    {"NCCL_DEBUG_FILE", "XCOLL_DEBUG_FILE"},
    {"NCCL_ALGO", "XCOLL_ALGO"},
    {"NCCL_PROTO", "XCOLL_PROTO"},
    {"NCCL_SOCKET_IFNAME", "XCOLL_SOCKET_IFNAME"},
    {"NCCL_SOCKET_FAMILY", "XCOLL_SOCKET_FAMILY"},
    {"NCCL_NSOCKS_PERTHREAD", "XCOLL_NSOCKS_PERPEER"},
    {"NCCL_NET", "XCOLL_NET"},
    {"NCCL_NET_PLUGIN", "XCOLL_NET_PLUGIN"},
    {"NCCL_MIN_NCHANNELS", "XCOLL_NCHANNELS"},
    {"NCCL_MAX_NCHANNELS", "XCOLL_NCHANNELS"},
    {"NCCL_BUFFSIZE", "XCOLL_BUFFSIZE"},
    {"NCCL_P2P_DISABLE", "XCOLL_P2P_DISABLE"},
    {"NCCL_SHM_DISABLE", "XCOLL_SHM_DISABLE"},
    {"NCCL_IB_HCA", "XCOLL_IB_HCA"},
    {"NCCL_IB_GID_INDEX", "XCOLL_IB_GID_INDEX"},
    {"NCCL_IB_TIMEOUT", "XCOLL_IB_TIMEOUT"},
    {"NCCL_IB_RETRY_CNT", "XCOLL_IB_RETRY_CNT"},
    {"GLOO_SOCKET_IFNAME", "XCOLL_SOCKET_IFNAME"},
};

const xcoll_param_alias *xcoll_param_aliases(size_t *count) {
  *count = sizeof aliases / sizeof aliases[0];
  return aliases;
}

const xcoll_param *xcoll_param_table(size_t *count) {
  *count = NUM_PARAMS;
  return params;
}

const xcoll_param *xcoll_param_find(const char *name) {
  for (size_t i = 0; i < NUM_PARAMS; i++)
    if (strcmp(params[i].name, name) == 0)
      return &params[i];
  return NULL;
}

static const xcoll_param *find_kind(const char *name, xcoll_param_kind kind) {
  const xcoll_param *p = xcoll_param_find(name);
  if (p == NULL || p->kind != kind) {
    xcoll_error(NULL, XCOLL_ERR_INTERNAL,
                "%s is not a parameter of that type in core/params.c", name);
    return NULL;
  }
  return p;
}

xcoll_status xcoll_param_int(const char *name, long *out) {
  const xcoll_param *p = find_kind(name, XCOLL_PARAM_INT);
  if (p == NULL)
    return XCOLL_ERR_INTERNAL;
  return xcoll_env_int(name, (long)p->def, (long)p->min, (long)p->max, out);
}

xcoll_status xcoll_param_double(const char *name, double *out) {
  const xcoll_param *p = find_kind(name, XCOLL_PARAM_DOUBLE);
  if (p == NULL)
    return XCOLL_ERR_INTERNAL;
  return xcoll_env_double(name, p->def, p->min, p->max, out);
}

xcoll_status xcoll_param_choice(const char *name, int *index) {
  const xcoll_param *p = find_kind(name, XCOLL_PARAM_CHOICE);
  if (p == NULL)
    return XCOLL_ERR_INTERNAL;
  return xcoll_env_choice(name, p->choices, index);
}

void xcoll_param_format_size(size_t bytes, char *out, size_t out_bytes) {
  static const char suffixes[] = {'G', 'M', 'K'};
  for (int i = 0; i < 3; i++) {
    size_t unit = (size_t)1 << (10 * (3 - i));
    if (bytes >= unit && bytes % unit == 0) {
      snprintf(out, out_bytes, "%zu%c", bytes / unit, suffixes[i]);
      return;
    }
  }
  snprintf(out, out_bytes, "%zu", bytes);
}

xcoll_status xcoll_param_size(const char *name, size_t def_bytes, size_t *out) {
  const xcoll_param *p = find_kind(name, XCOLL_PARAM_SIZE);
  if (p == NULL)
    return XCOLL_ERR_INTERNAL;
  size_t def = def_bytes != 0 ? def_bytes : (size_t)p->def;
  xcoll_status status = xcoll_env_size(name, def, out);
  if (status != XCOLL_SUCCESS)
    return status;
  if ((double)*out < p->min || (double)*out > p->max) {
    char min[32], max[32], shown[32];
    xcoll_param_format_size((size_t)p->min, min, sizeof min);
    xcoll_param_format_size((size_t)p->max, max, sizeof max);
    xcoll_param_format_size(def, shown, sizeof shown);
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s=%s is out of range: expected %s to %s bytes "
                       "(default %s)",
                       name, xcoll_env_str(name), min, max, shown);
  }
  return XCOLL_SUCCESS;
}

int xcoll_param_read_by(const xcoll_param *p, const char *backend) {
  if (p->backend == NULL)
    return 1;
  size_t name_bytes = strlen(backend);
  for (const char *s = p->backend; *s != '\0';) {
    const char *comma = strchr(s, ',');
    size_t bytes = comma ? (size_t)(comma - s) : strlen(s);
    if (bytes == name_bytes && strncmp(s, backend, bytes) == 0)
      return 1;
    s += bytes + (comma ? 1 : 0);
  }
  return 0;
}

xcoll_status xcoll_param_check(const xcoll_param *p) {
  const char *value = xcoll_env_str(p->name);
  if (value == NULL)
    return XCOLL_SUCCESS;
  long as_long;
  double as_double;
  size_t as_size;
  int index;
  switch (p->kind) {
  case XCOLL_PARAM_INT:
    return xcoll_param_int(p->name, &as_long);
  case XCOLL_PARAM_DOUBLE:
    return xcoll_param_double(p->name, &as_double);
  case XCOLL_PARAM_SIZE:
    return xcoll_param_size(p->name, 0, &as_size);
  case XCOLL_PARAM_CHOICE:
    return xcoll_param_choice(p->name, &index);
  case XCOLL_PARAM_TEXT:
    return p->check ? p->check(value) : XCOLL_SUCCESS;
  }
  return XCOLL_SUCCESS;
}

void xcoll_param_format_default(const xcoll_param *p, char *out,
                                size_t out_bytes) {
  switch (p->kind) {
  case XCOLL_PARAM_INT:
    snprintf(out, out_bytes, "%ld", (long)p->def);
    break;
  case XCOLL_PARAM_DOUBLE:
    snprintf(out, out_bytes, "%g", p->def);
    break;
  case XCOLL_PARAM_SIZE:
    xcoll_param_format_size((size_t)p->def, out, out_bytes);
    break;
  default:
    snprintf(out, out_bytes, "%s", p->def_text ? p->def_text : "");
  }
}
