/*
 * tensors.c - the registry of a model's tensors (tensors.h).
 */
#include "tensors.h"

#include <stdio.h>

void model_add_param_va(model *m, const char *name, param_init init,
                        int fan_in, int ndim, va_list ap) {
  param_view *v = &m->views[m->num_params++];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->ndim = ndim;
  v->numel = 1;
  v->fan_in = fan_in;
  v->init = init;
  for (int i = 0; i < ndim; i++) {
    v->shape[i] = va_arg(ap, int);
    v->numel *= (size_t)v->shape[i];
  }
  v->offset = m->num_elements;
  m->num_elements += v->numel;
}

int model_add_param(model *m, const char *name, param_init init, int fan_in,
                    int ndim, ...) {
  int index = m->num_params;
  va_list ap;
  va_start(ap, ndim);
  model_add_param_va(m, name, init, fan_in, ndim, ap);
  va_end(ap);
  return index;
}
