/* fuzz_checkpoint.c - libFuzzer target: a whole safetensors checkpoint file
 * given as bytes to trainer/checkpoint.c's validation
 * (checkpoint_validate_buffer), as --resume reads it: the header length, the
 * JSON, __metadata__ and every tensor entry. Must never crash, overflow or
 * allocate by an unchecked field; a rejection must come with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512] = "";
  int rc = checkpoint_validate_buffer("fuzz.safetensors", data, size, err,
                                      sizeof err);
  if (rc != 0 && strstr(err, "fuzz.safetensors") == NULL) abort();
  return 0;
}
