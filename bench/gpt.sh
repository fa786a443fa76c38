#!/bin/sh
# gpt.sh - xtrain's strategies side by side on one gpt configuration, in one
# run, and xtrain's DDP against PyTorch's (gloo) on the same configuration.
#
# Rows (VARIANTS, names separated by spaces):
#   ddp              RANKS ranks, --strategy ddp
#   full_shard       --strategy fsdp --sharding full_shard
#   shard_grad_op    --strategy fsdp --sharding shard_grad_op
#   hybrid_shard     --strategy fsdp --sharding hybrid_shard over simulated
#                    nodes of NODE_RANKS ranks (a wrapper sets LOCAL_WORLD_SIZE,
#                    LOCAL_RANK, GROUP_RANK, GROUP_WORLD_SIZE as
#                    xcollrun --nnodes RANKS/NODE_RANKS would)
#   ddp_bf16         ddp --reduce-dtype bfloat16
#   full_shard_bf16  fsdp full_shard --param-dtype bfloat16 --reduce-dtype bfloat16
#   dp               --strategy dp --dp-devices RANKS: one process, RANKS
#                    threads, the same global batch (RANKS x BATCH)
#   torch            bench/gpt_torch.py: PyTorch DDP over gloo, RANKS ranks
#                    through xcollrun; run right after ddp in every round
# plus a line on PyTorch FSDP (bench/gpt_torch.py --check-fsdp; run with
# --strategy fsdp when it imports).
#
# Timing: every run makes STEPS updates; the first WARMUP are not counted.
# xtrain logs every WARMUP updates (--log-every WARMUP) and the figures come
# from the step records after the first one (floor(STEPS/WARMUP)-1 records);
# PyTorch runs WARMUP untimed updates and then times the same number of
# updates. Step time, samples/s, comm per step and the share of
# communication hidden (1 - blocked/comm over the counted records) are
# xtrain's own accounting, wire B/step its ring model of the bytes each
# rank sends per update (docs/trainer.md, "Wire bytes").
# Memory: "held" is the largest of the ranks' "memory: rank N holds" lines
# (parameters + gradients + optimizer state outside gathers; for dp the
# process: RANKS replicas' parameters and gradients, one optimizer state);
# "peak gathered" the most bytes of gathered parameters and unsharded
# gradients at once (fsdp); RSS rank 0's peak resident set (VmHWM).
#
# REPEATS rounds, the variants taking turns within each round (ddp and
# torch back to back), so that load from other jobs falls on all alike;
# the tables give medians with the range over the rounds, and the
# xtrain/PyTorch ratio is taken per round.
#
# usage: bench/gpt.sh [BUILD_DIR]    (default: build)
# env:   N_LAYER (4) N_HEAD (4) D_MODEL (128) CONTEXT (64) BATCH (16 per rank)
#        STEPS (100) WARMUP (10) RANKS (4) NODE_RANKS (2) REPEATS (1)
#        LR (0.001) TEST_LIMIT (64 validation windows) VARIANTS (all above)
#        PYTHON, BENCH_DIR, BENCH_ROUND (bench/lib/common.sh; PYTHON needs
#        torch when VARIANTS has torch)
# Exit status 77 when VARIANTS has torch and PYTHON cannot import torch.
set -eu
bench=gpt.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
bench_setup "${1:-build}"
bench_gpt_settings
repeats=${REPEATS:-1}
variants=${VARIANTS:-"ddp torch full_shard shard_grad_op hybrid_shard ddp_bf16 full_shard_bf16 dp"}
# shellcheck disable=SC2086
variants=$(echo $variants) # one line, single spaces
case " $variants " in
  *" torch "*) bench_need_python "import torch" "import torch (PyTorch's rows)" ;;
esac

gpt="--model gpt --n-layer $n_layer --n-head $n_head --d-model $d_model --context $context"
common="$gpt --optimizer adamw --lr $lr --weight-decay 0 --epochs 1 \
  --max-steps $steps --log-every $warmup --test-limit $test_limit --threads 1 \
  --progress-every 0"

# run_xtrain NAME ROUND: one run of a variant; its log and JSON into $tmp.
run_xtrain() {
  name=$1 round=$2
  launch="$xcollrun --nproc-per-node $ranks --master-port 0"
  b=$batch
  case $name in
    ddp) flags="--strategy ddp" ;;
    full_shard) flags="--strategy fsdp --sharding full_shard" ;;
    shard_grad_op) flags="--strategy fsdp --sharding shard_grad_op" ;;
    hybrid_shard) flags="--strategy fsdp --sharding hybrid_shard"
                  launch="$launch sh $tmp/nodes.sh $node_ranks" ;;
    ddp_bf16) flags="--strategy ddp --reduce-dtype bfloat16" ;;
    full_shard_bf16) flags="--strategy fsdp --sharding full_shard --param-dtype bfloat16 --reduce-dtype bfloat16" ;;
    dp) flags="--strategy dp --dp-devices $ranks"
        launch=""
        b=$((batch * ranks)) ;;
    *) bench_fail "unknown variant $name" ;;
  esac
  # shellcheck disable=SC2086
  $launch "$xtrain" $flags $common --batch-size "$b" \
    --log-json "$tmp/$name.$round.json" > "$tmp/$name.$round.log" 2>&1 ||
    { cat "$tmp/$name.$round.log"; bench_fail "$name failed"; }
}

