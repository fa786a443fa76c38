/* test_host.c - core/host.c, the host census: the tally from made-up
 * records (ranks pinned one per CPU, ranks sharing CPUs, two hosts, CPUs
 * past 64, an empty mask), and this process's own record against
 * sched_getaffinity and the boot id. Expected counts are worked out by hand
 * from the records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <sched.h>

#include "host.h"

static xcoll_host_record on(int host, const int *cpus, int ncpus) {
  xcoll_host_record r;
  memset(&r, 0, sizeof r);
  r.host_key[0] = (uint8_t)(host + 1);
  r.host_key[15] = 0xAB;
  for (int i = 0; i < ncpus; i++)
    r.mask[cpus[i] / 8] |= (uint8_t)(1u << (cpus[i] % 8));
  return r;
}

static xcoll_host_tally tally_of(const xcoll_host_record *records, int count,
                                 int me) {
  xcoll_host_tally t;
  memset(&t, 0x5a, sizeof t);
  xcoll_host_tally_of(records, count, me, &t);
  return t;
}

/* All four counts of a tally (a macro: a failure names the caller's line). */
#define ASSERT_TALLY(t, own, ranks, cpus, over)                                \
  do {                                                                         \
    assert_int_equal((t).own_cpus, (own));                                     \
    assert_int_equal((t).host_ranks, (ranks));                                 \
    assert_int_equal((t).host_cpus, (cpus));                                   \
    assert_int_equal((t).oversubscribed, (over));                              \
  } while (0)

/* Open MPI's binding at 2 ranks, Slurm's --cpu-bind=cores: each rank sees
 * one CPU, the host has one per rank. */
static void test_pinned_one_cpu_each(void **state) {
  (void)state;
  int c0[] = {0}, c1[] = {1};
  xcoll_host_record r[2] = {on(0, c0, 1), on(0, c1, 1)};
  for (int me = 0; me < 2; me++) {
    xcoll_host_tally t = tally_of(r, 2, me);
    ASSERT_TALLY(t, 1, 2, 2, 0);
  }
}

/* Four unpinned ranks on two CPUs; and two ranks pinned to one CPU. */
static void test_shared_cpus(void **state) {
  (void)state;
  int both[] = {0, 1}, c1[] = {1};
  xcoll_host_record r[4] = {on(0, both, 2), on(0, both, 2), on(0, both, 2),
                            on(0, both, 2)};
  xcoll_host_tally t = tally_of(r, 4, 2);
  ASSERT_TALLY(t, 2, 4, 2, 1);
  xcoll_host_record s[2] = {on(0, c1, 1), on(0, c1, 1)};
  t = tally_of(s, 2, 0);
  assert_int_equal(t.host_cpus, 1);
  assert_int_equal(t.oversubscribed, 1);
}

/* Two hosts: each rank counts its own; oversubscribed only when every
 * host is, and then on every rank alike. */
static void test_two_hosts(void **state) {
  (void)state;
  int c0[] = {0}, c01[] = {0, 1}, c0to3[] = {0, 1, 2, 3};
  /* host 0: 2 ranks on CPU 0; host 1: 1 rank on 4 CPUs */
  xcoll_host_record r[3] = {on(0, c0, 1), on(1, c0to3, 4), on(0, c0, 1)};
  xcoll_host_tally a = tally_of(r, 3, 0), b = tally_of(r, 3, 1);
  assert_int_equal(a.host_ranks, 2);
  assert_int_equal(a.host_cpus, 1);
  assert_int_equal(b.host_ranks, 1);
  assert_int_equal(b.host_cpus, 4);
  assert_int_equal(b.own_cpus, 4);
  assert_int_equal(a.oversubscribed, 0);
  assert_int_equal(b.oversubscribed, 0);
  /* both hosts: 3 ranks on 2 CPUs */
  xcoll_host_record s[6] = {on(0, c01, 2), on(1, c01, 2), on(0, c01, 2),
                            on(1, c01, 2), on(0, c01, 2), on(1, c01, 2)};
  for (int me = 0; me < 6; me++) {
    xcoll_host_tally t = tally_of(s, 6, me);
    assert_int_equal(t.host_ranks, 3);
    assert_int_equal(t.host_cpus, 2);
    assert_int_equal(t.oversubscribed, 1);
  }
  /* A single rank is never oversubscribed, even on an empty mask. */
  xcoll_host_record one = on(3, c0, 0);
  xcoll_host_tally t = tally_of(&one, 1, 0);
  ASSERT_TALLY(t, 1, 1, 1, 0);
}

/* CPUs beyond the first 64 count, and overlapping masks count once. */
static void test_high_cpus_and_overlap(void **state) {
  (void)state;
  int a[] = {63, 64, 500, 1023}, b[] = {64, 65, 1023};
  xcoll_host_record r[2] = {on(0, a, 4), on(0, b, 3)};
  xcoll_host_tally t = tally_of(r, 2, 1);
  ASSERT_TALLY(t, 3, 2, 5 /* 63 64 65 500 1023 */, 0);
}

/* This process's record: its mask is sched_getaffinity's, and two reads
 * give the same host key. */
static void test_own_record(void **state) {
  (void)state;
  xcoll_host_record a, b;
  xcoll_host_record_fill(&a);
  xcoll_host_record_fill(&b);
  assert_memory_equal(a.host_key, b.host_key, sizeof a.host_key);
  /* The boot id the record carries leads the id the shm transport and the
   * socket plugin compare. */
  uint8_t boot[16], netns[24];
  if (xcoll_host_boot_id(boot)) {
    assert_memory_equal(a.host_key, boot, sizeof boot);
    assert_int_equal(xcoll_host_netns_id(netns), 1);
    assert_memory_equal(netns, boot, sizeof boot);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  for (int c = 0; c < XCOLL_HOST_MASK_BYTES * 8; c++)
    assert_int_equal(!!(a.mask[c / 8] & (1u << (c % 8))), !!CPU_ISSET(c, &set));
  xcoll_host_tally t = tally_of(&a, 1, 0);
  assert_int_equal(t.own_cpus, CPU_COUNT(&set));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pinned_one_cpu_each),
      cmocka_unit_test(test_shared_cpus),
      cmocka_unit_test(test_two_hosts),
      cmocka_unit_test(test_high_cpus_and_overlap),
      cmocka_unit_test(test_own_record),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
