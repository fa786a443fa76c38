/* test_api.c - the public API on a world of one rank, through the full path
 * (rendezvous store + tcp backend): every collective on several dtypes,
 * argument checks (status and the argument named in the message),
 * non-blocking requests and their ordering, abort, broken communicators,
 * split, backend lookup. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "error.h"
#include "xcoll.h"

static void expect_message_has(xcoll_comm_t comm, const char *needle) {
  const char *message = xcoll_comm_last_error(comm);
  if (strstr(message, needle) == NULL)
    fail_msg("message '%s' does not contain '%s'", message, needle);
}

static int make_world(void **state) {
  xcoll_config config;
  xcoll_config_init(&config);
  config.backend = "tcp";
  config.timeout_s = 30;
  xcoll_comm_t comm = NULL;
  xcoll_status status = xcoll_comm_init(&comm, &config);
  if (status != XCOLL_SUCCESS) {
    print_error("xcoll_comm_init: %s: %s\n", xcoll_strerror(status),
                xcoll_last_error());
    return -1;
  }
  *state = comm;
  return 0;
}

static int destroy_world(void **state) {
  xcoll_status status = xcoll_comm_destroy(*state);
  *state = NULL;
  return status == XCOLL_SUCCESS ? 0 : -1;
}

static void test_names_and_sizes(void **state) {
  (void)state;
  assert_int_equal(xcoll_datatype_size(XCOLL_INT8), 1);
  assert_int_equal(xcoll_datatype_size(XCOLL_BFLOAT16), 2);
  assert_int_equal(xcoll_datatype_size(XCOLL_FLOAT16), 2);
  assert_int_equal(xcoll_datatype_size(XCOLL_UINT32), 4);
  assert_int_equal(xcoll_datatype_size(XCOLL_FLOAT64), 8);
  assert_int_equal(xcoll_datatype_size((xcoll_datatype)77), 0);
  assert_string_equal(xcoll_datatype_name(XCOLL_FLOAT32), "float32");
  assert_string_equal(xcoll_datatype_name((xcoll_datatype)-1), "unknown");
  assert_string_equal(xcoll_op_name(XCOLL_AVG), "avg");
  assert_string_equal(xcoll_op_name(XCOLL_BAND), "band");
  assert_string_equal(xcoll_op_name(XCOLL_BOR), "bor");
  assert_string_equal(xcoll_op_name(XCOLL_BXOR), "bxor");
  assert_string_equal(xcoll_op_name((xcoll_op)XCOLL_NUM_OPS), "premul_sum");
  assert_string_equal(
      xcoll_op_name((xcoll_op)(XCOLL_NUM_OPS + XCOLL_MAX_PREMUL_OPS - 1)),
      "premul_sum");
  assert_string_equal(
      xcoll_op_name((xcoll_op)(XCOLL_NUM_OPS + XCOLL_MAX_PREMUL_OPS)),
      "unknown");
  assert_string_equal(xcoll_op_name((xcoll_op)-1), "unknown");
  assert_string_equal(xcoll_strerror(XCOLL_ERR_REMOTE), "remote peer failed");
  assert_string_equal(xcoll_strerror((xcoll_status)1000), "unknown status");
  assert_int_equal(xcoll_version(), XCOLL_VERSION);
}

static void test_getters(void **state) {
  xcoll_comm_t comm = *state;
  int value = -7;
  assert_int_equal(xcoll_comm_rank(comm, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 0);
  assert_int_equal(xcoll_comm_size(comm, &value), XCOLL_SUCCESS);
  assert_int_equal(value, 1);
  assert_int_equal(xcoll_comm_local_rank(comm, &value), XCOLL_SUCCESS);
  assert_int_equal(value, -1);
  assert_string_equal(xcoll_comm_backend(comm), "tcp");
  assert_string_equal(xcoll_comm_backend(NULL), "");
  assert_int_equal(xcoll_comm_rank(comm, NULL), XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "rank");
  assert_int_equal(xcoll_comm_size(NULL, &value), XCOLL_ERR_INVALID_USAGE);
  /* The host census of a world of one: itself, on its own CPUs. */
  cpu_set_t set;
  CPU_ZERO(&set);
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  int ranks = -7, cpus = -7, own = -7;
  assert_int_equal(xcoll_comm_host(comm, &ranks, &cpus, &own), XCOLL_SUCCESS);
  assert_int_equal(ranks, 1);
  assert_int_equal(own, CPU_COUNT(&set));
  assert_int_equal(cpus, CPU_COUNT(&set));
  assert_int_equal(xcoll_comm_host(comm, NULL, NULL, &own), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_host(NULL, &ranks, &cpus, &own),
                   XCOLL_ERR_INVALID_USAGE);
}

