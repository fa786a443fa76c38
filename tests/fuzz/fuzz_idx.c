/* fuzz_idx.c - libFuzzer target: the IDX reader of trainer/data.c
 * (data_parse_idx_fd, gzip'd or plain), on a memory file holding the input.
 * The first byte picks images or labels. Must never crash, and must not
 * allocate what the header announces before the bytes arrive (a count of
 * 10^7 images in a 20-byte file). An accepted file has exactly the payload
 * its header announces. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int images = data[0] & 1;
  int fd = memfd_create("fuzz_idx", 0);
  if (fd < 0) return 0;
  size_t left = size - 1;
  const uint8_t *p = data + 1;
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= (size_t)n;
  }
  lseek(fd, 0, SEEK_SET);
  unsigned char *items_data = NULL;
  size_t items = 0;
  char err[512] = "";
  if (data_parse_idx_fd(fd, "fuzz.idx", images, &items_data, &items, err,
                        sizeof err) == 0) {
    if (items == 0 || items_data == NULL) abort();
    /* Touch the last byte: the buffer must hold what was announced. */
    volatile unsigned char last = items_data[items * (images ? 784 : 1) - 1];
    (void)last;
    free(items_data);
  }
  close(fd);
  return 0;
}
