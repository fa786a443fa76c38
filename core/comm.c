/* comm.c - communicators: configuration from the environment (torchrun,
 * Open MPI, Slurm), bootstrap through the rendezvous store, split, shrink,
 * abort, destroy, getters. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blame.h"
#include "comm.h"
#include "torch_store.h"
#include "device.h"
#include "staging.h"
#include "dispatch.h"
#include "env.h"
#include "params.h"
#include "error.h"
#include "log.h"
#include "request.h"
#include "trace.h"

#define DEFAULT_MASTER_ADDR "127.0.0.1"
#define DEFAULT_MASTER_PORT 29500 /* as MASTER_PORT's in core/params.c */
/* Job-global store key handing out ids to split communicators (the world is 0).
 */
#define COMM_ID_COUNTER_KEY "xcoll/next_comm_id"

void xcoll_config_init(xcoll_config *config) {
  if (config == NULL)
    return;
  memset(config, 0, sizeof *config);
  config->rank = 0;
  config->world_size = 1;
  config->local_rank = -1;
  config->local_world_size = -1;
  config->master_addr = NULL;
  config->master_port = DEFAULT_MASTER_PORT;
  config->backend = NULL;
  config->timeout_s = 0.0;
  config->device = XCOLL_DEVICE_HOST;
}

/* ---- helpers ---- */

static int comm_is_live(const xcoll_comm *comm) {
  return comm != NULL && comm->magic == XCOLL_COMM_MAGIC;
}

/* Like xcoll_comm_check, but a broken communicator still passes: getters,
 * abort and destroy must work on it. */
static xcoll_status check_live(xcoll_comm *comm, const char *function) {
  if (comm == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_USAGE,
                       "%s: comm is NULL: create one with xcoll_comm_init or "
                       "xcoll_comm_init_env",
                       function);
  if (comm->magic != XCOLL_COMM_MAGIC)
    return xcoll_error(
        NULL, XCOLL_ERR_INVALID_USAGE,
        "%s: comm is not a live communicator (already destroyed, "
        "or not made by xcoll_comm_init)",
        function);
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_check_live(xcoll_comm *comm, const char *function) {
  return check_live(comm, function);
}

xcoll_status xcoll_comm_check(xcoll_comm *comm) {
  xcoll_status status = check_live(comm, "xcoll");
  if (status != XCOLL_SUCCESS)
    return status;
  int broken = atomic_load(&comm->broken_status);
  if (broken != XCOLL_SUCCESS) {
    char reason[XCOLL_ERROR_BYTES];
    pthread_mutex_lock(&comm->error_lock);
    memcpy(reason, comm->broken_message, sizeof reason);
    pthread_mutex_unlock(&comm->error_lock);
    /* Logged once: a program with thousands of requests queued on a comm
     * that broke gets one line, not one per request. */
    if (atomic_exchange(&comm->broken_warned, 1) == 0)
      return xcoll_error(comm, (xcoll_status)broken,
                         "communicator %llu is unusable after an earlier "
                         "error; destroy it (every later call fails the "
                         "same way, without another log line). The error "
                         "was: %s",
                         (unsigned long long)comm->comm_id, reason);
    return xcoll_error_quiet(comm, (xcoll_status)broken,
                             "communicator %llu is unusable after an earlier "
                             "error; destroy it. The error was: %s",
                             (unsigned long long)comm->comm_id, reason);
  }
  return XCOLL_SUCCESS;
}

void xcoll_comm_note_algorithm(xcoll_comm *comm, const char *algorithm,
                               const char *protocol) {
  atomic_store(&comm->last_algorithm, algorithm);
  atomic_store(&comm->last_protocol, protocol);
}

xcoll_status xcoll_comm_last_algorithm(xcoll_comm_t comm,
                                       const char **algorithm,
                                       const char **protocol) {
  if (algorithm == NULL || protocol == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_last_algorithm: algorithm or protocol is "
                       "NULL");
  *algorithm = "none";
  *protocol = "none";
  /* A broken communicator still says what it ran last. */
  xcoll_status status = check_live(comm, "xcoll_comm_last_algorithm");
  if (status != XCOLL_SUCCESS)
    return status;
  const char *a = atomic_load(&comm->last_algorithm);
  const char *p = atomic_load(&comm->last_protocol);
  if (a != NULL)
    *algorithm = a;
  if (p != NULL)
    *protocol = p;
  return XCOLL_SUCCESS;
}

void xcoll_comm_set_broken(xcoll_comm *comm, xcoll_status status,
                           const char *message) {
  int expected = XCOLL_SUCCESS;
  pthread_mutex_lock(&comm->error_lock);
  if (atomic_compare_exchange_strong(&comm->broken_status, &expected,
                                     (int)status))
    snprintf(comm->broken_message, sizeof comm->broken_message, "%s", message);
  pthread_mutex_unlock(&comm->error_lock);
  if (expected == XCOLL_SUCCESS) /* this call broke it */
    xcoll_flight_on_broken(comm, status);
}

/* The options every communicator reads from XCOLL_* variables. socket_ifname
 * is a copy that comm_free releases. */
static xcoll_status read_options(const xcoll_backend *backend,
                                 xcoll_options *options) {
  /* Defaults and ranges come from core/params.c's table, which xcoll-info
   * prints: the chunk must carry one 8-byte element and stays below 1 GiB,
   * beyond which pipelining stops making sense. */
  long nsocks = 1;
  xcoll_status status = xcoll_param_int("XCOLL_NSOCKS_PERPEER", &nsocks);
  if (status != XCOLL_SUCCESS)
    return status;
  /* Each backend knows the chunk its transport moves best (tcp: 128 KiB);
   * 0 takes the table's default. */
  size_t chunk_bytes = 0;
  status = xcoll_param_size("XCOLL_CHUNK_SIZE", backend->default_chunk_bytes,
                            &chunk_bytes);
  if (status != XCOLL_SUCCESS)
    return status;
  const xcoll_param *ifname_param = xcoll_param_find("XCOLL_SOCKET_IFNAME");
  status = xcoll_param_check(ifname_param);
  if (status != XCOLL_SUCCESS)
    return status;
  options->nsocks_per_peer = (int)nsocks;
  options->chunk_bytes = chunk_bytes;
  options->socket_ifname = NULL;
  const char *ifname = xcoll_env_str("XCOLL_SOCKET_IFNAME");
  if (ifname != NULL) {
    options->socket_ifname = strdup(ifname);
    if (options->socket_ifname == NULL)
      return xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                         "cannot copy XCOLL_SOCKET_IFNAME");
  }
  return XCOLL_SUCCESS;
}

