/*
 * checkpoint_fsdp.h - FSDP checkpoints, in the two forms PyTorch FSDP
 * offers (StateDictType.FULL_STATE_DICT and, for the flat local shards,
 * LOCAL_STATE_DICT):
 *
 * full:    every unit's parameters and optimizer state are all-gathered
 *          (padding dropped) and rank 0 writes ONE safetensors file with
 *          checkpoint_save (checkpoint.h): the same tensor names and layout
 *          as a one-process or DDP run, so any strategy at any world size
 *          resumes from it.
 * sharded: every rank writes <stem>.g<G>.rank<r>-of-<W>.safetensors with
 *          its flat shard of each unit ("model.fsdp_unit<u>", S*ceil(n/S)/S
 *          elements, zero padded at the end of the last ranks) and the
 *          optimizer state of that shard ("optim.fsdp_unit<u>.<state>");
 *          once all ranks' files are in place rank 0 writes
 *          <stem>.index.json: the generation G, the world size, the
 *          sharding group size S, per unit its tensors, element count,
 *          shard length and padding, and which file each rank wrote. Only
 *          an FSDP run with the same world size, S and units reads it.
 *          Each save is a new generation G (the index's + 1) beside the old
 *          one; the index's atomic rename switches to it, and only then are
 *          older generations removed: a save killed at any point leaves the
 *          previous complete set loadable (tests/trainer/checkpoint_kill.sh).
 * Every file is written atomically (temporary file, fsync, rename, fsync of
 * the directory).
 */
#ifndef XTRAIN_CHECKPOINT_FSDP_H
#define XTRAIN_CHECKPOINT_FSDP_H

#include <stddef.h>

#include "checkpoint.h"
#include "strategy.h"

typedef enum checkpoint_format {
  CHECKPOINT_FULL = 0,
  CHECKPOINT_SHARDED = 1
} checkpoint_format;

/* Copy this rank's chunk of every unit of a buffer in the model's layout
 * (full, model.num_elements floats) into a buffer in the shard layout
 * (local, s->count floats), zero padded as fsdp.c pads. */
void fsdp_shard_from_full(const strategy *s, const float *full, float *local);

/* The inverse, collective over the sharding group: all-gather every unit of
 * local (s->count) into full (model.num_elements). Returns the xcoll status
 * (XCOLL_ERR_NO_MEMORY when a unit's buffer cannot be allocated). */
xcoll_status fsdp_full_from_shards(const strategy *s, const float *local,
                                   float *full);

/* Save dir/<stem>.safetensors (full) or the sharded set above, with o the
 * optimizer over s->params. Collective: every rank of world (the
 * communicator of all ranks; rank and world_size are in it) calls it, and
 * for a sharded save every rank returns -1 when any rank failed (its own
 * err names the rank that did). Returns 0, or -1 with a sentence in err. */
int fsdp_checkpoint_save(const strategy *s, const optimizer *o,
                         const checkpoint_meta *meta, checkpoint_format format,
                         const char *dir, const char *stem,
                         xcoll_comm_t world, int rank, int world_size,
                         char *err, size_t err_size);

/* Read dir/<stem>.index.json and this rank's file into s->params and o (the
 * optimizer over the shards) and *meta. Refuses, with a sentence saying
 * what differs and what to do, an index of another world size, sharding
 * group size or unit layout (e.g. another --fsdp-min-params or model), or
 * another optimizer, and a shard file whose step is not the index's (a set
 * mixed by a crash between saves). Not collective: the caller makes the
 * ranks agree on the outcome. Returns 0, or -1 with err. */
int fsdp_checkpoint_load_sharded(const strategy *s, optimizer *o,
                                 checkpoint_meta *meta, const char *dir,
                                 const char *stem, int rank, int world_size,
                                 char *err, size_t err_size);

#endif /* XTRAIN_CHECKPOINT_FSDP_H */
