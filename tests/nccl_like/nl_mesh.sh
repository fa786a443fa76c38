#!/usr/bin/env bash
# nl_mesh.sh - run a program under xcollrun at XCOLL_DEBUG=INFO; it must
# pass, and every rank must print one INFO line per mesh link it sends on
# (channel.c: alloc_mesh), "mesh R -> S via WANT", for each of the NP-1
# other ranks S, and none with another carrier: the mesh between ranks of
# one host goes through shm (transport/shm.c), or with
# XCOLL_SHM_DISABLE=1 through the net plugin. With NL_MESH_NET_RANK=R in the
# environment only rank R sets XCOLL_SHM_DISABLE=1: the links to and from
# R must go via NET, every other via WANT (a mesh of both carriers).
#   nl_mesh.sh WANT XCOLLRUN NP PROGRAM [ARGS...]
set -u
want=$1
xcollrun=$2
np=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
net_rank=${NL_MESH_NET_RANK:--1}
if [ "$net_rank" -ge 0 ]; then
  # xcollrun gives each process its RANK; the one named turns shm off.
  set -- bash -c 'if [ "$RANK" = "$0" ]; then export XCOLL_SHM_DISABLE=1; fi
exec "$@"' "$net_rank" "$@"
fi
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
    via=$want
    if [ "$r" -eq "$net_rank" ] || [ "$s" -eq "$net_rank" ]; then
      via=NET
    fi
    echo "mesh $r -> $s via $via" >> "$tmp/want"
    if ! grep -qx "mesh $r -> $s via $via" "$tmp/lines"; then
      echo "missing: mesh $r -> $s via $via"
      missing=1
    fi
  done
done
others=$(grep -cvxF -f "$tmp/want" "$tmp/lines")
if [ "$missing" -ne 0 ] || [ "$others" -ne 0 ]; then
  cat "$tmp/lines"
  echo "FAIL: the mesh links of the $np ranks should go via $want" \
    "(NET to and from rank $net_rank)"
  exit 1
fi
echo "ok: the $((np * (np - 1))) mesh links of $np ranks go via $want" \
  "(NET to and from rank $net_rank)"
