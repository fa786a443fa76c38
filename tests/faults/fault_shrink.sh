#!/usr/bin/env bash
# fault_shrink.sh - 4 ranks lose one, and the other three shrink the
# communicator and go on (tests/faults/fault_shrink.c).
#   fault_shrink.sh XCOLLRUN FAULT_SHRINK_BINARY kill|kill0|leave|abort-blocked
# kill:  rank 2 SIGKILLs itself after the first allreduce.
# kill0: rank 0 does; the store is served by xcollrun (--store-host
#        launcher), so the survivors still have it.
# abort-blocked: rank 2 stops (SIGSTOP); each survivor shrinks with
#        XCOLL_SHRINK_ABORT while a thread of its is blocked in an allreduce.
# leave: rank 1 destroys its communicator after the first allreduce.
# Each of the three others must print SHRINK-OK, and the job must end within
# 60 s (the failure is seen on the dead connections, not at XCOLL_TIMEOUT_S).
set -u
xcollrun=$1
prog=$2
mode=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export XCOLL_TIMEOUT_S=60
# xcollrun SIGTERMs the group when rank 2 dies; fault_shrink ignores it and
# xcollrun's SIGKILL comes only after this grace period.
export XCOLLRUN_GRACE_S=50
timeout -k 5 60 "$xcollrun" --nproc-per-node 4 --master-port 0 \
  --store-host launcher "$prog" "--$mode" >"$out" 2>&1
rc=$?
cat "$out"
echo "xcollrun exited with $rc"
if [ $rc -eq 124 ]; then
  echo "FAIL: the job did not finish within 60 s"
  exit 1
fi
gone=2
[ "$mode" = leave ] && gone=1
[ "$mode" = kill0 ] && gone=0
fail=0
grep -q "GONE rank $gone" "$out" || { echo "FAIL: rank $gone never left"; fail=1; }
for r in 0 1 2 3; do
  [ "$r" -eq "$gone" ] && continue
  if ! grep -q "SHRINK-OK rank $r:" "$out"; then
    echo "FAIL: rank $r did not go on after the shrink"
    fail=1
  fi
done
grep -q "SHRINK-BAD" "$out" && { echo "FAIL: a survivor reported a bad outcome"; fail=1; }
# A figure, not a check: from the gone rank's last word to the last
# survivor's first collective on the shrunk communicator.
awk -v gone="$gone" '
  $0 ~ "GONE rank " gone " at " {t0 = $NF}
  /SHRINK-OK rank .* done at / {if ($NF > t1) t1 = $NF}
  END {if (t0 != "" && t1 != "")
         printf "from rank %d gone to the last survivor'"'"'s first collective on the shrunk communicator: %.1f ms\n", gone, 1000 * (t1 - t0)}' "$out"
[ $fail -eq 0 ] && echo "PASS: 3 survivors shrank and went on ($mode)"
exit $fail
