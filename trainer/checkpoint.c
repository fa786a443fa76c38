/* checkpoint.c - safetensors writer and reader (see checkpoint.h). */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_point.h"

#define MAX_HEADER_BYTES (16u << 20)

static const char *state_suffix(const optimizer *o, int i) {
  if (o->kind == OPTIM_ADAMW)
    return i == 0 ? "exp_avg" : "exp_avg_sq";
  return "momentum_buffer";
}

static cJSON *tensor_entry(const param_view *v, size_t begin) {
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "dtype", "F32");
  cJSON *shape = cJSON_AddArrayToObject(t, "shape");
  for (int d = 0; d < v->ndim; d++)
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(v->shape[d]));
  cJSON *offsets = cJSON_AddArrayToObject(t, "data_offsets");
  cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)begin));
  cJSON_AddItemToArray(offsets,
                       cJSON_CreateNumber((double)(begin + v->numel * 4)));
  return t;
}

static void add_meta_int(cJSON *meta, const char *key, int64_t value) {
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRId64, value);
  cJSON_AddStringToObject(meta, key, buf);
}

static char *build_header(const model *m, const optimizer *o,
                          const checkpoint_meta *meta) {
  cJSON *root = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
  cJSON_AddStringToObject(md, "format", "xtrain-1");
  add_meta_int(md, "step", meta->step);
  add_meta_int(md, "epoch", meta->epoch);
  add_meta_int(md, "step_in_epoch", meta->step_in_epoch);
  char buf[96];
  snprintf(buf, sizeof buf, "%.17g", meta->best_test_acc);
  cJSON_AddStringToObject(md, "best_test_acc", buf);
  snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64
           "%016" PRIx64, meta->rng_state.s[0], meta->rng_state.s[1],
           meta->rng_state.s[2], meta->rng_state.s[3]);
  cJSON_AddStringToObject(md, "rng_state", buf);
  cJSON_AddStringToObject(md, "optimizer",
                          o->kind == OPTIM_ADAMW ? "adamw" : "sgd");
  cJSON_AddStringToObject(md, "config", meta->config);
  size_t bytes = m->num_elements * 4;
  for (int i = 0; i < m->num_params; i++) {
    const param_view *v = &m->views[i];
    char name[80];
    snprintf(name, sizeof name, "model.%s", v->name);
    cJSON_AddItemToObject(root, name, tensor_entry(v, v->offset * 4));
    for (int s = 0; s < o->num_state; s++) {
      snprintf(name, sizeof name, "optim.%s.%s", v->name, state_suffix(o, s));
      cJSON_AddItemToObject(root, name,
                            tensor_entry(v, bytes * (1 + s) + v->offset * 4));
    }
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return text;
}

static int write_all(FILE *f, const void *p, size_t n) {
  return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int checkpoint_save(const char *dir, const char *name, const model *m,
                    const optimizer *o, const checkpoint_meta *meta, char *err,
                    size_t err_size) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, name, (long)getpid());
  char *header = build_header(m, o, meta);
  if (!header) {
    snprintf(err, err_size, "%s: cannot build the JSON header (no memory)",
             path);
    return -1;
  }
  size_t len = strlen(header);
  size_t padded = (len + 7) / 8 * 8; /* data stays 8-byte aligned */
  unsigned char len_le[8];
  for (int i = 0; i < 8; i++)
    len_le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, err_size, "cannot create %s: %s (does --checkpoint-dir "
             "exist and is it writable?)", tmp, strerror(errno));
    free(header);
    return -1;
  }
  static const char spaces[8] = "        ";
  size_t bytes = m->num_elements * 4;
  int rc = write_all(f, len_le, 8);
  rc |= write_all(f, header, len);
  rc |= write_all(f, spaces, padded - len);
  /* The buffers are float32 in host order; x86-64 and arm64 are little
   * endian, which is what safetensors specifies. */
  rc |= write_all(f, m->params, bytes);
  for (int s = 0; s < o->num_state; s++)
    rc |= write_all(f, o->state[s], bytes);
  free(header);
  return checkpoint_commit(f, rc, tmp, path, dir, err, err_size);
}

