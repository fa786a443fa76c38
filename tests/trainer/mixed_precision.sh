#!/bin/sh
# mixed_precision.sh XTRAIN XCOLLRUN MODE
# Mixed precision and DDP communication hooks, 2 ranks, MLP on Fashion-MNIST.
#  accuracy:   one epoch of 30000 samples, tested on all 10000: ddp with
#              --reduce-dtype bfloat16, fsdp with bfloat16 parameters and
#              reduction, and ddp with PowerSGD rank 4 (compressing from the
#              first step) each end within 1 point of the float32 run of the
#              same strategy.
#  wire:       the logged wire bytes per step: fp16/bf16 hooks (and
#              --reduce-dtype bfloat16) exactly half of none, which is the
#              model's 4 * 269322 bytes; PowerSGD exactly
#              4 * (sum of r (n + m) over compressed matrices + the elements
#              of the others) after its warmup and none's before; fsdp with
#              bfloat16 parameters and reduction exactly half of float32.
#              (With 2 ranks the ring model sends each all-reduce's input
#              once, so these are the formulas themselves.)
#  loss_scale: float16 reduction (ddp) and float16 parameters and reduction
#              (fsdp) from --init-scale 2^40, which overflows: the first
#              steps are skipped, the scale halves on each, grows after
#              --scale-growth-interval good steps (every step's log record is
#              replayed against GradScaler's rules), and the run recovers:
#              loss falls and test accuracy passes 65%.
set -eu
xtrain=$1 xcollrun=$2 mode=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # name, xtrain flags...
  name=$1
  shift
  timeout 120 "$xcollrun" --nproc-per-node 2 --master-port 0 "$xtrain" \
    --log-json "$tmp/$name.json" "$@" > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; exit 1; }
}

case $mode in
accuracy)
  common="--model mlp --epochs 1 --train-limit 30000 --seed 0"
  run ddp32 --strategy ddp $common
  run ddp_bf16 --strategy ddp --reduce-dtype bfloat16 $common
  run fsdp32 --strategy fsdp $common
  run fsdp_bf16 --strategy fsdp --param-dtype bfloat16 --reduce-dtype bfloat16 $common
  run powersgd --strategy ddp --comm-hook powersgd --powersgd-rank 4 \
    --powersgd-warmup 0 $common
  python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def acc(name):
    recs = [json.loads(l) for l in open(f"{tmp}/{name}.json")]
    return [r for r in recs if r.get("event") == "epoch"][-1]["test_acc"]
a = {n: acc(n) for n in ["ddp32", "ddp_bf16", "fsdp32", "fsdp_bf16", "powersgd"]}
print("test accuracy:", ", ".join(f"{n} {v:.4f}" for n, v in a.items()))
bad = []
for low, ref in [("ddp_bf16", "ddp32"), ("fsdp_bf16", "fsdp32"), ("powersgd", "ddp32")]:
    if a[low] < a[ref] - 0.01:
        bad.append(f"{low} {a[low]:.4f} is more than 1 point below {ref} {a[ref]:.4f}")
if a["ddp32"] < 0.75:
    bad.append(f"float32 itself only reached {a['ddp32']:.4f}: the run is too short to mean anything")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
  ;;
wire)
  common="--model mlp --epochs 1 --max-steps 6 --train-limit 960 --test-limit 200 --log-every 1"
  run none --strategy ddp $common
  run fp16 --strategy ddp --comm-hook fp16 $common
  run bf16 --strategy ddp --comm-hook bf16 $common
  run reduce_bf16 --strategy ddp --reduce-dtype bfloat16 $common
  run psgd4 --strategy ddp --comm-hook powersgd --powersgd-rank 4 --powersgd-warmup 2 $common
  run psgd1 --strategy ddp --comm-hook powersgd --powersgd-warmup 0 $common
  run fsdp32 --strategy fsdp $common
  run fsdp_bf16 --strategy fsdp --param-dtype bfloat16 --reduce-dtype bfloat16 $common
  python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def steps(name):
    recs = [json.loads(l) for l in open(f"{tmp}/{name}.json")]
    return [r["wire_bytes_per_step"] for r in recs if r.get("event") == "step"]
