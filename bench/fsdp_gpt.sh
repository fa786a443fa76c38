#!/bin/sh
# fsdp_gpt.sh - xtrain's FSDP beside PyTorch's FSDP2 on the same gpt, the
# same per-rank batch and number of ranks, in one run: bytes each rank
# holds, peak RSS, bytes on the wire, step time and samples/s.
#
# Rows (VARIANTS, names separated by spaces):
#   xtrain.full_shard          xtrain --strategy fsdp --sharding full_shard
#   xtrain.shard_grad_op       ... --sharding shard_grad_op
#   xtrain.hybrid_shard        ... --sharding hybrid_shard over simulated nodes
#                              of NODE_RANKS ranks (LOCAL_WORLD_SIZE and
#                              LOCAL_RANK set as xcollrun --nnodes would)
#   fsdp2.full_shard.B         bench/gpt_torch.py --strategy fsdp2
#                              --reshard-after-forward on, FSDP2's groups on
#                              backend B (gloo, or xcoll through xcoll_torch)
#   fsdp2.shard_grad_op.B      ... --reshard-after-forward off
#   fsdp2.hybrid_shard.B       ... on, over a 2-D mesh (replicate
#                              RANKS/NODE_RANKS, shard NODE_RANKS)
# xtrain talks through xcoll (XCOLL_BACKEND, tcp unless set), as do the
# xcoll rows of FSDP2; gloo's are PyTorch's own.
#
# Columns (docs/trainer.md, "xtrain FSDP beside PyTorch FSDP2"):
#   held: the largest over the ranks of the parameters + gradients +
#     optimizer state a rank holds between steps (xtrain's "memory: rank N
#     holds" lines; FSDP2: the bytes of the local shards, DTensor.to_local(),
#     AdamW's step counters included);
#   peak RSS: rank 0's peak resident set (xtrain VmHWM, PyTorch ru_maxrss;
#     the Python process counts the torch libraries);
#   wire B/step: bytes each rank sends per update by the ring model
#     (xtrain's own count; FSDP2's counted from the sizes of the
#     collectives it calls: bench/gpt_torch.py, WireCounter);
#   step ms and samples/s over the counted updates.
#
# Timing as bench/gpt.sh: every run makes STEPS updates, the first WARMUP
# not counted (xtrain logs every WARMUP updates and the figures come from
# the records after the first; PyTorch runs WARMUP untimed updates, then
# times as many as xtrain counts). REPEAT rounds, the variants taking turns
# within each round, so that load from other jobs falls on all alike; the
# table gives medians with the range over the rounds.
#
# usage: bench/fsdp_gpt.sh [BUILD_DIR]    (default: build; xcoll_torch is
#        taken from BUILD_DIR/integrations/torch)
# env:   RANKS (4) NODE_RANKS (2) N_LAYER (4) N_HEAD (4) D_MODEL (128)
#        CONTEXT (64) BATCH (16 per rank) STEPS (100) WARMUP (10) REPEAT (3)
#        LR (0.001) TEST_LIMIT (64 validation windows) VARIANTS (all above)
#        PYTHON, BENCH_DIR, BENCH_ROUND (bench/lib/common.sh; PYTHON needs
#        PyTorch >= 2.6 for fully_shard)
# Exit status 77 when PYTHON cannot import fully_shard or xcoll_torch.
set -eu
bench=fsdp_gpt.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
bench_setup "${1:-build}"
bench_gpt_settings
repeat=${REPEAT:-3}
variants=${VARIANTS:-"xtrain.full_shard fsdp2.full_shard.gloo fsdp2.full_shard.xcoll
  xtrain.shard_grad_op fsdp2.shard_grad_op.gloo fsdp2.shard_grad_op.xcoll
  xtrain.hybrid_shard fsdp2.hybrid_shard.gloo fsdp2.hybrid_shard.xcoll"}
# shellcheck disable=SC2086
variants=$(echo $variants) # one line, single spaces
export PYTHONPATH="$build/integrations/torch${PYTHONPATH:+:$PYTHONPATH}"
case " $variants" in
  *" fsdp2."*)
    bench_need_python "from torch.distributed.fsdp import fully_shard; import xcoll_torch" \
      "import fully_shard (PyTorch >= 2.6) and xcoll_torch (a build with -DXCOLL_WITH_TORCH=ON)" ;;
esac

