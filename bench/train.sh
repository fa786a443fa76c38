#!/bin/sh
# train.sh - training throughput of xtrain (DDP over xcoll) against PyTorch
# DDP with the gloo backend, same MLP, per-rank batch and one thread per rank,
# for 1, 2 and 4 ranks, in one run. REPEATS rounds, interleaved (each round
# runs xtrain then torch at every world size), so that a change in the
# machine's load hits both sides alike. Prints, per world size, the median
# samples/s of each with the range over the rounds, and the median and range
# of the per-round ratio xtrain / torch.
#
# usage: bench/train.sh [BUILD_DIR]     (default: build)
# env:   BATCH (64), STEPS (300), RANKS ("1 2 4"), REPEATS (5), PYTHON,
#        BENCH_DIR, BENCH_ROUND (bench/lib/common.sh; PYTHON needs torch)
# Exit status 77 when PYTHON cannot import torch.
set -eu
bench=train.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
bench_setup "${1:-build}"
batch=${BATCH:-64}
steps=${STEPS:-300}
ranks=${RANKS:-"1 2 4"}
# shellcheck disable=SC2086
ranks=$(echo $ranks) # one line, single spaces
repeats=${REPEATS:-5}
bench_need_python "import torch" "import torch (the PyTorch side)"

field() { # field FILE KEY: KEY of the last line of a JSON-lines file
  "$python" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}

bench_rounds "$repeats"
for round in $rounds; do
  bench_round_begin "$round"
  for w in $ranks; do
    # 20 warmup updates are not timed by torch_train.py; xtrain times every
    # update, so it runs 20 more and its figure includes them (a small bias
    # against xtrain).
    "$xcollrun" --nproc-per-node "$w" --master-port 0 \
      "$xtrain" --strategy ddp --model mlp --batch-size "$batch" --threads 1 \
      --epochs 100 --max-steps $((steps + 20)) --test-limit 1000 \
      --log-json "$tmp/x$w.json" > "$tmp/x$w.log" 2>&1 ||
      { cat "$tmp/x$w.log"; bench_fail "xtrain at $w rank(s) failed"; }
    echo "$w $round xtrain $(field "$tmp/x$w.json" samples_per_s)" >> "$tmp/results"
    "$python" "$here/torch_train.py" --world-size "$w" \
      --batch-size "$batch" --steps "$steps" --threads 1 > "$tmp/t$w.json" 2> "$tmp/t$w.err" ||
      { cat "$tmp/t$w.err"; bench_fail "torch_train.py at $w rank(s) failed"; }
    echo "$w $round torch $(field "$tmp/t$w.json" samples_per_s)" >> "$tmp/results"
  done
  bench_round_end "$round" "$repeats"
done
bench_table_wanted || exit 0

bench_command "BATCH=$batch" "STEPS=$steps" "RANKS=$ranks" "REPEATS=$repeats" "PYTHON=$python"
echo "model mlp, per-rank batch $batch, $steps updates, 1 thread per rank, tcp backend," \
  "$cores cores; PyTorch $(field "$tmp/t${ranks%% *}.json" torch);" \
  "median of $repeats interleaved round(s)"
bench_loads "$repeats"
echo
"$python" - "$tmp/results" "$repeats" <<'PY'
import statistics, sys
repeats = int(sys.argv[2])
rows = [line.split() for line in open(sys.argv[1])]
runs = {}
for w, rnd, who, sps in rows:
    if int(rnd) <= repeats:
        runs.setdefault(int(w), {}).setdefault(who, {})[int(rnd)] = float(sps)
print("| ranks | xtrain samples/s, median (range) | torch (gloo) samples/s, median (range) | ratio, median (range) |")
print("|---|---|---|---|")
for w in sorted(runs):
    x, t = runs[w]["xtrain"], runs[w]["torch"]
    ratios = [x[r] / t[r] for r in sorted(x) if r in t]
    cell = lambda v: "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v))
    print("| %d | %s | %s | %.2fx (%.2f-%.2f) |" % (
        w, cell(list(x.values())), cell(list(t.values())),
        statistics.median(ratios), min(ratios), max(ratios)))
PY
