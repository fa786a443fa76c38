#!/bin/sh
# fsdp.sh - per-rank memory, step time and hidden communication of xtrain's
# DDP and FSDP strategies side by side, in one run, on the same MLP, batch
# and number of ranks. Memory is xtrain's own accounting: the parameters,
# gradients and optimizer state a rank holds for the whole run, and the
# most bytes of gathered parameters and unsharded gradients it held at once;
# RSS is rank 0's peak resident set (VmHWM), mostly the data set.
# Each variant runs REPEAT times, the variants taking turns, and the table
# gives the median of each figure, so that load from other jobs on a shared
# machine falls on every variant alike.
#
# usage: bench/fsdp.sh [BUILD_DIR]    (default: build)
# env:   RANKS (4), BATCH (64 per rank), STEPS (100), REPEAT (3),
#        OPTIMIZER (adamw), VARIANTS (the strategy flags of each row,
#        separated by ';')
set -eu
build=${1:-build}
ranks=${RANKS:-4}
batch=${BATCH:-64}
steps=${STEPS:-100}
repeat=${REPEAT:-3}
optimizer=${OPTIMIZER:-adamw}
variants=${VARIANTS:-"ddp;fsdp --sharding full_shard;fsdp --sharding shard_grad_op;fsdp --sharding full_shard --backward-prefetch none;fsdp --sharding full_shard --forward-prefetch on"}
xtrain=$build/trainer/xtrain
xcollrun=$build/tools/xcollrun
for f in "$xtrain" "$xcollrun"; do
  [ -x "$f" ] || { echo "fsdp.sh: $f not found: build first (cmake --build $build)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "model mlp, $ranks ranks, per-rank batch $batch, $optimizer, $steps updates, 1 thread per rank, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), median of $repeat"
rep=0
while [ $rep -lt "$repeat" ]; do
  rep=$((rep + 1))
  i=0
  echo "$variants" | tr ';' '\n' | while read -r v; do
    i=$((i + 1))
    echo "$v" > "$tmp/$i.name"
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 "$xcollrun" --nproc-per-node "$ranks" --master-port 0 \
      "$xtrain" --strategy $v --model mlp --optimizer "$optimizer" \
      --batch-size "$batch" --threads 1 --epochs 100 --max-steps "$steps" \
      --test-limit 1000 --log-json "$tmp/$i.$rep.json" > "$tmp/$i.log" 2>&1 \
      || { cat "$tmp/$i.log"; exit 1; }
    sed -n 's/.*memory: rank [0-9]* holds \([0-9]*\) bytes.*/\1/p' "$tmp/$i.log" |
      sort -n | tail -n 1 > "$tmp/$i.held"
  done
done
echo "load $(cut -d' ' -f1 /proc/loadavg) at the end"
python3 - "$tmp" <<'PY'
import glob, json, os, statistics, sys
tmp = sys.argv[1]
print("%-55s %11s %12s %8s %8s %9s %8s %6s" % ("strategy", "held B/rank",
      "peak gath B", "RSS MiB", "step ms", "samples/s", "comm ms", "hidden"))
i = 1
while os.path.exists("%s/%d.name" % (tmp, i)):
    runs = []
    for path in sorted(glob.glob("%s/%d.*.json" % (tmp, i))):
        runs.append([json.loads(l) for l in open(path) if '"summary"' in l][-1])
    med = lambda f: statistics.median(f(s) for s in runs)
    print("%-55s %11s %12d %8.1f %8.2f %9.0f %8.2f %5.0f%%" % (
        open("%s/%d.name" % (tmp, i)).read().strip(),
        open("%s/%d.held" % (tmp, i)).read().strip(),
        med(lambda s: s["peak_gathered_bytes"]),
        med(lambda s: s["peak_rss_bytes"]) / 2**20,
        med(lambda s: 1e3 * s["train_time_s"] / s["step"]),
        med(lambda s: s["samples_per_s"]),
        med(lambda s: 1e3 * s["comm_time_s"] / s["step"]),
        100 * med(lambda s: s["overlap"])))
    i += 1
PY
