/*
 * checkpoint.h - safetensors checkpoints of a model and its optimizer.
 *
 * File layout (https://huggingface.co/docs/safetensors): 8-byte little-endian
 * header length N; N bytes of JSON (padded with spaces to a multiple of 8)
 * mapping each tensor name to {"dtype": "F32", "shape": [...],
 * "data_offsets": [begin, end]} (bytes, relative to the end of the header),
 * plus "__metadata__", a map of strings; then the raw little-endian data.
 *
 * Tensors: "model.<name>" for every parameter, and the optimizer state as
 * "optim.<name>.momentum_buffer" (SGD with momentum) or "optim.<name>.exp_avg"
 * and "optim.<name>.exp_avg_sq" (AdamW). Metadata: format, step (optimizer
 * updates done), epoch and step_in_epoch (where training resumes),
 * best_test_acc, rng_state (the init generator's four words, hex) and config
 * (the command-line configuration as a JSON string).
 */
#ifndef XTRAIN_CHECKPOINT_H
#define XTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"
#include "rng.h"

typedef struct checkpoint_meta {
  int64_t step;          /* optimizer updates done */
  int epoch;             /* epoch to resume in */
  int64_t step_in_epoch; /* updates already done in that epoch */
  double best_test_acc;
  rng rng_state;
  char config[2048];     /* JSON text */
} checkpoint_meta;

/* Write dir/name atomically: a temporary file in dir, written, flushed and
 * fsync'ed, renamed over dir/name, then dir itself fsync'ed, so a crash
 * leaves either the old or the new checkpoint. Returns 0, or -1 with a
 * sentence in err. */
int checkpoint_save(const char *dir, const char *name, const model *m,
                    const optimizer *o, const checkpoint_meta *meta, char *err,
                    size_t err_size);

/* Read path into m->params and o's state (both already created with the same
 * layout) and *meta. Every tensor's dtype, shape and byte range is checked.
 * Returns 0, or -1 with a sentence naming the file and the problem in err. */
int checkpoint_load(const char *path, model *m, optimizer *o,
                    checkpoint_meta *meta, char *err, size_t err_size);

#endif /* XTRAIN_CHECKPOINT_H */
