/*
 * data.h - Fashion-MNIST from IDX files (LeCun's MNIST format, gzip'd) and a
 * sampler with torch.utils.data.DistributedSampler's semantics.
 */
#ifndef XTRAIN_DATA_H
#define XTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Images stay as bytes (47 MB for the training set instead of 188 MB of
 * floats, which matters with several ranks on one host); data_fill_batch
 * converts them on the fly. */
typedef struct dataset {
  size_t count;            /* number of samples */
  unsigned char *pixels;   /* (count, 784), 0..255 */
  unsigned char *labels;   /* (count), 0..9 */
} dataset;

/* Load "<dir>/<prefix>-images-idx3-ubyte.gz" and "...-labels-idx1-ubyte.gz"
 * (prefix "train" or "t10k"). Every header field is checked: magic 0x803 for
 * images and 0x801 for labels, 28x28 images, a payload exactly as long as the
 * counts say, equal image and label counts, labels below 10. Returns 0, or -1
 * with a sentence naming the file (or the missing directory and the Debian
 * package that provides it) in err. */
int data_load(dataset *ds, const char *dir, const char *prefix, char *err,
              size_t err_size);
void data_free(dataset *ds);

/* Parse one IDX file (gzip'd or plain) read from fd, from its current offset
 * to its end, with data_load's checks: images (magic 0x803, 28x28) when
 * images is 1, labels (magic 0x801) when 0. fd stays open. name only names
 * the file in messages. On success *data (malloc'd, count * 784 or count
 * bytes) and *items (count); returns 0, or -1 with a sentence in err. Used by
 * data_load's reader and by the fuzz target tests/fuzz/fuzz_idx.c. */
int data_parse_idx_fd(int fd, const char *name, int images,
                      unsigned char **data, size_t *items, char *err,
                      size_t err_size);

/* Keep only the first limit samples (no-op when limit is 0 or larger). */
void data_truncate(dataset *ds, size_t limit);

/* Mean and standard deviation of all pixels scaled to [0, 1]. */
void data_stats(const dataset *ds, float *mean, float *std);

/* x (B, 784) = (pixels / 255 - mean) / std and y (B) for samples indices[0..B). */
void data_fill_batch(const dataset *ds, const size_t *indices, int B,
                     float mean, float std, float *x, unsigned char *y);

/* DistributedSampler: every rank draws the same permutation of
 * [0, dataset_size) from seed + epoch, pads it by repeating its start (or,
 * with drop_last, cuts it) to a multiple of world_size, and rank r takes the
 * entries r, r + W, r + 2W, ... */
typedef struct sampler {
  size_t dataset_size;
  int rank, world_size;
  int drop_last;
  uint64_t seed;
  int shuffle;        /* 1 (sampler_init's default); 0: the identity
                         permutation (DistributedSampler(shuffle=False)) */
  size_t num_samples; /* per rank */
  size_t *indices;    /* this rank's num_samples indices for the current epoch */
} sampler;

int sampler_init(sampler *s, size_t dataset_size, int rank, int world_size,
                 int drop_last, uint64_t seed);
/* Recompute indices for epoch (deterministic: the same on every call).
 * Returns 0, or -1 when out of memory. */
int sampler_set_epoch(sampler *s, int epoch);
/* The same for the part of the epoch's permutation from position start on
 * (the positions before it were consumed by an earlier world size: xtrain
 * --elastic), split over the ranks as above; sets num_samples (at most
 * sampler_init's). start 0 is sampler_set_epoch. */
int sampler_set_epoch_from(sampler *s, int epoch, size_t start);
void sampler_free(sampler *s);

#endif /* XTRAIN_DATA_H */
