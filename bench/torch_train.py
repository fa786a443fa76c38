#!/usr/bin/env python3
"""torch_train.py - the PyTorch DDP (gloo) reference for bench/train.sh.

Trains the same MLP as xtrain (784-256-256-10, ReLU, PyTorch default init)
on Fashion-MNIST with SGD (momentum 0.9), per-rank batch B, one thread per
rank, and prints the global training throughput as one JSON line:
{"world_size": W, "samples_per_s": X, ...}. Data handling mirrors xtrain:
the whole set normalised once in memory, DistributedSampler order, batches
gathered by index.
"""
import argparse
import gzip
import json
import os
import struct

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

import torch_common


def load_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, count = struct.unpack(">II", data[:8])
    if got != magic:
        raise SystemExit(f"{path}: bad IDX magic {got:#x}")
    header = 16 if magic == 0x803 else 8
    return np.frombuffer(data, dtype=np.uint8, offset=header), count


def worker(rank, world_size, args):
    torch_common.init_gloo(rank, world_size, args.threads)
    pixels, n = load_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"), 0x803)
    labels, _ = load_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"), 0x801)
    x = torch.from_numpy(pixels.reshape(n, 784).astype(np.float32) / 255.0)
    x = (x - x.mean()) / x.std()
    y = torch.from_numpy(labels.astype(np.int64))
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=args.world_size,
                                                  rank=rank, shuffle=True, seed=args.seed)
    sampler.set_epoch(0)
    order = torch.tensor(list(iter(sampler)))
    B = args.batch_size
    steps_per_epoch = len(order) // B

    def step(i):
        idx = order[(i % steps_per_epoch) * B:(i % steps_per_epoch + 1) * B]
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    elapsed, loss = torch_common.timed_steps(step, args.warmup, args.steps)
    if rank == 0:
        print(json.dumps({"impl": "torch-ddp-gloo", "world_size": args.world_size,
                          "batch_size": B, "steps": args.steps,
                          "samples_per_s": args.steps * B * args.world_size / elapsed,
                          "loss": float(loss.detach()), "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    torch_common.spawn(worker, args.world_size, args)


if __name__ == "__main__":
    main()