int checkpoint_commit(FILE *f, int write_failed, const char *tmp,
                      const char *path, const char *dir, char *err,
                      size_t err_size) {
  if (write_failed || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    snprintf(err, err_size, "writing %s failed: %s", tmp, strerror(errno));
    fclose(f);
    unlink(tmp);
    return -1;
  }
  if (fclose(f) != 0) {
    snprintf(err, err_size, "cannot close %s: %s", tmp, strerror(errno));
    unlink(tmp);
    return -1;
  }
  /* A kill here leaves the complete temporary file and the old one. */
  fault_point("checkpoint.before_rename");
  if (rename(tmp, path) != 0) {
    snprintf(err, err_size, "cannot move %s to %s: %s", tmp, path,
             strerror(errno));
    unlink(tmp);
    return -1;
  }
  /* The rename is durable only once the directory entry is. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

static int read_meta_int(const cJSON *md, const char *key, int64_t *out) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(md, key);
  if (!cJSON_IsString(item))
    return -1;
  char *end;
  errno = 0;
  long long v = strtoll(item->valuestring, &end, 10);
  if (errno || *end || end == item->valuestring)
    return -1;
  *out = v;
  return 0;
}

/* ---- header validation (every field, before anything is read) ---- */

/* Bytes per element of a safetensors dtype, 0 for an unknown one. */
static size_t dtype_bytes(const char *dtype) {
  static const struct {
    const char *name;
    size_t bytes;
  } table[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
               {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U64", 8},  {"U32", 4},
               {"U16", 2}, {"U8", 1},  {"BOOL", 1}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(dtype, table[i].name) == 0)
      return table[i].bytes;
  return 0;
}

/* A JSON number that is an integer in [0, 2^53]: *out, else -1. */
static int json_size(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item))
    return -1;
  double v = item->valuedouble;
  if (!(v >= 0.0 && v <= 9007199254740992.0))
    return -1;
  uint64_t u = (uint64_t)v;
  if ((double)u != v)
    return -1;
  *out = u;
  return 0;
}

typedef struct byte_range {
  uint64_t begin, end;
  const char *name;
} byte_range;

