/* test_nl_shm.c - the shm transport of nccl_like (backends/nccl_like/
 * transport/shm.c) at its edges, without a job around it:
 *  - which pairs it accepts (nl_transport_pick over crafted rank infos):
 *    one host, one /dev/shm, one pid namespace, host ranks or GPU ranks
 *    that map host memory into their device, neither with
 *    XCOLL_SHM_DISABLE=1; two GPU ranks on one GPU (same UUID) that share
 *    device memory one common way go to p2p first, unless either set
 *    XCOLL_P2P_DISABLE=1; anything else goes to net;
 *  - a process that is not the published previous rank (a stranger of
 *    another job on the same host) connects to the FIFO listener: it is
 *    closed at once with no file descriptor, the segment never reaches it,
 *    and the real previous rank, connecting after it, gets the segment and
 *    maps the FIFO memory this rank wrote.
 * The two processes are forked children; the parent plays the receiving
 * rank through the transport's own setup, recv_alloc and connect. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm.h"
#include "nccl_like.h"

static nl_rank_info host_rank(void) {
  nl_rank_info info;
  memset(&info, 0, sizeof info);
  memcpy(info.host_id, "boot-id-of-host-A-netns-1", sizeof info.host_id);
  info.host_id_ok = 1;
  info.shm_dev = 42;
  info.pid_ns = 7;
  info.pid = 1000;
  info.cuda_device = -1;
  info.shm_allowed = 1;
  return info;
}

static void test_pick(void **unused) {
  (void)unused;
  nl_rank_info a = host_rank(), b = host_rank();
  b.pid = 1001;
  assert_ptr_equal(nl_transport_pick(&a, &b), &nl_transport_shm);
  assert_ptr_equal(nl_transport_pick(&b, &a), &nl_transport_shm);
  nl_rank_info c = b;
  c.host_id[20] ^= 1; /* another network namespace */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
  c = b;
  c.host_id[0] ^= 1; /* another boot (host) */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
  c = b;
  c.shm_dev = 43; /* another /dev/shm */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
  c = b;
  c.pid_ns = 8; /* pids would not compare */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
  c = b;
  c.shm_allowed = 0; /* XCOLL_SHM_DISABLE=1 on one side is enough */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
  assert_ptr_equal(nl_transport_pick(&c, &a), &nl_transport_net);
  c = b;
  c.cuda_device = 0; /* a GPU rank whose driver cannot map host memory */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
  c.gpu_host_map = 1; /* the mixed pair: it maps the segment */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_shm);
  assert_ptr_equal(nl_transport_pick(&c, &a), &nl_transport_shm);

  /* Two GPU ranks on one GPU: p2p, in NCCL's order before shm. */
  nl_rank_info g = host_rank(), h = host_rank();
  h.pid = 1001;
  g.cuda_device = h.cuda_device = 0;
  g.gpu_host_map = h.gpu_host_map = 1;
  g.p2p_allowed = h.p2p_allowed = 1;
  g.p2p_share = NL_P2P_SHARE_CUMEM | NL_P2P_SHARE_IPC;
  h.p2p_share = NL_P2P_SHARE_IPC;
  memcpy(g.gpu_uuid, "gpu-uuid-0123456", 16);
  memcpy(h.gpu_uuid, "gpu-uuid-0123456", 16);
  assert_ptr_equal(nl_transport_pick(&g, &h), &nl_transport_p2p);
  assert_ptr_equal(nl_transport_pick(&h, &g), &nl_transport_p2p);
  nl_rank_info k = h;
  k.shm_allowed = 0; /* p2p does not depend on XCOLL_SHM_DISABLE */
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_p2p);
  k = h;
  k.p2p_allowed = 0; /* XCOLL_P2P_DISABLE=1 on one side: shm */
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_shm);
  assert_ptr_equal(nl_transport_pick(&k, &g), &nl_transport_shm);
  k.shm_allowed = 0; /* and XCOLL_SHM_DISABLE=1: net */
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_net);
  k = h;
  k.gpu_uuid[15] ^= 1; /* another GPU: shm through host memory */
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_shm);
  k = h;
  memset(k.gpu_uuid, 0, sizeof k.gpu_uuid); /* unknown device: not p2p */
  memset(g.gpu_uuid, 0, sizeof g.gpu_uuid);
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_shm);
  memcpy(g.gpu_uuid, "gpu-uuid-0123456", 16);
  k = h;
  k.p2p_share = 0; /* no way to share device memory */
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_shm);
  /* Two GPU ranks of one process (threads): legacy IPC cannot open a
   * handle its own process exported, so IPC alone is no way; cuMem is. */
  k = h;
  k.pid = g.pid;
  assert_int_equal(nl_p2p_share_both(&g, &k), 0);
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_shm);
  k.p2p_share = NL_P2P_SHARE_CUMEM | NL_P2P_SHARE_IPC;
  assert_int_equal(nl_p2p_share_both(&g, &k), NL_P2P_SHARE_CUMEM);
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_p2p);
  assert_int_equal(nl_p2p_share_both(&g, &h), NL_P2P_SHARE_IPC);
  k = h;
  k.host_id[0] ^= 1; /* another host */
  assert_ptr_equal(nl_transport_pick(&g, &k), &nl_transport_net);
  c = b;
  c.host_id_ok = 0; /* could not tell its host */
  assert_ptr_equal(nl_transport_pick(&a, &c), &nl_transport_net);
}

