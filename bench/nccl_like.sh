#!/bin/sh
# nccl_like.sh - nccl_like (SIMPLE and LL) against tcp with xcoll-perf,
# allreduce float32 sum, at P=2 and P=4 ranks on this host:
#   latency rows 8 B .. 4 KiB: time (us) and the ratio nccl_like / tcp
#     (target from the issue: LL <= 1.0x tcp)
#   bandwidth rows 1 MiB .. 16 MiB: busbw (GB/s) and the ratio nccl_like / tcp
#     (target: >= 0.8x tcp)
# Usage: bench/nccl_like.sh [BUILD_DIR] (default build). Env: ITERS (timed
# iterations per size, default 50 for latency, 10 for bandwidth), NPROCS
# (default "2 4"). Run on an otherwise idle machine: every rank has several
# threads (a worker per channel, a proxy) that spin while a collective runs.
set -eu
build=${1:-build}
run=$build/tools/xcollrun
perf=$build/tools/xcoll-perf
[ -x "$run" ] && [ -x "$perf" ] || { echo "build $build first (cmake --build $build)"; exit 1; }
iters_lat=${ITERS:-50}
iters_bw=${ITERS:-10}
nprocs=${NPROCS:-"2 4"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# measure NAME NP ARGS...: rank 0's rows "size time_us busbw" into $tmp/NAME.NP.*
measure() {
  name=$1 np=$2 kind=$3
  shift 3
  env "$@" XCOLL_TIMEOUT_S=120 "$run" --nproc-per-node "$np" --master-port 0 \
    "$perf" $args -z 1 -a 3 -c 1 2>/dev/null |
    awk '/^\[rank 0\] +[0-9]/ { print $3, $8, $10 }' >"$tmp/$name.$np.$kind"
}

for np in $nprocs; do
  for kind in lat bw; do
    if [ $kind = lat ]; then
      args="-b 8 -e 4096 -f 8 -n $iters_lat -w 10"
    else
      args="-b 1M -e 16M -f 4 -n $iters_bw -w 3"
    fi
    measure tcp "$np" $kind XCOLL_BACKEND=tcp
    measure simple "$np" $kind XCOLL_BACKEND=nccl_like XCOLL_PROTO=simple
    measure ll "$np" $kind XCOLL_BACKEND=nccl_like XCOLL_PROTO=ll
  done
done

for np in $nprocs; do
  echo "## P=$np: latency, allreduce float32 (time in us, ratio = nccl_like / tcp; target LL <= 1.00)"
  printf '%10s %10s %10s %10s %8s %8s\n' bytes tcp simple ll simple/tcp ll/tcp
  paste "$tmp/tcp.$np.lat" "$tmp/simple.$np.lat" "$tmp/ll.$np.lat" |
    awk '{ printf "%10d %10.1f %10.1f %10.1f %8.2f %8.2f\n", $1, $2, $5, $8, $5/$2, $8/$2 }'
  echo "## P=$np: bus bandwidth, allreduce float32 (GB/s, ratio = nccl_like / tcp; target >= 0.80)"
  printf '%10s %10s %10s %10s %8s %8s\n' bytes tcp simple ll simple/tcp ll/tcp
  paste "$tmp/tcp.$np.bw" "$tmp/simple.$np.bw" "$tmp/ll.$np.bw" |
    awk '{ printf "%10d %10.3f %10.3f %10.3f %8.2f %8.2f\n", $1, $3, $6, $9, $6/$3, $9/$3 }'
done
