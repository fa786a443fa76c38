"""PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard) on the xcoll backend
ends with the same parameters as on gloo (<= 1e-5 relative): a small
transformer, two copies with the same start, each sharded over a device
mesh of one group, fed the same batches for 5 AdamW steps."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from common import check_close, finish, init_groups

STEPS = 5
gloo, xcoll, rank, world = init_groups()
torch.set_num_threads(1)


def make_model():
    torch.manual_seed(0)  # the same start on every rank and for both groups
    layers = [torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                               batch_first=True)
              for _ in range(2)]
    return torch.nn.Sequential(*layers, torch.nn.Linear(32, 8))


models, optims = {}, {}
for name, group in (("xcoll", xcoll), ("gloo", gloo)):
    model = make_model()
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    models[name] = model
    optims[name] = torch.optim.AdamW(model.parameters(), lr=1e-3)

gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
for step in range(STEPS):
    x = torch.randn(4, 10, 32, generator=gen)
    y = torch.randint(0, 8, (4 * 10,), generator=gen)
    for name, model in models.items():
        optims[name].zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(x).reshape(-1, 8), y)
        loss.backward()
        optims[name].step()

for (n, px), (_, pg) in zip(models["xcoll"].named_parameters(),
                            models["gloo"].named_parameters()):
    check_close(f"parameter {n} after {STEPS} steps", px.full_tensor(),
                pg.full_tensor(), 1e-5)
dist.destroy_process_group(xcoll)
dist.destroy_process_group()
finish(f"rank {rank}: FSDP2 on xcoll matches FSDP2 on gloo after {STEPS} "
       f"steps")
