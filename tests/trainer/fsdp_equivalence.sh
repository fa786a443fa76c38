#!/bin/sh
# fsdp_equivalence.sh [--model mlp|gpt] XTRAIN XCOLLRUN COMPARE N OPTIMIZER RTOL VARIANT...
# Each VARIANT is "SHARDING[:LWS] [FLAG...]": N ranks under --strategy fsdp
# --sharding SHARDING with per-rank batch 16 (FLAGs added: a prefetch mode,
# --fsdp-min-params, --grad-accum K) for 10 updates must give the parameters
# of N DDP ranks with the same batch and accumulation, and of one process
# with batch 16*N*K, within RTOL (relative L2, as ddp_equivalence.sh), and
# every rank's gathered dump must be bitwise identical. LWS simulates nodes
# of that many ranks (hybrid_shard). The references are made once per K.
# --model gpt runs a tiny transformer (2 blocks, 2 heads, d_model 16,
# context 16: one FSDP unit per block) on the first 960 windows of the
# fortunes instead of the MLP on Fashion-MNIST.
set -eu
model=mlp
if [ "$1" = --model ]; then
  model=$2
  shift 2
fi
xtrain=$1 xcollrun=$2 compare=$3 n=$4 optimizer=$5 rtol=$6
shift 6
b=16
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 960 samples: divisible by N*16 for N = 2, 3, 4. Clipping at 0.5 is active
# in the first updates (norms about 1 to 2), so the global norm over shards
# is part of what is compared.
model_flags="--model mlp"
if [ "$model" = gpt ]; then
  model_flags="--model gpt --n-layer 2 --n-head 2 --d-model 16 --context 16"
fi
common="$model_flags --optimizer $optimizer --epochs 1 --max-steps 10 \
  --train-limit 960 --test-limit 200 --seed 3 --weight-decay 0.01 \
  --momentum 0.9 --nesterov --clip-grad-norm 0.5"
# reference K: the one-process and DDP runs for --grad-accum K, once.
reference() {
  [ -s "$tmp/single$1.rank0" ] && return 0
  "$xtrain" --strategy none --batch-size $((n * b * $1)) $common \
    --dump-params "$tmp/single$1" > "$tmp/single$1.log"
  timeout 40 "$xcollrun" --nproc-per-node "$n" --master-port 0 "$xtrain" \
    --strategy ddp --batch-size $b --grad-accum "$1" $common \
    --dump-params "$tmp/ddp$1" > "$tmp/ddp$1.log" 2>&1 \
    || { cat "$tmp/ddp$1.log"; exit 1; }
}
# Nodes of LWS ranks out of one xcollrun: a wrapper rewrites the launcher's
# variables as a launch with --nnodes N/LWS would set them (the benchmarks'
# bench_nodes_wrapper).
. "$(dirname "$0")/../../bench/lib/common.sh"
bench_nodes_wrapper "$tmp/nodes.sh"
v=0
for variant in "$@"; do
  v=$((v + 1))
  set -- $variant
  sharding=${1%%:*}
  wrap=""
  case $1 in *:*) wrap="sh $tmp/nodes.sh ${1#*:}" ;; esac
  shift
  accum=1
  case " $* " in *" --grad-accum "*) accum=$(echo "$*" | sed 's/.*--grad-accum \([0-9]*\).*/\1/') ;; esac
  reference "$accum"
  echo "== fsdp $variant: $n ranks"
  # shellcheck disable=SC2086
  timeout 40 "$xcollrun" --nproc-per-node "$n" --master-port 0 $wrap "$xtrain" \
    --strategy fsdp --sharding "$sharding" --batch-size $b $common "$@" \
    --dump-params "$tmp/fsdp$v" > "$tmp/fsdp$v.log" 2>&1 \
    || { cat "$tmp/fsdp$v.log"; exit 1; }
  grep "fsdp: [0-9]* ranks" "$tmp/fsdp$v.log"
  files=""
  r=0
  while [ $r -lt "$n" ]; do files="$files $tmp/fsdp$v.rank$r"; r=$((r + 1)); done
  echo "all ranks identical:"
  "$compare" 0 "$tmp/fsdp$v.rank0" $files
  echo "vs ddp ($n x $b x accum $accum):"
  "$compare" "$rtol" "$tmp/ddp$accum.rank0" "$tmp/fsdp$v.rank0"
  echo "vs one process (batch $((n * b * accum))):"
  "$compare" "$rtol" "$tmp/single$accum.rank0" "$tmp/fsdp$v.rank0"
done
