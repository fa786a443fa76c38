"""Every collective of the xcoll backend against gloo's result, in the same
processes: allreduce (sum, avg, min, max, product; band, bor, bxor on
integers; premul_sum against gloo's sum times the factor) on several dtypes,
broadcast from every root, allgather and all_gather_into_tensor,
reduce_scatter and reduce_scatter_tensor, reduce, barrier; async works
(is_completed, wait, get_future); calls the backend does not offer raise an
error naming the call."""
import torch
import torch.distributed as dist

from common import check_close, fail, init_groups

gloo, xcoll, rank, world = init_groups()
torch.manual_seed(1234 + rank)


def data(dtype, n=1000):
    if dtype.is_floating_point:
        return torch.randn(n).to(dtype)
    return torch.randint(-50, 50, (n,)).to(dtype)


def both(fn, tensor):
    a, b = tensor.clone(), tensor.clone()
    fn(a, xcoll)
    fn(b, gloo)
    return a, b


ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "product": dist.ReduceOp.PRODUCT}
for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
    for name, op in ops.items():
        t = data(dtype, 7 if name == "product" else 1000)
        if name == "product" and dtype.is_floating_point:
            t = 1 + t / 10  # keep the product of a few ranks tame
        a, b = both(lambda x, g: dist.all_reduce(x, op=op, group=g), t)
        check_close(f"all_reduce {name} {dtype}", a, b, 1e-5)

# gloo has no AVG: compare with its SUM divided by the world size.
for dtype in (torch.float32, torch.float64):
    t = data(dtype)
    a = t.clone()
    dist.all_reduce(a, op=dist.ReduceOp.AVG, group=xcoll)
    b = t.clone()
    dist.all_reduce(b, group=gloo)
    check_close(f"all_reduce avg {dtype}", a, b / world, 1e-6)

# Bitwise ops on integers: gloo has them too.
bitwise = {"band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
           "bxor": dist.ReduceOp.BXOR}
for dtype in (torch.int32, torch.int64, torch.uint8):
    for name, op in bitwise.items():
        t = torch.randint(0, 127, (1000,)).to(dtype)
        a, b = both(lambda x, g: dist.all_reduce(x, op=op, group=g), t)
        if not torch.equal(a, b):
            fail(f"all_reduce {name} {dtype}: differs from gloo's")

# PREMUL_SUM (gloo has none): gloo's sum of the inputs times the factor,
# with the factor a number or a tensor; on all_reduce, reduce_scatter_tensor
# and reduce.
# (PyTorch 1.13 takes the tensor form as a list, one tensor per device.)
for factor in (0.25, [torch.tensor([0.5])]):
    value = factor if isinstance(factor, float) else factor[0].item()
    premul = dist._make_nccl_premul_sum(factor)
    t = data(torch.float64)
    a = t.clone()
    dist.all_reduce(a, op=premul, group=xcoll)
    b = t.clone()
    dist.all_reduce(b, group=gloo)
    check_close(f"all_reduce premul_sum {value}", a, b * value, 1e-9)
    out = torch.empty(10, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, t[:10 * world], op=premul, group=xcoll)
    check_close(f"reduce_scatter_tensor premul_sum {value}", out,
                (b[:10 * world] * value)[10 * rank:10 * (rank + 1)], 1e-9)
    r = t.clone()
    dist.reduce(r, 0, op=premul, group=xcoll)
    if rank == 0:
        check_close(f"reduce premul_sum {value}", r, b * value, 1e-9)
t = torch.randint(-50, 50, (1000,), dtype=torch.int32)
a, b = t.clone(), t.clone()
dist.all_reduce(a, op=dist._make_nccl_premul_sum(3.0), group=xcoll)
dist.all_reduce(b, group=gloo)
if not torch.equal(a, b * 3):
    fail("all_reduce premul_sum int32: not 3 times gloo's sum")

