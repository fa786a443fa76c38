#!/bin/sh
# fsdp_memory.sh XTRAIN XCOLLRUN N
# With N ranks, the bytes of parameters + gradients + optimizer state (AdamW:
# two state buffers) that each rank holds outside a unit's gather, as xtrain
# counts and prints them, must be at most (1/N + 0.001) of DDP's under
# full_shard, and at least 1/N of it (the shards cover the model).
# shard_grad_op and hybrid_shard hold shards the same way (fsdp.c has one
# layout); gathered buffers are transient and printed separately.
set -eu
xtrain=$1 xcollrun=$2 n=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--model mlp --optimizer adamw --epochs 1 --max-steps 2 \
  --train-limit 512 --test-limit 100 --batch-size 16"
launch() {
  name=$1
  shift
  timeout 45 "$xcollrun" --nproc-per-node "$n" --master-port 0 "$xtrain" "$@" \
    $common > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
}
# Largest count printed by any rank ("memory: rank R holds BYTES bytes").
held() {
  sed -n 's/.*memory: rank [0-9]* holds \([0-9]*\) bytes.*/\1/p' "$tmp/$1.log" |
    sort -n | tail -n 1
}
launch ddp --strategy ddp
ddp=$(held ddp)
status=0
for sharding in full_shard; do
  launch "$sharding" --strategy fsdp --sharding "$sharding"
  lines=$(grep -c "memory: rank [0-9]* holds" "$tmp/$sharding.log")
  if [ "$lines" -ne "$n" ]; then
    echo "FAIL: $sharding: $lines memory lines, want one per rank ($n)"
    status=1
    continue
  fi
  got=$(held "$sharding")
  grep "peak gathered" "$tmp/$sharding.log" || true
  if awk -v got="$got" -v ddp="$ddp" -v n="$n" \
      'BEGIN { exit !(got <= (1 / n + 0.001) * ddp && got * n >= ddp) }'; then
    echo "ok: $sharding at $n ranks holds $got bytes per rank, ddp $ddp: ratio $(awk -v a="$got" -v b="$ddp" 'BEGIN { printf "%.4f", a / b }')"
  else
    echo "FAIL: $sharding at $n ranks holds $got bytes per rank, ddp $ddp (limit 1/$n + 0.001)"
    status=1
  fi
done
exit $status
