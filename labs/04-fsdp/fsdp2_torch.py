"""Lab 4, PyTorch's side: FSDP2 (torch.distributed.fsdp.fully_shard) on gloo
and on xcoll, side by side in the same processes. The same MLP as xtrain's
(784-256-256-10), sharded per layer and at the root (FULL_SHARD: ZeRO-3),
the same batches; prints per rank the bytes of parameters it holds between
steps against the unsharded model's, the time per update on each backend,
and checks that both end with the same parameters.

    torchrun --standalone --nproc-per-node 4 labs/04-fsdp/fsdp2_torch.py
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import xcoll_torch  # registers the "xcoll" backend

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch", type=int, default=64, help="per rank")
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
groups = {"gloo": dist.group.WORLD, "xcoll": dist.new_group(backend="xcoll")}


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


full_bytes = sum(p.numel() * p.element_size()
                 for p in make_model().parameters())
models, optims = {}, {}
for name, group in groups.items():
    model = make_model()
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)  # one unit per layer
    fully_shard(model, mesh=mesh)
    models[name], optims[name] = model, torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9)

shard_bytes = sum(p.to_local().numel() * p.element_size()
                  for p in models["xcoll"].parameters())
print(f"rank {rank}: holds {shard_bytes} B of parameters between steps, "
      f"{full_bytes} B unsharded ({shard_bytes / full_bytes:.2f}; 1/{world} "
      f"is {1 / world:.2f})", flush=True)

gen = torch.Generator().manual_seed(100 + rank)
batches = [(torch.randn(args.batch, 784, generator=gen),
            torch.randint(0, 10, (args.batch,), generator=gen))
           for _ in range(args.steps)]
labels = {"gloo": "gloo", "xcoll": f"xcoll ({xcoll_torch.transport(groups['xcoll'])})"}
for name, model in models.items():
    dist.barrier(group=groups["gloo"])
    start = time.perf_counter()
    for x, y in batches:
        optims[name].zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optims[name].step()
    seconds = (time.perf_counter() - start) / args.steps
    if rank == 0:
        print(f"FSDP2 on {labels[name]}: {seconds * 1e3:.2f} ms per update, "
              f"{world} ranks", flush=True)

worst = 0.0
for px, pg in zip(models["xcoll"].parameters(), models["gloo"].parameters()):
    a, b = px.full_tensor(), pg.full_tensor()
    worst = max(worst, ((a - b).abs().max() / b.abs().max()).item())
assert worst <= 1e-5, f"xcoll and gloo differ by {worst:.3g} (relative)"
if rank == 0:
    print(f"same parameters on both after {args.steps} updates (largest "
          f"relative difference {worst:.1e})", flush=True)
dist.destroy_process_group(groups["xcoll"])
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # not sys.exit: see labs/README.md (gloo threads at shutdown)