# bfloat16 reduces in float32 and rounds once: close to gloo's float32 sum
# of the same values (gloo 1.13 has no bfloat16 sum).
t = data(torch.float32).to(torch.bfloat16)
a = t.clone()
dist.all_reduce(a, group=xcoll)
b = t.float()
dist.all_reduce(b, group=gloo)
check_close("all_reduce sum bfloat16", a.float(), b, 1e-2)

# A non-contiguous tensor is reduced through a contiguous copy.
t = data(torch.float32).reshape(20, 50).t()
a, b = both(lambda x, g: dist.all_reduce(x, group=g), t)
check_close("all_reduce non-contiguous", a, b, 1e-5)

for root in range(world):
    t = data(torch.float32)
    a, b = both(lambda x, g: dist.broadcast(x, root, group=g), t)
    check_close(f"broadcast root {root}", a, b, 0)
    a, b = both(lambda x, g: dist.reduce(x, root, group=g), t)
    if rank == root:
        check_close(f"reduce root {root}", a, b, 1e-5)

t = data(torch.float32, 333)
outs_x = [torch.empty_like(t) for _ in range(world)]
outs_g = [torch.empty_like(t) for _ in range(world)]
dist.all_gather(outs_x, t, group=xcoll)
dist.all_gather(outs_g, t, group=gloo)
for r in range(world):
    check_close(f"all_gather block {r}", outs_x[r], outs_g[r], 0)

big_x = torch.empty(world * 333)
dist.all_gather_into_tensor(big_x, t, group=xcoll)
check_close("all_gather_into_tensor", big_x, torch.cat(outs_g), 0)

inputs = [data(torch.float32, 250) for _ in range(world)]
out_x, out_g = torch.empty(250), torch.empty(250)
dist.reduce_scatter(out_x, inputs, group=xcoll)
# gloo 1.13 offers no reduce_scatter: an allreduce then this rank's block.
full = torch.cat(inputs)
dist.all_reduce(full, group=gloo)
out_g = full[rank * 250:(rank + 1) * 250]
check_close("reduce_scatter", out_x, out_g, 1e-5)

out_x = torch.empty(250)
dist.reduce_scatter_tensor(out_x, torch.cat(inputs), group=xcoll)
check_close("reduce_scatter_tensor", out_x, out_g, 1e-5)

dist.barrier(group=xcoll)

# Async: a work is waited on once, by wait, is_completed or the group.
t = data(torch.float32)
expect = t.clone()
dist.all_reduce(expect, group=gloo)
works = []
for k in range(4):
    x = t.clone()
    works.append((x, dist.all_reduce(x, group=xcoll, async_op=True)))
works[0][1].wait()
fut = works[1][1].get_future()
value = fut.wait()
check_close("future value", value[0], expect, 1e-5)
while not works[2][1].is_completed():
    pass
works[3][1].wait()
for x, w in works:
    if not w.is_completed():
        fail("an async all_reduce is not complete after wait")
    check_close("async all_reduce", x, expect, 1e-5)

# What the backend does not offer: an error naming the call.
unsupported = {
    "alltoall_base": lambda: dist.all_to_all_single(
        torch.empty(world), torch.ones(world), group=xcoll),
    "send": lambda: dist.send(torch.ones(1), (rank + 1) % world, group=xcoll),
    "gather": lambda: dist.gather(torch.ones(1), None if rank else
                                  [torch.empty(1)] * world, 0, group=xcoll),
}
for call, fn in unsupported.items():
    try:
        fn()
    except RuntimeError as e:
        if call not in str(e) or "not supported" not in str(e):
            fail(f"{call}: the error does not name the call: {e}")
    else:
        fail(f"{call} did not raise on the xcoll backend")
try:
    dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND, group=xcoll)
    fail("all_reduce BAND on float32 did not raise")
except RuntimeError as e:
    if "allreduce" not in str(e) or "float32" not in str(e):
        fail(f"BAND on float32: the error does not name the call: {e}")

dist.barrier(group=xcoll)
dist.destroy_process_group(xcoll)
dist.destroy_process_group()
print(f"rank {rank}: every collective matches gloo", flush=True)