static int by_begin(const void *a, const void *b) {
  const byte_range *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* One tensor entry: dtype, shape, data_offsets within data_bytes and of the
 * shape's length. Fills *range. */
static int validate_tensor(const char *path, const cJSON *t,
                           uint64_t data_bytes, byte_range *range, char *err,
                           size_t err_size) {
  const char *name = t->string;
  if (!cJSON_IsObject(t)) {
    snprintf(err, err_size, "%s: tensor %.80s: not a JSON object", path, name);
    return -1;
  }
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
  size_t element = cJSON_IsString(dtype) ? dtype_bytes(dtype->valuestring) : 0;
  if (element == 0) {
    snprintf(err, err_size, "%s: tensor %.80s: dtype %.16s is not a "
             "safetensors dtype", path, name,
             cJSON_IsString(dtype) ? dtype->valuestring : "(missing)");
    return -1;
  }
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
  if (!cJSON_IsArray(shape)) {
    snprintf(err, err_size, "%s: tensor %.80s: shape is missing or not an "
             "array", path, name);
    return -1;
  }
  /* Elements, bounded by the data size as we go so that it cannot overflow. */
  uint64_t elements = 1;
  int d = 0;
  for (const cJSON *dim = shape->child; dim != NULL; dim = dim->next, d++) {
    uint64_t n = 0;
    if (json_size(dim, &n) != 0) {
      snprintf(err, err_size, "%s: tensor %.80s: shape[%d] is not an integer "
               ">= 0", path, name, d);
      return -1;
    }
    if (n != 0 && elements > data_bytes / n) {
      snprintf(err, err_size, "%s: tensor %.80s: shape has more elements "
               "than the file's %" PRIu64 " data bytes", path, name,
               data_bytes);
      return -1;
    }
    elements *= n;
  }
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
  uint64_t begin = 0, end = 0;
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
      json_size(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
      json_size(cJSON_GetArrayItem(offs, 1), &end) != 0) {
    snprintf(err, err_size, "%s: tensor %.80s: data_offsets is not two "
             "integers >= 0", path, name);
    return -1;
  }
  if (begin > end || end > data_bytes) {
    snprintf(err, err_size, "%s: tensor %.80s: data_offsets [%" PRIu64
             ", %" PRIu64 "] are not an ordered range within the %" PRIu64
             " data bytes", path, name, begin, end, data_bytes);
    return -1;
  }
  if (elements > data_bytes / element || end - begin != elements * element) {
    snprintf(err, err_size, "%s: tensor %.80s: data_offsets span %" PRIu64
             " bytes, but the shape and dtype %s need %" PRIu64, path, name,
             end - begin, dtype->valuestring, elements * (uint64_t)element);
    return -1;
  }
  range->begin = begin;
  range->end = end;
  range->name = name;
  return 0;
}

static int validate_metadata(const char *path, const cJSON *md, char *err,
                             size_t err_size) {
  if (!cJSON_IsObject(md)) {
    snprintf(err, err_size, "%s: __metadata__ is missing: not an xtrain "
             "checkpoint", path);
    return -1;
  }
  static const char *const counters[] = {"step", "epoch", "step_in_epoch"};
  for (int i = 0; i < 3; i++) {
    int64_t v = 0;
    if (read_meta_int(md, counters[i], &v) != 0) {
      snprintf(err, err_size, "%s: __metadata__.%s is missing or not an "
               "integer: not an xtrain checkpoint", path, counters[i]);
      return -1;
    }
    if (v < 0 || (i == 1 && v > 0x7fffffff)) {
      snprintf(err, err_size, "%s: __metadata__.%s is %" PRId64 ": must be "
               ">= 0%s", path, counters[i], v, i == 1 ? " and fit an int" : "");
      return -1;
    }
  }
  const cJSON *rng_item = cJSON_GetObjectItemCaseSensitive(md, "rng_state");
  int ok = cJSON_IsString(rng_item) && strlen(rng_item->valuestring) == 64;
  for (int i = 0; ok && i < 64; i++)
    ok = isxdigit((unsigned char)rng_item->valuestring[i]) != 0;
  if (!ok) {
    snprintf(err, err_size, "%s: __metadata__.rng_state is missing or not 64 "
             "hex digits", path);
    return -1;
  }
  /* Metadata values are strings by the safetensors format. */
  for (const cJSON *item = md->child; item != NULL; item = item->next)
    if (!cJSON_IsString(item)) {
      snprintf(err, err_size, "%s: __metadata__.%.80s is not a string", path,
               item->string);
      return -1;
    }
  return 0;
}

/* Every field of a parsed header, for a file with data_bytes bytes after it. */
static int validate_header(const char *path, const cJSON *root,
                           uint64_t data_bytes, char *err, size_t err_size) {
  if (!cJSON_IsObject(root)) {
    snprintf(err, err_size, "%s: the header is not a JSON object", path);
    return -1;
  }
  if (validate_metadata(path,
                        cJSON_GetObjectItemCaseSensitive(root, "__metadata__"),
                        err, err_size) != 0)
    return -1;
  int count = cJSON_GetArraySize(root);
  byte_range *ranges = calloc((size_t)count + 1, sizeof *ranges);
  if (!ranges) {
    snprintf(err, err_size, "%s: no memory to check %d header entries", path,
             count);
    return -1;
  }
  int n = 0;
  int rc = 0;
  for (const cJSON *t = root->child; t != NULL && rc == 0; t = t->next) {
    if (t->string == NULL) {
      snprintf(err, err_size, "%s: a header entry has no name", path);
      rc = -1;
    } else if (strcmp(t->string, "__metadata__") != 0) {
      rc = validate_tensor(path, t, data_bytes, &ranges[n], err, err_size);
      n += rc == 0;
    }
  }
  /* Disjoint: sorted by begin, each non-empty range starts at or after the
   * end of the one before. */
  if (rc == 0) {
    qsort(ranges, (size_t)n, sizeof *ranges, by_begin);
    const byte_range *last = NULL;
    for (int i = 0; i < n && rc == 0; i++) {
      if (ranges[i].begin == ranges[i].end)
        continue;
      if (last && ranges[i].begin < last->end) {
        snprintf(err, err_size, "%s: tensor %.80s: data_offsets [%" PRIu64
                 ", %" PRIu64 "] overlap tensor %.80s's [%" PRIu64 ", %" PRIu64
                 "]", path, ranges[i].name, ranges[i].begin, ranges[i].end,
                 last->name, last->begin, last->end);
        rc = -1;
      }
      if (!last || ranges[i].end > last->end)
        last = &ranges[i];
    }
  }
  free(ranges);
  return rc;
}

/* Parse the 8-byte length of a file of file_bytes bytes: 0, or -1 with err. */
static int check_header_length(const char *path, const unsigned char *len_le,
                               uint64_t file_bytes, uint64_t *n, char *err,
                               size_t err_size) {
  *n = 0;
  for (int i = 0; i < 8; i++)
    *n |= (uint64_t)len_le[i] << (8 * i);
  if (*n == 0 || *n > MAX_HEADER_BYTES || *n > file_bytes - 8) {
    snprintf(err, err_size, "%s: header length %" PRIu64 " is impossible for "
             "a %" PRIu64 "-byte file", path, *n, file_bytes);
    return -1;
  }
  return 0;
}

int checkpoint_validate_buffer(const char *path, const uint8_t *bytes,
                               size_t size, char *err, size_t err_size) {
  if (size < 8) {
    snprintf(err, err_size, "%s: too short to be a safetensors file", path);
    return -1;
  }
  uint64_t n = 0;
  if (check_header_length(path, bytes, size, &n, err, err_size) != 0)
    return -1;
  cJSON *root = cJSON_ParseWithLength((const char *)bytes + 8, (size_t)n);
  if (!root) {
    snprintf(err, err_size, "%s: the header is not valid JSON", path);
    return -1;
  }
  int rc = validate_header(path, root, (uint64_t)size - 8 - n, err, err_size);
  cJSON_Delete(root);
  return rc;
}

/* ---- stale temporary files ---- */

int checkpoint_clean_stale(const char *dir, char *err, size_t err_size) {
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT)
      return 0;
    snprintf(err, err_size, "cannot read checkpoint directory %s: %s", dir,
             strerror(errno));
    return -1;
  }
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    /* ".<name>.tmp.<pid>", as checkpoint_save names them. */
    const char *name = e->d_name;
    const char *mark = strstr(name, ".tmp.");
    if (name[0] != '.' || mark == NULL || mark == name)
      continue;
    const char *digits = mark + 5;
    char *end = NULL;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (errno || end == digits || *end != '\0' || pid <= 0)
      continue;
    /* A writer that still runs is saving right now: leave its file. */
    if (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) == 0) {
      removed++;
      fprintf(stderr, "xtrain: removed %s, left by a save that was killed\n",
              path);
    }
  }
  closedir(d);
  return removed;
}

