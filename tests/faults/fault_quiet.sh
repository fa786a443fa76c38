#!/usr/bin/env bash
# fault_quiet.sh - a broken communicator fails every queued request with a
# few log lines in all (tests/faults/fault_quiet.c): 3 ranks, rank 2 dies
# after init, ranks 0 and 1 have REQUESTS non-blocking allreduces queued.
#   fault_quiet.sh XCOLLRUN FAULT_QUIET_BINARY [REQUESTS]
# Passes when both survivors print QUIET-OK and each wrote at most
# MAX_LINES (default 10) WARN lines: the failure, the peer's death, the
# "unusable" line once, xcollrun's own lines are not counted.
set -u
xcollrun=$1
prog=$2
requests=${3:-20000}
max_lines=${MAX_LINES:-10}
out=$(mktemp)
gate=$(mktemp -u)
trap 'rm -f "$out" "$gate.0" "$gate.1"' EXIT
export FAULT_QUIET_GATE=$gate
export XCOLL_TIMEOUT_S=20 XCOLLRUN_GRACE_S=30
timeout -k 5 60 "$xcollrun" --nproc-per-node 3 --master-port 0 "$prog" \
  "$requests" >"$out" 2>&1
rc=$?
fail=0
for r in 0 1; do
  grep -q "QUIET-OK rank $r:" "$out" || {
    echo "FAIL: rank $r did not fail all its $requests requests"
    fail=1
  }
  lines=$(grep -c "^\[rank $r\] .*WARN" "$out")
  echo "rank $r: $lines WARN line(s)"
  if [ "$lines" -gt "$max_lines" ]; then
    echo "FAIL: rank $r wrote $lines WARN lines for $requests failed requests (at most $max_lines expected)"
    fail=1
  fi
done
if [ $fail -ne 0 ]; then
  echo "--- output (first 40 lines; xcollrun exited $rc) ---"
  head -40 "$out"
fi
[ $fail -eq 0 ] && echo "PASS: every queued request failed, with few log lines"
exit $fail
