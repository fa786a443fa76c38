#!/bin/sh
# trace.sh XTRAIN XCOLLRUN MERGE: a 2-rank DDP run with xtrain --trace and
# XCOLL_TRACE, merged by xcoll-trace-merge, checked by check_trace.py.
set -eu
xtrain=$1 xcollrun=$2 merge=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
XCOLL_TRACE="$tmp/xcoll.%r.json" timeout 50 "$xcollrun" --nproc-per-node 2 \
  --master-port 0 "$xtrain" --strategy ddp --model mlp --epochs 1 \
  --max-steps 6 --train-limit 960 --test-limit 200 --batch-size 16 \
  --trace "$tmp/xtrain.json" > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
for r in 0 1; do
  [ -s "$tmp/xtrain.rank$r.json" ] || { echo "no $tmp/xtrain.rank$r.json"; ls "$tmp"; exit 1; }
done
python3 "$merge" -o "$tmp/merged.json" "$tmp"/xtrain.rank*.json "$tmp"/xcoll.*.json \
  2> "$tmp/merge.err" || { cat "$tmp/merge.err"; exit 1; }
python3 "$here/check_trace.py" 6 2 "$tmp/merged.json"
