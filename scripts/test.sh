#!/usr/bin/env bash
# test.sh - what CI runs (.ci/run): install what is missing, build with
# warnings as errors, run every ctest entry, then build again with
# AddressSanitizer + UndefinedBehaviorSanitizer and run the unit tests and a
# quick conformance, fault and security pass under them; then ThreadSanitizer
# over the unit tests (the ring primitives and the nccl_like engine among
# them), the two-thread split test, tcp at 2 ranks, nccl_like at 3 ranks
# (worker threads + proxy + watcher) and the peer faults; last, every libFuzzer
# target for FUZZ_SECONDS under ASan+UBSan (scripts/fuzz.sh). The nvcc
# compile check (unit.kernels_nvcc) runs once, in the first pass: nvcc does
# not change under a sanitizer. The sanitizer builds embed PTX only
# (XCOLL_CUDA_ARCHS=ptx, ~20 s of nvcc instead of minutes): their GPU-rank
# tests run over the stand-in driver, which never reads the image.
#   bash scripts/test.sh
# Environment: JOBS (default 2) for the build and ctest parallelism;
# XCOLL_SKIP_ASAN=1 / XCOLL_SKIP_TSAN=1 / XCOLL_SKIP_FUZZ=1 skip those passes;
# FUZZ_SECONDS per fuzz target (default 10 here, to keep CI short; fuzz.sh
# alone defaults to 30).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${JOBS:-2}
# Each phase's heading says when it started (seconds since this script's
# start), so that a CI log shows where the time goes.
phase() { echo "== [${SECONDS} s] $*"; }

bash "$root/scripts/setup.sh"

phase "build (build/)"
# The ring kernels for the oldest and the newest architecture of the
# default list (75;80;90) and PTX: the kernels have no per-architecture
# code (no __CUDA_ARCH__ version test), and a third SASS target cost CI's
# 2 cores about a minute (85 s for 75;90 against 135-160 s for three).
bash "$root/scripts/build.sh" "$root/build" -DXCOLL_CUDA_ARCHS="75;90"
phase "ctest (build/)"
(cd "$root/build" && ctest --output-on-failure -j"$jobs")

if [ "${XCOLL_SKIP_ASAN:-0}" != 1 ]; then
  phase "build with address,undefined sanitizers (build-asan/)"
  bash "$root/scripts/build.sh" "$root/build-asan" \
    -DXCOLL_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug \
    -DXCOLL_BUILD_TRAINER=OFF -DXCOLL_CUDA_ARCHS=ptx
  phase "ctest under sanitizers (build-asan/): unit, conformance (quick), faults, security"
  (cd "$root/build-asan" &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j"$jobs" -L 'unit|conformance|faults|security' \
      -E '^unit\.kernels_nvcc$')
fi
if [ "${XCOLL_SKIP_TSAN:-0}" != 1 ]; then
  # ThreadSanitizer: the progress thread, abort from another thread and two
  # communicators driven from two threads. UCX is left out of this build:
  # its memory hooks (libucm) crash under TSan's interceptors.
  phase "build with thread sanitizer (build-tsan/, without UCX)"
  bash "$root/scripts/build.sh" "$root/build-tsan" \
    -DXCOLL_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug \
    -DXCOLL_BUILD_TRAINER=OFF -DXCOLL_WITH_UCX=OFF -DXCOLL_CUDA_ARCHS=ptx
  phase "ctest under thread sanitizer (build-tsan/): unit, threads, tcp np2, nccl_like np3, GPU ranks (stand-in driver), their full launch queue and their blocking launches, a mixed ring's point-to-point calls, faults"
  (cd "$root/build-tsan" &&
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --output-on-failure -j"$jobs" \
      -R '^unit\.|split_threads|conformance\.tcp\.np2$|conformance\.nccl_like\.np3$|conformance\.gpu_ranks\.nccl_like\.np2$|nccl_like\.mixed_ring\.np3$|nccl_like\.mixed_ring\.exchange\.np3\.gpu0$|faults\.abort_threads\.nccl_like$|faults\.peer_|tools\.xcoll_perf_device\.(queue|calls)$' \
      -E '^unit\.kernels_nvcc$')
fi
if [ "${XCOLL_SKIP_FUZZ:-0}" != 1 ]; then
  phase "fuzz targets, ${FUZZ_SECONDS:-10} s each under ASan+UBSan (build-fuzz/)"
  FUZZ_SECONDS=${FUZZ_SECONDS:-10} bash "$root/scripts/fuzz.sh"
fi
phase "all tests passed"
