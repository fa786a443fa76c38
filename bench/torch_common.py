"""torch_common.py - the torch.distributed setup that the PyTorch references
bench/torch_train.py and bench/gpt_torch.py share.

One gloo process group per run, its ranks started either by a launcher that
sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (build/tools/xcollrun,
torchrun) or by spawn() on this host; and the timed loop both report: untimed
warmup updates, then the timed ones between two barriers, so that every rank
starts and stops the clock together.
"""
import os
import socket
import time

import torch
import torch.distributed as dist


def free_port():
    """A TCP port of 127.0.0.1 that is free now, for MASTER_PORT."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank, world_size, threads):
    """Join the gloo process group as rank of world_size, with threads
    intra-op threads. MASTER_ADDR and MASTER_PORT come from the environment
    (the launcher's, or spawn()'s)."""
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def _spawned(rank, worker, world_size, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    worker(rank, world_size, args)


def spawn(worker, world_size, args):
    """Run worker(rank, world_size, args) in world_size processes of this
    host (torch.multiprocessing.spawn), meeting on a free local port; returns
    when all have finished, and raises if one failed."""
    import torch.multiprocessing as mp
    mp.spawn(_spawned, args=(worker, world_size, free_port(), args),
             nprocs=world_size, join=True)


def timed_steps(step, warmup, steps):
    """Call step(i) for i in 0..warmup-1 untimed, then for the next steps
    values of i between two barriers. Returns (seconds the timed steps took,
    the last step's return value)."""
    for i in range(warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    result = None
    for i in range(steps):
        result = step(warmup + i)
    dist.barrier()
    return time.perf_counter() - t0, result
