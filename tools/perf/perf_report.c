/*
 * perf_report.c - xcoll-perf's output: the header and one row per size in
 * nccl-tests' columns (size, count, type, redop, root, then time, algbw,
 * busbw and #wrong out of place and in place; types as nccl-tests names
 * them, "float" for float32), with the algorithm and
 * protocol the library ran; and the same rows as JSON Lines for --json.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

void perf_print_header(const perf_run *run) {
  const perf_options *o = run->opt;
  const char *forced = getenv("XCOLL_ALGO");
  const char *proto = getenv("XCOLL_PROTO");
  printf("# xcoll-perf %d.%d.%d: %s, backend %s, world_size %d, %s mode (-z %d), "
         "time %s over ranks (-a %d); algorithm/protocol: per row, as the "
         "library ran them (XCOLL_ALGO %s, XCOLL_PROTO %s)\n",
         xcoll_version() / 10000, xcoll_version() / 100 % 100,
         xcoll_version() % 100, perf_coll_names[o->coll], xcoll_comm_backend(run->comm),
         run->world_size,
         o->blocking == 1   ? "blocking"
         : o->blocking == 2 ? "issue-and-wait"
                            : "non-blocking",
         o->blocking,
         perf_average_names[o->average], o->average,
         forced && forced[0] ? forced : "unset: by size",
         proto && proto[0] ? proto : "unset");
  if (run->p2p_send_ranks + run->shm_send_ranks + run->net_send_ranks > 0)
    printf("# transports (each rank's connection to the next): P2P on %d "
           "rank(s), SHM on %d, NET on %d (XCOLL_P2P_DISABLE, "
           "XCOLL_SHM_DISABLE, XCOLL_NET)\n",
           run->p2p_send_ranks, run->shm_send_ranks, run->net_send_ranks);
  else
    printf("# transports: %s\n", xcoll_comm_backend(run->comm));
  int host_ranks = 1, host_cpus = 1, own_cpus = 1;
  if (xcoll_comm_host(run->comm, &host_ranks, &host_cpus, &own_cpus) ==
      XCOLL_SUCCESS)
    printf("# host of rank 0: %d rank(s) of %d on %d CPU(s) between them, "
           "rank 0 may run on %d%s (xcoll_comm_host)\n",
           host_ranks, run->world_size, host_cpus, own_cpus,
           host_ranks > host_cpus ? "; oversubscribed: the ranks time-share "
                                    "cores"
                                  : "");
  printf("# GPU ranks (bound to a CUDA device): %d of %d; buffers: CUDA device "
         "memory on %d ranks, host memory on %d\n",
         run->gpu_ranks, run->world_size, run->device_buffer_ranks,
         run->world_size - run->device_buffer_ranks);
  printf("# minbytes %zu maxbytes %zu step %s%g iters %d warmup_iters %d "
         "agg_iters %d run_cycles %d check %d timeout %d report_cputime %d\n",
         o->min_bytes, o->max_bytes, o->step_factor > 0 ? "x" : "+",
         o->step_factor > 0 ? o->step_factor : (double)o->step_bytes, o->iters,
         o->warmup_iters, o->agg_iters, o->run_cycles, o->check, o->timeout_s,
         o->report_cputime);
  if (o->local_register)
    printf("# -R %d: no-op: xcoll registers no user buffers; the calls use "
           "them as they are\n", o->local_register);
  if (o->stream_null)
    printf("# -y 1: no-op: xcoll-perf's calls always use the NULL stream\n");
  if (o->mulsum)
    printf("# mulsum: each rank r scales its input by %g + r %% 2 "
           "(xcoll_op_create_premul_sum), then the ranks sum\n",
           perf_premul_scalar(0));
  printf("#\n");
  const char *time = o->report_cputime ? "cputime" : "time";
  printf("# %10s %12s %8s %6s %6s   %-30s   %-30s\n", "", "", "", "", "",
         "            out-of-place", "              in-place");
  printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s  %s\n", "size",
         "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong",
         time, "algbw", "busbw", "#wrong", "algorithm/protocol");
  printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
         "(GB/s)", "(GB/s)", "");
}

/* "ring/p2p", or "ring/p2p|rabenseifner/p2p" when the in-place half ran
 * something else. */
static void format_algorithm(char *out, size_t out_bytes, const perf_result *oop,
                             const perf_result *ip) {
  if (strcmp(oop->algorithm, ip->algorithm) == 0 &&
      strcmp(oop->protocol, ip->protocol) == 0)
    snprintf(out, out_bytes, "%s/%s", oop->algorithm, oop->protocol);
  else
    snprintf(out, out_bytes, "%s/%s|%s/%s", oop->algorithm, oop->protocol,
             ip->algorithm, ip->protocol);
}

