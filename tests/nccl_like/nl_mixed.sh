#!/usr/bin/env bash
# nl_mixed.sh - a mixed CPU/GPU ring on nccl_like must give a host-only
# ring's results bit for bit (tests/nccl_like/nl_mixed.c). Runs nl_mixed
# twice under xcollrun, host-only ("none") and with GPU_RANKS on CUDA
# devices, and compares every rank's HASH lines.
#   nl_mixed.sh XCOLLRUN NL_MIXED NP GPU_RANKS [--quick]
# The CUDA driver is the real one, or the stand-in when LD_LIBRARY_PATH
# puts tests/fake_cuda first (ctest does). Exit 77 when there is neither.
# NL_MIXED_SECOND_ENV="VAR=value ...": set for the second run only. With
# GPU_RANKS none, that compares two host-only rings: e.g. XCOLL_BRUCK=0
# checks that the Bruck collectives (backends/nccl_like/bruck.c) give the
# gather algorithm's and the ring's bits.
# NL_MIXED_KINDS="allreduce ...": compare only the HASH lines of these
# collectives (e.g. against another backend whose other algorithms reduce
# in another order).
# NL_MIXED_TRANSPORTS="P2P SHM ...": the second run logs at XCOLL_DEBUG=INFO
# and its connections ("channel NN : a -> b via NAME") must use exactly
# these transports (nccl_like's selection: p2p, shm, net).
# NL_MIXED_GREP="EXTENDED REGEX" and NL_MIXED_GREP_COUNT=N: exactly N lines
# of the second run's stderr match it (a warning said once, or never).
set -u
xcollrun=$1
program=$2
np=$3
gpu_ranks=$4
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
second_env=${NL_MIXED_SECOND_ENV:-}
for run in host mixed; do
  ranks=none
  run_env=()
  if [ "$run" = mixed ]; then
    ranks=$gpu_ranks
    read -r -a run_env <<< "$second_env"
    [ -n "${NL_MIXED_TRANSPORTS:-}" ] && run_env+=(XCOLL_DEBUG=INFO)
  fi
  echo "== $np ranks, GPU ranks: $ranks${run_env[*]:+, ${run_env[*]}}"
  if ! env "${run_env[@]}" timeout -k 5 240 "$xcollrun" --nproc-per-node "$np" --master-port 0 \
      "$program" "$ranks" "$@" > "$tmp/$run.out" 2> "$tmp/$run.err"; then
    cat "$tmp/$run.err" "$tmp/$run.out" | tail -n 40
    if grep -q "dlopen libcuda.so.1" "$tmp/$run.err"; then
      echo "SKIP: no CUDA driver (libcuda.so.1)"
      exit 77
    fi
    echo "FAIL: the $run run failed"
    exit 1
  fi
  grep "nl_mixed: rank" "$tmp/$run.out"
  kinds=${NL_MIXED_KINDS:-[a-z_]+}
  kinds=${kinds// /|}
  grep -E "^\[rank [0-9]+\] HASH [0-9]+ ($kinds) " "$tmp/$run.out" | sort \
    > "$tmp/$run.hash"
done
if [ -n "${NL_MIXED_TRANSPORTS:-}" ]; then
  want=$(tr ' ' '\n' <<< "$NL_MIXED_TRANSPORTS" | grep . | sort -u | tr '\n' ' ')
  used=$(grep -oE "channel [0-9]+ : [0-9]+ -> [0-9]+ via [A-Z0-9]+" "$tmp/mixed.err" |
         awk '{print $NF}' | sort -u | tr '\n' ' ')
  grep -hoE "channel [0-9]+ : [0-9]+ -> [0-9]+ via [A-Z0-9]+|nccl_like p2p: .*" \
    "$tmp/mixed.err" | sort -u
  if [ "$used" != "$want" ]; then
    echo "FAIL: the mixed run's connections went via '$used', not '$want'"
    exit 1
  fi
fi
if [ -n "${NL_MIXED_GREP:-}" ]; then
  found=$(grep -cE -- "$NL_MIXED_GREP" "$tmp/mixed.err")
  grep -E -- "$NL_MIXED_GREP" "$tmp/mixed.err"
  if [ "$found" != "${NL_MIXED_GREP_COUNT:-1}" ]; then
    echo "FAIL: $found line(s) of the mixed run match '$NL_MIXED_GREP', not ${NL_MIXED_GREP_COUNT:-1}"
    exit 1
  fi
fi
lines=$(wc -l < "$tmp/host.hash")
if [ "$lines" -eq 0 ]; then
  echo "FAIL: no HASH lines"
  exit 1
fi
what="the host-only and the mixed ring"
[ -n "$second_env" ] && what="the first run and the second ($second_env)"
if ! diff "$tmp/host.hash" "$tmp/mixed.hash" > "$tmp/diff"; then
  head -n 20 "$tmp/diff"
  echo "FAIL: results differ between $what"
  exit 1
fi
echo "ok: $lines results bit-identical between $what"