/* "(d0, d1, ...)" of a header's shape array (entries that are not numbers
 * show as -1), for messages. */
static void header_shape_text(const cJSON *shape, char *out, size_t size) {
  size_t at = (size_t)snprintf(out, size, "(");
  for (const cJSON *dim = cJSON_IsArray(shape) ? shape->child : NULL;
       dim && at < size - 16; dim = dim->next)
    at += (size_t)snprintf(out + at, size - at, "%s%g", at > 1 ? ", " : "",
                           cJSON_IsNumber(dim) ? dim->valuedouble : -1.0);
  snprintf(out + at, size - at, ")");
}

/* "(d0, d1, ...)" of a parameter's shape. */
static void view_shape_text(const param_view *v, char *out, size_t size) {
  size_t at = (size_t)snprintf(out, size, "(");
  for (int d = 0; d < v->ndim && at < size; d++)
    at += (size_t)snprintf(out + at, size - at, "%s%d", d ? ", " : "",
                           v->shape[d]);
  if (at < size)
    snprintf(out + at, size - at, ")");
}

int checkpoint_check_tensor(const char *path, const char *name,
                            const struct cJSON *entry, const param_view *v,
                            uint64_t data_bytes, const char *shape_hint,
                            uint64_t *offset, char *err, size_t err_size) {
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
  if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0) {
    snprintf(err, err_size, "%s: tensor %s has dtype %s, expected F32 "
             "(float32; convert with .float() before saving)", path, name,
             cJSON_IsString(dtype) ? dtype->valuestring : "(missing)");
    return -1;
  }
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
  int ok = cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == v->ndim;
  for (int d = 0; ok && d < v->ndim; d++) {
    const cJSON *dim = cJSON_GetArrayItem(shape, d);
    ok = cJSON_IsNumber(dim) && dim->valuedouble == v->shape[d];
  }
  if (!ok) {
    char got[128], want[64];
    header_shape_text(shape, got, sizeof got);
    view_shape_text(v, want, sizeof want);
    snprintf(err, err_size, "%s: tensor %s has shape %s, this model's is %s "
             "(%s)", path, name, got, want, shape_hint);
    return -1;
  }
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
  const cJSON *b = cJSON_GetArrayItem(offs, 0), *e = cJSON_GetArrayItem(offs, 1);
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
      !cJSON_IsNumber(b) || !cJSON_IsNumber(e) || b->valuedouble < 0 ||
      e->valuedouble - b->valuedouble != (double)(v->numel * 4) ||
      e->valuedouble > (double)data_bytes) {
    snprintf(err, err_size, "%s: tensor %s has data_offsets outside the file "
             "or not %zu bytes long (a truncated or damaged file: write it "
             "again)", path, name, v->numel * 4);
    return -1;
  }
  *offset = (uint64_t)b->valuedouble;
  return 0;
}

