#!/bin/sh
# fsdp.sh - per-rank memory, step time and hidden communication of xtrain's
# DDP and FSDP strategies side by side, in one run, on the same MLP, batch
# and number of ranks. Memory is xtrain's own accounting: the parameters,
# gradients and optimizer state a rank holds for the whole run, and the
# most bytes of gathered parameters and unsharded gradients it held at once.
#
# usage: bench/fsdp.sh [BUILD_DIR]    (default: build)
# env:   RANKS (4), BATCH (64 per rank), STEPS (200), OPTIMIZER (adamw),
#        VARIANTS (the strategy flags of each row, separated by ';')
set -eu
build=${1:-build}
ranks=${RANKS:-4}
batch=${BATCH:-64}
steps=${STEPS:-200}
optimizer=${OPTIMIZER:-adamw}
variants=${VARIANTS:-"ddp;fsdp --sharding full_shard;fsdp --sharding shard_grad_op;fsdp --sharding full_shard --backward-prefetch none --forward-prefetch off"}
xtrain=$build/trainer/xtrain
xcollrun=$build/tools/xcollrun
for f in "$xtrain" "$xcollrun"; do
  [ -x "$f" ] || { echo "fsdp.sh: $f not found: build first (cmake --build $build)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "model mlp, $ranks ranks, per-rank batch $batch, $optimizer, $steps updates, 1 thread per rank, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf "%-62s %12s %12s %10s %9s %9s %8s\n" strategy "held B/rank" "peak gath B" "step ms" "samples/s" "comm ms" hidden
i=0
echo "$variants" | tr ';' '\n' | while read -r v; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  OPENBLAS_NUM_THREADS=1 "$xcollrun" --nproc-per-node "$ranks" --master-port 0 \
    "$xtrain" --strategy $v --model mlp --optimizer "$optimizer" \
    --batch-size "$batch" --threads 1 --epochs 100 --max-steps "$steps" \
    --test-limit 1000 --log-json "$tmp/$i.json" > "$tmp/$i.log" 2>&1 \
    || { cat "$tmp/$i.log"; exit 1; }
  held=$(sed -n 's/.*memory: rank [0-9]* holds \([0-9]*\) bytes.*/\1/p' "$tmp/$i.log" | sort -n | tail -n 1)
  python3 - "$tmp/$i.json" "$v" "$held" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
print("%-62s %12s %12d %10.2f %9.0f %9.2f %7.0f%%" % (
    sys.argv[2], sys.argv[3], s["peak_gathered_bytes"],
    1e3 * s["train_time_s"] / s["step"], s["samples_per_s"],
    1e3 * s["comm_time_s"] / s["step"], 100 * s["overlap"]))
PY
done
