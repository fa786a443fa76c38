/* checkpoint_fsdp.c - full and sharded FSDP checkpoints (see
 * checkpoint_fsdp.h). */
#include "checkpoint_fsdp.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_point.h"
#include "fsdp.h"

#define INDEX_FORMAT "xtrain-fsdp-sharded-1"

/* Elements of unit u's shard, and its place in s->params. */
static size_t unit_shard(const strategy *s, int u, int S) {
  return (s->plan.units[u].count + (size_t)S - 1) / (size_t)S;
}

void fsdp_shard_from_full(const strategy *s, const float *full, float *local) {
  int rank, S;
  xcoll_comm_t comm;
  fsdp_shard_group(s, &rank, &S, &comm);
  size_t at = 0;
  for (int u = 0; u < s->plan.num_units; u++) {
    const unit *pu = &s->plan.units[u];
    size_t shard = unit_shard(s, u, S);
    size_t begin = (size_t)rank * shard;
    size_t end = begin + shard > pu->count ? pu->count : begin + shard;
    size_t n = begin < end ? end - begin : 0;
    if (n > 0)
      memcpy(local + at, full + pu->offset + begin, n * sizeof(float));
    memset(local + at + n, 0, (shard - n) * sizeof(float));
    at += shard;
  }
}

xcoll_status fsdp_full_from_shards(const strategy *s, const float *local,
                                   float *full) {
  int rank, S;
  xcoll_comm_t comm;
  fsdp_shard_group(s, &rank, &S, &comm);
  size_t at = 0;
  for (int u = 0; u < s->plan.num_units; u++) {
    const unit *pu = &s->plan.units[u];
    size_t shard = unit_shard(s, u, S);
    float *gathered = malloc((size_t)S * shard * sizeof(float) + 1);
    if (!gathered)
      return XCOLL_ERR_NO_MEMORY;
    xcoll_status st = xcoll_allgather(local + at, gathered, shard,
                                      XCOLL_FLOAT32, comm);
    if (st == XCOLL_SUCCESS)
      memcpy(full + pu->offset, gathered, pu->count * sizeof(float));
    free(gathered);
    if (st != XCOLL_SUCCESS)
      return st;
    at += shard;
  }
  return XCOLL_SUCCESS;
}

/* A model whose tensors are the units' flat shards: checkpoint_save and
 * checkpoint_load then write and read a sharded file as they do a full
 * one ("model.fsdp_unit<u>", "optim.fsdp_unit<u>.<state>"). */
static void shard_model(const strategy *s, int S, model *flat) {
  memset(flat, 0, sizeof *flat);
  flat->kind = s->m->kind;
  for (int u = 0; u < s->plan.num_units; u++) {
    param_view *v = &flat->views[u];
    snprintf(v->name, sizeof v->name, "fsdp_unit%d", u);
    v->offset = flat->num_elements;
    v->numel = unit_shard(s, u, S);
    v->ndim = 1;
    v->shape[0] = (int)v->numel;
    flat->num_elements += v->numel;
  }
  flat->num_params = s->plan.num_units;
  flat->params = s->params;
}

/* A generation's shard file: "<stem>.g<generation>.rank<r>-of-<W>.safetensors". */
static void file_name(char *out, size_t size, const char *stem,
                      int64_t generation, int rank, int world_size) {
  snprintf(out, size, "%s.g%" PRId64 ".rank%d-of-%d.safetensors", stem,
           generation, rank, world_size);
}

