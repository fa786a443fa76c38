"""Lab 1: process groups, ranks, world size; init_process_group on gloo and
on xcoll; a first allreduce. Run with torchrun (or xcollrun):

    torchrun --standalone --nproc-per-node 2 labs/01-setup/setup.py --backend xcoll
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["gloo", "xcoll"], default="xcoll")
args = parser.parse_args()

# What the launcher told this process (torchrun and xcollrun set the same).
launcher_vars = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT", "XCOLL_BACKEND"]
env = {name: os.environ.get(name, "(unset)") for name in launcher_vars}

if args.backend == "xcoll":
    import xcoll_torch  # registers the "xcoll" backend

# env:// (the default): rank 0 hosts a TCPStore at MASTER_ADDR:MASTER_PORT,
# every rank joins it, and the backend meets its peers through that store.
dist.init_process_group(args.backend)
rank, world = dist.get_rank(), dist.get_world_size()
group = dist.group.WORLD
# xcoll only: the engine underneath (tcp, ucx, nccl_like)
under = xcoll_torch.transport(group) if args.backend == "xcoll" else "-"
print(f"rank {rank}/{world} backend={dist.get_backend()} under={under} "
      + " ".join(f"{k}={v}" for k, v in env.items()), flush=True)

# The first allreduce: every rank contributes rank + 1; all get the sum.
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
expected = world * (world + 1) / 2
print(f"rank {rank}: all_reduce(rank + 1) = {x.item():g} "
      f"(expected {expected:g})", flush=True)
assert x.item() == expected

# A subgroup: ranks 0 and 1 only. Every rank must call new_group, also the
# ranks that are not in it.
pair = dist.new_group(ranks=[0, 1] if world > 1 else [0])
if rank < 2:
    y = torch.ones(3) * rank
    dist.all_reduce(y, op=dist.ReduceOp.MAX, group=pair)
    print(f"rank {rank}: max over the pair = {y.tolist()}", flush=True)

dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # not sys.exit: see labs/README.md (gloo threads at shutdown)
