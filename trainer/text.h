/*
 * text.h - the corpus of --model gpt: bytes of text, split into training
 * and validation parts by offset and cut into fixed windows.
 *
 * By default the corpus is Debian's `fortunes` package: the plain text
 * files of /usr/share/games/fortunes (regular files only, so not the .u8
 * symlinks; not the .dat index files strfile writes), sorted by name and
 * concatenated. --data-file FILE takes any text instead. Tokens are bytes
 * (a vocabulary of 256): UTF-8 text is seen one byte at a time.
 *
 * A sample is a window of T + 1 bytes: the model reads the first T and
 * predicts the last T. Windows do not overlap (window i starts at byte
 * i * (T + 1) of its part), so a sample index means one window and
 * data.h's DistributedSampler gives each rank different windows.
 */
#ifndef XTRAIN_TEXT_H
#define XTRAIN_TEXT_H

#include <stddef.h>

#define TEXT_DEFAULT_DIR "/usr/share/games/fortunes"

typedef struct text_corpus {
  unsigned char *bytes; /* malloc'd */
  size_t size;          /* in bytes */
  int files;            /* how many files were read */
} text_corpus;

/* One part of a corpus, as windows of window = T + 1 bytes. */
typedef struct text_dataset {
  const unsigned char *bytes; /* into the corpus, not owned */
  size_t size;                /* bytes of this part */
  int window;                 /* T + 1 */
  size_t count;               /* whole windows: size / window */
} text_dataset;

/* Read file (when not NULL) or else every plain file of dir, as above.
 * Returns 0, or -1 with a sentence in err naming the file, or the missing
 * directory and the Debian package that provides it. */
int text_load(text_corpus *t, const char *file, const char *dir, char *err,
              size_t err_size);
void text_free(text_corpus *t);

/* Training part: the first (1 - val_fraction) of the bytes; validation:
 * the rest. Windows of context + 1 bytes. */
void text_split(const text_corpus *t, double val_fraction, int context,
                text_dataset *train, text_dataset *val);

/* x (B, T) the first T bytes of windows indices[0..B) as floats, y (B, T)
 * the T bytes after each of them. */
void text_fill_batch(const text_dataset *ds, const size_t *indices, int B,
                     float *x, unsigned char *y);

#endif /* XTRAIN_TEXT_H */