run_torch() {
  XCOLLRUN_PYTHON=$python "$xcollrun" --nproc-per-node "$ranks" --master-port 0 \
    "$here/gpt_torch.py" --strategy "$1" --n-layer "$n_layer" --n-head "$n_head" \
    --d-model "$d_model" --context "$context" --batch-size "$batch" --lr "$lr" \
    --weight-decay 0 --warmup "$warmup" --steps "$timed" --threads 1 \
    > "$tmp/torch$1.$2.log" 2>&1
}

# Whether PyTorch's FSDP imports, asked once per BENCH_DIR.
bench_rounds "$repeats"
if [ -n "$rounds" ] && [ ! -f "$tmp/fsdp_check.rc" ]; then
  rc=0
  "$python" "$here/gpt_torch.py" --check-fsdp > "$tmp/fsdp_check" 2>&1 || rc=$?
  echo "$rc" > "$tmp/fsdp_check.rc"
fi
torch_fsdp=no
[ "$(cat "$tmp/fsdp_check.rc" 2>/dev/null)" = 0 ] && torch_fsdp=yes

for round in $rounds; do
  bench_round_begin "$round"
  for v in $variants; do
    if [ "$v" = torch ]; then
      run_torch ddp "$round" ||
        { cat "$tmp/torchddp.$round.log"; bench_fail "PyTorch DDP failed"; }
      if [ $torch_fsdp = yes ]; then
        run_torch fsdp "$round" || true # the log says why; reported below
      fi
    else
      run_xtrain "$v" "$round"
    fi
  done
  bench_round_end "$round" "$repeats"
done
bench_table_wanted || exit 0

bench_command "N_LAYER=$n_layer" "N_HEAD=$n_head" "D_MODEL=$d_model" "CONTEXT=$context" \
  "BATCH=$batch" "STEPS=$steps" "WARMUP=$warmup" "RANKS=$ranks" "NODE_RANKS=$node_ranks" \
  "REPEATS=$repeats" "LR=$lr" "TEST_LIMIT=$test_limit" "VARIANTS=$variants" "PYTHON=$python"
echo "gpt: $n_layer layers, $n_head heads, d_model $d_model, context $context;" \
  "$ranks ranks x batch $batch (dp: 1 process x $ranks threads x batch $((ranks * batch)));" \
  "AdamW lr $lr; $steps updates, the first $warmup not counted ($timed counted);" \
  "1 thread per rank; XCOLL_BACKEND ${XCOLL_BACKEND:-tcp}; $cores cores;" \
  "median of $repeats interleaved round(s)"
bench_loads "$repeats"

"$python" - "$tmp" "$repeats" "$warmup" "$variants" "$torch_fsdp" <<'PY'
import json, os, re, statistics, sys
tmp, repeats, warmup, variants, torch_fsdp = sys.argv[1:6]
repeats, warmup = int(repeats), int(warmup)
variants = variants.split()

def med(v):
    return statistics.median(v)

def cell(v, fmt):
    if len(v) == 1:
        return fmt % v[0]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (med(v), min(v), max(v))

def xtrain_run(name, rnd):
    recs = [json.loads(l) for l in open("%s/%s.%d.json" % (tmp, name, rnd))]
    steps = [r for r in recs if r["event"] == "step"][1:]  # drop the warm-up record
    summary = [r for r in recs if r["event"] == "summary"][-1]
    log = open("%s/%s.%d.log" % (tmp, name, rnd), errors="replace").read()
    held = [tuple(int(x) for x in m) for m in re.findall(
        r"memory: rank \d+ holds (\d+) bytes.*?parameters (\d+), gradients (\d+), optimizer (\d+)", log)]
    comm = sum(r["comm_time_s"] for r in steps)
    blocked = sum((1 - r["overlap"]) * r["comm_time_s"] for r in steps)
    step_s = statistics.mean(r["step_time_s"] for r in steps)
    return {
        "held": max(held) if held else (0, 0, 0, 0),
        "gathered": summary["peak_gathered_bytes"],
        "rss": summary["peak_rss_bytes"],
        "wire": med([r["wire_bytes_per_step"] for r in steps]),
        "step_ms": 1e3 * step_s,
        # samples per counted update / time; the records' samples_per_s
        # are per record, this is over all counted records
        "sps": sum(r["samples_per_s"] * r["step_time_s"] for r in steps) / sum(
            r["step_time_s"] for r in steps),
        "comm_ms": 1e3 * comm / len(steps),
        "hidden": 1 - blocked / comm if comm > 0 else 0.0,
        "loss": steps[-1]["loss"],
    }

