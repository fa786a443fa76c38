#!/usr/bin/env bash
# fault_peer.sh - a peer dies (or hangs) during an allreduce loop on 4 ranks
# (FAULT_PEER_NPROC, at least 3); the survivors must return an error in
# bounded time.
#   fault_peer.sh XCOLLRUN FAULT_PEER_BINARY kill
#   fault_peer.sh XCOLLRUN FAULT_PEER_BINARY stop
# kill: rank 2 SIGKILLs itself; each other rank must report an error
#       naming rank 2 less than 5 s after the failing allreduce started.
# stop: rank 2 SIGSTOPs itself; with XCOLL_TIMEOUT_S=3 each survivor must
#       fail (TIMEOUT, or REMOTE once another survivor killed rank 2 or
#       reported it) within 5 s (XCOLL_TIMEOUT_S + 2); on ucx each must also
#       blame rank 2 (fault_peer --blame), the rank that stopped. The verdict of each survivor is its SURVIVOR-OK/BAD line
#       (tests/faults/fault_peer.c); this script checks there are three OKs.
set -u
xcollrun=$1
prog=$2
mode=$3
out=$(mktemp)
export FAULT_PEER_PIDS=$(mktemp)
# Whatever happens, no rank of this test outlives it: a hung job's ranks
# (one of them stopped) are killed by the pids they wrote at start.
cleanup() {
  while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$FAULT_PEER_PIDS"
  rm -f "$out" "$FAULT_PEER_PIDS"
}
trap cleanup EXIT

if [ "$mode" = kill ]; then
  # A long timeout: the failure must be noticed from the dead connection,
  # not from XCOLL_TIMEOUT_S.
  export XCOLL_TIMEOUT_S=60
  args=(--kill)
else
  export XCOLL_TIMEOUT_S=3
  args=(--stop 3)
  [ "${XCOLL_BACKEND:-tcp}" = ucx ] && args+=(--blame)
fi
# xcollrun SIGTERMs the group when rank 2 dies; fault_peer ignores it and
# xcollrun's SIGKILL comes only after this grace period, well after the 5 s
# (or 8 s) bound the survivors are held to.
export XCOLLRUN_GRACE_S=30
start=$(date +%s.%N)
nproc=${FAULT_PEER_NPROC:-4}
timeout -k 5 40 "$xcollrun" --nproc-per-node "$nproc" --master-port 0 "$prog" \
  "${args[@]}" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$out"
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b-a}')
# xcollrun's own status is 137 (rank 2's SIGKILL) in kill mode: not a verdict.
echo "xcollrun exited with $rc after $elapsed s"
if [ $rc -eq 124 ] || awk -v e="$elapsed" 'BEGIN{exit !(e >= 39)}'; then
  echo "FAIL: the job did not finish within 40 s (a survivor hung?)"
  exit 1
fi
fail=0
grep -q "VICTIM rank 2" "$out" || { echo "FAIL: rank 2 never reached the fault"; fail=1; }
for r in $(seq 0 $((nproc - 1))); do
  [ "$r" -eq 2 ] && continue
  if ! grep -q "SURVIVOR-OK rank $r:" "$out"; then
    echo "FAIL: rank $r did not report the expected error in time"
    fail=1
  fi
done
if grep -q "SURVIVOR-BAD" "$out"; then
  echo "FAIL: a survivor reported a bad outcome (see above)"
  fail=1
fi
# Stopping rank 2 leaves its sockets open: only XCOLL_TIMEOUT_S can notice,
# so at least one survivor must have timed out (status 5); the others may
# have heard of it from that one (REMOTE).
if [ "$mode" = stop ] && ! grep -q "SURVIVOR-OK.*with timed out (5)" "$out"; then
  echo "FAIL: no survivor reported XCOLL_ERR_TIMEOUT"
  fail=1
fi
[ $fail -eq 0 ] && echo "PASS: $((nproc - 1)) survivors failed in bounded time ($mode)"
exit $fail
