#!/bin/sh
# trace_tracks.sh XCOLLRUN PERF MERGE RANKS CATEGORY...: an xcoll-perf run
# of RANKS ranks with XCOLL_TRACE (backend from XCOLL_BACKEND), merged by
# xcoll-trace-merge, checked by check_tracks.py: every track nests.
set -eu
xcollrun=$1 perf=$2 merge=$3 ranks=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# sizes from 8 B to 1 MiB: one chunk, several pipelined chunks, LL and SIMPLE
XCOLL_TRACE="$tmp/xcoll.%r.json" timeout 100 "$xcollrun" \
  --nproc-per-node "$ranks" --master-port 0 "$perf" -b 8 -e 1M -f 32 -n 4 \
  -w 1 > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
python3 "$merge" -o "$tmp/merged.json" "$tmp"/xcoll.*.json \
  2> "$tmp/merge.err" || { cat "$tmp/merge.err"; exit 1; }
python3 "$here/check_tracks.py" "$tmp/merged.json" "$ranks" "$@"
