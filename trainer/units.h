/*
 * units.h - grouping a model's layers into units, shared by DDP and FSDP.
 *
 * A layer is the run of consecutive tensors whose names share the part
 * before the first '.' ("fc1.weight", "fc1.bias"). A unit is a run of
 * consecutive layers: since tensors are registered in forward order in one
 * buffer, a unit is one contiguous range of model.params and model.grads.
 * Layers are never split: backward reports a layer's tensors ready together,
 * and a layer's forward needs all of them.
 *
 * DDP's buckets are units filled in REVERSE order by byte caps (the order in
 * which backward produces gradients); FSDP's units are filled in forward
 * order up to a minimum parameter count (PyTorch's size_based_auto_wrap_policy
 * in spirit: a layer too small to be worth a collective of its own joins its
 * neighbour).
 */
#ifndef XTRAIN_UNITS_H
#define XTRAIN_UNITS_H

#include <stddef.h>

#include "model.h"

#define UNITS_MAX MODEL_MAX_PARAMS

typedef struct unit {
  int first_param; /* lowest registration index in the unit */
  int last_param;  /* highest */
  size_t offset;   /* first element in model.params / model.grads */
  size_t count;    /* elements (not bytes) */
} unit;

typedef struct unit_plan {
  int num_units;
  unit units[UNITS_MAX];
  int unit_of_param[MODEL_MAX_PARAMS];
} unit_plan;

/* 1 when tensors a and b of m belong to one layer. */
int units_same_layer(const model *m, int a, int b);

/* DDP buckets: unit 0 holds the LAST layers. Layers are taken in reverse
 * registration order; the first unit holds at most first_cap_mb MiB, the
 * others at most cap_mb MiB of float32: a layer that would overflow a unit
 * starts the next one, and a layer larger than the cap gets a unit alone. */
void units_plan_reverse_by_bytes(unit_plan *p, const model *m,
                                 double first_cap_mb, double cap_mb);

/* FSDP units: unit 0 holds the FIRST layers. Layers are taken in forward
 * order and a unit is closed as soon as it holds at least min_params
 * elements; the layers after the last closed unit form the last unit.
 * min_params 0 gives one unit per layer. */
void units_plan_forward_by_min_params(unit_plan *p, const model *m,
                                      size_t min_params);

#endif /* XTRAIN_UNITS_H */
