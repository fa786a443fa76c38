#!/usr/bin/env bash
# gpu-check.sh - every check of xcoll's GPU support, in one run
# on a machine with an NVIDIA GPU, nvcc and the CUDA driver (no UCX needed).
# It ends with a summary (BUILD_DIR/gpu-check/summary.txt); every command
# it runs is below, to rerun one alone.
#   bash scripts/gpu-check.sh [BUILD_DIR]      (default build-gpu/)
# Environment: GPU_CHECK_MAXBYTES (largest xcoll-perf message, default 64M;
# 4 ranks x 2 buffers of it live on device 0), GPU_CHECK_SKIP_BUILD=1 (reuse
# BUILD_DIR as it is).
# Build dependencies: libsodium (the library), cmocka and cJSON (the tests),
# pkg-config. On a GPU machine without apt or network, fetch Debian's
# packages elsewhere (apt-get download libsodium23 libsodium-dev libcmocka0
# libcmocka-dev libcjson1 libcjson-dev) and set
# GPU_CHECK_DEBS=DIR: each .deb in DIR is unpacked into / first (dpkg -x; on
# a throwaway machine only). Or unpack cmocka elsewhere and set
# CMOCKA_ROOT=DIR/usr.
# Ranks sharing one GPU: without MPS the GPU time-slices the processes'
# contexts, so a kernel waiting on another rank's kernel waits for a time
# slice (2.3 ms a call at 2 ranks, 13.6 ms at 4, measured on an H100). Step 6
# runs its GPU-rank sweeps under MPS (nvidia-cuda-mps-control) when the
# machine has it, as NCCL users do to share a GPU; set GPU_CHECK_MPS=0 to
# measure without. GPU_CHECK_REDUCE_UNROLL=4: build the kernels and the
# bench with XCOLL_CUDA_REDUCE_UNROLL=4 (faster reduction, slower build).
# What it runs, in order (each step is PASS or FAIL in the summary; a
# failing step does not stop the others):
#   1. a CUDA build (XCOLL_WITH_CUDA=ON: the ring kernels for sm_75/80/90 +
#      PTX, checked by unit.kernels_nvcc) without UCX;
#   2. ctest -L gpu: gpu.staging.tcp (device buffers staged through pinned
#      memory, 2 and 4 ranks sharing device 0, every collective, then the
#      same under compute-sanitizer memcheck) and gpu.nccl_like (nccl_like's
#      GPU ranks: the staging program on the CUDA ring kernel at 2 and 4
#      ranks sharing device 0, then a mixed ring of 1 GPU + 3 host ranks
#      whose results must be bit-identical to a host-only ring's:
#      tests/nccl_like/nl_mixed.sh; that is the bit-identity check; and a
#      desync in a mixed ring of 3, LL and SIMPLE, caught on every rank);
#      The transports: GPU ranks sharing device 0 over P2P at 2 and 4
#      ranks, over SHM with XCOLL_P2P_DISABLE=1, a mixed ring's GPU rank
#      over SHM (nl_mixed.sh checks the INFO lines' transports); the calls
#      over the mesh (tests/conformance/exchange.c: alltoall(v), gather,
#      scatter, send/recv groups) on GPU ranks at 2 and 4 ranks and on a
#      mixed ring of 3;
#   3. compute-sanitizer --tool memcheck and --tool racecheck on a 2-rank
#      nccl_like GPU allreduce (xcoll-perf on device buffers with --check,
#      8 B to 256 KiB: LL, SIMPLE, gather and ring), which connects over
#      P2P (the peer's device memory, cuMem-mapped); memcheck also over SHM
#      (XCOLL_P2P_DISABLE=1: both kernels in host segments registered with
#      cuMemHostRegister) and on a mixed pair (GPU rank 0, host rank 1);
#      racecheck looks for
#      shared-memory hazards inside each kernel, memcheck for bad device
#      accesses and CUDA API errors; --error-exitcode 1 fails the step;
#      then memcheck on the tcp staging path (tests/staging --quick);
#   4. the stand-in driver tests (conformance.staging.*, the GPU-rank and
#      mixed-ring tests, tools.xcoll_perf_device.*) and unit.device, which
#      must still pass with a real driver installed;
#   5. bench/bench_reduce_cuda.cu, built with nvcc: the ring
#      kernel's reduce-copy step against cudaMemcpy device-to-device on one
#      GPU (float32 1 MiB-256 MiB; bfloat16; the slot in mapped pinned
#      memory as on a GPU rank): goal reduce-copy / memcpy >= 0.70;
#   6. xcoll-perf allreduce busbw, device buffers: nccl_like GPU ranks at 2
#      and 4 ranks sharing device 0 (P2P; under MPS, and the 2-rank P2P
#      sweep once before MPS starts, once at 32 channels, and once with
#      XCOLL_P2P_DISABLE=1, SHM); 2 GPU ranks' latency from 8 B to 64 KiB under MPS, 200 calls
#      a size in flight at once, and blocking; a mixed ring (rank 0 on the GPU, 3 host
#      ranks) against the host-only ring of 4; tcp GPU ranks (staging) at 4
#      against tcp host ranks. docs/benchmarks.md says what each figure is.
# Output: BUILD_DIR/gpu-check/ holds each step's full log; the summary is
# printed last and saved as BUILD_DIR/gpu-check/summary.txt.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
maxbytes=${GPU_CHECK_MAXBYTES:-64M}
prefix=()
[ -n "${CMOCKA_ROOT:-}" ] && prefix=(-DCMAKE_PREFIX_PATH="$CMOCKA_ROOT")
[ -n "${CMOCKA_ROOT:-}" ] && export LD_LIBRARY_PATH="$CMOCKA_ROOT/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nvidia-smi -L || { echo "gpu-check: no GPU (nvidia-smi failed)"; exit 77; }
if [ -n "${GPU_CHECK_DEBS:-}" ]; then
  for deb in "$GPU_CHECK_DEBS"/*.deb; do dpkg -x "$deb" / || exit 1; done
  ldconfig
fi
PATH=/usr/local/cuda/bin:$PATH

if [ "${GPU_CHECK_SKIP_BUILD:-0}" != 1 ]; then
  cmake -S "$root" -B "$build" -DXCOLL_WITH_CUDA=ON -DXCOLL_WITH_UCX=OFF \
    -DXCOLL_WITH_TORCH=OFF -DXCOLL_BUILD_TRAINER=OFF \
    -DXCOLL_CUDA_REDUCE_UNROLL="${GPU_CHECK_REDUCE_UNROLL:-1}" "${prefix[@]}" || exit 1
  cmake --build "$build" -j"$(nproc)" || exit 1
fi
cd "$build" || exit 1
logs=$build/gpu-check
mkdir -p "$logs"
summary=$logs/summary.txt
{
  echo "gpu-check $(date -u +%Y-%m-%dT%H:%MZ), xcoll $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/  GPU: /'
  echo "  nvcc: $(nvcc --version | tail -n 1)"
} > "$summary"
failed=0

# step NAME COMMAND...: run it, its output teed to gpu-check/NAME.log, and
# record PASS or FAIL in the summary.
step() {
  local name=$1
  shift
  echo "== $name: $*"
  if "$@" 2>&1 | tee "$logs/$name.log"; then
    echo "PASS  $name" >> "$summary"
  else
    echo "FAIL  $name (log: $logs/$name.log)" >> "$summary"
    failed=1
  fi
}

# -V: the tests' own output in the log, for the bit-identity line below.
step ctest-gpu ctest -V -L gpu
{
  echo "      bit-identity (gpu.nccl_like: nl_mixed.sh, 1 GPU + 3 host ranks vs host-only):"
  grep -hoE "ok: [0-9]+ results bit-identical.*" "$logs/ctest-gpu.log" | sed 's/^/        /' ||
    echo "        no 'bit-identical' line: see $logs/ctest-gpu.log"
} >> "$summary"

# 3. compute-sanitizer. Under it the kernels run many times slower and the
# ring's other rank waits on them: the timeout is raised to match.
for tool in memcheck racecheck; do
  step "sanitizer-$tool-nccl_like" env XCOLL_BACKEND=nccl_like \
    XCOLL_DEVICE=cuda:0 XCOLL_TIMEOUT_S=900 timeout -k 10 1200 \
    tools/xcollrun --nproc-per-node 2 --master-port 0 \
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
    tools/xcoll-perf -b 8 -e 256K -f 8 -n 1 -w 1 -c 1
done
step sanitizer-memcheck-nccl_like-shm env XCOLL_BACKEND=nccl_like \
  XCOLL_DEVICE=cuda:0 XCOLL_P2P_DISABLE=1 XCOLL_TIMEOUT_S=900 \
  timeout -k 10 1200 tools/xcollrun --nproc-per-node 2 --master-port 0 \
  compute-sanitizer --tool memcheck --error-exitcode 1 \
  tools/xcoll-perf -b 8 -e 256K -f 8 -n 1 -w 1 -c 1
# Only the GPU rank under the sanitizer: it fails a process that never
# calls CUDA ("terminated before first instrumented API call"), and rank 1
# is a host rank.
step sanitizer-memcheck-nccl_like-mixed env XCOLL_BACKEND=nccl_like \
  XCOLL_TIMEOUT_S=900 timeout -k 10 1200 \
  tools/xcollrun --nproc-per-node 2 --master-port 0 \
  bash -c 'if [ "$RANK" = 0 ]; then exec compute-sanitizer --tool memcheck --error-exitcode 1 "$@"; fi; exec "$@"' gpu-rank-0 \
  tools/xcoll-perf -b 8 -e 256K -f 8 -n 1 -w 1 -c 1 --gpu-ranks 0
step sanitizer-memcheck-tcp env XCOLL_BACKEND=tcp XCOLL_DEVICE=cuda:0 \
  XCOLL_TIMEOUT_S=120 tools/xcollrun --nproc-per-node 2 --master-port 0 \
  compute-sanitizer --tool memcheck --error-exitcode 1 tests/staging --quick

# 4. The stand-in driver's tests, real driver installed beside it.
step standin ctest --output-on-failure -R \
  'conformance\.staging|conformance\.gpu_ranks|nccl_like\.mixed_ring|tools\.xcoll_perf_device|unit\.device|unit\.kernels_nvcc'

# 5. The reduce-copy micro-benchmark (not part of the CMake build).
# The GPU's own architecture (compute_cap "9.0" -> sm_90); -arch=native
# where nvidia-smi is too old to say (native silently falls back to a
# default architecture when it finds no GPU).
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
arch=native
[[ "$cap" =~ ^[0-9]+$ ]] && arch=sm_$cap
echo "      bench built for $arch" >> "$summary"
step bench-build nvcc -O3 -std=c++17 -arch="$arch" -I "$root/include" \
  -DXC_REDUCE_UNROLL="${GPU_CHECK_REDUCE_UNROLL:-1}" \
  "$root/bench/bench_reduce_cuda.cu" -o "$build/bench_reduce_cuda"
step bench-float32 ./bench_reduce_cuda --dtype float32 --minbytes 1M \
  --maxbytes 256M --blocks 2,16,32,64,0
step bench-bfloat16 ./bench_reduce_cuda --dtype bfloat16 --minbytes 1M \
  --maxbytes 256M --blocks 2,16,32,64,0
step bench-pinned-slot ./bench_reduce_cuda --dtype float32 --minbytes 1M \
  --maxbytes 64M --blocks 2,32,0 --pinned-slot
for b in float32 bfloat16 pinned-slot; do
  grep -h "traffic ratio at" "$logs/bench-$b.log" | sed "s/^# /      bench $b: /" >> "$summary"
done
# A GPU rank's default launch: one channel (block) per 8 SMs, at most 16
# (16 on an H100 or H200), at the largest size.
nch=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
[[ "$nch" =~ ^[0-9]+$ ]] && nch=$((nch / 8)) || nch=16
[ "$nch" -gt 16 ] && nch=16
[ "$nch" -lt 2 ] && nch=2
awk -v n="$nch" '$1 ~ /^[0-9]+$/ && $2 == n {row = $0} END {if (row != "") print "      bench float32, " n " blocks (a GPU rank'"'"'s default channels), largest size:" row}' \
  "$logs/bench-float32.log" >> "$summary"

# 6. xcoll-perf busbw. perf NAME NPROC ENV... -- ARGS...: an allreduce sweep
# of 1 MiB to GPU_CHECK_MAXBYTES with --check; the summary keeps the
# largest row's out-of-place and in-place busbw.
perf() {
  local name=$1 np=$2
  shift 2
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  step "perf-$name" env XCOLL_TIMEOUT_S=300 "${env[@]}" timeout -k 10 1200 \
    tools/xcollrun --nproc-per-node "$np" --master-port 0 \
    tools/xcoll-perf -b 1M -e "$maxbytes" -f 4 -n 10 -w 3 -c 1 "$@"
  sed 's/^\[rank 0\] //' "$logs/perf-$name.log" | awk -v name="$name" '
    $1 ~ /^[0-9]+$/ && NF >= 13 {size = $1; oop = $8; ip = $12; alg = $14}
    /Out of bounds values/ {check = $NF}
    END {printf "      %-22s %10s B  busbw %s (oop) %s (ip) GB/s  %s  check %s\n",
                name, size, oop, ip, alg, check}' >> "$summary"
}
# P2P without MPS (time-sliced contexts), and SHM between the same two GPU
# ranks, before MPS starts.
perf nccl_like.gpu.np2.nomps 2 XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 --
perf nccl_like.gpu.np2.shm.nomps 2 XCOLL_BACKEND=nccl_like \
  XCOLL_DEVICE=cuda:0 XCOLL_P2P_DISABLE=1 --
mps=0
if [ "${GPU_CHECK_MPS:-1}" != 0 ] && command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$logs/mps-pipe CUDA_MPS_LOG_DIRECTORY=$logs/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps=1
fi
echo "      step 6 under MPS: $([ $mps = 1 ] && echo yes || echo no)" >> "$summary"
perf nccl_like.gpu.np2 2 XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 --
# 32 channels (blocks) a rank, the most there are, where the default is
# one per 8 SMs up to 16: whether more blocks raise P2P busbw.
perf nccl_like.gpu.np2.32ch 2 XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 \
  XCOLL_NCHANNELS=32 --
# Small messages, 200 calls a size queued before the first wait (-z 0): the
# latency of a GPU rank's allreduce, and a launch queue that fills
# (NL_QUEUE_DEPTH) while the proxy retires kernels that end within
# microseconds of each other (under MPS both ranks' kernels run at once).
step perf-nccl_like.gpu.np2.small env XCOLL_TIMEOUT_S=300 \
  XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 timeout -k 10 600 \
  tools/xcollrun --nproc-per-node 2 --master-port 0 \
  tools/xcoll-perf -b 8 -e 64K -f 8 -n 200 -w 20 -c 1
sed 's/^\[rank 0\] //' "$logs/perf-nccl_like.gpu.np2.small.log" | awk '
  $1 ~ /^[0-9]+$/ && NF >= 13 && ($1 == 8 || $1 == 4096) {
    printf "      nccl_like.gpu.np2.small %6s B  %s us (oop) %s us (ip)  %s\n", $1, $6, $10, $14}' >> "$summary"
# The same sizes blocking (-z 1): each call's launch, kernel and
# synchronisation one after another, the host's driver calls included.
step perf-nccl_like.gpu.np2.small.blocking env XCOLL_TIMEOUT_S=300 \
  XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 timeout -k 10 600 \
  tools/xcollrun --nproc-per-node 2 --master-port 0 \
  tools/xcoll-perf -b 8 -e 64K -f 8 -n 200 -w 20 -c 1 -z 1
sed 's/^\[rank 0\] //' "$logs/perf-nccl_like.gpu.np2.small.blocking.log" | awk '
  $1 ~ /^[0-9]+$/ && NF >= 13 && ($1 == 8 || $1 == 4096) {
    printf "      nccl_like.gpu.np2.small.blocking %6s B  %s us (oop) %s us (ip)  %s\n", $1, $6, $10, $14}' >> "$summary"
perf nccl_like.gpu.np2.shm 2 XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 \
  XCOLL_P2P_DISABLE=1 --
perf nccl_like.gpu.np4 4 XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 --
perf nccl_like.mixed1+3 4 XCOLL_BACKEND=nccl_like -- --gpu-ranks 0
perf nccl_like.host.np4 4 XCOLL_BACKEND=nccl_like XCOLL_DEVICE=host --
perf tcp.gpu.np4 4 XCOLL_BACKEND=tcp XCOLL_DEVICE=cuda:0 --
perf tcp.host.np4 4 XCOLL_BACKEND=tcp XCOLL_DEVICE=host --
[ $mps = 1 ] && echo quit | nvidia-cuda-mps-control

echo
echo "==== summary (also in $summary)"
cat "$summary"
if [ "$failed" -ne 0 ]; then
  echo "gpu-check: some steps FAILED"
  exit 1
fi
echo "gpu-check: all passed"