/* Check a tensor's entry and read its data from f into dst. */
static int load_tensor(FILE *f, const char *path, long data_start,
                       size_t data_bytes, const cJSON *root, const char *name,
                       const param_view *v, float *dst, char *err,
                       size_t err_size) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, name);
  if (!cJSON_IsObject(t)) {
    snprintf(err, err_size, "%s: tensor %s is missing (saved with another "
             "model or optimizer?)", path, name);
    return -1;
  }
  uint64_t offset = 0;
  if (checkpoint_check_tensor(path, name, t, v, data_bytes,
                              "resume with the --model and sizes it was "
                              "saved with: --cnn-channels, --d-model, "
                              "--n-layer, --context",
                              &offset, err, err_size) != 0)
    return -1;
  if (fseek(f, data_start + (long)offset, SEEK_SET) != 0 ||
      fread(dst, 4, v->numel, f) != v->numel) {
    snprintf(err, err_size, "%s: cannot read tensor %s: truncated file", path,
             name);
    return -1;
  }
  return 0;
}

int checkpoint_load(const char *path, model *m, optimizer *o,
                    checkpoint_meta *meta, char *err, size_t err_size) {
  {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
      *slash = '\0';
    else
      snprintf(dir, sizeof dir, ".");
    if (checkpoint_clean_stale(dir, err, err_size) < 0)
      return -1;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "cannot open checkpoint %s: %s", path,
             strerror(errno));
    return -1;
  }
  int rc = -1;
  char *header = NULL;
  cJSON *root = NULL;
  unsigned char len_le[8];
  fseek(f, 0, SEEK_END);
  long file_size = ftell(f);
  rewind(f);
  uint64_t n = 0;
  if (file_size < 8 || fread(len_le, 1, 8, f) != 8) {
    snprintf(err, err_size, "%s: too short to be a safetensors file", path);
    goto out;
  }
  if (check_header_length(path, len_le, (uint64_t)file_size, &n, err,
                          err_size) != 0)
    goto out;
  header = malloc(n + 1);
  if (!header || fread(header, 1, n, f) != n) {
    snprintf(err, err_size, "%s: cannot read the %" PRIu64 "-byte header",
             path, n);
    goto out;
  }
  header[n] = '\0';
  root = cJSON_Parse(header);
  if (!root) {
    snprintf(err, err_size, "%s: the header is not valid JSON", path);
    goto out;
  }
  if (validate_header(path, root, (uint64_t)file_size - 8 - n, err,
                      err_size) != 0)
    goto out;
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  int64_t epoch = 0;
  if (!cJSON_IsObject(md) || read_meta_int(md, "step", &meta->step) != 0 ||
      read_meta_int(md, "epoch", &epoch) != 0 ||
      read_meta_int(md, "step_in_epoch", &meta->step_in_epoch) != 0) {
    snprintf(err, err_size, "%s: __metadata__ lacks step, epoch or "
             "step_in_epoch: not an xtrain checkpoint", path);
    goto out;
  }
  meta->epoch = (int)epoch;
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(md, "best_test_acc");
  meta->best_test_acc = cJSON_IsString(item) ? atof(item->valuestring) : 0.0;
  item = cJSON_GetObjectItemCaseSensitive(md, "rng_state");
  if (!cJSON_IsString(item) || strlen(item->valuestring) != 64) {
    snprintf(err, err_size, "%s: __metadata__.rng_state is missing or not 64 "
             "hex digits", path);
    goto out;
  }
  for (int i = 0; i < 4; i++) {
    char word[17];
    memcpy(word, item->valuestring + 16 * i, 16);
    word[16] = '\0';
    meta->rng_state.s[i] = strtoull(word, NULL, 16);
  }
  item = cJSON_GetObjectItemCaseSensitive(md, "config");
  snprintf(meta->config, sizeof meta->config, "%s",
           cJSON_IsString(item) ? item->valuestring : "{}");
  item = cJSON_GetObjectItemCaseSensitive(md, "optimizer");
  const char *want = o->kind == OPTIM_ADAMW ? "adamw" : "sgd";
  if (!cJSON_IsString(item) || strcmp(item->valuestring, want) != 0) {
    snprintf(err, err_size, "%s: saved with optimizer %s, but this run uses "
             "%s", path, cJSON_IsString(item) ? item->valuestring : "(none)",
             want);
    goto out;
  }
  long data_start = (long)(8 + n);
  size_t data_bytes = (size_t)(file_size - data_start);
  for (int i = 0; i < m->num_params; i++) {
    const param_view *v = &m->views[i];
    char name[80];
    snprintf(name, sizeof name, "model.%s", v->name);
    if (load_tensor(f, path, data_start, data_bytes, root, name, v,
                    m->params + v->offset, err, err_size) != 0)
      goto out;
    for (int s = 0; s < o->num_state; s++) {
      snprintf(name, sizeof name, "optim.%s.%s", v->name, state_suffix(o, s));
      if (load_tensor(f, path, data_start, data_bytes, root, name, v,
                      o->state[s] + v->offset, err, err_size) != 0)
        goto out;
    }
  }
  o->step = meta->step;
  rc = 0;
out:
  cJSON_Delete(root);
  free(header);
  fclose(f);
  return rc;
}
