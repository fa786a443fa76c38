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
# env:   BATCH (64), STEPS (300), RANKS ("1 2 4"), REPEATS (5), PYTHON
#        (/usr/bin/python3, Debian's python3-torch)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
batch=${BATCH:-64}
steps=${STEPS:-300}
ranks=${RANKS:-"1 2 4"}
repeats=${REPEATS:-5}
python=${PYTHON:-/usr/bin/python3}
xtrain=$build/trainer/xtrain
xcollrun=$build/tools/xcollrun
for f in "$xtrain" "$xcollrun"; do
  [ -x "$f" ] || { echo "train.sh: $f not found: build first (cmake --build $build)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { # field FILE KEY: KEY of the last line of a JSON-lines file
  "$python" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}

echo "model mlp, per-rank batch $batch, $steps updates, 1 thread per rank, $(nproc) cores, $repeats interleaved rounds"
for round in $(seq "$repeats"); do
  for w in $ranks; do
    # 20 warmup updates are not timed by torch_train.py; xtrain times every
    # update, so it runs 20 more and its figure includes them (a small bias
    # against xtrain).
    OPENBLAS_NUM_THREADS=1 "$xcollrun" --nproc-per-node "$w" --master-port 0 \
      "$xtrain" --strategy ddp --model mlp --batch-size "$batch" --threads 1 \
      --epochs 100 --max-steps $((steps + 20)) --test-limit 1000 \
      --log-json "$tmp/x$w.json" > "$tmp/x$w.log" 2>&1 || { cat "$tmp/x$w.log"; exit 1; }
    echo "$w $round xtrain $(field "$tmp/x$w.json" samples_per_s)" >> "$tmp/results"
    OMP_NUM_THREADS=1 "$python" "$here/torch_train.py" --world-size "$w" \
      --batch-size "$batch" --steps "$steps" --threads 1 > "$tmp/t$w.json" 2> "$tmp/t$w.err" \
      || { cat "$tmp/t$w.err"; exit 1; }
    echo "$w $round torch $(field "$tmp/t$w.json" samples_per_s)" >> "$tmp/results"
  done
  echo "round $round of $repeats done" >&2
done
"$python" - "$tmp/results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
runs = {}
for w, rnd, who, sps in rows:
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
