/* comm_create.c - making communicators: the configuration from the
 * environment (torchrun, Open MPI, Slurm), the XCOLL_* options, bootstrap
 * of the world communicator through the rendezvous store, and the
 * allocation, connection and release that split and shrink share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_create.h"
#include "cuda.h"
#include "torch_store.h"
#include "device.h"
#include "dispatch.h"
#include "env.h"
#include "host.h"
#include "params.h"
#include "error.h"
#include "log.h"
#include "request.h"
#include "trace.h"

#define DEFAULT_MASTER_ADDR "127.0.0.1"
#define DEFAULT_MASTER_PORT 29500 /* as MASTER_PORT's in core/params.c */

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

/* The options every communicator reads from XCOLL_* variables. socket_ifname
 * is a copy that xcoll_comm_free releases. */
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

xcoll_comm *xcoll_comm_new(void) {
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

void xcoll_comm_free(xcoll_comm *comm, int held) {
  xcoll_queue_destroy(comm);
  xcoll_flight_close(comm);
  if ((held & XCOLL_COMM_HAVE_BACKEND) && comm->backend->comm_destroy != NULL)
    comm->backend->comm_destroy(comm, comm->backend_state);
  xcoll_store_close(comm->store);
  /* A broken communicator's peers may still be hearing why (another rank
   * publishing a failure through the store): let the store outlast that. */
  if (atomic_load(&comm->broken_status) != XCOLL_SUCCESS)
    xcoll_store_server_stop_failed(comm->store_server);
  else
    xcoll_store_server_stop(comm->store_server);
  if (held & XCOLL_COMM_HAVE_TRACE)
    xcoll_trace_close();
  free((void *)comm->options.socket_ifname);
  xcoll_cuda_close(comm->cuda);
  free(comm->world_ranks);
  comm->magic = 0;
  pthread_mutex_destroy(&comm->error_lock);
  free(comm);
}

xcoll_status xcoll_comm_connect(xcoll_comm *comm, int *held) {
  xcoll_status status = xcoll_queue_create(comm, xcoll_coll_run);
  if (status != XCOLL_SUCCESS)
    return status;
  status = xcoll_flight_open(comm);
  if (status != XCOLL_SUCCESS)
    return status;
  status = xcoll_trace_open(comm->rank);
  if (status != XCOLL_SUCCESS)
    return xcoll_error_adopt(comm, status);
  *held |= XCOLL_COMM_HAVE_TRACE;
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
  *held |= XCOLL_COMM_HAVE_BACKEND;
  /* After the backend's own startup, so that a backend that listens
   * before its first exchange (tcp) still does so while late ranks start;
   * a backend that sizes itself by the census at init (nccl_like) took it
   * already. */
  status = xcoll_host_census(comm);
  if (status != XCOLL_SUCCESS)
    return status;
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

  xcoll_comm *comm = xcoll_comm_new();
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

  long store_external = 0;
  status = xcoll_param_int("XCOLL_STORE_EXTERNAL", &store_external);
  if (status != XCOLL_SUCCESS)
    goto fail;
  comm->store_external = store_external == 1 && !comm->has_kv;
  if (comm->rank == 0 && !comm->has_kv && !comm->store_external) {
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
  status = xcoll_comm_connect(comm, &held);
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
  xcoll_comm_free(comm, held);
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

