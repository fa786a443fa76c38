#!/usr/bin/env bash
# ib_hw.sh - the nccl_like conformance suite over XCOLL_NET=ibverbs on a real
# RDMA device, or exit 77 (ctest SKIP_RETURN_CODE) with the reason when
# ibv_get_device_list of the real libibverbs lists none.
#   ib_hw.sh PROBE XCOLLRUN CONFORMANCE
set -u
probe=$1
xcollrun=$2
conformance=$3
unset XCOLL_IBVERBS_LIB
"$probe" || exit 77
fail=0
for np in 2 3 4; do
  for proto in simple ll; do
    echo "== $np ranks, XCOLL_PROTO=$proto, real device"
    XCOLL_PROTO=$proto timeout -k 5 120 "$xcollrun" --nproc-per-node $np \
      --master-port 0 "$conformance" --backend nccl_like --quick || fail=1
  done
done
exit $fail