/* At INFO (subsystem ENV), once per process: every variable of
 * core/params.c's table that the environment sets, as NCCL reports the
 * NCCL_* variables it reads. */
static void log_env_settings(void) {
  static atomic_flag logged = ATOMIC_FLAG_INIT;
  if (xcoll_log_level_get() < XCOLL_LOG_INFO ||
      !xcoll_log_subsys_enabled(XCOLL_SUBSYS_ENV) ||
      atomic_flag_test_and_set(&logged))
    return;
  size_t count = 0;
  const xcoll_param *table = xcoll_param_table(&count);
  for (size_t i = 0; i < count; i++) {
    const char *value = xcoll_env_str(table[i].name);
    /* The secret itself stays out of logs. */
    if (value != NULL)
      XCOLL_INFO_SUBSYS(XCOLL_SUBSYS_ENV, "environment: %s=%.200s",
                        table[i].name,
                        strcmp(table[i].name, "XCOLL_AUTH_TOKEN") == 0
                            ? "(set, not shown)"
                            : value);
  }
}

/* The variables core/params.c's table gives to some backends only: a set
 * one is checked whatever the backend (malformed is XCOLL_ERR_ENV naming
 * it, as NCCL refuses an NCCL_PROTO token it does not know), and one that
 * this backend does not read gets one WARN per process saying so, rather
 * than being dropped in silence. XCOLL_ALGO chooses core's host-driven
 * algorithms: a device-driven backend runs its own collectives, and core's
 * only for the calls it declines (one WARN says so). */
static xcoll_status check_backend_params(const xcoll_backend *backend) {
  static _Atomic unsigned char warned[128]; /* by table index */
  static _Atomic unsigned char algo_warned;
  size_t count = 0;
  const xcoll_param *table = xcoll_param_table(&count);
  for (size_t i = 0; i < count; i++) {
    const xcoll_param *p = &table[i];
    if (p->launcher || p->backend == NULL || xcoll_env_str(p->name) == NULL)
      continue;
    xcoll_status status = xcoll_param_check(p);
    if (status != XCOLL_SUCCESS)
      return status;
    if (!xcoll_param_read_by(p, backend->name) &&
        (i >= sizeof warned / sizeof warned[0] ||
         atomic_exchange(&warned[i], 1) == 0))
      XCOLL_WARN("%s=%.100s does not apply to backend %s (it is read by %s): "
                 "ignored",
                 p->name, xcoll_env_str(p->name), backend->name, p->backend);
  }
  /* NCCL_* and GLOO_* names are never read: say which XCOLL_* to set. */
  static _Atomic unsigned char alias_warned[64];
  const xcoll_param_alias *aliases = xcoll_param_aliases(&count);
  for (size_t i = 0; i < count; i++) {
    const char *value = getenv(aliases[i].foreign);
    if (value == NULL ||
        (i < sizeof alias_warned && atomic_exchange(&alias_warned[i], 1) != 0))
      continue;
    const char *ours = xcoll_env_str(aliases[i].xcoll);
    XCOLL_WARN("%s=%.100s is set, but xcoll does not read %s's variables: "
               "set %s instead%s%.100s%s (docs/env.md)",
               aliases[i].foreign, value,
               strncmp(aliases[i].foreign, "NCCL_", 5) == 0 ? "NCCL" : "Gloo",
               aliases[i].xcoll, ours != NULL ? " (it is set: " : "",
               ours != NULL ? ours : "", ours != NULL ? ")" : "");
  }
  const char *algo = xcoll_env_str("XCOLL_ALGO");
  if (algo != NULL && backend->coll != NULL &&
      atomic_exchange(&algo_warned, 1) == 0)
    XCOLL_WARN("XCOLL_ALGO=%.100s does not apply to backend %s's own "
               "collectives, whose algorithms it chooses itself: only to the "
               "calls core runs there over its p2p interface (alltoall, "
               "alltoallv, gather, scatter)",
               algo, backend->name);
  return XCOLL_SUCCESS;
}

static xcoll_status read_timeout(double configured, double *timeout_s) {
  if (configured > 0.0) {
    *timeout_s = configured;
    return XCOLL_SUCCESS;
  }
  return xcoll_param_double("XCOLL_TIMEOUT_S", timeout_s);
}

/* What one communicator holds, recorded so that one function can release a
 * communicator whatever point its creation reached. */
enum { HAVE_TRACE = 1, HAVE_BACKEND = 2 };

static xcoll_comm *comm_new(void) {
  xcoll_comm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) {
    xcoll_error(NULL, XCOLL_ERR_NO_MEMORY,
                "cannot allocate a communicator (%zu bytes)", sizeof *comm);
    return NULL;
  }
  pthread_mutex_init(&comm->error_lock, NULL);
  atomic_init(&comm->broken_status, XCOLL_SUCCESS);
  atomic_init(&comm->broken_warned, 0);
  atomic_init(&comm->aborted, 0);
  comm->local_rank = -1;
  comm->local_world_size = -1;
  comm->device = XCOLL_DEVICE_HOST;
  comm->magic = XCOLL_COMM_MAGIC;
  return comm;
}

static void comm_free(xcoll_comm *comm, int held) {
  xcoll_queue_destroy(comm);
  xcoll_flight_close(comm);
  if ((held & HAVE_BACKEND) && comm->backend->comm_destroy != NULL)
    comm->backend->comm_destroy(comm, comm->backend_state);
  xcoll_store_close(comm->store);
  xcoll_store_server_stop(comm->store_server);
  if (held & HAVE_TRACE)
    xcoll_trace_close();
  free((void *)comm->options.socket_ifname);
  xcoll_cuda_close(comm->cuda);
  free(comm->world_ranks);
  comm->magic = 0;
  pthread_mutex_destroy(&comm->error_lock);
  free(comm);
}

/* The part of creation shared by the world and split communicators: the
 * queue, the trace, a store client, then the backend's connections.
 * comm's identity, backend, options and master address are set. */
