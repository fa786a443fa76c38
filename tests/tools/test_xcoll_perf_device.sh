#!/bin/sh
# test_xcoll_perf_device.sh TOOLS_DIR CASE [--quick]: xcoll-perf in device-buffer mode
# with --check, over the CUDA driver that LD_LIBRARY_PATH finds first (ctest
# puts the stand-in, tests/unit/fake_libcuda.c, there: device memory the
# host cannot touch, so a fill or a check that skipped the driver's copies
# would crash). CASE is one of
#   nccl_like  every rank a GPU rank (XCOLL_DEVICE=cuda): the ring kernel
#   mixed      --gpu-ranks 0: one GPU rank, the others host ranks
#   tcp        every rank a GPU rank on tcp: staged through pinned memory
#   queue      2 GPU ranks on nccl_like, 300 non-blocking 8 B allreduces
#              queued before the first wait: more launches than the backend
#              keeps in flight (NL_QUEUE_DEPTH, 64), so launches wait for
#              room while the proxy retires finished kernels (the stand-in
#              aborts if an event is destroyed under a cuEventSynchronize)
#   calls      2 GPU ranks on nccl_like, 200 blocking 8 B allreduces,
#              counting the driver calls (the stand-in's FAKE_CUDA_CALLS):
#              each launch records one event and no event is created or
#              destroyed per launch (gpu_engine.c's pool); the bounds are
#              the launches plus a constant, so 2 records or 1 create per
#              launch fails
# The others run the five collectives at 3 ranks, blocking and not; each must
# report "Out of bounds values : 0 OK", exit 0, and say how many ranks had
# device buffers. --quick (sanitizer builds): allreduce and allgather,
# non-blocking only, up to 32 KiB.
set -u
tools=$1
case_name=$2
quick=${3:-}
colls="allreduce allgather reduce_scatter broadcast reduce"
modes="0 1"
maxbytes=1M
if [ "$quick" = --quick ]; then
  colls="allreduce allgather"
  modes=0
  maxbytes=32K
fi
perf=$tools/xcoll-perf
run=$tools/xcollrun
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
np=3
sizes="-b 8 -e $maxbytes -f 32"
iters="-n 3 -w 1"
case $case_name in
nccl_like) backend=nccl_like; device=cuda; extra=""; device_ranks=3 ;;
queue)
  backend=nccl_like; device=cuda; extra=""; np=2; device_ranks=2
  colls=allreduce; modes=0; sizes="-b 8 -e 8"; iters="-n 300 -w 0" ;;
calls)
  backend=nccl_like; device=cuda; extra=""; np=2; device_ranks=2
  colls=allreduce; modes=1; sizes="-b 8 -e 8"; iters="-n 200 -w 0"
  FAKE_CUDA_CALLS=$tmp/calls; export FAKE_CUDA_CALLS ;;
mixed) backend=nccl_like; device=host; extra="--gpu-ranks 0"; device_ranks=1 ;;
tcp) backend=tcp; device=cuda; extra=""; device_ranks=3 ;;
*) echo "unknown case $case_name"; exit 2 ;;
esac
for coll in $colls; do
  for blocking in $modes; do
    out=$tmp/$coll.$blocking.out
    # Sizes from 8 B (nccl_like's LL protocol) to 1 MiB (SIMPLE, several
    # slots per channel; 32 KiB with --quick); -c 2: two checked
    # operations per half-row.
    # shellcheck disable=SC2086 # $extra, $sizes and $iters are words
    if ! XCOLL_BACKEND=$backend XCOLL_DEVICE=$device timeout -k 5 100 \
        "$run" --nproc-per-node $np --master-port 0 "$perf" $sizes \
        $iters -c 2 -z $blocking -r 1 --coll $coll $extra >"$out" 2>&1; then
      fail "$coll -z $blocking exited non-zero: $(tail -n 5 "$out")"
      continue
    fi
    grep -q 'Out of bounds values : 0 OK' "$out" ||
      fail "$coll -z $blocking: check did not pass: $(tail -n 5 "$out")"
    grep -q "buffers: CUDA device memory on $device_ranks ranks" "$out" ||
      fail "$coll -z $blocking: expected device buffers on $device_ranks ranks: $(grep 'GPU ranks' "$out")"
  done
done
if [ "$case_name" = calls ]; then
  # One line per process that loaded the stand-in: the 2 ranks.
  lines=$(grep -c '^calls pid' "$tmp/calls" 2>/dev/null)
  lines=${lines:-0}
  [ "$lines" -eq 2 ] || fail "expected 2 ranks' driver call counts, got $lines"
  while read -r _ _ pid _ launch _ record _ create _ destroy _ query _ sync _ wait _ push _ attributes; do
    echo "rank process $pid: $launch launches, $record records, $create creates, $destroy destroys, $query queries, $sync synchronizes, $wait stream waits, $push context pushes, $attributes pointer queries"
    [ "$launch" -ge 200 ] || fail "pid $pid: $launch launches, expected at least 200"
    [ "$record" -le $((launch + 8)) ] ||
      fail "pid $pid: $record cuEventRecord for $launch launches: more than one per launch"
    [ "$create" -le 16 ] ||
      fail "pid $pid: $create cuEventCreate for $launch launches: events are not pooled"
    [ "$destroy" -le "$create" ] ||
      fail "pid $pid: $destroy cuEventDestroy, more than the $create created"
    [ "$sync" -le $((launch + 8)) ] ||
      fail "pid $pid: $sync cuEventSynchronize for $launch launches"
  done <"$tmp/calls"
fi
[ "$failures" -eq 0 ] && echo "ok: xcoll-perf device buffers ($case_name) checked"
exit $((failures > 0))