/* Write text to dir/name atomically, as checkpoint_save writes. */
static int write_text_atomic(const char *dir, const char *name,
                             const char *text, char *err, size_t err_size) {
  char path[8400], tmp[8400];
  snprintf(path, sizeof path, "%.4000s/%.4000s", dir, name);
  snprintf(tmp, sizeof tmp, "%.4000s/.%.4000s.tmp.%ld", dir, name,
           (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, err_size, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  size_t n = strlen(text);
  return checkpoint_commit(f, fwrite(text, 1, n, f) != n, tmp, path, dir, err,
                           err_size);
}

static char *build_index(const strategy *s, const optimizer *o,
                         const checkpoint_meta *meta, const char *stem,
                         int64_t generation, int world_size, int S) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", INDEX_FORMAT);
  cJSON_AddNumberToObject(root, "generation", (double)generation);
  cJSON_AddNumberToObject(root, "step", (double)meta->step);
  cJSON_AddNumberToObject(root, "world_size", world_size);
  cJSON_AddNumberToObject(root, "shard_group_size", S);
  cJSON_AddStringToObject(root, "strategy", s->name);
  cJSON_AddStringToObject(root, "model", model_kind_name(s->m->kind));
  cJSON_AddStringToObject(root, "optimizer",
                          o->kind == OPTIM_ADAMW ? "adamw" : "sgd");
  cJSON *units = cJSON_AddArrayToObject(root, "units");
  for (int u = 0; u < s->plan.num_units; u++) {
    const unit *pu = &s->plan.units[u];
    size_t shard = unit_shard(s, u, S);
    cJSON *j = cJSON_CreateObject();
    char name[40];
    snprintf(name, sizeof name, "fsdp_unit%d", u);
    cJSON_AddStringToObject(j, "tensor", name);
    cJSON *tensors = cJSON_AddArrayToObject(j, "params");
    for (int p = pu->first_param; p <= pu->last_param; p++)
      cJSON_AddItemToArray(tensors, cJSON_CreateString(s->m->views[p].name));
    cJSON_AddNumberToObject(j, "numel", (double)pu->count);
    cJSON_AddNumberToObject(j, "shard_numel", (double)shard);
    cJSON_AddNumberToObject(j, "padding", (double)(shard * S - pu->count));
    cJSON_AddItemToArray(units, j);
  }
  cJSON *files = cJSON_AddArrayToObject(root, "files");
  for (int r = 0; r < world_size; r++) {
    char name[4096];
    file_name(name, sizeof name, stem, generation, r, world_size);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "rank", r);
    cJSON_AddNumberToObject(j, "shard_rank", r % S);
    cJSON_AddStringToObject(j, "file", name);
    cJSON_AddItemToArray(files, j);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

static int save_full(const strategy *s, const optimizer *o,
                     const checkpoint_meta *meta, const char *dir,
                     const char *stem, int rank, char *err, size_t err_size) {
  const model *m = s->m;
  size_t n = m->num_elements;
  float *buffers[3] = {NULL, NULL, NULL}; /* params, state 0, state 1 */
  int rc = -1;
  for (int i = 0; i <= o->num_state; i++) {
    buffers[i] = malloc(n * sizeof(float) + 1);
    if (!buffers[i]) {
      snprintf(err, err_size, "out of memory gathering a full checkpoint");
      goto out;
    }
  }
  for (int i = 0; i <= o->num_state; i++) {
    xcoll_status st = fsdp_full_from_shards(
        s, i == 0 ? s->params : o->state[i - 1], buffers[i]);
    if (st != XCOLL_SUCCESS) {
      snprintf(err, err_size, "gathering the full checkpoint failed: %s",
               xcoll_strerror(st));
      goto out;
    }
  }
  rc = 0;
  if (rank == 0) {
    /* The model and optimizer as one process holds them. */
    model full = *m;
    full.params = buffers[0];
    optimizer fo = *o;
    fo.n = n;
    for (int i = 0; i < o->num_state; i++)
      fo.state[i] = buffers[i + 1];
    char name[4096];
    snprintf(name, sizeof name, "%s.safetensors", stem);
    rc = checkpoint_save(dir, name, &full, &fo, meta, err, err_size);
  }
out:
  for (int i = 0; i < 3; i++)
    free(buffers[i]);
  return rc;
}

/* The generation dir/<stem>.index.json names, or 0 when there is none (no
 * index, an unreadable one, or one written before generations). */
static int64_t current_generation(const char *dir, const char *stem) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.index.json", dir, stem);
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  cJSON *root = cJSON_Parse(text);
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "generation");
  int64_t generation = cJSON_IsNumber(g) && g->valuedouble > 0 &&
                               g->valuedouble < 9e15
                           ? (int64_t)g->valuedouble
                           : 0;
  cJSON_Delete(root);
  return generation;
}

/* Every rank learns whether any rank failed: returns the lowest failing
 * rank, or -1 when all succeeded (or the allreduce itself failed: then
 * world_size, with err set). */
