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
 *
 * FSDP writes this same file from its gathered shards, or one file per rank
 * plus an index: see checkpoint_fsdp.h.
 */
#ifndef XTRAIN_CHECKPOINT_H
#define XTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdio.h>
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

/* Finish an atomic write: f holds the whole file under the temporary name
 * tmp (in dir); write_failed is non-zero when a write to it failed. Flush
 * and fsync f, close it, rename tmp to path, fsync dir so that the rename
 * is durable. On any failure tmp is removed. Returns 0, or -1 with a
 * sentence in err. Used by every checkpoint writer (checkpoint_fsdp.c). */
int checkpoint_commit(FILE *f, int write_failed, const char *tmp,
                      const char *path, const char *dir, char *err,
                      size_t err_size);

/* Read path into m->params and o's state (both already created with the same
 * layout) and *meta. Every header field is validated first (as
 * checkpoint_validate_buffer does), then each tensor is checked against the
 * model. Stale temporary files of killed saves in path's directory are
 * removed first (checkpoint_clean_stale).
 * Returns 0, or -1 with a sentence naming the file and the problem in err. */
int checkpoint_load(const char *path, model *m, optimizer *o,
                    checkpoint_meta *meta, char *err, size_t err_size);

/* Remove the temporary files checkpoint_save leaves in dir when it is killed
 * mid-write (".<name>.tmp.<pid>"), for every name, whose writer pid no longer
 * runs on this host; a save in progress in another live process is left
 * alone. Returns the number of files removed, or -1 with a sentence in err
 * when dir cannot be read (a missing dir is 0: nothing to clean). */
int checkpoint_clean_stale(const char *dir, char *err, size_t err_size);

struct cJSON;

/* Check one tensor's entry of a safetensors header against the parameter it
 * will fill, before any of its data is read (checkpoint_load and
 * init_params_load both use it).
 *   path, name  the file and the tensor's name in it, for messages only;
 *   entry       the tensor's JSON object in the header ({"dtype", "shape",
 *               "data_offsets"});
 *   v           the parameter: its shape, and numel (elements, 4 bytes each);
 *   data_bytes  the size of the file's data section (bytes after the header);
 *   shape_hint  what to check when the shape differs (e.g. "check --model"),
 *               added to that message in parentheses;
 *   offset      out: the tensor's first byte, from the start of the data
 *               section (set only on success).
 * Returns 0, or -1 with one sentence naming the file and the tensor in err:
 *   - dtype missing or not "F32": the file holds another type (bf16, f16...);
 *     the message says to convert with .float() before saving;
 *   - shape not v's (another rank, another size, or a transposed matrix):
 *     the message gives both shapes and shape_hint;
 *   - data_offsets not two numbers, not v->numel * 4 bytes apart, or ending
 *     past data_bytes: a truncated or damaged file. */
int checkpoint_check_tensor(const char *path, const char *name,
                            const struct cJSON *entry, const param_view *v,
                            uint64_t data_bytes, const char *shape_hint,
                            uint64_t *offset, char *err, size_t err_size);

/* Validate a whole safetensors file held in memory (bytes, size bytes long),
 * as checkpoint_load does before it reads a tensor, without a model: the
 * header length, the JSON, __metadata__ (step, epoch and step_in_epoch
 * integers >= 0, rng_state 64 hex digits), and every tensor entry (a known
 * dtype; a shape of integers >= 0; data_offsets two integers with begin <=
 * end <= the data size; end - begin == the shape's element count times the
 * dtype's size; no two tensors' ranges overlap). path only names the file in
 * messages. Returns 0, or -1 with a sentence naming the file, the field and
 * what is wrong in err. */
int checkpoint_validate_buffer(const char *path, const uint8_t *bytes,
                               size_t size, char *err, size_t err_size);

#endif /* XTRAIN_CHECKPOINT_H */
