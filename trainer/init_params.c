/* init_params.c - --export-init and --init-from (see init_params.h). */
#include "init_params.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

#define MAX_HEADER_BYTES (16u << 20)

int init_params_export(const char *path, const model *m, uint64_t seed,
                       float data_mean, float data_std, char *err,
                       size_t err_size) {
  cJSON *root = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
  char buf[64];
  cJSON_AddStringToObject(md, "format", "xtrain-init-1");
  cJSON_AddStringToObject(md, "model", model_kind_name(m->kind));
  snprintf(buf, sizeof buf, "%" PRIu64, seed);
  cJSON_AddStringToObject(md, "seed", buf);
  snprintf(buf, sizeof buf, "%.9g", data_mean);
  cJSON_AddStringToObject(md, "data_mean", buf);
  snprintf(buf, sizeof buf, "%.9g", data_std);
  cJSON_AddStringToObject(md, "data_std", buf);
  for (int i = 0; i < m->num_params; i++) {
    const param_view *v = &m->views[i];
    cJSON *t = cJSON_AddObjectToObject(root, v->name);
    cJSON_AddStringToObject(t, "dtype", "F32");
    cJSON *shape = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < v->ndim; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber(v->shape[d]));
    cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(v->offset * 4)));
    cJSON_AddItemToArray(
        offs, cJSON_CreateNumber((double)((v->offset + v->numel) * 4)));
  }
  char *header = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!header) {
    snprintf(err, err_size, "%s: cannot build the header (no memory)", path);
    return -1;
  }
  size_t len = strlen(header), padded = (len + 7) / 8 * 8;
  unsigned char len_le[8];
  for (int i = 0; i < 8; i++)
    len_le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, err_size, "cannot create --export-init file %s: %s", path,
             strerror(errno));
    free(header);
    return -1;
  }
  static const char spaces[8] = "        ";
  size_t bytes = m->num_elements * 4;
  int bad = fwrite(len_le, 1, 8, f) != 8 || fwrite(header, 1, len, f) != len ||
            fwrite(spaces, 1, padded - len, f) != padded - len ||
            fwrite(m->params, 1, bytes, f) != bytes;
  free(header);
  if (fclose(f) != 0 || bad) {
    snprintf(err, err_size, "writing --export-init file %s failed: %s", path,
             strerror(errno));
    return -1;
  }
  return 0;
}

/* One of m's tensors from the parsed header t into dst. */
static int load_one(const char *path, const cJSON *t, const param_view *v,
                    const unsigned char *data, uint64_t data_bytes, float *dst,
                    char *err, size_t err_size) {
  uint64_t offset = 0;
  if (checkpoint_check_tensor(path, v->name, t, v, data_bytes,
                              "PyTorch's layout: Linear weight (out, in)",
                              &offset, err, err_size) != 0)
    return -1;
  memcpy(dst, data + offset, v->numel * 4);
  return 0;
}

int init_params_load(const char *path, model *m, char *err, size_t err_size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "cannot open --init-from file %s: %s", path,
             strerror(errno));
    return -1;
  }
  unsigned char *bytes = NULL;
  cJSON *root = NULL;
  int rc = -1;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  if (size < 8 || !(bytes = malloc((size_t)size)) ||
      fread(bytes, 1, (size_t)size, f) != (size_t)size) {
    snprintf(err, err_size, "%s: cannot read it, or too short to be a "
             "safetensors file", path);
    goto out;
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; i++)
    n |= (uint64_t)bytes[i] << (8 * i);
  if (n == 0 || n > MAX_HEADER_BYTES || n > (uint64_t)size - 8) {
    snprintf(err, err_size, "%s: header length %" PRIu64 " is impossible for "
             "a %ld-byte file: not a safetensors file", path, n, size);
    goto out;
  }
  root = cJSON_ParseWithLength((const char *)bytes + 8, (size_t)n);
  if (!cJSON_IsObject(root)) {
    snprintf(err, err_size, "%s: the header is not a JSON object", path);
    goto out;
  }
  /* Every tensor in the file must be one of the model's. */
  for (const cJSON *t = root->child; t; t = t->next) {
    if (t->string && strcmp(t->string, "__metadata__") == 0)
      continue;
    int known = 0;
    for (int i = 0; !known && i < m->num_params; i++)
      known = t->string && strcmp(t->string, m->views[i].name) == 0;
    if (!known) {
      snprintf(err, err_size, "%s: tensor %.80s is not one of this %s "
               "model's (%s, %s, ... as named by PyTorch's state_dict)", path,
               t->string ? t->string : "(unnamed)", model_kind_name(m->kind),
               m->views[0].name, m->views[1].name);
      goto out;
    }
  }
  const unsigned char *data = bytes + 8 + n;
  uint64_t data_bytes = (uint64_t)size - 8 - n;
  for (int i = 0; i < m->num_params; i++) {
    const param_view *v = &m->views[i];
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, v->name);
    if (!cJSON_IsObject(t)) {
      snprintf(err, err_size, "%s: tensor %s is missing (a file of another "
               "model, or not named as PyTorch's state_dict names it?)", path,
               v->name);
      goto out;
    }
    if (load_one(path, t, v, data, data_bytes, m->params + v->offset, err,
                 err_size) != 0)
      goto out;
  }
  rc = 0;
out:
  cJSON_Delete(root);
  free(bytes);
  fclose(f);
  return rc;
}
