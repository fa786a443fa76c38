#!/bin/sh
# train.sh - training throughput of xtrain (DDP over xcoll) against PyTorch
# DDP with the gloo backend, same model (the MLP, the CNN or both), per-rank
# batch and one thread per rank, for 1, 2 and 4 ranks, in one run. REPEATS
# rounds, interleaved (each round runs xtrain then torch for every model at
# every world size), so that a change in the machine's load hits both sides
# alike. Each run's parameter count is checked to be the same on both sides.
# Prints, per model and world size, the median samples/s of each with the
# range over the rounds, and the median and range of the per-round ratio
# xtrain / torch; under each model's lead line, the parameter count and
# PyTorch's loss at its first and last update of the first round.
#
# usage: bench/train.sh [BUILD_DIR]     (default: build)
# env:   MODELS ("mlp cnn"), BATCH (64), STEPS (300), RANKS ("1 2 4"),
#        REPEATS (5), PYTHON, BENCH_DIR, BENCH_ROUND (bench/lib/common.sh;
#        PYTHON needs torch)
# Exit status 77 when PYTHON cannot import torch.
set -eu
bench=train.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
bench_setup "${1:-build}"
models=${MODELS:-"mlp cnn"}
# shellcheck disable=SC2086
models=$(echo $models) # one line, single spaces
for model in $models; do
  case $model in
    mlp | cnn) ;;
    *) bench_fail "unknown model '$model' in MODELS (mlp, cnn)" ;;
  esac
done
[ -n "$models" ] || bench_fail "MODELS is empty: give mlp, cnn or both"
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
  for model in $models; do
    for w in $ranks; do
      run=$model.$w.$round
      # 20 warmup updates are not timed by torch_train.py; xtrain times every
      # update, so it runs 20 more and its figure includes them (a small bias
      # against xtrain).
      "$xcollrun" --nproc-per-node "$w" --master-port 0 \
        "$xtrain" --strategy ddp --model "$model" --batch-size "$batch" --threads 1 \
        --epochs 100 --max-steps $((steps + 20)) --test-limit 1000 \
        --log-json "$tmp/x.$run.json" > "$tmp/x.$run.log" 2>&1 ||
        { cat "$tmp/x.$run.log"; bench_fail "xtrain --model $model at $w rank(s) failed"; }
      echo "$model $w $round xtrain $(field "$tmp/x.$run.json" samples_per_s)" >> "$tmp/results"
      "$python" "$here/torch_train.py" --model "$model" --world-size "$w" \
        --batch-size "$batch" --steps "$steps" --threads 1 > "$tmp/t.$run.json" 2> "$tmp/t.$run.err" ||
        { cat "$tmp/t.$run.err"; bench_fail "torch_train.py --model $model at $w rank(s) failed"; }
      echo "$model $w $round torch $(field "$tmp/t.$run.json" samples_per_s)" >> "$tmp/results"
      # The same model on both sides: xtrain's "xtrain: MODEL, N parameters".
      xp=$(sed -n "s/.*xtrain: $model, \([0-9]*\) parameters,.*/\1/p" "$tmp/x.$run.log" | head -n 1)
      tp=$(field "$tmp/t.$run.json" parameters)
      [ -n "$xp" ] && [ "$xp" = "$tp" ] ||
        bench_fail "--model $model: xtrain has '$xp' parameters, torch_train.py $tp"
    done
  done
  bench_round_end "$round" "$repeats"
done
bench_table_wanted || exit 0

bench_command "MODELS=$models" "BATCH=$batch" "STEPS=$steps" "RANKS=$ranks" \
  "REPEATS=$repeats" "PYTHON=$python"
bench_loads "$repeats"
first=${ranks%% *}
for model in $models; do
  t1=$tmp/t.$model.$first.1.json
  [ -f "$t1" ] || bench_fail "--model $model has not run in round 1 (no $t1)"
  echo
  echo "model $model, per-rank batch $batch, $steps updates, 1 thread per rank, tcp backend," \
    "$cores cores; PyTorch $(field "$t1" torch); median of $repeats interleaved round(s);" \
    "$(field "$t1" parameters) parameters on both sides; PyTorch's loss at $first rank(s)," \
    "round 1: $(printf '%.3f' "$(field "$t1" first_loss)") at the first update," \
    "$(printf '%.3f' "$(field "$t1" loss)") at the last"
  echo
  "$python" - "$tmp/results" "$repeats" "$model" <<'PY'
import statistics, sys
repeats, model = int(sys.argv[2]), sys.argv[3]
rows = [line.split() for line in open(sys.argv[1])]
runs = {}
for m, w, rnd, who, sps in rows:
    if m == model and int(rnd) <= repeats:
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
done
