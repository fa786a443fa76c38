/* test_ib_plugin.c - the ibverbs net plugin called directly (no engine),
 * over the emulated verbs provider, in one process (the emulator connects a
 * process's QPs to each other as it does across processes):
 *   nodevice  with XCOLL_IBEMU_DEVICES=0: init fails NOT_SUPPORTED saying
 *             "no RDMA device was found", devices() gives 0 with an INFO line
 *   plugin    devices, properties; a connection; reg_mr cached per buffer;
 *             one message, then 32 in flight (the FIFO wraps); a message
 *             longer than its receive fails both ends with PROTOCOL; a tag
 *             mismatch likewise; a completed receive still reports done
 *             after its sender closed; close with requests in flight; a
 *             receiver that deregisters and closes with receives posted
 *             is a peer that left (REMOTE) to its sender, not a refused
 *             key.
 * Usage: test_ib_plugin nodevice|plugin (XCOLL_IBVERBS_LIB set by ctest).
 * Exit status 0 when every check passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

static char last_info[1024], last_error[1024];
static int failures;

static void log_fn(xcoll_net_log_level level, const char *message) {
  if (level == XCOLL_NET_LOG_ERROR)
    snprintf(last_error, sizeof last_error, "%s", message);
  else if (level == XCOLL_NET_LOG_INFO)
    snprintf(last_info, sizeof last_info, "%s", message);
}

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, \
              #cond, last_error);                                              \
      failures++;                                                              \
      return;                                                                  \
    }                                                                          \
  } while (0)

static const xcoll_net_v1 *net = &xcoll_net_ibverbs;
static xcoll_net_config config = {.comm_id = 42, .rank = 0, .timeout_s = 10};

static void test_nodevice(void) {
  CHECK(net->init(log_fn) == XCOLL_ERR_NOT_SUPPORTED);
  CHECK(strstr(last_error, "no RDMA device was found") != NULL);
  int count = -1;
  last_info[0] = '\0';
  CHECK(net->devices(&count) == XCOLL_SUCCESS);
  CHECK(count == 0);
  CHECK(strstr(last_info, "no RDMA device was found") != NULL);
}

/* A send comm and its recv comm, both in this process. */
static void connect_pair(xcoll_net_send_comm **send,
                         xcoll_net_recv_comm **recv) {
  uint8_t handle[XCOLL_NET_HANDLE_MAXSIZE];
  xcoll_net_listen_comm *listen = NULL;
  *send = NULL;
  *recv = NULL;
  CHECK(net->listen(0, &config, handle, &listen) == XCOLL_SUCCESS);
  for (int i = 0; i < 100000 && (*send == NULL || *recv == NULL); i++) {
    if (*send == NULL)
      CHECK(net->connect(0, &config, handle, 0, send) == XCOLL_SUCCESS);
    if (*recv == NULL)
      CHECK(net->accept(listen, 0, recv) == XCOLL_SUCCESS);
  }
  net->close_listen(listen);
  CHECK(*send != NULL && *recv != NULL);
}

/* A new pair (connect_pair) with sbuf registered on its send comm and rbuf
 * on its recv comm; *send NULL when a step failed (counted in failures). */
static void connect_registered(xcoll_net_send_comm **send,
                               xcoll_net_recv_comm **recv, void *sbuf,
                               size_t sbytes, void *rbuf, size_t rbytes,
                               void **smh, void **rmh) {
  connect_pair(send, recv);
  xcoll_net_send_comm *sc = *send;
  *send = NULL; /* until both registrations hold */
  CHECK(sc != NULL);
  CHECK(net->reg_mr(sc, NULL, sbuf, sbytes, XCOLL_NET_PTR_HOST, smh) ==
        XCOLL_SUCCESS);
  CHECK(net->reg_mr(NULL, *recv, rbuf, rbytes, XCOLL_NET_PTR_HOST, rmh) ==
        XCOLL_SUCCESS);
  *send = sc;
}

/* Test until done or an error; the status. */
static xcoll_status wait_request(xcoll_net_request *r, size_t *bytes) {
  int done = 0;
  for (int i = 0; i < 1000000; i++) {
    xcoll_status s = net->test(r, &done, bytes);
    if (s != XCOLL_SUCCESS || done)
      return s;
  }
  return XCOLL_ERR_TIMEOUT;
}

/* isend until the CTS is there (it is written inside irecv here). */
static xcoll_status send_when_ready(xcoll_net_send_comm *sc, const void *data,
                                    size_t bytes, uint32_t tag, void *mh,
                                    xcoll_net_request **r) {
  *r = NULL;
  for (int i = 0; i < 1000; i++) {
    xcoll_status s = net->isend(sc, data, bytes, tag, mh, r);
    if (s != XCOLL_SUCCESS || *r != NULL)
      return s;
  }
  return XCOLL_ERR_TIMEOUT;
}