static xcoll_status comm_connect(xcoll_comm *comm, int *held) {
  xcoll_status status = xcoll_queue_create(comm, xcoll_coll_run);
  if (status != XCOLL_SUCCESS)
    return status;
  status = xcoll_flight_open(comm);
  if (status != XCOLL_SUCCESS)
    return status;
  status = xcoll_trace_open(comm->rank);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);
  *held |= HAVE_TRACE;
  snprintf(comm->store_prefix, sizeof comm->store_prefix, "c%llu/",
           (unsigned long long)comm->comm_id);
  if (comm->has_kv)
    status = xcoll_store_wrap_kv(&comm->kv, comm->timeout_s, &comm->store);
  else
    status = xcoll_store_connect(comm->master_addr, comm->master_port,
                                 comm->timeout_s, &comm->store);
  if (status != XCOLL_SUCCESS)
    return xcoll_error(comm, status,
                       "rank %d cannot reach the rendezvous store at %s:%d "
                       "(MASTER_ADDR:MASTER_PORT; is rank 0 running?): %s",
                       comm->rank, comm->master_addr, comm->master_port,
                       xcoll_last_error());
  if (comm->comm_id == 0 && !comm->has_kv) {
    status = xcoll_store_join(comm->store, comm->world_size, comm->rank);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
  }
  status = xcoll_backend_init_once(comm->backend);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);
  status = comm->backend->comm_init(comm, &comm->backend_state);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);
  *held |= HAVE_BACKEND;
  xcoll_flight_ready(comm);
  return XCOLL_SUCCESS;
}

/* ---- world communicator ---- */

/* xcoll_comm_init and xcoll_comm_init_kv: kv NULL starts (rank 0) and
 * reaches xcoll's own store; else the communicator uses the caller's. */
static xcoll_status comm_init_world(xcoll_comm_t *out,
                                    const xcoll_config *config,
                                    const xcoll_kv_store *kv) {
  if (out == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_init: comm (the output pointer) is NULL");
  *out = NULL;
  if (config == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_init: config is NULL (fill one with "
                       "xcoll_config_init)");
  char log_why[512];
  xcoll_status status = xcoll_log_init(log_why, sizeof log_why);
  if (status != XCOLL_SUCCESS)
    return xcoll_error(NULL, status, "%s", log_why);

  if (config->world_size < 1)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "config.world_size=%d: must be at least 1",
                       config->world_size);
  if (config->rank < 0 || config->rank >= config->world_size)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "config.rank=%d is outside [0, world_size=%d)",
                       config->rank, config->world_size);
  if (config->local_world_size < -1 || config->local_world_size == 0)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "config.local_world_size=%d: must be >= 1, or -1 for "
                       "unknown",
                       config->local_world_size);
  if (config->local_rank < -1 ||
      (config->local_world_size > 0 &&
       config->local_rank >= config->local_world_size))
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "config.local_rank=%d is outside [0, "
                       "local_world_size=%d) (use -1 for unknown)",
                       config->local_rank, config->local_world_size);
  status = xcoll_device_check(config->device, "config.device");
  if (status != XCOLL_SUCCESS)
    return status;
  /* A world of one needs no agreed port, so 0 (any free port) is accepted. */
  int min_port = config->world_size == 1 ? 0 : 1;
  if (config->master_port < min_port || config->master_port > 65535)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "config.master_port=%d is outside [%d, 65535]",
                       config->master_port, min_port);
  const char *master_addr =
      config->master_addr != NULL ? config->master_addr : DEFAULT_MASTER_ADDR;
  if (master_addr[0] == '\0' || strlen(master_addr) >= 256)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "config.master_addr='%.64s' must be a host name or "
                       "address of 1 to 255 characters",
                       master_addr);

  const char *backend_name = config->backend;
  const char *backend_source = "xcoll_config.backend";
  if (backend_name == NULL) {
    backend_name = xcoll_env_str("XCOLL_BACKEND");
    backend_source = "XCOLL_BACKEND";
  }
  if (backend_name == NULL)
    backend_name = "tcp";
  const xcoll_backend *backend = NULL;
  status = xcoll_backend_find(backend_name, &backend);
  if (status != XCOLL_SUCCESS) {
    /* Say where the name came from: the user must know what to change. */
    char reason[XCOLL_ERROR_BYTES];
    snprintf(reason, sizeof reason, "%s", xcoll_last_error());
    return xcoll_error(NULL, status, "%s: %s", backend_source, reason);
  }

  double timeout_s = 0.0;
  status = read_timeout(config->timeout_s, &timeout_s);
  if (status != XCOLL_SUCCESS)
    return status;
  xcoll_options options;
  log_env_settings();
  status = check_backend_params(backend);
  if (status != XCOLL_SUCCESS)
    return status;
  status = read_options(backend, &options);
  if (status != XCOLL_SUCCESS)
    return status;

  xcoll_comm *comm = comm_new();
  if (comm == NULL) {
    free((void *)options.socket_ifname);
    return XCOLL_ERR_NO_MEMORY;
  }
  comm->rank = config->rank;
  comm->world_size = config->world_size;
  comm->local_rank = config->local_rank;
  comm->local_world_size = config->local_world_size;
  comm->device = config->device;
  comm->comm_id = 0;
  comm->finalize_store = 1;
  comm->timeout_s = timeout_s;
  comm->options = options;
  comm->backend = backend;
  snprintf(comm->master_addr, sizeof comm->master_addr, "%s", master_addr);
  comm->master_port = config->master_port;
  if (kv != NULL) {
    comm->has_kv = 1;
    comm->kv = *kv;
  }
  xcoll_log_set_rank(comm->rank);

  int held = 0;
  status = xcoll_device_open(comm->device, backend,
                             "config.device (or XCOLL_DEVICE)", &comm->cuda);
  if (status != XCOLL_SUCCESS)
    goto fail;
  status = xcoll_algorithm_check_env(comm);
  if (status != XCOLL_SUCCESS)
    goto fail;

  if (comm->rank == 0 && !comm->has_kv) {
    /* A world of one has nobody to meet: a private loopback port avoids
     * clashing with other single-process jobs on the default port. */
    int single = comm->world_size == 1;
    int bound_port = 0;
    status = xcoll_store_server_start(single ? DEFAULT_MASTER_ADDR
                                             : comm->master_addr,
                                      single ? 0 : comm->master_port,
                                      &comm->store_server, &bound_port);
    if (status != XCOLL_SUCCESS) {
      status = xcoll_error(comm, status,
                           "rank 0 cannot start the rendezvous store on port "
                           "%d (MASTER_PORT; is another job using it?): %s",
                           comm->master_port, xcoll_last_error());
      goto fail;
    }
    if (single) {
      snprintf(comm->master_addr, sizeof comm->master_addr, "%s",
               DEFAULT_MASTER_ADDR);
      comm->master_port = bound_port;
    }
  }
  status = comm_connect(comm, &held);
  if (status != XCOLL_SUCCESS)
    goto fail;

  if (comm->has_kv)
    XCOLL_INFO("comm %llu: rank %d of %d (local %d of %d), backend %s, the "
               "caller's key-value store, timeout %.1f s, %d socket(s) per "
               "peer, chunk %zu B",
               (unsigned long long)comm->comm_id, comm->rank, comm->world_size,
               comm->local_rank, comm->local_world_size, backend->name,
               comm->timeout_s, comm->options.nsocks_per_peer,
               comm->options.chunk_bytes);
  else
    XCOLL_INFO("comm %llu: rank %d of %d (local %d of %d), backend %s, store "
               "%s:%d, timeout %.1f s, %d socket(s) per peer, chunk %zu B",
               (unsigned long long)comm->comm_id, comm->rank, comm->world_size,
               comm->local_rank, comm->local_world_size, backend->name,
               comm->master_addr, comm->master_port, comm->timeout_s,
               comm->options.nsocks_per_peer, comm->options.chunk_bytes);
  *out = comm;
  return XCOLL_SUCCESS;

