/* checkpoint.c - safetensors writer and reader (see checkpoint.h). */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  if (rc != 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    snprintf(err, err_size, "writing %s failed: %s", tmp, strerror(errno));
    fclose(f);
    unlink(tmp);
    return -1;
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
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
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
  if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0) {
    snprintf(err, err_size, "%s: tensor %s has dtype %s, expected F32", path,
             name, cJSON_IsString(dtype) ? dtype->valuestring : "(none)");
    return -1;
  }
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
  int ok = cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == v->ndim;
  for (int d = 0; ok && d < v->ndim; d++) {
    const cJSON *dim = cJSON_GetArrayItem(shape, d);
    ok = cJSON_IsNumber(dim) && dim->valuedouble == v->shape[d];
  }
  if (!ok) {
    snprintf(err, err_size, "%s: tensor %s has a shape other than this "
             "model's (check --model and the CNN channels)", path, name);
    return -1;
  }
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
  const cJSON *b = cJSON_GetArrayItem(offs, 0), *e = cJSON_GetArrayItem(offs, 1);
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
      !cJSON_IsNumber(b) || !cJSON_IsNumber(e) || b->valuedouble < 0 ||
      e->valuedouble - b->valuedouble != (double)(v->numel * 4) ||
      e->valuedouble > (double)data_bytes) {
    snprintf(err, err_size, "%s: tensor %s has bad data_offsets (outside the "
             "file or of the wrong length)", path, name);
    return -1;
  }
  if (fseek(f, data_start + (long)b->valuedouble, SEEK_SET) != 0 ||
      fread(dst, 4, v->numel, f) != v->numel) {
    snprintf(err, err_size, "%s: cannot read tensor %s: truncated file", path,
             name);
    return -1;
  }
  return 0;
}

int checkpoint_load(const char *path, model *m, optimizer *o,
                    checkpoint_meta *meta, char *err, size_t err_size) {
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
  if (fread(len_le, 1, 8, f) != 8) {
    snprintf(err, err_size, "%s: too short to be a safetensors file", path);
    goto out;
  }
  for (int i = 0; i < 8; i++)
    n |= (uint64_t)len_le[i] << (8 * i);
  if (n == 0 || n > MAX_HEADER_BYTES || (long)(8 + n) > file_size) {
    snprintf(err, err_size, "%s: header length %" PRIu64 " is impossible for "
             "a %ld-byte file", path, n, file_size);
    goto out;
  }
  header = malloc(n + 1);
  if (!header || fread(header, 1, n, f) != n) {
    snprintf(err, err_size, "%s: cannot read the %" PRIu64 "-byte header",
             path, n);
    goto out;
  }
  header[n] = '\0';
  root = cJSON_Parse(header);
  if (!cJSON_IsObject(root)) {
    snprintf(err, err_size, "%s: the header is not valid JSON", path);
    goto out;
  }
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
