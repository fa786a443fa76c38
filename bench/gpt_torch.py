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

--strategy fsdp2 shards with PyTorch 2.x's fully_shard, one unit per block
and one at the root, as xtrain's fsdp: --reshard-after-forward on frees
each block's gathered parameters after its forward (xtrain's full_shard),
off keeps them until backward (shard_grad_op); --node-ranks N > 0 shards
within groups of N ranks and replicates across them (HSDP over a 2-D
DeviceMesh (replicate WORLD/N, shard N): xtrain's hybrid_shard over
simulated nodes of N ranks). --backend picks the groups FSDP2 runs on:
gloo, or xcoll (xcoll_torch on PYTHONPATH; the default group stays gloo
for the barriers and the report). bench/fsdp_gpt.sh runs it.

Every strategy's JSON line also gives what each rank holds between steps,
in bytes: parameters, gradients and optimizer state (FSDP2: the local
shards, DTensor.to_local(); the optimizer state counts AdamW's step
counters too), held_bytes the largest sum over the ranks; peak_rss_bytes
(rank 0's ru_maxrss) and its list per rank; and wire_bytes_per_step, the
bytes each rank sends per update by the ring model of docs/trainer.md
("Wire bytes"): for fsdp2 counted from the sizes of the collectives FSDP2
calls (all_gather_single, reduce_scatter_single, all_reduce), the median
over the updates; for ddp 2(W-1)/W of the gradients' bytes (DDP's buckets
all-reduce them all once), not counted.
"""
import argparse
import inspect
import json
import math
import os
import resource
import statistics
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
        impl = ("torch-fsdp2-%s" % args.backend if args.strategy == "fsdp2"
                else "torch-fsdp-gloo")
        print(json.dumps({"impl": impl, "fsdp": "unavailable",
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


def fsdp2_mesh(backend, node_ranks, rank, world_size):
    """The DeviceMesh FSDP2 shards over, its groups on backend: 1-D over all
    ranks, or with node_ranks > 0 2-D (replicate, shard), shard groups of
    node_ranks consecutive ranks, as xtrain's hybrid_shard with
    LOCAL_WORLD_SIZE node_ranks. Every rank makes every group, in one order."""
    from torch.distributed.device_mesh import DeviceMesh
    if backend == "xcoll":
        import xcoll_torch  # noqa: F401  registers the "xcoll" backend
    if node_ranks == 0:
        group = dist.group.WORLD if backend == "gloo" else dist.new_group(backend=backend)
        return DeviceMesh.from_group(group, "cpu")
    layout = torch.arange(world_size).view(world_size // node_ranks, node_ranks)
    shard = replicate = None
    for ranks in layout.tolist():
        group = dist.new_group(ranks, backend=backend)
        shard = group if rank in ranks else shard
    for ranks in layout.t().tolist():
        group = dist.new_group(ranks, backend=backend)
        replicate = group if rank in ranks else replicate
    return DeviceMesh.from_group([replicate, shard], "cpu", mesh=layout,
                                 mesh_dim_names=("replicate", "shard"))


def wrap_fsdp2(model, mesh, reshard_after_forward):
    """fully_shard each block with reshard_after_forward, then the root (wte,
    wpe, ln_f, lm_head) with False: backward needs the root's parameters
    first, so FSDP2 keeps them by default (reshard_after_forward=None), as
    xtrain keeps its last unit under full_shard."""
    from torch.distributed.fsdp import fully_shard
    for block in model.h:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model


class WireCounter:
    """Bytes this rank sends in the collectives FSDP2 calls through
    torch.distributed, by the ring model for W ranks (docs/trainer.md, "Wire
    bytes"): all-gather (W-1)*S (S its input, this rank's part),
    reduce-scatter (W-1)/W*S (S its whole input), all-reduce 2(W-1)/W*S.
    Wraps the module functions, which FSDP2 looks up at each call."""

    def __init__(self):
        self.bytes = 0
        for name, tensor_arg, volume in (
                ("all_gather_single", "input_tensor", lambda w, s: (w - 1) * s),
                ("reduce_scatter_single", "input", lambda w, s: (w - 1) * s // w),
                ("all_reduce", "tensor", lambda w, s: 2 * (w - 1) * s // w)):
            setattr(dist, name, self._wrap(getattr(dist, name), tensor_arg, volume))

    def _wrap(self, call, tensor_arg, volume):
        signature = inspect.signature(call)

        def counted(*a, **kw):
            bound = signature.bind(*a, **kw).arguments
            t = bound[tensor_arg]
            self.bytes += volume(dist.get_world_size(bound.get("group")),
                                 t.numel() * t.element_size())
            return call(*a, **kw)
        return counted


def local_bytes(t):
    """Bytes of t this rank stores: its shard for a DTensor."""
    if t is None:
        return 0
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t.numel() * t.element_size()


def held_bytes(model, opt):
    """(parameters, gradients, optimizer state) bytes this rank holds."""
    params = sum(local_bytes(p) for p in model.parameters())
    grads = sum(local_bytes(p.grad) for p in model.parameters())
    optim = sum(local_bytes(v) for state in opt.state.values()
                for v in state.values() if isinstance(v, torch.Tensor))
    return params, grads, optim


def worker(rank, world_size, args):
    torch_common.init_gloo(rank, world_size, args.threads)
    windows = train_windows(load_corpus(args.data_file, args.data_dir), args.context)
    torch.manual_seed(args.seed)
    model = GPT(args.n_layer, args.n_head, args.d_model, args.context)
    wire = None
    if args.strategy == "fsdp":
        net, reason = wrap_fsdp(model)
        if net is None:
            unavailable(reason, args, rank)
    elif args.strategy == "fsdp2":
        if args.node_ranks < 0 or (args.node_ranks and world_size % args.node_ranks):
            raise SystemExit("gpt_torch.py: --node-ranks %d must divide the %d ranks"
                             % (args.node_ranks, world_size))
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except Exception as e:  # noqa: BLE001 - torch 1.13 raises ValueError
            unavailable("import fully_shard (FSDP2, PyTorch >= 2.6) failed: %s: %s" % (
                type(e).__name__, str(e).splitlines()[0] if str(e) else ""), args, rank)
        mesh = fsdp2_mesh(args.backend, args.node_ranks, rank, world_size)
        net = wrap_fsdp2(model, mesh, args.reshard_after_forward == "on")
        wire = WireCounter()
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

    wire_per_step = []

    def step(i):
        j = i % per_epoch
        w = windows[order[j * B:(j + 1) * B]].long()
        sent = wire.bytes if wire else 0
        opt.zero_grad(set_to_none=False)
        loss = net(w[:, :T], w[:, 1:])
        loss.backward()
        opt.step()
        if wire:
            wire_per_step.append(wire.bytes - sent)
        return loss

    try:
        elapsed, loss = torch_common.timed_steps(step, args.warmup, args.steps)
    except Exception as e:  # noqa: BLE001 - FSDP on CPU may fail only here
        if args.strategy != "fsdp":
            raise
        unavailable("FullyShardedDataParallel step on CPU failed: %s: %s" % (
            type(e).__name__, str(e).splitlines()[0] if str(e) else ""), args, rank)
    # Per rank: (parameters, gradients, optimizer) bytes, peak RSS (KiB on Linux)
    mine = held_bytes(model, opt) + (1024 * resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss,)
    ranks = [None] * world_size
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        if wire:
            wire_bytes, wire_source = statistics.median(wire_per_step), "counted"
        else:  # DDP: every gradient all-reduced once, in buckets
            grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
            wire_bytes = 2 * (world_size - 1) * grad_bytes // world_size
            wire_source = "ring model of the gradients' all-reduce"
        params = sum(p.numel() for p in model.parameters())
        most = max(ranks, key=lambda r: sum(r[:3]))
        backend = args.backend if args.strategy == "fsdp2" else "gloo"
        print(json.dumps({
            "impl": "torch-%s-%s" % (args.strategy, backend), "torch": torch.__version__,
            "world_size": world_size, "batch_size": B, "parameters": params,
            "windows": int(windows.shape[0]), "warmup": args.warmup,
            "steps": args.steps, "step_ms": 1e3 * elapsed / args.steps,
            "samples_per_s": args.steps * B * world_size / elapsed,
            "loss": loss.item(),
            "held_bytes": sum(most[:3]), "held_params_bytes": most[0],
            "held_grads_bytes": most[1], "held_optim_bytes": most[2],
            "held_bytes_per_rank": [sum(r[:3]) for r in ranks],
            "peak_rss_bytes": ranks[0][3],
            "peak_rss_bytes_per_rank": [r[3] for r in ranks],
            "wire_bytes_per_step": int(wire_bytes), "wire_source": wire_source}),
            flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", choices=["ddp", "fsdp", "fsdp2"], default="ddp")
    p.add_argument("--backend", choices=["gloo", "xcoll"], default="gloo",
                   help="fsdp2: the process groups it shards over")
    p.add_argument("--reshard-after-forward", choices=["on", "off"], default="on",
                   help="fsdp2: on as full_shard, off as shard_grad_op")
    p.add_argument("--node-ranks", type=int, default=0,
                   help="fsdp2: shard within groups of N ranks, replicate "
                        "across them (HSDP); 0 shards over all")
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
        sys.stdout.flush()
        os._exit(0)  # not a return: see labs/README.md (gloo threads at shutdown)
    else:
        torch_common.spawn(worker, args.world_size, args)


if __name__ == "__main__":
    main()
