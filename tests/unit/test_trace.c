/* test_trace.c - XCOLL_TRACE (core/trace.c): the file it writes parses as
 * JSON (with cJSON, an independent parser), holds the spans written from
 * several threads with the right fields, names the process after its rank,
 * follows the path rules, and stays one array across close and reopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"

static char temp_dir[256];

static int make_temp_dir(void **state) {
  (void)state;
  snprintf(temp_dir, sizeof temp_dir, "/tmp/xcoll_test_trace.XXXXXX");
  assert_non_null(mkdtemp(temp_dir));
  return 0;
}

static int remove_temp_dir(void **state) {
  (void)state;
  char command[300];
  snprintf(command, sizeof command, "rm -rf '%s'", temp_dir);
  return system(command) == 0 ? 0 : -1;
}

static cJSON *parse_file(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)size + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
  text[size] = '\0';
  fclose(f);
  cJSON *json = cJSON_Parse(text);
  if (!json)
    fail_msg("%s is not valid JSON near: %.60s", path, cJSON_GetErrorPtr());
  free(text);
  return json;
}

static const cJSON *field(const cJSON *event, const char *name) {
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(event, name);
  if (!value)
    fail_msg("event has no \"%s\"", name);
  return value;
}

static void test_disabled_without_env(void **state) {
  (void)state;
  unsetenv("XCOLL_TRACE");
  assert_int_equal(xcoll_trace_open(0), XCOLL_SUCCESS);
  assert_int_equal(xcoll_trace_enabled(), 0);
  xcoll_trace_span("nothing", "collective", 1, 0.0, 1.0, NULL);
  xcoll_trace_close();
  assert_int_equal(xcoll_trace_enabled(), 0);
}

static void test_time_is_monotonic_microseconds(void **state) {
  (void)state;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double reference_us = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
  double a = xcoll_time_us();
  double b = xcoll_time_us();
  assert_true(b >= a);
  /* same clock and unit as CLOCK_MONOTONIC: within a second of it */
  assert_true(fabs(a - reference_us) < 1e6);
}

#define SPAN_THREADS 4
#define SPANS_PER_THREAD 100

static void *span_writer(void *arg) {
  int thread = (int)(intptr_t)arg;
  for (int i = 0; i < SPANS_PER_THREAD; i++) {
    char args[64];
    snprintf(args, sizeof args, "\"peer\":%d,\"bytes\":%d", thread, i * 8);
    double start = 1000.0 * i + thread;
    xcoll_trace_span("ring step", "chunk", (uint64_t)(10 + thread), start,
                     start + 2.5, args);
  }
  return NULL;
}

