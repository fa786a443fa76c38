#!/usr/bin/env bash
# ib_expect_fail.sh - a run that must fail, in bounded time, with a message.
#   ib_expect_fail.sh LIMIT_S PATTERN COMMAND...
# Runs COMMAND (stdout and stderr together) under `timeout LIMIT_S`; passes
# when it exits non-zero before the limit and its output matches the
# extended regular expression PATTERN (grep -E). Used for the ibverbs
# plugin's error paths: a bad rkey, a write without its clear-to-send, no
# RDMA device.
set -u
limit=$1
pattern=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
timeout -k 5 "$limit" "$@" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
tail -n 40 "$out"
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b-a}')
echo "exit status $rc after $elapsed s"
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  echo "FAIL: no failure within $limit s (the error was not detected)"
  exit 1
fi
if [ $rc -eq 0 ]; then
  echo "FAIL: the run succeeded; it should have failed"
  exit 1
fi
if ! grep -Eq "$pattern" "$out"; then
  echo "FAIL: no line matches '$pattern'"
  exit 1
fi
echo "PASS: failed as expected, matching '$pattern'"
