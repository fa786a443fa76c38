"""Every call of the xcoll backend against gloo's result, in the same
processes (gloo the default group, xcoll a new group over the same ranks):
allreduce with every reduce op on float32, bfloat16, int64 (and more),
broadcast and reduce from every root, all_gather and all_gather_into_tensor,
reduce_scatter and reduce_scatter_tensor, barrier; the coalesced forms;
send/recv, batch_isend_irecv, all_to_all(_single), gather and scatter where
the C API offers them (else their errors name them); async works (wait,
is_completed, get_future); the coalescing manager's all_reduce; split_group
over xcoll_comm_split; the errors of unsupported calls and dtypes, a reduce
op named by its name, and tensors of the wrong size."""
import torch
import torch.distributed as dist

import xcoll_torch
from common import check_close, fail, finish, init_groups

gloo, xcoll, rank, world = init_groups()
torch.manual_seed(1234 + rank)
native = xcoll_torch._C


def data(dtype, n=1000):
    if dtype.is_floating_point:
        return torch.randn(n).to(dtype)
    return torch.randint(-50, 50, (n,)).to(dtype)


def both(fn, tensor):
    a, b = tensor.clone(), tensor.clone()
    fn(a, xcoll)
    fn(b, gloo)
    return a, b


def tol(dtype):
    return {torch.bfloat16: 1e-2, torch.float16: 1e-3}.get(dtype, 1e-5)


ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "product": dist.ReduceOp.PRODUCT}
for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32,
              torch.int64):
    for name, op in ops.items():
        t = data(dtype, 7 if name == "product" else 1000)
        if name == "product" and dtype.is_floating_point:
            t = 1 + t / 10  # keep the product of a few ranks tame
        if dtype == torch.bfloat16:
            # gloo sums bfloat16 in bfloat16, xcoll in float32 rounded once:
            # compare both with the float32 sum.
            a = t.clone()
            dist.all_reduce(a, op=op, group=xcoll)
            b = t.float()
            dist.all_reduce(b, op=op, group=gloo)
            check_close(f"all_reduce {name} bfloat16", a.float(), b, 1e-2)
            continue
        a, b = both(lambda x, g: dist.all_reduce(x, op=op, group=g), t)
        check_close(f"all_reduce {name} {dtype}", a, b, tol(dtype))

# AVG: against gloo's SUM divided by the world size.
for dtype in (torch.float32, torch.float64):
    t = data(dtype)
    a = t.clone()
    dist.all_reduce(a, op=dist.ReduceOp.AVG, group=xcoll)
    b = t.clone()
    dist.all_reduce(b, group=gloo)
    check_close(f"all_reduce avg {dtype}", a, b / world, 1e-6)

# Bitwise ops on integers, and bool (logical or / and).
bitwise = {"band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
           "bxor": dist.ReduceOp.BXOR}
for dtype in (torch.int32, torch.int64, torch.uint8):
    for name, op in bitwise.items():
        t = torch.randint(0, 127, (1000,)).to(dtype)
        a, b = both(lambda x, g: dist.all_reduce(x, op=op, group=g), t)
        if not torch.equal(a, b):
            fail(f"all_reduce {name} {dtype}: differs from gloo's")
t = torch.rand(100) < 0.3
for name, op in (("sum", dist.ReduceOp.SUM), ("min", dist.ReduceOp.MIN)):
    a = t.clone()
    dist.all_reduce(a, op=op, group=xcoll)
    b = t.to(torch.int32)
    dist.all_reduce(b, op=op, group=gloo)
    if not torch.equal(a, b.bool()):
        fail(f"all_reduce {name} bool: differs from gloo's")

# PREMUL_SUM (gloo has none): gloo's sum times the factor, with the factor
# a number or a tensor; on all_reduce, reduce_scatter_tensor and reduce.
for factor in (0.25, torch.tensor([0.5], dtype=torch.float64)):
    value = float(factor)
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

