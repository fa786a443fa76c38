#!/bin/sh
# test_xcoll_perf.sh TOOLS_DIR: xcoll-perf takes command lines copied from
# nccl-tests (-g 1 -t 1 -z -a -m -N -T -o all|mulsum -d all -C -R -y), prints
# its type names, rejects -g 2 and -G N clearly, and says which algorithm and
# protocol ran in each row and JSON object.
set -u
. "$(dirname "$0")/common.sh"
perf=$tools/xcoll-perf
run=$tools/xcollrun
export XCOLL_TIMEOUT_S=60

# An nccl-tests command line at two ranks, every reduction (-o all).
"$run" --nproc-per-node 2 --master-port 0 "$perf" -b 8 -e 64K -f 4 -g 1 -t 1 \
  -z 1 -a 1 -m 2 -N 1 -T 30 -c 1 -n 2 -w 1 -o all -J "$tmp/rows.json" \
  >"$tmp/all.out" 2>&1 || fail "nccl-tests style command failed: $(tail -5 "$tmp/all.out")"
grep -q 'Out of bounds values : 0 OK' "$tmp/all.out" || fail "results not checked OK"
for op in sum prod max min avg; do
  grep -Eq " float +$op " "$tmp/all.out" || fail "-o all ran no $op row (type float, as nccl-tests names float32)"
done
grep -q 'blocking mode (-z 1)' "$tmp/all.out" || fail "header does not say -z 1"
grep -q 'algorithm/protocol' "$tmp/all.out" || fail "header does not name algorithm/protocol"
rows=$(grep -c '"tool":"xcoll-perf"' "$tmp/rows.json")
[ "$rows" -eq 35 ] || fail "expected 35 JSON rows (7 sizes x 5 ops), got $rows"
if grep '"tool"' "$tmp/rows.json" | grep -Ev '"algorithm":"[a-z_]+","protocol":"[a-z0-9_]+"' |
  grep -q .; then
  fail "a JSON row lacks algorithm/protocol: $(head -1 "$tmp/rows.json")"
fi
grep -q '"algorithm":"none"' "$tmp/rows.json" && fail "a JSON row says no algorithm ran"
grep -q '"algorithm":"recursive_doubling","protocol":"p2p"' "$tmp/rows.json" ||
  fail "an 8-byte allreduce at 2 ranks should run recursive_doubling over p2p"
grep -Eq '^\[rank 0\] +8 .*recursive_doubling/p2p$' "$tmp/all.out" ||
  fail "rows do not end with algorithm/protocol"

# The calls without a reduction, checked (-c 1), blocking and not (-z 2:
# each non-blocking call waited for at once), at three ranks: busbw =
# algbw * (P-1)/P for alltoall, gather and scatter, 1 for sendrecv
# (nccl-tests' factors, from the library's table).
for coll in alltoall gather scatter sendrecv; do
  for z in 0 1 2; do
    "$run" --nproc-per-node 3 --master-port 0 "$perf" --coll $coll -b 12 -e 96K \
      -f 8 -z $z -c 1 -n 2 -w 1 -r 1 >"$tmp/$coll.out" 2>&1 ||
      fail "--coll $coll -z $z failed: $(tail -5 "$tmp/$coll.out")"
    grep -q 'Out of bounds values : 0 OK' "$tmp/$coll.out" ||
      fail "--coll $coll -z $z: results not checked OK: $(tail -5 "$tmp/$coll.out")"
    [ $z -ne 2 ] || grep -q 'issue-and-wait mode (-z 2)' "$tmp/$coll.out" ||
      fail "--coll $coll -z 2: header does not say issue-and-wait"
  done
  awk -v coll=$coll '/^\[rank 0\] +[0-9]+ +[0-9]+ /{
      algbw = $9; busbw = $10; f = (coll == "sendrecv") ? 1 : 2 / 3;
      if (algbw > 0.01 && (busbw < algbw * f * 0.98 - 0.002 || busbw > algbw * f * 1.02 + 0.002)) bad = 1; rows++ }
      END { exit bad || rows < 3 }' "$tmp/$coll.out" ||
    fail "--coll $coll: busbw is not algbw times nccl-tests' factor"
done

# -d all and -N 2 at one rank (no launcher): 10 types x 2 cycles x 1 size.
"$perf" -b 1K -e 1K -d all -N 2 -n 1 -w 0 -a 0 >"$tmp/types.out" 2>&1 ||
  fail "-d all -N 2 failed: $(tail -3 "$tmp/types.out")"
