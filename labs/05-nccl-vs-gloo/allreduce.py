"""Lab 5: NCCL vs Gloo internals. The same allreduce through
torch.distributed on xcoll, with XCOLL_BACKEND=tcp (Gloo's way: a CPU thread
runs the algorithm over sockets) or nccl_like (NCCL's way: a ring of
channels, FIFO slots and a proxy thread). Prints latency and bus bandwidth
per size. Run with torchrun (or xcollrun):

    XCOLL_BACKEND=nccl_like XCOLL_DEBUG=INFO \\
      torchrun --standalone --nproc-per-node 2 labs/05-nccl-vs-gloo/allreduce.py
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import xcoll_torch  # registers the "xcoll" backend

parser = argparse.ArgumentParser()
parser.add_argument("--max-bytes", type=int, default=16 << 20)
parser.add_argument("--iters", type=int, default=20)
args = parser.parse_args()

dist.init_process_group("xcoll")
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"xcoll backend underneath: {xcoll_torch.transport()}, "
          f"{world} ranks", flush=True)
    print(f"{'bytes':>10} {'time us':>10} {'algbw GB/s':>11} "
          f"{'busbw GB/s':>11}", flush=True)

size = 8
while size <= args.max_bytes:
    x = torch.ones(size // 4)
    for _ in range(3):  # warm up: connections, buffers
        dist.all_reduce(x)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(x)
    seconds = (time.perf_counter() - start) / args.iters
    algbw = size / seconds / 1e9
    # busbw: bytes each rank's link carries in a ring allreduce, 2 (n-1) / n
    # of the buffer, per second (nccl-tests' definition).
    busbw = algbw * 2 * (world - 1) / world
    # The result is right too: every rank contributes rank + 1.
    t = torch.full((size // 4,), float(rank + 1))
    dist.all_reduce(t)
    assert t[0].item() == world * (world + 1) / 2
    if rank == 0:
        print(f"{size:>10} {seconds * 1e6:>10.1f} {algbw:>11.3f} "
              f"{busbw:>11.3f}", flush=True)
    size *= 4
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # not sys.exit: see labs/README.md (gloo threads at shutdown)
