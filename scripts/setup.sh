#!/usr/bin/env bash
# setup.sh - install the Debian 12 packages xcoll needs to build and test.
# Skips apt-get entirely when everything is already installed (fast, works
# offline). Run as root (sudo is then not needed, nor used), or as a user
# with sudo, which is used only when a package is missing.
#   bash scripts/setup.sh            required packages only
#   bash scripts/setup.sh --peers    also the optional peers used by bench/
#                                    (Open MPI)
set -euo pipefail

required=(build-essential cmake pkg-config libcmocka-dev libopenblas-dev
  zlib1g-dev libucx-dev ucx-utils libcjson-dev dataset-fashion-mnist fortunes
  libsodium-dev clang libclang-rt-14-dev python3 iproute2 iptables gnuplot-nox
  libibverbs-dev python3-torch libtorch-dev pybind11-dev python3-dev)
# libibverbs-dev: the ibverbs net plugin's headers (the library is loaded at
# run time; tests run it over an emulated provider, no RDMA device needed).
# python3: tools/xcoll-trace-merge and the trainer's trace test (check_trace.py).
# gnuplot-nox: trainer/plot.sh and its test (trainer.plot).
# iproute2, iptables: the multi-host tests (tests/netns: namespaces, loss).
# python3-torch, libtorch-dev, pybind11-dev, python3-dev: integrations/torch
# (xcoll_torch), its tests and labs/, which CI runs; the build still works
# without them (XCOLL_WITH_TORCH=AUTO), and those tests then skip with the
# reason. python3-torch is also bench/'s PyTorch peer.
peers=(openmpi-bin libopenmpi-dev)

want=("${required[@]}")
if [ "${1:-}" = "--peers" ]; then
  want+=("${peers[@]}")
fi

missing=()
for pkg in "${want[@]}"; do
  if ! dpkg -s "$pkg" >/dev/null 2>&1 ||
    ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#want[@]} packages already installed"
  exit 0
fi
echo "setup: missing packages: ${missing[*]}"

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo)
elif command -v sudo >/dev/null 2>&1 && [ -t 0 ]; then
  as_root=(sudo) # sudo will ask for the password
elif command -v sudo >/dev/null 2>&1; then
  echo "setup: installing packages needs root, and sudo would ask for a password" >&2
  echo "       with no terminal to type it in. Run 'sudo bash $0' from a terminal," >&2
  echo "       or as root: apt-get install ${missing[*]}" >&2
  exit 1
else
  echo "setup: installing packages needs root, and sudo is not installed." >&2
  echo "       Run this script as root (su -c 'bash $0'), or ask an" >&2
  echo "       administrator to run: apt-get install ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup: installed ${missing[*]}"
