#!/bin/sh
# resume.sh XTRAIN XCOLLRUN COMPARE [OPTIMIZER]
# Two epochs straight must give bitwise the same parameters as: one epoch,
# checkpoint, resume, one more epoch; and as a run stopped mid-epoch and
# resumed. Also with 2 DDP ranks. Cosine schedule and momentum (or AdamW's
# moments) make the step counter and optimizer state part of what is checked.
set -eu
xtrain=$1 xcollrun=$2 compare=$3 optimizer=${4:-sgd}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--model mlp --optimizer $optimizer --epochs 2 --batch-size 32 \
  --train-limit 640 --test-limit 200 --seed 9 --nesterov \
  --schedule cosine --warmup-steps 4"
# 640 / 32 = 20 updates per epoch.
"$xtrain" $common --checkpoint-dir "$tmp/a" --dump-params "$tmp/straight" > /dev/null
test -s "$tmp/a/checkpoint_latest.safetensors"
test -s "$tmp/a/checkpoint_best.safetensors"

"$xtrain" $common --checkpoint-dir "$tmp/b" --max-steps 20 > /dev/null
"$xtrain" $common --checkpoint-dir "$tmp/b" --resume --dump-params "$tmp/epoch" > "$tmp/b.log"
grep -q "resumed from .*epoch 1, step 20" "$tmp/b.log"
"$compare" 0 "$tmp/straight.rank0" "$tmp/epoch.rank0"

"$xtrain" $common --checkpoint-dir "$tmp/c" --max-steps 7 > /dev/null
"$xtrain" $common --checkpoint-dir "$tmp/c" --resume --max-steps 31 > /dev/null
"$xtrain" $common --checkpoint-dir "$tmp/c" --resume --dump-params "$tmp/mid" > /dev/null
"$compare" 0 "$tmp/straight.rank0" "$tmp/mid.rank0"

# DDP, 2 ranks x 16: the same global batch of 32.
ddp="--strategy ddp --batch-size 16"
timeout 50 "$xcollrun" --nproc-per-node 2 --master-port 0 "$xtrain" $common $ddp \
  --checkpoint-dir "$tmp/d" --dump-params "$tmp/ddp_straight" > "$tmp/d.log" 2>&1 \
  || { cat "$tmp/d.log"; exit 1; }
timeout 50 "$xcollrun" --nproc-per-node 2 --master-port 0 "$xtrain" $common $ddp \
  --checkpoint-dir "$tmp/e" --max-steps 13 > "$tmp/e.log" 2>&1 \
  || { cat "$tmp/e.log"; exit 1; }
timeout 50 "$xcollrun" --nproc-per-node 2 --master-port 0 "$xtrain" $common $ddp \
  --checkpoint-dir "$tmp/e" --resume --dump-params "$tmp/ddp_resumed" > "$tmp/e.log" 2>&1 \
  || { cat "$tmp/e.log"; exit 1; }
"$compare" 0 "$tmp/ddp_straight.rank0" "$tmp/ddp_resumed.rank0" "$tmp/ddp_resumed.rank1"