#define BUF 4096

static void test_plugin(void) {
  CHECK(net->init(log_fn) == XCOLL_SUCCESS);
  int count = 0;
  CHECK(net->devices(&count) == XCOLL_SUCCESS && count == 1);
  xcoll_net_properties p;
  CHECK(net->get_properties(0, &p) == XCOLL_SUCCESS);
  CHECK(strcmp(p.name, "emu0:1") == 0);
  CHECK(p.max_requests == XCOLL_NET_MAX_REQUESTS && p.recvs_ahead > 1);

  xcoll_net_send_comm *sc;
  xcoll_net_recv_comm *rc;
  connect_pair(&sc, &rc);
  if (sc == NULL)
    return;
  static unsigned char sbuf[32 * BUF], rbuf[32 * BUF];
  void *smh = NULL, *rmh = NULL, *again = NULL;
  CHECK(net->reg_mr(sc, NULL, sbuf, sizeof sbuf, XCOLL_NET_PTR_HOST, &smh) ==
        XCOLL_SUCCESS);
  CHECK(net->reg_mr(NULL, rc, rbuf, sizeof rbuf, XCOLL_NET_PTR_HOST, &rmh) ==
        XCOLL_SUCCESS);
  /* Registered once per buffer. */
  CHECK(net->reg_mr(NULL, rc, rbuf, sizeof rbuf, XCOLL_NET_PTR_HOST, &again) ==
        XCOLL_SUCCESS);
  CHECK(again == rmh);
  CHECK(net->dereg_mr(NULL, rc, again) == XCOLL_SUCCESS);

  /* Back-pressure: no receive posted, no CTS, a NULL request. */
  xcoll_net_request *sr = NULL, *rr = NULL;
  CHECK(net->isend(sc, sbuf, 8, 1, smh, &sr) == XCOLL_SUCCESS && sr == NULL);

  /* One message, shorter than its receive. */
  for (int i = 0; i < BUF; i++)
    sbuf[i] = (unsigned char)(i * 7 + 1);
  CHECK(net->irecv(rc, rbuf, BUF, 1, rmh, &rr) == XCOLL_SUCCESS && rr);
  CHECK(send_when_ready(sc, sbuf, 1000, 1, smh, &sr) == XCOLL_SUCCESS && sr);
  size_t got = 0;
  CHECK(wait_request(sr, &got) == XCOLL_SUCCESS && got == 1000);
  CHECK(wait_request(rr, &got) == XCOLL_SUCCESS && got == 1000);
  CHECK(memcmp(sbuf, rbuf, 1000) == 0);

  /* 32 in flight, twice round the 32-slot FIFO. */
  for (int round = 0; round < 3; round++) {
    xcoll_net_request *rs[32], *ss[32];
    for (int k = 0; k < 32; k++) {
      memset(sbuf + k * BUF, round * 32 + k, BUF);
      CHECK(net->irecv(rc, rbuf + k * BUF, BUF, 100 + k, rmh, &rs[k]) ==
                XCOLL_SUCCESS &&
            rs[k]);
    }
    /* A 33rd receive: no room. */
    xcoll_net_request *extra = NULL;
    CHECK(net->irecv(rc, rbuf, BUF, 0, rmh, &extra) == XCOLL_SUCCESS &&
          extra == NULL);
    for (int k = 0; k < 32; k++)
      CHECK(send_when_ready(sc, sbuf + k * BUF, BUF - k, 100 + k, smh,
                            &ss[k]) == XCOLL_SUCCESS &&
            ss[k]);
    for (int k = 0; k < 32; k++) {
      CHECK(wait_request(ss[k], &got) == XCOLL_SUCCESS &&
            got == BUF - (size_t)k);
      CHECK(wait_request(rs[k], &got) == XCOLL_SUCCESS &&
            got == BUF - (size_t)k);
      CHECK(rbuf[k * BUF] == (unsigned char)(round * 32 + k) &&
            rbuf[k * BUF + BUF - k - 1] == (unsigned char)(round * 32 + k));
    }
  }

  /* A receive that completed before its sender closed still reports done;
   * the next one fails REMOTE (the bootstrap socket closed). */
  CHECK(net->irecv(rc, rbuf, BUF, 5, rmh, &rr) == XCOLL_SUCCESS && rr);
  CHECK(send_when_ready(sc, sbuf, 64, 5, smh, &sr) == XCOLL_SUCCESS && sr);
  CHECK(wait_request(sr, &got) == XCOLL_SUCCESS);
  xcoll_net_request *after = NULL;
  CHECK(net->irecv(rc, rbuf + BUF, BUF, 6, rmh, &after) == XCOLL_SUCCESS &&
        after);
  CHECK(net->dereg_mr(sc, NULL, smh) == XCOLL_SUCCESS);
  net->close_send(sc);
  CHECK(wait_request(rr, &got) == XCOLL_SUCCESS && got == 64);
  CHECK(wait_request(after, &got) == XCOLL_ERR_REMOTE);
  CHECK(strstr(last_error, "rank 0 is gone") != NULL);
  CHECK(net->dereg_mr(NULL, rc, rmh) == XCOLL_SUCCESS);
  net->close_recv(rc);

  /* Longer than the receive: PROTOCOL at both ends, naming the peer. */
  connect_registered(&sc, &rc, sbuf, sizeof sbuf, rbuf, sizeof rbuf, &smh,
                     &rmh);
  if (sc == NULL)
    return;
  CHECK(net->irecv(rc, rbuf, 16, 9, rmh, &rr) == XCOLL_SUCCESS && rr);
  CHECK(send_when_ready(sc, sbuf, 32, 9, smh, &sr) == XCOLL_ERR_PROTOCOL);
  CHECK(strstr(last_error, "message truncated") != NULL);
  CHECK(wait_request(rr, &got) == XCOLL_ERR_PROTOCOL);
  CHECK(strstr(last_error, "message truncated") != NULL &&
        strstr(last_error, "from rank 0") != NULL);
  /* Close with a request in flight: released with the comm. */
  CHECK(net->irecv(rc, rbuf, 16, 10, rmh, &rr) == XCOLL_SUCCESS);
  net->dereg_mr(sc, NULL, smh);
  net->dereg_mr(NULL, rc, rmh);
  net->close_send(sc);
  net->close_recv(rc);

  /* Another tag than the receive's: PROTOCOL at both ends. */
  connect_registered(&sc, &rc, sbuf, sizeof sbuf, rbuf, sizeof rbuf, &smh,
                     &rmh);
  if (sc == NULL)
    return;
  CHECK(net->irecv(rc, rbuf, 16, 11, rmh, &rr) == XCOLL_SUCCESS && rr);
  CHECK(send_when_ready(sc, sbuf, 8, 12, smh, &sr) == XCOLL_ERR_PROTOCOL);
  CHECK(wait_request(rr, &got) == XCOLL_ERR_PROTOCOL);
  CHECK(strstr(last_error, "another tag") != NULL);
  net->dereg_mr(sc, NULL, smh);
  net->dereg_mr(NULL, rc, rmh);
  net->close_send(sc);
  net->close_recv(rc);

  /* A receiver that deregisters its buffer and then closes, with receives
   * posted (the engine's order at teardown): a write before the close
   * still lands, as the posted receive holds the registration; a write
   * after it finds a closed QP, REMOTE (a peer that left), never a refused
   * key (PROTOCOL). */
  connect_registered(&sc, &rc, sbuf, sizeof sbuf, rbuf, sizeof rbuf, &smh,
                     &rmh);
  if (sc == NULL)
    return;
  xcoll_net_request *second = NULL;
  CHECK(net->irecv(rc, rbuf, 16, 13, rmh, &rr) == XCOLL_SUCCESS && rr);
  CHECK(net->irecv(rc, rbuf + 16, 16, 14, rmh, &second) == XCOLL_SUCCESS &&
        second);
  CHECK(net->dereg_mr(NULL, rc, rmh) == XCOLL_SUCCESS);
  memset(sbuf, 0x5c, 8);
  memset(rbuf, 0, 8);
  CHECK(send_when_ready(sc, sbuf, 8, 13, smh, &sr) == XCOLL_SUCCESS && sr);
  CHECK(wait_request(sr, &got) == XCOLL_SUCCESS);
  CHECK(wait_request(rr, &got) == XCOLL_SUCCESS && got == 8);
  CHECK(memcmp(sbuf, rbuf, 8) == 0);
  net->close_recv(rc);
  CHECK(send_when_ready(sc, sbuf, 8, 14, smh, &sr) == XCOLL_SUCCESS && sr);
  CHECK(wait_request(sr, &got) == XCOLL_ERR_REMOTE);
  CHECK(strstr(last_error, "the peer is gone") != NULL);
  net->dereg_mr(sc, NULL, smh);
  net->close_send(sc);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s nodevice|plugin\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "nodevice") == 0)
    test_nodevice();
  else
    test_plugin();
  if (failures == 0)
    printf("PASS %s\n", argv[1]);
  return failures == 0 ? 0 : 1;
}
