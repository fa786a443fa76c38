#!/usr/bin/env bash
# gpu_nccl_like.sh - nccl_like's GPU ranks on a real GPU (label gpu): the
# staging program (every collective on device buffers; tests/conformance/
# staging.c) with every rank a GPU rank on CUDA device 0, at 2 and 4 ranks
# sharing the one GPU; then a mixed ring of 1 GPU rank and 3 host ranks
# against a host-only ring, bit for bit (tests/nccl_like/nl_mixed.sh); then a
# desync in a mixed ring of 3 (tests/faults/fault_desync.c, GPU rank 1
# between host ranks, over LL and SIMPLE) must fail on every rank with
# PROTOCOL naming both calls. The transports (backends/nccl_like/
# transport/): GPU ranks sharing device 0 must connect over P2P (the
# receiver's slots in its device memory, cuMem or CUDA IPC) at 2 and 4
# ranks, over SHM with XCOLL_P2P_DISABLE=1, and the mixed ring's GPU rank
# over SHM to its host neighbours (its kernel reading and writing their
# shared segments through cuMemHostRegister), each bit for bit against a
# host-only ring. The calls over the mesh (alltoall, alltoallv, gather,
# scatter, send/recv groups: tests/conformance/exchange.c, each result
# against its reference) with every rank a GPU rank at 2 and 4 ranks, and
# with GPU rank 1 between two host ranks. Exits 77 (ctest's
# SKIP_RETURN_CODE) with the reason when no CUDA device is found.
#   gpu_nccl_like.sh XCOLLRUN STAGING NL_MIXED_SH NL_MIXED FAULT_DESYNC [EXCHANGE]
set -u
xcollrun=$1
staging=$2
mixed_sh=$3
mixed=$4
desync=$5
exchange=${6:-}
"$staging" --probe || exit $?
fail=0
for np in 2 4; do
  echo "== $np GPU ranks on CUDA device 0, XCOLL_BACKEND=nccl_like"
  XCOLL_BACKEND=nccl_like XCOLL_DEVICE=cuda:0 timeout -k 5 300 "$xcollrun" \
    --nproc-per-node $np --master-port 0 "$staging" || fail=1
done
echo "== mixed ring: rank 0 on CUDA device 0, ranks 1-3 on the host, over SHM"
XCOLL_BACKEND=nccl_like NL_MIXED_DEVICES=1 NL_MIXED_TRANSPORTS=SHM \
  bash "$mixed_sh" "$xcollrun" "$mixed" 4 0 || fail=1
# Every rank a GPU rank: XCOLL_NCHANNELS=2 (a GPU rank's default) so that
# the host-only ring cuts the same chunks.
for np in 2 4; do
  echo "== $np GPU ranks on CUDA device 0 over P2P, against a host-only ring"
  XCOLL_BACKEND=nccl_like NL_MIXED_DEVICES=1 XCOLL_NCHANNELS=2 \
    NL_MIXED_TRANSPORTS=P2P bash "$mixed_sh" "$xcollrun" "$mixed" $np all ||
    fail=1
done
echo "== 2 GPU ranks on CUDA device 0, XCOLL_P2P_DISABLE=1: over SHM"
XCOLL_BACKEND=nccl_like NL_MIXED_DEVICES=1 XCOLL_NCHANNELS=2 \
  XCOLL_P2P_DISABLE=1 NL_MIXED_TRANSPORTS=SHM \
  bash "$mixed_sh" "$xcollrun" "$mixed" 2 all || fail=1
echo "== 4 ranks: 0 and 1 on CUDA device 0 (P2P), 2 and 3 host ranks (SHM)"
XCOLL_BACKEND=nccl_like NL_MIXED_DEVICES=1 XCOLL_NCHANNELS=2 \
  NL_MIXED_TRANSPORTS="P2P SHM" bash "$mixed_sh" "$xcollrun" "$mixed" 4 0,1 ||
  fail=1
for proto in ll simple; do
  echo "== desync, mixed ring of 3 (rank 1 on CUDA device 0), XCOLL_PROTO=$proto"
  XCOLL_BACKEND=nccl_like XCOLL_PROTO=$proto XCOLL_TIMEOUT_S=60 \
    FAULT_DESYNC_GPU_RANKS=1 timeout -k 5 120 "$xcollrun" --nproc-per-node 3 \
    --master-port 0 "$desync" op || fail=1
done
if [ -n "$exchange" ]; then
  for spec in "2 0,1" "4 0,1,2,3" "3 1"; do
    read -r np gpu_ranks <<< "$spec"
    echo "== exchange (alltoall(v), gather, scatter, send/recv) on $np ranks, GPU ranks $gpu_ranks"
    XCOLL_BACKEND=nccl_like timeout -k 5 300 "$xcollrun" --nproc-per-node "$np" \
      --master-port 0 "$exchange" --gpu-ranks "$gpu_ranks" || fail=1
  done
fi
exit $fail
