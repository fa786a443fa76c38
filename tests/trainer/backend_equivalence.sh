#!/bin/sh
# backend_equivalence.sh XTRAIN XCOLLRUN COMPARE
# The same 2-rank DDP run (MLP, 10 updates, three buckets) over
# XCOLL_BACKEND=tcp and over XCOLL_BACKEND=ucx must end with bitwise equal
# parameters on every rank: the backend only moves bytes, and both runs pick
# the same algorithms (chosen by message size and world size, not by
# backend), so every sum is done in the same order. A backend that dropped,
# duplicated or misplaced a chunk changes parameters by far more than
# rounding.
set -eu
xtrain=$1 xcollrun=$2 compare=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The first bucket (fc3, 10 KiB) takes the recursive-doubling path and the
# others (fc2, 257 KiB; fc1, 785 KiB) Rabenseifner; a second pair of runs
# forces the ring (XCOLL_ALGO=ring), so every all-reduce algorithm is
# compared across backends.
common="--strategy ddp --model mlp --optimizer sgd --epochs 1 --max-steps 10 \
  --train-limit 960 --test-limit 200 --seed 5 --batch-size 16 \
  --first-bucket-mb 0.01 --bucket-cap-mb 0.2"
status=0
for algo in default ring; do
  for backend in tcp ucx; do
    out=$tmp/$algo.$backend
    if [ $algo = default ]; then
      XCOLL_BACKEND=$backend timeout 50 "$xcollrun" --nproc-per-node 2 \
        --master-port 0 "$xtrain" $common --dump-params "$out" > "$out.log" 2>&1 \
        || { cat "$out.log"; exit 1; }
    else
      XCOLL_BACKEND=$backend XCOLL_ALGO=$algo timeout 50 "$xcollrun" \
        --nproc-per-node 2 --master-port 0 "$xtrain" $common \
        --dump-params "$out" > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
    fi
    grep -q "on backend $backend" "$out.log" ||
      { echo "the run did not report backend $backend:"; cat "$out.log"; exit 1; }
  done
  echo "algorithms $algo: ucx vs tcp, bitwise (limit 0):"
  "$compare" 0 "$tmp/$algo.tcp.rank0" "$tmp/$algo.tcp.rank1" \
    "$tmp/$algo.ucx.rank0" "$tmp/$algo.ucx.rank1" || status=1
done
exit $status