static void test_spans_from_threads(void **state) {
  (void)state;
  char pattern[300], path[300];
  snprintf(pattern, sizeof pattern, "%s/trace-%%r.json", temp_dir);
  snprintf(path, sizeof path, "%s/trace-3.json", temp_dir);
  setenv("XCOLL_TRACE", pattern, 1);
  assert_int_equal(xcoll_trace_open(3), XCOLL_SUCCESS);
  assert_int_equal(xcoll_trace_enabled(), 1);
  /* a second communicator only adds a reference; its rank is ignored */
  assert_int_equal(xcoll_trace_open(7), XCOLL_SUCCESS);

  pthread_t threads[SPAN_THREADS];
  for (int t = 0; t < SPAN_THREADS; t++)
    assert_int_equal(
        pthread_create(&threads[t], NULL, span_writer, (void *)(intptr_t)t), 0);
  for (int t = 0; t < SPAN_THREADS; t++)
    pthread_join(threads[t], NULL);
  /* names needing escapes, NULL args */
  xcoll_trace_span("all\"reduce\\\n", "collective", 1, 5.0, 4.0, NULL);

  xcoll_trace_close();
  assert_int_equal(xcoll_trace_enabled(), 1); /* one reference left */
  xcoll_trace_close();
  assert_int_equal(xcoll_trace_enabled(), 0);
  xcoll_trace_span("after close", "collective", 1, 0.0, 1.0, NULL);

  cJSON *json = parse_file(path);
  assert_true(cJSON_IsArray(json));
  int seen[SPAN_THREADS][SPANS_PER_THREAD] = {{0}};
  int complete = 0, process_named = 0, escaped_seen = 0, metadata = 0;
  const cJSON *event;
  cJSON_ArrayForEach(event, json) {
    const char *ph = field(event, "ph")->valuestring;
    const char *name = field(event, "name")->valuestring;
    assert_int_equal(field(event, "pid")->valueint, 3);
    if (strcmp(ph, "M") == 0) {
      metadata++;
      if (strcmp(name, "process_name") == 0) {
        assert_string_equal(field(field(event, "args"), "name")->valuestring,
                            "rank 3");
        process_named++;
      }
      continue;
    }
    assert_string_equal(ph, "X");
    assert_false(strcmp(name, "after close") == 0);
    complete++;
    if (strcmp(name, "all\"reduce\\\n") == 0) {
      escaped_seen++;
      assert_string_equal(field(event, "cat")->valuestring, "collective");
      assert_true(field(event, "dur")->valuedouble == 0.0); /* end < start */
      assert_true(cJSON_IsObject(field(event, "args")));
      continue;
    }
    assert_string_equal(name, "ring step");
    assert_string_equal(field(event, "cat")->valuestring, "chunk");
    const cJSON *args = field(event, "args");
    int thread = field(args, "peer")->valueint;
    int i = field(args, "bytes")->valueint / 8;
    assert_true(thread >= 0 && thread < SPAN_THREADS);
    assert_true(i >= 0 && i < SPANS_PER_THREAD);
    assert_true(fabs(field(event, "ts")->valuedouble - (1000.0 * i + thread)) <
                1e-6);
    assert_true(fabs(field(event, "dur")->valuedouble - 2.5) < 1e-6);
    seen[thread][i]++;
  }
  assert_int_equal(process_named, 1);
  assert_int_equal(escaped_seen, 1);
  assert_int_equal(complete, SPAN_THREADS * SPANS_PER_THREAD + 1);
  for (int t = 0; t < SPAN_THREADS; t++)
    for (int i = 0; i < SPANS_PER_THREAD; i++)
      assert_int_equal(seen[t][i], 1);
  cJSON_Delete(json);

  /* a new communicator after the last close continues the same array */
  assert_int_equal(xcoll_trace_open(3), XCOLL_SUCCESS);
  xcoll_trace_span("second", "collective", 2, 1.0, 2.0, "\"op\":\"sum\"");
  xcoll_trace_close();
  json = parse_file(path);
  assert_true(cJSON_IsArray(json));
  /* the new span's track (2) is new: its lane adds two metadata events */
  assert_int_equal(cJSON_GetArraySize(json),
                   metadata + SPAN_THREADS * SPANS_PER_THREAD + 1 + 1 + 2);
  const cJSON *last = cJSON_GetArrayItem(json, cJSON_GetArraySize(json) - 1);
  assert_string_equal(field(last, "name")->valuestring, "second");
  assert_string_equal(field(field(last, "args"), "op")->valuestring, "sum");
  cJSON_Delete(json);
  unsetenv("XCOLL_TRACE");
}

/* Runs in a child process, because the first open fixes the file for the
 * whole process. */
