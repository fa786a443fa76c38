#!/usr/bin/env python3
"""ddp_torch.py - PyTorch DDP throughput on the same MLP as xtrain's
(784-256-256-10), for lab 3. Run one process per rank under xcollrun (or
torchrun); rank 0 prints one JSON line: backend, world size, samples/s over
the timed updates, and the mean time per update spent in backward (where
DDP's allreduces run).

    xcollrun --nproc-per-node 2 labs/03-dp-vs-ddp/ddp_torch.py --backend xcoll
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["gloo", "xcoll"], default="gloo")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="per rank (DDP's batch is per process)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    if args.backend == "xcoll":
        import xcoll_torch  # noqa: F401  registers the "xcoll" backend
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # random images: the throughput does not depend on the pixels
    gen = torch.Generator().manual_seed(rank)
    x = torch.rand(args.batch_size, 784, generator=gen)
    y = torch.randint(0, 10, (args.batch_size,), generator=gen)
    backward_s = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
            backward_s = 0.0
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        t0 = time.perf_counter()
        loss.backward()  # DDP's bucket allreduces run during and after it
        backward_s += time.perf_counter() - t0
        opt.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({
            "who": f"torch DDP ({args.backend}"
                   + (f", {os.environ.get('XCOLL_BACKEND', 'tcp')}" if args.backend == "xcoll" else "")
                   + ")",
            "world_size": world,
            "samples_per_s": args.steps * args.batch_size * world / elapsed,
            "backward_ms": 1e3 * backward_s / args.steps}))
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # not sys.exit: see labs/README.md (gloo threads at shutdown)


if __name__ == "__main__":
    main()