# A non-contiguous tensor is reduced through a contiguous copy.
t = data(torch.float32).reshape(20, 50).t()
a, b = both(lambda x, g: dist.all_reduce(x, group=g), t)
check_close("all_reduce non-contiguous", a, b, 1e-5)

for dtype in (torch.float32, torch.bfloat16, torch.int64):
    for root in range(world):
        t = data(dtype)
        a, b = both(lambda x, g: dist.broadcast(x, root, group=g), t)
        check_close(f"broadcast {dtype} root {root}", a, b, 0)
        t = data(torch.float32).to(dtype) if dtype != torch.int64 else t
        a = t.clone()
        dist.reduce(a, root, group=xcoll)
        b = t.float() if dtype == torch.bfloat16 else t.clone()
        dist.reduce(b, root, group=gloo)
        if rank == root:
            check_close(f"reduce {dtype} root {root}", a.to(b.dtype), b,
                        tol(dtype))

for dtype in (torch.float32, torch.bfloat16, torch.int64):
    t = data(dtype, 333)
    outs_x = [torch.empty_like(t) for _ in range(world)]
    outs_g = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(outs_x, t, group=xcoll)
    dist.all_gather(outs_g, t, group=gloo)
    for r in range(world):
        check_close(f"all_gather {dtype} block {r}", outs_x[r], outs_g[r], 0)
    big_x = torch.empty(world * 333, dtype=dtype)
    big_g = torch.empty(world * 333, dtype=dtype)
    dist.all_gather_into_tensor(big_x, t, group=xcoll)
    dist.all_gather_into_tensor(big_g, t, group=gloo)
    check_close(f"all_gather_into_tensor {dtype}", big_x, big_g, 0)

for dtype in (torch.float32, torch.int64):
    inputs = [data(dtype, 250) for _ in range(world)]
    out_x, out_g = torch.empty(250, dtype=dtype), torch.empty(250, dtype=dtype)
    dist.reduce_scatter(out_x, inputs, group=xcoll)
    dist.reduce_scatter(out_g, inputs, group=gloo)
    check_close(f"reduce_scatter {dtype}", out_x, out_g, tol(dtype))
    out_x = torch.empty(250, dtype=dtype)
    out_g = torch.empty(250, dtype=dtype)
    dist.reduce_scatter_tensor(out_x, torch.cat(inputs), group=xcoll)
    dist.reduce_scatter_tensor(out_g, torch.cat(inputs), group=gloo)
    check_close(f"reduce_scatter_tensor {dtype}", out_x, out_g, tol(dtype))

dist.barrier(group=xcoll)

# The coalesced forms: allreduce_coalesced (the coalescing manager's
# all_reduce), and the functional collectives' allgather/reduce_scatter
# into tensors.
ts = [data(torch.float32, n) for n in (10, 300, 7)]
expect = [t.clone() for t in ts]
for t in expect:
    dist.all_reduce(t, group=gloo)
got = [t.clone() for t in ts]
xcoll._get_backend(torch.device("cpu")).allreduce_coalesced(got).wait()
for i, (g, e) in enumerate(zip(got, expect)):
    check_close(f"allreduce_coalesced tensor {i}", g, e, 1e-5)

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


def expect_error(call, fn, *words):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        for word in (call,) + words:
            if word not in str(e):
                fail(f"{call}: the error does not say '{word}': {e}")
    else:
        fail(f"{call} did not raise on the xcoll backend")


nxt, prv = (rank + 1) % world, (rank - 1) % world
engine = xcoll_torch.transport(xcoll)


def engine_lacks(calls, fn):
    """Runs fn; True when the xcoll engine underneath does not offer its
    calls (XCOLL_ERR_NOT_SUPPORTED, say nccl_like's send/recv): the error
    must then name the call (one of calls, "|" between them). Every rank
    sees the same, at issue time."""
    try:
        fn()
    except RuntimeError as e:
        if "not supported" not in str(e):
            raise
        if not any(call in str(e) for call in calls.split("|")):
            fail(f"{calls}: the error does not name the call: {e}")
        if rank == 0:
            print(f"{calls}: not offered by {engine}: {str(e)[:160]}",
                  flush=True)
        return True
    return False


