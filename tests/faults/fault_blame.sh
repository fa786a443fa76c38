#!/usr/bin/env bash
# fault_blame.sh - every survivor names the rank that is at fault
# (tests/faults/fault_blame.c), on 4 ranks (FAULT_BLAME_NPROC):
#   fault_blame.sh XCOLLRUN FAULT_BLAME_BINARY stop VICTIM
#       VICTIM stops (SIGSTOP) mid-allreduce; XCOLL_TIMEOUT_S=3: each
#       survivor fails within 5 s saying "rank VICTIM stopped making progress".
#   fault_blame.sh XCOLLRUN FAULT_BLAME_BINARY leave VICTIM
#       VICTIM makes one allreduce fewer and destroys its communicator;
#       XCOLL_TIMEOUT_S=20: each survivor fails within 2 s saying "rank VICTIM
#       left (destroyed its communicator)", and the victim's destroy returns
#       within 2 s.
# Passes when every survivor printed BLAME-OK (and, leave, the victim
# VICTIM-OK).
set -u
xcollrun=$1
prog=$2
mode=$3
victim=$4
nproc=${FAULT_BLAME_NPROC:-4}
out=$(mktemp)
counter=$(mktemp)
trap 'rm -f "$out" "$counter"' EXIT
: >"$counter"
export FAULT_BLAME_COUNTER=$counter XCOLLRUN_GRACE_S=30
if [ "$mode" = stop ]; then timeout_s=3; else timeout_s=20; fi
export XCOLL_TIMEOUT_S=$timeout_s
start=$(date +%s.%N)
timeout -k 5 60 "$xcollrun" --nproc-per-node "$nproc" --master-port 0 "$prog" \
  --"$mode" "$victim" "$timeout_s" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$out"
echo "xcollrun exited with $rc after $(awk -v a="$start" -v b="$end" \
  'BEGIN{printf "%.2f", b-a}') s"
fail=0
grep -q "VICTIM.* rank $victim" "$out" || {
  echo "FAIL: rank $victim never reached the fault"
  fail=1
}
for r in $(seq 0 $((nproc - 1))); do
  [ "$r" -eq "$victim" ] && continue
  grep -q "BLAME-OK rank $r:" "$out" || {
    echo "FAIL: rank $r did not blame rank $victim in time"
    fail=1
  }
done
if [ "$mode" = leave ] && ! grep -q "VICTIM-OK rank $victim:" "$out"; then
  echo "FAIL: rank $victim's xcoll_comm_destroy took too long"
  fail=1
fi
[ $fail -eq 0 ] && echo "PASS: every survivor blamed rank $victim ($mode)"
exit $fail