n=$(grep -Ec '^ +1024 ' "$tmp/types.out")
[ "$n" -eq 20 ] || fail "-d all -N 2 printed $n rows, expected 20"
grep -q 'time rank0 over ranks (-a 0)' "$tmp/types.out" || fail "header does not say -a 0"
# The type column holds nccl-tests' names (test_typenames in its src/common.cu).
types=$(awk '$1 == 1024 {print $3}' "$tmp/types.out" | sort -u | paste -sd' ' -)
[ "$types" = "bfloat16 double float half int32 int64 int8 uint32 uint64 uint8" ] ||
  fail "-d all: type names are not nccl-tests': $types"
grep -q 'non-blocking mode (-z 0)' "$tmp/types.out" ||
  fail "the default should be nccl-tests' -z 0 (non-blocking)"

# -o mulsum (nccl-tests' pre-multiplied sum), checked against the local
# reference, for the two reductions without a root and with one.
for coll in allreduce reduce_scatter reduce; do
  "$run" --nproc-per-node 3 --master-port 0 "$perf" --coll $coll -o mulsum -d all \
    -b 24 -e 3K -f 8 -c 1 -n 1 -w 0 >"$tmp/mulsum.out" 2>&1 ||
    fail "-o mulsum --coll $coll failed: $(tail -5 "$tmp/mulsum.out")"
  grep -q 'Out of bounds values : 0 OK' "$tmp/mulsum.out" ||
    fail "-o mulsum --coll $coll: results not checked OK: $(tail -5 "$tmp/mulsum.out")"
  [ "$(grep -Ec '^\[rank 0\] +[0-9]+ +[0-9]+ +[a-z0-9]+ +mulsum ' "$tmp/mulsum.out")" -eq 30 ] ||
    fail "-o mulsum --coll $coll: expected 30 mulsum rows (10 types x 3 sizes)"
done

# -C 1 reports the time to issue the calls (header "cputime"); -R and -y are
# accepted and said to change nothing; -G 0 is accepted.
"$perf" -b 1K -e 1K -n 2 -w 0 -C 1 -R 1 -y 1 -G 0 >"$tmp/flags.out" 2>&1 ||
  fail "-C 1 -R 1 -y 1 -G 0 failed: $(tail -3 "$tmp/flags.out")"
grep -Eq '^# +size .* cputime .* cputime ' "$tmp/flags.out" || fail "-C 1: header does not say cputime"
grep -q 'report_cputime 1' "$tmp/flags.out" || fail "-C 1: header does not say report_cputime 1"
grep -q '^# -R 1: no-op' "$tmp/flags.out" || fail "-R 1 is not said to be a no-op"
grep -q '^# -y 1: no-op' "$tmp/flags.out" || fail "-y 1 is not said to be a no-op"
[ "$(grep -Ec '^ +1024 ' "$tmp/flags.out")" -eq 1 ] || fail "-C 1 printed no row"
# -G N > 0: CUDA graph capture cannot hold xcoll's host work; refused.
"$perf" -G 4 >"$tmp/graph.out" 2>&1
[ $? -eq 2 ] || fail "-G 4 is not refused with exit 2"
grep -q -- '-G 4 needs' "$tmp/graph.out" || fail "-G 4: unclear refusal: $(cat "$tmp/graph.out")"

# Refused clearly, before any communicator: -g/-t other than 1, bad -a.
for bad in "-g 2" "-t 4" "--ngpus 8"; do
  # shellcheck disable=SC2086
  "$perf" $bad >"$tmp/bad.out" 2>&1
  code=$?
  [ $code -eq 2 ] || fail "xcoll-perf $bad exits $code, expected 2"
  grep -q 'one rank per process' "$tmp/bad.out" || fail "xcoll-perf $bad: unclear message: $(cat "$tmp/bad.out")"
  grep -q 'nproc-per-node' "$tmp/bad.out" || fail "xcoll-perf $bad does not say how to run N ranks"
done
for bad in "-a 4" "-z 3" "-m 0" "-N -1" "-T x" "-C 2" "-R 3" "-y 2" "-G x"; do
  # shellcheck disable=SC2086
  "$perf" $bad >/dev/null 2>&1
  [ $? -eq 2 ] || fail "xcoll-perf $bad is not refused (exit 2)"
done

[ $failures -eq 0 ] && echo "PASS: xcoll-perf takes nccl-tests command lines"
[ $failures -eq 0 ]