def p2p():
    # send/recv around the ring, blocking, against known values.
    out = torch.full((100,), float(rank))
    got = torch.empty(100)
    if rank % 2 == 0:
        dist.send(out, nxt, group=xcoll)
        dist.recv(got, prv, group=xcoll)
    else:
        dist.recv(got, prv, group=xcoll)
        dist.send(out, nxt, group=xcoll)
    check_close("send/recv", got, torch.full((100,), float(prv)), 0)
    # batch_isend_irecv: one xcoll group (coalescing).
    for dtype in (torch.float32, torch.int64):
        send = (torch.arange(50) + 1000 * rank).to(dtype)
        recv = torch.empty(50, dtype=dtype)
        ops_list = [dist.P2POp(dist.isend, send, nxt, group=xcoll),
                    dist.P2POp(dist.irecv, recv, prv, group=xcoll)]
        for w in dist.batch_isend_irecv(ops_list):
            w.wait()
        check_close(f"batch_isend_irecv {dtype}", recv,
                    (torch.arange(50) + 1000 * prv).to(dtype), 0)


def alltoall():
    for dtype in (torch.float32, torch.int64):
        t = data(dtype, 6 * world)
        a, b = torch.empty_like(t), torch.empty_like(t)
        dist.all_to_all_single(a, t, group=xcoll)
        dist.all_to_all_single(b, t, group=gloo)
        check_close(f"all_to_all_single {dtype}", a, b, 0)
        # uneven splits: rank r sends r + p + 1 rows of 3 to peer p
        in_splits = [rank + p + 1 for p in range(world)]
        out_splits = [p + rank + 1 for p in range(world)]
        t = data(dtype, sum(in_splits) * 3).reshape(-1, 3)
        a = torch.empty(sum(out_splits), 3, dtype=dtype)
        b = torch.empty_like(a)
        dist.all_to_all_single(a, t, out_splits, in_splits, group=xcoll)
        dist.all_to_all_single(b, t, out_splits, in_splits, group=gloo)
        check_close(f"all_to_all_single splits {dtype}", a, b, 0)
        ins = [data(dtype, 5 + p) for p in range(world)]
        outs = [torch.empty(5 + rank, dtype=dtype) for _ in range(world)]
        dist.all_to_all(outs, ins, group=xcoll)
        # gloo offers no list form: its all_to_all_single with the splits
        ref = torch.empty((5 + rank) * world, dtype=dtype)
        dist.all_to_all_single(ref, torch.cat(ins), [5 + rank] * world,
                               [5 + p for p in range(world)], group=gloo)
        check_close(f"all_to_all {dtype}", torch.cat(outs), ref, 0)


def gather_scatter():
    for root in range(world):
        t = data(torch.float32, 77)
        gx = [torch.empty(77) for _ in range(world)] if rank == root else None
        gg = [torch.empty(77) for _ in range(world)] if rank == root else None
        dist.gather(t, gx, dst=root, group=xcoll)
        dist.gather(t, gg, dst=root, group=gloo)
        if rank == root:
            check_close(f"gather root {root}", torch.cat(gx), torch.cat(gg), 0)
        src = [data(torch.int64, 33) for _ in range(world)]
        sx = torch.empty(33, dtype=torch.int64)
        sg = torch.empty(33, dtype=torch.int64)
        dist.scatter(sx, src if rank == root else None, src=root, group=xcoll)
        dist.scatter(sg, src if rank == root else None, src=root, group=gloo)
        check_close(f"scatter root {root}", sx, sg, 0)


if native.have_p2p:
    engine_lacks("send|recv", p2p)
else:
    expect_error("send", lambda: dist.send(torch.ones(1), nxt, group=xcoll),
                 "not supported")
