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
. "$(dirname "$0")/common.sh"
nl_run_info "$xcollrun" "$np" "$@"
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
