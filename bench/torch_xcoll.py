#!/usr/bin/env python3
"""torch_xcoll.py - PyTorch on the xcoll backend against gloo, in one run.

Every rank creates three process groups over the same processes: gloo (the
default group), xcoll with XCOLL_BACKEND=tcp and xcoll with nccl_like (the
variable is read when each group is created). Then, group by group and
round after round (so that a busy machine slows all of them alike):
- allreduce latency: in-place float32 sum of --small bytes (default 8);
- allreduce busbw: of --large bytes (default 4 MiB), busbw = bytes / time x
  2 (n-1) / n (nccl-tests' definition);
- DDP training throughput: the same MLP (784-256-256-10), the same batch per
  rank and the same synthetic inputs, SGD with momentum, samples/s over all
  ranks.
Times are the mean per call on the slowest rank; each figure is the median
over --rounds rounds. Rank 0 prints one JSON line per figure and a table.

    PYTHONPATH=build/integrations/torch XCOLLRUN_PYTHON=/usr/bin/python3 \\
      build/tools/xcollrun --nproc-per-node 2 --master-port 0 bench/torch_xcoll.py
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import xcoll_torch  # registers the "xcoll" backend

parser = argparse.ArgumentParser()
parser.add_argument("--small", type=int, default=8, help="bytes")
parser.add_argument("--large", type=int, default=4 << 20, help="bytes")
parser.add_argument("--small-iters", type=int, default=200)
parser.add_argument("--large-iters", type=int, default=10)
parser.add_argument("--batch", type=int, default=64, help="per rank")
parser.add_argument("--steps", type=int, default=20, help="DDP steps timed")
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--transports", default="tcp,nccl_like")
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
groups = {"gloo": dist.group.WORLD}
for transport in args.transports.split(","):
    os.environ["XCOLL_BACKEND"] = transport
    groups[f"xcoll-{transport}"] = dist.new_group(backend="xcoll")
    assert xcoll_torch.transport(groups[f"xcoll-{transport}"]) == transport


def slowest(seconds):
    """The largest of every rank's time (over gloo: the same for all)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_allreduce(group, nbytes, iters):
    x = torch.ones(max(1, nbytes // 4))
    for _ in range(max(3, iters // 10)):
        dist.all_reduce(x, group=group)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x, group=group)
    return slowest((time.perf_counter() - start) / iters)


def make_ddp(group):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    model = DDP(model, process_group=group)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


gen = torch.Generator().manual_seed(rank)
inputs = torch.randn(args.batch, 784, generator=gen)
labels = torch.randint(0, 10, (args.batch,), generator=gen)
models = {name: make_ddp(group) for name, group in groups.items()}


def time_ddp(name):
    model, optim = models[name]
    for step in range(3 + args.steps):
        if step == 3:
            dist.barrier(group=groups[name])
            start = time.perf_counter()
        optim.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        optim.step()
    return args.steps * args.batch * world / slowest(time.perf_counter() - start)


results = {name: {"small_us": [], "large_busbw": [], "ddp": []}
           for name in groups}
for _ in range(args.rounds):
    for name, group in groups.items():
        r = results[name]
        r["small_us"].append(time_allreduce(group, args.small,
                                            args.small_iters) * 1e6)
        seconds = time_allreduce(group, args.large, args.large_iters)
        r["large_busbw"].append(args.large / seconds / 1e9 * 2 * (world - 1)
                                / world)
        r["ddp"].append(time_ddp(name))

if rank == 0:
    print(f"PyTorch {torch.__version__}, {world} ranks, {os.cpu_count()} "
          f"cores, median of {args.rounds} rounds")
    print(f"| group | allreduce {args.small} B (us) | busbw {args.large >> 20}"
          f" MiB (GB/s) | DDP samples/s (batch {args.batch}/rank) |")
    print("|---|---|---|---|")
    for name, r in results.items():
        row = {k: statistics.median(v) for k, v in r.items()}
        print(f"| {name} | {row['small_us']:.1f} | {row['large_busbw']:.3f} | "
              f"{row['ddp']:.0f} |")
        print(json.dumps({"group": name, "world_size": world,
                          "small_bytes": args.small, "large_bytes": args.large,
                          "batch": args.batch, **{k: [round(x, 3) for x in v]
                                                  for k, v in r.items()}}))
for name in list(groups)[1:]:
    dist.destroy_process_group(groups[name])
dist.destroy_process_group()