fail:
  comm_free(comm, held);
  return status;
}

xcoll_status xcoll_comm_init(xcoll_comm_t *out, const xcoll_config *config) {
  return comm_init_world(out, config, NULL);
}

xcoll_status xcoll_comm_init_kv(xcoll_comm_t *out, const xcoll_config *config,
                                const xcoll_kv_store *store) {
  if (out != NULL)
    *out = NULL;
  if (store == NULL || store->set == NULL || store->get == NULL ||
      store->add == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_init_kv: store is NULL or lacks its set, "
                       "get or add function");
  return comm_init_world(out, config, store);
}

/* One launcher's variable names. */
typedef struct launcher_vars {
  const char *launcher;
  const char *rank, *world_size, *local_rank, *local_world_size;
} launcher_vars;

static const launcher_vars launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

/* Fill config's identity from the first launcher whose rank or world size
 * variable is set; none set is a world of one. */
static xcoll_status config_from_launcher(xcoll_config *config) {
  const launcher_vars *vars = NULL;
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    if (xcoll_env_str(launchers[i].rank) != NULL ||
        xcoll_env_str(launchers[i].world_size) != NULL) {
      vars = &launchers[i];
      break;
    }
  }
  if (vars == NULL)
    return XCOLL_SUCCESS;

  if (xcoll_env_str(vars->world_size) == NULL)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s=%s is set but %s is not: %s sets both; set %s to "
                       "the number of ranks",
                       vars->rank, xcoll_env_str(vars->rank), vars->world_size,
                       vars->launcher, vars->world_size);
  if (xcoll_env_str(vars->rank) == NULL)
    return xcoll_error(NULL, XCOLL_ERR_ENV,
                       "%s=%s is set but %s is not: %s sets both; set %s to "
                       "this process's rank",
                       vars->world_size, xcoll_env_str(vars->world_size),
                       vars->rank, vars->launcher, vars->rank);
  /* Defaults and ranges: core/params.c's table, as xcoll-info shows them. */
  long world_size = 1, rank = 0, local_rank = -1, local_world_size = -1;
  xcoll_status status = xcoll_param_int(vars->world_size, &world_size);
  if (status == XCOLL_SUCCESS)
    status = xcoll_param_int(vars->rank, &rank);
  if (status == XCOLL_SUCCESS)
    status = xcoll_param_int(vars->local_rank, &local_rank);
  if (status == XCOLL_SUCCESS && vars->local_world_size != NULL)
    status = xcoll_param_int(vars->local_world_size, &local_world_size);
  if (status != XCOLL_SUCCESS)
    return status;
  if (rank >= world_size)
    return xcoll_error(
        NULL, XCOLL_ERR_ENV, "%s=%ld is not below %s=%ld: ranks are 0 to %ld",
        vars->rank, rank, vars->world_size, world_size, world_size - 1);
  if (local_world_size > 0 && local_rank >= local_world_size)
    return xcoll_error(NULL, XCOLL_ERR_ENV, "%s=%ld is not below %s=%ld",
                       vars->local_rank, local_rank, vars->local_world_size,
                       local_world_size);
  config->rank = (int)rank;
  config->world_size = (int)world_size;
  config->local_rank = (int)local_rank;
  config->local_world_size = (int)local_world_size;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_init_env(xcoll_comm_t *out) {
  if (out == NULL)
    return xcoll_error(
        NULL, XCOLL_ERR_INVALID_ARGUMENT,
        "xcoll_comm_init_env: comm (the output pointer) is NULL");
  *out = NULL;
  char log_why[512];
  xcoll_status status = xcoll_log_init(log_why, sizeof log_why);
  if (status != XCOLL_SUCCESS)
    return xcoll_error(NULL, status, "%s", log_why);
  xcoll_config config;
  xcoll_config_init(&config);
  status = config_from_launcher(&config);
  if (status == XCOLL_SUCCESS)
    status = xcoll_device_from_env(config.local_rank, &config.device);
  if (status == XCOLL_SUCCESS)
    status = xcoll_device_check(config.device, "XCOLL_DEVICE");
  if (status != XCOLL_SUCCESS)
    return status;
  config.master_addr = xcoll_env_str("MASTER_ADDR");
  long port = DEFAULT_MASTER_PORT;
  status = xcoll_param_int("MASTER_PORT", &port);
  if (status != XCOLL_SUCCESS)
    return status;
  config.master_port = (int)port;
  /* torchrun 2.x: its agent serves a TCPStore at MASTER_ADDR:MASTER_PORT,
   * and rank 0 could not start xcoll's own there; meet in torchrun's. */
  const char *agent_store = xcoll_env_str("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store != NULL && strcmp(agent_store, "True") == 0) {
    double timeout_s = 300;
    status = xcoll_env_double("XCOLL_TIMEOUT_S", 300, 0, 1e9, &timeout_s);
    if (status != XCOLL_SUCCESS)
      return status;
    xcoll_kv_store kv;
    status = xcoll_torch_store_kv(config.master_addr, config.master_port,
                                  timeout_s > 0 ? timeout_s : 300, &kv);
    if (status != XCOLL_SUCCESS)
      return status;
    return xcoll_comm_init_kv(out, &config, &kv);
  }
  return xcoll_comm_init(out, &config);
}

/* ---- split and shrink: the parts they share ---- */

/* This host's name without spaces, for counting ranks per host. */
static void host_name(char host[64]) {
  if (gethostname(host, 64) != 0 || host[0] == '\0')
    snprintf(host, 64, "unknown");
  host[63] = '\0';
  for (char *c = host; *c != '\0'; c++)
    if (*c == ' ')
      *c = '_';
}

static int world_rank_of(const xcoll_comm *comm, int rank) {
  return comm->world_ranks != NULL ? comm->world_ranks[rank] : rank;
}