/* On one rank every reduction is the identity, allgather and
 * reduce_scatter copy one block, broadcast and reduce copy. */
static void test_collectives_world_of_one(void **state) {
  xcoll_comm_t comm = *state;
  enum { N = 1000 };
  float fin[N], fout[N];
  int32_t iin[N], iout[N];
  double din[N], dout[N];
  uint16_t hin[N], hout[N];
  int64_t lin[N], lout[N];
  for (int i = 0; i < N; i++) {
    fin[i] = (float)i * 0.5f - 17.0f;
    iin[i] = i * 3 - 500;
    din[i] = 1.0 / (i + 1);
    hin[i] = (uint16_t)(0x3c00 + i); /* arbitrary bit patterns */
    lin[i] = (int64_t)i << 40;
  }

  memset(fout, 0, sizeof fout);
  assert_int_equal(
      xcoll_allreduce(fin, fout, N, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(fout, fin, sizeof fin);

  memset(iout, 0, sizeof iout);
  assert_int_equal(xcoll_allreduce(iin, iout, N, XCOLL_INT32, XCOLL_MAX, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(iout, iin, sizeof iin);

  memset(dout, 0, sizeof dout);
  assert_int_equal(
      xcoll_allreduce(din, dout, N, XCOLL_FLOAT64, XCOLL_AVG, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(dout, din, sizeof din);

  memset(hout, 0, sizeof hout);
  assert_int_equal(
      xcoll_allreduce(hin, hout, N, XCOLL_BFLOAT16, XCOLL_PROD, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(hout, hin, sizeof hin);

  /* In place. */
  memcpy(dout, din, sizeof din);
  assert_int_equal(
      xcoll_allreduce(dout, dout, N, XCOLL_FLOAT64, XCOLL_MIN, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(dout, din, sizeof din);

  memset(lout, 0, sizeof lout);
  assert_int_equal(xcoll_allgather(lin, lout, N, XCOLL_INT64, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(lout, lin, sizeof lin);

  memset(hout, 0, sizeof hout);
  assert_int_equal(
      xcoll_reduce_scatter(hin, hout, N, XCOLL_FLOAT16, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(hout, hin, sizeof hin);

  memset(iout, 0, sizeof iout);
  assert_int_equal(xcoll_broadcast(iin, iout, N, XCOLL_INT32, 0, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(iout, iin, sizeof iin);

  memset(fout, 0, sizeof fout);
  assert_int_equal(
      xcoll_reduce(fin, fout, N, XCOLL_FLOAT32, XCOLL_SUM, 0, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(fout, fin, sizeof fin);

  assert_int_equal(xcoll_barrier(comm), XCOLL_SUCCESS);

  /* count 0: nothing to do, NULL buffers allowed. */
  assert_int_equal(
      xcoll_allreduce(NULL, NULL, 0, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_int_equal(xcoll_allgather(NULL, NULL, 0, XCOLL_INT8, comm),
                   XCOLL_SUCCESS);
}

static void test_bad_arguments(void **state) {
  xcoll_comm_t comm = *state;
  float buf[8] = {0};
  xcoll_request_t request = (xcoll_request_t)(uintptr_t)1;

  assert_int_equal(
      xcoll_allreduce(NULL, buf, 8, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "sendbuf");
  assert_int_equal(
      xcoll_allreduce(buf, NULL, 8, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "recvbuf");
  assert_int_equal(
      xcoll_allreduce(buf, buf, 8, (xcoll_datatype)42, XCOLL_SUM, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "dtype");
  assert_int_equal(
      xcoll_allreduce(buf, buf, 8, XCOLL_FLOAT32, (xcoll_op)42, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "op");
  assert_int_equal(xcoll_allreduce(buf, buf, 8, XCOLL_INT32, XCOLL_AVG, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "avg");
  expect_message_has(comm, "int32");
  assert_int_equal(xcoll_broadcast(buf, buf, 8, XCOLL_FLOAT32, 1, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "root");
  assert_int_equal(
      xcoll_reduce(buf, buf, 8, XCOLL_FLOAT32, XCOLL_SUM, -1, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "root");
  /* reduce's recvbuf is required on the root (rank 0 here). */
  assert_int_equal(
      xcoll_reduce(buf, NULL, 8, XCOLL_FLOAT32, XCOLL_SUM, 0, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "recvbuf");
  assert_int_equal(xcoll_allreduce(buf, buf, SIZE_MAX / 4 + 1, XCOLL_FLOAT64,
                                   XCOLL_SUM, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "count");
  expect_message_has(comm, "PTRDIFF_MAX");
  assert_int_equal(
      xcoll_allgather(buf, buf, SIZE_MAX / 2 + 1, XCOLL_FLOAT16, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "sendcount");
  assert_int_equal(xcoll_iallreduce(buf, buf, 8, XCOLL_FLOAT32, XCOLL_SUM, comm,
                                    (xcoll_stream_t)buf, &request),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_null(request);
  expect_message_has(comm, "stream");
  assert_int_equal(
      xcoll_iallreduce(buf, buf, 8, XCOLL_FLOAT32, XCOLL_SUM, comm, NULL, NULL),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "request");
  assert_int_equal(xcoll_ibarrier(comm, NULL), XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "request");
  assert_int_equal(xcoll_wait(NULL), XCOLL_ERR_INVALID_ARGUMENT);

  assert_int_equal(xcoll_allreduce(buf, buf, 8, XCOLL_FLOAT32, XCOLL_SUM, NULL),
                   XCOLL_ERR_INVALID_USAGE);
  expect_message_has(NULL, "comm");

  /* None of this broke the communicator. */
  assert_int_equal(xcoll_barrier(comm), XCOLL_SUCCESS);
}

/* Send and receive buffers that overlap without being the in-place form
 * are refused before anything moves (the receive would overwrite input not
 * yet read); identical buffers, the in-place slices and adjacent buffers
 * pass. A world of one: rank 0's slice is the buffer's start. */
static void test_overlapping_buffers(void **state) {
  xcoll_comm_t comm = *state;
  float buf[16] = {0};
  assert_int_equal(
      xcoll_allreduce(buf, buf + 1, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "overlap");
  expect_message_has(comm, "in-place form");
  assert_int_equal(
      xcoll_allreduce(buf + 3, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_broadcast(buf, buf + 2, 4, XCOLL_FLOAT32, 0, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      xcoll_reduce(buf + 1, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, 0, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_allgather(buf + 1, buf, 2, XCOLL_FLOAT32, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "rank * sendcount");
  assert_int_equal(
      xcoll_reduce_scatter(buf, buf + 1, 2, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "rank * recvcount");
  /* Allowed: in place, and buffers that touch without overlapping. */
  assert_int_equal(xcoll_allreduce(buf, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(
      xcoll_allreduce(buf, buf + 4, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_int_equal(
      xcoll_allreduce(buf + 4, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_int_equal(xcoll_allgather(buf, buf, 4, XCOLL_FLOAT32, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(
      xcoll_reduce_scatter(buf, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_int_equal(xcoll_broadcast(buf, buf, 4, XCOLL_FLOAT32, 0, comm),
                   XCOLL_SUCCESS);
}

/* XCOLL_BAND, XCOLL_BOR, XCOLL_BXOR: integer types only. */
static void test_bitwise_ops_arguments(void **state) {
  xcoll_comm_t comm = *state;
  float f[4] = {1, 2, 3, 4}, fout[4] = {0};
  int32_t x[4] = {5, -7, 9, 11}, out[4] = {0};
  assert_int_equal(xcoll_allreduce(f, fout, 4, XCOLL_FLOAT32, XCOLL_BAND, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "band");
  expect_message_has(comm, "float32");
  assert_int_equal(
      xcoll_reduce_scatter(f, fout, 4, XCOLL_FLOAT16, XCOLL_BOR, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "bor with dtype float16");
  xcoll_request_t request = (xcoll_request_t)(uintptr_t)1;
  assert_int_equal(xcoll_ireduce(f, fout, 2, XCOLL_FLOAT64, XCOLL_BXOR, 0,
                                 comm, NULL, &request),
                   XCOLL_ERR_INVALID_ARGUMENT);
  assert_null(request);
  expect_message_has(comm, "bxor with dtype float64");
  assert_int_equal(
      xcoll_allreduce(f, fout, 4, XCOLL_BFLOAT16, XCOLL_BAND, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  /* On one rank an integer bitwise reduction is the identity. */
  assert_int_equal(xcoll_allreduce(x, out, 4, XCOLL_INT32, XCOLL_BXOR, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(x, out, sizeof x);
  assert_int_equal(xcoll_barrier(comm), XCOLL_SUCCESS);
}

/* Pre-multiplied sums on one rank: the result is scalar * input, the input
 * unchanged unless it is the output; creation and destruction errors; the
 * op with another dtype, after destroy, or unknown. */
static void test_premul_sum(void **state) {
  xcoll_comm_t comm = *state;
  float in[4] = {1, -2, 3.5f, 8}, out[4] = {0}, scalar = 0.5f;
  xcoll_op op = XCOLL_SUM;
  assert_int_equal(xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_SUCCESS);
  assert_true((int)op >= XCOLL_NUM_OPS);
  assert_string_equal(xcoll_op_name(op), "premul_sum");
  scalar = 100.0f; /* read at creation: changing it now changes nothing */
  assert_int_equal(xcoll_allreduce(in, out, 4, XCOLL_FLOAT32, op, comm),
                   XCOLL_SUCCESS);
  for (int i = 0; i < 4; i++)
    assert_true(out[i] == 0.5f * in[i]);
  assert_true(in[1] == -2.0f && in[3] == 8.0f); /* sendbuf untouched */
  /* In place, and non-blocking with the op destroyed before the wait
   * (allowed: the scalar was applied when the call was made). */
  float buf[4] = {2, 4, 6, 8};
  assert_int_equal(xcoll_reduce(buf, buf, 4, XCOLL_FLOAT32, op, 0, comm),
                   XCOLL_SUCCESS);
  assert_true(buf[0] == 1.0f && buf[3] == 4.0f);
  xcoll_request_t request = NULL;
  assert_int_equal(xcoll_ireduce_scatter(in, out, 4, XCOLL_FLOAT32, op, comm,
                                         NULL, &request),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_op_destroy(op, comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_wait(request), XCOLL_SUCCESS);
  for (int i = 0; i < 4; i++)
    assert_true(out[i] == 0.5f * in[i]);

  /* Destroyed: unknown to collectives and to a second destroy. */
  assert_int_equal(xcoll_allreduce(in, out, 4, XCOLL_FLOAT32, op, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "not an xcoll_op");
  expect_message_has(comm, "premul sum");
  assert_int_equal(xcoll_op_destroy(op, comm), XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "not a live premul sum");
  assert_int_equal(xcoll_op_destroy(XCOLL_SUM, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "built-in");
  assert_int_equal(
      xcoll_allreduce(in, out, 4, XCOLL_FLOAT32,
                      (xcoll_op)(XCOLL_NUM_OPS + XCOLL_MAX_PREMUL_OPS), comm),
      XCOLL_ERR_INVALID_ARGUMENT);

  /* Integers: -3 * x, wrapping; and the op with another dtype. */
  int32_t x[3] = {5, -7, INT32_MAX}, y[3] = {0}, minus_three = -3;
  assert_int_equal(xcoll_op_create_premul_sum(&op, &minus_three, XCOLL_INT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_allreduce(x, y, 3, XCOLL_INT32, op, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(y[0], -15);
  assert_int_equal(y[1], 21);
  assert_int_equal(y[2], (int32_t)((uint32_t)INT32_MAX * (uint32_t)-3));
  assert_int_equal(xcoll_allreduce(in, out, 4, XCOLL_FLOAT32, op, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "made for dtype int32, used with dtype float32");
  assert_int_equal(xcoll_op_destroy(op, comm), XCOLL_SUCCESS);

  /* float16: 3.0 * 0.75 = 2.25, computed in float32 and rounded. */
  uint16_t three = 0x4200, three_quarters = 0x3A00, product = 0;
  assert_int_equal(xcoll_op_create_premul_sum(&op, &three_quarters,
                                              XCOLL_FLOAT16, XCOLL_SCALAR_HOST,
                                              comm),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_allreduce(&three, &product, 1, XCOLL_FLOAT16, op, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(product, 0x4080);
  assert_int_equal(xcoll_op_destroy(op, comm), XCOLL_SUCCESS);

  /* Creation errors. */
  assert_int_equal(xcoll_op_create_premul_sum(NULL, &scalar, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "op is NULL");
  assert_int_equal(xcoll_op_create_premul_sum(&op, NULL, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "scalar is NULL");
  assert_int_equal(xcoll_op_create_premul_sum(&op, &scalar, (xcoll_datatype)42,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "dtype=42");
  assert_int_equal(
      xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT32,
                                 (xcoll_scalar_residence)7, comm),
      XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "residence=7");
  assert_int_equal(xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_DEVICE, comm),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "XCOLL_SCALAR_DEVICE on a communicator bound to "
                           "the host");
  assert_int_equal(xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, NULL),
                   XCOLL_ERR_INVALID_USAGE);
  assert_int_equal(xcoll_op_destroy(XCOLL_NUM_OPS, NULL),
                   XCOLL_ERR_INVALID_USAGE);

  /* The table: XCOLL_MAX_PREMUL_OPS live at once, distinct values, then
   * INVALID_USAGE; a destroyed slot is handed out again. */
  static xcoll_op ops[XCOLL_MAX_PREMUL_OPS];
  for (int k = 0; k < XCOLL_MAX_PREMUL_OPS; k++) {
    assert_int_equal(xcoll_op_create_premul_sum(&ops[k], &scalar, XCOLL_FLOAT32,
                                                XCOLL_SCALAR_HOST, comm),
                     XCOLL_SUCCESS);
    assert_int_equal((int)ops[k], XCOLL_NUM_OPS + k);
  }
  assert_int_equal(xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_ERR_INVALID_USAGE);
  expect_message_has(comm, "XCOLL_MAX_PREMUL_OPS");
  assert_int_equal(xcoll_op_destroy(ops[17], comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_op_create_premul_sum(&op, &scalar, XCOLL_FLOAT32,
                                              XCOLL_SCALAR_HOST, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(op, ops[17]);
  for (int k = 0; k < XCOLL_MAX_PREMUL_OPS; k++)
    assert_int_equal(xcoll_op_destroy(ops[k], comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_barrier(comm), XCOLL_SUCCESS);
}

/* A negative count passed as size_t, for every dtype (1-byte ones too, whose
 * byte count does not overflow size_t) and every collective with a count:
 * rejected before any buffer is touched. A buffer of 16 bytes would be
 * overrun at once if the call went through. */
static void test_negative_counts(void **state) {
  xcoll_comm_t comm = *state;
  uint8_t buf[16] = {0};
  xcoll_request_t request = NULL;
  const size_t counts[] = {(size_t)-1, (size_t)-8, (size_t)PTRDIFF_MAX + 1};
  for (int d = 0; d < XCOLL_NUM_DATATYPES; d++) {
    xcoll_datatype dtype = (xcoll_datatype)d;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      size_t count = counts[c];
      assert_int_equal(xcoll_allreduce(buf, buf, count, dtype, XCOLL_MAX, comm),
                       XCOLL_ERR_INVALID_ARGUMENT);
      expect_message_has(comm, "PTRDIFF_MAX");
      assert_int_equal(xcoll_allgather(buf, buf, count, dtype, comm),
                       XCOLL_ERR_INVALID_ARGUMENT);
      assert_int_equal(
          xcoll_reduce_scatter(buf, buf, count, dtype, XCOLL_MIN, comm),
          XCOLL_ERR_INVALID_ARGUMENT);
      assert_int_equal(xcoll_broadcast(buf, buf, count, dtype, 0, comm),
                       XCOLL_ERR_INVALID_ARGUMENT);
      assert_int_equal(
          xcoll_reduce(buf, buf, count, dtype, XCOLL_MAX, 0, comm),
          XCOLL_ERR_INVALID_ARGUMENT);
      assert_int_equal(xcoll_iallreduce(buf, buf, count, dtype, XCOLL_MAX,
                                        comm, NULL, &request),
                       XCOLL_ERR_INVALID_ARGUMENT);
      assert_null(request);
    }
  }
  /* The communicator is still usable: nothing was started. */
  assert_int_equal(xcoll_allreduce(buf, buf, 16, XCOLL_UINT8, XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
}

static void test_nonblocking_and_order(void **state) {
  xcoll_comm_t comm = *state;
  enum { N = 4096, K = 8 };
  static int32_t source[K][N], stage[K][N], result[K][N];
  for (int k = 0; k < K; k++)
    for (int i = 0; i < N; i++) {
      source[k][i] = k * N + i;
      stage[k][i] = -1;
      result[k][i] = -2;
    }
  xcoll_request_t requests[K];
  for (int k = 0; k < K; k++) {
    assert_int_equal(xcoll_iallreduce(source[k], stage[k], N, XCOLL_INT32,
                                      XCOLL_SUM, comm, NULL, &requests[k]),
                     XCOLL_SUCCESS);
    assert_non_null(requests[k]);
  }
  /* Issued after the non-blocking calls, so it must run after them and read
   * what they wrote: stage[0] must already hold source[0]. */
  assert_int_equal(
      xcoll_allreduce(stage[0], result[0], N, XCOLL_INT32, XCOLL_SUM, comm),
      XCOLL_SUCCESS);
  assert_memory_equal(result[0], source[0], sizeof source[0]);

  /* The blocking call ran last, so every earlier request is done. */
  for (int k = 0; k < K; k++) {
    int done = 0;
    assert_int_equal(xcoll_test(requests[k], &done), XCOLL_SUCCESS);
    assert_int_equal(done, 1);
    assert_int_equal(xcoll_wait(requests[k]), XCOLL_SUCCESS);
    assert_memory_equal(stage[k], source[k], sizeof source[k]);
  }

  /* A chain of non-blocking calls each reading the previous one's output. */
  for (int k = 1; k < K; k++)
    assert_int_equal(xcoll_ibroadcast(result[k - 1], result[k], N, XCOLL_INT32,
                                      0, comm, NULL, &requests[k]),
                     XCOLL_SUCCESS);
  xcoll_request_t barrier = NULL;
  assert_int_equal(xcoll_ibarrier(comm, &barrier), XCOLL_SUCCESS);
  assert_int_equal(xcoll_wait(barrier), XCOLL_SUCCESS);
  for (int k = 1; k < K; k++) {
    assert_int_equal(xcoll_wait(requests[k]), XCOLL_SUCCESS);
    assert_memory_equal(result[k], source[0], sizeof source[0]);
  }

  /* count 0 still gives a request that completes. */
  xcoll_request_t empty = NULL;
  assert_int_equal(
      xcoll_iallgather(NULL, NULL, 0, XCOLL_FLOAT32, comm, NULL, &empty),
      XCOLL_SUCCESS);
  assert_non_null(empty);
  assert_int_equal(xcoll_wait(empty), XCOLL_SUCCESS);
}

static void test_destroy_null(void **state) {
  (void)state;
  assert_int_equal(xcoll_comm_destroy(NULL), XCOLL_SUCCESS);
}

static void test_abort_then_call(void **state) {
  xcoll_comm_t comm = NULL;
  assert_int_equal(make_world((void **)&comm), 0);
  float buf[4] = {1, 2, 3, 4};
  assert_int_equal(xcoll_allreduce(buf, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_abort(comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_allreduce(buf, buf, 4, XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_ERR_ABORTED);
  expect_message_has(comm, "abort");
  xcoll_request_t request = (xcoll_request_t)(uintptr_t)1;
  assert_int_equal(xcoll_ibarrier(comm, &request), XCOLL_ERR_ABORTED);
  assert_null(request);
  assert_int_equal(xcoll_barrier(comm), XCOLL_ERR_ABORTED);
  /* Getters still work on an aborted communicator, and so does a second abort.
   */
  int rank = -1;
  assert_int_equal(xcoll_comm_rank(comm, &rank), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_abort(comm), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
  (void)state;
}

static void test_abort_with_pending_requests(void **state) {
  (void)state;
  xcoll_comm_t comm = NULL;
  assert_int_equal(make_world((void **)&comm), 0);
  enum { N = 1 << 16, K = 16 };
  static float in[N], out[K][N];
  xcoll_request_t requests[K];
  for (int k = 0; k < K; k++)
    assert_int_equal(xcoll_iallreduce(in, out[k], N, XCOLL_FLOAT32, XCOLL_SUM,
                                      comm, NULL, &requests[k]),
                     XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_abort(comm), XCOLL_SUCCESS);
  /* Each finished before the abort or was failed by it; none hangs, and
   * once one has failed, none after it in issue order has succeeded. */
  int failed = 0;
  for (int k = 0; k < K; k++) {
    xcoll_status status = xcoll_wait(requests[k]);
    if (status == XCOLL_SUCCESS)
      assert_false(failed);
    else {
      assert_int_equal(status, XCOLL_ERR_ABORTED);
      failed = 1;
    }
  }
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
}

static void test_broken_comm_fails_fast(void **state) {
  (void)state;
  xcoll_comm_t comm = NULL;
  assert_int_equal(make_world((void **)&comm), 0);
  xcoll_comm_set_broken(comm, XCOLL_ERR_REMOTE, "peer 3 closed its connection");
  /* The first cause wins over later ones. */
  xcoll_comm_set_broken(comm, XCOLL_ERR_TIMEOUT, "later cause");
  float buf[2] = {0};
  assert_int_equal(xcoll_allreduce(buf, buf, 2, XCOLL_FLOAT32, XCOLL_SUM, comm),
                   XCOLL_ERR_REMOTE);
  expect_message_has(comm, "peer 3");
  assert_int_equal(xcoll_barrier(comm), XCOLL_ERR_REMOTE);
  expect_message_has(comm, "peer 3");
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
}

static void test_split(void **state) {
  xcoll_comm_t comm = *state;
  xcoll_comm_t child = (xcoll_comm_t)(uintptr_t)1;
  assert_int_equal(xcoll_comm_split(comm, XCOLL_SPLIT_NOCOLOR, 0, &child),
                   XCOLL_SUCCESS);
  assert_null(child);
  assert_int_equal(xcoll_comm_split(comm, -2, 0, &child),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "color");
  assert_int_equal(xcoll_comm_split(comm, 0, 0, NULL),
                   XCOLL_ERR_INVALID_ARGUMENT);
  expect_message_has(comm, "newcomm");

  xcoll_comm_t first = NULL, second = NULL;
  assert_int_equal(xcoll_comm_split(comm, 5, 9, &first), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_split(comm, 0, 0, &second), XCOLL_SUCCESS);
  assert_non_null(first);
  assert_non_null(second);
  int rank = -1, size = -1, local_rank = -2;
  assert_int_equal(xcoll_comm_rank(first, &rank), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_size(first, &size), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_local_rank(first, &local_rank), XCOLL_SUCCESS);
  assert_int_equal(rank, 0);
  assert_int_equal(size, 1);
  assert_int_equal(local_rank, 0);
  /* Each communicator has an id of its own. */
  assert_int_not_equal(first->comm_id, 0);
  assert_int_not_equal(second->comm_id, 0);
  assert_int_not_equal(first->comm_id, second->comm_id);
  int64_t in[3] = {5, -6, 7}, out[3] = {0};
  assert_int_equal(xcoll_allreduce(in, out, 3, XCOLL_INT64, XCOLL_SUM, first),
                   XCOLL_SUCCESS);
  assert_memory_equal(out, in, sizeof in);
  assert_int_equal(xcoll_comm_destroy(first), XCOLL_SUCCESS);
  assert_int_equal(xcoll_comm_destroy(second), XCOLL_SUCCESS);
  /* The parent still works. */
  assert_int_equal(xcoll_barrier(comm), XCOLL_SUCCESS);
}

static void test_unknown_backend(void **state) {
  (void)state;
  xcoll_config config;
  xcoll_config_init(&config);
  xcoll_comm_t comm = (xcoll_comm_t)(uintptr_t)1;
  config.backend = "carrier_pigeon";
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_NOT_SUPPORTED);
  assert_null(comm);
  assert_non_null(strstr(xcoll_last_error(), "carrier_pigeon"));
  assert_non_null(strstr(xcoll_last_error(), "tcp"));
  /* Logged at the default level to stderr: the caller need not repeat it. */
  const char *level = getenv("XCOLL_DEBUG"), *file = getenv("XCOLL_DEBUG_FILE");
  if ((level == NULL || *level == '\0') && (file == NULL || *file == '\0'))
    assert_int_equal(xcoll_comm_last_error_logged(NULL), 1);
  /* A failure raised quietly was not shown: the caller prints it. */
  assert_int_equal(xcoll_error_quiet(NULL, XCOLL_ERR_TIMEOUT, "quiet one"),
                   XCOLL_ERR_TIMEOUT);
  assert_int_equal(xcoll_comm_last_error_logged(NULL), 0);
  /* A hushed thread records its failures without a WARN line (nccl_like's
   * failure watcher, whose store connection a finished rank 0 breaks). */
  assert_int_equal(xcoll_error_hush(1), 0);
  assert_int_equal(xcoll_error(NULL, XCOLL_ERR_REMOTE, "hushed one"),
                   XCOLL_ERR_REMOTE);
  assert_string_equal(xcoll_last_error(), "hushed one");
  assert_int_equal(xcoll_comm_last_error_logged(NULL), 0);
  assert_int_equal(xcoll_error_hush(0), 1);
  if ((level == NULL || *level == '\0') && (file == NULL || *file == '\0')) {
    assert_int_equal(xcoll_error(NULL, XCOLL_ERR_REMOTE, "loud one"),
                     XCOLL_ERR_REMOTE);
    assert_int_equal(xcoll_comm_last_error_logged(NULL), 1);
  }
#ifndef XCOLL_HAVE_NCCL_LIKE
  config.backend = "nccl_like";
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_NOT_SUPPORTED);
  assert_non_null(strstr(xcoll_last_error(), "not compiled into"));
#endif
#ifndef XCOLL_HAVE_UCX
  config.backend = "ucx";
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_NOT_SUPPORTED);
  assert_non_null(strstr(xcoll_last_error(), "XCOLL_WITH_UCX=ON"));
#endif
}

static void test_bad_config(void **state) {
  (void)state;
  xcoll_config config;
  xcoll_config_init(&config);
  xcoll_comm_t comm = NULL;
  config.rank = 1;
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "rank"));
  xcoll_config_init(&config);
  config.world_size = 2;
  config.master_port = 65536;
  assert_int_equal(xcoll_comm_init(&comm, &config), XCOLL_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(xcoll_last_error(), "master_port"));
  assert_int_equal(xcoll_comm_init(&comm, NULL), XCOLL_ERR_INVALID_ARGUMENT);
  assert_int_equal(xcoll_comm_init(NULL, &config), XCOLL_ERR_INVALID_ARGUMENT);
}

static void test_init_env_world_of_one(void **state) {
  (void)state;
  const char *vars[] = {"RANK",
                        "WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE",
                        "SLURM_PROCID",
                        "SLURM_NTASKS",
                        "MASTER_PORT",
                        "XCOLL_BACKEND"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    unsetenv(vars[i]);
  xcoll_comm_t comm = NULL;
  assert_int_equal(xcoll_comm_init_env(&comm), XCOLL_SUCCESS);
  int size = 0;
  assert_int_equal(xcoll_comm_size(comm, &size), XCOLL_SUCCESS);
  assert_int_equal(size, 1);
  uint8_t in[5] = {1, 2, 3, 4, 255}, out[5] = {0};
  assert_int_equal(xcoll_allreduce(in, out, 5, XCOLL_UINT8, XCOLL_SUM, comm),
                   XCOLL_SUCCESS);
  assert_memory_equal(out, in, sizeof in);
  assert_int_equal(xcoll_comm_destroy(comm), XCOLL_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_and_sizes),
      cmocka_unit_test_setup_teardown(test_getters, make_world, destroy_world),
      cmocka_unit_test_setup_teardown(test_collectives_world_of_one, make_world,
                                      destroy_world),
      cmocka_unit_test_setup_teardown(test_bad_arguments, make_world,
                                      destroy_world),
      cmocka_unit_test_setup_teardown(test_overlapping_buffers, make_world,
                                      destroy_world),
      cmocka_unit_test_setup_teardown(test_bitwise_ops_arguments, make_world,
                                      destroy_world),
      cmocka_unit_test_setup_teardown(test_premul_sum, make_world,
                                      destroy_world),
      cmocka_unit_test_setup_teardown(test_negative_counts, make_world,
                                      destroy_world),
      cmocka_unit_test_setup_teardown(test_nonblocking_and_order, make_world,
                                      destroy_world),
      cmocka_unit_test(test_destroy_null),
      cmocka_unit_test(test_abort_then_call),
      cmocka_unit_test(test_abort_with_pending_requests),
      cmocka_unit_test(test_broken_comm_fails_fast),
      cmocka_unit_test_setup_teardown(test_split, make_world, destroy_world),
      cmocka_unit_test(test_unknown_backend),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_init_env_world_of_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
