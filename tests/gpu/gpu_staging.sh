#!/usr/bin/env bash
# gpu_staging.sh - the staging test (tests/conformance/staging.c) on a real
# GPU: every rank bound to CUDA device 0 (ranks share the one GPU), device
# buffers staged through pinned memory on BACKEND, at 2 and 4 ranks. Exits
# 77 (ctest's SKIP_RETURN_CODE) with the reason when no CUDA device is found.
#   gpu_staging.sh XCOLLRUN STAGING BACKEND
set -u
xcollrun=$1
staging=$2
backend=$3
"$staging" --probe || exit $?
fail=0
for np in 2 4; do
  echo "== $np ranks on CUDA device 0, XCOLL_BACKEND=$backend"
  XCOLL_BACKEND=$backend XCOLL_DEVICE=cuda:0 timeout -k 5 300 "$xcollrun" \
    --nproc-per-node $np --master-port 0 "$staging" || fail=1
done
exit $fail
