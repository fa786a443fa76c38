#!/usr/bin/env bash
# quickstart.sh - from a fresh Debian 12 checkout to a running multi-rank job:
# install what is missing, build, then train with 4 ranks (DDP on
# Fashion-MNIST) when the trainer is built, else run a 4-rank allreduce
# benchmark. Everything runs on this machine through xcollrun.
#   sudo bash scripts/quickstart.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$build"

# Built as root by sudo: give the build tree back to the user who asked.
if [ -n "${SUDO_UID:-}" ] && [ "$(id -u)" -eq 0 ]; then
  chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$build"
fi

if [ -x "$build/trainer/xtrain" ]; then
  echo "== training an MLP on Fashion-MNIST with 4 ranks (DDP)"
  exec "$build/tools/xcollrun" --nproc-per-node 4 --master-port 0 \
    "$build/trainer/xtrain" --strategy ddp --model mlp --epochs 2
fi
echo "== 4-rank allreduce benchmark (tcp backend)"
exec "$build/tools/xcollrun" --nproc-per-node 4 --master-port 0 \
  "$build/tools/xcoll-perf" --coll allreduce -b 1K -e 32M -f 4
