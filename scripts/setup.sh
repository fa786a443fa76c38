#!/usr/bin/env bash
# setup.sh - install the Debian 12 packages xcoll needs to build and test,
# then make the project's Python environment, .venv/ at the top of the
# checkout (git-ignored), with PyTorch 2.13.0 (CPU) and what
# `pip install .` needs to build (scikit-build-core, ninja).
# Skips apt-get entirely when everything is already installed, and pip when
# .venv already has it all (fast, works offline). Run as root (sudo is then
# not needed, nor used), or as a user with sudo, which is used only when a
# package is missing.
#   bash scripts/setup.sh            required packages and .venv
#   bash scripts/setup.sh --peers    also the optional peers used by bench/
#                                    (Open MPI)
# Environment: XCOLL_VENV (default .venv at the top of the checkout);
# XCOLL_SKIP_VENV=1 leaves the Python environment alone.
set -euo pipefail
# The checkout's top, with bash alone (no dirname: setup.sh may run before
# coreutils-like tools are known to be there).
here=${BASH_SOURCE[0]%/*}
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
root=$(cd "$here/.." && pwd)

required=(build-essential cmake pkg-config libcmocka-dev libopenblas-dev
  zlib1g-dev libucx-dev ucx-utils libcjson-dev dataset-fashion-mnist fortunes
  libsodium-dev clang libclang-rt-14-dev python3 iproute2 iptables gnuplot-nox
  libibverbs-dev python3-torch python3-dev python3-venv)
# libibverbs-dev: the ibverbs net plugin's headers (the library is loaded at
# run time; tests run it over an emulated provider, no RDMA device needed).
# python3: tools/xcoll-trace-merge and the trainer's trace test (check_trace.py).
# gnuplot-nox: trainer/plot.sh and its test (trainer.plot).
# iproute2, iptables: the multi-host tests (tests/netns: namespaces, loss).
# python3-dev, python3-venv: .venv below, where integrations/torch
# (xcoll_torch), its tests and labs/ find PyTorch 2.13; the build still
# works without it (XCOLL_WITH_TORCH=AUTO), and those tests then skip with
# the reason. python3-torch (Debian's 1.13 in /usr/bin/python3) is the
# PyTorch peer of bench/ and of the trainer's loss-curve test.
# --peers: Open MPI (bench/'s MPI peer) and iperf3 (one TCP stream on
# loopback, the ceiling bench/ compares sendrecv with).
peers=(openmpi-bin libopenmpi-dev iperf3)

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

# The project's Python: .venv with torch 2.13.0 from the wheel this kind of
# machine holds (pip finds it without a download). Never another torch
# version: anything else pulls a CUDA build of several GB.
setup_venv() {
  [ "${XCOLL_SKIP_VENV:-0}" = 1 ] && return 0
  local venv=${XCOLL_VENV:-$root/.venv}
  local want_pip=(torch==2.13.0 numpy scikit-build-core ninja)
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<'PY' 2>/dev/null; then
import importlib.metadata as m, sys
v = m.version("torch")
for p in ("numpy", "scikit-build-core", "ninja"):
    m.version(p)
sys.exit(0 if v.split("+")[0] == "2.13.0" else 1)
PY
    echo "setup: $venv already has torch 2.13.0, numpy, scikit-build-core, ninja"
    return 0
  fi
  local base=${XCOLL_PYTHON:-python3}
  if ! command -v "$base" >/dev/null 2>&1; then
    # Only where the packages above were not really installed (a dry run
    # with stand-ins for apt-get): python3 is one of them.
    echo "setup: $base not found: $venv not made (XCOLL_PYTHON names another Python)"
    return 0
  fi
  echo "setup: making $venv ($($base --version 2>&1)) with ${want_pip[*]}"
  "$base" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "${want_pip[@]}"
  "$venv/bin/python" -c 'import torch; print("setup: torch", torch.__version__, "in", torch.__file__)'
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#want[@]} packages already installed"
  setup_venv
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
setup_venv
