#!/usr/bin/env python3
"""torch_gpt_loss_curve.py XTRAIN XCOLLRUN [STEPS]

xtrain's --model gpt against PyTorch's, as torch_loss_curve.py does for
the MLP: xtrain writes its initial gpt (--export-init); PyTorch loads it
into bench/gpt_torch.py's GPT (the reference bench/gpt.sh times), reads
the same windows of the same text in the same order (--sampler
sequential: windows 0..15, 16..31, ...), trains with the same AdamW
(lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, decoupled)
and batch 16, and both log the mean cross-entropy of every update before
it is applied. The two curves must agree at every one of STEPS (50)
updates within float32 summation order: relative difference <= 1e-4. Done
for one process and for 2-rank DDP (2 x 8 = the same 16 windows per
update). One thread per process on both sides.

The text is generated here (words drawn from a fixed list with a fixed
seed), so the test needs no corpus. Exit 77 (ctest's SKIP_RETURN_CODE)
when torch cannot be imported.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    # Debian's python3-torch lives in /usr/bin/python3; PATH may hold another.
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3" \
            and not os.environ.get("XTRAIN_TORCH_REEXEC"):
        os.environ["XTRAIN_TORCH_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("torch is not installed (apt-get install python3-torch): skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
sys.path.insert(0, HERE)
import gpt_torch  # noqa: E402  bench/gpt_torch.py's GPT
from torch_loss_curve import compare, read_safetensors, xtrain_curve  # noqa: E402

N_LAYER, N_HEAD, D_MODEL, CONTEXT = 2, 4, 64, 32
BATCH = 16
LR, WEIGHT_DECAY = 1e-3, 0.01


def write_text(path, size):
    words = ("the of and to in is was that for on with as by at from his her "
             "it an be this which or are had not but were they have one all "
             "their there been has when who will more no if out so said what "
             "up its about into than them can only other new some could time "
             "these two may then do first any my now such like our over man "
             "me even most made after also did many before must through back "
             "years where much your way well down should because each just "
             "those people how too little state good very make world still "
             "own see men work long get here between both life being under "
             "never day same another know while last might us great old year "
             "off come since against go came right used take three").split()
    r = random.Random(0)
    out = []
    n = 0
    while n < size:
        sentence = " ".join(r.choice(words) for _ in range(r.randint(4, 14)))
        sentence = sentence[0].upper() + sentence[1:] + ". "
        out.append(sentence)
        n += len(sentence)
    with open(path, "w") as f:
        f.write("".join(out)[:size])


def torch_name(name):
    """xtrain's tensor name to the GPT module's: wte -> wte.weight,
    h0.ln1.weight -> h.0.ln1.weight."""
    if name in ("wte", "wpe"):
        return name + ".weight"
    if name.startswith("h") and name[1].isdigit():
        layer, rest = name[1:].split(".", 1)
        return "h.%s.%s" % (layer, rest)
    return name


def torch_curve(init, corpus, steps):
    torch.set_num_threads(1)
    model = gpt_torch.GPT(N_LAYER, N_HEAD, D_MODEL, CONTEXT)
    model.load_state_dict({torch_name(k): v for k, v in init.items()})
    windows = gpt_torch.train_windows(corpus, CONTEXT).long()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=WEIGHT_DECAY)
    losses = []
    for s in range(steps):
        w = windows[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = model(w[:, :-1], w[:, 1:])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    xtrain, xcollrun = sys.argv[1:3]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    tmp = tempfile.mkdtemp()
    text = os.path.join(tmp, "text.txt")
    # steps windows of CONTEXT + 1 bytes per batch, then 10% validation
    write_text(text, int(steps * BATCH * (CONTEXT + 1) / 0.9) + 4096)
    with open(text, "rb") as f:
        corpus = f.read()
    init_path = os.path.join(tmp, "init.safetensors")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    common = ["--model", "gpt", "--n-layer", str(N_LAYER), "--n-head",
              str(N_HEAD), "--d-model", str(D_MODEL), "--context", str(CONTEXT),
              "--data-file", text, "--sampler", "sequential", "--epochs", "1",
              "--max-steps", str(steps), "--test-limit", "16",
              "--optimizer", "adamw", "--lr", str(LR), "--weight-decay",
              str(WEIGHT_DECAY), "--log-every", "1", "--threads", "1",
              "--progress-every", "0", "--seed", "3"]
    one = xtrain_curve([xtrain] + common + ["--batch-size", str(BATCH),
                        "--export-init", init_path, "--log-json",
                        os.path.join(tmp, "one.json")],
                       os.path.join(tmp, "one.json"), env)
    init, _ = read_safetensors(init_path)
    reference = torch_curve(init, corpus, steps)
    print("torch %s" % torch.__version__)
    ok = compare("xtrain gpt none vs torch", one, reference)
    ddp = xtrain_curve([xcollrun, "--nproc-per-node", "2", "--master-port", "0",
                        xtrain] + common + ["--strategy", "ddp", "--batch-size",
                        str(BATCH // 2), "--init-from", init_path, "--log-json",
                        os.path.join(tmp, "ddp.json")],
                       os.path.join(tmp, "ddp.json"), env)
    ok &= compare("xtrain gpt ddp 2x8 vs torch", ddp, reference)
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
