"""Lab 2: DDP basics on Fashion-MNIST (Debian's dataset-fashion-mnist):
DistributedSampler with set_epoch, bucket_cap_mb, gradient accumulation with
no_sync, gradient clipping, checkpoints (latest and best) on rank 0, a
training curve. Run with torchrun (or xcollrun):

    torchrun --standalone --nproc-per-node 2 labs/02-ddp-basics/train.py --backend xcoll
"""
import argparse
import contextlib
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["gloo", "xcoll"], default="xcoll")
parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch", type=int, default=64, help="per rank")
parser.add_argument("--accumulate", type=int, default=2,
                    help="micro-batches per optimizer step (no_sync)")
parser.add_argument("--bucket-cap-mb", type=float, default=1.0)
parser.add_argument("--clip", type=float, default=1.0)
parser.add_argument("--limit", type=int, default=0,
                    help="use only this many training images (0: all)")
parser.add_argument("--out", default="ddp-basics-out")
args = parser.parse_args()

if args.backend == "xcoll":
    import xcoll_torch  # noqa: F401  registers the "xcoll" backend
dist.init_process_group(args.backend)
rank, world = dist.get_rank(), dist.get_world_size()


def read_idx(path):
    """An IDX file (big-endian dims, then uint8 data), gzipped or not."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(kind, limit):
    images = read_idx(os.path.join(args.data, f"{kind}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.data, f"{kind}-labels-idx1-ubyte.gz"))
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255.0).view(-1, 784)
    return TensorDataset((x - 0.286) / 0.353, torch.from_numpy(labels.astype(np.int64)))


train_set = load("train", args.limit)
test_set = load("t10k", args.limit // 4 if args.limit else 0)
# Each rank reads its own 1/world of the data; set_epoch reshuffles it each
# epoch with the same seed on every rank, so the shards stay disjoint.
sampler = DistributedSampler(train_set, num_replicas=world, rank=rank,
                             shuffle=True, seed=0)
loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
# DDP broadcasts rank 0's parameters, then allreduces gradients in buckets of
# about bucket_cap_mb, each started as soon as its gradients are ready.
model = DDP(model, process_group=None, bucket_cap_mb=args.bucket_cap_mb)
optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def evaluate():
    model.eval()
    correct = torch.zeros(2)
    with torch.no_grad():
        for x, y in DataLoader(test_set, batch_size=512):
            correct += torch.tensor([(model(x).argmax(1) == y).sum().item(),
                                     len(y)])
    model.train()
    return correct[0].item() / correct[1].item()


if rank == 0:
    os.makedirs(args.out, exist_ok=True)
curve, best = [], 0.0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # forget this and every epoch sees one order
    start, seen, total_loss, steps = time.perf_counter(), 0, 0.0, 0
    for i, (x, y) in enumerate(loader):
        last_micro = (i + 1) % args.accumulate == 0 or i + 1 == len(loader)
        # no_sync: accumulate gradients locally, allreduce only on the last
        # micro-batch of each step (one allreduce per step, not per batch).
        with contextlib.nullcontext() if last_micro else model.no_sync():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            (loss / args.accumulate).backward()
        seen += len(y)
        total_loss += loss.item()
        if last_micro:
            # Gradients are already averaged over ranks here: every rank
            # clips the same norm and stays in step.
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optim.step()
            optim.zero_grad()
            steps += 1
    seconds = time.perf_counter() - start
    # The mean loss over all ranks: one more allreduce.
    stats = torch.tensor([total_loss / max(1, i + 1)])
    dist.all_reduce(stats, op=dist.ReduceOp.SUM)
    mean_loss = stats.item() / world
    accuracy = evaluate()
    curve.append((epoch, mean_loss, accuracy))
    if rank == 0:
        print(f"epoch {epoch}: loss {mean_loss:.4f} test accuracy "
              f"{accuracy:.4f} last grad norm {norm:.3f} "
              f"{world * seen / seconds:.0f} samples/s ({steps} steps)",
              flush=True)
        # model.module: the bare model, loadable without DDP.
        state = {"epoch": epoch, "model": model.module.state_dict(),
                 "optimizer": optim.state_dict(), "accuracy": accuracy}
        torch.save(state, os.path.join(args.out, "latest.pt"))
        if accuracy > best:
            best = accuracy
            torch.save(state, os.path.join(args.out, "best.pt"))
    # The others wait until rank 0 has written (a restart reads the files).
    dist.barrier()

if rank == 0:
    with open(os.path.join(args.out, "curve.csv"), "w") as f:
        f.write("epoch,loss,accuracy\n")
        for epoch, loss, acc in curve:
            f.write(f"{epoch},{loss:.5f},{acc:.5f}\n")
    print("training curve (loss):")
    top = max(c[1] for c in curve)
    for epoch, loss, acc in curve:
        print(f"  epoch {epoch:2d} {'#' * int(40 * loss / top):40s} {loss:.4f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.plot([c[0] for c in curve], [c[1] for c in curve], label="loss")
        plt.plot([c[0] for c in curve], [c[2] for c in curve], label="accuracy")
        plt.xlabel("epoch")
        plt.legend()
        plt.savefig(os.path.join(args.out, "curve.png"))
    except ImportError:
        print("(matplotlib not installed: the curve is in curve.csv)")
    print(f"checkpoints: {args.out}/latest.pt, {args.out}/best.pt "
          f"(best accuracy {best:.4f})")
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # not sys.exit: see labs/README.md (gloo threads at shutdown)
