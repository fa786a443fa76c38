#!/bin/sh
# ddp_equivalence.sh XTRAIN XCOLLRUN COMPARE N OPTIMIZER RTOL [GRAD_ACCUM]
# N ranks x per-rank batch B (x GRAD_ACCUM micro-batches under no_sync) for
# K updates must give the parameters of one process with batch N*B*GRAD_ACCUM,
# within RTOL (relative to the largest parameter), and every rank must end
# with bitwise identical parameters.
set -eu
xtrain=$1 xcollrun=$2 compare=$3 n=$4 optimizer=$5 rtol=$6 accum=${7:-1}
b=16
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 960 samples: divisible by N*B*accum for N = 2, 3, 4 and accum 1, 2, so no
# padding or partial batch differs between the runs.
common="--model mlp --optimizer $optimizer --epochs 1 --max-steps 10 \
  --train-limit 960 --test-limit 200 --seed 3 --weight-decay 0.01 \
  --momentum 0.9 --nesterov --first-bucket-mb 0.01 --bucket-cap-mb 0.2"
big=$((n * b * accum))
"$xtrain" --strategy none --batch-size $big $common \
  --dump-params "$tmp/single" > "$tmp/single.log"
timeout 50 "$xcollrun" --nproc-per-node "$n" --master-port 0 "$xtrain" \
  --strategy ddp --batch-size $b --grad-accum "$accum" $common \
  --dump-params "$tmp/ddp" > "$tmp/ddp.log" 2>&1 || { cat "$tmp/ddp.log"; exit 1; }
files=""
r=0
while [ $r -lt "$n" ]; do files="$files $tmp/ddp.rank$r"; r=$((r + 1)); done
echo "all ranks identical:"
"$compare" 0 "$tmp/ddp.rank0" $files
echo "ddp ($n x $b x accum $accum) vs one process (batch $big):"
"$compare" "$rtol" "$tmp/single.rank0" "$tmp/ddp.rank0"