static void format_wrong(char *out, size_t out_bytes, int64_t wrong) {
  if (wrong < 0)
    snprintf(out, out_bytes, "N/A");
  else
    snprintf(out, out_bytes, "%" PRId64, wrong);
}

static const char *redop_column(const perf_options *o) {
  if (!perf_coll_info(o->coll)->has_op)
    return "none";
  return o->mulsum ? "mulsum" : xcoll_op_name(o->op);
}

static int root_column(const perf_options *o) {
  return perf_coll_info(o->coll)->has_root ? o->root : -1;
}

void perf_print_row(const perf_run *run, const perf_shape *s,
                    const perf_result *oop, const perf_result *ip) {
  const perf_options *o = run->opt;
  char wrong_oop[24], wrong_ip[24], algorithm[128];
  format_wrong(wrong_oop, sizeof wrong_oop, oop->wrong);
  format_wrong(wrong_ip, sizeof wrong_ip, ip->wrong);
  format_algorithm(algorithm, sizeof algorithm, oop, ip);
  printf("  %10zu %12zu %8s %6s %6d %9.2f %7.3f %7.3f %6s %9.2f %7.3f %7.3f %6s  %s\n",
         s->bytes, s->count, perf_dtype_name(o->dtype), redop_column(o),
         root_column(o), oop->time_us, oop->algbw, oop->busbw, wrong_oop,
         ip->time_us, ip->algbw, ip->busbw, wrong_ip, algorithm);
  fflush(stdout);
}

/* JSON Lines: every string written here is a fixed name from this program or
 * the library (no user text), and numbers are finite, so no escaping is
 * needed. "algorithm"/"protocol" are the out-of-place half's, "ip_..." the
 * in-place half's (xcoll_comm_last_algorithm). */
static void json_number(FILE *f, const char *key, double value) {
  fprintf(f, "\"%s\":%.6g", key, isfinite(value) ? value : 0.0);
}

void perf_write_json_row(FILE *f, const perf_run *run, const perf_shape *s,
                         const perf_result *oop, const perf_result *ip,
                         int cycle) {
  const perf_options *o = run->opt;
  fprintf(f,
          "{\"tool\":\"xcoll-perf\",\"collective\":\"%s\",\"backend\":\"%s\","
          "\"algorithm\":\"%s\",\"protocol\":\"%s\","
          "\"ip_algorithm\":\"%s\",\"ip_protocol\":\"%s\","
          "\"world_size\":%d,\"gpu_ranks\":%d,\"device_buffer_ranks\":%d,"
          "\"blocking\":%d,\"average\":\"%s\",\"cycle\":%d,"
          "\"size\":%zu,\"count\":%zu,"
          "\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"iters\":%d,"
          "\"warmup_iters\":%d,\"agg_iters\":%d,\"report_cputime\":%d,",
          perf_coll_names[o->coll], xcoll_comm_backend(run->comm), oop->algorithm,
          oop->protocol, ip->algorithm, ip->protocol, run->world_size,
          run->gpu_ranks, run->device_buffer_ranks, o->blocking, perf_average_names[o->average], cycle, s->bytes, s->count,
          perf_dtype_name(o->dtype), redop_column(o), root_column(o),
          o->iters, o->warmup_iters, o->agg_iters, o->report_cputime);
  const perf_result *halves[2] = {oop, ip};
  const char *prefixes[2] = {"oop", "ip"};
  for (int h = 0; h < 2; h++) {
    char key[32];
    snprintf(key, sizeof key, "%s_time_us", prefixes[h]);
    json_number(f, key, halves[h]->time_us);
    snprintf(key, sizeof key, "%s_algbw", prefixes[h]);
    fputc(',', f);
    json_number(f, key, halves[h]->algbw);
    snprintf(key, sizeof key, "%s_busbw", prefixes[h]);
    fputc(',', f);
    json_number(f, key, halves[h]->busbw);
    if (halves[h]->wrong < 0)
      fprintf(f, ",\"%s_wrong\":null", prefixes[h]);
    else
      fprintf(f, ",\"%s_wrong\":%" PRId64, prefixes[h], halves[h]->wrong);
    fputc(h == 0 ? ',' : '}', f);
  }
  fputc('\n', f);
  fflush(f);
}

