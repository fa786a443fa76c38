"""PyTorch DDP on the xcoll backend ends with the same parameters as DDP on
gloo after K steps (<= 1e-6 relative), in the same processes: two copies of
one model, one wrapped on each group, fed the same batches."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import check_close, finish, init_groups

STEPS = 8
gloo, xcoll, rank, world = init_groups()


def make_model():
    torch.manual_seed(0)  # the same start on every rank and for both groups
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


# A small bucket cap: several buckets, so that allreduces overlap.
models = {name: DDP(make_model(), process_group=group, bucket_cap_mb=0.01)
          for name, group in (("xcoll", xcoll), ("gloo", gloo))}
optims = {name: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
          for name, m in models.items()}

gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
for step in range(STEPS):
    x = torch.randn(16, 32, generator=gen)
    y = torch.randint(0, 10, (16,), generator=gen)
    for name, model in models.items():
        optims[name].zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optims[name].step()

for (n, px), (_, pg) in zip(models["xcoll"].module.named_parameters(),
                            models["gloo"].module.named_parameters()):
    check_close(f"parameter {n} after {STEPS} steps", px.detach(),
                pg.detach(), 1e-6)
dist.destroy_process_group(xcoll)
dist.destroy_process_group()
finish(f"rank {rank}: DDP on xcoll matches DDP on gloo after {STEPS} steps")
