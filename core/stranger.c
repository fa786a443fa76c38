/* stranger.c - the once-a-second tally of dropped unauthenticated
 * connections (stranger.h). */
#include "stranger.h"

#include <stddef.h>

int xcoll_drop_tally_note(xcoll_drop_tally *t, double now,
                          unsigned long *also) {
  if (t->window_start > 0 && now - t->window_start < 1.0) {
    t->counted++;
    return 0;
  }
  if (also != NULL) *also = t->counted;
  t->counted = 0;
  t->window_start = now;
  return 1;
}

unsigned long xcoll_drop_tally_flush(xcoll_drop_tally *t) {
  unsigned long n = t->counted;
  t->counted = 0;
  return n;
}
