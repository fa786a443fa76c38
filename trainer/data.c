/*
 * data.c - IDX reader over zlib and the distributed sampler (see data.h).
 */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "rng.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u

static uint32_t be32(const unsigned char *b) {
  return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) |
         ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

/* Read exactly n bytes; returns 0, or -1 on a short read or a zlib error
 * (a truncated or corrupt gzip stream). */
static int read_exact(gzFile f, void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
    int got = gzread(f, p, chunk);
    if (got <= 0)
      return -1;
    p += got;
    n -= (size_t)got;
  }
  return 0;
}

static const char *gz_reason(gzFile f) {
  int code = 0;
  const char *msg = gzerror(f, &code);
  if (code == Z_OK || !msg || !*msg)
    return "the file ends before the size its header announces";
  return msg;
}

/* The payload: bytes in total, read in pieces into a buffer that grows only
 * as bytes really arrive, so that a header announcing more than the file
 * holds costs no allocation of its announced size (10^7 images are 7.8 GB).
 * Returns the buffer, or NULL with err set (path names the file). */
static unsigned char *read_payload(gzFile f, const char *path, size_t count,
                                   size_t bytes, char *err, size_t err_size) {
  size_t capacity = bytes < (1u << 20) ? bytes : (1u << 20), done = 0;
  unsigned char *buf = malloc(capacity);
  if (!buf) {
    snprintf(err, err_size, "%s: cannot allocate %zu bytes", path, capacity);
    return NULL;
  }
  while (done < bytes) {
    if (done == capacity) {
      size_t grown = capacity * 2 < bytes ? capacity * 2 : bytes;
      unsigned char *bigger = realloc(buf, grown);
      if (!bigger) {
        snprintf(err, err_size, "%s: cannot allocate %zu bytes", path, grown);
        free(buf);
        return NULL;
      }
      buf = bigger;
      capacity = grown;
    }
    if (read_exact(f, buf + done, capacity - done) != 0) {
      snprintf(err, err_size,
               "%s: truncated or corrupt: header announces %zu items (%zu "
               "bytes) but reading them failed (%s)",
               path, count, bytes, gz_reason(f));
      free(buf);
      return NULL;
    }
    done = capacity;
  }
  return buf;
}

/* Reads from f (closed here) the header (magic then ndims sizes) and the
 * payload of expected bytes per item; items receives the count. */
static int parse_idx(gzFile f, const char *path, uint32_t magic, int ndims,
                     unsigned char **data, size_t *items, char *err,
                     size_t err_size) {
  unsigned char header[16];
  size_t header_len = 4 + 4 * (size_t)ndims;
  if (read_exact(f, header, header_len) != 0) {
    snprintf(err, err_size, "%s: cannot read the IDX header (%s)", path,
             gz_reason(f));
    gzclose(f);
    return -1;
  }
  uint32_t got_magic = be32(header);
  if (got_magic != magic) {
    snprintf(err, err_size,
             "%s: bad IDX magic 0x%08x, expected 0x%08x (not an IDX %s file, "
             "or corrupt)",
             path, got_magic, magic, ndims == 3 ? "images" : "labels");
    gzclose(f);
    return -1;
  }
  size_t count = be32(header + 4);
  size_t item_bytes = 1;
  if (ndims == 3) {
    uint32_t rows = be32(header + 8), cols = be32(header + 12);
    if (rows != 28 || cols != 28) {
      snprintf(err, err_size, "%s: images are %ux%u, expected 28x28", path,
               rows, cols);
      gzclose(f);
      return -1;
    }
    item_bytes = 28 * 28;
  }
  if (count == 0 || count > 10000000) {
    snprintf(err, err_size, "%s: implausible item count %zu in the header",
             path, count);
    gzclose(f);
    return -1;
  }
  size_t bytes = count * item_bytes;
  unsigned char *buf = read_payload(f, path, count, bytes, err, err_size);
  if (!buf) {
    gzclose(f);
    return -1;
  }
  unsigned char extra;
  if (gzread(f, &extra, 1) != 0) {
    snprintf(err, err_size,
             "%s: longer than its header announces (%zu items): corrupt file",
             path, count);
    free(buf);
    gzclose(f);
    return -1;
  }
  int code = 0;
  gzerror(f, &code);
  gzclose(f);
  if (code != Z_OK && code != Z_STREAM_END) {
    snprintf(err, err_size, "%s: corrupt gzip stream", path);
    free(buf);
    return -1;
  }
  *data = buf;
  *items = count;
  return 0;
}

static int read_idx(const char *path, uint32_t magic, int ndims,
                    unsigned char **data, size_t *items, char *err,
                    size_t err_size) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "cannot open %s: %s", path,
             errno ? strerror(errno) : "out of memory");
    return -1;
  }
  return parse_idx(f, path, magic, ndims, data, items, err, err_size);
}

