/* units.c - grouping layers into units (see units.h). */
#include "units.h"

#include <string.h>

int units_same_layer(const model *m, int a, int b) {
  const char *x = m->views[a].name, *y = m->views[b].name;
  size_t n = strcspn(x, ".");
  return n == strcspn(y, ".") && strncmp(x, y, n) == 0;
}

/* Index of the last tensor of the layer that starts at tensor first. */
static int layer_last(const model *m, int first) {
  int last = first;
  while (last + 1 < m->num_params && units_same_layer(m, first, last + 1))
    last++;
  return last;
}

/* Index of the first tensor of the layer that ends at tensor last. */
static int layer_first(const model *m, int last) {
  int first = last;
  while (first > 0 && units_same_layer(m, first - 1, last))
    first--;
  return first;
}

static size_t range_count(const model *m, int first, int last) {
  return m->views[last].offset + m->views[last].numel - m->views[first].offset;
}

void units_plan_reverse_by_bytes(unit_plan *p, const model *m,
                                 double first_cap_mb, double cap_mb) {
  memset(p, 0, sizeof *p);
  unit *u = NULL;
  int last = m->num_params - 1;
  while (last >= 0) {
    int first = layer_first(m, last);
    size_t numel = range_count(m, first, last);
    if (u) {
      double cap = p->num_units == 1 ? first_cap_mb : cap_mb;
      double bytes = (double)(u->count + numel) * sizeof(float);
      if (bytes > cap * 1024.0 * 1024.0)
        u = NULL; /* this layer would overflow the unit: start the next */
    }
    if (!u) {
      u = &p->units[p->num_units++];
      u->last_param = last;
      u->count = 0;
    }
    for (int q = last; q >= first; q--)
      p->unit_of_param[q] = (int)(u - p->units);
    u->first_param = first;
    u->offset = m->views[first].offset;
    u->count += numel;
    last = first - 1;
  }
}

void units_plan_forward_by_min_params(unit_plan *p, const model *m,
                                      size_t min_params) {
  memset(p, 0, sizeof *p);
  unit *u = NULL;
  int first = 0;
  while (first < m->num_params) {
    int last = layer_last(m, first);
    if (!u) {
      u = &p->units[p->num_units++];
      u->first_param = first;
      u->offset = m->views[first].offset;
      u->count = 0;
    }
    for (int q = first; q <= last; q++)
      p->unit_of_param[q] = (int)(u - p->units);
    u->last_param = last;
    u->count += range_count(m, first, last);
    if (u->count >= min_params)
      u = NULL; /* large enough: the next layer opens a new unit */
    first = last + 1;
  }
}
