#!/bin/sh
# nccl_like.sh - nccl_like (SIMPLE and LL) against tcp with xcoll-perf,
# allreduce float32 sum, at P=2 and P=4, in interleaved rounds with medians
# and ratio ranges; bench/nccl_like.py holds the logic and the usage.
# Usage: bench/nccl_like.sh [BUILD_DIR [BASE_BUILD_DIR]]
exec python3 "$(dirname "$0")/nccl_like.py" "$@"
