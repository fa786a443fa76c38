/* text.c - reading and windowing gpt's text corpus (see text.h). */
#include "text.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Append the whole of path to t. Returns 0, or -1 with err set. */
static int append_file(text_corpus *t, const char *path, char *err,
                       size_t err_size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "cannot open text file %s: %s", path,
             strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, err_size, "text file %s is not a regular file", path);
    fclose(f);
    return -1;
  }
  size_t n = (size_t)st.st_size;
  unsigned char *grown = realloc(t->bytes, t->size + n + 1);
  if (!grown) {
    snprintf(err, err_size, "out of memory reading %s (%zu bytes)", path, n);
    fclose(f);
    return -1;
  }
  t->bytes = grown;
  if (fread(t->bytes + t->size, 1, n, f) != n) {
    snprintf(err, err_size, "short read on text file %s", path);
    fclose(f);
    return -1;
  }
  fclose(f);
  t->size += n;
  t->files++;
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int load_dir(text_corpus *t, const char *dir, char *err,
                    size_t err_size) {
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, err_size,
             "cannot open the text directory %s: %s (Debian's package "
             "'fortunes' provides it: apt-get install fortunes; or give "
             "--data-file FILE)", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t count = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    /* lstat: the .u8 names are symlinks to the plain files. */
    if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat") ||
        lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (count == cap) {
      cap = cap ? 2 * cap : 64;
      char **grown = realloc(names, cap * sizeof *names);
      if (!grown) {
        rc = -1;
        break;
      }
      names = grown;
    }
    names[count] = strdup(e->d_name);
    if (!names[count]) {
      rc = -1;
      break;
    }
    count++;
  }
  closedir(d);
  if (rc != 0)
    snprintf(err, err_size, "out of memory listing %s", dir);
  if (rc == 0 && count == 0) {
    snprintf(err, err_size,
             "no text files in %s (Debian's package 'fortunes' fills it)", dir);
    rc = -1;
  }
  qsort(names, count, sizeof *names, by_name); /* readdir's order varies */
  for (size_t i = 0; i < count && rc == 0; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    rc = append_file(t, path, err, err_size);
  }
  for (size_t i = 0; i < count; i++)
    free(names[i]);
  free(names);
  return rc;
}

int text_load(text_corpus *t, const char *file, const char *dir, char *err,
              size_t err_size) {
  memset(t, 0, sizeof *t);
  int rc = file ? append_file(t, file, err, err_size)
                : load_dir(t, dir, err, err_size);
  if (rc != 0) {
    text_free(t);
    return -1;
  }
  if (t->size == 0) {
    snprintf(err, err_size, "text file %s is empty",
             file ? file : dir);
    text_free(t);
    return -1;
  }
  return 0;
}

void text_free(text_corpus *t) {
  free(t->bytes);
  memset(t, 0, sizeof *t);
}

void text_split(const text_corpus *t, double val_fraction, int context,
                text_dataset *train, text_dataset *val) {
  size_t val_size = (size_t)((double)t->size * val_fraction);
  train->bytes = t->bytes;
  train->size = t->size - val_size;
  val->bytes = t->bytes + train->size;
  val->size = val_size;
  train->window = val->window = context + 1;
  train->count = train->size / (size_t)train->window;
  val->count = val->size / (size_t)val->window;
}

void text_fill_batch(const text_dataset *ds, const size_t *indices, int B,
                     float *x, unsigned char *y) {
  int T = ds->window - 1;
  for (int b = 0; b < B; b++) {
    const unsigned char *w = ds->bytes + indices[b] * (size_t)ds->window;
    for (int t = 0; t < T; t++) {
      x[(size_t)b * T + t] = (float)w[t];
      y[(size_t)b * T + t] = w[t + 1];
    }
  }
}
