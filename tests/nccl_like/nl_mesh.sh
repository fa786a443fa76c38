#!/usr/bin/env bash
# nl_mesh.sh - run a program under xcollrun at XCOLL_DEBUG=INFO; it must
# pass, and every rank must print one INFO line per mesh link it sends on
# (channel.c: alloc_mesh), "mesh R -> S via WANT", for each of the NP-1
# other ranks S, and none with another carrier: the mesh between ranks of
# one host goes through shm (transport/shm.c), or with
# XCOLL_SHM_DISABLE=1 through the net plugin.
#   nl_mesh.sh WANT XCOLLRUN NP PROGRAM [ARGS...]
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
grep -oE "mesh [0-9]+ -> [0-9]+ via [A-Z]+" "$tmp/err" "$tmp/out" |
  sed 's/^[^:]*://' | sort -u > "$tmp/lines"
missing=0
for ((r = 0; r < np; r++)); do
  for ((s = 0; s < np; s++)); do
    [ "$r" -eq "$s" ] && continue
    if ! grep -qx "mesh $r -> $s via $want" "$tmp/lines"; then
      echo "missing: mesh $r -> $s via $want"
      missing=1
    fi
  done
done
others=$(grep -cv " via $want\$" "$tmp/lines")
if [ "$missing" -ne 0 ] || [ "$others" -ne 0 ]; then
  cat "$tmp/lines"
  echo "FAIL: every mesh link of the $np ranks should go via $want"
  exit 1
fi
echo "ok: the $((np * (np - 1))) mesh links of $np ranks go via $want"
