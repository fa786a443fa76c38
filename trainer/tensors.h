/*
 * tensors.h - the registry of a model's tensors: each new tensor becomes a
 * view (model.h's param_view) at the end of the flat parameter layout.
 * model.c registers the MLP's and the CNN's tensors with it, gpt.c the
 * gpt's, so that neither calls the other to do so.
 */
#ifndef XTRAIN_TENSORS_H
#define XTRAIN_TENSORS_H

#include <stdarg.h>

#include "model.h"

/* Register one tensor in m (m->num_params < MODEL_MAX_PARAMS): its name
 * (31 characters kept), how model_init_params fills it, its fan_in, and
 * ndim (<= MODEL_MAX_DIMS) int sizes. Returns its index. */
int model_add_param(model *m, const char *name, param_init init, int fan_in,
                    int ndim, ...);
/* The same with the sizes in ap. */
void model_add_param_va(model *m, const char *name, param_init init,
                        int fan_in, int ndim, va_list ap);

#endif /* XTRAIN_TENSORS_H */
