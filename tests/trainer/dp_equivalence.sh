#!/bin/sh
# dp_equivalence.sh XTRAIN COMPARE
# --strategy dp (one process, N replica threads, the batch scattered over
# them) with N = 2, 3, 4, and with 3 replicas under --grad-accum 2, must
# give the parameters of one process with the same batch after 10 SGD
# updates, within 1e-5 (relative L2; measured about 2e-8).
set -eu
xtrain=$1 compare=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--model mlp --epochs 1 --max-steps 10 --train-limit 960 \
  --test-limit 200 --seed 3 --weight-decay 0.01 --momentum 0.9 --nesterov"
"$xtrain" --strategy none --batch-size 64 $common --dump-params "$tmp/one" > "$tmp/one.log"
for d in 2 3 4; do
  "$xtrain" --strategy dp --dp-devices $d --batch-size 64 $common \
    --dump-params "$tmp/dp$d" > "$tmp/dp$d.log" || { cat "$tmp/dp$d.log"; exit 1; }
  grep -q "^dp: $d replicas" "$tmp/dp$d.log"
done
"$xtrain" --strategy dp --dp-devices 3 --batch-size 32 --grad-accum 2 $common \
  --dump-params "$tmp/accum" > "$tmp/accum.log" || { cat "$tmp/accum.log"; exit 1; }
"$compare" 1e-5 "$tmp/one.rank0" "$tmp/dp2.rank0" "$tmp/dp3.rank0" \
  "$tmp/dp4.rank0" "$tmp/accum.rank0"
