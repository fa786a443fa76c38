#!/bin/sh
# fsdp_gpt_bench.sh SCRIPT BUILD_DIR PYTHON
# Smoke test of bench/fsdp_gpt.sh (xtrain's FSDP beside PyTorch's FSDP2 on
# the gpt) at tiny sizes: 2 ranks, hybrid over 2 simulated nodes of 1, one
# round of 4 updates. Every row of the table must be there with a number in
# each of its five columns, the held bytes the sum of their parts and the
# gradients as many bytes as the parameters (float32 both). The speed is not
# judged. Exit 77 (skipped) when the script says PyTorch cannot run FSDP2.
set -u
script=$1 build=$2 python=$3
out=$(RANKS=2 NODE_RANKS=1 N_LAYER=1 N_HEAD=2 D_MODEL=16 CONTEXT=8 BATCH=2 \
  STEPS=4 WARMUP=2 REPEAT=1 TEST_LIMIT=2 PYTHON=$python sh "$script" "$build" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: bench/fsdp_gpt.sh exited $rc"; exit 1; }
for v in xtrain.full_shard xtrain.shard_grad_op xtrain.hybrid_shard \
    fsdp2.full_shard.gloo fsdp2.full_shard.xcoll fsdp2.shard_grad_op.gloo \
    fsdp2.shard_grad_op.xcoll fsdp2.hybrid_shard.gloo fsdp2.hybrid_shard.xcoll; do
  row=$(echo "$out" | grep -F "| $v |") || { echo "FAIL: no row $v"; exit 1; }
  # | name | held (p + g + o) | rss | wire | step ms | samples/s |
  echo "$row" | tr -d ', ' | awk -F'|' -v name="$v" '
    function fail(why) { print "FAIL: " name ": " why; bad = 1; exit 1 }
    NF != 8 { fail("expected 6 columns, got " NF - 2) }
    $3 !~ /^[0-9]+\([0-9]+\+[0-9]+\+[0-9]+\)$/ { fail("held is not N (P + G + O): " $3) }
    {
      split($3, held, /[(+)]/)
      if (held[1] != held[2] + held[3] + held[4]) fail("held " held[1] " is not the sum of its parts")
      if (held[2] == 0 || held[2] != held[3]) fail("parameters " held[2] " and gradients " held[3] " differ or are 0")
      for (i = 4; i <= 7; i++)
        if ($i !~ /^[0-9]+(\.[0-9]+)?$/ || $i + 0 <= 0) fail("column " i - 1 " is not a positive number: " $i)
    }' || exit 1
done
echo "every row of the table has its five figures"
