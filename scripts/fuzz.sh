#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer targets (tests/fuzz) with clang under
# ASan+UBSan and run each for FUZZ_SECONDS (default 30) on a copy of its seed
# corpus (tests/fuzz/corpus/<name>/; new inputs found stay in the copy, the
# checked-in seeds are never changed). Fails when any target crashes, leaks,
# trips a sanitizer or times out; prints the executions per target.
#   scripts/fuzz.sh [TARGET...]      default: every tests/fuzz/fuzz_*.c
# Environment: FUZZ_SECONDS (per target), FUZZ_BUILD (build directory,
# default build-fuzz), FUZZ_JOBS (build parallelism, default 2),
# FUZZ_ARTIFACTS (where crashing inputs go, default $FUZZ_BUILD/artifacts).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-30}
build=${FUZZ_BUILD:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-2}
artifacts=${FUZZ_ARTIFACTS:-$build/artifacts}

if ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang not found: apt-get install clang libclang-rt-14-dev" >&2
  exit 2
fi
mkdir -p "$build"
CC=clang cmake -S "$root" -B "$build" -DXCOLL_FUZZ=ON -DXCOLL_BUILD_TESTS=OFF \
  -DXCOLL_BUILD_TRAINER=OFF -DCMAKE_BUILD_TYPE=Debug >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; echo "fuzz.sh: configure failed" >&2; exit 2; }

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for src in "$root"/tests/fuzz/fuzz_*.c; do
    targets+=("$(basename "$src" .c)")
  done
fi
nice cmake --build "$build" -j"$jobs" --target "${targets[@]}" \
  || { echo "fuzz.sh: build failed" >&2; exit 2; }

mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
summary=()
for t in "${targets[@]}"; do
  exe=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  if [ -z "$exe" ]; then
    echo "fuzz.sh: $t was not built" >&2
    status=1
    continue
  fi
  corpus=$work/$t
  mkdir -p "$corpus"
  if [ -d "$root/tests/fuzz/corpus/$t" ]; then
    cp "$root/tests/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null
  fi
  seeds=$(ls "$corpus" | wc -l)
  log=$build/$t.log
  # -rss_limit_mb / -malloc_limit_mb: an allocation sized by an unchecked
  # field shows up as a crash; -timeout: a hang on one input is a failure.
  nice "$exe" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$artifacts/$t-" \
    "$corpus" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cover=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  found=$(ls "$corpus" | wc -l)
  if [ $rc -ne 0 ]; then
    status=1
    echo "FAIL $t (exit $rc): see $log; the input is in $artifacts/"
    grep -E "ERROR|SUMMARY|runtime error" "$log" | head -5
  fi
  summary+=("$(printf '%-18s %s  %12s executions  %8s exec/s  %s  corpus %s -> %s' \
    "$t" "$([ $rc -eq 0 ] && echo ok || echo CRASH)" "${execs:-?}" "${speed:-?}" \
    "${cover:-cov: ?}" "$seeds" "$found")")
done
echo "fuzz.sh: ${seconds} s per target under ASan+UBSan"
printf '%s\n' "${summary[@]}"
exit $status
