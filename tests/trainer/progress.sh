#!/bin/sh
# progress.sh XTRAIN XCOLLRUN DATA_DIR: under xcollrun stdout is a pipe, so
# rank 0 must print progress lines between the epoch lines (every
# --progress-every seconds; 1e-6 makes every step after the first due), with
# the step count and samples/s; --progress-every 0 prints none; rank 1 never.
set -eu
xtrain=$1 xcollrun=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # run OUT PROGRESS_EVERY
  timeout 60 "$xcollrun" --nproc-per-node 2 --master-port 0 "$xtrain" \
    --data-dir "$data" --strategy ddp --model mlp --epochs 1 --train-limit 640 \
    --test-limit 100 --batch-size 16 --progress-every "$2" > "$1" 2>&1 ||
    { cat "$1"; exit 1; }
}
run "$tmp/on" 0.000001
lines=$(grep -c '^\[rank 0\] progress: epoch 0 step [0-9]*/20 ([0-9]*%) loss [0-9.]* (rank 0) samples/s [0-9]*$' "$tmp/on" || true)
[ "$lines" -ge 10 ] || { echo "expected progress lines for most of 20 steps, got $lines:"; cat "$tmp/on"; exit 1; }
first=$(grep -n 'progress:' "$tmp/on" | head -1 | cut -d: -f1)
epoch=$(grep -n '\] epoch 0:' "$tmp/on" | cut -d: -f1)
[ "$first" -lt "$epoch" ] || { echo "progress came after the epoch line"; cat "$tmp/on"; exit 1; }
if grep -q '^\[rank 1\] progress' "$tmp/on"; then echo "rank 1 printed progress"; exit 1; fi
run "$tmp/off" 0
if grep -q 'progress:' "$tmp/off"; then echo "--progress-every 0 still printed progress"; cat "$tmp/off"; exit 1; fi
echo "progress: ok ($lines lines)"