static void run_in_child(const char *pattern, int rank, int close_it) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("XCOLL_TRACE", pattern, 1);
    if (xcoll_trace_open(rank) != XCOLL_SUCCESS)
      _exit(1);
    xcoll_trace_span("step", "chunk", 1, 1.0, 2.0, "\"peer\":1");
    if (close_it)
      xcoll_trace_close();
    _exit(0); /* no atexit, no stdio flush: like a crash */
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_path_rules(void **state) {
  (void)state;
  char pattern[300], path[300];
  /* no %r or %p: ".rank<N>" goes before the extension */
  snprintf(pattern, sizeof pattern, "%s/plain.json", temp_dir);
  run_in_child(pattern, 2, 1);
  snprintf(path, sizeof path, "%s/plain.rank2.json", temp_dir);
  cJSON *json = parse_file(path);
  /* process name and order, the lane's name and order, the span */
  assert_int_equal(cJSON_GetArraySize(json), 5);
  cJSON_Delete(json);
  /* no extension: appended */
  snprintf(pattern, sizeof pattern, "%s/noext", temp_dir);
  run_in_child(pattern, 5, 1);
  snprintf(path, sizeof path, "%s/noext.rank5", temp_dir);
  json = parse_file(path);
  cJSON_Delete(json);
  /* a process that dies without closing leaves an array that lacks only
   * its closing bracket (what Perfetto accepts) */
  snprintf(pattern, sizeof pattern, "%s/crash-%%r.json", temp_dir);
  run_in_child(pattern, 1, 0);
  snprintf(path, sizeof path, "%s/crash-1.json", temp_dir);
  FILE *f = fopen(path, "a");
  assert_non_null(f);
  fputs("]", f);
  fclose(f);
  json = parse_file(path);
  assert_true(cJSON_GetArraySize(json) >= 2);
  assert_string_equal(
      field(field(cJSON_GetArrayItem(json, 0), "args"), "name")->valuestring,
      "rank 1");
  cJSON_Delete(json);
}

/* Lanes (trace.h): spans that overlap on one track go to separate tids,
 * the spans of one tid never overlap, every tid is named after its track
 * and kind, and a lane is reused once it is free. Random spans from 3
 * tracks and 3 kinds, written in order of their end as the library does,
 * plus the fixed cases. Runs in a child: the first open fixes the file. */
#define LANE_SPANS 400

static void write_lane_spans(const char *pattern) {
  setenv("XCOLL_TRACE", pattern, 1);
  if (xcoll_trace_open(4) != XCOLL_SUCCESS)
    _exit(1);
  xcoll_trace_name_track(7, "comm 0 channel 1");
  /* two receives in flight, ended out of start order */
  xcoll_trace_span("recv", "chunk", 5, 2.0, 8.0, "\"k\":1");
  xcoll_trace_span("recv", "chunk", 5, 0.0, 10.0, "\"k\":0");
  /* free again at 10: back on the first lane */
  xcoll_trace_span("recv", "chunk", 5, 10.0, 12.0, "\"k\":2");
  xcoll_trace_span("send", "chunk", 5, 1.0, 9.0, "\"k\":3");
  xcoll_trace_span("proxy send", "proxy", 7, 0.0, 1.0, "\"k\":4");
  xcoll_trace_span("allreduce", "collective", 5, 0.0, 30.0, "\"k\":5");
  /* random spans, in order of their end */
  double starts[LANE_SPANS], ends[LANE_SPANS];
  unsigned seed = 12345u;
  for (int i = 0; i < LANE_SPANS; i++) {
    seed = seed * 1103515245u + 12345u;
    starts[i] = 100.0 + (double)((seed >> 8) % 10000) / 7.0;
    seed = seed * 1103515245u + 12345u;
    ends[i] = starts[i] + (double)((seed >> 8) % 3000) / 13.0;
  }
  for (int done = 0; done < LANE_SPANS; done++) {
    int next = -1;
    for (int i = 0; i < LANE_SPANS; i++)
      if (ends[i] >= 0 && (next < 0 || ends[i] < ends[next]))
        next = i;
    static const char *const kinds[3] = {"send", "recv", "reduce"};
    char args[32];
    snprintf(args, sizeof args, "\"k\":%d", 100 + next);
    xcoll_trace_span(kinds[next % 3], next % 2 ? "chunk" : "collective",
                     (uint64_t)(next % 3), starts[next], ends[next], args);
    ends[next] = -1.0;
  }
  xcoll_trace_close();
  _exit(0);
}

