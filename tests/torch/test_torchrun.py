"""Launched by torchrun (python -m torch.distributed.run --standalone): the
default group on xcoll, given as "xcoll" or "cpu:xcoll,cuda:xcoll"
(argv[1]), from torchrun's variables and its store alone. Checks that torch
maps both devices to xcoll, an all_reduce, all_gather_into_tensor and
broadcast with known results, and a DDP step."""
import os
import sys

import torch
import torch.distributed as dist

import xcoll_torch  # registers "xcoll"

backend = sys.argv[1] if len(sys.argv) > 1 else "xcoll"
for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
            "TORCHELASTIC_RUN_ID"):
    if var not in os.environ:
        print(f"FAIL: {var} is not set: not run by torchrun?", file=sys.stderr)
        sys.exit(1)
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()


def fail(message):
    print(f"FAIL rank {rank}: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


if dist.get_backend() != backend:
    fail(f"get_backend() is {dist.get_backend()}, not {backend}")
pg = dist.group.WORLD
types = sorted(d.type for d in pg._device_types)
if types != ["cpu", "cuda"]:
    fail(f"the group's device types are {types}, not cpu and cuda")
if pg._get_backend(torch.device("cpu")).name() != "xcoll":
    fail("the cpu backend is not xcoll")

t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
if not torch.equal(t, torch.full((1000,), world * (world + 1) / 2)):
    fail(f"all_reduce: {t[:4]}")
out = torch.empty(world * 3, dtype=torch.int64)
dist.all_gather_into_tensor(out, torch.full((3,), rank, dtype=torch.int64))
if not torch.equal(out, torch.arange(world).repeat_interleave(3)):
    fail(f"all_gather_into_tensor: {out}")
b = torch.full((5,), float(rank))
dist.broadcast(b, world - 1)
if not torch.equal(b, torch.full((5,), float(world - 1))):
    fail(f"broadcast: {b}")

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
loss = model(torch.randn(4, 8) * (rank + 1)).sum()
loss.backward()
grads = [p.grad.clone() for p in model.parameters()]
for g in grads:  # DDP averaged them: every rank holds the same
    ref = g.clone()
    dist.broadcast(ref, 0)
    if not torch.equal(g, ref):
        fail("DDP gradients differ between ranks")

dist.destroy_process_group()
print(f"rank {rank}: {backend} under torchrun on {xcoll_torch.__name__}, "
      f"{world} ranks: ok", flush=True)
