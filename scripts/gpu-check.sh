#!/usr/bin/env bash
# gpu-check.sh - what can be checked of xcoll's GPU support on a machine with
# an NVIDIA GPU, nvcc and the CUDA driver (no UCX needed). Rerun it wherever
# a GPU is available and put its output in the issue's note.
#   bash scripts/gpu-check.sh [BUILD_DIR]      (default build-gpu/)
# cmocka: the unit tests need it; where it is not installed, fetch Debian's
# packages on a machine with apt (apt-get download libcmocka0 libcmocka-dev),
# unpack them (dpkg -x PKG.deb DIR) and set CMOCKA_ROOT=DIR/usr.
# What it runs:
#   1. a CUDA build (XCOLL_WITH_CUDA=ON: the ring kernels for sm_75/80/90 +
#      PTX, checked by unit.kernels_nvcc) without UCX;
#   2. ctest -L gpu: device buffers staged through pinned memory on tcp
#      (tests/gpu/gpu_staging.sh: 2 and 4 ranks sharing CUDA device 0, every
#      collective, in place and out of place, blocking and non-blocking on
#      a stream), then the same staging run under compute-sanitizer's
#      memcheck (CUDA API errors, bad copies);
#   3. the stand-in driver tests (conformance.staging.*) and unit.device,
#      which must still pass with a real driver installed.
# Not here yet: nccl_like's CUDA engine (the kernels are compiled, not
# driven), so no mixed CPU/GPU ring and no kernel bandwidth figure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
prefix=()
[ -n "${CMOCKA_ROOT:-}" ] && prefix=(-DCMAKE_PREFIX_PATH="$CMOCKA_ROOT")
[ -n "${CMOCKA_ROOT:-}" ] && export LD_LIBRARY_PATH="$CMOCKA_ROOT/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nvidia-smi -L || { echo "gpu-check: no GPU (nvidia-smi failed)"; exit 77; }
PATH=/usr/local/cuda/bin:$PATH
cmake -S "$root" -B "$build" -DXCOLL_WITH_CUDA=ON -DXCOLL_WITH_UCX=OFF \
  -DXCOLL_WITH_TORCH=OFF -DXCOLL_BUILD_TRAINER=OFF "${prefix[@]}"
cmake --build "$build" -j"$(nproc)"
cd "$build"
echo "== ctest -L gpu"
ctest --output-on-failure -L gpu
echo "== staging under compute-sanitizer --tool memcheck (2 ranks, tcp)"
XCOLL_BACKEND=tcp XCOLL_DEVICE=cuda:0 XCOLL_TIMEOUT_S=120 \
  tools/xcollrun --nproc-per-node 2 --master-port 0 \
  compute-sanitizer --tool memcheck --error-exitcode 1 tests/staging --quick
echo "== stand-in driver tests and the nvcc compile check"
ctest --output-on-failure -R 'conformance\.staging|unit\.device|unit\.kernels_nvcc'
echo "gpu-check: all passed"
