#!/bin/sh
# fsdp.sh - per-rank memory, step time and hidden communication of xtrain's
# DDP and FSDP strategies side by side, in one run, on the same MLP, batch
# and number of ranks. Memory is xtrain's own accounting: the parameters,
# gradients and optimizer state a rank holds for the whole run, and the
# most bytes of gathered parameters and unsharded gradients it held at once;
# RSS is rank 0's peak resident set (VmHWM), mostly the data set.
# Each variant runs REPEAT times, the variants taking turns, and the table
# gives the median of each figure with the range over the rounds, so that
# load from other jobs on a shared machine falls on every variant alike.
#
# usage: bench/fsdp.sh [BUILD_DIR]    (default: build)
# env:   RANKS (4), BATCH (64 per rank), STEPS (100), REPEAT (3),
#        OPTIMIZER (adamw), VARIANTS (the strategy flags of each row,
#        separated by ';'), PYTHON, BENCH_DIR, BENCH_ROUND
#        (bench/lib/common.sh; any python3 reads the figures)
set -eu
bench=fsdp.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
bench_setup "${1:-build}"
ranks=${RANKS:-4}
batch=${BATCH:-64}
steps=${STEPS:-100}
repeat=${REPEAT:-3}
optimizer=${OPTIMIZER:-adamw}
variants=${VARIANTS:-"ddp;fsdp --sharding full_shard;fsdp --sharding shard_grad_op;fsdp --sharding full_shard --backward-prefetch none;fsdp --sharding full_shard --forward-prefetch on"}

bench_rounds "$repeat"
for round in $rounds; do
  bench_round_begin "$round"
  i=0
  echo "$variants" | tr ';' '\n' | while read -r v; do
    i=$((i + 1))
    echo "$v" > "$tmp/$i.name"
    # shellcheck disable=SC2086
    "$xcollrun" --nproc-per-node "$ranks" --master-port 0 \
      "$xtrain" --strategy $v --model mlp --optimizer "$optimizer" \
      --batch-size "$batch" --threads 1 --epochs 100 --max-steps "$steps" \
      --test-limit 1000 --log-json "$tmp/$i.$round.json" > "$tmp/$i.$round.log" 2>&1 ||
      { cat "$tmp/$i.$round.log"; bench_fail "--strategy $v failed"; }
  done
  bench_round_end "$round" "$repeat"
done
bench_table_wanted || exit 0

bench_command "RANKS=$ranks" "BATCH=$batch" "STEPS=$steps" "REPEAT=$repeat" \
  "OPTIMIZER=$optimizer" "VARIANTS=$variants"
echo "model mlp, $ranks ranks, per-rank batch $batch, $optimizer, $steps updates," \
  "1 thread per rank, XCOLL_BACKEND ${XCOLL_BACKEND:-tcp}, $cores cores;" \
  "median of $repeat interleaved round(s)"
bench_loads "$repeat"
echo
"$python" - "$tmp" "$repeat" <<'PY'
import json, os, re, statistics, sys
tmp, repeat = sys.argv[1], int(sys.argv[2])

def cell(values, fmt):
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return (fmt + " (" + fmt + "-" + fmt + ")").format(med, min(values), max(values))

print("| strategy | held B/rank | peak gathered B | peak RSS MiB (rank 0) | step ms "
      "| samples/s | comm ms/step | hidden |")
print("|---|---|---|---|---|---|---|---|")
i = 1
while os.path.exists("%s/%d.name" % (tmp, i)):
    runs, held = [], []
    for r in range(1, repeat + 1):
        path = "%s/%d.%d" % (tmp, i, r)
        runs.append([json.loads(l) for l in open(path + ".json") if '"summary"' in l][-1])
        held += [int(b) for b in re.findall(r"memory: rank \d+ holds (\d+) bytes",
                                            open(path + ".log", errors="replace").read())]
    fig = lambda f, fmt: cell([f(s) for s in runs], fmt)
    print("| %s | {:,} | %s | %s | %s | %s | %s | %s |".format(max(held)) % (
        open("%s/%d.name" % (tmp, i)).read().strip(),
        fig(lambda s: s["peak_gathered_bytes"], "{:,.0f}"),
        fig(lambda s: s["peak_rss_bytes"] / 2**20, "{:.1f}"),
        fig(lambda s: 1e3 * s["train_time_s"] / s["step"], "{:.2f}"),
        fig(lambda s: s["samples_per_s"], "{:.0f}"),
        fig(lambda s: 1e3 * s["comm_time_s"] / s["step"], "{:.2f}"),
        fig(lambda s: 100 * s["overlap"], "{:.0f}%")))
    i += 1
PY
