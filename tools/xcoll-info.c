/*
 * xcoll-info - say what this build of xcoll contains and how the current
 * environment would configure it: the version, the compiled-in backends,
 * every XCOLL_* and launcher variable with its value, default and accepted
 * range, all from core/params.c's table, the one the library reads them
 * with (so a value is checked exactly as the library checks it), and
 * whether UCX and CUDA are available.
 * Run it first when a job behaves unexpectedly, as one runs ucx_info or
 * nvidia-smi. Exit status: 0, or 1 when a variable is malformed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "env.h"
#include "params.h"
#include "xcoll.h"

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

/* "[1, 16]", "[8, 1G]", "simple|ll|auto" or "" for text. */
static void format_range(const xcoll_param *p, char *out, size_t out_bytes) {
  char min[24], max[24];
  size_t used = 0;
  out[0] = '\0';
  switch (p->kind) {
  case XCOLL_PARAM_INT:
    snprintf(out, out_bytes, "[%ld, %ld]", (long)p->min, (long)p->max);
    break;
  case XCOLL_PARAM_DOUBLE:
    snprintf(out, out_bytes, "[%g, %g]", p->min, p->max);
    break;
  case XCOLL_PARAM_SIZE:
    xcoll_param_format_size((size_t)p->min, min, sizeof min);
    xcoll_param_format_size((size_t)p->max, max, sizeof max);
    snprintf(out, out_bytes, "[%.20s, %.20s]", min, max);
    break;
  case XCOLL_PARAM_CHOICE:
    for (int i = 0; p->choices[i] != NULL && used < out_bytes; i++) {
      int n = snprintf(out + used, out_bytes - used, "%s%s", i ? "|" : "",
                       p->choices[i]);
      if (n < 0)
        break;
      used += (size_t)n;
    }
    break;
  case XCOLL_PARAM_TEXT: break;
  }
}

/* The default in words; XCOLL_CHUNK_SIZE's depends on the backend, so each
 * compiled-in backend's is listed ("tcp 128K, ucx 512K"). */
static void format_default(const xcoll_param *p, char *out, size_t out_bytes) {
  if (strcmp(p->name, "XCOLL_CHUNK_SIZE") != 0) {
    xcoll_param_format_default(p, out, out_bytes);
    return;
  }
  size_t used = 0;
  out[0] = '\0';
  for (const xcoll_backend *const *b = xcoll_backend_list(); *b; b++) {
    char size[32];
    xcoll_param_format_size((*b)->default_chunk_bytes ? (*b)->default_chunk_bytes
                                                      : (size_t)p->def,
                            size, sizeof size);
    int n = snprintf(out + used, out_bytes - used, "%s%s %s", used ? ", " : "",
                     (*b)->name, size);
    if (n < 0 || (size_t)n >= out_bytes - used)
      break;
    used += (size_t)n;
  }
}

/* 1 when a compiled-in backend reads p (core's own variables: always). */
static int read_by_compiled_in(const xcoll_param *p) {
  for (const xcoll_backend *const *b = xcoll_backend_list(); *b; b++)
    if (xcoll_param_read_by(p, (*b)->name))
      return 1;
  return 0;
}

/* The table's entries of one group: xcoll's own (launcher 0) or the
 * launchers' (1). */
static int print_parameters(const char *title, int launcher) {
  size_t count = 0;
  const xcoll_param *table = xcoll_param_table(&count);
  int malformed = 0;
  printf("\n%s\n", title);
  printf("  %-26s %-16s %-24s %-28s %s\n", "variable", "value", "default",
         "accepted", "meaning");
  for (size_t i = 0; i < count; i++) {
    const xcoll_param *p = &table[i];
    if (p->launcher != launcher)
      continue;
    /* A backend's own variable means nothing when none of the backends
     * that read it is built in. */
    if (!read_by_compiled_in(p))
      continue;
    const char *value = xcoll_env_str(p->name);
    char def[96], range[64];
    format_default(p, def, sizeof def);
    format_range(p, range, sizeof range);
    printf("  %-26s %-16s %-24s %-28s %s\n", p->name, value ? value : "(unset)",
           def, range, p->description);
    if (xcoll_param_check(p) != XCOLL_SUCCESS) {
      printf("    ^ malformed: %s\n", xcoll_last_error());
      malformed++;
    }
  }
  return malformed;
}

/* --default NAME: print the default the library uses for NAME (for scripts
 * and for the test that holds xcoll-info and the library together). */
static int print_one_default(const char *name) {
  const xcoll_param *p = xcoll_param_find(name);
  if (p == NULL) {
    fprintf(stderr, "xcoll-info: %s is not an xcoll parameter: run xcoll-info "
            "for the list\n", name);
    return 2;
  }
  char def[96];
  format_default(p, def, sizeof def);
  printf("%s\n", def);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    printf("xcoll-info (xcoll) %s\n", XCOLL_PROJECT_VERSION);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "--default") == 0)
    return print_one_default(argv[2]);
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("usage: %s [--version | --default XCOLL_NAME]\n  prints the xcoll "
           "version, compiled-in backends, environment variables (checked as "
           "the library checks them; exit 1 when one is malformed) and "
           "UCX/CUDA availability\n  --default NAME prints the default the "
           "library uses for NAME\n",
           argv[0]);
    return 0;
  }
  if (argc > 1) {
    if (strcmp(argv[1], "--default") == 0)
      fprintf(stderr, "xcoll-info: --default takes one XCOLL_NAME\n");
    else
      fprintf(stderr, "xcoll-info: unexpected argument '%s'\n", argv[1]);
    fputs("see 'xcoll-info --help'\n", stderr);
    return 2;
  }
  int version = xcoll_version();
  printf("xcoll %d.%d.%d (library), built against header %d.%d.%d\n",
         version / 10000, version / 100 % 100, version % 100, XCOLL_VERSION_MAJOR,
         XCOLL_VERSION_MINOR, XCOLL_VERSION_PATCH);

  printf("\nbackends compiled in\n");
  for (const xcoll_backend *const *b = xcoll_backend_list(); *b; b++)
    printf("  %-10s %s (backend ABI %d)\n", (*b)->name,
           (*b)->description ? (*b)->description : "", (*b)->abi_version);

  int malformed = print_parameters("xcoll variables (core/params.c)", 0);
  malformed += print_parameters(
      "launcher variables (read by xcoll_comm_init_env; -1: unknown)", 1);
  const char *backend = xcoll_env_str("XCOLL_BACKEND");
  if (backend && !backend_compiled_in(backend)) {
    printf("    ^ XCOLL_BACKEND=%s is not compiled in: pick one listed above\n",
           backend);
    malformed++;
  }
  print_availability();
  return malformed ? 1 : 0;
}
