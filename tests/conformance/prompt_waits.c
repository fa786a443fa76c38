/* prompt_waits.c - non-blocking calls whose waits come at once, which the
 * library learns to run on the waiting thread instead of handing them to a
 * progress thread or a worker (core/request.c; nccl_like's engine.c,
 * "Deferred kicks"). Every result is checked against a value computed
 * here, and the calls nobody waits for must still complete:
 *
 *   prompt     40 rounds of a non-blocking allreduce, alltoall and
 *              broadcast, each waited for at once (past the 8 prompt waits
 *              after which calls are deferred);
 *   reverse    4 calls of a kind issued, then waited for last to first;
 *   blocking   2 non-blocking calls, then a blocking one, then the waits;
 *   unwaited   rank 0 issues a call and does not wait for it: the other
 *              ranks' blocking call completes only if rank 0's runs
 *              without a wait; they then meet rank 0 in a barrier on a
 *              second communicator, after which rank 0 waits;
 *   polled     rank 0 issues a call and polls it with xcoll_test only.
 *
 * A call that never ran would hang its peers: the test then fails by
 * XCOLL_TIMEOUT_S or ctest's timeout. Usage: prompt_waits (under
 * xcollrun, any backend, any world size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_call.h"
#include "xcoll.h"

#define ROUNDS 40
#define COUNT 16 /* elements per rank and peer */

static int rank, world;
static xcoll_comm_t comm, side;

static int failures;

static void expect(int ok, const char *what, int round) {
  if (!ok) {
    fprintf(stderr, "rank %d: %s, round %d: wrong result\n", rank, what,
            round);
    failures++;
  }
}

/* Kinds of call: each fills its input from (round, rank), issues, and
 * checks its output against the value it must have. */
enum { ALLREDUCE, ALLTOALL, BROADCAST, KINDS };
static const char *kind_names[KINDS] = {"allreduce", "alltoall", "broadcast"};

typedef struct call {
  int kind, round;
  int32_t in[COUNT * 64], out[COUNT * 64];
  xcoll_request_t request;
} call;

static int32_t value(int round, int from, int to, int i) {
  return round * 1000003 + from * 1009 + to * 31 + i;
}

static void fill(call *c) {
  for (int p = 0; p < world; p++)
    for (int i = 0; i < COUNT; i++)
      c->in[p * COUNT + i] = value(c->round, rank, p, i);
  memset(c->out, 0xff, sizeof c->out);
}

static xcoll_status issue(call *c, int blocking) {
  fill(c);
  xcoll_request_t *r = blocking ? NULL : &c->request;
  switch (c->kind) {
  case ALLREDUCE:
    return blocking ? xcoll_allreduce(c->in, c->out, COUNT, XCOLL_INT32,
                                      XCOLL_SUM, comm)
                    : xcoll_iallreduce(c->in, c->out, COUNT, XCOLL_INT32,
                                       XCOLL_SUM, comm, NULL, r);
  case ALLTOALL:
    return blocking ? xcoll_alltoall(c->in, c->out, COUNT, XCOLL_INT32, comm)
                    : xcoll_ialltoall(c->in, c->out, COUNT, XCOLL_INT32, comm,
                                      NULL, r);
  default:
    return blocking ? xcoll_broadcast(c->in, c->out, COUNT, XCOLL_INT32,
                                      c->round % world, comm)
                    : xcoll_ibroadcast(c->in, c->out, COUNT, XCOLL_INT32,
                                       c->round % world, comm, NULL, r);
  }
}

static void check(const call *c, const char *what) {
  int ok = 1;
  for (int i = 0; i < COUNT; i++) {
    if (c->kind == ALLREDUCE) {
      int64_t sum = 0;
      for (int p = 0; p < world; p++)
        sum += value(c->round, p, 0, i);
      ok &= c->out[i] == (int32_t)sum;
    } else if (c->kind == BROADCAST) {
      ok &= c->out[i] == value(c->round, c->round % world, 0, i);
    } else {
      for (int p = 0; p < world; p++)
        ok &= c->out[p * COUNT + i] == value(c->round, p, rank, i);
    }
  }
  char label[96];
  snprintf(label, sizeof label, "%s %s", what, kind_names[c->kind]);
  expect(ok, label, c->round);
}

static call calls[4];

static void prompt(void) {
  for (int round = 0; round < ROUNDS; round++)
    for (int k = 0; k < KINDS; k++) {
      call *c = &calls[0];
      c->kind = k;
      c->round = round;
      CHECK(issue(c, 0));
      CHECK(xcoll_wait(c->request));
      check(c, "prompt");
    }
}

static void reverse(int round) {
  for (int k = 0; k < KINDS; k++) {
    for (int i = 0; i < 4; i++) {
      calls[i].kind = k;
      calls[i].round = round + i;
      CHECK(issue(&calls[i], 0));
    }
    for (int i = 3; i >= 0; i--) {
      CHECK(xcoll_wait(calls[i].request));
      check(&calls[i], "reverse");
    }
  }
}

static void behind_blocking(int round) {
  for (int k = 0; k < KINDS; k++) {
    for (int i = 0; i < 3; i++) {
      calls[i].kind = k;
      calls[i].round = round + i;
    }
    CHECK(issue(&calls[0], 0));
    CHECK(issue(&calls[1], 0));
    CHECK(issue(&calls[2], 1));
    check(&calls[2], "blocking");
    CHECK(xcoll_wait(calls[0].request));
    CHECK(xcoll_wait(calls[1].request));
    check(&calls[0], "blocking");
    check(&calls[1], "blocking");
  }
}

/* Rank 0 does not wait (or only tests, when polled) until the others
 * finished the same call as a blocking one. */
static void unwaited(int round, int polled) {
  for (int k = 0; k < KINDS; k++) {
    prompt(); /* deferring again, if a late wait had stopped it */
    call *c = &calls[0];
    c->kind = k;
    c->round = round;
    if (rank == 0) {
      CHECK(issue(c, 0));
      if (polled) {
        int done = 0;
        while (!done)
          CHECK(xcoll_test(c->request, &done));
        CHECK(xcoll_wait(c->request)); /* returns at once; releases it */
      } else {
        CHECK(xcoll_barrier(side));
        CHECK(xcoll_wait(c->request));
      }
    } else {
      CHECK(issue(c, 1));
      if (!polled)
        CHECK(xcoll_barrier(side));
    }
    check(c, polled ? "polled" : "unwaited");
  }
}

int main(void) {
  xcoll_status s = xcoll_comm_init_env(&comm);
  if (s != XCOLL_SUCCESS) {
    fprintf(stderr, "init: %s\n", xcoll_last_error());
    return 1;
  }
  CHECK(xcoll_comm_rank(comm, &rank));
  CHECK(xcoll_comm_size(comm, &world));
  if (world > 64) {
    fprintf(stderr, "prompt_waits: at most 64 ranks\n");
    return 1;
  }
  CHECK(xcoll_comm_split(comm, 0, rank, &side));
  prompt();
  reverse(100);
  behind_blocking(200);
  unwaited(300, 0);
  unwaited(400, 1);
  CHECK(xcoll_comm_destroy(side));
  CHECK(xcoll_comm_destroy(comm));
  if (failures == 0 && rank == 0)
    printf("prompt_waits: %d ranks, all results right\n", world);
  return failures ? 1 : 0;
}
