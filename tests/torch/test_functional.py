"""The parts of torch.distributed 2.x that reach a backend per device: the
functional collectives DTensor, FSDP2 and torch.compile use
(torch.distributed._functional_collectives: all_reduce, all_gather_tensor,
reduce_scatter_tensor, and their coalesced forms) against gloo's; the
coalescing manager; then the group's lifecycle: a timeout that names
itself, abort from another thread, and shutdown."""
import datetime
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import xcoll_torch
from common import check_close, fail, finish, init_groups

gloo, xcoll, rank, world = init_groups()
torch.manual_seed(99 + rank)

for dtype in (torch.float32, torch.bfloat16, torch.int64):
    t = torch.randn(64).to(dtype) if dtype.is_floating_point else \
        torch.randint(-9, 9, (64,))
    rtol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    ref = t.float() if dtype == torch.bfloat16 else t.clone()
    dist.all_reduce(ref, group=gloo)
    got = funcol.all_reduce(t, "sum", xcoll)
    check_close(f"funcol.all_reduce {dtype}", got.float(), ref.float(), rtol)
    got = funcol.all_gather_tensor(t, 0, xcoll)
    ref = torch.empty(world * 64, dtype=dtype)
    dist.all_gather_into_tensor(ref, t, group=gloo)
    check_close(f"funcol.all_gather_tensor {dtype}", got, ref, 0)
    big = torch.arange(world * 8).to(dtype) * (rank + 1)
    got = funcol.reduce_scatter_tensor(big, "sum", 0, xcoll)
    ref = torch.empty(8, dtype=dtype)
    dist.reduce_scatter_tensor(ref, big.clone(), group=gloo)
    check_close(f"funcol.reduce_scatter_tensor {dtype}", got, ref, rtol)

# Coalesced functional forms (FSDP2's all-gather of several parameters).
ts = [torch.randn(n) for n in (5, 40)]
got = funcol.all_gather_into_tensor_coalesced(ts, xcoll)
for i, t in enumerate(ts):
    ref = torch.empty(world * t.numel())
    dist.all_gather_into_tensor(ref, t, group=gloo)
    check_close(f"all_gather_into_tensor_coalesced {i}", got[i], ref, 0)
bigs = [torch.randn(world * n) for n in (3, 10)]
got = funcol.reduce_scatter_tensor_coalesced(bigs, "sum", [0, 0],
                                             xcoll)
for i, b in enumerate(bigs):
    ref = torch.empty(b.numel() // world)
    dist.reduce_scatter_tensor(ref, b.clone(), group=gloo)
    check_close(f"reduce_scatter_tensor_coalesced {i}", got[i], ref, 1e-5)

# The coalescing manager's all_reduce (allreduce_coalesced underneath).
ts = [torch.randn(n) for n in (3, 100, 17)]
refs = [t.clone() for t in ts]
for r in refs:
    dist.all_reduce(r, group=gloo)
with dist._coalescing_manager(group=xcoll, async_ops=True) as cm:
    for t in ts:
        dist.all_reduce(t, group=xcoll)
cm.wait()
for i, (t, r) in enumerate(zip(ts, refs)):
    check_close(f"coalescing manager all_reduce {i}", t, r, 1e-5)

# A timeout names itself: a group of 2 s whose rank 1 stays away.
# XCOLL_TIMEOUT_S (set by ctest) would win over the group's timeout.
os.environ.pop("XCOLL_TIMEOUT_S", None)
short = dist.new_group(backend="xcoll",
                       timeout=datetime.timedelta(seconds=2))
if rank == 0:
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4), group=short)
        fail("an all_reduce without its peers did not time out")
    except RuntimeError as e:
        took = time.monotonic() - start
        if "allreduce" not in str(e) or "tim" not in str(e).lower():
            fail(f"the timeout's error does not name the call: {e}")
        if took > 20:
            fail(f"a 2 s timeout took {took:.1f} s")
dist.barrier(group=gloo)
dist.destroy_process_group(short)

# abort from another thread wakes a call blocked on the group.
lonely = dist.new_group(backend="xcoll")
if rank == 0:
    work = dist.all_reduce(torch.ones(4), group=lonely, async_op=True)
    threading.Timer(0.5, lambda: lonely.abort()).start()
    try:
        work.wait()
        fail("a work on an aborted group completed")
    except RuntimeError as e:
        if "abort" not in str(e).lower():
            fail(f"the aborted work's error does not say so: {e}")
dist.barrier(group=gloo)
backend = lonely._get_backend(torch.device("cpu"))
lonely.shutdown()
try:
    backend.allreduce([torch.ones(1)])
    fail("a call after shutdown did not raise")
except RuntimeError as e:
    if "shut down" not in str(e):
        fail(f"a call after shutdown: {e}")

dist.destroy_process_group(xcoll)
dist.destroy_process_group()
finish(f"rank {rank}: functional collectives match gloo; timeout, abort and "
       f"shutdown behave")
