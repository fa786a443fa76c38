#!/usr/bin/env python3
"""fsdp.py - lab 4: FSDP's sharding strategies side by side on xtrain.

Runs the same MLP, batch, seed and number of ranks under
  ddp                           (every rank holds everything),
  fsdp --sharding no_shard      (the DDP path, named as FSDP names it),
  fsdp --sharding shard_grad_op (ZeRO-2: parameters kept gathered from
                                 forward to backward),
  fsdp --sharding full_shard    (ZeRO-3: gathered before forward, freed,
                                 gathered again before backward),
  fsdp --sharding hybrid_shard  (full_shard inside each simulated node of
                                 --node-size ranks, allreduce across nodes),
and prints per-rank memory (xtrain's own count of parameters + gradients +
optimizer state held outside a gather, and the most gathered at once), time
per update and the share of communication hidden behind compute; then checks
that every strategy ended with the same parameters as DDP (they compute the
same sums, only in different places).

    python3 labs/04-fsdp/fsdp.py --build build --ranks 4

PyTorch's own FSDP2 on the same MLP, on gloo and xcoll: fsdp2_torch.py.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# hybrid_shard needs nodes: this wrapper gives each rank the LOCAL_* and
# GROUP_* variables of nodes of NODE_SIZE ranks on this one machine
NODE_WRAPPER = """#!/bin/sh
n=$NODE_SIZE
export LOCAL_WORLD_SIZE=$n LOCAL_RANK=$((RANK % n))
export GROUP_RANK=$((RANK / n)) GROUP_WORLD_SIZE=$((WORLD_SIZE / n))
exec "$@"
"""


def run(command, env):
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=600, check=False)
    out = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        sys.exit("fsdp.py: %s failed (%d):\n%s" % (" ".join(command),
                                                  result.returncode, out))
    return out


def read_floats(path):
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--node-size", type=int, default=2,
                        help="ranks per simulated node for hybrid_shard")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    if args.ranks % args.node_size:
        sys.exit("--ranks must be a multiple of --node-size")
    xtrain = os.path.join(args.build, "trainer", "xtrain")
    xcollrun = os.path.join(args.build, "tools", "xcollrun")
    for path in (xtrain, xcollrun):
        if not os.access(path, os.X_OK):
            sys.exit(f"fsdp.py: {path} not found: build xcoll first")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["NODE_SIZE"] = str(args.node_size)
    variants = [("ddp", ["--strategy", "ddp"]),
                ("fsdp no_shard", ["--strategy", "fsdp", "--sharding", "no_shard"]),
                ("fsdp shard_grad_op", ["--strategy", "fsdp", "--sharding", "shard_grad_op"]),
                ("fsdp full_shard", ["--strategy", "fsdp", "--sharding", "full_shard"]),
                ("fsdp hybrid_shard", ["--strategy", "fsdp", "--sharding", "hybrid_shard"])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = os.path.join(tmp, "nodes.sh")
        with open(wrapper, "w") as f:
            f.write(NODE_WRAPPER)
        os.chmod(wrapper, 0o755)
        for name, flags in variants:
            tag = name.replace(" ", "_")
            log = os.path.join(tmp, tag + ".json")
            dump = os.path.join(tmp, tag + ".params")
            prefix = [wrapper] if "hybrid_shard" in flags else []
            out = run([xcollrun, "--nproc-per-node", str(args.ranks), "--master-port", "0"]
                      + prefix + [xtrain] + flags +
                      ["--model", "mlp", "--optimizer", "sgd", "--batch-size", str(args.batch_size),
                       "--threads", "1", "--epochs", "100", "--max-steps", str(args.steps),
                       "--test-limit", "500", "--log-json", log, "--dump-params", dump], env)
            summary = [json.loads(l) for l in open(log) if '"summary"' in l][-1]
            held = [int(l.split(" holds ")[1].split()[0]) for l in out.splitlines()
                    if "memory: rank" in l and " holds " in l]
            rows.append((name, summary, max(held) if held else summary["memory_bytes"],
                         read_floats(dump + ".rank0")))
    ddp_params = rows[0][3]
    ddp_held = rows[0][2]
    print(f"{args.ranks} ranks, MLP 784-256-256-10, per-rank batch {args.batch_size}, "
          f"SGD, {args.steps} updates, {os.cpu_count()} cores")
    print("| strategy | held per rank | vs ddp | most gathered at once | ms/update | hidden | max abs diff vs ddp |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, s, held, params in rows:
        diff = max(abs(a - b) for a, b in zip(params, ddp_params))
        worst = max(worst, diff)
        print("| %s | %.2f MiB | %.3f | %.2f MiB | %.1f | %.0f%% | %.1e |" % (
            name, held / 2**20, held / ddp_held, s.get("peak_gathered_bytes", 0) / 2**20,
            1e3 * s["train_time_s"] / max(s["step"], 1), 100 * s["overlap"], diff))
    # the lab's claim, checked: same parameters, 1/P of the memory
    if worst > 1e-4:
        sys.exit(f"fsdp.py: a strategy ended {worst:.2e} away from DDP's parameters")
    full = [r for r in rows if r[0] == "fsdp full_shard"][0]
    if full[2] > ddp_held / args.ranks * 1.01:
        sys.exit("fsdp.py: full_shard holds more than 1/P of DDP's bytes")
    print("every strategy ended with DDP's parameters; full_shard holds 1/%d of DDP's bytes"
          % args.ranks)


if __name__ == "__main__":
    main()