static void test_lanes_never_overlap(void **state) {
  (void)state;
  char pattern[300];
  snprintf(pattern, sizeof pattern, "%s/lanes.json", temp_dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    write_lane_spans(pattern);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  char path[300];
  snprintf(path, sizeof path, "%s/lanes.rank4.json", temp_dir);
  cJSON *json = parse_file(path);
  enum { MAX_TID = 1000 };
  static char names[MAX_TID][96];
  static double span_start[MAX_TID][LANE_SPANS + 8];
  static double span_end[MAX_TID][LANE_SPANS + 8];
  static int spans_on[MAX_TID];
  int tid_of_k[LANE_SPANS + 100];
  memset(names, 0, sizeof names);
  memset(spans_on, 0, sizeof spans_on);
  int spans = 0;
  const cJSON *event;
  cJSON_ArrayForEach(event, json) {
    int tid = field(event, "tid")->valueint;
    const char *ph = field(event, "ph")->valuestring;
    const char *name = field(event, "name")->valuestring;
    if (strcmp(ph, "M") == 0) {
      if (strcmp(name, "thread_name") == 0) {
        assert_true(tid > 0 && tid < MAX_TID);
        assert_int_equal(names[tid][0], 0); /* named once */
        snprintf(names[tid], sizeof names[tid], "%s",
                 field(field(event, "args"), "name")->valuestring);
      }
      continue;
    }
    assert_true(tid > 0 && tid < MAX_TID);
    if (names[tid][0] == 0)
      fail_msg("span on tid %d before its thread_name", tid);
    int k = field(field(event, "args"), "k")->valueint;
    assert_true(k >= 0 && k < LANE_SPANS + 100);
    tid_of_k[k] = tid;
    double ts = field(event, "ts")->valuedouble;
    span_start[tid][spans_on[tid]] = ts;
    span_end[tid][spans_on[tid]] = ts + field(event, "dur")->valuedouble;
    spans_on[tid]++;
    spans++;
  }
  assert_int_equal(spans, 6 + LANE_SPANS);
  /* the invariant: no two spans of one tid overlap (to the printed ns) */
  for (int tid = 1; tid < MAX_TID; tid++)
    for (int a = 0; a < spans_on[tid]; a++)
      for (int b = a + 1; b < spans_on[tid]; b++)
        if (span_start[tid][a] < span_end[tid][b] - 1e-6 &&
            span_start[tid][b] < span_end[tid][a] - 1e-6)
          fail_msg("tid %d (%s): [%.3f, %.3f] overlaps [%.3f, %.3f]", tid,
                   names[tid], span_start[tid][a], span_end[tid][a],
                   span_start[tid][b], span_end[tid][b]);
  /* the fixed cases: lanes, reuse and names */
  assert_int_not_equal(tid_of_k[0], tid_of_k[1]);
  assert_string_equal(names[tid_of_k[1]], "comm 5 recv");
  assert_string_equal(names[tid_of_k[0]], "comm 5 recv #2");
  assert_int_equal(tid_of_k[2], tid_of_k[1]);
  assert_string_equal(names[tid_of_k[3]], "comm 5 send");
  assert_string_equal(names[tid_of_k[4]], "comm 0 channel 1 proxy send");
  assert_string_equal(names[tid_of_k[5]], "comm 5 collectives");
  /* random spans overlap heavily, so some kind needed more than one lane */
  int second_lanes = 0;
  for (int tid = 1; tid < MAX_TID; tid++)
    if (strstr(names[tid], " #2"))
      second_lanes++;
  assert_true(second_lanes >= 3);
  cJSON_Delete(json);
}

static void test_bad_path_is_an_error(void **state) {
  (void)state;
  setenv("XCOLL_TRACE", "/nonexistent-dir-for-xcoll/t.json", 1);
  assert_int_equal(xcoll_trace_open(0), XCOLL_ERR_SYSTEM);
  assert_non_null(
      strstr(xcoll_last_error(), "/nonexistent-dir-for-xcoll/t.json"));
  assert_int_equal(xcoll_trace_enabled(), 0);
  unsetenv("XCOLL_TRACE");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_disabled_without_env),
      cmocka_unit_test(test_time_is_monotonic_microseconds),
      cmocka_unit_test(test_bad_path_is_an_error),
      cmocka_unit_test(test_path_rules),
      /* before the first open in this process: a fork after it would
       * continue that file */
      cmocka_unit_test(test_lanes_never_overlap),
      cmocka_unit_test(test_spans_from_threads),
  };
  return cmocka_run_group_tests(tests, make_temp_dir, remove_temp_dir);
}