# run VARIANT ROUND: one run; its log (and xtrain's JSON records) into $tmp.
run() {
  v=$1 round=$2
  launch="$xcollrun --nproc-per-node $ranks --master-port 0"
  case $v in
    xtrain.*)
      sharding=${v#xtrain.}
      [ "$sharding" = hybrid_shard ] && launch="$launch sh $tmp/nodes.sh $node_ranks"
      # shellcheck disable=SC2086
      $launch "$xtrain" --strategy fsdp --sharding "$sharding" --model gpt \
        --n-layer "$n_layer" --n-head "$n_head" --d-model "$d_model" --context "$context" \
        --optimizer adamw --lr "$lr" --weight-decay 0 --epochs 1 --max-steps "$steps" \
        --log-every "$warmup" --test-limit "$test_limit" --threads 1 --progress-every 0 \
        --batch-size "$batch" --log-json "$tmp/$v.$round.json" > "$tmp/$v.$round.log" 2>&1 ;;
    fsdp2.*.*)
      backend=${v##*.} sharding=${v#fsdp2.}
      sharding=${sharding%.*}
      case $sharding in
        full_shard) flags="--reshard-after-forward on" ;;
        shard_grad_op) flags="--reshard-after-forward off" ;;
        hybrid_shard) flags="--reshard-after-forward on --node-ranks $node_ranks" ;;
        *) bench_fail "unknown variant $v" ;;
      esac
      # shellcheck disable=SC2086
      XCOLLRUN_PYTHON=$python $launch "$here/gpt_torch.py" --strategy fsdp2 \
        --backend "$backend" $flags --n-layer "$n_layer" --n-head "$n_head" \
        --d-model "$d_model" --context "$context" --batch-size "$batch" --lr "$lr" \
        --weight-decay 0 --warmup "$warmup" --steps "$timed" --threads 1 \
        > "$tmp/$v.$round.log" 2>&1 ;;
    *) bench_fail "unknown variant $v" ;;
  esac || { cat "$tmp/$v.$round.log"; bench_fail "$v failed"; }
}

bench_rounds "$repeat"
for round in $rounds; do
  bench_round_begin "$round"
  for v in $variants; do
    run "$v" "$round"
  done
  bench_round_end "$round" "$repeat"
done
bench_table_wanted || exit 0

bench_command "RANKS=$ranks" "NODE_RANKS=$node_ranks" "N_LAYER=$n_layer" "N_HEAD=$n_head" \
  "D_MODEL=$d_model" "CONTEXT=$context" "BATCH=$batch" "STEPS=$steps" "WARMUP=$warmup" \
  "REPEAT=$repeat" "LR=$lr" "TEST_LIMIT=$test_limit" "VARIANTS=$variants" "PYTHON=$python"
echo "gpt: $n_layer layers, $n_head heads, d_model $d_model, context $context;" \
  "$ranks ranks x batch $batch; AdamW lr $lr; $steps updates, the first $warmup" \
  "not counted ($timed counted); 1 thread per rank; XCOLL_BACKEND ${XCOLL_BACKEND:-tcp};" \
  "$cores cores; median of $repeat interleaved round(s)"
bench_loads "$repeat"

"$python" - "$tmp" "$repeat" "$variants" <<'PY'
import json, re, statistics, sys
tmp, repeat, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

def xtrain_run(path):
    recs = [json.loads(l) for l in open(path + ".json")]
    steps = [r for r in recs if r["event"] == "step"][1:]  # drop the warm-up record
    summary = [r for r in recs if r["event"] == "summary"][-1]
    held = [tuple(int(x) for x in m) for m in re.findall(
        r"memory: rank \d+ holds (\d+) bytes.*?parameters (\d+), gradients (\d+), "
        r"optimizer (\d+)", open(path + ".log", errors="replace").read())]
    seconds = sum(r["step_time_s"] for r in steps)
    return {"held": max(held), "rss": summary["peak_rss_bytes"],
            "wire": statistics.median(r["wire_bytes_per_step"] for r in steps),
            "step_ms": 1e3 * seconds / len(steps),
            "sps": sum(r["samples_per_s"] * r["step_time_s"] for r in steps) / seconds}

def torch_run(path):
    for line in open(path + ".log", errors="replace"):
        line = re.sub(r"^\[rank \d+\] ", "", line.strip())
        if line.startswith("{"):
            r = json.loads(line)
            return {"held": (r["held_bytes"], r["held_params_bytes"],
                             r["held_grads_bytes"], r["held_optim_bytes"]),
                    "rss": r["peak_rss_bytes"], "wire": r["wire_bytes_per_step"],
                    "step_ms": r["step_ms"], "sps": r["samples_per_s"]}
    sys.exit("fsdp_gpt.sh: no result line in %s.log" % path)

def cell(values, fmt):
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return (fmt + " (" + fmt + "-" + fmt + ")").format(med, min(values), max(values))

print()
print("| variant | held B/rank (params + grads + optim) | peak RSS MiB (rank 0) "
      "| wire B/step | step ms | samples/s |")
print("|---|---|---|---|---|---|")
for v in variants:
    read = xtrain_run if v.startswith("xtrain.") else torch_run
    runs = [read("%s/%s.%d" % (tmp, v, r)) for r in range(1, repeat + 1)]
    held = max(r["held"] for r in runs)
    print("| %s | {:,} ({:,} + {:,} + {:,}) | %s | %s | %s | %s |".format(*held) % (
        v, cell([r["rss"] / 2**20 for r in runs], "{:.1f}"),
        cell([r["wire"] for r in runs], "{:,.0f}"),
        cell([r["step_ms"] for r in runs], "{:.1f}"),
        cell([r["sps"] for r in runs], "{:.0f}")))
PY
