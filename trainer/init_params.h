/*
 * init_params.h - a model's initial parameters as a safetensors file with
 * PyTorch's names and shapes ("fc1.weight" (256, 784), "fc1.bias" (256),
 * ... as torch.nn.Linear and nn.Conv2d hold them, float32), so that xtrain
 * and a PyTorch model start from the same values: --export-init writes the
 * parameters xtrain drew from --seed, --init-from reads a file written by
 * xtrain or by a few lines of Python from a module's state_dict().
 */
#ifndef XTRAIN_INIT_PARAMS_H
#define XTRAIN_INIT_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Write m->params to path (one tensor per parameter, registration order)
 * with __metadata__ {format "xtrain-init-1", model, seed, data_mean,
 * data_std (the input normalisation, "%.9g", so that another program can
 * feed the same float32 inputs)}. Returns 0, or -1 with a sentence in err. */
int init_params_export(const char *path, const model *m, uint64_t seed,
                       float data_mean, float data_std, char *err,
                       size_t err_size);

/* Read every tensor of m from path into m->params. Each of m's tensors must
 * be present with dtype F32 and m's shape; a tensor m does not have is an
 * error too (a file of another model). __metadata__ is optional. Returns 0,
 * or -1 with a sentence naming the file, the tensor and the problem. */
int init_params_load(const char *path, model *m, char *err, size_t err_size);

#endif /* XTRAIN_INIT_PARAMS_H */
