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
#     inspects that instead of compiling again, for the architectures in
#     FATBIN_ARCHS (the build's XCOLL_CUDA_ARCHS, comma-separated);
#  3. xc_work and xc_conn, which a GPU rank's host code lays out (gcc) and
#     its kernel reads (nvcc), have the same size and field offsets on both.
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
  for h in device.h fp16.h reduce.h conn.h prims.h ring.h; do
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

# A GPU rank hands the kernel an xc_work by value and xc_conn arrays in
# mapped memory, both laid out by gcc (backends/nccl_like/gpu_engine.c):
# nvcc's device pass must agree on every size and offset. gcc prints them as
# static_asserts, which nvcc then compiles for the device.
cat > "$tmp/layout.c" <<'LAYOUT'
#include <stddef.h>
#include <stdio.h>
#include "ring.h"
#define F(T, f) printf("static_assert(offsetof(" #T ", " #f ") == %zu, \"" #T "." #f "\");\n", offsetof(T, f))
int main(void) {
  printf("#include \"ring.h\"\n#include <stddef.h>\n__device__ void xc_layout_check(void) {\n");
  printf("static_assert(sizeof(xc_work) == %zu, \"xc_work\");\n", sizeof(xc_work));
  printf("static_assert(sizeof(xc_conn) == %zu, \"xc_conn\");\n", sizeof(xc_conn));
  F(xc_work, kind); F(xc_work, dtype); F(xc_work, op); F(xc_work, sendbuf);
  F(xc_work, recvbuf); F(xc_work, count); F(xc_work, nranks);
  F(xc_work, ring_index); F(xc_work, root_index); F(xc_work, ring_ranks);
  F(xc_work, channel); F(xc_work, nchannels); F(xc_work, proto);
  F(xc_work, chunk_steps); F(xc_work, slice_steps); F(xc_work, trace);
  F(xc_work, progress); F(xc_work, algo); F(xc_work, scratch);
  F(xc_work, scratch_bytes);
  F(xc_conn, buff); F(xc_conn, step_bytes); F(xc_conn, head); F(xc_conn, tail);
  F(xc_conn, sizes); F(xc_conn, step); F(xc_conn, direct_from);
  printf("}\n");
  return 0;
}
LAYOUT
gcc -std=c11 -I"$src/include" -I"$src/kernels" "$tmp/layout.c" -o "$tmp/layout"
"$tmp/layout" > "$tmp/layout.cu"
"$nvcc" -std=c++17 -Werror all-warnings -I"$src/include" -I"$src/kernels" \
  -gencode arch=compute_75,code=compute_75 -c "$tmp/layout.cu" \
  -o "$tmp/layout.o"
echo "ok: xc_work ($(grep -o 'sizeof(xc_work) == [0-9]*' "$tmp/layout.cu" | grep -o '[0-9]*$') B) and xc_conn have gcc's layout in nvcc's device code"
"$nvcc" --version | tail -n 1
# The architectures to find: sm_ for each, PTX of the last (the build's
# XCOLL_CUDA_ARCHS, comma-separated in FATBIN_ARCHS, when its fatbin is
# inspected; "ptx": compute_75 PTX only).
archs="75 80 90"
if [ -n "${FATBIN:-}" ] && [ -f "$FATBIN" ]; then
  # The build compiled ring_kernel.cu with the same flags into the fatbin
  # the library embeds: inspect that one.
  archs=$(echo "${FATBIN_ARCHS:-$archs}" | tr ',' ' ')
  echo "the build's fatbin: $FATBIN (XCOLL_CUDA_ARCHS $archs)"
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
  ptx=75
  if [ "$archs" != ptx ]; then
    for arch in $archs; do
      grep -q "sm_$arch" "$tmp/elf.txt" || { echo "FAIL: no sm_$arch code"; exit 1; }
      ptx=$arch
    done
  fi
  # --list-ptx names each PTX by its architecture, "compute_90" or
  # "<file>.sm_90.ptx" depending on the toolkit: either form counts.
  grep -qE "(compute|sm)_$ptx([^0-9]|\$)" "$tmp/ptx.txt" || {
    echo "FAIL: no compute_$ptx PTX; cuobjdump --list-ptx says:"
    cat "$tmp/ptx.txt"
    exit 1
  }
  "$cuobjdump" --dump-ptx "$tmp/ring_kernel.o" > "$tmp/ptx_dump.txt"
  for k in allreduce reduce_scatter allgather broadcast reduce; do
    grep -q "\.entry xc_${k}_kernel" "$tmp/ptx_dump.txt" ||
      { echo "FAIL: kernel xc_${k}_kernel missing from the PTX"; exit 1; }
  done
fi
if [ "$archs" = ptx ]; then
  what="compute_75 PTX"
else
  what="$(echo "$archs" | sed 's/\([0-9][0-9]*\)/sm_\1/g; s/ /, /g') + PTX"
fi
echo "ok: nvcc compiled ring_kernel.cu for $what (compile only: no GPU here, nothing ran)"
