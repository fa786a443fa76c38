"""CUDA tensors on the xcoll backend, against gloo's result (gloo stages
CUDA tensors through the host): every rank on cuda:0 (ranks share the
GPU), so a communicator bound to device 0 per rank. Every collective on
float32, bfloat16 and int64; async works and Work.wait() on a stream other
than the default (stream-ordered on nccl_like: wait() makes the current
stream wait, the host goes on); DDP on a small model with parameters equal
gloo's. Without a GPU, or with an xcoll built without CUDA, every rank
exits 77 (skipped) with the reason."""
import sys

import torch
import torch.distributed as dist

if not torch.cuda.is_available():
    print("skipped: no CUDA device (torch.cuda.is_available() is False): "
          "this test needs a GPU", flush=True)
    sys.exit(77)

from common import check_close, finish, init_groups  # noqa: E402

gloo, xcoll, rank, world = init_groups()
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
torch.manual_seed(7 + rank)


def data(dtype, n=4096):
    if dtype.is_floating_point:
        return torch.randn(n, device=dev).to(dtype)
    return torch.randint(-50, 50, (n,), device=dev).to(dtype)


try:
    probe = torch.ones(4, device=dev)
    dist.all_reduce(probe, group=xcoll)
except RuntimeError as e:
    if "not supported" in str(e) or "NOT_SUPPORTED" in str(e):
        print(f"skipped: this xcoll cannot run CUDA tensors: {e}", flush=True)
        sys.exit(77)
    raise

for dtype in (torch.float32, torch.bfloat16, torch.int64):
    rtol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    t = data(dtype)
    kept = t.clone()
    ref_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
    # copy=True: t.to(t.dtype) is t itself, and gloo would reduce t in place
    a, ref = t.clone(), t.to(ref_dtype, copy=True)
    dist.all_reduce(a, group=xcoll)
    dist.all_reduce(ref, group=gloo)
    check_close(f"cuda all_reduce {dtype}", a.cpu().to(ref_dtype), ref.cpu(),
                rtol)
    for root in range(world):
        a, b = t.clone(), t.clone()
        dist.broadcast(a, root, group=xcoll)
        dist.broadcast(b, root, group=gloo)
        check_close(f"cuda broadcast {dtype} root {root}", a.cpu(), b.cpu(), 0)
    out_x = torch.empty(world * t.numel(), dtype=dtype, device=dev)
    out_g = torch.empty_like(out_x)
    dist.all_gather_into_tensor(out_x, t, group=xcoll)
    dist.all_gather_into_tensor(out_g, t, group=gloo)
    check_close(f"cuda all_gather_into_tensor {dtype}", out_x.cpu(),
                out_g.cpu(), 0)
    big = data(dtype, world * 512)
    rs_x = torch.empty(512, dtype=dtype, device=dev)
    dist.reduce_scatter_tensor(rs_x, big, group=xcoll)
    full = big.to(ref_dtype)
    dist.all_reduce(full, group=gloo)
    check_close(f"cuda reduce_scatter_tensor {dtype}", rs_x.cpu().to(ref_dtype),
                full[512 * rank:512 * (rank + 1)].cpu(), rtol)
    r = t.clone()
    dist.reduce(r, 0, group=xcoll)
    if rank == 0:
        check_close(f"cuda reduce {dtype}", r.cpu().to(ref_dtype), ref.cpu(),
                    rtol)
    check_close(f"cuda input unchanged {dtype}", t.cpu(), kept.cpu(), 0)
dist.barrier(group=xcoll)

# A side stream: the collective waits for the work queued before it on the
# current stream, and wait() orders the current stream after it.
side = torch.cuda.Stream()
expect = torch.full((1 << 20,), float(world * (world + 1) / 2), device=dev)
with torch.cuda.stream(side):
    x = torch.empty(1 << 20, device=dev)
    x.fill_(float(rank + 1))  # queued on side, not yet run, maybe
    work = dist.all_reduce(x, group=xcoll, async_op=True)
    work.wait()
    y = x * 1  # queued on side after the collective
side.synchronize()
check_close("all_reduce on a side stream", y.cpu(), expect.cpu(), 0)
fut = dist.all_reduce(x.fill_(1.0), group=xcoll, async_op=True).get_future()
check_close("future on cuda", fut.wait()[0].cpu(),
            torch.full((1 << 20,), float(world)), 0)


# DDP on cuda:0: parameters equal gloo's.
def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10)).to(dev)


models = {n: torch.nn.parallel.DistributedDataParallel(
    make_model(), process_group=g, bucket_cap_mb=0.01)
    for n, g in (("xcoll", xcoll), ("gloo", gloo))}
optims = {n: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
          for n, m in models.items()}
gen = torch.Generator().manual_seed(100 + rank)
for step in range(8):
    xb = torch.randn(16, 32, generator=gen).to(dev)
    yb = torch.randint(0, 10, (16,), generator=gen).to(dev)
    for n, m in models.items():
        optims[n].zero_grad()
        torch.nn.functional.cross_entropy(m(xb), yb).backward()
        optims[n].step()
for (name, px), (_, pg) in zip(models["xcoll"].module.named_parameters(),
                               models["gloo"].module.named_parameters()):
    check_close(f"cuda DDP parameter {name}", px.detach().cpu(),
                pg.detach().cpu(), 1e-6)

torch.cuda.synchronize()
dist.destroy_process_group(xcoll)
dist.destroy_process_group()
finish(f"rank {rank}: CUDA tensors on xcoll match gloo")