/* Read the text a rank published under store_key into text (NUL-ended).
 * function names the caller and what is awaited in the message. */
static xcoll_status read_entry(xcoll_comm *comm, const char *function,
                               const char *what, int rank,
                               const char *store_key, char *text,
                               size_t text_bytes) {
  void *data = NULL;
  size_t bytes = 0;
  xcoll_status status = xcoll_store_get(comm->store, store_key, &data, &bytes);
  if (status != XCOLL_SUCCESS)
    return xcoll_error(comm, status,
                       "%s: waiting for rank %d's %s (store key '%s'): %s",
                       function, rank, what, store_key, xcoll_last_error());
  int fits = bytes < text_bytes;
  if (fits) {
    memcpy(text, data, bytes);
    text[bytes] = '\0';
  }
  free(data);
  if (!fits)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "%s: rank %d published a malformed %s under '%s' "
                       "(%zu bytes)",
                       function, rank, what, store_key, bytes);
  return XCOLL_SUCCESS;
}

/* The new communicator's id: its rank 0 draws one from the job-global
 * counter and publishes it under id_key for the others. */
static xcoll_status new_comm_id(xcoll_comm *comm, const char *function,
                                const char *id_key, int new_rank,
                                uint64_t *comm_id) {
  if (new_rank == 0) {
    int64_t id = 0;
    xcoll_status status =
        xcoll_store_add(comm->store, COMM_ID_COUNTER_KEY, 1, &id);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    char value[32];
    int len = snprintf(value, sizeof value, "%lld", (long long)id);
    status = xcoll_store_set(comm->store, id_key, value, (size_t)len);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    *comm_id = (uint64_t)id;
    return XCOLL_SUCCESS;
  }
  char text[32];
  xcoll_status status = read_entry(comm, function, "new communicator id", 0,
                                   id_key, text, sizeof text);
  if (status != XCOLL_SUCCESS)
    return status;
  unsigned long long id = 0;
  if (sscanf(text, "%llu", &id) != 1 || id == 0)
    return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                       "%s: malformed communicator id under '%s'", function,
                       id_key);
  *comm_id = id;
  return XCOLL_SUCCESS;
}

/* What a new communicator takes over from comm besides its place in it. */
typedef struct child_place {
  int rank, world_size, local_rank, local_world_size;
  uint64_t comm_id;
  int *world_ranks; /* world rank of each new rank; the child owns it */
} child_place;

/* Make and connect comm's child at place (its world_ranks is taken over,
 * freed on failure). */
static xcoll_status child_create(xcoll_comm *comm, const char *function,
                                 child_place *place, xcoll_comm **out) {
  xcoll_comm *child = comm_new();
  if (child == NULL) {
    free(place->world_ranks);
    place->world_ranks = NULL;
    return xcoll_error_adopt(comm, XCOLL_ERR_NO_MEMORY);
  }
  child->rank = place->rank;
  child->world_size = place->world_size;
  child->local_rank = place->local_rank;
  child->local_world_size = place->local_world_size;
  child->world_ranks = place->world_ranks;
  place->world_ranks = NULL;
  child->device = comm->device;
  child->cuda = comm->cuda != NULL ? xcoll_cuda_ref(comm->cuda) : NULL;
  child->comm_id = place->comm_id;
  child->timeout_s = comm->timeout_s;
  child->options = comm->options;
  child->options.socket_ifname = NULL;
  child->backend = comm->backend;
  memcpy(child->master_addr, comm->master_addr, sizeof child->master_addr);
  child->master_port = comm->master_port;
  child->has_kv = comm->has_kv;
  child->kv = comm->kv;
  int held = 0;
  xcoll_status status = XCOLL_SUCCESS;
  if (comm->options.socket_ifname != NULL) {
    child->options.socket_ifname = strdup(comm->options.socket_ifname);
    if (child->options.socket_ifname == NULL) {
      status = xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                           "%s: cannot copy the interface name", function);
      goto fail;
    }
  }
  status = comm_connect(child, &held);
  if (status != XCOLL_SUCCESS) {
    xcoll_error_adopt(comm, status);
    goto fail;
  }
  *out = child;
  return XCOLL_SUCCESS;

fail:
  comm_free(child, held);
  return status;
}

/* ---- split ---- */

/* What each rank publishes for a split. */
typedef struct split_entry {
  int color;
  int key;
  int old_rank;
  int world_rank;
  char host[64];
} split_entry;

static int compare_by_key_then_rank(const void *a, const void *b) {
  const split_entry *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return (x->old_rank > y->old_rank) - (x->old_rank < y->old_rank);
}

/* Publish (color, key, host, world rank) and read every rank's. entries
 * has world_size slots. */
