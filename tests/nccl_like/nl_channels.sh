#!/usr/bin/env bash
# nl_channels.sh - run a program under xcollrun at XCOLL_DEBUG=INFO; it must
# pass, and nccl_like's INFO line must say that every rank runs WANT
# channels (nccl_like.c: channels_auto, agree_channels).
#   nl_channels.sh WANT XCOLLRUN NP PROGRAM [ARGS...]
set -u
want=$1
xcollrun=$2
np=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! XCOLL_DEBUG=INFO timeout -k 5 240 "$xcollrun" --nproc-per-node "$np" \
    --master-port 0 "$@" > "$tmp/out" 2> "$tmp/err"; then
  tail -n 40 "$tmp/err" "$tmp/out"
  echo "FAIL: the run failed"
  exit 1
fi
tail -n 5 "$tmp/out"
got=$(grep -oE "nccl_like: [0-9]+ channel\(s\)" "$tmp/err" | sort | uniq -c)
echo "$got"
lines=$(grep -cE "nccl_like: $want channel\(s\)" "$tmp/err")
others=$(grep -E "nccl_like: [0-9]+ channel\(s\)" "$tmp/err" |
         grep -cvE "nccl_like: $want channel\(s\)")
if [ "$lines" -lt "$np" ] || [ "$others" -ne 0 ]; then
  echo "FAIL: every rank should run $want channels"
  exit 1
fi
echo "ok: $np ranks ran $want channels"