int data_parse_idx_fd(int fd, const char *name, int images,
                      unsigned char **data, size_t *items, char *err,
                      size_t err_size) {
  int own = dup(fd);
  if (own < 0) {
    snprintf(err, err_size, "%s: %s", name, strerror(errno));
    return -1;
  }
  gzFile f = gzdopen(own, "rb");
  if (!f) {
    close(own);
    snprintf(err, err_size, "%s: out of memory", name);
    return -1;
  }
  return parse_idx(f, name, images ? IDX_IMAGES_MAGIC : IDX_LABELS_MAGIC,
                   images ? 3 : 1, data, items, err, err_size);
}

int data_load(dataset *ds, const char *dir, const char *prefix, char *err,
              size_t err_size) {
  memset(ds, 0, sizeof *ds);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, err_size,
             "data directory %s does not exist: install the Debian package "
             "dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or "
             "pass --data-dir",
             dir);
    return -1;
  }
  char path[4096];
  size_t n_images = 0, n_labels = 0;
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  errno = 0;
  if (read_idx(path, IDX_IMAGES_MAGIC, 3, &ds->pixels, &n_images, err,
               err_size) != 0)
    return -1;
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  errno = 0;
  if (read_idx(path, IDX_LABELS_MAGIC, 1, &ds->labels, &n_labels, err,
               err_size) != 0) {
    data_free(ds);
    return -1;
  }
  if (n_images != n_labels) {
    snprintf(err, err_size,
             "%s: %zu labels but the images file has %zu images", path,
             n_labels, n_images);
    data_free(ds);
    return -1;
  }
  for (size_t i = 0; i < n_labels; i++) {
    if (ds->labels[i] >= 10) {
      snprintf(err, err_size, "%s: label %u at index %zu is not in 0..9", path,
               ds->labels[i], i);
      data_free(ds);
      return -1;
    }
  }
  ds->count = n_images;
  return 0;
}

void data_free(dataset *ds) {
  free(ds->pixels);
  free(ds->labels);
  memset(ds, 0, sizeof *ds);
}

void data_truncate(dataset *ds, size_t limit) {
  if (limit > 0 && limit < ds->count)
    ds->count = limit;
}

void data_stats(const dataset *ds, float *mean, float *std) {
  /* Integer histogram: exact, and independent of summation order. */
  uint64_t hist[256] = {0};
  size_t n = ds->count * 784;
  for (size_t i = 0; i < n; i++)
    hist[ds->pixels[i]]++;
  double s = 0.0, s2 = 0.0;
  for (int v = 0; v < 256; v++) {
    double x = v / 255.0;
    s += hist[v] * x;
    s2 += hist[v] * x * x;
  }
  double m = s / (double)n;
  double var = s2 / (double)n - m * m;
  *mean = (float)m;
  *std = (float)sqrt(var > 0 ? var : 1.0);
}

void data_fill_batch(const dataset *ds, const size_t *indices, int B,
                     float mean, float std, float *x, unsigned char *y) {
  float scale = 1.0f / (255.0f * std), shift = mean / std;
  for (int b = 0; b < B; b++) {
    const unsigned char *src = ds->pixels + indices[b] * 784;
    float *dst = x + (size_t)b * 784;
    for (int i = 0; i < 784; i++)
      dst[i] = src[i] * scale - shift;
    y[b] = ds->labels[indices[b]];
  }
}

int sampler_init(sampler *s, size_t dataset_size, int rank, int world_size,
                 int drop_last, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->dataset_size = dataset_size;
  s->rank = rank;
  s->world_size = world_size;
  s->drop_last = drop_last;
  s->seed = seed;
  s->shuffle = 1;
  size_t W = (size_t)world_size;
  s->num_samples = drop_last ? dataset_size / W : (dataset_size + W - 1) / W;
  s->indices = malloc((s->num_samples ? s->num_samples : 1) * sizeof(size_t));
  return s->indices ? 0 : -1;
}

int sampler_set_epoch(sampler *s, int epoch) {
  return sampler_set_epoch_from(s, epoch, 0);
}

int sampler_set_epoch_from(sampler *s, int epoch, size_t start) {
  size_t n = s->dataset_size, W = (size_t)s->world_size;
  size_t rest = start < n ? n - start : 0;
  s->num_samples = s->drop_last ? rest / W : (rest + W - 1) / W;
  size_t *perm = malloc((n ? n : 1) * sizeof(size_t));
  if (!perm)
    return -1;
  for (size_t i = 0; i < n; i++)
    perm[i] = i;
  rng r;
  rng_seed(&r, s->seed + (uint64_t)epoch);
  for (size_t i = s->shuffle ? n : 0; i > 1; i--) { /* Fisher-Yates */
    size_t j = (size_t)rng_below(&r, i);
    size_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
  /* Position k of the padded list of positions start.. is
   * perm[start + k mod rest]: padding repeats the start of that part, as
   * many times as needed. */
  for (size_t i = 0; i < s->num_samples; i++) {
    size_t k = (size_t)s->rank + i * W;
    s->indices[i] = perm[start + k % rest];
  }
  free(perm);
  return 0;
}

void sampler_free(sampler *s) {
  free(s->indices);
  memset(s, 0, sizeof *s);
}
