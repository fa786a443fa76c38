/* gather_binomial.c - gather and scatter over a binomial tree (the MPICH
 * gather and scatter, Thakur, Rabenseifner & Gropp 2005).
 *
 * Ranks are numbered relative to the root (vrank v = rank - root mod P).
 * The subtree of v holds vranks [v, v + n_v), n_v = min(lowbit(v), P - v)
 * (the root's: all P). Gather: v receives the contiguous blocks of each
 * child v + 2^j (j below its lowest set bit) into place, all at once, then
 * sends its n_v blocks to its parent v - lowbit(v) in one message. Scatter
 * runs the same tree from the root down. Cost: ceil(log2 P) steps; the root
 * receives (or sends) (P-1) blocks, an inner rank n_v - 1 and passes them
 * on; S = count * element size per block. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "comm.h"
#include "dtype.h"
#include "pipeline.h"

#define MAX_CHILDREN 32

/* v's lowest set bit, or the first power of two >= P for the root. */
static int low_bit(int v, int P) {
  if (v == 0) {
    int mask = 1;
    while (mask < P)
      mask <<= 1;
    return mask;
  }
  return v & -v;
}

static int subtree_blocks(int v, int P) {
  int n = low_bit(v, P);
  return n < P - v ? n : P - v;
}

/* Copy between the root's vrank-ordered blocks (work) and the caller's
 * rank-ordered buffer: vrank j is rank (j + root) mod P, so it is two
 * contiguous runs. to_ranked: work -> ranked, else ranked -> work. */
static void rotate(char *ranked, char *work, int root, int P, size_t block,
                   int to_ranked) {
  size_t tail = (size_t)(P - root) * block, headlen = (size_t)root * block;
  if (to_ranked) {
    memcpy(ranked + headlen, work, tail);
    memcpy(ranked, work + tail, headlen);
  } else {
    memcpy(work, ranked + headlen, tail);
    memcpy(work + tail, ranked, headlen);
  }
}

xcoll_status xcoll_gather_binomial(struct xcoll_comm *comm,
                                   const xcoll_coll_args *args) {
  const int P = comm->world_size, root = args->root;
  const int v = xcoll_rank_mod(comm->rank - root, P);
  const size_t block = args->count * xcoll_datatype_size(args->dtype);
  const uint64_t tag = xcoll_tag(args, 0);
  const int n = subtree_blocks(v, P);
  /* Where this rank's subtree's blocks gather: the root with root 0 uses
   * recvbuf itself; a leaf sends sendbuf as it is. */
  char *work = NULL, *owned = NULL;
  if (v == 0 && root == 0)
    work = args->recvbuf;
  else if (n > 1 || v == 0)
    work = owned = xcoll_scratch_alloc(comm, (size_t)n * block, "gather");
  if (n > 1 && work == NULL)
    return XCOLL_ERR_NO_MEMORY;
  if (work != NULL && work != (const char *)args->sendbuf)
    memcpy(work, args->sendbuf, block);

  xcoll_status status = XCOLL_SUCCESS;
  xcoll_p2p_request *requests[MAX_CHILDREN];
  int children = 0;
  for (int mask = 1; mask < low_bit(v, P) && v + mask < P; mask <<= 1) {
    int child = v + mask;
    size_t blocks = (size_t)subtree_blocks(child, P);
    requests[children] = NULL;
    status = xcoll_p2p_irecv(comm, xcoll_rank_mod(child + root, P), tag,
                             work + (size_t)mask * block, blocks * block,
                             &requests[children]);
    children++;
    if (status != XCOLL_SUCCESS)
      break;
  }
  if (children > 0) {
    xcoll_status wait_status = xcoll_p2p_wait(comm, requests, children);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  if (status == XCOLL_SUCCESS && v != 0) {
    int parent = xcoll_rank_mod(v - low_bit(v, P) + root, P);
    xcoll_p2p_request *request = NULL;
    const void *what = work != NULL ? work : args->sendbuf;
    status = xcoll_p2p_isend(comm, parent, tag, what, (size_t)n * block, &request);
    xcoll_status wait_status = xcoll_p2p_wait(comm, &request, 1);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  if (status == XCOLL_SUCCESS && v == 0 && root != 0)
    rotate(args->recvbuf, work, root, P, block, 1);
  free(owned);
  return status;
}

xcoll_status xcoll_scatter_binomial(struct xcoll_comm *comm,
                                    const xcoll_coll_args *args) {
  const int P = comm->world_size, root = args->root;
  const int v = xcoll_rank_mod(comm->rank - root, P);
  const size_t block = args->count * xcoll_datatype_size(args->dtype);
  const uint64_t tag = xcoll_tag(args, 0);
  const int n = subtree_blocks(v, P);
  /* The subtree's blocks in vrank order: the root's sendbuf as it is when
   * root is 0; a leaf receives straight into recvbuf. */
  const char *work = NULL;
  char *owned = NULL;
  if (v == 0 && root == 0) {
    work = args->sendbuf;
  } else if (n > 1 || v == 0) {
    work = owned = xcoll_scratch_alloc(comm, (size_t)n * block, "scatter");
    if (owned == NULL)
      return XCOLL_ERR_NO_MEMORY;
    if (v == 0)
      rotate((char *)args->sendbuf, owned, root, P, block, 0);
  }

  xcoll_status status = XCOLL_SUCCESS;
  if (v != 0) {
    int parent = xcoll_rank_mod(v - low_bit(v, P) + root, P);
    xcoll_p2p_request *request = NULL;
    void *into = owned != NULL ? owned : args->recvbuf;
    status = xcoll_p2p_irecv(comm, parent, tag, into, (size_t)n * block, &request);
    xcoll_status wait_status = xcoll_p2p_wait(comm, &request, 1);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  xcoll_p2p_request *requests[MAX_CHILDREN];
  int children = 0;
  for (int mask = 1; status == XCOLL_SUCCESS && mask < low_bit(v, P) && v + mask < P;
       mask <<= 1) {
    int child = v + mask;
    size_t blocks = (size_t)subtree_blocks(child, P);
    requests[children] = NULL;
    status = xcoll_p2p_isend(comm, xcoll_rank_mod(child + root, P), tag,
                             work + (size_t)mask * block, blocks * block,
                             &requests[children]);
    children++;
  }
  if (children > 0) {
    xcoll_status wait_status = xcoll_p2p_wait(comm, requests, children);
    if (status == XCOLL_SUCCESS)
      status = wait_status;
  }
  /* This rank's own block: work[0] (in place on the root: already there). */
  if (status == XCOLL_SUCCESS && work != NULL && work != (const char *)args->recvbuf)
    memcpy(args->recvbuf, work, block);
  free(owned);
  return status;
}