static int any_failed(xcoll_comm_t world, int rank, int world_size, int failed,
                      const char *what, char *err, size_t err_size) {
  /* MAX over world_size - r of the failing ranks names the lowest. */
  int64_t mine = failed ? world_size - rank : 0, worst = 0;
  xcoll_status st =
      xcoll_allreduce(&mine, &worst, 1, XCOLL_INT64, XCOLL_MAX, world);
  if (st != XCOLL_SUCCESS) {
    snprintf(err, err_size, "agreeing on %s: %s", what, xcoll_strerror(st));
    return world_size;
  }
  return worst > 0 ? world_size - (int)worst : -1;
}

/* "<stem>.rank<r>-of-<W>.safetensors" (before generations) or
 * "<stem>.g<G>.rank<r>-of-<W>.safetensors": 1 with *generation (0 for the
 * first form) and *file_rank, else 0. */
static int parse_shard_name(const char *name, const char *stem,
                            int64_t *generation, int *file_rank) {
  size_t n = strlen(stem);
  if (strncmp(name, stem, n) != 0 || name[n] != '.')
    return 0;
  const char *p = name + n + 1;
  long long g = 0;
  int r = -1, w = -1, used = 0;
  if (p[0] == 'g') {
    if (sscanf(p, "g%lld.rank%d-of-%d.safetensors%n", &g, &r, &w, &used) != 3)
      return 0;
  } else if (sscanf(p, "rank%d-of-%d.safetensors%n", &r, &w, &used) != 2) {
    return 0;
  }
  if (p[used] != '\0' || r < 0 || w < 1 || g < 0)
    return 0;
  *generation = g;
  *file_rank = r;
  return 1;
}

/* After the index names generation: remove this rank's shard files of
 * every other generation (rank 0 also those of ranks beyond the world, left
 * by a larger run), so that only the set the index names stays. */
static void remove_old_generations(const char *dir, const char *stem,
                                   int64_t generation, int rank,
                                   int world_size) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int64_t g;
    int file_rank;
    if (!parse_shard_name(e->d_name, stem, &g, &file_rank) ||
        g == generation ||
        !(file_rank == rank || (rank == 0 && file_rank >= world_size)))
      continue;
    char path[8400];
    snprintf(path, sizeof path, "%.4000s/%.4000s", dir, e->d_name);
    if (unlink(path) == 0)
      fault_point("sharded_save.removed_old");
  }
  closedir(d);
}

/* The sharded save, in two phases so that a kill at any point leaves the
 * last complete set loadable (docs/trainer.md, "Checkpoints"):
 *   1. the ranks agree on a new generation (the index's + 1);
 *   2. each rank writes its shard under the new generation's name, beside
 *      the old generation's files, which nothing touches;
 *   3. once every rank's shard is in place (agreed: a rank that failed is
 *      known to all), rank 0 writes the index naming the new generation:
 *      temporary file, fsync, rename, fsync of the directory; this rename
 *      is the switch from the old set to the new one;
 *   4. once every rank knows the index is in place, each removes its files
 *      of older generations.
 * A kill before the rename of step 3 leaves the old index and the old
 * files; after it, the new index and the new files. */
