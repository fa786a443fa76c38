#!/bin/sh
# check_compile.sh SRC_DIR - ctest unit.kernels_nvcc: the kernels/ headers are
# one source for C11 host ranks and CUDA ranks; this proves that it compiles
# on both sides. It compiles, it does not run: the project's machines have no
# GPU, so no kernel is ever launched here.
#  1. each header alone with gcc -std=c11 -Wall -Wextra -Werror -Wpedantic,
#     and with clang when it exists;
#  2. kernels/cuda/ring_kernel.cu with nvcc -std=c++17 -Werror all-warnings
#     --diag-error=20011 (a __host__ function called from __host__ __device__
#     code is an error, not a warning) for sm_75, sm_80 and sm_90 plus
#     compute_90 PTX, then checks with cuobjdump that every architecture and
#     every kernel is in the object.
#     With FATBIN set to the fatbin the build made (same flags), step 2
#     inspects that instead of compiling again.
# Exit 77 (ctest SKIP_RETURN_CODE) when nvcc is absent: set NVCC to use
# another one than /usr/local/cuda/bin/nvcc.
set -eu
src=${1:?usage: check_compile.sh SRC_DIR}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for cc in gcc clang; do
  if ! command -v "$cc" >/dev/null 2>&1; then
    echo "note: $cc not found, its header check is left out"
    continue
  fi
  for h in device.h reduce.h conn.h prims.h ring.h; do
    printf '#include "%s"\n#include "%s"\nint xc_header_check;\n' "$h" "$h" \
      > "$tmp/check.c"
    "$cc" -std=c11 -Wall -Wextra -Werror -Wpedantic -I"$src/include" \
      -I"$src/kernels" -fsyntax-only "$tmp/check.c"
  done
  echo "ok: $cc -std=c11 -Werror compiles each kernels/ header alone"
done

if [ ! -x "$nvcc" ]; then
  echo "SKIP: $nvcc not found (no CUDA toolkit); set NVCC to check the CUDA build"
  exit 77
fi
"$nvcc" --version | tail -n 1
if [ -n "${FATBIN:-}" ] && [ -f "$FATBIN" ]; then
  # The build compiled ring_kernel.cu with the same flags into the fatbin
  # the library embeds: inspect that one.
  echo "the build's fatbin: $FATBIN"
  cp "$FATBIN" "$tmp/ring_kernel.o"
else
  "$nvcc" -std=c++17 -Werror all-warnings --diag-error=20011 -I"$src/include" \
    -gencode arch=compute_75,code=sm_75 \
    -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code='[sm_90,compute_90]' \
    -c "$src/kernels/cuda/ring_kernel.cu" -o "$tmp/ring_kernel.o"
fi
cuobjdump=$(dirname "$nvcc")/cuobjdump
if [ -x "$cuobjdump" ]; then
  "$cuobjdump" --list-elf "$tmp/ring_kernel.o" > "$tmp/elf.txt"
  "$cuobjdump" --list-ptx "$tmp/ring_kernel.o" > "$tmp/ptx.txt"
  for arch in sm_75 sm_80 sm_90; do
    grep -q "$arch" "$tmp/elf.txt" || { echo "FAIL: no $arch code"; exit 1; }
  done
  grep -q compute_90 "$tmp/ptx.txt" || { echo "FAIL: no compute_90 PTX"; exit 1; }
  "$cuobjdump" --dump-ptx "$tmp/ring_kernel.o" > "$tmp/ptx_dump.txt"
  for k in allreduce reduce_scatter allgather broadcast reduce; do
    grep -q "\.entry xc_${k}_kernel" "$tmp/ptx_dump.txt" ||
      { echo "FAIL: kernel xc_${k}_kernel missing from the PTX"; exit 1; }
  done
fi
echo "ok: nvcc compiled ring_kernel.cu for sm_75, sm_80, sm_90 + PTX (compile only: no GPU here, nothing ran)"
