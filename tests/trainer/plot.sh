#!/bin/sh
# plot.sh XTRAIN PLOT DATA_DIR: a short xtrain run with --log-json, drawn by
# trainer/plot.sh; the PNG must be a PNG of the size plot.sh asks for, and a
# missing log must fail with a message naming it.
set -eu
xtrain=$1 plot=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 60 "$xtrain" --data-dir "$data" --model mlp --epochs 2 --train-limit 1920 \
  --test-limit 200 --batch-size 32 --schedule cosine --log-every 10 \
  --log-json "$tmp/log.json" > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
sh "$plot" "$tmp/log.json" "$tmp/plot.png" > "$tmp/plot.log" 2>&1 ||
  { cat "$tmp/plot.log"; exit 1; }
python3 - "$tmp/plot.png" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", data[16:24])
assert (width, height) == (1500, 450), (width, height)
assert len(data) > 20000, f"only {len(data)} bytes: empty panels?"
PY
# The default --log-every 0 writes epoch events only: the lr panel has no
# data and must say so rather than fail (gnuplot: "all points y value
# undefined"); a log cut before its first epoch ended has step events only.
timeout 60 "$xtrain" --data-dir "$data" --model mlp --epochs 1 --train-limit 960 \
  --test-limit 200 --batch-size 32 \
  --log-json "$tmp/epochs.json" > "$tmp/run0.log" 2>&1 || { cat "$tmp/run0.log"; exit 1; }
if grep -q '"event": *"step"' "$tmp/epochs.json"; then
  echo "the default --log-every wrote step events: this case tests nothing"; exit 1
fi
grep '"event": *"step"' "$tmp/log.json" > "$tmp/steps.json"
for case in epochs steps; do
  sh "$plot" "$tmp/$case.json" "$tmp/$case.png" > "$tmp/plot.log" 2>&1 ||
    { echo "plot.sh fails on a log with $case events only:"; cat "$tmp/plot.log"; exit 1; }
  python3 - "$tmp/$case.png" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
assert struct.unpack(">II", data[16:24]) == (1500, 450)
PY
done

if sh "$plot" "$tmp/missing.json" "$tmp/x.png" > "$tmp/missing.log" 2>&1; then
  echo "plot.sh succeeded without a log"; exit 1
fi
grep -q "no log at '$tmp/missing.json'" "$tmp/missing.log" ||
  { echo "unclear message:"; cat "$tmp/missing.log"; exit 1; }
[ ! -e "$tmp/x.png" ] || { echo "a PNG was written without a log"; exit 1; }
echo "plot.sh: ok"