static int save_sharded(const strategy *s, const optimizer *o,
                        const checkpoint_meta *meta, const char *dir,
                        const char *stem, xcoll_comm_t world, int rank,
                        int world_size, char *err, size_t err_size) {
  fault_point("sharded_save.begin");
  int shard_rank, S;
  xcoll_comm_t comm;
  fsdp_shard_group(s, &shard_rank, &S, &comm);
  /* Rank 0's reading of the index decides: MAX over the world. */
  int64_t mine = rank == 0 ? current_generation(dir, stem) : 0, latest = 0;
  xcoll_status st =
      xcoll_allreduce(&mine, &latest, 1, XCOLL_INT64, XCOLL_MAX, world);
  if (st != XCOLL_SUCCESS) {
    snprintf(err, err_size, "agreeing on the generation of %s/%s: %s", dir,
             stem, xcoll_strerror(st));
    return -1;
  }
  int64_t generation = latest + 1;

  model flat;
  shard_model(s, S, &flat);
  char name[4096];
  file_name(name, sizeof name, stem, generation, rank, world_size);
  int failed = checkpoint_save(dir, name, &flat, o, meta, err, err_size) != 0;
  if (!failed)
    fault_point("sharded_save.shard_written");
  /* The index names a complete set: every rank's file is in place before
   * rank 0 writes it (agreed on the world: under hybrid_shard the sharding
   * group is one node). */
  char what[160];
  snprintf(what, sizeof what, "the shards of %s generation %" PRId64, stem,
           generation);
  char agree_err[512];
  int bad = any_failed(world, rank, world_size, failed, what, agree_err,
                       sizeof agree_err);
  if (failed) /* this rank's own reason is in err */
    return -1;
  if (bad >= 0) {
    if (bad < world_size)
      snprintf(err, err_size, "rank %d could not write its shard of %s/%s "
               "(see its error): the index still names the previous set",
               bad, dir, stem);
    else
      snprintf(err, err_size, "%s", agree_err);
    return -1;
  }

  if (rank == 0) {
    fault_point("sharded_save.index_pending");
    char *index = build_index(s, o, meta, stem, generation, world_size, S);
    if (!index) {
      snprintf(err, err_size, "cannot build %s.index.json (no memory)", stem);
      failed = 1;
    } else {
      snprintf(name, sizeof name, "%s.index.json", stem);
      failed = write_text_atomic(dir, name, index, err, err_size) != 0;
      free(index);
    }
    if (!failed)
      fault_point("sharded_save.index_written");
  }
  snprintf(what, sizeof what, "the index of %s generation %" PRId64, stem,
           generation);
  bad = any_failed(world, rank, world_size, failed, what, agree_err,
                   sizeof agree_err);
  if (failed)
    return -1;
  if (bad >= 0) {
    if (bad < world_size)
      snprintf(err, err_size, "rank 0 could not write %s/%s.index.json (see "
               "its error): it still names the previous set", dir, stem);
    else
      snprintf(err, err_size, "%s", agree_err);
    return -1;
  }
  remove_old_generations(dir, stem, generation, rank, world_size);
  fault_point("sharded_save.done");
  return 0;
}

int fsdp_checkpoint_save(const strategy *s, const optimizer *o,
                         const checkpoint_meta *meta, checkpoint_format format,
                         const char *dir, const char *stem,
                         xcoll_comm_t world, int rank, int world_size,
                         char *err, size_t err_size) {
  if (format == CHECKPOINT_FULL)
    return save_full(s, o, meta, dir, stem, rank, err, err_size);
  return save_sharded(s, o, meta, dir, stem, world, rank, world_size, err,
                      err_size);
}

/* ---- sharded load ---- */

static const cJSON *item(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int number_is(const cJSON *o, const char *key, double want) {
  const cJSON *j = item(o, key);
  return cJSON_IsNumber(j) && j->valuedouble == want;
}

static char *read_text(const char *path, char *err, size_t err_size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "cannot open sharded checkpoint index %s: %s",
             path, strerror(errno));
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  char *text = size >= 0 && size < (16L << 20) ? malloc((size_t)size + 1)
                                                : NULL;
  if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
    snprintf(err, err_size, "%s: cannot read the index (%ld bytes)", path,
             size);
    free(text);
    fclose(f);
    return NULL;
  }
  text[size] = '\0';
  fclose(f);
  return text;
}