static xcoll_status split_exchange(xcoll_comm *comm, const char *base,
                                   int color, int key, split_entry *entries) {
  char host[64];
  host_name(host);
  char store_key[160];
  char value[128];
  int len = snprintf(value, sizeof value, "%d %d %s %d", color, key, host,
                     world_rank_of(comm, comm->rank));
  snprintf(store_key, sizeof store_key, "%s%d", base, comm->rank);
  xcoll_status status =
      xcoll_store_set(comm->store, store_key, value, (size_t)len);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);

  for (int r = 0; r < comm->world_size; r++) {
    snprintf(store_key, sizeof store_key, "%s%d", base, r);
    char text[128];
    status = read_entry(comm, "xcoll_comm_split", "color and key", r,
                        store_key, text, sizeof text);
    if (status != XCOLL_SUCCESS)
      return status;
    split_entry *entry = &entries[r];
    entry->old_rank = r;
    if (sscanf(text, "%d %d %63s %d", &entry->color, &entry->key, entry->host,
               &entry->world_rank) != 4)
      return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                         "xcoll_comm_split: rank %d published a malformed "
                         "entry under '%s'",
                         r, store_key);
  }
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_split(xcoll_comm_t comm, int color, int key,
                              xcoll_comm_t *newcomm) {
  if (newcomm == NULL)
    return xcoll_error(comm_is_live(comm) ? comm : NULL,
                       XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_split: newcomm is NULL");
  *newcomm = NULL;
  xcoll_status status = xcoll_comm_check(comm);
  if (status != XCOLL_SUCCESS)
    return status;
  if (color < XCOLL_SPLIT_NOCOLOR)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_split: color=%d must be >= 0, or "
                       "XCOLL_SPLIT_NOCOLOR (-1) for no new communicator",
                       color);

  char base[96];
  snprintf(base, sizeof base, "%ssplit%llu/", comm->store_prefix,
           (unsigned long long)comm->split_count++);
  split_entry *entries = calloc((size_t)comm->world_size, sizeof *entries);
  if (entries == NULL)
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_comm_split: cannot allocate %d entries",
                       comm->world_size);
  status = split_exchange(comm, base, color, key, entries);
  if (status != XCOLL_SUCCESS || color == XCOLL_SPLIT_NOCOLOR) {
    free(entries);
    return status;
  }

  /* Keep this color's members, ordered by (key, old rank). */
  int size = 0;
  for (int r = 0; r < comm->world_size; r++)
    if (entries[r].color == color)
      entries[size++] = entries[r];
  qsort(entries, (size_t)size, sizeof *entries, compare_by_key_then_rank);
  child_place place = {.rank = -1};
  const char *my_host = NULL;
  place.world_ranks = malloc((size_t)size * sizeof *place.world_ranks);
  if (place.world_ranks == NULL) {
    free(entries);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_comm_split: cannot allocate %d ranks", size);
  }
  for (int i = 0; i < size; i++) {
    place.world_ranks[i] = entries[i].world_rank;
    if (entries[i].old_rank == comm->rank) {
      place.rank = i;
      my_host = entries[i].host;
    }
  }
  if (place.rank < 0) {
    free(entries);
    free(place.world_ranks);
    return xcoll_error(comm, XCOLL_ERR_INTERNAL,
                       "xcoll_comm_split: rank %d missing from its own group",
                       comm->rank);
  }
  place.world_size = size;
  for (int i = 0; i < size; i++) {
    if (strcmp(entries[i].host, my_host) != 0)
      continue;
    if (i < place.rank)
      place.local_rank++;
    place.local_world_size++;
  }
  free(entries);

  char id_key[160];
  snprintf(id_key, sizeof id_key, "%scolor%d/id", base, color);
  status = new_comm_id(comm, "xcoll_comm_split", id_key, place.rank,
                       &place.comm_id);
  if (status != XCOLL_SUCCESS) {
    free(place.world_ranks);
    return status;
  }
  xcoll_comm *child = NULL;
  status = child_create(comm, "xcoll_comm_split", &place, &child);
  if (status != XCOLL_SUCCESS)
    return status;
  XCOLL_INFO("comm %llu: split of comm %llu (color %d, key %d): rank %d of "
             "%d, local %d of %d",
             (unsigned long long)child->comm_id,
             (unsigned long long)comm->comm_id, color, key, child->rank,
             child->world_size, child->local_rank, child->local_world_size);
  *newcomm = child;
  return XCOLL_SUCCESS;
}

/* ---- shrink ---- */

/* Check the exclude list against comm; mark excluded[r] for each rank r
 * listed. */
static xcoll_status shrink_check_list(xcoll_comm *comm, const int *ranks,
                                      int count, unsigned char *excluded) {
  if (count < 0 || (count > 0 && ranks == NULL))
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: exclude_count=%d with "
                       "exclude_ranks %s: pass a list of count >= 0 ranks",
                       count, ranks == NULL ? "NULL" : "set");
  for (int i = 0; i < count; i++) {
    int r = ranks[i];
    if (r < 0 || r >= comm->world_size)
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_comm_shrink: exclude_ranks[%d]=%d is outside "
                         "[0, world_size=%d) of communicator %llu",
                         i, r, comm->world_size,
                         (unsigned long long)comm->comm_id);
    if (excluded[r])
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_comm_shrink: rank %d is listed twice in "
                         "exclude_ranks",
                         r);
    excluded[r] = 1;
  }
  if (count == comm->world_size)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: exclude_ranks lists all %d ranks: "
                       "at least one must be left",
                       count);
  return XCOLL_SUCCESS;
}

/* A digest of the excluded set (FNV-1a over the marks), published by each
 * rank left so that the others can see they agree. */
static uint64_t shrink_digest(const unsigned char *excluded, int world_size) {
  uint64_t hash = 14695981039346656037ULL;
  for (int r = 0; r < world_size; r++) {
    hash ^= excluded[r];
    hash *= 1099511628211ULL;
  }
  return hash;
}

/* Settle comm before the shrink, as flags ask. */
static xcoll_status shrink_settle(xcoll_comm *comm, int flags) {
  if (flags & XCOLL_SHRINK_ABORT) {
    xcoll_status status = xcoll_comm_abort(comm);
    if (status != XCOLL_SUCCESS)
      return status;
    xcoll_queue_drain(comm);
    xcoll_dispatch_quiesce(comm);
    return XCOLL_SUCCESS;
  }
  if (xcoll_queue_busy(comm))
    return xcoll_error(comm, XCOLL_ERR_INVALID_USAGE,
                       "xcoll_comm_shrink: communicator %llu has a collective "
                       "in flight on rank %d: wait for its requests first, or "
                       "pass XCOLL_SHRINK_ABORT",
                       (unsigned long long)comm->comm_id, comm->rank);
  return XCOLL_SUCCESS;
}

/* Tell the store which world ranks are gone for good, so that their
 * departure no longer fails its waits (XCOLL_STORE_EXCLUDED_PREFIX). */
static xcoll_status shrink_forgive(xcoll_comm *comm,
                                   const unsigned char *excluded) {
  if (comm->has_kv)
    return XCOLL_SUCCESS; /* a caller's store fails nobody's waits */
  for (int r = 0; r < comm->world_size; r++) {
    if (!excluded[r])
      continue;
    char key[64];
    snprintf(key, sizeof key, "%s%d", XCOLL_STORE_EXCLUDED_PREFIX,
             world_rank_of(comm, r));
    xcoll_status status = xcoll_store_set(comm->store, key, "1", 1);
    if (status != XCOLL_SUCCESS)
      return xcoll_error(comm, status,
                         "xcoll_comm_shrink: cannot mark rank %d excluded in "
                         "the rendezvous store: %s",
                         r, xcoll_last_error());
  }
  return XCOLL_SUCCESS;
}

/* Publish (digest, host) and read those of the ranks left; fill place's
 * rank, sizes and world ranks. */
