/* fault_p2p.c - point-to-point calls that do not match must fail on both
 * ranks with a message naming both calls, or, when the peer never posts the
 * matching call, time out with a message naming the peer and the call.
 *
 *   fault_p2p CASE     under xcollrun, 2 ranks (unmatched: 3)
 *   count     rank 0 sends 4 float32 to rank 1, which receives 5 float32:
 *             both ranks XCOLL_ERR_PROTOCOL, each message naming both calls
 *   dtype     float32 against int32 (the same byte count): the same
 *   unmatched 3 ranks: rank i receives from rank i+1 (mod 3) and nobody
 *             sends: every rank XCOLL_ERR_TIMEOUT (run with a short
 *             XCOLL_TIMEOUT_S), or XCOLL_ERR_REMOTE when a peer timed out
 *             first and aborted, the message naming the peer and the recv
 *             (two ranks that both receive from each other are told at
 *             once instead: a recv matched with a recv)
 *   kind      rank 0 sends in a group while rank 1 calls allreduce: both
 *             XCOLL_ERR_PROTOCOL naming the group and the allreduce
 *   kind-swapped  the same with the ranks' roles swapped (rank 1 in the
 *             group, receiving): on nccl_like each rank of the two is the
 *             other's previous rank on the ring, and this case has the
 *             other one find the mismatch
 * Each rank prints P2P-OK or P2P-BAD and exits 0 or 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xcoll.h"

static int bad(int rank, const char *why, const char *message) {
  printf("P2P-BAD rank %d: %s: %s\n", rank, why, message);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s count|dtype|unmatched|kind|kind-swapped\n", argv[0]);
    return 2;
  }
  const char *which = argv[1];
  setvbuf(stdout, NULL, _IOLBF, 0);
  xcoll_comm_t comm;
  xcoll_status st = xcoll_comm_init_env(&comm);
  if (st != XCOLL_SUCCESS) {
    printf("P2P-BAD: init: %s\n", xcoll_last_error());
    return 1;
  }
  int rank, P;
  xcoll_comm_rank(comm, &rank);
  xcoll_comm_size(comm, &P);
  int unmatched = !strcmp(which, "unmatched");
  if (P != (unmatched ? 3 : 2)) {
    printf("P2P-BAD: run with %d ranks\n", unmatched ? 3 : 2);
    return 1;
  }
  float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  xcoll_status want = XCOLL_ERR_PROTOCOL;
  const char *needles[3] = {NULL, NULL, NULL};
  if (!strcmp(which, "count") || !strcmp(which, "dtype")) {
    int count = !strcmp(which, "count");
    if (rank == 0)
      st = xcoll_send(buf, 4, XCOLL_FLOAT32, 1, comm);
    else
      st = xcoll_recv(buf, count ? 5 : 4, count ? XCOLL_FLOAT32 : XCOLL_INT32,
                      0, comm);
    /* Both calls, as each rank names them. */
    needles[0] = rank == 0 ? "send to rank 1 (4 float32)"
                           : (count ? "recv from rank 0 (5 float32)"
                                    : "recv from rank 0 (4 int32)");
    needles[1] = rank == 0 ? (count ? "recv (5 float32)" : "recv (4 int32)")
                           : "send (4 float32)";
  } else if (!strcmp(which, "unmatched")) {
    want = XCOLL_ERR_TIMEOUT;
    int peer = (rank + 1) % 3;
    st = xcoll_recv(buf, 4, XCOLL_FLOAT32, peer, comm);
    static char call[64];
    snprintf(call, sizeof call, "recv from rank %d (4 float32)", peer);
    needles[0] = call;
  } else if (!strcmp(which, "kind") || !strcmp(which, "kind-swapped")) {
    int swapped = !strcmp(which, "kind-swapped");
    if (rank == swapped) {
      xcoll_group_start();
      if (swapped)
        xcoll_recv(buf, 4, XCOLL_FLOAT32, 0, comm);
      else
        xcoll_send(buf, 4, XCOLL_FLOAT32, 1, comm);
      st = xcoll_group_end();
    } else {
      st = xcoll_allreduce(buf, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm);
    }
    needles[0] = "a group of sends and receives";
    needles[1] = "allreduce(sum, float32, 4)";
  } else {
    fprintf(stderr, "unknown case %s\n", which);
    return 2;
  }
  const char *message = xcoll_comm_last_error(comm);
  int failed = 0;
  if (st != want && !(unmatched && st == XCOLL_ERR_REMOTE)) {
    char why[96];
    snprintf(why, sizeof why, "returned %s, want %s", xcoll_strerror(st),
             xcoll_strerror(want));
    failed = bad(rank, why, message);
  }
  for (int i = 0; needles[i] != NULL && !failed; i++)
    if (strstr(message, needles[i]) == NULL) {
      char why[160];
      snprintf(why, sizeof why, "the message does not name \"%s\"", needles[i]);
      failed = bad(rank, why, message);
    }
  if (!failed)
    printf("P2P-OK rank %d: %s\n", rank, message);
  xcoll_comm_destroy(comm);
  return failed;
}
