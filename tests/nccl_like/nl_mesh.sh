#!/usr/bin/env bash
# nl_mesh.sh - run a program under xcollrun at XCOLL_DEBUG=INFO; it must
# pass, and every rank must print one INFO line per mesh link it sends on
# (channel.c: alloc_mesh), "mesh R -> S via WANT", for each of the NP-1
# other ranks S, and none with another carrier: the mesh between ranks of
# one host goes through shm (transport/shm.c), or with
# XCOLL_SHM_DISABLE=1 through the net plugin. With NL_MESH_NET_RANK=R in the
# environment only rank R sets XCOLL_SHM_DISABLE=1: the links to and from
# R must go via NET, every other via WANT (a mesh of both carriers).
# With NL_MESH_CMA=on every rank must have received messages with one copy
# (transport/shm.c, CMA: its INFO line "received N mesh message(s) with one
# copy (CMA)" with N > 0 when it frees the mesh), or the run is skipped
# (exit 77) where the kernel refuses process_vm_readv between the ranks;
# with NL_MESH_CMA=off none.
#   nl_mesh.sh WANT XCOLLRUN NP PROGRAM [ARGS...]
set -u
want=$1
xcollrun=$2
np=$3
shift 3
. "$(dirname "$0")/common.sh"
net_rank=${NL_MESH_NET_RANK:--1}
if [ "$net_rank" -ge 0 ]; then
  # xcollrun gives each process its RANK; the one named turns shm off.
  set -- bash -c 'if [ "$RANK" = "$0" ]; then export XCOLL_SHM_DISABLE=1; fi
exec "$@"' "$net_rank" "$@"
fi
nl_run_info "$xcollrun" "$np" "$@"
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
cma=${NL_MESH_CMA:-}
if [ "$cma" = on ] &&
    grep -qE "cannot read rank [0-9]+'s memory" "$tmp/err" "$tmp/out"; then
  grep -ohE "cannot read rank [0-9]+'s memory \(process_vm_readv: [^)]*\)" \
    "$tmp/err" "$tmp/out" | head -n 1
  echo "SKIP: the kernel does not let these ranks read each other's memory" \
    "(process_vm_readv: Yama's ptrace_scope, seccomp), so no single copy"
  exit 77
fi
if [ -n "$cma" ]; then
  grep -ohE "rank [0-9]+ received [0-9]+ mesh message\(s\) with one copy" \
    "$tmp/err" "$tmp/out" | sort -u > "$tmp/cma"
  cat "$tmp/cma"
  for ((r = 0; r < np; r++)); do
    n=$(sed -n "s/^rank $r received \([0-9]*\) .*/\1/p" "$tmp/cma")
    if [ -z "$n" ]; then
      echo "FAIL: rank $r printed no count of the messages it received"
      exit 1
    fi
    if [ "$cma" = on ] && [ "$n" -eq 0 ]; then
      echo "FAIL: rank $r received no message with one copy (CMA)"
      exit 1
    fi
    if [ "$cma" = off ] && [ "$n" -ne 0 ]; then
      echo "FAIL: rank $r received $n message(s) with one copy, CMA off"
      exit 1
    fi
  done
  echo "ok: single copy (CMA) $cma on every rank"
fi