/* The listener's abstract address, as the transport forms it. A stranger
 * finds the same name in /proc/net/unix. */
static socklen_t listener_address(uint64_t nonce, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1,
                   "xcoll-nl-shm-%016llx", (unsigned long long)nonce);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Connect and wait (at most 10 s) for the first message. Returns the fd it
 * carried (-1: none) and sets *eof when the listener closed without a
 * word. */
static int connect_and_take(uint64_t nonce, int *eof, size_t *bytes) {
  struct sockaddr_un sa;
  socklen_t len = listener_address(nonce, &sa);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, len) != 0)
    return -2;
  struct timeval limit = {10, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char data[256];
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = data, .iov_len = sizeof data};
  struct msghdr msg = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control,
                       .msg_controllen = sizeof control};
  ssize_t got = recvmsg(s, &msg, 0);
  *eof = got == 0;
  *bytes = got > 0 ? (size_t)got : 0;
  int fd = -1;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); got > 0 && cm != NULL;
       cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
      memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  close(s);
  return fd;
}

enum { STRANGER_OK = 0, STRANGER_GOT_FD = 3, STRANGER_NO_EOF = 4 };

/* The stranger: connects first, must see EOF and no fd; then lets the
 * real rank go (one byte on the gate). */
static int stranger_main(uint64_t nonce, int gate) {
  int eof = 0;
  size_t bytes = 0;
  int fd = connect_and_take(nonce, &eof, &bytes);
  int verdict = fd >= 0 ? STRANGER_GOT_FD : eof ? STRANGER_OK : STRANGER_NO_EOF;
  char go = 1;
  if (write(gate, &go, 1) != 1)
    return 9;
  return verdict;
}

/* The real previous rank: waits for the gate, connects, must get the
 * segment and see the FIFO's sizes[] = -1 that the receiver wrote. */
static int prev_main(uint64_t nonce, int gate) {
  char go = 0;
  if (read(gate, &go, 1) != 1)
    return 9;
  int eof = 0;
  size_t bytes = 0;
  int fd = connect_and_take(nonce, &eof, &bytes);
  if (fd < 0)
    return 5;
  void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return 6;
  const nl_fifo_mem *fifo = p;
  return fifo->sizes[0] == -1 && fifo->sizes[XCOLL_STEPS - 1] == -1 ? 0 : 7;
}

static void test_stranger_gets_no_segment(void **unused) {
  (void)unused;
  xcoll_comm comm;
  memset(&comm, 0, sizeof comm);
  comm.magic = XCOLL_COMM_MAGIC;
  comm.comm_id = 77;
  comm.world_size = 2;
  pthread_mutex_init(&comm.error_lock, NULL);
  nl_state *st = calloc(1, sizeof *st);
  assert_non_null(st);
  st->comm = &comm;
  st->rank = 0;
  st->world_size = 2;
  st->prev = st->next = 1;
  st->nchannels = 1;
  st->buffsize = 64 << 10;
  st->step_bytes = st->buffsize / XCOLL_STEPS;
  st->timeout_s = 20;
  xc_abort abort_flag;
  atomic_init(&abort_flag, 0);
  st->abort = &abort_flag;
  nl_channel *ch = &st->channels[0];
  ch->id = 0;
  ch->st = st;
  /* Only this rank's receive side is shm: connect accepts prev and serves
   * the segment, and maps nothing of its own. */
  ch->recv_transport = &nl_transport_shm;
  ch->send_transport = &nl_transport_net;

  nl_rank_info mine;
  assert_int_equal(nl_rank_info_fill(st, &mine), XCOLL_SUCCESS);
  if (!mine.host_id_ok || !mine.shm_allowed) {
    skip(); /* no /dev/shm or /proc here: shm is never chosen */
  }
  assert_int_equal(nl_transport_shm.setup(st, &mine), XCOLL_SUCCESS);
  assert_int_equal(nl_transport_shm.recv_alloc(st, ch), XCOLL_SUCCESS);
  for (int i = 0; i < XCOLL_STEPS; i++)
    ch->recv_mem->sizes[i] = -1;

  int gate[2];
  assert_int_equal(pipe(gate), 0);
  pid_t prev = fork();
  if (prev == 0)
    _exit(prev_main(mine.shm_nonce, gate[0]));
  pid_t stranger = fork();
  if (stranger == 0)
    _exit(stranger_main(mine.shm_nonce, gate[1]));
  close(gate[0]);
  close(gate[1]);

  nl_rank_info infos[2] = {mine, mine};
  infos[1].pid = (int32_t)prev; /* what the store published for rank 1 */
  st->rank_infos = infos;
  xcoll_status s = nl_transport_shm.connect(st);
  int stranger_status = 0, prev_status = 0;
  waitpid(stranger, &stranger_status, 0);
  waitpid(prev, &prev_status, 0);
  assert_int_equal(s, XCOLL_SUCCESS);
  assert_true(WIFEXITED(stranger_status));
  assert_int_equal(WEXITSTATUS(stranger_status), STRANGER_OK);
  assert_true(WIFEXITED(prev_status));
  assert_int_equal(WEXITSTATUS(prev_status), 0);

  st->rank_infos = NULL;
  nl_transport_shm.free(st);
  assert_null(st->shm);
  free(st);
  pthread_mutex_destroy(&comm.error_lock);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pick),
      cmocka_unit_test(test_stranger_gets_no_segment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