static xcoll_status shrink_exchange(xcoll_comm *comm, const char *base,
                                    const unsigned char *excluded,
                                    child_place *place) {
  uint64_t digest = shrink_digest(excluded, comm->world_size);
  char host[64];
  host_name(host);
  char store_key[160];
  char value[128];
  int len = snprintf(value, sizeof value, "%016llx %s",
                     (unsigned long long)digest, host);
  snprintf(store_key, sizeof store_key, "%s%d", base, comm->rank);
  xcoll_status status =
      xcoll_store_set(comm->store, store_key, value, (size_t)len);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);

  for (int r = 0; r < comm->world_size; r++) {
    if (excluded[r])
      continue;
    int new_rank = place->world_size++;
    place->world_ranks[new_rank] = world_rank_of(comm, r);
    if (r == comm->rank)
      place->rank = new_rank;
    snprintf(store_key, sizeof store_key, "%s%d", base, r);
    char text[128];
    status = read_entry(comm, "xcoll_comm_shrink", "exclude list", r,
                        store_key, text, sizeof text);
    if (status != XCOLL_SUCCESS)
      return status;
    unsigned long long theirs = 0;
    char their_host[64];
    if (sscanf(text, "%16llx %63s", &theirs, their_host) != 2)
      return xcoll_error(comm, XCOLL_ERR_PROTOCOL,
                         "xcoll_comm_shrink: rank %d published a malformed "
                         "entry under '%s'",
                         r, store_key);
    if (theirs != digest)
      return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                         "xcoll_comm_shrink: rank %d passed a different "
                         "exclude list than rank %d: every rank left must "
                         "exclude the same ranks",
                         r, comm->rank);
    if (strcmp(their_host, host) == 0) {
      if (r < comm->rank)
        place->local_rank++;
      place->local_world_size++;
    }
  }
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_shrink(xcoll_comm_t comm, const int *exclude_ranks,
                               int exclude_count, int flags,
                               xcoll_comm_t *newcomm) {
  if (newcomm == NULL)
    return xcoll_error(comm_is_live(comm) ? comm : NULL,
                       XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: newcomm is NULL");
  *newcomm = NULL;
  /* A broken communicator passes: shrinking it is the point. */
  xcoll_status status = check_live(comm, "xcoll_comm_shrink");
  if (status != XCOLL_SUCCESS)
    return status;
  if ((flags & ~XCOLL_SHRINK_ABORT) != 0)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_shrink: flags=%#x: pass "
                       "XCOLL_SHRINK_DEFAULT or XCOLL_SHRINK_ABORT",
                       (unsigned)flags);
  unsigned char *excluded = calloc((size_t)comm->world_size, 1);
  child_place place = {.rank = -1};
  place.world_ranks = malloc((size_t)comm->world_size * sizeof(int));
  if (excluded == NULL || place.world_ranks == NULL) {
    free(excluded);
    free(place.world_ranks);
    return xcoll_error(comm, XCOLL_ERR_NO_MEMORY,
                       "xcoll_comm_shrink: cannot allocate %d ranks",
                       comm->world_size);
  }
  status = shrink_check_list(comm, exclude_ranks, exclude_count, excluded);
  if (status != XCOLL_SUCCESS || excluded[comm->rank]) {
    if (status == XCOLL_SUCCESS)
      XCOLL_INFO("comm %llu: rank %d is in its own shrink's exclude list: no "
                 "new communicator for it",
                 (unsigned long long)comm->comm_id, comm->rank);
    goto out;
  }
  status = shrink_settle(comm, flags);
  if (status != XCOLL_SUCCESS)
    goto out;
  status = shrink_forgive(comm, excluded);
  if (status != XCOLL_SUCCESS)
    goto out;
  char base[96];
  snprintf(base, sizeof base, "%sshrink%llu/", comm->store_prefix,
           (unsigned long long)comm->shrink_count++);
  status = shrink_exchange(comm, base, excluded, &place);
  if (status != XCOLL_SUCCESS)
    goto out;
  char id_key[160];
  snprintf(id_key, sizeof id_key, "%sid", base);
  status = new_comm_id(comm, "xcoll_comm_shrink", id_key, place.rank,
                       &place.comm_id);
  if (status != XCOLL_SUCCESS)
    goto out;
  xcoll_comm *child = NULL;
  status = child_create(comm, "xcoll_comm_shrink", &place, &child);
  if (status != XCOLL_SUCCESS)
    goto out;
  /* The world's rank 0 is the new rank 0 when it is left: the store moves
   * with it, and the new communicator's destroy holds it up for its ranks. */
  child->finalize_store = comm->finalize_store && !excluded[0];
  if (comm->store_server != NULL) {
    child->store_server = comm->store_server;
    comm->store_server = NULL;
  }
  XCOLL_INFO("comm %llu: shrink of comm %llu (%d ranks excluded%s): rank %d "
             "of %d was rank %d",
             (unsigned long long)child->comm_id,
             (unsigned long long)comm->comm_id, exclude_count,
             (flags & XCOLL_SHRINK_ABORT) ? ", old one aborted" : "",
             child->rank, child->world_size, comm->rank);
  *newcomm = child;

out:
  free(excluded);
  free(place.world_ranks);
  return status;
}

xcoll_status xcoll_comm_failed_ranks(xcoll_comm_t comm, int *ranks,
                                     int capacity, int *count) {
  if (count == NULL || capacity < 0 || (ranks == NULL && capacity > 0))
    return xcoll_error(comm_is_live(comm) ? comm : NULL,
                       XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_failed_ranks: count is NULL, capacity "
                       "negative, or ranks NULL with capacity > 0 (pass "
                       "ranks with room for capacity ints, or NULL and 0 to "
                       "ask only how many)");
  *count = 0;
  /* A broken communicator passes: it is the one to ask about. */
  xcoll_status status = check_live(comm, "xcoll_comm_failed_ranks");
  if (status != XCOLL_SUCCESS)
    return status;
  if (comm->has_kv || xcoll_store_is_kv(comm->store))
    return xcoll_error(comm, XCOLL_ERR_NOT_SUPPORTED,
                       "xcoll_comm_failed_ranks: comm %llu rendezvoused "
                       "through the caller's store (xcoll_comm_init_kv), "
                       "which does not record departures: take the ranks "
                       "from the error that broke the communicator",
                       (unsigned long long)comm->comm_id);
  int found = 0;
  for (int r = 0; r < comm->world_size; r++) {
    if (r == comm->rank)
      continue;
    char key[64];
    snprintf(key, sizeof key, "%s%d", XCOLL_STORE_DEPARTED_PREFIX,
             world_rank_of(comm, r));
    const char *keys[1] = {key};
    int dead = 0;
    status = xcoll_store_check(comm->store, keys, 1, &dead);
    if (status != XCOLL_SUCCESS)
      return xcoll_error_adopt(comm, status);
    if (dead || xcoll_blame_has_left(comm, comm->store, r)) {
      if (found < capacity)
        ranks[found] = r;
      found++;
    }
  }
  *count = found;
  return XCOLL_SUCCESS;
}

/* ---- abort, destroy ---- */

