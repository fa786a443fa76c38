/* consumer.c - the smallest program an installed xcoll must build: it needs
 * no peers, only the header and the library. Exit 0 when the linked library
 * is the version of the header it was compiled against. */
#include <stdio.h>
#include <xcoll.h>

int main(void) {
  printf("xcoll %d: %s, float32 is %zu bytes\n", xcoll_version(),
         xcoll_strerror(XCOLL_ERR_TIMEOUT), xcoll_datatype_size(XCOLL_FLOAT32));
  if (xcoll_version() != XCOLL_VERSION) {
    fprintf(stderr, "consumer: header says %d, library says %d\n",
            XCOLL_VERSION, xcoll_version());
    return 1;
  }
  return 0;
}