def torch_run(strategy, rnd):
    path = "%s/torch%s.%d.log" % (tmp, strategy, rnd)
    if not os.path.exists(path):
        return None
    for line in open(path, errors="replace"):
        line = re.sub(r"^\[rank \d+\] ", "", line.strip())
        if line.startswith("{"):
            return json.loads(line)
    return None

names = {
    "ddp": "ddp", "full_shard": "fsdp full_shard", "shard_grad_op": "fsdp shard_grad_op",
    "hybrid_shard": "fsdp hybrid_shard (2 simulated nodes)",
    "ddp_bf16": "ddp --reduce-dtype bfloat16",
    "full_shard_bf16": "fsdp full_shard, param+reduce bfloat16",
    "dp": "dp (1 process, threads)"}
rows = [v for v in variants if v != "torch"]
runs = {v: [xtrain_run(v, r) for r in range(1, repeats + 1)] for v in rows}
print()
print("| variant | held B/rank (params + grads + optim) | peak gathered B | peak RSS MiB (rank 0) "
      "| wire B/step | step ms | samples/s | comm ms/step | hidden | loss at end |")
print("|---|---|---|---|---|---|---|---|---|---|")
for v in rows:
    rs = runs[v]
    h = rs[0]["held"]
    print("| %s | %s (%s + %s + %s) | %s | %s | %s | %s | %s | %s | %s | %.4f |" % (
        names.get(v, v), "{:,}".format(h[0]), "{:,}".format(h[1]), "{:,}".format(h[2]),
        "{:,}".format(h[3]), "{:,}".format(int(med([r["gathered"] for r in rs]))),
        cell([r["rss"] / 2**20 for r in rs], "%.1f"),
        "{:,}".format(int(med([r["wire"] for r in rs]))),
        cell([r["step_ms"] for r in rs], "%.1f"), cell([r["sps"] for r in rs], "%.0f"),
        cell([r["comm_ms"] for r in rs], "%.1f"),
        cell([100 * r["hidden"] for r in rs], "%.0f%%") if any(r["comm_ms"] > 0 for r in rs)
        else "n/a", med([r["loss"] for r in rs])))
if "dp" in rows:
    print("\ndp: one process; its held bytes count all its replicas, and its wire "
          "bytes are 0 (replicate and reduce are memory copies).")

if "torch" in variants and "ddp" in rows:
    x = [r["sps"] for r in runs["ddp"]]
    t = [torch_run("ddp", r)["samples_per_s"] for r in range(1, repeats + 1)]
    ratios = [a / b for a, b in zip(x, t)]
    print("\nxtrain DDP (xcoll, tcp) against PyTorch %s DDP (gloo), same gpt, "
          "per-rank batch, updates counted, 1 thread per rank:\n" % torch_run("ddp", 1)["torch"])
    print("| xtrain ddp samples/s | PyTorch ddp samples/s | ratio xtrain / PyTorch |")
    print("|---|---|---|")
    print("| %s | %s | %s |" % (cell(x, "%.0f"), cell(t, "%.0f"),
                                cell(ratios, "%.2fx")))
    xp = re.search(r"context \d+, (\d+) parameters",
                   open("%s/ddp.1.log" % tmp, errors="replace").read())
    print("\nparameters: xtrain %s, PyTorch %d" % (
        xp.group(1) if xp else "?", torch_run("ddp", 1)["parameters"]))

check = json.loads(open(os.path.join(tmp, "fsdp_check")).read().strip().splitlines()[-1])
if torch_fsdp != "yes":
    print("\nPyTorch FSDP: not run: Debian's torch %s under Python %s cannot use it: %s" % (
        check.get("torch"), check.get("python"), check.get("reason")))
elif "torch" in variants:
    got = [torch_run("fsdp", r) for r in range(1, repeats + 1)]
    if any(g is None or "samples_per_s" not in g for g in got):
        bad = [g for g in got if g is not None and "reason" in g]
        print("\nPyTorch FSDP: imports, but did not run on CPU: %s" % (
            bad[0]["reason"] if bad else "see its log (no result line)"))
    else:
        print("\nPyTorch FSDP (FULL_SHARD, gloo, CPU): %s samples/s; xtrain fsdp "
              "full_shard / PyTorch FSDP: %s" % (
                  cell([g["samples_per_s"] for g in got], "%.0f"),
                  cell([a["sps"] / g["samples_per_s"] for a, g in
                        zip(runs.get("full_shard", []), got)] or [0], "%.2fx")))
PY
