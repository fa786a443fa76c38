#!/usr/bin/env python3
"""gpt_torch.py - the PyTorch reference for bench/gpt.sh: xtrain's gpt in PyTorch.

The model is xtrain's --model gpt (trainer/gpt.c): byte vocabulary (256),
token embedding wte (256, C) + learned position embedding wpe (T, C), both
N(0, 0.02^2); n_layer pre-LayerNorm blocks, each
  x = x + attn.proj(causal_mha(attn.qkv(ln1(x))))   (qkv and proj with bias)
  x = x + mlp.proj(gelu_tanh(mlp.fc(ln2(x))))       (MLP width 4C)
then ln_f and an untied lm_head (256, C) without bias; LayerNorm eps 1e-5,
linear layers with PyTorch's default init. The loss is the mean
cross-entropy of the next byte over all T positions of every window.

Data as trainer/text.c reads it: the regular files of the fortunes directory
(no symlinks, no .dat, no dot files), sorted by name, concatenated; the last
10% of the bytes is validation; the training part is cut into
non-overlapping windows of T+1 bytes. The sampler is
torch.utils.data.DistributedSampler(shuffle=True) (xtrain draws its own
permutation, so the windows are the same set in another order).

AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight_decay as given; xtrain's
defaults for gpt are lr 0.001 and weight decay 0), constant learning rate,
one thread per rank. DistributedDataParallel over gloo with its default
buckets (first bucket 1 MiB, then 25 MiB, as xtrain's DDP).

Launch: under bench/gpt.sh through build/tools/xcollrun (which sets RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun does), or stand-alone with
--world-size N (torch.multiprocessing.spawn). Runs --warmup untimed updates,
then times --steps updates between two barriers and prints one JSON line
(rank 0): {"impl": "torch-ddp-gloo", "samples_per_s": ..., "step_ms": ...}.

--strategy fsdp tries torch.distributed.fsdp (FULL_SHARD, one unit per
block) instead; --check-fsdp only tries the import. When FSDP cannot be
used the JSON line says why ({"fsdp": "unavailable", "reason": ...}) and
the exit status is 3. Debian 12's python3-torch 1.13 fails to import it
under Python 3.11 (a dataclasses ValueError in torch.distributed._shard).
"""
import argparse
import json
import math
import os
import sys

try:
    import torch
