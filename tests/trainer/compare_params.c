/*
 * compare_params.c - compares raw float32 parameter dumps (xtrain
 * --dump-params). Usage: compare_params RTOL REFERENCE FILE...
 * Each FILE must have REFERENCE's length and satisfy
 *   ||file - ref||_2 / ||ref||_2 <= RTOL
 * (RTOL 0 demands bitwise-equal values). Prints that and the worst element.
 * The norm-wise measure is used because float32 rounding differs between a
 * batch computed whole and in pieces, and once in a while that flips the
 * sign of a pre-activation that is within rounding of 0: one ReLU unit then
 * gets a visibly different update for one sample, a few elements out of
 * 270k, which a max-norm criterion would call a failure while the runs are
 * the same computation. A wrong reduction (sum instead of mean, a missing
 * bucket, a stale gradient) moves the norm by 1e-2 or more.
 * Exit 0 when all pass, 1 when one differs, 2 on usage or I/O errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float *load(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "compare_params: cannot open %s\n", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  rewind(f);
  if (bytes <= 0 || bytes % 4 != 0) {
    fprintf(stderr, "compare_params: %s: %ld bytes is not a float32 array\n",
            path, bytes);
    fclose(f);
    return NULL;
  }
  float *a = malloc((size_t)bytes);
  if (!a || fread(a, 1, (size_t)bytes, f) != (size_t)bytes) {
    fprintf(stderr, "compare_params: cannot read %s\n", path);
    free(a);
    fclose(f);
    return NULL;
  }
  fclose(f);
  *n = (size_t)bytes / 4;
  return a;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: compare_params RTOL REFERENCE FILE...\n");
    return 2;
  }
  double rtol = atof(argv[1]);
  size_t n = 0;
  float *ref = load(argv[2], &n);
  if (!ref)
    return 2;
  double ref_norm = 0.0;
  for (size_t i = 0; i < n; i++)
    ref_norm += (double)ref[i] * ref[i];
  ref_norm = sqrt(ref_norm);
  int status = 0;
  for (int k = 3; k < argc; k++) {
    size_t m = 0;
    float *a = load(argv[k], &m);
    if (!a)
      return 2;
    if (m != n) {
      fprintf(stderr, "compare_params: %s has %zu floats, %s has %zu\n",
              argv[k], m, argv[2], n);
      return 2;
    }
    double worst = 0.0, diff_norm = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
      double d = fabs((double)a[i] - ref[i]);
      diff_norm += d * d;
      if (d > worst || isnan(d)) {
        worst = isnan(d) ? INFINITY : d;
        at = i;
      }
    }
    diff_norm = sqrt(diff_norm);
    double rel = ref_norm > 0 ? diff_norm / ref_norm : diff_norm;
    int ok = rtol == 0.0 ? worst == 0.0 : rel <= rtol;
    printf("%s vs %s: relative L2 difference %.3g (limit %g), max |diff| "
           "%.3g at element %zu: %s\n",
           argv[k], argv[2], rel, rtol, worst, at, ok ? "ok" : "DIFFERENT");
    status |= !ok;
    free(a);
  }
  free(ref);
  return status;
}
