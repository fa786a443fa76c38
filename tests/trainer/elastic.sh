#!/bin/sh
# elastic.sh XTRAIN XCOLLRUN DATA_DIR MIN_ACC [KILL_RANK [STORE_HOST]]
# xtrain --elastic: 4 ddp ranks of the mlp under xcollrun --on-rank-failure
# continue; rank KILL_RANK (default 2) is killed with SIGKILL at the start
# of an update in the middle of epoch 1 (XTRAIN_FAULT_STEP). The three
# survivors must shrink and finish every epoch: rank 0's log names the lost
# rank and the new world size 3, every epoch line is there, the last test
# accuracy is at least MIN_ACC, no checkpoint was read (there is none: no
# --checkpoint-dir), xcollrun exits 0 (every rank left exited 0), and the
# survivors' final parameters are bitwise identical.
# STORE_HOST is xcollrun's --store-host (default rank0). With KILL_RANK 0
# and the store in rank 0 the job cannot go on: each survivor must say so
# and fail, and xcollrun exit non-zero, within the timeout. With
# --store-host launcher the store outlives rank 0 and the job goes on; the
# new rank 0 (old rank 1) prints the lines that rank 0 printed before.
set -eu
xtrain=$1 xcollrun=$2 data=$3 min_acc=$4 kill_rank=${5:-2}
store_host=${6:-rank0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
epochs=4
# 60000 / (32 x 4) = 469 updates per epoch on 4 ranks: update 700 is in
# the middle of epoch 1.
kill_step=700
status=0
XTRAIN_FAULT_STEP=$kill_rank:$kill_step timeout 170 "$xcollrun" \
  --nproc-per-node 4 --master-port 0 --on-rank-failure continue \
  --store-host "$store_host" \
  "$xtrain" --model mlp --strategy ddp --data-dir "$data" --epochs $epochs \
  --batch-size 32 --lr 0.05 --schedule cosine --seed 3 --elastic --dump-params "$tmp/params" \
  > "$tmp/log" 2>&1 || status=$?
fail() {
  cat "$tmp/log"
  echo "elastic.sh: $*"
  exit 1
}
if [ "$kill_rank" -eq 0 ] && [ "$store_host" = rank0 ]; then
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
    fail "xcollrun exited $status, expected a failure before the timeout"
  for r in 1 2 3; do
    grep -q "^\[rank $r\] .*--elastic: .* a job that loses rank 0 cannot go on" \
      "$tmp/log" || fail "rank $r did not say why it cannot go on"
  done
  echo "elastic.sh: ok, the loss of rank 0 ends the job (status $status)"
  exit 0
fi
[ "$status" -eq 0 ] || fail "xcollrun exited $status, expected 0"
grep -q "killed at the start of step $kill_step" "$tmp/log" ||
  fail "rank $kill_rank was not killed at step $kill_step"
# The line of rank 0 of the new world: old rank 1 when rank 0 was lost.
first=0
[ "$kill_rank" -ne 0 ] || first=1
grep -q "^\[rank $first\] elastic: lost rank $kill_rank (of 4) at step .* world size 3" \
  "$tmp/log" || fail "no elastic line naming rank $kill_rank and world size 3"
grep -q "resumed from" "$tmp/log" && fail "a checkpoint was read"
for e in $(seq 0 $((epochs - 1))); do
  grep -q "^\[rank [0$first]\] epoch $e: " "$tmp/log" || fail "no line for epoch $e"
done
acc=$(sed -n "s/^\[rank $first\] epoch $((epochs - 1)): .* test_acc \([0-9.]*\) .*/\1/p" "$tmp/log")
awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a >= m) }' ||
  fail "final test accuracy '$acc' is below $min_acc"
# Three survivors, renumbered 0..2: one file each, bitwise the same.
[ ! -e "$tmp/params.rank3" ] || fail "a fourth rank dumped its parameters"
for r in 1 2; do
  cmp "$tmp/params.rank0" "$tmp/params.rank$r" ||
    fail "rank $r's parameters differ from rank 0's"
done
grep "^\[rank $first\] elastic:" "$tmp/log"
echo "elastic.sh: ok, test accuracy $acc"