/* Every field of the index against this run; 0 or -1 with err. */
static int check_index(const char *path, const cJSON *root, const strategy *s,
                       const optimizer *o, int world_size, int S, int rank,
                       char *file, size_t file_size, int64_t *step, char *err,
                       size_t err_size) {
  const cJSON *fmt = item(root, "format");
  if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) ||
      strcmp(fmt->valuestring, INDEX_FORMAT) != 0) {
    snprintf(err, err_size, "%s: not an xtrain sharded checkpoint index "
             "(format is not \"%s\")", path, INDEX_FORMAT);
    return -1;
  }
  const cJSON *ws = item(root, "world_size");
  if (!cJSON_IsNumber(ws)) {
    snprintf(err, err_size, "%s: world_size is missing", path);
    return -1;
  }
  if (ws->valuedouble != world_size) {
    snprintf(err, err_size, "%s: written by %g ranks, but this run has %d: a "
             "sharded checkpoint resumes only at the same world size (resume "
             "at %g ranks and save with --checkpoint-format full, which "
             "resumes at any world size)", path, ws->valuedouble, world_size,
             ws->valuedouble);
    return -1;
  }
  if (!number_is(root, "shard_group_size", S)) {
    snprintf(err, err_size, "%s: written with another sharding group size "
             "than this run's %d (another --sharding or LOCAL_WORLD_SIZE)",
             path, S);
    return -1;
  }
  const cJSON *opt = item(root, "optimizer");
  const char *want = o->kind == OPTIM_ADAMW ? "adamw" : "sgd";
  if (!cJSON_IsString(opt) || strcmp(opt->valuestring, want) != 0) {
    snprintf(err, err_size, "%s: saved with optimizer %s, but this run uses "
             "%s", path, cJSON_IsString(opt) ? opt->valuestring : "(none)",
             want);
    return -1;
  }
  const cJSON *units = item(root, "units");
  if (!cJSON_IsArray(units) ||
      cJSON_GetArraySize(units) != s->plan.num_units) {
    snprintf(err, err_size, "%s: has %d unit(s), this run has %d: the unit "
             "layout (--model, --fsdp-min-params) must be the one it was "
             "saved with", path,
             cJSON_IsArray(units) ? cJSON_GetArraySize(units) : -1,
             s->plan.num_units);
    return -1;
  }
  for (int u = 0; u < s->plan.num_units; u++) {
    const cJSON *j = cJSON_GetArrayItem(units, u);
    const unit *pu = &s->plan.units[u];
    const cJSON *params = item(j, "params");
    int ok = cJSON_IsObject(j) && number_is(j, "numel", (double)pu->count) &&
             number_is(j, "shard_numel", (double)unit_shard(s, u, S)) &&
             cJSON_IsArray(params) &&
             cJSON_GetArraySize(params) == pu->last_param - pu->first_param + 1;
    for (int p = pu->first_param; ok && p <= pu->last_param; p++) {
      const cJSON *name = cJSON_GetArrayItem(params, p - pu->first_param);
      ok = cJSON_IsString(name) &&
           strcmp(name->valuestring, s->m->views[p].name) == 0;
    }
    if (!ok) {
      snprintf(err, err_size, "%s: unit %d differs from this run's (%s..%s, "
               "%zu elements, shards of %zu): the unit layout (--model, "
               "--fsdp-min-params) must be the one it was saved with", path,
               u, s->m->views[pu->first_param].name,
               s->m->views[pu->last_param].name, pu->count,
               unit_shard(s, u, S));
      return -1;
    }
  }
  const cJSON *files = item(root, "files");
  const cJSON *mine = cJSON_IsArray(files) ? cJSON_GetArrayItem(files, rank)
                                           : NULL;
  const cJSON *name = mine ? item(mine, "file") : NULL;
  if (!number_is(mine, "rank", rank) || !cJSON_IsString(name) ||
      strchr(name->valuestring, '/') != NULL) {
    snprintf(err, err_size, "%s: files[%d] does not name rank %d's file",
             path, rank, rank);
    return -1;
  }
  snprintf(file, file_size, "%s", name->valuestring);
  const cJSON *st = item(root, "step");
  if (!cJSON_IsNumber(st) || st->valuedouble < 0) {
    snprintf(err, err_size, "%s: step is missing", path);
    return -1;
  }
  *step = (int64_t)st->valuedouble;
  return 0;
}

int fsdp_checkpoint_load_sharded(const strategy *s, optimizer *o,
                                 checkpoint_meta *meta, const char *dir,
                                 const char *stem, int rank, int world_size,
                                 char *err, size_t err_size) {
  int shard_rank, S;
  xcoll_comm_t comm;
  fsdp_shard_group(s, &shard_rank, &S, &comm);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.index.json", dir, stem);
  char *text = read_text(path, err, err_size);
  if (!text)
    return -1;
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!root) {
    snprintf(err, err_size, "%s: not valid JSON", path);
    return -1;
  }
  char file[1024];
  int64_t step = 0;
  int rc = check_index(path, root, s, o, world_size, S, rank, file,
                       sizeof file, &step, err, err_size);
  cJSON_Delete(root);
  if (rc != 0)
    return -1;
  model flat;
  shard_model(s, S, &flat);
  char shard_path[4096 + 1024];
  snprintf(shard_path, sizeof shard_path, "%s/%s", dir, file);
  if (checkpoint_load(shard_path, &flat, o, meta, err, err_size) != 0)
    return -1;
  if (meta->step != step) {
    snprintf(err, err_size, "%s holds step %" PRId64 " but %s/%s.index.json "
             "says %" PRId64 ": the set was mixed by an interrupted save; "
             "resume from an intact one", shard_path, meta->step, dir, stem,
             step);
    return -1;
  }
  return 0;
}
