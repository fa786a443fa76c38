#!/bin/sh
# fsdp_checkpoint.sh XTRAIN XCOLLRUN COMPARE [OPTIMIZER]
# FSDP checkpoints (trainer/checkpoint_fsdp.h), 4 ranks x 8 = global batch 32:
#  - full and sharded: a run stopped at step 7 and resumed ends with bitwise
#    the parameters of a straight run;
#  - the full file written by FSDP resumes DDP (2 ranks x 16) and one
#    process (32), and a full file written by DDP resumes FSDP: the same
#    samples per update, so equal to the straight runs of the resuming
#    strategy within float32 summation order (1e-5, as ddp_equivalence);
#  - the same, bitwise, under hybrid_shard (2 simulated nodes of 2 ranks);
#  - a sharded set is refused at another world size, another unit layout,
#    by DDP, and with a broken index, each with a message saying why.
# The last two do not depend on the optimizer: they run with sgd only.
set -eu
xtrain=$1 xcollrun=$2 compare=$3 optimizer=${4:-sgd}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--model mlp --optimizer $optimizer --epochs 2 --train-limit 640 \
  --test-limit 200 --seed 9 --nesterov --schedule cosine --warmup-steps 4"
fsdp="--strategy fsdp --batch-size 8"
ddp="--strategy ddp --batch-size 16"
run() { # run NPROC LOG ARGS...: xtrain under xcollrun, log shown on failure
  n=$1 log=$2
  shift 2
  timeout 60 "$xcollrun" --nproc-per-node "$n" --master-port 0 "$xtrain" \
    $common "$@" > "$log" 2>&1 || { cat "$log"; return 1; }
}
expect_fail() { # expect_fail PATTERN NPROC LOG ARGS...
  pattern=$1
  shift
  if run "$@"; then echo "expected a failure: $*"; exit 1; fi
  grep -q "$pattern" "$2" || { echo "no '$pattern' in:"; cat "$2"; exit 1; }
}

run 4 "$tmp/straight.log" $fsdp --dump-params "$tmp/straight"
for format in full sharded; do
  run 4 "$tmp/$format.1.log" $fsdp --checkpoint-dir "$tmp/$format" \
    --checkpoint-format $format --max-steps 7
  run 4 "$tmp/$format.2.log" $fsdp --checkpoint-dir "$tmp/$format" \
    --checkpoint-format $format --resume --dump-params "$tmp/$format"
  grep -q "resumed from .*step 7" "$tmp/$format.2.log"
  "$compare" 0 "$tmp/straight.rank0" "$tmp/$format.rank0" "$tmp/$format.rank3"
done
test -s "$tmp/full/checkpoint_latest.safetensors"
test -s "$tmp/sharded/checkpoint_latest.index.json"
for r in 0 1 2 3; do
  # one generation left: the one the index names
  test -s "$(echo "$tmp"/sharded/checkpoint_latest.g*.rank$r-of-4.safetensors)"
done

# FSDP full -> DDP and -> one process, and DDP full -> FSDP.
run 4 "$tmp/x.log" $fsdp --checkpoint-dir "$tmp/x" --max-steps 7
cp -r "$tmp/x" "$tmp/y"
run 2 "$tmp/ddp_straight.log" $ddp --dump-params "$tmp/ddp_straight"
run 2 "$tmp/x.2.log" $ddp --checkpoint-dir "$tmp/x" --resume --dump-params "$tmp/ddp_resumed"
grep -q "resumed from .*step 7" "$tmp/x.2.log"
"$compare" 1e-5 "$tmp/ddp_straight.rank0" "$tmp/ddp_resumed.rank0"
"$xtrain" $common --batch-size 32 --dump-params "$tmp/none_straight" > /dev/null
"$xtrain" $common --batch-size 32 --checkpoint-dir "$tmp/y" --resume \
  --dump-params "$tmp/none_resumed" > "$tmp/y.2.log"
grep -q "resumed from .*step 7" "$tmp/y.2.log"
"$compare" 1e-5 "$tmp/none_straight.rank0" "$tmp/none_resumed.rank0"
run 2 "$tmp/z.log" $ddp --checkpoint-dir "$tmp/z" --max-steps 7
run 4 "$tmp/z.2.log" $fsdp --checkpoint-dir "$tmp/z" --resume --dump-params "$tmp/fsdp_from_ddp"
"$compare" 1e-5 "$tmp/straight.rank0" "$tmp/fsdp_from_ddp.rank0"

# What follows does not depend on the optimizer (the hybrid layout shards
# every optimizer state tensor as SGD's momentum; the refusals read only the
# index): the SGD entry runs it, the others stop here.
if [ "$optimizer" != sgd ]; then
  echo "fsdp checkpoints ($optimizer): full and sharded resume bitwise; full across strategies"
  exit 0
fi

# hybrid_shard over 2 simulated nodes of 2 ranks (as fsdp_equivalence.sh
# sets them up): the sharding group is a node; both formats resume bitwise.
. "$(dirname "$0")/../../bench/lib/common.sh"
bench_nodes_wrapper "$tmp/nodes.sh"
hybrid() { # hybrid LOG ARGS...
  log=$1
  shift
  timeout 60 "$xcollrun" --nproc-per-node 4 --master-port 0 sh "$tmp/nodes.sh" 2 \
    "$xtrain" $common $fsdp --sharding hybrid_shard "$@" > "$log" 2>&1 \
    || { cat "$log"; return 1; }
}
hybrid "$tmp/h.log" --dump-params "$tmp/h_straight"
for format in full sharded; do
  hybrid "$tmp/h$format.1.log" --checkpoint-dir "$tmp/h$format" \
    --checkpoint-format $format --max-steps 7
  hybrid "$tmp/h$format.2.log" --checkpoint-dir "$tmp/h$format" \
    --checkpoint-format $format --resume --dump-params "$tmp/h$format"
  "$compare" 0 "$tmp/h_straight.rank0" "$tmp/h$format.rank0" "$tmp/h$format.rank3"
done

# Refusals. The sharded set of 4 ranks at step 40 (the end of the runs above).
s="$tmp/sharded"
expect_fail "written by 4 ranks, but this run has 2" 2 "$tmp/bad1.log" \
  --strategy fsdp --batch-size 16 --checkpoint-dir "$s" --checkpoint-format sharded --resume
expect_fail "unit layout" 4 "$tmp/bad2.log" $fsdp --fsdp-min-params 100000 \
  --checkpoint-dir "$s" --checkpoint-format sharded --resume
expect_fail "is a sharded FSDP checkpoint" 2 "$tmp/bad3.log" $ddp \
  --checkpoint-dir "$s" --resume
sed 's/"world_size"/"world_sizes"/' "$s/checkpoint_latest.index.json" > "$tmp/i"
cp "$tmp/i" "$s/checkpoint_latest.index.json"
expect_fail "world_size is missing" 4 "$tmp/bad4.log" $fsdp \
  --checkpoint-dir "$s" --checkpoint-format sharded --resume
echo '{"format": ' > "$s/checkpoint_latest.index.json"
expect_fail "not valid JSON" 4 "$tmp/bad5.log" $fsdp \
  --checkpoint-dir "$s" --checkpoint-format sharded --resume
echo "fsdp checkpoints: full and sharded resume bitwise; full across strategies; refusals clear"