# MLP 784-256-256-10: weights (rows n = outputs, columns m = inputs), biases.
matrices = [(256, 784), (256, 256), (10, 256)]
biases = [256, 256, 10]
total = sum(n * m for n, m in matrices) + sum(biases)
def powersgd(r):
    elems = sum(biases)
    for n, m in matrices:
        elems += r * (n + m) if r * (n + m) < n * m else n * m
    return 4 * elems
bad = []
def expect(name, got, want):
    ok = all(g == w for g, w in zip(got, want)) and len(got) == len(want)
    print(f"{name}: {got[0]:.0f} B/step{'' if len(set(got)) == 1 else ' then ' + str(sorted(set(got)))}",
          "ok" if ok else f"WANT {want}")
    if not ok:
        bad.append(name)
none = steps("none")
expect("none", none, [4 * total] * 6)
for h in ["fp16", "bf16", "reduce_bf16"]:
    expect(h, steps(h), [x / 2 for x in none])
expect("powersgd rank 4, warmup 2", steps("psgd4"), [4 * total] * 2 + [powersgd(4)] * 4)
expect("powersgd rank 1", steps("psgd1"), [powersgd(1)] * 6)
f32 = steps("fsdp32")
print(f"fsdp float32: {f32[0]:.0f} B/step")
if not f32 or min(f32) <= 0 or len(set(f32)) != 1:
    bad.append("fsdp float32")
expect("fsdp bfloat16", steps("fsdp_bf16"), [x / 2 for x in f32])
if bad:
    sys.exit(1)
PY
  ;;
loss_scale)
  common="--model mlp --epochs 2 --train-limit 6000 --test-limit 2000 --log-every 1 \
    --init-scale 1099511627776 --scale-growth-interval 20"
  run ddp_fp16 --strategy ddp --reduce-dtype float16 $common
  run fsdp_fp16 --strategy fsdp --param-dtype float16 --reduce-dtype float16 $common
  python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
bad = []
for name in ["ddp_fp16", "fsdp_fp16"]:
    recs = [json.loads(l) for l in open(f"{tmp}/{name}.json")]
    steps = [r for r in recs if r.get("event") == "step"]
    scale, skipped, good, grown = 2.0 ** 40, 0, 0, 0
    for r in steps:
        if r["skipped_steps"] == skipped + 1:
            want = scale / 2
            skipped, good = skipped + 1, 0
        else:
            good += 1
            want = scale
            if good == 20:
                want, good, grown = scale * 2, 0, grown + 1
        if r["loss_scale"] != want or r["skipped_steps"] != skipped:
            bad.append(f"{name}: step {r['step']}: scale {r['loss_scale']} skipped "
                       f"{r['skipped_steps']}, GradScaler's rules give {want} and {skipped}")
            break
        scale = want
    first_skips = next(i for i, r in enumerate(steps) if r["skipped_steps"] == i)
    acc = [r for r in recs if r.get("event") == "epoch"][-1]["test_acc"]
    trained = [r["loss"] for r in steps[skipped:]]
    print(f"{name}: {len(steps)} steps, {skipped} skipped ({first_skips} in a row at the start), "
          f"scale 2^40 -> {scale:g}, grown {grown} time(s), loss {trained[0]:.3f} -> "
          f"{trained[-1]:.3f}, test_acc {acc:.4f}")
    if first_skips < 10:
        bad.append(f"{name}: a scale of 2^40 should overflow float16 for 10+ steps")
    if grown < 1:
        bad.append(f"{name}: the scale never grew")
    if not (trained[-1] < 0.8 * trained[0]) or acc < 0.65:
        bad.append(f"{name}: did not recover and train")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
  ;;
*)
  echo "unknown mode $mode"; exit 2 ;;
esac