xcoll_status xcoll_comm_abort(xcoll_comm_t comm) {
  xcoll_status status = check_live(comm, "xcoll_comm_abort");
  if (status != XCOLL_SUCCESS)
    return status;
  if (atomic_exchange(&comm->aborted, 1))
    return XCOLL_SUCCESS;
  char message[XCOLL_ERROR_BYTES];
  snprintf(message, sizeof message,
           "xcoll_comm_abort() was called on rank %d of communicator %llu",
           comm->rank, (unsigned long long)comm->comm_id);
  /* Abort wins over an earlier failure: every later call must say ABORTED. */
  pthread_mutex_lock(&comm->error_lock);
  atomic_store(&comm->broken_status, XCOLL_ERR_ABORTED);
  snprintf(comm->broken_message, sizeof comm->broken_message, "%s", message);
  snprintf(comm->last_error, sizeof comm->last_error, "%s", message);
  pthread_mutex_unlock(&comm->error_lock);
  XCOLL_WARN("%s", message);
  if (comm->backend->comm_abort != NULL)
    comm->backend->comm_abort(comm, comm->backend_state);
  xcoll_queue_abort(comm);
  return XCOLL_SUCCESS;
}

/* Before rank 0 of the world stops the store, it waits until every rank
 * has reached destroy: a slower rank may still be reading rendezvous keys,
 * and pulling the server from under it would fail its init or split. Each
 * rank counts itself in on entering destroy (before its backend closes
 * anything: the count is all the store it needs from then on), broken or
 * not: a healthy rank 0 that made fewer calls and left would otherwise
 * wait out XCOLL_TIMEOUT_S for the ranks its departure broke. A broken
 * rank waits for no reply longer than a second: a stopped rank 0 answers
 * nothing. Returns the add's status. */
static xcoll_status finalize_arrive(xcoll_comm *comm, int broken) {
  char count_key[64], done_key[64];
  snprintf(count_key, sizeof count_key, "%sfinalize", comm->store_prefix);
  snprintf(done_key, sizeof done_key, "%sfinalize_done", comm->store_prefix);
  if (broken)
    xcoll_store_set_timeout(comm->store,
                            comm->timeout_s < 1.0 ? comm->timeout_s : 1.0);
  int64_t arrived = 0;
  xcoll_status status = xcoll_store_add(comm->store, count_key, 1, &arrived);
  if (status == XCOLL_SUCCESS && arrived == comm->world_size)
    status = xcoll_store_set(comm->store, done_key, "1", 1);
  return status;
}

/* Rank 0, healthy, after its backend closed: wait for every rank's arrival. */
static xcoll_status finalize_wait(xcoll_comm *comm, xcoll_status arrived) {
  char done_key[64];
  snprintf(done_key, sizeof done_key, "%sfinalize_done", comm->store_prefix);
  xcoll_status status = arrived;
  if (status == XCOLL_SUCCESS && comm->store_server != NULL) {
    const char *keys[1] = {done_key};
    status = xcoll_store_wait(comm->store, keys, 1);
  }
  if (status != XCOLL_SUCCESS)
    return xcoll_error(NULL, status,
                       "xcoll_comm_destroy: rank %d: not every rank reached "
                       "xcoll_comm_destroy within %.1f s (XCOLL_TIMEOUT_S); "
                       "stopping the store anyway: %s",
                       comm->rank, comm->timeout_s, xcoll_last_error());
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_destroy(xcoll_comm_t comm) {
  if (comm == NULL)
    return XCOLL_SUCCESS;
  xcoll_status status = check_live(comm, "xcoll_comm_destroy");
  if (status != XCOLL_SUCCESS)
    return status;
  xcoll_dispatch_quiesce(comm);
  xcoll_queue_destroy(comm);
  xcoll_flight_close(comm); /* before the backend state a dump reads */
  int broken = atomic_load(&comm->broken_status) != XCOLL_SUCCESS;
  /* Before any connection closes: a peer still waiting on this rank learns
   * that it left rather than died (core/blame.h). */
  if (!broken)
    xcoll_blame_announce_leave(comm);
  /* A caller's store is not ours to stop: nothing to hold it up for. */
  int finalize = comm->finalize_store && comm->world_size > 1 && !comm->has_kv;
  xcoll_status arrived = finalize ? finalize_arrive(comm, broken)
                                  : XCOLL_SUCCESS;
  comm->backend->comm_destroy(comm, comm->backend_state);
  /* A broken world may have lost ranks for good: do not wait for them. */
  if (finalize && !broken)
    status = finalize_wait(comm, arrived);
  comm_free(comm, HAVE_TRACE);
  return status;
}

/* ---- getters ---- */

xcoll_status xcoll_comm_rank(xcoll_comm_t comm, int *rank) {
  xcoll_status status = check_live(comm, "xcoll_comm_rank");
  if (status != XCOLL_SUCCESS)
    return status;
  if (rank == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_rank: rank is NULL");
  *rank = comm->rank;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_size(xcoll_comm_t comm, int *world_size) {
  xcoll_status status = check_live(comm, "xcoll_comm_size");
  if (status != XCOLL_SUCCESS)
    return status;
  if (world_size == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_size: world_size is NULL");
  *world_size = comm->world_size;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_local_rank(xcoll_comm_t comm, int *local_rank) {
  xcoll_status status = check_live(comm, "xcoll_comm_local_rank");
  if (status != XCOLL_SUCCESS)
    return status;
  if (local_rank == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_local_rank: local_rank is NULL");
  *local_rank = comm->local_rank;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_device(xcoll_comm_t comm, int *device) {
  xcoll_status status = check_live(comm, "xcoll_comm_device");
  if (status != XCOLL_SUCCESS)
    return status;
  if (device == NULL)
    return xcoll_error(comm, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_device: device is NULL");
  *device = comm->device;
  return XCOLL_SUCCESS;
}

xcoll_status xcoll_comm_transport(xcoll_comm_t comm, const char **send,
                                  const char **recv) {
  if (send == NULL || recv == NULL)
    return xcoll_error(NULL, XCOLL_ERR_INVALID_ARGUMENT,
                       "xcoll_comm_transport: send or recv is NULL");
  *send = *recv = "none";
  xcoll_status status = check_live(comm, "xcoll_comm_transport");
  if (status != XCOLL_SUCCESS)
    return status;
  if (comm->backend->transport != NULL) {
    comm->backend->transport(comm->backend_state, send, recv);
  } else {
    *send = *recv = comm->backend->name;
  }
  return XCOLL_SUCCESS;
}

const char *xcoll_comm_backend(xcoll_comm_t comm) {
  if (!comm_is_live(comm))
    return "";
  return comm->backend->name;
}
