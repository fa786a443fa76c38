#!/usr/bin/env bash
# build.sh - configure and build xcoll in a build directory, warnings as
# errors.
#   bash scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
# BUILD_DIR defaults to build/ at the top of the checkout. JOBS (default 2)
# sets the build parallelism.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
jobs=${JOBS:-2}
cmake -S "$root" -B "$build" -DXCOLL_WERROR=ON "$@"
cmake --build "$build" -j"$jobs"
