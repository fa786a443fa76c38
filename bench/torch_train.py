#!/usr/bin/env python3
"""torch_train.py - the PyTorch DDP (gloo) reference for bench/train.sh.

Trains the same model as xtrain's --model (PyTorch default init): the MLP
(784-256-256-10, ReLU) or the LeNet-5-like CNN of trainer/model.c (conv 5x5
pad 2 to C1 channels, ReLU, 2x2 max pool; conv 5x5 to C2, ReLU, pool; fc
C2*5*5-120-84-10 with ReLUs; C1,C2 as xtrain's --cnn-channels, 16,32), on
Fashion-MNIST with SGD (momentum 0.9) and the mean cross-entropy, per-rank
batch B, one thread per rank, and prints the global training throughput and
the model's parameter count as one JSON line:
{"world_size": W, "samples_per_s": X, "parameters": N, ...}. Data handling
mirrors xtrain: the whole set normalised once in memory, DistributedSampler
order, batches gathered by index.
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


def build_model(args):
    """The model xtrain trains under --model args.model."""
    if args.model == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    c1, c2 = args.cnn_channels
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),                      # (B, 784) -> (B, 1, 28, 28)
        nn.Conv2d(1, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),   # (B, c1, 14, 14)
        nn.Conv2d(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2),  # (B, c2, 5, 5)
        nn.Flatten(),                                      # (B, c2 * 25), NCHW order
        nn.Linear(c2 * 25, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def cnn_channels(value):
    try:
        c1, c2 = (int(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects C1,C2 (e.g. 16,32), got '{value}'")
    if c1 < 1 or c2 < 1:
        raise argparse.ArgumentTypeError(f"channels must be >= 1, got '{value}'")
    return c1, c2


def worker(rank, world_size, args):
    torch_common.init_gloo(rank, world_size, args.threads)
    pixels, n = load_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"), 0x803)
    labels, _ = load_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"), 0x801)
    x = torch.from_numpy(pixels.reshape(n, 784).astype(np.float32) / 255.0)
    x = (x - x.mean()) / x.std()
    y = torch.from_numpy(labels.astype(np.int64))
    torch.manual_seed(args.seed)
    model = build_model(args)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=args.world_size,
                                                  rank=rank, shuffle=True, seed=args.seed)
    sampler.set_epoch(0)
    order = torch.tensor(list(iter(sampler)))
    B = args.batch_size
    steps_per_epoch = len(order) // B
    first_loss = []

    def step(i):
        idx = order[(i % steps_per_epoch) * B:(i % steps_per_epoch + 1) * B]
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if i == 0:
            first_loss.append(float(loss.detach()))  # at the initial parameters
        return loss

    elapsed, loss = torch_common.timed_steps(step, args.warmup, args.steps)
    if rank == 0:
        print(json.dumps({"impl": "torch-ddp-gloo", "model": args.model,
                          "parameters": sum(p.numel() for p in model.parameters()),
                          "world_size": args.world_size,
                          "batch_size": B, "steps": args.steps,
                          "samples_per_s": args.steps * B * args.world_size / elapsed,
                          "first_loss": first_loss[0], "loss": float(loss.detach()),
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--cnn-channels", type=cnn_channels, default=(16, 32), metavar="C1,C2")
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