if native.have_p2p:
    # The coalescing manager's all_reduce: torch starts a coalescing group
    # (an xcoll group), then calls allreduce_coalesced inside it.
    ts = [data(torch.float32, 13), data(torch.float32, 5)]
    want = [t.clone() for t in ts]
    with dist._coalescing_manager(group=xcoll, device=torch.device("cpu")):
        for t in ts:
            dist.all_reduce(t, group=xcoll)
    for t in want:
        dist.all_reduce(t, group=gloo)
    check_close("coalescing manager all_reduce", torch.cat(ts),
                torch.cat(want), 1e-5)
if native.have_alltoall:
    engine_lacks("alltoall", alltoall)
else:
    expect_error("alltoall_base", lambda: dist.all_to_all_single(
        torch.empty(world), torch.ones(world), group=xcoll), "not supported")
if native.have_gather:
    engine_lacks("gather|scatter", gather_scatter)
else:
    expect_error("gather", lambda: dist.gather(
        torch.ones(1), [torch.empty(1) for _ in range(world)] if rank == 0
        else None, 0, group=xcoll), "not supported")

# Splitting: ProcessGroup.split_group over xcoll_comm_split (torch's
# dist.split_group wants an accelerator; this is the call it makes). Rank 0
# and the last rank form one group, the others are left out.
members = [0, world - 1]
child = xcoll.split_group(members, group_name="xcoll_split_test")
if rank in members:
    if child is None or child.size() != 2:
        fail(f"split_group: rank {rank} got no group of 2")
    t = torch.full((10,), float(rank + 1))
    dist.all_reduce(t, group=child)
    check_close("all_reduce on a split group", t,
                torch.full((10,), float(1 + world)), 0)
elif child is not None:
    fail(f"split_group: rank {rank} is not a member but got a group")
cpu_backend = xcoll._get_backend(torch.device("cpu"))
if not cpu_backend.supports_splitting:
    fail("the backend does not say it supports splitting")

# What the backend does not offer, and bad arguments: the error names the
# call, the dtype, or the reduce op by its name.
expect_error("recvAnysource", lambda: dist.recv(torch.ones(1), group=xcoll),
             "not supported")
expect_error("allreduce", lambda: dist.all_reduce(
    torch.ones(4), op=dist.ReduceOp.BAND, group=xcoll), "float32")
expect_error("allreduce", lambda: dist.all_reduce(
    torch.ones(4, dtype=torch.uint16), group=xcoll), "UInt16")
expect_error("allreduce", lambda: dist.all_reduce(
    torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG, group=xcoll),
    "AVG")

# Sizes come from core's table of collectives: a tensor of the wrong size
# is named, with the size expected.
expect_error("_allgather_base", lambda: dist.all_gather_into_tensor(
    torch.empty(5), torch.ones(3), group=xcoll),
    "output tensor holds 5 elements", f"expected {3 * world}")
expect_error("_reduce_scatter_base", lambda: dist.reduce_scatter_tensor(
    torch.empty(3), torch.ones(5), group=xcoll),
    "input tensor holds 5 elements", f"expected {3 * world}")
expect_error("allgather", lambda: dist.all_gather(
    [torch.empty(3) for _ in range(world - 1)] + [torch.empty(4)],
    torch.ones(3), group=xcoll), f"output tensor {world - 1}", "expected 3")
if native.have_alltoall:
    expect_error("alltoall_base", lambda: dist.all_to_all_single(
        torch.empty(2 * world + 2), torch.ones(2 * world), group=xcoll),
        "output tensor", f"expected {2 * world}")
    expect_error("alltoall_base", lambda: dist.all_to_all_single(
        torch.empty(2 * world + 1), torch.ones(2 * world + 1), group=xcoll),
        "not a multiple of world_size")

dist.barrier(group=xcoll)
dist.destroy_process_group(xcoll)
dist.destroy_process_group()
finish(f"rank {rank}: every collective matches gloo")