except ImportError:
    # Debian's python3-torch lives in /usr/bin/python3; PATH may hold another.
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3" \
            and not os.environ.get("XTRAIN_TORCH_REEXEC"):
        os.environ["XTRAIN_TORCH_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print(json.dumps({"error": "torch is not installed (apt-get install python3-torch)"}))
    sys.exit(77)
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_common

VOCAB = 256
FORTUNES = "/usr/share/games/fortunes"


def load_corpus(data_file, data_dir):
    """The bytes xtrain trains on: one file, or a directory as text.c reads it."""
    if data_file:
        with open(data_file, "rb") as f:
            return f.read()
    names = []
    for name in os.listdir(os.fsencode(data_dir)):
        if name.startswith(b".") or name.endswith(b".dat"):
            continue
        path = os.path.join(os.fsencode(data_dir), name)
        st = os.lstat(path)  # the .u8 names are symlinks to the plain files
        if (st.st_mode & 0o170000) == 0o100000:
            names.append(name)
    names.sort()  # bytewise, as strcmp
    blob = bytearray()
    for name in names:
        with open(os.path.join(os.fsencode(data_dir), name), "rb") as f:
            blob += f.read()
    return bytes(blob)


def train_windows(corpus, context):
    """(count, T+1) uint8 windows of the training part (text_split with 0.1)."""
    val_size = int(float(len(corpus)) * 0.1)
    train = corpus[:len(corpus) - val_size]
    window = context + 1
    count = len(train) // window
    data = torch.frombuffer(bytearray(train[:count * window]), dtype=torch.uint8)
    return data.view(count, window)


class Attention(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.n_head
        # packed as xtrain's (B, T, 3C): q, k, v, each heads of C/NH
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c, 4 * c)
        self.proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = Attention(c, n_head)
        self.ln2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Parameter names as xtrain's: wte, wpe, h.<l>.*, ln_f, lm_head."""

    def __init__(self, n_layer, n_head, c, context):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, c)
        self.wpe = nn.Embedding(context, c)
        nn.init.normal_(self.wte.weight, mean=0.0, std=0.02)
        nn.init.normal_(self.wpe.weight, mean=0.0, std=0.02)
        self.h = nn.ModuleList(Block(c, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.lm_head = nn.Linear(c, VOCAB, bias=False)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def fsdp_import():
    """(module, None) or (None, the reason it cannot be imported)."""
    try:
        import torch.distributed.fsdp as fsdp
        return fsdp, None
    except Exception as e:  # noqa: BLE001 - the reason is what we report
        return None, "import torch.distributed.fsdp failed: %s: %s" % (
            type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def unavailable(reason, args, rank=0):
    if rank == 0:
        print(json.dumps({"impl": "torch-fsdp-gloo", "fsdp": "unavailable",
                          "torch": torch.__version__,
                          "python": sys.version.split()[0], "reason": reason}),
              flush=True)
    sys.exit(3)


def wrap_fsdp(model):
    fsdp, reason = fsdp_import()
    if fsdp is None:
        return None, reason
    try:
        import functools
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        policy = functools.partial(transformer_auto_wrap_policy,
                                   transformer_layer_cls={Block})
        wrapped = fsdp.FullyShardedDataParallel(
            model, auto_wrap_policy=policy,
            sharding_strategy=fsdp.ShardingStrategy.FULL_SHARD,
            device_id=None)
        return wrapped, None
    except Exception as e:  # noqa: BLE001
        return None, "FullyShardedDataParallel on CPU failed: %s: %s" % (
            type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def worker(rank, world_size, args):
    torch_common.init_gloo(rank, world_size, args.threads)
    windows = train_windows(load_corpus(args.data_file, args.data_dir), args.context)
    torch.manual_seed(args.seed)
    model = GPT(args.n_layer, args.n_head, args.d_model, args.context)
    if args.strategy == "fsdp":
        net, reason = wrap_fsdp(model)
        if net is None:
            unavailable(reason, args, rank)
    else:
        net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=args.weight_decay)
    sampler = torch.utils.data.DistributedSampler(
        range(windows.shape[0]), num_replicas=world_size, rank=rank,
        shuffle=True, seed=args.seed)
    sampler.set_epoch(0)
    order = torch.tensor(list(iter(sampler)), dtype=torch.long)
    B = args.batch_size
    per_epoch = len(order) // B
    T = args.context

    def step(i):
        j = i % per_epoch
        w = windows[order[j * B:(j + 1) * B]].long()
        opt.zero_grad(set_to_none=False)
        loss = net(w[:, :T], w[:, 1:])
        loss.backward()
        opt.step()
        return loss

    try:
        elapsed, loss = torch_common.timed_steps(step, args.warmup, args.steps)
    except Exception as e:  # noqa: BLE001 - FSDP on CPU may fail only here
        if args.strategy != "fsdp":
            raise
        unavailable("FullyShardedDataParallel step on CPU failed: %s: %s" % (
            type(e).__name__, str(e).splitlines()[0] if str(e) else ""), args, rank)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({
            "impl": "torch-%s-gloo" % args.strategy, "torch": torch.__version__,
            "world_size": world_size, "batch_size": B, "parameters": params,
            "windows": int(windows.shape[0]), "warmup": args.warmup,
            "steps": args.steps, "step_ms": 1e3 * elapsed / args.steps,
            "samples_per_s": args.steps * B * world_size / elapsed,
            "loss": float(loss)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--check-fsdp", action="store_true",
                   help="only try to import torch.distributed.fsdp and say so")
    p.add_argument("--world-size", type=int, default=1,
                   help="ranks to spawn when not launched with RANK/WORLD_SIZE set")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="windows per rank")
    p.add_argument("--steps", type=int, default=50, help="timed updates")
    p.add_argument("--warmup", type=int, default=10, help="untimed updates first")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=FORTUNES)
    p.add_argument("--data-file")
    args = p.parse_args()
    if args.d_model % args.n_head:
        p.error("--d-model must be divisible by --n-head")
    if args.check_fsdp:
        fsdp, reason = fsdp_import()
        if fsdp is None:
            unavailable(reason, args)
        print(json.dumps({"impl": "torch-fsdp-gloo", "fsdp": "importable",
                          "torch": torch.__version__,
                          "python": sys.version.split()[0]}))
        return
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        torch_common.spawn(worker, args.world_size, args)


if __name__ == "__main__":
    main()
